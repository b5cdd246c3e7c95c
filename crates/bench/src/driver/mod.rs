//! # Engines under test
//!
//! Every engine the lab measures — Strata's index families and the peers behind cargo features — implements
//! two traits:
//!
//! * [`Engine`]: a factory with a stable name (`strata-btree`, `strata-dynamized`, `strata-betree`, `redb`,
//!   `fjall`, `lmdb`, `rocksdb`), its [`Capabilities`], a version string and a description of its settings for the report; it
//!   creates or opens a database directory and returns a [`Driver`].
//! * [`Driver`]: one open database with `u64` keys and byte-string values. Methods take `&self` and drivers
//!   are `Send + Sync`, so multi-threaded workloads share one handle.
//!
//! Keys are stored as 8 big-endian bytes by engines that only know byte strings, so that byte order is key
//! order. Values come in two formats ([`ValueFormat`]): `U64` values are exactly 8 bytes (Strata stores them
//! as its inline `u64` type, peers as 8 bytes), `Bytes` values have the run's value size.
//!
//! Every engine gets the same cache budget and the same durability ([`EngineOptions`]); each engine's
//! [`Engine::settings`] says how it maps them onto its own configuration.
//!
//! Drivers report I/O counters when the engine keeps them ([`IoTotals`]); peers return `None` and the lab
//! falls back to `/proc/self/io`. Operations an engine cannot do (range counts and sampling on peers and on
//! the Bε-tree) return [`BenchError::Usage`]; suites consult [`Capabilities`]
//! first.

#[cfg(feature = "fjall")]
mod fjall;
#[cfg(feature = "lmdb")]
mod lmdb;
#[cfg(feature = "redb")]
mod redb;
#[cfg(feature = "rocksdb")]
mod rocksdb;
mod static_ideal;
mod strata_betree;
mod strata_btree;
mod strata_dynamized;
mod strata_family;
mod weighted_abtree;

#[cfg(feature = "fjall")]
pub use fjall::Fjall;
#[cfg(feature = "lmdb")]
pub use lmdb::Lmdb;
#[cfg(feature = "redb")]
pub use redb::Redb;
#[cfg(feature = "rocksdb")]
pub use rocksdb::RocksDb;
pub use static_ideal::{StaticAlias, StaticIsam, StaticRecord};
pub use strata_betree::StrataBeTree;
pub use strata_btree::StrataBTree;
pub use strata_dynamized::StrataDynamized;
pub use strata_family::{StrataFamily, capabilities_of};
pub use weighted_abtree::{
    WeightedAbTree, WeightedAbTreeDriver, WeightedBPlusTree, WeightedTreeError,
};

use crate::error::{BenchError, Result};
use std::path::Path;
use strata::Durability;

/// How values are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueFormat {
    /// Exactly 8 bytes: a `u64` (big-endian).
    U64,
    /// Byte strings of the run's value size.
    Bytes,
}

/// Settings every engine gets the same way.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Memory budget of the engine's cache (buffer pool, block cache, map size is separate) in bytes.
    pub cache_bytes: usize,
    /// Durability of writes: `None` (may be lost by a process crash), `Flush` (handed to the OS before the
    /// write returns), `Sync` (on stable storage before the write returns).
    pub durability: Durability,
    /// Page size for page-based engines.
    pub page_size: usize,
    /// Value format of the database.
    pub values: ValueFormat,
    /// Read and write the database's files with O_DIRECT, bypassing the OS page cache. Strata's engines
    /// honour it (their settings line says so); the peers ignore it.
    pub direct_io: bool,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            cache_bytes: 64 << 20,
            durability: Durability::None,
            page_size: 4096,
            values: ValueFormat::U64,
            direct_io: false,
        }
    }
}

/// What an engine can do beyond get/put/delete/scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// Range counts.
    pub count: bool,
    /// Independent uniform range sampling.
    pub sample: bool,
    /// Byte-string values ([`ValueFormat::Bytes`]); engines without them store `u64` values only.
    pub byte_values: bool,
}

impl Capabilities {
    /// Plain key-value engines: byte-string values, no range counts, no sampling.
    pub const KEY_VALUE: Capabilities = Capabilities {
        count: false,
        sample: false,
        byte_values: true,
    };
}

