//! A small cache of pages of one immutable file, kept as *extents* (runs of consecutive pages).
//!
//! Extents go out least recently used first, within a budget of whole pages. A miss loads one page, or — when
//! it continues an extent already cached, as merges and scans do — a read-ahead extent (clipped to the
//! caller's limit), so sequential passes read several pages per call. A hit copies nothing: the caller's
//! closure sees the cached bytes under the cache's mutex. A miss loads without holding the mutex, so
//! concurrent misses overlap; two threads missing the same page both read it and the second copy is dropped.
//!
//! Read-ahead never reaches a cached extent (it stops before the next one), so a loaded extent never
//! overlaps a cached one and is always cached: a page just read is a hit next time, whatever is around it.
//!
//! Invariants: at most `budget_pages` pages are cached (more only for a single extent larger than the budget,
//! which is never asked for: read-ahead is clipped to the budget); extents never overlap; only pages the
//! caller's loader accepted are cached, so a damaged page is never served from the cache.
//!
//! Cost: a hit is a lock plus a scan of the (few) extents; a miss is one load call plus an eviction scan.

use crate::error::Result;
use crate::storage::PageBuf;
use parking_lot::Mutex;

/// Consecutive cached pages.
struct Extent {
    first: u64,
    pages: u64,
    buf: PageBuf,
    used: u64,
}

impl Extent {
    fn holds(&self, page_no: u64) -> bool {
        (self.first..self.first + self.pages).contains(&page_no)
    }
}

#[derive(Default)]
struct Extents {
    extents: Vec<Extent>,
    pages: u64,
    tick: u64,
}

/// A page cache of one file; see the module doc.
pub struct ExtentCache {
    page_size: usize,
    budget_pages: u64,
    readahead_pages: u64,
    inner: Mutex<Extents>,
}

impl std::fmt::Debug for ExtentCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExtentCache")
            .field("page_size", &self.page_size)
            .field("budget_pages", &self.budget_pages)
            .field("cached_pages", &self.inner.lock().pages)
            .finish()
    }
}

impl ExtentCache {
    /// A cache of at most `budget_bytes` of `page_size`-byte pages (never fewer than two pages) that reads
    /// ahead `readahead_bytes` (at least one page, at most the budget) when a miss continues an extent.
    pub fn new(page_size: usize, budget_bytes: usize, readahead_bytes: usize) -> ExtentCache {
        let budget_pages = Self::budget_pages(page_size, budget_bytes);
        ExtentCache {
            page_size,
            budget_pages,
            readahead_pages: ((readahead_bytes / page_size.max(1)).max(1) as u64).min(budget_pages),
            inner: Mutex::new(Extents::default()),
        }
    }

    /// Pages a cache of `budget_bytes` holds: at least two (the two end pages of a range).
    pub fn budget_pages(page_size: usize, budget_bytes: usize) -> u64 {
        (budget_bytes / page_size.max(1)).max(2) as u64
    }

    /// Bytes of cached pages now.
    pub fn cached_bytes(&self) -> usize {
        self.inner.lock().pages as usize * self.page_size
    }

    /// Calls `f` with page `page_no` (whole, trailer included) if it is cached (a hit, counted as a use);
    /// `None` on a miss, which loads nothing.
    pub fn peek<T>(&self, page_no: u64, f: impl FnOnce(&[u8]) -> T) -> Option<T> {
        let ps = self.page_size;
        let mut c = self.inner.lock();
        c.tick += 1;
        let tick = c.tick;
        let e = c.extents.iter_mut().find(|e| e.holds(page_no))?;
        e.used = tick;
        let at = (page_no - e.first) as usize * ps;
        Some(f(&e.buf[at..at + ps]))
    }

