//! # The sampling protocol (shared by the `irs` and `wss` suites)
//!
//! After Rumbaugh & Xie's experiments (see `/work/shared/reference/dynamization.md` §10):
//!
//! * **Records**: record i of a run has the key [`key_at`]`(seed, i)` — a bijection of `u64`, so keys are
//!   distinct and spread uniformly over the whole `u64` range — the `u64` value [`value_of`]`(key)`, and in
//!   weighted runs the weight [`weight_of`]`(key)`, a Pareto(α = 1.5) integer from 1 to 100 000. Everything
//!   read back can be recomputed from the key.
//! * **Load** ([`load`]): the first 10% of the records are inserted as a warm-up (one thread, not timed), then
//!   the rest are inserted by `threads` writers, each owning the records i ≡ id (mod threads) and a list of
//!   the live keys it inserted; after each insert a writer deletes, with probability d / (1 − d), a uniformly
//!   random key of its list, so deletes are a share d of the measured operations (the paper's 5%, or 25% in
//!   the δ sweep). The phase's one operation kind is `insert`: its `ops` are inserts plus deletes, its
//!   latency percentiles cover both; the phase ends when the background work its writes caused is done
//!   (`Driver::settle`). Operations are timed back to back, one clock read each: an operation's latency
//!   runs from the end of the one before, so it includes the loop's own few nanoseconds (the next key, the
//!   delete draw). At the end the engine's count of live records must equal the lists'.
//! * **Queries** ([`range_queries`]): ranges of exactly max(1, ⌊0.1% · live⌉) live records at uniformly
//!   random positions among the live keys (the same ranges for every engine of a workload), or the whole set
//!   for weighted set sampling; k = 1000 samples per query.
//! * **Checks** ([`sample_phase`]): every query must return k records, each in its range, with its key's value
//!   (inline), and live (after the phase, against the sorted live keys). Then the distribution: over all
//!   samples, the mean rank position in the range must be ½ (uniform sampling), or the mean sampled weight
//!   must be Σw²/Σw of the range (weighted sampling), within 6 standard deviations. A wrong engine fails the
//!   run with [`BenchError::Verify`](crate::BenchError::Verify) instead of posting a number.

use super::common::{Ctx, verify};
use crate::distributions::fnv1a;
use crate::driver::Driver;
use crate::error::{BenchError, Result};
use crate::measure::Phase;
use crate::result::BenchResult;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::Path;
use std::sync::Mutex;

/// Samples per query (k).
pub(crate) const K: usize = 1000;
/// Share of the live records in a range query (0.1%).
pub(crate) const SELECTIVITY: f64 = 0.001;
/// Share of the records inserted as the untimed warm-up.
pub(crate) const WARMUP_SHARE: f64 = 0.10;
/// Share of deletes among the measured operations of the paper's protocol.
pub(crate) const DELETE_SHARE: f64 = 0.05;
/// Tail exponent of the weights' Pareto distribution.
pub(crate) const PARETO_ALPHA: f64 = 1.5;
/// Largest weight.
pub(crate) const MAX_WEIGHT: f64 = 100_000.0;
/// Record bytes (key + value) the memory budgets are taken of.
pub(crate) const RECORD_BYTES: u64 = 16;
/// Standard deviations a distribution check tolerates.
const CHECK_SIGMAS: f64 = 6.0;

/// SplitMix64's finaliser: a bijection of `u64`.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Key of record `i` of a run seeded by `seed`: distinct for distinct `i`, uniformly spread over `u64`.
pub(crate) fn key_at(seed: u64, i: u64) -> u64 {
    mix(i.wrapping_add(mix(seed ^ 0x6A09_E667_F3BC_C909)))
}

/// The value stored under `key`.
pub(crate) fn value_of(key: u64) -> u64 {
    mix(key ^ 0x3C6E_F372_FE94_F82B)
}

/// The weight of `key` in weighted runs: ⌊(1 − u)^(−1/α)⌋ for u uniform in [0, 1) drawn from the key, capped
/// at [`MAX_WEIGHT`] (Pareto-distributed integers ≥ 1).
pub(crate) fn weight_of(key: u64) -> f64 {
    let u = (mix(key ^ 0xA54F_F53A_5F1D_36F1) >> 11) as f64 / (1u64 << 53) as f64;
    (1.0 - u).powf(-1.0 / PARETO_ALPHA).floor().min(MAX_WEIGHT)
}

