//! Keys of the families over `u64`s (dynamized, learned): the shell's encoded keys are 8-byte big-endian, so
//! byte order is numeric order. Decoding checks the width (a typed error naming the family) and turns a
//! [`KeyRange`] into inclusive `u64` bounds. O(1), no allocation.

use crate::error::{Error, Result};
use crate::index::KeyRange;
use std::ops::Bound;

/// The `u64` of an 8-byte big-endian encoded key or value (`what`) of the `family` index.
pub fn decode_u64(bytes: &[u8], family: &str, what: &str) -> Result<u64> {
    let arr: [u8; 8] = bytes.try_into().map_err(|_| {
        Error::invalid(format!(
            "a {family} index takes 8-byte u64 {what}s, got {} bytes",
            bytes.len()
        ))
    })?;
    Ok(u64::from_be_bytes(arr))
}

/// The inclusive `u64` bounds of `range` over the `family` index's keys, or `None` if it is empty.
pub fn u64_bounds(range: &KeyRange, family: &str) -> Result<Option<(u64, u64)>> {
    let key = |k: &[u8]| decode_u64(k, family, "key");
    let lo = match &range.lo {
        Bound::Unbounded => Some(0),
        Bound::Included(k) => Some(key(k)?),
        Bound::Excluded(k) => key(k)?.checked_add(1),
    };
    let hi = match &range.hi {
        Bound::Unbounded => Some(u64::MAX),
        Bound::Included(k) => Some(key(k)?),
        Bound::Excluded(k) => key(k)?.checked_sub(1),
    };
    Ok(match (lo, hi) {
        (Some(lo), Some(hi)) if lo <= hi => Some((lo, hi)),
        _ => None,
    })
}
