//! The shard file: one immutable file per shard, `shard-<id>.dat`, written once and never changed.
//!
//! Layout, in pages of `page_size` bytes (a power of two ≥ 4096, so every read and write is O_DIRECT-aligned);
//! the last 8 bytes of every page are its checksum, xxh3-64 of the rest seeded by (shard id, page number), so a
//! page of another shard or another position never verifies:
//!
//! | pages | content |
//! |---|---|
//! | 0 | header: magic `STRSHARD`, format, page size, shard id, counts, page counts, blob lengths (LE) |
//! | 1 … R | records, `per_page` each: key u64, value u64 (, weight f64), little-endian, in key order |
//! | R+1 … R+T | tombstone keys, u64 LE, in key order |
//! | … | blob: fence keys (first key of each record page), key Bloom filter, tombstone Bloom filter |
//!
//! Invariants: records and tombstones are in strictly ascending key order (checked when read); a page is
//! written only as part of a file that is synced before any manifest refers to it.
//! Cost: writing n records is ⌈n / per_page⌉ sequential page writes (batched 64 pages per call) and one
//! `fdatasync`; reading back the whole shard is the same number of page reads. Damage is reported as
//! `Error::Corruption` with the file and the byte offset of the page.

use super::run::{Record, SortedRun};
use super::shard::Shard;
use super::version::ShardSlot;
use crate::algo::bloom::BloomFilter;
use crate::error::{Error, Result};
use crate::storage::vfs::read_exact_at;
use crate::storage::{FileKind, IoStats, OpenOptions, PageBuf, Vfs, VfsFile};
use std::path::{Path, PathBuf};
use std::sync::Arc;

const MAGIC: &[u8; 8] = b"STRSHARD";
const FORMAT: u32 = 1;
/// Bytes of the checksum trailer of every page.
pub const TRAILER: usize = 8;
/// Pages written per call.
const BATCH_PAGES: usize = 64;

/// Name of shard `id`'s file.
pub fn shard_file_name(id: u64) -> String {
    format!("shard-{id:016}.dat")
}

/// Parses a shard file name back into its id.
pub fn parse_shard_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("shard-")?.strip_suffix(".dat")?;
    (digits.len() == 16).then(|| digits.parse().ok()).flatten()
}

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
    pub key_filter_bytes: u64,
    pub tomb_filter_bytes: u64,
}

impl ShardHeader {
    /// Bytes per record.
    pub fn record_size(&self) -> usize {
        if self.weighted { 24 } else { 16 }
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
            self.key_filter_bytes,
            self.tomb_filter_bytes,
        ] {
            put(&v.to_le_bytes());
        }
    }

    fn decode(page: &[u8], path: &Path) -> Result<ShardHeader> {
        let bad = |d: String| Error::corruption(path, 0, d);
        if &page[..8] != MAGIC {
            return Err(bad("not a shard file (bad magic)".into()));
        }
        let u32_at = |o: usize| u32::from_le_bytes(page[o..o + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_le_bytes(page[o..o + 8].try_into().expect("8 bytes"));
        if u32_at(8) != FORMAT {
            return Err(bad(format!("unknown shard format {}", u32_at(8))));
        }
        let h = ShardHeader {
            page_size: u32_at(12) as usize,
            id: u64_at(16),
            records: u64_at(24),
            tombstones: u64_at(32),
            weighted: match u64_at(40) {
                0 => false,
                1 => true,
                w => return Err(bad(format!("weighted flag {w}"))),
            },
            record_pages: u64_at(48),
            tomb_pages: u64_at(56),
            blob_pages: u64_at(64),
            fence_bytes: u64_at(72),
            key_filter_bytes: u64_at(80),
            tomb_filter_bytes: u64_at(88),
        };
        if h.page_size != page.len() {
            return Err(bad(format!(
                "header says {}-byte pages, the file uses {}",
                h.page_size,
                page.len()
            )));
        }
        let payload = (h.page_size - TRAILER) as u64;
        let consistent = h.record_pages == h.records.div_ceil(h.per_page() as u64)
            && h.tomb_pages == h.tombstones.div_ceil(h.tombs_per_page() as u64)
            && h.fence_bytes == h.record_pages * 8
            && h.blob_pages
                == (h.fence_bytes + h.key_filter_bytes + h.tomb_filter_bytes).div_ceil(payload);
        if !consistent {
            return Err(bad(format!("inconsistent header {h:?}")));
        }
        Ok(h)
    }
}

/// Seeds a page checksum with the shard id and page number.
fn page_seed(id: u64, page_no: u64) -> u64 {
    id.rotate_left(32) ^ page_no ^ 0x5354_5253_4841_5244
}

fn stamp(page: &mut [u8], id: u64, page_no: u64) {
    let n = page.len() - TRAILER;
    let sum = xxhash_rust::xxh3::xxh3_64_with_seed(&page[..n], page_seed(id, page_no));
    page[n..].copy_from_slice(&sum.to_le_bytes());
}

/// True if `page` carries the checksum of page `page_no` of shard `id`.
pub fn verify(page: &[u8], id: u64, page_no: u64) -> bool {
    let n = page.len() - TRAILER;
    let sum = xxhash_rust::xxh3::xxh3_64_with_seed(&page[..n], page_seed(id, page_no));
    page[n..] == sum.to_le_bytes()
}

/// Writes pages in batches to one file.
struct PageWriter<'a> {
    file: &'a dyn VfsFile,
    stats: &'a IoStats,
    id: u64,
    page_size: usize,
    buf: PageBuf,
    /// Pages filled in `buf`.
    filled: usize,
    /// Page number of `buf`'s first page.
    base: u64,
    /// Bytes used in the current page.
    at: usize,
}

