//! `BufferPool`: a CLOCK cache of page frames over a [`PageFile`], within a memory budget.
//!
//! ## Design
//! * `frame_count = max(budget_bytes / page_size, 8)` frames, each a page-sized heap buffer (allocated when the
//!   frame is first used, so a large budget costs nothing until it fills) behind its own
//!   `parking_lot::RwLock` (the **data lock**), plus one atomic **state word**: the pin count, a `LOCKED` bit
//!   and the frame's hit counter. A frame sits alone in its cache line.
//! * The map from page id to frame is a lock-free [`PageTable`]; each frame also records its page id. A
//!   **hit** takes no lock: it looks the frame up, pins it with one compare-and-swap of the state word (refused
//!   while `LOCKED`), then checks that the frame still holds the page (it may have been reassigned between the
//!   look-up and the pin; then it unpins and looks again).
//! * One **replacement mutex** serializes changes of the mapping: the CLOCK hand, the list of empty frames,
//!   the miss counters and every `set`/`clear` of the page table. It is never held during I/O.
//! * A **miss** claims a frame under the mutex: an empty one, or the CLOCK victim, whose state goes from 0 (no
//!   pin) to `LOCKED` in one compare-and-swap, so nobody can pin it any more. The claimer takes the frame's
//!   data lock, releases the mutex, writes the victim back if it is dirty (the old page stays mapped,
//!   `LOCKED`, meanwhile), maps the new page under the mutex again, releases it, and reads the page. Threads
//!   wanting a `LOCKED` frame wait on its data lock, which the claimer holds for the whole I/O, and then
//!   look again: misses on different pages overlap, and concurrent misses on the same page read it once.
//! * A guard ([`PageReadGuard`], [`PageWriteGuard`]) holds the frame's pin and its data lock; on drop it
//!   releases the data lock first, then the pin. Hence an unpinned frame's data lock is free, except for the
//!   instant a waiter holds it.
//! * Replacement is CLOCK with insertion at 0: a page loaded on a miss gets its reference bit only when it
//!   is used again (a hit), so pages read once (a scan's leaves, a random lookup's leaf) are evicted before
//!   pages every operation touches (a tree's upper levels). Freshly allocated pages start referenced. A
//!   page that fails to load is not left cached.
//!
//! ## Invariants
//! * A frame's page id and its page-table entry change only while the frame is `LOCKED` (or, in `free` and
//!   `allocate`, unpinned) and under the replacement mutex; `LOCKED` is set only when the pin count is 0, and
//!   a pin is taken only when `LOCKED` is clear. So a pinned frame keeps its page.
//! * A frame in the empty list holds no page and is neither pinned (but for a stale look-up's instant) nor
//!   `LOCKED`.
//! * A dirty page is written back before its frame is reused, by whoever claims the frame; `flush_dirty` waits
//!   for a write-back under way, so after it returns every page dirty when it started is on file.
//! * A commit's second half (`finish_commit`, on the checkpoint thread) writes each sealed page from a copy
//!   taken under the page's lock, holding only the pin during the write: sealed images are never changed in
//!   place, so the page's readers and copy-on-write writers do not wait for the write.
//!
//! ## Lock order (no deadlocks)
//! replacement mutex → data lock of a frame this thread just `LOCKED` (only instantly contended). Nobody
//! blocks on anything while holding the mutex otherwise, and a thread holding a `LOCKED` frame only waits for
//! the mutex and for its own I/O. A thread may hold guards (pins, data locks) while it misses, because the
//! victim is never a pinned frame.
//!
//! Caller rules: a thread must not take a guard on a page it already holds a *write* guard for, nor a write
//! guard on a page it holds any guard for (self-deadlock on the frame's RwLock), nor call `write_cow(id)` while
//! holding a guard on `id` (the old page is freed); `flush_dirty` / `commit` must be called with no guard held
//! by the calling thread; `free` must not be called on a pinned page. Pages must be freed through the pool
//! (not `PageFile::free` directly) so no stale copy stays cached.
//!
//! ## Cost
//! A hit: three loads in the page table, one compare-and-swap and one load on the frame's line, one RwLock
//! acquisition; no allocation, no shared write but the frame's own line. Dropping a guard: an RwLock release
//! and an atomic decrement. A miss: the replacement mutex twice (three times with a dirty victim), one page
//! read, plus one page write when the CLOCK victim is dirty. `allocate` never reads.

