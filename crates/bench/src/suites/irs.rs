//! # The `irs` suite
//!
//! Independent range sampling (IRS) on the dynamized index (`strata-dynamized`) against the AB-tree (the
//! B+-tree family's `sample_range` over subtree counts, `strata-btree`, given at least the same memory) and a
//! single static ISAM structure over the same records (`static-isam`, the query-latency ideal): Rumbaugh &
//! Xie's IRS experiments at this machine's scale. Every load and query follows the protocol of
//! `suites::sampling`: random distinct `u64` keys, a 10% warm-up, then inserts with 5% deletes interleaved
//! (throughput counts both), then queries of k = 1000 samples over 0.1% of the live records, every sample
//! checked. N = `--records` (default 2 000 000), Q = `--ops` queries (default 1000).
//!
//! Workloads (the rows' `workload`; every load into a fresh database):
//! 1. `irs-memory` (N records): both engines with memory for all their data (the AB-tree's buffer pool is at
//!    least [`BTREE_BYTES_PER_RECORD`] per record, the dynamized index has no memory budget); `insert` and
//!    `sample` rows (Q queries); `static-isam` built from the live records answers the same queries.
//! 2. `irs-disk` (N/10 records): databases with O_DIRECT files; the dynamized index's memory budget is 1/10 of
//!    its data (16 bytes per record), the AB-tree's buffer pool the same (at least 8 pages); Q/10 queries.
//! 3. `insert-threads` (N/2 records): insert throughput with 1, 2 and 4 writers (`--threads` overrides),
//!    both engines in memory.
//! 4. `irs-memory-throttled` (N records): the dynamized index with probabilistic insert throttling; with
//!    `irs-memory` it gives insert p99 / p99.9 / max with and without throttling, next to the AB-tree's.
//! 5. Sweeps of the dynamized index alone (N/4 records, Q/4 queries): `sweep-buffer-<N_b>` for N_b ∈
//!    {1000, 4000, 12000, 48000}, `sweep-scale-<s>` for s ∈ {2, 4, 6, 8, 12}, and `sweep-delete-<δ>` for
//!    δ ∈ {0.01, 0.05, 0.2, 1} with 25% deletes (as the paper's δ sweep).
//!
//! Engines other than these two are skipped (they cannot sample). The report's analysis computes the goal
//! ratios from the rows: sampling latency and insert throughput against the AB-tree, in memory and on disk,
//! and sampling latency against the static ISAM.

use super::SuiteConfig;
use super::common::{Ctx, remove_dir};
use super::sampling::{
    K, LiveSet, Protocol, Query, RECORD_BYTES, SELECTIVITY, load, range_queries, sample_phase,
    sample_phase_labelled,
};
use crate::driver::{Driver, Engine, StaticIsam, StrataDynamized};
use crate::error::{BenchError, Result};
use crate::plot::{self, Bars, Figure, Lines, Panel, Series, Unit};
use crate::report::{fmt_bytes, fmt_us};
use crate::result::{BenchResult, first_seen};
use std::fmt::Write as _;
use std::path::Path;
use strata::options::{DynOptions, RuntimeOptions};

pub const NAME: &str = "irs";
pub const DESCRIPTION: &str = "independent range sampling (k = 1000, 0.1%): dynamized index vs the AB-tree and a static ISAM; insert throughput with 5% deletes in memory and on disk (O_DIRECT, memory 1/10 of the data), thread scaling, insert tails with and without throttling, N_b / s / δ sweeps";
pub const DEFAULT_RECORDS: u64 = 10_000_000;
/// Sampling queries of `irs-memory` when `--ops` is not given.
pub const DEFAULT_QUERIES: u64 = 10_000;

pub const DYNAMIZED: &str = "strata-dynamized";
pub const BTREE: &str = "strata-btree";
pub const STATIC_ISAM: &str = "static-isam";
/// The series name of the throttled dynamized index in figures.
const THROTTLED_SERIES: &str = "strata-dynamized, throttled";

pub const MEMORY: &str = "irs-memory";
pub const DISK: &str = "irs-disk";
pub const THREADS: &str = "insert-threads";
pub const THROTTLED: &str = "irs-memory-throttled";

/// Buffer capacities of the `sweep-buffer-*` workloads.
pub const SWEEP_BUFFER: [usize; 4] = [1000, 4000, 12_000, 48_000];
/// Scale factors of the `sweep-scale-*` workloads.
pub const SWEEP_SCALE: [usize; 5] = [2, 4, 6, 8, 12];
/// Maximum delete proportions of the `sweep-delete-*` workloads.
pub const SWEEP_DELTA: [f64; 4] = [0.01, 0.05, 0.2, 1.0];
/// Share of deletes in the δ sweep.
const SWEEP_DELETE_SHARE: f64 = 0.25;
/// Writer threads of `insert-threads` unless `--threads` names others.
const THREAD_COUNTS: [u32; 3] = [1, 2, 4];
/// Buffer pool of the in-memory AB-tree per record: a random load leaves leaves about 70% full, 23 bytes per
/// record with 4 KiB pages; twice that covers inner nodes and larger pages.
pub const BTREE_BYTES_PER_RECORD: u64 = 48;
/// Smallest buffer pool the B+-tree accepts, in pages.
const MIN_POOL_PAGES: u64 = 8;

