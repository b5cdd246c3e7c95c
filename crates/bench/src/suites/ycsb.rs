//! # YCSB workloads and the `ycsb` suite
//!
//! The core workloads of the Yahoo! Cloud Serving Benchmark over `u64` keys (record i has key i) and
//! checkable values ([`crate::values`], default 100 bytes):
//!
//! | workload | mix | key distribution |
//! |---|---|---|
//! | `ycsb-a` | 50% read, 50% update | zipfian |
//! | `ycsb-b` | 95% read, 5% update | zipfian |
//! | `ycsb-c` | 100% read | zipfian |
//! | `ycsb-d` | 95% read, 5% insert | latest |
//! | `ycsb-e` | 95% scan (1–100 records, uniform), 5% insert | zipfian (scan start) |
//! | `ycsb-f` | 50% read, 50% read-modify-write | zipfian |
//!
//! zipfian = θ 0.99 with scrambled ranks, latest = the newest keys most popular (see
//! [`crate::distributions`]). Updates write the next version of the whole record; inserts take fresh keys
//! after the loaded ones; a read-modify-write is a read followed by an update of the same key, timed as one
//! `rmw` operation. Every read and every scanned record is checked against what was written.
//!
//! The `ycsb` suite: `ycsb-load` (the N records in a seeded random order, as YCSB's hashed insert order,
//! then a checkpoint), then A, B, C, F, D, E in YCSB's recommended order, each with `--ops` operations
//! (default 500 000) at every `--threads` count.

use super::SuiteConfig;
use super::common::{Ctx, remove_dir, verify};
use super::runner::{Checker, KeyState, Worker};
use crate::distributions::{KeyChooser, KeyDistribution};
use crate::driver::{Driver, Engine};
use crate::error::{BenchError, Result};
use crate::result::BenchResult;
use rand::Rng;
use std::path::Path;

pub const NAME: &str = "ycsb";
pub const DESCRIPTION: &str = "YCSB load, then workloads A, B, C, F, D, E (zipfian 0.99 / latest), 100-byte values, every engine";
pub const DEFAULT_RECORDS: u64 = 1_000_000;
pub const DEFAULT_OPS: u64 = 500_000;
/// Longest scan of workload E.
pub const MAX_SCAN: u64 = 100;

/// One YCSB workload: an operation mix and a key distribution.
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    pub name: &'static str,
    pub read: f64,
    pub update: f64,
    pub insert: f64,
    pub scan: f64,
    pub rmw: f64,
    pub distribution: KeyDistribution,
}

impl Spec {
    const fn new(name: &'static str, mix: [f64; 5], distribution: KeyDistribution) -> Spec {
        Spec {
            name,
            read: mix[0],
            update: mix[1],
            insert: mix[2],
            scan: mix[3],
            rmw: mix[4],
            distribution,
        }
    }
}

/// The six core workloads.
pub const WORKLOADS: [Spec; 6] = [
    Spec::new(
        "ycsb-a",
        [0.5, 0.5, 0.0, 0.0, 0.0],
        KeyDistribution::Zipfian,
    ),
    Spec::new(
        "ycsb-b",
        [0.95, 0.05, 0.0, 0.0, 0.0],
        KeyDistribution::Zipfian,
    ),
    Spec::new(
        "ycsb-c",
        [1.0, 0.0, 0.0, 0.0, 0.0],
        KeyDistribution::Zipfian,
    ),
    Spec::new(
        "ycsb-d",
        [0.95, 0.0, 0.05, 0.0, 0.0],
        KeyDistribution::Latest,
    ),
    Spec::new(
        "ycsb-e",
        [0.0, 0.0, 0.05, 0.95, 0.0],
        KeyDistribution::Zipfian,
    ),
    Spec::new(
        "ycsb-f",
        [0.5, 0.0, 0.0, 0.0, 0.5],
        KeyDistribution::Zipfian,
    ),
];

