//! # The `hash` suite (issue 17)
//!
//! Dash's protocol scaled down, on the persistent hash indexes of `strata::lab::index::hash`: the
//! ElimDA-style [`HashIndex`] (`elimda`) against the Dash-EH-style [`DashIndex`] (`dash`), each on an
//! anonymous [`MmapRegion`] in eADR mode (the throughput rows), the CCEH-style [`CcehIndex`] (`cceh`, rows
//! `cceh` and its traffic-model run `cceh-adr-model`), and a DRAM-only `hashbrown` table (std's
//! `HashMap`, a SwissTable, with a multiply-xorshift hasher; not durable: the upper bound).
//!
//! Keys are uniform random distinct `u64` drawn from a ChaCha8 RNG seeded with `--seed`; every answer is
//! checked (a wrong one fails the run). The experiments, each in its own file:
//!
//! * **Main phases** (Exp 1, 4, 6, 7; here and `threads`): preload N = `--records` keys (not reported), then
//!   `insert` (N/2 new keys), `pos-search` (N lookups of keys present, drawn uniformly from the 1.5 N
//!   present), `neg-search` (N lookups of keys never inserted) and `delete` (N/2 present keys). These rows
//!   come from interleaved rounds (`rounds`): a warm-up and 3 measured rounds, each contender (elimda and
//!   dash at each thread count, hashbrown, cceh) on a fresh preloaded index per round, in rotating order; a
//!   row is the fastest round's, and each round's insert rows are kept (`insert-round-<r>`).
//! * **Thread sweep** (Exp 2, `threads`): the main phases of `elimda` (one collecting log per thread) and
//!   `dash` at every thread count of the sweep — 1 and 2 always (the scaling goal needs both), plus every
//!   count of `--threads`; rows carry `threads`. The 1-thread rows are the main rows. `cceh` has a single
//!   writer and `hashbrown` is not concurrent: one thread only.
//! * **Zipf 0.8** (Exp 1's zipfian column, `zipf`): workloads `zipf-insert` / `zipf-pos-search` /
//!   `zipf-neg-search` / `zipf-delete`, one thread, the same preload, N/2 operations each, each operation's
//!   key drawn with a Zipf(0.8) rank over its key pool (repeats: updates, and deletes of keys already gone).
//! * **YCSB A/B/D/F** (Exp 3, `ycsb`): on the preload, N/4 operations (`--ops`) with Zipf 0.99 (YCSB's scrambled
//!   zipfian) request keys; A 50 % reads / 50 % updates, B 95 / 5, D 95 % read-latest / 5 % inserts, F 50 %
//!   reads / 50 % read-modify-writes; `elimda` and `dash` over the thread sweep, `cceh` at one thread.
//! * **Recovery** (Exp 10, `recovery`): `elimda` loaded with N/4, N/2 and N keys, its DRAM state dropped
//!   (the unflushed D-buckets survive only in the logs), then rebuilt by `recover_with_threads` with every
//!   thread count of the sweep (median of 3); `dash` after a crash (dropped without a clean close) at the
//!   same sizes: the lazy `open`, the first 1,000 lookups (which repair the segments they touch) and
//!   `repair_all`.
//! * **Collecting-log size** (Exp 11) and **D-bucket size** (Exp 12, `params`): `elimda` inserts with every
//!   log exactly 1,024 … 16,384 lines over the thread sweep (workloads `log-<lines>`), and inserts and
//!   positive searches at one thread with D-buckets written back at 2 / 4 / 8 / 15 entries (the seed's
//!   32 / 64 / 128 / 256 B; workloads `dbucket-<bytes>-insert`, `dbucket-<bytes>-pos-search`), and the same
//!   two phases with P-buckets of 1 / 2 / 4 / 8 / 16 KiB (`pbucket-<KiB>k-*`). The seed's 512 B D-bucket
//!   is not measured (a D-bucket stages into the one tail chunk).
//! * **Value sizes** (Exp 8, `values`): `elimda` and `dash` with 16 / 64 / 128 / 256 B values stored out of
//!   line (`ValueIndex`: a value log in the same region), one thread, N/2 inserts then N/2 positive
//!   searches per size (workloads `value-<bytes>-insert` / `value-<bytes>-pos-search`), and the same on the
//!   ADR traffic model (`*-adr-model`, media bytes per phase).
//! * **Limited PM bandwidth** (Exp 13, `limited`): the main phases at one thread of `elimda`, `dash` and
//!   `cceh` (engines `*-limited`) on the `*-adr-model` rows' model with emulated media timing — 300 ns
//!   busy-wait per XPBuffer read miss, media writes paced by a 2 GB/s token bucket (16 KiB burst) — so that
//!   each index's throughput is bound by the media traffic it causes; rows carry the phase's media bytes.
//!
//! The main phases are repeated on `CountingPm<MmapRegion>` in ADR mode (engines `elimda-adr-model`,
//! `dash-adr-model`, `cceh-adr-model`): their rows carry the modelled Optane media bytes of the phase in
//! `bytes_read` / `bytes_written` (the model drained before and after the phase). Every row of a PM engine
//! carries the index's DRAM bytes in `rss_bytes` (`rss_scope` = `index`) and its PM bytes in use in
//! `disk_bytes`, at the end of the phase; `hashbrown` rows carry ≈ capacity × 17 B (16 B slot + 1 control
//! byte). The report (`analysis`) puts the seed's table (`reference/hashing.md` §5) beside each of ours.

