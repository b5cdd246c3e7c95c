//! The last step of a tree's integrity check: every page of a page file must be either reachable from the
//! tree exactly once (the caller collected `reachable`, refusing duplicates) or accounted for by the file's
//! free lists — never both, never neither (a leak).

use super::{PageFile, PageId};
use crate::error::{Error, Result};
use std::collections::HashSet;

/// Checks `reachable` against `file`'s free lists; the number of free pages. `corrupt(page, detail)` makes
/// the error for a page found wrong.
pub fn check_page_accounting(
    file: &PageFile,
    reachable: &HashSet<PageId>,
    corrupt: impl Fn(PageId, &str) -> Error,
) -> Result<u64> {
    let free = file.unreachable_pages();
    if let Some(&id) = free.iter().find(|id| reachable.contains(id)) {
        return Err(corrupt(id, "page is both reachable and free"));
    }
    // Pages 0 and 1 are the meta slots.
    let accounted = reachable.len() as u64 + free.len() as u64 + 2;
    if accounted != file.page_count() {
        let free: HashSet<PageId> = free.iter().copied().collect();
        let leaked =
            (2..file.page_count()).find(|id| !reachable.contains(id) && !free.contains(id));
        return Err(match leaked {
            Some(id) => corrupt(id, "page is neither reachable nor free (leaked)"),
            None => Error::corruption(
                file.path(),
                0,
                format!(
                    "{accounted} pages accounted for, file has {}",
                    file.page_count()
                ),
            ),
        });
    }
    Ok(free.len() as u64)
}
