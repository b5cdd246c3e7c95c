//! Sealed files: a small file written whole and replaced atomically, whose bytes carry their own check.
//!
//! Layout (little endian): magic (8 bytes, one per file kind), body length `u64`, xxh3-64 of the body `u64`,
//! body. [`write_sealed`] writes `NAME.tmp`, syncs it, renames it over `NAME` and syncs the directory, so a
//! crash leaves the old file or the new one; [`read_sealed`] returns the body or `Error::Corruption` naming
//! the file and what is wrong (magic, length, checksum). Used by the manifest and the dynamized state file.
//!
//! Cost: one write and two `fdatasync`s to seal; one read of the whole file and one xxh3 pass to open.

// A decoder of bytes read from disk: every index and slice is checked.
#![deny(clippy::indexing_slicing)]

use super::codec::{Reader, Writer};
use super::io_stats::{FileKind, IoStats};
use super::vfs::{OpenOptions, Vfs, read_exact_at, write_file_atomically};
use crate::error::{Error, Result};
use std::path::Path;

/// Bytes before the body.
pub const SEALED_HEADER: usize = 24;

/// Seals `body` under `magic` into `dir/name`, atomically.
pub fn write_sealed(
    vfs: &dyn Vfs,
    dir: &Path,
    name: &str,
    magic: &[u8; 8],
    body: &[u8],
    stats: &IoStats,
) -> Result<()> {
    let mut bytes = Vec::with_capacity(SEALED_HEADER + body.len());
    Writer::new(&mut bytes)
        .bytes(magic)
        .u64(body.len() as u64)
        .u64(xxhash_rust::xxh3::xxh3_64(body))
        .bytes(body);
    write_file_atomically(vfs, dir, name, &bytes, stats)
}

/// The whole file at `path` (at most `max_len` bytes, else corruption), counted as metadata I/O.
pub fn read_whole(vfs: &dyn Vfs, path: &Path, max_len: u64, stats: &IoStats) -> Result<Vec<u8>> {
    let file = vfs.open(path, OpenOptions::READ_ONLY)?;
    let len = file.len()?;
    if len > max_len {
        return Err(Error::corruption(
            path,
            0,
            format!("file of {len} bytes, more than the {max_len} it may hold"),
        ));
    }
    let mut bytes = vec![0u8; len as usize];
    let n = read_exact_at(file.as_ref(), &mut bytes, 0)?;
    bytes.truncate(n);
    stats.record_read(FileKind::Meta, n);
    Ok(bytes)
}

/// Checks sealed `bytes` read from `path` under `magic`; returns the body. `what` names the file kind in
/// messages.
pub fn unseal<'a>(bytes: &'a [u8], path: &Path, magic: &[u8; 8], what: &str) -> Result<&'a [u8]> {
    let mut r = Reader::new(bytes);
    let head = (|| Ok::<_, super::codec::Short>((r.array::<8>()?, r.u64()?, r.u64()?)))();
    let Ok((found, body_len, sum)) = head else {
        return Err(Error::corruption(
            path,
            0,
            format!(
                "{what} of {} bytes is too short for its header",
                bytes.len()
            ),
        ));
    };
    if &found != magic {
        return Err(Error::corruption(
            path,
            0,
            format!("not a {what} (bad magic)"),
        ));
    }
    if body_len != r.remaining() as u64 {
        return Err(Error::corruption(
            path,
            8,
            format!(
                "{what} says its body is {body_len} bytes, the file holds {}",
                r.remaining()
            ),
        ));
    }
    let body = r.bytes(r.remaining()).unwrap_or_default();
    if xxhash_rust::xxh3::xxh3_64(body) != sum {
        return Err(Error::corruption(
            path,
            SEALED_HEADER as u64,
            format!("{what} checksum mismatch"),
        ));
    }
    Ok(body)
}

/// Reads the sealed file at `path` (at most `max_len` bytes) under `magic`; returns its body.
pub fn read_sealed(
    vfs: &dyn Vfs,
    path: &Path,
    magic: &[u8; 8],
    what: &str,
    max_len: u64,
    stats: &IoStats,
) -> Result<Vec<u8>> {
    let bytes = read_whole(vfs, path, max_len, stats)?;
    Ok(unseal(&bytes, path, magic, what)?.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::MemVfs;

    #[test]
    fn sealed_files_round_trip_and_every_damage_is_corruption() {
        let mem = MemVfs::new();
        let stats = IoStats::new();
        let dir = Path::new("/d");
        mem.create_dir_all(dir).unwrap();
        let magic = b"TESTMAGC";
        write_sealed(&mem, dir, "F", magic, b"hello body", &stats).unwrap();
        let path = dir.join("F");
        assert_eq!(
            read_sealed(&mem, &path, magic, "test file", 1 << 20, &stats).unwrap(),
            b"hello body"
        );
        assert!(!mem.exists(&dir.join("F.tmp")));
        let clean = mem.file_bytes(&path).unwrap();
        for i in 0..clean.len() {
            let mut b = clean.clone();
            b[i] ^= 0x04;
            mem.set_file_bytes(&path, b);
            let e = read_sealed(&mem, &path, magic, "test file", 1 << 20, &stats).unwrap_err();
            assert!(matches!(e, Error::Corruption { .. }), "byte {i}: {e}");
        }
        for len in [0, 7, 23, clean.len() - 1] {
            mem.set_file_bytes(&path, clean[..len].to_vec());
            assert!(read_sealed(&mem, &path, magic, "test file", 1 << 20, &stats).is_err());
        }
        mem.set_file_bytes(&path, clean);
        assert!(read_sealed(&mem, &path, magic, "test file", 10, &stats).is_err());
    }
}
