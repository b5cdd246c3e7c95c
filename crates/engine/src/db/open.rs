//! Creating, opening (read-write, read-only, repair) and starting a handle: the files a database starts with,
//! the locks, the overlay of read-only handles, and the recovery that `recovery` does, put together.

use super::manifest::{self, FORMAT_VERSION, Manifest};
use super::recovery::{self, OpenMode};
use super::{Config, DbInner, Options, RawDb, RecoveryInfo, Writer, wal_path};
use crate::error::{Error, Result};
use crate::files::LOCK;
use crate::index::OrderedIndex;
use crate::index::family::IndexContext;
use crate::storage::{IoStats, LogHeader, LogWriter, Vfs, VfsLock};
use parking_lot::Mutex;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

impl RawDb {
    /// Creates a database in `dir` (created if missing; must not already hold a database). A create that fails
    /// removes what it made (the directory too, if it made it).
    pub fn create(dir: impl AsRef<Path>, config: &Config, options: &Options) -> Result<RawDb> {
        let dir = dir.as_ref();
        // Everything the family would refuse is refused before any file is made.
        config
            .index
            .check(config.key, config.value, config.page_size)?;
        let vfs = options.vfs.clone();
        let existed = vfs.exists(dir);
        if existed && vfs.exists(&dir.join(manifest::MANIFEST)) {
            return Err(Error::invalid(format!(
                "{} already holds a database",
                dir.display()
            )));
        }
        vfs.create_dir_all(dir)?;
        let before = vfs.list_dir(dir)?;
        let lock = match vfs.lock(&dir.join(LOCK)) {
            Ok(lock) => lock,
            Err(e) => {
                remove_created(vfs.as_ref(), dir, existed, &before);
                return Err(e);
            }
        };
        match Self::create_locked(dir, config, options, lock) {
            Ok(db) => Ok(db),
            Err(e) => {
                // The lock guard was dropped with the failed attempt.
                remove_created(vfs.as_ref(), dir, existed, &before);
                Err(e)
            }
        }
    }

    fn create_locked(
        dir: &Path,
        config: &Config,
        options: &Options,
        lock: Box<dyn VfsLock>,
    ) -> Result<RawDb> {
        let vfs = options.vfs.clone();
        if vfs.exists(&dir.join(manifest::MANIFEST)) {
            return Err(Error::invalid(format!(
                "{} already holds a database",
                dir.display()
            )));
        }
        let stats = Arc::new(IoStats::new());
        let m = Manifest {
            format_version: FORMAT_VERSION,
            index: config.index.clone(),
            key: config.key,
            value: config.value,
            page_size: config.page_size,
            durability: config.durability,
            direct_io: config.direct_io,
        };
        let index = open_index(&vfs, dir, &m, options, &stats, true)?;
        let wal = new_wal(&vfs, dir, 1, 0, &stats)?;
        vfs.sync_dir(dir)?;
        // The manifest is written last: a directory without one is not a database, so a crash during
        // creation leaves nothing half-made that could be opened.
        m.write(vfs.as_ref(), dir, &stats)?;
        Ok(Self::start(
            dir,
            vfs,
            m,
            index,
            stats,
            Some(lock),
            options,
            Some(wal),
            0,
            RecoveryInfo::default(),
        ))
    }

    /// Opens an existing database and recovers it: replays the WAL, checkpoints what it replayed and starts a
    /// new WAL. Damage is `Error::Corruption` naming the file and offset (see [`RawDb::repair`]).
    pub fn open(dir: impl AsRef<Path>, options: &Options) -> Result<RawDb> {
        Self::open_mode(dir.as_ref(), options, OpenMode::ReadWrite)
    }

    /// Opens a database for reading only: takes a shared lock (read-only handles may run beside each other,
    /// never beside a writer), replays the WAL in memory and never writes a byte, so it works on a read-only
    /// file system and on a full disk. Writes, flushes, checkpoints and bulk loads through the handle are
    /// `Error::InvalidArgument`. Memory: the index's work of replaying the WAL is kept in memory (as much as
    /// the WAL holds).
    pub fn open_read_only(dir: impl AsRef<Path>, options: &Options) -> Result<RawDb> {
        Self::open_mode(dir.as_ref(), options, OpenMode::ReadOnly)
    }

