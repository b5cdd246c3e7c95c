//! The PM format of the Dash-style index: constants, the superblock and root word, segment headers, the
//! bucket header word, and the hash of a key (directory prefix, home bucket, fingerprint).

use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

use crate::error::{Error, Result};
pub use crate::index::hash::format::le;
use crate::index::hash::format::{corruption_in, read_superblock, write_superblock};
use crate::storage::pm::{Pm, XPLINE};

/// Bytes of a bucket: one XPLine.
pub const BUCKET_BYTES: u64 = XPLINE;
/// Slots per bucket: 8 B header + 14 fingerprints + 10 B reserved + 14 × 16 B = 256 B.
pub const SLOTS: usize = 14;
/// Offset of the first fingerprint and of the first slot inside a bucket.
pub const FP_OFF: u64 = 8;
pub const SLOT_OFF: u64 = 32;
/// Bytes of a slot (8 B key, 8 B value).
pub const SLOT_BYTES: u64 = 16;
/// Bytes of the superblock (one XPLine; the first directory follows it).
pub const SUPER_BYTES: u64 = XPLINE;
/// Largest global depth (directory of 2^32 entries).
pub const MAX_DEPTH: u64 = 32;
/// Normal buckets per segment: a power of two in this range.
pub const MIN_SEG_BUCKETS: u64 = 4;
pub const MAX_SEG_BUCKETS: u64 = 1024;
/// Most stash buckets per segment (their records fit the 8-bit overflow counts).
pub const MAX_STASH: u64 = 8;

pub const MAGIC: u64 = u64::from_le_bytes(*b"STRDASH1");
pub const SEG_MAGIC: u64 = u64::from_le_bytes(*b"STRDSEG1");
pub const VERSION: u64 = 1;

// Superblock fields. Bytes 0..40 are immutable and covered by the checksum at 40.
pub const SB_MAGIC: u64 = 0;
pub const SB_VERSION: u64 = 8;
pub const SB_SEG_BUCKETS: u64 = 16;
pub const SB_STASH: u64 = 24;
pub const SB_REGION_LEN: u64 = 32;
pub const SB_CHECK: u64 = 40;
/// Root word: directory offset (a multiple of 256) | global depth (low 8 bits).
pub const SB_ROOT: u64 = 64;

// Segment header fields (first XPLine of a segment).
pub const SEG_MAGIC_AT: u64 = 0;
pub const SEG_PATTERN: u64 = 8;
/// State word: local depth (low 8 bits) | offset of the segment a split is moving records to (0 = none).
pub const SEG_STATE: u64 = 16;
pub const SEG_CHECK: u64 = 24;

/// Damage in the region, reported under the name `<pm dash index>`.
pub fn corruption(offset: u64, detail: impl Into<String>) -> Error {
    corruption_in("<pm dash index>", offset, detail)
}

/// 64-bit hash of a key: the top bits index the directory, the low bits pick the home bucket, bits 16..24
/// are the fingerprint.
#[inline]
pub fn hash(key: u64) -> u64 {
    xxh3_64_with_seed(&key.to_le_bytes(), 0xDA54_0017)
}

#[inline]
pub fn fingerprint(h: u64) -> u8 {
    (h >> 16) as u8
}

/// The top `depth` bits of `h`, left-aligned (the segment pattern a hash belongs to at that depth).
#[inline]
pub fn prefix(h: u64, depth: u64) -> u64 {
    if depth == 0 {
        0
    } else {
        h & (u64::MAX << (64 - depth))
    }
}

/// Directory entry of `h` under global depth `g`.
#[inline]
pub fn dir_index(h: u64, g: u64) -> u64 {
    if g == 0 { 0 } else { h >> (64 - g) }
}

/// The bit that decides a split at local depth `d` (0 = stays, 1 = moves to the new segment).
#[inline]
pub fn split_bit(h: u64, d: u64) -> bool {
    (h >> (63 - d)) & 1 == 1
}

