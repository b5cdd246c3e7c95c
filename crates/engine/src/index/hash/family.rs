//! The ElimDA-style hash index as an index family (see `index::family`): `u64` keys, `u64` values or bytes
//! values of at most 256 B (in the value log `hash.values`, see `db_values`), no key order; its region is the
//! file `hash.pm` of the database directory (see `region`), its batches' bodies go to `hash.batch` (see
//! `ledger`). Options ([`HashOptions`]): the region's size, the persistence mode, the collecting log's size,
//! the first table's bucket count and the value log's size.

use serde::{Deserialize, Deserializer, Serialize};

use super::HashConfig;
use super::db_index::HashDbIndex;
use super::header::{HEADER_BYTES, MAX_REGION_BYTES};
use super::layout::{
    BUCKET_BYTES, Gen, Geometry, MAX_LOG_LINES, MAX_LOG2_BUCKETS, MIN_LOG_LINES, SUPER_BYTES,
};
use crate::error::{Error, Result};
use crate::index::OrderedIndex;
use crate::index::family::{Capabilities, IndexContext, IndexFamily};
use crate::storage::pm::PersistMode;
use crate::types::TypeKind;

/// Smallest value log: its control page and room for four longest records, in 4 KiB pages.
const MIN_VALUE_LOG_BYTES: u64 = 5 * HEADER_BYTES;

/// The hash family.
#[derive(Debug, Clone, Copy, Default)]
pub struct HashFamily;

/// Where a store to the region becomes durable (the `persist` option).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PersistChoice {
    /// `eadr` when the database directory is on a memory file system (tmpfs, ramfs: nothing there survives
    /// a power loss anyway), else `msync`.
    #[default]
    Auto,
    /// The page cache (on real PM: the CPU caches) is the persistence domain: a store is durable against a
    /// killed process the moment it is made, fences only order. A power loss between checkpoints can leave
    /// a regular file's region torn (detected at open).
    Eadr,
    /// Cache-line write-back + fence at every persist point (real PM without eADR); on a page-cache file as
    /// durable as `eadr`.
    Adr,
    /// `msync` of the region at every persist point: every acknowledged write survives a power loss on any
    /// file system, at the cost of one `msync` per persist point.
    Msync,
}

/// The resolved persistence mode of an open region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Persist {
    Eadr,
    Adr,
    Msync,
}

impl Persist {
    /// What the index's `persist` does: flush + fence (ADR, msync) or fence only (eADR).
    pub fn pm_mode(self) -> PersistMode {
        match self {
            Persist::Eadr => PersistMode::Eadr,
            Persist::Adr | Persist::Msync => PersistMode::Adr,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Persist::Eadr => "eadr",
            Persist::Adr => "adr",
            Persist::Msync => "msync",
        }
    }
}

impl PersistChoice {
    /// The mode for a region on a memory file system (`memory_fs`) or not.
    pub fn resolve(self, memory_fs: bool) -> Persist {
        match self {
            PersistChoice::Auto if memory_fs => Persist::Eadr,
            PersistChoice::Auto | PersistChoice::Msync => Persist::Msync,
            PersistChoice::Eadr => Persist::Eadr,
            PersistChoice::Adr => Persist::Adr,
        }
    }

    fn name(self) -> &'static str {
        match self {
            PersistChoice::Auto => "auto",
            PersistChoice::Eadr => "eadr",
            PersistChoice::Adr => "adr",
            PersistChoice::Msync => "msync",
        }
    }
}

/// Options of a hash database, fixed at creation (recorded in the manifest).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HashOptions {
    /// Bytes of `hash.pm`, a multiple of 4096 (a number, or a size such as `"16GiB"`). A virtual size: the
    /// file is sparse and blocks are allocated as tables are written. Holds about `region_bytes / 128` keys
    /// (tables double, and a table moves to fresh space when rebuilt). 4 GiB by default.
    #[serde(deserialize_with = "size_or_number")]
    pub region_bytes: u64,
    /// Where a store becomes durable (see [`PersistChoice`]).
    pub persist: PersistChoice,
    /// 64 B lines of the collecting log (8 to 2^32; 8,192 = 512 KiB by default).
    pub log_lines: u64,
    /// P-buckets (4 KiB, 256 slots) of the first table: a power of two, 16 by default.
    pub initial_buckets: u64,
    /// Bytes of the value log `hash.values` of a database with bytes values (a number or a size; a multiple
    /// of 4096, at least 20 KiB; sparse, allocated as the log first fills). Each value takes 16 B + its
    /// length rounded up to 16 B until overwritten or deleted and cleaned. 1 GiB by default; unused with
    /// `u64` values.
    #[serde(deserialize_with = "size_or_number")]
    pub value_log_bytes: u64,
}

impl Default for HashOptions {
    fn default() -> Self {
        HashOptions {
            region_bytes: 4 << 30,
            persist: PersistChoice::Auto,
            log_lines: 8192,
            initial_buckets: 16,
            value_log_bytes: 1 << 30,
        }
    }
}

impl HashOptions {
    /// The index's configuration under the family: one collecting log (the shell serialises writers).
    pub(super) fn index_config(&self) -> HashConfig {
        HashConfig {
            initial_buckets: self.initial_buckets,
            log_lines: self.log_lines,
            logs: 1,
            ..HashConfig::default()
        }
    }

