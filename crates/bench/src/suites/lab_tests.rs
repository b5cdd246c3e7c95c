//! Tests of the workload suites: tiny runs of every workload on every engine of the build (every read is
//! checked against the key-state model inside the run), a broken engine that must be caught, and the JSON
//! fields every row must carry.

use super::*;
use crate::driver::{Capabilities, Driver, EngineOptions, IoTotals, StrataBTree, Visit};
use rand::SeedableRng;
use std::sync::atomic::{AtomicU64, Ordering};

fn tiny(suite: &str, engines: Option<&str>) -> RunOptions {
    let mut opts = RunOptions::new(suite);
    opts.records = Some(3000);
    opts.ops = Some(3000);
    opts.threads = vec![1, 2];
    opts.engines = engines.map(str::to_string);
    opts.progress = false;
    opts
}

fn workloads_ops(out: &RunOutput) -> Vec<(String, String, u32)> {
    out.results
        .iter()
        .map(|r| (r.workload.clone(), r.op.clone(), r.threads))
        .collect()
}

/// Every engine of the build that stores byte values (the suites here use 100-byte values; the `smoke` suite
/// covers engines that store `u64` values only).
fn byte_value_engines() -> String {
    driver::engines()
        .iter()
        .filter(|e| e.capabilities().byte_values && e.ordered())
        .map(|e| e.name())
        .collect::<Vec<_>>()
        .join(",")
}

#[test]
fn every_workload_runs_on_every_engine() {
    every_workload_runs_on(&byte_value_engines());
}

fn every_workload_runs_on(engines: &str) {
    let tmp = tempfile::tempdir().unwrap();
    for suite in ["ycsb", "dbbench", "default"] {
        let mut opts = tiny(suite, Some(engines));
        opts.out_dir = Some(tmp.path().join(suite));
        let out = run(&opts).unwrap();
        for engine in driver::engines()
            .into_iter()
            .filter(|e| engines.split(',').any(|n| n == e.name()))
        {
            if !engine.capabilities().byte_values {
                assert!(
                    out.results.iter().all(|r| r.engine != engine.name()),
                    "{} cannot store 100-byte values",
                    engine.name()
                );
                continue;
            }
            let rows: Vec<&BenchResult> = out
                .results
                .iter()
                .filter(|r| r.engine == engine.name())
                .collect();
            let has = |w: &str, op: &str, t: u32| {
                rows.iter()
                    .any(|r| r.workload == w && r.op == op && r.threads == t && r.ops > 0)
            };
            let expected: &[(&str, &str, u32)] = match suite {
                "ycsb" => &[
                    ("ycsb-load", "insert", 1),
                    ("ycsb-a", "read", 1),
                    ("ycsb-a", "update", 2),
                    ("ycsb-b", "read", 2),
                    ("ycsb-c", "read", 1),
                    ("ycsb-d", "insert", 1),
                    ("ycsb-d", "read", 2),
                    ("ycsb-e", "scan", 1),
                    ("ycsb-e", "insert", 2),
                    ("ycsb-f", "rmw", 1),
                    ("ycsb-f", "read", 2),
                ],
                "dbbench" => &[
                    ("fillseq", "insert", 1),
                    ("fillrandom", "insert", 1),
                    ("readrandom", "read", 2),
                    ("readseq", "scan", 2),
                    ("seekrandom", "scan", 1),
                    ("readwhilewriting", "read", 2),
                    ("readwhilewriting", "update", 1),
                    ("deleterandom", "delete", 1),
                ],
                _ => &[
                    ("fillrandom", "insert", 1),
                    ("readrandom", "read", 1),
                    ("ycsb-a", "update", 1),
                    ("ycsb-b", "read", 2),
                    ("ycsb-c", "read", 2),
                    ("ycsb-e", "scan", 2),
                ],
            };
            for &(w, op, t) in expected {
                assert!(
                    has(w, op, t),
                    "{suite}: no {w}/{op}/{t} row for {}: {:?}",
                    engine.name(),
                    workloads_ops(&out)
                );
            }
            let readseq: u64 = rows
                .iter()
                .filter(|r| r.workload == "readseq" && r.threads == 1)
                .map(|r| r.ops)
                .sum();
            if suite == "dbbench" {
                assert_eq!(readseq, 3000, "readseq visits every record once");
            }
        }
        let report = std::fs::read_to_string(&out.report_path).unwrap();
        assert!(report.contains("## Engines") && report.contains("## All results"));
    }
}

