//! Model-based tests: random operation sequences against a `BTreeMap`, with reopen, simulated power loss
//! (unsynced writes dropped) and injected I/O errors. The database and the model must agree on every read;
//! after a crash the database must hold exactly the state after some prefix of the acknowledged writes that
//! is at least as long as the last durable point.
//!
//! Cases: `PROPTEST_CASES` (default 32 per test).

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the test failing

use proptest::prelude::*;
use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;
use strata::Config;
use strata::options::BeTreeOptions;
use strata::options::{DeletePolicy, DynOptions, Layout, RuntimeOptions};
use strata::options::{HashOptions, PersistChoice};
use strata::vfs::FaultVfs;
use strata::vfs::MemVfs;
use strata::vfs::Vfs;
use strata::{
    Direction, Durability, Error, IndexConfig, IndexKind, KeyRange, Options, RawDb, TypeKind,
};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

#[derive(Debug, Clone)]
enum Op {
    Put(Vec<u8>, Vec<u8>, Durability),
    Del(Vec<u8>, Durability),
    Batch(Vec<(Vec<u8>, Option<Vec<u8>>)>, Durability),
    /// Puts (or deletes, without values) a run of consecutive u64 keys in one batch: deep trees, mass deletes.
    Run(u64, u64, bool, Durability),
    /// Adds a u64 operand to a u64 value (a Bε-tree's `u64-add` merge operator).
    Merge(Vec<u8>, u64, Durability),
    Get(Vec<u8>),
    Scan(Vec<u8>, Vec<u8>, bool, usize),
    Count(Vec<u8>, Vec<u8>),
    Flush,
    Checkpoint,
    Reopen,
    Crash,
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(32)
}

fn durability() -> impl Strategy<Value = Durability> {
    prop_oneof![
        Just(Durability::None),
        Just(Durability::Flush),
        Just(Durability::Sync)
    ]
}

/// Keys and values for a u64/u64 database (8-byte big-endian encodings) over a small key domain.
fn u64_key() -> BoxedStrategy<Vec<u8>> {
    (0u64..400).prop_map(|k| k.to_be_bytes().to_vec()).boxed()
}
fn u64_value() -> BoxedStrategy<Vec<u8>> {
    any::<u64>().prop_map(|v| v.to_be_bytes().to_vec()).boxed()
}
/// Keys and values for a bytes/bytes database: short keys from a small alphabet, and a third of them after a
/// long shared start (as `user:000000012345`: B+-tree nodes whose keys share more than the 7 prefix bytes a
/// node header holds); values from empty to a few pages long (overflow chains).
fn bytes_key() -> BoxedStrategy<Vec<u8>> {
    let letters = || prop_oneof![Just(b'a'), Just(b'b'), Just(b'c')];
    prop_oneof![
        2 => proptest::collection::vec(letters(), 0..12),
        1 => proptest::collection::vec(letters(), 0..6)
            .prop_map(|tail| [&b"bb/tenant-000000"[..], &tail].concat()),
    ]
    .boxed()
}
fn bytes_value() -> BoxedStrategy<Vec<u8>> {
    prop_oneof![
        4 => proptest::collection::vec(any::<u8>(), 0..64),
        1 => proptest::collection::vec(any::<u8>(), 900..9000),
    ]
    .boxed()
}
/// Values for a bytes/bytes Bε-tree: up to its entry limit (about a quarter page with 4 KiB pages).
fn betree_value() -> BoxedStrategy<Vec<u8>> {
    prop_oneof![
        4 => proptest::collection::vec(any::<u8>(), 0..64),
        1 => proptest::collection::vec(any::<u8>(), 300..980),
    ]
    .boxed()
}

fn ops(
    key: BoxedStrategy<Vec<u8>>,
    value: BoxedStrategy<Vec<u8>>,
    len: usize,
) -> impl Strategy<Value = Vec<Op>> {
    ops_with_runs(key, value, len, 0, 1)
}

