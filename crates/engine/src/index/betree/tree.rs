//! The Bε-tree core: writes as messages into the root's buffer, flushes of the heaviest child, splits and
//! merges, point reads and range reads over the buffer pool. Single-writer (`&mut self` for writes); the
//! engine shell (`super::BeTree`) adds locking, the WAL and checkpoints.
//!
//! ## Shape
//! A node is one page (see `node`). An inner node has at most `fanout` = max(4, ⌊(page_size / 8)^ε⌋)
//! children (ε = ½ and 4 KiB pages: 22, the Froese report's pivots + 1); the rest of its page is its buffer.
//! Records and messages are bounded to a quarter of a page's usable bytes, so a split always succeeds.
//!
//! ## Writes ([`BeTreeCore::apply_batch`])
//! A batch becomes messages numbered from the MSN counter, added to the root. Adding messages to a node:
//! * a leaf applies them to its records and, when they no longer fit, splits into as few pages as they need,
//!   evenly — or packed full when the new records all lie after the old ones (an append, e.g. a sequential
//!   load), so that sequential loads leave full leaves; an emptied leaf disappears;
//! * an inner node merges them into its buffer; while the node does not fit its page it flushes the buffer
//!   of its *heaviest* child (the most message bytes, hence at least 1/children of the buffer) into that
//!   child, recursively; only then, with more than `fanout` children (or still too big), it splits by
//!   children, each part taking its pivots' messages. A split therefore never happens in the middle of a
//!   flush: the child returns its pieces when its own flush is over and the parent takes them in one step
//!   (the effect of the small-split invariant).
//! * a child that comes back alone and underfull (a leaf under a quarter of its page, an inner node under a
//!   quarter of the fanout) is merged with a neighbour, and the result is settled like any node (split again
//!   if too big).
//!
//! A node returns its replacement (pieces with their lower pivots) to its parent, which updates its child
//! list; the root's pieces become a new root one level up, and a root with one child and an empty buffer
//! collapses. Every change goes through `write_cow` (pages of the last checkpoint are relocated, never
//! modified in place) and new pages come from `allocate` (never read from disk). Each node records the
//! newest MSN it holds (`max_msn`); a flush passes the parent's on to the child.
//!
//! ## Reads (never write)
//! `get` collects the key's messages along the root-to-leaf path and applies them to the leaf's record from
//! the bottom up; with fixed-width keys and values it binary-searches the pages without decoding them.
//! `scan` works leaf by leaf in either direction: it descends to the leaf holding the next key, applies to
//! its records the messages of every ancestor within the leaf's key interval (lowest ancestor first), emits
//! the records in range, and continues from the leaf's bound.
//!
//! The root stays decoded in memory between writes (`root_cache`), and is the authority on the root: most
//! inserts only add a message to it, mark its page dirty (relocating it after a checkpoint, like any write)
//! and leave the encoding for later (`root_dirty`) — [`BeTreeCore::commit`] encodes it before a checkpoint,
//! and any structural change rewrites it. Its page stays in the pool like any other (it is touched on every
//! access), so I/O counts are those of the plain algorithm. Only the checkpointed tree is read back from
//! disk after a crash, never a root page written out while dirty.
//!
//! Cost (N records, F = fanout, b = messages per buffer, h = height): an insert costs amortised
//! O(h · F / b) page reads and writes; a point read h page reads; a range of X records about h + X / L.

use super::bytes::{Bytes, Record, key_lt};
use super::message::{
    MergeOperator, Message, MessageBuffer, MessageKind, apply_to_records, resolve,
};
use super::node::{
    Inner, Leaf, NODE_HEADER_END, Node, NodeFormat, PageLookup, leaf_records_in_page,
    lookup_in_page, page_level, route_in_page,
};
use crate::error::{Error, Result};
use crate::index::{Direction, KeyRange, WriteOp};
use crate::storage::page::page_epoch;
use crate::storage::page_file::SealedCommit;
use crate::storage::{BufferPool, PageId};
use std::borrow::Cow;
use std::ops::Bound;
use std::sync::Arc;

/// A node's replacement: pages with the lowest key each covers (`None` for the first: the old lower bound),
/// and whether the page is underfull.
type Pieces = Vec<Piece>;

#[derive(Debug)]
struct Piece {
    lo: Option<Bytes>,
    id: PageId,
    underfull: bool,
}

/// Counters of the write path (what the I/O tests check).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct FlushStats {
    /// Child flushes.
    pub flushes: u64,
    /// Messages they moved.
    pub messages_moved: u64,
    /// Flushes that moved fewer message bytes than the buffer's bytes divided by the children: always 0
    /// (the heaviest child holds at least the average).
    pub below_share: u64,
    pub leaf_splits: u64,
    pub inner_splits: u64,
    /// Underfull children merged with a neighbour.
    pub merges: u64,
}