/// The workload named `name` (`ycsb-a` … `ycsb-f`).
pub fn spec(name: &str) -> Option<Spec> {
    WORKLOADS.iter().copied().find(|s| s.name == name)
}

/// Keys a run of `specs` at every thread count may insert, beyond the loaded ones.
pub fn insert_budget(specs: &[Spec], ops: u64, thread_counts: usize) -> u64 {
    specs
        .iter()
        .filter(|s| s.insert > 0.0)
        .map(|_| ops * thread_counts as u64)
        .sum()
}

/// Method notes for reports of suites that run YCSB workloads.
pub fn notes(cfg: &SuiteConfig, ops: u64) -> Vec<String> {
    vec![
        format!(
            "YCSB core workloads over {} records with {}-byte values, {ops} operations per workload and thread \
             count; zipfian = θ 0.99 with FNV-scrambled ranks over a 10^10 item space (as YCSB), latest = \
             zipfian over insertion recency; E scans 1–{MAX_SCAN} records (uniform).",
            cfg.records,
            cfg.codec.size()
        ),
        "Each thread has its own ChaCha8 stream derived from the seed, the workload and the thread count; the \
         operations of a workload are split evenly among its threads. Workloads run one after another on the \
         same database (D and E insert new keys)."
            .into(),
        "Every read, scan and read-modify-write is checked: a value must decode under its key; with one thread \
         it must be exactly the last version written and scans must return exactly the next keys in order."
            .into(),
        match cfg.target_rate {
            Some(r) => format!(
                "Target rate {r} ops/s (all threads together): latency is measured from each operation's \
                 scheduled start, so queueing delay counts (no coordinated omission)."
            ),
            None => "No target rate: threads run flat out; latency is each call's own duration.".into(),
        },
    ]
}

/// Method notes of the `ycsb` suite.
pub fn suite_notes(cfg: &SuiteConfig) -> Vec<String> {
    notes(cfg, cfg.ops.unwrap_or(DEFAULT_OPS))
}

/// Runs workload `spec` with `ops` operations on `threads` threads.
pub(crate) fn run_workload(
    ctx: &Ctx<'_>,
    db: &dyn Driver,
    dir: &Path,
    keys: &KeyState,
    spec: Spec,
    threads: u32,
    ops: u64,
) -> Result<Vec<BenchResult>> {
    let checker = ctx.checker(keys, if threads == 1 { 0 } else { threads });
    let writes = spec.update + spec.insert + spec.rmw > 0.0;
    ctx.parallel(db, dir, spec.name, threads, ops, |w, share| {
        let mut chooser = KeyChooser::new(spec.distribution, keys.loaded());
        for _ in 0..share {
            let space = match spec.distribution {
                KeyDistribution::Latest => keys.key_count(),
                _ => keys.loaded(),
            };
            let r: f64 = w.rng.random();
            if r < spec.read {
                let k = chooser.next(space, &mut w.rng);
                checker.read(w, db, "read", k)?;
            } else if r < spec.read + spec.update {
                let k = chooser.next(space, &mut w.rng);
                let codec = checker.codec;
                w.op("update", |w| keys.update(db, codec, k, &mut w.buf))?;
            } else if r < spec.read + spec.update + spec.insert {
                let k = keys.claim_insert()?;
                checker.codec.encode(k, 1, &mut w.buf);
                w.op("insert", |w| db.put(k, &w.buf))?;
                keys.commit(k, 1);
            } else if r < spec.read + spec.update + spec.insert + spec.scan {
                let start = chooser.next(space, &mut w.rng);
                let len = w.rng.random_range(1..=MAX_SCAN);
                scan(w, db, &checker, start, len, !writes || threads == 1)?;
            } else {
                let k = chooser.next(space, &mut w.rng);
                let codec = checker.codec;
                w.op("rmw", |w| {
                    let before = keys.committed(k);
                    let found = db.get(k, &mut w.buf)?;
                    checker.check(k, before, found, &w.buf)?;
                    keys.update(db, codec, k, &mut w.buf)
                })?;
            }
        }
        Ok(())
    })
}

