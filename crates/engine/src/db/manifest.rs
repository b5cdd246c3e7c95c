//! The manifest: what a database directory holds, fixed at creation.
//!
//! File `MANIFEST`: magic `b"STRATAMF"`, body length u32 LE, xxh3-64 of the body u64 LE, body = JSON of
//! [`Manifest`]. Written to `MANIFEST.tmp`, synced, renamed over `MANIFEST`, directory synced.

use super::IndexKind;
use crate::error::{Error, Result};
use crate::storage::vfs::{read_exact_at, write_file_atomically};
use crate::storage::{FileKind, IoStats, OpenOptions, Vfs};
use crate::types::{Durability, TypeKind};
use std::path::Path;

pub(crate) const MANIFEST: &str = "MANIFEST";
const MAGIC: &[u8; 8] = b"STRATAMF";
/// Version of the on-disk format this build writes and reads.
/// Version 2: WAL files with a header (number, base checkpoint) in a preallocated file (`storage::log`).
pub const FORMAT_VERSION: u32 = 2;

/// Everything fixed at creation.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Manifest {
    pub format_version: u32,
    pub index: IndexKind,
    pub key: TypeKind,
    pub value: TypeKind,
    pub page_size: usize,
    pub durability: Durability,
    pub direct_io: bool,
    /// Structure of a dynamized index (absent for other families).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dynamized: Option<crate::index::dynamized::DynOptions>,
    /// Options of a Bε-tree (absent for other families).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub betree: Option<crate::index::betree::BeTreeOptions>,
}

/// True for the names of files a database directory holds besides the manifest and the lock.
fn is_database_file(name: &str) -> bool {
    name == "data.pages"
        || name == crate::index::dynamized::persist::STATE
        || super::wal::parse_wal_name(name).is_some()
        || crate::index::dynamized::shard_file::parse_shard_file_name(name).is_some()
}

impl Manifest {
    pub(crate) fn write(&self, vfs: &dyn Vfs, dir: &Path, stats: &IoStats) -> Result<()> {
        let body = serde_json::to_vec_pretty(self).expect("manifest serializes");
        let mut bytes = Vec::with_capacity(20 + body.len());
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&(body.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&xxhash_rust::xxh3::xxh3_64(&body).to_le_bytes());
        bytes.extend_from_slice(&body);
        write_file_atomically(vfs, dir, MANIFEST, &bytes, stats)
    }

    pub(crate) fn read(vfs: &dyn Vfs, dir: &Path, stats: &IoStats) -> Result<Manifest> {
        let path = dir.join(MANIFEST);
        if !vfs.exists(&path) {
            let names = vfs.list_dir(dir)?;
            let ours: Vec<&String> = names.iter().filter(|n| is_database_file(n)).collect();
            if !ours.is_empty() {
                return Err(Error::corruption(
                    &path,
                    0,
                    format!(
                        "the manifest is missing, but the directory holds a Strata database's files ({}): it \
                         was deleted, or the database's creation never finished",
                        ours.iter()
                            .map(|n| n.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ));
            }
            return Err(Error::invalid(format!(
                "{} is not a Strata database (it has no {MANIFEST}); create one with `strata create`",
                dir.display()
            )));
        }
        let file = vfs.open(&path, OpenOptions::default())?;
        let len = file.len()?;
        if len > 1 << 20 {
            return Err(Error::corruption(
                &path,
                0,
                format!("manifest is {len} bytes, far too large"),
            ));
        }
        let mut bytes = vec![0u8; len as usize];
        let n = read_exact_at(file.as_ref(), &mut bytes, 0)?;
        stats.record_read(FileKind::Meta, n);
        if n < 20 || &bytes[0..8] != MAGIC {
            return Err(Error::corruption(
                &path,
                0,
                "not a Strata manifest (bad magic)",
            ));
        }
        let body_len = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes")) as usize;
        let sum = u64::from_le_bytes(bytes[12..20].try_into().expect("8 bytes"));
        let body = bytes
            .get(20..20 + body_len)
            .ok_or_else(|| Error::corruption(&path, 8, "manifest body is truncated"))?;
        if xxhash_rust::xxh3::xxh3_64(body) != sum {
            return Err(Error::corruption(&path, 20, "manifest checksum mismatch"));
        }
        let m: Manifest = serde_json::from_slice(body)
            .map_err(|e| Error::corruption(&path, 20, format!("manifest does not parse: {e}")))?;
        if m.format_version != FORMAT_VERSION {
            return Err(Error::Incompatible(format!(
                "database format version {} is not supported by this build (version {FORMAT_VERSION})",
                m.format_version
            )));
        }
        Ok(m)
    }
}
