//! [`CcehIndex`]: creation, lookups, upserts and removes over the segment format of `layout`.

use std::collections::BTreeMap;

use super::layout::{
    EMPTY, Geometry, LINE_SLOTS, SB_EMPTY_KEY_PRESENT, SB_EMPTY_KEY_VALUE, SB_ROOT, SLOT_BYTES,
    SUPER_BYTES, corruption, dir_index, hash1, hash2, le, prefix,
};
use crate::error::{Error, Result};
use crate::index::hash::dash::eh::{dir_bytes, format_segments};
use crate::storage::pm::{CACHE_LINE, Pm};

/// How [`CcehIndex::create`] lays out a region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CcehConfig {
    /// Slot lines (64 B, 4 slots) per segment: a power of two in 4..=4096 (CCEH: 256, i.e. 16 KiB).
    pub segment_lines: u64,
    /// Lines per probe run (CCEH: 8; Dash's copy of CCEH and this default: 4, one XPLine's worth).
    pub run_lines: u64,
    /// Global depth at creation: the index starts with `2^initial_depth` segments.
    pub initial_depth: u64,
}

impl Default for CcehConfig {
    fn default() -> Self {
        CcehConfig {
            segment_lines: 256,
            run_lines: 4,
            initial_depth: 0,
        }
    }
}

/// Event counters (DRAM only, reset by `open`).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct CcehStats {
    /// Segment splits, and directory doublings among them.
    pub splits: u64,
    pub doublings: u64,
    /// Inserts that reused a slot holding a record left behind by a split (stale by its local depth).
    pub stale_reused: u64,
    /// Highest load factor (keys ÷ slots of all segments) seen just before a split.
    pub peak_load_before_split: f64,
    /// Interrupted splits the last recovery finished.
    pub recovered_splits: u64,
}

/// What a probe of a key's two runs found: the slot holding the key and its value, and (when asked for)
/// the first free slot — empty, or holding a record stale by the segment's local depth.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Probe {
    pub found: Option<(u64, u64)>,
    pub free: Option<(u64, bool)>,
}

/// A CCEH-style extendible hash index of `u64 → u64` over a PM region (module docs of `cceh`).
#[derive(Debug)]
pub struct CcehIndex<P: Pm> {
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
    pub(super) stats: CcehStats,
    /// Set when a write failed part-way: writes are refused until the region is reopened.
    pub(super) poisoned: Option<String>,
}

