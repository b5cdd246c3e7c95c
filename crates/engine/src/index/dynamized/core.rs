//! The framework: [`Dynamized`], a dynamic index over any [`Shard`].
//!
//! ## Writes
//! A put or delete is appended to the active buffer (one atomic slot claim, see `buffer`). The writer that
//! finds the buffer full *seals* it: a new version with a fresh active buffer (a recycled one when a flushed
//! buffer is free) is published and the flusher is woken. Writers stall only when `max_sealed_buffers`
//! buffers already wait for their flush: as long as memory for another buffer is allowed, the writer never
//! waits on reconstruction. With throttling on, while a flush runs each write is first delayed by one short
//! sleep with probability p = (expected remaining flush time / free slots of the active buffer) / (sleep
//! time), so the active buffer fills about when the flush ends: many tiny delays instead of one stall that
//! lasts the rest of the flush (the thesis's probabilistic throttling, with the rate tied to reconstruction
//! progress).
//!
//! ## Reconstruction: flushes and merges apart
//! Two background workers (or the writer itself, without background work); see `flush` and `merge`.
//! * The **flusher** turns the oldest sealed buffer into a shard and publishes it as a *pending* shard
//!   (newer than every level): a sort, a resolution against the shards gated by the global key filter
//!   (`global_keys`), and a shard build of N_b records — milliseconds, whatever the size of the structure.
//!   It waits only while `max_pending_shards` shards wait for their placement.
//! * The **merger** places pending shards, oldest first, into the levels by the layout policy (`layout`),
//!   merging as it says, and enforces δ; a long merge holds up only the merger, not the flushes.
//!
//! Shards are built through a `ShardFactory` (`factory`), the hook that lets deeper levels live on disk.
//!
//! ## Reads
//! Readers load the current version (an `ArcSwap`, no lock) and keep it for the whole query: shards are
//! immutable and tags only ever go from clear to set. Under tagging, the flusher sets a flush's tags only
//! once no reader still holds a version older than the flushed buffer, so a pinned reader never sees a tag
//! without also seeing the write that set it.
//!
//! ## Failures
//! A reconstruction that fails (an I/O error of an on-disk shard) stops the workers and fails every later
//! write with the error; reads go on against the last good version.

use super::buffer::MutableBuffer;
pub use super::buffer::{BufferEntry, OpKind};
use super::column_run::ColumnRun;
use super::global_keys::GlobalKeys;
use super::killers::TombstoneCache;
use super::layout;
use super::options::{DeletePolicy, DynOptions, Layout, RuntimeOptions};
use super::run::{MergeInput, Record};
use super::shard::{BuildOptions, Shard};
use super::version::{Level, ShardSlot, Version};
use crate::error::{Error, Result};
use arc_swap::ArcSwap;
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

mod factory;
mod flush;
mod reconstruction;
mod threads;
mod writes;

pub use factory::{Filters, InMemory, ShardFactory, merge_in_memory};

/// Counters of the framework's work.
#[derive(Debug, Default)]
pub struct DynCounters {
    pub flushes: AtomicU64,
    pub merges: AtomicU64,
    pub compactions: AtomicU64,
    pub merged_entries: AtomicU64,
    pub stalls: AtomicU64,
    pub stall_nanos: AtomicU64,
    pub throttled: AtomicU64,
    pub draws: AtomicU64,
    pub rejections: AtomicU64,
    pub fallbacks: AtomicU64,
    /// Times the flusher waited because `max_pending_shards` shards waited for the merger.
    pub flush_waits: AtomicU64,
    pub flush_wait_nanos: AtomicU64,
    /// Keys flushes resolved, and those of them the global key filter sent on to the shards.
    pub resolved_keys: AtomicU64,
    pub candidate_keys: AtomicU64,
    pub key_filter_rebuilds: AtomicU64,
    /// Buffers sealed, and those of them that were recycled flushed buffers (no allocation).
    pub buffers_sealed: AtomicU64,
    pub buffers_recycled: AtomicU64,
    /// CPU time of the background workers: flushes, merge tasks (parallel merge helpers not included) and
    /// rebuilds of the global key filter (see `threads`).
    pub flusher_cpu_nanos: AtomicU64,
    pub merger_cpu_nanos: AtomicU64,
    pub key_filter_cpu_nanos: AtomicU64,
}

