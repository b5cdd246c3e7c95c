//! The `irs` suite's wide on-disk workloads (`disk-wide-*`): on-disk IRS re-framed so that it can be measured
//! at this machine's scale (issue 18).
//!
//! At 0.1% of a million records a range spans a few AB-tree leaves, which the first draws of a query bring
//! into its buffer pool, so k draws cost a few reads; the paper's regime (ranges of millions of records,
//! every draw a random read) is out of reach by loading billions. Here ranges of 1% and 10% of N records span
//! far more pages than k = 1000 draws touch, so both engines pay about one page read per draw — unless they
//! overlap them:
//!
//! * **Data**: N = `--records` records in databases created with O_DIRECT; memory is 1/10 of the record
//!   bytes for both engines ([`disk_budget`]): the dynamized index's memory budget, the AB-tree's buffer
//!   pool (at least 8 pages).
//! * **`strata-dynamized`** is loaded by the sampling protocol (10% warm-up, then inserts with 5% deletes;
//!   its `insert` row is workload `disk-wide-load`). **`strata-btree`** (the AB-tree) is *bulk-loaded*
//!   (`Driver::bulk_load`: full leaves built bottom-up, one checkpoint) from the same live records — those
//!   the dynamized load left, or all N keys when the dynamized index is not selected — so a 10M load takes
//!   seconds; its `bulk-load` row (one op) times the load.
//! * **Queries**: per selectivity in [`WIDE_SELECTIVITIES`] (workload `disk-wide-<percent>%`), the same
//!   ranges for every engine, k = 1000 samples each, checked as every sample phase (live, in range, right
//!   value, uniform rank). The dynamized index answers twice: with its default batched page reads (a query's
//!   record pages read together by the shard I/O pool) and as `strata-dynamized-serial`, the same database
//!   reading one page at a time (`with_batched_reads(false)`), which isolates what batching buys.
//! * **Rows**: per-query latency (p50 / p99 / mean) and the engines' I/O counters; the analysis reports pages
//!   read per query (bytes read / page size / queries) and the goal ratios.
//!
//! Cost of a run: the dynamized load (N inserts), a bulk load of N records, and 3 × [`Sizes::wide_queries`]
//! queries per engine, each up to k random page reads.

use super::*;
use crate::driver::Driver;
use crate::measure::Phase;
use crate::suites::sampling::{key_at, range_queries_of};
use strata::lab::index::dynamized::shard_file::with_batched_reads;

/// Range widths of the wide workloads, as shares of the live records.
pub const WIDE_SELECTIVITIES: [f64; 3] = [0.001, 0.01, 0.1];
/// Workload of the dynamized index's load.
pub const WIDE_LOAD: &str = "disk-wide-load";
/// The dynamized index reading one page at a time (same database as [`DYNAMIZED`]).
pub const SERIAL: &str = "strata-dynamized-serial";

/// The workload name of selectivity `s`: `disk-wide-0.1%`, `disk-wide-1%`, `disk-wide-10%`.
pub fn wide_workload(s: f64) -> String {
    format!("disk-wide-{}%", s * 100.0)
}

/// Runs the wide workloads on the engines selected (see the module doc).
pub(crate) fn run_wide(
    cfg: &SuiteConfig,
    btree: Option<&dyn Engine>,
    has_dyn: bool,
    z: &Sizes,
) -> Result<Vec<BenchResult>> {
    let n = z.wide;
    let budget = disk_budget(n);
    let mut out = Vec::new();
    let mut live = None;
    if has_dyn {
        let engine = StrataDynamized::new(
            DynOptions {
                memory_budget: budget,
                ..paper_options()
            },
            RuntimeOptions::default(),
        );
        let c = ctx(cfg, &engine, n, budget, true);
        let dir = cfg.data_dir.join(DYNAMIZED).join(WIDE_LOAD);
        let db = c.create(&dir)?;
        let (rows, keys) = load(
            &c,
            db.as_ref(),
            &dir,
            WIDE_LOAD,
            1,
            &Protocol::paper(n, false),
        )?;
        out.extend(rows);
        let l = LiveSet::new(keys, false);
        for s in WIDE_SELECTIVITIES {
            let w = wide_workload(s);
            let qs = range_queries_of(&l.keys, z.wide_queries, cfg.seed, &w, s);
            out.extend(sample_phase(&c, DYNAMIZED, db.as_ref(), &dir, &w, &l, &qs)?);
            out.extend(with_batched_reads(false, || {
                sample_phase(&c, SERIAL, db.as_ref(), &dir, &w, &l, &qs)
            })?);
        }
        db.close()?;
        remove_dir(&dir)?;
        live = Some(l);
    }
    if let Some(bt) = btree {
        let l = live.unwrap_or_else(|| {
            let mut keys: Vec<u64> = (0..n).map(|i| key_at(cfg.seed, i)).collect();
            keys.sort_unstable();
            LiveSet::new(keys, false)
        });
        let pool = budget.max(MIN_POOL_PAGES * cfg.page_size as u64);
        let c = ctx(cfg, bt, n, pool, true);
        let dir = cfg.data_dir.join(BTREE).join("disk-wide");
        let db = c.create(&dir)?;
        out.extend(bulk_load(&c, db.as_ref(), &dir, &l.keys)?);
        for s in WIDE_SELECTIVITIES {
            let w = wide_workload(s);
            let qs = range_queries_of(&l.keys, z.wide_queries, cfg.seed, &w, s);
            out.extend(sample_phase(&c, BTREE, db.as_ref(), &dir, &w, &l, &qs)?);
        }
        db.close()?;
        remove_dir(&dir)?;
    }
    Ok(out)
}

