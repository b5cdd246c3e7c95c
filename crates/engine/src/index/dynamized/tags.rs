//! Delete tags: one bit per record of a shard, set in place when the record is deleted or overwritten under
//! the tagging delete policy. Shards are immutable; their tags are the only state that changes, so they live
//! beside the shard in atomics that readers load without locks.
//!
//! Invariant: a bit once set is never cleared (a tagged record is dropped by the next merge of its shard).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// A bitmap of tagged records.
#[derive(Debug, Default)]
pub struct TagBits {
    words: Box<[AtomicU64]>,
    count: AtomicUsize,
}

impl TagBits {
    /// No record tagged, room for `len` records.
    pub fn new(len: usize) -> TagBits {
        TagBits {
            words: (0..len.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
            count: AtomicUsize::new(0),
        }
    }

    /// Tags record `i`; returns false if it was tagged already.
    pub fn set(&self, i: usize) -> bool {
        let bit = 1u64 << (i % 64);
        let old = self.words[i / 64].fetch_or(bit, Ordering::AcqRel);
        let fresh = old & bit == 0;
        if fresh {
            self.count.fetch_add(1, Ordering::AcqRel);
        }
        fresh
    }

    /// True if record `i` is tagged.
    #[inline]
    pub fn get(&self, i: usize) -> bool {
        match self.words.get(i / 64) {
            Some(w) => w.load(Ordering::Acquire) & (1u64 << (i % 64)) != 0,
            None => false,
        }
    }

    /// A copy of every bit word (bit `i % 64` of word `i / 64` is record `i`).
    pub fn bits(&self) -> Vec<u64> {
        self.words
            .iter()
            .map(|w| w.load(Ordering::Acquire))
            .collect()
    }

    /// Tagged records.
    pub fn count(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    /// Tagged records among `lo..hi`.
    pub fn count_in(&self, lo: usize, hi: usize) -> usize {
        if lo >= hi || self.count() == 0 {
            return 0;
        }
        let mut n = 0;
        let (first, last) = (lo / 64, (hi - 1) / 64);
        for w in first..=last {
            let mut bits = self.words[w].load(Ordering::Acquire);
            if w == first {
                bits &= u64::MAX << (lo % 64);
            }
            if w == last && !hi.is_multiple_of(64) {
                bits &= u64::MAX >> (64 - hi % 64);
            }
            n += bits.count_ones() as usize;
        }
        n
    }

    /// A copy of the bits of records `lo..hi`, so that one query reads every bit once.
    pub fn snapshot(&self, lo: usize, hi: usize) -> TagSnapshot {
        if lo >= hi || self.count() == 0 {
            return TagSnapshot::default();
        }
        let (first, last) = (lo / 64, (hi - 1) / 64);
        TagSnapshot {
            lo,
            hi,
            first_word: first,
            words: self.words[first..=last]
                .iter()
                .map(|w| w.load(Ordering::Acquire))
                .collect(),
        }
    }

    /// Indexes of the tagged records, ascending.
    pub fn tagged(&self) -> Vec<u64> {
        let mut out = Vec::with_capacity(self.count());
        for (w, word) in self.words.iter().enumerate() {
            let mut bits = word.load(Ordering::Acquire);
            while bits != 0 {
                out.push(w as u64 * 64 + u64::from(bits.trailing_zeros()));
                bits &= bits - 1;
            }
        }
        out
    }

    /// Bytes of memory.
    pub fn memory_bytes(&self) -> usize {
        self.words.len() * 8
    }
}

/// Tag bits of a range of records, read once.
#[derive(Debug, Clone, Default)]
pub struct TagSnapshot {
    lo: usize,
    hi: usize,
    first_word: usize,
    words: Vec<u64>,
}

impl TagSnapshot {
    /// True if record `i` (in the snapshot's range) was tagged.
    pub fn get(&self, i: usize) -> bool {
        (self.lo..self.hi).contains(&i)
            && self
                .words
                .get(i / 64 - self.first_word)
                .is_some_and(|w| w & (1u64 << (i % 64)) != 0)
    }

    /// Tagged records in the snapshot's range.
    pub fn count(&self) -> usize {
        let (lo, hi) = (self.lo, self.hi);
        let last = self.words.len().saturating_sub(1);
        self.words
            .iter()
            .enumerate()
            .map(|(n, &w)| {
                let mut bits = w;
                if n == 0 {
                    bits &= u64::MAX << (lo % 64);
                }
                if n == last && !hi.is_multiple_of(64) {
                    bits &= u64::MAX >> (64 - hi % 64);
                }
                bits.count_ones() as usize
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_in_ranges_match_a_naive_count() {
        let t = TagBits::new(300);
        for i in [0, 5, 63, 64, 65, 127, 128, 200, 299] {
            assert!(t.set(i));
        }
        assert!(!t.set(5));
        assert_eq!(t.count(), 9);
        for lo in 0..300 {
            for hi in [lo, lo + 1, lo + 63, lo + 64, lo + 65, 300] {
                let hi = hi.min(300);
                let naive = (lo..hi).filter(|&i| t.get(i)).count();
                assert_eq!(t.count_in(lo, hi), naive, "{lo}..{hi}");
                let snap = t.snapshot(lo, hi);
                assert_eq!(snap.count(), naive, "snapshot {lo}..{hi}");
                assert!((0..300).all(|i| snap.get(i) == ((lo..hi).contains(&i) && t.get(i))));
            }
        }
        assert_eq!(t.tagged(), vec![0, 5, 63, 64, 65, 127, 128, 200, 299]);
    }
}
