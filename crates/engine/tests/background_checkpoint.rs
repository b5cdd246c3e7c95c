//! Checkpoints that finish in the background (B+-tree, Bε-tree and dynamized): writes go on while a checkpoint's page
//! writes are held up, and a crash while it is held up loses no synced write — recovery replays the WAL the
//! checkpoint would have retired, then the live one.

use parking_lot::{Condvar, Mutex};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
mod common;
use common::background_checkpoint_families as families;
use common::{numbered_put as put, wal_files};
use strata::lab::index::dynamized::DynStats;
use strata::options::{DeletePolicy, DynOptions};
use strata::vfs::{HookedVfs, MemVfs, Vfs, VfsHook, VfsOp};
use strata::{Config, Durability, IndexConfig, Options, RawDb, TypeKind};
use strata::{Error, Result};

/// Holds up (or, once failed, refuses) every write to page files while closed.
#[derive(Debug, Default)]
struct Gate {
    /// (closed, writes waiting)
    state: Mutex<(bool, usize)>,
    cv: Condvar,
    failed: AtomicBool,
}

impl Gate {
    fn close(&self) {
        self.state.lock().0 = true;
    }
    fn open(&self) {
        self.state.lock().0 = false;
        self.cv.notify_all();
    }
    /// Every held write and every later one fails (the machine has lost power).
    fn fail(&self) {
        self.failed.store(true, Ordering::Release);
        self.open();
    }
    fn waiting(&self) -> usize {
        self.state.lock().1
    }
    fn pass(&self) -> Result<()> {
        let mut st = self.state.lock();
        if st.0 {
            st.1 += 1;
            while st.0 {
                self.cv.wait(&mut st);
            }
            st.1 -= 1;
        }
        if self.failed.load(Ordering::Acquire) {
            return Err(Error::io("data.pages", std::io::Error::other("power lost")));
        }
        Ok(())
    }
}

/// Holds up the writes, resizes and syncs of every file a checkpoint writes: page files, shard files, the
/// dynamized state and the learned index's records.
impl VfsHook for Gate {
    fn before(&self, op: VfsOp<'_>, path: &Path) -> Result<()> {
        let gated = path.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
            n == "data.pages"
                || n.starts_with("shard-")
                || n.starts_with("DYNSTATE")
                || n.starts_with("LEARNED")
        });
        match op {
            VfsOp::Write { .. } | VfsOp::SetLen | VfsOp::Sync if gated => self.pass(),
            _ => Ok(()),
        }
    }
}

const CHECKPOINT_BYTES: u64 = 64 << 10;

fn options(vfs: Arc<dyn Vfs>) -> Options {
    Options {
        vfs,
        cache_bytes: 1 << 20,
        checkpoint_wal_bytes: CHECKPOINT_BYTES,
        ..Options::default()
    }
}

fn key(i: u64) -> Vec<u8> {
    i.to_be_bytes().to_vec()
}

fn value(i: u64) -> Vec<u8> {
    (i % 251).to_be_bytes().to_vec()
}

fn create(vfs: Arc<dyn Vfs>, index: IndexConfig) -> RawDb {
    let config = Config {
        index,
        key: TypeKind::U64,
        value: TypeKind::U64,
        ..Config::default()
    };
    RawDb::create("/db", &config, &options(vfs)).expect("create")
}

