//! The alias shard: the static structure of weighted set sampling (WSS, "DE-WSS" in Rumbaugh & Xie).
//!
//! Records in the sorted columns of `columns` (keys, values, weights, under the ISAM separator index, plus
//! sorted tombstones), and on top of them:
//! * ONE Walker/Vose alias table (`algo::alias`) over all record weights, so a draw over the whole shard —
//!   the local query of weighted set sampling — costs O(1);
//! * prefix sums of the weights, so `range_weight` of any index range is exact in O(1) and a draw in a
//!   sub-range (weighted *range* sampling on a WSS shard, e.g. a key-bounded query) is a binary search over
//!   them, O(log(hi − lo)). Ranges of at most [`SHORT_RANGE`] records are summed and drawn by a linear scan
//!   of their weights instead (no cancellation in a prefix difference, same order of cost).
//!
//! ## Invariants
//! * Those of `columns` (keys strictly ascending, parallel arrays, weights finite and ≥ 0, tombstones
//!   strictly ascending); the weights are always stored, 1.0 each in unweighted shards
//!   (`BuildOptions::single(false)`).
//! * `prefix.len() == len() + 1`, `prefix[0] == 0`, `prefix[i + 1] == prefix[i] + weights[i]` (summed left to
//!   right, so it is non-decreasing and a zero weight leaves it unchanged).
//! * `alias` is `Some` iff the shard has a record of positive weight (an alias table over all-zero weights
//!   cannot be built; such a shard reports `range_weight` 0 and is never drawn from).
//! * A draw never returns a record of weight 0: the prefix search only stops where the prefix grows, and a
//!   record the alias table returns is checked (one comparison) and redrawn exactly should rounding in the
//!   table's columns ever have handed out a weightless record.
//!
//! ## Cost model (n records, t tombstones)
//! * Build: O(n) from a sorted run (Vose's construction is linear); fails on weights that are negative, not
//!   finite, or sum to infinity, and on more than `u32::MAX` records (the alias table's limit).
//! * `lower_bound`/`upper_bound`: O(16 · log₁₆ n) (ISAM); `has_tombstone`: O(log t).
//! * `range_weight`: O(1) (O(32) for short ranges). `sample_in(0, n)`: O(1); `sample_in(lo, hi)` otherwise
//!   O(log(hi − lo)).
//! * Memory: 44 B per record (24 in the columns: key, value, weight; 8 prefix sum + 12 alias column) plus the
//!   ISAM separators (≈ n/15 keys) and 8 B per tombstone.

use super::column_run::ColumnRun;
use super::columns::{SortedColumns, column_accessors};
use super::run::SortedRun;
use super::shard::{BuildOptions, Shard, unit_f64};
use crate::algo::alias::AliasTable;
use crate::error::{Error, Result};
use rand::RngCore;

/// Index ranges of at most this many records are summed and drawn by a linear scan of their weights.
pub const SHORT_RANGE: usize = 32;

/// A static WSS shard: sorted records, one alias table over all weights, prefix sums for sub-ranges.
#[derive(Debug, Default)]
pub struct AliasShard {
    /// Records (weights always stored) and tombstones.
    columns: SortedColumns,
    /// `prefix[i]` = total weight of records `0..i` (`len() + 1` entries).
    prefix: Vec<f64>,
    /// Over all record weights; `None` when no record has a positive weight.
    alias: Option<AliasTable>,
}

/// An offset into `weights` drawn with probability ∝ its weight, by a linear scan; `total` must be
/// `weights.iter().sum()` (the same left-to-right sum). Never returns a weight-0 offset; `None` only when
/// every weight is 0. O(len).
pub(super) fn pick_linear(weights: &[f64], total: f64, rng: &mut dyn RngCore) -> Option<usize> {
    let target = unit_f64(rng) * total;
    let mut acc = 0.0;
    let mut last_positive = None;
    for (i, &w) in weights.iter().enumerate() {
        if w > 0.0 {
            acc += w;
            if acc > target {
                return Some(i);
            }
            last_positive = Some(i);
        }
    }
    // Only reachable when rounding put the target at the very top: the last drawable record.
    last_positive
}

/// The error of a draw from a range without weight (a caller broke `sample_in`'s contract).
pub(super) fn weightless_range(name: &str, lo: usize, hi: usize) -> Error {
    Error::invalid(format!(
        "{name} shard: no record of positive weight to draw in {lo}..{hi}"
    ))
}

