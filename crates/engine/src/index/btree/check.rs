//! Integrity check: visits every reachable page (so every checksum is verified on the way in) and verifies
//! levels, key order across nodes, separator bounds, subtree counts, overflow chains, and that every page of
//! the file is either reachable exactly once or accounted for by the page file's free lists.

use super::node::ValueRef;
use super::read::{read_inner, read_leaf};
use super::{BTree, TreeState, overflow};
use crate::error::{Error, Result};
use crate::index::CheckReport;
use crate::storage::PageId;
use std::collections::HashSet;

struct Checker<'a> {
    tree: &'a BTree,
    seen: HashSet<PageId>,
}

impl Checker<'_> {
    fn mark(&mut self, id: PageId) -> Result<()> {
        if !self.seen.insert(id) {
            return Err(self.tree.corrupt(id, "page is referenced more than once"));
        }
        Ok(())
    }

    /// Verifies the subtree at `id` (at `level`), whose keys must lie in [lo, hi); returns its record count.
    fn visit(
        &mut self,
        id: PageId,
        level: u32,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
        is_root: bool,
    ) -> Result<u64> {
        self.mark(id)?;
        let layout = self.tree.layout;
        if level == 0 {
            let leaf = read_leaf(self.tree, id)?;
            let n = layout.leaf_len(&leaf);
            if n == 0 && !is_root {
                return Err(self.tree.corrupt(id, "empty leaf below the root"));
            }
            let mut chains = Vec::new();
            for i in 0..n {
                let key = layout.leaf_key(&leaf, i);
                if lo.is_some_and(|lo| key < lo) || hi.is_some_and(|hi| key >= hi) {
                    return Err(self.tree.corrupt(
                        id,
                        format!("leaf entry {i} lies outside its parent's key range"),
                    ));
                }
                if let ValueRef::Overflow { len, first_page } = layout.leaf_value(&leaf, i) {
                    chains.push((first_page, len));
                }
            }
            drop(leaf);
            for (first, len) in chains {
                for page in overflow::chain_pages(self.tree, first, len)? {
                    self.mark(page)?;
                }
            }
            return Ok(n as u64);
        }
        let (children, keys) = {
            let p = read_inner(self.tree, id, level)?;
            let n = layout.inner_len(&p);
            let children: Vec<(PageId, u64)> = (0..n)
                .map(|i| (layout.inner_child(&p, i), layout.inner_count(&p, i)))
                .collect();
            let keys: Vec<Vec<u8>> = (1..n).map(|i| layout.inner_key(&p, i).to_vec()).collect();
            (children, keys)
        };
        for (j, key) in keys.iter().enumerate() {
            if lo.is_some_and(|lo| key.as_slice() < lo) || hi.is_some_and(|hi| key.as_slice() >= hi)
            {
                return Err(self.tree.corrupt(
                    id,
                    format!("separator {} lies outside the node's key range", j + 1),
                ));
            }
        }
        let mut total = 0u64;
        for (i, &(child, count)) in children.iter().enumerate() {
            let clo = if i == 0 {
                lo
            } else {
                Some(keys[i - 1].as_slice())
            };
            let chi = if i + 1 == children.len() {
                hi
            } else {
                Some(keys[i].as_slice())
            };
            let actual = self.visit(child, level - 1, clo, chi, false)?;
            if actual != count {
                return Err(self.tree.corrupt(
                    id,
                    format!(
                        "child {i} (page {child}) holds {actual} records but its count says {count}"
                    ),
                ));
            }
            total += actual;
        }
        Ok(total)
    }
}

pub(super) fn check(tree: &BTree, st: &TreeState) -> Result<CheckReport> {
    let mut checker = Checker {
        tree,
        seen: HashSet::new(),
    };
    let records = checker.visit(st.root, st.height - 1, None, None, true)?;
    let file = tree.pool.file();
    if records != st.len {
        return Err(Error::corruption(
            file.path(),
            0,
            format!(
                "tree holds {records} records but its root record says {}",
                st.len
            ),
        ));
    }
    let free_pages =
        crate::storage::check_page_accounting(file, &checker.seen, |id, d| tree.corrupt(id, d))?;
    Ok(CheckReport {
        pages_checked: checker.seen.len() as u64,
        records,
        height: st.height,
        free_pages,
        ..CheckReport::default()
    })
}
