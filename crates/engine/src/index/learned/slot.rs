//! Records: a status word, the newest small value inline and a chain of value versions, read
//! optimistically.
//!
//! A [`Slot`] holds one key's record (the key lives beside it, in the group's key array or buffer entry):
//! * `status`: `LOCK | REMOVED | PTR | MOVED | DEAD | INLINE` bits, the inline value's length and a version
//!   counter above them. Writers take `LOCK` by compare-and-swap and bump the counter when they release it;
//!   readers read the status, then the data, then the status again, and retry while it changed or was
//!   locked (they never take a lock).
//! * `INLINE` set: the newest version lives in the slot itself — its value (at most [`INLINE_BYTES`]
//!   bytes, or a removal with `REMOVED`) in `inline`, its sequence number in `seq` — and `head` holds the
//!   *older* versions only (usually none). A read of the newest value touches the slot alone (a seqlock
//!   read: status, words, acquire fence, status); a snapshot read checks `seq` and walks `head` only when
//!   the newest version is too new for it.
//! * `INLINE` clear: `head` is the newest [`Version`] (sequence number, value bytes out of line or `None`
//!   for a removal, older version); values longer than 16 bytes take this form.
//! * Versions are immutable once published. A write with no live snapshot below its sequence number
//!   overwrites the slot's newest version in place and retires any older ones: no allocation. Only while a
//!   snapshot may read the version being replaced does the write move it into a new [`Version`] in front of
//!   `head`; it prunes the versions no snapshot can read any more, retiring them through the epoch.
//! * `PTR` (set only between the two phases of a compaction): the record lives in the `target` slot of the
//!   old group; writers lock this slot, then the target. Phase 2 moves the target's chain here, sets the
//!   target's `MOVED` bit and clears `PTR`, all under both locks. Anyone who finds `MOVED` restarts from the
//!   root, so no update lands in a record that was already copied.
//! * `DEAD`: removed before every live snapshot, set by a compaction under the lock; a dead record is never
//!   written again (a new put of its key makes a new record in a buffer), so a compaction may drop it.
//!
//! Invariant: a group holds at most one record per key that is not `DEAD`.
//!
//! Cost: a read of the newest value of at most 16 bytes is two status loads and two word loads in the
//! slot (no pointer chased); other reads are three loads of the status/head plus a walk of the chain to
//! the first version at or below the snapshot; a write of a value of at most 16 bytes allocates nothing
//! unless a live snapshot may read the value it replaces (then one version); a longer value is one
//! allocation.

use crossbeam_epoch::{self as epoch, Atomic, Guard, Owned, Shared};
use smallvec::SmallVec;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering, fence};

pub const LOCK: u64 = 1;
pub const REMOVED: u64 = 2;
pub const PTR: u64 = 4;
pub const MOVED: u64 = 8;
pub const DEAD: u64 = 16;
/// The newest version's value is copied in `inline`; its length is in the `LEN` bits.
pub const INLINE: u64 = 32;
const LEN_SHIFT: u32 = 6;
const LEN: u64 = 31 << LEN_SHIFT;
/// Every bit below the version counter.
const FLAGS: u64 = INLINE | LEN | 31;
const VERSION_ONE: u64 = 1 << 11;
/// Longest value kept inline in a slot.
pub const INLINE_BYTES: usize = 16;
const INLINE_WORDS: usize = INLINE_BYTES / 8;
/// The bits that describe the newest value (moved with it by phase 2).
const VALUE_BITS: u64 = REMOVED | INLINE | LEN;

/// Bounds on the sequence numbers live snapshots read at, as a writer saw them after taking its own
/// number: none is below `oldest` or above `newest`.
#[derive(Debug, Clone, Copy)]
pub struct LiveSnapshots {
    pub oldest: u64,
    pub newest: u64,
}

/// One version of a record's value.
pub struct Version {
    pub seq: u64,
    /// The value (`None`: a removal); up to 16 bytes inline in the version, longer ones out of line.
    pub value: Option<SmallVec<[u8; 16]>>,
    older: Atomic<Version>,
}

/// A record (see the module doc). The status word and the inline value come first: a read of the newest
/// small value touches those 24 bytes only.
#[repr(C)]
pub struct Slot {
    status: AtomicU64,
    inline: [AtomicU64; INLINE_WORDS],
    /// With `INLINE`: the sequence number of the version in the slot.
    seq: AtomicU64,
    head: Atomic<Version>,
    target: AtomicPtr<Slot>,
}

