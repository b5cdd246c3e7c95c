//! A model of the learned index's record and buffer protocol during a two-phase compaction and a group
//! merge (`index::learned::slot`, `buffer`, `compact` and `merge`), run under randomized schedules with
//! `shuttle`:
//!
//! * a record is a status word (`LOCK | PTR | MOVED` and a version above them), a value and a target; readers
//!   read it optimistically (status, data, status again; retry while locked or changed) and never lock;
//! * a group is an array of (key, record) and a delta buffer, and gets a temporary buffer when a structural
//!   change begins; a buffer is a sorted table of (key, record) under a sequence word, as the real one: an
//!   insert (under the buffer's mutex, which a compaction takes to close it) makes the word odd, shifts
//!   the entries above its key up one, stores its entry, bumps the length and makes the word even again;
//!   a reader searches without the mutex and retries unless the word was even and unchanged;
//! * readers and writers route a key through the root to a group, search its array, then its buffer, then
//!   its temporary buffer; writers lock the record they find (spinning on `LOCK`), follow `PTR` to the
//!   target and lock it too, restart from the root when they find `MOVED`, write, and unlock; a new key is
//!   inserted into the group's buffer, or — once it is closed, and unless the closed buffer holds the key —
//!   into its temporary buffer (an insert that finds the key present restarts);
//! * the structural change's phase 1 gives each replaced group the temporary buffer, closes their buffers,
//!   builds the new group's array of reference records (`PTR` to the old records of the arrays and closed
//!   buffers) with the temporary buffer as its buffer, and publishes it by swapping the root; phase 2 moves
//!   each old record's value into its reference under both locks, marks the old record `MOVED` and clears
//!   `PTR`.
//!
//! Old group 0 holds even keys, old group 1 odd keys: key 0 is in group 0's array, key 1 in group 1's,
//! key 2 in group 0's buffer, key 5 in group 1's buffer (never written), key 3 is new (its insert shifts
//! key 5's entry). A *compaction* replaces group 0 by the new group; a *merge*
//! replaces groups 0 and 1 by it. Two writers each write increasing values to two keys (writer 0: keys 0
//! and 2, writer 1: keys 1 and 3) and read back after every write; a reader reads every key throughout.
//! Checks: a writer reads its own last write (no update or insert lost), the reader's values per key never
//! go back (no stale read after a newer one; key 5 always reads its value), and after everything every key has one record in the new
//! root's groups holding its writer's last value. Iterations: `STRATA_SHUTTLE_ITERATIONS` (20,000 per
//! scenario by default).
//!
//! The model's power is tested too: each broken protocol variant ([`Bug`]) must fail it within 20,000
//! schedules of a fixed seed — phase 2 copying without the old record's lock, a writer writing through
//! `MOVED`, a merge publishing its group before taking in the closed buffers' records, a merge giving
//! the second group a temporary buffer of its own that the merged group does not take, a buffer reader
//! that does not check the sequence word, and a buffer insert that shifts entries without making it odd.
//!
//! The model found a real fault on its first run: phase 2 used to clear the reference's target pointer, so a
//! reader that read the reference's status (`PTR` set) just before phase 2 and its target just after
//! dereferenced a null pointer. Phase 2 now leaves the pointer in place (the old group outlives every
//! pinned reader), here and in `slot.rs`.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the test failing

use shuttle::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use shuttle::sync::{Arc, Mutex};
use shuttle::thread;

const LOCK: u64 = 1;
const PTR: u64 = 2;
const MOVED: u64 = 4;
const FLAGS: u64 = 7;
const VERSION_ONE: u64 = 8;
const NONE: usize = usize::MAX;
const KEYS: u64 = 4;
/// A key in group 1's buffer that no one writes: inserts of smaller keys shift its entry.
const STILL: u64 = 5;
/// Entries a buffer has room for.
const BUFFER_CAPACITY: usize = 4;
const WRITES: u64 = 3;
/// Old groups 0 and 1, the new group 2.
const NEW_GROUP: usize = 2;
/// Buffers 0 and 1 (the old groups'), 2 (the temporary one) and 3 (a stray one, for [`Bug::SeparateTmp`]).
const TMP: usize = 2;
const STRAY_TMP: usize = 3;
const RECORDS: usize = 32;

/// The value the last write of writer-owned `key` leaves, and its initial value (0: absent).
fn value(key: u64, write: u64) -> u64 {
    if write == 0 && key == 3 {
        0
    } else {
        key * 1000 + 100 + write
    }
}

