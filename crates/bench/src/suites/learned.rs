//! # The `learned` suite (issue 19)
//!
//! The learned index (`strata-learned`, XIndex-style) against the B+-tree (`strata-btree`, its cache given
//! room for every page) — both as `RawDb`s on an in-memory file system with durability `none`, so both pay
//! the same shell (WAL append in memory, key encoding) — and `std::collections::BTreeMap` behind a
//! `RwLock` (`std-btreemap`, no shell: a bound).
//!
//! Key sets (synthetic, no downloads), N + (the inserts the phases need) distinct `u64` keys per set: N loaded (a random
//! subset), the rest inserted by the write workloads:
//! * `smooth` (books/wiki-like): gaps drawn from an exponential whose mean drifts slowly along the key
//!   space; the CDF is smooth at every scale, so linear models fit it closely.
//! * `hard` (fb/osm-like): locally hard: runs of dense keys separated by jumps whose size spans
//!   `4 + 36·h` binary orders of magnitude, with `h` the hardness knob (`STRATA_LEARNED_HARDNESS`, 0..1,
//!   default 1): at h = 0 it is nearly uniform, at 1 no few lines fit a group.
//! * `uniform`: uniform random `u64`s.
//! * `lognormal`: exp(N(0, 2)) scaled to 2^50 — globally skewed, locally smooth.
//!
//! Workloads per key set, engine and thread count (1 and 2, or `--threads`), in this order: `read-only`
//! (lookups of loaded keys), `scan100` (100 records from a random loaded key; a twentieth of the
//! operations), `95/5` and `50/50` read/insert (inserts of held-out keys), so reads and scans measure the
//! loaded index before any insert. Every answer is checked; a wrong one fails the run.
//!
//! Method, for ratios that hold on a shared 2-core machine: the engines of a key set are loaded side by
//! side and settled (`RawDb::settle`: the background work of the load is done). Each (workload, threads)
//! phase runs an untimed warm-up of reads per engine, then `STRATA_LEARNED_ROUNDS` (default 5) rounds in
//! which every engine runs `--ops` operations (default min(N, 100 000)) once, in an order that rotates
//! per round, each after settling the engine (compactions a previous round's inserts started are not
//! billed to the next round; those a round's own inserts start are): a load that comes and goes hits the
//! engines alike. A row's throughput is the fastest round's (a busy machine only slows rounds down); its latencies (operations timed in batches
//! of 16, each getting the batch's mean) merge all rounds; `server_cpu_us` is the least CPU time per operation
//! of any round — the workload threads' plus, for the learned index, its maintenance thread's and that of
//! settling the backlog the round's writes left (Linux schedstat) — a counted figure that preemption by
//! other processes hardly moves. `STRATA_LEARNED_VERBOSE` prints every
//! round's throughput and the maintenance thread's CPU time; `STRATA_LEARNED_SETS`, `_WORKLOADS` and
//! `_ENGINES` (comma-separated names) run a part of the suite, e.g. to profile one phase. `rss_bytes` (scope `index`) holds the index
//! memory: for the learned index its models, pivots and group headers (`LearnedStats::index_bytes`), for
//! the B+-tree an estimate of its inner nodes (pages × page size ÷ the inner fanout, page size ÷ 24 B per
//! entry); `disk_bytes` the B+-tree's whole page file. Values are 8 bytes.

use super::SuiteConfig;
use crate::driver::Engine;
use crate::error::{BenchError, Result};
use crate::measure::{Latency, PhaseLabels, RowParts, row};
use crate::result::BenchResult;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Instant;
use strata::vfs::{MemVfs, Vfs};
use strata::{
    Config, Direction, Durability, IndexKind, KeyRange, Options, RawDb, TypeKind, WriteOp,
};

