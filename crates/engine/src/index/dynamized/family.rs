//! The dynamized index as an index family (see `index::family`): `u64` keys and values, a state file
//! (`DYNSTATE`) and shard files in the database directory; options [`DynOptions`], runtime options from the
//! handle's `Options::dynamized`.

use super::core::InMemory;
use super::db_index::{DynFiles, DynamizedIndex, ShardStore};
use super::{DynOptions, IsamShard, RuntimeOptions, Shard, TieredStore, WirsShard};
use crate::error::{Error, Result};
use crate::index::OrderedIndex;
use crate::index::family::{Capabilities, IndexContext, IndexFamily};
use crate::types::TypeKind;
use std::sync::Arc;

/// The dynamized family.
#[derive(Debug, Clone, Copy, Default)]
pub struct DynamizedFamily;

impl std::fmt::Display for DynOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} layout, scale factor {}, buffer {}, {} deletes, max delete proportion {}, Bloom fpr {}, memory \
             budget ",
            self.layout.name(),
            self.growth(),
            self.buffer_capacity,
            self.delete_policy.name(),
            self.max_delete_proportion,
            self.bloom_fpr,
        )?;
        match self.memory_budget {
            0 => write!(f, "unlimited")?,
            b => write!(f, "{b} bytes")?,
        }
        if self.weighted {
            write!(f, ", weighted")?;
        }
        Ok(())
    }
}

/// Builds (`create`) or reopens the index with the shard kind and store its options call for: weighted
/// indexes keep alias-augmented trees (O(log n) weighted range draws), unweighted ones ISAM shards (uniform
/// draws in O(1)); with a memory budget, the levels beyond it hold disk shards.
fn instantiate(
    ctx: &IndexContext<'_>,
    opts: &DynOptions,
    create: bool,
) -> Result<Box<dyn OrderedIndex>> {
    let files = DynFiles {
        vfs: ctx.vfs.clone(),
        dir: ctx.dir.to_path_buf(),
        stats: ctx.stats.clone(),
        page_size: ctx.page_size,
        direct: ctx.direct_io,
    };
    let rt = ctx.options.dynamized.clone();
    fn make<S: Shard>(
        files: DynFiles,
        opts: DynOptions,
        rt: RuntimeOptions,
        store: Arc<dyn ShardStore<S>>,
        create: bool,
    ) -> Result<Box<dyn OrderedIndex>> {
        Ok(if create {
            Box::new(DynamizedIndex::create(files, opts, rt, store)?)
        } else {
            Box::new(DynamizedIndex::open(files, opts, rt, store)?)
        })
    }
    let opts = opts.clone();
    match (opts.weighted, opts.memory_budget > 0) {
        (false, false) => make::<IsamShard>(files, opts, rt, Arc::new(InMemory), create),
        (true, false) => make::<WirsShard>(files, opts, rt, Arc::new(InMemory), create),
        (false, true) => {
            let store = Arc::new(TieredStore::<IsamShard>::new(files.clone(), &opts, &rt));
            make(files, opts, rt, store, create)
        }
        (true, true) => {
            let store = Arc::new(TieredStore::<WirsShard>::new(files.clone(), &opts, &rt));
            make(files, opts, rt, store, create)
        }
    }
}

impl IndexFamily for DynamizedFamily {
    type Options = DynOptions;

    fn name(&self) -> &'static str {
        "dynamized"
    }

    fn summary(&self) -> &'static str {
        "dynamized index: a write buffer plus levels of immutable sorted shards; fast writes, range counts and \
         sampling with deletes, optionally weighted; u64 keys and values"
    }

    fn check(
        &self,
        key: TypeKind,
        value: TypeKind,
        page_size: usize,
        options: &DynOptions,
    ) -> Result<()> {
        crate::storage::page::validate_page_size(page_size)?;
        if key != TypeKind::U64 || value != TypeKind::U64 {
            return Err(Error::invalid(format!(
                "a dynamized index stores u64 keys and u64 values, not {} keys and {} values",
                key.name(),
                value.name()
            )));
        }
        options.validate()
    }

    fn capabilities(&self, options: &DynOptions) -> Capabilities {
        Capabilities {
            count: true,
            sample: true,
            weighted: options.weighted,
            merge: false,
            bulk_load: false,
            cheap_len: true,
            ordered: true,
            snapshots: false,
        }
    }

    fn create(
        &self,
        ctx: &IndexContext<'_>,
        options: &DynOptions,
    ) -> Result<Box<dyn OrderedIndex>> {
        instantiate(ctx, options, true)
    }

    fn open(&self, ctx: &IndexContext<'_>, options: &DynOptions) -> Result<Box<dyn OrderedIndex>> {
        instantiate(ctx, options, false)
    }
}