    /// Bytes of one generation of the index (its logs, overflow pool and 2^`log2` P-buckets) with these
    /// options, as the index lays it out.
    pub fn generation_bytes(&self, log2: u64) -> u64 {
        let geometry = Geometry {
            bucket_bytes: BUCKET_BYTES,
            logs: self.index_config().logs,
            log_lines: self.log_lines,
            fixed_log: false,
            nonce: 0,
            region_len: 0,
        };
        Gen::plan(&geometry, SUPER_BYTES, 0, log2).bytes()
    }

    /// `InvalidArgument` unless every option is in range and the region holds the first table and its
    /// first doubling.
    pub fn validate(&self) -> Result<()> {
        let r = self.region_bytes;
        if !r.is_multiple_of(HEADER_BYTES) || r > MAX_REGION_BYTES {
            return Err(Error::invalid(format!(
                "region_bytes {r} must be a multiple of 4096 up to {MAX_REGION_BYTES}"
            )));
        }
        if !(MIN_LOG_LINES..=MAX_LOG_LINES).contains(&self.log_lines) {
            return Err(Error::invalid(format!(
                "log_lines {} must be from {MIN_LOG_LINES} to {MAX_LOG_LINES}",
                self.log_lines
            )));
        }
        let b = self.initial_buckets;
        if b == 0 || !b.is_power_of_two() || u64::from(b.trailing_zeros()) >= MAX_LOG2_BUCKETS {
            return Err(Error::invalid(format!(
                "initial_buckets {b} must be a power of two below 2^{MAX_LOG2_BUCKETS}"
            )));
        }
        let v = self.value_log_bytes;
        if !v.is_multiple_of(HEADER_BYTES)
            || !(MIN_VALUE_LOG_BYTES..=MAX_REGION_BYTES - HEADER_BYTES).contains(&v)
        {
            return Err(Error::invalid(format!(
                "value_log_bytes {v} must be a multiple of 4096 from {MIN_VALUE_LOG_BYTES} to {}",
                MAX_REGION_BYTES - HEADER_BYTES
            )));
        }
        let log2 = u64::from(b.trailing_zeros());
        let need = HEADER_BYTES
            + SUPER_BYTES
            + self.generation_bytes(log2)
            + self.generation_bytes(log2 + 1);
        if r < need {
            return Err(Error::invalid(format!(
                "region_bytes {r} cannot hold the log and a first table of {b} buckets with room to double \
                 ({need} bytes needed)"
            )));
        }
        Ok(())
    }
}

/// A size as a number of bytes or a string with an optional binary suffix (`K`, `M`, `G`, `T`, with or
/// without `iB` / `B`).
fn size_or_number<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Size {
        Number(u64),
        Text(String),
    }
    match Size::deserialize(d)? {
        Size::Number(n) => Ok(n),
        Size::Text(s) => parse_size(&s).ok_or_else(|| {
            serde::de::Error::custom(format!("{s:?} is not a size (e.g. 4294967296 or \"4GiB\")"))
        }),
    }
}

/// Parses `"4096"`, `"64KiB"`, `"16G"`, `"1TB"` (binary multiples).
pub fn parse_size(text: &str) -> Option<u64> {
    let t = text.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let n: u64 = t[..digits].parse().ok()?;
    let shift = match t[digits..].trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return None,
    };
    n.checked_mul(1u64 << shift)
}

impl std::fmt::Display for HashOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "region {} bytes (sparse), persist {}, log {} lines, {} initial buckets, value log {} bytes \
             (bytes values only)",
            self.region_bytes,
            self.persist.name(),
            self.log_lines,
            self.initial_buckets,
            self.value_log_bytes
        )
    }
}

impl IndexFamily for HashFamily {
    type Options = HashOptions;

    fn name(&self) -> &'static str {
        "hash"
    }

    fn summary(&self) -> &'static str {
        "ElimDA-style persistent-memory hash index (u64 keys; u64 values or bytes values up to 256 B): DRAM \
         fingerprints, a collecting log, no key order"
    }

    fn check(
        &self,
        key: TypeKind,
        value: TypeKind,
        page_size: usize,
        options: &HashOptions,
    ) -> Result<()> {
        if key != TypeKind::U64 {
            return Err(Error::invalid(format!(
                "the hash index stores u64 keys and u64 or bytes values (up to 256 B), not {} keys and {} \
                 values",
                key.name(),
                value.name()
            )));
        }
        crate::storage::page::validate_page_size(page_size)?;
        options.validate()
    }

    fn capabilities(&self, _: &HashOptions) -> Capabilities {
        Capabilities {
            count: false,
            sample: false,
            weighted: false,
            merge: false,
            bulk_load: false,
            cheap_len: true,
            ordered: false,
            snapshots: false,
        }
    }

    fn create(
        &self,
        ctx: &IndexContext<'_>,
        options: &HashOptions,
    ) -> Result<Box<dyn OrderedIndex>> {
        Ok(Box::new(HashDbIndex::create(ctx, options)?))
    }

    fn open(&self, ctx: &IndexContext<'_>, options: &HashOptions) -> Result<Box<dyn OrderedIndex>> {
        Ok(Box::new(HashDbIndex::open(ctx, options)?))
    }
}
