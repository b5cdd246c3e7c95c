//! The hash family behind the `Db` shell: lookups from many threads beside a writer (batches seen whole,
//! acknowledged writes always found, across table doublings), the typed error of every ordered operation,
//! a full region refused before anything is logged, and the persistence mode `auto` picks.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the test failing

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use strata::options::{HashOptions, PersistChoice};
use strata::{Batch, Config, Db, Durability, Error, IndexConfig, Options};

mod common;
use common::memory_tempdir;

fn hash_config(options: HashOptions) -> Config {
    Config {
        index: IndexConfig::Hash(options),
        durability: Durability::None,
        ..Config::default()
    }
}

fn is_no_key_order(e: &Error) -> bool {
    matches!(e, Error::InvalidArgument(m) if m.contains("the hash index has no key order"))
}

/// Writer: batch i puts keys A and B to i (in that order) and key 1000 + i, then publishes i; a second writer
/// puts and deletes keys of its own meanwhile. Readers: B read
/// after A is never older than A (a batch is seen whole, or a reader would catch B still at i - 1 after A
/// at i), every published key is there with its value, and `len` never shrinks. The first table has one
/// bucket, so the run crosses many doublings (rebuilds under the writer's lock).
#[test]
fn lookups_from_many_threads_beside_a_writer() {
    const A: u64 = 1;
    const B: u64 = 2;
    const WRITES: u64 = 30_000;
    const OTHER: u64 = 1 << 40;
    let tmp = memory_tempdir();
    let options = HashOptions {
        persist: PersistChoice::Eadr,
        initial_buckets: 1,
        log_lines: 64,
        ..HashOptions::default()
    };
    let db = Arc::new(
        Db::<u64, u64>::create(
            tmp.path().join("db"),
            &hash_config(options),
            &Options::default(),
        )
        .unwrap(),
    );
    let published = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..3u64)
        .map(|r| {
            let (db, published, done) = (db.clone(), published.clone(), done.clone());
            std::thread::spawn(move || {
                let mut checks = 0u64;
                let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ r;
                while !done.load(Ordering::Acquire) {
                    let a = db.get(&A).unwrap().unwrap_or(0);
                    let b = db.get(&B).unwrap().unwrap_or(0);
                    assert!(
                        b >= a,
                        "B = {b} read after A = {a}: a batch was seen in part"
                    );
                    let p = published.load(Ordering::Acquire);
                    if p > 0 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let i = x % p;
                        assert_eq!(
                            db.get(&(1000 + i)).unwrap(),
                            Some(i),
                            "published key {}",
                            1000 + i
                        );
                    }
                    // The other writer deletes too, so len may fall; it never drops below what the batches
                    // published (A, B and one key each).
                    let len = db.len();
                    if p > 0 {
                        assert!(
                            len >= p + 2,
                            "len {len} below the {p} published batches' keys"
                        );
                    }
                    checks += 1;
                }
                checks
            })
        })
        .collect();
    // A second writer: its puts and deletes interleave with the batches (the shell serialises them).
    let other = {
        let db = db.clone();
        std::thread::spawn(move || {
            for k in 0..WRITES {
                db.insert(&(OTHER + k), &k).unwrap();
                if k % 4 == 3 {
                    db.delete(&(OTHER + k - 1)).unwrap();
                }
            }
        })
    };
    for i in 1..=WRITES {
        let mut batch = Batch::new();
        batch
            .insert(&A, &i)
            .insert(&B, &i)
            .insert(&(1000 + i - 1), &(i - 1));
        db.write(batch).unwrap();
        published.store(i, Ordering::Release);
    }
    other.join().unwrap();
    done.store(true, Ordering::Release);
    let checks: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
    assert!(checks > 0);
    assert_eq!(db.len(), WRITES + 2 + WRITES - WRITES / 4);
    for k in 0..WRITES {
        let want = (k % 4 != 2).then_some(k);
        assert_eq!(
            db.get(&(OTHER + k)).unwrap(),
            want,
            "second writer's key {k}"
        );
    }
    let stats = db.raw().stats().unwrap();
    let grows = stats.family["hash"]["counters"]["grows"].as_u64().unwrap();
    assert!(grows >= 8, "only {grows} doublings");
    db.raw().check().unwrap();
    eprintln!("{checks} reader rounds beside {WRITES} batches and {grows} doublings");
}

