//! Segment split and directory doubling.
//!
//! Split of segment `S` (local depth `d`, pattern `p`) into `S` (pattern `p`) and a new `T` (pattern
//! `p | bit 63−d`), both at depth `d + 1`:
//! 1. (global depth = `d`) double the directory first: a new directory with every entry twice, persisted,
//!    then the root word switched (8 B atomic store) and persisted.
//! 2. Build `T` in DRAM with the records of `S` whose split bit is 1 (balanced placement, then stash) and
//!    write it at the heap end with non-temporal stores; fence.
//! 3. **Commit**: `S.state = T | d` (8 B atomic store), persisted.
//! 4. [`finish_split`](DashIndex::finish_split), also run by recovery for a segment whose state names a
//!    target: point the upper half of `S`'s directory block at `T` (8 B atomic stores, one persist); clear
//!    the moved records' bits in `S` and recompute its overflow counts (header stores, one persist); then
//!    `S.state = d + 1`, persisted. Every step is idempotent.

use super::index::{DashIndex, dir_span, slot_off};
use super::layout::{
    BUCKET_BYTES, FP_OFF, Header, MAX_DEPTH, SB_ROOT, SEG_STATE, SLOTS, SegHeader, fingerprint,
    hash, le, split_bit,
};
use crate::error::{Error, Result};
use crate::storage::pm::Pm;

/// A record read from a segment: bucket index, slot, key, value.
pub(super) type Rec = (u64, usize, u64, u64);

impl<P: Pm> DashIndex<P> {
    /// Every committed record of the segment at `seg` (normal buckets, then stash), one 256 B read per
    /// bucket.
    pub(super) fn segment_records(&self, seg: u64) -> Result<(Vec<Header>, Vec<Rec>)> {
        let n = self.geo.buckets + self.geo.stash;
        let mut headers = Vec::with_capacity(n as usize);
        let mut recs = Vec::new();
        let mut buf = [0u8; BUCKET_BYTES as usize];
        for i in 0..n {
            let b = self.geo.bucket_off(seg, i);
            self.pm.read(b, &mut buf)?;
            let hdr = Header(le(&buf));
            for s in 0..SLOTS {
                if hdr.used(s) {
                    let at = (slot_off(0, s)) as usize;
                    recs.push((i, s, le(&buf[at..]), le(&buf[at + 8..])));
                }
            }
            headers.push(hdr);
        }
        Ok((headers, recs))
    }

    /// Splits the segment at `seg` (module docs). `ResourceExhausted` when the region or the depth limit
    /// is reached, or the moving records do not fit the new segment; nothing is changed then.
    pub(super) fn split(&mut self, seg: u64) -> Result<()> {
        let d = self.segs.get(&seg).copied().unwrap_or(0);
        if d >= MAX_DEPTH {
            return Err(Error::ResourceExhausted(format!(
                "segment at {seg} is full at the maximum depth {MAX_DEPTH}"
            )));
        }
        let lf = self.load_factor();
        if lf > self.stats.peak_load_before_split {
            self.stats.peak_load_before_split = lf;
        }
        let h0 = SegHeader::read(&self.pm, &self.geo, seg)?;
        let (_, recs) = self.segment_records(seg)?;
        // Built (and checked to fit) before anything changes.
        let mut image = self.new_segment_image(&recs, d)?;
        let seg_bytes = self.geo.seg_bytes();
        if self.depth == d {
            self.double()?;
        }
        let target = self.heap_end;
        let pattern = h0.pattern | 1 << (63 - d);
        image[..BUCKET_BYTES as usize].copy_from_slice(&SegHeader::image(target, pattern, d + 1));
        if target
            .checked_add(seg_bytes)
            .is_none_or(|e| e > self.pm.len())
        {
            return Err(Error::ResourceExhausted(format!(
                "region of {} bytes has no room for another segment",
                self.pm.len()
            )));
        }
        self.pm.write_nt(target, &image)?;
        self.pm.fence();
        self.heap_end = target + seg_bytes;
        self.pm.store_u64_atomic(seg + SEG_STATE, target | d)?;
        self.pm.persist(seg + SEG_STATE, 8)?;
        self.finish_split(seg, h0.pattern, d, target)?;
        self.stats.splits += 1;
        Ok(())
    }

