//! PM traffic under the Optane model (`CountingPm`, ADR). CCEH keeps no fingerprints: every lookup
//! compares keys in PM, so a miss reads both probe runs whole (8 lines), and an insert reads them too (its
//! uniqueness check) before a partial-XPLine write of one slot.

use std::collections::HashMap;

use super::assert_matches;
use crate::index::hash::cceh::{CcehConfig, CcehIndex};
use crate::index::hash::testkit::{insert_keys, measured, spread_key};
use crate::storage::pm::{CountingPm, MmapRegion, PersistMode, XPLINE};

/// Never 0 (CCEH's reserved empty key takes another path).
fn key(i: u64) -> u64 {
    spread_key(i) | 1
}

/// Lines per run and the bytes the CPU reads for a miss: both runs whole.
const RUN_LINES: u64 = 4;
const MISS_CPU_BYTES: u64 = 2 * RUN_LINES * 64;

/// CCEH's geometry (256 lines = 1,024 slots per segment, runs of 4 lines), preloaded with `n` keys.
fn preloaded(
    pm: &CountingPm<MmapRegion>,
    n: u64,
) -> (CcehIndex<&CountingPm<MmapRegion>>, HashMap<u64, u64>) {
    let config = CcehConfig {
        initial_depth: 2,
        ..CcehConfig::default()
    };
    let mut index = CcehIndex::create(pm, config).unwrap();
    let model = insert_keys(&mut index, n, key);
    (index, model)
}

#[test]
fn a_miss_reads_both_runs() {
    let pm = CountingPm::new(MmapRegion::anonymous(64 << 20, PersistMode::Adr).unwrap());
    let (index, model) = preloaded(&pm, 20_000);
    assert_matches(&index, &model);
    let lf = index.load_factor();
    assert!((0.3..0.75).contains(&lf), "load factor {lf}");
    let n = 2000u64;
    let (mut neg, mut whole) = (0u64, 0u64);
    for i in 0..n {
        let (got, t) = measured(&pm, || index.get(key(1_000_000 + i)).unwrap());
        assert_eq!(got, None);
        // Both runs, every line (only when both hashes pick the same run is it read once).
        assert!(
            t.cpu_read_bytes == MISS_CPU_BYTES || t.cpu_read_bytes == MISS_CPU_BYTES / 2,
            "{t:?}"
        );
        whole += u64::from(t.cpu_read_bytes == MISS_CPU_BYTES);
        // Each run spans one or two XPLines: 2..=4 XPLines unless the runs coincide or overlap.
        assert!(
            t.media_read_bytes >= XPLINE && t.media_read_bytes <= 4 * XPLINE,
            "{t:?}"
        );
        neg += t.media_read_bytes;
    }
    assert!(
        whole >= n * 98 / 100,
        "{whole} of {n} misses read both runs"
    );
    // A run of 4 lines starts on a line boundary: 3 in 4 runs straddle two XPLines (≈ 3.5 per miss).
    let avg = neg as f64 / n as f64;
    assert!(avg >= 3.0 * XPLINE as f64, "{avg} media B per miss");
    let (mut pos, mut pos_cpu) = (0u64, 0u64);
    for i in 0..n {
        let (got, t) = measured(&pm, || index.get(key(i)).unwrap());
        assert_eq!(got, Some(i));
        assert!(
            t.cpu_read_bytes >= 64 && t.cpu_read_bytes <= MISS_CPU_BYTES,
            "{t:?}"
        );
        assert!(t.media_read_bytes <= 4 * XPLINE, "{t:?}");
        pos += t.media_read_bytes;
        pos_cpu += t.cpu_read_bytes;
    }
    eprintln!(
        "load {lf:.3}: miss {avg:.0} media B, hit {} media B ({} CPU B)",
        pos / n,
        pos_cpu / n
    );
    // A hit stops at its key: fewer lines than a miss.
    assert!(
        pos_cpu < n * MISS_CPU_BYTES * 3 / 4,
        "{pos_cpu} CPU B for {n} hits"
    );
    assert!(pos < neg, "hits {pos} B, misses {neg} B");
}

#[test]
fn inserts_read_both_runs_and_write_one_slot() {
    let pm = CountingPm::new(MmapRegion::anonymous(64 << 20, PersistMode::Adr).unwrap());
    let (mut index, mut model) = preloaded(&pm, 20_000);
    let before = index.stats();
    let n = 4000u64;
    let ((), t) = measured(&pm, || {
        for i in 0..n {
            index.insert(key(100_000 + i), i).unwrap();
            model.insert(key(100_000 + i), i);
            pm.record_logical(16);
        }
    });
    let splits = index.stats().splits - before.splits;
    let w = t.media_write_bytes as f64 / n as f64;
    let r = t.media_read_bytes as f64 / n as f64;
    eprintln!(
        "insert: media write {w:.0} B, read {r:.0} B, {:.2} fences per insert; {splits} splits",
        t.fences as f64 / n as f64
    );
    // The uniqueness check reads both runs: at least a miss's worth of CPU reads per insert.
    assert!(t.cpu_read_bytes >= n * MISS_CPU_BYTES * 95 / 100, "{t:?}");
    assert!(r >= 3.0 * XPLINE as f64, "{r} B read/insert");
    // Value, then key: two persists of one line per insert, plus the splits' own.
    assert!(t.fences >= 2 * n && t.fences <= 2 * n + 5 * splits, "{t:?}");
    // One partly written XPLine per insert (a few share an XPLine still buffered), plus the splits: a
    // new segment (65 XPLines) and directory words, amortised.
    assert!(w >= 180.0, "{w} B/insert");
    assert!(
        w <= 256.0 + (splits * 70 * 256) as f64 / n as f64,
        "{w} B/insert"
    );
    assert_matches(&index, &model);
}

#[test]
fn updates_and_removes_rewrite_one_word() {
    let pm = CountingPm::new(MmapRegion::anonymous(64 << 20, PersistMode::Adr).unwrap());
    let (mut index, mut model) = preloaded(&pm, 8000);
    let n = 1000u64;
    for (remove, range) in [(false, 0..n), (true, n..2 * n)] {
        let ((), t) = measured(&pm, || {
            for i in range {
                if remove {
                    assert!(index.remove(key(i)).unwrap());
                    model.remove(&key(i));
                } else {
                    index.insert(key(i), i + 7).unwrap();
                    model.insert(key(i), i + 7);
                }
            }
        });
        // One 8 B store and one flushed line each.
        assert_eq!((t.flushes, t.fences), (n, n), "{t:?}");
        assert_eq!(t.cpu_write_bytes, n * 64, "{t:?}");
        assert!(t.media_write_bytes <= n * XPLINE, "{t:?}");
    }
    assert_matches(&index, &model);
}
