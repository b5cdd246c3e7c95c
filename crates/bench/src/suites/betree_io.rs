//! # The `betree-io` suite
//!
//! The experiment of the Froese report (seed 003), reproduced: page reads and writes of the Bε-tree
//! (`strata-betree`) and the B+-tree (`strata-btree`) for the report's six workloads, over data of 32 KiB to
//! 32 MiB doubling, beside the report's predicted I/Os ([`super::betree_io_model`]).
//!
//! Setting, as in the report: 8-byte pairs (a 4-byte key and a 4-byte value, big-endian `u32`s, stored
//! without lengths in both trees), blocks of B = 4 KiB, a buffer pool of 32 KiB (8 pages), ε = ½ for the
//! Bε-tree (22 children per inner node). Each tree lives in its own page file on the counting in-memory
//! backend: the counts are those of the storage layer (every page read into the pool and every page written
//! out of it), independent of the machine. Each write is its own batch.
//!
//! For each size (N bytes, n = N/8 pairs) and tree:
//! 1. `seq-insert`: keys 0..n in order into a fresh tree, then a checkpoint (every dirty page written);
//! 2. `range-1`: one range query over all the data on that tree; `range-5`: five more (the row's I/Os are
//!    their total; the analysis shows the mean);
//! 3. `random-insert`: the same keys in a seeded random order into another fresh tree, then a checkpoint;
//! 4. `seq-search`: every key looked up in order on that tree; `random-search`: every key in another random
//!    order. Every value read is verified.
//!
//! `records` of a row is n; `--records` sets the largest n (default 4 194 304 pairs = 32 MiB), the sizes
//! running 4096, 8192, … up to it.

use super::SuiteConfig;
use super::betree_io_model::{SeedModel, Tree, Workload};
use crate::driver::Engine;
use crate::driver::IoTotals;
use crate::error::{BenchError, Result};
use crate::measure::{Latency, PhaseLabels, RowParts, row};
use crate::plot::{self, Figure, Lines, Panel, Unit};
use crate::result::BenchResult;
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;
use strata::Direction;
use strata::KeyRange;
use strata::WriteOp;
use strata::lab::index::OrderedIndex;
use strata::lab::index::betree::BeTree;
use strata::lab::index::betree::node::NodeFormat;
use strata::lab::index::btree::BTree;
use strata::lab::storage::IoStats;
use strata::lab::storage::PageFile;
use strata::lab::storage::PageFileOptions;
use strata::vfs::FileKind;
use strata::vfs::MemVfs;
use strata::vfs::Vfs;

pub const NAME: &str = "betree-io";
pub const DESCRIPTION: &str = "the Froese report's experiment: page I/Os of the Bε-tree and the B+-tree (8-byte pairs, 4 KiB blocks, 32 KiB cache, 32 KiB to 32 MiB) for sequential and random inserts and searches and whole-data range queries, beside the report's predictions";
/// Pairs of the largest size: 32 MiB of 8-byte pairs.
pub const DEFAULT_RECORDS: u64 = 4 << 20;
pub const BETREE: &str = "strata-betree";
pub const BTREE: &str = "strata-btree";
/// Bytes of a pair, a block, and the buffer pool (the report's setting).
const PAIR: usize = 8;
const BLOCK: usize = 4096;
const CACHE: usize = 32 << 10;
/// Smallest size: 32 KiB of pairs.
const MIN_PAIRS: u64 = (32 << 10) / PAIR as u64;
/// ε of the Bε-tree.
const EPSILON: f64 = 0.5;

fn model() -> SeedModel {
    SeedModel {
        block_bytes: BLOCK as u64,
        pair_bytes: PAIR as u64,
    }
}

/// The sizes of a run (in pairs): 4096 doubling up to `max`.
pub fn sizes(max: u64) -> Vec<u64> {
    std::iter::successors(Some(MIN_PAIRS), |n| n.checked_mul(2))
        .take_while(|&n| n <= max)
        .collect()
}

fn key(i: u64) -> Vec<u8> {
    (i as u32).to_be_bytes().to_vec()
}

fn value(i: u64) -> Vec<u8> {
    ((i as u32) ^ 0xA5A5_5A5A).to_be_bytes().to_vec()
}

