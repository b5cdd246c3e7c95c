//! The global key filter: one Bloom filter over the record keys of every resident shard (`Shard::resident`:
//! every in-memory shard), so that a flush asks those shards only about the few keys that may already be in
//! them. Shards on disk are not covered (listing their keys would read every page); a flush asks them about
//! every key, and their in-memory key filters answer most of it.
//!
//! A flush must know, for each key it writes, whether an older live version exists (the delete policy then
//! removes it). Asking every shard's key filter costs one cache miss per shard per key, about a dozen per
//! key at ten million records. The global filter answers "certainly in no shard" for almost every new key
//! with one probe; only the keys it reports — those really in a shard and a `fpr` share of the others — are
//! looked up shard by shard.
//!
//! ## Maintenance
//! * The flusher inserts the record keys of every shard it publishes in the pass that probes them
//!   ([`candidates_inserting`](GlobalKeys::candidates_inserting)), before publishing it (a key in the
//!   filter early is only a false positive meanwhile); flushes are serialised, so the next flush's probes
//!   see them. Merges never add a key, they only drop some.
//! * Dropped keys stay in the filter (a Bloom filter cannot forget): it fills with inserts only. It is sized
//!   for twice the records of the version it was built over (at least a minimum), and once more keys than
//!   that went in it asks for a rebuild: [`begin_rebuild`](GlobalKeys::begin_rebuild) starts noting the
//!   hashes inserted from then on, a new filter is built elsewhere over the record keys of a version loaded
//!   *after* that call, and [`finish_rebuild`](GlobalKeys::finish_rebuild) adds the noted hashes to it and
//!   swaps it in. Only the flusher begins a rebuild, after publishing its shard; so a shard published
//!   before the snapshot is in the snapshot, and one published after it belongs to a later flush, whose
//!   keys went in after `begin_rebuild` and were noted.
//!
//! A merge that builds a resident shard from a non-resident one (which the placement rules of `tiered` never
//! do) inserts the new shard's keys itself.
//!
//! Invariant: every record key of every resident shard of every version published since the filter was
//! built is in it (no false negatives); a probe's false-positive rate stays about `fpr` while it holds at most its
//! capacity.
//!
//! Cost: a flush inserts and probes one cache line per key; rebuilds insert 2n keys over the life of an index
//! that grows to n records (each rebuild at least doubles the capacity). Memory: ≈ 1.44 B per key of
//! capacity at 1 %, so up to ≈ 2.9 B per record, and both filters while a rebuild runs.

use super::shard::Shard;
use super::version::Version;
use crate::algo::bloom::{BloomFilter, KeyHash, PREFETCH_DISTANCE, Probe};
use crate::error::Result;

/// The global key filter (see the module doc).
#[derive(Debug)]
pub struct GlobalKeys {
    filter: BloomFilter,
    /// Keys the filter is sized for.
    capacity: usize,
    /// Keys inserted since it was built (those it was built over included).
    inserted: usize,
    fpr: f64,
    /// Smallest capacity of a rebuilt filter.
    min_capacity: usize,
    /// Hashes inserted since a rebuild began (`None`: no rebuild under way).
    since: Option<Vec<KeyHash>>,
}

/// A filter built over a version's keys, ready to replace the current one.
pub struct Rebuilt {
    filter: BloomFilter,
    capacity: usize,
    keys: usize,
}

impl GlobalKeys {
    /// A filter over the record keys of `v`'s resident shards, sized for twice their records and at least
    /// `min_capacity`.
    pub fn over<S: Shard>(v: &Version<S>, fpr: f64, min_capacity: usize) -> Result<GlobalKeys> {
        let r = Self::build(v, fpr, min_capacity)?;
        Ok(GlobalKeys {
            filter: r.filter,
            capacity: r.capacity,
            inserted: r.keys,
            fpr,
            min_capacity,
            since: None,
        })
    }

    /// A new filter over the record keys of `v`'s resident shards (the work of a rebuild; no lock needed).
    pub fn build<S: Shard>(v: &Version<S>, fpr: f64, min_capacity: usize) -> Result<Rebuilt> {
        let resident = || v.shards_newest_first().filter(|s| s.shard.resident());
        let keys: usize = resident().map(|s| s.shard.len()).sum();
        let capacity = (keys.saturating_mul(2)).max(min_capacity).max(1);
        let mut filter = BloomFilter::new(capacity, fpr)?;
        for slot in resident() {
            let mut failed = None;
            let n = slot.shard.len();
            filter.insert_hashes((0..n).map_while(|i| match slot.shard.key_at(i) {
                Ok(k) => Some(BloomFilter::hash_u64(k)),
                Err(e) => {
                    failed = Some(e);
                    None
                }
            }));
            if let Some(e) = failed {
                return Err(e);
            }
        }
        Ok(Rebuilt {
            filter,
            capacity,
            keys,
        })
    }

