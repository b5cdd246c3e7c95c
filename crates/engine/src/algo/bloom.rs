//! A cache-line-blocked Bloom filter over byte-string keys.
//!
//! The bits are split into blocks of 512 bits (one 64-byte cache line). A key's 128-bit xxh3 hash picks one
//! block with its low half (multiply-shift onto the block count) and its k bit positions inside that block
//! with the high half (Kirsch–Mitzenmacher double hashing, h2 + i·h3 mod 512), so a probe costs one cache
//! miss whatever k is. Blocking costs some accuracy against a classic filter of the same size, so m is
//! sized 20% above the classic m = ⌈−n·ln p / (ln 2)²⌉ (rounded up to whole blocks) and k = round(m/n · ln 2)
//! of the classic size (1 to 30); the measured rate stays at or below the target.
//!
//! Invariants: a key inserted is always reported as possibly present (no false negatives); m is a multiple of
//! 512 and `bits.len() == m / 64`. Cost: insert and query O(k) bit operations in one cache line; m/8 bytes.
//!
//! [`BloomFilter::to_bytes`] / [`BloomFilter::from_bytes`] give a self-describing encoding (m, k, bit words,
//! little-endian) for filters stored next to shards; decoding checks every length and parameter.

use crate::error::{Error, Result};
use crate::storage::codec::Reader;
use xxhash_rust::xxh3::xxh3_128;

/// Most probes per key.
const MAX_HASHES: u32 = 30;
/// Bytes before the bit words in the encoding: m (u64) and k (u32).
const HEADER: usize = 12;
/// Bits per block (one cache line).
const BLOCK_BITS: u64 = 512;
/// 64-bit words per block.
const WORDS_PER_BLOCK: usize = (BLOCK_BITS / 64) as usize;
/// How many probes ahead batch operations prefetch.
pub const PREFETCH_DISTANCE: usize = 12;

/// A key's place in a filter (see [`BloomFilter::probe`]); valid for filters of the same size only.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Probe {
    base: u64,
    h2: u64,
    h3: u64,
}

/// A key's 128-bit hash (see [`BloomFilter::hash`]); valid for every filter.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeyHash(u128);

/// A key's k bits inside its block, as a mask over the block's eight words (see [`BlockMask::of`]). It
/// depends only on the key's hash and k, not on the filter's size: a key probed in many filters of the same
/// k (every filter of the same rate over more than a handful of keys) computes it once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlockMask {
    words: [u64; WORDS_PER_BLOCK],
    /// The k it was computed for (0: none; every filter then computes its own).
    k: u32,
}

impl BlockMask {
    /// The mask of the key of hash `hash` in filters of `k` probes.
    #[inline]
    pub fn of(hash: KeyHash, k: u32) -> BlockMask {
        let hi = (hash.0 >> 64) as u64;
        BlockMask {
            words: mask_bits(hi, (hi >> 32) | 1, k),
            k,
        }
    }
}

/// The k bits at h2 + i·h3 (mod 512), i < k, as a mask over a block's eight words. The mask is built in a
/// stack array by 8-byte read-modify-writes at computed indexes; reading it back with wider loads right away
/// stalls on store forwarding (about 30% of a merge's time when every insert built one), so the single-filter
/// paths ([`BloomFilter::set`], [`BloomFilter::contains`]) set and test the bits in the block itself instead
/// ([`bit_positions`]), and masks are for keys probed in many filters, computed ahead of their use.
#[inline]
fn mask_bits(h2: u64, h3: u64, k: u32) -> [u64; WORDS_PER_BLOCK] {
    let mut mask = [0u64; WORDS_PER_BLOCK];
    let mut at = h2;
    for _ in 0..k {
        let bit = at % BLOCK_BITS;
        mask[(bit / 64) as usize] |= 1 << (bit % 64);
        at = at.wrapping_add(h3);
    }
    mask
}

/// The k bit positions of a probe inside its block, as (word, bit of the word) pairs.
#[inline]
fn bit_positions(h2: u64, h3: u64, k: u32) -> impl Iterator<Item = (usize, u64)> {
    (0..u64::from(k)).map(move |i| {
        let bit = h2.wrapping_add(i.wrapping_mul(h3)) % BLOCK_BITS;
        ((bit / 64) as usize, 1u64 << (bit % 64))
    })
}

/// A Bloom filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BloomFilter {
    bits: Vec<u64>,
    m: u64,
    k: u32,
}

