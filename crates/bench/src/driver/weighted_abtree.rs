//! # The weighted AB-tree baseline (`weighted-ab-tree`)
//!
//! The baseline of Rumbaugh & Xie's weighted sampling experiments: an in-memory B+-tree whose inner nodes
//! keep, per child, the subtree's record count and weight sum (an aggregate B+-tree, the paper's TLX-based
//! "weighted AB-tree"), sampled by Olken's method — every sample is an independent root-to-leaf descent that
//! picks children in proportion to their weight sums.
//!
//! [`WeightedBPlusTree`] is the structure: `u64` keys, `u64` values, `f64` weights (finite, ≥ 0; anything
//! else is refused with [`WeightedTreeError::InvalidWeight`], never a panic). Nodes live in two arenas
//! (`Vec`s of leaves and of inner nodes, with free lists); a child id is an index into the leaf arena when
//! its parent sits just above the leaves, into the inner arena otherwise.
//!
//! * Leaves hold sorted keys with their values and weights, at most `fanout` (default [`FANOUT`] = 64).
//! * Inner nodes hold `m` children (at most `fanout`), `m − 1` strictly increasing separator keys, and per
//!   child its subtree's record count and weight sum. Every key of child `j` lies in `[sep[j−1], sep[j])`.
//!
//! ## Invariants (checked by [`WeightedBPlusTree::check`])
//!
//! * Every leaf is at the same depth ([`height`](WeightedBPlusTree::height) levels, 1 = the root is a
//!   leaf).
//! * Every node but the root has between `fanout / 2` and `fanout` entries; an inner root has at least 2
//!   children. So the height is at most 1 + ⌈log_{fanout/2}(n)⌉.
//! * Each inner entry's count and weight sum are exactly (bit for bit) the sum, left to right, of the
//!   child's own entries (its children's counts and sums, or a leaf's weights). They are never adjusted by
//!   deltas: whenever a node changes, its parent's entry is recomputed from the node's contents, so
//!   floating-point error does not accumulate over any number of updates — each stored sum is as exact as a
//!   fresh left-to-right sum of ≤ `fanout` terms per level.
//! * A weight sum is 0 exactly when every weight below it is 0, so descents never enter a zero-weight
//!   subtree and never pick a zero-weight record.
//!
//! ## Operations and cost (B = fanout, n = records)
//!
//! * [`insert`](WeightedBPlusTree::insert) (insert or overwrite) and [`delete`](WeightedBPlusTree::delete)
//!   (absent key: no effect): one descent, then the entries of the path are recomputed bottom-up, with
//!   splits on overflow and, on underflow, a merge with a sibling or an even redistribution between the two
//!   — O(B log_B n).
//! * [`get`](WeightedBPlusTree::get): O(log n). [`count`](WeightedBPlusTree::count) of a key range: two
//!   rank descents, O(B log_B n).
//! * [`sample`](WeightedBPlusTree::sample) (weighted set sampling, k records over the whole set, with
//!   replacement): u uniform in [0, W), then a descent by prefix weight — O(k · B log_B n).
//! * [`sample_range`](WeightedBPlusTree::sample_range) (weighted independent range sampling over
//!   `[lo, hi]`): one descent each for the prefix weight before `lo` (P_lo) and up to `hi` (P_hi), then per
//!   sample u uniform in [P_lo, P_hi) and a descent by prefix weight — O(B log_B n + k · B log_B n). The
//!   descent accumulates prefixes in the same order as the prefix descents, but a stored child sum and the
//!   running sum of that child's entries can differ in the last bit, so a draw within rounding distance of
//!   P_lo or P_hi may land on the neighbouring record just outside the range; such draws are rejected and
//!   redrawn (probability ~10⁻¹⁶ · total / range weight per draw). An empty range, or one whose records all
//!   weigh 0 (decided exactly, from the per-child sums of the range's canonical decomposition, one more
//!   O(B log_B n) pass per query), returns nothing — as the other drivers do. Weights whose sums overflow
//!   `f64` ([`WeightedTreeError::WeightOverflow`]) or ranges whose weight is below the resolution of the
//!   prefix sums ([`WeightedTreeError::BelowResolution`]) are errors, not endless redraws.
//!
//! [`WeightedAbTree`] is the [`Engine`] and [`WeightedAbTreeDriver`] the [`Driver`]: the structure behind a
//! `RwLock` (samples, gets, counts and scans share it; writes take it exclusively). It lives in memory
//! only: no files, no WAL, no persistence. Creating a database creates its directory (so the lab's
//! disk-usage measure reads 0 bytes) and an empty tree; opening an existing one is a usage error, as there is
//! nothing to reopen; [`Driver::checkpoint`] does nothing. Plain [`Driver::put`] stores weight 1.

