//! [`LearnedIndex`]: the concurrent learned index over `u64` keys and byte values (no files).
//!
//! Reads pin the epoch, locate the group through the root, search its array by model and then its buffers,
//! and read the record optimistically ([`Slot::read`]): they take no lock. Writes lock the one record of
//! their key (a new key gets a locked empty record in the group's open buffer), take a sequence number,
//! link the new version and unlock. A batch locks all its records (in key order, so batches cannot
//! deadlock), takes one sequence number for all and unlocks them together, so a snapshot sees all of a
//! batch or none of it.
//!
//! Snapshots: a snapshot at sequence number `s` reads, per record, the newest version with seq ≤ `s`. A
//! write with seq ≤ `s` took its number while holding its records' locks, and a reader waits while a record
//! is locked, so every such write is seen whole. Versions a live snapshot may read are never pruned (see
//! [`LearnedIndex::snapshot`] for the registration order that makes this hold).
//!
//! Structure (compactions, splits) lives in `compact.rs`, group merges in `merge.rs`; scans in `scan.rs`.
//!
//! Cost: a get is the root RMI, a group model search, ≤ 2 buffer binary searches and one record read; a
//! put the same plus a lock and, for a new key, a shift of the buffer's entries above it; it allocates
//! nothing unless a live snapshot may read the version it replaces or the value is over 16 bytes.

use super::arena::Arena;
use super::buffer::{Buffer, Insert};
use super::compact::RECLAIM_ROUNDS;
use super::group::{Group, Root};
use super::recycle::Recycler;
use super::retire::Retired;
use super::slot::{DEAD, Lock, Read, Slot};
use crossbeam_epoch::{self as epoch, Atomic, Guard, Owned};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::ops::Deref;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

/// Sizes that steer the structure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct LearnedOptions {
    /// Records per group when groups are built or split.
    pub group_size: usize,
    /// A compaction splits a group whose array would exceed this many records.
    pub max_group: usize,
    /// Background maintenance compacts a group with more buffered records than this, or with more
    /// removals than this and a quarter of its array (to drop the removed records).
    pub compact_at: usize,
    /// A writer hands the group to the maintenance thread when its buffer exceeds this, and compacts it
    /// itself past twice this or when no thread runs (bounds the buffer's copy cost when no background
    /// thread keeps up).
    pub inline_compact_at: usize,
    /// Background maintenance merges two adjacent groups whose estimated live records together are at
    /// most this many (at most `group_size` is used, so a merged group never needs a split; 0: never).
    pub merge_below: usize,
}

impl Default for LearnedOptions {
    fn default() -> Self {
        LearnedOptions {
            group_size: 4096,
            max_group: 8192,
            compact_at: 512,
            inline_compact_at: 2048,
            merge_below: 1024,
        }
    }
}

impl LearnedOptions {
    /// Refuses sizes the structure cannot work with.
    pub fn validate(&self) -> crate::error::Result<()> {
        if self.group_size == 0
            || self.max_group < self.group_size
            || u32::try_from(self.max_group).is_err()
            || self.compact_at == 0
            || self.inline_compact_at < self.compact_at
        {
            return Err(crate::error::Error::invalid(format!(
                "learned index sizes need group_size ≥ 1, max_group ≥ group_size (and < 2^32), \
                 compact_at ≥ 1 and inline_compact_at ≥ compact_at, got {self:?}"
            )));
        }
        Ok(())
    }

    /// The merge threshold in force: `merge_below`, at most `group_size`.
    pub fn merge_threshold(&self) -> usize {
        self.merge_below.min(self.group_size)
    }
}

/// Urgent compactions queued for the maintenance thread at most (more wait for its regular pass).
const URGENT_KEYS: usize = 64;

/// Counters of structural work.
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub compactions: AtomicU64,
    /// Compactions a writer made itself (its buffer passed the hard bound while the maintenance thread was
    /// behind, or no thread runs).
    pub inline_compactions: AtomicU64,
    pub splits: AtomicU64,
    pub merges: AtomicU64,
}

