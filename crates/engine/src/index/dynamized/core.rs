//! The framework: [`Dynamized`], a dynamic index over any [`Shard`].
//!
//! ## Writes
//! A put or delete is appended to the active buffer (one atomic slot claim, see `buffer`). The writer that
//! finds the buffer full *seals* it: a new version with a fresh active buffer is published and the
//! reconstruction worker is woken. Writers stall only when `max_sealed_buffers` buffers already wait for
//! their flush. With throttling on, while a flush runs each write is first delayed by one short sleep with
//! probability p = (expected remaining flush time / free slots of the active buffer) / (sleep time), so the
//! active buffer fills about when the flush ends: many tiny delays instead of one stall that lasts the rest
//! of the flush (the thesis's probabilistic throttling, with the rate tied to reconstruction progress).
//!
//! ## Reconstruction
//! One background worker (or the writer itself, without background work) turns sealed buffers into shards;
//! see `reconstruction`. Shards are built through a `ShardFactory` (`factory`), the hook that lets deeper
//! levels live on disk.

//! ## Reads
//! Readers load the current version (an `ArcSwap`, no lock) and keep it for the whole query: shards are
//! immutable and tags only ever go from clear to set. Under tagging, the worker sets a flush's tags only once
//! no reader still holds a version older than the flushed buffer, so a pinned reader never sees a tag without
//! also seeing the write that set it.
//!
//! ## Failures
//! A reconstruction that fails (an I/O error of an on-disk shard) stops the worker and fails every later
//! write with the error; reads go on against the last good version.

use super::buffer::MutableBuffer;
pub use super::buffer::{BufferEntry, OpKind};
use super::layout;
use super::options::{DeletePolicy, DynOptions, RuntimeOptions};
use super::run::{MergeInput, Record, SortedRun};
use super::shard::{BuildOptions, Shard};
use super::version::{Level, ShardSlot, Version, filters_for_run};
use crate::error::{Error, Result};
use arc_swap::ArcSwap;
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

mod factory;
mod reconstruction;

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
}

/// A snapshot of [`DynCounters`] plus the structure's shape.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct DynStats {
    pub levels: Vec<Vec<u64>>,
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
}

/// What throttling knows about reconstruction progress (nanoseconds on the `epoch` clock).
#[derive(Default)]
struct Throttling {
    /// When the running flush began (0: none running).
    flush_started: AtomicU64,
    /// Average duration of recent flushes (their merges included).
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
    /// The worker is between taking a task and publishing its result.
    busy: bool,
}

pub(crate) struct Shared<S> {
    pub(crate) opts: DynOptions,
    rt: RuntimeOptions,
    pub(crate) current: ArcSwap<Version<S>>,
    work: Mutex<WorkState>,
    /// Held by every reconstruction (flush or compaction): each reads the levels, builds and publishes, so
    /// two at once (inline writers, or `compact_once` beside the worker) would publish levels that drop each
    /// other's work. Taken before `work`, never while holding it.
    recon: Mutex<()>,
    work_cv: Condvar,
    done_cv: Condvar,
    next_shard_id: AtomicU64,
    failed: AtomicBool,
    failure: Mutex<String>,
    /// Where the failure found damaged bytes, if that is why it failed (reported as `Error::Corruption`).
    failure_damage: Mutex<Option<crate::error::Damage>>,
    pub(crate) counters: DynCounters,
    retired: Mutex<Vec<(u64, Weak<Version<S>>)>>,
    factory: Box<dyn ShardFactory<S>>,
    throttling: Throttling,
    /// Time base of the throttling clock.
    epoch: Instant,
}