fn ops_with_runs(
    key: BoxedStrategy<Vec<u8>>,
    value: BoxedStrategy<Vec<u8>>,
    len: usize,
    run_weight: u32,
    run_span: u64,
) -> impl Strategy<Value = Vec<Op>> {
    let mut arms: Vec<(u32, BoxedStrategy<Op>)> = vec![
        (
            30,
            (key.clone(), value.clone(), durability())
                .prop_map(|(k, v, d)| Op::Put(k, v, d))
                .boxed(),
        ),
        (
            8,
            (key.clone(), durability())
                .prop_map(|(k, d)| Op::Del(k, d))
                .boxed(),
        ),
        (
            4,
            (
                proptest::collection::vec((key.clone(), proptest::option::of(value)), 1..40),
                durability(),
            )
                .prop_map(|(b, d)| Op::Batch(b, d))
                .boxed(),
        ),
        (10, key.clone().prop_map(Op::Get).boxed()),
        (
            4,
            (key.clone(), key.clone(), any::<bool>(), 0usize..600)
                .prop_map(|(a, b, r, l)| Op::Scan(a, b, r, l))
                .boxed(),
        ),
        (
            4,
            (key.clone(), key)
                .prop_map(|(a, b)| Op::Count(a, b))
                .boxed(),
        ),
        (1, Just(Op::Flush).boxed()),
        (1, Just(Op::Checkpoint).boxed()),
        (1, Just(Op::Reopen).boxed()),
        (1, Just(Op::Crash).boxed()),
    ];
    if run_weight > 0 {
        arms.push((
            run_weight,
            (0u64..run_span, 1u64..run_span, any::<bool>(), durability())
                .prop_map(|(s, n, put, d)| Op::Run(s, n, put, d))
                .boxed(),
        ));
    }
    let op = proptest::strategy::Union::new_weighted(arms);
    proptest::collection::vec(op, 1..len)
}

fn options(vfs: Arc<dyn Vfs>) -> Options {
    Options {
        vfs,
        // Eight 4 KiB frames: nearly every access misses, so eviction and write-back run all the time.
        cache_bytes: 32 << 10,
        durability: None,
        checkpoint_wal_bytes: 16 << 10,
        dynamized: RuntimeOptions::default(),
    }
}

/// Which index family a case runs on, with its options (from the engine's registry), and whether a
/// dynamized index reconstructs in the background.
#[derive(Debug, Clone)]
struct Family {
    index: IndexConfig,
    background: bool,
}

impl Family {
    fn of(index: IndexConfig) -> Family {
        Family {
            index,
            background: true,
        }
    }
}

fn config(family: &Family, key: TypeKind, value: TypeKind) -> Config {
    Config {
        index: family.index.clone(),
        key,
        value,
        ..Config::default()
    }
}

fn family_options(family: &Family, vfs: Arc<dyn Vfs>) -> Options {
    let mut o = options(vfs);
    o.dynamized.background = family.background;
    o
}

/// Dynamized structures: every layout and delete policy, small buffers and scale factors, small δ; half of
/// them with a small memory budget, so that the deeper levels (or all of them, with a budget of 1 byte) are
/// disk shards read page by page.
fn dynamized() -> impl Strategy<Value = Family> {
    (
        prop_oneof![
            Just(Layout::Leveling),
            Just(Layout::Tiering),
            Just(Layout::Bsm)
        ],
        prop_oneof![Just(DeletePolicy::Tombstone), Just(DeletePolicy::Tagging)],
        1usize..48,
        2usize..5,
        prop_oneof![Just(0.05), Just(0.3), Just(1.0)],
        any::<bool>(),
        prop_oneof![2 => Just(0u64), 1 => Just(1u64), 1 => 4_096u64..160_000],
    )
        .prop_map(
            |(layout, delete_policy, buffer, scale, delta, background, memory_budget)| Family {
                index: IndexConfig::Dynamized(DynOptions {
                    layout,
                    delete_policy,
                    buffer_capacity: buffer,
                    scale_factor: scale,
                    max_delete_proportion: delta,
                    memory_budget,
                    ..DynOptions::default()
                }),
                background,
            },
        )
}

