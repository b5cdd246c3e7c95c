//! Weighted draws among a few thousand outcomes built per query: cumulative weights with a guide table
//! (Chen & Asau's indexed search).
//!
//! A narrow weighted range query draws among all of its candidates at once (`sample`'s flat distribution):
//! a table built per query for about k draws, so its build must cost about as little as the draws. An alias
//! table costs several passes and allocations per outcome to build; this table costs two passes over one
//! array, and a draw about as much as an alias draw: one uniform real `u · total`, the guide entry of its
//! bucket, and a short forward scan of the cumulative weights.
//!
//! ## Invariants
//! * `cumulative[i]` = w₀ + … + wᵢ summed left to right (non-decreasing; a weight of 0 repeats the previous
//!   value), `total` = its last entry > 0 and finite.
//! * `guide.len()` = m = ⌈n / 4⌉ buckets; `guide[j]` = one before the first index `i` with
//!   `cumulative[i] > j · total / m` (or 0), so the outcome of every point of bucket j,
//!   `[j · total / m, (j + 1) · total / m)`, is at or after `guide[j]`, even where rounding puts a point a
//!   step below its bucket's start.
//! * A draw returns the first `i` with `cumulative[i] > t` for its point `t ∈ [0, total)`: outcome i exactly
//!   for t in `[cumulative[i − 1], cumulative[i])`, whose length is wᵢ, so P(i) = wᵢ / total up to the
//!   rounding of `t`, and an outcome of weight 0 (an empty interval) is never drawn. Rounding that puts `t` at
//!   `total` is clamped to the last outcome of positive weight.
//!
//! ## Cost model (n outcomes)
//! * Build: O(n), three passes (a vectorised check, the sums, the guide), one allocation for the guide of
//!   n / 4 entries (the cumulative weights overwrite the weights, plus 8 entries of padding).
//! * Draw: O(1) expected — the bucket's guide entry, then a branch-free count over the next 8 cumulative
//!   weights (in cached lines), and one step at a time beyond them, which is rare: the outcome lies about
//!   3 steps on from the guide entry on average: a bucket holds 4 outcomes' worth of weight on average, and
//!   the expected steps over draws are at most n / m + 2 whatever the weights (the points of a bucket lie
//!   in the outcomes overlapping it); one draw can take O(n) steps when an outcome holds nearly all the
//!   weight and buckets before it.

use super::shard::unit_f64;
use crate::error::Result;
use rand::RngCore;

/// Outcomes per guide bucket: fewer buckets make the build cheaper (its cost is mostly one mispredicted
/// branch per bucket) and a draw's scan a few steps longer (about `OUTCOMES_PER_BUCKET / 2 + 1`, in cached
/// lines).
const OUTCOMES_PER_BUCKET: usize = 4;

/// Cumulative weights with a guide table (see the module doc).
#[derive(Debug, Clone)]
pub(super) struct GuideTable {
    /// The n cumulative weights, then [`WINDOW`] entries of +∞ (a window read never leaves the array).
    cumulative: Vec<f64>,
    guide: Vec<u32>,
    /// The last outcome of positive weight.
    last: usize,
    total: f64,
}

/// Cumulative weights a draw compares at once (branch-free) from its bucket's guide entry; a draw whose
/// outcome lies further scans on one step at a time.
const WINDOW: usize = 8;

impl GuideTable {
    /// A table over `weights` (taken over as its cumulative weights). Errors on an empty list, more than
    /// `u32::MAX` outcomes, weights that are negative or not finite, or a sum that is not positive and
    /// finite.
    pub(super) fn new(mut weights: Vec<f64>) -> Result<GuideTable> {
        let n = weights.len();
        crate::algo::alias::validate_weights("a guide table", &weights)?;
        let mut sum = 0.0;
        let mut last = 0;
        for (i, w) in weights.iter_mut().enumerate() {
            if *w > 0.0 {
                last = i;
            }
            sum += *w;
            *w = sum;
        }
        let buckets = n.div_ceil(OUTCOMES_PER_BUCKET);
        let step = sum / buckets as f64;
        let mut guide = Vec::with_capacity(buckets);
        let mut i = 0;
        for j in 0..buckets {
            let start = j as f64 * step;
            while i < last && weights[i] <= start {
                i += 1;
            }
            // One outcome back: a draw's point and its bucket are both rounded from the same uniform, so
            // the point can lie a rounding step below the bucket's start; the scan then begins early enough.
            guide.push(i.saturating_sub(1) as u32);
        }
        weights.resize(n + WINDOW, f64::INFINITY);
        Ok(GuideTable {
            cumulative: weights,
            guide,
            last,
            total: sum,
        })
    }

