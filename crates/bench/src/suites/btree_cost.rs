//! # The `btree-cost` suite
//!
//! The B+-tree family at scale, against its own cost model. Engine: `strata-btree` only (the suite measures
//! that family's I/O model; other engines are skipped). `u64` keys and checkable 8-byte values, N = `--records`
//! (default 2 000 000):
//!
//! With the run's buffer pool (`--cache`, default 64 MiB):
//! 1. `fillseq`: keys 0..N in order into a fresh database, one write per record, then a checkpoint;
//! 2. `fillrandom`: the same keys in a seeded random order into another fresh database, then a checkpoint;
//! 3. `readrandom`: N gets of uniformly random keys on the `fillrandom` database after a reopen.
//!
//! With a buffer pool of 1% of the data, the data being N × 16 bytes of keys and values (at least the pool's
//! minimum of 8 pages):
//! 4. `load-1pct`: the even keys 0, 2, …, 2(N−1) in random order into a fresh database, then a checkpoint:
//!    page I/Os per insert averaged over a load whose tree grows from empty to N records;
//! 5. `insert-1pct`: M = N/10 distinct random odd keys into that N-record tree, then a checkpoint: page I/Os
//!    per insert at size N;
//! 6. `get-1pct`: M gets of random even keys on the same handle (the pool is warm and clean after the
//!    checkpoint): page I/Os per point lookup.
//!
//! The report sets the measured page reads and writes per operation next to the cost model's ⌈log_B(N/B)⌉,
//! B = records per leaf page. Every read is verified.

use super::SuiteConfig;
use super::common::{Ctx, remove_dir};
use crate::driver::Engine;
use crate::error::{BenchError, Result};
use crate::report::fmt_bytes;
use crate::result::BenchResult;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use strata::lab::index::btree::MAX_BTREE_PAGE_SIZE;
use strata::lab::index::btree::node::Layout;
use strata::lab::storage::page::MIN_PAGE_SIZE;

pub const NAME: &str = "btree-cost";
pub const DESCRIPTION: &str = "B+-tree load (sequential, random) and random-get throughput; page I/Os per insert and per lookup with a pool of 1% of the data, next to the cost model";
pub const DEFAULT_RECORDS: u64 = 2_000_000;
/// The engine this suite measures.
const ENGINE: &str = "strata-btree";
/// Bytes of one record in the data size the 1% pool is taken of.
const RECORD_BYTES: u64 = 16;
/// Smallest buffer pool the engine accepts, in pages.
const MIN_POOL_PAGES: u64 = 8;

/// Buffer pool of the `*-1pct` phases, in bytes.
pub fn small_pool_bytes(cfg: &SuiteConfig) -> usize {
    let bytes = (cfg.records * RECORD_BYTES / 100).max(MIN_POOL_PAGES * cfg.page_size as u64);
    bytes as usize
}

/// Records per leaf page of a `u64 → u64` tree with this page size.
pub fn leaf_capacity(page_size: usize) -> Result<u64> {
    if !page_size.is_power_of_two() || !(MIN_PAGE_SIZE..=MAX_BTREE_PAGE_SIZE).contains(&page_size) {
        return Err(BenchError::Usage(format!(
            "page size {page_size} must be a power of two from {MIN_PAGE_SIZE} to {MAX_BTREE_PAGE_SIZE} \
             (the B+-tree's limit)"
        )));
    }
    let layout = Layout::new(page_size, Some(8), Some(8));
    Ok(layout
        .packed_leaf_capacity()
        .expect("fixed-width keys and values use packed leaves") as u64)
}

/// The cost model's I/Os per operation: ⌈log_B(N/B)⌉ (0 while everything fits in one leaf).
pub fn model_ios(records: u64, b: u64) -> u64 {
    let (n, b) = (records as f64, b as f64);
    if n <= b {
        return 0;
    }
    ((n / b).ln() / b.ln() - 1e-9).ceil().max(0.0) as u64
}

/// Method notes for the report.
pub fn notes(cfg: &SuiteConfig) -> Vec<String> {
    let n = cfg.records;
    let m = (n / 10).max(1);
    vec![
        format!(
            "Engine `{ENGINE}` only; one thread. `fillseq`, `fillrandom` and `readrandom` use the run's buffer \
             pool ({}); their `ops/s` include the closing checkpoint of fill phases. `readrandom` runs after a \
             close and reopen.",
            fmt_bytes(cfg.cache_bytes as u64)
        ),
        format!(
            "`load-1pct`, `insert-1pct`, `get-1pct` use a buffer pool of {} = 1% of N × {RECORD_BYTES} bytes \
             (N = {n}). `load-1pct` loads the even keys 0..2N in random order; `insert-1pct` adds M = {m} \
             random odd keys to that tree; `get-1pct` does M gets of random even keys on the same handle. \
             Page I/Os count pages of the page file read or written during the phase, including its closing \
             checkpoint; the OS page cache is not bypassed (use `--direct-io` databases to measure device \
             I/O; the counts are the same).",
            fmt_bytes(small_pool_bytes(cfg) as u64)
        ),
    ]
}

