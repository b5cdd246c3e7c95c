//! Driver for Strata's Bε-tree family (`strata-betree`): a [`RawDb`] with a Bε-tree index (one node per page,
//! an inner node's page split between about (B/8)^ε pivots and a buffer of messages), `u64` keys and `u64` or
//! byte-string values (by [`ValueFormat`](super::ValueFormat)), the bench's cache budget as its buffer pool and
//! the bench's durability as its default. It is the B+-tree's driver ([`StrataDriver`]) over another index
//! family: the same WAL, checkpoints and I/O counters.
//!
//! No range counts and no sampling: the Bε-tree counts a range by scanning it, so the engine says it cannot
//! (suites that need them skip it, and the driver refuses them); its driver reports no height, which would
//! cost a full scan.
//!
//! [`StrataDriver`]: super::strata_btree::StrataDriver

use super::strata_btree::{open_tree, tree_settings};
use super::{Driver, Engine, EngineOptions};
use crate::error::Result;
use std::path::Path;
use strata::Config;
use strata::IndexConfig;
use strata::options::BeTreeOptions;

/// The `strata-betree` engine with the options of the databases it creates (ε 0.5 and no merge operator by
/// default).
#[derive(Debug, Clone, Default)]
pub struct StrataBeTree {
    options: BeTreeOptions,
}

impl StrataBeTree {
    /// An engine whose databases are created with `options`.
    pub fn new(options: BeTreeOptions) -> Self {
        StrataBeTree { options }
    }

    /// The options of the databases it creates.
    pub fn options(&self) -> &BeTreeOptions {
        &self.options
    }
}

impl Engine for StrataBeTree {
    fn name(&self) -> &'static str {
        "strata-betree"
    }

    fn version(&self) -> String {
        env!("CARGO_PKG_VERSION").to_string()
    }

    fn capabilities(&self) -> super::Capabilities {
        super::capabilities_of(&IndexConfig::BeTree(self.options.clone()))
    }

    fn settings(&self, opts: &EngineOptions) -> String {
        let merge = self.options.merge_operator.as_deref().unwrap_or("none");
        let family = format!(
            "Bε-tree, ε = {}, one node per page, merge operator {merge}",
            self.options.epsilon
        );
        tree_settings(&family, opts)
    }

    fn open_dir(&self, dir: &Path, opts: &EngineOptions, create: bool) -> Result<Box<dyn Driver>> {
        let family = Config::with_index(IndexConfig::BeTree(self.options.clone()));
        open_tree(self, dir, opts, create, family)
    }
}
