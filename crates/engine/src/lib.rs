//! # Strata
//!
//! An embeddable key-value index engine: several index families behind one typed API, on a storage layer
//! with checksummed pages, a buffer pool, a write-ahead log and pluggable file systems.
//!
//! ```
//! # let dir = tempfile::tempdir().unwrap();
//! use strata::{Config, Db, Options};
//! let db = Db::<u64, u64>::create(dir.path().join("db"), &Config::default(), &Options::default()).unwrap();
//! db.insert(&7, &70).unwrap();
//! assert_eq!(db.get(&7).unwrap(), Some(70));
//! ```
//!
//! The API:
//! * [`Db`] (typed keys and values) and [`RawDb`] (encoded bytes): create, open (read-write, read-only,
//!   repair), writes with a [`Durability`], atomic [`Batch`]es, point reads, ordered ranges, range counts and
//!   independent range sampling where the family has them ([`Capabilities`]), checkpoints, `check`, stats.
//! * [`Config`]: the index family and its options ([`IndexConfig`]; options types in [`options`]), key and
//!   value types, page size, default durability — fixed at creation. [`Options`]: a handle's settings.
//! * [`vfs`]: the file systems a database can live on (real files, in memory, fault injection, read-only
//!   overlays) and the I/O counters.
//! * [`Error`]: one error type whose kinds a caller can act on; damage is `Error::Corruption` naming the file
//!   and offset.
//!
//! Index families: a B+-tree with subtree counts (`btree`), a dynamized index of immutable shards
//! (`dynamized`: sampling with deletes, weights), a Bε-tree (`betree`: write-optimized, merges); every family
//! is registered in one place and reachable through [`IndexKind`] / [`IndexConfig`]. Layers, inside: the `Db`
//! shell (manifest, WAL, recovery) over the index families over the storage layer; `docs/format.md` describes
//! every byte on disk.

mod algo;
mod db;
mod error;
pub mod files;
mod index;
#[doc(hidden)]
pub mod lab;
mod storage;
mod types;

pub use db::{
    Batch, Config, Db, DbStats, FORMAT_VERSION, Iter, MAX_SAMPLES_PER_CALL, Options, RawDb,
    RawIter, RawSnapshot, RecoveryInfo, Snapshot,
};
pub use error::{Damage, Error, Result};
pub use index::family::{Capabilities, IndexConfig, IndexKind};
pub use index::{CheckReport, Direction, IndexStats, KeyRange, WriteOp};
pub use types::{Durability, Key, MAX_VALUE_LEN, TypeKind, Value};

/// The options of each index family (fields of [`IndexConfig`]'s variants) and of a handle's background
/// work.
pub mod options {
    pub use crate::index::betree::{BUILTIN_MERGE_OPERATORS, BeTreeOptions};
    pub use crate::index::btree::family::BTreeOptions;
    pub use crate::index::dynamized::{DeletePolicy, DynOptions, DynStats, Layout, RuntimeOptions};
    pub use crate::index::hash::family::{HashOptions, PersistChoice};
    pub use crate::index::learned::{LearnedOptions, LearnedStats};
}

/// File systems a database can live on, and the I/O counters every handle keeps.
pub mod vfs {
    pub use crate::storage::{
        FaultVfs, FileKind, FileMapping, HookedVfs, IoCounts, IoSnapshot, MemVfs, OpenOptions,
        OverlayVfs, StdVfs, Vfs, VfsFile, VfsHook, VfsLock, VfsOp,
    };
}
