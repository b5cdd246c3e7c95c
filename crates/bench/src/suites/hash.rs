//! # The `hash` suite (issue 17, first increment: one thread)
//!
//! Dash's protocol scaled down, on the persistent hash indexes of `strata::lab::index::hash`: the
//! ElimDA-style [`HashIndex`] (`elimda`) against the Dash-EH-style [`DashIndex`] (`dash`), each on an
//! anonymous [`MmapRegion`] in eADR mode (the throughput rows), the CCEH-style [`CcehIndex`] (`cceh`, rows
//! `cceh` and `cceh-adr-model` from `cceh_rows`), and a DRAM-only `hashbrown` table (std's
//! `HashMap`, a SwissTable, with a multiply-xorshift hasher; not durable: the upper bound).
//!
//! Per engine, with uniform random distinct `u64` keys drawn from a ChaCha8 RNG seeded with `--seed`:
//! preload N = `--records` keys (not reported), then `insert` (N/2 new keys), `pos-search` (N lookups of
//! keys present, drawn uniformly from the 1.5 N present), `neg-search` (N lookups of keys never inserted)
//! and `delete` (N/2 present keys). Every answer is checked (a wrong one fails the run).
//!
//! The same run is repeated on `CountingPm<MmapRegion>` in ADR mode (engines `elimda-adr-model` and
//! `dash-adr-model`): their rows carry the modelled Optane media bytes of the phase in `bytes_read` /
//! `bytes_written` (the model drained before and after the phase). Every row of a PM engine carries the
//! index's DRAM bytes in `rss_bytes` (`rss_scope` = `index`) and its PM bytes in use in `disk_bytes`, at
//! the end of the phase; `hashbrown` rows carry ≈ capacity × 17 B (16 B slot + 1 control byte).

use super::SuiteConfig;
use crate::driver::Engine;
use crate::error::{BenchError, Result};
use crate::measure::{Latency, PhaseLabels, RowParts, row};
use crate::result::BenchResult;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::hash::{BuildHasherDefault, Hasher};
use std::time::Instant;
use strata::lab::index::hash::PmHashIndex;
use strata::lab::index::hash::cceh::{CcehConfig, CcehIndex};
use strata::lab::index::hash::dash::{DashConfig, DashIndex};
use strata::lab::index::hash::{HashConfig, HashIndex};
use strata::lab::storage::pm::{CountingPm, MmapRegion, PersistMode, Pm, Traffic};

pub const NAME: &str = "hash";
pub const DESCRIPTION: &str = "persistent hash indexes, one thread: ElimDA-style (elimda) against Dash-EH-style (dash) and CCEH-style (cceh) on eADR regions and a DRAM hashbrown bound; insert, positive and negative search, delete; Optane media bytes per operation from the traffic model (ADR)";
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
const XPLINE: f64 = 256.0;
/// Operations per timed batch: one `Instant` pair per batch keeps the clock's cost (≈ 20–40 ns) out of
/// operations that take 50–300 ns.
const BATCH: usize = 16;

/// Method notes for the report.
pub fn notes(cfg: &SuiteConfig) -> Vec<String> {
    let n = cfg.records;
    vec![
        format!(
            "One thread. Preload {n} uniform random distinct u64 keys (ChaCha8, seed {}), then insert {} new \
             keys, {n} lookups of present keys, {n} lookups of absent keys, delete {} present keys; every answer \
             is checked.",
            cfg.seed,
            n / 2,
            n / 2
        ),
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
    ]
}

/// A multiply-xorshift hasher for the DRAM bound (keys are already random).
#[derive(Default)]
struct MixHasher(u64);

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
trait Ops {
    fn put(&mut self, k: u64, v: u64) -> Result<()>;
    fn lookup(&self, k: u64) -> Result<Option<u64>>;
    fn del(&mut self, k: u64) -> Result<bool>;
    /// Live keys ÷ slots, DRAM bytes, PM bytes in use.
    fn state(&self) -> (f64, u64, u64);
}

