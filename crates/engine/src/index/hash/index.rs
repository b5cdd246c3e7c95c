//! [`HashIndex`]: creation, lookups, writes (log → D-bucket → P-bucket) and the numbers it reports.

use std::collections::BTreeSet;

use super::bucket::Bucket;
use super::layout::{
    CHUNK_SLOTS, Geometry, MAX_LOG2_BUCKETS, SB_ROOT, SB_TAIL0, SLOT_BYTES, SLOTS, SUPER_BYTES,
    Table, fingerprint, hash,
};
use super::log::Log;
use crate::error::{Error, Result};
use crate::storage::pm::{Pm, XPLINE};

/// How [`HashIndex::create`] lays out a region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HashConfig {
    /// P-buckets of the first table (a power of two ≥ 1).
    pub initial_buckets: u64,
    /// 64 B lines of each collecting log (≥ 8; 8,192 = 512 KiB = 16,384 records).
    pub log_lines: u64,
    /// Collecting logs laid out (one per writer thread; this single-writer version writes log 0).
    pub logs: u64,
}

impl Default for HashConfig {
    fn default() -> Self {
        HashConfig {
            initial_buckets: 16,
            log_lines: 8192,
            logs: 1,
        }
    }
}

/// Event counters (DRAM only, reset by `open`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct HashStats {
    /// D-buckets written to their P-bucket (full-XPLine writes).
    pub flushes: u64,
    /// Of those, partial D-buckets flushed early to free log space.
    pub forced_flushes: u64,
    /// Of those, flushes into a partly used tail chunk (which is read back and rewritten whole).
    pub partial_chunk_flushes: u64,
    /// Tables rebuilt (resize or compaction), and how many of them doubled the bucket count.
    pub rebuilds: u64,
    pub grows: u64,
    /// Persisted log-tail advances.
    pub tail_persists: u64,
    /// Log records applied by the last recovery, and those skipped as already visible.
    pub replayed: u64,
    pub replay_skipped: u64,
}

/// Where a key's visible version is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Found {
    /// In the D-bucket (`None` = staged tombstone).
    Staged(Option<u64>),
    /// In live P-bucket slot `.0` with value `.1`.
    Slot(usize, u64),
    Absent,
}

impl Found {
    pub fn visible(self) -> Option<u64> {
        match self {
            Found::Staged(v) => v,
            Found::Slot(_, v) => Some(v),
            Found::Absent => None,
        }
    }
}

