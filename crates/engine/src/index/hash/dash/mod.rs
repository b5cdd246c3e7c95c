//! # Dash-EH-style baseline (issue 17)
//!
//! A persistent extendible hash index of `u64 → u64` over any [`Pm`](crate::storage::pm::Pm) region,
//! after Dash-EH (Lu et al., PVLDB 2020; `reference/hashing.md` §3), built on the same PM layer as the
//! ElimDA-style core of `index::hash` and with the same API, so the two can be benchmarked side by side.
//! Everything — directory, buckets, fingerprints — lives in PM; DRAM holds only a mirror of the directory
//! and the local depth of each segment. Single writer (`&mut self`), readers between writes (`&self`).
//!
//! Parts: [`layout`] (PM format, hash), `index` (create, lookups, upsert, remove), `place` (balanced insert,
//! displacement, stash), `split` (segment split, directory doubling), `recover` (open), `check`
//! (iteration, self-check).
//!
//! ## PM layout (offsets, never pointers; little-endian)
//! | bytes | contents |
//! |---|---|
//! | `0..40` | superblock: magic `STRDASH1`, version 1, normal buckets per segment, stash buckets, region length |
//! | `40..48` | xxh3-64 of bytes `0..40` |
//! | `64..72` | **root word**: directory offset (multiple of 256) `\|` global depth `G` (low 8 bits) |
//! | `256..` | first directory: `2^G` × 8 B segment offsets (rounded to 256 B), then the first segments |
//! | heap | segments and later directories, bump-allocated (old directories are not reclaimed) |
//!
//! A **segment** is `1 + B + S` XPLines (`B` normal buckets, a power of two, Dash: 64; `S` stash buckets,
//! Dash: 2): a header XPLine — magic `STRDSEG1` (`+0`), **pattern** (`+8`: the hash prefix it owns,
//! left-aligned, immutable), **state word** (`+16`: local depth `d` in the low 8 bits `\|` offset of a split
//! target, 0 when none), xxh3 of magic, pattern and the segment's own offset (`+24`) — then the buckets.
//!
//! A **bucket** is one 256 B XPLine:
//! | bytes | contents |
//! |---|---|
//! | `0..8` | header word: alloc bitmap (bits 0..14), count (16..20, = popcount), overflow count (24..32: records whose home is this bucket that live in the stash), lock bit (32, 0 at rest), version (33..64, bumped by every header store) |
//! | `8..22` | 14 fingerprints, 1 B each (hash bits 16..24) |
//! | `22..32` | reserved (zero) |
//! | `32..256` | 14 slots of 16 B: key, value |
//!
//! Hash `h = xxh3(key)`: directory entry = top `G` bits, home bucket `y` = `h mod B`, fingerprint = bits
//! 16..24. Not modelled from Dash: the 4 overflow fingerprints and membership bits (this version keeps a
//! per-bucket overflow *count*, so a lookup probes the stash only when its home bucket has stashed records).
//!
//! ## Invariants
//! * Directory entry `i` names a segment of depth `d ≤ G` whose pattern is the top `d` bits of `i`; the
//!   segment is named by exactly its aligned block of `2^(G−d)` entries; segments are disjoint.
//! * A record with home `y` is in bucket `y`, `y + 1 (mod B)` or a stash bucket of the segment whose
//!   pattern is its hash prefix; its slot's fingerprint matches; no key is stored twice.
//! * A bucket's overflow count equals the stash records homed there; stash buckets count 0.
//! * Outside an operation no segment has a split target and no lock bit is set.
//!
//! ## Crash-consistency protocol (persist = flush + fence under ADR, fence only under eADR)
//! * **Insert** of a new key: write slot and fingerprint, persist; then store the bucket header with the
//!   slot's bit set (8 B atomic — the commit) and persist. A stash insert then bumps the home bucket's
//!   overflow count (a hint: recovery recomputes it).
//! * **Update**: the value word is overwritten in place with one 8 B atomic store and persisted: it is
//!   aligned, so it is never torn, and the key and bit do not change.
//! * **Delete**: header store clearing the bit, persisted (then the overflow count for a stash record).
//! * **Displacement**: the copy is committed in the neighbour bucket first, then the original's bit is
//!   cleared; a crash in between leaves a duplicate with equal key and value, which recovery drops.
//! * **Split / doubling**: see `split`: the new segment is fully written and fenced before one 8 B store
//!   of the old segment's state word commits the split; directory entries, the old segment's bitmaps and
//!   its depth follow, and recovery **eagerly** finishes any committed split at `open` (Dash does it
//!   lazily per segment on first access). A doubling is a new directory switched in by the root word.
//!   Anything allocated but not committed lies above the recomputed heap end and is reused.
//! * **Recovery** (`open`): superblock, root, directory and every segment header validated (damage =
//!   `Error::Corruption`), pending splits finished, then every bucket scanned: records validated,
//!   duplicates dropped, overflow counts recomputed, lock bits cleared; `len` counted. O(table), unlike
//!   Dash's constant-time lazy recovery.
//!
//! ## Cost model (media traffic on the Optane model; measured numbers in `tests/traffic.rs`)
//! * **Miss**: the header line of `y` and of `y + 1` (2 XPLines), plus one slot read per false
//!   fingerprint match (same XPLine); the stash too when `y` has overflow records. This is the point of
//!   comparison with ElimDA, whose fingerprints are in DRAM.
//! * **Hit**: the header line of `y` (+ `y + 1` when it lives there) + the slot, in the same XPLine.
//! * **Insert**: the lookup above, then a 16 B slot + 1 B fingerprint + 8 B header write in one XPLine
//!   (2 fences): a partial-XPLine write that leaves the XPBuffer as a whole 256 B media write; its read
//!   half was already paid by the lookup (measured: ≈ 215 B written, ≈ 340 B read per insert at load
//!   0.54–0.8). Displacement costs another two; a split writes a whole new segment with full XPLines.
//! * **Update / delete**: one 8 B store and one flushed line (a partial XPLine) each.
//!
//! Not yet: concurrent writers and optimistic readers (the version and lock bits are laid out), lazy
//! recovery, epoch reclamation of old directories and segments, shrinking.

mod check;
pub mod eh;
mod index;
pub mod layout;
mod place;
mod recover;
mod split;

#[cfg(test)]
mod tests;

pub use index::{DashConfig, DashIndex, DashStats};
