//! [`HashDbIndex`]: the ElimDA-style [`HashIndex`] as the `Db` shell's index (the `hash` family).
//!
//! ## How it fits the shell
//! * **Writes.** The shell logs a batch to its WAL (with the batch's durability) and calls `apply`. Here the
//!   batch's intent (operations + the state after them) goes to the ledger first (see `ledger`), then every
//!   operation to the index, which makes it durable in the region by itself. So what the region holds never
//!   depends on the WAL having been written: a killed process keeps every applied batch, whole, even at
//!   `Durability::None`; the WAL only adds what the region lost (power loss without `msync`).
//! * **Sequence numbers.** The shell applies batches in WAL order with consecutive sequence numbers, so
//!   each `apply` is batch `seqno + 1` of the ledger; `checkpoint(s)` records `s` in a slot of its own, and
//!   `checkpointed_seqno` is the newest slot's: the shell replays only the WAL records after it (replays
//!   are idempotent anyway: a put or delete sets an absolute value). A region newer than the WAL (records
//!   the WAL lost) is fine: it holds a longer prefix of the acknowledged writes.
//! * **Checkpoints** `msync` the region (or write back and sync an image), so a cleanly closed or
//!   checkpointed database survives a power loss in every persistence mode. They finish in the background
//!   (`begin_checkpoint` only notes the seqno): the checkpoint thread first writes back the dirty pages
//!   *without* the lock ([`RegionFile::write_back_ahead`], which claims nothing: the OS may write any page
//!   back at any time), then takes the lock, records the **newest applied batch** (≥ the sealed seqno: the
//!   region holds a longer prefix of the WAL, which recovery accepts) and `msync`s what was stored
//!   meanwhile. The `msync` under the lock is what makes the file one batch boundary: an `msync` while
//!   batches go on would capture a region matching no ledger slot.
//! * **Recovery** = the index's own (superblock, table, log replay), then the ledger's check of records and
//!   digest, re-applying the newest batch if it was cut short (see `ledger`).
//! * **Damage** is `Error::Corruption` naming `hash.pm` (or `hash.batch`) and the byte offset: the header's
//!   and slots' checksums, the index's own checks (offsets reported plus the 4 KiB header), and the digest.
//!
//! ## Concurrency
//! One reader-writer lock: lookups, `len`, `stats` and `check` share it; a batch (with any table rebuild it
//! triggers) and a checkpoint hold it exclusively, so readers see all of a batch or none of it. The shell
//! serialises writers anyway.
//!
//! Cost: a lookup is the index's (DRAM fingerprints, at most about one PM read) plus the lock; a batch adds
//! one lookup per operation (the digest needs the old value) and one ledger persist; opening is O(records)
//! twice (the index's recovery, then the digest).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::{Mutex, RwLock, RwLockReadGuard};

use super::HashIndex;
use super::batch::{Inner, Raw, Step, decode, key_of, puts, value_need};
use super::db_values::DbValues;
use super::family::{HashOptions, Persist};
use super::header::{HEADER_BYTES, Header};
use super::ledger::{BatchFile, Ledger, SLOT_OFFSETS, batch_path};
use super::region::{RegionFile, on_memory_fs};
use crate::error::{Error, Result};
use crate::files::HASH_REGION;
use crate::index::family::IndexContext;
use crate::index::{
    CheckReport, Direction, IndexStats, KeyRange, OrderedIndex, RecordVisitor, WriteOp,
};
use crate::storage::{FileMapping, IoSnapshot, IoStats, OpenOptions};
use crate::types::TypeKind;

/// The error of every ordered operation.
pub const NO_KEY_ORDER: &str = "the hash index has no key order (scans, ranges, counts and samples need an \
                                ordered index family)";

