//! # The partitioned store
//!
//! N partitions, each its own Strata database in `DIR/p<i>` served by its own worker thread (shared nothing:
//! a partition's database is touched only by its worker). Keys are routed by **hash** (xxh3-64 of the key,
//! modulo N) or by **range** (N − 1 split keys: partition i holds keys in `[split[i−1], split[i])`).
//!
//! * [`route`](Store::route) maps a client key to its partition; [`overlapping`](Store::overlapping) lists
//!   the partitions a key range can touch (all of them under hash partitioning).
//! * Work reaches a partition as a [`Job`] of [`Op`]s; its worker runs jobs in arrival order, so one
//!   connection's operations on a partition happen in the order it sent them. Read-modify-write commands
//!   (SET NX/XX/GET, INCR, APPEND) are atomic because a partition runs one operation at a time.
//! * **Group commit**: a worker takes every job waiting in its queue (up to [`MAX_GROUP`]), runs them, and
//!   makes all their writes durable with one write-ahead-log append (and one `fsync` at durability `sync`)
//!   before answering any of them. Point reads inside a group see the group's earlier writes through an
//!   overlay; range reads commit the writes before them first.
//!
//! The layout is recorded in `DIR/SERVER.json` at creation (partition count, partitioning, split keys,
//! index family, key mode); reopening with a different layout is refused, since keys would be looked for in
//! the wrong partition.
//!
//! Key modes ([`KeyMode`]): `bytes` (keys and values are any bytes; B+-tree and Bε-tree) and `u64` (keys
//! and values are decimal integers stored as `u64`; the dynamized index, which stores only those).

mod layout;
mod worker;

pub use layout::{KeyMode, Layout, Partitioning};
pub use worker::{Job, Op, OpResult, SetCondition};

use crate::error::{ServerError, ServerResult};
use crossbeam_channel::Sender;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use strata::{Capabilities, Config, Durability, IndexConfig, Options, RawDb, TypeKind};

/// Most jobs one group commit takes from a partition's queue.
pub const MAX_GROUP: usize = 256;

/// How the store is opened.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    pub dir: PathBuf,
    pub partitions: usize,
    pub partitioning: Partitioning,
    pub index: IndexConfig,
    pub durability: Durability,
    /// Buffer pool budget of each partition, in bytes.
    pub cache_bytes: usize,
}

/// Per-partition counters (read by INFO and the benchmark's imbalance figures).
#[derive(Debug, Default)]
pub struct PartitionCounters {
    /// Operations run (reads and writes).
    pub ops: AtomicU64,
    /// Writes made durable.
    pub writes: AtomicU64,
    /// Group commits (WAL appends).
    pub commits: AtomicU64,
}

struct Partition {
    tx: Sender<Job>,
    db: RawDb,
    counters: Arc<PartitionCounters>,
    worker: Option<std::thread::JoinHandle<()>>,
}

/// The partitions and their workers.
pub struct Store {
    layout: Layout,
    parts: Vec<Partition>,
    caps: Capabilities,
    max_key: usize,
    dir: PathBuf,
    durability: Durability,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("dir", &self.dir)
            .field("partitions", &self.parts.len())
            .finish()
    }
}

impl Store {
    /// Opens (or creates) the partitions under `config.dir` and starts their workers.
    pub fn open(config: &StoreConfig) -> ServerResult<Store> {
        let layout = Layout::open_or_create(config)?;
        let (key, value) = match layout.key_mode {
            KeyMode::Bytes => (TypeKind::Bytes, TypeKind::Bytes),
            KeyMode::U64 => (TypeKind::U64, TypeKind::U64),
        };
        let db_config = Config {
            index: config.index.clone(),
            key,
            value,
            durability: config.durability,
            ..Config::default()
        };
        let options = Options {
            cache_bytes: config.cache_bytes,
            durability: Some(config.durability),
            ..Options::default()
        };
        let mut parts = Vec::with_capacity(layout.partitions);
        for i in 0..layout.partitions {
            let dir = partition_dir(&config.dir, i);
            let db = RawDb::open_or_create(&dir, &db_config, &options).map_err(|e| {
                ServerError::Engine(format!("partition {i} ({}): {e}", dir.display()))
            })?;
            let counters = Arc::new(PartitionCounters::default());
            let (tx, rx) = crossbeam_channel::unbounded();
            let worker = worker::spawn(i, db.clone(), config.durability, rx, counters.clone())?;
            parts.push(Partition {
                tx,
                db,
                counters,
                worker: Some(worker),
            });
        }
        let caps = parts
            .first()
            .map(|p| p.db.capabilities())
            .unwrap_or_default();
        let max_key = parts.first().map_or(0, |p| p.db.max_key_len());
        Ok(Store {
            layout,
            parts,
            caps,
            max_key,
            dir: config.dir.clone(),
            durability: config.durability,
        })
    }

    /// The layout (partitioning, key mode).
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Number of partitions.
    pub fn partitions(&self) -> usize {
        self.parts.len()
    }

    /// What the partitions' index can do.
    pub fn capabilities(&self) -> Capabilities {
        self.caps
    }

    /// Longest key the index takes, in encoded bytes.
    pub fn max_key_len(&self) -> usize {
        self.max_key
    }

    /// The directory the partitions live in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The durability of every write.
    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// The partition of an encoded key.
    pub fn route(&self, key: &[u8]) -> usize {
        self.layout.route(key)
    }

    /// The partitions an encoded key range `[lo, hi]` can touch, in key order for range partitioning.
    pub fn overlapping(&self, lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> Vec<usize> {
        self.layout.overlapping(lo, hi)
    }

    /// Sends `job` to partition `p`'s worker.
    pub fn submit(&self, p: usize, job: Job) -> ServerResult<()> {
        let part = self
            .parts
            .get(p)
            .ok_or_else(|| ServerError::Engine(format!("no partition {p}")))?;
        part.tx
            .send(job)
            .map_err(|_| ServerError::Engine(format!("partition {p} has stopped")))
    }

    /// Partition `p`'s counters.
    pub fn counters(&self, p: usize) -> Option<&PartitionCounters> {
        self.parts.get(p).map(|x| &*x.counters)
    }

    /// Partition `p`'s database (for statistics).
    pub fn db(&self, p: usize) -> Option<&RawDb> {
        self.parts.get(p).map(|x| &x.db)
    }

    /// Operations run per partition so far.
    pub fn ops_per_partition(&self) -> Vec<u64> {
        self.parts
            .iter()
            .map(|p| p.counters.ops.load(Ordering::Relaxed))
            .collect()
    }

    /// Stops the workers (after the jobs already queued) and closes the databases with a checkpoint.
    pub fn close(mut self) -> ServerResult<()> {
        self.stop_workers();
        let mut first_error = None;
        for (i, part) in std::mem::take(&mut self.parts).into_iter().enumerate() {
            if let Err(e) = part.db.close() {
                first_error
                    .get_or_insert(ServerError::Engine(format!("closing partition {i}: {e}")));
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    fn stop_workers(&mut self) {
        for part in &mut self.parts {
            // Dropping the sender ends the worker's loop once the queue is empty.
            let (dead, _) = crossbeam_channel::unbounded();
            part.tx = dead;
        }
        for part in &mut self.parts {
            if let Some(w) = part.worker.take() {
                let _ = w.join();
            }
        }
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        self.stop_workers();
    }
}

/// Where partition `i` lives.
pub fn partition_dir(dir: &Path, i: usize) -> PathBuf {
    dir.join(format!("p{i}"))
}
