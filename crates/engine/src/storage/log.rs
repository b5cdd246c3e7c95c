//! An append-only log of framed records in a preallocated file (the write-ahead log's file format), and its
//! recovery.
//!
//! ## File layout (little endian)
//! | offset | what                                                                                   |
//! |--------|----------------------------------------------------------------------------------------|
//! | 0      | header slot 0 (56 bytes used of 512)                                                   |
//! | 512    | header slot 1                                                                          |
//! | 1024   | frames, back to back; every byte after the last frame is zero (preallocated space)    |
//!
//! Header slot: magic `b"STRATAWL"`, version `u32` (= 1), flags `u32` (bit 0: [`LogHeader::follows_unsynced`];
//! other bits zero; files of builds before the flag have 0, and those builds ignore it), generation `u64`, log number
//! `u64`, base seqno `u64` (the caller's: for the WAL, the checkpoint its records follow), file length `u64`,
//! xxh3-64 of the preceding 48 bytes. The valid slot with the higher generation is current. Creation writes
//! generation 0 to slot 0 and generation 1 to slot 1; each growth of the file writes generation + 1 to slot
//! `generation % 2`, so a torn slot write leaves the other slot intact. The slots sit in different 512-byte
//! sectors.
//!
//! Frame: `len u32`, head sum `u32` (low 32 bits of xxh3-64 of the four length bytes), `len` payload bytes,
//! payload sum `u32` (low 32 bits of xxh3-64 of the payload). The payload sum comes last, so the last bytes of
//! every frame are (almost surely) non-zero.
//!
//! ## Preallocation and what recovery can tell apart
//! The file is created [`LOG_GROWTH`] (4 KiB) bytes long and grows in multiples of it (`allocate`: `fallocate`
//! where the file system has it, else `set_len`; then the header slot, then the frames; one `fdatasync`
//! covers all three). Allocated blocks, not sparse space, so an append never waits for the block mapping
//! that the write-back of earlier pages holds while it allocates blocks (ext4: `i_data_sem`, 3–5 ms waits
//! of a `flush` writer seen at 10M writes). A growth at least doubles the file, by at most
//! [`LOG_MAX_GROWTH_STEP`] (1 MiB): a 64 MiB log grows about 70 times, not 16,000 (each growth is a `set_len`,
//! a header write, and at `sync` a metadata update in the file system's journal). Because the file is never shorter than its header
//! says and its unused space is zeros:
//! * a file shorter than the current header's length was **truncated**: `Error::Corruption`;
//! * a **torn tail** — the last frame(s) written but not made durable before a power loss — shows as a frame
//!   whose bytes from some 512-byte-aligned offset on are zeros through the end of the file (sectors not
//!   written), or a frame that runs past the end of a file whose growth was lost. Recovery stops there and
//!   reports it: those records were never durable;
//! * any other bad frame — a checksum mismatch with data after it, garbage in the zero space, a damaged length
//!   — is **damage**: `Error::Corruption` at the frame's offset, naming how many valid frames follow. Never a
//!   silent truncation. [`RecoverMode::Salvage`] instead stops at the damage and reports what it dropped.
//!
//! Invariants:
//! * [`LogWriter`] only appends: `append` frames a record into an in-memory buffer (no I/O), `flush` grows
//!   the file if needed and writes the whole buffer with one positional write, `sync` flushes then
//!   `fdatasync`s. A failed write keeps the buffer, so a later `flush` retries at the same offset.
//! * [`recover_log`] never writes: the caller decides what to do with a torn or damaged log (the database
//!   replaces it with a new log after recovery).
//!
//! Cost: `append` copies the payload once and hashes it; `flush` is one write (plus a `set_len` and a 512-byte
//! header write at each growth); `sync` one write plus one `fdatasync`. Recovery reads the file
//! once sequentially in 1 MiB chunks (a larger record in one piece), plus the zero tail backwards once.
//! Counters: `FileKind::Wal` (one write per flush, one read per chunk, one sync per `fdatasync`).