impl PageWriter<'_> {
    fn page(&mut self) -> &mut [u8] {
        let ps = self.page_size;
        &mut self.buf[self.filled * ps..(self.filled + 1) * ps]
    }

    /// Appends `bytes` to the current page, which must have room.
    fn put(&mut self, bytes: &[u8]) {
        let at = self.at;
        self.page()[at..at + bytes.len()].copy_from_slice(bytes);
        self.at += bytes.len();
    }

    fn room(&self) -> usize {
        self.page_size - TRAILER - self.at
    }

    /// Seals the current page and starts the next.
    fn end_page(&mut self) -> Result<()> {
        let (id, no) = (self.id, self.base + self.filled as u64);
        stamp(self.page(), id, no);
        self.filled += 1;
        self.at = 0;
        if self.filled == BATCH_PAGES {
            self.write_out()?;
        }
        Ok(())
    }

    fn write_out(&mut self) -> Result<()> {
        if self.filled == 0 {
            return Ok(());
        }
        let bytes = self.filled * self.page_size;
        self.file
            .write_all_at(&self.buf[..bytes], self.base * self.page_size as u64)?;
        self.stats.record_write(FileKind::Shards, bytes);
        self.base += self.filled as u64;
        self.filled = 0;
        self.buf.clear();
        Ok(())
    }

    /// Writes `bytes` as a stream over as many pages as it takes (the blob).
    fn put_stream(&mut self, mut bytes: &[u8]) -> Result<()> {
        while !bytes.is_empty() {
            let n = self.room().min(bytes.len());
            self.put(&bytes[..n]);
            bytes = &bytes[n..];
            if self.room() == 0 {
                self.end_page()?;
            }
        }
        Ok(())
    }
}

