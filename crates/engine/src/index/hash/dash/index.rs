//! [`DashIndex`]: creation, lookups, upserts and removes over the segment / bucket format of `layout`.

use std::collections::BTreeMap;

use super::layout::{
    BUCKET_BYTES, FP_OFF, Geometry, Header, MAX_DEPTH, SB_ROOT, SLOT_BYTES, SLOT_OFF, SLOTS,
    SUPER_BYTES, SegHeader, dir_index, fingerprint, hash, le,
};
use crate::error::{Error, Result};
use crate::storage::pm::{Pm, XPLINE};

/// How [`DashIndex::create`] lays out a region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DashConfig {
    /// Normal buckets per segment (a power of two in 4..=1024; Dash uses 64).
    pub segment_buckets: u64,
    /// Stash buckets per segment (0..=8; Dash uses 2).
    pub stash_buckets: u64,
    /// Global depth at creation: the index starts with `2^initial_depth` segments.
    pub initial_depth: u64,
}

impl Default for DashConfig {
    fn default() -> Self {
        DashConfig {
            segment_buckets: 64,
            stash_buckets: 2,
            initial_depth: 0,
        }
    }
}

/// Event counters (DRAM only, reset by `open`).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct DashStats {
    /// Segment splits, and directory doublings among them.
    pub splits: u64,
    pub doublings: u64,
    /// Records moved to a neighbour bucket to make room (displacement).
    pub displacements: u64,
    /// Inserts that went to a stash bucket.
    pub stash_inserts: u64,
    /// Highest load factor (keys ÷ slots of all segments) seen just before a split.
    pub peak_load_before_split: f64,
    /// Half-done splits finished by the last recovery, and duplicate records it dropped.
    pub recovered_splits: u64,
    pub dropped_duplicates: u64,
}

/// Where a record lives: bucket offset and slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Loc {
    pub bucket: u64,
    pub slot: usize,
    /// Offset of the home bucket when the record is in a stash bucket.
    pub stash_home: Option<u64>,
}

/// A Dash-EH-style extendible hash index of `u64 → u64` over a PM region (module docs of `dash`).
#[derive(Debug)]
pub struct DashIndex<P: Pm> {
    pub(super) pm: P,
    pub(super) geo: Geometry,
    /// Directory offset in PM and global depth.
    pub(super) dir_off: u64,
    pub(super) depth: u64,
    /// DRAM mirror of the directory (segment offsets).
    pub(super) dir: Vec<u64>,
    /// Local depth of every segment, by offset.
    pub(super) segs: BTreeMap<u64, u64>,
    /// First free byte of the bump-allocated heap.
    pub(super) heap_end: u64,
    pub(super) len: u64,
    pub(super) stats: DashStats,
    /// Set when a write failed part-way: writes are refused until the region is reopened.
    pub(super) poisoned: Option<String>,
}

impl<P: Pm> DashIndex<P> {
    /// Formats `pm` as an empty index with `2^initial_depth` segments (earlier contents are ignored).
    pub fn create(pm: P, config: DashConfig) -> Result<Self> {
        let geo = Geometry {
            buckets: config.segment_buckets,
            stash: config.stash_buckets,
            region_len: pm.len(),
        };
        geo.validate(pm.len())?;
        let g = config.initial_depth;
        if g > MAX_DEPTH {
            return Err(Error::invalid(format!(
                "initial depth {g} (at most {MAX_DEPTH})"
            )));
        }
        let dir_off = SUPER_BYTES;
        let dir_bytes = dir_span(g);
        let first_seg = dir_off + dir_bytes;
        let need = (1u64 << g)
            .checked_mul(geo.seg_bytes())
            .and_then(|n| n.checked_add(first_seg));
        if need.is_none_or(|n| n > pm.len()) {
            return Err(Error::invalid(format!(
                "region of {} bytes cannot hold {} segments of {} bytes",
                pm.len(),
                1u64 << g,
                geo.seg_bytes()
            )));
        }
        // Segments and directory first, persisted; the superblock last (an unfinished create fails to open).
        let mut dir = Vec::with_capacity(1 << g);
        let mut segs = BTreeMap::new();
        let mut image = vec![0u8; geo.seg_bytes() as usize];
        for i in 0..1u64 << g {
            let seg = first_seg + i * geo.seg_bytes();
            let pattern = if g == 0 { 0 } else { i << (64 - g) };
            image[..BUCKET_BYTES as usize].copy_from_slice(&SegHeader::image(seg, pattern, g));
            pm.write_nt(seg, &image)?;
            dir.push(seg);
            segs.insert(seg, g);
        }
        let mut bytes = vec![0u8; dir_bytes as usize];
        for (i, &seg) in dir.iter().enumerate() {
            bytes[i * 8..i * 8 + 8].copy_from_slice(&seg.to_le_bytes());
        }
        pm.write(dir_off, &bytes)?;
        pm.persist(dir_off, dir_bytes)?;
        pm.write(0, &[0u8; SUPER_BYTES as usize])?;
        geo.write(&pm)?;
        pm.write_u64(SB_ROOT, dir_off | g)?;
        pm.persist(0, SUPER_BYTES)?;
        Ok(DashIndex {
            pm,
            geo,
            dir_off,
            depth: g,
            dir,
            segs,
            heap_end: first_seg + (1 << g) * geo.seg_bytes(),
            len: 0,
            stats: DashStats::default(),
            poisoned: None,
        })
    }

