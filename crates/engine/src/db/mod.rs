//! # The `Db` shell
//!
//! One handle over a database directory, whatever its index family:
//!
//! | file                   | what                                                               |
//! |------------------------|--------------------------------------------------------------------|
//! | `LOCK`                 | lock: exclusive while a read-write handle is open, shared by read-only handles |
//! | `MANIFEST`             | index kind, key and value types, page size, options (`manifest`)   |
//! | `data.pages`           | the index's page file (`storage::page_file`)                       |
//! | `wal-NNNNNNNNNNNNNNNN.log` | write-ahead log, one record per batch (`wal`, `storage::log`)  |
//!
//! Parts: `config` (what a database is created and a handle opened with), `open` (create, open, repair,
//! read-only handles), `recovery` (which WAL is live, rollback detection, replay), `wal` (record payloads),
//! `manifest`, `stats`, `iter`, `typed` (the typed [`Db`]); this file holds the handle and its write and read
//! paths.
//!
//! ## Write path and durability
//! A batch is validated, gets the next sequence number, is appended to the WAL (buffered, written or synced
//! as its [`Durability`] requires) and then applied to the index under the index's write lock, so readers see
//! all of it or none of it. Writers are serialised by one mutex, so WAL order is apply order. A single put or
//! delete (`insert`, `delete`) of a family that applies borrowed writes ([`OrderedIndex::applies_borrowed`])
//! takes the same steps without building a batch: its WAL record is encoded in place from the caller's bytes
//! and the index applies it from them (no allocation on the writer's path).
//! When the WAL exceeds `Options::checkpoint_wal_bytes`, the index is checkpointed and a new WAL replaces the
//! old one (see `recovery` for the protocol and what it guarantees). Families that can
//! ([`OrderedIndex::begin_checkpoint`]) checkpoint in the background (`background`): the writer
//! seals the index and switches to a new WAL without waiting for the device, a thread syncs the old WAL, the
//! new one and the directory, writes the checkpoint and then removes the old WAL; the writer waits for it
//! only when the live WAL reaches twice the checkpoint size first (a backlog of one checkpoint), or to sync
//! the new WAL before the thread synced the old one. Recovery then may
//! find two WALs and replays both. A clean close checkpoints too. A bulk
//! load consumes one sequence number and checkpoints, so it is ordered like any write.
//!
//! ## Recovery
//! Open = lock, read the manifest, open the index at its last checkpoint, find the live WAL and check that it
//! continues from that checkpoint (else the index lost a checkpoint: `Error::Corruption`), replay its records
//! (a torn tail is cut; damage with valid records after it is `Error::Corruption`, never a silent
//! truncation), checkpoint if anything was replayed or the index's spare checkpoint slot is unusable, and
//! start a fresh WAL. [`RawDb::open_read_only`] does the same in memory and never writes; [`RawDb::repair`]
//! drops what is damaged instead of refusing it and reports what it dropped.
//!
//! ## Failures
//! If a write fails after it started changing state (WAL append or index apply), the handle is *poisoned*:
//! every later call returns [`Error::Poisoned`] and nothing wrong is ever served; reopening recovers the last
//! durable state. A read that fails (e.g. a damaged page) is reported and the handle stays usable.

mod background;
mod config;
mod iter;
pub(crate) mod manifest;
mod open;
mod recovery;
mod snapshot;
mod stats;
mod typed;
pub(crate) mod wal;

pub use config::{Config, Options};
pub use iter::RawIter;
pub use manifest::{FORMAT_VERSION, Manifest};
pub use snapshot::RawSnapshot;
pub use stats::{DbStats, RecoveryInfo};
pub use typed::{Batch, Db, Iter, Snapshot};

use crate::error::{Error, Result};
pub use crate::index::family::{IndexConfig, IndexKind};
use crate::index::{CheckReport, Direction, KeyRange, OrderedIndex, WriteOp};
use crate::storage::{
    IoSnapshot, IoStats, LogWriter, OpenOptions, RecoverMode, Vfs, VfsLock, recover_log,
};
use crate::types::{Durability, MAX_VALUE_LEN, TypeKind};
use background::Background;
use parking_lot::{Condvar, Mutex};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Largest number of samples one `sample_range` call returns (bounds the memory a call can ask for).
pub const MAX_SAMPLES_PER_CALL: usize = 1 << 24;
/// A `Durability::None` WAL buffer is written out when it grows past this.
const WAL_BUFFER_LIMIT: usize = 1 << 20;

