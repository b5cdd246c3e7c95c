//! Recovery: validate the superblock and the table, rebuild every bucket's DRAM state from its meta line
//! and slots (buckets partitioned over scoped threads), then replay the collecting log.

use std::collections::{BTreeSet, HashSet};

use super::bucket::Bucket;
use super::index::{HashIndex, HashStats};
use super::layout::{
    CHUNK_SLOTS, Geometry, META_BYTES, SB_ROOT, SLOT_BYTES, Table, corruption, fingerprint, hash,
    validate_meta,
};
use super::log::Log;
use crate::error::{Error, Result};
use crate::storage::pm::{Pm, XPLINE};

impl<P: Pm> HashIndex<P> {
    /// Opens the index in `pm`, rebuilding its DRAM state on one thread.
    pub fn open(pm: P) -> Result<Self> {
        Self::recover_with_threads(pm, 1)
    }

    /// Opens the index in `pm`, scanning the P-buckets with `threads` scoped threads (0 counts as 1).
    /// Damage is `Error::Corruption`.
    pub fn recover_with_threads(pm: P, threads: usize) -> Result<Self> {
        let geo = Geometry::read(&pm)?;
        let root = pm.load_u64_atomic(SB_ROOT)?;
        let table = Table::read(&pm, &geo, root)?;
        let buckets = scan_table(&pm, table, threads.max(1))?;
        let len = buckets.iter().map(|(_, live)| live).sum();
        let buckets = buckets.into_iter().map(|(b, _)| b).collect();
        let mut log = Log::new(&geo, 0);
        let records = log.scan(&pm)?;
        let head = log.head;
        log.head = log.durable_tail;
        let mut index = HashIndex {
            pm,
            geo,
            table,
            buckets,
            len,
            log,
            staged: BTreeSet::new(),
            stats: HashStats::default(),
            poisoned: None,
        };
        for r in records {
            index.log.head = r.lsn + 1;
            if index.get(r.key)? == r.value {
                index.stats.replay_skipped += 1;
                continue;
            }
            index.apply(r.key, r.value, r.lsn)?;
            index.stats.replayed += 1;
        }
        index.log.head = head;
        Ok(index)
    }
}

/// Every bucket's DRAM state and live-record count, in bucket order.
fn scan_table<P: Pm>(pm: &P, t: Table, threads: usize) -> Result<Vec<(Bucket, u64)>> {
    let n = t.buckets();
    let threads = (threads as u64).min(n);
    if threads <= 1 {
        return scan_range(pm, t, 0, n);
    }
    let per = n.div_ceil(threads);
    let parts: Vec<Result<Vec<(Bucket, u64)>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let (lo, hi) = (i * per, ((i + 1) * per).min(n));
                scope.spawn(move || scan_range(pm, t, lo, hi))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Error::Poisoned("a recovery thread panicked".into())))
            })
            .collect()
    });
    let mut out = Vec::with_capacity(n as usize);
    for part in parts {
        out.extend(part?);
    }
    Ok(out)
}

fn scan_range<P: Pm>(pm: &P, t: Table, lo: u64, hi: u64) -> Result<Vec<(Bucket, u64)>> {
    let mut seen = HashSet::new();
    let mut data = Vec::new();
    (lo..hi)
        .map(|b| scan_bucket(pm, t, b, &mut seen, &mut data))
        .collect()
}

/// Rebuilds bucket `b`'s DRAM state from PM: meta mirror, fingerprints, and the live bit of each key's
/// newest version (unless it is a tombstone). Checks the meta line and that every key hashes here.
pub(super) fn scan_bucket<P: Pm>(
    pm: &P,
    t: Table,
    b: u64,
    seen: &mut HashSet<u64>,
    data: &mut Vec<u8>,
) -> Result<(Bucket, u64)> {
    let at = t.meta_off(b);
    let mut raw = [0u8; META_BYTES as usize];
    pm.read(at, &mut raw)?;
    let mut bucket = Bucket::default();
    for (w, word) in raw.chunks_exact(8).enumerate() {
        let mut x = [0u8; 8];
        x.copy_from_slice(word);
        bucket.meta[w] = u64::from_le_bytes(x);
    }
    let fill = validate_meta(&bucket.meta, at)?;
    bucket.fill = fill as u16;
    data.resize(fill.div_ceil(CHUNK_SLOTS) * XPLINE as usize, 0);
    pm.read(t.bucket_off(b), data)?;
    seen.clear();
    let mut live = 0;
    for s in (0..fill).rev() {
        let (valid, tomb) = bucket.slot_bits(s);
        if !valid {
            continue;
        }
        let mut x = [0u8; 8];
        x.copy_from_slice(&data[s * 16..s * 16 + 8]);
        let key = u64::from_le_bytes(x);
        let h = hash(key);
        if h & t.mask() != b {
            return Err(corruption(
                t.slot_off(b, s),
                format!(
                    "key in slot {s} of bucket {b} hashes to bucket {}",
                    h & t.mask()
                ),
            ));
        }
        bucket.fps[s] = fingerprint(h);
        if seen.insert(key) && !tomb {
            bucket.set_live(s, true);
            live += 1;
        }
    }
    debug_assert_eq!(SLOT_BYTES, 16);
    Ok((bucket, live))
}