/// A value read from a slot: borrowed from a version, or copied out of the slot's inline words.
pub enum Value<'g> {
    Shared(&'g [u8]),
    Inline([u8; INLINE_BYTES], usize),
}

impl std::ops::Deref for Value<'_> {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        match self {
            Value::Shared(v) => v,
            Value::Inline(bytes, len) => bytes.get(..*len).unwrap_or(bytes),
        }
    }
}

/// What a read of a slot found.
pub enum Read<'g> {
    /// The record answers: the version visible at the snapshot, or `None` (absent or removed).
    Found(Option<Value<'g>>),
    /// The record is dead: look for the key elsewhere in the group.
    Dead,
    /// The record was copied to a newer group: restart from the root.
    Moved,
}

/// What locking a slot for writing found.
pub enum Lock<'a> {
    /// Locked; write with [`Slot::install`] on `.0` (the slot itself or its target) and release with
    /// [`Slot::unlock`] on this slot (which releases the target too).
    Held(&'a Slot),
    Dead,
    Moved,
}

// SAFETY: a slot's raw `target` points into a group kept alive by the epoch while any thread can reach this
// slot; every other field is atomic.
unsafe impl Send for Slot {}
// SAFETY: as above; all access goes through atomics.
unsafe impl Sync for Slot {}

impl Slot {
    /// A record with no versions (reads as absent), locked when `locked`.
    pub fn empty(locked: bool) -> Slot {
        Slot {
            status: AtomicU64::new(REMOVED | if locked { LOCK } else { 0 }),
            inline: Default::default(),
            seq: AtomicU64::new(0),
            head: Atomic::null(),
            target: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// A record holding `value` written with `seq` (bulk loads).
    pub fn with_value(seq: u64, value: &[u8]) -> Slot {
        let (bits, words) = inline_words(Some(value));
        let head = if bits & INLINE != 0 {
            Atomic::null()
        } else {
            Atomic::new(Version {
                seq,
                value: Some(SmallVec::from_slice(value)),
                older: Atomic::null(),
            })
        };
        Slot {
            status: AtomicU64::new(bits),
            inline: words.map(AtomicU64::new),
            seq: AtomicU64::new(seq),
            head,
            target: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// A reference to `target` (phase 1 of a compaction).
    pub fn reference(target: &Slot) -> Slot {
        Slot {
            status: AtomicU64::new(PTR),
            inline: Default::default(),
            seq: AtomicU64::new(0),
            head: Atomic::null(),
            target: AtomicPtr::new(target as *const Slot as *mut Slot),
        }
    }

    /// Whether the record (or, for a reference, its target) holds a value now (a racy estimate, for
    /// sizing groups).
    pub fn is_live(&self) -> bool {
        let s = self.status();
        let s = if s & PTR != 0 {
            // SAFETY: as in `read`: a reference's target outlives every thread that can reach the
            // reference (the caller holds the target's group).
            unsafe { &*self.target.load(Ordering::Acquire) }.status()
        } else {
            s
        };
        s & (REMOVED | DEAD | MOVED) == 0
    }

    /// Hints the CPU to load the status words and inline values of `slots` (consecutive records of one
    /// array): every cache line from the first one's status word to the last one's inline value.
    #[inline(always)]
    pub fn prefetch_run(slots: &[Slot]) {
        if let (Some(first), Some(last)) = (slots.first(), slots.last()) {
            let start = (first as *const Slot).cast::<u8>();
            let end = (last as *const Slot)
                .cast::<u8>()
                .wrapping_add(8 + 8 * INLINE_WORDS - 1);
            prefetch_lines(start, end);
        }
    }

    /// Hints the CPU to load the slot's status word and inline value (a no-op off x86-64).
    #[inline(always)]
    pub fn prefetch(&self) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
            let start = (self as *const Slot).cast::<i8>();
            // The status word and inline words are the slot's first 24 bytes (`repr(C)`), which may
            // straddle two cache lines: touch both ends.
            let end = start.wrapping_add(8 + 8 * INLINE_WORDS - 1);
            // SAFETY: a prefetch is a hint: it neither faults nor changes memory, whatever the address.
            unsafe {
                _mm_prefetch::<_MM_HINT_T0>(start);
                _mm_prefetch::<_MM_HINT_T0>(end);
            }
        }
    }

    /// The status word (for compactions and checks).
    pub fn status(&self) -> u64 {
        self.status.load(Ordering::Acquire)
    }

    /// Reads the version visible at snapshot `at` (`u64::MAX`: the newest), retrying while a writer holds
    /// the record.
    pub fn read<'g>(&self, at: u64, guard: &'g Guard) -> Read<'g> {
        loop {
            let s1 = self.status.load(Ordering::Acquire);
            if s1 & LOCK != 0 {
                std::hint::spin_loop();
                continue;
            }
            if s1 & DEAD != 0 {
                return Read::Dead;
            }
            if s1 & MOVED != 0 {
                return Read::Moved;
            }
            if s1 & (INLINE | PTR) == INLINE {
                let words = self.inline.each_ref().map(|w| w.load(Ordering::Relaxed));
                let seq = self.seq.load(Ordering::Relaxed);
                let older = self.head.load(Ordering::Acquire, guard);
                // Orders the loads before the status check: if they saw any store of a writer that
                // locked after `s1`, the check sees its lock or a later version (see `store_inline`).
                fence(Ordering::Acquire);
                if self.status.load(Ordering::Relaxed) != s1 {
                    continue;
                }
                if at == u64::MAX || seq <= at {
                    return Read::Found((s1 & REMOVED == 0).then(|| inline_value(s1, words)));
                }
                // The slot's version is too new for this snapshot: an older one answers. The snapshot is
                // live, so the versions it reads are not pruned even if writers came since `s1`.
                return Read::Found(visible(older, at, guard).map(Value::Shared));
            }
            let found = if s1 & PTR != 0 {
                // SAFETY: PTR is set only while the target's group is alive (it is retired after phase 2,
                // through the epoch we are pinned in), and phase 2 leaves `target` in place, so even if it
                // ran since we read `s1`, this is the old record (moved: we then read our status again).
                let target = unsafe { &*self.target.load(Ordering::Acquire) };
                match target.read(at, guard) {
                    Read::Found(v) => Read::Found(v),
                    // Phase 2 moved it under our lock: our status changed, so retry.
                    _ => continue,
                }
            } else if s1 & REMOVED != 0 && at == u64::MAX {
                Read::Found(None)
            } else {
                Read::Found(
                    visible(self.head.load(Ordering::Acquire, guard), at, guard).map(Value::Shared),
                )
            };
            if self.status.load(Ordering::Acquire) == s1 {
                return found;
            }
        }
    }

