//! Opening a database: which WAL file is live, whether the index's checkpoint and the WAL agree, and replay.
//!
//! ## The protocol this relies on (the write side is in `mod.rs`)
//! * A database directory holds at least one WAL file from its creation on (the first is created before the
//!   manifest). Each WAL file's header records its number and its **base**: the checkpoint seqno its records
//!   follow.
//! * A checkpoint appends a checkpoint intent to the live WAL `N` and syncs it; the index checkpoints
//!   everything up to seqno `S`; WAL `N + 1` is created with base `S` and synced; the directory is synced;
//!   WAL `N` is removed. At rest one WAL exists (two for a moment), and the live one is the highest-numbered
//!   file with a readable header.
//! * A checkpoint in the background does the same steps in another order: intent in WAL `N`, the index seals
//!   `S` in memory, WAL `N + 1` (base `S`) becomes live, and only after the index made `S` durable is WAL `N`
//!   removed. Until then the index's checkpoint `C` may be below `B = S`, and WAL `N` (base ≤ `C`) holds the
//!   writes in between: opening replays the chain of older WALs back to the first whose base is ≤ `C`, each
//!   of which must end exactly where the next one begins (no torn tail in the middle of the chain).
//! * Hence, once that chain is taken into account, the index's checkpoint seqno `C` is never below the base
//!   `B` of the oldest WAL it needs. **`C < B` with no older WAL to cover it is a rollback**:
//!   the index lost a checkpoint it had (e.g. its newest meta slot was damaged and it fell back to the older
//!   one), so acknowledged writes `C+1..=B` are gone. Opening then fails with `Error::Corruption` instead of
//!   serving the older state; `strata repair` accepts the loss explicitly.
//!
//! ## What opening refuses (`Error::Corruption`, naming the file and offset) and what it accepts
//! * No WAL file at all, a WAL whose header is unreadable (unless it is a newer WAL whose creation a crash
//!   interrupted: no record in it and an older readable WAL beside it), a header whose number is not the file
//!   name's, a truncated WAL, a damaged record with anything after it, a record whose seqno skips: refused.
//! * A torn tail (the last records never became durable before a power loss): accepted, reported in
//!   [`RecoveryInfo::torn_tail_bytes`]; what survives is a prefix of the acknowledged writes, as the
//!   durability levels promise.
//! * A WAL of that chain that does not end with its checkpoint intent, followed by one created before it was
//!   durable ([`LogHeader::follows_unsynced`]): a power loss came before the rotation's syncs completed, so
//!   the later WALs hold nothing that was synced (see `background`). They are dropped, reported in
//!   [`RecoveryInfo::unsynced_wals_dropped`], and the older WAL is the live one (its torn tail accepted).
//!
//! Cost: one header read per WAL file, one sequential read of each WAL replayed (see `storage::log`).

// A decoder of bytes read from disk: every index and slice is checked.
#![deny(clippy::indexing_slicing)]

use super::wal::{self, WalRecord};
use super::{RecoveryInfo, wal_path};
use crate::error::{Damage, Error, Result};
use crate::index::OrderedIndex;
use crate::storage::log::{LOG_DATA_START, LOG_GROWTH};
use crate::storage::vfs::read_exact_at;
use crate::storage::{
    IoStats, LogHeader, OpenOptions, RecoverMode, Vfs, read_log_header, recover_log,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// How a database is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OpenMode {
    /// Recover, checkpoint what was replayed, start a new WAL.
    ReadWrite,
    /// Recover in memory only; nothing is written.
    ReadOnly,
    /// Like `ReadWrite`, but damage is dropped and reported instead of refused.
    Repair,
}

/// What recovery found.
pub(crate) struct Recovered {
    /// The last sequence number the index now holds.
    pub last_seqno: u64,
    pub info: RecoveryInfo,
    /// Every WAL file of the directory (read-write modes replace them with a new one).
    pub wal_numbers: Vec<u64>,
    /// The live WAL (what a read-only handle's check verifies again).
    pub live_wal: Option<PathBuf>,
    /// The live WAL ends with a checkpoint intent: that checkpoint may have been torn by a crash, so a damaged
    /// spare checkpoint slot of the index is explained.
    pub checkpoint_interrupted: bool,
}

/// Numbers of the WAL files in `dir`, ascending.
pub(crate) fn wal_numbers(vfs: &dyn Vfs, dir: &Path) -> Result<Vec<u64>> {
    let mut v: Vec<u64> = vfs
        .list_dir(dir)?
        .iter()
        .filter_map(|n| crate::files::parse_wal_name(n))
        .collect();
    v.sort_unstable();
    Ok(v)
}