/// The learned index (see the module doc).
pub struct LearnedIndex {
    pub(super) root: Atomic<Root>,
    pub(super) next_seq: AtomicU64,
    /// Live snapshots: sequence number → count.
    pub(super) snapshots: Mutex<BTreeMap<u64, usize>>,
    /// No live snapshot reads below this (a lower bound; `u64::MAX` with none).
    pub(super) oldest: AtomicU64,
    /// No live snapshot reads above this (an upper bound: `u64::MAX` while one registers, 0 with none).
    pub(super) newest: AtomicU64,
    pub(super) len: AtomicI64,
    /// Serializes compactions and splits.
    pub(super) structure: Mutex<()>,
    pub(super) opts: LearnedOptions,
    pub(super) counters: Counters,
    /// Replaced groups and roots the epoch released, freed by the maintenance thread.
    pub(super) retired: Retired,
    /// Memory of dropped delta buffers for the growing ones (see `recycle.rs`).
    pub(super) recycler: Arc<Recycler>,
    /// Set by writes (after their counters), cleared by the maintenance thread before a pass: while it is
    /// clear no group's counters changed, so the background thread skips its passes (see
    /// `background.rs`).
    pub(super) dirty: AtomicBool,
    /// Keys whose group's buffer passed `inline_compact_at` while a maintenance thread runs: that thread
    /// compacts their groups before anything else (see `compact_if_overfull`).
    pub(super) urgent: crossbeam_queue::ArrayQueue<u64>,
    /// The maintenance thread, while one runs (woken for an urgent compaction).
    pub(super) maintainer: Mutex<Option<std::thread::Thread>>,
    /// Where the groups' key arrays and records live (huge pages). Declared last: dropped after the
    /// groups (whose slices keep their own chunks mapped anyway).
    pub(super) arena: Arena,
}

/// A record locked for a write: the slot found, the record it holds locked (itself or its target) and the
/// group it was found in.
pub(super) struct Held<'g> {
    slot: &'g Slot,
    record: &'g Slot,
    group: &'g Group,
}

/// A consistent point-in-time view; reads through it see the writes numbered up to its sequence number.
/// `R` is how it holds the index: borrowed ([`Snapshot`]) or shared ([`OwnedSnapshot`]).
pub struct SnapshotOf<R: Deref<Target = LearnedIndex>> {
    index: R,
    seq: u64,
}

/// A snapshot that borrows the index ([`LearnedIndex::snapshot`]).
pub type Snapshot<'a> = SnapshotOf<&'a LearnedIndex>;
/// A snapshot that keeps the index alive ([`LearnedIndex::snapshot_owned`]), for views that outlive a
/// borrow (the `Db` shell's snapshots).
pub type OwnedSnapshot = SnapshotOf<Arc<LearnedIndex>>;

impl<R: Deref<Target = LearnedIndex>> SnapshotOf<R> {
    /// The sequence number this snapshot reads at.
    pub fn seq(&self) -> u64 {
        self.seq
    }
    /// The value of `key` at this snapshot into `out`; whether it was present.
    pub fn get(&self, key: u64, out: &mut Vec<u8>) -> bool {
        self.index.get_at(key, self.seq, out)
    }
    /// Visits up to `max` records of `lo..=hi` at this snapshot, in `dir` order, while `visit` returns true.
    pub fn scan(
        &self,
        lo: u64,
        hi: u64,
        dir: crate::index::Direction,
        max: usize,
        visit: &mut dyn FnMut(u64, &[u8]) -> bool,
    ) -> usize {
        self.index.scan_at(lo, hi, dir, max, self.seq, visit)
    }
}

impl<R: Deref<Target = LearnedIndex>> Drop for SnapshotOf<R> {
    fn drop(&mut self) {
        let mut snaps = self.index.snapshots.lock();
        if let Some(c) = snaps.get_mut(&self.seq) {
            *c -= 1;
            if *c == 0 {
                snaps.remove(&self.seq);
            }
        }
        let oldest = snaps.keys().next().copied().unwrap_or(u64::MAX);
        self.index.oldest.store(oldest, Ordering::SeqCst);
        let newest = snaps.keys().next_back().copied().unwrap_or(0);
        self.index.newest.store(newest, Ordering::SeqCst);
    }
}

