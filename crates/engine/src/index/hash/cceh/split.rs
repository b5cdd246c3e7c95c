//! Copy-on-write segment split and directory doubling.
//!
//! Split of segment `S` (local depth `d`, pattern `p`) into `S` (pattern `p`) and a new `T` (pattern
//! `p | bit 63−d`), both at depth `d + 1`:
//! 1. Build `T` in DRAM: `S`'s live records whose split bit is 1, **each at the same slot index** as in `S`
//!    (so every record lies in one of its runs, and the copy can never fail), every other slot empty.
//! 2. (global depth = `d`) double the directory: a new one with every entry twice, written non-temporally
//!    and fenced, then the root word switched (8 B atomic store) and persisted.
//! 3. Write `T` at the heap end with non-temporal stores; fence.
//! 4. **Commit**: point the upper half of `S`'s directory block at `T` (8 B atomic stores), flush, fence.
//!    From the first of these stores that reaches PM, `T` is live; recovery rolls a partial update forward.
//! 5. `S.depth = d + 1` (8 B atomic store), persisted. The records that moved stay in `S`, **stale**: their
//!    hash prefix at depth `d + 1` is not `S`'s pattern, so lookups never reach them (their keys lead to
//!    `T`), and an insert may overwrite them.

use super::index::CcehIndex;
use super::layout::{
    EMPTY, MAX_DEPTH, SB_ROOT, SEG_HEADER_BYTES, SEG_STATE, SLOT_BYTES, SegmentFormat, block,
    dir_span, hash1, le, prefix, read_seg, split_bit,
};
use crate::error::{Error, Result};
use crate::index::hash::dash::eh::dir_bytes;
use crate::storage::pm::Pm;

impl<P: Pm> CcehIndex<P> {
    /// The slots of the segment at `seg` as one byte image (one read).
    pub(super) fn read_slots(&self, seg: u64) -> Result<Vec<u8>> {
        let mut b = vec![0u8; (self.geo.slots() * SLOT_BYTES) as usize];
        self.pm.read(self.geo.slot_off(seg, 0), &mut b)?;
        Ok(b)
    }

    /// Splits the segment at `seg` (module docs). `ResourceExhausted` when the region or the depth limit
    /// is reached; nothing visible is changed then.
    pub(super) fn split(&mut self, seg: u64) -> Result<()> {
        let d = self.segs.get(&seg).copied().unwrap_or(0);
        if d >= MAX_DEPTH {
            return Err(Error::ResourceExhausted(format!(
                "segment at {seg} is full at the maximum depth {MAX_DEPTH}"
            )));
        }
        let seg_bytes = self.geo.seg_bytes();
        let dir_need = if self.depth == d {
            dir_span(self.depth + 1)
        } else {
            0
        };
        if self
            .heap_end
            .checked_add(dir_need + seg_bytes)
            .is_none_or(|e| e > self.pm.len())
        {
            return Err(Error::ResourceExhausted(format!(
                "region of {} bytes has no room for another segment",
                self.pm.len()
            )));
        }
        self.stats.peak_load_before_split =
            self.stats.peak_load_before_split.max(self.load_factor());
        let pattern = read_seg(&self.pm, &self.geo, seg)?.pattern;
        let new_pattern = pattern | 1 << (63 - d);
        // 1. T's image: the moving records at their own slot indexes.
        let slots = self.read_slots(seg)?;
        let mut image = vec![0u8; seg_bytes as usize];
        for (s, rec) in slots.chunks_exact(SLOT_BYTES as usize).enumerate() {
            let k = le(rec);
            if k == EMPTY {
                continue;
            }
            let h = hash1(k);
            if prefix(h, d) == pattern && split_bit(h, d) {
                let at = (SEG_HEADER_BYTES + SLOT_BYTES * s as u64) as usize;
                image[at..at + SLOT_BYTES as usize].copy_from_slice(rec);
            }
        }
        // 2. Doubling, 3. T written.
        if self.depth == d {
            self.double()?;
        }
        let target = self.heap_end;
        image[..SEG_HEADER_BYTES as usize].copy_from_slice(&self.geo.seg_header(
            target,
            new_pattern,
            d + 1,
        ));
        self.pm.write_nt(target, &image)?;
        self.pm.fence();
        self.heap_end = target + seg_bytes;
        // 4. Commit, 5. S's depth.
        self.point_block_at(target, new_pattern, d + 1)?;
        self.pm.store_u64_atomic(seg + SEG_STATE, d + 1)?;
        self.pm.persist(seg + SEG_STATE, 8)?;
        self.segs.insert(seg, d + 1);
        self.segs.insert(target, d + 1);
        self.stats.splits += 1;
        Ok(())
    }

    /// Points every entry of the block of `(pattern, depth)` at `seg` (8 B atomic stores), flushed and
    /// fenced together; also used by recovery to roll an interrupted split forward.
    pub(super) fn point_block_at(&mut self, seg: u64, pattern: u64, depth: u64) -> Result<()> {
        let (start, n) = block(pattern, depth, self.depth);
        for i in start..start + n {
            self.pm.store_u64_atomic(self.dir_off + 8 * i, seg)?;
            self.dir[i as usize] = seg;
        }
        self.pm.flush(self.dir_off + 8 * start, 8 * n)?;
        self.pm.fence();
        Ok(())
    }

    /// Doubles the directory: a new one at the heap end with every entry twice, persisted, then the root
    /// word switched and persisted. The old directory is not reclaimed.
    fn double(&mut self) -> Result<()> {
        let g = self.depth + 1;
        let off = self.heap_end;
        let dir: Vec<u64> = self.dir.iter().flat_map(|&s| [s, s]).collect();
        self.pm.write_nt(off, &dir_bytes(dir.iter().copied(), g))?;
        self.pm.fence();
        self.pm.store_u64_atomic(SB_ROOT, off | g)?;
        self.pm.persist(SB_ROOT, 8)?;
        self.heap_end = off + dir_span(g);
        self.dir_off = off;
        self.depth = g;
        self.dir = dir;
        self.stats.doublings += 1;
        Ok(())
    }
}