/// The measured page I/Os per operation of the `*-1pct` phases next to the cost model (a Markdown table).
pub fn analysis(cfg: &SuiteConfig, results: &[BenchResult]) -> String {
    let n = cfg.records;
    let Ok(b) = leaf_capacity(cfg.page_size) else {
        return String::new();
    };
    let model = model_ios(n, b);
    let mut table = format!(
        "Cost model: B = {b} records per {} B leaf page, N = {n}: ⌈log_B(N/B)⌉ = ⌈log_{b}({:.0})⌉ = {model}.\n\n\
         | workload | ops | page reads/op | page writes/op | page I/Os/op | height | model ⌈log_B(N/B)⌉ |\n\
         |---|---:|---:|---:|---:|---:|---:|\n",
        cfg.page_size,
        n as f64 / b as f64
    );
    for r in results
        .iter()
        .filter(|r| r.engine == ENGINE && r.workload.ends_with("-1pct"))
    {
        let per = |v: Option<u64>| v.map_or(f64::NAN, |v| v as f64 / r.ops.max(1) as f64);
        let (rd, wr) = (per(r.page_reads), per(r.page_writes));
        table.push_str(&format!(
            "| {} | {} | {rd:.3} | {wr:.3} | {:.3} | {} | {model} |\n",
            r.workload,
            r.ops,
            rd + wr,
            r.height.map_or_else(|| "-".into(), |h| h.to_string()),
        ));
    }
    table
}

/// Runs the suite on the `strata-btree` engine among `engines`.
pub fn run(cfg: &SuiteConfig, engines: &[Box<dyn Engine>]) -> Result<Vec<BenchResult>> {
    if cfg.records < 2 {
        return Err(BenchError::Usage(format!(
            "the {NAME} suite needs at least 2 records"
        )));
    }
    leaf_capacity(cfg.page_size)?;
    let engine = engines
        .iter()
        .find(|e| e.name() == ENGINE)
        .ok_or_else(|| BenchError::Usage(format!("the {NAME} suite needs the {ENGINE} engine")))?;
    let n = cfg.records;
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let base = cfg.data_dir.join(ENGINE);
    let mut out = Vec::new();

    // Throughput with the run's buffer pool.
    let ctx = Ctx::new(NAME, cfg, engine.as_ref());
    let dir = base.join("fillseq");
    let mut keys: Vec<u64> = (0..n).collect();
    out.extend(ctx.fill(&dir, "fillseq", &keys)?);
    remove_dir(&dir)?;
    let dir = base.join("fillrandom");
    keys.shuffle(&mut rng);
    out.extend(ctx.fill(&dir, "fillrandom", &keys)?);
    let db = ctx.open(&dir)?;
    out.extend(ctx.read_random(db.as_ref(), &dir, &mut rng)?);
    db.close()?;
    remove_dir(&dir)?;

    // Page I/Os with a pool of 1% of the data.
    let mut small = Ctx::new(NAME, cfg, engine.as_ref());
    small.opts.cache_bytes = small_pool_bytes(cfg);
    let dir = base.join("cost");
    for k in &mut keys {
        *k *= 2;
    }
    let db = small.create(&dir)?;
    out.extend(small.insert_phase(db.as_ref(), &dir, "load-1pct", &keys)?);
    drop(keys);
    let m = (n / 10).max(1);
    let odd: Vec<u64> = rand::seq::index::sample(&mut rng, n as usize, m as usize)
        .into_iter()
        .map(|i| 2 * i as u64 + 1)
        .collect();
    out.extend(small.insert_phase(db.as_ref(), &dir, "insert-1pct", &odd)?);
    out.extend(
        small.read_phase(db.as_ref(), &dir, "get-1pct", m, &mut rng, |r| {
            2 * r.random_range(0..n)
        })?,
    );
    db.close()?;
    remove_dir(&dir)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_model_matches_hand_computed_values() {
        assert_eq!(leaf_capacity(4096).unwrap(), 254);
        // 2M records: N/B = 7874, log_254(7874) = 1.62.
        assert_eq!(model_ios(2_000_000, 254), 2);
        assert_eq!(model_ios(254, 254), 0);
        assert_eq!(model_ios(255, 254), 1);
        // N/B = B exactly: one level of inner nodes.
        assert_eq!(model_ios(254 * 254, 254), 1);
        assert_eq!(model_ios(254 * 254 + 1, 254), 2);
        assert!(leaf_capacity(3000).is_err());
    }
}