impl BloomFilter {
    /// A filter for about `expected` keys with false-positive rate `fpr` (0 < fpr < 1) at that size.
    pub fn new(expected: usize, fpr: f64) -> Result<BloomFilter> {
        if !(fpr > 0.0 && fpr < 1.0) {
            return Err(Error::invalid(format!(
                "a Bloom filter's false-positive rate must be between 0 and 1, got {fpr}"
            )));
        }
        let n = expected.max(1) as f64;
        let ln2 = std::f64::consts::LN_2;
        let classic = (-(n * fpr.ln()) / (ln2 * ln2)).ceil().max(64.0);
        if classic > (1u64 << 40) as f64 {
            return Err(Error::invalid(format!(
                "a Bloom filter for {expected} keys at rate {fpr} would need {classic} bits"
            )));
        }
        let k = ((classic / n) * ln2)
            .round()
            .clamp(1.0, f64::from(MAX_HASHES)) as u32;
        let m = ((classic * 1.2) as u64).div_ceil(BLOCK_BITS) * BLOCK_BITS;
        let bits = vec![0; m.div_ceil(64) as usize];
        advise_huge_pages(&bits);
        Ok(BloomFilter { bits, m, k })
    }

    /// The [`BlockMask`] of the key of hash `hash` for this filter's k (the tests' mask path; callers build
    /// masks with [`BlockMask::of`]).
    #[cfg(test)]
    pub fn mask_of(&self, hash: KeyHash) -> BlockMask {
        BlockMask::of(hash, self.k)
    }

    /// Number of bits.
    pub fn bit_len(&self) -> u64 {
        self.m
    }

    /// Probes per key.
    pub fn hashes(&self) -> u32 {
        self.k
    }

    /// Bytes of memory the bits take.
    pub fn memory_bytes(&self) -> usize {
        self.bits.len() * 8
    }

    /// A key's hash: what every filter derives the key's [`Probe`] from (so a key probed in many filters is
    /// hashed once).
    #[inline]
    pub fn hash(key: &[u8]) -> KeyHash {
        KeyHash(xxh3_128(key))
    }

    /// The hash of a `u64` key as the index families insert it (its big-endian bytes).
    #[inline]
    pub fn hash_u64(key: u64) -> KeyHash {
        Self::hash(&key.to_be_bytes())
    }

    /// Where `key`'s bits are: its block's first bit and the two hashes that place the k bits in it.
    #[inline]
    pub fn probe(&self, key: &[u8]) -> Probe {
        self.probe_hashed(Self::hash(key))
    }

    /// [`probe`](Self::probe) from the key's [`hash`](Self::hash).
    #[inline]
    pub fn probe_hashed(&self, hash: KeyHash) -> Probe {
        let h = hash.0;
        let blocks = self.m / BLOCK_BITS;
        let block = ((u128::from(h as u64) * u128::from(blocks)) >> 64) as u64;
        let hi = (h >> 64) as u64;
        Probe {
            base: block * BLOCK_BITS,
            h2: hi,
            h3: (hi >> 32) | 1,
        }
    }

    /// Asks the CPU to load a probe's block (one cache line) ahead of [`contains`](Self::contains) or
    /// [`set`](Self::set), so that a batch of probes overlaps its cache misses.
    #[inline]
    pub fn prefetch(&self, p: Probe) {
        if let Some(word) = self.bits.get((p.base / 64) as usize) {
            crate::algo::prefetch_line(word);
        }
    }

    /// The probe's k bits as a mask over its block's eight words (built in registers, no memory touched).
    #[inline]
    fn block_mask(&self, p: Probe) -> [u64; WORDS_PER_BLOCK] {
        mask_bits(p.h2, p.h3, self.k)
    }

    /// The words of `m` if it was computed for this filter's k, else this probe's own mask.
    #[inline]
    fn mask_words(&self, p: Probe, m: &BlockMask) -> [u64; WORDS_PER_BLOCK] {
        if m.k == self.k {
            m.words
        } else {
            self.block_mask(p)
        }
    }

    /// [`contains`](Self::contains) with the key's [`BlockMask`] computed by the caller; `p` and `m` must
    /// come from the same hash (a mask of another k is ignored).
    #[inline]
    pub fn contains_masked(&self, p: Probe, m: &BlockMask) -> bool {
        let mask = self.mask_words(p, m);
        let block = self.block(p);
        let mut missing = 0u64;
        for (w, m) in block.iter().zip(&mask) {
            missing |= m & !w;
        }
        missing == 0
    }

