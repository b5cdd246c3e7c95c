//! Read paths: point lookups, ordered scans in both directions, ranks, and Olken sampling.
//! All run under the tree's read lock and never write.

use super::node::ValueRef;
use super::{BTree, TreeState, overflow};
use crate::error::Result;
use crate::index::{Direction, KeyRange, RecordVisitor};
use crate::storage::page::{PageType, page_type};
use crate::storage::{PageId, PageReadGuard};
use rand::Rng;
use std::ops::Bound;

/// Reads an inner node at `level` (≥ 1), checking that it is one.
pub(super) fn read_inner(tree: &BTree, id: PageId, level: u32) -> Result<PageReadGuard<'_>> {
    let p = tree.pool.read(id)?;
    check_inner(tree, id, &p, level)?;
    Ok(p)
}

/// `Corruption` unless page `id` (its bytes `p`) is an inner node at `level`.
pub(super) fn check_inner(tree: &BTree, id: PageId, p: &[u8], level: u32) -> Result<()> {
    if page_type(p) != PageType::BTreeInner as u8 || tree.layout.inner_level(p) as u32 != level {
        return Err(tree.corrupt(
            id,
            format!(
                "expected an inner node at level {level}, found page type {}",
                page_type(p)
            ),
        ));
    }
    Ok(())
}

/// Reads a leaf, checking that it is one.
pub(super) fn read_leaf(tree: &BTree, id: PageId) -> Result<PageReadGuard<'_>> {
    let p = tree.pool.read(id)?;
    check_leaf(tree, id, &p)?;
    Ok(p)
}

/// `Corruption` unless page `id` (its bytes `p`) is a leaf.
pub(super) fn check_leaf(tree: &BTree, id: PageId, p: &[u8]) -> Result<()> {
    if page_type(p) != PageType::BTreeLeaf as u8 {
        return Err(tree.corrupt(
            id,
            format!("expected a leaf, found page type {}", page_type(p)),
        ));
    }
    Ok(())
}

/// Copies a value (inline or from its overflow chain) into `out`.
pub(super) fn load_value(tree: &BTree, value: ValueRef<'_>, out: &mut Vec<u8>) -> Result<()> {
    out.clear();
    match value {
        ValueRef::Inline(b) => {
            out.extend_from_slice(b);
            Ok(())
        }
        ValueRef::Overflow { len, first_page } => overflow::read_chain(tree, first_page, len, out),
    }
}

/// The leaf whose key range holds `key`.
fn find_leaf(tree: &BTree, st: &TreeState, key: &[u8]) -> Result<PageId> {
    let mut id = st.root;
    for level in (1..st.height).rev() {
        let p = read_inner(tree, id, level)?;
        id = tree
            .layout
            .inner_child(&p, tree.layout.inner_search(&p, key));
    }
    Ok(id)
}

pub(super) fn get(tree: &BTree, st: &TreeState, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
    let leaf_id = find_leaf(tree, st, key)?;
    let leaf = read_leaf(tree, leaf_id)?;
    match tree.layout.leaf_search(&leaf, key) {
        Ok(i) => {
            let v = tree.layout.leaf_value(&leaf, i);
            if let ValueRef::Overflow { len, first_page } = v {
                drop(leaf);
                overflow::read_chain(tree, first_page, len, out)?;
            } else {
                load_value(tree, v, out)?;
            }
            Ok(true)
        }
        Err(_) => Ok(false),
    }
}

/// A position in the tree: the inner nodes from the root down with the child taken in each, the leaf, and
/// an entry index in the leaf (which may be one past either end, meaning "move to the neighbour leaf").
struct Cursor {
    stack: Vec<(PageId, usize)>,
    leaf: PageId,
    idx: isize,
}

impl Cursor {
    /// Positions on the first entry ≥ (or >, for `Excluded`) `lo`.
    fn seek_first(tree: &BTree, st: &TreeState, lo: Bound<&[u8]>) -> Result<Cursor> {
        let mut stack = Vec::with_capacity(st.height as usize);
        let mut id = st.root;
        for level in (1..st.height).rev() {
            let p = read_inner(tree, id, level)?;
            let i = match lo {
                Bound::Unbounded => 0,
                Bound::Included(k) | Bound::Excluded(k) => tree.layout.inner_search(&p, k),
            };
            stack.push((id, i));
            id = tree.layout.inner_child(&p, i);
        }
        let leaf = read_leaf(tree, id)?;
        let idx = match lo {
            Bound::Unbounded => 0,
            Bound::Included(k) => match tree.layout.leaf_search(&leaf, k) {
                Ok(i) | Err(i) => i,
            },
            Bound::Excluded(k) => match tree.layout.leaf_search(&leaf, k) {
                Ok(i) => i + 1,
                Err(i) => i,
            },
        };
        Ok(Cursor {
            stack,
            leaf: id,
            idx: idx as isize,
        })
    }

