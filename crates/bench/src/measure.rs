//! # Measurement
//!
//! * [`Latency`]: an HdrHistogram of single-operation latencies at nanosecond resolution (3 significant
//!   digits, 1 ns to 1 hour, larger values saturate), reported in microseconds.
//! * [`Phase`]: one timed phase of a workload on one driver. It keeps a histogram per operation kind, takes
//!   the driver's I/O counters at the start and the end, resets the peak RSS at the start (Linux
//!   `clear_refs`), measures the database directory at the end, and turns all of it into [`BenchResult`]s.
//! * [`Progress`]: a progress bar on stderr, only when stderr is a terminal.

use crate::driver::{Driver, IoTotals};
use crate::error::{BenchError, Result};
use crate::result::BenchResult;
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::path::Path;
use std::time::{Duration, Instant};

/// Largest latency tracked exactly (1 hour in nanoseconds); longer operations are recorded as this.
const MAX_TRACKED_NS: u64 = 3_600 * 1_000_000_000;

/// Latencies of one kind of operation.
#[derive(Debug, Clone)]
pub struct Latency {
    hist: Histogram<u64>,
}

impl Default for Latency {
    fn default() -> Self {
        Self::new()
    }
}

impl Latency {
    pub fn new() -> Self {
        Latency {
            hist: Histogram::new_with_bounds(1, MAX_TRACKED_NS, 3).expect("valid histogram bounds"),
        }
    }

    /// Records one operation's duration.
    #[inline]
    pub fn record(&mut self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.hist.saturating_record(ns);
    }

    /// Number of operations recorded.
    pub fn count(&self) -> u64 {
        self.hist.len()
    }

    /// Latency at quantile `q` (0..=1) in microseconds.
    pub fn quantile_us(&self, q: f64) -> f64 {
        self.hist.value_at_quantile(q) as f64 / 1000.0
    }

    /// Largest latency in microseconds.
    pub fn max_us(&self) -> f64 {
        self.hist.max() as f64 / 1000.0
    }

    /// Mean latency in microseconds.
    pub fn mean_us(&self) -> f64 {
        self.hist.mean() / 1000.0
    }

    /// Adds another histogram's samples (e.g. from another thread).
    pub fn merge(&mut self, other: &Latency) {
        self.hist
            .add(&other.hist)
            .expect("histograms with the same bounds");
    }
}

/// Handle of one operation kind inside a [`Phase`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpId(usize);

/// What every row of a phase shares.
#[derive(Debug, Clone)]
pub struct PhaseLabels {
    pub suite: String,
    pub engine: String,
    pub workload: String,
    pub records: u64,
    pub threads: u32,
    pub durability: String,
    pub cache_bytes: u64,
    pub page_size: usize,
}

/// One timed phase of a workload on one driver.
pub struct Phase<'d> {
    driver: &'d dyn Driver,
    labels: PhaseLabels,
    ops: Vec<(&'static str, Latency)>,
    start: Instant,
    io0: Option<IoTotals>,
    os0: Option<ProcIo>,
    rss_phase_scope: bool,
    progress: Progress,
}

impl<'d> Phase<'d> {
    /// Starts a phase; `expected_ops` sizes the progress bar.
    pub fn begin(
        driver: &'d dyn Driver,
        labels: PhaseLabels,
        expected_ops: u64,
        show_progress: bool,
    ) -> Self {
        let progress = Progress::new(
            &format!("{} {}", labels.engine, labels.workload),
            expected_ops,
            show_progress,
        );
        let rss_phase_scope = reset_peak_rss();
        let io0 = driver.io();
        let os0 = ProcIo::read();
        Phase {
            driver,
            labels,
            ops: Vec::new(),
            start: Instant::now(),
            io0,
            os0,
            rss_phase_scope,
            progress,
        }
    }

    /// Registers an operation kind (`get`, `insert`, …); each gets its own row.
    pub fn op(&mut self, name: &'static str) -> OpId {
        if let Some(i) = self.ops.iter().position(|(n, _)| *n == name) {
            return OpId(i);
        }
        self.ops.push((name, Latency::new()));
        OpId(self.ops.len() - 1)
    }

    /// Runs `f` as one operation of kind `op`, recording its latency.
    #[inline]
    pub fn time<T>(&mut self, op: OpId, f: impl FnOnce() -> T) -> T {
        let t = Instant::now();
        let r = f();
        self.ops[op.0].1.record(t.elapsed());
        self.progress.tick();
        r
    }

