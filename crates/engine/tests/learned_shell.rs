//! The learned family behind the `Db` shell: typed errors for what it cannot take, byte values across
//! reopen and simulated crash (checkpoint + WAL replay), damage to the checkpoint file reported as
//! corruption, scans through the shell reading one snapshot while a writer runs, and a process-kill test
//! (`STRATA_CRASH_ITERATIONS` iterations, default 4).

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the test failing

mod common;

use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use strata::vfs::{FaultVfs, MemVfs, Vfs};
use strata::{
    Config, Db, Durability, Error, IndexKind, KeyRange, Options, RawDb, TypeKind, WriteOp,
};

fn config(value: TypeKind) -> Config {
    Config {
        index: IndexKind::Learned.default_config(),
        key: TypeKind::U64,
        value,
        ..Config::default()
    }
}

fn mem_options(vfs: Arc<dyn Vfs>) -> Options {
    Options {
        vfs,
        checkpoint_wal_bytes: 8 << 10,
        ..Options::default()
    }
}

fn key(k: u64) -> Vec<u8> {
    k.to_be_bytes().to_vec()
}

fn contents(db: &RawDb) -> BTreeMap<Vec<u8>, Vec<u8>> {
    db.range(KeyRange::all(), strata::Direction::Forward)
        .map(|r| r.unwrap())
        .collect()
}

#[test]
fn byte_keys_weights_and_short_keys_are_typed_errors() {
    let vfs: Arc<dyn Vfs> = Arc::new(MemVfs::new());
    let err = RawDb::create(
        "/a",
        &Config {
            key: TypeKind::Bytes,
            ..config(TypeKind::Bytes)
        },
        &mem_options(vfs.clone()),
    )
    .err()
    .unwrap();
    assert!(err.is_invalid_argument(), "{err}");
    let db = RawDb::create("/b", &config(TypeKind::Bytes), &mem_options(vfs)).unwrap();
    let weighted = db.write(
        &[WriteOp::PutWeighted {
            key: key(1),
            value: vec![1],
            weight: 1.0,
        }],
        None,
    );
    assert!(weighted.is_err());
    assert!(db.get(&[1, 2, 3]).is_err());
    assert_eq!(db.get(&key(1)).unwrap(), None);
}

#[test]
fn byte_values_survive_reopen_and_crash_and_damage_is_corruption() {
    let mem = Arc::new(MemVfs::new());
    let dir = Path::new("/db");
    let vfs: Arc<dyn Vfs> = mem.clone();
    let db = RawDb::create(dir, &config(TypeKind::Bytes), &mem_options(vfs.clone())).unwrap();
    let mut model = BTreeMap::new();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    for i in 0..3000u64 {
        let k = rng.random_range(0..800u64) * 1_000_003;
        if rng.random_bool(0.25) {
            db.delete(&key(k)).unwrap();
            model.remove(&key(k));
        } else {
            let v = vec![(i % 251) as u8; rng.random_range(0..40)];
            db.write(
                &[WriteOp::Put {
                    key: key(k),
                    value: v.clone(),
                }],
                Some(Durability::Flush),
            )
            .unwrap();
            model.insert(key(k), v);
        }
        if i == 1500 {
            db.checkpoint().unwrap();
        }
    }
    assert_eq!(contents(&db), model);
    db.close().unwrap();
    // This handle is lost at the power loss below. It reaches the files through a switch that the loss
    // turns off, so its background checkpoint stops like a thread of a dead process instead of writing (or
    // retiring a WAL) in the directory the next open recovers.
    let life = FaultVfs::new(mem.clone());
    let db = RawDb::open(dir, &mem_options(Arc::new(life.clone()))).unwrap();
    assert_eq!(contents(&db), model, "after reopen");
    assert_eq!(db.check().unwrap().records, model.len() as u64);
    // More synced writes, then a power loss: checkpoint + WAL replay bring them all back.
    for k in 0..200u64 {
        db.write(
            &[WriteOp::Put {
                key: key(k),
                value: vec![9],
            }],
            Some(Durability::Sync),
        )
        .unwrap();
        model.insert(key(k), vec![9]);
    }
    std::mem::forget(db);
    life.fail_after(0);
    mem.crash();
    let db = RawDb::open(dir, &mem_options(vfs.clone())).unwrap();
    let got = contents(&db);
    let diff: Vec<_> = model
        .iter()
        .filter(|(k, v)| got.get(*k) != Some(*v))
        .map(|(k, _)| k.clone())
        .chain(got.keys().filter(|k| !model.contains_key(*k)).cloned())
        .collect();
    assert!(diff.is_empty(), "after crash, keys differ: {diff:?}");
    db.check().unwrap();
    db.checkpoint().unwrap();
    db.close().unwrap();
    // A flipped byte in the checkpoint: opening reports corruption naming the file.
    let path = dir.join("LEARNED");
    let f = vfs
        .open(&path, strata::vfs::OpenOptions::default())
        .unwrap();
    let mut b = [0u8; 1];
    f.read_at(&mut b, 40).unwrap();
    b[0] ^= 0x10;
    f.write_all_at(&b, 40).unwrap();
    drop(f);
    match RawDb::open(dir, &mem_options(vfs)) {
        Err(Error::Corruption { file, .. }) => assert!(file.ends_with("LEARNED"), "{file:?}"),
        Err(e) => panic!("expected corruption, got {e}"),
        Ok(_) => panic!("opened a damaged checkpoint"),
    }
}

