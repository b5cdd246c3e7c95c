//! The DRAM mirror of the directory: offset and global depth of the PM directory, and one atomic word per
//! entry — segment offset `|` [`STALE`] when the entry's crash version in PM is not the current one (the
//! segment may still need its lazy repair). A mirror is replaced whole (through an `ArcSwap`) only by a
//! doubling; entries change in place, by splits and repairs, under the index's structure mutex. Readers
//! load it without locks.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};

use super::layout::{dir_index, entry_seg};

/// Mirror-entry flag: the segment this entry names may not be repaired since the last crash.
pub const STALE: u64 = 1;

/// A directory mirror (module docs).
#[derive(Debug)]
pub struct Dir {
    /// Offset of the PM directory and global depth.
    pub off: u64,
    pub depth: u64,
    entries: Box<[AtomicU64]>,
}

impl Dir {
    /// A mirror of `entries` (segment offsets, each with [`STALE`] or not).
    pub fn new(off: u64, depth: u64, entries: impl IntoIterator<Item = u64>) -> Dir {
        Dir {
            off,
            depth,
            entries: entries.into_iter().map(AtomicU64::new).collect(),
        }
    }

    /// The entry of hash `h`.
    #[inline]
    pub fn index(&self, h: u64) -> usize {
        dir_index(h, self.depth) as usize
    }

    /// Segment offset of entry `i` and whether it is stale.
    #[inline]
    pub fn get(&self, i: usize) -> (u64, bool) {
        let e = self.entries[i].load(Ordering::Acquire);
        (entry_seg(e), e & STALE != 0)
    }

    /// Segment of hash `h` and whether its entry is stale.
    #[inline]
    pub fn lookup(&self, h: u64) -> (u64, bool) {
        self.get(self.index(h))
    }

    /// Sets entry `i` (release ordering: what the caller wrote before is visible to whoever sees it).
    pub fn set(&self, i: usize, seg: u64, stale: bool) {
        self.entries[i].store(seg | (u64::from(stale) * STALE), Ordering::Release);
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The mirror of a doubled directory at `off` (every entry twice).
    pub fn doubled(&self, off: u64) -> Dir {
        let raw = (0..self.len()).map(|i| self.entries[i].load(Ordering::Acquire));
        Dir::new(off, self.depth + 1, raw.flat_map(|e| [e, e]))
    }

    /// The distinct segments named, in offset order.
    pub fn segments(&self) -> BTreeSet<u64> {
        (0..self.len()).map(|i| self.get(i).0).collect()
    }

    /// Entry indexes that are stale.
    pub fn stale(&self) -> Vec<usize> {
        (0..self.len()).filter(|&i| self.get(i).1).collect()
    }

    /// The segment offsets of every entry, in order.
    pub fn segs_by_entry(&self) -> Vec<u64> {
        (0..self.len()).map(|i| self.get(i).0).collect()
    }
}
