//! The PM format of the CCEH-style index: constants, the superblock and its mutable words, segment
//! headers, slot positions, and the two hash functions (directory prefix and first probe run from the
//! first, second probe run from the second).

use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::error::{Error, Result};
pub use crate::index::hash::dash::eh::{
    MAX_DEPTH, SEG_STATE, SegHeader, SegmentFormat, block, dir_index, dir_span, entry_prefix,
    prefix, split_bit,
};
pub use crate::index::hash::format::le;
use crate::index::hash::format::{corruption_in, read_superblock, write_superblock};
use crate::storage::pm::{CACHE_LINE, Pm, XPLINE};

/// Bytes of a slot (8 B key, 8 B value) and slots per 64 B line.
pub const SLOT_BYTES: u64 = 16;
pub const LINE_SLOTS: u64 = CACHE_LINE / SLOT_BYTES;
/// The key that marks a free slot. The key itself is stored in the superblock's reserved slot.
pub const EMPTY: u64 = 0;
/// Bytes of the superblock (one XPLine; the first directory follows it).
pub const SUPER_BYTES: u64 = XPLINE;
/// Bytes of a segment header (one XPLine before the slots).
pub const SEG_HEADER_BYTES: u64 = XPLINE;
/// Slot lines per segment: a power of two in this range (CCEH: 256 lines = 1,024 slots = 16 KiB).
pub const MIN_SEG_LINES: u64 = 4;
pub const MAX_SEG_LINES: u64 = 4096;
/// Lines per probe run: in this range, at most the segment's lines (CCEH: 8; Dash's copy: 4).
pub const MAX_RUN_LINES: u64 = 16;

pub const MAGIC: u64 = u64::from_le_bytes(*b"STRCCEH1");
pub const SEG_MAGIC: u64 = u64::from_le_bytes(*b"STRCSEG1");
pub const VERSION: u64 = 1;

// Superblock fields. Bytes 0..40 are immutable and covered by the checksum at 40.
pub const SB_MAGIC: u64 = 0;
pub const SB_VERSION: u64 = 8;
pub const SB_SEG_LINES: u64 = 16;
pub const SB_RUN_LINES: u64 = 24;
pub const SB_REGION_LEN: u64 = 32;
pub const SB_CHECK: u64 = 40;
/// Root word: directory offset (a multiple of 256) | global depth (low 8 bits).
pub const SB_ROOT: u64 = 64;
/// The reserved slot of key [`EMPTY`]: presence flag (0 or 1; the commit word) and value.
pub const SB_EMPTY_KEY_PRESENT: u64 = 72;
pub const SB_EMPTY_KEY_VALUE: u64 = 80;

/// Damage in the region, reported under the name `<pm cceh index>`.
pub fn corruption(offset: u64, detail: impl Into<String>) -> Error {
    corruption_in("<pm cceh index>", offset, detail)
}

/// The first hash: its top bits index the directory, its low bits pick the first probe run.
#[inline]
pub fn hash1(key: u64) -> u64 {
    xxh3_64_with_seed(&key.to_le_bytes(), 0xCCE4_0017)
}

/// The second hash: its low bits pick the second probe run.
#[inline]
pub fn hash2(key: u64) -> u64 {
    xxh3_64_with_seed(&key.to_le_bytes(), 0x5EC0_4D17)
}

/// The immutable geometry recorded in the superblock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Slot lines per segment (a power of two).
    pub seg_lines: u64,
    /// Lines per probe run.
    pub run_lines: u64,
    pub region_len: u64,
}

impl Geometry {
    /// Slots per segment.
    pub fn slots(&self) -> u64 {
        self.seg_lines * LINE_SLOTS
    }
    /// Bytes of a segment: header XPLine, then the slots.
    pub fn seg_bytes(&self) -> u64 {
        SEG_HEADER_BYTES + self.slots() * SLOT_BYTES
    }
    /// Offset of slot `s` of the segment at `seg`.
    pub fn slot_off(&self, seg: u64, s: u64) -> u64 {
        seg + SEG_HEADER_BYTES + s * SLOT_BYTES
    }
    /// The first line (slot line index in the segment) of the probe run a hash picks.
    pub fn run_start(&self, h: u64) -> u64 {
        h & (self.seg_lines - 1)
    }
    /// The two runs of a key: first-line indexes from its two hashes (equal when both hashes pick the same
    /// line; the caller probes it once).
    pub fn runs(&self, h1: u64, h2: u64) -> [u64; 2] {
        [self.run_start(h1), self.run_start(h2)]
    }
    /// True when slot `s` lies in the run starting at line `start` (runs wrap around the segment's end).
    pub fn in_run(&self, start: u64, s: u64) -> bool {
        let line = s / LINE_SLOTS;
        (line + self.seg_lines - start) % self.seg_lines < self.run_lines
    }

    /// Writes the immutable superblock and its checksum (not persisted).
    pub fn write<P: Pm>(&self, pm: &P) -> Result<()> {
        write_superblock(
            pm,
            SB_CHECK,
            &[
                (SB_MAGIC, MAGIC),
                (SB_VERSION, VERSION),
                (SB_SEG_LINES, self.seg_lines),
                (SB_RUN_LINES, self.run_lines),
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
                "cceh index version {}, expected {VERSION}",
                word(SB_VERSION)
            )));
        }
        let g = Geometry {
            seg_lines: word(SB_SEG_LINES),
            run_lines: word(SB_RUN_LINES),
            region_len: word(SB_REGION_LEN),
        };
        g.validate(pm.len())
            .map_err(|e| corruption(0, e.to_string()))?;
        Ok(g)
    }

    /// `InvalidArgument` unless the geometry is in range for a region of `len` bytes.
    pub fn validate(&self, len: u64) -> Result<()> {
        if !self.seg_lines.is_power_of_two()
            || !(MIN_SEG_LINES..=MAX_SEG_LINES).contains(&self.seg_lines)
        {
            return Err(Error::invalid(format!(
                "{} lines per segment (a power of two in {MIN_SEG_LINES}..={MAX_SEG_LINES})",
                self.seg_lines
            )));
        }
        if self.run_lines == 0 || self.run_lines > MAX_RUN_LINES.min(self.seg_lines) {
            return Err(Error::invalid(format!(
                "{} lines per probe run (1..={} for {} lines per segment)",
                self.run_lines,
                MAX_RUN_LINES.min(self.seg_lines),
                self.seg_lines
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

/// Reads and validates the header of the segment at `seg` (the state word is the local depth alone).
pub fn read_seg<P: Pm>(pm: &P, geo: &Geometry, seg: u64) -> Result<SegHeader> {
    let h = SegHeader::read(pm, geo, SUPER_BYTES, seg)?;
    if h.target != 0 {
        return Err(corruption(
            seg + SEG_STATE,
            format!("stray bits {:#x} in the local depth word", h.target),
        ));
    }
    Ok(h)
}
