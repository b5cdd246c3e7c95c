//! The tree's root record, stored as the page file's user root at every checkpoint.
//!
//! Layout (little endian): magic `b"SBT1"`, root u64, height u32, len u64, seqno u64, key width u16, value
//! width u16 (0 = variable).

use crate::storage::PageId;

const MAGIC: &[u8; 4] = b"SBT1";
const LEN: usize = 4 + 8 + 4 + 8 + 8 + 2 + 2;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct TreeMeta {
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
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&self.root.to_le_bytes());
        b.extend_from_slice(&self.height.to_le_bytes());
        b.extend_from_slice(&self.len.to_le_bytes());
        b.extend_from_slice(&self.seqno.to_le_bytes());
        b.extend_from_slice(&(self.key_width.unwrap_or(0) as u16).to_le_bytes());
        b.extend_from_slice(&(self.value_width.unwrap_or(0) as u16).to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Result<TreeMeta, String> {
        if b.len() != LEN || &b[0..4] != MAGIC {
            return Err(format!(
                "expected {LEN} bytes starting with SBT1, found {} bytes",
                b.len()
            ));
        }
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        let u16_at = |o: usize| u16::from_le_bytes(b[o..o + 2].try_into().expect("2 bytes"));
        let width = |w: u16| (w != 0).then_some(w as usize);
        Ok(TreeMeta {
            root: u64_at(4),
            height: u32::from_le_bytes(b[12..16].try_into().expect("4 bytes")),
            len: u64_at(16),
            seqno: u64_at(24),
            key_width: width(u16_at(32)),
            value_width: width(u16_at(34)),
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
    }
}
