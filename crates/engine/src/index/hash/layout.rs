//! The PM layout: constants, offsets, the superblock and table header codecs, the hash and fingerprint of
//! a key, and the bit layout of a P-bucket's meta line (valid + tombstone bits, committed by one 8 B store).

use xxhash_rust::xxh3::xxh3_64_with_seed;

use super::format::{corruption_in, le, read_superblock, write_superblock};
use crate::error::{Error, Result};
use crate::storage::pm::{CACHE_LINE, Pm, XPLINE};

/// Bytes of a P-bucket: 16 XPLines.
pub const BUCKET_BYTES: u64 = 4096;
/// Slots (16 B each: 8 B key + 8 B value) in a chunk, one XPLine; also the capacity of a D-bucket.
pub const CHUNK_SLOTS: usize = 16;
/// Chunks (XPLines) in a P-bucket.
pub const CHUNKS: usize = 16;
/// Slots in a P-bucket.
pub const SLOTS: usize = CHUNK_SLOTS * CHUNKS;
/// Bytes of a slot.
pub const SLOT_BYTES: u64 = 16;
/// Bytes of a P-bucket's meta line (8 commit words).
pub const META_BYTES: u64 = CACHE_LINE;
/// Bytes of the superblock (one page, so that the logs and tables start 4 KiB-aligned).
pub const SUPER_BYTES: u64 = 4096;
/// Bytes of a log record.
pub const RECORD_BYTES: u64 = 32;
/// Most collecting logs the superblock has tail words for.
pub const MAX_LOGS: u64 = 62;
/// Largest table: 2^40 buckets.
pub const MAX_LOG2_BUCKETS: u64 = 40;
/// Smallest and largest log, in 64 B lines.
pub const MIN_LOG_LINES: u64 = 8;
pub const MAX_LOG_LINES: u64 = 1 << 32;

pub const MAGIC: u64 = u64::from_le_bytes(*b"STRHASH1");
pub const TABLE_MAGIC: u64 = u64::from_le_bytes(*b"STRHTAB1");
pub const VERSION: u64 = 1;

// Superblock fields (byte offsets). Bytes 0..56 are immutable and covered by the checksum at 56.
pub const SB_MAGIC: u64 = 0;
pub const SB_VERSION: u64 = 8;
pub const SB_BUCKET_BYTES: u64 = 16;
pub const SB_LOGS: u64 = 24;
pub const SB_LOG_LINES: u64 = 32;
pub const SB_NONCE: u64 = 40;
pub const SB_REGION_LEN: u64 = 48;
pub const SB_CHECK: u64 = 56;
/// The root word: offset of the current table (an 8 B atomic store switches tables).
pub const SB_ROOT: u64 = 64;
/// Tail word of log `i` (first record that may not have reached a P-bucket) at `SB_TAIL0 + 64 i`.
pub const SB_TAIL0: u64 = 128;

/// Damage in the region, reported under the name `<pm hash index>`.
pub fn corruption(offset: u64, detail: impl Into<String>) -> Error {
    corruption_in("<pm hash index>", offset, detail)
}

/// 64-bit hash of a key: the low bits pick the bucket, the top byte is the fingerprint.
#[inline]
pub fn hash(key: u64) -> u64 {
    xxh3_64_with_seed(&key.to_le_bytes(), 0x5EED_4A54)
}

#[inline]
pub fn fingerprint(h: u64) -> u8 {
    (h >> 56) as u8
}

pub fn round_up(n: u64, to: u64) -> u64 {
    n.div_ceil(to) * to
}

/// The immutable geometry recorded in the superblock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    pub logs: u64,
    pub log_lines: u64,
    pub nonce: u64,
    pub region_len: u64,
}

