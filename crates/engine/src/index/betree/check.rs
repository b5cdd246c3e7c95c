//! Integrity check: visits every reachable node through the buffer pool (so every page checksum is verified
//! on the way in, and every node is fully decoded — lengths, key order, buffer shape) and verifies what a
//! single page cannot show: levels step down by one; pivots lie inside the node's key interval; every
//! buffered message lies inside it too (it was routed to this subtree); leaf records lie inside their
//! leaf's interval and no leaf below the root is empty; a child's newest MSN is not newer than its
//! parent's; the records in leaves match the root record's count; and every page of the file is either
//! reachable exactly once or accounted for by the page file's free lists.

use super::node::Node;
use super::tree::BeTreeCore;
use crate::error::{Error, Result};
use crate::index::{CheckReport, Direction, KeyRange};
use crate::storage::PageId;
use std::collections::HashSet;

struct Checker<'a> {
    core: &'a BeTreeCore,
    seen: HashSet<PageId>,
    leaf_records: u64,
}

fn outside(key: &[u8], lo: Option<&[u8]>, hi: Option<&[u8]>) -> bool {
    lo.is_some_and(|lo| key < lo) || hi.is_some_and(|hi| key >= hi)
}

impl Checker<'_> {
    fn corrupt(&self, id: PageId, detail: String) -> Error {
        let file = self.core.pool().file();
        Error::corruption(
            file.path(),
            id * file.page_size() as u64,
            format!("Bε-tree node {id}: {detail}"),
        )
    }

    /// Verifies the subtree at `id` (at `level`), whose keys lie in `[lo, hi)` and whose newest MSN may
    /// not exceed `msn_bound`.
    fn visit(
        &mut self,
        id: PageId,
        level: u16,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
        msn_bound: u64,
        is_root: bool,
    ) -> Result<()> {
        if !self.seen.insert(id) {
            return Err(self.corrupt(id, "page is referenced more than once".into()));
        }
        let (node, _) = self.core.read_node(id, level)?;
        if node.max_msn() > msn_bound {
            return Err(self.corrupt(
                id,
                format!(
                    "holds MSN {} but its parent's newest is {msn_bound}",
                    node.max_msn()
                ),
            ));
        }
        match node {
            Node::Leaf(leaf) => {
                if leaf.records.is_empty() && !is_root {
                    return Err(self.corrupt(id, "empty leaf below the root".into()));
                }
                if let Some(i) = leaf.records.iter().position(|(k, _)| outside(k, lo, hi)) {
                    return Err(self.corrupt(
                        id,
                        format!("record {i} lies outside the leaf's key interval"),
                    ));
                }
                self.leaf_records += leaf.records.len() as u64;
            }
            Node::Inner(inner) => {
                if let Some(j) = inner.pivots.iter().position(|p| outside(p, lo, hi)) {
                    return Err(self.corrupt(
                        id,
                        format!("pivot {j} lies outside the node's key interval"),
                    ));
                }
                if let Some(i) = inner
                    .buffer
                    .messages()
                    .iter()
                    .position(|m| outside(&m.key, lo, hi))
                {
                    return Err(self.corrupt(
                        id,
                        format!("buffered message {i} lies outside the node's key interval"),
                    ));
                }
                let n = inner.children.len();
                for (i, &child) in inner.children.iter().enumerate() {
                    let clo = if i == 0 {
                        lo
                    } else {
                        Some(inner.pivots[i - 1].as_slice())
                    };
                    let chi = if i + 1 == n {
                        hi
                    } else {
                        Some(inner.pivots[i].as_slice())
                    };
                    self.visit(child, inner.level - 1, clo, chi, inner.max_msn, false)?;
                }
            }
        }
        Ok(())
    }
}

/// Checks the tree of `core`, whose checkpointed root record says what `core.state()` says.
pub(super) fn check(core: &BeTreeCore) -> Result<CheckReport> {
    let mut checker = Checker {
        core,
        seen: HashSet::new(),
        leaf_records: 0,
    };
    let msn_bound = core.next_msn().saturating_sub(1);
    checker.visit(core.root(), core.height() - 1, None, None, msn_bound, true)?;
    let file = core.pool().file();
    if checker.leaf_records != core.leaf_records() {
        return Err(Error::corruption(
            file.path(),
            0,
            format!(
                "leaves hold {} records but the root record says {}",
                checker.leaf_records,
                core.leaf_records()
            ),
        ));
    }
    let free_pages = crate::storage::check_page_accounting(file, &checker.seen, |id, d| {
        checker.corrupt(id, d.to_string())
    })?;
    // Live records: the leaves with every buffered message applied.
    let records = core.scan(
        &KeyRange::all(),
        Direction::Forward,
        usize::MAX,
        &mut |_, _| Ok(true),
    )? as u64;
    Ok(CheckReport {
        pages_checked: checker.seen.len() as u64,
        records,
        height: core.height() as u32,
        free_pages,
        ..CheckReport::default()
    })
}