use super::{Capabilities, Driver, Engine, EngineOptions, ValueFormat, Visit};
use crate::error::{BenchError, Result};
use std::fmt;
use std::path::Path;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Default fanout: most records of a leaf and most children of an inner node.
pub const FANOUT: usize = 64;
/// Smallest fanout [`WeightedBPlusTree::with_fanout`] accepts (smaller values are raised to it).
pub const MIN_FANOUT: usize = 4;
/// The engine's name in results.
pub const NAME: &str = "weighted-ab-tree";

/// What the weighted B+-tree refuses.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum WeightedTreeError {
    /// A weight that is negative, infinite or NaN.
    InvalidWeight { key: u64, weight: f64 },
    /// The range `[lo, hi]` holds records of positive weight, but its weight is below the floating-point
    /// resolution of the tree's prefix sums (weights spanning more than ~15 decimal orders of magnitude), so
    /// Olken's descent cannot sample it.
    BelowResolution { lo: u64, hi: u64 },
    /// The weights to sample from add up to more than `f64::MAX`.
    WeightOverflow,
}

impl fmt::Display for WeightedTreeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WeightedTreeError::InvalidWeight { key, weight } => {
                write!(f, "weight {weight} of key {key} is not a finite number ≥ 0")
            }
            WeightedTreeError::BelowResolution { lo, hi } => write!(
                f,
                "the weight of [{lo}, {hi}] is below the resolution of the tree's prefix sums"
            ),
            WeightedTreeError::WeightOverflow => {
                write!(f, "the weights to sample from add up to more than f64::MAX")
            }
        }
    }
}

impl std::error::Error for WeightedTreeError {}

impl From<WeightedTreeError> for BenchError {
    fn from(e: WeightedTreeError) -> Self {
        match e {
            WeightedTreeError::InvalidWeight { .. } => BenchError::Usage(format!("{NAME}: {e}")),
            WeightedTreeError::BelowResolution { .. } | WeightedTreeError::WeightOverflow => {
                BenchError::peer(NAME, e)
            }
        }
    }
}

/// A leaf: sorted keys, their values and weights.
#[derive(Debug, Default, Clone)]
struct Leaf {
    keys: Vec<u64>,
    values: Vec<u64>,
    weights: Vec<f64>,
}

impl Leaf {
    fn with_capacity(n: usize) -> Self {
        Leaf {
            keys: Vec::with_capacity(n),
            values: Vec::with_capacity(n),
            weights: Vec::with_capacity(n),
        }
    }

    fn clear(&mut self) {
        self.keys.clear();
        self.values.clear();
        self.weights.clear();
    }

    /// Moves entries `at..` to the end of `to`.
    fn move_tail(&mut self, at: usize, to: &mut Leaf) {
        to.keys.extend_from_slice(&self.keys[at..]);
        to.values.extend_from_slice(&self.values[at..]);
        to.weights.extend_from_slice(&self.weights[at..]);
        self.keys.truncate(at);
        self.values.truncate(at);
        self.weights.truncate(at);
    }
}