impl<P: Pm> CcehIndex<P> {
    /// Formats `pm` as an empty index with `2^initial_depth` segments (earlier contents are ignored).
    pub fn create(pm: P, config: CcehConfig) -> Result<Self> {
        let geo = Geometry {
            seg_lines: config.segment_lines,
            run_lines: config.run_lines,
            region_len: pm.len(),
        };
        geo.validate(pm.len())?;
        let g = config.initial_depth;
        // Segments and directory first, persisted; the superblock last (an unfinished create fails to open).
        let dir_off = SUPER_BYTES;
        let (dir, heap_end) = format_segments(&pm, &geo, dir_off, g)?;
        pm.write_nt(dir_off, &dir_bytes(dir.iter().copied(), g))?;
        pm.fence();
        pm.write(0, &[0u8; SUPER_BYTES as usize])?;
        geo.write(&pm)?;
        pm.write_u64(SB_ROOT, dir_off | g)?;
        pm.persist(0, SUPER_BYTES)?;
        Ok(CcehIndex {
            segs: dir.iter().map(|&s| (s, g)).collect(),
            pm,
            geo,
            dir_off,
            depth: g,
            dir,
            heap_end,
            len: 0,
            stats: CcehStats::default(),
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

    /// Segment offset of the key with first hash `h1`.
    pub(super) fn locate(&self, h1: u64) -> u64 {
        self.dir[dir_index(h1, self.depth) as usize]
    }

    /// Probes the two runs of `key` (hashes `h1`, `h2`) in the segment at `seg`, line by line, and stops
    /// at the key. With `free = Some((pattern, depth))` (the segment's), also notes the first slot that is
    /// empty or holds a record whose hash prefix is not the pattern (left behind by a split).
    pub(super) fn probe(
        &self,
        seg: u64,
        key: u64,
        h1: u64,
        h2: u64,
        free: Option<(u64, u64)>,
    ) -> Result<Probe> {
        let mut out = Probe::default();
        let mut line = [0u8; CACHE_LINE as usize];
        let [a, b] = self.geo.runs(h1, h2);
        let runs = if a == b { &[a][..] } else { &[a, b][..] };
        for &start in runs {
            for j in 0..self.geo.run_lines {
                let l = (start + j) & (self.geo.seg_lines - 1);
                let off = self.geo.slot_off(seg, l * LINE_SLOTS);
                self.pm.read(off, &mut line)?;
                for s in 0..LINE_SLOTS as usize {
                    let k = le(&line[16 * s..]);
                    let at = off + SLOT_BYTES * s as u64;
                    if k == key {
                        out.found = Some((at, le(&line[16 * s + 8..])));
                        return Ok(out);
                    }
                    if let (Some((pattern, depth)), None) = (free, out.free) {
                        if k == EMPTY {
                            out.free = Some((at, false));
                        } else if prefix(hash1(k), depth) != pattern {
                            out.free = Some((at, true));
                        }
                    }
                }
            }
        }
        Ok(out)
    }

    /// The value of `key`.
    pub fn get(&self, key: u64) -> Result<Option<u64>> {
        if key == EMPTY {
            return self.empty_key();
        }
        let h1 = hash1(key);
        let p = self.probe(self.locate(h1), key, h1, hash2(key), None)?;
        Ok(p.found.map(|(_, v)| v))
    }

    /// The value of the reserved key [`EMPTY`], kept in the superblock.
    pub(super) fn empty_key(&self) -> Result<Option<u64>> {
        match self.pm.load_u64_atomic(SB_EMPTY_KEY_PRESENT)? {
            0 => Ok(None),
            1 => Ok(Some(self.pm.load_u64_atomic(SB_EMPTY_KEY_VALUE)?)),
            w => Err(corruption(
                SB_EMPTY_KEY_PRESENT,
                format!("reserved-key flag {w:#x} (0 or 1)"),
            )),
        }
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

    /// Overwrites an 8 B word in place (aligned, so never torn) and persists it.
    fn store_persist(&self, at: u64, word: u64) -> Result<()> {
        self.pm.store_u64_atomic(at, word)?;
        self.pm.persist(at, 8)
    }

    fn upsert(&mut self, key: u64, value: u64) -> Result<()> {
        if key == EMPTY {
            let present = self.empty_key()?.is_some();
            self.store_persist(SB_EMPTY_KEY_VALUE, value)?;
            if !present {
                self.store_persist(SB_EMPTY_KEY_PRESENT, 1)?;
                self.len += 1;
            }
            return Ok(());
        }
        let (h1, h2) = (hash1(key), hash2(key));
        loop {
            let seg = self.locate(h1);
            let depth = self.segs.get(&seg).copied().unwrap_or(0);
            // The uniqueness check reads both runs whole unless the key is found.
            let p = self.probe(seg, key, h1, h2, Some((prefix(h1, depth), depth)))?;
            if let Some((at, _)) = p.found {
                return self.store_persist(at + 8, value);
            }
            if let Some((at, stale)) = p.free {
                // Value first, then the key word commits the record (8 B atomic store).
                self.store_persist(at + 8, value)?;
                self.store_persist(at, key)?;
                self.len += 1;
                self.stats.stale_reused += u64::from(stale);
                return Ok(());
            }
            self.split(seg)?;
        }
    }

    fn delete(&mut self, key: u64) -> Result<bool> {
        if key == EMPTY {
            if self.empty_key()?.is_none() {
                return Ok(false);
            }
            self.store_persist(SB_EMPTY_KEY_PRESENT, 0)?;
            self.len -= 1;
            return Ok(true);
        }
        let (h1, h2) = (hash1(key), hash2(key));
        let p = self.probe(self.locate(h1), key, h1, h2, None)?;
        let Some((at, _)) = p.found else {
            return Ok(false);
        };
        self.store_persist(at, EMPTY)?;
        self.len -= 1;
        Ok(true)
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

    /// Slots of all segments.
    pub fn capacity(&self) -> u64 {
        self.segments() * self.geo.slots()
    }

    /// Live keys ÷ slots.
    pub fn load_factor(&self) -> f64 {
        self.len as f64 / self.capacity() as f64
    }

    /// DRAM held: the directory mirror and the segment-depth map (all records are in PM).
    pub fn dram_bytes(&self) -> u64 {
        (self.dir.capacity() * 8 + self.segs.len() * 3 * 8 + size_of::<Self>()) as u64
    }

    /// PM allocated: superblock, directories (old ones are not reclaimed) and segments up to the heap end.
    pub fn pm_bytes_used(&self) -> u64 {
        self.heap_end
    }

    pub fn stats(&self) -> CcehStats {
        self.stats
    }
}
