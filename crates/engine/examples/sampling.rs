//! Range counts and independent range sampling: uniform on a B+-tree and on a dynamized index, weighted on
//! a weighted dynamized index.
//!
//! `cargo run -p strata --example sampling`

use rand::SeedableRng;
use strata::options::{DynOptions, Layout};
use strata::{Config, Db, IndexConfig, Options};

fn main() -> strata::Result<()> {
    let tmp = tempfile::tempdir().map_err(|e| strata::Error::io("tempdir", e))?;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);

    // A dynamized index: a write buffer plus levels of immutable sorted shards; deletes are exact.
    let config = Config::with_index(IndexConfig::Dynamized(DynOptions {
        layout: Layout::Leveling,
        buffer_capacity: 1000,
        ..DynOptions::default()
    }));
    let db = Db::<u64, u64>::create(tmp.path().join("uniform"), &config, &Options::default())?;
    for k in 0..10_000u64 {
        db.insert(&k, &(k * 10))?;
    }
    for k in (0..10_000u64).step_by(2) {
        db.delete(&k)?;
    }
    assert_eq!(db.count_range(1000..2000)?, 500);
    let samples = db.sample_range(&1000, &1999, 5, &mut rng)?;
    assert!(samples.iter().all(|(k, v)| k % 2 == 1 && *v == k * 10));
    println!("5 uniform samples of the odd keys in [1000, 2000): {samples:?}");

    // Weighted: key 7 weighs as much as all the others together.
    let config = Config::with_index(IndexConfig::Dynamized(DynOptions {
        weighted: true,
        ..DynOptions::default()
    }));
    let db = Db::<u64, u64>::create(tmp.path().join("weighted"), &config, &Options::default())?;
    assert!(db.capabilities().weighted);
    for k in 0..100u64 {
        db.insert_weighted(&k, &k, if k == 7 { 99.0 } else { 1.0 })?;
    }
    let draws = db.sample_range(&0, &99, 10_000, &mut rng)?;
    let sevens = draws.iter().filter(|(k, _)| *k == 7).count();
    println!("key 7 drawn {sevens} times of 10000 (expected about 5000)");
    assert!((4500..5500).contains(&sevens));
    Ok(())
}

/// `cargo test` runs the example (the examples are test targets: `test = true` in Cargo.toml).
#[test]
fn the_example_runs() {
    main().unwrap();
}
