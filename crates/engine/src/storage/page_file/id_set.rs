//! [`IdSet`]: a set of page ids as a bitmap, for the page file's `free` and `pending` sets.
//!
//! Why not a `BTreeSet`: every insert and removal of a B-tree set may allocate or free a node, and the
//! sets are changed by two threads — the writer (`allocate`, `free`) and the checkpoint thread (a commit's
//! `finish_commit` returns its released pages to `free`). With glibc a block goes back to the arena of the
//! thread that allocated it, under that arena's lock, so the writer popping a node the checkpoint thread
//! allocated (or the reverse) waited for the other thread's arena lock whenever that thread was preempted
//! inside `malloc`/`free` (the B+-tree's `BufferPool::free`/`allocate` in the `write_stalls` probe). A
//! bitmap allocates only when the page count outgrows it (doubling: O(log n) times over a file's life) and
//! changes no heap block otherwise.
//!
//! Invariants: bit `id` of `words` is set iff `id` is in the set; `len` counts the set bits; every word below
//! `lowest` is zero (a hint: the first set bit is at or after it).
//! Cost: `insert`, `remove`, `contains`: O(1) (an insert beyond the bitmap grows it, amortised O(1));
//! `pop_first`: O(words skipped), amortised O(1) over a run of pops as `lowest` only moves up; iteration:
//! O(page count / 64). Memory: one bit per page id below the highest id ever inserted.

use crate::storage::page::PageId;

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct IdSet {
    words: Vec<u64>,
    len: usize,
    lowest: usize,
}

impl IdSet {
    pub fn len(&self) -> usize {
        self.len
    }

    fn split(id: PageId) -> (usize, u64) {
        ((id / 64) as usize, 1u64 << (id % 64))
    }

    pub fn contains(&self, id: PageId) -> bool {
        let (w, bit) = Self::split(id);
        self.words.get(w).is_some_and(|&x| x & bit != 0)
    }

    /// Adds `id`; whether it was absent.
    pub fn insert(&mut self, id: PageId) -> bool {
        let (w, bit) = Self::split(id);
        if w >= self.words.len() {
            // Doubling, so a growing file reallocates the bitmap O(log n) times.
            let want = (w + 1).max(2 * self.words.len()).max(16);
            self.words.resize(want, 0);
        }
        let Some(x) = self.words.get_mut(w) else {
            return false;
        };
        if *x & bit != 0 {
            return false;
        }
        *x |= bit;
        self.len += 1;
        self.lowest = self.lowest.min(w);
        true
    }

    /// Removes `id`; whether it was present.
    pub fn remove(&mut self, id: PageId) -> bool {
        let (w, bit) = Self::split(id);
        match self.words.get_mut(w) {
            Some(x) if *x & bit != 0 => {
                *x &= !bit;
                self.len -= 1;
                true
            }
            _ => false,
        }
    }

    /// Removes and returns the smallest id.
    pub fn pop_first(&mut self) -> Option<PageId> {
        if self.len == 0 {
            return None;
        }
        while let Some(&x) = self.words.get(self.lowest) {
            if x != 0 {
                let id = self.lowest as u64 * 64 + u64::from(x.trailing_zeros());
                self.remove(id);
                return Some(id);
            }
            self.lowest += 1;
        }
        None
    }

    /// The ids in increasing order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = PageId> + '_ {
        self.words
            .iter()
            .enumerate()
            .skip(self.lowest)
            .flat_map(|(w, &x)| {
                (0..64)
                    .filter(move |b| x & (1u64 << b) != 0)
                    .map(move |b| w as u64 * 64 + b)
            })
    }

    /// Empties the set, returning its ids in increasing order (the bitmap keeps its memory).
    pub fn drain_to_vec(&mut self) -> Vec<PageId> {
        let ids: Vec<PageId> = self.iter().collect();
        let from = self.lowest.min(self.words.len());
        if let Some(words) = self.words.get_mut(from..) {
            words.fill(0);
        }
        self.len = 0;
        self.lowest = self.words.len();
        ids
    }
}

impl Extend<PageId> for IdSet {
    fn extend<I: IntoIterator<Item = PageId>>(&mut self, ids: I) {
        for id in ids {
            self.insert(id);
        }
    }
}

impl FromIterator<PageId> for IdSet {
    fn from_iter<I: IntoIterator<Item = PageId>>(ids: I) -> Self {
        let mut s = IdSet::default();
        s.extend(ids);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// Against a `BTreeSet` model: a seeded random mix of inserts, removals and pops, with the iteration
    /// order, `len` and `contains` compared after every step.
    #[test]
    fn agrees_with_a_btreeset() {
        let mut s = IdSet::default();
        let mut m = BTreeSet::new();
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for step in 0..20_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let id = x % 3000;
            match x % 7 {
                0..=2 => assert_eq!(s.insert(id), m.insert(id)),
                3 | 4 => assert_eq!(s.remove(id), m.remove(&id)),
                5 => assert_eq!(s.pop_first(), m.pop_first()),
                _ => {
                    if step % 500 == 0 {
                        assert_eq!(
                            s.drain_to_vec(),
                            std::mem::take(&mut m).into_iter().collect::<Vec<_>>()
                        );
                    }
                }
            }
            assert_eq!(s.len(), m.len());
            assert_eq!(s.contains(id), m.contains(&id));
            if step % 97 == 0 {
                assert!(s.iter().eq(m.iter().copied()));
                assert!(s.iter().rev().take(5).eq(m.iter().rev().take(5).copied()));
            }
        }
    }
}
