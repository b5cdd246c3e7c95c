//! The mutable buffer: an unsorted, fixed-capacity array of write operations (puts and deletes) that readers
//! see without locks.
//!
//! * **Claiming**: a writer claims a run of slots `i..i+n` for a batch with one atomic `fetch_add`; a run
//!   that does not fit means the buffer is full (its end is then fixed at `i`; the caller seals the buffer and
//!   moves on to a fresh one).
//! * **Publication**: after filling its slots, a writer waits for its turn (every earlier slot published),
//!   links each slot into the key index, and then advances `published` to `i + n` with one release store:
//!   a whole batch becomes visible at once, and slots become visible in claim order.
//! * **Key index**: an open-addressing table from key to the newest *indexed* slot holding it (bucket =
//!   slot + 1; the key is read from the slot), and per slot a link to the previous slot of the same key. A
//!   reader loads `published` first and walks the links back past slots that are not published yet, so
//!   everything it sees is consistent with one published prefix.
//!
//! Invariants: `published ≤ min(claimed, end, capacity)`; indexing happens in slot order (one writer at a
//! time, in its publication turn), so each key's links run newest to oldest; every slot below `published`
//! is fully written and indexed.
//! Cost: an append is one `fetch_add`, a wait for the turn (none without contention), a hash probe and one
//! release store; memory ≈ 29 B per slot plus 8 B per slot of hash table (32-bit slot links).

use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// What a buffer slot holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    Put,
    Delete,
}

/// One slot's contents.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BufferEntry {
    pub key: u64,
    pub value: u64,
    pub weight: f64,
    pub kind: OpKind,
}

impl BufferEntry {
    /// A put of `value` under `key` with `weight`.
    pub fn put(key: u64, value: u64, weight: f64) -> BufferEntry {
        BufferEntry {
            key,
            value,
            weight,
            kind: OpKind::Put,
        }
    }

    /// A delete of `key`.
    pub fn delete(key: u64) -> BufferEntry {
        BufferEntry {
            key,
            value: 0,
            weight: 0.0,
            kind: OpKind::Delete,
        }
    }
}

const PUT: u8 = 1;
const DELETE: u8 = 2;

/// A buffer of up to `capacity` operations.
#[derive(Debug)]
pub struct MutableBuffer {
    keys: Box<[AtomicU64]>,
    values: Box<[AtomicU64]>,
    weights: Box<[AtomicU64]>,
    kinds: Box<[AtomicU8]>,
    /// Link to the previous slot of the same key (slot + 1; 0 = none). 32 bits: capacities stay below 2^32
    /// (`DynOptions` allows at most 2^26), and half-width links keep the key index small in cache.
    prev: Box<[AtomicU32]>,
    claimed: AtomicUsize,
    /// Where the buffer ends: its capacity, or the start of the first run that did not fit.
    end: AtomicUsize,
    published: AtomicUsize,
    deletes: AtomicUsize,
    /// Slot + 1 of the latest slot per key; 0 = empty bucket.
    table: Box<[AtomicU32]>,
    mask: usize,
}

/// The buffer had no free slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferFull;

#[inline]
fn bucket_of(key: u64) -> usize {
    // Fibonacci hashing: the high bits of key · 2^64/φ.
    (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 20) as usize
}

impl MutableBuffer {
    /// An empty buffer for `capacity` operations (at least 1).
    pub fn new(capacity: usize) -> MutableBuffer {
        let capacity = capacity.clamp(1, u32::MAX as usize - 1);
        let table_len = (capacity * 2).next_power_of_two();
        let atomics = |n: usize| (0..n).map(|_| AtomicU64::new(0)).collect();
        let links = |n: usize| (0..n).map(|_| AtomicU32::new(0)).collect();
        MutableBuffer {
            keys: atomics(capacity),
            values: atomics(capacity),
            weights: atomics(capacity),
            kinds: (0..capacity).map(|_| AtomicU8::new(0)).collect(),
            prev: links(capacity),
            claimed: AtomicUsize::new(0),
            end: AtomicUsize::new(capacity),
            published: AtomicUsize::new(0),
            deletes: AtomicUsize::new(0),
            table: links(table_len),
            mask: table_len - 1,
        }
    }

    /// Empties the buffer for reuse: what `new` would give, without allocating (only the key index is
    /// zeroed). The caller must hold the only reference (`Arc::strong_count == 1`): nobody may read it.
    pub fn reset(&self) {
        self.claimed.store(0, Ordering::Relaxed);
        self.end.store(self.capacity(), Ordering::Relaxed);
        self.published.store(0, Ordering::Relaxed);
        self.deletes.store(0, Ordering::Relaxed);
        for b in self.table.iter() {
            b.store(0, Ordering::Relaxed);
        }
        // Whoever receives the buffer next gets it through a lock or a published version (a release).
        std::sync::atomic::fence(Ordering::Release);
    }