    /// Adds latencies recorded elsewhere (by a worker thread) to operation kind `op`.
    pub fn merge(&mut self, op: &'static str, lat: &Latency) {
        let id = self.op(op);
        self.ops[id.0].1.merge(lat);
    }

    /// A handle worker threads can advance the progress bar with.
    pub fn progress_handle(&self) -> Progress {
        Progress {
            bar: self.progress.bar.clone(),
            pending: 0,
        }
    }

    /// Ends the phase: the wall time since [`Phase::begin`], the I/O since then, the peak RSS, and the size of
    /// `db_dir` now. One row per operation kind.
    pub fn finish(self, db_dir: &Path) -> Result<Vec<BenchResult>> {
        let secs = self.start.elapsed().as_secs_f64();
        let io = match (self.driver.io(), self.io0) {
            (Some(end), Some(start)) => Some(end - start),
            _ => None,
        };
        let os = match (ProcIo::read(), self.os0) {
            (Some(end), Some(start)) => Some(end - start),
            _ => None,
        };
        self.progress.finish();
        let rss = peak_rss_bytes();
        let disk = dir_bytes(db_dir)?;
        let parts = RowParts {
            secs,
            io,
            os,
            rss,
            rss_scope: if self.rss_phase_scope {
                "phase"
            } else {
                "process"
            },
            disk_bytes: disk,
            height: self.driver.height(),
        };
        Ok(self
            .ops
            .iter()
            .map(|(op, lat)| row(&self.labels, op, lat, &parts))
            .collect())
    }
}

/// What the rows of a phase share besides their labels.
pub(crate) struct RowParts {
    pub secs: f64,
    pub io: Option<IoTotals>,
    pub os: Option<ProcIo>,
    pub rss: Option<u64>,
    /// `phase`, `process` or `none` (not measured).
    pub rss_scope: &'static str,
    pub disk_bytes: u64,
    pub height: Option<u32>,
}

/// The row of operation kind `op` with latencies `lat`.
pub(crate) fn row(l: &PhaseLabels, op: &str, lat: &Latency, p: &RowParts) -> BenchResult {
    let ops = lat.count();
    let (io, os, secs) = (p.io, p.os, p.secs);
    BenchResult {
        suite: l.suite.clone(),
        engine: l.engine.clone(),
        workload: l.workload.clone(),
        op: op.to_string(),
        threads: l.threads,
        records: l.records,
        ops,
        secs,
        ops_per_sec: if secs > 0.0 { ops as f64 / secs } else { 0.0 },
        p50_us: lat.quantile_us(0.5),
        p99_us: lat.quantile_us(0.99),
        p999_us: lat.quantile_us(0.999),
        max_us: lat.max_us(),
        mean_us: lat.mean_us(),
        io_reads: io.map(|i| i.reads),
        io_writes: io.map(|i| i.writes),
        bytes_read: io.map(|i| i.bytes_read),
        bytes_written: io.map(|i| i.bytes_written),
        io_syncs: io.map(|i| i.syncs),
        page_reads: io.map(|i| i.page_reads),
        page_writes: io.map(|i| i.page_writes),
        rss_bytes: p.rss,
        rss_scope: p.rss_scope.to_string(),
        disk_bytes: p.disk_bytes,
        durability: l.durability.clone(),
        cache_bytes: l.cache_bytes,
        page_size: l.page_size,
        height: p.height,
        os_read_bytes: os.map(|o| o.read_bytes),
        os_write_bytes: os.map(|o| o.write_bytes),
        os_rchar: os.map(|o| o.rchar),
        os_wchar: os.map(|o| o.wchar),
        imbalance: None,
        normalized: None,
        server_cpu_us: None,
        load_factor: None,
        thread_cpu_us: None,
        run_wait_us: None,
        huge_page_bytes: None,
        array_huge_share: None,
    }
}

/// The process's I/O counters from `/proc/self/io`: `rchar`/`wchar` count bytes passed to read/write system
/// calls (page cache hits included), `read_bytes`/`write_bytes` bytes the storage layer fetched or was sent.
/// Process-wide: they cover every engine thread, including background compaction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcIo {
    pub rchar: u64,
    pub wchar: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
}

