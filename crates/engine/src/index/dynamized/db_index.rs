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

use super::buffer::{BufferEntry, OpKind};
use super::core::{Dynamized, InMemory};
use super::options::{DynOptions, RuntimeOptions};
use super::persist::{STATE, State};
use super::read::{RangeSample, WeightedRangeSample};
use super::shard::{BuildOptions, Shard};
use super::shard_file::{ShardFile, parse_shard_file_name, shard_file_name, write_shard_file};
use super::version::ShardSlot;
use crate::error::{Error, Result};
use crate::index::{
    CheckReport, Direction, IndexStats, KeyRange, OrderedIndex, RecordVisitor, SamplingIndex,
    WriteOp,
};
use crate::storage::{IoSnapshot, IoStats, Vfs};
use parking_lot::Mutex;
use std::collections::HashSet;
use std::ops::Bound;
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

/// A dynamized index with its files.
pub struct DynamizedIndex<S: Shard> {
    core: Dynamized<S>,
    files: DynFiles,
    checkpointed: AtomicU64,
    /// Shards with a synced file.
    persisted: Mutex<HashSet<u64>>,
    checkpoint_lock: Mutex<()>,
}

fn decode_u64(bytes: &[u8], what: &str) -> Result<u64> {
    let arr: [u8; 8] = bytes.try_into().map_err(|_| {
        Error::invalid(format!(
            "a dynamized index takes 8-byte u64 {what}s, got {} bytes",
            bytes.len()
        ))
    })?;
    Ok(u64::from_be_bytes(arr))
}

/// The inclusive `u64` bounds of `range`, or `None` if it is empty.
fn bounds(range: &KeyRange) -> Result<Option<(u64, u64)>> {
    let lo = match &range.lo {
        Bound::Unbounded => Some(0),
        Bound::Included(k) => Some(decode_u64(k, "key")?),
        Bound::Excluded(k) => decode_u64(k, "key")?.checked_add(1),
    };
    let hi = match &range.hi {
        Bound::Unbounded => Some(u64::MAX),
        Bound::Included(k) => Some(decode_u64(k, "key")?),
        Bound::Excluded(k) => decode_u64(k, "key")?.checked_sub(1),
    };
    Ok(match (lo, hi) {
        (Some(lo), Some(hi)) if lo <= hi => Some((lo, hi)),
        _ => None,
    })
}

impl<S: Shard> DynamizedIndex<S> {
    /// Creates an empty index in `files.dir` and writes its first state file.
    pub fn create(files: DynFiles, opts: DynOptions, rt: RuntimeOptions) -> Result<Self> {
        let core = Dynamized::new(opts, rt)?;
        State::default().write(files.vfs.as_ref(), &files.dir, &files.stats)?;
        Ok(DynamizedIndex {
            core,
            files,
            checkpointed: AtomicU64::new(0),
            persisted: Mutex::new(HashSet::new()),
            checkpoint_lock: Mutex::new(()),
        })
    }

