//! Write paths: upsert with splits, lazy delete, and bulk load. All run under the tree's write lock.
//!
//! Every modification goes through `BufferPool::write_cow`, which relocates a page of the last checkpoint
//! before its first change; a relocation changes the child pointer in the parent, which is then modified
//! (and relocated) in turn. Counts change along the whole path whenever the record count changes.

use super::node::ValueRef;
use super::read::{read_inner, read_leaf};
use super::{BTree, TreeState, overflow};
use crate::error::{Error, Result};
use crate::storage::PageId;
use crate::storage::page::page_epoch;

/// A node split into two: the right sibling is to be inserted after the left one in the parent.
struct Split {
    sep: Vec<u8>,
    right: PageId,
    left_count: u64,
    right_count: u64,
}

/// Descends to the leaf for `key`, recording the path in `st.path`. Returns the leaf id and whether the path
/// is the rightmost one (every child taken is its parent's last).
fn descend(tree: &BTree, st: &mut TreeState, key: &[u8]) -> Result<(PageId, bool)> {
    st.path.clear();
    let mut id = st.root;
    let mut rightmost = true;
    for level in (1..st.height).rev() {
        let p = read_inner(tree, id, level)?;
        let i = tree.layout.inner_search(&p, key);
        rightmost &= i + 1 == tree.layout.inner_len(&p);
        st.path.push((id, i));
        id = tree.layout.inner_child(&p, i);
    }
    Ok((id, rightmost))
}

pub(super) fn insert(tree: &BTree, st: &mut TreeState, key: &[u8], value: &[u8]) -> Result<()> {
    let layout = tree.layout;
    let (leaf_id, rightmost) = descend(tree, st, key)?;
    drop(read_leaf(tree, leaf_id)?);

    let vref = if layout.value_fits_inline(key.len(), value.len()) {
        ValueRef::Inline(value)
    } else {
        ValueRef::Overflow {
            len: value.len() as u32,
            first_page: overflow::write_chain(tree, value)?,
        }
    };

    let mut leaf = tree.pool.write_cow(leaf_id)?;
    let new_leaf_id = leaf.id();
    let mut delta = 0i64;
    let mut old_chain = None;
    let pos = match layout.leaf_search(&leaf, key) {
        Ok(i) => {
            if let ValueRef::Overflow { len, first_page } = layout.leaf_value(&leaf, i) {
                old_chain = Some((first_page, len));
            }
            if layout.leaf_can_replace(&leaf, i, vref) {
                layout.leaf_replace(&mut leaf, i, vref);
                None
            } else {
                layout.leaf_remove(&mut leaf, i);
                Some(i)
            }
        }
        Err(i) => {
            delta = 1;
            Some(i)
        }
    };
    let mut split = None;
    if let Some(i) = pos {
        if layout.leaf_has_room(&leaf, key.len(), vref) {
            layout.leaf_insert(&mut leaf, i, key, vref);
        } else {
            let mut right = tree.pool.allocate()?;
            if rightmost && i == layout.leaf_len(&leaf) {
                // Appending past the last key: keep the left leaf full (sequential loads fill pages).
                layout.leaf_init(&mut right);
                layout.leaf_insert(&mut right, 0, key, vref);
            } else {
                let nleft = layout.leaf_split(&mut leaf, &mut right);
                if i <= nleft {
                    layout.leaf_insert(&mut leaf, i, key, vref);
                } else {
                    layout.leaf_insert(&mut right, i - nleft, key, vref);
                }
            }
            split = Some(Split {
                sep: layout.leaf_key(&right, 0).to_vec(),
                right: right.id(),
                left_count: layout.leaf_len(&leaf) as u64,
                right_count: layout.leaf_len(&right) as u64,
            });
        }
    }
    drop(leaf);
    if let Some((first, len)) = old_chain {
        overflow::free_chain(tree, first, len)?;
    }
    st.len = st.len.wrapping_add_signed(delta);
    propagate(tree, st, new_leaf_id, split, delta, 1, rightmost)
}

