//! Recovery with several threads, and damage found on open.

use std::collections::HashMap;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{assert_matches, tiny_config};
use crate::index::hash::layout::{
    ChunkHead, FIXED_LOG_FLAG, Gen, Geometry, HOME_CHUNKS, SB_LOG_LINES, SB_ROOT, hash, slot_off,
};
use crate::index::hash::testkit;
use crate::index::hash::{HashConfig, HashIndex};
use crate::storage::pm::{MmapRegion, PersistMode, Pm, XPLINE};

fn filled(n: u64) -> (MmapRegion, HashMap<u64, u64>) {
    let pm = MmapRegion::anonymous(16 << 20, PersistMode::Adr).unwrap();
    let mut index = HashIndex::create(
        &pm,
        HashConfig {
            initial_buckets: 4,
            log_lines: 64,
            logs: 2,
            ..HashConfig::default()
        },
    )
    .unwrap();
    let model = testkit::fill(&mut index, n);
    drop(index);
    (pm, model)
}

/// A region whose current generation has a committed pool chunk (linked by a bucket that filled up before
/// the table was 7/8 full; deletes, done in place, no longer fill chains), and that chunk's number.
fn pooled() -> (MmapRegion, u64) {
    let pm = MmapRegion::anonymous(16 << 20, PersistMode::Adr).unwrap();
    let index = HashIndex::create(
        &pm,
        HashConfig {
            initial_buckets: 4,
            ..HashConfig::default()
        },
    )
    .unwrap();
    for i in 0..100_000u64 {
        index.insert(testkit::spread_key(i), i).unwrap();
        if i % 256 == 255 {
            let (_, g) = layout(&pm);
            if let Some(c) = (0..g.pool_chunks)
                .find(|&c| ChunkHead(pm.read_u64(g.pool_chunk(c)).unwrap()).count() > 0)
            {
                drop(index);
                return (pm, c);
            }
        }
    }
    panic!("100,000 inserts linked no pool chunk");
}

#[test]
fn one_and_many_threads_recover_the_same_state() {
    let (pm, model) = filled(20_000);
    let one = HashIndex::recover_with_threads(&pm, 1).unwrap();
    assert_matches(&one, &model);
    assert!(one.stats().replayed > 0, "{:?}", one.stats());
    for threads in [2, 4, 7, 1000] {
        // Reopening replays nothing twice: the first recovery committed nothing, so each sees the same.
        let many = HashIndex::recover_with_threads(&pm, threads).unwrap();
        assert_matches(&many, &model);
        assert_eq!(many.stats(), one.stats(), "{threads} threads");
    }
}

/// The current generation of an index image.
fn layout(pm: &MmapRegion) -> (Geometry, Gen) {
    let geo = Geometry::read(pm).unwrap();
    let root = pm.load_u64_atomic(SB_ROOT).unwrap();
    (geo, Gen::read(pm, &geo, root).unwrap())
}

fn expect_corruption(image: &MmapRegion, what: &str) {
    testkit::expect_corruption::<HashIndex<_>>(image, what);
}

/// A bucket of `g` with a committed chunk 0 that is full, and one with a committed chunk 0 partly used.
fn buckets(pm: &MmapRegion, g: &Gen) -> (u64, u64) {
    let count = |b: u64| ChunkHead(pm.read_u64(g.home_chunk(b, 0)).unwrap()).count();
    let full = (0..g.buckets()).find(|&b| count(b) == 15).unwrap();
    let partial = (0..g.buckets()).find(|&b| (1..15).contains(&count(b)));
    (full, partial.unwrap_or(full))
}

