//! Tests of the dynamization framework (`index::dynamized`) through its public API only.
//!
//! * **Model**: random operation sequences against a `BTreeMap` over a small key space with tiny buffers, for
//!   every layout × delete policy × {inline, background}; every read must agree with the model exactly.
//! * **Statistics**: chi-square tests with fixed seeds of independent range sampling (with overwrites and
//!   deletes under both delete policies) and of weighted sampling, plus checks that the chi-square test
//!   rejects biased samplers. Each test makes at most ten chi-square checks at level 1e-7 each, so a correct
//!   sampler fails a test with probability below 1e-6.
//! * **Concurrency**: writers and readers at once with background reconstruction; readers assert what holds
//!   under any interleaving, and the final content must equal the model.
//! * **Edge cases**: extreme keys, empty and inverted ranges, k = 0, weight and option validation.
//!
//! Cases: `PROPTEST_CASES` (default 24 per layout × policy × mode combination).

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the test failing

use proptest::prelude::*;
use proptest::test_runner::{Config as PtConfig, TestCaseError, TestRunner};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;
use strata::Direction;
use strata::lab::index::dynamized::{
    DeletePolicy, DynOptions, Dynamized, IsamShard, Layout, RangeSample, Record, RuntimeOptions,
    WeightedRangeSample,
};

type Idx = Dynamized<IsamShard>;

const LAYOUTS: [Layout; 3] = [Layout::Leveling, Layout::Tiering, Layout::Bsm];
const POLICIES: [DeletePolicy; 2] = [DeletePolicy::Tombstone, DeletePolicy::Tagging];

// ---------------------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------------------

/// Runs `f` on its own thread and fails the test if it does not finish within `secs` (a hang is a bug, and
/// must not stall the whole test binary). Panics of `f` are propagated.
fn watchdog<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    let h = std::thread::spawn(move || {
        let r = f();
        let _ = tx.send(());
        r
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(()) => h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))
        }
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("operation did not finish within {secs} s (deadlock or livelock)")
        }
    }
}

fn rt(background: bool) -> RuntimeOptions {
    RuntimeOptions {
        background,
        ..RuntimeOptions::default()
    }
}

fn opts(layout: Layout, policy: DeletePolicy, buffer: usize, scale: usize) -> DynOptions {
    DynOptions {
        layout,
        scale_factor: scale,
        buffer_capacity: buffer,
        delete_policy: policy,
        ..DynOptions::default()
    }
}

fn scan_vec(idx: &Idx, lo: u64, hi: u64, dir: Direction, max: usize) -> Vec<Record> {
    let mut out = Vec::new();
    let n = idx
        .scan(lo, hi, dir, max, &mut |r| {
            out.push(*r);
            Ok(true)
        })
        .unwrap();
    assert_eq!(n, out.len(), "scan's return value and visits disagree");
    out
}

fn sample_vec(
    idx: &Idx,
    lo: u64,
    hi: u64,
    k: usize,
    weighted: bool,
    rng: &mut ChaCha8Rng,
) -> Vec<Record> {
    let mut out = Vec::new();
    if weighted {
        idx.sample(&WeightedRangeSample { lo, hi }, k, rng, &mut out)
            .unwrap();
    } else {
        idx.sample(&RangeSample { lo, hi }, k, rng, &mut out)
            .unwrap();
    }
    out
}

/// Upper quantile of chi-square with `df` degrees of freedom for the normal quantile `z` (Wilson–Hilferty).
fn chi_square_critical(df: usize, z: f64) -> f64 {
    let k = df as f64;
    let a = 2.0 / (9.0 * k);
    k * (1.0 - a + z * a.sqrt()).powi(3)
}

/// z with P(Z > z) = 1e-7: each chi-square check's false-failure rate (at most ten per test).
const Z_1E7: f64 = 5.199_337_6;

/// Chi-square statistic of `counts` against expected shares `probs` (all positive) for `n` draws.
fn chi_square(counts: &[u64], probs: &[f64], n: u64) -> f64 {
    counts
        .iter()
        .zip(probs)
        .map(|(&c, &p)| {
            let e = p * n as f64;
            (c as f64 - e).powi(2) / e
        })
        .sum()
}

/// Asserts that `counts` (over outcomes with shares `probs`) pass the chi-square test at level 1e-7.
fn assert_fits(what: &str, counts: &[u64], probs: &[f64], n: u64) {
    let stat = chi_square(counts, probs, n);
    let crit = chi_square_critical(counts.len() - 1, Z_1E7);
    assert!(
        stat < crit,
        "{what}: chi-square {stat:.1} ≥ critical {crit:.1} (df {})",
        counts.len() - 1
    );
}

// ---------------------------------------------------------------------------------------------------------
// 1. Model test
// ---------------------------------------------------------------------------------------------------------

/// Value and weight of a live key.
type Model = BTreeMap<u64, (u64, f64)>;

#[derive(Debug, Clone)]
enum Op {
    Put(u64, u64, f64),
    Del(u64),
    /// Puts `len` consecutive keys from `start` (values derived from `tag`): many flushes quickly.
    PutRun(u64, u8, u64, f64),
    DelRun(u64, u8),
    Get(u64),
    Count(u64, u64),
    /// lo, hi, reverse, max, stop after this many visits (0: never).
    Scan(u64, u64, bool, usize, usize),
    /// lo, hi, k, weighted query, rng seed.
    Sample(u64, u64, usize, bool, u64),
    Compact,
    Quiesce(bool),
}

#[derive(Debug, Clone)]
struct Cfg {
    buffer: usize,
    scale: usize,
    delta: f64,
    weighted: bool,
    max_sealed: usize,
    throttle: bool,
}

fn key() -> BoxedStrategy<u64> {
    prop_oneof![
        18 => 0u64..200,
        1 => Just(u64::MAX),
        1 => (u64::MAX - 3)..=u64::MAX,
    ]
    .boxed()
}

fn weight() -> BoxedStrategy<f64> {
    // 0.1, 0.2 and 0.3 are not sums of each other in binary floating point: a weight that comes back from a
    // difference of prefix sums differs from what was put.
    prop::sample::select(vec![0.0, 0.1, 0.2, 0.3, 1.0, 2.5, 7.0]).boxed()
}

fn op() -> BoxedStrategy<Op> {
    prop_oneof![
        12 => (key(), any::<u64>(), weight()).prop_map(|(k, v, w)| Op::Put(k, v, w)),
        6 => key().prop_map(Op::Del),
        2 => (0u64..200, 1u8..40, any::<u64>(), weight()).prop_map(|(s, l, t, w)| Op::PutRun(s, l, t, w)),
        2 => (0u64..200, 1u8..40).prop_map(|(s, l)| Op::DelRun(s, l)),
        4 => key().prop_map(Op::Get),
        3 => (key(), key()).prop_map(|(a, b)| Op::Count(a, b)),
        3 => (key(), key(), any::<bool>(), prop_oneof![Just(usize::MAX), 0usize..10], 0usize..4)
            .prop_map(|(a, b, r, m, s)| Op::Scan(a, b, r, m, s)),
        3 => (key(), key(), prop::sample::select(vec![0usize, 1, 5, 20]), any::<bool>(), any::<u64>())
            .prop_map(|(a, b, k, w, s)| Op::Sample(a.min(b), a.max(b), k, w, s)),
        1 => (key(), key(), any::<u64>()).prop_map(|(a, b, s)| Op::Sample(a.max(b), a.min(b), 3, false, s)),
        1 => Just(Op::Compact),
        1 => any::<bool>().prop_map(Op::Quiesce),
    ]
    .boxed()
}

fn cfg(background: bool) -> BoxedStrategy<Cfg> {
    (
        1usize..16,
        2usize..=4,
        prop::sample::select(vec![0.01, 0.05, 0.2, 0.5, 1.0]),
        any::<bool>(),
        1usize..=3,
        any::<bool>(),
    )
        .prop_map(
            move |(buffer, scale, delta, weighted, max_sealed, throttle)| Cfg {
                buffer,
                scale,
                delta,
                weighted,
                max_sealed,
                throttle: throttle && background,
            },
        )
        .boxed()
}

