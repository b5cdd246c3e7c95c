//! Tests of `weighted_abtree`.

use super::*;
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;

/// `cases` proptest cases unless `PROPTEST_CASES` says otherwise.
fn proptest_config(cases: u32) -> ProptestConfig {
    let mut c = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        c.cases = cases;
    }
    c
}

/// key → (value, weight).
type Model = BTreeMap<u64, (u64, f64)>;

#[derive(Debug, Clone)]
enum Op {
    Put(u64, u64, f64),
    Delete(u64),
}

fn weight() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(0.0),
        Just(1.0),
        0.0f64..1000.0,
        (1u32..100_000).prop_map(f64::from),
    ]
}

fn op(keys: u64) -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..keys, any::<u64>(), weight()).prop_map(|(k, v, w)| Op::Put(k, v, w)),
        2 => (0..keys).prop_map(Op::Delete),
    ]
}

/// Σ of the model's weights over `[lo, hi]`.
fn model_weight(model: &Model, lo: u64, hi: u64) -> f64 {
    if lo > hi {
        return 0.0;
    }
    model.range(lo..=hi).map(|(_, &(_, w))| w).sum()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * a.abs().max(b.abs()) + 1e-12
}

/// Everything the tree answers about `model`: invariants, length, gets, counts, prefixes, range
/// weights and scans.
fn agrees(
    tree: &WeightedBPlusTree,
    model: &Model,
    keys: u64,
    probes: &[(u64, u64)],
) -> std::result::Result<(), TestCaseError> {
    tree.check().map_err(TestCaseError::fail)?;
    prop_assert_eq!(tree.len(), model.len() as u64);
    for k in 0..keys {
        prop_assert_eq!(tree.get(k), model.get(&k).copied(), "get({})", k);
    }
    prop_assert!(close(tree.total_weight(), model_weight(model, 0, u64::MAX)));
    for &(lo, hi) in probes {
        let count = if lo <= hi {
            model.range(lo..=hi).count() as u64
        } else {
            0
        };
        prop_assert_eq!(tree.count(lo, hi), count, "count({}, {})", lo, hi);
        let w = tree.range_weight(lo, hi);
        let want = model_weight(model, lo, hi);
        prop_assert!(
            close(w, want),
            "range_weight({lo}, {hi}) = {w}, model {want}"
        );
        prop_assert_eq!(w > 0.0, want > 0.0);
        let (rank, p) = tree.prefix(lo, false);
        prop_assert_eq!(rank, model.range(..lo).count() as u64);
        prop_assert!(close(p, model.range(..lo).map(|(_, &(_, w))| w).sum()));
    }
    let mut seen = Vec::new();
    tree.visit_range(0, u64::MAX, false, &mut |k, v| {
        seen.push((k, v));
        Ok::<bool, ()>(true)
    })
    .unwrap();
    let want: Vec<(u64, u64)> = model.iter().map(|(&k, &(v, _))| (k, v)).collect();
    prop_assert_eq!(&seen, &want);
    seen.clear();
    tree.visit_range(0, u64::MAX, true, &mut |k, v| {
        seen.push((k, v));
        Ok::<bool, ()>(true)
    })
    .unwrap();
    seen.reverse();
    prop_assert_eq!(&seen, &want);
    Ok(())
}

