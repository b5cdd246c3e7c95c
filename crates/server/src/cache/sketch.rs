//! A Count-Min sketch of key accesses: 4 rows of 2^16 saturating 16-bit counters, halved periodically so
//! that "hot" means hot recently (FarReach keeps the same shape of sketch in the switch).
//!
//! Cost: an access is 4 relaxed load/store pairs (not atomic read-modify-writes: two threads touching the same
//! counter at once may lose one count, which a hotness estimate can afford); an estimate is 4 loads. The total behind the mean is added
//! to in steps of 16 touches per thread (exact to within 16 per thread). Without
//! such races estimates never undercount (between halvings); they overcount by about the total count / 2^16.

use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};

const ROWS: usize = 4;
const WIDTH_BITS: u32 = 16;
const WIDTH: usize = 1 << WIDTH_BITS;

/// Touches a thread counts before it adds them to the shared total.
const TOTAL_STEP: u64 = 16;

thread_local! {
    static TOUCHES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The sketch.
pub struct CountMin {
    counters: Vec<AtomicU16>,
    /// Accesses counted since the last halving (halved with the counters).
    total: AtomicU64,
}

impl Default for CountMin {
    fn default() -> Self {
        CountMin {
            counters: (0..ROWS * WIDTH).map(|_| AtomicU16::new(0)).collect(),
            total: AtomicU64::new(0),
        }
    }
}

impl CountMin {
    fn slots(key: &[u8]) -> [usize; ROWS] {
        let h = xxhash_rust::xxh3::xxh3_128(key);
        let mut out = [0; ROWS];
        for (row, slot) in out.iter_mut().enumerate() {
            let bits = (h >> (row as u32 * 32)) as u64 as usize & (WIDTH - 1);
            *slot = row * WIDTH + bits;
        }
        out
    }

    /// The average counter of a row: what a key of average popularity (plus collisions) is estimated at.
    pub fn mean(&self) -> u64 {
        self.total.load(Ordering::Relaxed) / WIDTH as u64
    }

    /// Counts one access of `key`; returns the new estimate.
    pub fn touch(&self, key: &[u8]) -> u16 {
        // The total (for the mean) is counted in steps of TOTAL_STEP per thread, so threads touching the
        // sketch do not all write one shared counter on every access.
        TOUCHES.with(|t| {
            let n = t.get().wrapping_add(1);
            t.set(n);
            if n % TOTAL_STEP == 0 {
                self.total.fetch_add(TOTAL_STEP, Ordering::Relaxed);
            }
        });
        let mut est = u16::MAX;
        for s in Self::slots(key) {
            let c = &self.counters[s];
            let old = c.load(Ordering::Relaxed);
            let new = old.saturating_add(1);
            c.store(new, Ordering::Relaxed);
            est = est.min(new);
        }
        est
    }

    /// The estimate of `key`'s accesses.
    #[cfg(test)]
    pub fn estimate(&self, key: &[u8]) -> u16 {
        Self::slots(key)
            .iter()
            .map(|&s| self.counters[s].load(Ordering::Relaxed))
            .min()
            .unwrap_or(0)
    }

    /// Halves every counter (ages old accesses out).
    pub fn halve(&self) {
        let t = self.total.load(Ordering::Relaxed);
        self.total.store(t / 2, Ordering::Relaxed);
        for c in &self.counters {
            let v = c.load(Ordering::Relaxed);
            c.store(v / 2, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimates_never_undercount_and_halving_ages() {
        let s = CountMin::default();
        for i in 0..10_000u32 {
            s.touch(format!("cold{i}").as_bytes());
        }
        for _ in 0..500 {
            s.touch(b"hot");
        }
        assert!(s.estimate(b"hot") >= 500);
        assert!(s.estimate(b"hot") < 520, "{}", s.estimate(b"hot"));
        assert!(s.estimate(b"cold5") >= 1 && s.estimate(b"cold5") < 5);
        s.halve();
        assert!((250..260).contains(&s.estimate(b"hot")));
        assert_eq!(s.estimate(b"never"), 0);
    }
    /// What the cache relies on: under a uniform load no key reaches 4× the mean counter, while keys with a
    /// few times the mean's share of the accesses do.
    #[test]
    fn a_uniform_load_has_no_hot_key_and_skewed_keys_stand_out() {
        let s = CountMin::default();
        for round in 0..10 {
            for i in 0..100_000u32 {
                s.touch(format!("key:{i:012}").as_bytes());
            }
            if round < 5 {
                for h in 0..20u32 {
                    for _ in 0..20 {
                        s.touch(format!("hot:{h}").as_bytes());
                    }
                }
            }
        }
        let bar = 4 * s.mean();
        let hot = (0..100_000u32)
            .filter(|i| u64::from(s.estimate(format!("key:{i:012}").as_bytes())) >= bar)
            .count();
        assert_eq!(hot, 0, "uniform keys estimated at 4x the mean {}", s.mean());
        for h in 0..20u32 {
            assert!(u64::from(s.estimate(format!("hot:{h}").as_bytes())) >= bar);
        }
    }
}
