//! A group's delta buffer: the records inserted since the group's array was built.
//!
//! The entries are a sorted table of keys and record pointers, changed in place under a sequence lock:
//! * writers (inserts) serialize on the buffer's mutex; an insert makes the sequence word odd, shifts the
//!   entries above the new key up by one, stores the new entry, bumps the length and makes the word even
//!   again. A full table is copied into one of twice the size first (published before the insert, the old
//!   one retired through the epoch): O(log n) allocations over a buffer's life, none per insert.
//! * readers take no lock: they read the sequence word, search the table with atomic loads, and accept
//!   the answer only if the word was even and unchanged across the search (else retry). Every entry is an
//!   atomic word, so a reader racing an insert sees torn but defined data and throws it away.
//! * records live in an arena of slot chunks owned by the buffer (8, 16, … 256 slots each): they keep their
//!   addresses for the buffer's life, and an insert claims the next pre-locked empty slot instead of
//!   allocating one. A buffer may also keep other buffers alive whose records its entries point at (after
//!   a group split).
//! * a table outgrown by a copy stays with the buffer (readers may still search it) until the buffer is
//!   dropped; then its chunks and tables go to the index's [`Recycler`], where growing buffers take them
//!   from: the writer neither allocates nor frees them through the global allocator in the steady state,
//!   so it never waits on the allocator lock the maintenance thread holds while it drops replaced groups
//!   (see `recycle.rs`).
//!
//! A compaction *closes* the buffer: inserts then go elsewhere (the group's temporary buffer, or a retry
//! from the root), so a closed buffer's entries never change again.
//!
//! Invariant: at most one entry per key; an entry is replaced only when its record is `DEAD`.
//!
//! Cost: a lookup is a binary search of ≤ the buffer's length (kept small by compactions) plus two loads
//! of the sequence word; an insert shifts the entries above its key (O(length) word moves, no allocation
//! except when the table or the arena grows).

use super::recycle::Recycler;
use super::slot::{DEAD, Slot};
use crossbeam_epoch::{Atomic, Guard, Owned};
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering, fence};

/// Entries of a table that a new table starts with room for.
pub(super) const FIRST_CAPACITY: usize = 16;
/// Slots of the arena's first chunk; chunks double up to [`MAX_CHUNK`].
pub(super) const FIRST_CHUNK: usize = 8;
pub(super) const MAX_CHUNK: usize = 256;
/// Chunks (and outgrown tables) a buffer has room for without growing its lists: a buffer compacted at
/// 2,048 records has 12 chunks and 7 outgrown tables.
const LIST_ROOM: usize = 16;

/// A fixed-capacity table of sorted entries (the first `len` of the buffer are valid).
pub(super) struct Table {
    keys: Box<[AtomicU64]>,
    slots: Box<[AtomicPtr<Slot>]>,
}

impl Table {
    pub(super) fn with_capacity(cap: usize) -> Table {
        Table {
            keys: (0..cap).map(|_| AtomicU64::new(0)).collect(),
            slots: (0..cap)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect(),
        }
    }

    /// Entries it has room for.
    pub(super) fn capacity(&self) -> usize {
        self.keys.len()
    }

    fn key(&self, i: usize) -> u64 {
        self.keys
            .get(i)
            .map_or(u64::MAX, |k| k.load(Ordering::Relaxed))
    }

    fn slot(&self, i: usize) -> *const Slot {
        self.slots
            .get(i)
            .map_or(std::ptr::null(), |s| s.load(Ordering::Relaxed).cast_const())
    }

    fn set(&self, i: usize, key: u64, slot: *const Slot) {
        if let (Some(k), Some(s)) = (self.keys.get(i), self.slots.get(i)) {
            k.store(key, Ordering::Relaxed);
            s.store(slot.cast_mut(), Ordering::Relaxed);
        }
    }

    /// Moves the entries `pos..len` up by one (`len` < capacity), highest first. Over subslices, so the
    /// loop carries no bounds check per entry (the shift is most of an insert's cost).
    fn shift_up(&self, pos: usize, len: usize) {
        shift_column(&self.keys, pos, len, |from, to| {
            to.store(from.load(Ordering::Relaxed), Ordering::Relaxed);
        });
        shift_column(&self.slots, pos, len, |from, to| {
            to.store(from.load(Ordering::Relaxed), Ordering::Relaxed);
        });
    }

