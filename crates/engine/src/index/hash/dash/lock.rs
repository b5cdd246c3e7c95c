//! The bucket version lock (in the bucket's header word, in PM, as in Dash) and the optimistic read.
//!
//! * **Writer**: [`Locked::lock`] sets the lock bit with a compare-exchange (spinning, then yielding, while
//!   another thread holds it), then a release fence, so that no store of the critical section becomes
//!   visible before the lock bit. Header stores made while locked keep the bit; [`Locked::commit_release`]
//!   stores the final header unlocked with the version bumped (the commit store and the unlock in one) and
//!   persists it; dropping the guard releases without persisting (nothing of the bucket changed, or only
//!   hints that repair recomputes). Lock order: normal buckets in index order, then stash buckets in
//!   index order; [`Locked::try_lock`] (displacement) never waits.
//! * **Reader** ([`read_stable`]): the bucket's first line (header, fingerprints, overflow fingerprints),
//!   an acquire fence, the reads the caller needs, another acquire fence, the header word again: the read
//!   is valid when the first header was unlocked and the second equals it (a seqlock).
//!
//! The lock bit and version reach PM like any store (the line is written back sooner or later) and mean
//! nothing after a crash: repair clears them. They are only ever changed by their holder, so the word a
//! guard remembers is the word in PM.

use std::sync::atomic::{Ordering, fence};

use super::layout::{Header, META_BYTES};
use crate::error::Result;
use crate::storage::pm::Pm;

/// Spins a little, then yields the CPU (a lock holder may be descheduled on a small machine).
pub fn backoff(spins: &mut u32) {
    *spins += 1;
    if *spins < 64 {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

/// A bucket whose lock this thread holds (module docs); released on drop.
pub struct Locked<'a, P: Pm> {
    pm: &'a P,
    /// Offset of the bucket (and of its header word).
    pub bucket: u64,
    /// The header word as it is in PM (locked).
    hdr: Header,
    held: bool,
}

impl<'a, P: Pm> Locked<'a, P> {
    /// Takes the lock of the bucket at `bucket`, waiting while another thread holds it.
    pub fn lock(pm: &'a P, bucket: u64) -> Result<Self> {
        let mut spins = 0;
        loop {
            if let Some(l) = Self::try_lock(pm, bucket)? {
                return Ok(l);
            }
            backoff(&mut spins);
        }
    }

    /// Takes the lock of the bucket at `bucket` if it is free now.
    pub fn try_lock(pm: &'a P, bucket: u64) -> Result<Option<Self>> {
        let h = Header(pm.load_u64_atomic(bucket)?);
        if h.locked() {
            return Ok(None);
        }
        let locked = h.locked_form();
        if pm.compare_exchange_u64(bucket, h.0, locked.0)?.is_err() {
            return Ok(None);
        }
        fence(Ordering::Release);
        Ok(Some(Locked {
            pm,
            bucket,
            hdr: locked,
            held: true,
        }))
    }

    /// The header (locked form).
    pub fn header(&self) -> Header {
        self.hdr
    }

    /// Stores `hdr` (kept locked), not persisted.
    pub fn set(&mut self, hdr: Header) -> Result<()> {
        self.hdr = hdr.locked_form();
        self.pm.store_u64_atomic(self.bucket, self.hdr.0)
    }

    /// Stores `hdr` (kept locked) and persists it: a commit that more changes of the bucket follow.
    pub fn commit(&mut self, hdr: Header) -> Result<()> {
        self.set(hdr)?;
        self.pm.persist(self.bucket, 8)
    }

    /// Stores `hdr` unlocked, version bumped, and persists it: the commit store and the unlock in one.
    pub fn commit_release(mut self, hdr: Header) -> Result<()> {
        self.held = false;
        self.pm.store_u64_atomic(self.bucket, hdr.released().0)?;
        self.pm.persist(self.bucket, 8)
    }
}

impl<P: Pm> Drop for Locked<'_, P> {
    fn drop(&mut self) {
        if self.held {
            // An error here means the region is unusable; the index is poisoned by the error that
            // unwound this guard, and repair clears the bit after a reopen.
            let _ = self.pm.store_u64_atomic(self.bucket, self.hdr.released().0);
        }
    }
}

/// Reads the bucket at `bucket` optimistically (module docs): `read(first line)` runs between the two
/// header loads and does any further reads. `None` when the bucket was locked or changed meanwhile.
pub fn read_stable<P: Pm, T>(
    pm: &P,
    bucket: u64,
    read: impl FnOnce(&[u8; META_BYTES as usize]) -> Result<T>,
) -> Result<Option<T>> {
    let mut meta = [0u8; META_BYTES as usize];
    pm.read(bucket, &mut meta)?;
    fence(Ordering::Acquire);
    let h1 = Header(super::layout::le(&meta));
    if h1.locked() {
        return Ok(None);
    }
    let out = read(&meta)?;
    fence(Ordering::Acquire);
    let h2 = Header(pm.load_u64_atomic(bucket)?);
    Ok((h1 == h2).then_some(out))
}