proptest! {
    #![proptest_config(proptest_config(48))]

    /// Random put/overwrite/delete sequences against a `BTreeMap`, invariants checked after every
    /// operation (counts and weight sums of every inner entry equal to its subtree's), then gets,
    /// length, range counts, range weights, prefixes and scans; optionally every key deleted again.
    #[test]
    fn matches_a_btreemap_model(
        fanout in prop::sample::select(vec![4usize, 5, 8, 64]),
        ops in prop::collection::vec(op(400), 0..1500),
        probes in prop::collection::vec((0u64..420, 0u64..420), 12),
        drain in any::<bool>(),
    ) {
        let mut tree = WeightedBPlusTree::with_fanout(fanout);
        let mut model = Model::new();
        for op in &ops {
            match *op {
                Op::Put(k, v, w) => {
                    let new = tree.insert(k, v, w).unwrap();
                    prop_assert_eq!(new, model.insert(k, (v, w)).is_none());
                }
                Op::Delete(k) => {
                    prop_assert_eq!(tree.delete(k), model.remove(&k).is_some());
                }
            }
            tree.check().map_err(TestCaseError::fail)?;
        }
        agrees(&tree, &model, 420, &probes)?;
        let max_height = 2 + (model.len().max(1) as f64).log((fanout / 2) as f64).ceil() as u32;
        prop_assert!(tree.height() <= max_height, "height {} for {} records", tree.height(), model.len());
        if drain {
            // Alternately from both ends, so merges happen on both sides.
            let keys: Vec<u64> = model.keys().copied().collect();
            let (mut i, mut j) = (0, keys.len());
            while i < j {
                let k = if (j - i) % 2 == 0 { i += 1; keys[i - 1] } else { j -= 1; keys[j] };
                prop_assert!(tree.delete(k));
                model.remove(&k);
                tree.check().map_err(TestCaseError::fail)?;
            }
            prop_assert!(tree.is_empty());
            prop_assert_eq!(tree.height(), 1);
            agrees(&tree, &model, 420, &probes)?;
        }
    }
}

/// Upper 10⁻⁶ quantile of the chi-square distribution with `df` degrees of freedom (Wilson–Hilferty;
/// within a few percent for df ≥ 10).
fn chi_square_critical(df: usize) -> f64 {
    const Z: f64 = 4.753_424; // the standard normal's upper 10⁻⁶ quantile
    let d = df as f64;
    let c = 2.0 / (9.0 * d);
    d * (1.0 - c + Z * c.sqrt()).powi(3)
}

/// Pearson's chi-square test of draw `counts` against probabilities proportional to `weights`: `Err`
/// (with the statistic) when it rejects at p < 10⁻⁶, or when a category of weight 0 was drawn.
fn chi_square(counts: &[u64], weights: &[f64]) -> std::result::Result<f64, String> {
    let n: u64 = counts.iter().sum();
    let total: f64 = weights.iter().sum();
    let (mut stat, mut df) = (0.0, 0usize);
    for (i, (&c, &w)) in counts.iter().zip(weights).enumerate() {
        if w == 0.0 {
            if c > 0 {
                return Err(format!("category {i} of weight 0 drawn {c} times"));
            }
            continue;
        }
        let e = n as f64 * w / total;
        assert!(
            e >= 5.0,
            "expected count {e} of category {i} is too small for the test"
        );
        stat += (c as f64 - e).powi(2) / e;
        df += 1;
    }
    let critical = chi_square_critical(df - 1);
    if stat > critical {
        Err(format!(
            "chi-square {stat:.1} > {critical:.1} (df {})",
            df - 1
        ))
    } else {
        Ok(stat)
    }
}

/// How often each of `keys` (sorted) was drawn.
fn tally(keys: &[u64], draws: &[u64]) -> Vec<u64> {
    let mut counts = vec![0u64; keys.len()];
    for d in draws {
        counts[keys.binary_search(d).expect("a drawn key is a key")] += 1;
    }
    counts
}

/// `n` distinct random keys, sorted, with integer weights 1..=50 (every 7th 0, every 5th + ½).
fn weighted_keys(n: usize, rng: &mut ChaCha8Rng) -> (Vec<u64>, Vec<f64>) {
    let mut keys: Vec<u64> = (0..n).map(|_| rng.random()).collect();
    keys.sort_unstable();
    keys.dedup();
    let weights = (0..keys.len())
        .map(|i| match (i % 7, i % 5) {
            (0, _) => 0.0,
            (_, 0) => f64::from(rng.random_range(1..=50u32)) + 0.5,
            _ => f64::from(rng.random_range(1..=50u32)),
        })
        .collect();
    (keys, weights)
}

