//! Segment split and directory doubling, under the structure mutex and with every bucket of the splitting
//! segment locked (writers of the segment wait, readers retry).
//!
//! Split of segment `S` (local depth `d`, pattern `p`) into `S` (pattern `p`) and a new `T` (pattern
//! `p | bit 63−d`), both at depth `d + 1`:
//! 1. (global depth = `d`) double the directory first: a new directory with every entry twice, written
//!    non-temporally and fenced, then the root word switched (8 B atomic store) and persisted.
//! 2. Build `T` in DRAM with the records of `S` whose split bit is 1 (balanced placement, then stash, with
//!    overflow hints), allocate it (heap word raised and persisted), write it with non-temporal stores;
//!    fence.
//! 3. **Commit**: `S.state = T | d` (8 B atomic store), persisted.
//! 4. Finish (also run by the lazy repair of a segment whose state names a target): point the upper half
//!    of `S`'s directory block at `T` at the current crash version (8 B atomic stores, one persist); clear
//!    the moved records' bits in `S` and recompute its overflow hints (header stores, one persist); then
//!    `S.state = d + 1`, persisted. Every step is idempotent.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::dir::Dir;
use super::index::{DashIndex, Shared, slot_off};
use super::layout::{
    BUCKET_BYTES, FP_OFF, Header, MAX_DEPTH, OFP_OFF, Overflow, SB_HEAP, SB_ROOT, SEG_STATE, SLOTS,
    SegmentFormat, block, dir_span, entry, fingerprint, hash, le, read_seg, split_bit,
};
use super::lock::Locked;
use crate::error::{Error, Result};
use crate::index::hash::dash::eh::dir_bytes;
use crate::storage::pm::Pm;

/// A record read from a segment: bucket index, slot, key, value.
pub(super) type Rec = (u64, usize, u64, u64);

impl<P: Pm> DashIndex<P> {
    /// Every committed record of the segment at `seg` (normal buckets, then stash), one 256 B read per
    /// bucket.
    pub(super) fn segment_records(&self, seg: u64) -> Result<Vec<Rec>> {
        let mut recs = Vec::new();
        let mut buf = [0u8; BUCKET_BYTES as usize];
        for i in 0..self.geo.buckets + self.geo.stash {
            self.pm.read(self.geo.bucket_off(seg, i), &mut buf)?;
            let hdr = Header(le(&buf));
            for s in (0..SLOTS).filter(|&s| hdr.used(s)) {
                let at = slot_off(0, s) as usize;
                recs.push((i, s, le(&buf[at..]), le(&buf[at + 8..])));
            }
        }
        Ok(recs)
    }

    /// `bytes` at the heap end: the heap word is raised and persisted before the caller writes there, so
    /// recovery never hands the space out again (an interrupted split leaks it).
    pub(super) fn alloc(&self, shared: &mut Shared, bytes: u64) -> Result<u64> {
        let off = shared.heap_end;
        let end = off.checked_add(bytes).filter(|&e| e <= self.pm.len());
        let Some(end) = end else {
            return Err(Error::ResourceExhausted(format!(
                "region of {} bytes has no room for {bytes} more bytes",
                self.pm.len()
            )));
        };
        self.pm.store_u64_atomic(SB_HEAP, end)?;
        self.pm.persist(SB_HEAP, 8)?;
        shared.heap_end = end;
        Ok(off)
    }

