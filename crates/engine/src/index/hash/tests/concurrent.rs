//! Many threads on one index against a model: writers on their own keys (every acknowledged write visible
//! to its writer at once and to everyone after; the final state equals each key's last write), writers
//! racing on shared keys (the final value of each key is some thread's last write to it), lookups during
//! doublings, and crashes in the middle of a multi-threaded run (every write acknowledged before the crash
//! survives it, nothing else appears).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{assert_matches, tiny_config};
use crate::index::hash::{HashConfig, HashIndex};
use crate::storage::pm::{CrashPlan, MmapRegion, PersistMode, Pm, ShadowPm};

const THREADS: u64 = 4;

/// Key `i` of thread `t`'s own keys.
fn own_key(t: u64, i: u64) -> u64 {
    (i * THREADS + t).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// Thread `t`'s workload on its own keys `0..keys`: puts (values name the thread), deletes and lookups,
/// each checked against the thread's model; lookups of other threads' keys must return values they wrote.
fn own_keys_workload<P: Pm>(
    index: &HashIndex<P>,
    t: u64,
    ops: u64,
    keys: u64,
) -> HashMap<u64, u64> {
    let mut rng = ChaCha8Rng::seed_from_u64(t);
    let mut model = HashMap::new();
    for op in 0..ops {
        let k = own_key(t, rng.random_range(0..keys));
        match rng.random_range(0..10) {
            0..6 => {
                let v = op << 8 | t;
                index.insert(k, v).unwrap();
                model.insert(k, v);
            }
            6..8 => assert_eq!(index.remove(k).unwrap(), model.remove(&k).is_some()),
            8 => assert_eq!(index.get(k).unwrap(), model.get(&k).copied(), "own key"),
            _ => {
                let other = rng.random_range(0..THREADS);
                let k = own_key(other, rng.random_range(0..keys));
                if let Some(v) = index.get(k).unwrap() {
                    assert_eq!(v & 0xFF, other, "a value {v:#x} its owner never wrote");
                }
            }
        }
    }
    model
}

/// A tiny index with two logs (four writer threads share them).
fn two_log_index<P: Pm>(pm: P) -> HashIndex<P> {
    HashIndex::create(
        pm,
        HashConfig {
            logs: 2,
            ..tiny_config()
        },
    )
    .unwrap()
}

fn run_own_keys(config: HashConfig, ops: u64, keys: u64) {
    let pm = MmapRegion::anonymous(64 << 20, PersistMode::Eadr).unwrap();
    let index = HashIndex::create(&pm, config).unwrap();
    let models: Vec<HashMap<u64, u64>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let index = &index;
                s.spawn(move || own_keys_workload(index, t, ops, keys))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let model: HashMap<u64, u64> = models.into_iter().flatten().collect();
    assert_matches(&index, &model);
    let s = index.stats();
    eprintln!("{config:?}: {s:?}");
    assert!(
        s.grows >= 3 && s.compactions > 0 && s.forced_flushes > 0,
        "{s:?}"
    );
    let index = HashIndex::recover_with_threads(index.into_pm(), 3).unwrap();
    assert_matches(&index, &model);
}

#[test]
fn writers_on_own_keys_match_the_model() {
    // Fewer logs than threads (logs are shared), then one log per thread.
    run_own_keys(
        HashConfig {
            logs: 2,
            ..tiny_config()
        },
        6000,
        1500,
    );
    run_own_keys(
        HashConfig {
            logs: THREADS,
            ..tiny_config()
        },
        6000,
        1500,
    );
}

#[test]
fn writers_racing_on_shared_keys_leave_some_last_write() {
    let pm = MmapRegion::anonymous(16 << 20, PersistMode::Eadr).unwrap();
    let index = two_log_index(&pm);
    let keys = 300u64;
    // Per thread, per key: its last write (None = delete).
    let lasts: Vec<HashMap<u64, Option<u64>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let index = &index;
                s.spawn(move || {
                    let mut rng = ChaCha8Rng::seed_from_u64(100 + t);
                    let mut last = HashMap::new();
                    for op in 0..8000u64 {
                        let k = rng.random_range(0..keys);
                        if rng.random_range(0..5) == 0 {
                            index.remove(k).unwrap();
                            last.insert(k, None);
                        } else {
                            let v = op << 8 | t;
                            index.insert(k, v).unwrap();
                            last.insert(k, Some(v));
                        }
                    }
                    last
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    index.check_invariants().unwrap();
    let mut model = HashMap::new();
    for k in 0..keys {
        let got = index.get(k).unwrap();
        let candidates: Vec<Option<u64>> =
            lasts.iter().filter_map(|l| l.get(&k).copied()).collect();
        assert!(
            candidates.is_empty() && got.is_none() || candidates.contains(&got),
            "key {k}: {got:?} is no thread's last write ({candidates:?})"
        );
        if let Some(v) = got {
            model.insert(k, v);
        }
    }
    assert_matches(&index, &model);
    let index = HashIndex::open(index.into_pm()).unwrap();
    assert_matches(&index, &model);
}

#[test]
fn lookups_during_doublings_see_every_acknowledged_insert() {
    let pm = MmapRegion::anonymous(64 << 20, PersistMode::Eadr).unwrap();
    let index = HashIndex::create(
        &pm,
        HashConfig {
            logs: 2,
            ..HashConfig::default()
        },
    )
    .unwrap();
    let n = 60_000u64;
    let done = AtomicBool::new(false);
    let acked = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..n {
                index.insert(own_key(0, i), i).unwrap();
                acked.store(i + 1, Ordering::Release);
            }
            done.store(true, Ordering::Release);
        });
        s.spawn(|| {
            let mut rng = ChaCha8Rng::seed_from_u64(7);
            while !done.load(Ordering::Acquire) {
                let upto = acked.load(Ordering::Acquire);
                if upto == 0 {
                    continue;
                }
                let i = rng.random_range(0..upto);
                assert_eq!(
                    index.get(own_key(0, i)).unwrap(),
                    Some(i),
                    "acknowledged insert {i}"
                );
                assert_eq!(index.get(own_key(1, i)).unwrap(), None);
            }
        });
    });
    assert!(index.stats().grows >= 5, "{:?}", index.stats());
    index.check_invariants().unwrap();
}

