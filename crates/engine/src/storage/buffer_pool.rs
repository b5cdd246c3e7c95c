//! `BufferPool`: a CLOCK cache of page frames over a [`PageFile`], within a memory budget.
//!
//! ## Design
//! * `frame_count = max(budget_bytes / page_size, 8)` frames, each a page-sized heap buffer (allocated when the
//!   frame is first used, so a large budget costs nothing until it fills) behind its own
//!   `parking_lot::RwLock`, with an atomic pin count and an atomic dirty bit.
//! * One `parking_lot::Mutex` guards the page table (page id → frame), the CLOCK hand, the per-frame page id
//!   and reference bit, the list of empty frames and the hit/miss counters. Pins are only *taken* under that
//!   mutex (so the victim search, which also runs under it, sees a stable "pins == 0"); they are released
//!   without it (an atomic decrement when a guard drops).
//! * A guard ([`PageReadGuard`], [`PageWriteGuard`]) holds the frame's pin and its data lock; on drop it
//!   releases the data lock first, then the pin. Hence an unpinned frame's data lock is always free.
//! * Replacement is CLOCK with insertion at 0: a page loaded on a miss gets its reference bit only when it
//!   is used again (a hit), so pages read once (a scan's leaves, a random lookup's leaf) are evicted before
//!   pages every operation touches (a tree's upper levels). Freshly allocated pages start referenced.
//! * A miss does its I/O while holding the table mutex (simplicity first): the victim's write-back when it is
//!   dirty, then the read (checksum verified by the page file, then the optional validator). A page that fails
//!   to load is not left cached.
//!
//! ## Lock order (no deadlocks)
//! table mutex → data lock of an **unpinned** frame (never contended, see above). A thread may take the table
//! mutex while holding data locks (guards of other pages), because nobody blocks on the data lock of a pinned
//! frame while holding the table mutex: hits pin under the mutex, release it, and only then lock the data.
//! `flush_dirty` pins one dirty frame at a time under the mutex, releases it, then locks the frame's data.
//!
//! Caller rules: a thread must not take a guard on a page it already holds a *write* guard for, nor a write
//! guard on a page it holds any guard for (self-deadlock on the frame's RwLock), nor call `write_cow(id)` while
//! holding a guard on `id` (the old page is freed); `flush_dirty` / `commit` must be called with no guard held
//! by the calling thread; `free` must not be called on a pinned page. Pages must be freed through the pool
//! (not `PageFile::free` directly) so no stale copy stays cached.
//!
//! ## Cost
//! A hit: one mutex acquisition, one hash lookup (a multiplicative hash of the u64 id), one atomic increment,
//! one RwLock acquisition; no allocation. Dropping a guard: an RwLock release and an atomic decrement. A miss:
//! one page read, plus one page write when the CLOCK victim is dirty. `allocate` never reads.

use super::page::{PageId, page_epoch, set_page_epoch};
use super::page_file::PageFile;
use crate::error::{Error, Result};
use parking_lot::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// Checks the structure of a page image when it is loaded from disk (after its checksum verified).
pub type PageValidator = Box<dyn Fn(&[u8]) -> std::result::Result<(), String> + Send + Sync>;

/// Hasher for page ids: one folded 64×64→128 multiply (good high and low bits for sequential ids).
#[derive(Default, Clone, Copy)]
struct IdHasher(u64);

const HASH_K: u64 = 0x9E37_79B9_7F4A_7C15;

