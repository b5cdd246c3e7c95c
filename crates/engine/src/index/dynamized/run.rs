//! Records, sorted runs, and the merge rule that cancels deleted and overwritten versions.
//!
//! A [`SortedRun`] is what every shard is built from: records with unique ascending keys and tombstones with
//! unique ascending keys. Inside one shard a record is *newer* than a tombstone of the same key: the tombstone
//! deletes the live version of its key in an *older* shard (the tombstone ordering invariant), the record is
//! the key's current value.
//!
//! [`merge_shards`] merges shards given newest first. For each key it looks at the entries newest to oldest:
//! * the key keeps a record iff its newest entry is an untagged record (a tag or a tombstone means deleted);
//! * the key keeps a tombstone iff its oldest entry is a tombstone and the merge does not include the oldest
//!   shard of the structure (`bottom`): such a tombstone still has a target below the merged shards. A key
//!   whose oldest entry is a record needs none: when that record arrived, an older live version would have
//!   been tombstoned in the same shard, so there is nothing older.
//!
//! Cost: O(n log m) for n entries over m inputs (a binary heap of cursors). [`merge_shards_parallel`] splits
//! a large merge by key range over several threads: the same output, in about 1/t of the time on t cores.

use super::shard::Shard;
use super::tags::TagBits;
use crate::algo::on_threads;
use crate::error::Result;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::collections::binary_heap::PeekMut;
use std::ops::Range;

/// One record: a key, its value and its weight (1.0 in unweighted indexes).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Record {
    pub key: u64,
    pub value: u64,
    pub weight: f64,
}

/// Records and tombstones, each with unique keys in ascending order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SortedRun {
    pub records: Vec<Record>,
    pub tombstones: Vec<u64>,
}

impl SortedRun {
    /// Entries (records plus tombstones).
    pub fn entries(&self) -> usize {
        self.records.len() + self.tombstones.len()
    }

    /// Debug check of the run's invariants.
    pub fn is_well_formed(&self) -> bool {
        self.records.windows(2).all(|w| w[0].key < w[1].key)
            && self.tombstones.windows(2).all(|w| w[0] < w[1])
    }
}

/// A shard with the tags of its records: the input of a merge.
pub struct MergeInput<'a, S> {
    pub shard: &'a S,
    pub tags: &'a TagBits,
}

/// Position of a cursor in the heap: (key, age rank). Rank 2·i is shard i's record stream, 2·i + 1 its
/// tombstone stream; shard 0 is the newest, so a smaller rank is a newer entry.
type HeapItem = Reverse<(u64, usize)>;

/// Merges below this many input entries run on one thread: a thread costs more than it saves there.
pub const PARALLEL_MERGE_MIN: usize = 1 << 16;

/// The part of one input a merge reads: record indexes and tombstone indexes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputRange {
    pub records: Range<usize>,
    pub tombstones: Range<usize>,
}

