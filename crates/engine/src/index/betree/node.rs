//! Bε-tree nodes and their page format.
//!
//! A node is decoded whole into a [`Node`], changed in memory, and encoded whole back into its page: a
//! Bε-tree node is rewritten as a unit anyway (a flush moves a batch of messages, a leaf takes a batch), and
//! whole-node coding keeps the format simple to verify. Keys and values in memory are [`Bytes`] (inline up to
//! 16 bytes), so decoding a node of short entries allocates only its vectors, not one buffer per key and
//! value. Reads of fixed-width trees need not decode: point lookups, scan routes through inner nodes and
//! windows of leaf records are read in place (`FixedPage`). Pages are the buffer pool's bytes, starting with
//! the 24-byte page header of `storage::page` (checksum, type, reserved, epoch); [`Node::encode`] sets the type
//! byte and writes from byte 24 on, zeroing the rest of the page; it never touches the checksum or the epoch.
//! Integers are little endian.
//!
//! | bytes  | field                                                                        |
//! |--------|------------------------------------------------------------------------------|
//! | 24..26 | level (u16): 0 = leaf, h ≥ 1 = inner node whose children are at level h − 1  |
//! | 26..30 | entries (u32): leaf records, or inner children                               |
//! | 30..34 | messages (u32): inner only, 0 in a leaf                                      |
//! | 34..38 | body length (u32): bytes used from byte 48 on                                |
//! | 38..40 | zero                                                                         |
//! | 40..48 | max MSN (u64): the newest message sequence number the node holds or applied  |
//! | 48..   | body                                                                         |
//!
//! Keys and values are written per the tree's [`NodeFormat`]: a type of fixed width (e.g. `u32`, `u64`) is
//! written as its bytes alone, a variable one as a u32 length and the bytes. So a buffered message of a
//! `u32 → u32` tree takes 8 bytes and 2 bits, as in the Froese report's nodes (8-byte pairs).
//!
//! * Leaf body: per record, key then value; keys strictly ascending.
//! * Inner body: the child page ids (u64 each); the n − 1 pivot keys, strictly ascending — child i holds the
//!   keys in [pivot i − 1, pivot i); the buffer's messages (key, then value: a put's value, an upsert's
//!   operand, nothing for a delete of a variable-width value or zeros for a fixed-width one) in buffer shape
//!   (see `message`); then the messages' kinds, 2 bits each (1 put, 2 delete, 3 upsert), four to a byte.
//!
//! Messages carry no MSN of their own: a key's messages within a node are in arrival order, messages only
//! move down, and each node records the newest MSN it holds, so a parent's max MSN is never below its
//! children's (`strata check` verifies it).
//!
//! Decoding treats the page as untrusted: every length is checked against the page before anything is
//! allocated, and order, shape, level/type agreement and child ids (never the meta pages 0 and 1) are
//! verified; what is wrong comes back as a description, which the tree turns into `Error::Corruption` with
//! the file and the page's offset. Cost: O(page size) per decode or encode.

pub use super::bytes::Record;
use super::bytes::{Bytes, cmp_keys, key_lt};
use super::message::{Message, MessageBuffer, MessageKind};
use crate::storage::codec::{Reader, get};
use crate::storage::page::{PAGE_HEADER_LEN, PageId, PageType, page_type, set_page_type};
use std::cmp::Ordering;

/// Bytes before a node's body.
pub const NODE_HEADER_END: usize = 48;
/// Bytes of a length prefix (variable-width keys and values).
const LEN_PREFIX: usize = 4;
/// Bytes of a child page id.
pub const CHILD_ID_LEN: usize = 8;

/// How keys and values are laid out in nodes: `Some(w)` = always `w` bytes, written without a length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NodeFormat {
    pub key_width: Option<usize>,
    pub value_width: Option<usize>,
}

impl NodeFormat {
    /// Keys and values of any length.
    pub const VARIABLE: NodeFormat = NodeFormat {
        key_width: None,
        value_width: None,
    };

    fn item_len(width: Option<usize>, len: usize) -> usize {
        width.unwrap_or(LEN_PREFIX + len)
    }

    /// Bytes of a key (a record's, a message's or a pivot).
    pub fn key_len(&self, key: &[u8]) -> usize {
        Self::item_len(self.key_width, key.len())
    }

    /// Bytes of one leaf record.
    pub fn record_len(&self, key: &[u8], value: &[u8]) -> usize {
        self.key_len(key) + Self::item_len(self.value_width, value.len())
    }

    /// Bytes of one buffered message, besides its share of the kind bits.
    pub fn message_len(&self, m: &Message) -> usize {
        self.key_len(&m.key) + Self::item_len(self.value_width, m.value.len())
    }