// A decoder of bytes read from disk: every index and slice is checked.
#![deny(clippy::indexing_slicing)]

use super::codec::{Reader, Writer};
use super::io_stats::{FileKind, IoStats};
use super::vfs::{OpenOptions, Vfs, VfsFile, read_exact_at};
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use xxhash_rust::xxh3::xxh3_64;

/// Largest payload of one record.
pub const MAX_LOG_RECORD: usize = 64 << 20;
/// Bytes of framing around each payload (length, head sum, payload sum).
pub const LOG_FRAME_OVERHEAD: usize = 12;
/// Offset of the first frame (after the two header slots).
pub const LOG_DATA_START: u64 = 1024;
/// The file is preallocated and grows in multiples of this many bytes.
pub const LOG_GROWTH: u64 = 4 << 10;
/// Largest step of one growth: the file doubles up to it, then grows by it.
pub const LOG_MAX_GROWTH_STEP: u64 = 1 << 20;
/// Size of the chunks recovery reads.
const RECOVERY_CHUNK: usize = 1 << 20;
/// Sector size assumed for torn writes: a write interrupted by a power loss leaves whole sectors unwritten.
const SECTOR: u64 = 512;

const MAGIC: &[u8; 8] = b"STRATAWL";
const VERSION: u32 = 1;
const SLOT_STRIDE: u64 = 512;
const SLOT_BODY: usize = 48;
const SLOT_LEN: usize = SLOT_BODY + 8;
/// How many bytes after a damaged frame are searched for valid frames (for the error message).
const LATER_FRAME_SEARCH: u64 = 64 << 20;

/// What a log file says about itself, fixed at creation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogHeader {
    /// The log's number (the WAL's file name carries it too).
    pub number: u64,
    /// The caller's base sequence number (the WAL: the checkpoint its records follow).
    pub base_seqno: u64,
    /// The log was created before the log it follows was durable (a WAL rotation in the background, see
    /// `db::background`): until that one is synced, nothing in this log is either.
    pub follows_unsynced: bool,
}

/// Header flag bit of [`LogHeader::follows_unsynced`].
const FLAG_FOLLOWS_UNSYNCED: u32 = 1;

/// The current header slot of a log file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Slot {
    generation: u64,
    header: LogHeader,
    /// File length when the slot was written.
    length: u64,
}

impl Slot {
    fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(SLOT_LEN);
        Writer::new(&mut b)
            .bytes(MAGIC)
            .u32(VERSION)
            .u32(if self.header.follows_unsynced {
                FLAG_FOLLOWS_UNSYNCED
            } else {
                0
            })
            .u64(self.generation)
            .u64(self.header.number)
            .u64(self.header.base_seqno)
            .u64(self.length);
        let sum = xxh3_64(&b);
        Writer::new(&mut b).u64(sum);
        b
    }

    fn decode(b: &[u8]) -> std::result::Result<Slot, String> {
        let b = b.get(..SLOT_LEN).ok_or("missing (short)")?;
        if b.iter().all(|&x| x == 0) {
            return Err("missing (zeros)".into());
        }
        let (body, sum) = b.split_at(SLOT_BODY);
        let mut r = Reader::new(body);
        if &r.array::<8>()? != MAGIC {
            return Err("bad magic".into());
        }
        if xxh3_64(body) != Reader::new(sum).u64()? {
            return Err("checksum mismatch".into());
        }
        let version = r.u32()?;
        if version != VERSION {
            return Err(format!(
                "log format version {version}, this build reads {VERSION}"
            ));
        }
        let flags = r.u32()?;
        if flags & !FLAG_FOLLOWS_UNSYNCED != 0 {
            return Err(format!("unknown header flags {flags:#x}"));
        }
        let slot = Slot {
            generation: r.u64()?,
            header: LogHeader {
                number: r.u64()?,
                base_seqno: r.u64()?,
                follows_unsynced: flags & FLAG_FOLLOWS_UNSYNCED != 0,
            },
            length: r.u64()?,
        };
        if slot.length < LOG_DATA_START || !slot.length.is_multiple_of(LOG_GROWTH) {
            return Err(format!("impossible file length {}", slot.length));
        }
        Ok(slot)
    }

    fn offset(generation: u64) -> u64 {
        (generation % 2) * SLOT_STRIDE
    }
}

