//! Pieces every suite shares: the per-engine context that labels phases, answer checks, and the fill and
//! random-read phases (value = key, every read verified).

use super::SuiteConfig;
use super::runner::{Checker, KeyState};
use crate::driver::{Driver, Engine, EngineOptions};
use crate::error::{BenchError, Result};
use crate::measure::{Phase, PhaseLabels};
use crate::result::BenchResult;
use crate::values::ValueCodec;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::Path;

/// Removes a database directory of the run.
pub(crate) fn remove_dir(dir: &Path) -> Result<()> {
    std::fs::remove_dir_all(dir).map_err(|e| BenchError::io(dir, e))
}

/// The workload groups a suite runs: those named in `list` (comma-separated, the value of the environment
/// variable `var`, in the order given, each once), or all of `all` when it is unset or blank; an unknown
/// name is a usage error.
pub(crate) fn workload_groups(
    var: &str,
    all: &[&'static str],
    list: Option<&str>,
) -> Result<Vec<&'static str>> {
    let Some(list) = list.filter(|l| !l.trim().is_empty()) else {
        return Ok(all.to_vec());
    };
    let mut out = Vec::new();
    for name in list.split(',').map(str::trim) {
        let Some(&g) = all.iter().find(|&&g| g == name) else {
            return Err(BenchError::Usage(format!(
                "{var}: unknown group {name:?} (available: {})",
                all.join(", ")
            )));
        };
        if !out.contains(&g) {
            out.push(g);
        }
    }
    Ok(out)
}

/// Fails the run with [`BenchError::Verify`] unless `ok`.
pub(crate) fn verify(ok: bool, msg: impl FnOnce() -> String) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(BenchError::Verify(msg()))
    }
}

/// One engine inside one suite run, with the engine options its phases use.
pub(crate) struct Ctx<'a> {
    pub suite: &'static str,
    pub cfg: &'a SuiteConfig,
    pub engine: &'a dyn Engine,
    pub opts: EngineOptions,
    /// Records of the workloads run through this context (the rows' `records`): `--records` unless a suite
    /// runs some workloads at another size.
    pub records: u64,
}

impl<'a> Ctx<'a> {
    /// A context with the suite's cache budget, durability and page size.
    pub fn new(suite: &'static str, cfg: &'a SuiteConfig, engine: &'a dyn Engine) -> Self {
        Ctx {
            suite,
            cfg,
            engine,
            opts: cfg.engine_options(),
            records: cfg.records,
        }
    }

    /// Keys `0..records` in the run's seeded random order (Fisher–Yates, seeded by `--seed`).
    pub fn random_order(&self) -> Vec<u64> {
        let mut order: Vec<u64> = (0..self.cfg.records).collect();
        order.shuffle(&mut ChaCha8Rng::seed_from_u64(self.cfg.seed));
        order
    }

