//! # The partitioned store
//!
//! N partitions, each its own Strata database in `DIR/p<i>` (shared nothing: a partition's writes and reads
//! of its group state run under its worker lock, one job at a time). Keys are routed by **hash** (xxh3-64 of
//! the key, modulo N) or by **range** (N − 1 split keys: partition i holds keys in `[split[i−1], split[i])`).
//!
//! * [`route`](Store::route) maps a client key to its partition; [`overlapping`](Store::overlapping) lists
//!   the partitions a key range can touch (all of them under hash partitioning).
//! * Work reaches a partition as a [`Job`] of [`Op`]s through its [`executor`]: the submitting connection
//!   runs the partition's queue itself when the partition is idle (no thread hand-off), else the thread
//!   running it does; range operations and durability `sync` run on the partition's own thread. Jobs run in
//!   queue order, so one connection's operations on a partition happen in the order it sent them.
//!   Read-modify-write commands (SET NX/XX/GET, INCR, APPEND) are atomic because a partition runs one
//!   operation at a time.
//! * **Group commit**: whoever runs the queue takes every job waiting in it (up to [`MAX_GROUP`]), runs
//!   them, and makes all their writes durable with one write-ahead-log append (and one `fsync` at durability
//!   `sync`) before answering any of them. Point reads inside a group see the group's earlier writes through
//!   an overlay; range reads commit the writes before them first.
//!
//! The layout is recorded in `DIR/SERVER.json` at creation (partition count, partitioning, split keys,
//! index family, key mode); reopening with a different layout is refused, since keys would be looked for in
//! the wrong partition.
//!
//! Key modes ([`KeyMode`]): `bytes` (keys and values are any bytes; B+-tree and Bε-tree) and `u64` (keys
//! and values are decimal integers stored as `u64`; the dynamized index, which stores only those).

mod executor;
mod layout;
mod pacer;
mod snapshot;
mod worker;

pub use layout::{KeyMode, Layout, Partitioning};
pub use worker::{BACKGROUND_SYNC, Job, JobOps, JobReply, JobResults, Op, OpResult, SetCondition};
pub(crate) use worker::{counter_bytes, incr, writes};

use crate::cache::{CacheConfig, HotCache};
use crate::error::{ServerError, ServerResult};
use crossbeam_channel::Sender;
use executor::Executor;
use parking_lot::RwLock;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use strata::{Capabilities, Config, Durability, IndexConfig, Options, RawDb, TypeKind};

/// Partitions of `strata serve` unless `--partitions` says otherwise (one per core of a two-core machine).
pub const DEFAULT_PARTITIONS: u32 = 2;

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
    /// The hot-key write-back cache (`None`: off).
    pub hot_cache: Option<CacheConfig>,
    /// Emulate each partition as a server that serves at most this many operations per second (for
    /// benchmarks: see `store::pacer`). Every job then runs on the partition's own thread and point reads
    /// go through the partition too. `None`: no limit.
    pub partition_capacity: Option<u64>,
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
    /// Cached values written into the partition (range reads, evictions, snapshots).
    pub write_backs: AtomicU64,
}

struct Partition {
    exec: Arc<Executor>,
    db: RawDb,
    counters: Arc<PartitionCounters>,
    worker: Option<std::thread::JoinHandle<()>>,
}

