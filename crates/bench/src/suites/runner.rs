//! # Multi-threaded workload runner
//!
//! * [`KeyState`]: what the workload knows it wrote — the highest committed version of every key and the
//!   next key to insert — shared by all threads, so that every read is checked ([`KeyState::check_read`]).
//! * [`Worker`]: one thread's seeded RNG stream, latency histograms and progress; [`Worker::op`] times one
//!   operation, and with a target rate waits for the operation's scheduled start and measures latency from
//!   that start (no coordinated omission).
//! * [`Ctx::parallel`]: runs a body on N threads against one driver and merges the workers' histograms into
//!   one [`Phase`](crate::measure::Phase).
//!
//! Read checks: with one thread the value read must be exactly the last version written (and a key written
//! must be found); with several threads, writers may race on a key, so a value must belong to the key and
//! carry a version from 1 to (committed + threads), and a key whose write completed before the read started
//! must be found (unless the workload deletes).

use super::common::{Ctx, verify};
use crate::distributions::fnv1a;
use crate::driver::Driver;
use crate::error::{BenchError, Result};
use crate::measure::{Latency, Progress};
use crate::result::BenchResult;
use crate::values::{VERSION_LIMIT, ValueCodec};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Versions written per key, and the insert cursor.
pub(crate) struct KeyState {
    versions: Vec<AtomicU32>,
    next_key: AtomicU64,
    loaded: u64,
    /// Striped locks that serialise the updates of one key (see [`KeyState::update`]).
    update_locks: Vec<std::sync::Mutex<()>>,
}

/// Stripes of [`KeyState::update_locks`].
const UPDATE_STRIPES: usize = 1024;

impl KeyState {
    /// Keys `0..loaded` exist at version 1, later keys not yet; room for `capacity` keys in all.
    pub fn new(loaded: u64, capacity: u64) -> Self {
        KeyState {
            versions: (0..capacity.max(loaded))
                .map(|k| AtomicU32::new(u32::from(k < loaded)))
                .collect(),
            next_key: AtomicU64::new(loaded),
            loaded,
            update_locks: (0..UPDATE_STRIPES)
                .map(|_| std::sync::Mutex::new(()))
                .collect(),
        }
    }

    /// Keys loaded before the run phases (the key space of uniform and zipfian choices).
    pub fn loaded(&self) -> u64 {
        self.loaded
    }

    /// Keys handed out so far (loaded + inserted or being inserted).
    pub fn key_count(&self) -> u64 {
        self.next_key.load(Ordering::Acquire)
    }

    /// The highest version of `key` whose write completed (0 = absent).
    pub fn committed(&self, key: u64) -> u32 {
        self.versions[key as usize].load(Ordering::Acquire)
    }

    /// Records that version `v` of `key` was written.
    pub fn commit(&self, key: u64, v: u32) {
        self.versions[key as usize].fetch_max(v, Ordering::AcqRel);
    }

    /// Records that `key` was deleted.
    pub fn forget(&self, key: u64) {
        self.versions[key as usize].store(0, Ordering::Release);
    }

    /// A fresh key for an insert.
    pub fn claim_insert(&self) -> Result<u64> {
        let k = self.next_key.fetch_add(1, Ordering::AcqRel);
        if k as usize >= self.versions.len() {
            return Err(BenchError::Usage(format!(
                "more inserts than the workload planned for ({} keys)",
                self.versions.len()
            )));
        }
        Ok(k)
    }

    /// Writes the next version of `key` and records it. Updates of one key are serialised (a striped lock
    /// held across the write): otherwise two threads could both write version v + 1 and v + 2 and the
    /// engine could apply them in the other order, leaving a lower version as the key's final value while
    /// the model expects the higher one.
    pub fn update(
        &self,
        db: &dyn Driver,
        codec: ValueCodec,
        key: u64,
        buf: &mut Vec<u8>,
    ) -> Result<()> {
        let _serial = self.update_locks[key as usize % UPDATE_STRIPES]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let v = self.committed(key) + 1;
        if v >= VERSION_LIMIT {
            return Err(BenchError::Usage(format!(
                "key {key} updated more than {} times",
                VERSION_LIMIT - 1
            )));
        }
        codec.encode(key, v, buf);
        db.put(key, buf)?;
        self.commit(key, v);
        Ok(())
    }
}

/// Checks reads against a [`KeyState`].
#[derive(Clone, Copy)]
pub(crate) struct Checker<'a> {
    pub keys: &'a KeyState,
    pub engine: &'static str,
    pub codec: ValueCodec,
    /// Threads that may write while reads run (0: every read must see exactly the last version written).
    pub writers: u32,
}

impl Checker<'_> {
    /// Checks the outcome of a read of `key` that returned `found` / `value`, where `before` was
    /// [`KeyState::committed`] just before the read.
    pub fn check(&self, key: u64, before: u32, found: bool, value: &[u8]) -> Result<()> {
        let engine = self.engine;
        let after = self.keys.committed(key);
        if !found {
            return verify(before == 0, || {
                format!(
                    "{engine}: key {key} not found, but version {before} was written before the read"
                )
            });
        }
        let v = self
            .codec
            .decode(key, value)
            .map_err(|e| BenchError::Verify(format!("{engine}: {e}")))?;
        if self.writers == 0 {
            verify(v == after, || {
                format!(
                    "{engine}: key {key} read version {v}, but version {after} was the last written"
                )
            })
        } else {
            verify(v <= after + self.writers, || {
                format!("{engine}: key {key} read version {v}, but only {after} were written")
            })
        }
    }

    /// Reads `key` as operation `op` of `w`, then checks the result; returns whether it was found.
    pub fn read(
        &self,
        w: &mut Worker,
        db: &dyn Driver,
        op: &'static str,
        key: u64,
    ) -> Result<bool> {
        let before = self.keys.committed(key);
        let found = w.op(op, |w| db.get(key, &mut w.buf))?;
        self.check(key, before, found, &w.buf)?;
        Ok(found)
    }
}

