//! # Index families
//!
//! Every family implements [`OrderedIndex`] over *encoded* keys and values: byte strings whose byte-wise order
//! is the key order (see `types`). The `Db` shell adds the write-ahead log, recovery and typed access on top,
//! so a family only has to apply batches, answer reads, and checkpoint its own state.
//!
//! Families that can sample also implement [`SamplingIndex`].
//!
//! Contract for every family:
//! * `apply` makes a whole batch visible at once: a concurrent reader sees all of it or none of it.
//! * `checkpoint(seqno)` makes the index state durable and records `seqno`, the last write-ahead-log sequence
//!   number it contains; after a crash, `checkpointed_seqno()` tells the shell where to resume WAL replay. A
//!   family that can fall back to an older checkpoint (two meta slots) reports why it did through
//!   `spare_checkpoint_damage()`, so the shell can tell whether the fallback lost acknowledged writes.
//! * Bytes read from disk are untrusted: damage is `Error::Corruption`, never a panic.

pub mod betree;
pub mod btree;
pub mod dynamized;
pub mod family;
pub mod hash;
pub mod learned;
pub(crate) mod u64_keys;

pub use family::{Capabilities, IndexConfig, IndexContext, IndexFamily, IndexKind};

use crate::error::Result;
use crate::storage::IoSnapshot;
use std::ops::Bound;

/// One write of a batch, on encoded bytes.
#[derive(Debug, Clone, PartialEq)]
pub enum WriteOp {
    /// Insert or overwrite.
    Put { key: Vec<u8>, value: Vec<u8> },
    /// Insert or overwrite with a sampling weight (finite, ≥ 0); only weighted indexes take it.
    PutWeighted {
        key: Vec<u8>,
        value: Vec<u8>,
        weight: f64,
    },
    /// Remove (no effect if absent).
    Delete { key: Vec<u8> },
    /// Combine `operand` with the key's value (absent: none) by the index's merge operator; only indexes
    /// created with one take it (the Bε-tree).
    Merge { key: Vec<u8>, operand: Vec<u8> },
}

impl WriteOp {
    /// A put of `value` under `key`, or a delete of `key` when `value` is `None`.
    pub fn single(key: &[u8], value: Option<&[u8]>) -> WriteOp {
        match value {
            Some(value) => WriteOp::Put {
                key: key.to_vec(),
                value: value.to_vec(),
            },
            None => WriteOp::Delete { key: key.to_vec() },
        }
    }

    pub fn key(&self) -> &[u8] {
        match self {
            WriteOp::Put { key, .. }
            | WriteOp::PutWeighted { key, .. }
            | WriteOp::Delete { key }
            | WriteOp::Merge { key, .. } => key,
        }
    }
}

/// Direction of a scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Forward,
    Reverse,
}

/// A key range over encoded keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRange {
    pub lo: Bound<Vec<u8>>,
    pub hi: Bound<Vec<u8>>,
}

impl KeyRange {
    /// Every key.
    pub fn all() -> Self {
        KeyRange {
            lo: Bound::Unbounded,
            hi: Bound::Unbounded,
        }
    }
    /// `[lo, hi]`, both ends included.
    pub fn inclusive(lo: Vec<u8>, hi: Vec<u8>) -> Self {
        KeyRange {
            lo: Bound::Included(lo),
            hi: Bound::Included(hi),
        }
    }
    pub fn lo_ref(&self) -> Bound<&[u8]> {
        self.lo.as_ref().map(|v| v.as_slice())
    }
    pub fn hi_ref(&self) -> Bound<&[u8]> {
        self.hi.as_ref().map(|v| v.as_slice())
    }
    /// True if `key` lies below the upper end.
    pub fn below_hi(&self, key: &[u8]) -> bool {
        match &self.hi {
            Bound::Unbounded => true,
            Bound::Included(h) => key <= h.as_slice(),
            Bound::Excluded(h) => key < h.as_slice(),
        }
    }
    /// True if `key` lies above the lower end.
    pub fn above_lo(&self, key: &[u8]) -> bool {
        match &self.lo {
            Bound::Unbounded => true,
            Bound::Included(l) => key >= l.as_slice(),
            Bound::Excluded(l) => key > l.as_slice(),
        }
    }
}

/// Numbers an index reports about itself.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct IndexStats {
    /// Live records.
    pub records: u64,
    /// Levels from root to leaf (1 = the root is a leaf).
    pub height: u32,
    /// Pages in the page file (high-water mark).
    pub pages: u64,
    /// Pages free or awaiting reuse after the next checkpoint.
    pub free_pages: u64,
    pub page_size: usize,
    /// Buffer pool frames, and how many hold a page / a dirty page.
    pub cache_frames: usize,
    pub cache_pages: usize,
    pub cache_dirty: usize,
    /// WAL sequence number contained in the last checkpoint.
    pub checkpointed_seqno: u64,
}