    /// The buckets of a new segment holding the records of `recs` whose split bit at depth `d` is set,
    /// placed in their home bucket or its neighbour (the less full), else in the stash. The header
    /// XPLine is left zero for the caller.
    fn new_segment_image(&self, recs: &[Rec], d: u64) -> Result<Vec<u8>> {
        let mut img = vec![0u8; self.geo.seg_bytes() as usize];
        let n = (self.geo.buckets + self.geo.stash) as usize;
        let mut hdrs = vec![Header::default(); n];
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
            if i >= self.geo.buckets as usize {
                hdrs[a] = hdrs[a].with_overflow(hdrs[a].overflow() + 1);
            }
        }
        for (i, hdr) in hdrs.iter().enumerate() {
            let base = BUCKET_BYTES as usize * (1 + i);
            img[base..base + 8].copy_from_slice(&hdr.0.to_le_bytes());
        }
        Ok(img)
    }

    /// Steps after the split commit (module docs); idempotent, so recovery reruns it.
    pub(super) fn finish_split(
        &mut self,
        seg: u64,
        pattern: u64,
        d: u64,
        target: u64,
    ) -> Result<()> {
        let g = self.depth;
        let size = 1u64 << (g - d);
        let start = if g == 0 { 0 } else { pattern >> (64 - g) };
        for i in start + size / 2..start + size {
            self.pm.store_u64_atomic(self.dir_off + 8 * i, target)?;
            self.dir[i as usize] = target;
        }
        self.pm
            .flush(self.dir_off + 8 * (start + size / 2), 8 * (size / 2))?;
        self.pm.fence();
        // Keep in S only the records whose split bit is 0; recount overflow records per home bucket.
        let (headers, recs) = self.segment_records(seg)?;
        let mask = self.geo.buckets - 1;
        let mut bitmaps: Vec<u64> = headers.iter().map(|h| h.bitmap()).collect();
        let mut overflow = vec![0u64; headers.len()];
        for &(i, s, k, _) in &recs {
            let h = hash(k);
            if split_bit(h, d) {
                bitmaps[i as usize] &= !(1 << s);
            } else if i >= self.geo.buckets {
                overflow[(h & mask) as usize] += 1;
            }
        }
        let mut changed = false;
        for (i, hdr) in headers.iter().enumerate() {
            if hdr.bitmap() != bitmaps[i] || hdr.overflow() != overflow[i] || hdr.locked() {
                let b = self.geo.bucket_off(seg, i as u64);
                self.pm
                    .store_u64_atomic(b, hdr.next(bitmaps[i], overflow[i]).0)?;
                self.pm.flush(b, 8)?;
                changed = true;
            }
        }
        if changed {
            self.pm.fence();
        }
        self.pm.store_u64_atomic(seg + SEG_STATE, d + 1)?;
        self.pm.persist(seg + SEG_STATE, 8)?;
        self.segs.insert(seg, d + 1);
        self.segs.insert(target, d + 1);
        Ok(())
    }

    /// Doubles the directory: a new one at the heap end with every entry twice, persisted, then the root
    /// word switched and persisted. The old directory is not reclaimed.
    fn double(&mut self) -> Result<()> {
        let g = self.depth + 1;
        if g > MAX_DEPTH {
            return Err(Error::ResourceExhausted(format!(
                "directory at the maximum depth {MAX_DEPTH}"
            )));
        }
        let off = self.heap_end;
        let span = dir_span(g);
        if off.checked_add(span).is_none_or(|e| e > self.pm.len()) {
            return Err(Error::ResourceExhausted(format!(
                "region of {} bytes has no room for a directory of depth {g}",
                self.pm.len()
            )));
        }
        let mut bytes = vec![0u8; span as usize];
        let dir: Vec<u64> = self.dir.iter().flat_map(|&s| [s, s]).collect();
        for (i, s) in dir.iter().enumerate() {
            bytes[8 * i..8 * i + 8].copy_from_slice(&s.to_le_bytes());
        }
        self.pm.write(off, &bytes)?;
        self.pm.persist(off, span)?;
        self.pm.store_u64_atomic(SB_ROOT, off | g)?;
        self.pm.persist(SB_ROOT, 8)?;
        self.heap_end = off + span;
        self.dir_off = off;
        self.depth = g;
        self.dir = dir;
        self.stats.doublings += 1;
        Ok(())
    }
}
