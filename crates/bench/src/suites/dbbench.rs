//! # db_bench phases and the `dbbench` suite
//!
//! LevelDB/RocksDB `db_bench`-style phases over `u64` keys 0..N and checkable values (default 100 bytes):
//!
//! * `fillseq`: keys in ascending order into a fresh database, one write each, then a checkpoint (1 thread);
//! * `fillrandom`: the same keys in a seeded random order into another fresh database, then a checkpoint
//!   (1 thread); the following phases run on this database;
//! * `readrandom`: gets of uniformly random keys (op `read`);
//! * `readseq`: the whole key space read in order by range scans, split into one contiguous slice per thread
//!   (op `scan`, one op per record);
//! * `seekrandom`: a seek to a random key followed by `--nexts` nexts (default 10; op `scan`, one op per seek);
//! * `readwhilewriting`: the reader threads do random gets while one extra thread updates random keys until
//!   the readers finish (ops `read` and `update`);
//! * `deleterandom`: deletes of distinct random keys, N/10 of them (1 thread, op `delete`); afterwards every
//!   deleted key must be gone.
//!
//! `--ops` sets the operations of readrandom, seekrandom and readwhilewriting (default N); every phase but
//! the fills and deleterandom runs at each `--threads` count. An engine without key order (`strata-hash`,
//! run only when `--engines` names it) skips readseq and seekrandom.

use super::SuiteConfig;
use super::common::{Ctx, remove_dir, verify};
use super::runner::KeyState;
use crate::driver::{Driver, Engine};
use crate::error::Result;
use crate::result::BenchResult;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

pub const NAME: &str = "dbbench";
pub const DESCRIPTION: &str = "db_bench phases: fillseq, fillrandom, readrandom, readseq, seekrandom, readwhilewriting, deleterandom";
pub const DEFAULT_RECORDS: u64 = 1_000_000;
/// Nexts after each seek of `seekrandom` when `--nexts` is not given.
pub const DEFAULT_NEXTS: u64 = 10;

/// Method notes for the report.
pub fn notes(cfg: &SuiteConfig) -> Vec<String> {
    vec![
        format!(
            "db_bench phases over {} keys with {}-byte values; fills are single-threaded and include a final \
             checkpoint (flush); readrandom, readseq, seekrandom ({} nexts) and readwhilewriting run at \
             each thread count on the fillrandom database; deleterandom removes N/10 distinct random keys.",
            cfg.records,
            cfg.codec.size(),
            cfg.nexts
        ),
        "readwhilewriting: `threads` readers plus one writer thread that updates random keys until the readers \
         are done; its `update` row counts the writer's operations over the same wall time."
            .into(),
    ]
}

/// `ops` random gets on `threads` threads, every one checked.
pub(crate) fn read_random(
    ctx: &Ctx<'_>,
    db: &dyn Driver,
    dir: &Path,
    keys: &KeyState,
    threads: u32,
    ops: u64,
) -> Result<Vec<BenchResult>> {
    let checker = ctx.checker(keys, 0);
    let n = keys.loaded();
    ctx.parallel(db, dir, "readrandom", threads, ops, |w, share| {
        for _ in 0..share {
            let k = w.rng.random_range(0..n);
            checker.read(w, db, "read", k)?;
        }
        Ok(())
    })
}

/// The keys `0..records` read in order by range scans as phase `workload`, split into one contiguous slice
/// per thread (op `scan`, one op per record); every key must come back once, in order, with its value, and
/// nothing may follow the last key.
pub(crate) fn read_seq(
    ctx: &Ctx<'_>,
    db: &dyn Driver,
    dir: &Path,
    workload: &str,
    records: u64,
    threads: u32,
) -> Result<Vec<BenchResult>> {
    let n = records;
    let codec = ctx.codec();
    let engine = ctx.engine.name();
    ctx.parallel(db, dir, workload, threads, n, |w, _| {
        let t = u64::from(threads);
        let (lo, hi) = (n * u64::from(w.id) / t, n * (u64::from(w.id) + 1) / t);
        if lo == hi {
            return Ok(());
        }
        // The last slice runs to the end of the key space, so a key beyond `records` is caught too.
        let end = if hi == n { u64::MAX } else { hi - 1 };
        let mut expect = lo;
        let mut last = std::time::Instant::now();
        db.scan(lo, end, u64::MAX, false, &mut |k, v| {
            w.record("scan", last.elapsed());
            verify(k == expect, || {
                format!("{engine}: {workload} returned key {k} where {expect} was due")
            })?;
            codec.check(k, 1, v)?;
            expect += 1;
            last = std::time::Instant::now();
            Ok(())
        })?;
        verify(expect == hi, || {
            format!(
                "{engine}: {workload} of [{lo}, {hi}) returned {} records",
                expect - lo
            )
        })
    })
}