/// Receives one record of a scan (key, value); returns whether the scan should go on.
pub type RecordVisitor<'a> = dyn FnMut(&[u8], &[u8]) -> Result<bool> + 'a;

/// What an integrity check verified.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct CheckReport {
    pub pages_checked: u64,
    pub records: u64,
    pub height: u32,
    pub free_pages: u64,
    /// Valid records in the live write-ahead log (filled in by the database shell).
    pub wal_records: u64,
    /// Findings that are not damage (e.g. a torn WAL tail left by a crash).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// A visitor that appends every record it is given to `out` (owned copies) and asks for more.
pub(crate) fn collect_into(
    out: &mut Vec<(Vec<u8>, Vec<u8>)>,
) -> impl FnMut(&[u8], &[u8]) -> Result<bool> + '_ {
    |k, v| {
        out.push((k.to_vec(), v.to_vec()));
        Ok(true)
    }
}

/// A point-in-time view of an index (families with `Capabilities::snapshots`): reads through it see exactly
/// the writes applied before it was taken, whatever is written afterwards, and a scan through it never
/// sees part of a batch. It keeps what it reads alive (old versions are not reclaimed) until dropped.
pub trait IndexSnapshot: Send + Sync {
    /// Looks `key` up as of the snapshot; on a hit, replaces `out`'s contents with the value.
    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool>;
    /// Calls `visit(key, value)` for up to `max` records of `range` as of the snapshot, in `dir` order,
    /// until it returns `false`; returns how many records it visited.
    fn scan_visit(
        &self,
        range: &KeyRange,
        dir: Direction,
        max: usize,
        visit: &mut RecordVisitor<'_>,
    ) -> Result<usize>;
}

