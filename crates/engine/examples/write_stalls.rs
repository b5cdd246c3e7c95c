//! A latency-cause probe for single-record writes: loads `u64` keys in a seeded random order (the dbbench
//! `fillrandom` phase, without the rest of the suite) and, for every write slower than a threshold, prints
//! what the writer thread did meanwhile:
//!
//! * wall time, and the thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`), minor/major page faults and voluntary /
//!   involuntary context switches over the write (`getrusage(RUSAGE_THREAD)` for the counts): a write with little CPU time
//!   and voluntary switches *waited* (a lock, an fsync); one with involuntary switches was preempted;
//! * the file-system calls the writer made during the write and their time (a timing `Vfs` around the real
//!   one, counting per thread): `sync` (fdatasync), `dsync` (directory fsync), `open`, `rm`, `write`;
//! * the I/O of every thread meanwhile (page writes and reads, shard bytes, WAL syncs: a checkpoint or a
//!   rotation under way).
//!
//! The hash family runs as in the lab: `persist = eadr`, its region a shared mapping of the real file.
//!
//! `cargo run --release -p strata --example write_stalls -- <family> <records> <none|flush> [threshold-ms] [dir]`

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use strata::vfs::{FileKind, FileMapping, OpenOptions, StdVfs, Vfs, VfsFile, VfsLock};
use strata::{Config, Durability, IndexKind, Options, RawDb};

/// The `strata` binary's allocator, so that the probe sees the writes the benchmark lab sees (README,
/// "Allocator").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// File-system work of the current thread: (calls, nanoseconds) per kind.
#[derive(Clone, Copy, Default, Debug)]
struct FsWork {
    sync: (u64, u64),
    dsync: (u64, u64),
    open: (u64, u64),
    remove: (u64, u64),
    /// Writes to a WAL file.
    wal_write: (u64, u64),
    /// Writes to any other file (pages, shards).
    write: (u64, u64),
}

thread_local! {
    static WORK: Cell<FsWork> = Cell::new(FsWork::default());
}

fn timed<T>(pick: fn(&mut FsWork) -> &mut (u64, u64), f: impl FnOnce() -> T) -> T {
    let t = Instant::now();
    let r = f();
    let ns = t.elapsed().as_nanos() as u64;
    WORK.with(|w| {
        let mut v = w.get();
        let slot = pick(&mut v);
        slot.0 += 1;
        slot.1 += ns;
        w.set(v);
    });
    r
}

/// The real file system with timed calls; `.1`: pass file mappings through (the hash family's region
/// `hash.pm` is a shared mapping in the lab; its stores and `msync`s are then not timed as calls, but show
/// as CPU time, page faults and wall time).
#[derive(Debug)]
struct TimingVfs(StdVfs, bool);

/// A file and whether it is a WAL.
#[derive(Debug)]
struct TimingFile(Box<dyn VfsFile>, bool);

impl Vfs for TimingVfs {
    fn open(&self, path: &Path, opts: OpenOptions) -> strata::Result<Box<dyn VfsFile>> {
        let f = timed(|w| &mut w.open, || self.0.open(path, opts))?;
        let wal = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("wal-"));
        Ok(Box::new(TimingFile(f, wal)))
    }
    fn exists(&self, path: &Path) -> bool {
        self.0.exists(path)
    }
    fn create_dir_all(&self, path: &Path) -> strata::Result<()> {
        self.0.create_dir_all(path)
    }
    fn list_dir(&self, path: &Path) -> strata::Result<Vec<String>> {
        self.0.list_dir(path)
    }
    fn remove_file(&self, path: &Path) -> strata::Result<()> {
        timed(|w| &mut w.remove, || self.0.remove_file(path))
    }
    fn rename(&self, from: &Path, to: &Path) -> strata::Result<()> {
        self.0.rename(from, to)
    }
    fn sync_dir(&self, path: &Path) -> strata::Result<()> {
        timed(|w| &mut w.dsync, || self.0.sync_dir(path))
    }
    fn lock(&self, path: &Path) -> strata::Result<Box<dyn VfsLock>> {
        self.0.lock(path)
    }
    fn lock_shared(&self, path: &Path) -> strata::Result<Box<dyn VfsLock>> {
        self.0.lock_shared(path)
    }
    fn remove_dir(&self, path: &Path) -> strata::Result<()> {
        self.0.remove_dir(path)
    }
    fn mapping(&self, path: &Path) -> FileMapping {
        // Mapped files would bypass the timing: keep every byte going through calls, unless asked.
        if self.1 {
            self.0.mapping(path)
        } else {
            FileMapping::Unavailable
        }
    }
}

impl VfsFile for TimingFile {
    fn path(&self) -> &Path {
        self.0.path()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> strata::Result<usize> {
        self.0.read_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> strata::Result<()> {
        if self.1 {
            timed(|w| &mut w.wal_write, || self.0.write_all_at(buf, offset))
        } else {
            timed(|w| &mut w.write, || self.0.write_all_at(buf, offset))
        }
    }
    fn len(&self) -> strata::Result<u64> {
        self.0.len()
    }
    fn set_len(&self, len: u64) -> strata::Result<()> {
        self.0.set_len(len)
    }
    fn allocate(&self, len: u64) -> strata::Result<()> {
        self.0.allocate(len)
    }
    fn allocate_ahead(&self, offset: u64, len: u64) {
        self.0.allocate_ahead(offset, len)
    }
    fn sync_data(&self) -> strata::Result<()> {
        timed(|w| &mut w.sync, || self.0.sync_data())
    }
    fn start_writeback(&self, offset: u64, len: u64) {
        self.0.start_writeback(offset, len)
    }
}

/// This thread's resource usage.
fn usage() -> libc::rusage {
    // SAFETY: getrusage writes a rusage into the zeroed struct we own.
    unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_THREAD, &mut u);
        u
    }
}

