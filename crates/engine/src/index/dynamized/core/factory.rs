//! How shards are built for a level: the [`ShardFactory`] hook (in memory by default, on disk for the
//! deeper levels of a larger-than-memory index), and the merge of shards into one run in memory.

use super::super::column_run::ColumnRun;
use super::super::run::{MergeInput, SortedRun, merge_shards_into_columns};
use super::super::shard::{BuildOptions, Shard};
use super::super::version::tombstone_filter;
use crate::algo::bloom::BloomFilter;
use crate::error::Result;

/// The Bloom filters of a shard: over its record keys, and over its tombstones if it has any.
pub type Filters = (BloomFilter, Option<BloomFilter>);

/// Builds shards for a level: the hook that lets deeper levels live on disk.
///
/// Placement rule: a shard lands on a level only through this factory. A flush or merge builds for its
/// *target* level; a lone shard that a layout would move down unchanged is moved only if [`keeps`]
/// accepts it there, and is otherwise rebuilt for that level by [`build_merged`] (so an in-memory shard
/// never silently lands on a level that lives on disk, nor the other way round).
///
/// [`keeps`]: ShardFactory::keeps
/// [`build_merged`]: ShardFactory::build_merged
pub trait ShardFactory<S: Shard>: Send + Sync {
    /// Builds a shard with id `id` from `run` for level `level`; `filters` are the framework's filters over
    /// the run (a factory that writes the shard to a file stores them there).
    fn build(
        &self,
        id: u64,
        run: SortedRun,
        level: usize,
        opts: BuildOptions,
        filters: (&BloomFilter, Option<&BloomFilter>),
    ) -> Result<S>;

    /// [`build`](Self::build) from a run in columns (flushes and in-memory merges produce them). The
    /// default converts it to records; a factory that builds in-memory shards passes it to
    /// [`Shard::build_columns`], which takes the columns over.
    fn build_columns(
        &self,
        id: u64,
        run: ColumnRun,
        level: usize,
        opts: BuildOptions,
        filters: (&BloomFilter, Option<&BloomFilter>),
    ) -> Result<S> {
        self.build(id, run.into_sorted_run(), level, opts, filters)
    }

    /// Pending shards the flusher may leave waiting for the merger, given the handle's `configured` bound
    /// (a memory-bounded factory may allow fewer). The default: as configured.
    fn max_pending(&self, configured: usize) -> usize {
        configured
    }

    /// True if `shard` may move to `level` as it is. The default: always.
    fn keeps(&self, _shard: &S, _level: usize) -> bool {
        true
    }

    /// Merges `inputs` (newest first; `bottom` as in `merge_shards`) into a shard with id `id` for
    /// `level`, with filters false-positive rate `fpr`; `None` when everything cancelled out. The default
    /// merges into a run in memory, builds the filters over it and calls [`build`](Self::build); a factory
    /// that writes files may stream the merge into the file instead.
    fn build_merged(
        &self,
        id: u64,
        inputs: &[MergeInput<'_, S>],
        bottom: bool,
        level: usize,
        opts: BuildOptions,
        fpr: f64,
    ) -> Result<Option<(S, Filters)>> {
        merge_in_memory(self, id, inputs, bottom, level, opts, fpr)
    }
}

/// The default [`ShardFactory::build_merged`]: merges `inputs` straight into columns (on `opts.threads`
/// threads when large), fills the key filter from the key column (sized for the inputs' records, a bound
/// of the output's) and the tombstone filter over the surviving tombstones, and builds the shard with
/// `factory`'s [`build_columns`](ShardFactory::build_columns); `None` when everything cancelled out.
pub fn merge_in_memory<S: Shard, F: ShardFactory<S> + ?Sized>(
    factory: &F,
    id: u64,
    inputs: &[MergeInput<'_, S>],
    bottom: bool,
    level: usize,
    opts: BuildOptions,
    fpr: f64,
) -> Result<Option<(S, Filters)>> {
    let records: usize = inputs.iter().map(|i| i.shard.len()).sum();
    let mut key_filter = BloomFilter::new(records, fpr)?;
    let run =
        merge_shards_into_columns(inputs, bottom, opts.weighted, opts.threads, &mut key_filter)?;
    if run.entries() == 0 {
        return Ok(None);
    }
    let tomb_filter = tombstone_filter(&run.tombstones, fpr)?;
    let shard = factory.build_columns(id, run, level, opts, (&key_filter, tomb_filter.as_ref()))?;
    Ok(Some((shard, (key_filter, tomb_filter))))
}

/// The default factory: every shard built in memory by `S::build`.
pub struct InMemory;

impl<S: Shard> ShardFactory<S> for InMemory {
    fn build(
        &self,
        _id: u64,
        run: SortedRun,
        _level: usize,
        opts: BuildOptions,
        _filters: (&BloomFilter, Option<&BloomFilter>),
    ) -> Result<S> {
        S::build(run, opts)
    }

    fn build_columns(
        &self,
        _id: u64,
        run: ColumnRun,
        _level: usize,
        opts: BuildOptions,
        _filters: (&BloomFilter, Option<&BloomFilter>),
    ) -> Result<S> {
        S::build_columns(run, opts)
    }
}
