//! The WIRS shard: an alias-augmented tree for weighted independent range sampling ("DE-WIRS" in Rumbaugh &
//! Xie).
//!
//! Records in the sorted columns of `columns` (keys, values, weights, under the ISAM separator index, plus
//! sorted tombstones). On top of the records:
//! * **buckets** ("fat points"): consecutive runs of b = max(1, ⌈ln n⌉) records (the last may be shorter),
//!   each with its total weight and an alias table over its records' weights;
//! * a static **binary tree** over the m = ⌈n / b⌉ buckets in implicit layout, stored level by level:
//!   node `i` of level `h` covers buckets `i·2^h .. min((i+1)·2^h, m)` and keeps its total weight and an
//!   alias table over the totals of *the buckets it covers* (level 0 is the buckets themselves). A node
//!   therefore yields a bucket in O(1) and the bucket a record in O(1);
//! * built on the first draw over the *whole* shard (weighted set sampling) and kept: one alias table over
//!   every record's weight, so a whole-shard draw reads one column (one cache miss) instead of the root's
//!   and then a bucket's.
//!
//! ## A draw in `lo..hi`
//! The index range decomposes into at most 2 · (levels + 1) *pieces*: the partial bucket at each end (records
//! `lo..` up to its bucket's end, and from the last bucket's start `..hi`) and the canonical cover of the full
//! buckets in between (bottom-up: at most two nodes per level). `sample_in` walks the pieces twice — once to
//! total their weights, once to stop at the piece holding a uniform point of that total — and draws inside
//! the piece: a partial bucket by a linear scan of its ≤ b weights, a node by its alias and then the bucket's.
//! `range_weight` is the same first walk, so a draw and its range weight agree exactly. For k draws in one
//! range, [`WirsShard::range_sampler`] does the walk once and builds the paper's per-query top-level alias
//! over the pieces (plus one over each partial bucket), after which every draw is O(1).
//!
//! ## Invariants
//! * Those of `columns` (keys strictly ascending, parallel arrays, weights finite and ≥ 0, tombstones
//!   strictly ascending); the weights are always stored, 1.0 each in unweighted shards.
//! * `levels[0]` has m entries, `levels[h]` has ⌈m / 2^h⌉, the last level has 1 entry (no level when n = 0);
//!   `levels[h].totals[i]` is the sum of its children's totals (of its records' weights at level 0).
//! * A node's or bucket's alias is `Some` iff its total is positive (an all-zero table cannot be built).
//! * A draw never returns a record of weight 0: pieces, buckets and records of weight 0 are never chosen
//!   by the linear scans, and the rare alias outcome that rounding could make weightless is checked and
//!   replaced by an exact linear draw over `lo..hi`.
//!
//! ## Cost model (n records, b = ⌈ln n⌉, m = ⌈n / b⌉ buckets, t tombstones)
//! * Build: O(n) — the bucket tables take O(n), each tree level O(m) and there are ⌈log₂ m⌉ + 1 levels, so
//!   O(m log m) = O(n / ln n · log n) = O(n). Fails on weights that are negative, not finite or sum to
//!   infinity.
//! * Memory: 24 B per record in the columns (key, value, weight) + 12 B per bucket-alias column (= per
//!   record) + 12 B per node-alias column (m per level, ≈ 1.44 n in all since m · log₂ m ≤ n / ln 2) +
//!   per-node fixed parts (a total and a table header, ≈ 2m nodes), ISAM separators (≈ n / 15 keys) and 8 B
//!   per tombstone: about 60 B per record for n ≈ 10⁶.
//! * `lower_bound`/`upper_bound`: O(16 · log₁₆ n); `has_tombstone`: O(log t).
//! * `range_weight(lo, hi)`: O(b + log m) = O(log n).
//! * `sample_in(lo, hi)` (one draw): O(b + log m) = O(log n) — two walks of ≤ 2 log₂ m + 2 pieces, two partial
//!   buckets of < b records, then O(1) alias draws.
//! * `range_sampler(lo, hi)`: O(log n) preprocessing, then O(1) per draw.
//! * `drawer(0, n)` (the whole shard): O(n) once per shard to build its whole-shard alias table (16 B per
//!   record more, counted in `memory_bytes` once built; about 50 ms per 1M records on this class of
//!   machine, paid by the first whole-set query after a merge made the shard), then O(1) per draw.

use super::alias_shard::{pick_linear, weightless_range};
use super::column_run::ColumnRun;
use super::columns::{SortedColumns, column_accessors};
use super::run::SortedRun;
use super::shard::{
    BuildOptions, DrawStep, Drawer, PendingDraw, RangeDrawer, SampleIn, Shard, Words,
    prefetch_line, uniform_below, unit_f64,
};
use crate::algo::alias::{AliasColumn, AliasTable, ColumnPick};
use crate::error::Result;
use rand::RngCore;
use std::ops::ControlFlow;
use std::sync::OnceLock;

/// A static WIRS shard: sorted records, buckets of ⌈ln n⌉ records with alias tables, and a tree of alias
/// tables over the buckets.
#[derive(Debug, Default)]
pub struct WirsShard {
    /// Records (weights always stored) and tombstones.
    columns: SortedColumns,
    /// Records per bucket (≥ 1).
    bucket: usize,
    /// `levels[0]`: the buckets; `levels[h]`: nodes over 2^h buckets each.
    levels: Vec<Level>,
    /// One alias table over every record, built on the first whole-shard drawer (weighted set sampling
    /// draws over whole shards); `None` inside when the shard has no weight.
    whole: OnceLock<Option<WholeAlias>>,
}

/// An alias table over all of a shard's records: a whole-shard draw reads one column, instead of a tree
/// node's column and then a bucket's.
#[derive(Debug)]
struct WholeAlias {
    table: AliasTable,
    /// No column can hand out a record of weight 0 (the usual case): a draw needs no weight check.
    exact: bool,
}

