//! [`DashIndex`]: creation, lookups, upserts and removes over the segment / bucket format of `layout`,
//! safe to call from many threads at once.

use std::collections::{BTreeSet, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use arc_swap::ArcSwap;
use parking_lot::Mutex;

use super::dir::Dir;
use super::layout::{
    BUCKET_BYTES, FP_OFF, Geometry, Header, MAX_DEPTH, META_BYTES, OFP_OFF, Overflow, SB_CLEAN,
    SB_CRASH_VERSION, SB_HEAP, SB_LEN, SB_ROOT, SLOT_BYTES, SLOT_OFF, SLOTS, SUPER_BYTES,
    SegmentFormat, dir_span, entry, fingerprint, hash, le,
};
use super::lock::{Locked, backoff, read_stable};
use super::place::Placed;
use crate::error::{Error, Result};
use crate::index::hash::dash::eh::dir_bytes;
use crate::storage::pm::Pm;

/// How [`DashIndex::create`] lays out a region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DashConfig {
    /// Normal buckets per segment (a power of two in 4..=1024; Dash uses 64).
    pub segment_buckets: u64,
    /// Stash buckets per segment (0..=8; Dash uses 2).
    pub stash_buckets: u64,
    /// Global depth at creation: the index starts with `2^initial_depth` segments.
    pub initial_depth: u64,
}

impl Default for DashConfig {
    fn default() -> Self {
        DashConfig {
            segment_buckets: 64,
            stash_buckets: 2,
            initial_depth: 0,
        }
    }
}

/// Event counters (DRAM only, reset by `open`).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct DashStats {
    /// Segment splits, and directory doublings among them.
    pub splits: u64,
    pub doublings: u64,
    /// Records moved to a neighbour bucket to make room (displacement).
    pub displacements: u64,
    /// Inserts that went to a stash bucket.
    pub stash_inserts: u64,
    /// Highest load factor (keys ÷ slots of all segments) seen just before a split.
    pub peak_load_before_split: f64,
    /// Segments repaired lazily since the last open (first touch after a crash), half-done splits they
    /// finished, and duplicate records they dropped.
    pub repaired_segments: u64,
    pub recovered_splits: u64,
    pub dropped_duplicates: u64,
}

/// The counters behind [`DashStats`], updated by any thread.
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub splits: AtomicU64,
    pub doublings: AtomicU64,
    pub displacements: AtomicU64,
    pub stash_inserts: AtomicU64,
    pub repaired_segments: AtomicU64,
    pub recovered_splits: AtomicU64,
    pub dropped_duplicates: AtomicU64,
}

/// What changes the directory or allocates PM, behind the structure mutex (splits, doublings, repairs).
#[derive(Debug, Default)]
pub(super) struct Shared {
    /// First free byte of the bump-allocated heap (= the superblock's heap word).
    pub heap_end: u64,
    /// Segments named at open by a stale entry and not repaired yet.
    pub unrepaired: BTreeSet<u64>,
    /// Segments repaired since open.
    pub repaired: HashSet<u64>,
    pub peak_load_before_split: f64,
}

/// Where a record lives: bucket offset and slot; for a stash record, the stash bucket's index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Loc {
    pub bucket: u64,
    pub slot: usize,
    pub stash: Option<u64>,
}

/// A bucket's metadata as read, and the (slot, value) of the key in it, if there.
type Probed = ([u8; META_BYTES as usize], Option<(usize, u64)>);

/// A Dash-EH-style extendible hash index of `u64 → u64` over a PM region (module docs of `dash`).
#[derive(Debug)]
pub struct DashIndex<P: Pm> {
    pub(super) pm: P,
    pub(super) geo: Geometry,
    /// Crash version of this run: an entry at another version is stale.
    pub(super) version: u64,
    pub(super) dir: ArcSwap<Dir>,
    pub(super) shared: Mutex<Shared>,
    pub(super) len: AtomicU64,
    pub(super) segments: AtomicU64,
    pub(super) counters: Counters,
    /// Set when a write failed part-way: writes are refused until the region is reopened.
    pub(super) poisoned: AtomicBool,
    pub(super) poison_reason: Mutex<String>,
}