pub const NAME: &str = "learned";
pub const DESCRIPTION: &str = "learned index (XIndex-style) against the in-memory B+-tree and std BTreeMap: smooth, hard (hardness knob), uniform and lognormal keys; read-only, scans of 100, 95/5 and 50/50 read/insert at 1 and 2 threads; throughput, p50/p99/p99.9, index memory per key";
pub const DEFAULT_RECORDS: u64 = 300_000;
pub const LEARNED: &str = "strata-learned";
pub const BTREE: &str = "strata-btree";
pub const STD: &str = "std-btreemap";
pub const DATASETS: [&str; 4] = ["smooth", "hard", "uniform", "lognormal"];
pub const WORKLOADS: [&str; 4] = ["read-only", "scan100", "95/5", "50/50"];
const BATCH: usize = 16;

/// The hardness knob of the `hard` key set.
fn hardness() -> f64 {
    std::env::var("STRATA_LEARNED_HARDNESS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .map_or(1.0, |h| h.clamp(0.0, 1.0))
}

/// `count` distinct keys of key set `set`, in random order.
pub fn key_set(set: &str, count: usize, seed: u64) -> Vec<u64> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut keys: Vec<u64> = match set {
        "smooth" => {
            let mut k = 1u64 << 20;
            (0..count)
                .map(|i| {
                    let drift = 1.0 + 0.5 * (i as f64 / count as f64 * std::f64::consts::TAU).sin();
                    let gap: f64 = -(1.0 - rng.random::<f64>()).ln() * 1000.0 * drift;
                    k += 1 + gap as u64;
                    k
                })
                .collect()
        }
        "hard" => {
            let spread = 4.0 + 36.0 * hardness();
            let mut k = 0u64;
            let mut out = Vec::with_capacity(count);
            while out.len() < count {
                k = k.saturating_add(2f64.powf(rng.random::<f64>() * spread) as u64 + 1);
                let run = rng.random_range(1..64usize);
                for _ in 0..run.min(count - out.len()) {
                    k = k.saturating_add(rng.random_range(1..8));
                    out.push(k);
                }
            }
            out
        }
        "lognormal" => {
            let mut seen = HashSet::with_capacity(count);
            while seen.len() < count {
                let (u1, u2): (f64, f64) = (rng.random(), rng.random());
                let z = (-2.0 * (1.0 - u1).ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                seen.insert(((2.0 * z).exp() * (1u64 << 40) as f64) as u64);
            }
            seen.into_iter().collect()
        }
        _ => {
            let mut seen = HashSet::with_capacity(count);
            while seen.len() < count {
                seen.insert(rng.random::<u64>());
            }
            seen.into_iter().collect()
        }
    };
    keys.sort_unstable();
    keys.dedup();
    keys.shuffle(&mut rng);
    keys
}

fn value(k: u64) -> [u8; 8] {
    (k ^ 0x5A5A_5A5A).to_le_bytes()
}

/// What the suite drives.
trait Target: Sync {
    fn get(&self, k: u64, out: &mut Vec<u8>) -> Result<bool>;
    fn put(&self, k: u64) -> Result<()>;
    /// Records visited by a scan of up to 100 from `k`.
    fn scan100(&self, k: u64) -> Result<usize>;
    /// (index bytes, file bytes).
    fn memory(&self) -> (u64, u64);
    /// Finishes the background work earlier writes started (untimed, before each phase).
    fn settle(&self) -> Result<()> {
        Ok(())
    }
}

struct Shell {
    db: RawDb,
    learned: bool,
    page_size: usize,
}

impl Shell {
    fn new(kind: IndexKind, cfg: &SuiteConfig, load: &[u64]) -> Result<Shell> {
        let vfs: Arc<dyn Vfs> = Arc::new(MemVfs::new());
        let config = Config {
            index: kind.default_config(),
            key: TypeKind::U64,
            value: TypeKind::Bytes,
            durability: Durability::None,
            page_size: cfg.page_size,
            ..Config::default()
        };
        let options = Options {
            vfs,
            cache_bytes: (cfg.records as usize * 2).saturating_mul(96).max(64 << 20),
            checkpoint_wal_bytes: 1 << 40,
            ..Options::default()
        };
        let db = RawDb::create("/bench", &config, &options)?;
        let mut sorted = load.to_vec();
        sorted.sort_unstable();
        for chunk in sorted.chunks(1024) {
            let ops: Vec<WriteOp> = chunk
                .iter()
                .map(|&k| WriteOp::Put {
                    key: k.to_be_bytes().to_vec(),
                    value: value(k).to_vec(),
                })
                .collect();
            db.write(&ops, None)?;
        }
        // The workloads start from a settled index: the background work the load started (the learned
        // index's buffer compactions and splits) is done first, so the first workload does not measure its
        // tail. A no-op for the B+-tree.
        db.settle()?;
        Ok(Shell {
            db,
            learned: kind == IndexKind::Learned,
            page_size: cfg.page_size,
        })
    }
}

impl Target for Shell {
    fn settle(&self) -> Result<()> {
        Ok(self.db.settle()?)
    }
    fn get(&self, k: u64, out: &mut Vec<u8>) -> Result<bool> {
        Ok(self.db.get_into(&k.to_be_bytes(), out)?)
    }
    fn put(&self, k: u64) -> Result<()> {
        Ok(self.db.write(
            &[WriteOp::Put {
                key: k.to_be_bytes().to_vec(),
                value: value(k).to_vec(),
            }],
            None,
        )?)
    }
    fn scan100(&self, k: u64) -> Result<usize> {
        let range = KeyRange {
            lo: std::ops::Bound::Included(k.to_be_bytes().to_vec()),
            hi: std::ops::Bound::Unbounded,
        };
        let mut n = 0;
        for r in self.db.range(range, Direction::Forward).take(100) {
            r?;
            n += 1;
        }
        Ok(n)
    }
    fn memory(&self) -> (u64, u64) {
        if self.learned {
            let bytes = self
                .db
                .stats()
                .ok()
                .and_then(|s| s.family_stats::<serde_json::Value>())
                .and_then(|v| v.get("index_bytes").and_then(|b| b.as_u64()))
                .unwrap_or(0);
            (bytes, 0)
        } else {
            let s = self.db.index_stats();
            let file = s.pages * self.page_size as u64;
            (file / (self.page_size as u64 / 24).max(2), file)
        }
    }
}

struct StdMap(RwLock<BTreeMap<u64, Vec<u8>>>);

impl Target for StdMap {
    fn get(&self, k: u64, out: &mut Vec<u8>) -> Result<bool> {
        let m = self.0.read().unwrap_or_else(|e| e.into_inner());
        Ok(m.get(&k)
            .map(|v| {
                out.clear();
                out.extend_from_slice(v);
            })
            .is_some())
    }
    fn put(&self, k: u64) -> Result<()> {
        self.0
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(k, value(k).to_vec());
        Ok(())
    }
    fn scan100(&self, k: u64) -> Result<usize> {
        Ok(self
            .0
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .range(k..)
            .take(100)
            .count())
    }
    fn memory(&self) -> (u64, u64) {
        (0, 0)
    }
}

/// The CPU time this thread has run, in nanoseconds (Linux: `/proc/thread-self/schedstat`; 0 elsewhere).
fn thread_cpu_ns() -> u64 {
    schedstat_ns("/proc/thread-self/schedstat")
}

/// A thread's CPU time from its schedstat file, in nanoseconds (0 where it is unreadable).
fn schedstat_ns(path: &str) -> u64 {
    crate::measure::schedstat(path).map_or(0, |(cpu, _)| cpu)
}

/// The CPU time of the learned index's maintenance threads (`learned-maintain`), in nanoseconds.
fn maintainer_cpu_ns() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm"))
                .is_ok_and(|c| c.trim_end().starts_with("learned-maint"))
        })
        .map(|t| schedstat_ns(&t.path().join("schedstat").to_string_lossy()))
        .sum()
}

