//! PM traffic under the Optane model (`CountingPm`, ADR): misses stay in DRAM, hits read one line per
//! fingerprint match, and inserts write whole XPLines plus their share of the log and of the commit word.

use super::assert_matches;
use crate::index::hash::{HashConfig, HashIndex};
use crate::storage::pm::{CountingPm, MmapRegion, PersistMode, Traffic, XPLINE};

fn key(i: u64) -> u64 {
    i.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

fn setup(
    preload: u64,
) -> (
    CountingPm<MmapRegion>,
    std::collections::HashMap<u64, u64>,
    HashConfig,
) {
    let pm = CountingPm::new(MmapRegion::anonymous(64 << 20, PersistMode::Adr).unwrap());
    let config = HashConfig {
        initial_buckets: 64,
        ..HashConfig::default()
    };
    let model = (0..preload).map(|i| (key(i), i)).collect();
    (pm, model, config)
}

/// Live slots of `k`'s bucket whose fingerprint matches `k`'s: the most slot reads a lookup may do.
fn candidates(index: &HashIndex<&CountingPm<MmapRegion>>, k: u64) -> u64 {
    let (b, fp) = index.locate(k);
    index.buckets[b as usize].candidates(fp).count() as u64
}

#[test]
fn lookups_read_only_fingerprint_matches() {
    let (pm, model, config) = setup(8000);
    let mut index = HashIndex::create(&pm, config).unwrap();
    for (&k, &v) in &model {
        index.insert(k, v).unwrap();
    }
    assert_matches(&index, &model);
    let (mut zero_cand, mut neg_media, n) = (0u64, 0u64, 2000u64);
    for i in 0..n {
        let k = key(1_000_000 + i);
        let cand = candidates(&index, k);
        pm.drain();
        let t0 = pm.snapshot();
        assert_eq!(index.get(k).unwrap(), None);
        let t = pm.snapshot().since(&t0);
        // Each candidate costs one 64 B line (one XPLine at the media); no candidate, no PM access.
        assert!(
            t.cpu_read_bytes <= 64 * cand && t.media_read_bytes <= XPLINE * cand,
            "{t:?}"
        );
        if cand == 0 {
            zero_cand += 1;
            assert_eq!(t.requested_read_bytes + t.media_read_bytes, 0, "{t:?}");
        }
        neg_media += t.media_read_bytes;
    }
    // Load ≈ 0.49: false fingerprint matches ≈ 125 live slots / 256 per miss.
    assert!(
        zero_cand * 2 > n,
        "{zero_cand} of {n} misses without a candidate"
    );
    assert!(
        neg_media < n * XPLINE * 7 / 10,
        "{neg_media} media bytes for {n} misses"
    );
    eprintln!(
        "misses: {zero_cand} of {n} without a candidate, {} media B/miss",
        neg_media / n
    );

    let (mut pos_media, mut one_xpline) = (0u64, 0u64);
    for i in 0..n {
        let k = key(i);
        let cand = candidates(&index, k);
        pm.drain();
        let t0 = pm.snapshot();
        assert_eq!(index.get(k).unwrap(), Some(i));
        let t = pm.snapshot().since(&t0);
        assert!(t.media_read_bytes <= XPLINE * cand.max(1), "{t:?}");
        one_xpline += (t.media_read_bytes <= XPLINE) as u64;
        pos_media += t.media_read_bytes;
    }
    assert!(
        one_xpline * 10 >= n * 8,
        "{one_xpline} of {n} hits read at most one XPLine"
    );
    assert!(
        pos_media <= n * XPLINE * 14 / 10,
        "{pos_media} media bytes for {n} hits"
    );
    eprintln!(
        "hits: {one_xpline} of {n} read at most one XPLine, {} media B/hit",
        pos_media / n
    );
}

#[test]
fn inserts_write_whole_xplines_and_little_else() {
    let (pm, mut model, config) = setup(8000);
    let mut index = HashIndex::create(&pm, config).unwrap();
    for (&k, &v) in &model {
        index.insert(k, v).unwrap();
    }
    let before = index.stats();
    pm.drain();
    let t0 = pm.snapshot();
    let n = 4000u64;
    for i in 0..n {
        let k = key(100_000 + i);
        index.insert(k, i).unwrap();
        model.insert(k, i);
        pm.record_logical(16);
    }
    pm.drain();
    let t: Traffic = pm.snapshot().since(&t0);
    let s = index.stats();
    assert_eq!(
        s.rebuilds, before.rebuilds,
        "no resize in the measured phase"
    );
    let flushes = s.flushes - before.flushes;
    // D-buckets partly filled before the phase may flush in it: at most one extra flush per bucket.
    assert!(
        flushes >= n / 16 - 64 && flushes <= n / 16 + 64,
        "{flushes} flushes"
    );
    // Per insert: log 32 B (8 records fill an XPLine written once) + chunk 256 / 16 = 16 B + the meta
    // line's partial XPLine 256 / 16 = 16 B = 64 B; the bound allows 8 B for the log's partial tail and the
    // D-buckets left unflushed. A naive in-place insert would write ≥ 256 B.
    let per_insert = t.media_write_bytes as f64 / n as f64;
    eprintln!(
        "media write {per_insert} B/insert, read {} B/insert, {} RMW XPLines, {flushes} flushes",
        t.media_read_bytes as f64 / n as f64,
        t.rmw_xplines
    );
    assert!(
        (48.0..=72.0).contains(&per_insert),
        "{per_insert} B/insert: {t:?}"
    );
    // Only meta lines (one per flush) and the log's last XPLine are ever partly written.
    assert!(
        t.rmw_xplines <= flushes + 2,
        "{} read-modify-writes: {t:?}",
        t.rmw_xplines
    );
    assert!(t.write_amplification().unwrap() <= 72.0 / 16.0);
    assert_matches(&index, &model);
}
