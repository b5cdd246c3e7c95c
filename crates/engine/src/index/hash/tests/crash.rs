//! Crash consistency: a deterministic workload (inserts, updates, deletes; several resizes, compactions
//! and log-space flushes) is run on a `ShadowPm`; run `r` takes a crash image at the `r+1`-th fence of every
//! operation, so the runs together crash at every persist point of the workload. Each image is recovered
//! and checked: every acknowledged operation is reflected, only the operation in flight may or may not be,
//! no record has a value never written, no key is visited twice, and the invariants hold.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::tiny_config;
use crate::index::hash::layout::ChunkHead;
use crate::index::hash::testkit::{self, CrashSpec};
use crate::index::hash::{HashConfig, HashIndex};
use crate::storage::pm::{PersistMode, Pm, ShadowPm, XPLINE};

const SPEC: CrashSpec<HashIndex<ShadowPm>> = CrashSpec {
    region: 1 << 20,
    keys: 700,
    extra_inserts: 40,
    create: |pm| HashIndex::create(pm, tiny_config()),
};

/// A region whose every XPLine looks like a full committed chunk of random keys (what an older
/// generation or another index may have left): a torn first write of a chunk must never revive it.
fn stale(pm: ShadowPm) -> crate::error::Result<HashIndex<ShadowPm>> {
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let mut img = vec![0u8; pm.len() as usize];
    for xp in img.chunks_exact_mut(XPLINE as usize) {
        rng.fill(&mut xp[..]);
        xp[..8].copy_from_slice(&ChunkHead::new(15, 0, 1).0.to_le_bytes());
    }
    pm.write(0, &img)?;
    pm.persist(0, pm.len())?;
    HashIndex::create(pm, tiny_config())
}

fn crash_every_persist_point(mode: PersistMode, ops: usize) -> (u64, u64) {
    crash_spec_every_persist_point(&SPEC, mode, ops)
}

fn crash_spec_every_persist_point(
    spec: &CrashSpec<HashIndex<ShadowPm>>,
    mode: PersistMode,
    ops: usize,
) -> (u64, u64) {
    testkit::crash_every_persist_point(
        spec,
        mode,
        ops,
        |_| {},
        |index| {
            let s = index.stats();
            assert!(s.grows >= 2, "{s:?}");
            assert!(s.forced_flushes > 0 && s.compactions > 0, "{s:?}");
        },
    )
}

#[test]
fn adr_crash_at_every_persist_point() {
    let (images, fences) = crash_every_persist_point(PersistMode::Adr, 1800);
    // Create's fences are not crashed at; every other fence is.
    assert!(images + 3 >= fences, "{images} images for {fences} fences");
}

#[test]
fn eadr_crash_at_every_persist_point() {
    let (images, fences) = crash_every_persist_point(PersistMode::Eadr, 1600);
    assert!(images + 3 >= fences, "{images} images for {fences} fences");
}

#[test]
fn adr_crash_over_stale_contents() {
    let spec = CrashSpec {
        create: stale,
        ..SPEC
    };
    let (images, fences) = crash_spec_every_persist_point(&spec, PersistMode::Adr, 1800);
    assert!(images + 3 >= fences, "{images} images for {fences} fences");
}

/// Few keys, so that updates and deletes dominate: one bucket compacted again and again through its redo
/// area (crashes between writing a redo, committing it, placing it and clearing it).
#[test]
fn adr_crash_in_repeated_compactions() {
    let spec = CrashSpec { keys: 40, ..SPEC };
    let (images, fences) = testkit::crash_every_persist_point(
        &spec,
        PersistMode::Adr,
        1200,
        |_| {},
        |index| {
            let s = index.stats();
            assert!(s.compactions >= 3 && s.grows == 0, "{s:?}");
        },
    );
    assert!(images + 3 >= fences, "{images} images for {fences} fences");
}