    /// Positions on the last entry ≤ (or <, for `Excluded`) `hi`.
    fn seek_last(tree: &BTree, st: &TreeState, hi: Bound<&[u8]>) -> Result<Cursor> {
        let mut stack = Vec::with_capacity(st.height as usize);
        let mut id = st.root;
        for level in (1..st.height).rev() {
            let p = read_inner(tree, id, level)?;
            let i = match hi {
                Bound::Unbounded => tree.layout.inner_len(&p) - 1,
                Bound::Included(k) | Bound::Excluded(k) => tree.layout.inner_search(&p, k),
            };
            stack.push((id, i));
            id = tree.layout.inner_child(&p, i);
        }
        let leaf = read_leaf(tree, id)?;
        let n = tree.layout.leaf_len(&leaf) as isize;
        let idx = match hi {
            Bound::Unbounded => n - 1,
            Bound::Included(k) => match tree.layout.leaf_search(&leaf, k) {
                Ok(i) => i as isize,
                Err(i) => i as isize - 1,
            },
            Bound::Excluded(k) => match tree.layout.leaf_search(&leaf, k) {
                Ok(i) | Err(i) => i as isize - 1,
            },
        };
        Ok(Cursor {
            stack,
            leaf: id,
            idx,
        })
    }

    /// Moves to the first entry of the next leaf. Returns false at the end of the tree.
    fn next_leaf(&mut self, tree: &BTree, st: &TreeState) -> Result<bool> {
        let mut level = 1u32;
        loop {
            let Some(&(id, i)) = self.stack.last() else {
                return Ok(false);
            };
            let p = read_inner(tree, id, level)?;
            if i + 1 < tree.layout.inner_len(&p) {
                let top = self.stack.last_mut().expect("non-empty");
                top.1 = i + 1;
                let mut child = tree.layout.inner_child(&p, i + 1);
                drop(p);
                while level > 1 {
                    level -= 1;
                    self.stack.push((child, 0));
                    child = tree.layout.inner_child(&read_inner(tree, child, level)?, 0);
                }
                self.leaf = child;
                self.idx = 0;
                return Ok(true);
            }
            self.stack.pop();
            level += 1;
            debug_assert!(level <= st.height);
        }
    }

    /// Moves to the last entry of the previous leaf. Returns false at the start of the tree.
    fn prev_leaf(&mut self, tree: &BTree, st: &TreeState) -> Result<bool> {
        let mut level = 1u32;
        loop {
            let Some(&(id, i)) = self.stack.last() else {
                return Ok(false);
            };
            if i > 0 {
                let p = read_inner(tree, id, level)?;
                let top = self.stack.last_mut().expect("non-empty");
                top.1 = i - 1;
                let mut child = tree.layout.inner_child(&p, i - 1);
                drop(p);
                while level > 1 {
                    level -= 1;
                    let c = read_inner(tree, child, level)?;
                    let last = tree.layout.inner_len(&c) - 1;
                    self.stack.push((child, last));
                    child = tree.layout.inner_child(&c, last);
                }
                self.leaf = child;
                let leaf = read_leaf(tree, child)?;
                self.idx = tree.layout.leaf_len(&leaf) as isize - 1;
                return Ok(true);
            }
            self.stack.pop();
            level += 1;
            debug_assert!(level <= st.height);
        }
    }
}