/// Writes `slot`'s shard to `path` (created or truncated) and syncs it. Returns the file's bytes.
pub fn write_shard_file<S: Shard>(
    vfs: &Arc<dyn Vfs>,
    path: &Path,
    stats: &IoStats,
    slot: &ShardSlot<S>,
    weighted: bool,
    page_size: usize,
    direct: bool,
) -> Result<u64> {
    let shard = &slot.shard;
    let (key_filter, tomb_filter) = slot.filters();
    let key_filter = key_filter.to_bytes();
    let tomb_filter = tomb_filter.map(BloomFilter::to_bytes).unwrap_or_default();
    let mut h = ShardHeader {
        id: slot.id,
        page_size,
        records: shard.len() as u64,
        tombstones: shard.tombstone_count() as u64,
        weighted,
        record_pages: 0,
        tomb_pages: 0,
        blob_pages: 0,
        fence_bytes: 0,
        key_filter_bytes: key_filter.len() as u64,
        tomb_filter_bytes: tomb_filter.len() as u64,
    };
    h.record_pages = h.records.div_ceil(h.per_page() as u64);
    h.tomb_pages = h.tombstones.div_ceil(h.tombs_per_page() as u64);
    h.fence_bytes = h.record_pages * 8;
    h.blob_pages = (h.fence_bytes + h.key_filter_bytes + h.tomb_filter_bytes)
        .div_ceil((page_size - TRAILER) as u64);
    let file = vfs.open(
        path,
        OpenOptions {
            create: true,
            truncate: true,
            direct,
        },
    )?;
    let mut w = PageWriter {
        file: file.as_ref(),
        stats,
        id: slot.id,
        page_size,
        buf: PageBuf::new(page_size * BATCH_PAGES),
        filled: 0,
        base: 0,
        at: 0,
    };
    h.encode(w.page());
    w.end_page()?;
    let per_page = h.per_page();
    let mut fences = Vec::with_capacity(h.record_pages as usize * 8);
    for i in 0..shard.len() {
        let r = shard.record_at(i)?;
        if i % per_page == 0 {
            fences.extend_from_slice(&r.key.to_le_bytes());
        }
        w.put(&r.key.to_le_bytes());
        w.put(&r.value.to_le_bytes());
        if weighted {
            w.put(&r.weight.to_le_bytes());
        }
        if (i + 1) % per_page == 0 || i + 1 == shard.len() {
            w.end_page()?;
        }
    }
    let tpp = h.tombs_per_page();
    for j in 0..shard.tombstone_count() {
        w.put(&shard.tombstone_at(j)?.to_le_bytes());
        if (j + 1) % tpp == 0 || j + 1 == shard.tombstone_count() {
            w.end_page()?;
        }
    }
    w.put_stream(&fences)?;
    w.put_stream(&key_filter)?;
    w.put_stream(&tomb_filter)?;
    if w.at > 0 {
        w.end_page()?;
    }
    w.write_out()?;
    debug_assert_eq!(w.base, h.total_pages());
    file.sync_data()?;
    stats.record_sync(FileKind::Shards);
    Ok(h.total_pages() * page_size as u64)
}

/// A shard file opened for reading, page by page.
pub struct ShardFile {
    pub path: PathBuf,
    pub header: ShardHeader,
    file: Box<dyn VfsFile>,
    stats: Arc<IoStats>,
}

impl ShardFile {
    /// Opens `path` and verifies its header; `id` is the shard id the caller expects there.
    pub fn open(
        vfs: &Arc<dyn Vfs>,
        path: &Path,
        id: u64,
        page_size: usize,
        direct: bool,
        stats: Arc<IoStats>,
    ) -> Result<ShardFile> {
        let file = vfs.open(
            path,
            OpenOptions {
                create: false,
                truncate: false,
                direct,
            },
        )?;
        let mut page = PageBuf::new(page_size);
        let got = read_exact_at(file.as_ref(), &mut page, 0)?;
        stats.record_read(FileKind::Shards, page_size);
        if got < page_size {
            return Err(Error::corruption(
                path,
                0,
                format!("shard file has {got} bytes, less than its header page"),
            ));
        }
        if !verify(&page, id, 0) {
            return Err(Error::corruption(
                path,
                0,
                format!("header page checksum mismatch (expected shard {id})"),
            ));
        }
        let header = ShardHeader::decode(&page, path)?;
        if header.id != id {
            return Err(Error::corruption(
                path,
                0,
                format!("file holds shard {}, expected {id}", header.id),
            ));
        }
        let len = file.len()?;
        let want = header.total_pages() * page_size as u64;
        if len < want {
            return Err(Error::corruption(
                path,
                len,
                format!("shard file is {len} bytes, its header needs {want}"),
            ));
        }
        Ok(ShardFile {
            path: path.to_path_buf(),
            header,
            file,
            stats,
        })
    }