/// P-buckets of 1 KiB (4 home chunks; the P-bucket sweep of Exp 12): chains leave the P-bucket for the
/// pool after 60 slots, so pool chunks, compactions and doublings all come with the smaller chain. Every
/// persist point is crashed at under ADR and eADR.
#[test]
fn crash_at_every_persist_point_with_1_kib_pbuckets() {
    let spec = CrashSpec {
        create: |pm| {
            HashIndex::create(
                pm,
                HashConfig {
                    pbucket_bytes: 1024,
                    ..tiny_config()
                },
            )
        },
        ..SPEC
    };
    for (mode, ops) in [(PersistMode::Adr, 1500), (PersistMode::Eadr, 1200)] {
        let (images, fences) = testkit::crash_every_persist_point(
            &spec,
            mode,
            ops,
            |_| {},
            |index| {
                let s = index.stats();
                assert!(s.grows >= 2 && s.overflow_chunks > 0, "{s:?}");
                assert_eq!(index.capacity(), index.buckets() * 60);
            },
        );
        assert!(images + 3 >= fences, "{images} images for {fences} fences");
    }
}

/// P-buckets of 8 and 16 KiB (32 and 64 home chunks; the P-bucket sweep of Exp 12): the home slots past
/// the 240 the DRAM bucket holds inline live in its extension, chains grow past the 30 chunks of a 4 KiB
/// bucket's, and compactions of such chains go through the larger redo area (a header of 2 or 3 XPLines).
/// Every persist point is crashed at under ADR (8 KiB also under eADR).
#[test]
fn crash_at_every_persist_point_with_large_pbuckets() {
    fn spec(pbucket_bytes: u64) -> CrashSpec<HashIndex<ShadowPm>> {
        CrashSpec {
            region: 4 << 20,
            keys: 1400,
            create: if pbucket_bytes == 8192 {
                |pm| {
                    HashIndex::create(
                        pm,
                        HashConfig {
                            pbucket_bytes: 8192,
                            ..tiny_config()
                        },
                    )
                }
            } else {
                |pm| {
                    HashIndex::create(
                        pm,
                        HashConfig {
                            pbucket_bytes: 16384,
                            ..tiny_config()
                        },
                    )
                }
            },
            ..SPEC
        }
    }
    for (bytes, mode, ops, grows) in [
        (16384, PersistMode::Adr, 3400, 1),
        (8192, PersistMode::Adr, 2400, 1),
        (8192, PersistMode::Eadr, 2000, 1),
    ] {
        let (images, fences) = testkit::crash_every_persist_point(
            &spec(bytes),
            mode,
            ops,
            |_| {},
            |index| {
                let s = index.stats();
                assert!(s.grows >= grows && s.compactions > 0, "{bytes}: {s:?}");
                let home = bytes as usize / 256;
                assert_eq!(index.capacity(), index.buckets() * home as u64 * 15);
                // Some chain reaches the home chunks past the 16 held inline; at 16 KiB, past a 4 KiB
                // P-bucket's longest chain (30 chunks).
                let g = index.current();
                let longest = g.buckets.iter().map(|b| b.shape().chunks()).max();
                let past = if bytes == 16384 { 30 } else { 16 };
                assert!(longest > Some(past), "{bytes}: longest chain {longest:?}");
            },
        );
        assert!(images + 3 >= fences, "{images} images for {fences} fences");
    }
}

/// The experiments' settings: logs of exactly 8 lines (16 records) that never grow with the table, and
/// D-buckets written back at 5 staged slots (partly filled tail chunks rewritten again and again); the
/// 16-record ring fills so fast that log space forces D-buckets out too. Every persist point is crashed at
/// under ADR. (Doublings with a fixed log: `recovery` and the model test.)
#[test]
fn adr_crash_with_a_fixed_log_and_small_dbuckets() {
    let spec = CrashSpec {
        create: |pm| {
            HashIndex::create(
                pm,
                HashConfig {
                    initial_buckets: 2,
                    log_lines: 8,
                    fixed_log: true,
                    dbucket_slots: 5,
                    ..tiny_config()
                },
            )
        },
        ..SPEC
    };
    let (images, fences) = testkit::crash_every_persist_point(
        &spec,
        PersistMode::Adr,
        1200,
        |_| {},
        |index| {
            let s = index.stats();
            assert!(s.forced_flushes > 0 && s.compactions > 0, "{s:?}");
            // Flushes at 5 and 10 staged slots go into chunks already holding some (at 15: full).
            assert!(s.partial_chunk_flushes * 2 > s.flushes, "{s:?}");
        },
    );
    assert!(images + 3 >= fences, "{images} images for {fences} fences");
}