fn model_range(model: &Model, lo: u64, hi: u64) -> Vec<(u64, (u64, f64))> {
    if lo > hi {
        return Vec::new();
    }
    model.range(lo..=hi).map(|(k, v)| (*k, *v)).collect()
}

fn rec_tuple(r: &Record) -> (u64, (u64, f64)) {
    (r.key, (r.value, r.weight))
}

/// Everything observable must equal the model.
fn check_all(idx: &Idx, model: &Model) -> Result<(), TestCaseError> {
    prop_assert_eq!(idx.len(), model.len() as u64);
    prop_assert_eq!(idx.is_empty(), model.is_empty());
    let all: Vec<_> = model.iter().map(|(k, v)| (*k, *v)).collect();
    let fwd: Vec<_> = scan_vec(idx, 0, u64::MAX, Direction::Forward, usize::MAX)
        .iter()
        .map(rec_tuple)
        .collect();
    prop_assert_eq!(&fwd, &all);
    let mut rev: Vec<_> = scan_vec(idx, 0, u64::MAX, Direction::Reverse, usize::MAX)
        .iter()
        .map(rec_tuple)
        .collect();
    rev.reverse();
    prop_assert_eq!(&rev, &all);
    for k in (0..200).chain((u64::MAX - 3)..=u64::MAX) {
        let got = idx.get(k).unwrap().map(|r| {
            assert_eq!(r.key, k);
            (r.value, r.weight)
        });
        prop_assert_eq!(got, model.get(&k).copied(), "get({})", k);
    }
    for (lo, hi) in [
        (0, 49),
        (50, 120),
        (121, 199),
        (190, u64::MAX),
        (0, u64::MAX),
    ] {
        prop_assert_eq!(
            idx.count(lo, hi).unwrap(),
            model_range(model, lo, hi).len() as u64,
            "count({}, {})",
            lo,
            hi
        );
    }
    Ok(())
}

/// Structural invariants after a quiesce: no buffered entries, shards per level by layout, and the δ bound.
fn check_shape(idx: &Idx, o: &DynOptions) -> Result<(), TestCaseError> {
    let st = idx.stats();
    prop_assert_eq!(st.buffered, 0);
    prop_assert_eq!(st.shards, st.levels.iter().map(Vec::len).sum::<usize>());
    let per_level = match o.layout {
        Layout::Tiering => o.scale_factor,
        _ => 1,
    };
    for (i, l) in st.levels.iter().enumerate() {
        prop_assert!(
            l.len() <= per_level,
            "level {} has {} shards: {:?}",
            i,
            l.len(),
            st.levels
        );
    }
    // Per level: at most δ of its capacity deleted (tombstones and tags), and under leveling no level above
    // the last over its capacity.
    let v = idx.version();
    let last = v.levels.iter().rposition(|l| !l.is_empty());
    for (i, level) in v.levels.iter().enumerate() {
        let deleted: u64 = level.iter().map(|s| s.deleted()).sum();
        let entries: u64 = level.iter().map(|s| s.entries()).sum();
        let cap = o.level_capacity(i);
        prop_assert!(
            deleted as f64 <= o.max_delete_proportion * cap as f64,
            "level {} has {} deleted entries, over δ = {} of its capacity {}: {:?}",
            i,
            deleted,
            o.max_delete_proportion,
            cap,
            st.levels
        );
        if o.layout == Layout::Leveling && Some(i) != last {
            prop_assert!(
                entries <= cap,
                "level {} holds {} entries, over its capacity {}: {:?}",
                i,
                entries,
                cap,
                st.levels
            );
        }
    }
    Ok(())
}

fn run_case(
    layout: Layout,
    policy: DeletePolicy,
    background: bool,
    c: &Cfg,
    ops: &[Op],
) -> Result<(), TestCaseError> {
    let o = DynOptions {
        layout,
        scale_factor: c.scale,
        buffer_capacity: c.buffer,
        delete_policy: policy,
        max_delete_proportion: c.delta,
        weighted: c.weighted,
        ..DynOptions::default()
    };
    let idx = Idx::new(
        o.clone(),
        RuntimeOptions {
            background,
            max_sealed_buffers: c.max_sealed,
            throttle: c.throttle,
            throttle_delay: Duration::from_micros(1),
            ..RuntimeOptions::default()
        },
    )
    .unwrap();
    let mut model = Model::new();
    // The weight an index reports: as put in weighted indexes, 1 otherwise.
    let w_of = |w: f64| if c.weighted { w } else { 1.0 };
    for op in ops {
        match *op {
            Op::Put(k, v, w) => {
                idx.put(k, v, w).unwrap();
                model.insert(k, (v, w_of(w)));
            }
            Op::Del(k) => {
                idx.delete(k).unwrap();
                model.remove(&k);
            }
            Op::PutRun(s, l, t, w) => {
                for k in s..s + u64::from(l) {
                    idx.put(k, t ^ k, w).unwrap();
                    model.insert(k, (t ^ k, w_of(w)));
                }
            }
            Op::DelRun(s, l) => {
                for k in s..s + u64::from(l) {
                    idx.delete(k).unwrap();
                    model.remove(&k);
                }
            }
            Op::Get(k) => {
                let got = idx.get(k).unwrap().map(|r| (r.key, r.value, r.weight));
                let want = model.get(&k).map(|&(v, w)| (k, v, w));
                prop_assert_eq!(got, want, "get({})", k);
            }
            Op::Count(lo, hi) => {
                prop_assert_eq!(
                    idx.count(lo, hi).unwrap(),
                    model_range(&model, lo, hi).len() as u64,
                    "count({}, {})",
                    lo,
                    hi
                );
                prop_assert_eq!(idx.len(), model.len() as u64);
            }
            Op::Scan(lo, hi, reverse, max, stop) => {
                let dir = if reverse {
                    Direction::Reverse
                } else {
                    Direction::Forward
                };
                let mut got = Vec::new();
                let n = idx
                    .scan(lo, hi, dir, max, &mut |r| {
                        got.push(rec_tuple(r));
                        Ok(stop == 0 || got.len() < stop)
                    })
                    .unwrap();
                prop_assert_eq!(n, got.len());
                let mut want = model_range(&model, lo, hi);
                if reverse {
                    want.reverse();
                }
                let limit = if stop == 0 { max } else { max.min(stop) };
                want.truncate(limit);
                prop_assert_eq!(
                    got,
                    want,
                    "scan({}, {}, {:?}, {}, stop {})",
                    lo,
                    hi,
                    dir,
                    max,
                    stop
                );
            }
            Op::Sample(lo, hi, k, weighted_query, seed) => {
                let mut rng = ChaCha8Rng::seed_from_u64(seed);
                let got = sample_vec(&idx, lo, hi, k, weighted_query, &mut rng);
                let live = model_range(&model, lo, hi);
                let eligible = live
                    .iter()
                    .filter(|(_, (_, w))| !weighted_query || *w > 0.0)
                    .count();
                let want_len = if eligible == 0 { 0 } else { k };
                prop_assert_eq!(
                    got.len(),
                    want_len,
                    "sample({}, {}, k {}, weighted {}) over {} eligible records",
                    lo,
                    hi,
                    k,
                    weighted_query,
                    eligible
                );
                for r in &got {
                    prop_assert!(
                        lo <= r.key && r.key <= hi,
                        "sampled key {} outside [{}, {}]",
                        r.key,
                        lo,
                        hi
                    );
                    prop_assert_eq!(
                        Some((r.value, r.weight)),
                        model.get(&r.key).copied(),
                        "sampled record {:?} is not live",
                        r
                    );
                    if weighted_query {
                        prop_assert!(
                            r.weight > 0.0,
                            "weighted sample drew a zero-weight record {:?}",
                            r
                        );
                    }
                }
            }
            Op::Compact => {
                idx.compact_once().unwrap();
                check_all(&idx, &model)?;
            }
            Op::Quiesce(seal) => {
                idx.quiesce(seal).unwrap();
                if seal {
                    check_shape(&idx, &o)?;
                }
                check_all(&idx, &model)?;
            }
        }
    }
    check_all(&idx, &model)?;
    idx.quiesce(true).unwrap();
    check_shape(&idx, &o)?;
    check_all(&idx, &model)?;
    idx.check_failed().unwrap();
    Ok(())
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(24)
}