/// One record: status, value (0 = absent), and the index of its target record (references only).
struct Record {
    status: AtomicU64,
    value: AtomicU64,
    target: AtomicUsize,
}

/// A buffer: the closed flag under the writers' mutex, the sequence word (odd while an insert changes
/// the entries), the length and the sorted (key, record) entries.
struct Buffer {
    closed: Mutex<bool>,
    seq: AtomicU64,
    len: AtomicUsize,
    keys: Vec<AtomicU64>,
    records: Vec<AtomicUsize>,
}

/// A group: array (filled before the group is published, never changed after, except by
/// [`Bug::PublishBeforeBufferMerge`]), buffer and temporary buffer.
struct Group {
    array: Mutex<Vec<(u64, usize)>>,
    buffer: usize,
    tmp: AtomicUsize,
}

/// Which structural change runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Change {
    /// Group 0 is compacted into the new group.
    Compact,
    /// Groups 0 and 1 are merged into the new group.
    Merge,
}

impl Change {
    fn replaced(self) -> &'static [usize] {
        match self {
            Change::Compact => &[0],
            Change::Merge => &[0, 1],
        }
    }
}

/// Protocol variants: the real one, and broken ones the model must catch.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Bug {
    None,
    CopyWithoutTargetLock,
    WriteThroughMoved,
    PublishBeforeBufferMerge,
    SeparateTmp,
    /// A buffer reader accepts what it found without checking the sequence word.
    UncheckedBufferRead,
    /// A buffer insert shifts entries without making the sequence word odd (nor bumping it).
    ShiftWithoutSeq,
}

struct Index {
    records: Vec<Record>,
    next_record: AtomicUsize,
    buffers: Vec<Buffer>,
    groups: Vec<Group>,
    /// 0: the old root (groups 0 and 1), 1: the new root.
    root: AtomicUsize,
    change: Change,
    bug: Bug,
}

enum Read {
    Found(u64),
    Moved,
}

enum Locked {
    /// Locked: write to record `.1`, then unlock `.0` (and `.1` if different).
    Held(usize, usize),
    Moved,
}

impl Index {
    fn new(change: Change, bug: Bug) -> Index {
        let records = (0..RECORDS)
            .map(|_| Record {
                status: AtomicU64::new(0),
                value: AtomicU64::new(0),
                target: AtomicUsize::new(NONE),
            })
            .collect();
        let buffers = (0..4)
            .map(|_| Buffer {
                closed: Mutex::new(false),
                seq: AtomicU64::new(0),
                len: AtomicUsize::new(0),
                keys: (0..BUFFER_CAPACITY).map(|_| AtomicU64::new(0)).collect(),
                records: (0..BUFFER_CAPACITY)
                    .map(|_| AtomicUsize::new(NONE))
                    .collect(),
            })
            .collect();
        let groups = [(0, vec![(0, 0)]), (1, vec![(1, 1)]), (TMP, vec![])]
            .into_iter()
            .map(|(buffer, array)| Group {
                array: Mutex::new(array),
                buffer,
                tmp: AtomicUsize::new(NONE),
            })
            .collect();
        let index = Index {
            records,
            next_record: AtomicUsize::new(0),
            buffers,
            groups,
            root: AtomicUsize::new(0),
            change,
            bug,
        };
        // Records 0 and 1 are the arrays' (keys 0 and 1), record 2 is key 2's in group 0's buffer, record
        // 3 key 5's in group 1's.
        for (i, key) in [0, 1, 2, STILL].into_iter().enumerate() {
            assert_eq!(index.alloc(value(key, 0)), i);
        }
        for (b, key, record) in [(0, 2, 2), (1, STILL, 3)] {
            let buf = &index.buffers[b];
            buf.keys[0].store(key, Ordering::Relaxed);
            buf.records[0].store(record, Ordering::Relaxed);
            buf.len.store(1, Ordering::Release);
        }
        index
    }

    /// The record of `key` in buffer `b`, read without its mutex (see [`Buffer`]).
    fn find(&self, b: usize, key: u64) -> Option<usize> {
        let buf = &self.buffers[b];
        loop {
            let s1 = buf.seq.load(Ordering::Acquire);
            if s1 & 1 != 0 {
                thread::yield_now();
                continue;
            }
            let len = buf.len.load(Ordering::Acquire);
            let found = (0..len)
                .find(|&i| buf.keys[i].load(Ordering::Acquire) == key)
                .map(|i| buf.records[i].load(Ordering::Acquire));
            if self.bug == Bug::UncheckedBufferRead || buf.seq.load(Ordering::Acquire) == s1 {
                return found;
            }
        }
    }