/// The persistent state of a tree besides its pages (stored in the checkpoint's root record).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CoreState {
    pub root: PageId,
    pub height: u16,
    pub epsilon: f64,
    pub format: NodeFormat,
    pub next_msn: u64,
    /// Records in leaves (buffered messages not applied yet are not counted).
    pub leaf_records: u64,
}

/// The message a write becomes, as its key, kind and value (a put's value, a merge's operand; empty for a
/// delete; weights are not kept).
fn message_parts(op: &WriteOp) -> (&[u8], MessageKind, &[u8]) {
    match op {
        WriteOp::Put { key, value } | WriteOp::PutWeighted { key, value, .. } => {
            (key, MessageKind::Put, value)
        }
        WriteOp::Delete { key } => (key, MessageKind::Delete, &[]),
        WriteOp::Merge { key, operand } => (key, MessageKind::Upsert, operand),
    }
}

/// The messages of a batch of writes, in write order.
pub fn messages_of(ops: &[WriteOp]) -> Vec<Message> {
    ops.iter()
        .map(|op| {
            let (key, kind, value) = message_parts(op);
            Message {
                key: key.into(),
                kind,
                value: value.into(),
            }
        })
        .collect()
}

/// The fanout of a tree with this page size and ε.
pub fn fanout_for(page_size: usize, epsilon: f64) -> usize {
    ((page_size as f64 / 8.0).powf(epsilon).floor() as usize).max(4)
}

/// Checks ε.
pub fn validate_epsilon(epsilon: f64) -> Result<()> {
    if !(epsilon > 0.0 && epsilon <= 1.0) {
        return Err(Error::invalid(format!(
            "epsilon {epsilon} must be in (0, 1]"
        )));
    }
    Ok(())
}

/// The tree core over a buffer pool.
pub struct BeTreeCore {
    /// Shared with whoever finishes a checkpoint in the background (without the core's lock).
    pool: Arc<BufferPool>,
    merge: MergeOperator,
    format: NodeFormat,
    epsilon: f64,
    fanout: usize,
    root: PageId,
    /// Levels: 1 when the root is a leaf.
    height: u16,
    next_msn: u64,
    leaf_records: u64,
    /// The root decoded, when known: the authority on the root (its page may be behind, see `root_dirty`).
    root_cache: Option<Node>,
    /// `root_cache` is newer than the root's page.
    root_dirty: bool,
    stats: FlushStats,
}

impl BeTreeCore {
    /// An empty tree (a single empty leaf) in `pool`'s file, with ε = `epsilon` (0 < ε ≤ 1) and keys and
    /// values laid out per `format`.
    pub fn create(
        pool: BufferPool,
        epsilon: f64,
        format: NodeFormat,
        merge: MergeOperator,
    ) -> Result<BeTreeCore> {
        validate_epsilon(epsilon)?;
        let mut tree = Self::open(
            pool,
            CoreState {
                root: 0,
                height: 1,
                epsilon,
                format,
                next_msn: 1,
                leaf_records: 0,
            },
            merge,
        )?;
        tree.root = tree.new_node(&Node::Leaf(Leaf::default()))?;
        Ok(tree)
    }

    /// The tree of `state` (read from a checkpoint's root record) over `pool`.
    pub fn open(pool: BufferPool, state: CoreState, merge: MergeOperator) -> Result<BeTreeCore> {
        validate_epsilon(state.epsilon)?;
        let page_size = pool.file().page_size();
        Ok(BeTreeCore {
            fanout: fanout_for(page_size, state.epsilon),
            pool: Arc::new(pool),
            merge,
            format: state.format,
            epsilon: state.epsilon,
            root: state.root,
            height: state.height,
            next_msn: state.next_msn,
            leaf_records: state.leaf_records,
            root_cache: None,
            root_dirty: false,
            stats: FlushStats::default(),
        })
    }

    /// What a checkpoint records.
    pub fn state(&self) -> CoreState {
        CoreState {
            root: self.root,
            height: self.height,
            epsilon: self.epsilon,
            format: self.format,
            next_msn: self.next_msn,
            leaf_records: self.leaf_records,
        }
    }

    pub fn fanout(&self) -> usize {
        self.fanout
    }

    pub fn height(&self) -> u16 {
        self.height
    }

    pub fn root(&self) -> PageId {
        self.root
    }

    pub fn format(&self) -> NodeFormat {
        self.format
    }

    pub fn pool(&self) -> &BufferPool {
        &self.pool
    }

    /// The pool, shared (a checkpoint finishes through it while the core is locked by writers).
    pub fn shared_pool(&self) -> Arc<BufferPool> {
        self.pool.clone()
    }

    pub fn flush_stats(&self) -> &FlushStats {
        &self.stats
    }

