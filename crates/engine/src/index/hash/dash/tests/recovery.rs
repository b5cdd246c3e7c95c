//! Damage (`Error::Corruption`, never a panic) and bad arguments. Recovery is lazy: `open` reads the
//! superblock and the directory only, so damage there is refused by `open`; damage in a segment is found
//! when the segment is first touched and repaired (here by `repair_all`), and reported then.

use std::collections::HashMap;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{assert_matches, tiny_config};
use crate::error::Error;
use crate::index::hash::dash::DashIndex;
use crate::index::hash::dash::layout::{
    FP_OFF, Header, SB_CLEAN, SB_CRASH_VERSION, SB_HEAP, SB_ROOT, SB_SEG_BUCKETS, SEG_PATTERN,
    SEG_STATE, SLOT_OFF, entry_seg, hash,
};
use crate::index::hash::testkit;
use crate::storage::pm::{MmapRegion, PersistMode, Pm};

fn filled(n: u64) -> (MmapRegion, HashMap<u64, u64>) {
    let pm = MmapRegion::anonymous(1 << 20, PersistMode::Adr).unwrap();
    let mut index = DashIndex::create(&pm, tiny_config()).unwrap();
    let model = testkit::fill(&mut index, n);
    assert!(index.global_depth() >= 2);
    (pm, model)
}

/// Panics unless `open` refuses `image` with `Error::Corruption`.
fn expect_corruption(image: &MmapRegion, what: &str) {
    testkit::expect_corruption::<DashIndex<_>>(image, what);
}

/// Panics unless `open` accepts `image` without touching a segment and the repair of the segments then
/// reports `Error::Corruption` (and poisons the index).
fn expect_lazy_corruption(image: &MmapRegion, what: &str) {
    let index = DashIndex::open(image).unwrap_or_else(|e| panic!("{what}: open failed: {e}"));
    assert_eq!(index.stats().repaired_segments, 0, "{what}");
    match index.repair_all() {
        Err(Error::Corruption { .. }) => {}
        other => panic!("{what}: expected corruption on repair, got {other:?}"),
    }
    assert!(
        matches!(index.insert(1, 1), Err(Error::Poisoned(_))),
        "{what}"
    );
}

/// Offsets of the directory and of the first segment it names.
fn dir_and_seg(pm: &MmapRegion) -> (u64, u64) {
    let dir = pm.load_u64_atomic(SB_ROOT).unwrap() & !0xFF;
    (dir, entry_seg(pm.read_u64(dir).unwrap()))
}

/// The first normal bucket of `seg` with a record, and that record's slot.
fn used_bucket(pm: &MmapRegion, seg: u64) -> (u64, usize) {
    (1..)
        .map(|i| seg + 256 * i)
        .find_map(|b| {
            let h = Header(pm.read_u64(b).unwrap());
            (0..14).find(|&s| h.used(s)).map(|s| (b, s))
        })
        .unwrap()
}

#[test]
fn intact_region_reopens() {
    let (pm, model) = filled(800);
    let index = DashIndex::open(&pm).unwrap();
    assert_matches(&index, &model);
}

