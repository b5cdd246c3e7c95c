//! The structure of the weighted AB-tree: arenas of leaves and inner nodes, insert and delete with
//! bottom-up recomputation of the per-child counts and weight sums, and the invariant check (the module doc of
//! `weighted_abtree` states the invariants and costs).

use super::NAME;
use crate::error::BenchError;
use std::fmt;

/// Default fanout: most records of a leaf and most children of an inner node.
pub const FANOUT: usize = 64;
/// Smallest fanout [`WeightedBPlusTree::with_fanout`] accepts (smaller values are raised to it).
pub const MIN_FANOUT: usize = 4;

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
pub(super) struct Leaf {
    pub(super) keys: Vec<u64>,
    pub(super) values: Vec<u64>,
    pub(super) weights: Vec<f64>,
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
pub(super) struct Inner {
    pub(super) keys: Vec<u64>,
    pub(super) children: Vec<usize>,
    pub(super) counts: Vec<u64>,
    pub(super) sums: Vec<f64>,
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
pub(super) fn route(keys: &[u64], key: u64) -> usize {
    keys.partition_point(|&s| s <= key)
}

/// A uniform double in [0, 1) from one 64-bit word.
#[inline]
pub(super) fn unit<R: rand::RngCore + ?Sized>(rng: &mut R) -> f64 {
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// An in-memory weighted aggregate B+-tree (see the module doc).
#[derive(Debug, Clone)]
pub struct WeightedBPlusTree {
    pub(super) leaves: Vec<Leaf>,
    pub(super) inners: Vec<Inner>,
    pub(super) free_leaves: Vec<usize>,
    pub(super) free_inners: Vec<usize>,
    /// Leaf id when `height == 1`, inner id otherwise.
    pub(super) root: usize,
    /// Levels, root to leaves (1 = the root is a leaf).
    pub(super) height: u32,
    pub(super) len: u64,
    pub(super) fanout: usize,
    /// Scratch for the descent path of a write: (inner node, child index taken).
    pub(super) path: Vec<(usize, usize)>,
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
