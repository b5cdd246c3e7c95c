//! The thread sweep: the main phases (insert, pos-search, neg-search, delete) of the two concurrent indexes,
//! ElimDA-style (`elimda`, one collecting log per thread) and Dash-EH-style (`dash`), at every thread count of
//! the sweep, on a fresh eADR region each. The CCEH-style index has a single writer (`&mut self`), so it is
//! not in the sweep (its one-thread rows come from the single-threaded harness of `mod.rs`).
//!
//! [`parallel`] is the harness every multi-threaded experiment of the suite uses: each thread runs its own
//! list of operations after a common barrier, timing batches of [`BATCH`] operations; the phase's time is the
//! slowest thread's summed batch time (at 1 thread: exactly the single-threaded harness's definition).
//! It also reads each thread's `/proc/thread-self/schedstat` around its run: the CPU time the threads got
//! and the time they were runnable but waited for a core (rows: `thread_cpu_us`, `run_wait_us` per
//! operation). On a machine shared with other work, these tell a scaling limit of the index (more CPU per
//! operation at 2 threads) from a lack of free cores (run-queue wait).

use super::{BATCH, Keys, PHASES, Shape, exhausted, region_bytes, shaped_row, value};
use crate::error::{BenchError, Result};
use crate::measure::Latency;
use crate::result::BenchResult;
use std::sync::Barrier;
use std::time::Instant;
use strata::lab::index::hash::dash::{DashConfig, DashIndex};
use strata::lab::index::hash::{HashConfig, HashIndex};
use strata::lab::storage::pm::{MmapRegion, PersistMode, Pm};

use super::SuiteConfig;
use super::rounds::Contender;

/// The operations of an index that many threads drive at once (`&self`).
pub(super) trait Concurrent: Sync {
    fn put(&self, k: u64, v: u64) -> Result<()>;
    fn lookup(&self, k: u64) -> Result<Option<u64>>;
    fn del(&self, k: u64) -> Result<bool>;
    /// Live keys ÷ slots, DRAM bytes, PM bytes in use.
    fn state(&self) -> (f64, u64, u64);
    /// Address and bytes of the index's DRAM bucket array, if it has one advised for huge pages.
    fn bucket_array(&self) -> Option<(usize, usize)> {
        None
    }
}

/// Implements [`Concurrent`] for an index type whose inherent methods take `&self`.
macro_rules! concurrent_index {
    ($index:ident, $array:expr) => {
        impl<P: Pm> Concurrent for $index<P> {
            fn put(&self, k: u64, v: u64) -> Result<()> {
                Ok(self.insert(k, v)?)
            }
            fn lookup(&self, k: u64) -> Result<Option<u64>> {
                Ok(self.get(k)?)
            }
            fn del(&self, k: u64) -> Result<bool> {
                Ok(self.remove(k)?)
            }
            fn state(&self) -> (f64, u64, u64) {
                (self.load_factor(), self.dram_bytes(), self.pm_bytes_used())
            }
            fn bucket_array(&self) -> Option<(usize, usize)> {
                $array(self)
            }
        }
    };
}

concurrent_index!(HashIndex, |i: &HashIndex<P>| Some(i.bucket_array()));
concurrent_index!(DashIndex, |_: &DashIndex<P>| None);

/// What a parallel phase measured.
pub(super) struct Timed {
    /// The slowest thread's summed batch time.
    pub secs: f64,
    pub lat: Latency,
    /// Operations whose answer was wrong.
    pub wrong: u64,
    /// CPU time and run-queue wait of all threads, in seconds (`None` where schedstat is unreadable).
    pub cpu: Option<(f64, f64)>,
}

/// This thread's `(time on a CPU, time runnable waiting for one)` so far, in ns (Linux schedstat).
fn schedstat() -> Option<(u64, u64)> {
    crate::measure::schedstat("/proc/thread-self/schedstat")
}

impl Timed {
    /// Sets `row`'s CPU time and run-queue wait per operation (µs).
    pub fn annotate(&self, row: &mut BenchResult) {
        if let Some((cpu, wait)) = self.cpu {
            let ops = row.ops.max(1) as f64;
            row.thread_cpu_us = Some(cpu * 1e6 / ops);
            row.run_wait_us = Some(wait * 1e6 / ops);
        }
    }
}

/// Runs `lists[t]` on thread `t` (all threads start together), calling `each(t, item)`, which returns
/// whether the answer was right. Latency is sampled per batch of [`BATCH`] operations.
pub(super) fn parallel<T: Sync>(
    lists: &[&[T]],
    each: impl Fn(usize, &T) -> Result<bool> + Sync,
) -> Result<Timed> {
    let barrier = Barrier::new(lists.len());
    type PerThread = (f64, Latency, u64, Option<(u64, u64)>);
    let per_thread: Vec<Result<PerThread>> = std::thread::scope(|s| {
        let handles: Vec<_> = lists
            .iter()
            .enumerate()
            .map(|(t, list)| {
                let (barrier, each) = (&barrier, &each);
                s.spawn(move || {
                    let mut lat = Latency::new();
                    let (mut secs, mut wrong) = (0.0, 0u64);
                    barrier.wait();
                    let sched0 = schedstat();
                    for batch in list.chunks(BATCH) {
                        let start = Instant::now();
                        for item in batch {
                            wrong += u64::from(!each(t, item)?);
                        }
                        let d = start.elapsed();
                        secs += d.as_secs_f64();
                        let one = d / batch.len() as u32;
                        for _ in batch {
                            lat.record(one);
                        }
                    }
                    let sched = sched0
                        .zip(schedstat())
                        .map(|(a, b)| (b.0.saturating_sub(a.0), b.1.saturating_sub(a.1)));
                    Ok((secs, lat, wrong, sched))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(BenchError::Usage("a benchmark thread panicked".into()))
                })
            })
            .collect()
    });
    let mut out = Timed {
        secs: 0.0,
        lat: Latency::new(),
        wrong: 0,
        cpu: Some((0.0, 0.0)),
    };
    for r in per_thread {
        let (secs, lat, wrong, sched) = r?;
        out.secs = out.secs.max(secs);
        out.lat.merge(&lat);
        out.wrong += wrong;
        out.cpu = out
            .cpu
            .zip(sched)
            .map(|((c, w), (dc, dw))| (c + dc as f64 / 1e9, w + dw as f64 / 1e9));
    }
    Ok(out)
}

