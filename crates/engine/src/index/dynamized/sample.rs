//! Sampling over a pinned version through the [`SamplingQuery`] trait (the framework's decomposable
//! sampling scheme).
//!
//! 1. *Preprocess*: each shard turns the query into an index interval of candidates
//!    ([`SamplingQuery::shard_interval`]); the buffers' slots in range are gathered with their weights
//!    ([`SamplingQuery::buffer_weight`]) in one vectorised pass over their keys. The keys that can kill a
//!    shard record of the range — buffered keys and tombstones in range — go into one small per-query hash
//!    table (`killers::Killers`) with the newest source holding each.
//! 2. *Distribute*: a draw's source (the buffers or a shard). Under unit weights
//!    ([`SamplingQuery::unit_weights`], e.g. IRS) one uniform word picks a candidate of the concatenated
//!    intervals, source and position at once. Weighted queries with few candidates (at most 8 per sample:
//!    a narrow WIRS range) put all of them, weights read in order, in one guide table (`guide_table`) that
//!    gives the source and position of a draw at once. Otherwise an alias table over the per-source weights
//!    ([`SamplingQuery::interval_weight`]) picks the source and the shard's drawer
//!    ([`SamplingQuery::drawer`]) the position — over a whole shard (weighted set sampling) one draw from
//!    the shard's alias table over all of its records.
//! 3. *Reject* a draw whose record is tagged, killed by a newer source (a buffered operation on its key or
//!    a tombstone in a newer shard), or refused by the query ([`SamplingQuery::accept`]). Ranges with too
//!    many buffered keys for the table ask the buffers' key index; ranges with too many tombstones for it
//!    (e.g. the whole set) probe one cached table over every tombstone of the resident shards, built once
//!    per shard set (`killers::TombstoneCache`), and only shards on disk through their tombstone Bloom
//!    filters.
//! 4. *Repeat* for the rejected draws until k are accepted. If rejections pile up (more than
//!    `64 · (k + 64)`), the query falls back to enumerating the live candidates and drawing among them, so a
//!    range whose records are nearly all deleted still answers, correctly, in bounded time.
//!
//! Accepted draws are independent and, given the record, distributed exactly as the query's weights: each
//! draw picks a candidate with probability ∝ its weight among *all* candidates, and rejection removes the
//! dead ones without changing the ratios among live ones.
//!
//! Cost per query (in memory): O(buffered slots / 8) for the vectorised buffer pass, O(shards · log n) for
//! the intervals, O(killers) for the table (a wide query: O(shards) to find the cached table, whose build
//! costs O(tombstones) once per shard set), O(candidates) for a flat query's guide table, then O(1) expected
//! per draw — one random word, a branch-free count over the ≤ shards + 1 source boundaries (or a flat
//! draw's guide table, or a shard's alias columns), the record's cache lines (prefetched a round ahead)
//! and one table probe — times 1 / (1 − rejection rate).

