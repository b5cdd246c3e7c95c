//! YCSB A, B, D and F on the hash indexes (the seed's Exp 3): after the uniform preload of N keys, N/4
//! operations per workload (`--ops` to choose), request keys drawn with YCSB's scrambled zipfian (θ = 0.99) over the preload:
//!
//! * `ycsb-a`: 50 % reads, 50 % updates; `ycsb-b`: 95 % reads, 5 % updates;
//! * `ycsb-f`: 50 % reads, 50 % read-modify-writes (a lookup, then an update of what it found);
//! * `ycsb-d`: 95 % reads with YCSB's `latest` distribution over the keys present (the preload and the
//!   keys the thread inserted so far), 5 % inserts of new keys (each thread its own share of the pool).
//!
//! One index per engine and thread count runs A, B, F, then D (the order in which updates leave every key
//! present). `elimda` and `dash` run over the thread sweep; `cceh` (single writer) at one thread, behind an
//! uncontended mutex (its `&mut self` writes; ≈ 20 ns per operation, noted in the report).
//!
//! Values stay checkable under concurrent updates: the low 48 bits of every value stored under `k` are those
//! of `value(k)`; an update changes only the top 16 bits. Every read must find its key with such a value.

use super::threads::{Concurrent, Timed, dash, elimda, parallel, preload};
use super::{CCEH, DASH, ELIMDA, Keys, Ops, Persistent, Shape, SuiteConfig, shaped_row, value};
use crate::distributions::{Latest, ScrambledZipfian};
use crate::error::{BenchError, Result};
use crate::result::BenchResult;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Mutex;
use strata::lab::index::hash::cceh::{CcehConfig, CcehIndex};
use strata::lab::storage::pm::{MmapRegion, PersistMode};

/// The workloads, in the order one index runs them: name, percent of reads.
pub const WORKLOADS: [(&str, u32); 4] = [
    ("ycsb-a", 50),
    ("ycsb-b", 95),
    ("ycsb-f", 50),
    ("ycsb-d", 95),
];
const LOW48: u64 = (1 << 48) - 1;

#[derive(Clone, Copy)]
enum Op {
    Read(u64),
    /// Key and the new top 16 bits of its value.
    Update(u64, u64),
    ReadModifyWrite(u64),
    Insert(u64),
}

/// Thread `t`'s operations of `workload` (`ops` of them; `fresh` = its share of never-inserted keys).
fn ops_of(
    cfg: &SuiteConfig,
    k: &Keys,
    workload: &str,
    reads: u32,
    t: usize,
    ops: usize,
    fresh: &[u64],
) -> Vec<Op> {
    let mut rng =
        ChaCha8Rng::seed_from_u64(cfg.seed ^ 0x9c5b ^ ((t as u64) << 32) ^ u64::from(reads));
    let n = k.preload.len() as u64;
    let zipf = ScrambledZipfian::new(n);
    let mut latest = Latest::new(n);
    let mut inserted = 0usize;
    (0..ops)
        .map(|_| {
            let read = rng.random_range(0..100) < reads;
            match (workload, read) {
                ("ycsb-d", true) => {
                    let i = latest.next(n + inserted as u64, &mut rng) as usize;
                    Op::Read(
                        k.preload
                            .get(i)
                            .copied()
                            .unwrap_or_else(|| fresh[i - n as usize]),
                    )
                }
                ("ycsb-d", false) if inserted < fresh.len() => {
                    inserted += 1;
                    Op::Insert(fresh[inserted - 1])
                }
                (_, true) | ("ycsb-d", false) => Op::Read(k.preload[zipf.next(&mut rng) as usize]),
                ("ycsb-f", false) => Op::ReadModifyWrite(k.preload[zipf.next(&mut rng) as usize]),
                _ => Op::Update(
                    k.preload[zipf.next(&mut rng) as usize],
                    rng.random_range(1..=0xFFFF),
                ),
            }
        })
        .collect()
}

/// Operations per workload, all threads together: `--ops`, else N/4 (keeps the default run short).
pub fn ops(cfg: &SuiteConfig) -> u64 {
    cfg.ops.unwrap_or(cfg.records / 4).max(1)
}

