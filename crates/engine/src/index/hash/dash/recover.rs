//! `open` and the lazy repair of segments (as in Dash: the cost of recovery does not grow with the table).
//!
//! * **Open** reads the superblock, the root word, the heap word and the directory — no segment. After a
//!   clean close (clean flag 1) every entry is at the crash version `V` and `len` is in the superblock;
//!   the flag is cleared. Otherwise `V` is bumped (and persisted) so that **every** entry is stale: an
//!   entry already at the new `V` (left from 256 crashes ago) is first set back to the old one.
//! * **Repair** of a segment, on the first touch through a stale entry (any operation, iteration, or
//!   [`DashIndex::repair_all`]), under the structure mutex: its header is validated against the entry;
//!   a split it committed is finished (`split` step 4, the new half repaired first); every bucket is
//!   validated, duplicates left by an interrupted displacement dropped, overflow hints recomputed where
//!   they are wrong and lock bits cleared (header stores, persisted together); its records are added to
//!   `len`; then the entries of its block are set to `V` (PM and mirror). Only a stale entry leads to a
//!   segment not yet repaired, so no other thread touches it meanwhile.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use arc_swap::ArcSwap;
use parking_lot::Mutex;

use super::dir::{Dir, STALE};
use super::index::{Counters, DashIndex, Shared, slot_off};
use super::layout::{
    BUCKET_BYTES, FP_OFF, Geometry, Header, OFP_OFF, Overflow, SB_CLEAN, SB_CRASH_VERSION, SB_HEAP,
    SB_LEN, SB_ROOT, SEG_STATE, SLOTS, SUPER_BYTES, SegHeader, block, corruption, dir_span, entry,
    entry_prefix, entry_seg, entry_version, fingerprint, hash, le, prefix, read_seg, split_bit,
};
use crate::error::Result;
use crate::index::hash::dash::eh::read_dir;
use crate::storage::pm::{Pm, XPLINE};

/// A bucket whose header or overflow hints are not what they should be: index in the segment, bitmap,
/// overflow count and fingerprints.
#[derive(Debug, Clone, Copy)]
pub(super) struct BucketFix {
    pub index: u64,
    pub bitmap: u64,
    pub count: u64,
    pub overflow: Overflow,
}

/// What a segment scan found: records, duplicates dropped, buckets to fix.
pub(super) struct SegScan {
    pub records: u64,
    pub dropped: u64,
    pub fixes: Vec<BucketFix>,
}