#[test]
fn every_ordered_operation_is_a_typed_error() {
    let tmp = memory_tempdir();
    let db = Db::<u64, u64>::create(
        tmp.path().join("db"),
        &hash_config(HashOptions::default()),
        &Options::default(),
    )
    .unwrap();
    db.insert(&3, &30).unwrap();
    assert!(!db.raw().capabilities().ordered);
    assert!(is_no_key_order(&db.range(..).next().unwrap().unwrap_err()));
    assert!(is_no_key_order(&db.count_range(0..10).unwrap_err()));
    assert!(is_no_key_order(
        &db.sample_range(&0, &9, 2, &mut rand::rng()).unwrap_err()
    ));
    // Refused reads change nothing and poison nothing.
    assert_eq!(db.get(&3).unwrap(), Some(30));
    let bulk = db
        .raw()
        .bulk_load(&mut std::iter::once((vec![0; 8], vec![0; 8])));
    assert!(matches!(bulk, Err(Error::InvalidArgument(_))), "{bulk:?}");
    db.insert(&4, &40).unwrap();
    assert_eq!(db.len(), 2);
}

/// The smallest region the options allow fills up: the batch that could need a table past its end is
/// `ResourceExhausted` before the WAL or the region saw it (every write could need a rebuild, even an
/// update or a delete, whose versions fill buckets), the database goes on serving reads, and reopens with
/// exactly what was acknowledged.
#[test]
fn a_full_region_refuses_the_batch_and_keeps_serving() {
    let tmp = memory_tempdir();
    let dir = tmp.path().join("db");
    // Header page, superblock, then room for generations of 16 and 32 buckets (with their logs and pools).
    let mut options = HashOptions {
        region_bytes: 0,
        persist: PersistChoice::Eadr,
        log_lines: 8,
        initial_buckets: 16,
        ..HashOptions::default()
    };
    options.region_bytes = 4096 + 4096 + options.generation_bytes(4) + options.generation_bytes(5);
    let config = hash_config(options);
    let db = Db::<u64, u64>::create(&dir, &config, &Options::default()).unwrap();
    let mut acked = 0u64;
    let refused = loop {
        match db.insert(&acked, &(acked * 3)) {
            Ok(()) => acked += 1,
            Err(e) => break e,
        }
        assert!(acked < 100_000, "the region never filled");
    };
    assert!(matches!(refused, Error::ResourceExhausted(_)), "{refused}");
    assert!(refused.to_string().contains("region_bytes"), "{refused}");
    assert!(acked > 1000, "only {acked} keys fit");
    assert_eq!(db.get(&acked).unwrap(), None, "the refused key");
    for e in [db.insert(&0, &7).unwrap_err(), db.delete(&1).unwrap_err()] {
        assert!(matches!(e, Error::ResourceExhausted(_)), "{e}");
    }
    assert_eq!(db.get(&(acked - 1)).unwrap(), Some((acked - 1) * 3));
    db.raw().check().unwrap();
    db.close().unwrap();
    let db = Db::<u64, u64>::open(&dir, &Options::default()).unwrap();
    assert_eq!(db.len(), acked);
    for k in [0, 1, acked - 1] {
        assert_eq!(db.get(&k).unwrap(), Some(k * 3));
    }
    assert_eq!(db.get(&acked).unwrap(), None);
}

