//! End-to-end tests of the `strata` binary: every command run as a separate process on a database in a
//! temporary directory, checking stdout, stderr and exit status (including damage detection, user errors that
//! must not panic, a closed stdout pipe, and the smoke benchmark's JSON output).

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the test failing

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_strata");

fn strata(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .output()
        .expect("the strata binary runs")
}

/// A database directory in a fresh temporary directory.
struct TestDb {
    _tmp: tempfile::TempDir,
    path: PathBuf,
}

impl TestDb {
    fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("db");
        TestDb { _tmp: tmp, path }
    }

    fn created(args: &[&str]) -> Self {
        let db = TestDb::new();
        let mut all = vec!["create"];
        all.extend_from_slice(args);
        db.ok(&all);
        db
    }

    fn run(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new(BIN);
        cmd.arg("--db").arg(&self.path).args(args);
        cmd.output().expect("the strata binary runs")
    }

    /// Runs a command that must succeed; returns its stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "strata {args:?} failed with {:?}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs a command that must fail; returns (exit code, stderr).
    fn fails(&self, args: &[&str]) -> (i32, String) {
        let out = self.run(args);
        assert!(!out.status.success(), "strata {args:?} succeeded");
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_no_panic(&stderr);
        (out.status.code().expect("exited, not killed"), stderr)
    }
}

fn assert_no_panic(stderr: &str) {
    assert!(!stderr.contains("panicked"), "panic: {stderr}");
    assert!(!stderr.contains("RUST_BACKTRACE"), "panic: {stderr}");
}

fn lines(s: &str) -> Vec<&str> {
    s.lines().collect()
}