/// A snapshot of [`DynCounters`] plus the structure's shape.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct DynStats {
    pub levels: Vec<Vec<u64>>,
    /// Flushed shards waiting for their placement in the levels.
    pub pending: usize,
    pub shards: usize,
    pub buffered: usize,
    pub tombstones: u64,
    pub tagged: u64,
    pub memory_bytes: usize,
    pub flushes: u64,
    pub merges: u64,
    pub compactions: u64,
    pub merged_entries: u64,
    pub stalls: u64,
    pub stall_secs: f64,
    pub throttled: u64,
    pub draws: u64,
    pub rejections: u64,
    pub fallbacks: u64,
    pub flush_waits: u64,
    pub flush_wait_secs: f64,
    pub resolved_keys: u64,
    pub candidate_keys: u64,
    pub key_filter_rebuilds: u64,
    pub buffers_sealed: u64,
    pub buffers_recycled: u64,
    pub flusher_cpu_secs: f64,
    pub merger_cpu_secs: f64,
    pub key_filter_cpu_secs: f64,
}

/// What throttling knows about reconstruction progress (nanoseconds on the `epoch` clock).
#[derive(Default)]
struct Throttling {
    /// When the running flush began (0: none running).
    flush_started: AtomicU64,
    /// Average duration of recent flushes (waits for the merger included).
    flush_nanos: AtomicU64,
    /// Average duration of one throttling sleep.
    sleep_nanos: AtomicU64,
    /// The xorshift state of the throttling draws.
    seed: AtomicU64,
}

#[derive(Default)]
struct WorkState {
    shutdown: bool,
    compact_requested: bool,
    /// A flush set tags: the merger checks δ.
    enforce_requested: bool,
    /// The flusher is between taking a buffer and publishing its shard.
    flushing: bool,
    /// The merger is between taking a task and publishing its result.
    merging: bool,
    /// A rebuild of the global key filter is under way.
    rebuilding: bool,
}

pub(crate) struct Shared<S> {
    pub(crate) opts: DynOptions,
    rt: RuntimeOptions,
    pub(crate) current: ArcSwap<Version<S>>,
    /// Work flags; every publication happens under it.
    work: Mutex<WorkState>,
    /// Held by every flush: flushes resolve against each other's results, one at a time, oldest first.
    flush_lock: Mutex<()>,
    /// Held by every merge task (placement, compaction, δ): each reads the levels, builds and publishes, so
    /// two at once would publish levels that drop each other's work.
    recon: Mutex<()>,
    /// Orders the tags a flush sets against the publication of merges that read the tagged shards (see
    /// `reconstruction::install`). Lock order: `flush_lock` or `recon`, then `tag_lock`, then `work`.
    tag_lock: Mutex<()>,
    /// Wakes the flusher.
    flush_cv: Condvar,
    /// Wakes the merger.
    merge_cv: Condvar,
    /// Progress: a flush or a merge task ended (stalled writers, `quiesce` and the flusher wait on it).
    done_cv: Condvar,
    next_shard_id: AtomicU64,
    failed: AtomicBool,
    failure: Mutex<String>,
    /// Where the failure found damaged bytes, if that is why it failed (reported as `Error::Corruption`).
    failure_damage: Mutex<Option<crate::error::Damage>>,
    pub(crate) counters: DynCounters,
    /// Sampling: the killer table over every tombstone of the current shards (`killers`).
    pub(crate) tombstone_cache: TombstoneCache,
    retired: Mutex<Vec<(u64, Weak<Version<S>>)>>,
    /// Ids of shards a published merge replaced, not yet collected by a checkpoint.
    replaced_ids: Mutex<Vec<u64>>,
    /// Flushed buffers kept for reuse: `.0` may still be read through old versions, `.1` are free (nobody
    /// can reach them; the writer that takes one resets it).
    spare_buffers: Mutex<SpareBuffers>,
    /// The global key filter (the flusher's; a rebuild swaps it).
    global_keys: Mutex<GlobalKeys>,
    /// A running rebuild of the global key filter (background mode).
    rebuild_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    factory: Box<dyn ShardFactory<S>>,
    throttling: Throttling,
    /// Time base of the throttling clock.
    epoch: Instant,
}