/// Walks `st.path` bottom-up from `level`, pointing each parent at its (possibly relocated) child, adjusting
/// counts by `delta`, and inserting split siblings (splitting parents as needed, and growing a new root).
fn propagate(
    tree: &BTree,
    st: &mut TreeState,
    mut child: PageId,
    mut split: Option<Split>,
    delta: i64,
    mut level: u32,
    rightmost: bool,
) -> Result<()> {
    let layout = tree.layout;
    while let Some((pid, i)) = st.path.pop() {
        {
            let p = read_inner(tree, pid, level)?;
            if split.is_none() && delta == 0 && layout.inner_child(&p, i) == child {
                // Nothing above this point changes.
                st.path.clear();
                return Ok(());
            }
        }
        let mut p = tree.pool.write_cow(pid)?;
        layout.inner_set_child(&mut p, i, child);
        match split.take() {
            None => {
                let c = layout.inner_count(&p, i);
                layout.inner_set_count(&mut p, i, c.wrapping_add_signed(delta));
            }
            Some(s) => {
                layout.inner_set_count(&mut p, i, s.left_count);
                if layout.inner_has_room(&p, s.sep.len()) {
                    layout.inner_insert(&mut p, i + 1, &s.sep, s.right, s.right_count);
                } else {
                    let mut r = tree.pool.allocate()?;
                    let promoted = if rightmost && i + 1 == layout.inner_len(&p) {
                        layout.inner_init(&mut r, level as u8, s.right, s.right_count);
                        s.sep
                    } else {
                        let promoted = layout.inner_split(&mut p, &mut r);
                        let nleft = layout.inner_len(&p);
                        if i < nleft {
                            layout.inner_insert(&mut p, i + 1, &s.sep, s.right, s.right_count);
                        } else {
                            layout.inner_insert(
                                &mut r,
                                i + 1 - nleft,
                                &s.sep,
                                s.right,
                                s.right_count,
                            );
                        }
                        promoted
                    };
                    split = Some(Split {
                        sep: promoted,
                        right: r.id(),
                        left_count: layout.inner_total(&p),
                        right_count: layout.inner_total(&r),
                    });
                }
            }
        }
        child = p.id();
        level += 1;
    }
    st.root = child;
    if let Some(s) = split {
        let mut r = tree.pool.allocate()?;
        layout.inner_init(&mut r, st.height as u8, child, s.left_count);
        layout.inner_insert(&mut r, 1, &s.sep, s.right, s.right_count);
        st.root = r.id();
        st.height += 1;
    }
    Ok(())
}

/// Removes `key`; returns whether it was present. Lazy policy: a node is freed only when it becomes empty.
pub(super) fn delete(tree: &BTree, st: &mut TreeState, key: &[u8]) -> Result<bool> {
    let layout = tree.layout;
    let (leaf_id, _) = descend(tree, st, key)?;
    let (i, last_entry, chain, epoch) = {
        let leaf = read_leaf(tree, leaf_id)?;
        let Ok(i) = layout.leaf_search(&leaf, key) else {
            st.path.clear();
            return Ok(false);
        };
        let chain = match layout.leaf_value(&leaf, i) {
            ValueRef::Overflow { len, first_page } => Some((first_page, len)),
            ValueRef::Inline(_) => None,
        };
        (i, layout.leaf_len(&leaf) == 1, chain, page_epoch(&leaf))
    };
    if let Some((first, len)) = chain {
        overflow::free_chain(tree, first, len)?;
    }
    st.len -= 1;
    if last_entry && st.height > 1 {
        tree.pool.free(leaf_id, epoch);
        remove_child_upward(tree, st)?;
    } else {
        let mut leaf = tree.pool.write_cow(leaf_id)?;
        layout.leaf_remove(&mut leaf, i);
        let id = leaf.id();
        drop(leaf);
        propagate(tree, st, id, None, -1, 1, false)?;
    }
    collapse_root(tree, st)?;
    Ok(true)
}

/// The child at the bottom of `st.path` was freed: remove it from its parent, freeing parents that become
/// empty, then fix pointers and counts above.
fn remove_child_upward(tree: &BTree, st: &mut TreeState) -> Result<()> {
    let layout = tree.layout;
    let mut level = 1;
    while let Some((pid, i)) = st.path.pop() {
        let (only_child, epoch) = {
            let p = read_inner(tree, pid, level)?;
            (layout.inner_len(&p) == 1, page_epoch(&p))
        };
        if only_child {
            tree.pool.free(pid, epoch);
            level += 1;
            continue;
        }
        let mut p = tree.pool.write_cow(pid)?;
        layout.inner_remove(&mut p, i);
        let id = p.id();
        drop(p);
        return propagate(tree, st, id, None, -1, level + 1, false);
    }
    // Every node on the path was freed: the tree is empty.
    let mut leaf = tree.pool.allocate()?;
    layout.leaf_init(&mut leaf);
    st.root = leaf.id();
    st.height = 1;
    Ok(())
}

