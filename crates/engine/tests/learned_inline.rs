//! Who compacts a learned group whose delta buffer passed `inline_compact_at`: with a maintenance thread
//! running, the writer hands the group to it (and goes on inserting) up to twice that bound; without one, the
//! writer compacts it itself. A writer's compaction of a full group took 8–15 ms of its CPU at 10M keys
//! (the `write_stalls` probe, durability `none`), whenever the thread's pass reached the group late.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the test failing

use std::sync::Arc;
use std::time::{Duration, Instant};
use strata::lab::index::learned::{LearnedIndex, LearnedOptions, Maintainer};

const AT: usize = 256;

fn index() -> Arc<LearnedIndex> {
    let opts = LearnedOptions {
        compact_at: AT,
        inline_compact_at: AT,
        ..LearnedOptions::default()
    };
    Arc::new(LearnedIndex::new(opts))
}

/// Inserts keys `from..to` of one group (a fresh index has one) as fast as it can.
fn insert(ix: &LearnedIndex, from: u64, to: u64) {
    for k in from..to {
        ix.put(k, &[1; 8]);
    }
}

#[test]
fn with_a_maintenance_thread_the_writer_hands_an_overfull_group_over() {
    for round in 0..5u64 {
        let ix = index();
        let _m = Maintainer::start(&ix, Duration::from_millis(1));
        // Past the bound, below twice it: the writer never compacts.
        let base = round * 1_000_000;
        insert(&ix, base, base + (AT as u64 * 3) / 2);
        assert_eq!(
            ix.learned_stats().inline_compactions,
            0,
            "round {round}: the writer compacted the group itself"
        );
        // The thread does, soon.
        let t = Instant::now();
        while ix.learned_stats().compactions == 0 {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "round {round}: the maintenance thread never compacted the group"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

#[test]
fn without_a_maintenance_thread_the_writer_compacts() {
    let ix = index();
    insert(&ix, 0, AT as u64 + 1);
    assert_eq!(ix.learned_stats().inline_compactions, 1);
    // A thread that stopped hands nothing over any more.
    let ix = index();
    drop(Maintainer::start(&ix, Duration::from_millis(1)));
    insert(&ix, 0, AT as u64 + 1);
    assert!(ix.learned_stats().inline_compactions >= 1);
}