impl LearnedIndex {
    /// An empty index.
    pub fn new(opts: LearnedOptions) -> LearnedIndex {
        Self::bulk_load(opts, std::iter::empty())
    }

    /// An index over `records`, in strictly increasing key order.
    pub fn bulk_load(
        opts: LearnedOptions,
        records: impl Iterator<Item = (u64, Vec<u8>)>,
    ) -> LearnedIndex {
        let mut groups = Vec::new();
        let mut keys = Vec::with_capacity(opts.group_size);
        let mut slots = Vec::with_capacity(opts.group_size);
        let mut count = 0i64;
        let arena = Arena::new();
        let recycler = Arc::new(Recycler::default());
        let flush = |keys: &mut Vec<u64>, slots: &mut Vec<Slot>, groups: &mut Vec<(u64, Group)>| {
            let pivot = if groups.is_empty() {
                0
            } else {
                keys.first().copied().unwrap_or(0)
            };
            let g = Group::new(
                &arena,
                std::mem::take(keys),
                std::mem::take(slots),
                Arc::new(Buffer::new(&recycler)),
            );
            groups.push((pivot, g));
        };
        for (k, v) in records {
            keys.push(k);
            slots.push(Slot::with_value(0, &v));
            count += 1;
            if keys.len() == opts.group_size {
                flush(&mut keys, &mut slots, &mut groups);
            }
        }
        if !keys.is_empty() || groups.is_empty() {
            flush(&mut keys, &mut slots, &mut groups);
        }
        LearnedIndex {
            root: Atomic::new(Root::from_groups(groups)),
            next_seq: AtomicU64::new(0),
            snapshots: Mutex::new(BTreeMap::new()),
            oldest: AtomicU64::new(u64::MAX),
            newest: AtomicU64::new(0),
            len: AtomicI64::new(count),
            structure: Mutex::new(()),
            opts,
            counters: Counters::default(),
            retired: Retired::default(),
            recycler,
            dirty: AtomicBool::new(true),
            urgent: crossbeam_queue::ArrayQueue::new(URGENT_KEYS),
            maintainer: Mutex::new(None),
            arena,
        }
    }

    /// The options.
    pub fn options(&self) -> &LearnedOptions {
        &self.opts
    }