fn tree_of(fanout: usize, keys: &[u64], weights: &[f64]) -> WeightedBPlusTree {
    let mut tree = WeightedBPlusTree::with_fanout(fanout);
    for (&k, &w) in keys.iter().zip(weights) {
        tree.insert(k, !k, w).unwrap();
    }
    tree.check().unwrap();
    tree
}

/// Whole-set draws of `tree`, checking each value.
fn draw_all(tree: &WeightedBPlusTree, n: usize, rng: &mut ChaCha8Rng) -> Vec<u64> {
    let mut draws = Vec::with_capacity(n);
    let got = tree
        .sample(n, rng, |k, v| {
            assert_eq!(v, !k);
            draws.push(k);
            Ok::<(), WeightedTreeError>(())
        })
        .unwrap();
    assert_eq!(got, n);
    draws
}

#[test]
fn whole_set_sampling_is_proportional_to_weight() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    for fanout in [4, 8, FANOUT] {
        let (keys, weights) = weighted_keys(1500, &mut rng);
        let tree = tree_of(fanout, &keys, &weights);
        assert!(tree.height() >= if fanout == FANOUT { 2 } else { 4 });
        let draws = draw_all(&tree, 600_000, &mut rng);
        let counts = tally(&keys, &draws);
        chi_square(&counts, &weights).unwrap_or_else(|e| panic!("fanout {fanout}: {e}"));
    }
}

#[test]
fn range_sampling_stays_in_range_and_is_proportional() {
    let mut rng = ChaCha8Rng::seed_from_u64(12);
    let (keys, weights) = weighted_keys(6000, &mut rng);
    let mut tree = tree_of(8, &keys, &weights);
    let mut model: Model = keys
        .iter()
        .zip(&weights)
        .map(|(&k, &w)| (k, (!k, w)))
        .collect();
    // A third of the records deleted, some reinserted with new weights.
    for &k in &keys {
        if rng.random_bool(1.0 / 3.0) {
            assert!(tree.delete(k));
            model.remove(&k);
        } else if rng.random_bool(0.1) {
            let w = f64::from(rng.random_range(1..=20u32));
            tree.insert(k, !k, w).unwrap();
            model.insert(k, (!k, w));
        }
    }
    tree.check().unwrap();
    let live: Vec<u64> = model.keys().copied().collect();
    for q in 0..8 {
        // 400 live keys at a random position; odd queries take bounds between keys.
        let a = rng.random_range(0..live.len() - 400);
        let (mut lo, mut hi) = (live[a], live[a + 399]);
        if q % 2 == 1 {
            lo = live[a - 1] + 1;
            hi = live[a + 400] - 1;
        }
        let in_range: Vec<u64> = model.range(lo..=hi).map(|(&k, _)| k).collect();
        let w: Vec<f64> = in_range.iter().map(|k| model[k].1).collect();
        assert_eq!(in_range.len(), 400);
        let mut draws = Vec::new();
        let got = tree
            .sample_range(lo, hi, 200_000, &mut rng, |k, v| {
                assert!((lo..=hi).contains(&k), "{k} outside [{lo}, {hi}]");
                let (value, weight) = model.get(&k).copied().expect("a live key");
                assert_eq!(v, value);
                assert!(weight > 0.0, "zero-weight key {k} drawn");
                draws.push(k);
                Ok::<(), WeightedTreeError>(())
            })
            .unwrap();
        assert_eq!(got, 200_000);
        chi_square(&tally(&in_range, &draws), &w).unwrap_or_else(|e| panic!("query {q}: {e}"));
    }
}

