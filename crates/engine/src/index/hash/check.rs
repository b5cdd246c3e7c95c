//! Iteration over the visible records and the structural self-check used by the tests (both take each
//! bucket's lock in turn: run them when no write is in flight for a consistent answer).

use std::collections::HashSet;

use super::generation::Generation;
use super::index::HashIndex;
use super::layout::{CHUNK_SLOTS, corruption, fingerprint, hash};
use super::recover::{scan_bucket, scan_pool};
use super::write::PIN_LSN;
use crate::error::Result;
use crate::storage::pm::Pm;

impl<P: Pm> HashIndex<P> {
    /// Calls `visit(key, value)` once for every live key (bucket by bucket, in chain order).
    pub fn for_each(&self, mut visit: impl FnMut(u64, u64)) -> Result<()> {
        let g = self.current();
        for b in 0..g.layout.buckets() {
            let _w = g.buckets[b as usize].writer.lock();
            for (k, v) in self.live_records(g, b)? {
                visit(k, v);
            }
        }
        Ok(())
    }

    /// Verifies the DRAM state against PM and itself. Each bucket's chain is scanned afresh from PM (as
    /// recovery would) and compared: chain length, pool links, the tail's committed slots and commit
    /// word, fingerprints, and live bits — which must be PM's newest versions minus the keys that have a
    /// staged entry. Staged entries: distinct keys of this bucket, fingerprints, live exactly when a put,
    /// pins inside their log's unbroken run. Also: no pool chunk both linked and free, `len` equals the live
    /// slots, load factor at most 7/8. Any mismatch is `Corruption`.
    pub fn check_invariants(&self) -> Result<()> {
        let g = self.current();
        let t = g.layout;
        let fresh = Generation::new(t, self.geo.nonce);
        let owners = scan_pool(&self.pm, &self.geo, &fresh)?;
        let free: HashSet<u32> = g.pool.free.lock().iter().copied().collect();
        let logs: Vec<(u64, u64)> = g
            .logs
            .iter()
            .map(|l| {
                let l = l.lock();
                (l.durable_tail, l.head)
            })
            .collect();
        let mut seen = HashSet::new();
        let mut live_total = 0u64;
        for b in 0..t.buckets() {
            let bucket = &g.buckets[b as usize];
            let w = bucket.writer.lock();
            let at = t.bucket_off(b);
            let fail = |what: String| Err(corruption(at, format!("bucket {b}: {what}")));
            let own = owners.get(&b).map_or(&[][..], |v| &v[..]);
            scan_bucket(&self.pm, &self.geo, &fresh, b, own, &mut seen)?;
            let (pm_b, pm_w) = (
                &fresh.buckets[b as usize],
                fresh.buckets[b as usize].writer.lock(),
            );
            let (shape, pm_shape) = (bucket.shape(), pm_b.shape());
            // A tail with nothing committed yet is not in PM: PM's chain ends with the full chunk before it.
            let fresh_tail = w.tail_head.count() == 0 && shape.chunks() > 1;
            let (chunks, committed, head) = if fresh_tail {
                (shape.chunks() - 1, CHUNK_SLOTS, pm_w.tail_head)
            } else {
                (shape.chunks(), shape.committed(), w.tail_head)
            };
            if (chunks, committed) != (pm_shape.chunks(), pm_shape.committed())
                || shape.committed() != w.tail_head.count()
            {
                return fail(format!("shape {shape:?} but PM holds {pm_shape:?}"));
            }
            if head != pm_w.tail_head || w.seq < pm_w.seq {
                return fail("tail commit word or sequence number differs from PM".into());
            }
            for pos in g.pool.home..shape.chunks() {
                let c = bucket.overflow(&g.pool, pos);
                if (pos < chunks && c != pm_b.overflow(&fresh.pool, pos)) || free.contains(&c) {
                    return fail(format!(
                        "pool link of position {pos} differs from PM or is free"
                    ));
                }
            }
            let start = shape.tail_start();
            let mut staged_keys = HashSet::new();
            for i in shape.committed()..shape.tail_used() {
                let (k, _) = bucket.tail_slot(i);
                let p = start + i;
                let tomb = w.tail_tomb >> i & 1 == 1;
                let (log, lsn) = (w.pins[i] >> 56, w.pins[i] & PIN_LSN);
                let pinned = logs
                    .get(log as usize)
                    .is_some_and(|&(tail, head)| (tail..head).contains(&lsn));
                if hash(k) & t.mask() != b || !staged_keys.insert(k) {
                    return fail(format!("staged key {k} misplaced or duplicated"));
                }
                if bucket.fp(&g.pool, p) != fingerprint(hash(k))
                    || bucket.is_live(&g.pool, p) == tomb
                {
                    return fail(format!("staged slot {p}: fingerprint or live bit wrong"));
                }
                if !pinned {
                    return fail(format!(
                        "staged slot {p} pins log {log} position {lsn} outside its run"
                    ));
                }
            }
            for p in 0..start + shape.committed() {
                let (k, v) = if p < start {
                    g.slot(&self.pm, b, bucket, shape, p)?
                } else {
                    bucket.tail_slot(p - start)
                };
                let (pk, pv) = fresh.slot(&self.pm, b, pm_b, pm_shape, p)?;
                if (k, v) != (pk, pv) || bucket.fp(&g.pool, p) != pm_b.fp(&fresh.pool, p) {
                    return fail(format!("slot {p} or its fingerprint differs from PM"));
                }
                let want = pm_b.is_live(&fresh.pool, p) && !staged_keys.contains(&k);
                if bucket.is_live(&g.pool, p) != want {
                    return fail(format!("live bit of slot {p} is not {want}"));
                }
            }
            // The summary names the group of every home slot in use (lookups scan only those groups).
            for p in 0..shape.fill().min(g.pool.home_slots()) {
                let fp = bucket.fp(&g.pool, p);
                if !bucket.summary_names(&g.pool, p, fp) {
                    return fail(format!("summary misses slot {p} (fingerprint {fp:#x})"));
                }
            }
            live_total += bucket.live_count(&g.pool);
            const { assert!(CHUNK_SLOTS == 15) };
        }
        if live_total != self.len() {
            return Err(corruption(
                t.off,
                format!("len {} but {live_total} live slots", self.len()),
            ));
        }
        // Above 7/8 only while a doubling runs its slices (`grow`).
        if self.len() * 8 > Self::slots(&t) * 7 && g.next_generation().is_none() {
            return Err(corruption(t.off, "load factor above 7/8"));
        }
        Ok(())
    }
}
