//! # Engines under test
//!
//! Every engine the lab measures — Strata's index families and, later, peers behind cargo features —
//! implements two traits:
//!
//! * [`Engine`]: a factory with a stable name (`strata-btree`, later `rocksdb`, `lmdb`, …) and its
//!   [`Capabilities`]; it creates or opens a database directory and returns a [`Driver`].
//! * [`Driver`]: one open database with `u64` keys and `u64` values, the types the research experiments
//!   and the peers are compared on. Methods take `&self` and drivers are `Send + Sync`, so multi-threaded
//!   workloads can share one handle.
//!
//! Drivers report I/O counters when the engine has them ([`IoTotals`]); peers that do not return `None`.
//! Operations an engine cannot do (e.g. range sampling on a hash index or a peer) return
//! [`BenchError::Usage`](crate::BenchError::Usage); suites consult [`Capabilities`] first.

mod strata_btree;

pub use strata_btree::StrataBTree;

use crate::error::Result;
use std::path::Path;
use strata::Durability;

/// Settings every engine gets the same way.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Memory budget of the engine's cache (buffer pool, block cache, …) in bytes.
    pub cache_bytes: usize,
    /// Durability of writes.
    pub durability: Durability,
    /// Page size for page-based engines.
    pub page_size: usize,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            cache_bytes: 64 << 20,
            durability: Durability::None,
            page_size: 4096,
        }
    }
}

/// What an engine can do beyond get/insert/delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// Ordered scans.
    pub scan: bool,
    /// Range counts.
    pub count: bool,
    /// Independent uniform range sampling.
    pub sample: bool,
}

/// An engine under test: creates and opens databases.
pub trait Engine: Send + Sync {
    /// Stable name used in results (`strata-btree`, …).
    fn name(&self) -> &'static str;
    /// What the engine's drivers support.
    fn capabilities(&self) -> Capabilities;
    /// Creates an empty database in `dir` (which must not hold one).
    fn create(&self, dir: &Path, opts: &EngineOptions) -> Result<Box<dyn Driver>>;
    /// Opens the database in `dir`.
    fn open(&self, dir: &Path, opts: &EngineOptions) -> Result<Box<dyn Driver>>;
}

/// Records of a scan, in key order.
pub type ScanIter<'a> = Box<dyn Iterator<Item = Result<(u64, u64)>> + 'a>;

/// One open database with `u64` keys and values.
pub trait Driver: Send + Sync {
    /// Inserts or overwrites one record (with the engine's configured durability).
    fn insert(&self, key: u64, value: u64) -> Result<()>;
    /// Inserts records as one atomic batch.
    fn insert_batch(&self, records: &[(u64, u64)]) -> Result<()>;
    /// Looks a key up.
    fn get(&self, key: u64) -> Result<Option<u64>>;
    /// Removes a key (no effect if absent).
    fn delete(&self, key: u64) -> Result<()>;
    /// The records with keys in `[lo, hi]`, ascending (or descending when `reverse`).
    fn scan(&self, lo: u64, hi: u64, reverse: bool) -> Result<ScanIter<'_>>;
    /// Number of records with keys in `[lo, hi]`.
    fn count(&self, lo: u64, hi: u64) -> Result<u64>;
    /// `k` independent uniform samples, with replacement, of the records with keys in `[lo, hi]`.
    fn sample(
        &self,
        lo: u64,
        hi: u64,
        k: usize,
        rng: &mut dyn rand::RngCore,
    ) -> Result<Vec<(u64, u64)>>;
    /// Makes everything written so far durable in the engine's main data files (a checkpoint / flush of
    /// memory tables), so that a phase's I/O includes the cost of getting its writes to disk.
    fn checkpoint(&self) -> Result<()>;
    /// Levels of the index (root to leaf), for tree engines that report it.
    fn height(&self) -> Option<u32> {
        None
    }
    /// I/O counters since the driver was opened, if the engine keeps them.
    fn io(&self) -> Option<IoTotals>;
    /// Closes the database, reporting errors.
    fn close(self: Box<Self>) -> Result<()>;
}

/// I/O counters of one engine, summed over its files (`io_*`, `bytes_*`, `syncs`) and for its page files
/// alone (`page_*`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoTotals {
    /// Read calls (for page files: pages read).
    pub reads: u64,
    /// Write calls (for page files: pages written).
    pub writes: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub syncs: u64,
    /// Pages read from the index's page file.
    pub page_reads: u64,
    /// Pages written to the index's page file.
    pub page_writes: u64,
}

impl std::ops::Sub for IoTotals {
    type Output = IoTotals;
    fn sub(self, o: IoTotals) -> IoTotals {
        IoTotals {
            reads: self.reads.saturating_sub(o.reads),
            writes: self.writes.saturating_sub(o.writes),
            bytes_read: self.bytes_read.saturating_sub(o.bytes_read),
            bytes_written: self.bytes_written.saturating_sub(o.bytes_written),
            syncs: self.syncs.saturating_sub(o.syncs),
            page_reads: self.page_reads.saturating_sub(o.page_reads),
            page_writes: self.page_writes.saturating_sub(o.page_writes),
        }
    }
}

/// Every engine this build can measure.
pub fn engines() -> Vec<Box<dyn Engine>> {
    vec![Box::new(StrataBTree)]
}