#[test]
fn zero_weight_records_are_never_sampled() {
    let mut rng = ChaCha8Rng::seed_from_u64(13);
    let mut tree = WeightedBPlusTree::with_fanout(8);
    // Keys 0..3000; only multiples of 97 weigh anything.
    for k in 0..3000u64 {
        tree.insert(k, !k, if k % 97 == 0 { 1.0 + k as f64 } else { 0.0 })
            .unwrap();
    }
    let draws = draw_all(&tree, 100_000, &mut rng);
    assert!(draws.iter().all(|k| k % 97 == 0));
    fn never(tree: &WeightedBPlusTree, lo: u64, hi: u64, rng: &mut ChaCha8Rng) {
        let got = tree
            .sample_range(
                lo,
                hi,
                1000,
                rng,
                |k, _| -> std::result::Result<(), WeightedTreeError> {
                    panic!("[{lo}, {hi}] drew {k}")
                },
            )
            .unwrap();
        assert_eq!(got, 0);
    }
    never(&tree, 1, 96, &mut rng); // only zero weights
    never(&tree, 5000, 9000, &mut rng); // no keys
    never(&tree, 40, 30, &mut rng); // lo > hi
    // Ranges with one positive record always draw it.
    let mut one = Vec::new();
    tree.sample_range(1, 100, 500, &mut rng, |k, _| {
        one.push(k);
        Ok::<(), WeightedTreeError>(())
    })
    .unwrap();
    assert!(one.len() == 500 && one.iter().all(|&k| k == 97));
    // Overwritten to 0, or deleted: never drawn again.
    tree.insert(97, !97, 0.0).unwrap();
    assert!(tree.delete(194));
    tree.check().unwrap();
    never(&tree, 1, 200, &mut rng);
    assert!(
        draw_all(&tree, 50_000, &mut rng)
            .iter()
            .all(|&k| k % 97 == 0 && k != 97 && k != 194)
    );
    // Everything zero: nothing at all, whole set or range.
    let mut zero = WeightedBPlusTree::with_fanout(8);
    for k in 0..500 {
        zero.insert(k, k, 0.0).unwrap();
    }
    assert_eq!(
        zero.sample(100, &mut rng, |_, _| Ok::<(), WeightedTreeError>(()))
            .unwrap(),
        0
    );
    never(&zero, 0, u64::MAX, &mut rng);
    never(&zero, 10, 400, &mut rng);
    never(&WeightedBPlusTree::new(), 0, u64::MAX, &mut rng);
}

/// The chi-square check above can fail: samplers with realistic bugs are rejected.
#[test]
fn chi_square_check_rejects_biased_samplers() {
    let mut rng = ChaCha8Rng::seed_from_u64(14);
    let (keys, weights) = weighted_keys(1500, &mut rng);
    let tree = tree_of(8, &keys, &weights);
    let n = 600_000;
    // The right sampler passes.
    chi_square(&tally(&keys, &draw_all(&tree, n, &mut rng)), &weights).unwrap();
    // Uniform over the records of positive weight (weights ignored).
    let positive: Vec<u64> = keys
        .iter()
        .zip(&weights)
        .filter(|(_, w)| **w > 0.0)
        .map(|(k, _)| *k)
        .collect();
    let uniform: Vec<u64> = (0..n)
        .map(|_| positive[rng.random_range(0..positive.len())])
        .collect();
    assert!(chi_square(&tally(&keys, &uniform), &weights).is_err());
    // Off by one: each draw reports the next positive-weight record.
    let shifted: Vec<u64> = draw_all(&tree, n, &mut rng)
        .iter()
        .map(|k| {
            let i = positive.binary_search(k).unwrap();
            positive[(i + 1) % positive.len()]
        })
        .collect();
    assert!(chi_square(&tally(&keys, &shifted), &weights).is_err());
    // Subtle: the first half of the keys over-weighted by 10%.
    let skewed: Vec<f64> = weights
        .iter()
        .enumerate()
        .map(|(i, &w)| if i < weights.len() / 2 { w * 1.1 } else { w })
        .collect();
    let biased = tree_of(8, &keys, &skewed);
    let err = chi_square(&tally(&keys, &draw_all(&biased, n, &mut rng)), &weights).unwrap_err();
    assert!(err.contains("chi-square"), "{err}");
    // Drawing a zero-weight record is rejected outright.
    let mut counts = tally(&keys, &draw_all(&tree, n, &mut rng));
    counts[0] += 1;
    assert!(weights[0] == 0.0 && chi_square(&counts, &weights).is_err());
}