impl<P: Pm> DashIndex<P> {
    /// Formats `pm` as an empty index with `2^initial_depth` segments (earlier contents are ignored).
    pub fn create(pm: P, config: DashConfig) -> Result<Self> {
        let geo = Geometry {
            buckets: config.segment_buckets,
            stash: config.stash_buckets,
            region_len: pm.len(),
        };
        geo.validate(pm.len())?;
        let g = config.initial_depth;
        if g > MAX_DEPTH {
            return Err(Error::invalid(format!(
                "initial depth {g} (at most {MAX_DEPTH})"
            )));
        }
        let dir_off = SUPER_BYTES;
        let first_seg = dir_off + dir_span(g);
        let need = (1u64 << g)
            .checked_mul(geo.seg_bytes())
            .and_then(|n| n.checked_add(first_seg));
        let Some(heap_end) = need.filter(|&n| n <= pm.len()) else {
            return Err(Error::invalid(format!(
                "region of {} bytes cannot hold {} segments of {} bytes",
                pm.len(),
                1u64 << g,
                geo.seg_bytes()
            )));
        };
        // Segments and directory first, persisted; the superblock last (an unfinished create fails to open).
        let segs: Vec<u64> = (0..1u64 << g)
            .map(|i| first_seg + i * geo.seg_bytes())
            .collect();
        let mut image = vec![0u8; geo.seg_bytes() as usize];
        for (i, &seg) in segs.iter().enumerate() {
            let pattern = if g == 0 { 0 } else { (i as u64) << (64 - g) };
            image[..BUCKET_BYTES as usize].copy_from_slice(&geo.seg_header(seg, pattern, g));
            pm.write_nt(seg, &image)?;
        }
        pm.write_nt(dir_off, &dir_bytes(segs.iter().map(|&s| entry(s, 0)), g))?;
        pm.fence();
        pm.write(0, &[0u8; SUPER_BYTES as usize])?;
        geo.write(&pm)?;
        for (at, word) in [
            (SB_ROOT, dir_off | g),
            (SB_HEAP, heap_end),
            (SB_CRASH_VERSION, 0),
            (SB_CLEAN, 0),
            (SB_LEN, 0),
        ] {
            pm.write_u64(at, word)?;
        }
        pm.persist(0, SUPER_BYTES)?;
        Ok(DashIndex {
            dir: ArcSwap::from_pointee(Dir::new(dir_off, g, segs.iter().copied())),
            segments: AtomicU64::new(segs.len() as u64),
            pm,
            geo,
            version: 0,
            shared: Mutex::new(Shared {
                heap_end,
                ..Shared::default()
            }),
            len: AtomicU64::new(0),
            counters: Counters::default(),
            poisoned: AtomicBool::new(false),
            poison_reason: Mutex::new(String::new()),
        })
    }

    /// The region.
    pub fn pm(&self) -> &P {
        &self.pm
    }

    /// Closes the index cleanly and gives the region back: when every segment is repaired and no write
    /// failed, the used part of the region is persisted, then `len` and the clean flag, so the next `open`
    /// trusts every segment. Otherwise nothing is written (the next `open` treats it as after a crash).
    pub fn into_pm(self) -> P {
        let _ = self.close_cleanly();
        self.pm
    }

    fn close_cleanly(&self) -> Result<()> {
        let shared = self.shared.lock();
        if self.poisoned.load(Ordering::Acquire) || !shared.unrepaired.is_empty() {
            return Ok(());
        }
        // Lock bits, versions and overflow hints are stored without flushes: write them all back.
        self.pm.persist(0, shared.heap_end)?;
        self.pm
            .store_u64_atomic(SB_LEN, self.len.load(Ordering::Acquire))?;
        self.pm.persist(SB_LEN, 8)?;
        self.pm.store_u64_atomic(SB_CLEAN, 1)?;
        self.pm.persist(SB_CLEAN, 8)
    }