/// Records and queries of each workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizes {
    pub memory: u64,
    pub disk: u64,
    pub threads: u64,
    pub sweep: u64,
    pub queries: u64,
    pub disk_queries: u64,
    pub sweep_queries: u64,
}

/// The sizes of a run of `cfg`.
pub fn sizes(cfg: &SuiteConfig) -> Sizes {
    let n = cfg.records;
    let q = cfg.ops.unwrap_or(DEFAULT_QUERIES);
    Sizes {
        memory: n,
        disk: (n / 10).max(1),
        threads: (n / 2).max(1),
        sweep: (n / 4).max(1),
        queries: q,
        disk_queries: (q / 10).max(10).min(q),
        sweep_queries: (q / 4).max(10).min(q),
    }
}

/// Writer threads of `insert-threads`.
fn thread_counts(cfg: &SuiteConfig) -> Vec<u32> {
    if cfg.threads == [1] {
        THREAD_COUNTS.to_vec()
    } else {
        cfg.threads.clone()
    }
}

/// Memory budget of the on-disk dynamized index for `records` records: a tenth of their bytes.
pub fn disk_budget(records: u64) -> u64 {
    (records * RECORD_BYTES / 10).max(1)
}

/// The dynamized index's options of the paper (tiering, s = 6, N_b = 12000, tombstones, δ = 0.05).
pub fn paper_options() -> DynOptions {
    DynOptions::default()
}

/// Method notes for the report.
pub fn notes(cfg: &SuiteConfig) -> Vec<String> {
    let z = sizes(cfg);
    let threads: Vec<String> = thread_counts(cfg).iter().map(u32::to_string).collect();
    vec![
        format!(
            "Protocol (Rumbaugh & Xie): keys are distinct uniformly random u64s with checkable u64 values; the \
             first 10% of a workload's records are inserted as an untimed warm-up, then the rest with 5% deletes \
             interleaved (a delete after an insert with probability 1/19; victims are uniformly random live keys \
             the writer inserted). The `insert` row counts inserts plus deletes (`ops`, `ops/s`, and the \
             latency percentiles cover both); the phase ends without a checkpoint (the WAL's own 64 MiB \
             checkpoints that fall inside it are part of it) once the background work its writes caused has \
             finished (`Driver::settle`: the dynamized index's last flushes and merges), so its time includes \
             every reconstruction of the load, as the paper's synchronous ones do. The engine's count of live records must match the bench's at the end."
        ),
        format!(
            "Queries: k = {K} independent uniform samples over a range of {}% of the live records at a \
             uniformly random position (the same ranges for every engine of a workload); a `sample` row's \
             `ops` are queries and its latency is per query. Every sample must be live, in its range and carry \
             its key's value, and over all samples the mean rank position in the range must be ½ within 6 \
             standard deviations; a wrong engine aborts the run.",
            SELECTIVITY * 100.0
        ),
        format!(
            "`{MEMORY}`: {} records, {} queries. The AB-tree's buffer pool is max(--cache, {BTREE_BYTES_PER_RECORD} \
             B × records) so that its whole tree is cached; the dynamized index runs with the paper's options \
             ({}) and no memory budget (every level in memory). `{STATIC_ISAM}`: one ISAM shard built from the \
             live records after the load, answering the same queries (two bound searches, then k uniform \
             indexes). Every engine and ideal hands samples to the suite by visitor (`RawDb::sample_visit` for \
             Strata's), without allocating per sample, so the ratios measure the indexes, not a result format.",
            z.memory,
            z.queries,
            StrataDynamized::new(paper_options(), RuntimeOptions::default()).describe(),
        ),
        format!(
            "`{DISK}`: {} records, {} queries, databases created with O_DIRECT (`direct_io`). The dynamized \
             index's memory budget is 1/10 of its data ({RECORD_BYTES} B per record: {}); the AB-tree gets a \
             buffer pool of the same size (at least {MIN_POOL_PAGES} pages). The rows' `cache_bytes` show each \
             engine's memory (for `{DYNAMIZED}` its memory budget; 0 = none). The dynamized index keeps the \
             levels that do not fit its budget on disk as shard files read page by page; the analysis's \
             `reads/query` counts every file read of a sampling query (the engine's own I/O counters).",
            z.disk,
            z.disk_queries,
            fmt_bytes(disk_budget(z.disk)),
        ),
        format!(
            "`{THREADS}`: {} records loaded by {} writer threads into fresh in-memory databases (each writer \
             inserts its own share of the keys and deletes among its own live keys). Strata's `RawDb` \
             serialises writes (one WAL writer lock), so extra writers can only overlap with background \
             reconstruction; the machine has {} cores.",
            z.threads,
            threads.join(", "),
            std::thread::available_parallelism().map_or(0, |n| n.get()),
        ),
        format!(
            "`{THROTTLED}`: `{MEMORY}` for the dynamized index with `RuntimeOptions {{ throttle: true }}` (each \
             write is delayed by {:?} with probability backlog / (backlog + 1) while sealed buffers wait), {} \
             sampling queries; its `insert` row against `{MEMORY}`'s gives the tail latency with and without \
             throttling.",
            RuntimeOptions::default().throttle_delay,
            z.sweep_queries,
        ),
        format!(
            "Sweeps (`{DYNAMIZED}` only, {} records, {} queries each, the paper's options except the swept \
             one): `sweep-buffer-<N_b>`, `sweep-scale-<s>`, and `sweep-delete-<δ>` with {}% deletes.",
            z.sweep,
            z.sweep_queries,
            SWEEP_DELETE_SHARE * 100.0
        ),
        "Latency: `Instant` around each call, HdrHistogram at nanosecond resolution (3 significant digits), \
         shown in µs. `rss_bytes` is the process's peak RSS during the phase, the bench's own bookkeeping \
         (8 bytes per live key and the sorted copy) included."
            .into(),
    ]
}