/// ε from very write-optimized to B-tree-like, with the `u64-add` merge operator if `merges`.
fn betree(merges: bool) -> impl Strategy<Value = Family> {
    prop_oneof![Just(0.3), Just(0.5), Just(0.8), Just(1.0)].prop_map(move |epsilon| {
        Family::of(IndexConfig::BeTree(BeTreeOptions {
            epsilon,
            merge_operator: merges.then(|| "u64-add".to_string()),
        }))
    })
}

/// Hash indexes: every persistence mode (on the in-memory file system the region is an image written back at
/// every fence, and synced there in msync mode), tiny logs (forced D-bucket flushes, tail advances) and tiny
/// first tables (many doublings and rebuilds).
fn hash() -> impl Strategy<Value = Family> {
    (
        prop_oneof![
            Just(PersistChoice::Auto),
            Just(PersistChoice::Eadr),
            Just(PersistChoice::Adr),
            Just(PersistChoice::Msync)
        ],
        prop_oneof![Just(8u64), Just(16), Just(64), Just(8192)],
        prop_oneof![Just(1u64), Just(2), Just(16)],
    )
        .prop_map(|(persist, log_lines, initial_buckets)| {
            Family::of(IndexConfig::Hash(HashOptions {
                persist,
                log_lines,
                initial_buckets,
                ..HashOptions::default()
            }))
        })
}

/// Hash indexes with bytes values (in `hash.values`): the variations of [`hash`], with a value log small
/// enough that its cleaning runs in most cases (48 KiB) or the 1 MiB one it never laps.
fn hash_bytes() -> impl Strategy<Value = Family> {
    (hash(), prop_oneof![Just(48u64 << 10), Just(1u64 << 20)]).prop_map(|(mut family, bytes)| {
        if let IndexConfig::Hash(o) = &mut family.index {
            o.value_log_bytes = bytes;
        }
        family
    })
}

/// Values of a bytes-valued hash database: empty up to its 256-byte limit.
fn hash_bytes_value() -> BoxedStrategy<Vec<u8>> {
    prop_oneof![
        4 => proptest::collection::vec(any::<u8>(), 0..24),
        1 => proptest::collection::vec(any::<u8>(), 24..=256),
    ]
    .boxed()
}

/// Every family of the registry with its default options (a family added to the engine is tested here
/// before it has tests of its own).
fn registry_family() -> impl Strategy<Value = Family> {
    proptest::sample::select(IndexKind::ALL.to_vec()).prop_map(|k| Family::of(k.default_config()))
}

/// Every third single put of `ops` as a merge of a small operand instead.
fn with_merges(ops: Vec<Op>) -> Vec<Op> {
    ops.into_iter()
        .enumerate()
        .map(|(i, op)| match op {
            Op::Put(k, v, d) if i % 3 == 0 => Op::Merge(k, u64::from(v[7] % 5), d),
            op => op,
        })
        .collect()
}

/// Every record of the database: a full scan, or for a family without key order (which has no scan) a
/// lookup of every key any write named, checked against `len` (so no other key can be present).
fn contents(db: &RawDb, touched: &Keys) -> Model {
    if db.capabilities().ordered {
        let all: Result<Vec<_>, _> = db.range(KeyRange::all(), Direction::Forward).collect();
        return all.expect("full scan").into_iter().collect();
    }
    let mut found = Model::new();
    for k in touched {
        if let Some(v) = db.get(k).expect("get") {
            found.insert(k.clone(), v);
        }
    }
    assert_eq!(
        db.len(),
        found.len() as u64,
        "records beyond the keys ever written"
    );
    found
}

