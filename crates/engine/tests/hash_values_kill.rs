//! Process-kill crash test of the hash indexes with values up to 256 B (issue 17, crash test (a) for Exp 8):
//! a child process writes through a `ValueIndex` (ElimDA-style or Dash-style index, value log in the same
//! region) to a region mapped from a file on tmpfs (`/dev/shm`, else the temp directory) — an eADR-style
//! shared mapping whose every store survives the kill — printing each acknowledged write, and is SIGKILLed
//! at a random moment (often inside a value-log cleaning pass: the log is small, so it laps every few
//! hundred writes). After reopening, the region must hold exactly the state after the acknowledged writes
//! and a prefix of the operations of the write in flight (each is an index operation of its own): every
//! value byte for byte, nothing else.
//!
//! Write i: put key i % 600 with a value of 1 + (i * 37) % 256 bytes derived from i; when i % 4 == 3 also
//! delete key (i * 7) % 600. Iterations alternate the two indexes.
//!
//! Iterations: `STRATA_CRASH_ITERATIONS` (default 4; a nightly run uses 1,000).

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the test failing

mod common;

use common::iterations;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::path::Path;
use strata::lab::index::hash::dash::{DashConfig, DashIndex};
use strata::lab::index::hash::values::ValueIndex;
use strata::lab::index::hash::{HashConfig, HashIndex};
use strata::lab::storage::pm::{MmapRegion, PersistMode};

const CHILD_ENV: &str = "STRATA_HASH_VALUES_KILL_CHILD_FILE";
const VARIANT_ENV: &str = "STRATA_HASH_VALUES_KILL_VARIANT";
const REGION: u64 = 8 << 20;
/// A small value log: about 600 live values of 130 B on average fill half of it, so it laps often.
const LOG: u64 = 160 << 10;
const KEYS: u64 = 600;

/// The operations of write `i`: `None` deletes.
fn write_ops(i: u64) -> Vec<(u64, Option<Vec<u8>>)> {
    let len = 1 + (i * 37 % 256) as usize;
    let value = (0..len).map(|j| (i as usize * 31 + j * 7) as u8).collect();
    let mut ops = vec![(i % KEYS, Some(value))];
    if i % 4 == 3 {
        ops.push(((i * 7) % KEYS, None));
    }
    ops
}

fn state_after(m: u64) -> HashMap<u64, Vec<u8>> {
    let mut s = HashMap::new();
    for i in 0..m {
        for (k, v) in write_ops(i) {
            match v {
                Some(v) => s.insert(k, v),
                None => s.remove(&k),
            };
        }
    }
    s
}

type Elimda = ValueIndex<MmapRegion, HashIndex<strata::lab::index::hash::values::Part<MmapRegion>>>;
type Dash = ValueIndex<MmapRegion, DashIndex<strata::lab::index::hash::values::Part<MmapRegion>>>;

/// The records of the region at `path`, after checking it.
fn read_back(path: &Path, dash: bool) -> HashMap<u64, Vec<u8>> {
    let pm = MmapRegion::open(path, PersistMode::Eadr).unwrap();
    let mut out = HashMap::new();
    if dash {
        let index = Dash::open(pm).unwrap();
        index.check_invariants().unwrap();
        index
            .for_each(|k, v| assert!(out.insert(k, v.to_vec()).is_none()))
            .unwrap();
        assert_eq!(index.len(), out.len() as u64);
    } else {
        let index = Elimda::open(pm).unwrap();
        index.check_invariants().unwrap();
        index
            .for_each(|k, v| assert!(out.insert(k, v.to_vec()).is_none()))
            .unwrap();
        assert_eq!(index.len(), out.len() as u64);
    }
    out
}

/// The child: runs only when re-executed by the test below.
#[test]
#[ignore = "run as a child process by the value kill test"]
fn hash_values_kill_child() {
    let Ok(file) = std::env::var(CHILD_ENV) else {
        return;
    };
    let dash = std::env::var(VARIANT_ENV).unwrap() == "dash";
    let pm = MmapRegion::create(&file, REGION, PersistMode::Eadr).unwrap();
    let mut put: Box<dyn FnMut(u64, Option<Vec<u8>>)> = if dash {
        let mut index =
            ValueIndex::create(pm, LOG, |w| DashIndex::create(w, DashConfig::default())).unwrap();
        Box::new(move |k, v| match v {
            Some(v) => index.put(k, &v).unwrap(),
            None => drop(index.remove(k).unwrap()),
        })
    } else {
        let config = HashConfig {
            initial_buckets: 1,
            log_lines: 64,
            ..HashConfig::default()
        };
        let mut index = ValueIndex::create(pm, LOG, |w| HashIndex::create(w, config)).unwrap();
        Box::new(move |k, v| match v {
            Some(v) => index.put(k, &v).unwrap(),
            None => drop(index.remove(k).unwrap()),
        })
    };
    // Created: the parent may now find the region.
    std::fs::write(format!("{file}.ready"), b"").unwrap();
    let mut out = std::io::stdout().lock();
    for i in 0u64.. {
        for (k, v) in write_ops(i) {
            put(k, v);
        }
        use std::io::Write;
        writeln!(out, "{i}").unwrap();
    }
}

#[test]
fn sigkill_during_value_writes() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(2028);
    let (mut total, mut kept) = (0, 0);
    for iteration in 0..iterations() {
        let tmp = common::memory_tempdir();
        let file = tmp.path().join("values.pm");
        let dash = iteration % 2 == 1;
        let wait_ms = rng.random_range(20..400);
        let variant = if dash { "dash" } else { "elimda" };
        let acked = common::run_and_kill(
            "hash_values_kill_child",
            &[
                (CHILD_ENV, file.display().to_string()),
                (VARIANT_ENV, variant.to_string()),
            ],
            wait_ms,
        );
        let ready = Path::new(&format!("{}.ready", file.display())).exists();
        if !ready {
            assert_eq!(acked, 0, "writes acknowledged before the region existed");
            continue;
        }
        let found = read_back(&file, dash);
        let what = format!("{variant}, iteration {iteration} ({wait_ms} ms, {acked} acknowledged)");
        // A write's operations are separate index operations: the one in flight may be cut between them.
        let mut state = state_after(acked);
        let mut m = (state == found).then_some(0);
        for (n, (k, v)) in write_ops(acked).into_iter().enumerate() {
            match v {
                Some(v) => state.insert(k, v),
                None => state.remove(&k),
            };
            if m.is_none() && state == found {
                m = Some(n + 1);
            }
        }
        let m = m.unwrap_or_else(|| {
            let want = state_after(acked);
            let differ = want.iter().filter(|(k, v)| found.get(k) != Some(v)).count();
            let extra = found.keys().filter(|k| !want.contains_key(k)).count();
            panic!("{what}: not the state after {acked} writes and a prefix of the next ({differ} differ, {extra} extra)")
        });
        kept += u64::from(m > 0);
        total += acked;
        eprintln!("{what}: recovered the state after {m} writes");
    }
    eprintln!(
        "{} iterations: {total} acknowledged writes; the write in flight survived {kept} times",
        iterations()
    );
}
