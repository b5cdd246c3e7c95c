//! The B+-tree as an index family (see `index::family`): its page file is `data.pages`; it takes any key and
//! value types and pages up to 64 KiB, and has no options of its own.

use super::BTree;
use super::node::Layout;
use crate::error::Result;
use crate::index::OrderedIndex;
use crate::index::family::{Capabilities, IndexContext, IndexFamily};
use crate::types::TypeKind;

/// The B+-tree family.
#[derive(Debug, Clone, Copy, Default)]
pub struct BTreeFamily;

/// The B+-tree has no options (the page size and the types are the database's).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BTreeOptions {}

impl std::fmt::Display for BTreeOptions {
    fn fmt(&self, _f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        Ok(())
    }
}

impl IndexFamily for BTreeFamily {
    type Options = BTreeOptions;

    fn name(&self) -> &'static str {
        "btree"
    }

    fn summary(&self) -> &'static str {
        "B+-tree with subtree counts: range counts and uniform range sampling in O(log n), bulk loads"
    }

    fn check(
        &self,
        key: TypeKind,
        value: TypeKind,
        page_size: usize,
        _: &BTreeOptions,
    ) -> Result<()> {
        crate::storage::page::validate_page_size(page_size)?;
        Layout::try_new(page_size, key.fixed_width(), value.fixed_width()).map(drop)
    }

    fn capabilities(&self, _: &BTreeOptions) -> Capabilities {
        Capabilities {
            count: true,
            sample: true,
            weighted: false,
            merge: false,
            bulk_load: true,
            cheap_len: true,
            ordered: true,
            snapshots: false,
        }
    }

    fn create(&self, ctx: &IndexContext<'_>, _: &BTreeOptions) -> Result<Box<dyn OrderedIndex>> {
        instantiate(ctx, true)
    }

    fn open(&self, ctx: &IndexContext<'_>, _: &BTreeOptions) -> Result<Box<dyn OrderedIndex>> {
        instantiate(ctx, false)
    }
}

/// Creates (`create`) or opens the tree in the database's page file.
fn instantiate(ctx: &IndexContext<'_>, create: bool) -> Result<Box<dyn OrderedIndex>> {
    let file = ctx.page_file(create)?;
    let (key_width, value_width) = (ctx.key.fixed_width(), ctx.value.fixed_width());
    let open = if create { BTree::create } else { BTree::open };
    Ok(Box::new(open(
        file,
        key_width,
        value_width,
        ctx.options.cache_bytes,
        ctx.stats.clone(),
    )?))
}
