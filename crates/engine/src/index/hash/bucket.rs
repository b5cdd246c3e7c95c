//! The DRAM side of one bucket and of the pool chunks: what lookups read without locks, and what writers
//! keep under the bucket's mutex.
//!
//! A bucket's **chain** is its home chunks `0..home` (in its P-bucket: 16 by default, 4 to 64) then pool
//! chunks (positions `home..home + 14`);
//! slot `p` of the chain is slot `p mod 15` of chunk `p / 15`. The chain's slots `0..fill` are in use, in
//! age order. The last chunk of the chain is the **tail**: its slots `0..committed` are committed in PM,
//! `committed..committed + staged` are the **D-bucket** (staged, durable only in the logs). DRAM mirrors
//! the whole tail (keys and values), so writing it back never reads PM.
//!
//! Per slot: a 16-bit **fingerprint** (hash bits 48..64) and a **live** bit, set on the slot that holds the
//! visible version of its key (its newest version, a put): at most one per key, so a lookup needs no
//! ordering. The first 240 home slots (all of a P-bucket of up to 4 KiB) keep these inline in the bucket;
//! the other home slots of a larger P-bucket (up to 720 more, 16 KiB) in the bucket's **extension**, an
//! array sized for its generation at run time ([`Pool`] holds its layout); pool chunk slots in [`Pool`].
//! The bucket's **summary** maps each fingerprint class (`fp % 128`) to the 16-slot home groups that hold
//! a fingerprint of that class (set with the fingerprint, cleared only with the whole chain: a superset),
//! so a lookup compares only the groups its class names instead of all fifteen; the extension has a
//! summary of its own, with a 64-bit lane per class (up to 45 groups).
//!
//! ## Reads without locks (seqlock)
//! Everything a lookup reads is an atomic: the 16-bit fingerprints four to a word (home slots compared 16 at
//! a time in SSE2 registers filled by atomic loads, `fpscan`; pool chunks with SWAR; no wide loads of racing
//! memory), the live bits, the tail, the shape word and the pool links. A writer holds
//! [`Bucket::writer`] and makes the version odd around every change a lookup could see ([`Bucket::edit`]);
//! a lookup reads the version (even), reads what it needs (PM slots included), then checks the version is
//! unchanged, else retries. Lookups take no lock and execute no locked instruction, so consecutive lookups
//! overlap their cache misses. PM flushes of the tail happen outside the odd window: a lookup reads the
//! tail's keys from DRAM whether or not they are committed yet.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};

use parking_lot::Mutex;

use super::fpscan::scan_home;
use super::layout::{CHUNK_SLOTS, ChunkHead, HOME_SLOTS, MAX_CHAIN, MAX_HOME_CHUNKS, MAX_OVERFLOW};
use super::spin::SpinMutex;

const FP_WORDS: usize = HOME_SLOTS / 4;
/// Values of a fingerprint's **summary class** (`fp % SUMMARY_CLASSES`): the summary keeps, per class, a
/// 16-bit mask of the home groups (16 slots each) that hold a fingerprint of that class.
pub(super) const SUMMARY_CLASSES: usize = 128;
const SUMMARY_WORDS: usize = SUMMARY_CLASSES / 4;
/// Slots of a home group (one summary bit; four fingerprint words).
pub(super) const GROUP: usize = 16;
const _: () = assert!(
    HOME_SLOTS.div_ceil(GROUP) <= 16,
    "a summary lane has 16 group bits"
);
const _: () = assert!(
    (MAX_HOME_CHUNKS * CHUNK_SLOTS - HOME_SLOTS).div_ceil(GROUP) <= 64,
    "an extension's summary lane has 64 group bits"
);
/// Words of the bit set of the chain slots past the inline ones: the most extension slots and pool slots.
const OUTSIDE_WORDS: usize = (MAX_CHAIN * CHUNK_SLOTS - HOME_SLOTS).div_ceil(64);
const LANES: u64 = 0x0001_0001_0001_0001;
const LOW15: u64 = 0x7FFF_7FFF_7FFF_7FFF;

