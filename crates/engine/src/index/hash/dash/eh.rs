//! Extendible-hashing pieces the Dash-style and the CCEH-style index share: hash prefixes and directory
//! positions, the root word and directory span, and the segment header format.
//!
//! * A hash's **prefix** at depth `d` is its top `d` bits, left-aligned; directory entry `i` under global
//!   depth `G` stands for the prefix `i << (64 − G)`; a segment of local depth `d` and pattern `p` owns the
//!   aligned block of `2^(G−d)` entries whose prefix at depth `d` is `p`.
//! * **Root word** (at a fixed superblock offset): directory offset (a multiple of 256) `|` global depth
//!   (low 8 bits). A directory is `2^G` words of 8 B, rounded up to whole XPLines.
//! * **Segment header** (the segment's first XPLine): magic (`+0`), pattern (`+8`, immutable), state word
//!   (`+16`: local depth in the low 8 bits `|` an index-specific offset above them, 0 when unused), xxh3 of
//!   magic, pattern and the segment's own offset (`+24`, so a copy elsewhere fails its check).

use std::collections::BTreeMap;

use xxhash_rust::xxh3::xxh3_64;

use super::layout::le;
use crate::error::{Error, Result};
use crate::storage::pm::{Pm, XPLINE};

/// Largest global or local depth (directory of 2^32 entries).
pub const MAX_DEPTH: u64 = 32;
/// Offsets of the segment header words.
pub const SEG_PATTERN: u64 = 8;
pub const SEG_STATE: u64 = 16;
pub const SEG_CHECK: u64 = 24;

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

/// The left-aligned hash prefix that directory entry `i` stands for under global depth `g`.
#[inline]
pub fn entry_prefix(i: u64, g: u64) -> u64 {
    if g == 0 { 0 } else { i << (64 - g) }
}

/// The first directory entry and the number of entries of the block a segment of pattern `pattern` and
/// local depth `d ≤ g` owns under global depth `g`.
#[inline]
pub fn block(pattern: u64, d: u64, g: u64) -> (u64, u64) {
    (dir_index(pattern, g), 1 << (g - d))
}

/// Bytes of a directory of global depth `g`, rounded up to whole XPLines.
pub fn dir_span(g: u64) -> u64 {
    ((8u64 << g).div_ceil(XPLINE)) * XPLINE
}

/// Formats the `2^g` segments of a fresh index whose directory starts at `dir_off` (written whole with
/// non-temporal stores, not fenced): `InvalidArgument` for a depth above [`MAX_DEPTH`] or a region that
/// cannot hold them. Returns the segments' offsets in directory order and the heap's end after them.
pub fn format_segments<P: Pm, F: SegmentFormat>(
    pm: &P,
    geo: &F,
    dir_off: u64,
    g: u64,
) -> Result<(Vec<u64>, u64)> {
    if g > MAX_DEPTH {
        return Err(Error::invalid(format!(
            "initial depth {g} (at most {MAX_DEPTH})"
        )));
    }
    let first_seg = dir_off + dir_span(g);
    let need = (1u64 << g)
        .checked_mul(geo.seg_bytes())
        .and_then(|n| n.checked_add(first_seg));
    let Some(heap_end) = need.filter(|&n| n <= pm.len()) else {
        return Err(Error::invalid(format!(
            "region of {} bytes cannot hold {} segments of {} bytes",
            pm.len(),
            1u64 << g,
            geo.seg_bytes()
        )));
    };
    let segs: Vec<u64> = (0..1u64 << g)
        .map(|i| first_seg + i * geo.seg_bytes())
        .collect();
    let mut image = vec![0u8; geo.seg_bytes() as usize];
    for (i, &seg) in segs.iter().enumerate() {
        let pattern = if g == 0 { 0 } else { (i as u64) << (64 - g) };
        image[..XPLINE as usize].copy_from_slice(&geo.seg_header(seg, pattern, g));
        pm.write_nt(seg, &image)?;
    }
    Ok((segs, heap_end))
}

/// Reads the root word at `root_at` and the directory it names: `(offset, global depth, raw entries)`.
/// `corruption(offset, what)` reports a root word out of range.
pub fn read_dir<P: Pm>(
    pm: &P,
    root_at: u64,
    super_bytes: u64,
    corruption: impl Fn(u64, String) -> Error,
) -> Result<(u64, u64, Vec<u64>)> {
    let root = pm.load_u64_atomic(root_at)?;
    let (off, g) = (root & !0xFF, root & 0xFF);
    if g > MAX_DEPTH
        || off < super_bytes
        || !off.is_multiple_of(XPLINE)
        || off.checked_add(dir_span(g)).is_none_or(|e| e > pm.len())
    {
        return Err(corruption(root_at, format!("bad root word {root:#x}")));
    }
    let mut bytes = vec![0u8; 8usize << g];
    pm.read(off, &mut bytes)?;
    Ok((off, g, bytes.chunks_exact(8).map(le).collect()))
}

/// A directory of `entries` as the bytes of its span (zero-padded to whole XPLines).
pub fn dir_bytes(entries: impl ExactSizeIterator<Item = u64>, g: u64) -> Vec<u8> {
    let mut bytes = vec![0u8; dir_span(g) as usize];
    for (i, e) in entries.enumerate() {
        bytes[8 * i..8 * i + 8].copy_from_slice(&e.to_le_bytes());
    }
    bytes
}

