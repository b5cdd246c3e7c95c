//! `FaultVfs`: wraps a [`MemVfs`] and makes every operation fail after a chosen number of operations.
//!
//! Counted operations (one tick each, whether they succeed or fail): `open`, `create_dir_all`, `list_dir`,
//! `remove_file`, `rename`, `sync_dir`, `lock`, and on files `read_at`, `write_all_at`, `len`, `set_len`,
//! `sync_data`. `exists` and `path` cannot fail and are not counted.
//!
//! [`FaultVfs::fail_after`]`(n)` lets the next `n` operations through; from then on every operation returns
//! `Error::Io` with an `io::Error` of kind `Other` and message `"injected fault"`, without touching the
//! underlying `MemVfs` (a failed write writes nothing), until [`FaultVfs::disarm`] or [`FaultVfs::crash`].
//! `fail_after(0)` also waits for the operations under way to finish: once it returns, nothing more reaches
//! the `MemVfs` through this handle. Crash tests rely on it: the threads of a handle they abandon (a dead
//! process) must not create, truncate or write a file of the database that recovery then opens.
//!
//! [`FaultVfs::refuse_writes`] simulates a full disk or a read-only mount: operations that would change the
//! file system fail with the chosen error kind while reads go on.
//!
//! `FaultVfs` is a cheap handle (`Clone`; the counter and the `MemVfs` are shared), so a test keeps one clone
//! while the database holds another as `Arc<dyn Vfs>`.
//!
//! Cost: a shared lock and two atomic operations per operation on top of `MemVfs`.

use super::mem_vfs::MemVfs;
use super::vfs::{OpenOptions, Vfs, VfsFile, VfsLock};
use crate::error::{Error, Result};
use parking_lot::{Mutex, RwLock, RwLockReadGuard};
use std::io::ErrorKind;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

const DISARMED: u64 = u64::MAX;

#[derive(Debug, Default)]
struct Control {
    /// Operations counted so far.
    ops: AtomicU64,
    /// Operation number (0-based) from which every operation fails; `DISARMED` if none.
    fail_at: AtomicU64,
    /// While set, operations that would change the file system fail with this error kind.
    refuse_writes: Mutex<Option<ErrorKind>>,
    /// Held shared by every operation that passed its tick until it has reached the `MemVfs`; taken
    /// exclusively by `fail_after(0)` to wait for them.
    under_way: RwLock<()>,
}

/// An operation allowed through: it reaches the `MemVfs` while this lives.
type Passed<'a> = RwLockReadGuard<'a, ()>;

impl Control {
    fn tick(&self, path: &Path) -> Result<Passed<'_>> {
        let passed = self.under_way.read();
        let n = self.ops.fetch_add(1, Ordering::SeqCst);
        if n >= self.fail_at.load(Ordering::SeqCst) {
            return Err(Error::io(path, std::io::Error::other("injected fault")));
        }
        Ok(passed)
    }

    /// A counted operation that changes the file system.
    fn tick_write(&self, path: &Path) -> Result<Passed<'_>> {
        let passed = self.tick(path)?;
        if let Some(kind) = *self.refuse_writes.lock() {
            return Err(Error::io(
                path,
                std::io::Error::new(
                    kind,
                    "writes refused (simulated full or read-only file system)",
                ),
            ));
        }
        Ok(passed)
    }
}

/// A fault-injecting file system over a shared [`MemVfs`].
#[derive(Debug, Clone)]
pub struct FaultVfs {
    base: Arc<MemVfs>,
    ctl: Arc<Control>,
}

impl FaultVfs {
    pub fn new(base: Arc<MemVfs>) -> FaultVfs {
        FaultVfs {
            base,
            ctl: Arc::new(Control {
                ops: AtomicU64::new(0),
                fail_at: AtomicU64::new(DISARMED),
                refuse_writes: Mutex::new(None),
                under_way: RwLock::new(()),
            }),
        }
    }

    /// Lets `n` more operations succeed; every operation after them fails. With `n = 0` it returns only
    /// once the operations already let through have finished: from then on this handle changes nothing.
    pub fn fail_after(&self, n: u64) {
        let now = self.ctl.ops.load(Ordering::SeqCst);
        self.ctl
            .fail_at
            .store(now.saturating_add(n), Ordering::SeqCst);
        if n == 0 {
            drop(self.ctl.under_way.write());
        }
    }

    /// Simulates a full disk (`ErrorKind::StorageFull`) or a read-only mount (`ErrorKind::ReadOnlyFilesystem`):
    /// until [`allow_writes`](Self::allow_writes), every operation that would change the file system — an open
    /// with `create` or `truncate`, `write_all_at`, `set_len`, `sync_data` of a writable handle, `remove_file`,
    /// `rename`, `create_dir_all`, `lock` — fails with `kind`; reads, `len`, `list_dir`, read-only opens,
    /// `lock_shared` and `sync_dir` keep working.
    pub fn refuse_writes(&self, kind: ErrorKind) {
        *self.ctl.refuse_writes.lock() = Some(kind);
    }

    /// Ends [`refuse_writes`](Self::refuse_writes).
    pub fn allow_writes(&self) {
        *self.ctl.refuse_writes.lock() = None;
    }

    /// Stops injecting faults.
    pub fn disarm(&self) {
        self.ctl.fail_at.store(DISARMED, Ordering::SeqCst);
    }

    /// Operations counted since creation.
    pub fn operations(&self) -> u64 {
        self.ctl.ops.load(Ordering::SeqCst)
    }

