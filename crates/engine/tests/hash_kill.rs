//! Process-kill crash test of the hash family (issue 17, crash test (a)): a child process writes through the
//! `Db` shell to a hash database — on tmpfs (`/dev/shm`) when there is one, so its region is an eADR-style
//! shared mapping whose every store survives the kill — printing each acknowledged write, and is SIGKILLed
//! at a random moment (often inside a table rebuild, a D-bucket flush, a ledger commit or a checkpoint, which
//! the child triggers every 64 KiB of WAL). After reopening, the database must hold exactly the state after
//! the acknowledged writes, or after one more (the write in flight): every acknowledged insert, update and
//! delete, nothing else (no phantom, no duplicate: `len` agrees and `check` passes).
//!
//! Write i is one batch: put key i (value i ^ 0x5555); when i % 3 == 2 also delete key i / 2; when
//! i % 5 == 4 also update key i / 3 to i. Iterations rotate the durability (none, flush, sync): the region
//! keeps every applied batch even when the WAL record was never written. A second test does the same on a
//! regular file system, where the region is `msync`ed at every persist point.
//!
//! A third test writes bytes values (0 to 256 B, derived from the `u64` value) on tmpfs with a 64 KiB value
//! log (`hash.values`), so kills also land inside value appends and the log's cleaning.
//!
//! Iterations: `STRATA_CRASH_ITERATIONS` (default 4; a nightly run uses 1,000).

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the test failing

mod common;

use common::iterations;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::path::Path;
use strata::options::HashOptions;
use strata::{Config, Durability, IndexConfig, Options, RawDb, TypeKind, WriteOp};

const CHILD_ENV: &str = "STRATA_HASH_KILL_CHILD_DIR";
const VARIANT_ENV: &str = "STRATA_HASH_KILL_VARIANT";
const BYTES_ENV: &str = "STRATA_HASH_KILL_BYTES";

/// The encoded value a write stores for `v`: its 8 bytes, or with bytes values 0 to 256 bytes derived from it.
fn encode(bytes: bool, v: u64) -> Vec<u8> {
    if bytes {
        let len = (v.wrapping_mul(37) % 257) as usize;
        (0..len as u64)
            .map(|j| (v ^ j.wrapping_mul(13)) as u8)
            .collect()
    } else {
        v.to_be_bytes().to_vec()
    }
}

fn child_options() -> Options {
    Options {
        checkpoint_wal_bytes: 64 << 10,
        ..Options::default()
    }
}

fn config(variant: u64, bytes: bool) -> Config {
    Config {
        durability: [Durability::None, Durability::Flush, Durability::Sync][(variant % 3) as usize],
        // Small first tables and log: many doublings, forced flushes and log-tail advances early on; a small
        // value log: cleaning early on.
        index: IndexConfig::Hash(HashOptions {
            initial_buckets: 1,
            log_lines: 64,
            value_log_bytes: 64 << 10,
            ..HashOptions::default()
        }),
        value: if bytes {
            TypeKind::Bytes
        } else {
            TypeKind::U64
        },
        ..Config::default()
    }
}

/// The operations of write `i`: `None` deletes.
fn write_ops(i: u64) -> Vec<(u64, Option<u64>)> {
    let mut ops = vec![(i, Some(i ^ 0x5555))];
    if i % 3 == 2 {
        ops.push((i / 2, None));
    }
    if i % 5 == 4 {
        ops.push((i / 3, Some(i)));
    }
    ops
}

/// The records after the first `m` writes (values encoded).
fn state_after(m: u64, bytes: bool) -> HashMap<u64, Vec<u8>> {
    let mut s = HashMap::new();
    for i in 0..m {
        for (k, v) in write_ops(i) {
            match v {
                Some(v) => s.insert(k, encode(bytes, v)),
                None => s.remove(&k),
            };
        }
    }
    s
}