/// A frame whose bytes are not what `fill` promised (cannot happen; reported as an I/O error, not a panic).
fn frame_error() -> Error {
    Error::io(
        Path::new("(log frame)"),
        std::io::Error::other("log frame shorter than its fill"),
    )
}

fn head_sum(len_bytes: [u8; 4]) -> u32 {
    xxh3_64(&len_bytes) as u32
}

fn payload_sum(payload: &[u8]) -> u32 {
    xxh3_64(payload) as u32
}

/// Appends records to a log file.
#[derive(Debug)]
pub struct LogWriter {
    file: Box<dyn VfsFile>,
    path: PathBuf,
    stats: Arc<IoStats>,
    /// The current header slot (its length is the file's preallocated length).
    slot: Slot,
    /// Framed records not yet written.
    buf: Vec<u8>,
    /// File offset where the next flush writes.
    written: u64,
    /// File offset up to which the written records were synced or handed to the device's writeback.
    handed_back: u64,
}

/// Written but unsynced log bytes past which a flush starts their writeback without waiting
/// ([`VfsFile::start_writeback`]): a log written without syncs (durability `none`) then never holds more
/// than about this much for the next `sync` to write, so that sync (a checkpoint's, on the writer's path)
/// stays short.
pub const WRITEBACK_STEP: u64 = 4 << 20;

impl LogWriter {
    /// Creates (or truncates) the log at `path`: both header slots and [`LOG_GROWTH`] bytes of zeros, synced.
    /// The caller syncs the directory.
    pub fn create(
        vfs: &Arc<dyn Vfs>,
        path: &Path,
        header: LogHeader,
        stats: Arc<IoStats>,
    ) -> Result<LogWriter> {
        let log = Self::create_unsynced(vfs, path, header, stats)?;
        log.file.sync_data()?;
        log.stats.record_sync(FileKind::Wal);
        Ok(log)
    }

