//! Sorted record columns: the storage every in-memory shard shares.
//!
//! A [`SortedColumns`] is a [`SortedRun`] split into parallel arrays — keys, values and (depending on the
//! weight storage `W`) weights — with the static ISAM separator index (`algo::isam`) over the keys, and the
//! run's tombstones in a sorted array. It answers everything a [`Shard`](super::shard::Shard) asks that only
//! reads records: counts, indexed access, `lower_bound`/`upper_bound`, tombstone probes, prefetch hints and
//! its share of `memory_bytes`. The shards add what is specific to them (prefix sums, alias tables, trees)
//! and forward the rest with `column_accessors!`.
//!
//! Weight storage is chosen by the shard through `W` ([`WeightColumn`]):
//! * `Vec<f64>` (the default) stores a weight per record always, 1.0 in unweighted builds: the weighted
//!   shards draw from the weights in either mode.
//! * `Option<Vec<f64>>` stores weights only in weighted builds; an unweighted build keeps none and reports
//!   weight 1.0, so it costs 16 B per record, not 24.
//!
//! ## Invariants
//! * `keys` strictly ascending; `keys`, `values` and the stored weights are parallel (one entry per record,
//!   record `i` at index `i` of each).
//! * Every weight is finite and ≥ 0 (checked by [`SortedColumns::build`]); unweighted builds weigh every
//!   record 1.0, whether stored or not.
//! * `tombstones` strictly ascending (a tombstone may share its key with a record of the same shard: the
//!   record is newer).
//! * `index` is the ISAM index over exactly `keys`.
//!
//! ## Cost model (n records, t tombstones)
//! * Build: O(n + t) from a sorted run (one pass to split and check, O(n) for the ISAM levels); fails with
//!   `Error::InvalidArgument` on a weight that is negative or not finite.
//! * `key_at`, `record_at`, `tombstone_at`, `prefetch`: O(1); `lower_bound`/`upper_bound`: O(16 · log₁₆ n);
//!   `has_tombstone`: O(log t).
//! * Memory: 16 B per record (key, value) + 8 B per stored weight, the ISAM separators (≈ n/15 keys of 8 B)
//!   and 8 B per tombstone.

use super::column_run::ColumnRun;
use super::run::{Record, SortedRun};
use super::shard::{BuildOptions, prefetch_line};
use crate::algo::isam::IsamIndex;
use crate::error::{Error, Result};
use std::fmt::Debug;

/// How a [`SortedColumns`] stores record weights: `Vec<f64>` always, `Option<Vec<f64>>` only in weighted
/// builds.
pub trait WeightColumn: Debug + Default + Send + Sync + 'static {
    /// The storage of `n` records whose weights are `stored` (checked; `None`: an unweighted build, every
    /// weight 1.0).
    fn from_stored(stored: Option<Vec<f64>>, n: usize) -> Self;
    /// Weight of record `i`.
    fn weight(&self, i: usize) -> f64;
    /// Appends the weights of records `lo..hi` to `out`.
    fn extend_weights(&self, lo: usize, hi: usize, out: &mut Vec<f64>);
    /// Bytes of the stored weights.
    fn memory_bytes(&self) -> usize;
    /// Asks the CPU for the line of record `i`'s stored weight (nothing when weights are not stored).
    fn prefetch(&self, i: usize);
}

impl WeightColumn for Vec<f64> {
    fn from_stored(stored: Option<Vec<f64>>, n: usize) -> Self {
        stored.unwrap_or_else(|| vec![1.0; n])
    }
    #[inline]
    fn weight(&self, i: usize) -> f64 {
        self[i]
    }
    fn extend_weights(&self, lo: usize, hi: usize, out: &mut Vec<f64>) {
        out.extend_from_slice(&self[lo..hi]);
    }
    fn memory_bytes(&self) -> usize {
        self.len() * 8
    }
    #[inline]
    fn prefetch(&self, i: usize) {
        if let Some(w) = self.get(i) {
            prefetch_line(w);
        }
    }
}