use super::buffer::BufferEntry;
use super::core::Dynamized;
use super::guide_table::GuideTable;
use super::killers::Killers;
use super::read::{tombstone_lower_bound, tombstone_upper_bound};
use super::run::Record;
use super::sample_io::{BatchedFetch, TombstoneAnswers, warm_disk_bounds};
use super::shard::{DrawStep, Drawer, PendingDraw, Shard, Words, uniform_below, unit_f64};
use super::version::{ShardSlot, Version};
use crate::algo::alias::AliasTable;
use crate::algo::bloom::{BloomFilter, KeyHash};
use crate::error::Result;
use crate::index::Direction;
use rand::RngCore;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// A sampling query the framework can answer over any shard type.
pub trait SamplingQuery<S: Shard>: Sync {
    /// Inclusive key bounds of the candidates.
    fn key_bounds(&self) -> (u64, u64);
    /// Per-shard preprocessing: the candidates' index interval `lo..hi`.
    fn shard_interval(&self, shard: &S) -> Result<(usize, usize)> {
        let (lo, hi) = self.key_bounds();
        Ok((shard.lower_bound(lo)?, shard.upper_bound(hi)?))
    }
    /// The total weight of a shard's candidates `lo..hi` (asked only when draws go through the shard's
    /// drawer: a query drawing among few candidates reads their weights instead).
    fn interval_weight(&self, shard: &S, lo: usize, hi: usize) -> Result<f64> {
        shard.range_weight(lo, hi)
    }
    /// The weight of a live buffered record if it is a candidate.
    fn buffer_weight(&self, e: &BufferEntry) -> Option<f64>;
    /// True when every candidate weighs 1 and the candidates of a shard are exactly its interval: the
    /// framework then draws uniformly over the concatenated intervals (and ignores [`drawer`](Self::drawer)).
    fn unit_weights(&self) -> bool {
        false
    }
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
    fn interval_weight(&self, _shard: &S, lo: usize, hi: usize) -> Result<f64> {
        Ok(hi.saturating_sub(lo) as f64)
    }
    fn buffer_weight(&self, e: &BufferEntry) -> Option<f64> {
        (self.lo..=self.hi).contains(&e.key).then_some(1.0)
    }
    fn unit_weights(&self) -> bool {
        true
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
    /// In range and of positive weight: an alias table's rounding can hand out a weightless outcome with
    /// a vanishing probability, which is then drawn again like a dead record.
    fn accept(&self, rec: &Record) -> bool {
        (self.lo..=self.hi).contains(&rec.key) && rec.weight > 0.0
    }
    fn record_weight(&self, rec: &Record) -> f64 {
        rec.weight
    }
}

/// Above this many buffered keys in a query's range, "is this key buffered?" asks the buffers' key index
/// instead of the killer table.
const WIDE_SHADOW: usize = 1024;

/// Above this many tombstones in a query's range, "is this key tombstoned in a newer shard?" asks the
/// shards' tombstone Bloom filters instead of the killer table.
const RANGE_TOMBSTONES: usize = 4096;

/// A weighted query whose candidates number at most this many per sample (and at least
/// [`MIN_FLAT_SAMPLES`] times this many) draws from one alias table over all of them.
const FLAT_PER_SAMPLE: usize = 8;
const MIN_FLAT_SAMPLES: usize = 64;

/// Keys per step of the vectorised range filter over a buffer's keys.
const KEY_CHUNK: usize = 16;

/// Buffer slots per block of a wide weighted query's buffer candidates (see [`BufferCandidates`]).
const BLOCK: usize = 64;
/// A wide weighted query's buffer candidate `c` is slot `c % BLOCK_STRIDE` of buffer `c / BLOCK_STRIDE`
/// (buffers hold fewer than 2^32 slots).
const BLOCK_STRIDE: usize = 1 << 32;

/// The buffers' slots in a query's range, gathered in one pass.
struct BufferCandidates {
    /// `(buffer, slot)` of each candidate, and the running sum of their weights.
    slots: Vec<(usize, usize)>,
    prefix: Vec<f64>,
    total: f64,
    /// Every key in range (any operation: it overrides shard records), duplicates included; left empty when
    /// there are more than [`WIDE_SHADOW`] (then `wide`), since the killer table does not take them.
    keys: Vec<u64>,
    /// More than [`WIDE_SHADOW`] buffered keys in range: kill checks ask the buffers' key indexes.
    wide: bool,
    /// A wide weighted query (WSS, wide WIRS) lists blocks instead of slots, since few of its draws land in
    /// the buffers (their share of the weight) while a list of every slot costs a pass that writes three
    /// arrays: `(buffer, first slot, end slot)` of each block of [`BLOCK`] published slots with positive
    /// weight, and the running sum of the blocks' weights. A draw picks a block by its weight, then a slot
    /// by a scan of the block; `slots` and `prefix` stay empty.
    blocks: Vec<(usize, usize, usize)>,
    block_prefix: Vec<f64>,
}

impl BufferCandidates {
    /// Buffered slots in range are candidates by their weight, live or not: a draw that lands on a dead
    /// slot (overridden in its buffer or by a newer one, or a delete) is rejected like a dead shard record,
    /// so preprocessing needs no hash probes.
    fn gather<S: Shard, Q: SamplingQuery<S>>(v: &Version<S>, query: &Q) -> BufferCandidates {
        let (lo, hi) = query.key_bounds();
        let span = hi - lo;
        // Count first (branch-free, vectorised), so every list is allocated once at its size.
        let keys_of: Vec<&[u64]> = v.buffers.iter().map(|b| b.published_keys()).collect();
        let in_range: usize = keys_of
            .iter()
            .map(|keys| {
                keys.iter()
                    .map(|&k| usize::from(k.wrapping_sub(lo) <= span))
                    .sum::<usize>()
            })
            .sum();
        let wide = in_range > WIDE_SHADOW;
        let blocked = wide && !query.unit_weights();
        let listed = if blocked { 0 } else { in_range };
        let mut out = BufferCandidates {
            slots: Vec::with_capacity(listed),
            prefix: Vec::with_capacity(listed),
            total: 0.0,
            keys: Vec::with_capacity(if wide { 0 } else { in_range }),
            wide,
            blocks: Vec::new(),
            block_prefix: Vec::new(),
        };
        if blocked {
            for (b, (buf, keys)) in v.buffers.iter().zip(&keys_of).enumerate() {
                for start in (0..keys.len()).step_by(BLOCK) {
                    let end = (start + BLOCK).min(keys.len());
                    let weight: f64 = (start..end)
                        .filter_map(|i| query.buffer_weight(&buf.entry(i)))
                        .sum();
                    if weight > 0.0 {
                        out.total += weight;
                        out.blocks.push((b, start, end));
                        out.block_prefix.push(out.total);
                    }
                }
            }
            return out;
        }
        for (b, (buf, keys)) in v.buffers.iter().zip(&keys_of).enumerate() {
            for (c, chunk) in keys.chunks(KEY_CHUNK).enumerate() {
                // Branch-free over the chunk (vectorised); most chunks of a narrow range hold no key of it.
                if !chunk
                    .iter()
                    .fold(false, |any, &k| any | (k.wrapping_sub(lo) <= span))
                {
                    continue;
                }
                for (j, &key) in chunk.iter().enumerate() {
                    if key.wrapping_sub(lo) > span {
                        continue;
                    }
                    let i = c * KEY_CHUNK + j;
                    if !wide {
                        out.keys.push(key);
                    }
                    if let Some(w) = query.buffer_weight(&buf.entry(i)) {
                        out.total += w;
                        out.prefix.push(out.total);
                        out.slots.push((b, i));
                    }
                }
            }
        }
        out
    }