/// One write of the crash test: key, value (`None` = delete), fence count before and after it.
type Write = (u64, Option<u64>, u64, u64);

/// The values key `k` may hold after a crash at fence `at`: those of the writes acknowledged before it
/// (`after < at`) or in flight (`before < at ≤ after`) that no acknowledged write of `k` followed in real
/// time (`after < before'`); `None` too when no acknowledged write of `k` exists.
fn allowed(writes: &[Write], k: u64, at: u64) -> Vec<Option<u64>> {
    let of_k: Vec<&Write> = writes.iter().filter(|w| w.0 == k && w.2 < at).collect();
    let acked: Vec<&&Write> = of_k.iter().filter(|w| w.3 < at).collect();
    let mut out: Vec<Option<u64>> = of_k
        .iter()
        .filter(|w| !acked.iter().any(|later| w.3 < later.2))
        .map(|w| w.1)
        .collect();
    if acked.is_empty() {
        out.push(None);
    }
    out
}

/// A crash image taken at a random fence while `THREADS` threads write a shared set of keys (so a key's
/// records sit in several logs); each thread records for every write the fence count before and after it.
/// The recovered value of every key must be one the real-time order allows ([`allowed`]).
#[test]
fn crash_during_concurrent_writes_keeps_every_acknowledged_write() {
    let images = std::env::var("STRATA_CRASH_ITERATIONS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(16u64);
    let keys = 120u64;
    let mut rng = ChaCha8Rng::seed_from_u64(33);
    let mut crashed = 0;
    for round in 0..images {
        let mode = if round % 2 == 0 {
            PersistMode::Adr
        } else {
            PersistMode::Eadr
        };
        let pm = ShadowPm::new(4 << 20, mode).unwrap();
        let index = two_log_index(&pm);
        let at = pm.persist_points() + rng.random_range(50..3000);
        pm.arm_crash(CrashPlan {
            at_fence: at,
            evict_probability: 0.5,
            tear: true,
            seed: round,
        })
        .unwrap();
        let writes: Vec<Write> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|t| {
                    let (index, pm) = (&index, &pm);
                    s.spawn(move || {
                        let mut rng = ChaCha8Rng::seed_from_u64(round * 16 + t);
                        let mut log = Vec::new();
                        for op in 0..800u64 {
                            let k = own_key(0, rng.random_range(0..keys));
                            let before = pm.persist_points();
                            let v = if rng.random_range(0..5) == 0 {
                                index.remove(k).unwrap();
                                None
                            } else {
                                index.insert(k, op << 8 | t).unwrap();
                                Some(op << 8 | t)
                            };
                            log.push((k, v, before, pm.persist_points()));
                        }
                        log
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap())
                .collect()
        });
        let Some(image) = pm.take_crash_image() else {
            continue;
        };
        crashed += 1;
        let recovered = HashIndex::open(ShadowPm::from_image(image, mode).unwrap()).unwrap();
        recovered.check_invariants().unwrap();
        let state: HashMap<u64, u64> = recovered.entries_map();
        for i in 0..keys {
            let k = own_key(0, i);
            let got = state.get(&k).copied();
            let ok = allowed(&writes, k, at);
            assert!(
                ok.contains(&got),
                "round {round} ({mode:?}): key {k} is {got:?}, allowed {ok:?}"
            );
        }
        assert!(
            state.keys().all(|&k| (0..keys).any(|i| own_key(0, i) == k)),
            "phantom key"
        );
    }
    assert!(
        crashed * 4 >= images * 3,
        "{crashed} of {images} rounds reached their crash point"
    );
}

impl<P: Pm> HashIndex<P> {
    fn entries_map(&self) -> HashMap<u64, u64> {
        let mut m = HashMap::new();
        self.for_each(|k, v| assert!(m.insert(k, v).is_none(), "key {k} twice"))
            .unwrap();
        m
    }
}

/// A put staged through log 0, its delete through log 1, then enough writes to other buckets through log 1
/// to move log 1's tail past the delete while log 0 keeps the put: recovery must not bring the key back
/// (the delete stages a tombstone that pins its record until a chunk commit covers both).
#[test]
fn a_delete_in_another_log_outlives_the_put_it_cancels() {
    let pm = MmapRegion::anonymous(4 << 20, PersistMode::Adr).unwrap();
    let config = HashConfig {
        initial_buckets: 4,
        log_lines: 16,
        logs: 2,
        ..HashConfig::default()
    };
    let index = HashIndex::create(&pm, config).unwrap();
    let bucket = |k: u64| crate::index::hash::layout::hash(k) & 3;
    let key = 1u64;
    let others: Vec<u64> = (2..)
        .filter(|&k| bucket(k) != bucket(key))
        .take(3)
        .collect();
    index.write_via_log(0, key, Some(7)).unwrap();
    assert_eq!(index.write_via_log(1, key, None).unwrap(), Some(7));
    for i in 0..200u64 {
        index
            .write_via_log(1, others[i as usize % 3], Some(i))
            .unwrap();
    }
    let s = index.stats();
    assert!(
        s.tail_persists >= 2 && s.grows == 0,
        "log 1 must wrap without a resize: {s:?}"
    );
    let index = HashIndex::open(index.into_pm()).unwrap();
    assert_eq!(
        index.get(key).unwrap(),
        None,
        "the deleted key came back: {:?}",
        index.stats()
    );
    for (j, &k) in others.iter().enumerate() {
        let last = (0..200u64).rev().find(|i| *i as usize % 3 == j);
        assert_eq!(index.get(k).unwrap(), last);
    }
}
