//! What a learned index reports about its shape and memory.
//!
//! *Index memory* counts what routes a key to its record — the root (pivots, group pointers, RMI models)
//! and every group's models or fallback node, plus the group headers — not the key arrays, records and
//! values themselves (the data). Cost: one pass over the groups.

use super::core::LearnedIndex;
use super::group::Group;
use crossbeam_epoch as epoch;
use std::sync::atomic::Ordering;

/// Shape and memory of a learned index.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct LearnedStats {
    pub records: u64,
    pub groups: usize,
    /// Groups using the fallback node (their models could not meet the error bound).
    pub fallback_groups: usize,
    /// Records in the groups' arrays (live, removed or dead).
    pub array_records: usize,
    /// Records in delta buffers.
    pub buffered: usize,
    /// Root and group models, pivots and group headers, in bytes.
    pub index_bytes: usize,
    /// Key arrays and records (without the values), in bytes.
    pub data_bytes: usize,
    /// Bytes of the huge-page arena chunks still mapped (key arrays and records of live groups, and of
    /// replaced groups not yet freed, with the chunks' unused tails).
    pub arena_bytes: usize,
    pub compactions: u64,
    /// Of those, compactions a writer made itself.
    pub inline_compactions: u64,
    pub splits: u64,
    pub merges: u64,
    pub live_snapshots: usize,
}

impl LearnedIndex {
    /// The index's shape and memory.
    pub fn learned_stats(&self) -> LearnedStats {
        let guard = epoch::pin();
        let root = self.root(&guard);
        let mut s = LearnedStats {
            records: self.len(),
            index_bytes: root.memory(),
            arena_bytes: self.arena.mapped_bytes(),
            compactions: self.counters.compactions.load(Ordering::Relaxed),
            inline_compactions: self.counters.inline_compactions.load(Ordering::Relaxed),
            splits: self.counters.splits.load(Ordering::Relaxed),
            merges: self.counters.merges.load(Ordering::Relaxed),
            live_snapshots: self.snapshots.lock().values().sum(),
            ..LearnedStats::default()
        };
        let mut i = 0;
        while let Some((_, g)) = root.group(i, &guard) {
            s.groups += 1;
            s.fallback_groups += usize::from(g.search.is_fallback());
            s.array_records += g.keys.len();
            s.buffered += g.buffered();
            s.index_bytes += g.search.memory() + std::mem::size_of::<Group>();
            s.data_bytes += g.keys.len() * (8 + std::mem::size_of::<super::slot::Slot>());
            i += 1;
        }
        s
    }
}
