//! Integrity: damaged meta slots, WAL files and missing files are detected (`Error::Corruption` naming the
//! file), never a silent loss of acknowledged writes; a torn WAL tail is the only damage recovery accepts;
//! `repair` drops what is damaged and says so; read-only handles never write.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the test failing

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use strata::Config;
use strata::Direction;
use strata::KeyRange;
use strata::WriteOp;
use strata::options::DynOptions;
use strata::vfs::FaultVfs;
use strata::vfs::MemVfs;
use strata::vfs::Vfs;
use strata::{Durability, Error, IndexConfig, IndexKind, Options, RawDb, TypeKind};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

const DIR: &str = "/db";
const PAGES: &str = "/db/data.pages";
const PS: usize = 4096;

fn config(index: IndexKind, key: TypeKind) -> Config {
    Config {
        index: index.default_config(),
        key,
        value: TypeKind::U64,
        ..Config::default()
    }
}

/// A dynamized configuration with `edit` applied to its options.
fn dynamized(edit: impl FnOnce(&mut DynOptions)) -> Config {
    let mut d = DynOptions::default();
    edit(&mut d);
    Config::with_index(IndexConfig::Dynamized(d))
}

/// The families and key types under test, with a page file (meta slots) or not.
fn families() -> Vec<(&'static str, Config)> {
    vec![
        ("btree-u64", config(IndexKind::BTree, TypeKind::U64)),
        ("btree-bytes", config(IndexKind::BTree, TypeKind::Bytes)),
        ("betree", config(IndexKind::BeTree, TypeKind::U64)),
        ("dynamized", { dynamized(|d| d.buffer_capacity = 64) }),
    ]
}

fn options(vfs: Arc<dyn Vfs>) -> Options {
    Options {
        vfs,
        cache_bytes: 1 << 20,
        ..Options::default()
    }
}

fn key(c: &Config, i: u64) -> Vec<u8> {
    match c.key {
        TypeKind::U64 => i.to_be_bytes().to_vec(),
        TypeKind::Bytes => format!("key-{i:06}").into_bytes(),
    }
}

fn put(c: &Config, i: u64, v: u64) -> WriteOp {
    WriteOp::Put {
        key: key(c, i),
        value: v.to_be_bytes().to_vec(),
    }
}

fn contents(db: &RawDb) -> Model {
    let mut out = Vec::new();
    db.scan_into(&KeyRange::all(), Direction::Forward, usize::MAX, &mut out)
        .unwrap();
    out.into_iter().collect()
}

fn apply(model: &mut Model, ops: &[WriteOp]) {
    for op in ops {
        if let WriteOp::Put { key, value } = op {
            model.insert(key.clone(), value.clone());
        }
    }
}

/// The repro: load 1000 records (10 batches), close; reopen, `put 5 555`, close.
fn healthy(mem: &Arc<MemVfs>, c: &Config) -> Model {
    let mut model = Model::new();
    let db = RawDb::create(DIR, c, &options(mem.clone())).unwrap();
    for b in 0..10 {
        let ops: Vec<WriteOp> = (b * 100..(b + 1) * 100).map(|i| put(c, i, i)).collect();
        db.write(&ops, None).unwrap();
        apply(&mut model, &ops);
    }
    db.close().unwrap();
    let db = RawDb::open(DIR, &options(mem.clone())).unwrap();
    let ops = [put(c, 5, 555)];
    db.write(&ops, None).unwrap();
    apply(&mut model, &ops);
    db.close().unwrap();
    model
}

/// A database left by a crash: `healthy`, then `n` more single writes with `Durability::Sync` that are in
/// the WAL only. Returns the model after each write (`[0]` = before the first).
fn crashed(mem: &Arc<MemVfs>, c: &Config, n: u64) -> Vec<Model> {
    let mut model = healthy(mem, c);
    let life = FaultVfs::new(mem.clone());
    let db = RawDb::open(DIR, &options(Arc::new(life.clone()))).unwrap();
    let mut states = vec![model.clone()];
    for i in 0..n {
        let ops = [put(c, 2000 + i, i)];
        db.write(&ops, Some(Durability::Sync)).unwrap();
        apply(&mut model, &ops);
        states.push(model.clone());
    }
    // The process dies: its handle does nothing more, its locks go.
    std::mem::forget(db);
    life.fail_after(0);
    mem.crash();
    states
}

