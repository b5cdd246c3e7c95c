//! Recovery with several threads, and damage found on open.

use std::collections::HashMap;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{assert_matches, tiny_config};
use crate::index::hash::layout::{SB_LOG_LINES, SB_ROOT, SB_TAIL0, Table, hash};
use crate::index::hash::testkit;
use crate::index::hash::{HashConfig, HashIndex, PmHashIndex};
use crate::storage::pm::{MmapRegion, PersistMode, Pm};

fn filled(n: u64) -> (MmapRegion, HashMap<u64, u64>) {
    let pm = MmapRegion::anonymous(16 << 20, PersistMode::Adr).unwrap();
    let mut index = HashIndex::create(
        &pm,
        HashConfig {
            initial_buckets: 4,
            log_lines: 64,
            logs: 2,
        },
    )
    .unwrap();
    let model = testkit::fill(&mut index, n);
    drop(index);
    (pm, model)
}

#[test]
fn one_and_four_threads_recover_the_same_state() {
    let (pm, model) = filled(20_000);
    let one = HashIndex::recover_with_threads(&pm, 1).unwrap();
    assert_matches(&one, &model);
    for threads in [2, 4, 7, 1000] {
        let many = HashIndex::recover_with_threads(&pm, threads).unwrap();
        assert_eq!(many.buckets, one.buckets, "{threads} threads");
        assert_eq!((many.len(), many.stats()), (one.len(), one.stats()));
        let (mut a, mut b) = (one.entries().unwrap(), many.entries().unwrap());
        a.sort_unstable();
        b.sort_unstable();
        assert_eq!(a, b);
    }
    assert!(one.stats().replayed + one.stats().replay_skipped > 0);
}

fn expect_corruption(image: &MmapRegion, what: &str) {
    testkit::expect_corruption::<HashIndex<_>>(image, what);
}

fn fresh() -> (MmapRegion, Table) {
    let (pm, _) = filled(600);
    let root = pm.load_u64_atomic(SB_ROOT).unwrap();
    let log2 = pm.read_u64(root + 8).unwrap();
    (pm, Table { off: root, log2 })
}

#[test]
fn damage_is_corruption() {
    let (pm, _) = fresh();
    pm.write(0, &[0xAB]).unwrap();
    expect_corruption(&pm, "bad magic");

    let (pm, _) = fresh();
    pm.write_u64(SB_LOG_LINES, 1 << 40).unwrap();
    expect_corruption(&pm, "superblock checksum");

    let (pm, t) = fresh();
    pm.write_u64(SB_ROOT, pm.len() + 4096).unwrap();
    expect_corruption(&pm, "root past the region");
    pm.write_u64(SB_ROOT, t.off + 8).unwrap();
    expect_corruption(&pm, "misaligned root");

    // A table header with a valid checksum but a bucket count beyond the region.
    let (pm, t) = fresh();
    let nonce = pm.read_u64(crate::index::hash::layout::SB_NONCE).unwrap();
    Table {
        off: t.off,
        log2: 30,
    }
    .write_header(&pm, nonce)
    .unwrap();
    expect_corruption(&pm, "table past the region");

    let (pm, _) = fresh();
    pm.write_u64(SB_TAIL0, u64::MAX - 3).unwrap();
    expect_corruption(&pm, "log tail out of range");

    // Meta lines: a tombstone bit without its valid bit; valid bits that are not a prefix; a chunk in use
    // after a free one.
    for word in [1u64 << 16, 0b101, 0xFFFFu64 << 32] {
        let (pm, t) = fresh();
        pm.write_u64(t.meta_off(0) + 56, word).unwrap();
        expect_corruption(&pm, &format!("meta word {word:#x}"));
    }

    // A key stored in a bucket it does not hash to.
    let (pm, t) = fresh();
    let stranger = (0u64..).find(|&k| hash(k) & t.mask() != 0).unwrap();
    assert!(
        pm.read_u64(t.meta_off(0)).unwrap() & 1 == 1,
        "bucket 0 has a record"
    );
    pm.write_u64(t.slot_off(0, 0), stranger).unwrap();
    expect_corruption(&pm, "key in the wrong bucket");
}

#[test]
fn random_damage_never_panics() {
    let (pm, model) = filled(600);
    let root = pm.load_u64_atomic(SB_ROOT).unwrap();
    let log2 = pm.read_u64(root + 8).unwrap();
    let end = Table { off: root, log2 }.end();
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let mut image = vec![0u8; end as usize];
    pm.read(0, &mut image).unwrap();
    let (ok, bad) = testkit::random_damage::<HashIndex<_>>(
        &image,
        pm.len(),
        300,
        &mut rng,
        // Mostly the superblock, the log and the table's header and meta lines.
        |rng| match rng.random_range(0..3) {
            0 => rng.random_range(0..4096),
            1 => rng.random_range(4096..root),
            _ => rng.random_range(root..(root + 4096).min(end)),
        },
        |_, _| {},
    );
    assert!(ok > 0 && bad > 0, "{ok} opened, {bad} refused");
    assert!(!model.is_empty());
}

#[test]
fn tiny_region_and_bad_config_are_invalid_arguments() {
    let pm = MmapRegion::anonymous(8192, PersistMode::Adr).unwrap();
    assert!(
        HashIndex::create(&pm, tiny_config())
            .unwrap_err()
            .is_invalid_argument()
    );
    let pm = MmapRegion::anonymous(1 << 20, PersistMode::Adr).unwrap();
    let bad = HashConfig {
        initial_buckets: 3,
        ..tiny_config()
    };
    assert!(
        HashIndex::create(&pm, bad)
            .unwrap_err()
            .is_invalid_argument()
    );
}