fn run_model(layout: Layout, policy: DeletePolicy, background: bool) {
    watchdog(240, move || {
        let mut runner = TestRunner::new(PtConfig {
            cases: cases(),
            failure_persistence: None,
            max_shrink_iters: 4000,
            ..PtConfig::default()
        });
        let strategy = (cfg(background), prop::collection::vec(op(), 1..150));
        let result = runner.run(&strategy, |(c, ops)| {
            run_case(layout, policy, background, &c, &ops)
        });
        if let Err(e) = result {
            panic!("{layout:?} / {policy:?} / background {background}: {e}");
        }
    })
}

macro_rules! model_tests {
    ($($name:ident: $layout:ident, $policy:ident, $bg:expr;)*) => {$(
        #[test]
        fn $name() {
            run_model(Layout::$layout, DeletePolicy::$policy, $bg);
        }
    )*};
}

model_tests! {
    model_leveling_tombstone_inline: Leveling, Tombstone, false;
    model_leveling_tombstone_background: Leveling, Tombstone, true;
    model_leveling_tagging_inline: Leveling, Tagging, false;
    model_leveling_tagging_background: Leveling, Tagging, true;
    model_tiering_tombstone_inline: Tiering, Tombstone, false;
    model_tiering_tombstone_background: Tiering, Tombstone, true;
    model_tiering_tagging_inline: Tiering, Tagging, false;
    model_tiering_tagging_background: Tiering, Tagging, true;
    model_bsm_tombstone_inline: Bsm, Tombstone, false;
    model_bsm_tombstone_background: Bsm, Tombstone, true;
    model_bsm_tagging_inline: Bsm, Tagging, false;
    model_bsm_tagging_background: Bsm, Tagging, true;
}

// ---------------------------------------------------------------------------------------------------------
// 2. Statistical tests
// ---------------------------------------------------------------------------------------------------------

/// Builds an inline index over even keys `0, 2, …, 2·(n−1)` inserted in a shuffled order (so every shard holds
/// some keys of any range), then overwrites about 10 % and deletes about 10 % of them, and finally writes a
/// few operations into `[lo, hi]` that stay in the buffer (overwrites, deletes, fresh odd keys). Returns the
/// index and the model of live keys (value, weight).
fn build_spread(
    layout: Layout,
    policy: DeletePolicy,
    weighted: bool,
    n: u64,
    (lo, hi): (u64, u64),
    seed: u64,
) -> (Idx, Model) {
    let o = DynOptions {
        layout,
        scale_factor: 3,
        buffer_capacity: 500,
        delete_policy: policy,
        // Keep dead versions in the shards so that draws are rejected.
        max_delete_proportion: 0.5,
        weighted,
        ..DynOptions::default()
    };
    let idx = Idx::new(o, rt(false)).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut model = Model::new();
    // Weights 1..=10 with a few zeros (never drawn by weighted queries).
    let weight_of = |k: u64, salt: u64| -> f64 {
        if !weighted {
            1.0
        } else if (k / 2 + salt).is_multiple_of(17) {
            0.0
        } else {
            ((k / 2 * 7 + salt * 3) % 10 + 1) as f64
        }
    };
    let mut keys: Vec<u64> = (0..n).map(|i| i * 2).collect();
    keys.shuffle(&mut rng);
    for &k in &keys {
        let w = weight_of(k, 0);
        idx.put(k, k * 7 + 1, w).unwrap();
        model.insert(k, (k * 7 + 1, w));
    }
    keys.shuffle(&mut rng);
    let tenth = keys.len() / 10;
    let mut later: Vec<(u64, bool)> = keys[..tenth]
        .iter()
        .map(|&k| (k, true))
        .chain(keys[tenth..2 * tenth].iter().map(|&k| (k, false)))
        .collect();
    later.shuffle(&mut rng);
    for (k, overwrite) in later {
        if overwrite {
            let w = weight_of(k, 5);
            idx.put(k, k * 7 + 2, w).unwrap();
            model.insert(k, (k * 7 + 2, w));
        } else {
            idx.delete(k).unwrap();
            model.remove(&k);
        }
    }
    // Recent operations inside the range, still buffered: overwrites, deletes and fresh odd keys.
    for (j, k) in (lo..=hi).step_by(2).enumerate().take(60) {
        match j % 4 {
            0 => {
                let w = weight_of(k, 9);
                idx.put(k, k * 7 + 3, w).unwrap();
                model.insert(k, (k * 7 + 3, w));
            }
            1 => {
                idx.delete(k).unwrap();
                model.remove(&k);
            }
            2 => {
                let w = weight_of(k + 1, 2);
                idx.put(k + 1, k * 7 + 4, w).unwrap();
                model.insert(k + 1, (k * 7 + 4, w));
            }
            _ => {}
        }
    }
    (idx, model)
}

/// How many sources (buffers and shards) hold entries with keys in `[lo, hi]`.
fn sources_in_range(idx: &Idx, lo: u64, hi: u64) -> (usize, usize) {
    use strata::lab::index::dynamized::Shard;
    let v = idx.version();
    let buffers = v
        .buffers
        .iter()
        .filter(|b| (0..b.len()).any(|i| (lo..=hi).contains(&b.key(i))))
        .count();
    let shards = v
        .shards_newest_first()
        .filter(|s| s.shard.lower_bound(lo).unwrap() < s.shard.upper_bound(hi).unwrap())
        .count();
    (buffers, shards)
}

/// Draws `per_outcome` samples per eligible live key of `[lo, hi]` and checks each against the model, then
/// the chi-square fit to the query's distribution (uniform, or proportional to the weights).
fn check_distribution(
    idx: &Idx,
    model: &Model,
    lo: u64,
    hi: u64,
    weighted_query: bool,
    seed: u64,
    per_outcome: u64,
) {
    let population: Vec<(u64, f64)> = model
        .range(lo..=hi)
        .map(|(&k, &(_, w))| (k, if weighted_query { w } else { 1.0 }))
        .filter(|&(_, w)| w > 0.0)
        .collect();
    assert!(
        population.len() > 50,
        "population of {} is too small",
        population.len()
    );
    let total: f64 = population.iter().map(|&(_, w)| w).sum();
    let min_share = population
        .iter()
        .map(|&(_, w)| w)
        .fold(f64::INFINITY, f64::min)
        / total;
    let k = (per_outcome as f64 / min_share) as usize;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let samples = sample_vec(idx, lo, hi, k, weighted_query, &mut rng);
    assert_eq!(samples.len(), k);
    let pos: HashMap<u64, usize> = population
        .iter()
        .enumerate()
        .map(|(i, &(key, _))| (key, i))
        .collect();
    let mut counts = vec![0u64; population.len()];
    for r in &samples {
        assert!(
            (lo..=hi).contains(&r.key),
            "sample {} outside [{lo}, {hi}]",
            r.key
        );
        assert_eq!(
            Some((r.value, r.weight)),
            model.get(&r.key).copied(),
            "sampled record {r:?} is dead or stale"
        );
        let i = *pos
            .get(&r.key)
            .unwrap_or_else(|| panic!("sampled key {} has weight 0", r.key));
        counts[i] += 1;
    }
    let probs: Vec<f64> = population.iter().map(|&(_, w)| w / total).collect();
    assert_fits(
        &format!("[{lo}, {hi}] weighted {weighted_query} seed {seed}"),
        &counts,
        &probs,
        k as u64,
    );
}