/// What one timed phase measured.
struct PhaseRun {
    lat: Latency,
    secs: f64,
    /// CPU time of the workload threads and of the maintenance thread, in nanoseconds.
    worker_cpu_ns: u64,
    maintainer_cpu_ns: u64,
}

#[allow(clippy::too_many_arguments)]
/// Runs `ops` operations of `workload` on `threads` threads; every answer is checked (a wrong one, or an
/// insert pool run dry, fails the run).
fn drive(
    t: &dyn Target,
    workload: &str,
    loaded: &[u64],
    pool: &[u64],
    next_insert: &AtomicUsize,
    ops: usize,
    threads: usize,
    seed: u64,
) -> Result<PhaseRun> {
    let insert_share = insert_share(workload);
    let maintainer0 = maintainer_cpu_ns();
    let start = Instant::now();
    let results: Vec<Result<(Latency, u64)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|ti| {
                s.spawn(move || -> Result<(Latency, u64)> {
                    let cpu0 = thread_cpu_ns();
                    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ ((ti as u64 + 1) * 0x9E37));
                    let mut lat = Latency::new();
                    let mut out = Vec::new();
                    let mine = ops / threads;
                    let mut done = 0;
                    let mut batch = [0u64; BATCH];
                    while done < mine {
                        let n = BATCH.min(mine - done);
                        // The batch's lookup keys are drawn before its clock starts: a draw is a random
                        // read of the loaded-key array (a cache and TLB miss at 10M keys, as dear as an
                        // index's own), and drawn together the 16 misses overlap instead of adding one
                        // harness miss to every operation.
                        for k in batch.iter_mut().take(n) {
                            *k = loaded[rng.random_range(0..loaded.len())];
                        }
                        let t0 = Instant::now();
                        for &k in batch.iter().take(n) {
                            if insert_share > 0.0 && rng.random_bool(insert_share) {
                                let i = next_insert.fetch_add(1, Ordering::Relaxed);
                                let &k = pool.get(i).ok_or_else(|| {
                                    BenchError::Usage(format!(
                                        "the insert pool ({} keys) ran dry",
                                        pool.len()
                                    ))
                                })?;
                                t.put(k)?;
                                continue;
                            }
                            let right = if workload == "scan100" {
                                t.scan100(k)? > 0
                            } else {
                                t.get(k, &mut out)? && out.as_slice() == value(k)
                            };
                            if !right {
                                return Err(BenchError::Usage(format!(
                                    "{workload}: a wrong answer for key {k}"
                                )));
                            }
                        }
                        let d = t0.elapsed() / n as u32;
                        for _ in 0..n {
                            lat.record(d);
                        }
                        done += n;
                    }
                    Ok((lat, thread_cpu_ns().saturating_sub(cpu0)))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(BenchError::Usage("a bench thread panicked".into())))
            })
            .collect()
    });
    let secs = start.elapsed().as_secs_f64();
    let mut run = PhaseRun {
        lat: Latency::new(),
        secs,
        worker_cpu_ns: 0,
        maintainer_cpu_ns: maintainer_cpu_ns().saturating_sub(maintainer0),
    };
    for r in results {
        let (l, cpu) = r?;
        run.lat.merge(&l);
        run.worker_cpu_ns += cpu;
    }
    Ok(run)
}