    /// The next MSN the tree will give out.
    pub fn next_msn(&self) -> u64 {
        self.next_msn
    }

    /// Records in leaves (writes still buffered in inner nodes are not counted).
    pub fn leaf_records(&self) -> u64 {
        self.leaf_records
    }

    fn page_size(&self) -> usize {
        self.pool.file().page_size()
    }

    /// Bytes of a leaf's records it may hold.
    fn usable(&self) -> usize {
        self.page_size() - NODE_HEADER_END
    }

    /// Largest key plus value (or operand) a record or message may have.
    pub fn max_entry_bytes(&self) -> usize {
        self.usable() / 4 - 9
    }

    /// Applies a batch of writes (puts, deletes, merges; weights are not kept) as one group of messages.
    pub fn apply_batch(&mut self, ops: &[WriteOp]) -> Result<()> {
        self.apply_messages(messages_of(ops))
    }

    /// Adds an upsert of `key` with `operand` (combined with the key's value by the merge operator).
    pub fn upsert(&mut self, key: &[u8], operand: &[u8]) -> Result<()> {
        self.apply_messages(vec![Message::upsert(key.to_vec(), operand.to_vec())])
    }

    /// Checks `msgs` against the tree's limits and format (nothing is written when one fails).
    pub fn check_messages(&self, msgs: &[Message]) -> Result<()> {
        msgs.iter()
            .try_for_each(|m| self.check_entry(&m.key, m.kind, &m.value))
    }

    /// [`check_messages`](Self::check_messages) of the messages `ops` would become, without making them.
    pub fn check_ops(&self, ops: &[WriteOp]) -> Result<()> {
        ops.iter().try_for_each(|op| {
            let (key, kind, value) = message_parts(op);
            self.check_entry(key, kind, value)
        })
    }

    /// Checks one message, given by its parts, against the entry size limit and the format.
    fn check_entry(&self, key: &[u8], kind: MessageKind, value: &[u8]) -> Result<()> {
        let limit = self.max_entry_bytes();
        if key.len() + value.len() > limit {
            return Err(Error::invalid(format!(
                "a key and value of {} bytes exceed the {limit} bytes a Bε-tree entry may take with {}-byte pages",
                key.len() + value.len(),
                self.page_size()
            )));
        }
        self.format
            .check_entry(key, kind, value)
            .map_err(Error::invalid)
    }

    /// Adds messages (in write order) to the tree.
    pub fn apply_messages(&mut self, msgs: Vec<Message>) -> Result<()> {
        self.check_messages(&msgs)?;
        self.apply_checked(msgs)
    }

    /// [`apply_messages`](Self::apply_messages) of messages that passed `check_messages`.
    pub(super) fn apply_checked(&mut self, msgs: Vec<Message>) -> Result<()> {
        if msgs.is_empty() {
            return Ok(());
        }
        self.next_msn += msgs.len() as u64;
        let max_msn = self.next_msn - 1;
        // Sorted by key, write order kept per key, and folded into buffer shape.
        let msgs = if msgs.len() == 1 {
            msgs
        } else {
            let mut sorted = msgs;
            sorted.sort_by(|a, b| a.key.cmp(&b.key));
            let mut batch = MessageBuffer::default();
            batch.merge_newer(sorted, &self.merge);
            batch.into_messages()
        };
        if self.root_cache.is_some() {
            // Dirtied (relocated after a checkpoint) before the cached root is taken, so that a failure
            // here leaves the cache in place.
            self.root = self.pool.write_cow(self.root)?.id();
        }
        let (root, epoch) = self.take_node(self.root, self.height - 1)?;
        // The common case: the messages fit the root's buffer.
        let root = match root {
            Node::Inner(mut n) => {
                n.buffer.merge_newer(msgs, &self.merge);
                n.max_msn = max_msn;
                if n.encoded_len(&self.format) <= self.page_size() {
                    // The page is dirty already; it is encoded at the commit.
                    self.root_cache = Some(Node::Inner(n));
                    self.root_dirty = true;
                    return Ok(());
                }
                let pieces = self.settle_inner(Some((self.root, epoch)), n)?;
                self.install_root(pieces)?;
                return Ok(());
            }
            Node::Leaf(l) => l,
        };
        let pieces = self.add_to_leaf(self.root, epoch, root, msgs, max_msn)?;
        self.install_root(pieces)
    }