impl WeightColumn for Option<Vec<f64>> {
    fn from_stored(stored: Option<Vec<f64>>, _n: usize) -> Self {
        stored
    }
    #[inline]
    fn weight(&self, i: usize) -> f64 {
        self.as_ref().map_or(1.0, |w| w[i])
    }
    fn extend_weights(&self, lo: usize, hi: usize, out: &mut Vec<f64>) {
        match self {
            Some(w) => out.extend_from_slice(&w[lo..hi]),
            None => out.resize(out.len() + (hi - lo), 1.0),
        }
    }
    fn memory_bytes(&self) -> usize {
        self.as_ref().map_or(0, |w| w.len() * 8)
    }
    #[inline]
    fn prefetch(&self, i: usize) {
        if let Some(w) = self.as_ref().and_then(|w| w.get(i)) {
            prefetch_line(w);
        }
    }
}

/// Records in parallel sorted columns under an ISAM index, plus sorted tombstones (see the module doc).
#[derive(Debug, Default)]
pub struct SortedColumns<W = Vec<f64>> {
    keys: Vec<u64>,
    values: Vec<u64>,
    weights: W,
    index: IsamIndex,
    tombstones: Vec<u64>,
}

impl<W: WeightColumn> SortedColumns<W> {
    /// Splits a well-formed `run` into columns and indexes its keys. Unweighted builds weigh every record
    /// 1.0; weighted ones fail on a weight that is negative or not finite.
    pub fn build(run: SortedRun, opts: BuildOptions) -> Result<Self> {
        debug_assert!(run.is_well_formed(), "a shard needs a well-formed run");
        Self::from_column_run(ColumnRun::from_sorted_run(run, opts.weighted), opts)
    }

    /// Takes over the columns of a well-formed `run` (no copy) and indexes its keys. Unweighted builds
    /// weigh every record 1.0 (stored weights are dropped); weighted ones fail on a weight that is negative
    /// or not finite, or on a run without weights.
    pub fn from_column_run(run: ColumnRun, opts: BuildOptions) -> Result<Self> {
        debug_assert!(run.is_well_formed(), "a shard needs a well-formed run");
        let n = run.keys.len();
        let stored = if opts.weighted {
            let Some(weights) = run.weights else {
                return Err(Error::invalid("a weighted shard needs a run with weights"));
            };
            if let Some(i) = weights.iter().position(|w| !(w.is_finite() && *w >= 0.0)) {
                return Err(Error::invalid(format!(
                    "weight {} of key {} must be finite and non-negative",
                    weights[i], run.keys[i]
                )));
            }
            Some(weights)
        } else {
            None
        };
        let index = IsamIndex::build(&run.keys);
        Ok(SortedColumns {
            keys: run.keys,
            values: run.values,
            weights: W::from_stored(stored, n),
            index,
            tombstones: run.tombstones,
        })
    }

    /// Records.
    #[inline]
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// True when there is no record.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Tombstones.
    #[inline]
    pub fn tombstone_count(&self) -> usize {
        self.tombstones.len()
    }

    /// The sorted keys.
    pub fn keys(&self) -> &[u64] {
        &self.keys
    }

    /// Key of record `i`.
    #[inline]
    pub fn key_at(&self, i: usize) -> u64 {
        self.keys[i]
    }

    /// Record `i`.
    #[inline]
    /// Appends the weights of records `lo..hi` to `out`.
    pub fn extend_weights(&self, lo: usize, hi: usize, out: &mut Vec<f64>) {
        self.weights.extend_weights(lo, hi, out);
    }

    pub fn record_at(&self, i: usize) -> Record {
        Record {
            key: self.keys[i],
            value: self.values[i],
            weight: self.weights.weight(i),
        }
    }

    /// Key of tombstone `j`.
    #[inline]
    pub fn tombstone_at(&self, j: usize) -> u64 {
        self.tombstones[j]
    }

    /// Index of the first record with a key ≥ `key` (`len()` if none).
    #[inline]
    pub fn lower_bound(&self, key: u64) -> usize {
        self.index.lower_bound(&self.keys, key)
    }