struct Writer {
    /// The live WAL; `None` for a read-only handle.
    wal: Option<LogWriter>,
    wal_number: u64,
    next_seqno: u64,
    /// Writes since the last checkpoint.
    dirty: bool,
    scratch: Vec<u8>,
}

struct DbInner {
    dir: PathBuf,
    vfs: Arc<dyn Vfs>,
    manifest: Manifest,
    index: Box<dyn OrderedIndex>,
    stats: Arc<IoStats>,
    writer: Mutex<Writer>,
    poisoned: AtomicBool,
    poison_reason: Mutex<String>,
    durability: Durability,
    checkpoint_wal_bytes: u64,
    recovery: RecoveryInfo,
    /// Opened with [`RawDb::open_read_only`]: writes are refused and nothing reaches the files.
    read_only: bool,
    /// Read-only handles: the WAL that was replayed (check verifies it again).
    replayed_wal: Option<PathBuf>,
    /// Read-only handles: that WAL ends with a checkpoint intent, so a checkpoint may have been torn by a crash.
    checkpoint_interrupted: bool,
    /// The checkpoint finishing in the background, if any (see `DbInner::checkpoint_in_background`).
    background: Mutex<Background>,
    background_done: Condvar,
    _lock: Option<Box<dyn VfsLock>>,
}

/// An untyped handle: keys and values as encoded bytes (see `types`). Cheap to clone; the database closes
/// when the last clone (and iterator) is dropped.
#[derive(Clone)]
pub struct RawDb {
    inner: Arc<DbInner>,
}

impl std::fmt::Debug for RawDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawDb")
            .field("dir", &self.inner.dir)
            .field("manifest", &self.inner.manifest)
            .finish()
    }
}

/// The names of the index families whose default configuration has a capability, comma-separated (for
/// errors that say where to turn).
fn families_with(has: impl Fn(&crate::index::Capabilities) -> bool) -> String {
    IndexKind::ALL
        .iter()
        .filter(|k| has(&k.default_config().capabilities()))
        .map(|k| k.name())
        .collect::<Vec<_>>()
        .join(", ")
}

impl RawDb {
    /// Fails with `Error::Incompatible` unless the database has this index kind and these types.
    pub fn expect_types(&self, index: IndexKind, key: TypeKind, value: TypeKind) -> Result<()> {
        let m = &self.inner.manifest;
        if m.index.kind() != index || m.key != key || m.value != value {
            return Err(Error::Incompatible(format!(
                "database at {} is a {} index with {} keys and {} values; asked for a {} index with {} keys and {} values",
                self.inner.dir.display(),
                m.index.kind().name(),
                m.key.name(),
                m.value.name(),
                index.name(),
                key.name(),
                value.name()
            )));
        }
        Ok(())
    }

    /// What the database's index can do (range counts, sampling, weights, merges, bulk loads).
    pub fn capabilities(&self) -> crate::index::Capabilities {
        self.inner.manifest.index.capabilities()
    }

    /// The manifest (index kind, types, page size, options).
    pub fn manifest(&self) -> &Manifest {
        &self.inner.manifest
    }

    /// The directory of the database.
    pub fn path(&self) -> &Path {
        &self.inner.dir
    }

    /// Largest key accepted, in encoded bytes.
    pub fn max_key_len(&self) -> usize {
        self.inner.index.max_key_len()
    }

    /// The durability writes get unless a batch says otherwise.
    pub fn durability(&self) -> Durability {
        self.inner.durability
    }

    /// Why the handle is poisoned (a write or checkpoint failed after it started changing state, so every
    /// later call fails until the database is reopened), or `None` if it is usable. A write that failed
    /// before changing anything (bad input, a failed read of a current value) leaves it usable.
    pub fn poisoned(&self) -> Option<String> {
        self.inner.poisoned()
    }

    fn check_poison(&self) -> Result<()> {
        self.inner.check_poison()
    }

    fn poison(&self, e: &Error) {
        self.inner.poison(e);
    }