struct Persistent<T, P>(T, std::marker::PhantomData<P>);

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
struct Keys {
    preload: Vec<u64>,
    insert: Vec<u64>,
    pos: Vec<u64>,
    neg: Vec<u64>,
    delete: Vec<u64>,
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
fn value(k: u64) -> u64 {
    k.rotate_left(17) ^ 0x5555
}

/// Runs the preload and the four phases on `index`; `traffic` snapshots the model (drained) when counted.
fn phases(
    cfg: &SuiteConfig,
    engine: &'static str,
    index: &mut dyn Ops,
    k: &Keys,
    traffic: Option<&dyn Fn() -> Traffic>,
) -> Result<Vec<BenchResult>> {
    let fail = |what: &str| BenchError::Usage(format!("{engine}: {what} (wrong answer)"));
    for &key in &k.preload {
        index.put(key, value(key))?;
    }
    let mut out = Vec::new();
    for (workload, op) in PHASES {
        let keys = match workload {
            "insert" => &k.insert,
            "pos-search" => &k.pos,
            "neg-search" => &k.neg,
            _ => &k.delete,
        };
        let t0 = traffic.map(|t| t());
        let mut lat = Latency::new();
        let mut wrong = 0u64;
        let mut secs = 0.0;
        for batch in keys.chunks(BATCH) {
            let t = Instant::now();
            for &key in batch {
                match workload {
                    "insert" => index.put(key, value(key))?,
                    "pos-search" => wrong += u64::from(index.lookup(key)? != Some(value(key))),
                    "neg-search" => wrong += u64::from(index.lookup(key)?.is_some()),
                    _ => wrong += u64::from(!index.del(key)?),
                }
            }
            let d = t.elapsed();
            secs += d.as_secs_f64();
            let each = d / batch.len() as u32;
            for _ in batch {
                lat.record(each);
            }
        }
        if wrong > 0 {
            return Err(fail(&format!(
                "{wrong} of {} {workload} operations",
                keys.len()
            )));
        }
        let media = match (traffic, t0) {
            (Some(t), Some(t0)) => Some(t().since(&t0)),
            _ => None,
        };
        let (load_factor, dram, pm) = index.state();
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
            engine: engine.into(),
            workload: workload.into(),
            records: cfg.records,
            threads: 1,
            durability: if engine == HASHBROWN { "none" } else { "pm" }.into(),
            cache_bytes: 0,
            page_size: 0,
        };
        let mut r = row(&labels, op, &lat, &parts);
        r.load_factor = Some(load_factor);
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
fn region_bytes(cfg: &SuiteConfig) -> u64 {
    (cfg.records * 3 / 2 * 256 + (64 << 20)).next_multiple_of(1 << 20)
}

fn exhausted(engine: &str, bytes: u64, e: BenchError) -> BenchError {
    match e {
        BenchError::Engine(strata::Error::ResourceExhausted(m)) => BenchError::Usage(format!(
            "{engine}: the PM region of {bytes} bytes is too small ({m}); no row is reported"
        )),
        e => e,
    }
}

fn persistent<T: PmHashIndex<P>, P: Pm>(
    cfg: &SuiteConfig,
    engine: &'static str,
    index: T,
    k: &Keys,
    traffic: Option<&dyn Fn() -> Traffic>,
) -> Result<Vec<BenchResult>> {
    let mut ops = Persistent(index, std::marker::PhantomData);
    let rows = phases(cfg, engine, &mut ops, k, traffic)
        .map_err(|e| exhausted(engine, region_bytes(cfg), e))?;
    Ok(rows)
}

/// Runs the suite (its engines are its own: the engine list is not used).
pub fn run(cfg: &SuiteConfig, _engines: &[Box<dyn Engine>]) -> Result<Vec<BenchResult>> {
    let k = keys(cfg);
    let bytes = region_bytes(cfg);
    let mut out = Vec::new();
    let region = |mode| MmapRegion::anonymous(bytes, mode);
    let idx = HashIndex::create(region(PersistMode::Eadr)?, HashConfig::default())?;
    out.extend(persistent(cfg, ELIMDA, idx, &k, None)?);
    let idx = DashIndex::create(region(PersistMode::Eadr)?, DashConfig::default())?;
    out.extend(persistent(cfg, DASH, idx, &k, None)?);
    out.extend(cceh_rows(cfg, &k, bytes)?);
    let mut map = DramMap::default();
    out.extend(phases(cfg, HASHBROWN, &mut map, &k, None)?);
    drop(map);
    let pm = CountingPm::new(region(PersistMode::Adr)?);
    let snap = || {
        pm.drain();
        pm.snapshot()
    };
    let idx = HashIndex::create(&pm, HashConfig::default())?;
    out.extend(persistent(cfg, ELIMDA_MODEL, idx, &k, Some(&snap))?);
    drop(pm);
    let pm = CountingPm::new(region(PersistMode::Adr)?);
    let snap = || {
        pm.drain();
        pm.snapshot()
    };
    let idx = DashIndex::create(&pm, DashConfig::default())?;
    out.extend(persistent(cfg, DASH_MODEL, idx, &k, Some(&snap))?);
    Ok(out)
}

/// The CCEH-style engine's rows: on an eADR region (throughput), then on the ADR traffic model.
fn cceh_rows(cfg: &SuiteConfig, k: &Keys, bytes: u64) -> Result<Vec<BenchResult>> {
    let idx = CcehIndex::create(
        MmapRegion::anonymous(bytes, PersistMode::Eadr)?,
        CcehConfig::default(),
    )?;
    let mut out = persistent(cfg, CCEH, idx, k, None)?;
    let pm = CountingPm::new(MmapRegion::anonymous(bytes, PersistMode::Adr)?);
    let snap = || {
        pm.drain();
        pm.snapshot()
    };
    let idx = CcehIndex::create(&pm, CcehConfig::default())?;
    out.extend(persistent(cfg, CCEH_MODEL, idx, k, Some(&snap))?);
    Ok(out)
}

fn find<'a>(rows: &'a [BenchResult], engine: &str, workload: &str) -> Option<&'a BenchResult> {
    rows.iter()
        .find(|r| r.engine == engine && r.workload == workload)
}