impl ProcIo {
    /// The current counters, or `None` where `/proc/self/io` is not readable.
    pub fn read() -> Option<ProcIo> {
        let text = std::fs::read_to_string("/proc/self/io").ok()?;
        let field = |name: &str| {
            text.lines().find_map(|l| {
                l.strip_prefix(name)?
                    .strip_prefix(':')?
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
        };
        Some(ProcIo {
            rchar: field("rchar")?,
            wchar: field("wchar")?,
            read_bytes: field("read_bytes")?,
            write_bytes: field("write_bytes")?,
        })
    }
}

impl std::ops::Sub for ProcIo {
    type Output = ProcIo;
    fn sub(self, o: ProcIo) -> ProcIo {
        ProcIo {
            rchar: self.rchar.saturating_sub(o.rchar),
            wchar: self.wchar.saturating_sub(o.wchar),
            read_bytes: self.read_bytes.saturating_sub(o.read_bytes),
            write_bytes: self.write_bytes.saturating_sub(o.write_bytes),
        }
    }
}

/// A progress bar on stderr that only exists when asked for and stderr is a terminal.
pub struct Progress {
    bar: Option<ProgressBar>,
    pending: u64,
}

/// Operations between progress bar updates (keeps the bar's cost out of tight loops).
const PROGRESS_STEP: u64 = 1024;

impl Progress {
    pub fn new(label: &str, len: u64, show: bool) -> Self {
        let bar = (show && std::io::stderr().is_terminal()).then(|| {
            let bar = ProgressBar::new(len);
            bar.set_style(
                ProgressStyle::with_template(
                    "{prefix:>28} [{bar:30}] {pos}/{len} {per_sec} eta {eta}",
                )
                .expect("valid progress template")
                .progress_chars("=> "),
            );
            bar.set_prefix(label.to_string());
            bar
        });
        Progress { bar, pending: 0 }
    }

    /// Counts one unit of work.
    #[inline]
    pub fn tick(&mut self) {
        self.inc(1);
    }

    /// Counts `n` units of work.
    #[inline]
    pub fn inc(&mut self, n: u64) {
        if let Some(bar) = &self.bar {
            self.pending += n;
            if self.pending >= PROGRESS_STEP {
                bar.inc(self.pending);
                self.pending = 0;
            }
        }
    }

    /// Shows the pending count now (worker threads call this before they end).
    pub fn flush(&mut self) {
        if let Some(bar) = &self.bar {
            bar.inc(self.pending);
            self.pending = 0;
        }
    }

    /// Removes the bar.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// A thread's `(time on a CPU, time runnable waiting for one)` so far, in ns, from its Linux `schedstat`
/// file (`/proc/thread-self/schedstat` for the calling thread); `None` where it is unreadable.
pub fn schedstat(path: &str) -> Option<(u64, u64)> {
    let s = std::fs::read_to_string(path).ok()?;
    let mut f = s.split_whitespace().map(|w| w.parse::<u64>().ok());
    Some((f.next()??, f.next()??))
}

/// Resets the kernel's peak-RSS counter of this process (`echo 5 > /proc/self/clear_refs`); false when
/// that is not possible (not Linux, or refused).
pub fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

fn status_kb(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status.lines().find_map(|line| {
        let rest = line.strip_prefix(field)?.strip_prefix(':')?;
        let kb: u64 = rest.trim().strip_suffix("kB")?.trim().parse().ok()?;
        Some(kb * 1024)
    })
}

/// Peak resident set size of this process (`VmHWM`) in bytes.
pub fn peak_rss_bytes() -> Option<u64> {
    status_kb("VmHWM")
}

/// Current resident set size of this process (`VmRSS`) in bytes.
pub fn current_rss_bytes() -> Option<u64> {
    status_kb("VmRSS")
}

/// Apparent size of every file under `dir`, recursively.
pub fn dir_bytes(dir: &Path) -> Result<u64> {
    let mut total = 0;
    let entries = std::fs::read_dir(dir).map_err(|e| BenchError::io(dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| BenchError::io(dir, e))?;
        let path = entry.path();
        let meta = entry.metadata().map_err(|e| BenchError::io(&path, e))?;
        if meta.is_dir() {
            total += dir_bytes(&path)?;
        } else {
            total += meta.len();
        }
    }
    Ok(total)
}