/// `get_many` against the model: every key a write named (deleted ones are absent), in a scrambled order
/// with repeats, in batches of sizes around the B+-tree's interleaving group (16) so that groups hold
/// keys of one leaf, of many leaves, and the same key twice.
fn check_get_many(db: &RawDb, model: &Model, touched: &Keys) {
    let mut keys: Vec<&[u8]> = touched.iter().map(|k| &k[..]).collect();
    let n = keys.len();
    keys.extend(touched.iter().step_by(3).map(|k| &k[..]));
    let len = keys.len();
    for i in 0..len {
        keys.swap(i, (i * 7919 + 13) % len);
    }
    let mut at = 0;
    for size in [1usize, 16, 7, 17, 40, 2].into_iter().cycle() {
        if at >= keys.len() {
            break;
        }
        let batch = &keys[at..(at + size).min(keys.len())];
        let got = db.get_many(batch).expect("get_many");
        assert_eq!(got.len(), batch.len(), "one answer per key");
        for (k, v) in batch.iter().zip(&got) {
            assert_eq!(v.as_ref(), model.get(*k), "get_many {k:?} (of {n} keys)");
        }
        at += size;
    }
}

/// Every key a write of the run named (what `contents` looks up when there is no key order).
type Keys = std::collections::BTreeSet<Vec<u8>>;

/// Adds the keys `op` writes to `keys`.
fn touch(keys: &mut Keys, op: &Op) {
    match op {
        Op::Put(k, ..) | Op::Del(k, _) | Op::Merge(k, ..) => {
            keys.insert(k.clone());
        }
        Op::Batch(b, _) => keys.extend(b.iter().map(|(k, _)| k.clone())),
        Op::Run(start, n, ..) => keys.extend((*start..start + n).map(|k| k.to_be_bytes().to_vec())),
        _ => {}
    }
}

/// True for the error an index without key order gives to scans, ranges, counts and samples.
fn is_no_key_order(e: &Error) -> bool {
    matches!(e, Error::InvalidArgument(m) if m.contains("has no key order"))
}

fn range_of(a: &[u8], b: &[u8]) -> KeyRange {
    let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
    KeyRange::inclusive(lo.to_vec(), hi.to_vec())
}

/// Applies a write to the model.
fn apply(model: &mut Model, op: &Op) {
    match op {
        Op::Put(k, v, _) => {
            model.insert(k.clone(), v.clone());
        }
        Op::Del(k, _) => {
            model.remove(k);
        }
        Op::Batch(b, _) => {
            for (k, v) in b {
                match v {
                    Some(v) => model.insert(k.clone(), v.clone()),
                    None => model.remove(k),
                };
            }
        }
        Op::Run(start, n, put, _) => {
            for k in *start..start + n {
                let key = k.to_be_bytes().to_vec();
                if *put {
                    model.insert(key, (k * 7).to_be_bytes().to_vec());
                } else {
                    model.remove(&key);
                }
            }
        }
        Op::Merge(k, operand, _) => {
            let old = model.get(k).map_or(0, |v| {
                u64::from_be_bytes(v[..].try_into().expect("u64 value"))
            });
            model.insert(k.clone(), old.wrapping_add(*operand).to_be_bytes().to_vec());
        }
        _ => unreachable!("not a write"),
    }
}

fn is_sync(op: &Op) -> bool {
    matches!(
        op,
        Op::Put(_, _, Durability::Sync)
            | Op::Del(_, Durability::Sync)
            | Op::Batch(_, Durability::Sync)
            | Op::Run(_, _, _, Durability::Sync)
            | Op::Merge(_, _, Durability::Sync)
    )
}