    /// True once the armed budget is used up (the next operation fails).
    pub fn is_failing(&self) -> bool {
        self.ctl.ops.load(Ordering::SeqCst) >= self.ctl.fail_at.load(Ordering::SeqCst)
    }

    /// Simulates a power loss on the underlying `MemVfs` (see [`MemVfs::crash`]) and disarms.
    pub fn crash(&self) {
        self.disarm();
        self.base.crash();
    }

    /// The underlying in-memory file system.
    pub fn base(&self) -> &Arc<MemVfs> {
        &self.base
    }
}

#[derive(Debug)]
struct FaultFile {
    inner: Box<dyn VfsFile>,
    ctl: Arc<Control>,
    read_only: bool,
}

impl Vfs for FaultVfs {
    fn open(&self, path: &Path, opts: OpenOptions) -> Result<Box<dyn VfsFile>> {
        let _passed = if opts.create || opts.truncate {
            self.ctl.tick_write(path)?
        } else {
            self.ctl.tick(path)?
        };
        let inner = self.base.open(path, opts)?;
        Ok(Box::new(FaultFile {
            inner,
            ctl: self.ctl.clone(),
            read_only: opts.read_only,
        }))
    }

    fn exists(&self, path: &Path) -> bool {
        self.base.exists(path)
    }

    fn create_dir_all(&self, path: &Path) -> Result<()> {
        let _passed = self.ctl.tick_write(path)?;
        self.base.create_dir_all(path)
    }

    fn list_dir(&self, path: &Path) -> Result<Vec<String>> {
        let _passed = self.ctl.tick(path)?;
        self.base.list_dir(path)
    }

    fn remove_file(&self, path: &Path) -> Result<()> {
        let _passed = self.ctl.tick_write(path)?;
        self.base.remove_file(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        let _passed = self.ctl.tick_write(from)?;
        self.base.rename(from, to)
    }

    fn sync_dir(&self, path: &Path) -> Result<()> {
        let _passed = self.ctl.tick(path)?;
        self.base.sync_dir(path)
    }

    fn lock(&self, path: &Path) -> Result<Box<dyn VfsLock>> {
        let _passed = self.ctl.tick_write(path)?;
        self.base.lock(path)
    }

    fn lock_shared(&self, path: &Path) -> Result<Box<dyn VfsLock>> {
        let _passed = self.ctl.tick(path)?;
        self.base.lock_shared(path)
    }
}

impl VfsFile for FaultFile {
    fn path(&self) -> &Path {
        self.inner.path()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        let _passed = self.ctl.tick(self.inner.path())?;
        self.inner.read_at(buf, offset)
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        let _passed = self.ctl.tick_write(self.inner.path())?;
        self.inner.write_all_at(buf, offset)
    }

    fn len(&self) -> Result<u64> {
        let _passed = self.ctl.tick(self.inner.path())?;
        self.inner.len()
    }

    fn set_len(&self, len: u64) -> Result<()> {
        let _passed = self.ctl.tick_write(self.inner.path())?;
        self.inner.set_len(len)
    }

    fn sync_data(&self) -> Result<()> {
        let _passed = if self.read_only {
            self.ctl.tick(self.inner.path())?
        } else {
            self.ctl.tick_write(self.inner.path())?
        };
        self.inner.sync_data()
    }

    fn start_writeback(&self, offset: u64, len: u64) {
        self.inner.start_writeback(offset, len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    const RW: OpenOptions = OpenOptions {
        create: true,
        truncate: false,
        direct: false,
        read_only: false,
    };

    fn is_injected(e: &Error) -> bool {
        matches!(e, Error::Io { source, .. }
            if source.kind() == std::io::ErrorKind::Other && source.to_string() == "injected fault")
    }

    #[test]
    fn fails_exactly_after_n_operations_and_disarm_restores() {
        let mem = Arc::new(MemVfs::new());
        let fault = FaultVfs::new(mem.clone());
        let vfs: Arc<dyn Vfs> = Arc::new(fault.clone());
        let path = PathBuf::from("/f");
        let f = vfs.open(&path, RW).unwrap();
        assert_eq!(fault.operations(), 1);
        assert!(!fault.is_failing());

        fault.fail_after(3);
        f.write_all_at(b"a", 0).unwrap();
        f.write_all_at(b"b", 1).unwrap();
        f.sync_data().unwrap();
        assert!(fault.is_failing());
        let e = f.write_all_at(b"c", 2).unwrap_err();
        assert!(is_injected(&e), "{e}");
        assert!(is_injected(&f.len().unwrap_err()));
        assert!(is_injected(&vfs.open(&path, RW).unwrap_err()));
        assert!(is_injected(&vfs.lock(Path::new("/LOCK")).unwrap_err()));
        assert!(is_injected(
            &vfs.create_dir_all(Path::new("/d")).unwrap_err()
        ));
        assert!(
            vfs.exists(&path),
            "exists is not an operation that can fail"
        );
        assert_eq!(fault.operations(), 9);
        assert_eq!(
            mem.file_bytes("/f").unwrap(),
            b"ab",
            "a failed write changes nothing"
        );

        fault.disarm();
        assert!(!fault.is_failing());
        f.write_all_at(b"c", 2).unwrap();
        assert_eq!(f.len().unwrap(), 3);

        fault.fail_after(0);
        assert!(is_injected(&f.sync_data().unwrap_err()));
        // crash disarms and drops unsynced bytes.
        fault.crash();
        assert!(!fault.is_failing());
        assert_eq!(mem.file_bytes("/f").unwrap(), b"ab");
        assert!(Arc::ptr_eq(fault.base(), &mem));
    }
}