    /// Opens a damaged database by dropping what cannot be recovered instead of refusing it: a WAL damaged in
    /// the middle is cut at the damage, a missing or unreadable WAL is replaced, an index that fell back to an
    /// older checkpoint is accepted as it is. Returns what was dropped (also in [`RawDb::recovery`]). Damage
    /// inside the index itself (a page that fails its checksum) cannot be repaired this way: `check` still
    /// reports it.
    pub fn repair(dir: impl AsRef<Path>, options: &Options) -> Result<RecoveryInfo> {
        let db = Self::open_mode(dir.as_ref(), options, OpenMode::Repair)?;
        let info = db.recovery().clone();
        db.close()?;
        Ok(info)
    }

    fn open_mode(dir: &Path, options: &Options, mode: OpenMode) -> Result<RawDb> {
        let base_vfs = options.vfs.clone();
        if !base_vfs.exists(dir) {
            return Err(Error::invalid(format!("{} does not exist", dir.display())));
        }
        let read_only = mode == OpenMode::ReadOnly;
        let lock = if read_only {
            read_only_lock(base_vfs.as_ref(), dir)?
        } else {
            Some(base_vfs.lock(&dir.join(LOCK))?)
        };
        // A read-only handle reaches the files through an overlay that keeps every change in memory.
        let vfs = if read_only {
            read_only_vfs(base_vfs)
        } else {
            base_vfs
        };
        let stats = Arc::new(IoStats::new());
        let m = Manifest::read(vfs.as_ref(), dir, &stats)?;
        let index = open_index(&vfs, dir, &m, options, &stats, false)
            .map_err(|e| missing_file_is_damage(e, dir))?;
        let rec = recovery::recover(&vfs, dir, &stats, index.as_ref(), mode)
            .map_err(|e| missing_file_is_damage(e, dir))?;
        let mut info = rec.info;
        let wal = if read_only {
            None
        } else {
            // A spare checkpoint slot that is unusable (damage, or a checkpoint a crash tore) is rewritten by a
            // fresh checkpoint, as is everything replayed; then a new WAL replaces the old ones.
            let spare = index.spare_checkpoint_damage();
            if info.replayed_records > 0 || spare.is_some() || !info.repairs.is_empty() {
                // Background work the replay started (a dynamized index's reconstructions) finishes first, so
                // the checkpoint lists every shard file it wrote and no file of this recovery is left over.
                index.settle()?;
                index.checkpoint(rec.last_seqno)?;
            }
            info.spare_checkpoint_rewritten = spare.map(|d| d.to_string());
            let number = rec.wal_numbers.last().map_or(1, |n| n + 1);
            let wal = new_wal(&vfs, dir, number, rec.last_seqno, &stats)?;
            vfs.sync_dir(dir)?;
            for &old in &rec.wal_numbers {
                vfs.remove_file(&wal_path(dir, old))?;
            }
            Some(wal)
        };
        let mut db = Self::start(
            dir,
            vfs,
            m,
            index,
            stats,
            lock,
            options,
            wal,
            rec.last_seqno,
            info,
        );
        if read_only {
            let inner = Arc::get_mut(&mut db.inner).expect("the only handle");
            inner.replayed_wal = rec.live_wal;
            inner.checkpoint_interrupted = rec.checkpoint_interrupted;
        }
        Ok(db)
    }

