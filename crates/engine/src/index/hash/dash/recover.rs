//! `open`: validate the superblock, root word and directory, finish a half-done split (eagerly, for every
//! segment whose state word names a target), then scan every segment once: validate each bucket and
//! record, drop duplicates left by an interrupted displacement, recompute the stash overflow counts and
//! clear lock bits (repairs are header stores, persisted together), count the records.

use std::collections::{BTreeMap, HashMap};

use super::index::{DashIndex, DashStats, dir_span};
use super::layout::{
    BUCKET_BYTES, FP_OFF, Geometry, Header, MAX_DEPTH, SB_ROOT, SLOTS, SUPER_BYTES, SegHeader,
    corruption, fingerprint, hash, le, prefix,
};
use crate::error::Result;
use crate::storage::pm::{Pm, XPLINE};

/// Reads the root word and the directory it names: `(offset, global depth, entries)`.
pub(super) fn read_dir<P: Pm>(pm: &P) -> Result<(u64, u64, Vec<u64>)> {
    let root = pm.load_u64_atomic(SB_ROOT)?;
    let (off, g) = (root & !0xFF, root & 0xFF);
    if g > MAX_DEPTH
        || off < SUPER_BYTES
        || !off.is_multiple_of(XPLINE)
        || off.checked_add(dir_span(g)).is_none_or(|e| e > pm.len())
    {
        return Err(corruption(SB_ROOT, format!("bad root word {root:#x}")));
    }
    let mut bytes = vec![0u8; 8usize << g];
    pm.read(off, &mut bytes)?;
    Ok((off, g, bytes.chunks_exact(8).map(le).collect()))
}

/// What a segment scan found: records, and header words that differ from what they should be.
pub(super) struct SegScan {
    pub records: u64,
    /// (bucket offset, corrected header).
    pub fixes: Vec<(u64, Header)>,
    pub dropped: u64,
}

/// The left-aligned hash prefix that directory entry `i` stands for under global depth `g`.
pub(super) fn entry_prefix(i: u64, g: u64) -> u64 {
    if g == 0 { 0 } else { i << (64 - g) }
}

impl<P: Pm> DashIndex<P> {
    /// Opens an index that `create` formatted (module docs of `dash`). Damage is `Error::Corruption`.
    pub fn open(pm: P) -> Result<Self> {
        let geo = Geometry::read(&pm)?;
        let (dir_off, depth, dir) = read_dir(&pm)?;
        let mut ix = DashIndex {
            pm,
            geo,
            dir_off,
            depth,
            dir,
            segs: BTreeMap::new(),
            heap_end: 0,
            len: 0,
            stats: DashStats::default(),
            poisoned: None,
        };
        // Every entry names a valid segment whose pattern is the entry's prefix at its local depth.
        let mut pending = Vec::new();
        for (i, &seg) in ix.dir.iter().enumerate() {
            let h = ix.entry_segment(i as u64, seg)?;
            if h.target != 0 && !pending.iter().any(|&(s, _)| s == seg) {
                pending.push((seg, h));
            }
        }
        for (seg, h) in pending {
            let bit = 1u64 << (63 - h.depth);
            let t = SegHeader::read(&ix.pm, &ix.geo, h.target)?;
            if h.depth >= ix.depth
                || t.depth != h.depth + 1
                || t.target != 0
                || t.pattern != h.pattern | bit
            {
                return Err(corruption(seg, "segment names an invalid split target"));
            }
            ix.finish_split(seg, h.pattern, h.depth, h.target)?;
            ix.stats.recovered_splits += 1;
        }
        ix.segs = ix.check_directory()?;
        // Scan and repair every segment.
        let mut seen = HashMap::new();
        let mut fixes = Vec::new();
        for (&seg, &d) in &ix.segs {
            let pattern = SegHeader::read(&ix.pm, &ix.geo, seg)?.pattern;
            let scan = ix.scan_segment(seg, d, pattern, &mut seen)?;
            ix.len += scan.records;
            ix.stats.dropped_duplicates += scan.dropped;
            fixes.extend(scan.fixes);
        }
        for &(b, hdr) in &fixes {
            ix.pm.store_u64_atomic(b, hdr.0)?;
            ix.pm.flush(b, 8)?;
        }
        if !fixes.is_empty() {
            ix.pm.fence();
        }
        let last = ix
            .segs
            .keys()
            .next_back()
            .map_or(0, |&s| s + ix.geo.seg_bytes());
        ix.heap_end = last.max(ix.dir_off + dir_span(ix.depth));
        Ok(ix)
    }

