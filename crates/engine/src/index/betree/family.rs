//! The Bε-tree as an index family (see `index::family`): its page file is `data.pages`; any key and value
//! types, pages up to 4 MiB; options ε and an optional merge operator by name ([`merge_ops`]).

use super::merge_ops;
use super::node::NodeFormat;
use super::tree::validate_epsilon;
use super::{BeTree, BeTreeOptions};
use crate::error::Result;
use crate::index::OrderedIndex;
use crate::index::family::{Capabilities, IndexContext, IndexFamily};
use crate::types::TypeKind;

/// The Bε-tree family.
#[derive(Debug, Clone, Copy, Default)]
pub struct BeTreeFamily;

impl std::fmt::Display for BeTreeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ε = {}", self.epsilon)?;
        match &self.merge_operator {
            Some(name) => write!(f, ", merge operator {name}"),
            None => write!(f, ", no merge operator"),
        }
    }
}

impl IndexFamily for BeTreeFamily {
    type Options = BeTreeOptions;

    fn name(&self) -> &'static str {
        "betree"
    }

    fn summary(&self) -> &'static str {
        "Bε-tree (fractal tree): buffered inner nodes for write-heavy data larger than memory, merges"
    }

    fn check(
        &self,
        _key: TypeKind,
        value: TypeKind,
        page_size: usize,
        options: &BeTreeOptions,
    ) -> Result<()> {
        crate::storage::page::validate_page_size(page_size)?;
        validate_epsilon(options.epsilon)?;
        if let Some(name) = &options.merge_operator {
            merge_ops::builtin(name, value)?;
        }
        Ok(())
    }

    fn capabilities(&self, options: &BeTreeOptions) -> Capabilities {
        Capabilities {
            count: false,
            sample: false,
            weighted: false,
            merge: options.merge_operator.is_some(),
            bulk_load: false,
            cheap_len: false,
            ordered: true,
            snapshots: false,
        }
    }

    fn create(
        &self,
        ctx: &IndexContext<'_>,
        options: &BeTreeOptions,
    ) -> Result<Box<dyn OrderedIndex>> {
        instantiate(ctx, options, true)
    }

    fn open(
        &self,
        ctx: &IndexContext<'_>,
        options: &BeTreeOptions,
    ) -> Result<Box<dyn OrderedIndex>> {
        instantiate(ctx, options, false)
    }
}

/// Creates (`create`, with the options' ε) or opens (ε from its root record) the tree in the database's
/// page file, with the options' merge operator.
fn instantiate(
    ctx: &IndexContext<'_>,
    options: &BeTreeOptions,
    create: bool,
) -> Result<Box<dyn OrderedIndex>> {
    let merge = options
        .merge_operator
        .as_deref()
        .map(|name| merge_ops::builtin(name, ctx.value))
        .transpose()?;
    let format = NodeFormat {
        key_width: ctx.key.fixed_width(),
        value_width: ctx.value.fixed_width(),
    };
    let file = ctx.page_file(create)?;
    let (cache, stats) = (ctx.options.cache_bytes, ctx.stats.clone());
    Ok(Box::new(if create {
        BeTree::create(file, format, merge, options.epsilon, cache, stats)?
    } else {
        BeTree::open(file, format, merge, cache, stats)?
    }))
}