    /// The smallest capacity of a rebuilt filter.
    pub fn min_capacity(&self) -> usize {
        self.min_capacity
    }

    /// The false-positive rate it is built for.
    pub fn fpr(&self) -> f64 {
        self.fpr
    }

    /// Keys the filter is sized for.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes of memory: the filter and the hashes noted for a rebuild.
    pub fn memory_bytes(&self) -> usize {
        self.filter.memory_bytes() + self.since.as_ref().map_or(0, |s| s.capacity() * 16)
    }

    /// Indexes `j` of the hashes whose key may be in a shard, in order (pipelined probes).
    pub fn candidates(&self, hashes: &[KeyHash]) -> Vec<usize> {
        let probes: Vec<Probe> = hashes
            .iter()
            .map(|&h| self.filter.probe_hashed(h))
            .collect();
        let mut out = Vec::new();
        self.filter.contains_batch(&probes, |j, maybe| {
            if maybe {
                out.push(j);
            }
        });
        out
    }

    /// [`candidates`](Self::candidates) of `hashes`, inserting on the way the keys `j` for which
    /// `insert(j)` holds (each key probed before it is inserted): one pipelined pass, one cache line per
    /// key. A flush calls it with the record keys of the shard it is about to publish: a key in the filter
    /// before its shard is published is only a false positive meanwhile, and a rebuild (only the flusher
    /// begins one, after it published) either loads a version with the shard or notes these keys.
    ///
    /// The keys inserted go into `also` too (the new shard's key filter, built in the same pass). Bits are
    /// tested and set in the blocks themselves (a [`BlockMask`](crate::algo::bloom::BlockMask) built and
    /// used at once stalls on store forwarding).
    pub fn candidates_inserting(
        &mut self,
        hashes: &[KeyHash],
        insert: impl Fn(usize) -> bool,
        mut also: Option<&mut BloomFilter>,
    ) -> Vec<usize> {
        let f = &mut self.filter;
        let mut out = Vec::new();
        let mut inserted = 0;
        for (j, &h) in hashes.iter().enumerate() {
            if let Some(&ahead) = hashes.get(j + PREFETCH_DISTANCE) {
                f.prefetch(f.probe_hashed(ahead));
            }
            let p = f.probe_hashed(h);
            let put = insert(j);
            let maybe = if put {
                f.test_and_set(p)
            } else {
                f.contains(p)
            };
            if maybe {
                out.push(j);
            }
            if put {
                if let Some(a) = also.as_deref_mut() {
                    a.set(a.probe_hashed(h));
                }
                inserted += 1;
                if let Some(since) = &mut self.since {
                    since.push(h);
                }
            }
        }
        self.inserted += inserted;
        out
    }

    /// Inserts the keys of `hashes` (the record keys of a shard just published).
    pub fn insert(&mut self, hashes: impl Iterator<Item = KeyHash> + Clone) {
        if let Some(since) = &mut self.since {
            since.extend(hashes.clone());
        }
        let mut n = 0;
        self.filter.insert_hashes(hashes.inspect(|_| n += 1));
        self.inserted += n;
    }

    /// True when more keys went in than the filter is sized for and no rebuild is under way.
    pub fn wants_rebuild(&self) -> bool {
        self.since.is_none() && self.inserted > self.capacity
    }

    /// True while a rebuild is under way.
    pub fn rebuilding(&self) -> bool {
        self.since.is_some()
    }

    /// Starts noting inserted hashes for a rebuild; the rebuild must load its version after this call.
    pub fn begin_rebuild(&mut self) {
        self.since = Some(Vec::new());
    }

    /// Stops a rebuild that failed (the current filter stays, over-full but without false negatives).
    pub fn abort_rebuild(&mut self) {
        self.since = None;
    }

