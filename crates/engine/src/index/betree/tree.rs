//! The Bε-tree core: writes as messages into the root's buffer, flushes of the heaviest child, splits,
//! point reads and range reads over the buffer pool. Single-writer (`&mut self` for writes); the engine
//! shell adds locking, the WAL and checkpoints.
//!
//! ## Shape
//! A node is one page (see `node`). An inner node has at most `fanout` = max(4, ⌊(page_size / 8)^ε⌋)
//! children (ε = ½ and 4 KiB pages: 22, the Froese report's pivots + 1); the rest of its page is its buffer.
//! Records and messages are bounded to a quarter of a page's usable bytes, so a split always succeeds.
//!
//! ## Writes ([`BeTreeCore::apply_batch`])
//! A batch becomes messages with fresh MSNs, added to the root. Adding messages to a node:
//! * a leaf applies them to its records, and splits into as many pages as its records need (≥ ¾ full each
//!   but the last), or disappears when empty;
//! * an inner node merges them into its buffer; while the node does not fit its page it flushes the buffer
//!   of its *heaviest* child (the most message bytes) into that child, recursively — so each child write
//!   moves at least a 1/fanout share of a full buffer; then, with more than `fanout` children (or still too
//!   big), it splits by children, each part taking its pivots' messages.
//!
//! A node returns its replacement (pieces with their lower pivots) to its parent, which updates its child
//! list; the root's pieces become a new root one level up. Every change goes through `write_cow` (pages of
//! the last checkpoint are relocated, never modified in place) and new pages come from `allocate` (never read
//! from disk).
//!
//! ## Reads (never write)
//! `get` collects the key's messages along the root-to-leaf path and applies them to the leaf's record from
//! the bottom up. `range` works leaf by leaf: it descends to the leaf holding the next key, applies to its
//! records the messages of every ancestor within the leaf's key interval (lowest ancestor first), emits the
//! records in range, and continues from the leaf's upper bound.
//!
//! Cost (N records, F = fanout, h = height): an insert is O(h) node visits amortised O(h · F / b) page
//! writes for b messages per buffer; a point read h page reads; a range of X records about h + X / L.

use super::message::{MergeOperator, Message, MessageBuffer, apply_to_records, resolve};
use super::node::{
    Inner, Leaf, MESSAGE_OVERHEAD, NODE_HEADER_END, Node, RECORD_OVERHEAD, message_len,
};
use crate::error::{Error, Result};
use crate::index::WriteOp;
use crate::storage::page::page_epoch;
use crate::storage::{BufferPool, PageId};

/// A node's replacement: pages with the lowest key each covers (`None` for the first: the old lower bound).
type Pieces = Vec<(Option<Vec<u8>>, PageId)>;

/// The tree core over a buffer pool.
pub struct BeTreeCore {
    pool: BufferPool,
    merge: MergeOperator,
    fanout: usize,
    root: PageId,
    /// Levels: 1 when the root is a leaf.
    height: u16,
    next_msn: u64,
}

impl BeTreeCore {
    /// An empty tree (a single empty leaf) in `pool`'s file, with ε = `epsilon` (0 < ε ≤ 1).
    pub fn create(pool: BufferPool, epsilon: f64, merge: MergeOperator) -> Result<BeTreeCore> {
        if !(epsilon > 0.0 && epsilon <= 1.0) {
            return Err(Error::invalid(format!(
                "epsilon {epsilon} must be in (0, 1]"
            )));
        }
        let page_size = pool.file().page_size();
        let fanout = ((page_size as f64 / 8.0).powf(epsilon).floor() as usize).max(4);
        let mut tree = BeTreeCore {
            pool,
            merge,
            fanout,
            root: 0,
            height: 1,
            next_msn: 1,
        };
        tree.root = tree.new_node(&Node::Leaf(Leaf::default()))?;
        Ok(tree)
    }

    pub fn fanout(&self) -> usize {
        self.fanout
    }

    pub fn height(&self) -> u16 {
        self.height
    }

    pub fn pool(&self) -> &BufferPool {
        &self.pool
    }

    fn page_size(&self) -> usize {
        self.pool.file().page_size()
    }

    /// Largest key plus value (or operand) a record or message may have.
    pub fn max_entry_bytes(&self) -> usize {
        (self.page_size() - NODE_HEADER_END) / 4 - MESSAGE_OVERHEAD
    }