    /// Spins until this slot is locked by us; returns the status it had.
    fn lock_raw(&self) -> u64 {
        loop {
            let s = self.status.load(Ordering::Relaxed);
            if s & LOCK == 0
                && self
                    .status
                    .compare_exchange_weak(s, s | LOCK, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return s;
            }
            std::hint::spin_loop();
        }
    }

    /// Releases our lock, setting the flags to `flags` and bumping the version.
    fn unlock_raw(&self, flags: u64) {
        let s = self.status.load(Ordering::Relaxed);
        self.status
            .store(((s & !FLAGS) + VERSION_ONE) | flags, Ordering::Release);
    }

    /// Locks the record for a write (following a reference to its target).
    pub fn lock(&self) -> Lock<'_> {
        let s = self.lock_raw();
        if s & (DEAD | MOVED) != 0 {
            self.unlock_raw(s & FLAGS);
            return if s & DEAD != 0 {
                Lock::Dead
            } else {
                Lock::Moved
            };
        }
        if s & PTR != 0 {
            let target = self.target.load(Ordering::Acquire);
            // SAFETY: as in `read`; we hold our lock, so phase 2 cannot move the target meanwhile.
            let t = unsafe { &*target };
            let ts = t.lock_raw();
            if ts & (DEAD | MOVED) != 0 {
                // Not reachable while phase 2 holds to the protocol; restarting is always safe.
                t.unlock_raw(ts & FLAGS);
                self.unlock_raw(s & FLAGS);
                return Lock::Moved;
            }
            return Lock::Held(t);
        }
        Lock::Held(self)
    }

    /// Releases a lock taken by [`lock`](Self::lock) on `this` slot whose record is `held`.
    pub fn unlock(&self, held: &Slot) {
        if !std::ptr::eq(held, self) {
            let t = held;
            t.unlock_raw(t.status.load(Ordering::Relaxed) & (FLAGS & !LOCK));
        }
        self.unlock_raw(self.status.load(Ordering::Relaxed) & (FLAGS & !LOCK));
    }

    /// With the record locked: makes (`seq`, `value`, `None` = removal) the newest version, prunes the
    /// versions no live snapshot can read, and sets `REMOVED` to match. Returns whether the record held a
    /// value before.
    ///
    /// The slot's own version (with `INLINE`) is kept, moved into a [`Version`], only if a live snapshot
    /// may read it: one at or above its number and below `seq`. Otherwise a value of at most 16 bytes (or
    /// a removal) overwrites it in place, and nothing is allocated.
    pub fn install(
        &self,
        seq: u64,
        value: Option<&[u8]>,
        live: LiveSnapshots,
        guard: &Guard,
    ) -> bool {
        let oldest = live.oldest;
        let s = self.status.load(Ordering::Relaxed);
        // `REMOVED` is set exactly when the newest version is a removal or absent (never on a reference:
        // we hold the record itself, not a reference to it).
        let had = s & REMOVED == 0;
        // The versions older than the new one: the chain, behind the slot's own version if a snapshot
        // may still read that one.
        let mut older = self.head.load(Ordering::Relaxed, guard);
        if s & INLINE != 0 && oldest < seq && self.seq.load(Ordering::Relaxed) <= live.newest {
            let words = self.inline.each_ref().map(|w| w.load(Ordering::Relaxed));
            let kept = Owned::new(Version {
                seq: self.seq.load(Ordering::Relaxed),
                value: (s & REMOVED == 0).then(|| SmallVec::from_slice(&inline_value(s, words))),
                older: Atomic::null(),
            });
            kept.older.store(older, Ordering::Relaxed);
            older = kept.into_shared(guard);
        }
        let (bits, words) = inline_words(value);
        let head = if bits & INLINE != 0 || value.is_none() {
            // The new version lives in the slot; `older` is what the snapshots may still read.
            if seq <= oldest {
                retire_chain(older, guard);
                Shared::null()
            } else {
                prune(older, oldest, guard);
                older
            }
        } else {
            let new = Owned::new(Version {
                seq,
                value: value.map(SmallVec::from_slice),
                older: Atomic::null(),
            });
            new.older.store(older, Ordering::Relaxed);
            let new = new.into_shared(guard);
            prune(new, oldest, guard);
            new
        };
        self.head.store(head, Ordering::Release);
        self.seq.store(seq, Ordering::Release);
        self.store_inline(words);
        self.status
            .store((s & !VALUE_BITS) | bits, Ordering::Relaxed);
        had
    }

    /// With the record locked: stores the inline words. Release stores: a reader whose word loads see
    /// them also sees our lock (taken before) in its status check after its acquire fence.
    fn store_inline(&self, words: [u64; 2]) {
        for (w, v) in self.inline.iter().zip(words) {
            w.store(v, Ordering::Release);
        }
    }

    /// With the slot locked by a compaction: the sequence number of its removal if it holds none of the
    /// visible value (the newest version is a removal or absent).
    pub fn removal_seq(&self, guard: &Guard) -> Option<u64> {
        let s = self.status.load(Ordering::Relaxed);
        if s & INLINE != 0 {
            return (s & REMOVED != 0).then(|| self.seq.load(Ordering::Relaxed));
        }
        let head = self.head.load(Ordering::Acquire, guard);
        // SAFETY: as in `install`.
        match unsafe { head.as_ref() } {
            None => Some(0),
            Some(v) if v.value.is_none() => Some(v.seq),
            Some(_) => None,
        }
    }

    /// Compaction phase 1: marks the record dead if it was removed at or before `oldest` (no snapshot can
    /// read it). Returns whether it is (now) dead.
    pub fn mark_dead_if_unreadable(&self, oldest: u64, guard: &Guard) -> bool {
        let s = self.lock_raw();
        if s & DEAD != 0 {
            self.unlock_raw(s & FLAGS);
            return true;
        }
        let dead = s & PTR == 0 && self.removal_seq(guard).is_some_and(|r| r <= oldest);
        self.unlock_raw((s & FLAGS) | if dead { DEAD } else { 0 });
        dead
    }

    /// Compaction phase 2: moves the target's chain into this reference slot, marks the target moved and
    /// makes this slot a plain record. No-op for a slot that is not a reference.
    pub fn absorb_target(&self, guard: &Guard) {
        let s = self.lock_raw();
        if s & PTR == 0 {
            self.unlock_raw(s & FLAGS);
            return;
        }
        // SAFETY: as in `read`.
        let t = unsafe { &*self.target.load(Ordering::Acquire) };
        let ts = t.lock_raw();
        let chain = t.head.swap(Shared::null(), Ordering::AcqRel, guard);
        self.head.store(chain, Ordering::Release);
        self.seq
            .store(t.seq.load(Ordering::Relaxed), Ordering::Release);
        self.store_inline(t.inline.each_ref().map(|w| w.load(Ordering::Relaxed)));
        t.unlock_raw((ts & FLAGS) | MOVED);
        // `target` keeps pointing at the old record: a reader that loaded our status while `PTR` was still
        // set may load it after this, and must find the (now moved) target, not a null pointer.
        self.unlock_raw(ts & VALUE_BITS);
    }
}

