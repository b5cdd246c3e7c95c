//! The hash family's region file `hash.pm`: one persistent-memory region per database, reached through the
//! database's [`Vfs`], with a small header of the family's own in front of the index's region.
//!
//! ## File
//! `[0, 4096)` the family's page ([`Header`] at 0, the ledger's two slots at 1024 and 1152, see `ledger`),
//! then `[4096, total)` the ElimDA-style index's region ([`CoreView`] shows it to the index at offset 0, so
//! its 256 B XPLines and 4 KiB buckets stay aligned in the file).
//!
//! ## Size and growth
//! The index records its region's length in its superblock and places every table by offset inside it, so
//! the region never moves or grows; it is **reserved virtually** instead. `total` is fixed at creation
//! (`-o region_bytes`, 4 GiB by default) and recorded in the header; the file is sparse and mapped whole,
//! which costs address space only, and blocks are allocated (`fallocate`) just ahead of what the next batch
//! may write ([`RegionFile::reserve`]; `batch` computes how far). A doubling writes the new table into
//! untouched space after the old one, whose blocks stay allocated until a later table fits below; so the
//! allocated part is about twice the current table, and a region holds about `total / 128` keys. A batch that
//! could need a table past `total` is refused (`ResourceExhausted`) before anything is logged. Remapping or a
//! chain of regions would need the index to move or split its tables; a virtual reservation does not.
//!
//! ## Backings ([`FileMapping`] of the Vfs)
//! * **Shared mapping** (real files): stores land in the OS page cache at once, so every store survives the
//!   process being killed; a fence is `sfence` (eADR, ADR) or `sfence` + `msync` of the file (msync mode).
//! * **Private copy** (read-only handles over real files): a copy-on-write mapping; nothing reaches the file.
//! * **Image** (any other Vfs: in memory, fault injection, overlays of those): the bytes live in anonymous
//!   memory, loaded from the file at open; every fence writes the lines stored since the previous fence back
//!   through the Vfs (`pwrite`), and msync mode `fdatasync`s them. So a killed process keeps exactly what a
//!   shared mapping would keep, and a simulated power loss keeps what was synced.
//!
//! ## Failures
//! [`Pm::fence`] cannot return an error, so a failed write-back or sync is remembered and reported by the next
//! [`RegionFile::take_failure`]; the family checks it before acknowledging a write (and refuses every later
//! one, as the region may then lag behind memory).
//!
//! ## Checkpoints
//! [`RegionFile::sync`] makes every stored byte durable (under the family's lock, so that it captures one
//! batch boundary). Before it, outside the lock, [`RegionFile::write_back_ahead`] writes back what is dirty
//! without claiming anything, so the locked `msync` finds only what was stored meanwhile.
//!
//! Cost: the shared backing adds one bounds check per access; the image backing one mutex per store and one
//! `pwrite` per run of dirty lines per fence (tests and read-only overlays only); msync mode one `msync` per
//! fence (what makes each persist point survive power loss on a regular file).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::core_view::CoreView;
use super::family::Persist;
use super::header::{HEADER_BYTES, Header, TOTAL_OFFSET};
use crate::error::{Error, Result};
use crate::storage::pm::{CACHE_LINE, MmapRegion, Pm};
use crate::storage::vfs::read_exact_at;
use crate::storage::{FileKind, FileMapping, IoStats, OpenOptions, Vfs, VfsFile};

/// Bytes read per step when an image is loaded from its file.
const LOAD_STEP: usize = 1 << 20;
/// Most write-back passes of [`RegionFile::write_back_ahead`].
pub const WRITE_BACK_PASSES: u32 = 4;
/// A write-back pass this short leaves little for the next one: stop there.
const WRITE_BACK_SETTLED: Duration = Duration::from_millis(10);

/// How the region's bytes are reached (module docs).
enum Backing {
    Shared {
        map: MmapRegion,
        file: std::fs::File,
    },
    Private {
        map: MmapRegion,
    },
    Image {
        map: MmapRegion,
        file: Box<dyn VfsFile>,
        dirty: Mutex<Vec<(u64, u64)>>,
    },
}