    /// Makes `pieces` (the root's replacement) the tree: a new root above them if there are several.
    fn install_root(&mut self, mut pieces: Pieces) -> Result<()> {
        let mut level = self.height - 1;
        loop {
            match pieces.len() {
                0 => {
                    self.root = self.new_node(&Node::Leaf(Leaf {
                        max_msn: self.next_msn - 1,
                        records: Vec::new(),
                    }))?;
                    self.height = 1;
                    return Ok(());
                }
                1 => {
                    self.root = pieces[0].id;
                    self.height = level + 1;
                    return self.collapse_root();
                }
                _ => {
                    level += 1;
                    let node = Inner {
                        level,
                        max_msn: self.next_msn - 1,
                        pivots: pieces[1..]
                            .iter()
                            .map(|p| p.lo.clone().expect("later pieces have a lower key"))
                            .collect(),
                        children: pieces.iter().map(|p| p.id).collect(),
                        buffer: MessageBuffer::default(),
                    };
                    pieces = self.split_inner(None, node)?;
                }
            }
        }
    }

    /// Removes roots that have a single child and an empty buffer.
    fn collapse_root(&mut self) -> Result<()> {
        while self.height > 1 {
            let (node, epoch) = self.take_node(self.root, self.height - 1)?;
            let n = match node {
                Node::Inner(n) if n.children.len() == 1 && n.buffer.is_empty() => n,
                other => {
                    self.root_cache = Some(other);
                    break;
                }
            };
            self.discard(self.root, epoch);
            self.root = n.children[0];
            self.height -= 1;
        }
        Ok(())
    }

    /// Adds `msgs` (buffer shape, newer than everything below, newest MSN `max_msn`) to node `id` at
    /// `level`; its replacement.
    fn add(&mut self, id: PageId, level: u16, msgs: Vec<Message>, max_msn: u64) -> Result<Pieces> {
        let (node, epoch) = self.take_node(id, level)?;
        match node {
            Node::Leaf(leaf) => self.add_to_leaf(id, epoch, leaf, msgs, max_msn),
            Node::Inner(mut node) => {
                node.buffer.merge_newer(msgs, &self.merge);
                node.max_msn = node.max_msn.max(max_msn);
                self.settle_inner(Some((id, epoch)), node)
            }
        }
    }

    fn add_to_leaf(
        &mut self,
        id: PageId,
        epoch: u64,
        leaf: Leaf,
        msgs: Vec<Message>,
        max_msn: u64,
    ) -> Result<Pieces> {
        let appended = match (leaf.records.last(), msgs.first()) {
            (Some(last), Some(first)) => first.key > last.0,
            _ => false,
        };
        let before = leaf.records.len() as u64;
        let records = apply_to_records(leaf.records, &msgs, &self.merge);
        self.leaf_records = self.leaf_records - before + records.len() as u64;
        self.write_leaf(id, epoch, leaf.max_msn.max(max_msn), records, appended)
    }

    /// Writes inner node `node` (of page `id` with its epoch, or new): flushes its heaviest children until
    /// it fits its page, then writes it as one or several pages (`split_inner`); none if it lost all its
    /// children.
    fn settle_inner(&mut self, id: Option<(PageId, u64)>, mut node: Inner) -> Result<Pieces> {
        while node.encoded_len(&self.format) > self.page_size() && !node.buffer.is_empty() {
            self.flush_heaviest(&mut node)?;
        }
        if node.children.is_empty() {
            if let Some((id, epoch)) = id {
                self.discard(id, epoch);
            }
            return Ok(Vec::new());
        }
        self.split_inner(id.map(|p| p.0), node)
    }

    /// Moves the buffered messages of the child with the most message bytes into it, then merges the child
    /// with a neighbour if it came back alone and underfull.
    fn flush_heaviest(&mut self, node: &mut Inner) -> Result<()> {
        let f = self.format;
        // One pass over the sorted messages, moving through the children's intervals.
        let mut weights = vec![0usize; node.children.len()];
        let mut child = 0;
        for m in node.buffer.messages() {
            while child < node.pivots.len() && !key_lt(&m.key, &node.pivots[child]) {
                child += 1;
            }
            weights[child] += f.message_len(m);
        }
        let (i, &heaviest) = weights
            .iter()
            .enumerate()
            .max_by_key(|&(i, w)| (*w, std::cmp::Reverse(i)))
            .expect("an inner node has children");
        let total: usize = weights.iter().sum();
        self.stats.flushes += 1;
        if heaviest * node.children.len() < total {
            self.stats.below_share += 1;
        }
        let (lo, hi) = node.child_bounds(i);
        let r = node.buffer.range_of(lo, hi);
        let msgs = node.buffer.take_range(r);
        self.stats.messages_moved += msgs.len() as u64;
        let pieces = self.add(node.children[i], node.level - 1, msgs, node.max_msn)?;
        let merge_candidate = pieces.len() == 1 && pieces[0].underfull;
        self.replace_child(node, i, pieces);
        if merge_candidate && node.children.len() > 1 {
            self.merge_child(node, i)?;
        }
        Ok(())
    }