fn insert_share(workload: &str) -> f64 {
    match workload {
        "95/5" => 0.05,
        "50/50" => 0.5,
        _ => 0.0,
    }
}

/// Measured rounds per (workload, threads) and engine (`STRATA_LEARNED_ROUNDS`, default 5), after one
/// untimed warm-up round of reads.
fn rounds() -> usize {
    std::env::var("STRATA_LEARNED_ROUNDS")
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
        .map_or(5, |r| r.clamp(1, 100))
}

/// Operations of one phase of `workload` (scans of 100 get a twentieth: each visits 100 records).
fn phase_ops(workload: &str, ops: usize) -> usize {
    if workload == "scan100" {
        (ops / 20).max(BATCH)
    } else {
        ops
    }
}

/// Held-out keys the write phases insert, per engine, with room for the draw's variance.
fn inserts_needed(ops: usize, rounds: usize, threads: &[u32]) -> usize {
    let expected: f64 = WORKLOADS
        .iter()
        .map(|w| insert_share(w) * phase_ops(w, ops) as f64 * rounds as f64 * threads.len() as f64)
        .sum();
    (expected * 1.05 + 8.0 * expected.sqrt()) as usize + 1024
}

/// Whether `name` is in the comma-separated list of environment variable `var` (everything is, when it
/// is unset): for profiling one key set, workload or engine.
fn selected(var: &str, name: &str) -> bool {
    std::env::var(var).map_or(true, |list| list.split(',').any(|x| x.trim() == name))
}