/// This thread's CPU time in microseconds (exact, unlike rusage's tick-sampled user/system split).
fn cpu_us() -> i64 {
    // SAFETY: clock_gettime writes a timespec into the zeroed struct we own.
    unsafe {
        let mut t: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t);
        t.tv_sec * 1_000_000 + t.tv_nsec / 1000
    }
}

fn main() -> strata::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let family = args.first().map_or("btree", String::as_str);
    let n: u64 = args
        .get(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let durability = match args.get(2).map_or("none", String::as_str) {
        "flush" => Durability::Flush,
        "sync" => Durability::Sync,
        _ => Durability::None,
    };
    let threshold = Duration::from_micros(
        (args
            .get(3)
            .and_then(|s| s.parse::<f64>().ok())
            .unwrap_or(5.0)
            * 1000.0) as u64,
    );
    let dir = args
        .get(4)
        .map_or_else(|| PathBuf::from("/tmp/write_stalls"), PathBuf::from);
    let kind = IndexKind::ALL
        .iter()
        .copied()
        .find(|k| k.name() == family)
        .ok_or_else(|| strata::Error::invalid(format!("no family {family}")))?;
    let _ = std::fs::remove_dir_all(&dir);
    // The hash family as the lab runs it: eADR persistence over a shared mapping of its region.
    let hash = kind == IndexKind::Hash;
    let config = if hash {
        let mut options = kind.default_config().options_json();
        if let Some(map) = options.as_object_mut() {
            map.insert("persist".into(), serde_json::Value::from("eadr"));
        }
        strata::IndexConfig::from_json(kind, options)?
    } else {
        kind.default_config()
    };
    let options = Options {
        vfs: Arc::new(TimingVfs(StdVfs, hash)),
        durability: Some(durability),
        ..Options::default()
    };
    let db = RawDb::create(&dir, &Config::with_index(config), &options)?;
    // The dbbench permutation is another one, but any uniform random order loads the same way.
    let mut keys: Vec<u64> = (0..n).collect();
    let mut x: u64 = 42;
    for i in (1..keys.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        keys.swap(i, (x % (i as u64 + 1)) as usize);
    }
    let mut lat = Vec::with_capacity(n as usize);
    let started = Instant::now();
    for (i, &k) in keys.iter().enumerate() {
        let key = k.to_be_bytes();
        let value = k.to_le_bytes();
        let u0 = usage();
        let c0 = cpu_us();
        let w0 = WORK.with(Cell::get);
        let io0 = db.io();
        let t = Instant::now();
        db.insert(&key, &value)?;
        let el = t.elapsed();
        lat.push(el.as_nanos() as u64);
        if el >= threshold {
            let u1 = usage();
            let c1 = cpu_us();
            let w1 = WORK.with(Cell::get);
            let d = |a: (u64, u64), b: (u64, u64)| (b.0 - a.0, (b.1 - a.1) / 1000);
            let io = db.io() - io0;
            let (pages, shards, wal) = (
                io.kind(FileKind::Pages),
                io.kind(FileKind::Shards),
                io.kind(FileKind::Wal),
            );
            println!(
                "slow write #{i} at {:.2}s: wall {} us, cpu {} us, minflt {}, majflt {}, vcsw {}, ivcsw {}; \
                 writer fs (calls, us): sync {:?} dsync {:?} open {:?} rm {:?} wal-write {:?} write {:?}; all threads: \
                 page writes {} reads {}, shard bytes written {}, wal syncs {}",
                started.elapsed().as_secs_f64(),
                el.as_micros(),
                c1 - c0,
                u1.ru_minflt - u0.ru_minflt,
                u1.ru_majflt - u0.ru_majflt,
                u1.ru_nvcsw - u0.ru_nvcsw,
                u1.ru_nivcsw - u0.ru_nivcsw,
                d(w0.sync, w1.sync),
                d(w0.dsync, w1.dsync),
                d(w0.open, w1.open),
                d(w0.remove, w1.remove),
                d(w0.wal_write, w1.wal_write),
                d(w0.write, w1.write),
                pages.writes,
                pages.reads,
                shards.bytes_written,
                wal.syncs,
            );
        }
    }
    let total = started.elapsed();
    lat.sort_unstable();
    let q = |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)] as f64 / 1000.0;
    println!(
        "{family} {n} records, durability {durability:?}: {:.2} s, {:.0} ops/s; p50 {:.2} us, p99 {:.2} us, \
         p99.9 {:.2} us, p99.99 {:.2} us, max {:.2} us",
        total.as_secs_f64(),
        n as f64 / total.as_secs_f64(),
        q(0.5),
        q(0.99),
        q(0.999),
        q(0.9999),
        *lat.last().unwrap_or(&0) as f64 / 1000.0
    );
    db.close()?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