#[test]
fn json_lines_carry_every_required_field() {
    let tmp = tempfile::tempdir().unwrap();
    let mut opts = tiny("default", Some("strata-btree"));
    opts.out_dir = Some(tmp.path().join("out"));
    let out = run(&opts).unwrap();
    let text = std::fs::read_to_string(&out.results_path).unwrap();
    assert_eq!(text.lines().count(), out.results.len());
    let required = [
        "suite",
        "engine",
        "workload",
        "op",
        "threads",
        "records",
        "ops",
        "secs",
        "ops_per_sec",
        "p50_us",
        "p99_us",
        "p999_us",
        "max_us",
        "io_reads",
        "io_writes",
        "bytes_read",
        "bytes_written",
        "rss_bytes",
        "disk_bytes",
    ];
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let obj = v.as_object().unwrap();
        for f in required {
            assert!(obj.contains_key(f), "field {f} missing in {line}");
        }
        assert_eq!(obj["suite"], "default");
        assert!(obj["ops"].as_u64().unwrap() > 0);
        assert!(obj["secs"].as_f64().unwrap() > 0.0);
        // The strata engine keeps I/O counters: they are numbers, not null.
        assert!(obj["io_reads"].is_u64() && obj["bytes_written"].is_u64());
    }
}

#[test]
fn target_rate_paces_the_operations() {
    let tmp = tempfile::tempdir().unwrap();
    let mut opts = tiny("default", Some("strata-btree"));
    opts.records = Some(1000);
    opts.ops = Some(400);
    opts.threads = vec![2];
    opts.target_rate = Some(4000.0);
    opts.out_dir = Some(tmp.path().join("out"));
    let out = run(&opts).unwrap();
    let read = out
        .results
        .iter()
        .find(|r| r.workload == "readrandom")
        .unwrap();
    // 400 operations at 4000/s take at least 0.1 s (the last is scheduled at 99.5 ms).
    assert!(read.secs >= 0.095, "{}", read.secs);
    assert!(read.ops_per_sec <= 4400.0, "{}", read.ops_per_sec);
}

/// An engine whose reads go wrong after a while: it must be caught, not measured.
struct Broken {
    mode: Fault,
}

#[derive(Clone, Copy)]
enum Fault {
    /// Gets return the value stored under the next key.
    WrongKey,
    /// Updates after the first few thousand writes are silently dropped.
    LostUpdate,
    /// Scans skip one record.
    ScanSkip,
}

struct BrokenDriver {
    inner: Box<dyn Driver>,
    mode: Fault,
    writes: AtomicU64,
}

impl Engine for Broken {
    fn name(&self) -> &'static str {
        "broken"
    }
    fn version(&self) -> String {
        "0".into()
    }
    fn capabilities(&self) -> Capabilities {
        StrataBTree.capabilities()
    }
    fn settings(&self, _: &EngineOptions) -> String {
        String::new()
    }
    fn open_dir(&self, dir: &Path, opts: &EngineOptions, create: bool) -> Result<Box<dyn Driver>> {
        Ok(Box::new(BrokenDriver {
            inner: StrataBTree.open_dir(dir, opts, create)?,
            mode: self.mode,
            writes: AtomicU64::new(0),
        }))
    }
}

impl Driver for BrokenDriver {
    fn engine(&self) -> &'static str {
        "broken"
    }

    fn put(&self, key: u64, value: &[u8]) -> Result<()> {
        let n = self.writes.fetch_add(1, Ordering::Relaxed);
        if matches!(self.mode, Fault::LostUpdate) && n > 3500 {
            return Ok(());
        }
        self.inner.put(key, value)
    }
    fn put_batch(&self, records: &[(u64, &[u8])]) -> Result<()> {
        self.inner.put_batch(records)
    }
    fn get(&self, key: u64, value: &mut Vec<u8>) -> Result<bool> {
        match self.mode {
            Fault::WrongKey if key % 97 == 5 => self.inner.get(key + 1, value),
            _ => self.inner.get(key, value),
        }
    }
    fn delete(&self, key: u64) -> Result<()> {
        self.inner.delete(key)
    }
    fn scan_range(
        &self,
        lo: u64,
        hi: u64,
        limit: u64,
        reverse: bool,
        visit: &mut Visit<'_>,
    ) -> Result<u64> {
        if matches!(self.mode, Fault::ScanSkip) {
            let mut i = 0;
            return self.inner.scan(lo, hi, limit, reverse, &mut |k, v| {
                i += 1;
                if i == 3 { Ok(()) } else { visit(k, v) }
            });
        }
        self.inner.scan(lo, hi, limit, reverse, visit)
    }
    fn count(&self, lo: u64, hi: u64) -> Result<u64> {
        self.inner.count(lo, hi)
    }
    fn sample_visit(
        &self,
        lo: u64,
        hi: u64,
        k: usize,
        rng: &mut dyn rand::RngCore,
        visit: &mut dyn FnMut(u64, &[u8]) -> Result<()>,
    ) -> Result<()> {
        self.inner.sample_visit(lo, hi, k, rng, visit)
    }
    fn checkpoint(&self) -> Result<()> {
        self.inner.checkpoint()
    }
    fn io(&self) -> Option<IoTotals> {
        self.inner.io()
    }
    fn close(self: Box<Self>) -> Result<()> {
        self.inner.close()
    }
}

