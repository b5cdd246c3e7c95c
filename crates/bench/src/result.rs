//! One measured row: a (suite, engine, workload, op, threads) combination, serialised as one JSON object per
//! line (`results.jsonl`).
//!
//! Field meanings:
//! * `ops`: operations of this kind done in the phase; `secs`: wall-clock time of the whole phase (for fill
//!   phases this includes the final checkpoint that puts the data on disk); `ops_per_sec = ops / secs`.
//! * `p50_us` … `max_us`, `mean_us`: latency of single operations in microseconds, measured with
//!   `Instant` around each call and recorded in an HdrHistogram at nanosecond resolution (3 significant
//!   digits).
//! * `io_reads`, `io_writes`, `bytes_read`, `bytes_written`, `io_syncs`: the engine's I/O counters summed over
//!   every file kind, for the phase (`null` for engines without counters); `page_reads` / `page_writes`: the
//!   page file's share.
//! * `rss_bytes`: peak resident set size (`VmHWM` of `/proc/self/status`) at the end of the phase.
//!   `rss_scope` says what the peak covers: `phase` when the peak was reset at the start of the phase
//!   (`/proc/self/clear_refs`), `process` when the kernel refused the reset (peak since the process started).
//! * `os_read_bytes`, `os_write_bytes`, `os_rchar`, `os_wchar`: the process's `/proc/self/io` counters over
//!   the phase, for every engine alike (peers keep no counters of their own): bytes the storage layer read and
//!   wrote, and bytes passed through read/write system calls (page-cache hits included).
//! * `height`: levels of a tree engine's index at the end of the phase (absent for other engines).
//! * `disk_bytes`: apparent size of every file in the database directory at the end of the phase.

use serde::{Deserialize, Serialize};

/// One row of results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchResult {
    pub suite: String,
    pub engine: String,
    pub workload: String,
    pub op: String,
    pub threads: u32,
    /// Records in the database the workload ran on (the suite's size parameter).
    pub records: u64,
    pub ops: u64,
    pub secs: f64,
    pub ops_per_sec: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
    pub mean_us: f64,
    pub io_reads: Option<u64>,
    pub io_writes: Option<u64>,
    pub bytes_read: Option<u64>,
    pub bytes_written: Option<u64>,
    pub io_syncs: Option<u64>,
    pub page_reads: Option<u64>,
    pub page_writes: Option<u64>,
    pub rss_bytes: Option<u64>,
    pub rss_scope: String,
    pub disk_bytes: u64,
    /// Durability of the writes in this phase (`none`, `flush`, `sync`).
    pub durability: String,
    pub cache_bytes: u64,
    pub page_size: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub height: Option<u32>,
    #[serde(default)]
    pub os_read_bytes: Option<u64>,
    #[serde(default)]
    pub os_write_bytes: Option<u64>,
    #[serde(default)]
    pub os_rchar: Option<u64>,
    #[serde(default)]
    pub os_wchar: Option<u64>,
    /// Server suites: most ÷ fewest operations run by one partition during the phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub imbalance: Option<f64>,
    /// Server suites: total operations ÷ the busiest partition's (FarReach's normalized throughput).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub normalized: Option<f64>,
    /// Server suites: the server's CPU time (user + system, all its threads) per operation, in µs — a
    /// counted figure that holds on a shared machine where throughput does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_cpu_us: Option<f64>,
    /// Hash suites: the index's load factor (live keys ÷ slots) at the end of the phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_factor: Option<f64>,
    /// Hash suite's thread sweep: CPU time the benchmark threads ran per operation, and the time they were
    /// runnable but waited for a core per operation (µs, from `/proc/thread-self/schedstat`): on a shared
    /// machine they tell an index's scaling limit from a lack of free cores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_cpu_us: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_wait_us: Option<f64>,
    /// Hash suite's main rows: the process's anonymous memory backed by transparent huge pages at the end of
    /// the phase (`AnonHugePages` of `/proc/self/smaps_rollup`; the index of the row is the only one alive),
    /// so rounds and thread counts are compared under the same page sizes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub huge_page_bytes: Option<u64>,
    /// Hash suite's `elimda` main rows: the share of its DRAM bucket array backed by huge pages at the end of
    /// the phase (`AnonHugePages` of the mappings of `/proc/self/smaps` that overlap it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array_huge_share: Option<f64>,
}

impl BenchResult {
    /// The row as one line of JSON (no trailing newline).
    pub fn to_json_line(&self) -> String {
        serde_json::to_string(self).expect("a BenchResult always serialises")
    }
}

/// The distinct items of `items` in order of first appearance (engines, workloads, ops of a run).
pub(crate) fn first_seen<'a>(items: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut out: Vec<&str> = Vec::new();
    for s in items {
        if !out.contains(&s) {
            out.push(s);
        }
    }
    out
}
