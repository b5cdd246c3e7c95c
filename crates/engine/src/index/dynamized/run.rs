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
//! Cost: O(n log m) for n entries over m inputs (a binary heap of cursors); two inputs take a plain two-way
//! merge path.

use super::shard::Shard;
use super::tags::TagBits;
use crate::error::Result;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

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

struct Cursor {
    pos: usize,
    end: usize,
}

/// Merges `inputs` (newest first) into one run; `bottom` says the merge includes the oldest shard of the
/// structure, so surviving tombstones have no target left and are dropped.
pub fn merge_shards<S: Shard>(inputs: &[MergeInput<'_, S>], bottom: bool) -> Result<SortedRun> {
    let total_records: usize = inputs.iter().map(|i| i.shard.len()).sum();
    let total_tombs: usize = inputs.iter().map(|i| i.shard.tombstone_count()).sum();
    let mut out = SortedRun {
        records: Vec::with_capacity(total_records),
        tombstones: Vec::with_capacity(if bottom { 0 } else { total_tombs }),
    };
    merge_shards_with(inputs, bottom, &mut |e| {
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
    let mut cursors: Vec<Cursor> = Vec::with_capacity(inputs.len() * 2);
    let mut heap: BinaryHeap<HeapItem> = BinaryHeap::with_capacity(inputs.len() * 2);
    for (i, input) in inputs.iter().enumerate() {
        cursors.push(Cursor {
            pos: 0,
            end: input.shard.len(),
        });
        cursors.push(Cursor {
            pos: 0,
            end: input.shard.tombstone_count(),
        });
        if input.shard.len() > 0 {
            heap.push(Reverse((input.shard.key_at(0)?, 2 * i)));
        }
        if input.shard.tombstone_count() > 0 {
            heap.push(Reverse((input.shard.tombstone_at(0)?, 2 * i + 1)));
        }
    }
    // Entries of the current key, newest first: (rank, record index or usize::MAX for a tombstone).
    while let Some(Reverse((key, _))) = heap.peek().copied() {
        let mut newest: Option<(usize, usize)> = None;
        let mut oldest_is_tombstone = false;
        while let Some(&Reverse((k, rank))) = heap.peek() {
            if k != key {
                break;
            }
            heap.pop();
            let shard_no = rank / 2;
            let is_tomb = rank % 2 == 1;
            let cur = &mut cursors[rank];
            let idx = cur.pos;
            cur.pos += 1;
            if newest.is_none() {
                newest = Some((rank, idx));
            }
            oldest_is_tombstone = is_tomb;
            if cur.pos < cur.end {
                let input = &inputs[shard_no];
                let next = if is_tomb {
                    input.shard.tombstone_at(cur.pos)?
                } else {
                    input.shard.key_at(cur.pos)?
                };
                heap.push(Reverse((next, rank)));
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
