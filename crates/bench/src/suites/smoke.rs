//! # The `smoke` suite
//!
//! A quick pass over every index family and every operation, with checks on everything read back. For each
//! engine, with `u64` keys (every value checkable: [`crate::values`]), `N` = `--records` (default 200 000):
//!
//! Values are checkable (see [`crate::values`]): 8-byte `u64` values unless `--value-size` says otherwise.
//!
//! 1. `fillseq`: a fresh database, keys 0..N inserted in order, one write per record; the phase ends with a
//!    checkpoint (included in its time and I/O).
//! 2. `fillrandom`: another fresh database, the same keys in a seeded random order (Fisher–Yates), then a
//!    checkpoint; the database is closed and reopened for the read phases.
//! 3. `readrandom`: N gets of uniformly random existing keys; each value must equal its key.
//! 4. `scan`: one full forward scan; one op per record returned; keys must be exactly 0..N in order.
//! 5. `range-count` and `range-sample`, two phases over the same 100 ranges of max(1, N/1000) keys (0.1%)
//!    at random positions: op `count` counts each (must equal the width), op `sample` draws k = 1000
//!    independent samples from each (every sample must lie in its range and carry its key's value).
//!
//! A wrong answer aborts the run with [`BenchError::Verify`].

use super::common::{Ctx, remove_dir, verify};
use super::{SuiteConfig, dbbench};
use crate::driver::Engine;
use crate::error::{BenchError, Result};
use crate::result::BenchResult;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

pub const NAME: &str = "smoke";
pub const DESCRIPTION: &str = "fillseq, fillrandom, readrandom, full scan, range count + sample on every index family (u64 keys and values)";
pub const DEFAULT_RECORDS: u64 = 200_000;
/// Range queries of the range-count and range-sample workloads.
const RANGE_QUERIES: u64 = 100;
/// Samples per sample query.
const SAMPLE_K: usize = 1000;

/// Method notes for the report.
pub fn notes(cfg: &SuiteConfig) -> Vec<String> {
    let width = range_width(cfg.records);
    vec![
        "Every phase runs on one thread; each engine starts from fresh databases in its own directory.".into(),
        format!(
            "`fillseq` and `fillrandom` insert {} records one write per record with durability `{}`, then \
             checkpoint; `secs`, `ops/s` and the I/O columns include that checkpoint, the latency percentiles do \
             not. `fillrandom` uses a seeded Fisher–Yates shuffle of the keys.",
            cfg.records,
            cfg.durability.name()
        ),
        "`readrandom`, `scan`, `range-count`, `range-sample` run on the `fillrandom` database after a close and reopen (empty \
         buffer pool; the OS page cache may still hold the file)."
            .into(),
        format!(
            "`readrandom`: {} gets of uniformly random existing keys. `scan`: one full forward scan, one op per \
             record. `range-count`, `range-sample`: the same {RANGE_QUERIES} ranges of {width} keys (0.1%) at \
             random positions; `count` is one range count, `sample` draws k = {SAMPLE_K} independent uniform samples. Every value, count \
             and sample is checked.",
            cfg.records
        ),
        "Latency: `Instant` around each call, recorded in an HdrHistogram at nanosecond resolution (3 \
         significant digits), shown in µs."
            .into(),
        "I/O: the engine's own counters over the phase; `page reads/writes` count pages of the index's page \
         file, `io_reads`/`io_writes` in results.jsonl sum every file kind (pages, WAL, manifest)."
            .into(),
        "`rss_bytes`: peak resident set size (VmHWM), reset at the start of each phase when the kernel allows \
         (`rss_scope` = `phase`, else `process`). `disk_bytes`: apparent size of the database directory at the \
         end of the phase."
            .into(),
    ]
}

fn range_width(records: u64) -> u64 {
    (records / 1000).max(1)
}

/// Runs the suite on every engine.
pub fn run(cfg: &SuiteConfig, engines: &[Box<dyn Engine>]) -> Result<Vec<BenchResult>> {
    if cfg.records == 0 {
        return Err(BenchError::Usage(
            "the smoke suite needs at least 1 record".into(),
        ));
    }
    let mut out = Vec::new();
    for engine in engines {
        out.extend(run_engine(&Ctx::new(NAME, cfg, engine.as_ref()))?);
    }
    Ok(out)
}

fn run_engine(ctx: &Ctx<'_>) -> Result<Vec<BenchResult>> {
    let cfg = ctx.cfg;
    let n = cfg.records;
    let name = ctx.engine.name();
    let base = cfg.data_dir.join(name);
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let mut out = Vec::new();

    let dir = base.join("fillseq");
    let mut keys: Vec<u64> = (0..n).collect();
    out.extend(ctx.fill(&dir, "fillseq", &keys)?);
    remove_dir(&dir)?;

    let dir = base.join("fillrandom");
    keys.shuffle(&mut rng);
    out.extend(ctx.fill(&dir, "fillrandom", &keys)?);
    drop(keys);

    let owned = ctx.open(&dir)?;
    let db = owned.as_ref();
    out.extend(ctx.read_random(db, &dir, &mut rng)?);
    out.extend(dbbench::read_seq(ctx, db, &dir, "scan", cfg.records, 1)?);
    let width = range_width(n);
    let ranges: Vec<(u64, u64)> = (0..RANGE_QUERIES)
        .map(|_| {
            let lo = rng.random_range(0..=n - width);
            (lo, lo + width - 1)
        })
        .collect();
    if ctx.engine.capabilities().count {
        let mut phase = ctx.phase(db, "range-count", RANGE_QUERIES);
        let op = phase.op("count");
        for &(lo, hi) in &ranges {
            let c = phase.time(op, || db.count(lo, hi))?;
            verify(c == width, || {
                format!("{name}: count [{lo}, {hi}] = {c}, expected {width}")
            })?;
        }
        out.extend(phase.finish(&dir)?);
    }
    if ctx.engine.capabilities().sample {
        let mut phase = ctx.phase(db, "range-sample", RANGE_QUERIES);
        let op = phase.op("sample");
        for &(lo, hi) in &ranges {
            let s = phase.time(op, || db.sample(lo, hi, SAMPLE_K, &mut rng))?;
            verify(s.len() == SAMPLE_K, || {
                format!(
                    "{name}: sample [{lo}, {hi}] k={SAMPLE_K} returned {} records",
                    s.len()
                )
            })?;
            for (k, v) in &s {
                verify((lo..=hi).contains(k), || {
                    format!("{name}: sample [{lo}, {hi}] returned key {k}")
                })?;
                ctx.codec().check(*k, 1, v)?;
            }
        }
        out.extend(phase.finish(&dir)?);
    }
    owned.close()?;
    Ok(out)
}
