//! Key and value types.
//!
//! Every index stores keys and values as *encoded bytes* whose byte-wise (memcmp) order equals the order of the
//! typed keys. Fixed-width types (`u64`) encode to a fixed number of bytes and are stored inline in packed
//! arrays, with no per-record allocation or indirection; byte strings are stored in slotted pages.
//! Limits are checked before anything is written: an oversized key is `Error::InvalidArgument`.

use crate::error::{Error, Result};
use std::fmt::Debug;

/// Largest byte-string key the engine accepts (a page-size dependent limit may be lower; see
/// `Db::max_key_len`).
pub const MAX_KEY_LEN: usize = 4096;
/// Largest byte-string value the engine accepts.
pub const MAX_VALUE_LEN: usize = 1 << 20;

/// The type of keys or values of a database, as recorded in its manifest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TypeKind {
    /// Unsigned 64-bit integers, stored inline as 8 big-endian bytes.
    U64,
    /// Byte strings of variable length.
    Bytes,
}

impl TypeKind {
    /// The width of every encoded item, or `None` for variable-length types.
    pub fn fixed_width(self) -> Option<usize> {
        match self {
            TypeKind::U64 => Some(8),
            TypeKind::Bytes => None,
        }
    }

    /// Name used in the manifest and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            TypeKind::U64 => "u64",
            TypeKind::Bytes => "bytes",
        }
    }
}

impl std::str::FromStr for TypeKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "u64" => Ok(TypeKind::U64),
            "bytes" => Ok(TypeKind::Bytes),
            other => Err(Error::invalid(format!(
                "unknown type {other:?} (expected u64 or bytes)"
            ))),
        }
    }
}

/// A type that can be stored as a value: it encodes to bytes and decodes back.
pub trait Value: Debug + Clone + Send + Sync + 'static {
    /// The kind recorded in the manifest; opening a database with another kind is `Error::Incompatible`.
    const KIND: TypeKind;
    /// Appends the encoding of `self` to `out`.
    fn encode_into(&self, out: &mut Vec<u8>);
    /// Decodes an item previously produced by `encode_into`. Bytes come from disk: damage is an error, never a
    /// panic.
    fn decode(bytes: &[u8]) -> Result<Self>;
    /// Length of the encoding.
    fn encoded_len(&self) -> usize;
}

/// A type that can be a key: a value whose encoding preserves order under byte-wise comparison.
pub trait Key: Value + Ord {}

impl Value for u64 {
    const KIND: TypeKind = TypeKind::U64;
    #[inline]
    fn encode_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_be_bytes());
    }
    #[inline]
    fn decode(bytes: &[u8]) -> Result<Self> {
        let arr: [u8; 8] = bytes
            .try_into()
            .map_err(|_| Error::invalid(format!("a u64 is 8 bytes, got {}", bytes.len())))?;
        Ok(u64::from_be_bytes(arr))
    }
    #[inline]
    fn encoded_len(&self) -> usize {
        8
    }
}
impl Key for u64 {}

impl Value for Vec<u8> {
    const KIND: TypeKind = TypeKind::Bytes;
    #[inline]
    fn encode_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self);
    }
    #[inline]
    fn decode(bytes: &[u8]) -> Result<Self> {
        Ok(bytes.to_vec())
    }
    #[inline]
    fn encoded_len(&self) -> usize {
        self.len()
    }
}
impl Key for Vec<u8> {}

/// How durable a write is when the call that made it returns.
///
/// * `None`: the write is in memory only. It reaches the write-ahead log at the next `Db::flush`, the next write
///   with a stronger level, a checkpoint, a clean close, or when the in-memory log buffer fills. A crash of the
///   process may lose it.
/// * `Flush`: the log record has been handed to the operating system (`write(2)`) before the call returns. The
///   write survives the process being killed, but not a power loss or kernel crash.
/// * `Sync`: the log has been `fdatasync`ed before the call returns. The write survives power loss on media that
///   honour flushes.
///
/// In every mode, what survives a crash is a prefix of the acknowledged writes in commit order (batches are
/// atomic): recovery never exposes a later write while losing an earlier one.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Default,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    None,
    #[default]
    Flush,
    Sync,
}

impl std::str::FromStr for Durability {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "none" => Ok(Durability::None),
            "flush" => Ok(Durability::Flush),
            "sync" => Ok(Durability::Sync),
            other => Err(Error::invalid(format!(
                "unknown durability {other:?} (expected none, flush or sync)"
            ))),
        }
    }
}

impl Durability {
    /// Name used in the manifest and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Durability::None => "none",
            Durability::Flush => "flush",
            Durability::Sync => "sync",
        }
    }
}
