//! Walker's alias method with Vose's O(n) construction.
//!
//! A table over n outcomes with non-negative weights w_i (not all zero). A draw picks a column uniformly and
//! then either the column's own outcome (with the column's probability) or its alias, so every draw costs one
//! uniform index and one uniform real: O(1). P(i) = w_i / Σw exactly, up to floating-point rounding in the
//! column probabilities.
//!
//! A column's probability and alias sit side by side ([`AliasColumn`], 16 bytes), so a draw reads one cache
//! line. A caller doing many draws can split one into [`pick_column`](AliasTable::pick_column) (random words
//! only), [`prefetch`](AliasTable::prefetch) and [`resolve`](AliasTable::resolve), and overlap the cache
//! misses of many draws.
//!
//! Invariants: `columns.len() == n ≥ 1`; every column's `prob ∈ [0, 1]` and `alias < n`.
//! Cost: build O(n) time and 16 bytes per outcome; draw O(1), one cache line.

use crate::error::{Error, Result};
use rand::Rng;

/// One column: its own outcome's probability and the outcome that fills the rest.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct AliasColumn {
    pub prob: f64,
    pub alias: u32,
}

/// A column and the coin that decides between its outcome and its alias: the random part of one draw.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ColumnPick {
    pub column: usize,
    pub coin: f64,
}

/// An alias table over outcomes `0..n`.
#[derive(Debug, Clone)]
pub struct AliasTable {
    columns: Vec<AliasColumn>,
    total: f64,
}

/// Checks the weights of a weighted sampler (`what` names it in errors) and returns their sum: 1 to
/// `u32::MAX` of them, each finite and non-negative, summing to a positive finite total.
pub fn validate_weights(what: &str, weights: &[f64]) -> Result<f64> {
    let n = weights.len();
    if n == 0 || n > u32::MAX as usize {
        return Err(Error::invalid(format!(
            "{what} needs 1 to {} weights, got {n}",
            u32::MAX
        )));
    }
    if let Some((i, w)) = weights
        .iter()
        .enumerate()
        .find(|(_, w)| !w.is_finite() || **w < 0.0)
    {
        return Err(Error::invalid(format!(
            "weight {i} is {w}; weights must be finite and non-negative"
        )));
    }
    let total: f64 = weights.iter().sum();
    if total <= 0.0 || !total.is_finite() {
        return Err(Error::invalid(format!(
            "the weights sum to {total}; at least one must be positive and the sum finite"
        )));
    }
    Ok(total)
}

impl AliasTable {
    /// A table for `weights`. Errors on an empty list, more than `u32::MAX` outcomes, or weights that are
    /// negative, not finite, or all zero.
    pub fn new(weights: &[f64]) -> Result<AliasTable> {
        let n = weights.len();
        let total = validate_weights("an alias table", weights)?;
        // Scaled so that the average column holds exactly 1.
        let mut scaled: Vec<f64> = weights.iter().map(|w| w * n as f64 / total).collect();
        let mut prob = vec![0.0; n];
        let mut alias = vec![0u32; n];
        let mut small: Vec<u32> = Vec::new();
        let mut large: Vec<u32> = Vec::new();
        for (i, &p) in scaled.iter().enumerate() {
            if p < 1.0 {
                small.push(i as u32);
            } else {
                large.push(i as u32);
            }
        }
        while let (Some(&s), Some(&l)) = (small.last(), large.last()) {
            small.pop();
            prob[s as usize] = scaled[s as usize];
            alias[s as usize] = l;
            // The large outcome gives away what fills the small column.
            scaled[l as usize] -= 1.0 - scaled[s as usize];
            if scaled[l as usize] < 1.0 {
                large.pop();
                small.push(l);
            }
        }
        // What is left is 1 up to rounding: those columns keep their own outcome.
        for i in large.into_iter().chain(small) {
            prob[i as usize] = 1.0;
            alias[i as usize] = i;
        }
        let columns = prob
            .into_iter()
            .zip(alias)
            .map(|(prob, alias)| AliasColumn { prob, alias })
            .collect();
        Ok(AliasTable { columns, total })
    }

    /// Number of outcomes.
    pub fn len(&self) -> usize {
        self.columns.len()
    }

    /// Always false: a table has at least one outcome.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Sum of the weights the table was built from.
    pub fn total_weight(&self) -> f64 {
        self.total
    }

    /// One outcome, drawn with probability proportional to its weight.
    #[inline]
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> usize {
        let pick = self.pick_column(rng);
        self.resolve(pick)
    }