/// A fresh tree of `engine` in its own page file on a counting in-memory backend.
fn fresh_tree(engine: &str) -> Result<(Box<dyn OrderedIndex>, Arc<IoStats>)> {
    let vfs: Arc<dyn Vfs> = Arc::new(MemVfs::new());
    let stats = Arc::new(IoStats::new());
    let opts = PageFileOptions {
        page_size: BLOCK,
        direct: false,
    };
    let file = PageFile::create(&vfs, Path::new("/tree.pages"), opts, stats.clone())?;
    let widths = (Some(4), Some(4));
    let tree: Box<dyn OrderedIndex> = if engine == BETREE {
        let format = NodeFormat {
            key_width: widths.0,
            value_width: widths.1,
        };
        Box::new(BeTree::create(
            file,
            format,
            None,
            EPSILON,
            CACHE,
            stats.clone(),
        )?)
    } else {
        Box::new(BTree::create(
            file,
            widths.0,
            widths.1,
            CACHE,
            stats.clone(),
        )?)
    };
    Ok((tree, stats))
}

/// One measured phase on one tree: its time, latencies and page I/O.
struct Measured<'a> {
    stats: &'a IoStats,
    start: Instant,
    io0: strata::vfs::IoCounts,
    latency: Latency,
}

impl<'a> Measured<'a> {
    fn begin(stats: &'a IoStats) -> Self {
        Measured {
            stats,
            io0: stats.snapshot().kind(FileKind::Pages),
            start: Instant::now(),
            latency: Latency::new(),
        }
    }

    fn op<T>(&mut self, f: impl FnOnce() -> T) -> T {
        let t = Instant::now();
        let r = f();
        self.latency.record(t.elapsed());
        r
    }

    fn finish(
        self,
        engine: &str,
        workload: Workload,
        n: u64,
        tree: &dyn OrderedIndex,
    ) -> BenchResult {
        let secs = self.start.elapsed().as_secs_f64();
        let io = self.stats.snapshot().kind(FileKind::Pages) - self.io0;
        let labels = PhaseLabels {
            suite: NAME.into(),
            engine: engine.into(),
            workload: workload.name().into(),
            records: n,
            threads: 1,
            durability: "none".into(),
            cache_bytes: CACHE as u64,
            page_size: BLOCK,
        };
        let op = match workload {
            Workload::SeqInsert | Workload::RandomInsert => "insert",
            Workload::SeqSearch | Workload::RandomSearch => "get",
            Workload::Range1 | Workload::Range5 => "range",
        };
        let stats = tree.stats();
        let parts = RowParts {
            secs,
            io: Some(IoTotals {
                reads: io.reads,
                writes: io.writes,
                bytes_read: io.bytes_read,
                bytes_written: io.bytes_written,
                syncs: io.syncs,
                page_reads: io.reads,
                page_writes: io.writes,
            }),
            os: None,
            rss: None,
            rss_scope: "none",
            disk_bytes: stats.pages * BLOCK as u64,
            height: Some(stats.height),
        };
        row(&labels, op, &self.latency, &parts)
    }
}

fn verify(ok: bool, what: impl FnOnce() -> String) -> Result<()> {
    super::common::verify(ok, what)
}

/// Runs `workload` over `keys` on `tree`: one write each (then a checkpoint) for inserts, one verified
/// lookup each for searches.
fn each_key(
    tree: &dyn OrderedIndex,
    stats: &IoStats,
    engine: &str,
    workload: Workload,
    keys: &[u64],
) -> Result<BenchResult> {
    let inserts = matches!(workload, Workload::SeqInsert | Workload::RandomInsert);
    let mut m = Measured::begin(stats);
    let mut out = Vec::new();
    for &k in keys {
        if inserts {
            let op = [WriteOp::Put {
                key: key(k),
                value: value(k),
            }];
            m.op(|| tree.apply(&op))?;
            continue;
        }
        let found = m.op(|| tree.get(&key(k), &mut out))?;
        verify(found && out == value(k), || {
            format!(
                "{engine} {}: key {k} read back {found} {out:?}",
                workload.name()
            )
        })?;
    }
    if inserts {
        tree.checkpoint(0)?;
    }
    Ok(m.finish(engine, workload, keys.len() as u64, tree))
}

