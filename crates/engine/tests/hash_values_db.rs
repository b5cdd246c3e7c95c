//! The hash family with bytes values behind the `Db` shell: values of every length up to 256 B read back
//! (before and after reopen), longer ones and batches the value log could never hold refused with a typed
//! error before anything is logged, and a small value log cleaned many times over with every value kept
//! (across reopen, a killed handle and a simulated power loss). The model test of `tests/model.rs`
//! (`hash_bytes_db_matches_model`) adds random operation sequences with reopen and power loss.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the test failing

use std::collections::HashMap;
use strata::options::HashOptions;
use strata::{Config, Error, IndexConfig, Options, RawDb, TypeKind, WriteOp};

mod common;
use common::memory_tempdir;

fn bytes_config(options: HashOptions) -> Config {
    Config {
        index: IndexConfig::Hash(options),
        key: TypeKind::U64,
        value: TypeKind::Bytes,
        ..Config::default()
    }
}

fn key(k: u64) -> Vec<u8> {
    k.to_be_bytes().to_vec()
}

/// A value of `len` bytes that differs per key and version.
fn value(k: u64, version: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (k.wrapping_mul(31) ^ version.wrapping_mul(7) ^ i as u64) as u8)
        .collect()
}

fn put(db: &RawDb, k: u64, v: &[u8]) -> strata::Result<()> {
    db.write(
        &[WriteOp::Put {
            key: key(k),
            value: v.to_vec(),
        }],
        None,
    )
}

fn assert_matches(db: &RawDb, model: &HashMap<u64, Vec<u8>>, keys: u64) {
    for k in 0..keys {
        assert_eq!(db.get(&key(k)).unwrap(), model.get(&k).cloned(), "key {k}");
    }
    assert_eq!(db.len(), model.len() as u64);
}

fn values_stats(db: &RawDb) -> serde_json::Value {
    let stats = db.stats().unwrap();
    stats.family["hash"]["values"].clone()
}

#[test]
fn values_of_every_length_to_256_bytes_round_trip_and_longer_ones_are_refused() {
    let dir = memory_tempdir();
    let db = RawDb::create(
        dir.path(),
        &bytes_config(HashOptions::default()),
        &Options::default(),
    )
    .unwrap();
    let mut model = HashMap::new();
    for k in 0..=256u64 {
        let v = value(k, 0, k as usize);
        put(&db, k, &v).unwrap();
        model.insert(k, v);
    }
    for len in [257usize, 300, 4096] {
        let e = put(&db, 1000, &vec![7u8; len]).unwrap_err();
        assert!(
            matches!(&e, Error::InvalidArgument(m) if m.contains("at most 256 bytes")),
            "{e}"
        );
    }
    // A refused batch is refused whole: its valid first operation is not applied either.
    let e = db
        .write(
            &[
                WriteOp::Put {
                    key: key(2000),
                    value: b"fine".to_vec(),
                },
                WriteOp::Put {
                    key: key(2001),
                    value: vec![1u8; 257],
                },
            ],
            None,
        )
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    assert_eq!(db.get(&key(2000)).unwrap(), None);
    // A key is a u64: 8 bytes.
    assert!(matches!(
        db.write(
            &[WriteOp::Put {
                key: b"abc".to_vec(),
                value: b"x".to_vec()
            }],
            None
        ),
        Err(Error::InvalidArgument(_))
    ));
    // Overwrites and deletes, then every value back.
    for k in (0..=256u64).step_by(3) {
        let v = value(k, 1, 256 - k as usize);
        put(&db, k, &v).unwrap();
        model.insert(k, v);
    }
    for k in (0..=256u64).step_by(5) {
        db.write(&[WriteOp::Delete { key: key(k) }], None).unwrap();
        model.remove(&k);
    }
    assert_matches(&db, &model, 300);
    db.check().unwrap();
    db.close().unwrap();
    assert!(dir.path().join("hash.values").exists());
    let db = RawDb::open(dir.path(), &Options::default()).unwrap();
    assert_matches(&db, &model, 300);
    db.check().unwrap();
}

