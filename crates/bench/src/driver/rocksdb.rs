//! Driver for RocksDB (`rocksdb`), the log-structured merge tree engine, through the `rocksdb` crate (which
//! builds RocksDB from source; needs a C++ compiler and libclang).
//!
//! * Configured as RocksDB's tuning guide suggests for a point-and-range key-value workload on a small
//!   machine: leveled compaction with dynamic level sizes (`optimize_level_style_compaction` with a
//!   memtable budget of a quarter of the cache budget, at least 16 MiB), `increase_parallelism(2)`, LZ4
//!   compression, block-based tables with a 10 bits/key Bloom filter, format version 5, and an LRU block
//!   cache of the cache budget that also holds index and filter blocks.
//! * Keys are 8 big-endian bytes (the default bytewise comparator then orders them numerically).
//! * Durability: `None` → `manual_wal_flush` (WAL records stay in RocksDB's buffer until a flush, so a
//!   process crash may lose them); `Flush` → the default, the WAL record is written to the OS per write
//!   (`sync = false`); `Sync` → `WriteOptions::set_sync(true)`, an fsync of the WAL per write.
//! * `checkpoint`: a WAL flush (synced) and a memtable flush to an SST file.
//! * Compaction runs on background threads: its I/O shows in `/proc/self/io`. No per-engine I/O counters.

use super::{Driver, Engine, EngineOptions, Visit, key_from_be, visit_limited};
use crate::error::{BenchError, Result};
use rocksdb::{BlockBasedOptions, Cache, DB, DBCompressionType, Options, WriteBatch, WriteOptions};
use std::path::Path;
use strata::Durability;

const NAME: &str = "rocksdb";
const VERSION: &str = "rocksdb crate 0.25.0 (RocksDB 11.8.1)";

fn err(e: impl std::fmt::Display) -> BenchError {
    BenchError::peer(NAME, e)
}

/// The `rocksdb` engine.
#[derive(Debug, Clone, Copy, Default)]
pub struct RocksDb;

fn memtable_budget(cache_bytes: usize) -> usize {
    (cache_bytes / 4).max(16 << 20)
}

impl RocksDb {
    fn open_db(&self, dir: &Path, opts: &EngineOptions, create: bool) -> Result<Box<dyn Driver>> {
        let mut o = Options::default();
        o.create_if_missing(create);
        o.increase_parallelism(2);
        o.optimize_level_style_compaction(memtable_budget(opts.cache_bytes));
        o.set_level_compaction_dynamic_level_bytes(true);
        o.set_compression_type(DBCompressionType::Lz4);
        o.set_manual_wal_flush(opts.durability == Durability::None);
        let mut table = BlockBasedOptions::default();
        let cache = Cache::new_lru_cache(opts.cache_bytes);
        table.set_block_cache(&cache);
        table.set_bloom_filter(10.0, false);
        table.set_cache_index_and_filter_blocks(true);
        table.set_format_version(5);
        o.set_block_based_table_factory(&table);
        let db = DB::open(&o, dir).map_err(err)?;
        let mut write = WriteOptions::default();
        write.set_sync(opts.durability == Durability::Sync);
        Ok(Box::new(RocksDriver {
            db,
            write,
            _cache: cache,
        }))
    }
}

impl Engine for RocksDb {
    fn name(&self) -> &'static str {
        NAME
    }

    fn version(&self) -> String {
        VERSION.into()
    }

    fn settings(&self, opts: &EngineOptions) -> String {
        let wal = match opts.durability {
            Durability::None => "manual_wal_flush (WAL buffered in RocksDB until a flush)",
            Durability::Flush => "WAL written to the OS per write, sync = false",
            Durability::Sync => "WAL fsynced per write, sync = true",
        };
        format!(
            "LRU block cache {} bytes holding index and filter blocks; optimize_level_style_compaction({} bytes \
             of memtables); increase_parallelism(2); dynamic level bytes; LZ4; Bloom filter 10 bits/key; format \
             version 5; {wal}; keys as 8 big-endian bytes",
            opts.cache_bytes,
            memtable_budget(opts.cache_bytes)
        )
    }

    fn create(&self, dir: &Path, opts: &EngineOptions) -> Result<Box<dyn Driver>> {
        self.open_db(dir, opts, true)
    }

    fn open(&self, dir: &Path, opts: &EngineOptions) -> Result<Box<dyn Driver>> {
        self.open_db(dir, opts, false)
    }
}

/// An open RocksDB database.
pub struct RocksDriver {
    db: DB,
    write: WriteOptions,
    _cache: Cache,
}

impl Driver for RocksDriver {
    fn put(&self, key: u64, value: &[u8]) -> Result<()> {
        self.db
            .put_opt(key.to_be_bytes(), value, &self.write)
            .map_err(err)
    }

    fn put_batch(&self, records: &[(u64, &[u8])]) -> Result<()> {
        let mut batch = WriteBatch::default();
        for (k, v) in records {
            batch.put(k.to_be_bytes(), v);
        }
        self.db.write_opt(batch, &self.write).map_err(err)
    }

    fn get(&self, key: u64, value: &mut Vec<u8>) -> Result<bool> {
        match self.db.get_pinned(key.to_be_bytes()).map_err(err)? {
            Some(v) => {
                value.clear();
                value.extend_from_slice(&v);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn delete(&self, key: u64) -> Result<()> {
        self.db
            .delete_opt(key.to_be_bytes(), &self.write)
            .map_err(err)
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
        let mut it = self.db.raw_iterator();
        if reverse {
            it.seek_for_prev(hi.to_be_bytes());
        } else {
            it.seek(lo.to_be_bytes());
        }
        let mut seen = 0;
        while seen < limit && it.valid() {
            let (Some(k), Some(v)) = (it.key(), it.value()) else {
                break;
            };
            let k = key_from_be(NAME, k)?;
            if (!reverse && k > hi) || (reverse && k < lo) {
                break;
            }
            visit(k, v)?;
            seen += 1;
            if reverse {
                it.prev();
            } else {
                it.next();
            }
        }
        it.status().map_err(err)?;
        Ok(seen)
    }

    fn checkpoint(&self) -> Result<()> {
        self.db.flush_wal(true).map_err(err)?;
        self.db.flush().map_err(err)
    }

    fn close(self: Box<Self>) -> Result<()> {
        self.db.flush_wal(true).map_err(err)?;
        drop(self.db);
        Ok(())
    }
}
