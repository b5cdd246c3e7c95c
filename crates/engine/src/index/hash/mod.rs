//! # ElimDA-style persistent hash index (issue 17)
//!
//! A hybrid DRAM/PM hash index of `u64 → u64` over any [`Pm`](crate::storage::pm::Pm) region, after the
//! design reconstructed in `reference/hashing.md` §2: durable **P-buckets** of 4 KiB in PM (1, 2, 8 or 16 KiB with
//! `HashConfig::pbucket_bytes`, recorded in the superblock and adopted on open), written only in
//! whole 256 B XPLines; a **D-bucket** per P-bucket in DRAM that stages up to 15 writes (written back at
//! `HashConfig::dbucket_slots`, 15 by default, a setting of the open handle); per-thread
//! **collecting logs** in PM that make each write durable before its D-bucket is flushed; and 16-bit
//! **fingerprints** per slot in DRAM so that a miss touches no PM. Every key and value is accepted.
//! Any number of threads write and read through `&self`: lookups take no lock (a per-bucket seqlock),
//! writers lock one log and one bucket.
//!
//! Parts: [`layout`] (PM format, hash, commit words), [`bucket`] (DRAM side of a bucket, seqlock),
//! [`log`] (collecting log), `generation` (one table generation in DRAM), `index` (creation, lookups, the
//! entry of writes), `write` (the write path, D-bucket flushes, log space), `compact` (a bucket rewritten
//! in place through a redo area), `grow` (doubling while writers keep going), `recover` (open, parallel
//! rebuild and replay), `check` (iteration, self-check).
//!
//! * `format`: the PM-format pieces both indexes share (damage reports, checksummed superblock).
//! * [`api`]: [`PmHashIndex`], the operations both indexes implement (what tests and benchmarks drive).
//! * [`dash`]: the Dash-EH-style baseline (extendible hashing, 256 B buckets with in-PM fingerprints) on
//!   the same PM layer and API.
//! * [`cceh`]: the CCEH-style baseline (extendible hashing, 16 KiB segments, two probe runs of 4 lines, no
//!   fingerprints) on the same PM layer and API.
//!
//! ## PM layout (offsets, never pointers; little-endian; details in [`layout`])
//! * Superblock (4 KiB): magic `STRHASH1`, version, bucket bytes, logs, log lines (bit 63: every log exactly
//!   that size, `HashConfig::fixed_log`; clear: logs grow with the table), nonce, region length, xxh3
//!   checksum; then the **root word** (offset of the current generation, switched by one 8 B store).
//! * A **generation**: header · one tail word per log · one redo area per log · the logs · pool chunks
//!   (overflow chunks shared by the buckets) · P-buckets. A bucket's **chain** is its home chunks
//!   (P-bucket ÷ 256 B: 16 by default, 4 to 64), then up to 14 pool chunks. A chunk is one XPLine: commit word (slot count, tombstone bits, the bucket's
//!   sequence number at the commit), identity word (salted with the nonce and generation), 15 slots of
//!   16 B. Log records are 32 B: key, value, `seq << 2 | op`, checksum salted with log and position.
//!
//! ## Invariants
//! * A chain's used slots are a prefix in age order; only the last chunk (the **tail**) is partly used.
//!   The tail's staged slots (the D-bucket) are durable only in the logs.
//! * Every key in bucket `b`'s chain and D-bucket hashes to `b`; at most one slot per key is **live** (its
//!   visible version), so a lookup needs no ordering.
//! * Each bucket numbers its writes (`seq`, under its lock); a chunk commit word carries the largest `seq`
//!   it covers. Every acknowledged write is in a committed chunk or in a log at a position ≥ that log's
//!   durable tail; a log's tail passes a record only after the record's D-bucket was flushed. A staged
//!   slot pins its record; a delete that cancels a staged put stages a tombstone, so that the put's record
//!   (possibly in another log) is never replayed without it.
//! * After every write the load factor (live keys ÷ home slots) is at most 7/8 (with several logs a writer
//!   sums their counts only every few added keys, and grows early by a margin that covers the keys added
//!   unseen meanwhile: `HashIndex::fullness_margin`).
//!
//! ## Crash-consistency protocol (persist = flush + fence under ADR, fence only under eADR)
//! 1. **Write**: append `key, value, seq, op, checksum` to the thread's log and persist it (the
//!    acknowledgement point), then stage it in the D-bucket (DRAM).
//!    A delete of a committed version instead sets its slot's tombstone bit in the chunk's commit word (one
//!    8 B store, written back and fenced: the acknowledgement); recovery keeps each key's newest version,
//!    which that bit hides. Deletes of staged versions stage a tombstone as above.
//! 2. **Flush** (D-bucket full, or its records pin a full log): `write_nt` the whole tail chunk, fence, then
//!    store and persist its commit word.
//! 3. **Log space** (ring 7/8 full): flush the D-buckets holding the oldest 1/64 of the ring's records,
//!    then persist the tail (a step per write that finds the ring full, never the whole ring at once).
//! 4. **Compaction** of one bucket: new chunk images to the log's redo area, fence, commit the redo word,
//!    copy the images in place, fence, clear the redo word. **Doubling**: the next generation is built in
//!    fresh space a slice per write while the current one serves everything (writes to buckets already
//!    copied are mirrored into the new one), fence, root switch (see `grow`).
//! 5. **Recovery**: validate superblock and generation (damage = `Error::Corruption`), finish committed
//!    redos, rebuild every bucket from its chain in parallel, then replay each log's unbroken run from its
//!    tail: records above their bucket's committed `seq`, per bucket in `seq` order.
//!
//! ## Cost model
//! * Every operation first prefetches its bucket's DRAM lines (a lookup line 0, its summary line and the 8
//!   fingerprint lines; a write the whole bucket), so their misses overlap.
//! * **Hit**: the bucket's **summary** (per fingerprint class of 128, the 16-slot groups holding one)
//!   names the groups to compare, about 1 + 0.12 per other group in use; then one 16 B PM read (two word
//!   loads) per live fingerprint match (false matches ≈ live slots ÷ 65,536); a key still in the D-bucket
//!   is read from DRAM. About 260 (miss) to 320 (hit) instructions, with no branch on the number of groups
//!   up to two (`fpscan`), so a misprediction rarely discards the next lookup's started misses. The time
//!   is the two dependent misses: the bucket's DRAM lines, then the PM slot's line.
//!   P-buckets of 8 and 16 KiB: a key not found in the 240 inline home slots is looked for in the bucket's
//!   extension, out of line (its summary word and live bits, then the groups the summary names: about
//!   0.12 per group in use, up to 45): a further two dependent DRAM misses, not prefetched, so that the
//!   4 KiB path keeps its instructions.
//! * **Miss**: no PM access unless a fingerprint matches falsely.
//! * **Write**: one 32 B log append persisted, plus 1/15 of a whole-XPLine chunk write and its commit
//!   word; no PM read unless the key's fingerprint matches a live committed slot (an update).
//! * **Delete** of a committed key: the fingerprint scan, one 16 B PM read and one commit-word store and
//!   write-back in the same XPLine (the slot's line and the commit word's are both prefetched before the
//!   locks are taken, so their misses overlap); no log record.
//! * **Log space**: every record is visited once when the tail passes it (its bucket's lock and pins; the
//!   buckets a few records ahead are prefetched, so these misses overlap too).
//! * **Doubling**: O(n) reads and writes, amortised over ≥ n/2 inserts; **compaction**: the chain twice.
//! * **Recovery**: every used chunk once plus the logs, split over the threads.
//!
//! Not yet: integration as an index family of the `Db` shell, variable-length values, shrinking.

#[macro_use]
pub mod api;
mod batch;
pub mod bucket;
pub mod cceh;
mod check;
mod compact;
mod core_view;
pub mod dash;
mod db_index;
mod db_values;
pub mod family;
mod format;
mod fpscan;
mod generation;
mod grow;
mod header;
mod index;
pub mod layout;
mod ledger;
pub mod log;
mod recover;
mod region;
mod spin;
mod write;

#[cfg(test)]
pub(crate) mod testkit;
#[cfg(test)]
mod tests;
pub mod values;

pub use api::PmHashIndex;
pub use index::{HashConfig, HashIndex, HashStats};