    /// Header of the segment directory entry `i` names, checked against the entry (depth ≤ global depth,
    /// pattern = the entry's prefix).
    pub(super) fn entry_segment(&self, i: u64, seg: u64) -> Result<SegHeader> {
        let h = SegHeader::read(&self.pm, &self.geo, seg)?;
        if h.depth > self.depth || h.pattern != prefix(entry_prefix(i, self.depth), h.depth) {
            return Err(corruption(
                seg,
                format!(
                    "directory entry {i} names a segment of depth {} and pattern {:#x}",
                    h.depth, h.pattern
                ),
            ));
        }
        Ok(h)
    }

    /// Checks the directory with no split pending: every entry valid, each segment's entries exactly its
    /// aligned block of `2^(global − local)` entries, segments disjoint from each other and the directory.
    /// Returns the local depth of every segment.
    pub(super) fn check_directory(&self) -> Result<BTreeMap<u64, u64>> {
        let g = self.depth;
        let mut segs = BTreeMap::new();
        let mut counts: HashMap<u64, u64> = HashMap::new();
        for (i, &seg) in self.dir.iter().enumerate() {
            let i = i as u64;
            let h = self.entry_segment(i, seg)?;
            let start = i >> (g - h.depth) << (g - h.depth);
            if h.target != 0 || self.dir[start as usize] != seg {
                return Err(corruption(
                    seg,
                    format!("directory entry {i}: split pending or block broken"),
                ));
            }
            segs.insert(seg, h.depth);
            *counts.entry(seg).or_default() += 1;
        }
        for (&seg, &d) in &segs {
            if counts.get(&seg).copied() != Some(1 << (g - d)) {
                return Err(corruption(
                    seg,
                    "segment named by a wrong number of entries",
                ));
            }
        }
        let dir_end = self.dir_off + dir_span(g);
        let mut prev_end = 0;
        for &seg in segs.keys() {
            let end = seg + self.geo.seg_bytes();
            if seg < prev_end || (seg < dir_end && end > self.dir_off) {
                return Err(corruption(seg, "segments overlap"));
            }
            prev_end = end;
        }
        Ok(segs)
    }

    /// Reads every bucket of the segment at `seg` (depth `d`, pattern `pattern`) and validates it: header
    /// words well formed, fingerprints matching their keys, every key of this segment's pattern and in its
    /// home bucket, the one after it, or the stash. A key already in `seen` with the same value is a
    /// displacement duplicate and is dropped; with another value it is damage. Returns the corrected
    /// headers (duplicates dropped, overflow counts recomputed, lock bits cleared).
    pub(super) fn scan_segment(
        &self,
        seg: u64,
        d: u64,
        pattern: u64,
        seen: &mut HashMap<u64, u64>,
    ) -> Result<SegScan> {
        let n = self.geo.buckets + self.geo.stash;
        let mask = self.geo.buckets - 1;
        let mut headers = Vec::with_capacity(n as usize);
        let mut bitmaps = Vec::with_capacity(n as usize);
        let mut overflow = vec![0u64; n as usize];
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
            for s in 0..SLOTS {
                if !hdr.used(s) {
                    continue;
                }
                let at = super::index::slot_off(0, s) as usize;
                let (k, v) = (le(&buf[at..]), le(&buf[at + 8..]));
                let h = hash(k);
                let home = h & mask;
                let placed = if i < self.geo.buckets {
                    home == i || (home + 1) & mask == i
                } else {
                    true
                };
                if buf[FP_OFF as usize + s] != fingerprint(h) || prefix(h, d) != pattern || !placed
                {
                    return Err(corruption(
                        b,
                        format!("slot {s}: key {k:#x} misplaced or fingerprint wrong"),
                    ));
                }
                match seen.insert(k, v) {
                    None => {
                        records += 1;
                        if i >= self.geo.buckets {
                            overflow[home as usize] += 1;
                        }
                    }
                    Some(old) if old == v => {
                        bitmap &= !(1 << s);
                        dropped += 1;
                    }
                    Some(_) => {
                        return Err(corruption(
                            b,
                            format!("key {k:#x} twice with different values"),
                        ));
                    }
                }
            }
            headers.push(hdr);
            bitmaps.push(bitmap);
        }
        let mut fixes = Vec::new();
        for (i, hdr) in headers.iter().enumerate() {
            if hdr.bitmap() != bitmaps[i] || hdr.overflow() != overflow[i] || hdr.locked() {
                let b = self.geo.bucket_off(seg, i as u64);
                fixes.push((b, hdr.next(bitmaps[i], overflow[i])));
            }
        }
        Ok(SegScan {
            records,
            fixes,
            dropped,
        })
    }
}
