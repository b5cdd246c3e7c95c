//! Structural changes: the two-phase compaction of a group, group splits and root retraining, and the
//! publication every structural change shares (merges of small groups, in `merge.rs`, use it too).
//!
//! One structural change at a time (the `structure` mutex). Compacting group `G`:
//! 1. **Phase 1** (writes go on): give `G` a temporary buffer, close `G`'s buffer (new keys now go to the
//!    temporary one; updates of existing records go on in place), mark dead the removed records no snapshot
//!    can read, and merge `G`'s array with its closed buffer into a new sorted array of *references* to the
//!    old records; train the new group's models. If it holds more than `max_group` records it is cut into
//!    equal groups of at least `group_size` (and at most `max_group`) records. One new group takes the temporary buffer as its buffer; several split its
//!    entries between new buffers after closing it (inserters that find it closed retry from the root,
//!    which they find republished moments later). Publish: swap the group pointer, or a new root with
//!    retrained models for a split. Writers through a reference lock it and then the old record, so an
//!    update through either group lands in the same old record: none is lost.
//! 2. **Phase 2**: per new record, under its lock and the old record's, move the value chain over and mark
//!    the old record `MOVED`; whoever later reaches the old record through the old group restarts from the
//!    root and finds the new one. Then retire `G` (and the old root) through the epoch.
//!
//! [`LearnedIndex::publish`] is the second half of every structural change: the pointer swap or new root,
//! phase 2 on the new groups and the retirement of the old ones.
//!
//! Cost: O(group records + buffered records) per compaction, one lock per removed record in phase 1 and
//! two per record in phase 2.

use super::buffer::Buffer;
use super::core::{LearnedIndex, owned_group};
use super::group::{Group, Root};
use super::slot::{DEAD, REMOVED, Slot};
use crossbeam_epoch::{self as epoch, Atomic, Guard, Owned, Shared};
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// Rounds of [`LearnedIndex::reclaim`]: each frees up to 8 bags of 64 objects once the epoch allows, so
/// 8,192 rounds reach about 4 million objects (a few milliseconds when there is nothing left).
pub(super) const RECLAIM_ROUNDS: usize = 8192;

impl LearnedIndex {
    /// Compacts every group whose buffers hold more than `compact_at` records, whose array is over
    /// `max_group` or that saw more than `compact_at` removals (and a quarter of its array), and merges
    /// adjacent groups that are small together (see `merge.rs`); returns how many changes it made.
    pub fn maintain(&self) -> usize {
        let done = self.maintain_pass();
        // Groups and roots replaced by earlier passes, released by the epoch since: freed here, not in
        // a foreground thread (see `retire.rs`).
        self.retired.free();
        self.arena.trim();
        self.recycler.top_up();
        done
    }

    /// Frees the replaced groups and roots the epoch released so far and makes delta-buffer memory ready
    /// for writers (`recycle.rs`): what [`maintain`](Self::maintain) does after its pass.
    pub fn free_released(&self) {
        self.retired.free();
        self.arena.trim();
        self.recycler.top_up();
    }

    fn maintain_pass(&self) -> usize {
        let _s = self.structure.lock();
        let mut done = 0;
        let mut i = 0;
        loop {
            // Groups writers are waiting for come first (a split there may shift the groups after it:
            // the pass then looks at one twice or skips one until the next pass).
            done += self.compact_urgent();
            let guard = epoch::pin();
            let root = self.root(&guard);
            let Some((_, g)) = root.group(i, &guard) else {
                return done;
            };
            let removes = g.removes.load(Ordering::Relaxed);
            if g.buffered() > self.opts.compact_at
                || g.keys.len() > self.opts.max_group
                || removes > self.opts.compact_at.max(g.keys.len() / 4)
            {
                i += self.compact_locked(i, &guard);
                done += 1;
            } else if self.merge_if_small(i, &guard) {
                // The merged group may merge again with its new right neighbour.
                done += 1;
            } else {
                i += 1;
            }
        }
    }

    /// Frees what earlier writes and compactions retired and no pinned thread can still read (replaced
    /// buffers, groups, roots, versions), as far as the epoch allows, so that later operations do not pay
    /// for it: crossbeam-epoch frees retired objects a few bags at a time from whichever thread pins next.
    /// Each round moves this thread's retired objects to the global queue and frees up to a few bags.
    pub fn reclaim(&self) {
        for _ in 0..RECLAIM_ROUNDS {
            epoch::pin().flush();
        }
        self.retired.free();
        self.arena.trim();
    }