    /// The candidate whose weight interval holds `t ∈ [0, total)` (rounding can only push the search to
    /// the end: clamped back).
    fn at_weight<S: Shard, Q: SamplingQuery<S>>(&self, v: &Version<S>, query: &Q, t: f64) -> usize {
        if self.blocks.is_empty() {
            return self
                .prefix
                .partition_point(|&p| p <= t)
                .min(self.slots.len() - 1);
        }
        let j = self
            .block_prefix
            .partition_point(|&p| p <= t)
            .min(self.blocks.len() - 1);
        let (b, start, end) = self.blocks[j];
        let buf = &v.buffers[b];
        let local = t - if j == 0 {
            0.0
        } else {
            self.block_prefix[j - 1]
        };
        // The slot whose weight interval in the block holds `local`; rounding can only push past the end:
        // the block's last slot of positive weight then (it has one, or it would not be listed).
        let (mut below, mut last) = (0.0, start);
        for i in start..end {
            if let Some(w) = query.buffer_weight(&buf.entry(i)) {
                below += w;
                last = i;
                if local < below {
                    break;
                }
            }
        }
        b * BLOCK_STRIDE + last
    }

    /// `(buffer, slot)` of buffer candidate `c`.
    #[inline]
    fn slot(&self, c: usize) -> (usize, usize) {
        if self.blocks.is_empty() {
            self.slots[c]
        } else {
            (c / BLOCK_STRIDE, c % BLOCK_STRIDE)
        }
    }