/// A thread writing `batch(round)` for round 0, 1, … until stopped, counting the rounds it completed.
struct BatchWriter {
    stop: Arc<AtomicBool>,
    rounds: Arc<AtomicU64>,
    thread: std::thread::JoinHandle<u64>,
}

impl BatchWriter {
    fn start(db: &Arc<RawDb>, batch: impl Fn(u64) -> Vec<WriteOp> + Send + 'static) -> BatchWriter {
        let stop = Arc::new(AtomicBool::new(false));
        let rounds = Arc::new(AtomicU64::new(0));
        let thread = {
            let (db, stop, rounds) = (db.clone(), stop.clone(), rounds.clone());
            std::thread::spawn(move || {
                let mut round = 0u64;
                while !stop.load(Ordering::Acquire) {
                    db.write(&batch(round), None).unwrap();
                    round += 1;
                    rounds.store(round, Ordering::Release);
                }
                round
            })
        };
        BatchWriter {
            stop,
            rounds,
            thread,
        }
    }

    /// Rounds completed so far.
    fn rounds(&self) -> u64 {
        self.rounds.load(Ordering::Acquire)
    }

    /// Waits until `n` rounds are complete (the writer thread may start late on a loaded machine); the
    /// deadline only turns a starved writer into a failure.
    fn wait_rounds(&self, n: u64) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        while self.rounds() < n {
            assert!(std::time::Instant::now() < deadline, "the writer stalled");
            std::thread::yield_now();
        }
    }

    /// Stops the writer; the rounds it completed.
    fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Release);
        self.thread.join().unwrap()
    }
}

#[test]
fn shell_scans_see_whole_batches_while_a_writer_runs() {
    let vfs: Arc<dyn Vfs> = Arc::new(MemVfs::new());
    let db = Arc::new(RawDb::create("/s", &config(TypeKind::U64), &mem_options(vfs)).unwrap());
    // Every batch writes the same value under 50 keys.
    let writer = BatchWriter::start(&db, |round| {
        (0..50u64)
            .map(|k| WriteOp::Put {
                key: key(k * 7919),
                value: round.to_be_bytes().to_vec(),
            })
            .collect()
    });
    // Scan until both sides have done enough work: the writer thread may
    // start late on a loaded machine, and scans of an empty index prove
    // nothing. The deadline only turns a starved writer into a failure.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let (mut scans, mut full_scans) = (0u32, 0u32);
    while scans < 300 || full_scans < 100 || writer.rounds() < 20 {
        assert!(
            std::time::Instant::now() < deadline,
            "the writer made {} rounds in 120 s of scans",
            writer.rounds()
        );
        let values: Vec<Vec<u8>> = db
            .range(KeyRange::all(), strata::Direction::Forward)
            .map(|r| r.unwrap().1)
            .collect();
        assert!(
            values.windows(2).all(|w| w[0] == w[1]),
            "a scan saw two batches"
        );
        scans += 1;
        if values.len() == 50 {
            full_scans += 1;
        } else {
            assert!(values.is_empty(), "a scan saw {} of 50 keys", values.len());
        }
    }
    assert!(writer.stop() >= 20);
}

