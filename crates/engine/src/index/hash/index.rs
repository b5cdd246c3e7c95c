//! [`HashIndex`]: creation, lookups, the entry of writes (which log, which generation), the live-key count
//! and the numbers it reports. The write itself is in `write`, resizing in `grow`.

use std::sync::atomic::{
    AtomicBool, AtomicI64, AtomicPtr, AtomicU64, AtomicUsize, Ordering, fence,
};

use parking_lot::Mutex;

use super::bucket::Bucket;
use super::generation::Generation;
use super::grow::Growth;
use super::layout::{
    BUCKET_BYTES, CHUNK_SLOTS, Gen, Geometry, MAX_LOG2_BUCKETS, SB_ROOT, SUPER_BYTES, fingerprint,
    hash, slot_off,
};
use super::log::{Log, LogStats};
use super::spin::SpinGuard;
use super::write::{Applied, Source};
use crate::error::{Error, Result};
use crate::storage::pm::Pm;

/// How [`HashIndex::create`] lays out a region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HashConfig {
    /// P-buckets of the first table (a power of two ≥ 1).
    pub initial_buckets: u64,
    /// Smallest collecting log, in 64 B lines (≥ 8; 8,192 = 512 KiB = 16,384 records). A generation's
    /// logs hold at least 16 records per bucket between them, so they grow with the table.
    pub log_lines: u64,
    /// Collecting logs, one per concurrent writer (more writers than logs share them).
    pub logs: u64,
    /// Every log exactly `log_lines`, not growing with the table (recorded in the superblock; the
    /// collecting-log experiment). With many buckets per log record, log space then forces D-buckets out
    /// before they fill.
    pub fixed_log: bool,
    /// Bytes of a P-bucket (a power of two from 1 KiB to 16 KiB; 4 KiB, the default; 4 to 64 chunks). Recorded in
    /// the superblock: `open` adopts the region's size whatever this build's default (the P-bucket sweep of
    /// Exp 12).
    pub pbucket_bytes: u64,
    /// Staged slots at which a D-bucket is written back (1..=15; 15 = the whole tail chunk, the default).
    /// A property of this handle, not of the region (`open` uses 15): smaller values flush partly filled
    /// tail chunks (the D-bucket-size experiment).
    pub dbucket_slots: usize,
}

impl Default for HashConfig {
    fn default() -> Self {
        HashConfig {
            initial_buckets: 16,
            log_lines: 8192,
            logs: 1,
            fixed_log: false,
            pbucket_bytes: BUCKET_BYTES,
            dbucket_slots: CHUNK_SLOTS,
        }
    }
}

/// Event counters (DRAM only, reset by `open`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct HashStats {
    /// D-buckets written to their tail chunk (full-XPLine writes).
    pub flushes: u64,
    /// Of those, D-buckets flushed early to free log space.
    pub forced_flushes: u64,
    /// Of those, flushes into a tail chunk that already had committed slots (rewritten whole from DRAM).
    pub partial_chunk_flushes: u64,
    /// Tables rebuilt, and how many of them doubled the bucket count (all of them: compaction is per bucket).
    pub rebuilds: u64,
    pub grows: u64,
    /// Buckets compacted in place (superseded versions and tombstones dropped).
    pub compactions: u64,
    /// Deletes of committed keys done in place (the slot's tombstone bit set in its commit word).
    pub in_place_deletes: u64,
    /// Pool chunks linked to a full bucket.
    pub overflow_chunks: u64,
    /// Log records appended, and persisted log-tail advances.
    pub appends: u64,
    pub tail_persists: u64,
    /// Log records applied by the last recovery, and those skipped as already in their chain.
    pub replayed: u64,
    pub replay_skipped: u64,
}

/// A `T` alone on its cache lines (two: adjacent-line prefetch pairs them), so that what one thread writes
/// (its log, its live-key count) never shares a line with what another thread writes.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(super) struct Padded<T>(pub T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> std::ops::DerefMut for Padded<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

