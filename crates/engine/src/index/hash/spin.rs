//! [`SpinMutex`]: the lock of a bucket's writers and of a collecting log — a byte taken with one locked
//! compare-and-swap and released with a plain store.
//!
//! Why not `parking_lot::Mutex`: its release is a second locked instruction (a compare-and-swap that
//! checks for parked waiters), and a write takes two of these locks, so every insert paid four locked
//! instructions, each a full barrier that waits for the store buffer to drain (perf: ≈ 12 % of an
//! insert's samples sat on the two releases). Both locks are held for a few hundred nanoseconds at most
//! (a log append and at times one XPLine write) and are rarely contended (a random bucket; one log per
//! thread), so a waiter spins, then yields its core, instead of parking.
//!
//! Invariant: `locked` is true exactly while a [`SpinGuard`] exists; the value is reached only through a
//! guard or `&mut self`.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};

/// A mutual-exclusion lock for short critical sections (module docs).
#[derive(Default)]
pub struct SpinMutex<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the value is reached only by the one thread holding the lock (or through `&mut self`), so sharing
// the mutex shares no `&T` between threads without mutual exclusion; `T: Send` lets the value be used (and
// dropped) by whichever thread holds it.
unsafe impl<T: Send> Sync for SpinMutex<T> {}

/// Holds a [`SpinMutex`]; releases it when dropped.
pub struct SpinGuard<'a, T> {
    lock: &'a SpinMutex<T>,
}

impl<T> SpinMutex<T> {
    pub fn new(value: T) -> Self {
        SpinMutex {
            locked: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// Takes the lock if it is free.
    #[inline]
    pub fn try_lock(&self) -> Option<SpinGuard<'_, T>> {
        self.locked
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| SpinGuard { lock: self })
    }

    /// Takes the lock, waiting for it: spins (reading, not writing, the lock's line) and yields the core
    /// after a while, since the holder may have been preempted.
    #[inline]
    pub fn lock(&self) -> SpinGuard<'_, T> {
        if let Some(g) = self.try_lock() {
            return g;
        }
        self.lock_slow()
    }

    #[cold]
    fn lock_slow(&self) -> SpinGuard<'_, T> {
        let mut spins = 0u32;
        loop {
            while self.locked.load(Ordering::Relaxed) {
                spins += 1;
                if spins < 128 {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
            if let Some(g) = self.try_lock() {
                return g;
            }
        }
    }

    /// The value, through exclusive access (no locking needed).
    pub fn get_mut(&mut self) -> &mut T {
        self.value.get_mut()
    }
}

impl<T> Deref for SpinGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: the guard holds the lock, so no other reference to the value exists (module invariant).
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for SpinGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; `&mut self` makes this the guard's only live borrow.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for SpinGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        // Release: every write made under the lock is visible to the next holder, whose Acquire CAS reads
        // this store.
        self.lock.locked.store(false, Ordering::Release);
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for SpinMutex<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.try_lock() {
            Some(g) => f.debug_tuple("SpinMutex").field(&*g).finish(),
            None => f.write_str("SpinMutex(<locked>)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::SpinMutex;

    #[test]
    fn the_lock_excludes_and_counts_every_increment_of_four_threads() {
        let m = SpinMutex::new((0u64, 0u64));
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..20_000 {
                        let mut g = m.lock();
                        // Two fields updated apart: a second holder inside would break their equality.
                        let a = g.0;
                        g.0 = a + 1;
                        std::hint::black_box(&mut *g);
                        assert_eq!(g.1, a);
                        g.1 = a + 1;
                    }
                });
            }
        });
        let mut m = m;
        assert_eq!(*m.get_mut(), (80_000, 80_000));
    }

    #[test]
    fn try_lock_fails_while_held_and_succeeds_after_release() {
        let m = SpinMutex::new(5);
        let g = m.lock();
        assert!(m.try_lock().is_none());
        assert_eq!(format!("{m:?}"), "SpinMutex(<locked>)");
        drop(g);
        assert_eq!(*m.try_lock().unwrap(), 5);
    }
}
