//! Tests of `tree`.

use super::*;
use crate::index::betree::message::tests::adder;
use crate::storage::{FileKind, IoStats, MemVfs, PageFile, PageFileOptions, Vfs};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

fn tree(frames: usize, stats: Arc<IoStats>) -> BeTreeCore {
    tree_with(frames, stats, NodeFormat::VARIABLE)
}

fn tree_with(frames: usize, stats: Arc<IoStats>, format: NodeFormat) -> BeTreeCore {
    let vfs: Arc<dyn Vfs> = Arc::new(MemVfs::new());
    let opts = PageFileOptions {
        page_size: 4096,
        direct: false,
    };
    let pf = PageFile::create(&vfs, Path::new("/t.pages"), opts, stats).unwrap();
    BeTreeCore::create(
        BufferPool::new(pf, frames * 4096, None),
        0.5,
        format,
        adder(),
    )
    .unwrap()
}

/// Every record of `range` in `dir` order, through `scan`, stopping after `max`.
fn scanned(
    t: &BeTreeCore,
    range: &KeyRange,
    dir: Direction,
    max: usize,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    let n = t
        .scan(range, dir, max, &mut |k, v| {
            out.push((k.to_vec(), v.to_vec()));
            Ok(true)
        })
        .unwrap();
    assert_eq!(n, out.len());
    out
}

fn model_range(
    model: &BTreeMap<Vec<u8>, Vec<u8>>,
    range: &KeyRange,
    dir: Direction,
    max: usize,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    let it = model
        .range::<Vec<u8>, _>((range.lo.clone(), range.hi.clone()))
        .map(|(k, v)| (k.clone(), v.clone()));
    match dir {
        Direction::Forward => it.take(max).collect(),
        Direction::Reverse => it.rev().take(max).collect(),
    }
}

fn bound(kind: u8, k: u16) -> Bound<Vec<u8>> {
    match kind % 3 {
        0 => Bound::Unbounded,
        1 => Bound::Included(key(k)),
        _ => Bound::Excluded(key(k)),
    }
}

#[derive(Debug, Clone)]
enum Op {
    Put(u16, usize),
    Delete(u16),
    Upsert(u16, u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (any::<u16>(), 0usize..120).prop_map(|(k, n)| Op::Put(k % 3000, n)),
        2 => any::<u16>().prop_map(|k| Op::Delete(k % 3000)),
        1 => (any::<u16>(), 1u64..9).prop_map(|(k, d)| Op::Upsert(k % 3000, d)),
    ]
}

fn key(k: u16) -> Vec<u8> {
    k.to_be_bytes().to_vec()
}

proptest! {
    #![proptest_config(crate::index::dynamized::alias_shard::stats::proptest_config(8))]

    /// Random batches of puts, deletes and upserts against a `BTreeMap`, through a small cache: every
    /// key's value and every range agree with the model, and reads write nothing.
    #[test]
    fn matches_a_btreemap_model(batches in prop::collection::vec(prop::collection::vec(op(), 1..200), 1..40)) {
        let stats = Arc::new(IoStats::new());
        let mut t = tree(16, stats.clone());
        let merge = adder();
        let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        for batch in &batches {
            let mut ops = Vec::new();
            for o in batch {
                match *o {
                    Op::Put(k, n) => {
                        let v = vec![k as u8; n];
                        ops.push(WriteOp::Put { key: key(k), value: v.clone() });
                        model.insert(key(k), v);
                    }
                    Op::Delete(k) => {
                        ops.push(WriteOp::Delete { key: key(k) });
                        model.remove(&key(k));
                    }
                    Op::Upsert(k, d) => {
                        // Upserts go one by one, after the batch so far.
                        t.apply_batch(&std::mem::take(&mut ops)).unwrap();
                        t.upsert(&key(k), &d.to_be_bytes()).unwrap();
                        let v = merge(&key(k), model.get(&key(k)).map(Vec::as_slice), &d.to_be_bytes());
                        model.insert(key(k), v.unwrap());
                    }
                }
            }
            t.apply_batch(&ops).unwrap();
        }
        // Everything dirty goes to disk first: from here on, any write would be a read's.
        t.commit(|_| Vec::new()).unwrap();
        let writes = stats.snapshot().kind(FileKind::Pages).writes;
        for k in (0..3000u16).step_by(7) {
            prop_assert_eq!(t.get(&key(k)).unwrap(), model.get(&key(k)).cloned(), "key {}", k);
        }
        let all: Vec<(Vec<u8>, Vec<u8>)> = model.clone().into_iter().collect();
        prop_assert_eq!(t.range(&[], None).unwrap(), all);
        let part: Vec<(Vec<u8>, Vec<u8>)> = model
            .range(key(500)..key(1700))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        prop_assert_eq!(t.range(&key(500), Some(&key(1700))).unwrap(), part);
        prop_assert_eq!(stats.snapshot().kind(FileKind::Pages).writes, writes, "a read wrote");
    }
}

