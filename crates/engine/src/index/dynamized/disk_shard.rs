//! The on-disk ISAM shard: a [`Shard`] over a shard file (`shard_file`), read page by page.
//!
//! ## What is resident
//! Only the file's *summary* — the fence keys (first key of each record page and of each tombstone page) and,
//! in weighted shards, the prefix sums of the per-page weight sums — plus a small cache of recently read
//! pages (at most [`cache_limit_bytes`]: [`CACHE_BYTES`], or two pages when pages exceed 32 KiB). The Bloom filters and the delete tags live in the framework's
//! `ShardSlot`, in memory as for every shard. [`Shard::memory_bytes`] reports the summary and the cache.
//!
//! ## Access
//! * Record `i` is slot `i % per_page` of record page `1 + i / per_page`, so a uniform index is a uniform
//!   record (every slot of every page is one index; the last page is simply shorter).
//! * `lower_bound(k)` / `upper_bound(k)`: a binary search over the fences picks the one page that can hold
//!   the answer (the last page whose first key is below / not above `k`), then a binary search inside it; the
//!   answer is either in that page or the first record of the next one. One page read, none when `k` is
//!   below the first key.
//! * `has_tombstone(k)`: the same over the tombstone fences and one tombstone page. The framework calls it
//!   only when the shard's tombstone Bloom filter says maybe.
//! * Weighted shards: `range_weight(lo, hi)` = the partial sums of the two end pages + the prefix-sum
//!   difference of the pages between; `sample_in` splits a uniform point of that total the same way, so it
//!   reads at most one page besides the two end pages (which `range_weight` has just cached).
//!
//! Every page read goes through the `Vfs` (O_DIRECT when the database uses it), is counted as
//! `FileKind::Shards`, and is checked before use (checksum, key order, fences, page weight sum:
//! `ShardFile::check_record_page`), so damage is an `Error::Corruption` with the file and the page's offset.
//!
//! ## Cache
//! A `storage::extent_cache::ExtentCache`: extents of consecutive pages, least recently used out, at most [`cache_limit_bytes`] in all. A miss reads one
//! page, or — when a sequential accessor (`key_at`, `record_at`, `tombstone_at`) continues an extent
//! already cached, as merges, scans and the sampler's killer table do — a read-ahead extent of
//! [`READAHEAD_BYTES`] (clipped to the region and to the next cached extent), so sequential passes read
//! 32 KiB per call. Point accesses (bound searches, lookups, weighted picks) read only their page. A hit copies the
//! wanted bytes out under a mutex; a miss reads without holding it.
//!
//! ## Cost (in page reads; p = records per page)
//! * `key_at`, `record_at`, `tombstone_at`: 1 on a miss, 0 on a hit.
//! * `lower_bound`, `upper_bound`, `find`, `has_tombstone`: ≤ 1.
//! * `range_weight`: ≤ 2; a weighted `sample_in`: ≤ 3 (≤ 1 beyond the two end pages).
//! * A sequential pass over n records: ⌈n / p⌉ pages in ⌈n / (p · readahead pages)⌉ calls.

use super::run::{Record, SortedRun};
use super::shard::{BuildOptions, Shard, unit_f64};
use super::shard_file::{
    PageBatch, ShardFile, ShardSummary, TRAILER, batched_reads, record_in, record_key, tomb_in,
};
use crate::algo::bloom::BloomFilter;
use crate::error::{Error, Result};
use crate::storage::extent_cache::ExtentCache;
use rand::RngCore;

/// Bytes of pages a disk shard caches at most.
pub const CACHE_BYTES: usize = 64 << 10;
/// Bytes read at once when a miss continues a cached extent.
pub const READAHEAD_BYTES: usize = 32 << 10;

/// Bytes of pages a disk shard over `page_size`-byte pages caches at most: [`CACHE_BYTES`], but never fewer
/// than two pages (the two end pages of a range), so 128 KiB for 64 KiB pages and 8 MiB for 4 MiB pages.
pub fn cache_limit_bytes(page_size: usize) -> usize {
    ExtentCache::budget_pages(page_size, CACHE_BYTES) as usize * page_size
}

/// An on-disk ISAM shard.
pub struct DiskShard {
    file: ShardFile,
    summary: ShardSummary,
    /// `prefix[r]` = weight of record pages `0..r` (weighted shards; `pages + 1` entries).
    prefix: Vec<f64>,
    len: usize,
    tombstones: usize,
    per_page: usize,
    tombs_per_page: usize,
    weighted: bool,
    page_size: usize,
    cache: ExtentCache,
}

impl std::fmt::Debug for DiskShard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskShard")
            .field("file", &self.file.path)
            .field("records", &self.len)
            .field("tombstones", &self.tombstones)
            .finish()
    }
}

/// Which pages a read belongs to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Region {
    Records,
    Tombstones,
}