    /// [`set`](Self::set) with the key's [`BlockMask`] computed by the caller (as in
    /// [`contains_masked`](Self::contains_masked)): the tests' reference for `set` and `test_and_set`, which
    /// set bits in the block itself (see [`mask_bits`]).
    #[cfg(test)]
    pub fn set_masked(&mut self, p: Probe, m: &BlockMask) {
        let mask = self.mask_words(p, m);
        let first = (p.base / 64) as usize;
        for (w, m) in self.bits[first..first + WORDS_PER_BLOCK]
            .iter_mut()
            .zip(mask)
        {
            *w |= m;
        }
    }

    /// The probe's block: its eight words.
    #[inline]
    fn block(&self, p: Probe) -> &[u64; WORDS_PER_BLOCK] {
        let first = (p.base / 64) as usize;
        self.bits[first..first + WORDS_PER_BLOCK]
            .try_into()
            .expect("a probe's block lies inside the filter")
    }

    /// The probe's block, to set bits in.
    #[inline]
    fn block_mut(&mut self, p: Probe) -> &mut [u64; WORDS_PER_BLOCK] {
        let first = (p.base / 64) as usize;
        (&mut self.bits[first..first + WORDS_PER_BLOCK])
            .try_into()
            .expect("a probe's block lies inside the filter")
    }

    /// True when the probe's key may have been inserted: its k bits tested in the block, one 8-byte load
    /// each, no early exit (no branch per bit, and no mask built in memory: see [`mask_bits`]).
    #[inline]
    pub fn contains(&self, p: Probe) -> bool {
        let block = self.block(p);
        let mut missing = 0u64;
        for (w, bit) in bit_positions(p.h2, p.h3, self.k) {
            missing |= bit & !block[w];
        }
        missing == 0
    }

    /// Sets the probe's bits (inserts its key): k read-modify-writes of words of its block.
    #[inline]
    pub fn set(&mut self, p: Probe) {
        let k = self.k;
        let block = self.block_mut(p);
        for (w, bit) in bit_positions(p.h2, p.h3, k) {
            block[w] |= bit;
        }
    }

    /// Tests the probe's bits and sets them: whether the key may have been inserted before.
    #[inline]
    pub fn test_and_set(&mut self, p: Probe) -> bool {
        let k = self.k;
        let block = self.block_mut(p);
        let mut missing = 0u64;
        for (w, bit) in bit_positions(p.h2, p.h3, k) {
            missing |= bit & !block[w];
            block[w] |= bit;
        }
        missing == 0
    }

    /// Calls `each(i, maybe)` for every probe with whether its key may be present, prefetching blocks
    /// [`PREFETCH_DISTANCE`] probes ahead.
    pub fn contains_batch(&self, probes: &[Probe], mut each: impl FnMut(usize, bool)) {
        for (i, &p) in probes.iter().enumerate() {
            if let Some(&ahead) = probes.get(i + PREFETCH_DISTANCE) {
                self.prefetch(ahead);
            }
            each(i, self.contains(p));
        }
    }

    /// Inserts every key, prefetching each key's block [`PREFETCH_DISTANCE`] keys ahead. Streams: only that
    /// many probes are held at once (a ring), whatever the number of keys.
    pub fn insert_batch<K: AsRef<[u8]>>(&mut self, keys: impl Iterator<Item = K>) {
        self.insert_hashes(keys.map(|k| Self::hash(k.as_ref())));
    }

    /// [`insert_batch`](Self::insert_batch) of keys given by their [`hash`](Self::hash)es.
    pub fn insert_hashes(&mut self, hashes: impl Iterator<Item = KeyHash>) {
        let mut ring = [Probe::default(); PREFETCH_DISTANCE];
        let mut held = 0usize;
        for (i, hash) in hashes.enumerate() {
            let p = self.probe_hashed(hash);
            self.prefetch(p);
            let slot = i % PREFETCH_DISTANCE;
            if held == PREFETCH_DISTANCE {
                let ready = ring[slot];
                self.set(ready);
            } else {
                held += 1;
            }
            ring[slot] = p;
        }
        // The probes still held (setting bits commutes, so their order does not matter).
        for p in ring.into_iter().take(held) {
            self.set(p);
        }
    }

    /// An empty filter of the same size and probe count (one that [`union_with`](Self::union_with)
    /// accepts).
    pub fn empty_like(&self) -> BloomFilter {
        let bits = vec![0; self.bits.len()];
        advise_huge_pages(&bits);
        BloomFilter {
            bits,
            m: self.m,
            k: self.k,
        }
    }

