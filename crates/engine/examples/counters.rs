//! A Bε-tree of counters: blind merges with the u64-add operator (an overflowing merge is refused), a
//! larger-than-cache load, and the families every build has.
//!
//! `cargo run -p strata --example counters`

use strata::options::BeTreeOptions;
use strata::{Batch, Config, Db, IndexConfig, IndexKind, Options};

fn main() -> strata::Result<()> {
    for kind in IndexKind::ALL {
        println!("family {:<10} {}", kind.name(), kind.summary());
    }
    let tmp = tempfile::tempdir().map_err(|e| strata::Error::io("tempdir", e))?;
    let config = Config::with_index(IndexConfig::BeTree(BeTreeOptions {
        epsilon: 0.5,
        merge_operator: Some("u64-add".into()),
    }));
    // A 1 MiB cache: the counters below do not fit in it.
    let options = Options {
        cache_bytes: 1 << 20,
        ..Options::default()
    };
    let db = Db::<u64, u64>::create(tmp.path().join("counters"), &config, &options)?;
    for round in 0..5u64 {
        let mut batch = Batch::new();
        for k in 0..50_000u64 {
            batch.merge(&k, &(round + 1));
        }
        db.write(batch)?;
    }
    assert_eq!(db.get(&123)?, Some(1 + 2 + 3 + 4 + 5));
    // Overflow is an error, and the counter keeps its value.
    assert!(db.merge(&123, &u64::MAX).is_err());
    assert_eq!(db.get(&123)?, Some(15));
    println!(
        "50000 counters, 5 rounds of merges: counter 123 = {}",
        db.get(&123)?.unwrap_or(0)
    );
    db.check()?;
    Ok(())
}

/// `cargo test` runs the example (the examples are test targets: `test = true` in Cargo.toml).
#[test]
fn the_example_runs() {
    main().unwrap();
}