mod analysis;
mod exp_sections;
mod limited;
mod params;
pub mod probe;
mod recovery;
mod rounds;
mod sections;
mod thp;
mod threads;
mod values;
mod ycsb;
mod zipf;

#[cfg(test)]
mod tests;

pub use analysis::analysis;
pub use params::{
    DBUCKET_SLOTS, LOG_LINES, PBUCKET_BYTES, dbucket_workload, log_workload, pbucket_workload,
};
pub use rounds::insert_round_workload;
pub use values::{VALUE_SIZES, value_workload};

/// The engines of the limited-bandwidth experiment (Exp 13).
pub const LIMITED_ENGINES: [&str; 3] = [
    limited::ELIMDA_LIMITED,
    limited::DASH_LIMITED,
    limited::CCEH_LIMITED,
];

use super::SuiteConfig;
use crate::driver::Engine;
use crate::error::{BenchError, Result};
use crate::measure::{Latency, PhaseLabels, RowParts, row};
use crate::result::BenchResult;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};
use std::time::Instant;
use strata::lab::index::hash::PmHashIndex;
use strata::lab::index::hash::cceh::{CcehConfig, CcehIndex};
use strata::lab::index::hash::dash::{DashConfig, DashIndex};
use strata::lab::index::hash::{HashConfig, HashIndex};
use strata::lab::storage::pm::{CountingPm, MmapRegion, PersistMode, Pm, Traffic, TrafficConfig};

pub const NAME: &str = "hash";
pub const DESCRIPTION: &str = "persistent hash indexes: ElimDA-style (elimda) against Dash-EH-style (dash) and CCEH-style (cceh) on eADR regions and a DRAM hashbrown bound; insert, positive and negative search, delete (uniform, thread sweep, zipf 0.8); YCSB A/B/D/F; recovery time vs items and threads; Optane media bytes per operation from the traffic model (ADR)";
pub const DEFAULT_RECORDS: u64 = 2_000_000;
pub const ELIMDA: &str = "elimda";
pub const DASH: &str = "dash";
pub const HASHBROWN: &str = "hashbrown";
pub const ELIMDA_MODEL: &str = "elimda-adr-model";
pub const DASH_MODEL: &str = "dash-adr-model";
/// The CCEH-style baseline (16 KiB segments, two 4-line probe runs, no fingerprints) and its model run.
pub const CCEH: &str = "cceh";
pub const CCEH_MODEL: &str = "cceh-adr-model";
/// The measured phases: workload and op.
pub const PHASES: [(&str, &str); 4] = [
    ("insert", "insert"),
    ("pos-search", "read"),
    ("neg-search", "read"),
    ("delete", "delete"),
];
/// Operations per timed batch: one `Instant` pair per batch keeps the clock's cost (≈ 20–40 ns) out of
/// operations that take 50–300 ns.
pub(super) const BATCH: usize = 16;

