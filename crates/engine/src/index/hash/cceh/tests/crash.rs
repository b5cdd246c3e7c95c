//! Crash consistency: a deterministic workload (inserts, updates, deletes; many copy-on-write segment
//! splits and several directory doublings) runs on a `ShadowPm`; run `r` takes a crash image at the
//! `r+1`-th fence of every operation, so the runs together crash at every persist point. Each image
//! (random eviction of unflushed lines, 8 B tearing) is recovered and checked: every acknowledged
//! operation is reflected, only the operation in flight may or may not be, no value never written
//! appears, no key is visited twice, and the invariants hold.

use super::tiny_config;
use crate::index::hash::cceh::CcehIndex;
use crate::index::hash::testkit::{self, CrashSpec};
use crate::storage::pm::{PersistMode, ShadowPm};

const SPEC: CrashSpec<CcehIndex<ShadowPm>> = CrashSpec {
    region: 256 << 10,
    keys: 1000,
    // The recovered index keeps working (and splits) and recovers again.
    extra_inserts: 120,
    create: |pm| CcehIndex::create(pm, tiny_config()),
};

fn crash_every_persist_point(mode: PersistMode, ops: usize) -> (u64, u64) {
    let mut rolled_forward = 0u64;
    let counts = testkit::crash_every_persist_point(
        &SPEC,
        mode,
        ops,
        |index| rolled_forward += index.stats().recovered_splits,
        |index| {
            let s = index.stats();
            eprintln!("{mode:?} workload: {s:?}, depth {}", index.global_depth());
            assert!(s.splits >= 20 && s.doublings >= 4, "{s:?}");
            assert!(s.stale_reused > 0, "{s:?}");
        },
    );
    eprintln!("{mode:?}: recovery finished {rolled_forward} interrupted splits");
    // Some images caught a split between its commit and its last step.
    assert!(rolled_forward > 0);
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
