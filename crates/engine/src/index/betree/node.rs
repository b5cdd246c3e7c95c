//! Bε-tree nodes and their page format.
//!
//! A node is decoded whole into a [`Node`], changed in memory, and encoded whole back into its page: a
//! Bε-tree node is rewritten as a unit anyway (a flush moves a batch of messages, a leaf takes a batch), and
//! whole-node coding keeps the format simple to verify. Pages are the buffer pool's bytes, starting with the
//! 24-byte page header of `storage::page` (checksum, type, reserved, epoch); [`Node::encode`] sets the type
//! byte and writes from byte 24 on, zeroing the rest of the page; it never touches the checksum or the epoch.
//! Integers are little endian.
//!
//! | bytes  | field                                                                        |
//! |--------|------------------------------------------------------------------------------|
//! | 24..26 | level (u16): 0 = leaf, h ≥ 1 = inner node whose children are at level h − 1  |
//! | 26..30 | entries (u32): leaf records, or inner children                               |
//! | 30..34 | messages (u32): inner only, 0 in a leaf                                      |
//! | 34..38 | body length (u32): bytes used from byte 40 on                                |
//! | 38..40 | zero                                                                         |
//! | 40..   | body                                                                         |
//!
//! * Leaf body: per record, key length u32, value length u32, key, value; keys strictly ascending.
//! * Inner body: the child page ids (u64 each); the n − 1 pivots (length u32, key), strictly ascending — child
//!   i holds the keys in [pivot i − 1, pivot i); then the buffer's messages (kind u8, MSN u64, key length u32,
//!   value length u32, key, value) in buffer shape (see `message`).
//!
//! Decoding treats the page as untrusted: every length is checked against the page before anything is
//! allocated, and order, shape, level/type agreement and child ids (never the meta pages 0 and 1) are
//! verified; what is wrong comes back as a description, which the tree turns into `Error::Corruption` with
//! the file and the page's offset. Cost: O(page size) per decode or encode.

use super::message::{Message, MessageBuffer, MessageKind};
use crate::storage::page::{PAGE_HEADER_LEN, PageId, PageType, page_type, set_page_type};

/// Bytes before a node's body.
pub const NODE_HEADER_END: usize = 40;
/// Fixed bytes of one leaf record besides its key and value.
pub const RECORD_OVERHEAD: usize = 8;
/// Fixed bytes of one child besides its pivot's key: the page id and the pivot's length.
pub const CHILD_OVERHEAD: usize = 12;
/// Fixed bytes of one buffered message besides its key and value.
pub const MESSAGE_OVERHEAD: usize = 17;

/// A leaf: records sorted by key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Leaf {
    pub records: Vec<(Vec<u8>, Vec<u8>)>,
}

/// An inner node: children, the pivots between them, and the buffer of messages on their way down.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inner {
    /// ≥ 1; children are at `level − 1`.
    pub level: u16,
    /// `children.len() − 1` keys, strictly ascending.
    pub pivots: Vec<Vec<u8>>,
    pub children: Vec<PageId>,
    pub buffer: MessageBuffer,
}

/// Bytes one buffered message takes in a page.
pub fn message_len(m: &Message) -> usize {
    MESSAGE_OVERHEAD + m.key.len() + m.value.len()
}

impl Inner {
    /// Bytes the node takes in a page, header included.
    pub fn encoded_len(&self) -> usize {
        NODE_HEADER_END
            + 8
            + self
                .pivots
                .iter()
                .map(|p| CHILD_OVERHEAD + p.len())
                .sum::<usize>()
            + self
                .buffer
                .messages()
                .iter()
                .map(message_len)
                .sum::<usize>()
    }

    /// The child that holds `key`.
    pub fn child_for(&self, key: &[u8]) -> usize {
        self.pivots.partition_point(|p| p.as_slice() <= key)
    }