impl Geometry {
    /// Bytes of one log, rounded to 4 KiB.
    pub fn log_span(&self) -> u64 {
        round_up(self.log_lines * CACHE_LINE, 4096)
    }
    pub fn log_base(&self, i: u64) -> u64 {
        SUPER_BYTES + i * self.log_span()
    }
    /// Records a log holds.
    pub fn log_records(&self) -> u64 {
        self.log_lines * CACHE_LINE / RECORD_BYTES
    }
    /// First byte of the table heap.
    pub fn heap_start(&self) -> u64 {
        SUPER_BYTES + self.logs * self.log_span()
    }

    /// Writes the superblock's immutable part and its checksum (not persisted).
    pub fn write<P: Pm>(&self, pm: &P) -> Result<()> {
        write_superblock(
            pm,
            SB_CHECK,
            &[
                (SB_MAGIC, MAGIC),
                (SB_VERSION, VERSION),
                (SB_BUCKET_BYTES, BUCKET_BYTES),
                (SB_LOGS, self.logs),
                (SB_LOG_LINES, self.log_lines),
                (SB_NONCE, self.nonce),
                (SB_REGION_LEN, self.region_len),
            ],
        )
    }

    /// Reads and validates the superblock of `pm`.
    pub fn read<P: Pm>(pm: &P) -> Result<Geometry> {
        let b = read_superblock(pm, SUPER_BYTES, SB_CHECK, MAGIC, |at, what| {
            corruption(at, what)
        })?;
        let word = |at: u64| le(&b[at as usize..]);
        if word(SB_VERSION) != VERSION || word(SB_BUCKET_BYTES) != BUCKET_BYTES {
            return Err(Error::Incompatible(format!(
                "hash index version {} with {} B buckets, expected {VERSION} and {BUCKET_BYTES}",
                word(SB_VERSION),
                word(SB_BUCKET_BYTES)
            )));
        }
        let g = Geometry {
            logs: word(SB_LOGS),
            log_lines: word(SB_LOG_LINES),
            nonce: word(SB_NONCE),
            region_len: word(SB_REGION_LEN),
        };
        g.validate(pm.len())
            .map_err(|e| corruption(0, e.to_string()))?;
        Ok(g)
    }

    /// `InvalidArgument` unless the geometry is in range and its fixed areas fit a region of `len` bytes.
    pub fn validate(&self, len: u64) -> Result<()> {
        if !(1..=MAX_LOGS).contains(&self.logs) {
            return Err(Error::invalid(format!(
                "{} logs (1..={MAX_LOGS})",
                self.logs
            )));
        }
        if !(MIN_LOG_LINES..=MAX_LOG_LINES).contains(&self.log_lines) {
            return Err(Error::invalid(format!(
                "log of {} lines ({MIN_LOG_LINES}..={MAX_LOG_LINES})",
                self.log_lines
            )));
        }
        if self.region_len != len || self.heap_start() >= len {
            return Err(Error::invalid(format!(
                "region of {len} bytes (recorded {}) has no room for a table after {} bytes of superblock and logs",
                self.region_len,
                self.heap_start()
            )));
        }
        Ok(())
    }
}

/// A table: `header (256 B) | meta lines (64 B per bucket) | pad to 4 KiB | P-buckets (4 KiB each)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Table {
    pub off: u64,
    pub log2: u64,
}

impl Table {
    pub fn buckets(&self) -> u64 {
        1 << self.log2
    }
    pub fn mask(&self) -> u64 {
        self.buckets() - 1
    }
    pub fn meta_span(log2: u64) -> u64 {
        round_up(XPLINE + (1u64 << log2) * META_BYTES, 4096)
    }
    /// Bytes of a table of 2^log2 buckets.
    pub fn bytes(log2: u64) -> u64 {
        Self::meta_span(log2) + (1u64 << log2) * BUCKET_BYTES
    }
    pub fn end(&self) -> u64 {
        self.off + Self::bytes(self.log2)
    }
    pub fn meta_off(&self, b: u64) -> u64 {
        self.off + XPLINE + b * META_BYTES
    }
    pub fn bucket_off(&self, b: u64) -> u64 {
        self.off + Self::meta_span(self.log2) + b * BUCKET_BYTES
    }
    pub fn slot_off(&self, b: u64, slot: usize) -> u64 {
        self.bucket_off(b) + slot as u64 * SLOT_BYTES
    }