/// `ops` seeks to uniformly random keys of `0..records` as phase `workload`, each followed by the context's
/// `nexts` nexts (op `scan`, one op per seek), on `threads` threads; each must return the keys from its start
/// on, in order, with their values, up to `nexts + 1` of them or the end of the keys.
pub(crate) fn seek_random(
    ctx: &Ctx<'_>,
    db: &dyn Driver,
    dir: &Path,
    workload: &str,
    records: u64,
    threads: u32,
    ops: u64,
) -> Result<Vec<BenchResult>> {
    let n = records;
    let codec = ctx.codec();
    let engine = ctx.engine.name();
    let nexts = ctx.cfg.nexts;
    ctx.parallel(db, dir, workload, threads, ops, |w, share| {
        let mut got = Vec::with_capacity(nexts.min(1 << 16) as usize + 1);
        for _ in 0..share {
            let start = w.rng.random_range(0..n);
            got.clear();
            w.op("scan", |w| {
                w.buf.clear();
                db.scan(start, u64::MAX, nexts + 1, false, &mut |k, v| {
                    got.push(k);
                    w.buf.extend_from_slice(v);
                    Ok(())
                })
            })?;
            let want = (nexts + 1).min(n - start);
            verify(got.len() as u64 == want, || {
                format!(
                    "{engine}: seek to {start} + {nexts} nexts returned {} records",
                    got.len()
                )
            })?;
            let size = codec.size();
            for (i, &k) in got.iter().enumerate() {
                verify(k == start + i as u64, || {
                    format!("{engine}: seek to {start}: record {i} has key {k}")
                })?;
                codec.check(k, 1, &w.buf[i * size..(i + 1) * size])?;
            }
        }
        Ok(())
    })
}

fn read_while_writing(
    ctx: &Ctx<'_>,
    db: &dyn Driver,
    dir: &Path,
    keys: &KeyState,
    threads: u32,
    ops: u64,
) -> Result<Vec<BenchResult>> {
    let checker = ctx.checker(keys, 1);
    let n = keys.loaded();
    let readers_left = std::sync::atomic::AtomicU32::new(threads);
    let stop = AtomicBool::new(false);
    let writing = AtomicBool::new(false);
    // Thread `threads` (the extra one) is the writer; the readers share `ops`.
    ctx.parallel_extra(db, dir, "readwhilewriting", threads, 1, ops, |w, share| {
        if w.id == threads {
            while !stop.load(Ordering::Acquire) {
                let k = w.rng.random_range(0..n);
                let codec = checker.codec;
                let r = w.op("update", |w| keys.update(db, codec, k, &mut w.buf));
                writing.store(true, Ordering::Release);
                r?;
            }
            return Ok(());
        }
        // Readers start once the writer has written, so that every read runs while writing.
        while !writing.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        let result = (|| {
            for _ in 0..share {
                let k = w.rng.random_range(0..n);
                checker.read(w, db, "read", k)?;
            }
            Ok(())
        })();
        if readers_left.fetch_sub(1, Ordering::AcqRel) == 1 {
            stop.store(true, Ordering::Release);
        }
        result
    })
}

fn delete_random(
    ctx: &Ctx<'_>,
    db: &dyn Driver,
    dir: &Path,
    keys: &KeyState,
) -> Result<Vec<BenchResult>> {
    let n = keys.loaded();
    let count = (n / 10).max(1);
    let mut rng = ChaCha8Rng::seed_from_u64(ctx.cfg.seed ^ 0xde1e7e);
    let victims: Vec<u64> = rand::seq::index::sample(&mut rng, n as usize, count as usize)
        .into_iter()
        .map(|i| i as u64)
        .collect();
    let rows = ctx.parallel(db, dir, "deleterandom", 1, count, |w, _| {
        for &k in &victims {
            w.op("delete", |_| db.delete(k))?;
            keys.forget(k);
        }
        Ok(())
    })?;
    let engine = ctx.engine.name();
    let mut buf = Vec::new();
    for &k in victims.iter().take(10_000) {
        verify(!db.get(k, &mut buf)?, || {
            format!("{engine}: key {k} still found after it was deleted")
        })?;
    }
    Ok(rows)
}

/// Runs the `dbbench` suite on every engine.
pub fn run(cfg: &SuiteConfig, engines: &[Box<dyn Engine>]) -> Result<Vec<BenchResult>> {
    let n = cfg.records;
    let ops = cfg.ops.unwrap_or(n);
    let mut out = Vec::new();
    for engine in engines {
        let ctx = Ctx::new(NAME, cfg, engine.as_ref());
        let base = cfg.data_dir.join(engine.name());
        let dir = base.join("fillseq");
        out.extend(ctx.fill(&dir, "fillseq", &(0..n).collect::<Vec<u64>>())?);
        remove_dir(&dir)?;

        let dir = base.join("fillrandom");
        let (db, rows) = ctx.fill_open(&dir, "fillrandom", &ctx.random_order())?;
        out.extend(rows);
        let keys = KeyState::new(n, n);
        for &t in &cfg.threads {
            out.extend(read_random(&ctx, db.as_ref(), &dir, &keys, t, ops)?);
        }
        // readseq and seekrandom need key order; an engine without it (the hash family) skips them.
        let ordered_threads: &[u32] = if engine.ordered() { &cfg.threads } else { &[] };
        for &t in ordered_threads {
            out.extend(read_seq(&ctx, db.as_ref(), &dir, "readseq", n, t)?);
        }
        for &t in ordered_threads {
            out.extend(seek_random(
                &ctx,
                db.as_ref(),
                &dir,
                "seekrandom",
                keys.loaded(),
                t,
                ops,
            )?);
        }
        for &t in &cfg.threads {
            out.extend(read_while_writing(&ctx, db.as_ref(), &dir, &keys, t, ops)?);
        }
        out.extend(delete_random(&ctx, db.as_ref(), &dir, &keys)?);
        db.close()?;
        remove_dir(&base)?;
    }
    Ok(out)
}