fn irs_uniform_with_deletes(policy: DeletePolicy) {
    let (lo, hi) = (10_001u64, 10_400u64);
    for (n, layout) in LAYOUTS.into_iter().enumerate() {
        let (idx, model) = build_spread(layout, policy, false, 20_000, (lo, hi), 40 + n as u64);
        let (buffers, shards) = sources_in_range(&idx, lo, hi);
        assert!(
            buffers >= 1 && shards >= 2,
            "{layout:?}: range spans {buffers} buffers and {shards} shards"
        );
        assert!(
            idx.stats().levels.len() >= 2,
            "{layout:?}: {:?}",
            idx.stats().levels
        );
        assert_eq!(
            idx.count(lo, hi).unwrap(),
            model.range(lo..=hi).count() as u64
        );
        let before = idx.stats().rejections;
        for seed in [1, 2] {
            check_distribution(&idx, &model, lo, hi, false, seed, 300);
        }
        assert!(
            idx.stats().rejections > before,
            "{layout:?}: no draw was rejected, so deletes were not exercised"
        );
    }
}

/// A range wider than the per-query killer table can hold (more than 1024 buffered keys, more than 4096
/// tombstones in range): the rejection check asks the buffers' key index and the tombstone filters, and the
/// draws stay live and uniform (or, weighted, proportional to the weights: the buffers' candidates are then
/// listed as blocks of slots).
fn wide_range_sampling(weighted: bool) {
    // Weights 1..=3 with some zeros (never drawn by weighted queries).
    let weight = |k: u64| -> f64 {
        if !weighted {
            1.0
        } else if k.is_multiple_of(11) {
            0.0
        } else {
            (1 + k % 3) as f64
        }
    };
    let o = DynOptions {
        layout: Layout::Tiering,
        scale_factor: 4,
        buffer_capacity: 4000,
        delete_policy: DeletePolicy::Tombstone,
        max_delete_proportion: 0.9,
        weighted,
        ..DynOptions::default()
    };
    let idx = Idx::new(o, rt(false)).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(77);
    let mut model = Model::new();
    let n = 40_000u64;
    let mut keys: Vec<u64> = (0..n).map(|i| i * 3).collect();
    keys.shuffle(&mut rng);
    for &k in &keys {
        idx.put(k, k + 1, weight(k)).unwrap();
        model.insert(k, (k + 1, weight(k)));
    }
    // Deletes of old records, then (still buffered) a mix of deletes, overwrites and fresh keys.
    keys.shuffle(&mut rng);
    for &k in &keys[..12_000] {
        idx.delete(k).unwrap();
        model.remove(&k);
    }
    idx.quiesce(true).unwrap();
    for (j, &k) in keys[12_000..15_000].iter().enumerate() {
        match j % 3 {
            0 => {
                idx.delete(k).unwrap();
                model.remove(&k);
            }
            1 => {
                idx.put(k, k + 2, weight(k + 5)).unwrap();
                model.insert(k, (k + 2, weight(k + 5)));
            }
            _ => {
                idx.put(k + 1, k + 3, weight(k + 1)).unwrap();
                model.insert(k + 1, (k + 3, weight(k + 1)));
            }
        }
    }
    let stats = idx.stats();
    assert!(stats.buffered > 1024, "{} buffered", stats.buffered);
    assert!(stats.tombstones > 4096, "{} tombstones", stats.tombstones);
    let (lo, hi) = (0, u64::MAX);
    assert_eq!(idx.count(lo, hi).unwrap(), model.len() as u64);
    let before = idx.stats().rejections;
    check_distribution(&idx, &model, lo, hi, weighted, 5, 40);
    assert!(idx.stats().rejections > before, "no draw was rejected");
}

#[test]
fn wide_ranges_reject_through_the_buffer_index_and_tombstone_filters() {
    wide_range_sampling(false);
}

#[test]
fn wide_weighted_ranges_draw_buffered_records_by_blocks() {
    wide_range_sampling(true);
}

#[test]
fn irs_is_uniform_over_buffer_and_levels_with_tombstones() {
    irs_uniform_with_deletes(DeletePolicy::Tombstone);
}

#[test]
fn irs_is_uniform_over_buffer_and_levels_with_tagging() {
    irs_uniform_with_deletes(DeletePolicy::Tagging);
}

fn weighted_proportional(policy: DeletePolicy) {
    let (lo, hi) = (3_001u64, 3_400u64);
    for (n, layout) in LAYOUTS.into_iter().enumerate() {
        let (idx, model) = build_spread(layout, policy, true, 4_000, (lo, hi), 70 + n as u64);
        let (buffers, shards) = sources_in_range(&idx, lo, hi);
        assert!(
            buffers >= 1 && shards >= 2,
            "{layout:?}: range spans {buffers} buffers and {shards} shards"
        );
        // WIRS over a range, and WSS over the whole set.
        check_distribution(&idx, &model, lo, hi, true, 5, 60);
        let mut rng = ChaCha8Rng::seed_from_u64(6);
        let q = WeightedRangeSample::whole_set();
        let live: Vec<(u64, f64)> = model
            .iter()
            .map(|(&k, &(_, w))| (k, w))
            .filter(|&(_, w)| w > 0.0)
            .collect();
        let total: f64 = live.iter().map(|&(_, w)| w).sum();
        let draws = 400_000usize;
        let mut out = Vec::new();
        idx.sample(&q, draws, &mut rng, &mut out).unwrap();
        assert_eq!(out.len(), draws);
        let pos: HashMap<u64, usize> = live.iter().enumerate().map(|(i, &(k, _))| (k, i)).collect();
        let mut counts = vec![0u64; live.len()];
        for r in &out {
            assert_eq!(
                Some((r.value, r.weight)),
                model.get(&r.key).copied(),
                "{r:?}"
            );
            counts[*pos.get(&r.key).expect("a zero-weight record was drawn")] += 1;
        }
        let probs: Vec<f64> = live.iter().map(|&(_, w)| w / total).collect();
        // Expected counts are at least 400 000 / (4 000 · 10) = 10.
        assert_fits(&format!("WSS {layout:?}"), &counts, &probs, draws as u64);
    }
}

#[test]
fn weighted_sampling_is_proportional_to_weights_with_tombstones() {
    weighted_proportional(DeletePolicy::Tombstone);
}

#[test]
fn weighted_sampling_is_proportional_to_weights_with_tagging() {
    weighted_proportional(DeletePolicy::Tagging);
}

/// The chi-square check has power: samplers with plausible bugs (a source chosen by count rather than weight,
/// one key counted twice, a group of keys over-weighted by 25 %, weights ignored) fail it at the sample sizes
/// the tests above use.
#[test]
fn chi_square_rejects_biased_samplers() {
    let n = 180usize;
    let per = 300u64;
    let draws = n as u64 * per;
    let uniform = vec![1.0 / n as f64; n];
    let mut rng = ChaCha8Rng::seed_from_u64(99);
    let mut draw_with = |weights: &[f64]| -> Vec<u64> {
        let total: f64 = weights.iter().sum();
        let mut prefix = Vec::with_capacity(weights.len());
        let mut s = 0.0;
        for w in weights {
            s += w / total;
            prefix.push(s);
        }
        let mut counts = vec![0u64; weights.len()];
        for _ in 0..draws {
            let u: f64 = rng.random();
            counts[prefix.partition_point(|&p| p <= u).min(weights.len() - 1)] += 1;
        }
        counts
    };
    let fails = |counts: &[u64], probs: &[f64]| {
        chi_square(counts, probs, draws) >= chi_square_critical(counts.len() - 1, Z_1E7)
    };
    // A correct sampler passes.
    assert!(!fails(&draw_with(&vec![1.0; n]), &uniform));
    // Two sources of 60 and 120 candidates each picked with probability 1/2.
    let by_source: Vec<f64> = (0..n)
        .map(|i| if i < 60 { 1.0 / 60.0 } else { 1.0 / 120.0 })
        .collect();
    assert!(fails(&draw_with(&by_source), &uniform));
    // One key drawn twice as often (a stale version not rejected).
    let dup: Vec<f64> = (0..n).map(|i| if i == 17 { 2.0 } else { 1.0 }).collect();
    assert!(fails(&draw_with(&dup), &uniform));
    // A tenth of the keys (say, one shard) over-weighted by 25 %.
    let shard: Vec<f64> = (0..n)
        .map(|i| if i % 10 == 0 { 1.25 } else { 1.0 })
        .collect();
    assert!(fails(&draw_with(&shard), &uniform));
    // Weighted: weights 1..=10 ignored.
    let weights: Vec<f64> = (0..n).map(|i| (i % 10 + 1) as f64).collect();
    let total: f64 = weights.iter().sum();
    let probs: Vec<f64> = weights.iter().map(|w| w / total).collect();
    assert!(!fails(&draw_with(&weights), &probs));
    assert!(fails(&draw_with(&vec![1.0; n]), &probs));
}

