//! Recovery: validate the superblock and the current generation, finish committed compaction redos, then
//! rebuild all DRAM state in parallel — the pool's owners, every bucket's chain (fingerprints, live bits,
//! tail image, sequence number), every log's unbroken run — and replay the log records not yet in their
//! chain, per bucket in sequence order. Damage is `Error::Corruption` naming the offset.
//!
//! Replay rule: a chunk's commit word carries its bucket's sequence number at the commit, and every record
//! of the bucket with a sequence number up to it is in the chain (or was superseded there). A record is
//! replayed exactly when its sequence number is above its bucket's largest committed one. Records of one
//! bucket may sit in several logs (written by several threads); sorting them by sequence number restores
//! the order in which the bucket's lock admitted them. Cost: O(table + logs), split over the threads.

use std::collections::{HashMap, HashSet};

use super::bucket::{Shape, Writer};
use super::generation::{Generation, commit_word};
use super::index::HashIndex;
use super::layout::{
    CHUNK_SLOTS, ChunkHead, Gen, Geometry, SB_ROOT, corruption, fingerprint, hash, image_slot,
};
use super::log::{LogStats, Record};
use super::write::{Applied, Source};
use crate::error::{Error, Result};
use crate::storage::pm::{Pm, XPLINE};

/// Pool chunks owned by each bucket that has any: (chain position, pool chunk), unsorted.
type Owners = HashMap<u64, Vec<(usize, u32)>>;

impl<P: Pm> HashIndex<P> {
    /// Opens the index in `pm`, rebuilding its DRAM state on one thread.
    pub fn open(pm: P) -> Result<Self> {
        Self::recover_with_threads(pm, 1)
    }

    /// Opens the index in `pm`, rebuilding its DRAM state with `threads` scoped threads (0 counts as 1).
    pub fn recover_with_threads(pm: P, threads: usize) -> Result<Self> {
        let threads = threads.max(1);
        let geo = Geometry::read(&pm)?;
        let root = pm.load_u64_atomic(SB_ROOT)?;
        let layout = Gen::read(&pm, &geo, root)?;
        let mut tbl = Generation::new(layout, geo.nonce);
        finish_redos(&pm, &geo, &tbl)?;
        let owners = scan_pool(&pm, &geo, &tbl)?;
        let owned: HashSet<u32> = owners.values().flatten().map(|&(_, c)| c).collect();
        tbl.pool.free.get_mut().retain(|c| !owned.contains(c));
        parallel(threads, layout.buckets(), |lo, hi| {
            let mut seen = HashSet::new();
            (lo..hi).try_for_each(|b| {
                let own = owners.get(&b).map_or(&[][..], |v| &v[..]);
                scan_bucket(&pm, &geo, &tbl, b, own, &mut seen)
            })
        })?;
        let mask = layout.mask();
        let mut records = Vec::new();
        for (i, log) in tbl.logs.iter_mut().enumerate() {
            let log = log.get_mut();
            records.extend(
                log.scan(&pm, |k| hash(k) & mask)?
                    .into_iter()
                    .map(|r| (i as u64, r)),
            );
        }
        let index = Self::assemble(pm, geo, tbl, 0);
        index.replay(records, threads)?;
        // The write in flight at the crash may have left the table above 7/8 before it could double.
        let current = index.current();
        if index.over_full(current) {
            index.grow(current)?;
        }
        Ok(index)
    }

    /// Replays the records above their bucket's committed sequence number, in order per bucket, on up to
    /// `threads` threads (bucket ranges; at most one per log, each with that log's redo area).
    fn replay(&self, records: Vec<(u64, Record)>, threads: usize) -> Result<()> {
        let g = self.current();
        let mask = g.layout.mask();
        let total = records.len() as u64;
        let mut todo: Vec<(u64, u64, Record)> = records
            .into_iter()
            .map(|(log, r)| (hash(r.key) & mask, log, r))
            .filter(|&(b, _, r)| r.seq > g.buckets[b as usize].writer.lock().seq)
            .collect();
        todo.sort_unstable_by_key(|&(b, _, r)| (b, r.seq));
        // Bucket ranges: a bucket's records stay on one thread, in order.
        let threads = threads.min(g.layout.logs as usize).max(1);
        let mut parts: Vec<&[(u64, u64, Record)]> = Vec::with_capacity(threads);
        let mut rest = &todo[..];
        for t in (1..=threads).rev() {
            let mut cut = rest.len() / t;
            while cut > 0 && cut < rest.len() && rest[cut].0 == rest[cut - 1].0 {
                cut += 1;
            }
            let (part, tail) = rest.split_at(if t == 1 { rest.len() } else { cut });
            parts.push(part);
            rest = tail;
        }
        let stats: Vec<Result<LogStats>> = std::thread::scope(|s| {
            let handles: Vec<_> = parts
                .iter()
                .enumerate()
                .map(|(t, part)| s.spawn(move || self.replay_part(g, part, t as u64)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err(panicked())))
                .collect()
        });
        for s in stats {
            self.retired_stats.lock().add(&s?);
        }
        let len: u64 = g.buckets.iter().map(|b| b.live_count(&g.pool)).sum();
        self.set_len(len);
        *self.recovery.lock() = (todo.len() as u64, total - todo.len() as u64);
        Ok(())
    }