/// Whether `v` is a value stored under `key` (its low 48 bits are `value(key)`'s).
fn holds(key: u64, v: Option<u64>) -> bool {
    v.is_some_and(|v| (v ^ value(key)) & LOW48 == 0)
}

fn apply(index: &dyn Concurrent, op: Op) -> Result<bool> {
    Ok(match op {
        Op::Read(key) => holds(key, index.lookup(key)?),
        Op::Update(key, top) => index
            .put(key, (value(key) & LOW48) | (top << 48))
            .map(|()| true)?,
        Op::ReadModifyWrite(key) => {
            let v = index.lookup(key)?;
            let ok = holds(key, v);
            let v = v.unwrap_or(value(key));
            index.put(key, v.wrapping_add(1 << 48)).map(|()| ok)?
        }
        Op::Insert(key) => index.put(key, value(key)).map(|()| true)?,
    })
}

/// The four workloads on a preloaded `index` with `threads` threads.
fn workloads(
    cfg: &SuiteConfig,
    engine: &'static str,
    index: &dyn Concurrent,
    k: &Keys,
    threads: usize,
) -> Result<Vec<BenchResult>> {
    preload(index, &k.preload, threads)?;
    let total = ops(cfg) as usize;
    let per = total.div_ceil(threads);
    let fresh = super::threads::split(&k.insert, threads);
    let mut out = Vec::new();
    for (workload, reads) in WORKLOADS {
        let lists: Vec<Vec<Op>> = (0..threads)
            .map(|t| ops_of(cfg, k, workload, reads, t, per, fresh[t]))
            .collect();
        let slices: Vec<&[Op]> = lists.iter().map(Vec::as_slice).collect();
        let Timed {
            secs, lat, wrong, ..
        } = parallel(&slices, |_, &op| apply(index, op))?;
        if wrong > 0 {
            return Err(BenchError::Usage(format!(
                "{engine} {workload} at {threads} threads: {wrong} reads did not find their key's value"
            )));
        }
        let shape = Shape {
            engine,
            workload,
            op: "mixed",
            threads,
        };
        out.push(shaped_row(cfg, &shape, &lat, secs, index.state()));
    }
    Ok(out)
}

/// A single-writer index behind a mutex, so that the parallel harness can drive it (one thread only).
struct Serial<T>(Mutex<T>);

impl<T: Ops + Send> Concurrent for Serial<T> {
    fn put(&self, k: u64, v: u64) -> Result<()> {
        self.lock()?.put(k, v)
    }
    fn lookup(&self, k: u64) -> Result<Option<u64>> {
        self.lock()?.lookup(k)
    }
    fn del(&self, k: u64) -> Result<bool> {
        self.lock()?.del(k)
    }
    fn state(&self) -> (f64, u64, u64) {
        self.lock().map_or((0.0, 0, 0), |i| i.state())
    }
}

impl<T> Serial<T> {
    fn lock(&self) -> Result<std::sync::MutexGuard<'_, T>> {
        self.0
            .lock()
            .map_err(|_| BenchError::Usage("a benchmark thread panicked".into()))
    }
}

/// YCSB rows: `elimda` and `dash` over the thread sweep, `cceh` at one thread.
pub(super) fn rows(cfg: &SuiteConfig, k: &Keys, sweep: &[usize]) -> Result<Vec<BenchResult>> {
    let mut out = Vec::new();
    for &threads in sweep {
        out.extend(workloads(cfg, ELIMDA, &elimda(cfg, threads)?, k, threads)?);
        out.extend(workloads(cfg, DASH, &dash(cfg)?, k, threads)?);
    }
    let region = MmapRegion::anonymous(super::region_bytes(cfg), PersistMode::Eadr)?;
    let cceh = CcehIndex::create(region, CcehConfig::default())?;
    let serial = Serial(Mutex::new(Persistent(cceh, std::marker::PhantomData)));
    out.extend(workloads(cfg, CCEH, &serial, k, 1)?);
    Ok(out)
}
