//! An append-only log of framed records (the write-ahead log's file format) and its recovery.
//!
//! Record framing, little endian: `[len u32][checksum u32][payload: len bytes]`, where the checksum is the low
//! 32 bits of `xxh3_64(len bytes ++ payload)`. Payloads are at most [`MAX_LOG_RECORD`] bytes.
//!
//! Invariants:
//! * [`LogWriter`] only appends: `append` frames a record into an in-memory buffer (no I/O), `flush` writes
//!   the whole buffer with one positional write at the end of the file, `sync` flushes then `fdatasync`s. A
//!   failed write keeps the buffer, so a later `flush` retries at the same offset and nothing is silently lost.
//! * [`recover_log`] returns every record up to the first torn (incomplete) or corrupt (bad checksum, length
//!   over the maximum) one, and cuts the file there (then syncs it), so appends continue after the last valid
//!   record.
//!
//! Cost: `append` copies the payload once and hashes it; `flush` is one write; `sync` one write plus one
//! `fdatasync`. Recovery reads the file sequentially in 1 MiB chunks (a larger record is read in one piece).
//! Counters: `FileKind::Wal` (one write per flush, one read per chunk, one sync per `fdatasync`).

use super::io_stats::{FileKind, IoStats};
use super::vfs::{OpenOptions, Vfs, VfsFile, read_exact_at};
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use xxhash_rust::xxh3::Xxh3;

/// Largest payload of one record.
pub const MAX_LOG_RECORD: usize = 64 << 20;
/// Bytes of framing before each payload.
pub const LOG_RECORD_HEADER: usize = 8;
/// Size of the chunks recovery reads.
const RECOVERY_CHUNK: usize = 1 << 20;

/// Checksum of a record: low 32 bits of xxh3-64 over the length bytes followed by the payload.
pub fn record_checksum(len_bytes: [u8; 4], payload: &[u8]) -> u32 {
    let mut h = Xxh3::new();
    h.update(&len_bytes);
    h.update(payload);
    h.digest() as u32
}

/// Appends records to a log file.
#[derive(Debug)]
pub struct LogWriter {
    file: Box<dyn VfsFile>,
    path: PathBuf,
    stats: Arc<IoStats>,
    /// Framed records not yet written.
    buf: Vec<u8>,
    /// Bytes of the file that hold written records: where the next flush writes.
    written: u64,
}

/// What [`recover_log`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogRecovery {
    /// Valid records passed to the callback.
    pub records: u64,
    /// Length of the file up to the end of the last valid record (the file's length after recovery).
    pub valid_len: u64,
    /// Bytes cut from the end of the file (a torn or corrupt tail).
    pub truncated_bytes: u64,
}

impl LogWriter {
    /// Creates (or truncates) the log at `path`.
    pub fn create(vfs: &Arc<dyn Vfs>, path: &Path, stats: Arc<IoStats>) -> Result<LogWriter> {
        let file = vfs.open(
            path,
            OpenOptions {
                create: true,
                truncate: true,
                direct: false,
            },
        )?;
        Ok(LogWriter {
            file,
            path: path.to_path_buf(),
            stats,
            buf: Vec::new(),
            written: 0,
        })
    }

