//! Lazy recovery: opening after a crash reads the superblock and the directory and touches no segment,
//! whatever the size of the table; segments are repaired on first touch. Measured by what `open` reads
//! (`CountingPm`'s requested bytes) and the repair counter, not by time, so the test is deterministic.

use std::collections::HashMap;

use super::assert_matches;
use crate::index::hash::dash::layout::SUPER_BYTES;
use crate::index::hash::dash::{DashConfig, DashIndex};
use crate::index::hash::testkit::measured;
use crate::storage::pm::{CountingPm, MmapRegion, PersistMode};

use crate::index::hash::testkit::{insert_keys, spread_key as key};

/// An index of `n` keys (Dash's geometry) left as a crash leaves it: dropped without a clean close.
fn crashed(n: u64) -> (CountingPm<MmapRegion>, HashMap<u64, u64>) {
    let pm = CountingPm::new(MmapRegion::anonymous(128 << 20, PersistMode::Adr).unwrap());
    let mut index = DashIndex::create(&pm, DashConfig::default()).unwrap();
    let model = insert_keys(&mut index, n, key);
    drop(index);
    (pm, model)
}

#[test]
fn open_after_a_crash_touches_no_segment_whatever_the_size() {
    let mut open_reads = Vec::new();
    for n in [2_000u64, 20_000, 200_000] {
        let (pm, model) = crashed(n);
        let (index, t) = measured(&pm, || DashIndex::open(&pm).unwrap());
        let entries = 1u64 << index.global_depth();
        let segments = index.segments();
        assert_eq!(index.stats().repaired_segments, 0);
        // Open read the superblock words and the directory (8 B per entry), nothing else.
        let beyond_dir = t.requested_read_bytes - 8 * entries;
        assert!(beyond_dir <= SUPER_BYTES, "{t:?}");
        open_reads.push(beyond_dir);
        // The first lookup repairs exactly the segment it reaches.
        let ((), first) = measured(&pm, || assert_eq!(index.get(key(0)).unwrap(), Some(0)));
        assert_eq!(index.stats().repaired_segments, 1);
        // A repair reads the segment's header line and its 66 buckets.
        let seg_bytes = 66 * 256 + 32;
        assert!(first.requested_read_bytes <= 2 * seg_bytes, "{first:?}");
        // A full recovery would read every segment: what lazy recovery spared `open`.
        let ((), all) = measured(&pm, || index.repair_all().unwrap());
        assert_eq!(index.stats().repaired_segments, segments);
        assert_eq!(
            all.requested_read_bytes,
            (segments - 1) * seg_bytes,
            "{all:?}"
        );
        eprintln!(
            "{n} keys, {segments} segments: open read {} B (directory {} B), first lookup {} B, \
             repairing the rest {} B",
            t.requested_read_bytes,
            8 * entries,
            first.requested_read_bytes,
            all.requested_read_bytes
        );
        assert_matches(&index, &model);
    }
    // Beyond the directory, open reads the same bytes at every size.
    assert!(
        open_reads.windows(2).all(|w| w[0] == w[1]),
        "{open_reads:?}"
    );
}

#[test]
fn clean_close_reopens_without_repairs_and_knows_its_length() {
    let (pm, model) = crashed(5_000);
    let index = DashIndex::open(&pm).unwrap();
    // Not every segment was repaired: the close is not clean, the next open repairs lazily again.
    assert!(index.get(key(1)).unwrap().is_some());
    let pm = index.into_pm();
    let index = DashIndex::open(pm).unwrap();
    assert_eq!(index.stats().repaired_segments, 0);
    assert_matches(&index, &model);
    let repaired = index.stats().repaired_segments;
    assert_eq!(repaired, index.segments());
    // Everything repaired: this close is clean, and the next open trusts every segment.
    let pm = index.into_pm();
    let index = DashIndex::open(pm).unwrap();
    assert_eq!(index.len(), model.len() as u64);
    assert_eq!(index.stats().repaired_segments, 0);
    assert_matches(&index, &model);
    assert_eq!(index.stats().repaired_segments, 0);
}