    /// Bytes of a buffer's messages, besides their kind bits (Σ `message_len`, from the buffer's sums).
    pub fn buffer_len(&self, b: &MessageBuffer) -> usize {
        let n = b.len();
        let items =
            |width: Option<usize>, bytes: usize| width.map_or(LEN_PREFIX * n + bytes, |w| w * n);
        items(self.key_width, b.key_bytes()) + items(self.value_width, b.value_bytes())
    }

    /// Whether `m` can be written: fixed-width keys, values and operands have exactly that width.
    pub fn check_message(&self, m: &Message) -> Result<(), String> {
        self.check_entry(&m.key, m.kind, &m.value)
    }

    /// [`check_message`](Self::check_message) of a message given by its parts.
    pub fn check_entry(&self, key: &[u8], kind: MessageKind, value: &[u8]) -> Result<(), String> {
        if let Some(w) = self.key_width.filter(|&w| w != key.len()) {
            return Err(format!(
                "a key of {} bytes in a tree of {w}-byte keys",
                key.len()
            ));
        }
        match self.value_width {
            Some(w) if kind != MessageKind::Delete && value.len() != w => Err(format!(
                "a value or operand of {} bytes in a tree of {w}-byte values",
                value.len()
            )),
            _ => Ok(()),
        }
    }
}

/// Bytes of the kind bits of `n` messages.
fn kinds_len(n: usize) -> usize {
    n.div_ceil(4)
}

/// A leaf: records sorted by key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Leaf {
    pub max_msn: u64,
    pub records: Vec<Record>,
}

/// An inner node: children, the pivots between them, and the buffer of messages on their way down.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inner {
    /// ≥ 1; children are at `level − 1`.
    pub level: u16,
    pub max_msn: u64,
    /// `children.len() − 1` keys, strictly ascending.
    pub pivots: Vec<Bytes>,
    pub children: Vec<PageId>,
    pub buffer: MessageBuffer,
}

impl Inner {
    /// Bytes the node takes in a page, header included.
    pub fn encoded_len(&self, f: &NodeFormat) -> usize {
        NODE_HEADER_END
            + CHILD_ID_LEN * self.children.len()
            + self.pivots.iter().map(|p| f.key_len(p)).sum::<usize>()
            + f.buffer_len(&self.buffer)
            + kinds_len(self.buffer.len())
    }

    /// The child that holds `key`.
    pub fn child_for(&self, key: &[u8]) -> usize {
        self.pivots
            .partition_point(|p| cmp_keys(p, key) != Ordering::Greater)
    }

    /// The key interval of child `i`: `[lo, hi)` with `None` for unbounded (within this node's own
    /// interval).
    pub fn child_bounds(&self, i: usize) -> (Option<&[u8]>, Option<&[u8]>) {
        let lo = i.checked_sub(1).map(|j| self.pivots[j].as_slice());
        (lo, self.pivots.get(i).map(Bytes::as_slice))
    }
}

impl Leaf {
    /// Bytes the leaf takes in a page, header included.
    pub fn encoded_len(&self, f: &NodeFormat) -> usize {
        NODE_HEADER_END
            + self
                .records
                .iter()
                .map(|(k, v)| f.record_len(k, v))
                .sum::<usize>()
    }
}

/// A decoded node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    Leaf(Leaf),
    Inner(Inner),
}

impl Node {
    /// Bytes the node takes in a page, header included.
    pub fn encoded_len(&self, f: &NodeFormat) -> usize {
        match self {
            Node::Leaf(l) => l.encoded_len(f),
            Node::Inner(n) => n.encoded_len(f),
        }
    }

    /// The newest MSN the node holds or applied.
    pub fn max_msn(&self) -> u64 {
        match self {
            Node::Leaf(l) => l.max_msn,
            Node::Inner(n) => n.max_msn,
        }
    }

