//! Shard slots and versions: the immutable snapshot readers pin.
//!
//! A [`ShardSlot`] is a shard plus what the framework keeps beside it: a stable id, its delete tags, a Bloom
//! filter over its record keys (to skip it in point lookups and flush-time probes) and one over its
//! tombstones (to skip it in the rejection check of sampling).
//!
//! A [`Version`] is the whole structure at one moment: the buffers (the active one first, then sealed ones
//! waiting for their flush, newest first), the *pending* shards (flushed buffers the layout has not placed
//! yet, oldest first) and the levels (each a list of shards, oldest first). Age order, newest first, is:
//! buffers, then pending shards from the newest, then level 0's shards from the newest, then level 1's, and
//! so on. Versions are never changed after they are published; a flush or a merge builds a new one and swaps
//! it in atomically.

use super::buffer::MutableBuffer;
use super::run::{PARALLEL_MERGE_MIN, SortedRun};
use super::shard::Shard;
use super::tags::TagBits;
use crate::algo::bloom::{BloomFilter, KeyHash, Probe};
use crate::algo::on_threads;
use crate::error::Result;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// A shard with its id, tags and filters.
pub struct ShardSlot<S> {
    pub id: u64,
    pub shard: S,
    pub tags: TagBits,
    key_filter: BloomFilter,
    tomb_filter: Option<BloomFilter>,
    /// Set (under the framework's tag lock) when a merge that read this shard has been published: a tag
    /// set on it afterwards would be lost, so a flush re-resolves its key in the current version instead.
    replaced: AtomicBool,
}

impl<S: Shard> ShardSlot<S> {
    /// Wraps `shard`, building its filters from its keys with false-positive rate `fpr`.
    pub fn new(id: u64, shard: S, fpr: f64) -> Result<ShardSlot<S>> {
        let keys = (0..shard.len()).map(|i| shard.key_at(i));
        let key_filter = filter_over(shard.len(), keys, fpr)?;
        let tombs = (0..shard.tombstone_count()).map(|j| shard.tombstone_at(j));
        let tomb_filter = (shard.tombstone_count() > 0)
            .then(|| filter_over(shard.tombstone_count(), tombs, fpr))
            .transpose()?;
        Ok(Self::from_parts(id, shard, key_filter, tomb_filter))
    }

    /// Wraps `shard` with filters built elsewhere (from its run, or read from its file).
    pub fn from_parts(
        id: u64,
        shard: S,
        key_filter: BloomFilter,
        tomb_filter: Option<BloomFilter>,
    ) -> ShardSlot<S> {
        ShardSlot {
            id,
            tags: TagBits::new(shard.len()),
            shard,
            key_filter,
            tomb_filter,
            replaced: AtomicBool::new(false),
        }
    }

    /// True once a published merge has replaced this shard (see the field).
    pub fn is_replaced(&self) -> bool {
        self.replaced.load(Ordering::Acquire)
    }

    /// Marks the shard as replaced by a published merge.
    pub fn mark_replaced(&self) {
        self.replaced.store(true, Ordering::Release);
    }

    /// The Bloom filters over record keys and over tombstones.
    pub fn filters(&self) -> (&BloomFilter, Option<&BloomFilter>) {
        (&self.key_filter, self.tomb_filter.as_ref())
    }

    /// Records plus tombstones.
    pub fn entries(&self) -> u64 {
        (self.shard.len() + self.shard.tombstone_count()) as u64
    }

    /// Entries that stand for deleted data: tombstones plus tagged records.
    pub fn deleted(&self) -> u64 {
        (self.shard.tombstone_count() + self.tags.count()) as u64
    }

    /// False when the shard certainly has no record with `key`.
    #[inline]
    pub fn may_contain_key(&self, key: u64) -> bool {
        self.key_filter
            .may_contain_hashed(BloomFilter::hash_u64(key))
    }

    /// True when the shard holds a tombstone for `key` (the filter answers most misses without a search).
    #[inline]
    pub fn has_tombstone(&self, key: u64) -> Result<bool> {
        match &self.tomb_filter {
            Some(f) if f.may_contain_hashed(BloomFilter::hash_u64(key)) => {
                self.shard.has_tombstone(key)
            }
            _ => Ok(false),
        }
    }

    /// [`has_tombstone`](Self::has_tombstone) with the key's filter hash computed by the caller (once for
    /// every shard it asks).
    #[inline]
    pub fn has_tombstone_hashed(&self, key: u64, hash: KeyHash) -> Result<bool> {
        match &self.tomb_filter {
            Some(f) if f.contains(f.probe_hashed(hash)) => self.shard.has_tombstone(key),
            _ => Ok(false),
        }
    }