#[test]
fn damage_is_corruption() {
    let fresh = || filled(3000).0;

    let pm = fresh();
    pm.write(0, &[0xAB]).unwrap();
    expect_corruption(&pm, "bad magic");

    let pm = fresh();
    pm.write_u64(SB_LOG_LINES, 1 << 40).unwrap();
    expect_corruption(&pm, "superblock checksum");

    let pm = fresh();
    let (_, g) = layout(&pm);
    pm.write_u64(SB_ROOT, pm.len() + 4096).unwrap();
    expect_corruption(&pm, "root past the region");
    pm.write_u64(SB_ROOT, g.off + 8).unwrap();
    expect_corruption(&pm, "misaligned root");

    // A generation header with a valid checksum but a bucket count beyond the region.
    let pm = fresh();
    let (geo, g) = layout(&pm);
    Gen { log2: 30, ..g }.write_header(&pm, geo.nonce).unwrap();
    expect_corruption(&pm, "generation past the region");

    let pm = fresh();
    let (_, g) = layout(&pm);
    pm.write_u64(g.tail_word(0), u64::MAX - 3).unwrap();
    expect_corruption(&pm, "log tail out of range");

    // A tombstone bit on an unused slot of a partly used chunk.
    let pm = fresh();
    let (_, g) = layout(&pm);
    let (_, b) = buckets(&pm, &g);
    let at = g.home_chunk(b, 0);
    let head = ChunkHead(pm.read_u64(at).unwrap());
    pm.write_u64(at, ChunkHead::new(1, 1 << 14, head.seq()).0)
        .unwrap();
    expect_corruption(&pm, "tombstone on an unused slot");

    // A committed chunk after a partly used one.
    let pm = fresh();
    let (_, g) = layout(&pm);
    let (b, _) = buckets(&pm, &g);
    assert!(ChunkHead(pm.read_u64(g.home_chunk(b, 1)).unwrap()).count() > 0);
    let head = ChunkHead(pm.read_u64(g.home_chunk(b, 0)).unwrap());
    pm.write_u64(g.home_chunk(b, 0), ChunkHead::new(3, 0, head.seq()).0)
        .unwrap();
    expect_corruption(&pm, "chunk after a partial chunk");

    // A key stored in a bucket it does not hash to.
    let pm = fresh();
    let (_, g) = layout(&pm);
    let (b, _) = buckets(&pm, &g);
    let stranger = (0u64..).find(|&k| hash(k) & g.mask() != b).unwrap();
    pm.write_u64(slot_off(g.home_chunk(b, 0), 0), stranger)
        .unwrap();
    expect_corruption(&pm, "key in the wrong bucket");

    // A committed pool chunk whose identity word is damaged.
    let (pm, used) = pooled();
    let (_, g) = layout(&pm);
    let at = g.pool_chunk(used) + 8;
    pm.write_u64(at, pm.read_u64(at).unwrap() ^ 1).unwrap();
    expect_corruption(&pm, "pool chunk identity");

    // A committed redo whose target is no chunk of its bucket.
    let pm = fresh();
    let (geo, g) = layout(&pm);
    let area = g.scratch(1);
    pm.write_u64(area + 8, 0).unwrap();
    pm.write_u64(area + 16, g.home_chunk(1, 0)).unwrap();
    pm.write_u64(area, g.redo_word(geo.nonce, 1, 1)).unwrap();
    expect_corruption(&pm, "redo target");
}

#[test]
fn a_committed_redo_is_finished_on_open() {
    let (pm, model) = filled(3000);
    let (geo, g) = layout(&pm);
    let (b, _) = buckets(&pm, &g);
    // Simulate a crash in the middle of placing a compaction: the redo holds bucket b's chunk 0 image
    // and is committed; the chunk itself was destroyed.
    let mut img = [0u8; XPLINE as usize];
    pm.read(g.home_chunk(b, 0), &mut img).unwrap();
    let area = g.scratch(0);
    pm.write_u64(area + 8, b).unwrap();
    pm.write_u64(area + 16, g.home_chunk(b, 0)).unwrap();
    pm.write(area + g.redo_header_bytes(), &img).unwrap();
    pm.write(g.home_chunk(b, 0), &[0x5A; XPLINE as usize])
        .unwrap();
    pm.write_u64(area, g.redo_word(geo.nonce, 0, 1)).unwrap();
    let index = HashIndex::open(&pm).unwrap();
    assert_matches(&index, &model);
    assert_eq!(pm.read_u64(area).unwrap(), 0, "the redo is cleared");
    const { assert!(HOME_CHUNKS > 1) };
}

