//! A Count-Min sketch of key accesses: 4 rows of 2^16 saturating 16-bit counters, halved periodically so
//! that "hot" means hot recently (FarReach keeps the same shape of sketch in the switch).
//!
//! Layout (a blocked Count-Min): the counters are grouped in 2^13 blocks of one cache line (32 counters, 8 per
//! row); a key's hash picks one block and, in each row's 8 counters of it, one counter. So an access touches
//! one cache line, not four (the sketch is 512 KiB: four lines were four cache misses on every key operation
//! of an uncached key). Each row still has 2^16 counters, so the mean and the collision rate per row are
//! those of the plain sketch; rows are independent given the block.
//!
//! Cost: an access is one xxh3-64 and 4 relaxed load/store pairs in one cache line (not atomic
//! read-modify-writes: two threads touching the same counter at once may lose one count, which a hotness
//! estimate can afford); an estimate is 4 loads. The total behind the mean is added to in steps of 16 touches
//! per thread (exact to within 16 per thread). Without such races estimates never undercount (between
//! halvings); they overcount by about the total count / 2^16.

use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};

const ROWS: usize = 4;
const WIDTH_BITS: u32 = 16;
const WIDTH: usize = 1 << WIDTH_BITS;
/// Counters of one row in one block.
const PER_ROW_BITS: u32 = 3;
const PER_ROW: usize = 1 << PER_ROW_BITS;
const BLOCK_BITS: u32 = WIDTH_BITS - PER_ROW_BITS;
const BLOCKS: usize = 1 << BLOCK_BITS;

/// One cache line of counters: row r's are `[r * PER_ROW, (r + 1) * PER_ROW)`.
#[repr(align(64))]
struct Block([AtomicU16; ROWS * PER_ROW]);

/// Touches a thread counts before it adds them to the shared total.
const TOTAL_STEP: u64 = 16;

thread_local! {
    static TOUCHES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The sketch.
pub struct CountMin {
    blocks: Box<[Block]>,
    /// Accesses counted since the last halving (halved with the counters).
    total: AtomicU64,
}

impl Default for CountMin {
    fn default() -> Self {
        CountMin {
            blocks: (0..BLOCKS)
                .map(|_| Block(std::array::from_fn(|_| AtomicU16::new(0))))
                .collect(),
            total: AtomicU64::new(0),
        }
    }
}

impl CountMin {
    /// The block of `key` and its counter in each row of the block.
    fn slots(&self, key: &[u8]) -> (&Block, [usize; ROWS]) {
        self.slots_of(super::key_hash(key))
    }

    /// [`slots`](Self::slots) of the key of hash `h` ([`super::key_hash`]).
    fn slots_of(&self, h: u64) -> (&Block, [usize; ROWS]) {
        let block = &self.blocks[(h as usize) & (BLOCKS - 1)];
        let mut out = [0; ROWS];
        for (row, slot) in out.iter_mut().enumerate() {
            let bits = (h >> (BLOCK_BITS + row as u32 * PER_ROW_BITS)) as usize & (PER_ROW - 1);
            *slot = row * PER_ROW + bits;
        }
        (block, out)
    }

    /// The average counter of a row: what a key of average popularity (plus collisions) is estimated at.
    pub fn mean(&self) -> u64 {
        self.total.load(Ordering::Relaxed) / WIDTH as u64
    }

    /// Asks the CPU for `key`'s cache line of counters ahead of a [`touch`](Self::touch): the touches of a
    /// pipeline's keys then find their lines loaded or on the way, instead of each waiting for its own miss.
    pub fn prefetch(&self, key: &[u8]) {
        let (block, _) = self.slots(key);
        strata::lab::algo::prefetch_line(block);
    }

    /// Counts one access of `key`; returns the new estimate.
    #[cfg(test)]
    pub fn touch(&self, key: &[u8]) -> u16 {
        self.touch_hashed(super::key_hash(key))
    }

    /// [`touch`](Self::touch) of the key of hash `h` ([`super::key_hash`]), which the caller has already.
    pub fn touch_hashed(&self, h: u64) -> u16 {
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
        let (block, slots) = self.slots_of(h);
        for s in slots {
            let c = &block.0[s];
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
        let (block, slots) = self.slots(key);
        slots
            .iter()
            .map(|&s| block.0[s].load(Ordering::Relaxed))
            .min()
            .unwrap_or(0)
    }

    /// Halves every counter (ages old accesses out).
    pub fn halve(&self) {
        let t = self.total.load(Ordering::Relaxed);
        self.total.store(t / 2, Ordering::Relaxed);
        for c in self.blocks.iter().flat_map(|b| &b.0) {
            let v = c.load(Ordering::Relaxed);
            c.store(v / 2, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The blocked layout keeps the plain sketch's shape: ROWS × WIDTH counters, a key's counters are one
    /// per row, all in one 64-byte line, and keys spread over every block and every counter of a row.
    #[test]
    fn a_key_touches_one_cache_line_and_rows_keep_their_width() {
        let s = CountMin::default();
        assert_eq!(s.blocks.len() * ROWS * PER_ROW, ROWS * WIDTH);
        assert_eq!(std::mem::size_of::<Block>(), 64);
        let mut blocks_seen = vec![false; BLOCKS];
        let mut per_row_seen = [[false; PER_ROW]; ROWS];
        for i in 0..200_000u32 {
            let (block, slots) = s.slots(&i.to_le_bytes());
            assert_eq!(block as *const Block as usize % 64, 0);
            let b = (block as *const Block as usize - s.blocks.as_ptr() as usize) / 64;
            blocks_seen[b] = true;
            for (row, &slot) in slots.iter().enumerate() {
                assert_eq!(slot / PER_ROW, row);
                per_row_seen[row][slot % PER_ROW] = true;
            }
        }
        assert!(blocks_seen.iter().all(|&b| b));
        assert!(per_row_seen.iter().flatten().all(|&b| b));
    }

    /// A prefetch counts nothing: estimates after prefetching every key are what the touches alone give.
    #[test]
    fn a_prefetch_counts_nothing() {
        let s = CountMin::default();
        for i in 0..5000u32 {
            s.prefetch(&i.to_le_bytes());
        }
        assert!((0..5000u32).all(|i| s.estimate(&i.to_le_bytes()) == 0));
        for i in 0..100u32 {
            s.prefetch(&i.to_le_bytes());
            s.touch(&i.to_le_bytes());
        }
        assert!((0..100u32).all(|i| s.estimate(&i.to_le_bytes()) >= 1));
        assert_eq!(s.estimate(b"never touched"), 0);
    }

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
