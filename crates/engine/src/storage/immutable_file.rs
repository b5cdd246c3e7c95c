//! Immutable page files: written once, front to back, page 0 (the caller's header) last, synced, then only
//! read — the dynamized index's shard files are built on this.
//!
//! A file is a sequence of pages of `page_size` bytes (a power of two ≥ 4096, so every read and write is
//! O_DIRECT-aligned). The last [`TRAILER`] bytes of every page are its checksum: xxh3-64 of the rest, seeded by
//! (file id, page number), so a page of another file or another position never verifies. What the pages hold
//! is the caller's business; this module seals them on the way out and verifies them on the way in.
//!
//! Invariants: a page is written only as part of a file that is synced before the caller publishes it;
//! page 0 is written after every other page, so a file whose page 0 verifies was written whole (a crash before
//! the sync leaves a file nobody refers to). Bytes read back are untrusted until their checksum verifies;
//! a mismatch or a short file is `Error::Corruption` with the path and the byte offset of the page.
//!
//! Cost: writing p pages is ⌈p / [`batch_pages`]⌉ sequential writes (batches of at most 4 MiB), one page-0
//! write and one `fdatasync`; reading n consecutive pages is one read plus one checksum per page.

use crate::error::{Error, Result};
use crate::storage::page::validate_page_size;
use crate::storage::vfs::read_exact_at;
use crate::storage::{FileKind, IoStats, OpenOptions, PageBuf, Vfs, VfsFile};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Bytes of the checksum trailer of every page.
pub const TRAILER: usize = 8;
/// Pages written (and read, when a whole file is read) per call, for pages up to 64 KiB.
pub const BATCH_PAGES: usize = 64;
/// Most bytes per batched call (64 pages of 64 KiB): larger pages are batched fewer at a time.
const BATCH_BYTES: usize = 4 << 20;

/// Pages per batched write or read for `page_size`-byte pages: [`BATCH_PAGES`] up to 64 KiB pages, then as
/// many as fit in 4 MiB (at least one), so a batch buffer never exceeds 4 MiB.
pub fn batch_pages(page_size: usize) -> usize {
    (BATCH_BYTES / page_size.max(1)).clamp(1, BATCH_PAGES)
}

/// Seeds a page checksum with the file id and page number.
fn page_seed(id: u64, page_no: u64) -> u64 {
    id.rotate_left(32) ^ page_no ^ 0x5354_5253_4841_5244
}

fn page_sum(page: &[u8], id: u64, page_no: u64) -> Option<(usize, u64)> {
    let n = page.len().checked_sub(TRAILER)?;
    let body = page.get(..n)?;
    Some((
        n,
        xxhash_rust::xxh3::xxh3_64_with_seed(body, page_seed(id, page_no)),
    ))
}

/// Writes the checksum of page `page_no` of file `id` into `page`'s trailer.
pub fn stamp(page: &mut [u8], id: u64, page_no: u64) {
    if let Some((n, sum)) = page_sum(page, id, page_no) {
        page[n..].copy_from_slice(&sum.to_le_bytes());
    }
}

/// True if `page` carries the checksum of page `page_no` of file `id`.
pub fn verify(page: &[u8], id: u64, page_no: u64) -> bool {
    page_sum(page, id, page_no)
        .is_some_and(|(n, sum)| page.get(n..) == Some(&sum.to_le_bytes()[..]))
}

fn open_options(direct: bool, write: bool) -> OpenOptions {
    OpenOptions {
        create: write,
        truncate: write,
        direct,
        read_only: !write,
    }
}

/// Writes an immutable file page by page: the caller fills the current page with [`put`](Self::put) (or
/// spreads a byte stream over pages with [`put_stream`](Self::put_stream)), seals it with
/// [`end_page`](Self::end_page), and finally hands page 0 to [`finish`](Self::finish). Pages are buffered and
/// written [`batch_pages`] at a time.
pub struct ImmutableFileWriter {
    file: Box<dyn VfsFile>,
    stats: Arc<IoStats>,
    kind: FileKind,
    id: u64,
    page_size: usize,
    buf: PageBuf,
    /// Pages `buf` holds.
    batch: usize,
    /// Pages filled in `buf`.
    filled: usize,
    /// Page number of `buf`'s first page.
    base: u64,
    /// Bytes used in the current page.
    at: usize,
}

impl ImmutableFileWriter {
    /// Creates (or truncates) `path` for file `id`; writes are counted as `kind`.
    pub fn create(
        vfs: &Arc<dyn Vfs>,
        path: &Path,
        kind: FileKind,
        stats: Arc<IoStats>,
        id: u64,
        page_size: usize,
        direct: bool,
    ) -> Result<ImmutableFileWriter> {
        validate_page_size(page_size)?;
        let file = vfs.open(path, open_options(direct, true))?;
        let batch = batch_pages(page_size);
        Ok(ImmutableFileWriter {
            file,
            stats,
            kind,
            id,
            page_size,
            buf: PageBuf::new(page_size * batch),
            batch,
            filled: 0,
            base: 1,
            at: 0,
        })
    }