impl AliasShard {
    /// The sorted keys.
    pub fn keys(&self) -> &[u64] {
        self.columns.keys()
    }

    /// Total weight of the shard (0 when it has no record of positive weight).
    pub fn total_weight(&self) -> f64 {
        self.prefix.last().copied().unwrap_or(0.0)
    }

    /// Exact draw in `lo..hi` (linear for short ranges, binary search over the prefix sums otherwise).
    fn draw_exact(&self, lo: usize, hi: usize, rng: &mut dyn RngCore) -> Result<usize> {
        if hi - lo <= SHORT_RANGE {
            let w = &self.columns.weights()[lo..hi];
            return pick_linear(w, w.iter().sum(), rng)
                .map(|j| lo + j)
                .ok_or_else(|| weightless_range(Self::NAME, lo, hi));
        }
        let (base, top) = (self.prefix[lo], self.prefix[hi]);
        if top <= base {
            return Err(weightless_range(Self::NAME, lo, hi));
        }
        let target = base + unit_f64(rng) * (top - base);
        // prefix[lo + 1 + j] is the weight up to and including record lo + j: the first one above the target
        // is the drawn record (its prefix grew, so its weight is positive).
        let sums = &self.prefix[lo + 1..=hi];
        let mut j = sums.partition_point(|&s| s <= target);
        if j == sums.len() {
            // Rounding put the target at the top: the record where the prefix last grew.
            j = sums.partition_point(|&s| s < top);
        }
        Ok(lo + j)
    }
}

impl Shard for AliasShard {
    const NAME: &'static str = "alias";

    fn build(run: SortedRun, opts: BuildOptions) -> Result<Self> {
        Self::build_columns(ColumnRun::from_sorted_run(run, opts.weighted), opts)
    }

    fn build_columns(run: ColumnRun, opts: BuildOptions) -> Result<Self> {
        let columns: SortedColumns = SortedColumns::from_column_run(run, opts)?;
        let weights = columns.weights();
        let mut prefix = Vec::with_capacity(weights.len() + 1);
        let mut sum = 0.0;
        prefix.push(sum);
        for &w in weights {
            sum += w;
            prefix.push(sum);
        }
        let alias = if sum > 0.0 {
            // Errors here are real: an infinite sum or more outcomes than the table supports.
            Some(AliasTable::new(weights)?)
        } else {
            None
        };
        Ok(AliasShard {
            columns,
            prefix,
            alias,
        })
    }

    column_accessors!(columns);

    fn memory_bytes(&self) -> usize {
        self.columns.memory_bytes()
            + self.prefix.len() * 8
            + self.alias.as_ref().map_or(0, |a| a.len() * 12)
    }

    fn range_weight(&self, lo: usize, hi: usize) -> Result<f64> {
        Ok(if hi <= lo {
            0.0
        } else if hi - lo <= SHORT_RANGE {
            self.columns.weights()[lo..hi].iter().sum()
        } else {
            self.prefix[hi] - self.prefix[lo]
        })
    }

    fn sample_in(&self, lo: usize, hi: usize, rng: &mut dyn RngCore) -> Result<usize> {
        if lo == 0
            && hi == self.columns.len()
            && let Some(alias) = &self.alias
        {
            let i = alias.sample(&mut *rng);
            if self.columns.weights()[i] > 0.0 {
                return Ok(i);
            }
        }
        self.draw_exact(lo, hi, rng)
    }
}

/// Helpers of the statistical tests of the weighted shards.
#[cfg(test)]
pub(crate) mod stats {
    use super::super::run::Record;
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;
    use std::collections::{BTreeMap, BTreeSet};

    /// z with P(Z > z) = 1e-6 for a standard normal Z.
    pub const Z_1E6: f64 = 4.753_424;

    /// Upper 1e-6 quantile of chi-square with `df` degrees of freedom (Wilson–Hilferty, as in
    /// `tests/sampling.rs`; above the exact quantile for small `df`, so the false-failure rate stays
    /// below 1e-6).
    pub fn critical(df: usize) -> f64 {
        let k = df as f64;
        let a = 2.0 / (9.0 * k);
        k * (1.0 - a + Z_1E6 * a.sqrt()).powi(3)
    }

