//! The shard file: one immutable file per shard, `shard-<id>.dat`, written once and never changed.
//!
//! A shard file is a `storage::immutable_file` (file id = shard id): pages of `page_size` bytes (a power of
//! two ≥ 4096, so every read and write is O_DIRECT-aligned), the last 8 bytes of every page its checksum,
//! xxh3-64 of the rest seeded by (shard id, page number), so a page of another shard or another position never
//! verifies; written front to back, header last, then synced. This module owns what the pages hold:
//!
//! | pages | content |
//! |---|---|
//! | 0 | header: magic `STRSHARD`, format, page size, shard id, counts, page counts, section lengths (LE) |
//! | 1 … R | records, `per_page` each: key u64, value u64 (, weight f64), little-endian, in key order |
//! | R+1 … R+T | tombstone keys, u64 LE, in key order |
//! | … | blob, one byte stream over the pages: the *summary* — record fences (first key of each record page), tombstone fences (first key of each tombstone page), per-page weight sums (weighted shards) — then the key Bloom filter and the tombstone Bloom filter |
//!
//! Record `i` is in page `1 + i / per_page`, slot `i % per_page`.
//!
//! The summary and the filters are what an on-disk shard keeps in memory ([`ShardFile::read_summary`] reads
//! only the blob pages); the record and tombstone pages are read one at a time on demand, and every page is
//! checked when it is read: its checksum, key order inside the page, its first key against its fence, its
//! last key against the next fence, and (weighted) its weights against its stored sum. So a shard whose
//! pages all verify is sorted and consistent with its summary.
//!
//! Invariants: records and tombstones are in strictly ascending key order; a page is written only as part of
//! a file that is synced before any state file refers to it; the header (page 0) is written last.
//! Cost: writing n records is ⌈n / per_page⌉ sequential page writes (batched [`batch_pages`] per call: 64
//! pages, at most 4 MiB) plus the tombstone and blob pages, one header write and one `fdatasync`; the writer
//! holds one batch, the fences (8 B per page) and the tombstones (8 B each) in memory. Page sizes are those of
//! the page file, 4 KiB to 4 MiB; a 4 MiB page holds 262 143 records (174 762 weighted). Damage is reported as `Error::Corruption`
//! with the file and the byte offset of the page.

use super::run::{Record, SortedRun};
use super::shard::Shard;
use super::version::ShardSlot;
use crate::algo::bloom::BloomFilter;
use crate::error::{Error, Result};
use crate::storage::codec::{Short, get};
use crate::storage::immutable_file::{ImmutableFile, ImmutableFileWriter};
pub use crate::storage::immutable_file::{TRAILER, batch_pages};
use crate::storage::{FileKind, IoStats, PageBuf, Vfs};
pub use batch_read::{PageBatch, batched_reads, with_batched_reads};
use std::path::{Path, PathBuf};
use std::sync::Arc;

const MAGIC: &[u8; 8] = b"STRSHARD";
/// Format 2 added the tombstone fences and the page weight sums to the blob.
const FORMAT: u32 = 2;
/// Largest count a header may state (records, tombstones, filter bytes): keeps every derived size far from
/// overflow whatever the bytes on disk say.
const MAX_COUNT: u64 = 1 << 44;

pub use crate::files::{parse_shard_file_name, shard_file_name};

/// What page 0 says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardHeader {
    pub id: u64,
    pub page_size: usize,
    pub records: u64,
    pub tombstones: u64,
    pub weighted: bool,
    pub record_pages: u64,
    pub tomb_pages: u64,
    pub blob_pages: u64,
    pub fence_bytes: u64,
    pub tomb_fence_bytes: u64,
    pub page_weight_bytes: u64,
    pub key_filter_bytes: u64,
    pub tomb_filter_bytes: u64,
}