/// Method notes for the report.
pub fn notes(cfg: &SuiteConfig) -> Vec<String> {
    let n = cfg.records;
    vec![
        format!(
            "Preload {n} uniform random distinct u64 keys (ChaCha8, seed {}), then insert {} new keys, {n} lookups \
             of present keys, {n} lookups of absent keys, delete {} present keys; every answer is checked. \
             Thread sweep {:?} (1 and 2 always, plus `--threads`) for elimda and dash (one collecting log per \
             thread); cceh (single writer) and hashbrown at one thread. Main rows: an untimed warm-up round and \
             {} measured rounds (`STRATA_HASH_ROUNDS`), every contender on a fresh preloaded index per round, in \
             an order rotating per round; a row is the fastest round's, its CPU µs/op the least of any round; \
             rows `insert-round-<r>` keep each round's inserts.",
            cfg.seed,
            n / 2,
            n / 2,
            sweep(cfg),
            rounds::rounds()
        ),
        format!(
            "Zipf 0.8 rows (`zipf-*`, one thread): {h} inserts over a pool of {h} new keys, {h} lookups over the \
             present keys, {h} over absent keys, {h} deletes over the present keys, each key drawn by a Zipf(0.8) \
             rank. YCSB rows: {} operations per workload after the preload, Zipf 0.99 (YCSB scrambled zipfian; \
             D: latest).",
            ycsb::ops(cfg),
            h = n / 2,
        ),
        "Recovery rows (`recovery`, `records` = items): elimda's DRAM state dropped and rebuilt from the region \
         (median of 3 runs per size and thread count); dash rows `recovery-open`, `recovery-first-ops` (1,000 \
         lookups) and `recovery-repair` (`repair_all`) after a crash at the same sizes."
            .into(),
        format!(
            "Latency is sampled per batch of {BATCH} consecutive operations (`Instant` around the batch; each \
             operation of the batch is recorded at the batch's mean), so the percentiles are of 16-operation means \
             and hide single-operation outliers (e.g. one rebuild or split shows as its batch's mean). \
             Throughput = operations ÷ the summed batch times (histogram bookkeeping excluded)."
        ),
        "Absolute Mops/s are DRAM-backed (anonymous mappings, eADR: persist = fence only; no Optane here): only the \
         ratios and the modelled traffic bytes compare with the Dash and ElimDA papers."
            .into(),
        "`*-adr-model` rows: the same run on `CountingPm` (Optane model: 64 B lines, 256 B XPLines through the \
         XPBuffer) in ADR mode; `bytes_read` / `bytes_written` = modelled media bytes of the phase, their \
         throughput is the model's, not the index's."
            .into(),
        "`hashbrown`: std `HashMap` (SwissTable) with a multiply-xorshift hasher, DRAM only, not durable.".into(),
        format!(
            "Exp 11 rows (`log-<lines>`): elimda with every collecting log exactly that many 64 B lines \
             (`fixed_log`), the preload then the {} inserts at each thread count. Exp 12 rows \
             (`dbucket-<bytes>-*`): one thread, D-buckets written back at 2 / 4 / 8 / 15 entries. Both carry \
             the phase's D-bucket flushes in `page_writes` and the log-forced ones in `io_writes`. Exp 13 rows \
             (`*-limited`): the `*-adr-model` run plus {} ns per XPBuffer read miss and media writes paced at \
             {} B/s (16 KiB burst), real busy-waits.",
            n / 2,
            limited::READ_MISS_NS,
            limited::WRITE_BANDWIDTH
        ),
    ]
}

/// A multiply-xorshift hasher for the DRAM bound (keys are already random).
#[derive(Default)]
pub struct MixHasher(u64);

impl Hasher for MixHasher {
    fn finish(&self) -> u64 {
        let h = self.0.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        h ^ (h >> 32)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | u64::from(b)).wrapping_mul(0x100_0000_01B3);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 ^= n;
    }
}

type DramMap = HashMap<u64, u64, BuildHasherDefault<MixHasher>>;

/// What the phases drive.
pub(super) trait Ops {
    fn put(&mut self, k: u64, v: u64) -> Result<()>;
    fn lookup(&self, k: u64) -> Result<Option<u64>>;
    fn del(&mut self, k: u64) -> Result<bool>;
    /// Live keys ÷ slots, DRAM bytes, PM bytes in use.
    fn state(&self) -> (f64, u64, u64);
}

pub(super) struct Persistent<T, P>(pub T, pub std::marker::PhantomData<P>);

impl<P: Pm, T: PmHashIndex<P>> Ops for Persistent<T, P> {
    fn put(&mut self, k: u64, v: u64) -> Result<()> {
        Ok(self.0.insert(k, v)?)
    }
    fn lookup(&self, k: u64) -> Result<Option<u64>> {
        Ok(self.0.get(k)?)
    }
    fn del(&mut self, k: u64) -> Result<bool> {
        Ok(self.0.remove(k)?)
    }
    fn state(&self) -> (f64, u64, u64) {
        (
            self.0.load_factor(),
            self.0.dram_bytes(),
            self.0.pm_bytes_used(),
        )
    }
}