/// What an index's segments look like: their magic word, size, and how damage is reported.
pub trait SegmentFormat {
    const SEG_MAGIC: u64;
    /// Bytes of a segment (header XPLine included).
    fn seg_bytes(&self) -> u64;
    /// Offset of the first byte a segment may not reach (the region's length).
    fn region_len(&self) -> u64;
    /// `Error::Corruption` naming the index's region.
    fn damage(offset: u64, detail: String) -> Error;

    /// The header XPLine of a fresh segment at `seg` (state word = `depth`).
    fn seg_header(&self, seg: u64, pattern: u64, depth: u64) -> [u8; XPLINE as usize] {
        let mut b = [0u8; XPLINE as usize];
        b[0..8].copy_from_slice(&Self::SEG_MAGIC.to_le_bytes());
        b[8..16].copy_from_slice(&pattern.to_le_bytes());
        b[16..24].copy_from_slice(&depth.to_le_bytes());
        b[24..32].copy_from_slice(&seg_check(Self::SEG_MAGIC, seg, pattern).to_le_bytes());
        b
    }
}

/// Checksum of a segment's immutable header fields.
fn seg_check(magic: u64, seg: u64, pattern: u64) -> u64 {
    let mut b = [0u8; 24];
    b[..8].copy_from_slice(&magic.to_le_bytes());
    b[8..16].copy_from_slice(&pattern.to_le_bytes());
    b[16..].copy_from_slice(&seg.to_le_bytes());
    xxh3_64(&b)
}

/// A segment header as read from PM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegHeader {
    pub pattern: u64,
    pub depth: u64,
    /// The state word above its low 8 bits (Dash: the segment a split in progress moves records to).
    pub target: u64,
}

impl SegHeader {
    pub fn state(&self) -> u64 {
        self.target | self.depth
    }

    /// Reads and validates the header of the segment at `seg` (range below `region_len`, alignment, at or
    /// after `first`, magic, checksum, depth, pattern having no bits below its depth).
    pub fn read<P: Pm, F: SegmentFormat>(
        pm: &P,
        format: &F,
        first: u64,
        seg: u64,
    ) -> Result<SegHeader> {
        let end = seg.checked_add(format.seg_bytes());
        if seg < first
            || !seg.is_multiple_of(XPLINE)
            || end.is_none_or(|e| e > format.region_len().min(pm.len()))
        {
            return Err(F::damage(
                seg,
                "segment offset out of range or misaligned".into(),
            ));
        }
        let mut b = [0u8; 32];
        pm.read(seg, &mut b)?;
        let (magic, pattern, state, check) = (le(&b), le(&b[8..]), le(&b[16..]), le(&b[24..]));
        if magic != F::SEG_MAGIC || check != seg_check(F::SEG_MAGIC, seg, pattern) {
            return Err(F::damage(seg, "bad segment magic or checksum".into()));
        }
        let h = SegHeader {
            pattern,
            depth: state & 0xFF,
            target: state & !0xFF,
        };
        if h.depth > MAX_DEPTH || prefix(pattern, h.depth) != pattern {
            return Err(F::damage(
                seg + SEG_STATE,
                format!("local depth {} with pattern {pattern:#x}", h.depth),
            ));
        }
        Ok(h)
    }
}

/// The header of every segment the directory names (read once each by `header`), each checked against
/// every entry naming it: local depth at most `g`, pattern = the entry's prefix at that depth. Damage is
/// reported at the entry.
pub fn entry_headers<F: SegmentFormat>(
    dir_off: u64,
    g: u64,
    dir: &[u64],
    mut header: impl FnMut(u64) -> Result<SegHeader>,
) -> Result<BTreeMap<u64, SegHeader>> {
    let mut headers = BTreeMap::new();
    for (i, &seg) in dir.iter().enumerate() {
        let h = match headers.get(&seg) {
            Some(&h) => h,
            None => {
                let h = header(seg)?;
                headers.insert(seg, h);
                h
            }
        };
        if h.depth > g || h.pattern != prefix(entry_prefix(i as u64, g), h.depth) {
            return Err(F::damage(
                dir_off + 8 * i as u64,
                format!(
                    "directory entry {i} names the segment at {seg} of depth {} and pattern {:#x}",
                    h.depth, h.pattern
                ),
            ));
        }
    }
    Ok(headers)
}

/// Checks the block structure of a directory whose segments' headers `entry_headers` returned: every
/// segment is named by exactly its aligned block of `2^(g − depth)` entries, and the segments are disjoint
/// from each other and from the directory. Returns the local depth of every segment.
pub fn check_blocks<F: SegmentFormat>(
    format: &F,
    dir_off: u64,
    g: u64,
    dir: &[u64],
    headers: &BTreeMap<u64, SegHeader>,
) -> Result<BTreeMap<u64, u64>> {
    let mut segs = BTreeMap::new();
    for (&seg, h) in headers {
        let (start, n) = block(h.pattern, h.depth, g);
        let named = dir.iter().filter(|&&s| s == seg).count() as u64;
        if let Some(j) = (start..start + n).find(|&j| dir[j as usize] != seg) {
            return Err(F::damage(
                dir_off + 8 * j,
                format!("directory entry {j} breaks the block of the segment at {seg}"),
            ));
        }
        if named != n {
            return Err(F::damage(
                seg,
                format!("segment named by {named} directory entries, its block has {n}"),
            ));
        }
        segs.insert(seg, h.depth);
    }
    let dir_end = dir_off + dir_span(g);
    let mut prev_end = 0;
    for &seg in segs.keys() {
        let end = seg + format.seg_bytes();
        if seg < prev_end || (seg < dir_end && end > dir_off) {
            return Err(F::damage(seg, "segments overlap".into()));
        }
        prev_end = end;
    }
    Ok(segs)
}