impl ShardHeader {
    /// A header for the given counts, with every derived size filled in.
    fn new(
        id: u64,
        page_size: usize,
        weighted: bool,
        records: u64,
        tombstones: u64,
        key_filter_bytes: u64,
        tomb_filter_bytes: u64,
    ) -> ShardHeader {
        let mut h = ShardHeader {
            id,
            page_size,
            records,
            tombstones,
            weighted,
            record_pages: 0,
            tomb_pages: 0,
            blob_pages: 0,
            fence_bytes: 0,
            tomb_fence_bytes: 0,
            page_weight_bytes: 0,
            key_filter_bytes,
            tomb_filter_bytes,
        };
        h.record_pages = records.div_ceil(h.per_page() as u64);
        h.tomb_pages = tombstones.div_ceil(h.tombs_per_page() as u64);
        h.fence_bytes = h.record_pages * 8;
        h.tomb_fence_bytes = h.tomb_pages * 8;
        h.page_weight_bytes = if weighted { h.record_pages * 8 } else { 0 };
        h.blob_pages = h.blob_bytes().div_ceil((page_size - TRAILER) as u64);
        h
    }

    /// Bytes per record.
    pub fn record_size(&self) -> usize {
        record_size(self.weighted)
    }
    /// Records per record page.
    pub fn per_page(&self) -> usize {
        (self.page_size - TRAILER) / self.record_size()
    }
    /// Tombstones per tombstone page.
    pub fn tombs_per_page(&self) -> usize {
        (self.page_size - TRAILER) / 8
    }
    /// Page number of the first record page.
    pub fn first_record_page(&self) -> u64 {
        1
    }
    /// Page number of the first tombstone page.
    pub fn first_tomb_page(&self) -> u64 {
        1 + self.record_pages
    }
    /// Page number of the first blob page.
    pub fn first_blob_page(&self) -> u64 {
        1 + self.record_pages + self.tomb_pages
    }
    /// Pages in the file.
    pub fn total_pages(&self) -> u64 {
        1 + self.record_pages + self.tomb_pages + self.blob_pages
    }
    /// Bytes of the blob stream (summary and filters).
    fn blob_bytes(&self) -> u64 {
        self.fence_bytes
            + self.tomb_fence_bytes
            + self.page_weight_bytes
            + self.key_filter_bytes
            + self.tomb_filter_bytes
    }
    /// Records in record page `r` (0-based among the record pages).
    pub fn records_in_page(&self, r: u64) -> usize {
        let first = r * self.per_page() as u64;
        (self.records.saturating_sub(first)).min(self.per_page() as u64) as usize
    }
    /// Tombstones in tombstone page `t` (0-based among the tombstone pages).
    pub fn tombs_in_page(&self, t: u64) -> usize {
        let first = t * self.tombs_per_page() as u64;
        (self.tombstones.saturating_sub(first)).min(self.tombs_per_page() as u64) as usize
    }

    fn encode(&self, page: &mut [u8]) {
        let mut at = 0;
        let mut put = |b: &[u8]| {
            page[at..at + b.len()].copy_from_slice(b);
            at += b.len();
        };
        put(MAGIC);
        put(&FORMAT.to_le_bytes());
        put(&(self.page_size as u32).to_le_bytes());
        for v in [
            self.id,
            self.records,
            self.tombstones,
            u64::from(self.weighted),
            self.record_pages,
            self.tomb_pages,
            self.blob_pages,
            self.fence_bytes,
            self.tomb_fence_bytes,
            self.page_weight_bytes,
            self.key_filter_bytes,
            self.tomb_filter_bytes,
        ] {
            put(&v.to_le_bytes());
        }
    }