    /// Replaces the filter by `r` plus the hashes noted since [`begin_rebuild`](Self::begin_rebuild).
    pub fn finish_rebuild(&mut self, mut r: Rebuilt) {
        let since = self.since.take().unwrap_or_default();
        r.filter.insert_hashes(since.iter().copied());
        self.filter = r.filter;
        self.capacity = r.capacity;
        self.inserted = r.keys + since.len();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::dynamized::isam_shard::IsamShard;
    use crate::index::dynamized::run::{Record, SortedRun};
    use crate::index::dynamized::shard::BuildOptions;
    use crate::index::dynamized::version::ShardSlot;
    use std::sync::Arc;

    fn slot(id: u64, keys: impl Iterator<Item = u64>) -> Arc<ShardSlot<IsamShard>> {
        let run = SortedRun {
            records: keys
                .map(|key| Record {
                    key,
                    value: key,
                    weight: 1.0,
                })
                .collect(),
            tombstones: Vec::new(),
        };
        let shard = IsamShard::build(run, BuildOptions::single(false)).unwrap();
        Arc::new(ShardSlot::new(id, shard, 0.01).unwrap())
    }

    fn version(levels: Vec<Vec<Arc<ShardSlot<IsamShard>>>>) -> Version<IsamShard> {
        Version {
            seq: 0,
            buffers: Vec::new(),
            pending: Vec::new(),
            levels,
        }
    }

    fn hashes(keys: impl Iterator<Item = u64>) -> Vec<KeyHash> {
        keys.map(BloomFilter::hash_u64).collect()
    }

    /// Keys of the shards it was built over, keys inserted since, and keys inserted while a rebuild ran are
    /// all reported; unrelated keys mostly are not; a rebuild resizes it.
    #[test]
    fn no_false_negatives_across_inserts_and_rebuilds() {
        let v = version(vec![vec![slot(1, (0..1000).map(|k| k * 3))]]);
        let mut g = GlobalKeys::over(&v, 0.01, 100).unwrap();
        assert_eq!(g.capacity(), 2000);
        let all = |g: &GlobalKeys, keys: &[u64]| {
            let h = hashes(keys.iter().copied());
            g.candidates(&h).len() == keys.len()
        };
        let old: Vec<u64> = (0..1000).map(|k| k * 3).collect();
        assert!(all(&g, &old));
        let fresh: Vec<u64> = (0..1000).map(|k| k * 3 + 1).collect();
        let fp = g.candidates(&hashes(fresh.iter().copied())).len();
        assert!(fp < 50, "{fp} false positives of 1000");
        // Inserts fill it past its capacity.
        let new: Vec<u64> = (1_000_000..1_001_500).collect();
        g.insert(hashes(new.iter().copied()).into_iter());
        assert!(g.wants_rebuild());
        g.begin_rebuild();
        assert!(!g.wants_rebuild() && g.rebuilding());
        // The rebuild's version has the old shard and the new keys' shard; more keys arrive meanwhile.
        let v2 = version(vec![vec![
            slot(1, (0..1000).map(|k| k * 3)),
            slot(2, 1_000_000..1_001_500),
        ]]);
        let r = GlobalKeys::build(&v2, 0.01, 100).unwrap();
        // A flush's pass probes each key before inserting it (fresh keys: few candidates), and inserts only
        // the keys it is told to (its puts), noting them for the rebuild.
        let late: Vec<u64> = (5_000_000..5_000_600).collect();
        let late_puts: Vec<u64> = late.iter().copied().step_by(2).collect();
        let mut shard_filter = BloomFilter::new(300, 0.01).unwrap();
        let c = g.candidates_inserting(
            &hashes(late.iter().copied()),
            |j| j % 2 == 0,
            Some(&mut shard_filter),
        );
        // The shard's filter got exactly the keys inserted: the same bits as inserting them one by one.
        let mut expected = BloomFilter::new(300, 0.01).unwrap();
        expected.insert_hashes(hashes(late_puts.iter().copied()).into_iter());
        assert_eq!(shard_filter, expected);
        assert!(c.len() < 30, "{} of 600 fresh keys reported", c.len());
        assert!(all(&g, &late_puts));
        g.finish_rebuild(r);
        assert!(!g.rebuilding());
        assert_eq!(g.capacity(), 5000);
        for keys in [&old, &new, &late_puts] {
            assert!(all(&g, keys));
        }
        let deletes: Vec<u64> = late.iter().copied().skip(1).step_by(2).collect();
        let fp = g.candidates(&hashes(deletes.iter().copied())).len();
        assert!(fp < 20, "{fp} of 300 keys not inserted reported");
        let fp = g.candidates(&hashes(fresh.iter().copied())).len();
        assert!(fp < 50, "{fp} false positives of 1000 after the rebuild");
    }
}