/// The high bit of each 16-bit lane of the result is set exactly when that lane of `x` is zero.
#[inline]
fn zero_lanes(x: u64) -> u64 {
    let t = (x & LOW15).wrapping_add(LOW15);
    !(t | x | LOW15)
}

/// Lanes (0..4) of `word` equal to `fp`, as the high bits of their lanes.
#[inline]
fn matches(word: u64, fp: u16) -> u64 {
    zero_lanes(word ^ (u64::from(fp) * LANES))
}

fn set_lane(word: &AtomicU64, lane: usize, fp: u16) {
    let sh = lane * 16;
    let w = word.load(Ordering::Relaxed);
    word.store(
        (w & !(0xFFFF << sh)) | u64::from(fp) << sh,
        Ordering::Relaxed,
    );
}

/// Sets bit `bit` of `word` (a plain store, only if it was clear: writers hold the bucket's lock).
#[inline]
fn set_bit(word: &AtomicU64, bit: usize) {
    let old = word.load(Ordering::Relaxed);
    if old >> bit & 1 == 0 {
        word.store(old | 1 << bit, Ordering::Relaxed);
    }
}

/// Sets (`on`) or clears bit `bit` of `word` (writers hold the bucket's lock).
#[inline]
fn flip_bit(word: &AtomicU64, bit: usize, on: bool) {
    let w = word.load(Ordering::Relaxed);
    word.store(
        if on { w | 1 << bit } else { w & !(1 << bit) },
        Ordering::Relaxed,
    );
}

fn lane_of(word: &AtomicU64, lane: usize) -> u16 {
    (word.load(Ordering::Relaxed) >> (lane * 16)) as u16
}

/// Chain length and tail state, packed in one word so a lookup reads them at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape(u64);

impl Shape {
    pub fn new(chunks: usize, committed: usize, staged: usize) -> Shape {
        debug_assert!((1..=MAX_CHAIN).contains(&chunks) && committed + staged <= CHUNK_SLOTS);
        Shape(chunks as u64 | (committed as u64) << 8 | (staged as u64) << 16)
    }
    /// Chunks of the chain (≥ 1: an empty bucket has an empty tail, home chunk 0).
    pub fn chunks(self) -> usize {
        (self.0 & 0xFF) as usize
    }
    pub fn committed(self) -> usize {
        (self.0 >> 8 & 0xFF) as usize
    }
    pub fn staged(self) -> usize {
        (self.0 >> 16 & 0xFF) as usize
    }
    /// Chain position of the tail chunk.
    pub fn tail(self) -> usize {
        self.chunks() - 1
    }
    /// Chain slot of the tail's slot 0.
    pub fn tail_start(self) -> usize {
        self.tail() * CHUNK_SLOTS
    }
    /// Chain slots in use.
    pub fn fill(self) -> usize {
        self.tail_start() + self.committed() + self.staged()
    }
    /// Slots used in the tail (committed and staged).
    pub fn tail_used(self) -> usize {
        self.committed() + self.staged()
    }
}

/// DRAM mirror of the pool chunks of a generation: fingerprints and live bits per chunk, and the free list;
/// also where the generation's chains leave their P-bucket (`home`: its home chunks, at most
/// [`MAX_HOME_CHUNKS`]) and the layout of its buckets' extensions, which every per-slot accessor of
/// [`Bucket`] needs beside the pool.
#[derive(Debug)]
pub struct Pool {
    /// Home chunks of a bucket of this generation: chain positions `home..` are pool chunks.
    pub home: usize,
    /// Home slots whose fingerprints and live bits a bucket holds inline: all of them up to
    /// [`HOME_SLOTS`] (P-buckets up to 4 KiB), else `HOME_SLOTS` (the rest are in its extension).
    pub inline_slots: usize,
    /// Layout of a bucket's extension (all 0 when the home slots fit inline).
    ext: ExtLayout,
    fps: Box<[AtomicU64]>,
    live: Box<[AtomicU32]>,
    /// Pool chunks no chain uses.
    pub free: Mutex<Vec<u32>>,
}