    /// The key interval of child `i`: `[lo, hi)` with `None` for unbounded (within this node's own
    /// interval).
    pub fn child_bounds(&self, i: usize) -> (Option<&[u8]>, Option<&[u8]>) {
        let lo = i.checked_sub(1).map(|j| self.pivots[j].as_slice());
        (lo, self.pivots.get(i).map(Vec::as_slice))
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
    pub fn encoded_len(&self) -> usize {
        match self {
            Node::Leaf(l) => {
                NODE_HEADER_END
                    + l.records
                        .iter()
                        .map(|(k, v)| RECORD_OVERHEAD + k.len() + v.len())
                        .sum::<usize>()
            }
            Node::Inner(n) => n.encoded_len(),
        }
    }

    /// Writes the node into `page` (the whole page: type byte, then everything from byte 24). Fails, writing
    /// nothing, if it does not fit.
    pub fn encode(&self, page: &mut [u8]) -> Result<(), String> {
        let len = self.encoded_len();
        if len > page.len() {
            return Err(format!(
                "a node of {len} bytes does not fit a page of {} bytes",
                page.len()
            ));
        }
        page[PAGE_HEADER_LEN..].fill(0);
        let mut w = Writer {
            page,
            at: NODE_HEADER_END,
        };
        let (level, entries, messages) = match self {
            Node::Leaf(l) => {
                for (k, v) in &l.records {
                    w.u32(k.len() as u32);
                    w.u32(v.len() as u32);
                    w.bytes(k);
                    w.bytes(v);
                }
                (0u16, l.records.len(), 0)
            }
            Node::Inner(n) => {
                for &c in &n.children {
                    w.u64(c);
                }
                for p in &n.pivots {
                    w.u32(p.len() as u32);
                    w.bytes(p);
                }
                for m in n.buffer.messages() {
                    w.page[w.at] = m.kind as u8;
                    w.at += 1;
                    w.u64(m.msn);
                    w.u32(m.key.len() as u32);
                    w.u32(m.value.len() as u32);
                    w.bytes(&m.key);
                    w.bytes(&m.value);
                }
                (n.level, n.children.len(), n.buffer.len())
            }
        };
        let body = w.at - NODE_HEADER_END;
        debug_assert_eq!(w.at, len);
        page[24..26].copy_from_slice(&level.to_le_bytes());
        page[26..30].copy_from_slice(&(entries as u32).to_le_bytes());
        page[30..34].copy_from_slice(&(messages as u32).to_le_bytes());
        page[34..38].copy_from_slice(&(body as u32).to_le_bytes());
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

    /// Reads the node in `page` (untrusted bytes); a description of the damage otherwise.
    pub fn decode(page: &[u8]) -> Result<Node, String> {
        if page.len() < NODE_HEADER_END {
            return Err(format!("a page of {} bytes cannot hold a node", page.len()));
        }
        let level = u16::from_le_bytes([page[24], page[25]]);
        let entries = u32::from_le_bytes(page[26..30].try_into().expect("4 bytes")) as usize;
        let messages = u32::from_le_bytes(page[30..34].try_into().expect("4 bytes")) as usize;
        let body = u32::from_le_bytes(page[34..38].try_into().expect("4 bytes")) as usize;
        let end = NODE_HEADER_END
            .checked_add(body)
            .filter(|&e| e <= page.len())
            .ok_or_else(|| format!("node body of {body} bytes overruns the page"))?;
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
        let mut r = Reader {
            bytes: &page[..end],
            at: NODE_HEADER_END,
        };
        let node = if level == 0 {
            if messages != 0 {
                return Err(format!("a leaf claims {messages} buffered messages"));
            }
            r.check_count(entries, RECORD_OVERHEAD, "records")?;
            let mut records: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(entries);
            for i in 0..entries {
                let klen = r.u32()? as usize;
                let vlen = r.u32()? as usize;
                let key = r.bytes(klen)?;
                let value = r.bytes(vlen)?;
                if records
                    .last()
                    .is_some_and(|(prev, _)| prev.as_slice() >= key)
                {
                    return Err(format!("leaf record {i} is out of key order"));
                }
                records.push((key.to_vec(), value.to_vec()));
            }
            Node::Leaf(Leaf { records })
        } else {
            // One child is legal (a node whose siblings' keys were all deleted; merges on underflow are
            // not built yet), none is not.
            if entries == 0 {
                return Err("an inner node has no children".into());
            }
            r.check_count(entries, 8, "children")?;
            let mut children = Vec::with_capacity(entries);
            for i in 0..entries {
                let c = r.u64()?;
                if c < 2 {
                    return Err(format!("child {i} points at meta page {c}"));
                }
                children.push(c);
            }
            r.check_count(entries - 1, 4, "pivots")?;
            let mut pivots: Vec<Vec<u8>> = Vec::with_capacity(entries - 1);
            for i in 0..entries - 1 {
                let len = r.u32()? as usize;
                let key = r.bytes(len)?;
                if pivots.last().is_some_and(|prev| prev.as_slice() >= key) {
                    return Err(format!("pivot {i} is out of key order"));
                }
                pivots.push(key.to_vec());
            }
            r.check_count(messages, MESSAGE_OVERHEAD, "messages")?;
            let mut list = Vec::with_capacity(messages);
            for i in 0..messages {
                let kind = r.bytes(1)?[0];
                let kind = MessageKind::from_u8(kind)
                    .ok_or_else(|| format!("message {i} has unknown kind {kind}"))?;
                let msn = r.u64()?;
                let klen = r.u32()? as usize;
                let vlen = r.u32()? as usize;
                let key = r.bytes(klen)?.to_vec();
                let value = r.bytes(vlen)?.to_vec();
                if kind == MessageKind::Delete && !value.is_empty() {
                    return Err(format!("delete message {i} carries a value"));
                }
                list.push(Message {
                    key,
                    msn,
                    kind,
                    value,
                });
            }
            let buffer = MessageBuffer::from_sorted(list)?;
            Node::Inner(Inner {
                level,
                pivots,
                children,
                buffer,
            })
        };
        if r.at != end {
            return Err(format!(
                "node body is {body} bytes but its entries end after {}",
                r.at - NODE_HEADER_END
            ));
        }
        Ok(node)
    }
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
    fn u32(&mut self, v: u32) {
        self.bytes(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.bytes(&v.to_le_bytes());
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn bytes(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| {
                format!(
                    "an item of {n} bytes at byte {} overruns the node body",
                    self.at
                )
            })?;
        let b = &self.bytes[self.at..end];
        self.at = end;
        Ok(b)
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(
            self.bytes(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(
            self.bytes(8)?.try_into().expect("8 bytes"),
        ))
    }
    /// Fails unless `count` items of at least `each` bytes can fit in what is left (before allocating for
    /// them).
    fn check_count(&self, count: usize, each: usize, what: &str) -> Result<(), String> {
        let left = self.bytes.len() - self.at;
        if count.saturating_mul(each) > left {
            return Err(format!(
                "{count} {what} cannot fit in the {left} bytes left of the node"
            ));
        }
        Ok(())
    }
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

    fn leaf() -> impl Strategy<Value = Node> {
        prop::collection::btree_map(bytes(12), bytes(40), 0..40).prop_map(|m| {
            Node::Leaf(Leaf {
                records: m.into_iter().collect(),
            })
        })
    }

    fn inner() -> impl Strategy<Value = Node> {
        let pivots = prop::collection::btree_set(bytes(10), 1..12);
        let messages = prop::collection::vec((bytes(10), 0u8..3, bytes(20)), 0..40);
        (pivots, messages, 1u16..5).prop_map(|(pivots, messages, level)| {
            let merge: MergeOperator = Arc::new(|_, _, operand| Some(operand.to_vec()));
            let mut buffer = MessageBuffer::default();
            for (msn, (key, kind, value)) in messages.into_iter().enumerate() {
                let msn = msn as u64 + 1;
                buffer.insert(
                    match kind {
                        0 => Message::put(key, value, msn),
                        1 => Message::delete(key, msn),
                        _ => Message::upsert(key, value, msn),
                    },
                    &merge,
                );
            }
            let pivots: Vec<Vec<u8>> = pivots.into_iter().collect();
            Node::Inner(Inner {
                level,
                children: (0..=pivots.len() as u64).map(|i| 2 + i * 3).collect(),
                pivots,
                buffer,
            })
        })
    }

    proptest! {
        #![proptest_config(crate::index::dynamized::alias_shard::stats::proptest_config(256))]

        /// Every node encodes into `encoded_len` bytes and decodes back to itself.
        #[test]
        fn nodes_round_trip(node in prop_oneof![leaf(), inner()]) {
            let mut page = vec![0xAAu8; 8192];
            node.encode(&mut page).unwrap();
            prop_assert_eq!(Node::decode(&page).unwrap(), node.clone());
            // The same node does not fit a page one byte shorter than it needs.
            let mut short = vec![0u8; node.encoded_len() - 1];
            prop_assert!(node.encode(&mut short).is_err());
        }

        /// Damaged pages decode to an error or to some node, never to a panic or a huge allocation.
        #[test]
        fn damaged_pages_never_panic(
            node in prop_oneof![leaf(), inner()],
            damage in prop::collection::vec((24usize..1024, any::<u8>()), 1..6),
        ) {
            let mut page = vec![0u8; 4096];
            node.encode(&mut page).unwrap();
            for (at, byte) in damage {
                page[at] = byte;
            }
            let _ = Node::decode(&page);
        }
    }

    #[test]
    fn specific_damage_is_described() {
        let node = Node::Leaf(Leaf {
            records: vec![
                (b"a".to_vec(), b"1".to_vec()),
                (b"b".to_vec(), b"2".to_vec()),
            ],
        });
        let mut page = vec![0u8; 4096];
        node.encode(&mut page).unwrap();
        let err = |mut p: Vec<u8>, f: &dyn Fn(&mut Vec<u8>)| {
            f(&mut p);
            Node::decode(&p).unwrap_err()
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
        // Second key made equal to the first.
        assert!(
            err(page.clone(), &|p| p[NODE_HEADER_END + 18] = b'a').contains("out of key order")
        );
        let inner = Node::Inner(Inner {
            level: 1,
            pivots: vec![b"m".to_vec()],
            children: vec![0, 5],
            buffer: MessageBuffer::default(),
        });
        inner.encode(&mut page).unwrap();
        assert!(Node::decode(&page).unwrap_err().contains("meta page"));
    }

    #[test]
    fn children_are_chosen_by_pivot() {
        let n = Inner {
            level: 1,
            pivots: vec![b"g".to_vec(), b"p".to_vec()],
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
