//! # CCEH-style baseline (issue 17)
//!
//! A persistent extendible hash index of `u64 → u64` over any [`Pm`](crate::storage::pm::Pm) region,
//! after CCEH (Nam et al., FAST'19; `reference/hashing.md` §3) as Dash's authors benchmarked it: 16 KiB
//! segments of 1,024 slots of 16 B, a directory of segment offsets indexed by the hash's most significant
//! bits, two hash functions each picking a run of 4 cache lines (256 B) probed linearly, copy-on-write
//! segment splits, and no fingerprints or other per-slot metadata — a lookup compares keys in PM, so a
//! miss reads both runs. Same PM layer and API as the ElimDA-style core and the Dash-style baseline.
//! Everything lives in PM; DRAM holds a mirror of the directory and the local depth of each segment.
//! Single writer (`&mut self`), readers between writes (`&self`).
//!
//! Parts: [`layout`] (PM format, hashes), `index` (create, lookups, upsert, remove), `split` (segment
//! split, directory doubling), `recover` (open), `check` (iteration, self-check). The directory and
//! segment-header format is shared with the Dash-style index (`dash::eh`).
//!
//! ## PM layout (offsets, never pointers; little-endian)
//! | bytes | contents |
//! |---|---|
//! | `0..40` | superblock: magic `STRCCEH1`, version 1, slot lines per segment, lines per run, region length |
//! | `40..48` | xxh3-64 of bytes `0..40` |
//! | `64..72` | **root word**: directory offset (multiple of 256) `\|` global depth `G` (low 8 bits) |
//! | `72..88` | the reserved key's slot: presence word (0 / 1, the commit word), value |
//! | `256..` | first directory: `2^G` × 8 B segment offsets (rounded to 256 B), then the first segments |
//! | heap | segments and later directories, bump-allocated (old directories are not reclaimed) |
//!
//! A **segment** is a header XPLine — magic `STRCSEG1`, **pattern** (the hash prefix it owns,
//! left-aligned, immutable), **local depth** word, xxh3 of magic, pattern and the segment's offset — then
//! `L` lines of 4 slots (CCEH: `L` = 256, 16 KiB); a slot is key, value. Key 0 ([`layout::EMPTY`]) marks a
//! free slot, so CCEH's sentinel cannot be a key: that one key lives in the superblock's reserved slot.
//!
//! Hashes: `h1 = xxh3(key, seed 1)`, `h2 = xxh3(key, seed 2)`. Directory entry = top `G` bits of `h1`;
//! run `r` of a key starts at line `h_r mod L` and covers `R` lines (default 4), wrapping at the segment's
//! end. A record is **live** when its key is not 0 and the top `d` bits of its `h1` are the segment's
//! pattern (`d` = local depth); otherwise it is free (empty) or **stale** (left behind by a split).
//!
//! ## Invariants
//! * Directory entry `i` names a segment of depth `d ≤ G` whose pattern is the top `d` bits of `i`; the
//!   segment is named by exactly its aligned block of `2^(G−d)` entries; segments are disjoint.
//! * Every live record lies in one of its two runs of the segment its `h1` leads to, and no key has two
//!   live records.
//!
//! ## Crash-consistency protocol (persist = flush + fence under ADR, fence only under eADR)
//! * **Insert** of a new key into a free slot: the value word, persisted; then the key word (8 B atomic
//!   store: the commit), persisted. Before the commit the slot is still empty or stale, whatever the value.
//!   The slot is the first free one of the key's runs, after a **uniqueness check** that reads both runs.
//! * **Update**: the value word is overwritten in place with one 8 B atomic store, persisted.
//! * **Delete**: the key word becomes 0 (8 B atomic store), persisted.
//! * **Split / doubling**: copy-on-write (`split`): the new segment is written and fenced before the
//!   directory stores that commit it; the old segment's depth is raised last, which turns the moved
//!   records stale without touching them. Recovery rolls an interrupted directory update forward.
//! * **Recovery** (`open`): superblock, root, directory and every segment header validated (damage =
//!   `Error::Corruption` with the offset), interrupted splits finished, every segment scanned (records
//!   validated and counted). O(table); an unfinished split's new segment lies above the recomputed heap end
//!   and is reused.
//!
//! ## Cost model (media traffic on the Optane model; measured numbers in `tests/traffic.rs`)
//! * **Miss**: both runs, 8 lines of 64 B; a run is line-aligned, not XPLine-aligned, so it spans 1 or 2
//!   XPLines (2–4 XPLine reads per miss, ≈ 3.5 on average). No fingerprint filters anything.
//! * **Hit**: the lines of the first run up to the key, then the second run's (1–8 lines).
//! * **Insert**: the full miss above (uniqueness check), then two 8 B stores in one line, each persisted
//!   (2 fences): a partial-XPLine write whose read half the probe already paid.
//! * **Update / delete**: the hit above, then one 8 B store persisted.
//! * **Split**: reads the 16 KiB segment, writes a new one with full XPLines, rewrites `2^(G−d−1)`
//!   directory words; a doubling writes the whole directory again.
//!
//! Not modelled: CCEH's concurrency (segment locks), its original 8-line runs (configurable), shrinking.

mod check;
mod index;
pub mod layout;
mod recover;
mod split;

#[cfg(test)]
mod tests;

pub use index::{CcehConfig, CcehIndex, CcehStats};

use crate::error::Result;
use crate::index::hash::PmHashIndex;
use crate::storage::pm::Pm;

delegate_pm_hash_index!(CcehIndex, "cceh");
