//! Counts heap allocations of the learned index's write path with a counting global allocator (per
//! thread): an overwrite of a value of at most 16 bytes allocates nothing when no snapshot is live, and
//! one version while a snapshot may read the value it replaces; inserts of new keys into a group's delta
//! buffer allocate only when the buffer's table or slot arena grows (amortized well under one per insert).

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the test failing

use strata::lab::index::learned::{LearnedIndex, LearnedOptions};
mod counting;
use counting::allocations;

#[global_allocator]
static GLOBAL: counting::Counting = counting::Counting;

/// An index of the keys 0, 10, … 163,830 with 8-byte values, which compacts no group during the tests'
/// inserts (4 groups of 4096 take 1,000 new keys each).
fn keys_by_tens() -> LearnedIndex {
    let opts = LearnedOptions {
        compact_at: 4096,
        inline_compact_at: 4096,
        ..LearnedOptions::default()
    };
    LearnedIndex::bulk_load(opts, (0..16_384u64).map(|k| (k * 10, vec![1u8; 8])))
}

#[test]
fn writes_allocate_only_what_snapshots_and_growth_need() {
    let ix = keys_by_tens();
    // Warm-up: the thread's epoch registration.
    ix.put(0, &[2; 8]);

    let overwrites = allocations(|| {
        for k in 0..16_384u64 {
            ix.put(k * 10, &[3; 8]);
        }
    });
    assert_eq!(overwrites, 0, "in-place overwrites allocated");

    let inserts = allocations(|| {
        for k in 0..4_000u64 {
            ix.put(k * 40 + 5, &[4; 16]);
        }
    });
    assert!(
        inserts <= 4_000 / 10,
        "{inserts} allocations for 4,000 inserts"
    );

    let snap = ix.snapshot();
    let kept = allocations(|| {
        for k in 0..1_000u64 {
            ix.put(k * 10, &[5; 8]);
        }
    });
    assert_eq!(
        kept, 1_000,
        "one version per write while a snapshot is live"
    );
    let again = allocations(|| {
        for k in 0..1_000u64 {
            ix.put(k * 10, &[6; 8]);
        }
    });
    // The version the first round wrote is newer than the snapshot: no one reads it, so the second round
    // overwrites it in place (the snapshot's version stays in the chain).
    assert_eq!(
        again, 0,
        "overwrites of versions newer than every snapshot allocated"
    );
    let mut out = Vec::new();
    for k in 0..1_000u64 {
        assert!(snap.get(k * 10, &mut out) && out == [3; 8]);
        assert!(ix.get(k * 10, &mut out) && out == [6; 8]);
    }
    drop(snap);
    let retiring = allocations(|| {
        for k in 0..1_000u64 {
            ix.put(k * 10, &[7; 8]);
        }
    });
    // These writes retire the 1,000 versions the snapshot kept: crossbeam-epoch queues them in bags of
    // 64, allocating one queue node per full bag.
    assert!(retiring <= 1_000 / 64 + 1, "{retiring} allocations");
    let after = allocations(|| {
        for k in 0..1_000u64 {
            ix.put(k * 10, &[8; 8]);
        }
    });
    assert_eq!(
        after, 0,
        "with the snapshot gone, overwrites are in place again"
    );
    for k in 0..4_000u64 {
        assert!(ix.get(k * 40 + 5, &mut out) && out == [4; 16]);
    }
}

/// Delta buffers grow with memory the maintenance thread made ready (`recycle.rs`): inserts of new keys
/// allocate nothing on the writer's thread, so the writer never takes the allocator's lock that the
/// maintainer holds while it frees replaced groups (with glibc, `free` goes to the arena of the allocating
/// thread). Before, each growth of a buffer's record chunks or table was a `malloc` of the writer's.
#[test]
fn buffer_growth_takes_memory_the_maintainer_made_ready() {
    let ix = keys_by_tens();
    ix.put(0, &[2; 8]);
    // The maintenance thread's work after a pass: it makes blocks of every size ready.
    std::thread::scope(|s| {
        s.spawn(|| ix.free_released());
    });
    // 4 groups, 200 new keys each: every buffer grows through chunks of 8 … 128 records and tables of
    // 16 … 256 entries.
    let inserts = allocations(|| {
        for k in 0..800u64 {
            ix.put(k * 200 + 5, &[4; 8]);
        }
    });
    assert_eq!(inserts, 0, "{inserts} allocations for 800 new keys");
    let mut out = Vec::new();
    for k in 0..800u64 {
        assert!(ix.get(k * 200 + 5, &mut out) && out == [4; 8]);
    }
}