fn wal_files(mem: &MemVfs) -> Vec<PathBuf> {
    mem.file_paths()
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("/wal-"))
        .collect()
}

fn only_wal(mem: &MemVfs) -> PathBuf {
    let w = wal_files(mem);
    assert_eq!(w.len(), 1, "{w:?}");
    w[0].clone()
}

#[track_caller]
fn assert_corruption(r: strata::Result<RawDb>, file: &Path) -> (u64, String) {
    match r {
        Err(Error::Corruption {
            file: f,
            offset,
            detail,
        }) => {
            assert_eq!(f, file, "{detail}");
            (offset, detail)
        }
        Err(e) => panic!("expected corruption in {}, got {e}", file.display()),
        Ok(_) => panic!("expected corruption in {}, opened fine", file.display()),
    }
}

fn epoch_of_slot(bytes: &[u8], slot: usize) -> u64 {
    u64::from_le_bytes(bytes[slot * PS + 40..slot * PS + 48].try_into().unwrap())
}

#[test]
fn a_damaged_newest_meta_slot_is_corruption_not_a_rollback() {
    for (name, c) in families().into_iter().filter(|(n, _)| *n != "dynamized") {
        let mem = Arc::new(MemVfs::new());
        let model = healthy(&mem, &c);
        let clean = mem.file_bytes(PAGES).unwrap();
        let newest = if epoch_of_slot(&clean, 1) > epoch_of_slot(&clean, 0) {
            1
        } else {
            0
        };
        // The byte: the epoch field of the newest slot.
        let mut bytes = clean.clone();
        bytes[newest * PS + 40] ^= 0xff;
        mem.set_file_bytes(PAGES, bytes);
        for open in [RawDb::open, RawDb::open_read_only] {
            let (offset, detail) = assert_corruption(
                open(Path::new(DIR), &options(mem.clone())),
                Path::new(PAGES),
            );
            assert_eq!(offset, (newest * PS) as u64, "{name}: {detail}");
            assert!(detail.contains("would be lost"), "{name}: {detail}");
        }
        // `repair` accepts the older checkpoint and says what it lost.
        let info = RawDb::repair(DIR, &options(mem.clone())).unwrap();
        assert!(
            info.repairs.iter().any(|r| r.contains("are lost")),
            "{name}: {:?}",
            info.repairs
        );
        let db = RawDb::open(DIR, &options(mem.clone())).unwrap();
        assert_eq!(
            db.get(&key(&c, 5)).unwrap(),
            Some(5u64.to_be_bytes().to_vec()),
            "{name}: the older state, explicitly"
        );
        db.check().unwrap();
        drop(db);

        // The older (spare) slot damaged: nothing is lost, reads are right, but check reports it until a
        // read-write open rewrites it.
        let mem = Arc::new(MemVfs::new());
        healthy(&mem, &c);
        let mut bytes = mem.file_bytes(PAGES).unwrap();
        let older = 1 - newest;
        bytes[older * PS + 100] ^= 0x01;
        mem.set_file_bytes(PAGES, bytes);
        let ro = RawDb::open_read_only(DIR, &options(mem.clone())).unwrap();
        assert_eq!(contents(&ro), model, "{name}");
        match ro.check() {
            Err(Error::Corruption { file, offset, .. }) => {
                assert_eq!(
                    (file.as_path(), offset),
                    (Path::new(PAGES), (older * PS) as u64)
                );
            }
            other => panic!("{name}: check must report the spare slot, got {other:?}"),
        }
        drop(ro);
        let db = RawDb::open(DIR, &options(mem.clone())).unwrap();
        assert!(db.recovery().spare_checkpoint_rewritten.is_some(), "{name}");
        assert_eq!(contents(&db), model, "{name}");
        db.check().unwrap();
    }
}