/// `hash.pm`: the header page and the index's region behind one of the backings.
pub struct RegionFile {
    backing: Backing,
    path: PathBuf,
    header: Header,
    persist: Persist,
    stats: Arc<IoStats>,
    /// The first write-back or sync that failed since the last `take_failure`.
    failure: Mutex<Option<Error>>,
    /// Bytes from offset 0 known to be allocated (shared backing).
    reserved: AtomicU64,
}

impl std::fmt::Debug for RegionFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegionFile")
            .field("path", &self.path)
            .field("backing", &self.backing_name())
            .field("persist", &self.persist)
            .field("total", &self.header.total)
            .finish()
    }
}

/// True when `dir` is on a memory file system (tmpfs, ramfs): nothing there survives a power loss anyway.
pub fn on_memory_fs(dir: &Path) -> bool {
    const TMPFS_MAGIC: u64 = 0x0102_1994;
    const RAMFS_MAGIC: u64 = 0x8584_58f6;
    rustix::fs::statfs(dir)
        .map(|s| [TMPFS_MAGIC, RAMFS_MAGIC].contains(&((s.f_type as u64) & 0xFFFF_FFFF)))
        .unwrap_or(false)
}

impl RegionFile {
    /// Creates `path` (replacing a file there: the shell creates only where no database is) as a region of
    /// `total` bytes with a fresh header (persisted).
    pub fn create(
        vfs: &Arc<dyn Vfs>,
        path: &Path,
        total: u64,
        persist: Persist,
        stats: Arc<IoStats>,
    ) -> Result<RegionFile> {
        let mode = persist.pm_mode();
        let backing = match vfs.mapping(path) {
            FileMapping::Shared => {
                // A region left by a creation a crash cut short (no manifest, so no database) is replaced.
                match std::fs::remove_file(path) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        return Err(Error::io(path, e));
                    }
                    _ => {}
                }
                let map = MmapRegion::create(path, total, mode)?;
                let file = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(path)
                    .map_err(|e| Error::io(path, e))?;
                Backing::Shared { map, file }
            }
            FileMapping::PrivateCopy => {
                return Err(Error::invalid(format!(
                    "{} cannot be created through a read-only handle",
                    path.display()
                )));
            }
            FileMapping::Unavailable => {
                let create = OpenOptions {
                    create: true,
                    truncate: true,
                    ..OpenOptions::default()
                };
                Backing::Image {
                    map: MmapRegion::anonymous_sparse(total, mode)?,
                    file: vfs.open(path, create)?,
                    dirty: Mutex::new(Vec::new()),
                }
            }
        };
        let header = Header {
            total,
            nonce: rand::random(),
        };
        let region = RegionFile::new(backing, path, header, persist, stats);
        region.write(0, &header.encode())?;
        region.persist(0, 64)?;
        region.take_failure()?;
        Ok(region)
    }

    /// [`open`](Self::open), then checks that the header's length is `expected` (what the manifest's
    /// options say); `what` names the file in the error.
    pub fn open_expecting(
        vfs: &Arc<dyn Vfs>,
        path: &Path,
        persist: Persist,
        stats: Arc<IoStats>,
        expected: u64,
        what: &str,
    ) -> Result<RegionFile> {
        let region = RegionFile::open(vfs, path, persist, stats)?;
        let total = region.header().total;
        if total != expected {
            return Err(Error::corruption(
                path,
                TOTAL_OFFSET,
                format!(
                    "the {what} file holds {total} bytes, the manifest's options say {expected}"
                ),
            ));
        }
        Ok(region)
    }

    /// Opens the region at `path` and checks its header (and, for a mapping, that the file has exactly the
    /// header's length: a shorter file would fault on access). `read_only` handles never write the file.
    pub fn open(
        vfs: &Arc<dyn Vfs>,
        path: &Path,
        persist: Persist,
        stats: Arc<IoStats>,
    ) -> Result<RegionFile> {
        let mode = persist.pm_mode();
        let mapped_len = || -> Result<u64> {
            let len = std::fs::metadata(path)
                .map_err(|e| Error::io(path, e))?
                .len();
            if len < 2 * HEADER_BYTES || !len.is_multiple_of(HEADER_BYTES) {
                return Err(Error::corruption(
                    path,
                    len,
                    format!("hash region file of {len} bytes"),
                ));
            }
            Ok(len)
        };
        let (backing, header) = match vfs.mapping(path) {
            mapping @ (FileMapping::Shared | FileMapping::PrivateCopy) => {
                let len = mapped_len()?;
                let (map, file) = if mapping == FileMapping::Shared {
                    let map = MmapRegion::open(path, mode)?;
                    let file = std::fs::OpenOptions::new()
                        .read(true)
                        .write(true)
                        .open(path)
                        .map_err(|e| Error::io(path, e))?;
                    (map, Some(file))
                } else {
                    (MmapRegion::open_private(path, mode)?, None)
                };
                let header = Header::decode(&map.read_vec(0, 64)?, path)?;
                if header.total != len {
                    return Err(Error::corruption(
                        path,
                        len.min(header.total),
                        format!(
                            "the file holds {len} bytes, its header says {}",
                            header.total
                        ),
                    ));
                }
                let backing = match file {
                    Some(file) => Backing::Shared { map, file },
                    None => Backing::Private { map },
                };
                (backing, header)
            }
            FileMapping::Unavailable => {
                let file = vfs.open(path, OpenOptions::default())?;
                let len = file.len()?;
                let mut first = vec![0u8; 64];
                let n = read_exact_at(file.as_ref(), &mut first, 0)?;
                let header = Header::decode(&first[..n], path)?;
                if len > header.total {
                    return Err(Error::corruption(
                        path,
                        header.total,
                        format!(
                            "the file holds {len} bytes, more than its header's {}",
                            header.total
                        ),
                    ));
                }
                let map = MmapRegion::anonymous_sparse(header.total, mode)?;
                load_image(&map, file.as_ref(), len)?;
                let dirty = Mutex::new(Vec::new());
                (Backing::Image { map, file, dirty }, header)
            }
        };
        Ok(RegionFile::new(backing, path, header, persist, stats))
    }

    fn new(
        backing: Backing,
        path: &Path,
        header: Header,
        persist: Persist,
        stats: Arc<IoStats>,
    ) -> Self {
        RegionFile {
            backing,
            path: path.to_path_buf(),
            header,
            persist,
            stats,
            failure: Mutex::new(None),
            reserved: AtomicU64::new(0),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn header(&self) -> Header {
        self.header
    }

    pub fn persist_mode(&self) -> Persist {
        self.persist
    }

    /// The index's view of its region.
    pub fn core_view(self: &Arc<Self>) -> CoreView {
        CoreView::new(self.clone())
    }

    /// What backs the region, in words (for statistics).
    pub fn backing_name(&self) -> &'static str {
        match self.backing {
            Backing::Shared { .. } => "shared mapping",
            Backing::Private { .. } => "private copy (read-only)",
            Backing::Image { .. } => "image written back through the file system",
        }
    }

    /// The mapping (shared, private or the image) every access goes to.
    pub fn map(&self) -> &MmapRegion {
        match &self.backing {
            Backing::Shared { map, .. } | Backing::Private { map } | Backing::Image { map, .. } => {
                map
            }
        }
    }

    /// Records `[off, off + len)` as stored since the last fence (image backing).
    pub fn touched(&self, off: u64, len: u64) {
        if let Backing::Image { dirty, .. } = &self.backing {
            dirty.lock().push((off, off + len));
        }
    }

    fn fail(&self, e: Error) {
        let mut f = self.failure.lock();
        if f.is_none() {
            *f = Some(e);
        }
    }

    /// The write-back or sync failure since the last call, if any.
    pub fn take_failure(&self) -> Result<()> {
        match self.failure.lock().take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    pub fn read(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        self.map().read(off, buf)
    }

    pub fn write(&self, off: u64, data: &[u8]) -> Result<()> {
        self.map().write(off, data)?;
        self.touched(off, data.len() as u64);
        Ok(())
    }

    /// Cache-line write-back of `[off, off + len)` where it is the persist mechanism (ADR on a mapping);
    /// msync mode and images make stores durable at the fence.
    pub fn flush_lines(&self, off: u64, len: u64) -> Result<()> {
        match (&self.backing, self.persist) {
            (Backing::Shared { map, .. }, Persist::Adr) => map.flush(off, len),
            _ => Ok(()),
        }
    }

    /// Makes `[off, off + len)` durable and ordered before later stores: a flush under ADR, then a fence.
    pub fn persist(&self, off: u64, len: u64) -> Result<()> {
        self.flush_lines(off, len)?;
        self.fence();
        Ok(())
    }

    /// The persist point: `sfence`, then per backing and mode the write-back and sync of what was stored.
    pub fn fence(&self) {
        self.map().fence();
        let synced = match &self.backing {
            Backing::Shared { map, .. } if self.persist == Persist::Msync => {
                map.sync().map(|()| true)
            }
            Backing::Image { map, file, dirty } => {
                write_back(map, file.as_ref(), dirty, &self.stats).and_then(|()| {
                    match self.persist {
                        Persist::Msync => file.sync_data().map(|()| true),
                        _ => Ok(false),
                    }
                })
            }
            _ => Ok(false),
        };
        match synced {
            Ok(true) => self.stats.record_sync(FileKind::Pages),
            Ok(false) => {}
            Err(e) => self.fail(e),
        }
    }

    /// Makes every byte stored so far durable in the file (checkpoints, creation): `msync` of a shared
    /// mapping, write-back and `fdatasync` of an image; nothing for a private copy.
    pub fn sync(&self) -> Result<()> {
        match &self.backing {
            Backing::Shared { map, .. } => map.sync()?,
            Backing::Private { .. } => return Ok(()),
            Backing::Image { map, file, dirty } => {
                write_back(map, file.as_ref(), dirty, &self.stats)?;
                file.sync_data()?;
            }
        }
        self.stats.record_sync(FileKind::Pages);
        Ok(())
    }

    /// Starts writing back what was stored so far and waits for it, making nothing durable and promising no
    /// consistency (the OS may write any page back at any time anyway): the preparation of a checkpoint,
    /// outside the family's lock, so that the [`sync`](Self::sync) under the lock only finds the pages
    /// stored since. Repeats while a pass is long (writers dirtied pages meanwhile), at most
    /// [`WRITE_BACK_PASSES`] times. A shared mapping: `sync_file_range` (write, then wait) over the region;
    /// an image: the file's writeback hint ([`VfsFile::start_writeback`]; its lines were written at the
    /// fences); a private copy: nothing. Returns the passes made.
    pub fn write_back_ahead(&self) -> u32 {
        let total = self.header.total;
        match &self.backing {
            Backing::Shared { file, .. } => {
                let mut passes = 0;
                while passes < WRITE_BACK_PASSES {
                    let started = Instant::now();
                    passes += 1;
                    if !write_back_range(file, total) || started.elapsed() < WRITE_BACK_SETTLED {
                        break;
                    }
                }
                passes
            }
            Backing::Image { file, .. } => {
                file.start_writeback(0, total);
                1
            }
            Backing::Private { .. } => 0,
        }
    }

    /// From here on the region is accessed at random (a table's buckets, a new table's fresh space): page
    /// faults on a mapped file bring in single pages, not readahead windows ([`MmapRegion::advise_random`]).
    /// Called once the index is open (its recovery reads the region in order).
    pub fn advise_random(&self) {
        if let Backing::Shared { map, .. } = &self.backing {
            map.advise_random();
        }
    }

    /// Allocates the file's blocks for `[0, end)` ahead of use (shared backing), so that a store can never
    /// fault for want of space: a full file system is `ResourceExhausted` here, before anything changes.
    /// File systems without `fallocate` are left sparse.
    pub fn reserve(&self, end: u64) -> Result<()> {
        let Backing::Shared { file, .. } = &self.backing else {
            return Ok(());
        };
        let from = self.reserved.load(Ordering::Acquire);
        let end = end.min(self.header.total);
        if end <= from {
            return Ok(());
        }
        match rustix::fs::fallocate(file, rustix::fs::FallocateFlags::empty(), from, end - from) {
            Ok(()) => {}
            Err(rustix::io::Errno::NOSPC) => {
                return Err(Error::ResourceExhausted(format!(
                    "no space left to allocate {} bytes of {}",
                    end - from,
                    self.path.display()
                )));
            }
            Err(rustix::io::Errno::OPNOTSUPP) => {
                self.reserved.store(self.header.total, Ordering::Release);
                return Ok(());
            }
            Err(e) => return Err(Error::io(&self.path, e.into())),
        }
        self.reserved.store(end, Ordering::Release);
        Ok(())
    }

    /// Bytes the file occupies on its medium (allocated blocks of a mapped file, the length of an image's).
    pub fn allocated_bytes(&self) -> u64 {
        match &self.backing {
            Backing::Shared { file, .. } => file.metadata().map_or(0, |m| m.blocks() * 512),
            Backing::Private { .. } => {
                std::fs::metadata(&self.path).map_or(0, |m| m.blocks() * 512)
            }
            Backing::Image { file, .. } => file.len().unwrap_or(0),
        }
    }
}

/// Writes back the dirty pages of `file`'s first `len` bytes and waits for them (`sync_file_range`: no
/// metadata, no device flush, nothing durable). False where the file system or platform has no such call.
fn write_back_range(file: &std::fs::File, len: u64) -> bool {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let Ok(len) = i64::try_from(len) else {
            return false;
        };
        let flags = libc::SYNC_FILE_RANGE_WAIT_BEFORE
            | libc::SYNC_FILE_RANGE_WRITE
            | libc::SYNC_FILE_RANGE_WAIT_AFTER;
        // SAFETY: `sync_file_range` only reads its integer arguments; the descriptor is `file`'s, open for
        // the call. It changes no byte of the file.
        unsafe { libc::sync_file_range(file.as_raw_fd(), 0, len, flags) == 0 }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (file, len);
        false
    }
}