    /// Writes the node into `page` (the whole page: type byte, then everything from byte 24). Fails, writing
    /// nothing, if it does not fit or an item does not have its format's width.
    pub fn encode(&self, page: &mut [u8], f: &NodeFormat) -> Result<(), String> {
        let len = self.encoded_len(f);
        if len > page.len() {
            return Err(format!(
                "a node of {len} bytes does not fit a page of {} bytes",
                page.len()
            ));
        }
        self.check_widths(f)?;
        page[PAGE_HEADER_LEN..].fill(0);
        let mut w = Writer {
            page,
            at: NODE_HEADER_END,
        };
        let (level, entries, messages) = match self {
            Node::Leaf(l) => {
                for (k, v) in &l.records {
                    w.item(f.key_width, k);
                    w.item(f.value_width, v);
                }
                (0u16, l.records.len(), 0)
            }
            Node::Inner(n) => {
                for &c in &n.children {
                    w.bytes(&c.to_le_bytes());
                }
                for p in &n.pivots {
                    w.item(f.key_width, p);
                }
                let msgs = n.buffer.messages();
                for m in msgs {
                    w.item(f.key_width, &m.key);
                    match (f.value_width, m.kind) {
                        (Some(vw), MessageKind::Delete) => w.at += vw,
                        (vw, _) => w.item(vw, &m.value),
                    }
                }
                for (i, m) in msgs.iter().enumerate() {
                    w.page[w.at + i / 4] |= (m.kind as u8) << (2 * (i % 4));
                }
                w.at += kinds_len(msgs.len());
                (n.level, n.children.len(), msgs.len())
            }
        };
        let body = w.at - NODE_HEADER_END;
        debug_assert_eq!(w.at, len);
        page[24..26].copy_from_slice(&level.to_le_bytes());
        page[26..30].copy_from_slice(&(entries as u32).to_le_bytes());
        page[30..34].copy_from_slice(&(messages as u32).to_le_bytes());
        page[34..38].copy_from_slice(&(body as u32).to_le_bytes());
        page[40..48].copy_from_slice(&self.max_msn().to_le_bytes());
        set_page_type(
            page,
            if level == 0 {
                PageType::BeLeaf
            } else {
                PageType::BeInner
            },
        );
        Ok(())
    }

    fn check_widths(&self, f: &NodeFormat) -> Result<(), String> {
        let bad = |width: Option<usize>, b: &[u8]| width.is_some_and(|w| w != b.len());
        match self {
            Node::Leaf(l) => {
                if let Some((k, v)) = l
                    .records
                    .iter()
                    .find(|(k, v)| bad(f.key_width, k) || bad(f.value_width, v))
                {
                    return Err(format!(
                        "a record of a {}-byte key and a {}-byte value does not have the tree's widths",
                        k.len(),
                        v.len()
                    ));
                }
            }
            Node::Inner(n) => {
                if let Some(p) = n.pivots.iter().find(|p| bad(f.key_width, p)) {
                    return Err(format!("a pivot of {} bytes", p.len()));
                }
                for m in n.buffer.messages() {
                    f.check_message(m)?;
                }
            }
        }
        Ok(())
    }