#[test]
fn random_damage_never_panics() {
    let (pm, model) = filled(3000);
    let (_, g) = layout(&pm);
    let end = g.end();
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let mut image = vec![0u8; end as usize];
    pm.read(0, &mut image).unwrap();
    let (ok, bad) = testkit::random_damage::<HashIndex<_>>(
        &image,
        pm.len(),
        300,
        &mut rng,
        // Mostly the superblock, the generation header and logs, the pool and the first buckets.
        |rng| match rng.random_range(0..4) {
            0 => rng.random_range(0..4096),
            1 => rng.random_range(g.off..g.pool_off()),
            2 => rng.random_range(g.pool_off()..g.bucket_off(0)),
            _ => rng.random_range(g.bucket_off(0)..end),
        },
        |index, rng| {
            for i in 0..50u64 {
                let _ = index.insert(rng.random(), i);
            }
        },
    );
    assert!(ok > 0 && bad > 0, "{ok} opened, {bad} refused");
    assert!(!model.is_empty());
}

/// A fixed log keeps its size through doublings, before and after a reopen (the flag is in the
/// superblock); a growing log (the default, flag clear: regions from before the flag) grows with the table.
#[test]
fn a_fixed_log_keeps_its_size_through_doublings_and_reopens() {
    let make = |fixed_log: bool| {
        let pm = MmapRegion::anonymous(16 << 20, PersistMode::Eadr).unwrap();
        let config = HashConfig {
            initial_buckets: 1,
            log_lines: 32,
            fixed_log,
            ..HashConfig::default()
        };
        let mut index = HashIndex::create(&pm, config).unwrap();
        let model = testkit::fill(&mut index, 6000);
        assert!(index.stats().grows >= 3, "{:?}", index.stats());
        drop(index);
        (pm, model)
    };
    let (pm, model) = make(true);
    let (geo, g) = layout(&pm);
    assert!(geo.fixed_log && geo.log_lines == 32, "{geo:?}");
    assert_eq!(pm.read_u64(SB_LOG_LINES).unwrap(), 32 | FIXED_LOG_FLAG);
    assert_eq!(g.log_records, 64, "{g:?}");
    let index = HashIndex::open(&pm).unwrap();
    assert_matches(&index, &model);
    let grows = index.stats().grows;
    for k in 0..6000u64 {
        index.insert(testkit::spread_key(k), k).unwrap();
    }
    assert!(index.stats().grows > grows, "{:?}", index.stats());
    drop(index);
    assert_eq!(layout(&pm).1.log_records, 64);

    let (pm, model) = make(false);
    let (geo, g) = layout(&pm);
    assert!(!geo.fixed_log, "{geo:?}");
    assert_eq!(pm.read_u64(SB_LOG_LINES).unwrap(), 32);
    assert_eq!(g.log_records, 16 * g.buckets(), "{g:?}");
    assert_matches(&HashIndex::open(&pm).unwrap(), &model);
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
    for bad in [
        HashConfig {
            initial_buckets: 3,
            ..tiny_config()
        },
        HashConfig {
            dbucket_slots: 0,
            ..tiny_config()
        },
        HashConfig {
            dbucket_slots: 16,
            ..tiny_config()
        },
    ] {
        assert!(
            HashIndex::create(&pm, bad)
                .unwrap_err()
                .is_invalid_argument(),
            "{bad:?}"
        );
    }
}

/// A delete of a committed key is done in place (the tombstone bit of its slot in its chunk's commit word,
/// no log record), and recovery — which rebuilds from the chunks and replays the logs — keeps it deleted.
#[test]
fn in_place_deletes_survive_recovery() {
    let pm = MmapRegion::anonymous(16 << 20, PersistMode::Adr).unwrap();
    let index = HashIndex::create(&pm, tiny_config()).unwrap();
    let mut model = HashMap::new();
    for i in 0..4000u64 {
        index.insert(testkit::spread_key(i), i).unwrap();
        model.insert(testkit::spread_key(i), i);
    }
    for i in (0..4000u64).step_by(3) {
        assert!(index.remove(testkit::spread_key(i)).unwrap());
        model.remove(&testkit::spread_key(i));
    }
    let done = index.stats().in_place_deletes;
    assert!(done > 1000, "{:?}", index.stats());
    index.check_invariants().unwrap();
    drop(index);
    let back = HashIndex::recover_with_threads(&pm, 2).unwrap();
    assert_matches(&back, &model);
    back.check_invariants().unwrap();
}