/// An inner node: `children.len() − 1` separators, and per child its id, record count and weight sum.
#[derive(Debug, Default, Clone)]
struct Inner {
    keys: Vec<u64>,
    children: Vec<usize>,
    counts: Vec<u64>,
    sums: Vec<f64>,
}

impl Inner {
    fn with_capacity(n: usize) -> Self {
        Inner {
            keys: Vec::with_capacity(n),
            children: Vec::with_capacity(n),
            counts: Vec::with_capacity(n),
            sums: Vec::with_capacity(n),
        }
    }

    fn clear(&mut self) {
        self.keys.clear();
        self.children.clear();
        self.counts.clear();
        self.sums.clear();
    }

    /// Moves children `at..` (with their entries, and separators `at..`) to the end of `to`; returns the
    /// separator between the two halves (`keys[at − 1]`), removed from `self`. `at` must be ≥ 1.
    fn move_tail(&mut self, at: usize, to: &mut Inner) -> u64 {
        to.keys.extend_from_slice(&self.keys[at..]);
        to.children.extend_from_slice(&self.children[at..]);
        to.counts.extend_from_slice(&self.counts[at..]);
        to.sums.extend_from_slice(&self.sums[at..]);
        let sep = self.keys[at - 1];
        self.keys.truncate(at - 1);
        self.children.truncate(at);
        self.counts.truncate(at);
        self.sums.truncate(at);
        sep
    }

    /// Sets child `i`'s count and weight sum.
    fn set(&mut self, i: usize, (count, sum): (u64, f64)) {
        self.counts[i] = count;
        self.sums[i] = sum;
    }
}

/// The child of an inner node with separators `keys` whose key range holds `key`.
#[inline]
fn route(keys: &[u64], key: u64) -> usize {
    keys.partition_point(|&s| s <= key)
}