    /// Applies a batch of writes (puts, deletes; weights are not kept) as one group of messages.
    pub fn apply_batch(&mut self, ops: &[WriteOp]) -> Result<()> {
        let mut msgs = Vec::with_capacity(ops.len());
        for op in ops {
            let msn = self.next_msn + msgs.len() as u64;
            msgs.push(match op {
                WriteOp::Put { key, value } | WriteOp::PutWeighted { key, value, .. } => {
                    Message::put(key.clone(), value.clone(), msn)
                }
                WriteOp::Delete { key } => Message::delete(key.clone(), msn),
            });
        }
        self.apply_messages(msgs)
    }

    /// Adds an upsert of `key` with `operand` (combined with the key's value by the merge operator).
    pub fn upsert(&mut self, key: &[u8], operand: &[u8]) -> Result<()> {
        self.apply_messages(vec![Message::upsert(
            key.to_vec(),
            operand.to_vec(),
            self.next_msn,
        )])
    }

    fn apply_messages(&mut self, msgs: Vec<Message>) -> Result<()> {
        let limit = self.max_entry_bytes();
        if let Some(m) = msgs.iter().find(|m| m.key.len() + m.value.len() > limit) {
            return Err(Error::invalid(format!(
                "a key and value of {} bytes exceed the {limit} bytes a Bε-tree entry may take with {}-byte pages",
                m.key.len() + m.value.len(),
                self.page_size()
            )));
        }
        if msgs.is_empty() {
            return Ok(());
        }
        self.next_msn += msgs.len() as u64;
        // Sorted by (key, MSN) and folded into buffer shape.
        let mut batch = MessageBuffer::default();
        let mut sorted = msgs;
        sorted.sort_by(|a, b| a.key.cmp(&b.key).then(a.msn.cmp(&b.msn)));
        batch.merge_newer(sorted, &self.merge);
        let msgs = batch.into_messages();
        let mut pieces = self.add(self.root, self.height - 1, msgs)?;
        let mut level = self.height - 1;
        loop {
            match pieces.len() {
                0 => {
                    self.root = self.new_node(&Node::Leaf(Leaf::default()))?;
                    self.height = 1;
                    return Ok(());
                }
                1 => {
                    self.root = pieces[0].1;
                    self.height = level + 1;
                    return self.collapse_root();
                }
                _ => {
                    level += 1;
                    let node = Inner {
                        level,
                        pivots: pieces[1..]
                            .iter()
                            .map(|(k, _)| k.clone().expect("later pieces have a lower key"))
                            .collect(),
                        children: pieces.iter().map(|p| p.1).collect(),
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
            let (Node::Inner(n), epoch) = self.read_node(self.root, self.height - 1)? else {
                break;
            };
            if n.children.len() > 1 || !n.buffer.is_empty() {
                break;
            }
            self.discard(self.root, epoch);
            self.root = n.children[0];
            self.height -= 1;
        }
        Ok(())
    }

    /// Adds `msgs` (buffer shape, newer than everything below) to node `id` at `level`; its replacement.
    fn add(&mut self, id: PageId, level: u16, msgs: Vec<Message>) -> Result<Pieces> {
        let (node, epoch) = self.read_node(id, level)?;
        match node {
            Node::Leaf(leaf) => {
                let records = apply_to_records(leaf.records, &msgs, &self.merge);
                self.write_leaf(id, epoch, records)
            }
            Node::Inner(mut node) => {
                node.buffer.merge_newer(msgs, &self.merge);
                while node.encoded_len() > self.page_size() && !node.buffer.is_empty() {
                    self.flush_heaviest(&mut node)?;
                }
                if node.children.is_empty() {
                    self.discard(id, epoch);
                    return Ok(Vec::new());
                }
                self.split_inner(Some(id), node)
            }
        }
    }

    /// Moves the buffered messages of the child with the most message bytes into it.
    fn flush_heaviest(&mut self, node: &mut Inner) -> Result<()> {
        let weight = |i: usize| -> usize {
            let (lo, hi) = node.child_bounds(i);
            node.buffer.messages()[node.buffer.range_of(lo, hi)]
                .iter()
                .map(message_len)
                .sum()
        };
        let i = (0..node.children.len())
            .max_by_key(|&i| weight(i))
            .expect("an inner node has children");
        let (lo, hi) = node.child_bounds(i);
        let r = node.buffer.range_of(lo, hi);
        let msgs = node.buffer.take_range(r);
        let pieces = self.add(node.children[i], node.level - 1, msgs)?;
        // Child i becomes the pieces; an emptied child disappears with the pivot that bounds it.
        if pieces.is_empty() {
            node.children.remove(i);
            if !node.pivots.is_empty() {
                node.pivots.remove(i.saturating_sub(1));
            }
            return Ok(());
        }
        node.children.splice(i..=i, pieces.iter().map(|p| p.1));
        node.pivots.splice(
            i..i,
            pieces[1..]
                .iter()
                .map(|(k, _)| k.clone().expect("later pieces have a lower key")),
        );
        Ok(())
    }

    /// Writes `node` back as one page or, when it has more than `fanout` children or does not fit, as
    /// several (split by children; each part keeps the messages of its key interval). `id`: the node's page
    /// (None: a new node).
    fn split_inner(&mut self, id: Option<PageId>, node: Inner) -> Result<Pieces> {
        let fits =
            |n: &Inner| n.children.len() <= self.fanout && n.encoded_len() <= self.page_size();
        let mut parts: Vec<(Option<Vec<u8>>, Inner)> = vec![(None, node)];
        while let Some(j) = parts.iter().position(|(_, n)| !fits(n)) {
            let (lo, mut left) = parts.remove(j);
            let half = left.children.len() / 2;
            let right_children = left.children.split_off(half);
            let mut right_pivots = left.pivots.split_off(half - 1);
            let sep = right_pivots.remove(0);
            let right_buffer = left.buffer.split_off_at(&sep);
            let right = Inner {
                level: left.level,
                pivots: right_pivots,
                children: right_children,
                buffer: right_buffer,
            };
            parts.insert(j, (Some(sep), right));
            parts.insert(j, (lo, left));
        }
        let mut out = Vec::with_capacity(parts.len());
        for (k, (lo, n)) in parts.into_iter().enumerate() {
            let page = match (k, id) {
                (0, Some(id)) => self.write_node(id, &Node::Inner(n))?,
                _ => self.new_node(&Node::Inner(n))?,
            };
            out.push((lo, page));
        }
        Ok(out)
    }

    /// Writes `records` as leaf `id` (of page epoch `epoch`), split over new pages when they do not fit one;
    /// none when empty.
    fn write_leaf(
        &mut self,
        id: PageId,
        epoch: u64,
        records: Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<Pieces> {
        if records.is_empty() {
            self.discard(id, epoch);
            return Ok(Vec::new());
        }
        let size = |r: &(Vec<u8>, Vec<u8>)| RECORD_OVERHEAD + r.0.len() + r.1.len();
        let usable = self.page_size() - NODE_HEADER_END;
        let target = usable * 3 / 4;
        let total: usize = records.iter().map(size).sum();
        let mut groups: Vec<Vec<(Vec<u8>, Vec<u8>)>> = Vec::new();
        if total <= usable {
            groups.push(records);
        } else {
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
        }
        let mut out = Vec::with_capacity(groups.len());
        for (k, records) in groups.into_iter().enumerate() {
            let lo = (k > 0).then(|| records[0].0.clone());
            let node = Node::Leaf(Leaf { records });
            let page = if k == 0 {
                self.write_node(id, &node)?
            } else {
                self.new_node(&node)?
            };
            out.push((lo, page));
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
            match self.read_node(id, level)?.0 {
                Node::Inner(n) => {
                    path.push(n.buffer.on_key(key).to_vec());
                    id = n.children[n.child_for(key)];
                    level -= 1;
                }
                Node::Leaf(l) => {
                    let base = l
                        .records
                        .binary_search_by(|r| r.0.as_slice().cmp(key))
                        .ok()
                        .map(|i| l.records[i].1.clone());
                    return Ok(resolve(key, base, path.iter().rev().flatten(), &self.merge));
                }
            }
        }
    }

    /// The records with keys in `[lo, hi)` (`hi = None`: no upper bound), in key order.
    pub fn range(&self, lo: &[u8], hi: Option<&[u8]>) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::new();
        let mut from = lo.to_vec();
        loop {
            let mut id = self.root;
            let mut level = self.height - 1;
            // The interval of the current node, and each ancestor's messages within the leaf's interval.
            let (mut node_lo, mut node_hi): (Option<Vec<u8>>, Option<Vec<u8>>) = (None, None);
            let mut ancestors: Vec<Vec<Message>> = Vec::new();
            let leaf = loop {
                match self.read_node(id, level)?.0 {
                    Node::Inner(mut n) => {
                        let i = n.child_for(&from);
                        let (clo, chi) = n.child_bounds(i);
                        if let Some(c) = clo {
                            node_lo = Some(c.to_vec());
                        }
                        if let Some(c) = chi {
                            node_hi = Some(c.to_vec());
                        }
                        let r = n.buffer.range_of(node_lo.as_deref(), node_hi.as_deref());
                        ancestors.push(n.buffer.take_range(r));
                        id = n.children[i];
                        level -= 1;
                    }
                    Node::Leaf(l) => break l,
                }
            };
            // An ancestor's messages were taken over its child's interval: keep the leaf's.
            let in_leaf = |k: &[u8]| {
                node_lo.as_deref().is_none_or(|l| k >= l)
                    && node_hi.as_deref().is_none_or(|h| k < h)
            };
            let mut records = leaf.records;
            for msgs in ancestors.iter_mut().rev() {
                msgs.retain(|m| in_leaf(&m.key));
                records = apply_to_records(records, msgs, &self.merge);
            }
            for (k, v) in records {
                if k.as_slice() >= from.as_slice() && hi.is_none_or(|h| k.as_slice() < h) {
                    out.push((k, v));
                }
            }
            match node_hi {
                Some(next) if hi.is_none_or(|h| next.as_slice() < h) => from = next,
                _ => return Ok(out),
            }
        }
    }

    /// Node `id`, which must be at `level`, with the epoch of its page (what freeing it needs).
    fn read_node(&self, id: PageId, level: u16) -> Result<(Node, u64)> {
        let page = self.pool.read(id)?;
        let epoch = page_epoch(&page);
        let corrupt = |d: String| {
            Error::corruption(
                self.pool.file().path(),
                id * self.page_size() as u64,
                format!("Bε-tree node {id}: {d}"),
            )
        };
        let node = Node::decode(&page).map_err(corrupt)?;
        let found = match &node {
            Node::Leaf(_) => 0,
            Node::Inner(n) => n.level,
        };
        if found != level {
            return Err(corrupt(format!("level {found} where {level} was expected")));
        }
        Ok((node, epoch))
    }

    /// Writes `node` over page `id` (relocated if it belongs to the last checkpoint); the page it is on.
    fn write_node(&mut self, id: PageId, node: &Node) -> Result<PageId> {
        let mut page = self.pool.write_cow(id)?;
        node.encode(&mut page).map_err(Error::invalid)?;
        Ok(page.id())
    }

    fn new_node(&mut self, node: &Node) -> Result<PageId> {
        let mut page = self.pool.allocate()?;
        node.encode(&mut page).map_err(Error::invalid)?;
        Ok(page.id())
    }

    /// Frees page `id` of epoch `epoch` (a node that no longer exists).
    fn discard(&mut self, id: PageId, epoch: u64) {
        self.pool.free(id, epoch);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::betree::message::tests::adder;
    use crate::storage::{FileKind, IoStats, MemVfs, PageFile, PageFileOptions, Vfs};
    use proptest::prelude::*;
    use std::collections::BTreeMap;
    use std::path::Path;
    use std::sync::Arc;

    fn tree(frames: usize, stats: Arc<IoStats>) -> BeTreeCore {
        let vfs: Arc<dyn Vfs> = Arc::new(MemVfs::new());
        let opts = PageFileOptions {
            page_size: 4096,
            direct: false,
        };
        let pf = PageFile::create(&vfs, Path::new("/t.pages"), opts, stats).unwrap();
        BeTreeCore::create(BufferPool::new(pf, frames * 4096, None), 0.5, adder()).unwrap()
    }

    #[derive(Debug, Clone)]
    enum Op {
        Put(u16, usize),
        Delete(u16),
        Upsert(u16, u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (any::<u16>(), 0usize..120).prop_map(|(k, n)| Op::Put(k % 3000, n)),
            2 => any::<u16>().prop_map(|k| Op::Delete(k % 3000)),
            1 => (any::<u16>(), 1u64..9).prop_map(|(k, d)| Op::Upsert(k % 3000, d)),
        ]
    }

    fn key(k: u16) -> Vec<u8> {
        k.to_be_bytes().to_vec()
    }

    proptest! {
        #![proptest_config(crate::index::dynamized::alias_shard::stats::proptest_config(8))]

        /// Random batches of puts, deletes and upserts against a `BTreeMap`, through a small cache: every
        /// key's value and every range agree with the model, and reads write nothing.
        #[test]
        fn matches_a_btreemap_model(batches in prop::collection::vec(prop::collection::vec(op(), 1..200), 1..40)) {
            let stats = Arc::new(IoStats::new());
            let mut t = tree(16, stats.clone());
            let merge = adder();
            let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
            for batch in &batches {
                let mut ops = Vec::new();
                for o in batch {
                    match *o {
                        Op::Put(k, n) => {
                            let v = vec![k as u8; n];
                            ops.push(WriteOp::Put { key: key(k), value: v.clone() });
                            model.insert(key(k), v);
                        }
                        Op::Delete(k) => {
                            ops.push(WriteOp::Delete { key: key(k) });
                            model.remove(&key(k));
                        }
                        Op::Upsert(k, d) => {
                            // Upserts go one by one, after the batch so far.
                            t.apply_batch(&std::mem::take(&mut ops)).unwrap();
                            t.upsert(&key(k), &d.to_be_bytes()).unwrap();
                            let v = merge(&key(k), model.get(&key(k)).map(Vec::as_slice), &d.to_be_bytes());
                            model.insert(key(k), v.unwrap());
                        }
                    }
                }
                t.apply_batch(&ops).unwrap();
            }
            // Everything dirty goes to disk first: from here on, any write would be a read's.
            t.pool().commit(&[]).unwrap();
            let writes = stats.snapshot().kind(FileKind::Pages).writes;
            for k in (0..3000u16).step_by(7) {
                prop_assert_eq!(t.get(&key(k)).unwrap(), model.get(&key(k)).cloned(), "key {}", k);
            }
            let all: Vec<(Vec<u8>, Vec<u8>)> = model.clone().into_iter().collect();
            prop_assert_eq!(t.range(&[], None).unwrap(), all);
            let part: Vec<(Vec<u8>, Vec<u8>)> = model
                .range(key(500)..key(1700))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            prop_assert_eq!(t.range(&key(500), Some(&key(1700))).unwrap(), part);
            prop_assert_eq!(stats.snapshot().kind(FileKind::Pages).writes, writes, "a read wrote");
        }
    }

    #[test]
    fn grows_in_height_and_shrinks_back() {
        let mut t = tree(64, Arc::new(IoStats::new()));
        let ops: Vec<WriteOp> = (0..20_000u32)
            .map(|i| WriteOp::Put {
                key: i.wrapping_mul(2_654_435_761).to_be_bytes().to_vec(),
                value: vec![1; 24],
            })
            .collect();
        for chunk in ops.chunks(500) {
            t.apply_batch(chunk).unwrap();
        }
        assert!(t.height() >= 3, "height {}", t.height());
        let all = t.range(&[], None).unwrap();
        for w in all.windows(2) {
            assert!(
                w[0].0 < w[1].0,
                "range out of order: {:?} then {:?}",
                w[0].0,
                w[1].0
            );
        }
        assert_eq!(all.len(), 20_000);
        let dels: Vec<WriteOp> = ops
            .iter()
            .map(|o| match o {
                WriteOp::Put { key, .. } => WriteOp::Delete { key: key.clone() },
                _ => unreachable!(),
            })
            .collect();
        for chunk in dels.chunks(500) {
            t.apply_batch(chunk).unwrap();
        }
        assert!(t.range(&[], None).unwrap().is_empty());
        let too_big = vec![0u8; t.max_entry_bytes() + 1];
        assert!(
            t.apply_batch(&[WriteOp::Put {
                key: vec![1],
                value: too_big
            }])
            .is_err()
        );
    }
}
