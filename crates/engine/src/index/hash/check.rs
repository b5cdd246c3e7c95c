//! Iteration over the visible records and the structural self-check used by the tests.

use std::collections::HashSet;

use super::index::HashIndex;
use super::layout::{CHUNK_SLOTS, SLOTS, corruption, hash};
use super::recover::scan_bucket;
use crate::error::Result;
use crate::storage::pm::Pm;

impl<P: Pm> HashIndex<P> {
    /// Calls `visit(key, value)` once for every live key (bucket by bucket, D-bucket first).
    pub fn for_each(&self, mut visit: impl FnMut(u64, u64)) -> Result<()> {
        for (b, bucket) in self.buckets.iter().enumerate() {
            for i in 0..bucket.dlen as usize {
                if let Some(v) = bucket.staged_value(i) {
                    visit(bucket.dkeys[i], v);
                }
            }
            for s in 0..bucket.fill as usize {
                if bucket.is_live(s) {
                    let (k, v) = self.read_slot(b as u64, s)?;
                    visit(k, v);
                }
            }
        }
        Ok(())
    }

    /// Verifies the DRAM state against PM and itself: each bucket's meta mirror, fingerprints and live bits
    /// equal what a fresh scan of its P-bucket gives (minus keys the D-bucket supersedes); D-bucket keys are
    /// distinct and hash to their bucket; the staged set lists exactly the non-empty D-buckets; `len` counts
    /// the visible records; the load factor is at most 7/8. Any mismatch is reported as `Corruption`.
    pub fn check_invariants(&self) -> Result<()> {
        let t = self.table;
        let mut seen = HashSet::new();
        let mut data = Vec::new();
        let mut visible = 0u64;
        let mut staged = 0usize;
        for (b, bucket) in self.buckets.iter().enumerate() {
            let b = b as u64;
            let at = t.bucket_off(b);
            let fail = |what: String| Err(corruption(at, format!("bucket {b}: {what}")));
            let (mut fresh, _) = scan_bucket(&self.pm, t, b, &mut seen, &mut data)?;
            if fresh.meta != bucket.meta || fresh.fill != bucket.fill {
                return fail("meta line differs from its DRAM mirror".into());
            }
            if bucket.fill as usize > SLOTS {
                return fail(format!("{} slots in use", bucket.fill));
            }
            for s in 0..SLOTS {
                if bucket.slot_bits(s).0 && fresh.fps[s] != bucket.fps[s] {
                    return fail(format!("fingerprint of slot {s} does not match its key"));
                }
            }
            let dlen = bucket.dlen as usize;
            if dlen >= CHUNK_SLOTS {
                return fail(format!("{dlen} staged entries at rest"));
            }
            for i in 0..dlen {
                let k = bucket.dkeys[i];
                if hash(k) & t.mask() != b || bucket.dkeys[..i].contains(&k) {
                    return fail(format!("staged key {k} misplaced or duplicated"));
                }
                visible += bucket.staged_value(i).is_some() as u64;
                // A staged key supersedes its P-bucket version: that slot must not be live.
                for s in 0..bucket.fill as usize {
                    if fresh.is_live(s) && self.read_slot(b, s)?.0 == k {
                        fresh.set_live(s, false);
                    }
                }
            }
            if fresh.live != bucket.live {
                return fail("live bits differ from the newest versions in PM".into());
            }
            visible += bucket.live_count();
            if dlen > 0 {
                staged += 1;
                if !self.staged.contains(&(bucket.dfirst, b)) {
                    return fail("non-empty D-bucket missing from the staged set".into());
                }
            }
        }
        if staged != self.staged.len() {
            return Err(corruption(t.off, "staged set lists empty D-buckets"));
        }
        if visible != self.len {
            return Err(corruption(
                t.off,
                format!("len {} but {visible} visible records", self.len),
            ));
        }
        if self.len * 8 > self.capacity() * 7 {
            return Err(corruption(t.off, "load factor above 7/8"));
        }
        Ok(())
    }
}