/// A range whose records are nearly all deleted (δ = 1 keeps them in the shards): draws are mostly rejected,
/// the query falls back to enumeration, and only the live records come out, uniformly.
#[test]
fn sampling_a_nearly_dead_range_falls_back_and_stays_exact() {
    for policy in POLICIES {
        for background in [false, true] {
            let o = DynOptions {
                max_delete_proportion: 1.0,
                ..opts(Layout::Tiering, policy, 256, 4)
            };
            let idx = Idx::new(o, rt(background)).unwrap();
            for k in 0..6_000u64 {
                idx.put(k, k + 1, 1.0).unwrap();
            }
            // Every record in a shard before the deletes: otherwise, with background workers, merges running
            // meanwhile may drop deleted records before the query (then there is no dead range to fall back on).
            idx.quiesce(true).unwrap();
            let survivors = [1_500u64, 2_222, 2_999];
            for k in 1_000..3_000u64 {
                if !survivors.contains(&k) {
                    idx.delete(k).unwrap();
                }
            }
            idx.quiesce(true).unwrap();
            assert_eq!(idx.count(1_000, 2_999).unwrap(), 3);
            let compactions = idx.stats().compactions;
            let mut rng = ChaCha8Rng::seed_from_u64(3);
            let k = 30_000;
            let got = sample_vec(&idx, 1_000, 2_999, k, false, &mut rng);
            assert_eq!(got.len(), k);
            let mut counts = [0u64; 3];
            for r in &got {
                let i = survivors
                    .iter()
                    .position(|&s| s == r.key)
                    .unwrap_or_else(|| panic!("{policy:?}: dead record {r:?} sampled"));
                assert_eq!(r.value, r.key + 1);
                counts[i] += 1;
            }
            assert_fits(
                &format!("{policy:?} fallback"),
                &counts,
                &[1.0 / 3.0; 3],
                k as u64,
            );
            let st = idx.stats();
            assert!(
                st.fallbacks > 0,
                "{policy:?}: the fallback path was not taken: {st:?}"
            );
            if background {
                // The rejection rate asked the worker for a compaction.
                let deadline = std::time::Instant::now() + Duration::from_secs(10);
                while idx.stats().compactions == compactions {
                    assert!(
                        std::time::Instant::now() < deadline,
                        "{policy:?}: no compaction after a high rejection rate"
                    );
                    std::thread::sleep(Duration::from_millis(5));
                }
                assert_eq!(idx.count(1_000, 2_999).unwrap(), 3);
                assert_eq!(idx.len(), 4_003);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// 3. Concurrency
// ---------------------------------------------------------------------------------------------------------

/// Keys `0..STABLE` are loaded first and afterwards only overwritten, with values `key << 32 | generation`:
/// every one of them is live at every moment, so any reader must see all of them, each with a value of its
/// own key. Keys from `ONCE` up are put once with value `once_value(key)` and may be deleted later.
const STABLE: u64 = 384;
const ONCE: u64 = 1 << 40;
const ONCE_PER_WRITER: u64 = 1 << 20;

fn once_value(k: u64) -> u64 {
    k.rotate_left(17) ^ 0x0005_DEEC_E66D
}

#[derive(Clone, Copy)]
struct Stress {
    writers: u64,
    ops_per_writer: u64,
    readers: usize,
    /// Also run `quiesce(true)`, `quiesce(false)` and `compact_once()` concurrently with the writers.
    maintenance: bool,
}

/// Writers on disjoint keys, readers checking what holds under any interleaving; at the end (after
/// `quiesce(true)`) the content must equal the writers' model.
fn stress(o: DynOptions, r: RuntimeOptions, s: Stress) {
    watchdog(60, move || stress_inner(o, r, s));
}

fn stress_inner(o: DynOptions, r: RuntimeOptions, s: Stress) {
    let idx = Arc::new(Idx::new(o.clone(), r.clone()).unwrap());
    for k in 0..STABLE {
        idx.put(k, k << 32, 1.0).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(s.writers as usize + s.readers + 1));
    let writers: Vec<_> = (0..s.writers)
        .map(|w| {
            let (idx, start) = (idx.clone(), start.clone());
            std::thread::spawn(move || {
                let mut rng = ChaCha8Rng::seed_from_u64(w);
                let mut model: BTreeMap<u64, u64> = BTreeMap::new();
                let base = ONCE + w * ONCE_PER_WRITER;
                let mut next_once = base;
                start.wait();
                for g in 1..=s.ops_per_writer {
                    match rng.random_range(0..10) {
                        0..=4 => {
                            // Writer w owns the stable keys ≡ w (mod writers).
                            let k = rng.random_range(0..STABLE / s.writers) * s.writers + w;
                            idx.put(k, (k << 32) | g, 1.0).unwrap();
                            model.insert(k, (k << 32) | g);
                        }
                        5..=7 => {
                            idx.put(next_once, once_value(next_once), 1.0).unwrap();
                            model.insert(next_once, once_value(next_once));
                            next_once += 1;
                        }
                        _ => {
                            if next_once > base {
                                let k = rng.random_range(base..next_once);
                                idx.delete(k).unwrap();
                                model.remove(&k);
                            }
                        }
                    }
                }
                model
            })
        })
        .collect();
    let readers: Vec<_> = (0..s.readers)
        .map(|t| {
            let (idx, stop, start) = (idx.clone(), stop.clone(), start.clone());
            std::thread::spawn(move || {
                let mut rng = ChaCha8Rng::seed_from_u64(1000 + t as u64);
                let mut rounds = 0u64;
                start.wait();
                while !stop.load(Ordering::Acquire) || rounds < 3 {
                    rounds += 1;
                    read_round(&idx, &mut rng);
                }
                rounds
            })
        })
        .collect();
    let maint = s.maintenance.then(|| {
        let (idx, stop) = (idx.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Acquire) {
                i += 1;
                match i % 3 {
                    0 => idx.quiesce(true).unwrap(),
                    1 => idx.quiesce(false).unwrap(),
                    _ => {
                        idx.compact_once().unwrap();
                    }
                }
                std::thread::sleep(Duration::from_micros(200));
            }
        })
    });
    start.wait();
    let mut model: BTreeMap<u64, u64> = (0..STABLE).map(|k| (k, k << 32)).collect();
    for h in writers {
        model.extend(h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)));
    }
    // The deletes of the once-keys: a writer's model lacks them, so rebuild from scratch.
    let mut full: BTreeMap<u64, u64> = (0..STABLE).map(|k| (k, k << 32)).collect();
    full.extend(
        model
            .iter()
            .filter(|(k, _)| **k < STABLE)
            .map(|(k, v)| (*k, *v)),
    );
    full.extend(
        model
            .iter()
            .filter(|(k, _)| **k >= ONCE)
            .map(|(k, v)| (*k, *v)),
    );
    stop.store(true, Ordering::Release);
    for h in readers {
        h.join().unwrap_or_else(|e| std::panic::resume_unwind(e));
    }
    if let Some(h) = maint {
        h.join().unwrap_or_else(|e| std::panic::resume_unwind(e));
    }
    idx.quiesce(true).unwrap();
    idx.check_failed().unwrap();
    let got: Vec<(u64, u64)> = scan_vec(&idx, 0, u64::MAX, Direction::Forward, usize::MAX)
        .iter()
        .map(|r| (r.key, r.value))
        .collect();
    let want: Vec<(u64, u64)> = full.iter().map(|(k, v)| (*k, *v)).collect();
    if got != want {
        let g: HashSet<_> = got.iter().copied().collect();
        let w: HashSet<_> = want.iter().copied().collect();
        let missing: Vec<_> = w.difference(&g).take(10).collect();
        let extra: Vec<_> = g.difference(&w).take(10).collect();
        panic!(
            "final content differs: {} records, want {}; missing {missing:?}, extra {extra:?}",
            got.len(),
            want.len()
        );
    }
    assert_eq!(idx.len(), full.len() as u64);
    assert_eq!(
        idx.count(ONCE, u64::MAX).unwrap(),
        (full.len() as u64) - STABLE
    );
    for (&k, &v) in full.iter().step_by(7) {
        assert_eq!(idx.get(k).unwrap().map(|r| r.value), Some(v));
    }
    assert_eq!(idx.stats().buffered, 0);
}