    /// [`create`](Self::create) without the `fdatasync`: the caller makes the file durable later (e.g. by
    /// [`sync_file`] from another thread) and before anything relies on it. Until then a power loss may
    /// leave the file missing, empty or with zero header slots — the state of a creation a crash
    /// interrupted, which recovery tells apart from damage while the log holds no durable record.
    pub fn create_unsynced(
        vfs: &Arc<dyn Vfs>,
        path: &Path,
        header: LogHeader,
        stats: Arc<IoStats>,
    ) -> Result<LogWriter> {
        let file = vfs.open(
            path,
            OpenOptions {
                create: true,
                truncate: true,
                ..OpenOptions::default()
            },
        )?;
        file.allocate(LOG_GROWTH)?;
        let mut head = vec![0u8; LOG_DATA_START as usize];
        for generation in 0..2 {
            let slot = Slot {
                generation,
                header,
                length: LOG_GROWTH,
            };
            let at = Slot::offset(generation) as usize;
            if let Some(dst) = head.get_mut(at..at + SLOT_LEN) {
                dst.copy_from_slice(&slot.encode());
            }
        }
        file.write_all_at(&head, 0)?;
        stats.record_write(FileKind::Wal, head.len());
        Ok(LogWriter {
            file,
            path: path.to_path_buf(),
            stats,
            slot: Slot {
                generation: 1,
                header,
                length: LOG_GROWTH,
            },
            buf: Vec::new(),
            written: LOG_DATA_START,
            handed_back: LOG_DATA_START,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The header the log was created with.
    pub fn header(&self) -> LogHeader {
        self.slot.header
    }

    /// Frames `payload` into the buffer (no I/O). A payload over [`MAX_LOG_RECORD`] is refused.
    pub fn append(&mut self, payload: &[u8]) -> Result<()> {
        if payload.len() > MAX_LOG_RECORD {
            return Err(Error::invalid(format!(
                "log record of {} bytes exceeds the maximum of {MAX_LOG_RECORD} bytes",
                payload.len()
            )));
        }
        self.buf.reserve(LOG_FRAME_OVERHEAD + payload.len());
        self.append_with(|b| b.extend_from_slice(payload))
    }

    /// [`append`](Self::append) of the payload `encode` appends to the vector it is given: the record is
    /// encoded in place in the write buffer (no copy of it). `encode` must only append.
    pub fn append_with(&mut self, encode: impl FnOnce(&mut Vec<u8>)) -> Result<()> {
        let start = self.buf.len();
        // The length and its sum are filled in once the payload's length is known.
        self.buf.extend_from_slice(&[0; 8]);
        encode(&mut self.buf);
        let len = self.buf.len() - start - 8;
        if len > MAX_LOG_RECORD {
            self.buf.truncate(start);
            return Err(Error::invalid(format!(
                "log record of {len} bytes exceeds the maximum of {MAX_LOG_RECORD} bytes"
            )));
        }
        let len_bytes = (len as u32).to_le_bytes();
        let sum = payload_sum(self.buf.get(start + 8..).unwrap_or_default());
        let [a, b, c, d] = len_bytes;
        let [e, f, g, h] = head_sum(len_bytes).to_le_bytes();
        if let Some(head) = self.buf.get_mut(start..start + 8) {
            head.copy_from_slice(&[a, b, c, d, e, f, g, h]);
        }
        self.buf.extend_from_slice(&sum.to_le_bytes());
        Ok(())
    }

    /// Bytes appended but not yet written.
    pub fn buffered_bytes(&self) -> usize {
        self.buf.len()
    }

    /// Bytes of framed records in the log, written or buffered (headers and preallocated space excluded).
    pub fn len(&self) -> u64 {
        self.written - LOG_DATA_START + self.buf.len() as u64
    }

    /// True if the log holds no record, written or buffered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes the buffered records (one write; first the file grows if they do not fit). On error the buffer
    /// is kept.
    pub fn flush(&mut self) -> Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let end = self.written + self.buf.len() as u64;
        if end > self.slot.length {
            let grown = Slot {
                generation: self.slot.generation + 1,
                length: grown_length(self.slot.length, end),
                ..self.slot
            };
            self.file.allocate(grown.length)?;
            self.file
                .write_all_at(&grown.encode(), Slot::offset(grown.generation))?;
            self.stats.record_write(FileKind::Wal, SLOT_LEN);
            self.slot = grown;
        }
        self.file.write_all_at(&self.buf, self.written)?;
        self.stats.record_write(FileKind::Wal, self.buf.len());
        self.written = end;
        self.buf.clear();
        if self.written - self.handed_back >= WRITEBACK_STEP {
            self.file
                .start_writeback(self.handed_back, self.written - self.handed_back);
            self.handed_back = self.written;
        }
        Ok(())
    }

    /// Flushes, then makes the log durable (`fdatasync`).
    pub fn sync(&mut self) -> Result<()> {
        self.flush()?;
        self.file.sync_data()?;
        self.stats.record_sync(FileKind::Wal);
        self.handed_back = self.written;
        Ok(())
    }
}

/// `fdatasync`s the existing log at `path` through a handle of its own: what any handle wrote to it so far
/// becomes durable (a thread other than the log's writer can make it durable while the writer goes on).
pub fn sync_file(vfs: &Arc<dyn Vfs>, path: &Path, stats: &IoStats) -> Result<()> {
    vfs.open(path, OpenOptions::default())?.sync_data()?;
    stats.record_sync(FileKind::Wal);
    Ok(())
}

/// The file length after a growth from `length` that must hold `end` bytes: at least double the length (by at
/// most [`LOG_MAX_GROWTH_STEP`]), so a log of L bytes grew O(log L + L / step) times, rounded up to a
/// multiple of [`LOG_GROWTH`].
fn grown_length(length: u64, end: u64) -> u64 {
    let doubled = length + length.min(LOG_MAX_GROWTH_STEP);
    end.max(doubled).div_ceil(LOG_GROWTH) * LOG_GROWTH
}

/// How [`recover_log`] treats damage that is not a torn tail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecoverMode {
    /// Damage is `Error::Corruption`.
    Strict,
    /// Stop at the damage and report what was dropped ([`LogRecovery::salvaged`]).
    Salvage,
}

/// Damage that [`RecoverMode::Salvage`] stepped over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Salvaged {
    /// Offset of the first damaged frame (records from here on were dropped).
    pub offset: u64,
    /// What was wrong.
    pub detail: String,
    /// Valid-looking frames found after the damage (dropped with it).
    pub later_frames: u64,
}