    /// Calls `f` with page `page_no` (whole, trailer included). On a miss, `load(first, buf)` must fill `buf`
    /// (a whole number of pages) with pages `first..` and check them; it is asked for one page, or for up to
    /// the read-ahead (never reaching `limit`, the first page number the caller may not read) when the miss
    /// continues a cached extent. What `load` accepts is cached.
    pub fn with_page<T>(
        &self,
        page_no: u64,
        limit: u64,
        load: impl FnOnce(u64, &mut [u8]) -> Result<()>,
        f: impl FnOnce(&[u8]) -> T,
    ) -> Result<T> {
        let ps = self.page_size;
        let (sequential, next_cached) = {
            let mut c = self.inner.lock();
            c.tick += 1;
            let tick = c.tick;
            if let Some(e) = c.extents.iter_mut().find(|e| e.holds(page_no)) {
                e.used = tick;
                let at = (page_no - e.first) as usize * ps;
                return Ok(f(&e.buf[at..at + ps]));
            }
            let next_cached = c
                .extents
                .iter()
                .map(|e| e.first)
                .filter(|&first| first > page_no)
                .min()
                .unwrap_or(u64::MAX);
            (
                c.extents.iter().any(|e| e.first + e.pages == page_no),
                next_cached,
            )
        };
        // Read-ahead stops before the next cached extent: an extent overlapping a cached one would not be
        // cached, so every later access to its first page would miss and read it all again.
        let n = if sequential {
            self.readahead_pages
                .min(limit.saturating_sub(page_no))
                .min(next_cached - page_no)
                .max(1)
        } else {
            1
        };
        let mut buf = PageBuf::new(n as usize * ps);
        load(page_no, &mut buf)?;
        let out = f(&buf[..ps]);
        let mut c = self.inner.lock();
        let overlaps = c
            .extents
            .iter()
            .any(|e| e.first < page_no + n && page_no < e.first + e.pages);
        if !overlaps {
            while c.pages + n > self.budget_pages {
                let Some(lru) = (0..c.extents.len()).min_by_key(|&x| c.extents[x].used) else {
                    break;
                };
                let e = c.extents.swap_remove(lru);
                c.pages -= e.pages;
            }
            c.tick += 1;
            let used = c.tick;
            c.pages += n;
            c.extents.push(Extent {
                first: page_no,
                pages: n,
                buf,
                used,
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use std::cell::RefCell;

    const PS: usize = 4096;

    /// Page `p` is filled with the byte `p`; every load is logged as (first, pages).
    fn loader(log: &RefCell<Vec<(u64, u64)>>) -> impl Fn(u64, &mut [u8]) -> Result<()> + '_ {
        move |first, buf| {
            log.borrow_mut().push((first, (buf.len() / PS) as u64));
            for (k, page) in buf.chunks_mut(PS).enumerate() {
                page.fill((first + k as u64) as u8);
            }
            Ok(())
        }
    }

    #[test]
    fn hits_read_nothing_and_sequential_misses_read_ahead() {
        let cache = ExtentCache::new(PS, 16 * PS, 4 * PS);
        let log = RefCell::new(Vec::new());
        for p in 0..10u64 {
            let got = cache.with_page(p, 10, loader(&log), |b| b[0]).unwrap();
            assert_eq!(got, p as u8);
        }
        // One page, then read-ahead extents of 4 pages, the last clipped to the limit.
        assert_eq!(*log.borrow(), vec![(0, 1), (1, 4), (5, 4), (9, 1)]);
        for p in 0..10u64 {
            cache.with_page(p, 10, loader(&log), |_| ()).unwrap();
        }
        assert_eq!(log.borrow().len(), 4, "hits load nothing");
        assert_eq!(cache.cached_bytes(), 10 * PS);
    }

    /// A sequential miss just below a cached extent reads only up to it, and what it read is cached: the
    /// page is a hit next time. (Read-ahead over the cached extent used to be dropped as overlapping, so
    /// each access to the page read the whole read-ahead again.)
    #[test]
    fn read_ahead_stops_before_a_cached_extent_and_is_cached() {
        let cache = ExtentCache::new(PS, 16 * PS, 8 * PS);
        let log = RefCell::new(Vec::new());
        for p in [10u64, 13, 11] {
            cache.with_page(p, 100, loader(&log), |_| ()).unwrap();
        }
        // 11 continues 10's extent: read ahead 11..13 only, since 13 is cached.
        assert_eq!(*log.borrow(), vec![(10, 1), (13, 1), (11, 2)]);
        for _ in 0..5 {
            for p in 10..14u64 {
                let got = cache.with_page(p, 100, loader(&log), |b| b[0]).unwrap();
                assert_eq!(got, p as u8);
            }
        }
        assert_eq!(log.borrow().len(), 3, "every page is cached after one read");
        assert_eq!(cache.cached_bytes(), 4 * PS);
    }

    #[test]
    fn the_budget_holds_and_the_least_recently_used_extent_goes() {
        let cache = ExtentCache::new(PS, 3 * PS, PS);
        let log = RefCell::new(Vec::new());
        for p in [10, 20, 30] {
            cache.with_page(p, 100, loader(&log), |_| ()).unwrap();
        }
        cache.with_page(10, 100, loader(&log), |_| ()).unwrap(); // 20 is now the oldest
        cache.with_page(40, 100, loader(&log), |_| ()).unwrap();
        assert_eq!(cache.cached_bytes(), 3 * PS);
        log.borrow_mut().clear();
        for p in [10, 30, 40] {
            cache.with_page(p, 100, loader(&log), |_| ()).unwrap();
        }
        assert!(log.borrow().is_empty());
        cache.with_page(20, 100, loader(&log), |_| ()).unwrap();
        assert_eq!(*log.borrow(), vec![(20, 1)]);
    }

    #[test]
    fn a_rejected_load_is_not_cached() {
        let cache = ExtentCache::new(PS, 8 * PS, PS);
        let bad = cache.with_page(
            3,
            8,
            |_, _| Err(Error::corruption("/f", 3 * PS as u64, "bad")),
            |_| (),
        );
        assert!(bad.is_err());
        assert_eq!(cache.cached_bytes(), 0);
        let log = RefCell::new(Vec::new());
        assert_eq!(cache.with_page(3, 8, loader(&log), |b| b[0]).unwrap(), 3);
        assert_eq!(log.borrow().len(), 1);
    }
}