/// The `hash` family's index: the region, the ledger and the index behind one lock.
pub struct HashDbIndex {
    region: Arc<RegionFile>,
    inner: RwLock<Inner>,
    /// A write failed after it started changing the region: refuse everything until reopened.
    broken: AtomicBool,
    /// `hash.values` when values are bytes (not `u64`s), for the write-back ahead of a checkpoint, which
    /// takes no lock.
    values_region: Option<Arc<RegionFile>>,
    /// The seqno `begin_checkpoint` sealed, until `finish_checkpoint` writes it.
    sealed: Mutex<Option<u64>>,
    stats: Arc<IoStats>,
}

impl std::fmt::Debug for HashDbIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HashDbIndex")
            .field("region", &self.region)
            .finish()
    }
}

/// The persistence mode options ask for, for a region at `path` of `ctx`'s directory.
fn persist_of(ctx: &IndexContext<'_>, path: &Path, options: &HashOptions) -> Persist {
    let memory_fs = ctx.vfs.mapping(path) != FileMapping::Unavailable && on_memory_fs(ctx.dir);
    options.persist.resolve(memory_fs)
}

/// The index's damage reports name its region `<...>`: they are damage of `hash.pm` 4 KiB further on.
pub(super) fn in_region(e: Error, path: &Path) -> Error {
    e.relocated(|file, offset| {
        if file.to_string_lossy().starts_with('<') {
            (path.to_path_buf(), offset + HEADER_BYTES)
        } else {
            (file, offset)
        }
    })
}

/// An error while recovering: what the index refuses in its own region is damage.
fn recovering(e: Error, path: &Path) -> Error {
    match in_region(e, path) {
        Error::InvalidArgument(m) | Error::Poisoned(m) => {
            Error::corruption(path, 0, format!("the hash index cannot be recovered: {m}"))
        }
        e => e,
    }
}

impl HashDbIndex {
    /// Creates `hash.pm` and `hash.batch` in the database directory: an empty index, the ledger at seqno 0.
    pub fn create(ctx: &IndexContext<'_>, options: &HashOptions) -> Result<HashDbIndex> {
        options.validate()?;
        let path = ctx.dir.join(HASH_REGION);
        let persist = persist_of(ctx, &path, options);
        let region = Arc::new(RegionFile::create(
            ctx.vfs,
            &path,
            options.region_bytes,
            persist,
            ctx.stats.clone(),
        )?);
        let index = HashIndex::create(region.core_view(), options.index_config())
            .map_err(|e| in_region(e, &path))?;
        let ledger = Ledger::create(&region)?;
        let batch_path = batch_path(ctx.dir);
        let create = OpenOptions {
            create: true,
            truncate: true,
            ..OpenOptions::default()
        };
        let batch = BatchFile {
            file: ctx.vfs.open(&batch_path, create)?,
            path: batch_path,
            sync: persist == Persist::Msync,
            stats: ctx.stats.clone(),
        };
        batch.file.sync_data()?;
        let values = match ctx.value {
            TypeKind::Bytes => Some(DbValues::create(ctx, options, persist)?),
            TypeKind::U64 => None,
        };
        region.sync()?;
        region.take_failure()?;
        let db = HashDbIndex::new(
            region,
            Inner {
                index,
                ledger,
                batch,
                values,
            },
            ctx.stats.clone(),
        );
        db.reserve_ahead()?;
        Ok(db)
    }

