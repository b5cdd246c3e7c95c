//! A probe of the hash family's writes, for profiling (`perf record`, `valgrind --tool=callgrind`): the
//! `hash` suite's main write phases on one thread — preload `n` uniform random keys into a fresh index on
//! an anonymous eADR region, then `n/2` inserts of new keys, then `n/2` deletes of present keys (drawn
//! from all `1.5 n`) — and prints the wall and thread-CPU nanoseconds per operation of each phase, with
//! the index's counters. `phases` picks which of `insert` and `delete` run (the preload always does), so
//! that a callgrind run of `preload` alone, subtracted from one with a phase, counts that phase's
//! instructions.
//!
//! `cargo run --release -p strata-bench --example hash_write -- <records> [elimda|dash] [phases:
//! insert,delete] [rounds] [pbucket-bytes]`

use std::time::Instant;

use strata::lab::index::hash::PmHashIndex;
use strata::lab::index::hash::dash::{DashConfig, DashIndex};
use strata::lab::index::hash::{HashConfig, HashIndex};
use strata::lab::storage::pm::{MmapRegion, PersistMode};
use strata_bench::suites::hash::probe::{arg, thread_cpu_ns, value, xorshift};

/// The keys of one run: preload, inserts, deletes.
struct Keys {
    preload: Vec<u64>,
    insert: Vec<u64>,
    delete: Vec<u64>,
}

fn keys(n: usize) -> Keys {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut seen = std::collections::HashSet::with_capacity(n * 2);
    let mut draw = |count: usize| {
        let mut v = Vec::with_capacity(count);
        while v.len() < count {
            let k = xorshift(&mut x);
            if seen.insert(k) {
                v.push(k);
            }
        }
        v
    };
    let preload = draw(n);
    let insert = draw(n / 2);
    let mut delete: Vec<u64> = preload.iter().chain(&insert).copied().collect();
    for i in (1..delete.len()).rev() {
        delete.swap(i, (xorshift(&mut x) % (i as u64 + 1)) as usize);
    }
    delete.truncate(n / 2);
    Keys {
        preload,
        insert,
        delete,
    }
}

/// Runs `f` over `keys`; prints wall and CPU ns per key under `label`.
fn timed(
    label: &str,
    keys: &[u64],
    mut f: impl FnMut(u64) -> strata::Result<bool>,
) -> strata::Result<()> {
    let (t, c) = (Instant::now(), thread_cpu_ns());
    let mut wrong = 0u64;
    for &k in keys {
        wrong += u64::from(!f(k)?);
    }
    let (wall, cpu) = (t.elapsed().as_nanos() as f64, (thread_cpu_ns() - c) as f64);
    assert_eq!(wrong, 0, "{label}: wrong answers");
    let n = keys.len().max(1) as f64;
    println!("{label:8} {:7.1} ns wall {:7.1} ns cpu", wall / n, cpu / n);
    Ok(())
}

/// The process's `AnonHugePages` (MiB): whether the kernel backed the index's arrays with huge pages
/// changes every random access by a TLB miss.
fn anon_huge_mib() -> u64 {
    std::fs::read_to_string("/proc/self/smaps_rollup")
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| {
                let kb = l
                    .strip_prefix("AnonHugePages:")?
                    .trim()
                    .strip_suffix("kB")?;
                kb.trim().parse::<u64>().ok()
            })
        })
        .map_or(0, |kb| kb / 1024)
}

fn run<I: PmHashIndex<MmapRegion>>(mut idx: I, k: &Keys, phases: &str) -> strata::Result<I> {
    for &key in &k.preload {
        idx.insert(key, value(key))?;
    }
    if phases.contains("insert") {
        timed("insert", &k.insert, |key| {
            idx.insert(key, value(key)).map(|()| true)
        })?;
    }
    if phases.contains("delete") {
        // Without the insert phase, half the deletes find nothing (their keys were never inserted).
        let all = phases.contains("insert");
        timed("delete", &k.delete, |key| Ok(idx.remove(key)? || !all))?;
    }
    println!("anon huge pages {} MiB", anon_huge_mib());
    Ok(idx)
}

fn main() -> strata::Result<()> {
    let n: usize = arg(1, 1_000_000);
    let engine: String = arg(2, "elimda".into());
    let phases: String = arg(3, "insert,delete".into());
    let rounds: usize = arg(4, 1);
    let pbucket: u64 = arg(5, 4096);
    let k = keys(n);
    let bytes = (n as u64 * 3 / 2 * 256 + (64 << 20)).next_multiple_of(1 << 20);
    for round in 0..rounds {
        println!("round {round} {engine}");
        let region = MmapRegion::anonymous(bytes, PersistMode::Eadr)?;
        match engine.as_str() {
            "dash" => {
                let idx = DashIndex::create(region, DashConfig::default())?;
                run(idx, &k, &phases)?;
            }
            _ => {
                let config = HashConfig {
                    pbucket_bytes: pbucket,
                    ..HashConfig::default()
                };
                let idx = run(HashIndex::create(region, config)?, &k, &phases)?;
                println!("{:?}", idx.stats());
            }
        }
    }
    Ok(())
}
