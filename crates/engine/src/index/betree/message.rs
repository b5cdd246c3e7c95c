//! Messages: the writes a Bε-tree buffers on their way down to the leaves.
//!
//! Every write becomes one message, numbered by the tree's message sequence number (MSN) counter: nodes
//! record the newest MSN they hold (see `node`), and within a node a key's messages are kept in arrival
//! order, so a message's position is its age. A message is a *put* (set the value), a *delete* (a tombstone until it reaches
//! its leaf) or an *upsert*: an operand that the tree's [`MergeOperator`] combines with whatever value the key
//! has when the message is applied (a counter increment, an append, …), without reading that value at write
//! time.
//!
//! ## Buffers ([`MessageBuffer`])
//! Messages sorted by key, and per key in arrival order, oldest first. Per key a buffer holds either **one terminal
//! message** (a put or a delete: it decides the value whatever lies below it) or **a run of upserts** (they
//! need the value below them, which is further down the tree). Adding messages keeps that shape:
//! * a put or delete replaces everything the buffer holds on its key (all of it is older);
//! * an upsert on a terminal message is folded into it at once: the operator runs on the put's value (or on
//!   "absent" for a delete) and the result is a put (or a delete if the operator removes the key), taking
//!   the upsert's place;
//! * an upsert on a run of upserts (or on nothing) is appended to the run.
//!
//! Messages higher in the tree are newer than those below: a message only moves down, and a node receives
//! a child's share of its buffer only after everything it passed down earlier. So a node's messages on a key
//! can always be added to its child's buffer with the rules above ([`MessageBuffer::merge_newer`]), and a
//! read applies, from the leaf upwards, the messages of every buffer on its path ([`resolve`]).
//!
//! Cost: a buffer of m messages answers a key in O(log m); merging n newer messages in costs O(m + n) plus
//! one operator call per folded upsert.

use super::bytes::{Bytes, Record, cmp_keys, key_lt};
use std::cmp::Ordering;
use std::sync::Arc;

/// What a message does to its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum MessageKind {
    /// Insert or overwrite the value.
    Put = 1,
    /// Remove the key.
    Delete = 2,
    /// Combine the operand with the current value through the tree's merge operator.
    Upsert = 3,
}

impl MessageKind {
    /// The kind stored as `v` (untrusted bytes: `None` for anything else).
    pub fn from_u8(v: u8) -> Option<MessageKind> {
        match v {
            1 => Some(MessageKind::Put),
            2 => Some(MessageKind::Delete),
            3 => Some(MessageKind::Upsert),
            _ => None,
        }
    }

    /// True for a put or delete: the key's value no longer depends on anything older.
    pub fn is_terminal(self) -> bool {
        self != MessageKind::Upsert
    }
}

/// One buffered write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub key: Bytes,
    pub kind: MessageKind,
    /// The value of a put, the operand of an upsert; empty for a delete.
    pub value: Bytes,
}

impl Message {
    pub fn put(key: impl Into<Bytes>, value: impl Into<Bytes>) -> Message {
        Message {
            key: key.into(),
            kind: MessageKind::Put,
            value: value.into(),
        }
    }

    pub fn delete(key: impl Into<Bytes>) -> Message {
        Message {
            key: key.into(),
            kind: MessageKind::Delete,
            value: Bytes::new(),
        }
    }

    pub fn upsert(key: impl Into<Bytes>, operand: impl Into<Bytes>) -> Message {
        Message {
            key: key.into(),
            kind: MessageKind::Upsert,
            value: operand.into(),
        }
    }
}

/// The user-defined update of upsert messages: given the key, its current value (`None`: absent) and an
/// operand, the new value (`None`: the key is removed). It must be deterministic: a message may be applied
/// at different times (folded into a buffer, applied at a leaf, applied on the fly by a read), always to the
/// same value, and must give the same result each time.
pub type MergeOperator = Arc<dyn Fn(&[u8], Option<&[u8]>, &[u8]) -> Option<Vec<u8>> + Send + Sync>;

/// The value `key` has after `messages` (its messages, oldest first) are applied to `base`.
pub fn resolve<'a>(
    key: &[u8],
    base: Option<Bytes>,
    messages: impl IntoIterator<Item = &'a Message>,
    merge: &MergeOperator,
) -> Option<Bytes> {
    let mut value = base;
    for m in messages {
        value = match m.kind {
            MessageKind::Put => Some(m.value.clone()),
            MessageKind::Delete => None,
            MessageKind::Upsert => merge(key, value.as_deref(), &m.value).map(Bytes::from),
        };
    }
    value
}