fn write(db: &RawDb, op: &Op) -> strata::Result<()> {
    use strata::WriteOp;
    match op {
        Op::Put(k, v, d) => db.write(
            &[WriteOp::Put {
                key: k.clone(),
                value: v.clone(),
            }],
            Some(*d),
        ),
        Op::Del(k, d) => db.write(&[WriteOp::Delete { key: k.clone() }], Some(*d)),
        Op::Batch(b, d) => {
            let ops: Vec<WriteOp> = b
                .iter()
                .map(|(k, v)| match v {
                    Some(v) => WriteOp::Put {
                        key: k.clone(),
                        value: v.clone(),
                    },
                    None => WriteOp::Delete { key: k.clone() },
                })
                .collect();
            db.write(&ops, Some(*d))
        }
        Op::Run(start, n, put, d) => {
            let ops: Vec<WriteOp> = (*start..start + n)
                .map(|k| {
                    let key = k.to_be_bytes().to_vec();
                    if *put {
                        WriteOp::Put {
                            key,
                            value: (k * 7).to_be_bytes().to_vec(),
                        }
                    } else {
                        WriteOp::Delete { key }
                    }
                })
                .collect();
            db.write(&ops, Some(*d))
        }
        Op::Merge(k, operand, d) => db.write(
            &[WriteOp::Merge {
                key: k.clone(),
                operand: operand.to_be_bytes().to_vec(),
            }],
            Some(*d),
        ),
        _ => unreachable!("not a write"),
    }
}

/// Checks a read against the model. Returns Err(e) if the database reported an error. On a family without key
/// order, scans, iterators and counts must all fail with the typed "no key order" error.
fn read(db: &RawDb, model: &Model, op: &Op) -> Result<(), Error> {
    if matches!(op, Op::Scan(..) | Op::Count(..)) && !db.capabilities().ordered {
        let (a, b) = match op {
            Op::Scan(a, b, ..) | Op::Count(a, b) => (a, b),
            _ => unreachable!(),
        };
        let r = range_of(a, b);
        let e = db
            .scan_into(&r, Direction::Forward, 10, &mut Vec::new())
            .unwrap_err();
        if !is_no_key_order(&e) {
            return Err(e);
        }
        let e = db
            .range(r.clone(), Direction::Reverse)
            .next()
            .expect("an error")
            .unwrap_err();
        assert!(is_no_key_order(&e), "{e}");
        let e = db.count_range(&r).unwrap_err();
        assert!(is_no_key_order(&e), "{e}");
        let e = db.sample_range(&r, 3, &mut rand::rng()).unwrap_err();
        assert!(is_no_key_order(&e), "{e}");
        return Ok(());
    }
    match op {
        Op::Get(k) => {
            let got = db.get(k)?;
            assert_eq!(got.as_ref(), model.get(k), "get {k:?}");
        }
        Op::Scan(a, b, reverse, limit) => {
            let r = range_of(a, b);
            let dir = if *reverse {
                Direction::Reverse
            } else {
                Direction::Forward
            };
            let mut got = Vec::new();
            db.scan_into(&r, dir, *limit, &mut got)?;
            let matching = model
                .range::<Vec<u8>, _>((r.lo.clone(), r.hi.clone()))
                .map(|(k, v)| (k.clone(), v.clone()));
            let want: Vec<_> = if *reverse {
                matching.rev().take(*limit).collect()
            } else {
                matching.take(*limit).collect()
            };
            assert_eq!(got, want, "scan {r:?} reverse={reverse} limit={limit}");
            // The chunked iterator must agree too.
            let it: Vec<_> = db
                .range(r.clone(), dir)
                .take(*limit)
                .collect::<Result<_, _>>()?;
            assert_eq!(it, want, "iterator {r:?}");
        }
        Op::Count(a, b) => {
            let r = range_of(a, b);
            let want = model
                .range::<Vec<u8>, _>((r.lo.clone(), r.hi.clone()))
                .count() as u64;
            assert_eq!(db.count_range(&r)?, want, "count {r:?}");
            let lo = if a <= b { a } else { b };
            let open = KeyRange {
                lo: Bound::Excluded(lo.clone()),
                hi: Bound::Unbounded,
            };
            let want = model
                .range::<Vec<u8>, _>((open.lo.clone(), Bound::Unbounded))
                .count() as u64;
            assert_eq!(db.count_range(&open)?, want, "count {open:?}");
        }
        _ => unreachable!("not a read"),
    }
    Ok(())
}