impl Hasher for IdHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    #[inline]
    fn write_u64(&mut self, x: u64) {
        let m = ((self.0 ^ x) as u128).wrapping_mul(HASH_K as u128);
        self.0 = (m as u64) ^ ((m >> 64) as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

type PageTable = HashMap<PageId, usize, BuildHasherDefault<IdHasher>>;

/// One cache frame.
struct Frame {
    /// The page image; empty until the frame is first used. Plain heap memory: the page file bounces
    /// O_DIRECT I/O through an aligned buffer, which costs a 4 KiB copy per I/O but saves the 2× overhead of
    /// aligned small allocations on every frame.
    data: RwLock<Vec<u8>>,
    /// Guards (and `flush_dirty`) holding the frame. Incremented only under the table mutex.
    pins: AtomicU32,
    /// The bytes differ from the page on disk. Set by a write guard (holding the data lock), cleared after a
    /// write-back (holding the data lock).
    dirty: AtomicBool,
}

/// Per-frame state guarded by the table mutex.
#[derive(Clone, Copy, Default)]
struct Slot {
    page: Option<PageId>,
    referenced: bool,
}

/// Cache counters since the pool was created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
    /// Frames taken from another page (the CLOCK victims).
    pub evictions: u64,
    /// Dirty victims written back before reuse.
    pub writebacks: u64,
}

struct Table {
    map: PageTable,
    slots: Vec<Slot>,
    /// Frames holding no page (never pinned).
    empty: Vec<usize>,
    hand: usize,
    stats: CacheStats,
}

/// A cache of page frames over a [`PageFile`] (see the module doc).
pub struct BufferPool {
    file: PageFile,
    page_size: usize,
    frames: Box<[Frame]>,
    table: Mutex<Table>,
    validator: Option<PageValidator>,
}

impl std::fmt::Debug for BufferPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BufferPool")
            .field("file", &self.file.path())
            .field("page_size", &self.page_size)
            .field("frames", &self.frames.len())
            .field("cached", &self.cached_count())
            .field("validator", &self.validator.is_some())
            .finish()
    }
}

/// Releases a pin on drop.
struct Pin<'a>(&'a Frame);

impl Drop for Pin<'_> {
    #[inline]
    fn drop(&mut self) {
        self.0.pins.fetch_sub(1, Ordering::Release);
    }
}

/// Shared access to a cached page; the page stays in its frame until the guard drops.
pub struct PageReadGuard<'a> {
    // Field order matters: the data lock is released before the pin.
    data: RwLockReadGuard<'a, Vec<u8>>,
    id: PageId,
    _pin: Pin<'a>,
}

/// Exclusive access to a cached page, which is marked dirty; the page stays in its frame until the guard drops.
pub struct PageWriteGuard<'a> {
    // Field order matters: the data lock is released before the pin.
    data: RwLockWriteGuard<'a, Vec<u8>>,
    id: PageId,
    _pin: Pin<'a>,
}

impl Deref for PageReadGuard<'_> {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        &self.data
    }
}

impl PageReadGuard<'_> {
    pub fn id(&self) -> PageId {
        self.id
    }
}

impl std::fmt::Debug for PageReadGuard<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PageReadGuard(page {})", self.id)
    }
}

impl Deref for PageWriteGuard<'_> {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        &self.data
    }
}

impl DerefMut for PageWriteGuard<'_> {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.data
    }
}

impl PageWriteGuard<'_> {
    pub fn id(&self) -> PageId {
        self.id
    }
}

impl std::fmt::Debug for PageWriteGuard<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PageWriteGuard(page {})", self.id)
    }
}

impl BufferPool {
    /// A pool of `max(budget_bytes / page_size, 8)` frames over `file`. `validator` checks every page loaded
    /// from disk.
    pub fn new(
        file: PageFile,
        budget_bytes: usize,
        validator: Option<PageValidator>,
    ) -> BufferPool {
        let page_size = file.page_size();
        let n = (budget_bytes / page_size).max(8);
        let frames: Box<[Frame]> = (0..n)
            .map(|_| Frame {
                data: RwLock::new(Vec::new()),
                pins: AtomicU32::new(0),
                dirty: AtomicBool::new(false),
            })
            .collect();
        let mut map = PageTable::default();
        map.reserve(n);
        BufferPool {
            file,
            page_size,
            frames,
            table: Mutex::new(Table {
                map,
                slots: vec![Slot::default(); n],
                empty: (0..n).rev().collect(),
                hand: 0,
                stats: CacheStats::default(),
            }),
            validator,
        }
    }

    pub fn file(&self) -> &PageFile {
        &self.file
    }

    pub fn page_size(&self) -> usize {
        self.page_size
    }