    /// Reads the node in `page` (untrusted bytes); a description of the damage otherwise.
    pub fn decode(page: &[u8], f: &NodeFormat) -> Result<Node, String> {
        if let Some(p) = FixedPage::new(page, f)? {
            return p.decode();
        }
        let NodeHeader {
            level,
            entries,
            messages,
            body,
            max_msn,
        } = NodeHeader::read(page)?;
        let end = NODE_HEADER_END
            .checked_add(body)
            .filter(|&e| e <= page.len())
            .ok_or_else(|| format!("node body of {body} bytes overruns the page"))?;
        let mut r = Reader::new_at(&page[..end], NODE_HEADER_END)?;
        // The fewest bytes one key or value can take.
        let least = |w: Option<usize>| w.unwrap_or(LEN_PREFIX);
        // The node, and where its entries end.
        let node = if level == 0 {
            if messages != 0 {
                return Err(format!("a leaf claims {messages} buffered messages"));
            }
            check_count(
                &r,
                entries,
                least(f.key_width) + least(f.value_width),
                "records",
            )?;
            let mut records: Vec<Record> = Vec::with_capacity(entries);
            for i in 0..entries {
                let key = item(&mut r, f.key_width)?;
                let value = item(&mut r, f.value_width)?;
                if records.last().is_some_and(|(prev, _)| !key_lt(prev, key)) {
                    return Err(format!("leaf record {i} is out of key order"));
                }
                records.push((Bytes::from(key), Bytes::from(value)));
            }
            (Node::Leaf(Leaf { max_msn, records }), r.position())
        } else {
            // One child is legal (the only child of a root about to collapse, or a node whose siblings'
            // keys were all deleted until a merge takes it); none is not.
            if entries == 0 {
                return Err("an inner node has no children".into());
            }
            check_count(&r, entries, CHILD_ID_LEN, "children")?;
            let mut children = Vec::with_capacity(entries);
            for i in 0..entries {
                let c = r.u64()?;
                if c < 2 {
                    return Err(format!("child {i} points at meta page {c}"));
                }
                children.push(c);
            }
            check_count(&r, entries - 1, least(f.key_width), "pivots")?;
            let mut pivots: Vec<Bytes> = Vec::with_capacity(entries - 1);
            for i in 0..entries - 1 {
                let key = item(&mut r, f.key_width)?;
                if pivots.last().is_some_and(|prev| !key_lt(prev, key)) {
                    return Err(format!("pivot {i} is out of key order"));
                }
                pivots.push(Bytes::from(key));
            }
            check_count(
                &r,
                messages,
                least(f.key_width) + least(f.value_width),
                "messages",
            )?;
            // Kinds first (they follow the messages): a delete's fixed-width value slot is skipped.
            let kinds_at = end
                .checked_sub(kinds_len(messages))
                .filter(|&k| k >= r.position())
                .ok_or_else(|| format!("the kinds of {messages} messages overrun the node"))?;
            let kind_of = |i: usize| -> Result<MessageKind, String> {
                let v = (page[kinds_at + i / 4] >> (2 * (i % 4))) & 3;
                MessageKind::from_u8(v).ok_or_else(|| format!("message {i} has unknown kind {v}"))
            };
            let mut list = Vec::with_capacity(messages);
            let mut r = Reader::new_at(&page[..kinds_at], r.position())?;
            for i in 0..messages {
                let kind = kind_of(i)?;
                let key = Bytes::from(item(&mut r, f.key_width)?);
                let value = match (kind, f.value_width) {
                    (MessageKind::Delete, Some(vw)) => {
                        if r.bytes(vw)?.iter().any(|&b| b != 0) {
                            return Err(format!("delete message {i} carries a value"));
                        }
                        Bytes::new()
                    }
                    (_, vw) => Bytes::from(item(&mut r, vw)?),
                };
                if kind == MessageKind::Delete && !value.is_empty() {
                    return Err(format!("delete message {i} carries a value"));
                }
                list.push(Message { key, kind, value });
            }
            if r.position() != kinds_at {
                return Err(format!(
                    "node messages end at byte {} but the kinds start at {kinds_at}",
                    r.position()
                ));
            }
            if (messages..kinds_len(messages) * 4).any(|i| kind_of(i).is_ok()) {
                return Err("kind bits are set past the last message".into());
            }
            let buffer = MessageBuffer::from_sorted(list)?;
            let node = Node::Inner(Inner {
                level,
                max_msn,
                pivots,
                children,
                buffer,
            });
            (node, end)
        };
        let (node, entries_end) = node;
        if entries_end != end {
            return Err(format!(
                "node body is {body} bytes but its entries end after {}",
                entries_end - NODE_HEADER_END
            ));
        }
        Ok(node)
    }
}

/// The fields of a node page's header, read from a page long enough to hold one and whose type agrees
/// with its level (the body is not looked at).
#[derive(Debug, Clone, Copy)]
struct NodeHeader {
    level: u16,
    /// Records of a leaf, children of an inner node.
    entries: usize,
    messages: usize,
    body: usize,
    max_msn: u64,
}

impl NodeHeader {
    fn read(page: &[u8]) -> Result<NodeHeader, String> {
        if page.len() < NODE_HEADER_END {
            return Err(format!("a page of {} bytes cannot hold a node", page.len()));
        }
        let u32_at = |at: usize| get::<u32>(page, at).map(|v| v as usize);
        let level = page_level(page);
        let expected = if level == 0 {
            PageType::BeLeaf
        } else {
            PageType::BeInner
        };
        if page_type(page) != expected as u8 {
            return Err(format!(
                "page type {} does not match a node of level {level}",
                page_type(page)
            ));
        }
        Ok(NodeHeader {
            level,
            entries: u32_at(26)?,
            messages: u32_at(30)?,
            body: u32_at(34)?,
            max_msn: get::<u64>(page, 40)?,
        })
    }
}

/// The level stored in a node page's header (0 = leaf).
pub fn page_level(page: &[u8]) -> u16 {
    u16::from_le_bytes([page[24], page[25]])
}

/// What one node says about a key on the way down.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PageLookup {
    /// An inner node: its messages on the key (oldest first) and the child that holds the key.
    Inner {
        messages: Vec<Message>,
        child: PageId,
    },
    /// A leaf: the key's value, if it has a record.
    Leaf(Option<Bytes>),
}

impl PageLookup {
    /// The lookup of `key` in a decoded node.
    pub fn of_node(node: &Node, key: &[u8]) -> PageLookup {
        match node {
            Node::Inner(n) => PageLookup::Inner {
                messages: n.buffer.on_key(key).to_vec(),
                child: n.children[n.child_for(key)],
            },
            Node::Leaf(l) => PageLookup::Leaf(
                l.records
                    .binary_search_by(|r| cmp_keys(&r.0, key))
                    .ok()
                    .map(|i| l.records[i].1.clone()),
            ),
        }
    }
}

