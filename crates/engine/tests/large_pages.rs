//! Page sizes above 64 KiB (up to 4 MiB) through the `Db` shell.
//!
//! * A dynamized database with every level on disk and 1 MiB pages round-trips through close and reopen,
//!   samples only live records, and checks clean.
//! * A B+-tree database with 1 MiB pages is refused with `Error::InvalidArgument` (the B+-tree takes pages up
//!   to 64 KiB), leaves no database behind, and the directory can then hold one with a valid page size.
//! * A Bε-tree database with 1 MiB and 4 MiB nodes round-trips and checks clean.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the test failing

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;
use strata::Config;
use strata::options::{DeletePolicy, DynOptions, Layout};
use strata::vfs::FileKind;
use strata::vfs::MemVfs;
use strata::vfs::Vfs;
use strata::{Db, Error, IndexConfig, IndexKind, Options};

const MIB: usize = 1 << 20;

fn options(vfs: Arc<dyn Vfs>) -> Options {
    Options {
        vfs,
        ..Options::default()
    }
}

#[test]
fn a_dynamized_database_with_1_mib_pages_round_trips() {
    let mem = Arc::new(MemVfs::new());
    let vfs: Arc<dyn Vfs> = mem.clone();
    let config = Config {
        page_size: MIB,
        index: IndexConfig::Dynamized(DynOptions {
            layout: Layout::Leveling,
            delete_policy: DeletePolicy::Tombstone,
            buffer_capacity: 2_000,
            scale_factor: 4,
            max_delete_proportion: 0.5,
            // Every level on disk.
            memory_budget: 1,
            ..DynOptions::default()
        }),
        ..Config::default()
    };
    let db = Db::<u64, u64>::create("/big", &config, &options(vfs.clone())).unwrap();
    for k in 0..30_000u64 {
        db.insert(&k, &(k * 3)).unwrap();
    }
    for k in (0..30_000u64).step_by(7) {
        db.delete(&k).unwrap();
    }
    db.checkpoint().unwrap();
    let shard_files: Vec<_> = mem
        .file_paths()
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("shard-"))
        .collect();
    assert!(!shard_files.is_empty(), "no level reached disk");
    for p in &shard_files {
        let len = mem.file_bytes(p).unwrap().len();
        assert_eq!(len % MIB, 0, "{} is {len} bytes", p.display());
    }
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    for (k, v) in db.sample_range(&0, &29_999, 500, &mut rng).unwrap() {
        assert!(k % 7 != 0, "deleted key {k} sampled");
        assert_eq!(v, k * 3);
    }
    db.close().unwrap();

    let db = Db::<u64, u64>::open("/big", &options(vfs)).unwrap();
    assert_eq!(db.raw().manifest().page_size, MIB);
    assert_eq!(db.len(), 30_000 - 30_000u64.div_ceil(7));
    for k in (0..30_000u64).step_by(61) {
        let want = (k % 7 != 0).then_some(k * 3);
        assert_eq!(db.get(&k).unwrap(), want, "key {k}");
    }
    assert!(db.io().kind(FileKind::Shards).reads > 0);
    db.check().unwrap();
}

#[test]
fn a_btree_database_with_1_mib_pages_is_an_invalid_argument() {
    let vfs: Arc<dyn Vfs> = Arc::new(MemVfs::new());
    for page_size in [128 << 10, MIB, 4 * MIB] {
        let config = Config {
            index: IndexKind::BTree.default_config(),
            page_size,
            ..Config::default()
        };
        match Db::<u64, u64>::create("/bt", &config, &options(vfs.clone())) {
            Err(Error::InvalidArgument(msg)) => assert!(msg.contains("64 KiB"), "{msg}"),
            Err(e) => panic!("expected InvalidArgument, got {e}"),
            Ok(_) => panic!("a B+-tree with {page_size}-byte pages was created"),
        }
        assert!(Db::<u64, u64>::open("/bt", &options(vfs.clone())).is_err());
    }
    // 8 MiB is beyond every index: refused by the page size check.
    let config = Config {
        page_size: 8 * MIB,
        ..Config::default()
    };
    assert!(matches!(
        Db::<u64, u64>::create("/bt", &config, &options(vfs.clone())),
        Err(Error::InvalidArgument(_))
    ));
    // The directory holds no database: a valid one can be created there.
    let config = Config {
        page_size: 64 << 10,
        ..Config::default()
    };
    let db = Db::<u64, u64>::create("/bt", &config, &options(vfs)).unwrap();
    db.insert(&1, &2).unwrap();
    assert_eq!(db.get(&1).unwrap(), Some(2));
}

/// A Bε-tree with 1 MiB and 4 MiB nodes (ε = 0.5: about 360 and 720 children per node) holds records across
/// reopen and passes its check.
#[test]
fn betree_with_megabyte_pages_round_trips() {
    for page_size in [1usize << 20, 4 << 20] {
        let vfs: Arc<dyn Vfs> = Arc::new(MemVfs::new());
        let options = Options {
            vfs: vfs.clone(),
            cache_bytes: 16 * page_size,
            ..Options::default()
        };
        let config = Config {
            index: IndexKind::BeTree.default_config(),
            page_size,
            ..Config::default()
        };
        let dir = std::path::Path::new("/be");
        let db: Db<u64, u64> = Db::create(dir, &config, &options).unwrap();
        let mut batch = strata::Batch::new();
        for k in 0..200_000u64 {
            batch.insert(&(k.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 20), &k);
        }
        db.write(batch).unwrap();
        let want = db.len();
        db.close().unwrap();
        let db: Db<u64, u64> = Db::open(dir, &options).unwrap();
        assert_eq!(db.len(), want);
        let report = db.check().unwrap();
        assert_eq!(report.records, want);
    }
}