fn per_op(b: Option<u64>, ops: u64) -> Option<f64> {
    b.map(|b| b as f64 / ops.max(1) as f64)
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

/// A ratio as `1.23×`; `–` when undefined (both sides zero, e.g. the writes of a lookup phase).
fn times(v: Option<f64>) -> String {
    v.map_or("–".into(), |v| format!("{v:.2}×"))
}

fn fmt(v: Option<f64>, digits: usize) -> String {
    v.map_or("n/a".into(), |v| format!("{v:.digits$}"))
}

/// Media bytes per operation of `engine`'s model rows in `workload`: (read, write).
fn media(rows: &[BenchResult], engine: &str, workload: &str) -> (Option<f64>, Option<f64>) {
    find(rows, engine, workload).map_or((None, None), |r| {
        (per_op(r.bytes_read, r.ops), per_op(r.bytes_written, r.ops))
    })
}

/// Per-phase tables, the end state and the goals, measured.
pub fn analysis(_cfg: &SuiteConfig, rows: &[BenchResult]) -> String {
    let tput = |e: &str, w: &str| find(rows, e, w).map(|r| r.ops_per_sec);
    let mut s = String::new();
    for (w, _) in PHASES {
        let _ = writeln!(
            s,
            "### {w}\n\n| engine | Mops/s | p50 µs | p99 µs | media read B/op | media write B/op |\n|---|---|---|---|---|---|"
        );
        for (e, m) in [
            (ELIMDA, Some(ELIMDA_MODEL)),
            (DASH, Some(DASH_MODEL)),
            (CCEH, Some(CCEH_MODEL)),
            (HASHBROWN, None),
        ] {
            let Some(r) = find(rows, e, w) else { continue };
            let (rd, wr) = m.map_or((None, None), |m| media(rows, m, w));
            let _ = writeln!(
                s,
                "| {e} | {:.2} | {:.3} | {:.3} | {} | {} |",
                r.ops_per_sec / 1e6,
                r.p50_us,
                r.p99_us,
                fmt(rd, 1),
                fmt(wr, 1)
            );
        }
        let (er, ew) = media(rows, ELIMDA_MODEL, w);
        let (dr, dw) = media(rows, DASH_MODEL, w);
        let _ = writeln!(
            s,
            "| **elimda ÷ dash** | {} | | | {} | {} |\n",
            times(ratio(tput(ELIMDA, w), tput(DASH, w))),
            times(ratio(er, dr)),
            times(ratio(ew, dw))
        );
    }
    // The end state is what the last phase's rows carry (N live keys after the deletes).
    s.push_str("### End state (after delete: N live keys)\n\n| engine | load factor | DRAM B/key | PM B/key |\n|---|---|---|---|\n");
    for r in rows.iter().filter(|r| r.workload == "delete") {
        let live = r.records.max(1) as f64;
        let _ = writeln!(
            s,
            "| {} | {} | {:.1} | {:.1} |",
            r.engine,
            fmt(r.load_factor, 3),
            r.rss_bytes.unwrap_or(0) as f64 / live,
            r.disk_bytes as f64 / live
        );
    }
    s.push_str("\n### Goals (issue 17, one thread)\n\n| goal | measured | met |\n|---|---|---|\n");
    let mut goal = |what: &str, v: Option<f64>, unit: &str, ok: fn(f64) -> bool| {
        let met = match v {
            Some(v) if ok(v) => "met",
            Some(_) => "not met",
            None => "n/a",
        };
        let _ = writeln!(s, "| {what} | {}{unit} | {met} |", fmt(v, 2));
    };
    let r = |w: &str| ratio(tput(ELIMDA, w), tput(DASH, w));
    goal("insert throughput ≥ 2.5× dash", r("insert"), "×", |v| {
        v >= 2.5
    });
    goal(
        "positive search ≥ 1.0× dash",
        r("pos-search"),
        "×",
        |v| v >= 1.0,
    );
    goal(
        "negative search ≥ 1.2× dash",
        r("neg-search"),
        "×",
        |v| v >= 1.2,
    );
    goal("delete ≥ 1.0× dash", r("delete"), "×", |v| v >= 1.0);
    let total = |e: &str, write: bool| -> Option<f64> {
        PHASES.iter().try_fold(0.0, |acc, (w, _)| {
            let r = find(rows, e, w)?;
            Some(acc + (if write { r.bytes_written } else { r.bytes_read })? as f64)
        })
    };
    goal(
        "media writes, the four phases, ≤ 0.5× dash",
        ratio(total(ELIMDA_MODEL, true), total(DASH_MODEL, true)),
        "×",
        |v| v <= 0.5,
    );
    goal(
        "media reads, the four phases, ≤ 0.2× dash",
        ratio(total(ELIMDA_MODEL, false), total(DASH_MODEL, false)),
        "×",
        |v| v <= 0.2,
    );
    goal(
        "elimda media reads per positive search ≤ 1 XPLine (256 B)",
        media(rows, ELIMDA_MODEL, "pos-search")
            .0
            .map(|b| b / XPLINE),
        " XPLines",
        |v| v <= 1.0,
    );
    goal(
        "elimda media reads per negative search = 0",
        media(rows, ELIMDA_MODEL, "neg-search")
            .0
            .map(|b| b / XPLINE),
        " XPLines",
        |v| v == 0.0,
    );
    goal(
        "positive search ≥ 0.5× hashbrown",
        ratio(tput(ELIMDA, "pos-search"), tput(HASHBROWN, "pos-search")),
        "×",
        |v| v >= 0.5,
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suites::{RunOptions, run as run_bench};

    #[test]
    fn hash_runs_end_to_end_at_a_tiny_size() {
        let tmp = tempfile::tempdir().unwrap();
        let mut opts = RunOptions::new(NAME);
        opts.records = Some(20_000);
        opts.out_dir = Some(tmp.path().join("out"));
        opts.progress = false;
        let out = run_bench(&opts).unwrap();
        for engine in [
            ELIMDA,
            DASH,
            CCEH,
            HASHBROWN,
            ELIMDA_MODEL,
            DASH_MODEL,
            CCEH_MODEL,
        ] {
            for (workload, op) in PHASES {
                let r = find(&out.results, engine, workload)
                    .unwrap_or_else(|| panic!("no row for {engine} {workload}"));
                assert_eq!(r.op, op);
                assert!(r.ops > 0 && r.ops_per_sec > 0.0, "{engine} {workload}");
                assert_eq!(r.records, 20_000);
                if engine.ends_with("-model") {
                    assert!(r.bytes_read.is_some() && r.bytes_written.is_some());
                }
            }
        }
        assert_eq!(out.results.len(), 7 * PHASES.len());
        // Inserts write media on both indexes; ElimDA's misses mostly stay in DRAM.
        let ins = find(&out.results, ELIMDA_MODEL, "insert").unwrap();
        assert!(ins.bytes_written.unwrap() > 0);
        for needle in [
            "### Goals (issue 17, one thread)",
            "| insert throughput ≥ 2.5× dash | ",
            "| positive search ≥ 0.5× hashbrown | ",
            "| **elimda ÷ dash** | ",
            "### End state",
        ] {
            assert!(out.analysis.contains(needle), "{needle}: {}", out.analysis);
        }
        let goals = &out.analysis[out.analysis.find("### Goals").unwrap()..];
        assert_eq!(goals.lines().count(), 4 + 9, "{goals}");
        assert!(!goals.contains("n/a"), "{goals}");
        let report = std::fs::read_to_string(&out.report_path).unwrap();
        assert!(report.contains("## Analysis"));
    }
}