    /// Checks one encoded key against the database's key type and limits.
    pub fn validate_key(&self, key: &[u8]) -> Result<()> {
        match self.inner.manifest.key.fixed_width() {
            Some(w) if key.len() != w => Err(Error::invalid(format!(
                "key of {} bytes for a database of {} keys ({w} bytes)",
                key.len(),
                self.inner.manifest.key.name()
            ))),
            _ if key.len() > self.max_key_len() => Err(Error::invalid(format!(
                "key of {} bytes exceeds the limit of {} bytes for this page size",
                key.len(),
                self.max_key_len()
            ))),
            _ => Ok(()),
        }
    }

    fn validate_value(&self, value: &[u8]) -> Result<()> {
        match self.inner.manifest.value.fixed_width() {
            Some(w) if value.len() != w => Err(Error::invalid(format!(
                "value of {} bytes for a database of {} values ({w} bytes)",
                value.len(),
                self.inner.manifest.value.name()
            ))),
            _ if value.len() > MAX_VALUE_LEN => Err(Error::invalid(format!(
                "value of {} bytes exceeds the limit of {MAX_VALUE_LEN} bytes",
                value.len()
            ))),
            _ => Ok(()),
        }
    }

    /// `Error::InvalidArgument` for a read-only handle.
    fn check_writable(&self) -> Result<()> {
        if self.inner.read_only {
            return Err(Error::invalid(format!(
                "{} is open read-only: writes, flushes, checkpoints and bulk loads need a read-write handle",
                self.inner.dir.display()
            )));
        }
        Ok(())
    }

    /// Applies a batch atomically with the handle's durability, or `durability` if given.
    pub fn write(&self, ops: &[WriteOp], durability: Option<Durability>) -> Result<()> {
        self.check_poison()?;
        self.check_writable()?;
        for op in ops {
            self.validate_key(op.key())?;
            match op {
                WriteOp::Put { value, .. } => self.validate_value(value)?,
                WriteOp::PutWeighted { value, weight, .. } => {
                    self.validate_value(value)?;
                    if !self.capabilities().weighted {
                        return Err(Error::invalid(format!(
                            "the {} index of {} has no weights (create it with weights to use them)",
                            self.inner.manifest.index.kind().name(),
                            self.inner.dir.display()
                        )));
                    }
                    if !(weight.is_finite() && *weight >= 0.0) {
                        return Err(Error::invalid(format!(
                            "weight {weight} must be finite and non-negative"
                        )));
                    }
                }
                WriteOp::Delete { .. } => {}
                WriteOp::Merge { operand, .. } => self.validate_value(operand)?,
            }
        }
        if ops.is_empty() {
            return Ok(());
        }
        let durability = durability.unwrap_or(self.inner.durability);
        let w = self.inner.writer.lock();
        self.check_poison()?;
        // Under the writer lock: a family's check may read current values (checked merges), and no write
        // may come between that read and this batch.
        self.inner.index.validate_batch(ops)?;
        self.commit(
            w,
            durability,
            |seqno, out| wal::encode(seqno, ops, out),
            || self.inner.index.apply(ops),
        )
    }

    /// A put (`value` given) or delete of one key from borrowed bytes: what [`write`](Self::write) of that
    /// one op does, without building it where the index applies such writes itself
    /// ([`OrderedIndex::applies_borrowed`]).
    fn write_single(&self, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        if !self.inner.index.applies_borrowed() {
            return self.write(&[WriteOp::single(key, value)], None);
        }
        self.check_poison()?;
        self.check_writable()?;
        self.validate_key(key)?;
        if let Some(value) = value {
            self.validate_value(value)?;
        }
        let w = self.inner.writer.lock();
        self.check_poison()?;
        self.commit(
            w,
            self.inner.durability,
            |seqno, out| wal::encode_single(seqno, key, value, out),
            || self.inner.index.apply_borrowed(key, value),
        )
    }

