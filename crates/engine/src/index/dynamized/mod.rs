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
//! | `column_run` | a sorted run in columns: what flushes and in-memory merges hand to in-memory shards |
//! | `columns` | the in-memory shards' shared storage: sorted key/value/weight columns, ISAM index, tombstones |
//! | `isam_shard` | the in-memory ISAM shard (IRS, range count, scans, point lookup) |
//! | `alias_shard` | the WSS shard: sorted records, one alias table over all weights (O(1) whole-shard draws) |
//! | `wirs_shard` | the WIRS shard: alias-augmented tree (buckets of ⌈ln n⌉ records, alias per bucket/node) |
//! | `run` | records, sorted runs, and the merge that cancels deleted versions |
//! | `buffer` | the mutable buffer: lock-free slot claiming and a lock-free key index |
//! | `tags` | delete tags (one bit per record, set in place) |
//! | `version` | shard slots (shard + tags + Bloom filters) and immutable versions |
//! | `global_keys` | one Bloom filter over every shard's keys: which keys a flush must look up at all |
//! | `layout` | where flushed shards go; compaction under the delete bound δ |
//! | `core` | [`Dynamized`]: writes, the flusher and the merger, throttling |
//! | `guide_table` | weighted draws among a narrow query's candidates: cumulative weights with a guide table |
//! | `killers` | sampling's killer tables: keys that kill older records, and the cached table of all tombstones |
//! | `read` | point lookup, count, scan, and sampling through the [`SamplingQuery`] trait |
//! | `sample_io` | a sampling query's disk-shard reads spread over the shard I/O pool (bounds, records, tombstones) |
//! | `shard_file` | the page-aligned, checksummed shard file: streaming writer, summary-only and whole reads |
//! | `disk_shard` | the on-disk ISAM shard: fences in memory, record and tombstone pages read on demand |
//! | `tiered` | larger than memory: [`Tiered`] shards, the [`MemoryPlan`] behind `memory_budget`, the factory |
//! | `persist` | the state file of checkpoints (levels, tags, buffered operations) |
//! | `db_index` | the `Db` shell adapter: WAL-protected buffer, checkpoints, reopen, shard file collection |
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
//! * IRS of k samples: a scan of the buffers' keys (plain integer compares) and two ISAM searches per shard,
//!   then per draw O(1): an alias draw for the source, a uniform index, and the rejection check (a tag bit if
//!   the shard has tags, a binary search among the few buffered keys in range, one Bloom probe per newer
//!   shard *that has tombstones*). Positions are drawn for all missing samples first and their records
//!   prefetched, then fetched and checked in one pass, so the cache misses overlap. Expected draws are
//!   k / (1 − rejection rate); δ bounds the rate.
//! * Memory: 16 B per record (24 B weighted), ≈ 1.5 B per record of cache-line-blocked Bloom filter at 1 %,
//!   1 bit per record of tags, plus the buffers.
//!
//! ## Larger than memory (`DynOptions::memory_budget` > 0; see `tiered` and `disk_shard`)
//! The first L levels are in memory; deeper levels hold disk shards, one immutable file each, listed by the
//! state file. L is the largest count for which the buffers, levels 0..L at capacity and the resident part
//! of every deeper level (Bloom filters, tag bits, fences, page caches) fit the budget. A disk shard keeps
//! its fences (8 B per 4 KiB page) and at most 64 KiB of cached pages (two pages when pages exceed 32 KiB;
//! pages are 4 KiB to 4 MiB); p = records per page (255; 170 weighted at 4 KiB), D = levels.
//! * Insert: as above, plus the I/O of the merges that reach disk levels: each merge reads its inputs
//!   sequentially (32 KiB read-ahead) and streams its output to a new file in 64-page writes (at most 4 MiB
//!   each) and one `fdatasync`, so O(s · (D − L) / p) page reads and writes per record amortised under
//!   leveling, O((D − L) / p) under tiering. The flush-time probe reads one page of a disk shard only when its
//!   Bloom filter reports the key (the key is there, or a 1 % false positive).
//! * IRS of k samples: two page reads per disk shard to find the candidate interval (plus its tombstone
//!   bounds and, with few tombstones in range, the tombstone pages between them for the killer table), then
//!   the distinct pages the round's draws land on in disk shards (none if cached), read in spans of nearby
//!   pages (one call per span: a wide range's pages in a few dozen calls, `shard_file::batch_read`), plus
//!   the tombstone pages of newer shards whose tombstone filters report a drawn key, likewise; each
//!   step's reads of all shards are spread over the shard I/O pool together (`sample_io`). A uniform index i is record slot i mod p of page
//!   1 + ⌊i / p⌋, so draws stay exactly uniform. Weighted draws read at most one page besides the two end
//!   pages of the interval, which the preprocessing cached.
//! * Deletes: tags of disk-resident records are bits in memory like any other tags (saved in the state
//!   file), so a tag-delete of a disk-resident record takes effect at its flush.

pub mod alias_shard;
pub mod buffer;
pub mod column_run;
pub mod columns;
pub mod core;
pub mod db_index;
pub mod disk_shard;
pub mod family;
pub mod global_keys;
mod guide_table;
pub mod isam_shard;
pub mod killers;
pub mod layout;
pub mod options;
pub mod persist;
pub mod read;
pub mod run;
pub mod sample;
mod sample_io;
pub mod shard;
pub mod shard_file;
pub mod tags;
pub mod tiered;
pub mod version;
pub mod wirs_shard;

pub use self::core::{DynStats, Dynamized, InMemory, ShardFactory};
pub use alias_shard::AliasShard;
pub use disk_shard::DiskShard;
pub use isam_shard::IsamShard;
pub use options::{DeletePolicy, DynOptions, Layout, RuntimeOptions};
pub use run::{Record, SortedRun};
pub use sample::{RangeSample, SamplingQuery, WeightedRangeSample};
pub use shard::{BuildOptions, Shard};
pub use tiered::{MemoryPlan, Tiered, TieredStore};
pub use wirs_shard::WirsShard;