    /// True when the tombstone filter says the shard may hold a tombstone for the key of filter hash `hash`
    /// (no shard read).
    #[inline]
    pub fn may_have_tombstone(&self, hash: KeyHash) -> bool {
        self.tomb_filter
            .as_ref()
            .is_some_and(|f| f.contains(f.probe_hashed(hash)))
    }

    /// Asks the CPU to load the tombstone filter's block for a key of filter hash `hash`, ahead of
    /// [`has_tombstone_hashed`](Self::has_tombstone_hashed).
    #[inline]
    pub fn prefetch_tombstone(&self, hash: KeyHash) {
        if let Some(f) = &self.tomb_filter {
            f.prefetch(f.probe_hashed(hash));
        }
    }

    /// True when the shard has any tombstone.
    #[inline]
    pub fn has_tombstones(&self) -> bool {
        self.tomb_filter.is_some()
    }

    /// Bytes of memory: the shard, its tags and filters.
    pub fn memory_bytes(&self) -> usize {
        self.shard.memory_bytes()
            + self.tags.memory_bytes()
            + self.key_filter.memory_bytes()
            + self.tomb_filter.as_ref().map_or(0, |f| f.memory_bytes())
    }

    /// Calls `each(j, i)` for every `j` in `which` whose key `keys[j]` has a record in this shard, at index
    /// `i` (tagged or not; tombstones are not looked at). The key filter's probes are pipelined so that
    /// their cache misses overlap; `hashes[j]` is the hash of `keys[j]`.
    pub fn find_many(
        &self,
        keys: &[u64],
        hashes: &[KeyHash],
        which: &[usize],
        mut each: impl FnMut(usize, Option<usize>),
    ) -> Result<()> {
        let probes: Vec<Probe> = which
            .iter()
            .map(|&j| self.key_filter.probe_hashed(hashes[j]))
            .collect();
        let mut maybe = Vec::with_capacity(which.len());
        self.key_filter
            .contains_batch(&probes, |_, m| maybe.push(m));
        for (&j, m) in which.iter().zip(maybe) {
            each(j, if m { self.shard.find(keys[j])? } else { None });
        }
        Ok(())
    }

    /// The newest entry for `key` in this shard.
    pub fn lookup(&self, key: u64) -> Result<Lookup> {
        if self.may_contain_key(key)
            && let Some(i) = self.shard.find(key)?
        {
            return Ok(if self.tags.get(i) {
                Lookup::Deleted
            } else {
                Lookup::Record(i)
            });
        }
        Ok(if self.has_tombstone(key)? {
            Lookup::Deleted
        } else {
            Lookup::Absent
        })
    }
}

/// A Bloom filter over `n` keys.
fn filter_over(n: usize, keys: impl Iterator<Item = Result<u64>>, fpr: f64) -> Result<BloomFilter> {
    let mut f = BloomFilter::new(n, fpr)?;
    let mut failed = None;
    f.insert_hashes(keys.map_while(|k| match k {
        Ok(k) => Some(BloomFilter::hash_u64(k)),
        Err(e) => {
            failed = Some(e);
            None
        }
    }));
    failed.map_or(Ok(f), Err)
}

/// The filters of a shard built from `run`: over its record keys, and over its tombstones if it has any.
pub fn filters_for_run(run: &SortedRun, fpr: f64) -> Result<(BloomFilter, Option<BloomFilter>)> {
    filters_for_run_on(run, fpr, 1)
}

/// [`filters_for_run`] on up to `threads` threads: each fills a filter of the full size from its share of
/// the keys and the filters are united (the same filter, bit for bit). Small runs stay on one thread.
pub fn filters_for_run_on(
    run: &SortedRun,
    fpr: f64,
    threads: usize,
) -> Result<(BloomFilter, Option<BloomFilter>)> {
    let n = run.records.len();
    let parts = threads.min(n / PARALLEL_MERGE_MIN).max(1);
    let keys = if parts == 1 {
        filter_over(n, run.records.iter().map(|r| Ok(r.key)), fpr)?
    } else {
        let chunk = n.div_ceil(parts);
        let filters = on_threads(parts, |j| {
            let part = &run.records[(j * chunk).min(n)..((j + 1) * chunk).min(n)];
            filter_over(n, part.iter().map(|r| Ok(r.key)), fpr)
        });
        let mut filters = filters.into_iter();
        let mut keys = filters.next().expect("one part at least")?;
        for f in filters {
            keys.union_with(&f?)?;
        }
        keys
    };
    let tombs = (!run.tombstones.is_empty())
        .then(|| {
            filter_over(
                run.tombstones.len(),
                run.tombstones.iter().map(|&t| Ok(t)),
                fpr,
            )
        })
        .transpose()?;
    Ok((keys, tombs))
}