/// Copies the first `len` bytes of `file` into `map`, leaving all-zero steps untouched (so they stay
/// unallocated).
fn load_image(map: &MmapRegion, file: &dyn VfsFile, len: u64) -> Result<()> {
    let mut buf = vec![0u8; LOAD_STEP];
    let mut at = 0;
    while at < len {
        let n = ((len - at) as usize).min(LOAD_STEP);
        let got = read_exact_at(file, &mut buf[..n], at)?;
        if buf[..got].iter().any(|&b| b != 0) {
            map.write(at, &buf[..got])?;
        }
        at += n as u64;
    }
    Ok(())
}

/// Writes the lines stored since the last call back to `file`, in address order, merged into runs.
fn write_back(
    map: &MmapRegion,
    file: &dyn VfsFile,
    dirty: &Mutex<Vec<(u64, u64)>>,
    stats: &IoStats,
) -> Result<()> {
    let mut ranges = std::mem::take(&mut *dirty.lock());
    if ranges.is_empty() {
        return Ok(());
    }
    for r in &mut ranges {
        r.0 -= r.0 % CACHE_LINE;
        r.1 = r.1.div_ceil(CACHE_LINE) * CACHE_LINE;
    }
    ranges.sort_unstable();
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for (lo, hi) in ranges {
        match runs.last_mut() {
            Some(last) if lo <= last.1 => last.1 = last.1.max(hi),
            _ => runs.push((lo, hi)),
        }
    }
    let mut buf = Vec::new();
    for (lo, hi) in runs {
        buf.resize((hi - lo) as usize, 0);
        map.read(lo, &mut buf)?;
        file.write_all_at(&buf, lo)?;
        stats.record_write(FileKind::Pages, buf.len());
    }
    Ok(())
}
