//! Bad input: oversized keys, wrong value types, directories of garbage, damaged pages. Every case must give a
//! clear typed error (never a panic) and lose nothing already stored.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the test failing

use std::path::Path;
use strata::Config;
use strata::{Db, Error, IndexConfig, Options, RawDb, TypeKind};

fn bytes_db(dir: &Path) -> Db<Vec<u8>, Vec<u8>> {
    Db::create(dir, &Config::default(), &Options::default()).unwrap()
}

#[test]
fn oversized_key_is_rejected_and_nothing_is_lost() {
    let tmp = tempfile::tempdir().unwrap();
    let db = bytes_db(&tmp.path().join("db"));
    db.insert(&b"kept".to_vec(), &b"v".to_vec()).unwrap();
    let max = db.raw().max_key_len();
    assert!(max >= 512, "4 KiB pages still allow long keys ({max})");
    let err = db.insert(&vec![b'x'; max + 1], &b"v".to_vec()).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    assert!(err.to_string().contains("exceeds"), "{err}");
    let err = db.insert(&vec![b'x'; 5000], &b"v".to_vec()).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)));
    db.insert(&vec![b'y'; max], &b"longest".to_vec()).unwrap();
    let err = db
        .insert(&b"big".to_vec(), &vec![0; (1 << 20) + 1])
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)));
    assert_eq!(db.get(&b"kept".to_vec()).unwrap(), Some(b"v".to_vec()));
    assert_eq!(db.get(&vec![b'y'; max]).unwrap(), Some(b"longest".to_vec()));
    db.check().unwrap();
}

#[test]
fn values_of_the_wrong_type_are_rejected() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let db = RawDb::create(&dir, &Config::default(), &Options::default()).unwrap();
    db.insert(&1u64.to_be_bytes(), &2u64.to_be_bytes()).unwrap();
    assert!(matches!(
        db.insert(&1u64.to_be_bytes(), b"abc"),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        db.insert(b"abc", &2u64.to_be_bytes()),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(db.get(b"abc"), Err(Error::InvalidArgument(_))));
    assert_eq!(
        db.get(&1u64.to_be_bytes()).unwrap(),
        Some(2u64.to_be_bytes().to_vec())
    );
    drop(db);
    let err = Db::<Vec<u8>, u64>::open(&dir, &Options::default()).unwrap_err();
    assert!(matches!(err, Error::Incompatible(_)), "{err}");
    let db = Db::<u64, u64>::open(&dir, &Options::default()).unwrap();
    assert_eq!(db.get(&1).unwrap(), Some(2));
}

#[test]
fn directories_without_a_database_or_with_garbage() {
    let tmp = tempfile::tempdir().unwrap();
    let err = RawDb::open(tmp.path(), &Options::default()).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    assert!(err.to_string().contains("not a Strata database"), "{err}");
    let err = RawDb::open(tmp.path().join("missing"), &Options::default()).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");

    std::fs::write(tmp.path().join("MANIFEST"), b"hello, I am not a manifest").unwrap();
    let err = RawDb::open(tmp.path(), &Options::default()).unwrap_err();
    assert!(matches!(err, Error::Corruption { .. }), "{err}");
    assert!(err.to_string().contains("MANIFEST"), "{err}");

    // A real manifest next to a garbage page file.
    let dir = tmp.path().join("db2");
    RawDb::create(&dir, &Config::default(), &Options::default())
        .unwrap()
        .close()
        .unwrap();
    std::fs::write(dir.join("data.pages"), vec![0xA5u8; 3 * 4096]).unwrap();
    let err = RawDb::open(&dir, &Options::default()).unwrap_err();
    assert!(matches!(err, Error::Corruption { .. }), "{err}");
    assert!(err.to_string().contains("data.pages"), "{err}");
}

#[test]
fn creating_over_an_existing_database_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let db = RawDb::create(tmp.path(), &Config::default(), &Options::default()).unwrap();
    db.insert(&1u64.to_be_bytes(), &1u64.to_be_bytes()).unwrap();
    db.close().unwrap();
    let err = RawDb::create(tmp.path(), &Config::default(), &Options::default()).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    let db = RawDb::open(tmp.path(), &Options::default()).unwrap();
    assert_eq!(db.len(), 1);
}