    pub(crate) fn decode(page: &[u8], path: &Path) -> Result<ShardHeader> {
        let bad = |d: String| Error::corruption(path, 0, d);
        if page.get(..8) != Some(&MAGIC[..]) {
            return Err(bad("not a shard file (bad magic)".into()));
        }
        let short = |e: Short| bad(format!("header page: {e}"));
        let u32_at = |o: usize| get::<u32>(page, o).map_err(short);
        let u64_at = |o: usize| get::<u64>(page, o).map_err(short);
        let format = u32_at(8)?;
        if format != FORMAT {
            return Err(bad(format!(
                "shard format {format} (this build reads format {FORMAT})"
            )));
        }
        let page_size = u32_at(12)? as usize;
        if page_size != page.len() {
            return Err(bad(format!(
                "header says {page_size}-byte pages, the file uses {}",
                page.len()
            )));
        }
        let weighted = match u64_at(40)? {
            0 => false,
            1 => true,
            w => return Err(bad(format!("weighted flag {w}"))),
        };
        let (records, tombstones) = (u64_at(24)?, u64_at(32)?);
        let (key_filter_bytes, tomb_filter_bytes) = (u64_at(96)?, u64_at(104)?);
        if [records, tombstones, key_filter_bytes, tomb_filter_bytes]
            .iter()
            .any(|&v| v > MAX_COUNT)
        {
            return Err(bad("a count in the header is out of range".into()));
        }
        let h = ShardHeader::new(
            u64_at(16)?,
            page_size,
            weighted,
            records,
            tombstones,
            key_filter_bytes,
            tomb_filter_bytes,
        );
        let stored = [
            u64_at(48)?,
            u64_at(56)?,
            u64_at(64)?,
            u64_at(72)?,
            u64_at(80)?,
            u64_at(88)?,
        ];
        let derived = [
            h.record_pages,
            h.tomb_pages,
            h.blob_pages,
            h.fence_bytes,
            h.tomb_fence_bytes,
            h.page_weight_bytes,
        ];
        if stored != derived {
            return Err(bad(format!(
                "inconsistent header {h:?} (stored {stored:?})"
            )));
        }
        Ok(h)
    }
}

/// Bytes per record.
fn record_size(weighted: bool) -> usize {
    if weighted { 24 } else { 16 }
}

#[inline]
fn u64_in(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

/// Key of slot `slot` of a record page's payload.
#[inline]
pub fn record_key(payload: &[u8], weighted: bool, slot: usize) -> u64 {
    u64_in(payload, slot * record_size(weighted))
}

/// Record in slot `slot` of a record page's payload.
#[inline]
pub fn record_in(payload: &[u8], weighted: bool, slot: usize) -> Record {
    let at = slot * record_size(weighted);
    Record {
        key: u64_in(payload, at),
        value: u64_in(payload, at + 8),
        weight: if weighted {
            f64::from_bits(u64_in(payload, at + 16))
        } else {
            1.0
        },
    }
}

/// Tombstone key in slot `slot` of a tombstone page's payload.
#[inline]
pub fn tomb_in(payload: &[u8], slot: usize) -> u64 {
    u64_in(payload, slot * 8)
}

/// What an on-disk shard keeps in memory: first key of every record page and of every tombstone page, and
/// (weighted shards) the weight sum of every record page.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ShardSummary {
    pub fences: Vec<u64>,
    pub tomb_fences: Vec<u64>,
    pub page_weights: Vec<f64>,
}

impl ShardSummary {
    /// Bytes of memory.
    pub fn memory_bytes(&self) -> usize {
        (self.fences.len() + self.tomb_fences.len() + self.page_weights.len()) * 8
    }
}

/// A shard file just written: its size and summary.
pub struct WrittenShard {
    pub bytes: u64,
    pub summary: ShardSummary,
}

/// Streams a shard into its file: records in ascending key order, then (or interleaved) tombstones in
/// ascending key order, then [`ShardWriter::finish`] with the filters. Records go out in batches of
/// [`batch_pages`] pages as they come; tombstones are held until the records are done (their pages follow the
/// record pages). Page 0, the header, is written last, then the file is synced.
pub struct ShardWriter {
    out: ImmutableFileWriter,
    id: u64,
    page_size: usize,
    weighted: bool,
    per_page: usize,
    records: u64,
    /// Records in the current record page, and their weight sum.
    in_page: usize,
    page_sum: f64,
    summary: ShardSummary,
    tombstones: Vec<u64>,
    last_key: Option<u64>,
}

impl ShardWriter {
    /// Creates (or truncates) `path` for shard `id`.
    pub fn create(
        vfs: &Arc<dyn Vfs>,
        path: &Path,
        stats: Arc<IoStats>,
        id: u64,
        page_size: usize,
        weighted: bool,
        direct: bool,
    ) -> Result<ShardWriter> {
        let out =
            ImmutableFileWriter::create(vfs, path, FileKind::Shards, stats, id, page_size, direct)?;
        Ok(ShardWriter {
            out,
            id,
            page_size,
            weighted,
            per_page: (page_size - TRAILER) / record_size(weighted),
            records: 0,
            in_page: 0,
            page_sum: 0.0,
            summary: ShardSummary::default(),
            tombstones: Vec::new(),
            last_key: None,
        })
    }

