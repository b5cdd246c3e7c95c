//! Iteration over the records and the structural self-check used by the tests.

use std::collections::HashMap;

use super::index::DashIndex;
use super::layout::{SLOTS, SegHeader, corruption};
use super::recover::read_dir;
use crate::error::Result;
use crate::storage::pm::Pm;

impl<P: Pm> DashIndex<P> {
    /// Calls `visit(key, value)` once for every live key (segment by segment).
    pub fn for_each(&self, mut visit: impl FnMut(u64, u64)) -> Result<()> {
        for &seg in self.segs.keys() {
            for i in 0..self.geo.buckets + self.geo.stash {
                let b = self.geo.bucket_off(seg, i);
                let hdr = self.header(b)?;
                for s in 0..SLOTS {
                    if hdr.used(s) {
                        let (k, v) = self.read_slot(b, s)?;
                        visit(k, v);
                    }
                }
            }
        }
        Ok(())
    }

    /// Verifies PM against itself and the DRAM state: the root word and directory equal the mirror; the
    /// directory is well formed with no split pending; segment depths equal the DRAM map; every bucket and
    /// record is valid (as `open` checks), with no duplicate key anywhere, overflow counts exact and no
    /// lock bit set; `len` counts the records; everything lies below the heap end. Any mismatch is
    /// reported as `Corruption`.
    pub fn check_invariants(&self) -> Result<()> {
        let (off, g, dir) = read_dir(&self.pm)?;
        if (off, g) != (self.dir_off, self.depth) || dir != self.dir {
            return Err(corruption(off, "directory differs from its DRAM mirror"));
        }
        let segs = self.check_directory()?;
        if segs != self.segs {
            return Err(corruption(off, "segment depths differ from the DRAM map"));
        }
        let mut seen = HashMap::new();
        let mut records = 0;
        for (&seg, &d) in &segs {
            let pattern = SegHeader::read(&self.pm, &self.geo, seg)?.pattern;
            let scan = self.scan_segment(seg, d, pattern, &mut seen)?;
            if scan.dropped > 0 || !scan.fixes.is_empty() {
                return Err(corruption(
                    seg,
                    "duplicate key, wrong overflow count or lock bit set",
                ));
            }
            if seg + self.geo.seg_bytes() > self.heap_end {
                return Err(corruption(seg, "segment beyond the heap end"));
            }
            records += scan.records;
        }
        if records != self.len {
            return Err(corruption(
                0,
                format!("{records} records, len says {}", self.len),
            ));
        }
        Ok(())
    }
}