    /// The random part of a draw: a uniform column and a uniform coin in `[0, 1)`. Touches no table memory.
    #[inline]
    pub fn pick_column<R: Rng + ?Sized>(&self, rng: &mut R) -> ColumnPick {
        ColumnPick {
            column: rng.random_range(0..self.columns.len()),
            coin: rng.random::<f64>(),
        }
    }

    /// Asks the CPU to load the column of `pick`, ahead of [`resolve`](Self::resolve).
    #[inline]
    pub fn prefetch(&self, pick: ColumnPick) {
        if let Some(c) = self.columns.get(pick.column) {
            crate::algo::prefetch_line(c);
        }
    }

    /// The outcome of a draw whose random part is `pick` (from [`pick_column`](Self::pick_column) of this
    /// table).
    #[inline]
    pub fn resolve(&self, pick: ColumnPick) -> usize {
        let c = self.columns[pick.column];
        if pick.coin < c.prob {
            pick.column
        } else {
            c.alias as usize
        }
    }

    /// The columns (for tables stored elsewhere, e.g. flattened into one array).
    pub fn columns(&self) -> &[AliasColumn] {
        &self.columns
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    /// Chi-square statistic of `counts` against `expected` probabilities (outcomes with p = 0 must be 0).
    fn chi_square(counts: &[u64], probs: &[f64], n: u64) -> (f64, usize) {
        let mut stat = 0.0;
        let mut df = 0;
        for (&c, &p) in counts.iter().zip(probs) {
            if p == 0.0 {
                assert_eq!(c, 0, "an outcome of weight 0 was drawn");
                continue;
            }
            let e = p * n as f64;
            stat += (c as f64 - e).powi(2) / e;
            df += 1;
        }
        (stat, df - 1)
    }

    /// Upper 1e-6 quantile of chi-square with `df` degrees of freedom (Wilson–Hilferty).
    fn critical(df: usize) -> f64 {
        let k = df as f64;
        let z = 4.753_424_308_822_899; // standard normal upper 1e-6 quantile
        k * (1.0 - 2.0 / (9.0 * k) + z * (2.0 / (9.0 * k)).sqrt()).powi(3)
    }

    #[test]
    fn draws_follow_the_weights() {
        let weights = [5.0, 0.0, 1.0, 10.0, 0.5, 3.5, 0.0, 20.0, 1e-3, 7.0];
        let table = AliasTable::new(&weights).unwrap();
        let total: f64 = weights.iter().sum();
        assert_eq!(table.len(), weights.len());
        assert!((table.total_weight() - total).abs() < 1e-9);
        let probs: Vec<f64> = weights.iter().map(|w| w / total).collect();
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let n = 400_000;
        let mut counts = vec![0u64; weights.len()];
        for _ in 0..n {
            counts[table.sample(&mut rng)] += 1;
        }
        let (stat, df) = chi_square(&counts, &probs, n);
        assert!(
            stat < critical(df),
            "chi-square {stat} with {df} df: {counts:?}"
        );
    }

    #[test]
    fn single_and_uniform_tables() {
        let mut rng = ChaCha8Rng::seed_from_u64(6);
        let one = AliasTable::new(&[3.0]).unwrap();
        assert!((0..100).all(|_| one.sample(&mut rng) == 0));
        let uniform = AliasTable::new(&[1.0; 64]).unwrap();
        let mut counts = [0u64; 64];
        for _ in 0..640_000 {
            counts[uniform.sample(&mut rng)] += 1;
        }
        let (stat, df) = chi_square(&counts, &[1.0 / 64.0; 64], 640_000);
        assert!(stat < critical(df), "{stat}");
    }

    #[test]
    fn bad_weights_are_refused() {
        assert!(AliasTable::new(&[]).is_err());
        assert!(AliasTable::new(&[0.0, 0.0]).is_err());
        assert!(AliasTable::new(&[1.0, -1.0]).is_err());
        assert!(AliasTable::new(&[1.0, f64::NAN]).is_err());
        assert!(AliasTable::new(&[1.0, f64::INFINITY]).is_err());
        assert!(
            AliasTable::new(&[f64::MAX, f64::MAX]).is_err(),
            "the sum overflows"
        );
    }

    #[test]
    fn skewed_weights_keep_columns_valid() {
        // One huge weight among many tiny ones exercises the rounding leftovers.
        let mut w = vec![1e-9; 10_000];
        w[1234] = 1e9;
        let t = AliasTable::new(&w).unwrap();
        assert!(t.columns.iter().all(|c| (0.0..=1.0).contains(&c.prob)));
        assert!(t.columns.iter().all(|c| (c.alias as usize) < w.len()));
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        assert!((0..1000).all(|_| t.sample(&mut rng) == 1234));
    }
}