pub(super) fn scan(
    tree: &BTree,
    st: &TreeState,
    range: &KeyRange,
    dir: Direction,
    max: usize,
    visit: &mut RecordVisitor<'_>,
) -> Result<usize> {
    if max == 0 {
        return Ok(0);
    }
    let mut overflow = Vec::new();
    let mut taken = 0usize;
    let (mut cur, step) = match dir {
        Direction::Forward => (Cursor::seek_first(tree, st, range.lo_ref())?, 1),
        Direction::Reverse => (Cursor::seek_last(tree, st, range.hi_ref())?, -1),
    };
    loop {
        let leaf = read_leaf(tree, cur.leaf)?;
        let n = tree.layout.leaf_len(&leaf) as isize;
        while (0..n).contains(&cur.idx) {
            let key = tree.layout.leaf_key(&leaf, cur.idx as usize);
            let inside = match dir {
                Direction::Forward => range.below_hi(key),
                Direction::Reverse => range.above_lo(key),
            };
            if !inside {
                return Ok(taken);
            }
            let more = match tree.layout.leaf_value(&leaf, cur.idx as usize) {
                ValueRef::Inline(v) => visit(key, v)?,
                chained => {
                    load_value(tree, chained, &mut overflow)?;
                    visit(key, &overflow)?
                }
            };
            cur.idx += step;
            taken += 1;
            if taken == max || !more {
                return Ok(taken);
            }
        }
        drop(leaf);
        let more = match dir {
            Direction::Forward => cur.next_leaf(tree, st)?,
            Direction::Reverse => cur.prev_leaf(tree, st)?,
        };
        if !more {
            return Ok(taken);
        }
    }
}

/// Number of records with a key < `key` (or ≤ `key` when `inclusive`).
fn rank(tree: &BTree, st: &TreeState, key: &[u8], inclusive: bool) -> Result<u64> {
    let mut id = st.root;
    let mut acc = 0u64;
    for level in (1..st.height).rev() {
        let p = read_inner(tree, id, level)?;
        let i = tree.layout.inner_search(&p, key);
        for j in 0..i {
            acc += tree.layout.inner_count(&p, j);
        }
        id = tree.layout.inner_child(&p, i);
    }
    let leaf = read_leaf(tree, id)?;
    Ok(acc
        + match tree.layout.leaf_search(&leaf, key) {
            Ok(i) => i as u64 + inclusive as u64,
            Err(i) => i as u64,
        })
}

/// The ranks `[a, b)` of the records in `range`.
pub(super) fn rank_range(tree: &BTree, st: &TreeState, range: &KeyRange) -> Result<(u64, u64)> {
    let a = match range.lo_ref() {
        Bound::Unbounded => 0,
        Bound::Included(k) => rank(tree, st, k, false)?,
        Bound::Excluded(k) => rank(tree, st, k, true)?,
    };
    let b = match range.hi_ref() {
        Bound::Unbounded => st.len,
        Bound::Included(k) => rank(tree, st, k, true)?,
        Bound::Excluded(k) => rank(tree, st, k, false)?,
    };
    Ok((a, b.max(a)))
}

/// The record of rank `r` (0-based, in key order): one root-to-leaf walk guided by the subtree counts.
/// Finds the record of rank `r` by one descent and hands it to `visit` (its value loaded into `value`, a
/// buffer reused across calls).
fn select(
    tree: &BTree,
    st: &TreeState,
    mut r: u64,
    value: &mut Vec<u8>,
    visit: &mut crate::index::SampleVisitor<'_>,
) -> Result<()> {
    let mut id = st.root;
    for level in (1..st.height).rev() {
        let p = read_inner(tree, id, level)?;
        let n = tree.layout.inner_len(&p);
        let mut i = 0;
        loop {
            let c = tree.layout.inner_count(&p, i);
            if r < c {
                break;
            }
            r -= c;
            i += 1;
            if i == n {
                return Err(tree.corrupt(id, "subtree counts are smaller than the record count"));
            }
        }
        id = tree.layout.inner_child(&p, i);
    }
    let leaf = read_leaf(tree, id)?;
    if r >= tree.layout.leaf_len(&leaf) as u64 {
        return Err(tree.corrupt(id, "leaf holds fewer records than its parent's count"));
    }
    value.clear();
    load_value(tree, tree.layout.leaf_value(&leaf, r as usize), value)?;
    visit(tree.layout.leaf_key(&leaf, r as usize), value)
}

/// Olken's method: `k` independent uniform draws of a rank in the range, each resolved by one descent.
pub(super) fn sample(
    tree: &BTree,
    st: &TreeState,
    range: &KeyRange,
    k: usize,
    rng: &mut dyn rand::RngCore,
    visit: &mut crate::index::SampleVisitor<'_>,
) -> Result<()> {
    let (a, b) = rank_range(tree, st, range)?;
    if a == b {
        return Ok(());
    }
    let mut value = Vec::new();
    for _ in 0..k {
        let r = rng.random_range(a..b);
        select(tree, st, r, &mut value, visit)?;
    }
    Ok(())
}
