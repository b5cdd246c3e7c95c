//! The weighted AB-tree's read side: point reads are in `tree`; here ranks and counts, prefix weights, and
//! weighted set and range sampling by prefix-weight descents (costs in the `weighted_abtree` module doc).

use super::tree::{WeightedBPlusTree, WeightedTreeError, route, unit};

impl WeightedBPlusTree {
    /// Records with keys below `x` (`inclusive`: up to `x`).
    fn rank(&self, x: u64, inclusive: bool) -> u64 {
        let mut id = self.root;
        let mut rank = 0;
        for _ in 1..self.height {
            let n = &self.inners[id];
            let i = route(&n.keys, x);
            rank += n.counts[..i].iter().sum::<u64>();
            id = n.children[i];
        }
        let keys = &self.leaves[id].keys;
        rank + if inclusive {
            keys.partition_point(|&k| k <= x)
        } else {
            keys.partition_point(|&k| k < x)
        } as u64
    }

    /// Records with keys in `[lo, hi]`.
    pub fn count(&self, lo: u64, hi: u64) -> u64 {
        if lo > hi {
            return 0;
        }
        self.rank(hi, true) - self.rank(lo, false)
    }

    /// Records and weight below `x` (`inclusive`: up to `x`), accumulated in descent order: the entries left
    /// of the path at each level, root first, then the leaf's weights — the order in which
    /// a sampling descent accumulates, so that draws and prefixes agree up to the rounding of the
    /// stored per-child sums.
    pub fn prefix(&self, x: u64, inclusive: bool) -> (u64, f64) {
        let mut id = self.root;
        let (mut rank, mut acc) = (0u64, 0.0f64);
        for _ in 1..self.height {
            let n = &self.inners[id];
            let i = route(&n.keys, x);
            for j in 0..i {
                rank += n.counts[j];
                acc += n.sums[j];
            }
            id = n.children[i];
        }
        let leaf = &self.leaves[id];
        let p = if inclusive {
            leaf.keys.partition_point(|&k| k <= x)
        } else {
            leaf.keys.partition_point(|&k| k < x)
        };
        for &w in &leaf.weights[..p] {
            acc += w;
        }
        (rank + p as u64, acc)
    }

    /// Weight of the records with keys in `[lo, hi]`, summed over the range's canonical decomposition (the
    /// subtrees it covers whole and the partial leaves at its ends): 0 exactly when every such weight is 0.
    pub fn range_weight(&self, lo: u64, hi: u64) -> f64 {
        if lo > hi {
            return 0.0;
        }
        self.weight_in(self.root, self.height, lo, hi)
    }

    fn weight_in(&self, id: usize, level: u32, lo: u64, hi: u64) -> f64 {
        if level == 1 {
            let l = &self.leaves[id];
            let a = l.keys.partition_point(|&k| k < lo);
            let b = l.keys.partition_point(|&k| k <= hi);
            return l.weights[a..b].iter().sum();
        }
        let n = &self.inners[id];
        let (i, j) = (route(&n.keys, lo), route(&n.keys, hi));
        let first = self.weight_in(n.children[i], level - 1, lo, hi);
        if i == j {
            return first;
        }
        let middle: f64 = n.sums[i + 1..j].iter().sum();
        first + middle + self.weight_in(n.children[j], level - 1, lo, hi)
    }

    /// The record at prefix weight `u`: the first one whose cumulative weight (accumulated in descent
    /// order) exceeds `u`, as (leaf, index). Never a zero-weight record; when rounding leaves `u` past every
    /// cumulative weight of a node, the node's last entry of positive weight. `None` only when the tree's
    /// total weight is 0.
    pub(super) fn select(&self, mut u: f64) -> Option<(usize, usize)> {
        let mut id = self.root;
        let mut acc = 0.0f64;
        for _ in 1..self.height {
            let n = &self.inners[id];
            let mut pick = None;
            for (j, &s) in n.sums.iter().enumerate() {
                let next = acc + s;
                if next > u {
                    pick = Some(j);
                    break;
                }
                acc = next;
            }
            let j = match pick {
                Some(j) => j,
                None => {
                    u = f64::INFINITY;
                    n.sums.iter().rposition(|&s| s > 0.0)?
                }
            };
            id = n.children[j];
        }
        let leaf = &self.leaves[id];
        for (j, &w) in leaf.weights.iter().enumerate() {
            let next = acc + w;
            if next > u {
                return Some((id, j));
            }
            acc = next;
        }
        leaf.weights.iter().rposition(|&w| w > 0.0).map(|j| (id, j))
    }