    /// Pearson's statistic of `counts` against probabilities ∝ `weights`, and its degrees of freedom.
    /// A draw of a weight-0 cell makes the statistic infinite.
    pub fn chi_square(counts: &[u64], weights: &[f64]) -> (f64, usize) {
        assert_eq!(counts.len(), weights.len());
        let n: u64 = counts.iter().sum();
        let total: f64 = weights.iter().sum();
        let mut stat = 0.0;
        let mut cells = 0usize;
        for (&c, &w) in counts.iter().zip(weights) {
            if w == 0.0 {
                if c > 0 {
                    return (f64::INFINITY, 0);
                }
                continue;
            }
            let e = n as f64 * w / total;
            stat += (c as f64 - e).powi(2) / e;
            cells += 1;
        }
        (stat, cells.saturating_sub(1))
    }

    /// Asserts that `counts` fit `weights` at the 1e-6 level and that no weight-0 cell was drawn.
    pub fn assert_fits(counts: &[u64], weights: &[f64], what: &str) {
        for (i, (&c, &w)) in counts.iter().zip(weights).enumerate() {
            assert!(
                w > 0.0 || c == 0,
                "{what}: cell {i} of weight 0 drawn {c} times"
            );
        }
        let (stat, df) = chi_square(counts, weights);
        if df > 0 {
            let crit = critical(df);
            assert!(
                stat < crit,
                "{what}: chi-square {stat:.1} ≥ critical {crit:.1} ({df} df)"
            );
        }
    }

    /// True when the statistic of `counts` against `weights` rejects them at the 1e-6 level.
    pub fn rejects(counts: &[u64], weights: &[f64]) -> bool {
        let (stat, df) = chi_square(counts, weights);
        stat.is_infinite() || (df > 0 && stat >= critical(df))
    }

    /// A run of records with keys `key_of(i)`, values `key * 10` and the given weights, plus tombstones.
    pub fn run_of(weights: &[f64], key_of: impl Fn(usize) -> u64, tombstones: &[u64]) -> SortedRun {
        SortedRun {
            records: weights
                .iter()
                .enumerate()
                .map(|(i, &w)| Record {
                    key: key_of(i),
                    value: key_of(i) * 10,
                    weight: w,
                })
                .collect(),
            tombstones: tombstones.to_vec(),
        }
    }

    /// Skewed weights with zeros: about one record in nine weighs 0, the rest 1 to 20 (hashing `i`).
    pub fn skewed_weights(n: usize, seed: u64) -> Vec<f64> {
        (0..n)
            .map(|i| {
                let h = (i as u64 ^ seed)
                    .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                    .rotate_left(29);
                if h.is_multiple_of(9) {
                    0.0
                } else {
                    (h % 20 + 1) as f64
                }
            })
            .collect()
    }

    /// Per-index counts of `draws` draws of `draw` in `lo..hi`.
    pub fn counts_of(
        lo: usize,
        hi: usize,
        draws: u64,
        mut draw: impl FnMut() -> usize,
    ) -> Vec<u64> {
        let mut counts = vec![0u64; hi - lo];
        for _ in 0..draws {
            let i = draw();
            assert!((lo..hi).contains(&i), "draw {i} outside {lo}..{hi}");
            counts[i - lo] += 1;
        }
        counts
    }

    /// `cases` proptest cases unless `PROPTEST_CASES` says otherwise.
    pub fn proptest_config(cases: u32) -> proptest::prelude::ProptestConfig {
        let mut c = proptest::prelude::ProptestConfig::default();
        if std::env::var_os("PROPTEST_CASES").is_none() {
            c.cases = cases;
        }
        c
    }

