//! Overflow chains: values too large to store in a leaf, split over pages linked by their `next` field.
//! A chain is written once and never modified; replacing or deleting the value frees the whole chain.

use super::BTree;
use crate::error::Result;
use crate::storage::PageId;
use crate::storage::page::{PageType, page_epoch, page_type};

/// Writes `data` (non-empty) to a new chain and returns its first page.
pub(super) fn write_chain(tree: &BTree, data: &[u8]) -> Result<PageId> {
    debug_assert!(!data.is_empty());
    let cap = tree.layout.overflow_capacity();
    // Written back to front so that every page knows its successor when it is written.
    let mut next = 0;
    let chunks: Vec<&[u8]> = data.chunks(cap).collect();
    for chunk in chunks.into_iter().rev() {
        let mut page = tree.pool.allocate()?;
        tree.layout.overflow_init(&mut page, next, chunk);
        next = page.id();
    }
    Ok(next)
}

/// Visits the pages of the chain of a `len`-byte value in order, passing each page's data and epoch.
fn walk_chain(
    tree: &BTree,
    first: PageId,
    len: u32,
    visit: &mut dyn FnMut(PageId, &[u8], u64),
) -> Result<()> {
    let mut seen = 0usize;
    let mut id = first;
    while seen < len as usize {
        if id == 0 {
            return Err(tree.corrupt(
                first,
                format!("overflow chain ends after {seen} of {len} bytes"),
            ));
        }
        let page = tree.pool.read(id)?;
        if page_type(&page) != PageType::Overflow as u8 {
            return Err(tree.corrupt(id, "expected an overflow page"));
        }
        let data = tree.layout.overflow_data(&page);
        if data.is_empty() || seen + data.len() > len as usize {
            return Err(tree.corrupt(
                id,
                format!("overflow chain longer than its value's {len} bytes"),
            ));
        }
        seen += data.len();
        let next = tree.layout.overflow_next(&page);
        visit(id, data, page_epoch(&page));
        id = next;
    }
    Ok(())
}

/// Reads a whole value into `out`.
pub(super) fn read_chain(tree: &BTree, first: PageId, len: u32, out: &mut Vec<u8>) -> Result<()> {
    out.clear();
    out.reserve(len as usize);
    walk_chain(tree, first, len, &mut |_, data, _| {
        out.extend_from_slice(data)
    })
}

/// Frees every page of a chain.
pub(super) fn free_chain(tree: &BTree, first: PageId, len: u32) -> Result<()> {
    let mut pages = Vec::new();
    walk_chain(tree, first, len, &mut |id, _, epoch| {
        pages.push((id, epoch))
    })?;
    for (id, epoch) in pages {
        tree.pool.free(id, epoch);
    }
    Ok(())
}

/// The pages of a chain (for integrity checks).
pub(super) fn chain_pages(tree: &BTree, first: PageId, len: u32) -> Result<Vec<PageId>> {
    let mut pages = Vec::new();
    walk_chain(tree, first, len, &mut |id, _, _| pages.push(id))?;
    Ok(pages)
}
