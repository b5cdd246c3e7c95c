//! [`ValueLog`]: the out-of-line store of values longer than 8 B — a ring of variable-length records in PM,
//! appended in order and cleaned from its tail.
//!
//! ## Format (inside its window; little-endian)
//! * Control page `[0, 4096)`: the **tail word** at 0 (the first log position recovery scans from).
//! * Ring `[4096, 4096 + capacity)`: record at log position `lsn` (bytes, a multiple of 16, growing forever)
//!   lives at ring offset `lsn mod capacity`. A record is a 16 B header — `key`, then
//!   `len (bits 0..16) | kind (16..24) | check (24..64)` — and the value padded to 16 B. `kind` 1 = value,
//!   2 = pad (fills the ring's end when the next record would not fit, so that records never wrap).
//!   `check` = 40 bits of xxh3 over the header (check bits zero) and body, seeded with the log's seed and
//!   `lsn`: a record of an earlier lap, another log or index never validates where it lies now.
//! * A **handle** (what the index stores as the key's value) is `(lsn / 16) << 9 | len`.
//!
//! ## Invariants
//! * Records are appended in order and each is persisted before the write that refers to it is logged
//!   (the caller's index write is the acknowledgement), so after a crash the valid records from the durable
//!   tail on form an unbroken run: recovery scans it to find the head. A torn last record ends the run.
//! * Nothing at or after the durable tail is overwritten: an append needs free space measured from it.
//!   Cleaning (the owner's, which knows which records are live) copies the live records of a stretch at the
//!   tail to the head, repoints their keys durably, then persists the tail past the stretch.
//! * Every handle the index holds is in `[tail, head)`; reading one checks position, key, length, kind and
//!   checksum (`Error::Corruption` naming the value log and the offset otherwise).
//!
//! Cost: an append is one write of `16 + len` bytes (rounded to 16) and one persist; a read one PM read of
//! the same size (one or two XPLines); recovery reads the ring from the tail to the head once.

use xxhash_rust::xxh3::xxh3_64_with_seed;

use super::super::format::{corruption_in, le};
use crate::error::{Error, Result};
use crate::storage::pm::Pm;

/// Longest value, in bytes.
pub const MAX_VALUE: usize = 256;
/// Bytes of a record header.
const HEADER: u64 = 16;
/// Alignment of records (and of log positions).
const ALIGN: u64 = 16;
/// Longest record.
pub const MAX_RECORD: u64 = HEADER + MAX_VALUE as u64;
/// Bytes of the control page in front of the ring.
pub const CONTROL_BYTES: u64 = 4096;
/// Largest log position (handles keep `lsn / 16` in 55 bits).
const MAX_LSN: u64 = 1 << 58;
const KIND_VALUE: u64 = 1;
const KIND_PAD: u64 = 2;
const CHECK_BITS: u64 = 40;

/// Bytes of the record holding a value of `len` bytes.
pub fn record_bytes(len: usize) -> u64 {
    HEADER + (len as u64).div_ceil(ALIGN) * ALIGN
}

/// The handle of the value of `len` bytes at log position `lsn`.
pub fn handle(lsn: u64, len: usize) -> u64 {
    (lsn / ALIGN) << 9 | len as u64
}

/// `(lsn, len)` of a handle.
pub fn unpack(handle: u64) -> (u64, usize) {
    ((handle >> 9) * ALIGN, (handle & 0x1FF) as usize)
}

fn corruption(offset: u64, detail: impl Into<String>) -> Error {
    corruption_in("<pm value log>", offset, detail)
}

/// A record found at the tail (for cleaning).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TailRecord {
    /// A value record: its key, handle and bytes.
    Value {
        key: u64,
        handle: u64,
        bytes: Vec<u8>,
    },
    /// The pad at a ring end.
    Pad,
}

/// The value log in window `pm` (module docs).
#[derive(Debug)]
pub struct ValueLog<Q> {
    pm: Q,
    capacity: u64,
    seed: u64,
    /// Position of the next record.
    head: u64,
    /// The durable tail: records below it are dead or were copied (and may be overwritten).
    tail: u64,
}