    /// Opens the index at its last checkpoint: loads every shard it lists, restores tags and buffered
    /// operations, and removes shard files no checkpoint refers to.
    pub fn open(files: DynFiles, opts: DynOptions, rt: RuntimeOptions) -> Result<Self> {
        opts.validate()?;
        let state = State::read(files.vfs.as_ref(), &files.dir, &files.stats)?;
        let build = BuildOptions {
            weighted: opts.weighted,
        };
        let mut levels = Vec::with_capacity(state.levels.len());
        let mut persisted = HashSet::new();
        for level in &state.levels {
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
                let loaded = file.read_all()?;
                let n = loaded.run.records.len() as u64;
                let slot = ShardSlot::from_parts(
                    *id,
                    S::build(loaded.run, build)?,
                    loaded.key_filter,
                    loaded.tomb_filter,
                );
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
                persisted.insert(*id);
                shards.push(Arc::new(slot));
            }
            levels.push(shards);
        }
        let max_id = persisted.iter().max().copied();
        if max_id.is_some_and(|m| m >= state.next_shard_id) {
            return Err(Error::corruption(
                files.dir.join(STATE),
                0,
                "a shard id is not below the next shard id",
            ));
        }
        let core =
            Dynamized::with_parts(opts, rt, Box::new(InMemory), levels, state.next_shard_id)?;
        for chunk in state.ops.chunks(core.options().buffer_capacity) {
            core.write_batch(chunk)?;
        }
        let index = DynamizedIndex {
            core,
            files,
            checkpointed: AtomicU64::new(state.seqno),
            persisted: Mutex::new(persisted),
            checkpoint_lock: Mutex::new(()),
        };
        index.remove_unlisted(|_| false)?;
        Ok(index)
    }

    /// The framework underneath.
    pub fn core(&self) -> &Dynamized<S> {
        &self.core
    }

    /// Removes shard files that are not persisted shards of a live version, except those `keep` names.
    fn remove_unlisted(&self, keep: impl Fn(u64) -> bool) -> Result<()> {
        let persisted = self.persisted.lock();
        for name in self.files.vfs.list_dir(&self.files.dir)? {
            if let Some(id) = parse_shard_file_name(&name)
                && !persisted.contains(&id)
                && !keep(id)
            {
                self.files.vfs.remove_file(&self.files.dir.join(&name))?;
            }
        }
        Ok(())
    }

    fn apply_ops(&self, ops: &[WriteOp]) -> Result<()> {
        let mut entries = Vec::with_capacity(ops.len());
        for op in ops {
            entries.push(match op {
                WriteOp::Put { key, value } => BufferEntry {
                    key: decode_u64(key, "key")?,
                    value: decode_u64(value, "value")?,
                    weight: 1.0,
                    kind: OpKind::Put,
                },
                WriteOp::PutWeighted { key, value, weight } => BufferEntry {
                    key: decode_u64(key, "key")?,
                    value: decode_u64(value, "value")?,
                    weight: *weight,
                    kind: OpKind::Put,
                },
                WriteOp::Delete { key } => BufferEntry {
                    key: decode_u64(key, "key")?,
                    value: 0,
                    weight: 0.0,
                    kind: OpKind::Delete,
                },
            });
        }
        self.core.write_batch(&entries)
    }
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

    fn weighted(&self) -> bool {
        self.core.options().weighted
    }

    fn checkpoint(&self, seqno: u64) -> Result<()> {
        let _g = self.checkpoint_lock.lock();
        self.core.check_failed()?;
        let v = self.core.version();
        let next = self.core.next_shard_id();
        let f = &self.files;
        let mut persisted = self.persisted.lock().clone();
        for slot in v.shards_newest_first() {
            if persisted.insert(slot.id) {
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
        State::of_version(&v, seqno, next).write(f.vfs.as_ref(), &f.dir, &f.stats)?;
        self.checkpointed.store(seqno, Ordering::Release);
        // Files of shards that no longer exist in this version may go; shards newer than it (a
        // reconstruction running now) have higher ids and are kept.
        let live: HashSet<u64> = v.shards_newest_first().map(|s| s.id).collect();
        let max_live = live.iter().max().copied().unwrap_or(0);
        persisted.retain(|id| live.contains(id) || *id > max_live);
        *self.persisted.lock() = persisted;
        self.remove_unlisted(|id| id > max_live)
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
            if !persisted.contains(&slot.id) {
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
            let loaded = file.read_all()?;
            report.pages_checked += file.header.total_pages();
            if loaded.run.records.len() != slot.shard.len() {
                return Err(Error::corruption(
                    &file.path,
                    0,
                    format!(
                        "shard file has {} records, the loaded shard {}",
                        loaded.run.records.len(),
                        slot.shard.len()
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
}

impl<S: Shard> SamplingIndex for DynamizedIndex<S> {
    fn count_range(&self, range: &KeyRange) -> Result<u64> {
        match bounds(range)? {
            Some((lo, hi)) => self.core.count(lo, hi),
            None => Ok(0),
        }
    }

    fn sample_range(
        &self,
        range: &KeyRange,
        k: usize,
        rng: &mut dyn rand::RngCore,
        out: &mut Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<()> {
        let Some((lo, hi)) = bounds(range)? else {
            return Ok(());
        };
        let mut recs = Vec::with_capacity(k);
        if self.core.options().weighted {
            self.core
                .sample(&WeightedRangeSample { lo, hi }, k, rng, &mut recs)?;
        } else {
            self.core
                .sample(&RangeSample { lo, hi }, k, rng, &mut recs)?;
        }
        out.extend(
            recs.iter()
                .map(|r| (r.key.to_be_bytes().to_vec(), r.value.to_be_bytes().to_vec())),
        );
        Ok(())
    }
}

/// True if `dir` holds a dynamized index's state.
pub fn exists(vfs: &dyn Vfs, dir: &Path) -> bool {
    vfs.exists(&dir.join(STATE))
}
