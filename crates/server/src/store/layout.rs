//! The store's layout: how many partitions, how keys are routed to them, and how client keys become the
//! engine's encoded keys. Recorded once in `DIR/SERVER.json`; later opens must agree with it.

use super::StoreConfig;
use crate::error::{ServerError, ServerResult};
use serde::{Deserialize, Serialize};
use std::ops::Bound;
use std::path::Path;
use strata::IndexKind;

/// How client keys and values map to the engine's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyMode {
    /// Any bytes, stored as they are.
    Bytes,
    /// Decimal integers (0 to 2^64 − 1), stored as `u64`: the dynamized index's key and value type.
    U64,
}

impl KeyMode {
    /// The mode an index family needs.
    pub fn for_index(kind: IndexKind) -> KeyMode {
        match kind {
            IndexKind::Dynamized => KeyMode::U64,
            _ => KeyMode::Bytes,
        }
    }

    /// A client's key or value as the engine's bytes; `None` if it is not valid in this mode.
    pub fn encode(self, client: &[u8]) -> Option<Vec<u8>> {
        match self {
            KeyMode::Bytes => Some(client.to_vec()),
            KeyMode::U64 => parse_u64(client).map(|v| v.to_be_bytes().to_vec()),
        }
    }

    /// The engine's bytes as the client sees them (no copy in `bytes` mode).
    pub fn decode(self, stored: Vec<u8>) -> Vec<u8> {
        match self {
            KeyMode::Bytes => stored,
            KeyMode::U64 => match <[u8; 8]>::try_from(stored.as_slice()) {
                Ok(b) => u64::from_be_bytes(b).to_string().into_bytes(),
                Err(_) => stored,
            },
        }
    }
}

/// A decimal `u64` with no sign, no spaces and no leading zeros (except `0` itself).
pub fn parse_u64(s: &[u8]) -> Option<u64> {
    if s.is_empty()
        || s.len() > 20
        || (s.len() > 1 && s[0] == b'0')
        || !s.iter().all(u8::is_ascii_digit)
    {
        return None;
    }
    std::str::from_utf8(s).ok()?.parse().ok()
}

/// How keys are spread over the partitions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "kind")]
pub enum Partitioning {
    /// xxh3-64 of the encoded key modulo the partition count: balanced, but every range touches every
    /// partition.
    Hash,
    /// Partition i holds encoded keys in `[splits[i − 1], splits[i])`; `splits` has N − 1 strictly
    /// ascending keys (empty: split evenly at creation, by the first 8 bytes of the key read as a big-endian
    /// number — FarReach splits the top bits the same way).
    Range { splits: Vec<Vec<u8>> },
}

/// The layout of a store, as recorded in `SERVER.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    pub partitions: usize,
    pub partitioning: Partitioning,
    pub index: String,
    pub key_mode: KeyMode,
}

const LAYOUT_FILE: &str = "SERVER.json";

impl Layout {
    /// The layout a configuration asks for (even splits filled in).
    fn from_config(config: &StoreConfig) -> ServerResult<Layout> {
        let n = config.partitions;
        if n == 0 || n > 1024 {
            return Err(ServerError::Usage(format!(
                "--partitions must be 1 to 1024, not {n}"
            )));
        }
        let partitioning = match &config.partitioning {
            Partitioning::Hash => Partitioning::Hash,
            Partitioning::Range { splits } if splits.is_empty() => Partitioning::Range {
                splits: even_splits(n),
            },
            Partitioning::Range { splits } => {
                if splits.len() != n - 1 {
                    return Err(ServerError::Usage(format!(
                        "{n} range partitions need {} split keys, not {}",
                        n - 1,
                        splits.len()
                    )));
                }
                if !splits.windows(2).all(|w| w[0] < w[1]) {
                    return Err(ServerError::Usage(
                        "split keys must be strictly ascending".into(),
                    ));
                }
                Partitioning::Range {
                    splits: splits.clone(),
                }
            }
        };
        let kind = config.index.kind();
        Ok(Layout {
            partitions: n,
            partitioning,
            index: kind.name().to_string(),
            key_mode: KeyMode::for_index(kind),
        })
    }

    /// Reads `DIR/SERVER.json` and checks it against `config`, or writes it for a new store.
    pub fn open_or_create(config: &StoreConfig) -> ServerResult<Layout> {
        let wanted = Layout::from_config(config)?;
        let path = config.dir.join(LAYOUT_FILE);
        match std::fs::read(&path) {
            Ok(bytes) => {
                let found: Layout = serde_json::from_slice(&bytes).map_err(|e| {
                    ServerError::Engine(format!("{}: not a server layout: {e}", path.display()))
                })?;
                if found != wanted {
                    return Err(ServerError::Usage(format!(
                        "{} was created with {} (partitions {}, {:?}); start the server with the same \
                         --partitions, --partitioning, --split-keys and --index",
                        config.dir.display(),
                        found.index,
                        found.partitions,
                        found.partitioning
                    )));
                }
                Ok(found)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir_all(&config.dir)
                    .map_err(|e| ServerError::io(&config.dir, e))?;
                write_synced(
                    &path,
                    &serde_json::to_vec_pretty(&wanted).unwrap_or_default(),
                )?;
                Ok(wanted)
            }
            Err(e) => Err(ServerError::io(&path, e)),
        }
    }

