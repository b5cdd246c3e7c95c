//! Damage found on open (`Error::Corruption` at the damaged unit's offset, never a panic) and bad
//! arguments.

use std::collections::HashMap;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{assert_matches, tiny_config};
use crate::error::Error;
use crate::index::hash::cceh::layout::{
    EMPTY, SB_EMPTY_KEY_PRESENT, SB_ROOT, SB_SEG_LINES, SEG_STATE, hash1, hash2,
};
use crate::index::hash::cceh::{CcehConfig, CcehIndex};
use crate::index::hash::dash::eh::SEG_PATTERN;
use crate::index::hash::testkit;
use crate::storage::pm::{MmapRegion, PersistMode, Pm};

/// Segment bytes of the tiny geometry: header XPLine + 8 lines of 64 B.
const SEG_BYTES: u64 = 256 + 8 * 64;

fn filled(n: u64) -> (MmapRegion, HashMap<u64, u64>) {
    let pm = MmapRegion::anonymous(1 << 20, PersistMode::Adr).unwrap();
    let mut index = CcehIndex::create(&pm, tiny_config()).unwrap();
    let mut model = testkit::fill(&mut index, n);
    index.insert(EMPTY, 77).unwrap();
    model.insert(EMPTY, 77);
    assert!(index.global_depth() >= 3 && index.stats().splits > 8);
    (pm, model)
}

/// Panics unless opening `image` fails with `Error::Corruption` at `offset`.
fn expect_corruption_at(image: &MmapRegion, offset: u64, what: &str) {
    match CcehIndex::open(image) {
        Err(Error::Corruption { offset: at, .. }) if at == offset => {}
        other => panic!(
            "{what}: expected corruption at {offset}, got {:?}",
            other.map(|i| i.len())
        ),
    }
}

/// Offsets of the directory and of the first segment it names.
fn dir_and_seg(pm: &MmapRegion) -> (u64, u64) {
    let dir = pm.load_u64_atomic(SB_ROOT).unwrap() & !0xFF;
    (dir, pm.read_u64(dir).unwrap())
}

/// The first slot of `seg` holding a live record (its hash prefix matches the segment's pattern).
fn live_slot(pm: &MmapRegion, seg: u64) -> (u64, u64) {
    let (pattern, depth) = (
        pm.read_u64(seg + SEG_PATTERN).unwrap(),
        pm.read_u64(seg + SEG_STATE).unwrap(),
    );
    (0..32)
        .map(|s| seg + 256 + 16 * s)
        .find_map(|at| {
            let k = pm.read_u64(at).unwrap();
            let prefix = if depth == 0 {
                0
            } else {
                hash1(k) >> (64 - depth) << (64 - depth)
            };
            (k != EMPTY && prefix == pattern).then_some((at, k))
        })
        .unwrap()
}

#[test]
fn intact_region_reopens() {
    let (pm, model) = filled(800);
    let index = CcehIndex::open(&pm).unwrap();
    assert_matches(&index, &model);
}

