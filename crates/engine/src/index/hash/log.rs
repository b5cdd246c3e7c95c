//! The collecting log: a ring of 32 B records that makes a write durable before its D-bucket reaches PM.
//!
//! Record = `key | value | lsn << 2 | op | checksum` (8 B each; op 1 = put, 2 = delete; checksum = xxh3 of
//! the first 24 B seeded with the index's nonce and the log number). Record `lsn` lives at ring position
//! `lsn mod capacity`, so a record left over from an earlier lap (or from an earlier index in the same
//! region: other nonce) never validates at a later position. Appends are persisted one by one, so after a
//! crash the valid records from the durable tail on form an unbroken run; the first invalid one ends it.
//!
//! The tail word (in the superblock) is persisted lazily: only when the ring needs the space. Recovery
//! replays from it; records between it and the true tail were already applied, which replay tolerates.

use xxhash_rust::xxh3::xxh3_64_with_seed;

use super::layout::{Geometry, RECORD_BYTES, SB_TAIL0, corruption};
use crate::error::Result;
use crate::storage::pm::Pm;

const OP_PUT: u64 = 1;
const OP_DELETE: u64 = 2;
/// Largest log position (62 bits, so `lsn << 2 | op` fits a word).
const MAX_LSN: u64 = (1 << 62) - 1;
/// Records read per PM read during a scan.
const SCAN_BATCH: u64 = 128;

/// One replayable record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    pub lsn: u64,
    pub key: u64,
    /// `None` = delete.
    pub value: Option<u64>,
}

/// A collecting log's geometry and DRAM cursor.
#[derive(Debug, Clone)]
pub struct Log {
    base: u64,
    capacity: u64,
    tail_word: u64,
    seed: u64,
    /// Position of the next record.
    pub head: u64,
    /// The persisted tail: records below it may be overwritten.
    pub durable_tail: u64,
}

impl Log {
    /// Log `i` of geometry `g`, empty at position 0 (not yet written to PM).
    pub fn new(g: &Geometry, i: u64) -> Log {
        Log {
            base: g.log_base(i),
            capacity: g.log_records(),
            tail_word: SB_TAIL0 + i * 64,
            seed: g.nonce ^ i.rotate_left(48) ^ 0x4C4F_47AA,
            head: 0,
            durable_tail: 0,
        }
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    pub fn tail_word(&self) -> u64 {
        self.tail_word
    }

    /// True when an append would not overwrite a record at or after the durable tail.
    pub fn has_room(&self) -> bool {
        self.head - self.durable_tail < self.capacity
    }

    fn offset(&self, lsn: u64) -> u64 {
        self.base + (lsn % self.capacity) * RECORD_BYTES
    }

    fn encode(&self, r: &Record) -> [u8; RECORD_BYTES as usize] {
        let op = if r.value.is_some() { OP_PUT } else { OP_DELETE };
        let mut b = [0u8; RECORD_BYTES as usize];
        b[..8].copy_from_slice(&r.key.to_le_bytes());
        b[8..16].copy_from_slice(&r.value.unwrap_or(0).to_le_bytes());
        b[16..24].copy_from_slice(&(r.lsn << 2 | op).to_le_bytes());
        let check = xxh3_64_with_seed(&b[..24], self.seed);
        b[24..].copy_from_slice(&check.to_le_bytes());
        b
    }

    fn decode(&self, b: &[u8], lsn: u64) -> Option<Record> {
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[i * 8..i * 8 + 8]);
            u64::from_le_bytes(w)
        };
        if word(3) != xxh3_64_with_seed(&b[..24], self.seed) || word(2) >> 2 != lsn {
            return None;
        }
        let value = match word(2) & 3 {
            OP_PUT => Some(word(1)),
            OP_DELETE => None,
            _ => return None,
        };
        Some(Record {
            lsn,
            key: word(0),
            value,
        })
    }

    /// Appends and persists a record (the caller checked [`has_room`](Self::has_room)); returns its
    /// position. Once this returns, the write is durable: the acknowledgement point.
    pub fn append<P: Pm>(&mut self, pm: &P, key: u64, value: Option<u64>) -> Result<u64> {
        let lsn = self.head;
        let off = self.offset(lsn);
        pm.write(off, &self.encode(&Record { lsn, key, value }))?;
        pm.persist(off, RECORD_BYTES)?;
        self.head += 1;
        Ok(lsn)
    }

    /// Persists `tail` as the new durable tail (a no-op unless it moves forward).
    pub fn persist_tail<P: Pm>(&mut self, pm: &P, tail: u64) -> Result<()> {
        if tail > self.durable_tail {
            pm.store_u64_atomic(self.tail_word, tail)?;
            pm.persist(self.tail_word, 8)?;
            self.durable_tail = tail;
        }
        Ok(())
    }

    /// Reads the durable tail and the unbroken run of valid records after it; sets `head` past the run.
    pub fn scan<P: Pm>(&mut self, pm: &P) -> Result<Vec<Record>> {
        let tail = pm.load_u64_atomic(self.tail_word)?;
        if tail > MAX_LSN - self.capacity {
            return Err(corruption(
                self.tail_word,
                format!("log tail {tail} out of range"),
            ));
        }
        self.durable_tail = tail;
        let mut out = Vec::new();
        let mut lsn = tail;
        let end = tail + self.capacity;
        let mut buf = vec![0u8; (SCAN_BATCH * RECORD_BYTES) as usize];
        'scan: while lsn < end {
            // A batch never wraps around the ring's end.
            let n = SCAN_BATCH
                .min(end - lsn)
                .min(self.capacity - lsn % self.capacity);
            let bytes = &mut buf[..(n * RECORD_BYTES) as usize];
            pm.read(self.offset(lsn), bytes)?;
            for rec in bytes.chunks_exact(RECORD_BYTES as usize) {
                match self.decode(rec, lsn) {
                    Some(r) => out.push(r),
                    None => break 'scan,
                }
                lsn += 1;
            }
        }
        self.head = lsn;
        Ok(out)
    }
}