    /// The entries of buffer `b` (closed: they no longer change).
    fn entries(&self, b: usize) -> Vec<(u64, usize)> {
        let buf = &self.buffers[b];
        let _closed = buf.closed.lock().unwrap();
        (0..buf.len.load(Ordering::Acquire))
            .map(|i| {
                (
                    buf.keys[i].load(Ordering::Acquire),
                    buf.records[i].load(Ordering::Acquire),
                )
            })
            .collect()
    }

    fn rec(&self, i: usize) -> &Record {
        &self.records[i]
    }

    fn alloc(&self, value: u64) -> usize {
        let i = self.next_record.fetch_add(1, Ordering::Relaxed);
        self.rec(i).value.store(value, Ordering::Release);
        i
    }

    /// The group the current root routes `key` to.
    fn route(&self, key: u64) -> usize {
        let old = (key % 2) as usize;
        if self.root.load(Ordering::Acquire) == 1 && self.change.replaced().contains(&old) {
            NEW_GROUP
        } else {
            old
        }
    }

    /// The records `key` may have in group `g`, in search order: array, buffer, temporary buffer.
    fn candidates(&self, g: usize, key: u64) -> Vec<usize> {
        let group = &self.groups[g];
        let mut out = Vec::new();
        out.extend(
            group
                .array
                .lock()
                .unwrap()
                .iter()
                .find(|e| e.0 == key)
                .map(|e| e.1),
        );
        for b in [group.buffer, group.tmp.load(Ordering::Acquire)] {
            if b != NONE {
                out.extend(self.find(b, key));
            }
        }
        out
    }

    fn read_record(&self, i: usize) -> Read {
        loop {
            let r = self.rec(i);
            let s1 = r.status.load(Ordering::Acquire);
            if s1 & LOCK != 0 {
                thread::yield_now();
                continue;
            }
            if s1 & MOVED != 0 {
                return Read::Moved;
            }
            let found = if s1 & PTR != 0 {
                match self.read_record(r.target.load(Ordering::Acquire)) {
                    Read::Found(v) => v,
                    // Phase 2 moved it: our own status changed meanwhile, so read again.
                    Read::Moved => continue,
                }
            } else {
                r.value.load(Ordering::Acquire)
            };
            if r.status.load(Ordering::Acquire) == s1 {
                return Read::Found(found);
            }
        }
    }

    fn get(&self, key: u64) -> u64 {
        // The first record found answers (the model has no dead records to skip).
        loop {
            let Some(&r) = self.candidates(self.route(key), key).first() else {
                return 0;
            };
            if let Read::Found(v) = self.read_record(r) {
                return v;
            }
        }
    }

    fn lock_raw(&self, i: usize) -> u64 {
        let r = self.rec(i);
        loop {
            let s = r.status.load(Ordering::Relaxed);
            if s & LOCK == 0
                && r.status
                    .compare_exchange(s, s | LOCK, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return s;
            }
            thread::yield_now();
        }
    }

    fn unlock_raw(&self, i: usize, flags: u64) {
        let r = self.rec(i);
        let s = r.status.load(Ordering::Relaxed);
        r.status
            .store(((s & !FLAGS) + VERSION_ONE) | flags, Ordering::Release);
    }

    fn lock(&self, i: usize) -> Locked {
        let s = self.lock_raw(i);
        if s & MOVED != 0 && self.bug != Bug::WriteThroughMoved {
            self.unlock_raw(i, s & FLAGS & !LOCK);
            return Locked::Moved;
        }
        if s & PTR != 0 {
            let t = self.rec(i).target.load(Ordering::Acquire);
            let ts = self.lock_raw(t);
            if ts & MOVED != 0 {
                self.unlock_raw(t, ts & FLAGS & !LOCK);
                self.unlock_raw(i, s & FLAGS & !LOCK);
                return Locked::Moved;
            }
            return Locked::Held(i, t);
        }
        Locked::Held(i, i)
    }

    fn unlock(&self, slot: usize, held: usize) {
        if held != slot {
            let ts = self.rec(held).status.load(Ordering::Relaxed);
            self.unlock_raw(held, ts & FLAGS & !LOCK);
        }
        let s = self.rec(slot).status.load(Ordering::Relaxed);
        self.unlock_raw(slot, s & FLAGS & !LOCK);
    }

