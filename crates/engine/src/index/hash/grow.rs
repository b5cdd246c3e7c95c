//! Doubling: the next generation (twice the buckets, its own logs and pool) is built in fresh PM space and
//! switched in by one atomic store of the superblock's root word.
//!
//! Writers keep working while it is built: the builder takes each old bucket's lock in turn, gathers its
//! live records (committed ones from PM, staged ones from DRAM), marks it **moved** and releases it, then
//! writes the records to the two buckets they split into (whole XPLines, commit words inside: nothing is
//! reachable before the root switch). A write to a bucket not yet moved goes to the old generation (its log,
//! its D-bucket) and is copied with the bucket; a write to a moved bucket waits for the new generation.
//! Lookups never wait: a moved bucket's contents are frozen and still valid. After the last bucket: fence,
//! root switch, then the new generation is published to DRAM. A crash before the switch recovers the old
//! generation (its logs hold every staged write); after it, the new one, which holds every acknowledged
//! write (the new logs start empty).
//!
//! Cost: reads every live record once, writes the new table's used chunks once (O(n), amortised over the
//! ≥ n/2 inserts between doublings); the pool of the new generation is zeroed.

use std::sync::atomic::{Ordering, fence};

use super::bucket::{Shape, Writer};
use super::compact::place_records;
use super::generation::Generation;
use super::index::HashIndex;
use super::layout::{
    CHUNK_SLOTS, ChunkHead, Gen, HOME_CHUNKS, MAX_CHAIN, MAX_LOG2_BUCKETS, SB_ROOT, SUPER_BYTES,
    chunk_image, hash,
};
use super::log::LogStats;
use crate::error::{Error, Result};
use crate::storage::pm::{Pm, XPLINE};

impl<P: Pm> HashIndex<P> {
    /// Doubles the table of generation `from`, unless another thread already replaced it.
    pub(super) fn grow(&self, from: &Generation) -> Result<()> {
        let _resize = self.resize.lock();
        if !std::ptr::eq(self.current(), from) {
            return Ok(());
        }
        let old = from.layout;
        if old.log2 >= MAX_LOG2_BUCKETS {
            return Err(Error::ResourceExhausted(format!(
                "hash table would need more than 2^{MAX_LOG2_BUCKETS} buckets"
            )));
        }
        let off = self.place(&old, old.log2 + 1)?;
        let layout = Gen::plan(&self.geo, off, old.number + 1, old.log2 + 1);
        // Lookups still on the generation before `from` may read the space written from here on.
        self.building.store(layout.number, Ordering::Relaxed);
        fence(Ordering::Release);
        let result = self.build(from, layout);
        match result {
            Ok(tbl) => {
                let mut retired = LogStats::default();
                for log in from.logs.iter() {
                    retired.add(&log.lock().stats);
                }
                self.retired_stats.lock().add(&retired);
                self.publish(tbl);
                self.grows.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err(e) => {
                // Buckets may be marked moved already: nobody may write to `from` any more.
                self.poison(&Error::Poisoned(format!("doubling failed: {e}")));
                Err(e)
            }
        }
    }

    /// Builds and switches to generation `layout` from `from` (module docs).
    fn build(&self, from: &Generation, layout: Gen) -> Result<Generation> {
        let tbl = Generation::new(layout, self.geo.nonce);
        tbl.format(&self.pm, self.geo.nonce)?;
        let n = from.layout.buckets();
        for b in 0..n {
            let bucket = &from.buckets[b as usize];
            let records = {
                let _w = bucket.writer.lock();
                let records = self.live_records(from, b)?;
                let s = bucket.shape();
                bucket.edit(|| {
                    bucket.set_shape(Shape::new(s.chunks(), s.committed(), s.staged(), true))
                });
                records
            };
            let (lo, hi): (Vec<_>, Vec<_>) = records
                .iter()
                .partition(|(k, _)| hash(*k) & layout.mask() == b);
            self.fill_bucket(&tbl, b, &lo)?;
            self.fill_bucket(&tbl, b + n, &hi)?;
        }
        self.pm.fence();
        self.pm.store_u64_atomic(SB_ROOT, layout.off)?;
        self.pm.persist(SB_ROOT, 8)?;
        Ok(tbl)
    }

    /// Writes `records` as bucket `b` of the unpublished generation `tbl` (committed chunks, sequence
    /// number 0) and sets its DRAM state.
    fn fill_bucket(&self, tbl: &Generation, b: u64, records: &[(u64, u64)]) -> Result<()> {
        let bucket = &tbl.buckets[b as usize];
        let chunks = records.len().div_ceil(CHUNK_SLOTS).max(1);
        if chunks > MAX_CHAIN {
            return Err(Error::Poisoned(format!(
                "bucket {b} of a new table would hold {} records",
                records.len()
            )));
        }
        let nonce = self.geo.nonce;
        let mut home = vec![0u8; chunks.min(HOME_CHUNKS) * XPLINE as usize];
        let mut last = ChunkHead::default();
        for pos in 0..chunks {
            let lo = pos * CHUNK_SLOTS;
            let slots = &records[lo.min(records.len())..(lo + CHUNK_SLOTS).min(records.len())];
            last = ChunkHead::new(slots.len(), 0, 0);
            let img = chunk_image(last, tbl.tag(nonce, b, pos), slots);
            if pos < HOME_CHUNKS {
                home[pos * XPLINE as usize..(pos + 1) * XPLINE as usize].copy_from_slice(&img);
            } else {
                let Some(c) = tbl.pool.free.lock().pop() else {
                    return Err(Error::ResourceExhausted(
                        "the pool of a new table is exhausted".into(),
                    ));
                };
                bucket.set_overflow(pos, c);
                self.pm
                    .write_nt(tbl.layout.pool_chunk(u64::from(c)), &img)?;
            }
        }
        if !records.is_empty() {
            self.pm.write_nt(tbl.layout.home_chunk(b, 0), &home)?;
        }
        place_records(tbl, bucket, records, chunks);
        *bucket.writer.lock() = Writer {
            tail_head: last,
            ..Writer::default()
        };
        Ok(())
    }

    /// Where a generation of 2^log2 buckets goes: at the heap start if it fits below `old`, else right
    /// after it.
    fn place(&self, old: &Gen, log2: u64) -> Result<u64> {
        let bytes = Gen::plan(&self.geo, SUPER_BYTES, 0, log2).bytes();
        let off = if SUPER_BYTES + bytes <= old.off {
            SUPER_BYTES
        } else {
            old.end()
        };
        if off + bytes > self.pm.len() {
            return Err(Error::ResourceExhausted(format!(
                "PM region of {} bytes has no room for a table of 2^{log2} buckets ({bytes} bytes at {off})",
                self.pm.len()
            )));
        }
        Ok(off)
    }
}