#[test]
fn a_wrong_engine_cannot_post_a_number() {
    for (mode, suite) in [
        (Fault::WrongKey, "default"),
        (Fault::LostUpdate, "ycsb"),
        (Fault::ScanSkip, "dbbench"),
        (Fault::ScanSkip, "ycsb"),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = SuiteConfig {
            records: 3000,
            ops: Some(3000),
            threads: vec![1],
            target_rate: None,
            codec: ValueCodec::bytes(100).unwrap(),
            nexts: 10,
            cache_bytes: 8 << 20,
            durability: Durability::None,
            page_size: 4096,
            seed: 7,
            data_dir: tmp.path().to_path_buf(),
            progress: false,
        };
        let engines: Vec<Box<dyn Engine>> = vec![Box::new(Broken { mode })];
        let err = run_suite(suite, &cfg, &engines).unwrap_err();
        assert!(matches!(err, BenchError::Verify(_)), "{suite}: {err}");
    }
}

#[test]
fn u64_only_engines_are_refused_byte_values_when_named() {
    let tmp = tempfile::tempdir().unwrap();
    let mut opts = tiny("default", Some("strata-dynamized"));
    opts.out_dir = Some(tmp.path().join("out"));
    assert!(matches!(run(&opts), Err(BenchError::Usage(_))));
}

#[test]
fn an_engine_without_key_order_runs_dbbench_without_its_ordered_phases_only() {
    let tmp = tempfile::tempdir().unwrap();
    let hash = driver::engines()
        .into_iter()
        .find(|e| !e.ordered())
        .expect("the hash family is an engine without key order");
    assert!(
        driver::default_engines()
            .iter()
            .all(|e| e.name() != hash.name()),
        "not run unless named"
    );
    let mut opts = tiny("dbbench", Some(hash.name()));
    opts.value_size = Some(8);
    opts.out_dir = Some(tmp.path().join("dbbench"));
    let out = run(&opts).unwrap();
    let workloads: std::collections::BTreeSet<&str> =
        out.results.iter().map(|r| r.workload.as_str()).collect();
    let want = [
        "deleterandom",
        "fillrandom",
        "fillseq",
        "readrandom",
        "readwhilewriting",
    ];
    assert_eq!(workloads, want.into_iter().collect());
    for suite in ["ycsb", "default", "irs"] {
        let mut opts = tiny(suite, Some(hash.name()));
        opts.value_size = Some(8);
        opts.out_dir = Some(tmp.path().join(suite));
        match run(&opts) {
            Err(BenchError::Usage(msg)) => assert!(msg.contains("key order"), "{suite}: {msg}"),
            other => panic!(
                "{suite}: expected a usage error, got {:?}",
                other.map(|_| ())
            ),
        }
    }
}

#[test]
fn smoke_runs_on_the_dynamized_engine() {
    let tmp = tempfile::tempdir().unwrap();
    let mut opts = RunOptions::new("smoke");
    opts.records = Some(2000);
    opts.out_dir = Some(tmp.path().join("out"));
    opts.progress = false;
    opts.engines = Some("strata-dynamized".into());
    let out = run(&opts).unwrap();
    let ops: Vec<(&str, &str)> = out
        .results
        .iter()
        .map(|r| (r.workload.as_str(), r.op.as_str()))
        .collect();
    assert_eq!(ops.len(), 6, "{ops:?}");
    assert!(ops.contains(&("range-sample", "sample")));
    assert!(out.results.iter().all(|r| r.engine == "strata-dynamized"));
}