/// What a shard says about a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// The live record at this index.
    Record(usize),
    /// A tombstone, or a tagged record: the key is deleted as of this shard.
    Deleted,
    /// Nothing about the key here.
    Absent,
}

/// A live record: its shard and index.
pub type LiveRecord<'a, S> = (&'a Arc<ShardSlot<S>>, usize);

/// One level: its shards, oldest first.
pub type Level<S> = Vec<Arc<ShardSlot<S>>>;

/// The structure at one moment.
pub struct Version<S> {
    /// Increases with every published version.
    pub seq: u64,
    /// The active buffer first, then sealed buffers, newest first.
    pub buffers: Vec<Arc<MutableBuffer>>,
    /// Flushed buffers the layout has not placed yet, oldest first (all newer than every level).
    pub pending: Vec<Arc<ShardSlot<S>>>,
    pub levels: Vec<Level<S>>,
}

impl<S: Shard> Version<S> {
    /// Every shard, newest first.
    pub fn shards_newest_first(&self) -> impl Iterator<Item = &Arc<ShardSlot<S>>> {
        self.pending
            .iter()
            .rev()
            .chain(self.levels.iter().flat_map(|l| l.iter().rev()))
    }

    /// Shards, pending ones included.
    pub fn shard_count(&self) -> usize {
        self.pending.len() + self.levels.iter().map(Vec::len).sum::<usize>()
    }

    /// The live record of every key `keys[j]` (in the shards), or `None` where the key is absent or deleted;
    /// `hashes[j]` is the hash of `keys[j]`. `candidates` lists (in order) the only keys that may have a
    /// record in a *resident* shard (`Shard::resident`; the global key filter's answer): the others are
    /// looked up in non-resident shards only. First each key's newest record is found, shard by shard
    /// newest first with pipelined key filter probes; a key with none has no live record whatever
    /// tombstones say, so only the few keys found are then checked for a tag and for a tombstone in a newer
    /// shard (the newest record of a key is its only candidate: anything older was killed when it was
    /// written).
    pub fn lookup_shards_many(
        &self,
        keys: &[u64],
        hashes: &[KeyHash],
        candidates: Vec<usize>,
    ) -> Result<Vec<Option<LiveRecord<'_, S>>>> {
        debug_assert_eq!(keys.len(), hashes.len());
        let slots: Vec<&Arc<ShardSlot<S>>> = self.shards_newest_first().collect();
        // (position in `slots`, record index) of each key's newest record.
        let mut newest: Vec<Option<(usize, usize)>> = vec![None; keys.len()];
        let mut open = candidates;
        // Every key not found yet, made when the first non-resident shard comes.
        let mut open_all: Option<Vec<usize>> = None;
        for (p, slot) in slots.iter().enumerate() {
            let resident = slot.shard.resident();
            if !resident && open_all.is_none() {
                open_all = Some((0..keys.len()).filter(|&j| newest[j].is_none()).collect());
            }
            let list = match &mut open_all {
                Some(all) => all,
                None => &mut open,
            };
            if list.is_empty() {
                if open_all.is_some() {
                    break;
                }
                continue;
            }
            let mut still = Vec::with_capacity(list.len());
            slot.find_many(keys, hashes, list, |j, found| match found {
                Some(i) => newest[j] = Some((p, i)),
                None => still.push(j),
            })?;
            *list = still;
        }
        let mut live: Vec<Option<LiveRecord<'_, S>>> = vec![None; keys.len()];
        for (j, found) in newest.into_iter().enumerate() {
            let Some((p, i)) = found else { continue };
            let slot = slots[p];
            if slot.tags.get(i) {
                continue;
            }
            let mut killed = false;
            for newer in &slots[..p] {
                if newer.has_tombstone(keys[j])? {
                    killed = true;
                    break;
                }
            }
            if !killed {
                live[j] = Some((slot, i));
            }
        }
        Ok(live)
    }

    /// The newest state of `key` in the shards at and after position `from` (newest-first order).
    pub fn lookup_shards(&self, key: u64, from: usize) -> Result<Option<LiveRecord<'_, S>>> {
        for slot in self.shards_newest_first().skip(from) {
            match slot.lookup(key)? {
                Lookup::Record(i) => return Ok(Some((slot, i))),
                Lookup::Deleted => return Ok(None),
                Lookup::Absent => {}
            }
        }
        Ok(None)
    }
}
