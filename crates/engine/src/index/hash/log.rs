//! A collecting log: a ring of 32 B records that makes a write durable before its D-bucket reaches PM.
//!
//! Record = `key | value | seq << 2 | op | checksum` (8 B each; op 1 = put, 2 = delete; `seq` = the bucket's
//! sequence number of the write; checksum = xxh3 of the first 24 B seeded with the generation's log seed
//! and the record's position `lsn`). Record `lsn` lives at ring position `lsn mod capacity`, so a record of
//! an earlier lap, another log, generation or index never validates where it lies now. Each log is written
//! by one thread at a time (its mutex), appends in order and persists each before the write is
//! acknowledged, so after a crash the valid records from the durable tail on form an unbroken run; the first
//! invalid one ends it.
//!
//! Under eADR an append is a few cached stores and a fence: consecutive appends fill whole lines and whole
//! XPLines, which leave the CPU cache (and reach the media) as full XPLines. Under ADR each append is also
//! written back (`clwb`), and the XPBuffer combines the partial writes of the XPLine being filled.
//!
//! The tail word (in the generation header) is persisted only when the ring needs space (7/8 full): the
//! caller first flushes every D-bucket that holds one of the oldest 1/64 of the records (`ring` tells which
//! bucket each record went to), then advances the tail by that step. Recovery replays from it and skips records already in their chain.

use xxhash_rust::xxh3::xxh3_64_with_seed;

use super::format::le;
use super::layout::{Gen, MAX_SEQ, RECORD_BYTES, corruption};
use crate::error::Result;
use crate::storage::pm::Pm;

const OP_PUT: u64 = 1;
const OP_DELETE: u64 = 2;
/// Largest log position.
const MAX_LSN: u64 = 1 << 62;
/// Records read per PM read during a scan.
const SCAN_BATCH: u64 = 128;

/// One replayable record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    pub lsn: u64,
    pub key: u64,
    /// `None` = delete.
    pub value: Option<u64>,
    pub seq: u64,
}

/// Event counters of the writes done while holding a log (DRAM only).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogStats {
    pub appends: u64,
    pub flushes: u64,
    pub forced_flushes: u64,
    pub partial_flushes: u64,
    pub compactions: u64,
    pub overflow_chunks: u64,
    pub tail_persists: u64,
    /// Deletes done in place (a tombstone bit in a commit word, no record).
    pub in_place_deletes: u64,
}

impl LogStats {
    /// Adds `o`'s counts to these.
    pub fn add(&mut self, o: &LogStats) {
        self.appends += o.appends;
        self.flushes += o.flushes;
        self.forced_flushes += o.forced_flushes;
        self.partial_flushes += o.partial_flushes;
        self.compactions += o.compactions;
        self.overflow_chunks += o.overflow_chunks;
        self.tail_persists += o.tail_persists;
        self.in_place_deletes += o.in_place_deletes;
    }
}

/// A collecting log's geometry and DRAM cursor.
#[derive(Debug)]
pub struct Log {
    pub id: u64,
    base: u64,
    capacity: u64,
    tail_word: u64,
    seed: u64,
    /// Position of the next record.
    pub head: u64,
    /// The persisted tail: records below it may be overwritten.
    pub durable_tail: u64,
    /// Bucket of the record at each ring position (for freeing space).
    pub ring: Vec<u32>,
    pub stats: LogStats,
    /// Keys added through this log since its writer last checked the table's fullness (`HashIndex::write`).
    pub added_since_check: u64,
}

impl Log {
    /// Log `i` of generation `g`, empty at position 0 (its tail word is written by the generation's maker).
    pub fn new(g: &Gen, nonce: u64, i: u64) -> Log {
        Log {
            id: i,
            base: g.log_base(i),
            capacity: g.log_records,
            tail_word: g.tail_word(i),
            seed: g.log_seed(nonce, i),
            head: 0,
            durable_tail: 0,
            ring: vec![0; g.log_records as usize],
            stats: LogStats::default(),
            added_since_check: 0,
        }
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// True when an append would not overwrite a record at or after the durable tail.
    pub fn has_room(&self) -> bool {
        self.head - self.durable_tail < self.capacity
    }

    fn offset(&self, lsn: u64) -> u64 {
        self.base + (lsn % self.capacity) * RECORD_BYTES
    }

    fn check(&self, b: &[u8], lsn: u64) -> u64 {
        xxh3_64_with_seed(
            &b[..24],
            self.seed ^ lsn.wrapping_mul(0x9E37_79B9_7F4A_7C15),
        )
    }

    fn encode(&self, key: u64, value: Option<u64>, seq: u64, lsn: u64) -> [u8; 32] {
        let op = if value.is_some() { OP_PUT } else { OP_DELETE };
        let mut b = [0u8; RECORD_BYTES as usize];
        b[..8].copy_from_slice(&key.to_le_bytes());
        b[8..16].copy_from_slice(&value.unwrap_or(0).to_le_bytes());
        b[16..24].copy_from_slice(&(seq << 2 | op).to_le_bytes());
        let check = self.check(&b, lsn);
        b[24..].copy_from_slice(&check.to_le_bytes());
        b
    }

    fn decode(&self, b: &[u8], lsn: u64) -> Option<Record> {
        if le(&b[24..]) != self.check(b, lsn) {
            return None;
        }
        let value = match le(&b[16..]) & 3 {
            OP_PUT => Some(le(&b[8..])),
            OP_DELETE => None,
            _ => return None,
        };
        Some(Record {
            lsn,
            key: le(b),
            value,
            seq: le(&b[16..]) >> 2,
        })
    }

    /// Appends and persists a record of bucket `bucket` (the caller checked [`has_room`](Self::has_room));
    /// returns its position. Once this returns, the write is durable: the acknowledgement point.
    pub fn append<P: Pm>(
        &mut self,
        pm: &P,
        key: u64,
        value: Option<u64>,
        seq: u64,
        bucket: u64,
    ) -> Result<u64> {
        debug_assert!(seq <= MAX_SEQ && self.has_room());
        let lsn = self.head;
        let off = self.offset(lsn);
        pm.write(off, &self.encode(key, value, seq, lsn))?;
        pm.persist(off, RECORD_BYTES)?;
        self.ring[(lsn % self.capacity) as usize] = bucket as u32;
        self.head += 1;
        self.stats.appends += 1;
        Ok(lsn)
    }

    /// Persists `tail` as the new durable tail (a no-op unless it moves forward).
    pub fn persist_tail<P: Pm>(&mut self, pm: &P, tail: u64) -> Result<()> {
        if tail > self.durable_tail {
            pm.store_u64_atomic(self.tail_word, tail)?;
            pm.persist(self.tail_word, 8)?;
            self.durable_tail = tail;
            self.stats.tail_persists += 1;
        }
        Ok(())
    }

    /// Reads the durable tail and the unbroken run of valid records after it; sets `head` past the run and
    /// `ring` from `bucket_of(key)`.
    pub fn scan<P: Pm>(&mut self, pm: &P, bucket_of: impl Fn(u64) -> u64) -> Result<Vec<Record>> {
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
                    Some(r) if r.seq <= MAX_SEQ => {
                        self.ring[(lsn % self.capacity) as usize] = bucket_of(r.key) as u32;
                        out.push(r);
                    }
                    _ => break 'scan,
                }
                lsn += 1;
            }
        }
        self.head = lsn;
        Ok(out)
    }
}
