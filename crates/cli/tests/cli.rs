//! End-to-end tests of the `strata` binary: every command run as a separate process on a database in a
//! temporary directory, checking stdout, stderr and exit status (including damage detection, user errors that
//! must not panic, a closed stdout pipe, and the smoke benchmark's JSON output).

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
    assert_eq!(code, 1);
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
    assert_eq!(code, 1);
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
        ("count+sample", "count"),
        ("count+sample", "sample"),
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
        ["default", "ycsb", "dbbench", "smoke", "btree-cost"],
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
