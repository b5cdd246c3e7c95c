//! Process-kill crash test: a child process loads keys 0, 1, 2, … in order with `Durability::Flush`, printing
//! each acknowledged key, and is SIGKILLed at a random moment (often in the middle of a checkpoint, which the
//! child triggers every 256 KiB of WAL). After reopening, the keys present must be exactly 0..m with correct
//! values, m at least the number of acknowledged writes, and the integrity check must pass.
//!
//! Iterations: `STRATA_CRASH_ITERATIONS` (default 4).

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the test failing

mod common;

use common::iterations;
use rand::{Rng, SeedableRng};
use std::path::Path;
use strata::Config;
use strata::{Db, Durability, IndexKind, Options};

const CHILD_ENV: &str = "STRATA_KILL_CHILD_DIR";
const CHILD_INDEX_ENV: &str = "STRATA_KILL_CHILD_INDEX";

fn child_options() -> Options {
    Options {
        cache_bytes: 256 << 10,
        checkpoint_wal_bytes: 256 << 10,
        ..Options::default()
    }
}

/// The child: runs only when re-executed by `sigkill_during_sequential_load`.
#[test]
#[ignore = "run as a child process by sigkill_during_sequential_load"]
fn kill_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let index = std::env::var(CHILD_INDEX_ENV).expect("index kind for the child");
    let config = Config {
        index: index
            .parse::<IndexKind>()
            .expect("index kind")
            .default_config(),
        durability: Durability::Flush,
        ..Config::default()
    };
    let db = Db::<u64, u64>::create(&dir, &config, &child_options()).expect("child create");
    let mut out = std::io::stdout().lock();
    for k in 0u64.. {
        db.insert(&k, &(k ^ 0x5555)).expect("child insert");
        // The write is acknowledged: tell the parent.
        use std::io::Write;
        writeln!(out, "{k}").expect("child stdout");
    }
}

#[test]
fn sigkill_during_sequential_load() {
    kill_and_verify(IndexKind::BTree);
}

#[test]
fn sigkill_during_sequential_load_betree() {
    kill_and_verify(IndexKind::BeTree);
}

fn kill_and_verify(index: IndexKind) {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(2026);
    for iteration in 0..iterations() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("db");
        let wait_ms = rng.random_range(150..900);
        let acked = common::run_and_kill(
            "kill_child",
            &[
                (CHILD_ENV, dir.display().to_string()),
                (CHILD_INDEX_ENV, index.name().to_string()),
            ],
            wait_ms,
        );
        verify(&dir, acked, iteration, wait_ms);
    }
}

fn verify(dir: &Path, acked: u64, iteration: u64, wait_ms: u64) {
    if !dir.join("MANIFEST").exists() {
        assert_eq!(
            acked, 0,
            "writes were acknowledged before the database existed"
        );
        return;
    }
    let db = Db::<u64, u64>::open(dir, &child_options()).expect("reopen after SIGKILL");
    let m = db.len();
    assert!(
        m >= acked,
        "iteration {iteration} (killed after {wait_ms} ms): {m} keys survived but {acked} were acknowledged"
    );
    let mut expect = 0u64;
    for r in db.range(..) {
        let (k, v) = r.unwrap();
        assert_eq!(k, expect, "keys present must be a prefix 0..{m}");
        assert_eq!(v, k ^ 0x5555, "value of key {k}");
        expect += 1;
    }
    assert_eq!(expect, m);
    let report = db.check().expect("check after SIGKILL");
    assert_eq!(report.records, m);
    eprintln!(
        "iteration {iteration}: killed after {wait_ms} ms, {acked} acknowledged, {m} recovered"
    );
}
