//! Many threads on one index: writers insert, update, delete and look up, each on its own keys (keys ≡ t
//! mod T) so each keeps an exact model of them and checks every answer; a reader looks up everyone's keys
//! meanwhile and checks that every value it finds was written for that key. Small segments make splits
//! and directory doublings happen under the load. Then the whole index is checked against the merged
//! models, and again after a clean reopen and after a reopen as after a crash.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::assert_matches;
use crate::index::hash::dash::layout::SB_CLEAN;
use crate::index::hash::dash::{DashConfig, DashIndex};
use crate::storage::pm::{MmapRegion, PersistMode, Pm};

const WRITERS: u64 = 4;
const KEYS_PER_WRITER: u64 = 3_000;

/// Operations per writer: `STRATA_STRESS_OPS`, 30,000 by default.
fn ops() -> u64 {
    std::env::var("STRATA_STRESS_OPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30_000)
}

/// The value operation `i` writes for key `k`: the key in the high half.
fn value(k: u64, i: u64) -> u64 {
    k << 32 | (i & 0xFFFF_FFFF)
}

fn writer(index: &DashIndex<&MmapRegion>, t: u64) -> HashMap<u64, u64> {
    let mut rng = ChaCha8Rng::seed_from_u64(t);
    let mut model = HashMap::new();
    for i in 0..ops() {
        let k = rng.random_range(0..KEYS_PER_WRITER) * WRITERS + t;
        match rng.random_range(0..10) {
            0..6 => {
                index.insert(k, value(k, i)).unwrap();
                model.insert(k, value(k, i));
            }
            6..8 => assert_eq!(index.remove(k).unwrap(), model.remove(&k).is_some(), "{k}"),
            _ => assert_eq!(index.get(k).unwrap(), model.get(&k).copied(), "{k}"),
        }
    }
    model
}

#[test]
fn threads_insert_delete_and_look_up_against_a_model() {
    let pm = MmapRegion::anonymous(64 << 20, PersistMode::Eadr).unwrap();
    let config = DashConfig {
        segment_buckets: 8,
        stash_buckets: 2,
        initial_depth: 0,
    };
    let index = DashIndex::create(&pm, config).unwrap();
    let done = AtomicBool::new(false);
    let (model, looked) = std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut rng = ChaCha8Rng::seed_from_u64(99);
            let mut found = 0u64;
            while !done.load(Ordering::Acquire) {
                let k = rng.random_range(0..KEYS_PER_WRITER * WRITERS);
                if let Some(v) = index.get(k).unwrap() {
                    assert_eq!(v >> 32, k, "a value of another key");
                    found += 1;
                }
            }
            found
        });
        let writers: Vec<_> = (0..WRITERS)
            .map(|t| {
                s.spawn({
                    let index = &index;
                    move || writer(index, t)
                })
            })
            .collect();
        let mut model = HashMap::new();
        for w in writers {
            model.extend(w.join().unwrap());
        }
        done.store(true, Ordering::Release);
        (model, reader.join().unwrap())
    });
    let s = index.stats();
    eprintln!(
        "{s:?}; {} keys, {} segments, reader found {looked}",
        model.len(),
        index.segments()
    );
    assert!(s.splits >= 50 && s.doublings >= 5, "{s:?}");
    assert!(s.displacements > 0 && s.stash_inserts > 0, "{s:?}");
    assert!(looked > 0);
    assert_matches(&index, &model);
    let index = DashIndex::open(index.into_pm()).unwrap();
    assert_matches(&index, &model);
    let pm = index.into_pm();
    pm.store_u64_atomic(SB_CLEAN, 0).unwrap();
    assert_matches(&DashIndex::open(pm).unwrap(), &model);
}