impl<Q: Pm> ValueLog<Q> {
    fn capacity_of(pm: &Q) -> Result<u64> {
        let len = pm.len();
        if len < CONTROL_BYTES + 4 * MAX_RECORD.next_multiple_of(4096) || !len.is_multiple_of(4096)
        {
            return Err(Error::invalid(format!(
                "value log of {len} bytes (a multiple of 4 KiB, at least 20 KiB)"
            )));
        }
        Ok(len - CONTROL_BYTES)
    }

    /// An empty log in `pm` (its tail word persisted as 0).
    pub fn create(pm: Q, seed: u64) -> Result<Self> {
        let capacity = Self::capacity_of(&pm)?;
        pm.store_u64_atomic(0, 0)?;
        pm.persist(0, 8)?;
        Ok(ValueLog {
            pm,
            capacity,
            seed,
            head: 0,
            tail: 0,
        })
    }

    /// The log in `pm`: reads the durable tail and scans the unbroken run of records after it. Also returns
    /// where each record of the run starts (for [`truncate`](Self::truncate)).
    pub fn open(pm: Q, seed: u64) -> Result<(Self, Vec<u64>)> {
        let capacity = Self::capacity_of(&pm)?;
        let tail = pm.load_u64_atomic(0)?;
        if !tail.is_multiple_of(ALIGN) || tail > MAX_LSN - capacity {
            return Err(corruption(0, format!("value log tail {tail} out of range")));
        }
        let mut log = ValueLog {
            pm,
            capacity,
            seed,
            head: tail,
            tail,
        };
        let mut starts = Vec::new();
        let end = tail + capacity;
        while log.head < end {
            match log.decode(log.head, end - log.head)? {
                Some((_, size)) => {
                    starts.push(log.head);
                    log.head += size;
                }
                None => break,
            }
        }
        Ok((log, starts))
    }

    /// Drops the records from `head` on (records of the run nothing names: a crash cut short the writes
    /// that would have named them). Their space is appended over next.
    pub fn truncate(&mut self, head: u64) {
        debug_assert!(head >= self.tail && head <= self.head);
        self.head = head;
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }
    pub fn head(&self) -> u64 {
        self.head
    }
    pub fn tail(&self) -> u64 {
        self.tail
    }
    /// Bytes between the durable tail and the head (live, dead and pad records).
    pub fn used(&self) -> u64 {
        self.head - self.tail
    }
    /// Bytes an append may use without reaching the durable tail.
    pub fn free(&self) -> u64 {
        self.capacity - self.used()
    }

    fn ring(&self, lsn: u64) -> u64 {
        CONTROL_BYTES + lsn % self.capacity
    }

    /// Bytes an append of a `len`-byte value takes, a pad at the ring's end included.
    pub fn cost(&self, len: usize) -> u64 {
        let size = record_bytes(len);
        let left = self.capacity - self.head % self.capacity;
        if size > left { size + left } else { size }
    }

    fn check(&self, rec: &[u8], lsn: u64) -> u64 {
        xxh3_64_with_seed(rec, self.seed ^ lsn.wrapping_mul(0x9E37_79B9_7F4A_7C15))
            & ((1 << CHECK_BITS) - 1)
    }

    fn encode(&self, key: u64, kind: u64, body: &[u8], lsn: u64) -> Vec<u8> {
        let mut rec = vec![0u8; record_bytes(body.len()) as usize];
        rec[..8].copy_from_slice(&key.to_le_bytes());
        let word = body.len() as u64 | kind << 16;
        rec[8..16].copy_from_slice(&word.to_le_bytes());
        rec[16..16 + body.len()].copy_from_slice(body);
        let check = self.check(&rec, lsn);
        rec[8..16].copy_from_slice(&(word | check << 24).to_le_bytes());
        rec
    }