/// `persist = auto` is eADR on tmpfs (nothing there survives a power loss anyway) and msync elsewhere.
#[test]
fn auto_persistence_follows_the_file_system() {
    let on = |tmp: &tempfile::TempDir| {
        let db = Db::<u64, u64>::create(
            tmp.path().join("db"),
            &hash_config(HashOptions::default()),
            &Options::default(),
        )
        .unwrap();
        let stats = db.raw().stats().unwrap();
        stats.family["hash"]["persist"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let memory_fs = |tmp: &tempfile::TempDir| {
        let f_type = rustix::fs::statfs(tmp.path()).unwrap().f_type as u64 & 0xFFFF_FFFF;
        [0x0102_1994, 0x8584_58f6].contains(&f_type)
    };
    for tmp in [tempfile::tempdir().unwrap(), memory_tempdir()] {
        let want = if memory_fs(&tmp) { "eadr" } else { "msync" };
        assert_eq!(on(&tmp), want, "{}", tmp.path().display());
    }
}

/// A region behind its WAL (eADR on the in-memory file system: a power loss keeps the region as of its last
/// checkpoint and the synced WAL records after it): a read-only handle replays them in memory — into its
/// copy of the region — and writes nothing; a read-write open replays them for good.
#[test]
fn a_read_only_handle_replays_into_its_own_copy() {
    use strata::vfs::{MemVfs, Vfs};
    let mem = Arc::new(MemVfs::new());
    let options = || Options {
        vfs: mem.clone() as Arc<dyn Vfs>,
        ..Options::default()
    };
    let config = Config {
        durability: Durability::Sync,
        ..hash_config(HashOptions {
            persist: PersistChoice::Eadr,
            ..HashOptions::default()
        })
    };
    let db = Db::<u64, u64>::create("/db", &config, &options()).unwrap();
    for k in 0..100u64 {
        db.insert(&k, &(k + 1)).unwrap();
    }
    db.checkpoint().unwrap();
    let mut batch = Batch::new();
    for k in 50..150u64 {
        batch.insert(&k, &(k * 7));
    }
    batch.delete(&3);
    db.write(batch).unwrap();
    db.insert(&1000, &1).unwrap();
    std::mem::forget(db);
    mem.crash();
    let files = |mem: &MemVfs| -> Vec<(std::path::PathBuf, Vec<u8>)> {
        let mut v: Vec<_> = mem
            .file_paths()
            .into_iter()
            .map(|p| {
                let b = mem.file_bytes(&p).unwrap();
                (p, b)
            })
            .collect();
        v.sort();
        v
    };
    let before = files(&mem);
    let expect = |db: &Db<u64, u64>| {
        assert_eq!(db.len(), 150);
        assert_eq!(db.get(&3).unwrap(), None);
        assert_eq!(db.get(&10).unwrap(), Some(11));
        assert_eq!(db.get(&60).unwrap(), Some(420));
        assert_eq!(db.get(&149).unwrap(), Some(1043));
        assert_eq!(db.get(&1000).unwrap(), Some(1));
        db.raw().check().unwrap();
    };
    let ro = Db::<u64, u64>::open_read_only("/db", &options()).unwrap();
    assert_eq!(ro.raw().recovery().replayed_records, 2);
    expect(&ro);
    drop(ro);
    assert!(before == files(&mem), "a read-only handle changed a file");
    let rw = Db::<u64, u64>::open("/db", &options()).unwrap();
    assert_eq!(rw.raw().recovery().replayed_records, 2);
    expect(&rw);
    rw.close().unwrap();
    let again = Db::<u64, u64>::open("/db", &options()).unwrap();
    assert_eq!(again.raw().recovery().replayed_records, 0);
    expect(&again);
}

/// A creation a crash cut short leaves `hash.pm` without a manifest (not a database): creating again there
/// replaces it.
#[test]
fn create_replaces_a_region_left_without_a_manifest() {
    let tmp = memory_tempdir();
    let dir = tmp.path().join("db");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("hash.pm"), vec![0xA5u8; 8192]).unwrap();
    let db = Db::<u64, u64>::create(
        &dir,
        &hash_config(HashOptions::default()),
        &Options::default(),
    )
    .unwrap();
    db.insert(&1, &2).unwrap();
    db.close().unwrap();
    let db = Db::<u64, u64>::open(&dir, &Options::default()).unwrap();
    assert_eq!(db.get(&1).unwrap(), Some(2));
}
