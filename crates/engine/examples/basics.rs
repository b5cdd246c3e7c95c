//! Create a database, write, read, scan, batch, reopen, check.
//!
//! `cargo run -p strata --example basics`

use strata::{Batch, Config, Db, Durability, Options};

fn main() -> strata::Result<()> {
    let tmp = tempfile::tempdir().map_err(|e| strata::Error::io("tempdir", e))?;
    let dir = tmp.path().join("accounts");

    // A B+-tree (the default family) of u64 keys and byte-string values.
    let config = Config {
        value: strata::TypeKind::Bytes,
        ..Config::default()
    };
    let db = Db::<u64, Vec<u8>>::create(&dir, &config, &Options::default())?;
    db.insert(&1, &b"alice".to_vec())?;
    db.insert(&2, &b"bob".to_vec())?;
    assert_eq!(db.get(&1)?, Some(b"alice".to_vec()));

    // A batch is applied atomically; this one is synced to disk before `write` returns.
    let mut batch = Batch::new();
    batch
        .insert(&3, &b"carol".to_vec())
        .delete(&2)
        .durability(Durability::Sync);
    db.write(batch)?;

    // Ordered scans over any range.
    let names: Vec<(u64, Vec<u8>)> = db.range(1..=3).collect::<strata::Result<_>>()?;
    assert_eq!(names, vec![(1, b"alice".to_vec()), (3, b"carol".to_vec())]);
    println!("records 1..=3: {}", names.len());

    // Close (checkpoints), reopen, verify every checksum and invariant.
    db.close()?;
    let db = Db::<u64, Vec<u8>>::open(&dir, &Options::default())?;
    let report = db.check()?;
    println!(
        "reopened: {} records, {} pages checked",
        report.records, report.pages_checked
    );

    // Readers that never write (they work on read-only media) run beside each other, not beside a writer.
    db.close()?;
    let reader = Db::<u64, Vec<u8>>::open_read_only(&dir, &Options::default())?;
    assert_eq!(reader.get(&3)?, Some(b"carol".to_vec()));
    assert!(reader.insert(&4, &b"dave".to_vec()).is_err());
    Ok(())
}

/// `cargo test` runs the example (the examples are test targets: `test = true` in Cargo.toml).
#[test]
fn the_example_runs() {
    main().unwrap();
}
