//! A Bloom filter over byte-string keys.
//!
//! m bits and k probe positions per key, sized from the expected number of keys n and the target
//! false-positive rate p: m = ⌈−n·ln p / (ln 2)²⌉, k = round(m/n · ln 2) (1 to 30). Positions come from one
//! 128-bit xxh3 hash split into h1 and h2 (Kirsch–Mitzenmacher double hashing: h1 + i·h2 mod m).
//!
//! Invariants: a key inserted is always reported as possibly present (no false negatives); `bits.len() ==
//! ⌈m / 64⌉`. Cost: insert and query O(k) with k cache misses at most; m/8 bytes of memory.
//!
//! [`BloomFilter::to_bytes`] / [`BloomFilter::from_bytes`] give a self-describing encoding (m, k, bit words,
//! little-endian) for filters stored next to shards; decoding checks every length and parameter.

use crate::error::{Error, Result};
use xxhash_rust::xxh3::xxh3_128;

/// Most probes per key.
const MAX_HASHES: u32 = 30;
/// Bytes before the bit words in the encoding: m (u64) and k (u32).
const HEADER: usize = 12;

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
        let m = (-(n * fpr.ln()) / (ln2 * ln2)).ceil().max(64.0);
        if m > (1u64 << 40) as f64 {
            return Err(Error::invalid(format!(
                "a Bloom filter for {expected} keys at rate {fpr} would need {m} bits"
            )));
        }
        let m = m as u64;
        let k = ((m as f64 / n) * ln2)
            .round()
            .clamp(1.0, f64::from(MAX_HASHES)) as u32;
        Ok(BloomFilter {
            bits: vec![0; m.div_ceil(64) as usize],
            m,
            k,
        })
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

    /// The bit positions of `key` (an iterator that does not borrow the filter).
    #[inline]
    fn positions(&self, key: &[u8]) -> impl Iterator<Item = u64> + use<> {
        let h = xxh3_128(key);
        let (h1, h2) = (h as u64, (h >> 64) as u64 | 1);
        let m = self.m;
        (0..u64::from(self.k)).map(move |i| h1.wrapping_add(i.wrapping_mul(h2)) % m)
    }

    /// Adds `key`.
    pub fn insert(&mut self, key: &[u8]) {
        for bit in self.positions(key) {
            self.bits[(bit / 64) as usize] |= 1 << (bit % 64);
        }
    }

    /// False when `key` was certainly never inserted; true when it may have been.
    pub fn may_contain(&self, key: &[u8]) -> bool {
        self.positions(key)
            .all(|bit| self.bits[(bit / 64) as usize] & (1 << (bit % 64)) != 0)
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
        if bytes.len() < HEADER {
            return Err(format!(
                "Bloom filter of {} bytes is shorter than its header",
                bytes.len()
            ));
        }
        let m = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
        let k = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
        if m == 0 || m > 1 << 40 || !(1..=MAX_HASHES).contains(&k) {
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
        let bits = bytes[HEADER..]
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect();
        Ok(BloomFilter { bits, m, k })
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