/// The partitions and their workers.
pub struct Store {
    layout: Layout,
    parts: Vec<Partition>,
    cache: Option<Arc<HotCache>>,
    /// Every partition's executor (shared with the workers and the snapshot thread; emptied at stop).
    queues: Arc<RwLock<Vec<Arc<Executor>>>>,
    snapshots: Option<(Sender<()>, std::thread::JoinHandle<()>)>,
    caps: Capabilities,
    max_key: usize,
    dir: PathBuf,
    durability: Durability,
    /// Partitions emulate servers of fixed capacity (every operation goes through their queues).
    paced: bool,
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
        let mut dbs = Vec::with_capacity(layout.partitions);
        for i in 0..layout.partitions {
            let dir = partition_dir(&config.dir, i);
            let db = RawDb::open_or_create(&dir, &db_config, &options).map_err(|e| {
                ServerError::Engine(format!("partition {i} ({}): {e}", dir.display()))
            })?;
            dbs.push(db);
        }
        // Acknowledged writes of cached keys that never reached their partitions go there first.
        let (generation, seq) = recover_cache_log(&config.dir, &layout, &dbs, config.durability)?;
        let cache = match &config.hot_cache {
            Some(c) => Some(Arc::new(HotCache::new(
                c.clone(),
                &config.dir,
                generation,
                seq,
                layout.partitions,
                config.durability,
            )?)),
            None => None,
        };
        let queues = Arc::new(RwLock::new(Vec::with_capacity(layout.partitions)));
        let peers = worker::Peers {
            cache: cache.clone(),
            partitions: queues.clone(),
        };
        // A connection's thread runs an idle partition's point jobs itself, except at `sync`, where every
        // commit waits for an fsync that must not stall a network thread.
        // An emulated partition server paces its own thread, never a network thread.
        let paced = config.partition_capacity.is_some();
        let inline = config.durability != Durability::Sync && !paced;
        let mut parts = Vec::with_capacity(layout.partitions);
        for (i, db) in dbs.into_iter().enumerate() {
            let counters = Arc::new(PartitionCounters::default());
            let state = worker::Worker::new(
                i,
                db.clone(),
                config.durability,
                counters.clone(),
                peers.clone(),
                config.partition_capacity.map(pacer::Pacer::new),
            );
            let (exec, woken) = Executor::new(state, inline);
            let exec = Arc::new(exec);
            queues.write().push(exec.clone());
            let on_thread = exec.clone();
            let thread = std::thread::Builder::new()
                .name(format!("strata-p{i}"))
                .spawn(move || on_thread.thread_loop(woken))
                .map_err(|e| {
                    ServerError::Engine(format!("starting the thread of partition {i}: {e}"))
                })?;
            parts.push(Partition {
                exec,
                db,
                counters,
                worker: Some(thread),
            });
        }
        let snapshots = match &cache {
            Some(c) => Some(snapshot::spawn(
                c.clone(),
                queues.clone(),
                config.dir.clone(),
                c.config().snapshot_interval,
            )?),
            None => None,
        };
        let caps = parts
            .first()
            .map(|p| p.db.capabilities())
            .unwrap_or_default();
        let max_key = parts.first().map_or(0, |p| p.db.max_key_len());
        Ok(Store {
            layout,
            parts,
            cache,
            queues,
            snapshots,
            caps,
            max_key,
            dir: config.dir.clone(),
            durability: config.durability,
            paced,
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

    /// Runs `job` at partition `p`: on this thread when the partition is idle and the job is made of point
    /// operations, else by the thread running the partition (see [`executor`]). The answers arrive on the
    /// job's reply channel.
    pub fn submit(&self, p: usize, job: Job) -> ServerResult<()> {
        let part = self
            .parts
            .get(p)
            .ok_or_else(|| ServerError::Engine(format!("no partition {p}")))?;
        part.exec
            .submit(job)
            .map_err(|_| ServerError::Engine(format!("partition {p} has stopped")))
    }

    /// Queues `job` at partition `p` without running it yet (see [`Executor::enqueue`]); the caller runs the
    /// queue with [`run_queued`](Self::run_queued) once other connections had their turn to queue theirs.
    pub fn enqueue(&self, p: usize, job: Job) -> ServerResult<()> {
        let part = self
            .parts
            .get(p)
            .ok_or_else(|| ServerError::Engine(format!("no partition {p}")))?;
        part.exec
            .enqueue(job)
            .map_err(|_| ServerError::Engine(format!("partition {p} has stopped")))
    }

    /// Runs partition `p`'s queue on this thread if it is idle (after [`enqueue`](Self::enqueue)).
    pub fn run_queued(&self, p: usize) {
        if let Some(part) = self.parts.get(p) {
            part.exec.run_queued();
        }
    }

    /// Whether a job with writes should be queued, left for the other connections' jobs of the moment to
    /// join, then run (one WAL write for all of them): at durability `flush`, where every commit is a
    /// `write` call. (At `none` a commit only buffers; at `sync` the partition's thread runs every job and
    /// groups what queues while it syncs.)
    pub fn defers_commits(&self) -> bool {
        self.durability == Durability::Flush
    }

    /// Partition `p`'s database for point reads on the calling thread, `None` when reads must go through
    /// the partition's queue (emulated partition servers). [`Self::read_direct`] reads it and counts them.
    pub fn direct_reader(&self, p: usize) -> Option<&RawDb> {
        if self.paced {
            return None;
        }
        Some(&self.parts.get(p)?.db)
    }

    /// Counts `n` point reads made on partition `p`'s database through [`Self::direct_reader`] as
    /// operations of the partition.
    fn count_reads(&self, p: usize, n: usize) {
        if let Some(part) = self.parts.get(p) {
            part.counters.ops.fetch_add(n as u64, Ordering::Relaxed);
        }
    }

    /// Looks `keys` up in partition `p`'s database on the calling thread, counted as its operations: one
    /// batched lookup (`RawDb::get_many`: its cache misses overlap), or each key alone with its own answer if
    /// the batch fails. Gives `answer` each key's index and answer, in order. False, with nothing looked up,
    /// when the partition takes no direct reads ([`Self::direct_reader`]).
    pub fn read_direct(
        &self,
        p: usize,
        keys: &[&[u8]],
        mut answer: impl FnMut(usize, strata::Result<Option<Vec<u8>>>),
    ) -> bool {
        let Some(db) = self.direct_reader(p) else {
            return false;
        };
        self.count_reads(p, keys.len());
        match db.get_many(keys) {
            Ok(values) => values
                .into_iter()
                .enumerate()
                .for_each(|(i, v)| answer(i, Ok(v))),
            Err(_) => {
                for (i, key) in keys.iter().enumerate() {
                    answer(i, db.get(key));
                }
            }
        }
        true
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

    /// The hot-key cache, if on.
    pub fn cache(&self) -> Option<&Arc<HotCache>> {
        self.cache.as_ref()
    }

    /// Stops the workers (after the jobs already queued), writes every cached value into its partition, and
    /// closes the databases with a checkpoint.
    pub fn close(mut self) -> ServerResult<()> {
        self.stop_snapshots();
        let mut first_error = None;
        if let Some(cache) = self.cache.clone()
            && let Err(e) = snapshot::take(&cache, &self.queues, &self.dir)
        {
            first_error = Some(e);
        }
        self.stop_workers();
        for (i, part) in std::mem::take(&mut self.parts).into_iter().enumerate() {
            if let Err(e) = part.db.close() {
                first_error
                    .get_or_insert(ServerError::Engine(format!("closing partition {i}: {e}")));
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    fn stop_snapshots(&mut self) {
        if let Some((stop, thread)) = self.snapshots.take() {
            drop(stop);
            let _ = thread.join();
        }
    }

    fn stop_workers(&mut self) {
        self.stop_snapshots();
        // Each partition's thread runs what is queued, then ends; the workers no longer reach each other.
        self.queues.write().clear();
        for part in &self.parts {
            part.exec.stop();
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

/// Applies the cache log's acknowledged writes to their partitions (made durable), then deletes the log.
/// Returns the next log generation and the highest sequence number used.
fn recover_cache_log(
    dir: &Path,
    layout: &Layout,
    dbs: &[RawDb],
    durability: Durability,
) -> ServerResult<(u64, u64)> {
    use crate::cache::log::{LogRecord, recover, remove_generations};
    let crate::cache::log::Recovered {
        last,
        max_seq: seq,
        generations: gens,
    } = recover(dir)?;
    let mut per_part: Vec<Vec<strata::WriteOp>> = vec![Vec::new(); dbs.len()];
    for (key, rec) in last {
        let p = layout.route(&key);
        match rec {
            LogRecord::Write { value, .. } => per_part[p].push(strata::WriteOp::Put { key, value }),
            LogRecord::Delete { .. } => per_part[p].push(strata::WriteOp::Delete { key }),
            LogRecord::Evict { .. } => {}
        }
    }
    for (p, ops) in per_part.iter().enumerate() {
        if !ops.is_empty() {
            let durable = if durability == Durability::None {
                Durability::Sync
            } else {
                durability
            };
            dbs[p].write(ops, Some(durable)).map_err(|e| {
                ServerError::Engine(format!("replaying the cache log into partition {p}: {e}"))
            })?;
            dbs[p]
                .flush()
                .map_err(|e| ServerError::Engine(format!("syncing partition {p}: {e}")))?;
        }
    }
    remove_generations(dir, &gens)?;
    Ok((gens.last().map_or(1, |g| g + 1), seq))
}

/// Where partition `i` lives.
pub fn partition_dir(dir: &Path, i: usize) -> PathBuf {
    dir.join(format!("p{i}"))
}
