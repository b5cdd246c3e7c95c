//! The dynamized family behind the `Db` shell: [`DynamizedIndex`] implements `OrderedIndex` and
//! `SamplingIndex` over encoded keys and values (8-byte big-endian `u64`s).
//!
//! The shell's write-ahead log protects the buffer: a batch is logged, then applied to the buffer; a
//! checkpoint (see `persist`) records the WAL sequence number it contains, so recovery replays exactly the
//! batches after it. Writes arrive serialised by the shell's writer lock, so checkpoints see no concurrent
//! writes; background reconstructions may run during a checkpoint and only change the physical layout.
//!
//! Weighted indexes (`DynOptions::weighted`) take a weight with every put (`WriteOp::PutWeighted`; a plain
//! put has weight 1) and sample in proportion to the weights.
//!
//! ## Shards and their files
//! A [`ShardStore`] builds the shards (it is the framework's `ShardFactory`) and reopens them. With the
//! [`InMemory`] store every shard lives in memory and gets its file at the first checkpoint that contains
//! it.
//! With `DynOptions::memory_budget` > 0 the database uses `tiered::TieredStore`: shards of the first L levels
//! are in memory as before; shards of deeper levels are *disk shards*, written (and synced) by the factory
//! when they are built, so a checkpoint writes nothing for them, and reopened by reading only their header
//! and blob (fences and filters); the data pages are read on demand. Delete tags of every shard, disk shards
//! included, are bits in memory (counted in the budget) saved in the state file, so a tag-delete of a
//! disk-resident record works like any other.
//!
//! ## Garbage collection of shard files
//! A shard file is removed only when a durable state file no longer lists it: at open, every file the state
//! does not list (left by a crash, or by a failed reconstruction) is removed before any new shard is built;
//! at a checkpoint, after the new state file is durable, the files of shards that a published merge replaced
//! (the framework lists them) and that the checkpointed version does not list are removed. A file of a shard
//! that the flusher or the merger is building, or published after the version was pinned, is never among
//! them (the two run concurrently, so its id may be below ids of the version: ids alone cannot tell). A
//! reader still pinning an older version may be reading a removed disk shard's file: it keeps its
//! open handle, which survives the unlink (POSIX; `MemVfs` keeps the bytes of a removed file for its open
//! handles too).

use super::buffer::BufferEntry;
use super::column_run::ColumnRun;
use super::core::{Dynamized, Filters, InMemory, ShardFactory};
use super::options::{DynOptions, RuntimeOptions};
use super::persist::{STATE, State};
use super::run::{MergeInput, SortedRun};
use super::sample::{RangeSample, WeightedRangeSample};
use super::shard::{BuildOptions, Shard};
use super::shard_file::{ShardFile, parse_shard_file_name, shard_file_name, write_shard_file};
use super::version::ShardSlot;
use crate::algo::bloom::BloomFilter;
use crate::error::{Error, Result};
use crate::index::u64_keys;
use crate::index::{
    CheckReport, Direction, IndexStats, KeyRange, OrderedIndex, RecordVisitor, SamplingIndex,
    WriteOp,
};
use crate::storage::{IoSnapshot, IoStats, Vfs};
use parking_lot::Mutex;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Where a database's dynamized index lives and how its files are written.
#[derive(Debug, Clone)]
pub struct DynFiles {
    pub vfs: Arc<dyn Vfs>,
    pub dir: PathBuf,
    pub stats: Arc<IoStats>,
    pub page_size: usize,
    pub direct: bool,
}

/// How the adapter builds shards (as the framework's factory) and reopens the shards a state file lists.
pub trait ShardStore<S: Shard>: ShardFactory<S> {
    /// The shard (and its filters) in `file`, listed at `level` of a structure of `levels` levels.
    fn reopen(&self, file: ShardFile, level: usize, levels: usize) -> Result<(S, Filters)>;
    /// True when `shard` is already a synced file of its own (a checkpoint writes nothing for it).
    fn file_backed(&self, shard: &S) -> bool;
}

