//! The test harness both hash indexes share, generic over [`PmHashIndex`]: the model check, the crash
//! test over every fence (ADR and eADR), the model proptest driver with reopen, and the helpers of the
//! recovery tests. Each index's tests call these with their parameters (region size, key count, a tiny
//! config, operation counts, index-specific checks).

use std::collections::HashMap;

use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::PmHashIndex;
use crate::error::{Error, Result};
use crate::storage::pm::{CountingPm, CrashPlan, MmapRegion, PersistMode, Pm, ShadowPm, Traffic};

/// Checks the index against `model` exactly: every model key, every record, no duplicates, `len`, and the
/// structural invariants.
pub fn assert_matches<P: Pm, I: PmHashIndex<P>>(index: &I, model: &HashMap<u64, u64>) {
    index.check_invariants().unwrap();
    let mut seen = HashMap::new();
    for (k, v) in index.entries().unwrap() {
        assert!(seen.insert(k, v).is_none(), "key {k} visited twice");
    }
    assert_eq!(&seen, model, "records differ from the model");
    assert_eq!(index.len(), model.len() as u64);
    for (&k, &v) in model {
        assert_eq!(index.get(k).unwrap(), Some(v), "key {k}");
    }
}

// ---- Crash consistency at every persist point ----

#[derive(Debug, Clone, Copy)]
pub enum CrashOp {
    Put(u64, u64),
    Del(u64),
}

impl CrashOp {
    fn key(self) -> u64 {
        match self {
            CrashOp::Put(k, _) | CrashOp::Del(k) => k,
        }
    }
}

/// What a crash test varies per index.
pub struct CrashSpec<I> {
    /// Bytes of the `ShadowPm` region.
    pub region: u64,
    /// Keys are drawn from `0..keys`.
    pub keys: u64,
    /// Keys `0..extra_inserts` written to a recovered index before it is recovered again.
    pub extra_inserts: u64,
    /// Creates the index (with its tiny config) in a fresh region.
    pub create: fn(ShadowPm) -> Result<I>,
}

/// Inserts of new keys first dominate (to cross resizes / splits), then updates and deletes mix in.
fn crash_workload(n: usize, keys: u64) -> Vec<CrashOp> {
    let mut rng = ChaCha8Rng::seed_from_u64(17);
    (0..n)
        .map(|i| {
            let k = rng.random_range(0..keys.min(64 + i as u64 / 2));
            // Values carry the operation number, so a value never written is recognisable.
            let v = (i as u64) << 20 | k;
            if rng.random_range(0..10) < 2 {
                CrashOp::Del(k)
            } else {
                CrashOp::Put(k, v)
            }
        })
        .collect()
}

fn crash_run<P: Pm, I: PmHashIndex<P>>(index: &mut I, model: &mut HashMap<u64, u64>, op: CrashOp) {
    match op {
        CrashOp::Put(k, v) => {
            index.insert(k, v).unwrap();
            model.insert(k, v);
        }
        CrashOp::Del(k) => {
            assert_eq!(index.remove(k).unwrap(), model.remove(&k).is_some());
        }
    }
}