/// A dynamized index over shards of type `S`.
pub struct Dynamized<S: Shard> {
    pub(crate) shared: Arc<Shared<S>>,
    worker: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl<S: Shard> Dynamized<S> {
    /// An empty index with in-memory shards.
    pub fn new(opts: DynOptions, rt: RuntimeOptions) -> Result<Dynamized<S>> {
        Self::with_parts(opts, rt, Box::new(InMemory), Vec::new(), 0)
    }

    /// An index over existing `levels` (as reloaded from disk), building new shards with `factory`;
    /// shard ids continue after `next_shard_id`.
    pub fn with_parts(
        opts: DynOptions,
        rt: RuntimeOptions,
        factory: Box<dyn ShardFactory<S>>,
        levels: Vec<Level<S>>,
        next_shard_id: u64,
    ) -> Result<Dynamized<S>> {
        opts.validate()?;
        let version = Version {
            seq: 0,
            buffers: vec![Arc::new(MutableBuffer::new(opts.buffer_capacity))],
            levels,
        };
        let shared = Arc::new(Shared {
            current: ArcSwap::from_pointee(version),
            work: Mutex::new(WorkState::default()),
            recon: Mutex::new(()),
            work_cv: Condvar::new(),
            done_cv: Condvar::new(),
            next_shard_id: AtomicU64::new(next_shard_id),
            failed: AtomicBool::new(false),
            failure: Mutex::new(String::new()),
            failure_damage: Mutex::new(None),
            counters: DynCounters::default(),
            retired: Mutex::new(Vec::new()),
            factory,
            throttling: Throttling {
                seed: AtomicU64::new(0x2545_F491_4F6C_DD1D),
                ..Throttling::default()
            },
            epoch: Instant::now(),
            opts,
            rt,
        });
        let worker = if shared.rt.background {
            let s = shared.clone();
            Some(
                std::thread::Builder::new()
                    .name("strata-dynamized".into())
                    .spawn(move || s.worker_loop())
                    .map_err(|e| {
                        Error::ResourceExhausted(format!(
                            "cannot start the reconstruction thread: {e}"
                        ))
                    })?,
            )
        } else {
            None
        };
        Ok(Dynamized {
            shared,
            worker: Mutex::new(worker),
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
        self.write_batch(&[BufferEntry {
            key,
            value,
            weight,
            kind: OpKind::Put,
        }])
    }

    /// Deletes `key` (no effect if absent).
    pub fn delete(&self, key: u64) -> Result<()> {
        self.write_batch(&[BufferEntry {
            key,
            value: 0,
            weight: 0.0,
            kind: OpKind::Delete,
        }])
    }

    /// Applies puts and deletes as one batch: readers see all of it or none of it.
    pub fn write_batch(&self, entries: &[BufferEntry]) -> Result<()> {
        let sh = &*self.shared;
        if sh.opts.weighted
            && let Some(e) = entries
                .iter()
                .find(|e| e.kind == OpKind::Put && !(e.weight.is_finite() && e.weight >= 0.0))
        {
            return Err(Error::invalid(format!(
                "weight {} of key {} must be finite and non-negative",
                e.weight, e.key
            )));
        }
        sh.check_failed()?;
        if entries.is_empty() {
            return Ok(());
        }
        // Unweighted records weigh 1, in the buffer as in the shards.
        let normalized: Vec<BufferEntry>;
        let entries = if !sh.opts.weighted
            && entries
                .iter()
                .any(|e| e.kind == OpKind::Put && e.weight != 1.0)
        {
            normalized = entries
                .iter()
                .map(|e| BufferEntry { weight: 1.0, ..*e })
                .collect();
            &normalized[..]
        } else {
            entries
        };
        if sh.rt.throttle {
            sh.throttle();
        }
        if entries.len() > sh.opts.buffer_capacity {
            return sh.write_oversized(entries);
        }
        loop {
            let v = sh.current.load();
            match v.buffers[0].append_batch(entries) {
                Ok(()) => return Ok(()),
                Err(_) => {
                    let full = v.buffers[0].clone();
                    drop(v);
                    sh.rotate(&full)?;
                }
            }
        }
    }

    /// Waits until every sealed buffer is flushed and, with `seal_active`, flushes the active buffer's
    /// contents too (writers must be quiescent for that to be final).
    pub fn quiesce(&self, seal_active: bool) -> Result<()> {
        let sh = &*self.shared;
        if seal_active {
            let active = sh.current.load().buffers[0].clone();
            if !active.is_empty() {
                sh.seal(&active)?;
            }
        }
        let mut st = sh.work.lock();
        loop {
            sh.check_failed()?;
            let v = sh.current.load();
            if v.buffers.len() == 1 && !st.busy {
                return Ok(());
            }
            drop(v);
            if sh.rt.background {
                sh.work_cv.notify_one();
                sh.done_cv.wait_for(&mut st, Duration::from_millis(50));
            } else {
                drop(st);
                sh.reconstruct_once()?;
                st = sh.work.lock();
            }
        }
    }

    /// Runs one compaction of the level with the most deleted entries (if any), synchronously.
    pub fn compact_once(&self) -> Result<bool> {
        self.quiesce(false)?;
        // The reconstruction lock, not the work lock: `compact_worst` takes that one to publish.
        let _r = self.shared.recon.lock();
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
                + v.buffers.iter().map(|b| b.memory_bytes()).sum::<usize>(),
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

    pub(crate) fn request_compaction(&self) {
        let mut st = self.shared.work.lock();
        st.compact_requested = true;
        self.shared.work_cv.notify_one();
    }
}

impl<S: Shard> Drop for Dynamized<S> {
    fn drop(&mut self) {
        {
            let mut st = self.shared.work.lock();
            st.shutdown = true;
            self.shared.work_cv.notify_all();
            self.shared.done_cv.notify_all();
        }
        if let Some(h) = self.worker.lock().take() {
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
        self.done_cv.notify_all();
    }

    /// Publishes `v` as the current version, remembering the old one until its readers are gone.
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

    /// Probabilistic insert throttling. While a flush is pending, the active buffer must not fill before
    /// the flush is expected to end (else the next writer stalls for the rest of it). With `left` the
    /// expected remaining flush time and `room` the active buffer's free slots, every insert should take at
    /// least `left / room`; an insert is delayed by one sleep with the probability that makes the average
    /// delay per insert that long. No flush pending: no delay.
    fn throttle(&self) {
        let v = self.current.load();
        if v.buffers.len() == 1 {
            return;
        }
        let active = &v.buffers[0];
        let room = active.capacity().saturating_sub(active.len()) as f64;
        drop(v);
        let t = &self.throttling;
        let started = t.flush_started.load(Ordering::Acquire);
        let estimate = t.flush_nanos.load(Ordering::Relaxed) as f64;
        if started == 0 || estimate == 0.0 || room < 1.0 {
            return;
        }
        let elapsed = self.epoch.elapsed().as_nanos() as f64 - started as f64;
        let left = (estimate - elapsed).max(0.0);
        let sleep = t.sleep_nanos.load(Ordering::Relaxed).max(1) as f64;
        let p = (left / room / sleep).min(1.0);
        if p <= 0.0 {
            return;
        }
        // xorshift64*: a cheap shared random stream; races between writers only mix it more.
        let mut x = t.seed.load(Ordering::Relaxed);
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        t.seed.store(x, Ordering::Relaxed);
        let r = (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64;
        if r < p {
            self.counters.throttled.fetch_add(1, Ordering::Relaxed);
            let began = Instant::now();
            std::thread::sleep(self.rt.throttle_delay);
            // What a sleep really takes (timer slack makes it longer than asked): an average over recent ones.
            let took = began.elapsed().as_nanos() as u64;
            let old = t.sleep_nanos.load(Ordering::Relaxed);
            t.sleep_nanos.store(
                if old == 0 { took } else { (old * 7 + took) / 8 },
                Ordering::Relaxed,
            );
        }
    }

    /// Seals `full` if it is still the active buffer; stalls while too many sealed buffers wait.
    fn rotate(&self, full: &Arc<MutableBuffer>) -> Result<()> {
        let mut stalled: Option<Instant> = None;
        let result = loop {
            self.check_failed()?;
            let v = self.current.load();
            if !Arc::ptr_eq(&v.buffers[0], full) {
                break Ok(());
            }
            // At least the full buffer itself may wait: with none allowed, nothing would ever be sealed.
            if v.buffers.len() - 1 < self.rt.max_sealed_buffers.max(1) {
                drop(v);
                break self.seal(full);
            }
            drop(v);
            if self.rt.background {
                let mut st = self.work.lock();
                if stalled.is_none() {
                    stalled = Some(Instant::now());
                    self.counters.stalls.fetch_add(1, Ordering::Relaxed);
                }
                self.work_cv.notify_one();
                self.done_cv.wait_for(&mut st, Duration::from_millis(10));
            } else {
                self.reconstruct_once()?;
            }
        };
        if let Some(t) = stalled {
            self.counters
                .stall_nanos
                .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        }
        result
    }

    /// A batch larger than a buffer: it fills a buffer of its own, which is published already sealed
    /// (below a fresh active buffer and above the previous one, which is sealed too).
    fn write_oversized(&self, entries: &[BufferEntry]) -> Result<()> {
        let own = Arc::new(MutableBuffer::new(entries.len()));
        own.append_batch(entries)
            .expect("a buffer of the batch's size holds the batch");
        {
            let _st = self.work.lock();
            let v = self.current.load_full();
            let mut buffers = Vec::with_capacity(v.buffers.len() + 2);
            buffers.push(Arc::new(MutableBuffer::new(self.opts.buffer_capacity)));
            buffers.push(own);
            buffers.extend(v.buffers.iter().cloned());
            self.publish(Version {
                seq: v.seq + 1,
                buffers,
                levels: v.levels.clone(),
            });
        }
        if self.rt.background {
            self.work_cv.notify_one();
            Ok(())
        } else {
            while self.current.load().buffers.len() > 1 {
                self.reconstruct_once()?;
            }
            Ok(())
        }
    }

    /// Publishes a version whose active buffer is fresh and `active` sealed (if it is still the active one).
    fn seal(&self, active: &Arc<MutableBuffer>) -> Result<()> {
        let st = self.work.lock();
        let v = self.current.load_full();
        if Arc::ptr_eq(&v.buffers[0], active) {
            let mut buffers = Vec::with_capacity(v.buffers.len() + 1);
            buffers.push(Arc::new(MutableBuffer::new(self.opts.buffer_capacity)));
            buffers.extend(v.buffers.iter().cloned());
            self.publish(Version {
                seq: v.seq + 1,
                buffers,
                levels: v.levels.clone(),
            });
            // A buffer sealed before it is full (`quiesce`) must take no more writes: one that landed after
            // its flush settled it would be lost.
            active.close();
        }
        drop(st);
        // Not held into an inline reconstruction: a tagging flush waits for the readers of older versions.
        drop(v);
        if self.rt.background {
            self.work_cv.notify_one();
            Ok(())
        } else {
            self.reconstruct_once()
        }
    }
}