    pub fn frame_count(&self) -> usize {
        self.frames.len()
    }

    /// The page file's working epoch.
    pub fn epoch(&self) -> u64 {
        self.file.epoch()
    }

    /// Pages currently cached.
    pub fn cached_count(&self) -> usize {
        self.table.lock().map.len()
    }

    /// Cached pages whose bytes are not yet written to the file.
    pub fn dirty_count(&self) -> usize {
        self.frames
            .iter()
            .filter(|f| f.dirty.load(Ordering::Acquire))
            .count()
    }

    /// Hit, miss and eviction counters.
    pub fn cache_stats(&self) -> CacheStats {
        self.table.lock().stats
    }

    /// Pins page `id` in a frame (loading it on a miss) and returns the frame index.
    fn pin(&self, id: PageId) -> Result<usize> {
        let mut t = self.table.lock();
        if let Some(&f) = t.map.get(&id) {
            self.frames[f].pins.fetch_add(1, Ordering::Acquire);
            t.slots[f].referenced = true;
            t.stats.hits += 1;
            return Ok(f);
        }
        t.stats.misses += 1;
        let f = self.take_frame(&mut t)?;
        {
            // The frame is unpinned and unmapped: its data lock is free.
            let mut data = self.frames[f].data.write();
            if let Err(e) = self.load(id, &mut data) {
                t.empty.push(f);
                return Err(e);
            }
        }
        self.frames[f].pins.fetch_add(1, Ordering::Acquire);
        t.map.insert(id, f);
        // A page read once starts without a reference bit: it is the next victim unless it is used again
        // before the hand comes round, so a stream of pages read once (a scan's leaves) cycles through one
        // frame instead of pushing out the pages every access touches (a tree's upper levels).
        t.slots[f] = Slot {
            page: Some(id),
            referenced: false,
        };
        Ok(f)
    }

    /// Reads page `id` from the file into `buf` and validates it.
    fn load(&self, id: PageId, buf: &mut Vec<u8>) -> Result<()> {
        buf.resize(self.page_size, 0);
        self.file.read_page(id, buf)?;
        if let Some(v) = &self.validator
            && let Err(msg) = v(buf)
        {
            return Err(Error::corruption(
                self.file.path(),
                id.saturating_mul(self.page_size as u64),
                format!("page {id}: {msg}"),
            ));
        }
        Ok(())
    }

    /// Finds a frame holding no page: an empty one, else the CLOCK victim (written back first if dirty).
    /// The returned frame is unpinned and unmapped.
    fn take_frame(&self, t: &mut Table) -> Result<usize> {
        if let Some(f) = t.empty.pop() {
            return Ok(f);
        }
        let n = self.frames.len();
        // Two sweeps: the first clears every reference bit it passes, so the second finds any unpinned frame.
        for _ in 0..2 * n {
            let f = t.hand;
            t.hand = if f + 1 == n { 0 } else { f + 1 };
            let frame = &self.frames[f];
            if frame.pins.load(Ordering::Acquire) != 0 {
                continue;
            }
            let slot = &mut t.slots[f];
            let Some(old) = slot.page else {
                // Left unmapped by a `free` while pinned; now unpinned.
                return Ok(f);
            };
            if slot.referenced {
                slot.referenced = false;
                continue;
            }
            if frame.dirty.load(Ordering::Acquire) {
                let mut data = frame.data.write();
                // On error the page stays cached and dirty.
                self.file.write_page(old, &mut data)?;
                frame.dirty.store(false, Ordering::Release);
                t.stats.writebacks += 1;
            }
            t.map.remove(&old);
            t.slots[f].page = None;
            t.stats.evictions += 1;
            return Ok(f);
        }
        Err(Error::ResourceExhausted(format!(
            "all {n} buffer pool frames are pinned; raise the cache budget or hold fewer pages at once"
        )))
    }