    /// Checks a shard built from `entries` (key → weight) and `tombs` against a naive model: counts,
    /// records, tombstones, bounds, lookups, range weights and draws landing on positive weights.
    pub fn model_check<S: Shard>(
        entries: &BTreeMap<u64, f64>,
        tombs: &BTreeSet<u64>,
        weighted: bool,
        probes: &[u64],
    ) {
        let keys: Vec<u64> = entries.keys().copied().collect();
        let weights: Vec<f64> = entries.values().copied().collect();
        let run = SortedRun {
            records: entries
                .iter()
                .map(|(&key, &weight)| Record {
                    key,
                    value: !key,
                    weight,
                })
                .collect(),
            tombstones: tombs.iter().copied().collect(),
        };
        let s = S::build(run, BuildOptions::single(weighted)).unwrap();
        let eff = |i: usize| if weighted { weights[i] } else { 1.0 };
        assert_eq!((s.len(), s.tombstone_count()), (keys.len(), tombs.len()));
        for (i, &k) in keys.iter().enumerate() {
            assert_eq!(s.key_at(i).unwrap(), k);
            let r = s.record_at(i).unwrap();
            assert_eq!((r.key, r.value, r.weight), (k, !k, eff(i)));
        }
        for (j, &t) in tombs.iter().enumerate() {
            assert_eq!(s.tombstone_at(j).unwrap(), t);
        }
        let mut all_probes: Vec<u64> = probes.to_vec();
        all_probes.extend([0, u64::MAX]);
        all_probes.extend(
            keys.iter()
                .flat_map(|&k| [k.saturating_sub(1), k, k.saturating_add(1)]),
        );
        for p in all_probes {
            assert_eq!(s.lower_bound(p).unwrap(), keys.partition_point(|&k| k < p));
            assert_eq!(s.upper_bound(p).unwrap(), keys.partition_point(|&k| k <= p));
            assert_eq!(s.find(p).unwrap(), keys.binary_search(&p).ok());
            assert_eq!(s.has_tombstone(p).unwrap(), tombs.contains(&p));
        }
        let n = keys.len();
        let mut rng = ChaCha8Rng::seed_from_u64(n as u64);
        for lo in (0..=n).step_by(n / 13 + 1) {
            for hi in (lo..=n).step_by(n / 11 + 1).chain([n]) {
                let exact: f64 = (lo..hi).map(eff).sum();
                let got = s.range_weight(lo, hi).unwrap();
                assert!(
                    (got - exact).abs() <= 1e-9 * exact.max(1.0),
                    "{lo}..{hi}: {got} vs {exact}"
                );
                if got > 0.0 {
                    let i = s.sample_in(lo, hi, &mut rng).unwrap();
                    assert!((lo..hi).contains(&i) && eff(i) > 0.0);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::run::Record;
    use super::stats::*;
    use super::*;
    use proptest::prelude::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn shard(weights: &[f64]) -> AliasShard {
        AliasShard::build(
            run_of(weights, |i| i as u64 * 3 + 1, &[]),
            BuildOptions::single(true),
        )
        .unwrap()
    }

    #[test]
    fn lookups_bounds_and_tombstones() {
        let s = AliasShard::build(
            run_of(&[2.0, 0.0, 5.0, 1.5], |i| (i as u64 + 1) * 2, &[3, 6]),
            BuildOptions::single(true),
        )
        .unwrap();
        assert_eq!(AliasShard::NAME, "alias");
        assert_eq!((s.len(), s.tombstone_count()), (4, 2));
        assert_eq!(s.find(4).unwrap(), Some(1));
        assert_eq!(s.find(5).unwrap(), None);
        assert_eq!(s.lower_bound(5).unwrap(), 2);
        assert_eq!(s.upper_bound(6).unwrap(), 3);
        assert_eq!(s.upper_bound(u64::MAX).unwrap(), 4);
        assert!(s.has_tombstone(3).unwrap() && s.has_tombstone(6).unwrap());
        assert!(!s.has_tombstone(4).unwrap());
        assert_eq!(s.tombstone_at(1).unwrap(), 6);
        assert_eq!(
            s.record_at(2).unwrap(),
            Record {
                key: 6,
                value: 60,
                weight: 5.0
            }
        );
        assert_eq!(s.record_at(1).unwrap().weight, 0.0);
        assert_eq!(s.range_weight(0, 4).unwrap(), 8.5);
        assert_eq!(s.range_weight(1, 2).unwrap(), 0.0);
        assert_eq!(s.range_weight(3, 3).unwrap(), 0.0);
        assert!(s.memory_bytes() >= 4 * 44);
    }

    #[test]
    fn unweighted_builds_weigh_every_record_one() {
        let s = AliasShard::build(
            run_of(&[7.0, 0.0, 3.0], |i| i as u64, &[]),
            BuildOptions::single(false),
        )
        .unwrap();
        assert!((0..3).all(|i| s.record_at(i).unwrap().weight == 1.0));
        assert_eq!(s.range_weight(0, 3).unwrap(), 3.0);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let counts = counts_of(0, 3, 30_000, || s.sample_in(0, 3, &mut rng).unwrap());
        assert_fits(&counts, &[1.0; 3], "unweighted whole shard");
    }

    #[test]
    fn empty_zero_weight_and_invalid_shards() {
        let empty =
            AliasShard::build(run_of(&[], |i| i as u64, &[5]), BuildOptions::single(true)).unwrap();
        assert!(empty.is_empty() && empty.alias.is_none());
        assert_eq!(empty.range_weight(0, 0).unwrap(), 0.0);
        assert_eq!(empty.lower_bound(7).unwrap(), 0);
        assert!(empty.has_tombstone(5).unwrap());
        // All weights zero: no alias table, weight 0, and a (contract-breaking) draw is an error, not a panic.
        let zero = shard(&[0.0; 40]);
        assert!(zero.alias.is_none());
        assert_eq!(zero.range_weight(0, 40).unwrap(), 0.0);
        assert_eq!(zero.total_weight(), 0.0);
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        assert!(zero.sample_in(0, 40, &mut rng).is_err());
        assert!(zero.sample_in(3, 7, &mut rng).is_err());
        for bad in [-1.0, f64::NAN, f64::INFINITY] {
            let run = run_of(&[1.0, bad], |i| i as u64, &[]);
            assert!(AliasShard::build(run, BuildOptions::single(true)).is_err());
        }
        let overflow = run_of(&[f64::MAX, f64::MAX], |i| i as u64, &[]);
        assert!(AliasShard::build(overflow, BuildOptions::single(true)).is_err());
    }

    #[test]
    fn whole_shard_draws_follow_the_weights() {
        // Weighted set sampling: the O(1) alias path.
        let w = skewed_weights(2000, 11);
        let s = shard(&w);
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let counts = counts_of(0, w.len(), 600_000, || {
            s.sample_in(0, w.len(), &mut rng).unwrap()
        });
        assert_fits(&counts, &w, "whole shard");
    }

    #[test]
    fn sub_range_draws_follow_the_weights() {
        let w = skewed_weights(3000, 12);
        let s = shard(&w);
        let mut rng = ChaCha8Rng::seed_from_u64(4);
        // Long ranges (prefix-sum search), short ranges (linear scan), ranges bounded by zero weights, a
        // single record, and the whole shard but one record.
        let mut ranges = vec![
            (0, 2999),
            (1, 3000),
            (100, 1100),
            (517, 549),
            (517, 550),
            (40, 41),
        ];
        let zero = w.iter().position(|&x| x == 0.0).unwrap();
        ranges.push((zero, zero + 200)); // starts on a weight-0 record
        ranges.push((zero.saturating_sub(100), zero + 1)); // ends on one
        for (lo, hi) in ranges {
            let cells = w[lo..hi].iter().filter(|&&x| x > 0.0).count() as u64;
            let draws = (cells * 200).max(2000);
            let counts = counts_of(lo, hi, draws, || s.sample_in(lo, hi, &mut rng).unwrap());
            assert_fits(&counts, &w[lo..hi], &format!("range {lo}..{hi}"));
        }
    }

    #[test]
    fn zero_weight_records_are_never_drawn() {
        // Heavy records next to weightless ones, in every path: alias, linear scan, prefix search.
        let mut w = vec![0.0; 200];
        for i in (0..200).step_by(7) {
            w[i] = 1e6;
        }
        w[199] = 0.0;
        w[5] = 1e-9;
        let s = shard(&w);
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        for (lo, hi) in [(0, 200), (0, 199), (3, 30), (100, 200), (5, 6), (5, 8)] {
            for _ in 0..20_000 {
                let i = s.sample_in(lo, hi, &mut rng).unwrap();
                assert!((lo..hi).contains(&i) && w[i] > 0.0, "{lo}..{hi} drew {i}");
            }
        }
    }

    #[test]
    fn the_test_rejects_a_wrong_distribution() {
        // Uniform draws over skewed weights (no zeros, so only the statistic can object) must fail the test,
        // and so must a sampler that gets one record's weight wrong by a factor of two.
        let w: Vec<f64> = (0..100).map(|i| (i % 10 + 1) as f64).collect();
        let mut rng = ChaCha8Rng::seed_from_u64(6);
        let uniform = counts_of(0, 100, 100_000, || {
            super::super::shard::uniform_below(&mut rng, 100) as usize
        });
        assert!(rejects(&uniform, &w));
        let mut off = w.clone();
        off[9] *= 2.0;
        let s = shard(&off);
        let wrong = counts_of(0, 100, 100_000, || s.sample_in(0, 100, &mut rng).unwrap());
        assert!(rejects(&wrong, &w));
        // The correct sampler passes with the same budget.
        let s = shard(&w);
        let right = counts_of(0, 100, 100_000, || s.sample_in(0, 100, &mut rng).unwrap());
        assert!(!rejects(&right, &w));
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
            model_check::<AliasShard>(&entries, &tombs, weighted, &probes);
        }
    }
}
