//! # Strata
//!
//! An embeddable key-value index engine: a family of index structures behind one API, on a storage layer with
//! checksummed pages, a buffer pool, a write-ahead log and pluggable file systems.
//!
//! Layers (dependencies point down only):
//! * [`db`]: the `Db` shell: open/create a directory, manifest, WAL, recovery, checkpoints, stats, lock.
//! * [`index`]: index families (today: [`index::btree`], a B+-tree with subtree counts) behind the byte-level
//!   [`index::OrderedIndex`] trait.
//! * [`storage`]: `Vfs` backends, page file, buffer pool, log, I/O counters.

pub mod algo;
pub mod db;
pub mod error;
pub mod files;
pub mod index;
#[doc(hidden)]
pub mod lab;
pub mod storage;
pub mod types;

pub use db::{Batch, Config, Db, DbStats, IndexConfig, IndexKind, Options, RawDb};
pub use error::{Error, Result};
pub use index::Capabilities;
pub use index::{Direction, KeyRange};
pub use types::{Durability, Key, TypeKind, Value};
