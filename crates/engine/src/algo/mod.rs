//! # Shared algorithms
//!
//! Building blocks that several index families use (DESIGN §1): they know nothing about pages or files.
//!
//! * [`alias`]: Walker's alias method (Vose's construction) — O(n) build, O(1) weighted draws; the global
//!   "which shard" step of dynamized sampling and the per-shard weighted set sampler.
//! * [`bloom`]: a Bloom filter with double hashing over xxh3 — no false negatives, false-positive rate set at
//!   construction; the dynamized family keeps one per shard over its tombstones.
//! * [`isam`]: static separator levels over a sorted `u64` array (ISAM), the search structure of in-memory
//!   shards.

pub mod alias;
pub mod bloom;
pub mod isam;
