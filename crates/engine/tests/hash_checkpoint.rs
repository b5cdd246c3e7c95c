//! The hash family's checkpoints finish on the shell's checkpoint thread (`begin_checkpoint` /
//! `finish_checkpoint`): the writer never syncs a file at durability `none` or `flush` (the region's sync,
//! the WAL syncs and the retired WAL's removal happen elsewhere), the region is written back ahead of the
//! checkpoint's sync, and a power loss while checkpoints come and go keeps every synced write and a prefix
//! of the rest (the checkpoint's `msync` under the family's lock captures one batch boundary). In eADR
//! mode, on the in-memory file system (whose unsynced bytes a power loss drops).

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the test failing

use std::cell::Cell;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use strata::options::{HashOptions, PersistChoice};
use strata::vfs::{HookedVfs, MemVfs, Vfs, VfsHook, VfsOp};
use strata::{Config, Durability, IndexConfig, Options, RawDb, Result, TypeKind};

mod common;
use common::{numbered_put as put, wait_checkpoint_done, wal_files};

thread_local! {
    /// This thread is the test's writer.
    static WRITER: Cell<bool> = const { Cell::new(false) };
}

/// Syncs by thread, and a power switch: once dead, every change to the files fails (the abandoned handle's
/// checkpoint thread must not reach the files recovery reads).
#[derive(Debug, Default)]
struct Probe {
    writer_syncs: AtomicU64,
    region_syncs_elsewhere: AtomicU64,
    dead: AtomicBool,
}

impl VfsHook for Probe {
    fn before(&self, op: VfsOp<'_>, path: &Path) -> Result<()> {
        let changes = !matches!(
            op,
            VfsOp::Read { .. } | VfsOp::ListDir | VfsOp::Lock | VfsOp::CreateDirAll
        );
        if changes && self.dead.load(Ordering::Acquire) {
            return Err(strata::Error::io(path, std::io::Error::other("power lost")));
        }
        if matches!(op, VfsOp::Sync | VfsOp::SyncDir) {
            if WRITER.with(Cell::get) {
                self.writer_syncs.fetch_add(1, Ordering::Relaxed);
            } else if path.ends_with("hash.pm") {
                self.region_syncs_elsewhere.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
    }
}

fn config() -> Config {
    Config {
        index: IndexConfig::Hash(HashOptions {
            persist: PersistChoice::Eadr,
            initial_buckets: 1,
            ..HashOptions::default()
        }),
        key: TypeKind::U64,
        value: TypeKind::U64,
        ..Config::default()
    }
}

fn options(vfs: Arc<dyn Vfs>, durability: Durability) -> Options {
    Options {
        vfs,
        checkpoint_wal_bytes: 64 << 10,
        durability: Some(durability),
        ..Options::default()
    }
}

fn setup(durability: Durability) -> (Arc<MemVfs>, Arc<Probe>, RawDb) {
    let mem = Arc::new(MemVfs::new());
    let probe = Arc::new(Probe::default());
    let vfs: Arc<dyn Vfs> = Arc::new(HookedVfs::new(mem.clone(), probe.clone()));
    let db = RawDb::create("/db", &config(), &options(vfs, durability)).unwrap();
    (mem, probe, db)
}

fn reopen(mem: &Arc<MemVfs>) -> RawDb {
    let vfs: Arc<dyn Vfs> = Arc::new(HookedVfs::new(mem.clone(), Arc::new(Probe::default())));
    RawDb::open("/db", &options(vfs, Durability::None)).unwrap()
}

#[test]
fn the_writer_never_syncs_while_checkpoints_finish_in_the_background() {
    let n = 12_000u64;
    for durability in [Durability::None, Durability::Flush] {
        let (mem, probe, db) = setup(durability);
        WRITER.with(|w| w.set(true));
        for i in 0..n {
            db.write(&[put(i)], None).unwrap();
            // Below the backlog's bound (where the writer would checkpoint itself).
            if i % 64 == 0 && wal_files(&mem) > 1 {
                wait_checkpoint_done(&mem);
            }
        }
        WRITER.with(|w| w.set(false));
        assert_eq!(
            probe.writer_syncs.load(Ordering::Relaxed),
            0,
            "{durability:?}: the writer synced a file or the directory"
        );
        let synced = probe.region_syncs_elsewhere.load(Ordering::Relaxed);
        assert!(
            synced >= 5,
            "{durability:?}: only {synced} checkpoints synced the region"
        );
        db.close().unwrap();
        let db = reopen(&mem);
        for i in 0..n {
            assert_eq!(
                db.get(&i.to_be_bytes()).unwrap(),
                Some((i % 251).to_be_bytes().to_vec()),
                "{durability:?}: key {i}"
            );
        }
        db.check().unwrap();
    }
}

/// Every checkpoint hands the region's pages to write-back before it syncs them (outside the family's lock).
#[test]
fn a_checkpoint_writes_the_region_back_ahead_of_its_sync() {
    let mem = Arc::new(MemVfs::new());
    let vfs: Arc<dyn Vfs> = mem.clone();
    let db = RawDb::create("/db", &config(), &options(vfs, Durability::None)).unwrap();
    let before = mem.writeback_hinted("/db/hash.pm").unwrap();
    let mut checkpoints = 0;
    let mut i = 0u64;
    while checkpoints < 3 {
        db.write(&[put(i)], None).unwrap();
        i += 1;
        if wal_files(&mem) > 1 {
            wait_checkpoint_done(&mem);
            checkpoints += 1;
        }
        assert!(i < 100_000, "no background checkpoint");
    }
    let hinted = mem.writeback_hinted("/db/hash.pm").unwrap() - before;
    assert!(
        hinted >= 3 * (1 << 20),
        "three checkpoints handed only {hinted} bytes of hash.pm to write-back"
    );
    db.close().unwrap();
}

/// Power losses at random moments of a load whose checkpoints finish in the background: every write
/// acknowledged at durability `sync` survives, and what survives is a prefix of the writes.
#[test]
fn a_power_loss_amid_background_checkpoints_keeps_a_prefix_with_every_synced_write() {
    for (round, stop) in [2_500u64, 7_001, 11_017].into_iter().enumerate() {
        let (mem, probe, db) = setup(Durability::None);
        let mut synced = 0;
        for i in 0..stop {
            let durability = (i % 997 == 0).then_some(Durability::Sync);
            db.write(&[put(i)], durability).unwrap();
            if durability.is_some() {
                synced = i + 1;
            }
        }
        if round == 1 {
            // Mid-checkpoint, when one is under way.
            std::thread::sleep(Duration::from_millis(1));
        }
        probe.dead.store(true, Ordering::Release);
        std::mem::forget(db);
        mem.crash();
        let db = reopen(&mem);
        let present: Vec<bool> = (0..stop)
            .map(|i| db.get(&i.to_be_bytes()).unwrap().is_some())
            .collect();
        let end = present.iter().position(|p| !p).unwrap_or(present.len());
        assert!(
            end as u64 >= synced,
            "round {round}: write {end} lost, but writes up to {synced} were synced"
        );
        assert!(
            present[end..].iter().all(|p| !p),
            "round {round}: not a prefix (first hole at {end})"
        );
        for i in 0..end as u64 {
            assert_eq!(
                db.get(&i.to_be_bytes()).unwrap(),
                Some((i % 251).to_be_bytes().to_vec())
            );
        }
        db.check().unwrap();
    }
}
