//! Parameter sweeps of the ElimDA-style index (`elimda`), each setting on a fresh eADR region with the
//! suite's preload of N keys (not reported), then timed phases of the main protocol:
//!
//! * **Collecting-log size** (Exp 11, workload `log-<lines>`, op `insert`): the insert phase (N/2 new keys)
//!   with every log exactly [`LOG_LINES`] 64 B lines ([`HashConfig::fixed_log`]), one log per thread, at
//!   every thread count of the sweep. The default log instead grows with the table (16 records per bucket
//!   in all), which from about 100 K keys on is larger than all of these; the main `insert` rows are that
//!   default.
//! * **D-bucket size** (Exp 12, workloads `dbucket-<bytes>-insert` and `dbucket-<bytes>-pos-search`): the
//!   insert and positive-search phases at one thread with D-buckets written back at [`DBUCKET_SLOTS`]
//!   staged slots ([`HashConfig::dbucket_slots`]): 2, 4 and 8 slots are the seed's 32, 64 and 128 B
//!   D-buckets (16 B per entry); 15 slots fill one whole 256 B XPLine chunk (16 B header + 15 entries), the
//!   seed's 256 B point and our default. The seed's 512 B point (a D-bucket of two XPLines) is not
//!   measured: a D-bucket stages into one tail chunk by the region's format (see the report).
//! * **P-bucket size** (Exp 12, workloads `pbucket-<KiB>k-insert` and `pbucket-<KiB>k-pos-search`): the
//!   same two phases at one thread with P-buckets of [`PBUCKET_BYTES`] ([`HashConfig::pbucket_bytes`],
//!   recorded in the region): 4, 8, 16, 32 and 64 home chunks of 15 slots (the seed's five points; the
//!   home slots past 240 of the 8 and 16 KiB P-buckets are mirrored in each DRAM bucket's extension).
//!
//! Each row carries the phase's D-bucket flushes (whole-XPLine chunk writes) in `page_writes` and those of
//! them forced early by log space in `io_writes`.

use super::threads::{elimda_with, preload, timed_phase};
use super::{ELIMDA, Keys, Shape, SuiteConfig, exhausted, region_bytes, shaped_row};
use crate::error::Result;
use crate::result::BenchResult;
use strata::lab::index::hash::HashConfig;

/// Log sizes of Exp 11, in 64 B lines (the seed's; 8,192 = 512 KiB is its best and its default).
pub const LOG_LINES: [u64; 5] = [1024, 2048, 4096, 8192, 16384];
/// D-bucket sizes of Exp 12: staged slots, and the seed's D-bucket bytes they stand for.
pub const DBUCKET_SLOTS: [(usize, u64); 4] = [(2, 32), (4, 64), (8, 128), (15, 256)];

/// P-bucket sizes of Exp 12, in bytes (the seed's 1, 2, 4, 8 and 16 KiB; 4 KiB is the default).
pub const PBUCKET_BYTES: [u64; 5] = [1024, 2048, 4096, 8192, 16384];

/// Workload of the Exp 12 row of phase `phase` (`insert`, `pos-search`) with P-buckets of `bytes`.
pub fn pbucket_workload(bytes: u64, phase: &str) -> String {
    format!("pbucket-{}k-{phase}", bytes / 1024)
}

/// Workload of the Exp 11 row of a log of `lines` lines.
pub fn log_workload(lines: u64) -> String {
    format!("log-{lines}")
}

/// Workload of the Exp 12 row of phase `phase` (`insert`, `pos-search`) with a D-bucket of `bytes`.
pub fn dbucket_workload(bytes: u64, phase: &str) -> String {
    format!("dbucket-{bytes}-{phase}")
}

/// Preloads a fresh `elimda` made with `config`, then runs `phases` (main-phase workload, op) with
/// `threads` threads; each row is labelled `label(workload)`.
fn measure(
    cfg: &SuiteConfig,
    k: &Keys,
    config: HashConfig,
    threads: usize,
    phases: &[(&str, &str)],
    label: impl Fn(&str) -> String,
) -> Result<Vec<BenchResult>> {
    let run = || -> Result<Vec<BenchResult>> {
        let idx = elimda_with(cfg, config)?;
        preload(&idx, &k.preload, threads)?;
        let mut out = Vec::new();
        for &(workload, op) in phases {
            let before = idx.stats();
            let t = timed_phase(ELIMDA, &idx, k, workload, threads)?;
            let after = idx.stats();
            let name = label(workload);
            let shape = Shape {
                engine: ELIMDA,
                workload: &name,
                op,
                threads,
            };
            let mut r = shaped_row(
                cfg,
                &shape,
                &t.lat,
                t.secs,
                super::threads::Concurrent::state(&idx),
            );
            r.page_writes = Some(after.flushes - before.flushes);
            r.io_writes = Some(after.forced_flushes - before.forced_flushes);
            out.push(r);
        }
        Ok(out)
    };
    run().map_err(|e| exhausted(ELIMDA, region_bytes(cfg), e))
}

/// Exp 11 rows: every log size of [`LOG_LINES`] at every thread count of `sweep`.
pub(super) fn log_rows(cfg: &SuiteConfig, k: &Keys, sweep: &[usize]) -> Result<Vec<BenchResult>> {
    let mut out = Vec::new();
    for lines in LOG_LINES {
        for &threads in sweep {
            let config = HashConfig {
                logs: threads as u64,
                log_lines: lines,
                fixed_log: true,
                ..HashConfig::default()
            };
            out.extend(measure(
                cfg,
                k,
                config,
                threads,
                &[("insert", "insert")],
                |_| log_workload(lines),
            )?);
        }
    }
    Ok(out)
}

/// Exp 12 rows: insert and positive search at one thread for every P-bucket size of [`PBUCKET_BYTES`].
pub(super) fn pbucket_rows(cfg: &SuiteConfig, k: &Keys) -> Result<Vec<BenchResult>> {
    let settings = PBUCKET_BYTES.map(|bytes| {
        let config = HashConfig {
            pbucket_bytes: bytes,
            ..HashConfig::default()
        };
        (config, bytes)
    });
    insert_and_search_rows(cfg, k, &settings, pbucket_workload)
}

/// Exp 12 rows: insert and positive search at one thread for every D-bucket size of [`DBUCKET_SLOTS`].
pub(super) fn dbucket_rows(cfg: &SuiteConfig, k: &Keys) -> Result<Vec<BenchResult>> {
    let settings = DBUCKET_SLOTS.map(|(slots, bytes)| {
        let config = HashConfig {
            dbucket_slots: slots,
            ..HashConfig::default()
        };
        (config, bytes)
    });
    insert_and_search_rows(cfg, k, &settings, dbucket_workload)
}

/// The insert and positive-search phases at one thread for each `(config, bytes)` of `settings`, each row
/// labelled `workload(bytes, phase)`.
fn insert_and_search_rows(
    cfg: &SuiteConfig,
    k: &Keys,
    settings: &[(HashConfig, u64)],
    workload: fn(u64, &str) -> String,
) -> Result<Vec<BenchResult>> {
    let phases = [("insert", "insert"), ("pos-search", "read")];
    let mut out = Vec::new();
    for &(config, bytes) in settings {
        out.extend(measure(cfg, k, config, 1, &phases, |w| workload(bytes, w))?);
    }
    Ok(out)
}
