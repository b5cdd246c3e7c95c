//! # The `betree-wall` suite
//!
//! Wall-clock throughput of the Bε-tree (`strata-betree`) against the B+-tree (`strata-btree`), fjall and
//! RocksDB when the data is much larger than the engine's cache. Engines: those four, whichever are selected
//! and compiled (RocksDB needs the `rocksdb` feature); the others are skipped (the suite compares the
//! write-optimized tree with the update-in-place tree and the two LSM peers, nothing else). `u64` keys and the
//! run's checkable values (8 bytes by default), N = `--records` (default 5 000 000), one thread.
//!
//! For each engine, into a fresh database whose cache (buffer pool, block cache) is 10% of the data (data 10× the cache) — the
//! data being N × (8 + value size) bytes, at least 8 pages — and on one handle:
//! 1. `random-insert`: keys 0..N in a seeded random order (the same for every engine), one write per record
//!    with the run's durability, then a checkpoint (a flush of memory tables for the LSMs), part of the phase;
//! 2. `random-read`: M = N/10 gets of uniformly random keys (the same keys for every engine), each checked;
//! 3. `scan-100`: M/10 ascending scans of 100 records from uniformly random start keys (fewer at the end of
//!    the key space), every record checked (op `scan`, one op per scan).
//!
//! The analysis gives ops/s per engine and workload, each Strata engine's throughput over RocksDB's and
//! fjall's in the same run, and the data size over the cache. The 50M-record version of the measurement:
//!
//! ```sh
//! cargo run --release --features rocksdb -- bench --suite betree-wall --records 50000000
//! ```
//!
//! (800 MB of data, an 80 MB cache; the key order alone takes 400 MB of memory.)

use super::SuiteConfig;
use super::common::{Ctx, remove_dir};
use super::dbbench::seek_random;
use crate::driver::Engine;
use crate::error::{BenchError, Result};
use crate::plot::{self, Bars, Figure, Series, Unit};
use crate::report::fmt_bytes;
use crate::result::BenchResult;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::Path;

pub const NAME: &str = "betree-wall";
pub const DESCRIPTION: &str = "Bε-tree vs B+-tree, fjall and RocksDB in wall-clock time with a cache of 10% of the data: random inserts, random gets, 100-record scans";
pub const DEFAULT_RECORDS: u64 = 5_000_000;
/// The engines the suite measures, in the order of its rows.
pub const ENGINES: [&str; 4] = ["strata-betree", "strata-btree", "fjall", "rocksdb"];
/// The Strata engines, whose throughput the analysis divides by the peers'.
const STRATA: [&str; 2] = ["strata-betree", "strata-btree"];
/// The peers the Strata engines are compared with.
const PEERS: [&str; 2] = ["rocksdb", "fjall"];
/// The workloads, with the op of their rows.
pub const WORKLOADS: [(&str, &str); 3] = [
    ("random-insert", "insert"),
    ("random-read", "read"),
    ("scan-100", "scan"),
];
/// The cache is this share of the data, in percent.
const CACHE_PERCENT: u64 = 10;
/// Smallest cache, in pages (the buffer pool's minimum).
const MIN_CACHE_PAGES: u64 = 8;
/// Records per scan.
const SCAN_LEN: u64 = 100;
/// Mixed into the seed for the keys of `random-read`.
const READ_SEED: u64 = 0x7265_6164;

/// Bytes of data: N records of an 8-byte key and a value of the run's size.
pub fn data_bytes(cfg: &SuiteConfig) -> u64 {
    cfg.records * (8 + cfg.codec.size() as u64)
}

/// Every engine's cache in this suite: 10% of the data, at least 8 pages.
pub fn cache_bytes(cfg: &SuiteConfig) -> usize {
    (data_bytes(cfg) * CACHE_PERCENT / 100).max(MIN_CACHE_PAGES * cfg.page_size as u64) as usize
}

/// Gets of `random-read` and scans of `scan-100`.
fn op_counts(records: u64) -> (u64, u64) {
    let gets = (records / 10).max(1);
    (gets, (gets / 10).max(1))
}