/// An ElimDA-style hash index of `u64 → u64` over a PM region (module docs of `index::hash`).
#[derive(Debug)]
pub struct HashIndex<P: Pm> {
    pub(super) pm: P,
    pub(super) geo: Geometry,
    pub(super) table: Table,
    pub(super) buckets: Vec<Bucket>,
    pub(super) len: u64,
    pub(super) log: Log,
    /// (log position of the oldest staged record, bucket) of every non-empty D-bucket.
    pub(super) staged: BTreeSet<(u64, u64)>,
    pub(super) stats: HashStats,
    /// Set when a write failed after its log record was durable: DRAM may disagree with PM, so writes
    /// are refused until the region is reopened (recovery restores every acknowledged write).
    pub(super) poisoned: Option<String>,
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
        let geo = Geometry {
            logs: config.logs,
            log_lines: config.log_lines,
            nonce: rand::random(),
            region_len: pm.len(),
        };
        geo.validate(pm.len())?;
        let table = Table {
            off: geo.heap_start(),
            log2: b.trailing_zeros() as u64,
        };
        if table.end() > pm.len() {
            return Err(Error::invalid(format!(
                "region of {} bytes cannot hold a first table of {b} buckets ({} bytes needed)",
                pm.len(),
                table.end()
            )));
        }
        // The empty table: zeroed header and meta lines (no chunk in use), persisted before the root.
        let span = Table::meta_span(table.log2);
        pm.write(table.off, &vec![0u8; span as usize])?;
        table.write_header(&pm, geo.nonce)?;
        pm.persist(table.off, span)?;
        // Superblock: geometry + checksum, root, zero tails; one persist (an unfinished create fails to open).
        pm.write(0, &[0u8; SUPER_BYTES as usize])?;
        pm.write_u64(SB_ROOT, table.off)?;
        for i in 0..config.logs {
            pm.write_u64(SB_TAIL0 + 64 * i, 0)?;
        }
        geo.write(&pm)?;
        pm.persist(0, SUPER_BYTES)?;
        Ok(HashIndex {
            log: Log::new(&geo, 0),
            buckets: vec![Bucket::default(); b as usize],
            pm,
            geo,
            table,
            len: 0,
            staged: BTreeSet::new(),
            stats: HashStats::default(),
            poisoned: None,
        })
    }

    /// The region.
    pub fn pm(&self) -> &P {
        &self.pm
    }

    /// Gives the region back (DRAM state is dropped; `open` rebuilds it).
    pub fn into_pm(self) -> P {
        self.pm
    }

    /// Bucket and fingerprint of `key`.
    pub(super) fn locate(&self, key: u64) -> (u64, u8) {
        let h = hash(key);
        (h & self.table.mask(), fingerprint(h))
    }

    /// Reads slot `s` of bucket `b` (16 B: one line of one XPLine).
    pub(super) fn read_slot(&self, b: u64, s: usize) -> Result<(u64, u64)> {
        let mut buf = [0u8; SLOT_BYTES as usize];
        self.pm.read(self.table.slot_off(b, s), &mut buf)?;
        let (k, v) = buf.split_at(8);
        let word = |x: &[u8]| {
            let mut w = [0u8; 8];
            w.copy_from_slice(x);
            u64::from_le_bytes(w)
        };
        Ok((word(k), word(v)))
    }

    /// Finds `key`'s visible version: D-bucket first, then the live slots whose fingerprint matches.
    pub(super) fn find(&self, key: u64) -> Result<Found> {
        let (b, fp) = self.locate(key);
        let bucket = &self.buckets[b as usize];
        if let Some(i) = bucket.staged(key) {
            return Ok(Found::Staged(bucket.staged_value(i)));
        }
        for s in bucket.candidates(fp) {
            let (k, v) = self.read_slot(b, s)?;
            if k == key {
                return Ok(Found::Slot(s, v));
            }
        }
        Ok(Found::Absent)
    }

    /// The value of `key`. A miss whose fingerprint matches no live slot touches no PM.
    pub fn get(&self, key: u64) -> Result<Option<u64>> {
        Ok(self.find(key)?.visible())
    }

    /// Inserts or overwrites `key`. Durable (acknowledged) when this returns `Ok`.
    pub fn insert(&mut self, key: u64, value: u64) -> Result<()> {
        self.write(key, Some(value)).map(drop)
    }

    /// Removes `key`; returns whether it was present. Durable when this returns `Ok`.
    pub fn remove(&mut self, key: u64) -> Result<bool> {
        if self.find(key)?.visible().is_none() {
            return Ok(false);
        }
        self.write(key, None).map(|old| old.is_some())
    }

    fn write(&mut self, key: u64, value: Option<u64>) -> Result<Option<u64>> {
        if let Some(why) = &self.poisoned {
            return Err(Error::Poisoned(why.clone()));
        }
        let result = self.make_log_room().and_then(|()| {
            let lsn = self.log.append(&self.pm, key, value)?;
            self.apply(key, value, lsn)
        });
        if let Err(e) = &result {
            self.poisoned = Some(e.to_string());
        }
        result
    }

    /// Stages a durable record (a new write or a replayed one) as `key`'s visible version, then flushes the
    /// D-bucket if it is full and grows the table if the load factor passed 7/8. Returns the old version.
    pub(super) fn apply(&mut self, key: u64, value: Option<u64>, lsn: u64) -> Result<Option<u64>> {
        let found = self.find(key)?;
        let (b, _) = self.locate(key);
        let bucket = &mut self.buckets[b as usize];
        if let Found::Slot(s, _) = found {
            bucket.set_live(s, false);
        }
        if bucket.stage(key, value, lsn) {
            self.staged.insert((lsn, b));
        }
        let full = bucket.dlen as usize == CHUNK_SLOTS;
        let old = found.visible();
        match (old.is_some(), value.is_some()) {
            (false, true) => self.len += 1,
            (true, false) => self.len -= 1,
            _ => {}
        }
        if full {
            self.flush(b)?;
        }
        if self.len * 8 > self.capacity() * 7 {
            self.rebuild(true)?;
        }
        Ok(old)
    }

    /// Moves staged entries of bucket `b` into its P-bucket's tail chunk: the chunk's XPLine (its valid
    /// slots read back first when it is partly used, so they are rewritten unchanged) is written whole with
    /// non-temporal stores and fenced, then the meta word committing the new slots is stored (8 B atomic)
    /// and persisted. As many entries as the chunk has room for move; the rest stay staged. A full
    /// P-bucket rebuilds the table instead (which takes the D-bucket along).
    pub(super) fn flush(&mut self, b: u64) -> Result<()> {
        let bucket = &self.buckets[b as usize];
        if bucket.full() {
            return self.rebuild(false);
        }
        let (c, o, k) = bucket.flush_plan();
        let at = self.table.bucket_off(b) + c as u64 * XPLINE;
        let mut img = [0u8; XPLINE as usize];
        if o > 0 {
            self.pm.read(at, &mut img)?;
        }
        bucket.place(&mut img, o, k);
        self.pm.write_nt(at, &img)?;
        self.pm.fence();
        let (w, word) = bucket.commit_word(c, o, k);
        let meta = self.table.meta_off(b) + w as u64 * 8;
        self.pm.store_u64_atomic(meta, word)?;
        self.pm.persist(meta, 8)?;
        if k == bucket.dlen as usize {
            // Entries left behind keep the (conservative) oldest position and the staged-set entry.
            self.staged.remove(&(bucket.dfirst, b));
        }
        self.buckets[b as usize].committed((w, word), k, |k| fingerprint(hash(k)));
        self.stats.flushes += 1;
        if o > 0 {
            self.stats.partial_chunk_flushes += 1;
        }
        Ok(())
    }

    /// Frees log space when the ring is full: flushes the D-buckets holding the oldest half of the log,
    /// then persists the new tail.
    fn make_log_room(&mut self) -> Result<()> {
        if self.log.has_room() {
            return Ok(());
        }
        let target = self.log.head - self.log.capacity() / 2;
        while let Some(&(lsn, b)) = self.staged.first() {
            if lsn >= target {
                break;
            }
            self.flush(b)?;
            self.stats.forced_flushes += 1;
        }
        let tail = self.staged.first().map_or(self.log.head, |&(lsn, _)| lsn);
        self.log.persist_tail(&self.pm, tail)?;
        self.stats.tail_persists += 1;
        Ok(())
    }

    /// Live keys.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Slots of the current table (buckets × 256).
    pub fn capacity(&self) -> u64 {
        self.table.buckets() * SLOTS as u64
    }

    /// Live keys ÷ slots: at most 7/8 after every write, 7/16 right after a doubling.
    pub fn load_factor(&self) -> f64 {
        self.len as f64 / self.capacity() as f64
    }

    /// P-buckets of the current table.
    pub fn buckets(&self) -> u64 {
        self.table.buckets()
    }

    /// DRAM held: per-bucket state (fingerprints, bitmaps, D-bucket) plus the staged set.
    pub fn dram_bytes(&self) -> u64 {
        (self.buckets.capacity() * size_of::<Bucket>()
            + self.staged.len() * 2 * size_of::<(u64, u64)>()
            + size_of::<Self>()) as u64
    }

    /// PM the current state occupies: superblock, logs and the current table.
    pub fn pm_bytes_used(&self) -> u64 {
        self.geo.heap_start() + Table::bytes(self.table.log2)
    }

    pub fn stats(&self) -> HashStats {
        self.stats
    }
}
