//! Random operation sequences against `std::collections::HashMap`, with reopen (drop the index and
//! recover from the same region) at random points.

use proptest::prelude::*;

use super::tiny_config;
use crate::index::hash::testkit::{self, ModelOp, cases, model_op};
use crate::index::hash::{HashConfig, HashIndex};
use crate::storage::pm::{MmapRegion, PersistMode, Pm};

/// A fresh index of `config` in an anonymous ADR region of `region_bytes`, run against the model with
/// reopens (the load stays at most 7/8).
fn model_run_in(
    region_bytes: u64,
    config: HashConfig,
    ops: Vec<ModelOp>,
) -> Result<(), TestCaseError> {
    let pm = MmapRegion::anonymous(region_bytes, PersistMode::Adr).unwrap();
    let index = HashIndex::create(pm, config).unwrap();
    testkit::model_run(index, ops, HashIndex::recover_with_threads, Some(0.875))
}

/// Up to `max_ops` operations on `keys` keys, with reopens on 1–4 recovery threads among them.
fn ops_with_reopens(keys: u64, max_ops: usize) -> impl Strategy<Value = Vec<ModelOp>> {
    prop::collection::vec(
        model_op(keys, (1usize..5).prop_map(ModelOp::Reopen)),
        1..max_ops,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn matches_hashmap_across_reopens(
        ops in ops_with_reopens(320, 1200)
    ) {
        model_run_in(1 << 20, tiny_config(), ops)?;
    }

    /// The experiments' non-default settings: a log of exactly 8 lines that never grows with the table,
    /// and D-buckets of `dbucket_slots` slots (a reopened handle goes back to 15).
    #[test]
    fn matches_hashmap_with_a_fixed_log_and_small_dbuckets(
        dbucket_slots in 1usize..15,
        ops in ops_with_reopens(320, 1200)
    ) {
        model_run_in(1 << 20, HashConfig { log_lines: 8, fixed_log: true, dbucket_slots, ..tiny_config() }, ops)?;
    }

    /// P-buckets of 1 and 2 KiB (4 and 8 home chunks; the P-bucket sweep of Exp 12): a reopen adopts the
    /// size the region records.
    #[test]
    fn matches_hashmap_with_small_pbuckets(
        pbucket_bytes in prop::sample::select(vec![1024u64, 2048]),
        ops in ops_with_reopens(320, 1200)
    ) {
        model_run_in(1 << 20, HashConfig { pbucket_bytes, ..tiny_config() }, ops)?;
    }

    /// P-buckets of 8 and 16 KiB (32 and 64 home chunks: 240 and 720 home slots in the DRAM bucket's
    /// extension), with enough keys for doublings and long chains compacted through the larger redo area;
    /// a reopen adopts the size.
    #[test]
    fn matches_hashmap_with_large_pbuckets(
        pbucket_bytes in prop::sample::select(vec![8192u64, 16384]),
        ops in ops_with_reopens(2400, 4000)
    ) {
        model_run_in(4 << 20, HashConfig { pbucket_bytes, ..tiny_config() }, ops)?;
    }
}

/// The P-bucket size is the region's: a reopen adopts it (capacity and layout follow it), a size this build
/// cannot hold is refused at create (`InvalidArgument`) and at open (`Incompatible`, never a panic).
#[test]
fn the_pbucket_size_is_recorded_and_adopted_or_refused() {
    use crate::error::Error;
    use crate::index::hash::layout::{SB_BUCKET_BYTES, SB_CHECK};
    for bad in [0u64, 512, 1536, 12288, 32768] {
        let pm = MmapRegion::anonymous(1 << 20, PersistMode::Eadr).unwrap();
        let config = HashConfig {
            pbucket_bytes: bad,
            ..tiny_config()
        };
        assert!(
            matches!(
                HashIndex::create(pm, config),
                Err(Error::InvalidArgument(_))
            ),
            "{bad}"
        );
    }
    let pm = MmapRegion::anonymous(1 << 20, PersistMode::Eadr).unwrap();
    let config = HashConfig {
        pbucket_bytes: 2048,
        ..tiny_config()
    };
    let index = HashIndex::create(&pm, config).unwrap();
    for k in 0..2000u64 {
        index.insert(k * 7919, k).unwrap();
    }
    let (buckets, capacity) = (index.buckets(), index.capacity());
    assert_eq!(capacity, buckets * 120);
    drop(index);
    let index = HashIndex::open(&pm).unwrap();
    assert_eq!((index.buckets(), index.capacity()), (buckets, capacity));
    for k in 0..2000u64 {
        assert_eq!(index.get(k * 7919).unwrap(), Some(k));
    }
    index.check_invariants().unwrap();
    drop(index);
    // A superblock recording a size this build does not hold (checksum rewritten: not damage).
    let mut sb = [0u8; SB_CHECK as usize];
    pm.read(0, &mut sb).unwrap();
    sb[SB_BUCKET_BYTES as usize..SB_BUCKET_BYTES as usize + 8]
        .copy_from_slice(&32768u64.to_le_bytes());
    pm.write(0, &sb).unwrap();
    pm.write_u64(SB_CHECK, xxhash_rust::xxh3::xxh3_64(&sb))
        .unwrap();
    match HashIndex::open(&pm) {
        Err(Error::Incompatible(m)) => assert!(m.contains("32768"), "{m}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn load_factor_saw_tooth_between_7_16_and_7_8() {
    let pm = MmapRegion::anonymous(8 << 20, PersistMode::Eadr).unwrap();
    let config = HashConfig {
        log_lines: 1024,
        ..tiny_config()
    };
    let index = HashIndex::create(&pm, config).unwrap();
    let mut peaks = Vec::new();
    let mut last = 0.0;
    for k in 0..6000u64 {
        index
            .insert(k.wrapping_mul(0x9E37_79B9_7F4A_7C15), k)
            .unwrap();
        let lf = index.load_factor();
        if lf < last {
            // A doubling halves the load: from at most 7/8 (plus its slices' writes) to half that.
            assert!(
                (lf * 2.0 - last).abs() < 1e-9 + 2.0 / index.capacity() as f64,
                "{last} -> {lf}"
            );
            assert!(last <= peak_bound(index.capacity() / 2), "{last}");
            peaks.push(last);
        }
        last = lf;
    }
    eprintln!("load-factor peaks before each doubling: {peaks:?}");
    assert!(peaks.len() >= 4, "{peaks:?}");
    // Buckets that fill up before the table is 7/8 full borrow pool chunks, so every doubling comes at
    // (nearly) 7/8.
    assert!(peaks.iter().all(|&p| p > 0.87), "{peaks:?}");
    assert_eq!(index.stats().grows as usize, peaks.len());
    index.check_invariants().unwrap();
}

/// At a size where bucket loads spread widely (1,024 buckets at the last peak), the doublings still come
/// at 7/8: the buckets above average borrow pool chunks instead of forcing an early doubling.
#[test]
fn load_factor_peaks_at_7_8_with_many_buckets() {
    let pm = MmapRegion::anonymous(64 << 20, PersistMode::Eadr).unwrap();
    let index = HashIndex::create(&pm, HashConfig::default()).unwrap();
    let mut peaks = Vec::new();
    let mut last = 0.0;
    for k in 0..120_000u64 {
        index
            .insert(k.wrapping_mul(0x9E37_79B9_7F4A_7C15), k)
            .unwrap();
        let lf = index.load_factor();
        if lf < last {
            assert!(last <= peak_bound(index.capacity() / 2), "{last}");
            peaks.push(last);
        }
        last = lf;
    }
    eprintln!("load-factor peaks: {peaks:?}, {:?}", index.stats());
    assert!(peaks.len() >= 4, "{peaks:?}");
    assert!(peaks.iter().all(|&p| p > 0.87), "{peaks:?}");
    assert!(index.stats().overflow_chunks > 0, "{:?}", index.stats());
    index.check_invariants().unwrap();
}

/// Highest load a table of `slots` home slots reaches before its doubling switches: 7/8 when the doubling
/// starts, plus one key per write while it runs — a slice of [`SLICE`] units per write, one unit per bucket
/// moved or 64 KiB of redo areas, logs and pool zeroed (at most 16 units for these tests' logs of up to
/// 512 KiB), and the write that finds the last slice done.
fn peak_bound(slots: u64) -> f64 {
    let buckets = slots / crate::index::hash::layout::HOME_SLOTS as u64; // default P-buckets
    let writes = (buckets + 16).div_ceil(crate::index::hash::grow::SLICE) + 1;
    0.875 + writes as f64 / slots as f64
}
