//! Groups and the root that routes keys to them.
//!
//! A [`Group`] covers the keys from its pivot up to the next group's pivot: a sorted key array with a
//! record per key ([`Slot`]s, inline), the array's [`GroupSearch`] (models or the fallback node), its delta
//! buffer, and — once a compaction started on it — the temporary buffer that takes its inserts meanwhile.
//! A group's arrays never change after it is built; only records change in place, and buffers grow.
//!
//! The [`Root`] holds the groups' pivots (sorted; the first is 0), an epoch pointer per group (a compaction
//! that keeps the group count swaps one pointer) and the [`Rmi`] trained on the pivots (a split publishes a
//! new root).
//!
//! Cost: locating a key's group is the RMI's search; finding it in the group, the group's search.

use super::arena::{Arena, ArenaSlice};
use super::buffer::Buffer;
use super::model::GroupSearch;
use super::rmi::Rmi;
use super::slot::{Slot, prefetch_lines};

/// Records either side of the models' prediction prefetched by a lookup.
pub const NEAR_RECORDS: usize = 2;
/// Keys either side of the models' prediction prefetched by a lookup.
pub const NEAR_KEYS: usize = 4;
use crossbeam_epoch::{Atomic, Guard, Owned, Shared};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// A group (see the module doc).
pub struct Group {
    /// The sorted keys and their records, in the index's huge-page [`Arena`].
    pub keys: ArenaSlice<u64>,
    pub slots: ArenaSlice<Slot>,
    pub search: GroupSearch,
    pub buffer: Arc<Buffer>,
    /// Set when a compaction or merge of this group begins: inserts go here once `buffer` is closed (a
    /// merge gives both of its groups the same one).
    pub tmp: OnceLock<Arc<Buffer>>,
    /// Live records of the array when the group was built (a compaction's references count their old
    /// records' state then).
    pub live_at_build: usize,
    /// Writes since the group was built that gave a key a value it did not have (new keys, re-puts of
    /// removed ones) and that removed one: with `live_at_build`, the group's size estimate.
    pub adds: AtomicUsize,
    pub removes: AtomicUsize,
}

impl Group {
    /// A group over sorted, distinct `keys` with their records (moved into `arena`), and `buffer`.
    pub fn new(arena: &Arena, keys: Vec<u64>, slots: Vec<Slot>, buffer: Arc<Buffer>) -> Group {
        let search = GroupSearch::train(&keys);
        let live_at_build = slots.iter().filter(|s| s.is_live()).count();
        let (keys, slots) = arena.pair(keys, slots);
        Group {
            live_at_build,
            keys,
            slots,
            search,
            buffer,
            tmp: OnceLock::new(),
            adds: AtomicUsize::new(0),
            removes: AtomicUsize::new(0),
        }
    }

    /// Estimated live records: those of the array when it was built plus the values added since minus
    /// those removed (writes racing a compaction may count in the old group only).
    pub fn live_estimate(&self) -> usize {
        (self.live_at_build + self.adds.load(Ordering::Relaxed))
            .saturating_sub(self.removes.load(Ordering::Relaxed))
    }

    /// Records the array would hold if compacted now, at most (array and buffers, live or not).
    pub fn size_bound(&self) -> usize {
        self.keys.len() + self.buffered()
    }

    /// The array record of `key`, if the array holds it. Before the search, the keys and records near the
    /// models' prediction are prefetched ([`NEAR_KEYS`] keys and [`NEAR_RECORDS`] records either side), so
    /// the search's cache misses and the record's overlap instead of following each other (a prediction
    /// is a few positions off on average: four records, half a key line).
    #[inline]
    pub fn array_slot(&self, key: u64) -> Option<&Slot> {
        if let Some(p) = self.search.predict(key, self.keys.len()) {
            if let Some(run) = self
                .slots
                .get(p.saturating_sub(NEAR_RECORDS)..(p + NEAR_RECORDS + 1).min(self.slots.len()))
            {
                Slot::prefetch_run(run);
            }
            if let Some(run) = self
                .keys
                .get(p.saturating_sub(NEAR_KEYS)..(p + NEAR_KEYS + 1).min(self.keys.len()))
            {
                prefetch_lines(
                    run.as_ptr().cast(),
                    run.as_ptr_range().end.cast::<u8>().wrapping_sub(1),
                );
            }
        }
        self.search
            .find(&self.keys, key)
            .and_then(|i| self.slots.get(i))
    }

    /// The buffers to search after the array, oldest first: the buffer, then the temporary one.
    pub fn buffers(&self) -> [Option<&Buffer>; 2] {
        [Some(&*self.buffer), self.tmp.get().map(|t| &**t)]
    }

    /// Records buffered (buffer and temporary buffer).
    pub fn buffered(&self) -> usize {
        self.buffer.len() + self.tmp.get().map_or(0, |t| t.len())
    }
}

#[cfg(test)]
thread_local! {
    /// Groups freed by the current thread (tests check which thread frees replaced groups).
    pub(super) static GROUPS_FREED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

#[cfg(test)]
impl Drop for Group {
    fn drop(&mut self) {
        GROUPS_FREED.with(|c| c.set(c.get() + 1));
    }
}

/// The root (see the module doc).
pub struct Root {
    pub pivots: Box<[u64]>,
    pub groups: Box<[Atomic<Group>]>,
    pub rmi: Rmi,
}

impl Root {
    /// A root over groups given as (pivot, group pointer), pivots sorted and the first 0.
    pub fn new(parts: Vec<(u64, Atomic<Group>)>) -> Root {
        let pivots: Box<[u64]> = parts.iter().map(|p| p.0).collect();
        let rmi = Rmi::train(&pivots);
        Root {
            pivots,
            groups: parts.into_iter().map(|p| p.1).collect(),
            rmi,
        }
    }

    /// A root over freshly built groups.
    pub fn from_groups(groups: Vec<(u64, Group)>) -> Root {
        Root::new(
            groups
                .into_iter()
                .map(|(p, g)| (p, Atomic::from(Owned::new(g))))
                .collect(),
        )
    }

    /// The index of the group covering `key`.
    #[inline]
    pub fn locate(&self, key: u64) -> usize {
        self.rmi.locate(&self.pivots, key)
    }

    /// Group `i`.
    #[inline]
    pub fn group<'g>(&self, i: usize, guard: &'g Guard) -> Option<(Shared<'g, Group>, &'g Group)> {
        let shared = self.groups.get(i)?.load(Ordering::Acquire, guard);
        // SAFETY: group pointers are never null; retired groups are freed through the epoch.
        Some((shared, unsafe { shared.deref() }))
    }

    /// Bytes of the root: pivots, group pointers and models.
    pub fn memory(&self) -> usize {
        self.pivots.len() * 16 + self.rmi.memory()
    }
}