proptest! {
    #![proptest_config(crate::index::dynamized::alias_shard::stats::proptest_config(8))]

    /// The in-page binary search of fixed-width formats (2-byte keys, 8-byte counters) and scans in both
    /// directions with every kind of bound agree with a `BTreeMap`; deletes leave zeroed value slots
    /// that never surface.
    #[test]
    fn fixed_width_pages_and_reverse_scans_match_a_model(
        batches in prop::collection::vec(prop::collection::vec((any::<u16>(), 0u8..4, 1u64..1000), 1..300), 1..30),
        ranges in prop::collection::vec((0u8..3, any::<u16>(), 0u8..3, any::<u16>(), 1usize..400), 1..12),
    ) {
        let format = NodeFormat { key_width: Some(2), value_width: Some(8) };
        let mut t = tree_with(12, Arc::new(IoStats::new()), format);
        let merge = adder();
        let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        for batch in &batches {
            for &(k, what, x) in batch {
                let k = key(k % 5000);
                match what {
                    0 => {
                        t.apply_batch(&[WriteOp::Delete { key: k.clone() }]).unwrap();
                        model.remove(&k);
                    }
                    1 => {
                        t.upsert(&k, &x.to_be_bytes()).unwrap();
                        let v = merge(&k, model.get(&k).map(Vec::as_slice), &x.to_be_bytes());
                        model.insert(k, v.unwrap());
                    }
                    _ => {
                        t.apply_batch(&[WriteOp::Put { key: k.clone(), value: x.to_be_bytes().to_vec() }]).unwrap();
                        model.insert(k, x.to_be_bytes().to_vec());
                    }
                }
            }
        }
        for k in (0..5000u16).step_by(13) {
            prop_assert_eq!(t.get(&key(k)).unwrap(), model.get(&key(k)).cloned(), "key {}", k);
        }
        for &(lk, lo, hk, hi, max) in &ranges {
            let (lo, hi) = (bound(lk, lo % 5100), bound(hk, hi % 5100));
            // BTreeMap::range panics on inverted bounds: keep them ordered.
            let inverted = match (&lo, &hi) {
                (Bound::Included(a) | Bound::Excluded(a), Bound::Included(b) | Bound::Excluded(b)) => {
                    a > b || (a == b && !(matches!(lo, Bound::Included(_)) && matches!(hi, Bound::Included(_))))
                }
                _ => false,
            };
            if inverted {
                continue;
            }
            let range = KeyRange { lo, hi };
            for dir in [Direction::Forward, Direction::Reverse] {
                prop_assert_eq!(
                    scanned(&t, &range, dir, max),
                    model_range(&model, &range, dir, max),
                    "{:?} {:?} max {}", range, dir, max
                );
            }
        }
    }
}

/// Deleting most of a grown tree merges underfull children back together, and what is left reads back.
#[test]
fn underfull_children_merge_with_a_neighbour() {
    let format = NodeFormat {
        key_width: Some(4),
        value_width: Some(4),
    };
    let mut t = tree_with(32, Arc::new(IoStats::new()), format);
    let put = |i: u32| WriteOp::Put {
        key: i.to_be_bytes().to_vec(),
        value: i.to_be_bytes().to_vec(),
    };
    let all: Vec<WriteOp> = (0..60_000u32).map(put).collect();
    for chunk in all.chunks(1000) {
        t.apply_batch(chunk).unwrap();
    }
    let grown = t.height();
    assert!(grown >= 3, "height {grown}");
    let dels: Vec<WriteOp> = (0..60_000u32)
        .filter(|i| i % 50 != 0)
        .map(|i| WriteOp::Delete {
            key: i.to_be_bytes().to_vec(),
        })
        .collect();
    for chunk in dels.chunks(1000) {
        t.apply_batch(chunk).unwrap();
    }
    // Reads see the survivors whether the tombstones reached the leaves or not …
    let left = t.range(&[], None).unwrap();
    let want: Vec<(Vec<u8>, Vec<u8>)> = (0..60_000u32)
        .filter(|i| i % 50 == 0)
        .map(|i| (i.to_be_bytes().to_vec(), i.to_be_bytes().to_vec()))
        .collect();
    assert_eq!(left, want);
    // … and pushing them down (writes into the same keys' neighbourhood) merges emptied leaves.
    for round in 0..20u32 {
        let ops: Vec<WriteOp> = (0..3000u32)
            .map(|i| WriteOp::Delete { key: (i * 20 + round % 20 + 1).to_be_bytes().to_vec() })
            .filter(|o| !matches!(o, WriteOp::Delete { key } if u32::from_be_bytes(key[..].try_into().unwrap()) % 50 == 0))
            .collect();
        t.apply_batch(&ops).unwrap();
    }
    assert!(t.flush_stats().merges > 0, "{:?}", t.flush_stats());
    assert_eq!(t.range(&[], None).unwrap(), want);
    assert!(t.height() <= grown);
}

#[test]
fn grows_in_height_and_shrinks_back() {
    let mut t = tree(64, Arc::new(IoStats::new()));
    let ops: Vec<WriteOp> = (0..20_000u32)
        .map(|i| WriteOp::Put {
            key: i.wrapping_mul(2_654_435_761).to_be_bytes().to_vec(),
            value: vec![1; 24],
        })
        .collect();
    for chunk in ops.chunks(500) {
        t.apply_batch(chunk).unwrap();
    }
    assert!(t.height() >= 3, "height {}", t.height());
    let all = t.range(&[], None).unwrap();
    for w in all.windows(2) {
        assert!(
            w[0].0 < w[1].0,
            "range out of order: {:?} then {:?}",
            w[0].0,
            w[1].0
        );
    }
    assert_eq!(all.len(), 20_000);
    let dels: Vec<WriteOp> = ops
        .iter()
        .map(|o| match o {
            WriteOp::Put { key, .. } => WriteOp::Delete { key: key.clone() },
            _ => unreachable!(),
        })
        .collect();
    for chunk in dels.chunks(500) {
        t.apply_batch(chunk).unwrap();
    }
    assert!(t.range(&[], None).unwrap().is_empty());
    let too_big = vec![0u8; t.max_entry_bytes() + 1];
    assert!(
        t.apply_batch(&[WriteOp::Put {
            key: vec![1],
            value: too_big
        }])
        .is_err()
    );
}