static NEXT_THREAD: AtomicUsize = AtomicUsize::new(0);
thread_local! {
    static THREAD_NO: usize = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
}

/// An ElimDA-style hash index of `u64 → u64` over a PM region (module docs of `index::hash`).
#[derive(Debug)]
pub struct HashIndex<P: Pm> {
    pub(super) pm: P,
    pub(super) geo: Geometry,
    /// Staged slots at which a D-bucket is written back ([`HashConfig::dbucket_slots`]).
    pub(super) dbucket_slots: usize,
    /// The current generation: one of `gens`.
    current: AtomicPtr<Generation>,
    /// Every generation still allocated, the current one last. Older ones stay until `&mut self` access
    /// (`reclaim`) or drop, so a lookup that loaded an old pointer never reads freed memory.
    #[allow(clippy::vec_box)] // Boxed so that a generation never moves when the vector grows.
    gens: Mutex<Vec<Box<Generation>>>,
    /// Number of the newest generation whose PM contents are being written or were (lookups on an older
    /// generation check it: generation `n + 2` may be written over generation `n`'s space).
    pub(super) building: AtomicU64,
    /// The doubling under way, if any (see `grow`); held while a slice of it runs.
    pub(super) resize: Mutex<Option<Growth>>,
    /// The next generation's DRAM state being made ahead of its doubling (`grow::prepare_next`), for the
    /// layout it was planned for.
    pub(super) prepared: Mutex<Option<(Gen, std::thread::JoinHandle<Generation>)>>,
    /// Number of the generation last prepared (or 0).
    pub(super) prepared_number: AtomicU64,
    /// Live-key change per log (each written only under its log's mutex).
    counts: Box<[Padded<AtomicI64>]>,
    pub(super) grows: AtomicU64,
    /// Counters of the logs of generations no longer current.
    pub(super) retired_stats: Mutex<LogStats>,
    pub(super) recovery: Mutex<(u64, u64)>,
    /// Set when a write failed after its log record was durable: DRAM may disagree with PM, so writes are
    /// refused until the region is reopened (recovery restores every acknowledged write).
    poisoned: AtomicBool,
    poison_why: Mutex<String>,
}

impl<P: Pm> HashIndex<P> {
    /// Formats `pm` as an empty index (any earlier contents are ignored) and returns it.
    pub fn create(pm: P, config: HashConfig) -> Result<Self> {
        let b = config.initial_buckets;
        if b == 0 || !b.is_power_of_two() || b.trailing_zeros() as u64 > MAX_LOG2_BUCKETS {
            return Err(Error::invalid(format!(
                "initial bucket count {b} is not a power of two in 1..=2^{MAX_LOG2_BUCKETS}"
            )));
        }
        if !(1..=CHUNK_SLOTS).contains(&config.dbucket_slots) {
            return Err(Error::invalid(format!(
                "D-bucket of {} slots (1..={CHUNK_SLOTS})",
                config.dbucket_slots
            )));
        }
        let geo = Geometry {
            bucket_bytes: config.pbucket_bytes,
            logs: config.logs,
            log_lines: config.log_lines,
            fixed_log: config.fixed_log,
            nonce: rand::random(),
            region_len: pm.len(),
        };
        geo.validate(pm.len())?;
        let layout = Gen::plan(&geo, SUPER_BYTES, 0, b.trailing_zeros() as u64);
        if layout.end() > pm.len() {
            return Err(Error::invalid(format!(
                "region of {} bytes cannot hold a first table of {b} buckets ({} bytes needed)",
                pm.len(),
                layout.end()
            )));
        }
        let tbl = Generation::new(layout, geo.nonce);
        tbl.format(&pm, geo.nonce)?;
        // Superblock: geometry + checksum and root; one persist (an unfinished create fails to open).
        pm.write(0, &[0u8; SUPER_BYTES as usize])?;
        pm.write_u64(SB_ROOT, layout.off)?;
        geo.write(&pm)?;
        pm.persist(0, SUPER_BYTES)?;
        let mut index = Self::assemble(pm, geo, tbl, 0);
        index.dbucket_slots = config.dbucket_slots;
        Ok(index)
    }

