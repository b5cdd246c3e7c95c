//! The PM format of the Dash-style index: constants, the superblock and its mutable words, directory
//! entries (segment offset and crash version), the bucket header word (bitmap, counts, version lock), the
//! overflow fingerprints, and the hash of a key (directory prefix, home bucket, fingerprint).

use xxhash_rust::xxh3::xxh3_64_with_seed;

pub use super::eh::{
    MAX_DEPTH, SEG_PATTERN, SEG_STATE, SegHeader, SegmentFormat, block, dir_index, dir_span,
    entry_prefix, prefix, split_bit,
};
use crate::error::{Error, Result};
pub use crate::index::hash::format::le;
use crate::index::hash::format::{corruption_in, read_superblock, write_superblock};
use crate::storage::pm::{Pm, XPLINE};

/// Bytes of a bucket: one XPLine.
pub const BUCKET_BYTES: u64 = XPLINE;
/// Slots per bucket: 8 B header + 14 fingerprints + 4 overflow fingerprints + 2 B overflow index + 4 B
/// reserved + 14 × 16 B = 256 B.
pub const SLOTS: usize = 14;
/// Offset of the first fingerprint, of the overflow fingerprints and their index word, and of the first
/// slot inside a bucket. Bytes `0..META_BYTES` (one 64 B line) are what a probe reads first.
pub const FP_OFF: u64 = 8;
pub const OFP_OFF: u64 = 22;
pub const OFP_INDEX_OFF: u64 = 26;
pub const META_BYTES: u64 = 28;
pub const SLOT_OFF: u64 = 32;
/// Overflow fingerprints per bucket.
pub const OFPS: usize = 4;
/// Bytes of a slot (8 B key, 8 B value).
pub const SLOT_BYTES: u64 = 16;
/// Bytes of the superblock (one XPLine; the first directory follows it).
pub const SUPER_BYTES: u64 = XPLINE;
/// Normal buckets per segment: a power of two in this range.
pub const MIN_SEG_BUCKETS: u64 = 4;
pub const MAX_SEG_BUCKETS: u64 = 1024;
/// Most stash buckets per segment (their records fit the 8-bit overflow counts).
pub const MAX_STASH: u64 = 8;

pub const MAGIC: u64 = u64::from_le_bytes(*b"STRDASH1");
pub const SEG_MAGIC: u64 = u64::from_le_bytes(*b"STRDSEG1");
pub const VERSION: u64 = 2;

// Superblock fields. Bytes 0..40 are immutable and covered by the checksum at 40.
pub const SB_MAGIC: u64 = 0;
pub const SB_VERSION: u64 = 8;
pub const SB_SEG_BUCKETS: u64 = 16;
pub const SB_STASH: u64 = 24;
pub const SB_REGION_LEN: u64 = 32;
pub const SB_CHECK: u64 = 40;
/// Root word: directory offset (a multiple of 256) | global depth (low 8 bits).
pub const SB_ROOT: u64 = 64;
/// Heap end: first byte never allocated. Raised and persisted before a segment or directory is written
/// above the old value, so recovery never hands out space a committed split refers to.
pub const SB_HEAP: u64 = 72;
/// Crash version `V` (8 bits): bumped by every open after a crash; a directory entry whose version is not
/// `V` names a segment not yet repaired since that crash.
pub const SB_CRASH_VERSION: u64 = 80;
/// Clean flag: 1 when the index was closed cleanly (every entry at version `V`, `SB_LEN` exact), 0 while
/// it is open.
pub const SB_CLEAN: u64 = 88;
/// Live keys at the last clean close.
pub const SB_LEN: u64 = 96;

/// A directory entry: segment offset (a multiple of 256) | crash version (low 8 bits).
#[inline]
pub fn entry(seg: u64, version: u64) -> u64 {
    seg | (version & 0xFF)
}
#[inline]
pub fn entry_seg(e: u64) -> u64 {
    e & !0xFF
}
#[inline]
pub fn entry_version(e: u64) -> u64 {
    e & 0xFF
}

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

impl SegmentFormat for Geometry {
    const SEG_MAGIC: u64 = SEG_MAGIC;
    fn seg_bytes(&self) -> u64 {
        Geometry::seg_bytes(self)
    }
    fn region_len(&self) -> u64 {
        self.region_len
    }
    fn damage(offset: u64, detail: String) -> Error {
        corruption(offset, detail)
    }
}

/// Reads and validates the header of the segment at `seg`.
pub fn read_seg<P: Pm>(pm: &P, geo: &Geometry, seg: u64) -> Result<SegHeader> {
    SegHeader::read(pm, geo, SUPER_BYTES, seg)
}

