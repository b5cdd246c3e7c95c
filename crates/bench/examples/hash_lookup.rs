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
use strata_bench::suites::hash::MixHasher;
use strata_bench::suites::hash::probe::{arg, thread_cpu_ns, value, xorshift};

/// Runs `f` over `keys`, returns (wall ns, cpu ns) per key (NaN for no keys: a kind not run); `f` returns
/// whether the answer was right.
fn timed(keys: &[u64], mut f: impl FnMut(u64) -> bool) -> (f64, f64) {
    if keys.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let (t, c) = (Instant::now(), thread_cpu_ns());
    let mut wrong = 0u64;
    for &k in keys {
        wrong += u64::from(!f(k));
    }
    let (wall, cpu) = (t.elapsed().as_nanos() as f64, (thread_cpu_ns() - c) as f64);
    assert_eq!(wrong, 0, "wrong answers");
    let n = keys.len() as f64;
    (wall / n, cpu / n)
}

fn main() -> strata::Result<()> {
    let n: usize = arg(1, 1_000_000);
    let rounds: usize = arg(2, 3);
    let only: String = arg(3, String::new());
    let pbucket: u64 = arg(4, 4096);
    let kinds: String = arg(5, "both".into());
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
