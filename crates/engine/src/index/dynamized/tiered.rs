//! The larger-than-memory configuration: the first L levels in memory, the rest on disk.
//!
//! * [`Tiered`] is a shard that is either an in-memory shard `M` (ISAM, or WIRS for weighted indexes) or a
//!   [`DiskShard`] over its shard file.
//! * [`MemoryPlan`] turns `DynOptions::memory_budget` into L, the number of in-memory levels.
//! * [`TieredStore`] is the shard factory (and the adapter's reloader): a shard for a level below L is built
//!   in memory; a shard for a deeper level is streamed straight into its file (merges included: the merged
//!   records are never held in memory, only its tombstones, 8 B each, until the record pages are out),
//!   synced, and opened as a disk shard. A lone shard moves down unchanged
//!   only if it stays on the same side of L; otherwise it is rebuilt for its new level.
//!
//! ## Choosing L
//! With D levels in the structure (the deepest level ever built or reopened, so L only follows growth), L is
//! the largest number in 0..=D such that
//!
//! buffers + Σ_{i<L} cap(i) · m_mem + Σ_{L≤i<D} (cap(i) · m_disk + shards(i) · cache(i)) ≤ budget,
//!
//! where cap(i) is level i's capacity in entries; m_mem = the in-memory shard's bytes per record (ISAM 16.5 B,
//! 32.5 B weighted; WIRS ≈ 60 B) + its Bloom filter (1.2 · 9.6 bits at 1 %, ≈ 1.44 B) + its tag bit + two
//! keys' worth of the global key filter (`global_keys`, sized for twice the in-memory records); m_disk = Bloom filter + tag bit + the disk shard's summary (8 B per page of fences, and of page weights in
//! weighted shards); shards(i) = runs per level (s under tiering, else 1); cache(i) = the disk shard page
//! cache, at most `cache_limit_bytes(page size)` (64 KiB, or two pages for pages over 32 KiB) and at most the
//! level's bytes; buffers = (1 + 2 · max sealed buffers) · (29 B · N_b + the key index) (the active one, the
//! sealed ones and as many flushed ones kept for reuse) + the global key filter's minimum (16 N_b keys) +
//! the pending shards (`max_pending_shards`, at most s: the flusher leaves no more waiting) at N_b · m_mem
//! each. Every level is counted
//! at its full capacity, so the plan holds while the structure has D levels; when it grows, later shards
//! follow the new, smaller L (tiering's older runs of a level keep their side until they are merged). If even
//! L = 0 does not fit, every level is on disk and the budget is exceeded by what the filters and summaries
//! need: they are what keeps disk levels usable.
//!
//! ## Cost (disk levels; p = records per page)
//! * Insert, amortised: the merges that reach disk levels read and write every record of the levels they
//!   rewrite once per merge: O(s · (D − L) / p) page writes and reads per record under leveling,
//!   O((D − L) / p) under tiering, written in batches of 64 pages (at most 4 MiB) and read through 32 KiB
//!   read-ahead (one page when pages are larger). Flush-time probes of a disk shard cost one page read per
//!   Bloom-filter hit (an overwritten or deleted key, or a 1 % false positive), not per insert.
//! * A sample from a disk shard: one page read (none if the page is cached), plus one tombstone page read per
//!   newer shard with tombstones whose Bloom filter reports the key (its deleted records and 1 % of the
//!   rest). Per query: ≤ 2 page reads per disk shard for the candidate interval (`lower_bound`,
//!   `upper_bound`; weighted shards read the two end pages, which the bounds just cached).

use super::buffer::MutableBuffer;
use super::column_run::ColumnRun;
use super::core::{Filters, ShardFactory, merge_in_memory};
use super::db_index::{DynFiles, ShardStore};
use super::disk_shard::{DiskShard, cache_limit_bytes};
use super::isam_shard::IsamShard;
use super::options::{DynOptions, Layout, RuntimeOptions};
use super::run::{MergeInput, Merged, Record, SortedRun, merge_shards_with};
use super::shard::{BuildOptions, Drawer, Shard};
use super::shard_file::{ShardFile, ShardWriter, TRAILER, shard_file_name, write_run_file};
use super::wirs_shard::WirsShard;
use crate::algo::bloom::BloomFilter;
use crate::error::Result;
use rand::RngCore;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicUsize, Ordering};

/// An in-memory shard type with a memory estimate for the plan.
pub trait MemoryShard: Shard {
    /// Bytes per record of the shard itself (records and search structure; not filters or tags).
    fn bytes_per_record(weighted: bool) -> f64;
}

