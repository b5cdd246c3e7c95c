//! O_DIRECT end to end: pages go through the aligned bounce path of the page file. Runs in the cargo target
//! directory's file system; where that file system refuses O_DIRECT, creation must fail with a clear
//! `InvalidArgument` instead.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the test failing

use strata::Config;
use strata::{Db, Error, Options};

#[test]
fn a_direct_io_database_round_trips_through_eviction_and_reopen() {
    let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let dir = tmp.path().join("db");
    let config = Config {
        direct_io: true,
        ..Config::default()
    };
    let options = Options {
        cache_bytes: 64 << 10,
        ..Options::default()
    };
    let db = match Db::<u64, u64>::create(&dir, &config, &options) {
        Ok(db) => db,
        Err(Error::InvalidArgument(msg)) => {
            assert!(msg.contains("O_DIRECT"), "{msg}");
            eprintln!("file system refuses O_DIRECT: {msg}");
            return;
        }
        Err(e) => panic!("unexpected error {e}"),
    };
    for k in 0..12_000u64 {
        db.insert(&(k * 7919 % 12_000), &k).unwrap();
    }
    assert!(
        db.io().kind(strata::lab::storage::FileKind::Pages).writes > 0,
        "evictions wrote pages"
    );
    db.close().unwrap();
    let db = Db::<u64, u64>::open(&dir, &options).unwrap();
    assert!(db.raw().manifest().direct_io);
    for k in 0..12_000u64 {
        assert_eq!(db.get(&(k * 7919 % 12_000)).unwrap(), Some(k));
    }
    db.check().unwrap();
}
