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

mod batch_get;
mod check;
pub mod family;
pub(crate) mod meta;
pub mod node;
mod overflow;
mod read;
mod write;

use crate::error::{Error, Result};
use crate::index::{
    CheckReport, Direction, IndexStats, KeyRange, OrderedIndex, RecordVisitor, SamplingIndex,
    WriteOp,
};
use crate::storage::page_file::SealedCommit;
use crate::storage::{BufferPool, IoSnapshot, IoStats, PageFile, PageId};
use meta::TreeMeta;
use node::Layout;
pub use node::MAX_BTREE_PAGE_SIZE;
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
    /// A checkpoint sealed by `begin_checkpoint` and not yet finished, with its seqno.
    sealed: parking_lot::Mutex<Option<(SealedCommit, u64)>>,
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
    /// The root record of the tree as `st` describes it, for a checkpoint of `seqno`.
    fn root_record(&self, st: &TreeState, seqno: u64) -> TreeMeta {
        TreeMeta {
            root: st.root,
            height: st.height,
            len: st.len,
            seqno,
            key_width: self.layout.key_width(),
            value_width: self.layout.value_width(),
        }
    }

    /// Creates an empty tree in a freshly created page file and commits it. A page file whose pages exceed
    /// [`MAX_BTREE_PAGE_SIZE`] (64 KiB), or fixed widths outside 1..=64, are `Error::InvalidArgument`, before
    /// anything is written.
    pub fn create(
        file: PageFile,
        key_width: Option<usize>,
        value_width: Option<usize>,
        cache_bytes: usize,
        stats: Arc<IoStats>,
    ) -> Result<BTree> {
        let layout = Layout::try_new(file.page_size(), key_width, value_width)?;
        let tree = Self::with_pool(file, layout, cache_bytes, stats, 0, 1, 0, 0);
        {
            let mut st = tree.state.write();
            let mut leaf = tree.pool.allocate()?;
            tree.layout.leaf_init(&mut leaf);
            st.root = leaf.id();
        }
        tree.checkpoint(0)?;
        Ok(tree)
    }

    /// Opens the tree of an existing page file at its last checkpoint. Pages over [`MAX_BTREE_PAGE_SIZE`] are
    /// `Error::InvalidArgument`.
    pub fn open(
        file: PageFile,
        key_width: Option<usize>,
        value_width: Option<usize>,
        cache_bytes: usize,
        stats: Arc<IoStats>,
    ) -> Result<BTree> {
        // The page size and widths first: a page file of another index family (larger pages) is refused as
        // such, not as a damaged root record.
        let layout = Layout::try_new(file.page_size(), key_width, value_width)?;
        let root_record = file.user_root();
        if TreeMeta::is_earlier_format(&root_record) {
            return Err(Error::Incompatible(format!(
                "{}: a B+-tree of node format 1 (slots without key heads); this build reads format 2 — \
                 copy the records into a database created by this build",
                file.path().display()
            )));
        }
        let meta = TreeMeta::decode(&root_record).map_err(|detail| {
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
            layout,
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
        layout: Layout,
        cache_bytes: usize,
        stats: Arc<IoStats>,
        root: PageId,
        height: u32,
        len: u64,
        seqno: u64,
    ) -> BTree {
        debug_assert_eq!(layout.page_size(), file.page_size());
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
            sealed: parking_lot::Mutex::new(None),
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

    fn get_many(&self, keys: &[&[u8]], out: &mut Vec<Option<Vec<u8>>>) -> Result<()> {
        let st = self.state.read();
        batch_get::get_many(self, &st, keys, out)
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
        let meta = self.root_record(&st, seqno);
        self.pool.commit(&meta.encode())?;
        st.seqno = seqno;
        Ok(())
    }

    /// Seals the tree as it is (its pages are copied on write from now on) and leaves the writing to
    /// `finish_checkpoint`.
    fn begin_checkpoint(&self, seqno: u64) -> Result<bool> {
        let st = self.state.write();
        let sealed = self
            .pool
            .begin_commit(&self.root_record(&st, seqno).encode())?;
        *self.sealed.lock() = Some((sealed, seqno));
        Ok(true)
    }

    fn finish_checkpoint(&self) -> Result<()> {
        let Some((sealed, seqno)) = self.sealed.lock().take() else {
            return Ok(());
        };
        self.pool.finish_commit(sealed)?;
        self.state.write().seqno = seqno;
        Ok(())
    }

    fn checkpointed_seqno(&self) -> u64 {
        self.state.read().seqno
    }

    fn spare_checkpoint_damage(&self) -> Option<crate::error::Damage> {
        self.pool.file().spare_damage()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{MemVfs, PageFileOptions, Vfs};
    use std::path::Path;

    fn page_file(vfs: &Arc<dyn Vfs>, page_size: usize, create: bool) -> PageFile {
        let opts = PageFileOptions {
            page_size,
            direct: false,
        };
        let (path, stats) = (Path::new("/db/data.pages"), Arc::new(IoStats::new()));
        if create {
            PageFile::create(vfs, path, opts, stats).unwrap()
        } else {
            PageFile::open(vfs, path, opts, stats).unwrap()
        }
    }

    fn expect_invalid(r: Result<BTree>, what: &str) -> String {
        match r {
            Err(Error::InvalidArgument(msg)) => msg,
            Err(e) => panic!("{what}: expected InvalidArgument, got {e}"),
            Ok(_) => panic!("{what}: expected InvalidArgument, got a tree"),
        }
    }

    #[test]
    fn pages_over_64_kib_and_bad_widths_are_invalid_arguments() {
        let stats = Arc::new(IoStats::new());
        for ps in [128 << 10, 1 << 20, crate::storage::page::MAX_PAGE_SIZE] {
            let vfs: Arc<dyn Vfs> = Arc::new(MemVfs::new());
            let r = BTree::create(
                page_file(&vfs, ps, true),
                Some(8),
                Some(8),
                0,
                stats.clone(),
            );
            let msg = expect_invalid(r, "create");
            assert!(
                msg.contains("up to 64 KiB") && msg.contains(&ps.to_string()),
                "{msg}"
            );
            let r = BTree::create(page_file(&vfs, ps, true), None, None, 0, stats.clone());
            expect_invalid(r, "create, variable widths");
            // Nothing was written: the page file is still empty (two meta slots) and opens as such.
            let pf = page_file(&vfs, ps, false);
            assert_eq!((pf.page_count(), pf.user_root().len()), (2, 0));
            // Opening refuses the page size before it reads the (here empty) root record.
            let msg = expect_invalid(BTree::open(pf, Some(8), Some(8), 0, stats.clone()), "open");
            assert!(msg.contains("up to 64 KiB"), "{msg}");
        }
        let vfs: Arc<dyn Vfs> = Arc::new(MemVfs::new());
        for (kw, vw) in [
            (Some(0), None),
            (None, Some(65)),
            (Some(8), Some(usize::MAX)),
        ] {
            let r = BTree::create(page_file(&vfs, 4096, true), kw, vw, 0, stats.clone());
            expect_invalid(r, "widths");
        }
        assert_eq!(
            Layout::try_new(MAX_BTREE_PAGE_SIZE, None, None)
                .unwrap()
                .page_size(),
            65536
        );
        assert!(Layout::try_new(MAX_BTREE_PAGE_SIZE * 2, None, None).is_err());
        assert!(Layout::try_new(3 * 4096, None, None).is_err());
    }

    #[test]
    fn largest_btree_pages_still_work() {
        let vfs: Arc<dyn Vfs> = Arc::new(MemVfs::new());
        let stats = Arc::new(IoStats::new());
        let ps = MAX_BTREE_PAGE_SIZE;
        let tree = BTree::create(page_file(&vfs, ps, true), None, None, 0, stats.clone()).unwrap();
        let ops: Vec<WriteOp> = (0..3000u32)
            .map(|i| WriteOp::Put {
                key: format!("key-{i:06}").into_bytes(),
                value: vec![i as u8; 100],
            })
            .collect();
        tree.apply(&ops).unwrap();
        tree.checkpoint(1).unwrap();
        assert!(tree.height() >= 2);
        drop(tree);
        let tree = BTree::open(page_file(&vfs, ps, false), None, None, 0, stats).unwrap();
        assert_eq!(tree.len(), 3000);
        let mut out = Vec::new();
        assert!(tree.get(b"key-002999", &mut out).unwrap());
        assert_eq!(out, vec![2999u32 as u8; 100]);
        tree.check().unwrap();
    }

    /// A tree written by a build of node format 1 (root record magic `SBT1`) is refused as incompatible, not
    /// read with the wrong slot layout or reported as damage.
    #[test]
    fn trees_of_the_earlier_node_format_are_incompatible() {
        let vfs: Arc<dyn Vfs> = Arc::new(MemVfs::new());
        let stats = Arc::new(IoStats::new());
        let tree =
            BTree::create(page_file(&vfs, 4096, true), None, None, 0, stats.clone()).unwrap();
        let mut root = tree.pool.file().user_root();
        assert_eq!(&root[..4], b"SBT3");
        root[..4].copy_from_slice(b"SBT1");
        tree.pool.commit(&root).unwrap();
        drop(tree);
        match BTree::open(page_file(&vfs, 4096, false), None, None, 0, stats) {
            Err(Error::Incompatible(msg)) => assert!(msg.contains("node format 1"), "{msg}"),
            Err(e) => panic!("expected Incompatible, got {e}"),
            Ok(_) => panic!("expected Incompatible, got a tree"),
        }
    }
}
