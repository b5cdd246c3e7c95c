//! Driver for fjall (`fjall`), a pure-Rust log-structured merge tree (LSM) engine in the spirit of RocksDB.
//!
//! * One keyspace `strata_bench`, keys as 8 big-endian bytes, fjall's default keyspace options (leveled
//!   compaction, LZ4 blocks, Bloom filters) as its maintainers ship them.
//! * Cache: `Database::builder(..).cache_size(cache_bytes)` (block cache shared by all keyspaces); memtables
//!   and the journal are fjall's defaults on top of it.
//! * Durability: `None` → `manual_journal_persist(true)` (journal writes stay in fjall's buffer until a
//!   persist); `Flush` → fjall's default, the journal is written to the OS after every write
//!   (`PersistMode::Buffer`); `Sync` → additionally `persist(PersistMode::SyncData)` after every write.
//! * `checkpoint`: `persist(SyncAll)` and a memtable flush to a table file (`rotate_memtable_and_wait`), so
//!   a fill phase pays for putting its data into tables.
//! * Compaction runs on fjall's background threads: their I/O shows in `/proc/self/io`, not in per-call
//!   latencies. fjall keeps no I/O counters the lab can read.

use super::{Driver, Engine, EngineOptions, Visit, directed, key_from_be, visit_limited};
use crate::error::{BenchError, Result};
use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};
use std::path::Path;
use strata::Durability;

const NAME: &str = "fjall";
const VERSION: &str = "3.1.13";
const KEYSPACE: &str = "strata_bench";

fn err(e: impl std::fmt::Display) -> BenchError {
    BenchError::peer(NAME, e)
}

/// The `fjall` engine.
#[derive(Debug, Clone, Copy, Default)]
pub struct Fjall;

impl Fjall {
    fn open_db(&self, dir: &Path, opts: &EngineOptions, create: bool) -> Result<Box<dyn Driver>> {
        if !create && !dir.exists() {
            return Err(err(format!("no fjall database in {}", dir.display())));
        }
        let db = Database::builder(dir)
            .cache_size(opts.cache_bytes as u64)
            .manual_journal_persist(opts.durability == Durability::None)
            .open()
            .map_err(err)?;
        let keyspace = db
            .keyspace(KEYSPACE, KeyspaceCreateOptions::default)
            .map_err(err)?;
        Ok(Box::new(FjallDriver {
            db,
            keyspace,
            sync: opts.durability == Durability::Sync,
        }))
    }
}

impl Engine for Fjall {
    fn name(&self) -> &'static str {
        NAME
    }

    fn version(&self) -> String {
        VERSION.into()
    }

    fn settings(&self, opts: &EngineOptions) -> String {
        let journal = match opts.durability {
            Durability::None => {
                "manual_journal_persist (journal buffered in fjall until a persist)"
            }
            Durability::Flush => {
                "journal written to the OS after every write (PersistMode::Buffer)"
            }
            Durability::Sync => {
                "journal written and fdatasynced after every write (PersistMode::SyncData)"
            }
        };
        format!(
            "cache_size {} bytes; default keyspace options (leveled compaction, LZ4, Bloom filters); {journal}; \
             keys as 8 big-endian bytes",
            opts.cache_bytes
        )
    }

    fn create(&self, dir: &Path, opts: &EngineOptions) -> Result<Box<dyn Driver>> {
        self.open_db(dir, opts, true)
    }

    fn open(&self, dir: &Path, opts: &EngineOptions) -> Result<Box<dyn Driver>> {
        self.open_db(dir, opts, false)
    }
}

/// An open fjall database.
pub struct FjallDriver {
    db: Database,
    keyspace: Keyspace,
    sync: bool,
}

impl FjallDriver {
    fn after_write(&self) -> Result<()> {
        if self.sync {
            self.db.persist(PersistMode::SyncData).map_err(err)?;
        }
        Ok(())
    }
}

impl Driver for FjallDriver {
    fn put(&self, key: u64, value: &[u8]) -> Result<()> {
        self.keyspace
            .insert(key.to_be_bytes(), value)
            .map_err(err)?;
        self.after_write()
    }

    fn put_batch(&self, records: &[(u64, &[u8])]) -> Result<()> {
        let mut batch = self.db.batch();
        for (k, v) in records {
            batch.insert(&self.keyspace, k.to_be_bytes(), *v);
        }
        batch.commit().map_err(err)?;
        self.after_write()
    }

    fn get(&self, key: u64, value: &mut Vec<u8>) -> Result<bool> {
        match self.keyspace.get(key.to_be_bytes()).map_err(err)? {
            Some(v) => {
                value.clear();
                value.extend_from_slice(&v);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn delete(&self, key: u64) -> Result<()> {
        self.keyspace.remove(key.to_be_bytes()).map_err(err)?;
        self.after_write()
    }

    fn scan(
        &self,
        lo: u64,
        hi: u64,
        limit: u64,
        reverse: bool,
        visit: &mut Visit<'_>,
    ) -> Result<u64> {
        if lo > hi || limit == 0 {
            return Ok(0);
        }
        let range = self.keyspace.range(lo.to_be_bytes()..=hi.to_be_bytes());
        visit_limited(directed(range, reverse), limit, |guard| {
            let (k, v) = guard.into_inner().map_err(err)?;
            visit(key_from_be(NAME, &k)?, &v)
        })
    }

    fn checkpoint(&self) -> Result<()> {
        self.db.persist(PersistMode::SyncAll).map_err(err)?;
        self.keyspace.rotate_memtable_and_wait().map_err(err)
    }

    fn close(self: Box<Self>) -> Result<()> {
        self.db.persist(PersistMode::SyncAll).map_err(err)?;
        Ok(())
    }
}
