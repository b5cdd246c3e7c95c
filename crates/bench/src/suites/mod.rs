//! # Suites
//!
//! A suite is a named, fixed sequence of workloads run on every engine that supports them. [`run_suite`]
//! runs one into a data directory and returns its rows; [`run`] is what `strata bench` does: it picks the
//! output directory (default `bench-results/<UTC timestamp>/`), runs the suite with databases in a temporary
//! directory inside it, and writes `results.jsonl` (one [`BenchResult`] per line), an optional extra JSON-lines
//! file and `report.md`.
//!
//! Suites today: [`default_suite`], [`ycsb`] and [`dbbench`] (key-value workloads on every engine), [`smoke`]
//! (a quick pass over every index family and operation), [`btree_cost`] (the B+-tree at scale against its
//! I/O cost model), and the sampling suites [`irs`] (independent range sampling: the dynamized index against
//! the AB-tree and a static ISAM) and [`wss`] (weighted set and weighted range sampling), and [`hash`] (the
//! persistent hash indexes, ElimDA-style against Dash-EH-style, with modelled PM traffic).
//!
//! Engines that store `u64` values only (`strata-dynamized`) are left out of runs with byte-string values
//! when the engine list is the default one, and refused when named.

pub mod betree_io;
pub mod betree_io_model;
pub mod betree_wall;
pub mod btree_cost;
mod common;
pub mod dbbench;
pub mod default_suite;
pub mod hash;
pub mod irs;
pub mod learned;
mod runner;
mod sampling;
pub mod server;
pub mod smoke;
pub mod wss;
pub mod ycsb;

use crate::driver::{self, Engine, EngineOptions};
use crate::error::{BenchError, Result};
use crate::report::{EngineInfo, Report, fmt_bytes};
use crate::result::BenchResult;
use crate::sysinfo::{Machine, UtcTime};
use crate::values::ValueCodec;
use std::io::Write;
use std::path::{Path, PathBuf};
use strata::Durability;

/// A suite's name and what it does.
#[derive(Debug, Clone, Copy)]
pub struct SuiteInfo {
    pub name: &'static str,
    pub description: &'static str,
    /// Records when `--records` is not given.
    pub default_records: u64,
    /// Value size when `--value-size` is not given (8 = `u64` values).
    pub default_value_size: usize,
    /// Runs the suite on the engines.
    pub run: SuiteRunner,
    /// Method notes for the report.
    pub notes: fn(&SuiteConfig) -> Vec<String>,
    /// Suite-specific findings for the report (Markdown), if the suite has any.
    pub analysis: Option<fn(&SuiteConfig, &[BenchResult]) -> String>,
    /// The suite's own figures (written into the given directory), drawn instead of the generic ones of
    /// [`crate::plot::write_figures`].
    pub figures: Option<FigureWriter>,
}

/// What draws a suite's figures: its rows in, the figures written into the directory out.
pub type FigureWriter = fn(&[BenchResult], &Path) -> Result<Vec<crate::plot::Figure>>;

/// What runs a suite: its configuration and the engines in, its rows out.
pub type SuiteRunner = fn(&SuiteConfig, &[Box<dyn Engine>]) -> Result<Vec<BenchResult>>;