impl Ops for DramMap {
    fn put(&mut self, k: u64, v: u64) -> Result<()> {
        self.insert(k, v);
        Ok(())
    }
    fn lookup(&self, k: u64) -> Result<Option<u64>> {
        Ok(self.get(&k).copied())
    }
    fn del(&mut self, k: u64) -> Result<bool> {
        Ok(self.remove(&k).is_some())
    }
    fn state(&self) -> (f64, u64, u64) {
        let cap = self.capacity().max(1);
        (self.len() as f64 / cap as f64, cap as u64 * 17, 0)
    }
}

/// The keys of every phase.
pub(super) struct Keys {
    pub preload: Vec<u64>,
    pub insert: Vec<u64>,
    pub pos: Vec<u64>,
    pub neg: Vec<u64>,
    pub delete: Vec<u64>,
}

fn keys(cfg: &SuiteConfig) -> Keys {
    let n = cfg.records as usize;
    let half = (n / 2).max(1);
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let mut seen = HashSet::with_capacity(n * 3);
    let mut draw = |rng: &mut ChaCha8Rng, count: usize| {
        let mut v = Vec::with_capacity(count);
        while v.len() < count {
            let k: u64 = rng.random();
            if seen.insert(k) {
                v.push(k);
            }
        }
        v
    };
    let preload = draw(&mut rng, n);
    let insert = draw(&mut rng, half);
    let neg = draw(&mut rng, n);
    let mut present: Vec<u64> = preload.iter().chain(&insert).copied().collect();
    let pos = (0..n)
        .map(|_| present[rng.random_range(0..present.len())])
        .collect();
    present.shuffle(&mut rng);
    present.truncate(half);
    Keys {
        preload,
        insert,
        pos,
        neg,
        delete: present,
    }
}

/// The value stored under `k` (so every answer can be checked).
pub(super) fn value(k: u64) -> u64 {
    k.rotate_left(17) ^ 0x5555
}

/// What a step's answers must be.
#[derive(Clone, Copy)]
pub(super) enum Expect<'a> {
    /// Inserts (upserts): nothing to check.
    Stored,
    /// Lookups that find `value(key)`.
    Found,
    /// Lookups that find nothing.
    Absent,
    /// Deletes that find their key (`None`) or, per operation, as given.
    Deleted(Option<&'a [bool]>),
}

/// One measured step: its labels, its keys, what its answers must be.
pub(super) struct Step<'a> {
    pub workload: &'a str,
    pub op: &'a str,
    pub keys: &'a [u64],
    pub expect: Expect<'a>,
}

/// The four main phases over `k`'s key lists.
fn main_steps(k: &Keys) -> Vec<Step<'_>> {
    PHASES
        .iter()
        .map(|&(workload, op)| {
            let expect = match workload {
                "insert" => Expect::Stored,
                "pos-search" => Expect::Found,
                "neg-search" => Expect::Absent,
                _ => Expect::Deleted(None),
            };
            Step {
                workload,
                op,
                keys: threads::phase_keys(k, workload),
                expect,
            }
        })
        .collect()
}

/// Charges a timed batch of `n` operations that took `d`: its seconds to `secs`, and the batch's mean to each
/// of its operations (operations are timed in batches of [`BATCH`], which keeps the clock's cost out of them).
pub(super) fn charge_batch(lat: &mut Latency, secs: &mut f64, d: std::time::Duration, n: usize) {
    *secs += d.as_secs_f64();
    let each = d / n.max(1) as u32;
    for _ in 0..n {
        lat.record(each);
    }
}