/// A node's buffer: messages sorted by key (oldest first per key), each key holding one terminal message or a run of
/// upserts (module doc). It keeps the total bytes of its keys and of its values, so a node's encoded size
/// costs nothing to ask.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MessageBuffer {
    messages: Vec<Message>,
    /// Σ key length over `messages`.
    key_bytes: usize,
    /// Σ value (operand) length over `messages`.
    value_bytes: usize,
}

/// Σ key length and Σ value length of `messages`.
fn byte_sums(messages: &[Message]) -> (usize, usize) {
    messages
        .iter()
        .fold((0, 0), |(k, v), m| (k + m.key.len(), v + m.value.len()))
}

/// Whether two keys are equal (eight bytes per comparison).
#[inline]
fn key_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && cmp_keys(a, b) == Ordering::Equal
}

impl MessageBuffer {
    /// A buffer of `messages`, which must already be in buffer shape (messages this module produced).
    fn of(messages: Vec<Message>) -> MessageBuffer {
        let (key_bytes, value_bytes) = byte_sums(&messages);
        MessageBuffer {
            messages,
            key_bytes,
            value_bytes,
        }
    }

    /// A buffer of `messages`, checked to be in the buffer's shape; `Err` says what is wrong (the caller
    /// adds where the messages came from).
    pub fn from_sorted(messages: Vec<Message>) -> Result<MessageBuffer, String> {
        for (i, w) in messages.windows(2).enumerate() {
            match cmp_keys(&w[0].key, &w[1].key) {
                Ordering::Less => {}
                Ordering::Greater => {
                    return Err(format!("message {} is out of key order", i + 1));
                }
                Ordering::Equal => {
                    if w[0].kind.is_terminal() || w[1].kind.is_terminal() {
                        return Err(format!(
                            "a put or delete shares its key with another message (messages {i} and {})",
                            i + 1
                        ));
                    }
                }
            }
        }
        Ok(MessageBuffer::of(messages))
    }

    pub fn len(&self) -> usize {
        self.messages.len()
    }

    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// Σ key length of the messages.
    pub fn key_bytes(&self) -> usize {
        self.key_bytes
    }

    /// Σ value (operand) length of the messages.
    pub fn value_bytes(&self) -> usize {
        self.value_bytes
    }

    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// The messages on `key`, oldest first.
    pub fn on_key(&self, key: &[u8]) -> &[Message] {
        let r = self.range_of(Some(key), None);
        let end = r.start
            + self.messages[r.clone()]
                .iter()
                .take_while(|m| key_eq(&m.key, key))
                .count();
        &self.messages[r.start..end]
    }

    /// Adds `m`, newer than every message here on its key: a binary search and at most one shift of the
    /// tail.
    pub fn insert(&mut self, m: Message, merge: &MergeOperator) {
        let start = self.messages.partition_point(|x| key_lt(&x.key, &m.key));
        let end = start
            + self.messages[start..]
                .iter()
                .take_while(|x| key_eq(&x.key, &m.key))
                .count();
        // `at`: the messages `m` replaces (empty: it is inserted there).
        let (m, at) = match self.messages.get(start) {
            _ if start == end => (m, start..start),
            // A put or delete replaces the key's messages.
            _ if m.kind.is_terminal() => (m, start..end),
            // An upsert folds into a put or delete (the key's only message).
            Some(t) if t.kind.is_terminal() => (fold(t, m, merge), start..end),
            // An upsert joins the run of upserts.
            _ => (m, end..end),
        };
        let (removed_keys, removed_values) = byte_sums(&self.messages[at.clone()]);
        self.key_bytes = self.key_bytes - removed_keys + m.key.len();
        self.value_bytes = self.value_bytes - removed_values + m.value.len();
        if at.is_empty() {
            self.messages.insert(at.start, m);
        } else {
            self.messages[at.start] = m;
            self.messages.drain(at.start + 1..at.end);
        }
    }