use super::page::{PageId, page_epoch, set_page_epoch};
use super::page_file::{PageFile, SealedCommit};
use super::page_table::{ID_LIMIT, PageTable};
use crate::error::{Error, Result};
use parking_lot::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Checks the structure of a page image when it is loaded from disk (after its checksum verified).
pub type PageValidator = Box<dyn Fn(&[u8]) -> std::result::Result<(), String> + Send + Sync>;

/// State word: pins in the low bits.
const PIN_MASK: u64 = (1 << 24) - 1;
/// State word: the frame is being claimed, loaded or written back by one thread; nobody may pin it.
const LOCKED: u64 = 1 << 24;
/// State word: one hit, counted in the bits above `LOCKED`.
const HIT: u64 = 1 << 25;
/// A frame's page id when it holds no page.
const NO_PAGE: u64 = u64::MAX;

/// One cache frame, alone in its cache line.
#[repr(align(64))]
struct Frame {
    /// Pins (bits 0..24), `LOCKED` (bit 24), hits since the pool was created (bits 25..64).
    state: AtomicU64,
    /// The page held, or `NO_PAGE`. Changes only while `LOCKED` or unpinned, under the replacement mutex.
    page: AtomicU64,
    /// The page image; empty until the frame is first used. Plain heap memory: the page file bounces
    /// O_DIRECT I/O through an aligned buffer, which costs a 4 KiB copy per I/O but saves the 2× overhead of
    /// aligned small allocations on every frame.
    data: RwLock<Vec<u8>>,
    /// The bytes differ from the page on disk. Set by a write guard (holding the data lock), cleared after a
    /// write-back (holding the data lock).
    dirty: AtomicBool,
    /// CLOCK reference bit: set by hits, cleared by the hand.
    referenced: AtomicBool,
}

impl Frame {
    fn new() -> Frame {
        Frame {
            state: AtomicU64::new(0),
            page: AtomicU64::new(NO_PAGE),
            data: RwLock::new(Vec::new()),
            dirty: AtomicBool::new(false),
            referenced: AtomicBool::new(false),
        }
    }

    /// Pins the frame if it is not `LOCKED` (counting a hit when `hit`); `false` if it is.
    #[inline]
    fn try_pin(&self, hit: bool) -> bool {
        let add = 1 + if hit { HIT } else { 0 };
        let mut s = self.state.load(Ordering::Relaxed);
        loop {
            if s & LOCKED != 0 {
                return false;
            }
            debug_assert!(s & PIN_MASK < PIN_MASK, "pin count overflow");
            match self
                .state
                .compare_exchange_weak(s, s + add, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(now) => s = now,
            }
        }
    }

