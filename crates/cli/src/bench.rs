//! `strata bench`: runs a suite of the benchmark lab (`strata-bench`), prints the results table and where
//! the report was written.

use crate::{CliResult, DurabilityArg};
use clap::Args;
use std::io::Write;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Suite to run (see --list).
    #[arg(long, default_value = strata_bench::suites::DEFAULT_SUITE)]
    suite: String,
    /// Records loaded (default: the suite's, see --list).
    #[arg(long)]
    records: Option<u64>,
    /// Operations per measured workload (default: the suite's).
    #[arg(long)]
    ops: Option<u64>,
    /// Engines to run, comma-separated (default: every engine this build has; see --list).
    #[arg(long, value_name = "LIST")]
    engines: Option<String>,
    /// Thread counts to sweep, comma-separated (e.g. 1,2,4).
    #[arg(long, value_name = "LIST", value_delimiter = ',', default_value = "1")]
    threads: Vec<u32>,
    /// Value size in bytes; 8 means u64 values (default: the suite's).
    #[arg(long, value_name = "BYTES")]
    value_size: Option<usize>,
    /// Schedule this many operations per second (all threads together) and measure latency from each
    /// operation's scheduled start.
    #[arg(long, value_name = "OPS")]
    target_rate: Option<f64>,
    /// Nexts after each seek of the dbbench suite's seekrandom.
    #[arg(long, value_name = "N", default_value_t = strata_bench::suites::dbbench::DEFAULT_NEXTS)]
    nexts: u64,
    /// Engine the report's ratios are taken against (default: the first engine).
    #[arg(long, value_name = "ENGINE")]
    baseline: Option<String>,
    /// Also write the results, one JSON object per line, to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Output directory for results.jsonl and report.md (default: bench-results/<UTC timestamp>/).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// List the suites and exit.
    #[arg(long)]
    list: bool,
    /// Durability of every write of the run, for every engine (default: `flush` for the `server` suite,
    /// whose goals are stated at that durability, `none` for the others).
    #[arg(long, value_enum)]
    durability: Option<DurabilityArg>,
    /// Seed of every random choice.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Page size of page-based engines.
    #[arg(long, default_value_t = 4096)]
    page_size: usize,
}

pub fn run(args: &BenchArgs, cache_bytes: usize) -> CliResult {
    let mut stdout = std::io::stdout().lock();
    if args.list {
        writeln!(stdout, "suites:")?;
        for s in strata_bench::suites() {
            writeln!(
                stdout,
                "  {:<12} {} (default --records {})",
                s.name, s.description, s.default_records
            )?;
        }
        writeln!(stdout, "engines in this build:")?;
        for e in strata_bench::driver::engines() {
            let note = if e.ordered() {
                ""
            } else {
                " (no key order: suite dbbench only, when named by --engines)"
            };
            writeln!(stdout, "  {:<16} version {}{note}", e.name(), e.version())?;
        }
        stdout.flush()?;
        return Ok(());
    }
    let opts = strata_bench::RunOptions {
        suite: args.suite.clone(),
        records: args.records,
        ops: args.ops,
        threads: args.threads.clone(),
        value_size: args.value_size,
        engines: args.engines.clone(),
        baseline: args.baseline.clone(),
        target_rate: args.target_rate,
        nexts: args.nexts,
        cache_bytes,
        durability: match args.durability {
            Some(d) => d.into(),
            None if args.suite == strata_bench::suites::server::NAME => strata::Durability::Flush,
            None => strata::Durability::None,
        },
        page_size: args.page_size,
        seed: args.seed,
        out_dir: args.out.clone(),
        json: args.json.clone(),
        progress: true,
    };
    let out = strata_bench::run(&opts)?;
    write!(stdout, "{}", strata_bench::report::text_table(&out.results))?;
    if !out.analysis.is_empty() {
        writeln!(stdout, "\n{}", out.analysis.trim_end())?;
    }
    writeln!(stdout, "\nreport:  {}", out.report_path.display())?;
    writeln!(stdout, "results: {}", out.results_path.display())?;
    if let Some(json) = &out.json_path {
        writeln!(stdout, "json:    {}", json.display())?;
    }
    stdout.flush()?;
    Ok(())
}