    /// The first position of `0..len` whose key is ≥ `key` (`len` if none).
    fn lower_bound(&self, len: usize, key: u64) -> usize {
        let (mut lo, mut hi) = (0, len.min(self.keys.len()));
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.key(mid) < key {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }
}

/// Moves `column[pos..len]` to `column[pos + 1..=len]` with `step(from, to)`, highest first.
#[inline]
fn shift_column<A>(column: &[A], pos: usize, len: usize, step: impl Fn(&A, &A)) {
    if let Some(run) = column.get(pos..=len) {
        for w in run.windows(2).rev() {
            if let [from, to] = w {
                step(from, to);
            }
        }
    }
}

/// The records a buffer owns: chunks of slots, the last one filled up to `used`; and the tables it outgrew.
struct Arena {
    // Boxed slices: slots keep their addresses while the vector grows.
    chunks: Vec<Box<[Slot]>>,
    used: usize,
    /// Tables replaced by larger ones, kept until the buffer drops (readers pinned before the swap may
    /// still search them).
    outgrown: Vec<Owned<Table>>,
}

impl Arena {
    /// The next unused slot: locked and empty (every arena slot is made so, and none is reachable before
    /// it is claimed).
    fn claim(&mut self, recycler: &Recycler) -> *const Slot {
        let full = self.chunks.last().is_none_or(|c| self.used == c.len());
        if full {
            let size = self
                .chunks
                .last()
                .map_or(FIRST_CHUNK, |c| (c.len() * 2).min(MAX_CHUNK));
            self.chunks.push(recycler.chunk(size));
            self.used = 0;
        }
        let slot = self
            .chunks
            .last()
            .and_then(|c| c.get(self.used))
            .map_or(std::ptr::null(), |s| s as *const Slot);
        self.used += 1;
        slot
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
    /// Held by inserts (and by `close`).
    arena: Mutex<Arena>,
    /// The sequence word over `table`'s contents and `len`: odd while an insert changes them.
    seq: AtomicU64,
    len: AtomicUsize,
    table: Atomic<Table>,
    closed: AtomicBool,
    /// Buffers owning records our entries point at (kept alive, never read).
    _keep_alive: Vec<Arc<Buffer>>,
    /// Where its chunks and tables come from and go back to.
    recycler: Arc<Recycler>,
}

impl Buffer {
    /// An empty buffer whose memory comes from (and goes back to) `recycler`.
    pub fn new(recycler: &Arc<Recycler>) -> Buffer {
        Self::with_entries(Vec::new(), Vec::new(), recycler)
    }

    /// A buffer whose entries (sorted, distinct keys) point at records owned by the buffers in
    /// `keep_alive`.
    pub fn with_entries(
        entries: Vec<(u64, *const Slot)>,
        keep_alive: Vec<Arc<Buffer>>,
        recycler: &Arc<Recycler>,
    ) -> Buffer {
        let table = Table::with_capacity(if entries.is_empty() {
            0
        } else {
            entries.len().max(FIRST_CAPACITY)
        });
        for (i, &(k, s)) in entries.iter().enumerate() {
            table.set(i, k, s);
        }
        Buffer {
            arena: Mutex::new(Arena {
                chunks: Vec::with_capacity(LIST_ROOM),
                used: 0,
                outgrown: Vec::with_capacity(LIST_ROOM),
            }),
            seq: AtomicU64::new(0),
            len: AtomicUsize::new(entries.len()),
            table: Atomic::new(table),
            closed: AtomicBool::new(false),
            _keep_alive: keep_alive,
            recycler: recycler.clone(),
        }
    }

    fn table<'g>(&self, guard: &'g Guard) -> &'g Table {
        // SAFETY: the table pointer is never null and old tables are retired through the epoch.
        unsafe { self.table.load(Ordering::Acquire, guard).deref() }
    }

    /// Runs `read` on the table and length until it ran while no insert changed them.
    #[inline]
    fn read_stable<'g, T>(&self, guard: &'g Guard, read: impl Fn(&'g Table, usize) -> T) -> T {
        loop {
            let s1 = self.seq.load(Ordering::Acquire);
            if s1 & 1 != 0 {
                std::hint::spin_loop();
                continue;
            }
            let table = self.table(guard);
            let out = read(table, self.len.load(Ordering::Relaxed));
            // Orders the loads above before the check: if any saw an insert's store, the check sees
            // its odd word or a later one.
            fence(Ordering::Acquire);
            if self.seq.load(Ordering::Relaxed) == s1 {
                return out;
            }
        }
    }