impl WholeAlias {
    fn build(weights: &[f64]) -> Option<WholeAlias> {
        let table = AliasTable::new(weights).ok()?;
        let exact = never_weightless(table.columns(), weights);
        Some(WholeAlias { table, exact })
    }
}

/// True when no column of an alias table over `weights` can hand out an outcome of weight 0: a column's
/// own outcome is reachable when its probability is positive, its alias when the probability is below 1.
fn never_weightless(columns: &[AliasColumn], weights: &[f64]) -> bool {
    columns.iter().enumerate().all(|(c, col)| {
        (col.prob <= 0.0 || weights[c] > 0.0)
            && (col.prob >= 1.0 || weights[col.alias as usize] > 0.0)
    })
}

/// One level of the tree, its nodes' alias tables flattened into one array (no allocation per node, and a
/// column's probability and alias in one cache line).
#[derive(Debug, Default)]
struct Level {
    totals: Vec<f64>,
    /// Node `i`'s alias columns are `columns[i·span .. min((i+1)·span, len)]`, their outcomes local to the
    /// node: at level 0 over the bucket's records (span = records per bucket), above over the totals of the
    /// buckets the node covers (span = 2^h). A node of total 0 has placeholder columns that no draw reads.
    columns: Vec<AliasColumn>,
    span: usize,
}

impl Level {
    fn new(span: usize) -> Level {
        Level {
            span,
            ..Level::default()
        }
    }

    /// Appends node `totals.len()` over `weights` (its records' weights, or its buckets' totals).
    fn push_node(&mut self, weights: &[f64]) -> Result<()> {
        let total: f64 = weights.iter().sum();
        self.totals.push(total);
        if total > 0.0 {
            self.columns
                .extend_from_slice(AliasTable::new(weights)?.columns());
        } else {
            self.columns.extend((0..weights.len()).map(|c| AliasColumn {
                prob: 1.0,
                alias: c as u32,
            }));
        }
        Ok(())
    }

    /// The random part of a draw in node `i` (of positive total): a column of the node and a coin.
    #[inline]
    fn pick<R: RngCore + ?Sized>(&self, i: usize, rng: &mut R) -> ColumnPick {
        let start = i * self.span;
        let len = (start + self.span).min(self.columns.len()) - start;
        ColumnPick {
            column: start + uniform_below(rng, len as u64) as usize,
            coin: unit_f64(rng),
        }
    }

    /// Asks the CPU for the column `pick` reads.
    #[inline]
    fn prefetch(&self, pick: ColumnPick) {
        if let Some(c) = self.columns.get(pick.column) {
            prefetch_line(c);
        }
    }

    /// The outcome (local to node `i`) of the draw whose random part is `pick`.
    #[inline]
    fn resolve(&self, i: usize, pick: ColumnPick) -> usize {
        let c = self.columns[pick.column];
        if pick.coin < c.prob {
            pick.column - i * self.span
        } else {
            c.alias as usize
        }
    }
}

/// A piece of a range's decomposition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Piece {
    /// Records `a..b` of one bucket, drawn by a linear scan.
    Records(usize, usize),
    /// Node `i` of level `h` (level 0: bucket `i`), drawn through its alias tables.
    Node(usize, usize),
}

impl WirsShard {
    /// The sorted keys.
    pub fn keys(&self) -> &[u64] {
        self.columns.keys()
    }

    /// Every record's weight.
    fn weights(&self) -> &[f64] {
        self.columns.weights()
    }

    /// Records per bucket.
    pub fn bucket_size(&self) -> usize {
        self.bucket
    }

    /// Levels of the tree (0 for an empty shard).
    pub fn height(&self) -> usize {
        self.levels.len()
    }

    /// Records `start..end` of bucket `j`.
    fn bucket_span(&self, j: usize) -> (usize, usize) {
        let start = j * self.bucket;
        (start, (start + self.bucket).min(self.columns.len()))
    }

    /// Visits the pieces of `lo..hi` (`lo < hi ≤ len()`) with their weights, in a fixed order, until `f`
    /// breaks.
    fn pieces<B>(
        &self,
        lo: usize,
        hi: usize,
        mut f: impl FnMut(Piece, f64) -> ControlFlow<B>,
    ) -> ControlFlow<B> {
        let records = |a: usize, b: usize| -> (Piece, f64) {
            (Piece::Records(a, b), self.weights()[a..b].iter().sum())
        };
        let node = |h: usize, i: usize| (Piece::Node(h, i), self.levels[h].totals[i]);
        let first = lo / self.bucket;
        let last = (hi - 1) / self.bucket;
        let (first_start, first_end) = self.bucket_span(first);
        let (last_start, last_end) = self.bucket_span(last);
        if first == last {
            let (p, w) = if lo == first_start && hi == first_end {
                node(0, first)
            } else {
                records(lo, hi)
            };
            return f(p, w);
        }
        // Full buckets fa..fc between the partial ends.
        let mut fa = first;
        if lo != first_start {
            let (p, w) = records(lo, first_end);
            f(p, w)?;
            fa += 1;
        }
        let right_partial = hi != last_end;
        let fc = if right_partial { last } else { last + 1 };
        // Canonical cover, bottom-up: an odd left end or an odd right end is a node of its own at this level.
        let (mut l, mut r, mut h) = (fa, fc, 0);
        while l < r {
            if l & 1 == 1 {
                let (p, w) = node(h, l);
                f(p, w)?;
                l += 1;
            }
            if r & 1 == 1 {
                r -= 1;
                let (p, w) = node(h, r);
                f(p, w)?;
            }
            l >>= 1;
            r >>= 1;
            h += 1;
        }
        if right_partial {
            let (p, w) = records(last_start, hi);
            f(p, w)?;
        }
        ControlFlow::Continue(())
    }

