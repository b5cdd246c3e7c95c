//! The in-memory ISAM shard: the sorted record columns of `columns` (keys and values, weights only in
//! weighted shards) under their ISAM separator index, plus sorted tombstones; nothing else when unweighted.
//!
//! Independent range sampling on it is: two ISAM searches for the in-range index interval, then uniform
//! indexes in it. Weighted shards keep prefix sums of the weights, so a weighted draw in any index range is a
//! binary search over them (O(log n)); the alias-based shards of the weighted family draw in O(1).
//!
//! Weighted shards also keep each record's own weight (in the columns): a difference of prefix sums is not
//! the weight that was put (0.3 − 0.1 ≠ 0.2 in floating point, and a small weight after large ones rounds
//! away), and records are rebuilt from `record_at` in every merge, so the error would compound.
//!
//! Cost: build O(n) from a sorted run (weighted builds fail on a negative or non-finite weight);
//! `lower_bound` O(16 · log₁₆ n); memory 16 B per record (32 B weighted: weight and prefix sum) plus n/15
//! separator keys and 8 B per tombstone.

use super::column_run::ColumnRun;
use super::columns::{SortedColumns, column_accessors};
use super::run::SortedRun;
use super::shard::{BuildOptions, Shard, unit_f64};
use crate::error::Result;
use rand::RngCore;

/// An in-memory ISAM shard.
#[derive(Debug, Default)]
pub struct IsamShard {
    /// Records and tombstones; weights stored only in weighted shards.
    columns: SortedColumns<Option<Vec<f64>>>,
    /// Prefix sums of the weights (`prefix[i]` = weight of records `0..=i`), weighted shards only.
    prefix: Option<Vec<f64>>,
}

impl IsamShard {
    /// The sorted keys.
    pub fn keys(&self) -> &[u64] {
        self.columns.keys()
    }

    fn weight_before(&self, i: usize) -> f64 {
        match (&self.prefix, i) {
            (_, 0) => 0.0,
            (Some(p), i) => p[i - 1],
            (None, i) => i as f64,
        }
    }
}

impl Shard for IsamShard {
    const NAME: &'static str = "isam";

    fn build(run: SortedRun, opts: BuildOptions) -> Result<Self> {
        Self::build_columns(ColumnRun::from_sorted_run(run, opts.weighted), opts)
    }

    fn build_columns(run: ColumnRun, opts: BuildOptions) -> Result<Self> {
        let columns = SortedColumns::<Option<Vec<f64>>>::from_column_run(run, opts)?;
        let prefix = columns.weights().map(|weights| {
            let mut sum = 0.0;
            weights
                .iter()
                .map(|&w| {
                    sum += w;
                    sum
                })
                .collect()
        });
        Ok(IsamShard { columns, prefix })
    }

    column_accessors!(columns);

    fn memory_bytes(&self) -> usize {
        self.columns.memory_bytes() + self.prefix.as_ref().map_or(0, |p| p.len() * 8)
    }

    fn range_weight(&self, lo: usize, hi: usize) -> Result<f64> {
        Ok(if hi <= lo {
            0.0
        } else {
            self.weight_before(hi) - self.weight_before(lo)
        })
    }

    fn sample_in(&self, lo: usize, hi: usize, rng: &mut dyn RngCore) -> Result<usize> {
        match &self.prefix {
            None => Ok(lo + super::shard::uniform_below(rng, (hi - lo) as u64) as usize),
            Some(p) => {
                let base = self.weight_before(lo);
                let target = base + unit_f64(rng) * (self.weight_before(hi) - base);
                // First i in lo..hi with prefix[i] > target; rounding can only push it to hi, clamp back.
                let i = lo + p[lo..hi].partition_point(|&s| s <= target);
                Ok(i.min(hi - 1))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::run::Record;
    use super::*;

    fn run(keys: &[u64], tombs: &[u64], weighted: bool) -> IsamShard {
        IsamShard::build(
            SortedRun {
                records: keys
                    .iter()
                    .map(|&k| Record {
                        key: k,
                        value: k * 10,
                        weight: if weighted { (k % 5 + 1) as f64 } else { 1.0 },
                    })
                    .collect(),
                tombstones: tombs.to_vec(),
            },
            BuildOptions::single(weighted),
        )
        .unwrap()
    }

    #[test]
    fn lookups_bounds_and_tombstones() {
        let s = run(&[2, 4, 6, 8], &[3, 6], false);
        assert_eq!(s.find(4).unwrap(), Some(1));
        assert_eq!(s.find(5).unwrap(), None);
        assert_eq!(s.lower_bound(5).unwrap(), 2);
        assert_eq!(s.upper_bound(6).unwrap(), 3);
        assert!(s.has_tombstone(3).unwrap() && !s.has_tombstone(4).unwrap());
        assert_eq!(s.record_at(2).unwrap().value, 60);
        assert_eq!(s.range_weight(1, 3).unwrap(), 2.0);
    }

    #[test]
    fn weighted_draws_follow_the_weights() {
        use rand::SeedableRng;
        let keys: Vec<u64> = (0..10).collect();
        let s = run(&keys, &[], true);
        assert_eq!(s.range_weight(0, 10).unwrap(), 30.0);
        assert_eq!(s.record_at(3).unwrap().weight, 4.0);
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut hits = [0u32; 10];
        let draws = 300_000;
        for _ in 0..draws {
            hits[s.sample_in(2, 7, &mut rng).unwrap()] += 1;
        }
        assert!(hits[..2].iter().chain(&hits[7..]).all(|&h| h == 0));
        // Keys 2..7 have weights 3,4,5,1,2 (sum 15); each frequency within 2% absolute of its share.
        for (i, w) in [(2, 3.0), (3, 4.0), (4, 5.0), (5, 1.0), (6, 2.0)] {
            let f = f64::from(hits[i]) / f64::from(draws);
            assert!((f - w / 15.0).abs() < 0.02, "key {i}: {f}");
        }
    }
}