#[test]
fn weighted_puts_need_a_weighted_index() {
    let tmp = tempfile::tempdir().unwrap();
    let opts = EngineOptions::default();
    let bt = StrataBTree.create(&tmp.path().join("bt"), &opts).unwrap();
    assert!(matches!(
        bt.put_weighted(1, &7u64.to_be_bytes(), 2.0),
        Err(BenchError::Usage(_))
    ));
    bt.close().unwrap();
    let weighted = driver::StrataDynamized::new(
        strata::options::DynOptions {
            weighted: true,
            ..Default::default()
        },
        Default::default(),
    );
    let db = weighted.create(&tmp.path().join("w"), &opts).unwrap();
    db.put_weighted(1, &7u64.to_be_bytes(), 2.0).unwrap();
    db.put_weighted(2, &8u64.to_be_bytes(), 0.0).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let s = db.sample(0, u64::MAX, 50, &mut rng).unwrap();
    assert!(
        s.iter()
            .all(|(k, v)| *k == 1 && v.as_slice() == 7u64.to_be_bytes())
    );
    db.close().unwrap();
}

/// Rows of a run as (engine, workload, op, threads).
fn rows_of(out: &RunOutput) -> Vec<(&str, &str, &str, u32)> {
    out.results
        .iter()
        .map(|r| {
            (
                r.engine.as_str(),
                r.workload.as_str(),
                r.op.as_str(),
                r.threads,
            )
        })
        .collect()
}

#[test]
fn server_workload_groups_are_chosen_by_name() {
    assert_eq!(server::groups_from(None).unwrap(), server::GROUPS.to_vec());
    assert_eq!(
        server::groups_from(Some("sample,peer")).unwrap(),
        vec!["sample", "peer"]
    );
    assert!(matches!(
        server::groups_from(Some("peer,gets")),
        Err(crate::BenchError::Usage(m)) if m.contains("STRATA_SERVER_WORKLOADS") && m.contains("\"gets\"")
    ));
}

#[test]
fn irs_workload_groups_are_chosen_by_name() {
    assert_eq!(irs::groups_from(None).unwrap(), irs::GROUPS.to_vec());
    assert_eq!(irs::groups_from(Some(" ")).unwrap(), irs::GROUPS.to_vec());
    assert_eq!(
        irs::groups_from(Some("disk-wide, memory,disk-wide")).unwrap(),
        vec!["disk-wide", "memory"]
    );
    assert!(matches!(
        irs::groups_from(Some("disk,wide")),
        Err(crate::BenchError::Usage(m)) if m.contains("\"wide\"")
    ));
}