/// Every shard in memory (the framework's [`InMemory`] factory): reopened by reading its file whole.
impl<S: Shard> ShardStore<S> for InMemory {
    fn reopen(&self, file: ShardFile, _level: usize, _levels: usize) -> Result<(S, Filters)> {
        let loaded = file.read_all()?;
        let shard = S::build(loaded.run, BuildOptions::single(file.header.weighted))?;
        Ok((shard, (loaded.key_filter, loaded.tomb_filter)))
    }

    fn file_backed(&self, _shard: &S) -> bool {
        false
    }
}

/// The framework's factory is the adapter's store.
impl<S: Shard> ShardFactory<S> for Arc<dyn ShardStore<S>> {
    fn build(
        &self,
        id: u64,
        run: SortedRun,
        level: usize,
        opts: BuildOptions,
        filters: (&BloomFilter, Option<&BloomFilter>),
    ) -> Result<S> {
        ShardFactory::build(&**self, id, run, level, opts, filters)
    }

    fn build_columns(
        &self,
        id: u64,
        run: ColumnRun,
        level: usize,
        opts: BuildOptions,
        filters: (&BloomFilter, Option<&BloomFilter>),
    ) -> Result<S> {
        ShardFactory::build_columns(&**self, id, run, level, opts, filters)
    }

    fn keeps(&self, shard: &S, level: usize) -> bool {
        ShardFactory::keeps(&**self, shard, level)
    }

    fn max_pending(&self, configured: usize) -> usize {
        ShardFactory::max_pending(&**self, configured)
    }

    fn build_merged(
        &self,
        id: u64,
        inputs: &[MergeInput<'_, S>],
        bottom: bool,
        level: usize,
        opts: BuildOptions,
        fpr: f64,
    ) -> Result<Option<(S, Filters)>> {
        ShardFactory::build_merged(&**self, id, inputs, bottom, level, opts, fpr)
    }
}

/// A dynamized index with its files.
pub struct DynamizedIndex<S: Shard> {
    core: Dynamized<S>,
    files: DynFiles,
    store: Arc<dyn ShardStore<S>>,
    checkpointed: AtomicU64,
    /// Shards with a synced file listed by a state file, or about to be.
    persisted: Mutex<HashSet<u64>>,
    checkpoint_lock: Mutex<()>,
    /// A checkpoint sealed by `begin_checkpoint` and not yet written.
    sealed: Mutex<Option<Sealed<S>>>,
}

/// A checkpoint sealed and not yet written: its version's shards (newest first; immutable), its state (tags and
/// buffered operations as they were at its seqno) and seqno.
///
/// The shards, not the version: a tagging flush waits until no older version is held
/// (`Shared::wait_for_earlier_readers`), and a checkpoint is not such a reader — its tags were copied at the
/// seal. Holding the version made every tagging flush wait for the checkpoint's shard writes, and forever when
/// the checkpoint thread failed before writing them (found by `dynamized_injected_faults_never_return_wrong_data`
/// hanging; see the test `a_tagging_flush_does_not_wait_for_a_held_checkpoint`).
struct Sealed<S: Shard> {
    shards: Vec<Arc<ShardSlot<S>>>,
    state: State,
    seqno: u64,
}

fn decode_u64(bytes: &[u8], what: &str) -> Result<u64> {
    u64_keys::decode_u64(bytes, "dynamized", what)
}

fn bounds(range: &KeyRange) -> Result<Option<(u64, u64)>> {
    u64_keys::u64_bounds(range, "dynamized")
}

/// Removes the shard files in `files.dir` whose id `keep` does not accept.
fn remove_unlisted(files: &DynFiles, keep: impl Fn(u64) -> bool) -> Result<()> {
    for name in files.vfs.list_dir(&files.dir)? {
        if let Some(id) = parse_shard_file_name(&name)
            && !keep(id)
        {
            files.vfs.remove_file(&files.dir.join(&name))?;
        }
    }
    Ok(())
}

impl<S: Shard> DynamizedIndex<S> {
    /// Creates an empty index in `files.dir`, building shards with `store`, and writes its first state file.
    pub fn create(
        files: DynFiles,
        opts: DynOptions,
        rt: RuntimeOptions,
        store: Arc<dyn ShardStore<S>>,
    ) -> Result<Self> {
        let core = Dynamized::with_parts(opts, rt, Box::new(store.clone()), Vec::new(), 0)?;
        State::default().write(files.vfs.as_ref(), &files.dir, &files.stats)?;
        Ok(DynamizedIndex {
            core,
            files,
            store,
            checkpointed: AtomicU64::new(0),
            persisted: Mutex::new(HashSet::new()),
            checkpoint_lock: Mutex::new(()),
            sealed: Mutex::new(None),
        })
    }

