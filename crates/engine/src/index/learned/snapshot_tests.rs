//! Model test of snapshots against copies of a `BTreeMap`: writes (puts of values kept in the record and
//! of longer ones, removals, batches), compactions and merges run while up to four snapshots are live,
//! taken and dropped at random, so writes overwrite records in place when no snapshot needs the old
//! version and keep it when one does (`slot.rs`). Each snapshot must read exactly the copy of the model
//! taken with it (PROPTEST_CASES raises the case count).

use super::tests::tiny;
use super::*;
use crate::index::Direction;
use proptest::prelude::*;
use std::collections::BTreeMap;

#[derive(Debug, Clone)]
enum Op {
    Put(u64, Vec<u8>),
    Del(u64),
    Batch(Vec<(u64, Option<Vec<u8>>)>),
    Take,
    Release(usize),
    SnapGet(usize, u64),
    SnapScan(usize, u64, u64, bool),
    Maintain,
    CompactAll,
}

fn key() -> impl Strategy<Value = u64> {
    prop_oneof![0u64..64, (0u64..16).prop_map(|k| k << 58)]
}

fn op() -> impl Strategy<Value = Op> {
    // Up to 24 bytes: values kept in the record (≤ 16) and values in out-of-line versions.
    let value = proptest::collection::vec(any::<u8>(), 0..24);
    prop_oneof![
        8 => (key(), value.clone()).prop_map(|(k, v)| Op::Put(k, v)),
        3 => key().prop_map(Op::Del),
        1 => proptest::collection::vec((key(), proptest::option::of(value)), 0..5).prop_map(Op::Batch),
        2 => Just(Op::Take),
        1 => any::<usize>().prop_map(Op::Release),
        3 => (any::<usize>(), key()).prop_map(|(i, k)| Op::SnapGet(i, k)),
        1 => (any::<usize>(), key(), key(), any::<bool>()).prop_map(|(i, a, b, r)| Op::SnapScan(i, a.min(b), a.max(b), r)),
        1 => Just(Op::Maintain),
        1 => Just(Op::CompactAll),
    ]
}

fn scan_snapshot(s: &Snapshot<'_>, lo: u64, hi: u64, rev: bool) -> Vec<(u64, Vec<u8>)> {
    let dir = if rev {
        Direction::Reverse
    } else {
        Direction::Forward
    };
    let mut out = Vec::new();
    s.scan(lo, hi, dir, usize::MAX, &mut |k, v| {
        out.push((k, v.to_vec()));
        true
    });
    out
}

fn scan_model(m: &BTreeMap<u64, Vec<u8>>, lo: u64, hi: u64, rev: bool) -> Vec<(u64, Vec<u8>)> {
    let it = m.range(lo..=hi).map(|(k, v)| (*k, v.clone()));
    if rev {
        it.rev().collect()
    } else {
        it.collect()
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn snapshots_read_the_state_they_were_taken_at(
        initial in proptest::collection::btree_map(key(), proptest::collection::vec(any::<u8>(), 0..20), 0..40),
        ops in proptest::collection::vec(op(), 1..160),
    ) {
        let ix = LearnedIndex::bulk_load(tiny(), initial.clone().into_iter());
        let mut model = initial;
        let mut snaps: Vec<(Snapshot<'_>, BTreeMap<u64, Vec<u8>>)> = Vec::new();
        let mut out = Vec::new();
        for op in ops {
            match op {
                Op::Put(k, v) => { ix.put(k, &v); model.insert(k, v); }
                Op::Del(k) => prop_assert_eq!(ix.remove(k), model.remove(&k).is_some()),
                Op::Batch(ops) => {
                    let refs: Vec<(u64, Option<&[u8]>)> = ops.iter().map(|(k, v)| (*k, v.as_deref())).collect();
                    ix.apply(&refs);
                    for (k, v) in ops {
                        match v { Some(v) => { model.insert(k, v); } None => { model.remove(&k); } }
                    }
                }
                Op::Take => if snaps.len() < 4 { snaps.push((ix.snapshot(), model.clone())); },
                Op::Release(i) => if !snaps.is_empty() { snaps.remove(i % snaps.len()); },
                Op::SnapGet(i, k) => if !snaps.is_empty() {
                    let (s, m) = &snaps[i % snaps.len()];
                    let found = s.get(k, &mut out);
                    prop_assert_eq!(found.then(|| out.clone()), m.get(&k).cloned(), "snapshot {} key {}", s.seq(), k);
                },
                Op::SnapScan(i, lo, hi, rev) => if !snaps.is_empty() {
                    let (s, m) = &snaps[i % snaps.len()];
                    prop_assert_eq!(scan_snapshot(s, lo, hi, rev), scan_model(m, lo, hi, rev));
                },
                Op::Maintain => { ix.maintain(); }
                Op::CompactAll => ix.compact_all(),
            }
            let mut newest = Vec::new();
            for (&k, v) in model.iter().take(3) {
                prop_assert!(ix.get(k, &mut newest) && &newest == v);
            }
        }
        for (s, m) in &snaps {
            prop_assert_eq!(scan_snapshot(s, 0, u64::MAX, false), scan_model(m, 0, u64::MAX, false));
        }
        drop(snaps);
        ix.compact_all();
        let now = ix.snapshot();
        prop_assert_eq!(scan_snapshot(&now, 0, u64::MAX, true), scan_model(&model, 0, u64::MAX, true));
    }
}