impl MemoryShard for IsamShard {
    fn bytes_per_record(weighted: bool) -> f64 {
        // Key and value, prefix sum and weight when weighted, ISAM separators (≈ 8 B per 15 records).
        (if weighted { 32.0 } else { 16.0 }) + 8.0 / 15.0
    }
}

impl MemoryShard for WirsShard {
    fn bytes_per_record(_weighted: bool) -> f64 {
        // See the WIRS shard's cost model: about 60 B per record.
        60.0
    }
}

/// A shard in memory or on disk.
#[derive(Debug)]
pub enum Tiered<M> {
    Memory(M),
    /// Boxed: a disk shard's handle, summary and cache are much larger than an in-memory shard's header.
    Disk(Box<DiskShard>),
}

impl<M> Tiered<M> {
    /// True for a disk shard.
    pub fn is_disk(&self) -> bool {
        matches!(self, Tiered::Disk(_))
    }
}

macro_rules! each {
    ($self:expr, $s:ident => $e:expr) => {
        match $self {
            Tiered::Memory($s) => $e,
            Tiered::Disk($s) => $e,
        }
    };
}

impl<M: Shard> Shard for Tiered<M> {
    const NAME: &'static str = "tiered";

    /// An in-memory shard (disk shards come from [`TieredStore`]).
    fn build(run: SortedRun, opts: BuildOptions) -> Result<Self> {
        M::build(run, opts).map(Tiered::Memory)
    }
    fn build_columns(run: ColumnRun, opts: BuildOptions) -> Result<Self> {
        M::build_columns(run, opts).map(Tiered::Memory)
    }
    #[inline]
    fn len(&self) -> usize {
        each!(self, s => s.len())
    }
    #[inline]
    fn tombstone_count(&self) -> usize {
        each!(self, s => s.tombstone_count())
    }
    #[inline]
    fn key_at(&self, i: usize) -> Result<u64> {
        each!(self, s => s.key_at(i))
    }
    #[inline]
    fn record_at(&self, i: usize) -> Result<Record> {
        each!(self, s => s.record_at(i))
    }
    fn records_at(&self, indexes: &[usize], out: &mut Vec<Record>) -> Result<()> {
        each!(self, s => s.records_at(indexes, out))
    }
    fn tombstone_lower_bound(&self, key: u64) -> Result<usize> {
        each!(self, s => s.tombstone_lower_bound(key))
    }
    fn has_tombstones(&self, keys: &[u64], out: &mut Vec<bool>) -> Result<()> {
        each!(self, s => s.has_tombstones(keys, out))
    }
    fn warm_bounds(&self, lo: u64, hi: u64) -> Result<()> {
        each!(self, s => s.warm_bounds(lo, hi))
    }
    fn fetches_in_batches(&self) -> bool {
        each!(self, s => s.fetches_in_batches())
    }
    fn records_per_read(&self) -> usize {
        each!(self, s => s.records_per_read())
    }
    #[inline]
    fn prefetch(&self, i: usize) {
        each!(self, s => s.prefetch(i))
    }
    fn extend_weights(&self, lo: usize, hi: usize, out: &mut Vec<f64>) -> Result<()> {
        each!(self, s => s.extend_weights(lo, hi, out))
    }
    fn tombstone_at(&self, j: usize) -> Result<u64> {
        each!(self, s => s.tombstone_at(j))
    }
    fn lower_bound(&self, key: u64) -> Result<usize> {
        each!(self, s => s.lower_bound(key))
    }
    fn upper_bound(&self, key: u64) -> Result<usize> {
        each!(self, s => s.upper_bound(key))
    }
    fn has_tombstone(&self, key: u64) -> Result<bool> {
        each!(self, s => s.has_tombstone(key))
    }
    fn find(&self, key: u64) -> Result<Option<usize>> {
        each!(self, s => s.find(key))
    }
    fn find_many(&self, keys: &[u64], out: &mut Vec<Option<usize>>) -> Result<()> {
        each!(self, s => s.find_many(keys, out))
    }
    fn memory_bytes(&self) -> usize {
        each!(self, s => s.memory_bytes())
    }
    fn resident(&self) -> bool {
        each!(self, s => s.resident())
    }
    fn range_weight(&self, lo: usize, hi: usize) -> Result<f64> {
        each!(self, s => s.range_weight(lo, hi))
    }
    fn sample_in(&self, lo: usize, hi: usize, rng: &mut dyn RngCore) -> Result<usize> {
        each!(self, s => s.sample_in(lo, hi, rng))
    }
    fn drawer(&self, lo: usize, hi: usize) -> Result<Drawer<'_>> {
        each!(self, s => s.drawer(lo, hi))
    }
}