    /// Appends a record; keys must ascend strictly.
    pub fn push_record(&mut self, r: &Record) -> Result<()> {
        if self.last_key.is_some_and(|k| k >= r.key) {
            return Err(Error::invalid(format!(
                "shard {}: record keys must ascend ({} after {:?})",
                self.id, r.key, self.last_key
            )));
        }
        self.last_key = Some(r.key);
        if self.in_page == 0 {
            self.summary.fences.push(r.key);
        }
        self.out.put(&r.key.to_le_bytes());
        self.out.put(&r.value.to_le_bytes());
        if self.weighted {
            self.out.put(&r.weight.to_le_bytes());
            self.page_sum += r.weight;
        }
        self.records += 1;
        self.in_page += 1;
        if self.in_page == self.per_page {
            self.end_record_page()?;
        }
        Ok(())
    }

    fn end_record_page(&mut self) -> Result<()> {
        if self.weighted {
            if !self.page_sum.is_finite() {
                return Err(Error::invalid(format!(
                    "shard {}: the weights of a page sum to {}",
                    self.id, self.page_sum
                )));
            }
            self.summary.page_weights.push(self.page_sum);
        }
        self.page_sum = 0.0;
        self.in_page = 0;
        self.out.end_page()
    }

    /// Appends a tombstone; keys must ascend strictly.
    pub fn push_tombstone(&mut self, key: u64) -> Result<()> {
        if self.tombstones.last().is_some_and(|&k| k >= key) {
            return Err(Error::invalid(format!(
                "shard {}: tombstone keys must ascend ({key} after {:?})",
                self.id,
                self.tombstones.last()
            )));
        }
        self.tombstones.push(key);
        Ok(())
    }

    /// Records pushed so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Tombstones pushed so far.
    pub fn tombstones(&self) -> u64 {
        self.tombstones.len() as u64
    }

    /// Writes the tombstone pages, the blob and the header, and syncs the file.
    pub fn finish(
        mut self,
        key_filter: &BloomFilter,
        tomb_filter: Option<&BloomFilter>,
    ) -> Result<WrittenShard> {
        if self.in_page > 0 {
            self.end_record_page()?;
        }
        let tombstones = std::mem::take(&mut self.tombstones);
        let tpp = (self.page_size - TRAILER) / 8;
        for (j, &t) in tombstones.iter().enumerate() {
            if j % tpp == 0 {
                self.summary.tomb_fences.push(t);
            }
            self.out.put(&t.to_le_bytes());
            if (j + 1) % tpp == 0 || j + 1 == tombstones.len() {
                self.out.end_page()?;
            }
        }
        let key_filter = key_filter.to_bytes();
        let tomb_filter = tomb_filter.map(BloomFilter::to_bytes).unwrap_or_default();
        let h = ShardHeader::new(
            self.id,
            self.page_size,
            self.weighted,
            self.records,
            tombstones.len() as u64,
            key_filter.len() as u64,
            tomb_filter.len() as u64,
        );
        let summary = std::mem::take(&mut self.summary);
        let mut stream = Vec::with_capacity(summary.memory_bytes());
        for f in summary.fences.iter().chain(&summary.tomb_fences) {
            stream.extend_from_slice(&f.to_le_bytes());
        }
        for w in &summary.page_weights {
            stream.extend_from_slice(&w.to_le_bytes());
        }
        self.out.put_stream(&stream)?;
        self.out.put_stream(&key_filter)?;
        self.out.put_stream(&tomb_filter)?;
        let mut header = PageBuf::new(self.page_size);
        h.encode(&mut header);
        let pages = self.out.finish(header)?;
        debug_assert_eq!(pages, h.total_pages());
        Ok(WrittenShard {
            bytes: pages * self.page_size as u64,
            summary,
        })
    }
}