/// Deletes per insert that make deletes a share `d` of all operations.
fn deletes_per_insert(d: f64) -> f64 {
    d / (1.0 - d)
}

/// What one load does.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Protocol {
    /// Keys inserted in all, warm-up included.
    pub records: u64,
    /// Share of deletes among the measured operations (below ½).
    pub delete_share: f64,
    /// Inserts carry weights ([`Driver::put_weighted`]).
    pub weighted: bool,
}

impl Protocol {
    /// The paper's protocol for `records` keys: 5% deletes.
    pub fn paper(records: u64, weighted: bool) -> Self {
        Protocol {
            records,
            delete_share: DELETE_SHARE,
            weighted,
        }
    }

    /// Keys inserted by the warm-up.
    pub fn warmup(&self) -> u64 {
        (self.records as f64 * WARMUP_SHARE) as u64
    }
}

/// Writes record `key` (with its weight when `weighted`).
fn write(db: &dyn Driver, key: u64, weighted: bool) -> Result<()> {
    let value = value_of(key).to_be_bytes();
    if weighted {
        db.put_weighted(key, &value, weight_of(key))
    } else {
        db.put(key, &value)
    }
}

/// Runs the load of `p` into the empty database `db` (in `dir`) with `threads` writers; the measured phase is
/// named `workload`. Returns its rows and the live keys, sorted.
pub(crate) fn load(
    ctx: &Ctx<'_>,
    db: &dyn Driver,
    dir: &Path,
    workload: &str,
    threads: u32,
    p: &Protocol,
) -> Result<(Vec<BenchResult>, Vec<u64>)> {
    if !(0.0..0.5).contains(&p.delete_share) {
        return Err(BenchError::Usage(format!(
            "delete share {} must be below 0.5",
            p.delete_share
        )));
    }
    let seed = ctx.cfg.seed;
    let (n, warm, t) = (p.records, p.warmup(), u64::from(threads));
    let mut lists: Vec<Vec<u64>> = (0..t)
        .map(|_| Vec::with_capacity((n / t + 1) as usize))
        .collect();
    for i in 0..warm {
        let key = key_at(seed, i);
        write(db, key, p.weighted)?;
        lists[(i % t) as usize].push(key);
    }
    let lists: Vec<Mutex<Vec<u64>>> = lists.into_iter().map(Mutex::new).collect();
    let per_insert = deletes_per_insert(p.delete_share);
    let expected = ((n - warm) as f64 * (1.0 + per_insert)) as u64;
    let rows = ctx.parallel(db, dir, workload, threads, expected, |w, _| {
        let id = u64::from(w.id);
        let slot = &lists[w.id as usize];
        let mut live = std::mem::take(&mut *slot.lock().expect("live list"));
        let first = warm + (id + t - warm % t) % t;
        let mut i = first;
        // One clock read per operation: each one's latency runs from the end of the one before.
        let mut at = std::time::Instant::now();
        while i < n {
            let key = key_at(seed, i);
            ((), at) = w.op_chained("insert", at, |_| write(db, key, p.weighted))?;
            live.push(key);
            if w.rng.random_bool(per_insert) {
                let victim = live.swap_remove(w.rng.random_range(0..live.len()));
                ((), at) = w.op_chained("insert", at, |_| db.delete(victim))?;
            }
            i += t;
        }
        *slot.lock().expect("live list") = live;
        Ok(())
    })?;
    let mut live: Vec<u64> = Vec::with_capacity(n as usize);
    for l in lists {
        live.extend(l.into_inner().expect("live list"));
    }
    live.sort_unstable();
    if ctx.engine.capabilities().count {
        let c = db.count(0, u64::MAX)?;
        let name = ctx.engine.name();
        verify(c == live.len() as u64, || {
            format!(
                "{name}: {workload}: {c} live records counted, {} expected",
                live.len()
            )
        })?;
    }
    Ok((rows, live))
}

/// One query: keys `[lo, hi]`, which hold the live keys `a..b` of the sorted live set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Query {
    pub lo: u64,
    pub hi: u64,
    pub a: usize,
    pub b: usize,
}

/// `count` ranges of max(1, 0.1% of the live records) live keys at uniformly random positions, drawn with a
/// seed of the run and `workload` (so every engine of a workload gets the same ranges).
pub(crate) fn range_queries(live: &[u64], count: u64, seed: u64, workload: &str) -> Vec<Query> {
    range_queries_of(live, count, seed, workload, SELECTIVITY)
}