    /// Logs a validated batch (`encode` appends its WAL record for a sequence number), applies it to the
    /// index, and checkpoints when the WAL has grown past its limit. Any failure poisons the handle.
    fn commit(
        &self,
        mut w: parking_lot::MutexGuard<'_, Writer>,
        durability: Durability,
        encode: impl FnOnce(u64, &mut Vec<u8>),
        apply: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        let seqno = w.next_seqno;
        let result = (|| {
            let w = &mut *w;
            let wal = w.wal.as_mut().expect("a writable handle has a WAL");
            wal.append_with(|out| encode(seqno, out))?;
            match durability {
                Durability::None if wal.buffered_bytes() < WAL_BUFFER_LIMIT => {}
                // Neither waits for a rotation's syncs in the background: the OS may write these records back
                // before the WAL they follow is durable, and recovery drops such records of a WAL created
                // before its predecessor was durable (nothing but a `sync` made them durable, and a `sync`
                // waits; see `background`).
                Durability::None | Durability::Flush => wal.flush()?,
                Durability::Sync => self.inner.sync_live_wal(w)?,
            }
            apply()
        })();
        if let Err(e) = result {
            self.poison(&e);
            return Err(e);
        }
        w.next_seqno += 1;
        w.dirty = true;
        let wal_len = w.wal.as_ref().map_or(0, LogWriter::len);
        if wal_len > self.inner.checkpoint_wal_bytes {
            // A checkpoint finishing in the background is waited for only once the WAL has grown to twice
            // the checkpoint size meanwhile: the backlog is one checkpoint.
            let r = if wal_len > 2 * self.inner.checkpoint_wal_bytes {
                self.checkpoint_locked(&mut w)
            } else if !self.inner.background.lock().busy {
                DbInner::checkpoint_in_background(&self.inner, &mut w)
            } else {
                Ok(())
            };
            if let Err(e) = r {
                self.poison(&e);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Inserts or overwrites one record.
    pub fn insert(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.write_single(key, Some(value))
    }

    /// Removes one record (no effect if absent).
    pub fn delete(&self, key: &[u8]) -> Result<()> {
        self.write_single(key, None)
    }

    /// Looks a key up; on a hit, the value replaces `out`'s contents.
    pub fn get_into(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        self.check_poison()?;
        self.validate_key(key)?;
        self.inner.index.get(key, out)
    }

    /// Looks a key up.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut out = Vec::new();
        Ok(self.get_into(key, &mut out)?.then_some(out))
    }

    /// Looks every key of `keys` up: one answer per key, in order (`None`: absent), each what
    /// [`get`](Self::get) gives. A B+-tree interleaves the lookups so that their cache misses overlap (a
    /// server's pipeline of GETs costs less than as many `get`s). An invalid key fails the whole call.
    pub fn get_many(&self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        self.check_poison()?;
        for key in keys {
            self.validate_key(key)?;
        }
        let mut out = Vec::with_capacity(keys.len());
        self.inner.index.get_many(keys, &mut out)?;
        Ok(out)
    }

    /// `InvalidArgument` for an index without key order (a hash index): scans, ranges, range counts and
    /// samples need one.
    fn check_ordered(&self) -> Result<()> {
        if self.capabilities().ordered {
            return Ok(());
        }
        Err(Error::invalid(format!(
            "the {} index has no key order: scans, ranges, counts and samples need an ordered index ({})",
            self.inner.manifest.index.kind().name(),
            families_with(|c| c.ordered)
        )))
    }

    /// Appends up to `max` records of `range` in `dir` order to `out`.
    pub fn scan_into(
        &self,
        range: &KeyRange,
        dir: Direction,
        max: usize,
        out: &mut Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<()> {
        self.check_poison()?;
        self.check_ordered()?;
        self.inner.index.scan(range, dir, max, out)
    }

    /// Calls `visit(key, value)` for up to `max` records of `range` in `dir` order, until it returns
    /// `false`; returns how many it visited. Values are not copied, but the visitor runs under the index's
    /// read lock: it must not call into this database (writers wait while it runs, so keep `max` modest).
    pub fn scan_visit(
        &self,
        range: &KeyRange,
        dir: Direction,
        max: usize,
        visit: &mut crate::index::RecordVisitor<'_>,
    ) -> Result<usize> {
        self.check_poison()?;
        self.check_ordered()?;
        self.inner.index.scan_visit(range, dir, max, visit)
    }

    /// An ordered iterator over `range`. It reads in chunks and does not hold locks between chunks: writes
    /// made while it runs may or may not be seen, but every record it returns was live when read and keys are
    /// strictly ordered.
    pub fn range(&self, range: KeyRange, dir: Direction) -> RawIter {
        RawIter::new(self.clone(), range, dir)
    }

    /// A point-in-time view (see [`RawSnapshot`]): `InvalidArgument` for a family without snapshots
    /// ([`Capabilities::snapshots`](crate::Capabilities)).
    pub fn snapshot(&self) -> Result<RawSnapshot> {
        self.check_poison()?;
        match self.inner.index.snapshot() {
            Some(view) => Ok(RawSnapshot::new(self.clone(), view)),
            None => Err(Error::invalid(format!(
                "the {} index has no snapshots (families with them: {})",
                self.inner.manifest.index.kind().name(),
                families_with(|c| c.snapshots)
            ))),
        }
    }

    /// Number of live records.
    pub fn len(&self) -> u64 {
        self.inner.index.len()
    }

    /// True when the database holds no records.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn sampling(&self) -> Result<&dyn crate::index::SamplingIndex> {
        self.inner.index.as_sampling().ok_or_else(|| {
            Error::invalid(format!(
                "the {} index does not support sampling",
                self.inner.manifest.index.kind().name()
            ))
        })
    }

    /// Number of live records in `range`.
    pub fn count_range(&self, range: &KeyRange) -> Result<u64> {
        self.check_poison()?;
        self.check_ordered()?;
        match self.inner.index.as_sampling() {
            Some(s) => s.count_range(range),
            // Families without counts (the Bε-tree) count with a scan: O(records in the range).
            None => self
                .inner
                .index
                .scan_visit(range, Direction::Forward, usize::MAX, &mut |_, _| Ok(true))
                .map(|n| n as u64),
        }
    }

    /// `k` independent uniform samples, with replacement, of the live records in `range`; empty if the range
    /// is empty. At most [`MAX_SAMPLES_PER_CALL`] per call (more is `Error::InvalidArgument`).
    pub fn sample_range(
        &self,
        range: &KeyRange,
        k: usize,
        rng: &mut dyn rand::RngCore,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::new();
        self.sample_visit(range, k, rng, &mut |key, value| {
            out.push((key.to_vec(), value.to_vec()));
            Ok(())
        })?;
        Ok(out)
    }

    /// [`sample_range`](Self::sample_range) handing each sample to `visit` instead of collecting it: no
    /// allocation per sample. The visitor may run while the index holds read locks: it must not call into
    /// this database.
    pub fn sample_visit(
        &self,
        range: &KeyRange,
        k: usize,
        rng: &mut dyn rand::RngCore,
        visit: &mut crate::index::SampleVisitor<'_>,
    ) -> Result<()> {
        self.check_poison()?;
        self.check_ordered()?;
        if k > MAX_SAMPLES_PER_CALL {
            return Err(Error::invalid(format!(
                "{k} samples requested; at most {MAX_SAMPLES_PER_CALL} per call (draw in several calls)"
            )));
        }
        self.sampling()?.sample_visit(range, k, rng, visit)
    }

    /// Waits until background work that earlier writes started has finished (a dynamized index's
    /// reconstructions: sealed buffers flushed and merges done). The active buffer stays as it is.
    pub fn settle(&self) -> Result<()> {
        self.check_poison()?;
        self.inner.index.settle()
    }

    /// Makes every write so far durable (WAL written and fsynced).
    pub fn flush(&self) -> Result<()> {
        self.check_poison()?;
        self.check_writable()?;
        let mut w = self.inner.writer.lock();
        if let Err(e) = self.inner.sync_live_wal(&mut w) {
            self.poison(&e);
            return Err(e);
        }
        Ok(())
    }

    /// Writes the index state to its page file and starts a new WAL.
    pub fn checkpoint(&self) -> Result<()> {
        self.check_poison()?;
        self.check_writable()?;
        let mut w = self.inner.writer.lock();
        if let Err(e) = self.checkpoint_locked(&mut w) {
            self.poison(&e);
            return Err(e);
        }
        Ok(())
    }

    fn checkpoint_locked(&self, w: &mut Writer) -> Result<()> {
        self.inner.checkpoint(w)
    }

    /// Loads records given in strictly increasing key order into an empty database, bypassing the WAL, and
    /// checkpoints. Much faster than inserting them one by one; the pages come out full. A record that fails
    /// validation (or is out of order) stops the load with that error and leaves the database empty.
    pub fn bulk_load(&self, records: &mut dyn Iterator<Item = (Vec<u8>, Vec<u8>)>) -> Result<u64> {
        self.check_poison()?;
        self.check_writable()?;
        let mut w = self.inner.writer.lock();
        let mut checked = records.map(|(k, v)| {
            self.validate_key(&k)?;
            self.validate_value(&v)?;
            Ok((k, v))
        });
        // The load is one write: it takes the next sequence number and is checkpointed with it, and a new WAL
        // follows that checkpoint (so an index that lost the load's checkpoint is detected on open).
        let seqno = w.next_seqno;
        let result = self
            .inner
            .intend_checkpoint(&mut w, seqno)
            .and_then(|()| self.inner.index.bulk_load(&mut checked, seqno))
            .and_then(|n| {
                w.next_seqno = seqno + 1;
                self.inner.rotate_wal(&mut w, seqno).map(|()| n)
            });
        if let Err(e) = &result
            && !e.is_invalid_argument()
        {
            self.poison(e);
        }
        result
    }

    /// Verifies every checksum and structural invariant of the index and of the live WAL. A damaged spare
    /// checkpoint slot is damage too, unless the WAL shows that a crash interrupted the checkpoint that was
    /// writing it (then it is a note in the report: opening read-write rewrites it).
    pub fn check(&self) -> Result<CheckReport> {
        self.check_poison()?;
        // A checkpoint finishing in the background completes first: the check reads what it writes.
        self.inner.wait_background();
        self.check_poison()?;
        let mut report = self.inner.index.check()?;
        if let Some(d) = self.inner.index.spare_checkpoint_damage() {
            if !self.inner.checkpoint_interrupted {
                return Err(d.into_error());
            }
            report.notes.push(format!(
                "{d}: a checkpoint was interrupted by a crash while writing it (the WAL covers it); opening the \
                 database read-write rewrites it"
            ));
        }
        let mut w = self.inner.writer.lock();
        let wal_path = match w.wal.as_mut() {
            Some(wal) => {
                wal.flush()?;
                Some(wal.path().to_path_buf())
            }
            None => self.inner.replayed_wal.clone(),
        };
        if let Some(path) = wal_path {
            let rec = recover_log(
                &self.inner.vfs,
                &path,
                self.inner.stats.clone(),
                RecoverMode::Strict,
                &mut |payload, offset| {
                    wal::decode(payload)
                        .map(drop)
                        .map_err(|d| Error::corruption(&path, offset, format!("WAL record: {d}")))
                },
            )?;
            if let Some((offset, reason)) = rec.spare_slot_damage {
                return Err(Error::corruption(
                    &path,
                    offset,
                    format!("WAL header slot at offset {offset} is unusable: {reason}"),
                ));
            }
            if let Some((offset, bytes)) = rec.torn {
                report.notes.push(format!(
                    "{}: a torn tail of {bytes} bytes at offset {offset} (records never made durable before a \
                     crash; recovery drops them)",
                    path.display()
                ));
            }
            report.wal_records = rec.records;
        }
        Ok(report)
    }

    /// The I/O counters of this handle's files since it was opened.
    pub fn io(&self) -> IoSnapshot {
        self.inner.stats.snapshot()
    }

    /// Statistics, including I/O counters and bytes on disk.
    /// The index's shape and cache state (no I/O; [`stats`](Self::stats) adds file sizes and I/O counters).
    pub fn index_stats(&self) -> crate::index::IndexStats {
        self.inner.index.stats()
    }

    pub fn stats(&self) -> Result<DbStats> {
        let m = &self.inner.manifest;
        let wal_bytes = self
            .inner
            .writer
            .lock()
            .wal
            .as_ref()
            .map_or(0, LogWriter::len);
        let mut disk_bytes = 0;
        for name in self.inner.vfs.list_dir(&self.inner.dir)? {
            if let Ok(f) = self
                .inner
                .vfs
                .open(&self.inner.dir.join(&name), OpenOptions::default())
            {
                disk_bytes += f.len().unwrap_or(0);
            }
        }
        Ok(DbStats {
            index: m.index.kind().name(),
            key: m.key.name(),
            value: m.value.name(),
            records: self.len(),
            tree: self.index_stats(),
            io: self.io(),
            wal_bytes,
            disk_bytes,
            recovery: self.inner.recovery.clone(),
            family: self
                .inner
                .index
                .family_stats()
                .map(|v| (m.index.kind().name().to_string(), v))
                .into_iter()
                .collect(),
        })
    }

    /// What recovery did when this handle opened the database.
    pub fn recovery(&self) -> &RecoveryInfo {
        &self.inner.recovery
    }

    /// Checkpoints and closes, reporting any error (dropping the last handle does the same silently).
    pub fn close(self) -> Result<()> {
        self.check_poison()?;
        let mut w = self.inner.writer.lock();
        // A checkpoint finishing in the background completes first (and reports its failure).
        self.inner.wait_background();
        self.check_poison()?;
        if w.dirty {
            // Background work finishes first, so the last checkpoint lists every file it wrote.
            self.inner.index.settle()?;
            self.checkpoint_locked(&mut w)?;
        } else if w.wal.is_some() {
            self.inner.sync_live_wal(&mut w)?;
        }
        Ok(())
    }
}

impl DbInner {
    /// Poisons the handle with `e` as the reason, unless it already is (the first failure is the cause; a
    /// later one is usually `Poisoned` itself).
    fn poison(&self, e: &Error) {
        let mut reason = self.poison_reason.lock();
        if !self.poisoned.load(Ordering::Acquire) {
            *reason = e.to_string();
            self.poisoned.store(true, Ordering::Release);
        }
    }

    fn poisoned(&self) -> Option<String> {
        self.poisoned
            .load(Ordering::Acquire)
            .then(|| self.poison_reason.lock().clone())
    }

    fn check_poison(&self) -> Result<()> {
        match self.poisoned() {
            Some(reason) => Err(Error::Poisoned(reason)),
            None => Ok(()),
        }
    }

    /// Checkpoints everything written so far and starts a new WAL (after a checkpoint finishing in the
    /// background, if any).
    fn checkpoint(&self, w: &mut Writer) -> Result<()> {
        self.wait_background();
        self.check_poison()?;
        let seqno = w.next_seqno - 1;
        self.intend_checkpoint(w, seqno)?;
        self.index.checkpoint(seqno)?;
        self.rotate_wal(w, seqno)?;
        w.dirty = false;
        Ok(())
    }

    /// Appends a checkpoint intent for `seqno` to the live WAL and syncs it: if the checkpoint is torn by a
    /// crash, the WAL says so (and still covers every write).
    fn intend_checkpoint(&self, w: &mut Writer, seqno: u64) -> Result<()> {
        let wal = w.wal.as_mut().expect("a writable handle has a WAL");
        wal::encode_intent(seqno, &mut w.scratch);
        wal.append(&w.scratch)?;
        self.sync_live_wal(w)
    }

    /// After the index checkpointed `seqno`: creates the next WAL with that base, syncs the directory, removes
    /// the old WAL.
    fn rotate_wal(&self, w: &mut Writer, seqno: u64) -> Result<()> {
        let old = self.switch_wal(w, seqno)?;
        self.vfs.remove_file(&wal_path(&self.dir, old))
    }

    /// Creates the next WAL, whose records follow `seqno`, syncs the directory and makes it the live one;
    /// returns the number of the old one (kept).
    fn switch_wal(&self, w: &mut Writer, seqno: u64) -> Result<u64> {
        let number = w.wal_number + 1;
        let (wal, _) = open::new_wal(&self.vfs, &self.dir, number, seqno, &self.stats)?;
        self.vfs.sync_dir(&self.dir)?;
        w.wal = Some(wal);
        Ok(std::mem::replace(&mut w.wal_number, number))
    }
}

impl Drop for DbInner {
    fn drop(&mut self) {
        self.wait_background();
        if self.read_only || self.poisoned.load(Ordering::Acquire) {
            return;
        }
        let mut w = self.writer.lock();
        // Best effort: `RawDb::close` reports these errors; recovery covers a failure here.
        let _ = if w.dirty {
            self.index.settle().and_then(|()| self.checkpoint(&mut w))
        } else if w.wal.is_some() {
            self.sync_live_wal(&mut w)
        } else {
            Ok(())
        };
    }
}

/// Path of the `number`th WAL file of `dir`.
pub(crate) fn wal_path(dir: &Path, number: u64) -> PathBuf {
    dir.join(crate::files::wal_name(number))
}