/// Pacing of a worker under `--target-rate`.
struct Pace {
    start: Instant,
    interval: Duration,
    next: u64,
}

/// One thread of a parallel phase.
pub(crate) struct Worker {
    pub id: u32,
    pub rng: ChaCha8Rng,
    /// Scratch buffer for values.
    pub buf: Vec<u8>,
    lats: Vec<(&'static str, Latency)>,
    progress: Progress,
    pace: Option<Pace>,
}

impl Worker {
    /// Runs `f` as one operation named `op`, recording its latency (from its scheduled start under a target
    /// rate).
    #[inline]
    pub fn op<T>(&mut self, op: &'static str, f: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        let start = match &mut self.pace {
            None => Instant::now(),
            Some(p) => {
                let due = p.start + p.interval.mul_f64(p.next as f64);
                p.next += 1;
                let now = Instant::now();
                if due > now {
                    std::thread::sleep(due - now);
                }
                due
            }
        };
        let r = f(self)?;
        self.record(op, start.elapsed());
        Ok(r)
    }
}

impl Worker {
    /// [`op`](Self::op) for back-to-back operations: the operation's latency runs from `start`, the end of
    /// the previous operation (the caller's own work between the two, a few nanoseconds of key arithmetic,
    /// counts too), so each operation costs one clock read instead of two. Returns the result and the end,
    /// which the next operation starts from. Under a target rate it times like [`op`](Self::op).
    #[inline]
    pub fn op_chained<T>(
        &mut self,
        op: &'static str,
        start: Instant,
        f: impl FnOnce(&mut Self) -> Result<T>,
    ) -> Result<(T, Instant)> {
        if self.pace.is_some() {
            let r = self.op(op, f)?;
            return Ok((r, Instant::now()));
        }
        let r = f(self)?;
        let end = Instant::now();
        self.record(op, end - start);
        Ok((r, end))
    }

    /// Records one operation named `op` timed by the caller (for loops where the call that ends the loop
    /// must not count, such as the visits of a scan).
    pub fn record(&mut self, op: &'static str, elapsed: Duration) {
        match self.lats.iter_mut().find(|(n, _)| *n == op) {
            Some((_, l)) => l.record(elapsed),
            None => {
                let mut l = Latency::new();
                l.record(elapsed);
                self.lats.push((op, l));
            }
        }
        self.progress.tick();
    }
}

impl Ctx<'_> {
    /// Runs `body(worker, ops_of_this_worker)` on `threads` threads against `db` as one phase named
    /// `workload` of `ops` operations in all, and returns its rows (one per operation kind). Worker `i` gets
    /// an RNG seeded from the run's seed, the workload and the thread count, on stream `i`.
    pub fn parallel(
        &self,
        db: &dyn Driver,
        dir: &Path,
        workload: &str,
        threads: u32,
        ops: u64,
        body: impl Fn(&mut Worker, u64) -> Result<()> + Sync,
    ) -> Result<Vec<BenchResult>> {
        self.parallel_extra(db, dir, workload, threads, 0, ops, body)
    }

    /// [`parallel`](Self::parallel) with `extra` more threads (ids `threads..threads + extra`) that get no
    /// share of `ops` (background writers and the like); rows are labelled with `threads`.
    #[allow(clippy::too_many_arguments)]
    pub fn parallel_extra(
        &self,
        db: &dyn Driver,
        dir: &Path,
        workload: &str,
        threads: u32,
        extra: u32,
        ops: u64,
        body: impl Fn(&mut Worker, u64) -> Result<()> + Sync,
    ) -> Result<Vec<BenchResult>> {
        let mut phase = self.phase_threads(db, workload, ops, threads);
        let seed = self.cfg.seed ^ fnv1a(workload.as_bytes()) ^ u64::from(threads).rotate_left(32);
        let interval = self
            .cfg
            .target_rate
            .map(|rate| Duration::from_secs_f64(f64::from(threads) / rate));
        let start = Instant::now();
        let results: Vec<Result<Vec<(&'static str, Latency)>>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads + extra)
                .map(|i| {
                    let t = u64::from(threads);
                    let share = if i < threads {
                        ops / t + u64::from(u64::from(i) < ops % t)
                    } else {
                        0
                    };
                    let mut rng = ChaCha8Rng::seed_from_u64(seed);
                    rng.set_stream(u64::from(i));
                    let mut worker = Worker {
                        id: i,
                        rng,
                        buf: Vec::with_capacity(self.codec().size()),
                        lats: Vec::new(),
                        progress: phase.progress_handle(),
                        pace: interval.map(|interval| Pace {
                            start,
                            interval,
                            next: 0,
                        }),
                    };
                    let body = &body;
                    s.spawn(move || {
                        body(&mut worker, share)?;
                        worker.progress.flush();
                        Ok(worker.lats)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        });
        for r in results {
            for (op, lat) in r? {
                phase.merge(op, &lat);
            }
        }
        // The phase lasts until the background work its operations caused is done.
        db.settle()?;
        phase.finish(dir)
    }
}