/// Every suite, in the order `--list` prints them.
pub fn suites() -> &'static [SuiteInfo] {
    &[
        SuiteInfo {
            name: default_suite::NAME,
            description: default_suite::DESCRIPTION,
            default_records: default_suite::DEFAULT_RECORDS,
            default_value_size: 100,
            run: default_suite::run,
            notes: default_suite::notes,
            analysis: None,
            figures: None,
        },
        SuiteInfo {
            name: ycsb::NAME,
            description: ycsb::DESCRIPTION,
            default_records: ycsb::DEFAULT_RECORDS,
            default_value_size: 100,
            run: ycsb::run,
            notes: ycsb::suite_notes,
            analysis: None,
            figures: None,
        },
        SuiteInfo {
            name: dbbench::NAME,
            description: dbbench::DESCRIPTION,
            default_records: dbbench::DEFAULT_RECORDS,
            default_value_size: 100,
            run: dbbench::run,
            notes: dbbench::notes,
            analysis: None,
            figures: None,
        },
        SuiteInfo {
            name: smoke::NAME,
            description: smoke::DESCRIPTION,
            default_records: smoke::DEFAULT_RECORDS,
            default_value_size: 8,
            run: smoke::run,
            notes: smoke::notes,
            analysis: None,
            figures: None,
        },
        SuiteInfo {
            name: btree_cost::NAME,
            description: btree_cost::DESCRIPTION,
            default_records: btree_cost::DEFAULT_RECORDS,
            default_value_size: 8,
            run: btree_cost::run,
            notes: btree_cost::notes,
            analysis: Some(btree_cost::analysis),
            figures: None,
        },
        SuiteInfo {
            name: irs::NAME,
            description: irs::DESCRIPTION,
            default_records: irs::DEFAULT_RECORDS,
            default_value_size: 8,
            run: irs::run,
            notes: irs::notes,
            analysis: Some(irs::analysis),
            figures: Some(irs::figures),
        },
        SuiteInfo {
            name: wss::NAME,
            description: wss::DESCRIPTION,
            default_records: wss::DEFAULT_RECORDS,
            default_value_size: 8,
            run: wss::run,
            notes: wss::notes,
            analysis: Some(wss::analysis),
            figures: Some(wss::figures),
        },
        SuiteInfo {
            name: server::NAME,
            description: server::DESCRIPTION,
            default_records: server::DEFAULT_RECORDS,
            default_value_size: 100,
            run: server::run,
            notes: server::notes,
            analysis: Some(server::analysis),
            figures: None,
        },
        SuiteInfo {
            name: betree_io::NAME,
            description: betree_io::DESCRIPTION,
            default_records: betree_io::DEFAULT_RECORDS,
            default_value_size: 8,
            run: betree_io::run,
            notes: betree_io::notes,
            analysis: Some(betree_io::analysis),
            figures: Some(betree_io::figures),
        },
        SuiteInfo {
            name: betree_wall::NAME,
            description: betree_wall::DESCRIPTION,
            default_records: betree_wall::DEFAULT_RECORDS,
            default_value_size: 8,
            run: betree_wall::run,
            notes: betree_wall::notes,
            analysis: Some(betree_wall::analysis),
            figures: Some(betree_wall::figures),
        },
        SuiteInfo {
            name: hash::NAME,
            description: hash::DESCRIPTION,
            default_records: hash::DEFAULT_RECORDS,
            default_value_size: 8,
            run: hash::run,
            notes: hash::notes,
            analysis: Some(hash::analysis),
            figures: None,
        },
        SuiteInfo {
            name: learned::NAME,
            description: learned::DESCRIPTION,
            default_records: learned::DEFAULT_RECORDS,
            default_value_size: 8,
            run: learned::run,
            notes: learned::notes,
            analysis: Some(learned::analysis),
            figures: None,
        },
    ]
}

/// The suite `strata bench` runs when none is named.
pub const DEFAULT_SUITE: &str = default_suite::NAME;

fn find(name: &str) -> Result<&'static SuiteInfo> {
    suites().iter().find(|s| s.name == name).ok_or_else(|| {
        let names: Vec<&str> = suites().iter().map(|s| s.name).collect();
        BenchError::Usage(format!(
            "unknown suite {name:?} (available: {})",
            names.join(", ")
        ))
    })
}

/// Parameters of one suite run.
#[derive(Debug, Clone)]
pub struct SuiteConfig {
    /// Records loaded (the size parameter of every workload).
    pub records: u64,
    /// Operations per measured workload, when the suite lets the user choose (`--ops`).
    pub ops: Option<u64>,
    /// Thread counts to sweep (`--threads 1,2,4`); suites that are single-threaded by nature ignore it.
    pub threads: Vec<u32>,
    /// Total operations per second to schedule (`--target-rate`), latency measured from each operation's
    /// scheduled start; `None` runs flat out.
    pub target_rate: Option<f64>,
    /// Value format and size of every record.
    pub codec: ValueCodec,
    /// Nexts after each seek of `seekrandom`.
    pub nexts: u64,
    /// Cache budget of every engine, in bytes.
    pub cache_bytes: usize,
    /// Durability of every write of the run, for every engine.
    pub durability: Durability,
    /// Page size of page-based engines.
    pub page_size: usize,
    /// Seed of every random choice (key order, lookups, ranges, samples).
    pub seed: u64,
    /// Directory in which each database gets its own subdirectory.
    pub data_dir: PathBuf,
    /// Show progress bars (they appear only when stderr is a terminal).
    pub progress: bool,
}