/// Loads `preload`, then runs `steps` on `index` on one thread; `traffic` snapshots the model (drained) when
/// counted.
pub(super) fn phases(
    cfg: &SuiteConfig,
    engine: &'static str,
    index: &mut dyn Ops,
    preload: &[u64],
    steps: &[Step<'_>],
    traffic: Option<&dyn Fn() -> Traffic>,
) -> Result<Vec<BenchResult>> {
    for &key in preload {
        index.put(key, value(key))?;
    }
    let mut out = Vec::new();
    for step in steps {
        let t0 = traffic.map(|t| t());
        let mut lat = Latency::new();
        let mut wrong = 0u64;
        let mut secs = 0.0;
        for (b, batch) in step.keys.chunks(BATCH).enumerate() {
            let t = Instant::now();
            for (i, &key) in batch.iter().enumerate() {
                let right = match step.expect {
                    Expect::Stored => index.put(key, value(key)).map(|()| true)?,
                    Expect::Found => index.lookup(key)? == Some(value(key)),
                    Expect::Absent => index.lookup(key)?.is_none(),
                    Expect::Deleted(want) => {
                        index.del(key)? == want.is_none_or(|w| w[b * BATCH + i])
                    }
                };
                wrong += u64::from(!right);
            }
            charge_batch(&mut lat, &mut secs, t.elapsed(), batch.len());
        }
        if wrong > 0 {
            return Err(BenchError::Usage(format!(
                "{engine}: {wrong} of {} {} operations (wrong answer)",
                step.keys.len(),
                step.workload
            )));
        }
        let media = match (traffic, t0) {
            (Some(t), Some(t0)) => Some(t().since(&t0)),
            _ => None,
        };
        let shape = Shape {
            engine,
            workload: step.workload,
            op: step.op,
            threads: 1,
        };
        let mut r = shaped_row(cfg, &shape, &lat, secs, index.state());
        if let Some(m) = media {
            r.bytes_read = Some(m.media_read_bytes);
            r.bytes_written = Some(m.media_write_bytes);
        }
        out.push(r);
    }
    Ok(out)
}

/// A generous region for 1.5 N keys: 256 B per key (tables at ≥ 43.75 % load take ≤ 37 B per key, and a
/// rebuild or split keeps the old space) plus 64 MiB.
pub(super) fn region_bytes(cfg: &SuiteConfig) -> u64 {
    (cfg.records * 3 / 2 * 256 + (64 << 20)).next_multiple_of(1 << 20)
}

pub(super) fn exhausted(engine: &str, bytes: u64, e: BenchError) -> BenchError {
    match e {
        BenchError::Engine(strata::Error::ResourceExhausted(m)) => BenchError::Usage(format!(
            "{engine}: the PM region of {bytes} bytes is too small ({m}); no row is reported"
        )),
        e => e,
    }
}

pub(super) fn persistent<T: PmHashIndex<P>, P: Pm>(
    cfg: &SuiteConfig,
    engine: &'static str,
    index: T,
    k: &Keys,
    traffic: Option<&dyn Fn() -> Traffic>,
) -> Result<Vec<BenchResult>> {
    let mut ops = Persistent(index, std::marker::PhantomData);
    phases(cfg, engine, &mut ops, &k.preload, &main_steps(k), traffic)
        .map_err(|e| exhausted(engine, region_bytes(cfg), e))
}

/// Thread counts of the sweep: 1 and 2 (the scaling goal's), plus every count of `--threads`, ascending.
pub fn sweep(cfg: &SuiteConfig) -> Vec<usize> {
    let mut t: Vec<usize> = [1, 2]
        .into_iter()
        .chain(cfg.threads.iter().map(|&t| t as usize))
        .collect();
    t.sort_unstable();
    t.dedup();
    t
}

/// Runs the suite (its engines are its own: the engine list is not used). The main rows come from
/// interleaved rounds (`rounds`); `STRATA_HASH_PARTS` selects experiments.
pub fn run(cfg: &SuiteConfig, _engines: &[Box<dyn Engine>]) -> Result<Vec<BenchResult>> {
    let k = keys(cfg);
    let bytes = region_bytes(cfg);
    let threads = sweep(cfg);
    let mut out = Vec::new();
    if rounds::selected("main") {
        let mut contenders = threads::contenders(cfg, &k, &threads);
        // Right after the 1-thread elimda and dash runs, so each round's goal ratios are of neighbours.
        let at = 2.min(contenders.len());
        let single: [rounds::Contender<'_>; 2] = [
            Box::new(|| {
                let mut map = DramMap::default();
                phases(cfg, HASHBROWN, &mut map, &k.preload, &main_steps(&k), None)
            }),
            Box::new(|| {
                let region = MmapRegion::anonymous(bytes, PersistMode::Eadr)?;
                let idx = CcehIndex::create(region, CcehConfig::default())?;
                persistent(cfg, CCEH, idx, &k, None)
            }),
        ];
        contenders.splice(at..at, single);
        out.extend(rounds::interleaved(&contenders, rounds::rounds())?);
    }
    if rounds::selected("models") {
        out.extend(modelled(bytes, |pm, snap| {
            let idx = CcehIndex::create(pm, CcehConfig::default())?;
            persistent(cfg, CCEH_MODEL, idx, &k, Some(snap))
        })?);
        out.extend(modelled(bytes, |pm, snap| {
            let idx = HashIndex::create(pm, HashConfig::default())?;
            persistent(cfg, ELIMDA_MODEL, idx, &k, Some(snap))
        })?);
        out.extend(modelled(bytes, |pm, snap| {
            let idx = DashIndex::create(pm, DashConfig::default())?;
            persistent(cfg, DASH_MODEL, idx, &k, Some(snap))
        })?);
    }
    // Right after the untimed model rows they are compared with.
    if rounds::selected("limited") {
        out.extend(limited::rows(cfg, &k)?);
    }
    if rounds::selected("zipf") {
        out.extend(zipf::rows(cfg, &k)?);
    }
    if rounds::selected("ycsb") {
        out.extend(ycsb::rows(cfg, &k, &threads)?);
    }
    if rounds::selected("recovery") {
        out.extend(recovery::rows(cfg, &k, &threads)?);
    }
    if rounds::selected("params") {
        out.extend(params::log_rows(cfg, &k, &threads)?);
        out.extend(params::dbucket_rows(cfg, &k)?);
        out.extend(params::pbucket_rows(cfg, &k)?);
    }
    if rounds::selected("values") {
        out.extend(values::rows(cfg, &k)?);
    }
    Ok(out)
}

/// What a row measured: engine, workload, operation kind, threads.
pub(super) struct Shape<'a> {
    pub engine: &'a str,
    pub workload: &'a str,
    pub op: &'a str,
    pub threads: usize,
}