/// The engine named `name` among `engines`, if selected.
fn selected<'a>(engines: &'a [Box<dyn Engine>], name: &str) -> Option<&'a dyn Engine> {
    engines
        .iter()
        .find(|e| e.name() == name)
        .map(|e| e.as_ref())
}

/// A context for `engine` at `records` records with `cache_bytes` of memory and O_DIRECT when `direct`.
fn ctx<'a>(
    cfg: &'a SuiteConfig,
    engine: &'a dyn Engine,
    records: u64,
    cache_bytes: u64,
    direct: bool,
) -> Ctx<'a> {
    let mut c = Ctx::new(NAME, cfg, engine);
    c.records = records;
    c.opts.cache_bytes = cache_bytes as usize;
    c.opts.direct_io = direct;
    c
}

/// Buffer pool of the in-memory AB-tree for `records` records.
fn memory_pool(cfg: &SuiteConfig, records: u64) -> u64 {
    (records * BTREE_BYTES_PER_RECORD).max(cfg.cache_bytes as u64)
}

/// Loads a fresh database of `ctx`'s engine by `p` with `threads` writers, then runs `queries` sampling
/// queries on it (none: no sample phase). Returns the rows and the live records.
pub(crate) fn load_and_sample(
    ctx: &Ctx<'_>,
    workload: &str,
    threads: u32,
    p: &Protocol,
    queries: u64,
) -> Result<(Vec<BenchResult>, LiveSet)> {
    let dir = ctx
        .cfg
        .data_dir
        .join(ctx.engine.name())
        .join(format!("{workload}-{threads}"));
    let db = ctx.create(&dir)?;
    let (mut rows, live) = load(ctx, db.as_ref(), &dir, workload, threads, p)?;
    let live = LiveSet::new(live, p.weighted);
    if queries > 0 {
        let qs = range_queries(&live.keys, queries, ctx.cfg.seed, workload);
        rows.extend(sample_phase(
            ctx,
            ctx.engine.name(),
            db.as_ref(),
            &dir,
            workload,
            &live,
            &qs,
        )?);
    }
    db.close()?;
    remove_dir(&dir)?;
    Ok((rows, live))
}

/// Runs `queries` on a static structure `db` named `name` (rows labelled by `ctx` with no cache).
pub(crate) fn static_phase(
    ctx: &Ctx<'_>,
    name: &str,
    db: &dyn Driver,
    workload: &str,
    live: &LiveSet,
    queries: &[Query],
) -> Result<Vec<BenchResult>> {
    let dir = ctx.cfg.data_dir.join(name).join(workload);
    std::fs::create_dir_all(&dir).map_err(|e| BenchError::io(&dir, e))?;
    let mut labels = ctx.labels_as(name, workload, 1);
    labels.cache_bytes = 0;
    let rows = sample_phase_labelled(ctx, labels, db, &dir, live, queries)?;
    remove_dir(&dir)?;
    Ok(rows)
}

