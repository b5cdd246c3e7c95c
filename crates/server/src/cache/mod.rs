//! # The hot-key write-back cache (FarReach, in the server)
//!
//! A Count-Min sketch counts the key operations that reach the partitions; a key whose estimate reaches
//! the hot threshold (and whose value is at most [`CacheConfig::max_value`] bytes) is *populated*: its
//! partition's worker reads it and installs it here. From then on the cache is the authority for the key:
//! GET is answered from it, and a write updates it, appends a record to the cache log ([`log`]) and is
//! answered once that record is durable — on the connection's thread, without the partition. This takes the
//! hottest keys off their partitions, which is what evens out a skewed load.
//!
//! Invariants:
//! * A cached key's newest value is the cache entry's; its partition may hold an older one.
//! * A key enters and leaves the cache only inside its partition's worker ([`Op::Populate`](crate::store::Op),
//!   `Op::Evict`), in that partition's order: an operation queued at the partition before the change sees
//!   the key as it was, one after sees the change. The worker also checks the cache for every key operation,
//!   so an operation routed to the partition just before the key was populated is served by the cache.
//! * Eviction writes a dirty entry's value to the partition and commits it **before** logging the eviction;
//!   recovery applies, for each key, only a last record that is a write or delete (not an eviction).
//! * Range reads (RANGE, COUNT, SAMPLE, SCAN, DBSIZE) first write the partition's dirty cached entries into
//!   the partition (inside its worker), so they see every acknowledged write.
//! * Snapshots (every [`CacheConfig::snapshot_interval`]) start a new log generation, write every dirty entry
//!   back (seq-checked: a write-back applies only if the entry is still the one it was taken from), and
//!   delete the older generations once the partitions have made the values durable.
//!
//! Cost: a cached operation is a shard lock, a hash lookup and (writes) a log append; an uncached one adds
//! four sketch counters. An operation on a key that was never cached usually takes no lock and no lookup: a
//! bit filter of the keys ever populated (one bit per hash, set before the entry can be seen, never cleared;
//! 16 KiB, so it stays in the CPU's caches where the shards' tables do not) answers "not cached" first.
//! Eviction is approximate LFU: the least used of [`EVICTION_SAMPLES`] sampled entries.

pub mod log;
mod sketch;

use crate::error::ServerResult;
use crate::store::{Op, OpResult, SetCondition};
use log::{CacheLog, LogRecord};
use parking_lot::Mutex;
use rand::Rng;
use sketch::CountMin;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;
use strata::Durability;
use xxhash_rust::xxh3::Xxh3DefaultBuilder;

/// A key is hot only if its estimate is at least this many times the sketch's mean counter.
pub const HOT_OVER_MEAN: u64 = 4;
/// Entries sampled to pick an eviction victim.
pub const EVICTION_SAMPLES: usize = 10;
const SHARDS: usize = 64;
/// Bits of the filter of keys that may be cached (module doc).
const MAYBE_BITS: usize = 1 << 17;

/// The hash of a key that picks its shard, its filter bit and its sketch counters (xxh3, as the
/// connections' own key tracking uses, so a caller that has it passes it on: [`HotCache::serve_hashed`]).
pub fn key_hash(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key)
}

/// The filter word and bit of a key hash (bits above the shard's).
fn maybe_bit(h: u64) -> (usize, u64) {
    let b = (h >> SHARDS.trailing_zeros()) as usize & (MAYBE_BITS - 1);
    (b / 64, 1 << (b % 64))
}

/// How the cache is sized and when a key is hot.
#[derive(Debug, Clone)]
pub struct CacheConfig {
    /// Most entries (default 10,000).
    pub capacity: usize,
    /// Largest value the cache holds (default 128 bytes; larger values stay in their partition).
    pub max_value: usize,
    /// Sketch estimate at which a key is populated.
    pub hot_threshold: u16,
    /// How often dirty entries are written back and the log's older generations dropped.
    pub snapshot_interval: Duration,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            capacity: 10_000,
            max_value: 128,
            hot_threshold: 8,
            snapshot_interval: Duration::from_secs(10),
        }
    }
}

