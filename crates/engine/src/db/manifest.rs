//! The manifest: what a database directory holds, fixed at creation.
//!
//! File `MANIFEST`: a sealed file (`storage::sealed`: magic `b"STRATAMF"`, body length, xxh3-64, body) whose
//! body is the JSON of [`Manifest`], replaced atomically. Manifests written before the sealed framing (a
//! `u32` body length) still open.

// A decoder of bytes read from disk: every index and slice is checked.
#![deny(clippy::indexing_slicing)]

use crate::error::{Error, Result};
use crate::index::family::{IndexConfig, IndexKind};
use crate::storage::codec::Reader;
use crate::storage::sealed::{read_whole, unseal, write_sealed};
use crate::storage::{IoStats, Vfs};
use crate::types::{Durability, TypeKind};
use std::path::Path;

pub(crate) use crate::files::MANIFEST;
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

/// The body of a manifest in the framing used before sealed files (magic, body length `u32`, xxh3-64, body),
/// if `bytes` is one whose checksum verifies.
pub(crate) fn legacy_body(bytes: &[u8]) -> Option<&[u8]> {
    let mut r = Reader::new(bytes);
    if &r.array::<8>().ok()? != MAGIC {
        return None;
    }
    let len = r.u32().ok()? as usize;
    let sum = r.u64().ok()?;
    let body = r.bytes(len).ok()?;
    (r.remaining() == 0 && xxhash_rust::xxh3::xxh3_64(body) == sum).then_some(body)
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
        write_sealed(vfs, dir, MANIFEST, MAGIC, &self.to_json(), stats)
    }

    pub(crate) fn read(vfs: &dyn Vfs, dir: &Path, stats: &IoStats) -> Result<Manifest> {
        let path = dir.join(MANIFEST);
        if !vfs.exists(&path) {
            let names = vfs.list_dir(dir)?;
            let ours: Vec<&String> = names
                .iter()
                .filter(|n| crate::files::is_database_file(n))
                .collect();
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
        let bytes = read_whole(vfs, &path, 1 << 20, stats)?;
        let body = match unseal(&bytes, &path, MAGIC, "Strata manifest") {
            Ok(body) => body,
            Err(e) => legacy_body(&bytes).ok_or(e)?,
        };
        let m = Manifest::from_json(body)
            .map_err(|e| Error::corruption(&path, 24, format!("manifest does not parse: {e}")))?;
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
    use crate::storage::codec::Writer;

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
        // The framing before sealed files (a u32 body length).
        let body = m.to_json();
        let mut legacy = Vec::new();
        Writer::new(&mut legacy)
            .bytes(MAGIC)
            .u32(body.len() as u32)
            .u64(xxhash_rust::xxh3::xxh3_64(&body))
            .bytes(&body);
        assert_eq!(legacy_body(&legacy), Some(&body[..]));
        legacy[30] ^= 1;
        assert_eq!(legacy_body(&legacy), None);
        // Unknown families and bad options are errors, not defaults.
        assert!(Manifest::from_json(old("skiplist", "").as_bytes()).is_err());
        assert!(
            Manifest::from_json(old("dynamized", r#", "options": {"layout": 7}"#).as_bytes())
                .is_err()
        );
    }
}