/// The bucket header word: allocation bitmap (bits 0..14), count (16..20), overflow count (24..32: records
/// whose home is this bucket that live in the stash without an overflow fingerprint), lock bit (32),
/// version (33..64). The lock bit and version are the bucket's **version lock**: a writer sets the lock
/// bit (compare-exchange), changes the bucket, and clears it while bumping the version; a reader retries
/// when the bit is set or the word changed during its read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Header(pub u64);

impl Header {
    pub const BITMAP: u64 = (1 << SLOTS) - 1;
    const LOCK: u64 = 1 << 32;
    /// The lock bit and the version.
    const LOCK_WORD: u64 = !0 << 32;

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
    pub fn full(self) -> bool {
        self.bitmap() == Self::BITMAP
    }
    /// First free slot.
    pub fn free_slot(self) -> Option<usize> {
        let free = !self.0 & Self::BITMAP;
        (free != 0).then(|| free.trailing_zeros() as usize)
    }
    /// This header with `bitmap` (count derived) and `overflow`; lock bit and version kept.
    pub fn with(self, bitmap: u64, overflow: u64) -> Header {
        Header(
            bitmap
                | (bitmap.count_ones() as u64) << 16
                | (overflow & 0xFF) << 24
                | self.0 & Self::LOCK_WORD,
        )
    }
    pub fn with_bit(self, s: usize, on: bool) -> Header {
        let bitmap = if on {
            self.bitmap() | 1 << s
        } else {
            self.bitmap() & !(1 << s)
        };
        self.with(bitmap, self.overflow())
    }
    pub fn with_overflow(self, overflow: u64) -> Header {
        self.with(self.bitmap(), overflow)
    }
    /// The locked form of this header.
    pub fn locked_form(self) -> Header {
        Header(self.0 | Self::LOCK)
    }
    /// Unlocked, version one past this one (the store that ends a writer's critical section).
    pub fn released(self) -> Header {
        Header((self.0 & !Self::LOCK).wrapping_add(1 << 33))
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

/// The overflow fingerprints of a normal bucket (bytes `22..28`): up to [`OFPS`] pairs (fingerprint, stash
/// bucket) of records whose home is this bucket and that live in the stash. Index word: bit `i` (0..4)
/// marks pair `i` valid, bits `4 + 3i ..` hold its stash bucket. Like the overflow count, a hint that only
/// a holder of the bucket's lock changes, never persisted on its own: repair recomputes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Overflow {
    pub fps: [u8; OFPS],
    pub index: u16,
}

impl Overflow {
    /// The overflow fingerprints in the bucket's first `META_BYTES` bytes.
    pub fn from_meta(meta: &[u8]) -> Overflow {
        let mut fps = [0u8; OFPS];
        fps.copy_from_slice(&meta[OFP_OFF as usize..OFP_INDEX_OFF as usize]);
        let at = OFP_INDEX_OFF as usize;
        Overflow {
            fps,
            index: u16::from_le_bytes([meta[at], meta[at + 1]]),
        }
    }
    /// Bytes `22..28` of the bucket.
    pub fn bytes(&self) -> [u8; 6] {
        let i = self.index.to_le_bytes();
        let f = self.fps;
        [f[0], f[1], f[2], f[3], i[0], i[1]]
    }
    /// The valid pairs: (fingerprint, stash bucket index).
    pub fn entries(&self) -> impl Iterator<Item = (u8, u64)> + '_ {
        (0..OFPS)
            .filter(|&i| self.index >> i & 1 == 1)
            .map(|i| (self.fps[i], u64::from(self.index >> (4 + 3 * i) & 7)))
    }
    /// Adds a pair in a free place; `false` when all are taken.
    pub fn add(&mut self, fp: u8, stash: u64) -> bool {
        let Some(i) = (0..OFPS).find(|&i| self.index >> i & 1 == 0) else {
            return false;
        };
        self.fps[i] = fp;
        let shift = 4 + 3 * i;
        self.index = (self.index & !(7 << shift)) | ((stash as u16 & 7) << shift) | 1 << i;
        true
    }
    /// Removes one pair equal to `(fp, stash)`; `false` when there is none.
    pub fn remove(&mut self, fp: u8, stash: u64) -> bool {
        let hit = (0..OFPS).find(|&i| {
            self.index >> i & 1 == 1
                && self.fps[i] == fp
                && u64::from(self.index >> (4 + 3 * i) & 7) == stash
        });
        if let Some(i) = hit {
            self.index &= !(1 << i);
        }
        hit.is_some()
    }
}