    /// The valid record at `lsn` (at most `room` bytes long) and its size in the log (a pad's runs to the
    /// ring's end), or `None` when none validates there.
    fn decode(&self, lsn: u64, room: u64) -> Result<Option<(TailRecord, u64)>> {
        let at = self.ring(lsn);
        let left = self.capacity - lsn % self.capacity;
        let mut head = [0u8; HEADER as usize];
        self.pm.read(at, &mut head)?;
        let word = le(&head[8..]);
        let (len, kind) = ((word & 0xFFFF) as usize, word >> 16 & 0xFF);
        let size = record_bytes(len);
        if len > MAX_VALUE || size > left.min(room) || !matches!(kind, KIND_VALUE | KIND_PAD) {
            return Ok(None);
        }
        let mut rec = vec![0u8; size as usize];
        self.pm.read(at, &mut rec)?;
        rec[8..16].copy_from_slice(&(word & 0xFF_FFFF).to_le_bytes());
        if word >> 24 != self.check(&rec, lsn) {
            return Ok(None);
        }
        Ok(Some(if kind == KIND_PAD {
            (TailRecord::Pad, left.min(room))
        } else {
            let key = le(&rec);
            let bytes = rec[16..16 + len].to_vec();
            (
                TailRecord::Value {
                    key,
                    handle: handle(lsn, len),
                    bytes,
                },
                size,
            )
        }))
    }

    /// Appends and persists the value of `key`; returns its handle. The caller made room:
    /// `cost(value.len()) <= free()`.
    pub fn append(&mut self, key: u64, value: &[u8]) -> Result<u64> {
        if value.len() > MAX_VALUE {
            return Err(Error::invalid(format!(
                "a value of {} bytes (at most {MAX_VALUE})",
                value.len()
            )));
        }
        if self.cost(value.len()) > self.free() || self.head + self.capacity >= MAX_LSN {
            return Err(Error::ResourceExhausted(format!(
                "value log full ({} of {} bytes in use)",
                self.used(),
                self.capacity
            )));
        }
        let size = record_bytes(value.len());
        let left = self.capacity - self.head % self.capacity;
        if size > left {
            // A pad to the ring's end (a header at least: positions and the capacity are multiples of 16).
            let pad = self.encode(0, KIND_PAD, &[], self.head);
            let at = self.ring(self.head);
            self.pm.write(at, &pad)?;
            self.pm.persist(at, pad.len() as u64)?;
            self.head += left;
        }
        let lsn = self.head;
        let rec = self.encode(key, KIND_VALUE, value, lsn);
        let at = self.ring(lsn);
        self.pm.write(at, &rec)?;
        self.pm.persist(at, size)?;
        self.head += size;
        Ok(handle(lsn, value.len()))
    }

    /// The value `handle` names, checked to be `key`'s.
    pub fn read(&self, key: u64, handle: u64, out: &mut Vec<u8>) -> Result<()> {
        let (lsn, len) = unpack(handle);
        let size = record_bytes(len);
        if lsn < self.tail || lsn + size > self.head || len > MAX_VALUE {
            return Err(corruption(
                self.ring(lsn.min(self.head)),
                format!(
                    "key {key:#x} names value {handle:#x} outside the log's live range {}..{}",
                    self.tail, self.head
                ),
            ));
        }
        match self.decode(lsn, size)? {
            Some((TailRecord::Value { key: k, bytes, .. }, _))
                if k == key && bytes.len() == len =>
            {
                out.clear();
                out.extend_from_slice(&bytes);
                Ok(())
            }
            _ => Err(corruption(
                self.ring(lsn),
                format!("value {handle:#x} of key {key:#x} does not validate"),
            )),
        }
    }

    /// The record at the cleaning position and its size (`None` once the tail reached the head).
    pub fn peek(&self, lsn: u64) -> Result<Option<(TailRecord, u64)>> {
        if lsn >= self.head {
            return Ok(None);
        }
        match self.decode(lsn, self.head - lsn)? {
            Some(r) => Ok(Some(r)),
            None => Err(corruption(
                self.ring(lsn),
                format!(
                    "value log record at {lsn} (before the head {}) does not validate",
                    self.head
                ),
            )),
        }
    }

    /// Moves the tail to `tail` (everything before it dead or copied, the copies' keys repointed durably)
    /// and persists it.
    pub fn advance_tail(&mut self, tail: u64) -> Result<()> {
        debug_assert!(tail >= self.tail && tail <= self.head);
        self.pm.store_u64_atomic(0, tail)?;
        self.pm.persist(0, 8)?;
        self.tail = tail;
        Ok(())
    }

    /// Gives the window back.
    pub fn into_pm(self) -> Q {
        self.pm
    }
}