    /// Shared access to page `id`, loading it (checksum and validator verified) on a miss.
    pub fn read(&self, id: PageId) -> Result<PageReadGuard<'_>> {
        let f = self.pin(id)?;
        let frame = &self.frames[f];
        let pin = Pin(frame);
        Ok(PageReadGuard {
            data: frame.data.read(),
            id,
            _pin: pin,
        })
    }

    /// Exclusive access to page `id`, marked dirty. The caller must not modify a page of the last commit in
    /// place: use [`write_cow`](Self::write_cow) unless the page's epoch is the working epoch.
    pub fn write(&self, id: PageId) -> Result<PageWriteGuard<'_>> {
        let f = self.pin(id)?;
        let frame = &self.frames[f];
        let pin = Pin(frame);
        let data = frame.data.write();
        frame.dirty.store(true, Ordering::Release);
        Ok(PageWriteGuard {
            data,
            id,
            _pin: pin,
        })
    }

    /// A writable copy of page `id`: the page itself when it was allocated in the working epoch; otherwise
    /// (it belongs to the last commit) a newly allocated page with the same bytes and the working epoch, and
    /// the old page is freed. The caller reads `guard.id()` and updates references to the page.
    pub fn write_cow(&self, id: PageId) -> Result<PageWriteGuard<'_>> {
        let f = self.pin(id)?;
        let frame = &self.frames[f];
        let pin = Pin(frame);
        let epoch = self.file.epoch();
        let old_epoch = page_epoch(&frame.data.read());
        if old_epoch == epoch {
            let data = frame.data.write();
            frame.dirty.store(true, Ordering::Release);
            return Ok(PageWriteGuard {
                data,
                id,
                _pin: pin,
            });
        }
        let mut new = self.allocate()?;
        new.copy_from_slice(&frame.data.read());
        set_page_epoch(&mut new, epoch);
        drop(pin);
        self.free(id, old_epoch);
        Ok(new)
    }

    /// A new page: zeroed in memory with the working epoch in its header, marked dirty, never read from disk.
    pub fn allocate(&self) -> Result<PageWriteGuard<'_>> {
        let id = self.file.allocate();
        let epoch = self.file.epoch();
        let mut t = self.table.lock();
        if let Some(stale) = t.map.remove(&id) {
            // Only possible if the page was freed behind the pool's back: drop the stale copy.
            debug_assert!(false, "page {id} was cached while free");
            self.frames[stale].dirty.store(false, Ordering::Release);
            t.slots[stale].page = None;
            if self.frames[stale].pins.load(Ordering::Acquire) == 0 {
                t.empty.push(stale);
            }
        }
        let f = match self.take_frame(&mut t) {
            Ok(f) => f,
            Err(e) => {
                drop(t);
                self.file.free(id, epoch);
                return Err(e);
            }
        };
        let frame = &self.frames[f];
        // The frame is unpinned and unmapped: its data lock is free.
        let mut data = frame.data.write();
        data.clear();
        data.resize(self.page_size, 0);
        set_page_epoch(&mut data, epoch);
        frame.dirty.store(true, Ordering::Release);
        frame.pins.fetch_add(1, Ordering::Acquire);
        t.map.insert(id, f);
        t.slots[f] = Slot {
            page: Some(id),
            referenced: true,
        };
        drop(t);
        Ok(PageWriteGuard {
            data,
            id,
            _pin: Pin(frame),
        })
    }

    /// Frees page `id` (whose image carries `page_epoch`): drops its cached copy without writing it back, and
    /// returns it to the page file. The page must not be pinned.
    pub fn free(&self, id: PageId, page_epoch: u64) {
        {
            let mut t = self.table.lock();
            if let Some(f) = t.map.remove(&id) {
                let frame = &self.frames[f];
                let pinned = frame.pins.load(Ordering::Acquire) != 0;
                debug_assert!(!pinned, "free of page {id} while it is pinned");
                frame.dirty.store(false, Ordering::Release);
                t.slots[f] = Slot::default();
                if !pinned {
                    t.empty.push(f);
                }
                // A pinned frame stays out of the empty list; CLOCK reuses it once unpinned.
            }
        }
        self.file.free(id, page_epoch);
    }

    /// Writes every dirty frame to the file and clears its dirty bit. The calling thread must hold no guard.
    pub fn flush_dirty(&self) -> Result<()> {
        for (f, frame) in self.frames.iter().enumerate() {
            if !frame.dirty.load(Ordering::Acquire) {
                continue;
            }
            let id = {
                let t = self.table.lock();
                match t.slots[f].page {
                    Some(id) if frame.dirty.load(Ordering::Acquire) => {
                        frame.pins.fetch_add(1, Ordering::Acquire);
                        id
                    }
                    _ => continue,
                }
            };
            let _pin = Pin(frame);
            let mut data = frame.data.write();
            if frame.dirty.load(Ordering::Acquire) {
                self.file.write_page(id, &mut data)?;
                frame.dirty.store(false, Ordering::Release);
            }
        }
        Ok(())
    }

    /// Writes every dirty page, then commits the page file with `user_root`. Cached pages keep their bytes;
    /// their epoch is now older than the working epoch, so they are copied on write from now on. The calling
    /// thread must hold no guard.
    pub fn commit(&self, user_root: &[u8]) -> Result<()> {
        self.flush_dirty()?;
        self.file.commit(user_root)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::io_stats::{FileKind, IoStats};
    use crate::storage::mem_vfs::MemVfs;
    use crate::storage::page::{PageType, set_page_type};
    use crate::storage::page_file::PageFileOptions;
    use crate::storage::vfs::Vfs;
    use std::path::{Path, PathBuf};
    use std::sync::Arc;

    const PS: usize = 4096;
    const OPTS: PageFileOptions = PageFileOptions {
        page_size: PS,
        direct: false,
    };

    struct Env {
        vfs: Arc<dyn Vfs>,
        path: PathBuf,
        stats: Arc<IoStats>,
    }

    fn env() -> Env {
        Env {
            vfs: Arc::new(MemVfs::new()),
            path: PathBuf::from("/db/data.pages"),
            stats: Arc::new(IoStats::new()),
        }
    }

    impl Env {
        fn create(&self, frames: usize) -> BufferPool {
            let pf = PageFile::create(&self.vfs, &self.path, OPTS, self.stats.clone()).unwrap();
            BufferPool::new(pf, frames * PS, None)
        }
        fn reopen(&self, frames: usize, validator: Option<PageValidator>) -> BufferPool {
            let pf = PageFile::open(&self.vfs, &self.path, OPTS, self.stats.clone()).unwrap();
            BufferPool::new(pf, frames * PS, validator)
        }
        fn reads(&self) -> u64 {
            self.stats.snapshot().kind(FileKind::Pages).reads
        }
        fn writes(&self) -> u64 {
            self.stats.snapshot().kind(FileKind::Pages).writes
        }
    }

    /// Fills a page body with a tag derived from `v`.
    fn fill(page: &mut [u8], v: u64) {
        set_page_type(page, PageType::BTreeLeaf);
        for (i, chunk) in page[24..].chunks_exact_mut(8).enumerate() {
            chunk.copy_from_slice(&(v.wrapping_mul(31) + i as u64).to_le_bytes());
        }
    }

    fn check(page: &[u8], v: u64) {
        for (i, chunk) in page[24..].chunks_exact(8).enumerate() {
            assert_eq!(
                u64::from_le_bytes(chunk.try_into().unwrap()),
                v.wrapping_mul(31) + i as u64
            );
        }
    }

    #[test]
    fn frames_follow_the_budget() {
        let e = env();
        let pf = PageFile::create(&e.vfs, &e.path, OPTS, e.stats.clone()).unwrap();
        assert_eq!(BufferPool::new(pf, 0, None).frame_count(), 8);
        let pool = e.create(100);
        assert_eq!(pool.frame_count(), 100);
        assert_eq!(pool.page_size(), PS);
        assert_eq!(pool.epoch(), 1);
        assert_eq!(pool.file().path(), Path::new("/db/data.pages"));
        assert!(format!("{pool:?}").contains("frames: 100"));
    }

    #[test]
    fn eviction_writes_back_dirty_pages_and_rereads_them() {
        let e = env();
        let pool = e.create(8);
        assert_eq!(pool.frame_count(), 8);
        let mut ids = Vec::new();
        for v in 0..100u64 {
            let mut g = pool.allocate().unwrap();
            fill(&mut g, v);
            ids.push(g.id());
        }
        assert_eq!(e.reads(), 0, "allocate never reads");
        assert_eq!(
            e.writes() - 2,
            92,
            "every evicted page was written back once"
        );
        assert_eq!(pool.cached_count(), 8);
        assert_eq!(pool.dirty_count(), 8);
        for (v, &id) in ids.iter().enumerate().rev() {
            let g = pool.read(id).unwrap();
            assert_eq!(g.id(), id);
            check(&g, v as u64);
        }
        // Modify through write guards, evict, re-read.
        for (v, &id) in ids.iter().enumerate() {
            let mut g = pool.write(id).unwrap();
            fill(&mut g, v as u64 + 1000);
        }
        for (v, &id) in ids.iter().enumerate() {
            check(&pool.read(id).unwrap(), v as u64 + 1000);
        }
        let cs = pool.cache_stats();
        assert!(
            cs.misses >= 100 && cs.evictions >= 100 && cs.writebacks >= 100,
            "{cs:?}"
        );
        pool.commit(b"r").unwrap();
        assert_eq!(pool.dirty_count(), 0);
        drop(pool);
        let pool = e.reopen(8, None);
        for (v, &id) in ids.iter().enumerate() {
            check(&pool.read(id).unwrap(), v as u64 + 1000);
        }
    }

    #[test]
    fn hits_do_no_io_and_flush_writes_each_dirty_page_once() {
        let e = env();
        let pool = e.create(16);
        let ids: Vec<_> = (0..10u64)
            .map(|v| {
                let mut g = pool.allocate().unwrap();
                fill(&mut g, v);
                g.id()
            })
            .collect();
        let before = e.stats.snapshot();
        for _ in 0..3 {
            for &id in &ids {
                pool.read(id).unwrap();
            }
        }
        assert_eq!(e.stats.snapshot() - before, Default::default());
        assert_eq!(pool.cache_stats().hits, 30);
        assert_eq!(pool.dirty_count(), 10);
        pool.flush_dirty().unwrap();
        assert_eq!(pool.dirty_count(), 0);
        assert_eq!(
            (e.stats.snapshot() - before).kind(FileKind::Pages).writes,
            10
        );
        pool.flush_dirty().unwrap();
        assert_eq!(
            (e.stats.snapshot() - before).kind(FileKind::Pages).writes,
            10
        );
    }

    #[test]
    fn write_cow_relocates_after_commit_and_not_before() {
        let e = env();
        let pool = e.create(16);
        let id = {
            let mut g = pool.allocate().unwrap();
            fill(&mut g, 5);
            g.id()
        };
        // Before a commit the page is ours: in place.
        {
            let mut g = pool.write_cow(id).unwrap();
            assert_eq!(g.id(), id);
            fill(&mut g, 6);
        }
        pool.commit(b"c").unwrap();
        let e2 = pool.epoch();
        assert_eq!(e2, 2);
        // After the commit: relocated, bytes copied, epoch updated, old page pending.
        let new_id = {
            let mut g = pool.write_cow(id).unwrap();
            assert_ne!(g.id(), id);
            assert_eq!(page_epoch(&g), e2);
            check(&g, 6);
            fill(&mut g, 7);
            g.id()
        };
        assert_eq!(pool.file().pending_count(), 1);
        assert_eq!(pool.file().unreachable_pages(), vec![id]);
        // The new page is ours now: in place.
        assert_eq!(pool.write_cow(new_id).unwrap().id(), new_id);
        check(&pool.read(new_id).unwrap(), 7);
        pool.commit(b"d").unwrap();
        drop(pool);
        let pool = e.reopen(8, None);
        check(&pool.read(new_id).unwrap(), 7);
        assert_eq!(page_epoch(&pool.read(new_id).unwrap()), e2);
    }

    #[test]
    fn free_drops_the_cached_copy_without_writing_it() {
        let e = env();
        let pool = e.create(8);
        let writes = e.writes();
        let id = {
            let mut g = pool.allocate().unwrap();
            fill(&mut g, 1);
            g.id()
        };
        pool.free(id, pool.epoch());
        assert_eq!(pool.cached_count(), 0);
        assert_eq!(pool.dirty_count(), 0);
        pool.flush_dirty().unwrap();
        assert_eq!(e.writes(), writes);
        // Reused at once (allocated in this epoch), zeroed.
        let g = pool.allocate().unwrap();
        assert_eq!(g.id(), id);
        assert!(g[24..].iter().all(|&b| b == 0));
        assert_eq!(page_epoch(&g), pool.epoch());
    }

    #[test]
    fn all_frames_pinned_is_resource_exhausted() {
        let e = env();
        let pool = e.create(8);
        // 9 pages through 8 frames: the first one is evicted (written back).
        let ids: Vec<_> = (0..9u64)
            .map(|v| {
                let mut g = pool.allocate().unwrap();
                fill(&mut g, v);
                g.id()
            })
            .collect();
        let mut guards: Vec<_> = ids[1..].iter().map(|&id| pool.read(id).unwrap()).collect();
        assert!(matches!(
            pool.read(ids[0]),
            Err(Error::ResourceExhausted(_))
        ));
        assert!(matches!(pool.allocate(), Err(Error::ResourceExhausted(_))));
        assert!(matches!(
            pool.write_cow(ids[0]),
            Err(Error::ResourceExhausted(_))
        ));
        // The id handed out for the failed allocation went back to the free set.
        assert_eq!(pool.file().free_count(), 1);
        // A cached page is still a hit (a second read pin on the same frame).
        check(&pool.read(ids[1]).unwrap(), 1);
        drop(guards.pop());
        check(&pool.read(ids[0]).unwrap(), 0);
        drop(guards);
        let g = pool.allocate().unwrap();
        assert_eq!(
            g.id(),
            2 + 9,
            "the id returned by the failed allocation is reused"
        );
        drop(g);
        pool.commit(b"").unwrap();
    }

    #[test]
    fn validator_rejection_is_corruption_and_not_cached() {
        let e = env();
        let pool = e.create(8);
        let ids: Vec<_> = (0..4u64)
            .map(|v| {
                let mut g = pool.allocate().unwrap();
                fill(&mut g, v);
                g[24] = if v == 2 { 0xBA } else { 0 };
                g.id()
            })
            .collect();
        pool.commit(b"").unwrap();
        drop(pool);
        let validator: PageValidator = Box::new(|p: &[u8]| {
            if p[24] == 0xBA {
                Err("bad node layout".to_string())
            } else {
                Ok(())
            }
        });
        let pool = e.reopen(8, Some(validator));
        assert_eq!(pool.read(ids[0]).unwrap()[24], 0);
        let reads = e.reads();
        for _ in 0..2 {
            match pool.read(ids[2]) {
                Err(Error::Corruption {
                    offset,
                    detail,
                    file,
                }) => {
                    assert_eq!(offset, ids[2] * PS as u64);
                    assert_eq!(detail, format!("page {}: bad node layout", ids[2]));
                    assert_eq!(file, e.path);
                }
                other => panic!("expected corruption, got {other:?}"),
            }
        }
        assert_eq!(e.reads() - reads, 2, "a rejected page is not cached");
        assert_eq!(pool.cached_count(), 1);
        assert!(pool.write(ids[2]).is_err());
        // Out-of-file ids are corruption as well.
        assert!(matches!(pool.read(1_000), Err(Error::Corruption { .. })));
        assert!(pool.read(ids[3]).is_ok());
    }

    /// Pages of 1 MiB and 4 MiB: the minimum of 8 frames, eviction with write-back, copy-on-write after a
    /// commit, and a reopen that reads every page back whole.
    #[test]
    fn large_pages_evict_write_back_and_reopen() {
        for ps in [1 << 20, crate::storage::page::MAX_PAGE_SIZE] {
            let e = env();
            let opts = PageFileOptions {
                page_size: ps,
                direct: false,
            };
            let pf = PageFile::create(&e.vfs, &e.path, opts, e.stats.clone()).unwrap();
            let pool = BufferPool::new(pf, 0, None);
            assert_eq!((pool.frame_count(), pool.page_size()), (8, ps));
            let ids: Vec<_> = (0..10u64)
                .map(|v| {
                    let mut g = pool.allocate().unwrap();
                    assert_eq!(g.len(), ps);
                    fill(&mut g, v);
                    g.id()
                })
                .collect();
            // Ten pages through eight frames: two dirty victims were written back.
            assert_eq!(pool.cache_stats().writebacks, 2);
            assert_eq!(e.writes() - 2, 2);
            for (v, &id) in ids.iter().enumerate() {
                check(&pool.read(id).unwrap(), v as u64);
            }
            pool.commit(b"big").unwrap();
            let moved = {
                let mut g = pool.write_cow(ids[0]).unwrap();
                assert_ne!(g.id(), ids[0]);
                check(&g, 0);
                fill(&mut g, 100);
                g.id()
            };
            pool.commit(b"big-2").unwrap();
            drop(pool);

            let pf = PageFile::open(&e.vfs, &e.path, opts, e.stats.clone()).unwrap();
            let pool = BufferPool::new(pf, 8 * ps, None);
            assert_eq!(pool.file().user_root(), b"big-2");
            check(&pool.read(moved).unwrap(), 100);
            for (v, &id) in ids.iter().enumerate().skip(1) {
                check(&pool.read(id).unwrap(), v as u64);
            }
            assert_eq!(
                pool.file().unreachable_pages().len(),
                2,
                "the old copy and a free-list page"
            );
        }
    }

    #[test]
    fn concurrent_readers_see_correct_bytes() {
        let e = env();
        let pool = e.create(16);
        let ids: Vec<_> = (0..200u64)
            .map(|v| {
                let mut g = pool.allocate().unwrap();
                fill(&mut g, v);
                g.id()
            })
            .collect();
        pool.commit(b"").unwrap();
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let (pool, ids) = (&pool, &ids);
                s.spawn(move || {
                    let mut x = t.wrapping_mul(0x9E37_79B9) | 1;
                    for _ in 0..3000 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let a = (x % 200) as usize;
                        let b = ((x >> 20) % 200) as usize;
                        // Hold two guards at once, like a tree descent.
                        let ga = pool.read(ids[a]).unwrap();
                        let gb = pool.read(ids[b]).unwrap();
                        check(&ga, a as u64);
                        check(&gb, b as u64);
                    }
                });
            }
        });
        let cs = pool.cache_stats();
        assert_eq!(cs.hits + cs.misses, 4 * 3000 * 2);
    }

    #[test]
    fn concurrent_readers_and_a_writer_on_different_pages() {
        let e = env();
        let pool = e.create(12);
        let ids: Vec<_> = (0..60u64)
            .map(|v| {
                let mut g = pool.allocate().unwrap();
                fill(&mut g, v);
                g.id()
            })
            .collect();
        // No commit: the pages belong to the working epoch, so writing them in place is allowed.
        std::thread::scope(|s| {
            // The writer rewrites pages 30..60 in place (same content), forcing dirty evictions, and flushes.
            let (p, w_ids) = (&pool, &ids);
            s.spawn(move || {
                for _ in 0..20 {
                    for (v, &id) in w_ids.iter().enumerate().skip(30) {
                        let mut g = p.write(id).unwrap();
                        fill(&mut g, v as u64);
                    }
                    // Write-back while readers pin and evict frames.
                    p.flush_dirty().unwrap();
                }
            });
            for t in 0..3usize {
                let (p, r_ids) = (&pool, &ids);
                s.spawn(move || {
                    for i in 0..2000usize {
                        let v = (i * 7 + t * 13) % 60;
                        check(&p.read(r_ids[v]).unwrap(), v as u64);
                    }
                });
            }
        });
        pool.commit(b"").unwrap();
        for (v, &id) in ids.iter().enumerate() {
            check(&pool.read(id).unwrap(), v as u64);
        }
    }
}