    /// Slots the buffer holds at most.
    pub fn capacity(&self) -> usize {
        self.keys.len()
    }

    /// Published slots (what readers see).
    #[inline]
    pub fn len(&self) -> usize {
        self.published.load(Ordering::Acquire)
    }

    /// True when nothing is published.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Published deletes.
    pub fn deletes(&self) -> usize {
        self.deletes.load(Ordering::Acquire)
    }

    /// True once a claim has failed or every slot is claimed.
    pub fn is_full(&self) -> bool {
        self.claimed.load(Ordering::Acquire) >= self.end.load(Ordering::Acquire)
    }

    /// Closes the buffer to further appends (when it is sealed before it is full): every later claim fails,
    /// and `settle` waits only for the claims made before.
    pub fn close(&self) {
        let claimed = self
            .claimed
            .fetch_add(self.capacity() + 1, Ordering::AcqRel);
        self.end
            .fetch_min(claimed.min(self.capacity()), Ordering::AcqRel);
    }

    /// Appends one operation; `Err(BufferFull)` when no slot is left.
    pub fn append(&self, entry: BufferEntry) -> Result<(), BufferFull> {
        self.append_batch(std::slice::from_ref(&entry))
    }

    /// Appends a batch, made visible to readers at once; `Err(BufferFull)` (and nothing appended) when it
    /// does not fit in the slots left.
    pub fn append_batch(&self, entries: &[BufferEntry]) -> Result<(), BufferFull> {
        let n = entries.len();
        if n == 0 {
            return Ok(());
        }
        let i = self.claimed.fetch_add(n, Ordering::AcqRel);
        if i.saturating_add(n) > self.capacity() {
            // Later claims start past this one and fail too; earlier ones still publish up to `i`.
            self.end.fetch_min(i.min(self.capacity()), Ordering::AcqRel);
            return Err(BufferFull);
        }
        for (s, e) in (i..).zip(entries) {
            self.keys[s].store(e.key, Ordering::Relaxed);
            self.values[s].store(e.value, Ordering::Relaxed);
            self.weights[s].store(e.weight.to_bits(), Ordering::Relaxed);
            let kind = match e.kind {
                OpKind::Put => PUT,
                OpKind::Delete => DELETE,
            };
            self.kinds[s].store(kind, Ordering::Relaxed);
        }
        // Wait for the turn: every earlier slot published (and so indexed).
        let mut spins = 0u32;
        while self.published.load(Ordering::Acquire) != i {
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        let mut deletes = 0;
        for (s, e) in (i..).zip(entries) {
            self.index_slot(e.key, s);
            deletes += usize::from(e.kind == OpKind::Delete);
        }
        if deletes > 0 {
            self.deletes.fetch_add(deletes, Ordering::AcqRel);
        }
        self.published.store(i + n, Ordering::Release);
        Ok(())
    }

    /// Links `slot` as the newest slot of `key` (called in slot order, one writer at a time).
    fn index_slot(&self, key: u64, slot: usize) {
        let mut b = bucket_of(key) & self.mask;
        let tag = slot as u32 + 1;
        loop {
            let cur = self.table[b].load(Ordering::Acquire);
            if cur == 0 || self.keys[(cur - 1) as usize].load(Ordering::Relaxed) == key {
                self.prev[slot].store(cur, Ordering::Relaxed);
                self.table[b].store(tag, Ordering::Release);
                return;
            }
            b = (b + 1) & self.mask;
        }
    }

    /// The latest published slot holding `key`.
    #[inline]
    pub fn latest_slot(&self, key: u64) -> Option<usize> {
        self.latest_slot_below(key, self.len())
    }

    /// The latest slot below `limit` holding `key`, where `limit` is a length read earlier (`len()`): lookups
    /// against one snapshot of a buffer that writers keep appending to.
    #[inline]
    pub fn latest_slot_below(&self, key: u64, limit: usize) -> Option<usize> {
        let published = limit.min(self.len()) as u32;
        let mut b = bucket_of(key) & self.mask;
        loop {
            let cur = self.table[b].load(Ordering::Acquire);
            if cur == 0 {
                return None;
            }
            if self.keys[(cur - 1) as usize].load(Ordering::Relaxed) == key {
                let mut tag = cur;
                while tag > published {
                    tag = self.prev[(tag - 1) as usize].load(Ordering::Relaxed);
                }
                return (tag > 0).then(|| (tag - 1) as usize);
            }
            b = (b + 1) & self.mask;
        }
    }

    /// Asks the CPU to load the key index's slot for `key`, ahead of [`contains`](Self::contains).
    #[inline]
    pub fn prefetch_key(&self, key: u64) {
        if let Some(slot) = self.table.get(bucket_of(key) & self.mask) {
            crate::algo::prefetch_line(slot);
        }
    }

    /// True if the buffer holds an operation on `key`.
    #[inline]
    pub fn contains(&self, key: u64) -> bool {
        self.latest_slot(key).is_some()
    }

    /// The latest operation on `key`.
    pub fn get(&self, key: u64) -> Option<BufferEntry> {
        self.latest_slot(key).map(|s| self.entry(s))
    }

    /// The keys of the published slots, as plain integers (a scan over them compiles to tight, vectorisable
    /// code, unlike one atomic load per slot).
    pub fn published_keys(&self) -> &[u64] {
        let len = self.len();
        // SAFETY: `AtomicU64` has the same size, alignment and bit validity as `u64`, so the first `len`
        // elements of `keys` may be viewed as `[u64]`. A slot below `published` is written exactly once,
        // before the release store that published it, which the acquire load in `len()` synchronises with;
        // no thread writes it afterwards, so these plain reads race with nothing (other threads only read).
        unsafe { std::slice::from_raw_parts(self.keys.as_ptr().cast::<u64>(), len) }
    }

    /// Key of slot `i` (`i < len()`).
    #[inline]
    pub fn key(&self, i: usize) -> u64 {
        self.keys[i].load(Ordering::Relaxed)
    }

    /// Slot `i` (`i < len()`).
    pub fn entry(&self, i: usize) -> BufferEntry {
        BufferEntry {
            key: self.keys[i].load(Ordering::Relaxed),
            value: self.values[i].load(Ordering::Relaxed),
            weight: f64::from_bits(self.weights[i].load(Ordering::Relaxed)),
            kind: if self.kinds[i].load(Ordering::Relaxed) == DELETE {
                OpKind::Delete
            } else {
                OpKind::Put
            },
        }
    }

    /// True if slot `i` is the live version of its key in this buffer: the latest operation on the key, and
    /// a put.
    #[inline]
    pub fn is_live_slot(&self, i: usize) -> bool {
        self.kinds[i].load(Ordering::Relaxed) == PUT && self.latest_slot(self.key(i)) == Some(i)
    }

    /// Waits until every claimed slot that will be published is (for a sealed buffer, so that no writer is
    /// still filling it), and returns the final length.
    pub fn settle(&self) -> usize {
        let mut spins = 0u32;
        loop {
            let target = self
                .claimed
                .load(Ordering::Acquire)
                .min(self.end.load(Ordering::Acquire));
            if self.published.load(Ordering::Acquire) >= target {
                return self.len();
            }
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// The final operation per key, sorted by key (`settle` first for a sealed buffer). Sorts (key, slot)
    /// pairs, 16 bytes each, and keeps the last slot of each key: no hash probes.
    pub fn resolved(&self) -> Vec<BufferEntry> {
        let keys = self.published_keys();
        let order = sorted_pairs(keys);
        let mut out = Vec::with_capacity(order.len());
        for (j, &(key, slot)) in order.iter().enumerate() {
            if order.get(j + 1).is_none_or(|next| next.0 != key) {
                out.push(self.entry(slot));
            }
        }
        out
    }

    /// Bytes of memory.
    pub fn memory_bytes(&self) -> usize {
        Self::bytes_for(self.capacity())
    }

    /// Bytes of memory of a buffer for `capacity` operations: per slot a key, value, weight (8 B each),
    /// kind (1 B) and link (4 B), and the key index's 4 B buckets.
    pub fn bytes_for(capacity: usize) -> usize {
        let capacity = capacity.max(1);
        capacity * 29 + (capacity * 2).next_power_of_two() * 4
    }
}

/// `(keys[i], i)` for every `i`, sorted (by key, then slot). One pass spreads the pairs over about n / 32
/// buckets by the high bits of key − min (so narrow key ranges spread too), then each bucket is sorted on its
/// own: about one cache-friendly pass plus sorts of a few dozen pairs, instead of a sort of n. Keys bunched
/// in one bucket cost what a plain sort costs.
fn sorted_pairs(keys: &[u64]) -> Vec<(u64, usize)> {
    let n = keys.len();
    let (lo, hi) = keys
        .iter()
        .fold((u64::MAX, 0), |(lo, hi), &k| (lo.min(k), hi.max(k)));
    let mut pairs: Vec<(u64, usize)> = keys.iter().copied().zip(0..).collect();
    if n < 256 || lo >= hi {
        pairs.sort_unstable();
        return pairs;
    }
    let width = 64 - (hi - lo).leading_zeros();
    let bucket_bits = (n / 32).next_power_of_two().trailing_zeros().min(width);
    let shift = width - bucket_bits;
    let bucket = |k: u64| ((k - lo) >> shift) as usize;
    let mut starts = vec![0usize; (1 << bucket_bits) + 1];
    for &k in keys {
        starts[bucket(k) + 1] += 1;
    }
    for b in 1..starts.len() {
        starts[b] += starts[b - 1];
    }
    let mut out = vec![(0u64, 0usize); n];
    let mut next = starts.clone();
    for p in pairs {
        let b = bucket(p.0);
        out[next[b]] = p;
        next[b] += 1;
    }
    for w in starts.windows(2) {
        out[w[0]..w[1]].sort_unstable();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn put(key: u64, value: u64) -> BufferEntry {
        BufferEntry {
            key,
            value,
            weight: 1.0,
            kind: OpKind::Put,
        }
    }

    #[test]
    fn latest_operation_wins_and_fills_up() {
        let b = MutableBuffer::new(4);
        b.append(put(7, 1)).unwrap();
        b.append(put(3, 2)).unwrap();
        b.append(put(7, 3)).unwrap();
        b.append(BufferEntry {
            kind: OpKind::Delete,
            ..put(3, 0)
        })
        .unwrap();
        assert_eq!(b.append(put(9, 9)), Err(BufferFull));
        assert!(b.is_full());
        assert_eq!(b.get(7).unwrap().value, 3);
        assert_eq!(b.get(3).unwrap().kind, OpKind::Delete);
        assert!(b.get(9).is_none());
        assert!(!b.is_live_slot(0) && b.is_live_slot(2) && !b.is_live_slot(3));
        assert_eq!(b.settle(), 4);
        let r = b.resolved();
        assert_eq!(r.len(), 2);
        assert_eq!((r[0].key, r[0].kind), (3, OpKind::Delete));
        assert_eq!((r[1].key, r[1].value), (7, 3));
        assert_eq!(b.deletes(), 1);
    }

    #[test]
    fn pairs_sort_like_a_plain_sort() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let cases: Vec<Vec<u64>> = vec![
            Vec::new(),
            vec![5],
            (0..1000).map(|_| rnd()).collect(),
            (0..5000).map(|_| rnd() % 300).collect(),
            (0..3000).rev().collect(),
            vec![7; 2000],
            (0..4000)
                .map(|i| if i % 2 == 0 { 0 } else { u64::MAX - i })
                .collect(),
        ];
        for keys in cases {
            let mut want: Vec<(u64, usize)> = keys.iter().copied().zip(0..).collect();
            want.sort_unstable();
            assert_eq!(sorted_pairs(&keys), want, "{} keys", keys.len());
        }
    }

    /// Stress: several writers append concurrently while readers check that every key they can see resolves
    /// to a published slot with a value the writer of that key produced, and that versions never go back.
    #[test]
    fn concurrent_writers_and_readers_agree() {
        let writers = 4;
        let per_writer = 1_500u64;
        let b = Arc::new(MutableBuffer::new((writers as usize) * per_writer as usize));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reader = {
            let (b, stop) = (b.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut last_seen = vec![0u64; 64];
                while !stop.load(Ordering::Acquire) {
                    let len = b.len();
                    for key in 0..64u64 {
                        if let Some(e) = b.get(key) {
                            // Values are (writer << 32 | sequence); a key is written by one writer only.
                            assert_eq!(e.key, key);
                            assert!(e.value >= last_seen[key as usize], "version went back");
                            last_seen[key as usize] = e.value;
                        }
                    }
                    assert!(b.len() >= len);
                }
            })
        };
        let handles: Vec<_> = (0..writers)
            .map(|w| {
                let b = b.clone();
                std::thread::spawn(move || {
                    for s in 0..per_writer {
                        // Writer w owns keys ≡ w (mod writers) below 64.
                        let key = (s * writers + w) % 64;
                        b.append(put(key, (w << 32) | s)).unwrap();
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        stop.store(true, Ordering::Release);
        reader.join().unwrap();
        assert_eq!(b.settle(), (writers * per_writer) as usize);
        for key in 0..64u64 {
            let w = key % writers;
            let last = (0..per_writer)
                .filter(|s| (s * writers + w) % 64 == key)
                .max()
                .unwrap();
            assert_eq!(b.get(key).unwrap().value, (w << 32) | last);
        }
    }
}