/// The states after each acknowledged write since the last durable point: `states[0]` is durable.
struct History {
    states: Vec<Model>,
}

impl History {
    fn new(model: Model) -> Self {
        History {
            states: vec![model],
        }
    }
    fn current(&self) -> &Model {
        self.states.last().expect("non-empty")
    }
    fn push(&mut self, m: Model) {
        self.states.push(m);
    }
    fn durable(&mut self) {
        let m = self.states.pop().expect("non-empty");
        self.states = vec![m];
    }
    /// After a crash, the database must equal one of the states, the latest ones first preferred.
    fn settle(&mut self, got: &Model) {
        let pos = self.states.iter().rposition(|s| s == got);
        let Some(pos) = pos else {
            panic!(
                "after a crash the database ({} records) matches none of the {} states since the last durable point",
                got.len(),
                self.states.len()
            );
        };
        self.states.truncate(pos + 1);
        self.durable();
    }
}

fn run(key: TypeKind, value: TypeKind, ops: Vec<Op>) {
    run_family(
        &Family::of(IndexKind::BTree.default_config()),
        key,
        value,
        ops,
    )
}

fn run_family(family: &Family, key: TypeKind, value: TypeKind, ops: Vec<Op>) {
    let mem = Arc::new(MemVfs::new());
    let dir = Path::new("/db");
    // Each handle reaches the files through its own fault switch: a simulated power loss turns the lost
    // handle's switch off, so its background reconstruction (which writes shard files when levels live on
    // disk) stops like the threads of a dead process instead of writing into the recovered directory.
    let mut life = FaultVfs::new(mem.clone());
    let mut vfs: Arc<dyn Vfs> = Arc::new(life.clone());
    let options = |vfs: Arc<dyn Vfs>| family_options(family, vfs);
    let mut db = Some(
        RawDb::create(dir, &config(family, key, value), &options(vfs.clone())).expect("create"),
    );
    let mut hist = History::new(Model::new());
    let mut touched = Keys::new();
    for op in &ops {
        let d = db.as_ref().expect("open");
        touch(&mut touched, op);
        match op {
            Op::Put(..) | Op::Del(..) | Op::Batch(..) | Op::Run(..) | Op::Merge(..) => {
                write(d, op).expect("write");
                let mut m = hist.current().clone();
                apply(&mut m, op);
                hist.push(m);
                if is_sync(op) {
                    hist.durable();
                }
            }
            Op::Get(..) | Op::Scan(..) | Op::Count(..) => {
                read(d, hist.current(), op).expect("read")
            }
            Op::Flush => {
                d.flush().expect("flush");
                hist.durable();
            }
            Op::Checkpoint => {
                d.checkpoint().expect("checkpoint");
                hist.durable();
            }
            Op::Reopen => {
                db.take().expect("open").close().expect("close");
                hist.durable();
                let d = RawDb::open(dir, &options(vfs.clone())).expect("reopen");
                assert_eq!(&contents(&d, &touched), hist.current(), "after reopen");
                check_get_many(&d, hist.current(), &touched);
                db = Some(d);
            }
            Op::Crash => {
                // Power loss: the handle vanishes without closing; unsynced bytes are dropped.
                std::mem::forget(db.take());
                life.fail_after(0);
                mem.crash();
                life = FaultVfs::new(mem.clone());
                vfs = Arc::new(life.clone());
                let d = RawDb::open(dir, &options(vfs.clone())).expect("reopen after crash");
                let got = contents(&d, &touched);
                hist.settle(&got);
                d.check().expect("check after crash");
                db = Some(d);
            }
        }
    }
    let d = db.expect("open");
    if std::env::var_os("STRATA_MODEL_VERBOSE").is_some() {
        eprintln!(
            "final: {} records, height {}",
            d.len(),
            d.stats().unwrap().tree.height
        );
    }
    assert_eq!(&contents(&d, &touched), hist.current());
    check_get_many(&d, hist.current(), &touched);
    assert_eq!(d.len(), hist.current().len() as u64);
    d.check().expect("final check");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), max_shrink_iters: 2000, ..ProptestConfig::default() })]

    #[test]
    fn u64_db_matches_model(ops in ops(u64_key(), u64_value(), 400)) {
        run(TypeKind::U64, TypeKind::U64, ops);
    }

    /// Runs of thousands of keys: multi-level trees, splits of inner nodes, mass deletes that free leaves and
    /// collapse the root.
    #[test]
    fn deep_u64_db_matches_model(ops in ops_with_runs(u64_key(), u64_value(), 100, 6, 50_000)) {
        run(TypeKind::U64, TypeKind::U64, ops);
    }

    #[test]
    fn bytes_db_matches_model(ops in ops(bytes_key(), bytes_value(), 200)) {
        run(TypeKind::Bytes, TypeKind::Bytes, ops);
    }

    /// The dynamized family under every layout and delete policy, with reopen and power loss.
    #[test]
    fn dynamized_db_matches_model(family in dynamized(), ops in ops_with_runs(u64_key(), u64_value(), 300, 2, 2_000)) {
        run_family(&family, TypeKind::U64, TypeKind::U64, ops);
    }

    /// The Bε-tree with u64 keys and values, merges, deep runs, reopen and power loss.
    #[test]
    fn betree_u64_db_matches_model(family in betree(true), ops in ops_with_runs(u64_key(), u64_value(), 200, 4, 20_000)) {
        run_family(&family, TypeKind::U64, TypeKind::U64, with_merges(ops));
    }

    /// The Bε-tree with byte-string keys and values (variable-width nodes).
    #[test]
    fn betree_bytes_db_matches_model(family in betree(false), ops in ops(bytes_key(), betree_value(), 200)) {
        run_family(&family, TypeKind::Bytes, TypeKind::Bytes, ops);
    }

    /// Every family of the registry, default options, u64 keys and values, merges where it has them.
    #[test]
    fn every_registered_family_matches_model(family in registry_family(), ops in ops_with_runs(u64_key(), u64_value(), 200, 2, 3_000)) {
        let ops = if family.index.capabilities().merge { with_merges(ops) } else { ops };
        run_family(&family, TypeKind::U64, TypeKind::U64, ops);
    }

    /// The hash family (no key order: contents by lookups, ordered reads refused) with reopen and power loss,
    /// multi-operation batches and runs of thousands of keys.
    #[test]
    fn hash_db_matches_model(family in hash(), ops in ops_with_runs(u64_key(), u64_value(), 300, 2, 3_000)) {
        run_family(&family, TypeKind::U64, TypeKind::U64, ops);
    }

    /// The hash family with bytes values up to 256 B (a value log beside the region, cleaned as it fills),
    /// with reopen and power loss, multi-operation batches and runs.
    #[test]
    fn hash_bytes_db_matches_model(family in hash_bytes(), ops in ops_with_runs(u64_key(), hash_bytes_value(), 300, 2, 300)) {
        run_family(&family, TypeKind::U64, TypeKind::Bytes, ops);
    }

    /// Injected I/O errors on the hash family (its region's write-backs and syncs, `hash.batch`, the WAL).
    #[test]
    fn hash_injected_faults_never_return_wrong_data(
        family in hash(),
        ops in ops_with_runs(u64_key(), u64_value(), 300, 2, 3_000),
        fail_after in 0u64..3000,
    ) {
        faults(&family, TypeKind::U64, ops, fail_after)?;
    }

    /// Injected I/O errors on the hash family with bytes values (`hash.values` too).
    #[test]
    fn hash_bytes_injected_faults_never_return_wrong_data(
        family in hash_bytes(),
        ops in ops_with_runs(u64_key(), hash_bytes_value(), 300, 2, 300),
        fail_after in 0u64..3000,
    ) {
        faults(&family, TypeKind::Bytes, ops, fail_after)?;
    }

    /// Injected I/O errors on the Bε-tree.
    #[test]
    fn betree_injected_faults_never_return_wrong_data(
        family in betree(true),
        ops in ops_with_runs(u64_key(), u64_value(), 300, 2, 4_000),
        fail_after in 0u64..3000,
    ) {
        faults(&family, TypeKind::U64, with_merges(ops), fail_after)?;
    }

    /// Injected I/O errors on the dynamized family (shard files, state file, WAL).
    #[test]
    fn dynamized_injected_faults_never_return_wrong_data(
        family in dynamized(),
        ops in ops_with_runs(u64_key(), u64_value(), 300, 2, 2_000),
        fail_after in 0u64..3000,
    ) {
        faults(&family, TypeKind::U64, ops, fail_after)?;
    }

    /// Injected I/O errors: from a random operation on, every file operation fails. The database must report
    /// errors (never wrong data); after a failed write every call fails; after recovery the state is a prefix.
    #[test]
    fn injected_faults_never_return_wrong_data(
        ops in ops_with_runs(u64_key(), u64_value(), 300, 2, 4_000),
        fail_after in 0u64..3000,
    ) {
        faults(&Family::of(IndexKind::BTree.default_config()), TypeKind::U64, ops, fail_after)?;
    }
}

