//! Queries over a pinned version that read records in key order: point lookup, exact range count and
//! ordered scans (sampling is in `sample`).
//!
//! Age order decides between versions of a key: buffers (newest first), then shards newest first. A scan
//! merges every source's in-range interval (records and, separately, tombstones) by key and keeps the newest
//! entry of each key; a count adds per-shard interval lengths and corrects them by tags, tombstones and the
//! buffered keys, each of which stands for exactly one dead record.
//!
//! Cost: `get` O(buffers + shards) filter probes and at most a few searches; `count` O(shards · log n) plus
//! the buffered keys in range times the shards; `scan` O(log of the sources) per visited entry.

use super::buffer::{BufferEntry, OpKind};
use super::core::Dynamized;
use super::run::Record;
use super::shard::Shard;
use super::version::{ShardSlot, Version};
use crate::error::Result;
use crate::index::Direction;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// One source of a merged scan, in newest-first rank order.
enum Source<'a, S> {
    /// A buffer's live-or-deleted final operations in range, sorted by key.
    Buffer(Vec<BufferEntry>),
    Records(&'a ShardSlot<S>),
    Tombstones(&'a ShardSlot<S>),
}

struct Cursor {
    /// Next position (forward: ascending from `pos` to `end`; reverse: descending from `pos − 1` to `end`).
    pos: usize,
    end: usize,
}

impl<S: Shard> Dynamized<S> {
    /// The value of `key`, if live.
    pub fn get(&self, key: u64) -> Result<Option<Record>> {
        let v = self.shared.current.load();
        for b in &v.buffers {
            if let Some(e) = b.get(key) {
                return Ok((e.kind == OpKind::Put).then_some(Record {
                    key,
                    value: e.value,
                    weight: e.weight,
                }));
            }
        }
        match v.lookup_shards(key, 0)? {
            Some((slot, i)) => slot.shard.record_at(i).map(Some),
            None => Ok(None),
        }
    }

    /// The final operations of buffer `b` with keys in `[lo, hi]` in one snapshot of the buffer, sorted by key
    /// (a newer buffer may override some).
    fn buffer_ops(v: &Version<S>, b: usize, lo: u64, hi: u64) -> Vec<BufferEntry> {
        // One snapshot of the buffer's length for every lookup, and no look at newer buffers: writers keep
        // appending to the active buffer, and a key that reached it after its snapshot must not hide this
        // buffer's operation on the key (callers resolve keys across buffers by age).
        let buf = &v.buffers[b];
        let len = buf.len();
        let mut out: Vec<BufferEntry> = (0..len)
            .filter(|&i| (lo..=hi).contains(&buf.key(i)))
            .filter(|&i| buf.latest_slot_below(buf.key(i), len) == Some(i))
            .map(|i| buf.entry(i))
            .collect();
        out.sort_unstable_by_key(|e| e.key);
        out
    }

    /// Number of live records with keys in `[lo, hi]`. Exact: every tombstone and every tag stands for one
    /// dead record; buffered writes are resolved against what lies below them.
    pub fn count(&self, lo: u64, hi: u64) -> Result<u64> {
        if lo > hi {
            return Ok(0);
        }
        let v = self.version();
        // Keys with buffered operations in range, newest operation each.
        let mut buffered: Vec<BufferEntry> = Vec::new();
        for b in 0..v.buffers.len() {
            buffered.extend(Self::buffer_ops(&v, b, lo, hi));
        }
        // Newest buffer first, and a stable sort: the first operation of each key is its newest.
        buffered.sort_by_key(|e| e.key);
        buffered.dedup_by_key(|e| e.key);
        // Every tag bit is read once (a reconstruction may set tags while this runs): the same snapshot
        // serves the shard sums and the buffered keys' adjustments.
        let mut total: i64 = 0;
        let mut shard_live = vec![0i64; buffered.len()];
        for slot in v.shards_newest_first() {
            let s = &slot.shard;
            let (a, b) = (s.lower_bound(lo)?, s.upper_bound(hi)?);
            let tags = slot.tags.snapshot(a, b);
            total += (b - a) as i64 - tags.count() as i64;
            if slot.has_tombstones() {
                total -= tombstones_in(s, lo, hi)? as i64;
            }
            for (e, live) in buffered.iter().zip(shard_live.iter_mut()) {
                if slot.may_contain_key(e.key)
                    && let Some(i) = s.find(e.key)?
                {
                    *live += i64::from(!tags.get(i));
                }
                if slot.has_tombstone(e.key)? {
                    *live -= 1;
                }
            }
        }
        // A buffered key is live iff its newest buffered operation is a put; the shard sums counted it as
        // its shard contributions say.
        for (e, live) in buffered.iter().zip(&shard_live) {
            total += i64::from(e.kind == OpKind::Put) - live;
        }
        debug_assert!(total >= 0, "negative count {total}");
        Ok(total.max(0) as u64)
    }

    /// Number of live records.
    pub fn len(&self) -> u64 {
        self.count(0, u64::MAX).unwrap_or(0)
    }

    /// True when no record is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Visits up to `max` live records with keys in `[lo, hi]` in `dir` order until `visit` returns false;
    /// returns how many it visited. The version is pinned for the whole scan.
    pub fn scan(
        &self,
        lo: u64,
        hi: u64,
        dir: Direction,
        max: usize,
        visit: &mut dyn FnMut(&Record) -> Result<bool>,
    ) -> Result<usize> {
        if lo > hi || max == 0 {
            return Ok(0);
        }
        let v = self.version();
        let mut sources: Vec<Source<'_, S>> = Vec::new();
        let mut cursors: Vec<Cursor> = Vec::new();
        for b in 0..v.buffers.len() {
            let ops = Self::buffer_ops(&v, b, lo, hi);
            cursors.push(match dir {
                Direction::Forward => Cursor {
                    pos: 0,
                    end: ops.len(),
                },
                Direction::Reverse => Cursor {
                    pos: ops.len(),
                    end: 0,
                },
            });
            sources.push(Source::Buffer(ops));
        }
        for slot in v.shards_newest_first() {
            let s = &slot.shard;
            let (a, b) = (s.lower_bound(lo)?, s.upper_bound(hi)?);
            cursors.push(directed(a, b, dir));
            sources.push(Source::Records(slot));
            let (ta, tb) = if slot.has_tombstones() {
                (tombstone_lower_bound(s, lo)?, tombstone_upper_bound(s, hi)?)
            } else {
                (0, 0)
            };
            cursors.push(directed(ta, tb, dir));
            sources.push(Source::Tombstones(slot));
        }
        let key_of = |src: &Source<'_, S>, i: usize| -> Result<u64> {
            match src {
                Source::Buffer(ops) => Ok(ops[i].key),
                Source::Records(slot) => slot.shard.key_at(i),
                Source::Tombstones(slot) => slot.shard.tombstone_at(i),
            }
        };
        // Heap of (key in direction order, rank); rank = source index, smaller = newer.
        let ordered = |k: u64| match dir {
            Direction::Forward => k,
            Direction::Reverse => !k,
        };
        let mut heap: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
        let peek_pos = |c: &Cursor| match dir {
            Direction::Forward => (c.pos < c.end).then_some(c.pos),
            Direction::Reverse => (c.pos > c.end).then(|| c.pos - 1),
        };
        for (r, c) in cursors.iter().enumerate() {
            if let Some(i) = peek_pos(c) {
                heap.push(Reverse((ordered(key_of(&sources[r], i)?), r)));
            }
        }
        let mut visited = 0;
        while let Some(Reverse((okey, _))) = heap.peek().copied() {
            let mut newest: Option<(usize, usize)> = None;
            while let Some(&Reverse((k, r))) = heap.peek() {
                if k != okey {
                    break;
                }
                heap.pop();
                let c = &mut cursors[r];
                let i = peek_pos(c).expect("a queued cursor has an entry");
                match dir {
                    Direction::Forward => c.pos += 1,
                    Direction::Reverse => c.pos -= 1,
                }
                newest.get_or_insert((r, i));
                if let Some(j) = peek_pos(&cursors[r]) {
                    heap.push(Reverse((ordered(key_of(&sources[r], j)?), r)));
                }
            }
            let Some((r, i)) = newest else { break };
            let rec = match &sources[r] {
                Source::Buffer(ops) if ops[i].kind == OpKind::Put => Some(Record {
                    key: ops[i].key,
                    value: ops[i].value,
                    weight: ops[i].weight,
                }),
                Source::Records(slot) if !slot.tags.get(i) => Some(slot.shard.record_at(i)?),
                _ => None,
            };
            if let Some(rec) = rec {
                visited += 1;
                if !visit(&rec)? || visited >= max {
                    break;
                }
            }
        }
        Ok(visited)
    }
}

fn directed(a: usize, b: usize, dir: Direction) -> Cursor {
    let b = b.max(a);
    match dir {
        Direction::Forward => Cursor { pos: a, end: b },
        Direction::Reverse => Cursor { pos: b, end: a },
    }
}

/// Index of the first tombstone ≥ `key`.
pub(super) fn tombstone_lower_bound<S: Shard>(s: &S, key: u64) -> Result<usize> {
    s.tombstone_lower_bound(key)
}

/// Index of the first tombstone > `key`.
pub(super) fn tombstone_upper_bound<S: Shard>(s: &S, key: u64) -> Result<usize> {
    match key.checked_add(1) {
        Some(k) => tombstone_lower_bound(s, k),
        None => Ok(s.tombstone_count()),
    }
}

fn tombstones_in<S: Shard>(s: &S, lo: u64, hi: u64) -> Result<usize> {
    Ok(tombstone_upper_bound(s, hi)? - tombstone_lower_bound(s, lo)?)
}