/// Runs the suite (its engines are its own: the engine list is not used).
///
/// Method (stable ratios on a shared machine): per key set all three engines are loaded and kept; each
/// (workload, threads) phase runs one untimed warm-up of reads per engine and then `rounds()` rounds, each
/// running every engine once in an order that rotates per round, after settling the engine's background
/// work — so the engines share the machine's state round by round. A row's throughput is the fastest
/// round's (ops ÷ wall seconds); its latencies merge all rounds; its CPU µs/op (`server_cpu_us`) is
/// the workload threads' plus the maintenance thread's CPU time over all rounds ÷ ops. Workloads run in
/// the order of [`WORKLOADS`], each at every thread count, so the reads and scans measure the loaded
/// index before any insert.
pub fn run(cfg: &SuiteConfig, _engines: &[Box<dyn Engine>]) -> Result<Vec<BenchResult>> {
    let n = cfg.records as usize;
    let ops = cfg.ops.map_or(n.min(100_000), |o| o as usize).max(BATCH);
    let threads: Vec<u32> = if cfg.threads.is_empty() {
        vec![1, 2]
    } else {
        cfg.threads.clone()
    };
    let rounds = rounds();
    let mut rows = Vec::new();
    for (di, set) in DATASETS.iter().enumerate() {
        if !selected("STRATA_LEARNED_SETS", set) {
            continue;
        }
        let keys = key_set(
            set,
            n + inserts_needed(ops, rounds, &threads),
            cfg.seed ^ di as u64,
        );
        let (loaded, pool) = keys.split_at(n.min(keys.len()));
        let engines: Vec<(&str, Box<dyn Target>, AtomicUsize)> = [LEARNED, BTREE, STD]
            .into_iter()
            .filter(|e| selected("STRATA_LEARNED_ENGINES", e))
            .map(|engine| -> Result<(&str, Box<dyn Target>, AtomicUsize)> {
                let target: Box<dyn Target> = match engine {
                    LEARNED => Box::new(Shell::new(IndexKind::Learned, cfg, loaded)?),
                    BTREE => Box::new(Shell::new(IndexKind::BTree, cfg, loaded)?),
                    _ => Box::new(StdMap(RwLock::new(
                        loaded.iter().map(|&k| (k, value(k).to_vec())).collect(),
                    ))),
                };
                Ok((engine, target, AtomicUsize::new(0)))
            })
            .collect::<Result<_>>()?;
        for workload in WORKLOADS
            .into_iter()
            .filter(|w| selected("STRATA_LEARNED_WORKLOADS", w))
        {
            let per_phase = phase_ops(workload, ops);
            for &th in &threads {
                let mut runs: Vec<Vec<PhaseRun>> = engines.iter().map(|_| Vec::new()).collect();
                for round in 0..=rounds {
                    for i in 0..engines.len() {
                        let e = (i + round) % engines.len();
                        let (_, target, next) = &engines[e];
                        target.settle()?;
                        // Round 0 warms every engine up with reads (nothing inserted, nothing kept).
                        let (w, o) = if round == 0 {
                            ("read-only", per_phase.min(ops / 10).max(BATCH))
                        } else {
                            (workload, per_phase)
                        };
                        let seed = cfg.seed ^ ((round as u64) << 32);
                        let mut r =
                            drive(target.as_ref(), w, loaded, pool, next, o, th as usize, seed)
                                .map_err(|err| {
                                    BenchError::Usage(format!("{} on {set}: {err}", engines[e].0))
                                })?;
                        // The background work the round's writes left is done now, and its CPU time billed to
                        // the round (not its wall time).
                        let cpu0 = thread_cpu_ns();
                        target.settle()?;
                        r.worker_cpu_ns += thread_cpu_ns().saturating_sub(cpu0);
                        if round > 0 {
                            runs[e].push(r);
                        }
                    }
                }
                for ((engine, target, _), runs) in engines.iter().zip(runs) {
                    rows.push(phase_row(
                        cfg,
                        engine,
                        target.as_ref(),
                        set,
                        workload,
                        th,
                        &runs,
                    ));
                }
            }
        }
    }
    Ok(rows)
}

