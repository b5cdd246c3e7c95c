//! Driver for RocksDB (`rocksdb`), the log-structured merge tree engine, through the `rocksdb` crate (which
//! builds RocksDB 11.8.1 from source; needs a C++ compiler and libclang).
//!
//! * Configured as RocksDB's "Setup Options and Basic Tuning" guide suggests for a point-and-range key-value
//!   workload: leveled compaction with dynamic level sizes, `increase_parallelism(2)` (the development
//!   machines have 2 cores), `bytes_per_sync` 1 MiB, LZ4 compression on every level, block-based tables with
//!   4 KiB blocks (the default, like fjall's and Strata's pages), a 10 bits/key Bloom filter, index and filter
//!   blocks in the block cache with level 0's pinned, the latest table format (RocksDB's default). Indexes and
//!   filters are partitioned (two-level index search, partitioned filters of 4 KiB metadata blocks, the top
//!   levels pinned), as RocksDB's "Partitioned Index/Filters" guide advises when the cache is small next to
//!   the data: a get then reads one 4 KiB filter partition and one index partition, not a whole file's
//!   filter (megabytes per 64 MiB table) every time it falls out of the cache. Memtables
//!   are RocksDB's defaults: 64 MiB write buffers, at most 2 (fjall's memtables are 64 MiB too).
//! * Cache: an LRU block cache of `cache_bytes` (`BlockBasedOptions::set_block_cache`); memtables come on top
//!   of it, as for fjall.
//! * Keys are 8 big-endian bytes (the default bytewise comparator then orders them numerically).
//! * Durability, always with the WAL on: `None` → `manual_wal_flush` (WAL records stay in RocksDB's WAL
//!   buffer until it fills or a WAL flush, so a killed process may lose them — "in memory until the next
//!   flush"), `sync = false`; `Flush` → RocksDB's default, the WAL record is written to the OS with `write(2)`
//!   per write (`sync = false`); `Sync` → `WriteOptions::set_sync(true)`, the WAL is written and fsynced per
//!   write.
//! * `checkpoint`: a synced WAL flush and a memtable flush to an SST file (`DB::flush`, which waits).
//!   `close` flushes and syncs the WAL, then drops the handle (which waits for background work).
//! * Flushes and compactions run on background threads: their I/O shows in `/proc/self/io`, not in per-call
//!   latencies. No per-engine I/O counters.
//! * Scans use an iterator with `iterate_lower_bound`/`iterate_upper_bound` set to the range, so RocksDB
//!   stops at the bound instead of stepping past it.

use super::{Driver, Engine, EngineOptions, Visit, key_from_be};
use crate::error::{BenchError, Result};
use rocksdb::{
    BlockBasedIndexType, BlockBasedOptions, Cache, DB, DBCompactionStyle, DBCompressionType,
    Options, ReadOptions, WriteBatch, WriteOptions,
};
use std::path::Path;
use strata::Durability;

const NAME: &str = "rocksdb";
const VERSION: &str = "0.25.0";

fn err(e: impl std::fmt::Display) -> BenchError {
    BenchError::peer(NAME, e)
}

/// The `rocksdb` engine.
#[derive(Debug, Clone, Copy, Default)]
pub struct RocksDb;

impl Engine for RocksDb {
    fn name(&self) -> &'static str {
        NAME
    }

    fn version(&self) -> String {
        VERSION.into()
    }

    fn settings(&self, opts: &EngineOptions) -> String {
        let wal = match opts.durability {
            Durability::None => {
                "WAL with manual_wal_flush (buffered in RocksDB until a flush), sync = false"
            }
            Durability::Flush => "WAL written to the OS per write, sync = false",
            Durability::Sync => "WAL fsynced per write, sync = true",
        };
        format!(
            "RocksDB 11.8.1; LRU block cache {} bytes holding index and filter blocks (L0 pinned), partitioned \
             (two-level index, partitioned filters, 4 KiB metadata blocks, top level pinned); leveled \
             compaction, dynamic level bytes; increase_parallelism(2); bytes_per_sync 1 MiB; 64 MiB memtables \
             (max 2); LZ4; 4 KiB blocks; Bloom filter 10 bits/key; {wal}; keys as 8 big-endian bytes",
            opts.cache_bytes
        )
    }

    fn open_dir(&self, dir: &Path, opts: &EngineOptions, create: bool) -> Result<Box<dyn Driver>> {
        let mut o = Options::default();
        o.create_if_missing(create);
        o.increase_parallelism(2);
        o.set_compaction_style(DBCompactionStyle::Level);
        o.set_level_compaction_dynamic_level_bytes(true);
        o.set_bytes_per_sync(1 << 20);
        o.set_compression_type(DBCompressionType::Lz4);
        o.set_manual_wal_flush(opts.durability == Durability::None);
        let mut table = BlockBasedOptions::default();
        let cache = Cache::new_lru_cache(opts.cache_bytes);
        table.set_block_cache(&cache);
        table.set_bloom_filter(10.0, false);
        table.set_cache_index_and_filter_blocks(true);
        table.set_pin_l0_filter_and_index_blocks_in_cache(true);
        table.set_index_type(BlockBasedIndexType::TwoLevelIndexSearch);
        table.set_partition_filters(true);
        table.set_metadata_block_size(4096);
        table.set_pin_top_level_index_and_filter(true);
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

/// An open RocksDB database.
pub struct RocksDriver {
    db: DB,
    write: WriteOptions,
    /// The block cache (the table options keep it alive too; held here to make the ownership plain).
    _cache: Cache,
}

impl Driver for RocksDriver {
    fn engine(&self) -> &'static str {
        NAME
    }

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

    fn scan_range(
        &self,
        lo: u64,
        hi: u64,
        limit: u64,
        reverse: bool,
        visit: &mut Visit<'_>,
    ) -> Result<u64> {
        let mut read = ReadOptions::default();
        read.set_iterate_lower_bound(lo.to_be_bytes());
        if let Some(end) = hi.checked_add(1) {
            // The upper bound is exclusive; a range up to u64::MAX needs none.
            read.set_iterate_upper_bound(end.to_be_bytes());
        }
        let mut it = self.db.raw_iterator_opt(read);
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
            if !(lo..=hi).contains(&k) {
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