/// Method notes for the report.
pub fn notes(cfg: &SuiteConfig) -> Vec<String> {
    let (gets, scans) = op_counts(cfg.records);
    vec![
        format!(
            "Engines {} (whichever are selected and compiled; RocksDB needs `--features rocksdb`); the others \
             are skipped: the suite compares the Bε-tree with the B+-tree and the LSM peers. One thread; each \
             engine gets a fresh database.",
            ENGINES.map(|e| format!("`{e}`")).join(", ")
        ),
        format!(
            "Cache of every engine: {} = {CACHE_PERCENT}% of the data, N × (8 + {}) bytes = {} (at least \
             {MIN_CACHE_PAGES} pages); the run's `--cache` is not used. The LSMs' memory tables (64 MiB, up to \
             two) are outside their cache budget, and every engine reads through the OS page cache, so the \
             data is larger than each engine's cache, not than the machine's memory.",
            fmt_bytes(cache_bytes(cfg) as u64),
            cfg.codec.size(),
            fmt_bytes(data_bytes(cfg)),
        ),
        format!(
            "`random-insert`: the {} keys in a seeded random order, one write per record with durability `{}`, \
             then a checkpoint (RocksDB and fjall: WAL/journal persisted and memory tables flushed), included \
             in `secs` and `ops/s`; background compactions still running afterwards are not waited for. \
             `random-read`: {gets} gets of uniformly random keys; `scan-100`: {scans} ascending scans of \
             {SCAN_LEN} records from random start keys, one op per scan. Both run on the same handle right \
             after the inserts; every value read is checked.",
            cfg.records,
            cfg.durability.name(),
        ),
        "RocksDB and fjall keep their index and filter blocks in the block cache (see their settings; \
         RocksDB's are partitioned into 4 KiB blocks): when those blocks do not fit the cache, gets and scans \
         read them again from their files; the analysis's bytes per op show it."
            .into(),
        "The 50M-record measurement: `cargo run --release --features rocksdb -- bench --suite betree-wall \
         --records 50000000` (800 MB of data, an 80 MB cache)."
            .into(),
    ]
}

/// The row of `engine`'s `workload` (with its op), if it ran.
fn find<'a>(results: &'a [BenchResult], engine: &str, workload: &str) -> Option<&'a BenchResult> {
    let op = WORKLOADS.iter().find(|w| w.0 == workload)?.1;
    results
        .iter()
        .find(|r| r.suite == NAME && r.engine == engine && r.workload == workload && r.op == op)
}

/// The engines of the suite that have rows, in row order.
fn ran(results: &[BenchResult]) -> Vec<&'static str> {
    ENGINES
        .into_iter()
        .filter(|e| results.iter().any(|r| r.engine == *e))
        .collect()
}

/// A Markdown table with a row per `rows` entry (its label, then a cell per workload), headed `first` and
/// `head(workload)`.
fn table(first: &str, head: fn(&str) -> String, rows: &[(String, [String; 3])]) -> String {
    let mut t = format!(
        "| {first} | {} |\n|---|{}\n",
        WORKLOADS.map(|w| head(w.0)).join(" | "),
        "---:|".repeat(WORKLOADS.len())
    );
    for (label, cells) in rows {
        t.push_str(&format!("| {label} | {} |\n", cells.join(" | ")));
    }
    t
}