/// Writes `slot`'s shard to `path` (created or truncated) and syncs it. Returns the file's bytes.
pub fn write_shard_file<S: Shard>(
    vfs: &Arc<dyn Vfs>,
    path: &Path,
    stats: &Arc<IoStats>,
    slot: &ShardSlot<S>,
    weighted: bool,
    page_size: usize,
    direct: bool,
) -> Result<u64> {
    let shard = &slot.shard;
    let mut w = ShardWriter::create(
        vfs,
        path,
        stats.clone(),
        slot.id,
        page_size,
        weighted,
        direct,
    )?;
    for i in 0..shard.len() {
        w.push_record(&shard.record_at(i)?)?;
    }
    for j in 0..shard.tombstone_count() {
        w.push_tombstone(shard.tombstone_at(j)?)?;
    }
    let (key_filter, tomb_filter) = slot.filters();
    Ok(w.finish(key_filter, tomb_filter)?.bytes)
}

/// Writes a shard built from `run` with the given filters to `path` and syncs it.
#[allow(clippy::too_many_arguments)]
pub fn write_run_file(
    vfs: &Arc<dyn Vfs>,
    path: &Path,
    stats: &Arc<IoStats>,
    id: u64,
    run: &SortedRun,
    filters: (&BloomFilter, Option<&BloomFilter>),
    weighted: bool,
    page_size: usize,
    direct: bool,
) -> Result<WrittenShard> {
    let mut w = ShardWriter::create(vfs, path, stats.clone(), id, page_size, weighted, direct)?;
    for r in &run.records {
        w.push_record(r)?;
    }
    for &t in &run.tombstones {
        w.push_tombstone(t)?;
    }
    w.finish(filters.0, filters.1)
}

/// A shard file opened for reading, page by page.
pub struct ShardFile {
    pub path: PathBuf,
    pub header: ShardHeader,
    /// Shared with the I/O pool's jobs of a batched read.
    file: Arc<ImmutableFile>,
}

impl std::fmt::Debug for ShardFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardFile")
            .field("path", &self.path)
            .field("header", &self.header)
            .finish()
    }
}

impl ShardFile {
    /// Opens `path` and verifies its header (one page read); `id` is the shard id the caller expects there.
    pub fn open(
        vfs: &Arc<dyn Vfs>,
        path: &Path,
        id: u64,
        page_size: usize,
        direct: bool,
        stats: Arc<IoStats>,
    ) -> Result<ShardFile> {
        let (file, page) =
            ImmutableFile::open(vfs, path, FileKind::Shards, id, page_size, direct, stats)
                .map_err(|e| match e {
                    Error::Corruption {
                        file,
                        offset,
                        detail,
                    } => Error::Corruption {
                        file,
                        offset,
                        detail: format!("shard {id}: {detail}"),
                    },
                    other => other,
                })?;
        let header = ShardHeader::decode(&page, path)?;
        if header.id != id {
            return Err(Error::corruption(
                path,
                0,
                format!("file holds shard {}, expected {id}", header.id),
            ));
        }
        file.require_pages(header.total_pages())?;
        Ok(ShardFile {
            path: path.to_path_buf(),
            header,
            file: Arc::new(file),
        })
    }

    /// Reads and verifies the checksums of pages `first..first + buf.len() / page_size` into `buf`
    /// (page-aligned).
    pub fn read_pages(&self, first: u64, buf: &mut [u8]) -> Result<()> {
        self.file.read_pages(first, buf)
    }

    /// Reads and verifies the checksums of `pages` (sorted, distinct page numbers) as one batch through the
    /// shard I/O pool (`batch_read`): nearby pages in one read (spans, gap pages verified too), issued
    /// together.
    pub fn read_batch(&self, pages: Vec<u64>) -> Result<PageBatch> {
        batch_read::read_batch(&self.file, &self.path, self.header.page_size, pages)
    }

    fn page_error(&self, page_no: u64, detail: String) -> Error {
        Error::corruption(
            &self.path,
            page_no * self.header.page_size as u64,
            format!("shard {} page {page_no}: {detail}", self.header.id),
        )
    }

