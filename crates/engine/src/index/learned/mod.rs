//! # Learned index (XIndex-style)
//!
//! A concurrent learned index over `u64` keys with variable-length byte values, after XIndex (Tang et al.,
//! PPoPP'20) and the variable-length/snapshot extensions built on it for a partitioned server:
//!
//! * a root 2-stage RMI over the groups' pivots ([`rmi`]);
//! * groups ([`group`]): a sorted key array with inline records, searched by up to eight linear models with
//!   a bounded error, or a B+-tree-like fallback node where the models cannot meet the bound ([`model`]);
//!   a delta buffer per group for inserts ([`buffer`]), its memory recycled between buffers through
//!   lock-free queues the maintenance thread tops up ([`recycle`]); key arrays and records in huge-page
//!   chunks ([`arena`]);
//! * records ([`slot`]): a status word (lock | removed | reference | moved | dead | inline | version)
//!   read optimistically, the newest value of up to 16 bytes inline beside it (a read of the newest value
//!   chases no pointer), and a chain of value versions out of line for snapshots and longer values;
//! * structure changes ([`compact`]): two-phase compaction (references first while writes go on, values
//!   moved second), group splits with root retraining, merges of small adjacent groups ([`merge`]), all
//!   published by pointer swaps and retired through `crossbeam-epoch`;
//! * scans ([`scan`]) and [`Snapshot`]s at one sequence number: a consistent point-in-time view while
//!   writes go on;
//! * behind the `Db` shell ([`family`], [`db_index`], [`checkpoint`]): the sorted records written as a
//!   sealed checkpoint file, models rebuilt on open.
//!
//! Invariants: a group holds at most one record per key that is not dead; readers never take a lock;
//! every structural change publishes new objects and frees old ones only after every thread that could
//! see them has unpinned.

pub mod arena;
pub mod background;
pub mod buffer;
pub mod checkpoint;
pub mod compact;
pub mod core;
pub mod db_index;
pub mod family;
pub mod group;
pub mod merge;
pub mod model;
pub mod recycle;
mod retire;
pub mod rmi;
pub mod scan;
pub mod slot;
mod stats;

#[cfg(test)]
mod snapshot_tests;
#[cfg(test)]
mod tests;

pub use background::Maintainer;
pub use core::{LearnedIndex, LearnedOptions, OwnedSnapshot, Snapshot, SnapshotOf};
pub use stats::LearnedStats;
