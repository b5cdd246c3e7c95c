//! The learned family's checkpoint file `LEARNED`: the sorted records at one snapshot.
//!
//! A sealed file (`storage::sealed`: magic `STRLRNCK`, body length, xxh3-64, body), written to
//! `LEARNED.tmp`, synced and renamed over `LEARNED`, so a crash leaves the old checkpoint or the new one.
//! Body, integers little endian: WAL sequence number u64, record count u64, then per record in strictly
//! increasing key order: key u64, value length u32, value bytes. Models are not stored: opening retrains
//! them from the keys.
//!
//! Damage (checksum, truncation, counts, unsorted keys) is `Error::Corruption` naming the file and the byte
//! offset. Cost: one sequential write or read of every record.

// A decoder of bytes read from disk: every index and slice is checked.
#![deny(clippy::indexing_slicing)]

use crate::error::{Error, Result};
use crate::storage::codec::{Reader, Writer};
use crate::storage::sealed::{SEALED_HEADER, read_sealed, write_sealed};
use crate::storage::{IoStats, Vfs};
use std::path::Path;

pub use crate::files::LEARNED_STATE as FILE;
const MAGIC: &[u8; 8] = b"STRLRNCK";

/// Writes a checkpoint of `records` (strictly increasing keys) containing WAL sequence number `seqno`.
pub fn write(
    vfs: &dyn Vfs,
    dir: &Path,
    seqno: u64,
    records: &[(u64, Vec<u8>)],
    stats: &IoStats,
) -> Result<()> {
    let size: usize = records.iter().map(|r| 12 + r.1.len()).sum();
    let mut body = Vec::with_capacity(16 + size);
    let mut w = Writer::new(&mut body);
    w.u64(seqno).u64(records.len() as u64);
    for (k, v) in records {
        w.u64(*k).u32(v.len() as u32).bytes(v);
    }
    write_sealed(vfs, dir, FILE, MAGIC, &body, stats)
}

/// A checkpoint read back: its sequence number and records.
pub struct Loaded {
    pub seqno: u64,
    pub records: Vec<(u64, Vec<u8>)>,
}

/// Reads and checks the checkpoint in `dir`.
pub fn read(vfs: &dyn Vfs, dir: &Path, stats: &IoStats) -> Result<Loaded> {
    let path = dir.join(FILE);
    let body = read_sealed(vfs, &path, MAGIC, "learned checkpoint", u64::MAX, stats)?;
    decode(&body).map_err(|(at, what)| {
        Error::corruption(
            &path,
            (SEALED_HEADER + at) as u64,
            format!("learned checkpoint: {what}"),
        )
    })
}

/// Decodes a checkpoint body; errors carry the body offset.
fn decode(body: &[u8]) -> std::result::Result<Loaded, (usize, String)> {
    let mut r = Reader::new(body);
    let at = |r: &Reader<'_>| r.position();
    let seqno = r.u64().map_err(|e| (0, e.to_string()))?;
    let count = r.u64().map_err(|e| (8, e.to_string()))?;
    let n = r.count(count, 12).map_err(|e| (8, e))?;
    let mut records: Vec<(u64, Vec<u8>)> = Vec::with_capacity(n);
    for i in 0..n {
        let start = at(&r);
        let k = r.u64().map_err(|e| (start, e.to_string()))?;
        let len = r.u32().map_err(|e| (start, e.to_string()))?;
        let v = r.bytes(len as usize).map_err(|e| (start, e.to_string()))?;
        if records.last().is_some_and(|last| last.0 >= k) {
            return Err((
                start,
                format!("record {i} has key {k}, not above the one before"),
            ));
        }
        records.push((k, v.to_vec()));
    }
    r.finish().map_err(|e| (at(&r), e))?;
    Ok(Loaded { seqno, records })
}

/// True if `dir` holds a checkpoint.
pub fn exists(vfs: &dyn Vfs, dir: &Path) -> bool {
    vfs.exists(&dir.join(FILE))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::MemVfs;
    use std::sync::Arc;

    #[test]
    fn round_trips_and_damage_is_corruption_with_an_offset() {
        let vfs: Arc<dyn Vfs> = Arc::new(MemVfs::new());
        let dir = Path::new("/db");
        vfs.create_dir_all(dir).unwrap();
        let stats = IoStats::default();
        let records = vec![(1, vec![1, 2]), (5, vec![]), (u64::MAX, vec![9; 300])];
        write(vfs.as_ref(), dir, 42, &records, &stats).unwrap();
        let back = read(vfs.as_ref(), dir, &stats).unwrap();
        assert_eq!((back.seqno, back.records), (42, records.clone()));
        // Unsorted keys and bad counts are refused by the decoder, with the offset of the damage.
        let mut body = Vec::new();
        Writer::new(&mut body)
            .u64(1)
            .u64(2)
            .u64(7)
            .u32(0)
            .u64(7)
            .u32(0);
        assert_eq!(decode(&body).err().map(|e| e.0), Some(28));
        let mut body = Vec::new();
        Writer::new(&mut body).u64(1).u64(1_000_000);
        assert!(decode(&body).is_err());
        // A flipped byte fails the checksum.
        let path = dir.join(FILE);
        let mut bytes =
            crate::storage::sealed::read_whole(vfs.as_ref(), &path, u64::MAX, &stats).unwrap();
        bytes[SEALED_HEADER + 20] ^= 1;
        vfs.remove_file(&path).unwrap();
        crate::storage::vfs::write_file_atomically(vfs.as_ref(), dir, FILE, &bytes, &stats)
            .unwrap();
        let err = read(vfs.as_ref(), dir, &stats).err().unwrap();
        assert!(matches!(err, Error::Corruption { .. }), "{err}");
    }
}