    /// Total weight of the pieces of `lo..hi`.
    fn pieces_weight(&self, lo: usize, hi: usize) -> f64 {
        let mut total = 0.0;
        let _ = self.pieces::<()>(lo, hi, |_, w| {
            total += w;
            ControlFlow::Continue(())
        });
        total
    }

    /// A record of bucket `j` by its alias table (`None` if the bucket weighs 0).
    fn draw_in_bucket(&self, j: usize, rng: &mut dyn RngCore) -> Option<usize> {
        let buckets = &self.levels[0];
        if buckets.totals[j] <= 0.0 {
            return None;
        }
        let pick = buckets.pick(j, rng);
        Some(j * self.bucket + buckets.resolve(j, pick))
    }

    /// A record of node `i` of level `h` through its alias tables (`None` only if rounding chose a weightless
    /// bucket).
    fn draw_in_node(&self, h: usize, i: usize, rng: &mut dyn RngCore) -> Option<usize> {
        let j = if h == 0 {
            i
        } else {
            let level = &self.levels[h];
            if level.totals[i] <= 0.0 {
                return None;
            }
            let pick = level.pick(i, rng);
            (i << h) + level.resolve(i, pick)
        };
        self.draw_in_bucket(j, rng)
    }

    /// An exact draw in `lo..hi` by a linear scan: the fallback should an alias table's rounding ever hand
    /// out a weightless record. O(hi − lo).
    fn draw_linear(&self, lo: usize, hi: usize, rng: &mut dyn RngCore) -> Result<usize> {
        let w = &self.weights()[lo..hi];
        pick_linear(w, w.iter().sum(), rng)
            .map(|j| lo + j)
            .ok_or_else(|| weightless_range(Self::NAME, lo, hi))
    }

    /// The draw's record if it is drawable, else an exact linear draw over `lo..hi`.
    fn checked(
        &self,
        drawn: Option<usize>,
        lo: usize,
        hi: usize,
        rng: &mut dyn RngCore,
    ) -> Result<usize> {
        match drawn {
            Some(i) if (lo..hi).contains(&i) && self.weights()[i] > 0.0 => Ok(i),
            _ => self.draw_linear(lo, hi, rng),
        }
    }

    /// Preprocessing for many draws in `lo..hi`: the per-query top-level alias over the range's pieces, after
    /// which each draw is O(1). `None` when the range holds no weight.
    pub fn range_sampler(&self, lo: usize, hi: usize) -> Result<Option<WirsRangeSampler<'_>>> {
        if hi <= lo {
            return Ok(None);
        }
        let mut pieces = Vec::new();
        let mut weights = Vec::new();
        let mut partial = Vec::new();
        let _ = self.pieces::<()>(lo, hi, |p, w| {
            if w > 0.0 {
                pieces.push(p);
                weights.push(w);
            }
            ControlFlow::Continue(())
        });
        if pieces.is_empty() {
            return Ok(None);
        }
        for p in &pieces {
            partial.push(match *p {
                Piece::Records(a, b) => Some(AliasTable::new(&self.weights()[a..b])?),
                Piece::Node(..) => None,
            });
        }
        let top = AliasTable::new(&weights)?;
        Ok(Some(WirsRangeSampler {
            shard: self,
            lo,
            hi,
            pieces,
            top,
            partial,
        }))
    }
}

/// Many weighted draws in one index range of a [`WirsShard`], O(1) each (see [`WirsShard::range_sampler`]).
#[derive(Debug)]
pub struct WirsRangeSampler<'a> {
    shard: &'a WirsShard,
    lo: usize,
    hi: usize,
    /// The range's pieces of positive weight.
    pieces: Vec<Piece>,
    /// Over the pieces' weights.
    top: AliasTable,
    /// Per piece: an alias over a partial bucket's records (`None` for tree nodes).
    partial: Vec<Option<AliasTable>>,
}

/// Stages of a [`WirsRangeSampler`] draw: `CHECK` (record `at` drawn, its weight asked for), `BUCKET` (in
/// bucket `at`, its column asked for), and `NODE + h` (in node `at` of level h ≥ 1, its column asked for).
const CHECK: u32 = 0;
const BUCKET: u32 = 1;
const NODE: u32 = 1;
/// The one stage of a [`WholeDrawer`] draw: its column asked for.
const WHOLE: u32 = u32::MAX;

impl WirsRangeSampler<'_> {
    /// Total weight of the range.
    pub fn total_weight(&self) -> f64 {
        self.top.total_weight()
    }

    /// One record index of the range, drawn with probability ∝ its weight.
    pub fn sample(&self, rng: &mut dyn RngCore) -> Result<usize> {
        self.draw(&mut Words::new(rng))
    }

    /// The draw's record `i` is chosen: ask for its weight (the check reads it, the caller the record).
    fn chosen(&self, i: usize) -> DrawStep {
        if let Some(w) = self.shard.weights().get(i) {
            prefetch_line(w);
        }
        DrawStep::Pending(PendingDraw {
            stage: CHECK,
            at: i,
            pick: ColumnPick::default(),
        })
    }

    /// Enters node `i` of level `h`: picks its column and asks for it. Pieces and alias outcomes of positive
    /// weight lead here; should rounding ever lead into a weightless node, its placeholder columns yield a
    /// record of weight 0, which the `CHECK` stage replaces by an exact draw (so the node's total, another
    /// cache miss, is not read).
    fn enter(&self, h: usize, i: usize, rng: &mut Words<'_>) -> Result<DrawStep> {
        let level = &self.shard.levels[h];
        let pick = level.pick(i, rng);
        level.prefetch(pick);
        Ok(DrawStep::Pending(PendingDraw {
            stage: if h == 0 { BUCKET } else { NODE + h as u32 },
            at: i,
            pick,
        }))
    }
}