/// `queries` range queries over all the data, each verified.
fn ranges(
    tree: &dyn OrderedIndex,
    stats: &IoStats,
    engine: &str,
    workload: Workload,
    n: u64,
    queries: usize,
) -> Result<BenchResult> {
    let mut m = Measured::begin(stats);
    for _ in 0..queries {
        let mut next = 0u64;
        let mut wrong = None;
        let seen = m.op(|| {
            tree.scan_visit(
                &KeyRange::all(),
                Direction::Forward,
                usize::MAX,
                &mut |k, v| {
                    if wrong.is_none() && (k != key(next) || v != value(next)) {
                        wrong = Some(next);
                    }
                    next += 1;
                    Ok(true)
                },
            )
        })?;
        verify(wrong.is_none() && seen as u64 == n, || {
            format!(
                "{engine} {}: {seen} records of {n}, first wrong at {wrong:?}",
                workload.name()
            )
        })?;
    }
    Ok(m.finish(engine, workload, n, tree))
}

/// The six workloads at one size on one tree kind.
fn run_size(engine: &str, n: u64, rng: &mut ChaCha8Rng) -> Result<Vec<BenchResult>> {
    let mut out = Vec::new();
    let ordered: Vec<u64> = (0..n).collect();
    let (tree, stats) = fresh_tree(engine)?;
    out.push(each_key(
        tree.as_ref(),
        &stats,
        engine,
        Workload::SeqInsert,
        &ordered,
    )?);
    out.push(ranges(
        tree.as_ref(),
        &stats,
        engine,
        Workload::Range1,
        n,
        1,
    )?);
    out.push(ranges(
        tree.as_ref(),
        &stats,
        engine,
        Workload::Range5,
        n,
        5,
    )?);
    drop(tree);
    let mut shuffled = ordered.clone();
    shuffled.shuffle(rng);
    let (tree, stats) = fresh_tree(engine)?;
    out.push(each_key(
        tree.as_ref(),
        &stats,
        engine,
        Workload::RandomInsert,
        &shuffled,
    )?);
    out.push(each_key(
        tree.as_ref(),
        &stats,
        engine,
        Workload::SeqSearch,
        &ordered,
    )?);
    shuffled.shuffle(rng);
    out.push(each_key(
        tree.as_ref(),
        &stats,
        engine,
        Workload::RandomSearch,
        &shuffled,
    )?);
    Ok(out)
}

/// Runs the suite on `strata-betree` and `strata-btree` (those of `engines`).
pub fn run(cfg: &SuiteConfig, engines: &[Box<dyn Engine>]) -> Result<Vec<BenchResult>> {
    let names: Vec<&str> = [BETREE, BTREE]
        .into_iter()
        .filter(|n| engines.iter().any(|e| e.name() == *n))
        .collect();
    if names.is_empty() {
        return Err(BenchError::Usage(format!(
            "the {NAME} suite measures {BETREE} and {BTREE}; select at least one"
        )));
    }
    if cfg.records < MIN_PAIRS || cfg.records > u64::from(u32::MAX) {
        return Err(BenchError::Usage(format!(
            "the {NAME} suite needs --records from {MIN_PAIRS} (32 KiB of 8-byte pairs) to {}",
            u32::MAX
        )));
    }
    let mut out = Vec::new();
    for n in sizes(cfg.records) {
        for engine in &names {
            // The same key orders for both trees at each size.
            let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed ^ n);
            out.extend(run_size(engine, n, &mut rng)?);
        }
    }
    Ok(out)
}

/// Method notes for the report.
pub fn notes(cfg: &SuiteConfig) -> Vec<String> {
    let m = model();
    vec![
        format!(
            "Setting of the Froese report: 8-byte pairs (u32 key, u32 value), B = {BLOCK} B blocks, a \
             {} KiB buffer pool, sizes {} to {} pairs (32 KiB to {} KiB of data), doubling. Bε-tree with \
             ε = {EPSILON}; the report's model has ⌊√(B/P)⌋ = {} pivots. Page I/Os are the storage layer's \
             counts on an in-memory backend (every page read into or written out of the pool), including \
             each insert phase's closing checkpoint.",
            CACHE >> 10,
            MIN_PAIRS,
            cfg.records,
            (cfg.records * PAIR as u64) >> 10,
            m.fractal_pivots()
        ),
        "Predicted I/Os are the report's formulas (Table 2) as stated: totals over the workload for inserts \
         and searches, per query for ranges; h = ⌈log_{B/P}(N/B)⌉."
            .into(),
    ]
}