    /// Whether the candidates are listed as blocks (see the field).
    fn blocked(&self) -> bool {
        !self.blocks.is_empty()
    }
}

/// The source and candidate of position `u` in the concatenation of every source's candidates (`ends[s]` =
/// candidates of sources `0..=s`): a buffer candidate's position, or a shard record index.
#[inline]
fn locate(ends: &[u64], intervals: &[(usize, usize)], u: u64) -> (usize, DrawStep) {
    // A branch-free count over the few ends (one per source) instead of a binary search: no dependent
    // loads, and it vectorises.
    let src = ends.iter().map(|&e| usize::from(e <= u)).sum::<usize>();
    let start = if src == 0 { 0 } else { ends[src - 1] };
    let offset = (u - start) as usize;
    if src == 0 {
        (0, DrawStep::Done(offset))
    } else {
        (src, DrawStep::Done(intervals[src - 1].0 + offset))
    }
}

/// A flat draw's candidate: its source (0 = the buffers, `s ≥ 1` = shard position `s − 1`) in the top 16
/// bits, and its index in the source (a buffer candidate or a shard record index) in the other 48: one
/// word per candidate, so a draw finds its record without searching the sources' boundaries.
#[derive(Debug, Clone, Copy)]
struct Place(u64);

impl Place {
    const INDEX_BITS: u32 = 48;
    /// Sources a place can name (the buffers and up to 2^16 − 1 shards).
    const MAX_SOURCES: usize = 1 << 16;

    fn new(src: usize, i: usize) -> Place {
        debug_assert!(src < Self::MAX_SOURCES && (i as u64) < 1 << Self::INDEX_BITS);
        Place(((src as u64) << Self::INDEX_BITS) | i as u64)
    }

    #[inline]
    fn get(self) -> (usize, usize) {
        (
            (self.0 >> Self::INDEX_BITS) as usize,
            (self.0 & ((1 << Self::INDEX_BITS) - 1)) as usize,
        )
    }
}

/// How a draw picks its source (0 = the buffers, `s ≥ 1` = shard position `s − 1`) and its candidate.
enum Distribute<'a> {
    /// Unit weights: a uniform candidate of the concatenated intervals; `ends[s]` = candidates of sources
    /// `0..=s`.
    Uniform { ends: Vec<u64> },
    /// Weighted, with few candidates: one guide table over every candidate of every source (buffer
    /// candidates first, then each shard's interval), and each candidate's place (see [`Place`]).
    Flat {
        table: GuideTable,
        places: Vec<Place>,
    },
    /// An alias table over the sources' weights, then the source's own drawer.
    Weighted {
        alias: AliasTable,
        drawers: Vec<Option<Drawer<'a>>>,
    },
}

impl Distribute<'_> {
    /// One draw: its source, and the candidate's index in the source (a buffer candidate, see
    /// [`BufferCandidates::slot`], or a shard record index), or for a shard of weighted draws the draw's
    /// first step (finished by the shard's drawer, see [`RangeDrawer`]).
    #[inline]
    fn draw<S: Shard, Q: SamplingQuery<S>>(
        &self,
        intervals: &[(usize, usize)],
        buffers: &BufferCandidates,
        (v, query): (&Version<S>, &Q),
        rng: &mut Words<'_>,
    ) -> Result<(usize, DrawStep)> {
        match self {
            Distribute::Uniform { ends } => {
                let u = uniform_below(rng, *ends.last().expect("one end per source"));
                Ok(locate(ends, intervals, u))
            }
            Distribute::Flat { table, places } => {
                let (src, i) = places[table.sample(rng)].get();
                Ok((src, DrawStep::Done(i)))
            }
            Distribute::Weighted { alias, drawers } => {
                let src = alias.sample(rng);
                if src == 0 {
                    return Ok((
                        0,
                        DrawStep::Done(buffers.at_weight(v, query, unit_f64(rng) * buffers.total)),
                    ));
                }
                let drawer = drawers[src - 1]
                    .as_ref()
                    .expect("the alias only picks shards of positive weight");
                Ok((src, drawer.start(rng)?))
            }
        }
    }
}

impl<S: Shard> Dynamized<S> {
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
        let buffers = BufferCandidates::gather(&v, query);
        let shards: Vec<&Arc<ShardSlot<S>>> = v.shards_newest_first().collect();
        warm_disk_bounds(&shards, lo, hi)?;