    /// The partition of an encoded key.
    pub fn route(&self, key: &[u8]) -> usize {
        match &self.partitioning {
            Partitioning::Hash => {
                (xxhash_rust::xxh3::xxh3_64(key) % self.partitions as u64) as usize
            }
            Partitioning::Range { splits } => splits.partition_point(|s| s.as_slice() <= key),
        }
    }

    /// The partitions an encoded key range can touch (in key order for range partitioning).
    pub fn overlapping(&self, lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> Vec<usize> {
        match &self.partitioning {
            Partitioning::Hash => (0..self.partitions).collect(),
            Partitioning::Range { .. } => {
                let first = match lo {
                    Bound::Included(k) | Bound::Excluded(k) => self.route(k),
                    Bound::Unbounded => 0,
                };
                let last = match hi {
                    Bound::Included(k) | Bound::Excluded(k) => self.route(k),
                    Bound::Unbounded => self.partitions - 1,
                };
                (first..=last.max(first)).collect()
            }
        }
    }
}

/// N − 1 keys splitting the space of 8-byte big-endian prefixes evenly.
fn even_splits(n: usize) -> Vec<Vec<u8>> {
    let step = u64::MAX / n as u64;
    (1..n as u64)
        .map(|i| {
            (i * step + i.min(u64::MAX % n as u64))
                .to_be_bytes()
                .to_vec()
        })
        .collect()
}

fn write_synced(path: &Path, bytes: &[u8]) -> ServerResult<()> {
    use std::io::Write;
    let tmp = path.with_extension("json.tmp");
    let mut f = std::fs::File::create(&tmp).map_err(|e| ServerError::io(&tmp, e))?;
    f.write_all(bytes).map_err(|e| ServerError::io(&tmp, e))?;
    f.sync_all().map_err(|e| ServerError::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| ServerError::io(path, e))?;
    if let Some(dir) = path.parent()
        && let Ok(d) = std::fs::File::open(dir)
    {
        let _ = d.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(n: usize, partitioning: Partitioning) -> Layout {
        Layout {
            partitions: n,
            partitioning,
            index: "btree".into(),
            key_mode: KeyMode::Bytes,
        }
    }

    #[test]
    fn even_range_splits_route_in_order() {
        let l = layout(
            4,
            Partitioning::Range {
                splits: even_splits(4),
            },
        );
        assert_eq!(l.route(&[0]), 0);
        assert_eq!(l.route(&[0x3f, 0xff]), 0);
        assert_eq!(l.route(&[0x40, 0, 0, 0, 0, 0, 0, 1]), 1);
        assert_eq!(l.route(&[0x80]), 1, "a prefix sorts before the split key");
        assert_eq!(l.route(&[0x80, 1]), 2);
        assert_eq!(l.route(&[0xff; 20]), 3);
        assert_eq!(l.route(b""), 0);
        let ov = l.overlapping(&Bound::Included(vec![0x50]), &Bound::Excluded(vec![0xc0]));
        assert_eq!(ov, vec![1, 2]);
        assert_eq!(
            l.overlapping(&Bound::Unbounded, &Bound::Unbounded),
            vec![0, 1, 2, 3]
        );
        // A range whose bounds cross is empty but still names one partition.
        assert_eq!(
            l.overlapping(&Bound::Included(vec![0xc0]), &Bound::Included(vec![0x10])),
            vec![2]
        );
    }

    #[test]
    fn hash_routing_spreads_keys() {
        let l = layout(4, Partitioning::Hash);
        let mut counts = [0; 4];
        for i in 0..4000u32 {
            counts[l.route(format!("key:{i}").as_bytes())] += 1;
        }
        assert!(
            counts.iter().all(|&c| (850..1150).contains(&c)),
            "{counts:?}"
        );
    }

    #[test]
    fn u64_keys_are_strict_decimals() {
        assert_eq!(parse_u64(b"0"), Some(0));
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        for bad in [
            &b""[..],
            b"01",
            b"-1",
            b"+1",
            b"1 ",
            b"18446744073709551616",
            b"x",
        ] {
            assert_eq!(parse_u64(bad), None, "{bad:?}");
        }
        let e = KeyMode::U64.encode(b"258").unwrap();
        assert_eq!(e, 258u64.to_be_bytes());
        assert_eq!(KeyMode::U64.decode(e.clone()), b"258");
    }
}