/// The row of a phase that took `secs` (summed batch times) with latencies `lat`; `state` = load factor,
/// DRAM bytes, PM bytes at its end.
pub(super) fn shaped_row(
    cfg: &SuiteConfig,
    shape: &Shape<'_>,
    lat: &Latency,
    secs: f64,
    (load_factor, dram, pm): (f64, u64, u64),
) -> BenchResult {
    let parts = RowParts {
        secs,
        io: None,
        os: None,
        rss: Some(dram),
        rss_scope: "index",
        disk_bytes: pm,
        height: None,
    };
    let labels = PhaseLabels {
        suite: NAME.into(),
        engine: shape.engine.into(),
        workload: shape.workload.into(),
        records: cfg.records,
        threads: shape.threads as u32,
        durability: if shape.engine == HASHBROWN {
            "none"
        } else {
            "pm"
        }
        .into(),
        cache_bytes: 0,
        page_size: 0,
    };
    let mut r = row(&labels, shape.op, lat, &parts);
    r.load_factor = Some(load_factor);
    r
}

/// Runs `run` on a fresh ADR traffic model of `bytes` bytes, with a snapshot function that drains the
/// model first (so that a phase's media bytes are the difference of two snapshots).
fn modelled(
    bytes: u64,
    run: impl FnOnce(&CountingPm<MmapRegion>, &dyn Fn() -> Traffic) -> Result<Vec<BenchResult>>,
) -> Result<Vec<BenchResult>> {
    modelled_with(bytes, PersistMode::Adr, TrafficConfig::default(), run)
}

/// [`modelled`] in persistence mode `mode` with the model `config`.
pub(super) fn modelled_with(
    bytes: u64,
    mode: PersistMode,
    config: TrafficConfig,
    run: impl FnOnce(&CountingPm<MmapRegion>, &dyn Fn() -> Traffic) -> Result<Vec<BenchResult>>,
) -> Result<Vec<BenchResult>> {
    let pm = CountingPm::with_config(MmapRegion::anonymous(bytes, mode)?, config)?;
    let snap = || {
        pm.drain();
        pm.snapshot()
    };
    run(&pm, &snap)
}

/// The Zipf 0.8 variant's workloads and operation kinds.
pub fn zipf_workloads() -> [(&'static str, &'static str); 4] {
    zipf::WORKLOADS
}

/// The YCSB workloads of the suite.
pub fn ycsb_workloads() -> [&'static str; 4] {
    ycsb::WORKLOADS.map(|(w, _)| w)
}