impl RangeDrawer for WirsRangeSampler<'_> {
    fn start(&self, rng: &mut Words<'_>) -> Result<DrawStep> {
        let p = self.top.sample(rng);
        match (self.pieces[p], &self.partial[p]) {
            (Piece::Records(a, _), Some(alias)) => Ok(self.chosen(a + alias.sample(rng))),
            (Piece::Node(h, i), _) => self.enter(h, i, rng),
            (Piece::Records(..), None) => Ok(DrawStep::Done(
                self.shard.checked(None, self.lo, self.hi, rng)?,
            )),
        }
    }

    fn advance(&self, pending: PendingDraw, rng: &mut Words<'_>) -> Result<DrawStep> {
        let PendingDraw { stage, at, pick } = pending;
        let shard = self.shard;
        match stage {
            CHECK => Ok(DrawStep::Done(shard.checked(
                Some(at),
                self.lo,
                self.hi,
                rng,
            )?)),
            BUCKET => Ok(self.chosen(at * shard.bucket + shard.levels[0].resolve(at, pick))),
            _ => {
                let h = (stage - NODE) as usize;
                let bucket = (at << h) + shard.levels[h].resolve(at, pick);
                self.enter(0, bucket, rng)
            }
        }
    }
}

/// Draws over a whole shard through its [`WholeAlias`]: a column is picked and asked for (one pending
/// stage), then resolved to the record.
struct WholeDrawer<'a> {
    shard: &'a WirsShard,
    alias: &'a WholeAlias,
}

impl RangeDrawer for WholeDrawer<'_> {
    fn start(&self, rng: &mut Words<'_>) -> Result<DrawStep> {
        let table = &self.alias.table;
        let pick = ColumnPick {
            column: uniform_below(rng, table.len() as u64) as usize,
            coin: unit_f64(rng),
        };
        table.prefetch(pick);
        Ok(DrawStep::Pending(PendingDraw {
            stage: WHOLE,
            at: 0,
            pick,
        }))
    }

    fn advance(&self, pending: PendingDraw, rng: &mut Words<'_>) -> Result<DrawStep> {
        let i = self.alias.table.resolve(pending.pick);
        Ok(DrawStep::Done(if self.alias.exact {
            i
        } else {
            self.shard.checked(Some(i), 0, self.shard.len(), rng)?
        }))
    }
}

impl Shard for WirsShard {
    const NAME: &'static str = "wirs";

    fn build(run: SortedRun, opts: BuildOptions) -> Result<Self> {
        Self::build_columns(ColumnRun::from_sorted_run(run, opts.weighted), opts)
    }

    fn build_columns(run: ColumnRun, opts: BuildOptions) -> Result<Self> {
        let columns: SortedColumns = SortedColumns::from_column_run(run, opts)?;
        let weights = columns.weights();
        let n = columns.len();
        let bucket = ((n as f64).ln().ceil() as usize).max(1);
        let mut levels = Vec::new();
        if n > 0 {
            // Level 0: the buckets.
            let mut base = Level::new(bucket);
            for chunk in weights.chunks(bucket) {
                base.push_node(chunk)?;
            }
            let bucket_totals = base.totals.clone();
            levels.push(base);
            // Level h: nodes over 2^h buckets, each with an alias over the buckets it covers (its total is
            // the sum of its two children's, in the same order as a range's pieces add up).
            let mut h = 0;
            while levels[h].totals.len() > 1 {
                let span = 1usize << (h + 1);
                let mut level = Level::new(span);
                for start in (0..bucket_totals.len()).step_by(span) {
                    let covered = &bucket_totals[start..(start + span).min(bucket_totals.len())];
                    level.push_node(covered)?;
                }
                let below = &levels[h].totals;
                for (t, pair) in level.totals.iter_mut().zip(below.chunks(2)) {
                    *t = pair.iter().sum();
                }
                levels.push(level);
                h += 1;
            }
        }
        if let Some(root) = levels.last()
            && !root.totals[0].is_finite()
        {
            return Err(crate::error::Error::invalid(format!(
                "the weights of a {} shard sum to {}",
                Self::NAME,
                root.totals[0]
            )));
        }
        Ok(WirsShard {
            columns,
            bucket,
            levels,
            whole: OnceLock::new(),
        })
    }

    column_accessors!(columns);

    fn memory_bytes(&self) -> usize {
        let tree: usize = self
            .levels
            .iter()
            .map(|l| {
                l.totals.len() * std::mem::size_of::<f64>()
                    + l.columns.len() * std::mem::size_of::<AliasColumn>()
            })
            .sum();
        let whole = self
            .whole
            .get()
            .and_then(Option::as_ref)
            .map_or(0, |w| w.table.len() * std::mem::size_of::<AliasColumn>());
        self.columns.memory_bytes() + tree + whole
    }

    fn range_weight(&self, lo: usize, hi: usize) -> Result<f64> {
        Ok(if hi <= lo {
            0.0
        } else {
            self.pieces_weight(lo, hi)
        })
    }

    fn drawer(&self, lo: usize, hi: usize) -> Result<Drawer<'_>> {
        if lo == 0 && hi == self.len() && hi > 0 {
            let whole = self.whole.get_or_init(|| WholeAlias::build(self.weights()));
            if let Some(alias) = whole {
                return Ok(Box::new(WholeDrawer { shard: self, alias }));
            }
        }
        Ok(match self.range_sampler(lo, hi)? {
            Some(sampler) => Box::new(sampler),
            None => Box::new(SampleIn {
                shard: self,
                lo,
                hi,
            }),
        })
    }

    fn sample_in(&self, lo: usize, hi: usize, rng: &mut dyn RngCore) -> Result<usize> {
        let total = self.pieces_weight(lo, hi);
        if total <= 0.0 {
            return Err(weightless_range(Self::NAME, lo, hi));
        }
        // The piece where the running sum (same order as `total`) first passes a uniform point of the total;
        // rounding at the very top falls back to the last piece of positive weight.
        let target = unit_f64(rng) * total;
        let mut acc = 0.0;
        let mut last = None;
        let found = self.pieces(lo, hi, |p, w| {
            if w > 0.0 {
                acc += w;
                last = Some((p, w));
                if acc > target {
                    return ControlFlow::Break((p, w));
                }
            }
            ControlFlow::Continue(())
        });
        let chosen = match found {
            ControlFlow::Break(pw) => Some(pw),
            ControlFlow::Continue(()) => last,
        };
        let drawn = match chosen {
            Some((Piece::Records(a, b), w)) => {
                pick_linear(&self.weights()[a..b], w, rng).map(|j| a + j)
            }
            Some((Piece::Node(h, i), _)) => self.draw_in_node(h, i, rng),
            None => None,
        };
        self.checked(drawn, lo, hi, rng)
    }
}