/// An engine under test: creates and opens databases.
pub trait Engine: Send + Sync {
    /// Stable name used in results (`strata-btree`, `redb`, …).
    fn name(&self) -> &'static str;
    /// The engine's version (crate version for peers).
    fn version(&self) -> String;
    /// What the engine's drivers support (default: plain key-value, no counts or sampling).
    fn capabilities(&self) -> Capabilities {
        Capabilities::KEY_VALUE
    }
    /// Whether the engine keeps keys in order, so scans and seeks work (default: yes). An engine without
    /// order (the hash family) runs only in the suites that skip ordered phases for it ([`run_unordered`]).
    fn ordered(&self) -> bool {
        true
    }
    /// How `opts` map onto this engine's own settings, one line for the report.
    fn settings(&self, opts: &EngineOptions) -> String;
    /// Creates an empty database in `dir` when `create` (the directory must not hold one), else opens the
    /// database in `dir` (which must exist).
    fn open_dir(&self, dir: &Path, opts: &EngineOptions, create: bool) -> Result<Box<dyn Driver>>;
    /// Creates an empty database in `dir` (which must not hold one).
    fn create(&self, dir: &Path, opts: &EngineOptions) -> Result<Box<dyn Driver>> {
        self.open_dir(dir, opts, true)
    }
    /// Opens the database in `dir`.
    fn open(&self, dir: &Path, opts: &EngineOptions) -> Result<Box<dyn Driver>> {
        self.open_dir(dir, opts, false)
    }
}

/// Receives the records of a scan, in order; an error stops the scan and is returned by it.
pub type Visit<'a> = dyn FnMut(u64, &[u8]) -> Result<()> + 'a;

/// One open database with `u64` keys and byte-string values.
pub trait Driver: Send + Sync {
    /// Name of the engine this driver belongs to (as [`Engine::name`]).
    fn engine(&self) -> &'static str;
    /// Inserts or overwrites one record, with the configured durability.
    fn put(&self, key: u64, value: &[u8]) -> Result<()>;
    /// Inserts or overwrites one record with a sampling weight (refused by engines without weights).
    fn put_weighted(&self, key: u64, value: &[u8], weight: f64) -> Result<()> {
        let _ = (key, value, weight);
        Err(BenchError::Usage(format!(
            "{} does not store weights",
            self.engine()
        )))
    }
    /// Inserts records as one atomic batch.
    fn put_batch(&self, records: &[(u64, &[u8])]) -> Result<()>;
    /// Loads `records` (strictly increasing keys, each with its value) into the empty database at once:
    /// structures built bottom-up, no per-record write path. Returns the records loaded; engines without a
    /// bulk load refuse.
    fn bulk_load(&self, records: &mut dyn Iterator<Item = (u64, Vec<u8>)>) -> Result<u64> {
        let _ = records;
        Err(unsupported(self.engine(), "bulk loads"))
    }
    /// Looks a key up: replaces the contents of `value` and returns `true` when found.
    fn get(&self, key: u64, value: &mut Vec<u8>) -> Result<bool>;
    /// Removes a key (no effect if absent).
    fn delete(&self, key: u64) -> Result<()>;
    /// Visits up to `limit` records with keys in `[lo, hi]`, ascending (descending when `reverse`), and
    /// returns how many it visited.
    fn scan(
        &self,
        lo: u64,
        hi: u64,
        limit: u64,
        reverse: bool,
        visit: &mut Visit<'_>,
    ) -> Result<u64> {
        if lo > hi || limit == 0 {
            return Ok(0);
        }
        self.scan_range(lo, hi, limit, reverse, visit)
    }
    /// [`scan`](Self::scan) for a non-empty range (`lo <= hi`) and `limit >= 1`.
    fn scan_range(
        &self,
        lo: u64,
        hi: u64,
        limit: u64,
        reverse: bool,
        visit: &mut Visit<'_>,
    ) -> Result<u64>;
    /// Number of records with keys in `[lo, hi]` (refused by engines without [`Capabilities::count`]).
    fn count(&self, lo: u64, hi: u64) -> Result<u64> {
        let _ = (lo, hi);
        Err(unsupported(self.engine(), "range counts"))
    }
    /// Hands `k` independent uniform samples, with replacement, of the records with keys in `[lo, hi]` to
    /// `visit` (key, value bytes), without allocating per sample (the sampling suites time this); refused by
    /// engines without [`Capabilities::sample`].
    fn sample_visit(
        &self,
        lo: u64,
        hi: u64,
        k: usize,
        rng: &mut dyn rand::RngCore,
        visit: &mut dyn FnMut(u64, &[u8]) -> Result<()>,
    ) -> Result<()> {
        let _ = (lo, hi, k, rng, visit);
        Err(unsupported(self.engine(), "range sampling"))
    }
    /// [`sample_visit`](Self::sample_visit), collected.
    fn sample(
        &self,
        lo: u64,
        hi: u64,
        k: usize,
        rng: &mut dyn rand::RngCore,
    ) -> Result<Vec<(u64, Vec<u8>)>> {
        let mut out = Vec::new();
        self.sample_visit(lo, hi, k, rng, &mut |key, value| {
            out.push((key, value.to_vec()));
            Ok(())
        })?;
        Ok(out)
    }
    /// Makes everything written so far durable in the engine's main data files (a checkpoint, a flush of
    /// memory tables), so that a phase's I/O includes the cost of getting its writes to disk.
    fn checkpoint(&self) -> Result<()>;
    /// Waits until background work that the writes so far started has finished (reconstructions,
    /// compactions), so that a phase's time and I/O include the work its writes caused; no wait by default.
    fn settle(&self) -> Result<()> {
        Ok(())
    }
    /// Levels of the index (root to leaf), for tree engines that report it.
    fn height(&self) -> Option<u32> {
        None
    }
    /// I/O counters since the driver was opened, if the engine keeps them.
    fn io(&self) -> Option<IoTotals> {
        None
    }
    /// Closes the database, reporting errors.
    fn close(self: Box<Self>) -> Result<()>;
}

