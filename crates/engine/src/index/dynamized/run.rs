//! Records, sorted runs, and the merge rule that cancels deleted and overwritten versions.
//!
//! A [`SortedRun`] is what every shard is built from: records with unique ascending keys and tombstones with
//! unique ascending keys. Inside one shard a record is *newer* than a tombstone of the same key: the tombstone
//! deletes the live version of its key in an *older* shard (the tombstone ordering invariant), the record is
//! the key's current value.
//!
//! [`merge_shards_into_columns`] merges shards given newest first. For each key it looks at the entries newest to oldest:
//! * the key keeps a record iff its newest entry is an untagged record (a tag or a tombstone means deleted);
//! * the key keeps a tombstone iff its oldest entry is a tombstone and the merge does not include the oldest
//!   shard of the structure (`bottom`): such a tombstone still has a target below the merged shards. A key
//!   whose oldest entry is a record needs none: when that record arrived, an older live version would have
//!   been tombstoned in the same shard, so there is nothing older.
//!
//! Cost: O(n log m) for n entries over m inputs (a loser tree over the inputs' record and tombstone
//! streams, `algo::loser_tree`). A large merge is split by key range over several threads: the same output,
//! in about 1/t of the time on t cores. The merges into a record vector (`merge_shards` and its split and
//! parallel forms) are the tests' reference for the column merge.

