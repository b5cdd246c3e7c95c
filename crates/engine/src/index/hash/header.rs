//! The family header at offset 0 of `hash.pm`: magic, version, where the index's region starts and how long
//! it is, the region's nonce, and an xxh3 over them (see `docs/format.md` §8). Written once, at creation;
//! any damage is `Error::Corruption` naming the file.

use std::path::Path;

use xxhash_rust::xxh3::xxh3_64;

use super::format::le;
use crate::error::{Error, Result};

/// Bytes of the family's page in front of the index's region.
pub const HEADER_BYTES: u64 = 4096;
/// Largest region: 64 TiB.
pub const MAX_REGION_BYTES: u64 = 1 << 46;
const MAGIC: u64 = u64::from_le_bytes(*b"STRHFAM1");
const VERSION: u64 = 1;
/// Bytes covered by the header checksum (stored right after them).
const HEADER_CHECKED: usize = 56;

/// Byte offset of the header word that records the region's size (word 3: the index's bytes after the
/// header).
pub const TOTAL_OFFSET: u64 = 24;

/// The immutable header at offset 0 of `hash.pm`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Bytes of the whole file (header page + index region).
    pub total: u64,
    /// Random at creation: seeds the ledger's checksums and digest.
    pub nonce: u64,
}

impl Header {
    /// The 64 bytes at offset 0.
    pub fn encode(&self) -> [u8; 64] {
        let mut b = [0u8; 64];
        for (i, w) in [
            MAGIC,
            VERSION,
            HEADER_BYTES,
            self.total - HEADER_BYTES,
            self.nonce,
        ]
        .into_iter()
        .enumerate()
        {
            b[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
        let check = xxh3_64(&b[..HEADER_CHECKED]);
        b[HEADER_CHECKED..].copy_from_slice(&check.to_le_bytes());
        b
    }

    /// Decodes the first bytes of `path`; damage is `Corruption` naming the file.
    pub fn decode(b: &[u8], path: &Path) -> Result<Header> {
        let bad = |at: u64, what: String| {
            Error::corruption(path, at, format!("hash region header: {what}"))
        };
        if b.len() < 64 {
            return Err(bad(
                0,
                format!("the file holds {} bytes, not even a header", b.len()),
            ));
        }
        if le(b) != MAGIC {
            return Err(bad(0, "bad magic (not a hash region)".into()));
        }
        if le(&b[HEADER_CHECKED..]) != xxh3_64(&b[..HEADER_CHECKED]) {
            return Err(bad(HEADER_CHECKED as u64, "checksum mismatch".into()));
        }
        let word = |i: usize| le(&b[i * 8..]);
        if word(1) != VERSION {
            return Err(Error::Incompatible(format!(
                "{} is a hash region of version {}, this build reads version {VERSION}",
                path.display(),
                word(1)
            )));
        }
        let core = word(3);
        if word(2) != HEADER_BYTES
            || core == 0
            || !core.is_multiple_of(HEADER_BYTES)
            || core > MAX_REGION_BYTES - HEADER_BYTES
        {
            return Err(bad(16, format!("region at {} of {core} bytes", word(2))));
        }
        Ok(Header {
            total: HEADER_BYTES + core,
            nonce: word(4),
        })
    }
}