/// Recovers `image` and checks it against `before` (state after the acknowledged operations) with `op` in
/// flight (`hooks.0` sees the index right after `open`, before anything else touches it; `hooks.1` after
/// its self-check); with `extra`, also writes to the recovered index and recovers it again.
fn crash_verify<I: PmHashIndex<ShadowPm>>(
    spec: &CrashSpec<I>,
    image: Vec<u8>,
    mode: PersistMode,
    before: &HashMap<u64, u64>,
    op: CrashOp,
    extra: bool,
    hooks: &mut (impl FnMut(&I), impl FnMut(&I)),
) {
    let pm = ShadowPm::from_image(image, mode).unwrap();
    let mut index = I::open(pm).unwrap_or_else(|e| panic!("recovery failed: {e}"));
    (hooks.0)(&index);
    index.check_invariants().unwrap();
    let recovered = &mut hooks.1;
    recovered(&index);
    let after = match op {
        CrashOp::Put(_, v) => Some(v),
        CrashOp::Del(_) => None,
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
    for k in 0..spec.keys {
        let got = index.get(k).unwrap();
        assert!(
            allowed(k, got),
            "key {k}: got {got:?}, expected {:?} ({op:?})",
            before.get(&k)
        );
        assert_eq!(got, seen.get(&k).copied());
    }
    if extra {
        // The recovered index keeps working and recovers again.
        let mut model = seen;
        for k in 0..spec.extra_inserts {
            index.insert(k, k + 1).unwrap();
            model.insert(k, k + 1);
        }
        let index = I::open(index.into_pm()).unwrap();
        assert_matches(&index, &model);
    }
}

/// Runs a deterministic workload of `ops` operations on a `ShadowPm`; run `r` takes a crash image at the
/// `r+1`-th fence of every operation, so the runs together crash at every persist point. Every image is
/// recovered and checked (`recovered` sees each recovered index); `workload_done` sees the index after the
/// first, uncrashed-through run. Returns the number of crash images and of fences of the workload.
pub fn crash_every_persist_point<I: PmHashIndex<ShadowPm>>(
    spec: &CrashSpec<I>,
    mode: PersistMode,
    ops: usize,
    recovered: impl FnMut(&I),
    workload_done: impl Fn(&I),
) -> (u64, u64) {
    crash_every_persist_point_with(spec, mode, ops, |_| {}, recovered, workload_done)
}

/// [`crash_every_persist_point`] with `opened`, which sees each recovered index right after `open`, before
/// its self-check (e.g. to drive an index whose recovery is lazy through its first touches).
pub fn crash_every_persist_point_with<I: PmHashIndex<ShadowPm>>(
    spec: &CrashSpec<I>,
    mode: PersistMode,
    ops: usize,
    opened: impl FnMut(&I),
    recovered: impl FnMut(&I),
    workload_done: impl Fn(&I),
) -> (u64, u64) {
    let mut hooks = (opened, recovered);
    let ops = crash_workload(ops, spec.keys);
    let (mut images, mut fences) = (0u64, 0u64);
    for r in 0.. {
        let mut index = (spec.create)(ShadowPm::new(spec.region, mode).unwrap()).unwrap();
        let mut model = HashMap::new();
        let mut fired = false;
        for (i, &op) in ops.iter().enumerate() {
            let pm = index.pm();
            let f0 = pm.persist_points();
            pm.arm_crash(CrashPlan {
                at_fence: f0 + 1 + r,
                evict_probability: 0.5,
                tear: true,
                seed: r << 32 | i as u64,
            })
            .unwrap();
            let before = model.clone();
            crash_run(&mut index, &mut model, op);
            if let Some(image) = index.pm().take_crash_image() {
                fired = true;
                images += 1;
                let extra = images % 64 == 1;
                crash_verify(spec, image, mode, &before, op, extra, &mut hooks);
            }
        }
        if r == 0 {
            fences = index.pm().persist_points();
            workload_done(&index);
        }
        if !fired {
            break;
        }
    }
    eprintln!(
        "{} {mode:?}: {images} crash images, {fences} fences",
        I::name()
    );
    (images, fences)
}

// ---- Model proptest with reopen ----

/// An operation of the model test; `Reopen(threads)` drops the index and recovers it from the region.
#[derive(Debug, Clone)]
pub enum ModelOp {
    Insert(u64, u64),
    Remove(u64),
    Get(u64),
    Reopen(usize),
}

fn model_key(keys: u64) -> impl Strategy<Value = u64> {
    prop_oneof![
        8 => 0u64..keys,
        1 => prop_oneof![Just(0u64), Just(u64::MAX), Just(1 << 63), any::<u64>()],
    ]
}

/// Operations on keys mostly from `0..keys`; `reopen` generates the `Reopen` operations.
pub fn model_op(
    keys: u64,
    reopen: impl Strategy<Value = ModelOp> + 'static,
) -> impl Strategy<Value = ModelOp> {
    prop_oneof![
        10 => (model_key(keys), prop_oneof![Just(0u64), Just(u64::MAX), any::<u64>()]).prop_map(|(k, v)| ModelOp::Insert(k, v)),
        4 => model_key(keys).prop_map(ModelOp::Remove),
        4 => model_key(keys).prop_map(ModelOp::Get),
        1 => reopen,
    ]
}

/// Proptest cases: `STRATA_PROPTEST_CASES`, 24 by default.
pub fn cases() -> u32 {
    std::env::var("STRATA_PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(24)
}

/// Runs `ops` on `index` and a `HashMap` side by side, checking every result and `len` after each
/// operation (and, with `max_load`, that the load factor never exceeds it); `reopen(pm, threads)`
/// recovers the index. At the end the index is checked, reopened with `open` and checked again.
pub fn model_run<P: Pm, I: PmHashIndex<P>>(
    mut index: I,
    ops: Vec<ModelOp>,
    reopen: impl Fn(P, usize) -> Result<I>,
    max_load: Option<f64>,
) -> std::result::Result<(), TestCaseError> {
    let mut model = HashMap::new();
    for op in ops {
        match op {
            ModelOp::Insert(k, v) => {
                index.insert(k, v).unwrap();
                model.insert(k, v);
            }
            ModelOp::Remove(k) => {
                prop_assert_eq!(index.remove(k).unwrap(), model.remove(&k).is_some());
            }
            ModelOp::Get(k) => prop_assert_eq!(index.get(k).unwrap(), model.get(&k).copied()),
            ModelOp::Reopen(threads) => {
                index = reopen(index.into_pm(), threads).unwrap();
                assert_matches(&index, &model);
            }
        }
        prop_assert_eq!(index.len(), model.len() as u64);
        if let Some(max) = max_load {
            prop_assert!(index.load_factor() <= max);
        }
    }
    assert_matches(&index, &model);
    let index = I::open(index.into_pm()).unwrap();
    assert_matches(&index, &model);
    Ok(())
}

// ---- Recovery ----

/// `n` operations with keys from `0..n` (seed 4): every fifth removes, the others insert `key → i`.
/// Returns the model.
pub fn fill<P: Pm, I: PmHashIndex<P>>(index: &mut I, n: u64) -> HashMap<u64, u64> {
    let mut model = HashMap::new();
    let mut rng = ChaCha8Rng::seed_from_u64(4);
    for i in 0..n {
        let k = rng.random_range(0..n);
        if i % 5 == 4 {
            assert_eq!(index.remove(k).unwrap(), model.remove(&k).is_some());
        } else {
            index.insert(k, i).unwrap();
            model.insert(k, i);
        }
    }
    model
}

/// Key number `i` of a sequence spread over the key space (a multiplicative hash of `i`).
pub fn spread_key(i: u64) -> u64 {
    i.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// Inserts `key(i) → i` for `i` in `0..n`; returns the model.
pub fn insert_keys<P: Pm, I: PmHashIndex<P>>(
    index: &mut I,
    n: u64,
    key: impl Fn(u64) -> u64,
) -> HashMap<u64, u64> {
    let mut model = HashMap::new();
    for i in 0..n {
        index.insert(key(i), i).unwrap();
        model.insert(key(i), i);
    }
    model
}

/// Panics unless opening `image` fails with `Error::Corruption`.
pub fn expect_corruption<'a, I: PmHashIndex<&'a MmapRegion>>(image: &'a MmapRegion, what: &str) {
    match I::open(image) {
        Err(Error::Corruption { .. }) => {}
        other => panic!(
            "{what}: expected corruption, got {:?}",
            other.map(|i| i.len())
        ),
    }
}

/// Opens `copies` copies of `image` (in regions of `len` bytes), each with 1 to 3 random bytes written at
/// offsets `at` picks; `opened` exercises each index that opens. Returns how many opened and how many
/// were refused; neither may panic.
pub fn random_damage<I: PmHashIndex<MmapRegion>>(
    image: &[u8],
    len: u64,
    copies: usize,
    rng: &mut ChaCha8Rng,
    mut at: impl FnMut(&mut ChaCha8Rng) -> u64,
    mut opened: impl FnMut(I, &mut ChaCha8Rng),
) -> (u32, u32) {
    let (mut ok, mut bad) = (0, 0);
    for _ in 0..copies {
        let copy = MmapRegion::anonymous(len, PersistMode::Adr).unwrap();
        copy.write(0, image).unwrap();
        for _ in 0..rng.random_range(1..4) {
            let at = at(rng);
            copy.write(at, &[rng.random()]).unwrap();
        }
        match I::open(copy) {
            Ok(index) => {
                ok += 1;
                let _ = index.entries();
                let _ = index.check_invariants();
                opened(index, rng);
            }
            Err(_) => bad += 1,
        }
    }
    (ok, bad)
}

// ---- Traffic ----

/// Runs `f` and returns its result with the traffic it caused on `pm`, the model drained before and
/// after (so the counts are complete and start from empty caches).
pub fn measured<P: Pm, T>(pm: &CountingPm<P>, f: impl FnOnce() -> T) -> (T, Traffic) {
    pm.drain();
    let t0 = pm.snapshot();
    let out = f();
    pm.drain();
    (out, pm.snapshot().since(&t0))
}