    /// `k` independent weighted samples, with replacement, of the whole set, handed to `visit` (key,
    /// value); nothing when the tree is empty or every weight is 0. Returns how many were drawn.
    pub fn sample<R, E>(
        &self,
        k: usize,
        rng: &mut R,
        mut visit: impl FnMut(u64, u64) -> std::result::Result<(), E>,
    ) -> std::result::Result<usize, E>
    where
        R: rand::RngCore + ?Sized,
        E: From<WeightedTreeError>,
    {
        // Sums of finite weights ≥ 0 are never NaN; they may overflow to +∞.
        let total = self.total_weight();
        if k == 0 || total <= 0.0 {
            return Ok(0);
        }
        if total == f64::INFINITY {
            return Err(WeightedTreeError::WeightOverflow.into());
        }
        let mut got = 0;
        while got < k {
            let u = unit(rng) * total;
            // u < total always lands; a product rounded up to `total` is redrawn.
            if let Some((l, i)) = (u < total).then(|| self.select(u)).flatten() {
                let leaf = &self.leaves[l];
                visit(leaf.keys[i], leaf.values[i])?;
                got += 1;
            }
        }
        Ok(got)
    }

    /// `k` independent weighted samples, with replacement, of the records with keys in `[lo, hi]`, handed
    /// to `visit` (key, value); nothing when the range is empty or all its weights are 0 (see the module
    /// doc). Returns how many were drawn.
    pub fn sample_range<R, E>(
        &self,
        lo: u64,
        hi: u64,
        k: usize,
        rng: &mut R,
        mut visit: impl FnMut(u64, u64) -> std::result::Result<(), E>,
    ) -> std::result::Result<usize, E>
    where
        R: rand::RngCore + ?Sized,
        E: From<WeightedTreeError>,
    {
        if k == 0 || lo > hi || self.len == 0 {
            return Ok(0);
        }
        if lo == 0 && hi == u64::MAX {
            return self.sample(k, rng, visit);
        }
        let (a, p_lo) = self.prefix(lo, false);
        let (b, p_hi) = self.prefix(hi, true);
        if a == b || self.range_weight(lo, hi) <= 0.0 {
            return Ok(0);
        }
        if p_hi == f64::INFINITY {
            return Err(WeightedTreeError::WeightOverflow.into());
        }
        if p_hi <= p_lo {
            return Err(WeightedTreeError::BelowResolution { lo, hi }.into());
        }
        let width = p_hi - p_lo;
        // Rejections happen only for draws within rounding distance of P_lo or P_hi; this many means the
        // range's weight is lost in the prefix sums' rounding.
        let limit = 64 * (k as u64 + 64);
        let (mut got, mut misses) = (0usize, 0u64);
        while got < k {
            let u = p_lo + unit(rng) * width;
            let hit = (u < p_hi)
                .then(|| self.select(u))
                .flatten()
                .filter(|&(l, i)| (lo..=hi).contains(&self.leaves[l].keys[i]));
            match hit {
                Some((l, i)) => {
                    let leaf = &self.leaves[l];
                    visit(leaf.keys[i], leaf.values[i])?;
                    got += 1;
                }
                None => {
                    misses += 1;
                    if misses > limit {
                        return Err(WeightedTreeError::BelowResolution { lo, hi }.into());
                    }
                }
            }
        }
        Ok(got)
    }

    /// Visits the records with keys in `[lo, hi]` in key order (descending when `reverse`) until `visit`
    /// returns `false`.
    pub fn visit_range<E>(
        &self,
        lo: u64,
        hi: u64,
        reverse: bool,
        visit: &mut dyn FnMut(u64, u64) -> std::result::Result<bool, E>,
    ) -> std::result::Result<(), E> {
        if lo <= hi {
            self.walk(self.root, self.height, lo, hi, reverse, visit)?;
        }
        Ok(())
    }

    /// [`visit_range`](Self::visit_range) below node `id` at `level`; `false` once the visitor stopped.
    fn walk<E>(
        &self,
        id: usize,
        level: u32,
        lo: u64,
        hi: u64,
        reverse: bool,
        visit: &mut dyn FnMut(u64, u64) -> std::result::Result<bool, E>,
    ) -> std::result::Result<bool, E> {
        if level == 1 {
            let l = &self.leaves[id];
            let a = l.keys.partition_point(|&k| k < lo);
            let b = l.keys.partition_point(|&k| k <= hi);
            if reverse {
                for j in (a..b).rev() {
                    if !visit(l.keys[j], l.values[j])? {
                        return Ok(false);
                    }
                }
            } else {
                for j in a..b {
                    if !visit(l.keys[j], l.values[j])? {
                        return Ok(false);
                    }
                }
            }
            return Ok(true);
        }
        let n = &self.inners[id];
        let (i, j) = (route(&n.keys, lo), route(&n.keys, hi));
        if reverse {
            for c in (i..=j).rev() {
                if !self.walk(n.children[c], level - 1, lo, hi, reverse, visit)? {
                    return Ok(false);
                }
            }
        } else {
            for c in i..=j {
                if !self.walk(n.children[c], level - 1, lo, hi, reverse, visit)? {
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }
}