    /// Bytes a page holds besides its trailer.
    pub fn payload_len(&self) -> usize {
        self.page_size - TRAILER
    }

    fn page(&mut self) -> &mut [u8] {
        let ps = self.page_size;
        &mut self.buf[self.filled * ps..(self.filled + 1) * ps]
    }

    /// Appends `bytes` to the current page; they must fit in [`room`](Self::room).
    pub fn put(&mut self, bytes: &[u8]) {
        let at = self.at;
        self.page()[at..at + bytes.len()].copy_from_slice(bytes);
        self.at += bytes.len();
    }

    /// Bytes left in the current page.
    pub fn room(&self) -> usize {
        self.payload_len() - self.at
    }

    /// True if the current page holds nothing yet.
    pub fn page_is_empty(&self) -> bool {
        self.at == 0
    }

    /// Number the current page will have.
    pub fn page_no(&self) -> u64 {
        self.base + self.filled as u64
    }

    /// Seals the current page (the rest of its payload stays zero) and starts the next.
    pub fn end_page(&mut self) -> Result<()> {
        let (id, no) = (self.id, self.page_no());
        stamp(self.page(), id, no);
        self.filled += 1;
        self.at = 0;
        if self.filled == self.batch {
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
        self.stats.record_write(self.kind, bytes);
        self.base += self.filled as u64;
        self.filled = 0;
        self.buf.clear();
        Ok(())
    }

    /// Writes `bytes` as a stream over as many pages as it takes, from the current position on.
    pub fn put_stream(&mut self, mut bytes: &[u8]) -> Result<()> {
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

    /// Seals a partly filled current page, writes what is buffered, then page 0 (`header`, one page whose
    /// trailer is overwritten with its checksum), and syncs. Returns the file's page count.
    pub fn finish(mut self, mut header: PageBuf) -> Result<u64> {
        if self.at > 0 {
            self.end_page()?;
        }
        self.write_out()?;
        if header.len() != self.page_size {
            return Err(Error::invalid(format!(
                "a header page of {} bytes for a file of {}-byte pages",
                header.len(),
                self.page_size
            )));
        }
        stamp(&mut header, self.id, 0);
        self.file.write_all_at(&header, 0)?;
        self.stats.record_write(self.kind, self.page_size);
        self.file.sync_data()?;
        self.stats.record_sync(self.kind);
        Ok(self.base)
    }
}

/// An immutable file opened for reading: page 0 checked at open, other pages checked as they are read.
pub struct ImmutableFile {
    path: PathBuf,
    file: Box<dyn VfsFile>,
    stats: Arc<IoStats>,
    kind: FileKind,
    id: u64,
    page_size: usize,
}

impl std::fmt::Debug for ImmutableFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImmutableFile")
            .field("path", &self.path)
            .field("id", &self.id)
            .finish()
    }
}