    /// Opens the index at its last checkpoint: removes shard files the state does not list, reopens every
    /// shard it lists through `store` (in-memory shards are read whole, disk shards only their header and
    /// blob), restores tags and buffered operations.
    pub fn open(
        files: DynFiles,
        opts: DynOptions,
        rt: RuntimeOptions,
        store: Arc<dyn ShardStore<S>>,
    ) -> Result<Self> {
        opts.validate()?;
        let state = State::read(files.vfs.as_ref(), &files.dir, &files.stats)?;
        let listed: HashSet<u64> = state
            .levels
            .iter()
            .flat_map(|l| l.iter().map(|(id, _)| *id))
            .collect();
        if listed.iter().any(|&id| id >= state.next_shard_id) {
            return Err(Error::corruption(
                files.dir.join(STATE),
                0,
                "a shard id is not below the next shard id",
            ));
        }
        // Files no durable state lists are garbage; remove them before any new shard (whose id may be
        // theirs) is written.
        remove_unlisted(&files, |id| listed.contains(&id))?;
        let mut levels = Vec::with_capacity(state.levels.len());
        for (i, level) in state.levels.iter().enumerate() {
            let mut shards = Vec::with_capacity(level.len());
            for (id, tags) in level {
                let path = files.dir.join(shard_file_name(*id));
                let file = ShardFile::open(
                    &files.vfs,
                    &path,
                    *id,
                    files.page_size,
                    files.direct,
                    files.stats.clone(),
                )?;
                if file.header.weighted != opts.weighted {
                    return Err(Error::corruption(
                        &path,
                        0,
                        "shard's weighted flag disagrees with the manifest",
                    ));
                }
                let (shard, (key_filter, tomb_filter)) =
                    store.reopen(file, i, state.levels.len())?;
                let n = shard.len() as u64;
                let slot = ShardSlot::from_parts(*id, shard, key_filter, tomb_filter);
                for &t in tags {
                    if t >= n {
                        return Err(Error::corruption(
                            files.dir.join(STATE),
                            0,
                            format!("tag {t} of shard {id}, which has {n} records"),
                        ));
                    }
                    slot.tags.set(t as usize);
                }
                shards.push(Arc::new(slot));
            }
            levels.push(shards);
        }
        let core = Dynamized::with_parts(
            opts,
            rt,
            Box::new(store.clone()),
            levels,
            state.next_shard_id,
        )?;
        for chunk in state.ops.chunks(core.options().buffer_capacity) {
            core.write_batch(chunk)?;
        }
        Ok(DynamizedIndex {
            core,
            files,
            store,
            checkpointed: AtomicU64::new(state.seqno),
            persisted: Mutex::new(listed),
            checkpoint_lock: Mutex::new(()),
            sealed: Mutex::new(None),
        })
    }

    /// The framework underneath.
    pub fn core(&self) -> &Dynamized<S> {
        &self.core
    }