fn find<'a>(
    results: &'a [BenchResult],
    engine: &str,
    w: Workload,
    n: u64,
) -> Option<&'a BenchResult> {
    results
        .iter()
        .find(|r| r.engine == engine && r.workload == w.name() && r.records == n)
}

/// A row's page I/Os per query for ranges, in total otherwise (the unit of the report's formulas).
fn measured(r: &BenchResult, w: Workload) -> f64 {
    let total = (r.page_reads.unwrap_or(0) + r.page_writes.unwrap_or(0)) as f64;
    match w {
        Workload::Range1 | Workload::Range5 => total / r.ops.max(1) as f64,
        _ => total,
    }
}

fn tree_of(engine: &str) -> Tree {
    if engine == BETREE {
        Tree::Fractal
    } else {
        Tree::BPlus
    }
}

/// Measured and predicted I/Os per workload and size, and the goal ratios at the largest size.
pub fn analysis(_cfg: &SuiteConfig, results: &[BenchResult]) -> String {
    analysis_of(results)
}

fn analysis_of(results: &[BenchResult]) -> String {
    let m = model();
    let mut sizes: Vec<u64> = results.iter().map(|r| r.records).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let mut s = String::from(
        "Page I/Os (reads + writes): totals for inserts and searches, per query for ranges; predicted = the \
         report's formulas.\n\n",
    );
    for w in Workload::ALL {
        s.push_str(&format!(
            "**{}**\n\n| pairs | data | B+ measured | B+ predicted | Bε measured | Bε predicted | B+ / Bε |\n\
             |---:|---:|---:|---:|---:|---:|---:|\n",
            w.name()
        ));
        for &n in &sizes {
            let bytes = n * PAIR as u64;
            let cell = |engine: &str| find(results, engine, w, n).map(|r| measured(r, w));
            let (bp, be) = (cell(BTREE), cell(BETREE));
            let fmt = |v: Option<f64>| v.map_or_else(|| "-".into(), |v| format!("{v:.1}"));
            let ratio = match (bp, be) {
                (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
                _ => "-".into(),
            };
            s.push_str(&format!(
                "| {n} | {} KiB | {} | {:.1} | {} | {:.1} | {ratio} |\n",
                bytes >> 10,
                fmt(bp),
                m.predicted_ios(tree_of(BTREE), w, bytes),
                fmt(be),
                m.predicted_ios(tree_of(BETREE), w, bytes),
            ));
        }
        s.push('\n');
    }
    if let Some(&n) = sizes.last() {
        let bytes = n * PAIR as u64;
        let get = |e: &str, w: Workload| find(results, e, w, n).map(|r| measured(r, w));
        let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) if b > 0.0 => Some(a / b),
            _ => None,
        };
        let show = |v: Option<f64>| v.map_or_else(|| "-".into(), |v| format!("{v:.2}"));
        let insert = ratio(
            get(BTREE, Workload::RandomInsert),
            get(BETREE, Workload::RandomInsert),
        );
        let search = ratio(
            get(BETREE, Workload::RandomSearch),
            get(BTREE, Workload::RandomSearch),
        );
        let range = get(BETREE, Workload::Range1)
            .map(|v| v / m.predicted_ios(Tree::Fractal, Workload::Range1, bytes));
        let bplus_reads = find(results, BTREE, Workload::RandomInsert, n).map(|r| {
            r.page_reads.unwrap_or(0) as f64
                / m.predicted_ios(Tree::BPlus, Workload::RandomInsert, bytes)
        });
        s.push_str(&format!(
            "Goals at {n} pairs ({} KiB):\n\n\
             - random-insert I/Os, B+-tree / Bε-tree: **{}** (goal ≥ 30);\n\
             - B+-tree random-insert page reads / its predicted (N/P)·h: {} (its own cost model);\n\
             - random-search I/Os, Bε-tree / B+-tree: **{}** (goal ≤ 2);\n\
             - one range query, Bε-tree measured / predicted 2h + N/B: **{}** (goal ≤ 1.2).\n",
            bytes >> 10,
            show(insert),
            show(bplus_reads),
            show(search),
            show(range),
        ));
    }
    s
}