/// The immutable geometry recorded in the superblock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Normal buckets per segment (power of two).
    pub buckets: u64,
    /// Stash buckets per segment.
    pub stash: u64,
    pub region_len: u64,
}

impl Geometry {
    /// Bytes of a segment: header XPLine, normal buckets, stash buckets.
    pub fn seg_bytes(&self) -> u64 {
        BUCKET_BYTES * (1 + self.buckets + self.stash)
    }
    /// Offset of bucket `i` (normal `0..buckets`, stash after them) of the segment at `seg`.
    pub fn bucket_off(&self, seg: u64, i: u64) -> u64 {
        seg + BUCKET_BYTES * (1 + i)
    }
    /// Slots of a segment (normal and stash).
    pub fn seg_slots(&self) -> u64 {
        (self.buckets + self.stash) * SLOTS as u64
    }

    /// Writes the immutable superblock and its checksum (not persisted).
    pub fn write<P: Pm>(&self, pm: &P) -> Result<()> {
        write_superblock(
            pm,
            SB_CHECK,
            &[
                (SB_MAGIC, MAGIC),
                (SB_VERSION, VERSION),
                (SB_SEG_BUCKETS, self.buckets),
                (SB_STASH, self.stash),
                (SB_REGION_LEN, self.region_len),
            ],
        )
    }

    /// Reads and validates the superblock.
    pub fn read<P: Pm>(pm: &P) -> Result<Geometry> {
        let b = read_superblock(pm, SUPER_BYTES, SB_CHECK, MAGIC, |at, what| {
            corruption(at, what)
        })?;
        let word = |at: u64| le(&b[at as usize..]);
        if word(SB_VERSION) != VERSION {
            return Err(Error::Incompatible(format!(
                "dash index version {}, expected {VERSION}",
                word(SB_VERSION)
            )));
        }
        let g = Geometry {
            buckets: word(SB_SEG_BUCKETS),
            stash: word(SB_STASH),
            region_len: word(SB_REGION_LEN),
        };
        g.validate(pm.len())
            .map_err(|e| corruption(0, e.to_string()))?;
        Ok(g)
    }

    /// `InvalidArgument` unless the geometry is in range for a region of `len` bytes.
    pub fn validate(&self, len: u64) -> Result<()> {
        if !self.buckets.is_power_of_two()
            || !(MIN_SEG_BUCKETS..=MAX_SEG_BUCKETS).contains(&self.buckets)
        {
            return Err(Error::invalid(format!(
                "{} buckets per segment (a power of two in {MIN_SEG_BUCKETS}..={MAX_SEG_BUCKETS})",
                self.buckets
            )));
        }
        if self.stash > MAX_STASH {
            return Err(Error::invalid(format!(
                "{} stash buckets (at most {MAX_STASH})",
                self.stash
            )));
        }
        if self.region_len != len || !len.is_multiple_of(XPLINE) {
            return Err(Error::invalid(format!(
                "region of {len} bytes (recorded {}, must be a multiple of {XPLINE})",
                self.region_len
            )));
        }
        Ok(())
    }
}

/// Checksum of a segment's immutable header fields (the offset included, so a copy elsewhere fails).
pub fn seg_check(seg: u64, pattern: u64) -> u64 {
    let mut b = [0u8; 24];
    b[..8].copy_from_slice(&SEG_MAGIC.to_le_bytes());
    b[8..16].copy_from_slice(&pattern.to_le_bytes());
    b[16..].copy_from_slice(&seg.to_le_bytes());
    xxh3_64(&b)
}

/// A segment header as read from PM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegHeader {
    pub pattern: u64,
    pub depth: u64,
    /// Segment a split in progress moves records to (0 = none).
    pub target: u64,
}

impl SegHeader {
    pub fn state(&self) -> u64 {
        self.target | self.depth
    }