    /// The segment the key with hash `h` belongs to now, repairing it first if its entry is stale.
    pub(super) fn segment_of(&self, h: u64) -> Result<u64> {
        loop {
            let (seg, stale) = self.dir.load().lookup(h);
            if !stale {
                return Ok(seg);
            }
            self.repair(h)?;
        }
    }

    /// True while the entry of `h` still names `seg` (a split may have moved the key's records).
    pub(super) fn still_owns(&self, seg: u64, h: u64) -> bool {
        self.dir.load().lookup(h) == (seg, false)
    }

    /// Home bucket index of hash `h` and the one after it.
    pub(super) fn pair(&self, h: u64) -> (u64, u64) {
        let mask = self.geo.buckets - 1;
        (h & mask, (h + 1) & mask)
    }

    /// Key and value of slot `s` of the bucket at `b` (16 B).
    pub(super) fn read_slot(&self, b: u64, s: usize) -> Result<(u64, u64)> {
        let mut buf = [0u8; SLOT_BYTES as usize];
        self.pm.read(slot_off(b, s), &mut buf)?;
        Ok((le(&buf), le(&buf[8..])))
    }

    /// The slot of bucket `b` (first line `meta`) holding `key`, with its value: slots whose fingerprint
    /// matches are read.
    fn match_in(&self, b: u64, meta: &[u8], key: u64, fp: u8) -> Result<Option<(usize, u64)>> {
        let hdr = Header(le(meta));
        for s in 0..SLOTS {
            if hdr.used(s) && meta[FP_OFF as usize + s] == fp {
                let (k, v) = self.read_slot(b, s)?;
                if k == key {
                    return Ok(Some((s, v)));
                }
            }
        }
        Ok(None)
    }

    /// The stash buckets worth probing for a key of fingerprint `fp` whose home bucket's first line is
    /// `meta`: those its overflow fingerprints name, or all when the home has uncounted stash records.
    fn stash_candidates(&self, meta: &[u8], fp: u8) -> Vec<u64> {
        if Header(le(meta)).overflow() > 0 {
            return (0..self.geo.stash).collect();
        }
        let mut c: Vec<u64> = Overflow::from_meta(meta)
            .entries()
            .filter(|&(f, i)| f == fp && i < self.geo.stash)
            .map(|(_, i)| i)
            .collect();
        c.sort_unstable();
        c.dedup();
        c
    }

    /// Finds `key` with both of its buckets locked by the caller (no version checks needed: only a holder
    /// of the home bucket's lock adds, moves or removes the key; other slots may change meanwhile).
    pub(super) fn find_locked(&self, seg: u64, h: u64, key: u64) -> Result<Option<(Loc, u64)>> {
        let fp = fingerprint(h);
        let (y, n) = self.pair(h);
        let probe = |b: u64| -> Result<Probed> {
            let mut meta = [0u8; META_BYTES as usize];
            self.pm.read(b, &mut meta)?;
            let hit = self.match_in(b, &meta, key, fp)?;
            Ok((meta, hit))
        };
        let home = self.geo.bucket_off(seg, y);
        let (home_meta, hit) = probe(home)?;
        let next = std::iter::once((self.geo.bucket_off(seg, n), None));
        let stash = self.stash_candidates(&home_meta, fp).into_iter().map(|i| {
            let b = self.geo.bucket_off(seg, self.geo.buckets + i);
            (b, Some(i))
        });
        let mut found = hit.map(|h| (home, None, h));
        for (bucket, stash) in next.chain(stash) {
            if found.is_some() {
                break;
            }
            found = probe(bucket)?.1.map(|h| (bucket, stash, h));
        }
        Ok(found.map(|(bucket, stash, (slot, v))| {
            (
                Loc {
                    bucket,
                    slot,
                    stash,
                },
                v,
            )
        }))
    }