    /// Adds every key of `other`, a filter of the same size and probe count (built for the same expected
    /// count and rate): the union of two filters over disjoint key sets is the filter over both.
    pub fn union_with(&mut self, other: &BloomFilter) -> Result<()> {
        if (self.m, self.k) != (other.m, other.k) {
            return Err(Error::invalid(format!(
                "cannot unite a Bloom filter of {} bits and {} probes with one of {} bits and {} probes",
                self.m, self.k, other.m, other.k
            )));
        }
        for (w, o) in self.bits.iter_mut().zip(&other.bits) {
            *w |= o;
        }
        Ok(())
    }

    /// Adds the key of hash `hash`.
    #[inline]
    pub fn insert_hashed(&mut self, hash: KeyHash) {
        let p = self.probe_hashed(hash);
        self.set(p);
    }

    /// False when the key of hash `hash` was certainly never inserted.
    #[inline]
    pub fn may_contain_hashed(&self, hash: KeyHash) -> bool {
        self.contains(self.probe_hashed(hash))
    }

    /// Adds `key`.
    pub fn insert(&mut self, key: &[u8]) {
        let p = self.probe(key);
        self.set(p);
    }

    /// False when `key` was certainly never inserted; true when it may have been.
    pub fn may_contain(&self, key: &[u8]) -> bool {
        self.contains(self.probe(key))
    }

    /// The encoding: m (u64 LE), k (u32 LE), then the bit words (u64 LE).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER + self.bits.len() * 8);
        out.extend_from_slice(&self.m.to_le_bytes());
        out.extend_from_slice(&self.k.to_le_bytes());
        for w in &self.bits {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out
    }

    /// Decodes [`to_bytes`](Self::to_bytes); a description of what is wrong otherwise (the caller adds the
    /// file and offset).
    pub fn from_bytes(bytes: &[u8]) -> std::result::Result<BloomFilter, String> {
        let mut r = Reader::new(bytes);
        let (m, k) = match (r.u64(), r.u32()) {
            (Ok(m), Ok(k)) => (m, k),
            _ => {
                return Err(format!(
                    "Bloom filter of {} bytes is shorter than its header",
                    bytes.len()
                ));
            }
        };
        r.skip(HEADER - 12)?;
        if m == 0 || m > 1 << 40 || !m.is_multiple_of(BLOCK_BITS) || !(1..=MAX_HASHES).contains(&k)
        {
            return Err(format!(
                "Bloom filter header is invalid (m = {m} bits, k = {k})"
            ));
        }
        let words = m.div_ceil(64) as usize;
        if bytes.len() != HEADER + words * 8 {
            return Err(format!(
                "Bloom filter of {m} bits needs {} bytes, found {}",
                HEADER + words * 8,
                bytes.len()
            ));
        }
        let bits = (0..words).map(|_| r.u64()).collect::<Result<_, _>>()?;
        Ok(BloomFilter { bits, m, k })
    }
}

/// Filters at least this large ask for transparent huge pages.
const HUGE_PAGE_MIN_BYTES: usize = 4 << 20;