#[test]
fn irs_runs_every_workload_at_a_tiny_size() {
    let tmp = tempfile::tempdir().unwrap();
    let mut opts = RunOptions::new("irs");
    opts.records = Some(20_000);
    opts.ops = Some(20);
    opts.out_dir = Some(tmp.path().join("out"));
    opts.progress = false;
    let out = run(&opts).unwrap();
    let rows = rows_of(&out);
    let (dy, bt, st) = (irs::DYNAMIZED, irs::BTREE, irs::STATIC_ISAM);
    let mut expected = vec![
        (bt, "irs-memory", "insert", 1),
        (bt, "irs-memory", "sample", 1),
        (dy, "irs-memory", "insert", 1),
        (dy, "irs-memory", "sample", 1),
        (st, "irs-memory", "sample", 1),
        (bt, "irs-disk", "insert", 1),
        (bt, "irs-disk", "sample", 1),
        (dy, "irs-disk", "insert", 1),
        (dy, "irs-disk", "sample", 1),
    ];
    for t in [1, 2, 4] {
        expected.push((bt, "insert-threads", "insert", t));
        expected.push((dy, "insert-threads", "insert", t));
    }
    expected.push((dy, "irs-memory-throttled", "insert", 1));
    expected.push((dy, "irs-memory-throttled", "sample", 1));
    let sweeps: Vec<String> = irs::SWEEP_BUFFER
        .iter()
        .map(|b| format!("sweep-buffer-{b}"))
        .chain(irs::SWEEP_SCALE.iter().map(|s| format!("sweep-scale-{s}")))
        .chain(irs::SWEEP_DELTA.iter().map(|d| format!("sweep-delete-{d}")))
        .collect();
    for w in &sweeps {
        expected.push((dy, w.as_str(), "insert", 1));
        expected.push((dy, w.as_str(), "sample", 1));
    }
    let wide: Vec<String> = irs::WIDE_SELECTIVITIES
        .iter()
        .map(|&s| irs::wide_workload(s))
        .collect();
    assert_eq!(wide, ["disk-wide-0.1%", "disk-wide-1%", "disk-wide-10%"]);
    expected.push((dy, irs::WIDE_LOAD, "insert", 1));
    for w in &wide {
        expected.push((dy, w.as_str(), "sample", 1));
        expected.push((irs::SERIAL, w.as_str(), "sample", 1));
    }
    expected.push((bt, "bulk-load", "bulk-load", 1));
    for w in &wide {
        expected.push((bt, w.as_str(), "sample", 1));
    }
    assert_eq!(rows, expected);
    assert!(sweeps.contains(&"sweep-buffer-4000".to_string()));
    assert!(sweeps.contains(&"sweep-delete-0.05".to_string()));
    let z = irs::sizes(&SuiteConfig {
        records: 20_000,
        ops: Some(20),
        threads: vec![1],
        target_rate: None,
        codec: ValueCodec::u64(),
        nexts: 10,
        cache_bytes: 64 << 20,
        durability: Durability::None,
        page_size: 4096,
        seed: 42,
        data_dir: tmp.path().to_path_buf(),
        progress: false,
    });
    for r in &out.results {
        assert!(r.ops > 0 && r.secs > 0.0, "{r:?}");
        let w = r.workload.as_str();
        let wide_row = w.starts_with("disk-wide") || w == "bulk-load";
        let n = match w {
            "irs-memory" | "irs-memory-throttled" => z.memory,
            "irs-disk" => z.disk,
            "insert-threads" => z.threads,
            _ if wide_row => z.wide,
            _ => z.sweep,
        };
        assert_eq!(r.records, n, "{}", r.workload);
        if r.op == "sample" {
            let q = match w {
                "irs-memory" => z.queries,
                "irs-disk" => z.disk_queries,
                _ if wide_row => z.wide_queries,
                _ => z.sweep_queries,
            };
            assert_eq!(r.ops, q, "{} {}", r.engine, r.workload);
            if wide_row {
                // On disk with memory 1/10 of the data: every engine reads pages to sample.
                assert!(r.bytes_read.unwrap() > 0, "{r:?}");
                assert!(r.cache_bytes >= irs::disk_budget(z.wide), "{r:?}");
            }
        } else if r.op == "bulk-load" {
            assert_eq!(r.ops, 1, "{r:?}");
        } else {
            // Inserts after the 10% warm-up, plus about 5% (25% in the δ sweep) deletes.
            let inserts = n - n / 10;
            assert!(r.ops > inserts && r.ops < inserts * 3 / 2, "{r:?}");
        }
    }
    let disk = out
        .results
        .iter()
        .find(|r| r.engine == dy && r.workload == "irs-disk")
        .unwrap();
    assert_eq!(disk.cache_bytes, irs::disk_budget(z.disk));
    for goal in [
        "sampling latency, strata-dynamized / strata-btree",
        "insert throughput (5% deletes), strata-dynamized / strata-btree",
        "on disk: insert throughput",
        "sampling latency, strata-dynamized / static-isam",
        "disk-wide-0.1%: sampling latency p50, strata-dynamized / strata-btree",
        "disk-wide-10%: sampling latency p50, strata-dynamized / strata-btree",
    ] {
        assert!(out.analysis.contains(goal), "{goal}: {}", out.analysis);
    }
    assert!(!out.analysis.contains("not measured"), "{}", out.analysis);
    let report = std::fs::read_to_string(&out.report_path).unwrap();
    for fig in [
        "irs-insert.png",
        "irs-sample.png",
        "irs-threads.png",
        "irs-tail.png",
        "sweep-buffer.png",
        "sweep-scale.png",
        "sweep-delete.png",
    ] {
        assert!(report.contains(fig), "{fig}");
        assert!(out.out_dir.join("figures").join(fig).exists(), "{fig}");
    }
    assert!(report.contains("## Analysis") && report.contains("Sweep of scale factor s"));
}

