//! # The `default` suite
//!
//! What `strata bench` runs with no flags: a few minutes on 2 cores, every engine of the build. Per engine,
//! on one database of N = `--records` (default 1 000 000) `u64` keys with 100-byte checkable values:
//!
//! 1. `fillrandom`: the N keys in a seeded random order, one write each, then a checkpoint (1 thread);
//! 2. `readrandom`: `--ops` (default 200 000) uniformly random gets, at each `--threads` count;
//! 3. `ycsb-a`, `ycsb-b`, `ycsb-c`, `ycsb-e`: the YCSB workloads ([`super::ycsb`]), `--ops` operations each,
//!    at each `--threads` count.

use super::SuiteConfig;
use super::common::Ctx;
use super::runner::KeyState;
use super::{dbbench, ycsb};
use crate::driver::Engine;
use crate::error::{BenchError, Result};
use crate::result::BenchResult;
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

pub const NAME: &str = "default";
pub const DESCRIPTION: &str =
    "fillrandom, readrandom, YCSB A, B, C, E; 100-byte values; every engine (the no-flags run)";
pub const DEFAULT_RECORDS: u64 = 1_000_000;
pub const DEFAULT_OPS: u64 = 200_000;
const WORKLOADS: [&str; 4] = ["ycsb-a", "ycsb-b", "ycsb-c", "ycsb-e"];

/// Method notes for the report.
pub fn notes(cfg: &SuiteConfig) -> Vec<String> {
    let ops = cfg.ops.unwrap_or(DEFAULT_OPS);
    let mut notes = vec![format!(
        "`fillrandom` loads the {} keys in a seeded random order (YCSB's hashed insert order) on one thread, \
         one write per record, and ends with a checkpoint that is part of its time; `readrandom` ({ops} \
         uniform gets) and the YCSB workloads then run on that database in the order of the table.",
        cfg.records
    )];
    notes.extend(ycsb::notes(cfg, ops));
    notes
}

/// Runs the suite on every engine.
pub fn run(cfg: &SuiteConfig, engines: &[Box<dyn Engine>]) -> Result<Vec<BenchResult>> {
    let n = cfg.records;
    let ops = cfg.ops.unwrap_or(DEFAULT_OPS);
    let specs: Vec<ycsb::Spec> = WORKLOADS
        .iter()
        .map(|w| ycsb::spec(w).expect("known workload"))
        .collect();
    let mut out = Vec::new();
    for engine in engines {
        let ctx = Ctx::new(NAME, cfg, engine.as_ref());
        let dir = cfg.data_dir.join(engine.name());
        let mut order: Vec<u64> = (0..n).collect();
        order.shuffle(&mut ChaCha8Rng::seed_from_u64(cfg.seed));
        let (db, rows) = dbbench::fill(&ctx, &dir, "fillrandom", &order)?;
        out.extend(rows);
        drop(order);
        let capacity = n + ycsb::insert_budget(&specs, ops, cfg.threads.len());
        let keys = KeyState::new(n, capacity, true);
        for &t in &cfg.threads {
            out.extend(dbbench::read_random(
                &ctx,
                db.as_ref(),
                &dir,
                &keys,
                t,
                ops,
            )?);
        }
        for spec in &specs {
            for &t in &cfg.threads {
                out.extend(ycsb::run_workload(
                    &ctx,
                    db.as_ref(),
                    &dir,
                    &keys,
                    *spec,
                    t,
                    ops,
                )?);
            }
        }
        db.close()?;
        std::fs::remove_dir_all(&dir).map_err(|e| BenchError::io(&dir, e))?;
    }
    Ok(out)
}