use super::column_run::ColumnRun;
use super::shard::Shard;
use super::tags::TagBits;
use crate::algo::bloom::BloomFilter;
use crate::algo::loser_tree::{EXHAUSTED, LoserTree};
use crate::algo::on_threads;
use crate::error::Result;
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
#[cfg(test)]
pub fn merge_shards<S: Shard>(inputs: &[MergeInput<'_, S>], bottom: bool) -> Result<SortedRun> {
    merge_ranges(inputs, &whole_ranges(inputs), bottom)
}

/// [`merge_shards`] on up to `threads` threads: the key space is cut at quantiles of the largest input and
/// each part is merged on its own thread (the merge rule looks at one key at a time, so parts are
/// independent); the parts' runs are then concatenated. Small merges stay on the calling thread.
#[cfg(test)]
pub fn merge_shards_parallel<S: Shard>(
    inputs: &[MergeInput<'_, S>],
    bottom: bool,
    threads: usize,
) -> Result<SortedRun> {
    merge_shards_split(inputs, bottom, merge_parts(inputs, threads))
}

/// How many key ranges a merge of `inputs` on up to `threads` threads is cut into: one below
/// [`PARALLEL_MERGE_MIN`] entries per part.
fn merge_parts<S: Shard>(inputs: &[MergeInput<'_, S>], threads: usize) -> usize {
    let total: usize = inputs
        .iter()
        .map(|i| i.shard.len() + i.shard.tombstone_count())
        .sum();
    threads.min(total / PARALLEL_MERGE_MIN).max(1)
}

/// The merge of [`merge_shards_parallel`] cut into `parts` key ranges (fewer when the largest input has
/// too few distinct keys to cut at), each merged on its own thread.
#[cfg(test)]
fn merge_shards_split<S: Shard>(
    inputs: &[MergeInput<'_, S>],
    bottom: bool,
    parts: usize,
) -> Result<SortedRun> {
    let ranges = split_ranges(inputs, parts)?;
    if ranges.len() <= 1 {
        return merge_shards(inputs, bottom);
    }
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

/// The inputs' entries cut into up to `parts` key ranges at quantiles of the largest input (fewer when it
/// has too few distinct keys to cut at): per part, the range of each input. One part (the whole inputs)
/// when `parts` ≤ 1.
fn split_ranges<S: Shard>(
    inputs: &[MergeInput<'_, S>],
    parts: usize,
) -> Result<Vec<Vec<InputRange>>> {
    let Some(largest) = inputs.iter().max_by_key(|i| i.shard.len()) else {
        return Ok(vec![Vec::new()]);
    };
    if parts <= 1 || largest.shard.len() < parts {
        return Ok(vec![whole_ranges(inputs)]);
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
    Ok((0..=pivots.len())
        .map(|j| {
            cuts.iter()
                .map(|at| InputRange {
                    records: at[j].0..at[j + 1].0,
                    tombstones: at[j].1..at[j + 1].1,
                })
                .collect()
        })
        .collect())
}

/// The merge of `inputs` (newest first; `bottom`: the merge includes the oldest shard of the structure, so
/// surviving tombstones have no target left and are dropped) straight into columns (see `column_run`), on
/// up to `threads` threads when large, then every output record's key inserted into `key_filter` in
/// one pass over the key column: no record vector, no copy into the shard's columns. `key_filter` must be
/// sized for the output (the inputs' record count bounds it); records keep their weights only when
/// `weighted`.
pub fn merge_shards_into_columns<S: Shard>(
    inputs: &[MergeInput<'_, S>],
    bottom: bool,
    weighted: bool,
    threads: usize,
    key_filter: &mut BloomFilter,
) -> Result<ColumnRun> {
    let parts = merge_parts(inputs, threads);
    merge_split_into_columns(inputs, bottom, weighted, parts, key_filter)
}

/// [`merge_shards_into_columns`] cut into `parts` key ranges (see [`split_ranges`]), each merged on its
/// own thread into its own filter of the full size.
fn merge_split_into_columns<S: Shard>(
    inputs: &[MergeInput<'_, S>],
    bottom: bool,
    weighted: bool,
    parts: usize,
    key_filter: &mut BloomFilter,
) -> Result<ColumnRun> {
    let ranges = split_ranges(inputs, parts)?;
    if let [only] = ranges.as_slice() {
        return merge_ranges_into_columns(inputs, only, bottom, weighted, key_filter);
    }
    // Each part fills a filter of the full size; their union is the filter over all keys.
    let parts = on_threads(ranges.len(), |j| {
        let mut filter = key_filter.empty_like();
        merge_ranges_into_columns(inputs, &ranges[j], bottom, weighted, &mut filter)
            .map(|run| (run, filter))
    });
    let mut parts = parts.into_iter();
    let (mut out, filter) = parts.next().expect("two parts at least")?;
    key_filter.union_with(&filter)?;
    for part in parts {
        let (run, filter) = part?;
        key_filter.union_with(&filter)?;
        out.append(&run);
    }
    debug_assert!(out.is_well_formed());
    Ok(out)
}

/// The merge of the entries of `inputs` within `ranges` into columns, record keys into `key_filter`.
fn merge_ranges_into_columns<S: Shard>(
    inputs: &[MergeInput<'_, S>],
    ranges: &[InputRange],
    bottom: bool,
    weighted: bool,
    key_filter: &mut BloomFilter,
) -> Result<ColumnRun> {
    let records: usize = ranges.iter().map(|r| r.records.len()).sum();
    let tombstones: usize = ranges.iter().map(|r| r.tombstones.len()).sum();
    let mut out = ColumnRun::with_capacity(records, if bottom { 0 } else { tombstones }, weighted);
    merge_ranges_with(inputs, ranges, bottom, &mut |e| {
        match e {
            Merged::Record(r) => out.push_record(&r),
            Merged::Tombstone(k) => out.tombstones.push(k),
        }
        Ok(())
    })?;
    // A pass of its own over the key column: interleaved with the merge, the filter's cache misses
    // overlapped less (measured 13% slower per entry, `merge_paths_timing`).
    key_filter.insert_hashes(out.keys.iter().map(|&k| BloomFilter::hash_u64(k)));
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
#[cfg(test)]
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

/// The merge of [`merge_shards_into_columns`], handing each output entry to `emit` instead of collecting
/// it: records in ascending key order, tombstones in ascending key order (a key with both gives its record
/// first). A shard factory that writes files streams a merge this way without holding the run in memory.
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
    // The streams with entries, in age order (rank 2·i: records of input i, 2·i + 1: its tombstones),
    // each a leaf of the tree whose head is `key << 64 | leaf`: leaves in rank order, so ties between
    // equal keys go to the newer entry.
    let mut streams: Vec<Stream> = Vec::with_capacity(inputs.len() * 2);
    let mut heads: Vec<u128> = Vec::with_capacity(inputs.len() * 2);
    for (i, (input, range)) in inputs.iter().zip(ranges).enumerate() {
        for (tombstones, at) in [(false, &range.records), (true, &range.tombstones)] {
            if at.is_empty() {
                continue;
            }
            let key = if tombstones {
                input.shard.tombstone_at(at.start)?
            } else {
                input.shard.key_at(at.start)?
            };
            heads.push(head(key, streams.len()));
            streams.push(Stream {
                input: i,
                tombstones,
                at: at.clone(),
            });
        }
    }
    let mut tree = LoserTree::new(heads);
    while tree.top() != EXHAUSTED {
        let key = (tree.top() >> 64) as u64;
        // The key's entries come newest first: the first decides the record, the last the tombstone.
        let mut newest: Option<(usize, usize)> = None;
        let mut oldest_is_tombstone = false;
        loop {
            let top = tree.top();
            if top == EXHAUSTED || (top >> 64) as u64 != key {
                break;
            }
            let leaf = tree.winner();
            let s = &mut streams[leaf];
            let idx = s.at.start;
            s.at.start += 1;
            if newest.is_none() {
                newest = Some((leaf, idx));
            }
            oldest_is_tombstone = s.tombstones;
            let next = if s.at.start < s.at.end {
                let shard = inputs[s.input].shard;
                let next = if s.tombstones {
                    shard.tombstone_at(s.at.start)?
                } else {
                    shard.key_at(s.at.start)?
                };
                head(next, leaf)
            } else {
                EXHAUSTED
            };
            tree.replace_top(next);
        }
        if let Some((leaf, idx)) = newest
            && !streams[leaf].tombstones
        {
            let input = &inputs[streams[leaf].input];
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

/// One stream of a merge: the records or the tombstones of an input, and the part still to read.
struct Stream {
    input: usize,
    tombstones: bool,
    at: Range<usize>,
}

/// The tree head of `key` in leaf `leaf`: ordered by key, then leaf.
#[inline]
fn head(key: u64, leaf: usize) -> u128 {
    (u128::from(key) << 64) | leaf as u128
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

    /// The merge rule of the module doc, key by key over every input's entries, newest first (in a shard
    /// its record before its tombstone).
    fn model_merge(specs: &[ShardSpec], bottom: bool) -> SortedRun {
        let mut entries: std::collections::BTreeMap<u64, Vec<Option<bool>>> = Default::default();
        for (records, tombstones, tagged) in specs {
            let keys: BTreeSet<u64> = records.iter().copied().collect();
            for (i, &key) in keys.iter().enumerate() {
                // Some(tagged) for a record.
                entries
                    .entry(key)
                    .or_default()
                    .push(Some(tagged.contains(&i)));
            }
            for &t in tombstones.iter().collect::<BTreeSet<_>>() {
                entries.entry(t).or_default().push(None);
            }
        }
        let mut out = SortedRun::default();
        for (key, e) in entries {
            if e[0] == Some(false) {
                out.records.push(Record {
                    key,
                    value: key ^ 0xFF,
                    weight: 1.0,
                });
            }
            if e.last() == Some(&None) && !bottom {
                out.tombstones.push(key);
            }
        }
        out
    }

    proptest! {
        #![proptest_config(proptest_config(64))]

        /// The merge follows the rule of the module doc (a model over every key's entries); cut into 1 to
        /// 4 key ranges merged on threads of their own it gives the same run, and so does its columns form,
        /// with a key filter equal to one filled from the output keys afterwards.
        #[test]
        fn merges_follow_the_rule_and_the_column_merge_agrees(
            specs in prop::collection::vec(shard_spec(), 1..8),
            bottom in any::<bool>(),
            parts in 1usize..5,
        ) {
            // Within one shard, a record is newer than its tombstone: the model pushes it first.
            let shards: Vec<(IsamShard, TagBits)> =
                specs.iter().map(|(r, t, g)| shard(r, t, g)).collect();
            let inputs: Vec<MergeInput<'_, IsamShard>> = shards
                .iter()
                .map(|(shard, tags)| MergeInput { shard, tags })
                .collect();
            let run = merge_shards(&inputs, bottom).unwrap();
            prop_assert!(run.is_well_formed());
            prop_assert_eq!(&run, &model_merge(&specs, bottom));
            prop_assert_eq!(&merge_shards_split(&inputs, bottom, parts).unwrap(), &run);
            assert_column_merge_agrees(&inputs, bottom, parts, &run);
        }
    }

    /// The merge into columns cut into `parts` gives `run`'s entries, and a key filter equal to one filled
    /// from `run`'s keys afterwards.
    fn assert_column_merge_agrees(
        inputs: &[MergeInput<'_, IsamShard>],
        bottom: bool,
        parts: usize,
        run: &SortedRun,
    ) {
        let records: usize = inputs.iter().map(|i| i.shard.len()).sum();
        let mut filter = BloomFilter::new(records, 0.01).unwrap();
        let columns = merge_split_into_columns(inputs, bottom, false, parts, &mut filter).unwrap();
        assert_eq!(columns, ColumnRun::from_sorted_run(run.clone(), false));
        let mut expected = BloomFilter::new(records, 0.01).unwrap();
        expected.insert_hashes(run.records.iter().map(|r| BloomFilter::hash_u64(r.key)));
        assert_eq!(filter, expected);
    }

    /// Times a tiering merge of level 2 (six shards of 430,000 random keys, 5% of them tombstones) both
    /// ways, alternating: through a record vector (merge, a filter pass over it, a copy into the shard's
    /// columns) and straight into columns with the filter filled on the way. A measurement, not a check:
    /// `cargo test --release -p strata --lib -- --ignored merge_paths_timing --nocapture`.
    #[test]
    #[ignore]
    fn merge_paths_timing() {
        use crate::index::dynamized::version::filters_for_run;
        use std::time::Instant;
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let shards: Vec<(IsamShard, TagBits)> = (0..6)
            .map(|_| {
                let keys: Vec<u64> = (0..430_000).map(|_| next()).collect();
                let tombs: Vec<u64> = (0..21_500).map(|_| next()).collect();
                shard(&keys, &tombs, &[])
            })
            .collect();
        let inputs: Vec<MergeInput<'_, IsamShard>> = shards
            .iter()
            .map(|(shard, tags)| MergeInput { shard, tags })
            .collect();
        let opts = BuildOptions::single(false);
        let (mut old, mut new) = (Vec::new(), Vec::new());
        for _ in 0..7 {
            let t = Instant::now();
            let run = merge_shards(&inputs, false).unwrap();
            let filters = filters_for_run(&run, 0.01).unwrap();
            let built = IsamShard::build(run, opts).unwrap();
            old.push(t.elapsed().as_secs_f64());
            drop((built, filters));
            let t = Instant::now();
            let records: usize = inputs.iter().map(|i| i.shard.len()).sum();
            let mut filter = BloomFilter::new(records, 0.01).unwrap();
            let run = merge_shards_into_columns(&inputs, false, false, 1, &mut filter).unwrap();
            let built = IsamShard::build_columns(run, opts).unwrap();
            new.push(t.elapsed().as_secs_f64());
            drop((built, filter));
        }
        old.sort_by(f64::total_cmp);
        new.sort_by(f64::total_cmp);
        let per = |t: f64| t * 1e9 / (6.0 * 451_500.0);
        println!(
            "merge of 2.7M entries, median of 7: via records {:.1} ns/entry, into columns {:.1} ns/entry",
            per(old[3]),
            per(new[3])
        );
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
            assert_column_merge_agrees(&inputs, bottom, 3, &one);
            let mut filter = BloomFilter::new(newer.0.len() + older.0.len(), 0.01).unwrap();
            let columns =
                merge_shards_into_columns(&inputs, bottom, false, 3, &mut filter).unwrap();
            assert_eq!(columns, ColumnRun::from_sorted_run(one.clone(), false));
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