/// Set (to anything) in the environment, a dynamized index prints its [`DynStats`] to stderr when dropped.
pub const STATS_ENV: &str = "STRATA_DYN_STATS";

/// Flushed buffers kept for reuse: those that may still be read through old versions, and reset ones.
type SpareBuffers = (Vec<Arc<MutableBuffer>>, Vec<Arc<MutableBuffer>>);

/// A dynamized index over shards of type `S`.
pub struct Dynamized<S: Shard> {
    pub(crate) shared: Arc<Shared<S>>,
    workers: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

/// Shards a level keeps at rest under `opts`' layout: level 0's extra shards at open wait as pending ones.
fn shards_at_rest(opts: &DynOptions) -> usize {
    match opts.layout {
        Layout::Tiering => opts.scale_factor,
        Layout::Leveling | Layout::Bsm => 1,
    }
}

impl<S: Shard> Dynamized<S> {
    /// An empty index with in-memory shards.
    pub fn new(opts: DynOptions, rt: RuntimeOptions) -> Result<Dynamized<S>> {
        Self::with_parts(opts, rt, Box::new(InMemory), Vec::new(), 0)
    }

    /// An index over existing `levels` (as reloaded from disk), building new shards with `factory`;
    /// shard ids continue after `next_shard_id`. Level 0 shards beyond what the layout keeps there at rest
    /// (flushed shards a checkpoint saved before their placement) are placed again, oldest first.
    pub fn with_parts(
        opts: DynOptions,
        rt: RuntimeOptions,
        factory: Box<dyn ShardFactory<S>>,
        mut levels: Vec<Level<S>>,
        next_shard_id: u64,
    ) -> Result<Dynamized<S>> {
        opts.validate()?;
        let pending = match levels.first_mut() {
            Some(l0) if l0.len() > shards_at_rest(&opts) => l0.split_off(shards_at_rest(&opts)),
            _ => Vec::new(),
        };
        let version = Version {
            seq: 0,
            buffers: vec![Arc::new(MutableBuffer::new(opts.buffer_capacity))],
            pending,
            levels,
        };
        let global_keys = GlobalKeys::over(
            &version,
            opts.bloom_fpr,
            opts.buffer_capacity.saturating_mul(16),
        )?;
        let shared = Arc::new(Shared {
            current: ArcSwap::from_pointee(version),
            work: Mutex::new(WorkState::default()),
            flush_lock: Mutex::new(()),
            recon: Mutex::new(()),
            tag_lock: Mutex::new(()),
            flush_cv: Condvar::new(),
            merge_cv: Condvar::new(),
            done_cv: Condvar::new(),
            next_shard_id: AtomicU64::new(next_shard_id),
            failed: AtomicBool::new(false),
            failure: Mutex::new(String::new()),
            failure_damage: Mutex::new(None),
            counters: DynCounters::default(),
            tombstone_cache: TombstoneCache::default(),
            retired: Mutex::new(Vec::new()),
            replaced_ids: Mutex::new(Vec::new()),
            spare_buffers: Mutex::new((Vec::new(), Vec::new())),
            global_keys: Mutex::new(global_keys),
            rebuild_thread: Mutex::new(None),
            factory,
            throttling: Throttling {
                seed: AtomicU64::new(0x2545_F491_4F6C_DD1D),
                ..Throttling::default()
            },
            epoch: Instant::now(),
            opts,
            rt,
        });
        let mut workers = Vec::new();
        if shared.rt.background {
            let spawn = |name: &str, run: fn(Arc<Shared<S>>)| {
                let s = shared.clone();
                std::thread::Builder::new()
                    .name(name.into())
                    .spawn(move || run(s))
                    .map_err(|e| {
                        Error::ResourceExhausted(format!("cannot start the {name} thread: {e}"))
                    })
            };
            workers.push(spawn("strata-dyn-flush", Shared::flusher_loop)?);
            workers.push(spawn("strata-dyn-merge", Shared::merger_loop)?);
        } else if !shared.current.load().pending.is_empty() {
            shared.merge_all_inline()?;
        }
        Ok(Dynamized {
            shared,
            workers: Mutex::new(workers),
        })
    }

    /// The structural options.
    pub fn options(&self) -> &DynOptions {
        &self.shared.opts
    }

    /// The current version (pinned as long as the returned `Arc` lives).
    pub fn version(&self) -> Arc<Version<S>> {
        self.shared.current.load_full()
    }