/// [`range_queries`] over ranges of max(1, `selectivity` of the live records).
pub(crate) fn range_queries_of(
    live: &[u64],
    count: u64,
    seed: u64,
    workload: &str,
    selectivity: f64,
) -> Vec<Query> {
    if live.is_empty() {
        return Vec::new();
    }
    let width = ((live.len() as f64 * selectivity).round() as usize).clamp(1, live.len());
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ fnv1a(workload.as_bytes()) ^ 0x5A4D_9E1E);
    (0..count)
        .map(|_| {
            let a = rng.random_range(0..=live.len() - width);
            let b = a + width;
            Query {
                lo: live[a],
                hi: live[b - 1],
                a,
                b,
            }
        })
        .collect()
}

/// `count` queries over the whole set (weighted set sampling).
pub(crate) fn whole_set_queries(live: &[u64], count: u64) -> Vec<Query> {
    (0..count)
        .map(|_| Query {
            lo: 0,
            hi: u64::MAX,
            a: 0,
            b: live.len(),
        })
        .collect()
}

/// The live keys a sampler is checked against, with prefix sums of the weights' first three powers when
/// weighted (the expected mean and variance of a weighted sample's weight in any index range).
pub(crate) struct LiveSet {
    pub keys: Vec<u64>,
    /// `s[j][i]` = Σ weight^(j+1) over keys `0..i`.
    moments: Option<[Vec<f64>; 3]>,
}

impl LiveSet {
    /// The sorted live keys `keys`; `weighted` computes their weights' prefix sums.
    pub fn new(keys: Vec<u64>, weighted: bool) -> Self {
        let moments = weighted.then(|| {
            let mut s: [Vec<f64>; 3] = std::array::from_fn(|_| {
                let mut v = Vec::with_capacity(keys.len() + 1);
                v.push(0.0);
                v
            });
            let mut acc = [0.0f64; 3];
            for &k in &keys {
                let w = weight_of(k);
                let mut p = 1.0;
                for j in 0..3 {
                    p *= w;
                    acc[j] += p;
                    s[j].push(acc[j]);
                }
            }
            s
        });
        LiveSet { keys, moments }
    }

    /// Σ weight^(j+1) over live keys `a..b`.
    fn moment(&self, j: usize, a: usize, b: usize) -> f64 {
        self.moments.as_ref().map_or(0.0, |s| s[j][b] - s[j][a])
    }

    /// The records as a static structure takes them.
    pub fn records(&self) -> Vec<crate::driver::StaticRecord> {
        self.keys
            .iter()
            .map(|&k| crate::driver::StaticRecord {
                key: k,
                value: value_of(k),
                weight: weight_of(k),
            })
            .collect()
    }
}

/// Runs `queries` as the `sample` phase of `workload` on `db` (named `engine`), then checks the samples
/// against `live` (see the module doc). `labels` name the rows.
pub(crate) fn sample_phase(
    ctx: &Ctx<'_>,
    engine: &str,
    db: &dyn Driver,
    dir: &Path,
    workload: &str,
    live: &LiveSet,
    queries: &[Query],
) -> Result<Vec<BenchResult>> {
    let labels = ctx.labels_as(engine, workload, 1);
    sample_phase_labelled(ctx, labels, db, dir, live, queries)
}

/// [`sample_phase`] with explicit row labels.
pub(crate) fn sample_phase_labelled(
    ctx: &Ctx<'_>,
    labels: crate::measure::PhaseLabels,
    db: &dyn Driver,
    dir: &Path,
    live: &LiveSet,
    queries: &[Query],
) -> Result<Vec<BenchResult>> {
    let engine = labels.engine.clone();
    let workload = labels.workload.clone();
    let mut rng = ChaCha8Rng::seed_from_u64(ctx.cfg.seed ^ fnv1a(workload.as_bytes()) ^ 0x5A3B);
    let mut drawn: Vec<u64> = Vec::with_capacity(queries.len() * K);
    let mut phase = Phase::begin(db, labels, queries.len() as u64, ctx.cfg.progress);
    let op = phase.op("sample");
    // Samples are handed over by visitor (no allocation per sample in any engine); each is recorded with
    // whether its value is the key's, and checked after the timed call.
    let mut got: Vec<(u64, bool)> = Vec::with_capacity(K);
    for q in queries {
        got.clear();
        phase.time(op, || {
            db.sample_visit(q.lo, q.hi, K, &mut rng, &mut |key, value| {
                got.push((key, value == value_of(key).to_be_bytes()));
                Ok(())
            })
        })?;
        verify(got.len() == K, || {
            format!(
                "{engine}: {workload}: sample [{}, {}] k = {K} returned {} records",
                q.lo,
                q.hi,
                got.len()
            )
        })?;
        for &(key, value_ok) in &got {
            verify((q.lo..=q.hi).contains(&key), || {
                format!(
                    "{engine}: {workload}: sample [{}, {}] returned key {key}",
                    q.lo, q.hi
                )
            })?;
            verify(value_ok, || {
                format!("{engine}: {workload}: sampled key {key} carries a wrong value")
            })?;
            drawn.push(key);
        }
    }
    let rows = phase.finish(dir)?;
    check_samples(&engine, &workload, live, queries, &drawn)?;
    Ok(rows)
}

