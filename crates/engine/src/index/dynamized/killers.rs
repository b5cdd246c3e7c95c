//! Killer tables: the keys that kill older shard records during a sampling query, each with the rank of the
//! newest source holding it — 0 for the buffers, `q + 1` for a tombstone of shard position `q` (newest
//! first). A record of shard position `p` is dead when its key's rank is at most `p` (a source newer than its
//! shard).
//!
//! * [`Killers`]: an open-addressing hash table (linear probing, at most half full) whose slots hold a key
//!   and its rank side by side, so a probe that finds its key or an empty slot at home reads one cache line.
//! * [`TombstoneCache`]: one [`Killers`] over *every* tombstone of a version's resident shards, built once
//!   per shard set and shared by every query over it. A query whose range holds too many tombstones for a
//!   table of its own (e.g. weighted set sampling, which ranges over everything) would otherwise ask the
//!   tombstone Bloom filter of each newer shard for each draw — one probe per newer shard, against one table
//!   probe here.
//!
//! ## Invariants
//! * A key is in a table at most once, with the smallest (newest) rank it was inserted with.
//! * A cached table answers for exactly the shard list (by id, newest first) it was built over: ranks are
//!   positions in that list, so a query uses it only if its version lists the same shards in the same order
//!   (checked per query against the ids, O(shards)). Shards are immutable, so their tombstones never change.
//!
//! ## Cost model (t keys)
//! * Build: O(t) inserts; memory 16 B × 2^⌈log₂ 2t⌉ (at most 64 B per key, 32 B typically).
//! * Probe: O(1) expected, usually one cache line.
//! * [`TombstoneCache::get`]: O(shards) to compare the ids; a rebuild (after a flush or merge changed the
//!   shards) takes O(tombstones of resident shards), about 10 ns per tombstone, once per shard set.

use super::shard::{Shard, prefetch_line};
use super::version::ShardSlot;
use crate::error::Result;
use parking_lot::Mutex;
use std::sync::Arc;

/// One slot: a key and its rank ([`Killers::EMPTY`] when free).
#[derive(Debug, Clone, Copy)]
struct Slot {
    key: u64,
    rank: u32,
}

/// Keys with ranks in an open-addressing table (see the module doc).
#[derive(Debug)]
pub(super) struct Killers {
    slots: Vec<Slot>,
    shift: u32,
    len: usize,
}

impl Killers {
    const EMPTY: u32 = u32::MAX;

    /// A table for up to `n` keys (at most half full).
    pub(super) fn with_capacity(n: usize) -> Killers {
        let slots = (2 * n).next_power_of_two().max(16);
        Killers {
            slots: vec![
                Slot {
                    key: 0,
                    rank: Self::EMPTY
                };
                slots
            ],
            shift: 64 - slots.trailing_zeros(),
            len: 0,
        }
    }

    /// Bytes of memory the table holds.
    pub(super) fn memory_bytes(&self) -> usize {
        self.slots.len() * std::mem::size_of::<Slot>()
    }

    #[inline]
    fn home(&self, key: u64) -> usize {
        (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize
    }

    /// Records `key` at `rank`, keeping the smaller (newer) rank of a key inserted twice. The table must
    /// have room (`with_capacity` of at least the keys inserted).
    pub(super) fn insert(&mut self, key: u64, rank: u32) {
        debug_assert!(
            2 * self.len < self.slots.len(),
            "a killer table over capacity"
        );
        let mask = self.slots.len() - 1;
        let mut i = self.home(key);
        loop {
            let slot = &mut self.slots[i];
            if slot.rank == Self::EMPTY {
                *slot = Slot { key, rank };
                self.len += 1;
                return;
            }
            if slot.key == key {
                slot.rank = slot.rank.min(rank);
                return;
            }
            i = (i + 1) & mask;
        }
    }

    /// True when a source newer than shard position `p` holds `key`.
    #[inline]
    pub(super) fn kills(&self, key: u64, p: usize) -> bool {
        if self.len == 0 {
            return false;
        }
        let mask = self.slots.len() - 1;
        let mut i = self.home(key);
        loop {
            let slot = self.slots[i];
            if slot.rank == Self::EMPTY {
                return false;
            }
            if slot.key == key {
                return (slot.rank as usize) <= p;
            }
            i = (i + 1) & mask;
        }
    }

    /// Asks the CPU to load the home slot of `key`, ahead of [`kills`](Self::kills).
    #[inline]
    pub(super) fn prefetch(&self, key: u64) {
        if self.len > 0 {
            prefetch_line(&self.slots[self.home(key)]);
        }
    }
}

/// A killer table over every tombstone of the resident shards of a shard list.
#[derive(Debug)]
pub(super) struct CachedTombstones {
    /// Ids of the shard list it was built over, newest first.
    ids: Vec<u64>,
    /// The positions (in that list) of the shards it covers: resident shards with tombstones.
    pub(super) covered: Vec<usize>,
    pub(super) table: Killers,
}

/// The last [`CachedTombstones`] built, shared by the queries of every version with the same shards.
#[derive(Debug, Default)]
pub(crate) struct TombstoneCache {
    last: Mutex<Option<Arc<CachedTombstones>>>,
}

impl TombstoneCache {
    /// Bytes of memory of the cached table (0 before the first wide query).
    pub(crate) fn memory_bytes(&self) -> usize {
        self.last
            .lock()
            .as_ref()
            .map_or(0, |c| c.table.memory_bytes())
    }