#[derive(Debug, Clone)]
struct Entry {
    value: Option<Vec<u8>>,
    seq: u64,
    dirty: bool,
    /// Generation of the last log record about this key (0: none since it was populated).
    logged_gen: u64,
    freq: u32,
    partition: usize,
}

/// Counters for INFO and the benchmark.
#[derive(Debug, Default)]
pub struct CacheCounters {
    pub hits: AtomicU64,
    pub populations: AtomicU64,
    pub evictions: AtomicU64,
}

/// The cache; see the module doc.
pub struct HotCache {
    config: CacheConfig,
    shards: Vec<Mutex<HashMap<Vec<u8>, Entry, Xxh3DefaultBuilder>>>,
    /// A key's bit ([`maybe_bit`]) is set before it is first populated: a clear bit means not cached.
    maybe_cached: Box<[AtomicU64]>,
    sketch: CountMin,
    /// Keys with a population queued (so a hot key is populated once).
    populating: Mutex<HashSet<Vec<u8>>>,
    /// Per partition: keys that became dirty (drained by range reads and snapshots).
    dirty: Vec<Mutex<Vec<Vec<u8>>>>,
    len: AtomicUsize,
    seq: AtomicU64,
    log: CacheLog,
    durability: Durability,
    /// Oldest log generation not yet deleted.
    oldest_gen: AtomicU64,
    pub counters: CacheCounters,
}

/// What the cache did with an operation.
pub enum Served {
    /// Answered; the reply may go out once log ticket `.1` is durable (0: nothing to wait for).
    Done(OpResult, u64),
    /// The key is not cached: the partition answers.
    NotCached,
    /// The key is cached but the operation cannot be served here (its value would grow past the limit): the
    /// partition must evict the key first, then run it.
    NeedsEviction,
}

impl HotCache {
    /// A cache whose log lives in `dir`, starting at log generation `generation` and sequence number `seq`.
    pub fn new(
        config: CacheConfig,
        dir: &Path,
        generation: u64,
        seq: u64,
        partitions: usize,
        durability: Durability,
    ) -> ServerResult<HotCache> {
        Ok(HotCache {
            shards: (0..SHARDS)
                .map(|_| Mutex::new(HashMap::default()))
                .collect(),
            maybe_cached: (0..MAYBE_BITS / 64).map(|_| AtomicU64::new(0)).collect(),
            sketch: CountMin::default(),
            populating: Mutex::new(HashSet::new()),
            dirty: (0..partitions).map(|_| Mutex::new(Vec::new())).collect(),
            len: AtomicUsize::new(0),
            seq: AtomicU64::new(seq),
            log: CacheLog::start(dir, generation, durability)?,
            durability,
            oldest_gen: AtomicU64::new(generation),
            counters: CacheCounters::default(),
            config,
        })
    }

    fn shard(&self, key: &[u8]) -> &Mutex<HashMap<Vec<u8>, Entry, Xxh3DefaultBuilder>> {
        self.shard_of(key_hash(key))
    }

    fn shard_of(&self, h: u64) -> &Mutex<HashMap<Vec<u8>, Entry, Xxh3DefaultBuilder>> {
        &self.shards[(h as usize) % SHARDS]
    }

    /// Entries now.
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// True when nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The configuration.
    pub fn config(&self) -> &CacheConfig {
        &self.config
    }

    /// The log (for waiting on tickets).
    pub fn log(&self) -> &CacheLog {
        &self.log
    }

    /// True if `key` is cached.
    pub fn contains(&self, key: &[u8]) -> bool {
        self.shard(key).lock().contains_key(key)
    }

    /// Starts loading `key`'s sketch counters (see [`CountMin::prefetch`]); a hint only.
    pub fn prefetch(&self, key: &[u8]) {
        self.sketch.prefetch(key);
    }

