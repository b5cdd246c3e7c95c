//! Tests of `plot`.

use super::*;

fn row(engine: &str, workload: &str, op: &str, threads: u32, ops: u64, secs: f64) -> BenchResult {
    BenchResult {
        suite: "t".into(),
        engine: engine.into(),
        workload: workload.into(),
        op: op.into(),
        threads,
        records: 1000,
        ops,
        secs,
        ops_per_sec: ops as f64 / secs,
        p50_us: 1.5,
        p99_us: 20.0,
        p999_us: 300.0,
        max_us: 5000.0,
        mean_us: 3.0,
        io_reads: None,
        io_writes: None,
        bytes_read: None,
        bytes_written: None,
        io_syncs: None,
        page_reads: None,
        page_writes: None,
        rss_bytes: None,
        rss_scope: "phase".into(),
        disk_bytes: 1,
        durability: "none".into(),
        cache_bytes: 1,
        page_size: 4096,
        height: None,
        os_read_bytes: None,
        os_write_bytes: None,
        os_rchar: None,
        os_wchar: None,
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

/// Width and height from a PNG's IHDR chunk (after checking the signature).
fn png_size(path: &Path) -> (u32, u32) {
    let bytes = std::fs::read(path).unwrap();
    assert!(bytes.len() > 24, "{}", path.display());
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{}", path.display());
    assert_eq!(&bytes[12..16], b"IHDR");
    let w = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
    let h = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
    (w, h)
}

/// Reads an SVG and checks that it looks like well-formed XML: an `<svg>` root and balanced tags.
fn read_svg(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let body = text.trim();
    let body = match body.strip_prefix("<?xml") {
        Some(rest) => rest[rest.find("?>").unwrap() + 2..].trim_start(),
        None => body,
    };
    assert!(body.starts_with("<svg"), "{}", path.display());
    assert!(body.ends_with("</svg>"), "{}", path.display());
    let mut open: Vec<&str> = Vec::new();
    let mut rest = body;
    while let Some(start) = rest.find('<') {
        let end = start + rest[start..].find('>').expect("unclosed tag");
        let tag = &rest[start + 1..end];
        rest = &rest[end + 1..];
        if tag.starts_with('?') || tag.starts_with('!') || tag.ends_with('/') {
            continue;
        }
        if let Some(closing) = tag.strip_prefix('/') {
            assert_eq!(open.pop(), Some(closing.trim()), "{}", path.display());
        } else {
            open.push(tag.split_whitespace().next().unwrap_or(""));
        }
    }
    assert!(open.is_empty(), "unclosed {open:?} in {}", path.display());
    text
}

fn stems(figs: &[Figure]) -> Vec<String> {
    figs.iter()
        .map(|f| {
            assert_eq!(f.svg.file_stem(), f.png.file_stem());
            assert_eq!(f.svg.extension().unwrap(), "svg");
            assert_eq!(f.png.extension().unwrap(), "png");
            f.svg.file_stem().unwrap().to_string_lossy().into_owned()
        })
        .collect()
}

const ENGINES: [&str; 3] = ["strata-btree", "redb", "a-peer-with-a-long-name"];

/// Three engines; a fill, a two-op workload run at 1, 2 and 4 threads, and a scan.
fn sample() -> Vec<BenchResult> {
    let mut rows = Vec::new();
    for (i, e) in ENGINES.iter().enumerate() {
        let f = 1.0 + i as f64;
        rows.push(row(e, "fillrandom", "insert", 1, 100_000, 0.5 * f));
        for t in [1, 2, 4] {
            let secs = 0.5 * f / f64::from(t).sqrt();
            let mut read = row(e, "ycsb-a", "read", t, 50_000, secs);
            read.p50_us = 0.8 * f;
            read.p999_us = 900.0 * f;
            rows.push(read);
            rows.push(row(e, "ycsb-a", "update", t, 50_000, secs));
        }
        rows.push(row(e, "scan", "scan", 1, 1_000 * (i as u64 + 1), 0.1));
    }
    rows
}

#[test]
fn figures_cover_throughput_latency_and_threads() {
    let rows = sample();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("figs");
    let figs = write_figures(&rows, &dir).unwrap();
    assert_eq!(
        stems(&figs),
        [
            "throughput",
            "latency-fillrandom",
            "latency-ycsb-a",
            "latency-scan",
            "threads"
        ]
    );
    let titles: Vec<&str> = figs.iter().map(|f| f.title.as_str()).collect();
    assert_eq!(
        titles,
        [
            "Throughput per workload",
            "Latency percentiles, fillrandom",
            "Latency percentiles, ycsb-a (1 thread)",
            "Latency percentiles, scan",
            "Throughput against threads",
        ]
    );
    for f in &figs {
        assert!(f.svg.starts_with(&dir) && f.png.starts_with(&dir));
        let svg = read_svg(&f.svg);
        assert!(
            svg.contains(&f.title),
            "{} lacks its title",
            f.svg.display()
        );
        for e in ENGINES {
            assert!(svg.contains(e), "{} lacks {e}", f.svg.display());
        }
        assert_eq!(png_size(&f.png), SIZE);
    }
    let throughput = read_svg(&figs[0].svg);
    for w in ["fillrandom", "ycsb-a", "scan"] {
        assert!(throughput.contains(w));
    }
    // Y axis in K/M: the largest throughput is 200K ops/s (100K over 0.5 s; 2 × 50K over 0.5 s).
    assert!(throughput.contains("200K") || throughput.contains("100K"));
    let ycsb = read_svg(&figs[2].svg);
    for s in ["read", "update", "p50", "p99", "p99.9"] {
        assert!(ycsb.contains(s), "latency figure lacks {s}");
    }
    // Log scale in whole decades: p50 0.8 µs … p99.9 2700 µs → 100ns … 10ms.
    assert!(ycsb.contains("100ns") && ycsb.contains("10ms"));
    let threads = read_svg(&figs[4].svg);
    assert!(threads.contains("ycsb-a") && threads.contains("threads"));
}

/// The throughput bars agree with the rows the report's table shows: a phase's bar is the sum of its
/// rows' `ops_per_sec` (ops side by side share the phase's time), and phases run one after another under
/// one workload name add their times (the smoke suite's count and sample once shared a name, and the
/// bar divided both phases' ops by the first one's time: 0.7M ops/s for 15K measured).
#[test]
fn throughput_bars_agree_with_the_table() {
    let rows = vec![
        row("a", "ycsb-a", "read", 1, 50_000, 2.0),
        row("a", "ycsb-a", "update", 1, 50_000, 2.0),
        row("a", "count+sample", "count", 1, 10_000, 0.01),
        row("a", "count+sample", "sample", 1, 10_000, 0.7),
        row("b", "ycsb-a", "read", 1, 40_000, 4.0),
        row("b", "ycsb-a", "update", 1, 40_000, 4.0),
        row("a", "scan", "next", 2, 900, 3.0),
    ];
    let bars = throughput_bars(&rows);
    let value = |engine: &str, group: &str| {
        let g = bars.groups.iter().position(|x| x == group).unwrap();
        bars.series
            .iter()
            .find(|s| s.name == engine)
            .unwrap()
            .values[g]
    };
    let table_sum = |engine: &str, workload: &str| -> f64 {
        rows.iter()
            .filter(|r| r.engine == engine && r.workload == workload)
            .map(|r| r.ops_per_sec)
            .sum()
    };
    assert_eq!(value("a", "ycsb-a"), Some(table_sum("a", "ycsb-a")));
    assert_eq!(value("a", "ycsb-a"), Some(50_000.0));
    assert_eq!(value("b", "ycsb-a"), Some(table_sum("b", "ycsb-a")));
    let sequential = value("a", "count+sample").unwrap();
    assert!((sequential - 20_000.0 / 0.71).abs() < 1e-6, "{sequential}");
    assert!(sequential < 30_000.0, "not the first phase's time alone");
    assert_eq!(value("b", "count+sample"), None, "b did not run it");
    assert_eq!(value("a", "scan (2 threads)"), Some(300.0));
}

#[test]
fn empty_results_make_no_figures() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("none");
    assert!(write_figures(&[], &dir).unwrap().is_empty());
    assert!(!dir.exists());
}

#[test]
fn one_engine_one_workload_has_no_thread_figure() {
    let tmp = tempfile::tempdir().unwrap();
    let figs = write_figures(&[row("e", "w", "read", 1, 10, 1.0)], tmp.path()).unwrap();
    assert_eq!(stems(&figs), ["throughput", "latency-w"]);
    for f in &figs {
        assert!(read_svg(&f.svg).contains(&f.title));
        assert_eq!(png_size(&f.png), SIZE);
    }
}

#[test]
fn zero_throughput_and_odd_latencies_do_not_break_the_scales() {
    let mut zero = row("redb", "scan", "scan", 1, 0, 0.0);
    zero.ops_per_sec = f64::NAN;
    zero.p50_us = 0.0;
    zero.p99_us = f64::NAN;
    zero.p999_us = f64::INFINITY;
    let mut slow = row("lmdb", "scan", "scan", 1, 5, f64::NAN);
    slow.p50_us = -1.0;
    let tmp = tempfile::tempdir().unwrap();
    let figs = write_figures(&[zero.clone()], tmp.path()).unwrap();
    assert_eq!(stems(&figs), ["throughput", "latency-scan"]);
    let figs = write_figures(&[zero, slow], tmp.path()).unwrap();
    assert_eq!(stems(&figs), ["throughput", "latency-scan"]);
    for f in &figs {
        let svg = read_svg(&f.svg);
        assert!(svg.contains("redb") && svg.contains("lmdb"));
        assert_eq!(png_size(&f.png), SIZE);
    }
}

#[test]
fn many_long_workload_names_fit() {
    let mut rows: Vec<BenchResult> = (0..14)
        .map(|i| {
            row(
                if i % 2 == 0 { "a" } else { "b" },
                &format!("a-rather-long-workload-name-number-{i}/with spaces & <marks>"),
                "read",
                1,
                10 + i,
                1.0,
            )
        })
        .collect();
    rows.push(row("a", &"x".repeat(300), "read", 2, 10, 1.0));
    let tmp = tempfile::tempdir().unwrap();
    let figs = write_figures(&rows, tmp.path()).unwrap();
    assert_eq!(figs.len(), 15 + 1);
    assert_eq!(figs[0].title, "Throughput per workload");
    assert!(
        figs[1]
            .svg
            .ends_with("latency-a-rather-long-workload-name-number-0_with_spaces____marks_.svg")
    );
    for f in &figs {
        read_svg(&f.svg);
        assert_eq!(png_size(&f.png), SIZE);
    }
}

#[test]
fn labels_and_scales() {
    assert_eq!(fmt_rate(0.0), "0");
    assert_eq!(fmt_rate(950.0), "950");
    assert_eq!(fmt_rate(1500.0), "1.5K");
    assert_eq!(fmt_rate(800_000.0), "800K");
    assert_eq!(fmt_rate(1_250_000.0), "1.25M");
    assert_eq!(fmt_rate(3e9), "3G");
    assert_eq!(fmt_latency(0.1), "100ns");
    assert_eq!(fmt_latency(1.0), "1µs");
    assert_eq!(fmt_latency(250.0), "250µs");
    assert_eq!(fmt_latency(10_000.0), "10ms");
    assert_eq!(fmt_latency(2e6), "2s");
    let near = |(a, b): (f64, f64), (c, d): (f64, f64)| {
        assert!(
            (a / c - 1.0).abs() < 1e-6 && (b / d - 1.0).abs() < 1e-6,
            "{a} {b}"
        );
        assert!(a <= c && b >= d);
    };
    near(log_range([0.8, 2700.0].into_iter()), (0.1, 10_000.0));
    near(log_range([2.0, 3.0].into_iter()), (1.0, 100.0));
    near(log_range([1.0, 1000.0].into_iter()), (1.0, 1000.0));
    near(
        log_range([0.0, f64::NAN, f64::INFINITY].into_iter()),
        (0.1, 10.0),
    );
    let mut used = vec!["throughput".to_string()];
    assert_eq!(stem_of("latency-a/b", &mut used), "latency-a_b");
    assert_eq!(stem_of("latency-a_b", &mut used), "latency-a_b-2");
    assert_eq!(stem_of("throughput", &mut used), "throughput-2");
    assert_eq!(stem_of(&"x".repeat(300), &mut used).len(), 100);
}