/// Bulk-loads the sorted `keys` (with their protocol values) into the empty `db`: one timed op, workload
/// `bulk-load`; the engine must report every key loaded.
fn bulk_load(c: &Ctx<'_>, db: &dyn Driver, dir: &Path, keys: &[u64]) -> Result<Vec<BenchResult>> {
    let mut phase = Phase::begin(
        db,
        c.labels_as(c.engine.name(), "bulk-load", 1),
        1,
        c.cfg.progress,
    );
    let op = phase.op("bulk-load");
    let mut records = keys.iter().map(|&k| {
        (
            k,
            crate::suites::sampling::value_of(k).to_be_bytes().to_vec(),
        )
    });
    let loaded = phase.time(op, || db.bulk_load(&mut records))?;
    crate::suites::common::verify(loaded == keys.len() as u64, || {
        format!(
            "{}: bulk load reported {loaded} records, {} given",
            c.engine.name(),
            keys.len()
        )
    })?;
    phase.finish(dir)
}

/// Pages read per query of a `sample` row: bytes read / page size / queries.
pub(crate) fn pages_per_query(r: &BenchResult) -> Option<f64> {
    Some(r.bytes_read? as f64 / r.page_size.max(1) as f64 / r.ops.max(1) as f64)
}

/// The wide workloads' goals and table (Markdown), appended to `s`; nothing without their rows.
pub(crate) fn wide_analysis(s: &mut String, results: &[BenchResult], z: &Sizes) {
    if !results.iter().any(|r| r.workload.starts_with("disk-wide-")) {
        return;
    }
    let _ = writeln!(
        s,
        "\nOn disk, wide ranges (`disk-wide-*`: {} records, O_DIRECT, memory 1/10 of the data; the AB-tree \
         bulk-loaded; {} queries of k = {K} per selectivity; latency per query, p50):\n",
        z.wide, z.wide_queries
    );
    let _ = writeln!(s, "| goal | measured | target | met |");
    let _ = writeln!(s, "|---|---|---|---|");
    for sel in WIDE_SELECTIVITIES {
        let w = wide_workload(sel);
        let (goal, limit) = if sel < 0.005 {
            ("≤ 1×", 1.0)
        } else {
            ("≤ 0.1×", 0.1)
        };
        goal_row(
            s,
            &format!("{w}: sampling latency p50, {DYNAMIZED} / {BTREE}"),
            p50_ratio(results, &w, DYNAMIZED, BTREE),
            goal,
            |r| r <= limit,
        );
    }
    let _ = writeln!(
        s,
        "\n| workload | engine | p50 µs | p99 µs | mean µs | pages read / query | memory |\n\
         |---|---|---:|---:|---:|---:|---:|"
    );
    for sel in WIDE_SELECTIVITIES {
        let w = wide_workload(sel);
        for e in [BTREE, DYNAMIZED, SERIAL] {
            if let Some(r) = find(results, e, &w, "sample", 1) {
                let _ = writeln!(
                    s,
                    "| {w} | {e} | {} | {} | {} | {} | {} |",
                    fmt_us(r.p50_us),
                    fmt_us(r.p99_us),
                    fmt_us(r.mean_us),
                    pages_per_query(r).map_or_else(|| "-".into(), |p| format!("{p:.1}")),
                    fmt_bytes(r.cache_bytes),
                );
            }
        }
    }
    if let Some(r) = find(results, BTREE, "bulk-load", "bulk-load", 1) {
        let _ = writeln!(
            s,
            "\nThe AB-tree's bulk load of {} records took {:.2} s; the dynamized index's protocol load \
             (`{WIDE_LOAD}`) {}.",
            r.records,
            r.secs,
            find(results, DYNAMIZED, WIDE_LOAD, "insert", 1)
                .map_or_else(|| "did not run".into(), |d| format!("took {:.2} s", d.secs)),
        );
    }
}

/// The p50 latency of `a` over `b`'s in `workload`'s sample rows, with its inputs.
fn p50_ratio(results: &[BenchResult], workload: &str, a: &str, b: &str) -> Option<(String, f64)> {
    let (ra, rb) = (
        find(results, a, workload, "sample", 1)?,
        find(results, b, workload, "sample", 1)?,
    );
    let ok = ra.p50_us > 0.0 && rb.p50_us > 0.0;
    ok.then(|| {
        (
            format!(
                "p50 {} / {} µs; mean {} / {} µs",
                fmt_us(ra.p50_us),
                fmt_us(rb.p50_us),
                fmt_us(ra.mean_us),
                fmt_us(rb.mean_us)
            ),
            ra.p50_us / rb.p50_us,
        )
    })
}
