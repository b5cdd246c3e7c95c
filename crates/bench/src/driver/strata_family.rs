//! Any Strata index family from the engine's registry (`strata-<family>`), with its default options: what a
//! family added to the engine gets in the lab before it has a driver of its own. A [`StrataDriver`] over a
//! [`RawDb`](strata::RawDb) created with `u64` keys, values by [`ValueFormat`](super::ValueFormat), and the
//! bench's cache, page size, durability and O_DIRECT setting.
//!
//! [`capabilities_of`] turns an index configuration's capabilities into the lab's, for this and the
//! families' own drivers.

use super::strata_btree::{open_tree, tree_settings};
use super::{Capabilities, Driver, Engine, EngineOptions};
use crate::error::Result;
use std::path::Path;
use strata::Config;
use strata::{IndexConfig, IndexKind, TypeKind};

/// The lab's capabilities of a Strata database with this index: counts and sampling as the family says,
/// byte-string values if the family takes them with `u64` keys.
pub fn capabilities_of(index: &IndexConfig) -> Capabilities {
    let caps = index.capabilities();
    Capabilities {
        count: caps.count,
        sample: caps.sample,
        byte_values: index.check(TypeKind::U64, TypeKind::Bytes, 4096).is_ok(),
    }
}

/// A registry family with its default options.
#[derive(Debug, Clone)]
pub struct StrataFamily {
    kind: IndexKind,
    name: &'static str,
}

impl StrataFamily {
    /// The engine of family `kind`, named `strata-<family>`.
    pub fn new(kind: IndexKind) -> Self {
        // Engine names are `&'static str`; one small string per family, made once per process.
        static NAMES: std::sync::OnceLock<Vec<(IndexKind, &'static str)>> =
            std::sync::OnceLock::new();
        let names = NAMES.get_or_init(|| {
            IndexKind::ALL
                .iter()
                .map(|&k| {
                    let name: &'static str =
                        Box::leak(format!("strata-{}", k.name()).into_boxed_str());
                    (k, name)
                })
                .collect()
        });
        let name = names
            .iter()
            .find(|(k, _)| *k == kind)
            .map(|(_, n)| *n)
            .expect("every family has a name");
        StrataFamily { kind, name }
    }
}

impl StrataFamily {
    /// The configuration the lab runs: the family's defaults, except the hash family's persistence mode.
    /// Its default (`auto`) `msync`s the region at every write on a disk file (about 2,000 writes/s here),
    /// whatever the durability; the lab runs it in `eadr` mode, the seed's platform (eADR persistent
    /// memory, emulated by the page cache: every write survives a killed process, as at durability
    /// `flush`, and a checkpoint `msync`s the region).
    fn config(&self) -> IndexConfig {
        let defaults = self.kind.default_config();
        if self.kind != IndexKind::Hash {
            return defaults;
        }
        let mut options = defaults.options_json();
        if let Some(map) = options.as_object_mut() {
            map.insert("persist".into(), serde_json::Value::from("eadr"));
        }
        IndexConfig::from_json(self.kind, options).unwrap_or(defaults)
    }
}

impl Engine for StrataFamily {
    fn name(&self) -> &'static str {
        self.name
    }

    fn version(&self) -> String {
        env!("CARGO_PKG_VERSION").to_string()
    }

    fn capabilities(&self) -> Capabilities {
        capabilities_of(&self.config())
    }

    fn ordered(&self) -> bool {
        self.config().capabilities().ordered
    }

    fn settings(&self, opts: &EngineOptions) -> String {
        let config = self.config();
        let options = config.describe();
        let family = if options.is_empty() {
            self.kind.summary().to_string()
        } else {
            format!("{}; {options}", self.kind.summary())
        };
        tree_settings(&family, opts)
    }

    fn open_dir(&self, dir: &Path, opts: &EngineOptions, create: bool) -> Result<Box<dyn Driver>> {
        open_tree(self, dir, opts, create, Config::with_index(self.config()))
    }
}