/// A `Db` snapshot reads one point in time while a writer goes on: its whole-range iteration (several
/// 256-record chunks) sees one batch's values under every key and the same records on every read, its gets
/// agree with it, and the live database moves on meanwhile. Families without snapshots say so.
#[test]
fn db_snapshots_stay_put_while_a_writer_runs() {
    const KEYS: u64 = 700;
    let vfs: Arc<dyn Vfs> = Arc::new(MemVfs::new());
    let db = Arc::new(
        RawDb::create("/snap", &config(TypeKind::U64), &mem_options(vfs.clone())).unwrap(),
    );
    // Every batch writes its round under every key, and deletes or brings back key KEYS + 1 (present in
    // even rounds).
    let writer = BatchWriter::start(&db, |round| {
        let mut ops: Vec<WriteOp> = (0..KEYS)
            .map(|k| WriteOp::Put {
                key: key(k * 13),
                value: round.to_be_bytes().to_vec(),
            })
            .collect();
        ops.push(if round.is_multiple_of(2) {
            WriteOp::Put {
                key: key(u64::MAX - 1),
                value: round.to_be_bytes().to_vec(),
            }
        } else {
            WriteOp::Delete {
                key: key(u64::MAX - 1),
            }
        });
        ops
    });
    let read_all = |s: &strata::RawSnapshot| -> Vec<(Vec<u8>, Vec<u8>)> {
        s.range(KeyRange::all(), strata::Direction::Forward)
            .map(|r| r.unwrap())
            .collect()
    };
    writer.wait_rounds(1);
    for _ in 0..20 {
        let snap = db.snapshot().unwrap();
        let first = read_all(&snap);
        // One batch: every key with the same round, and the extra key present exactly in even rounds.
        let round = u64::from_be_bytes(first[0].1.clone().try_into().unwrap());
        let expected_len = KEYS as usize + usize::from(round % 2 == 0);
        assert_eq!(first.len(), expected_len, "round {round}");
        assert!(
            first.iter().all(|(_, v)| *v == round.to_be_bytes()),
            "a snapshot saw two batches"
        );
        writer.wait_rounds(writer.rounds() + 3);
        assert_eq!(read_all(&snap), first, "a snapshot changed under writes");
        let reverse: Vec<_> = snap
            .range(KeyRange::all(), strata::Direction::Reverse)
            .map(|r| r.unwrap())
            .collect();
        assert!(
            reverse.iter().rev().eq(first.iter()),
            "reverse iteration differs"
        );
        for (k, v) in first.iter().step_by(37) {
            assert_eq!(snap.get(k).unwrap().as_ref(), Some(v));
        }
        assert_eq!(
            snap.get(&key(u64::MAX - 1)).unwrap().is_some(),
            round % 2 == 0
        );
        assert!(snap.get(&key(1)).unwrap().is_none());
        assert!(snap.get(&[1, 2]).unwrap_err().is_invalid_argument());
        // The live database has moved on.
        let live = db.get(&key(0)).unwrap().unwrap();
        assert!(u64::from_be_bytes(live.try_into().unwrap()) > round);
    }
    writer.stop();

    let btree = RawDb::create(
        "/btree",
        &Config {
            index: IndexKind::BTree.default_config(),
            ..config(TypeKind::U64)
        },
        &mem_options(vfs),
    )
    .unwrap();
    let err = btree.snapshot().unwrap_err();
    assert!(
        err.is_invalid_argument() && err.to_string().contains("learned"),
        "{err}"
    );
}

const CHILD_ENV: &str = "STRATA_LEARNED_KILL_CHILD_DIR";

/// The child: runs only when re-executed by `sigkill_during_load`.
#[test]
#[ignore = "run as a child process by sigkill_during_load"]
fn learned_kill_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let config = Config {
        durability: Durability::Flush,
        ..config(TypeKind::U64)
    };
    let options = Options {
        checkpoint_wal_bytes: 64 << 10,
        ..Options::default()
    };
    let db = Db::<u64, u64>::create(&dir, &config, &options).expect("child create");
    let mut out = std::io::stdout().lock();
    for k in 0u64.. {
        // Keys in a scrambled order, so inserts hit every group and compactions run.
        db.insert(&k.wrapping_mul(0x9E37_79B9_7F4A_7C15), &(k ^ 0x5555))
            .expect("child insert");
        use std::io::Write;
        writeln!(out, "{k}").expect("child stdout");
    }
}

#[test]
fn sigkill_during_load() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(2027);
    for iteration in 0..common::iterations() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("db");
        let wait_ms = rng.random_range(150..900);
        let acked = common::run_and_kill(
            "learned_kill_child",
            &[(CHILD_ENV, dir.display().to_string())],
            wait_ms,
        );
        if !dir.join("MANIFEST").exists() {
            assert_eq!(acked, 0);
            continue;
        }
        let db = Db::<u64, u64>::open(&dir, &Options::default()).expect("reopen after SIGKILL");
        let m = db.len();
        assert!(m >= acked, "{m} keys survived, {acked} acknowledged");
        for k in 0..m {
            let got = db.get(&k.wrapping_mul(0x9E37_79B9_7F4A_7C15)).unwrap();
            assert_eq!(got, Some(k ^ 0x5555), "key number {k} of {m}");
        }
        assert_eq!(db.check().expect("check after SIGKILL").records, m);
        eprintln!(
            "iteration {iteration}: killed after {wait_ms} ms, {acked} acknowledged, {m} recovered"
        );
    }
}