/// A scan of up to `len` records from `start`, timed as one `scan` operation (which copies the records out)
/// and then checked: ascending keys from `start`, every value valid; with `exact`, exactly the next `len` keys.
fn scan(
    w: &mut Worker,
    db: &dyn Driver,
    checker: &Checker<'_>,
    start: u64,
    len: u64,
    exact: bool,
) -> Result<()> {
    let keys = checker.keys;
    let engine = checker.engine;
    let size = checker.codec.size();
    let limit = keys.key_count();
    let mut got_keys: Vec<u64> = Vec::with_capacity(len as usize);
    let mut got_values = std::mem::take(&mut w.buf);
    got_values.clear();
    let seen = w.op("scan", |_| {
        db.scan(start, u64::MAX, len, false, &mut |k, v| {
            got_keys.push(k);
            got_values.extend_from_slice(v);
            if v.len() != size {
                return Err(BenchError::Verify(format!(
                    "{engine}: scan returned a {}-byte value for key {k}, expected {size}",
                    v.len()
                )));
            }
            Ok(())
        })
    })?;
    verify(seen == got_keys.len() as u64 && seen <= len, || {
        format!(
            "{engine}: scan of {len} from {start} reported {seen} records but visited {}",
            got_keys.len()
        )
    })?;
    let mut expect = start;
    for (i, &k) in got_keys.iter().enumerate() {
        let ok = if exact { k == expect } else { k >= expect };
        verify(ok, || {
            format!("{engine}: scan from {start} returned key {k} where {expect} was due")
        })?;
        expect = k + 1;
        checker.check(
            k,
            keys.committed(k),
            true,
            &got_values[i * size..(i + 1) * size],
        )?;
    }
    if exact {
        let want = len.min(limit.saturating_sub(start));
        verify(seen == want, || {
            format!("{engine}: scan of {len} from {start} returned {seen} records, expected {want}")
        })?;
    }
    w.buf = got_values;
    Ok(())
}

/// Runs each of `specs` at every thread count of the run, `ops` operations each, in that order.
pub(crate) fn run_sweep(
    ctx: &Ctx<'_>,
    db: &dyn Driver,
    dir: &Path,
    keys: &KeyState,
    specs: &[Spec],
    ops: u64,
) -> Result<Vec<BenchResult>> {
    let mut out = Vec::new();
    for spec in specs {
        for &t in &ctx.cfg.threads {
            out.extend(run_workload(ctx, db, dir, keys, *spec, t, ops)?);
        }
    }
    Ok(out)
}

/// Runs the `ycsb` suite on every engine.
pub fn run(cfg: &SuiteConfig, engines: &[Box<dyn Engine>]) -> Result<Vec<BenchResult>> {
    let order = ["ycsb-a", "ycsb-b", "ycsb-c", "ycsb-f", "ycsb-d", "ycsb-e"];
    let specs: Vec<Spec> = order
        .iter()
        .map(|n| spec(n).expect("known workload"))
        .collect();
    let ops = cfg.ops.unwrap_or(DEFAULT_OPS);
    let mut out = Vec::new();
    for engine in engines {
        let ctx = Ctx::new(NAME, cfg, engine.as_ref());
        let dir = cfg.data_dir.join(engine.name());
        let (db, rows) = ctx.fill_open(&dir, "ycsb-load", &ctx.random_order())?;
        out.extend(rows);
        let keys = KeyState::new(
            cfg.records,
            cfg.records + insert_budget(&specs, ops, cfg.threads.len()),
        );
        out.extend(run_sweep(&ctx, db.as_ref(), &dir, &keys, &specs, ops)?);
        db.close()?;
        remove_dir(&dir)?;
    }
    Ok(out)
}