    /// Checks record page `r` (0-based among record pages; `payload` without its trailer) against the
    /// summary: ascending keys, first key = its fence, last key below the next fence, finite non-negative
    /// weights summing exactly to its stored sum.
    pub fn check_record_page(&self, sum: &ShardSummary, r: u64, payload: &[u8]) -> Result<()> {
        let h = &self.header;
        let n = h.records_in_page(r);
        let page_no = h.first_record_page() + r;
        let bad = |d: String| Err(self.page_error(page_no, d));
        if n == 0 {
            return bad("record page past the last record".into());
        }
        let key = |s: usize| record_key(payload, h.weighted, s);
        if sum.fences.get(r as usize) != Some(&key(0)) {
            return bad("first key differs from its fence".into());
        }
        if !(1..n).all(|s| key(s - 1) < key(s)) {
            return bad("keys out of order".into());
        }
        if let Some(&next) = sum.fences.get(r as usize + 1)
            && key(n - 1) >= next
        {
            return bad("last key not below the next page's fence".into());
        }
        if h.weighted {
            let mut total = 0.0;
            for s in 0..n {
                let w = record_in(payload, true, s).weight;
                if !(w.is_finite() && w >= 0.0) {
                    return bad(format!("weight {w}"));
                }
                total += w;
            }
            if sum.page_weights.get(r as usize) != Some(&total) {
                return bad("weights differ from the page's stored sum".into());
            }
        }
        Ok(())
    }

    /// Checks tombstone page `t` (0-based among tombstone pages) against the summary.
    pub fn check_tomb_page(&self, sum: &ShardSummary, t: u64, payload: &[u8]) -> Result<()> {
        let h = &self.header;
        let n = h.tombs_in_page(t);
        let page_no = h.first_tomb_page() + t;
        let bad = |d: &str| Err(self.page_error(page_no, d.into()));
        if n == 0 {
            return bad("tombstone page past the last tombstone");
        }
        if sum.tomb_fences.get(t as usize) != Some(&tomb_in(payload, 0)) {
            return bad("first tombstone differs from its fence");
        }
        if !(1..n).all(|s| tomb_in(payload, s - 1) < tomb_in(payload, s)) {
            return bad("tombstones out of order");
        }
        if let Some(&next) = sum.tomb_fences.get(t as usize + 1)
            && tomb_in(payload, n - 1) >= next
        {
            return bad("last tombstone not below the next page's fence");
        }
        Ok(())
    }

    /// Reads the blob only (no record or tombstone page): the summary and the filters. Checks that the
    /// fences ascend and the page weights are finite and non-negative.
    pub fn read_summary(&self) -> Result<(ShardSummary, BloomFilter, Option<BloomFilter>)> {
        let h = &self.header;
        let ps = h.page_size;
        let first = h.first_blob_page();
        let mut blob: Vec<u8> = Vec::with_capacity((h.blob_pages as usize) * (ps - TRAILER));
        let batch = batch_pages(ps);
        let mut buf = PageBuf::new(ps * (h.blob_pages as usize).clamp(1, batch));
        let mut page_no = first;
        while page_no < h.total_pages() {
            let n = (h.total_pages() - page_no).min(batch as u64) as usize;
            self.read_pages(page_no, &mut buf[..n * ps])?;
            for page in buf[..n * ps].chunks(ps) {
                blob.extend_from_slice(&page[..ps - TRAILER]);
            }
            page_no += n as u64;
        }
        let offset = first * ps as u64;
        let bad = |d: String| Error::corruption(&self.path, offset, d);
        let mut at = 0usize;
        let mut take = |n: u64| {
            let s = &blob[at..at + n as usize];
            at += n as usize;
            s
        };
        let words = |b: &[u8]| -> Vec<u64> { b.chunks_exact(8).map(|c| u64_in(c, 0)).collect() };
        let fences = words(take(h.fence_bytes));
        let tomb_fences = words(take(h.tomb_fence_bytes));
        let page_weights: Vec<f64> = words(take(h.page_weight_bytes))
            .into_iter()
            .map(f64::from_bits)
            .collect();
        let key_filter = take(h.key_filter_bytes);
        let tomb_filter = take(h.tomb_filter_bytes);
        if !fences.windows(2).all(|w| w[0] < w[1]) || !tomb_fences.windows(2).all(|w| w[0] < w[1]) {
            return Err(bad(format!(
                "fences of shard {} are not in ascending key order",
                h.id
            )));
        }
        if page_weights.iter().any(|w| !(w.is_finite() && *w >= 0.0)) {
            return Err(bad(format!(
                "a page weight of shard {} is negative or not finite",
                h.id
            )));
        }
        let key_filter = BloomFilter::from_bytes(key_filter).map_err(&bad)?;
        let tomb_filter = if h.tomb_filter_bytes > 0 {
            Some(BloomFilter::from_bytes(tomb_filter).map_err(&bad)?)
        } else {
            None
        };
        Ok((
            ShardSummary {
                fences,
                tomb_fences,
                page_weights,
            },
            key_filter,
            tomb_filter,
        ))
    }

