//! PM-format pieces both indexes share: how damage is reported, little-endian words, and the
//! checksummed superblock (immutable fields, then their xxh3 at a fixed offset, magic word first).

use std::path::Path;

use xxhash_rust::xxh3::xxh3_64;

use crate::error::{Error, Result};
use crate::storage::pm::Pm;

/// `Error::Corruption` at `offset` of the region of the index called `name` (a PM region has no path).
pub fn corruption_in(name: &'static str, offset: u64, detail: impl Into<String>) -> Error {
    Error::corruption(Path::new(name), offset, detail)
}

/// Little-endian `u64` of an 8-byte slice.
pub fn le(b: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[..8]);
    u64::from_le_bytes(w)
}

/// Writes the superblock's `check` immutable bytes (each `(offset, value)` of `fields` as a little-endian
/// word, zeros elsewhere) at offset 0 and their xxh3 at `check` (not persisted).
pub fn write_superblock<P: Pm>(pm: &P, check: u64, fields: &[(u64, u64)]) -> Result<()> {
    let mut b = vec![0u8; check as usize];
    for &(at, v) in fields {
        b[at as usize..at as usize + 8].copy_from_slice(&v.to_le_bytes());
    }
    pm.write(0, &b)?;
    pm.write_u64(check, xxh3_64(&b))
}

/// Reads the superblock's `check` immutable bytes and the checksum word after them, after checking that
/// the region holds `super_bytes`; damage (too small, magic word at 0 not `magic`, checksum mismatch)
/// is reported by `corruption(offset, what)`. Returns the bytes read (the checksum word included).
pub fn read_superblock<P: Pm>(
    pm: &P,
    super_bytes: u64,
    check: u64,
    magic: u64,
    corruption: impl Fn(u64, &'static str) -> Error,
) -> Result<Vec<u8>> {
    if pm.len() < super_bytes {
        return Err(corruption(0, "region smaller than the superblock"));
    }
    let check = check as usize;
    let mut b = vec![0u8; check + 8];
    pm.read(0, &mut b)?;
    if le(&b) != magic {
        return Err(corruption(0, "bad superblock magic"));
    }
    if le(&b[check..]) != xxh3_64(&b[..check]) {
        return Err(corruption(0, "superblock checksum mismatch"));
    }
    Ok(b)
}