#[test]
fn wss_runs_at_a_tiny_size() {
    let tmp = tempfile::tempdir().unwrap();
    let mut opts = RunOptions::new("wss");
    opts.records = Some(20_000);
    opts.ops = Some(20);
    opts.out_dir = Some(tmp.path().join("out"));
    opts.progress = false;
    let out = run(&opts).unwrap();
    assert_eq!(
        rows_of(&out),
        [
            ("strata-dynamized", "wss", "insert", 1),
            ("strata-dynamized", "wss", "sample", 1),
            ("strata-dynamized", "wirs", "sample", 1),
            ("weighted-ab-tree", "wss", "insert", 1),
            ("weighted-ab-tree", "wss", "sample", 1),
            ("weighted-ab-tree", "wirs", "sample", 1),
            ("static-alias", "wss", "sample", 1),
            ("static-isam", "wirs", "sample", 1),
        ]
    );
    assert!(out.results.iter().all(|r| r.ops > 0 && r.records == 20_000));
    for row in [
        "WSS sampling latency, strata-dynamized / weighted-ab-tree",
        "WIRS sampling latency, strata-dynamized / weighted-ab-tree",
        "share), strata-dynamized / weighted-ab-tree | ",
    ] {
        assert!(out.analysis.contains(row), "{row}: {}", out.analysis);
    }
    assert!(!out.analysis.contains("not measured"), "{}", out.analysis);
    assert!(
        out.analysis
            .contains("WSS sampling latency, strata-dynamized / static-alias"),
        "{}",
        out.analysis
    );
    let report = std::fs::read_to_string(&out.report_path).unwrap();
    assert!(report.contains("wss-sample.png") && report.contains("weighted AB-tree"));
    // Without the dynamized engine there is nothing to measure.
    let mut opts = RunOptions::new("wss");
    opts.records = Some(100);
    opts.engines = Some("strata-btree".into());
    opts.out_dir = Some(tmp.path().join("none"));
    assert!(matches!(run(&opts), Err(BenchError::Usage(_))));
}

/// The server suite end to end at its smallest (1-second phases): every phase posts rows, the skew phases
/// carry imbalance and normalized throughput, and the analysis states the goals.
#[test]
fn the_server_suite_runs_and_reports_its_goals() {
    let tmp = tempfile::tempdir().unwrap();
    let mut opts = RunOptions::new("server");
    opts.records = Some(2000);
    opts.ops = Some(1);
    opts.out_dir = Some(tmp.path().join("out"));
    opts.progress = false;
    let out = run(&opts).unwrap();
    let has = |engine: &str, workload: &str| {
        out.results
            .iter()
            .any(|r| r.engine == engine && r.workload == workload && r.ops > 0)
    };
    for w in ["set-p16", "get-p1", "ycsb-a", "ycsb-f"] {
        assert!(has(server::STRATA, w), "{w}");
    }
    let capped = format!("-cap{}k", server::PARTITION_CAPACITY / 1000);
    for w in [
        format!("zipf-w50-range-4p{capped}"),
        format!("zipfs-w50-range-4p{capped}"),
    ] {
        assert!(
            has(server::STRATA, &w) && has(server::STRATA_NOCACHE, &w),
            "{w}"
        );
        assert!(out.analysis.contains(&w), "{w}");
    }
    for n in [1, 2, 4, 8] {
        let w = format!("zipf-w50-range-{n}p");
        assert!(
            has(server::STRATA, &w) && has(server::STRATA_NOCACHE, &w),
            "{w}"
        );
    }
    let skew = out
        .results
        .iter()
        .find(|r| r.workload == "zipf-w50-range-4p" && r.engine == server::STRATA_NOCACHE)
        .unwrap();
    assert!(skew.imbalance.is_some_and(|i| i >= 1.0));
    assert!(skew.normalized.is_some_and(|n| n >= 1.0));
    assert!(has(server::STRATA, "sample-all") && has(server::STRATA, "sample-one"));
    assert!(out.analysis.contains("### Goals"), "{}", out.analysis);
    // With redis-benchmark installed (not in CI), its rows come too, with figures from its report.
    if crate::redis_benchmark::available() {
        for w in ["rb-set-p16", "rb-get-p16", "rb-set-p1", "rb-get-p1"] {
            let r = out
                .results
                .iter()
                .find(|r| r.engine == server::STRATA && r.workload == w)
                .unwrap_or_else(|| panic!("{w}"));
            assert!(r.ops >= crate::redis_benchmark::CALIBRATION_REQUESTS, "{w}");
            assert!(
                r.p50_us > 0.0 && r.p50_us <= r.p999_us && r.p999_us <= r.max_us,
                "{w}"
            );
            assert!(out.analysis.contains(w), "{w}");
        }
    }
}

