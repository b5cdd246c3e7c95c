//! Doubling, a slice at a time: the next generation (twice the buckets, its own logs and pool) is built in
//! fresh PM space while the current one keeps serving every read and write, and switched in by one atomic
//! store of the superblock's root word.
//!
//! ## Steps
//! 1. **Start** (`start_growing`, when a write finds the table 7/8 full): plan the new generation, allocate
//!    its DRAM state, write its header and zero log tails, and link it as the current generation's `next`.
//! 2. **Slices** (`grow_step`, after each write, by whichever writer is not already stepping; the resize
//!    mutex serialises them): first zero the new generation's redo areas, logs and pool (a redo word or log
//!    record of an earlier, abandoned attempt at the same place and number would otherwise validate
//!    there), a 64 KiB piece per unit, then fence; then **move** buckets in order: under the old bucket's lock, gather its live
//!    records (committed ones from PM, staged ones from DRAM), write them to the two buckets they split
//!    into (whole XPLines, commit words inside), and advance the generation's `moved` count.
//! 3. **Mirroring**: the current generation stays complete until the switch — a write to a bucket not yet
//!    moved goes there only (it is copied with the bucket); a write to a moved bucket goes there *and*, still
//!    under the old bucket's lock, to its bucket of the new generation through a log of the new generation
//!    (`mirror`). Lookups read the current generation only and never wait.
//! 4. **Switch**, after the last bucket: take every log of the old generation (each old-generation write
//!    holds one), mark it **retired** (a writer that then gets a log finds that and retries in the next
//!    generation: nothing writes the old space after the switch, which a later table may reuse), fence,
//!    store and persist the root word, make the new generation current.
//!
//! A crash before the switch recovers the old generation, whose logs hold every write (mirrored ones too);
//! after it, the new one, whose chunks hold the moved records and whose logs every write mirrored since.
//! `grow` (a chain with no room left, recovery) runs the remaining slices at once.
//!
//! A mirrored write whose new bucket has no room (`Applied::MirrorFull`: a chain and pool full at a
//! quarter of the old load, which takes a pathological key set) finishes the doubling at once and retries
//! the write in the new generation: a concurrent lookup may miss it until then, as before an
//! acknowledgement.
//!
//! Cost: reads every live record once, writes the new table's used chunks and zeroes its logs and pool
//! once (O(n), amortised over the ≥ n/2 inserts between doublings); a write pays for at most [`SLICE`] units
//! (a bucket moved or 64 KiB zeroed: tens of microseconds), plus a second write (log record + D-bucket) when
//! its bucket was moved already.

use std::sync::atomic::{Ordering, fence};

use super::bucket::Writer;
use super::compact::place_records;
use super::generation::Generation;
use super::index::HashIndex;
use super::layout::{
    CHUNK_SLOTS, ChunkHead, Gen, MAX_LOG2_BUCKETS, SB_ROOT, SUPER_BYTES, chunk_image, hash,
};
use super::log::LogStats;
use super::write::{Applied, Source};
use crate::error::{Error, Result};
use crate::storage::pm::{Pm, XPLINE};

/// Units of doubling work one write does: buckets moved, or 64 KiB pieces of log and pool zeroed.
pub(super) const SLICE: u64 = 8;
/// Bytes zeroed per unit.
const ZERO_PIECE: u64 = 64 << 10;

/// A doubling under way (under the index's resize mutex): how far the new generation's redo areas, logs
/// and pool are zeroed (their end once done).
#[derive(Debug, Clone, Copy)]
pub(super) struct Growth {
    zeroed: u64,
}

impl<P: Pm> HashIndex<P> {
    /// Doubles generation `from` now: starts the doubling unless one is under way, then runs every slice
    /// left. Nothing if another thread already replaced `from`.
    pub(super) fn grow(&self, from: &Generation) -> Result<()> {
        let mut state = self.resize.lock();
        if !std::ptr::eq(self.current(), from) {
            return Ok(());
        }
        self.start(&mut state, from)?;
        while !self.step(&mut state, from, u64::MAX)? {}
        Ok(())
    }

    /// Starts doubling `from` unless one is under way or `from` was replaced; returns at once.
    pub(super) fn start_growing(&self, from: &Generation) -> Result<()> {
        let mut state = self.resize.lock();
        if !std::ptr::eq(self.current(), from) {
            return Ok(());
        }
        self.start(&mut state, from)
    }

