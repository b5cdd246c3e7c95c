//! # Strata's benchmark lab
//!
//! Measures Strata's index families (and, later, peers such as RocksDB, LMDB, redb and fjall) under named
//! suites of workloads, with the same driver, the same measurement code and the same output for every engine.
//!
//! * [`driver`]: the [`Engine`] / [`Driver`] traits every engine under test implements (Strata's
//!   [`driver::StrataBTree`], [`driver::StrataDynamized`] and [`driver::StrataBeTree`], the peers behind cargo features), and the static
//!   structures the sampling suites take as query-latency ideals.
//! * [`measure`]: per-operation latency histograms (HdrHistogram, nanosecond resolution), phases that take
//!   I/O counters, peak RSS and disk usage, and progress bars that only appear on a terminal.
//! * [`result`]: [`BenchResult`], one JSON object per line per (suite, engine, workload, op, threads).
//! * [`mod@suites`]: the named suites (`default`, `ycsb`, `dbbench`, `smoke`, `btree-cost`, the sampling suites
//!   `irs` and `wss`, and the Bε-tree's `betree-io` and `betree-wall`) and [`run`], which runs one into an
//!   output directory.
//! * [`report`]: the text table, `report.md` and the machine description ([`sysinfo`]).
//! * [`plot`]: the run's figures (throughput, latency percentiles, thread scaling) as SVG and PNG.
//!
//! ```no_run
//! let opts = strata_bench::RunOptions::new("smoke");
//! let out = strata_bench::run(&opts).unwrap();
//! print!("{}", strata_bench::report::text_table(&out.results));
//! ```

pub mod distributions;
pub mod driver;
mod error;
pub mod measure;
pub mod plot;
pub mod redis_benchmark;
pub mod report;
pub mod resp_load;
pub mod result;
pub mod suites;
pub mod sysinfo;
pub mod values;

pub use driver::{Driver, Engine, EngineOptions, IoTotals};
pub use error::{BenchError, Result};
pub use result::BenchResult;
pub use suites::{RunOptions, RunOutput, SuiteConfig, SuiteInfo, run, run_suite, suites};
