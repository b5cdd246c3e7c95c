//! Resize and compaction: the whole table is rebuilt copy-on-write in fresh PM space and switched in by
//! one atomic store of the superblock's root word.
//!
//! The rebuild gathers every key's visible version (live P-bucket slots and staged puts; tombstones and
//! superseded versions are dropped), picks the new size, writes the new table (meta lines through the
//! cache + flush, chunks as full-XPLine non-temporal writes), fences, then stores and persists the root.
//! A crash before the root store recovers the old table (and the log, which still holds every staged
//! record); after it, the new table, which holds every staged record too, so replaying the log from the
//! old durable tail only re-applies versions that are already visible.

use super::bucket::Bucket;
use super::format::le;
use super::index::HashIndex;
use super::layout::{
    CHUNK_SLOTS, MAX_LOG2_BUCKETS, META_BYTES, SB_ROOT, SLOTS, Table, fingerprint, hash,
    with_chunk_bits,
};
use crate::error::{Error, Result};
use crate::storage::pm::{Pm, XPLINE};

/// Most records a rebuilt bucket may hold: a D-bucket's worth of slots stays free.
const REBUILD_MAX_PER_BUCKET: usize = SLOTS - CHUNK_SLOTS;

impl<P: Pm> HashIndex<P> {
    /// Rebuilds the table: doubling it when `grow`, or when compaction would leave it more than half full
    /// (or leave a bucket without a free chunk); otherwise at the same size.
    pub(super) fn rebuild(&mut self, grow: bool) -> Result<()> {
        let mut records = self.gather()?;
        if records.len() as u64 != self.len {
            return Err(Error::Poisoned(format!(
                "rebuild found {} visible records, expected {}",
                records.len(),
                self.len
            )));
        }
        let mut log2 = self.table.log2;
        if grow || self.len * 2 > self.capacity() {
            log2 += 1;
        }
        // (bucket, key, value), sorted by bucket; double until every bucket keeps a free chunk.
        loop {
            if log2 > MAX_LOG2_BUCKETS {
                return Err(Error::ResourceExhausted(format!(
                    "hash table would need more than 2^{MAX_LOG2_BUCKETS} buckets"
                )));
            }
            let mask = (1u64 << log2) - 1;
            for r in &mut records {
                r.0 = hash(r.1) & mask;
            }
            records.sort_unstable_by_key(|r| r.0);
            let fits = records
                .chunk_by(|a, b| a.0 == b.0)
                .all(|g| g.len() <= REBUILD_MAX_PER_BUCKET);
            if fits {
                break;
            }
            log2 += 1;
        }
        let table = self.place(log2)?;
        let buckets = self.write_table(table, &records)?;
        self.pm.store_u64_atomic(SB_ROOT, table.off)?;
        self.pm.persist(SB_ROOT, 8)?;
        self.stats.rebuilds += 1;
        if log2 > self.table.log2 {
            self.stats.grows += 1;
        }
        self.table = table;
        self.buckets = buckets;
        self.staged.clear();
        Ok(())
    }

    /// Every visible record as (0, key, value).
    fn gather(&self) -> Result<Vec<(u64, u64, u64)>> {
        let mut out = Vec::with_capacity(self.len as usize);
        let mut chunk = [0u8; XPLINE as usize];
        for (b, bucket) in self.buckets.iter().enumerate() {
            for i in 0..bucket.dlen as usize {
                if let Some(v) = bucket.staged_value(i) {
                    out.push((0, bucket.dkeys[i], v));
                }
            }
            for c in 0..(bucket.fill as usize).div_ceil(CHUNK_SLOTS) {
                let first = c * CHUNK_SLOTS;
                if (first..first + CHUNK_SLOTS).all(|s| !bucket.is_live(s)) {
                    continue;
                }
                let at = self.table.bucket_off(b as u64) + c as u64 * XPLINE;
                self.pm.read(at, &mut chunk)?;
                for (i, slot) in chunk.chunks_exact(16).enumerate() {
                    if bucket.is_live(first + i) {
                        let (k, v) = slot.split_at(8);
                        out.push((0, le(k), le(v)));
                    }
                }
            }
        }
        Ok(out)
    }

    /// Where a table of 2^log2 buckets goes: at the heap start if it fits below the current table, else
    /// right after it.
    fn place(&self, log2: u64) -> Result<Table> {
        let bytes = Table::bytes(log2);
        let heap = self.geo.heap_start();
        let off = if heap + bytes <= self.table.off {
            heap
        } else {
            self.table.end()
        };
        if off + bytes > self.pm.len() {
            return Err(Error::ResourceExhausted(format!(
                "PM region of {} bytes has no room for a table of 2^{log2} buckets ({bytes} bytes at {off})",
                self.pm.len()
            )));
        }
        Ok(Table { off, log2 })
    }

    /// Writes `records` (sorted by bucket) as table `t` and fences; returns its DRAM buckets.
    fn write_table(&self, t: Table, records: &[(u64, u64, u64)]) -> Result<Vec<Bucket>> {
        let mut buckets = vec![Bucket::default(); t.buckets() as usize];
        let mut head = vec![0u8; Table::meta_span(t.log2) as usize];
        for group in records.chunk_by(|a, b| a.0 == b.0) {
            let b = group[0].0;
            let bucket = &mut buckets[b as usize];
            for (c, part) in group.chunks(CHUNK_SLOTS).enumerate() {
                let mut img = [0u8; XPLINE as usize];
                for (i, &(_, k, v)) in part.iter().enumerate() {
                    img[i * 16..i * 16 + 8].copy_from_slice(&k.to_le_bytes());
                    img[i * 16 + 8..i * 16 + 16].copy_from_slice(&v.to_le_bytes());
                    let s = c * CHUNK_SLOTS + i;
                    bucket.fps[s] = fingerprint(hash(k));
                    bucket.set_live(s, true);
                }
                self.pm
                    .write_nt(t.bucket_off(b) + c as u64 * XPLINE, &img)?;
                let valid = ((1u32 << part.len()) - 1) as u16;
                let word = with_chunk_bits(&bucket.meta, c, valid, 0);
                bucket.meta[c / 2] = word;
            }
            bucket.fill = group.len() as u16;
            let at = (t.meta_off(b) - t.off) as usize;
            for (w, word) in bucket.meta.iter().enumerate() {
                head[at + w * 8..at + w * 8 + 8].copy_from_slice(&word.to_le_bytes());
            }
        }
        self.pm.write(t.off, &head)?;
        t.write_header(&self.pm, self.geo.nonce)?;
        self.pm.flush(t.off, XPLINE + t.buckets() * META_BYTES)?;
        self.pm.fence();
        Ok(buckets)
    }
}