    /// The region.
    pub fn pm(&self) -> &P {
        &self.pm
    }

    /// Gives the region back (DRAM state is dropped; `open` rebuilds it).
    pub fn into_pm(self) -> P {
        self.pm
    }

    /// Segment offset and home bucket of hash `h`.
    pub(super) fn locate(&self, h: u64) -> (u64, u64) {
        let seg = self.dir[dir_index(h, self.depth) as usize];
        (seg, h & (self.geo.buckets - 1))
    }

    /// Header word and fingerprints of the bucket at `b`: one 22 B read (one 64 B line).
    pub(super) fn meta(&self, b: u64) -> Result<(Header, [u8; SLOTS])> {
        let mut buf = [0u8; FP_OFF as usize + SLOTS];
        self.pm.read(b, &mut buf)?;
        let mut fps = [0u8; SLOTS];
        fps.copy_from_slice(&buf[FP_OFF as usize..]);
        Ok((Header(le(&buf)), fps))
    }

    pub(super) fn header(&self, b: u64) -> Result<Header> {
        Ok(Header(self.pm.read_u64(b)?))
    }

    /// Key and value of slot `s` of the bucket at `b` (16 B).
    pub(super) fn read_slot(&self, b: u64, s: usize) -> Result<(u64, u64)> {
        let mut buf = [0u8; SLOT_BYTES as usize];
        self.pm.read(slot_off(b, s), &mut buf)?;
        Ok((le(&buf), le(&buf[8..])))
    }

    /// Looks for `key` among the slots of bucket `b` whose fingerprint matches.
    fn probe(&self, b: u64, key: u64, fp: u8) -> Result<Option<(usize, u64, Header)>> {
        let (hdr, fps) = self.meta(b)?;
        for (s, &f) in fps.iter().enumerate() {
            if hdr.used(s) && f == fp {
                let (k, v) = self.read_slot(b, s)?;
                if k == key {
                    return Ok(Some((s, v, hdr)));
                }
            }
        }
        Ok(None)
    }

    /// Finds `key`: home bucket, its neighbour, then the stash when the home bucket's overflow count says
    /// some of its records live there. Reads the header line of both buckets even on a miss.
    pub(super) fn find(&self, key: u64) -> Result<Option<(Loc, u64)>> {
        let h = hash(key);
        let (seg, y) = self.locate(h);
        let fp = fingerprint(h);
        let home = self.geo.bucket_off(seg, y);
        let at = |b: u64, s: usize| Loc {
            bucket: b,
            slot: s,
            stash_home: None,
        };
        let overflow = match self.probe(home, key, fp)? {
            Some((s, v, _)) => return Ok(Some((at(home, s), v))),
            None => self.header(home)?.overflow(),
        };
        let next = self.geo.bucket_off(seg, (y + 1) & (self.geo.buckets - 1));
        if let Some((s, v, _)) = self.probe(next, key, fp)? {
            return Ok(Some((at(next, s), v)));
        }
        if overflow > 0 {
            for i in 0..self.geo.stash {
                let b = self.geo.bucket_off(seg, self.geo.buckets + i);
                if let Some((s, v, _)) = self.probe(b, key, fp)? {
                    return Ok(Some((
                        Loc {
                            bucket: b,
                            slot: s,
                            stash_home: Some(home),
                        },
                        v,
                    )));
                }
            }
        }
        Ok(None)
    }