/// One round of reads whose results must hold under any interleaving with the writers.
fn read_round(idx: &Idx, rng: &mut ChaCha8Rng) {
    // Point lookups of stable keys: always present, with a value of their own key.
    for _ in 0..8 {
        let k = rng.random_range(0..STABLE);
        let r = idx.get(k).unwrap();
        assert!(
            r.is_some_and(|r| r.key == k && r.value >> 32 == k),
            "get({k}) = {r:?}: a key that is always live"
        );
    }
    // Every stable key is live throughout: the count is exact.
    assert_eq!(
        idx.count(0, STABLE - 1).unwrap(),
        STABLE,
        "count of the always-live keys"
    );
    let sub = rng.random_range(0..STABLE - 50);
    assert_eq!(
        idx.count(sub, sub + 49).unwrap(),
        50,
        "count({sub}, {})",
        sub + 49
    );
    // A forward scan of the stable keys sees each exactly once, in order.
    let all = scan_vec(idx, 0, STABLE - 1, Direction::Forward, usize::MAX);
    let keys: Vec<u64> = all.iter().map(|r| r.key).collect();
    assert_eq!(
        keys,
        (0..STABLE).collect::<Vec<_>>(),
        "scan of the always-live keys"
    );
    assert!(all.iter().all(|r| r.value >> 32 == r.key));
    // Reverse scans across both key classes: strictly descending, valid values.
    let rev = scan_vec(idx, 0, u64::MAX, Direction::Reverse, 200);
    assert!(
        rev.windows(2).all(|w| w[0].key > w[1].key),
        "reverse scan out of order"
    );
    for r in &rev {
        valid(r);
    }
    let fwd = scan_vec(idx, ONCE, u64::MAX, Direction::Forward, 100);
    assert!(
        fwd.windows(2).all(|w| w[0].key < w[1].key),
        "forward scan out of order"
    );
    for r in &fwd {
        valid(r);
    }
    // Once-keys: absent or with their only value.
    let w = rng.random_range(0..4u64);
    let k = ONCE + w * ONCE_PER_WRITER + rng.random_range(0..2_000);
    if let Some(r) = idx.get(k).unwrap() {
        valid(&r);
    }
    // Samples: exactly k over the always-live keys, within range and valid.
    let (lo, hi) = (
        rng.random_range(0..STABLE / 2),
        rng.random_range(STABLE / 2..STABLE),
    );
    let got = sample_vec(idx, lo, hi, 32, rng.random(), rng);
    assert_eq!(got.len(), 32);
    for r in &got {
        assert!((lo..=hi).contains(&r.key));
        valid(r);
    }
    let got = sample_vec(idx, ONCE, u64::MAX, 16, false, rng);
    assert!(got.len() == 16 || got.is_empty(), "{} samples", got.len());
    for r in &got {
        valid(r);
    }
}

/// A record some writer wrote.
fn valid(r: &Record) {
    if r.key < STABLE {
        assert_eq!(r.value >> 32, r.key, "{r:?}");
    } else {
        assert!(r.key >= ONCE, "{r:?}");
        assert_eq!(r.value, once_value(r.key), "{r:?}");
    }
}

fn stress_all(background: bool, rt_of: impl Fn() -> RuntimeOptions, s: Stress, buffer: usize) {
    for layout in LAYOUTS {
        for policy in POLICIES {
            let o = DynOptions {
                max_delete_proportion: 0.1,
                ..opts(layout, policy, buffer, 3)
            };
            let r = RuntimeOptions {
                background,
                ..rt_of()
            };
            stress(o, r, s);
        }
    }
}

const STRESS: Stress = Stress {
    writers: 3,
    ops_per_writer: 6_000,
    readers: 2,
    maintenance: false,
};

#[test]
fn concurrent_writers_and_readers_with_background_reconstruction() {
    // Tiny buffers: the worker reconstructs constantly. Larger ones: a key is often in the active buffer
    // and in a sealed one at once.
    stress_all(true, RuntimeOptions::default, STRESS, 8);
    stress_all(true, RuntimeOptions::default, STRESS, 64);
}

#[test]
fn concurrent_writers_and_readers_with_inline_reconstruction() {
    stress_all(false, RuntimeOptions::default, STRESS, 8);
    stress_all(false, RuntimeOptions::default, STRESS, 64);
}

#[test]
fn stalls_on_sealed_buffers_keep_content_correct() {
    // One buffer of 2: writers stall on nearly every write; then several sealed buffers waiting at once.
    for max_sealed_buffers in [1, 4] {
        stress_all(
            true,
            || RuntimeOptions {
                max_sealed_buffers,
                ..RuntimeOptions::default()
            },
            Stress {
                ops_per_writer: 1_500,
                ..STRESS
            },
            2,
        );
    }
}

#[test]
fn throttled_writes_keep_content_correct() {
    stress_all(
        true,
        || RuntimeOptions {
            max_sealed_buffers: 3,
            throttle: true,
            throttle_delay: Duration::from_micros(5),
            ..RuntimeOptions::default()
        },
        Stress {
            ops_per_writer: 1_500,
            ..STRESS
        },
        4,
    );
}

#[test]
fn quiesce_and_compaction_during_writes_lose_nothing() {
    for background in [true, false] {
        stress_all(
            background,
            RuntimeOptions::default,
            Stress {
                maintenance: true,
                ops_per_writer: 2_000,
                ..STRESS
            },
            16,
        );
    }
}

// ---------------------------------------------------------------------------------------------------------
// 4. Edge cases
// ---------------------------------------------------------------------------------------------------------

#[test]
fn extreme_keys_in_buffers_and_shards() {
    for layout in LAYOUTS {
        for policy in POLICIES {
            let idx = Idx::new(opts(layout, policy, 2, 2), rt(false)).unwrap();
            let mut model = Model::new();
            let mut rng = ChaCha8Rng::seed_from_u64(8);
            for (round, &k) in [0, u64::MAX, u64::MAX - 1, 1, 0, u64::MAX]
                .iter()
                .enumerate()
            {
                idx.put(k, round as u64, 1.0).unwrap();
                model.insert(k, (round as u64, 1.0));
                check_all(&idx, &model).unwrap();
                for (lo, hi) in [
                    (0, 0),
                    (u64::MAX, u64::MAX),
                    (u64::MAX - 1, u64::MAX),
                    (0, u64::MAX),
                ] {
                    assert_eq!(
                        idx.count(lo, hi).unwrap(),
                        model_range(&model, lo, hi).len() as u64
                    );
                    let got = sample_vec(&idx, lo, hi, 7, round % 2 == 0, &mut rng);
                    let live = model_range(&model, lo, hi);
                    assert_eq!(got.len(), if live.is_empty() { 0 } else { 7 });
                    for r in got {
                        assert!(live.contains(&rec_tuple(&r)), "{r:?}");
                    }
                }
            }
            for k in [u64::MAX, 0] {
                idx.delete(k).unwrap();
                model.remove(&k);
                check_all(&idx, &model).unwrap();
                idx.quiesce(true).unwrap();
                check_all(&idx, &model).unwrap();
                let got = sample_vec(&idx, k, k, 5, false, &mut rng);
                assert!(got.is_empty(), "deleted key {k} sampled: {got:?}");
            }
        }
    }
}