    /// Reads and verifies pages `first..first + buf.len() / page_size` into `buf` (page-aligned).
    pub fn read_pages(&self, first: u64, buf: &mut [u8]) -> Result<()> {
        let ps = self.header.page_size;
        let offset = first * ps as u64;
        let got = read_exact_at(self.file.as_ref(), buf, offset)?;
        self.stats.record_read(FileKind::Shards, buf.len());
        if got < buf.len() {
            return Err(Error::corruption(
                &self.path,
                offset + got as u64,
                "shard file ends early",
            ));
        }
        for (n, page) in buf.chunks(ps).enumerate() {
            let no = first + n as u64;
            if !verify(page, self.header.id, no) {
                return Err(Error::corruption(
                    &self.path,
                    no * ps as u64,
                    format!("page {no} checksum mismatch"),
                ));
            }
        }
        Ok(())
    }

    /// Reads the whole shard: its run, fence keys and filters. Checks key order.
    pub fn read_all(&self) -> Result<LoadedShard> {
        let h = &self.header;
        let ps = h.page_size;
        let mut buf = PageBuf::new(ps * BATCH_PAGES);
        let mut run = SortedRun {
            records: Vec::with_capacity(h.records as usize),
            tombstones: Vec::with_capacity(h.tombstones as usize),
        };
        let mut blob: Vec<u8> = Vec::new();
        let total = h.total_pages();
        let mut page_no = 1;
        while page_no < total {
            let n = (total - page_no).min(BATCH_PAGES as u64) as usize;
            self.read_pages(page_no, &mut buf[..n * ps])?;
            for (k, page) in buf[..n * ps].chunks(ps).enumerate() {
                let no = page_no + k as u64;
                let payload = &page[..ps - TRAILER];
                if no < h.first_tomb_page() {
                    let first = (no - 1) as usize * h.per_page();
                    let count = (h.records as usize - first).min(h.per_page());
                    for rec in payload.chunks_exact(h.record_size()).take(count) {
                        let u = |o: usize| u64::from_le_bytes(rec[o..o + 8].try_into().expect("8"));
                        run.records.push(Record {
                            key: u(0),
                            value: u(8),
                            weight: if h.weighted {
                                f64::from_bits(u(16))
                            } else {
                                1.0
                            },
                        });
                    }
                } else if no < h.first_blob_page() {
                    let first = (no - h.first_tomb_page()) as usize * h.tombs_per_page();
                    let count = (h.tombstones as usize - first).min(h.tombs_per_page());
                    run.tombstones.extend(
                        payload
                            .chunks_exact(8)
                            .take(count)
                            .map(|c| u64::from_le_bytes(c.try_into().expect("8"))),
                    );
                } else {
                    blob.extend_from_slice(payload);
                }
            }
            page_no += n as u64;
        }
        let order_error = |what: &str| {
            Error::corruption(
                &self.path,
                ps as u64,
                format!("{what} of shard {} are not in ascending key order", h.id),
            )
        };
        if !run.records.windows(2).all(|w| w[0].key < w[1].key) {
            return Err(order_error("records"));
        }
        if !run.tombstones.windows(2).all(|w| w[0] < w[1]) {
            return Err(order_error("tombstones"));
        }
        if run
            .records
            .iter()
            .any(|r| !(r.weight.is_finite() && r.weight >= 0.0))
        {
            return Err(Error::corruption(
                &self.path,
                ps as u64,
                "a record weight is negative or not finite",
            ));
        }
        let blob_offset = h.first_blob_page() * ps as u64;
        let fb = h.fence_bytes as usize;
        let kb = h.key_filter_bytes as usize;
        let tb = h.tomb_filter_bytes as usize;
        let fences = blob[..fb]
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8")))
            .collect();
        let filter = |bytes: &[u8]| {
            BloomFilter::from_bytes(bytes)
                .map_err(|d| Error::corruption(&self.path, blob_offset, d))
        };
        let key_filter = filter(&blob[fb..fb + kb])?;
        let tomb_filter = if tb > 0 {
            Some(filter(&blob[fb + kb..fb + kb + tb])?)
        } else {
            None
        };
        Ok(LoadedShard {
            run,
            fences,
            key_filter,
            tomb_filter,
        })
    }
}

/// A shard read back whole.
pub struct LoadedShard {
    pub run: SortedRun,
    pub fences: Vec<u64>,
    pub key_filter: BloomFilter,
    pub tomb_filter: Option<BloomFilter>,
}
