//! Crash consistency: a deterministic workload (inserts, updates, deletes; many segment splits, several
//! directory doublings, displacements and stash inserts) runs on a `ShadowPm`; run `r` takes a crash image
//! at the `r+1`-th fence of every operation, so the runs together crash at every persist point. Each image
//! (random eviction of unflushed lines, 8 B tearing) is recovered and checked: every acknowledged
//! operation is reflected, only the operation in flight may or may not be, no value never written
//! appears, no key is visited twice, and the invariants hold.

use std::collections::HashMap;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::tiny_config;
use crate::index::hash::dash::DashIndex;
use crate::storage::pm::{CrashPlan, PersistMode, Pm, ShadowPm};

const REGION: u64 = 256 << 10;
const KEYS: u64 = 1000;

#[derive(Debug, Clone, Copy)]
enum Op {
    Put(u64, u64),
    Del(u64),
}

impl Op {
    fn key(self) -> u64 {
        match self {
            Op::Put(k, _) | Op::Del(k) => k,
        }
    }
}

/// New keys dominate first (to cross splits and doublings), then updates and deletes mix in.
fn workload(n: usize) -> Vec<Op> {
    let mut rng = ChaCha8Rng::seed_from_u64(17);
    (0..n)
        .map(|i| {
            let k = rng.random_range(0..KEYS.min(64 + i as u64 / 2));
            // Values carry the operation number, so a value never written is recognisable.
            let v = (i as u64) << 20 | k;
            if rng.random_range(0..10) < 2 {
                Op::Del(k)
            } else {
                Op::Put(k, v)
            }
        })
        .collect()
}

fn run<P: Pm>(index: &mut DashIndex<P>, model: &mut HashMap<u64, u64>, op: Op) {
    match op {
        Op::Put(k, v) => {
            index.insert(k, v).unwrap();
            model.insert(k, v);
        }
        Op::Del(k) => {
            assert_eq!(index.remove(k).unwrap(), model.remove(&k).is_some());
        }
    }
}

/// Recovers `image` and checks it against `before` (state after the acknowledged operations) with `op` in
/// flight; with `extra`, also writes to the recovered index and recovers it again.
fn verify(
    image: Vec<u8>,
    mode: PersistMode,
    before: &HashMap<u64, u64>,
    op: Op,
    extra: bool,
) -> (u64, u64) {
    let pm = ShadowPm::from_image(image, mode).unwrap();
    let mut index = DashIndex::open(&pm).unwrap_or_else(|e| panic!("recovery failed: {e}"));
    index.check_invariants().unwrap();
    let repaired = (
        index.stats().recovered_splits,
        index.stats().dropped_duplicates,
    );
    let after = match op {
        Op::Put(_, v) => Some(v),
        Op::Del(_) => None,
    };
    let allowed = |k: u64, got: Option<u64>| {
        got == before.get(&k).copied() || (k == op.key() && got == after)
    };
    let mut seen = HashMap::new();
    for (k, v) in index.entries().unwrap() {
        assert!(seen.insert(k, v).is_none(), "key {k} visited twice");
        assert!(
            allowed(k, Some(v)),
            "phantom or stale {k} = {v:#x} ({op:?})"
        );
    }
    assert_eq!(index.len(), seen.len() as u64);
    for k in 0..KEYS {
        let got = index.get(k).unwrap();
        assert!(
            allowed(k, got),
            "key {k}: got {got:?}, expected {:?} ({op:?})",
            before.get(&k)
        );
        assert_eq!(got, seen.get(&k).copied());
    }
    if extra {
        // The recovered index keeps working (and splits) and recovers again.
        let mut model = seen;
        for k in 0..120 {
            index.insert(k, k + 1).unwrap();
            model.insert(k, k + 1);
        }
        drop(index);
        let index = DashIndex::open(&pm).unwrap();
        super::assert_matches(&index, &model);
    }
    repaired
}

fn crash_every_persist_point(mode: PersistMode, ops: usize) -> (u64, u64) {
    let ops = workload(ops);
    let (mut images, mut fences) = (0u64, 0u64);
    let (mut splits, mut dups) = (0u64, 0u64);
    for r in 0.. {
        let pm = ShadowPm::new(REGION, mode).unwrap();
        let mut index = DashIndex::create(&pm, tiny_config()).unwrap();
        let mut model = HashMap::new();
        let mut fired = false;
        for (i, &op) in ops.iter().enumerate() {
            let f0 = pm.persist_points();
            pm.arm_crash(CrashPlan {
                at_fence: f0 + 1 + r,
                evict_probability: 0.5,
                tear: true,
                seed: r << 32 | i as u64,
            })
            .unwrap();
            let before = model.clone();
            run(&mut index, &mut model, op);
            if let Some(image) = pm.take_crash_image() {
                fired = true;
                images += 1;
                let (s, d) = verify(image, mode, &before, op, images % 64 == 1);
                splits += s;
                dups += d;
            }
        }
        if r == 0 {
            fences = pm.persist_points();
            let s = index.stats();
            eprintln!("{mode:?} workload: {s:?}, depth {}", index.global_depth());
            assert!(s.splits >= 8 && s.doublings >= 3, "{s:?}");
            assert!(s.displacements > 0 && s.stash_inserts > 0, "{s:?}");
        }
        if !fired {
            break;
        }
    }
    eprintln!(
        "{mode:?}: {images} crash images, {fences} fences; recovery finished {splits} splits, dropped {dups} duplicates"
    );
    // Some images caught a committed, unfinished split and a half-done displacement.
    assert!(splits > 0 && dups > 0, "{splits} splits, {dups} duplicates");
    (images, fences)
}

#[test]
fn adr_crash_at_every_persist_point() {
    let (images, fences) = crash_every_persist_point(PersistMode::Adr, 2400);
    // Create's fences are not crashed at; every other fence is.
    assert!(images + 3 >= fences, "{images} images for {fences} fences");
}

#[test]
fn eadr_crash_at_every_persist_point() {
    let (images, fences) = crash_every_persist_point(PersistMode::Eadr, 1600);
    assert!(images + 3 >= fences, "{images} images for {fences} fences");
}