#[test]
fn inverted_empty_and_dead_ranges() {
    for policy in POLICIES {
        for background in [false, true] {
            let idx = Idx::new(opts(Layout::Tiering, policy, 4, 2), rt(background)).unwrap();
            let mut rng = ChaCha8Rng::seed_from_u64(1);
            for k in (0..100).map(|i| i * 10) {
                idx.put(k, k, 1.0).unwrap();
            }
            // Inverted ranges.
            assert_eq!(idx.count(500, 400).unwrap(), 0);
            assert_eq!(idx.count(u64::MAX, 0).unwrap(), 0);
            assert!(scan_vec(&idx, 500, 400, Direction::Forward, usize::MAX).is_empty());
            assert!(scan_vec(&idx, 500, 400, Direction::Reverse, usize::MAX).is_empty());
            assert!(sample_vec(&idx, 500, 400, 10, false, &mut rng).is_empty());
            assert!(sample_vec(&idx, 500, 400, 10, true, &mut rng).is_empty());
            // A range between keys.
            assert_eq!(idx.count(11, 19).unwrap(), 0);
            assert!(scan_vec(&idx, 11, 19, Direction::Forward, usize::MAX).is_empty());
            assert!(sample_vec(&idx, 11, 19, 10, false, &mut rng).is_empty());
            assert!(sample_vec(&idx, 1_000, u64::MAX, 10, false, &mut rng).is_empty());
            // max = 0 visits nothing.
            assert!(scan_vec(&idx, 0, u64::MAX, Direction::Forward, 0).is_empty());
            // A fully deleted range, buffered and then flushed.
            for k in (200..=400).step_by(10) {
                idx.delete(k).unwrap();
            }
            for _ in 0..2 {
                assert_eq!(idx.count(200, 400).unwrap(), 0);
                assert!(scan_vec(&idx, 200, 400, Direction::Reverse, usize::MAX).is_empty());
                assert!(sample_vec(&idx, 200, 400, 10, false, &mut rng).is_empty());
                assert!(sample_vec(&idx, 200, 400, 10, true, &mut rng).is_empty());
                assert_eq!(idx.get(300).unwrap(), None);
                assert_eq!(idx.len(), 79);
                idx.quiesce(true).unwrap();
            }
        }
    }
}

#[test]
fn zero_samples_and_appending_to_out() {
    let idx = Idx::new(
        opts(Layout::Leveling, DeletePolicy::Tombstone, 8, 2),
        rt(false),
    )
    .unwrap();
    for k in 0..50 {
        idx.put(k, k, 1.0).unwrap();
    }
    let mut rng = ChaCha8Rng::seed_from_u64(2);
    let sentinel = Record {
        key: 999,
        value: 999,
        weight: 9.0,
    };
    let mut out = vec![sentinel; 3];
    idx.sample(&RangeSample { lo: 0, hi: 49 }, 0, &mut rng, &mut out)
        .unwrap();
    assert_eq!(out, vec![sentinel; 3], "k = 0 must draw nothing");
    idx.sample(
        &WeightedRangeSample { lo: 0, hi: 49 },
        0,
        &mut rng,
        &mut out,
    )
    .unwrap();
    assert_eq!(out.len(), 3);
    idx.sample(&RangeSample { lo: 0, hi: 49 }, 5, &mut rng, &mut out)
        .unwrap();
    assert_eq!(out.len(), 8);
    assert_eq!(out[..3], [sentinel; 3], "samples are appended");
    assert!(out[3..].iter().all(|r| r.key < 50 && r.value == r.key));
}

#[test]
fn invalid_weights_are_rejected_without_effect() {
    for background in [false, true] {
        let o = DynOptions {
            weighted: true,
            ..opts(Layout::Tiering, DeletePolicy::Tagging, 4, 2)
        };
        let idx = Idx::new(o, rt(background)).unwrap();
        idx.put(1, 10, 2.0).unwrap();
        for w in [
            -1.0,
            -f64::MIN_POSITIVE,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ] {
            assert!(idx.put(1, 11, w).is_err(), "weight {w} accepted");
            assert!(idx.put(2, 11, w).is_err(), "weight {w} accepted");
        }
        assert_eq!(
            idx.get(1).unwrap().map(|r| (r.value, r.weight)),
            Some((10, 2.0))
        );
        assert_eq!(idx.get(2).unwrap(), None);
        assert_eq!(idx.len(), 1);
        // Zero weights are valid; such records are live but never drawn by weighted queries.
        idx.put(3, 30, 0.0).unwrap();
        idx.put(4, 40, -0.0).unwrap();
        assert_eq!(idx.len(), 3);
        idx.check_failed().unwrap();
        idx.quiesce(true).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(4);
        let got = sample_vec(&idx, 0, 10, 100, true, &mut rng);
        assert!(
            got.len() == 100 && got.iter().all(|r| r.key == 1),
            "{got:?}"
        );
        assert!(sample_vec(&idx, 3, 4, 10, true, &mut rng).is_empty());
        assert_eq!(sample_vec(&idx, 3, 4, 10, false, &mut rng).len(), 10);
    }
    // Unweighted indexes ignore weights: whatever is passed, a record weighs 1.
    let idx = Idx::new(opts(Layout::Bsm, DeletePolicy::Tombstone, 4, 2), rt(false)).unwrap();
    idx.put(1, 10, f64::NAN).unwrap();
    idx.put(2, 20, -3.0).unwrap();
    assert_eq!(idx.get(1).unwrap().map(|r| r.weight), Some(1.0));
    idx.quiesce(true).unwrap();
    assert_eq!(idx.get(2).unwrap().map(|r| r.weight), Some(1.0));
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    assert_eq!(sample_vec(&idx, 0, 9, 10, true, &mut rng).len(), 10);
}

#[test]
fn invalid_options_are_rejected() {
    let base = DynOptions::default();
    let bad = [
        DynOptions {
            scale_factor: 1,
            ..base.clone()
        },
        DynOptions {
            scale_factor: 0,
            ..base.clone()
        },
        DynOptions {
            scale_factor: 65,
            ..base.clone()
        },
        DynOptions {
            buffer_capacity: 0,
            ..base.clone()
        },
        DynOptions {
            max_delete_proportion: 0.0,
            ..base.clone()
        },
        DynOptions {
            max_delete_proportion: -0.1,
            ..base.clone()
        },
        DynOptions {
            max_delete_proportion: 1.5,
            ..base.clone()
        },
        DynOptions {
            max_delete_proportion: f64::NAN,
            ..base.clone()
        },
        DynOptions {
            max_rejection_rate: 0.0,
            ..base.clone()
        },
        DynOptions {
            bloom_fpr: 0.0,
            ..base.clone()
        },
        DynOptions {
            bloom_fpr: 1.0,
            ..base.clone()
        },
    ];
    for o in bad {
        for background in [false, true] {
            assert!(
                Idx::new(o.clone(), rt(background)).is_err(),
                "{o:?} accepted"
            );
        }
    }
    // The boundaries themselves are valid.
    for o in [
        DynOptions {
            scale_factor: 2,
            buffer_capacity: 1,
            max_delete_proportion: 1.0,
            ..base.clone()
        },
        DynOptions {
            scale_factor: 64,
            ..base.clone()
        },
    ] {
        let idx = Idx::new(o, rt(true)).unwrap();
        idx.put(1, 1, 1.0).unwrap();
        idx.put(2, 2, 1.0).unwrap();
        assert_eq!(idx.len(), 2);
    }
}

/// `max_sealed_buffers: 0` must not hang a writer (either rejected, or writers wait for each flush).
#[test]
fn no_sealed_buffers_allowed_does_not_hang() {
    for background in [false, true] {
        watchdog(20, move || {
            let r = RuntimeOptions {
                background,
                max_sealed_buffers: 0,
                ..RuntimeOptions::default()
            };
            let Ok(idx) = Idx::new(opts(Layout::Leveling, DeletePolicy::Tombstone, 2, 2), r) else {
                return;
            };
            for k in 0..20 {
                idx.put(k, k, 1.0).unwrap();
            }
            idx.quiesce(true).unwrap();
            assert_eq!(idx.len(), 20);
        });
    }
}