    /// Counts an access of an uncached key; true if it just became hot and should be populated (the caller
    /// queues `Op::Populate` at the key's partition). Hot means an estimate of at least the configured
    /// threshold and at least [`HOT_OVER_MEAN`] times the sketch's mean counter, so a uniform load over many
    /// keys (whose estimates are mostly collisions) populates nothing and the cache does not churn.
    /// `h` is `key`'s [`key_hash`].
    pub fn touch(&self, key: &[u8], h: u64) -> bool {
        let est = u64::from(self.sketch.touch_hashed(h));
        if est < u64::from(self.config.hot_threshold) || est < HOT_OVER_MEAN * self.sketch.mean() {
            return false;
        }
        self.populating.lock().insert(key.to_vec())
    }

    fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// The ticket to wait for before answering a write (none at durability `none`).
    fn ticket(&self, t: u64) -> u64 {
        if self.durability == Durability::None {
            0
        } else {
            t
        }
    }

    /// Serves `op` if its key is cached.
    pub fn serve(&self, op: &Op) -> Served {
        match op_key(op) {
            Some(key) => self.serve_hashed(op, key_hash(key)),
            None => Served::NotCached,
        }
    }

    /// [`serve`](Self::serve) with `h`, the [`key_hash`] of `op`'s key, already computed.
    pub fn serve_hashed(&self, op: &Op, h: u64) -> Served {
        let Some(key) = op_key(op) else {
            return Served::NotCached;
        };
        // An empty cache (a uniform load caches nothing) costs no shard lock and no lookup: an entry is
        // counted before it can be seen and uncounted after it is gone.
        if self.len.load(Ordering::Acquire) == 0 {
            return Served::NotCached;
        }
        // Likewise a key whose filter bit is clear was never populated (the bit is set before the entry can
        // be seen).
        let (word, bit) = maybe_bit(h);
        if self.maybe_cached[word].load(Ordering::Acquire) & bit == 0 {
            return Served::NotCached;
        }
        let mut shard = self.shard_of(h).lock();
        let Some(e) = shard.get_mut(key) else {
            return Served::NotCached;
        };
        e.freq = e.freq.saturating_add(1);
        let result = match op {
            Op::Get(_) => OpResult::Value(e.value.clone()),
            Op::Exists(_) => OpResult::Bool(e.value.is_some()),
            Op::Set {
                value,
                condition,
                get_old,
                ..
            } => {
                let write = match condition {
                    SetCondition::Always => true,
                    SetCondition::IfAbsent => e.value.is_none(),
                    SetCondition::IfPresent => e.value.is_some(),
                };
                if write && value.len() > self.config.max_value {
                    return Served::NeedsEviction;
                }
                let old = if *get_old { e.value.clone() } else { None };
                let ticket = if write {
                    self.write_entry(key, e, Some(value.clone()))
                } else {
                    0
                };
                self.counters.hits.fetch_add(1, Ordering::Relaxed);
                let r = if *get_old {
                    OpResult::WrittenWithOld(write, old)
                } else {
                    OpResult::Written(write)
                };
                return Served::Done(r, ticket);
            }
            Op::Del(_) => {
                let existed = e.value.is_some();
                let ticket = if existed {
                    self.write_entry(key, e, None)
                } else {
                    0
                };
                self.counters.hits.fetch_add(1, Ordering::Relaxed);
                return Served::Done(OpResult::Bool(existed), ticket);
            }
            Op::Incr { by, u64_values, .. } => {
                let next = match crate::store::incr(e.value.as_deref(), *by, *u64_values) {
                    Ok(n) => n,
                    Err(msg) => return Served::Done(OpResult::Error(msg), 0),
                };
                let stored = crate::store::counter_bytes(next, *u64_values);
                let ticket = self.write_entry(key, e, Some(stored));
                self.counters.hits.fetch_add(1, Ordering::Relaxed);
                return Served::Done(OpResult::Int(next), ticket);
            }
            Op::Append { value, .. } => {
                let mut v = e.value.clone().unwrap_or_default();
                if v.len() + value.len() > self.config.max_value {
                    return Served::NeedsEviction;
                }
                v.extend_from_slice(value);
                let len = v.len() as i64;
                let ticket = self.write_entry(key, e, Some(v));
                self.counters.hits.fetch_add(1, Ordering::Relaxed);
                return Served::Done(OpResult::Int(len), ticket);
            }
            _ => return Served::NotCached,
        };
        self.counters.hits.fetch_add(1, Ordering::Relaxed);
        Served::Done(result, 0)
    }