/// The status bits and inline words describing `value` as the newest version (`None`: a removal, held in
/// the slot too).
fn inline_words(value: Option<&[u8]>) -> (u64, [u64; 2]) {
    match value {
        None => (REMOVED | INLINE, [0; 2]),
        Some(v) if v.len() <= INLINE_BYTES => {
            let mut bytes = [0u8; INLINE_BYTES];
            if let Some(dst) = bytes.get_mut(..v.len()) {
                dst.copy_from_slice(v);
            }
            let (lo, hi) = bytes.split_at(8);
            let word = |b: &[u8]| u64::from_ne_bytes(b.try_into().unwrap_or([0; 8]));
            (
                INLINE | ((v.len() as u64) << LEN_SHIFT),
                [word(lo), word(hi)],
            )
        }
        Some(_) => (0, [0; 2]),
    }
}

/// The value held by inline `words` under status `s`.
#[inline]
fn inline_value<'g>(s: u64, words: [u64; 2]) -> Value<'g> {
    let [w0, w1] = words;
    let mut bytes = [0u8; INLINE_BYTES];
    let (lo, hi) = bytes.split_at_mut(8);
    lo.copy_from_slice(&w0.to_ne_bytes());
    hi.copy_from_slice(&w1.to_ne_bytes());
    let len = ((s & LEN) >> LEN_SHIFT) as usize;
    Value::Inline(bytes, len.min(INLINE_BYTES))
}