    /// Inserts or overwrites `key`.
    pub fn put(&self, key: u64, value: u64, weight: f64) -> Result<()> {
        self.write_batch(&[BufferEntry::put(key, value, weight)])
    }

    /// Deletes `key` (no effect if absent).
    pub fn delete(&self, key: u64) -> Result<()> {
        self.write_batch(&[BufferEntry::delete(key)])
    }

    /// Applies puts and deletes as one batch: readers see all of it or none of it.
    pub fn write_batch(&self, entries: &[BufferEntry]) -> Result<()> {
        self.shared.write_batch(entries)
    }

    /// Waits until every sealed buffer is flushed and every flushed shard placed (with δ enforced) and,
    /// with `seal_active`, flushes the active buffer's contents too (writers must be quiescent for that to
    /// be final).
    pub fn quiesce(&self, seal_active: bool) -> Result<()> {
        let sh = &self.shared;
        if seal_active {
            let active = sh.current.load().buffers[0].clone();
            if !active.is_empty() {
                sh.seal(&active)?;
            }
        }
        if !sh.rt.background {
            sh.flush_all_inline()?;
            return sh.merge_all_inline();
        }
        let mut st = sh.work.lock();
        loop {
            sh.check_failed()?;
            let v = sh.current.load();
            let idle = v.buffers.len() == 1
                && v.pending.is_empty()
                && !st.flushing
                && !st.merging
                && !st.enforce_requested
                && !st.rebuilding;
            if idle {
                return Ok(());
            }
            drop(v);
            sh.flush_cv.notify_one();
            sh.merge_cv.notify_one();
            sh.done_cv.wait_for(&mut st, Duration::from_millis(50));
        }
    }

    /// Runs one compaction of the level with the most deleted entries (if any), synchronously.
    pub fn compact_once(&self) -> Result<bool> {
        self.quiesce(false)?;
        self.shared.compact_worst()
    }

    /// Counters and shape.
    pub fn stats(&self) -> DynStats {
        let v = self.version();
        let c = &self.shared.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        DynStats {
            levels: v
                .levels
                .iter()
                .map(|l| l.iter().map(|s| s.entries()).collect())
                .collect(),
            pending: v.pending.len(),
            shards: v.shard_count(),
            buffered: v.buffers.iter().map(|b| b.len()).sum(),
            tombstones: v
                .shards_newest_first()
                .map(|s| s.shard.tombstone_count() as u64)
                .sum(),
            tagged: v.shards_newest_first().map(|s| s.tags.count() as u64).sum(),
            memory_bytes: v
                .shards_newest_first()
                .map(|s| s.memory_bytes())
                .sum::<usize>()
                + v.buffers.iter().map(|b| b.memory_bytes()).sum::<usize>()
                + self.shared.global_keys.lock().memory_bytes()
                + self.shared.tombstone_cache.memory_bytes()
                + self.shared.spare_bytes(),
            flushes: get(&c.flushes),
            merges: get(&c.merges),
            compactions: get(&c.compactions),
            merged_entries: get(&c.merged_entries),
            stalls: get(&c.stalls),
            stall_secs: get(&c.stall_nanos) as f64 / 1e9,
            throttled: get(&c.throttled),
            draws: get(&c.draws),
            rejections: get(&c.rejections),
            fallbacks: get(&c.fallbacks),
            flush_waits: get(&c.flush_waits),
            flush_wait_secs: get(&c.flush_wait_nanos) as f64 / 1e9,
            resolved_keys: get(&c.resolved_keys),
            candidate_keys: get(&c.candidate_keys),
            key_filter_rebuilds: get(&c.key_filter_rebuilds),
            buffers_sealed: get(&c.buffers_sealed),
            buffers_recycled: get(&c.buffers_recycled),
            flusher_cpu_secs: get(&c.flusher_cpu_nanos) as f64 / 1e9,
            merger_cpu_secs: get(&c.merger_cpu_nanos) as f64 / 1e9,
            key_filter_cpu_secs: get(&c.key_filter_cpu_nanos) as f64 / 1e9,
        }
    }

    /// Fails if a background reconstruction failed.
    pub fn check_failed(&self) -> Result<()> {
        self.shared.check_failed()
    }