    /// Child `i` of `node` becomes `pieces`; an emptied child disappears with the pivot that bounds it.
    fn replace_child(&mut self, node: &mut Inner, i: usize, pieces: Pieces) {
        if pieces.is_empty() {
            node.children.remove(i);
            if !node.pivots.is_empty() {
                node.pivots.remove(i.saturating_sub(1));
            }
            return;
        }
        node.children.splice(i..=i, pieces.iter().map(|p| p.id));
        node.pivots.splice(
            i..i,
            pieces[1..]
                .iter()
                .map(|p| p.lo.clone().expect("later pieces have a lower key")),
        );
    }

    /// Merges child `i` of `node` with its right neighbour (its left one for the last child); the result is
    /// settled (split again if it does not fit).
    fn merge_child(&mut self, node: &mut Inner, i: usize) -> Result<()> {
        let a = if i + 1 < node.children.len() {
            i
        } else {
            i - 1
        };
        let level = node.level - 1;
        let (left, left_epoch) = self.take_node(node.children[a], level)?;
        let (right, right_epoch) = self.take_node(node.children[a + 1], level)?;
        let separator = node.pivots[a].clone();
        self.stats.merges += 1;
        let left_id = node.children[a];
        self.discard(node.children[a + 1], right_epoch);
        let pieces = match (left, right) {
            (Node::Leaf(mut l), Node::Leaf(r)) => {
                l.records.extend(r.records);
                self.write_leaf(
                    left_id,
                    left_epoch,
                    l.max_msn.max(r.max_msn),
                    l.records,
                    false,
                )?
            }
            (Node::Inner(mut l), Node::Inner(r)) => {
                l.max_msn = l.max_msn.max(r.max_msn);
                l.pivots.push(separator);
                l.pivots.extend(r.pivots);
                l.children.extend(r.children);
                let mut msgs = l.buffer.into_messages();
                msgs.extend(r.buffer.into_messages());
                l.buffer = MessageBuffer::from_sorted(msgs).map_err(Error::invalid)?;
                self.settle_inner(Some((left_id, left_epoch)), l)?
            }
            _ => {
                return Err(self.corrupt(
                    left_id,
                    "siblings at one level are a leaf and an inner node".into(),
                ));
            }
        };
        // Children a and a + 1 and the pivot between them become the pieces.
        node.children.remove(a + 1);
        node.pivots.remove(a);
        self.replace_child(node, a, pieces);
        Ok(())
    }

    /// Writes `node` back as one page or, when it has more than `fanout` children or does not fit, as
    /// several (split by children; each part keeps the messages of its key interval). `id`: the node's page
    /// (None: a new node).
    fn split_inner(&mut self, id: Option<PageId>, node: Inner) -> Result<Pieces> {
        let (fanout, format, page_size) = (self.fanout, self.format, self.page_size());
        let fits = |n: &Inner| n.children.len() <= fanout && n.encoded_len(&format) <= page_size;
        let mut parts: Vec<(Option<Bytes>, Inner)> = vec![(None, node)];
        while let Some(j) = parts.iter().position(|(_, n)| !fits(n)) {
            let (lo, mut left) = parts.remove(j);
            let half = left.children.len() / 2;
            if half == 0 {
                // One child and still too big: cannot happen, a node's buffer is flushed until it fits.
                return Err(Error::invalid(
                    "a Bε-tree node with one child does not fit its page",
                ));
            }
            let right_children = left.children.split_off(half);
            let mut right_pivots = left.pivots.split_off(half - 1);
            let sep = right_pivots.remove(0);
            let right_buffer = left.buffer.split_off_at(&sep);
            let right = Inner {
                level: left.level,
                max_msn: left.max_msn,
                pivots: right_pivots,
                children: right_children,
                buffer: right_buffer,
            };
            parts.insert(j, (Some(sep), right));
            parts.insert(j, (lo, left));
            self.stats.inner_splits += 1;
        }
        let min_children = (self.fanout / 4).max(2);
        let mut out = Vec::with_capacity(parts.len());
        for (k, (lo, n)) in parts.into_iter().enumerate() {
            let underfull = n.children.len() < min_children;
            let node = Node::Inner(n);
            let page = match (k, id) {
                (0, Some(id)) => self.write_node(id, &node)?,
                _ => self.new_node(&node)?,
            };
            out.push(Piece {
                lo,
                id: page,
                underfull,
            });
        }
        Ok(out)
    }