fn faults(
    family: &Family,
    value: TypeKind,
    ops: Vec<Op>,
    fail_after: u64,
) -> Result<(), TestCaseError> {
    let mem = Arc::new(MemVfs::new());
    let fault = FaultVfs::new(mem.clone());
    let vfs: Arc<dyn Vfs> = Arc::new(fault.clone());
    let dir = Path::new("/db");
    let options = |vfs: Arc<dyn Vfs>| family_options(family, vfs);
    let db = RawDb::create(
        dir,
        &config(family, TypeKind::U64, value),
        &options(vfs.clone()),
    )
    .expect("create");
    let mut hist = History::new(Model::new());
    fault.fail_after(fail_after);
    let mut failed_write = false;
    let mut touched = Keys::new();
    for op in &ops {
        touch(&mut touched, op);
        match op {
            Op::Put(..) | Op::Del(..) | Op::Batch(..) | Op::Run(..) | Op::Merge(..) => {
                let mut m = hist.current().clone();
                apply(&mut m, op);
                match write(&db, op) {
                    Ok(()) => {
                        prop_assert!(!failed_write, "a write succeeded on a poisoned handle");
                        hist.push(m);
                        if is_sync(op) {
                            hist.durable();
                        }
                    }
                    Err(e) => {
                        prop_assert!(!e.is_invalid_argument(), "{e}");
                        if db.poisoned().is_none() {
                            // Failed before changing anything (a read of a current value for a checked
                            // merge): the write did not happen and the handle goes on.
                            prop_assert!(!failed_write, "a poisoned handle recovered");
                            continue;
                        }
                        if !failed_write {
                            // The failed write may or may not survive.
                            hist.push(m);
                        }
                        failed_write = true;
                    }
                }
            }
            Op::Get(..) | Op::Scan(..) | Op::Count(..) => {
                if failed_write {
                    prop_assert!(
                        read(&db, hist.current(), op).is_err(),
                        "a read succeeded on a poisoned handle"
                    );
                } else {
                    let _ = read(&db, hist.current(), op);
                }
            }
            Op::Flush | Op::Checkpoint => {
                let r = if matches!(op, Op::Flush) {
                    db.flush()
                } else {
                    db.checkpoint()
                };
                if r.is_err() {
                    failed_write = true;
                } else if !failed_write {
                    hist.durable();
                }
            }
            Op::Reopen | Op::Crash => {}
        }
    }
    std::mem::forget(db);
    // The lost handle does nothing more (its background work fails from now on, as in a dead process);
    // the recovery runs without faults.
    fault.fail_after(0);
    mem.crash();
    drop(vfs);
    let d = RawDb::open(dir, &options(mem.clone())).expect("reopen after faults");
    let got = contents(&d, &touched);
    hist.settle(&got);
    d.check().expect("check after faults");
    Ok(())
}