    /// Inserts a record of `key` holding `value` into buffer `b`: `Some(true)` done, `Some(false)` the key
    /// is there already, `None` the buffer is closed.
    fn insert(&self, b: usize, key: u64, value: u64) -> Option<bool> {
        let buf = &self.buffers[b];
        let closed = buf.closed.lock().unwrap();
        if *closed {
            return None;
        }
        let len = buf.len.load(Ordering::Relaxed);
        let keys: Vec<u64> = (0..len)
            .map(|i| buf.keys[i].load(Ordering::Relaxed))
            .collect();
        if keys.contains(&key) {
            return Some(false);
        }
        let pos = keys.partition_point(|&k| k < key);
        let r = self.alloc(value);
        let s = buf.seq.load(Ordering::Relaxed);
        let checked = self.bug != Bug::ShiftWithoutSeq;
        if checked {
            buf.seq.store(s + 1, Ordering::Release);
        }
        for i in (pos..len).rev() {
            let (k, rec) = (
                buf.keys[i].load(Ordering::Relaxed),
                buf.records[i].load(Ordering::Relaxed),
            );
            buf.keys[i + 1].store(k, Ordering::Release);
            buf.records[i + 1].store(rec, Ordering::Release);
        }
        buf.keys[pos].store(key, Ordering::Release);
        buf.records[pos].store(r, Ordering::Release);
        buf.len.store(len + 1, Ordering::Release);
        if checked {
            buf.seq.store(s + 2, Ordering::Release);
        }
        Some(true)
    }

    fn put(&self, key: u64, value: u64) {
        'retry: loop {
            let g = self.route(key);
            if let Some(&r) = self.candidates(g, key).first() {
                match self.lock(r) {
                    Locked::Held(slot, held) => {
                        self.rec(held).value.store(value, Ordering::Release);
                        self.unlock(slot, held);
                        return;
                    }
                    Locked::Moved => continue 'retry,
                }
            }
            let group = &self.groups[g];
            match self.insert(group.buffer, key, value) {
                Some(true) => return,
                Some(false) => continue 'retry,
                None => {}
            }
            // Closed: unless it holds the key after all, insert into the temporary buffer.
            let closed_has_key = self.entries(group.buffer).iter().any(|e| e.0 == key);
            let tmp = group.tmp.load(Ordering::Acquire);
            if !closed_has_key && tmp != NONE && self.insert(tmp, key, value) == Some(true) {
                return;
            }
            thread::yield_now();
        }
    }

    /// A reference record to `target`.
    fn reference(&self, key: u64, target: usize) -> (u64, usize) {
        let r = self.alloc(0);
        self.rec(r).target.store(target, Ordering::Relaxed);
        self.rec(r).status.store(PTR, Ordering::Release);
        (key, r)
    }

    /// Phase 2 for the new record `i`: take over its target's value, mark the target moved.
    fn absorb(&self, i: usize) {
        let s = self.lock_raw(i);
        assert!(s & PTR != 0, "phase 2 runs once per reference");
        let t = self.rec(i).target.load(Ordering::Acquire);
        let ts = if self.bug == Bug::CopyWithoutTargetLock {
            self.rec(t).status.load(Ordering::Acquire) & !LOCK
        } else {
            self.lock_raw(t)
        };
        let v = self.rec(t).value.load(Ordering::Acquire);
        self.rec(i).value.store(v, Ordering::Release);
        if self.bug == Bug::CopyWithoutTargetLock {
            self.rec(t).status.fetch_or(MOVED, Ordering::AcqRel);
        } else {
            self.unlock_raw(t, (ts & FLAGS & !LOCK) | MOVED);
        }
        // The target stays in place (see `Slot::absorb_target`): a reader that saw `PTR` before this may
        // still follow it.
        self.unlock_raw(i, 0);
    }

    /// The compaction or merge: phase 1, publication, phase 2.
    fn restructure(&self) {
        let replaced = self.change.replaced();
        for &g in replaced {
            let tmp = if self.bug == Bug::SeparateTmp && g == 1 {
                STRAY_TMP
            } else {
                TMP
            };
            self.groups[g].tmp.store(tmp, Ordering::Release);
        }
        for &g in replaced {
            *self.buffers[self.groups[g].buffer].closed.lock().unwrap() = true;
        }
        let mut array = Vec::new();
        let mut late = Vec::new();
        for &g in replaced {
            for (k, r) in self.groups[g].array.lock().unwrap().clone() {
                array.push(self.reference(k, r));
            }
            let buffered = self.entries(self.groups[g].buffer);
            for (k, r) in buffered {
                let reference = self.reference(k, r);
                if self.bug == Bug::PublishBeforeBufferMerge {
                    late.push(reference);
                } else {
                    array.push(reference);
                }
            }
        }
        *self.groups[NEW_GROUP].array.lock().unwrap() = array;
        self.root.store(1, Ordering::Release);
        self.groups[NEW_GROUP].array.lock().unwrap().extend(late);
        let refs = self.groups[NEW_GROUP].array.lock().unwrap().clone();
        for (_, r) in refs {
            self.absorb(r);
        }
    }
}