#[test]
fn put_get_del_scan() {
    let db = TestDb::created(&[]);
    for k in [5u64, 1, 9, 3, 7] {
        db.ok(&["put", &k.to_string(), &(k * 10).to_string()]);
    }
    assert_eq!(db.ok(&["get", "9"]), "90\n");
    db.ok(&["put", "9", "91"]);
    assert_eq!(db.ok(&["get", "9"]), "91\n");
    assert_eq!(
        lines(&db.ok(&["scan"])),
        ["1\t10", "3\t30", "5\t50", "7\t70", "9\t91"]
    );
    assert_eq!(
        lines(&db.ok(&["scan", "--reverse"])),
        ["9\t91", "7\t70", "5\t50", "3\t30", "1\t10"]
    );
    assert_eq!(
        lines(&db.ok(&["scan", "--from", "3", "--to", "7"])),
        ["3\t30", "5\t50", "7\t70"]
    );
    assert_eq!(
        lines(&db.ok(&["scan", "--from", "2", "--limit", "2"])),
        ["3\t30", "5\t50"]
    );
    assert_eq!(
        lines(&db.ok(&["scan", "--to", "6", "--reverse", "--limit", "2"])),
        ["5\t50", "3\t30"]
    );
    assert_eq!(db.ok(&["scan", "--from", "8", "--to", "2"]), "");
    assert_eq!(db.ok(&["scan", "--limit", "0"]), "");
    db.ok(&["del", "5"]);
    db.ok(&["del", "6"]);
    assert_eq!(
        lines(&db.ok(&["scan"])),
        ["1\t10", "3\t30", "7\t70", "9\t91"]
    );
    let out = db.run(&["get", "5"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert_eq!(db.ok(&["count", "--from", "0", "--to", "100"]), "4\n");
}

#[test]
fn bytes_keys_text_and_hex() {
    let db = TestDb::created(&["--key", "bytes", "--value", "bytes"]);
    db.ok(&["put", "apple", "red fruit"]);
    db.ok(&["put", "0x00ff", "0x01"]);
    db.ok(&["put", "-dash", "x"]);
    assert_eq!(db.ok(&["get", "apple"]), "red fruit\n");
    assert_eq!(db.ok(&["get", "0x6170706c65"]), "red fruit\n");
    assert_eq!(
        lines(&db.ok(&["scan"])),
        ["0x00ff\t0x01", "-dash\tx", "apple\tred fruit"]
    );
    let (code, err) = db.fails(&["put", "0xabc", "v"]);
    assert_eq!(
        code, 64,
        "a key that is not of the database's type is a command-line mistake"
    );
    assert!(err.contains("hex"), "{err}");
}

#[test]
fn count_and_sample_are_seeded_and_in_range() {
    let db = TestDb::created(&[]);
    db.ok(&["load", "--records", "5000", "--batch", "500"]);
    assert_eq!(
        db.ok(&["count", "--from", "1000", "--to", "1999"]),
        "1000\n"
    );
    assert_eq!(db.ok(&["count", "--from", "4990", "--to", "99999"]), "10\n");
    let args = [
        "sample", "--from", "1000", "--to", "1099", "-k", "200", "--seed", "7",
    ];
    let a = db.ok(&args);
    let b = db.ok(&args);
    assert_eq!(a, b, "the same seed gives the same samples");
    assert_eq!(a.lines().count(), 200);
    let mut distinct = std::collections::HashSet::new();
    for line in a.lines() {
        let (k, v) = line.split_once('\t').unwrap();
        let k: u64 = k.parse().unwrap();
        assert!((1000..=1099).contains(&k), "sample {k} outside the range");
        assert_eq!(v, k.to_string());
        distinct.insert(k);
    }
    assert!(
        distinct.len() > 50,
        "200 samples of 100 keys hit only {} keys",
        distinct.len()
    );
    let other = db.ok(&[
        "sample", "--from", "1000", "--to", "1099", "-k", "200", "--seed", "8",
    ]);
    assert_ne!(a, other);
    assert_eq!(
        db.ok(&["sample", "--from", "6000", "--to", "7000", "-k", "5"]),
        ""
    );
}

#[test]
fn load_sequential_random_and_bulk() {
    for args in [
        vec!["--order", "sequential"],
        vec!["--order", "random", "--seed", "3"],
        vec!["--order", "random", "--batch", "64", "--durability", "none"],
        vec!["--bulk"],
    ] {
        let db = TestDb::created(&[]);
        let mut all = vec!["load", "--records", "3000"];
        all.extend_from_slice(&args);
        let out = db.ok(&all);
        assert!(out.starts_with("loaded 3000 records in "), "{out}");
        assert!(out.trim_end().ends_with("records/s)"), "{out}");
        assert_eq!(
            db.ok(&["count", "--from", "0", "--to", "2999"]),
            "3000\n",
            "{args:?}"
        );
        assert_eq!(db.ok(&["get", "2999"]), "2999\n");
        assert!(db.ok(&["check"]).starts_with("ok: 3000 records"));
    }
    let db = TestDb::created(&["--key", "bytes", "--value", "bytes"]);
    db.ok(&["load", "--records", "1500", "--bulk"]);
    assert_eq!(db.ok(&["get", "1499"]), "1499\n");
    assert_eq!(
        lines(&db.ok(&["scan", "--limit", "3"])),
        ["0\t0", "1\t1", "10\t10"]
    );
    let (_, err) = db.fails(&["load", "--records", "10", "--bulk"]);
    assert!(err.contains("empty"), "{err}");
}

#[test]
fn check_detects_a_flipped_byte() {
    let db = TestDb::created(&[]);
    db.ok(&["load", "--records", "20000"]);
    let out = db.ok(&["check"]);
    assert!(out.starts_with("ok: 20000 records"), "{out}");
    let pages = db.path.join("data.pages");
    let mut bytes = std::fs::read(&pages).unwrap();
    let page_size = 4096;
    let page_count = bytes.len() / page_size;
    assert!(page_count > 4, "only {page_count} pages");
    let target = (2 + (page_count - 2) / 2) * page_size + page_size / 2;
    bytes[target] ^= 0x5a;
    std::fs::write(&pages, &bytes).unwrap();
    let (code, err) = db.fails(&["check"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.starts_with("strata: "), "{err}");
    assert!(err.contains("data.pages"), "{err}");
    assert!(err.contains("page"), "{err}");
}

#[test]
fn stats_is_json_with_records() {
    let db = TestDb::created(&[]);
    db.ok(&["load", "--records", "1000"]);
    let out = db.ok(&["stats"]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("stats prints JSON");
    assert_eq!(v["records"], 1000);
    assert_eq!(v["index"], "btree");
}

#[test]
fn user_errors_are_messages_not_panics() {
    let db = TestDb::created(&[]);
    db.ok(&["put", "1", "2"]);
    let (code, err) = db.fails(&["put", "abc", "2"]);
    assert_eq!(code, 64);
    assert!(err.contains("expected a u64"), "{err}");
    let (_, err) = db.fails(&["put", "1", "-5"]);
    assert!(err.contains("expected a u64"), "{err}");
    let (_, err) = db.fails(&["count", "--from", "x", "--to", "9"]);
    assert!(err.contains("expected a u64"), "{err}");
    let (_, err) = db.fails(&["create"]);
    assert!(err.contains("already holds a database"), "{err}");
    let (code, _) = db.fails(&["frobnicate"]);
    assert_eq!(code, 64, "command-line syntax errors have their own status");
    let out = strata(&["get", "1"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--db"));
    let missing = TestDb::new();
    let (_, err) = missing.fails(&["get", "1"]);
    assert!(err.contains("does not exist"), "{err}");
    assert_eq!(db.ok(&["get", "1"]), "2\n");
}

#[test]
fn oversized_key_is_refused_and_the_db_still_works() {
    let db = TestDb::created(&["--key", "bytes", "--value", "bytes", "--page-size", "4096"]);
    db.ok(&["put", "a", "1"]);
    let big = "k".repeat(5000);
    let (code, err) = db.fails(&["put", &big, "v"]);
    assert_eq!(code, 1);
    assert!(err.contains("5000 bytes"), "{err}");
    db.ok(&["put", "b", "2"]);
    assert_eq!(lines(&db.ok(&["scan"])), ["a\t1", "b\t2"]);
    assert!(db.ok(&["check"]).starts_with("ok: 2 records"));
}

#[test]
fn garbage_directory_is_a_clear_error() {
    let db = TestDb::new();
    std::fs::create_dir_all(&db.path).unwrap();
    let mut junk = Vec::new();
    let mut x: u32 = 12345;
    for _ in 0..20000 {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
        junk.push((x >> 16) as u8);
    }
    for name in ["MANIFEST", "data.pages", "wal-0000000000000001.log"] {
        std::fs::write(db.path.join(name), &junk).unwrap();
    }
    for args in [&["get", "1"][..], &["check"], &["stats"], &["scan"]] {
        let (_, err) = db.fails(args);
        assert!(err.starts_with("strata: "), "{err}");
        assert!(err.contains("MANIFEST"), "{err}");
    }
    // A directory with no manifest at all.
    let empty = TestDb::new();
    std::fs::create_dir_all(&empty.path).unwrap();
    let (_, err) = empty.fails(&["get", "1"]);
    assert!(err.contains("not a Strata database"), "{err}");
}

#[test]
fn closed_stdout_pipe_is_quiet() {
    let db = TestDb::created(&[]);
    db.ok(&["load", "--records", "50000", "--bulk"]);
    let mut child = Command::new(BIN)
        .arg("--db")
        .arg(&db.path)
        .arg("scan")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert_eq!(first, "0\t0\n");
    // The reader is dropped here: the pipe closes with most of the output unread.
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_no_panic(&stderr);
    assert!(out.status.success(), "{:?} {stderr}", out.status);
}

const REQUIRED: [&str; 19] = [
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

fn check_rows(text: &str) -> Vec<serde_json::Value> {
    let rows: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is a JSON object"))
        .collect();
    for row in &rows {
        for field in REQUIRED {
            assert!(row.get(field).is_some(), "{field} missing in {row}");
        }
        assert_eq!(row["suite"], "smoke");
        assert_eq!(row["engine"], "strata-btree");
        assert_eq!(row["records"], 2000);
        assert!(row["ops"].as_u64().unwrap() > 0);
        assert!(row["io_reads"].is_u64() && row["disk_bytes"].as_u64().unwrap() > 0);
    }
    rows
}

#[test]
fn bench_smoke_writes_json_lines_and_report() {
    let tmp = tempfile::tempdir().unwrap();
    let json = tmp.path().join("out.jsonl");
    let out_dir = tmp.path().join("results");
    let out = strata(&[
        "bench",
        "--suite",
        "smoke",
        "--engines",
        "strata-btree",
        "--records",
        "2000",
        "--json",
        json.to_str().unwrap(),
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("readrandom"), "{stdout}");
    assert!(stdout.contains("report.md"), "{stdout}");
    let rows = check_rows(&std::fs::read_to_string(&json).unwrap());
    let pairs: Vec<(String, String)> = rows
        .iter()
        .map(|r| {
            (
                r["workload"].as_str().unwrap().into(),
                r["op"].as_str().unwrap().into(),
            )
        })
        .collect();
    for (w, o) in [
        ("fillseq", "insert"),
        ("fillrandom", "insert"),
        ("readrandom", "read"),
        ("scan", "scan"),
        ("range-count", "count"),
        ("range-sample", "sample"),
    ] {
        assert!(
            pairs.contains(&(w.into(), o.into())),
            "no {w}/{o} row in {pairs:?}"
        );
    }
    let copy = std::fs::read_to_string(out_dir.join("results.jsonl")).unwrap();
    check_rows(&copy);
    let report = std::fs::read_to_string(out_dir.join("report.md")).unwrap();
    assert!(
        report.contains("| strata-btree | readrandom | read |"),
        "{report}"
    );
    assert!(report.contains("cores"), "{report}");
    let mut leftovers: Vec<_> = std::fs::read_dir(&out_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    leftovers.sort();
    assert_eq!(
        leftovers,
        ["figures", "report.md", "results.jsonl"],
        "data directory not removed"
    );
    assert!(out_dir.join("figures/throughput.png").exists());
    assert!(report.contains("![Throughput per workload](figures/throughput.png)"));
}

#[test]
fn bench_lists_suites_and_rejects_unknown_ones() {
    let out = strata(&["bench", "--list"]);
    assert!(out.status.success());
    let listed = String::from_utf8(out.stdout).unwrap();
    let suites: Vec<&str> = listed
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert!(listed.starts_with("suites:\n"), "{listed}");
    assert_eq!(
        suites,
        [
            "default",
            "ycsb",
            "dbbench",
            "smoke",
            "btree-cost",
            "irs",
            "wss",
            "server",
            "betree-io",
            "betree-wall",
            "hash",
            "learned"
        ],
        "{listed}"
    );
    assert!(
        listed.contains("engines in this build:\n  strata-btree"),
        "{listed}"
    );
    let tmp = tempfile::tempdir().unwrap();
    let out = strata(&[
        "bench",
        "--suite",
        "nope",
        "--out",
        tmp.path().to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown suite"), "{err}");
    assert_no_panic(&err);
}

/// Parses `KEY<TAB>VALUE` lines of u64s.
fn u64_records(s: &str) -> Vec<(u64, u64)> {
    s.lines()
        .map(|l| {
            let (k, v) = l.split_once('\t').expect("KEY<TAB>VALUE");
            (k.parse().unwrap(), v.parse().unwrap())
        })
        .collect()
}

/// The shard files of a dynamized database directory.
fn shard_files(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_str().unwrap();
            name.starts_with("shard-") && name.ends_with(".dat")
        })
        .collect();
    files.sort();
    files
}

#[test]
fn dynamized_database_serves_every_command_across_processes() {
    let db = TestDb::new();
    let out = db.ok(&[
        "create",
        "--index",
        "dynamized",
        "--buffer",
        "64",
        "--scale-factor",
        "2",
    ]);
    assert!(out.starts_with("created a dynamized database"), "{out}");
    assert!(
        out.contains("tiering layout, scale factor 2, buffer 64"),
        "{out}"
    );
    let n = 4000u64;
    let out = db.ok(&[
        "load",
        "--records",
        &n.to_string(),
        "--order",
        "random",
        "--batch",
        "50",
    ]);
    assert!(out.starts_with("loaded 4000 records"), "{out}");
    assert!(db.path.join("DYNSTATE").exists());
    assert!(!shard_files(&db.path).is_empty(), "no shard files");
    assert_eq!(db.ok(&["count", "--from", "0", "--to", "3999"]), "4000\n");
    assert_eq!(db.ok(&["get", "1234"]), "1234\n");
    // Deletes (more than a buffer's worth, so some reach the shards) and overwrites, each its own process.
    let deleted: Vec<u64> = (0..70).map(|i| 1000 + i * 7).collect();
    for k in &deleted {
        db.ok(&["del", &k.to_string()]);
    }
    db.ok(&["del", "999999"]); // absent: no effect
    db.ok(&["put", "5", "555"]);
    db.ok(&["put", "4000", "4"]);
    let out = db.run(&["get", "1000"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert_eq!(db.ok(&["get", "5"]), "555\n");
    assert_eq!(db.ok(&["get", "4000"]), "4\n");
    // Exact counts.
    let live = 4001 - deleted.len();
    assert_eq!(
        db.ok(&["count", "--from", "0", "--to", "99999"]),
        format!("{live}\n")
    );
    let in_range = deleted.iter().filter(|&&k| k <= 1300).count() as u64;
    assert_eq!(
        db.ok(&["count", "--from", "1000", "--to", "1300"]),
        format!("{}\n", 301 - in_range)
    );
    assert_eq!(db.ok(&["count", "--from", "4001", "--to", "5000"]), "0\n");
    // Scans in both directions, with bounds and limits.
    assert_eq!(
        u64_records(&db.ok(&["scan", "--limit", "3"])),
        [(0, 0), (1, 1), (2, 2)]
    );
    assert_eq!(
        u64_records(&db.ok(&["scan", "--reverse", "--limit", "3"])),
        [(4000, 4), (3999, 3999), (3998, 3998)]
    );
    assert_eq!(
        u64_records(&db.ok(&["scan", "--from", "998", "--to", "1008"])),
        [
            (998, 998),
            (999, 999),
            (1001, 1001),
            (1002, 1002),
            (1003, 1003),
            (1004, 1004),
            (1005, 1005),
            (1006, 1006),
            (1008, 1008)
        ]
    );
    assert_eq!(
        u64_records(&db.ok(&["scan", "--to", "1008", "--reverse", "--limit", "2"])),
        [(1008, 1008), (1006, 1006)]
    );
    let all = u64_records(&db.ok(&["scan"]));
    assert_eq!(all.len(), live);
    assert!(all.windows(2).all(|w| w[0].0 < w[1].0), "scan out of order");
    let back = u64_records(&db.ok(&["scan", "--reverse"]));
    assert!(back.iter().rev().eq(all.iter()), "reverse scan differs");
    // Samples: in range, never a deleted key, seeded.
    let args = [
        "sample", "--from", "1000", "--to", "1699", "-k", "2000", "--seed", "11",
    ];
    let a = db.ok(&args);
    assert_eq!(a, db.ok(&args), "the same seed gives the same samples");
    let samples = u64_records(&a);
    assert_eq!(samples.len(), 2000);
    let mut distinct = std::collections::HashSet::new();
    for &(k, v) in &samples {
        assert!((1000..=1699).contains(&k), "sample {k} outside the range");
        assert!(!deleted.contains(&k), "deleted key {k} sampled");
        assert_eq!(v, k);
        distinct.insert(k);
    }
    assert!(
        distinct.len() > 500,
        "only {} distinct keys",
        distinct.len()
    );
    assert_eq!(
        db.ok(&["sample", "--from", "5000", "--to", "6000", "-k", "5"]),
        ""
    );
    // Check and stats.
    let out = db.ok(&["check"]);
    assert!(out.starts_with(&format!("ok: {live} records, ")), "{out}");
    assert!(out.contains("WAL records"), "{out}");
    let v: serde_json::Value = serde_json::from_str(&db.ok(&["stats"])).expect("stats prints JSON");
    assert_eq!(v["index"], "dynamized");
    assert_eq!(v["records"], live);
    let d = &v["dynamized"];
    let levels = d["levels"].as_array().expect("levels");
    assert!(levels.len() >= 2, "{d}");
    let shards: usize = levels.iter().map(|l| l.as_array().unwrap().len()).sum();
    assert_eq!(d["shards"].as_u64(), Some(shards as u64), "{d}");
    let entries: u64 = levels
        .iter()
        .flat_map(|l| l.as_array().unwrap())
        .map(|e| e.as_u64().unwrap())
        .sum();
    assert!(
        entries + d["buffered"].as_u64().unwrap() >= live as u64,
        "{d}"
    );
    for field in ["tombstones", "tagged", "memory_bytes", "buffered"] {
        assert!(d[field].is_u64(), "{field} missing in {d}");
    }
    assert!(d["memory_bytes"].as_u64().unwrap() > 0);
    let o = &v["index_options"];
    assert_eq!(o["layout"], "tiering");
    assert_eq!(o["scale_factor"], 2);
    assert_eq!(o["buffer_capacity"], 64);
    assert_eq!(o["delete_policy"], "tombstone");
    assert_eq!(o["weighted"], false);
    // A B+-tree's statistics have no dynamized part.
    let bt = TestDb::created(&[]);
    let v: serde_json::Value = serde_json::from_str(&bt.ok(&["stats"])).unwrap();
    assert!(v.get("dynamized").is_none(), "{v}");
    assert_eq!(v["index_options"], serde_json::json!({}));
    assert_eq!(v["capabilities"]["sample"], true);
    assert_eq!(v["capabilities"]["weighted"], false);
}

#[test]
fn dynamized_layouts_and_delete_policies() {
    for (layout, delete) in [
        ("leveling", "tagging"),
        ("bsm", "tombstone"),
        ("tiering", "tagging"),
    ] {
        let db = TestDb::created(&[
            "--index",
            "dynamized",
            "--layout",
            layout,
            "--delete",
            delete,
            "--buffer",
            "16",
            "--scale-factor",
            "3",
            "--max-delete-proportion",
            "0.2",
            "--bloom-fpr",
            "0.05",
            "--memory-budget",
            "64MiB",
        ]);
        db.ok(&["load", "--records", "1500", "--batch", "100"]);
        for k in (0..20u64).map(|i| i * 3) {
            db.ok(&["del", &k.to_string()]);
        }
        // Overwrite everything: the deleted keys come back, every old version must be gone.
        db.ok(&[
            "load",
            "--records",
            "1500",
            "--order",
            "random",
            "--batch",
            "7",
        ]);
        assert_eq!(
            db.ok(&["count", "--from", "0", "--to", "1499"]),
            "1500\n",
            "{layout}/{delete}"
        );
        assert_eq!(db.ok(&["get", "117"]), "117\n");
        assert_eq!(db.ok(&["scan"]).lines().count(), 1500, "{layout}/{delete}");
        assert!(db.ok(&["check"]).starts_with("ok: 1500 records"));
        let v: serde_json::Value = serde_json::from_str(&db.ok(&["stats"])).unwrap();
        let o = &v["index_options"];
        assert_eq!(o["layout"], layout);
        assert_eq!(o["delete_policy"], delete);
        assert_eq!(o["max_delete_proportion"], 0.2);
        assert_eq!(o["bloom_fpr"], 0.05);
        assert_eq!(o["memory_budget"], 64u64 << 20);
    }
}

#[test]
fn weighted_dynamized_sampling_follows_the_weights() {
    let db = TestDb::created(&["--index", "dynamized", "--weighted", "--buffer", "32"]);
    db.ok(&["load", "--records", "200"]);
    db.ok(&["put", "500", "5", "--weight", "0"]);
    db.ok(&["put", "600", "6", "--weight", "1e6"]);
    db.ok(&["put", "700", "7", "--weight", "2.5"]);
    // More writes than a buffer holds: the weighted records move into shards (plain puts weigh 1).
    db.ok(&["load", "--records", "300", "--batch", "10"]);
    assert_eq!(db.ok(&["get", "600"]), "6\n");
    assert_eq!(db.ok(&["count", "--from", "0", "--to", "1000"]), "303\n");
    let samples = u64_records(&db.ok(&[
        "sample", "--from", "0", "--to", "1000", "-k", "2000", "--seed", "5",
    ]));
    assert_eq!(samples.len(), 2000);
    assert!(
        samples.iter().all(|&(k, _)| k != 500),
        "a key of weight 0 was sampled"
    );
    let heavy = samples.iter().filter(|&&(k, _)| k == 600).count();
    assert!(
        heavy > 1900,
        "the heavy key drew only {heavy} of 2000 samples"
    );
    // Without the heavy key, the rest is roughly uniform.
    let light = u64_records(&db.ok(&[
        "sample", "--from", "0", "--to", "599", "-k", "3000", "--seed", "6",
    ]));
    assert!(light.iter().all(|&(k, v)| k < 300 && k == v));
    assert!(light.iter().filter(|&&(k, _)| k < 150).count() > 1200);
    let (code, err) = db.fails(&["put", "1", "1", "--weight", "-1"]);
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("at least 0"), "{err}");
    let (code, err) = db.fails(&["put", "1", "1", "--weight", "inf"]);
    assert_eq!(code, 64, "{err}");
    let out = db.ok(&["check"]);
    assert!(out.starts_with("ok: 303 records"), "{out}");
    let v: serde_json::Value = serde_json::from_str(&db.ok(&["stats"])).unwrap();
    assert_eq!(v["index_options"]["weighted"], true);
    assert_eq!(v["capabilities"]["weighted"], true);
}

#[test]
fn dynamized_usage_errors() {
    // Dynamized options need --index dynamized; nothing is created.
    for args in [
        &["create", "--index", "btree", "--layout", "leveling"][..],
        &["create", "--buffer", "64"],
        &[
            "create",
            "--index",
            "btree",
            "--weighted",
            "--memory-budget",
            "1M",
        ],
    ] {
        let db = TestDb::new();
        let (code, err) = db.fails(args);
        assert_eq!(code, 64, "{args:?}: {err}");
        assert!(err.contains("only to a dynamized index"), "{err}");
        assert!(err.contains("--index dynamized"), "{err}");
        assert!(!db.path.exists(), "{args:?} left a directory");
    }
    let db = TestDb::new();
    let (_, err) = db.fails(&["create", "--index", "btree", "--weighted", "--buffer", "9"]);
    assert!(err.contains("--buffer, --weighted apply"), "{err}");
    for (args, needle) in [
        (&["--layout", "diagonal"][..], "possible values"),
        (&["--delete", "shred"], "possible values"),
        (&["--scale-factor", "1"], "scale factor 1"),
        (&["--scale-factor", "65"], "scale factor 65"),
        (&["--buffer", "0"], "buffer capacity 0"),
        (&["--bloom-fpr", "1"], "false-positive rate"),
        (&["--max-delete-proportion", "0"], "delete proportion"),
        (&["--memory-budget", "lots"], "lots"),
        (&["--key", "bytes"], "u64 keys"),
        (&["--value", "bytes"], "u64 keys"),
    ] {
        let db = TestDb::new();
        let mut all = vec!["create", "--index", "dynamized"];
        all.extend_from_slice(args);
        let (code, err) = db.fails(&all);
        assert_eq!(code, 64, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!db.path.exists(), "{args:?} left a directory");
    }
    // Weights need a weighted database.
    let unweighted = TestDb::created(&["--index", "dynamized"]);
    let (code, err) = unweighted.fails(&["put", "1", "2", "--weight", "3"]);
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("--weight needs a weighted database"), "{err}");
    let btree = TestDb::created(&[]);
    let (code, err) = btree.fails(&["put", "1", "2", "--weight", "3"]);
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("btree database without weights"), "{err}");
    assert_eq!(btree.ok(&["count", "--from", "0", "--to", "9"]), "0\n");
    // No bulk loader for the dynamized family: a clear error, and the database is untouched.
    let (code, err) = unweighted.fails(&["load", "--records", "100", "--bulk"]);
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("without --bulk"), "{err}");
    assert_eq!(
        unweighted.ok(&["count", "--from", "0", "--to", "999"]),
        "0\n"
    );
    unweighted.ok(&["load", "--records", "100"]);
    assert_eq!(
        unweighted.ok(&["count", "--from", "0", "--to", "999"]),
        "100\n"
    );
}

#[test]
fn dynamized_check_detects_a_damaged_shard_file() {
    let db = TestDb::created(&["--index", "dynamized", "--buffer", "256"]);
    db.ok(&["load", "--records", "3000"]);
    assert!(db.ok(&["check"]).starts_with("ok: 3000 records"));
    let files = shard_files(&db.path);
    let target = files.last().expect("a shard file");
    let mut bytes = std::fs::read(target).unwrap();
    let at = 4096 + 100; // a record page
    assert!(bytes.len() > at, "shard file of {} bytes", bytes.len());
    bytes[at] ^= 0x5a;
    std::fs::write(target, &bytes).unwrap();
    let (code, err) = db.fails(&["check"]);
    assert_eq!(code, 2, "{err}");
    let name = target.file_name().unwrap().to_str().unwrap();
    assert!(err.contains(name), "{err}");
}

#[test]
fn help_describes_the_dynamized_options() {
    let out = strata(&["create", "--help"]);
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for needle in [
        "dynamized",
        "--layout <LAYOUT>",
        "[default: tiering]",
        "--scale-factor <S>",
        "[default: 6]",
        "--buffer <N>",
        "[default: 12000]",
        "--delete <DELETE>",
        "[default: tombstone]",
        "--max-delete-proportion <D>",
        "[default: 0.05]",
        "--bloom-fpr <P>",
        "--memory-budget <BYTES>",
        "0 = unlimited",
        "--weighted",
    ] {
        assert!(help.contains(needle), "{needle:?} missing in\n{help}");
    }
    let out = strata(&["put", "--help"]);
    assert!(
        String::from_utf8(out.stdout)
            .unwrap()
            .contains("--weight <W>")
    );
}

/// Every command on a Bε-tree database: writes, merges, scans both ways, counts, loads through a small
/// cache, reopen, check (and damage found by it), stats; sampling and options of other families are refused.
#[test]
fn betree_database_answers_every_command() {
    let db = TestDb::created(&[
        "--index",
        "betree",
        "--epsilon",
        "0.5",
        "--merge-operator",
        "u64-add",
    ]);
    for k in [5u64, 1, 9, 3, 7] {
        db.ok(&["put", &k.to_string(), &(k * 10).to_string()]);
    }
    db.ok(&["merge", "9", "1"]);
    db.ok(&["merge", "11", "4"]);
    db.ok(&["del", "5"]);
    assert_eq!(db.ok(&["get", "9"]), "91\n");
    assert_eq!(db.ok(&["get", "11"]), "4\n");
    assert_eq!(db.run(&["get", "5"]).status.code(), Some(1));
    assert_eq!(
        lines(&db.ok(&["scan", "--reverse", "--limit", "3"])),
        ["11\t4", "9\t91", "7\t70"]
    );
    db.ok(&[
        "--cache",
        "64KiB",
        "load",
        "--records",
        "30000",
        "--order",
        "random",
        "--batch",
        "50",
    ]);
    assert_eq!(db.ok(&["count", "--from", "100", "--to", "199"]), "100\n");
    assert_eq!(
        lines(&db.ok(&["scan", "--from", "29998"])),
        ["29998\t29998", "29999\t29999"]
    );
    let out = db.ok(&["check"]);
    assert!(out.starts_with("ok: 30000 records"), "{out}");
    let stats: serde_json::Value = serde_json::from_str(&db.ok(&["stats"])).unwrap();
    assert_eq!(stats["index"], "betree");
    assert_eq!(stats["records"], 30000);
    let (code, err) = db.fails(&["sample", "--from", "0", "--to", "9", "-k", "2"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("sampling"), "{err}");

    // A flipped byte in a node is damage, reported with the file.
    let pages = db.path.join("data.pages");
    let mut bytes = std::fs::read(&pages).unwrap();
    let target = bytes.len() / 2;
    bytes[target] ^= 0x5a;
    std::fs::write(&pages, &bytes).unwrap();
    let (code, err) = db.fails(&["check"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("data.pages"), "{err}");

    let other = TestDb::new();
    let (code, err) = other.fails(&["create", "--epsilon", "0.3"]);
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("--index betree"), "{err}");
    let (code, err) = other.fails(&["create", "--index", "betree", "--epsilon", "0"]);
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("epsilon"), "{err}");
}

#[test]
fn every_command_line_mistake_exits_64_and_creates_nothing() {
    let db = TestDb::created(&[]);
    db.ok(&["put", "1", "2"]);
    for args in [
        &["get", "abc"][..],
        &["get", "-1"],
        &["get", "18446744073709551616"],
        &["put", "1", "-5"],
        &["put", "x", "1"],
        &["del", "1.5"],
        &["scan", "--from", "a"],
        &["count", "--from", "0", "--to", "z"],
        &["sample", "--from", "0", "--to", "9", "-k", "-1"],
        &["load", "--records", "10", "--batch", "0"],
        &["load", "--records", "ten"],
    ] {
        let (code, err) = db.fails(args);
        assert_eq!(code, 64, "{args:?}: {err}");
    }
    let out = strata(&["get", "1"]);
    assert_eq!(out.status.code(), Some(64), "no --db");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--db"));
    for args in [
        &["create", "--page-size", "1000"][..],
        &["create", "--page-size", "3000"],
        &["create", "--page-size", "8MiB"],
        &["create", "--index", "btree", "--page-size", "128KiB"],
        &["create", "--index", "betree", "--epsilon", "0"],
        &["create", "--index", "betree", "--epsilon", "1.5"],
        &["create", "--index", "betree", "--epsilon", "NaN"],
        &["create", "--index", "betree", "--merge-operator", "concat"],
        &["create", "--index", "dynamized", "--key", "bytes"],
    ] {
        let fresh = TestDb::new();
        let (code, err) = fresh.fails(args);
        assert_eq!(code, 64, "{args:?}: {err}");
        assert!(!fresh.path.exists(), "{args:?} left a directory");
    }
    // Engine errors keep status 1, damage 2.
    let missing = TestDb::new();
    assert_eq!(missing.fails(&["get", "1"]).0, 1);
    assert_eq!(db.fails(&["get", "7"]).0, 1, "absent key");
    assert_eq!(db.ok(&["get", "1"]), "2\n");
}

#[test]
fn the_issues_meta_slot_repro_is_caught_and_repair_reports_the_loss() {
    // create; load 1000; put 5 555; flip the epoch byte of meta slot 1; check; get 5.
    let db = TestDb::created(&["--index", "btree"]);
    db.ok(&["load", "--records", "1000"]);
    db.ok(&["put", "5", "555"]);
    let pages = db.path.join("data.pages");
    let mut bytes = std::fs::read(&pages).unwrap();
    bytes[4136] ^= 0xff;
    std::fs::write(&pages, &bytes).unwrap();
    let (code, err) = db.fails(&["check"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("data.pages") && err.contains("offset 4096"),
        "{err}"
    );
    let (code, err) = db.fails(&["get", "5"]);
    assert_eq!(code, 2, "{err}");
    let out = db.ok(&["repair"]);
    assert!(out.contains("dropped:") && out.contains("lost"), "{out}");
    assert_eq!(
        db.ok(&["get", "5"]),
        "5\n",
        "the older state, explicitly accepted"
    );
    db.ok(&["check"]);
}

/// Every file of a directory with its bytes, sorted by name.
fn dir_contents(dir: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn read_commands_change_no_file() {
    let db = TestDb::created(&[]);
    db.ok(&["load", "--records", "100"]);
    let before = dir_contents(&db.path);
    for args in [
        &["get", "5"][..],
        &["scan", "--limit", "3"],
        &["count", "--from", "0", "--to", "99"],
        &[
            "sample", "--from", "0", "--to", "99", "-k", "3", "--seed", "1",
        ],
        &["check"],
        &["stats"],
    ] {
        db.ok(args);
    }
    assert!(
        before == dir_contents(&db.path),
        "a read command changed a file"
    );
}

#[test]
fn an_overflowing_merge_is_refused_and_the_key_keeps_its_value() {
    let db = TestDb::created(&["--index", "betree", "--merge-operator", "u64-add"]);
    db.ok(&["put", "7", "7"]);
    let (code, err) = db.fails(&["merge", "7", "18446744073709551615"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("overflow"), "{err}");
    assert_eq!(db.ok(&["get", "7"]), "7\n");
    db.ok(&["merge", "7", "3"]);
    assert_eq!(db.ok(&["get", "7"]), "10\n");
    let sat = TestDb::created(&[
        "--index",
        "betree",
        "--merge-operator",
        "u64-add-saturating",
    ]);
    sat.ok(&["put", "7", "7"]);
    sat.ok(&["merge", "7", "18446744073709551615"]);
    assert_eq!(sat.ok(&["get", "7"]), "18446744073709551615\n");
}

#[test]
fn missing_short_and_damaged_files_exit_2_naming_the_file() {
    let wal_of = |db: &TestDb| {
        std::fs::read_dir(&db.path)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.to_string_lossy().contains("wal-"))
            .unwrap()
    };
    // The page file one byte short, deleted; the WAL truncated, deleted; the manifest deleted.
    type Harm = fn(&std::path::Path);
    let cases: [(&str, Harm, &str); 5] = [
        (
            "data.pages",
            |p| {
                let b = std::fs::read(p).unwrap();
                std::fs::write(p, &b[..b.len() - 1]).unwrap();
            },
            "data.pages",
        ),
        (
            "data.pages",
            |p| std::fs::remove_file(p).unwrap(),
            "data.pages",
        ),
        (
            "wal",
            |p| {
                let b = std::fs::read(p).unwrap();
                std::fs::write(p, &b[..b.len() / 2]).unwrap();
            },
            "wal-",
        ),
        (
            "wal",
            |p| std::fs::remove_file(p).unwrap(),
            "write-ahead log",
        ),
        ("MANIFEST", |p| std::fs::remove_file(p).unwrap(), "MANIFEST"),
    ];
    for (file, harm, needle) in cases {
        let db = TestDb::created(&[]);
        db.ok(&["load", "--records", "500"]);
        let path = if file == "wal" {
            wal_of(&db)
        } else {
            db.path.join(file)
        };
        harm(&path);
        for cmd in [&["check"][..], &["get", "1"], &["put", "1", "1"]] {
            let (code, err) = db.fails(cmd);
            assert_eq!(code, 2, "{file} {cmd:?}: {err}");
            assert!(err.contains(needle), "{file} {cmd:?}: {err}");
        }
    }
}

#[test]
fn index_options_by_name_and_the_family_list_come_from_the_registry() {
    let db = TestDb::created(&[
        "--index",
        "dynamized",
        "-o",
        "layout=leveling",
        "-o",
        "scale_factor=3",
        "--buffer",
        "100",
    ]);
    let v: serde_json::Value = serde_json::from_str(&db.ok(&["stats"])).unwrap();
    assert_eq!(v["index_options"]["layout"], "leveling");
    assert_eq!(v["index_options"]["scale_factor"], 3);
    assert_eq!(v["index_options"]["buffer_capacity"], 100);
    let be = TestDb::created(&["--index", "betree", "-o", "epsilon=0.25"]);
    let v: serde_json::Value = serde_json::from_str(&be.ok(&["stats"])).unwrap();
    assert_eq!(v["index_options"]["epsilon"], 0.25);
    assert_eq!(v["capabilities"]["merge"], false);
    for (args, needle) in [
        (
            &["--index", "dynamized", "-o", "layout=spiral"][..],
            "spiral",
        ),
        (&["--index", "dynamized", "-o", "colour=blue"], "colour"),
        (&["--index", "btree", "-o", "epsilon=0.5"], "epsilon"),
        (&["--index", "dynamized", "-o", "noequals"], "KEY=VALUE"),
        (&["--index", "hash-table"], "possible values"),
    ] {
        let fresh = TestDb::new();
        let mut all = vec!["create"];
        all.extend_from_slice(args);
        let (code, err) = fresh.fails(&all);
        assert_eq!(code, 64, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!fresh.path.exists());
    }
    let help = String::from_utf8(strata(&["create", "--help"]).stdout).unwrap();
    for name in ["btree", "dynamized", "betree"] {
        assert!(help.contains(name), "{help}");
    }
}

/// A hash database (`--index hash`, `u64` keys and values): point commands, load, check, stats with the
/// index's own figures; scans, counts, samples and bulk loads refused with exit status 1 and a clear
/// message; read commands write nothing (the region is mapped privately); damage exits 2 naming `hash.pm`.
#[test]
fn hash_database_answers_point_commands_and_refuses_ordered_ones() {
    let help = String::from_utf8(strata(&["create", "--help"]).stdout).unwrap();
    assert!(help.contains("hash:"), "{help}");
    let db = TestDb::created(&[
        "--index",
        "hash",
        "-o",
        "region_bytes=16MiB",
        "-o",
        "persist=eadr",
        "-o",
        "initial_buckets=1",
    ]);
    db.ok(&["put", "7", "700"]);
    db.ok(&["put", "8", "800"]);
    assert_eq!(db.ok(&["get", "7"]), "700\n");
    db.ok(&["del", "7"]);
    assert_eq!(db.run(&["get", "7"]).status.code(), Some(1));
    db.ok(&[
        "load",
        "--records",
        "5000",
        "--order",
        "random",
        "--batch",
        "50",
    ]);
    assert_eq!(db.ok(&["get", "4999"]), "4999\n");
    assert_eq!(db.ok(&["get", "7"]), "7\n");
    let out = db.ok(&["check"]);
    assert!(out.starts_with("ok: 5000 records"), "{out}");
    let v: serde_json::Value = serde_json::from_str(&db.ok(&["stats"])).unwrap();
    assert_eq!(v["index"], "hash");
    assert_eq!(v["records"], 5000);
    assert_eq!(v["capabilities"]["ordered"], false);
    assert_eq!(v["index_options"]["region_bytes"], 16 << 20);
    let h = &v["hash"];
    let (load, slots) = (
        h["load_factor"].as_f64().unwrap(),
        h["capacity_slots"].as_u64().unwrap(),
    );
    assert!(load > 0.4 && load <= 0.875, "load factor {load}");
    assert_eq!((load * slots as f64).round() as u64, 5000);
    assert!(h["dram_bytes"].as_u64().unwrap() > 0 && h["pm_bytes_used"].as_u64().unwrap() > 0);
    assert_eq!(h["persist"], "eadr");

    let before = dir_contents(&db.path);
    for args in [
        &["scan", "--limit", "3"][..],
        &["count", "--from", "0", "--to", "9"],
        &["sample", "--from", "0", "--to", "9", "-k", "2"],
    ] {
        let (code, err) = db.fails(args);
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(
            err.contains("the hash index has no key order"),
            "{args:?}: {err}"
        );
    }
    for args in [&["get", "5"][..], &["check"], &["stats"]] {
        db.ok(args);
    }
    assert!(
        before == dir_contents(&db.path),
        "a read command changed a file"
    );
    let (code, err) = db.fails(&["load", "--records", "10", "--bulk"]);
    assert_ne!(code, 0);
    assert!(err.contains("bulk"), "{err}");
    let (code, err) = db.fails(&["put", "1", "x"]);
    assert_eq!(code, 64, "{err}");

    // A value changed in the region (in its log record and its slot) is damage the digest finds.
    let region = db.path.join("hash.pm");
    db.ok(&["put", "9", "81985529216486895"]); // 0x0123456789abcdef
    let mut bytes = std::fs::read(&region).unwrap();
    let needle = 81985529216486895u64.to_le_bytes();
    let mut hits = 0;
    for at in 0..bytes.len() - 8 {
        if bytes[at..at + 8] == needle {
            bytes[at] ^= 0x40;
            hits += 1;
        }
    }
    assert!(hits > 0);
    std::fs::write(&region, &bytes).unwrap();
    for cmd in [&["check"][..], &["get", "9"], &["put", "1", "1"]] {
        let (code, err) = db.fails(cmd);
        assert_eq!(code, 2, "{cmd:?}: {err}");
        assert!(err.contains("hash.pm"), "{cmd:?}: {err}");
    }
    // So is a damaged header, and a missing region.
    bytes[3] ^= 1;
    std::fs::write(&region, &bytes).unwrap();
    let (code, err) = db.fails(&["get", "8"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("hash.pm") && err.contains("offset 0"), "{err}");
    std::fs::remove_file(&region).unwrap();
    let (code, err) = db.fails(&["get", "8"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("hash.pm"), "{err}");

    let fresh = TestDb::new();
    for args in [
        &["create", "--index", "hash", "--key", "bytes"][..],
        &["create", "--index", "hash", "-o", "region_bytes=64KiB"],
        &["create", "--index", "hash", "-o", "persist=nvram"],
        &["create", "--index", "hash", "-o", "initial_buckets=3"],
    ] {
        let (code, err) = fresh.fails(args);
        assert_eq!(code, 64, "{args:?}: {err}");
        assert!(!fresh.path.exists(), "{args:?} left a directory");
    }
}