    /// An index over `pm` whose current generation is `tbl` and which holds `len` live keys.
    pub(super) fn assemble(pm: P, geo: Geometry, tbl: Generation, len: i64) -> Self {
        let mut tbl = Box::new(tbl);
        let number = tbl.layout.number;
        let ptr: *mut Generation = &mut *tbl;
        let counts: Box<[Padded<AtomicI64>]> =
            (0..geo.logs).map(|_| Padded(AtomicI64::new(0))).collect();
        counts[0].0.store(len, Ordering::Relaxed);
        HashIndex {
            pm,
            geo,
            dbucket_slots: CHUNK_SLOTS,
            current: AtomicPtr::new(ptr),
            gens: Mutex::new(vec![tbl]),
            building: AtomicU64::new(number),
            resize: Mutex::new(None),
            prepared: Mutex::new(None),
            prepared_number: AtomicU64::new(0),
            counts,
            grows: AtomicU64::new(0),
            retired_stats: Mutex::new(LogStats::default()),
            recovery: Mutex::new((0, 0)),
            poisoned: AtomicBool::new(false),
            poison_why: Mutex::new(String::new()),
        }
    }

    /// The region.
    pub fn pm(&self) -> &P {
        &self.pm
    }

    /// Gives the region back (DRAM state is dropped; `open` rebuilds it).
    pub fn into_pm(self) -> P {
        self.pm
    }

    /// The current generation.
    #[inline]
    pub(super) fn current(&self) -> &Generation {
        // SAFETY: `current` always points to a generation owned by `gens` (set from a `Box` pushed there, and
        // only replaced by another such pointer). Boxes leave `gens` only through `&mut self` (`reclaim`,
        // `into_pm`) or drop, when no `&self` borrow — hence no reference returned here — is alive; boxed
        // generations do not move when `gens` grows. Loading the pointer takes no locked instruction,
        // which keeps lookups free to overlap their cache misses (what Arc-based schemes cost).
        unsafe { &*self.current.load(Ordering::Acquire) }
    }

    /// Keeps `tbl` in `gens` (not current yet: a doubling builds it) and returns it.
    pub(super) fn adopt(&self, tbl: Generation) -> &Generation {
        let tbl = Box::new(tbl);
        let ptr: *const Generation = &*tbl;
        self.gens.lock().push(tbl);
        // SAFETY: the box is in `gens`, which keeps it (unmoved) until `&mut self` access or drop, as for
        // `current`.
        unsafe { &*ptr }
    }

    /// Makes `tbl`, adopted before, the current generation.
    pub(super) fn make_current(&self, tbl: &Generation) {
        self.current
            .store(std::ptr::from_ref(tbl).cast_mut(), Ordering::Release);
    }

    /// Frees the generations older than the current one (no lookup can hold them: `&mut self`); keeps the
    /// one a doubling under way builds.
    pub fn reclaim(&mut self) {
        let current = *self.current.get_mut();
        let gens = self.gens.get_mut();
        if let Some(at) = gens
            .iter()
            .position(|g| std::ptr::eq(&**g, current.cast_const()))
        {
            gens.drain(..at);
        }
    }

    /// The value of `key`. Takes no lock: reads the bucket's fingerprints, then one 16 B slot per live
    /// fingerprint match (none for most misses), and retries if a writer changed the bucket meanwhile.
    pub fn get(&self, key: u64) -> Result<Option<u64>> {
        let h = hash(key);
        let fp = fingerprint(h);
        loop {
            let g = self.current();
            let b = h & g.layout.mask();
            let bucket = &g.buckets[b as usize];
            bucket.prefetch_lookup(fp);
            let v = bucket.read_begin();
            let shape = bucket.shape();
            let found = bucket.find_live(&g.pool, shape, fp, |p| {
                match g.slot(&self.pm, b, bucket, shape, p) {
                    Ok((k, value)) if k == key => Some(Ok(value)),
                    Ok(_) => None,
                    Err(e) => Some(Err(e)),
                }
            });
            // The generation's space may be reused by the one after next: then read again.
            fence(Ordering::Acquire);
            let fresh = self.building.load(Ordering::Relaxed) <= g.layout.number + 1;
            if bucket.read_valid(v) && fresh {
                return found.transpose();
            }
        }
    }