/// The row of one engine's rounds of one phase.
fn phase_row(
    cfg: &SuiteConfig,
    engine: &str,
    target: &dyn Target,
    set: &str,
    workload: &str,
    threads: u32,
    runs: &[PhaseRun],
) -> BenchResult {
    let mut lat = Latency::new();
    for r in runs {
        lat.merge(&r.lat);
    }
    let ops = lat.count();
    // The fastest round: other processes on the machine only ever slow a round down.
    let rate = runs
        .iter()
        .map(|r| r.lat.count() as f64 / r.secs.max(1e-9))
        .fold(0.0, f64::max);
    let (index, file) = target.memory();
    let labels = PhaseLabels {
        suite: NAME.into(),
        engine: engine.into(),
        workload: format!("{set}/{workload}"),
        records: cfg.records,
        threads,
        durability: "none".into(),
        cache_bytes: 0,
        page_size: cfg.page_size,
    };
    let parts = RowParts {
        // The fastest round's rate over all the rounds' operations.
        secs: ops as f64 / rate.max(1e-9),
        io: None,
        os: None,
        rss: (engine != STD).then_some(index),
        rss_scope: "index",
        disk_bytes: file,
        height: None,
    };
    let op = if workload == "scan100" {
        "scan"
    } else {
        "mixed"
    };
    let mut r = row(&labels, op, &lat, &parts);
    // The maintenance thread belongs to the learned index; it idles (settled) while the others run.
    let maint: u64 = if engine == LEARNED {
        runs.iter().map(|r| r.maintainer_cpu_ns).sum()
    } else {
        0
    };
    // The least CPU time per operation of any round, as the fastest round: other processes only add to
    // it (their cache pollution).
    let cpu_us = runs
        .iter()
        .map(|r| {
            let m = if engine == LEARNED {
                r.maintainer_cpu_ns
            } else {
                0
            };
            (r.worker_cpu_ns + m) as f64 / 1e3 / r.lat.count().max(1) as f64
        })
        .fold(f64::INFINITY, f64::min);
    if cpu_us.is_finite() && cpu_us > 0.0 {
        r.server_cpu_us = Some(cpu_us);
    }
    if std::env::var_os("STRATA_LEARNED_VERBOSE").is_some() {
        let mut per_round: Vec<String> = runs
            .iter()
            .map(|r| format!("{:.2}", r.lat.count() as f64 / r.secs.max(1e-9) / 1e6))
            .collect();
        per_round.truncate(16);
        // Transparent huge pages of the whole process (the learned index's arena asks for them; the
        // B+-tree's pages do not): proof that the arena's chunks are backed by 2 MiB pages.
        let huge = strata::lab::index::learned::arena::process_huge_bytes().unwrap_or(0);
        eprintln!(
            "{engine} {set}/{workload} {threads}T: Mops/s per round [{}], maintainer CPU {:.1} ms \
             ({:.1}% of wall), process AnonHugePages {} MiB",
            per_round.join(", "),
            maint as f64 / 1e6,
            maint as f64 / 1e7 / runs.iter().map(|r| r.secs).sum::<f64>().max(1e-9),
            huge >> 20
        );
    }
    r
}

