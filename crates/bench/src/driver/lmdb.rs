//! Driver for LMDB (`lmdb`) through the `heed` crate (LMDB 0.9.70 from the `mdb.master` branch, built by
//! `lmdb-master-sys`): a copy-on-write B+-tree in a memory-mapped file, one writer at a time, readers on
//! MVCC snapshots without locks.
//!
//! * One named database `strata_bench`, keys as 8 big-endian bytes (LMDB compares bytes lexicographically).
//! * Cache: LMDB has none of its own; reads go through the memory map and the OS page cache, so the cache
//!   budget does not bound it (the report says so: compare its memory use with care). The map size is
//!   64 GiB of address space (sparse: the file grows only as pages are used).
//! * Durability: `None` and `Flush` → `NO_SYNC | NO_META_SYNC`: a commit writes its pages to the file with
//!   `write(2)` (no `WRITE_MAP`), so it survives a process kill but not a power loss; LMDB has no weaker
//!   level, so at `none` LMDB pays a `Flush`'s system calls. `Sync` → LMDB's default, an fdatasync of the data
//!   file per commit.
//! * Every `put`/`delete` is one write transaction, `put_batch` one for the batch; concurrent writers queue
//!   on LMDB's writer lock. `checkpoint` is `force_sync` (fsync of the data file); `close` syncs and waits
//!   for the environment to close.
//! * Read transactions are opened per operation without thread-local storage (`read_txn_without_tls`), so
//!   any thread may read. LMDB keeps no I/O counters the lab can read.

use super::{Driver, Engine, EngineOptions, Visit, key_from_be, visit_limited};
use crate::error::{BenchError, Result};
use heed::types::Bytes;
use heed::{CommitOrAbort, Database, Env, EnvFlags, EnvOpenOptions, WithoutTls};
use std::ops::Bound;
use std::path::Path;
use strata::Durability;

const NAME: &str = "lmdb";
const VERSION: &str = "0.23.1";
const DATABASE: &str = "strata_bench";
/// Address space reserved for the map; the file grows only as pages are used.
const MAP_SIZE: usize = 64 << 30;
/// Concurrent read transactions LMDB allows.
const MAX_READERS: u32 = 512;

fn err(e: impl std::fmt::Display) -> BenchError {
    BenchError::peer(NAME, e)
}

/// The `lmdb` engine.
#[derive(Debug, Clone, Copy, Default)]
pub struct Lmdb;

impl Engine for Lmdb {
    fn name(&self) -> &'static str {
        NAME
    }

    fn version(&self) -> String {
        VERSION.into()
    }

    fn settings(&self, opts: &EngineOptions) -> String {
        let sync = match opts.durability {
            Durability::Sync => "default flags (an fdatasync per commit)",
            _ => {
                "NO_SYNC | NO_META_SYNC (commits written to the OS, not fsynced; LMDB has no weaker level)"
            }
        };
        format!(
            "LMDB 0.9.70 via heed; no cache of its own: memory map + OS page cache (the {}-byte budget does \
             not apply); map size 64 GiB; one write transaction per put; {sync}; keys as 8 big-endian bytes",
            opts.cache_bytes
        )
    }

    fn open_dir(&self, dir: &Path, opts: &EngineOptions, create: bool) -> Result<Box<dyn Driver>> {
        if create {
            std::fs::create_dir_all(dir).map_err(|e| BenchError::io(dir, e))?;
        } else if !dir.join("data.mdb").exists() {
            return Err(err(format!("no LMDB environment in {}", dir.display())));
        }
        let mut options = EnvOpenOptions::new().read_txn_without_tls();
        options
            .map_size(MAP_SIZE)
            .max_dbs(1)
            .max_readers(MAX_READERS);
        if opts.durability != Durability::Sync {
            // SAFETY: NO_SYNC and NO_META_SYNC only relax when commits are flushed to stable storage; a
            // system crash may lose recent commits (what the bench's `None`/`Flush` levels allow), and the
            // lab never relies on LMDB's durability beyond that.
            unsafe {
                options.flags(EnvFlags::NO_SYNC | EnvFlags::NO_META_SYNC);
            }
        }
        // SAFETY: each database directory is opened by one environment of this process at a time (the lab
        // gives every engine its own directory and closes a handle before reopening it), and no other code
        // modifies the memory-mapped file.
        let env = unsafe { options.open(dir) }.map_err(err)?;
        let wtxn = env.write_txn().map_err(err)?;
        let db: Database<Bytes, Bytes> = env
            .create_databases_and_commit(wtxn, |opener, wtxn| {
                opener
                    .create_database::<Bytes, Bytes>(wtxn, Some(DATABASE))
                    .map(CommitOrAbort::<_, ()>::Commit)
            })
            .map_err(|e: heed::Error| err(e))?
            .unwrap_commit();
        Ok(Box::new(LmdbDriver { env, db }))
    }
}

/// An open LMDB environment.
pub struct LmdbDriver {
    env: Env<WithoutTls>,
    db: Database<'static, Bytes, Bytes>,
}

impl LmdbDriver {
    fn write(&self, f: impl FnOnce(&mut heed::RwTxn<'_>) -> heed::Result<()>) -> Result<()> {
        let mut txn = self.env.write_txn().map_err(err)?;
        f(&mut txn).map_err(err)?;
        txn.commit().map_err(err)
    }
}

impl Driver for LmdbDriver {
    fn engine(&self) -> &'static str {
        NAME
    }

    fn put(&self, key: u64, value: &[u8]) -> Result<()> {
        self.write(|t| self.db.put(t, &key.to_be_bytes(), value))
    }

    fn put_batch(&self, records: &[(u64, &[u8])]) -> Result<()> {
        self.write(|t| {
            for (k, v) in records {
                self.db.put(t, &k.to_be_bytes(), v)?;
            }
            Ok(())
        })
    }

    fn get(&self, key: u64, value: &mut Vec<u8>) -> Result<bool> {
        let txn = self.env.read_txn().map_err(err)?;
        match self.db.get(&txn, &key.to_be_bytes()).map_err(err)? {
            Some(v) => {
                value.clear();
                value.extend_from_slice(v);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn delete(&self, key: u64) -> Result<()> {
        self.write(|t| self.db.delete(t, &key.to_be_bytes()).map(drop))
    }

    fn scan_range(
        &self,
        lo: u64,
        hi: u64,
        limit: u64,
        reverse: bool,
        visit: &mut Visit<'_>,
    ) -> Result<u64> {
        let txn = self.env.read_txn().map_err(err)?;
        let (lo, hi) = (lo.to_be_bytes(), hi.to_be_bytes());
        let bounds = (Bound::Included(&lo[..]), Bound::Included(&hi[..]));
        let mut each = |item: heed::Result<(&[u8], &[u8])>| -> Result<()> {
            let (k, v) = item.map_err(err)?;
            visit(key_from_be(NAME, k)?, v)
        };
        // heed's ranges iterate one way only: the reverse one is a separate iterator.
        if reverse {
            let range = self.db.rev_range(&txn, &bounds).map_err(err)?;
            visit_limited(range, limit, &mut each)
        } else {
            let range = self.db.range(&txn, &bounds).map_err(err)?;
            visit_limited(range, limit, &mut each)
        }
    }

    fn checkpoint(&self) -> Result<()> {
        self.env.force_sync().map_err(err)
    }

    fn close(self: Box<Self>) -> Result<()> {
        self.env.force_sync().map_err(err)?;
        let closing = self.env.prepare_for_closing();
        closing.wait();
        Ok(())
    }
}