    fn replay_part(
        &self,
        g: &Generation,
        part: &[(u64, u64, Record)],
        scratch: u64,
    ) -> Result<LogStats> {
        let mut stats = LogStats::default();
        for &(b, log, r) in part {
            let mut w = g.buckets[b as usize].writer.lock();
            let src = Source::Replay {
                pin: log << 56 | r.lsn,
                seq: r.seq,
                scratch,
                stats: &mut stats,
            };
            if self.apply(g, b, &mut w, src, r.key, r.value)? == Applied::NeedGrow {
                return Err(corruption(
                    g.layout.bucket_off(b),
                    format!("replay of bucket {b} needs room its chain never had"),
                ));
            }
        }
        Ok(stats)
    }
}

fn panicked() -> Error {
    Error::Poisoned("a recovery thread panicked".into())
}

/// Runs `work(lo, hi)` over `0..n` split into `threads` ranges on scoped threads.
fn parallel(threads: usize, n: u64, work: impl Fn(u64, u64) -> Result<()> + Sync) -> Result<()> {
    let threads = (threads as u64).clamp(1, n.max(1));
    if threads == 1 {
        return work(0, n);
    }
    let per = n.div_ceil(threads);
    let work = &work;
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|i| s.spawn(move || work(i * per, ((i + 1) * per).min(n))))
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().unwrap_or_else(|_| Err(panicked())))
    })
}

/// Copies the images of every committed redo of generation `tbl` to their places, then clears it.
fn finish_redos<P: Pm>(pm: &P, geo: &Geometry, tbl: &Generation) -> Result<()> {
    let g = &tbl.layout;
    for i in 0..g.logs {
        let area = g.scratch(i);
        let header_bytes = g.redo_header_bytes();
        let mut header = vec![0u8; header_bytes as usize];
        pm.read(area, &mut header)?;
        let word = super::format::le(&header);
        let n = word & 0xFF;
        if !(1..=g.max_chain() as u64).contains(&n) || word != g.redo_word(geo.nonce, i, n) {
            continue;
        }
        let b = super::format::le(&header[8..]);
        if b >= g.buckets() {
            return Err(corruption(area + 8, format!("redo for bucket {b}")));
        }
        let pool = g.pool_off()..g.pool_chunk(g.pool_chunks);
        let mut img = [0u8; XPLINE as usize];
        for j in 0..n as usize {
            let t = super::format::le(&header[16 + j * 8..]);
            let home = (0..g.home_chunks()).any(|c| g.home_chunk(b, c) == t);
            let pooled = pool.contains(&t) && (t - pool.start).is_multiple_of(XPLINE);
            if !home && !pooled {
                return Err(corruption(
                    area,
                    format!("redo target {t} is no chunk of bucket {b}"),
                ));
            }
            pm.read(area + header_bytes + XPLINE * j as u64, &mut img)?;
            pm.write_nt(t, &img)?;
        }
        pm.fence();
        commit_word(pm, area, 0)?;
    }
    Ok(())
}