/// While the root is an inner node with a single child, that child becomes the root.
fn collapse_root(tree: &BTree, st: &mut TreeState) -> Result<()> {
    while st.height > 1 {
        let (child, epoch) = {
            let p = read_inner(tree, st.root, st.height - 1)?;
            if tree.layout.inner_len(&p) != 1 {
                break;
            }
            (tree.layout.inner_child(&p, 0), page_epoch(&p))
        };
        tree.pool.free(st.root, epoch);
        st.root = child;
        st.height -= 1;
    }
    Ok(())
}

/// Builds a tree bottom-up from sorted records into the empty tree `st`; returns the number of records.
pub(super) fn bulk_load(
    tree: &BTree,
    st: &mut TreeState,
    records: &mut dyn Iterator<Item = Result<(Vec<u8>, Vec<u8>)>>,
) -> Result<u64> {
    let mut allocated = Vec::new();
    match build(tree, records, &mut allocated) {
        Ok((root, height, len)) => {
            let epoch = page_epoch(&tree.pool.read(st.root)?);
            tree.pool.free(st.root, epoch);
            st.root = root;
            st.height = height;
            st.len = len;
            Ok(len)
        }
        Err(e) => {
            let epoch = tree.pool.epoch();
            // Pages of the working epoch: freeing them writes nothing.
            for id in allocated {
                tree.pool.free(id, epoch);
            }
            Err(e)
        }
    }
}

/// (first key, page, record count) of a finished node.
type Built = (Vec<u8>, PageId, u64);

fn build(
    tree: &BTree,
    records: &mut dyn Iterator<Item = Result<(Vec<u8>, Vec<u8>)>>,
    allocated: &mut Vec<PageId>,
) -> Result<(PageId, u32, u64)> {
    let layout = tree.layout;
    let mut nodes: Vec<Built> = Vec::new();
    let mut leaf = tree.pool.allocate()?;
    allocated.push(leaf.id());
    layout.leaf_init(&mut leaf);
    let mut first_key: Option<Vec<u8>> = None;
    let mut prev: Option<Vec<u8>> = None;
    let mut total = 0u64;
    for record in records {
        let (key, value) = record?;
        if prev.as_deref().is_some_and(|p| p >= key.as_slice()) {
            return Err(Error::invalid(
                "bulk load input is not in strictly increasing key order",
            ));
        }
        let vref = if layout.value_fits_inline(key.len(), value.len()) {
            ValueRef::Inline(&value)
        } else {
            let first_page = overflow::write_chain(tree, &value)?;
            allocated.extend(overflow::chain_pages(tree, first_page, value.len() as u32)?);
            ValueRef::Overflow {
                len: value.len() as u32,
                first_page,
            }
        };
        if !layout.leaf_has_room(&leaf, key.len(), vref) {
            let n = layout.leaf_len(&leaf) as u64;
            nodes.push((first_key.take().expect("non-empty leaf"), leaf.id(), n));
            drop(leaf);
            leaf = tree.pool.allocate()?;
            allocated.push(leaf.id());
            layout.leaf_init(&mut leaf);
        }
        let at = layout.leaf_len(&leaf);
        layout.leaf_insert(&mut leaf, at, &key, vref);
        if first_key.is_none() {
            first_key = Some(key.clone());
        }
        total += 1;
        prev = Some(key);
    }
    let n = layout.leaf_len(&leaf) as u64;
    nodes.push((first_key.unwrap_or_default(), leaf.id(), n));
    drop(leaf);

    let mut height = 1u32;
    while nodes.len() > 1 {
        let mut parents: Vec<Built> = Vec::new();
        let mut current: Option<(crate::storage::PageWriteGuard<'_>, Vec<u8>)> = None;
        for (key, id, count) in nodes {
            match &mut current {
                Some((p, _)) if layout.inner_has_room(p, key.len()) => {
                    let at = layout.inner_len(p);
                    layout.inner_insert(p, at, &key, id, count);
                }
                _ => {
                    if let Some((p, first)) = current.take() {
                        parents.push((first, p.id(), layout.inner_total(&p)));
                    }
                    let mut p = tree.pool.allocate()?;
                    allocated.push(p.id());
                    layout.inner_init(&mut p, height as u8, id, count);
                    current = Some((p, key));
                }
            }
        }
        if let Some((p, first)) = current.take() {
            parents.push((first, p.id(), layout.inner_total(&p)));
        }
        nodes = parents;
        height += 1;
    }
    let (_, root, _) = nodes.pop().expect("at least one node");
    Ok((root, height, total))
}