    /// Reads every record and tombstone page in order, checked against `sum`, in batches of
    /// [`batch_pages`]: `visit(is_tombstone_page, index among its kind, payload)`.
    fn visit_pages(
        &self,
        sum: &ShardSummary,
        visit: &mut dyn FnMut(bool, u64, &[u8]),
    ) -> Result<()> {
        let h = &self.header;
        let ps = h.page_size;
        let end = h.first_blob_page();
        let batch = batch_pages(ps);
        let mut buf = PageBuf::new(ps * ((end - 1) as usize).clamp(1, batch));
        let mut page_no = 1;
        while page_no < end {
            let n = (end - page_no).min(batch as u64) as usize;
            self.read_pages(page_no, &mut buf[..n * ps])?;
            for (k, page) in buf[..n * ps].chunks(ps).enumerate() {
                let no = page_no + k as u64;
                let payload = &page[..ps - TRAILER];
                if no < h.first_tomb_page() {
                    let r = no - h.first_record_page();
                    self.check_record_page(sum, r, payload)?;
                    visit(false, r, payload);
                } else {
                    let t = no - h.first_tomb_page();
                    self.check_tomb_page(sum, t, payload)?;
                    visit(true, t, payload);
                }
            }
            page_no += n as u64;
        }
        Ok(())
    }

    /// Reads the whole shard: its run, summary and filters, every page checked.
    pub fn read_all(&self) -> Result<LoadedShard> {
        let h = &self.header;
        let (summary, key_filter, tomb_filter) = self.read_summary()?;
        let mut run = SortedRun {
            records: Vec::with_capacity(h.records as usize),
            tombstones: Vec::with_capacity(h.tombstones as usize),
        };
        self.visit_pages(&summary, &mut |tomb, i, payload| {
            if tomb {
                let n = h.tombs_in_page(i);
                run.tombstones.extend((0..n).map(|s| tomb_in(payload, s)));
            } else {
                let n = h.records_in_page(i);
                run.records
                    .extend((0..n).map(|s| record_in(payload, h.weighted, s)));
            }
        })?;
        Ok(LoadedShard {
            run,
            fences: summary.fences,
            key_filter,
            tomb_filter,
        })
    }

    /// Reads and checks every page without keeping the records (for integrity checks); returns the number
    /// of records.
    pub fn verify_all(&self) -> Result<u64> {
        let (summary, _, _) = self.read_summary()?;
        let mut records = 0u64;
        let h = &self.header;
        self.visit_pages(&summary, &mut |tomb, i, _| {
            if !tomb {
                records += h.records_in_page(i) as u64;
            }
        })?;
        Ok(records)
    }
}

/// A shard read back whole.
pub struct LoadedShard {
    pub run: SortedRun,
    pub fences: Vec<u64>,
    pub key_filter: BloomFilter,
    pub tomb_filter: Option<BloomFilter>,
}

/// Test helper: writes `run` (with 1% filters) as shard `id` to `/d/shard-<id>.dat` of `vfs` in 4 KiB pages,
/// without O_DIRECT; returns the path and what was written.
#[cfg(test)]
pub(crate) fn write_test_shard(
    vfs: &Arc<dyn Vfs>,
    stats: &Arc<IoStats>,
    id: u64,
    run: &SortedRun,
    weighted: bool,
) -> (PathBuf, WrittenShard) {
    let (kf, tf) = super::version::filters_for_run(run, 0.01).unwrap();
    let path = Path::new("/d").join(shard_file_name(id));
    let written = write_run_file(
        vfs,
        &path,
        stats,
        id,
        run,
        (&kf, tf.as_ref()),
        weighted,
        4096,
        false,
    )
    .unwrap();
    (path, written)
}

pub mod batch_read;
#[cfg(test)]
mod tests;
