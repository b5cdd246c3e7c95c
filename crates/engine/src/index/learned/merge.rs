//! Group merges: two adjacent groups that became small (after removals, or a skewed split) become one.
//!
//! A merge is a two-phase compaction of two groups at once (see `compact.rs`), under the `structure`
//! mutex. Merging groups `A` and `B` (`B` right after `A`):
//! 1. **Phase 1** (writes go on): give `A` and `B` *the same* temporary buffer `T`, then close their
//!    buffers: new keys of either range now go to `T`, through either old group. Mark dead the removed
//!    records no snapshot can read and build one array of references to the live records of `A`'s array
//!    and closed buffer followed by `B`'s (all of `A`'s keys are below `B`'s pivot). The merged group
//!    takes `T` as its buffer, so an insert that landed in `T` through an old group is in the merged
//!    group's buffer too — none is lost. Publish a new root with one group fewer (pivot: `A`'s).
//! 2. **Phase 2**: as a compaction's — move each old record's chain into its reference, mark it `MOVED`;
//!    then retire `A`, `B` and the old root through the epoch.
//!
//! Because `T` is shared, an old group's temporary buffer may hold keys of the other group's range: reads
//! find keys exactly (unaffected) and scans clip every group to its own range (`scan.rs`).
//!
//! Trigger ([`LearnedIndex::merge_if_small`], from background maintenance): the two groups' estimated
//! live records ([`Group::live_estimate`]) are at most [`LearnedOptions::merge_threshold`] (at most
//! `group_size`), and their arrays and buffers together (live, removed or dead) at most `max_group`, so a
//! merged group is not split again right away (removed records a snapshot still reads stay in arrays:
//! without the second bound, merges and splits of such groups could follow each other forever).
//!
//! Cost: O(records of both groups); one new root (its RMI retrained over the pivots).
//!
//! [`LearnedOptions::merge_threshold`]: super::LearnedOptions::merge_threshold

use super::buffer::Buffer;
use super::compact::{merge_live, reference};
use super::core::LearnedIndex;
use super::group::Group;
use crossbeam_epoch::Guard;
use std::sync::Arc;
use std::sync::atomic::Ordering;

impl LearnedIndex {
    /// Merges groups `i` and `i + 1` of the current root if together they are small enough; whether it
    /// did. The caller holds `structure`.
    pub(super) fn merge_if_small(&self, i: usize, guard: &Guard) -> bool {
        let threshold = self.opts.merge_threshold();
        let root = self.root(guard);
        let (Some((_, a)), Some((_, b))) = (root.group(i, guard), root.group(i + 1, guard)) else {
            return false;
        };
        if threshold == 0
            || a.live_estimate() + b.live_estimate() > threshold
            || a.size_bound() + b.size_bound() > self.opts.max_group
        {
            return false;
        }
        self.merge_locked(i, guard);
        true
    }

    /// Merges groups `i` and `i + 1` of the current root into one (see the module doc). The caller holds
    /// `structure`.
    pub(super) fn merge_locked(&self, i: usize, guard: &Guard) {
        let root = self.root(guard);
        let (Some((_, a)), Some((_, b))) = (root.group(i, guard), root.group(i + 1, guard)) else {
            return;
        };
        let pivot = root.pivots.get(i).copied().unwrap_or(0);

        // Phase 1: one temporary buffer for both, set before either buffer closes.
        let tmp = Arc::new(Buffer::new(&self.recycler));
        for g in [a, b] {
            let _ = g.tmp.set(tmp.clone());
        }
        for g in [a, b] {
            g.buffer.close();
        }
        let horizon = self.gc_horizon();
        let (mut keys, mut targets) = merge_live(a, horizon, guard);
        let (keys_b, targets_b) = merge_live(b, horizon, guard);
        keys.extend(keys_b);
        targets.extend(targets_b);
        let slots = targets.iter().map(|&t| reference(t)).collect();
        let merged = Group::new(&self.arena, keys, slots, tmp);

        self.counters.merges.fetch_add(1, Ordering::Relaxed);
        self.publish(i, 2, vec![(pivot, merged)], guard);
    }
}