/// True if the log at `path` holds no record: at most one growth step long and zeros after its header.
fn holds_no_record(vfs: &Arc<dyn Vfs>, path: &Path) -> Result<bool> {
    let file = vfs.open(path, OpenOptions::READ_ONLY)?;
    let len = file.len()?;
    if len > LOG_GROWTH {
        return Ok(false);
    }
    let mut bytes = vec![0u8; len as usize];
    let n = read_exact_at(&*file, &mut bytes, 0)?;
    bytes.truncate(n);
    Ok(bytes.iter().skip(LOG_DATA_START as usize).all(|&b| b == 0))
}

/// Finds the live WAL, checks it against the index's checkpoint and replays it into `index`.
pub(crate) fn recover(
    vfs: &Arc<dyn Vfs>,
    dir: &Path,
    stats: &Arc<IoStats>,
    index: &dyn OrderedIndex,
    mode: OpenMode,
) -> Result<Recovered> {
    let salvage = mode == OpenMode::Repair;
    let numbers = wal_numbers(vfs.as_ref(), dir)?;
    let mut info = RecoveryInfo::default();
    let c = index.checkpointed_seqno();
    if c == u64::MAX {
        return Err(Error::corruption(
            dir,
            0,
            "the index's checkpoint claims sequence number 2^64 - 1, which no database reaches",
        ));
    }
    let done = |info: RecoveryInfo, live_wal, last_seqno, checkpoint_interrupted| Recovered {
        last_seqno,
        info,
        wal_numbers: numbers.clone(),
        live_wal,
        checkpoint_interrupted,
    };

    // The live WAL: the highest-numbered file with a readable header.
    let mut live: Option<(PathBuf, LogHeader)> = None;
    let mut live_at = 0;
    for (i, &n) in numbers.iter().enumerate().rev() {
        let path = wal_path(dir, n);
        match read_log_header(vfs, &path, stats) {
            Ok(h) if h.number == n => {
                live = Some((path, h));
                live_at = i;
                break;
            }
            Ok(h) => {
                let e = Error::corruption(
                    &path,
                    0,
                    format!(
                        "WAL header says it is log {}, but the file name says {n}",
                        h.number
                    ),
                );
                if !salvage {
                    return Err(e);
                }
                info.repairs
                    .push(format!("ignored {}: {e}", path.display()));
            }
            Err(e @ Error::Corruption { .. }) => {
                // A newer WAL whose creation a crash interrupted: nothing was ever written to it.
                if i > 0 && holds_no_record(vfs, &path)? {
                    continue;
                }
                if !salvage {
                    return Err(e);
                }
                info.repairs.push(format!(
                    "dropped the unreadable WAL {}: {e}",
                    path.display()
                ));
            }
            Err(e) => return Err(e),
        }
    }
    let Some((path, header)) = live else {
        if salvage {
            info.repairs.push(format!(
                "no readable write-ahead log: started a new one; writes after checkpoint seqno {c}, if any, are \
                 lost"
            ));
            return Ok(done(info, None, c, false));
        }
        return Err(Error::corruption(
            dir,
            0,
            format!(
                "no write-ahead log (wal-NNNNNNNNNNNNNNNN.log) in the database directory: every database has \
                 one, so it was deleted or is unreadable, and writes after checkpoint seqno {c} may be lost \
                 (`strata repair` starts a new log and accepts the loss)"
            ),
        ));
    };

    // A checkpoint that was finishing in the background when the process stopped: the WALs before the live
    // one still hold the writes after the index's checkpoint. Replay from the newest of them whose base the
    // checkpoint covers.
    let mut chain: Vec<(PathBuf, LogHeader)> = Vec::new();
    let mut base = header.base_seqno;
    if c < base {
        for &n in numbers.iter().take(live_at).rev() {
            let older = wal_path(dir, n);
            let Ok(h) = read_log_header(vfs, &older, stats) else {
                break;
            };
            if h.number != n || h.base_seqno > base {
                break;
            }
            base = h.base_seqno;
            chain.push((older, h));
            if base <= c {
                break;
            }
        }
        if base > c {
            chain.clear();
            base = header.base_seqno;
        }
    }
    chain.reverse();
    if c < base {
        let lost = format!("writes {}..={base}", c + 1);
        if salvage {
            info.repairs.push(format!(
                "the index's checkpoint holds writes up to seqno {c}, but {} continues after seqno {base}: \
                 {lost} are lost; dropped that log",
                path.display()
            ));
            return Ok(done(info, None, c, false));
        }
        return Err(match index.spare_checkpoint_damage() {
            Some(d) => Damage {
                detail: format!(
                    "{}; the index fell back to its older checkpoint (writes up to seqno {c}), but the \
                     write-ahead log {} continues after seqno {base}: {lost} would be lost (`strata repair` \
                     opens the older state and accepts the loss)",
                    d.detail,
                    path.display()
                ),
                ..d
            }
            .into_error(),
            None => Error::corruption(
                &path,
                0,
                format!(
                    "the write-ahead log continues after seqno {base}, but the index's checkpoint holds \
                     writes only up to seqno {c}: {lost} are missing (the index's files were replaced or \
                     rolled back)"
                ),
            ),
        });
    }

    // Replay the records after the checkpoint: the older WALs of the chain (each must reach the next one's
    // base: its records were synced before that WAL was created), then the live one.
    let mut last = c;
    let mut interrupted = false;
    let mode = if salvage {
        RecoverMode::Salvage
    } else {
        RecoverMode::Strict
    };
    for (k, (older, _)) in chain.iter().enumerate() {
        let (torn, ended_with_intent) =
            replay_wal(older, &mut last, &mut info, mode, index, vfs, stats)?;
        let next = chain.get(k + 1).map_or(&header, |(_, h)| h);
        let next_base = next.base_seqno;
        // The next WAL was created before this one was durable, and this one's checkpoint intent (its last
        // record) did not survive: the rotation's syncs never completed, so no later WAL holds a synced
        // record — whatever the OS wrote back of them is dropped, and this WAL is the live one.
        if next.follows_unsynced && !ended_with_intent {
            info.torn_tail_bytes = torn;
            info.unsynced_wals_dropped = (chain.len() - k) as u64;
            return Ok(done(info, Some(older.clone()), last, interrupted));
        }
        if torn > 0 || last < next_base {
            let problem = format!(
                "the write-ahead log ends at seqno {last}, but the next one continues after seqno \
                 {next_base}: records are missing"
            );
            if !salvage {
                return Err(Error::corruption(older, 0, problem));
            }
            info.repairs.push(format!(
                "{}: {problem}; the logs after it are dropped",
                older.display()
            ));
            return Ok(done(info, None, last, false));
        }
        // Its checkpoint intent announced the checkpoint that was still being written.
        interrupted |= ended_with_intent;
    }
    let (torn, ended) = replay_wal(&path, &mut last, &mut info, mode, index, vfs, stats)?;
    let intent = ended || interrupted;
    if torn > 0 {
        info.torn_tail_bytes = torn;
    }
    Ok(done(info, Some(path), last, intent))
}