/// An RNG whose words are, in turn, 0 (u = P_lo exactly), `u64::MAX` (u as close to P_hi as a draw
/// gets) and random: every range query draws at both of its ends.
struct EdgeRng {
    inner: ChaCha8Rng,
    turn: u64,
}

impl rand::RngCore for EdgeRng {
    fn next_u32(&mut self) -> u32 {
        self.next_u64() as u32
    }
    fn next_u64(&mut self) -> u64 {
        self.turn += 1;
        match self.turn % 3 {
            0 => 0,
            1 => u64::MAX,
            _ => self.inner.next_u64(),
        }
    }
    fn fill_bytes(&mut self, dst: &mut [u8]) {
        self.inner.fill_bytes(dst)
    }
}

/// With weights over twelve orders of magnitude (every sum rounds), draws at a range's exact ends can
/// land on the neighbouring record (a stored child sum and the running sum of its entries differ in the
/// last bit); range sampling rejects those and returns only in-range, positive-weight records.
#[test]
fn draws_at_the_ends_of_a_range_stay_in_it() {
    let mut rng = ChaCha8Rng::seed_from_u64(15);
    let mut tree = WeightedBPlusTree::with_fanout(6);
    let mut model = Model::new();
    for k in 0..5000u64 {
        let w = if k % 11 == 0 {
            0.0
        } else {
            rng.random::<f64>() * 10f64.powi(rng.random_range(-6..6))
        };
        tree.insert(k * 3, k, w).unwrap();
        model.insert(k * 3, (k, w));
    }
    tree.check().unwrap();
    // The rounding is real: some draws at P_lo land left of the range.
    let total = tree.total_weight();
    let left_of = (0..15_000u64)
        .filter(|&x| {
            let (_, p) = tree.prefix(x, false);
            p < total && {
                let (l, i) = tree.select(p).unwrap();
                assert!(tree.leaves[l].weights[i] > 0.0);
                tree.leaves[l].keys[i] < x
            }
        })
        .count();
    assert!(left_of > 0);
    let mut edges = EdgeRng {
        inner: ChaCha8Rng::seed_from_u64(16),
        turn: 0,
    };
    for x in (0..15_000u64).step_by(7) {
        let hi = x + rng.random_range(0..40);
        let want = model_weight(&model, x, hi) > 0.0;
        let got = tree
            .sample_range(x, hi, 30, &mut edges, |k, v| {
                assert!((x..=hi).contains(&k), "{k} outside [{x}, {hi}]");
                let (value, weight) = model[&k];
                assert!(v == value && weight > 0.0);
                Ok::<(), WeightedTreeError>(())
            })
            .unwrap();
        assert_eq!(got, if want { 30 } else { 0 });
    }
}

#[test]
fn invalid_weights_are_refused_and_change_nothing() {
    let mut tree = WeightedBPlusTree::with_fanout(4);
    for k in 0..50 {
        tree.insert(k, k, 2.0).unwrap();
    }
    for w in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -1.0, -1e-300] {
        for key in [7, 1000] {
            let err = tree.insert(key, 99, w).unwrap_err();
            assert!(matches!(err, WeightedTreeError::InvalidWeight { key: k, .. } if k == key));
        }
    }
    assert_eq!(tree.len(), 50);
    assert_eq!(tree.get(7), Some((7, 2.0)));
    assert_eq!(tree.get(1000), None);
    assert_eq!(tree.total_weight(), 100.0);
    tree.check().unwrap();
    // -0.0 is a valid zero weight.
    tree.insert(7, 7, -0.0).unwrap();
    assert_eq!(tree.total_weight(), 98.0);
    tree.check().unwrap();
}