/// `items` cut into `threads` contiguous runs (the last ones may be shorter).
pub(super) fn split<T>(items: &[T], threads: usize) -> Vec<&[T]> {
    let per = items.len().div_ceil(threads.max(1)).max(1);
    let mut out: Vec<&[T]> = items.chunks(per).collect();
    out.resize(threads.max(1), &[]);
    out
}

/// Loads `keys` with `threads` threads (not measured).
pub(super) fn preload(index: &dyn Concurrent, keys: &[u64], threads: usize) -> Result<()> {
    parallel(&split(keys, threads), |_, &k| {
        index.put(k, value(k)).map(|()| true)
    })
    .map(drop)
}

/// The keys of main phase `workload` (`insert`, `pos-search`, `neg-search`, `delete`).
pub(super) fn phase_keys<'a>(k: &'a Keys, workload: &str) -> &'a [u64] {
    match workload {
        "insert" => &k.insert,
        "pos-search" => &k.pos,
        "neg-search" => &k.neg,
        _ => &k.delete,
    }
}

/// Main phase `workload` on `index` with `threads` threads, every answer checked (a wrong one is an error
/// naming `engine`).
pub(super) fn timed_phase(
    engine: &str,
    index: &dyn Concurrent,
    k: &Keys,
    workload: &str,
    threads: usize,
) -> Result<Timed> {
    let keys = phase_keys(k, workload);
    let t = parallel(&split(keys, threads), |_, &key| {
        Ok(match workload {
            "insert" => index.put(key, value(key)).map(|()| true)?,
            "pos-search" => index.lookup(key)? == Some(value(key)),
            "neg-search" => index.lookup(key)?.is_none(),
            _ => index.del(key)?,
        })
    })?;
    if t.wrong > 0 {
        return Err(BenchError::Usage(format!(
            "{engine} at {threads} threads: {} of {} {workload} operations (wrong answer)",
            t.wrong,
            keys.len()
        )));
    }
    Ok(t)
}

/// The four main phases on `index` with `threads` threads, after a preload.
fn sweep_one(
    cfg: &SuiteConfig,
    engine: &'static str,
    index: &dyn Concurrent,
    k: &Keys,
    threads: usize,
) -> Result<Vec<BenchResult>> {
    preload(index, &k.preload, threads)?;
    let mut out = Vec::new();
    for (workload, op) in PHASES {
        let t = timed_phase(engine, index, k, workload, threads)?;
        let shape = Shape {
            engine,
            workload,
            op,
            threads,
        };
        let mut r = shaped_row(cfg, &shape, &t.lat, t.secs, index.state());
        t.annotate(&mut r);
        r.huge_page_bytes =
            strata::lab::index::learned::arena::process_huge_bytes().map(|b| b as u64);
        r.array_huge_share = index
            .bucket_array()
            .and_then(|(at, bytes)| super::thp::huge_share(at, bytes));
        out.push(r);
    }
    Ok(out)
}

/// A fresh ElimDA-style index with `logs` collecting logs (one per thread of the run).
pub(super) fn elimda(cfg: &SuiteConfig, logs: usize) -> Result<HashIndex<MmapRegion>> {
    elimda_with(
        cfg,
        HashConfig {
            logs: logs as u64,
            ..HashConfig::default()
        },
    )
}

/// A fresh ElimDA-style index made with `config` on an eADR region of the suite's size.
pub(super) fn elimda_with(cfg: &SuiteConfig, config: HashConfig) -> Result<HashIndex<MmapRegion>> {
    let region = MmapRegion::anonymous(region_bytes(cfg), PersistMode::Eadr)?;
    Ok(HashIndex::create(region, config)?)
}

pub(super) fn dash(cfg: &SuiteConfig) -> Result<DashIndex<MmapRegion>> {
    let region = MmapRegion::anonymous(region_bytes(cfg), PersistMode::Eadr)?;
    Ok(DashIndex::create(region, DashConfig::default())?)
}

/// The contenders of the main rows for `elimda` and `dash` at every thread count of `sweep` (the 1-thread
/// rows are the main rows): each run builds a fresh index, preloads it and runs the four phases.
pub(super) fn contenders<'a>(
    cfg: &'a SuiteConfig,
    k: &'a Keys,
    sweep: &[usize],
) -> Vec<Contender<'a>> {
    let mut out: Vec<Contender<'a>> = Vec::new();
    for &threads in sweep {
        out.push(Box::new(move || {
            let idx = elimda(cfg, threads)?;
            sweep_one(cfg, super::ELIMDA, &idx, k, threads)
                .map_err(|e| exhausted(super::ELIMDA, region_bytes(cfg), e))
        }));
        out.push(Box::new(move || {
            let idx = dash(cfg)?;
            sweep_one(cfg, super::DASH, &idx, k, threads)
                .map_err(|e| exhausted(super::DASH, region_bytes(cfg), e))
        }));
    }
    out
}