    /// Opens `hash.pm` and `hash.batch`, recovers the index and checks it against the ledger.
    pub fn open(ctx: &IndexContext<'_>, options: &HashOptions) -> Result<HashDbIndex> {
        let path = ctx.dir.join(HASH_REGION);
        let persist = persist_of(ctx, &path, options);
        let region = Arc::new(RegionFile::open_expecting(
            ctx.vfs,
            &path,
            persist,
            ctx.stats.clone(),
            options.region_bytes,
            "region",
        )?);
        let batch_path = batch_path(ctx.dir);
        let batch = BatchFile {
            file: ctx.vfs.open(&batch_path, OpenOptions::default())?,
            path: batch_path,
            sync: persist == Persist::Msync,
            stats: ctx.stats.clone(),
        };
        let index = HashIndex::open(region.core_view()).map_err(|e| recovering(e, &path))?;
        let ledger = Ledger::open(&region)?;
        let (values, starts) = match ctx.value {
            TypeKind::Bytes => {
                let (values, starts) = DbValues::open(ctx, options, persist)?;
                (Some(values), starts)
            }
            TypeKind::U64 => (None, Vec::new()),
        };
        let mut inner = Inner {
            index,
            ledger,
            batch,
            values,
        };
        let nonce = inner.ledger.nonce();
        let want = inner.ledger.slot.after;
        let mut found = inner.scan_state(nonce).map_err(|e| recovering(e, &path))?;
        if found != want {
            // The newest batch was cut short (or the region is damaged): apply it again, then compare.
            let ops = inner.ledger.ops(&inner.batch)?;
            let mut steps = Vec::with_capacity(ops.len());
            for (key, new) in ops {
                let old = inner.index.get(key).map_err(|e| recovering(e, &path))?;
                steps.push(Step { key, new, old });
                inner
                    .apply_steps(&steps[steps.len() - 1..])
                    .map_err(|e| recovering(e, &path))?;
            }
            region.take_failure()?;
            found = inner.scan_state(nonce).map_err(|e| recovering(e, &path))?;
        }
        // Only now is every value the index will name named: the rest of the log's run is orphans.
        if let Some(values) = &mut inner.values {
            values.drop_orphans(&inner.index, &starts)?;
        }
        if found != want || inner.index.len() != found.records {
            return Err(Error::corruption(
                &path,
                SLOT_OFFSETS[0],
                format!(
                    "the hash index holds {} records (counted {}, digest {:#018x}), but its ledger says {} \
                     records with digest {:#018x} after batch {}",
                    inner.index.len(),
                    found.records,
                    found.digest,
                    want.records,
                    want.digest,
                    inner.ledger.slot.seqno
                ),
            ));
        }
        let db = HashDbIndex::new(region, inner, ctx.stats.clone());
        db.reserve_ahead()?;
        Ok(db)
    }

    fn new(region: Arc<RegionFile>, inner: Inner, stats: Arc<IoStats>) -> HashDbIndex {
        region.advise_random();
        HashDbIndex {
            region,
            values_region: inner.values.as_ref().map(|v| v.region().clone()),
            sealed: Mutex::new(None),
            inner: RwLock::new(inner),
            broken: AtomicBool::new(false),
            stats,
        }
    }

    fn usable(&self) -> Result<()> {
        if self.broken.load(Ordering::Acquire) {
            return Err(Error::Poisoned(
                "a write to the hash index failed part-way; reopen the database to recover it"
                    .into(),
            ));
        }
        Ok(())
    }