impl DiskShard {
    /// Opens a shard over `file` with its `summary` (from `ShardFile::read_summary`, or from the writer).
    pub fn new(file: ShardFile, summary: ShardSummary) -> Result<DiskShard> {
        let h = &file.header;
        if summary.fences.len() as u64 != h.record_pages
            || summary.tomb_fences.len() as u64 != h.tomb_pages
            || summary.page_weights.len() as u64 != if h.weighted { h.record_pages } else { 0 }
        {
            return Err(Error::corruption(
                &file.path,
                0,
                "the shard's summary does not match its header",
            ));
        }
        let mut prefix = Vec::new();
        if h.weighted {
            prefix.reserve(summary.page_weights.len() + 1);
            let mut s = 0.0;
            prefix.push(s);
            for w in &summary.page_weights {
                s += w;
                prefix.push(s);
            }
            if !s.is_finite() {
                return Err(Error::invalid(format!(
                    "the weights of {} sum to {s}",
                    file.path.display()
                )));
            }
        }
        let ps = h.page_size;
        Ok(DiskShard {
            len: h.records as usize,
            tombstones: h.tombstones as usize,
            per_page: h.per_page(),
            tombs_per_page: h.tombs_per_page(),
            weighted: h.weighted,
            page_size: ps,
            summary,
            prefix,
            file,
            cache: ExtentCache::new(ps, CACHE_BYTES, READAHEAD_BYTES),
        })
    }

    /// Opens a shard file without reading its data pages: the header and the blob (summary and filters).
    pub fn open(file: ShardFile) -> Result<(DiskShard, BloomFilter, Option<BloomFilter>)> {
        let (summary, key_filter, tomb_filter) = file.read_summary()?;
        Ok((DiskShard::new(file, summary)?, key_filter, tomb_filter))
    }

    /// The file underneath.
    pub fn file(&self) -> &ShardFile {
        &self.file
    }

    /// Bytes of cached pages now.
    pub fn cached_bytes(&self) -> usize {
        self.cache.cached_bytes()
    }

    fn out_of_range(&self, what: &str, i: usize, n: usize) -> Error {
        Error::invalid(format!(
            "{what} {i} of a shard with {n} ({})",
            self.file.path.display()
        ))
    }

    /// Calls `f` with the payload of page `r` of `region` (0-based in the region), reading it if needed —
    /// with read-ahead when the miss continues a cached extent (a sequential pass: `key_at`, `record_at`,
    /// `tombstone_at`).
    fn with_page<T>(&self, region: Region, r: u64, f: impl FnOnce(&[u8]) -> T) -> Result<T> {
        self.with_page_ahead(region, r, true, f)
    }

    /// [`with_page`](Self::with_page) for a point access (a bound search, a lookup, a weighted pick): a
    /// miss reads that one page, never a read-ahead its neighbours in the cache would suggest.
    fn point_page<T>(&self, region: Region, r: u64, f: impl FnOnce(&[u8]) -> T) -> Result<T> {
        self.with_page_ahead(region, r, false, f)
    }

    fn with_page_ahead<T>(
        &self,
        region: Region,
        r: u64,
        ahead: bool,
        f: impl FnOnce(&[u8]) -> T,
    ) -> Result<T> {
        let h = &self.file.header;
        let (base, count) = match region {
            Region::Records => (h.first_record_page(), h.record_pages),
            Region::Tombstones => (h.first_tomb_page(), h.tomb_pages),
        };
        debug_assert!(r < count);
        let page_no = base + r;
        let ps = self.page_size;
        let payload = ps - TRAILER;
        let load = |first: u64, buf: &mut [u8]| -> Result<()> {
            self.file.read_pages(first, buf)?;
            for (k, page) in buf.chunks(ps).enumerate() {
                let (at, page) = (first - base + k as u64, &page[..payload]);
                match region {
                    Region::Records => self.file.check_record_page(&self.summary, at, page)?,
                    Region::Tombstones => self.file.check_tomb_page(&self.summary, at, page)?,
                }
            }
            Ok(())
        };
        let limit = if ahead { base + count } else { page_no + 1 };
        self.cache
            .with_page(page_no, limit, load, |page| f(&page[..payload]))
    }

    /// The first page of `region` (file page number).
    fn region_base(&self, region: Region) -> u64 {
        match region {
            Region::Records => self.file.header.first_record_page(),
            Region::Tombstones => self.file.header.first_tomb_page(),
        }
    }

    /// Reads pages `rel` of `region` (0-based in the region, sorted, distinct) as one batch and checks each
    /// page once (checksum by the read, then its structure against the summary).
    fn read_checked(&self, region: Region, rel: Vec<u64>) -> Result<PageBatch> {
        let base = self.region_base(region);
        let batch = self
            .file
            .read_batch(rel.into_iter().map(|r| base + r).collect())?;
        let payload = self.page_size - TRAILER;
        for (j, &page_no) in batch.pages().iter().enumerate() {
            let page = &batch.at(j)[..payload];
            match region {
                Region::Records => {
                    self.file
                        .check_record_page(&self.summary, page_no - base, page)?
                }
                Region::Tombstones => {
                    self.file
                        .check_tomb_page(&self.summary, page_no - base, page)?
                }
            }
        }
        Ok(batch)
    }

    /// The tombstone page that can hold `key` (0-based), if any.
    fn tomb_page_of(&self, key: u64) -> Option<usize> {
        self.summary
            .tomb_fences
            .partition_point(|&f| f <= key)
            .checked_sub(1)
    }