    /// Live records.
    pub fn len(&self) -> u64 {
        self.len.load(Ordering::Relaxed).max(0) as u64
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(super) fn root<'g>(&self, guard: &'g Guard) -> &'g Root {
        // SAFETY: the root is never null; old roots are retired through the epoch.
        unsafe { self.root.load(Ordering::Acquire, guard).deref() }
    }

    /// A snapshot of the current state. Registration order: first lower `oldest` to the current sequence
    /// number and raise `newest` to `u64::MAX`, then read the number the snapshot uses (≥ it). A writer
    /// that read `oldest` or `newest` before the first step took its own number earlier, so the
    /// snapshot's number covers its write; one that reads after prunes nothing the snapshot needs.
    pub fn snapshot(&self) -> Snapshot<'_> {
        let seq = self.register_snapshot();
        SnapshotOf { index: self, seq }
    }

    /// [`snapshot`](Self::snapshot), holding the index by its `Arc`.
    pub fn snapshot_owned(self: &Arc<Self>) -> OwnedSnapshot {
        let seq = self.register_snapshot();
        SnapshotOf {
            index: self.clone(),
            seq,
        }
    }

    /// Registers a snapshot at the current sequence number (released by the snapshot's drop).
    fn register_snapshot(&self) -> u64 {
        let mut snaps = self.snapshots.lock();
        let bound = self.next_seq.load(Ordering::SeqCst);
        self.oldest.fetch_min(bound, Ordering::SeqCst);
        self.newest.store(u64::MAX, Ordering::SeqCst);
        let seq = self.next_seq.load(Ordering::SeqCst);
        *snaps.entry(seq).or_insert(0) += 1;
        let oldest = snaps.keys().next().copied().unwrap_or(seq);
        self.oldest.store(oldest, Ordering::SeqCst);
        let newest = snaps.keys().next_back().copied().unwrap_or(seq);
        self.newest.store(newest, Ordering::SeqCst);
        seq
    }

    /// The sequence number at or below which every removal is invisible to all live and future snapshots.
    pub(super) fn gc_horizon(&self) -> u64 {
        let snaps = self.snapshots.lock();
        let now = self.next_seq.load(Ordering::SeqCst);
        snaps.keys().next().copied().unwrap_or(now).min(now)
    }

    /// The newest value of `key` into `out`; whether it is present.
    pub fn get(&self, key: u64, out: &mut Vec<u8>) -> bool {
        self.get_at(key, u64::MAX, out)
    }

    /// The value of `key` at sequence number `at` (`u64::MAX`: newest; otherwise a live snapshot's).
    pub(super) fn get_at(&self, key: u64, at: u64, out: &mut Vec<u8>) -> bool {
        let guard = epoch::pin();
        'retry: loop {
            let root = self.root(&guard);
            let Some((_, g)) = root.group(root.locate(key), &guard) else {
                return false;
            };
            let mut answer = |slot: &Slot| -> Option<Option<bool>> {
                match slot.read(at, &guard) {
                    Read::Found(Some(v)) => {
                        out.clear();
                        out.extend_from_slice(&v);
                        Some(Some(true))
                    }
                    Read::Found(None) => Some(Some(false)),
                    Read::Dead => None,
                    Read::Moved => Some(None),
                }
            };
            if let Some(slot) = g.array_slot(key) {
                match answer(slot) {
                    Some(Some(found)) => return found,
                    Some(None) => continue 'retry,
                    None => {}
                }
            }
            for buffer in g.buffers().into_iter().flatten() {
                if let Some(slot) = buffer.find(key, &guard) {
                    match answer(slot) {
                        Some(Some(found)) => return found,
                        Some(None) => continue 'retry,
                        None => {}
                    }
                }
            }
            return false;
        }
    }

    /// Locks the record of `key` for a write; with `create`, makes one when the key has none. `None` when
    /// the key has no record and `create` is false.
    pub(super) fn acquire<'g>(&self, key: u64, create: bool, guard: &'g Guard) -> Option<Held<'g>> {
        loop {
            let root = self.root(guard);
            let (_, g) = root.group(root.locate(key), guard)?;
            if let Some(slot) = g.array_slot(key) {
                match slot.lock() {
                    Lock::Held(record) => {
                        return Some(Held {
                            slot,
                            record,
                            group: g,
                        });
                    }
                    Lock::Moved => continue,
                    Lock::Dead => {}
                }
            }
            match self.acquire_in_buffers(g, key, create, guard) {
                Some(found) => return found,
                None => std::thread::yield_now(),
            }
        }
    }

    /// The buffer part of [`acquire`](Self::acquire); `None` asks for a retry from the root.
    fn acquire_in_buffers<'g>(
        &self,
        g: &'g Group,
        key: u64,
        create: bool,
        guard: &'g Guard,
    ) -> Option<Option<Held<'g>>> {
        for buffer in g.buffers().into_iter().flatten() {
            if let Some(slot) = buffer.find(key, guard) {
                match slot.lock() {
                    Lock::Held(record) => {
                        return Some(Some(Held {
                            slot,
                            record,
                            group: g,
                        }));
                    }
                    Lock::Moved => return None,
                    Lock::Dead => {}
                }
            }
        }
        if !create {
            return Some(None);
        }
        let inserted = |ins: Insert<'g>| match ins {
            Insert::Inserted(slot) => Some(Some(Held {
                slot,
                record: slot,
                group: g,
            })),
            Insert::Exists(_) | Insert::Closed => None,
        };
        match g.buffer.insert(key, guard) {
            Insert::Closed => {}
            other => return inserted(other),
        }
        // The buffer closed: a live record it gained before closing must be used, not shadowed.
        let frozen = g.buffer.find(key, guard);
        if frozen.is_some_and(|slot| slot.status() & DEAD == 0) {
            return None;
        }
        inserted(g.tmp.get()?.insert(key, guard))
    }

    /// Writes `value` (`None`: removes) under a lock already held; returns whether the key had a value.
    fn install(&self, held: &Held<'_>, seq: u64, value: Option<&[u8]>, guard: &Guard) -> bool {
        let live = super::slot::LiveSnapshots {
            oldest: self.oldest.load(Ordering::SeqCst),
            newest: self.newest.load(Ordering::SeqCst),
        };
        let had = held.record.install(seq, value, live, guard);
        let delta = i64::from(value.is_some()) - i64::from(had);
        if delta != 0 {
            self.len.fetch_add(delta, Ordering::Relaxed);
            let counter = if delta > 0 {
                &held.group.adds
            } else {
                &held.group.removes
            };
            counter.fetch_add(1, Ordering::Relaxed);
        }
        had
    }

    /// Inserts or overwrites `key`.
    pub fn put(&self, key: u64, value: &[u8]) {
        self.write(key, Some(value));
    }

    /// Removes `key`; whether it was present.
    pub fn remove(&self, key: u64) -> bool {
        self.write(key, None)
    }

    fn write(&self, key: u64, value: Option<&[u8]>) -> bool {
        let had = {
            let guard = epoch::pin();
            let Some(held) = self.acquire(key, value.is_some(), &guard) else {
                return false;
            };
            let seq = self.next_seq.fetch_add(1, Ordering::SeqCst) + 1;
            let had = self.install(&held, seq, value, &guard);
            held.slot.unlock(held.record);
            had
        };
        self.note_write();
        if value.is_some() && !had {
            self.compact_if_overfull(key);
        }
        had
    }

    /// Marks the index written since the maintenance thread's last pass. A load first: while the flag is
    /// already set (a burst of writes) its cache line is only read, not bounced between cores.
    #[inline]
    fn note_write(&self) {
        if !self.dirty.load(Ordering::Relaxed) {
            self.dirty.store(true, Ordering::Release);
        }
    }

    /// Whether writes came since the last call (clears the mark).
    pub(super) fn take_dirty(&self) -> bool {
        self.dirty.swap(false, Ordering::AcqRel)
    }

    /// Applies `ops` (key, value or `None` to remove) as one atomic batch: a snapshot sees all or none.
    pub fn apply(&self, ops: &[(u64, Option<&[u8]>)]) {
        // The last op per key wins; keys are locked in increasing order.
        let mut last: BTreeMap<u64, Option<&[u8]>> = BTreeMap::new();
        for &(k, v) in ops {
            last.insert(k, v);
        }
        {
            let guard = epoch::pin();
            let mut held = Vec::with_capacity(last.len());
            for (&k, &v) in &last {
                if let Some(h) = self.acquire(k, v.is_some(), &guard) {
                    held.push((h, v));
                }
            }
            let seq = self.next_seq.fetch_add(1, Ordering::SeqCst) + 1;
            for (h, v) in &held {
                self.install(h, seq, *v, &guard);
            }
            for (h, _) in &held {
                h.slot.unlock(h.record);
            }
        }
        self.note_write();
        if let Some((&k, _)) = last.iter().find(|e| e.1.is_some()) {
            self.compact_if_overfull(k);
        }
    }
}

impl Drop for LearnedIndex {
    fn drop(&mut self) {
        // Groups and roots retired by the last changes wait in the epoch's queue; left there, whichever
        // thread collects it later would free them (a foreground thread of another index, in its
        // operation's time). Give the epoch a bounded chance to release them to this thread's list.
        for _ in 0..RECLAIM_ROUNDS {
            if self.retired.pending() == 0 {
                break;
            }
            epoch::pin().flush();
        }
        self.retired.free();
        // SAFETY: `&mut self`: no thread can reach the index; groups are owned by the current root alone.
        unsafe {
            let guard = epoch::unprotected();
            let root = self.root.load(Ordering::Relaxed, guard);
            for g in root.deref().groups.iter() {
                drop(g.load(Ordering::Relaxed, guard).into_owned());
            }
            drop(root.into_owned());
        }
    }
}

/// Used by `compact.rs` to build a group's replacement pointer.
pub(super) fn owned_group(g: Group) -> Atomic<Group> {
    Atomic::from(Owned::new(g))
}