    fn read(&self) -> Result<RwLockReadGuard<'_, Inner>> {
        let inner = self.inner.read();
        self.usable()?;
        Ok(inner)
    }

    /// Allocates the region for a batch of `puts` puts ahead of use (`ResourceExhausted` if it cannot).
    fn reserve(&self, puts: u64) -> Result<()> {
        let end = self.inner.read().room_for(&self.region, puts)?;
        self.region.reserve(end)
    }

    /// Allocates what the next write may need, or the whole region when it is full (the next write is then
    /// refused; opening is not).
    fn reserve_ahead(&self) -> Result<()> {
        let room = self.inner.read().room_for(&self.region, 0);
        match room {
            Ok(end) => self.region.reserve(end),
            Err(Error::ResourceExhausted(_)) => self.region.reserve(self.region.header().total),
            Err(e) => Err(e),
        }
    }

    /// Cleans the value log until `batch`'s values fit (bytes values only). A batch larger than the log can
    /// ever hold is `InvalidArgument`; a log full of live values `ResourceExhausted` (cleaning stops between
    /// stretches, so the handle stays usable); any other failure breaks the handle.
    fn value_room(&self, inner: &mut Inner, batch: &[Raw<'_>]) -> Result<()> {
        let Some(values) = &inner.values else {
            return Ok(());
        };
        let need = value_need(batch);
        if need > values.max_need() {
            return Err(Error::invalid(format!(
                "a batch whose values need {need} bytes of value log, more than the {} one batch may use \
                 (option value_log_bytes)",
                values.max_need()
            )));
        }
        match inner.make_value_room(batch) {
            Ok(()) => Ok(()),
            Err(e @ Error::ResourceExhausted(_)) => Err(e),
            Err(e) => {
                self.broken.store(true, Ordering::Release);
                Err(self.err(e))
            }
        }
    }

    fn err(&self, e: Error) -> Error {
        in_region(e, self.region.path())
    }

    /// Records `seqno` in a ledger slot of its own and makes the region durable in its file, holding the
    /// lock (`inner`). Syncs the value log first: a synced index never names a value that is not.
    fn write_checkpoint(&self, inner: &mut Inner, seqno: u64) -> Result<()> {
        self.usable()?;
        let after = inner.ledger.slot.after;
        let result = inner
            .values
            .as_ref()
            .map_or(Ok(()), DbValues::sync)
            .and_then(|()| {
                inner
                    .ledger
                    .commit(&self.region, &inner.batch, seqno, after, &[])
            })
            .and_then(|()| self.region.sync())
            .and_then(|()| self.region.take_failure());
        if let Err(e) = result {
            self.broken.store(true, Ordering::Release);
            return Err(e);
        }
        Ok(())
    }

    /// The index's and the ledger's figures for `stats` (under the family's name).
    fn figures(&self, inner: &Inner) -> serde_json::Value {
        let ix = &inner.index;
        serde_json::json!({
            "records": ix.len(),
            "load_factor": ix.load_factor(),
            "capacity_slots": ix.capacity(),
            "buckets": ix.buckets(),
            "dram_bytes": ix.dram_bytes(),
            "pm_bytes_used": ix.pm_bytes_used(),
            "region_bytes": self.region.header().total,
            "region_allocated_bytes": self.region.allocated_bytes(),
            "region_backing": self.region.backing_name(),
            "persist": self.region.persist_mode().name(),
            "ledger_seqno": inner.ledger.slot.seqno,
            "counters": ix.stats(),
            "values": inner.values.as_ref().map(DbValues::figures),
        })
    }
}

