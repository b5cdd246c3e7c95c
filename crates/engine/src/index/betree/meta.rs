//! The tree's root record, stored as the page file's user root at every checkpoint.
//!
//! Layout (little endian, 58 bytes): magic `b"SBE1"`, root u64, height u16, ε (f64 bits) u64, key width u16,
//! value width u16 (0 = variable), next MSN u64, records in leaves u64, WAL seqno u64, xxh3-64 of the
//! preceding bytes u64. The page file checksums its meta slots too; the inner checksum makes a record of
//! another format or a damaged field fail here with a precise message.

// A decoder of bytes read from disk: every index and slice is checked.
#![deny(clippy::indexing_slicing)]

use super::node::NodeFormat;
use super::tree::CoreState;
use crate::storage::codec::{Reader, Writer};

const MAGIC: &[u8; 4] = b"SBE1";
const BODY: usize = 4 + 8 + 2 + 8 + 2 + 2 + 8 + 8 + 8;
const LEN: usize = BODY + 8;

/// A checkpoint: the core's state and the last WAL sequence number it contains.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TreeMeta {
    pub core: CoreState,
    pub seqno: u64,
}

impl TreeMeta {
    pub fn encode(&self) -> Vec<u8> {
        let c = &self.core;
        let width = |w: Option<usize>| w.unwrap_or(0) as u16;
        let mut b = Vec::with_capacity(LEN);
        Writer::new(&mut b)
            .bytes(MAGIC)
            .u64(c.root)
            .u16(c.height)
            .f64(c.epsilon)
            .u16(width(c.format.key_width))
            .u16(width(c.format.value_width))
            .u64(c.next_msn)
            .u64(c.leaf_records)
            .u64(self.seqno);
        let sum = xxhash_rust::xxh3::xxh3_64(&b);
        Writer::new(&mut b).u64(sum);
        b
    }

    /// Decodes a record; `Err` says what is wrong with it. Values are checked for shape only (the caller
    /// checks the root against the file).
    pub fn decode(b: &[u8]) -> Result<TreeMeta, String> {
        if b.len() != LEN || b.get(..4) != Some(&MAGIC[..]) {
            return Err(format!(
                "expected {LEN} bytes starting with SBE1, found {} bytes",
                b.len()
            ));
        }
        let (body, sum) = b.split_at(BODY);
        if xxhash_rust::xxh3::xxh3_64(body) != Reader::new(sum).u64()? {
            return Err("checksum mismatch".into());
        }
        let mut r = Reader::new_at(body, 4)?;
        let width = |w: u16| (w != 0).then_some(w as usize);
        let core = CoreState {
            root: r.u64()?,
            height: r.u16()?,
            epsilon: r.f64()?,
            format: NodeFormat {
                key_width: width(r.u16()?),
                value_width: width(r.u16()?),
            },
            next_msn: r.u64()?,
            leaf_records: r.u64()?,
        };
        let seqno = r.u64()?;
        if core.height == 0 || core.height > 64 {
            return Err(format!("height {} is impossible", core.height));
        }
        if !(core.epsilon > 0.0 && core.epsilon <= 1.0) {
            return Err(format!("epsilon {} is outside (0, 1]", core.epsilon));
        }
        Ok(TreeMeta { core, seqno })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_damage() {
        let m = TreeMeta {
            core: CoreState {
                root: 9,
                height: 3,
                epsilon: 0.5,
                format: NodeFormat {
                    key_width: Some(4),
                    value_width: None,
                },
                next_msn: 77,
                leaf_records: 1234,
            },
            seqno: 42,
        };
        let bytes = m.encode();
        assert_eq!(bytes.len(), LEN);
        assert_eq!(TreeMeta::decode(&bytes).unwrap(), m);
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x10;
            assert!(TreeMeta::decode(&bad).is_err(), "byte {i} flipped");
        }
        assert!(TreeMeta::decode(b"SBE1").is_err());
        assert!(TreeMeta::decode(&[]).is_err());
    }
}
