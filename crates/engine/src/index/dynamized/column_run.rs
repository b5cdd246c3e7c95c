//! A sorted run in columns: what flushes and in-memory merges produce, and what the in-memory shards take
//! over without copying (`Shard::build_columns`).
//!
//! A [`ColumnRun`] holds the same entries as a [`SortedRun`] — records with unique ascending keys, tombstones
//! with unique ascending keys — but as parallel key, value and (weighted runs only) weight vectors, the
//! layout of `columns::SortedColumns`. A merge that writes its output here and hands the vectors to the shard
//! writes each record once (through a record vector it was written, read back for the Bloom filter, and
//! copied into the columns), and its filter pass reads 8 B keys instead of 24 B records.
//!
//! Invariants: `keys` strictly ascending, `values` (and `weights` when present) parallel to it; `tombstones`
//! strictly ascending. An unweighted run stores no weights: every weight is 1.0.
//!
//! Cost: pushes O(1) amortised (the capacity is reserved up front by the producer); conversions O(n).

use super::run::{Record, SortedRun};

/// Records (as parallel columns) and tombstones, each with unique ascending keys (see the module doc).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ColumnRun {
    pub keys: Vec<u64>,
    pub values: Vec<u64>,
    /// One weight per record in weighted runs; `None` in unweighted ones (every weight is 1.0).
    pub weights: Option<Vec<f64>>,
    pub tombstones: Vec<u64>,
}

impl ColumnRun {
    /// An empty run with room for `records` records and `tombstones` tombstones.
    pub fn with_capacity(records: usize, tombstones: usize, weighted: bool) -> ColumnRun {
        ColumnRun {
            keys: Vec::with_capacity(records),
            values: Vec::with_capacity(records),
            weights: weighted.then(|| Vec::with_capacity(records)),
            tombstones: Vec::with_capacity(tombstones),
        }
    }

    /// Records.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// True when there is no record.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Entries (records plus tombstones).
    pub fn entries(&self) -> usize {
        self.keys.len() + self.tombstones.len()
    }

    /// Appends a record (its weight is dropped in an unweighted run).
    #[inline]
    pub fn push_record(&mut self, r: &Record) {
        self.keys.push(r.key);
        self.values.push(r.value);
        if let Some(w) = &mut self.weights {
            w.push(r.weight);
        }
    }

    /// Appends the entries of `other`, whose keys all follow this run's (parts of a split merge).
    pub fn append(&mut self, other: &ColumnRun) {
        self.keys.extend_from_slice(&other.keys);
        self.values.extend_from_slice(&other.values);
        match (&mut self.weights, &other.weights) {
            (Some(w), Some(o)) => w.extend_from_slice(o),
            (Some(w), None) => w.resize(self.keys.len(), 1.0),
            (None, _) => {}
        }
        self.tombstones.extend_from_slice(&other.tombstones);
    }

    /// The same entries as a run of records (weights 1.0 when none are stored).
    pub fn into_sorted_run(self) -> SortedRun {
        let records = match &self.weights {
            Some(w) => self
                .keys
                .iter()
                .zip(&self.values)
                .zip(w)
                .map(|((&key, &value), &weight)| Record { key, value, weight })
                .collect(),
            None => self
                .keys
                .iter()
                .zip(&self.values)
                .map(|(&key, &value)| Record {
                    key,
                    value,
                    weight: 1.0,
                })
                .collect(),
        };
        SortedRun {
            records,
            tombstones: self.tombstones,
        }
    }

    /// The entries of `run` in columns, with weights when `weighted`.
    pub fn from_sorted_run(run: SortedRun, weighted: bool) -> ColumnRun {
        let mut out = ColumnRun::with_capacity(run.records.len(), 0, weighted);
        for r in &run.records {
            out.push_record(r);
        }
        out.tombstones = run.tombstones;
        out
    }

    /// Debug check of the run's invariants.
    pub fn is_well_formed(&self) -> bool {
        self.keys.windows(2).all(|w| w[0] < w[1])
            && self.values.len() == self.keys.len()
            && self
                .weights
                .as_ref()
                .is_none_or(|w| w.len() == self.keys.len())
            && self.tombstones.windows(2).all(|w| w[0] < w[1])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run() -> SortedRun {
        SortedRun {
            records: (0..5)
                .map(|i| Record {
                    key: i * 3,
                    value: i + 100,
                    weight: i as f64 + 0.5,
                })
                .collect(),
            tombstones: vec![1, 4],
        }
    }

    #[test]
    fn round_trips_a_run_with_and_without_weights() {
        let weighted = ColumnRun::from_sorted_run(run(), true);
        assert!(weighted.is_well_formed());
        assert_eq!((weighted.len(), weighted.entries()), (5, 7));
        assert_eq!(weighted.clone().into_sorted_run(), run());
        let plain = ColumnRun::from_sorted_run(run(), false);
        assert_eq!(plain.weights, None);
        let back = plain.into_sorted_run();
        assert!(back.records.iter().all(|r| r.weight == 1.0));
        assert_eq!(back.records.len(), 5);
        assert_eq!(back.tombstones, vec![1, 4]);
    }

    #[test]
    fn append_concatenates_parts() {
        let whole = ColumnRun::from_sorted_run(run(), true);
        let mut first = ColumnRun::from_sorted_run(
            SortedRun {
                records: run().records[..2].to_vec(),
                tombstones: vec![1],
            },
            true,
        );
        let second = ColumnRun::from_sorted_run(
            SortedRun {
                records: run().records[2..].to_vec(),
                tombstones: vec![4],
            },
            true,
        );
        first.append(&second);
        assert_eq!(first, whole);
        let mut empty = ColumnRun::with_capacity(0, 0, false);
        assert!(empty.is_empty());
        empty.append(&ColumnRun::from_sorted_run(run(), false));
        assert_eq!(empty.len(), 5);
    }
}