/// Bytes per key of a Bloom filter at false-positive rate `fpr` (the blocked filter's 1.2 × classic size).
fn bloom_bytes_per_key(fpr: f64) -> f64 {
    let ln2 = std::f64::consts::LN_2;
    1.2 * (-fpr.ln() / (ln2 * ln2)) / 8.0
}

/// How many levels fit in memory under a budget (see the module docs).
#[derive(Debug, Clone)]
pub struct MemoryPlan {
    opts: DynOptions,
    budget: f64,
    buffers: f64,
    pending: usize,
    mem_per_entry: f64,
    disk_per_entry: f64,
    disk_entry_bytes: f64,
    shards_per_level: f64,
    page_size: f64,
}

impl MemoryPlan {
    /// The plan for `opts` (its `memory_budget` > 0), the handle options `rt` (sealed buffers and pending
    /// shards at most), in-memory shards of `mem_per_record` bytes per record, and `page_size`-byte pages.
    pub fn new(
        opts: &DynOptions,
        rt: &RuntimeOptions,
        mem_per_record: f64,
        page_size: usize,
    ) -> Self {
        let sealed = rt.max_sealed_buffers.max(1);
        let nb = opts.buffer_capacity as f64;
        let one_buffer = MutableBuffer::bytes_for(opts.buffer_capacity) as f64;
        let bloom = bloom_bytes_per_key(opts.bloom_fpr);
        let filter_and_tags = bloom + 1.0 / 8.0;
        // The global key filter covers in-memory records, sized for twice them, at least 16 N_b.
        let global_min = 16.0 * nb * bloom;
        let record_bytes = if opts.weighted { 24.0 } else { 16.0 };
        let per_page = ((page_size - TRAILER) as f64 / record_bytes).floor();
        let summary = if opts.weighted { 16.0 } else { 8.0 } / per_page;
        let mem_per_entry = mem_per_record + filter_and_tags + 2.0 * bloom;
        // Pending shards (flushed, in memory, waiting for the merger): at most one level 0's worth.
        let pending = rt.max_pending_shards.clamp(1, opts.growth());
        MemoryPlan {
            budget: opts.memory_budget as f64,
            // The active buffer, the sealed ones, and as many flushed ones kept for reuse.
            buffers: (1 + 2 * sealed) as f64 * one_buffer
                + global_min
                + pending as f64 * nb * mem_per_entry,
            pending,
            mem_per_entry,
            disk_per_entry: filter_and_tags + summary,
            disk_entry_bytes: record_bytes,
            shards_per_level: match opts.layout {
                Layout::Tiering => opts.scale_factor as f64,
                Layout::Leveling | Layout::Bsm => 1.0,
            },
            page_size: page_size as f64,
            opts: opts.clone(),
        }
    }

    /// Pending shards the flusher may leave waiting for the merger under this plan.
    pub fn pending_shards(&self) -> usize {
        self.pending
    }

    /// Estimated bytes with `memory_levels` of `depth` levels in memory.
    pub fn cost(&self, memory_levels: usize, depth: usize) -> f64 {
        let mut c = self.buffers;
        for i in 0..depth {
            let cap = self.opts.level_capacity(i) as f64;
            if i < memory_levels {
                c += cap * self.mem_per_entry;
            } else {
                let shard_bytes = cap / self.shards_per_level * self.disk_entry_bytes;
                let cache = (cache_limit_bytes(self.page_size as usize) as f64)
                    .min(shard_bytes + self.page_size);
                c += cap * self.disk_per_entry + self.shards_per_level * cache;
            }
        }
        c
    }

    /// L: the number of in-memory levels for a structure of `depth` levels.
    pub fn memory_levels(&self, depth: usize) -> usize {
        (0..=depth)
            .rev()
            .find(|&l| self.cost(l, depth) <= self.budget)
            .unwrap_or(0)
    }
}

/// The shard factory and reloader of the tiered configuration.
pub struct TieredStore<M> {
    files: DynFiles,
    weighted: bool,
    plan: MemoryPlan,
    /// Levels of the structure: the deepest level built, moved to or reopened, plus one.
    depth: AtomicUsize,
    _shard: PhantomData<fn() -> M>,
}

impl<M: MemoryShard> TieredStore<M> {
    /// A store for an index with options `opts` (`memory_budget` > 0) and runtime options `rt`.
    pub fn new(files: DynFiles, opts: &DynOptions, rt: &RuntimeOptions) -> TieredStore<M> {
        TieredStore {
            plan: MemoryPlan::new(
                opts,
                rt,
                M::bytes_per_record(opts.weighted),
                files.page_size,
            ),
            files,
            weighted: opts.weighted,
            depth: AtomicUsize::new(0),
            _shard: PhantomData,
        }
    }