/// What [`recover_log`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecovery {
    pub header: LogHeader,
    /// Valid records passed to the callback.
    pub records: u64,
    /// File offset just after the last valid record.
    pub valid_end: u64,
    /// Offset and length of a torn tail (records written but never made durable), if any.
    pub torn: Option<(u64, u64)>,
    /// Damage dropped by [`RecoverMode::Salvage`].
    pub salvaged: Option<Salvaged>,
    /// A damaged header slot that is not the current one (harmless unless it was a growth torn by a crash,
    /// which this does not report): offset and reason.
    pub spare_slot_damage: Option<(u64, String)>,
}

/// Reads the header of the log at `path`. `Error::Corruption` if neither slot is valid (also for a file too
/// short to hold them, e.g. 0 bytes); `Error::Io` of kind `NotFound` if the file does not exist.
pub fn read_log_header(vfs: &Arc<dyn Vfs>, path: &Path, stats: &IoStats) -> Result<LogHeader> {
    let file = open_read(vfs, path)?;
    Ok(read_slots(&*file, path, stats)?.0.header)
}

fn open_read(vfs: &Arc<dyn Vfs>, path: &Path) -> Result<Box<dyn VfsFile>> {
    vfs.open(path, OpenOptions::READ_ONLY)
}

/// The current slot, and the other slot's damage (offset, reason) if it is invalid.
fn read_slots(
    file: &dyn VfsFile,
    path: &Path,
    stats: &IoStats,
) -> Result<(Slot, Option<(u64, String)>)> {
    let mut head = vec![0u8; LOG_DATA_START as usize];
    let n = read_exact_at(file, &mut head, 0)?;
    stats.record_read(FileKind::Wal, n);
    let slots: [std::result::Result<Slot, String>; 2] = [0u64, 1].map(|i| {
        let at = (i * SLOT_STRIDE) as usize;
        let s = Slot::decode(
            head.get(at..n.max(at).min(at + SLOT_LEN))
                .unwrap_or_default(),
        )?;
        if Slot::offset(s.generation) != i * SLOT_STRIDE {
            return Err(format!(
                "generation {} does not belong in slot {i}",
                s.generation
            ));
        }
        Ok(s)
    });
    let [first, second] = &slots;
    match (first, second) {
        (Ok(a), Ok(b)) => {
            if a.header != b.header {
                return Err(Error::corruption(
                    path,
                    0,
                    format!(
                        "WAL header slots disagree: {:?} and {:?}",
                        a.header, b.header
                    ),
                ));
            }
            Ok((if a.generation > b.generation { *a } else { *b }, None))
        }
        (Ok(s), Err(e)) => Ok((*s, Some((SLOT_STRIDE, e.clone())))),
        (Err(e), Ok(s)) => Ok((*s, Some((0, e.clone())))),
        (Err(a), Err(b)) => Err(Error::corruption(
            path,
            0,
            if n < LOG_DATA_START as usize {
                format!("WAL is {n} bytes, too short for its header: it was truncated")
            } else {
                format!("WAL header unreadable (slot 0: {a}; slot 1: {b})")
            },
        )),
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

// Windows are sliced only where `fill` made the bytes available (its contract).
#[allow(clippy::indexing_slicing)]
impl ChunkReader<'_> {
    /// Makes `need` bytes from file offset `at` (≥ `start`) available in the window, if the file has them.
    /// Returns how many bytes from `at` are available (< `need` only at the end of the file).
    fn fill(&mut self, at: u64, need: usize) -> Result<usize> {
        if at < self.start || at > self.start + self.window.len() as u64 {
            self.window.clear();
            self.start = at;
        }
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

    /// The frame at `at` if it is whole and both its sums verify: its payload's length.
    fn valid_frame(&mut self, at: u64) -> Result<Option<usize>> {
        if self.fill(at, 8)? < 8 {
            return Ok(None);
        }
        let len_bytes: [u8; 4] = self.bytes(at, 4).try_into().expect("4 bytes");
        let sum = u32::from_le_bytes(self.bytes(at + 4, 4).try_into().expect("4 bytes"));
        let len = u32::from_le_bytes(len_bytes) as usize;
        if head_sum(len_bytes) != sum || len > MAX_LOG_RECORD {
            return Ok(None);
        }
        let whole = LOG_FRAME_OVERHEAD + len;
        if self.fill(at, whole)? < whole {
            return Ok(None);
        }
        let frame = self.bytes(at, whole);
        let (Some(payload), Some(sum)) = (frame.get(8..8 + len), frame.get(8 + len..)) else {
            return Ok(None);
        };
        let stored = u32::from_le_bytes(sum.try_into().map_err(|_| frame_error())?);
        Ok((payload_sum(payload) == stored).then_some(len))
    }
}

/// Offset where the file's final run of zero bytes starts (`file_len` if its last byte is not zero).
fn zero_tail_start(file: &dyn VfsFile, stats: &IoStats, from: u64, file_len: u64) -> Result<u64> {
    let mut end = file_len;
    let mut buf = vec![0u8; RECOVERY_CHUNK];
    while end > from {
        let start = end.saturating_sub(RECOVERY_CHUNK as u64).max(from);
        let chunk = buf.get_mut(..(end - start) as usize).unwrap_or_default();
        let n = read_exact_at(file, chunk, start)?;
        stats.record_read(FileKind::Wal, n);
        if let Some(i) = chunk
            .get(..n)
            .unwrap_or_default()
            .iter()
            .rposition(|&b| b != 0)
        {
            return Ok(start + i as u64 + 1);
        }
        end = start;
    }
    Ok(from)
}

/// Reads the log at `path`, calling `on_record(payload, frame_offset)` for each valid record in order. Stops
/// at the end of the records, at a torn tail (reported), or at damage (`Error::Corruption` in
/// [`RecoverMode::Strict`], reported in [`RecoverMode::Salvage`]). An error from `on_record` aborts recovery
/// and is returned. Never writes. A missing file is `Error::Io` of kind `NotFound`.
pub fn recover_log(
    vfs: &Arc<dyn Vfs>,
    path: &Path,
    stats: Arc<IoStats>,
    mode: RecoverMode,
    on_record: &mut dyn FnMut(&[u8], u64) -> Result<()>,
) -> Result<LogRecovery> {
    let file = open_read(vfs, path)?;
    let (slot, spare_slot_damage) = read_slots(&*file, path, &stats)?;
    let file_len = file.len()?;
    let truncated = file_len < slot.length;
    if truncated && mode == RecoverMode::Strict {
        return Err(Error::corruption(
            path,
            file_len,
            format!(
                "WAL is {file_len} bytes but its header says {}: it was truncated",
                slot.length
            ),
        ));
    }
    let zeros_from = zero_tail_start(&*file, &stats, LOG_DATA_START, file_len)?;
    let mut reader = ChunkReader {
        file: &*file,
        stats: &stats,
        file_len,
        window: Vec::new(),
        start: LOG_DATA_START,
    };
    let mut rec = LogRecovery {
        header: slot.header,
        records: 0,
        valid_end: LOG_DATA_START,
        torn: None,
        salvaged: None,
        spare_slot_damage,
    };
    let mut pos = LOG_DATA_START;
    while pos < zeros_from {
        if let Some(len) = reader.valid_frame(pos)? {
            let frame = reader.bytes(pos, LOG_FRAME_OVERHEAD + len);
            let payload = frame.get(8..8 + len).unwrap_or_default();
            on_record(payload, pos)?;
            rec.records += 1;
            pos += (LOG_FRAME_OVERHEAD + len) as u64;
            rec.valid_end = pos;
            continue;
        }
        // A bad frame: torn if part of it, from a sector boundary on, is zeros through the end of the file (or
        // it runs past the end of a file whose growth was lost), damage otherwise.
        let avail = reader.fill(pos, 8)?;
        let head_ok = avail >= 8 && {
            let len_bytes: [u8; 4] = reader.bytes(pos, 4).try_into().expect("4 bytes");
            let sum = u32::from_le_bytes(reader.bytes(pos + 4, 4).try_into().expect("4 bytes"));
            head_sum(len_bytes) == sum && (u32::from_le_bytes(len_bytes) as usize) <= MAX_LOG_RECORD
        };
        let claimed_end = if head_ok {
            let len = u32::from_le_bytes(reader.bytes(pos, 4).try_into().expect("4 bytes"));
            pos + LOG_FRAME_OVERHEAD as u64 + len as u64
        } else {
            pos + 8
        };
        let zero_sectors_from = zeros_from.div_ceil(SECTOR) * SECTOR;
        let runs_past_end = head_ok && claimed_end > file_len && !truncated;
        if zero_sectors_from < claimed_end.min(file_len) || runs_past_end {
            rec.torn = Some((pos, file_len - pos));
            break;
        }
        let detail = if !head_ok {
            "frame header damaged (length checksum mismatch)".to_string()
        } else if claimed_end > file_len {
            format!("frame runs past the end of the file ({file_len} bytes)")
        } else {
            "record checksum mismatch".to_string()
        };
        let later = later_valid_frames(&mut reader, pos + 1, zeros_from)?;
        if mode == RecoverMode::Strict {
            return Err(Error::corruption(
                path,
                pos,
                format!(
                    "WAL record damaged: {detail}; {later} valid record(s) follow it, so this is not a torn \
                     tail (`strata repair` drops the damaged record and everything after it)"
                ),
            ));
        }
        rec.salvaged = Some(Salvaged {
            offset: pos,
            detail,
            later_frames: later,
        });
        break;
    }
    if truncated && rec.salvaged.is_none() {
        rec.salvaged = Some(Salvaged {
            offset: file_len,
            detail: format!(
                "the file was truncated to {file_len} of {} bytes",
                slot.length
            ),
            later_frames: 0,
        });
    }
    Ok(rec)
}

/// Counts the valid frames found by scanning every offset from `from` (up to [`LATER_FRAME_SEARCH`] bytes)
/// and following each one found.
fn later_valid_frames(reader: &mut ChunkReader<'_>, from: u64, end: u64) -> Result<u64> {
    let limit = end.min(from.saturating_add(LATER_FRAME_SEARCH));
    let mut at = from;
    let mut found = 0;
    while at < limit {
        // Most offsets fail at once: a frame's length must fit in what is left.
        let avail = reader.fill(at, 4)?;
        if avail < LOG_FRAME_OVERHEAD {
            break;
        }
        let len = u32::from_le_bytes(reader.bytes(at, 4).try_into().expect("4 bytes")) as usize;
        if len > avail - LOG_FRAME_OVERHEAD {
            at += 1;
            continue;
        }
        match reader.valid_frame(at)? {
            Some(len) => {
                found += 1;
                at += (LOG_FRAME_OVERHEAD + len) as u64;
            }
            None => at += 1,
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests;