/// Runs the suite on `strata-dynamized` and `strata-btree` among `engines` (see the module doc).
pub fn run(cfg: &SuiteConfig, engines: &[Box<dyn Engine>]) -> Result<Vec<BenchResult>> {
    if cfg.records < 10 {
        return Err(BenchError::Usage(format!(
            "the {NAME} suite needs at least 10 records"
        )));
    }
    if cfg.codec.size() != 8 {
        return Err(BenchError::Usage(format!(
            "the {NAME} suite stores u64 values (--value-size 8)"
        )));
    }
    let btree = selected(engines, BTREE);
    let has_dyn = selected(engines, DYNAMIZED).is_some();
    if btree.is_none() && !has_dyn {
        return Err(BenchError::Usage(format!(
            "the {NAME} suite needs {DYNAMIZED} or {BTREE} among the engines"
        )));
    }
    let z = sizes(cfg);
    let mut out = Vec::new();
    let paper = StrataDynamized::new(paper_options(), RuntimeOptions::default());

    // 1. In memory: both engines, then the static ISAM over the same live records.
    let mut live = None;
    if let Some(bt) = btree {
        let c = ctx(cfg, bt, z.memory, memory_pool(cfg, z.memory), false);
        let (rows, l) =
            load_and_sample(&c, MEMORY, 1, &Protocol::paper(z.memory, false), z.queries)?;
        out.extend(rows);
        live = Some(l);
    }
    if has_dyn {
        let c = ctx(cfg, &paper, z.memory, 0, false);
        let (rows, l) =
            load_and_sample(&c, MEMORY, 1, &Protocol::paper(z.memory, false), z.queries)?;
        out.extend(rows);
        live = Some(l);
    }
    if let Some(live) = live {
        let c = ctx(cfg, &paper, z.memory, 0, false);
        let ideal = StaticIsam::build(&live.records(), false)?;
        let qs = range_queries(&live.keys, z.queries, cfg.seed, MEMORY);
        out.extend(static_phase(&c, STATIC_ISAM, &ideal, MEMORY, &live, &qs)?);
    }

    // 2. On disk: O_DIRECT, memory a tenth of the data.
    let budget = disk_budget(z.disk);
    let p = Protocol::paper(z.disk, false);
    if let Some(bt) = btree {
        let pool = budget.max(MIN_POOL_PAGES * cfg.page_size as u64);
        let c = ctx(cfg, bt, z.disk, pool, true);
        out.extend(load_and_sample(&c, DISK, 1, &p, z.disk_queries)?.0);
    }
    if has_dyn {
        let on_disk = StrataDynamized::new(
            DynOptions {
                memory_budget: budget,
                ..paper_options()
            },
            RuntimeOptions::default(),
        );
        let c = ctx(cfg, &on_disk, z.disk, budget, true);
        out.extend(load_and_sample(&c, DISK, 1, &p, z.disk_queries)?.0);
    }

    // 3. Thread scaling of inserts.
    let p = Protocol::paper(z.threads, false);
    for t in thread_counts(cfg) {
        if let Some(bt) = btree {
            let c = ctx(cfg, bt, z.threads, memory_pool(cfg, z.threads), false);
            out.extend(load_and_sample(&c, THREADS, t, &p, 0)?.0);
        }
        if has_dyn {
            let c = ctx(cfg, &paper, z.threads, 0, false);
            out.extend(load_and_sample(&c, THREADS, t, &p, 0)?.0);
        }
    }

    if !has_dyn {
        return Ok(out);
    }
    // 4. Tail latency with throttling.
    let throttled = StrataDynamized::new(
        paper_options(),
        RuntimeOptions {
            throttle: true,
            ..RuntimeOptions::default()
        },
    );
    let c = ctx(cfg, &throttled, z.memory, 0, false);
    let p = Protocol::paper(z.memory, false);
    out.extend(load_and_sample(&c, THROTTLED, 1, &p, z.sweep_queries)?.0);

    // 5. Sweeps.
    let p = Protocol::paper(z.sweep, false);
    let mut sweep = |workload: String, opts: DynOptions, p: &Protocol| -> Result<()> {
        let engine = StrataDynamized::new(opts, RuntimeOptions::default());
        let c = ctx(cfg, &engine, z.sweep, 0, false);
        out.extend(load_and_sample(&c, &workload, 1, p, z.sweep_queries)?.0);
        Ok(())
    };
    for nb in SWEEP_BUFFER {
        let opts = DynOptions {
            buffer_capacity: nb,
            ..paper_options()
        };
        sweep(format!("sweep-buffer-{nb}"), opts, &p)?;
    }
    for s in SWEEP_SCALE {
        let opts = DynOptions {
            scale_factor: s,
            ..paper_options()
        };
        sweep(format!("sweep-scale-{s}"), opts, &p)?;
    }
    let p = Protocol {
        delete_share: SWEEP_DELETE_SHARE,
        ..p
    };
    for delta in SWEEP_DELTA {
        let opts = DynOptions {
            max_delete_proportion: delta,
            ..paper_options()
        };
        sweep(format!("sweep-delete-{delta}"), opts, &p)?;
    }
    Ok(out)
}

/// The row of (`engine`, `workload`, `op`) at `threads` threads.
pub(crate) fn find<'a>(
    results: &'a [BenchResult],
    engine: &str,
    workload: &str,
    op: &str,
    threads: u32,
) -> Option<&'a BenchResult> {
    results.iter().find(|r| {
        r.engine == engine && r.workload == workload && r.op == op && r.threads == threads
    })
}

/// A ratio `a / b` when both are positive.
fn ratio(a: f64, b: f64) -> Option<f64> {
    (a > 0.0 && b > 0.0 && a.is_finite() && b.is_finite()).then(|| a / b)
}

/// One line of a goals table: what, the measured ratio with its inputs, the goal, whether it is met.
pub(crate) fn goal_row(
    s: &mut String,
    what: &str,
    inputs: Option<(String, f64)>,
    goal: &str,
    met: impl Fn(f64) -> bool,
) {
    match inputs {
        Some((detail, r)) => {
            let _ = writeln!(
                s,
                "| {what} | {r:.2}× ({detail}) | {goal} | {} |",
                if met(r) { "yes" } else { "**no**" }
            );
        }
        None => {
            let _ = writeln!(s, "| {what} | not measured | {goal} | - |");
        }
    }
}