/// Weight sums that floating point cannot carry are refused, not looped on or sampled wrongly.
#[test]
fn unresolvable_and_overflowing_weights_are_errors() {
    let mut rng = ChaCha8Rng::seed_from_u64(16);
    let mut tree = WeightedBPlusTree::with_fanout(4);
    tree.insert(0, 0, 1e300).unwrap();
    tree.insert(1, 1, 1e-300).unwrap();
    tree.insert(2, 2, 1.0).unwrap();
    let ok = |_: u64, _: u64| Ok::<(), WeightedTreeError>(());
    assert_eq!(
        tree.sample_range(1, 1, 10, &mut rng, ok),
        Err(WeightedTreeError::BelowResolution { lo: 1, hi: 1 })
    );
    // 1 next to 1e300 is a rounding error of the prefix sums as well.
    assert!(tree.sample_range(1, 2, 10, &mut rng, ok).is_err());
    assert_eq!(tree.sample_range(0, 1, 10, &mut rng, ok), Ok(10));
    tree.insert(3, 3, f64::MAX).unwrap();
    tree.insert(4, 4, f64::MAX).unwrap();
    assert_eq!(
        tree.sample(10, &mut rng, ok),
        Err(WeightedTreeError::WeightOverflow)
    );
    assert_eq!(
        tree.sample_range(2, 4, 10, &mut rng, ok),
        Err(WeightedTreeError::WeightOverflow)
    );
    // The prefix before key 4 overflows already.
    assert_eq!(
        tree.sample_range(4, 4, 10, &mut rng, ok),
        Err(WeightedTreeError::WeightOverflow)
    );
    assert_eq!(tree.sample_range(0, 2, 10, &mut rng, ok), Ok(10));
    tree.check().unwrap();
}

#[test]
fn height_stays_logarithmic_through_growth_and_shrinkage() {
    let mut rng = ChaCha8Rng::seed_from_u64(17);
    for (fanout, n) in [(FANOUT, 200_000usize), (4, 20_000)] {
        let mut tree = WeightedBPlusTree::with_fanout(fanout);
        let mut keys: Vec<u64> = (0..n).map(|_| rng.random()).collect();
        keys.sort_unstable();
        keys.dedup();
        let mut order = keys.clone();
        for i in (1..order.len()).rev() {
            order.swap(i, rng.random_range(0..=i));
        }
        for &k in &order {
            tree.insert(k, k, 1.0).unwrap();
        }
        tree.check().unwrap();
        let bound = |len: usize| 1 + (len.max(2) as f64).log((fanout / 2) as f64).ceil() as u32;
        assert!(
            tree.height() <= bound(keys.len()),
            "fanout {fanout}: height {}",
            tree.height()
        );
        for (i, &k) in order.iter().enumerate().take(keys.len() - 100) {
            assert!(tree.delete(k));
            if i % 5000 == 0 {
                tree.check().unwrap();
            }
        }
        tree.check().unwrap();
        assert_eq!(tree.len(), 100);
        assert!(
            tree.height() <= bound(100),
            "fanout {fanout}: height {} for 100 keys",
            tree.height()
        );
        assert_eq!(tree.count(0, u64::MAX), 100);
        for &k in &order[keys.len() - 100..] {
            assert!(tree.delete(k));
        }
        assert!(tree.is_empty() && tree.height() == 1);
        tree.check().unwrap();
        // Freed nodes are reused: a second fill allocates no new leaves.
        let leaves = tree.leaves.len();
        for &k in &order[..n / 2] {
            tree.insert(k, k, 1.0).unwrap();
        }
        assert!(tree.leaves.len() <= leaves);
        tree.check().unwrap();
    }
}