/// A uniform double in [0, 1) from one 64-bit word.
#[inline]
fn unit<R: rand::RngCore + ?Sized>(rng: &mut R) -> f64 {
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// An in-memory weighted aggregate B+-tree (see the module doc).
#[derive(Debug, Clone)]
pub struct WeightedBPlusTree {
    leaves: Vec<Leaf>,
    inners: Vec<Inner>,
    free_leaves: Vec<usize>,
    free_inners: Vec<usize>,
    /// Leaf id when `height == 1`, inner id otherwise.
    root: usize,
    /// Levels, root to leaves (1 = the root is a leaf).
    height: u32,
    len: u64,
    fanout: usize,
    /// Scratch for the descent path of a write: (inner node, child index taken).
    path: Vec<(usize, usize)>,
}

impl Default for WeightedBPlusTree {
    fn default() -> Self {
        Self::new()
    }
}

impl WeightedBPlusTree {
    /// An empty tree with fanout `FANOUT` (64).
    pub fn new() -> Self {
        Self::with_fanout(FANOUT)
    }

    /// An empty tree with fanout `fanout` (at least `MIN_FANOUT` = 4; smaller values are raised to it).
    pub fn with_fanout(fanout: usize) -> Self {
        let fanout = fanout.max(MIN_FANOUT);
        WeightedBPlusTree {
            leaves: vec![Leaf::with_capacity(fanout + 1)],
            inners: Vec::new(),
            free_leaves: Vec::new(),
            free_inners: Vec::new(),
            root: 0,
            height: 1,
            len: 0,
            fanout,
            path: Vec::new(),
        }
    }

    /// Records in the tree.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the tree holds no record.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Levels from the root to the leaves (1 = the root is a leaf).
    pub fn height(&self) -> u32 {
        self.height
    }

    /// The fanout (most entries of a node).
    pub fn fanout(&self) -> usize {
        self.fanout
    }

    /// Fewest entries of a node other than the root.
    fn min_fill(&self) -> usize {
        self.fanout / 2
    }

    /// Sum of all weights (the root's entries summed left to right).
    pub fn total_weight(&self) -> f64 {
        self.aggregate(self.root, self.height == 1).1
    }

    /// Record count and weight sum of node `id` from its own entries, summed left to right.
    #[inline]
    fn aggregate(&self, id: usize, leaf: bool) -> (u64, f64) {
        if leaf {
            let l = &self.leaves[id];
            (l.keys.len() as u64, l.weights.iter().sum())
        } else {
            let n = &self.inners[id];
            (n.counts.iter().sum(), n.sums.iter().sum())
        }
    }

    /// Entries of node `id`: records of a leaf, children of an inner node.
    fn size(&self, id: usize, leaf: bool) -> usize {
        if leaf {
            self.leaves[id].keys.len()
        } else {
            self.inners[id].children.len()
        }
    }

    fn alloc_leaf(&mut self) -> usize {
        match self.free_leaves.pop() {
            Some(id) => id,
            None => {
                self.leaves.push(Leaf::with_capacity(self.fanout + 1));
                self.leaves.len() - 1
            }
        }
    }

    fn alloc_inner(&mut self) -> usize {
        match self.free_inners.pop() {
            Some(id) => id,
            None => {
                self.inners.push(Inner::with_capacity(self.fanout + 1));
                self.inners.len() - 1
            }
        }
    }

    /// Descends to the leaf whose key range holds `key`, recording the path in `self.path`.
    fn descend_recording(&mut self, key: u64) -> usize {
        self.path.clear();
        let mut id = self.root;
        for _ in 1..self.height {
            let n = &self.inners[id];
            let i = route(&n.keys, key);
            self.path.push((id, i));
            id = n.children[i];
        }
        id
    }

    /// The leaf whose key range holds `key`.
    fn leaf_of(&self, key: u64) -> usize {
        let mut id = self.root;
        for _ in 1..self.height {
            let n = &self.inners[id];
            id = n.children[route(&n.keys, key)];
        }
        id
    }

    /// Inserts `key` with `value` and `weight`, or overwrites them; returns whether the key is new.
    pub fn insert(
        &mut self,
        key: u64,
        value: u64,
        weight: f64,
    ) -> std::result::Result<bool, WeightedTreeError> {
        if !(weight.is_finite() && weight >= 0.0) {
            return Err(WeightedTreeError::InvalidWeight { key, weight });
        }
        let leaf_id = self.descend_recording(key);
        let leaf = &mut self.leaves[leaf_id];
        let new = match leaf.keys.binary_search(&key) {
            Ok(p) => {
                leaf.values[p] = value;
                if leaf.weights[p].to_bits() == weight.to_bits() {
                    // Same weight: no aggregate changes.
                    return Ok(false);
                }
                leaf.weights[p] = weight;
                false
            }
            Err(p) => {
                leaf.keys.insert(p, key);
                leaf.values.insert(p, value);
                leaf.weights.insert(p, weight);
                self.len += 1;
                true
            }
        };
        let mut split =
            (self.leaves[leaf_id].keys.len() > self.fanout).then(|| self.split_leaf(leaf_id));
        let mut child = leaf_id;
        let mut child_leaf = true;
        let path = std::mem::take(&mut self.path);
        for &(pid, i) in path.iter().rev() {
            let left = self.aggregate(child, child_leaf);
            let right = split.map(|(sep, r)| (sep, r, self.aggregate(r, child_leaf)));
            let p = &mut self.inners[pid];
            p.set(i, left);
            split = None;
            if let Some((sep, r, (count, sum))) = right {
                p.keys.insert(i, sep);
                p.children.insert(i + 1, r);
                p.counts.insert(i + 1, count);
                p.sums.insert(i + 1, sum);
                if p.children.len() > self.fanout {
                    split = Some(self.split_inner(pid));
                }
            }
            child = pid;
            child_leaf = false;
        }
        self.path = path;
        if let Some((sep, r)) = split {
            // The root split: a new root above the two halves.
            let old = self.root;
            let leaf = self.height == 1;
            let (a, b) = (self.aggregate(old, leaf), self.aggregate(r, leaf));
            let id = self.alloc_inner();
            let n = &mut self.inners[id];
            n.keys.push(sep);
            n.children.extend_from_slice(&[old, r]);
            n.counts.extend_from_slice(&[a.0, b.0]);
            n.sums.extend_from_slice(&[a.1, b.1]);
            self.root = id;
            self.height += 1;
        }
        Ok(new)
    }

    /// Splits leaf `id` in two halves; returns the separator and the new right leaf.
    fn split_leaf(&mut self, id: usize) -> (u64, usize) {
        let r = self.alloc_leaf();
        let mut right = std::mem::take(&mut self.leaves[r]);
        right.clear();
        let left = &mut self.leaves[id];
        left.move_tail(left.keys.len() / 2, &mut right);
        let sep = right.keys[0];
        self.leaves[r] = right;
        (sep, r)
    }

    /// Splits inner node `id` in two halves; returns the separator and the new right node.
    fn split_inner(&mut self, id: usize) -> (u64, usize) {
        let r = self.alloc_inner();
        let mut right = std::mem::take(&mut self.inners[r]);
        right.clear();
        let left = &mut self.inners[id];
        let sep = left.move_tail(left.children.len() / 2, &mut right);
        self.inners[r] = right;
        (sep, r)
    }

    /// Removes `key`; returns whether it was there (an absent key changes nothing).
    pub fn delete(&mut self, key: u64) -> bool {
        let leaf_id = self.descend_recording(key);
        let leaf = &mut self.leaves[leaf_id];
        let Ok(p) = leaf.keys.binary_search(&key) else {
            return false;
        };
        leaf.keys.remove(p);
        leaf.values.remove(p);
        leaf.weights.remove(p);
        self.len -= 1;
        let mut child = leaf_id;
        let mut child_leaf = true;
        let path = std::mem::take(&mut self.path);
        for &(pid, i) in path.iter().rev() {
            if self.size(child, child_leaf) < self.min_fill() {
                self.rebalance(pid, i, child_leaf);
            } else {
                let agg = self.aggregate(child, child_leaf);
                self.inners[pid].set(i, agg);
            }
            child = pid;
            child_leaf = false;
        }
        self.path = path;
        // An inner root left with one child gives way to it.
        while self.height > 1 && self.inners[self.root].children.len() == 1 {
            let old = self.root;
            self.root = self.inners[old].children[0];
            self.inners[old].clear();
            self.free_inners.push(old);
            self.height -= 1;
        }
        true
    }

    /// Child `i` of `pid` underflowed: merges it with a sibling, or, when the two do not fit in one node,
    /// shares their entries evenly; then recomputes the parent's entries of both.
    fn rebalance(&mut self, pid: usize, i: usize, leaf: bool) {
        let m = self.inners[pid].children.len();
        if m < 2 {
            // Only an inner root can have a single child; it gives way after the descent's fix-up.
            let agg = self.aggregate(self.inners[pid].children[i], leaf);
            self.inners[pid].set(i, agg);
            return;
        }
        let l = if i + 1 < m { i } else { i - 1 };
        let (lid, rid) = (
            self.inners[pid].children[l],
            self.inners[pid].children[l + 1],
        );
        let sep = self.inners[pid].keys[l];
        // Everything into the left node, then split it again if it is too big.
        let overfull = if leaf {
            let mut right = std::mem::take(&mut self.leaves[rid]);
            let left = &mut self.leaves[lid];
            right.move_tail(0, left);
            let over = left.keys.len() > self.fanout;
            if over {
                left.move_tail(left.keys.len() / 2, &mut right);
            }
            let new_sep = right.keys.first().copied();
            self.leaves[rid] = right;
            over.then_some(new_sep).flatten()
        } else {
            let mut right = std::mem::take(&mut self.inners[rid]);
            let left = &mut self.inners[lid];
            left.keys.push(sep);
            left.keys.append(&mut right.keys);
            left.children.append(&mut right.children);
            left.counts.append(&mut right.counts);
            left.sums.append(&mut right.sums);
            let over = left.children.len() > self.fanout;
            let new_sep = over.then(|| left.move_tail(left.children.len() / 2, &mut right));
            self.inners[rid] = right;
            new_sep
        };
        match overfull {
            Some(new_sep) => {
                let (a, b) = (self.aggregate(lid, leaf), self.aggregate(rid, leaf));
                let p = &mut self.inners[pid];
                p.keys[l] = new_sep;
                p.set(l, a);
                p.set(l + 1, b);
            }
            None => {
                if leaf {
                    self.leaves[rid].clear();
                    self.free_leaves.push(rid);
                } else {
                    self.inners[rid].clear();
                    self.free_inners.push(rid);
                }
                let a = self.aggregate(lid, leaf);
                let p = &mut self.inners[pid];
                p.keys.remove(l);
                p.children.remove(l + 1);
                p.counts.remove(l + 1);
                p.sums.remove(l + 1);
                p.set(l, a);
            }
        }
    }

    /// The value and weight of `key`.
    pub fn get(&self, key: u64) -> Option<(u64, f64)> {
        let leaf = &self.leaves[self.leaf_of(key)];
        let p = leaf.keys.binary_search(&key).ok()?;
        Some((leaf.values[p], leaf.weights[p]))
    }

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
    fn select(&self, mut u: f64) -> Option<(usize, usize)> {
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

    /// Walks the whole tree and checks every invariant of the module doc: equal leaf depth, fill bounds,
    /// sorted keys within their separators' ranges, valid weights, each inner entry's count and weight sum
    /// equal (exactly) to its child's, the record count, and that every arena slot is either reachable once
    /// or on a free list. O(n); for tests.
    pub fn check(&self) -> std::result::Result<(), String> {
        let mut seen_leaves = vec![false; self.leaves.len()];
        let mut seen_inners = vec![false; self.inners.len()];
        let (count, _) = self.check_node(
            self.root,
            self.height,
            (None, None),
            true,
            &mut seen_leaves,
            &mut seen_inners,
        )?;
        if count != self.len {
            return Err(format!("{count} records reachable, len says {}", self.len));
        }
        for (free, seen, what) in [
            (&self.free_leaves, &mut seen_leaves, "leaf"),
            (&self.free_inners, &mut seen_inners, "inner node"),
        ] {
            for &id in free {
                if seen[id] {
                    return Err(format!(
                        "{what} {id} is reachable twice or both free and used"
                    ));
                }
                seen[id] = true;
            }
            if let Some(id) = seen.iter().position(|s| !s) {
                return Err(format!("{what} {id} is neither reachable nor free"));
            }
        }
        if self
            .free_leaves
            .iter()
            .any(|&id| !self.leaves[id].keys.is_empty())
            || self
                .free_inners
                .iter()
                .any(|&id| !self.inners[id].children.is_empty())
        {
            return Err("a free node is not empty".into());
        }
        Ok(())
    }

    /// Checks the subtree of `id` at `level`, whose keys must lie in `[bounds.0, bounds.1)`; returns its
    /// record count and weight sum (its entries summed left to right).
    fn check_node(
        &self,
        id: usize,
        level: u32,
        bounds: (Option<u64>, Option<u64>),
        root: bool,
        seen_leaves: &mut [bool],
        seen_inners: &mut [bool],
    ) -> std::result::Result<(u64, f64), String> {
        let (lo, hi) = bounds;
        let in_bounds = |k: u64| lo.is_none_or(|lo| k >= lo) && hi.is_none_or(|hi| k < hi);
        let min = if root { 0 } else { self.min_fill() };
        if level == 1 {
            if std::mem::replace(&mut seen_leaves[id], true) {
                return Err(format!("leaf {id} is reachable twice"));
            }
            let l = &self.leaves[id];
            let n = l.keys.len();
            if l.values.len() != n || l.weights.len() != n {
                return Err(format!("leaf {id}: column lengths differ"));
            }
            if n < min || n > self.fanout {
                return Err(format!(
                    "leaf {id}: {n} records, outside {min}..={}",
                    self.fanout
                ));
            }
            if l.keys.windows(2).any(|w| w[0] >= w[1]) {
                return Err(format!("leaf {id}: keys not strictly increasing"));
            }
            if let Some(k) = l.keys.iter().find(|&&k| !in_bounds(k)) {
                return Err(format!(
                    "leaf {id}: key {k} outside its range {lo:?}..{hi:?}"
                ));
            }
            if l.weights.iter().any(|w| !(w.is_finite() && *w >= 0.0)) {
                return Err(format!("leaf {id}: invalid weight"));
            }
            return Ok(self.aggregate(id, true));
        }
        if std::mem::replace(&mut seen_inners[id], true) {
            return Err(format!("inner node {id} is reachable twice"));
        }
        let n = &self.inners[id];
        let m = n.children.len();
        let min = if root { 2 } else { min };
        if n.keys.len() + 1 != m || n.counts.len() != m || n.sums.len() != m {
            return Err(format!("inner node {id}: column lengths differ"));
        }
        if m < min || m > self.fanout {
            return Err(format!(
                "inner node {id}: {m} children, outside {min}..={}",
                self.fanout
            ));
        }
        if n.keys.windows(2).any(|w| w[0] >= w[1]) {
            return Err(format!(
                "inner node {id}: separators not strictly increasing"
            ));
        }
        for j in 0..m {
            let b = (
                if j == 0 { lo } else { Some(n.keys[j - 1]) },
                if j + 1 == m { hi } else { Some(n.keys[j]) },
            );
            let (c, s) =
                self.check_node(n.children[j], level - 1, b, false, seen_leaves, seen_inners)?;
            if c != n.counts[j] {
                return Err(format!(
                    "inner node {id}, child {j}: count {} but the subtree holds {c}",
                    n.counts[j]
                ));
            }
            if s.to_bits() != n.sums[j].to_bits() {
                return Err(format!(
                    "inner node {id}, child {j}: weight sum {} but the child's entries sum to {s}",
                    n.sums[j]
                ));
            }
        }
        Ok(self.aggregate(id, false))
    }
}

/// The `weighted-ab-tree` engine: an in-memory [`WeightedBPlusTree`] per database (module doc).
#[derive(Debug, Clone, Copy, Default)]
pub struct WeightedAbTree;

impl Engine for WeightedAbTree {
    fn name(&self) -> &'static str {
        NAME
    }

    fn version(&self) -> String {
        env!("CARGO_PKG_VERSION").to_string()
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            count: true,
            sample: true,
            byte_values: false,
        }
    }

    fn settings(&self, _opts: &EngineOptions) -> String {
        format!(
            "in-memory aggregate B+-tree, fanout {FANOUT} (leaves of at most {FANOUT} records; inner nodes of at \
             most {FANOUT} children with per-child record counts and weight sums), Olken's method (one \
             root-to-leaf descent per sample); no files, no WAL, no persistence (durability, cache budget and \
             page size do not apply); inline u64 values"
        )
    }

    fn open_dir(&self, dir: &Path, opts: &EngineOptions, create: bool) -> Result<Box<dyn Driver>> {
        if opts.values != ValueFormat::U64 {
            return Err(BenchError::Usage(format!(
                "{NAME} stores u64 values only (run with --value-size 8)"
            )));
        }
        if !create {
            return Err(BenchError::Usage(format!(
                "{NAME} lives in memory only and keeps no files: there is no database in {} to open",
                dir.display()
            )));
        }
        // The directory stays empty; it exists so that a phase can measure its (zero) disk usage.
        std::fs::create_dir_all(dir).map_err(|e| BenchError::io(dir, e))?;
        Ok(Box::new(
            WeightedAbTreeDriver::new(WeightedBPlusTree::new()),
        ))
    }
}