/// A data size as `32K`, `1M`.
fn size_label(bytes: u64) -> String {
    if bytes >= 1 << 20 {
        format!("{}M", bytes >> 20)
    } else {
        format!("{}K", bytes >> 10)
    }
}

/// Log-log figures like the report's: I/Os against data size, one panel per workload, measured and
/// predicted for each tree.
pub fn figures(results: &[BenchResult], dir: &Path) -> Result<Vec<Figure>> {
    let mut sizes: Vec<u64> = results.iter().map(|r| r.records).collect();
    sizes.sort_unstable();
    sizes.dedup();
    if sizes.is_empty() {
        return Ok(Vec::new());
    }
    plot::prepare(dir)?;
    let m = model();
    let series = [
        (BTREE, false, "strata-btree measured"),
        (BTREE, true, "B+-tree predicted"),
        (BETREE, false, "strata-betree measured"),
        (BETREE, true, "Bε-tree predicted"),
    ];
    let panels = Workload::ALL
        .iter()
        .map(|&w| Panel {
            caption: w.name().into(),
            x_desc: "data".into(),
            // Every other size labelled (32K, 128K, …, 32M), so that eleven fit a small panel.
            categories: sizes
                .iter()
                .enumerate()
                .map(|(i, n)| {
                    if i % 2 == 0 {
                        size_label(n * PAIR as u64)
                    } else {
                        String::new()
                    }
                })
                .collect(),
            y_desc: if matches!(w, Workload::Range1 | Workload::Range5) {
                "page I/Os per query".into()
            } else {
                "page I/Os".into()
            },
            unit: Unit::Rate,
            log: true,
            lines: series
                .iter()
                .enumerate()
                .map(|(colour, &(engine, predicted, _))| {
                    let points = sizes
                        .iter()
                        .enumerate()
                        .filter_map(|(i, &n)| {
                            let r = find(results, engine, w, n)?;
                            let v = if predicted {
                                m.predicted_ios(tree_of(engine), w, n * PAIR as u64)
                            } else {
                                measured(r, w)
                            };
                            (v > 0.0).then_some((i, v))
                        })
                        .collect();
                    (colour, points)
                })
                .filter(|(_, p): &(usize, Vec<(usize, f64)>)| !p.is_empty())
                .collect(),
        })
        .collect();
    let lines = Lines {
        title: "Page I/Os against data size (8-byte pairs, 4 KiB blocks, 32 KiB cache), log-log"
            .into(),
        panels,
        legend: series
            .iter()
            .enumerate()
            .map(|(i, s)| (s.2.to_string(), i))
            .collect(),
    };
    Ok(vec![plot::lines_figure(dir, "betree-io", &lines)?])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The experiment at its two smallest sizes: every workload for both trees, values verified, and the
    /// analysis names the goals. (Prints the analysis with `--nocapture`; `STRATA_BETREE_IO_PAIRS` sets the
    /// largest size.)
    #[test]
    fn small_run_has_every_workload_and_the_goals() {
        let max: u64 = std::env::var("STRATA_BETREE_IO_PAIRS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(8192);
        let mut rows = Vec::new();
        for n in sizes(max) {
            for engine in [BETREE, BTREE] {
                let mut rng = ChaCha8Rng::seed_from_u64(n);
                rows.extend(run_size(engine, n, &mut rng).unwrap());
            }
        }
        assert_eq!(rows.len(), sizes(max).len() * 2 * 6);
        for r in &rows {
            assert!(r.page_reads.is_some() && r.page_writes.is_some());
        }
        let text = analysis_of(&rows);
        eprintln!("{text}");
        assert!(text.contains("goal ≥ 30"), "{text}");
        // Queries never write, on either tree.
        for r in rows.iter().filter(|r| r.op != "insert") {
            assert_eq!(r.page_writes, Some(0), "{} {} wrote", r.engine, r.workload);
        }
    }

    #[test]
    fn sizes_double_from_32_kib() {
        assert_eq!(sizes(DEFAULT_RECORDS).len(), 11);
        assert_eq!(sizes(DEFAULT_RECORDS)[0], 4096);
        assert_eq!(sizes(8192), vec![4096, 8192]);
        assert_eq!(sizes(12_000), vec![4096, 8192]);
    }
}