/// The error of an operation (`what`: "range counts", "range sampling") that `engine` does not support.
pub(crate) fn unsupported(engine: &str, what: &str) -> BenchError {
    BenchError::Usage(format!("{engine} does not support {what}"))
}

/// A key stored as 8 big-endian bytes by `engine`; anything else is reported as the engine's error.
#[cfg_attr(
    not(any(feature = "fjall", feature = "lmdb", feature = "rocksdb")),
    allow(dead_code)
)]
pub(crate) fn key_from_be(engine: &'static str, bytes: &[u8]) -> Result<u64> {
    let arr: [u8; 8] = bytes.try_into().map_err(|_| {
        BenchError::peer(
            engine,
            format!("a {}-byte key in the database", bytes.len()),
        )
    })?;
    Ok(u64::from_be_bytes(arr))
}

/// Feeds up to `limit` items of `items` to `each`; returns how many.
#[cfg_attr(
    not(any(feature = "fjall", feature = "lmdb", feature = "redb")),
    allow(dead_code)
)]
pub(crate) fn visit_limited<T>(
    items: impl Iterator<Item = T>,
    limit: u64,
    mut each: impl FnMut(T) -> Result<()>,
) -> Result<u64> {
    let mut seen = 0;
    for item in items.take(usize::try_from(limit).unwrap_or(usize::MAX)) {
        each(item)?;
        seen += 1;
    }
    Ok(seen)
}

/// `items` forwards, or backwards when `reverse`.
#[cfg_attr(not(any(feature = "fjall", feature = "redb")), allow(dead_code))]
pub(crate) fn directed<'a, T: 'a>(
    items: impl DoubleEndedIterator<Item = T> + 'a,
    reverse: bool,
) -> Box<dyn Iterator<Item = T> + 'a> {
    if reverse {
        Box::new(items.rev())
    } else {
        Box::new(items)
    }
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

/// Every engine this build can measure: Strata's families first (those with a driver of their own, then
/// every other family of the engine's registry as [`StrataFamily`]), then the peers compiled in. Engines
/// without key order (the hash family) are in this list but not in the default selection
/// ([`default_engines`]): most suites scan.
pub fn engines() -> Vec<Box<dyn Engine>> {
    let mut all: Vec<Box<dyn Engine>> = vec![
        Box::new(StrataBTree),
        Box::new(StrataDynamized::default()),
        Box::new(StrataBeTree::default()),
    ];
    for &kind in strata::IndexKind::ALL {
        let generic = StrataFamily::new(kind);
        if !all.iter().any(|e| e.name() == generic.name()) {
            all.push(Box::new(generic));
        }
    }
    #[cfg(feature = "redb")]
    all.push(Box::new(Redb));
    #[cfg(feature = "fjall")]
    all.push(Box::new(Fjall));
    #[cfg(feature = "lmdb")]
    all.push(Box::new(Lmdb));
    #[cfg(feature = "rocksdb")]
    all.push(Box::new(RocksDb));
    all
}

/// The engines a run measures when `--engines` is not given: every engine with key order.
pub fn default_engines() -> Vec<Box<dyn Engine>> {
    engines().into_iter().filter(|e| e.ordered()).collect()
}

/// Suites that run engines without key order (their ordered phases are skipped for them): `dbbench`
/// (readseq and seekrandom skipped).
pub fn run_unordered(suite: &str) -> bool {
    suite == "dbbench"
}

/// The engines named in `list` (comma-separated), or all of them for `None`; unknown names are an error
/// that lists what this build has.
pub fn select(list: Option<&str>) -> Result<Vec<Box<dyn Engine>>> {
    let Some(list) = list else {
        return Ok(default_engines());
    };
    let all = engines();
    let names: Vec<&str> = list
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if names.is_empty() {
        return Err(crate::BenchError::Usage("--engines is empty".into()));
    }
    let available: Vec<&str> = all.iter().map(|e| e.name()).collect();
    for n in &names {
        if !available.contains(n) {
            return Err(crate::BenchError::Usage(format!(
                "unknown engine {n:?}; this build has: {} (peers need `--features peers` or `rocksdb`)",
                available.join(", ")
            )));
        }
    }
    Ok(all
        .into_iter()
        .filter(|e| names.contains(&e.name()))
        .collect())
}