/// Checks that every drawn key is live and that the draws follow the query's distribution (module doc).
fn check_samples(
    engine: &str,
    workload: &str,
    live: &LiveSet,
    queries: &[Query],
    drawn: &[u64],
) -> Result<()> {
    let weighted = live.moments.is_some();
    // Σ of the statistic, its expectation and variance over all samples.
    let (mut sum, mut expected, mut variance) = (0.0f64, 0.0f64, 0.0f64);
    for (q, keys) in queries.iter().zip(drawn.chunks(K)) {
        let width = (q.b - q.a) as f64;
        let (m1, m2) = if weighted {
            let s1 = live.moment(0, q.a, q.b);
            let m1 = live.moment(1, q.a, q.b) / s1;
            (m1, live.moment(2, q.a, q.b) / s1 - m1 * m1)
        } else {
            // (rank + ½) / width of a uniform rank: mean ½, variance (width² − 1) / (12 width²).
            (0.5, (width * width - 1.0) / (12.0 * width * width))
        };
        for &key in keys {
            let Ok(i) = live.keys.binary_search(&key) else {
                return Err(BenchError::Verify(format!(
                    "{engine}: {workload}: sampled key {key} is not live"
                )));
            };
            let x = if weighted {
                weight_of(key)
            } else {
                ((i - q.a) as f64 + 0.5) / width
            };
            sum += x;
            expected += m1;
            variance += m2.max(0.0);
        }
    }
    let tolerance = CHECK_SIGMAS * variance.sqrt() + 1e-9 * expected.abs() + 1e-9;
    let what = if weighted {
        "mean sampled weight"
    } else {
        "mean rank position in the range"
    };
    let n = drawn.len().max(1) as f64;
    verify((sum - expected).abs() <= tolerance, || {
        format!(
            "{engine}: {workload}: {what} {:.4} over {} samples, expected {:.4} ± {:.4}: the samples do not \
             follow the query's distribution",
            sum / n,
            drawn.len(),
            expected / n,
            tolerance / n
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_distinct_and_weights_heavy_tailed() {
        let keys: std::collections::HashSet<u64> = (0..100_000).map(|i| key_at(7, i)).collect();
        assert_eq!(keys.len(), 100_000);
        assert_ne!(key_at(7, 0), key_at(8, 0));
        let w: Vec<f64> = (0..100_000).map(|i| weight_of(key_at(7, i))).collect();
        assert!(
            w.iter()
                .all(|&w| (1.0..=MAX_WEIGHT).contains(&w) && w == w.floor())
        );
        // P(w ≥ 100) = 100^-1.5 = 0.1%.
        let heavy = w.iter().filter(|&&w| w >= 100.0).count();
        assert!((50..200).contains(&heavy), "{heavy}");
        assert_eq!(deletes_per_insert(0.25), 1.0 / 3.0);
    }

    /// Every rank of each query's range equally often.
    fn even_draws(live: &LiveSet, queries: &[Query]) -> Vec<u64> {
        queries
            .iter()
            .flat_map(|q| (0..K).map(move |j| live.keys[q.a + j % (q.b - q.a)]))
            .collect()
    }

    #[test]
    fn the_distribution_checks_catch_biased_samplers() {
        let keys: Vec<u64> = (0..50_000u64).map(|i| i * 3).collect();
        let live = LiveSet::new(keys.clone(), false);
        let queries = range_queries(&live.keys, 20, 1, "w");
        assert!(queries.iter().all(|q| q.b - q.a == 50 && q.lo == keys[q.a]));
        // Every rank equally often: passes; always the first half of the range: caught.
        let even = even_draws(&live, &queries);
        check_samples("e", "w", &live, &queries, &even).unwrap();
        let low: Vec<u64> = queries
            .iter()
            .flat_map(|q| {
                let keys = &keys;
                (0..K).map(move |j| keys[q.a + j % 25])
            })
            .collect();
        assert!(check_samples("e", "w", &live, &queries, &low).is_err());
        let dead = vec![1u64; queries.len() * K];
        assert!(check_samples("e", "w", &live, &queries, &dead).is_err());
        // Weighted: uniform draws have a far lower mean weight than weighted ones.
        let live = LiveSet::new(keys, true);
        let all = whole_set_queries(&live.keys, 20);
        let uniform: Vec<u64> = (0..all.len() * K)
            .map(|j| live.keys[j * 7919 % live.keys.len()])
            .collect();
        assert!(check_samples("e", "w", &live, &all, &uniform).is_err());
        let weights: Vec<f64> = live.keys.iter().map(|&k| weight_of(k)).collect();
        let alias = strata::lab::algo::alias::AliasTable::new(&weights).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let weighted: Vec<u64> = (0..all.len() * K)
            .map(|_| live.keys[alias.sample(&mut rng)])
            .collect();
        check_samples("e", "w", &live, &all, &weighted).unwrap();
    }

    /// A sampler that draws from the lower half of every range only.
    struct LowerHalf(crate::driver::StaticIsam);

    impl Driver for LowerHalf {
        fn engine(&self) -> &'static str {
            "lower-half"
        }
        fn put(&self, k: u64, v: &[u8]) -> Result<()> {
            self.0.put(k, v)
        }
        fn put_batch(&self, r: &[(u64, &[u8])]) -> Result<()> {
            self.0.put_batch(r)
        }
        fn get(&self, k: u64, v: &mut Vec<u8>) -> Result<bool> {
            self.0.get(k, v)
        }
        fn delete(&self, k: u64) -> Result<()> {
            self.0.delete(k)
        }
        fn scan_range(
            &self,
            lo: u64,
            hi: u64,
            limit: u64,
            reverse: bool,
            visit: &mut crate::driver::Visit<'_>,
        ) -> Result<u64> {
            self.0.scan_range(lo, hi, limit, reverse, visit)
        }
        fn sample_visit(
            &self,
            lo: u64,
            hi: u64,
            k: usize,
            rng: &mut dyn rand::RngCore,
            visit: &mut dyn FnMut(u64, &[u8]) -> Result<()>,
        ) -> Result<()> {
            self.0.sample_visit(lo, lo + (hi - lo) / 2, k, rng, visit)
        }
        fn checkpoint(&self) -> Result<()> {
            Ok(())
        }
        fn close(self: Box<Self>) -> Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_wrong_sampler_cannot_post_a_number() {
        use crate::driver::{StaticIsam, StrataDynamized};
        let tmp = tempfile::tempdir().unwrap();
        let cfg = super::super::SuiteConfig {
            records: 1000,
            ops: None,
            threads: vec![1],
            target_rate: None,
            codec: crate::values::ValueCodec::u64(),
            nexts: 1,
            cache_bytes: 1 << 20,
            durability: strata::Durability::None,
            page_size: 4096,
            seed: 5,
            data_dir: tmp.path().to_path_buf(),
            progress: false,
        };
        let engine = StrataDynamized::default();
        let ctx = Ctx::new("t", &cfg, &engine);
        let mut all: Vec<u64> = (0..40_000).map(|i| key_at(5, i)).collect();
        all.sort_unstable();
        let live = LiveSet::new(all.iter().copied().step_by(2).collect(), false);
        let queries = range_queries(&live.keys, 10, 5, "w");
        let run =
            |db: &dyn Driver| sample_phase(&ctx, db.engine(), db, tmp.path(), "w", &live, &queries);
        let right = StaticIsam::build(&live.records(), false).unwrap();
        assert_eq!(run(&right).unwrap()[0].ops, 10);
        // Deleted records (every other key of `all`) in the structure: caught.
        let dead = LiveSet::new(all.clone(), false);
        let stale = StaticIsam::build(&dead.records(), false).unwrap();
        assert!(matches!(run(&stale), Err(BenchError::Verify(_))));
        let biased = LowerHalf(StaticIsam::build(&live.records(), false).unwrap());
        let err = run(&biased).unwrap_err();
        assert!(err.to_string().contains("distribution"), "{err}");
    }
}
