//! Driver for fjall (`fjall`), a pure-Rust log-structured merge tree (LSM) engine in the spirit of RocksDB.
//!
//! * One keyspace `strata_bench`, keys as 8 big-endian bytes, fjall's default keyspace options as its
//!   maintainers ship them (leveled compaction, 64 MiB memtables, 4 KiB data blocks, LZ4 from level 2 on,
//!   Bloom filters) but one: index and filter blocks are partitioned on every level (the default does it
//!   from level 3 on), as for RocksDB — with a cache much smaller than the data, a whole table's filter
//!   (megabytes) would otherwise be read again by every get that misses it in the cache.
//! * Cache: `Database::builder(..).cache_size(cache_bytes)`, the block cache shared by all keyspaces.
//!   Memtables (64 MiB each) and the journal come on top of it, as for RocksDB's write buffers.
//! * Durability: the database and the keyspace are opened with `manual_journal_persist(true)` (otherwise
//!   every write flushes the journal to the OS, whatever the bench asks for), and the driver persists the
//!   journal itself after every write: `None` → nothing (journal records stay in fjall's write buffer until
//!   it fills or a later persist); `Flush` → `persist(PersistMode::Buffer)` (journal written to the OS);
//!   `Sync` → `persist(PersistMode::SyncData)` (written and fdatasynced).
//! * `checkpoint`: `persist(SyncAll)` and a memtable flush to a table file (`rotate_memtable_and_wait`), so
//!   a fill phase pays for putting its data into tables. `close` persists with `SyncAll` and drops the
//!   database, which stops fjall's worker threads.
//! * Flushes and compactions run on fjall's worker threads: their I/O shows in `/proc/self/io`, not in
//!   per-call latencies. fjall keeps no I/O counters the lab can read.

use super::{Driver, Engine, EngineOptions, Visit, directed, key_from_be, visit_limited};
use crate::error::{BenchError, Result};
use fjall::config::PartitioningPolicy;
use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};
use std::path::Path;
use strata::Durability;

const NAME: &str = "fjall";
const VERSION: &str = "3.1.13";
const KEYSPACE: &str = "strata_bench";
/// File fjall writes when it creates a database.
const MARKER: &str = "version";

fn err(e: impl std::fmt::Display) -> BenchError {
    BenchError::peer(NAME, e)
}

/// The `fjall` engine.
#[derive(Debug, Clone, Copy, Default)]
pub struct Fjall;

/// How the journal is persisted after every write (`None`: not at all).
fn persist_mode(d: Durability) -> Option<PersistMode> {
    match d {
        Durability::None => None,
        Durability::Flush => Some(PersistMode::Buffer),
        Durability::Sync => Some(PersistMode::SyncData),
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
                "manual_journal_persist, no persist per write (journal buffered in fjall)"
            }
            Durability::Flush => {
                "manual_journal_persist + persist(Buffer) per write (journal written to the OS)"
            }
            Durability::Sync => {
                "manual_journal_persist + persist(SyncData) per write (journal fdatasynced)"
            }
        };
        format!(
            "cache_size {} bytes; default keyspace options (leveled compaction, 64 MiB memtables, LZ4 from L2, \
             Bloom filters) with index and filter blocks partitioned on every level; {journal}; keys as 8 \
             big-endian bytes",
            opts.cache_bytes
        )
    }

    fn open_dir(&self, dir: &Path, opts: &EngineOptions, create: bool) -> Result<Box<dyn Driver>> {
        if !create && !dir.join(MARKER).exists() {
            return Err(err(format!("no fjall database in {}", dir.display())));
        }
        let db = Database::builder(dir)
            .cache_size(opts.cache_bytes as u64)
            .manual_journal_persist(true)
            .open()
            .map_err(err)?;
        // The keyspace's options are stored when it is created; a reopen uses the stored ones.
        let keyspace = db
            .keyspace(KEYSPACE, || {
                KeyspaceCreateOptions::default()
                    .manual_journal_persist(true)
                    .index_block_partitioning_policy(PartitioningPolicy::all(true))
                    .filter_block_partitioning_policy(PartitioningPolicy::all(true))
            })
            .map_err(err)?;
        Ok(Box::new(FjallDriver {
            db,
            keyspace,
            persist: persist_mode(opts.durability),
        }))
    }
}

/// An open fjall database.
pub struct FjallDriver {
    db: Database,
    keyspace: Keyspace,
    persist: Option<PersistMode>,
}

impl FjallDriver {
    /// Persists the journal as the durability asks, after a write.
    fn after_write(&self) -> Result<()> {
        match self.persist {
            Some(mode) => self.db.persist(mode).map_err(err),
            None => Ok(()),
        }
    }
}

impl Driver for FjallDriver {
    fn engine(&self) -> &'static str {
        NAME
    }

    fn put(&self, key: u64, value: &[u8]) -> Result<()> {
        self.keyspace
            .insert(key.to_be_bytes(), value)
            .map_err(err)?;
        self.after_write()
    }

    fn put_batch(&self, records: &[(u64, &[u8])]) -> Result<()> {
        let mut batch = self.db.batch().durability(self.persist);
        for (k, v) in records {
            batch.insert(&self.keyspace, k.to_be_bytes(), *v);
        }
        batch.commit().map_err(err)
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

    fn scan_range(
        &self,
        lo: u64,
        hi: u64,
        limit: u64,
        reverse: bool,
        visit: &mut Visit<'_>,
    ) -> Result<u64> {
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
        self.db.persist(PersistMode::SyncAll).map_err(err)
    }
}