/// A node page of a tree whose keys and values both have a fixed width, read in place: its header checked
/// against its body, and binary searches over its arrays. The entries' order is what the checksum vouches
/// for (a page that passed it is the page that was written).
struct FixedPage<'a> {
    page: &'a [u8],
    kw: usize,
    pair: usize,
    h: NodeHeader,
}

impl<'a> FixedPage<'a> {
    /// `None` for formats with a variable width.
    fn new(page: &'a [u8], f: &NodeFormat) -> Result<Option<FixedPage<'a>>, String> {
        let (Some(kw), Some(vw)) = (f.key_width, f.value_width) else {
            return Ok(None);
        };
        let h = NodeHeader::read(page)?;
        let (level, entries, messages, body) = (h.level, h.entries, h.messages, h.body);
        let pair = kw + vw;
        let need = if level == 0 {
            (messages == 0).then(|| entries.checked_mul(pair)).flatten()
        } else {
            (entries >= 1)
                .then(|| {
                    let ids = entries.checked_mul(CHILD_ID_LEN)?;
                    let pivots = (entries - 1).checked_mul(kw)?;
                    let msgs = messages.checked_mul(pair)?;
                    ids.checked_add(pivots)?
                        .checked_add(msgs)?
                        .checked_add(kinds_len(messages))
                })
                .flatten()
        };
        if need != Some(body) || NODE_HEADER_END + body > page.len() {
            return Err(format!(
                "node header (level {level}, {entries} entries, {messages} messages) disagrees with its body of {body} bytes"
            ));
        }
        Ok(Some(FixedPage { page, kw, pair, h }))
    }

    fn pivots_at(&self) -> usize {
        NODE_HEADER_END + self.h.entries * CHILD_ID_LEN
    }

    fn msgs_at(&self) -> usize {
        self.pivots_at() + (self.h.entries - 1) * self.kw
    }

    /// Index of the first of `n` items of `size` bytes from `start` whose key is not below `key` (above
    /// it, when `strict`).
    fn lower_bound(&self, start: usize, n: usize, size: usize, key: &[u8], strict: bool) -> usize {
        let (mut lo, mut hi) = (0, n);
        while lo < hi {
            let mid = (lo + hi) / 2;
            let k = &self.page[start + mid * size..start + mid * size + self.kw];
            let below = match cmp_keys(k, key) {
                Ordering::Less => true,
                Ordering::Equal => strict,
                Ordering::Greater => false,
            };
            if below {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    fn pivot(&self, j: usize) -> &'a [u8] {
        let at = self.pivots_at() + j * self.kw;
        &self.page[at..at + self.kw]
    }

    fn child(&self, i: usize) -> Result<PageId, String> {
        let at = NODE_HEADER_END + i * CHILD_ID_LEN;
        let child = u64::from_le_bytes(self.page[at..at + 8].try_into().expect("8 bytes"));
        if child < 2 {
            return Err(format!("child {i} points at meta page {child}"));
        }
        Ok(child)
    }

    /// Buffered message `i`.
    fn message(&self, i: usize) -> Result<Message, String> {
        let at = self.msgs_at() + i * self.pair;
        let bits = self.kind_bits(i);
        let kind = MessageKind::from_u8(bits)
            .ok_or_else(|| format!("message {i} has unknown kind {bits}"))?;
        let value = match kind {
            MessageKind::Delete => Bytes::new(),
            _ => Bytes::from(&self.page[at + self.kw..at + self.pair]),
        };
        Ok(Message {
            key: Bytes::from(&self.page[at..at + self.kw]),
            kind,
            value,
        })
    }

    /// The kind bits of message `i` (0 is no kind).
    fn kind_bits(&self, i: usize) -> u8 {
        let kinds_at = self.msgs_at() + self.h.messages * self.pair;
        (self.page[kinds_at + i / 4] >> (2 * (i % 4))) & 3
    }

    /// The whole node ([`Node::decode`] of a fixed-width page, whose header this page checked against its
    /// body): arrays of equal-sized items, copied without per-item length checks.
    fn decode(&self) -> Result<Node, String> {
        let (page, max_msn) = (self.page, self.h.max_msn);
        let (kw, pair) = (self.kw, self.pair);
        if self.h.level == 0 {
            let body = &page[NODE_HEADER_END..NODE_HEADER_END + self.h.entries * pair];
            let records: Vec<Record> = body
                .chunks_exact(pair)
                .map(|r| (Bytes::from(&r[..kw]), Bytes::from(&r[kw..])))
                .collect();
            if let Some(i) = records.windows(2).position(|w| !key_lt(&w[0].0, &w[1].0)) {
                return Err(format!("leaf record {} is out of key order", i + 1));
            }
            return Ok(Node::Leaf(Leaf { max_msn, records }));
        }
        let children = (0..self.h.entries)
            .map(|i| self.child(i))
            .collect::<Result<Vec<PageId>, String>>()?;
        let pivots: Vec<Bytes> = (0..self.h.entries - 1)
            .map(|j| Bytes::from(self.pivot(j)))
            .collect();
        if let Some(j) = pivots.windows(2).position(|w| !key_lt(&w[0], &w[1])) {
            return Err(format!("pivot {} is out of key order", j + 1));
        }
        let (at, n) = (self.msgs_at(), self.h.messages);
        let items = &page[at..at + n * pair];
        // Checked first, so that the copy below cannot fail.
        for (i, item) in items.chunks_exact(pair).enumerate() {
            match MessageKind::from_u8(self.kind_bits(i)) {
                None => {
                    return Err(format!(
                        "message {i} has unknown kind {}",
                        self.kind_bits(i)
                    ));
                }
                Some(MessageKind::Delete) if item[kw..].iter().any(|&b| b != 0) => {
                    return Err(format!("delete message {i} carries a value"));
                }
                Some(_) => {}
            }
        }
        if (n..kinds_len(n) * 4).any(|i| self.kind_bits(i) != 0) {
            return Err("kind bits are set past the last message".into());
        }
        let list: Vec<Message> = items
            .chunks_exact(pair)
            .enumerate()
            .map(|(i, item)| {
                let (kind, value) = match self.kind_bits(i) {
                    1 => (MessageKind::Put, Bytes::from(&item[kw..])),
                    2 => (MessageKind::Delete, Bytes::new()),
                    // 3, the only other kind the loop above lets through.
                    _ => (MessageKind::Upsert, Bytes::from(&item[kw..])),
                };
                Message {
                    key: Bytes::from(&item[..kw]),
                    kind,
                    value,
                }
            })
            .collect();
        Ok(Node::Inner(Inner {
            level: self.h.level,
            max_msn,
            pivots,
            children,
            buffer: MessageBuffer::from_sorted(list)?,
        }))
    }

    /// The buffered messages with keys in `[lo, hi)` (`None`: unbounded).
    fn messages_in(&self, lo: Option<&[u8]>, hi: Option<&[u8]>) -> Result<Vec<Message>, String> {
        let (at, n, pair) = (self.msgs_at(), self.h.messages, self.pair);
        let start = lo.map_or(0, |k| self.lower_bound(at, n, pair, k, false));
        let end = hi.map_or(n, |k| self.lower_bound(at, n, pair, k, false));
        (start..end.max(start)).map(|i| self.message(i)).collect()
    }
}

/// The lookup of `key` in a node page, searched in place without decoding it, for trees whose keys and
/// values both have a fixed width; `None` for other formats (decode the node instead).
pub fn lookup_in_page(
    page: &[u8],
    f: &NodeFormat,
    key: &[u8],
) -> Result<Option<PageLookup>, String> {
    let Some(p) = FixedPage::new(page, f)? else {
        return Ok(None);
    };
    let at = NODE_HEADER_END;
    if p.h.level == 0 {
        let (pair, kw) = (p.pair, p.kw);
        let i = p.lower_bound(at, p.h.entries, pair, key, false);
        let hit = (i < p.h.entries && &page[at + i * pair..at + i * pair + kw] == key)
            .then(|| Bytes::from(&page[at + i * pair + kw..at + (i + 1) * pair]));
        return Ok(Some(PageLookup::Leaf(hit)));
    }
    let child_index = p.lower_bound(p.pivots_at(), p.h.entries - 1, p.kw, key, true);
    let child = p.child(child_index)?;
    let mut next = key.to_vec();
    next.push(0);
    Ok(Some(PageLookup::Inner {
        messages: p.messages_in(Some(key), Some(&next))?,
        child,
    }))
}

/// The records of leaf page `page` with keys in `[lo, hi)` (`None`: unbounded), read in place, for
/// fixed-width formats (`None` for others, and for inner nodes).
pub fn leaf_records_in_page(
    page: &[u8],
    f: &NodeFormat,
    lo: Option<&[u8]>,
    hi: Option<&[u8]>,
) -> Result<Option<Vec<Record>>, String> {
    let Some(p) = FixedPage::new(page, f)? else {
        return Ok(None);
    };
    if p.h.level != 0 {
        return Ok(None);
    }
    let (at, n, pair, kw) = (NODE_HEADER_END, p.h.entries, p.pair, p.kw);
    let start = lo.map_or(0, |k| p.lower_bound(at, n, pair, k, false));
    let end = hi.map_or(n, |k| p.lower_bound(at, n, pair, k, false));
    Ok(Some(
        (start..end.max(start))
            .map(|i| {
                let r = &page[at + i * pair..at + (i + 1) * pair];
                (Bytes::from(&r[..kw]), Bytes::from(&r[kw..]))
            })
            .collect(),
    ))
}

/// Where a scan goes through an inner node page: the child, its key interval within the node (`None`:
/// the node's own bound), and the node's messages in that interval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub child: PageId,
    pub lo: Option<Vec<u8>>,
    pub hi: Option<Vec<u8>>,
    pub messages: Vec<Message>,
}

/// The route of a scan through inner node page `page`, searched in place, for fixed-width formats (`None`
/// for others, and for leaves). `cursor`: forward, the child holding it; reverse, the child holding the
/// keys just below it; `None`: the first (forward) or last (reverse) child.
pub fn route_in_page(
    page: &[u8],
    f: &NodeFormat,
    cursor: Option<&[u8]>,
    reverse: bool,
) -> Result<Option<Route>, String> {
    let Some(p) = FixedPage::new(page, f)? else {
        return Ok(None);
    };
    if p.h.level == 0 {
        return Ok(None);
    }
    let pivots = p.h.entries - 1;
    let i = match (reverse, cursor) {
        (false, Some(k)) => p.lower_bound(p.pivots_at(), pivots, p.kw, k, true),
        (false, None) => 0,
        (true, Some(k)) => p.lower_bound(p.pivots_at(), pivots, p.kw, k, false),
        (true, None) => pivots,
    };
    let lo = i.checked_sub(1).map(|j| p.pivot(j));
    let hi = (i < pivots).then(|| p.pivot(i));
    Ok(Some(Route {
        child: p.child(i)?,
        messages: p.messages_in(lo, hi)?,
        lo: lo.map(<[u8]>::to_vec),
        hi: hi.map(<[u8]>::to_vec),
    }))
}

struct Writer<'a> {
    page: &'a mut [u8],
    at: usize,
}

impl Writer<'_> {
    fn bytes(&mut self, b: &[u8]) {
        self.page[self.at..self.at + b.len()].copy_from_slice(b);
        self.at += b.len();
    }
    /// An item of a fixed width (its bytes) or of variable length (u32 length, bytes).
    fn item(&mut self, width: Option<usize>, b: &[u8]) {
        if width.is_none() {
            self.bytes(&(b.len() as u32).to_le_bytes());
        }
        self.bytes(b);
    }
}

