//! The query-latency ideals of the sampling suites: ONE static structure over a fixed set of records, as
//! the dynamized index would be if all its records sat in a single shard with no buffer and no deletes.
//!
//! * [`StaticIsam`] (`static-isam`): one [`IsamShard`] over the records sorted by key. A range sample is two
//!   bound searches and k uniform indexes in between; built with weights, k weighted draws in the index
//!   range (binary searches over the shard's prefix sums).
//! * [`StaticAlias`] (`static-alias`): keys and values in arrays under one Walker/Vose [`AliasTable`] over
//!   all weights; a weighted set sample is k O(1) alias draws. It samples the whole set only.
//!
//! They are [`Driver`]s, so that the suites time and check them exactly like the engines, but not
//! [`Engine`](super::Engine)s: they are built from records and take no writes (writes are usage errors).
//! The suites time [`Driver::sample_visit`], which every Strata driver and these ideals implement without
//! allocating per sample, so a comparison with an engine measures the index, not a result format.

use super::{Capabilities, Driver, Visit};
use crate::error::{BenchError, Result};
use strata::lab::algo::alias::AliasTable;
use strata::lab::index::dynamized::{BuildOptions, IsamShard, Record, Shard, SortedRun};

/// One record of a static structure: key, `u64` value, weight (1 when unweighted).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StaticRecord {
    pub key: u64,
    pub value: u64,
    pub weight: f64,
}

fn refuse_writes(name: &str) -> BenchError {
    BenchError::Usage(format!("{name} is a static structure: it takes no writes"))
}

fn check_sorted(name: &str, records: &[StaticRecord]) -> Result<()> {
    if records.windows(2).any(|w| w[0].key >= w[1].key) {
        return Err(BenchError::Usage(format!(
            "{name} needs records with strictly increasing keys"
        )));
    }
    Ok(())
}

/// `static-isam`: one ISAM shard over a fixed record set.
pub struct StaticIsam {
    shard: IsamShard,
    weighted: bool,
}

impl StaticIsam {
    /// Builds the shard from `records` (strictly increasing keys); `weighted` keeps their weights.
    pub fn build(records: &[StaticRecord], weighted: bool) -> Result<Self> {
        check_sorted("static-isam", records)?;
        let run = SortedRun {
            records: records
                .iter()
                .map(|r| Record {
                    key: r.key,
                    value: r.value,
                    weight: if weighted { r.weight } else { 1.0 },
                })
                .collect(),
            tombstones: Vec::new(),
        };
        Ok(StaticIsam {
            shard: IsamShard::build(run, BuildOptions::single(weighted))?,
            weighted,
        })
    }

    /// What the driver can do.
    pub fn capabilities(&self) -> Capabilities {
        Capabilities {
            count: !self.weighted,
            sample: true,
            byte_values: false,
        }
    }

    /// The index interval of `[lo, hi]`.
    fn bounds(&self, lo: u64, hi: u64) -> Result<(usize, usize)> {
        Ok((self.shard.lower_bound(lo)?, self.shard.upper_bound(hi)?))
    }
}