#[test]
fn a_bulk_load_lost_with_its_meta_slot_is_detected() {
    let mem = Arc::new(MemVfs::new());
    let c = config(IndexKind::BTree, TypeKind::U64);
    let db = RawDb::create(DIR, &c, &options(mem.clone())).unwrap();
    let n = db
        .bulk_load(&mut (0..10_000u64).map(|i| (key(&c, i), i.to_be_bytes().to_vec())))
        .unwrap();
    assert_eq!(n, 10_000);
    db.close().unwrap();
    let mut bytes = mem.file_bytes(PAGES).unwrap();
    let newest = if epoch_of_slot(&bytes, 1) > epoch_of_slot(&bytes, 0) {
        1
    } else {
        0
    };
    bytes[newest * PS + 200] ^= 0x40;
    mem.set_file_bytes(PAGES, bytes);
    assert_corruption(RawDb::open(DIR, &options(mem.clone())), Path::new(PAGES));
}

#[test]
fn wal_damage_with_records_after_it_is_corruption_and_repair_reports_it() {
    for (name, c) in families() {
        let mem = Arc::new(MemVfs::new());
        let states = crashed(&mem, &c, 40);
        let wal = only_wal(&mem);
        let clean = mem.file_bytes(&wal).unwrap();
        // The records end where the zeros start.
        let end = clean.iter().rposition(|&b| b != 0).unwrap() + 1;
        // A flipped byte in the middle of the records, then in the last record.
        for at in [1024 + (end - 1024) / 2, end - 30, end - 1] {
            let mut bytes = clean.clone();
            bytes[at] ^= 0x5a;
            mem.set_file_bytes(&wal, bytes);
            let (offset, detail) = assert_corruption(RawDb::open(DIR, &options(mem.clone())), &wal);
            assert!(offset as usize <= at, "{name}: {offset} > {at}: {detail}");
            assert_corruption(RawDb::open_read_only(DIR, &options(mem.clone())), &wal);
        }
        // Garbage in the preallocated space after the records.
        let mut bytes = clean.clone();
        bytes[end + 700] = 1;
        mem.set_file_bytes(&wal, bytes);
        assert_corruption(RawDb::open(DIR, &options(mem.clone())), &wal);
        // Repair the middle flip: the records before it survive, the loss is reported.
        let mut bytes = clean.clone();
        bytes[1024 + (end - 1024) / 2] ^= 0x5a;
        mem.set_file_bytes(&wal, bytes);
        let info = RawDb::repair(DIR, &options(mem.clone())).unwrap();
        assert!(
            info.repairs
                .iter()
                .any(|r| r.contains("dropped the damaged end")),
            "{name}: {:?}",
            info.repairs
        );
        let db = RawDb::open(DIR, &options(mem.clone())).unwrap();
        let got = contents(&db);
        let pos = states.iter().position(|s| *s == got);
        assert!(
            pos.is_some_and(|p| p > 0 && p < states.len() - 1),
            "{name}: a strict prefix of the acknowledged writes survives ({pos:?})"
        );
        db.check().unwrap();
    }
}

#[test]
fn a_torn_wal_tail_is_accepted_and_reported() {
    for (name, c) in families() {
        let mem = Arc::new(MemVfs::new());
        let states = crashed(&mem, &c, 40);
        let wal = only_wal(&mem);
        let clean = mem.file_bytes(&wal).unwrap();
        let end = clean.iter().rposition(|&b| b != 0).unwrap() + 1;
        // The sectors from the one holding the last record's end on were never written.
        let cut = (end - 1) / 512 * 512;
        let mut bytes = clean.clone();
        bytes[cut..].fill(0);
        mem.set_file_bytes(&wal, bytes);
        let ro = RawDb::open_read_only(DIR, &options(mem.clone())).unwrap();
        let report = ro.check().unwrap();
        assert!(
            report.notes.iter().any(|n| n.contains("torn tail")),
            "{name}: {report:?}"
        );
        drop(ro);
        let db = RawDb::open(DIR, &options(mem.clone())).unwrap();
        assert!(db.recovery().torn_tail_bytes > 0, "{name}");
        let got = contents(&db);
        let pos = states.iter().position(|s| *s == got);
        assert!(
            pos.is_some_and(|p| p < states.len() - 1),
            "{name}: a prefix without the torn records ({pos:?} of {})",
            states.len()
        );
        db.check().unwrap();
    }
}