impl SuiteConfig {
    /// The options every engine of the run gets.
    pub fn engine_options(&self) -> EngineOptions {
        EngineOptions {
            cache_bytes: self.cache_bytes,
            durability: self.durability,
            page_size: self.page_size,
            values: self.codec.format(),
            direct_io: false,
        }
    }
}

/// Runs suite `name` on `engines` and returns its rows.
pub fn run_suite(
    name: &str,
    cfg: &SuiteConfig,
    engines: &[Box<dyn Engine>],
) -> Result<Vec<BenchResult>> {
    (find(name)?.run)(cfg, engines)
}

/// What `strata bench` asks for.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub suite: String,
    /// Overrides the suite's default size.
    pub records: Option<u64>,
    /// Operations per measured workload (suites that have a default use it when `None`).
    pub ops: Option<u64>,
    /// Thread counts to sweep.
    pub threads: Vec<u32>,
    /// Value size in bytes (8 = `u64` values); `None` takes the suite's default.
    pub value_size: Option<usize>,
    /// Comma-separated engine names; `None` = every engine this build has.
    pub engines: Option<String>,
    /// Engine the report's ratios are taken against; default: the first engine run.
    pub baseline: Option<String>,
    /// Scheduled operations per second, all threads together.
    pub target_rate: Option<f64>,
    /// Nexts after each seek of `seekrandom`.
    pub nexts: u64,
    pub cache_bytes: usize,
    pub durability: Durability,
    pub page_size: usize,
    pub seed: u64,
    /// Output directory; default `bench-results/<UTC timestamp>/` under the current directory.
    pub out_dir: Option<PathBuf>,
    /// An extra copy of the results as JSON lines.
    pub json: Option<PathBuf>,
    pub progress: bool,
}

impl RunOptions {
    /// The defaults of `strata bench --suite <suite>`.
    pub fn new(suite: &str) -> Self {
        RunOptions {
            suite: suite.to_string(),
            records: None,
            ops: None,
            threads: vec![1],
            value_size: None,
            engines: None,
            baseline: None,
            target_rate: None,
            nexts: dbbench::DEFAULT_NEXTS,
            cache_bytes: 64 << 20,
            durability: Durability::None,
            page_size: 4096,
            seed: 42,
            out_dir: None,
            json: None,
            progress: true,
        }
    }
}

/// What a run produced.
#[derive(Debug, Clone)]
pub struct RunOutput {
    pub results: Vec<BenchResult>,
    /// Suite-specific findings in Markdown (empty when the suite has none), as in the report.
    pub analysis: String,
    pub out_dir: PathBuf,
    pub results_path: PathBuf,
    pub report_path: PathBuf,
    pub json_path: Option<PathBuf>,
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = std::fs::File::create(path).map_err(|e| BenchError::io(path, e))?;
    f.write_all(bytes).map_err(|e| BenchError::io(path, e))?;
    f.sync_all().map_err(|e| BenchError::io(path, e))
}

fn json_lines(results: &[BenchResult]) -> String {
    results.iter().map(|r| r.to_json_line() + "\n").collect()
}

