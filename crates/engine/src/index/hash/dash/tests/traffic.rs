//! PM traffic under the Optane model (`CountingPm`, ADR). Unlike ElimDA, whose fingerprints are in DRAM,
//! every Dash lookup reads bucket header lines from PM — a miss included — and every insert is a
//! partial-XPLine write (slot + fingerprint + header word) that the media must read-modify-write.

use std::collections::HashMap;

use super::assert_matches;
use crate::index::hash::dash::{DashConfig, DashIndex};
use crate::index::hash::testkit::{insert_keys, measured};
use crate::storage::pm::{CountingPm, MmapRegion, PersistMode, XPLINE};

use crate::index::hash::testkit::spread_key as key;

const STASH: u64 = 2;

/// Dash's geometry (64 + 2 buckets per segment), preloaded with `n` keys.
fn preloaded(
    pm: &CountingPm<MmapRegion>,
    n: u64,
) -> (DashIndex<&CountingPm<MmapRegion>>, HashMap<u64, u64>) {
    let config = DashConfig {
        segment_buckets: 64,
        stash_buckets: STASH,
        initial_depth: 3,
    };
    let mut index = DashIndex::create(pm, config).unwrap();
    let model = insert_keys(&mut index, n, key);
    (index, model)
}

#[test]
fn lookups_read_bucket_headers_from_pm() {
    let pm = CountingPm::new(MmapRegion::anonymous(64 << 20, PersistMode::Adr).unwrap());
    let (index, model) = preloaded(&pm, 8000);
    assert_matches(&index, &model);
    let lf = index.load_factor();
    assert!((0.4..0.9).contains(&lf), "load factor {lf}");
    let n = 2000u64;
    let (mut neg, mut neg_two) = (0u64, 0u64);
    for i in 0..n {
        let (got, t) = measured(&pm, || index.get(key(1_000_000 + i)).unwrap());
        assert_eq!(got, None);
        // A miss reads the header line of its home bucket and of the next one (two XPLines), plus the
        // stash buckets when the home bucket has overflow records; never less than one XPLine.
        assert!(
            t.media_read_bytes >= XPLINE && t.media_read_bytes <= XPLINE * (2 + STASH),
            "{t:?}"
        );
        assert!(t.cpu_read_bytes >= 2 * 64, "{t:?}");
        neg_two += u64::from(t.media_read_bytes == 2 * XPLINE);
        neg += t.media_read_bytes;
    }
    assert!(
        neg_two * 10 >= n * 7,
        "{neg_two} of {n} misses read exactly two XPLines"
    );
    let (mut pos, mut one) = (0u64, 0u64);
    for i in 0..n {
        let (got, t) = measured(&pm, || index.get(key(i)).unwrap());
        assert_eq!(got, Some(i));
        assert!(
            t.media_read_bytes >= XPLINE && t.media_read_bytes <= XPLINE * (2 + STASH),
            "{t:?}"
        );
        one += u64::from(t.media_read_bytes == XPLINE);
        pos += t.media_read_bytes;
    }
    eprintln!(
        "load {lf:.3}: miss {} media B ({neg_two} of {n} exactly 2 XPLines), hit {} media B ({one} of {n} one XPLine)",
        neg / n,
        pos / n
    );
    assert!(pos <= n * 2 * XPLINE, "{pos} media bytes for {n} hits");
    // Balanced insert puts about half the records in the neighbour bucket (the less full on a tie-break
    // toward home): a hit reads one XPLine for those at home, two for the others.
    assert!(one * 4 >= n && one < n, "{one} of {n} hits read one XPLine");
    assert!(
        neg >= n * 2 * XPLINE * 7 / 10,
        "{neg} media bytes for {n} misses"
    );
}

#[test]
fn inserts_are_partial_xpline_writes() {
    let pm = CountingPm::new(MmapRegion::anonymous(64 << 20, PersistMode::Adr).unwrap());
    let (index, mut model) = preloaded(&pm, 8000);
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
        "insert: media write {w:.0} B, read {r:.0} B, {:.2} RMW XPLines, {:.2} fences per insert; {splits} splits",
        t.rmw_xplines as f64 / n as f64,
        t.fences as f64 / n as f64
    );
    // Each insert dirties one bucket XPLine (slot, fingerprint, header: ≈ 25 B) that later leaves the
    // XPBuffer partly written, so it costs a whole 256 B media write. Its read half of the
    // read-modify-write is already paid by the lookup that precedes the insert (the model counts a
    // partial XPLine whose contents were loaded as no extra RMW), so the media reads cover the writes.
    assert!(t.media_read_bytes >= t.media_write_bytes, "{t:?}");
    assert!(r >= XPLINE as f64, "{r} B read/insert");
    // Lower bound below 256: a few inserts land in an XPLine still in the XPBuffer and share its write.
    assert!(w >= 180.0, "{w} B/insert");
    // Upper bound: the bucket XPLine (+ a neighbour for displacement or the stash with its home header),
    // plus splits (a new segment of 67 XPLines and the headers of the old one) amortised.
    assert!(
        w <= 256.0 + 128.0 + (splits * 2 * 67 * 256) as f64 / n as f64,
        "{w} B/insert"
    );
    assert!(t.write_amplification().unwrap() >= 180.0 / 16.0);
    assert_matches(&index, &model);
}

#[test]
fn updates_and_removes_rewrite_one_word() {
    let pm = CountingPm::new(MmapRegion::anonymous(64 << 20, PersistMode::Adr).unwrap());
    let (index, mut model) = preloaded(&pm, 4000);
    let n = 1000u64;
    let ((), t) = measured(&pm, || {
        for i in 0..n {
            index.insert(key(i), i + 7).unwrap();
            model.insert(key(i), i + 7);
        }
    });
    // One value word stored and flushed. As in Dash, the version locks live in the buckets' header words:
    // locking and unlocking the home bucket and its neighbour dirties their first lines too, written back
    // later without a flush. So 1 to 3 lines written back per update (the value's line is the header's
    // for the first two slots, and neighbours share lines across updates), each a partial XPLine.
    assert_eq!((t.flushes, t.fences), (n, n), "{t:?}");
    assert!(
        t.cpu_write_bytes >= n * 64 && t.cpu_write_bytes <= n * 3 * 64,
        "{t:?}"
    );
    assert!(t.media_write_bytes <= n * 3 * XPLINE, "{t:?}");
    let ((), t) = measured(&pm, || {
        for i in n..2 * n {
            assert!(index.remove(key(i)).unwrap());
            model.remove(&key(i));
        }
    });
    // One header commit persisted (a stash record's home hints are stored, not persisted).
    assert_eq!(t.fences, n, "{t:?}");
    assert_matches(&index, &model);
}
