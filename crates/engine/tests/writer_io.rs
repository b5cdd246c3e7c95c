//! The writer's own I/O while checkpoints run in the background (B+-tree, Bε-tree, dynamized, learned): at
//! durability `none` and `flush` the writing thread never waits for the device — no `fdatasync`, no
//! directory sync — although the WAL rotates many times (the rotation's syncs run on the checkpoint thread);
//! a `sync` write right after a rotation waits until the retired WAL is durable (`none` and `flush` writes
//! do not); and a power loss before the checkpoint thread synced anything recovers every write that was
//! synced, also when the OS wrote back the new WAL but not the end of the retired one.

use parking_lot::{Condvar, Mutex};
use std::cell::Cell;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
mod common;
use common::background_checkpoint_families as families;
use common::{numbered_put as put, wait_checkpoint_done, wal_files};
use strata::vfs::{HookedVfs, MemVfs, Vfs, VfsHook, VfsOp};
use strata::{Config, Durability, IndexConfig, Options, RawDb, Result, TypeKind};

thread_local! {
    /// This thread is the test's writer.
    static WRITER: Cell<bool> = const { Cell::new(false) };
}

fn on_writer() -> bool {
    WRITER.with(Cell::get)
}

/// What the files saw, and a gate that can hold the WAL syncs of threads other than the writer.
#[derive(Debug, Default)]
struct Probe {
    writer_syncs: AtomicU64,
    writer_dir_syncs: AtomicU64,
    other_syncs: AtomicU64,
    wal_creates: AtomicU64,
    /// The power is lost: every later operation fails (a handle that outlives the crash must not reach the
    /// files that recovery reads).
    dead: AtomicBool,
    /// (held, syncs waiting)
    gate: Mutex<(bool, usize)>,
    cv: Condvar,
}

impl Probe {
    fn hold(&self, held: bool) {
        self.gate.lock().0 = held;
        self.cv.notify_all();
    }
    fn waiting(&self) -> usize {
        self.gate.lock().1
    }
    fn alive(&self) -> Result<()> {
        if self.dead.load(Ordering::Acquire) {
            return Err(strata::Error::io(
                "/db",
                std::io::Error::other("power lost"),
            ));
        }
        Ok(())
    }
    fn pass(&self) {
        let mut g = self.gate.lock();
        g.1 += 1;
        while g.0 {
            self.cv.wait(&mut g);
        }
        g.1 -= 1;
    }
}

fn is_wal(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("wal-"))
}

/// Counts syncs by thread and WAL creations, holds other threads' WAL syncs while the gate is held, and
/// fails every change to the files once the power is lost.
impl VfsHook for Probe {
    fn before(&self, op: VfsOp<'_>, path: &Path) -> Result<()> {
        match op {
            VfsOp::Open { create } => {
                self.alive()?;
                if create && is_wal(path) {
                    self.wal_creates.fetch_add(1, Ordering::Relaxed);
                }
            }
            VfsOp::Write { .. } | VfsOp::SetLen | VfsOp::RemoveFile | VfsOp::Rename { .. } => {
                self.alive()?;
            }
            VfsOp::Sync => {
                if on_writer() {
                    self.writer_syncs.fetch_add(1, Ordering::Relaxed);
                } else {
                    self.other_syncs.fetch_add(1, Ordering::Relaxed);
                    if is_wal(path) {
                        self.pass();
                    }
                }
                self.alive()?;
            }
            VfsOp::SyncDir => {
                self.alive()?;
                if on_writer() {
                    self.writer_dir_syncs.fetch_add(1, Ordering::Relaxed);
                }
            }
            VfsOp::CreateDirAll | VfsOp::ListDir | VfsOp::Lock | VfsOp::Read { .. } => {}
        }
        Ok(())
    }
}

const CHECKPOINT_BYTES: u64 = 64 << 10;

fn options(vfs: Arc<dyn Vfs>, durability: Durability) -> Options {
    Options {
        vfs,
        cache_bytes: 1 << 20,
        checkpoint_wal_bytes: CHECKPOINT_BYTES,
        durability: Some(durability),
        ..Options::default()
    }
}

fn setup(index: &IndexConfig, durability: Durability) -> (Arc<MemVfs>, Arc<Probe>, RawDb) {
    let mem = Arc::new(MemVfs::new());
    let probe = Arc::new(Probe::default());
    let vfs: Arc<dyn Vfs> = Arc::new(HookedVfs::new(mem.clone(), probe.clone()));
    let config = Config {
        index: index.clone(),
        key: TypeKind::U64,
        value: TypeKind::U64,
        ..Config::default()
    };
    let db = RawDb::create("/db", &config, &options(vfs, durability)).expect("create");
    (mem, probe, db)
}

