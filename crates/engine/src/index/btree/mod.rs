//! # B+-tree with subtree counts (the "aggregate B+-tree" / AB-tree)
//!
//! A B+-tree on the buffer pool. Inner nodes store, for every child, the number of records in its subtree, so
//! that `count_range` is O(log n) and `sample_range` draws each of its k independent uniform samples with one
//! root-to-leaf walk that picks children in proportion to their counts (Olken's method).
//!
//! ## Structure and invariants
//! * Height h ≥ 1; the root is a leaf when h = 1; every leaf is at depth h − 1; inner nodes store their level
//!   (1 = children are leaves), checked on every descent.
//! * For separator key(i) of an inner node: every key of child i−1 < key(i) ≤ every key of child i.
//! * Every inner count equals the number of records in that child's subtree; the root's total is `len`.
//! * Leaves have no sibling links (copy-on-write would have to rewrite neighbours): scans walk a stack of
//!   (node, child index) and re-descend from the root between chunks.
//! * Values that do not fit inline (byte-string values beyond about a quarter page) live in a chain of
//!   overflow pages referenced from the leaf; chains are never modified, only freed.
//! * Deletes use a lazy policy: a node is freed when it becomes empty and the root collapses while it has one
//!   child, but underfull nodes are not merged. Space use after heavy deletes is bounded by the peak size, as
//!   in many production B-trees that do the same.
//!
//! ## Durability
//! The tree never writes a page that belongs to the last checkpoint: `BufferPool::write_cow` relocates such a
//! page on its first modification after a checkpoint, and the parent's pointer is updated (the parent is
//! modified anyway, because its counts change). A checkpoint writes every dirty page and then one of the two
//! meta slots of the page file, with the root, height, record count and the WAL sequence number it contains.
//! Recovery = last checkpoint + WAL replay (done by the `Db` shell). Media assumptions: see `storage`.
//!
//! ## Cost model (B = records per page, N records, M = buffer pool pages)
//! * point lookup: h = ⌈log_B(N/B)⌉ + 1 page visits; with inner nodes cached, about 1 page read;
//! * insert/delete: the same reads plus, amortised, one page write per dirtied page evicted;
//! * `count_range`: two descents; `sample_range(k)`: two descents + k descents;
//! * scans: one descent per chunk plus one page read per leaf visited.

mod check;
mod meta;
pub mod node;
mod overflow;
mod read;
mod write;

use crate::error::{Error, Result};
use crate::index::{
    CheckReport, Direction, IndexStats, KeyRange, OrderedIndex, RecordVisitor, SamplingIndex,
    WriteOp,
};
use crate::storage::{BufferPool, IoSnapshot, IoStats, PageFile, PageId};
use meta::TreeMeta;
use node::Layout;
use parking_lot::RwLock;
use std::sync::Arc;

/// Mutable root state, guarded by the tree's lock.
#[derive(Debug, Clone)]
struct TreeState {
    root: PageId,
    height: u32,
    len: u64,
    seqno: u64,
    /// Scratch path for writers: (inner page, child index) from the root down.
    path: Vec<(PageId, usize)>,
}

/// A B+-tree with subtree counts over encoded keys and values.
pub struct BTree {
    pool: BufferPool,
    layout: Layout,
    stats: Arc<IoStats>,
    state: RwLock<TreeState>,
}

impl std::fmt::Debug for BTree {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.state.read();
        f.debug_struct("BTree")
            .field("root", &st.root)
            .field("height", &st.height)
            .field("len", &st.len)
            .finish()
    }
}

impl BTree {
    /// Creates an empty tree in a freshly created page file and commits it.
    pub fn create(
        file: PageFile,
        key_width: Option<usize>,
        value_width: Option<usize>,
        cache_bytes: usize,
        stats: Arc<IoStats>,
    ) -> Result<BTree> {
        let tree = Self::with_pool(file, key_width, value_width, cache_bytes, stats, 0, 1, 0, 0);
        {
            let mut st = tree.state.write();
            let mut leaf = tree.pool.allocate()?;
            tree.layout.leaf_init(&mut leaf);
            st.root = leaf.id();
        }
        tree.checkpoint(0)?;
        Ok(tree)
    }

    /// Opens the tree of an existing page file at its last checkpoint.
    pub fn open(
        file: PageFile,
        key_width: Option<usize>,
        value_width: Option<usize>,
        cache_bytes: usize,
        stats: Arc<IoStats>,
    ) -> Result<BTree> {
        let meta = TreeMeta::decode(&file.user_root()).map_err(|detail| {
            Error::corruption(file.path(), 0, format!("B+-tree root record: {detail}"))
        })?;
        crate::index::check_root_record(
            &file,
            "B+-tree",
            (meta.key_width, meta.value_width),
            (key_width, value_width),
            meta.root,
            meta.height.into(),
        )?;
        let TreeMeta {
            root,
            height,
            len,
            seqno,
            ..
        } = meta;
        Ok(Self::with_pool(
            file,
            key_width,
            value_width,
            cache_bytes,
            stats,
            root,
            height,
            len,
            seqno,
        ))
    }