    /// Writes `records` as leaf `id` (of page epoch `epoch`), split over new pages when they do not fit one
    /// (evenly, or packed full when `appended`: the new records all follow the old ones); none when empty.
    fn write_leaf(
        &mut self,
        id: PageId,
        epoch: u64,
        max_msn: u64,
        records: Vec<Record>,
        appended: bool,
    ) -> Result<Pieces> {
        if records.is_empty() {
            self.discard(id, epoch);
            return Ok(Vec::new());
        }
        let f = self.format;
        let size = |r: &Record| f.record_len(&r.0, &r.1);
        let usable = self.usable();
        let total: usize = records.iter().map(size).sum();
        let mut groups: Vec<Vec<Record>> = Vec::new();
        if total <= usable {
            groups.push(records);
        } else {
            // Each group takes records up to `target` bytes; the last one the rest.
            let target = if appended {
                usable
            } else {
                total.div_ceil(total.div_ceil(usable * 3 / 4))
            };
            let mut cur = Vec::new();
            let mut bytes = 0;
            for r in records {
                if bytes + size(&r) > target && !cur.is_empty() {
                    groups.push(std::mem::take(&mut cur));
                    bytes = 0;
                }
                bytes += size(&r);
                cur.push(r);
            }
            groups.push(cur);
            self.stats.leaf_splits += 1;
        }
        let mut out = Vec::with_capacity(groups.len());
        for (k, records) in groups.into_iter().enumerate() {
            let lo = (k > 0).then(|| records[0].0.clone());
            let leaf = Leaf { max_msn, records };
            let underfull = leaf.encoded_len(&f) - NODE_HEADER_END < usable / 4;
            let node = Node::Leaf(leaf);
            let page = if k == 0 {
                self.write_node(id, &node)?
            } else {
                self.new_node(&node)?
            };
            out.push(Piece {
                lo,
                id: page,
                underfull,
            });
        }
        Ok(out)
    }