#[cfg(test)]
mod tests {
    use super::super::alias_shard::stats::*;
    use super::super::shard::{DrawStep, RangeDrawer, Words};
    use super::*;
    use crate::index::dynamized::{
        AliasShard, DeletePolicy, DynOptions, Dynamized, Record, RuntimeOptions,
        WeightedRangeSample,
    };
    use proptest::prelude::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;
    use std::collections::BTreeMap;

    fn shard(weights: &[f64]) -> WirsShard {
        WirsShard::build(
            run_of(weights, |i| i as u64 * 3 + 1, &[]),
            BuildOptions::single(true),
        )
        .unwrap()
    }

    /// The pieces of `lo..hi`.
    fn pieces_of(s: &WirsShard, lo: usize, hi: usize) -> Vec<Piece> {
        let mut out = Vec::new();
        let _ = s.pieces::<()>(lo, hi, |p, _| {
            out.push(p);
            ControlFlow::Continue(())
        });
        out
    }

    /// Records `a..b` a piece covers.
    fn span(s: &WirsShard, p: Piece) -> (usize, usize) {
        match p {
            Piece::Records(a, b) => (a, b),
            Piece::Node(h, i) => {
                let m = s.levels[0].totals.len();
                let first = i << h;
                let last = ((i + 1) << h).min(m) - 1;
                (s.bucket_span(first).0, s.bucket_span(last).1)
            }
        }
    }

    #[test]
    fn tree_shape_and_totals() {
        for n in [1usize, 2, 3, 7, 8, 9, 100, 1000, 4099] {
            let w = skewed_weights(n, n as u64);
            let s = shard(&w);
            assert_eq!(s.bucket_size(), ((n as f64).ln().ceil() as usize).max(1));
            let m = n.div_ceil(s.bucket_size());
            assert_eq!(s.levels[0].totals.len(), m);
            assert_eq!(s.levels.last().unwrap().totals.len(), 1, "n = {n}");
            for h in 1..s.height() {
                assert_eq!(s.levels[h].totals.len(), m.div_ceil(1 << h));
            }
            for (h, level) in s.levels.iter().enumerate() {
                for (i, &t) in level.totals.iter().enumerate() {
                    let (x, y) = span(&s, Piece::Node(h, i));
                    let exact: f64 = w[x..y].iter().sum();
                    assert!((t - exact).abs() <= 1e-9 * exact.max(1.0));
                    // The node's columns: one per record (level 0) or covered bucket, each valid.
                    let start = i * level.span;
                    let end = (start + level.span).min(level.columns.len());
                    let outcomes = if h == 0 { y - x } else { end - start };
                    assert_eq!(end - start, outcomes, "node ({h}, {i})");
                    assert!(level.columns[start..end].iter().all(|c| (0.0..=1.0)
                        .contains(&c.prob)
                        && (c.alias as usize) < outcomes));
                }
            }
        }
        let empty =
            WirsShard::build(run_of(&[], |i| i as u64, &[1]), BuildOptions::single(true)).unwrap();
        assert_eq!(
            (empty.height(), empty.len(), empty.tombstone_count()),
            (0, 0, 1)
        );
        assert_eq!(empty.range_weight(0, 0).unwrap(), 0.0);
    }

