//! [`MmapRegion`]: a PM region backed by a shared memory mapping.
//!
//! * On a **tmpfs** file (or [`MmapRegion::anonymous`]) the region runs at DRAM speed: the backend for
//!   throughput runs, where the persist instructions cost their real cycles but add no durability.
//! * On a **regular file** the region is durable through [`MmapRegion::sync`] / [`MmapRegion::sync_range`]
//!   (`msync`), and a reopened file shows what was synced.
//! * On a real DAX file system over Optane the same instructions are the real persist path (a mapping with
//!   `MAP_SYNC` is not made here: memmap2 does not offer it).
//!
//! The mapping starts on a page boundary, so an offset's alignment is its address's alignment: a 256-aligned
//! offset is a 256-aligned XPLine. All accesses go through aligned 8-byte atomics (see `words`), so the
//! region is `Send + Sync` and racing accesses are never undefined behaviour. The file must not be truncated
//! by anyone while it is mapped (that raises SIGBUS, as with every file mapping).

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use memmap2::{MmapOptions, MmapRaw};

use super::arch::{self, FlushInstr};
use super::{PersistMode, Pm, XPLINE, check_range, check_word, check_xplines, to_usize, words};
use crate::error::{Error, Result};

/// A PM region over a shared mapping of a file (or of anonymous memory).
#[derive(Debug)]
pub struct MmapRegion {
    map: MmapRaw,
    len: u64,
    mode: PersistMode,
    path: Option<PathBuf>,
}

/// A region length must be a non-zero whole number of XPLines (so every XPLine can be written with
/// `write_nt`) that fits the address space.
fn check_region_len(len: u64, what: &Path) -> Result<usize> {
    if len == 0 || !len.is_multiple_of(XPLINE) {
        return Err(Error::invalid(format!(
            "PM region {} must be a non-zero multiple of {XPLINE} bytes, not {len}",
            what.display()
        )));
    }
    to_usize(len)
}

impl MmapRegion {
    /// Creates the file `path` (which must not exist yet) with `len` zero bytes and maps it. `len` must be a
    /// non-zero multiple of 256. The file's size is synced; sync its directory too if the file's existence
    /// must survive a power loss.
    pub fn create(path: impl AsRef<Path>, len: u64, mode: PersistMode) -> Result<Self> {
        let path = path.as_ref();
        let size = check_region_len(len, path)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| Error::io(path, e))?;
        file.set_len(len).map_err(|e| Error::io(path, e))?;
        file.sync_all().map_err(|e| Error::io(path, e))?;
        Self::map_file(&file, path, size, mode)
    }

    /// Maps the existing file `path` whole; its size must be a non-zero multiple of 256.
    pub fn open(path: impl AsRef<Path>, mode: PersistMode) -> Result<Self> {
        let path = path.as_ref();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| Error::io(path, e))?;
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        let size = check_region_len(len, path)?;
        Self::map_file(&file, path, size, mode)
    }

    /// A region of `len` zero bytes in anonymous shared memory: nothing survives the process. Handy for
    /// throughput runs and tests.
    pub fn anonymous(len: u64, mode: PersistMode) -> Result<Self> {
        Self::map_anonymous(len, mode, false)
    }

    /// Maps the existing file `path` whole and **privately** (copy-on-write): reads see the file, stores stay
    /// in this process and never reach the file (`sync` does nothing). The file is opened read-only, so this
    /// works on a read-only mount; no swap is reserved up front. What a read-only database handle uses.
    pub fn open_private(path: impl AsRef<Path>, mode: PersistMode) -> Result<Self> {
        let path = path.as_ref();
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        let size = check_region_len(len, path)?;
        // SAFETY: `map_copy` is unsafe because another process could change the file under a mapping that
        // Rust code reads as a plain slice. The mapping is only ever accessed through `words()` (aligned
        // atomics), never as a slice, and private pages this process wrote are its own copies.
        let map = unsafe {
            MmapOptions::new()
                .len(size)
                .no_reserve_swap()
                .map_copy(&file)
                .map_err(|e| Error::io(path, e))?
        };
        Ok(MmapRegion {
            map: MmapRaw::from(map),
            len,
            mode,
            path: None,
        })
    }

    /// Like [`anonymous`](Self::anonymous), but without reserving swap for the whole length: pages are
    /// allocated when first written, so a large, mostly untouched region costs only what is used.
    pub fn anonymous_sparse(len: u64, mode: PersistMode) -> Result<Self> {
        Self::map_anonymous(len, mode, true)
    }

    fn map_anonymous(len: u64, mode: PersistMode, sparse: bool) -> Result<Self> {
        let what = Path::new("<anonymous>");
        let size = check_region_len(len, what)?;
        let mut options = MmapOptions::new();
        options.len(size);
        if sparse {
            options.no_reserve_swap();
        }
        let map = options.map_anon().map_err(|e| Error::io(what, e))?;
        // Backed by 2 MiB pages where the kernel allows (as PM is on DAX hardware, mapped in huge pages): a
        // random probe of a large region then costs a cache miss, not also a page walk. Only advice: a
        // kernel without transparent huge pages refuses it, and the region works the same with 4 KiB pages.
        #[cfg(target_os = "linux")]
        let _ = map.advise(memmap2::Advice::HugePage);
        Ok(MmapRegion {
            map: MmapRaw::from(map),
            len,
            mode,
            path: None,
        })
    }

    fn map_file(file: &File, path: &Path, size: usize, mode: PersistMode) -> Result<Self> {
        let map = MmapOptions::new()
            .len(size)
            .map_raw(file)
            .map_err(|e| Error::io(path, e))?;
        Ok(MmapRegion {
            map,
            len: size as u64,
            mode,
            path: Some(path.to_path_buf()),
        })
    }

    /// The mapped file, or `None` for an anonymous region.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The cache-line write-back instruction `flush` uses on this CPU.
    pub fn flush_instruction(&self) -> FlushInstr {
        arch::flush_instr()
    }

    /// Makes every byte of the region durable in its file (`msync(MS_SYNC)`); nothing to do when anonymous.
    pub fn sync(&self) -> Result<()> {
        self.sync_range(0, self.len)
    }

    /// Makes `[off, off + len)` durable in the file (`msync` of the pages covering it).
    pub fn sync_range(&self, off: u64, len: u64) -> Result<()> {
        check_range(self.len, off, len)?;
        let Some(path) = &self.path else {
            return Ok(());
        };
        if len == 0 {
            return Ok(());
        }
        self.map
            .flush_range(to_usize(off)?, to_usize(len)?)
            .map_err(|e| Error::io(path, e))
    }

    /// Tells the kernel that the mapping is read and written at random (`MADV_RANDOM`): a page fault then
    /// brings in the one page it needs, not a readahead window. A hash table's pages are touched in random
    /// order, and a fault on fresh file space would otherwise allocate and zero a whole window of large
    /// folios at once (tens of milliseconds for one store). Advice only: ignored where unsupported.
    pub fn advise_random(&self) {
        #[cfg(unix)]
        let _ = self.map.advise(memmap2::Advice::Random);
    }

    /// The whole region as aligned atomic words: the only way its memory is read or written.
    fn words(&self) -> &[AtomicU64] {
        let ptr = self.map.as_mut_ptr().cast::<AtomicU64>();
        // SAFETY: the mapping is `self.len` bytes (a multiple of 256, so of 8), starts on a page boundary
        // (so `ptr` is non-null and aligned for `AtomicU64`), is initialised (file or zero pages), fits the
        // address space (it was mapped), and stays mapped while `&self` lives: `MmapRaw` unmaps only on
        // drop. `AtomicU64` is interior-mutable, so shared references may coexist with writes; within this
        // process every access to the mapping goes through these atomics (same size, aligned), and other
        // processes that map the file are outside the Rust abstract machine, like a device.
        unsafe { std::slice::from_raw_parts(ptr, self.len as usize / 8) }
    }
}