impl<P: Pm> DashIndex<P> {
    /// Opens an index that `create` formatted (module docs of `recover`). Damage found in the superblock
    /// or the directory is `Error::Corruption`; damage in a segment is found when it is repaired.
    pub fn open(pm: P) -> Result<Self> {
        let geo = Geometry::read(&pm)?;
        let (dir_off, g, raw) = read_dir(&pm, SB_ROOT, SUPER_BYTES, corruption)?;
        let heap_end = pm.load_u64_atomic(SB_HEAP)?;
        if heap_end < dir_off + dir_span(g)
            || heap_end > pm.len()
            || !heap_end.is_multiple_of(XPLINE)
        {
            return Err(corruption(SB_HEAP, format!("heap end {heap_end}")));
        }
        let (clean, mut version) = (
            pm.load_u64_atomic(SB_CLEAN)?,
            pm.load_u64_atomic(SB_CRASH_VERSION)?,
        );
        if clean > 1 || version > 0xFF {
            return Err(corruption(SB_CLEAN, "bad clean flag or crash version"));
        }
        for (i, &e) in raw.iter().enumerate() {
            let seg = entry_seg(e);
            if seg < SUPER_BYTES
                || seg
                    .checked_add(geo.seg_bytes())
                    .is_none_or(|end| end > heap_end)
            {
                return Err(corruption(
                    dir_off + 8 * i as u64,
                    format!("directory entry {i} names {seg}, outside the heap"),
                ));
            }
        }
        let len = if clean == 1 {
            if let Some(i) = raw.iter().position(|&e| entry_version(e) != version) {
                return Err(corruption(
                    dir_off + 8 * i as u64,
                    "entry of another crash version after a clean close",
                ));
            }
            pm.store_u64_atomic(SB_CLEAN, 0)?;
            pm.persist(SB_CLEAN, 8)?;
            pm.load_u64_atomic(SB_LEN)?
        } else {
            let next = (version + 1) & 0xFF;
            let mut raw_fixed = false;
            for (i, &e) in raw.iter().enumerate() {
                if entry_version(e) == next {
                    let at = dir_off + 8 * i as u64;
                    pm.store_u64_atomic(at, entry(entry_seg(e), version))?;
                    pm.flush(at, 8)?;
                    raw_fixed = true;
                }
            }
            if raw_fixed {
                pm.fence();
            }
            version = next;
            pm.store_u64_atomic(SB_CRASH_VERSION, version)?;
            pm.persist(SB_CRASH_VERSION, 8)?;
            0
        };
        let stale = |e: u64| entry_version(e) != version;
        let mirror = raw
            .iter()
            .map(|&e| entry_seg(e) | if stale(e) { STALE } else { 0 });
        let segments: BTreeSet<u64> = raw.iter().map(|&e| entry_seg(e)).collect();
        let unrepaired = raw
            .iter()
            .filter(|&&e| stale(e))
            .map(|&e| entry_seg(e))
            .collect();
        Ok(DashIndex {
            dir: ArcSwap::from_pointee(Dir::new(dir_off, g, mirror)),
            segments: AtomicU64::new(segments.len() as u64),
            pm,
            geo,
            version,
            shared: Mutex::new(Shared {
                heap_end,
                unrepaired,
                ..Shared::default()
            }),
            len: AtomicU64::new(len),
            counters: Counters::default(),
            poisoned: AtomicBool::new(false),
            poison_reason: Mutex::new(String::new()),
        })
    }

    /// Repairs every segment not repaired since the last open (what a full recovery would do).
    pub fn repair_all(&self) -> Result<()> {
        loop {
            let dir = self.dir.load_full();
            let stale = dir.stale();
            if stale.is_empty() {
                return Ok(());
            }
            for i in stale {
                self.repair(entry_prefix(i as u64, dir.depth))?;
            }
        }
    }

    /// Repairs the segment the entry of hash `h` names, if that entry is stale (module docs).
    pub(super) fn repair(&self, h: u64) -> Result<()> {
        let mut shared = self.shared.lock();
        let dir = self.dir.load_full();
        let i = dir.index(h);
        let (seg, stale) = dir.get(i);
        if !stale {
            return Ok(());
        }
        self.repair_segment(&mut shared, &dir, i as u64, seg)
            .inspect_err(|e| self.poison(e))
    }

    /// The header of the segment entry `i` of `dir` names, checked against the entry.
    fn entry_header(&self, dir: &Dir, i: u64, seg: u64) -> Result<SegHeader> {
        let h = read_seg(&self.pm, &self.geo, seg)?;
        if h.depth > dir.depth || h.pattern != prefix(entry_prefix(i, dir.depth), h.depth) {
            return Err(corruption(
                dir.off + 8 * i,
                format!(
                    "directory entry {i} names a segment of depth {} and pattern {:#x}",
                    h.depth, h.pattern
                ),
            ));
        }
        Ok(h)
    }