    /// The value of `key`, if any.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut id = self.root;
        let mut level = self.height - 1;
        // Each node's messages on the key, root first.
        let mut path: Vec<Vec<Message>> = Vec::new();
        loop {
            match self.lookup(id, level, key)? {
                PageLookup::Inner { messages, child } => {
                    path.push(messages);
                    id = child;
                    level -= 1;
                }
                PageLookup::Leaf(base) => {
                    let value = resolve(key, base, path.iter().rev().flatten(), &self.merge);
                    return Ok(value.map(|v| v.to_vec()));
                }
            }
        }
    }

    /// What node `id` at `level` says about `key`: its messages on the key and the child to follow, or the
    /// leaf's record. Pages of fixed-width trees are searched in place.
    fn lookup(&self, id: PageId, level: u16, key: &[u8]) -> Result<PageLookup> {
        if id == self.root
            && let Some(node) = &self.root_cache
        {
            // Keep the root's frame warm, as a read of it would.
            drop(self.pool.read(id)?);
            return Ok(PageLookup::of_node(node, key));
        }
        let page = self.pool.read(id)?;
        let found_level = page_level(&page);
        if found_level != level {
            return Err(self.corrupt(
                id,
                format!("level {found_level} where {level} was expected"),
            ));
        }
        match lookup_in_page(&page, &self.format, key).map_err(|d| self.corrupt(id, d))? {
            Some(found) => Ok(found),
            None => Node::decode(&page, &self.format)
                .map(|n| PageLookup::of_node(&n, key))
                .map_err(|d| self.corrupt(id, d)),
        }
    }

    /// The records with keys in `[lo, hi)` (`hi = None`: no upper bound), in key order.
    pub fn range(&self, lo: &[u8], hi: Option<&[u8]>) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let range = KeyRange {
            lo: Bound::Included(lo.to_vec()),
            hi: hi.map_or(Bound::Unbounded, |h| Bound::Excluded(h.to_vec())),
        };
        let mut out = Vec::new();
        self.scan(&range, Direction::Forward, usize::MAX, &mut |k, v| {
            out.push((k.to_vec(), v.to_vec()));
            Ok(true)
        })?;
        Ok(out)
    }

    /// Calls `visit` for up to `max` records of `range` in `dir` order until it returns false; how many it
    /// visited.
    pub fn scan(
        &self,
        range: &KeyRange,
        dir: Direction,
        max: usize,
        visit: &mut crate::index::RecordVisitor<'_>,
    ) -> Result<usize> {
        let mut count = 0;
        if max == 0 {
            return Ok(0);
        }
        // Forward: the next leaf holds `from` (None: the first leaf). Reverse: it holds the keys just
        // below `until` (None: the last leaf).
        let mut cursor: Option<Vec<u8>> = match (dir, range.lo_ref(), range.hi_ref()) {
            (Direction::Forward, Bound::Included(k) | Bound::Excluded(k), _) => Some(k.to_vec()),
            (Direction::Reverse, _, Bound::Excluded(k)) => Some(k.to_vec()),
            // Keys ≤ k: the leaf below the smallest key after k.
            (Direction::Reverse, _, Bound::Included(k)) => {
                let mut next = k.to_vec();
                next.push(0);
                Some(next)
            }
            _ => None,
        };
        loop {
            let view = self.leaf_view(cursor.as_deref(), dir)?;
            let records: Box<dyn Iterator<Item = &Record>> = match dir {
                Direction::Forward => Box::new(view.records.iter()),
                Direction::Reverse => Box::new(view.records.iter().rev()),
            };
            for (k, v) in records {
                let (inside, past) = match dir {
                    Direction::Forward => (range.above_lo(k), !range.below_hi(k)),
                    Direction::Reverse => (range.below_hi(k), !range.above_lo(k)),
                };
                if past {
                    return Ok(count);
                }
                if inside {
                    count += 1;
                    if !visit(k, v)? || count == max {
                        return Ok(count);
                    }
                }
            }
            cursor = match dir {
                Direction::Forward => match view.hi {
                    Some(next) if range.below_hi(&next) => Some(next),
                    _ => return Ok(count),
                },
                Direction::Reverse => match (view.lo, range.lo_ref()) {
                    (Some(prev), Bound::Unbounded) => Some(prev),
                    (Some(prev), Bound::Included(l) | Bound::Excluded(l))
                        if l < prev.as_slice() =>
                    {
                        Some(prev)
                    }
                    _ => return Ok(count),
                },
            };
        }
    }

    /// The leaf that holds `cursor` (forward) or the keys just below it (reverse), with every ancestor's
    /// messages in its interval applied, and that interval.
    fn leaf_view(&self, cursor: Option<&[u8]>, dir: Direction) -> Result<LeafView> {
        let mut id = self.root;
        let mut level = self.height - 1;
        let (mut lo, mut hi): (Option<Vec<u8>>, Option<Vec<u8>>) = (None, None);
        let mut ancestors: Vec<Vec<Message>> = Vec::new();
        // Forward scans need the leaf's records from the cursor on, reverse ones those below it.
        let (from, until) = match dir {
            Direction::Forward => (cursor, None),
            Direction::Reverse => (None, cursor),
        };
        let leaf = loop {
            // Fixed-width nodes off the root are read in place: routes through inner nodes, the window of a
            // leaf's records.
            let node = if id != self.root || self.root_cache.is_none() {
                let page = self.pool.read(id)?;
                if page_level(&page) != level {
                    return Err(self.corrupt(
                        id,
                        format!("level {} where {level} was expected", page_level(&page)),
                    ));
                }
                if level == 0
                    && let Some(records) = leaf_records_in_page(&page, &self.format, from, until)
                        .map_err(|d| self.corrupt(id, d))?
                {
                    break records;
                }
                let reverse = dir == Direction::Reverse;
                if let Some(route) = route_in_page(&page, &self.format, cursor, reverse)
                    .map_err(|d| self.corrupt(id, d))?
                {
                    if route.lo.is_some() {
                        lo = route.lo;
                    }
                    if route.hi.is_some() {
                        hi = route.hi;
                    }
                    ancestors.push(route.messages);
                    id = route.child;
                    level -= 1;
                    continue;
                }
                // Variable widths: decoded from the page held (a second read would count as a reuse).
                Cow::Owned(Node::decode(&page, &self.format).map_err(|d| self.corrupt(id, d))?)
            } else {
                self.node_for_read(id, level)?
            };
            let n = match node {
                Cow::Owned(Node::Leaf(l)) => break l.records,
                Cow::Borrowed(Node::Leaf(l)) => break l.records.clone(),
                Cow::Owned(Node::Inner(n)) => Cow::Owned(n),
                Cow::Borrowed(Node::Inner(n)) => Cow::Borrowed(n),
            };
            let i = match (dir, cursor) {
                (Direction::Forward, Some(k)) => n.child_for(k),
                (Direction::Forward, None) => 0,
                (Direction::Reverse, Some(k)) => n.pivots.partition_point(|p| p.as_slice() < k),
                (Direction::Reverse, None) => n.children.len() - 1,
            };
            let (clo, chi) = n.child_bounds(i);
            if let Some(c) = clo {
                lo = Some(c.to_vec());
            }
            if let Some(c) = chi {
                hi = Some(c.to_vec());
            }
            let r = n.buffer.range_of(lo.as_deref(), hi.as_deref());
            ancestors.push(n.buffer.messages()[r].to_vec());
            id = n.children[i];
            level -= 1;
        };
        // An ancestor's messages were taken over its child's interval: keep the leaf's, within the window.
        let in_leaf = |k: &[u8]| {
            lo.as_deref().is_none_or(|l| !key_lt(k, l))
                && hi.as_deref().is_none_or(|h| key_lt(k, h))
                && from.is_none_or(|f| !key_lt(k, f))
                && until.is_none_or(|u| key_lt(k, u))
        };
        let mut records = leaf;
        records.retain(|(k, _)| in_leaf(k));
        for msgs in ancestors.iter_mut().rev() {
            msgs.retain(|m| in_leaf(&m.key));
            if !msgs.is_empty() {
                records = apply_to_records(records, msgs, &self.merge);
            }
        }
        Ok(LeafView { records, lo, hi })
    }

    /// Node `id` at `level` for reading: the cached root, or decoded from its page.
    fn node_for_read(&self, id: PageId, level: u16) -> Result<Cow<'_, Node>> {
        if id == self.root
            && let Some(node) = &self.root_cache
        {
            drop(self.pool.read(id)?);
            return Ok(Cow::Borrowed(node));
        }
        Ok(Cow::Owned(self.read_node(id, level)?.0))
    }

    /// Node `id` at `level` with its page's epoch, to be changed: the root comes out of the cache.
    fn take_node(&mut self, id: PageId, level: u16) -> Result<(Node, u64)> {
        if id == self.root
            && let Some(cached) = self.root_cache.take()
        {
            let epoch = match self.pool.read(id) {
                Ok(page) => page_epoch(&page),
                Err(e) => {
                    self.root_cache = Some(cached);
                    return Err(e);
                }
            };
            // The taker writes the node back or frees its page.
            self.root_dirty = false;
            return Ok((cached, epoch));
        }
        self.read_node(id, level)
    }

    /// Node `id`, which must be at `level`, with the epoch of its page (what freeing it needs).
    pub fn read_node(&self, id: PageId, level: u16) -> Result<(Node, u64)> {
        let page = self.pool.read(id)?;
        let epoch = page_epoch(&page);
        let node = Node::decode(&page, &self.format).map_err(|d| self.corrupt(id, d))?;
        let found = match &node {
            Node::Leaf(_) => 0,
            Node::Inner(n) => n.level,
        };
        if found != level {
            return Err(self.corrupt(id, format!("level {found} where {level} was expected")));
        }
        Ok((node, epoch))
    }

    fn corrupt(&self, id: PageId, detail: String) -> Error {
        Error::corruption(
            self.pool.file().path(),
            id * self.page_size() as u64,
            format!("Bε-tree node {id}: {detail}"),
        )
    }

    /// Writes `node` over page `id` (relocated if it belongs to the last checkpoint); the page it is on.
    fn write_node(&mut self, id: PageId, node: &Node) -> Result<PageId> {
        let mut page = self.pool.write_cow(id)?;
        node.encode(&mut page, &self.format)
            .map_err(Error::invalid)?;
        Ok(page.id())
    }

    fn new_node(&mut self, node: &Node) -> Result<PageId> {
        let mut page = self.pool.allocate()?;
        node.encode(&mut page, &self.format)
            .map_err(Error::invalid)?;
        Ok(page.id())
    }

    /// Frees page `id` of epoch `epoch` (a node that no longer exists).
    fn discard(&mut self, id: PageId, epoch: u64) {
        if id == self.root {
            self.root_cache = None;
            self.root_dirty = false;
        }
        self.pool.free(id, epoch);
    }

    /// Drops the decoded root after a write failed half-way (it may be ahead of the tree). Writes since the
    /// last commit may be lost with it: the caller recovers from the checkpoint (the `Db` shell poisons the
    /// handle and replays its WAL on reopen).
    pub fn forget_cache(&mut self) {
        self.root_cache = None;
        self.root_dirty = false;
    }

    /// Encodes the root into its page if the page is behind.
    pub fn sync_root(&mut self) -> Result<()> {
        if self.root_dirty
            && let Some(node) = self.root_cache.take()
        {
            let written = self.write_node(self.root, &node);
            // On failure the decoded root stays the authority.
            self.root_cache = Some(node);
            self.root = written?;
            self.root_dirty = false;
        }
        Ok(())
    }

    /// Makes the tree's pages durable with `user_root` as the page file's root record: the root encoded,
    /// every dirty page written, then the root record (`BufferPool::commit`).
    pub fn commit(&mut self, user_root: impl FnOnce(&Self) -> Vec<u8>) -> Result<()> {
        self.sync_root()?;
        let record = user_root(self);
        self.pool.commit(&record)
    }

    /// The first half of [`commit`](Self::commit) (`BufferPool::begin_commit`): the root encoded and the
    /// tree sealed with `user_root`; the pool's `finish_commit` writes it while writes go on.
    pub fn begin_commit(
        &mut self,
        user_root: impl FnOnce(&Self) -> Vec<u8>,
    ) -> Result<SealedCommit> {
        self.sync_root()?;
        let record = user_root(self);
        self.pool.begin_commit(&record)
    }
}

/// A leaf's records with its ancestors' messages applied, and its key interval `[lo, hi)`.
struct LeafView {
    records: Vec<Record>,
    lo: Option<Vec<u8>>,
    hi: Option<Vec<u8>>,
}

#[cfg(test)]
mod tests;