#[test]
fn a_second_handle_is_refused_by_the_lock() {
    let tmp = tempfile::tempdir().unwrap();
    let db = RawDb::create(tmp.path(), &Config::default(), &Options::default()).unwrap();
    let err = RawDb::open(tmp.path(), &Options::default()).unwrap_err();
    assert!(matches!(err, Error::Locked(_)), "{err}");
    drop(db);
    RawDb::open(tmp.path(), &Options::default()).unwrap();
}

fn loaded(dir: &Path, n: u64) {
    let db = Db::<u64, u64>::create(dir, &Config::default(), &Options::default()).unwrap();
    for k in 0..n {
        db.insert(&k, &k).unwrap();
    }
    db.close().unwrap();
}

fn small_cache() -> Options {
    Options {
        cache_bytes: 64 << 10,
        ..Options::default()
    }
}

#[test]
fn a_bit_flip_in_a_page_is_reported_by_check_and_by_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    loaded(&dir, 20_000);
    let pages = dir.join("data.pages");
    let mut bytes = std::fs::read(&pages).unwrap();
    let page = 9u64;
    bytes[(page * 4096 + 2000) as usize] ^= 0x10;
    std::fs::write(&pages, &bytes).unwrap();

    let db = RawDb::open(&dir, &small_cache()).unwrap();
    let err = db.check().unwrap_err();
    let Error::Corruption {
        file,
        offset,
        detail,
    } = &err
    else {
        panic!("expected corruption, got {err}");
    };
    assert!(file.ends_with("data.pages"));
    assert_eq!(*offset, page * 4096);
    assert!(detail.contains(&format!("page {page}")), "{detail}");
    // Reads that reach the damaged page fail the same way; the others still work.
    let mut failures = 0;
    for k in 0..20_000u64 {
        match db.get(&k.to_be_bytes()) {
            Ok(v) => assert_eq!(v, Some(k.to_be_bytes().to_vec())),
            Err(Error::Corruption { offset, .. }) => {
                assert_eq!(offset, page * 4096);
                failures += 1;
            }
            Err(e) => panic!("unexpected {e}"),
        }
    }
    assert!(failures > 0, "some key lives on the damaged page");
    assert!(failures < 20_000);
}

#[test]
fn a_truncated_page_file_is_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    loaded(&dir, 20_000);
    let pages = dir.join("data.pages");
    let len = std::fs::metadata(&pages).unwrap().len();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&pages)
        .unwrap();
    f.set_len(len - 4096 - 100).unwrap();
    drop(f);
    let result = RawDb::open(&dir, &small_cache()).and_then(|db| db.check().map(|_| ()));
    let err = result.unwrap_err();
    assert!(matches!(err, Error::Corruption { .. }), "{err}");
    assert!(err.to_string().contains("data.pages"), "{err}");
}

#[test]
fn the_typed_api_reports_types_from_the_manifest() {
    let tmp = tempfile::tempdir().unwrap();
    let db = RawDb::create(
        tmp.path(),
        &Config {
            key: TypeKind::Bytes,
            value: TypeKind::U64,
            ..Config::default()
        },
        &Options::default(),
    )
    .unwrap();
    assert_eq!(db.manifest().key, TypeKind::Bytes);
    assert_eq!(db.manifest().value, TypeKind::U64);
}

