//! Driver for Strata's B+-tree family (`strata-btree`): a typed `Db<u64, u64>` with the bench's cache budget
//! and durability. I/O counters come from the engine's `IoSnapshot` (every file kind summed; page-file
//! counters separately).

use super::{Capabilities, Driver, Engine, EngineOptions, IoTotals, ScanIter};
use crate::error::Result;
use std::path::Path;
use strata::db::Config;
use strata::storage::{FileKind, IoSnapshot};
use strata::{Batch, Db, Direction, IndexKind, Options};

/// The `strata-btree` engine.
#[derive(Debug, Clone, Copy, Default)]
pub struct StrataBTree;

fn options(opts: &EngineOptions) -> Options {
    Options {
        cache_bytes: opts.cache_bytes,
        durability: Some(opts.durability),
        ..Options::default()
    }
}

impl Engine for StrataBTree {
    fn name(&self) -> &'static str {
        "strata-btree"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            scan: true,
            count: true,
            sample: true,
        }
    }

    fn create(&self, dir: &Path, opts: &EngineOptions) -> Result<Box<dyn Driver>> {
        let config = Config {
            index: IndexKind::BTree,
            page_size: opts.page_size,
            durability: opts.durability,
            ..Config::default()
        };
        let db = Db::<u64, u64>::create(dir, &config, &options(opts))?;
        Ok(Box::new(StrataDriver { db }))
    }

    fn open(&self, dir: &Path, opts: &EngineOptions) -> Result<Box<dyn Driver>> {
        let db = Db::<u64, u64>::open(dir, &options(opts))?;
        Ok(Box::new(StrataDriver { db }))
    }
}

/// An open `strata-btree` database.
pub struct StrataDriver {
    db: Db<u64, u64>,
}

fn totals(s: &IoSnapshot) -> IoTotals {
    let all = s.total();
    let pages = s.kind(FileKind::Pages);
    IoTotals {
        reads: all.reads,
        writes: all.writes,
        bytes_read: all.bytes_read,
        bytes_written: all.bytes_written,
        syncs: all.syncs,
        page_reads: pages.reads,
        page_writes: pages.writes,
    }
}

impl Driver for StrataDriver {
    fn insert(&self, key: u64, value: u64) -> Result<()> {
        Ok(self.db.insert(&key, &value)?)
    }

    fn insert_batch(&self, records: &[(u64, u64)]) -> Result<()> {
        let mut batch = Batch::new();
        for (k, v) in records {
            batch.insert(k, v);
        }
        Ok(self.db.write(batch)?)
    }

    fn get(&self, key: u64) -> Result<Option<u64>> {
        Ok(self.db.get(&key)?)
    }

    fn delete(&self, key: u64) -> Result<()> {
        Ok(self.db.delete(&key)?)
    }

    fn scan(&self, lo: u64, hi: u64, reverse: bool) -> Result<ScanIter<'_>> {
        let dir = if reverse {
            Direction::Reverse
        } else {
            Direction::Forward
        };
        Ok(Box::new(
            self.db
                .iter_dir(lo..=hi, dir)
                .map(|r| r.map_err(Into::into)),
        ))
    }

    fn count(&self, lo: u64, hi: u64) -> Result<u64> {
        Ok(self.db.count_range(lo..=hi)?)
    }

    fn sample(
        &self,
        lo: u64,
        hi: u64,
        k: usize,
        mut rng: &mut dyn rand::RngCore,
    ) -> Result<Vec<(u64, u64)>> {
        Ok(self.db.sample_range(&lo, &hi, k, &mut rng)?)
    }

    fn checkpoint(&self) -> Result<()> {
        Ok(self.db.checkpoint()?)
    }

    fn height(&self) -> Option<u32> {
        self.db.stats().ok().map(|s| s.tree.height)
    }

    fn io(&self) -> Option<IoTotals> {
        Some(totals(&self.db.io()))
    }

    fn close(self: Box<Self>) -> Result<()> {
        Ok(self.db.close()?)
    }
}
