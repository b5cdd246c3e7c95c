//! A probe of the hash family's point lookups, for profiling (`perf record`, `valgrind --tool=callgrind`):
//! preloads the ElimDA-style index (on an anonymous eADR region, as the `hash` suite does) and a std
//! `HashMap` with the suite's multiply-xorshift hasher ([`MixHasher`]) with the same `n` uniform random keys, then times
//! `n` lookups of present keys and `n` of absent keys on each, one lookup at a time, in the same order,
//! and prints wall and thread-CPU nanoseconds per lookup and the ratio.
//!
//! `cargo run --release -p strata-bench --example hash_lookup -- <records> [rounds] [only: elimda|hashbrown]
//! [pbucket-bytes] [lookups: pos|neg|both]` (`pos` or `neg` skips the other kind, so that a callgrind run
//! with 1 round minus one with 0 rounds counts one kind's instructions and simulated cache misses)

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::time::Instant;

use strata::lab::index::hash::{HashConfig, HashIndex};
use strata::lab::storage::pm::{MmapRegion, PersistMode};
use strata_bench::measure::schedstat;
use strata_bench::suites::hash::MixHasher;

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// CPU time of this thread, in nanoseconds (0 where `/proc/thread-self/schedstat` is unreadable).
fn thread_cpu_ns() -> u64 {
    schedstat("/proc/thread-self/schedstat").map_or(0, |(cpu, _)| cpu)
}

/// Runs `f` over `keys`, returns (wall ns, cpu ns) per key; `f` returns whether the answer was right.
fn timed(keys: &[u64], mut f: impl FnMut(u64) -> bool) -> (f64, f64) {
    let (t, c) = (Instant::now(), thread_cpu_ns());
    let mut wrong = 0u64;
    for &k in keys {
        wrong += u64::from(!f(k));
    }
    let (wall, cpu) = (t.elapsed().as_nanos() as f64, (thread_cpu_ns() - c) as f64);
    assert_eq!(wrong, 0, "wrong answers");
    let n = keys.len().max(1) as f64;
    (wall / n, cpu / n)
}

fn value(k: u64) -> u64 {
    k.rotate_left(17) ^ 0x5555
}

fn main() -> strata::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args
        .get(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let rounds: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(3);
    let only = args.get(3).cloned().unwrap_or_default();
    let pbucket: u64 = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(4096);
    let kinds = args.get(5).cloned().unwrap_or_else(|| "both".into());
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let present: Vec<u64> = (0..n).map(|_| xorshift(&mut x)).collect();
    let mut absent: Vec<u64> = (0..n).map(|_| xorshift(&mut x) | 1 << 63).collect();
    let present: Vec<u64> = present.into_iter().map(|k| k & !(1 << 63)).collect();
    let mut order = present.clone();
    for i in (1..order.len()).rev() {
        order.swap(i, (xorshift(&mut x) % (i as u64 + 1)) as usize);
    }
    if kinds == "neg" {
        order.clear();
    }
    if kinds == "pos" {
        absent.clear();
    }
    let run_elimda = only.is_empty() || only == "elimda";
    let run_map = only.is_empty() || only == "hashbrown";
    let idx = if run_elimda {
        let bytes = (n as u64 * 256 + (64 << 20)).next_multiple_of(1 << 20);
        let region = MmapRegion::anonymous(bytes, PersistMode::Eadr)?;
        let config = HashConfig {
            pbucket_bytes: pbucket,
            ..HashConfig::default()
        };
        let idx = HashIndex::create(region, config)?;
        for &k in &present {
            idx.insert(k, value(k))?;
        }
        Some(idx)
    } else {
        None
    };
    let map = run_map.then(|| {
        let mut map: HashMap<u64, u64, BuildHasherDefault<MixHasher>> = HashMap::default();
        for &k in &present {
            map.insert(k, value(k));
        }
        map
    });
    for round in 0..rounds {
        if let Some(idx) = &idx {
            let pos = timed(&order, |k| idx.get(k).ok() == Some(Some(value(k))));
            let neg = timed(&absent, |k| idx.get(k).ok() == Some(None));
            println!(
                "round {round} elimda    pos {:6.1} ns wall {:6.1} cpu   neg {:6.1} wall {:6.1} cpu",
                pos.0, pos.1, neg.0, neg.1
            );
        }
        if let Some(map) = &map {
            let pos = timed(&order, |k| map.get(&k) == Some(&value(k)));
            let neg = timed(&absent, |k| !map.contains_key(&k));
            println!(
                "round {round} hashbrown pos {:6.1} ns wall {:6.1} cpu   neg {:6.1} wall {:6.1} cpu",
                pos.0, pos.1, neg.0, neg.1
            );
        }
    }
    Ok(())
}