#[test]
fn damage_is_corruption_at_its_offset() {
    let (pm, _) = filled(800);
    pm.write(0, &[0xAB]).unwrap();
    expect_corruption_at(&pm, 0, "bad magic");

    let (pm, _) = filled(800);
    pm.write_u64(SB_SEG_LINES, 16).unwrap();
    expect_corruption_at(&pm, 0, "superblock checksum");

    let (pm, _) = filled(800);
    let root = pm.read_u64(SB_ROOT).unwrap();
    pm.write_u64(SB_ROOT, pm.len()).unwrap();
    expect_corruption_at(&pm, SB_ROOT, "root past the region");
    pm.write_u64(SB_ROOT, (root & !0xFF) | 33).unwrap();
    expect_corruption_at(&pm, SB_ROOT, "global depth too large");
    pm.write_u64(SB_ROOT, ((root & !0xFF) + 64) | (root & 0xFF))
        .unwrap();
    expect_corruption_at(&pm, SB_ROOT, "misaligned directory");

    let (pm, _) = filled(800);
    pm.write_u64(SB_EMPTY_KEY_PRESENT, 2).unwrap();
    expect_corruption_at(&pm, SB_EMPTY_KEY_PRESENT, "reserved-key flag");

    // Directory entries: into a segment's slots, past the region, naming another prefix's segment.
    let (pm, _) = filled(800);
    let (dir, seg) = dir_and_seg(&pm);
    pm.write_u64(dir, seg + 256).unwrap();
    expect_corruption_at(&pm, seg + 256, "entry into a segment's slots");
    pm.write_u64(dir, pm.len() - 256).unwrap();
    expect_corruption_at(&pm, pm.len() - 256, "entry past the region");
    let (pm, _) = filled(800);
    let (dir, _) = dir_and_seg(&pm);
    let g = pm.read_u64(SB_ROOT).unwrap() & 0xFF;
    let last = pm.read_u64(dir + 8 * ((1 << g) - 1)).unwrap();
    pm.write_u64(dir, last).unwrap();
    expect_corruption_at(&pm, dir, "entry naming another prefix's segment");

    // Segment headers: pattern (checksum), depth raised (its upper entries no longer match), stray bits.
    let (pm, _) = filled(800);
    let (_, seg) = dir_and_seg(&pm);
    pm.write_u64(seg + SEG_PATTERN, 1 << 63).unwrap();
    expect_corruption_at(&pm, seg, "segment checksum");
    let (pm, _) = filled(800);
    let (dir, seg) = dir_and_seg(&pm);
    let d = pm.read_u64(seg + SEG_STATE).unwrap();
    let n = 1u64 << (g - d);
    pm.write_u64(seg + SEG_STATE, d + 1).unwrap();
    if n > 1 {
        expect_corruption_at(&pm, dir + 8 * (n / 2), "local depth raised");
    } else {
        expect_corruption_at(&pm, dir, "local depth above the global depth");
    }
    pm.write_u64(seg + SEG_STATE, d | 1 << 8).unwrap();
    expect_corruption_at(&pm, seg + SEG_STATE, "stray bits in the depth word");

    // Records: a live key moved out of both of its runs, and a key stored twice.
    let (pm, _) = filled(800);
    let (_, seg) = dir_and_seg(&pm);
    let (at, k) = live_slot(&pm, seg);
    let s = (at - seg - 256) / 16;
    let runs = [hash1(k) & 7, hash2(k) & 7];
    let in_run = |s: u64| runs.iter().any(|&a| (s / 4 + 8 - a) % 8 < 2);
    let far = (0..32).find(|&t| !in_run(t)).unwrap();
    let to = seg + 256 + 16 * far;
    let rec = pm.read_vec(at, 16).unwrap();
    pm.write(to, &rec).unwrap();
    pm.write_u64(at, EMPTY).unwrap();
    expect_corruption_at(&pm, to, "key outside its runs");
    let (pm, _) = filled(800);
    let (_, seg) = dir_and_seg(&pm);
    let (at, k) = live_slot(&pm, seg);
    let s2 = (0..32)
        .find(|&t| {
            t != s && in_run(t) && {
                let other = pm.read_u64(seg + 256 + 16 * t).unwrap();
                other != k
            }
        })
        .unwrap();
    let twin = seg + 256 + 16 * s2;
    pm.write(twin, &pm.read_vec(at, 16).unwrap()).unwrap();
    expect_corruption_at(&pm, at.max(twin), "key stored twice");
}

#[test]
fn random_damage_never_panics() {
    let (pm, _) = filled(800);
    let index = CcehIndex::open(&pm).unwrap();
    let end = index.pm_bytes_used();
    drop(index);
    let (dir, seg) = dir_and_seg(&pm);
    let mut image = vec![0u8; pm.len() as usize];
    pm.read(0, &mut image).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let (ok, bad) = testkit::random_damage::<CcehIndex<_>>(
        &image,
        pm.len(),
        400,
        &mut rng,
        // Superblock and root, directory, segment header, slots, anywhere.
        |rng| match rng.random_range(0..5) {
            0 => rng.random_range(0..88),
            1 => dir + rng.random_range(0..64),
            2 => seg + rng.random_range(0..32),
            3 => seg + 256 + rng.random_range(0..SEG_BYTES - 256),
            _ => rng.random_range(0..end),
        },
        |mut index, rng| {
            for _ in 0..50 {
                let _ = index.insert(rng.random_range(0..1000), 1);
                let _ = index.get(rng.random_range(0..1000));
                let _ = index.remove(rng.random_range(0..1000));
            }
        },
    );
    assert!(ok > 0 && bad > 0, "{ok} opened, {bad} refused");
}

#[test]
fn bad_config_and_tiny_region_are_invalid_arguments() {
    let pm = MmapRegion::anonymous(1 << 20, PersistMode::Adr).unwrap();
    for (lines, run, depth) in [
        (6, 2, 0),
        (2, 1, 0),
        (8192, 4, 0),
        (8, 0, 0),
        (8, 9, 0),
        (8, 2, 33),
    ] {
        let config = CcehConfig {
            segment_lines: lines,
            run_lines: run,
            initial_depth: depth,
        };
        let err = CcehIndex::create(&pm, config).unwrap_err();
        assert!(err.is_invalid_argument(), "{config:?}: {err}");
    }
    let pm = MmapRegion::anonymous(1024, PersistMode::Adr).unwrap();
    assert!(
        CcehIndex::create(&pm, tiny_config())
            .unwrap_err()
            .is_invalid_argument()
    );
    // A full region refuses the split instead of corrupting anything.
    let pm = MmapRegion::anonymous(16 << 10, PersistMode::Adr).unwrap();
    let mut index = CcehIndex::create(&pm, tiny_config()).unwrap();
    let mut model = HashMap::new();
    let err = (1..10_000u64)
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
    assert_matches(&CcehIndex::open(&pm).unwrap(), &model);
}