    #[allow(clippy::too_many_arguments)]
    fn with_pool(
        file: PageFile,
        key_width: Option<usize>,
        value_width: Option<usize>,
        cache_bytes: usize,
        stats: Arc<IoStats>,
        root: PageId,
        height: u32,
        len: u64,
        seqno: u64,
    ) -> BTree {
        let layout = Layout::new(file.page_size(), key_width, value_width);
        BTree {
            pool: BufferPool::new(file, cache_bytes, Some(validator(layout))),
            layout,
            stats,
            state: RwLock::new(TreeState {
                root,
                height,
                len,
                seqno,
                path: Vec::new(),
            }),
        }
    }

    /// The node layout in use.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The buffer pool (for statistics and tests).
    pub fn pool(&self) -> &BufferPool {
        &self.pool
    }

    /// Height of the tree (1 = the root is a leaf).
    pub fn height(&self) -> u32 {
        self.state.read().height
    }

    fn corrupt(&self, page: PageId, detail: impl Into<String>) -> Error {
        Error::corruption(
            self.pool.file().path(),
            page * self.layout.page_size() as u64,
            format!("page {page}: {}", detail.into()),
        )
    }
}

fn validator(layout: Layout) -> crate::storage::PageValidator {
    Box::new(move |page: &[u8]| layout.validate(page))
}

impl OrderedIndex for BTree {
    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        let st = self.state.read();
        read::get(self, &st, key, out)
    }

    fn apply(&self, ops: &[WriteOp]) -> Result<()> {
        let mut st = self.state.write();
        for op in ops {
            match op {
                // The shell refuses weighted puts for unweighted indexes; the weight has no meaning here.
                WriteOp::Put { key, value } | WriteOp::PutWeighted { key, value, .. } => {
                    write::insert(self, &mut st, key, value)?
                }
                WriteOp::Delete { key } => {
                    write::delete(self, &mut st, key)?;
                }
                // `validate_batch` (the default) refuses merges before they are logged.
                WriteOp::Merge { .. } => {
                    return Err(Error::invalid("a B+-tree has no merge operator"));
                }
            }
        }
        Ok(())
    }

    fn scan_visit(
        &self,
        range: &KeyRange,
        dir: Direction,
        max: usize,
        visit: &mut RecordVisitor<'_>,
    ) -> Result<usize> {
        let st = self.state.read();
        read::scan(self, &st, range, dir, max, visit)
    }

    fn len(&self) -> u64 {
        self.state.read().len
    }

    fn max_key_len(&self) -> usize {
        self.layout.max_key_len()
    }

    fn checkpoint(&self, seqno: u64) -> Result<()> {
        let mut st = self.state.write();
        let meta = TreeMeta {
            root: st.root,
            height: st.height,
            len: st.len,
            seqno,
            key_width: self.layout.key_width(),
            value_width: self.layout.value_width(),
        };
        self.pool.commit(&meta.encode())?;
        st.seqno = seqno;
        Ok(())
    }

    fn checkpointed_seqno(&self) -> u64 {
        self.state.read().seqno
    }

    fn check(&self) -> Result<CheckReport> {
        let st = self.state.read();
        check::check(self, &st)
    }

    fn stats(&self) -> IndexStats {
        let st = self.state.read();
        let file = self.pool.file();
        IndexStats {
            records: st.len,
            height: st.height,
            pages: file.page_count(),
            free_pages: file.unreachable_pages().len() as u64,
            page_size: self.layout.page_size(),
            cache_frames: self.pool.frame_count(),
            cache_pages: self.pool.cached_count(),
            cache_dirty: self.pool.dirty_count(),
            checkpointed_seqno: st.seqno,
        }
    }

    fn io(&self) -> IoSnapshot {
        self.stats.snapshot()
    }

    /// Leaves and inner nodes are filled completely (no slack).
    fn bulk_load(
        &self,
        records: &mut dyn Iterator<Item = Result<(Vec<u8>, Vec<u8>)>>,
        seqno: u64,
    ) -> Result<u64> {
        let n = {
            let mut st = self.state.write();
            if st.len != 0 {
                return Err(Error::invalid("bulk load needs an empty tree"));
            }
            write::bulk_load(self, &mut st, records)?
        };
        self.checkpoint(seqno)?;
        Ok(n)
    }

    fn as_sampling(&self) -> Option<&dyn SamplingIndex> {
        Some(self)
    }
}

impl SamplingIndex for BTree {
    fn count_range(&self, range: &KeyRange) -> Result<u64> {
        let st = self.state.read();
        let (a, b) = read::rank_range(self, &st, range)?;
        Ok(b - a)
    }

    fn sample_visit(
        &self,
        range: &KeyRange,
        k: usize,
        rng: &mut dyn rand::RngCore,
        visit: &mut crate::index::SampleVisitor<'_>,
    ) -> Result<()> {
        let st = self.state.read();
        read::sample(self, &st, range, k, rng, visit)
    }
}
