//! Process-kill crash test of the dynamized family with disk levels: a child process writes through the
//! `Db` shell to a dynamized database whose memory budget puts every level on disk (tiny buffers, frequent
//! checkpoints, background reconstructions writing shard files all the time), printing each acknowledged
//! write, and is SIGKILLed at a random moment. After reopening, the database must hold exactly the state
//! after some prefix of the writes at least as long as the acknowledged ones, and `check()` must pass.
//!
//! Write i is one batch: put key i (value i ^ 0x5555) and, when i % 3 == 2, delete key i / 2. Iterations
//! alternate the durability (flush, sync), the delete policy and the layout.
//!
//! Iterations: `STRATA_CRASH_ITERATIONS` (default 4).

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the test failing

mod common;

use common::iterations;
use rand::{Rng, SeedableRng};
use std::collections::BTreeSet;
use std::path::Path;
use strata::Config;
use strata::options::{DeletePolicy, DynOptions, Layout};
use strata::{Batch, Db, Durability, IndexConfig, Options};

const CHILD_ENV: &str = "STRATA_DYN_KILL_CHILD_DIR";
const VARIANT_ENV: &str = "STRATA_DYN_KILL_VARIANT";

fn child_options() -> Options {
    Options {
        checkpoint_wal_bytes: 64 << 10,
        ..Options::default()
    }
}

fn config(variant: u64) -> Config {
    Config {
        durability: if variant.is_multiple_of(2) {
            Durability::Flush
        } else {
            Durability::Sync
        },
        index: IndexConfig::Dynamized(DynOptions {
            layout: if variant % 4 < 2 {
                Layout::Tiering
            } else {
                Layout::Leveling
            },
            delete_policy: if variant.is_multiple_of(3) {
                DeletePolicy::Tagging
            } else {
                DeletePolicy::Tombstone
            },
            buffer_capacity: 64,
            scale_factor: 3,
            // One byte: every level lives on disk.
            memory_budget: 1,
            ..DynOptions::default()
        }),
        ..Config::default()
    }
}

/// The key write `i` deletes, if any.
fn deleted_by(i: u64) -> Option<u64> {
    (i % 3 == 2).then_some(i / 2)
}

/// The live keys after the first `m` writes.
fn state_after(m: u64) -> BTreeSet<u64> {
    let mut s = BTreeSet::new();
    for i in 0..m {
        s.insert(i);
        if let Some(d) = deleted_by(i) {
            s.remove(&d);
        }
    }
    s
}

/// The child: runs only when re-executed by `sigkill_during_dynamized_load`.
#[test]
#[ignore = "run as a child process by sigkill_during_dynamized_load"]
fn dyn_kill_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let variant: u64 = std::env::var(VARIANT_ENV).unwrap().parse().unwrap();
    let db = Db::<u64, u64>::create(&dir, &config(variant), &child_options()).expect("create");
    let mut out = std::io::stdout().lock();
    for i in 0u64.. {
        let mut b = Batch::new();
        b.insert(&i, &(i ^ 0x5555));
        if let Some(d) = deleted_by(i) {
            b.delete(&d);
        }
        db.write(b).expect("child write");
        // The write is acknowledged: tell the parent.
        use std::io::Write;
        writeln!(out, "{i}").expect("child stdout");
    }
}

#[test]
fn sigkill_during_dynamized_load() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(2027);
    for iteration in 0..iterations() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("db");
        let wait_ms = rng.random_range(200..1_000);
        let acked = common::run_and_kill(
            "dyn_kill_child",
            &[
                (CHILD_ENV, dir.display().to_string()),
                (VARIANT_ENV, iteration.to_string()),
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
    let mut got = BTreeSet::new();
    for r in db.range(..) {
        let (k, v) = r.unwrap();
        assert_eq!(v, k ^ 0x5555, "value of key {k}");
        got.insert(k);
    }
    // Key i is live right after write i, so the last write of the recovered prefix is the largest key.
    let m = got.last().map_or(0, |&k| k + 1);
    assert!(
        m >= acked,
        "iteration {iteration} (killed after {wait_ms} ms): the state is that of {m} writes but {acked} were acknowledged"
    );
    assert!(
        got == state_after(m),
        "iteration {iteration}: the recovered keys are not the state after {m} writes"
    );
    assert_eq!(db.len(), got.len() as u64);
    let report = db.check().expect("check after SIGKILL");
    assert_eq!(report.records, got.len() as u64);
    let shard_files = std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().starts_with("shard-"))
        })
        .count();
    eprintln!(
        "iteration {iteration}: killed after {wait_ms} ms, {acked} acknowledged, {m} recovered, {shard_files} shard files"
    );
}