    /// The plan.
    pub fn plan(&self) -> &MemoryPlan {
        &self.plan
    }

    /// True if shards of `level` live in memory; notes that the structure has at least `level + 1` levels.
    pub fn in_memory(&self, level: usize) -> bool {
        let depth = self
            .depth
            .fetch_max(level + 1, Ordering::AcqRel)
            .max(level + 1);
        level < self.plan.memory_levels(depth.min(64))
    }

    fn open_disk(&self, id: u64, summary: super::shard_file::ShardSummary) -> Result<Tiered<M>> {
        let f = &self.files;
        let file = ShardFile::open(
            &f.vfs,
            &f.dir.join(shard_file_name(id)),
            id,
            f.page_size,
            f.direct,
            f.stats.clone(),
        )?;
        Ok(Tiered::Disk(Box::new(DiskShard::new(file, summary)?)))
    }
}

impl<M: MemoryShard> ShardFactory<Tiered<M>> for TieredStore<M> {
    fn build(
        &self,
        id: u64,
        run: SortedRun,
        level: usize,
        opts: BuildOptions,
        filters: (&BloomFilter, Option<&BloomFilter>),
    ) -> Result<Tiered<M>> {
        if self.in_memory(level) {
            return M::build(run, opts).map(Tiered::Memory);
        }
        let f = &self.files;
        let written = write_run_file(
            &f.vfs,
            &f.dir.join(shard_file_name(id)),
            &f.stats,
            id,
            &run,
            filters,
            self.weighted,
            f.page_size,
            f.direct,
        )?;
        drop(run);
        self.open_disk(id, written.summary)
    }

    fn build_columns(
        &self,
        id: u64,
        run: ColumnRun,
        level: usize,
        opts: BuildOptions,
        filters: (&BloomFilter, Option<&BloomFilter>),
    ) -> Result<Tiered<M>> {
        if self.in_memory(level) {
            return M::build_columns(run, opts).map(Tiered::Memory);
        }
        self.build(id, run.into_sorted_run(), level, opts, filters)
    }

    fn keeps(&self, shard: &Tiered<M>, level: usize) -> bool {
        shard.is_disk() != self.in_memory(level)
    }

    fn max_pending(&self, _configured: usize) -> usize {
        self.plan.pending_shards()
    }

    fn build_merged(
        &self,
        id: u64,
        inputs: &[MergeInput<'_, Tiered<M>>],
        bottom: bool,
        level: usize,
        opts: BuildOptions,
        fpr: f64,
    ) -> Result<Option<(Tiered<M>, Filters)>> {
        if self.in_memory(level) {
            return merge_in_memory(self, id, inputs, bottom, level, opts, fpr);
        }
        // Stream the merge into the file: the filters are sized for every input entry (an upper bound of
        // the output), records go out in page batches as they come.
        let f = &self.files;
        let path = f.dir.join(shard_file_name(id));
        let records: usize = inputs.iter().map(|i| i.shard.len()).sum();
        let tombstones: usize = if bottom {
            0
        } else {
            inputs.iter().map(|i| i.shard.tombstone_count()).sum()
        };
        let mut key_filter = BloomFilter::new(records, fpr)?;
        let mut tomb_filter = BloomFilter::new(tombstones, fpr)?;
        let mut w = ShardWriter::create(
            &f.vfs,
            &path,
            f.stats.clone(),
            id,
            f.page_size,
            self.weighted,
            f.direct,
        )?;
        // Keys enter the filters by `hash_u64`, as `ShardSlot` probes them.
        merge_shards_with(inputs, bottom, &mut |e| match e {
            Merged::Record(r) => {
                key_filter.insert_hashed(BloomFilter::hash_u64(r.key));
                w.push_record(&r)
            }
            Merged::Tombstone(k) => {
                tomb_filter.insert_hashed(BloomFilter::hash_u64(k));
                w.push_tombstone(k)
            }
        })?;
        if w.records() + w.tombstones() == 0 {
            drop(w);
            f.vfs.remove_file(&path)?;
            return Ok(None);
        }
        let tomb_filter = (w.tombstones() > 0).then_some(tomb_filter);
        let written = w.finish(&key_filter, tomb_filter.as_ref())?;
        Ok(Some((
            self.open_disk(id, written.summary)?,
            (key_filter, tomb_filter),
        )))
    }
}

impl<M: MemoryShard> ShardStore<Tiered<M>> for TieredStore<M> {
    fn reopen(&self, file: ShardFile, level: usize, levels: usize) -> Result<(Tiered<M>, Filters)> {
        self.depth.fetch_max(levels, Ordering::AcqRel);
        if self.in_memory(level) {
            let loaded = file.read_all()?;
            let shard = M::build(loaded.run, BuildOptions::single(self.weighted))?;
            return Ok((
                Tiered::Memory(shard),
                (loaded.key_filter, loaded.tomb_filter),
            ));
        }
        let (shard, key_filter, tomb_filter) = DiskShard::open(file)?;
        Ok((Tiered::Disk(Box::new(shard)), (key_filter, tomb_filter)))
    }

