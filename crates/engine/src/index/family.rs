//! # The index family registry
//!
//! How the `Db` shell, the CLI and the bench lab learn every index family's name, options and capabilities,
//! and create or open a database's index, without naming a family anywhere else.
//!
//! * [`IndexFamily`]: what a family implements (in its own folder): its options (typed, serde, `Display`),
//!   a check of key/value types, page size and options made before any file exists, its [`Capabilities`],
//!   and `create`/`open` of its index from an [`IndexContext`].
//! * [`IndexKind`] (a family's name) and [`IndexConfig`] (a family with its options: what `Config` and the
//!   manifest hold) are generated from the one list at the bottom of this file. **Adding a family is its
//!   folder plus one line there.**
//!
//! Invariants: a family's options round-trip through JSON (the manifest) and a family refuses, in
//! [`IndexFamily::check`], everything `create` would refuse, so a create that passes the check makes files
//! only for a database it can open again.

use crate::db::Options;
use crate::error::{Error, Result};
use crate::index::OrderedIndex;
use crate::storage::{IoStats, PageFile, PageFileOptions, Vfs};
use crate::types::TypeKind;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::path::Path;
use std::sync::Arc;

/// What a family's index can do. The shell, the CLI and the bench read this instead of matching on the family.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Capabilities {
    /// Exact range counts without a scan (`count_range` in O(log n) or better).
    pub count: bool,
    /// Independent range sampling (`sample_range`).
    pub sample: bool,
    /// Records carry sampling weights (`WriteOp::PutWeighted`).
    pub weighted: bool,
    /// Merges (`WriteOp::Merge`) by a merge operator.
    pub merge: bool,
    /// A bulk loader (`RawDb::bulk_load`).
    pub bulk_load: bool,
    /// `len()` and the statistics are cheap (no scan of the records).
    pub cheap_len: bool,
    /// Keys have an order: scans, ranges, range counts and samples. Without it (a hash index) only point
    /// operations work and the ordered ones are `InvalidArgument`.
    pub ordered: bool,
    /// Point-in-time views (`RawDb::snapshot`): reads through one see exactly the writes before it was
    /// taken while writes go on.
    pub snapshots: bool,
}

/// Everything a family needs to create or open its index in a database directory.
pub struct IndexContext<'a> {
    pub vfs: &'a Arc<dyn Vfs>,
    pub dir: &'a Path,
    pub stats: &'a Arc<IoStats>,
    pub key: TypeKind,
    pub value: TypeKind,
    pub page_size: usize,
    pub direct_io: bool,
    /// The handle's options (cache budget, a family's runtime options).
    pub options: &'a Options,
}

pub use crate::files::PAGE_FILE;

impl IndexContext<'_> {
    /// The database's page file (`data.pages`), created (`create`) or opened.
    pub fn page_file(&self, create: bool) -> Result<PageFile> {
        let path = self.dir.join(PAGE_FILE);
        let opts = PageFileOptions {
            page_size: self.page_size,
            direct: self.direct_io,
        };
        if create {
            PageFile::create(self.vfs, &path, opts, self.stats.clone())
        } else {
            PageFile::open(self.vfs, &path, opts, self.stats.clone())
        }
    }
}

/// One index family. Implemented by a unit struct in the family's folder and listed once in `families!`.
pub trait IndexFamily: Send + Sync + 'static {
    /// The options chosen at creation and recorded in the manifest. Missing fields take their defaults.
    type Options: Clone
        + std::fmt::Debug
        + Default
        + PartialEq
        + Serialize
        + DeserializeOwned
        + std::fmt::Display
        + Send
        + Sync;
    /// The family's name in manifests, on the command line and in statistics.
    fn name(&self) -> &'static str;
    /// One line saying what the family is.
    fn summary(&self) -> &'static str;
    /// Refuses key and value types, page sizes and options the family cannot take (`InvalidArgument`), before
    /// any file is made.
    fn check(
        &self,
        key: TypeKind,
        value: TypeKind,
        page_size: usize,
        options: &Self::Options,
    ) -> Result<()>;
    /// What an index with these options can do.
    fn capabilities(&self, options: &Self::Options) -> Capabilities;
    /// Creates an empty index (its first checkpoint has seqno 0).
    fn create(
        &self,
        ctx: &IndexContext<'_>,
        options: &Self::Options,
    ) -> Result<Box<dyn OrderedIndex>>;
    /// Opens the index at its last checkpoint.
    fn open(
        &self,
        ctx: &IndexContext<'_>,
        options: &Self::Options,
    ) -> Result<Box<dyn OrderedIndex>>;
}

/// Options as JSON (for the manifest and for options given by name on the command line).
fn to_json<T: Serialize>(options: &T) -> serde_json::Value {
    serde_json::to_value(options).expect("index options serialize")
}

/// Typed options from JSON; the message names the family and what is wrong.
fn from_json<T: DeserializeOwned>(family: &str, json: serde_json::Value) -> Result<T> {
    serde_json::from_value(json)
        .map_err(|e| Error::invalid(format!("options of the {family} index: {e}")))
}