    /// Opens an existing log to append after its first `valid_len` bytes (as returned by [`recover_log`]);
    /// anything after them is cut.
    pub fn open_at(
        vfs: &Arc<dyn Vfs>,
        path: &Path,
        valid_len: u64,
        stats: Arc<IoStats>,
    ) -> Result<LogWriter> {
        let file = vfs.open(
            path,
            OpenOptions {
                create: false,
                truncate: false,
                direct: false,
            },
        )?;
        file.set_len(valid_len)?;
        Ok(LogWriter {
            file,
            path: path.to_path_buf(),
            stats,
            buf: Vec::new(),
            written: valid_len,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Frames `payload` into the buffer (no I/O). A payload over [`MAX_LOG_RECORD`] is refused.
    pub fn append(&mut self, payload: &[u8]) -> Result<()> {
        if payload.len() > MAX_LOG_RECORD {
            return Err(Error::invalid(format!(
                "log record of {} bytes exceeds the maximum of {MAX_LOG_RECORD} bytes",
                payload.len()
            )));
        }
        let len_bytes = (payload.len() as u32).to_le_bytes();
        let sum = record_checksum(len_bytes, payload);
        self.buf.reserve(LOG_RECORD_HEADER + payload.len());
        self.buf.extend_from_slice(&len_bytes);
        self.buf.extend_from_slice(&sum.to_le_bytes());
        self.buf.extend_from_slice(payload);
        Ok(())
    }

    /// Bytes appended but not yet written.
    pub fn buffered_bytes(&self) -> usize {
        self.buf.len()
    }

    /// Length of the log including buffered records.
    pub fn len(&self) -> u64 {
        self.written + self.buf.len() as u64
    }

    /// True if the log holds no record, written or buffered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes the buffered records (one write). On error the buffer is kept.
    pub fn flush(&mut self) -> Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        self.file.write_all_at(&self.buf, self.written)?;
        self.stats.record_write(FileKind::Wal, self.buf.len());
        self.written += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }

    /// Flushes, then makes the log durable (`fdatasync`).
    pub fn sync(&mut self) -> Result<()> {
        self.flush()?;
        self.file.sync_data()?;
        self.stats.record_sync(FileKind::Wal);
        Ok(())
    }
}

/// Sequential reader over a file with a growable window.
struct ChunkReader<'a> {
    file: &'a dyn VfsFile,
    stats: &'a IoStats,
    file_len: u64,
    /// Bytes of the file from `start`.
    window: Vec<u8>,
    /// File offset of `window[0]`.
    start: u64,
}

impl ChunkReader<'_> {
    /// Makes `need` bytes from file offset `at` (≥ `start`) available in the window, if the file has them.
    /// Returns how many bytes from `at` are available (≤ `need` only at the end of the file).
    fn fill(&mut self, at: u64, need: usize) -> Result<usize> {
        let rel = (at - self.start) as usize;
        let have = self.window.len() - rel;
        if have >= need {
            return Ok(have);
        }
        // Drop the consumed prefix, then read at least one chunk (or what the record needs), within the file.
        self.window.drain(..rel);
        self.start = at;
        let end = self.start + self.window.len() as u64;
        let want = (need - have).max(RECOVERY_CHUNK) as u64;
        let want = want.min(self.file_len.saturating_sub(end)) as usize;
        if want > 0 {
            let old = self.window.len();
            self.window.resize(old + want, 0);
            let n = read_exact_at(self.file, &mut self.window[old..], end)?;
            self.stats.record_read(FileKind::Wal, n);
            self.window.truncate(old + n);
        }
        Ok(self.window.len())
    }

    fn bytes(&self, at: u64, len: usize) -> &[u8] {
        let rel = (at - self.start) as usize;
        &self.window[rel..rel + len]
    }
}