/// A power loss: the handle is abandoned (its threads' later operations fail) and unsynced bytes are
/// dropped.
fn power_loss(db: RawDb, mem: &MemVfs, probe: &Probe) {
    probe.dead.store(true, Ordering::Release);
    std::mem::forget(db);
    mem.crash();
    probe.hold(false);
}

fn check_all(mem: &Arc<MemVfs>, durability: Durability, n: u64, index: &IndexConfig) {
    let probe = Arc::new(Probe::default());
    let vfs: Arc<dyn Vfs> = Arc::new(HookedVfs::new(mem.clone(), probe));
    let db = RawDb::open("/db", &options(vfs, durability)).expect("reopen");
    for i in 0..n {
        let v = db.get(&i.to_be_bytes()).expect("get");
        assert_eq!(
            v,
            Some((i % 251).to_be_bytes().to_vec()),
            "{index:?}: key {i}"
        );
    }
    db.check().expect("check");
}

#[test]
fn the_writer_never_syncs_at_durability_none_or_flush() {
    let n = 12_000u64;
    for index in families() {
        for durability in [Durability::None, Durability::Flush] {
            let (mem, probe, db) = setup(&index, durability);
            let creates_before = probe.wal_creates.load(Ordering::Relaxed);
            WRITER.with(|w| w.set(true));
            for i in 0..n {
                db.write(&[put(i)], None).expect("write");
                // Stay below the backlog's bound (where the writer would checkpoint itself): a rotation
                // finishes before the WAL can grow that far.
                if i % 64 == 0 && wal_files(&mem) > 1 {
                    wait_checkpoint_done(&mem);
                }
            }
            WRITER.with(|w| w.set(false));
            let rotations = probe.wal_creates.load(Ordering::Relaxed) - creates_before;
            assert!(
                rotations >= 5,
                "{index:?} {durability:?}: only {rotations} WAL rotations"
            );
            assert_eq!(
                (
                    probe.writer_syncs.load(Ordering::Relaxed),
                    probe.writer_dir_syncs.load(Ordering::Relaxed)
                ),
                (0, 0),
                "{index:?} {durability:?}: the writer synced a file or the directory ({rotations} rotations)"
            );
            assert!(probe.other_syncs.load(Ordering::Relaxed) >= 3 * rotations);
            db.close().expect("close");
            check_all(&mem, durability, n, &index);
        }
    }
}