    /// Adds `newer` (sorted by key, oldest first per key, every message newer than this buffer's messages on
    /// its key): one or two by insertion, more in one linear merge that moves the runs of old messages
    /// between them in bulk.
    pub fn merge_newer(&mut self, newer: Vec<Message>, merge: &MergeOperator) {
        if newer.len() <= 2 && !self.messages.is_empty() {
            for m in newer {
                self.insert(m, merge);
            }
            return;
        }
        let mut out: Vec<Message> = Vec::with_capacity(self.messages.len() + newer.len());
        let mut old = std::mem::take(&mut self.messages).into_iter();
        // `out[group..]`: the messages of the key of the newer message handled last.
        let mut group = 0;
        for m in newer {
            let below = old.as_slice().partition_point(|o| key_lt(&o.key, &m.key));
            out.extend(old.by_ref().take(below));
            // A key seen for the first time takes its old messages first (they are older).
            if below > 0 || out.last().is_none_or(|l| !key_eq(&l.key, &m.key)) {
                group = out.len();
                let same = old
                    .as_slice()
                    .iter()
                    .take_while(|o| key_eq(&o.key, &m.key))
                    .count();
                out.extend(old.by_ref().take(same));
            }
            add_to_group(&mut out, group, m, merge);
        }
        out.extend(old);
        *self = MessageBuffer::of(out);
    }

    /// Index range of the messages with keys in `[lo, hi)` (`None`: unbounded).
    pub fn range_of(&self, lo: Option<&[u8]>, hi: Option<&[u8]>) -> std::ops::Range<usize> {
        let a = lo.map_or(0, |lo| {
            self.messages.partition_point(|m| key_lt(&m.key, lo))
        });
        let b = hi.map_or(self.messages.len(), |hi| {
            self.messages.partition_point(|m| key_lt(&m.key, hi))
        });
        a..b.max(a)
    }

    /// All the messages, in buffer order.
    pub fn into_messages(self) -> Vec<Message> {
        self.messages
    }

    /// Removes and returns the messages of index range `r` (a flush to one child).
    pub fn take_range(&mut self, r: std::ops::Range<usize>) -> Vec<Message> {
        let taken: Vec<Message> = self.messages.drain(r).collect();
        let (keys, values) = byte_sums(&taken);
        self.key_bytes -= keys;
        self.value_bytes -= values;
        taken
    }

    /// Splits off the messages with keys ≥ `key` (a node split).
    pub fn split_off_at(&mut self, key: &[u8]) -> MessageBuffer {
        let i = self.messages.partition_point(|m| key_lt(&m.key, key));
        let high = MessageBuffer::of(self.messages.split_off(i));
        self.key_bytes -= high.key_bytes;
        self.value_bytes -= high.value_bytes;
        high
    }
}

/// Adds `m` to the group `messages[start..]`, the messages of `m`'s key (oldest first, in buffer shape;
/// possibly none), by the buffer's rules.
fn add_to_group(messages: &mut Vec<Message>, start: usize, m: Message, merge: &MergeOperator) {
    debug_assert!(messages[start..].iter().all(|g| g.key == m.key));
    match m.kind {
        MessageKind::Put | MessageKind::Delete => {
            messages.truncate(start);
            messages.push(m);
        }
        MessageKind::Upsert => match messages.get(start) {
            Some(t) if t.kind.is_terminal() => {
                let folded = fold(t, m, merge);
                messages.truncate(start);
                messages.push(folded);
            }
            _ => messages.push(m),
        },
    }
}

/// Upsert `m` applied to `terminal` (a put or delete of its key): the put (or delete) that replaces both.
fn fold(terminal: &Message, m: Message, merge: &MergeOperator) -> Message {
    let base = (terminal.kind == MessageKind::Put).then_some(terminal.value.as_slice());
    match merge(&m.key, base, &m.value) {
        Some(v) => Message::put(m.key, v),
        None => Message::delete(m.key),
    }
}

