//! A static ISAM index over a sorted array of `u64` keys: the search structure of the dynamized family's
//! in-memory shards.
//!
//! The keys stay in their own sorted array (the shard's records); the index adds levels of separator keys
//! built bottom-up: level 0 holds the first key of every node of [`FANOUT`] keys, level 1 the first key of
//! every [`FANOUT`] level-0 entries, and so on up to a root of at most [`FANOUT`] entries. A search walks down
//! the levels with a linear scan of one [`FANOUT`]-entry node per level (16 × 8 B = two cache lines), then one
//! leaf node of the array.
//!
//! Invariants: the keys are sorted ascending (duplicates allowed); `levels[0][j] = keys[j·F]`;
//! `levels[l+1][j] = levels[l][j·F]`; the last level has at most F entries.
//! Cost: build O(n) time, about n/(F−1) extra keys of memory; `lower_bound`/`upper_bound` O(F · log_F n).

/// Keys per node.
pub const FANOUT: usize = 16;

/// Separator levels over a sorted key array.
#[derive(Debug, Clone, Default)]
pub struct IsamIndex {
    /// `levels[0]` is just above the keys; the last level is the root.
    levels: Vec<Vec<u64>>,
    len: usize,
}

impl IsamIndex {
    /// Builds the levels over `keys`, which must be sorted ascending (checked in debug builds).
    pub fn build(keys: &[u64]) -> IsamIndex {
        debug_assert!(keys.is_sorted(), "ISAM keys must be sorted");
        let mut levels = Vec::new();
        let mut below: Vec<u64> = keys.iter().step_by(FANOUT).copied().collect();
        while !below.is_empty() {
            let next: Vec<u64> = if below.len() <= FANOUT {
                Vec::new()
            } else {
                below.iter().step_by(FANOUT).copied().collect()
            };
            levels.push(below);
            below = next;
        }
        IsamIndex {
            levels,
            len: keys.len(),
        }
    }

    /// Extra memory of the separator levels, in bytes.
    pub fn memory_bytes(&self) -> usize {
        self.levels.iter().map(|l| l.len() * 8).sum()
    }

    /// The first position `i` with `keys[i] >= key` (`keys.len()` if none). `keys` must be the array the index
    /// was built over.
    pub fn lower_bound(&self, keys: &[u64], key: u64) -> usize {
        self.search(keys, |k| k < key)
    }

    /// The first position `i` with `keys[i] > key` (`keys.len()` if none).
    pub fn upper_bound(&self, keys: &[u64], key: u64) -> usize {
        self.search(keys, |k| k <= key)
    }

    /// [`lower_bound`](Self::lower_bound) of every key of `targets`, into `out` (one position per target,
    /// appended). The searches go breadth-first: level by level, every target takes its step and asks the
    /// CPU for the node it will read on the next level, so the cache misses of all the searches overlap
    /// instead of following one another (a lone search waits on one miss per level).
    pub fn lower_bound_many(&self, keys: &[u64], targets: &[u64], out: &mut Vec<usize>) {
        debug_assert_eq!(
            keys.len(),
            self.len,
            "an ISAM index searched over another array"
        );
        let first = out.len();
        out.resize(first + targets.len(), 0);
        let starts = &mut out[first..];
        // Asks for the node at `start` of `level` (the keys below the last level): FANOUT keys, two lines.
        let prefetch = |level: Option<&Vec<u64>>, start: usize| {
            let entries: &[u64] = level.map_or(keys, |l| l.as_slice());
            for at in [start, start + FANOUT / 2] {
                if let Some(e) = entries.get(at) {
                    crate::algo::prefetch_line(e);
                }
            }
        };
        for (depth, level) in self.levels.iter().enumerate().rev() {
            let next = depth.checked_sub(1).map(|d| &self.levels[d]);
            for (start, &key) in starts.iter_mut().zip(targets) {
                let end = (*start + FANOUT).min(level.len());
                let mut j = *start;
                while j < end && level[j] < key {
                    j += 1;
                }
                *start = j.saturating_sub(1) * FANOUT;
                prefetch(next, *start);
            }
        }
        for (start, &key) in starts.iter_mut().zip(targets) {
            let end = (*start + FANOUT).min(keys.len());
            let mut i = *start;
            while i < end && keys[i] < key {
                i += 1;
            }
            *start = i;
        }
    }