/// Sampling latency (mean per query) of `a` over `b` in `workload`, with its inputs and the p50 ratio.
pub(crate) fn latency_ratio(
    results: &[BenchResult],
    workload: &str,
    a: &str,
    b: &str,
) -> Option<(String, f64)> {
    let (ra, rb) = (
        find(results, a, workload, "sample", 1)?,
        find(results, b, workload, "sample", 1)?,
    );
    let r = ratio(ra.mean_us, rb.mean_us)?;
    let p50 = ratio(ra.p50_us, rb.p50_us).map_or_else(|| "-".into(), |x| format!("{x:.2}×"));
    Some((
        format!(
            "mean {} / {} µs per query; p50 {} / {} µs = {p50}",
            fmt_us(ra.mean_us),
            fmt_us(rb.mean_us),
            fmt_us(ra.p50_us),
            fmt_us(rb.p50_us),
        ),
        r,
    ))
}

/// Insert throughput of `a` over `b` in `workload`, with its inputs.
pub(crate) fn throughput_ratio(
    results: &[BenchResult],
    workload: &str,
    a: &str,
    b: &str,
) -> Option<(String, f64)> {
    let (ra, rb) = (
        find(results, a, workload, "insert", 1)?,
        find(results, b, workload, "insert", 1)?,
    );
    let r = ratio(ra.ops_per_sec, rb.ops_per_sec)?;
    Some((
        format!("{:.0} / {:.0} ops/s", ra.ops_per_sec, rb.ops_per_sec),
        r,
    ))
}