/// Runs a suite into its output directory (see the module doc).
pub fn run(opts: &RunOptions) -> Result<RunOutput> {
    let info = find(&opts.suite)?;
    let records = opts.records.unwrap_or(info.default_records);
    if records == 0 {
        return Err(BenchError::Usage("--records must be at least 1".into()));
    }
    if opts.threads.is_empty() || opts.threads.contains(&0) {
        return Err(BenchError::Usage(
            "--threads needs one or more counts of at least 1".into(),
        ));
    }
    if let Some(r) = opts.target_rate
        && !(r.is_finite() && r > 0.0)
    {
        return Err(BenchError::Usage(format!(
            "--target-rate {r} must be a positive number of operations per second"
        )));
    }
    if opts.ops == Some(0) {
        return Err(BenchError::Usage("--ops must be at least 1".into()));
    }
    let value_size = opts.value_size.unwrap_or(info.default_value_size);
    let codec = if value_size == 8 {
        ValueCodec::u64()
    } else {
        ValueCodec::bytes(value_size)?
    };
    if records >= crate::values::KEY_LIMIT / 2 {
        return Err(BenchError::Usage(format!(
            "--records {records} is too large (keys must stay below 2^39)"
        )));
    }
    let mut engines = driver::select(opts.engines.as_deref())?;
    if let Some(e) = engines.iter().find(|e| !e.ordered())
        && !driver::run_unordered(info.name)
    {
        return Err(BenchError::Usage(format!(
            "{} keeps no key order and suite {} scans ranges; it runs in suite dbbench (and has suite hash of \
             its own)",
            e.name(),
            info.name
        )));
    }
    if codec.format() == driver::ValueFormat::Bytes {
        if let Some(e) = engines.iter().find(|e| !e.capabilities().byte_values)
            && opts.engines.is_some()
        {
            return Err(BenchError::Usage(format!(
                "{} stores u64 values only; run it with --value-size 8",
                e.name()
            )));
        }
        engines.retain(|e| e.capabilities().byte_values);
    }
    if let Some(b) = &opts.baseline
        && !engines.iter().any(|e| e.name() == b)
    {
        return Err(BenchError::Usage(format!(
            "--baseline {b} is not among the engines of this run"
        )));
    }
    let started = UtcTime::now();
    let out_dir = opts
        .out_dir
        .clone()
        .unwrap_or_else(|| Path::new("bench-results").join(started.file_name()));
    std::fs::create_dir_all(&out_dir).map_err(|e| BenchError::io(&out_dir, e))?;
    let data = tempfile::Builder::new()
        .prefix("data-")
        .tempdir_in(&out_dir)
        .map_err(|e| BenchError::io(&out_dir, e))?;
    let cfg = SuiteConfig {
        records,
        ops: opts.ops,
        threads: opts.threads.clone(),
        target_rate: opts.target_rate,
        codec,
        nexts: opts.nexts,
        cache_bytes: opts.cache_bytes,
        durability: opts.durability,
        page_size: opts.page_size,
        seed: opts.seed,
        data_dir: data.path().to_path_buf(),
        progress: opts.progress,
    };
    let results = run_suite(info.name, &cfg, &engines)?;
    data.close().map_err(|e| BenchError::io(&out_dir, e))?;

    let lines = json_lines(&results);
    let results_path = out_dir.join("results.jsonl");
    write_file(&results_path, lines.as_bytes())?;
    if let Some(json) = &opts.json {
        if let Some(parent) = json.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|e| BenchError::io(parent, e))?;
        }
        write_file(json, lines.as_bytes())?;
    }
    let analysis = info
        .analysis
        .map_or_else(String::new, |f| f(&cfg, &results));
    let mut machine = Machine::detect();
    machine.filesystem = crate::sysinfo::filesystem_of(&out_dir);
    let engine_names: Vec<&str> = engines.iter().map(|e| e.name()).collect();
    let engine_opts = cfg.engine_options();
    // Engines that ran (a suite skips the engines it cannot measure).
    let ran = |name: &str| results.iter().any(|r| r.engine == name);
    let engine_infos = engines
        .iter()
        .filter(|e| ran(e.name()))
        .map(|e| EngineInfo {
            name: e.name().to_string(),
            version: e.version(),
            settings: e.settings(&engine_opts),
        })
        .collect();
    let baseline = opts.baseline.clone().or_else(|| {
        engine_names
            .iter()
            .find(|e| ran(e))
            .or(engine_names.first())
            .map(|s| s.to_string())
    });
    let values = match cfg.codec.format() {
        crate::driver::ValueFormat::U64 => "8-byte u64 values".to_string(),
        crate::driver::ValueFormat::Bytes => format!("{}-byte values", cfg.codec.size()),
    };
    let threads: Vec<String> = cfg.threads.iter().map(|t| t.to_string()).collect();
    let report = Report {
        suite: info.name,
        started,
        machine: &machine,
        params: vec![
            ("records".into(), format!("{records} (u64 keys, {values})")),
            (
                "operations per workload".into(),
                cfg.ops
                    .map_or_else(|| "the suite's default".into(), |o| o.to_string()),
            ),
            ("engines".into(), engine_names.join(", ")),
            ("threads".into(), threads.join(", ")),
            (
                "cache budget per engine".into(),
                fmt_bytes(opts.cache_bytes as u64),
            ),
            ("page size".into(), format!("{} bytes", opts.page_size)),
            (
                "durability of writes".into(),
                format!("`{}`", opts.durability.name()),
            ),
            (
                "target rate".into(),
                cfg.target_rate
                    .map_or_else(|| "none (flat out)".into(), |r| format!("{r} ops/s")),
            ),
            ("seed".into(), opts.seed.to_string()),
            (
                "data directory".into(),
                format!(
                    "a temporary directory in `{}`, removed after the run",
                    out_dir.display()
                ),
            ),
        ],
        analysis: analysis.clone(),
        notes: (info.notes)(&cfg),
        results: &results,
        engines: engine_infos,
        baseline,
        figures: Vec::new(),
    };
    let draw = info.figures.unwrap_or(crate::plot::write_figures);
    let figures = draw(&results, &out_dir.join("figures"))?
        .into_iter()
        .map(|f| {
            let rel = |p: &Path| {
                p.strip_prefix(&out_dir)
                    .unwrap_or(p)
                    .to_string_lossy()
                    .into_owned()
            };
            (f.title, rel(&f.svg), rel(&f.png))
        })
        .collect();
    let report = Report { figures, ..report };
    let report_path = out_dir.join("report.md");
    write_file(&report_path, report.markdown().as_bytes())?;
    Ok(RunOutput {
        results,
        analysis,
        out_dir,
        results_path,
        report_path,
        json_path: opts.json.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smoke_runs_into_its_output_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let mut opts = RunOptions::new("smoke");
        opts.records = Some(500);
        opts.out_dir = Some(tmp.path().join("out"));
        opts.progress = false;
        opts.engines = Some("strata-btree".into());
        let out = run(&opts).unwrap();
        let ops: Vec<(&str, &str)> = out
            .results
            .iter()
            .map(|r| (r.workload.as_str(), r.op.as_str()))
            .collect();
        assert_eq!(
            ops,
            [
                ("fillseq", "insert"),
                ("fillrandom", "insert"),
                ("readrandom", "read"),
                ("scan", "scan"),
                ("range-count", "count"),
                ("range-sample", "sample"),
            ]
        );
        for r in &out.results {
            assert_eq!(r.records, 500);
            assert!(r.ops > 0 && r.secs > 0.0 && r.disk_bytes > 0);
            assert!(r.io_reads.is_some());
        }
        let text = std::fs::read_to_string(&out.results_path).unwrap();
        let back: Vec<BenchResult> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(back.len(), out.results.len());
        for (a, b) in back.iter().zip(&out.results) {
            assert_eq!(
                (&a.workload, &a.op, a.ops, a.disk_bytes),
                (&b.workload, &b.op, b.ops, b.disk_bytes)
            );
            assert!((a.mean_us - b.mean_us).abs() <= 1e-9 * b.mean_us.abs());
        }
        assert!(
            std::fs::read_to_string(&out.report_path)
                .unwrap()
                .contains("| strata-btree | scan | scan |")
        );
    }

    #[test]
    fn btree_cost_measures_page_ios_with_a_small_pool() {
        let tmp = tempfile::tempdir().unwrap();
        let mut opts = RunOptions::new("btree-cost");
        // 60 000 records: 1% of the data is 9600 bytes, below the 8-page minimum pool, so the tree (a random
        // load leaves about 340 leaves, under two inner nodes and a root) cannot stay cached.
        opts.records = Some(60_000);
        opts.out_dir = Some(tmp.path().join("out"));
        opts.progress = false;
        let out = run(&opts).unwrap();
        let rows: Vec<(&str, &str, u64)> = out
            .results
            .iter()
            .map(|r| (r.workload.as_str(), r.op.as_str(), r.ops))
            .collect();
        assert_eq!(
            rows,
            [
                ("fillseq", "insert", 60_000),
                ("fillrandom", "insert", 60_000),
                ("readrandom", "read", 60_000),
                ("load-1pct", "insert", 60_000),
                ("insert-1pct", "insert", 6_000),
                ("get-1pct", "read", 6_000),
            ]
        );
        let get = &out.results[5];
        assert_eq!(get.cache_bytes, 8 * 4096);
        assert_eq!(get.page_writes, Some(0), "lookups never write pages");
        assert_eq!(get.height, Some(3));
        // The three inner nodes stay cached under CLOCK: about one leaf read per lookup.
        let reads = get.page_reads.unwrap() as f64 / get.ops as f64;
        assert!((0.5..=2.0).contains(&reads), "{reads} page reads per get");
        let insert = &out.results[4];
        assert!(insert.page_writes.unwrap() > 0 && insert.page_reads.unwrap() > 0);
        assert!(
            out.analysis.contains("| get-1pct | 6000 |"),
            "{}",
            out.analysis
        );
        assert!(
            out.analysis.contains("⌈log_254(236)⌉ = 1"),
            "{}",
            out.analysis
        );
        let report = std::fs::read_to_string(&out.report_path).unwrap();
        assert!(report.contains("## Analysis") && report.contains("| insert-1pct | 6000 |"));
    }

    #[test]
    fn unknown_suites_and_zero_records_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let mut opts = RunOptions::new("nope");
        opts.out_dir = Some(tmp.path().join("out"));
        assert!(matches!(run(&opts), Err(BenchError::Usage(_))));
        let mut opts = RunOptions::new("smoke");
        opts.out_dir = Some(tmp.path().join("out"));
        opts.records = Some(0);
        assert!(matches!(run(&opts), Err(BenchError::Usage(_))));
        assert!(!tmp.path().join("out").exists());
    }

    #[test]
    fn betree_wall_runs_the_trees_and_the_peers_it_has() {
        let tmp = tempfile::tempdir().unwrap();
        let mut opts = RunOptions::new(betree_wall::NAME);
        opts.records = Some(20_000);
        opts.out_dir = Some(tmp.path().join("out"));
        opts.progress = false;
        // strata-dynamized is not one of the suite's engines: skipped.
        let mut engines = vec!["strata-btree", "strata-dynamized", "strata-betree"];
        if cfg!(feature = "fjall") {
            engines.push("fjall");
        }
        opts.engines = Some(engines.join(","));
        let out = run(&opts).unwrap();
        let expected: Vec<(&str, &str, &str, u64)> = betree_wall::ENGINES
            .iter()
            .filter(|e| engines.contains(e))
            .flat_map(|e| {
                let ops = [20_000, 2_000, 200];
                betree_wall::WORKLOADS
                    .iter()
                    .zip(ops)
                    .map(move |((w, op), n)| (*e, *w, *op, n))
            })
            .collect();
        let rows: Vec<(&str, &str, &str, u64)> = out
            .results
            .iter()
            .map(|r| (r.engine.as_str(), r.workload.as_str(), r.op.as_str(), r.ops))
            .collect();
        assert_eq!(rows, expected);
        // 10% of 20 000 × 16 bytes is below the 8-page minimum.
        assert!(out.results.iter().all(|r| r.cache_bytes == 8 * 4096));
        let mut needles = vec![
            "data / cache = 9.8",
            "| strata-betree | ",
            "Bytes written / read",
        ];
        if cfg!(feature = "fjall") {
            needles.push("| strata-betree / fjall | ");
        }
        for needle in needles {
            assert!(out.analysis.contains(needle), "{needle}: {}", out.analysis);
        }
        let report = std::fs::read_to_string(&out.report_path).unwrap();
        assert!(report.contains("betree-wall-throughput.svg"), "{report}");
    }
}
#[cfg(test)]
mod lab_tests;