/// The core trait every index family implements, over encoded keys and values.
pub trait OrderedIndex: Send + Sync {
    /// A point-in-time view, for families with `Capabilities::snapshots` (`None` for the others).
    fn snapshot(&self) -> Option<Box<dyn IndexSnapshot>> {
        None
    }
    /// Looks `key` up; on a hit, replaces `out`'s contents with the value and returns true.
    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool>;
    /// Looks every key of `keys` up, appending one answer per key to `out` in order (`None`: absent).
    /// Each answer is what `get` would give; families may interleave the lookups so that their cache
    /// misses overlap (the B+-tree does). On an error nothing is appended.
    fn get_many(&self, keys: &[&[u8]], out: &mut Vec<Option<Vec<u8>>>) -> Result<()> {
        let mut answers = Vec::with_capacity(keys.len());
        for key in keys {
            let mut value = Vec::new();
            answers.push(self.get(key, &mut value)?.then_some(value));
        }
        out.append(&mut answers);
        Ok(())
    }
    /// Checks a batch the shell is about to log against what this index takes (merges, entry sizes), so
    /// that `apply` does not fail on it. By default merges are refused.
    fn validate_batch(&self, ops: &[WriteOp]) -> Result<()> {
        if ops.iter().any(|op| matches!(op, WriteOp::Merge { .. })) {
            return Err(crate::error::Error::invalid(
                "this index family has no merge operator (merges need a Bε-tree created with one)",
            ));
        }
        Ok(())
    }
    /// Applies a batch atomically with respect to readers. The caller validated keys and values and ran
    /// `validate_batch`.
    fn apply(&self, ops: &[WriteOp]) -> Result<()>;
    /// True when the family applies a single put or delete from borrowed bytes
    /// ([`apply_borrowed`](Self::apply_borrowed)) and its `validate_batch` accepts every put and delete of
    /// valid keys and values: the shell then writes such ops without building a [`WriteOp`] (no allocation
    /// on the writer's path) and without calling `validate_batch`.
    fn applies_borrowed(&self) -> bool {
        false
    }
    /// [`apply`](Self::apply) of one put of `value` under `key` (`None`: a delete of `key`). The default
    /// builds the op.
    fn apply_borrowed(&self, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        self.apply(&[WriteOp::single(key, value)])
    }
    /// Calls `visit(key, value)` for up to `max` records of `range` in `dir` order, until it returns
    /// `false`; returns how many records it visited. The visitor runs while the index holds its read locks:
    /// it must not call into the same index.
    fn scan_visit(
        &self,
        range: &KeyRange,
        dir: Direction,
        max: usize,
        visit: &mut RecordVisitor<'_>,
    ) -> Result<usize>;
    /// Appends to `out` up to `max` records of `range`, in `dir` order.
    fn scan(
        &self,
        range: &KeyRange,
        dir: Direction,
        max: usize,
        out: &mut Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<()> {
        self.scan_visit(range, dir, max, &mut collect_into(out))
            .map(drop)
    }
    /// Number of live records.
    fn len(&self) -> u64;
    /// True when there are no records.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Largest key length this index accepts.
    fn max_key_len(&self) -> usize;
    /// Makes the state durable and records `seqno` as contained in it.
    fn checkpoint(&self, seqno: u64) -> Result<()>;
    /// Starts a checkpoint of everything applied so far, up to WAL seqno `seqno`, whose writing can run
    /// while writes go on: the state is sealed now (quickly, overwriting nothing the last durable checkpoint
    /// references: the shell syncs the WAL's checkpoint intent only before `finish_checkpoint`),
    /// and [`finish_checkpoint`](Self::finish_checkpoint), called once from another thread, writes it.
    /// Returns false, having done nothing, when the family cannot (the default): the caller then
    /// checkpoints at once with [`checkpoint`](Self::checkpoint).
    fn begin_checkpoint(&self, seqno: u64) -> Result<bool> {
        let _ = seqno;
        Ok(false)
    }
    /// Writes the checkpoint `begin_checkpoint` sealed and makes it durable; afterwards
    /// [`checkpointed_seqno`](Self::checkpointed_seqno) is its seqno. Nothing to do by default.
    fn finish_checkpoint(&self) -> Result<()> {
        Ok(())
    }
    /// The WAL sequence number contained in the last checkpoint.
    fn checkpointed_seqno(&self) -> u64;
    /// Why the index's spare checkpoint (the older one a crash could fall back to, e.g. a page file's other
    /// meta slot) is unusable, if it is: found when opening or by the last `check`, cleared by the next
    /// checkpoint. Families whose checkpoints are replaced atomically have none.
    fn spare_checkpoint_damage(&self) -> Option<crate::error::Damage> {
        None
    }
    /// Waits until background work that earlier writes started (reconstructions) has finished; nothing to
    /// wait for by default.
    fn settle(&self) -> Result<()> {
        Ok(())
    }
    /// Verifies every checksum and structural invariant.
    fn check(&self) -> Result<CheckReport>;
    fn stats(&self) -> IndexStats;
    /// I/O counters of this index's files.
    fn io(&self) -> IoSnapshot;
    /// Builds the index from records in strictly increasing key order; the index must be empty. The result is
    /// checkpointed with `seqno`. Families without a bulk path return `Error::InvalidArgument`.
    fn bulk_load(
        &self,
        records: &mut dyn Iterator<Item = Result<(Vec<u8>, Vec<u8>)>>,
        seqno: u64,
    ) -> Result<u64> {
        let _ = (records, seqno);
        Err(crate::error::Error::invalid(
            "this index family has no bulk load",
        ))
    }
    /// The sampling interface, for families that have one.
    fn as_sampling(&self) -> Option<&dyn SamplingIndex> {
        None
    }
    /// The family's own statistics (a dynamized index: levels, shards, deleted entries, memory, counters),
    /// reported under the family's name by `RawDb::stats`; `None` if it has none beyond `stats`.
    fn family_stats(&self) -> Option<serde_json::Value> {
        None
    }
}

/// Checks a tree's root record read from `file` against what the caller expects: the same key and value
/// widths (else `Incompatible`) and a root page inside the file with a plausible height (else corruption).
pub(crate) fn check_root_record(
    file: &crate::storage::PageFile,
    family: &str,
    widths: (Option<usize>, Option<usize>),
    expected: (Option<usize>, Option<usize>),
    root: crate::storage::PageId,
    height: u64,
) -> Result<()> {
    if widths != expected {
        return Err(crate::error::Error::Incompatible(format!(
            "page file holds a {family} with key width {:?} and value width {:?}, expected {:?} and {:?}",
            widths.0, widths.1, expected.0, expected.1
        )));
    }
    if root < 2 || root >= file.page_count() || height == 0 || height > 64 {
        return Err(crate::error::Error::corruption(
            file.path(),
            0,
            format!(
                "{family} root record points to page {root} of {} with height {height}",
                file.page_count()
            ),
        ));
    }
    Ok(())
}

/// Receives one sampled record (key, value); an error stops the sampling and is returned by it.
pub type SampleVisitor<'a> = dyn FnMut(&[u8], &[u8]) -> Result<()> + 'a;

/// Range counting and independent range sampling.
pub trait SamplingIndex: Send + Sync {
    /// Number of live records in `range`.
    fn count_range(&self, range: &KeyRange) -> Result<u64>;
    /// Hands `k` independent uniform samples (with replacement) of the live records in `range` to `visit`,
    /// without allocating per sample. An empty range visits nothing.
    fn sample_visit(
        &self,
        range: &KeyRange,
        k: usize,
        rng: &mut dyn rand::RngCore,
        visit: &mut SampleVisitor<'_>,
    ) -> Result<()>;
    /// Appends `k` independent uniform samples (with replacement) of the live records in `range` to `out`.
    /// An empty range appends nothing.
    fn sample_range(
        &self,
        range: &KeyRange,
        k: usize,
        rng: &mut dyn rand::RngCore,
        out: &mut Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<()> {
        self.sample_visit(range, k, rng, &mut |key, value| {
            out.push((key.to_vec(), value.to_vec()));
            Ok(())
        })
    }
}
