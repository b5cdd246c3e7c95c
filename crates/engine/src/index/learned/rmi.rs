//! The root's 2-stage recursive model index (RMI) over the groups' pivots (their first keys).
//!
//! Stage 1 is one linear model that routes a key to one of `m` stage-2 buckets; because it is monotone, the
//! pivots routed to bucket `j` are a contiguous run `start..end`, every pivot of an earlier bucket is below
//! any key routed to `j` and every pivot of a later one above it, so the answer (the last pivot ≤ key) lies in
//! `start − 1 ..= end − 1`. Each bucket's linear model predicts the position within that run with a measured
//! error; the window is searched and the answer checked against its neighbours (a miss searches the run).
//!
//! Training doubles `m` from `groups / 64` until every bucket's error is within [`ROOT_ERROR_BOUND`] or the
//! models would exceed [`ROOT_MEMORY_LIMIT`] (XIndex's root bounds: 32 positions, 1 MiB).
//!
//! Cost: locating a key is two multiply-adds and a binary search of ≤ 2·err + 1 pivots.

use super::model::Linear;

/// Largest acceptable error of a stage-2 model.
pub const ROOT_ERROR_BOUND: usize = 32;
/// Largest size of the stage-2 models.
pub const ROOT_MEMORY_LIMIT: usize = 1 << 20;

#[derive(Debug, Clone, Copy, Default)]
struct Bucket {
    start: usize,
    end: usize,
    model: Linear,
    err: usize,
}

/// The trained root over a sorted pivot array.
#[derive(Debug, Clone)]
pub struct Rmi {
    stage1: Linear,
    buckets: Vec<Bucket>,
}

impl Rmi {
    /// Trains the RMI over `pivots` (sorted, distinct).
    pub fn train(pivots: &[u64]) -> Rmi {
        let n = pivots.len();
        let mut m = (n / 64).max(1);
        loop {
            let rmi = Self::train_with(pivots, m);
            let worst = rmi.buckets.iter().map(|b| b.err).max().unwrap_or(0);
            let next_bytes = 2 * m * std::mem::size_of::<Bucket>();
            if worst <= ROOT_ERROR_BOUND || next_bytes > ROOT_MEMORY_LIMIT || m >= n {
                return rmi;
            }
            m *= 2;
        }
    }

    fn train_with(pivots: &[u64], m: usize) -> Rmi {
        let (fit, _) = Linear::fit(pivots, 0);
        let n = pivots.len().max(1);
        // Stage 1 maps a key to position · m / n, i.e. scales the fitted model.
        let scale = m as f64 / n as f64;
        let stage1 = Linear {
            origin: fit.origin,
            slope: fit.slope * scale,
            intercept: fit.intercept * scale,
        };
        let mut buckets = vec![Bucket::default(); m];
        let mut i = 0;
        for (j, bucket) in buckets.iter_mut().enumerate() {
            let start = i;
            while i < pivots.len() && pivots.get(i).is_some_and(|&p| route(&stage1, m, p) == j) {
                i += 1;
            }
            let run = pivots.get(start..i).unwrap_or(&[]);
            let (model, err) = Linear::fit(run, start);
            *bucket = Bucket {
                start,
                end: i,
                model,
                err,
            };
        }
        Rmi { stage1, buckets }
    }

    /// Bytes of the models.
    pub fn memory(&self) -> usize {
        Linear::BYTES + self.buckets.len() * std::mem::size_of::<Bucket>()
    }

    /// The index of the last pivot ≤ `key` (0 if `key` is below every pivot).
    #[inline]
    pub fn locate(&self, pivots: &[u64], key: u64) -> usize {
        let m = self.buckets.len();
        let Some(b) = self.buckets.get(route(&self.stage1, m, key)) else {
            return 0;
        };
        // The answer is in `b.start - 1 ..= b.end - 1`.
        let run_lo = b.start.saturating_sub(1);
        let run_hi = b.end.max(b.start + 1).min(pivots.len().max(1));
        let (lo, hi) = if b.start < b.end {
            let pred = b.model.predict(key).clamp(b.start, b.end);
            (
                pred.saturating_sub(b.err + 1).max(run_lo),
                (pred + b.err + 1).min(run_hi),
            )
        } else {
            (run_lo, run_hi)
        };
        let answer = |lo: usize, hi: usize| -> usize {
            let count = pivots
                .get(lo..hi)
                .map_or(0, |w| w.partition_point(|&p| p <= key));
            (lo + count).saturating_sub(1)
        };
        let a = answer(lo, hi);
        let ok = pivots.get(a).is_none_or(|&p| p <= key || a == 0)
            && pivots.get(a + 1).is_none_or(|&p| p > key);
        if ok { a } else { answer(0, pivots.len()) }
    }
}

#[inline]
fn route(stage1: &Linear, m: usize, key: u64) -> usize {
    stage1.predict(key).min(m - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(pivots: &[u64]) {
        let rmi = Rmi::train(pivots);
        for (i, &p) in pivots.iter().enumerate() {
            assert_eq!(rmi.locate(pivots, p), i);
            assert_eq!(
                rmi.locate(pivots, p.saturating_add(1)),
                i.max(if pivots.get(i + 1) == Some(&(p + 1)) {
                    i + 1
                } else {
                    i
                })
            );
        }
        assert_eq!(rmi.locate(pivots, 0), 0);
        assert_eq!(rmi.locate(pivots, u64::MAX), pivots.len().saturating_sub(1));
    }

    #[test]
    fn locates_the_last_pivot_at_or_below_a_key() {
        check(&[0]);
        check(&(0..5000).map(|i| i * 1000).collect::<Vec<_>>());
        check(&(0..3000u64).map(|i| i * i * i * 977).collect::<Vec<_>>());
        check(
            &(0..2000u64)
                .map(|i| if i < 1000 { i } else { u64::MAX - 5000 + i })
                .collect::<Vec<_>>(),
        );
    }
}