        // The killers: buffered keys and tombstones in range, unless too many for a small table.
        let wide_buffers = buffers.wide;
        let mut tomb_intervals = Vec::new();
        let mut tombs_in_range = 0;
        for (q, slot) in shards.iter().enumerate() {
            if slot.has_tombstones() {
                let s = &slot.shard;
                let (a, b) = (tombstone_lower_bound(s, lo)?, tombstone_upper_bound(s, hi)?);
                tombs_in_range += b - a;
                tomb_intervals.push((q, a, b));
            }
        }
        let wide_tombs = tombs_in_range > RANGE_TOMBSTONES;
        let mut killers = Killers::with_capacity(
            if wide_buffers { 0 } else { buffers.keys.len() }
                + if wide_tombs { 0 } else { tombs_in_range },
        );
        if !wide_buffers {
            for &key in &buffers.keys {
                killers.insert(key, 0);
            }
        }
        if !wide_tombs {
            for &(q, a, b) in &tomb_intervals {
                for j in a..b {
                    killers.insert(shards[q].shard.tombstone_at(j)?, q as u32 + 1);
                }
            }
        }
        // A range with too many tombstones for a table of its own uses the cached table over every
        // tombstone of the resident shards (built once per shard set); only the tombstones of shards on disk
        // are then asked shard by shard, through their filters.
        let cached = if wide_tombs {
            Some(self.shared.tombstone_cache.get(&shards)?)
        } else {
            None
        };
        let filtered: Vec<(usize, usize, usize)> = match &cached {
            Some(c) => tomb_intervals
                .iter()
                .filter(|(q, _, _)| c.covered.binary_search(q).is_err())
                .copied()
                .collect(),
            None => Vec::new(),
        };
        let probe_filters = !filtered.is_empty();
        // Kill checks outside the query's own table (wide ranges) probe the buffers' key indexes, the cached
        // tombstone table and the tombstone filters of the shards on disk newer than the record's: a round
        // prefetches all of them for every fetched record before checking any, so their cache misses overlap.
        let probes_outside = wide_buffers || wide_tombs;
        let prefetch_kill_checks = |p: usize, key: u64| -> KeyHash {
            if wide_buffers {
                v.buffers.iter().for_each(|b| b.prefetch_key(key));
            }
            if let Some(c) = &cached {
                c.table.prefetch(key);
            }
            if !probe_filters {
                return KeyHash::default();
            }
            let hash = BloomFilter::hash(&key.to_be_bytes());
            tombstone_shards_above(&filtered, p).for_each(|q| {
                shards[q].prefetch_tombstone(hash);
            });
            hash
        };
        let killed =
            |p: usize, key: u64, hash: KeyHash, known: &TombstoneAnswers| -> Result<bool> {
                if killers.kills(key, p)
                    || cached.as_ref().is_some_and(|c| c.table.kills(key, p))
                    || (wide_buffers && v.buffers.iter().any(|b| b.contains(key)))
                {
                    return Ok(true);
                }
                for q in tombstone_shards_above(&filtered, p) {
                    let dead = match known.answer(q, key) {
                        Some(dead) => dead,
                        None => shards[q].has_tombstone_hashed(key, hash)?,
                    };
                    if dead {
                        return Ok(true);
                    }
                }
                Ok(false)
            };
        let mut known = TombstoneAnswers::default();