    /// Updates a cached entry (lock held) and logs it; returns the ticket to wait for.
    fn write_entry(&self, key: &[u8], e: &mut Entry, value: Option<Vec<u8>>) -> u64 {
        let seq = self.next_seq();
        let rec = match &value {
            Some(v) => LogRecord::Write {
                key: key.to_vec(),
                value: v.clone(),
                seq,
            },
            None => LogRecord::Delete {
                key: key.to_vec(),
                seq,
            },
        };
        let t = self.log.append(&rec);
        e.value = value;
        e.seq = seq;
        e.logged_gen = self.log.generation();
        if !e.dirty {
            e.dirty = true;
            self.dirty[e.partition].lock().push(key.to_vec());
        }
        self.ticket(t)
    }

    /// Installs `key` with its partition's current `value` (called by the partition's worker). Returns a
    /// victim to evict (at its partition) when the cache is over capacity.
    pub fn populate(
        &self,
        key: &[u8],
        value: Option<Vec<u8>>,
        partition: usize,
    ) -> Option<(usize, Vec<u8>)> {
        if value
            .as_ref()
            .is_some_and(|v| v.len() > self.config.max_value)
        {
            // Too large to cache: the key stays marked until the next snapshot ages the sketch, so a hot key
            // with a large value is not offered again on every access.
            return None;
        }
        self.populating.lock().remove(key);
        let len = {
            let h = key_hash(key);
            let mut shard = self.shard_of(h).lock();
            if shard.contains_key(key) {
                return None;
            }
            // Counted and marked in the filter before the entry can be seen, so a count of 0 or a clear bit
            // means not cached (`serve`).
            let (word, bit) = maybe_bit(h);
            self.maybe_cached[word].fetch_or(bit, Ordering::AcqRel);
            let len = self.len.fetch_add(1, Ordering::AcqRel) + 1;
            shard.insert(
                key.to_vec(),
                Entry {
                    value,
                    seq: self.next_seq(),
                    dirty: false,
                    logged_gen: 0,
                    freq: 1,
                    partition,
                },
            );
            len
        };
        self.counters.populations.fetch_add(1, Ordering::Relaxed);
        if len > self.config.capacity {
            self.pick_victim(key)
        } else {
            None
        }
    }

    /// The least used of a few sampled entries (never `except`): (its partition, its key).
    fn pick_victim(&self, except: &[u8]) -> Option<(usize, Vec<u8>)> {
        let mut rng = rand::rng();
        let mut best: Option<(u32, usize, Vec<u8>)> = None;
        for _ in 0..EVICTION_SAMPLES * 4 {
            let shard = self.shards[rng.random_range(0..SHARDS)].lock();
            if shard.is_empty() {
                continue;
            }
            let skip = rng.random_range(0..shard.len());
            if let Some((k, e)) = shard.iter().nth(skip)
                && k.as_slice() != except
                && best.as_ref().is_none_or(|b| e.freq < b.0)
            {
                best = Some((e.freq, e.partition, k.clone()));
            }
        }
        best.map(|(_, p, k)| (p, k))
    }

    /// Removes `key` (called by its partition's worker): first `write_back` gets the value to make durable
    /// in the partition if the entry was dirty (`Some(None)`: delete it), then the entry goes. Returns
    /// whether an eviction record must be logged (the log still holds records about the key); `None` if the
    /// key was not cached.
    pub fn take_for_eviction(
        &self,
        key: &[u8],
        write_back: impl FnOnce(Option<Option<Vec<u8>>>) -> Result<(), String>,
    ) -> Result<Option<bool>, String> {
        // The entry stays (and its shard locked) until its value is in the partition, so no reader on a
        // connection thread ever finds the key in neither place.
        let mut shard = self.shard(key).lock();
        let Some(e) = shard.get(key) else {
            return Ok(None);
        };
        write_back(e.dirty.then(|| e.value.clone()))?;
        let needs_record =
            e.logged_gen != 0 && e.logged_gen >= self.oldest_gen.load(Ordering::Acquire);
        shard.remove(key);
        drop(shard);
        self.len.fetch_sub(1, Ordering::AcqRel);
        self.counters.evictions.fetch_add(1, Ordering::Relaxed);
        Ok(Some(needs_record))
    }