/// The per-engine table of a workload's insert and sample rows.
pub(crate) fn engine_table(s: &mut String, results: &[BenchResult], workloads: &[&str]) {
    let _ = writeln!(
        s,
        "| workload | engine | records | insert ops/s | insert p99 µs | sample mean µs | p50 µs | p99 µs | \
         p99.9 µs | reads/query | memory | peak RSS |"
    );
    let _ = writeln!(
        s,
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for w in workloads {
        for e in first_seen(
            results
                .iter()
                .filter(|r| r.workload == *w)
                .map(|r| r.engine.as_str()),
        ) {
            let ins = find(results, e, w, "insert", 1);
            let smp = find(results, e, w, "sample", 1);
            let any = ins.or(smp).expect("a row of the engine");
            let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
            let _ = writeln!(
                s,
                "| {w} | {e} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                any.records,
                opt(ins.map(|r| format!("{:.0}", r.ops_per_sec))),
                opt(ins.map(|r| fmt_us(r.p99_us))),
                opt(smp.map(|r| fmt_us(r.mean_us))),
                opt(smp.map(|r| fmt_us(r.p50_us))),
                opt(smp.map(|r| fmt_us(r.p99_us))),
                opt(smp.map(|r| fmt_us(r.p999_us))),
                opt(smp.and_then(|r| Some(format!(
                    "{:.1}",
                    r.io_reads? as f64 / r.ops.max(1) as f64
                )))),
                if any.cache_bytes == 0 {
                    "no limit".into()
                } else {
                    fmt_bytes(any.cache_bytes)
                },
                opt(ins.or(smp).and_then(|r| r.rss_bytes).map(fmt_bytes)),
            );
        }
    }
}

/// The suite's findings: the goal ratios computed from the rows, then tables per topic (Markdown).
pub fn analysis(cfg: &SuiteConfig, results: &[BenchResult]) -> String {
    let z = sizes(cfg);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Goals (one run, this machine; ratios computed from the rows below; sampling latency = mean per query \
         of k = {K} at 0.1% selectivity):\n"
    );
    let _ = writeln!(s, "| goal | measured | target | met |");
    let _ = writeln!(s, "|---|---|---|---|");
    goal_row(
        &mut s,
        &format!(
            "in memory ({} records): sampling latency, {DYNAMIZED} / {BTREE}",
            z.memory
        ),
        latency_ratio(results, MEMORY, DYNAMIZED, BTREE),
        "≤ 0.33×",
        |r| r <= 1.0 / 3.0,
    );
    goal_row(
        &mut s,
        &format!("in memory: insert throughput (5% deletes), {DYNAMIZED} / {BTREE}"),
        throughput_ratio(results, MEMORY, DYNAMIZED, BTREE),
        "≥ 2×",
        |r| r >= 2.0,
    );
    goal_row(
        &mut s,
        &format!(
            "on disk ({} records): sampling latency, {BTREE} / {DYNAMIZED}",
            z.disk
        ),
        latency_ratio(results, DISK, BTREE, DYNAMIZED),
        "≥ 10×",
        |r| r >= 10.0,
    );
    goal_row(
        &mut s,
        &format!("on disk: insert throughput, {DYNAMIZED} / {BTREE}"),
        throughput_ratio(results, DISK, DYNAMIZED, BTREE),
        "≥ 10×",
        |r| r >= 10.0,
    );
    goal_row(
        &mut s,
        &format!("in memory: sampling latency, {DYNAMIZED} / {STATIC_ISAM}"),
        latency_ratio(results, MEMORY, DYNAMIZED, STATIC_ISAM),
        "≤ 1.5×",
        |r| r <= 1.5,
    );
    if let Ok(load) = std::fs::read_to_string("/proc/loadavg") {
        let avg: Vec<&str> = load.split_whitespace().take(3).collect();
        let _ = writeln!(
            s,
            "\nLoad average at the end of the run: {} (1, 5, 15 minutes) on {} cores; other processes' load \
             shows in the latency tails.",
            avg.join(", "),
            std::thread::available_parallelism().map_or(0, |n| n.get())
        );
    }
    s.push('\n');
    engine_table(&mut s, results, &[MEMORY, DISK, THROTTLED]);
    if let Some(r) = find(results, BTREE, DISK, "sample", 1)
        && let Some(reads) = r.page_reads
    {
        let _ = writeln!(
            s,
            "\nOn disk the AB-tree read {:.1} pages per sampling query: a 0.1% range of its {} records holds \
             about {} records, a few leaves, which the first draws of a query bring into its buffer pool, so k = \
             {K} draws cost a few reads, not k. The paper's ≥ 10× on disk came from 0.1% ranges of billions of \
             records (millions per range), where every AB-tree draw is a random read; at this scale the AB-tree \
             samples from its buffer pool and the on-disk sampling ratio mostly compares CPU costs.",
            reads as f64 / r.ops.max(1) as f64,
            r.records,
            (r.records as f64 * SELECTIVITY).round().max(1.0),
        );
    }
    if let Some(r) = find(results, DYNAMIZED, DISK, "insert", 1) {
        let _ = writeln!(
            s,
            "\nOn disk, `{DYNAMIZED}` had a memory budget of {}; its database directory held {} at the end of \
             the load. The process's peak RSS during the load, {}, cannot isolate the index's memory (it \
             includes the bench's live-key lists, {} at 8 B per record, and memory the allocator kept from \
             earlier phases).",
            fmt_bytes(r.cache_bytes),
            fmt_bytes(r.disk_bytes),
            r.rss_bytes.map_or_else(|| "unknown".into(), fmt_bytes),
            fmt_bytes(8 * r.records),
        );
    }
    // Tail latency.
    let _ = writeln!(
        s,
        "\nInsert latency in memory (inserts and deletes, µs; a mean far above p99.9 means that a few \
         operations — stalls behind reconstruction or checkpoints — take most of the time):\n\n| engine | \
         workload | mean | p50 | p99 | p99.9 | max | ops/s |\n|---|---|---:|---:|---:|---:|---:|---:|"
    );
    for (e, w) in [(BTREE, MEMORY), (DYNAMIZED, MEMORY), (DYNAMIZED, THROTTLED)] {
        if let Some(r) = find(results, e, w, "insert", 1) {
            let _ = writeln!(
                s,
                "| {e} | {w} | {} | {} | {} | {} | {} | {:.0} |",
                fmt_us(r.mean_us),
                fmt_us(r.p50_us),
                fmt_us(r.p99_us),
                fmt_us(r.p999_us),
                fmt_us(r.max_us),
                r.ops_per_sec
            );
        }
    }
    // Threads.
    let counts = {
        let mut t: Vec<u32> = results
            .iter()
            .filter(|r| r.workload == THREADS)
            .map(|r| r.threads)
            .collect();
        t.sort_unstable();
        t.dedup();
        t
    };
    if !counts.is_empty() {
        let _ = writeln!(
            s,
            "\nInsert throughput against writer threads (`{THREADS}`, ops/s; in parentheses: against 1 \
             thread):\n"
        );
        let head: Vec<String> = counts.iter().map(|t| format!("{t} threads")).collect();
        let _ = writeln!(s, "| engine | {} |", head.join(" | "));
        let _ = writeln!(s, "|---|{}", "---:|".repeat(counts.len()));
        for e in [BTREE, DYNAMIZED] {
            let base = find(results, e, THREADS, "insert", counts[0]).map(|r| r.ops_per_sec);
            let cells: Vec<String> = counts
                .iter()
                .map(|t| {
                    find(results, e, THREADS, "insert", *t).map_or_else(
                        || "-".into(),
                        |r| match base.and_then(|b| ratio(r.ops_per_sec, b)) {
                            Some(x) => format!("{:.0} ({x:.2}×)", r.ops_per_sec),
                            None => format!("{:.0}", r.ops_per_sec),
                        },
                    )
                })
                .collect();
            if cells.iter().any(|c| c != "-") {
                let _ = writeln!(s, "| {e} | {} |", cells.join(" | "));
            }
        }
    }
    // Sweeps.
    for (prefix, what) in SWEEPS {
        let rows: Vec<&str> = first_seen(
            results
                .iter()
                .filter(|r| r.workload.starts_with(prefix))
                .map(|r| r.workload.as_str()),
        );
        if rows.is_empty() {
            continue;
        }
        let _ = writeln!(
            s,
            "\nSweep of {what} (`{DYNAMIZED}`, {} records):\n\n| {what} | insert ops/s | insert p99 µs | sample \
             mean µs | sample p99 µs |\n|---:|---:|---:|---:|---:|",
            z.sweep
        );
        for w in rows {
            let ins = find(results, DYNAMIZED, w, "insert", 1);
            let smp = find(results, DYNAMIZED, w, "sample", 1);
            let cell =
                |r: Option<&BenchResult>, f: fn(&BenchResult) -> String| r.map_or("-".into(), f);
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} |",
                &w[prefix.len()..],
                cell(ins, |r| format!("{:.0}", r.ops_per_sec)),
                cell(ins, |r| fmt_us(r.p99_us)),
                cell(smp, |r| fmt_us(r.mean_us)),
                cell(smp, |r| fmt_us(r.p99_us)),
            );
        }
    }
    s
}

