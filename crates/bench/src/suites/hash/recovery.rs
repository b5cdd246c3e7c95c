//! Recovery time against items and threads (the seed's Exp 10).
//!
//! * `elimda` (workload `recovery`): an index loaded with N/4, N/2 and N keys (one collecting log per thread
//!   of the sweep, loaded with that many threads) gives its region back — its DRAM state is dropped, and
//!   the D-buckets not yet flushed survive only in the logs, as after a crash — and is rebuilt by
//!   `recover_with_threads` with each thread count of the sweep, [`REPEATS`] times; the row's `secs` is the
//!   median, `ops` the items, `records` the items. Each recovered index is checked: its count, and
//!   [`PROBES`] of its keys found with their values.
//! * `dash` (lazy recovery, as in Dash): the same sizes, dropped without a clean close (a crash), then
//!   `recovery-open` (`open`: superblock and directory only), `recovery-first-ops` ([`PROBES`] lookups,
//!   which repair the segments they reach) and `recovery-repair` (`repair_all`: the rest); one thread.

use super::threads::{Concurrent, preload};
use super::{DASH, ELIMDA, Keys, Shape, SuiteConfig, region_bytes, shaped_row, value};
use crate::error::{BenchError, Result};
use crate::measure::Latency;
use crate::result::BenchResult;
use std::time::{Duration, Instant};
use strata::lab::index::hash::dash::{DashConfig, DashIndex};
use strata::lab::index::hash::{HashConfig, HashIndex};
use strata::lab::storage::pm::{MmapRegion, PersistMode};

/// Recoveries per size and thread count (the median is reported).
pub const REPEATS: usize = 3;
/// Lookups that check a recovered index (and dash's first operations after a crash).
pub const PROBES: usize = 1000;
pub const ELIMDA_WORKLOAD: &str = "recovery";
pub const DASH_OPEN: &str = "recovery-open";
pub const DASH_FIRST: &str = "recovery-first-ops";
pub const DASH_REPAIR: &str = "recovery-repair";

/// The sizes: N/4, N/2, N (at least 1 key each).
pub fn sizes(records: u64) -> [u64; 3] {
    [(records / 4).max(1), (records / 2).max(1), records.max(1)]
}

/// A row of `items` items that took `secs` (times of the single runs in `lat`).
fn recovery_row(
    cfg: &SuiteConfig,
    shape: &Shape<'_>,
    lat: &Latency,
    secs: f64,
    items: u64,
    state: (f64, u64, u64),
) -> BenchResult {
    let mut r = shaped_row(cfg, shape, lat, secs, state);
    r.records = items;
    r.ops = items;
    r.ops_per_sec = items as f64 / secs.max(1e-9);
    r
}

fn check(engine: &str, index: &dyn Concurrent, keys: &[u64], len: u64) -> Result<()> {
    let step = (keys.len() / PROBES).max(1);
    let lost = keys
        .iter()
        .step_by(step)
        .map(|&k| index.lookup(k).map(|v| v != Some(value(k))))
        .try_fold(0u64, |n, bad| bad.map(|b| n + u64::from(b)))?;
    if lost > 0 || len != keys.len() as u64 {
        return Err(BenchError::Usage(format!(
            "{engine}: recovered {len} of {} keys, {lost} probes wrong",
            keys.len()
        )));
    }
    Ok(())
}

/// ElimDA's recovery rows for `n` keys.
fn elimda_rows(cfg: &SuiteConfig, keys: &[u64], sweep: &[usize]) -> Result<Vec<BenchResult>> {
    let logs = sweep.iter().copied().max().unwrap_or(1);
    let config = HashConfig {
        logs: logs as u64,
        ..HashConfig::default()
    };
    let region = MmapRegion::anonymous(region_bytes(cfg), PersistMode::Eadr)?;
    let index = HashIndex::create(region, config)?;
    preload(&index, keys, logs)?;
    let mut pm = index.into_pm();
    let mut out = Vec::new();
    for &threads in sweep {
        let mut lat = Latency::new();
        let mut times = Vec::with_capacity(REPEATS);
        let mut state = (0.0, 0, 0);
        for _ in 0..REPEATS {
            let start = Instant::now();
            let index = HashIndex::recover_with_threads(pm, threads)?;
            let d = start.elapsed();
            check(ELIMDA, &index, keys, index.len())?;
            state = index.state();
            lat.record(d);
            times.push(d);
            pm = index.into_pm();
        }
        times.sort_unstable();
        let shape = Shape {
            engine: ELIMDA,
            workload: ELIMDA_WORKLOAD,
            op: "recover",
            threads,
        };
        let median = times[times.len() / 2].as_secs_f64();
        out.push(recovery_row(
            cfg,
            &shape,
            &lat,
            median,
            keys.len() as u64,
            state,
        ));
    }
    Ok(out)
}

/// Dash's lazy-recovery rows for `n` keys.
fn dash_rows(cfg: &SuiteConfig, keys: &[u64]) -> Result<Vec<BenchResult>> {
    let region = MmapRegion::anonymous(region_bytes(cfg), PersistMode::Eadr)?;
    let index = DashIndex::create(&region, DashConfig::default())?;
    preload(&index, keys, 1)?;
    drop(index); // a crash: no clean close
    let n = keys.len() as u64;
    let timed = |f: &mut dyn FnMut() -> Result<()>| -> Result<Duration> {
        let start = Instant::now();
        f()?;
        Ok(start.elapsed())
    };
    let mut opened = None;
    let open = timed(&mut || {
        opened = Some(DashIndex::open(&region)?);
        Ok(())
    })?;
    let index = opened.ok_or_else(|| BenchError::Usage("dash: open returned nothing".into()))?;
    let step = (keys.len() / PROBES).max(1);
    let probes: Vec<u64> = keys.iter().step_by(step).copied().collect();
    let mut wrong = 0u64;
    let first = timed(&mut || {
        for &k in &probes {
            wrong += u64::from(index.get(k)? != Some(value(k)));
        }
        Ok(())
    })?;
    let repair = timed(&mut || Ok(index.repair_all()?))?;
    if wrong > 0 || index.len() != n {
        return Err(BenchError::Usage(format!(
            "dash: after a crash {} of {n} keys, {wrong} first lookups wrong",
            index.len()
        )));
    }
    let state = index.state();
    let mut out = Vec::new();
    for (workload, d, items) in [
        (DASH_OPEN, open, n),
        (DASH_FIRST, first, probes.len() as u64),
        (DASH_REPAIR, repair, n),
    ] {
        let mut lat = Latency::new();
        lat.record(d);
        let shape = Shape {
            engine: DASH,
            workload,
            op: "recover",
            threads: 1,
        };
        let mut r = recovery_row(cfg, &shape, &lat, d.as_secs_f64(), items, state);
        r.records = n;
        out.push(r);
    }
    Ok(out)
}

/// Every recovery row: per size, elimda over the sweep, then dash.
pub(super) fn rows(cfg: &SuiteConfig, k: &Keys, sweep: &[usize]) -> Result<Vec<BenchResult>> {
    let mut out = Vec::new();
    for n in sizes(cfg.records) {
        let keys = &k.preload[..n as usize];
        out.extend(elimda_rows(cfg, keys, sweep)?);
        out.extend(dash_rows(cfg, keys)?);
    }
    Ok(out)
}