macro_rules! families {
    ($( $(#[$doc:meta])* $variant:ident => $family:path; )*) => {
        /// Which index family a database uses.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum IndexKind {
            $( $(#[$doc])* $variant, )*
        }

        /// An index family with its options: what [`Config`](crate::db::Config) and the manifest hold.
        #[derive(Debug, Clone, PartialEq)]
        pub enum IndexConfig {
            $( $(#[$doc])* $variant(<$family as IndexFamily>::Options), )*
        }

        impl IndexKind {
            /// Every family, in registry order.
            pub const ALL: &'static [IndexKind] = &[$(IndexKind::$variant),*];

            /// The family's name.
            pub fn name(self) -> &'static str {
                match self { $(IndexKind::$variant => $family.name(),)* }
            }

            /// One line saying what the family is.
            pub fn summary(self) -> &'static str {
                match self { $(IndexKind::$variant => $family.summary(),)* }
            }

            /// The family with its default options.
            pub fn default_config(self) -> IndexConfig {
                match self { $(IndexKind::$variant => IndexConfig::$variant(Default::default()),)* }
            }
        }

        impl IndexConfig {
            /// The family.
            pub fn kind(&self) -> IndexKind {
                match self { $(IndexConfig::$variant(_) => IndexKind::$variant,)* }
            }

            /// The options as JSON.
            pub fn options_json(&self) -> serde_json::Value {
                match self { $(IndexConfig::$variant(o) => to_json(o),)* }
            }

            /// The family `kind` with options from JSON (missing fields take their defaults).
            pub fn from_json(kind: IndexKind, json: serde_json::Value) -> Result<IndexConfig> {
                Ok(match kind {
                    $(IndexKind::$variant => IndexConfig::$variant(from_json($family.name(), json)?),)*
                })
            }

            /// The options in words (empty for a family without options).
            pub fn describe(&self) -> String {
                match self { $(IndexConfig::$variant(o) => o.to_string(),)* }
            }

            /// See [`IndexFamily::check`].
            pub fn check(&self, key: TypeKind, value: TypeKind, page_size: usize) -> Result<()> {
                match self { $(IndexConfig::$variant(o) => $family.check(key, value, page_size, o),)* }
            }

            /// See [`IndexFamily::capabilities`].
            pub fn capabilities(&self) -> Capabilities {
                match self { $(IndexConfig::$variant(o) => $family.capabilities(o),)* }
            }

            /// Creates (`create`) or opens the index these options describe.
            pub fn instantiate(&self, ctx: &IndexContext<'_>, create: bool) -> Result<Box<dyn OrderedIndex>> {
                match self {
                    $(IndexConfig::$variant(o) => if create {
                        $family.create(ctx, o)
                    } else {
                        $family.open(ctx, o)
                    },)*
                }
            }
        }
    };
}

impl std::str::FromStr for IndexKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        IndexKind::ALL
            .iter()
            .copied()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                Error::invalid(format!(
                    "unknown index kind {s:?} (available: {})",
                    IndexKind::ALL
                        .iter()
                        .map(|k| k.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })
    }
}

impl std::fmt::Display for IndexKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Default for IndexConfig {
    fn default() -> Self {
        IndexKind::ALL[0].default_config()
    }
}

// The registry: one line per family (its `IndexKind` / `IndexConfig` variant and its `IndexFamily`).
families! {
    /// B+-tree with subtree counts (`index::btree`): range counts and sampling in O(log n).
    BTree => crate::index::btree::family::BTreeFamily;
    /// Dynamized ISAM shards (`index::dynamized`): buffer + levels, sampling with deletes, weights.
    Dynamized => crate::index::dynamized::family::DynamizedFamily;
    /// Bε-tree (`index::betree`): write-optimized, larger than memory, merges.
    BeTree => crate::index::betree::family::BeTreeFamily;
    /// Learned index (`index::learned`): XIndex-style, in memory, lock-free reads, u64 keys.
    Learned => crate::index::learned::family::LearnedFamily;
    /// ElimDA-style persistent-memory hash index (`index::hash`): u64 keys and values, no key order.
    Hash => crate::index::hash::family::HashFamily;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_options_round_trip_through_json() {
        for &kind in IndexKind::ALL {
            assert_eq!(kind.name().parse::<IndexKind>().unwrap(), kind);
            let config = kind.default_config();
            assert_eq!(config.kind(), kind);
            let back = IndexConfig::from_json(kind, config.options_json()).unwrap();
            assert_eq!(back, config);
            // Missing fields take their defaults.
            assert_eq!(
                IndexConfig::from_json(kind, serde_json::json!({})).unwrap(),
                config
            );
            assert!(!kind.summary().is_empty());
        }
        assert!("hash-table".parse::<IndexKind>().is_err());
        assert!(
            IndexConfig::from_json(
                IndexKind::Dynamized,
                serde_json::json!({"layout": "spiral"})
            )
            .is_err()
        );
    }
}
