//! What a database is created with ([`Config`]: recorded in its manifest) and what one handle is opened with
//! ([`Options`]: not recorded).

use crate::index::dynamized::RuntimeOptions;
use crate::index::family::IndexConfig;
use crate::storage::{StdVfs, Vfs};
use crate::types::{Durability, TypeKind};
use std::sync::Arc;

/// Settings fixed when a database is created (recorded in its manifest).
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The index family and its options (see `index::family`; default: a B+-tree).
    pub index: IndexConfig,
    pub key: TypeKind,
    pub value: TypeKind,
    /// Page size in bytes: a power of two from 4096 to 4194304 (4 MiB); the B+-tree index takes pages up to
    /// 65536 (64 KiB).
    pub page_size: usize,
    /// Default durability of writes (overridable per handle and per batch).
    pub durability: Durability,
    /// Read and write pages with O_DIRECT, bypassing the OS page cache.
    pub direct_io: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            index: IndexConfig::default(),
            key: TypeKind::U64,
            value: TypeKind::U64,
            page_size: 4096,
            durability: Durability::Flush,
            direct_io: false,
        }
    }
}

impl Config {
    /// The default configuration with `index` as its index family and options.
    pub fn with_index(index: IndexConfig) -> Config {
        Config {
            index,
            ..Config::default()
        }
    }
}

/// Settings of one open handle (not recorded on disk).
#[derive(Debug, Clone)]
pub struct Options {
    /// File system backend.
    pub vfs: Arc<dyn Vfs>,
    /// Buffer pool budget in bytes.
    pub cache_bytes: usize,
    /// Overrides the manifest's default durability for this handle.
    pub durability: Option<Durability>,
    /// Checkpoint when the WAL grows past this many bytes.
    pub checkpoint_wal_bytes: u64,
    /// Background work and throttling of a dynamized index.
    pub dynamized: RuntimeOptions,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            vfs: Arc::new(StdVfs),
            cache_bytes: 64 << 20,
            durability: None,
            checkpoint_wal_bytes: 64 << 20,
            dynamized: RuntimeOptions::default(),
        }
    }
}