    /// The id the next new shard gets.
    pub fn next_shard_id(&self) -> u64 {
        self.shared.next_shard_id.load(Ordering::Acquire)
    }

    /// Takes the ids of the shards published merges replaced since the last call (a checkpoint removes the
    /// files of those its version does not list, and gives the others back).
    pub fn take_replaced(&self) -> Vec<u64> {
        std::mem::take(&mut *self.shared.replaced_ids.lock())
    }

    /// Gives back replaced ids [`take_replaced`](Self::take_replaced) returned that a checkpoint kept.
    pub fn return_replaced(&self, ids: impl IntoIterator<Item = u64>) {
        self.shared.replaced_ids.lock().extend(ids);
    }

    pub(crate) fn request_compaction(&self) {
        let mut st = self.shared.work.lock();
        st.compact_requested = true;
        self.shared.merge_cv.notify_one();
    }
}

impl<S: Shard> Drop for Dynamized<S> {
    fn drop(&mut self) {
        if std::env::var_os(STATS_ENV).is_some() {
            // A diagnostic for profiling runs: the counters of the whole life of the index, one JSON line.
            if let Ok(line) = serde_json::to_string(&self.stats()) {
                eprintln!("{STATS_ENV}: {line}");
            }
        }
        {
            let mut st = self.shared.work.lock();
            st.shutdown = true;
            self.shared.flush_cv.notify_all();
            self.shared.merge_cv.notify_all();
            self.shared.done_cv.notify_all();
        }
        for h in self.workers.lock().drain(..) {
            let _ = h.join();
        }
        if let Some(h) = self.shared.rebuild_thread.lock().take() {
            let _ = h.join();
        }
    }
}

impl<S: Shard> Shared<S> {
    fn check_failed(&self) -> Result<()> {
        if self.failed.load(Ordering::Acquire) {
            // Damage stays damage (the caller reports it as such); the index refuses work either way.
            if let Some(d) = self.failure_damage.lock().clone() {
                return Err(crate::error::Damage {
                    detail: format!(
                        "a reconstruction of the dynamized index failed: {}",
                        d.detail
                    ),
                    ..d
                }
                .into_error());
            }
            return Err(Error::Poisoned(format!(
                "a reconstruction of the dynamized index failed: {}",
                self.failure.lock()
            )));
        }
        Ok(())
    }

    fn fail(&self, e: &Error) {
        *self.failure.lock() = e.to_string();
        if let Error::Corruption {
            file,
            offset,
            detail,
        } = e
        {
            *self.failure_damage.lock() = Some(crate::error::Damage::new(file, *offset, detail));
        }
        self.failed.store(true, Ordering::Release);
        let _st = self.work.lock();
        self.done_cv.notify_all();
        self.flush_cv.notify_all();
        self.merge_cv.notify_all();
    }

    /// Publishes `v` as the current version, remembering the old one until its readers are gone. Called
    /// under the `work` lock.
    fn publish(&self, v: Version<S>) {
        let old = self.current.swap(Arc::new(v));
        let mut retired = self.retired.lock();
        retired.retain(|(_, w)| w.strong_count() > 0);
        retired.push((old.seq, Arc::downgrade(&old)));
    }

    /// Waits until no reader holds a version published before this call: publishes a copy of the current
    /// version as a fence and waits until every older version is dropped. A flush calls it after settling
    /// its buffer and before setting that buffer's tags, so a reader that can see those tags loaded its
    /// version when the buffer was complete, and finds there the operation that explains each tag. (Waiting
    /// only for versions that do not list the buffer is not enough: a reader that loaded a version while
    /// the buffer was still being filled may have looked a key up in it before the key's write landed.)
    /// The caller must not hold a version itself.
    fn wait_for_earlier_readers(&self) {
        let fence = {
            let _st = self.work.lock();
            let cur = self.current.load_full();
            let seq = cur.seq + 1;
            self.publish(Version {
                seq,
                buffers: cur.buffers.clone(),
                pending: cur.pending.clone(),
                levels: cur.levels.clone(),
            });
            seq
        };
        loop {
            let busy = {
                let mut retired = self.retired.lock();
                retired.retain(|(_, w)| w.strong_count() > 0);
                retired.iter().any(|(seq, _)| *seq < fence)
            };
            if !busy {
                return;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}