/// Where an extension keeps its parts, in words: the live bits (one per extension slot) from word 0, the
/// fingerprints (four to a word, whole 16-slot groups) from `fps`, the summary (one 64-bit lane of group
/// bits per fingerprint class) from `summary`; `words` in all.
#[derive(Debug, Clone, Copy, Default)]
struct ExtLayout {
    slots: usize,
    fps: usize,
    summary: usize,
    words: usize,
}

impl ExtLayout {
    /// The extension of a bucket of `home` home chunks (empty up to [`HOME_SLOTS`] home slots).
    fn new(home: usize) -> ExtLayout {
        let slots = (home * CHUNK_SLOTS).saturating_sub(HOME_SLOTS);
        if slots == 0 {
            return ExtLayout::default();
        }
        // Each part starts on a cache line of the (64 B-aligned) extension.
        let fps = slots.div_ceil(64).next_multiple_of(8);
        let summary = (fps + slots.div_ceil(GROUP) * 4).next_multiple_of(8);
        ExtLayout {
            slots,
            fps,
            summary,
            words: summary + SUMMARY_CLASSES,
        }
    }
}

impl Pool {
    /// `chunks` pool chunks, all free, behind buckets of `home` home chunks (1..=[`MAX_HOME_CHUNKS`]).
    pub fn new(chunks: u64, home: usize) -> Pool {
        assert!((1..=MAX_HOME_CHUNKS).contains(&home), "{home} home chunks");
        Pool {
            home,
            inline_slots: (home * CHUNK_SLOTS).min(HOME_SLOTS),
            ext: ExtLayout::new(home),
            fps: (0..chunks * 4).map(|_| AtomicU64::new(0)).collect(),
            live: (0..chunks).map(|_| AtomicU32::new(0)).collect(),
            free: Mutex::new((0..chunks as u32).rev().collect()),
        }
    }
    /// An empty bucket of this generation (with its extension, if its home slots do not fit inline).
    pub fn new_bucket(&self) -> Bucket {
        let mut b = Bucket::default();
        if self.ext.words > 0 {
            // 7 words more, so that the layout can start on a cache line (`Bucket::ext_words`).
            b.ext = (0..self.ext.words + 7).map(|_| AtomicU64::new(0)).collect();
        }
        b
    }
    /// Bytes of DRAM a bucket's extension takes.
    pub fn ext_bytes(&self) -> u64 {
        (self.ext.words.next_multiple_of(8) * 8) as u64
    }
    pub fn chunks(&self) -> usize {
        self.live.len()
    }
    /// Home slots of a bucket of this generation.
    #[inline]
    pub fn home_slots(&self) -> usize {
        self.home * CHUNK_SLOTS
    }
    pub fn dram_bytes(&self) -> u64 {
        (self.fps.len() * 8 + self.live.len() * 4 + self.chunks() * 4) as u64
    }
}

/// What a writer keeps beside the lock-free state (only under [`Bucket::writer`]).
#[derive(Debug, Clone, Default)]
pub struct Writer {
    /// Sequence number of the bucket's last write (every record carries its own).
    pub seq: u64,
    /// The committed commit word of the tail chunk (`count` 0: nothing committed there yet).
    pub tail_head: ChunkHead,
    /// Tombstone bit of each tail slot (committed and staged).
    pub tail_tomb: u16,
    /// Staged tail slots whose key's newest committed version is a put (a delete of such a key must leave
    /// a tombstone, or the put would come back once the log is trimmed).
    pub shadows: u16,
    /// `log << 56 | lsn` of the record of each staged tail slot.
    pub pins: [u64; CHUNK_SLOTS],
}