/// Writes (durability `none`, whatever the database's) until a rotation has begun and its thread is held at
/// its first WAL sync.
fn hold_a_rotation(db: &RawDb, probe: &Probe) -> u64 {
    probe.hold(true);
    let mut i = 0;
    while probe.waiting() == 0 {
        db.write(&[put(i)], Some(Durability::None)).expect("write");
        i += 1;
        assert!(
            i < 100_000,
            "no rotation left its WAL syncs to the checkpoint thread"
        );
        if i % 64 == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    i
}

/// A synced write of key 0, then a rotation held at its first WAL sync (`hold_a_rotation`), then 200 writes
/// (the database's durability) into the new WAL from the returned key on; the writer flag is cleared after.
fn write_across_a_held_rotation(db: &RawDb, probe: &Probe) -> u64 {
    WRITER.with(|w| w.set(true));
    db.write(&[put(0)], Some(Durability::Sync))
        .expect("sync write");
    let held_at = hold_a_rotation(db, probe).max(1);
    for i in held_at..held_at + 200 {
        db.write(&[put(i)], None).expect("write");
    }
    WRITER.with(|w| w.set(false));
    held_at
}

/// Opens `/db` of `mem` after a power loss, through a probe that holds nothing.
fn reopen_after_crash(mem: &Arc<MemVfs>, durability: Durability) -> RawDb {
    let vfs: Arc<dyn Vfs> = Arc::new(HookedVfs::new(mem.clone(), Arc::new(Probe::default())));
    RawDb::open("/db", &options(vfs, durability)).expect("reopen after the crash")
}

/// A write with durability `sync` to the WAL a rotation began waits until the retired WAL is durable (a
/// synced record must not be durable before the writes it follows); writes at `none` and `flush` do not wait
/// (recovery drops what the OS wrote back of them if the retired WAL's end was lost: see the next tests).
#[test]
fn a_sync_write_after_a_rotation_waits_for_the_retired_wal_and_a_flushed_one_does_not() {
    for index in families() {
        let (mem, probe, db) = setup(&index, Durability::None);
        WRITER.with(|w| w.set(true));
        let held_at = hold_a_rotation(&db, &probe);
        // Writes at durability `none` and `flush` go on while the retired WAL is not durable.
        let (tx, rx) = std::sync::mpsc::channel();
        let db2 = db.clone();
        std::thread::spawn(move || {
            WRITER.with(|w| w.set(true));
            for i in held_at..held_at + 100 {
                let durability = if i % 2 == 0 {
                    Durability::Flush
                } else {
                    Durability::None
                };
                db2.write(&[put(i)], Some(durability)).expect("write");
            }
            let _ = tx.send(());
        });
        rx.recv_timeout(Duration::from_secs(30))
            .expect("{index:?}: a write at `none` or `flush` waited for the retired WAL's sync");
        assert!(
            probe.waiting() > 0,
            "{index:?}: the rotation's syncs are still held"
        );
        let last = held_at + 100;
        let (tx, rx) = std::sync::mpsc::channel();
        let db2 = db.clone();
        let writer = std::thread::spawn(move || {
            WRITER.with(|w| w.set(true));
            db2.write(&[put(last)], Some(Durability::Sync))
                .expect("sync write");
            let _ = tx.send(());
        });
        assert!(
            rx.recv_timeout(Duration::from_millis(300)).is_err(),
            "{index:?}: the sync write completed before the WAL it follows was durable"
        );
        probe.hold(false);
        rx.recv_timeout(Duration::from_secs(60))
            .expect("the write completes once the retired WAL is durable");
        writer.join().expect("writer");
        WRITER.with(|w| w.set(false));
        // Power loss now (the checkpoint may or may not have finished): every write up to the synced one
        // was made durable by it, through the chain of WALs.
        power_loss(db, &mem, &probe);
        check_all(&mem, Durability::None, last + 1, &index);
    }
}

/// The highest-numbered WAL file of `/db`.
fn newest_wal(mem: &MemVfs) -> std::path::PathBuf {
    mem.file_paths()
        .into_iter()
        .filter(|p| is_wal(p))
        .max()
        .expect("a WAL")
}

/// A power loss before a rotation's syncs completed, after the OS wrote back on its own every page of the
/// new WAL (flushed writes to it did not wait) but nothing more of the retired one: recovery drops the new
/// WAL's records (none was synced) and keeps a prefix, instead of refusing the hole between the two WALs.
#[test]
fn a_power_loss_after_the_new_wal_was_written_back_before_the_retired_one_recovers_a_prefix() {
    for index in families() {
        let (mem, probe, db) = setup(&index, Durability::Flush);
        let held_at = write_across_a_held_rotation(&db, &probe);
        let newest = newest_wal(&mem);
        let written_back = mem.file_bytes(&newest).expect("the live WAL");
        power_loss(db, &mem, &probe);
        mem.set_file_bytes(&newest, written_back);
        let db = reopen_after_crash(&mem, Durability::Flush);
        assert_eq!(
            db.recovery().unsynced_wals_dropped,
            1,
            "{index:?}: the new WAL was dropped"
        );
        assert!(
            db.get(&0u64.to_be_bytes()).expect("get").is_some(),
            "{index:?}: the synced write was lost"
        );
        for i in held_at..held_at + 200 {
            assert!(
                db.get(&i.to_be_bytes()).expect("get").is_none(),
                "{index:?}: record {i} of the dropped WAL was replayed"
            );
        }
        db.check().expect("check");
    }
}

#[test]
fn a_power_loss_before_the_rotation_is_durable_recovers_a_prefix() {
    for index in families() {
        for durability in [Durability::None, Durability::Flush] {
            let (mem, probe, db) = setup(&index, durability);
            // One durable point (key 0) before the rotation.
            let held_at = write_across_a_held_rotation(&db, &probe);
            power_loss(db, &mem, &probe);
            let db = reopen_after_crash(&mem, durability);
            // A prefix: key 0 (synced) is there, and whatever else survived is every key below some bound.
            let present: Vec<bool> = (0..held_at + 200)
                .map(|i| db.get(&i.to_be_bytes()).expect("get").is_some())
                .collect();
            assert!(
                present[0],
                "{index:?} {durability:?}: the synced write was lost"
            );
            let end = present.iter().position(|p| !p).unwrap_or(present.len());
            assert!(
                present[end..].iter().all(|p| !p),
                "{index:?} {durability:?}: not a prefix (first hole at {end})"
            );
            db.check().expect("check");
        }
    }
}