    fn repair_segment(&self, shared: &mut Shared, dir: &Dir, i: u64, seg: u64) -> Result<()> {
        let h = self.entry_header(dir, i, seg)?;
        if shared.repaired.contains(&seg) {
            return Err(corruption(
                dir.off + 8 * i,
                format!("stale entry {i} names a repaired segment outside its block"),
            ));
        }
        let mut depth = h.depth;
        if h.target != 0 {
            self.finish_interrupted_split(shared, dir, seg, &h)?;
            depth += 1;
        } else {
            // An entry of the block naming another segment: a split of that one into this one, not
            // finished; its repair finishes it (and repairs this segment first).
            let (start, n) = block(h.pattern, h.depth, dir.depth);
            if let Some(j) = (start..start + n).find(|&j| dir.get(j as usize).0 != seg) {
                let other = dir.get(j as usize).0;
                let oh = self.entry_header(dir, j, other)?;
                if oh.target == seg && !shared.repaired.contains(&other) {
                    return self.repair_segment(shared, dir, j, other);
                }
                return Err(corruption(
                    dir.off + 8 * j,
                    format!("directory entry {j} breaks the block of the segment at {seg}"),
                ));
            }
            self.repair_records(shared, seg, &h, false)?;
        }
        let (start, n) = block(h.pattern, depth, dir.depth);
        if let Some(j) = (start..start + n).find(|&j| dir.get(j as usize).0 != seg) {
            return Err(corruption(
                dir.off + 8 * j,
                format!("directory entry {j} breaks the block of the segment at {seg}"),
            ));
        }
        self.point_block_at(dir, seg, h.pattern, depth)
    }

