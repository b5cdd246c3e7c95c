//! Keys and values as the Bε-tree holds them in memory: byte strings of up to [`INLINE`] bytes stored inside
//! the value itself, longer ones on the heap.
//!
//! A flush decodes a child node whole, merges a batch into it and encodes it again, so every record and
//! message of the node passes through memory once per flush: with a heap allocation per key and value that
//! is two `malloc`/`free` pairs per entry, which dominated the write path's CPU time. Typical keys and
//! values (integers, short ids) fit inline, so decoding a node of them allocates only its vectors.
//!
//! Order is the bytewise (lexicographic) order of `[u8]`, with a fast path for 8-byte keys ([`cmp_keys`]).
//! Cost: 24 bytes per value (the size of a `Vec<u8>`); one allocation only above [`INLINE`] bytes.

use smallvec::SmallVec;
use std::cmp::Ordering;
use std::fmt;
use std::ops::Deref;

/// A leaf record: key and value.
pub type Record = (Bytes, Bytes);

/// Longest byte string stored without an allocation.
pub const INLINE: usize = 16;

/// A key, value or operand: bytes inline up to [`INLINE`], on the heap beyond.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Bytes(SmallVec<[u8; INLINE]>);

impl Bytes {
    pub fn new() -> Bytes {
        Bytes(SmallVec::new())
    }

    pub fn as_slice(&self) -> &[u8] {
        &self.0
    }
}

impl Deref for Bytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl AsRef<[u8]> for Bytes {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl std::borrow::Borrow<[u8]> for Bytes {
    fn borrow(&self) -> &[u8] {
        &self.0
    }
}

impl From<&[u8]> for Bytes {
    fn from(b: &[u8]) -> Bytes {
        Bytes(SmallVec::from_slice(b))
    }
}

impl<const N: usize> From<&[u8; N]> for Bytes {
    fn from(b: &[u8; N]) -> Bytes {
        Bytes(SmallVec::from_slice(b))
    }
}

impl From<&Vec<u8>> for Bytes {
    fn from(b: &Vec<u8>) -> Bytes {
        Bytes(SmallVec::from_slice(b))
    }
}

impl From<Vec<u8>> for Bytes {
    /// Short vectors are copied inline (and the vector freed); long ones keep their allocation.
    fn from(b: Vec<u8>) -> Bytes {
        if b.len() <= INLINE {
            Bytes(SmallVec::from_slice(&b))
        } else {
            Bytes(SmallVec::from_vec(b))
        }
    }
}

impl PartialEq<[u8]> for Bytes {
    fn eq(&self, other: &[u8]) -> bool {
        self.as_slice() == other
    }
}

impl PartialEq<&[u8]> for Bytes {
    fn eq(&self, other: &&[u8]) -> bool {
        self.as_slice() == *other
    }
}

impl PartialEq<Vec<u8>> for Bytes {
    fn eq(&self, other: &Vec<u8>) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Ord for Bytes {
    fn cmp(&self, other: &Bytes) -> Ordering {
        cmp_keys(self, other)
    }
}

impl PartialOrd for Bytes {
    fn partial_cmp(&self, other: &Bytes) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Debug for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.as_slice().fmt(f)
    }
}

/// The bytewise order of `a` and `b` (that of `[u8]`). Two 8-byte keys (`u64` keys, the common case) cost
/// one integer comparison instead of a call to `memcmp`; other lengths go to `memcmp`.
#[inline]
pub fn cmp_keys(a: &[u8], b: &[u8]) -> Ordering {
    if let (Ok(x), Ok(y)) = (<[u8; 8]>::try_from(a), <[u8; 8]>::try_from(b)) {
        return u64::from_be_bytes(x).cmp(&u64::from_be_bytes(y));
    }
    a.cmp(b)
}

/// `a < b` in key order.
#[inline]
pub fn key_lt(a: &[u8], b: &[u8]) -> bool {
    cmp_keys(a, b) == Ordering::Less
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(crate::index::dynamized::alias_shard::stats::proptest_config(512))]

        /// The order is exactly `[u8]`'s: for two 8-byte keys (the fast path; a small alphabet makes long
        /// common prefixes likely), and for lengths around 8 and the inline limit.
        #[test]
        fn order_is_bytewise(
            a in prop_oneof![prop::collection::vec(0u8..3, 8), prop::collection::vec(0u8..4, 0..20)],
            b in prop_oneof![prop::collection::vec(0u8..3, 8), prop::collection::vec(0u8..4, 0..20)],
        ) {
            prop_assert_eq!(cmp_keys(&a, &b), a.as_slice().cmp(b.as_slice()));
            prop_assert_eq!(cmp_keys(&a, &a), Ordering::Equal);
            let (x, y) = (Bytes::from(a.clone()), Bytes::from(&b));
            prop_assert_eq!(x.cmp(&y), a.cmp(&b));
            prop_assert_eq!(x == y, a == b);
            prop_assert_eq!(x.as_slice(), a.as_slice());
        }
    }

    #[test]
    fn short_values_are_inline_and_long_ones_keep_their_bytes() {
        let short = Bytes::from(vec![7u8; INLINE]);
        assert!(!short.0.spilled());
        let long = Bytes::from(vec![9u8; INLINE + 1]);
        assert!(long.0.spilled());
        assert_eq!(long.as_slice(), &[9u8; INLINE + 1][..]);
        assert_eq!(std::mem::size_of::<Bytes>(), std::mem::size_of::<Vec<u8>>());
        assert!(key_lt(b"ab", b"abc"));
        assert!(!key_lt(b"abcdefgh1", b"abcdefgh0"));
        assert!(key_lt(
            &[0, 0, 0, 0, 0, 0, 0, 255],
            &[0, 0, 0, 0, 0, 0, 1, 0]
        ));
        assert!(key_lt(
            &[1, 0, 0, 0, 0, 0, 0, 0],
            &[255, 0, 0, 0, 0, 0, 0, 0]
        ));
        assert_eq!(format!("{:?}", Bytes::from(&[1u8, 2])), "[1, 2]");
    }
}
