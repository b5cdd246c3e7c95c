//! Iteration over the records and the structural self-check used by the tests. Both first repair every
//! segment not repaired since the last open (they touch every segment anyway), and both expect no write
//! to run meanwhile (a concurrent writer makes iteration miss or repeat records, and the check fail).

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use super::index::{DashIndex, slot_off};
use super::layout::{
    BUCKET_BYTES, Geometry, Header, SB_CLEAN, SB_HEAP, SB_ROOT, SLOTS, SUPER_BYTES, corruption,
    entry_seg, entry_version, le, read_seg,
};
use super::lock::{backoff, read_stable};
use crate::error::Result;
use crate::index::hash::dash::eh::{check_blocks, entry_headers, read_dir};
use crate::storage::pm::Pm;

impl<P: Pm> DashIndex<P> {
    /// Calls `visit(key, value)` once for every live key (segment by segment; each bucket read whole with
    /// a version check, retried while a writer holds it).
    pub fn for_each(&self, mut visit: impl FnMut(u64, u64)) -> Result<()> {
        self.repair_all()?;
        let mut records = Vec::with_capacity(SLOTS);
        for seg in self.dir.load().segments() {
            for i in 0..self.geo.buckets + self.geo.stash {
                let b = self.geo.bucket_off(seg, i);
                let mut spins = 0;
                loop {
                    records.clear();
                    let read = read_stable(&self.pm, b, |meta| {
                        let hdr = Header(le(meta));
                        let mut buf = [0u8; BUCKET_BYTES as usize];
                        self.pm.read(b, &mut buf)?;
                        for s in (0..SLOTS).filter(|&s| hdr.used(s)) {
                            let at = slot_off(0, s) as usize;
                            records.push((le(&buf[at..]), le(&buf[at + 8..])));
                        }
                        Ok(())
                    })?;
                    if read.is_some() {
                        break;
                    }
                    backoff(&mut spins);
                }
                for &(k, v) in &records {
                    visit(k, v);
                }
            }
        }
        Ok(())
    }

    /// Verifies PM against itself and the DRAM state, after repairing every segment: the root word and
    /// directory equal the mirror, every entry at the current crash version; the heap word equals the heap
    /// end, the clean flag is 0; the directory is well formed with no split pending; every bucket and
    /// record is valid (as repair checks), with no duplicate key, overflow hints right and no lock bit set;
    /// `len` and the segment count are right; everything lies below the heap end. Any mismatch is reported
    /// as `Corruption`.
    pub fn check_invariants(&self) -> Result<()> {
        self.repair_all()?;
        let shared = self.shared.lock();
        let dir = self.dir.load_full();
        let (off, g, raw) = read_dir(&self.pm, SB_ROOT, SUPER_BYTES, corruption)?;
        let segs: Vec<u64> = raw.iter().map(|&e| entry_seg(e)).collect();
        if (off, g) != (dir.off, dir.depth)
            || segs != dir.segs_by_entry()
            || !dir.stale().is_empty()
        {
            return Err(corruption(off, "directory differs from its DRAM mirror"));
        }
        if let Some(i) = raw.iter().position(|&e| entry_version(e) != self.version) {
            return Err(corruption(
                off + 8 * i as u64,
                "entry not at the crash version",
            ));
        }
        if self.pm.load_u64_atomic(SB_HEAP)? != shared.heap_end
            || self.pm.load_u64_atomic(SB_CLEAN)? != 0
        {
            return Err(corruption(SB_HEAP, "heap word or clean flag wrong"));
        }
        let headers =
            entry_headers::<Geometry>(off, g, &segs, |seg| read_seg(&self.pm, &self.geo, seg))?;
        if let Some((&seg, _)) = headers.iter().find(|(_, h)| h.target != 0) {
            return Err(corruption(seg, "split pending"));
        }
        let depths: BTreeMap<u64, u64> = check_blocks(&self.geo, off, g, &segs, &headers)?;
        if depths.len() as u64 != self.segments() {
            return Err(corruption(off, "segment count differs"));
        }
        let mut records = 0;
        for (&seg, h) in &headers {
            let scan = self.scan_segment(seg, h.pattern, h.depth, false)?;
            if scan.dropped > 0 || !scan.fixes.is_empty() {
                return Err(corruption(
                    seg,
                    "duplicate key, wrong overflow hints or lock bit set",
                ));
            }
            if seg + self.geo.seg_bytes() > shared.heap_end {
                return Err(corruption(seg, "segment beyond the heap end"));
            }
            records += scan.records;
        }
        let len = self.len.load(Ordering::Acquire);
        if records != len {
            return Err(corruption(0, format!("{records} records, len says {len}")));
        }
        Ok(())
    }
}
