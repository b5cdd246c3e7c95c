//! Random operation sequences against `std::collections::HashMap`, with reopen (drop the index and
//! recover from the same region) at random points.

use std::collections::HashMap;

use proptest::prelude::*;

use super::{assert_matches, tiny_config};
use crate::index::hash::{HashConfig, HashIndex};
use crate::storage::pm::{MmapRegion, PersistMode};

#[derive(Debug, Clone)]
enum Op {
    Insert(u64, u64),
    Remove(u64),
    Get(u64),
    Reopen(usize),
}

fn key() -> impl Strategy<Value = u64> {
    prop_oneof![
        8 => 0u64..320,
        1 => prop_oneof![Just(0u64), Just(u64::MAX), Just(1 << 63), any::<u64>()],
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => (key(), prop_oneof![Just(0u64), Just(u64::MAX), any::<u64>()]).prop_map(|(k, v)| Op::Insert(k, v)),
        4 => key().prop_map(Op::Remove),
        4 => key().prop_map(Op::Get),
        1 => (1usize..5).prop_map(Op::Reopen),
    ]
}

fn cases() -> u32 {
    std::env::var("STRATA_PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(24)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn matches_hashmap_across_reopens(ops in prop::collection::vec(op(), 1..1200)) {
        let pm = MmapRegion::anonymous(1 << 20, PersistMode::Adr).unwrap();
        let mut index = HashIndex::create(&pm, tiny_config()).unwrap();
        let mut model = HashMap::new();
        let mut peak_lf = 0f64;
        for op in ops {
            match op {
                Op::Insert(k, v) => {
                    index.insert(k, v).unwrap();
                    model.insert(k, v);
                }
                Op::Remove(k) => {
                    prop_assert_eq!(index.remove(k).unwrap(), model.remove(&k).is_some());
                }
                Op::Get(k) => prop_assert_eq!(index.get(k).unwrap(), model.get(&k).copied()),
                Op::Reopen(threads) => {
                    drop(index);
                    index = HashIndex::recover_with_threads(&pm, threads).unwrap();
                    assert_matches(&index, &model);
                }
            }
            prop_assert_eq!(index.len(), model.len() as u64);
            peak_lf = peak_lf.max(index.load_factor());
            prop_assert!(index.load_factor() <= 0.875);
        }
        assert_matches(&index, &model);
        drop(index);
        let index = HashIndex::open(&pm).unwrap();
        assert_matches(&index, &model);
    }
}

#[test]
fn load_factor_saw_tooth_between_7_16_and_7_8() {
    let pm = MmapRegion::anonymous(8 << 20, PersistMode::Eadr).unwrap();
    let config = HashConfig {
        log_lines: 1024,
        ..tiny_config()
    };
    let mut index = HashIndex::create(&pm, config).unwrap();
    let mut peaks = Vec::new();
    let mut last = 0.0;
    for k in 0..6000u64 {
        index
            .insert(k.wrapping_mul(0x9E37_79B9_7F4A_7C15), k)
            .unwrap();
        let lf = index.load_factor();
        if lf < last {
            // A doubling halves the load: from at most 7/8 to at most 7/16.
            assert!(
                (lf * 2.0 - last).abs() < 1e-9 + 2.0 / index.capacity() as f64,
                "{last} -> {lf}"
            );
            peaks.push(last);
        }
        last = lf;
    }
    eprintln!("load-factor peaks before each doubling: {peaks:?}");
    assert!(peaks.len() >= 4, "{peaks:?}");
    assert!(peaks.iter().all(|&p| p <= 0.875), "{peaks:?}");
    // The first doublings (few buckets) come at exactly 7/8; with more buckets one may fill up first.
    assert!(peaks[..4].iter().all(|&p| p > 0.87), "{peaks:?}");
    assert!(peaks.iter().all(|&p| p > 0.6), "{peaks:?}");
    assert_eq!(index.stats().grows as usize, peaks.len());
    index.check_invariants().unwrap();
}
