//! Driver for redb (`redb`), a pure-Rust copy-on-write B-tree stored in one file (in the spirit of LMDB),
//! with redb's default settings apart from the cache size.
//!
//! * Table `strata_bench`: `u64` keys (redb's `u64` key type orders them numerically; it stores them as 8
//!   little-endian bytes, which is redb's own encoding of the same key) → byte-string values (8 bytes for
//!   [`ValueFormat::U64`](super::ValueFormat), the run's value size otherwise).
//! * Cache: `Builder::set_cache_size(cache_bytes)`, redb's page cache for reads and dirty pages.
//! * Every `put`/`delete` is one write transaction; `put_batch` one transaction for the batch. redb has one
//!   writer at a time: concurrent writers queue on `begin_write`.
//! * Durability: `None` → `Durability::None` (the commit stays in redb's memory until a later durable
//!   commit; a crash of the process rolls back to the last durable one). `Flush` and `Sync` →
//!   `Durability::Immediate` (an fsync per commit): redb has no level in between — a `None` commit does not
//!   reach the OS, so the only level that survives a killed process is the fsynced one, and `Flush` costs redb
//!   an fsync per write. Results at `flush` are therefore redb at `sync`.
//! * Caveat of `None`: pages of the last durable state that `None` commits replace are only reused after the
//!   next durable commit (pages allocated since can be reused at once), so a long run of `None` writes over a
//!   large database grows the file until a `checkpoint`.
//! * `checkpoint`: an empty write transaction committed with `Durability::Immediate` (which also makes every
//!   earlier `None` commit durable). `close` checkpoints, then `Database::close` (errors reported).
//! * Reads use a fresh read transaction per operation (an MVCC snapshot, never blocked by the writer); redb
//!   keeps no I/O counters.

use super::{Driver, Engine, EngineOptions, Visit, directed, visit_limited};
use crate::error::{BenchError, Result};
use redb::{Database, ReadableDatabase, TableDefinition};
use std::path::Path;
use strata::Durability;

const NAME: &str = "redb";
const VERSION: &str = "4.6.0";
const TABLE: TableDefinition<u64, &[u8]> = TableDefinition::new("strata_bench");
const FILE: &str = "data.redb";

fn err(e: impl std::fmt::Display) -> BenchError {
    BenchError::peer(NAME, e)
}

/// The `redb` engine.
#[derive(Debug, Clone, Copy, Default)]
pub struct Redb;

fn durability(d: Durability) -> redb::Durability {
    match d {
        Durability::None => redb::Durability::None,
        Durability::Flush | Durability::Sync => redb::Durability::Immediate,
    }
}

impl Engine for Redb {
    fn name(&self) -> &'static str {
        NAME
    }

    fn version(&self) -> String {
        VERSION.into()
    }

    fn settings(&self, opts: &EngineOptions) -> String {
        format!(
            "redb defaults; cache_size {} bytes; one write transaction per put, Durability::{:?} for strata \
             `{}` ({}); u64 keys, byte-string values",
            opts.cache_bytes,
            durability(opts.durability),
            opts.durability.name(),
            match opts.durability {
                Durability::None => "commits stay in redb's memory until a durable commit",
                Durability::Flush => {
                    "an fsync per commit: redb has no level that reaches the OS without one"
                }
                Durability::Sync => "an fsync per commit",
            }
        )
    }

    fn open_dir(&self, dir: &Path, opts: &EngineOptions, create: bool) -> Result<Box<dyn Driver>> {
        let path = dir.join(FILE);
        if create {
            std::fs::create_dir_all(dir).map_err(|e| BenchError::io(dir, e))?;
        } else if !path.exists() {
            return Err(err(format!("no redb database in {}", dir.display())));
        }
        let mut builder = Database::builder();
        builder.set_cache_size(opts.cache_bytes);
        let db = if create {
            builder.create(&path)
        } else {
            builder.open(&path)
        }
        .map_err(err)?;
        let driver = RedbDriver {
            db,
            durability: durability(opts.durability),
        };
        if create {
            // Create the table so that readers find it.
            driver.write(|_| Ok(()))?;
        }
        Ok(Box::new(driver))
    }
}

/// An open redb database.
pub struct RedbDriver {
    db: Database,
    durability: redb::Durability,
}

impl RedbDriver {
    /// Runs `f` on the table inside one write transaction and commits it.
    fn write(&self, f: impl FnOnce(&mut redb::Table<u64, &[u8]>) -> Result<()>) -> Result<()> {
        self.write_with(self.durability, f)
    }

    fn write_with(
        &self,
        durability: redb::Durability,
        f: impl FnOnce(&mut redb::Table<u64, &[u8]>) -> Result<()>,
    ) -> Result<()> {
        let mut txn = self.db.begin_write().map_err(err)?;
        txn.set_durability(durability).map_err(err)?;
        {
            let mut table = txn.open_table(TABLE).map_err(err)?;
            f(&mut table)?;
        }
        txn.commit().map_err(err)
    }
}

impl Driver for RedbDriver {
    fn engine(&self) -> &'static str {
        NAME
    }

    fn put(&self, key: u64, value: &[u8]) -> Result<()> {
        self.write(|t| t.insert(key, value).map(drop).map_err(err))
    }

    fn put_batch(&self, records: &[(u64, &[u8])]) -> Result<()> {
        self.write(|t| {
            for (k, v) in records {
                t.insert(*k, *v).map_err(err)?;
            }
            Ok(())
        })
    }

    fn get(&self, key: u64, value: &mut Vec<u8>) -> Result<bool> {
        let txn = self.db.begin_read().map_err(err)?;
        let table = txn.open_table(TABLE).map_err(err)?;
        match table.get(key).map_err(err)? {
            Some(v) => {
                value.clear();
                value.extend_from_slice(v.value());
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn delete(&self, key: u64) -> Result<()> {
        self.write(|t| t.remove(key).map(drop).map_err(err))
    }

    fn scan_range(
        &self,
        lo: u64,
        hi: u64,
        limit: u64,
        reverse: bool,
        visit: &mut Visit<'_>,
    ) -> Result<u64> {
        let txn = self.db.begin_read().map_err(err)?;
        let table = txn.open_table(TABLE).map_err(err)?;
        let range = table.range(lo..=hi).map_err(err)?;
        visit_limited(directed(range, reverse), limit, |item| {
            let (k, v) = item.map_err(err)?;
            visit(k.value(), v.value())
        })
    }

    fn checkpoint(&self) -> Result<()> {
        self.write_with(redb::Durability::Immediate, |_| Ok(()))
    }

    fn close(self: Box<Self>) -> Result<()> {
        self.checkpoint()?;
        self.db.close().map_err(err)
    }
}