/// Applies `messages` (sorted by key, oldest first per key, newer than the records) to the sorted `records` (a leaf's
/// contents): the new sorted records.
pub fn apply_to_records(
    records: Vec<Record>,
    messages: &[Message],
    merge: &MergeOperator,
) -> Vec<Record> {
    let mut out = Vec::with_capacity(records.len() + messages.len());
    let mut records = records.into_iter().peekable();
    let mut i = 0;
    while i < messages.len() || records.peek().is_some() {
        let Some(key) = messages.get(i).map(|m| m.key.as_slice()) else {
            out.extend(records.by_ref());
            break;
        };
        match records.peek().map(|r| cmp_keys(&r.0, key)) {
            Some(Ordering::Less) => out.push(records.next().expect("peeked")),
            order => {
                let base = if order == Some(Ordering::Equal) {
                    records.next().map(|r| r.1)
                } else {
                    None
                };
                let end = i + messages[i..].iter().take_while(|m| m.key == key).count();
                if let Some(v) = resolve(key, base, &messages[i..end], merge) {
                    out.push((messages[i].key.clone(), v));
                }
                i = end;
            }
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    /// Adds the operand (u64, big-endian) to the value (absent: 0); a result of 0 removes the key.
    pub(crate) fn adder() -> MergeOperator {
        Arc::new(|_key, old, operand| {
            let read = |b: &[u8]| u64::from_be_bytes(b.try_into().unwrap_or([0; 8]));
            let sum = old.map_or(0, read).wrapping_add(read(operand));
            (sum != 0).then(|| sum.to_be_bytes().to_vec())
        })
    }

    fn num(v: u64) -> Vec<u8> {
        v.to_be_bytes().to_vec()
    }

    #[derive(Debug, Clone)]
    enum Op {
        Put(u8, u64),
        Delete(u8),
        Upsert(u8, u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u8..12, 1u64..5).prop_map(|(k, v)| Op::Put(k, v)),
            (0u8..12).prop_map(Op::Delete),
            // Operands that can cancel a value to 0 exercise the operator's delete.
            (0u8..12, prop_oneof![Just(1u64), Just(2), Just(u64::MAX)])
                .prop_map(|(k, d)| Op::Upsert(k, d)),
        ]
    }

    fn message(op: &Op) -> Message {
        match *op {
            Op::Put(k, v) => Message::put(vec![k], num(v)),
            Op::Delete(k) => Message::delete(vec![k]),
            Op::Upsert(k, d) => Message::upsert(vec![k], num(d)),
        }
    }

    /// The model: a map with the operations applied one by one.
    fn apply_model(model: &mut BTreeMap<Vec<u8>, Vec<u8>>, op: &Op, merge: &MergeOperator) {
        let key = match op {
            Op::Put(k, _) | Op::Delete(k) | Op::Upsert(k, _) => vec![*k],
        };
        let new = match *op {
            Op::Put(_, v) => Some(num(v)),
            Op::Delete(_) => None,
            Op::Upsert(_, d) => merge(&key, model.get(&key).map(Vec::as_slice), &num(d)),
        };
        match new {
            Some(v) => model.insert(key, v),
            None => model.remove(&key),
        };
    }

    proptest! {
        #![proptest_config(crate::index::dynamized::alias_shard::stats::proptest_config(128))]

        /// Older writes in a child's buffer, newer ones in its parent's, the parent flushed into the child,
        /// then everything applied to a leaf: the leaf equals the model, and reads through both buffers
        /// (before the flush) and through the merged buffer (after) agree with it key by key.
        #[test]
        fn buffers_flushes_and_leaf_application_match_a_model(
            base in prop::collection::btree_map(0u8..12, 1u64..5, 0..8),
            older in prop::collection::vec(op(), 0..40),
            newer in prop::collection::vec(op(), 0..40),
            batch in prop::collection::vec(op(), 0..40),
        ) {
            let merge = adder();
            let records: Vec<Record> =
                base.iter().map(|(&k, &v)| (Bytes::from(&[k]), Bytes::from(num(v)))).collect();
            let mut model: BTreeMap<Vec<u8>, Vec<u8>> =
                records.iter().map(|(k, v)| (k.to_vec(), v.to_vec())).collect();
            let mut child = MessageBuffer::default();
            let mut parent = MessageBuffer::default();
            for (ops, buffer) in [(&older, &mut child), (&newer, &mut parent)] {
                for o in ops {
                    buffer.insert(message(o), &merge);
                    apply_model(&mut model, o, &merge);
                }
            }
            // Both buffers keep their shape and their byte sums.
            for b in [&child, &parent] {
                prop_assert!(MessageBuffer::from_sorted(b.messages().to_vec()).is_ok());
                prop_assert_eq!((b.key_bytes(), b.value_bytes()), byte_sums(b.messages()));
            }
            // A read on the path: the leaf's record, then the child's messages, then the parent's.
            for k in 0u8..12 {
                let key = [k];
                let leaf = records.iter().find(|r| r.0 == key[..]).map(|r| r.1.clone());
                let v = resolve(&key, leaf, child.on_key(&key).iter().chain(parent.on_key(&key)), &merge);
                let v = v.map(|v| v.to_vec());
                prop_assert_eq!(v.as_ref(), model.get(key.as_slice()), "key {}", k);
            }
            // Part of the parent goes down first, the rest after (a flush of one child, then of the others).
            let part = parent.take_range(parent.range_of(None, Some(&[6])));
            prop_assert_eq!((parent.key_bytes(), parent.value_bytes()), byte_sums(parent.messages()));
            child.merge_newer(part, &merge);
            let rest = parent.take_range(parent.range_of(None, None));
            child.merge_newer(rest, &merge);
            prop_assert!(parent.is_empty());
            prop_assert_eq!((parent.key_bytes(), parent.value_bytes()), (0, 0));
            prop_assert!(MessageBuffer::from_sorted(child.messages().to_vec()).is_ok());
            prop_assert_eq!((child.key_bytes(), child.value_bytes()), byte_sums(child.messages()));
            // A batch of writes (several per key possible), sorted by key in write order per key.
            let mut sorted: Vec<Message> = batch.iter().map(message).collect();
            sorted.sort_by(|a, b| a.key.cmp(&b.key));
            child.merge_newer(sorted, &merge);
            for o in &batch {
                apply_model(&mut model, o, &merge);
            }
            prop_assert!(MessageBuffer::from_sorted(child.messages().to_vec()).is_ok());
            prop_assert_eq!((child.key_bytes(), child.value_bytes()), byte_sums(child.messages()));
            let leaf = apply_to_records(records, child.messages(), &merge);
            let expected: Vec<Record> = model.into_iter().map(|(k, v)| (k.into(), v.into())).collect();
            prop_assert_eq!(leaf, expected);
        }
    }

    #[test]
    fn upserts_fold_into_terminal_messages_and_stack_otherwise() {
        let merge = adder();
        let mut b = MessageBuffer::default();
        b.insert(Message::upsert(vec![1], num(2)), &merge);
        b.insert(Message::upsert(vec![1], num(3)), &merge);
        // Nothing to fold into: a run of two upserts.
        assert_eq!(b.on_key(&[1]).len(), 2);
        b.insert(Message::put(vec![2], num(10)), &merge);
        b.insert(Message::upsert(vec![2], num(5)), &merge);
        // Folded into the put: one put of 15.
        assert_eq!(b.on_key(&[2]), &[Message::put(vec![2], num(15))]);
        b.insert(Message::delete(vec![3]), &merge);
        b.insert(Message::upsert(vec![3], num(7)), &merge);
        assert_eq!(b.on_key(&[3]), &[Message::put(vec![3], num(7))]);
        // An upsert that cancels the value becomes a delete.
        b.insert(Message::upsert(vec![3], num(7u64.wrapping_neg())), &merge);
        assert_eq!(b.on_key(&[3]), &[Message::delete(vec![3])]);
        // A put replaces the run of upserts.
        b.insert(Message::put(vec![1], num(1)), &merge);
        assert_eq!(b.on_key(&[1]), &[Message::put(vec![1], num(1))]);
        let high = b.split_off_at(&[2]);
        assert_eq!(b.len(), 1);
        assert_eq!(high.len(), 2);
        assert_eq!(b.range_of(Some(&[0]), Some(&[2])), 0..1);
    }

    #[test]
    fn damaged_buffers_are_refused() {
        let put = |k: u8| Message::put(vec![k], num(1));
        let up = |k: u8| Message::upsert(vec![k], num(1));
        assert!(MessageBuffer::from_sorted(vec![put(2), put(1)]).is_err());
        assert!(MessageBuffer::from_sorted(vec![put(1), up(1)]).is_err());
        assert!(MessageBuffer::from_sorted(vec![up(1), put(1)]).is_err());
        assert!(MessageBuffer::from_sorted(vec![up(1), up(1), put(2)]).is_ok());
        assert_eq!(MessageKind::from_u8(0), None);
        assert_eq!(MessageKind::from_u8(3), Some(MessageKind::Upsert));
    }
}