/// Method notes for the report.
pub fn notes(cfg: &SuiteConfig) -> Vec<String> {
    vec![
        format!(
            "{} records loaded per key set (1.5× generated, the rest inserted); hard-set hardness {:.2} \
             (STRATA_LEARNED_HARDNESS)",
            cfg.records,
            hardness()
        ),
        "strata engines through RawDb on MemVfs, durability none, B+-tree cache holding every page; \
         std-btreemap under a RwLock without a shell"
            .into(),
        "index bytes: learned = models + pivots + group headers; B+-tree = estimated inner nodes \
         (file bytes ÷ (page size ÷ 24))"
            .into(),
    ]
}

fn find<'a>(rows: &'a [BenchResult], e: &str, w: &str, th: u32) -> Option<&'a BenchResult> {
    rows.iter()
        .find(|r| r.engine == e && r.workload == w && r.threads == th)
}

/// Ratios learned ÷ B+-tree per key set and workload, with the goals.
pub fn analysis(_cfg: &SuiteConfig, rows: &[BenchResult]) -> String {
    let mut s = String::new();
    let mut threads: Vec<u32> = rows.iter().map(|r| r.threads).collect();
    threads.sort_unstable();
    threads.dedup();
    let _ = writeln!(
        s,
        "| key set | workload | threads | learned Mops/s | btree Mops/s | std Mops/s | learned ÷ btree (wall) | learned ÷ btree (CPU/op) | CPU µs/op learned / btree | p99.9 learned ÷ btree | index B/key learned | btree inner B/key (est.) |\n|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for set in DATASETS {
        for w in WORKLOADS {
            for &th in &threads {
                let wl = format!("{set}/{w}");
                let (Some(l), Some(b)) = (find(rows, LEARNED, &wl, th), find(rows, BTREE, &wl, th))
                else {
                    continue;
                };
                let std = find(rows, STD, &wl, th)
                    .map_or("–".into(), |r| format!("{:.2}", r.ops_per_sec / 1e6));
                let per_key = |r: &BenchResult| {
                    r.rss_bytes.map_or("–".into(), |b| {
                        format!("{:.2}", b as f64 / r.records.max(1) as f64)
                    })
                };
                let (cpu_ratio, cpu) = match (l.server_cpu_us, b.server_cpu_us) {
                    (Some(lc), Some(bc)) => (
                        format!("{:.2}×", bc / lc.max(1e-9)),
                        format!("{lc:.3} / {bc:.3}"),
                    ),
                    _ => ("–".into(), "–".into()),
                };
                let _ = writeln!(
                    s,
                    "| {set} | {w} | {th} | {:.2} | {:.2} | {std} | {:.2}× | {cpu_ratio} | {cpu} | {:.2}× | {} | {} |",
                    l.ops_per_sec / 1e6,
                    b.ops_per_sec / 1e6,
                    l.ops_per_sec / b.ops_per_sec.max(1e-9),
                    l.p999_us / b.p999_us.max(1e-9),
                    per_key(l),
                    per_key(b),
                );
            }
        }
    }
    let _ = writeln!(
        s,
        "\nGoals (issue 19): read-only smooth ≥ 2× and hard ≥ 1.0× the B+-tree; 50/50 smooth ≥ 1.2×, hard ≥ 0.9×; \
         p99.9 ≤ 2× the B+-tree's; index memory ≤ 0.5× the B+-tree's inner nodes.\n\n\
         Wall ratios compare each engine's fastest of the interleaved rounds; the CPU/op ratio (B+-tree CPU time per \
         operation ÷ the learned index's, its maintenance thread included) is the throughput ratio free of \
         preemption by other processes — on a shared machine, the figure to trust."
    );
    s
}