/// Every pool chunk that holds a committed part of a chain, by owner.
pub(super) fn scan_pool<P: Pm>(pm: &P, geo: &Geometry, tbl: &Generation) -> Result<Owners> {
    let g = &tbl.layout;
    let mut owners = Owners::new();
    let mut claimed = HashSet::new();
    let mut head = [0u8; 16];
    for c in 0..g.pool_chunks {
        let at = g.pool_chunk(c);
        pm.read(at, &mut head)?;
        let (word0, tag) = (super::format::le(&head), super::format::le(&head[8..]));
        if tag == 0 || ChunkHead(word0).count() == 0 {
            continue;
        }
        let Some((b, pos)) = g.pool_owner(geo.nonce, tag) else {
            return Err(corruption(
                at + 8,
                format!("pool chunk {c} has identity {tag:#x}"),
            ));
        };
        if !claimed.insert((b, pos)) {
            return Err(corruption(
                at,
                format!("two pool chunks hold position {pos} of bucket {b}"),
            ));
        }
        owners.entry(b).or_default().push((pos, c as u32));
    }
    Ok(owners)
}

/// Rebuilds bucket `b`'s DRAM state from its chain in PM (home chunks, then the pool chunks `own`).
pub(super) fn scan_bucket<P: Pm>(
    pm: &P,
    geo: &Geometry,
    tbl: &Generation,
    b: u64,
    own: &[(usize, u32)],
    seen: &mut HashSet<u64>,
) -> Result<()> {
    let g = &tbl.layout;
    let bucket = &tbl.buckets[b as usize];
    let mut own = own.to_vec();
    own.sort_unstable();
    let mut heads: Vec<(u64, ChunkHead)> = Vec::new();
    let mut slots: Vec<(u64, u64)> = Vec::new();
    let mut img = [0u8; XPLINE as usize];
    let home = g.home_chunks();
    for pos in 0..g.max_chain() {
        let at = if pos < home {
            g.home_chunk(b, pos)
        } else {
            match own.get(pos - home) {
                Some(&(p, c)) if p == pos => g.pool_chunk(u64::from(c)),
                Some(&(p, _)) => {
                    return Err(corruption(
                        g.bucket_off(b),
                        format!("bucket {b} lacks chain position {pos} but has {p}"),
                    ));
                }
                None => break,
            }
        };
        pm.read(at, &mut img)?;
        let head = ChunkHead(super::format::le(&img));
        let tag = super::format::le(&img[8..]);
        if pos < home && (tag != g.home_tag(geo.nonce, b, pos) || head.count() == 0) {
            break;
        }
        head.validate(at)?;
        if let Some(&(prev, h)) = heads.last()
            && h.count() < CHUNK_SLOTS
        {
            return Err(corruption(
                at,
                format!("chunk after the partly used chunk at {prev}"),
            ));
        }
        for i in 0..head.count() {
            let (k, v) = image_slot(&img, i);
            if hash(k) & g.mask() != b {
                return Err(corruption(
                    super::layout::slot_off(at, i),
                    format!("key in bucket {b} hashes to bucket {}", hash(k) & g.mask()),
                ));
            }
            slots.push((k, v));
        }
        heads.push((at, head));
    }
    if own.len() > heads.len().saturating_sub(home) {
        return Err(corruption(
            g.bucket_off(b),
            format!("bucket {b} owns pool chunks past its chain"),
        ));
    }
    let chunks = heads.len().max(1);
    for (j, &(_, c)) in own.iter().enumerate().take(chunks.saturating_sub(home)) {
        bucket.set_overflow(&tbl.pool, home + j, c);
    }
    // Newest version of each key decides (chain order is age order); tombstones hide older versions.
    seen.clear();
    let tombs = |p: usize| heads[p / CHUNK_SLOTS].1.tomb() >> (p % CHUNK_SLOTS) & 1 == 1;
    for p in (0..slots.len()).rev() {
        let k = slots[p].0;
        let h = hash(k);
        bucket.set_fp(&tbl.pool, p, fingerprint(h));
        let newest = seen.insert(k);
        bucket.set_live(&tbl.pool, p, newest && !tombs(p));
    }
    let last = heads.last().map_or(ChunkHead::default(), |&(_, h)| h);
    let tail_start = (chunks - 1) * CHUNK_SLOTS;
    for (i, &(k, v)) in slots[tail_start.min(slots.len())..].iter().enumerate() {
        bucket.set_tail_slot(i, k, v);
    }
    bucket.set_shape(Shape::new(chunks, last.count(), 0));
    *bucket.writer.lock() = Writer {
        seq: heads.iter().map(|(_, h)| h.seq()).max().unwrap_or(0),
        tail_head: last,
        tail_tomb: last.tomb(),
        ..Writer::default()
    };
    Ok(())
}