    /// The table over every tombstone of the resident shards of `shards` (newest first), from the cache if
    /// it was built over the same shards, else built now (and cached for the next query).
    pub(super) fn get<S: Shard>(
        &self,
        shards: &[&Arc<ShardSlot<S>>],
    ) -> Result<Arc<CachedTombstones>> {
        let same = |c: &CachedTombstones| {
            c.ids.len() == shards.len() && c.ids.iter().zip(shards).all(|(&id, s)| id == s.id)
        };
        if let Some(c) = self.last.lock().as_ref()
            && same(c)
        {
            return Ok(c.clone());
        }
        // Built outside the lock: a concurrent query over the same shards may build it too (same result).
        let covered: Vec<usize> = shards
            .iter()
            .enumerate()
            .filter(|(_, s)| s.has_tombstones() && s.shard.resident())
            .map(|(q, _)| q)
            .collect();
        let count = covered
            .iter()
            .map(|&q| shards[q].shard.tombstone_count())
            .sum();
        let mut table = Killers::with_capacity(count);
        for &q in &covered {
            let shard = &shards[q].shard;
            for j in 0..shard.tombstone_count() {
                table.insert(shard.tombstone_at(j)?, q as u32 + 1);
            }
        }
        let built = Arc::new(CachedTombstones {
            ids: shards.iter().map(|s| s.id).collect(),
            covered,
            table,
        });
        *self.last.lock() = Some(built.clone());
        Ok(built)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::dynamized::{
        DeletePolicy, DynOptions, Dynamized, IsamShard, RangeSample, RuntimeOptions,
        WeightedRangeSample, WirsShard,
    };
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;
    use std::collections::{BTreeSet, HashMap};

    /// Whole-set queries (more tombstones in range than a per-query table takes) go through the cached
    /// table; after deletes that change the shards, the next query must see the new tombstones (a cache
    /// reused across shard sets would let the newly deleted records through).
    fn cached_table_follows_the_shards<S: Shard>(weighted: bool) {
        let opts = DynOptions {
            buffer_capacity: 512,
            max_delete_proportion: 1.0,
            max_rejection_rate: 1.0,
            delete_policy: DeletePolicy::Tombstone,
            weighted,
            ..DynOptions::default()
        };
        let rt = RuntimeOptions {
            background: false,
            ..RuntimeOptions::default()
        };
        let idx = Dynamized::<S>::new(opts, rt).unwrap();
        let mut live: BTreeSet<u64> = (0..30_000u64).collect();
        for &k in &live {
            idx.put(k, k + 1, (k % 5 + 1) as f64).unwrap();
        }
        idx.quiesce(true).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(51);
        for round in 0..2u64 {
            // Deletes of 6000 keys (every fifth key from an offset), all flushed into tombstones.
            for k in (round..30_000).step_by(5) {
                idx.delete(k).unwrap();
                live.remove(&k);
            }
            idx.quiesce(true).unwrap();
            assert!(idx.stats().tombstones > 4096, "{:?}", idx.stats());
            let mut out = Vec::new();
            if weighted {
                idx.sample(
                    &WeightedRangeSample::whole_set(),
                    20_000,
                    &mut rng,
                    &mut out,
                )
            } else {
                idx.sample(
                    &RangeSample {
                        lo: 0,
                        hi: u64::MAX,
                    },
                    20_000,
                    &mut rng,
                    &mut out,
                )
            }
            .unwrap();
            assert_eq!(out.len(), 20_000);
            for r in &out {
                assert!(
                    live.contains(&r.key),
                    "round {round}: deleted key {} drawn",
                    r.key
                );
                assert_eq!(r.value, r.key + 1);
            }
            assert!(
                idx.shared.tombstone_cache.memory_bytes() > 0,
                "the cache was not used"
            );
        }
    }

    #[test]
    fn cached_tombstones_follow_the_shards() {
        cached_table_follows_the_shards::<IsamShard>(false);
        cached_table_follows_the_shards::<WirsShard>(true);
    }

    #[test]
    fn killers_keep_the_newest_rank_and_answer_by_position() {
        let mut k = Killers::with_capacity(1000);
        let mut model: HashMap<u64, u32> = HashMap::new();
        let mut x = 0x1234_5678_u64;
        for i in 0..1000u32 {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            // Few distinct keys, so many repeats with other ranks (and colliding home slots).
            let key = (x >> 33) % 600;
            let rank = i % 7;
            k.insert(key, rank);
            let r = model.entry(key).or_insert(rank);
            *r = (*r).min(rank);
        }
        assert_eq!(k.len, model.len());
        for key in 0..700u64 {
            for p in 0..9usize {
                let want = model.get(&key).is_some_and(|&r| r as usize <= p);
                assert_eq!(k.kills(key, p), want, "key {key} at position {p}");
            }
        }
        let empty = Killers::with_capacity(0);
        assert!(!empty.kills(5, 100));
        empty.prefetch(5);
        assert!(k.memory_bytes() >= 2 * 600 * 12);
    }
}