    /// A read checker over `keys` for this engine and codec, with `writers` concurrent writing threads.
    pub fn checker<'k>(&self, keys: &'k KeyState, writers: u32) -> Checker<'k> {
        Checker {
            keys,
            engine: self.engine.name(),
            codec: self.codec(),
            writers,
        }
    }

    /// The run's value codec.
    pub fn codec(&self) -> ValueCodec {
        self.cfg.codec
    }

    fn labels(&self, workload: &str, threads: u32) -> PhaseLabels {
        self.labels_as(self.engine.name(), workload, threads)
    }

    /// The labels of a phase of this context run by the driver named `engine` (a static structure that is
    /// not an [`Engine`]).
    pub fn labels_as(&self, engine: &str, workload: &str, threads: u32) -> PhaseLabels {
        PhaseLabels {
            suite: self.suite.to_string(),
            engine: engine.to_string(),
            workload: workload.to_string(),
            records: self.records,
            threads,
            durability: self.opts.durability.name().to_string(),
            cache_bytes: self.opts.cache_bytes as u64,
            page_size: self.opts.page_size,
        }
    }

    /// Starts a timed phase of `ops` operations on `db`.
    pub fn phase<'d>(&self, db: &'d dyn Driver, workload: &str, ops: u64) -> Phase<'d> {
        self.phase_threads(db, workload, ops, 1)
    }

    /// Starts a timed phase of `ops` operations on `db` run by `threads` threads.
    pub fn phase_threads<'d>(
        &self,
        db: &'d dyn Driver,
        workload: &str,
        ops: u64,
        threads: u32,
    ) -> Phase<'d> {
        Phase::begin(db, self.labels(workload, threads), ops, self.cfg.progress)
    }

    /// Creates a database in `dir` with this context's options.
    pub fn create(&self, dir: &Path) -> Result<Box<dyn Driver>> {
        self.engine.create(dir, &self.opts)
    }

    /// Opens the database in `dir` with this context's options.
    pub fn open(&self, dir: &Path) -> Result<Box<dyn Driver>> {
        self.engine.open(dir, &self.opts)
    }

    /// Inserts `keys` (version 1 of each) into `db`, one write per record, then checkpoints; the checkpoint is
    /// part of the phase's time and I/O.
    pub fn insert_phase(
        &self,
        db: &dyn Driver,
        dir: &Path,
        workload: &str,
        keys: &[u64],
    ) -> Result<Vec<BenchResult>> {
        let mut phase = self.phase(db, workload, keys.len() as u64);
        let op = phase.op("insert");
        let codec = self.codec();
        let mut value = Vec::with_capacity(codec.size());
        for &k in keys {
            codec.encode(k, 1, &mut value);
            phase.time(op, || db.put(k, &value))?;
        }
        db.checkpoint()?;
        phase.finish(dir)
    }

    /// [`insert_phase`](Self::insert_phase) into a fresh database in `dir`, which is closed afterwards.
    pub fn fill(&self, dir: &Path, workload: &str, keys: &[u64]) -> Result<Vec<BenchResult>> {
        let (db, rows) = self.fill_open(dir, workload, keys)?;
        db.close()?;
        Ok(rows)
    }

    /// [`insert_phase`](Self::insert_phase) into a fresh database in `dir`, which stays open.
    pub fn fill_open(
        &self,
        dir: &Path,
        workload: &str,
        keys: &[u64],
    ) -> Result<(Box<dyn Driver>, Vec<BenchResult>)> {
        let db = self.create(dir)?;
        let rows = self.insert_phase(db.as_ref(), dir, workload, keys)?;
        Ok((db, rows))
    }

    /// `ops` gets of keys drawn by `pick`; each must find version 1 of its key.
    pub fn read_phase(
        &self,
        db: &dyn Driver,
        dir: &Path,
        workload: &str,
        ops: u64,
        rng: &mut ChaCha8Rng,
        pick: impl Fn(&mut ChaCha8Rng) -> u64,
    ) -> Result<Vec<BenchResult>> {
        let name = self.engine.name();
        let mut phase = self.phase(db, workload, ops);
        let op = phase.op("read");
        let codec = self.codec();
        let mut value = Vec::with_capacity(codec.size());
        for _ in 0..ops {
            let k = pick(rng);
            let found = phase.time(op, || db.get(k, &mut value))?;
            verify(found, || {
                format!("{name}: get({k}) found nothing, but it was inserted")
            })?;
            codec
                .check(k, 1, &value)
                .map_err(|e| BenchError::Verify(format!("{name}: get({k}): {e}")))?;
        }
        phase.finish(dir)
    }

    /// `records` gets of uniformly random keys of 0..records.
    pub fn read_random(
        &self,
        db: &dyn Driver,
        dir: &Path,
        rng: &mut ChaCha8Rng,
    ) -> Result<Vec<BenchResult>> {
        let n = self.cfg.records;
        self.read_phase(db, dir, "readrandom", n, rng, |r| r.random_range(0..n))
    }
}
