//! [`BeTree`]: the Bε-tree core as an [`OrderedIndex`] for the `Db` shell — a lock around the core,
//! checkpoints in the page file's root record, and merges (upserts) by a named operator.
//!
//! Durability is the shell's WAL plus these checkpoints: between checkpoints, changed nodes are written to
//! fresh pages (copy-on-write via `BufferPool::write_cow`), so the last checkpoint's tree stays intact on
//! disk until the next `commit` switches the root record atomically. Recovery opens the last checkpoint and
//! the shell replays the WAL on top.
//!
//! Readers share the lock; a batch takes it exclusively, so readers see all of a batch or none of it.

use super::check;
use super::merge_ops::{self, Merge};
use super::meta::TreeMeta;
use super::node::NodeFormat;
use super::tree::{BeTreeCore, FlushStats, messages_of, validate_epsilon};
use crate::error::{Error, Result};
use crate::index::{
    CheckReport, Direction, IndexStats, KeyRange, OrderedIndex, RecordVisitor, WriteOp,
};
use crate::storage::page_file::SealedCommit;
use crate::storage::{BufferPool, IoSnapshot, IoStats, PageFile};
use parking_lot::{RwLock, RwLockReadGuard};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Options of a Bε-tree database, fixed at creation (recorded in the manifest).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BeTreeOptions {
    /// ε in (0, 1]: an inner node has about (B/8)^ε children, the rest of its page is buffer. 0.5 by default.
    pub epsilon: f64,
    /// The merge operator of `WriteOp::Merge` (a name from `BUILTIN_MERGE_OPERATORS`); without one, merges
    /// are refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merge_operator: Option<String>,
}

impl Default for BeTreeOptions {
    fn default() -> Self {
        BeTreeOptions {
            epsilon: 0.5,
            merge_operator: None,
        }
    }
}

/// A Bε-tree over encoded keys and values.
pub struct BeTree {
    core: RwLock<BeTreeCore>,
    stats: Arc<IoStats>,
    seqno: AtomicU64,
    /// The merge operator, if the tree has one (its check runs when merges are validated).
    merge: Option<Merge>,
    /// A write failed part-way: the tree in memory is not trusted any more (reads, writes and checkpoints
    /// fail until the database is reopened, which recovers from the checkpoint and the WAL).
    broken: AtomicBool,
    /// A checkpoint sealed by `begin_checkpoint` and not yet finished: its commit, seqno and pool.
    sealed: parking_lot::Mutex<Option<(SealedCommit, u64, Arc<BufferPool>)>>,
}

/// The page file's root record for a checkpoint of `core` at `seqno`.
fn root_record(core: &BeTreeCore, seqno: u64) -> Vec<u8> {
    TreeMeta {
        core: core.state(),
        seqno,
    }
    .encode()
}

impl std::fmt::Debug for BeTree {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let core = self.core.read();
        f.debug_struct("BeTree")
            .field("root", &core.root())
            .field("height", &core.height())
            .field("fanout", &core.fanout())
            .finish()
    }
}

impl BeTree {
    /// Creates an empty tree in a freshly created page file and checkpoints it.
    pub fn create(
        file: PageFile,
        format: NodeFormat,
        merge: Option<Merge>,
        epsilon: f64,
        cache_bytes: usize,
        stats: Arc<IoStats>,
    ) -> Result<BeTree> {
        validate_epsilon(epsilon)?;
        let pool = BufferPool::new(file, cache_bytes, None);
        let core = BeTreeCore::create(pool, epsilon, format, operator_of(&merge))?;
        let tree = BeTree {
            core: RwLock::new(core),
            stats,
            seqno: AtomicU64::new(0),
            merge,
            broken: AtomicBool::new(false),
            sealed: parking_lot::Mutex::new(None),
        };
        tree.checkpoint(0)?;
        Ok(tree)
    }