/// The first version of the chain at `head` with a sequence number ≤ `at`, as its value.
fn visible<'g>(head: Shared<'g, Version>, at: u64, guard: &'g Guard) -> Option<&'g [u8]> {
    let mut cur = head;
    // SAFETY: the caller is pinned; versions reachable from a record are retired only through the epoch.
    while let Some(v) = unsafe { cur.as_ref() } {
        if v.seq <= at {
            return v.value.as_deref();
        }
        cur = v.older.load(Ordering::Acquire, guard);
    }
    None
}

/// Cuts the chain below the newest version with seq ≤ `oldest` (the oldest version any snapshot reads),
/// retiring the rest.
fn prune(head: Shared<'_, Version>, oldest: u64, guard: &Guard) {
    let mut cur = head;
    // SAFETY: we hold the record's lock (no one else prunes it) and are pinned.
    while let Some(v) = unsafe { cur.as_ref() } {
        if v.seq <= oldest {
            retire_chain(v.older.swap(Shared::null(), Ordering::AcqRel, guard), guard);
            return;
        }
        cur = v.older.load(Ordering::Acquire, guard);
    }
}

/// Retires every version of a chain the record no longer reaches (the caller holds its lock and has
/// unlinked `rest`, or is about to replace the head that pointed at it).
fn retire_chain<'g>(mut rest: Shared<'g, Version>, guard: &'g Guard) {
    // SAFETY: `rest` is unreachable from the record once the caller's store lands; readers still on it
    // are pinned, and destruction waits for them.
    while let Some(r) = unsafe { rest.as_ref() } {
        let next = r.older.load(Ordering::Acquire, guard);
        // SAFETY: as above.
        unsafe { guard.defer_destroy(rest) };
        rest = next;
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        // SAFETY: a slot is dropped only when no thread can reach it (its group was retired through the
        // epoch), so its chain is ours alone.
        unsafe {
            let guard = epoch::unprotected();
            let mut cur = self.head.load(Ordering::Relaxed, guard);
            while !cur.is_null() {
                let next = cur.deref().older.load(Ordering::Relaxed, guard);
                drop(cur.into_owned());
                cur = next;
            }
        }
    }
}

/// Hints the CPU to load every cache line from `start` to `end` (inclusive; a no-op off x86-64).
#[inline(always)]
pub fn prefetch_lines(start: *const u8, end: *const u8) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let mut line = (start as usize) & !63;
        while line <= end as usize {
            // SAFETY: a prefetch is a hint: it neither faults nor changes memory, whatever the address.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(line as *const i8) };
            line += 64;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (start, end);
}