    /// One slice of the doubling under way, if there is one and no other thread is doing a slice.
    pub(super) fn grow_step(&self) -> Result<()> {
        let Some(mut state) = self.resize.try_lock() else {
            return Ok(());
        };
        if state.is_none() {
            return Ok(());
        }
        // Holding the resize mutex: only its holder switches generations.
        let from = self.current();
        self.step(&mut state, from, SLICE).map(drop)
    }

    /// The layout a doubling of `from` would build now.
    fn next_layout(&self, from: &Generation) -> Result<Gen> {
        let old = from.layout;
        if old.log2 >= MAX_LOG2_BUCKETS {
            return Err(Error::ResourceExhausted(format!(
                "hash table would need more than 2^{MAX_LOG2_BUCKETS} buckets"
            )));
        }
        let off = self.place(&old, old.log2 + 1)?;
        Ok(Gen::plan(&self.geo, off, old.number + 1, old.log2 + 1))
    }

    /// Allocates and initialises the DRAM state of the generation a doubling of `from` will build, on a
    /// thread of its own (tens of megabytes of bucket array, huge pages compacted for: 100+ ms that the
    /// write which starts the doubling would otherwise wait for). Once per generation number.
    pub(super) fn prepare_next(&self, from: &Generation) {
        let number = from.layout.number + 1;
        if self.prepared_number.load(Ordering::Relaxed) == number {
            return;
        }
        let Ok(layout) = self.next_layout(from) else {
            return;
        };
        let mut prepared = self.prepared.lock();
        if self.prepared_number.swap(number, Ordering::Relaxed) == number {
            return;
        }
        let nonce = self.geo.nonce;
        *prepared = std::thread::Builder::new()
            .name("strata-hash-prepare".into())
            .spawn(move || Generation::new(layout, nonce))
            .ok()
            .map(|t| (layout, t));
    }

    /// The generation `prepare_next` made for `layout`, if it made that one (waits for its thread).
    fn take_prepared(&self, layout: Gen) -> Option<Generation> {
        let (planned, thread) = self.prepared.lock().take()?;
        let tbl = thread.join().ok()?;
        (planned == layout).then_some(tbl)
    }

    fn start(&self, state: &mut Option<Growth>, from: &Generation) -> Result<()> {
        if state.is_some() {
            return Ok(());
        }
        let layout = self.next_layout(from)?;
        // Lookups still on the generation before `from` may read the space written from here on.
        self.building.store(layout.number, Ordering::Relaxed);
        fence(Ordering::Release);
        let tbl = self
            .take_prepared(layout)
            .unwrap_or_else(|| Generation::new(layout, self.geo.nonce));
        if let Err(e) = tbl.format_header(&self.pm, self.geo.nonce) {
            self.poison(&Error::Poisoned(format!("doubling failed: {e}")));
            return Err(e);
        }
        self.pm.fence();
        let tbl = self.adopt(tbl);
        from.next
            .store(std::ptr::from_ref(tbl).cast_mut(), Ordering::Release);
        *state = Some(Growth {
            zeroed: layout.scratch(0),
        });
        Ok(())
    }

    /// Up to `units` of work on the doubling of `from` (module docs); true once it is switched in.
    fn step(&self, state: &mut Option<Growth>, from: &Generation, units: u64) -> Result<bool> {
        let Some(growth) = state.as_mut() else {
            return Ok(true);
        };
        let result = self.step_in(growth, from, units);
        match result {
            Ok(true) => *state = None,
            Ok(false) => {}
            // Buckets may be moved already: nobody may write to `from` any more.
            Err(ref e) => self.poison(&Error::Poisoned(format!("doubling failed: {e}"))),
        }
        result
    }