    #[cfg(test)]
    /// Number of outcomes.
    pub(super) fn len(&self) -> usize {
        self.cumulative.len() - WINDOW
    }

    /// Sum of the weights.
    pub(super) fn total_weight(&self) -> f64 {
        self.total
    }

    /// One outcome, drawn with probability proportional to its weight.
    #[inline]
    pub(super) fn sample<R: RngCore + ?Sized>(&self, rng: &mut R) -> usize {
        let u = unit_f64(rng);
        let t = u * self.total_weight();
        // `u < 1`, so the bucket is below m; its guide entry is at most `last`.
        let bucket = ((u * self.guide.len() as f64) as usize).min(self.guide.len() - 1);
        let base = self.guide[bucket] as usize;
        // The cumulative weights at or below `t` are a prefix of the window (they never decrease): count
        // them without a branch, which finds the outcome in one step for nearly every draw.
        let below = self.cumulative[base..base + WINDOW]
            .iter()
            .map(|&c| usize::from(c <= t))
            .sum::<usize>();
        let mut i = base + below;
        if below == WINDOW {
            while self.cumulative[i] <= t {
                i += 1;
            }
        }
        // Only a point rounded up to the total passes the last outcome of positive weight.
        i.min(self.last)
    }
}

#[cfg(test)]
mod tests {
    use super::super::alias_shard::stats::{assert_fits, rejects};
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn counts(table: &GuideTable, draws: u64, seed: u64) -> Vec<u64> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut c = vec![0u64; table.len()];
        for _ in 0..draws {
            c[table.sample(&mut rng)] += 1;
        }
        c
    }

    /// Skewed weights with zeros at both ends and inside, one outcome holding a third of the total.
    fn weights() -> Vec<f64> {
        let mut w: Vec<f64> = (0..600)
            .map(|i: u64| {
                let h = (i ^ 0x5bd1).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 50;
                if h.is_multiple_of(9) {
                    0.0
                } else {
                    (h % 1000) as f64 / 7.0 + 0.01
                }
            })
            .collect();
        w[0] = 0.0;
        w[599] = 0.0;
        w[598] = 0.0;
        let total: f64 = w.iter().sum();
        w[300] = total / 2.0;
        w[301] = 5.0;
        w
    }

    #[test]
    fn draws_follow_the_weights_chi_square() {
        let w = weights();
        let table = GuideTable::new(w.clone()).unwrap();
        assert!(
            (table.total_weight() - w.iter().sum::<f64>()).abs() <= 1e-9 * table.total_weight()
        );
        let c = counts(&table, 600 * 300, 41);
        // `assert_fits`: chi-square at 1e-6 over the outcomes of positive weight, and none of weight 0.
        assert_fits(&c, &w, "guide table");
        for (i, &x) in w.iter().enumerate() {
            if x == 0.0 {
                assert_eq!(c[i], 0, "outcome {i} of weight 0 was drawn");
            }
        }
    }

    #[test]
    fn a_biased_draw_is_caught() {
        // The test must be sensitive enough to guard the table: the same draws with 1% of them moved from
        // the heavy outcome to its neighbour (a scan that stops one step late now and then) fail it.
        let w = weights();
        let table = GuideTable::new(w.clone()).unwrap();
        let mut c = counts(&table, 600 * 300, 42);
        assert!(!rejects(&c, &w));
        let moved = 600 * 300 / 100;
        c[300] -= moved;
        c[301] += moved;
        assert!(rejects(&c, &w));
    }

    #[test]
    fn small_and_degenerate_tables() {
        let one = GuideTable::new(vec![2.5]).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(43);
        assert!((0..100).all(|_| one.sample(&mut rng) == 0));
        let single = GuideTable::new(vec![0.0, 0.0, 3.0, 0.0]).unwrap();
        assert!((0..1000).all(|_| single.sample(&mut rng) == 2));
        // Rounding at the top of the range stays on the last outcome of positive weight.
        let tiny = GuideTable::new(vec![1.0, f64::MIN_POSITIVE, 0.0]).unwrap();
        assert!((0..1000).all(|_| tiny.sample(&mut rng) < 2));
        for bad in [
            vec![],
            vec![0.0, 0.0],
            vec![1.0, -1.0],
            vec![f64::NAN],
            vec![f64::MAX, f64::MAX],
        ] {
            assert!(GuideTable::new(bad).is_err());
        }
    }
}
