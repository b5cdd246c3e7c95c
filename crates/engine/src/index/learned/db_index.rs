//! The learned index behind the `Db` shell: [`LearnedDbIndex`] implements `OrderedIndex` over 8-byte
//! big-endian `u64` keys and byte values, with a background maintenance thread and the checkpoint file of
//! `checkpoint.rs`.
//!
//! `checkpoint(seqno)` writes the records of one snapshot (writes may go on; the WAL replay after
//! `seqno` re-applies any it caught, puts and deletes being idempotent). In the background (the shell's
//! `begin_checkpoint` / `finish_checkpoint`), the writer only registers the snapshot, at exactly `seqno`, and
//! the shell's checkpoint thread writes it while writes go on; opening loads the last checkpoint
//! and retrains every model (bulk load), after which the shell replays the WAL. Scans read one snapshot, so a
//! scan never sees half of a batch.
//!
//! Cost: as the core index, plus a key decode per call; a checkpoint writes every record.

use super::checkpoint;
use super::{LearnedIndex, LearnedOptions, Maintainer, OwnedSnapshot};
use crate::error::{Error, Result};
use crate::index::u64_keys::{decode_u64, u64_bounds};
use crate::index::{
    CheckReport, Direction, IndexSnapshot, IndexStats, KeyRange, OrderedIndex, RecordVisitor,
    WriteOp,
};
use crate::storage::{IoSnapshot, IoStats, Vfs};
use parking_lot::Mutex;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The learned index as a `Db` index.
pub struct LearnedDbIndex {
    core: Arc<LearnedIndex>,
    _maintainer: Maintainer,
    vfs: Arc<dyn Vfs>,
    dir: PathBuf,
    stats: Arc<IoStats>,
    page_size: usize,
    seqno: AtomicU64,
    checkpoint_lock: Mutex<()>,
    /// A checkpoint `begin_checkpoint` sealed and `finish_checkpoint` has not written yet: its seqno and the
    /// snapshot of everything applied up to it (writes go on meanwhile; the snapshot keeps its versions).
    sealed: Mutex<Option<(u64, OwnedSnapshot)>>,
}

/// The `u64` of an 8-byte big-endian key.
fn decode_key(bytes: &[u8]) -> Result<u64> {
    decode_u64(bytes, "learned", "key")
}

fn bounds(range: &KeyRange) -> Result<Option<(u64, u64)>> {
    u64_bounds(range, "learned")
}

/// A core scan (`scan(lo, hi, dir, max, visit)`, now or at a snapshot) over an encoded range, with an
/// encoded-record visitor whose first error stops the scan and is returned.
fn scan_encoded(
    range: &KeyRange,
    dir: Direction,
    max: usize,
    visit: &mut RecordVisitor<'_>,
    scan: impl FnOnce(u64, u64, Direction, usize, &mut dyn FnMut(u64, &[u8]) -> bool) -> usize,
) -> Result<usize> {
    let Some((lo, hi)) = bounds(range)? else {
        return Ok(0);
    };
    let mut failed = None;
    let n = scan(
        lo,
        hi,
        dir,
        max,
        &mut |k, v| match visit(&k.to_be_bytes(), v) {
            Ok(go) => go,
            Err(e) => {
                failed = Some(e);
                false
            }
        },
    );
    match failed {
        Some(e) => Err(e),
        None => Ok(n),
    }
}

/// A `Db` snapshot of the learned index: the core's snapshot, holding the index alive.
struct LearnedDbSnapshot(OwnedSnapshot);

impl IndexSnapshot for LearnedDbSnapshot {
    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        Ok(self.0.get(decode_key(key)?, out))
    }

    fn scan_visit(
        &self,
        range: &KeyRange,
        dir: Direction,
        max: usize,
        visit: &mut RecordVisitor<'_>,
    ) -> Result<usize> {
        scan_encoded(range, dir, max, visit, |lo, hi, dir, max, v| {
            self.0.scan(lo, hi, dir, max, v)
        })
    }
}

impl LearnedDbIndex {
    /// Writes the records of `snapshot` as the checkpoint at WAL seqno `seqno` and then publishes the seqno.
    fn write_checkpoint(&self, seqno: u64, snapshot: &OwnedSnapshot) -> Result<()> {
        let _g = self.checkpoint_lock.lock();
        let mut records = Vec::with_capacity(self.core.len() as usize);
        snapshot.scan(0, u64::MAX, Direction::Forward, usize::MAX, &mut |k, v| {
            records.push((k, v.to_vec()));
            true
        });
        checkpoint::write(self.vfs.as_ref(), &self.dir, seqno, &records, &self.stats)?;
        self.seqno.store(seqno, Ordering::Release);
        Ok(())
    }

    /// Creates an empty index and its first checkpoint (seqno 0), or opens the last checkpoint.
    pub fn instantiate(
        vfs: Arc<dyn Vfs>,
        dir: PathBuf,
        stats: Arc<IoStats>,
        page_size: usize,
        opts: LearnedOptions,
        create: bool,
    ) -> Result<LearnedDbIndex> {
        let (core, seqno) = if create {
            checkpoint::write(vfs.as_ref(), &dir, 0, &[], &stats)?;
            (LearnedIndex::new(opts), 0)
        } else {
            let loaded = checkpoint::read(vfs.as_ref(), &dir, &stats)?;
            (
                LearnedIndex::bulk_load(opts, loaded.records.into_iter()),
                loaded.seqno,
            )
        };
        let core = Arc::new(core);
        let maintainer = Maintainer::start(&core, Duration::from_millis(1));
        Ok(LearnedDbIndex {
            core,
            _maintainer: maintainer,
            vfs,
            dir,
            stats,
            page_size,
            seqno: AtomicU64::new(seqno),
            checkpoint_lock: Mutex::new(()),
            sealed: Mutex::new(None),
        })
    }

