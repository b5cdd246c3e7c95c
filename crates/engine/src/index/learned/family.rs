//! The learned index as an index family (see `index::family`): `u64` keys (8-byte big endian) and `u64`
//! or byte values; the checkpoint file `LEARNED` in the database directory; options [`LearnedOptions`].

use super::LearnedOptions;
use super::db_index::LearnedDbIndex;
use crate::error::{Error, Result};
use crate::index::OrderedIndex;
use crate::index::family::{Capabilities, IndexContext, IndexFamily};
use crate::types::TypeKind;

/// The learned family.
#[derive(Debug, Clone, Copy, Default)]
pub struct LearnedFamily;

impl std::fmt::Display for LearnedOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "groups of {} (split above {}), compaction above {} buffered ({} inline), merges of \
             neighbours with at most {} live records",
            self.group_size,
            self.max_group,
            self.compact_at,
            self.inline_compact_at,
            self.merge_threshold()
        )
    }
}

impl IndexFamily for LearnedFamily {
    type Options = LearnedOptions;

    fn name(&self) -> &'static str {
        "learned"
    }

    fn summary(&self) -> &'static str {
        "learned index (XIndex-style): an RMI over groups of model-searched sorted arrays with delta \
         buffers, two-phase compaction, lock-free reads and snapshot scans; in memory, u64 keys"
    }

    fn check(
        &self,
        key: TypeKind,
        _value: TypeKind,
        page_size: usize,
        options: &LearnedOptions,
    ) -> Result<()> {
        crate::storage::page::validate_page_size(page_size)?;
        if key != TypeKind::U64 {
            return Err(Error::invalid(format!(
                "a learned index needs u64 keys, not {} keys",
                key.name()
            )));
        }
        options.validate()
    }

    fn capabilities(&self, _: &LearnedOptions) -> Capabilities {
        Capabilities {
            cheap_len: true,
            ordered: true,
            snapshots: true,
            ..Capabilities::default()
        }
    }

    fn create(
        &self,
        ctx: &IndexContext<'_>,
        options: &LearnedOptions,
    ) -> Result<Box<dyn OrderedIndex>> {
        instantiate(ctx, options, true)
    }

    fn open(
        &self,
        ctx: &IndexContext<'_>,
        options: &LearnedOptions,
    ) -> Result<Box<dyn OrderedIndex>> {
        instantiate(ctx, options, false)
    }
}

fn instantiate(
    ctx: &IndexContext<'_>,
    options: &LearnedOptions,
    create: bool,
) -> Result<Box<dyn OrderedIndex>> {
    Ok(Box::new(LearnedDbIndex::instantiate(
        ctx.vfs.clone(),
        ctx.dir.to_path_buf(),
        ctx.stats.clone(),
        ctx.page_size,
        *options,
        create,
    )?))
}
