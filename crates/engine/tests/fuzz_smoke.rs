//! A short run of every fuzz target (`strata::lab::fuzz`) on stable Rust: seeded random inputs and seeded
//! mutations (byte flips, overwrites, truncations, extensions, splices) of the realistic seed corpus. The
//! long, coverage-guided runs use cargo-fuzz (`fuzz/README.md`); this catches regressions in every CI run.
//!
//! `STRATA_FUZZ_SMOKE_ITERS` sets the inputs per target (default 3000).

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the test failing

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use strata::lab::fuzz::{TARGETS, seeds};

fn iterations() -> usize {
    std::env::var("STRATA_FUZZ_SMOKE_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3000)
}

fn mutate(base: &[u8], rng: &mut ChaCha8Rng) -> Vec<u8> {
    let mut b = base.to_vec();
    for _ in 0..rng.random_range(1..=4) {
        match rng.random_range(0..6) {
            0 if !b.is_empty() => {
                let i = rng.random_range(0..b.len());
                b[i] ^= 1 << rng.random_range(0..8);
            }
            1 if !b.is_empty() => {
                let i = rng.random_range(0..b.len());
                let n = rng.random_range(1..=8).min(b.len() - i);
                rng.fill(&mut b[i..i + n]);
            }
            2 => {
                let n = rng.random_range(0..=b.len());
                b.truncate(n);
            }
            3 => {
                let n = rng.random_range(1..64);
                b.extend((0..n).map(|_| rng.random::<u8>()));
            }
            4 if !b.is_empty() => {
                // An interesting integer somewhere.
                let i = rng.random_range(0..b.len());
                let v: u64 =
                    [0, 1, u64::MAX, u32::MAX as u64, 1 << 40, 4096][rng.random_range(0..6)];
                let bytes = v.to_le_bytes();
                let n = bytes.len().min(b.len() - i);
                b[i..i + n].copy_from_slice(&bytes[..n]);
            }
            _ => {
                if b.len() > 2 {
                    let i = rng.random_range(0..b.len() / 2);
                    let j = rng.random_range(b.len() / 2..b.len());
                    b.copy_within(i..i + (j - i) / 2, j - (j - i) / 2);
                }
            }
        }
    }
    b
}

#[test]
fn every_fuzz_target_survives_random_and_mutated_inputs() {
    let corpus = seeds();
    let n = iterations();
    for (name, target) in TARGETS {
        let mine: Vec<&Vec<u8>> = corpus
            .iter()
            .filter(|(t, _)| t == name)
            .map(|(_, b)| b)
            .collect();
        assert!(!mine.is_empty(), "target {name} has no seed");
        let started = std::time::Instant::now();
        let mut rng = ChaCha8Rng::seed_from_u64(name.len() as u64 * 7919);
        for seed in &mine {
            target(seed);
        }
        for i in 0..n {
            let input = if i % 4 == 0 || mine.is_empty() {
                let len = rng.random_range(0..9000);
                (0..len).map(|_| rng.random::<u8>()).collect()
            } else {
                mutate(mine[rng.random_range(0..mine.len())], &mut rng)
            };
            target(&input);
        }
        eprintln!(
            "{name}: {} seeds, {n} inputs in {:.2} s",
            mine.len(),
            started.elapsed().as_secs_f64()
        );
    }
}

/// Inputs that once crashed a fuzz target (`tests/fuzz_regressions/<target>/*`) run again, with overflow
/// checks or not.
#[test]
fn fuzz_regressions_stay_fixed() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz_regressions");
    let mut ran = 0;
    for (name, target) in TARGETS {
        let Ok(entries) = std::fs::read_dir(root.join(name)) else {
            continue;
        };
        for entry in entries {
            let bytes = std::fs::read(entry.unwrap().path()).unwrap();
            target(&bytes);
            ran += 1;
        }
    }
    assert!(
        ran > 0,
        "no regression inputs found under {}",
        root.display()
    );
}