impl OrderedIndex for HashDbIndex {
    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        let key = key_of(key)?;
        let inner = self.read()?;
        match inner.index.get(key).map_err(|e| self.err(e))? {
            Some(v) => {
                match &inner.values {
                    None => {
                        out.clear();
                        out.extend_from_slice(&v.to_be_bytes());
                    }
                    Some(values) => values.read(key, v, out)?,
                }
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Refuses merges, weights and values of the wrong size, and a batch the region (or the value log, which
    /// is cleaned here if need be) has no room for — before the shell logs it, so a logged batch always fits.
    fn validate_batch(&self, ops: &[WriteOp]) -> Result<()> {
        let batch = decode(ops, self.values_region.is_some())?;
        self.usable()?;
        self.reserve(puts(&batch))?;
        if self.values_region.is_some() {
            let mut inner = self.inner.write();
            self.usable()?;
            self.value_room(&mut inner, &batch)?;
        }
        Ok(())
    }

    fn apply(&self, ops: &[WriteOp]) -> Result<()> {
        let batch = decode(ops, self.values_region.is_some())?;
        let mut inner = self.inner.write();
        self.usable()?;
        let end = inner.room_for(&self.region, puts(&batch))?;
        self.region.reserve(end)?;
        self.value_room(&mut inner, &batch)?;
        // From here on a failure may leave the region ahead of memory: the handle refuses further work.
        let inner = &mut *inner;
        let seqno = inner.ledger.slot.seqno + 1;
        let result = inner.plan(&batch).and_then(|after| {
            let stored = inner.store_values(&batch)?;
            let steps = inner.steps(&stored)?;
            inner
                .values
                .as_ref()
                .map_or(Ok(()), DbValues::take_failure)?;
            inner
                .ledger
                .commit(&self.region, &inner.batch, seqno, after, &stored)?;
            inner.apply_steps(&steps)?;
            self.region.take_failure()
        });
        if let Err(e) = result {
            self.broken.store(true, Ordering::Release);
            return Err(self.err(e));
        }
        Ok(())
    }

    fn scan_visit(
        &self,
        _: &KeyRange,
        _: Direction,
        _: usize,
        _: &mut RecordVisitor<'_>,
    ) -> Result<usize> {
        Err(Error::invalid(NO_KEY_ORDER))
    }

    fn len(&self) -> u64 {
        self.inner.read().index.len()
    }

    fn max_key_len(&self) -> usize {
        8
    }

    fn checkpoint(&self, seqno: u64) -> Result<()> {
        self.write_checkpoint(&mut self.inner.write(), seqno)
    }

    /// Notes `seqno`; the checkpoint thread writes it (module docs).
    fn begin_checkpoint(&self, seqno: u64) -> Result<bool> {
        self.usable()?;
        *self.sealed.lock() = Some(seqno);
        Ok(true)
    }

    /// Writes back what is dirty without the lock, then records the newest applied batch (at least the
    /// sealed seqno) and syncs the rest under it (module docs).
    fn finish_checkpoint(&self) -> Result<()> {
        let Some(sealed) = self.sealed.lock().take() else {
            return Ok(());
        };
        if let Some(values) = &self.values_region {
            values.write_back_ahead();
        }
        self.region.write_back_ahead();
        let mut inner = self.inner.write();
        let seqno = sealed.max(inner.ledger.slot.seqno);
        self.write_checkpoint(&mut inner, seqno)
    }
    fn checkpointed_seqno(&self) -> u64 {
        self.inner.read().ledger.slot.seqno
    }

    /// The index's structural self-check, its records and digest against the ledger, and the header.
    fn check(&self) -> Result<CheckReport> {
        let inner = self.read()?;
        let path = self.region.path();
        let mut head = [0u8; 64];
        self.region.read(0, &mut head)?;
        let header = Header::decode(&head, path)?;
        if header != self.region.header() {
            return Err(Error::corruption(
                path,
                0,
                "the hash region's header changed while open",
            ));
        }
        inner.index.check_invariants().map_err(|e| self.err(e))?;
        let found = inner
            .scan_state(inner.ledger.nonce())
            .map_err(|e| self.err(e))?;
        let want = inner.ledger.slot.after;
        if found != want || found.records != inner.index.len() {
            return Err(Error::corruption(
                path,
                SLOT_OFFSETS[0],
                format!(
                    "the hash index holds {} records with digest {:#018x}, its ledger says {} with {:#018x}",
                    found.records, found.digest, want.records, want.digest
                ),
            ));
        }
        Ok(CheckReport {
            pages_checked: inner.index.buckets(),
            records: found.records,
            height: 0,
            free_pages: 0,
            wal_records: 0,
            notes: Vec::new(),
        })
    }

    fn stats(&self) -> IndexStats {
        let inner = self.inner.read();
        IndexStats {
            records: inner.index.len(),
            height: 0,
            pages: inner.index.pm_bytes_used().div_ceil(4096),
            free_pages: 0,
            page_size: 4096,
            cache_frames: 0,
            cache_pages: 0,
            cache_dirty: 0,
            checkpointed_seqno: inner.ledger.slot.seqno,
        }
    }

    fn io(&self) -> IoSnapshot {
        self.stats.snapshot()
    }

    fn family_stats(&self) -> Option<serde_json::Value> {
        Some(self.figures(&self.inner.read()))
    }
}
