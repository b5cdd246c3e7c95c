//! Queries over a pinned version: point lookup, exact range count, ordered scans, and sampling through the
//! [`SamplingQuery`] trait.
//!
//! ## Sampling (the decomposable-sampling scheme of the framework)
//! 1. *Preprocess*: each shard turns the query into an index interval of candidates and their weight
//!    ([`SamplingQuery::shard_candidates`]); the buffers are filtered to their live candidates
//!    ([`SamplingQuery::buffer_weight`]) — a buffer is small, so this costs less than rejecting draws there.
//! 2. *Distribute*: an alias table over the per-source weights picks the source of every draw.
//! 3. *Local query*: a draw inside the chosen shard's interval ([`SamplingQuery::draw`], by default the
//!    shard's own weighted or uniform draw).
//! 4. *Reject* a draw whose record is tagged, overwritten by a buffered write, or tombstoned in a newer
//!    shard (Bloom filters skip most shards), or that the query refuses ([`SamplingQuery::accept`]).
//! 5. *Repeat* for the rejected draws until k are accepted. If rejections pile up (more than
//!    `64 · (k + 64)`), the query falls back to enumerating the live candidates and drawing among them, so
//!    a range whose records are nearly all deleted still answers, correctly, in bounded time.
//!
//! Accepted draws are independent and, given the record, distributed exactly as the query's weights:
//! each draw picks a candidate with probability ∝ its weight among *all* candidates, and rejection removes
//! the dead ones without changing the ratios among live ones.

use super::buffer::{BufferEntry, OpKind};
use super::core::Dynamized;
use super::run::Record;
use super::shard::{Drawer, Shard, unit_f64};
use super::version::{ShardSlot, Version};
use crate::algo::alias::AliasTable;
use crate::error::Result;
use crate::index::Direction;
use rand::RngCore;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// A sampling query the framework can answer over any shard type.
pub trait SamplingQuery<S: Shard>: Sync {
    /// Inclusive key bounds of the candidates.
    fn key_bounds(&self) -> (u64, u64);
    /// Per-shard preprocessing: the candidates' index interval `lo..hi` and their total weight.
    fn shard_candidates(&self, shard: &S) -> Result<(usize, usize, f64)> {
        let (lo, hi) = self.key_bounds();
        let a = shard.lower_bound(lo)?;
        let b = shard.upper_bound(hi)?;
        Ok((a, b, shard.range_weight(a, b)?))
    }
    /// The weight of a live buffered record if it is a candidate.
    fn buffer_weight(&self, e: &BufferEntry) -> Option<f64>;
    /// Local query: a drawer of candidate indexes of `lo..hi` (non-empty, positive weight), built once per
    /// query and shard (by default the shard's own weighted drawer).
    fn drawer<'a>(&self, shard: &'a S, lo: usize, hi: usize) -> Result<Drawer<'a>> {
        shard.drawer(lo, hi)
    }
    /// A query-specific rejection test for a drawn live record (e.g. for shards whose candidate intervals
    /// over-approximate the range).
    fn accept(&self, rec: &Record) -> bool {
        let (lo, hi) = self.key_bounds();
        (lo..=hi).contains(&rec.key)
    }
    /// The weight of a live record when candidates are enumerated (the fallback path).
    fn record_weight(&self, rec: &Record) -> f64;
}

/// Independent range sampling: uniform over the live records with keys in `[lo, hi]`.
#[derive(Debug, Clone, Copy)]
pub struct RangeSample {
    pub lo: u64,
    pub hi: u64,
}

impl<S: Shard> SamplingQuery<S> for RangeSample {
    fn key_bounds(&self) -> (u64, u64) {
        (self.lo, self.hi)
    }
    fn shard_candidates(&self, shard: &S) -> Result<(usize, usize, f64)> {
        let a = shard.lower_bound(self.lo)?;
        let b = shard.upper_bound(self.hi)?;
        Ok((a, b, b.saturating_sub(a) as f64))
    }
    fn buffer_weight(&self, e: &BufferEntry) -> Option<f64> {
        (self.lo..=self.hi).contains(&e.key).then_some(1.0)
    }
    fn drawer<'a>(&self, _shard: &'a S, lo: usize, hi: usize) -> Result<Drawer<'a>> {
        let n = (hi - lo) as u64;
        Ok(Box::new(move |rng| {
            Ok(lo + super::shard::uniform_below(rng, n) as usize)
        }))
    }
    fn record_weight(&self, _rec: &Record) -> f64 {
        1.0
    }
}