    /// Whether tombstone page `t` (`payload` without its trailer) holds `key`.
    fn tomb_page_holds(&self, t: usize, payload: &[u8], key: u64) -> bool {
        let (mut lo, mut hi) = (0usize, self.tombs_in_page(t));
        while lo < hi {
            let mid = (lo + hi) / 2;
            match tomb_in(payload, mid).cmp(&key) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return true,
            }
        }
        false
    }

    /// [`Shard::records_at`] by one batch of page reads (see there); on an error `out` may hold part of the
    /// records.
    fn records_batched(&self, indexes: &[usize], out: &mut Vec<Record>) -> Result<()> {
        let (pp, w) = (self.per_page, self.weighted);
        let base = self.file.header.first_record_page();
        let payload = self.page_size - TRAILER;
        let start = out.len();
        out.reserve(indexes.len());
        // Positions (in `indexes`) of the records whose pages are not cached.
        let mut misses: Vec<usize> = Vec::new();
        for (n, &i) in indexes.iter().enumerate() {
            if i >= self.len {
                return Err(self.out_of_range("record", i, self.len));
            }
            let page_no = base + (i / pp) as u64;
            match self
                .cache
                .peek(page_no, |p| record_in(&p[..payload], w, i % pp))
            {
                Some(rec) => out.push(rec),
                None => {
                    out.push(Record {
                        key: 0,
                        value: 0,
                        weight: 0.0,
                    });
                    misses.push(n);
                }
            }
        }
        if misses.is_empty() {
            return Ok(());
        }
        let mut pages: Vec<u64> = misses.iter().map(|&n| (indexes[n] / pp) as u64).collect();
        pages.sort_unstable();
        pages.dedup();
        let batch = self.read_checked(Region::Records, pages)?;
        for &n in &misses {
            let i = indexes[n];
            let page = batch
                .page(base + (i / pp) as u64)
                .expect("the batch read every missed page");
            out[start + n] = record_in(&page[..payload], w, i % pp);
        }
        Ok(())
    }

    /// Index of the first record whose key is ≥ `key` (`strict` = false) or > `key` (`strict` = true).
    fn bound(&self, key: u64, strict: bool) -> Result<usize> {
        let below = |k: u64| if strict { k <= key } else { k < key };
        // Pages 0..j start below the bound; the answer is in page j − 1 or is the first record of page j.
        let j = self.summary.fences.partition_point(|&f| below(f));
        if j == 0 {
            return Ok(0);
        }
        let r = j - 1;
        let n = self.records_in_page(r);
        let w = self.weighted;
        let pos = self.point_page(Region::Records, r as u64, |p| {
            let (mut lo, mut hi) = (0usize, n);
            while lo < hi {
                let mid = (lo + hi) / 2;
                if below(record_key(p, w, mid)) {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            lo
        })?;
        Ok(r * self.per_page + pos)
    }

    fn tombs_in_page(&self, t: usize) -> usize {
        self.tombstones
            .saturating_sub(t * self.tombs_per_page)
            .min(self.tombs_per_page)
    }

    fn records_in_page(&self, r: usize) -> usize {
        self.len
            .saturating_sub(r * self.per_page)
            .min(self.per_page)
    }

    /// Weight of slots `from..to` of record page `r`, summed in slot order.
    fn page_weight(&self, r: usize, from: usize, to: usize) -> Result<f64> {
        if from == 0 && to == self.records_in_page(r) {
            return Ok(self.summary.page_weights[r]);
        }
        self.point_page(Region::Records, r as u64, |p| {
            (from..to).map(|s| record_in(p, true, s).weight).sum()
        })
    }

    /// The weighted decomposition of `lo..hi`: (first page, its slot range, its weight), the full pages in
    /// between and their weight, (last page, its slot range, its weight).
    fn pieces(&self, lo: usize, hi: usize) -> Result<Pieces> {
        let pp = self.per_page;
        let (pa, pb) = (lo / pp, (hi - 1) / pp);
        if pa == pb {
            let w = self.page_weight(pa, lo % pp, (hi - 1) % pp + 1)?;
            return Ok(Pieces {
                first: (pa, lo % pp, (hi - 1) % pp + 1, w),
                mid: (pa + 1, pa + 1, 0.0),
                last: None,
            });
        }
        let first_end = self.records_in_page(pa);
        let first_w = self.page_weight(pa, lo % pp, first_end)?;
        let last_w = self.page_weight(pb, 0, (hi - 1) % pp + 1)?;
        Ok(Pieces {
            first: (pa, lo % pp, first_end, first_w),
            mid: (pa + 1, pb, self.prefix[pb] - self.prefix[pa + 1]),
            last: Some((pb, 0, (hi - 1) % pp + 1, last_w)),
        })
    }

    /// The first slot of `from..to` in page `r` where the running weight passes `t`, or (rounding) the last
    /// slot there with a positive weight; `None` if no slot there has weight.
    fn pick_in_page(&self, r: usize, from: usize, to: usize, t: f64) -> Result<Option<usize>> {
        self.point_page(Region::Records, r as u64, |p| {
            let mut acc = 0.0;
            let mut last_positive = None;
            for s in from..to {
                let w = record_in(p, true, s).weight;
                if w > 0.0 {
                    acc += w;
                    last_positive = Some(s);
                    if acc > t {
                        return Some(s);
                    }
                }
            }
            last_positive
        })
        .map(|s| s.map(|s| r * self.per_page + s))
    }

    /// One weighted draw in `lo..hi`, or `None` when rounding led to a piece without weight.
    fn weighted_draw(
        &self,
        pc: &Pieces,
        total: f64,
        rng: &mut dyn RngCore,
    ) -> Result<Option<usize>> {
        let mut t = unit_f64(rng) * total;
        let (pa, from, to, first_w) = pc.first;
        if t < first_w || pc.last.is_none() {
            return self.pick_in_page(pa, from, to, t);
        }
        t -= first_w;
        let (ma, mb, mid_w) = pc.mid;
        if t < mid_w {
            let target = self.prefix[ma] + t;
            // The last page of ma..mb whose starting prefix is ≤ target.
            let p = (ma + self.prefix[ma..mb].partition_point(|&x| x <= target))
                .saturating_sub(1)
                .clamp(ma, mb - 1);
            let n = self.records_in_page(p);
            return self.pick_in_page(p, 0, n, target - self.prefix[p]);
        }
        let (pb, from, to, _) = pc.last.expect("two pages");
        self.pick_in_page(pb, from, to, t - mid_w)
    }
}

/// See [`DiskShard::pieces`].
struct Pieces {
    first: (usize, usize, usize, f64),
    mid: (usize, usize, f64),
    last: Option<(usize, usize, usize, f64)>,
}

impl Pieces {
    fn total(&self) -> f64 {
        self.first.3 + self.mid.2 + self.last.map_or(0.0, |l| l.3)
    }
}

impl Shard for DiskShard {
    const NAME: &'static str = "disk-isam";

    /// Disk shards are written by their factory (`tiered`), not built from a run in memory.
    fn build(_run: SortedRun, _opts: BuildOptions) -> Result<Self> {
        Err(Error::invalid(
            "a disk shard is written to its file by the tiered shard factory",
        ))
    }

    fn len(&self) -> usize {
        self.len
    }

    /// Its keys are in its record pages, on disk.
    fn resident(&self) -> bool {
        false
    }

    fn tombstone_count(&self) -> usize {
        self.tombstones
    }

    fn key_at(&self, i: usize) -> Result<u64> {
        if i >= self.len {
            return Err(self.out_of_range("record", i, self.len));
        }
        let (r, s) = (i / self.per_page, i % self.per_page);
        let w = self.weighted;
        self.with_page(Region::Records, r as u64, |p| record_key(p, w, s))
    }

    fn record_at(&self, i: usize) -> Result<Record> {
        if i >= self.len {
            return Err(self.out_of_range("record", i, self.len));
        }
        let (r, s) = (i / self.per_page, i % self.per_page);
        let w = self.weighted;
        self.with_page(Region::Records, r as u64, |p| record_in(p, w, s))
    }

    /// Pages in the cache are served from it; the others are read as one batch (`ShardFile::read_batch`:
    /// each distinct page once, nearby pages in one read, issued together), each checked once, and not cached (a query's many pages
    /// would only push out the two end pages its bounds cached). With batched reads off on this thread
    /// (`shard_file::with_batched_reads`), one `record_at` after another.
    fn records_at(&self, indexes: &[usize], out: &mut Vec<Record>) -> Result<()> {
        if indexes.is_empty() || !batched_reads() {
            out.reserve(indexes.len());
            for &i in indexes {
                out.push(self.record_at(i)?);
            }
            return Ok(());
        }
        let start = out.len();
        let got = self.records_batched(indexes, out);
        if got.is_err() {
            out.truncate(start);
        }
        got
    }

    fn fetches_in_batches(&self) -> bool {
        true
    }

    fn records_per_read(&self) -> usize {
        self.per_page
    }

    /// The tombstone pages of all `keys` are read as one batch (each distinct page once, checked once).
    fn has_tombstones(&self, keys: &[u64], out: &mut Vec<bool>) -> Result<()> {
        if keys.is_empty() || !batched_reads() {
            for &k in keys {
                out.push(self.has_tombstone(k)?);
            }
            return Ok(());
        }
        let mut pages: Vec<u64> = keys
            .iter()
            .filter_map(|&k| self.tomb_page_of(k))
            .map(|t| t as u64)
            .collect();
        pages.sort_unstable();
        pages.dedup();
        let batch = self.read_checked(Region::Tombstones, pages)?;
        let (base, payload) = (
            self.region_base(Region::Tombstones),
            self.page_size - TRAILER,
        );
        for &k in keys {
            let found = self.tomb_page_of(k).is_some_and(|t| {
                batch
                    .page(base + t as u64)
                    .is_some_and(|p| self.tomb_page_holds(t, &p[..payload], k))
            });
            out.push(found);
        }
        Ok(())
    }

    /// The tombstone fences pick the one tombstone page that can hold the answer: at most one page read.
    fn tombstone_lower_bound(&self, key: u64) -> Result<usize> {
        let j = self.summary.tomb_fences.partition_point(|&f| f < key);
        if j == 0 {
            return Ok(0);
        }
        let t = j - 1;
        let n = self.tombs_in_page(t);
        let pos = self.point_page(Region::Tombstones, t as u64, |p| {
            let (mut lo, mut hi) = (0usize, n);
            while lo < hi {
                let mid = (lo + hi) / 2;
                if tomb_in(p, mid) < key {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            lo
        })?;
        Ok(t * self.tombs_per_page + pos)
    }

    /// The bounds' pages (at most four reads) land in the page cache.
    fn warm_bounds(&self, lo: u64, hi: u64) -> Result<()> {
        self.lower_bound(lo)?;
        self.upper_bound(hi)?;
        if self.tombstones > 0 {
            self.tombstone_lower_bound(lo)?;
            if let Some(after) = hi.checked_add(1) {
                self.tombstone_lower_bound(after)?;
            }
        }
        Ok(())
    }

    fn tombstone_at(&self, j: usize) -> Result<u64> {
        if j >= self.tombstones {
            return Err(self.out_of_range("tombstone", j, self.tombstones));
        }
        let (t, s) = (j / self.tombs_per_page, j % self.tombs_per_page);
        self.with_page(Region::Tombstones, t as u64, |p| tomb_in(p, s))
    }

    fn lower_bound(&self, key: u64) -> Result<usize> {
        self.bound(key, false)
    }

    fn upper_bound(&self, key: u64) -> Result<usize> {
        self.bound(key, true)
    }

    /// The one page whose fence range holds `key` is searched: at most one page read (none when `key` is a
    /// fence or below the first key).
    fn find(&self, key: u64) -> Result<Option<usize>> {
        let j = self.summary.fences.partition_point(|&f| f <= key);
        if j == 0 {
            return Ok(None);
        }
        let r = j - 1;
        if self.summary.fences[r] == key {
            return Ok(Some(r * self.per_page));
        }
        let n = self.records_in_page(r);
        let w = self.weighted;
        let slot = self.point_page(Region::Records, r as u64, |p| {
            let (mut lo, mut hi) = (0usize, n);
            while lo < hi {
                let mid = (lo + hi) / 2;
                match record_key(p, w, mid).cmp(&key) {
                    std::cmp::Ordering::Less => lo = mid + 1,
                    std::cmp::Ordering::Greater => hi = mid,
                    std::cmp::Ordering::Equal => return Some(mid),
                }
            }
            None
        })?;
        Ok(slot.map(|s| r * self.per_page + s))
    }

    fn has_tombstone(&self, key: u64) -> Result<bool> {
        let j = self.summary.tomb_fences.partition_point(|&f| f <= key);
        if j == 0 {
            return Ok(false);
        }
        let t = j - 1;
        self.point_page(Region::Tombstones, t as u64, |p| {
            self.tomb_page_holds(t, p, key)
        })
    }

    fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.summary.memory_bytes()
            + self.prefix.len() * 8
            + self.cached_bytes()
    }

    fn range_weight(&self, lo: usize, hi: usize) -> Result<f64> {
        if hi <= lo {
            return Ok(0.0);
        }
        if !self.weighted {
            return Ok((hi - lo) as f64);
        }
        if hi > self.len {
            return Err(self.out_of_range("record", hi - 1, self.len));
        }
        Ok(self.pieces(lo, hi)?.total())
    }

    fn sample_in(&self, lo: usize, hi: usize, rng: &mut dyn RngCore) -> Result<usize> {
        if !self.weighted {
            return Ok(lo + super::shard::uniform_below(rng, (hi - lo) as u64) as usize);
        }
        if hi > self.len || hi <= lo {
            return Err(self.out_of_range("record", hi.saturating_sub(1), self.len));
        }
        let pc = self.pieces(lo, hi)?;
        let total = pc.total();
        if total.is_nan() || total <= 0.0 {
            return Ok(lo);
        }
        // Rounding can (very rarely) land in a piece without weight: draw again, which keeps the draw exact.
        for _ in 0..64 {
            if let Some(i) = self.weighted_draw(&pc, total, rng)? {
                return Ok(i);
            }
        }
        // Unreachable in practice: the first record with a positive weight.
        let (pa, from, to, _) = pc.first;
        if let Some(i) = self.pick_in_page(pa, from, to, 0.0)? {
            return Ok(i);
        }
        for p in pc.mid.0..pc.mid.1 {
            if self.summary.page_weights[p] > 0.0 {
                let n = self.records_in_page(p);
                if let Some(i) = self.pick_in_page(p, 0, n, 0.0)? {
                    return Ok(i);
                }
            }
        }
        if let Some((pb, from, to, _)) = pc.last
            && let Some(i) = self.pick_in_page(pb, from, to, 0.0)?
        {
            return Ok(i);
        }
        Ok(lo)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::dynamized::isam_shard::IsamShard;
    use crate::index::dynamized::shard_file::write_test_shard;
    use crate::storage::{FileKind, IoStats, MemVfs, Vfs};
    use rand::SeedableRng;
    use std::sync::Arc;

    fn disk(run: &SortedRun, weighted: bool, stats: &Arc<IoStats>) -> DiskShard {
        let vfs: Arc<dyn Vfs> = Arc::new(MemVfs::new());
        let (path, w) = write_test_shard(&vfs, stats, 1, run, weighted);
        let file = ShardFile::open(&vfs, &path, 1, 4096, false, stats.clone()).unwrap();
        let opened =
            DiskShard::open(ShardFile::open(&vfs, &path, 1, 4096, false, stats.clone()).unwrap())
                .unwrap();
        assert_eq!(opened.0.summary, w.summary);
        DiskShard::new(file, w.summary).unwrap()
    }

    fn run(n: u64, weighted: bool) -> SortedRun {
        SortedRun {
            records: (0..n)
                .map(|i| Record {
                    key: i * 4 + 10,
                    value: i,
                    weight: if weighted {
                        [0.0, 0.5, 2.0, 1.25][(i % 4) as usize]
                    } else {
                        1.0
                    },
                })
                .collect(),
            tombstones: (0..n / 3).map(|j| j * 12 + 11).collect(),
        }
    }

    #[test]
    fn agrees_with_the_memory_shard_everywhere() {
        for weighted in [false, true] {
            let r = run(3000, weighted);
            let stats = Arc::new(IoStats::new());
            let d = disk(&r, weighted, &stats);
            let m = IsamShard::build(r.clone(), BuildOptions::single(weighted)).unwrap();
            assert_eq!(d.len(), m.len());
            assert_eq!(d.tombstone_count(), m.tombstone_count());
            for i in (0..m.len()).step_by(7) {
                assert_eq!(d.record_at(i).unwrap(), m.record_at(i).unwrap());
            }
            for j in 0..m.tombstone_count() {
                assert_eq!(d.tombstone_at(j).unwrap(), m.tombstone_at(j).unwrap());
            }
            for key in (0..12_100u64).step_by(3).chain([u64::MAX, 0]) {
                assert_eq!(
                    d.lower_bound(key).unwrap(),
                    m.lower_bound(key).unwrap(),
                    "{key}"
                );
                assert_eq!(
                    d.upper_bound(key).unwrap(),
                    m.upper_bound(key).unwrap(),
                    "{key}"
                );
                assert_eq!(d.has_tombstone(key).unwrap(), m.has_tombstone(key).unwrap());
                assert_eq!(
                    d.tombstone_lower_bound(key).unwrap(),
                    m.tombstone_lower_bound(key).unwrap(),
                    "{key}"
                );
                assert_eq!(d.find(key).unwrap(), m.find(key).unwrap());
            }
            // The tombstone pages of many keys read as one batch: the same answers as one by one.
            let keys: Vec<u64> = (0..12_100u64).step_by(5).chain([u64::MAX]).collect();
            let (mut batched, mut single) = (Vec::new(), Vec::new());
            d.has_tombstones(&keys, &mut batched).unwrap();
            m.has_tombstones(&keys, &mut single).unwrap();
            assert_eq!(batched, single);
            assert!(batched.iter().any(|&t| t) && batched.iter().any(|&t| !t));
            for (lo, hi) in [(0, 3000), (5, 6), (250, 260), (100, 2900), (255, 511)] {
                let (a, b) = (
                    d.range_weight(lo, hi).unwrap(),
                    m.range_weight(lo, hi).unwrap(),
                );
                assert!((a - b).abs() <= 1e-9 * b.max(1.0), "{lo}..{hi}: {a} vs {b}");
            }
            assert!(d.key_at(3000).is_err());
            assert!(stats.snapshot().kind(FileKind::Shards).reads > 0);
            assert!(d.memory_bytes() <= CACHE_BYTES + 4096);
        }
    }

    /// Pages of 1 MiB and 4 MiB: the same answers as the memory shard, and a cache of at most two pages.
    #[test]
    fn large_pages_agree_with_the_memory_shard() {
        use crate::index::dynamized::shard_file::{shard_file_name, write_run_file};
        assert_eq!(cache_limit_bytes(4096), CACHE_BYTES);
        assert_eq!(cache_limit_bytes(32 << 10), CACHE_BYTES);
        assert_eq!(cache_limit_bytes(64 << 10), 128 << 10);
        let vfs: Arc<dyn Vfs> = Arc::new(MemVfs::new());
        let stats = Arc::new(IoStats::new());
        let path = std::path::Path::new("/d").join(shard_file_name(4));
        for (ps, n) in [(1usize << 20, 150_000u64), (4 << 20, 400_000)] {
            assert_eq!(cache_limit_bytes(ps), 2 * ps);
            let r = run(n, true);
            let (kf, tf) = crate::index::dynamized::version::filters_for_run(&r, 0.01).unwrap();
            write_run_file(
                &vfs,
                &path,
                &stats,
                4,
                &r,
                (&kf, tf.as_ref()),
                true,
                ps,
                false,
            )
            .unwrap();
            let (d, _, _) =
                DiskShard::open(ShardFile::open(&vfs, &path, 4, ps, false, stats.clone()).unwrap())
                    .unwrap();
            assert!(d.file().header.record_pages >= 3);
            let m = IsamShard::build(r.clone(), BuildOptions::single(true)).unwrap();
            assert_eq!(
                (d.len(), d.tombstone_count()),
                (m.len(), m.tombstone_count())
            );
            let len = m.len();
            for i in (0..len).step_by(9_973).chain([len - 1]) {
                assert_eq!(d.record_at(i).unwrap(), m.record_at(i).unwrap());
            }
            for key in (0..n * 4 + 20).step_by(77_777).chain([u64::MAX, 0, 11, 13]) {
                assert_eq!(d.lower_bound(key).unwrap(), m.lower_bound(key).unwrap());
                assert_eq!(d.upper_bound(key).unwrap(), m.upper_bound(key).unwrap());
                assert_eq!(d.has_tombstone(key).unwrap(), m.has_tombstone(key).unwrap());
            }
            for (lo, hi) in [(0, len), (5, 6), (len / 3, len - 7)] {
                let (a, b) = (
                    d.range_weight(lo, hi).unwrap(),
                    m.range_weight(lo, hi).unwrap(),
                );
                assert!((a - b).abs() <= 1e-9 * b.max(1.0), "{lo}..{hi}: {a} vs {b}");
            }
            assert!(d.cached_bytes() <= 2 * ps, "{}", d.cached_bytes());
        }
    }

    /// Uniform indexes give uniform records: each record of a range spanning pages of different fill is hit
    /// equally often (chi-square at 1e-6); weighted draws follow the weights.
    #[test]
    fn draws_are_exact() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let r = run(1000, true);
        let stats = Arc::new(IoStats::new());
        let d = disk(&r, true, &stats);
        // Records 200..900: pages of 170 records, the range starts and ends inside pages.
        let (lo, hi) = (200usize, 900usize);
        let total: f64 = r.records[lo..hi].iter().map(|x| x.weight).sum();
        let draws = 400_000u64;
        let mut hits = vec![0u64; 1000];
        for _ in 0..draws {
            let i = d.sample_in(lo, hi, &mut rng).unwrap();
            assert!((lo..hi).contains(&i));
            hits[i] += 1;
        }
        let mut chi = 0.0;
        let mut df = 0usize;
        for (i, (rec, &h)) in r.records.iter().zip(&hits).enumerate().take(hi).skip(lo) {
            if rec.weight == 0.0 {
                assert_eq!(h, 0, "weightless record {i} drawn");
                continue;
            }
            let e = draws as f64 * rec.weight / total;
            chi += (h as f64 - e).powi(2) / e;
            df += 1;
        }
        let df = (df - 1) as f64;
        let a = 2.0 / (9.0 * df);
        let critical = df * (1.0 - a + 4.753_424 * a.sqrt()).powi(3);
        assert!(chi < critical, "chi-square {chi} ≥ {critical}");
    }

    /// A reader pinning an old version keeps reading a disk shard whose file a checkpoint removed, also
    /// across a simulated power loss (its handle is detached, like a dead process's).
    #[test]
    fn reads_survive_the_removal_of_the_file() {
        let mem = Arc::new(MemVfs::new());
        let fault = crate::storage::FaultVfs::new(mem.clone());
        let stats = Arc::new(IoStats::new());
        for vfs in [mem.clone() as Arc<dyn Vfs>, Arc::new(fault.clone())] {
            let r = run(2000, false);
            let (path, _) = write_test_shard(&vfs, &stats, 2, &r, false);
            let (d, _, _) = DiskShard::open(
                ShardFile::open(&vfs, &path, 2, 4096, false, stats.clone()).unwrap(),
            )
            .unwrap();
            vfs.remove_file(&path).unwrap();
            assert!(!vfs.exists(&path));
            mem.crash();
            for i in (0..2000).step_by(101) {
                assert_eq!(d.record_at(i).unwrap(), r.records[i]);
            }
        }
    }

    /// `records_at` in one batch gives what one `record_at` after another gives, for indexes in any order
    /// with repeats, and reads each missed page once (pages the bounds cached are not read again).
    #[test]
    fn batched_fetches_match_single_fetches_and_read_each_page_once() {
        use crate::index::dynamized::shard_file::with_batched_reads;
        use rand::Rng;
        for weighted in [false, true] {
            let r = run(20_000, weighted);
            let stats = Arc::new(IoStats::new());
            let d = disk(&r, weighted, &stats);
            let mut rng = rand::rngs::StdRng::seed_from_u64(11);
            for len in [2usize, 7, 300, 3000] {
                let idx: Vec<usize> = (0..len).map(|_| rng.random_range(0..20_000)).collect();
                let single: Vec<Record> = idx.iter().map(|&i| r.records[i]).collect();
                let before = stats.snapshot().kind(FileKind::Shards).reads;
                let mut got = vec![r.records[0]];
                d.records_at(&idx, &mut got).unwrap();
                assert_eq!(got[1..], single[..], "{len} indexes, weighted {weighted}");
                let reads = stats.snapshot().kind(FileKind::Shards).reads - before;
                let mut pages: Vec<usize> = idx.iter().map(|&i| i / d.per_page).collect();
                pages.sort_unstable();
                pages.dedup();
                assert!(
                    reads <= pages.len() as u64,
                    "{reads} reads for {} pages",
                    pages.len()
                );
                let mut off = Vec::new();
                with_batched_reads(false, || d.records_at(&idx, &mut off)).unwrap();
                assert_eq!(off, single);
            }
            let mut got = Vec::new();
            assert!(d.records_at(&[0, 20_000], &mut got).is_err());
            assert!(got.is_empty(), "a failed fetch appends nothing");
        }
    }

    /// A batch of draws dense over a range of pages is read in spans — a few calls, no page outside the
    /// range — and sparse draws one call per page; the records are those of one fetch after another. (One
    /// read per distinct page would make 120 calls for the dense batch.)
    #[test]
    fn dense_batches_read_in_few_spans_and_sparse_ones_page_by_page() {
        use crate::index::dynamized::shard_file::batch_read::span_limits;
        use rand::Rng;
        let r = run(60_000, false);
        let stats = Arc::new(IoStats::new());
        let d = disk(&r, false, &stats);
        let pp = d.per_page;
        let (max_gap, max_pages) = span_limits(4096);
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        // Fetches `idx` in one batch, checks the records, and returns (read calls, bytes read).
        let fetch = |idx: &[usize]| {
            let before = stats.snapshot().kind(FileKind::Shards);
            let mut got = Vec::new();
            d.records_at(idx, &mut got).unwrap();
            let read = stats.snapshot().kind(FileKind::Shards) - before;
            assert_eq!(got, idx.iter().map(|&i| r.records[i]).collect::<Vec<_>>());
            (read.reads, read.bytes_read)
        };
        // 1000 draws over record pages 40..160: every page is drawn. Spans of 64 pages of 4 KiB
        // (`MAX_SPAN_BYTES` = 256 KiB): 2 reads.
        let idx: Vec<usize> = (0..1000)
            .map(|_| rng.random_range(40 * pp..160 * pp))
            .collect();
        let (reads, bytes) = fetch(&idx);
        assert!(
            reads <= 3 && bytes <= 120 * 4096,
            "{reads} reads, {bytes} bytes"
        );
        // One draw every `max_gap + 2` pages: no gap is bridged, one read per page.
        let every = |stride: u64| -> Vec<usize> {
            (0..20).map(|p| (p * stride) as usize * pp + 7).collect()
        };
        assert_eq!(fetch(&every(max_gap + 2)), (20, 20 * 4096));
        // One draw every `max_gap + 1` pages: each gap bridged, spans of at most `max_pages` pages.
        let (reads, bytes) = fetch(&every(max_gap + 1));
        let spanned = 19 * (max_gap + 1) + 1;
        assert!(
            reads <= spanned.div_ceil(max_pages) + 1 && bytes <= spanned * 4096,
            "{reads} reads, {bytes} bytes"
        );
    }

    #[test]
    fn a_damaged_page_in_a_batch_is_corruption_at_its_offset() {
        let mem = Arc::new(MemVfs::new());
        let vfs: Arc<dyn Vfs> = mem.clone();
        let stats = Arc::new(IoStats::new());
        let r = run(20_000, false);
        let (path, _) = write_test_shard(&vfs, &stats, 9, &r, false);
        let mut bytes = mem.file_bytes(&path).unwrap();
        // Record page 40 (file page 41): its checksum fails.
        bytes[41 * 4096 + 99] ^= 0x01;
        mem.set_file_bytes(&path, bytes);
        let (d, _, _) =
            DiskShard::open(ShardFile::open(&vfs, &path, 9, 4096, false, stats).unwrap()).unwrap();
        let idx: Vec<usize> = (0..60).rev().map(|p| p * d.per_page + 3).collect();
        let mut out = Vec::new();
        let e = d.records_at(&idx, &mut out).unwrap_err();
        assert!(
            matches!(&e, Error::Corruption { offset, file, .. } if *offset == 41 * 4096 && *file == path),
            "{e}"
        );
        assert!(out.is_empty());
        // Record pages 39 and 41 read as one span: the damaged page between them fails the batch too.
        let idx = [39 * d.per_page + 1, 41 * d.per_page + 2];
        let e = d.records_at(&idx, &mut out).unwrap_err();
        assert!(
            matches!(&e, Error::Corruption { offset, .. } if *offset == 41 * 4096),
            "{e}"
        );
        assert!(out.is_empty());
        // Without the damaged page, the batch is served.
        let idx: Vec<usize> = (0..40).map(|p| p * d.per_page + 3).collect();
        d.records_at(&idx, &mut out).unwrap();
        assert_eq!(out.len(), 40);
    }

    #[test]
    fn a_damaged_page_is_corruption_at_its_offset() {
        let mem = Arc::new(MemVfs::new());
        let vfs: Arc<dyn Vfs> = mem.clone();
        let stats = Arc::new(IoStats::new());
        let r = run(2000, false);
        let (path, _) = write_test_shard(&vfs, &stats, 9, &r, false);
        let mut bytes = mem.file_bytes(&path).unwrap();
        bytes[3 * 4096 + 17] ^= 0x40;
        mem.set_file_bytes(&path, bytes);
        let (d, _, _) =
            DiskShard::open(ShardFile::open(&vfs, &path, 9, 4096, false, stats).unwrap()).unwrap();
        assert!(d.record_at(0).is_ok());
        let e = d.record_at(2 * 255).unwrap_err();
        assert!(
            matches!(e, Error::Corruption { offset, .. } if offset == 3 * 4096),
            "{e}"
        );
    }
}
