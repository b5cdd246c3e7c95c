//! `redis-benchmark` (from the Debian package `redis-tools`) as a second load generator for the server suite:
//! the client every Redis user knows, so a reader can check a figure with the same tool against any server.
//!
//! A run is `redis-benchmark -t set|get -P P -c C -d D -r R -n N` against a host and port. `N` is sized so a
//! run lasts about the phase's length: a first run of [`CALIBRATION_REQUESTS`] requests measures the rate.
//! The report is parsed from redis-benchmark's text output (its `--csv` output has no tail percentiles):
//! * the throughput summary (`requests per second`) and the `completed in S seconds` line;
//! * the latency summary (avg, p50, p99, max);
//! * p99.9 from the "Latency by percentile distribution" section: the latency of the first point at or above
//!   99.9% (redis-benchmark prints halving steps, so this is its 99.902% point — an upper bound of p99.9 within
//!   one step of its histogram).
//!
//! Its latency is measured from a command's send to its reply, as the suite's own client measures it.

use crate::error::{BenchError, Result};
use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

/// Requests of the calibration run that sizes each measured run.
pub const CALIBRATION_REQUESTS: u64 = 20_000;

/// One redis-benchmark run's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct RbOutcome {
    pub requests: u64,
    pub secs: f64,
    pub ops_per_sec: f64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct RbSpec {
    pub addr: SocketAddr,
    /// `set` or `get`.
    pub test: &'static str,
    pub pipeline: usize,
    pub connections: usize,
    pub value_size: usize,
    /// Keys are `key:` and a random number below this (redis-benchmark's `-r`).
    pub keyspace: u64,
}

