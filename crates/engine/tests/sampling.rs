//! Statistical tests of `sample_range` (Olken's method on the counted B+-tree): chi-square uniformity with
//! fixed seeds, exclusion of deleted and out-of-range records, and the empty range.
//!
//! The chi-square threshold is the upper 1e-6 quantile of the chi-square distribution (Wilson–Hilferty
//! approximation), so a correct sampler fails a given seed with probability below 1e-6.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the test failing

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;
use std::sync::Arc;
use strata::Config;
use strata::vfs::MemVfs;
use strata::{Db, Options};

/// Upper quantile of chi-square with `df` degrees of freedom for a normal quantile `z` (Wilson–Hilferty).
fn chi_square_critical(df: f64, z: f64) -> f64 {
    let a = 2.0 / (9.0 * df);
    df * (1.0 - a + z * a.sqrt()).powi(3)
}

/// z such that P(Z > z) = 1e-6.
const Z_1E6: f64 = 4.753_424;

fn db_with(keys: &[u64]) -> Db<u64, u64> {
    let options = Options {
        vfs: Arc::new(MemVfs::new()),
        cache_bytes: 1 << 20,
        ..Options::default()
    };
    let db = Db::<u64, u64>::create("/s", &Config::default(), &options).unwrap();
    let mut shuffled = keys.to_vec();
    shuffled.shuffle(&mut ChaCha8Rng::seed_from_u64(1));
    for k in shuffled {
        db.insert(&k, &(k * 3)).unwrap();
    }
    db
}

fn chi_square(counts: &HashMap<u64, u64>, population: &[u64], samples: u64) -> f64 {
    let expected = samples as f64 / population.len() as f64;
    population
        .iter()
        .map(|k| {
            let o = *counts.get(k).unwrap_or(&0) as f64;
            (o - expected).powi(2) / expected
        })
        .sum()
}

#[test]
fn samples_are_uniform_over_a_range_spanning_many_leaves() {
    // 60,000 keys inserted in random order: a three-level tree with half-full nodes.
    let keys: Vec<u64> = (0..60_000).map(|i| i * 2).collect();
    let db = db_with(&keys);
    // Delete every seventh key inside and around the range.
    for k in (0..60_000u64).map(|i| i * 2).filter(|k| k % 7 == 0) {
        db.delete(&k).unwrap();
    }
    assert!(
        db.stats().unwrap().tree.height >= 3,
        "the test wants a multi-level tree"
    );
    let (lo, hi) = (10_001u64, 14_000u64);
    let population: Vec<u64> = (lo..=hi).filter(|k| k % 2 == 0 && k % 7 != 0).collect();
    assert_eq!(db.count_range(lo..=hi).unwrap(), population.len() as u64);

    for seed in [11u64, 12, 13] {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let per_bucket = 60;
        let k = population.len() * per_bucket;
        let samples = db.sample_range(&lo, &hi, k, &mut rng).unwrap();
        assert_eq!(samples.len(), k);
        let mut counts = HashMap::new();
        for (key, value) in samples {
            assert!(
                (lo..=hi).contains(&key),
                "sample {key} outside [{lo}, {hi}]"
            );
            assert_ne!(key % 7, 0, "deleted key {key} was sampled");
            assert_eq!(value, key * 3);
            *counts.entry(key).or_insert(0u64) += 1;
        }
        let stat = chi_square(&counts, &population, k as u64);
        let critical = chi_square_critical((population.len() - 1) as f64, Z_1E6);
        assert!(
            stat < critical,
            "seed {seed}: chi-square {stat:.1} ≥ critical {critical:.1}"
        );
        // A sampler that ignored part of the range would be far off; make sure the test can see that.
        let skewed: HashMap<u64, u64> = counts
            .iter()
            .map(|(&k, &c)| (k, if k < 12_000 { c * 2 } else { c }))
            .collect();
        assert!(chi_square(&skewed, &population, skewed.values().sum()) > critical);
    }
}

#[test]
fn samples_follow_the_tree_through_overwrites_and_reopen() {
    let keys: Vec<u64> = (0..5_000).collect();
    let db = db_with(&keys);
    for k in 0..5_000u64 {
        if k % 3 == 0 {
            db.delete(&k).unwrap();
        }
    }
    let population: Vec<u64> = (100..=400).filter(|k| k % 3 != 0).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let k = population.len() * 80;
    let samples = db.sample_range(&100, &400, k, &mut rng).unwrap();
    let mut counts = HashMap::new();
    for (key, _) in samples {
        assert!(key % 3 != 0 && (100..=400).contains(&key));
        *counts.entry(key).or_insert(0u64) += 1;
    }
    let stat = chi_square(&counts, &population, k as u64);
    assert!(stat < chi_square_critical((population.len() - 1) as f64, Z_1E6));
}

#[test]
fn empty_and_single_record_ranges() {
    let db = db_with(&[10, 20, 30]);
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    assert!(db.sample_range(&11, &19, 100, &mut rng).unwrap().is_empty());
    assert!(
        db.sample_range(&40, &30, 100, &mut rng).unwrap().is_empty(),
        "inverted range is empty"
    );
    assert_eq!(db.count_range(11..20).unwrap(), 0);
    let one = db.sample_range(&15, &25, 50, &mut rng).unwrap();
    assert_eq!(one.len(), 50);
    assert!(one.iter().all(|&(k, v)| k == 20 && v == 60));
    assert_eq!(db.sample_range(&0, &100, 0, &mut rng).unwrap().len(), 0);
    let too_many = db.sample_range(&0, &100, usize::MAX, &mut rng).unwrap_err();
    assert!(
        matches!(too_many, strata::Error::InvalidArgument(_)),
        "{too_many}"
    );
}

#[test]
fn same_seed_gives_same_samples() {
    let keys: Vec<u64> = (0..3_000).collect();
    let db = db_with(&keys);
    let a = db
        .sample_range(&0, &2_999, 500, &mut ChaCha8Rng::seed_from_u64(9))
        .unwrap();
    let b = db
        .sample_range(&0, &2_999, 500, &mut ChaCha8Rng::seed_from_u64(9))
        .unwrap();
    assert_eq!(a, b);
}