#[test]
fn damage_is_corruption() {
    let (pm, _) = filled(800);
    pm.write(0, &[0xAB]).unwrap();
    expect_corruption(&pm, "bad magic");

    let (pm, _) = filled(800);
    pm.write_u64(SB_SEG_BUCKETS, 8).unwrap();
    expect_corruption(&pm, "superblock checksum");

    let (pm, _) = filled(800);
    let root = pm.read_u64(SB_ROOT).unwrap();
    pm.write_u64(SB_ROOT, pm.len()).unwrap();
    expect_corruption(&pm, "root past the region");
    pm.write_u64(SB_ROOT, root + 8).unwrap();
    expect_corruption(&pm, "global depth too large");
    pm.write_u64(SB_ROOT, ((root & !0xFF) + 64) | (root & 0xFF))
        .unwrap();
    expect_corruption(&pm, "misaligned directory");

    // Mutable superblock words, and a directory entry outside the heap: refused by open.
    for (at, bad) in [
        (SB_HEAP, 1u64 << 40),
        (SB_HEAP, 300),
        (SB_CLEAN, 2),
        (SB_CRASH_VERSION, 256),
    ] {
        let (pm, _) = filled(800);
        pm.write_u64(at, bad).unwrap();
        expect_corruption(&pm, &format!("word at {at} = {bad}"));
    }
    let (pm, _) = filled(800);
    let (dir, _) = dir_and_seg(&pm);
    pm.write_u64(dir, pm.len() - 256).unwrap();
    expect_corruption(&pm, "entry outside the heap");
    // A clean flag with entries at another version.
    let (pm, _) = filled(800);
    pm.write_u64(SB_CLEAN, 1).unwrap();
    pm.write_u64(SB_CRASH_VERSION, 9).unwrap();
    expect_corruption(&pm, "clean close with stale entries");

    // Everything below is inside a segment, or an entry naming the wrong one: found on repair.
    let (pm, _) = filled(800);
    let (dir, seg) = dir_and_seg(&pm);
    pm.write_u64(dir, seg + 256).unwrap();
    expect_lazy_corruption(&pm, "directory entry into a segment");
    let (pm, _) = filled(800);
    let (dir, _) = dir_and_seg(&pm);
    let last = pm.read_u64(dir + 8 * ((1 << (pm.read_u64(SB_ROOT).unwrap() & 0xFF)) - 1));
    pm.write_u64(dir, last.unwrap()).unwrap();
    expect_lazy_corruption(&pm, "entry naming another prefix's segment");

    let (pm, _) = filled(800);
    let (_, seg) = dir_and_seg(&pm);
    pm.write_u64(seg + SEG_PATTERN, 1 << 63).unwrap();
    expect_lazy_corruption(&pm, "segment checksum");
    let (pm, _) = filled(800);
    let (_, seg) = dir_and_seg(&pm);
    let state = pm.read_u64(seg + SEG_STATE).unwrap();
    pm.write_u64(seg + SEG_STATE, state + 1).unwrap();
    expect_lazy_corruption(&pm, "local depth changed");
    pm.write_u64(seg + SEG_STATE, state | seg).unwrap();
    expect_lazy_corruption(&pm, "split target that is no valid half");

    // Bucket headers: count not the popcount; stray bits.
    for bad in [1u64 << 16, 1 << 14, 0xF << 20] {
        let (pm, _) = filled(800);
        let (_, seg) = dir_and_seg(&pm);
        let (b, _) = used_bucket(&pm, seg);
        let h = pm.read_u64(b).unwrap();
        pm.write_u64(b, h ^ bad).unwrap();
        expect_lazy_corruption(&pm, &format!("header {h:#x} ^ {bad:#x}"));
    }

    // A record whose fingerprint is wrong, one in a segment its hash does not lead to, and one in a
    // bucket that is neither its home nor the next one.
    let (pm, _) = filled(800);
    let (_, seg) = dir_and_seg(&pm);
    let (b, s) = used_bucket(&pm, seg);
    let fp = pm.read_vec(b + FP_OFF + s as u64, 1).unwrap()[0];
    pm.write(b + FP_OFF + s as u64, &[fp ^ 1]).unwrap();
    expect_lazy_corruption(&pm, "fingerprint");
    for (what, pick) in [
        ("key of another segment", 0u64),
        ("key two buckets from home", 1),
    ] {
        let (pm, _) = filled(800);
        let (_, seg) = dir_and_seg(&pm);
        let (b, s) = used_bucket(&pm, seg);
        let at = b + SLOT_OFF + 16 * s as u64;
        let k = pm.read_u64(at).unwrap();
        let (hk, bucket) = (hash(k), (b - seg) / 256 - 1);
        let stranger = (0u64..)
            .find(|&x| {
                let h = hash(x);
                let same_seg = h >> 63 == hk >> 63;
                let far = (h & 3) != bucket && (h + 1) & 3 != bucket;
                if pick == 0 {
                    !same_seg
                } else {
                    same_seg && far && (h >> 56) == (hk >> 56)
                }
            })
            .unwrap();
        pm.write_u64(at, stranger).unwrap();
        pm.write(b + FP_OFF + s as u64, &[(hash(stranger) >> 16) as u8])
            .unwrap();
        expect_lazy_corruption(&pm, what);
    }
}

