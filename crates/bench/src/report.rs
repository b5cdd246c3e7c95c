//! Human-readable output: the results table as aligned text (stdout) and as Markdown, and the `report.md`
//! of a run (machine, parameters, table, notes on method).

use crate::result::{BenchResult, first_seen};
use crate::sysinfo::{Machine, UtcTime};
use std::fmt::Write as _;

/// Column headers of the results table.
const HEADERS: [&str; 13] = [
    "engine",
    "workload",
    "op",
    "threads",
    "ops",
    "secs",
    "ops/s",
    "p50 µs",
    "p99 µs",
    "p99.9 µs",
    "max µs",
    "page reads",
    "page writes",
];

/// Latency in microseconds with a precision that suits its size.
pub fn fmt_us(us: f64) -> String {
    if us < 10.0 {
        format!("{us:.2}")
    } else if us < 1000.0 {
        format!("{us:.1}")
    } else {
        format!("{us:.0}")
    }
}

fn fmt_opt(v: Option<u64>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

fn cells(r: &BenchResult) -> [String; 13] {
    [
        r.engine.clone(),
        r.workload.clone(),
        r.op.clone(),
        r.threads.to_string(),
        r.ops.to_string(),
        format!("{:.3}", r.secs),
        format!("{:.0}", r.ops_per_sec),
        fmt_us(r.p50_us),
        fmt_us(r.p99_us),
        fmt_us(r.p999_us),
        fmt_us(r.max_us),
        fmt_opt(r.page_reads),
        fmt_opt(r.page_writes),
    ]
}

/// Columns 0..3 are text (left-aligned); the rest are numbers (right-aligned).
fn right_aligned(col: usize) -> bool {
    col >= 3
}

/// The results as an aligned text table (one line per row, trailing newline).
pub fn text_table(results: &[BenchResult]) -> String {
    let rows: Vec<[String; 13]> = results.iter().map(cells).collect();
    let mut width: Vec<usize> = HEADERS.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (w, c) in width.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cols: &mut dyn Iterator<Item = &str>| {
        let mut s = String::new();
        for (i, c) in cols.enumerate() {
            if i > 0 {
                s.push_str("  ");
            }
            let pad = width[i] - c.chars().count();
            if right_aligned(i) {
                s.extend(std::iter::repeat_n(' ', pad));
                s.push_str(c);
            } else {
                s.push_str(c);
                s.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push_str(s.trim_end());
        out.push('\n');
    };
    line(&mut HEADERS.iter().copied());
    for row in &rows {
        line(&mut row.iter().map(String::as_str));
    }
    out
}

/// The results as a Markdown table.
pub fn markdown_table(results: &[BenchResult]) -> String {
    let mut out = String::new();
    out.push_str(&format!("| {} |\n", HEADERS.join(" | ")));
    let sep: Vec<&str> = (0..HEADERS.len())
        .map(|i| if right_aligned(i) { "---:" } else { "---" })
        .collect();
    out.push_str(&format!("| {} |\n", sep.join(" | ")));
    for r in results {
        out.push_str(&format!("| {} |\n", cells(r).join(" | ")));
    }
    out
}

/// Bytes as a short human-readable size (binary units).
pub fn fmt_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Everything `report.md` shows.
#[derive(Debug, Clone)]
pub struct Report<'a> {
    pub suite: &'a str,
    pub started: UtcTime,
    pub machine: &'a Machine,
    /// (name, value) pairs of the run's parameters.
    pub params: Vec<(String, String)>,
    /// Suite-specific findings (Markdown), shown under "Analysis" after the results table.
    pub analysis: String,
    /// Method notes, one bullet each.
    pub notes: Vec<String>,
    pub results: &'a [BenchResult],
    /// Every engine of the run: name, version and how the run's options map onto its settings.
    pub engines: Vec<EngineInfo>,
    /// Engine the comparison tables take ratios against.
    pub baseline: Option<String>,
    /// Figures written next to the report: (title, SVG file, PNG file), paths relative to the report.
    pub figures: Vec<(String, String, String)>,
}

/// An engine as the report describes it.
#[derive(Debug, Clone)]
pub struct EngineInfo {
    pub name: String,
    pub version: String,
    pub settings: String,
}

/// Per workload, a table of every (op, threads, engine) with throughput and latency and the throughput ratio
/// against `baseline` (for the same workload, op and threads).
pub fn comparison_tables(results: &[BenchResult], baseline: &str) -> String {
    let mut s = String::new();
    for w in first_seen(results.iter().map(|r| r.workload.as_str())) {
        let _ = writeln!(s, "### {w}\n");
        let _ = writeln!(
            s,
            "| op | threads | engine | ops/s | vs {baseline} | p50 µs | p99 µs | p99.9 µs | max µs |"
        );
        let _ = writeln!(s, "|---|---:|---|---:|---:|---:|---:|---:|---:|");
        let mut rows: Vec<&BenchResult> = results.iter().filter(|r| r.workload == w).collect();
        // Group by op (first appearance), then threads, keeping engine order.
        let ops = first_seen(rows.iter().map(|r| r.op.as_str()));
        rows.sort_by_key(|r| (ops.iter().position(|o| *o == r.op).unwrap_or(0), r.threads));
        for r in rows {
            let base = results.iter().find(|b| {
                b.engine == baseline
                    && b.workload == r.workload
                    && b.op == r.op
                    && b.threads == r.threads
            });
            let ratio = match base {
                Some(b) if b.ops_per_sec > 0.0 => format!("{:.2}×", r.ops_per_sec / b.ops_per_sec),
                _ => "-".into(),
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {:.0} | {ratio} | {} | {} | {} | {} |",
                r.op,
                r.threads,
                r.engine,
                r.ops_per_sec,
                fmt_us(r.p50_us),
                fmt_us(r.p99_us),
                fmt_us(r.p999_us),
                fmt_us(r.max_us)
            );
        }
        s.push('\n');
    }
    s
}

impl Report<'_> {
    /// The Markdown text of `report.md`.
    pub fn markdown(&self) -> String {
        let mut s = String::new();
        let m = self.machine;
        let _ = writeln!(s, "# Strata benchmark: suite `{}`\n", self.suite);
        let _ = writeln!(
            s,
            "Started {} by strata-bench {}.\n",
            self.started.iso(),
            env!("CARGO_PKG_VERSION")
        );
        let _ = writeln!(s, "## Machine\n");
        let unknown = || "unknown".to_string();
        let _ = writeln!(
            s,
            "- cores: {}",
            m.cores.map_or_else(unknown, |c| c.to_string())
        );
        let _ = writeln!(
            s,
            "- memory: {}",
            m.memory_bytes.map_or_else(unknown, fmt_bytes)
        );
        let _ = writeln!(
            s,
            "- kernel: {} ({} {})",
            m.kernel.clone().unwrap_or_else(unknown),
            m.os,
            m.arch
        );
        let _ = writeln!(s, "- cpu: {}", m.cpu.clone().unwrap_or_else(unknown));
        let _ = writeln!(
            s,
            "- filesystem of the data directory: {}",
            m.filesystem.clone().unwrap_or_else(unknown)
        );
        let _ = writeln!(s, "- compiler: {}\n", crate::sysinfo::RUSTC_VERSION);
        if !self.engines.is_empty() {
            let _ = writeln!(
                s,
                "## Engines
"
            );
            let _ = writeln!(s, "| engine | version | settings |");
            let _ = writeln!(s, "|---|---|---|");
            for e in &self.engines {
                let cell = |t: &str| t.replace('|', "\\|");
                let _ = writeln!(
                    s,
                    "| {} | {} | {} |",
                    cell(&e.name),
                    cell(&e.version),
                    cell(&e.settings)
                );
            }
            s.push('\n');
        }
        let _ = writeln!(s, "## Parameters\n");
        for (k, v) in &self.params {
            let _ = writeln!(s, "- {k}: {v}");
        }
        if let Some(b) = &self.baseline
            && self.engines.len() > 1
        {
            let _ = writeln!(
                s,
                "\n## Comparison\n\nThroughput ratios are against `{b}` for the same workload, operation and \
                 thread count (above 1 = faster than `{b}`).\n"
            );
            s.push_str(&comparison_tables(self.results, b));
        }
        if !self.figures.is_empty() {
            let _ = writeln!(s, "\n## Figures\n");
            for (title, svg, png) in &self.figures {
                let _ = writeln!(s, "### {title}\n\n![{title}]({png})\n\n[SVG]({svg})\n");
            }
        }
        let _ = writeln!(s, "\n## All results\n");
        s.push_str(&markdown_table(self.results));
        if !self.analysis.is_empty() {
            let _ = writeln!(s, "\n## Analysis\n\n{}", self.analysis.trim_end());
        }
        if !self.notes.is_empty() {
            let _ = writeln!(s, "\n## Method\n");
            for n in &self.notes {
                let _ = writeln!(s, "- {n}");
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_latencies_format() {
        assert_eq!(fmt_bytes(512), "512 B");
        assert_eq!(fmt_bytes(64 << 20), "64.0 MiB");
        assert_eq!(fmt_us(1.234), "1.23");
        assert_eq!(fmt_us(123.45), "123.5");
        assert_eq!(fmt_us(12345.6), "12346");
    }
}