/// The `hash` suite at a tiny size with `--threads 1,2`: every experiment's rows exist (main phases, thread
/// sweep, zipf 0.8, YCSB, recovery), and the report carries every section and goal, measured (no `n/a`).
/// Every answer of the run is checked inside it (a wrong one fails `run`; see `hash::tests`).
#[test]
fn the_hash_suite_runs_every_experiment_at_a_tiny_size() {
    use super::hash::{
        CCEH, CCEH_MODEL, DASH, DASH_MODEL, ELIMDA, ELIMDA_MODEL, HASHBROWN, PHASES,
    };
    let tmp = tempfile::tempdir().unwrap();
    let mut opts = RunOptions::new(hash::NAME);
    opts.records = Some(20_000);
    opts.threads = vec![1, 2];
    opts.out_dir = Some(tmp.path().join("out"));
    opts.progress = false;
    let out = run(&opts).unwrap();
    let rows = &out.results;
    let at = |engine: &str, workload: &str, threads: u32| {
        rows.iter()
            .find(|r| r.engine == engine && r.workload == workload && r.threads == threads)
            .unwrap_or_else(|| panic!("no row for {engine} {workload} at {threads} threads"))
    };
    for engine in [
        ELIMDA,
        DASH,
        CCEH,
        HASHBROWN,
        ELIMDA_MODEL,
        DASH_MODEL,
        CCEH_MODEL,
    ] {
        let sweep: &[u32] = if engine == ELIMDA || engine == DASH {
            &[1, 2]
        } else {
            &[1]
        };
        for &t in sweep {
            for (workload, op) in PHASES {
                let r = at(engine, workload, t);
                assert_eq!(r.op, op);
                assert!(r.ops > 0 && r.ops_per_sec > 0.0, "{engine} {workload}");
                assert_eq!(r.records, 20_000);
                assert_eq!(
                    r.bytes_read.is_some() && r.bytes_written.is_some(),
                    engine.ends_with("-model")
                );
            }
        }
    }
    // Inserts write media; the 2-thread rows did as many operations as the 1-thread ones.
    assert!(at(ELIMDA_MODEL, "insert", 1).bytes_written.unwrap() > 0);
    assert_eq!(at(ELIMDA, "insert", 2).ops, at(ELIMDA, "insert", 1).ops);
    for engine in [ELIMDA, DASH, CCEH] {
        for (workload, op) in hash::zipf_workloads() {
            let r = at(engine, workload, 1);
            assert_eq!(r.op, op);
            assert!(r.ops > 0, "{engine} {workload}");
        }
        let sweep: &[u32] = if engine == CCEH { &[1] } else { &[1, 2] };
        for &t in sweep {
            for workload in hash::ycsb_workloads() {
                let r = at(engine, workload, t);
                assert_eq!(r.op, "mixed");
                assert_eq!(r.ops, 5_000, "{engine} {workload} at {t} threads");
            }
        }
    }
    // Recovery: elimda at each size and thread count, dash's three lazy-recovery rows per size.
    for n in [5_000u64, 10_000, 20_000] {
        for t in [1, 2] {
            let r = rows
                .iter()
                .find(|r| {
                    r.engine == ELIMDA
                        && r.workload == "recovery"
                        && r.threads == t
                        && r.records == n
                })
                .unwrap_or_else(|| panic!("no elimda recovery row for {n} items at {t} threads"));
            assert_eq!(r.ops, n);
            assert!(r.secs > 0.0);
        }
        for w in ["recovery-open", "recovery-first-ops", "recovery-repair"] {
            assert!(
                rows.iter()
                    .any(|r| r.engine == DASH && r.workload == w && r.records == n),
                "no dash {w} row for {n} items"
            );
        }
    }
    // Exp 11: every log size at 1 and 2 threads; Exp 12: insert and pos-search per D-bucket size, one
    // thread; both with their flush counts. Exp 13: the main phases of the three limited engines, with
    // media bytes.
    for lines in hash::LOG_LINES {
        for t in [1, 2] {
            let r = at(ELIMDA, &hash::log_workload(lines), t);
            assert_eq!(
                (r.op.as_str(), r.ops),
                ("insert", 10_000),
                "log {lines} at {t}"
            );
            assert!(r.page_writes.is_some_and(|f| f > 0), "log {lines} at {t}");
        }
    }
    let (small, whole) = (
        at(ELIMDA, &hash::dbucket_workload(32, "insert"), 1),
        at(ELIMDA, &hash::dbucket_workload(256, "insert"), 1),
    );
    // A 2-entry D-bucket is written back about 7 times as often as a whole chunk (15 entries).
    assert!(
        small.page_writes.unwrap() > 5 * whole.page_writes.unwrap(),
        "{:?} vs {:?}",
        small.page_writes,
        whole.page_writes
    );
    for (_, bytes) in hash::DBUCKET_SLOTS {
        let r = at(ELIMDA, &hash::dbucket_workload(bytes, "pos-search"), 1);
        assert_eq!((r.op.as_str(), r.ops), ("read", 20_000));
    }
    // Exp 12's P-bucket half: insert and pos-search per P-bucket size this build holds.
    for bytes in hash::PBUCKET_BYTES {
        let ins = at(ELIMDA, &hash::pbucket_workload(bytes, "insert"), 1);
        let pos = at(ELIMDA, &hash::pbucket_workload(bytes, "pos-search"), 1);
        assert_eq!((ins.op.as_str(), ins.ops), ("insert", 10_000));
        assert_eq!((pos.op.as_str(), pos.ops), ("read", 20_000));
        assert!(ins.page_writes.is_some_and(|f| f > 0), "{bytes}");
    }
    for engine in hash::LIMITED_ENGINES {
        for (workload, op) in PHASES {
            let r = at(engine, workload, 1);
            assert_eq!(r.op, op);
            assert!(r.ops > 0 && r.bytes_read.is_some(), "{engine} {workload}");
        }
        assert!(
            at(engine, "insert", 1).bytes_written.unwrap() > 0,
            "{engine}"
        );
    }
    assert_eq!(
        rows.len(),
        16 + 5 * 4 + 3 * 4 + 5 * 4 + 3 * (2 + 3) + 5 * 2 + 4 * 2
            // Exp 12's P-bucket sizes (1 to 16 KiB), insert and pos-search.
            + hash::PBUCKET_BYTES.len() * 2
            + 3 * 4
            + 4 * 4 * 2
            // Each round's insert rows of the main contenders (elimda and dash at 1 and 2 threads, cceh,
            // hashbrown), 3 rounds.
            + 6 * 3
    );
    // Exp 8: insert and pos-search per value size for both engines, and media bytes on the model; a
    // 256 B value's insert writes more media bytes than a 16 B one's.
    for bytes in hash::VALUE_SIZES {
        for engine in [ELIMDA, DASH, "elimda-adr-model", "dash-adr-model"] {
            let ins = at(engine, &hash::value_workload(bytes, "insert"), 1);
            let pos = at(engine, &hash::value_workload(bytes, "pos-search"), 1);
            assert_eq!((ins.op.as_str(), ins.ops), ("insert", 10_000));
            assert_eq!((pos.op.as_str(), pos.ops), ("read", 10_000));
        }
    }
    let media_w = |bytes| {
        at(
            "elimda-adr-model",
            &hash::value_workload(bytes, "insert"),
            1,
        )
        .bytes_written
        .unwrap()
    };
    assert!(
        media_w(256) > 2 * media_w(16),
        "{} vs {}",
        media_w(256),
        media_w(16)
    );
    for needle in [
        "### Thread sweep (Exp 2",
        "### Zipf 0.8 (Exp 1",
        "### YCSB (Exp 3",
        "### Recovery time vs items and threads (Exp 10)",
        "| elimda inserts, 2 threads ≥ 1.8× 1 thread | ",
        "| elimda recovery linear in items",
        "| elimda recovery of N items faster with 2 threads than 1",
        "| insert throughput ≥ 2.5× dash | ",
        "| positive search ≥ 0.5× hashbrown | ",
        "### End state",
        "### Collecting-log size (Exp 11",
        "### D- and P-bucket sizes (Exp 12",
        "| 1 KiB | 60 | ",
        "| 16 KiB | 960 | ",
        "### Value sizes (Exp 8",
        "### Limited PM bandwidth (Exp 13",
        "| **elimda ÷ dash, limited** | ",
    ] {
        assert!(out.analysis.contains(needle), "{needle}: {}", out.analysis);
    }
    let goals = &out.analysis[out.analysis.find("### Goals").unwrap()..];
    // The goal rows, then the paragraph on the inserts' CPU time at 1 and 2 threads (blank line, text,
    // blank line) and the one on each round's huge-page coverage (text, blank line).
    assert_eq!(goals.lines().count(), 4 + 12 + 5, "{goals}");
    assert!(
        goals.contains("Like for like (huge pages): ") && goals.contains(" MiB huge"),
        "{goals}"
    );
    // A measured figure (its size depends on the machine's load, so only its presence is checked).
    let cpu_line = "CPU time per insert summed over the threads (schedstat): ";
    assert!(
        goals
            .split(cpu_line)
            .nth(1)
            .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit())),
        "{goals}"
    );
    assert!(!goals.contains("n/a"), "{goals}");
    let report = std::fs::read_to_string(&out.report_path).unwrap();
    assert!(report.contains("## Analysis") && report.contains("### YCSB"));
}
