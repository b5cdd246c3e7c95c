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
use super::common::{Ctx, remove_dir};
use super::runner::KeyState;
use super::{dbbench, ycsb};
use crate::driver::Engine;
use crate::error::Result;
use crate::result::BenchResult;

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
        let (db, rows) = ctx.fill_open(&dir, "fillrandom", &ctx.random_order())?;
        out.extend(rows);
        let keys = KeyState::new(n, n + ycsb::insert_budget(&specs, ops, cfg.threads.len()));
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
        out.extend(ycsb::run_sweep(
            &ctx,
            db.as_ref(),
            &dir,
            &keys,
            &specs,
            ops,
        )?);
        db.close()?;
        remove_dir(&dir)?;
    }
    Ok(out)
}
