//! Iteration over the records and the structural self-check used by the tests.

use super::index::CcehIndex;
use super::layout::{EMPTY, SB_ROOT, SLOT_BYTES, SUPER_BYTES, corruption, hash1, le, prefix};
use crate::error::Result;
use crate::index::hash::dash::eh::{check_blocks, read_dir};
use crate::storage::pm::Pm;

impl<P: Pm> CcehIndex<P> {
    /// Calls `visit(key, value)` once for every live key (the reserved key first, then segment by
    /// segment; records stale by their segment's local depth are skipped).
    pub fn for_each(&self, mut visit: impl FnMut(u64, u64)) -> Result<()> {
        if let Some(v) = self.empty_key()? {
            visit(EMPTY, v);
        }
        for (&seg, &d) in &self.segs {
            let pattern = super::layout::read_seg(&self.pm, &self.geo, seg)?.pattern;
            let slots = self.read_slots(seg)?;
            for rec in slots.chunks_exact(SLOT_BYTES as usize) {
                let k = le(rec);
                if k != EMPTY && prefix(hash1(k), d) == pattern {
                    visit(k, le(&rec[8..]));
                }
            }
        }
        Ok(())
    }

    /// Verifies PM against itself and the DRAM state: the root word and directory equal the mirror; every
    /// segment is named by exactly its block (no split half done), with the depth of the DRAM map; every
    /// live record lies in one of its runs, once; `len` counts them (and the reserved key); everything lies
    /// below the heap end. Any mismatch is reported as `Corruption`.
    pub fn check_invariants(&self) -> Result<()> {
        let (off, g, dir) = read_dir(&self.pm, SB_ROOT, SUPER_BYTES, corruption)?;
        if (off, g) != (self.dir_off, self.depth) || dir != self.dir {
            return Err(corruption(off, "directory differs from its DRAM mirror"));
        }
        let headers = self.headers()?;
        let segs = check_blocks(&self.geo, off, g, &dir, &headers)?;
        if segs != self.segs {
            return Err(corruption(off, "segment depths differ from the DRAM map"));
        }
        let mut records = u64::from(self.empty_key()?.is_some());
        for (&seg, h) in &headers {
            if seg + self.geo.seg_bytes() > self.heap_end {
                return Err(corruption(seg, "segment beyond the heap end"));
            }
            records += self.scan_segment(seg, h)?;
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
