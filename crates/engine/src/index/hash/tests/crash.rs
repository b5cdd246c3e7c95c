//! Crash consistency: a deterministic workload (inserts, updates, deletes; several resizes, compactions
//! and log-space flushes) is run on a `ShadowPm`; run `r` takes a crash image at the `r+1`-th fence of every
//! operation, so the runs together crash at every persist point of the workload. Each image is recovered
//! and checked: every acknowledged operation is reflected, only the operation in flight may or may not be,
//! no record has a value never written, no key is visited twice, and the invariants hold.

use super::tiny_config;
use crate::index::hash::HashIndex;
use crate::index::hash::testkit::{self, CrashSpec};
use crate::storage::pm::{PersistMode, ShadowPm};

const SPEC: CrashSpec<HashIndex<ShadowPm>> = CrashSpec {
    region: 1 << 20,
    keys: 700,
    extra_inserts: 40,
    create: |pm| HashIndex::create(pm, tiny_config()),
};

fn crash_every_persist_point(mode: PersistMode, ops: usize) -> (u64, u64) {
    testkit::crash_every_persist_point(
        &SPEC,
        mode,
        ops,
        |_| {},
        |index| {
            assert!(index.stats().grows >= 2, "{:?}", index.stats());
            assert!(
                index.stats().forced_flushes > 0 && index.stats().rebuilds > index.stats().grows
            );
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
    let (images, fences) = crash_every_persist_point(PersistMode::Eadr, 1200);
    assert!(images + 3 >= fences, "{images} images for {fences} fences");
}
