//! The tree's root record, stored as the page file's user root at every checkpoint.
//!
//! Layout (little endian): magic `b"SBT3"`, root u64, height u32, len u64, seqno u64, key width u16, value
//! width u16 (0 = variable). The magic versions the node formats too: `SBT1` trees (slots without key heads,
//! before format 2 of the slotted nodes) are refused as incompatible; `SBT2` trees (node prefixes of at most
//! 7 bytes, all in the header) are read as they are, since every format-2 node is a valid format-3 node, and
//! are stamped `SBT3` at their next checkpoint.

// A decoder of bytes read from disk: every index and slice is checked.
#![deny(clippy::indexing_slicing)]

use crate::storage::PageId;
use crate::storage::codec::{Reader, Writer};

const MAGIC: &[u8; 4] = b"SBT3";
/// The magic of trees whose node prefixes are at most 7 bytes (readable as format 3).
const MAGIC_V2: &[u8; 4] = b"SBT2";
/// The magic of trees whose slotted nodes have 2-byte slots (no key heads).
const MAGIC_V1: &[u8; 4] = b"SBT1";
const LEN: usize = 4 + 8 + 4 + 8 + 8 + 2 + 2;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TreeMeta {
    pub root: PageId,
    pub height: u32,
    pub len: u64,
    pub seqno: u64,
    pub key_width: Option<usize>,
    pub value_width: Option<usize>,
}

impl TreeMeta {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(LEN);
        Writer::new(&mut b)
            .bytes(MAGIC)
            .u64(self.root)
            .u32(self.height)
            .u64(self.len)
            .u64(self.seqno)
            .u16(self.key_width.unwrap_or(0) as u16)
            .u16(self.value_width.unwrap_or(0) as u16);
        b
    }

    /// True if `b` is the root record of a tree of the earlier node format.
    pub fn is_earlier_format(b: &[u8]) -> bool {
        b.get(..4) == Some(&MAGIC_V1[..])
    }

    pub fn decode(b: &[u8]) -> Result<TreeMeta, String> {
        if b.len() != LEN || (b.get(..4) != Some(&MAGIC[..]) && b.get(..4) != Some(&MAGIC_V2[..])) {
            return Err(format!(
                "expected {LEN} bytes starting with SBT3 or SBT2, found {} bytes",
                b.len()
            ));
        }
        let mut r = Reader::new_at(b, 4)?;
        let width = |w: u16| (w != 0).then_some(w as usize);
        Ok(TreeMeta {
            root: r.u64()?,
            height: r.u32()?,
            len: r.u64()?,
            seqno: r.u64()?,
            key_width: width(r.u16()?),
            value_width: width(r.u16()?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_rejects_garbage() {
        let m = TreeMeta {
            root: 7,
            height: 3,
            len: 1000,
            seqno: 42,
            key_width: Some(8),
            value_width: None,
        };
        assert_eq!(TreeMeta::decode(&m.encode()).unwrap(), m);
        assert!(TreeMeta::decode(b"nonsense").is_err());
        assert!(TreeMeta::decode(&[]).is_err());
        let mut old = m.encode();
        old[..4].copy_from_slice(MAGIC_V1);
        assert!(TreeMeta::is_earlier_format(&old) && TreeMeta::decode(&old).is_err());
        assert!(!TreeMeta::is_earlier_format(&m.encode()));
        // Format 2 (prefixes of at most 7 bytes) reads as format 3 and is written back as format 3.
        let mut v2 = m.encode();
        assert_eq!(&v2[..4], b"SBT3");
        v2[..4].copy_from_slice(MAGIC_V2);
        assert!(!TreeMeta::is_earlier_format(&v2));
        assert_eq!(TreeMeta::decode(&v2).unwrap().encode(), m.encode());
    }
}