/// Weighted range sampling: live records with keys in `[lo, hi]`, each with probability ∝ its weight.
/// Over the whole key space it is weighted set sampling.
#[derive(Debug, Clone, Copy)]
pub struct WeightedRangeSample {
    pub lo: u64,
    pub hi: u64,
}

impl WeightedRangeSample {
    /// Weighted set sampling: every live record.
    pub fn whole_set() -> Self {
        WeightedRangeSample {
            lo: 0,
            hi: u64::MAX,
        }
    }
}

impl<S: Shard> SamplingQuery<S> for WeightedRangeSample {
    fn key_bounds(&self) -> (u64, u64) {
        (self.lo, self.hi)
    }
    fn buffer_weight(&self, e: &BufferEntry) -> Option<f64> {
        ((self.lo..=self.hi).contains(&e.key) && e.weight > 0.0).then_some(e.weight)
    }
    fn record_weight(&self, rec: &Record) -> f64 {
        rec.weight
    }
}

/// Above this many buffered keys in a query's range, "is this key buffered?" asks the buffers' key index
/// instead of a sorted list.
const WIDE_SHADOW: usize = 64;

/// Up to this many tombstones in a query's range are gathered into one sorted list for the rejection check.
const RANGE_TOMBSTONES: usize = 4096;

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

    /// `k` independent draws of `query`, appended to `out`; nothing when it has no live candidate.
    pub fn sample<Q: SamplingQuery<S>>(
        &self,
        query: &Q,
        k: usize,
        rng: &mut dyn RngCore,
        out: &mut Vec<Record>,
    ) -> Result<()> {
        if k == 0 {
            return Ok(());
        }
        let (lo, hi) = query.key_bounds();
        if lo > hi {
            return Ok(());
        }
        let v = self.version();
        // Preprocess the buffers: their keys in range (any operation: a shard record with such a key is
        // overridden), and their live candidates (the newest operation on the key is a put in this buffer).
        // Buffered slots in range are candidates by their weight, live or not: a draw that lands on a dead
        // slot (overridden in its buffer or by a newer one, or a delete) is rejected like a dead shard record,
        // so preprocessing is one pass over the keys with no hash probes. Their keys also override shard
        // records: a short sorted list of them answers that check for narrow ranges, the buffers' key index
        // for wide ones.
        let mut shadow: Vec<u64> = Vec::new();
        let mut buffer_cands: Vec<(usize, usize)> = Vec::new();
        let mut buffer_prefix: Vec<f64> = Vec::new();
        let mut buffer_total = 0.0;
        let span = hi - lo;
        for (b, buf) in v.buffers.iter().enumerate() {
            for (i, &key) in buf.published_keys().iter().enumerate() {
                if key.wrapping_sub(lo) > span {
                    continue;
                }
                shadow.push(key);
                let Some(w) = query.buffer_weight(&buf.entry(i)) else {
                    continue;
                };
                buffer_total += w;
                buffer_prefix.push(buffer_total);
                buffer_cands.push((b, i));
            }
        }
        let wide = shadow.len() > WIDE_SHADOW;
        if wide {
            shadow = Vec::new();
        } else {
            shadow.sort_unstable();
            shadow.dedup();
        }
        let buffered = |key: u64| {
            if wide {
                v.buffers.iter().any(|b| b.contains(key))
            } else {
                shadow.binary_search(&key).is_ok()
            }
        };
        let shards: Vec<&Arc<ShardSlot<S>>> = v.shards_newest_first().collect();
        let with_tombstones: Vec<usize> = (0..shards.len())
            .filter(|&p| shards[p].has_tombstones())
            .collect();
        // The tombstones in range, gathered once (sorted by key, with their shard position) when they are
        // few, so that a draw's tombstone check is a search in a small cached list instead of a Bloom probe
        // per newer shard; wide ranges keep the probes.
        let mut in_range = Vec::with_capacity(with_tombstones.len());
        let mut tombs_in_range = 0;
        for &q in &with_tombstones {
            let s = &shards[q].shard;
            let (a, b) = (tombstone_lower_bound(s, lo)?, tombstone_upper_bound(s, hi)?);
            tombs_in_range += b - a;
            in_range.push((q, a, b));
        }
        let range_tombs: Option<Vec<(u64, usize)>> = if tombs_in_range <= RANGE_TOMBSTONES {
            let mut list = Vec::with_capacity(tombs_in_range);
            for (q, a, b) in in_range {
                for j in a..b {
                    list.push((shards[q].shard.tombstone_at(j)?, q));
                }
            }
            list.sort_unstable();
            Some(list)
        } else {
            None
        };
        let tombstoned = |p: usize, key: u64| -> Result<bool> {
            match &range_tombs {
                Some(list) => {
                    let first = list.partition_point(|&(k, _)| k < key);
                    Ok(list[first..]
                        .iter()
                        .take_while(|&&(k, _)| k == key)
                        .any(|&(_, q)| q < p))
                }
                None => tombstoned_above(&shards, &with_tombstones, p, key),
            }
        };
        let mut intervals = Vec::with_capacity(shards.len());
        let mut weights = Vec::with_capacity(shards.len() + 1);
        weights.push(buffer_total);
        for slot in &shards {
            let (a, b, w) = query.shard_candidates(&slot.shard)?;
            intervals.push((a, b));
            weights.push(if b > a { w } else { 0.0 });
        }
        if weights.iter().all(|&w| w <= 0.0) {
            return Ok(());
        }
        let alias = AliasTable::new(&weights)?;
        let mut drawers: Vec<Option<Drawer<'_>>> = Vec::with_capacity(shards.len());
        for (slot, (&(a, b), &w)) in shards.iter().zip(intervals.iter().zip(&weights[1..])) {
            drawers.push(if w > 0.0 {
                Some(query.drawer(&slot.shard, a, b)?)
            } else {
                None
            });
        }
        let tagged: Vec<bool> = shards.iter().map(|s| s.tags.count() > 0).collect();
        let rng = &mut RandomWords::new(rng);
        let limit = 64 * (k as u64 + 64);
        let (mut accepted, mut draws, mut rejected) = (0usize, 0u64, 0u64);
        let start = out.len();
        // Rounds: draw the positions of every missing sample first (no record is touched), then fetch and
        // check the records in one tight loop, whose independent loads the CPU overlaps.
        let mut positions: Vec<(usize, usize)> = Vec::with_capacity(k);
        while accepted < k {
            if rejected > limit {
                // Nearly everything drawn is dead: enumerate the live candidates instead.
                self.shared
                    .counters
                    .fallbacks
                    .fetch_add(1, Ordering::Relaxed);
                out.truncate(start);
                self.sample_by_enumeration(query, k, rng, out)?;
                break;
            }
            positions.clear();
            let missing = k - accepted;
            for _ in 0..missing {
                draws += 1;
                let src = alias.sample(rng);
                if src == 0 {
                    let t = unit_f64(rng) * buffer_total;
                    let c = buffer_prefix
                        .partition_point(|&p| p <= t)
                        .min(buffer_cands.len() - 1);
                    let (b, i) = buffer_cands[c];
                    let buf = &v.buffers[b];
                    let key = buf.key(i);
                    if buf.is_live_slot(i) && v.buffers[..b].iter().all(|n| !n.contains(key)) {
                        let e = buf.entry(i);
                        out.push(Record {
                            key,
                            value: e.value,
                            weight: e.weight,
                        });
                        accepted += 1;
                    } else {
                        rejected += 1;
                    }
                } else {
                    let shard = &shards[src - 1].shard;
                    let draw = drawers[src - 1]
                        .as_ref()
                        .expect("the alias only picks shards of positive weight");
                    let i = draw(&mut *rng)?;
                    shard.prefetch(i);
                    positions.push((src - 1, i));
                }
            }
            // Reject a record that is out of the query, tagged, overridden by a buffered operation, or
            // tombstoned in a newer shard.
            for &(p, i) in &positions {
                let slot = shards[p];
                let rec = slot.shard.record_at(i)?;
                let untagged = !tagged[p] || !slot.tags.get(i);
                let live = query.accept(&rec)
                    && untagged
                    && !buffered(rec.key)
                    && !tombstoned(p, rec.key)?;
                if live {
                    out.push(rec);
                    accepted += 1;
                } else {
                    rejected += 1;
                }
            }
        }
        let c = &self.shared.counters;
        c.draws.fetch_add(draws, Ordering::Relaxed);
        c.rejections.fetch_add(rejected, Ordering::Relaxed);
        if draws >= 64 && rejected as f64 > self.shared.opts.max_rejection_rate * draws as f64 {
            self.request_compaction();
        }
        Ok(())
    }

    fn sample_by_enumeration<Q: SamplingQuery<S>>(
        &self,
        query: &Q,
        k: usize,
        rng: &mut dyn RngCore,
        out: &mut Vec<Record>,
    ) -> Result<()> {
        let (lo, hi) = query.key_bounds();
        let mut live: Vec<Record> = Vec::new();
        self.scan(lo, hi, Direction::Forward, usize::MAX, &mut |r| {
            if query.accept(r) && query.record_weight(r) > 0.0 {
                live.push(*r);
            }
            Ok(true)
        })?;
        if live.is_empty() {
            return Ok(());
        }
        let weights: Vec<f64> = live.iter().map(|r| query.record_weight(r)).collect();
        let alias = AliasTable::new(&weights)?;
        for _ in 0..k {
            out.push(live[alias.sample(&mut RngAdapter(rng))]);
        }
        Ok(())
    }
}

