//! [`DbValues`]: the value log of a `hash` database with bytes values — the file `hash.values`, a region
//! of its own (the family's header page, then a [`ValueLog`] seen through a [`CoreView`]) beside `hash.pm`,
//! whose index maps each key to its value's 8 B handle.
//!
//! ## Protocol (with the ledger, see `db_index`)
//! * A batch first makes room for all its values (cleaning, see [`ValueStore`]: repoints live keys, never
//!   changes the bytes a key maps to), then appends and persists them, *then* writes its ledger slot (whose
//!   operations are the handles) and applies the handles to the index. So every handle a slot or the index
//!   names is a record written and persisted before it, and nothing cleans between a slot and its
//!   application: re-applying a cut-short batch at open finds its records.
//! * Open: the index's recovery, the log's scan from its durable tail, the ledger's check (re-applying a
//!   cut-short batch), and only then the orphans (records no key names, after the last named one) dropped.
//! * Checkpoints `msync` `hash.values` before `hash.pm`, so a synced index never names an unsynced value.
//! * The file is sparse, `value_log_bytes` + 4 KiB long; blocks are allocated just ahead of the head during
//!   the first lap (like `hash.pm`'s reservation), all of them once the ring wraps.
//!
//! Cost: a put adds one record write and persist (16 B header + value rounded to 16 B); a positive get one
//! more read of the record; cleaning copies the live part of what it passes.

use std::path::Path;
use std::sync::Arc;

use super::HashIndex;
use super::core_view::CoreView;
use super::family::{HashOptions, Persist};
use super::header::HEADER_BYTES;
use super::region::RegionFile;
use super::values::{CONTROL_BYTES, ValueLog, ValueStats, ValueStore};
use crate::error::Result;
use crate::files::HASH_VALUES;
use crate::index::family::IndexContext;

/// The value log of a bytes-valued hash database.
pub struct DbValues {
    region: Arc<RegionFile>,
    store: ValueStore<CoreView>,
}

/// The log's seed from the file's nonce (records of another file or lap never validate).
fn seed(region: &RegionFile) -> u64 {
    region.header().nonce ^ 0x5641_4C55_4546_494C
}

impl DbValues {
    pub fn path(dir: &Path) -> std::path::PathBuf {
        dir.join(HASH_VALUES)
    }

    /// Creates `hash.values` (an empty log, persisted).
    pub fn create(
        ctx: &IndexContext<'_>,
        options: &HashOptions,
        persist: Persist,
    ) -> Result<DbValues> {
        let path = Self::path(ctx.dir);
        let total = HEADER_BYTES + options.value_log_bytes;
        let region = Arc::new(RegionFile::create(
            ctx.vfs,
            &path,
            total,
            persist,
            ctx.stats.clone(),
        )?);
        region.reserve(HEADER_BYTES + CONTROL_BYTES)?;
        let log = ValueLog::create(region.core_view(), seed(&region))
            .map_err(|e| super::db_index::in_region(e, &path))?;
        region.sync()?;
        region.take_failure()?;
        Ok(DbValues {
            store: ValueStore::new(log, 0),
            region,
        })
    }

    /// Opens `hash.values` and scans its log; also returns where the run's records start (for
    /// [`drop_orphans`](Self::drop_orphans), once the index is complete).
    pub fn open(
        ctx: &IndexContext<'_>,
        options: &HashOptions,
        persist: Persist,
    ) -> Result<(DbValues, Vec<u64>)> {
        let path = Self::path(ctx.dir);
        let region = Arc::new(RegionFile::open_expecting(
            ctx.vfs,
            &path,
            persist,
            ctx.stats.clone(),
            HEADER_BYTES + options.value_log_bytes,
            "value log",
        )?);
        let (log, starts) = ValueLog::open(region.core_view(), seed(&region))
            .map_err(|e| super::db_index::in_region(e, &path))?;
        let values = DbValues {
            store: ValueStore::new(log, 0),
            region,
        };
        values.reserve(0)?;
        Ok((values, starts))
    }

    fn err(&self, e: crate::error::Error) -> crate::error::Error {
        super::db_index::in_region(e, self.region.path())
    }

    /// Drops the records after the last one the index names (see the module docs: after the ledger check).
    pub fn drop_orphans(&mut self, index: &HashIndex<CoreView>, starts: &[u64]) -> Result<()> {
        self.store
            .drop_orphans(index, starts)
            .map_err(|e| self.err(e))
    }

    /// Allocates the file up to where appends of `need` more bytes may reach.
    fn reserve(&self, need: u64) -> Result<()> {
        let log = self.store.log();
        let reach = (log.head() + need).min(log.capacity());
        self.region.reserve(HEADER_BYTES + CONTROL_BYTES + reach)
    }

    /// The most bytes of records one batch may append (see [`super::values::batch_need`]).
    pub fn max_need(&self) -> u64 {
        self.store.max_need()
    }

    /// Cleans until appends of `need` bytes fit, and allocates the file for them.
    pub fn make_room(&mut self, index: &mut HashIndex<CoreView>, need: u64) -> Result<()> {
        let result = self.store.make_room(index, need);
        result
            .and_then(|()| self.region.take_failure())
            .and_then(|()| self.reserve(need))
            .map_err(|e| self.err(e))
    }

    /// Appends and persists `key`'s value; its handle.
    pub fn append(&mut self, key: u64, value: &[u8]) -> Result<u64> {
        self.store.append(key, value).map_err(|e| self.err(e))
    }

    /// Reads `key`'s value `handle` into `out`.
    pub fn read(&self, key: u64, handle: u64, out: &mut Vec<u8>) -> Result<()> {
        self.store.read(key, handle, out).map_err(|e| self.err(e))
    }

    /// A write-back or sync that failed since the last call.
    pub fn take_failure(&self) -> Result<()> {
        self.region.take_failure()
    }

    /// The file `hash.values`.
    pub fn region(&self) -> &Arc<RegionFile> {
        &self.region
    }

    /// Makes the file durable.
    pub fn sync(&self) -> Result<()> {
        self.region.sync()?;
        self.region.take_failure()
    }

    /// The figures `stats` shows under `hash.values`.
    pub fn figures(&self) -> serde_json::Value {
        let log = self.store.log();
        let ValueStats {
            cleanings,
            copied,
            cleaned_bytes,
            appended_bytes,
        } = self.store.stats();
        serde_json::json!({
            "log_bytes": log.capacity(),
            "log_used_bytes": log.used(),
            "allocated_bytes": self.region.allocated_bytes(),
            "cleanings": cleanings,
            "copied": copied,
            "cleaned_bytes": cleaned_bytes,
            "appended_bytes": appended_bytes,
        })
    }
}
