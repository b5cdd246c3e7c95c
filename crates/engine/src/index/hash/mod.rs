//! # ElimDA-style persistent hash index (issue 17, first increment)
//!
//! A hybrid DRAM/PM hash index of `u64 → u64` over any [`Pm`](crate::storage::pm::Pm) region, after the
//! design reconstructed in `reference/hashing.md` §2: durable **P-buckets** of 4 KiB in PM, written only in
//! whole 256 B XPLines; a 256 B **D-bucket** per P-bucket in DRAM that collects 16 writes; a per-thread
//! **collecting log** in PM that makes each write durable before its D-bucket is flushed; and 1 B
//! **fingerprints** per slot in DRAM so that a miss touches no PM. Every key and value is accepted (a valid
//! bitmap marks used slots; tombstones are bits too). Single writer (`&mut self`), any number of readers
//! between writes (`&self`).
//!
//! Parts: [`layout`] (PM format, hash), [`bucket`] (DRAM bucket), [`log`] (collecting log), `index`
//! (lookups and writes), `rebuild` (resize / compaction), `recover` (open), `check` (iteration, self-check).
//!
//! * `format`: the PM-format pieces both indexes share (damage reports, checksummed superblock).
//! * [`api`]: [`PmHashIndex`], the operations both indexes implement (what tests and benchmarks drive).
//! * [`dash`]: the Dash-EH-style baseline (extendible hashing, 256 B buckets with in-PM fingerprints) on
//!   the same PM layer and API.
//! * [`cceh`]: the CCEH-style baseline (extendible hashing, 16 KiB segments, two probe runs of 4 lines, no
//!   fingerprints) on the same PM layer and API.
//!
//! ## PM layout (offsets, never pointers; little-endian)
//! | bytes | contents |
//! |---|---|
//! | `0..56` | superblock: magic `STRHASH1`, version 1, P-bucket bytes (4096), logs, log lines, nonce, region length |
//! | `56..64` | xxh3-64 of bytes `0..56` |
//! | `64..72` | **root word**: offset of the current table (switched by one 8 B atomic store) |
//! | `128 + 64 i` | **tail word** of log `i`: the log position replay starts at |
//! | `4096 + i · L` | log `i`: `lines · 64` bytes (rounded to 4 KiB = `L`) of 32 B records `key, value, lsn<<2|op, xxh3` |
//! | heap | tables, each `header (256 B: magic STRHTAB1, log2 buckets, checksum) · meta lines (64 B per bucket) · pad to 4 KiB · P-buckets (4 KiB each)` |
//!
//! A **P-bucket** is 16 chunks of one XPLine; a chunk is 16 slots of 16 B (key, value). Its **meta line**
//! holds 8 words; word `w` describes chunks `2w` and `2w+1` with 16 valid bits then 16 tombstone bits each,
//! so one 8 B atomic store commits a whole chunk with its tombstones. A new table goes at the heap start if
//! it fits below the current one, else right after it.
//!
//! ## DRAM state
//! Directory = the hash's low `log2` bits pick the bucket (plain power-of-two modulo; the top byte of the
//! same xxh3 hash is the fingerprint). Per bucket ([`bucket::Bucket`], ≈ 600 B per 4 KiB): fingerprints of
//! the 256 slots, the meta mirror, a **live** bitmap (the slot holding a key's visible version: its newest
//! P-bucket version, not a tombstone, not superseded by a staged one — at most one per key, so a lookup
//! needs no ordering and never probes dead versions), and the D-bucket (16 keys, values, tombstone bits, log
//! position of its oldest record). A staged key is replaced in place, so a D-bucket holds distinct keys.
//!
//! ## Invariants
//! * In every chunk the valid slots are a prefix and tombstones are valid; the chunks in use are a prefix of
//!   the P-bucket; slot order (chunk, then slot) is age order.
//! * Every key in bucket `b`'s slots and D-bucket hashes to `b`.
//! * Every write acknowledged so far is in the log at a position ≥ the durable tail, or in a committed
//!   chunk of the current table (or both). The log's valid records from the durable tail on form an
//!   unbroken run; the durable tail never passes the oldest staged record.
//! * After every write the load factor (live keys ÷ slots) is at most 7/8; a doubling halves it, so it
//!   runs the 43.75 %–87.5 % saw-tooth under inserts.
//!
//! ## Crash-consistency protocol (persist = flush + fence under ADR, fence only under eADR)
//! 1. **Write** (insert / update / delete): append `key, value, lsn, op, checksum` to the log and persist it
//!    — the acknowledgement point — then stage it in the D-bucket (DRAM).
//! 2. **Flush** (D-bucket full, or its oldest record pins the log): `write_nt` the D-bucket as one aligned
//!    XPLine into the P-bucket's next free chunk, fence; then store the chunk's meta word (valid +
//!    tombstone bits) with one 8 B atomic store and persist it. A crash before the commit leaves the chunk
//!    invisible (its records are still in the log).
//! 3. **Log space**: when the ring is full, flush the D-buckets whose oldest record is in the older half of
//!    the log, then store and persist the tail word = oldest still-staged position.
//! 4. **Resize / compaction** (load above 7/8, or a full P-bucket): build the new table in fresh PM space
//!    (visible versions only: duplicates and tombstones dropped), fence, store and persist the root word.
//! 5. **Recovery**: validate superblock and table (damage = `Error::Corruption`), rebuild each bucket from
//!    its meta line and slots (newest version per key decides), then replay the log from the durable tail:
//!    a record whose value is already visible is skipped, any other is staged again. Replaying from an old
//!    tail is harmless: replaying records in order ends with each key at its newest record.
//!
//! ## Cost model
//! * **Hit**: DRAM fingerprint scan of one bucket, then one 16 B read (one line of one XPLine) per
//!   fingerprint match among live slots — 1 read plus false matches (≈ live slots ÷ 256 ≤ 0.875).
//! * **Miss**: no PM access unless a fingerprint matches (same false-match rate).
//! * **Write**: one 32 B log append persisted (2 records per line, 8 per XPLine, so 32 B of media write per
//!   write once the XPBuffer combines them) + 1/16 of a 256 B XPLine write (16 B) + 1/16 of a meta-line
//!   commit (one partial XPLine: ≤ 32 B media per write with its read-modify-write). `remove` and updates
//!   first look the key up (one slot read when present).
//! * **Rebuild**: reads every live chunk, writes the new table; O(n), amortised over ≥ n/2 inserts when
//!   growing. Compaction at the same size happens when a bucket fills with superseded versions.
//! * **Recovery**: reads every meta line and used chunk once (O(table)), in parallel, plus the log.
//!
//! Not yet: concurrent writers (per-thread logs are laid out, only log 0 is written; replaying several
//! logs needs a global order), integration as an index family of the `Db` shell, variable-length values,
//! shrinking, the Dash / CCEH baselines.

#[macro_use]
pub mod api;
mod batch;
pub mod bucket;
pub mod cceh;
mod check;
mod core_view;
pub mod dash;
mod db_index;
pub mod family;
mod format;
mod header;
mod index;
pub mod layout;
mod ledger;
pub mod log;
mod rebuild;
mod recover;
mod region;

#[cfg(test)]
pub(crate) mod testkit;
#[cfg(test)]
mod tests;

pub use api::PmHashIndex;
pub use index::{HashConfig, HashIndex, HashStats};
