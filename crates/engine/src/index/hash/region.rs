//! The hash family's region file `hash.pm`: one persistent-memory region per database, reached through the
//! database's [`Vfs`], with a small header of the family's own in front of the index's region.
//!
//! ## File
//! `[0, 4096)` the family's page ([`Header`] at 0, the ledger's two slots at 1024 and 1152, see `ledger`),
//! then `[4096, total)` the ElimDA-style index's region ([`CoreView`] shows it to the index at offset 0, so
//! its 256 B XPLines and 4 KiB buckets stay aligned in the file). `total` is fixed at creation
//! (`-o region_bytes`) and recorded in the header; it is a *virtual* size: the file is sparse and pages are
//! allocated as tables are written (see [`RegionFile::reserve`]).
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
//! Cost: the shared backing adds one bounds check per access; the image backing one mutex per store and one
//! `pwrite` per run of dirty lines per fence (tests and read-only overlays only); msync mode one `msync` per
//! fence (what makes each persist point survive power loss on a regular file).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use xxhash_rust::xxh3::xxh3_64;

use super::family::Persist;
use super::format::le;
use crate::error::{Error, Result};
use crate::storage::pm::{CACHE_LINE, MmapRegion, PersistMode, Pm, check_range};
use crate::storage::vfs::read_exact_at;
use crate::storage::{FileKind, FileMapping, IoStats, OpenOptions, Vfs, VfsFile};

/// Bytes of the family's page in front of the index's region.
pub const HEADER_BYTES: u64 = 4096;
/// Largest region: 64 TiB.
pub const MAX_REGION_BYTES: u64 = 1 << 46;
const MAGIC: u64 = u64::from_le_bytes(*b"STRHFAM1");
const VERSION: u64 = 1;
/// Bytes covered by the header checksum (stored right after them).
const HEADER_CHECKED: usize = 56;
/// Bytes read per step when an image is loaded from its file.
const LOAD_STEP: usize = 1 << 20;

/// The immutable header at offset 0 of `hash.pm`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Bytes of the whole file (header page + index region).
    pub total: u64,
    /// Random at creation: seeds the ledger's checksums and digest.
    pub nonce: u64,
}

impl Header {
    fn encode(&self) -> [u8; 64] {
        let mut b = [0u8; 64];
        for (i, w) in [
            MAGIC,
            VERSION,
            HEADER_BYTES,
            self.total - HEADER_BYTES,
            self.nonce,
        ]
        .into_iter()
        .enumerate()
        {
            b[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
        let check = xxh3_64(&b[..HEADER_CHECKED]);
        b[HEADER_CHECKED..].copy_from_slice(&check.to_le_bytes());
        b
    }

    /// Decodes the first bytes of `path`; damage is `Corruption` naming the file.
    pub fn decode(b: &[u8], path: &Path) -> Result<Header> {
        let bad = |at: u64, what: String| {
            Error::corruption(path, at, format!("hash region header: {what}"))
        };
        if b.len() < 64 {
            return Err(bad(
                0,
                format!("the file holds {} bytes, not even a header", b.len()),
            ));
        }
        if le(b) != MAGIC {
            return Err(bad(0, "bad magic (not a hash region)".into()));
        }
        if le(&b[HEADER_CHECKED..]) != xxh3_64(&b[..HEADER_CHECKED]) {
            return Err(bad(HEADER_CHECKED as u64, "checksum mismatch".into()));
        }
        let word = |i: usize| le(&b[i * 8..]);
        if word(1) != VERSION {
            return Err(Error::Incompatible(format!(
                "{} is a hash region of version {}, this build reads version {VERSION}",
                path.display(),
                word(1)
            )));
        }
        let core = word(3);
        if word(2) != HEADER_BYTES
            || core == 0
            || !core.is_multiple_of(HEADER_BYTES)
            || core > MAX_REGION_BYTES - HEADER_BYTES
        {
            return Err(bad(16, format!("region at {} of {core} bytes", word(2))));
        }
        Ok(Header {
            total: HEADER_BYTES + core,
            nonce: word(4),
        })
    }
}

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
    /// Creates `path` (which must not exist) as a region of `total` bytes with a fresh header (persisted).
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
                if vfs.exists(path) {
                    return Err(Error::invalid(format!("{} already exists", path.display())));
                }
                let create = OpenOptions {
                    create: true,
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
        CoreView(self.clone())
    }

    /// What backs the region, in words (for statistics).
    pub fn backing_name(&self) -> &'static str {
        match self.backing {
            Backing::Shared { .. } => "shared mapping",
            Backing::Private { .. } => "private copy (read-only)",
            Backing::Image { .. } => "image written back through the file system",
        }
    }