    /// The index of the record of each key of `targets`, appended to `out` in order: the ISAM searches go
    /// together (`IsamIndex::lower_bound_many`), their cache misses overlapping.
    pub fn find_many(&self, targets: &[u64], out: &mut Vec<Option<usize>>) {
        let mut at = Vec::with_capacity(targets.len());
        self.index.lower_bound_many(&self.keys, targets, &mut at);
        out.extend(
            at.into_iter()
                .zip(targets)
                .map(|(i, &key)| (self.keys.get(i) == Some(&key)).then_some(i)),
        );
    }

    /// Index of the first record with a key > `key` (`len()` if none).
    #[inline]
    pub fn upper_bound(&self, key: u64) -> usize {
        self.index.upper_bound(&self.keys, key)
    }

    /// True if there is a tombstone for `key`.
    #[inline]
    pub fn has_tombstone(&self, key: u64) -> bool {
        self.tombstones.binary_search(&key).is_ok()
    }

    /// Prefetches the cache lines of record `i`'s key, value and stored weight (nothing if `i` is out of range).
    #[inline]
    pub fn prefetch(&self, i: usize) {
        if let (Some(k), Some(v)) = (self.keys.get(i), self.values.get(i)) {
            prefetch_line(k);
            prefetch_line(v);
            self.weights.prefetch(i);
        }
    }

    /// Bytes held: keys, values, stored weights, ISAM separators and tombstones.
    pub fn memory_bytes(&self) -> usize {
        self.keys.len() * 16
            + self.weights.memory_bytes()
            + self.index.memory_bytes()
            + self.tombstones.len() * 8
    }
}

impl SortedColumns<Vec<f64>> {
    /// Every record's weight (1.0 each in unweighted builds).
    #[inline]
    pub fn weights(&self) -> &[f64] {
        &self.weights
    }
}

impl SortedColumns<Option<Vec<f64>>> {
    /// Every record's weight in weighted builds; `None` in unweighted ones (every weight is 1).
    #[inline]
    pub fn weights(&self) -> Option<&[f64]> {
        self.weights.as_deref()
    }
}

/// Inside an `impl Shard for S`, defines the [`Shard`](super::shard::Shard) methods that only read `S`'s
/// [`SortedColumns`] field named by the argument: `len`, `tombstone_count`, `key_at`, `record_at`,
/// `tombstone_at`, `lower_bound`, `upper_bound`, `has_tombstone`, `find_many` and `prefetch`. `NAME`, `build`,
/// `memory_bytes` and the weighted-draw methods stay with the shard.
macro_rules! column_accessors {
    ($columns:ident) => {
        #[inline]
        fn len(&self) -> usize {
            self.$columns.len()
        }
        #[inline]
        fn tombstone_count(&self) -> usize {
            self.$columns.tombstone_count()
        }
        #[inline]
        fn key_at(&self, i: usize) -> $crate::error::Result<u64> {
            Ok(self.$columns.key_at(i))
        }
        #[inline]
        fn record_at(
            &self,
            i: usize,
        ) -> $crate::error::Result<$crate::index::dynamized::run::Record> {
            Ok(self.$columns.record_at(i))
        }
        #[inline]
        fn tombstone_at(&self, j: usize) -> $crate::error::Result<u64> {
            Ok(self.$columns.tombstone_at(j))
        }
        #[inline]
        fn lower_bound(&self, key: u64) -> $crate::error::Result<usize> {
            Ok(self.$columns.lower_bound(key))
        }
        #[inline]
        fn upper_bound(&self, key: u64) -> $crate::error::Result<usize> {
            Ok(self.$columns.upper_bound(key))
        }
        #[inline]
        fn has_tombstone(&self, key: u64) -> $crate::error::Result<bool> {
            Ok(self.$columns.has_tombstone(key))
        }
        fn find_many(
            &self,
            keys: &[u64],
            out: &mut Vec<Option<usize>>,
        ) -> $crate::error::Result<()> {
            self.$columns.find_many(keys, out);
            Ok(())
        }
        #[inline]
        fn prefetch(&self, i: usize) {
            self.$columns.prefetch(i)
        }
        fn extend_weights(
            &self,
            lo: usize,
            hi: usize,
            out: &mut Vec<f64>,
        ) -> $crate::error::Result<()> {
            self.$columns.extend_weights(lo, hi, out);
            Ok(())
        }
    };
}
pub(super) use column_accessors;

