//! The tree's root record, stored as the page file's user root at every checkpoint.
//!
//! Layout (little endian, 58 bytes): magic `b"SBE1"`, root u64, height u16, ε (f64 bits) u64, key width u16,
//! value width u16 (0 = variable), next MSN u64, records in leaves u64, WAL seqno u64, xxh3-64 of the
//! preceding bytes u64. The page file checksums its meta slots too; the inner checksum makes a record of
//! another format or a damaged field fail here with a precise message.

use super::node::NodeFormat;
use super::tree::CoreState;

const MAGIC: &[u8; 4] = b"SBE1";
const BODY: usize = 4 + 8 + 2 + 8 + 2 + 2 + 8 + 8 + 8;
const LEN: usize = BODY + 8;

/// A checkpoint: the core's state and the last WAL sequence number it contains.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct TreeMeta {
    pub core: CoreState,
    pub seqno: u64,
}

impl TreeMeta {
    pub fn encode(&self) -> Vec<u8> {
        let c = &self.core;
        let width = |w: Option<usize>| w.unwrap_or(0) as u16;
        let mut b = Vec::with_capacity(LEN);
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&c.root.to_le_bytes());
        b.extend_from_slice(&c.height.to_le_bytes());
        b.extend_from_slice(&c.epsilon.to_bits().to_le_bytes());
        b.extend_from_slice(&width(c.format.key_width).to_le_bytes());
        b.extend_from_slice(&width(c.format.value_width).to_le_bytes());
        b.extend_from_slice(&c.next_msn.to_le_bytes());
        b.extend_from_slice(&c.leaf_records.to_le_bytes());
        b.extend_from_slice(&self.seqno.to_le_bytes());
        let sum = xxhash_rust::xxh3::xxh3_64(&b);
        b.extend_from_slice(&sum.to_le_bytes());
        b
    }

    /// Decodes a record; `Err` says what is wrong with it. Values are checked for shape only (the caller
    /// checks the root against the file).
    pub fn decode(b: &[u8]) -> Result<TreeMeta, String> {
        if b.len() != LEN || &b[0..4] != MAGIC {
            return Err(format!(
                "expected {LEN} bytes starting with SBE1, found {} bytes",
                b.len()
            ));
        }
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        let u16_at = |o: usize| u16::from_le_bytes(b[o..o + 2].try_into().expect("2 bytes"));
        if xxhash_rust::xxh3::xxh3_64(&b[..BODY]) != u64_at(BODY) {
            return Err("checksum mismatch".into());
        }
        let width = |w: u16| (w != 0).then_some(w as usize);
        let core = CoreState {
            root: u64_at(4),
            height: u16_at(12),
            epsilon: f64::from_bits(u64_at(14)),
            format: NodeFormat {
                key_width: width(u16_at(22)),
                value_width: width(u16_at(24)),
            },
            next_msn: u64_at(26),
            leaf_records: u64_at(34),
        };
        if core.height == 0 || core.height > 64 {
            return Err(format!("height {} is impossible", core.height));
        }
        if !(core.epsilon > 0.0 && core.epsilon <= 1.0) {
            return Err(format!("epsilon {} is outside (0, 1]", core.epsilon));
        }
        Ok(TreeMeta {
            core,
            seqno: u64_at(42),
        })
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