    /// The first position whose key fails `before` (keys for which `before` holds form a prefix).
    fn search(&self, keys: &[u64], before: impl Fn(u64) -> bool) -> usize {
        debug_assert_eq!(
            keys.len(),
            self.len,
            "an ISAM index searched over another array"
        );
        // Node = a run of up to FANOUT entries starting at `start` on the current level. At each level, find
        // the last entry that is still `before` the target: the target lies in that entry's child node (or at
        // the node's start if no entry qualifies).
        let mut start = 0usize;
        for level in self.levels.iter().rev() {
            let end = (start + FANOUT).min(level.len());
            let mut j = start;
            while j < end && before(level[j]) {
                j += 1;
            }
            // Entry j−1 is the last one before the target; descend into its node on the level below. Below the
            // root, a node's first entry repeats its parent's separator, which was before the target, so
            // j > start there; at the root j = 0 means the target precedes every key.
            start = j.saturating_sub(1) * FANOUT;
        }
        let end = (start + FANOUT).min(keys.len());
        let mut i = start;
        while i < end && before(keys[i]) {
            i += 1;
        }
        i
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn check(keys: &[u64], probes: &[u64]) {
        let idx = IsamIndex::build(keys);
        let mut many = vec![usize::MAX];
        idx.lower_bound_many(keys, probes, &mut many);
        let expected: Vec<usize> = probes
            .iter()
            .map(|&p| keys.partition_point(|&k| k < p))
            .collect();
        assert_eq!(many[0], usize::MAX, "lower_bound_many appends");
        assert_eq!(many[1..], expected[..], "lower_bound_many");
        for &p in probes {
            assert_eq!(
                idx.lower_bound(keys, p),
                keys.partition_point(|&k| k < p),
                "lower_bound({p})"
            );
            assert_eq!(
                idx.upper_bound(keys, p),
                keys.partition_point(|&k| k <= p),
                "upper_bound({p})"
            );
        }
    }

    #[test]
    fn sizes_around_node_boundaries() {
        for n in [
            0usize, 1, 2, 15, 16, 17, 255, 256, 257, 4095, 4096, 4097, 70_000,
        ] {
            let keys: Vec<u64> = (0..n as u64).map(|i| i * 3 + 10).collect();
            let mut probes: Vec<u64> = vec![0, 9, 10, 11, u64::MAX];
            probes.extend(
                (0..n as u64)
                    .step_by(97)
                    .flat_map(|i| [i * 3 + 9, i * 3 + 10, i * 3 + 11]),
            );
            probes.push(n as u64 * 3 + 10);
            check(&keys, &probes);
        }
        let idx = IsamIndex::build(&(0..70_000).collect::<Vec<u64>>());
        // 70 000 keys: 4375 + 274 + 18 + 2 separators.
        assert_eq!(idx.memory_bytes(), (4375 + 274 + 18 + 2) * 8);
    }

    #[test]
    fn duplicate_keys() {
        let mut keys = vec![5u64; 40];
        keys.extend(vec![7u64; 33]);
        keys.extend(vec![9u64; 17]);
        check(&keys, &[0, 5, 6, 7, 8, 9, 10]);
    }

    proptest! {
        #[test]
        fn matches_binary_search(mut keys in prop::collection::vec(0u64..2000, 0..3000), probes in prop::collection::vec(0u64..2100, 1..50)) {
            keys.sort_unstable();
            check(&keys, &probes);
        }
    }
}