#[cfg(test)]
mod tests {
    use super::*;

    fn run(weights: &[f64], tombstones: &[u64]) -> SortedRun {
        SortedRun {
            records: weights
                .iter()
                .enumerate()
                .map(|(i, &weight)| Record {
                    key: i as u64 * 2 + 1,
                    value: i as u64 * 10,
                    weight,
                })
                .collect(),
            tombstones: tombstones.to_vec(),
        }
    }

    const WEIGHTED: BuildOptions = BuildOptions::single(true);
    const UNWEIGHTED: BuildOptions = BuildOptions::single(false);

    #[test]
    fn accessors_and_bounds() {
        let c = SortedColumns::<Vec<f64>>::build(run(&[2.0, 0.0, 5.0], &[2, 4]), WEIGHTED).unwrap();
        assert_eq!((c.len(), c.tombstone_count(), c.is_empty()), (3, 2, false));
        assert_eq!(c.keys(), &[1, 3, 5]);
        assert_eq!(c.weights(), &[2.0, 0.0, 5.0]);
        assert_eq!(
            c.record_at(2),
            Record {
                key: 5,
                value: 20,
                weight: 5.0
            }
        );
        assert_eq!((c.key_at(1), c.tombstone_at(1)), (3, 4));
        assert_eq!(
            (c.lower_bound(3), c.upper_bound(3), c.lower_bound(6)),
            (1, 2, 3)
        );
        assert!(c.has_tombstone(4) && !c.has_tombstone(3));
        c.prefetch(0);
        c.prefetch(3); // out of range: no effect
    }

    #[test]
    fn weight_storage_follows_the_build() {
        let w = [7.0, 0.5];
        // Always stored: 1.0 each when unweighted.
        let always = SortedColumns::<Vec<f64>>::build(run(&w, &[]), UNWEIGHTED).unwrap();
        assert_eq!(always.weights(), &[1.0, 1.0]);
        assert_eq!(always.memory_bytes(), 2 * 24 + always.index.memory_bytes());
        // Stored only when weighted: 16 B per record otherwise, every weight 1.
        let none = SortedColumns::<Option<Vec<f64>>>::build(run(&w, &[9]), UNWEIGHTED).unwrap();
        assert_eq!(none.weights(), None);
        assert_eq!(none.record_at(0).weight, 1.0);
        assert_eq!(none.memory_bytes(), 2 * 16 + none.index.memory_bytes() + 8);
        let some = SortedColumns::<Option<Vec<f64>>>::build(run(&w, &[]), WEIGHTED).unwrap();
        assert_eq!(some.weights(), Some(&w[..]));
        assert_eq!(some.record_at(1).weight, 0.5);
    }

    #[test]
    fn invalid_weights_are_refused_only_when_weighted() {
        for bad in [-1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            let err =
                SortedColumns::<Vec<f64>>::build(run(&[1.0, bad], &[]), WEIGHTED).unwrap_err();
            assert!(matches!(err, Error::InvalidArgument(_)), "{bad}: {err:?}");
            assert!(SortedColumns::<Option<Vec<f64>>>::build(run(&[bad], &[]), WEIGHTED).is_err());
            // Unweighted builds ignore the weights.
            assert!(SortedColumns::<Option<Vec<f64>>>::build(run(&[bad], &[]), UNWEIGHTED).is_ok());
        }
        let empty = SortedColumns::<Vec<f64>>::build(run(&[], &[3]), WEIGHTED).unwrap();
        assert!(empty.is_empty());
        assert_eq!((empty.lower_bound(7), empty.upper_bound(0)), (0, 0));
        assert!(empty.has_tombstone(3));
    }
}
