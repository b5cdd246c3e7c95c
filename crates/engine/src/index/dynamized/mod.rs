//! # Dynamized indexes
//!
//! A framework that makes a *static* sorted structure dynamic (after Rumbaugh & Xie, "Practical Dynamic
//! Extension for Sampling Indexes", SIGMOD 2023): writes go to a small mutable **buffer**; a full buffer
//! becomes an immutable **shard**, and shards are arranged in **levels** of geometrically growing capacity
//! that are merged by a layout policy (leveling, tiering or Bentley–Saxe). Queries run on every shard and
//! the buffer and combine the results. The framework answers point lookups, exact range counts, ordered
//! scans and — its purpose — independent range sampling (IRS), weighted set sampling (WSS) and weighted
//! range sampling (WIRS), all with deletes.
//!
//! | file | concept |
//! |---|---|
//! | `shard` | the [`Shard`] trait: what a static structure must provide |
//! | `isam_shard` | the in-memory ISAM shard (IRS, range count, scans, point lookup) |
//! | `alias_shard` | the WSS shard: sorted records, one alias table over all weights (O(1) whole-shard draws) |
//! | `wirs_shard` | the WIRS shard: alias-augmented tree (buckets of ⌈ln n⌉ records, alias per bucket/node) |
//! | `run` | records, sorted runs, and the merge that cancels deleted versions |
//! | `buffer` | the mutable buffer: lock-free slot claiming and a lock-free key index |
//! | `tags` | delete tags (one bit per record, set in place) |
//! | `version` | shard slots (shard + tags + Bloom filters) and immutable versions |
//! | `layout` | where flushed shards go; compaction under the delete bound δ |
//! | `core` | [`Dynamized`]: writes, background reconstruction, throttling |
//! | `read` | point lookup, count, scan, and sampling through the [`SamplingQuery`] trait |
//!
//! ## Semantics
//! A map from `u64` keys to `u64` values (plus a weight per record in weighted indexes): a put overwrites,
//! a delete removes. Overwrites and deletes are resolved when their buffer is flushed: the older live version
//! is removed by the delete policy (a tombstone in the new shard, or a tag on the old record).
//!
//! ## Invariants
//! * At most one live record per key across the structure; every tombstone and every tag stands for exactly
//!   one dead record, so counts are exact.
//! * Tombstone ordering: a tombstone is always in a newer shard than the record it deletes; merges run bottom
//!   up so it meets its target before passing it.
//! * Shards and versions are immutable once published (tags only go from clear to set); readers pin a version
//!   and never take a lock.
//! * Level `i` holds at most N_b · s^(i+1) entries (leveling, tiering by run count), and at most a δ share of
//!   its capacity is tombstones or tags after every reconstruction.
//!
//! ## Cost model (n live records, buffer N_b, scale factor s, L = ⌈log_s(n / N_b)⌉ levels)
//! * Insert: O(1) on the writer's path (a slot claim); O(log N_b) to sort plus a Bloom-filtered probe of every
//!   shard per record at flush time, plus amortised merge work O(s · L) (leveling) or O(L) (tiering) record
//!   copies, all on the background worker.
//! * Point lookup: one buffer hash probe, then one Bloom probe per shard and an ISAM search where it hits.
//! * IRS of k samples: O(#shards · log n) preprocessing (two searches per shard), then O(1) per draw plus the
//!   rejection check: one hash probe per buffer and one Bloom probe per newer shard *that has tombstones*.
//!   Expected draws are k / (1 − rejection rate); δ bounds the rate.
//! * Memory: 16 B per record (24 B weighted), ≈ 1.2 B per record of Bloom filter at 1 %, 1 bit per record of
//!   tags, plus the buffers.

pub mod alias_shard;
pub mod buffer;
pub mod core;
pub mod db_index;
pub mod isam_shard;
pub mod layout;
pub mod options;
pub mod persist;
pub mod read;
pub mod run;
pub mod shard;
pub mod shard_file;
pub mod tags;
pub mod version;
pub mod wirs_shard;

pub use self::core::{DynStats, Dynamized, InMemory, ShardFactory};
pub use alias_shard::AliasShard;
pub use isam_shard::IsamShard;
pub use options::{DeletePolicy, DynOptions, Layout, RuntimeOptions};
pub use read::{RangeSample, SamplingQuery, WeightedRangeSample};
pub use run::{Record, SortedRun};
pub use shard::{BuildOptions, Shard};
pub use wirs_shard::WirsShard;