    fn header(&self, nonce: u64) -> [u8; 24] {
        let mut h = [0u8; 24];
        h[..8].copy_from_slice(&TABLE_MAGIC.to_le_bytes());
        h[8..16].copy_from_slice(&self.log2.to_le_bytes());
        let check = xxh3_64_with_seed(&h[..16], nonce ^ self.off);
        h[16..].copy_from_slice(&check.to_le_bytes());
        h
    }

    /// Writes the header (not persisted).
    pub fn write_header<P: Pm>(&self, pm: &P, nonce: u64) -> Result<()> {
        pm.write(self.off, &self.header(nonce))
    }

    /// The table the root word `root` points to, validated against the geometry and region.
    pub fn read<P: Pm>(pm: &P, g: &Geometry, root: u64) -> Result<Table> {
        if root < g.heap_start() || !root.is_multiple_of(4096) || root >= pm.len() {
            return Err(corruption(
                SB_ROOT,
                format!("table root {root} out of range"),
            ));
        }
        let mut h = [0u8; 24];
        pm.read(root, &mut h)?;
        let mut w = [0u8; 8];
        w.copy_from_slice(&h[8..16]);
        let log2 = u64::from_le_bytes(w);
        if log2 > MAX_LOG2_BUCKETS {
            return Err(corruption(root, format!("table of 2^{log2} buckets")));
        }
        let t = Table { off: root, log2 };
        if t.header(g.nonce) != h {
            return Err(corruption(root, "bad table header magic or checksum"));
        }
        if t.end() > pm.len() {
            return Err(corruption(
                root,
                format!("table of 2^{log2} buckets ends past the region"),
            ));
        }
        Ok(t)
    }
}

// Meta line: word w describes chunks 2w and 2w+1; per chunk 16 valid bits then 16 tombstone bits.

/// Index of the meta word and the bit shift of chunk `c`'s valid bits.
#[inline]
pub fn meta_pos(c: usize) -> (usize, u32) {
    (c / 2, (c % 2) as u32 * 32)
}

/// Valid and tombstone bits of chunk `c` in the meta words.
#[inline]
pub fn chunk_bits(meta: &[u64; 8], c: usize) -> (u16, u16) {
    let (w, sh) = meta_pos(c);
    ((meta[w] >> sh) as u16, (meta[w] >> (sh + 16)) as u16)
}

/// `meta[w]` with chunk `c`'s bits set to `valid` and `tomb`.
#[inline]
pub fn with_chunk_bits(meta: &[u64; 8], c: usize, valid: u16, tomb: u16) -> u64 {
    let (w, sh) = meta_pos(c);
    let bits = (valid as u64 | (tomb as u64) << 16) << sh;
    (meta[w] & !(0xFFFF_FFFFu64 << sh)) | bits
}

/// Checks a meta line read from PM: in each chunk the valid slots are a prefix and tombstones are valid;
/// the slots in use are a prefix of the P-bucket (every chunk before the last one in use is full).
/// Returns the slots in use.
pub fn validate_meta(meta: &[u64; 8], at: u64) -> Result<usize> {
    let mut fill = 0;
    for c in 0..CHUNKS {
        let (valid, tomb) = chunk_bits(meta, c);
        if tomb & !valid != 0 || valid & valid.wrapping_add(1) != 0 {
            return Err(corruption(
                at,
                format!("chunk {c} has valid bits {valid:#06x} and tombstone bits {tomb:#06x}"),
            ));
        }
        if valid != 0 {
            if fill != c * CHUNK_SLOTS {
                return Err(corruption(
                    at,
                    format!("chunk {c} in use after a chunk not full"),
                ));
            }
            fill += valid.count_ones() as usize;
        }
    }
    Ok(fill)
}