/// Writes `from..to` one batch each on another thread, durably (`sync`); returns when they are all
/// acknowledged, or fails if they do not finish within a generous bound.
fn write_range(db: &RawDb, from: u64, to: u64) {
    let (tx, rx) = std::sync::mpsc::channel();
    let db2 = db.clone();
    std::thread::spawn(move || {
        for i in from..to {
            db2.write(&[put(i)], Some(Durability::Sync)).expect("write");
        }
        // The clone goes before the news, so a close that follows closes the last handle.
        drop(db2);
        let _ = tx.send(());
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("writes were held up by the checkpoint's page writes");
}

/// Writes until a checkpoint has begun and is held up by the gate (its page writes wait); fails if a write
/// itself is held up before that (a writer waiting on the checkpoint's I/O).
fn start_held_checkpoint(db: &RawDb, gate: &Arc<Gate>, mem: &MemVfs) -> u64 {
    gate.close();
    let (tx, rx) = std::sync::mpsc::channel();
    let (db2, gate2) = (db.clone(), gate.clone());
    std::thread::spawn(move || {
        let mut i = 0;
        while gate2.waiting() == 0 && i < 100_000 {
            db2.write(&[put(i)], Some(Durability::Sync)).expect("write");
            i += 1;
            // The checkpoint thread needs a moment to reach its first page write.
            if i % 64 == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        drop(db2);
        let _ = tx.send(i);
    });
    let i = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("a write was held up by the checkpoint's page writes");
    assert!(i < 100_000, "no checkpoint started");
    assert_eq!(
        wal_files(mem),
        2,
        "the WAL the held checkpoint retires stays until it is done"
    );
    i
}

/// A database of family `index` on a gated VFS whose checkpoint in the background is held up.
struct Held {
    mem: Arc<MemVfs>,
    gate: Arc<Gate>,
    vfs: Arc<dyn Vfs>,
    db: RawDb,
    /// Records `0..held_at` are written.
    held_at: u64,
}

fn hold_a_checkpoint(index: &IndexConfig) -> Held {
    let mem = Arc::new(MemVfs::new());
    let gate = Arc::new(Gate::default());
    let vfs: Arc<dyn Vfs> = Arc::new(HookedVfs::new(mem.clone(), gate.clone()));
    let db = create(vfs.clone(), index.clone());
    let held_at = start_held_checkpoint(&db, &gate, &mem);
    Held {
        mem,
        gate,
        vfs,
        db,
        held_at,
    }
}

#[test]
fn writes_go_on_while_a_checkpoint_is_held_up() {
    for index in families() {
        let Held {
            mem,
            gate,
            vfs,
            db,
            held_at,
        } = hold_a_checkpoint(&index);
        // Up to the backlog's bound (the WAL twice the checkpoint size), writes complete while the
        // checkpoint cannot write a page.
        let more = held_at + (CHECKPOINT_BYTES / 200);
        write_range(&db, held_at, more);
        assert!(
            gate.waiting() > 0,
            "{index:?}: the checkpoint is still held"
        );
        gate.open();
        db.close().expect("close");
        let db = RawDb::open("/db", &options(vfs)).expect("reopen");
        for i in 0..more {
            let v = db.get(&key(i)).expect("get").expect("present");
            assert_eq!(v, value(i));
        }
        db.check().expect("check");
        assert_eq!(wal_files(&mem), 1);
    }
}

#[test]
fn a_crash_while_a_checkpoint_is_held_up_keeps_every_synced_write() {
    for index in families() {
        let Held {
            mem,
            gate,
            db,
            held_at,
            ..
        } = hold_a_checkpoint(&index);
        let more = held_at + 50;
        write_range(&db, held_at, more);
        // Power loss: the handle vanishes, the held page writes fail, unsynced bytes are dropped.
        std::mem::forget(db);
        gate.fail();
        mem.crash();
        let fresh: Arc<dyn Vfs> = mem.clone();
        let db = RawDb::open("/db", &options(fresh)).expect("reopen after crash");
        assert!(
            db.recovery().replayed_records >= more - 1,
            "{index:?}: the retired WAL was replayed too ({} records)",
            db.recovery().replayed_records
        );
        for i in 0..more {
            assert!(
                db.get(&key(i)).expect("get").is_some(),
                "{index:?}: synced write {i} lost"
            );
        }
        db.check().expect("check after crash");
    }
}

/// With the tagging delete policy a flush waits until no version older than its tags is read. A checkpoint
/// held up in its shard writes is not such a reader (its tags were copied when it was sealed): overwrites of
/// stored keys, each tagging the older record in its shard, go on while the checkpoint cannot write. (A sealed
/// checkpoint that held its version made these flushes wait for it, and forever when the checkpoint thread
/// failed before writing.)
#[test]
fn a_tagging_flush_does_not_wait_for_a_held_checkpoint() {
    let index = IndexConfig::Dynamized(DynOptions {
        delete_policy: DeletePolicy::Tagging,
        buffer_capacity: 16,
        ..DynOptions::default()
    });
    let held = hold_a_checkpoint(&index);
    let (db, gate, held_at) = (&held.db, &held.gate, held.held_at);
    // Within the backlog's bound (as above), and many buffers' worth: with at most two sealed buffers
    // waiting, a flush that waited for the checkpoint would stop the writer.
    let overwrites = (CHECKPOINT_BYTES / 200).min(held_at);
    assert!(
        overwrites >= 160,
        "only {held_at} records before the checkpoint"
    );
    write_range(db, 0, overwrites);
    assert!(gate.waiting() > 0, "the checkpoint is still held");
    assert!(
        db.stats()
            .expect("stats")
            .family_stats::<DynStats>()
            .expect("dynamized statistics")
            .tagged
            > 0,
        "the overwrites tagged older records"
    );
    gate.open();
    held.db.close().expect("close");
    let db = RawDb::open("/db", &options(held.vfs)).expect("reopen");
    for i in 0..held_at {
        assert_eq!(db.get(&key(i)).expect("get"), Some(value(i)), "record {i}");
    }
    db.check().expect("check");
    assert_eq!(wal_files(&held.mem), 1);
}

#[test]
fn a_writer_waits_once_the_backlog_is_full() {
    for index in families() {
        let Held {
            mem: _,
            gate,
            vfs,
            db,
            held_at,
        } = hold_a_checkpoint(&index);
        // Far more than the backlog allows: the WAL would reach several checkpoint sizes (records of about
        // 40 bytes).
        let end = held_at + 16 * CHECKPOINT_BYTES / 100;
        let written = Arc::new(std::sync::atomic::AtomicU64::new(held_at));
        let (db2, written2) = (db.clone(), written.clone());
        let writer = std::thread::spawn(move || {
            for i in held_at..end {
                db2.write(&[put(i)], Some(Durability::Sync)).expect("write");
                written2.store(i + 1, Ordering::Release);
            }
        });
        // Wait until the writer stops making progress.
        let mut last = u64::MAX;
        loop {
            std::thread::sleep(Duration::from_millis(300));
            let now = written.load(Ordering::Acquire);
            if now == last || now == end {
                break;
            }
            last = now;
        }
        let stalled_at = written.load(Ordering::Acquire);
        assert!(
            stalled_at < end,
            "{index:?}: the writer never waited for the held checkpoint"
        );
        // It stalled only once the WAL had grown past the backlog (twice the checkpoint size).
        assert!(
            stalled_at - held_at >= CHECKPOINT_BYTES / 200,
            "{index:?}: the writer waited after {} records",
            stalled_at - held_at
        );
        gate.open();
        writer.join().expect("writer");
        db.close().expect("close");
        let db = RawDb::open("/db", &options(vfs)).expect("reopen");
        for i in 0..end {
            assert!(
                db.get(&key(i)).expect("get").is_some(),
                "{index:?}: write {i} lost"
            );
        }
    }
}