    /// Compacts every group (dropping every removed record no snapshot reads).
    pub fn compact_all(&self) {
        let _s = self.structure.lock();
        let mut i = 0;
        loop {
            let guard = epoch::pin();
            let root = self.root(&guard);
            let Some((_, g)) = root.group(i, &guard) else {
                return;
            };
            let _ = g;
            i += self.compact_locked(i, &guard);
        }
    }

    /// After a writer added a record, if the key's group's buffer passed `inline_compact_at`: while a
    /// maintenance thread runs, queues the key for it (it compacts that group next) and wakes it, up to
    /// twice that bound; past it, or with no thread, compacts the group itself if no other compaction is
    /// under way. So a writer compacts (8–15 ms of its CPU for a full group at 10M keys) only when the
    /// thread fell behind by a whole `inline_compact_at` more records, not whenever its pass came late.
    pub(super) fn compact_if_overfull(&self, key: u64) {
        let guard = epoch::pin();
        let root = self.root(&guard);
        let i = root.locate(key);
        let at = self.opts.inline_compact_at;
        let Some(buffered) = root.group(i, &guard).map(|(_, g)| g.buffered()) else {
            return;
        };
        if buffered <= at {
            return;
        }
        if buffered <= at.saturating_mul(2)
            && let Some(thread) = &*self.maintainer.lock()
        {
            // Once when the bound is passed, and again every 256 records in case the queue was full.
            if buffered == at + 1 || buffered % 256 == 0 {
                let _ = self.urgent.push(key);
                thread.unpark();
            }
            return;
        }
        if let Some(_s) = self.structure.try_lock() {
            // The root may have changed before we got the lock.
            let root = self.root(&guard);
            let i = root.locate(key);
            if root
                .group(i, &guard)
                .is_some_and(|(_, g)| g.buffered() > at)
            {
                self.compact_locked(i, &guard);
                self.counters
                    .inline_compactions
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Compacts the groups of the keys writers queued (their buffers passed `inline_compact_at`); the caller
    /// holds `structure`. Returns how many it compacted.
    fn compact_urgent(&self) -> usize {
        let mut done = 0;
        while let Some(key) = self.urgent.pop() {
            let guard = epoch::pin();
            let root = self.root(&guard);
            let i = root.locate(key);
            if root
                .group(i, &guard)
                .is_some_and(|(_, g)| g.buffered() > self.opts.compact_at)
            {
                self.compact_locked(i, &guard);
                done += 1;
            }
        }
        done
    }

    /// Compacts group `i` of the current root (the caller holds `structure`); returns how many groups
    /// replaced it.
    fn compact_locked(&self, i: usize, guard: &Guard) -> usize {
        let root = self.root(guard);
        let Some((_, g)) = root.group(i, guard) else {
            return 1;
        };
        let pivot = root.pivots.get(i).copied().unwrap_or(0);

        // Phase 1.
        let tmp = Arc::new(Buffer::new(&self.recycler));
        let _ = g.tmp.set(tmp.clone());
        g.buffer.close();
        let horizon = self.gc_horizon();
        let (keys, targets) = merge_live(g, horizon, guard);

        // Parts of at least `group_size` (the remainder spread over them, not left as a small last
        // group: sorted appends then leave full groups behind) and at most `max_group` records.
        let parts = if keys.len() > self.opts.max_group {
            (keys.len() / self.opts.group_size).max(keys.len().div_ceil(self.opts.max_group))
        } else {
            1
        };
        let per = keys.len().div_ceil(parts).max(1);
        let mut built: Vec<(u64, Group)> = Vec::with_capacity(parts);
        if parts == 1 {
            let slots = targets.iter().map(|&t| reference(t)).collect();
            built.push((pivot, Group::new(&self.arena, keys, slots, tmp.clone())));
        } else {
            tmp.close();
            let pending = tmp.all(guard);
            for (c, (kc, tc)) in keys.chunks(per).zip(targets.chunks(per)).enumerate() {
                let lo = if c == 0 {
                    pivot
                } else {
                    kc.first().copied().unwrap_or(pivot)
                };
                let hi = keys.get((c + 1) * per).copied();
                let mine = pending
                    .iter()
                    .filter(|e| e.0 >= lo && hi.is_none_or(|h| e.0 < h))
                    .copied()
                    .collect();
                let buffer = Arc::new(Buffer::with_entries(
                    mine,
                    vec![tmp.clone()],
                    &self.recycler,
                ));
                let slots = tc.iter().map(|&t| reference(t)).collect();
                built.push((lo, Group::new(&self.arena, kc.to_vec(), slots, buffer)));
            }
        }

        if parts > 1 {
            self.counters.splits.fetch_add(1, Ordering::Relaxed);
        }
        self.counters.compactions.fetch_add(1, Ordering::Relaxed);
        self.publish(i, 1, built, guard)
    }

    /// Publishes `built` (groups of reference records, from phase 1) in place of the `replaced` groups of
    /// the current root from `i` on — one pointer swap when one group replaces one, else a new root with
    /// retrained models — then runs phase 2 on the new groups and retires the old groups (and root) through
    /// the epoch. The caller holds `structure`. Returns how many groups replaced the old ones.
    pub(super) fn publish(
        &self,
        i: usize,
        replaced: usize,
        mut built: Vec<(u64, Group)>,
        guard: &Guard,
    ) -> usize {
        let root_shared = self.root.load(Ordering::Acquire, guard);
        // SAFETY: the root is never null; it stays alive while we are pinned.
        let root = unsafe { root_shared.deref() };
        let count = built.len();
        let old: Vec<Shared<'_, Group>> = (i..i + replaced)
            .filter_map(|j| root.group(j, guard).map(|(shared, _)| shared))
            .collect();
        let new_groups: Vec<&Group> = if replaced == 1 && count == 1 {
            let Some(((_, group), slot)) = built.pop().zip(root.groups.get(i)) else {
                return count;
            };
            let new = Owned::new(group).into_shared(guard);
            slot.store(new, Ordering::Release);
            // SAFETY: just published, alive until retired by a later change under `structure`.
            vec![unsafe { new.deref() }]
        } else {
            let mut parts: Vec<(u64, Atomic<Group>)> =
                Vec::with_capacity(root.groups.len() + count);
            for (j, a) in root.groups.iter().enumerate() {
                if j == i {
                    for (p, group) in built.drain(..) {
                        parts.push((p, owned_group(group)));
                    }
                }
                if (i..i + replaced).contains(&j) {
                    continue;
                }
                let shared = a.load(Ordering::Acquire, guard);
                parts.push((
                    root.pivots.get(j).copied().unwrap_or(0),
                    Atomic::from(shared),
                ));
            }
            let new_root = Owned::new(Root::new(parts)).into_shared(guard);
            self.root.store(new_root, Ordering::Release);
            // SAFETY: the old root is unreachable now; its group pointers are not owned by it.
            unsafe { self.retired.retire(root_shared, guard) };
            // SAFETY: the new root is alive (published); its groups i..i+count are the new ones.
            let nr = unsafe { new_root.deref() };
            (i..i + count)
                .filter_map(|j| nr.group(j, guard).map(|(_, g)| g))
                .collect()
        };

        // Phase 2.
        for ng in &new_groups {
            for slot in ng.slots.iter() {
                slot.absorb_target(guard);
            }
        }
        for g in old {
            // SAFETY: `g` is unreachable from the index now; threads still on it are pinned.
            unsafe { self.retired.retire(g, guard) };
        }
        guard.flush();
        count
    }
}

/// A reference slot to `target`.
pub(super) fn reference(target: *const Slot) -> Slot {
    // SAFETY: targets are records of the group being compacted, alive until it is retired after phase 2.
    Slot::reference(unsafe { &*target })
}

/// Phase 1's merge: the keys and records of `g`'s array and closed buffer that are not dead (marking dead
/// the removed ones at or below `horizon`), in key order.
pub(super) fn merge_live(g: &Group, horizon: u64, guard: &Guard) -> (Vec<u64>, Vec<*const Slot>) {
    let buffered = g.buffer.all(guard);
    let mut keys = Vec::with_capacity(g.keys.len() + buffered.len());
    let mut targets: Vec<*const Slot> = Vec::with_capacity(keys.capacity());
    let array = g
        .keys
        .iter()
        .copied()
        .zip(g.slots.iter().map(|s| s as *const Slot));
    let mut a = array.peekable();
    let mut b = buffered.iter().copied().peekable();
    loop {
        let take_a = match (a.peek(), b.peek()) {
            (Some(x), Some(y)) => x.0 <= y.0,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => break,
        };
        let Some((k, p)) = (if take_a { a.next() } else { b.next() }) else {
            break;
        };
        // SAFETY: records of `g` and its buffer, alive while we are pinned.
        let slot = unsafe { &*p };
        let s = slot.status();
        if s & (REMOVED | DEAD) != 0 && slot.mark_dead_if_unreadable(horizon, guard) {
            continue;
        }
        if keys.last() == Some(&k) {
            // Two records of one key that are not dead would break the group invariant; keep the newer.
            debug_assert!(false, "two live records of key {k}");
            targets.pop();
            keys.pop();
        }
        keys.push(k);
        targets.push(p);
    }
    (keys, targets)
}