    /// The header XPLine of a fresh segment at `seg`.
    pub fn image(seg: u64, pattern: u64, depth: u64) -> [u8; BUCKET_BYTES as usize] {
        let mut b = [0u8; BUCKET_BYTES as usize];
        b[0..8].copy_from_slice(&SEG_MAGIC.to_le_bytes());
        b[8..16].copy_from_slice(&pattern.to_le_bytes());
        b[16..24].copy_from_slice(&depth.to_le_bytes());
        b[24..32].copy_from_slice(&seg_check(seg, pattern).to_le_bytes());
        b
    }

    /// Reads and validates the header of the segment at `seg` (range, alignment, magic, checksum, depth,
    /// pattern having no bits below its depth).
    pub fn read<P: Pm>(pm: &P, geo: &Geometry, seg: u64) -> Result<SegHeader> {
        let end = seg.checked_add(geo.seg_bytes());
        if seg < SUPER_BYTES || !seg.is_multiple_of(XPLINE) || end.is_none_or(|e| e > pm.len()) {
            return Err(corruption(seg, "segment offset out of range or misaligned"));
        }
        let mut b = [0u8; 32];
        pm.read(seg, &mut b)?;
        let (magic, pattern, state, check) = (le(&b), le(&b[8..]), le(&b[16..]), le(&b[24..]));
        if magic != SEG_MAGIC || check != seg_check(seg, pattern) {
            return Err(corruption(seg, "bad segment magic or checksum"));
        }
        let h = SegHeader {
            pattern,
            depth: state & 0xFF,
            target: state & !0xFF,
        };
        if h.depth > MAX_DEPTH || prefix(pattern, h.depth) != pattern {
            return Err(corruption(
                seg,
                format!("local depth {} with pattern {pattern:#x}", h.depth),
            ));
        }
        Ok(h)
    }
}

/// The bucket header word: allocation bitmap (bits 0..14), count (16..20), overflow count (24..32: records
/// whose home is this bucket that live in the stash), lock bit (32), version (33..64).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Header(pub u64);

impl Header {
    pub const BITMAP: u64 = (1 << SLOTS) - 1;
    const LOCK: u64 = 1 << 32;

    pub fn bitmap(self) -> u64 {
        self.0 & Self::BITMAP
    }
    pub fn used(self, s: usize) -> bool {
        self.0 >> s & 1 == 1
    }
    pub fn count(self) -> u64 {
        self.0 >> 16 & 0xF
    }
    pub fn overflow(self) -> u64 {
        self.0 >> 24 & 0xFF
    }
    pub fn locked(self) -> bool {
        self.0 & Self::LOCK != 0
    }
    pub fn version(self) -> u64 {
        self.0 >> 33
    }
    pub fn full(self) -> bool {
        self.bitmap() == Self::BITMAP
    }
    /// First free slot.
    pub fn free_slot(self) -> Option<usize> {
        let free = !self.0 & Self::BITMAP;
        (free != 0).then(|| free.trailing_zeros() as usize)
    }
    /// A header with `bitmap` and `overflow`, count derived, unlocked, version one past this one.
    pub fn next(self, bitmap: u64, overflow: u64) -> Header {
        let version = (self.version() + 1) & ((1 << 31) - 1);
        Header(bitmap | (bitmap.count_ones() as u64) << 16 | overflow << 24 | version << 33)
    }
    pub fn with_bit(self, s: usize, on: bool) -> Header {
        let bitmap = if on {
            self.bitmap() | 1 << s
        } else {
            self.bitmap() & !(1 << s)
        };
        self.next(bitmap, self.overflow())
    }
    pub fn with_overflow(self, overflow: u64) -> Header {
        self.next(self.bitmap(), overflow)
    }
    /// `Some(why)` when the word cannot be a header: stray bits, count not the bitmap's popcount.
    pub fn damage(self) -> Option<String> {
        let stray = self.0 & (0xC000 | 0xF0_0000);
        if stray != 0 || self.count() != self.bitmap().count_ones() as u64 {
            Some(format!("bad bucket header {:#x}", self.0))
        } else {
            None
        }
    }
}