/// An item written by `Writer::item`: `width` bytes, or a `u32` length and that many bytes.
fn item<'a>(r: &mut Reader<'a>, width: Option<usize>) -> Result<&'a [u8], String> {
    let len = match width {
        Some(w) => w,
        None => r.u32()? as usize,
    };
    Ok(r.bytes(len)?)
}

/// Fails unless `count` items of at least `each` bytes can fit in what is left (before allocating for them).
fn check_count(r: &Reader<'_>, count: usize, each: usize, what: &str) -> Result<(), String> {
    let left = r.remaining();
    if count.saturating_mul(each) > left {
        return Err(format!(
            "{count} {what} cannot fit in the {left} bytes left of the node"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::betree::message::MergeOperator;
    use proptest::prelude::*;
    use std::sync::Arc;

    fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(any::<u8>(), 0..max)
    }

    /// Items of the format's width, or of 0..max bytes.
    fn item(width: Option<usize>, max: usize) -> BoxedStrategy<Vec<u8>> {
        match width {
            Some(w) => prop::collection::vec(any::<u8>(), w).boxed(),
            None => bytes(max).boxed(),
        }
    }

    /// The variable format, and a fixed one (4-byte keys and values, the `betree-io` suite's pairs).
    fn format() -> impl Strategy<Value = NodeFormat> {
        prop_oneof![
            Just(NodeFormat::VARIABLE),
            Just(NodeFormat {
                key_width: Some(4),
                value_width: Some(4)
            }),
            Just(NodeFormat {
                key_width: Some(8),
                value_width: None
            }),
        ]
    }

    fn leaf(f: NodeFormat) -> impl Strategy<Value = Node> {
        (
            prop::collection::btree_map(item(f.key_width, 12), item(f.value_width, 40), 0..40),
            any::<u64>(),
        )
            .prop_map(|(m, max_msn)| {
                Node::Leaf(Leaf {
                    max_msn,
                    records: m.into_iter().map(|(k, v)| (k.into(), v.into())).collect(),
                })
            })
    }

    fn inner(f: NodeFormat) -> impl Strategy<Value = Node> {
        let pivots = prop::collection::btree_set(item(f.key_width, 10), 1..12);
        let messages = prop::collection::vec(
            (item(f.key_width, 10), 0u8..3, item(f.value_width, 20)),
            0..40,
        );
        (pivots, messages, 1u16..5, any::<u64>()).prop_map(|(pivots, messages, level, max_msn)| {
            let merge: MergeOperator = Arc::new(|_, _, operand| Some(operand.to_vec()));
            let mut buffer = MessageBuffer::default();
            for (key, kind, value) in messages {
                buffer.insert(
                    match kind {
                        0 => Message::put(key, value),
                        1 => Message::delete(key),
                        _ => Message::upsert(key, value),
                    },
                    &merge,
                );
            }
            let pivots: Vec<Bytes> = pivots.into_iter().map(Bytes::from).collect();
            Node::Inner(Inner {
                level,
                max_msn,
                children: (0..=pivots.len() as u64).map(|i| 2 + i * 3).collect(),
                pivots,
                buffer,
            })
        })
    }

    fn node() -> impl Strategy<Value = (NodeFormat, Node)> {
        format().prop_flat_map(|f| (Just(f), prop_oneof![leaf(f), inner(f)]))
    }

    proptest! {
        #![proptest_config(crate::index::dynamized::alias_shard::stats::proptest_config(256))]

        /// Every node encodes into `encoded_len` bytes and decodes back to itself.
        #[test]
        fn nodes_round_trip((f, node) in node()) {
            let mut page = vec![0xAAu8; 8192];
            node.encode(&mut page, &f).unwrap();
            prop_assert_eq!(Node::decode(&page, &f).unwrap(), node.clone());
            // The same node does not fit a page one byte shorter than it needs.
            let mut short = vec![0u8; node.encoded_len(&f) - 1];
            prop_assert!(node.encode(&mut short, &f).is_err());
        }

        /// Damaged pages decode to an error or to some node, never to a panic or a huge allocation.
        #[test]
        fn damaged_pages_never_panic(
            (f, node) in node(),
            damage in prop::collection::vec((24usize..1024, any::<u8>()), 1..6),
        ) {
            let mut page = vec![0u8; 4096];
            node.encode(&mut page, &f).unwrap();
            for (at, byte) in damage {
                page[at] = byte;
            }
            let _ = Node::decode(&page, &f);
        }
    }

    #[test]
    fn specific_damage_is_described() {
        let f = NodeFormat::VARIABLE;
        let node = Node::Leaf(Leaf {
            max_msn: 3,
            records: vec![(b"a".into(), b"1".into()), (b"b".into(), b"2".into())],
        });
        let mut page = vec![0u8; 4096];
        node.encode(&mut page, &f).unwrap();
        let err = |mut p: Vec<u8>, damage: &dyn Fn(&mut Vec<u8>)| {
            damage(&mut p);
            Node::decode(&p, &f).unwrap_err()
        };
        assert!(err(page.clone(), &|p| p[8] = PageType::BeInner as u8).contains("page type"));
        assert!(
            err(page.clone(), &|p| p[34..38]
                .copy_from_slice(&9999u32.to_le_bytes()))
            .contains("overruns")
        );
        assert!(
            err(page.clone(), &|p| p[26..30]
                .copy_from_slice(&u32::MAX.to_le_bytes()))
            .contains("cannot fit")
        );
        // Second key made equal to the first (record 0: 4 + 1 + 4 + 1 bytes; record 1's key after its prefix).
        assert!(
            err(page.clone(), &|p| p[NODE_HEADER_END + 14] = b'a').contains("out of key order")
        );
        let inner = Node::Inner(Inner {
            level: 1,
            max_msn: 3,
            pivots: vec![b"m".into()],
            children: vec![0, 5],
            buffer: MessageBuffer::default(),
        });
        inner.encode(&mut page, &f).unwrap();
        assert!(Node::decode(&page, &f).unwrap_err().contains("meta page"));
    }

    #[test]
    fn children_are_chosen_by_pivot() {
        let n = Inner {
            level: 1,
            max_msn: 0,
            pivots: vec![b"g".into(), b"p".into()],
            children: vec![2, 3, 4],
            buffer: MessageBuffer::default(),
        };
        assert_eq!(n.child_for(b"a"), 0);
        assert_eq!(n.child_for(b"g"), 1);
        assert_eq!(n.child_for(b"o"), 1);
        assert_eq!(n.child_for(b"z"), 2);
        assert_eq!(n.child_bounds(1), (Some(&b"g"[..]), Some(&b"p"[..])));
        assert_eq!(n.child_bounds(0), (None, Some(&b"g"[..])));
    }
}
