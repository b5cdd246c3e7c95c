//! # Dash-EH-style baseline (issue 17)
//!
//! A persistent extendible hash index of `u64 → u64` over any [`Pm`](crate::storage::pm::Pm) region,
//! after Dash-EH (Lu et al., PVLDB 2020; `reference/hashing.md` §3), built on the same PM layer as the
//! ElimDA-style core of `index::hash` and with the same API, so the two can be benchmarked side by side.
//! Everything — directory, buckets, fingerprints, locks — lives in PM; DRAM holds a mirror of the
//! directory. **Any number of threads** insert, update, remove and look up at once (`&self`): writers
//! take per-bucket version locks, readers take none (optimistic reads, version check and retry).
//!
//! Parts: [`layout`] (PM format, hash), [`eh`] (directory and segment-header format shared with the CCEH
//! baseline), `dir` (DRAM directory mirror), `lock` (version lock, optimistic read), `index` (create,
//! lookups, upsert, remove), `place` (balanced insert, displacement, stash), `split` (segment split,
//! directory doubling), `recover` (open, lazy repair), `check` (iteration, self-check).
//!
//! ## PM layout (offsets, never pointers; little-endian)
//! | bytes | contents |
//! |---|---|
//! | `0..40` | superblock: magic `STRDASH1`, version 2, normal buckets per segment, stash buckets, region length |
//! | `40..48` | xxh3-64 of bytes `0..40` |
//! | `64..72` | **root word**: directory offset (multiple of 256) `\|` global depth `G` (low 8 bits) |
//! | `72..104` | heap end (persisted before anything is written above it), crash version `V`, clean flag, `len` at the last clean close |
//! | `256..` | first directory: `2^G` × 8 B entries, segment offset `\|` crash version (low 8 bits), rounded to 256 B; then the first segments |
//! | heap | segments and later directories, bump-allocated (old directories are not reclaimed) |
//!
//! A **segment** is `1 + B + S` XPLines (`B` normal buckets, a power of two, Dash: 64; `S` stash buckets,
//! Dash: 2): a header XPLine (`eh`: magic `STRDSEG1`, pattern, **state word** = local depth `d` `\|` offset
//! of a split target, 0 when none, checksum) — then the buckets.
//!
//! A **bucket** is one 256 B XPLine:
//! | bytes | contents |
//! |---|---|
//! | `0..8` | header word: alloc bitmap (bits 0..14), count (16..20), overflow count (24..32), lock bit (32), version (33..64) |
//! | `8..22` | 14 fingerprints, 1 B each (hash bits 16..24) |
//! | `22..28` | 4 overflow fingerprints and their index word (valid bits, stash bucket of each) |
//! | `28..32` | reserved (zero) |
//! | `32..256` | 14 slots of 16 B: key, value |
//!
//! Hash `h = xxh3(key)`: directory entry = top `G` bits, home bucket `y` = `h mod B`, fingerprint = bits
//! 16..24. A record homed at `y` that lives in the stash is announced in `y` by an **overflow
//! fingerprint** (fingerprint + stash bucket), or, when `y`'s four are taken, by `y`'s overflow count; a
//! miss probes only the stash buckets so named (all of them when the count is not 0). Unlike Dash, `y + 1`
//! does not lend its overflow fingerprints to `y`.
//!
//! ## Invariants
//! * Directory entry `i` names a segment of depth `d ≤ G` whose pattern is the top `d` bits of `i`; the
//!   segment is named by exactly its aligned block of `2^(G−d)` entries; segments are disjoint.
//! * A record with home `y` is in bucket `y`, `y + 1 (mod B)` or a stash bucket of the segment whose
//!   pattern is its hash prefix; its slot's fingerprint matches; no key is stored twice.
//! * Overflow hints of `y` (fingerprints as a multiset, plus the count) describe exactly its stash records;
//!   stash buckets hold none.
//! * Outside an operation no lock bit is set and no segment has a split target. Only a holder of a
//!   bucket's lock changes its header, fingerprints, hints or slots; only a holder of the home bucket's
//!   lock adds, moves or removes a key.
//! * An entry at crash version `V` names a segment repaired since the last crash (or never crashed).
//!
//! ## Concurrency (see `lock`)
//! * **Writers** lock the key's home bucket and the next one (in index order), check that the directory
//!   still names their segment, then insert (balanced, displacement with the third bucket only
//!   try-locked, stash with its lock taken), update or remove; the commit store of the header word also
//!   releases its lock. A full segment is split by the writer that found it full, under the structure
//!   mutex (one split or repair at a time) and with every bucket of the segment locked.
//! * **Readers** load the directory mirror, read each bucket optimistically (`lock::read_stable`), and
//!   retry while a bucket is locked or changed, or when a split moved their segment meanwhile.
//!
//! ## Crash-consistency protocol (persist = flush + fence under ADR, fence only under eADR)
//! * **Insert** of a new key: write slot and fingerprint, persist; then store the bucket header with the
//!   slot's bit set (8 B atomic — the commit, which also unlocks) and persist. A stash insert then updates
//!   the home bucket's overflow hints (stored, not persisted: repair recomputes them).
//! * **Update**: the value word is overwritten in place with one 8 B atomic store and persisted: it is
//!   aligned, so it is never torn, and the key and bit do not change.
//! * **Delete**: header store clearing the bit, persisted (then the home's hints for a stash record).
//! * **Displacement**: the copy is committed in the neighbour bucket first, then the original's bit is
//!   cleared; a crash in between leaves a duplicate with equal key and value, which repair drops.
//! * **Split / doubling**: see `split`: the new segment is allocated (heap word persisted), fully written
//!   and fenced before one 8 B store of the old segment's state word commits the split; directory entries,
//!   the old segment's bitmaps and its depth follow. A doubling is a new directory switched in by the root
//!   word.
//! * **Recovery is lazy** (`recover`), as in Dash: `open` reads the superblock and the directory only and,
//!   after a crash, bumps the crash version `V`, which makes every entry stale. A segment is repaired on
//!   its first touch through a stale entry: split finished, records validated, duplicates dropped, hints
//!   recomputed, lock bits cleared, records counted; then its entries are set to `V`. Open time does not
//!   grow with the table (`tests/lazy.rs`). After a clean close (`into_pm` once every segment is repaired)
//!   `open` trusts every segment and `len` at once; after a crash `len` is exact once every segment is
//!   repaired (its first call repairs the rest).
//!
//! ## Cost model (media traffic on the Optane model; measured numbers in `tests/traffic.rs`)
//! * **Miss**: the first line of `y` and of `y + 1` (2 XPLines), plus one slot read per false
//!   fingerprint match (same XPLine); a stash bucket only when `y`'s overflow hints name it.
//! * **Hit**: the first line of `y` (+ `y + 1` when it lives there) + the slot, in the same XPLine; each
//!   bucket's header word is read again to validate (an XPBuffer hit).
//! * **Insert**: lock `y` and `y + 1` (compare-exchange on each header word: their lines become dirty),
//!   the lookup above, then a 16 B slot + 1 B fingerprint + 8 B header write in one XPLine (2 fences): a
//!   partial-XPLine write that leaves the XPBuffer as a whole 256 B media write; the lock word of the
//!   other bucket reaches the media later (as in Dash, whose locks are in PM too). Displacement costs
//!   another two; a split writes a whole new segment with full XPLines.
//! * **Update / delete**: the locks, then one 8 B store and one flushed line (a partial XPLine) each.
//!
//! Not yet: epoch reclamation of old directories and segments, shrinking, Dash's lending of overflow
//! fingerprints to the neighbour bucket, concurrent splits of different segments (one at a time here).

mod check;
mod dir;
pub mod eh;
mod index;
pub mod layout;
mod lock;
mod place;
mod recover;
mod split;

#[cfg(test)]
mod tests;

pub use index::{DashConfig, DashIndex, DashStats};