/// An open `weighted-ab-tree` database: a [`WeightedBPlusTree`] behind a `RwLock`.
#[derive(Debug)]
pub struct WeightedAbTreeDriver {
    tree: RwLock<WeightedBPlusTree>,
}

impl WeightedAbTreeDriver {
    /// A driver over `tree`.
    pub fn new(tree: WeightedBPlusTree) -> Self {
        WeightedAbTreeDriver {
            tree: RwLock::new(tree),
        }
    }

    fn read(&self) -> Result<RwLockReadGuard<'_, WeightedBPlusTree>> {
        self.tree
            .read()
            .map_err(|_| BenchError::peer(NAME, "a writer panicked while holding the tree"))
    }

    fn write(&self) -> Result<RwLockWriteGuard<'_, WeightedBPlusTree>> {
        self.tree
            .write()
            .map_err(|_| BenchError::peer(NAME, "a writer panicked while holding the tree"))
    }
}

/// A value of the `u64` format: exactly 8 big-endian bytes.
fn decode_value(value: &[u8]) -> Result<u64> {
    let bytes: [u8; 8] = value.try_into().map_err(|_| {
        BenchError::Usage(format!(
            "{NAME} stores u64 values: {} bytes given, 8 expected",
            value.len()
        ))
    })?;
    Ok(u64::from_be_bytes(bytes))
}