    /// The core index.
    pub fn core(&self) -> &Arc<LearnedIndex> {
        &self.core
    }
}

impl OrderedIndex for LearnedDbIndex {
    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        Ok(self.core.get(decode_key(key)?, out))
    }

    fn validate_batch(&self, ops: &[WriteOp]) -> Result<()> {
        for op in ops {
            match op {
                WriteOp::Put { key, .. } | WriteOp::Delete { key } => {
                    decode_key(key)?;
                }
                WriteOp::PutWeighted { .. } => {
                    return Err(Error::invalid("a learned index has no sampling weights"));
                }
                WriteOp::Merge { .. } => {
                    return Err(Error::invalid(
                        "a learned index has no merge operator (merges need a Bε-tree created with one)",
                    ));
                }
            }
        }
        Ok(())
    }

    fn apply(&self, ops: &[WriteOp]) -> Result<()> {
        self.validate_batch(ops)?;
        let mut batch = Vec::with_capacity(ops.len());
        for op in ops {
            match op {
                WriteOp::Put { key, value } => {
                    batch.push((decode_key(key)?, Some(value.as_slice())))
                }
                WriteOp::Delete { key } => batch.push((decode_key(key)?, None)),
                WriteOp::PutWeighted { .. } | WriteOp::Merge { .. } => {}
            }
        }
        match batch.as_slice() {
            [(k, Some(v))] => self.core.put(*k, v),
            [(k, None)] => {
                self.core.remove(*k);
            }
            _ => self.core.apply(&batch),
        }
        Ok(())
    }

    fn scan_visit(
        &self,
        range: &KeyRange,
        dir: Direction,
        max: usize,
        visit: &mut RecordVisitor<'_>,
    ) -> Result<usize> {
        scan_encoded(range, dir, max, visit, |lo, hi, dir, max, v| {
            self.core.scan(lo, hi, dir, max, v)
        })
    }

    fn snapshot(&self) -> Option<Box<dyn IndexSnapshot>> {
        Some(Box::new(LearnedDbSnapshot(self.core.snapshot_owned())))
    }

    fn len(&self) -> u64 {
        self.core.len()
    }

    fn max_key_len(&self) -> usize {
        8
    }

    fn checkpoint(&self, seqno: u64) -> Result<()> {
        let snapshot = self.core.snapshot_owned();
        self.write_checkpoint(seqno, &snapshot)
    }

    /// Seals a snapshot of everything applied so far (cheap: a registered sequence number); the records
    /// are written by `finish_checkpoint` in the shell's background thread, off the writer's path.
    fn begin_checkpoint(&self, seqno: u64) -> Result<bool> {
        *self.sealed.lock() = Some((seqno, self.core.snapshot_owned()));
        Ok(true)
    }

    fn finish_checkpoint(&self) -> Result<()> {
        let Some((seqno, snapshot)) = self.sealed.lock().take() else {
            return Ok(());
        };
        self.write_checkpoint(seqno, &snapshot)
    }

    fn checkpointed_seqno(&self) -> u64 {
        self.seqno.load(Ordering::Acquire)
    }

    fn check(&self) -> Result<CheckReport> {
        let _g = self.checkpoint_lock.lock();
        let loaded = checkpoint::read(self.vfs.as_ref(), &self.dir, &self.stats)?;
        if loaded.seqno != self.checkpointed_seqno() {
            return Err(Error::corruption(
                self.dir.join(checkpoint::FILE),
                0,
                format!(
                    "learned checkpoint holds seqno {}, the index last wrote {}",
                    loaded.seqno,
                    self.checkpointed_seqno()
                ),
            ));
        }
        // The structure: a full scan is strictly increasing and counts `len` records.
        let mut prev: Option<u64> = None;
        let mut sorted = true;
        let records = self
            .core
            .scan(0, u64::MAX, Direction::Forward, usize::MAX, &mut |k, _| {
                sorted &= prev.is_none_or(|p| p < k);
                prev = Some(k);
                true
            }) as u64;
        if !sorted || records != self.core.len() {
            return Err(Error::corruption(
                &self.dir,
                0,
                format!(
                    "the learned index in memory: a scan found {records} records (sorted: {sorted}), \
                     its count is {}",
                    self.core.len()
                ),
            ));
        }
        Ok(CheckReport {
            records,
            height: 2,
            ..CheckReport::default()
        })
    }

    fn stats(&self) -> IndexStats {
        IndexStats {
            records: self.core.len(),
            height: 2,
            page_size: self.page_size,
            checkpointed_seqno: self.checkpointed_seqno(),
            ..IndexStats::default()
        }
    }

    fn io(&self) -> IoSnapshot {
        self.stats.snapshot()
    }

    fn settle(&self) -> Result<()> {
        self.core.maintain();
        self.core.reclaim();
        Ok(())
    }

    fn family_stats(&self) -> Option<serde_json::Value> {
        serde_json::to_value(self.core.learned_stats()).ok()
    }
}