/// The child: runs only when re-executed by the tests below.
#[test]
#[ignore = "run as a child process by the hash kill tests"]
fn hash_kill_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let variant: u64 = std::env::var(VARIANT_ENV).unwrap().parse().unwrap();
    let bytes = std::env::var_os(BYTES_ENV).is_some();
    let db = RawDb::create(&dir, &config(variant, bytes), &child_options()).expect("child create");
    let mut out = std::io::stdout().lock();
    for i in 0u64.. {
        let batch: Vec<WriteOp> = write_ops(i)
            .into_iter()
            .map(|(k, v)| {
                let key = k.to_be_bytes().to_vec();
                match v {
                    Some(v) => WriteOp::Put {
                        key,
                        value: encode(bytes, v),
                    },
                    None => WriteOp::Delete { key },
                }
            })
            .collect();
        db.write(&batch, None).expect("child write");
        use std::io::Write;
        writeln!(out, "{i}").expect("child stdout");
    }
}

#[test]
fn sigkill_during_hash_writes_on_tmpfs() {
    let shm = Path::new("/dev/shm");
    kill_and_verify(shm.is_dir().then_some(shm), false, 2026, 1..400);
}

#[test]
fn sigkill_during_hash_writes_on_a_regular_file_system() {
    kill_and_verify(None, false, 2027, 100..700);
}

#[test]
fn sigkill_during_hash_writes_of_bytes_values_on_tmpfs() {
    let shm = Path::new("/dev/shm");
    kill_and_verify(shm.is_dir().then_some(shm), true, 2028, 1..400);
}

fn kill_and_verify(base: Option<&Path>, bytes: bool, seed: u64, wait: std::ops::Range<u64>) {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let (mut total_acked, mut in_flight_kept, mut before_create) = (0, 0, 0);
    for iteration in 0..iterations() {
        let tmp = match base {
            Some(b) => tempfile::tempdir_in(b).unwrap(),
            None => tempfile::tempdir().unwrap(),
        };
        let dir = tmp.path().join("db");
        let wait_ms = rng.random_range(wait.clone());
        let mut env = vec![
            (CHILD_ENV, dir.display().to_string()),
            (VARIANT_ENV, iteration.to_string()),
        ];
        if bytes {
            env.push((BYTES_ENV, "1".to_string()));
        }
        let acked = common::run_and_kill("hash_kill_child", &env, wait_ms);
        match verify(&dir, bytes, acked, iteration, wait_ms) {
            None => before_create += 1,
            Some(m) => in_flight_kept += m - acked,
        }
        total_acked += acked;
    }
    eprintln!(
        "{} iterations: {total_acked} acknowledged writes in all; killed before the database existed \
         {before_create} times; the write in flight survived {in_flight_kept} times",
        iterations()
    );
}

/// Checks the reopened database; returns how many writes it holds (`None`: killed before it existed).
fn verify(dir: &Path, bytes: bool, acked: u64, iteration: u64, wait_ms: u64) -> Option<u64> {
    if !dir.join("MANIFEST").exists() {
        assert_eq!(
            acked, 0,
            "writes were acknowledged before the database existed"
        );
        return None;
    }
    let what = format!("iteration {iteration} (killed after {wait_ms} ms, {acked} acknowledged)");
    let db = RawDb::open(dir, &child_options()).unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
    // Every key a write up to the one in flight named, plus a margin: nothing else may be present.
    let mut found = HashMap::new();
    for k in 0..acked + 8 {
        if let Some(v) = db.get(&k.to_be_bytes()).unwrap() {
            found.insert(k, v);
        }
    }
    assert_eq!(
        db.len(),
        found.len() as u64,
        "{what}: records outside the written keys"
    );
    let m = [acked, acked + 1]
        .into_iter()
        .find(|&m| state_after(m, bytes) == found)
        .unwrap_or_else(|| {
            let want = state_after(acked, bytes);
            let missing = want.iter().filter(|(k, v)| found.get(k) != Some(v)).count();
            let extra = found.keys().filter(|k| !want.contains_key(k)).count();
            panic!("{what}: the state is not after {acked} or {} writes ({missing} records differ or are missing, {extra} extra)", acked + 1)
        });
    let report = db.check().unwrap_or_else(|e| panic!("{what}: check: {e}"));
    assert_eq!(report.records, found.len() as u64);
    eprintln!("{what}: recovered the state after {m} writes");
    Some(m)
}
