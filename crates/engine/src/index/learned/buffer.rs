//! A group's delta buffer: the records inserted since the group's array was built.
//!
//! The entries (sorted `(key, record)` pairs) are an immutable vector behind an epoch pointer: readers load
//! it and binary-search it without any lock; an insert copies it with the new entry under the buffer's
//! mutex and publishes the copy (copy-on-write), retiring the old vector through the epoch. The buffer owns
//! every record ever inserted into it (they stay at fixed addresses; entries point at them) and may keep
//! other buffers alive whose records its entries point at (after a group split).
//!
//! A compaction *closes* the buffer: inserts then go elsewhere (the group's temporary buffer, or a retry
//! from the root), so a closed buffer's entries never change again.
//!
//! Invariant: at most one entry per key; an entry is replaced only when its record is `DEAD`.
//!
//! Cost: a lookup is a binary search of ≤ the buffer's length (kept small by compactions); an insert copies
//! the entries (O(length)) and allocates one record.

use super::slot::{DEAD, Slot};
use crossbeam_epoch::{Atomic, Guard, Owned};
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Sorted entries of a buffer.
pub struct Entries(pub Vec<(u64, *const Slot)>);

// SAFETY: the pointers are to records owned by the buffer (or buffers it keeps alive), shared read-only
// through atomics.
unsafe impl Send for Entries {}
// SAFETY: as above.
unsafe impl Sync for Entries {}

impl Entries {
    /// The record of `key`, if any.
    pub fn find(&self, key: u64) -> Option<*const Slot> {
        self.0
            .binary_search_by_key(&key, |e| e.0)
            .ok()
            .and_then(|i| self.0.get(i))
            .map(|e| e.1)
    }
}

/// What an insert into a buffer did.
pub enum Insert<'g> {
    /// The buffer is closed.
    Closed,
    /// The key already has a live record (write to it instead).
    Exists(&'g Slot),
    /// A new, locked, empty record was inserted.
    Inserted(&'g Slot),
}

/// A delta buffer (see the module doc).
pub struct Buffer {
    // Boxed: records must keep their addresses while the vector grows.
    #[allow(clippy::vec_box)]
    owned: Mutex<Vec<Box<Slot>>>,
    entries: Atomic<Entries>,
    closed: AtomicBool,
    /// Buffers owning records our entries point at (kept alive, never read).
    _keep_alive: Vec<Arc<Buffer>>,
}

impl Buffer {
    pub fn new() -> Buffer {
        Self::with_entries(Vec::new(), Vec::new())
    }

    /// A buffer whose entries point at records owned by the buffers in `keep_alive`.
    pub fn with_entries(entries: Vec<(u64, *const Slot)>, keep_alive: Vec<Arc<Buffer>>) -> Buffer {
        Buffer {
            owned: Mutex::new(Vec::new()),
            entries: Atomic::new(Entries(entries)),
            closed: AtomicBool::new(false),
            _keep_alive: keep_alive,
        }
    }

    /// The current entries.
    pub fn entries<'g>(&self, guard: &'g Guard) -> &'g Entries {
        // SAFETY: the entries pointer is never null and old vectors are retired through the epoch.
        unsafe { self.entries.load(Ordering::Acquire, guard).deref() }
    }

    /// Number of entries.
    pub fn len(&self, guard: &Guard) -> usize {
        self.entries(guard).0.len()
    }

    /// True when inserts are refused.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Refuses every later insert; returns once no insert is under way.
    pub fn close(&self) {
        let _owned = self.owned.lock();
        self.closed.store(true, Ordering::Release);
    }

    /// Inserts a new locked empty record for `key` unless the buffer is closed or holds a live one.
    pub fn insert<'g>(&self, key: u64, guard: &'g Guard) -> Insert<'g> {
        let mut owned = self.owned.lock();
        if self.closed.load(Ordering::Acquire) {
            return Insert::Closed;
        }
        let cur = self.entries.load(Ordering::Acquire, guard);
        // SAFETY: as in `entries`.
        let old = unsafe { cur.deref() };
        let pos = old.0.binary_search_by_key(&key, |e| e.0);
        if let Ok(i) = pos
            && let Some(&(_, p)) = old.0.get(i)
        {
            // SAFETY: records are owned by this buffer (or ones it keeps alive) and freed with it.
            let slot = unsafe { &*p };
            if slot.status() & DEAD == 0 {
                return Insert::Exists(slot);
            }
        }
        let slot = Box::new(Slot::empty(true));
        let ptr: *const Slot = &*slot;
        owned.push(slot);
        let mut next = Vec::with_capacity(old.0.len() + 1);
        match pos {
            Ok(i) => {
                next.extend_from_slice(&old.0);
                if let Some(e) = next.get_mut(i) {
                    e.1 = ptr;
                }
            }
            Err(i) => {
                next.extend_from_slice(old.0.get(..i).unwrap_or(&[]));
                next.push((key, ptr));
                next.extend_from_slice(old.0.get(i..).unwrap_or(&[]));
            }
        }
        let prev = self
            .entries
            .swap(Owned::new(Entries(next)), Ordering::AcqRel, guard);
        // SAFETY: `prev` is unreachable now; readers still on it are pinned.
        unsafe { guard.defer_destroy(prev) };
        // SAFETY: the box was pushed to `owned` and lives as long as this buffer.
        Insert::Inserted(unsafe { &*ptr })
    }
}

impl Default for Buffer {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: dropped only when unreachable (its group was retired through the epoch).
        unsafe {
            let guard = crossbeam_epoch::unprotected();
            let e = self.entries.load(Ordering::Relaxed, guard);
            if !e.is_null() {
                drop(e.into_owned());
            }
        }
    }
}
