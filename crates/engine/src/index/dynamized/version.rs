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
use super::run::SortedRun;
use super::shard::Shard;
use super::tags::TagBits;
use crate::algo::bloom::{BlockMask, BloomFilter, KeyHash, PREFETCH_DISTANCE};
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

    /// Calls `each(j, lookup)` for every `j` in `which`, in order, with what this shard says about
    /// `keys[j]` (as [`lookup`](Self::lookup): its record, deleted by a tag or a tombstone, or absent);
    /// `hashes[j]` is the hash of `keys[j]`. Three passes whose cache misses overlap: key filter probes
    /// pipelined [`PREFETCH_DISTANCE`] keys ahead, one batch search ([`Shard::find_many`]) of the keys the
    /// filter lets through, then tombstone filter probes (pipelined too) for the keys without a record.
    ///
    /// `masks.get(j)` is the [`BlockMask`] of `keys[j]` (computed once for every shard asked; a mask of
    /// another k, or none, makes the filter compute its own).
    pub fn lookup_many(
        &self,
        keys: &[u64],
        hashes: &[KeyHash],
        masks: &KeyMasks,
        which: &[usize],
        mut each: impl FnMut(usize, Lookup),
    ) -> Result<()> {
        let kf = &self.key_filter;
        let mut maybe: Vec<usize> = Vec::new();
        for (n, &j) in which.iter().enumerate() {
            if let Some(&ahead) = which.get(n + PREFETCH_DISTANCE) {
                kf.prefetch(kf.probe_hashed(hashes[ahead]));
            }
            if kf.contains_masked(kf.probe_hashed(hashes[j]), masks.get(j)) {
                maybe.push(n);
            }
        }
        let targets: Vec<u64> = maybe.iter().map(|&n| keys[which[n]]).collect();
        let mut found = Vec::with_capacity(targets.len());
        self.shard.find_many(&targets, &mut found)?;
        let mut records = maybe
            .into_iter()
            .zip(found)
            .filter_map(|(n, i)| Some((n, i?)));
        let mut next_record = records.next();
        let tombs = self.tomb_filter.as_ref();
        for (n, &j) in which.iter().enumerate() {
            if let (Some(t), Some(&ahead)) = (tombs, which.get(n + PREFETCH_DISTANCE)) {
                t.prefetch(t.probe_hashed(hashes[ahead]));
            }
            if let Some((at, i)) = next_record
                && at == n
            {
                next_record = records.next();
                each(
                    j,
                    if self.tags.get(i) {
                        Lookup::Deleted
                    } else {
                        Lookup::Record(i)
                    },
                );
                continue;
            }
            let tombstone = match tombs {
                Some(t) if t.contains_masked(t.probe_hashed(hashes[j]), masks.get(j)) => {
                    self.shard.has_tombstone(keys[j])?
                }
                _ => false,
            };
            each(
                j,
                if tombstone {
                    Lookup::Deleted
                } else {
                    Lookup::Absent
                },
            );
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

/// The [`BlockMask`]s of some of a batch's keys (those looked up), for filters of k probes: 4 bytes per
/// key of the batch plus a mask per key computed.
pub struct KeyMasks {
    /// Index into `masks` per key of the batch (`u32::MAX`: not computed).
    at: Vec<u32>,
    masks: Vec<BlockMask>,
    k: u32,
    none: BlockMask,
}

impl KeyMasks {
    /// No mask yet for a batch of `n` keys; masks will be for filters of `k` probes.
    pub fn new(n: usize, k: u32) -> KeyMasks {
        KeyMasks {
            at: vec![u32::MAX; n],
            masks: Vec::new(),
            k,
            none: BlockMask::default(),
        }
    }

    /// Computes the mask of key `j` (of hash `hash`) if not done yet.
    pub fn compute(&mut self, j: usize, hash: KeyHash) {
        if self.at[j] == u32::MAX {
            self.at[j] = self.masks.len() as u32;
            self.masks.push(BlockMask::of(hash, self.k));
        }
    }

    /// The mask of key `j`, or the empty one (filters then compute their own).
    #[inline]
    pub fn get(&self, j: usize) -> &BlockMask {
        self.masks.get(self.at[j] as usize).unwrap_or(&self.none)
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
    let keys = filter_over(
        run.records.len(),
        run.records.iter().map(|r| Ok(r.key)),
        fpr,
    )?;
    Ok((keys, tombstone_filter(&run.tombstones, fpr)?))
}

/// The filter over `tombstones`; `None` when there is none.
pub fn tombstone_filter(tombstones: &[u64], fpr: f64) -> Result<Option<BloomFilter>> {
    (!tombstones.is_empty())
        .then(|| filter_over(tombstones.len(), tombstones.iter().map(|&t| Ok(t)), fpr))
        .transpose()
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
    /// looked up in non-resident shards only. One pass, shard by shard newest first, as
    /// [`lookup_shards`](Self::lookup_shards) does for one key: each shard answers for the keys still open
    /// ([`ShardSlot::lookup_many`], key and tombstone filter probes pipelined); a record (live unless tagged)
    /// or a tombstone closes the key, since anything older was killed when it was written.
    ///
    /// A key the global filter ruled out may still have a *tombstone* in a resident shard (the filter holds
    /// record keys only): when the first non-resident shard comes, each such key is checked for a tombstone
    /// in every newer shard before it joins the open keys.
    pub fn lookup_shards_many(
        &self,
        keys: &[u64],
        hashes: &[KeyHash],
        candidates: Vec<usize>,
    ) -> Result<Vec<Option<LiveRecord<'_, S>>>> {
        debug_assert_eq!(keys.len(), hashes.len());
        let slots: Vec<&Arc<ShardSlot<S>>> = self.shards_newest_first().collect();
        let mut live: Vec<Option<LiveRecord<'_, S>>> = vec![None; keys.len()];
        // Each looked-up key's filter bits, computed once for every shard's filters of the usual k.
        let mut masks = KeyMasks::new(
            keys.len(),
            slots.first().map_or(0, |s| s.key_filter.hashes()),
        );
        for &j in &candidates {
            masks.compute(j, hashes[j]);
        }
        let mut open = candidates;
        let mut all_open = false;
        // Keys a record or a tombstone has settled.
        let mut settled = vec![false; keys.len()];
        let mut still = Vec::with_capacity(open.len());
        for (p, slot) in slots.iter().enumerate() {
            if !all_open && !slot.shard.resident() {
                all_open = true;
                let mut open_now = vec![false; keys.len()];
                for &j in &open {
                    open_now[j] = true;
                }
                let mut joining = Vec::new();
                for j in (0..keys.len()).filter(|&j| !open_now[j] && !settled[j]) {
                    masks.compute(j, hashes[j]);
                    let mut killed = false;
                    for newer in &slots[..p] {
                        if newer.has_tombstone_hashed(keys[j], hashes[j])? {
                            killed = true;
                            break;
                        }
                    }
                    if !killed {
                        joining.push(j);
                    }
                }
                // Still in key order: `lookup_many` walks the keys in order.
                open.extend(joining);
                open.sort_unstable();
            }
            if open.is_empty() {
                if all_open {
                    break;
                }
                continue;
            }
            still.clear();
            let slot: &Arc<ShardSlot<S>> = slot;
            slot.lookup_many(keys, hashes, &masks, &open, |j, found| match found {
                Lookup::Record(i) => {
                    live[j] = Some((slot, i));
                    settled[j] = true;
                }
                Lookup::Deleted => settled[j] = true,
                Lookup::Absent => still.push(j),
            })?;
            std::mem::swap(&mut open, &mut still);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::dynamized::alias_shard::stats::proptest_config;
    use crate::index::dynamized::isam_shard::IsamShard;
    use crate::index::dynamized::run::Record;
    use crate::index::dynamized::shard::BuildOptions;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    /// A slot over `records` and `tombstones` (sorted and deduplicated) with records at `tagged` tagged.
    fn slot(
        id: u64,
        records: &[u64],
        tombstones: &[u64],
        tagged: &[usize],
    ) -> Arc<ShardSlot<IsamShard>> {
        let keys: BTreeSet<u64> = records.iter().copied().collect();
        let run = SortedRun {
            records: keys
                .iter()
                .map(|&key| Record {
                    key,
                    value: key,
                    weight: 1.0,
                })
                .collect(),
            tombstones: tombstones
                .iter()
                .copied()
                .collect::<BTreeSet<u64>>()
                .into_iter()
                .collect(),
        };
        let shard = IsamShard::build(run, BuildOptions::single(false)).unwrap();
        let slot = ShardSlot::new(id, shard, 0.01).unwrap();
        for &i in tagged {
            if i < slot.shard.len() {
                slot.tags.set(i);
            }
        }
        Arc::new(slot)
    }

    type SlotSpec = (Vec<u64>, Vec<u64>, Vec<usize>);

    proptest! {
        #![proptest_config(proptest_config(64))]

        /// The batch lookup of a flush agrees with the one-key lookup for every key (records, tags and
        /// tombstones anywhere), given every key with a record as a candidate, and large shards (batch
        /// searches over several ISAM levels) included.
        #[test]
        fn batch_lookups_agree_with_single_ones(
            specs in prop::collection::vec(
                (
                    prop::collection::vec(0u64..3000, 0..400),
                    prop::collection::vec(0u64..3000, 0..60),
                    prop::collection::vec(0usize..400, 0..20),
                ),
                1..7,
            ),
            big in any::<bool>(),
            probes in prop::collection::vec(0u64..3100, 1..300),
        ) {
            let mut specs: Vec<SlotSpec> = specs;
            if big {
                // Every third key of a wide range: four ISAM levels.
                specs.push(((0..100_000u64).map(|k| k * 3).collect(), vec![7, 8], vec![1, 500]));
            }
            let levels: Vec<Level<IsamShard>> = specs
                .iter()
                .enumerate()
                .map(|(i, (r, t, g))| vec![slot(i as u64, r, t, g)])
                .rev()
                .collect();
            let v = Version { seq: 0, buffers: Vec::new(), pending: Vec::new(), levels };
            let keys: Vec<u64> = probes.iter().copied().collect::<BTreeSet<u64>>().into_iter().collect();
            let hashes: Vec<KeyHash> = keys.iter().map(|&k| BloomFilter::hash_u64(k)).collect();
            let candidates: Vec<usize> = (0..keys.len())
                .filter(|&j| v.shards_newest_first().any(|s| s.shard.find(keys[j]).unwrap().is_some()))
                .collect();
            let many = v.lookup_shards_many(&keys, &hashes, candidates).unwrap();
            for (j, got) in many.iter().enumerate() {
                let want = v.lookup_shards(keys[j], 0).unwrap();
                prop_assert_eq!(
                    got.map(|(s, i)| (s.id, i)),
                    want.map(|(s, i)| (s.id, i)),
                    "key {}", keys[j]
                );
            }
        }
    }
}
