//! Tests of the dynamized write path through the public API: flushes and merges apart, and what a writer
//! waits for. Every test asserts on the framework's counters (stalls, flusher waits, pending shards), not on
//! timing: a merge is held up by a shard factory that blocks until the test opens its gate.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the test failing

use parking_lot::{Condvar, Mutex};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use strata::lab::algo::bloom::BloomFilter;
use strata::lab::index::dynamized::core::Filters;
use strata::lab::index::dynamized::run::MergeInput;
use strata::lab::index::dynamized::{
    BuildOptions, DeletePolicy, DynOptions, Dynamized, IsamShard, Layout, RuntimeOptions, Shard,
    ShardFactory, SortedRun,
};

type Idx = Dynamized<IsamShard>;

/// Builds in memory; every merge waits until the gate is open.
#[derive(Clone, Default)]
struct Gate(Arc<(Mutex<bool>, Condvar)>);

impl Gate {
    fn open(&self) {
        *self.0.0.lock() = true;
        self.0.1.notify_all();
    }
    fn wait(&self) {
        let mut open = self.0.0.lock();
        while !*open {
            self.0.1.wait(&mut open);
        }
    }
}

struct GatedMerges(Gate);

impl ShardFactory<IsamShard> for GatedMerges {
    fn build(
        &self,
        _id: u64,
        run: SortedRun,
        _level: usize,
        opts: BuildOptions,
        _filters: (&BloomFilter, Option<&BloomFilter>),
    ) -> strata::Result<IsamShard> {
        IsamShard::build(run, opts)
    }

    fn build_merged(
        &self,
        id: u64,
        inputs: &[MergeInput<'_, IsamShard>],
        bottom: bool,
        level: usize,
        opts: BuildOptions,
        fpr: f64,
    ) -> strata::Result<Option<(IsamShard, Filters)>> {
        self.0.wait();
        strata::lab::index::dynamized::core::merge_in_memory(
            self, id, inputs, bottom, level, opts, fpr,
        )
    }
}

struct OpenOnDrop(Gate);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.open();
    }
}