    /// Finishes the split segment `s` (header `h`) committed: repairs its new half `T` if needed, points
    /// `T`'s block at it, drops the moved records from `s` (repairing it), raises its depth.
    fn finish_interrupted_split(
        &self,
        shared: &mut Shared,
        dir: &Dir,
        s: u64,
        h: &SegHeader,
    ) -> Result<()> {
        let t = h.target;
        let th = read_seg(&self.pm, &self.geo, t)?;
        let pattern = h.pattern | 1 << (63 - h.depth);
        if h.depth >= dir.depth
            || th.depth != h.depth + 1
            || th.target != 0
            || th.pattern != pattern
            || t + self.geo.seg_bytes() > shared.heap_end
        {
            return Err(corruption(
                s + SEG_STATE,
                "segment names an invalid split target",
            ));
        }
        let (start, n) = block(pattern, th.depth, dir.depth);
        let named = (start..start + n).any(|j| dir.get(j as usize).0 == t);
        if !shared.repaired.contains(&t) {
            self.repair_records(shared, t, &th, false)?;
        }
        self.point_block_at(dir, t, pattern, th.depth)?;
        if !named {
            self.segments.fetch_add(1, Ordering::AcqRel);
        }
        self.repair_records(shared, s, h, true)?;
        self.pm.store_u64_atomic(s + SEG_STATE, h.depth + 1)?;
        self.pm.persist(s + SEG_STATE, 8)?;
        self.counters
            .recovered_splits
            .fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Scans the segment at `seg` (header `h`; `moving`: drop the records a committed split moved),
    /// writes the fixes (unlocked headers, recomputed hints), counts its records, notes it repaired.
    fn repair_records(
        &self,
        shared: &mut Shared,
        seg: u64,
        h: &SegHeader,
        moving: bool,
    ) -> Result<()> {
        let scan = self.scan_segment(seg, h.pattern, h.depth, moving)?;
        for fix in &scan.fixes {
            let b = self.geo.bucket_off(seg, fix.index);
            let hdr = Header(self.pm.load_u64_atomic(b)?);
            self.pm.write(b + OFP_OFF, &fix.overflow.bytes())?;
            self.pm
                .store_u64_atomic(b, hdr.with(fix.bitmap, fix.count).released().0)?;
            self.pm.flush(b, 64)?;
        }
        if !scan.fixes.is_empty() {
            self.pm.fence();
        }
        self.len.fetch_add(scan.records, Ordering::AcqRel);
        self.counters
            .dropped_duplicates
            .fetch_add(scan.dropped, Ordering::Relaxed);
        self.counters
            .repaired_segments
            .fetch_add(1, Ordering::Relaxed);
        shared.unrepaired.remove(&seg);
        shared.repaired.insert(seg);
        Ok(())
    }

    /// Reads every bucket of the segment at `seg` (pattern `pattern`, depth `d`) and validates it: header
    /// words well formed, fingerprints matching their keys, every key of this pattern and in its home
    /// bucket, the one after it, or the stash. With `moving`, the records whose split bit at depth `d` is 1
    /// are dropped (a committed split copied them to the new half). A key seen twice with the same value is
    /// a displacement duplicate and is dropped; with another value it is damage. Returns the buckets whose
    /// bitmap changed, whose overflow hints are wrong (see [`hints_hold`]) or whose lock bit is set.
    pub(super) fn scan_segment(
        &self,
        seg: u64,
        pattern: u64,
        d: u64,
        moving: bool,
    ) -> Result<SegScan> {
        let n = self.geo.buckets + self.geo.stash;
        let mask = self.geo.buckets - 1;
        let mut buckets = Vec::with_capacity(n as usize);
        // Per home bucket: (fingerprint, stash bucket) of its stash records.
        let mut stashed = vec![Vec::new(); self.geo.buckets as usize];
        let mut seen = HashMap::new();
        let (mut records, mut dropped) = (0, 0);
        let mut buf = [0u8; BUCKET_BYTES as usize];
        for i in 0..n {
            let b = self.geo.bucket_off(seg, i);
            self.pm.read(b, &mut buf)?;
            let hdr = Header(le(&buf));
            if let Some(why) = hdr.damage() {
                return Err(corruption(b, why));
            }
            let mut bitmap = hdr.bitmap();
            for s in (0..SLOTS).filter(|&s| hdr.used(s)) {
                let at = slot_off(0, s) as usize;
                let (k, v) = (le(&buf[at..]), le(&buf[at + 8..]));
                let h = hash(k);
                let home = h & mask;
                let placed = i >= self.geo.buckets || home == i || (home + 1) & mask == i;
                if buf[FP_OFF as usize + s] != fingerprint(h) || prefix(h, d) != pattern || !placed
                {
                    return Err(corruption(
                        slot_off(b, s),
                        format!("key {k:#x} misplaced or fingerprint wrong"),
                    ));
                }
                if moving && split_bit(h, d) {
                    bitmap &= !(1 << s);
                    continue;
                }
                match seen.insert(k, v) {
                    None => {
                        records += 1;
                        if i >= self.geo.buckets {
                            stashed[home as usize].push((fingerprint(h), i - self.geo.buckets));
                        }
                    }
                    Some(old) if old == v => {
                        bitmap &= !(1 << s);
                        dropped += 1;
                    }
                    Some(_) => {
                        return Err(corruption(
                            slot_off(b, s),
                            format!("key {k:#x} twice with different values"),
                        ));
                    }
                }
            }
            buckets.push((hdr, bitmap, Overflow::from_meta(&buf)));
        }
        let mut fixes = Vec::new();
        for (i, &(hdr, bitmap, overflow)) in buckets.iter().enumerate() {
            let recs = stashed.get(i).map_or(&[][..], |r| &r[..]);
            let valid = hints_hold(&overflow, hdr.overflow(), recs);
            if valid && bitmap == hdr.bitmap() && !hdr.locked() {
                continue;
            }
            let (count, overflow) = if valid {
                (hdr.overflow(), overflow)
            } else {
                let mut o = Overflow::default();
                let kept = recs.iter().filter(|&&(fp, st)| o.add(fp, st)).count();
                (recs.len() as u64 - kept as u64, o)
            };
            fixes.push(BucketFix {
                index: i as u64,
                bitmap,
                count,
                overflow,
            });
        }
        Ok(SegScan {
            records,
            dropped,
            fixes,
        })
    }
}

/// True when the overflow hints `(overflow, count)` of a bucket describe its stash records `recs`
/// (fingerprint, stash bucket): every valid overflow fingerprint is one of them (as a multiset) and the
/// count is the number of the others. A stash bucket has no stash records and must hold no hints.
pub(super) fn hints_hold(overflow: &Overflow, count: u64, recs: &[(u8, u64)]) -> bool {
    let mut left: Vec<(u8, u64)> = recs.to_vec();
    for e in overflow.entries() {
        match left.iter().position(|&r| r == e) {
            Some(at) => {
                left.swap_remove(at);
            }
            None => return false,
        }
    }
    count == left.len() as u64
}