/// True if a shard newer than position `p` (positions with tombstones listed in `with_tombstones`, ascending)
/// holds a tombstone for `key`.
fn tombstoned_above<S: Shard>(
    shards: &[&Arc<ShardSlot<S>>],
    with_tombstones: &[usize],
    p: usize,
    key: u64,
) -> Result<bool> {
    for &q in with_tombstones {
        if q >= p {
            break;
        }
        if shards[q].has_tombstone(key)? {
            return Ok(true);
        }
    }
    Ok(false)
}

fn directed(a: usize, b: usize, dir: Direction) -> Cursor {
    let b = b.max(a);
    match dir {
        Direction::Forward => Cursor { pos: a, end: b },
        Direction::Reverse => Cursor { pos: b, end: a },
    }
}

/// Index of the first tombstone ≥ `key`.
fn tombstone_lower_bound<S: Shard>(s: &S, key: u64) -> Result<usize> {
    let (mut lo, mut hi) = (0usize, s.tombstone_count());
    while lo < hi {
        let mid = (lo + hi) / 2;
        if s.tombstone_at(mid)? < key {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    Ok(lo)
}

/// Index of the first tombstone > `key`.
fn tombstone_upper_bound<S: Shard>(s: &S, key: u64) -> Result<usize> {
    match key.checked_add(1) {
        Some(k) => tombstone_lower_bound(s, k),
        None => Ok(s.tombstone_count()),
    }
}

fn tombstones_in<S: Shard>(s: &S, lo: u64, hi: u64) -> Result<usize> {
    Ok(tombstone_upper_bound(s, hi)? - tombstone_lower_bound(s, lo)?)
}

/// Random words drawn in blocks from a `&mut dyn RngCore`: one virtual call per 64 words instead of one
/// per word (a sampling query needs about three words per draw).
struct RandomWords<'a> {
    rng: &'a mut dyn RngCore,
    words: [u64; 64],
    next: usize,
}

impl<'a> RandomWords<'a> {
    fn new(rng: &'a mut dyn RngCore) -> Self {
        RandomWords {
            rng,
            words: [0; 64],
            next: 64,
        }
    }
}

impl RngCore for RandomWords<'_> {
    fn next_u32(&mut self) -> u32 {
        self.next_u64() as u32
    }
    #[inline]
    fn next_u64(&mut self) -> u64 {
        if self.next == self.words.len() {
            let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut self.words);
            self.rng.fill_bytes(bytes);
            self.next = 0;
        }
        let w = self.words[self.next];
        self.next += 1;
        w
    }
    fn fill_bytes(&mut self, dst: &mut [u8]) {
        self.rng.fill_bytes(dst)
    }
}

/// `&mut dyn RngCore` as a sized `Rng` for the alias table.
struct RngAdapter<'a>(&'a mut dyn RngCore);

impl RngCore for RngAdapter<'_> {
    fn next_u32(&mut self) -> u32 {
        self.0.next_u32()
    }
    fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }
    fn fill_bytes(&mut self, dst: &mut [u8]) {
        self.0.fill_bytes(dst)
    }
}