    fn apply_ops(&self, ops: &[WriteOp]) -> Result<()> {
        // Small batches (a single put, usually) stay on the stack: no allocation on the writer's path.
        let mut entries: smallvec::SmallVec<[BufferEntry; 4]> =
            smallvec::SmallVec::with_capacity(ops.len());
        for op in ops {
            entries.push(match op {
                WriteOp::Put { key, value } => buffer_entry(key, Some((value, 1.0)))?,
                WriteOp::PutWeighted { key, value, weight } => {
                    buffer_entry(key, Some((value, *weight)))?
                }
                WriteOp::Delete { key } => buffer_entry(key, None)?,
                // `validate_batch` (the default) refuses merges before they are logged.
                WriteOp::Merge { .. } => {
                    return Err(Error::invalid("a dynamized index has no merge operator"));
                }
            });
        }
        self.core.write_batch(&entries)
    }
}

/// The buffer entry of a put (`Some((value, weight))`) or delete of `key`, from the shell's encoded bytes.
fn buffer_entry(key: &[u8], put: Option<(&[u8], f64)>) -> Result<BufferEntry> {
    let key = decode_u64(key, "key")?;
    Ok(match put {
        Some((value, weight)) => BufferEntry::put(key, decode_u64(value, "value")?, weight),
        None => BufferEntry::delete(key),
    })
}

impl<S: Shard> OrderedIndex for DynamizedIndex<S> {
    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        match self.core.get(decode_u64(key, "key")?)? {
            Some(r) => {
                out.clear();
                out.extend_from_slice(&r.value.to_be_bytes());
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn apply(&self, ops: &[WriteOp]) -> Result<()> {
        self.apply_ops(ops)
    }

    /// Puts and deletes need no check beyond the shell's (the default `validate_batch` refuses merges only).
    fn applies_borrowed(&self) -> bool {
        true
    }

    fn apply_borrowed(&self, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        self.core
            .write_batch(&[buffer_entry(key, value.map(|v| (v, 1.0)))?])
    }

    fn scan_visit(
        &self,
        range: &KeyRange,
        dir: Direction,
        max: usize,
        visit: &mut RecordVisitor<'_>,
    ) -> Result<usize> {
        let Some((lo, hi)) = bounds(range)? else {
            return Ok(0);
        };
        self.core.scan(lo, hi, dir, max, &mut |r| {
            visit(&r.key.to_be_bytes(), &r.value.to_be_bytes())
        })
    }

    fn len(&self) -> u64 {
        self.core.len()
    }

    fn max_key_len(&self) -> usize {
        8
    }

    fn checkpoint(&self, seqno: u64) -> Result<()> {
        self.begin_checkpoint(seqno)?;
        self.finish_checkpoint()
    }

    /// Seals the state at `seqno`: the current version's shards (immutable) and what can still change
    /// in it — tags and the buffers' operations — copied now (milliseconds: tagged ids and at most the
    /// buffers' records). `finish_checkpoint` writes the shard files and the state file.
    fn begin_checkpoint(&self, seqno: u64) -> Result<bool> {
        let _g = self.checkpoint_lock.lock();
        self.core.check_failed()?;
        let v = self.core.version();
        let state = State::of_version(&v, seqno, self.core.next_shard_id());
        let shards = v.shards_newest_first().cloned().collect();
        drop(v);
        *self.sealed.lock() = Some(Sealed {
            shards,
            state,
            seqno,
        });
        Ok(true)
    }

    fn finish_checkpoint(&self) -> Result<()> {
        let _g = self.checkpoint_lock.lock();
        let Some(Sealed {
            shards,
            state,
            seqno,
        }) = self.sealed.lock().take()
        else {
            return Ok(());
        };
        let f = &self.files;
        let mut persisted = self.persisted.lock().clone();
        for slot in &shards {
            // Disk shards were written and synced when they were built.
            if persisted.insert(slot.id) && !self.store.file_backed(&slot.shard) {
                write_shard_file(
                    &f.vfs,
                    &f.dir.join(shard_file_name(slot.id)),
                    &f.stats,
                    slot,
                    self.core.options().weighted,
                    f.page_size,
                    f.direct,
                )?;
            }
        }
        f.vfs.sync_dir(&f.dir)?;
        state.write(f.vfs.as_ref(), &f.dir, &f.stats)?;
        self.checkpointed.store(seqno, Ordering::Release);
        // Files of shards a published merge replaced may go once a durable state file no longer lists them:
        // those not in this version. Any other file not in it belongs to a shard a flush or a merge is
        // building or has published since the version was pinned (the flusher and the merger run
        // concurrently, so such ids may lie below ids of the version): kept.
        let live: HashSet<u64> = shards.iter().map(|s| s.id).collect();
        let (still, gone): (Vec<u64>, Vec<u64>) = self
            .core
            .take_replaced()
            .into_iter()
            .partition(|id| live.contains(id));
        self.core.return_replaced(still);
        let gone: HashSet<u64> = gone.into_iter().collect();
        persisted.retain(|id| !gone.contains(id));
        *self.persisted.lock() = persisted;
        for id in gone {
            let path = f.dir.join(shard_file_name(id));
            if f.vfs.exists(&path) {
                f.vfs.remove_file(&path)?;
            }
        }
        Ok(())
    }

    fn checkpointed_seqno(&self) -> u64 {
        self.checkpointed.load(Ordering::Acquire)
    }

    fn check(&self) -> Result<CheckReport> {
        let _g = self.checkpoint_lock.lock();
        let v = self.core.version();
        let persisted = self.persisted.lock().clone();
        let mut report = CheckReport {
            height: v.levels.len() as u32,
            ..CheckReport::default()
        };
        let f = &self.files;
        for slot in v.shards_newest_first() {
            if !persisted.contains(&slot.id) && !self.store.file_backed(&slot.shard) {
                continue;
            }
            let file = ShardFile::open(
                &f.vfs,
                &f.dir.join(shard_file_name(slot.id)),
                slot.id,
                f.page_size,
                f.direct,
                f.stats.clone(),
            )?;
            let records = file.verify_all()?;
            report.pages_checked += file.header.total_pages();
            if records != slot.shard.len() as u64
                || file.header.tombstones != slot.shard.tombstone_count() as u64
            {
                return Err(Error::corruption(
                    &file.path,
                    0,
                    format!(
                        "shard file has {records} records and {} tombstones, the loaded shard {} and {}",
                        file.header.tombstones,
                        slot.shard.len(),
                        slot.shard.tombstone_count()
                    ),
                ));
            }
        }
        report.records = self.core.len();
        Ok(report)
    }

    fn stats(&self) -> IndexStats {
        let s = self.core.stats();
        IndexStats {
            records: self.core.len(),
            height: s.levels.len() as u32,
            pages: 0,
            free_pages: 0,
            page_size: self.files.page_size,
            cache_frames: 0,
            cache_pages: 0,
            cache_dirty: 0,
            checkpointed_seqno: self.checkpointed_seqno(),
        }
    }

    fn io(&self) -> IoSnapshot {
        self.files.stats.snapshot()
    }

    fn as_sampling(&self) -> Option<&dyn SamplingIndex> {
        Some(self)
    }

    fn family_stats(&self) -> Option<serde_json::Value> {
        Some(serde_json::to_value(self.core.stats()).expect("statistics serialize"))
    }

    fn settle(&self) -> Result<()> {
        self.core.quiesce(false)
    }
}

impl<S: Shard> SamplingIndex for DynamizedIndex<S> {
    fn count_range(&self, range: &KeyRange) -> Result<u64> {
        match bounds(range)? {
            Some((lo, hi)) => self.core.count(lo, hi),
            None => Ok(0),
        }
    }

    fn sample_visit(
        &self,
        range: &KeyRange,
        k: usize,
        rng: &mut dyn rand::RngCore,
        visit: &mut crate::index::SampleVisitor<'_>,
    ) -> Result<()> {
        let Some((lo, hi)) = bounds(range)? else {
            return Ok(());
        };
        let mut recs = Vec::with_capacity(k.min(1 << 16));
        if self.core.options().weighted {
            self.core
                .sample(&WeightedRangeSample { lo, hi }, k, rng, &mut recs)?;
        } else {
            self.core
                .sample(&RangeSample { lo, hi }, k, rng, &mut recs)?;
        }
        for r in &recs {
            visit(&r.key.to_be_bytes(), &r.value.to_be_bytes())?;
        }
        Ok(())
    }
}

/// True if `dir` holds a dynamized index's state.
pub fn exists(vfs: &dyn Vfs, dir: &Path) -> bool {
    vfs.exists(&dir.join(STATE))
}