    /// The value of `key`.
    pub fn get(&self, key: u64) -> Result<Option<u64>> {
        Ok(self.find(key)?.map(|(_, v)| v))
    }

    /// Inserts or overwrites `key`. Durable when this returns `Ok`.
    pub fn insert(&mut self, key: u64, value: u64) -> Result<()> {
        self.guarded(|ix| ix.upsert(key, value))
    }

    /// Removes `key`; returns whether it was present. Durable when this returns `Ok`.
    pub fn remove(&mut self, key: u64) -> Result<bool> {
        self.guarded(|ix| ix.delete(key))
    }

    fn guarded<T>(&mut self, op: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        if let Some(why) = &self.poisoned {
            return Err(Error::Poisoned(why.clone()));
        }
        let result = op(self);
        if let Err(e) = &result
            && !matches!(e, Error::ResourceExhausted(_))
        {
            self.poisoned = Some(e.to_string());
        }
        result
    }

    fn upsert(&mut self, key: u64, value: u64) -> Result<()> {
        if let Some((loc, _)) = self.find(key)? {
            // In-place update: the value word is one aligned 8 B store, never torn.
            let at = slot_off(loc.bucket, loc.slot) + 8;
            self.pm.store_u64_atomic(at, value)?;
            return self.pm.persist(at, 8);
        }
        let h = hash(key);
        loop {
            let (seg, y) = self.locate(h);
            if self.place(seg, y, h, key, value)? {
                self.len += 1;
                return Ok(());
            }
            self.split(seg)?;
        }
    }

    fn delete(&mut self, key: u64) -> Result<bool> {
        let Some((loc, _)) = self.find(key)? else {
            return Ok(false);
        };
        let hdr = self.header(loc.bucket)?;
        self.commit_header(loc.bucket, hdr.with_bit(loc.slot, false))?;
        if let Some(home) = loc.stash_home {
            let hh = self.header(home)?;
            self.commit_header(home, hh.with_overflow(hh.overflow().saturating_sub(1)))?;
        }
        self.len -= 1;
        Ok(true)
    }

    /// Stores a bucket header word (8 B atomic) and persists it.
    pub(super) fn commit_header(&self, b: u64, hdr: Header) -> Result<()> {
        self.pm.store_u64_atomic(b, hdr.0)?;
        self.pm.persist(b, 8)
    }

    /// Live keys.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Global depth of the directory.
    pub fn global_depth(&self) -> u64 {
        self.depth
    }

    /// Segments in use.
    pub fn segments(&self) -> u64 {
        self.segs.len() as u64
    }

    /// Slots of all segments (normal and stash buckets, 14 each).
    pub fn capacity(&self) -> u64 {
        self.segments() * self.geo.seg_slots()
    }

    /// Live keys ÷ slots.
    pub fn load_factor(&self) -> f64 {
        self.len as f64 / self.capacity() as f64
    }

    /// DRAM held: the directory mirror and the segment-depth map (all records and metadata are in PM).
    pub fn dram_bytes(&self) -> u64 {
        (self.dir.capacity() * 8 + self.segs.len() * 3 * 8 + size_of::<Self>()) as u64
    }

    /// PM allocated: superblock, directories (old ones are not reclaimed) and segments up to the heap end.
    pub fn pm_bytes_used(&self) -> u64 {
        self.heap_end
    }

    pub fn stats(&self) -> DashStats {
        self.stats
    }
}

/// Offset of slot `s` of the bucket at `b`.
pub(super) fn slot_off(b: u64, s: usize) -> u64 {
    b + SLOT_OFF + SLOT_BYTES * s as u64
}

/// Bytes of a directory of global depth `g`, rounded up to whole XPLines.
pub(super) fn dir_span(g: u64) -> u64 {
    ((8u64 << g).div_ceil(XPLINE)) * XPLINE
}