#[test]
fn a_truncated_or_missing_wal_is_corruption() {
    for (name, c) in families() {
        for crash in [false, true] {
            let mem = Arc::new(MemVfs::new());
            let model = if crash {
                crashed(&mem, &c, 20).pop().unwrap()
            } else {
                healthy(&mem, &c)
            };
            let wal = only_wal(&mem);
            let clean = mem.file_bytes(&wal).unwrap();
            for len in [0, 100, clean.len() / 2, clean.len() - 1] {
                mem.set_file_bytes(&wal, clean[..len].to_vec());
                assert_corruption(RawDb::open(DIR, &options(mem.clone())), &wal);
                assert_corruption(RawDb::open_read_only(DIR, &options(mem.clone())), &wal);
            }
            mem.set_file_bytes(&wal, clean.clone());
            let db = RawDb::open_read_only(DIR, &options(mem.clone())).unwrap();
            assert_eq!(contents(&db), model, "{name}");
            drop(db);
            // Deleted: the error names the directory and the write-ahead log.
            mem.remove_file(&wal).unwrap();
            match RawDb::open(DIR, &options(mem.clone())) {
                Err(Error::Corruption { file, detail, .. }) => {
                    assert_eq!(file, Path::new(DIR));
                    assert!(detail.contains("write-ahead log"), "{detail}");
                }
                other => panic!("{name}: {other:?}"),
            }
            let info = RawDb::repair(DIR, &options(mem.clone())).unwrap();
            assert!(!info.repairs.is_empty(), "{name}");
            let db = RawDb::open(DIR, &options(mem.clone())).unwrap();
            db.check().unwrap();
        }
    }
}

#[test]
fn missing_and_short_files_are_corruption_naming_them() {
    for (name, c) in families() {
        let mem = Arc::new(MemVfs::new());
        healthy(&mem, &c);
        let files: Vec<PathBuf> = mem
            .file_paths()
            .into_iter()
            .filter(|p| !p.ends_with("LOCK") && !p.to_string_lossy().contains("/wal-"))
            .collect();
        assert!(files.len() >= 2, "{name}: {files:?}");
        for f in &files {
            let clean = mem.file_bytes(f).unwrap();
            mem.remove_file(f).unwrap();
            let r = RawDb::open(DIR, &options(mem.clone()));
            assert_corruption(r, f);
            mem.set_file_bytes(f, clean.clone());
            if f.as_path() == Path::new(PAGES) {
                mem.set_file_bytes(f, clean[..clean.len() - 1].to_vec());
                assert_corruption(RawDb::open(DIR, &options(mem.clone())), f);
                mem.set_file_bytes(f, clean.clone());
            }
            RawDb::open(DIR, &options(mem.clone()))
                .unwrap()
                .check()
                .unwrap();
        }
    }
}

#[test]
fn a_failed_create_leaves_no_directory_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("new");
    // A dynamized index of byte-string keys is refused after the directory was made.
    let c = config(IndexKind::Dynamized, TypeKind::Bytes);
    let e = RawDb::create(&dir, &c, &Options::default()).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    assert!(!dir.exists(), "the directory the create made is gone");
    // In an existing directory, only what the create made goes.
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("notes.txt"), b"mine").unwrap();
    RawDb::create(&dir, &c, &Options::default()).unwrap_err();
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, vec![std::ffi::OsString::from("notes.txt")]);
}