#[test]
fn duplicate_with_another_value_is_corruption_same_value_is_dropped() {
    let (pm, model) = filled(800);
    let (_, seg) = dir_and_seg(&pm);
    let (b, s) = used_bucket(&pm, seg);
    let at = b + SLOT_OFF + 16 * s as u64;
    let (k, v) = (pm.read_u64(at).unwrap(), pm.read_u64(at + 8).unwrap());
    // Copy the record into a free slot of its own bucket (as an interrupted displacement would leave
    // it in the neighbour: same key, same value).
    let h = Header(pm.read_u64(b).unwrap());
    let free = h.free_slot().unwrap();
    let to = b + SLOT_OFF + 16 * free as u64;
    pm.write_u64(to, k).unwrap();
    pm.write_u64(to + 8, v).unwrap();
    pm.write(b + FP_OFF + free as u64, &[(hash(k) >> 16) as u8])
        .unwrap();
    pm.write_u64(b, h.with_bit(free, true).0).unwrap();
    let index = DashIndex::open(&pm).unwrap();
    assert_eq!(index.get(k).unwrap(), Some(v));
    assert_eq!(index.stats().dropped_duplicates, 1);
    assert_matches(&index, &model);
    drop(index);
    // The same with another value: damage.
    pm.write_u64(to + 8, v ^ 1).unwrap();
    pm.write_u64(b, Header(pm.read_u64(b).unwrap()).with_bit(free, true).0)
        .unwrap();
    expect_lazy_corruption(&pm, "duplicate key with different values");
}

#[test]
fn random_damage_never_panics() {
    let (pm, _) = filled(800);
    let index = DashIndex::open(&pm).unwrap();
    let end = index.pm_bytes_used();
    drop(index);
    let (dir, seg) = dir_and_seg(&pm);
    let mut image = vec![0u8; pm.len() as usize];
    pm.read(0, &mut image).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let (ok, bad) = testkit::random_damage::<DashIndex<_>>(
        &image,
        pm.len(),
        400,
        &mut rng,
        // Superblock and root, directory, segment and bucket headers, anywhere.
        |rng| match rng.random_range(0..5) {
            0 => rng.random_range(0..72),
            1 => dir + rng.random_range(0..64),
            2 => seg + rng.random_range(0..32),
            3 => seg + 256 * rng.random_range(1..6) + rng.random_range(0..22),
            _ => rng.random_range(0..end),
        },
        |index, rng| {
            let _ = index.insert(rng.random(), 1);
            let _ = index.get(rng.random());
        },
    );
    assert!(ok > 0 && bad > 0, "{ok} opened, {bad} refused");
}

#[test]
fn bad_config_and_tiny_region_are_invalid_arguments() {
    let pm = MmapRegion::anonymous(1 << 20, PersistMode::Adr).unwrap();
    for (buckets, stash, depth) in [(3, 1, 0), (2, 1, 0), (2048, 1, 0), (4, 9, 0), (4, 1, 33)] {
        let config = crate::index::hash::dash::DashConfig {
            segment_buckets: buckets,
            stash_buckets: stash,
            initial_depth: depth,
        };
        assert!(
            DashIndex::create(&pm, config)
                .unwrap_err()
                .is_invalid_argument()
        );
    }
    let pm = MmapRegion::anonymous(1024, PersistMode::Adr).unwrap();
    assert!(
        DashIndex::create(&pm, tiny_config())
            .unwrap_err()
            .is_invalid_argument()
    );
    // A full region refuses the split instead of corrupting anything.
    let pm = MmapRegion::anonymous(16 << 10, PersistMode::Adr).unwrap();
    let index = DashIndex::create(&pm, tiny_config()).unwrap();
    let mut model = HashMap::new();
    let err = (0..10_000u64)
        .find_map(|k| match index.insert(k, k) {
            Ok(()) => {
                model.insert(k, k);
                None
            }
            Err(e) => Some(e),
        })
        .unwrap();
    assert!(matches!(err, Error::ResourceExhausted(_)), "{err}");
    assert_matches(&index, &model);
    drop(index);
    assert_matches(&DashIndex::open(&pm).unwrap(), &model);
}
