//! Compaction of one bucket in place, through a redo area, and the gathering of a bucket's live records
//! (shared with doubling).
//!
//! A bucket whose chain fills up with superseded versions and tombstones is rewritten with its live
//! records only (chain order kept, tombstones dropped: nothing older is left for them to hide), in the
//! same home chunks and as few of its pool chunks as needed. Overwriting chunks in place is not atomic, so
//! the new chunk images (and zero images for the chunks the chain no longer uses) are first written to the
//! redo area of the writer's log and committed there by one 8 B word; then they are copied to their
//! places, and the redo word is cleared. Recovery finishes a committed redo before anything else; copying
//! the same images twice is harmless.
//!
//! Cost: reads the chain's chunks that hold live records, writes the new chain twice (redo + place) as
//! whole XPLines. A bucket is compacted when a quarter of its slots are dead, so this is amortised over at
//! least a quarter of a chain of writes.

use super::bucket::{Bucket, Shape, Writer};
use super::generation::{Generation, commit_word};
use super::index::HashIndex;
use super::layout::{CHUNK_SLOTS, ChunkHead, chunk_image, fingerprint, hash, image_slot};
use super::log::LogStats;
use crate::error::{Error, Result};
use crate::storage::pm::{Pm, XPLINE};

impl<P: Pm> HashIndex<P> {
    /// The live records of bucket `b` of `g` in chain order (committed ones read from PM, one XPLine per
    /// chunk that holds any; the tail's from DRAM).
    pub(super) fn live_records(&self, g: &Generation, b: u64) -> Result<Vec<(u64, u64)>> {
        let bucket = &g.buckets[b as usize];
        let shape = bucket.shape();
        let mut out = Vec::with_capacity(shape.fill());
        let mut chunk = [0u8; XPLINE as usize];
        for pos in 0..shape.chunks() {
            let first = pos * CHUNK_SLOTS;
            if pos == shape.tail() {
                for i in 0..shape.tail_used() {
                    if bucket.is_live(&g.pool, first + i) {
                        out.push(bucket.tail_slot(i));
                    }
                }
                continue;
            }
            let live: Vec<usize> = (0..CHUNK_SLOTS)
                .filter(|&i| bucket.is_live(&g.pool, first + i))
                .collect();
            if live.is_empty() {
                continue;
            }
            self.pm.read(g.chunk_off(b, bucket, pos), &mut chunk)?;
            out.extend(live.into_iter().map(|i| image_slot(&chunk, i)));
        }
        Ok(out)
    }

    /// Compacts bucket `b` of `g` (lock held as `w`) through redo area `scratch` (module docs).
    pub(super) fn compact(
        &self,
        g: &Generation,
        b: u64,
        w: &mut Writer,
        scratch: u64,
        stats: &mut LogStats,
    ) -> Result<()> {
        let bucket = &g.buckets[b as usize];
        let shape = bucket.shape();
        let records = self.live_records(g, b)?;
        let chunks = records.len().div_ceil(CHUNK_SLOTS).max(1);
        if chunks > shape.chunks() {
            return Err(Error::Poisoned(format!(
                "bucket {b}: {} live records do not fit its chain of {} chunks",
                records.len(),
                shape.chunks()
            )));
        }
        let nonce = self.geo.nonce;
        let mut heads = Vec::with_capacity(chunks);
        let mut images: Vec<(u64, [u8; XPLINE as usize])> = Vec::with_capacity(shape.chunks());
        for pos in 0..shape.chunks() {
            let off = g.chunk_off(b, bucket, pos);
            if pos < chunks {
                let lo = pos * CHUNK_SLOTS;
                let slots = &records[lo..(lo + CHUNK_SLOTS).min(records.len())];
                let head = ChunkHead::new(slots.len(), 0, w.seq);
                heads.push(head);
                images.push((off, chunk_image(head, g.tag(nonce, b, pos), slots)));
            } else {
                images.push((off, [0u8; XPLINE as usize]));
            }
        }
        // Redo: header XPLines (commit word, bucket, targets), then the images; fenced, then committed.
        let area = g.layout.scratch(scratch);
        let header_bytes = g.layout.redo_header_bytes();
        let mut header = vec![0u8; header_bytes as usize];
        header[8..16].copy_from_slice(&b.to_le_bytes());
        for (j, (off, _)) in images.iter().enumerate() {
            header[16 + j * 8..24 + j * 8].copy_from_slice(&off.to_le_bytes());
        }
        self.pm.write_nt(area, &header)?;
        for (j, (_, img)) in images.iter().enumerate() {
            self.pm
                .write_nt(area + header_bytes + XPLINE * j as u64, img)?;
        }
        self.pm.fence();
        let n = images.len() as u64;
        commit_word(&self.pm, area, g.layout.redo_word(nonce, scratch, n))?;
        // Place: lookups retry while the chunks change under them.
        let freed = bucket.edit(|| -> Result<Vec<u32>> {
            for (off, img) in &images {
                self.pm.write_nt(*off, img)?;
            }
            self.pm.fence();
            bucket.clear_slots(&g.pool);
            let freed = (chunks.max(g.pool.home)..shape.chunks())
                .map(|pos| bucket.overflow(&g.pool, pos))
                .collect();
            place_records(g, bucket, &records, chunks);
            Ok(freed)
        })?;
        commit_word(&self.pm, area, 0)?;
        let last = heads[chunks - 1];
        *w = Writer {
            seq: w.seq,
            tail_head: last,
            ..Writer::default()
        };
        g.pool.free.lock().extend(freed);
        stats.compactions += 1;
        Ok(())
    }
}

/// Sets the DRAM state of `bucket` (slots already cleared) to a chain of `chunks` chunks holding
/// `records` in order, all committed: fingerprints, live bits, tail image and shape. Pool links of
/// positions `16..chunks` must already be set.
pub(super) fn place_records(
    g: &Generation,
    bucket: &Bucket,
    records: &[(u64, u64)],
    chunks: usize,
) {
    debug_assert!(
        (1..=g.layout.max_chain()).contains(&chunks) && records.len() <= chunks * CHUNK_SLOTS
    );
    for (p, &(k, _)) in records.iter().enumerate() {
        bucket.set_fp(&g.pool, p, fingerprint(hash(k)));
        bucket.set_live(&g.pool, p, true);
    }
    let tail_start = (chunks - 1) * CHUNK_SLOTS;
    let in_tail = records.len() - tail_start.min(records.len());
    for (i, &(k, v)) in records[tail_start.min(records.len())..].iter().enumerate() {
        bucket.set_tail_slot(i, k, v);
    }
    bucket.set_shape(Shape::new(chunks, in_tail, 0));
}