/// `compact_once` with something to compact returns, compacts and keeps the content.
#[test]
fn compact_once_compacts_and_keeps_content() {
    for layout in LAYOUTS {
        for policy in POLICIES {
            for background in [false, true] {
                watchdog(20, move || {
                    let o = DynOptions {
                        max_delete_proportion: 1.0,
                        ..opts(layout, policy, 8, 2)
                    };
                    let idx = Idx::new(o, rt(background)).unwrap();
                    let mut model = Model::new();
                    for k in 0..100 {
                        idx.put(k, k, 1.0).unwrap();
                        model.insert(k, (k, 1.0));
                    }
                    // Every record in a shard before the deletes, so they leave tags or tombstones that no
                    // merge running meanwhile has already applied.
                    idx.quiesce(true).unwrap();
                    for k in (0..100).step_by(3) {
                        idx.delete(k).unwrap();
                        model.remove(&k);
                    }
                    idx.quiesce(true).unwrap();
                    let st = idx.stats();
                    assert!(
                        st.tombstones + st.tagged > 0,
                        "{layout:?} {policy:?}: nothing to compact: {st:?}"
                    );
                    let mut rounds = 0;
                    while idx.compact_once().unwrap() {
                        check_all(&idx, &model).unwrap();
                        rounds += 1;
                        assert!(rounds < 100, "compaction does not converge");
                    }
                    let st = idx.stats();
                    assert_eq!(
                        st.tombstones + st.tagged,
                        0,
                        "{layout:?} {policy:?}: {st:?}"
                    );
                    check_all(&idx, &model).unwrap();
                    // Writing after compaction still works.
                    for k in 0..40 {
                        idx.put(k, k + 1, 1.0).unwrap();
                        model.insert(k, (k + 1, 1.0));
                    }
                    idx.quiesce(true).unwrap();
                    check_all(&idx, &model).unwrap();
                });
            }
        }
    }
}

/// Under tiering, a level over δ is merged into one new run of the level below, as when it fills up: the
/// runs already there stay as they are (rewriting them with it would make every compaction cost the whole
/// deeper level).
#[test]
fn a_tiering_compaction_appends_a_run_and_keeps_the_runs_below() {
    let o = DynOptions {
        max_delete_proportion: 0.05,
        ..opts(Layout::Tiering, DeletePolicy::Tombstone, 4, 3)
    };
    let idx = Idx::new(o, rt(false)).unwrap();
    let mut model = Model::new();
    // Eight buffers of new keys: the first seven are flushed as they fill (the eighth waits for a write
    // that finds it full), level 0 filling up twice on the way and becoming two runs of level 1.
    for k in 0..32 {
        idx.put(k, k, 1.0).unwrap();
        model.insert(k, (k, 1.0));
    }
    let ids = |level: usize| -> Vec<u64> {
        idx.version()
            .levels
            .get(level)
            .map(|l| l.iter().map(|s| s.id).collect())
            .unwrap_or_default()
    };
    let below = ids(1);
    assert_eq!(below.len(), 2, "{:?}", idx.stats());
    // A buffer with a delete of a key of level 1: its tombstone puts level 0 over δ (0.05 · 12 < 1).
    idx.delete(0).unwrap();
    model.remove(&0);
    for k in 100..103 {
        idx.put(k, k, 1.0).unwrap();
        model.insert(k, (k, 1.0));
    }
    idx.quiesce(true).unwrap();
    let st = idx.stats();
    assert!(st.compactions >= 1, "{st:?}");
    assert!(ids(0).is_empty(), "{st:?}");
    let after = ids(1);
    assert_eq!(after.len(), 3, "{st:?}");
    assert_eq!(
        after[..2],
        below[..],
        "the runs of level 1 were rewritten: {st:?}"
    );
    check_all(&idx, &model).unwrap();
}

/// Dropping an index with sealed buffers waiting, and quiescing an empty one, return promptly.
#[test]
fn drop_and_quiesce_edge_cases() {
    watchdog(20, || {
        for background in [false, true] {
            let idx = Idx::new(
                opts(Layout::Tiering, DeletePolicy::Tombstone, 1, 2),
                rt(background),
            )
            .unwrap();
            idx.quiesce(true).unwrap();
            idx.quiesce(false).unwrap();
            assert!(!idx.compact_once().unwrap());
            assert!(idx.is_empty());
            let r = RuntimeOptions {
                background,
                max_sealed_buffers: 8,
                ..RuntimeOptions::default()
            };
            let idx = Idx::new(opts(Layout::Tiering, DeletePolicy::Tagging, 1, 2), r).unwrap();
            for k in 0..200 {
                idx.put(k % 7, k, 1.0).unwrap();
            }
            assert_eq!(idx.len(), 7);
            drop(idx);
        }
    });
}

/// Writers that never wait, against a thread that keeps sealing the active buffer (`quiesce(true)`) and
/// compacting: every acknowledged write must survive. A write that lands in a buffer after its flush has
/// read it is lost; a compaction that publishes levels from before a concurrent flush drops that flush.
#[test]
fn sealing_and_compacting_under_writers_loses_no_write() {
    for background in [true, false] {
        for policy in POLICIES {
            watchdog(30, move || {
                let o = DynOptions {
                    max_delete_proportion: 1.0,
                    ..opts(Layout::Tiering, policy, 1_024, 4)
                };
                let idx = Arc::new(Idx::new(o, rt(background)).unwrap());
                let stop = Arc::new(AtomicBool::new(false));
                let sealed = Arc::new(AtomicU64::new(0));
                let sealer = {
                    let (idx, stop, sealed) = (idx.clone(), stop.clone(), sealed.clone());
                    std::thread::spawn(move || {
                        let mut n = 0u64;
                        while !stop.load(Ordering::Acquire) {
                            n += 1;
                            if n.is_multiple_of(4) {
                                idx.compact_once().unwrap();
                            } else {
                                idx.quiesce(true).unwrap();
                            }
                            sealed.store(n, Ordering::Release);
                        }
                        n
                    })
                };
                let writers: Vec<_> = (0..4u64)
                    .map(|w| {
                        let (idx, sealed) = (idx.clone(), sealed.clone());
                        std::thread::spawn(move || {
                            for i in 0..15_000u64 {
                                // Interleave with the sealer whatever the scheduling: before each
                                // 1 000-write stretch, wait until it has sealed or compacted once more.
                                if i.is_multiple_of(1_000) {
                                    while sealed.load(Ordering::Acquire) < i / 1_000 {
                                        std::thread::yield_now();
                                    }
                                }
                                let k = i * 4 + w;
                                idx.put(k, k + 1, 1.0).unwrap();
                                // Overwrites and deletes give compactions something to do.
                                if i % 5 == 4 {
                                    idx.delete(k - 16).unwrap();
                                }
                            }
                        })
                    })
                    .collect();
                for h in writers {
                    h.join().unwrap();
                }
                stop.store(true, Ordering::Release);
                let seals = sealer.join().unwrap();
                assert!(seals > 10, "only {seals} seals");
                idx.quiesce(true).unwrap();
                // Writer w deleted key (i − 4)·4 + w for every i ≡ 4 (mod 5): the keys with (k / 4) ≡ 0 (mod 5).
                let want: Vec<u64> = (0..60_000u64).filter(|k| (k / 4) % 5 != 0).collect();
                let got: Vec<u64> = scan_vec(&idx, 0, u64::MAX, Direction::Forward, usize::MAX)
                    .iter()
                    .map(|r| {
                        assert_eq!(r.value, r.key + 1);
                        r.key
                    })
                    .collect();
                if got != want {
                    let g: HashSet<u64> = got.iter().copied().collect();
                    let w: HashSet<u64> = want.iter().copied().collect();
                    let mut missing: Vec<_> = w.difference(&g).copied().collect();
                    missing.sort_unstable();
                    let mut extra: Vec<_> = g.difference(&w).copied().collect();
                    extra.sort_unstable();
                    panic!(
                        "{policy:?} background {background}: {} missing (first {:?}), {} extra (first {:?})",
                        missing.len(),
                        &missing[..missing.len().min(8)],
                        extra.len(),
                        &extra[..extra.len().min(8)]
                    );
                }
                assert_eq!(idx.len(), want.len() as u64);
            });
        }
    }
}