/// True if `redis-benchmark` can be run.
pub fn available() -> bool {
    Command::new("redis-benchmark")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Runs `spec` for about `duration`: a calibration run, then the measured run.
pub fn run(spec: &RbSpec, duration: Duration) -> Result<RbOutcome> {
    let probe = run_n(spec, CALIBRATION_REQUESTS)?;
    let n = (probe.ops_per_sec * duration.as_secs_f64()) as u64;
    run_n(spec, n.clamp(CALIBRATION_REQUESTS, 50_000_000))
}

/// Runs `spec` for exactly `requests` requests.
pub fn run_n(spec: &RbSpec, requests: u64) -> Result<RbOutcome> {
    let out = Command::new("redis-benchmark")
        .args(["-h", &spec.addr.ip().to_string()])
        .args(["-p", &spec.addr.port().to_string()])
        .args(["-t", spec.test])
        .args(["-P", &spec.pipeline.to_string()])
        .args(["-c", &spec.connections.to_string()])
        .args(["-d", &spec.value_size.to_string()])
        .args(["-r", &spec.keyspace.to_string()])
        .args(["-n", &requests.to_string()])
        .output()
        .map_err(|e| BenchError::Usage(format!("running redis-benchmark: {e}")))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(BenchError::Usage(format!(
            "redis-benchmark against {} failed ({}): {}",
            spec.addr,
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    parse(&text).ok_or_else(|| {
        BenchError::Usage(format!(
            "redis-benchmark's report against {} could not be read: {}",
            spec.addr,
            text.chars()
                .rev()
                .take(400)
                .collect::<String>()
                .chars()
                .rev()
                .collect::<String>()
        ))
    })
}

/// Reads the figures of one test from redis-benchmark's text report (progress lines, which end in `\r`,
/// are skipped); `None` if a figure is missing.
pub fn parse(text: &str) -> Option<RbOutcome> {
    let lines: Vec<&str> = text
        .split(['\n', '\r'])
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let requests_secs = lines.iter().find_map(|l| {
        let (n, rest) = l.split_once(" requests completed in ")?;
        let secs = rest.strip_suffix(" seconds")?;
        Some((
            n.trim().parse::<u64>().ok()?,
            secs.trim().parse::<f64>().ok()?,
        ))
    })?;
    let ops_per_sec = lines.iter().find_map(|l| {
        l.strip_prefix("throughput summary:")?
            .trim()
            .strip_suffix("requests per second")?
            .trim()
            .parse::<f64>()
            .ok()
    })?;
    // The latency summary: a header line, then avg min p50 p95 p99 max.
    let header = lines.iter().position(|l| {
        l.split_whitespace()
            .eq(["avg", "min", "p50", "p95", "p99", "max"])
    })?;
    let summary: Vec<f64> = lines
        .get(header + 1)?
        .split_whitespace()
        .map(|v| v.parse::<f64>().ok())
        .collect::<Option<_>>()?;
    let [mean_ms, _min, p50_ms, _p95, p99_ms, max_ms] = summary.as_slice().try_into().ok()?;
    // "99.902% <= 16.751 milliseconds (cumulative count 49954)" in the percentile section (before the
    // cumulative distribution, whose first column is the share at a bucket bound, not a percentile).
    let section = lines
        .iter()
        .position(|l| l.starts_with("Latency by percentile distribution"))?;
    let p999_ms = lines[section + 1..]
        .iter()
        .take_while(|l| !l.starts_with("Cumulative distribution"))
        .find_map(|l| {
            let (pct, rest) = l.split_once("% <= ")?;
            let ms = rest.split_whitespace().next()?.parse::<f64>().ok()?;
            (pct.trim().parse::<f64>().ok()? >= 99.9).then_some(ms)
        })?;
    Some(RbOutcome {
        requests: requests_secs.0,
        secs: requests_secs.1,
        ops_per_sec,
        mean_ms,
        p50_ms,
        p99_ms,
        p999_ms,
        max_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// redis-benchmark 7.0.15's report of one test, progress lines included.
    const REPORT: &str = "SET: rps=0.0 (overall: 0.0) avg_msec=-nan (overall: -nan)\r\
SET: rps=26972.3 (overall: 26045.8) avg_msec=1.402 (overall: 1.402)\r                                   \r\
====== GET ======
  50000 requests completed in 1.52 seconds
  50 parallel clients
  100 bytes payload
  keep alive: 1
  host configuration \"save\": 
  host configuration \"appendonly\": yes
  multi-thread: no

Latency by percentile distribution:
0.000% <= 0.239 milliseconds (cumulative count 1)
50.000% <= 0.895 milliseconds (cumulative count 25832)
99.805% <= 16.607 milliseconds (cumulative count 49908)
99.902% <= 16.751 milliseconds (cumulative count 49954)
99.951% <= 20.575 milliseconds (cumulative count 49976)
100.000% <= 20.623 milliseconds (cumulative count 50000)

Cumulative distribution of latencies:
0.000% <= 0.103 milliseconds (cumulative count 0)
99.942% <= 17.103 milliseconds (cumulative count 49971)
100.000% <= 21.103 milliseconds (cumulative count 50000)

Summary:
  throughput summary: 32829.94 requests per second
  latency summary (msec):
          avg       min       p50       p95       p99       max
        1.044     0.232     0.895     1.263     6.231    20.623
";

    #[test]
    fn a_report_is_read_whole() {
        let o = parse(REPORT).unwrap();
        assert_eq!(
            o,
            RbOutcome {
                requests: 50_000,
                secs: 1.52,
                ops_per_sec: 32829.94,
                mean_ms: 1.044,
                p50_ms: 0.895,
                p99_ms: 6.231,
                p999_ms: 16.751,
                max_ms: 20.623,
            }
        );
    }

    #[test]
    fn a_report_missing_a_figure_is_refused() {
        for cut in [
            "throughput summary",
            "requests completed",
            "Latency by percentile",
            "avg       min",
        ] {
            let broken: String = REPORT
                .lines()
                .filter(|l| !l.contains(cut))
                .collect::<Vec<_>>()
                .join("\n");
            assert_eq!(parse(&broken), None, "{cut}");
        }
        // p99.9 must come from the percentile section, not the cumulative distribution after it.
        let no_tail = REPORT
            .replace(
                "99.805% <= 16.607 milliseconds (cumulative count 49908)\n",
                "",
            )
            .replace(
                "99.902% <= 16.751 milliseconds (cumulative count 49954)\n",
                "",
            )
            .replace(
                "99.951% <= 20.575 milliseconds (cumulative count 49976)\n",
                "",
            )
            .replace(
                "100.000% <= 20.623 milliseconds (cumulative count 50000)\n",
                "",
            );
        assert!(no_tail.contains("99.942% <= 17.103"));
        assert_eq!(parse(&no_tail), None);
    }
}