    /// Inserts or overwrites `key`. Durable (acknowledged) when this returns `Ok`.
    pub fn insert(&self, key: u64, value: u64) -> Result<()> {
        self.write(key, Some(value)).map(drop)
    }

    /// Removes `key`; returns whether it was present. Durable when this returns `Ok`.
    pub fn remove(&self, key: u64) -> Result<bool> {
        self.write(key, None).map(|old| old.is_some())
    }

    /// Locks a collecting log of `g` for this thread: the thread's own if free, else any free one, else
    /// waits for its own.
    pub(super) fn lock_log<'g>(&self, g: &'g Generation) -> SpinGuard<'g, Log> {
        let n = g.logs.len();
        let first = THREAD_NO.with(|t| *t) % n;
        for i in 0..n {
            if let Some(log) = g.logs[(first + i) % n].try_lock() {
                return log;
            }
        }
        g.logs[first].lock()
    }

    fn write(&self, key: u64, value: Option<u64>) -> Result<Option<u64>> {
        if self.poisoned.load(Ordering::Relaxed) {
            return Err(Error::Poisoned(self.poison_why.lock().clone()));
        }
        let h = hash(key);
        loop {
            let g = self.current();
            let b = h & g.layout.mask();
            g.buckets[b as usize].prefetch(Bucket::LINES);
            if value.is_none() {
                // A delete reads the key's slot (to confirm it): start that PM miss now, so it overlaps
                // taking the locks instead of following them.
                self.prefetch_matches(g, b, fingerprint(h));
            }
            let mut log = self.lock_log(g);
            let result = self.write_in(g, b, &mut log, key, value);
            let (added, old) = match result {
                Ok(Applied::Done(old)) => (value.is_some() as i64 - old.is_some() as i64, old),
                Ok(Applied::Moved) => {
                    drop(log);
                    self.wait_for_next(g)?;
                    continue;
                }
                Ok(Applied::NeedGrow | Applied::MirrorFull) => {
                    drop(log);
                    self.grow(g)?;
                    continue;
                }
                Err(e) => {
                    self.poison(&e);
                    return Err(e);
                }
            };
            if added != 0 {
                let c = &self.counts[log.id as usize].0;
                c.store(c.load(Ordering::Relaxed) + added, Ordering::Relaxed);
            }
            let check = added > 0 && self.due_fullness_check(g, &mut log);
            drop(log);
            // While a doubling of `g` runs, starting one does nothing: skip the resize lock.
            if check && g.next_generation().is_none() {
                let load = self.len() + self.fullness_margin(g);
                if load * 8 > Self::slots(&g.layout) * 7 {
                    // The write is done and durable: a region too small to double in does not fail it.
                    match self.start_growing(g) {
                        Err(Error::ResourceExhausted(_)) | Ok(()) => {}
                        Err(e) => return Err(e),
                    }
                } else if load * 4 > Self::slots(&g.layout) * 3 {
                    // 3/4 full: make the next generation's DRAM state ahead of the doubling.
                    self.prepare_next(g);
                }
            }
            if !self.current().next.load(Ordering::Relaxed).is_null() {
                self.grow_step()?;
            }
            return Ok(old);
        }
    }

    /// Asks the PM lines a delete of a key with fingerprint `fp` in bucket `b` reads into the cache, without
    /// locks: for each committed live slot of that fingerprint, the slot's line and its chunk's commit-word
    /// line (which the delete reads and rewrites). The two lines' misses then overlap each other and the
    /// taking of the locks; read one after the other, the commit word's was a fifth of a delete's time. A
    /// hint, which a racing writer can only make useless (a torn shape or link gives an offset the region
    /// ignores), never wrong.
    fn prefetch_matches(&self, g: &Generation, b: u64, fp: u16) {
        let bucket = &g.buckets[b as usize];
        let shape = bucket.shape();
        let start = shape.tail_start();
        bucket.find_live(&g.pool, shape, fp, |p| {
            if p < start {
                let chunk = g.chunk_off(b, bucket, p / CHUNK_SLOTS);
                self.pm.prefetch(slot_off(chunk, p % CHUNK_SLOTS));
                self.pm.prefetch(chunk);
            }
            None::<()>
        });
    }

    /// A write through log `log` of the current generation (tests place records in chosen logs).
    #[cfg(test)]
    pub(super) fn write_via_log(
        &self,
        log: usize,
        key: u64,
        value: Option<u64>,
    ) -> Result<Option<u64>> {
        let g = self.current();
        let mut log = g.logs[log].lock();
        let b = hash(key) & g.layout.mask();
        match self.write_in(g, b, &mut log, key, value)? {
            Applied::Done(old) => Ok(old),
            other => Err(Error::invalid(format!(
                "test write needs a resize: {other:?}"
            ))),
        }
    }

    /// One attempt of a write in generation `g`, holding `log`: frees log space, locks bucket `b`, applies.
    fn write_in(
        &self,
        g: &Generation,
        b: u64,
        log: &mut Log,
        key: u64,
        value: Option<u64>,
    ) -> Result<Applied> {
        // Holding a log of `g`: a doubling cannot switch generations meanwhile (see `grow`).
        if g.retired.load(Ordering::Acquire) {
            return Ok(Applied::Moved);
        }
        self.free_log_space(g, log)?;
        let bucket = &g.buckets[b as usize];
        let mut w = bucket.writer.lock();
        let applied = self.apply(g, b, &mut w, Source::Live(log), key, value)?;
        if matches!(applied, Applied::Done(_)) && b < g.moved.load(Ordering::Acquire) {
            // Copied by the doubling under way: keep the copy up to date (under this bucket's lock).
            if self.mirror(g, key, value)? == Applied::MirrorFull {
                return Ok(Applied::MirrorFull);
            }
        }
        Ok(applied)
    }

    pub(super) fn poison(&self, e: &Error) {
        if !matches!(e, Error::ResourceExhausted(_)) {
            *self.poison_why.lock() = e.to_string();
            self.poisoned.store(true, Ordering::Relaxed);
        }
    }

    /// Waits until generation `g` is no longer the current one (a doubling is copying it).
    fn wait_for_next(&self, g: &Generation) -> Result<()> {
        let mut spins = 0u32;
        while std::ptr::eq(self.current(), g) {
            if self.poisoned.load(Ordering::Relaxed) {
                return Err(Error::Poisoned(self.poison_why.lock().clone()));
            }
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        Ok(())
    }

    /// True when the live keys exceed 7/8 of generation `g`'s slots.
    pub(super) fn over_full(&self, g: &Generation) -> bool {
        self.over_full_with(g, 0)
    }

    /// True when the live keys plus `margin` exceed 7/8 of generation `g`'s slots.
    fn over_full_with(&self, g: &Generation, margin: u64) -> bool {
        (self.len() + margin) * 8 > Self::slots(&g.layout) * 7
    }

    /// Keys a log adds between two fullness checks of its writer: 1 with a single log (its count is the
    /// only one, on a line no other thread writes); with several, enough that summing the other logs'
    /// counts (lines their writers keep modifying: a cache-to-cache transfer each) is rare, while the
    /// margin it needs (`logs` × this) stays under 1/1,024 of the slots.
    fn fullness_stride(&self, g: &Generation) -> u64 {
        let logs = g.logs.len() as u64;
        if logs == 1 {
            1
        } else {
            (Self::slots(&g.layout) / 1024 / logs).max(1)
        }
    }

    /// Keys the other logs may have added since their writers last checked: a write that checks grows the
    /// table when the live keys plus this exceed 7/8, so the bound holds between checks. Proof: a log adds
    /// fewer than `stride` keys between two checks of its own, so after the latest check (which saw every
    /// count, and the sum plus `logs × stride` under 7/8) the sum grows by less than `logs × stride`.
    fn fullness_margin(&self, g: &Generation) -> u64 {
        let logs = g.logs.len() as u64;
        if logs == 1 {
            0
        } else {
            logs * self.fullness_stride(g)
        }
    }

    /// Counts a key added through `log`; true when this write must check the table's fullness.
    fn due_fullness_check(&self, g: &Generation, log: &mut Log) -> bool {
        log.added_since_check += 1;
        if log.added_since_check >= self.fullness_stride(g) {
            log.added_since_check = 0;
            true
        } else {
            false
        }
    }

    /// Slots of a generation: its buckets' home slots. The pool (1 chunk per 8 buckets, 0.8 % of the
    /// table's bytes) is a reserve for buckets that fill up before the table is 7/8 full, not counted.
    pub(super) fn slots(layout: &Gen) -> u64 {
        layout.buckets() * layout.home_slots() as u64
    }

    /// Sets the live-key count (at recovery).
    pub(super) fn set_len(&self, len: u64) {
        for (i, c) in self.counts.iter().enumerate() {
            c.0.store(if i == 0 { len as i64 } else { 0 }, Ordering::Relaxed);
        }
    }

    /// Live keys.
    pub fn len(&self) -> u64 {
        let n: i64 = self
            .counts
            .iter()
            .map(|c| c.0.load(Ordering::Relaxed))
            .sum();
        n.max(0) as u64
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Slots of the current table: its buckets' home slots (240 each).
    /// Bytes of a generation of 2^`log2` buckets in this index's region (logs, pool and P-buckets).
    pub fn generation_bytes(&self, log2: u64) -> u64 {
        Gen::plan(&self.geo, SUPER_BYTES, 0, log2).bytes()
    }

    pub fn capacity(&self) -> u64 {
        Self::slots(&self.current().layout)
    }

    /// Live keys ÷ slots: at most 7/8 after every write, about 7/16 right after a doubling.
    pub fn load_factor(&self) -> f64 {
        self.len() as f64 / self.capacity() as f64
    }

    /// P-buckets of the current table.
    pub fn buckets(&self) -> u64 {
        self.current().layout.buckets()
    }

    /// DRAM held: every allocated generation (buckets, pool mirror, log rings) and the index itself.
    pub fn dram_bytes(&self) -> u64 {
        let gens: u64 = self.gens.lock().iter().map(|g| g.dram_bytes()).sum();
        gens + size_of::<Self>() as u64
    }

    /// Where the current generation's DRAM bucket array lies (address, bytes): for measuring how much of it
    /// the kernel backs with huge pages (the array is advised for them; the benchmark reports the share).
    pub fn bucket_array(&self) -> (usize, usize) {
        let buckets = &self.current().buckets;
        (buckets.as_ptr() as usize, std::mem::size_of_val(&**buckets))
    }

    /// PM the current state occupies: the superblock and the current generation.
    pub fn pm_bytes_used(&self) -> u64 {
        SUPER_BYTES + self.current().layout.bytes()
    }

    /// The event counters, summed over the logs of the current generation.
    pub fn stats(&self) -> HashStats {
        let g = self.current();
        let mut s = *self.retired_stats.lock();
        for log in g.logs.iter() {
            s.add(&log.lock().stats);
        }
        let grows = self.grows.load(Ordering::Relaxed);
        let (replayed, replay_skipped) = *self.recovery.lock();
        HashStats {
            flushes: s.flushes,
            forced_flushes: s.forced_flushes,
            partial_chunk_flushes: s.partial_flushes,
            rebuilds: grows,
            grows,
            compactions: s.compactions,
            in_place_deletes: s.in_place_deletes,
            overflow_chunks: s.overflow_chunks,
            appends: s.appends,
            tail_persists: s.tail_persists,
            replayed,
            replay_skipped,
        }
    }
}
