//! The manifest: what a database directory holds, fixed at creation.
//!
//! File `MANIFEST`: magic `b"STRATAMF"`, body length u32 LE, xxh3-64 of the body u64 LE, body = JSON of
//! [`Manifest`]. Written to `MANIFEST.tmp`, synced, renamed over `MANIFEST`, directory synced.

use crate::error::{Error, Result};
use crate::index::family::{IndexConfig, IndexKind};
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
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    pub format_version: u32,
    /// The index family and its options.
    pub index: IndexConfig,
    pub key: TypeKind,
    pub value: TypeKind,
    pub page_size: usize,
    pub durability: Durability,
    pub direct_io: bool,
}

/// The manifest's JSON: the family's name in `index` and its options in `options`. Manifests written before
/// the family registry kept a family's options under the family's name (`"dynamized": {...}`,
/// `"betree": {...}`); those still open.
#[derive(serde::Serialize, serde::Deserialize)]
struct Repr {
    format_version: u32,
    index: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    options: Option<serde_json::Value>,
    key: TypeKind,
    value: TypeKind,
    page_size: usize,
    durability: Durability,
    direct_io: bool,
    /// Fields of older manifests (read only).
    #[serde(flatten)]
    rest: std::collections::BTreeMap<String, serde_json::Value>,
}

impl Manifest {
    fn to_repr(&self) -> Repr {
        Repr {
            format_version: self.format_version,
            index: self.index.kind().name().to_string(),
            options: Some(self.index.options_json()),
            key: self.key,
            value: self.value,
            page_size: self.page_size,
            durability: self.durability,
            direct_io: self.direct_io,
            rest: Default::default(),
        }
    }

    fn from_repr(mut r: Repr) -> std::result::Result<Manifest, String> {
        let kind: IndexKind = r.index.parse().map_err(|e: Error| e.to_string())?;
        let options = r
            .options
            .or_else(|| r.rest.remove(kind.name()))
            .unwrap_or_else(|| serde_json::json!({}));
        let index = IndexConfig::from_json(kind, options).map_err(|e| e.to_string())?;
        Ok(Manifest {
            format_version: r.format_version,
            index,
            key: r.key,
            value: r.value,
            page_size: r.page_size,
            durability: r.durability,
            direct_io: r.direct_io,
        })
    }
}

/// True for the names of files a database directory holds besides the manifest and the lock.
fn is_database_file(name: &str) -> bool {
    name == "data.pages"
        || name == crate::index::dynamized::persist::STATE
        || super::wal::parse_wal_name(name).is_some()
        || crate::index::dynamized::shard_file::parse_shard_file_name(name).is_some()
}

impl Manifest {
    /// The manifest as the JSON the file holds.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec_pretty(&self.to_repr()).expect("manifest serializes")
    }

    /// A manifest from the JSON a file holds; `Err` says what is wrong.
    pub fn from_json(body: &[u8]) -> std::result::Result<Manifest, String> {
        let repr: Repr = serde_json::from_slice(body).map_err(|e| e.to_string())?;
        Manifest::from_repr(repr)
    }

    pub(crate) fn write(&self, vfs: &dyn Vfs, dir: &Path, stats: &IoStats) -> Result<()> {
        let body = self.to_json();
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
        let m = Manifest::from_json(body)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::betree::BeTreeOptions;
    use crate::index::dynamized::{DynOptions, Layout};

    #[test]
    fn manifests_round_trip_and_older_manifests_still_open() {
        for &kind in IndexKind::ALL {
            let m = Manifest {
                format_version: FORMAT_VERSION,
                index: kind.default_config(),
                key: TypeKind::U64,
                value: TypeKind::U64,
                page_size: 8192,
                durability: Durability::Sync,
                direct_io: true,
            };
            assert_eq!(Manifest::from_json(&m.to_json()).unwrap(), m);
        }
        // Written before the family registry: a family's options under its name, or none for the B+-tree.
        let old = |index: &str, extra: &str| {
            format!(
                r#"{{"format_version": 2, "index": "{index}", "key": "u64", "value": "u64", "page_size": 4096,
                    "durability": "flush", "direct_io": false{extra}}}"#
            )
        };
        let m = Manifest::from_json(
            old(
                "dynamized",
                r#", "dynamized": {"layout": "leveling", "scale_factor": 4, "buffer_capacity": 100}"#,
            )
            .as_bytes(),
        )
        .unwrap();
        assert_eq!(
            m.index,
            IndexConfig::Dynamized(DynOptions {
                layout: Layout::Leveling,
                scale_factor: 4,
                buffer_capacity: 100,
                ..DynOptions::default()
            })
        );
        let m = Manifest::from_json(
            old(
                "betree",
                r#", "betree": {"epsilon": 0.25, "merge_operator": "u64-add"}"#,
            )
            .as_bytes(),
        )
        .unwrap();
        assert_eq!(
            m.index,
            IndexConfig::BeTree(BeTreeOptions {
                epsilon: 0.25,
                merge_operator: Some("u64-add".into())
            })
        );
        let m = Manifest::from_json(old("btree", "").as_bytes()).unwrap();
        assert_eq!(m.index, IndexKind::BTree.default_config());
        // Unknown families and bad options are errors, not defaults.
        assert!(Manifest::from_json(old("hash", "").as_bytes()).is_err());
        assert!(
            Manifest::from_json(old("dynamized", r#", "options": {"layout": 7}"#).as_bytes())
                .is_err()
        );
    }
}