/// Replays the records of the WAL at `path` after seqno `*last` into `index`, advancing `*last`. Returns the
/// torn-tail bytes dropped and whether the log ends with a checkpoint intent. In salvage mode damage stops
/// the replay and is reported in `info`; otherwise it is `Error::Corruption`.
fn replay_wal(
    path: &Path,
    last: &mut u64,
    info: &mut RecoveryInfo,
    mode: RecoverMode,
    index: &dyn OrderedIndex,
    vfs: &Arc<dyn Vfs>,
    stats: &Arc<IoStats>,
) -> Result<(u64, bool)> {
    let salvage = mode == RecoverMode::Salvage;
    let mut intent = false;
    let mut stopped: Option<String> = None;
    let rec = recover_log(vfs, path, stats.clone(), mode, &mut |payload, offset| {
        if stopped.is_some() {
            return Ok(());
        }
        let problem = match wal::decode(payload) {
            Ok(WalRecord::CheckpointIntent { .. }) => {
                intent = true;
                return Ok(());
            }
            Ok(WalRecord::Batch { seqno, ops }) => {
                intent = false;
                if seqno <= *last {
                    return Ok(());
                }
                if last.checked_add(1) == Some(seqno) {
                    index.apply(&ops)?;
                    *last = seqno;
                    info.replayed_records += 1;
                    return Ok(());
                }
                format!("WAL record {seqno} follows {last}: records are missing")
            }
            Err(d) => format!("WAL record: {d}"),
        };
        if !salvage {
            return Err(Error::corruption(path, offset, problem));
        }
        stopped = Some(format!("at offset {offset}: {problem}"));
        Ok(())
    })?;
    if let Some(s) = &rec.salvaged {
        info.repairs.push(format!(
            "dropped the damaged end of {} from offset {} ({}; {} valid-looking record(s) after it)",
            path.display(),
            s.offset,
            s.detail,
            s.later_frames
        ));
    }
    if let Some(s) = stopped {
        info.repairs.push(format!(
            "stopped replaying {} {s}; the records after it are dropped",
            path.display()
        ));
    }
    Ok((rec.torn.map_or(0, |(_, bytes)| bytes), intent))
}