    /// One optimistic lookup in segment `seg`: `None` when a bucket changed under it (retry).
    fn try_get(&self, seg: u64, h: u64, key: u64) -> Result<Option<Option<u64>>> {
        let fp = fingerprint(h);
        let (y, n) = self.pair(h);
        let home = self.geo.bucket_off(seg, y);
        let found = read_stable(&self.pm, home, |meta| {
            Ok((self.match_in(home, meta, key, fp)?, *meta))
        })?;
        let Some((hit, home_meta)) = found else {
            return Ok(None);
        };
        if let Some((_, v)) = hit {
            return Ok(Some(Some(v)));
        }
        let mut buckets = vec![self.geo.bucket_off(seg, n)];
        buckets.extend(
            self.stash_candidates(&home_meta, fp)
                .into_iter()
                .map(|i| self.geo.bucket_off(seg, self.geo.buckets + i)),
        );
        for b in buckets {
            match read_stable(&self.pm, b, |meta| self.match_in(b, meta, key, fp))? {
                None => return Ok(None),
                Some(Some((_, v))) => return Ok(Some(Some(v))),
                Some(None) => {}
            }
        }
        Ok(Some(None))
    }

    /// The value of `key`. Lock-free: retries while a bucket it reads is locked or changes, or a split
    /// moved the key's segment.
    pub fn get(&self, key: u64) -> Result<Option<u64>> {
        let h = hash(key);
        let mut spins = 0;
        loop {
            let seg = self.segment_of(h)?;
            if let Some(found) = self.try_get(seg, h, key)?
                && self.still_owns(seg, h)
            {
                return Ok(found);
            }
            backoff(&mut spins);
        }
    }

    /// Inserts or overwrites `key`. Durable when this returns `Ok`. Any number of threads may write.
    pub fn insert(&self, key: u64, value: u64) -> Result<()> {
        self.guarded(|| self.upsert(key, value))
    }

    /// Removes `key`; returns whether it was present. Durable when this returns `Ok`.
    pub fn remove(&self, key: u64) -> Result<bool> {
        self.guarded(|| self.delete(key))
    }

    fn guarded<T>(&self, op: impl FnOnce() -> Result<T>) -> Result<T> {
        if self.poisoned.load(Ordering::Acquire) {
            return Err(Error::Poisoned(self.poison_reason.lock().clone()));
        }
        let result = op();
        if let Err(e) = &result
            && !matches!(e, Error::ResourceExhausted(_))
        {
            self.poison(e);
        }
        result
    }

    pub(super) fn poison(&self, e: &Error) {
        *self.poison_reason.lock() = e.to_string();
        self.poisoned.store(true, Ordering::Release);
    }

    /// Locks the home bucket of `h` and the one after it (in index order) in segment `seg`, and checks
    /// that the segment still owns `h`; `None` when it does not (retry from the directory).
    fn lock_pair(&self, seg: u64, h: u64) -> Result<Option<(Locked<'_, P>, Locked<'_, P>)>> {
        let (y, n) = self.pair(h);
        let (b_y, b_n) = (self.geo.bucket_off(seg, y), self.geo.bucket_off(seg, n));
        let (first, second) = if y < n { (b_y, b_n) } else { (b_n, b_y) };
        let a = Locked::lock(&self.pm, first)?;
        let b = Locked::lock(&self.pm, second)?;
        if !self.still_owns(seg, h) {
            return Ok(None);
        }
        Ok(Some(if y < n { (a, b) } else { (b, a) }))
    }

    fn upsert(&self, key: u64, value: u64) -> Result<()> {
        let h = hash(key);
        loop {
            let seg = self.segment_of(h)?;
            let Some((home, next)) = self.lock_pair(seg, h)? else {
                continue;
            };
            if let Some((loc, _)) = self.find_locked(seg, h, key)? {
                // In-place update: the value word is one aligned 8 B store, never torn.
                let at = slot_off(loc.bucket, loc.slot) + 8;
                self.pm.store_u64_atomic(at, value)?;
                return self.pm.persist(at, 8);
            }
            match self.place(seg, h, key, value, home, next)? {
                Placed::Done => {
                    self.len.fetch_add(1, Ordering::AcqRel);
                    return Ok(());
                }
                Placed::Full(home, next) => drop((home, next)),
            }
            self.split(seg, h)?;
        }
    }