    /// Logs that `key` now lives in its partition; returns the ticket.
    pub fn log_eviction(&self, key: &[u8]) -> u64 {
        let seq = self.next_seq();
        self.log.append(&LogRecord::Evict {
            key: key.to_vec(),
            seq,
        })
    }

    /// Drains partition `p`'s dirty keys: (key, value, seq) of each entry still dirty, marked clean (called
    /// by the partition's worker, which writes them to the partition before its next read).
    pub fn drain_dirty(&self, p: usize) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
        let keys = std::mem::take(&mut *self.dirty[p].lock());
        let mut out = Vec::with_capacity(keys.len());
        for key in keys {
            let mut shard = self.shard(&key).lock();
            if let Some(e) = shard.get_mut(&key)
                && e.dirty
            {
                e.dirty = false;
                out.push((key.clone(), e.value.clone()));
            }
        }
        out
    }

    /// Snapshot, step 1: starts log generation `g`; returns the generations before it.
    pub fn rotate(&self) -> Vec<u64> {
        let old = self.log.generation();
        self.log.rotate(old + 1);
        (self.oldest_gen.load(Ordering::Acquire)..=old).collect()
    }

    /// Snapshot, last step: the older generations' records are all in the partitions now.
    pub fn retire(&self, dir: &Path, gens: &[u64]) -> ServerResult<()> {
        log::remove_generations(dir, gens)?;
        if let Some(&last) = gens.last() {
            self.oldest_gen.store(last + 1, Ordering::Release);
        }
        Ok(())
    }

    /// Halves the sketch and forgets which keys were offered (called at each snapshot).
    pub fn age(&self) {
        self.sketch.halve();
        self.populating.lock().clear();
    }
}

/// The key an operation is about, if it is a single-key operation the cache can serve.
pub fn op_key(op: &Op) -> Option<&[u8]> {
    match op {
        Op::Get(k) | Op::Exists(k) | Op::Del(k) => Some(k),
        Op::Set { key, .. } | Op::Incr { key, .. } | Op::Append { key, .. } => Some(key),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every populated key is served (the filter never hides a cached key), including keys that share a
    /// filter bit with others and keys populated again after an eviction; keys never populated are not.
    #[test]
    fn the_filter_never_hides_a_cached_key() {
        let dir = tempfile::tempdir().unwrap();
        let config = CacheConfig {
            capacity: 100_000,
            ..CacheConfig::default()
        };
        let cache = HotCache::new(config, dir.path(), 1, 0, 2, Durability::None).unwrap();
        let key = |i: u32| format!("key:{i:012}").into_bytes();
        let get = |i: u32| Op::Get(key(i));
        for i in 0..20_000 {
            assert!(cache.populate(&key(i), Some(vec![1]), 0).is_none());
        }
        for i in 0..20_000 {
            assert!(
                matches!(
                    cache.serve(&get(i)),
                    Served::Done(OpResult::Value(Some(_)), _)
                ),
                "key {i} was populated"
            );
        }
        let missed = (20_000..40_000)
            .filter(|&i| matches!(cache.serve(&get(i)), Served::NotCached))
            .count();
        assert_eq!(missed, 20_000, "keys never populated are not served");
        // Out and in again.
        assert_eq!(
            cache.take_for_eviction(&key(7), |_| Ok(())),
            Ok(Some(false))
        );
        assert!(matches!(cache.serve(&get(7)), Served::NotCached));
        assert!(cache.populate(&key(7), Some(vec![2]), 0).is_none());
        assert!(matches!(
            cache.serve(&get(7)),
            Served::Done(OpResult::Value(Some(v)), _) if v == [2]
        ));
    }
}