    /// Opens the tree of an existing page file at its last checkpoint; `format` must be the one it was
    /// created with.
    pub fn open(
        file: PageFile,
        format: NodeFormat,
        merge: Option<Merge>,
        cache_bytes: usize,
        stats: Arc<IoStats>,
    ) -> Result<BeTree> {
        let meta = TreeMeta::decode(&file.user_root()).map_err(|detail| {
            Error::corruption(file.path(), 0, format!("Bε-tree root record: {detail}"))
        })?;
        let found = meta.core.format;
        crate::index::check_root_record(
            &file,
            "Bε-tree",
            (found.key_width, found.value_width),
            (format.key_width, format.value_width),
            meta.core.root,
            meta.core.height.into(),
        )?;
        let pool = BufferPool::new(file, cache_bytes, None);
        let core = BeTreeCore::open(pool, meta.core, operator_of(&merge))?;
        Ok(BeTree {
            core: RwLock::new(core),
            stats,
            seqno: AtomicU64::new(meta.seqno),
            merge,
            broken: AtomicBool::new(false),
            sealed: parking_lot::Mutex::new(None),
        })
    }

    /// The core, read-locked (for statistics, benchmarks and tests).
    pub fn core(&self) -> RwLockReadGuard<'_, BeTreeCore> {
        self.core.read()
    }

    /// Refuses to go on after a write failed part-way.
    fn usable(&self) -> Result<()> {
        if self.broken.load(Ordering::Acquire) {
            return Err(Error::Poisoned(
                "a write to the Bε-tree failed part-way; reopen the database to recover it".into(),
            ));
        }
        Ok(())
    }

    /// The core for reading, unless a write failed part-way.
    fn readable(&self) -> Result<RwLockReadGuard<'_, BeTreeCore>> {
        let core = self.core.read();
        self.usable()?;
        Ok(core)
    }

    /// The write path's counters.
    pub fn flush_stats(&self) -> FlushStats {
        self.core.read().flush_stats().clone()
    }
}

/// The operator the core applies: the tree's, or one that keeps the value (merges are then refused before
/// they reach it).
fn operator_of(merge: &Option<Merge>) -> super::message::MergeOperator {
    merge
        .as_ref()
        .map_or_else(merge_ops::refusing, |m| m.operator.clone())
}

/// A key for an error message: `u64` keys in decimal, others as text or hex.
fn show_key(key: &[u8]) -> String {
    match <[u8; 8]>::try_from(key) {
        Ok(b) => u64::from_be_bytes(b).to_string(),
        Err(_) => match std::str::from_utf8(key) {
            Ok(s) if !s.chars().any(char::is_control) => format!("{s:?}"),
            _ => key.iter().map(|b| format!("{b:02x}")).collect(),
        },
    }
}

