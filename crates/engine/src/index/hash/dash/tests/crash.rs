//! Crash consistency: a deterministic workload (inserts, updates, deletes; many segment splits, several
//! directory doublings, displacements and stash inserts) runs on a `ShadowPm`; run `r` takes a crash image
//! at the `r+1`-th fence of every operation, so the runs together crash at every persist point. Each image
//! (random eviction of unflushed lines, 8 B tearing) is recovered and checked: every acknowledged
//! operation is reflected, only the operation in flight may or may not be, no value never written
//! appears, no key is visited twice, and the invariants hold. Recovery is lazy: right after `open` every
//! key is looked up, so the segments are repaired on their first touch by an operation (the self-check
//! repairs the rest); the test asserts that the repairs ran and that some finished a split or dropped a
//! displacement duplicate on that path.

use super::tiny_config;
use crate::index::hash::dash::{DashIndex, DashStats};
use crate::index::hash::testkit::{self, CrashSpec};
use crate::storage::pm::{PersistMode, ShadowPm};

const SPEC: CrashSpec<DashIndex<ShadowPm>> = CrashSpec {
    region: 256 << 10,
    keys: 1000,
    // The recovered index keeps working (and splits) and recovers again.
    extra_inserts: 120,
    create: |pm| DashIndex::create(pm, tiny_config()),
};

fn crash_every_persist_point(mode: PersistMode, ops: usize) -> (u64, u64) {
    let (mut splits, mut dups) = (0u64, 0u64);
    let mut on_touch = DashStats::default();
    let counts = testkit::crash_every_persist_point_with(
        &SPEC,
        mode,
        ops,
        |index| {
            // Opening touched no segment; lookups repair the segments they reach.
            assert_eq!(index.stats().repaired_segments, 0);
            for k in 0..SPEC.keys {
                index.get(k).unwrap();
            }
            let s = index.stats();
            assert!(s.repaired_segments > 0, "{s:?}");
            on_touch.repaired_segments += s.repaired_segments;
            on_touch.recovered_splits += s.recovered_splits;
            on_touch.dropped_duplicates += s.dropped_duplicates;
        },
        |index| {
            splits += index.stats().recovered_splits;
            dups += index.stats().dropped_duplicates;
        },
        |index| {
            let s = index.stats();
            eprintln!("{mode:?} workload: {s:?}, depth {}", index.global_depth());
            assert!(s.splits >= 8 && s.doublings >= 3, "{s:?}");
            assert!(s.displacements > 0 && s.stash_inserts > 0, "{s:?}");
        },
    );
    eprintln!(
        "{mode:?}: recovery finished {splits} splits, dropped {dups} duplicates; on first touch by a \
         lookup: {on_touch:?}"
    );
    // Some images caught a committed, unfinished split and a half-done displacement, and lookups found
    // some of them.
    assert!(splits > 0 && dups > 0, "{splits} splits, {dups} duplicates");
    assert!(
        on_touch.recovered_splits > 0 && on_touch.dropped_duplicates > 0,
        "{on_touch:?}"
    );
    counts
}

#[test]
fn adr_crash_at_every_persist_point() {
    let (images, fences) = crash_every_persist_point(PersistMode::Adr, 2400);
    // Create's fences are not crashed at; every other fence is.
    assert!(images + 3 >= fences, "{images} images for {fences} fences");
}

#[test]
fn eadr_crash_at_every_persist_point() {
    let (images, fences) = crash_every_persist_point(PersistMode::Eadr, 1600);
    assert!(images + 3 >= fences, "{images} images for {fences} fences");
}