    #[test]
    fn pieces_partition_every_range() {
        // Exhaustive over all ranges of small shards: the pieces tile lo..hi in order-independent fashion,
        // never overlap, and there are at most two per level plus the two partial buckets.
        for n in (1usize..=70).chain([129, 300]) {
            let s = shard(&vec![1.0; n]);
            let max_pieces = 2 * s.height() + 2;
            for lo in 0..n {
                for hi in lo + 1..=n {
                    let ps = pieces_of(&s, lo, hi);
                    assert!(ps.len() <= max_pieces, "n {n} {lo}..{hi}: {ps:?}");
                    let mut spans: Vec<(usize, usize)> = ps.iter().map(|&p| span(&s, p)).collect();
                    spans.sort_unstable();
                    let mut at = lo;
                    for (a, b) in spans {
                        assert!(a == at && b > a, "n {n} {lo}..{hi}: {ps:?}");
                        at = b;
                    }
                    assert_eq!(at, hi, "n {n} {lo}..{hi}: {ps:?}");
                    for p in ps {
                        if let Piece::Records(a, b) = p {
                            assert_eq!(
                                a / s.bucket,
                                (b - 1) / s.bucket,
                                "a partial piece spans buckets"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn lookups_bounds_and_tombstones() {
        let s = WirsShard::build(
            run_of(&[2.0, 0.0, 5.0, 1.5], |i| (i as u64 + 1) * 2, &[3, 6]),
            BuildOptions::single(true),
        )
        .unwrap();
        assert_eq!(WirsShard::NAME, "wirs");
        assert_eq!(s.find(4).unwrap(), Some(1));
        assert_eq!(s.find(5).unwrap(), None);
        assert_eq!(
            (s.lower_bound(5).unwrap(), s.upper_bound(6).unwrap()),
            (2, 3)
        );
        assert!(s.has_tombstone(3).unwrap() && !s.has_tombstone(4).unwrap());
        assert_eq!(s.tombstone_at(0).unwrap(), 3);
        assert_eq!(
            s.record_at(2).unwrap(),
            Record {
                key: 6,
                value: 60,
                weight: 5.0
            }
        );
        assert_eq!(s.range_weight(0, 4).unwrap(), 8.5);
        assert_eq!(s.range_weight(1, 2).unwrap(), 0.0);
        assert!(s.memory_bytes() >= 4 * 36);
        let u = WirsShard::build(
            run_of(&[2.0, 0.0, 5.0], |i| i as u64, &[]),
            BuildOptions::single(false),
        )
        .unwrap();
        assert!((0..3).all(|i| u.record_at(i).unwrap().weight == 1.0));
        assert_eq!(u.range_weight(0, 3).unwrap(), 3.0);
    }

    #[test]
    fn zero_and_invalid_weights() {
        let zero = shard(&[0.0; 50]);
        assert_eq!(zero.range_weight(0, 50).unwrap(), 0.0);
        assert!(
            zero.levels
                .iter()
                .all(|l| l.totals.iter().all(|&t| t == 0.0))
        );
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        assert!(zero.sample_in(0, 50, &mut rng).is_err());
        assert!(zero.range_sampler(0, 50).unwrap().is_none());
        for bad in [-1.0, f64::NAN, f64::INFINITY] {
            let run = run_of(&[1.0, bad], |i| i as u64, &[]);
            assert!(WirsShard::build(run, BuildOptions::single(true)).is_err());
        }
        let overflow = run_of(&[f64::MAX; 10], |i| i as u64, &[]);
        assert!(WirsShard::build(overflow, BuildOptions::single(true)).is_err());
    }

    /// A shard of 1000 records (b = 7, 143 buckets, 9 levels) with skewed weights, zeros, and a run of zeros
    /// that covers whole buckets.
    fn test_weights() -> Vec<f64> {
        let mut w = skewed_weights(1000, 21);
        for x in &mut w[68..92] {
            *x = 0.0; // buckets 10, 11 and 12 are weightless, 9 and 13 partly
        }
        w
    }

    /// Ranges that exercise every piece kind: mid-bucket ends, one bucket, one record, weightless parts.
    fn test_ranges(b: usize) -> Vec<(usize, usize)> {
        vec![
            (0, 1000),              // whole shard: nodes only
            (3, 997),               // partial buckets at both ends
            (b, 2 * b),             // exactly one bucket
            (b + 2, 2 * b - 1),     // inside one bucket
            (5 * b - 3, 5 * b + 2), // two partial buckets, nothing between
            (5 * b - 3, 6 * b + 2), // partial, one full bucket, partial
            (123, 124),             // a single record
            (60, 100),              // over the weightless buckets
            (70, 300),              // starts inside the weightless run
            (250, 700),
            (511, 777),
        ]
    }

    fn draws_for(w: &[f64]) -> u64 {
        // About 150 expected draws for an average cell.
        (w.iter().filter(|&&x| x > 0.0).count() as u64 * 150).max(3000)
    }

    /// Draws run in stages the way the framework runs them — many started, then each pending one advanced a
    /// stage per pass — still follow the weights, and zero-weight records are never drawn.
    #[test]
    fn interleaved_staged_draws_follow_the_weights() {
        let w = test_weights();
        let s = shard(&w);
        let mut rng = ChaCha8Rng::seed_from_u64(29);
        for (lo, hi) in test_ranges(s.bucket_size()) {
            let sampler = s.range_sampler(lo, hi).unwrap().unwrap();
            let target = draws_for(&w[lo..hi]);
            let mut drawn = Vec::with_capacity(target as usize);
            let mut words = Words::new(&mut rng);
            let mut staged_somewhere = false;
            while (drawn.len() as u64) < target {
                let mut pending = Vec::new();
                for _ in 0..500 {
                    match sampler.start(&mut words).unwrap() {
                        DrawStep::Done(i) => drawn.push(i),
                        DrawStep::Pending(p) => pending.push(p),
                    }
                }
                while !pending.is_empty() {
                    staged_somewhere = true;
                    let mut still = Vec::new();
                    for p in pending {
                        match sampler.advance(p, &mut words).unwrap() {
                            DrawStep::Done(i) => drawn.push(i),
                            DrawStep::Pending(next) => still.push(next),
                        }
                    }
                    pending = still;
                }
            }
            assert!(staged_somewhere, "{lo}..{hi}: no draw took a stage");
            let mut it = drawn.into_iter();
            let counts = counts_of(lo, hi, target, || it.next().unwrap());
            assert_fits(&counts, &w[lo..hi], &format!("staged {lo}..{hi}"));
        }
    }

    /// Staged draws the way the framework runs them: `start` for a batch, then each pending draw advanced
    /// until done.
    fn staged_draws(drawer: &dyn RangeDrawer, target: u64, rng: &mut ChaCha8Rng) -> Vec<usize> {
        let mut drawn = Vec::with_capacity(target as usize);
        let mut words = Words::new(rng);
        while (drawn.len() as u64) < target {
            let mut pending = Vec::new();
            for _ in 0..500 {
                match drawer.start(&mut words).unwrap() {
                    DrawStep::Done(i) => drawn.push(i),
                    DrawStep::Pending(p) => pending.push(p),
                }
            }
            while let Some(p) = pending.pop() {
                match drawer.advance(p, &mut words).unwrap() {
                    DrawStep::Done(i) => drawn.push(i),
                    DrawStep::Pending(next) => pending.push(next),
                }
            }
        }
        drawn.truncate(target as usize);
        drawn
    }

    /// A whole-shard drawer draws through the one alias table over every record (built on first use), in
    /// one pending stage, and its draws follow the weights (chi-square) and skip weightless records.
    #[test]
    fn whole_shard_draws_follow_the_weights() {
        let w = test_weights();
        let s = shard(&w);
        assert!(
            s.whole.get().is_none(),
            "built before any whole-shard drawer"
        );
        let bytes = s.memory_bytes();
        let drawer = s.drawer(0, w.len()).unwrap();
        let whole = s.whole.get().unwrap().as_ref().unwrap();
        assert!(
            whole.exact,
            "an alias over these weights hands out no weightless record"
        );
        assert_eq!(s.memory_bytes(), bytes + 16 * w.len());
        let mut words_rng = ChaCha8Rng::seed_from_u64(26);
        let mut words = Words::new(&mut words_rng);
        assert!(matches!(
            drawer.start(&mut words).unwrap(),
            DrawStep::Pending(PendingDraw { stage: WHOLE, .. })
        ));
        let mut rng = ChaCha8Rng::seed_from_u64(27);
        let target = draws_for(&w);
        let mut it = staged_draws(drawer.as_ref(), target, &mut rng).into_iter();
        let counts = counts_of(0, w.len(), target, || it.next().unwrap());
        assert_fits(&counts, &w, "whole-shard drawer");
        // A table that is not exact (rounding could hand out a weightless record) checks every draw and
        // replaces such a one by an exact draw: the draws still follow the weights.
        let inexact = WholeDrawer {
            shard: &s,
            alias: &WholeAlias {
                table: whole.table.clone(),
                exact: false,
            },
        };
        let mut it = staged_draws(&inexact, target, &mut rng).into_iter();
        let counts = counts_of(0, w.len(), target, || it.next().unwrap());
        assert_fits(&counts, &w, "whole-shard drawer, checked draws");
        // A sub-range still gets the tree's range sampler; a weightless shard gets no whole table.
        let zero = shard(&[0.0; 40]);
        assert!(zero.drawer(0, 40).is_ok());
        assert!(zero.whole.get().unwrap().is_none());
    }

    /// The exactness check of a whole-shard table: a column that can hand out a weightless record makes
    /// the table inexact.
    #[test]
    fn whole_alias_exactness() {
        let w = [3.0, 0.0, 1.0, 0.0, 5.0];
        assert!(WholeAlias::build(&w).unwrap().exact);
        let table = AliasTable::new(&w).unwrap();
        let cols = table.columns();
        // Weightless where a column keeps its own outcome, or where a column's alias points.
        let own = cols.iter().position(|c| c.prob > 0.0).unwrap();
        let mut doctored = w;
        doctored[own] = 0.0;
        assert!(!never_weightless(cols, &doctored));
        let aliased = cols.iter().find(|c| c.prob < 1.0).unwrap().alias as usize;
        let mut doctored = w;
        doctored[aliased] = 0.0;
        assert!(!never_weightless(cols, &doctored));
        assert!(WholeAlias::build(&[0.0, 0.0]).is_none());
    }

    #[test]
    fn single_draws_follow_the_weights() {
        let w = test_weights();
        let s = shard(&w);
        assert_eq!((s.bucket_size(), s.height()), (7, 9));
        let mut rng = ChaCha8Rng::seed_from_u64(22);
        for (lo, hi) in test_ranges(s.bucket_size()) {
            let exact: f64 = w[lo..hi].iter().sum();
            assert!((s.range_weight(lo, hi).unwrap() - exact).abs() <= 1e-9 * exact);
            let counts = counts_of(lo, hi, draws_for(&w[lo..hi]), || {
                s.sample_in(lo, hi, &mut rng).unwrap()
            });
            assert_fits(&counts, &w[lo..hi], &format!("sample_in {lo}..{hi}"));
        }
    }

    #[test]
    fn range_sampler_draws_follow_the_weights() {
        let w = test_weights();
        let s = shard(&w);
        let mut rng = ChaCha8Rng::seed_from_u64(23);
        for (lo, hi) in test_ranges(s.bucket_size()) {
            let sampler = s.range_sampler(lo, hi).unwrap().unwrap();
            let exact: f64 = w[lo..hi].iter().sum();
            assert!((sampler.total_weight() - exact).abs() <= 1e-9 * exact);
            let counts = counts_of(lo, hi, draws_for(&w[lo..hi]), || {
                sampler.sample(&mut rng).unwrap()
            });
            assert_fits(&counts, &w[lo..hi], &format!("range_sampler {lo}..{hi}"));
        }
        assert!(
            s.range_sampler(75, 85).unwrap().is_none(),
            "a weightless range"
        );
        assert!(s.range_sampler(5, 5).unwrap().is_none());
    }

    #[test]
    fn zero_weight_records_are_never_drawn() {
        let mut w = vec![0.0; 500];
        for i in (0..500).step_by(11) {
            w[i] = 1e6;
        }
        w[3] = 1e-9;
        let s = shard(&w);
        let mut rng = ChaCha8Rng::seed_from_u64(24);
        for (lo, hi) in [(0, 500), (1, 499), (3, 4), (3, 11), (2, 300), (12, 23)] {
            let sampler = s.range_sampler(lo, hi).unwrap().unwrap();
            for _ in 0..10_000 {
                let i = s.sample_in(lo, hi, &mut rng).unwrap();
                assert!((lo..hi).contains(&i) && w[i] > 0.0, "{lo}..{hi} drew {i}");
                let j = sampler.sample(&mut rng).unwrap();
                assert!(
                    (lo..hi).contains(&j) && w[j] > 0.0,
                    "{lo}..{hi} sampler drew {j}"
                );
            }
        }
    }

    #[test]
    fn the_test_rejects_a_wrong_distribution() {
        // A sampler that treated a partial bucket as its full bucket, or ignored the weights, must fail.
        let w: Vec<f64> = (0..200).map(|i| (i % 13 + 1) as f64).collect();
        let s = shard(&w);
        let (lo, hi) = (3, 190);
        let mut rng = ChaCha8Rng::seed_from_u64(25);
        let uniform = counts_of(lo, hi, 150_000, || {
            lo + super::super::shard::uniform_below(&mut rng, (hi - lo) as u64) as usize
        });
        assert!(rejects(&uniform, &w[lo..hi]));
        // Draws over lo − 3..hi clipped into the range over-weigh the first records.
        let clipped = counts_of(lo, hi, 150_000, || {
            s.sample_in(0, hi, &mut rng).unwrap().max(lo)
        });
        assert!(rejects(&clipped, &w[lo..hi]));
        let right = counts_of(lo, hi, 150_000, || s.sample_in(lo, hi, &mut rng).unwrap());
        assert!(!rejects(&right, &w[lo..hi]));
    }

    proptest! {
        #![proptest_config(proptest_config(32))]
        #[test]
        fn matches_a_naive_model(
            entries in prop::collection::btree_map(0u64..5000, prop_oneof![Just(0.0), 0.0f64..100.0], 0..600),
            tombs in prop::collection::btree_set(0u64..5000, 0..80),
            probes in prop::collection::vec(any::<u64>(), 0..20),
            weighted in any::<bool>(),
        ) {
            model_check::<WirsShard>(&entries, &tombs, weighted, &probes);
        }
    }

    // ---- Integration: the shards under the framework ----

    /// Fills a weighted index with a few thousand records (overwrites and deletes included) and flushes
    /// everything into shards; returns the live model key → (value, weight).
    fn fill<S: Shard>(index: &Dynamized<S>, seed: u64) -> BTreeMap<u64, (u64, f64)> {
        let mut model = BTreeMap::new();
        let weight_of = |k: u64, round: u64| {
            let h = (k ^ round.wrapping_mul(0x2545_F491_4F6C_DD1D))
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                >> 40;
            if h.is_multiple_of(10) {
                0.0
            } else {
                (h % 8 + 1) as f64
            }
        };
        for k in 0..3000u64 {
            let key = k * 5 + seed;
            let w = weight_of(key, 0);
            index.put(key, key + 1, w).unwrap();
            model.insert(key, (key + 1, w));
        }
        // Overwrites with new weights and values, then deletes, interleaved with more inserts.
        for k in (0..3000u64).step_by(3) {
            let key = k * 5 + seed;
            let w = weight_of(key, 1);
            index.put(key, key + 2, w).unwrap();
            model.insert(key, (key + 2, w));
        }
        for k in (0..3000u64).step_by(4) {
            let key = k * 5 + seed;
            index.delete(key).unwrap();
            model.remove(&key);
            index.put(key + 1, key, 3.0).unwrap();
            model.insert(key + 1, (key, 3.0));
        }
        index.quiesce(true).unwrap();
        assert!(index.stats().shards > 1, "the test wants several shards");
        assert_eq!(index.stats().buffered, 0);
        model
    }

    /// Draws `k` samples of `query` and checks them against the model's live records in `[lo, hi]`.
    fn check_samples<S: Shard>(
        index: &Dynamized<S>,
        model: &BTreeMap<u64, (u64, f64)>,
        query: WeightedRangeSample,
        k: usize,
        seed: u64,
    ) {
        let live: Vec<(u64, u64, f64)> = model
            .range(query.lo..=query.hi)
            .map(|(&key, &(v, w))| (key, v, w))
            .collect();
        let pos: BTreeMap<u64, usize> = live.iter().enumerate().map(|(i, r)| (r.0, i)).collect();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut out = Vec::new();
        index.sample(&query, k, &mut rng, &mut out).unwrap();
        assert_eq!(out.len(), k);
        let mut counts = vec![0u64; live.len()];
        for r in &out {
            let i = *pos
                .get(&r.key)
                .unwrap_or_else(|| panic!("drew key {} that is not live", r.key));
            assert_eq!((r.value, r.weight), (live[i].1, live[i].2), "key {}", r.key);
            counts[i] += 1;
        }
        let weights: Vec<f64> = live.iter().map(|r| r.2).collect();
        assert_fits(
            &counts,
            &weights,
            &format!("{} over [{}, {}]", S::NAME, query.lo, query.hi),
        );
    }

    fn options(policy: DeletePolicy) -> DynOptions {
        DynOptions {
            weighted: true,
            buffer_capacity: 64,
            delete_policy: policy,
            ..Default::default()
        }
    }

    fn runtime() -> RuntimeOptions {
        RuntimeOptions {
            background: false,
            ..Default::default()
        }
    }

    #[test]
    fn dynamized_wirs_samples_live_records_by_weight() {
        for (policy, seed) in [(DeletePolicy::Tombstone, 31), (DeletePolicy::Tagging, 32)] {
            let index = Dynamized::<WirsShard>::new(options(policy), runtime()).unwrap();
            let model = fill(&index, seed);
            for (lo, hi) in [(2_000, 6_000), (7_003, 7_400)] {
                let live = model.range(lo..=hi).filter(|(_, r)| r.1 > 0.0).count();
                check_samples(
                    &index,
                    &model,
                    WeightedRangeSample { lo, hi },
                    live * 80,
                    seed,
                );
            }
        }
    }

    #[test]
    fn dynamized_alias_samples_the_whole_set_by_weight() {
        for (policy, seed) in [(DeletePolicy::Tombstone, 33), (DeletePolicy::Tagging, 34)] {
            let index = Dynamized::<AliasShard>::new(options(policy), runtime()).unwrap();
            let model = fill(&index, seed);
            let live = model.values().filter(|r| r.1 > 0.0).count();
            check_samples(
                &index,
                &model,
                WeightedRangeSample::whole_set(),
                live * 60,
                seed,
            );
        }
    }
}