impl OrderedIndex for BeTree {
    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        match self.readable()?.get(key)? {
            Some(v) => {
                out.clear();
                out.extend_from_slice(&v);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Besides sizes: merges need an operator, and a checked operator's merges are tried against the keys'
    /// current values (read now, then carried through the batch in order), so that a merge that would give
    /// an invalid value is refused before anything is logged. The shell calls this under its writer lock,
    /// so no write comes between the check and the apply.
    fn validate_batch(&self, ops: &[WriteOp]) -> Result<()> {
        let merges = ops.iter().any(|op| matches!(op, WriteOp::Merge { .. }));
        let Some(merge) = self.merge.as_ref().filter(|_| merges) else {
            if merges {
                return Err(Error::invalid(
                    "this Bε-tree has no merge operator (create it with one to use merges)",
                ));
            }
            return self.core.read().check_ops(ops);
        };
        let core = self.readable()?;
        core.check_ops(ops)?;
        let Some(check) = &merge.check else {
            return Ok(());
        };
        let mut current: std::collections::HashMap<&[u8], Option<Vec<u8>>> =
            std::collections::HashMap::new();
        for op in ops {
            let key = op.key();
            if !current.contains_key(key) {
                current.insert(key, core.get(key)?);
            }
            let value = current.get_mut(key).expect("just inserted");
            match op {
                WriteOp::Put { value: v, .. } | WriteOp::PutWeighted { value: v, .. } => {
                    *value = Some(v.clone());
                }
                WriteOp::Delete { .. } => *value = None,
                WriteOp::Merge { operand, .. } => {
                    check(value.as_deref(), operand).map_err(|why| {
                        Error::invalid(format!("merge refused on key {}: {why}", show_key(key)))
                    })?;
                    *value = (merge.operator)(key, value.as_deref(), operand);
                }
            }
        }
        Ok(())
    }

    fn apply(&self, ops: &[WriteOp]) -> Result<()> {
        let mut core = self.core.write();
        self.usable()?;
        let msgs = messages_of(ops);
        // Refused batches change nothing.
        core.check_messages(&msgs)?;
        let result = core.apply_checked(msgs);
        if result.is_err() {
            // Marked under the write lock, so no reader sees the tree in between.
            self.broken.store(true, Ordering::Release);
            core.forget_cache();
        }
        result
    }

    fn scan_visit(
        &self,
        range: &KeyRange,
        dir: Direction,
        max: usize,
        visit: &mut RecordVisitor<'_>,
    ) -> Result<usize> {
        self.readable()?.scan(range, dir, max, visit)
    }

    /// Counts the live records with a scan (O(N/B) page reads): buffered puts and deletes do not say
    /// whether their key existed. On a read error (or after a failed write), the records in leaves.
    fn len(&self) -> u64 {
        let core = self.core.read();
        if self.usable().is_err() {
            return core.leaf_records();
        }
        core.scan(
            &KeyRange::all(),
            Direction::Forward,
            usize::MAX,
            &mut |_, _| Ok(true),
        )
        .map_or(core.leaf_records(), |n| n as u64)
    }

    fn max_key_len(&self) -> usize {
        let core = self.core.read();
        let limit = core.max_entry_bytes();
        limit - core.format().value_width.unwrap_or(limit / 2)
    }

    fn checkpoint(&self, seqno: u64) -> Result<()> {
        let mut core = self.core.write();
        self.usable()?;
        core.commit(|core| root_record(core, seqno))?;
        self.seqno.store(seqno, Ordering::Release);
        Ok(())
    }

    /// Seals the tree as it is (its root written, its pages copied on write from now on) and leaves the
    /// writing to `finish_checkpoint`.
    fn begin_checkpoint(&self, seqno: u64) -> Result<bool> {
        let mut core = self.core.write();
        self.usable()?;
        let sealed = core.begin_commit(|core| root_record(core, seqno))?;
        *self.sealed.lock() = Some((sealed, seqno, core.shared_pool()));
        Ok(true)
    }

    fn finish_checkpoint(&self) -> Result<()> {
        let Some((sealed, seqno, pool)) = self.sealed.lock().take() else {
            return Ok(());
        };
        pool.finish_commit(sealed)?;
        self.seqno.store(seqno, Ordering::Release);
        Ok(())
    }

    fn checkpointed_seqno(&self) -> u64 {
        self.seqno.load(Ordering::Acquire)
    }

    fn spare_checkpoint_damage(&self) -> Option<crate::error::Damage> {
        self.core.read().pool().file().spare_damage()
    }

    fn check(&self) -> Result<CheckReport> {
        let mut core = self.core.write();
        self.usable()?;
        // The check reads the root from its page.
        core.sync_root()?;
        check::check(&core)
    }

    fn stats(&self) -> IndexStats {
        let records = self.len();
        let core = self.core.read();
        let pool = core.pool();
        let file = pool.file();
        IndexStats {
            records,
            height: core.height() as u32,
            pages: file.page_count(),
            free_pages: file.unreachable_pages().len() as u64,
            page_size: file.page_size(),
            cache_frames: pool.frame_count(),
            cache_pages: pool.cached_count(),
            cache_dirty: pool.dirty_count(),
            checkpointed_seqno: self.checkpointed_seqno(),
        }
    }

    fn io(&self) -> IoSnapshot {
        self.stats.snapshot()
    }
}