        // The candidates of every source and how draws are distributed among them.
        let mut intervals = Vec::with_capacity(shards.len());
        for slot in &shards {
            intervals.push(query.shard_interval(&slot.shard)?);
        }
        let mut ends = Vec::with_capacity(shards.len() + 1);
        let mut end = buffers.slots.len() as u64;
        ends.push(end);
        for &(a, b) in &intervals {
            end += b.saturating_sub(a) as u64;
            ends.push(end);
        }
        let distribute = if query.unit_weights() {
            if end == 0 {
                return Ok(());
            }
            Distribute::Uniform { ends }
        } else if !buffers.blocked()
            && end <= (FLAT_PER_SAMPLE * k.max(MIN_FLAT_SAMPLES)) as u64
            && shards.len() < Place::MAX_SOURCES
        {
            // Few candidates for the draws: one guide table over all of them (their weights read in order)
            // costs less to build than the shards' drawers, and each draw then reads cached lines only.
            let mut all = Vec::with_capacity(end as usize);
            let mut places = Vec::with_capacity(end as usize);
            let mut below = 0.0;
            for (c, &p) in buffers.prefix.iter().enumerate() {
                all.push(p - below);
                places.push(Place::new(0, c));
                below = p;
            }
            for (q, (slot, &(a, b))) in shards.iter().zip(&intervals).enumerate() {
                if b > a {
                    slot.shard.extend_weights(a, b, &mut all)?;
                    places.extend((a..b).map(|i| Place::new(q + 1, i)));
                }
            }
            if !all.iter().any(|&w| w > 0.0) {
                return Ok(());
            }
            let table = GuideTable::new(all)?;
            Distribute::Flat { table, places }
        } else {
            let mut weights = Vec::with_capacity(shards.len() + 1);
            weights.push(buffers.total);
            for (slot, &(a, b)) in shards.iter().zip(&intervals) {
                weights.push(if b > a {
                    query.interval_weight(&slot.shard, a, b)?
                } else {
                    0.0
                });
            }
            if weights.iter().all(|&w| w <= 0.0) {
                return Ok(());
            }
            let mut drawers = Vec::with_capacity(shards.len());
            for (slot, (&(a, b), &w)) in shards.iter().zip(intervals.iter().zip(&weights[1..])) {
                drawers.push(if w > 0.0 {
                    Some(query.drawer(&slot.shard, a, b)?)
                } else {
                    None
                });
            }
            Distribute::Weighted {
                alias: AliasTable::new(&weights)?,
                drawers,
            }
        };

