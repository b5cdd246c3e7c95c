//! Multi-thread stress of the learned index against per-writer models while compactions, splits and
//! group merges run: writers own disjoint keys and check read-your-writes after every operation (they
//! mostly insert in the first half, so groups grow and split, and mostly remove in the second, so groups
//! shrink and merge); a reader checks that values are never torn and never go back in time; a snapshot
//! scanner checks that batches are seen whole and that scans are sorted; at the end the index must equal
//! the union of the writers' models.
//! `STRATA_LEARNED_STRESS` multiplies the operation count (default 1).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use strata::Direction;
use strata::lab::index::learned::{LearnedIndex, LearnedOptions, Maintainer};

const WRITERS: u64 = 2;
const PAIR_OFFSET: u64 = 1 << 40;

fn scale() -> u64 {
    std::env::var("STRATA_LEARNED_STRESS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

fn value(key: u64, counter: u64) -> Vec<u8> {
    let mut v = key.to_le_bytes().to_vec();
    v.extend_from_slice(&counter.to_le_bytes());
    v.resize(16 + (counter % 7) as usize, 0xAB);
    v
}

fn decode(key: u64, v: &[u8]) -> u64 {
    assert!(v.len() >= 16, "short value for {key}");
    let k = u64::from_le_bytes(v[..8].try_into().expect("8 bytes"));
    let pair_ok = k == key || k + PAIR_OFFSET == key;
    assert!(pair_ok, "value of key {k} found under {key}");
    let c = u64::from_le_bytes(v[8..16].try_into().expect("8 bytes"));
    assert_eq!(v.len(), 16 + (c % 7) as usize, "torn value under {key}");
    c
}

/// Keys of writer `w`: its single keys and its pair bases.
fn owns(w: u64, rng: &mut ChaCha8Rng) -> (u64, bool) {
    if rng.random_bool(0.2) {
        (1_000_000 + w * 10_000 + rng.random_range(0..300u64), true)
    } else {
        (rng.random_range(0..3000u64) * WRITERS + w, false)
    }
}

#[test]
fn writers_readers_and_snapshots_agree_with_models_while_compactions_run() {
    let opts = LearnedOptions {
        group_size: 64,
        max_group: 128,
        compact_at: 8,
        inline_compact_at: 64,
        // Splits leave parts of at least group_size records, so adjacent groups are small enough together to
        // merge only after many removals at 48; at 96 the removals of the run's second half merge some every
        // run (the assertion below needs them).
        merge_below: 96,
    };
    let ix = Arc::new(LearnedIndex::bulk_load(
        opts,
        (0..6000u64).step_by(3).map(|k| (k, value(k, 0))),
    ));
    let initial: BTreeMap<u64, Vec<u8>> =
        (0..6000u64).step_by(3).map(|k| (k, value(k, 0))).collect();
    let maintainer = Maintainer::start(&ix, Duration::from_micros(50));
    let stop = Arc::new(AtomicBool::new(false));
    let ops = 20_000 * scale();

    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let ix = ix.clone();
            let mut model: BTreeMap<u64, Vec<u8>> = initial
                .iter()
                .filter(|(k, _)| *k % WRITERS == w)
                .map(|(k, v)| (*k, v.clone()))
                .collect();
            std::thread::spawn(move || {
                let mut rng = ChaCha8Rng::seed_from_u64(w);
                let mut out = Vec::new();
                for i in 1..=ops {
                    let counter = i * WRITERS + w;
                    let (k, pair) = owns(w, &mut rng);
                    let del = rng.random_bool(if i * 2 <= ops { 0.2 } else { 0.7 });
                    if pair {
                        let (v1, v2) = (value(k, counter), value(k, counter));
                        if del {
                            ix.apply(&[(k, None), (k + PAIR_OFFSET, None)]);
                            model.remove(&k);
                            model.remove(&(k + PAIR_OFFSET));
                        } else {
                            ix.apply(&[(k, Some(&v1)), (k + PAIR_OFFSET, Some(&v2))]);
                            model.insert(k, v1);
                            model.insert(k + PAIR_OFFSET, v2);
                        }
                    } else if del {
                        assert_eq!(ix.remove(k), model.remove(&k).is_some(), "remove {k}");
                    } else {
                        let v = value(k, counter);
                        ix.put(k, &v);
                        model.insert(k, v);
                    }
                    for key in [k, k + PAIR_OFFSET] {
                        if key > k && !pair {
                            continue;
                        }
                        let found = ix.get(key, &mut out);
                        assert_eq!(
                            found.then_some(&out),
                            model.get(&key),
                            "read-your-writes of {key}"
                        );
                    }
                }
                model
            })
        })
        .collect();

    let reader = {
        let (ix, stop) = (ix.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut rng = ChaCha8Rng::seed_from_u64(99);
            let mut last: BTreeMap<u64, u64> = BTreeMap::new();
            let mut out = Vec::new();
            let mut reads = 0u64;
            while !stop.load(Ordering::Acquire) {
                let w = rng.random_range(0..WRITERS);
                let (k, _) = owns(w, &mut rng);
                if ix.get(k, &mut out) {
                    let c = decode(k, &out);
                    let prev = last.insert(k, c).unwrap_or(0);
                    assert!(c >= prev, "key {k} went back from counter {prev} to {c}");
                }
                reads += 1;
            }
            reads
        })
    };

    let scanner = {
        let (ix, stop) = (ix.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut scans = 0u64;
            while !stop.load(Ordering::Acquire) {
                let snap = ix.snapshot();
                let mut seen: BTreeMap<u64, u64> = BTreeMap::new();
                let mut prev: Option<u64> = None;
                let dir = if scans.is_multiple_of(2) {
                    Direction::Forward
                } else {
                    Direction::Reverse
                };
                snap.scan(1_000_000, u64::MAX, dir, usize::MAX, &mut |k, v| {
                    if let Some(p) = prev {
                        assert!(
                            if dir == Direction::Forward {
                                k > p
                            } else {
                                k < p
                            },
                            "scan order {p} then {k}"
                        );
                    }
                    prev = Some(k);
                    seen.insert(k, decode(k, v));
                    true
                });
                for (&k, &c) in seen.range(..PAIR_OFFSET) {
                    assert_eq!(
                        seen.get(&(k + PAIR_OFFSET)),
                        Some(&c),
                        "half a batch at {k}"
                    );
                }
                for (&k, _) in seen.range(PAIR_OFFSET..) {
                    assert!(seen.contains_key(&(k - PAIR_OFFSET)), "half a batch at {k}");
                }
                scans += 1;
            }
            scans
        })
    };

    let compactor = {
        let (ix, stop) = (ix.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Acquire) {
                ix.compact_all();
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };

    let mut expected = BTreeMap::new();
    for w in writers {
        expected.extend(w.join().expect("writer"));
    }
    stop.store(true, Ordering::Release);
    let reads = reader.join().expect("reader");
    let scans = scanner.join().expect("scanner");
    compactor.join().expect("compactor");
    drop(maintainer);
    let mut got = BTreeMap::new();
    ix.scan(0, u64::MAX, Direction::Forward, usize::MAX, &mut |k, v| {
        got.insert(k, v.to_vec());
        true
    });
    assert_eq!(got, expected);
    assert_eq!(ix.len(), expected.len() as u64);
    let stats = ix.learned_stats();
    assert!(stats.compactions > 10, "{stats:?}");
    assert!(stats.splits > 0, "{stats:?}");
    assert!(stats.merges > 0, "{stats:?}");
    eprintln!("reads {reads}, scans {scans}, {stats:?}");
}