    fn map(&self) -> &MmapRegion {
        match &self.backing {
            Backing::Shared { map, .. } | Backing::Private { map } | Backing::Image { map, .. } => {
                map
            }
        }
    }

    /// Records `[off, off + len)` as stored since the last fence (image backing).
    fn touched(&self, off: u64, len: u64) {
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

    /// Makes `[off, off + len)` durable and ordered before later stores: a flush under ADR, then a fence.
    pub fn persist(&self, off: u64, len: u64) -> Result<()> {
        if self.persist == Persist::Adr {
            self.map().flush(off, len)?;
        }
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

/// The index's region inside `hash.pm`: offset 0 here is byte [`HEADER_BYTES`] of the file. Every access is
/// checked against the region (so the index never reaches the family's page) and passed to the file.
#[derive(Debug, Clone)]
pub struct CoreView(Arc<RegionFile>);

impl CoreView {
    fn at(&self, off: u64, len: u64) -> Result<u64> {
        check_range(self.len(), off, len)?;
        Ok(HEADER_BYTES + off)
    }
}

impl Pm for CoreView {
    fn len(&self) -> u64 {
        self.0.header.total - HEADER_BYTES
    }

    fn mode(&self) -> PersistMode {
        self.0.persist.pm_mode()
    }

    fn read(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        let at = self.at(off, buf.len() as u64)?;
        self.0.map().read(at, buf)
    }

    fn write(&self, off: u64, data: &[u8]) -> Result<()> {
        let at = self.at(off, data.len() as u64)?;
        self.0.write(at, data)
    }

    fn load_u64_atomic(&self, off: u64) -> Result<u64> {
        let at = self.at(off, 8)?;
        self.0.map().load_u64_atomic(at)
    }

    fn store_u64_atomic(&self, off: u64, value: u64) -> Result<()> {
        let at = self.at(off, 8)?;
        self.0.map().store_u64_atomic(at, value)?;
        self.0.touched(at, 8);
        Ok(())
    }

    fn compare_exchange_u64(
        &self,
        off: u64,
        current: u64,
        new: u64,
    ) -> Result<std::result::Result<u64, u64>> {
        let at = self.at(off, 8)?;
        let r = self.0.map().compare_exchange_u64(at, current, new)?;
        if r.is_ok() {
            self.0.touched(at, 8);
        }
        Ok(r)
    }

    /// Cache-line write-back only where it is the persist mechanism (ADR on a mapping); msync mode and
    /// images make stores durable at the fence.
    fn flush(&self, off: u64, len: u64) -> Result<()> {
        let at = self.at(off, len)?;
        match (&self.0.backing, self.0.persist) {
            (Backing::Shared { map, .. }, Persist::Adr) => map.flush(at, len),
            _ => Ok(()),
        }
    }

    fn fence(&self) {
        self.0.fence();
    }

    fn write_nt(&self, off: u64, data: &[u8]) -> Result<()> {
        let at = self.at(off, data.len() as u64)?;
        self.0.map().write_nt(at, data)?;
        self.0.touched(at, data.len() as u64);
        Ok(())
    }
}