/// The sweeps: workload prefix and what it varies.
const SWEEPS: [(&str, &str); 3] = [
    ("sweep-buffer-", "buffer capacity N_b"),
    ("sweep-scale-", "scale factor s"),
    ("sweep-delete-", "maximum delete proportion δ"),
];

/// Colour index of a series, the same in every figure of the sampling suites.
pub(crate) fn colour_of(series: &str) -> usize {
    [
        BTREE,
        DYNAMIZED,
        STATIC_ISAM,
        "static-alias",
        THROTTLED_SERIES,
    ]
    .iter()
    .position(|s| *s == series)
    .unwrap_or(5)
}

/// Bars of `f(row)` per (group = workload) for each engine of `engines`, op `op` at one thread.
pub(crate) fn engine_bars(
    results: &[BenchResult],
    engines: &[&str],
    groups: &[(&str, &str)],
    op: &str,
    f: fn(&BenchResult) -> f64,
) -> Vec<Series> {
    engines
        .iter()
        .filter_map(|e| {
            let values: Vec<Option<f64>> = groups
                .iter()
                .map(|(w, _)| find(results, e, w, op, 1).map(f))
                .collect();
            values.iter().any(Option::is_some).then(|| Series {
                name: e.to_string(),
                colour: colour_of(e),
                values,
            })
        })
        .collect()
}