/// DRAM state of one bucket (module docs).
#[derive(Debug)]
#[repr(C, align(64))]
pub struct Bucket {
    // What a lookup reads comes first: seqlock, shape and live bits in line 0; the fingerprints from line 1
    // (two 16-slot groups per line, none split); the summary; then the D-bucket and the pool links, then
    // what only writers use.
    version: AtomicU64,
    shape: AtomicU64,
    live: [AtomicU64; 4],
    /// Fingerprints, live bits and summary of home slots `HOME_SLOTS..` (empty unless the generation's
    /// P-buckets are larger than 4 KiB; laid out as its pool's `ExtLayout`; never replaced).
    ext: Box<[AtomicU64]>,
    fps: Aligned64<[AtomicU64; FP_WORDS]>,
    /// Per summary class, the home groups holding a fingerprint of it (lane `class % 4` of word
    /// `class / 4`, bit = group). A superset: bits are set whenever a home slot gets a fingerprint and only
    /// cleared with the whole chain (`clear_slots`), so a lookup scans only the groups its class names.
    summary: [AtomicU64; SUMMARY_WORDS],
    tail_keys: [AtomicU64; CHUNK_SLOTS],
    tail_vals: [AtomicU64; CHUNK_SLOTS],
    overflow: [AtomicU32; MAX_OVERFLOW],
    /// The writers' lock, and what only writers use.
    pub writer: SpinMutex<Writer>,
}

/// A `T` starting on a cache line of its own.
#[derive(Debug)]
#[repr(C, align(64))]
struct Aligned64<T>(T);

impl<T> std::ops::Deref for Aligned64<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl Default for Bucket {
    fn default() -> Self {
        Bucket {
            version: AtomicU64::new(0),
            shape: AtomicU64::new(Shape::new(1, 0, 0).0),
            live: Default::default(),
            ext: Box::default(),
            fps: Aligned64(std::array::from_fn(|_| AtomicU64::new(0))),
            summary: std::array::from_fn(|_| AtomicU64::new(0)),
            tail_keys: Default::default(),
            tail_vals: Default::default(),
            overflow: Default::default(),
            writer: SpinMutex::new(Writer::default()),
        }
    }
}