#[test]
fn read_only_handles_read_on_a_full_or_read_only_disk_and_never_write() {
    for (name, c) in families() {
        for kind in [
            std::io::ErrorKind::StorageFull,
            std::io::ErrorKind::ReadOnlyFilesystem,
        ] {
            let mem = Arc::new(MemVfs::new());
            let model = crashed(&mem, &c, 30).pop().unwrap();
            let before: Vec<(PathBuf, Vec<u8>)> = mem
                .file_paths()
                .into_iter()
                .map(|p| {
                    let b = mem.file_bytes(&p).unwrap();
                    (p, b)
                })
                .collect();
            let disk = FaultVfs::new(mem.clone());
            disk.refuse_writes(kind);
            let vfs: Arc<dyn Vfs> = Arc::new(disk.clone());
            // A writer cannot even open; readers can, several at once, and replay the WAL in memory.
            assert!(RawDb::open(DIR, &options(vfs.clone())).is_err(), "{name}");
            let a = RawDb::open_read_only(DIR, &options(vfs.clone())).unwrap();
            let b = RawDb::open_read_only(DIR, &options(vfs.clone())).unwrap();
            assert!(a.recovery().replayed_records > 0, "{name}");
            assert_eq!(contents(&a), model, "{name}");
            assert_eq!(contents(&b), model, "{name}");
            a.check().unwrap();
            let e = a.insert(&key(&c, 1), &1u64.to_be_bytes()).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{name}: {e}");
            assert!(matches!(a.checkpoint(), Err(Error::InvalidArgument(_))));
            assert!(matches!(a.flush(), Err(Error::InvalidArgument(_))));
            drop((a, b));
            let after: Vec<(PathBuf, Vec<u8>)> = mem
                .file_paths()
                .into_iter()
                .map(|p| {
                    let b = mem.file_bytes(&p).unwrap();
                    (p, b)
                })
                .collect();
            assert!(before == after, "{name}: a read-only handle changed a file");
        }
    }
}

#[test]
fn readers_and_a_writer_exclude_each_other() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let c = config(IndexKind::BTree, TypeKind::U64);
    let w = RawDb::create(&dir, &c, &Options::default()).unwrap();
    w.insert(&key(&c, 1), &7u64.to_be_bytes()).unwrap();
    assert!(matches!(
        RawDb::open_read_only(&dir, &Options::default()),
        Err(Error::Locked(_))
    ));
    w.close().unwrap();
    let r1 = RawDb::open_read_only(&dir, &Options::default()).unwrap();
    let r2 = RawDb::open_read_only(&dir, &Options::default()).unwrap();
    assert_eq!(
        r1.get(&key(&c, 1)).unwrap(),
        Some(7u64.to_be_bytes().to_vec())
    );
    assert_eq!(
        r2.get(&key(&c, 1)).unwrap(),
        Some(7u64.to_be_bytes().to_vec())
    );
    assert!(matches!(
        RawDb::open(&dir, &Options::default()),
        Err(Error::Locked(_))
    ));
    drop((r1, r2));
    RawDb::open(&dir, &Options::default()).unwrap();
}

/// Shard files in the directory and the shard count the index reports.
fn shard_files(mem: &MemVfs) -> usize {
    mem.file_paths()
        .iter()
        .filter(|p| p.to_string_lossy().contains("/shard-"))
        .count()
}

#[test]
fn recovery_of_a_dynamized_index_leaves_no_orphan_shard_files_and_persists() {
    for budget in [0u64, 16 << 10] {
        let c = dynamized(|d| {
            d.buffer_capacity = 16;
            d.memory_budget = budget;
        });
        let mem = Arc::new(MemVfs::new());
        let mut model = Model::new();
        RawDb::create(DIR, &c, &options(mem.clone()))
            .unwrap()
            .close()
            .unwrap();
        // A writer that dies after many flushes and merges (shard files written, none listed yet).
        let life = FaultVfs::new(mem.clone());
        let db = RawDb::open(DIR, &options(Arc::new(life.clone()))).unwrap();
        for i in 0..3000u64 {
            let ops = [put(&c, (i * 7919) % 5000, i)];
            db.write(&ops, Some(Durability::Sync)).unwrap();
            apply(&mut model, &ops);
        }
        db.settle().unwrap();
        std::mem::forget(db);
        life.fail_after(0);
        mem.crash();
        let orphans = shard_files(&mem);
        let db = RawDb::open(DIR, &options(mem.clone())).unwrap();
        assert_eq!(db.recovery().replayed_records, 3000);
        assert_eq!(contents(&db), model);
        let listed = db
            .stats()
            .unwrap()
            .family_stats::<strata::options::DynStats>()
            .unwrap()
            .shards;
        assert_eq!(
            shard_files(&mem),
            listed,
            "budget {budget}: the directory holds exactly the listed shards (before: {orphans} files)"
        );
        db.close().unwrap();
        let db = RawDb::open(DIR, &options(mem.clone())).unwrap();
        assert_eq!(
            db.recovery().replayed_records,
            0,
            "the recovery was persisted"
        );
        assert_eq!(contents(&db), model);
        db.check().unwrap();
    }
}