/// Merges `inputs` (newest first) into one run; `bottom` says the merge includes the oldest shard of the
/// structure, so surviving tombstones have no target left and are dropped.
pub fn merge_shards<S: Shard>(inputs: &[MergeInput<'_, S>], bottom: bool) -> Result<SortedRun> {
    merge_ranges(inputs, &whole_ranges(inputs), bottom)
}

/// [`merge_shards`] on up to `threads` threads: the key space is cut at quantiles of the largest input and
/// each part is merged on its own thread (the merge rule looks at one key at a time, so parts are
/// independent); the parts' runs are then concatenated. Small merges stay on the calling thread.
pub fn merge_shards_parallel<S: Shard>(
    inputs: &[MergeInput<'_, S>],
    bottom: bool,
    threads: usize,
) -> Result<SortedRun> {
    let total: usize = inputs
        .iter()
        .map(|i| i.shard.len() + i.shard.tombstone_count())
        .sum();
    merge_shards_split(
        inputs,
        bottom,
        threads.min(total / PARALLEL_MERGE_MIN).max(1),
    )
}

/// The merge of [`merge_shards_parallel`] cut into `parts` key ranges (fewer when the largest input has
/// too few distinct keys to cut at), each merged on its own thread.
fn merge_shards_split<S: Shard>(
    inputs: &[MergeInput<'_, S>],
    bottom: bool,
    parts: usize,
) -> Result<SortedRun> {
    let Some(largest) = inputs.iter().max_by_key(|i| i.shard.len()) else {
        return Ok(SortedRun::default());
    };
    if parts <= 1 || largest.shard.len() < parts {
        return merge_shards(inputs, bottom);
    }
    let n = largest.shard.len();
    let mut pivots = Vec::with_capacity(parts - 1);
    for j in 1..parts {
        let key = largest.shard.key_at(n * j / parts)?;
        if pivots.last() != Some(&key) {
            pivots.push(key);
        }
    }
    // Part j holds keys in [pivots[j - 1], pivots[j]); the first part starts at the smallest key, the
    // last ends past the largest.
    let mut cuts: Vec<Vec<(usize, usize)>> = Vec::with_capacity(inputs.len());
    for input in inputs {
        let mut at = vec![(0, 0)];
        for &p in &pivots {
            at.push((
                input.shard.lower_bound(p)?,
                tombstone_lower_bound(input.shard, p)?,
            ));
        }
        at.push((input.shard.len(), input.shard.tombstone_count()));
        cuts.push(at);
    }
    let ranges: Vec<Vec<InputRange>> = (0..=pivots.len())
        .map(|j| {
            cuts.iter()
                .map(|at| InputRange {
                    records: at[j].0..at[j + 1].0,
                    tombstones: at[j].1..at[j + 1].1,
                })
                .collect()
        })
        .collect();
    let runs = on_threads(ranges.len(), |j| merge_ranges(inputs, &ranges[j], bottom));
    let runs = runs.into_iter().collect::<Result<Vec<_>>>()?;
    let mut out = SortedRun {
        records: Vec::with_capacity(runs.iter().map(|r| r.records.len()).sum()),
        tombstones: Vec::with_capacity(runs.iter().map(|r| r.tombstones.len()).sum()),
    };
    for run in &runs {
        out.records.extend_from_slice(&run.records);
        out.tombstones.extend_from_slice(&run.tombstones);
    }
    debug_assert!(out.is_well_formed());
    Ok(out)
}

/// Every entry of every input.
fn whole_ranges<S: Shard>(inputs: &[MergeInput<'_, S>]) -> Vec<InputRange> {
    inputs
        .iter()
        .map(|i| InputRange {
            records: 0..i.shard.len(),
            tombstones: 0..i.shard.tombstone_count(),
        })
        .collect()
}

/// Index of the first tombstone of `shard` with a key ≥ `key`.
fn tombstone_lower_bound<S: Shard>(shard: &S, key: u64) -> Result<usize> {
    let (mut lo, mut hi) = (0, shard.tombstone_count());
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if shard.tombstone_at(mid)? < key {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    Ok(lo)
}

/// The merge of the entries of `inputs` within `ranges` (one per input), collected into a run.
fn merge_ranges<S: Shard>(
    inputs: &[MergeInput<'_, S>],
    ranges: &[InputRange],
    bottom: bool,
) -> Result<SortedRun> {
    let records: usize = ranges.iter().map(|r| r.records.len()).sum();
    let tombstones: usize = ranges.iter().map(|r| r.tombstones.len()).sum();
    let mut out = SortedRun {
        records: Vec::with_capacity(records),
        tombstones: Vec::with_capacity(if bottom { 0 } else { tombstones }),
    };
    merge_ranges_with(inputs, ranges, bottom, &mut |e| {
        match e {
            Merged::Record(r) => out.records.push(r),
            Merged::Tombstone(k) => out.tombstones.push(k),
        }
        Ok(())
    })?;
    debug_assert!(out.is_well_formed());
    Ok(out)
}

/// One entry of a merge's output.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Merged {
    Record(Record),
    Tombstone(u64),
}

/// The merge of [`merge_shards`], handing each output entry to `emit` instead of collecting a run: records
/// in ascending key order, tombstones in ascending key order (a key with both gives its record first). A
/// shard factory that writes files streams a merge this way without holding the run in memory.
pub fn merge_shards_with<S: Shard>(
    inputs: &[MergeInput<'_, S>],
    bottom: bool,
    emit: &mut impl FnMut(Merged) -> Result<()>,
) -> Result<()> {
    merge_ranges_with(inputs, &whole_ranges(inputs), bottom, emit)
}

/// [`merge_shards_with`] over the entries within `ranges` (one per input). A part of the key space must
/// be whole: every entry of a key the merge reads is inside the ranges.
fn merge_ranges_with<S: Shard>(
    inputs: &[MergeInput<'_, S>],
    ranges: &[InputRange],
    bottom: bool,
    emit: &mut impl FnMut(Merged) -> Result<()>,
) -> Result<()> {
    debug_assert_eq!(inputs.len(), ranges.len());
    // Each stream's position and end: 2·i records of input i, 2·i + 1 its tombstones.
    let mut cursors: Vec<Range<usize>> = Vec::with_capacity(inputs.len() * 2);
    let mut heap: BinaryHeap<HeapItem> = BinaryHeap::with_capacity(inputs.len() * 2);
    for (i, (input, range)) in inputs.iter().zip(ranges).enumerate() {
        cursors.push(range.records.clone());
        cursors.push(range.tombstones.clone());
        if !range.records.is_empty() {
            heap.push(Reverse((input.shard.key_at(range.records.start)?, 2 * i)));
        }
        if !range.tombstones.is_empty() {
            heap.push(Reverse((
                input.shard.tombstone_at(range.tombstones.start)?,
                2 * i + 1,
            )));
        }
    }
    // Entries of the current key, newest first: (rank, record index or usize::MAX for a tombstone).
    while let Some(Reverse((key, _))) = heap.peek().copied() {
        let mut newest: Option<(usize, usize)> = None;
        let mut oldest_is_tombstone = false;
        while let Some(mut top) = heap.peek_mut() {
            let Reverse((k, rank)) = *top;
            if k != key {
                break;
            }
            let shard_no = rank / 2;
            let is_tomb = rank % 2 == 1;
            let cur = &mut cursors[rank];
            let idx = cur.start;
            cur.start += 1;
            if newest.is_none() {
                newest = Some((rank, idx));
            }
            oldest_is_tombstone = is_tomb;
            if cur.start < cur.end {
                let input = &inputs[shard_no];
                let next = if is_tomb {
                    input.shard.tombstone_at(cur.start)?
                } else {
                    input.shard.key_at(cur.start)?
                };
                // Replacing the top sifts it down once (cheaper than a pop and a push).
                *top = Reverse((next, rank));
            } else {
                PeekMut::pop(top);
            }
        }
        if let Some((rank, idx)) = newest
            && rank % 2 == 0
        {
            let input = &inputs[rank / 2];
            if !input.tags.get(idx) {
                emit(Merged::Record(input.shard.record_at(idx)?))?;
            }
        }
        if oldest_is_tombstone && !bottom {
            emit(Merged::Tombstone(key))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::dynamized::alias_shard::stats::proptest_config;
    use crate::index::dynamized::isam_shard::IsamShard;
    use crate::index::dynamized::shard::BuildOptions;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    /// A shard over `records` and `tombstones` (any order, duplicates allowed: they are sorted and deduped)
    /// with the records at the positions in `tagged` tagged.
    fn shard(records: &[u64], tombstones: &[u64], tagged: &[usize]) -> (IsamShard, TagBits) {
        let keys: BTreeSet<u64> = records.iter().copied().collect();
        let tombs: BTreeSet<u64> = tombstones.iter().copied().collect();
        let run = SortedRun {
            records: keys
                .iter()
                .map(|&key| Record {
                    key,
                    value: key ^ 0xFF,
                    weight: 1.0,
                })
                .collect(),
            tombstones: tombs.into_iter().collect(),
        };
        let tags = TagBits::new(run.records.len());
        for &i in tagged {
            if i < run.records.len() {
                tags.set(i);
            }
        }
        (
            IsamShard::build(run, BuildOptions::single(false)).unwrap(),
            tags,
        )
    }

    type ShardSpec = (Vec<u64>, Vec<u64>, Vec<usize>);

    fn shard_spec() -> impl Strategy<Value = ShardSpec> {
        (
            prop::collection::vec(0u64..400, 0..120),
            prop::collection::vec(0u64..400, 0..20),
            prop::collection::vec(0usize..120, 0..6),
        )
    }

    proptest! {
        #![proptest_config(proptest_config(64))]

        /// Cut into 2 to 5 key ranges merged on threads of their own, a merge gives exactly the run of the
        /// one-thread merge, whatever the overlap, tags, tombstones and `bottom`.
        #[test]
        fn split_merges_equal_the_one_thread_merge(
            specs in prop::collection::vec(shard_spec(), 1..6),
            bottom in any::<bool>(),
            parts in 2usize..6,
        ) {
            let shards: Vec<(IsamShard, TagBits)> =
                specs.iter().map(|(r, t, g)| shard(r, t, g)).collect();
            let inputs: Vec<MergeInput<'_, IsamShard>> = shards
                .iter()
                .map(|(shard, tags)| MergeInput { shard, tags })
                .collect();
            let one = merge_shards(&inputs, bottom).unwrap();
            prop_assert!(one.is_well_formed());
            let split = merge_shards_split(&inputs, bottom, parts).unwrap();
            prop_assert_eq!(split, one);
        }
    }

    #[test]
    fn a_large_merge_runs_in_parallel_and_agrees() {
        let evens: Vec<u64> = (0..PARALLEL_MERGE_MIN as u64 * 2).map(|i| i * 2).collect();
        let thirds: Vec<u64> = (0..PARALLEL_MERGE_MIN as u64).map(|i| i * 3).collect();
        let tombs: Vec<u64> = (0..1000).map(|i| i * 7 + 1).collect();
        let newer = shard(&thirds, &tombs, &[5, 77, 1234]);
        let older = shard(&evens, &[], &[9]);
        let inputs = [
            MergeInput {
                shard: &newer.0,
                tags: &newer.1,
            },
            MergeInput {
                shard: &older.0,
                tags: &older.1,
            },
        ];
        for bottom in [false, true] {
            let one = merge_shards(&inputs, bottom).unwrap();
            assert_eq!(merge_shards_parallel(&inputs, bottom, 3).unwrap(), one);
            // A key in both inputs is kept once. The newer input's tombstone of 8 (even, not a multiple of
            // 3) cancels the older record with it; its tombstone of 1 has no target in the merge and is
            // kept unless the merge is at the bottom.
            assert_eq!(one.records.iter().filter(|r| r.key == 6).count(), 1);
            assert!(!one.records.iter().any(|r| r.key == 8));
            assert!(!one.tombstones.contains(&8));
            assert_eq!(one.tombstones.contains(&1), !bottom);
        }
    }
}
