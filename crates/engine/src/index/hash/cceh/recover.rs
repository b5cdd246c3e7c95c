//! `open`: validate the superblock, the root word and the directory, roll an interrupted split forward,
//! check the directory's block structure, then scan every segment once: every live record (key not
//! [`EMPTY`], hash prefix = the segment's pattern) must lie in one of its two runs and be the only one of
//! its key; records stale by their prefix are skipped. Counts the records.
//!
//! **Interrupted split**: a split is committed by the first of its directory stores that reaches PM
//! (`split`, step 4). After a crash in steps 4–5, some entries of the new segment `T`'s block name `T`,
//! the others still name its parent `S`, whose depth may still be `T`'s minus one. Recovery finds every
//! such pair — an entry inside a segment's block naming a segment one level deeper whose pattern extends
//! it, or the reverse — and finishes the split: the whole block of `T` named `T`, then `S.depth = T.depth`.
//! Anything else that breaks the block structure is damage.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use super::index::{CcehIndex, CcehStats};
use super::layout::{
    EMPTY, Geometry, SB_ROOT, SEG_STATE, SLOT_BYTES, SUPER_BYTES, SegHeader, block, corruption,
    hash1, hash2, le, prefix, read_seg,
};
use crate::error::Result;
use crate::index::hash::dash::eh::{check_blocks, dir_span, entry_headers, read_dir};
use crate::storage::pm::Pm;

impl<P: Pm> CcehIndex<P> {
    /// Opens an index that `create` formatted (module docs of `cceh`). Damage is `Error::Corruption`.
    pub fn open(pm: P) -> Result<Self> {
        let geo = Geometry::read(&pm)?;
        let (dir_off, depth, dir) = read_dir(&pm, SB_ROOT, SUPER_BYTES, corruption)?;
        let mut ix = CcehIndex {
            pm,
            geo,
            dir_off,
            depth,
            dir,
            segs: BTreeMap::new(),
            heap_end: 0,
            len: 0,
            stats: CcehStats::default(),
            poisoned: None,
        };
        let mut headers = ix.headers()?;
        for (s, t) in ix.interrupted_splits(&headers)? {
            let th = headers[&t];
            ix.point_block_at(t, th.pattern, th.depth)?;
            ix.pm.store_u64_atomic(s + SEG_STATE, th.depth)?;
            ix.pm.persist(s + SEG_STATE, 8)?;
            if let Some(h) = headers.get_mut(&s) {
                h.depth = th.depth;
            }
            ix.stats.recovered_splits += 1;
        }
        ix.segs = check_blocks(&ix.geo, ix.dir_off, ix.depth, &ix.dir, &headers)?;
        ix.len = u64::from(ix.empty_key()?.is_some());
        for (&seg, h) in &headers {
            ix.len += ix.scan_segment(seg, h)?;
        }
        let last = ix
            .segs
            .keys()
            .next_back()
            .map_or(0, |&s| s + geo.seg_bytes());
        ix.heap_end = last.max(ix.dir_off + dir_span(ix.depth));
        Ok(ix)
    }

    /// The validated header of every segment the directory names, checked against the entries naming it.
    pub(super) fn headers(&self) -> Result<BTreeMap<u64, SegHeader>> {
        entry_headers::<Geometry>(self.dir_off, self.depth, &self.dir, |seg| {
            read_seg(&self.pm, &self.geo, seg)
        })
    }

    /// Pairs `(S, T)` of a split whose directory update was interrupted (module docs); any other entry
    /// outside its segment's block is damage.
    fn interrupted_splits(
        &self,
        headers: &BTreeMap<u64, SegHeader>,
    ) -> Result<BTreeSet<(u64, u64)>> {
        let mut pairs = BTreeSet::new();
        // `child` is one level deeper than `parent` and owns the upper half of its block.
        let extends = |parent: &SegHeader, child: &SegHeader| {
            child.depth == parent.depth + 1
                && child.pattern == parent.pattern | 1 << (63 - parent.depth)
        };
        for (&x, hx) in headers {
            let (start, n) = block(hx.pattern, hx.depth, self.depth);
            for j in start..start + n {
                let y = self.dir[j as usize];
                let hy = &headers[&y];
                if y == x {
                    continue;
                } else if extends(hx, hy) {
                    pairs.insert((x, y));
                } else if extends(hy, hx) {
                    pairs.insert((y, x));
                } else {
                    return Err(corruption(
                        self.dir_off + 8 * j,
                        format!(
                            "directory entry {j} names the segment at {y} inside the block of {x}"
                        ),
                    ));
                }
            }
        }
        Ok(pairs)
    }

    /// Validates the records of the segment at `seg` (header `h`): every live record lies in one of its
    /// two runs, and no key is there twice. Returns how many live records it holds.
    pub(super) fn scan_segment(&self, seg: u64, h: &SegHeader) -> Result<u64> {
        let slots = self.read_slots(seg)?;
        let mut keys = HashSet::new();
        for (s, rec) in slots.chunks_exact(SLOT_BYTES as usize).enumerate() {
            let k = le(rec);
            let h1 = hash1(k);
            if k == EMPTY || prefix(h1, h.depth) != h.pattern {
                continue;
            }
            let at = self.geo.slot_off(seg, s as u64);
            let [a, b] = self.geo.runs(h1, hash2(k));
            if !self.geo.in_run(a, s as u64) && !self.geo.in_run(b, s as u64) {
                return Err(corruption(
                    at,
                    format!("key {k:#x} outside both of its probe runs"),
                ));
            }
            if !keys.insert(k) {
                return Err(corruption(at, format!("key {k:#x} stored twice")));
            }
        }
        Ok(keys.len() as u64)
    }
}