impl Pm for MmapRegion {
    fn len(&self) -> u64 {
        self.len
    }

    fn mode(&self) -> PersistMode {
        self.mode
    }

    fn read(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        check_range(self.len, off, buf.len() as u64)?;
        words::read(self.words(), off as usize, buf);
        Ok(())
    }

    fn write(&self, off: u64, data: &[u8]) -> Result<()> {
        check_range(self.len, off, data.len() as u64)?;
        words::write(self.words(), off as usize, data);
        Ok(())
    }

    #[inline]
    fn read_pair(&self, off: u64) -> Result<(u64, u64)> {
        check_range(self.len, off, 16)?;
        if !off.is_multiple_of(8) {
            let mut b = [0u8; 16];
            words::read(self.words(), off as usize, &mut b);
            return Ok(super::traits::le_pair(&b));
        }
        let w = self.words();
        let i = off as usize / 8;
        Ok((
            words::word_to_le(w[i].load(Ordering::Relaxed)),
            words::word_to_le(w[i + 1].load(Ordering::Relaxed)),
        ))
    }

    fn load_u64_atomic(&self, off: u64) -> Result<u64> {
        check_word(self.len, off)?;
        let word = words::word_at(self.words(), off as usize);
        Ok(words::word_to_le(word.load(Ordering::Acquire)))
    }

    fn store_u64_atomic(&self, off: u64, value: u64) -> Result<()> {
        check_word(self.len, off)?;
        let word = words::word_at(self.words(), off as usize);
        word.store(words::le_to_word(value), Ordering::Release);
        Ok(())
    }

    fn compare_exchange_u64(
        &self,
        off: u64,
        current: u64,
        new: u64,
    ) -> Result<std::result::Result<u64, u64>> {
        check_word(self.len, off)?;
        let word = words::word_at(self.words(), off as usize);
        Ok(word
            .compare_exchange(
                words::le_to_word(current),
                words::le_to_word(new),
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .map(words::word_to_le)
            .map_err(words::word_to_le))
    }

    fn flush(&self, off: u64, len: u64) -> Result<()> {
        check_range(self.len, off, len)?;
        let start = self.map.as_ptr().wrapping_add(off as usize);
        // SAFETY: `[off, off + len)` was checked to lie inside the mapping, which lives as long as `self`.
        unsafe { arch::flush_range(start, len as usize) };
        Ok(())
    }

    fn fence(&self) {
        arch::store_fence();
    }

    fn write_nt(&self, off: u64, data: &[u8]) -> Result<()> {
        check_xplines(self.len, off, data.len() as u64)?;
        words::write_nt(self.words(), off as usize, data);
        Ok(())
    }

    fn prefetch(&self, off: u64) {
        if let Some(word) = self.words().get(off as usize / 8) {
            crate::algo::prefetch_line(word);
        }
    }
}