        let tagged: Vec<bool> = shards.iter().map(|s| s.tags.count() > 0).collect();
        let in_batches: Vec<bool> = shards
            .iter()
            .map(|s| s.shard.fetches_in_batches())
            .collect();
        let any_batched = in_batches.contains(&true);
        // The share of the candidates expected dead: a tombstone in range kills at most one of them, and a
        // shard's tags are spread over its records.
        let dead_share = {
            let candidates = end as f64;
            let tagged_in_range: f64 = shards
                .iter()
                .zip(&intervals)
                .map(|(s, &(a, b))| {
                    s.tags.count() as f64 * b.saturating_sub(a) as f64 / s.shard.len().max(1) as f64
                })
                .sum();
            (tombs_in_range as f64 + tagged_in_range) / candidates.max(1.0)
        };
        let mut batched = BatchedFetch::new(&in_batches);
        let rng = &mut Words::new(rng);
        let limit = 64 * (k as u64 + 64);
        let (mut accepted, mut draws, mut rejected) = (0usize, 0u64, 0u64);
        let start = out.len();
        // Rounds: draw the positions of every missing sample first (no record is touched, but each is
        // prefetched), then fetch and check the records in one tight loop whose loads have arrived.
        let mut positions: Vec<(usize, usize)> = Vec::with_capacity(k);
        let mut fetched: Vec<(usize, usize, Record, KeyHash)> = Vec::with_capacity(k);
        let mut pending: Vec<(usize, PendingDraw)> = Vec::new();
        // The round's buffer draws, each with the number of shard draws before it (draw order).
        let mut from_buffers: Vec<(usize, Option<Record>)> = Vec::new();
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
            pending.clear();
            from_buffers.clear();
            let round = if any_batched {
                disk_round_draws(k - accepted, dead_share)
            } else {
                k - accepted
            };
            for _ in 0..round {
                draws += 1;
                match distribute.draw(&intervals, &buffers, (&v, query), rng)? {
                    (0, DrawStep::Done(c)) => {
                        from_buffers.push((positions.len(), buffered_draw(&v, &buffers, c)));
                    }
                    (src, DrawStep::Done(i)) => {
                        shards[src - 1].shard.prefetch(i);
                        positions.push((src - 1, i));
                    }
                    (src, DrawStep::Pending(p)) => {
                        pending.push((positions.len(), p));
                        positions.push((src - 1, usize::MAX));
                    }
                }
            }
            // Weighted draws that wait on a cache line go one stage further per pass, so the misses of all
            // of them overlap.
            while !pending.is_empty() {
                let Distribute::Weighted { drawers, .. } = &distribute else {
                    break;
                };
                let mut still = 0;
                for j in 0..pending.len() {
                    let (at, p) = pending[j];
                    let src = positions[at].0;
                    let drawer = drawers[src].as_ref().expect("a pending draw has a drawer");
                    match drawer.advance(p, rng)? {
                        DrawStep::Done(i) => {
                            shards[src].shard.prefetch(i);
                            positions[at].1 = i;
                        }
                        DrawStep::Pending(next) => {
                            pending[still] = (at, next);
                            still += 1;
                        }
                    }
                }
                pending.truncate(still);
            }
            // Shards on disk fetch the round's records of each as one batch of page reads first.
            if any_batched {
                batched.fetch(&shards, &positions)?;
            }
            // Fetch the records (their lines have arrived) and prefetch what their kill checks read.
            fetched.clear();
            for (j, &(p, i)) in positions.iter().enumerate() {
                let rec = if in_batches[p] {
                    batched.records[j]
                } else {
                    shards[p].shard.record_at(i)?
                };
                let hash = if probes_outside {
                    prefetch_kill_checks(p, rec.key)
                } else {
                    KeyHash::default()
                };
                fetched.push((p, i, rec, hash));
            }
            // Tombstone checks in shards on disk: the round's keys that their filters let through, one batch
            // of page reads per shard.
            if probe_filters && any_batched {
                known.batch(&shards, &in_batches, &filtered, &fetched)?;
            }
            // The round's draws in draw order; once k are accepted the rest of the round is dropped
            // unexamined (the first k accepted of independent draws are independent draws of the live
            // candidates).
            let mut buffered = from_buffers.iter().peekable();
            for j in 0..=fetched.len() {
                while let Some(&(_, rec)) = buffered.next_if(|&&(before, _)| before == j) {
                    if accepted == k {
                        draws -= 1;
                    } else if let Some(rec) = rec {
                        out.push(rec);
                        accepted += 1;
                    } else {
                        rejected += 1;
                    }
                }
                let Some(&(p, i, rec, hash)) = fetched.get(j) else {
                    break;
                };
                if accepted == k {
                    draws -= 1;
                    continue;
                }
                let slot = shards[p];
                let live = query.accept(&rec)
                    && (!tagged[p] || !slot.tags.get(i))
                    && !killed(p, rec.key, hash, &known)?;
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

/// Draws of a round that has `missing` samples to find when some shards are on disk: enough that the
/// round very likely finds them all despite rejections — `missing / (1 − r)` at the expected share of dead
/// candidates `r` (taken at most ½), plus two standard deviations and 4 — since a further round would wait
/// for another batch of page reads (and re-read pages the first one read, which are not cached). A function
/// of the query and the version only, so a seeded query draws the same whatever ran before. Rounds in
/// memory draw exactly `missing`.
fn disk_round_draws(missing: usize, dead_share: f64) -> usize {
    let rate = dead_share.clamp(0.0, 0.5);
    let expected = missing as f64 / (1.0 - rate);
    (expected + 2.0 * expected.sqrt()).ceil() as usize + 4
}

/// The record of buffer candidate `c` if it is live: the newest operation on its key in its buffer, a put,
/// and no newer buffer holds the key.
fn buffered_draw<S>(v: &Version<S>, buffers: &BufferCandidates, c: usize) -> Option<Record> {
    let (b, i) = buffers.slot(c);
    let buf = &v.buffers[b];
    let key = buf.key(i);
    (buf.is_live_slot(i) && v.buffers[..b].iter().all(|n| !n.contains(key))).then(|| {
        let e = buf.entry(i);
        Record {
            key,
            value: e.value,
            weight: e.weight,
        }
    })
}

/// The positions of the shards newer than position `p` that have tombstones; `tomb_intervals` lists the
/// shards with tombstones, `(position, ..)` in ascending position.
fn tombstone_shards_above(
    tomb_intervals: &[(usize, usize, usize)],
    p: usize,
) -> impl Iterator<Item = usize> + '_ {
    tomb_intervals
        .iter()
        .map(|&(q, _, _)| q)
        .take_while(move |&q| q < p)
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