    /// Sets `LOCKED` if the frame is neither pinned nor `LOCKED`.
    fn try_lock(&self) -> bool {
        let s = self.state.load(Ordering::Relaxed);
        s & (PIN_MASK | LOCKED) == 0
            && self
                .state
                .compare_exchange(s, s | LOCKED, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
    }

    /// Clears `LOCKED`, leaving `pins` pins (0 or 1) to the caller.
    fn unlock(&self, pins: u64) {
        let s = self.state.load(Ordering::Relaxed);
        debug_assert!(s & LOCKED != 0 && s & PIN_MASK == 0);
        self.state.store((s & !LOCKED) + pins, Ordering::Release);
    }

    /// Waits while another thread holds the frame `LOCKED` (it holds the data lock throughout its I/O).
    fn wait_unlocked(&self) {
        let mut rounds = 0u32;
        while self.state.load(Ordering::Acquire) & LOCKED != 0 {
            drop(self.data.read());
            rounds += 1;
            if rounds > 16 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// Undoes a `try_pin(true)` that found another page in the frame (the hit is not counted).
    fn unpin_miscounted(&self) {
        self.state.fetch_sub(1 + HIT, Ordering::Release);
    }

    fn pins(&self) -> u64 {
        self.state.load(Ordering::Acquire) & PIN_MASK
    }
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

/// What the replacement mutex guards.
struct Replacer {
    /// Frames holding no page.
    empty: Vec<usize>,
    hand: usize,
    misses: u64,
    evictions: u64,
    writebacks: u64,
}

/// A cache of page frames over a [`PageFile`] (see the module doc).
pub struct BufferPool {
    file: PageFile,
    page_size: usize,
    frames: Box<[Frame]>,
    table: PageTable,
    replacer: Mutex<Replacer>,
    validator: Option<PageValidator>,
    /// Images of sealed-epoch pages freed before the commit under way wrote them (a writer copied the
    /// page on write, then freed the old one): `finish_commit` writes them. At most the pages dirty at the
    /// seal, so the copies are bounded by the pool.
    sealed_copies: Mutex<Vec<(PageId, Vec<u8>)>>,
    /// The images `finish_commit` wrote, handed back whole to the writers: `copy_for_commit` reuses them,
    /// and `begin_commit` (a writer) frees those over [`SPENT_COPIES_KEPT`]. So the checkpoint thread never
    /// frees a block a writer allocated: with glibc that takes the writer's arena lock, which the writer's
    /// next `malloc` then waited for whenever the checkpoint thread was preempted holding it.
    spent_copies: Mutex<Vec<(PageId, Vec<u8>)>>,
}

/// Spent sealed-page images kept for reuse from one commit to the next.
const SPENT_COPIES_KEPT: usize = 256;

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
        self.0.state.fetch_sub(1, Ordering::Release);
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

/// A frame this thread claimed: `LOCKED`, mapped to no page, clean, its data lock held.
struct Claimed<'a> {
    frame: usize,
    data: RwLockWriteGuard<'a, Vec<u8>>,
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
        BufferPool {
            file,
            page_size,
            frames: (0..n).map(|_| Frame::new()).collect(),
            table: PageTable::default(),
            replacer: Mutex::new(Replacer {
                empty: (0..n).rev().collect(),
                hand: 0,
                misses: 0,
                evictions: 0,
                writebacks: 0,
            }),
            validator,
            sealed_copies: Mutex::new(Vec::new()),
            spent_copies: Mutex::new(Vec::new()),
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
        self.frames
            .iter()
            .filter(|f| f.page.load(Ordering::Acquire) != NO_PAGE)
            .count()
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
        let r = self.replacer.lock();
        CacheStats {
            hits: self
                .frames
                .iter()
                .map(|f| f.state.load(Ordering::Relaxed) / HIT)
                .sum(),
            misses: r.misses,
            evictions: r.evictions,
            writebacks: r.writebacks,
        }
    }

    /// Pins page `id` in a frame (loading it on a miss) and returns the frame index.
    #[inline]
    fn pin(&self, id: PageId) -> Result<usize> {
        if let Some(f) = self.table.get(id) {
            let frame = &self.frames[f];
            if frame.try_pin(true) {
                if frame.page.load(Ordering::Acquire) == id {
                    if !frame.referenced.load(Ordering::Relaxed) {
                        frame.referenced.store(true, Ordering::Relaxed);
                    }
                    return Ok(f);
                }
                frame.unpin_miscounted();
            }
        }
        self.pin_slow(id)
    }

    /// The miss path of [`pin`](Self::pin): waits for a frame being loaded or written back, or loads the page.
    #[cold]
    fn pin_slow(&self, id: PageId) -> Result<usize> {
        if id >= ID_LIMIT {
            self.file.check_page_id(id)?;
            return Err(Error::ResourceExhausted(format!(
                "page {id} is beyond the buffer pool's page table (ids below {ID_LIMIT})"
            )));
        }
        loop {
            let r = self.replacer.lock();
            if let Some(f) = self.table.get(id) {
                drop(r);
                let frame = &self.frames[f];
                if frame.try_pin(true) {
                    if frame.page.load(Ordering::Acquire) == id {
                        frame.referenced.store(true, Ordering::Relaxed);
                        return Ok(f);
                    }
                    frame.unpin_miscounted();
                } else {
                    frame.wait_unlocked();
                }
                continue;
            }
            let (mut r, claimed) = self.claim_frame(r)?;
            if self.table.get(id).is_some() {
                // Loaded by another thread while this one wrote its victim back.
                self.release_claim(&mut r, claimed);
                continue;
            }
            let Claimed { frame: f, mut data } = claimed;
            let frame = &self.frames[f];
            r.misses += 1;
            frame.page.store(id, Ordering::Release);
            frame.referenced.store(false, Ordering::Relaxed);
            self.table.set(id, f);
            drop(r);
            return match self.load(id, &mut data) {
                Ok(()) => {
                    frame.unlock(1);
                    Ok(f)
                }
                Err(e) => {
                    let mut r = self.replacer.lock();
                    self.table.clear(id);
                    frame.page.store(NO_PAGE, Ordering::Release);
                    self.release_claim(&mut r, Claimed { frame: f, data });
                    Err(e)
                }
            };
        }
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

    /// Claims a frame holding no page: an empty one, else the CLOCK victim, written back first if dirty (the
    /// mutex is released during that write and taken again). On a write-back error the victim stays cached
    /// and dirty.
    fn claim_frame<'a>(
        &'a self,
        mut r: MutexGuard<'a, Replacer>,
    ) -> Result<(MutexGuard<'a, Replacer>, Claimed<'a>)> {
        let f = self.lock_victim(&mut r)?;
        let frame = &self.frames[f];
        let mut data = frame.data.write();
        let old = frame.page.load(Ordering::Acquire);
        if old != NO_PAGE && frame.dirty.load(Ordering::Acquire) {
            // The old page stays mapped and LOCKED while it is written: whoever wants it waits.
            let written = MutexGuard::unlocked(&mut r, || self.file.write_page(old, &mut data));
            if let Err(e) = written {
                frame.unlock(0);
                return Err(e);
            }
            frame.dirty.store(false, Ordering::Release);
            r.writebacks += 1;
        }
        if old != NO_PAGE {
            self.table.clear(old);
            frame.page.store(NO_PAGE, Ordering::Release);
            r.evictions += 1;
        }
        Ok((r, Claimed { frame: f, data }))
    }

    /// Takes an empty frame or the CLOCK victim and sets it `LOCKED`.
    fn lock_victim(&self, r: &mut Replacer) -> Result<usize> {
        if let Some(f) = r.empty.pop() {
            // Only a stale look-up's instant pin can be in the way.
            let frame = &self.frames[f];
            while !frame.try_lock() {
                std::thread::yield_now();
            }
            return Ok(f);
        }
        let n = self.frames.len();
        // Two sweeps: the first clears every reference bit it passes, so the second finds any unpinned frame.
        for _ in 0..2 * n {
            let f = r.hand;
            r.hand = if f + 1 == n { 0 } else { f + 1 };
            let frame = &self.frames[f];
            if frame.state.load(Ordering::Relaxed) & (PIN_MASK | LOCKED) != 0 {
                continue;
            }
            // A frame left unmapped by a `free` while pinned is taken at once; otherwise CLOCK.
            if frame.page.load(Ordering::Relaxed) != NO_PAGE
                && frame.referenced.swap(false, Ordering::Relaxed)
            {
                continue;
            }
            if frame.try_lock() {
                return Ok(f);
            }
        }
        Err(Error::ResourceExhausted(format!(
            "all {n} buffer pool frames are pinned; raise the cache budget or hold fewer pages at once"
        )))
    }

    /// Gives a claimed frame back, empty.
    fn release_claim(&self, r: &mut Replacer, claimed: Claimed<'_>) {
        let frame = &self.frames[claimed.frame];
        r.empty.push(claimed.frame);
        frame.unlock(0);
        drop(claimed.data);
    }

    /// Asks the CPU for the cache line of the frame holding page `id`, if the page is cached, so that a
    /// [`read`](Self::read) soon after finds it there. Only a hint: no pin, no lock, no effect on the cache.
    #[inline]
    pub fn prefetch(&self, id: PageId) {
        if let Some(frame) = self.table.get(id).and_then(|f| self.frames.get(f)) {
            crate::algo::prefetch_line(frame);
        }
    }

    /// Shared access to page `id`, loading it (checksum and validator verified) on a miss.
    #[inline]
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
        if id >= ID_LIMIT {
            self.file.free(id, epoch);
            return Err(Error::ResourceExhausted(format!(
                "page {id} is beyond the buffer pool's page table (ids below {ID_LIMIT})"
            )));
        }
        let (r, Claimed { frame: f, mut data }) = loop {
            // A cached copy is only possible if the page was freed behind the pool's back: drop it.
            if self.table.get(id).is_some() {
                debug_assert!(false, "page {id} was cached while free");
                self.uncache(id);
            }
            let (mut r, claimed) = match self.claim_frame(self.replacer.lock()) {
                Ok(c) => c,
                Err(e) => {
                    self.file.free(id, epoch);
                    return Err(e);
                }
            };
            if self.table.get(id).is_none() {
                break (r, claimed);
            }
            self.release_claim(&mut r, claimed);
        };
        let frame = &self.frames[f];
        data.clear();
        data.resize(self.page_size, 0);
        set_page_epoch(&mut data, epoch);
        frame.dirty.store(true, Ordering::Release);
        frame.referenced.store(true, Ordering::Relaxed);
        frame.page.store(id, Ordering::Release);
        self.table.set(id, f);
        drop(r);
        frame.unlock(1);
        Ok(PageWriteGuard {
            data,
            id,
            _pin: Pin(frame),
        })
    }

    /// Frees page `id` (whose image carries `page_epoch`): drops its cached copy without writing it back, and
    /// returns it to the page file. The page must not be pinned. A dirty page of an epoch older than the
    /// working one belongs to a commit under way (see [`begin_commit`](Self::begin_commit)), which still has
    /// to write it: its image is copied aside for that commit (no I/O here, so a writer never waits on the
    /// commit's writes).
    pub fn free(&self, id: PageId, page_epoch: u64) {
        if page_epoch < self.file.epoch() {
            self.copy_for_commit(id);
        }
        self.uncache(id);
        self.file.free(id, page_epoch);
    }

    /// If page `id` is cached and dirty, moves its image to `sealed_copies` and marks the frame clean.
    fn copy_for_commit(&self, id: PageId) {
        loop {
            let Some(f) = self.table.get(id) else {
                return;
            };
            let frame = &self.frames[f];
            if !frame.dirty.load(Ordering::Acquire) {
                return;
            }
            if !frame.try_pin(false) {
                frame.wait_unlocked();
                continue;
            }
            let _pin = Pin(frame);
            if frame.page.load(Ordering::Acquire) != id {
                continue;
            }
            let data = frame.data.write();
            if frame.dirty.load(Ordering::Acquire) {
                // Under the frame's data lock, so `flush_dirty_through` either wrote this image before or
                // finds the frame clean after.
                let image = match self.spent_copies.lock().pop() {
                    Some((_, mut image)) => {
                        image.clear();
                        image.extend_from_slice(&data);
                        image
                    }
                    None => data.to_vec(),
                };
                self.sealed_copies.lock().push((id, image));
                frame.dirty.store(false, Ordering::Release);
            }
            return;
        }
    }

    /// Drops the cached copy of page `id`, if any, without writing it back (after a write-back under way).
    fn uncache(&self, id: PageId) {
        loop {
            let mut r = self.replacer.lock();
            let Some(f) = self.table.get(id) else {
                return;
            };
            let frame = &self.frames[f];
            if frame.state.load(Ordering::Acquire) & LOCKED != 0 {
                // A write-back of this page is under way; let it land before the id can be reused.
                drop(r);
                frame.wait_unlocked();
                continue;
            }
            let pinned = frame.pins() != 0;
            // (A commit under way may pin it for a moment to write it.)
            debug_assert!(
                !pinned || self.file.sealed_epoch().is_some(),
                "free of page {id} while it is pinned"
            );
            self.table.clear(id);
            frame.page.store(NO_PAGE, Ordering::Release);
            frame.dirty.store(false, Ordering::Release);
            if !pinned {
                r.empty.push(f);
            }
            // A pinned frame stays out of the empty list; CLOCK reuses it once unpinned.
            return;
        }
    }

    /// Writes every dirty frame to the file and clears its dirty bit. The calling thread must hold no guard.
    pub fn flush_dirty(&self) -> Result<()> {
        self.flush_dirty_through(u64::MAX)
    }

    /// Writes every dirty frame whose page image carries an epoch ≤ `epoch`, and clears its dirty bit.
    ///
    /// With `epoch == u64::MAX` (a full flush, pages of the working epoch included) each page is written
    /// under its data lock, since a writer could change it in place meanwhile. For a sealed epoch
    /// ([`finish_commit`](Self::finish_commit)) the page is copied out under the lock and written with only
    /// the pin held: its image is final (sealed pages are copied on write, never changed in place), so
    /// readers and copy-on-write writers of the page do not wait for the write, which can take milliseconds
    /// when the kernel throttles dirty pages. The lock is taken again afterwards to clear the dirty bit, so a
    /// concurrent [`copy_for_commit`](Self::copy_for_commit) either ran before that (and wrote the same
    /// image once more) or finds the frame clean.
    fn flush_dirty_through(&self, epoch: u64) -> Result<()> {
        let copy_out = epoch != u64::MAX;
        let mut scratch = Vec::new();
        for frame in self.frames.iter() {
            while frame.dirty.load(Ordering::Acquire) {
                if !frame.try_pin(false) {
                    // Being written back by an eviction: wait for it to land.
                    frame.wait_unlocked();
                    continue;
                }
                let _pin = Pin(frame);
                let mut data = frame.data.write();
                let id = frame.page.load(Ordering::Acquire);
                if id == NO_PAGE
                    || !frame.dirty.load(Ordering::Acquire)
                    || page_epoch(&data) > epoch
                {
                    break;
                }
                if !copy_out {
                    self.file.write_page(id, &mut data)?;
                    frame.dirty.store(false, Ordering::Release);
                    break;
                }
                scratch.clear();
                scratch.extend_from_slice(&data);
                drop(data);
                self.file.write_page(id, &mut scratch)?;
                // The pin kept the frame from reuse; if page `id` was freed meanwhile, its frame is clean
                // already and holds no page.
                let _data = frame.data.write();
                frame.dirty.store(false, Ordering::Release);
                break;
            }
        }
        Ok(())
    }

    /// The first half of a commit that can finish while writes go on: seals the working epoch with
    /// `user_root` ([`PageFile::begin_commit`]). Pages of the sealed epoch are no longer modified in place
    /// (callers copy them on write, as [`write_cow`](Self::write_cow) does), so their images stay what the
    /// commit must write.
    pub fn begin_commit(&self, user_root: &[u8]) -> Result<SealedCommit> {
        // The spare images over the bound are freed here, on the writer that allocated them.
        self.spent_copies.lock().truncate(SPENT_COPIES_KEPT);
        self.file.begin_commit(user_root)
    }

    /// The second half: writes every dirty page of the sealed epoch or older, then makes the commit durable
    /// ([`PageFile::finish_commit`]). Runs beside writers of the next epoch; the calling thread must hold no
    /// guard.
    pub fn finish_commit(&self, sealed: SealedCommit) -> Result<()> {
        self.flush_dirty_through(sealed.epoch())?;
        // Every sealed-epoch frame is clean now, so no copy is added after this.
        let mut copies = std::mem::take(&mut *self.sealed_copies.lock());
        for (id, image) in &mut copies {
            self.file.write_page(*id, image)?;
        }
        // Back to the writers whole (see `spent_copies`).
        let mut spent = self.spent_copies.lock();
        if spent.is_empty() {
            std::mem::swap(&mut *spent, &mut copies);
        } else {
            spent.append(&mut copies);
        }
        drop(spent);
        self.file.finish_commit(sealed)
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
    use crate::storage::HookedVfs;
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

    /// Allocates pages 0..n, each filled with its number as the tag.
    fn allocate_filled(pool: &BufferPool, n: u64) -> Vec<PageId> {
        (0..n)
            .map(|v| {
                let mut g = pool.allocate().unwrap();
                fill(&mut g, v);
                g.id()
            })
            .collect()
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
        let ids: Vec<_> = allocate_filled(&pool, 10);
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
        let ids: Vec<_> = allocate_filled(&pool, 9);
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
        let ids: Vec<_> = allocate_filled(&pool, 200);
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
        let ids: Vec<_> = allocate_filled(&pool, 60);
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

    /// A page file whose reads and writes of one offset block until the test opens the gate.
    mod gate {
        use crate::error::Result;
        use crate::storage::{VfsHook, VfsOp};
        use parking_lot::{Condvar, Mutex};
        use std::path::Path;

        #[derive(Debug, Default)]
        pub struct Gate {
            /// (offset held back, threads waiting at it, open)
            state: Mutex<(Option<u64>, usize, bool)>,
            cv: Condvar,
        }

        impl Gate {
            pub fn hold(&self, offset: u64) {
                *self.state.lock() = (Some(offset), 0, false);
            }
            /// Waits until `n` reads or writes wait at the gate.
            pub fn wait_for_held(&self, n: usize) {
                let mut st = self.state.lock();
                while st.1 < n {
                    self.cv.wait(&mut st);
                }
            }
            pub fn open(&self) {
                self.state.lock().2 = true;
                self.cv.notify_all();
            }
            fn pass(&self, offset: u64) {
                let mut st = self.state.lock();
                if st.0 != Some(offset) {
                    return;
                }
                st.1 += 1;
                self.cv.notify_all();
                while !st.2 {
                    self.cv.wait(&mut st);
                }
            }
        }

        /// Holds up reads and writes of the gate's offset.
        impl VfsHook for Gate {
            fn before(&self, op: VfsOp<'_>, _path: &Path) -> Result<()> {
                if let VfsOp::Read { offset } | VfsOp::Write { offset } = op {
                    self.pass(offset);
                }
                Ok(())
            }
        }
    }

    /// A miss whose read is stuck holds up neither hits nor misses on other pages (no I/O under a shared
    /// lock), and a second reader of the stuck page waits for that one read instead of issuing its own.
    #[test]
    fn a_stuck_miss_holds_up_no_other_page_and_is_read_once() {
        let e = env();
        let ids: Vec<_> = {
            let pool = e.create(16);
            let ids = allocate_filled(&pool, 6);
            pool.commit(b"").unwrap();
            ids
        };
        let g = Arc::new(gate::Gate::default());
        let vfs: Arc<dyn Vfs> = Arc::new(HookedVfs::new(e.vfs.clone(), g.clone()));
        let pf = PageFile::open(&vfs, &e.path, OPTS, e.stats.clone()).unwrap();
        let pool = BufferPool::new(pf, 8 * PS, None);
        check(&pool.read(ids[0]).unwrap(), 0);
        g.hold(ids[1] * PS as u64);
        let reads_before = e.reads();
        std::thread::scope(|s| {
            let (pool, ids) = (&pool, &ids);
            let stuck: Vec<_> = (0..2)
                .map(|_| s.spawn(move || check(&pool.read(ids[1]).unwrap(), 1)))
                .collect();
            g.wait_for_held(1);
            // While the read of ids[1] is stuck: a hit and misses on other pages complete.
            let (tx, rx) = std::sync::mpsc::channel();
            s.spawn(move || {
                check(&pool.read(ids[0]).unwrap(), 0);
                for (v, &id) in ids.iter().enumerate().skip(2) {
                    check(&pool.read(id).unwrap(), v as u64);
                }
                tx.send(()).unwrap();
            });
            let done = rx.recv_timeout(std::time::Duration::from_secs(10));
            g.open();
            assert!(done.is_ok(), "other pages waited for a stuck read");
            for t in stuck {
                t.join().unwrap();
            }
        });
        assert_eq!(
            e.reads() - reads_before,
            5,
            "ids[1] read once for both readers, ids[2..6] once each"
        );
        let cs = pool.cache_stats();
        assert_eq!((cs.hits, cs.misses), (2, 6), "{cs:?}");
    }

    /// While the second half of a commit writes a sealed page, the page's readers and a writer copying it
    /// on write go on: the write goes out from a copy, not under the page's lock. The commit still records
    /// the sealed image.
    #[test]
    fn a_stuck_commit_write_holds_up_no_reader_or_copy_on_write() {
        let e = env();
        let g = Arc::new(gate::Gate::default());
        let vfs: Arc<dyn Vfs> = Arc::new(HookedVfs::new(e.vfs.clone(), g.clone()));
        let pf = PageFile::create(&vfs, &e.path, OPTS, e.stats.clone()).unwrap();
        let pool = BufferPool::new(pf, 16 * PS, None);
        let ids = allocate_filled(&pool, 4);
        let sealed = pool.begin_commit(b"sealed").unwrap();
        g.hold(ids[1] * PS as u64);
        let moved = std::thread::scope(|s| {
            let (pool, ids) = (&pool, &ids);
            let commit = s.spawn(move || pool.finish_commit(sealed));
            g.wait_for_held(1);
            let (tx, rx) = std::sync::mpsc::channel();
            s.spawn(move || {
                check(&pool.read(ids[1]).unwrap(), 1);
                let mut w = pool.write_cow(ids[1]).unwrap();
                fill(&mut w, 11);
                tx.send(w.id()).unwrap();
            });
            let moved = rx.recv_timeout(std::time::Duration::from_secs(10));
            g.open();
            commit.join().unwrap().unwrap();
            moved.expect("a reader or a copy on write waited for the commit's write")
        });
        assert_ne!(moved, ids[1], "a sealed page is copied on write");
        check(&pool.read(moved).unwrap(), 11);
        drop(pool);
        let pool = e.reopen(8, None);
        assert_eq!(pool.file().user_root(), b"sealed");
        for (v, &id) in ids.iter().enumerate() {
            check(&pool.read(id).unwrap(), v as u64);
        }
    }
}