/// Many overwrites with fractional weights: every stored sum stays exactly the sum of its child (the
/// check is bit for bit) and the total matches a fresh sum.
#[test]
fn sums_do_not_drift_over_many_updates() {
    let mut rng = ChaCha8Rng::seed_from_u64(18);
    let mut tree = WeightedBPlusTree::with_fanout(16);
    let mut model = Model::new();
    for _ in 0..400_000 {
        let k = rng.random_range(0..2000u64);
        if rng.random_bool(0.1) {
            tree.delete(k);
            model.remove(&k);
        } else {
            let w = rng.random::<f64>() * 1000.0;
            tree.insert(k, k, w).unwrap();
            model.insert(k, (k, w));
        }
    }
    tree.check().unwrap();
    let fresh = model_weight(&model, 0, u64::MAX);
    assert!(
        close(tree.total_weight(), fresh),
        "{} vs {fresh}",
        tree.total_weight()
    );
    assert!(close(
        tree.range_weight(500, 1500),
        model_weight(&model, 500, 1500)
    ));
}

#[test]
fn the_engine_and_driver_work_in_memory() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let opts = EngineOptions::default();
    let engine = WeightedAbTree;
    assert_eq!(engine.name(), "weighted-ab-tree");
    assert!(engine.capabilities().sample && engine.capabilities().count);
    let db = engine.create(&dir, &opts).unwrap();
    assert!(dir.is_dir() && std::fs::read_dir(&dir).unwrap().next().is_none());
    for k in 0..1000u64 {
        db.put_weighted(k, &(k * 10).to_be_bytes(), (k % 4) as f64)
            .unwrap();
    }
    db.put(5000, &7u64.to_be_bytes()).unwrap();
    db.put_batch(&[
        (5001, &8u64.to_be_bytes()[..]),
        (5002, &9u64.to_be_bytes()[..]),
    ])
    .unwrap();
    let mut v = Vec::new();
    assert!(db.get(17, &mut v).unwrap() && v == 170u64.to_be_bytes());
    assert!(!db.get(4000, &mut v).unwrap());
    db.delete(17).unwrap();
    db.delete(4000).unwrap();
    assert!(!db.get(17, &mut v).unwrap());
    assert_eq!(db.count(0, u64::MAX).unwrap(), 1002);
    assert_eq!(db.count(10, 19).unwrap(), 9);
    let mut seen = Vec::new();
    let n = db
        .scan(10, 30, 5, true, &mut |k, _| {
            seen.push(k);
            Ok(())
        })
        .unwrap();
    assert_eq!((n, seen), (5, vec![30, 29, 28, 27, 26]));
    assert_eq!(db.scan(10, 30, 0, false, &mut |_, _| Ok(())).unwrap(), 0);
    let mut rng = ChaCha8Rng::seed_from_u64(19);
    let s = db.sample(10, 20, 1000, &mut rng).unwrap();
    assert_eq!(s.len(), 1000);
    assert!(s.iter().all(|(k, v)| (10..=20).contains(k)
        && *k != 17
        && k % 4 != 0
        && v == &(k * 10).to_be_bytes()));
    assert_eq!(db.sample(0, u64::MAX, 300, &mut rng).unwrap().len(), 300);
    assert!(db.sample(4, 4, 10, &mut rng).unwrap().is_empty());
    // Refusals.
    assert!(matches!(
        db.put_weighted(1, &1u64.to_be_bytes(), f64::NAN),
        Err(BenchError::Usage(_))
    ));
    assert!(matches!(db.put(1, b"short"), Err(BenchError::Usage(_))));
    assert!(matches!(
        db.put_batch(&[(6000, &1u64.to_be_bytes()[..]), (6001, b"bad")]),
        Err(BenchError::Usage(_))
    ));
    assert!(!db.get(6000, &mut v).unwrap());
    db.checkpoint().unwrap();
    assert_eq!(db.height(), Some(2));
    db.close().unwrap();
    assert!(matches!(
        engine.open(&dir, &opts),
        Err(BenchError::Usage(_))
    ));
    let bytes = EngineOptions {
        values: ValueFormat::Bytes,
        ..EngineOptions::default()
    };
    assert!(matches!(
        engine.create(&tmp.path().join("b"), &bytes),
        Err(BenchError::Usage(_))
    ));
}