/// Asks the kernel to back the 2 MiB-aligned interior of a large, not yet touched filter with huge pages:
/// every probe of a large filter lands on a random page, and with 4 KiB pages nearly each one is a TLB miss
/// on top of its cache miss. A hint only: nothing changes if the kernel declines.
fn advise_huge_pages(bits: &[u64]) {
    let bytes = std::mem::size_of_val(bits);
    if bytes >= HUGE_PAGE_MIN_BYTES {
        super::advise_huge_pages(bits.as_ptr() as usize, bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_false_negatives_and_the_rate_holds() {
        let n = 20_000u64;
        let mut f = BloomFilter::new(n as usize, 0.01).unwrap();
        for i in 0..n {
            f.insert(&i.to_be_bytes());
        }
        assert!((0..n).all(|i| f.may_contain(&i.to_be_bytes())));
        // Batch insert and batch test agree with the one-at-a-time forms.
        let keys: Vec<[u8; 8]> = (0..n).map(|i| i.to_be_bytes()).collect();
        let mut g = BloomFilter::new(n as usize, 0.01).unwrap();
        g.insert_batch(keys.iter().map(|k| k.as_slice()));
        assert_eq!(g, f);
        // Batches shorter than, equal to and just past the prefetch ring insert every key too.
        for len in [
            0,
            1,
            PREFETCH_DISTANCE - 1,
            PREFETCH_DISTANCE,
            PREFETCH_DISTANCE + 1,
            100,
        ] {
            let mut one = BloomFilter::new(100, 0.01).unwrap();
            let mut batch = one.clone();
            for k in &keys[..len] {
                one.insert(k);
            }
            batch.insert_batch(keys[..len].iter());
            assert_eq!(batch, one, "batch of {len}");
        }
        // Filters over two halves, united, are the filter over the whole.
        let mut low = BloomFilter::new(n as usize, 0.01).unwrap();
        let mut high = low.clone();
        low.insert_batch(keys[..n as usize / 3].iter());
        high.insert_batch(keys[n as usize / 3..].iter());
        low.union_with(&high).unwrap();
        assert_eq!(low, f);
        assert!(
            low.union_with(&BloomFilter::new(10, 0.01).unwrap())
                .is_err()
        );
        let probes: Vec<Probe> = (0..2 * n).map(|i| f.probe(&i.to_be_bytes())).collect();
        f.contains_batch(&probes, |i, maybe| {
            assert_eq!(maybe, f.may_contain(&(i as u64).to_be_bytes()));
        });
        let probes = 200_000u64;
        let fp = (n..n + probes)
            .filter(|i| f.may_contain(&i.to_be_bytes()))
            .count() as f64
            / probes as f64;
        // Target 1%; the binomial spread at 200K probes is ±0.07%, the formula's own slack a little more.
        assert!(fp < 0.013, "false-positive rate {fp}");
        assert!(
            fp > 0.005,
            "suspiciously low rate {fp}: the filter may not be hashing all probes"
        );
        assert_eq!(f.hashes(), 7);
    }

    /// A mask computed once answers and inserts in filters of every size with its k exactly as each
    /// filter's own probes do; a mask of another k is ignored, not misused.
    #[test]
    fn block_masks_are_shared_between_filters_of_one_k() {
        let small = BloomFilter::new(1_000, 0.01).unwrap();
        let large = BloomFilter::new(1_000_000, 0.01).unwrap();
        let odd = BloomFilter::new(1, 0.01).unwrap();
        assert_eq!(small.hashes(), large.hashes());
        assert_ne!(odd.hashes(), small.hashes());
        let mut by_mask = [small.clone(), large.clone(), odd.clone()];
        let mut by_probe = by_mask.clone();
        let mut by_test_and_set = by_mask.clone();
        for i in 0..3_000u64 {
            // Every key twice: `test_and_set` must report it present the second time.
            let h = BloomFilter::hash_u64(i / 2 * 7);
            let m = small.mask_of(h);
            for ((a, b), c) in by_mask
                .iter_mut()
                .zip(by_probe.iter_mut())
                .zip(by_test_and_set.iter_mut())
            {
                let before = a.contains_masked(a.probe_hashed(h), &m);
                a.set_masked(a.probe_hashed(h), &m);
                b.set(b.probe_hashed(h));
                assert_eq!(c.test_and_set(c.probe_hashed(h)), before, "key {i}");
            }
        }
        assert_eq!(by_mask, by_probe);
        assert_eq!(by_mask, by_test_and_set);
        for i in 0..20_000u64 {
            let h = BloomFilter::hash_u64(i);
            let m = BlockMask::of(h, small.hashes());
            for f in &by_probe {
                let p = f.probe_hashed(h);
                assert_eq!(f.contains_masked(p, &m), f.contains(p), "key {i}");
            }
        }
    }

    #[test]
    fn encoding_round_trips_and_rejects_damage() {
        let mut f = BloomFilter::new(100, 0.05).unwrap();
        for k in ["a", "bb", "ccc"] {
            f.insert(k.as_bytes());
        }
        let bytes = f.to_bytes();
        let back = BloomFilter::from_bytes(&bytes).unwrap();
        assert_eq!(back, f);
        assert!(back.may_contain(b"bb"));
        assert!(BloomFilter::from_bytes(&bytes[..bytes.len() - 1]).is_err());
        assert!(BloomFilter::from_bytes(&bytes[..5]).is_err());
        let mut bad_k = bytes.clone();
        bad_k[8..12].copy_from_slice(&99u32.to_le_bytes());
        assert!(BloomFilter::from_bytes(&bad_k).is_err());
        let mut bad_m = bytes;
        bad_m[..8].copy_from_slice(&0u64.to_le_bytes());
        assert!(BloomFilter::from_bytes(&bad_m).is_err());
    }

    #[test]
    fn parameters_are_checked() {
        assert!(BloomFilter::new(10, 0.0).is_err());
        assert!(BloomFilter::new(10, 1.0).is_err());
        assert!(BloomFilter::new(10, f64::NAN).is_err());
        // An empty filter contains nothing.
        let f = BloomFilter::new(0, 0.01).unwrap();
        assert!(!f.may_contain(b"x"));
        assert!(f.bit_len() >= 64);
    }
}