    /// Splits the segment at `seg`, which has no room for a key of hash `h` (module docs). Does nothing
    /// when another thread split it meanwhile, or made room for `h`. `ResourceExhausted` when the region or
    /// the depth limit is reached; nothing visible is changed then.
    pub(super) fn split(&self, seg: u64, h: u64) -> Result<()> {
        let mut shared = self.shared.lock();
        if self.dir.load().lookup(h) != (seg, false) {
            return Ok(());
        }
        let n = self.geo.buckets + self.geo.stash;
        let guards = (0..n)
            .map(|i| Locked::lock(&self.pm, self.geo.bucket_off(seg, i)))
            .collect::<Result<Vec<_>>>()?;
        let (y, next) = self.pair(h);
        let full = |i: u64| guards[i as usize].header().full();
        if !(full(y) && full(next) && (self.geo.buckets..n).all(full)) {
            return Ok(());
        }
        let h0 = read_seg(&self.pm, &self.geo, seg)?;
        let d = h0.depth;
        if d >= MAX_DEPTH {
            return Err(Error::ResourceExhausted(format!(
                "segment at {seg} is full at the maximum depth {MAX_DEPTH}"
            )));
        }
        let lf = self.len_now() as f64 / self.capacity() as f64;
        shared.peak_load_before_split = shared.peak_load_before_split.max(lf);
        let recs = self.segment_records(seg)?;
        // Built (and checked to fit) before anything changes.
        let mut image = self.new_segment_image(&recs, d)?;
        let seg_bytes = self.geo.seg_bytes();
        let dir_need = if self.dir.load().depth == d {
            dir_span(d + 1)
        } else {
            0
        };
        if shared.heap_end + dir_need + seg_bytes > self.pm.len() {
            return Err(Error::ResourceExhausted(format!(
                "region of {} bytes has no room for another segment",
                self.pm.len()
            )));
        }
        if dir_need > 0 {
            self.double(&mut shared)?;
        }
        let target = self.alloc(&mut shared, seg_bytes)?;
        let pattern = h0.pattern | 1 << (63 - d);
        image[..BUCKET_BYTES as usize].copy_from_slice(&self.geo.seg_header(
            target,
            pattern,
            d + 1,
        ));
        self.pm.write_nt(target, &image)?;
        self.pm.fence();
        self.pm.store_u64_atomic(seg + SEG_STATE, target | d)?;
        self.pm.persist(seg + SEG_STATE, 8)?;
        // Finish: directory, then S's buckets (kept locked until its depth is raised).
        let dir = self.dir.load_full();
        self.point_block_at(&dir, target, pattern, d + 1)?;
        let scan = self.scan_segment(seg, h0.pattern, d, true)?;
        let mut guards = guards;
        for fix in &scan.fixes {
            let g = &mut guards[fix.index as usize];
            self.pm.write(g.bucket + OFP_OFF, &fix.overflow.bytes())?;
            g.set(g.header().with(fix.bitmap, fix.count))?;
            self.pm.flush(g.bucket, 64)?;
        }
        self.pm.fence();
        self.pm.store_u64_atomic(seg + SEG_STATE, d + 1)?;
        self.pm.persist(seg + SEG_STATE, 8)?;
        drop(guards);
        self.segments.fetch_add(1, Ordering::AcqRel);
        self.counters.splits.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// The buckets of a new segment holding the records of `recs` whose split bit at depth `d` is set,
    /// placed in their home bucket or its neighbour (the less full), else in the stash with an overflow
    /// hint in the home bucket. The header XPLine is left zero for the caller.
    fn new_segment_image(&self, recs: &[Rec], d: u64) -> Result<Vec<u8>> {
        let mut img = vec![0u8; self.geo.seg_bytes() as usize];
        let n = (self.geo.buckets + self.geo.stash) as usize;
        let mut hdrs = vec![Header::default(); n];
        let mut hints = vec![Overflow::default(); n];
        let mask = self.geo.buckets - 1;
        for &(_, _, k, v) in recs {
            let h = hash(k);
            if !split_bit(h, d) {
                continue;
            }
            let y = h & mask;
            let (a, b) = (y as usize, ((y + 1) & mask) as usize);
            let pick = match (hdrs[a].free_slot(), hdrs[b].free_slot()) {
                (Some(_), Some(t)) if hdrs[b].count() < hdrs[a].count() => Some((b, t)),
                (Some(s), _) => Some((a, s)),
                (None, Some(t)) => Some((b, t)),
                (None, None) => {
                    (self.geo.buckets as usize..n).find_map(|i| hdrs[i].free_slot().map(|s| (i, s)))
                }
            };
            let Some((i, s)) = pick else {
                return Err(Error::ResourceExhausted(format!(
                    "records of a splitting segment do not fit its new half (local depth {})",
                    d + 1
                )));
            };
            let base = BUCKET_BYTES as usize * (1 + i);
            let so = base + slot_off(0, s) as usize;
            img[so..so + 8].copy_from_slice(&k.to_le_bytes());
            img[so + 8..so + 16].copy_from_slice(&v.to_le_bytes());
            img[base + FP_OFF as usize + s] = fingerprint(h);
            hdrs[i] = hdrs[i].with_bit(s, true);
            let stash = (i as u64).checked_sub(self.geo.buckets);
            if let Some(stash) = stash
                && !hints[a].add(fingerprint(h), stash)
            {
                hdrs[a] = hdrs[a].with_overflow(hdrs[a].overflow() + 1);
            }
        }
        for (i, hdr) in hdrs.iter().enumerate() {
            let base = BUCKET_BYTES as usize * (1 + i);
            img[base..base + 8].copy_from_slice(&hdr.0.to_le_bytes());
            let at = base + OFP_OFF as usize;
            img[at..at + 6].copy_from_slice(&hints[i].bytes());
        }
        Ok(img)
    }

    /// Points every entry of the block of `(pattern, depth)` in `dir` at `seg`, at the current crash
    /// version (PM: 8 B atomic stores flushed and fenced together; the mirror: fresh entries).
    pub(super) fn point_block_at(
        &self,
        dir: &Dir,
        seg: u64,
        pattern: u64,
        depth: u64,
    ) -> Result<()> {
        let (start, n) = block(pattern, depth, dir.depth);
        for i in start..start + n {
            self.pm
                .store_u64_atomic(dir.off + 8 * i, entry(seg, self.version))?;
        }
        self.pm.flush(dir.off + 8 * start, 8 * n)?;
        self.pm.fence();
        for i in start..start + n {
            dir.set(i as usize, seg, false);
        }
        Ok(())
    }

    /// Doubles the directory: a new one at the heap end with every PM entry twice (crash versions kept),
    /// persisted, then the root word switched and persisted, then the new mirror published. The old
    /// directory is not reclaimed.
    fn double(&self, shared: &mut Shared) -> Result<()> {
        let dir = self.dir.load_full();
        let g = dir.depth + 1;
        if g > MAX_DEPTH {
            return Err(Error::ResourceExhausted(format!(
                "directory at the maximum depth {MAX_DEPTH}"
            )));
        }
        let mut raw = vec![0u8; 8 << dir.depth];
        self.pm.read(dir.off, &mut raw)?;
        let off = self.alloc(shared, dir_span(g))?;
        let doubled = raw.chunks_exact(8).map(le).flat_map(|e| [e, e]);
        self.pm
            .write_nt(off, &dir_bytes(doubled.collect::<Vec<_>>().into_iter(), g))?;
        self.pm.fence();
        self.pm.store_u64_atomic(SB_ROOT, off | g)?;
        self.pm.persist(SB_ROOT, 8)?;
        self.dir.store(Arc::new(dir.doubled(off)));
        self.counters.doublings.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}