    /// The record of `key`, if any.
    #[inline]
    pub fn find<'g>(&self, key: u64, guard: &'g Guard) -> Option<&'g Slot> {
        let p = self.read_stable(guard, |t, len| {
            let i = t.lower_bound(len, key);
            if i < len && t.key(i) == key {
                t.slot(i)
            } else {
                std::ptr::null()
            }
        });
        // SAFETY: a stable read's pointer is one of our entries' records, owned by this buffer (or one it
        // keeps alive) and alive while we are pinned on a group that reaches the buffer.
        unsafe { p.as_ref() }
    }

    /// The entries with keys in `lo..=hi`, in key order (a consistent copy).
    pub fn range(&self, lo: u64, hi: u64, guard: &Guard) -> Vec<(u64, *const Slot)> {
        self.read_stable(guard, |t, len| {
            let mut i = t.lower_bound(len, lo);
            let mut out = Vec::new();
            while i < len {
                let k = t.key(i);
                if k > hi {
                    break;
                }
                out.push((k, t.slot(i)));
                i += 1;
            }
            out
        })
    }

    /// All entries, in key order.
    pub fn all(&self, guard: &Guard) -> Vec<(u64, *const Slot)> {
        self.range(0, u64::MAX, guard)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    /// True when the buffer has no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True when inserts are refused.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Refuses every later insert; returns once no insert is under way.
    pub fn close(&self) {
        let _arena = self.arena.lock();
        self.closed.store(true, Ordering::Release);
    }

    /// Inserts a new locked empty record for `key` unless the buffer is closed or holds a live one.
    pub fn insert<'g>(&self, key: u64, guard: &'g Guard) -> Insert<'g> {
        let mut arena = self.arena.lock();
        if self.closed.load(Ordering::Acquire) {
            return Insert::Closed;
        }
        let mut table = self.table(guard);
        let len = self.len.load(Ordering::Relaxed);
        let pos = table.lower_bound(len, key);
        let replace = pos < len && table.key(pos) == key;
        if replace {
            // SAFETY: records are owned by this buffer (or ones it keeps alive) and freed with it.
            let slot = unsafe { &*table.slot(pos) };
            if slot.status() & DEAD == 0 {
                return Insert::Exists(slot);
            }
        }
        let new = arena.claim(&self.recycler);
        if !replace && len == table.keys.len() {
            let bigger = self.recycler.table((2 * len).max(FIRST_CAPACITY));
            for i in 0..len {
                bigger.set(i, table.key(i), table.slot(i));
            }
            let old = self
                .table
                .swap(Owned::from(bigger), Ordering::AcqRel, guard);
            // SAFETY: `old` is unreachable for threads that load the table from now on; those still on it
            // are pinned on a group that reaches this buffer, which outlives them: the table is kept (not
            // dropped) until the buffer drops.
            arena.outgrown.push(unsafe { old.into_owned() });
            table = self.table(guard);
        }
        let s = self.seq.load(Ordering::Relaxed);
        self.seq.store(s + 1, Ordering::Relaxed);
        // Orders the odd word before the entry stores (a reader seeing a store sees the odd word).
        fence(Ordering::Release);
        if !replace {
            table.shift_up(pos, len);
            self.len.store(len + 1, Ordering::Relaxed);
        }
        table.set(pos, key, new);
        self.seq.store(s + 2, Ordering::Release);
        // SAFETY: the slot lives in our arena as long as this buffer.
        Insert::Inserted(unsafe { &*new })
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: dropped only when unreachable (its group was retired through the epoch).
        let current = unsafe {
            let guard = crossbeam_epoch::unprotected();
            let t = self.table.load(Ordering::Relaxed, guard);
            (!t.is_null()).then(|| t.into_owned())
        };
        let arena = self.arena.get_mut();
        for t in current.into_iter().chain(arena.outgrown.drain(..)) {
            self.recycler.give_table(t.into_box());
        }
        for chunk in arena.chunks.drain(..) {
            self.recycler.give_chunk(chunk);
        }
    }
}
