//! **Value sizes** (Exp 8, workloads `value-<bytes>-insert` and `value-<bytes>-pos-search`): `elimda` and
//! `dash` storing values of [`VALUE_SIZES`] bytes out of line ([`ValueIndex`]: a value log in the same
//! region, the index mapping each key to the value's handle), one thread, each size on a fresh region:
//! N/2 inserts of new keys (the main insert keys), then N/2 positive searches over them (every value's
//! bytes checked). The same run on the ADR traffic model (engines `*-adr-model`) carries the modelled
//! media bytes of each phase in `bytes_read` / `bytes_written`.
//!
//! Values are `value(key)` repeated to the size, so every answer is checked byte for byte.

use std::fmt::Write as _;
use std::time::Instant;

use super::analysis::{find_at, fmt, ratio, times};
use super::{
    BATCH, DASH, DASH_MODEL, ELIMDA, ELIMDA_MODEL, Keys, Shape, SuiteConfig, charge_batch,
    exhausted, modelled, region_bytes, shaped_row, value,
};
use crate::error::{BenchError, Result};
use crate::measure::Latency;
use crate::result::BenchResult;
use strata::lab::index::hash::dash::{DashConfig, DashIndex};
use strata::lab::index::hash::values::{Part, ValueIndex};
use strata::lab::index::hash::{HashConfig, HashIndex, PmHashIndex};
use strata::lab::storage::pm::{MmapRegion, PersistMode, Pm, Traffic};

/// Value sizes of Exp 8 (the seed's, without 32 B).
pub const VALUE_SIZES: [usize; 4] = [16, 64, 128, 256];

/// Seed Exp 8 (threads unstated), insert Mops/s per value size: DASH, ElimDA.
const SEED: [(usize, f64, f64); 5] = [
    (16, 4.761, 10.386),
    (32, 4.370, 9.658),
    (64, 4.013, 8.624),
    (128, 3.649, 6.558),
    (256, 2.531, 3.995),
];

/// Workload of the Exp 8 row of `phase` (`insert`, `pos-search`) with values of `bytes`.
pub fn value_workload(bytes: usize, phase: &str) -> String {
    format!("value-{bytes}-{phase}")
}

/// The `bytes`-byte value of `k`.
fn bytes_of(k: u64, bytes: usize) -> Vec<u8> {
    value(k)
        .to_le_bytes()
        .iter()
        .copied()
        .cycle()
        .take(bytes)
        .collect()
}

/// Bytes of the value log for N/2 values of `bytes`: twice their records plus 1 MiB (cleaning never runs).
fn log_bytes(cfg: &SuiteConfig, bytes: usize) -> u64 {
    ((cfg.records / 2).max(1) * (16 + bytes as u64) * 2 + (1 << 20)).next_multiple_of(4096)
}

fn region(cfg: &SuiteConfig, bytes: usize) -> u64 {
    4096 + region_bytes(cfg) + log_bytes(cfg, bytes)
}

/// The insert and positive-search rows of `index` with values of `bytes`.
fn measure<P: Pm, I: PmHashIndex<Part<P>>>(
    cfg: &SuiteConfig,
    engine: &'static str,
    index: &mut ValueIndex<P, I>,
    k: &Keys,
    bytes: usize,
    traffic: Option<&dyn Fn() -> Traffic>,
) -> Result<Vec<BenchResult>> {
    let keys = &k.insert;
    let mut out = Vec::new();
    let mut buf = Vec::with_capacity(bytes);
    for (phase, op) in [("insert", "insert"), ("pos-search", "read")] {
        let t0 = traffic.map(|t| t());
        let mut lat = Latency::new();
        let (mut secs, mut wrong) = (0.0, 0u64);
        for batch in keys.chunks(BATCH) {
            let vals: Vec<Vec<u8>> = batch.iter().map(|&key| bytes_of(key, bytes)).collect();
            let t = Instant::now();
            for (&key, v) in batch.iter().zip(&vals) {
                if phase == "insert" {
                    index.put(key, v)?;
                } else {
                    let found = index.get_into(key, &mut buf)?;
                    wrong += u64::from(!found || buf != *v);
                }
            }
            charge_batch(&mut lat, &mut secs, t.elapsed(), batch.len());
        }
        if wrong > 0 {
            return Err(BenchError::Usage(format!(
                "{engine}: {wrong} of {} lookups of {bytes} B values (wrong answer)",
                keys.len()
            )));
        }
        let workload = value_workload(bytes, phase);
        let shape = Shape {
            engine,
            workload: &workload,
            op,
            threads: 1,
        };
        let inner = index.inner();
        let state = (
            inner.load_factor(),
            inner.dram_bytes(),
            inner.pm_bytes_used() + index.log_usage().1,
        );
        let mut r = shaped_row(cfg, &shape, &lat, secs, state);
        if let (Some(t), Some(t0)) = (traffic, t0) {
            let m = t().since(&t0);
            r.bytes_read = Some(m.media_read_bytes);
            r.bytes_written = Some(m.media_write_bytes);
        }
        out.push(r);
    }
    Ok(out)
}