    fn file_backed(&self, shard: &Tiered<M>) -> bool {
        shard.is_disk()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::dynamized::{DeletePolicy, Dynamized};
    use parking_lot::Mutex;
    use std::collections::HashMap;
    use std::sync::Arc;

    /// Builds in memory, remembers the level each shard was built for, and lets shards move only within
    /// level 0.
    struct Recorder(Arc<Mutex<HashMap<u64, usize>>>);

    impl ShardFactory<IsamShard> for Recorder {
        fn build(
            &self,
            id: u64,
            run: SortedRun,
            level: usize,
            opts: BuildOptions,
            _filters: (&BloomFilter, Option<&BloomFilter>),
        ) -> Result<IsamShard> {
            self.0.lock().insert(id, level);
            IsamShard::build(run, opts)
        }
        fn keeps(&self, _shard: &IsamShard, level: usize) -> bool {
            level == 0
        }
    }

    /// The move rule: a shard the factory does not keep at a level is rebuilt for it, so every shard below
    /// level 0 sits at the level it was built for, under every layout.
    #[test]
    fn lone_shards_move_only_where_the_factory_keeps_them() {
        for layout in [Layout::Leveling, Layout::Tiering, Layout::Bsm] {
            let built = Arc::new(Mutex::new(HashMap::new()));
            let idx = Dynamized::<IsamShard>::with_parts(
                DynOptions {
                    layout,
                    buffer_capacity: 8,
                    scale_factor: 2,
                    ..DynOptions::default()
                },
                RuntimeOptions {
                    background: false,
                    ..RuntimeOptions::default()
                },
                Box::new(Recorder(built.clone())),
                Vec::new(),
                0,
            )
            .unwrap();
            for k in 0..3_000u64 {
                idx.put(k * 7 % 3_001, k, 1.0).unwrap();
            }
            idx.quiesce(true).unwrap();
            let v = idx.version();
            assert!(v.levels.len() >= 4, "{layout:?}");
            let built = built.lock();
            for (i, level) in v.levels.iter().enumerate().skip(1) {
                for slot in level {
                    assert_eq!(
                        built[&slot.id], i,
                        "{layout:?}: shard {} at level {i}",
                        slot.id
                    );
                }
            }
            assert_eq!(idx.len(), 3_000);
        }
    }

    #[test]
    fn the_plan_puts_what_fits_in_memory() {
        let opts = DynOptions {
            layout: Layout::Leveling,
            buffer_capacity: 1000,
            scale_factor: 4,
            memory_budget: 0,
            delete_policy: DeletePolicy::Tombstone,
            ..DynOptions::default()
        };
        let plan = |budget: u64| {
            MemoryPlan::new(
                &DynOptions {
                    memory_budget: budget,
                    ..opts.clone()
                },
                &RuntimeOptions {
                    max_sealed_buffers: 1,
                    max_pending_shards: 1,
                    ..RuntimeOptions::default()
                },
                IsamShard::bytes_per_record(false),
                4096,
            )
        };
        // Capacities 4k, 16k, 64k, 256k entries at ≈ 18 B in memory, ≈ 1.6 B + cache on disk.
        let p = plan(1 << 20);
        assert_eq!(p.memory_levels(1), 1);
        assert_eq!(p.memory_levels(3), 2);
        assert!(p.cost(2, 3) <= (1 << 20) as f64 && p.cost(3, 3) > (1 << 20) as f64);
        // Deeper structures leave less room: once a level is on disk, L never grows with depth.
        let ls: Vec<usize> = (1..10).map(|d| p.memory_levels(d)).collect();
        assert_eq!(ls, [1, 2, 2, 1, 0, 0, 0, 0, 0]);
        // A budget below the buffers puts everything on disk; a huge one keeps everything in memory.
        assert_eq!(plan(1000).memory_levels(4), 0);
        assert_eq!(plan(1 << 40).memory_levels(6), 6);
    }
}