/// A Bε-tree refuses entries beyond its limit, merges without an operator, and bad ε — all before
/// anything is logged, so the handle stays usable and nothing is lost; merges on other families are refused.
#[test]
fn betree_limits_and_merges_are_checked_before_logging() {
    use strata::IndexKind;
    use strata::options::BeTreeOptions;
    let tmp = tempfile::tempdir().unwrap();
    let config = Config {
        index: IndexKind::BeTree.default_config(),
        key: TypeKind::Bytes,
        value: TypeKind::Bytes,
        ..Config::default()
    };
    let db: Db<Vec<u8>, Vec<u8>> =
        Db::create(tmp.path().join("bytes"), &config, &Options::default()).unwrap();
    db.insert(&b"kept".to_vec(), &b"v".to_vec()).unwrap();
    let err = db.insert(&b"big".to_vec(), &vec![1; 2000]).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    let err = db.merge(&b"kept".to_vec(), &b"+".to_vec()).unwrap_err();
    assert!(err.to_string().contains("merge operator"), "{err}");
    db.insert(&b"after".to_vec(), &b"w".to_vec()).unwrap();
    assert_eq!(db.get(&b"kept".to_vec()).unwrap(), Some(b"v".to_vec()));
    assert_eq!(db.len(), 2);
    db.check().unwrap();

    for (epsilon, merge) in [(0.0, None), (1.5, None), (0.5, Some("u64-add"))] {
        let bad = Config {
            index: IndexConfig::BeTree(BeTreeOptions {
                epsilon,
                merge_operator: merge.map(str::to_string),
            }),
            ..config.clone()
        };
        let dir = tmp.path().join(format!("bad-{epsilon}"));
        // ε outside (0, 1], or u64-add over byte-string values.
        let err = Db::<Vec<u8>, Vec<u8>>::create(&dir, &bad, &Options::default()).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    }

    let counters = Config {
        key: TypeKind::U64,
        value: TypeKind::U64,
        index: IndexConfig::BeTree(BeTreeOptions {
            merge_operator: Some("u64-add".into()),
            ..BeTreeOptions::default()
        }),
        ..config
    };
    let db: Db<u64, u64> =
        Db::create(tmp.path().join("counters"), &counters, &Options::default()).unwrap();
    db.merge(&7, &5).unwrap();
    db.merge(&7, &6).unwrap();
    assert_eq!(db.get(&7).unwrap(), Some(11));
    let btree: Db<u64, u64> = Db::create(
        tmp.path().join("btree"),
        &Config::default(),
        &Options::default(),
    )
    .unwrap();
    let err = btree.merge(&1, &1).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    btree.insert(&1, &2).unwrap();
}

#[test]
fn an_overflowing_u64_add_merge_is_refused_and_the_saturating_operator_saturates() {
    use strata::WriteOp;
    use strata::options::BeTreeOptions;
    let tmp = tempfile::tempdir().unwrap();
    let v = |x: u64| x.to_be_bytes().to_vec();
    let k = v(7);
    let merge = |operand: u64| WriteOp::Merge {
        key: k.clone(),
        operand: v(operand),
    };
    for (name, op) in [("checked", "u64-add"), ("saturating", "u64-add-saturating")] {
        let dir = tmp.path().join(name);
        let config = Config::with_index(IndexConfig::BeTree(BeTreeOptions {
            merge_operator: Some(op.into()),
            ..BeTreeOptions::default()
        }));
        let db = RawDb::create(&dir, &config, &Options::default()).unwrap();
        db.insert(&k, &v(7)).unwrap();
        let one = db.write(&[merge(u64::MAX)], None);
        // Two merges that overflow only together, and a put in between that makes the batch fine.
        let two = db.write(&[merge(u64::MAX / 2), merge(u64::MAX / 2)], None);
        if op == "u64-add" {
            let e = one.unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
            assert!(e.to_string().contains("overflow"), "{e}");
            assert!(matches!(two, Err(Error::InvalidArgument(_))));
            assert_eq!(
                db.get(&k).unwrap(),
                Some(v(7)),
                "refused merges change nothing"
            );
            db.write(
                &[
                    merge(u64::MAX / 2),
                    WriteOp::Put {
                        key: k.clone(),
                        value: v(1),
                    },
                    merge(u64::MAX - 1),
                ],
                None,
            )
            .unwrap();
            assert_eq!(db.get(&k).unwrap(), Some(v(u64::MAX)));
            // A merge of an absent key starts from 0.
            db.write(
                &[WriteOp::Merge {
                    key: v(8),
                    operand: v(u64::MAX),
                }],
                None,
            )
            .unwrap();
        } else {
            one.unwrap();
            two.unwrap();
            assert_eq!(db.get(&k).unwrap(), Some(v(u64::MAX)));
        }
        db.close().unwrap();
        let db = RawDb::open(&dir, &Options::default()).unwrap();
        assert_eq!(db.get(&k).unwrap(), Some(v(u64::MAX)), "{op}");
        db.check().unwrap();
    }
}