impl Driver for StaticIsam {
    fn engine(&self) -> &'static str {
        "static-isam"
    }
    fn put(&self, _key: u64, _value: &[u8]) -> Result<()> {
        Err(refuse_writes(self.engine()))
    }
    fn put_batch(&self, _records: &[(u64, &[u8])]) -> Result<()> {
        Err(refuse_writes(self.engine()))
    }
    fn delete(&self, _key: u64) -> Result<()> {
        Err(refuse_writes(self.engine()))
    }
    fn get(&self, key: u64, value: &mut Vec<u8>) -> Result<bool> {
        match self.shard.find(key)? {
            Some(i) => {
                value.clear();
                value.extend_from_slice(&self.shard.record_at(i)?.value.to_be_bytes());
                Ok(true)
            }
            None => Ok(false),
        }
    }
    fn scan_range(
        &self,
        lo: u64,
        hi: u64,
        limit: u64,
        reverse: bool,
        visit: &mut Visit<'_>,
    ) -> Result<u64> {
        let (a, b) = self.bounds(lo, hi)?;
        let n = (b.saturating_sub(a) as u64).min(limit) as usize;
        let idx: Box<dyn Iterator<Item = usize>> = if reverse {
            Box::new((b - n..b).rev())
        } else {
            Box::new(a..a + n)
        };
        for i in idx {
            let r = self.shard.record_at(i)?;
            visit(r.key, &r.value.to_be_bytes())?;
        }
        Ok(n as u64)
    }
    fn count(&self, lo: u64, hi: u64) -> Result<u64> {
        if self.weighted {
            return Err(BenchError::Usage(
                "the weighted static-isam does not count ranges".into(),
            ));
        }
        let (a, b) = self.bounds(lo, hi)?;
        Ok(b.saturating_sub(a) as u64)
    }
    fn sample_visit(
        &self,
        lo: u64,
        hi: u64,
        k: usize,
        rng: &mut dyn rand::RngCore,
        visit: &mut dyn FnMut(u64, &[u8]) -> Result<()>,
    ) -> Result<()> {
        let (a, b) = self.bounds(lo, hi)?;
        if b <= a || (self.weighted && self.shard.range_weight(a, b)? <= 0.0) {
            return Ok(());
        }
        for _ in 0..k {
            let r = self.shard.record_at(self.shard.sample_in(a, b, rng)?)?;
            visit(r.key, &r.value.to_be_bytes())?;
        }
        Ok(())
    }
    fn checkpoint(&self) -> Result<()> {
        Ok(())
    }
    fn close(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}

/// `static-alias`: one alias table over every weight of a fixed record set (weighted set sampling).
pub struct StaticAlias {
    keys: Vec<u64>,
    values: Vec<u64>,
    alias: AliasTable,
}

impl StaticAlias {
    /// Builds the table over `records` (strictly increasing keys, finite weights ≥ 0, not all 0).
    pub fn build(records: &[StaticRecord]) -> Result<Self> {
        check_sorted("static-alias", records)?;
        let weights: Vec<f64> = records.iter().map(|r| r.weight).collect();
        Ok(StaticAlias {
            keys: records.iter().map(|r| r.key).collect(),
            values: records.iter().map(|r| r.value).collect(),
            alias: AliasTable::new(&weights)?,
        })
    }
}

impl Driver for StaticAlias {
    fn engine(&self) -> &'static str {
        "static-alias"
    }
    fn put(&self, _key: u64, _value: &[u8]) -> Result<()> {
        Err(refuse_writes(self.engine()))
    }
    fn put_batch(&self, _records: &[(u64, &[u8])]) -> Result<()> {
        Err(refuse_writes(self.engine()))
    }
    fn delete(&self, _key: u64) -> Result<()> {
        Err(refuse_writes(self.engine()))
    }
    fn get(&self, key: u64, value: &mut Vec<u8>) -> Result<bool> {
        match self.keys.binary_search(&key) {
            Ok(i) => {
                value.clear();
                value.extend_from_slice(&self.values[i].to_be_bytes());
                Ok(true)
            }
            Err(_) => Ok(false),
        }
    }
    fn scan_range(
        &self,
        lo: u64,
        hi: u64,
        limit: u64,
        reverse: bool,
        visit: &mut Visit<'_>,
    ) -> Result<u64> {
        let a = self.keys.partition_point(|&k| k < lo);
        let b = self.keys.partition_point(|&k| k <= hi);
        let n = (b.saturating_sub(a) as u64).min(limit) as usize;
        let idx: Box<dyn Iterator<Item = usize>> = if reverse {
            Box::new((b - n..b).rev())
        } else {
            Box::new(a..a + n)
        };
        for i in idx {
            visit(self.keys[i], &self.values[i].to_be_bytes())?;
        }
        Ok(n as u64)
    }
    fn sample_visit(
        &self,
        lo: u64,
        hi: u64,
        k: usize,
        rng: &mut dyn rand::RngCore,
        visit: &mut dyn FnMut(u64, &[u8]) -> Result<()>,
    ) -> Result<()> {
        let (first, last) = (self.keys[0], self.keys[self.keys.len() - 1]);
        if lo > first || hi < last {
            return Err(BenchError::Usage(
                "static-alias samples the whole set only (weighted set sampling)".into(),
            ));
        }
        for _ in 0..k {
            let i = self.alias.sample(rng);
            visit(self.keys[i], &self.values[i].to_be_bytes())?;
        }
        Ok(())
    }
    fn checkpoint(&self) -> Result<()> {
        Ok(())
    }
    fn close(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}