impl ImmutableFile {
    /// Opens `path`, which should hold file `id` (`what` names it in errors: "shard 7"), and reads and verifies
    /// page 0, which it returns (trailer included).
    pub fn open(
        vfs: &Arc<dyn Vfs>,
        path: &Path,
        kind: FileKind,
        id: u64,
        page_size: usize,
        direct: bool,
        stats: Arc<IoStats>,
    ) -> Result<(ImmutableFile, PageBuf)> {
        validate_page_size(page_size)?;
        let file = vfs.open(path, open_options(direct, false))?;
        let mut page = PageBuf::new(page_size);
        let got = read_exact_at(file.as_ref(), &mut page, 0)?;
        stats.record_read(kind, page_size);
        if got < page_size {
            return Err(Error::corruption(
                path,
                0,
                format!("file has {got} bytes, less than its header page"),
            ));
        }
        if !verify(&page, id, 0) {
            return Err(Error::corruption(
                path,
                0,
                format!("header page checksum mismatch (expected file id {id})"),
            ));
        }
        let opened = ImmutableFile {
            path: path.to_path_buf(),
            file,
            stats,
            kind,
            id,
            page_size,
        };
        Ok((opened, page))
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's page size.
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// Fails with `Corruption` unless the file holds at least `pages` pages.
    pub fn require_pages(&self, pages: u64) -> Result<()> {
        let len = self.file.len()?;
        let want = pages.saturating_mul(self.page_size as u64);
        if len < want {
            return Err(Error::corruption(
                &self.path,
                len,
                format!("file is {len} bytes, its header needs {want}"),
            ));
        }
        Ok(())
    }

    /// Reads pages `first..first + buf.len() / page_size` into `buf` (whole pages, aligned for O_DIRECT) and
    /// verifies their checksums.
    pub fn read_pages(&self, first: u64, buf: &mut [u8]) -> Result<()> {
        let ps = self.page_size;
        let offset = first.saturating_mul(ps as u64);
        let got = read_exact_at(self.file.as_ref(), buf, offset)?;
        self.stats.record_read(self.kind, buf.len());
        if got < buf.len() {
            return Err(Error::corruption(
                &self.path,
                offset + got as u64,
                "file ends early",
            ));
        }
        for (n, page) in buf.chunks(ps).enumerate() {
            let no = first + n as u64;
            if !verify(page, self.id, no) {
                return Err(Error::corruption(
                    &self.path,
                    no * ps as u64,
                    format!("page {no} checksum mismatch"),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::MemVfs;

    fn setup() -> (Arc<MemVfs>, Arc<dyn Vfs>, Arc<IoStats>) {
        let mem = Arc::new(MemVfs::new());
        let vfs: Arc<dyn Vfs> = mem.clone();
        (mem, vfs, Arc::new(IoStats::new()))
    }

    fn write(vfs: &Arc<dyn Vfs>, stats: &Arc<IoStats>, id: u64, pages: u64) -> u64 {
        let path = Path::new("/f");
        let mut w = ImmutableFileWriter::create(
            vfs,
            path,
            FileKind::Shards,
            stats.clone(),
            id,
            4096,
            false,
        )
        .unwrap();
        for p in 1..pages {
            assert_eq!(w.page_no(), p);
            w.put(&p.to_le_bytes());
            w.end_page().unwrap();
        }
        let mut header = PageBuf::new(4096);
        header[..4].copy_from_slice(b"HEAD");
        w.finish(header).unwrap()
    }

    #[test]
    fn pages_round_trip_in_batches_and_verify() {
        let (_, vfs, stats) = setup();
        let pages = 3 * BATCH_PAGES as u64 + 5;
        assert_eq!(write(&vfs, &stats, 9, pages), pages);
        let (f, header) = ImmutableFile::open(
            &vfs,
            Path::new("/f"),
            FileKind::Shards,
            9,
            4096,
            false,
            stats.clone(),
        )
        .unwrap();
        assert_eq!(&header[..4], b"HEAD");
        f.require_pages(pages).unwrap();
        assert!(f.require_pages(pages + 1).is_err());
        let mut buf = PageBuf::new(4096 * 7);
        f.read_pages(100, &mut buf).unwrap();
        for k in 0..7 {
            let at = k * 4096;
            assert_eq!(buf[at..at + 8], (100 + k as u64).to_le_bytes());
        }
        let written = stats.snapshot().kind(FileKind::Shards).bytes_written;
        assert_eq!(written, pages * 4096);
    }

    #[test]
    fn a_page_of_another_file_or_position_never_verifies() {
        let (mem, vfs, stats) = setup();
        write(&vfs, &stats, 3, 10);
        let path = Path::new("/f");
        // Wrong id: the header does not verify.
        let e = ImmutableFile::open(&vfs, path, FileKind::Shards, 4, 4096, false, stats.clone())
            .unwrap_err();
        assert!(matches!(e, Error::Corruption { offset: 0, .. }), "{e}");
        // Swapped pages 2 and 5: both sealed, neither at its own position.
        let mut bytes = mem.file_bytes(path).unwrap();
        let (a, b) = (2 * 4096, 5 * 4096);
        let page2 = bytes[a..a + 4096].to_vec();
        bytes.copy_within(b..b + 4096, a);
        bytes[b..b + 4096].copy_from_slice(&page2);
        mem.set_file_bytes(path, bytes.clone());
        let (f, _) =
            ImmutableFile::open(&vfs, path, FileKind::Shards, 3, 4096, false, stats.clone())
                .unwrap();
        let mut buf = PageBuf::new(4096);
        let e = f.read_pages(2, &mut buf).unwrap_err();
        assert!(matches!(e, Error::Corruption { offset: 8192, .. }), "{e}");
        // A short file.
        bytes.truncate(9 * 4096 + 100);
        mem.set_file_bytes(path, bytes);
        let (f, _) =
            ImmutableFile::open(&vfs, path, FileKind::Shards, 3, 4096, false, stats).unwrap();
        assert!(f.require_pages(10).is_err());
        let e = f.read_pages(9, &mut buf).unwrap_err();
        assert!(matches!(e, Error::Corruption { offset: 36964, .. }), "{e}");
    }
}