fn schedule(change: Change, bug: Bug) {
    let index = Arc::new(Index::new(change, bug));
    let writers: Vec<_> = (0..2u64)
        .map(|w| {
            let index = Arc::clone(&index);
            thread::spawn(move || {
                for write in 1..=WRITES {
                    for key in [w, w + 2] {
                        let v = value(key, write);
                        index.put(key, v);
                        assert_eq!(index.get(key), v, "key {key}: a write was lost");
                    }
                }
            })
        })
        .collect();
    let reader = {
        let index = Arc::clone(&index);
        thread::spawn(move || {
            let mut last = [0u64; KEYS as usize];
            for _ in 0..2 {
                for (key, seen) in last.iter_mut().enumerate() {
                    let v = index.get(key as u64);
                    assert!(v >= *seen, "key {key}: read {v} after {seen}");
                    *seen = v;
                }
                let v = index.get(STILL);
                assert_eq!(
                    v,
                    value(STILL, 0),
                    "key {STILL}: read {v}, a buffered key was lost"
                );
            }
        })
    };
    let restructurer = {
        let index = Arc::clone(&index);
        thread::spawn(move || index.restructure())
    };
    for w in writers {
        w.join().unwrap();
    }
    reader.join().unwrap();
    restructurer.join().unwrap();
    assert_eq!(index.get(STILL), value(STILL, 0), "key {STILL} was lost");
    for key in 0..KEYS {
        let g = index.route(key);
        let records = index.candidates(g, key);
        assert_eq!(
            records.len(),
            1,
            "key {key}: records {records:?} in group {g}"
        );
        assert_eq!(
            index.get(key),
            value(key, WRITES),
            "key {key}: the new root lost the last write"
        );
    }
    for (_, r) in index.groups[NEW_GROUP].array.lock().unwrap().iter() {
        let s = index.rec(*r).status.load(Ordering::Acquire);
        assert_eq!(s & FLAGS, 0, "reference {r} after phase 2");
        let t = index.rec(*r).target.load(Ordering::Acquire);
        assert_ne!(index.rec(t).status.load(Ordering::Acquire) & MOVED, 0);
    }
}

fn iterations() -> usize {
    std::env::var("STRATA_SHUTTLE_ITERATIONS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000)
}

#[test]
fn two_phase_compaction_loses_no_update_and_serves_no_stale_read() {
    shuttle::check_random(|| schedule(Change::Compact, Bug::None), iterations());
}

#[test]
fn group_merge_loses_no_update_or_insert_and_serves_no_stale_read() {
    shuttle::check_random(|| schedule(Change::Merge, Bug::None), iterations());
}

/// Runs a broken variant under a fixed seed; the model must fail it.
fn broken(change: Change, bug: Bug) {
    shuttle::check_random_with_seed(move || schedule(change, bug), 7, 20_000);
}

#[test]
#[should_panic(expected = "a write was lost")]
fn model_catches_phase_2_copying_without_the_old_records_lock() {
    broken(Change::Compact, Bug::CopyWithoutTargetLock);
}

#[test]
#[should_panic(expected = "a write was lost")]
fn model_catches_a_writer_writing_through_moved() {
    broken(Change::Compact, Bug::WriteThroughMoved);
}

#[test]
#[should_panic(expected = "a write was lost")]
fn model_catches_a_merge_published_before_its_buffers_are_merged() {
    broken(Change::Merge, Bug::PublishBeforeBufferMerge);
}

#[test]
#[should_panic(expected = "a write was lost")]
fn model_catches_a_merge_that_drops_a_groups_temporary_buffer() {
    broken(Change::Merge, Bug::SeparateTmp);
}

// A torn buffer read shows either as a buffered key missing or as another key's record (a value that
// goes back): every check of the model names its key.
#[test]
#[should_panic(expected = "key ")]
fn model_catches_a_buffer_reader_that_ignores_the_sequence_word() {
    broken(Change::Compact, Bug::UncheckedBufferRead);
}

#[test]
#[should_panic(expected = "key ")]
fn model_catches_a_buffer_insert_that_shifts_without_the_sequence_word() {
    broken(Change::Compact, Bug::ShiftWithoutSeq);
}