/// Exp 8's rows: both engines at every size, on eADR regions, then on the ADR traffic model.
pub(super) fn rows(cfg: &SuiteConfig, k: &Keys) -> Result<Vec<BenchResult>> {
    let mut out = Vec::new();
    for bytes in VALUE_SIZES {
        let len = region(cfg, bytes);
        let log = log_bytes(cfg, bytes);
        let run = |engine: &'static str, dash: bool, pm: MmapRegion| -> Result<Vec<BenchResult>> {
            if dash {
                let mut idx =
                    ValueIndex::create(pm, log, |w| DashIndex::create(w, DashConfig::default()))?;
                measure(cfg, engine, &mut idx, k, bytes, None)
            } else {
                let mut idx =
                    ValueIndex::create(pm, log, |w| HashIndex::create(w, HashConfig::default()))?;
                measure(cfg, engine, &mut idx, k, bytes, None)
            }
        };
        for (engine, dash) in [(ELIMDA, false), (DASH, true)] {
            let pm = MmapRegion::anonymous(len, PersistMode::Eadr)?;
            out.extend(run(engine, dash, pm).map_err(|e| exhausted(engine, len, e))?);
        }
        out.extend(modelled(len, |pm, snap| {
            let mut idx =
                ValueIndex::create(pm, log, |w| HashIndex::create(w, HashConfig::default()))?;
            measure(cfg, ELIMDA_MODEL, &mut idx, k, bytes, Some(snap))
        })?);
        out.extend(modelled(len, |pm, snap| {
            let mut idx =
                ValueIndex::create(pm, log, |w| DashIndex::create(w, DashConfig::default()))?;
            measure(cfg, DASH_MODEL, &mut idx, k, bytes, Some(snap))
        })?);
    }
    Ok(out)
}

/// The report's Exp 8 section: Mops/s and modelled media bytes per operation beside the seed's table.
pub(super) fn section(rows: &[BenchResult]) -> String {
    let mut s = String::from(
        "### Value sizes (Exp 8; one thread, Mops/s; media bytes per operation from the ADR model)\n\n\
         Values out of line in a value log of the same region (record = 16 B header + value rounded to 16 B), \
         the index holding an 8 B handle; N/2 inserts of new keys, then N/2 positive searches of them.\n\n\
         | value | elimda ins / pos | dash ins / pos | elimda ÷ dash ins | media W / R per ins (elimda · dash) | \
         media R per pos (elimda · dash) | seed ElimDA · DASH ins (÷) |\n|---|---|---|---|---|---|---|\n",
    );
    let per_op = |r: Option<&BenchResult>, read: bool| {
        r.and_then(|r| {
            let b = if read { r.bytes_read } else { r.bytes_written };
            b.map(|b| b as f64 / r.ops.max(1) as f64)
        })
    };
    for (bytes, seed_dash, seed_elimda) in SEED {
        let at =
            |engine: &str, phase: &str| find_at(rows, engine, &value_workload(bytes, phase), 1);
        let mops = |engine: &str, phase: &str| at(engine, phase).map(|r| r.ops_per_sec / 1e6);
        let pair = |engine: &str| {
            format!(
                "{} / {}",
                fmt(mops(engine, "insert"), 3),
                fmt(mops(engine, "pos-search"), 3)
            )
        };
        let ins = |engine: &str| at(engine, "insert");
        let pos = |engine: &str| at(engine, "pos-search");
        let _ = writeln!(
            s,
            "| {bytes} B | {} | {} | {} | {} / {} · {} / {} | {} · {} | {seed_elimda:.3} · {seed_dash:.3} ({:.2}×) |",
            pair(ELIMDA),
            pair(DASH),
            times(ratio(mops(ELIMDA, "insert"), mops(DASH, "insert"))),
            fmt(per_op(ins(ELIMDA_MODEL), false), 0),
            fmt(per_op(ins(ELIMDA_MODEL), true), 0),
            fmt(per_op(ins(DASH_MODEL), false), 0),
            fmt(per_op(ins(DASH_MODEL), true), 0),
            fmt(per_op(pos(ELIMDA_MODEL), true), 0),
            fmt(per_op(pos(DASH_MODEL), true), 0),
            seed_elimda / seed_dash,
        );
    }
    let ins = |engine: &str, bytes: usize| {
        find_at(rows, engine, &value_workload(bytes, "insert"), 1).map(|r| r.ops_per_sec)
    };
    let _ = writeln!(
        s,
        "\nInsert 256 B ÷ 16 B: elimda {}, dash {} (seed ElimDA {:.2}×, DASH {:.2}×). 32 B is not measured.\n",
        times(ratio(ins(ELIMDA, 256), ins(ELIMDA, 16))),
        times(ratio(ins(DASH, 256), ins(DASH, 16))),
        SEED[4].2 / SEED[0].2,
        SEED[4].1 / SEED[0].1,
    );
    s
}