/// Polls `cond` until it holds (a hang fails the test after 30 s).
fn eventually(what: &str, cond: impl Fn() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < Duration::from_secs(30), "never: {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

const NB: usize = 16;

fn gated(policy: DeletePolicy, sealed: usize, pending: usize) -> (Arc<Idx>, Gate) {
    let gate = Gate::default();
    let idx = Idx::with_parts(
        DynOptions {
            layout: Layout::Tiering,
            scale_factor: 2,
            buffer_capacity: NB,
            delete_policy: policy,
            ..DynOptions::default()
        },
        RuntimeOptions {
            max_sealed_buffers: sealed,
            max_pending_shards: pending,
            ..RuntimeOptions::default()
        },
        Box::new(GatedMerges(gate.clone())),
        Vec::new(),
        0,
    )
    .unwrap();
    (Arc::new(idx), gate)
}

/// While the merger is held up by a merge, the flusher goes on turning buffers into pending shards and the
/// writer never stalls; only once `max_pending_shards` shards and `max_sealed_buffers` buffers wait does it
/// stall, and opening the gate lets everything through with the content intact.
#[test]
fn a_long_merge_holds_up_neither_flushes_nor_the_writer() {
    for policy in [DeletePolicy::Tombstone, DeletePolicy::Tagging] {
        let (sealed, pending) = (2, 6);
        let (idx, gate) = gated(policy, sealed, pending);
        // A failing assertion must not leave the merger blocked (dropping the index joins it).
        let _open = OpenOnDrop(gate.clone());
        let mut model = BTreeMap::new();
        // Two runs fill level 0 (s = 2) without a merge; the third placement merges and blocks. Then as many
        // buffers as may be pending, as may be sealed, and the active one: no stall. (After each buffer the
        // test lets the flusher catch up, as far as it can: a writer faster than the flusher would stall
        // with every sealed buffer taken, which is allowed.)
        let buffers = 2 + pending + sealed + 1;
        for b in 0..buffers {
            for i in 0..NB {
                let k = (b * NB + i) as u64;
                idx.put(k * 3, k, 1.0).unwrap();
                model.insert(k * 3, k);
            }
            if b >= 1 {
                let want = b.min(2 + pending) as u64;
                eventually("the flusher catches up", || idx.stats().flushes >= want);
            }
        }
        let free_writes = buffers * NB;
        eventually("the pending shards fill up", || {
            idx.stats().pending == pending && idx.stats().flush_waits >= 1
        });
        let s = idx.stats();
        assert_eq!(s.stalls, 0, "{policy:?}: the writer stalled: {s:?}");
        assert!(s.merges == 0 && s.flushes as usize >= 2 + pending, "{s:?}");
        // One more buffer's worth: now every buffer is taken, and the writer stalls until the merge ends.
        let writer = {
            let idx = idx.clone();
            std::thread::spawn(move || {
                for k in free_writes as u64..(free_writes + 2 * NB) as u64 {
                    if k % 5 == 0 {
                        idx.delete((k - 40) * 3).unwrap();
                    }
                    idx.put(k * 3, k, 1.0).unwrap();
                }
            })
        };
        eventually("the writer stalls", || idx.stats().stalls >= 1);
        gate.open();
        writer.join().unwrap();
        for k in free_writes as u64..(free_writes + 2 * NB) as u64 {
            if k % 5 == 0 {
                model.remove(&((k - 40) * 3));
            }
            model.insert(k * 3, k);
        }
        idx.quiesce(true).unwrap();
        let s = idx.stats();
        assert_eq!(s.pending, 0);
        assert!(s.levels.iter().all(|l| l.len() <= 2), "{s:?}");
        assert_eq!(idx.len(), model.len() as u64, "{policy:?}");
        for (&k, &v) in &model {
            assert_eq!(idx.get(k).unwrap().map(|r| r.value), Some(v), "key {k}");
        }
    }
}

/// Flushed buffers are reused: after the first few, sealing takes a recycled buffer.
#[test]
fn flushed_buffers_are_recycled() {
    let idx = Idx::new(
        DynOptions {
            buffer_capacity: 64,
            ..DynOptions::default()
        },
        RuntimeOptions::default(),
    )
    .unwrap();
    for k in 0..64 * 200u64 {
        idx.put(k, k, 1.0).unwrap();
    }
    idx.quiesce(true).unwrap();
    let s = idx.stats();
    assert!(s.buffers_sealed >= 200, "{s:?}");
    assert!(
        s.buffers_recycled * 2 > s.buffers_sealed,
        "only {} of {} sealed buffers were recycled",
        s.buffers_recycled,
        s.buffers_sealed
    );
    assert_eq!(idx.len(), 64 * 200);
}

/// The global key filter sends only the keys that may exist to the shards: fresh keys almost never, older
/// keys always (their overwrites and deletes then resolve exactly), across its rebuilds.
#[test]
fn the_key_filter_gates_flush_lookups_without_losing_a_key() {
    for background in [false, true] {
        let idx = Idx::new(
            DynOptions {
                buffer_capacity: 100,
                scale_factor: 3,
                ..DynOptions::default()
            },
            RuntimeOptions {
                background,
                ..RuntimeOptions::default()
            },
        )
        .unwrap();
        let n = 30_000u64;
        for k in 0..n {
            idx.put(k * 7, k, 1.0).unwrap();
        }
        idx.quiesce(true).unwrap();
        let fresh = idx.stats();
        assert!(fresh.key_filter_rebuilds >= 3, "{fresh:?}");
        assert!(
            fresh.candidate_keys * 20 < fresh.resolved_keys,
            "{} of {} fresh keys were looked up",
            fresh.candidate_keys,
            fresh.resolved_keys
        );
        // Overwrite every third key and delete every fifth: each is a candidate (no false negative), and
        // the exact count shows each old version was deleted.
        let mut touched = 0;
        for k in 0..n {
            if k % 5 == 0 {
                idx.delete(k * 7).unwrap();
                touched += 1;
            } else if k % 3 == 0 {
                idx.put(k * 7, k + 1, 1.0).unwrap();
                touched += 1;
            }
        }
        idx.quiesce(true).unwrap();
        let s = idx.stats();
        assert!(
            s.candidate_keys - fresh.candidate_keys >= touched,
            "background {background}: {} candidates for {touched} old keys",
            s.candidate_keys - fresh.candidate_keys
        );
        assert_eq!(idx.len(), n - n.div_ceil(5));
        for k in (0..n).step_by(13) {
            let want = (k % 5 != 0).then_some(if k % 3 == 0 { k + 1 } else { k });
            assert_eq!(idx.get(k * 7).unwrap().map(|r| r.value), want, "key {k}");
        }
    }
}