#[test]
fn a_u64_hash_database_still_takes_8_byte_values_only() {
    let dir = memory_tempdir();
    let config = Config {
        index: IndexConfig::Hash(HashOptions::default()),
        ..Config::default()
    };
    let db = RawDb::create(dir.path(), &config, &Options::default()).unwrap();
    assert!(matches!(
        put(&db, 1, b"nine byte"),
        Err(Error::InvalidArgument(_))
    ));
    put(&db, 1, &7u64.to_be_bytes()).unwrap();
    assert_eq!(db.get(&key(1)).unwrap(), Some(7u64.to_be_bytes().to_vec()));
    assert!(!dir.path().join("hash.values").exists());
}

#[test]
fn a_batch_larger_than_the_value_log_is_refused_before_it_is_logged() {
    let dir = memory_tempdir();
    let options = HashOptions {
        value_log_bytes: 24 << 10,
        ..HashOptions::default()
    };
    let db = RawDb::create(dir.path(), &bytes_config(options), &Options::default()).unwrap();
    let ops: Vec<WriteOp> = (0..100)
        .map(|k| WriteOp::Put {
            key: key(k),
            value: vec![9u8; 256],
        })
        .collect();
    let e = db.write(&ops, None).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument(m) if m.contains("value_log_bytes")),
        "{e}"
    );
    // Live values that fill the log: the next put that needs room is ResourceExhausted, the handle serves on.
    let mut model = HashMap::new();
    let mut full = None;
    for k in 0..200u64 {
        let v = value(k, 0, 256);
        match put(&db, k, &v) {
            Ok(()) => {
                model.insert(k, v);
            }
            Err(e) => {
                full = Some(e);
                break;
            }
        }
    }
    assert!(
        matches!(full, Some(Error::ResourceExhausted(_))),
        "{full:?}"
    );
    assert_matches(&db, &model, 200);
    db.write(&[WriteOp::Delete { key: key(0) }], None).unwrap();
    model.remove(&0);
    put(&db, 0, b"short").unwrap();
    model.insert(0, b"short".to_vec());
    assert_matches(&db, &model, 200);
    db.check().unwrap();
}

/// Overwrites that lap a 24 KiB value log many times (cleaning copies the live values forward and repoints
/// their keys), then a handle dropped without closing (a killed process keeps every store to the mapping)
/// and reopened.
#[test]
fn a_small_value_log_is_cleaned_many_times_and_keeps_every_value() {
    let dir = memory_tempdir();
    let options = HashOptions {
        value_log_bytes: 24 << 10,
        region_bytes: 64 << 20,
        ..HashOptions::default()
    };
    let db = RawDb::create(dir.path(), &bytes_config(options), &Options::default()).unwrap();
    let mut model = HashMap::new();
    let keys = 40u64;
    for round in 0..60u64 {
        for k in 0..keys {
            if (k + round) % 7 == 0 {
                db.write(&[WriteOp::Delete { key: key(k) }], None).unwrap();
                model.remove(&k);
            } else {
                let v = value(k, round, ((k * 13 + round * 5) % 257) as usize);
                put(&db, k, &v).unwrap();
                model.insert(k, v);
            }
        }
    }
    let figures = values_stats(&db);
    assert!(figures["cleanings"].as_u64().unwrap() > 10, "{figures}");
    assert!(figures["copied"].as_u64().unwrap() > 0, "{figures}");
    assert_matches(&db, &model, keys);
    db.check().unwrap();
    // What a killed process leaves: the files as they are while the handle is open (no close, no
    // checkpoint; the stores to the mappings are in the page cache), without the lock.
    let killed = memory_tempdir();
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let entry = entry.unwrap();
        if entry.file_name() != "LOCK" {
            std::fs::copy(entry.path(), killed.path().join(entry.file_name())).unwrap();
        }
    }
    let reopened = RawDb::open(killed.path(), &Options::default()).unwrap();
    assert_matches(&reopened, &model, keys);
    reopened.check().unwrap();
    db.close().unwrap();
    let db = RawDb::open(dir.path(), &Options::default()).unwrap();
    assert_matches(&db, &model, keys);
    db.check().unwrap();
}