    /// Creates the database if `dir` has no manifest, else opens it (the config must then match).
    pub fn open_or_create(
        dir: impl AsRef<Path>,
        config: &Config,
        options: &Options,
    ) -> Result<RawDb> {
        let dir = dir.as_ref();
        if options.vfs.exists(&dir.join(manifest::MANIFEST)) {
            let db = Self::open(dir, options)?;
            db.expect_types(config.index.kind(), config.key, config.value)?;
            Ok(db)
        } else {
            Self::create(dir, config, options)
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn start(
        dir: &Path,
        vfs: Arc<dyn Vfs>,
        manifest: Manifest,
        index: Box<dyn OrderedIndex>,
        stats: Arc<IoStats>,
        lock: Option<Box<dyn VfsLock>>,
        options: &Options,
        wal: Option<(LogWriter, u64)>,
        last_seqno: u64,
        recovery: RecoveryInfo,
    ) -> RawDb {
        let durability = options.durability.unwrap_or(manifest.durability);
        let read_only = wal.is_none();
        let (wal, wal_number) = match wal {
            Some((w, n)) => (Some(w), n),
            None => (None, 0),
        };
        RawDb {
            inner: Arc::new(DbInner {
                dir: dir.to_path_buf(),
                vfs,
                manifest,
                index,
                stats,
                writer: Mutex::new(Writer {
                    wal,
                    wal_number,
                    next_seqno: last_seqno + 1,
                    dirty: false,
                    scratch: Vec::new(),
                }),
                poisoned: AtomicBool::new(false),
                poison_reason: Mutex::new(String::new()),
                durability,
                checkpoint_wal_bytes: options.checkpoint_wal_bytes,
                recovery,
                read_only,
                replayed_wal: None,
                checkpoint_interrupted: false,
                background: Mutex::default(),
                background_done: parking_lot::Condvar::new(),
                _lock: lock,
            }),
        }
    }
}

/// Creates WAL `number` of `dir` whose records follow checkpoint `base_seqno` (synced; the caller syncs the
/// directory).
pub(super) fn new_wal(
    vfs: &Arc<dyn Vfs>,
    dir: &Path,
    number: u64,
    base_seqno: u64,
    stats: &Arc<IoStats>,
) -> Result<(LogWriter, u64)> {
    let header = LogHeader {
        number,
        base_seqno,
        follows_unsynced: false,
    };
    let wal = LogWriter::create(vfs, &wal_path(dir, number), header, stats.clone())?;
    Ok((wal, number))
}

/// The shared lock of a read-only handle; none if the directory has no LOCK file (e.g. a copy on a read-only
/// medium): no writer can run there either.
fn read_only_lock(vfs: &dyn Vfs, dir: &Path) -> Result<Option<Box<dyn VfsLock>>> {
    let path = dir.join(LOCK);
    if !vfs.exists(&path) {
        return Ok(None);
    }
    vfs.lock_shared(&path).map(Some)
}

/// The file system a read-only handle sees: the real files, with every change kept in memory.
fn read_only_vfs(vfs: Arc<dyn Vfs>) -> Arc<dyn Vfs> {
    Arc::new(crate::storage::OverlayVfs::new(vfs))
}

/// A file of the database that does not exist is damage, not an I/O error: the error names it.
fn missing_file_is_damage(e: Error, dir: &Path) -> Error {
    match e {
        Error::Io { path, source }
            if source.kind() == std::io::ErrorKind::NotFound && path.starts_with(dir) =>
        {
            Error::corruption(
                &path,
                0,
                format!("the database's file is missing ({source})"),
            )
        }
        e => e,
    }
}

/// Best-effort clean-up of a failed create: removes the entries of `dir` that were not in `before`, and `dir`
/// itself if it did not exist.
fn remove_created(vfs: &dyn Vfs, dir: &Path, existed: bool, before: &[String]) {
    if let Ok(names) = vfs.list_dir(dir) {
        for name in names.iter().filter(|n| !before.contains(n)) {
            let _ = vfs.remove_file(&dir.join(name));
        }
    }
    if !existed {
        let _ = vfs.remove_dir(dir);
    }
}

/// Creates or opens the index the manifest names, through the family registry.
fn open_index(
    vfs: &Arc<dyn Vfs>,
    dir: &Path,
    m: &Manifest,
    options: &Options,
    stats: &Arc<IoStats>,
    create: bool,
) -> Result<Box<dyn OrderedIndex>> {
    let ctx = IndexContext {
        vfs,
        dir,
        stats,
        key: m.key,
        value: m.value,
        page_size: m.page_size,
        direct_io: m.direct_io,
        options,
    };
    m.index.instantiate(&ctx, create)
}
