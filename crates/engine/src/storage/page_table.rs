//! `PageTable`: the buffer pool's map from page id to frame, read without locks.
//!
//! A three-level radix tree over the page id (10 + 10 + 12 bits, so ids below 2^32) whose leaves are arrays
//! of `AtomicU32` holding `frame + 1` (0: not cached). Levels are allocated on first use and live until the
//! table is dropped; an empty table costs one 16 KiB top level, and each leaf covers 4,096 consecutive page
//! ids in 16 KiB.
//!
//! ## Invariants
//! * Writers ([`set`](PageTable::set), [`clear`](PageTable::clear)) are serialized by the caller (the pool's
//!   replacement mutex); readers ([`get`](PageTable::get)) run at any time. A store is `Release` and a load
//!   `Acquire`, so a reader that finds a frame also sees what the writer did before mapping it.
//! * A reader's answer may be stale by the time it uses it: the pool validates it against the frame's own
//!   page id after pinning.
//!
//! ## Cost
//! A lookup is three dependent loads (two of them into small, hot arrays); no hashing, no lock, no write.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

const LEAF_BITS: u32 = 12;
const MID_BITS: u32 = 10;
const TOP_BITS: u32 = 10;
const LEAF_LEN: usize = 1 << LEAF_BITS;
const MID_LEN: usize = 1 << MID_BITS;
const TOP_LEN: usize = 1 << TOP_BITS;

/// Page ids the table can map: `0..ID_LIMIT`.
pub const ID_LIMIT: u64 = 1 << (LEAF_BITS + MID_BITS + TOP_BITS);

type Leaf = Box<[AtomicU32]>;
type Mid = Box<[OnceLock<Leaf>]>;

/// Page id → frame index (see the module doc).
pub struct PageTable {
    top: Box<[OnceLock<Mid>]>,
}

impl Default for PageTable {
    fn default() -> Self {
        PageTable {
            top: (0..TOP_LEN).map(|_| OnceLock::new()).collect(),
        }
    }
}

/// The (top, mid, leaf) indexes of a page id below [`ID_LIMIT`].
#[inline]
fn split(id: u64) -> (usize, usize, usize) {
    let leaf = (id as usize) & (LEAF_LEN - 1);
    let mid = ((id >> LEAF_BITS) as usize) & (MID_LEN - 1);
    let top = (id >> (LEAF_BITS + MID_BITS)) as usize;
    (top, mid, leaf)
}

impl PageTable {
    /// The frame holding page `id`, if the table maps it.
    #[inline]
    pub fn get(&self, id: u64) -> Option<usize> {
        if id >= ID_LIMIT {
            return None;
        }
        let (t, m, l) = split(id);
        let slot = self.top[t].get()?[m].get()?[l].load(Ordering::Acquire);
        slot.checked_sub(1).map(|f| f as usize)
    }

    /// Maps page `id` (below [`ID_LIMIT`]) to `frame`. Callers serialize writes.
    pub fn set(&self, id: u64, frame: usize) {
        assert!(id < ID_LIMIT, "page id {id} beyond the page table");
        let value = u32::try_from(frame + 1).expect("frame index fits in u32");
        let (t, m, l) = split(id);
        let mid = self.top[t].get_or_init(|| (0..MID_LEN).map(|_| OnceLock::new()).collect());
        let leaf = mid[m].get_or_init(|| (0..LEAF_LEN).map(|_| AtomicU32::new(0)).collect());
        leaf[l].store(value, Ordering::Release);
    }

    /// Unmaps page `id`. Callers serialize writes.
    pub fn clear(&self, id: u64) {
        if id >= ID_LIMIT {
            return;
        }
        let (t, m, l) = split(id);
        if let Some(leaf) = self.top[t].get().and_then(|mid| mid[m].get()) {
            leaf[l].store(0, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_and_unmaps_across_levels() {
        let t = PageTable::default();
        let ids = [
            0,
            1,
            4095,
            4096,
            (1 << 22) - 1,
            1 << 22,
            ID_LIMIT - 1,
            123_456_789,
        ];
        for (i, &id) in ids.iter().enumerate() {
            assert_eq!(t.get(id), None);
            t.set(id, i * 1000);
        }
        for (i, &id) in ids.iter().enumerate() {
            assert_eq!(t.get(id), Some(i * 1000), "id {id}");
        }
        assert_eq!(t.get(2), None);
        assert_eq!(t.get(ID_LIMIT), None);
        assert_eq!(t.get(u64::MAX), None);
        t.clear(4096);
        t.clear(u64::MAX);
        t.clear(5_000_000_000 % ID_LIMIT + 7);
        assert_eq!(t.get(4096), None);
        assert_eq!(t.get(4095), Some(2000));
        t.set(4095, 0);
        assert_eq!(t.get(4095), Some(0));
    }

    #[test]
    #[should_panic(expected = "beyond the page table")]
    fn ids_beyond_the_limit_are_refused() {
        PageTable::default().set(ID_LIMIT, 1);
    }
}