    fn delete(&self, key: u64) -> Result<bool> {
        let h = hash(key);
        loop {
            let seg = self.segment_of(h)?;
            let Some((mut home, next)) = self.lock_pair(seg, h)? else {
                continue;
            };
            let Some((loc, _)) = self.find_locked(seg, h, key)? else {
                return Ok(false);
            };
            match loc.stash {
                None => {
                    let guard = if loc.bucket == home.bucket {
                        home
                    } else {
                        next
                    };
                    let hdr = guard.header().with_bit(loc.slot, false);
                    guard.commit_release(hdr)?;
                }
                Some(i) => {
                    let stash = Locked::lock(&self.pm, loc.bucket)?;
                    let hdr = stash.header().with_bit(loc.slot, false);
                    stash.commit_release(hdr)?;
                    // The home's hint: its overflow fingerprint for the record, or its count.
                    self.update_overflow(&mut home, |o, count| {
                        if !o.remove(fingerprint(h), i) {
                            *count = count.saturating_sub(1);
                        }
                    })?;
                }
            }
            self.len.fetch_sub(1, Ordering::AcqRel);
            return Ok(true);
        }
    }

    /// Changes the overflow hints of the locked bucket `home` (stored, not persisted: repair recomputes
    /// them after a crash).
    pub(super) fn update_overflow(
        &self,
        home: &mut Locked<'_, P>,
        change: impl FnOnce(&mut Overflow, &mut u64),
    ) -> Result<()> {
        let mut meta = [0u8; META_BYTES as usize];
        self.pm.read(home.bucket, &mut meta)?;
        let mut o = Overflow::from_meta(&meta);
        let mut count = home.header().overflow();
        change(&mut o, &mut count);
        self.pm.write(home.bucket + OFP_OFF, &o.bytes())?;
        let hdr = home.header().with_overflow(count);
        home.set(hdr)
    }

    /// Live keys as counted so far (without repairing anything).
    pub(super) fn len_now(&self) -> u64 {
        self.len.load(Ordering::Acquire)
    }

    /// Live keys. Exact once every segment is repaired: after an open that followed a crash, the first
    /// call repairs the segments not touched yet (an error there poisons the index).
    pub fn len(&self) -> u64 {
        if !self.shared.lock().unrepaired.is_empty()
            && let Err(e) = self.repair_all()
        {
            self.poison(&e);
        }
        self.len.load(Ordering::Acquire)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Global depth of the directory.
    pub fn global_depth(&self) -> u64 {
        self.dir.load().depth
    }

    /// Segments in use.
    pub fn segments(&self) -> u64 {
        self.segments.load(Ordering::Acquire)
    }

    /// Slots of all segments (normal and stash buckets, 14 each).
    pub fn capacity(&self) -> u64 {
        self.segments() * self.geo.seg_slots()
    }

    /// Live keys ÷ slots.
    pub fn load_factor(&self) -> f64 {
        self.len() as f64 / self.capacity() as f64
    }

    /// DRAM held: the directory mirror and the repair bookkeeping (all records and metadata are in PM).
    pub fn dram_bytes(&self) -> u64 {
        let s = self.shared.lock();
        let sets = (s.unrepaired.len() + s.repaired.capacity()) * 16;
        (self.dir.load().len() * 8 + sets + size_of::<Self>()) as u64
    }

    /// PM allocated: superblock, directories (old ones are not reclaimed) and segments up to the heap end.
    pub fn pm_bytes_used(&self) -> u64 {
        self.shared.lock().heap_end
    }

    pub fn stats(&self) -> DashStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        DashStats {
            splits: get(&c.splits),
            doublings: get(&c.doublings),
            displacements: get(&c.displacements),
            stash_inserts: get(&c.stash_inserts),
            peak_load_before_split: self.shared.lock().peak_load_before_split,
            repaired_segments: get(&c.repaired_segments),
            recovered_splits: get(&c.recovered_splits),
            dropped_duplicates: get(&c.dropped_duplicates),
        }
    }
}

/// Offset of slot `s` of the bucket at `b`.
pub(super) fn slot_off(b: u64, s: usize) -> u64 {
    b + SLOT_OFF + SLOT_BYTES * s as u64
}