/// Latency statistics shown per query in the sampling figures.
pub(crate) type Stat = (&'static str, fn(&BenchResult) -> f64);
pub(crate) const LATENCY_STATS: [Stat; 3] = [
    ("mean", |r| r.mean_us),
    ("p50", |r| r.p50_us),
    ("p99", |r| r.p99_us),
];

/// Bars of sampling latency statistics, a cluster per (workload, label), a bar per engine.
pub(crate) fn sample_latency_bars(
    results: &[BenchResult],
    title: String,
    engines: &[&str],
    clusters: &[(&str, &str)],
) -> Bars {
    let series = engines
        .iter()
        .filter_map(|e| {
            let values: Vec<Option<f64>> = clusters
                .iter()
                .flat_map(|(w, _)| {
                    let row = find(results, e, w, "sample", 1);
                    LATENCY_STATS.iter().map(move |(_, f)| row.map(f))
                })
                .collect();
            values.iter().any(Option::is_some).then(|| Series {
                name: e.to_string(),
                colour: colour_of(e),
                values,
            })
        })
        .collect();
    Bars {
        title,
        y_desc: format!("latency per query of k = {K} (log scale)"),
        log: true,
        unit: Unit::Latency,
        groups: clusters
            .iter()
            .flat_map(|_| LATENCY_STATS.iter().map(|(n, _)| n.to_string()))
            .collect(),
        clusters: clusters
            .iter()
            .map(|(_, label)| (label.to_string(), LATENCY_STATS.len()))
            .collect(),
        series,
    }
}

/// The figures of the suite (see the module doc of [`crate::plot`]): insert throughput, sampling latency,
/// thread scaling, insert tail latency, one figure per sweep.
pub fn figures(results: &[BenchResult], dir: &Path) -> Result<Vec<Figure>> {
    if results.is_empty() {
        return Ok(Vec::new());
    }
    plot::prepare(dir)?;
    let mut figs = Vec::new();
    let places = [(MEMORY, "in memory"), (DISK, "on disk")];
    let series = engine_bars(results, &[BTREE, DYNAMIZED], &places, "insert", |r| {
        r.ops_per_sec
    });
    if !series.is_empty() {
        let log = plot::spans_decades(
            series
                .iter()
                .flat_map(|s| s.values.iter().flatten().copied()),
        );
        figs.push(plot::bars_figure(
            dir,
            "irs-insert",
            &Bars {
                title: "Insert throughput, 5% deletes".into(),
                y_desc: if log {
                    "inserts + deletes per second (log scale)".into()
                } else {
                    "inserts + deletes per second".into()
                },
                log,
                unit: Unit::Rate,
                groups: places.iter().map(|p| p.1.to_string()).collect(),
                clusters: Vec::new(),
                series,
            },
        )?);
    }
    let bars = sample_latency_bars(
        results,
        format!("IRS sampling latency, k = {K}, 0.1% selectivity"),
        &[BTREE, DYNAMIZED, STATIC_ISAM],
        &places,
    );
    if !bars.series.is_empty() {
        figs.push(plot::bars_figure(dir, "irs-sample", &bars)?);
    }
    if let Some(lines) = thread_lines(results) {
        figs.push(plot::lines_figure(dir, "irs-threads", &lines)?);
    }
    let tails: Vec<(&str, &str, &str)> = [
        (BTREE, MEMORY, BTREE),
        (DYNAMIZED, MEMORY, DYNAMIZED),
        (DYNAMIZED, THROTTLED, THROTTLED_SERIES),
    ]
    .into_iter()
    .filter(|(e, w, _)| find(results, e, w, "insert", 1).is_some())
    .collect();
    if !tails.is_empty() {
        type Q = (&'static str, fn(&BenchResult) -> f64);
        let stats: [Q; 4] = [
            ("p50", |r| r.p50_us),
            ("p99", |r| r.p99_us),
            ("p99.9", |r| r.p999_us),
            ("max", |r| r.max_us),
        ];
        figs.push(plot::bars_figure(
            dir,
            "irs-tail",
            &Bars {
                title: "Insert tail latency in memory, with and without throttling".into(),
                y_desc: "latency per insert or delete (log scale)".into(),
                log: true,
                unit: Unit::Latency,
                groups: stats.iter().map(|q| q.0.to_string()).collect(),
                clusters: Vec::new(),
                series: tails
                    .iter()
                    .map(|(e, w, name)| {
                        let r = find(results, e, w, "insert", 1).expect("filtered");
                        Series {
                            name: name.to_string(),
                            colour: colour_of(name),
                            values: stats.iter().map(|q| Some((q.1)(r))).collect(),
                        }
                    })
                    .collect(),
            },
        )?);
    }
    for (prefix, what) in SWEEPS {
        if let Some(lines) = sweep_lines(results, prefix, what) {
            let stem = prefix.trim_end_matches('-');
            figs.push(plot::lines_figure(dir, stem, &lines)?);
        }
    }
    Ok(figs)
}

/// Insert throughput and p99 latency against writer threads, one line per engine.
fn thread_lines(results: &[BenchResult]) -> Option<Lines> {
    let mut counts: Vec<u32> = results
        .iter()
        .filter(|r| r.workload == THREADS)
        .map(|r| r.threads)
        .collect();
    counts.sort_unstable();
    counts.dedup();
    if counts.is_empty() {
        return None;
    }
    let engines: Vec<&str> = [BTREE, DYNAMIZED]
        .into_iter()
        .filter(|e| {
            results
                .iter()
                .any(|r| r.workload == THREADS && r.engine == *e)
        })
        .collect();
    let line = |f: fn(&BenchResult) -> f64| -> Vec<(usize, Vec<(usize, f64)>)> {
        engines
            .iter()
            .map(|e| {
                let pts = counts
                    .iter()
                    .enumerate()
                    .filter_map(|(i, t)| Some((i, f(find(results, e, THREADS, "insert", *t)?))))
                    .collect();
                (colour_of(e), pts)
            })
            .collect()
    };
    let categories: Vec<String> = counts.iter().map(u32::to_string).collect();
    let p99 = line(|r| r.p99_us);
    Some(Lines {
        title: "Insert thread scaling, 5% deletes, in memory".into(),
        panels: vec![
            Panel {
                caption: "insert throughput".into(),
                x_desc: "writer threads".into(),
                categories: categories.clone(),
                y_desc: "inserts + deletes per second".into(),
                unit: Unit::Rate,
                log: false,
                lines: line(|r| r.ops_per_sec),
            },
            Panel {
                caption: "insert p99 latency".into(),
                x_desc: "writer threads".into(),
                categories,
                y_desc: "latency (log scale)".into(),
                unit: Unit::Latency,
                log: true,
                lines: p99,
            },
        ],
        legend: engines
            .iter()
            .map(|e| (e.to_string(), colour_of(e)))
            .collect(),
    })
}

/// Insert throughput and sampling latency against the swept parameter.
fn sweep_lines(results: &[BenchResult], prefix: &str, what: &str) -> Option<Lines> {
    let workloads = first_seen(
        results
            .iter()
            .filter(|r| r.engine == DYNAMIZED && r.workload.starts_with(prefix))
            .map(|r| r.workload.as_str()),
    );
    if workloads.is_empty() {
        return None;
    }
    let point = |op: &str, f: fn(&BenchResult) -> f64| -> Vec<(usize, f64)> {
        workloads
            .iter()
            .enumerate()
            .filter_map(|(i, w)| Some((i, f(find(results, DYNAMIZED, w, op, 1)?))))
            .collect()
    };
    let latency = point("sample", |r| r.mean_us);
    let log = plot::spans_decades(latency.iter().map(|p| p.1));
    let categories: Vec<String> = workloads
        .iter()
        .map(|w| w[prefix.len()..].to_string())
        .collect();
    let c = colour_of(DYNAMIZED);
    Some(Lines {
        title: format!("Sweep of the {what}"),
        panels: vec![
            Panel {
                caption: "insert throughput".into(),
                x_desc: what.into(),
                categories: categories.clone(),
                y_desc: "inserts + deletes per second".into(),
                unit: Unit::Rate,
                log: false,
                lines: vec![(c, point("insert", |r| r.ops_per_sec))],
            },
            Panel {
                caption: format!("sampling latency, k = {K}"),
                x_desc: what.into(),
                categories,
                y_desc: if log {
                    "mean latency per query (log scale)".into()
                } else {
                    "mean latency per query".into()
                },
                unit: Unit::Latency,
                log,
                lines: vec![(c, latency)],
            },
        ],
        legend: vec![(DYNAMIZED.to_string(), c)],
    })
}