/// Reads the log at `path`, calling `on_record(payload, record_offset)` for each valid record in order
/// (`record_offset` is where the record's frame starts). Stops at the first torn or corrupt record and cuts the
/// file there (synced). An error from `on_record` aborts recovery (nothing is cut) and is returned. A missing
/// file is `Error::Io` of kind `NotFound`.
pub fn recover_log(
    vfs: &Arc<dyn Vfs>,
    path: &Path,
    stats: Arc<IoStats>,
    on_record: &mut dyn FnMut(&[u8], u64) -> Result<()>,
) -> Result<LogRecovery> {
    let file = vfs.open(
        path,
        OpenOptions {
            create: false,
            truncate: false,
            direct: false,
        },
    )?;
    let file_len = file.len()?;
    let mut reader = ChunkReader {
        file: &*file,
        stats: &stats,
        file_len,
        window: Vec::new(),
        start: 0,
    };
    let mut pos = 0u64;
    let mut records = 0u64;
    loop {
        if reader.fill(pos, LOG_RECORD_HEADER)? < LOG_RECORD_HEADER {
            break; // clean end, or a torn header
        }
        let header = reader.bytes(pos, LOG_RECORD_HEADER);
        let len_bytes: [u8; 4] = header[0..4].try_into().expect("4 bytes");
        let sum = u32::from_le_bytes(header[4..8].try_into().expect("4 bytes"));
        let len = u32::from_le_bytes(len_bytes) as usize;
        if len > MAX_LOG_RECORD {
            break; // corrupt length
        }
        if reader.fill(pos, LOG_RECORD_HEADER + len)? < LOG_RECORD_HEADER + len {
            break; // torn payload
        }
        let payload = &reader.bytes(pos, LOG_RECORD_HEADER + len)[LOG_RECORD_HEADER..];
        if record_checksum(len_bytes, payload) != sum {
            break; // corrupt record
        }
        on_record(payload, pos)?;
        records += 1;
        pos += (LOG_RECORD_HEADER + len) as u64;
    }
    let truncated_bytes = file_len - pos;
    if truncated_bytes > 0 {
        file.set_len(pos)?;
        file.sync_data()?;
        stats.record_sync(FileKind::Wal);
    }
    Ok(LogRecovery {
        records,
        valid_len: pos,
        truncated_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::fault_vfs::FaultVfs;
    use crate::storage::mem_vfs::MemVfs;

    fn payload(i: usize) -> Vec<u8> {
        (0..(i * 37) % 300).map(|j| (i + j) as u8).collect()
    }

    fn recover_all(
        vfs: &Arc<dyn Vfs>,
        path: &Path,
        stats: &Arc<IoStats>,
    ) -> (Vec<(Vec<u8>, u64)>, LogRecovery) {
        let mut got = Vec::new();
        let r = recover_log(vfs, path, stats.clone(), &mut |p, off| {
            got.push((p.to_vec(), off));
            Ok(())
        })
        .unwrap();
        (got, r)
    }

    fn setup() -> (Arc<MemVfs>, Arc<dyn Vfs>, PathBuf, Arc<IoStats>) {
        let mem = Arc::new(MemVfs::new());
        let vfs: Arc<dyn Vfs> = mem.clone();
        (mem, vfs, PathBuf::from("/db/wal"), Arc::new(IoStats::new()))
    }

    /// Writes `n` records; returns the frame offsets.
    fn write_records(vfs: &Arc<dyn Vfs>, path: &Path, stats: &Arc<IoStats>, n: usize) -> Vec<u64> {
        let mut w = LogWriter::create(vfs, path, stats.clone()).unwrap();
        assert!(w.is_empty());
        let mut offs = Vec::new();
        for i in 0..n {
            offs.push(w.len());
            w.append(&payload(i)).unwrap();
            if i % 3 == 0 {
                w.flush().unwrap();
            }
        }
        w.sync().unwrap();
        offs
    }

    #[test]
    fn roundtrip_and_counters() {
        let (_mem, vfs, path, stats) = setup();
        let mut w = LogWriter::create(&vfs, &path, stats.clone()).unwrap();
        assert_eq!(w.path(), path.as_path());
        w.append(b"one").unwrap();
        w.append(b"").unwrap();
        w.append(b"three").unwrap();
        assert_eq!(w.buffered_bytes(), 3 * 8 + 3 + 5);
        assert_eq!(w.len(), 32);
        assert_eq!(
            stats.snapshot().kind(FileKind::Wal).writes,
            0,
            "append does no I/O"
        );
        w.sync().unwrap();
        assert_eq!(w.buffered_bytes(), 0);
        assert_eq!(w.len(), 32);
        let c = stats.snapshot().kind(FileKind::Wal);
        assert_eq!((c.writes, c.bytes_written, c.syncs), (1, 32, 1));
        w.flush().unwrap();
        assert_eq!(
            stats.snapshot().kind(FileKind::Wal).writes,
            1,
            "empty flush writes nothing"
        );
        drop(w);

        let (got, r) = recover_all(&vfs, &path, &stats);
        assert_eq!(
            got,
            vec![
                (b"one".to_vec(), 0),
                (b"".to_vec(), 11),
                (b"three".to_vec(), 19)
            ]
        );
        assert_eq!(
            r,
            LogRecovery {
                records: 3,
                valid_len: 32,
                truncated_bytes: 0
            }
        );
        // Append after recovery.
        let mut w = LogWriter::open_at(&vfs, &path, r.valid_len, stats.clone()).unwrap();
        w.append(b"four").unwrap();
        w.sync().unwrap();
        let (got, r) = recover_all(&vfs, &path, &stats);
        assert_eq!(got.len(), 4);
        assert_eq!(got[3], (b"four".to_vec(), 32));
        assert_eq!(r.valid_len, 44);
    }

    #[test]
    fn many_records_across_chunks_including_a_large_one() {
        let (_mem, vfs, path, stats) = setup();
        let mut w = LogWriter::create(&vfs, &path, stats.clone()).unwrap();
        let big: Vec<u8> = (0..3 * RECOVERY_CHUNK + 5)
            .map(|i| (i % 253) as u8)
            .collect();
        let mut expect = Vec::new();
        for i in 0..20_000 {
            let p = if i == 7000 { big.clone() } else { payload(i) };
            w.append(&p).unwrap();
            expect.push(p);
        }
        w.sync().unwrap();
        let total = w.len();
        let before = stats.snapshot().kind(FileKind::Wal).reads;
        let mut n = 0;
        let r = recover_log(&vfs, &path, stats.clone(), &mut |p, _| {
            assert_eq!(p, &expect[n][..]);
            n += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(r.records, 20_000);
        assert_eq!(r.valid_len, total);
        let reads = stats.snapshot().kind(FileKind::Wal).reads - before;
        assert!(
            reads <= total / RECOVERY_CHUNK as u64 + 3,
            "{reads} reads for {total} bytes"
        );
        assert!(matches!(
            w.append(&vec![0u8; MAX_LOG_RECORD + 1]),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn torn_tail_is_cut_and_earlier_records_recovered() {
        let (mem, vfs, path, stats) = setup();
        let offs = write_records(&vfs, &path, &stats, 10);
        let full = mem.file_bytes(&path).unwrap();
        // Cut in the middle of record 7's payload, and then inside record 7's header.
        for cut in [offs[7] + 11, offs[7] + 5] {
            mem.set_file_bytes(&path, full[..cut as usize].to_vec());
            let (got, r) = recover_all(&vfs, &path, &stats);
            assert_eq!(got.len(), 7);
            for (i, (p, off)) in got.iter().enumerate() {
                assert_eq!((p, *off), (&payload(i), offs[i]));
            }
            assert_eq!(r.valid_len, offs[7]);
            assert_eq!(r.truncated_bytes, cut - offs[7]);
            assert_eq!(mem.file_bytes(&path).unwrap().len() as u64, offs[7]);
            assert_eq!(
                mem.durable_bytes(&path).unwrap().len() as u64,
                offs[7],
                "the cut is synced"
            );
        }
        // Recovering again finds nothing to cut.
        let (_, r) = recover_all(&vfs, &path, &stats);
        assert_eq!((r.records, r.truncated_bytes), (7, 0));
    }

    #[test]
    fn corrupt_record_stops_recovery_there() {
        let (mem, vfs, path, stats) = setup();
        let offs = write_records(&vfs, &path, &stats, 9);
        let full = mem.file_bytes(&path).unwrap();
        // Bit flip in the payload of the middle record.
        let mut bytes = full.clone();
        bytes[offs[4] as usize + 8 + 3] ^= 0x20;
        mem.set_file_bytes(&path, bytes);
        let (got, r) = recover_all(&vfs, &path, &stats);
        assert_eq!(got.len(), 4);
        assert_eq!(r.valid_len, offs[4]);
        assert_eq!(r.truncated_bytes, full.len() as u64 - offs[4]);
        // A length over the maximum is corruption too.
        let mut bytes = full.clone();
        bytes[offs[2] as usize..offs[2] as usize + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        mem.set_file_bytes(&path, bytes);
        let (got, r) = recover_all(&vfs, &path, &stats);
        assert_eq!((got.len(), r.valid_len), (2, offs[2]));
        // Zeros after the last record (e.g. preallocated space) are cut.
        let mut bytes = full.clone();
        bytes.extend_from_slice(&[0u8; 100]);
        mem.set_file_bytes(&path, bytes);
        let (got, r) = recover_all(&vfs, &path, &stats);
        assert_eq!((got.len(), r.truncated_bytes), (9, 100));
    }

    #[test]
    fn callback_error_aborts_and_missing_file_is_not_found() {
        let (mem, vfs, path, stats) = setup();
        write_records(&vfs, &path, &stats, 5);
        let len = mem.file_bytes(&path).unwrap().len();
        let mut seen = 0;
        let e = recover_log(&vfs, &path, stats.clone(), &mut |_, _| {
            seen += 1;
            if seen == 3 {
                Err(Error::invalid("stop"))
            } else {
                Ok(())
            }
        })
        .unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(m) if m == "stop"));
        assert_eq!(
            mem.file_bytes(&path).unwrap().len(),
            len,
            "nothing cut on abort"
        );
        let e = recover_log(&vfs, Path::new("/db/nope"), stats, &mut |_, _| Ok(())).unwrap_err();
        assert!(
            matches!(e, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
        );
    }

    #[test]
    fn failed_write_keeps_the_buffer() {
        let mem = Arc::new(MemVfs::new());
        let fault = FaultVfs::new(mem.clone());
        let vfs: Arc<dyn Vfs> = Arc::new(fault.clone());
        let path = PathBuf::from("/wal");
        let stats = Arc::new(IoStats::new());
        let mut w = LogWriter::create(&vfs, &path, stats.clone()).unwrap();
        w.append(b"a").unwrap();
        w.sync().unwrap();
        w.append(b"bb").unwrap();
        w.append(b"ccc").unwrap();
        fault.fail_after(0);
        assert!(w.flush().is_err());
        assert!(w.sync().is_err());
        assert_eq!(w.buffered_bytes(), 8 + 2 + 8 + 3);
        assert_eq!(w.len(), 9 + 21);
        fault.disarm();
        w.sync().unwrap();
        assert_eq!(w.buffered_bytes(), 0);
        // Write succeeded but sync failed: the data is written, the buffer is empty, a retry syncs.
        w.append(b"dddd").unwrap();
        fault.fail_after(1);
        assert!(w.sync().is_err());
        assert_eq!(w.buffered_bytes(), 0);
        fault.disarm();
        w.sync().unwrap();
        drop(w);
        fault.crash();
        let (got, r) = recover_all(&vfs, &path, &stats);
        let got: Vec<Vec<u8>> = got.into_iter().map(|(p, _)| p).collect();
        assert_eq!(
            got,
            vec![
                b"a".to_vec(),
                b"bb".to_vec(),
                b"ccc".to_vec(),
                b"dddd".to_vec()
            ]
        );
        assert_eq!(r.truncated_bytes, 0);
    }
}
