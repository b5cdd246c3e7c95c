//! Retirement of replaced structure (groups, roots) without billing its freeing to foreground threads.
//!
//! crossbeam-epoch runs a deferred destructor in whichever thread happens to collect the global garbage
//! queue on its next pin — usually a reader or writer. Freeing a replaced group there (thousands of
//! records, their version chains and buffer arenas, a large allocation given back to the system) cost a
//! foreground operation hundreds of microseconds: the slow tail of the write workloads. [`Retired`] defers
//! only a move instead: once no pinned thread can reach the object, the deferred function pushes it onto
//! a list (a lock and a push, whoever runs it), and the maintenance thread frees the list
//! ([`Retired::free`]) after each pass, off the foreground path.
//!
//! Invariant: an object on the list is unreachable by every thread (the epoch guaranteed it before the
//! push). Cost: one mutex push per retired object, in some pinning thread; the free in the maintainer.

use crossbeam_epoch::{Guard, Shared};
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Objects the epoch released, waiting to be freed by the maintenance thread.
#[derive(Default)]
pub(super) struct Retired {
    list: Arc<Mutex<Vec<Box<dyn Send>>>>,
    /// Objects retired whose deferred move has not run yet (still in the epoch's queue).
    pending: Arc<AtomicUsize>,
}

impl Retired {
    /// Retires `ptr`: once every thread pinned now has unpinned, it moves onto the list.
    ///
    /// # Safety
    /// `ptr` must be unreachable for threads that pin from now on, and retired once, as for
    /// `Guard::defer_destroy`.
    pub(super) unsafe fn retire<T: Send + 'static>(&self, ptr: Shared<'_, T>, guard: &Guard) {
        let list = self.list.clone();
        let pending = self.pending.clone();
        pending.fetch_add(1, Ordering::Relaxed);
        let raw = ptr.as_raw() as usize;
        // SAFETY: the deferred function runs once no thread pinned before now is still pinned, so no
        // thread can reach the object then (caller's contract); it takes the sole ownership of it. The
        // address travels as an integer so the closure is `Send` and borrows nothing.
        unsafe {
            guard.defer_unchecked(move || {
                let owned = Shared::<T>::from(raw as *const T).into_owned();
                list.lock().push(owned.into_box());
                pending.fetch_sub(1, Ordering::Release);
            });
        }
    }

    /// Frees what the epoch released so far; returns how many objects.
    pub(super) fn free(&self) -> usize {
        let released = std::mem::take(&mut *self.list.lock());
        released.len()
    }

    /// Objects retired but not yet released by the epoch (the index's drop waits, boundedly, for 0, so
    /// its groups are not freed later by another index's thread).
    pub(super) fn pending(&self) -> usize {
        self.pending.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::super::group::GROUPS_FREED;
    use super::super::tests::tiny;
    use super::super::{LearnedIndex, LearnedOptions};
    use crossbeam_epoch as epoch;

    fn freed_here() -> usize {
        GROUPS_FREED.with(|c| c.get())
    }

    #[test]
    fn replaced_groups_are_freed_by_the_maintainer_not_by_foreground_threads() {
        let opts = LearnedOptions {
            inline_compact_at: 1 << 20,
            ..tiny()
        };
        let index = LearnedIndex::bulk_load(opts, (0..4000u64).map(|k| (k * 4, vec![1])));
        for k in 0..4000u64 {
            index.put(k * 4 + 1, &[2]);
        }
        // The "maintenance thread": compactions retire hundreds of groups.
        let (changes, freed_by_pass) = std::thread::scope(|s| {
            s.spawn(|| (index.maintain(), freed_here()))
                .join()
                .unwrap_or((0, 0))
        });
        assert!(changes > 100, "{changes} structural changes");
        // A foreground thread pins often enough to collect the epoch's garbage queue many times over,
        // and reads: it runs the deferred functions, which must only move the groups onto the list.
        let mut out = Vec::new();
        for k in 0..50_000u64 {
            let _guard = epoch::pin();
            assert!(index.get((k % 4000) * 4, &mut out));
        }
        assert_eq!(freed_here(), 0, "a foreground thread freed replaced groups");
        // The maintainer frees them on its next passes, once the epoch has released them. The epoch is
        // shared with the other tests of this process, and one of them may hold it back for a while: the
        // maintainer tries again, as its loop would, within a bound.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut freed_later = 0;
        while freed_by_pass + freed_later <= 100 && std::time::Instant::now() < deadline {
            freed_later += std::thread::scope(|s| {
                s.spawn(|| {
                    index.reclaim();
                    freed_here()
                })
                .join()
                .unwrap_or(0)
            });
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(
            freed_by_pass + freed_later > 100,
            "the maintainer freed {freed_by_pass} + {freed_later} groups"
        );
        assert_eq!(index.len(), 8000);
    }
}