impl Driver for WeightedAbTreeDriver {
    fn engine(&self) -> &'static str {
        NAME
    }

    fn put(&self, key: u64, value: &[u8]) -> Result<()> {
        self.put_weighted(key, value, 1.0)
    }

    fn put_weighted(&self, key: u64, value: &[u8], weight: f64) -> Result<()> {
        let value = decode_value(value)?;
        self.write()?.insert(key, value, weight)?;
        Ok(())
    }

    fn put_batch(&self, records: &[(u64, &[u8])]) -> Result<()> {
        // All or nothing: every value is checked before the first insert (weight 1 cannot be refused).
        let values = records
            .iter()
            .map(|(_, v)| decode_value(v))
            .collect::<Result<Vec<u64>>>()?;
        let mut tree = self.write()?;
        for ((key, _), value) in records.iter().zip(values) {
            tree.insert(*key, value, 1.0)?;
        }
        Ok(())
    }

    fn get(&self, key: u64, value: &mut Vec<u8>) -> Result<bool> {
        match self.read()?.get(key) {
            Some((v, _)) => {
                value.clear();
                value.extend_from_slice(&v.to_be_bytes());
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn delete(&self, key: u64) -> Result<()> {
        self.write()?.delete(key);
        Ok(())
    }

    fn scan_range(
        &self,
        lo: u64,
        hi: u64,
        limit: u64,
        reverse: bool,
        visit: &mut Visit<'_>,
    ) -> Result<u64> {
        if limit == 0 {
            return Ok(0);
        }
        let tree = self.read()?;
        let mut seen = 0u64;
        tree.visit_range(lo, hi, reverse, &mut |k, v| {
            visit(k, &v.to_be_bytes())?;
            seen += 1;
            Ok::<bool, BenchError>(seen < limit)
        })?;
        Ok(seen)
    }

    fn count(&self, lo: u64, hi: u64) -> Result<u64> {
        Ok(self.read()?.count(lo, hi))
    }

    fn sample_visit(
        &self,
        lo: u64,
        hi: u64,
        k: usize,
        rng: &mut dyn rand::RngCore,
        visit: &mut dyn FnMut(u64, &[u8]) -> Result<()>,
    ) -> Result<()> {
        self.read()?.sample_range(lo, hi, k, rng, |key, value| {
            visit(key, &value.to_be_bytes())
        })?;
        Ok(())
    }

    /// Nothing to do: the tree has no files.
    fn checkpoint(&self) -> Result<()> {
        Ok(())
    }

    fn height(&self) -> Option<u32> {
        self.read().ok().map(|t| t.height())
    }

    fn close(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests;
