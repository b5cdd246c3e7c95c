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
//! 6. `disk-wide-<0.1|1|10>%` (N records, Q/100 queries, at least 10): on disk with O_DIRECT and memory
//!    1/10 of the data, ranges of 0.1%, 1% and 10% of the records, the AB-tree bulk-loaded; the dynamized
//!    index with batched page reads and one page at a time (`strata-dynamized-serial`). See `disk_wide`.
//!
//! ## Choosing workloads
//! `STRATA_IRS_WORKLOADS` (comma-separated, default all) picks the groups that run: `memory` (1, with the
//! static ISAM), `disk` (2), `threads` (3), `throttled` (4), `sweeps` (5), `disk-wide` (6). The 10M wide
//! on-disk run of issue 18:
//!
//! `STRATA_IRS_WORKLOADS=disk-wide strata bench --suite irs --engines strata-btree,strata-dynamized --records 10000000`
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
    /// Records and queries (per selectivity) of the `disk-wide-*` workloads.
    pub wide: u64,
    pub wide_queries: u64,
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
        wide: n,
        wide_queries: (q / 100).max(10).min(q),
    }
}

/// The workload groups `STRATA_IRS_WORKLOADS` can name (module doc), in the order they run.
pub const GROUPS: [&str; 6] = [
    "memory",
    "disk",
    "threads",
    "throttled",
    "sweeps",
    "disk-wide",
];

/// The groups to run: `STRATA_IRS_WORKLOADS`'s list, or all; an unknown name is a usage error.
pub fn groups_from(list: Option<&str>) -> Result<Vec<&'static str>> {
    super::common::workload_groups("STRATA_IRS_WORKLOADS", &GROUPS, list)
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
        format!(
            "`disk-wide-<0.1|1|10>%`: {} records on disk (O_DIRECT), memory 1/10 of the data for both engines              ({}; the AB-tree's buffer pool at least {MIN_POOL_PAGES} pages), {} queries of k = {K} per              selectivity. `{DYNAMIZED}` is loaded by the protocol (row `{WIDE_LOAD}`); `{BTREE}` is              bulk-loaded (`RawDb::bulk_load`, full leaves, row `bulk-load`) from the same live records. The same              ranges go to the AB-tree, to the dynamized index with batched page reads (a query's record pages              read together, nearby pages in one read, by a pool of I/O threads) and to the same database              reading one page at a time (`{SERIAL}`). Pages read per query = bytes read / page size /              queries (every engine file). Groups run: `STRATA_IRS_WORKLOADS` (default all of {}).",
            z.wide,
            fmt_bytes(disk_budget(z.wide)),
            z.wide_queries,
            GROUPS.join(", "),
        ),
        "Latency: one `Instant` read per call (loads: from the end of the previous operation, so the \
         loop's few nanoseconds between calls count; queries: around each call), HdrHistogram at nanosecond resolution (3 significant digits), \
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
    let groups = groups_from(std::env::var("STRATA_IRS_WORKLOADS").ok().as_deref())?;
    let mut out = Vec::new();
    let paper = StrataDynamized::new(paper_options(), RuntimeOptions::default());

    // 1. In memory: both engines, then the static ISAM over the same live records.
    let mut live = None;
    let memory = groups.contains(&"memory");
    if let Some(bt) = btree.filter(|_| memory) {
        let c = ctx(cfg, bt, z.memory, memory_pool(cfg, z.memory), false);
        let (rows, l) =
            load_and_sample(&c, MEMORY, 1, &Protocol::paper(z.memory, false), z.queries)?;
        out.extend(rows);
        live = Some(l);
    }
    if has_dyn && memory {
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
    let disk = groups.contains(&"disk");
    if let Some(bt) = btree.filter(|_| disk) {
        let pool = budget.max(MIN_POOL_PAGES * cfg.page_size as u64);
        let c = ctx(cfg, bt, z.disk, pool, true);
        out.extend(load_and_sample(&c, DISK, 1, &p, z.disk_queries)?.0);
    }
    if has_dyn && disk {
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
    let threads = if groups.contains(&"threads") {
        thread_counts(cfg)
    } else {
        Vec::new()
    };
    for t in threads {
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
        if groups.contains(&"disk-wide") {
            out.extend(disk_wide::run_wide(cfg, btree, false, &z)?);
        }
        return Ok(out);
    }
    // 4. Tail latency with throttling.
    if groups.contains(&"throttled") {
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
    }

    // 5. Sweeps.
    if groups.contains(&"sweeps") {
        sweeps(cfg, &z, &mut out)?;
    }
    // 6. Wide ranges on disk.
    if groups.contains(&"disk-wide") {
        out.extend(disk_wide::run_wide(cfg, btree, true, &z)?);
    }
    Ok(out)
}

/// The sweeps of the dynamized index alone (group 5), appended to `out`.
fn sweeps(cfg: &SuiteConfig, z: &Sizes, out: &mut Vec<BenchResult>) -> Result<()> {
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
    Ok(())
}

/// The sweeps: workload prefix and what it varies.
pub(crate) const SWEEPS: [(&str, &str); 3] = [
    ("sweep-buffer-", "buffer capacity N_b"),
    ("sweep-scale-", "scale factor s"),
    ("sweep-delete-", "maximum delete proportion δ"),
];

mod analysis;
mod disk_wide;
mod figures;
pub use analysis::analysis;
pub(crate) use analysis::{engine_table, find, goal_row, latency_ratio, throughput_ratio};
pub use disk_wide::{SERIAL, WIDE_LOAD, WIDE_SELECTIVITIES, wide_workload};
pub use figures::figures;
pub(crate) use figures::{colour_of, engine_bars, sample_latency_bars};