/// ops/s per engine and workload, Strata's throughput over the peers', the data over the cache, and the bytes
/// each op moved through system calls (Markdown).
pub fn analysis(cfg: &SuiteConfig, results: &[BenchResult]) -> String {
    let engines = ran(results);
    let (data, cache) = (data_bytes(cfg), cache_bytes(cfg));
    let rate = |e: &str, w: &str| find(results, e, w).map(|r| r.ops_per_sec);
    let rates: Vec<(String, [String; 3])> = engines
        .iter()
        .map(|e| {
            let cells =
                WORKLOADS.map(|(w, _)| rate(e, w).map_or("-".into(), |v| format!("{v:.0}")));
            (e.to_string(), cells)
        })
        .collect();
    let mut text = format!(
        "Data {} (N = {} × {} bytes), cache {} per engine: data / cache = {:.1}.\n\n{}",
        fmt_bytes(data),
        cfg.records,
        8 + cfg.codec.size(),
        fmt_bytes(cache as u64),
        data as f64 / cache as f64,
        table("engine", |w| format!("{w} ops/s"), &rates),
    );
    let mut ratios = Vec::new();
    for s in STRATA.iter().filter(|s| engines.contains(s)) {
        for p in PEERS.iter().filter(|p| engines.contains(p)) {
            let cells = WORKLOADS.map(|(w, _)| match (rate(s, w), rate(p, w)) {
                (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
                _ => "-".into(),
            });
            ratios.push((format!("{s} / {p}"), cells));
        }
    }
    if !ratios.is_empty() {
        text.push_str(&format!(
            "\nThroughput of each Strata engine over each peer's in this run (above 1: Strata is faster):\n\n{}",
            table("ratio", str::to_string, &ratios)
        ));
    }
    // Where an engine's time goes when its data does not fit its cache.
    let per_op = |r: &BenchResult, v: Option<u64>| v.map(|v| v as f64 / r.ops.max(1) as f64);
    let io: Vec<(String, [String; 3])> = engines
        .iter()
        .map(|e| {
            let cells = WORKLOADS.map(|(w, _)| {
                find(results, e, w)
                    .and_then(|r| Some((per_op(r, r.os_wchar)?, per_op(r, r.os_rchar)?)))
                    .map_or("-".into(), |(wr, rd)| format!("{wr:.0} / {rd:.0}"))
            });
            (e.to_string(), cells)
        })
        .collect();
    text.push_str(&format!(
        "\nBytes written / read through system calls per op (`wchar` / `rchar` of `/proc/self/io`: the whole \
         process, background threads included, page-cache hits counted):\n\n{}",
        table("engine", str::to_string, &io)
    ));
    text
}

/// Bars of `f(row)` per workload, one series per engine (fixed colours in [`ENGINES`] order).
fn series(results: &[BenchResult], f: impl Fn(&BenchResult) -> f64) -> Vec<Series> {
    ENGINES
        .iter()
        .enumerate()
        .filter_map(|(colour, e)| {
            let values: Vec<Option<f64>> = WORKLOADS
                .iter()
                .map(|(w, _)| find(results, e, w).map(&f))
                .collect();
            values.iter().any(Option::is_some).then(|| Series {
                name: e.to_string(),
                colour,
                values,
            })
        })
        .collect()
}

/// The figures of the suite: throughput per workload and engine, and p50 / p99 latency per workload.
pub fn figures(results: &[BenchResult], dir: &Path) -> Result<Vec<Figure>> {
    let throughput = series(results, |r| r.ops_per_sec);
    if throughput.is_empty() {
        return Ok(Vec::new());
    }
    plot::prepare(dir)?;
    let groups: Vec<String> = WORKLOADS.iter().map(|w| w.0.to_string()).collect();
    let log = plot::spans_decades(
        throughput
            .iter()
            .flat_map(|s| s.values.iter().flatten().copied()),
    );
    let mut figs = vec![plot::bars_figure(
        dir,
        "betree-wall-throughput",
        &Bars {
            title: format!("Throughput with a cache of {CACHE_PERCENT}% of the data"),
            y_desc: format!(
                "operations per second{}",
                if log { " (log scale)" } else { "" }
            ),
            log,
            unit: Unit::Rate,
            groups: groups.clone(),
            clusters: Vec::new(),
            series: throughput,
        },
    )?];
    for (stat, f) in [
        ("p50", (|r| r.p50_us) as fn(&BenchResult) -> f64),
        ("p99", |r| r.p99_us),
    ] {
        figs.push(plot::bars_figure(
            dir,
            &format!("betree-wall-{stat}"),
            &Bars {
                title: format!(
                    "{stat} latency per operation, cache of {CACHE_PERCENT}% of the data"
                ),
                y_desc: format!("{stat} latency (log scale)"),
                log: true,
                unit: Unit::Latency,
                groups: groups.clone(),
                clusters: Vec::new(),
                series: series(results, f),
            },
        )?);
    }
    Ok(figs)
}

/// Runs the suite on the engines of [`ENGINES`] among `engines` (see the module doc).
pub fn run(cfg: &SuiteConfig, engines: &[Box<dyn Engine>]) -> Result<Vec<BenchResult>> {
    let chosen: Vec<&dyn Engine> = ENGINES
        .iter()
        .filter_map(|name| engines.iter().find(|e| e.name() == *name))
        .map(|e| e.as_ref())
        .collect();
    if chosen.is_empty() {
        return Err(BenchError::Usage(format!(
            "the {NAME} suite needs one of {} among the engines",
            ENGINES.join(", ")
        )));
    }
    let n = cfg.records;
    let (gets, scans) = op_counts(n);
    // The scans are seeks followed by 99 nexts, unpaced.
    let scan_cfg = SuiteConfig {
        nexts: SCAN_LEN - 1,
        target_rate: None,
        ..cfg.clone()
    };
    let mut out = Vec::new();
    let mut order = None;
    for engine in chosen {
        let mut ctx = Ctx::new(NAME, cfg, engine);
        ctx.opts.cache_bytes = cache_bytes(cfg);
        let order = order.get_or_insert_with(|| ctx.random_order());
        let dir = cfg.data_dir.join(engine.name());
        let db = ctx.create(&dir)?;
        out.extend(ctx.insert_phase(db.as_ref(), &dir, "random-insert", order)?);
        let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed ^ READ_SEED);
        out.extend(
            ctx.read_phase(db.as_ref(), &dir, "random-read", gets, &mut rng, |r| {
                r.random_range(0..n)
            })?,
        );
        let mut scan_ctx = Ctx::new(NAME, &scan_cfg, engine);
        scan_ctx.opts = ctx.opts.clone();
        out.extend(seek_random(
            &scan_ctx,
            db.as_ref(),
            &dir,
            "scan-100",
            n,
            1,
            scans,
        )?);
        db.close()?;
        remove_dir(&dir)?;
    }
    Ok(out)
}