    fn step_in(&self, growth: &mut Growth, from: &Generation, units: u64) -> Result<bool> {
        let Some(tbl) = from.next_generation() else {
            return Err(Error::Poisoned(
                "a doubling under way without its next generation".into(),
            ));
        };
        let mut budget = units;
        let zero_end = tbl.layout.pool_chunk(tbl.layout.pool_chunks);
        if growth.zeroed < zero_end {
            let zeros = vec![0u8; ZERO_PIECE as usize];
            while growth.zeroed < zero_end && budget > 0 {
                let n = (zero_end - growth.zeroed).min(ZERO_PIECE);
                self.pm.write_nt(growth.zeroed, &zeros[..n as usize])?;
                growth.zeroed += n;
                budget -= 1;
            }
            if growth.zeroed < zero_end {
                return Ok(false);
            }
            // Zeroes before any record a mirrored write appends to the new logs.
            self.pm.fence();
        }
        let n = from.layout.buckets();
        let mut b = from.moved.load(Ordering::Relaxed);
        while b < n && budget > 0 {
            self.move_bucket(from, tbl, b)?;
            b += 1;
            budget -= 1;
        }
        if b < n {
            return Ok(false);
        }
        // The switch: with every log of `from` held, no write of `from` is under way, and every later one
        // finds it retired.
        let logs: Vec<_> = from.logs.iter().map(|l| l.lock()).collect();
        from.retired.store(true, Ordering::Release);
        self.pm.fence();
        self.pm.store_u64_atomic(SB_ROOT, tbl.layout.off)?;
        self.pm.persist(SB_ROOT, 8)?;
        let mut retired = LogStats::default();
        for log in &logs {
            retired.add(&log.stats);
        }
        self.retired_stats.lock().add(&retired);
        self.make_current(tbl);
        self.grows.fetch_add(1, Ordering::Relaxed);
        drop(logs);
        Ok(true)
    }

    /// Copies bucket `b` of `from` into buckets `b` and `b + n` of `tbl` and counts it moved, holding its
    /// lock throughout (so a writer that takes it next finds both copies ready to mirror into).
    fn move_bucket(&self, from: &Generation, tbl: &Generation, b: u64) -> Result<()> {
        let bucket = &from.buckets[b as usize];
        let _w = bucket.writer.lock();
        let records = self.live_records(from, b)?;
        let (lo, hi): (Vec<_>, Vec<_>) = records
            .iter()
            .partition(|(k, _)| hash(*k) & tbl.layout.mask() == b);
        self.fill_bucket(tbl, b, &lo)?;
        self.fill_bucket(tbl, b + from.layout.buckets(), &hi)?;
        from.moved.store(b + 1, Ordering::Release);
        Ok(())
    }

    /// Applies a write that generation `from` took in a moved bucket to the next generation too (the
    /// caller holds the old bucket's lock and a log of `from`).
    pub(super) fn mirror(
        &self,
        from: &Generation,
        key: u64,
        value: Option<u64>,
    ) -> Result<Applied> {
        let Some(tbl) = from.next_generation() else {
            return Err(Error::Poisoned(
                "a moved bucket without a next generation".into(),
            ));
        };
        let b = hash(key) & tbl.layout.mask();
        let mut log = self.lock_log(tbl);
        self.free_log_space(tbl, &mut log)?;
        let bucket = &tbl.buckets[b as usize];
        let mut w = bucket.writer.lock();
        match self.apply(tbl, b, &mut w, Source::Live(&mut log), key, value)? {
            Applied::Done(old) => Ok(Applied::Done(old)),
            _ => Ok(Applied::MirrorFull),
        }
    }

    /// Writes `records` as bucket `b` of the unpublished generation `tbl` (committed chunks, sequence
    /// number 0) and sets its DRAM state.
    fn fill_bucket(&self, tbl: &Generation, b: u64, records: &[(u64, u64)]) -> Result<()> {
        let bucket = &tbl.buckets[b as usize];
        let chunks = records.len().div_ceil(CHUNK_SLOTS).max(1);
        if chunks > tbl.layout.max_chain() {
            return Err(Error::Poisoned(format!(
                "bucket {b} of a new table would hold {} records",
                records.len()
            )));
        }
        let nonce = self.geo.nonce;
        let home_chunks = tbl.layout.home_chunks();
        let mut home = vec![0u8; chunks.min(home_chunks) * XPLINE as usize];
        let mut last = ChunkHead::default();
        for pos in 0..chunks {
            let lo = pos * CHUNK_SLOTS;
            let slots = &records[lo.min(records.len())..(lo + CHUNK_SLOTS).min(records.len())];
            last = ChunkHead::new(slots.len(), 0, 0);
            let img = chunk_image(last, tbl.tag(nonce, b, pos), slots);
            if pos < home_chunks {
                home[pos * XPLINE as usize..(pos + 1) * XPLINE as usize].copy_from_slice(&img);
            } else {
                let Some(c) = tbl.pool.free.lock().pop() else {
                    return Err(Error::ResourceExhausted(
                        "the pool of a new table is exhausted".into(),
                    ));
                };
                bucket.set_overflow(&tbl.pool, pos, c);
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