/// Where slot `p` of a chain past the inline home slots keeps its fingerprint and live bit.
enum Mirror<'a> {
    /// Slot `q` of the extension, laid out as given.
    Ext(&'a [AtomicU64], ExtLayout, usize),
    Pool(&'a Pool, usize, usize),
}

impl Bucket {
    /// Asks the CPU to bring the bucket's first `lines` cache lines in (a hint: no memory is read
    /// observably). Issued before the bucket is used, the misses of its lines overlap instead of following
    /// one another as the lock, shape, live bits and fingerprint scan reach them.
    #[inline]
    pub fn prefetch(&self, lines: usize) {
        self.prefetch_lines(0..lines);
    }

    /// Asks the CPU for the bucket's cache lines `lines` (those past the bucket's end are skipped).
    #[inline]
    fn prefetch_lines(&self, lines: std::ops::Range<usize>) {
        let base = std::ptr::from_ref(self).cast::<[u8; 64]>();
        for i in lines.start..lines.end.min(size_of::<Bucket>() / 64) {
            // SAFETY: `i` is below the bucket's size in 64 B lines, so `base.add(i)` stays inside `*self`.
            crate::algo::prefetch_line(unsafe { &*base.add(i) });
        }
    }

    /// Asks the CPU for what a writer that only checks the bucket's staged pins reads (log-space freeing):
    /// line 0 (the shape) and the writer's lock and state.
    #[inline]
    pub fn prefetch_writer(&self) {
        const FIRST: usize = std::mem::offset_of!(Bucket, writer) / 64;
        const END: usize =
            (std::mem::offset_of!(Bucket, writer) + size_of::<SpinMutex<Writer>>()).div_ceil(64);
        crate::algo::prefetch_line(&self.version);
        self.prefetch_lines(FIRST..END);
    }

    /// Asks the CPU for what a lookup of fingerprint `fp` reads: line 0 (seqlock, shape, live bits), the
    /// line of `fp`'s summary word and every fingerprint line (a fixed count: a loop of constant trip count
    /// is unrolled, one that depends on the P-bucket size costs ~30 instructions per lookup; smaller
    /// P-buckets prefetch lines they do not use). All of them are known before any is read, so
    /// their misses overlap.
    #[inline]
    pub fn prefetch_lookup(&self, fp: u16) {
        crate::algo::prefetch_line(&self.version);
        crate::algo::prefetch_line(&self.summary[Self::summary_word(fp)]);
        for line in 0..FP_WORDS.div_ceil(8) {
            crate::algo::prefetch_line(&self.fps[line * 8]);
        }
    }

    #[inline]
    fn summary_word(fp: u16) -> usize {
        usize::from(fp) % SUMMARY_CLASSES / 4
    }

    #[inline]
    fn summary_shift(fp: u16) -> usize {
        usize::from(fp) % 4 * 16
    }

    /// The home groups that may hold fingerprint `fp` (a superset of those that do).
    #[inline]
    pub fn summary(&self, fp: u16) -> u16 {
        (self.summary[Self::summary_word(fp)].load(Ordering::Relaxed) >> Self::summary_shift(fp))
            as u16
    }

    /// Every line of the bucket (a write also reaches the D-bucket's keys and values).
    pub const LINES: usize = size_of::<Bucket>() / 64;

    // ---- Seqlock ----

    /// Starts an optimistic read: the version, once it is even (no change in progress).
    #[inline]
    pub fn read_begin(&self) -> u64 {
        let mut spins = 0u32;
        loop {
            let v = self.version.load(Ordering::Acquire);
            if v & 1 == 0 {
                return v;
            }
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// True when nothing changed since `read_begin` returned `v`: what was read is consistent.
    #[inline]
    pub fn read_valid(&self, v: u64) -> bool {
        fence(Ordering::Acquire);
        self.version.load(Ordering::Relaxed) == v
    }

    /// Runs `change` with the version odd, so that lookups running meanwhile retry. Only under `writer`.
    pub fn edit<T>(&self, change: impl FnOnce() -> T) -> T {
        let v = self.version.load(Ordering::Relaxed);
        self.version.store(v + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        let out = change();
        self.version.store(v + 2, Ordering::Release);
        out
    }

    // ---- Lock-free state ----

    #[inline]
    pub fn shape(&self) -> Shape {
        Shape(self.shape.load(Ordering::Relaxed))
    }
    pub fn set_shape(&self, s: Shape) {
        self.shape.store(s.0, Ordering::Relaxed);
    }

    /// Pool chunk at chain position `pos` (≥ `pool.home`).
    #[inline]
    pub fn overflow(&self, pool: &Pool, pos: usize) -> u32 {
        self.overflow[pos - pool.home].load(Ordering::Relaxed)
    }
    pub fn set_overflow(&self, pool: &Pool, pos: usize, chunk: u32) {
        self.overflow[pos - pool.home].store(chunk, Ordering::Relaxed);
    }

    /// Key and value of tail slot `i`.
    #[inline]
    pub fn tail_slot(&self, i: usize) -> (u64, u64) {
        (
            self.tail_keys[i].load(Ordering::Relaxed),
            self.tail_vals[i].load(Ordering::Relaxed),
        )
    }
    /// Key of tail slot `i` (the staged-key scan of a write reads no value).
    #[inline]
    pub fn tail_key(&self, i: usize) -> u64 {
        self.tail_keys[i].load(Ordering::Relaxed)
    }
    pub fn set_tail_slot(&self, i: usize, key: u64, value: u64) {
        self.tail_keys[i].store(key, Ordering::Relaxed);
        self.tail_vals[i].store(value, Ordering::Relaxed);
    }

    /// The extension's words, from its first cache-line boundary (so that each part starts on a line).
    #[inline]
    fn ext_words(&self) -> &[AtomicU64] {
        let skip = (self.ext.as_ptr() as usize).wrapping_neg() % 64 / 8;
        self.ext.get(skip..).unwrap_or(&[])
    }

    /// Where slot `p`, one past the inline home slots (`p >= pool.inline_slots`), keeps its fingerprint
    /// and live bit.
    fn outside<'a>(&'a self, pool: &'a Pool, p: usize) -> Mirror<'a> {
        let home = pool.home_slots();
        if p < home {
            Mirror::Ext(self.ext_words(), pool.ext, p - HOME_SLOTS)
        } else {
            let q = p - home;
            let pos = pool.home + q / CHUNK_SLOTS;
            Mirror::Pool(pool, self.overflow(pool, pos) as usize, q % CHUNK_SLOTS)
        }
    }

    // Each per-slot accessor handles the inline home slots itself and leaves the others (an extension's,
    // a pool chunk's: rare with P-buckets up to 4 KiB) to a function of their own, so that the usual
    // path stays small enough to be inlined into the write path.

    #[inline]
    pub fn fp(&self, pool: &Pool, p: usize) -> u16 {
        if p < pool.inline_slots {
            lane_of(&self.fps[p / 4], p % 4)
        } else {
            self.fp_outside(pool, p)
        }
    }
    #[inline(never)]
    fn fp_outside(&self, pool: &Pool, p: usize) -> u16 {
        match self.outside(pool, p) {
            Mirror::Ext(w, x, q) => lane_of(&w[x.fps + q / 4], q % 4),
            Mirror::Pool(pool, c, i) => lane_of(&pool.fps[c * 4 + i / 4], i % 4),
        }
    }

    #[inline]
    pub fn set_fp(&self, pool: &Pool, p: usize, fp: u16) {
        if p < pool.inline_slots {
            set_lane(&self.fps[p / 4], p % 4, fp);
            let w = &self.summary[Self::summary_word(fp)];
            set_bit(w, Self::summary_shift(fp) + p / GROUP);
        } else {
            self.set_fp_outside(pool, p, fp);
        }
    }
    #[inline(never)]
    fn set_fp_outside(&self, pool: &Pool, p: usize, fp: u16) {
        match self.outside(pool, p) {
            Mirror::Ext(w, x, q) => {
                set_lane(&w[x.fps + q / 4], q % 4, fp);
                set_bit(&w[x.summary + usize::from(fp) % SUMMARY_CLASSES], q / GROUP);
            }
            Mirror::Pool(pool, c, i) => set_lane(&pool.fps[c * 4 + i / 4], i % 4, fp),
        }
    }

    #[inline]
    pub fn is_live(&self, pool: &Pool, p: usize) -> bool {
        if p < pool.inline_slots {
            self.live[p / 64].load(Ordering::Relaxed) >> (p % 64) & 1 == 1
        } else {
            self.is_live_outside(pool, p)
        }
    }
    #[inline(never)]
    fn is_live_outside(&self, pool: &Pool, p: usize) -> bool {
        match self.outside(pool, p) {
            Mirror::Ext(w, _, q) => w[q / 64].load(Ordering::Relaxed) >> (q % 64) & 1 == 1,
            Mirror::Pool(pool, c, i) => pool.live[c].load(Ordering::Relaxed) >> i & 1 == 1,
        }
    }

    #[inline]
    pub fn set_live(&self, pool: &Pool, p: usize, on: bool) {
        if p < pool.inline_slots {
            flip_bit(&self.live[p / 64], p % 64, on);
        } else {
            self.set_live_outside(pool, p, on);
        }
    }
    #[inline(never)]
    fn set_live_outside(&self, pool: &Pool, p: usize, on: bool) {
        match self.outside(pool, p) {
            Mirror::Ext(w, _, q) => flip_bit(&w[q / 64], q % 64, on),
            Mirror::Pool(pool, c, i) => {
                let w = &pool.live[c];
                let bit = 1u32 << i;
                let v = w.load(Ordering::Relaxed);
                w.store(if on { v | bit } else { v & !bit }, Ordering::Relaxed);
            }
        }
    }

    /// Clears the fingerprints and live bits of every slot, and the pool links (the chain is rebuilt).
    pub fn clear_slots(&self, pool: &Pool) {
        let shape = self.shape();
        for pos in pool.home..shape.chunks() {
            let c = self.overflow(pool, pos) as usize;
            pool.live[c].store(0, Ordering::Relaxed);
            for w in &pool.fps[c * 4..c * 4 + 4] {
                w.store(0, Ordering::Relaxed);
            }
        }
        for w in self.live.iter().chain(self.fps.iter()).chain(&self.summary) {
            w.store(0, Ordering::Relaxed);
        }
        for w in self.ext_words() {
            w.store(0, Ordering::Relaxed);
        }
    }

    /// Live slots of the chain.
    pub fn live_count(&self, pool: &Pool) -> u64 {
        let shape = self.shape();
        let ext = &self.ext_words()[..pool.ext.slots.div_ceil(64)];
        let home: u64 = self
            .live
            .iter()
            .chain(ext)
            .map(|w| w.load(Ordering::Relaxed).count_ones() as u64)
            .sum();
        let over: u64 = (pool.home..shape.chunks())
            .map(|pos| {
                pool.live[self.overflow(pool, pos) as usize]
                    .load(Ordering::Relaxed)
                    .count_ones() as u64
            })
            .sum();
        home + over
    }

    /// Calls `visit(p)` for every live slot `p < shape.fill()` whose fingerprint is `fp`, until it returns
    /// `Some`. Reads only atomics: safe to call without the lock (inside a seqlock read).
    #[inline]
    pub fn find_live<R>(
        &self,
        pool: &Pool,
        shape: Shape,
        fp: u16,
        mut visit: impl FnMut(usize) -> Option<R>,
    ) -> Option<R> {
        let fill = shape.fill();
        let home = fill.min(pool.inline_slots);
        let groups = u64::from(self.summary(fp));
        if let Some(r) = scan_home(&self.fps[..], &self.live, groups, home, fp, &mut visit) {
            return Some(r);
        }
        if fill > pool.inline_slots {
            // Past the inline slots (an extension's home slots, pool chunks): their candidates as bits, so
            // that `visit` is called from two places only, as the compiler then inlines it in both.
            let m = self.outside_matches(pool, shape, fp);
            for (w, &bits) in m.iter().enumerate() {
                let mut bits = bits;
                while bits != 0 {
                    let q = w * 64 + bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    if let Some(r) = visit(pool.inline_slots + q) {
                        return Some(r);
                    }
                }
            }
        }
        None
    }

    /// The live slots holding `fp` among the chain's slots `inline_slots..fill` (an extension's home
    /// slots, then the pool chunks' slots): bit `q` for slot `inline_slots + q`.
    #[inline(never)]
    fn outside_matches(&self, pool: &Pool, shape: Shape, fp: u16) -> [u64; OUTSIDE_WORDS] {
        let mut out = [0u64; OUTSIDE_WORDS];
        let mut mark = |p: usize| {
            let q = p - pool.inline_slots;
            out[q / 64] |= 1 << (q % 64);
            None::<()>
        };
        let fill = shape.fill();
        let home = fill.min(pool.home_slots());
        if home > HOME_SLOTS {
            let (x, words) = (pool.ext, self.ext_words());
            let groups =
                words[x.summary + usize::from(fp) % SUMMARY_CLASSES].load(Ordering::Relaxed);
            scan_home(
                &words[x.fps..x.summary],
                &words[..x.fps],
                groups,
                home - HOME_SLOTS,
                fp,
                |q| mark(HOME_SLOTS + q),
            );
        }
        for pos in pool.home..shape.chunks().min(pool.home + MAX_OVERFLOW) {
            let c = self.overflow(pool, pos) as usize;
            let (Some(words), Some(live)) = (pool.fps.get(c * 4..c * 4 + 4), pool.live.get(c))
            else {
                break;
            };
            let live = live.load(Ordering::Relaxed);
            let base = pool.home_slots() + (pos - pool.home) * CHUNK_SLOTS;
            for (w, word) in words.iter().enumerate() {
                let mut m = matches(word.load(Ordering::Relaxed), fp);
                while m != 0 {
                    let i = w * 4 + (m.trailing_zeros() / 16) as usize;
                    m &= m - 1;
                    if i < CHUNK_SLOTS && base + i < fill && live >> i & 1 == 1 {
                        mark(base + i);
                    }
                }
            }
        }
        out
    }

    /// True when the summary names the group of home slot `p` for fingerprint `fp` (the self-check).
    pub fn summary_names(&self, pool: &Pool, p: usize, fp: u16) -> bool {
        if p < pool.inline_slots {
            return self.summary(fp) >> (p / GROUP) & 1 == 1;
        }
        match self.outside(pool, p) {
            Mirror::Ext(w, x, q) => {
                w[x.summary + usize::from(fp) % SUMMARY_CLASSES].load(Ordering::Relaxed)
                    >> (q / GROUP)
                    & 1
                    == 1
            }
            Mirror::Pool(..) => true,
        }
    }

    /// Bytes of DRAM per bucket (without its extension: [`Pool::ext_bytes`]).
    pub const fn dram_bytes() -> u64 {
        size_of::<Bucket>() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_lanes_is_exact() {
        for x in [
            0u64,
            1,
            0x8000,
            0xFFFF,
            0x0001_0000,
            0x8000_0000_0000_0000,
            u64::MAX,
            0x0000_FFFF_0000_0001,
        ] {
            let z = zero_lanes(x);
            for lane in 0..4 {
                let is_zero = (x >> (lane * 16)) as u16 == 0;
                assert_eq!(
                    z >> (lane * 16 + 15) & 1 == 1,
                    is_zero,
                    "{x:#x} lane {lane}"
                );
            }
            assert_eq!(z & !0x8000_8000_8000_8000, 0);
        }
    }

    /// P-buckets of 4, 8 and 16 KiB: home slots inline, in the extension (8 and 16 KiB) and in a pool
    /// chunk; every live slot of the fingerprint is found, in slot order, and the summaries name it.
    #[test]
    fn find_live_sees_only_live_matching_slots() {
        use crate::index::hash::layout::HOME_CHUNKS;
        for home in [HOME_CHUNKS, 32, MAX_HOME_CHUNKS] {
            let pool = Pool::new(4, home);
            let b = pool.new_bucket();
            b.set_shape(Shape::new(home + 1, 3, 0));
            b.set_overflow(&pool, home, 2);
            let fill = b.shape().fill();
            for p in 0..fill {
                b.set_fp(&pool, p, (p % 5) as u16);
                b.set_live(&pool, p, p % 3 != 0);
            }
            let mut all = Vec::new();
            for fp in 0..5u16 {
                let mut seen = Vec::new();
                b.find_live(&pool, b.shape(), fp, |p| {
                    seen.push(p);
                    None::<()>
                });
                let want: Vec<usize> = (0..fill)
                    .filter(|p| p % 5 == usize::from(fp) && p % 3 != 0)
                    .collect();
                assert_eq!(seen, want, "home {home}, fp {fp}");
                all.extend(seen);
                assert!(
                    (0..fill).all(|p| p % 5 != usize::from(fp) || b.summary_names(&pool, p, fp))
                );
            }
            assert!(all.iter().any(|&p| p >= pool.home_slots()));
            let in_ext = |p: &usize| (HOME_SLOTS..pool.home_slots()).contains(p);
            assert_eq!(home > HOME_CHUNKS, all.iter().any(in_ext));
            assert_eq!(
                b.live_count(&pool),
                (0..fill).filter(|p| p % 3 != 0).count() as u64
            );
            b.clear_slots(&pool);
            assert_eq!(b.live_count(&pool), 0);
            assert!(b.find_live(&pool, b.shape(), 2, Some).is_none());
        }
    }
}
