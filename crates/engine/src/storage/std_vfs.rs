//! `StdVfs`: the real file system, through `std::fs` and positional I/O (`pread`/`pwrite` via
//! `std::os::unix::fs::FileExt`).
//!
//! Invariants and behaviour:
//! * Reads and writes are positional, so one open file is shared by many threads without a seek position.
//! * `OpenOptions::direct` opens with `O_DIRECT`; a file system that refuses it (`EINVAL` at open, e.g. tmpfs)
//!   gives `Error::InvalidArgument` naming the path. With `O_DIRECT` every buffer, offset and length must be
//!   aligned to [`DIRECT_IO_ALIGN`](super::vfs::DIRECT_IO_ALIGN); a misaligned request fails with the OS error.
//! * `lock` takes an advisory exclusive `flock` (std's `File::try_lock`) on a file it creates if missing;
//!   `lock_shared` a shared one (`File::try_lock_shared`) on an existing file opened read-only, so it works on
//!   a read-only mount. The lock belongs to the open file description, so a conflicting `lock` of the same
//!   path fails with `Error::Locked` even inside one process; dropping the guard closes the file and releases
//!   the lock.
//! * `OpenOptions::read_only` opens without write access; writes and `set_len` on such a handle are refused
//!   (`PermissionDenied`) and `sync_data` does nothing.
//! * Every `std::io::Error` is reported as `Error::Io` naming the path.
//!
//! Cost: one system call per operation (a short read is retried until end of file; `EINTR` is retried).

use super::vfs::{OpenOptions, Vfs, VfsFile, VfsLock, read_only_handle};
use crate::error::{Error, Result};
use std::fs::{File, TryLockError};
use std::io::ErrorKind;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The operating system's file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct StdVfs;

impl StdVfs {
    pub fn new() -> Self {
        StdVfs
    }
}

/// An open file of [`StdVfs`].
#[derive(Debug)]
struct StdFile {
    file: File,
    path: PathBuf,
    /// Opened without write access: writes are refused before they reach the OS.
    read_only: bool,
}

/// An exclusive `flock` held on an open file; closing the file (on drop) releases it.
#[derive(Debug)]
struct StdLock {
    file: File,
    path: PathBuf,
}

impl Drop for StdLock {
    fn drop(&mut self) {
        // Closing the descriptor releases the lock anyway; unlocking first makes the release explicit and
        // immediate. An error here cannot be acted on.
        let _ = self.file.unlock();
    }
}

impl VfsLock for StdLock {
    fn path(&self) -> &Path {
        &self.path
    }
}

impl Vfs for StdVfs {
    /// Every path is a real file: shared mappings reach it.
    fn mapping(&self, _path: &Path) -> super::vfs::FileMapping {
        super::vfs::FileMapping::Shared
    }

    fn open(&self, path: &Path, opts: OpenOptions) -> Result<Box<dyn VfsFile>> {
        opts.validate(path)?;
        let mut o = std::fs::OpenOptions::new();
        o.read(true)
            .write(!opts.read_only)
            .create(opts.create)
            .truncate(opts.truncate);
        if opts.direct {
            o.custom_flags(libc::O_DIRECT);
        }
        let existed = opts.direct && path.exists();
        match o.open(path) {
            Ok(file) => Ok(Box::new(StdFile {
                file,
                path: path.to_path_buf(),
                read_only: opts.read_only,
            })),
            Err(e) if opts.direct && e.raw_os_error() == Some(libc::EINVAL) => {
                // Linux creates the file before it checks O_DIRECT support: do not leave an empty file behind.
                if opts.create && !existed {
                    let _ = std::fs::remove_file(path);
                }
                Err(Error::invalid(format!(
                    "cannot open {} with O_DIRECT: the file system does not support O_DIRECT ({e})",
                    path.display()
                )))
            }
            Err(e) => Err(Error::io(path, e)),
        }
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn create_dir_all(&self, path: &Path) -> Result<()> {
        std::fs::create_dir_all(path).map_err(|e| Error::io(path, e))
    }

    fn list_dir(&self, path: &Path) -> Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(path).map_err(|e| Error::io(path, e))? {
            let entry = entry.map_err(|e| Error::io(path, e))?;
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        Ok(names)
    }

    fn remove_file(&self, path: &Path) -> Result<()> {
        std::fs::remove_file(path).map_err(|e| Error::io(path, e))
    }

    fn remove_dir(&self, path: &Path) -> Result<()> {
        std::fs::remove_dir(path).map_err(|e| Error::io(path, e))
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        std::fs::rename(from, to).map_err(|e| Error::io(from, e))
    }

    fn sync_dir(&self, path: &Path) -> Result<()> {
        let dir = File::open(path).map_err(|e| Error::io(path, e))?;
        dir.sync_all().map_err(|e| Error::io(path, e))
    }

    fn lock(&self, path: &Path) -> Result<Box<dyn VfsLock>> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| Error::io(path, e))?;
        match file.try_lock() {
            Ok(()) => Ok(Box::new(StdLock {
                file,
                path: path.to_path_buf(),
            })),
            Err(TryLockError::WouldBlock) => Err(Error::Locked(path.to_path_buf())),
            Err(TryLockError::Error(e)) => Err(Error::io(path, e)),
        }
    }

    fn lock_shared(&self, path: &Path) -> Result<Box<dyn VfsLock>> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        match file.try_lock_shared() {
            Ok(()) => Ok(Box::new(StdLock {
                file,
                path: path.to_path_buf(),
            })),
            Err(TryLockError::WouldBlock) => Err(Error::Locked(path.to_path_buf())),
            Err(TryLockError::Error(e)) => Err(Error::io(path, e)),
        }
    }
}

impl VfsFile for StdFile {
    fn path(&self) -> &Path {
        &self.path
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        let mut done = 0;
        while done < buf.len() {
            match self.file.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::io(&self.path, e)),
            }
        }
        Ok(done)
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        if self.read_only {
            return Err(read_only_handle(&self.path));
        }
        self.file
            .write_all_at(buf, offset)
            .map_err(|e| Error::io(&self.path, e))
    }

    fn len(&self) -> Result<u64> {
        Ok(self
            .file
            .metadata()
            .map_err(|e| Error::io(&self.path, e))?
            .len())
    }

    fn set_len(&self, len: u64) -> Result<()> {
        if self.read_only {
            return Err(read_only_handle(&self.path));
        }
        self.file.set_len(len).map_err(|e| Error::io(&self.path, e))
    }

    fn allocate(&self, len: u64) -> Result<()> {
        if self.read_only {
            return Err(read_only_handle(&self.path));
        }
        // Mode 0 allocates `[0, len)` (blocks already there stay) and extends the length to `len`. A file
        // system without it (or a refusal for another reason) gets the plain extension.
        if rustix::fs::fallocate(&self.file, rustix::fs::FallocateFlags::empty(), 0, len).is_ok() {
            return Ok(());
        }
        self.set_len(len)
    }

    fn allocate_ahead(&self, offset: u64, len: u64) {
        if self.read_only {
            return;
        }
        // A failure (no space, a file system without it) only loses the hint.
        let _ = rustix::fs::fallocate(
            &self.file,
            rustix::fs::FallocateFlags::KEEP_SIZE,
            offset,
            len,
        );
    }

    fn sync_data(&self) -> Result<()> {
        if self.read_only {
            return Ok(()); // nothing written through this handle
        }
        self.file.sync_data().map_err(|e| Error::io(&self.path, e))
    }

    #[cfg(target_os = "linux")]
    fn start_writeback(&self, offset: u64, len: u64) {
        use std::os::fd::AsRawFd;
        if self.read_only {
            return;
        }
        let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
            return;
        };
        // SAFETY: `sync_file_range` only reads its integer arguments; the descriptor is this open file's,
        // alive for the call. A failure (e.g. a file system without it) only loses the hint, so the result
        // is ignored.
        unsafe {
            libc::sync_file_range(
                self.file.as_raw_fd(),
                offset,
                len,
                libc::SYNC_FILE_RANGE_WRITE,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::page::PageBuf;
    use crate::storage::vfs::read_exact_at;

    const RW: OpenOptions = OpenOptions {
        create: true,
        truncate: false,
        direct: false,
        read_only: false,
    };

    /// `allocate` extends the file with zeros, keeps its bytes, never shrinks it, and allocates the blocks
    /// (where the file system has `fallocate`): no sparse space is left for a later write to allocate.
    #[test]
    fn allocate_extends_with_allocated_blocks() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let vfs = StdVfs::new();
        let p = dir.path().join("f");
        let f = vfs.open(&p, RW).unwrap();
        f.write_all_at(b"abc", 0).unwrap();
        f.allocate(1 << 20).unwrap();
        assert_eq!(f.len().unwrap(), 1 << 20);
        let mut buf = vec![1u8; 8];
        assert_eq!(f.read_at(&mut buf, 0).unwrap(), 8);
        assert_eq!(&buf, b"abc\0\0\0\0\0");
        f.allocate(4096).unwrap();
        assert_eq!(f.len().unwrap(), 1 << 20, "allocate shrank the file");
        // Where the file system can allocate ahead (a probe file says), the blocks are there.
        let probe = std::fs::File::create(dir.path().join("probe")).unwrap();
        if rustix::fs::fallocate(&probe, rustix::fs::FallocateFlags::empty(), 0, 4096).is_ok() {
            let blocks = std::fs::metadata(&p).unwrap().blocks() * 512;
            assert!(
                blocks >= 1 << 20,
                "{blocks} bytes of blocks for a 1 MiB allocation"
            );
        }
    }

    #[test]
    fn roundtrip_len_set_len_and_directory_ops() {
        let dir = tempfile::tempdir().unwrap();
        let vfs = StdVfs::new();
        let sub = dir.path().join("a/b");
        vfs.create_dir_all(&sub).unwrap();
        assert!(vfs.exists(&sub));
        let p = sub.join("f");
        let f = vfs.open(&p, RW).unwrap();
        assert_eq!(f.path(), p.as_path());
        f.write_all_at(b"hello", 0).unwrap();
        f.write_all_at(b"world", 10).unwrap();
        assert_eq!(f.len().unwrap(), 15);
        let mut buf = [0u8; 20];
        assert_eq!(f.read_at(&mut buf, 0).unwrap(), 15);
        assert_eq!(&buf[..15], b"hello\0\0\0\0\0world");
        f.set_len(3).unwrap();
        f.sync_data().unwrap();
        assert_eq!(f.len().unwrap(), 3);
        assert_eq!(read_exact_at(&*f, &mut buf, 0).unwrap(), 3);
        drop(f);

        // Truncate on open; missing file without create is NotFound.
        let f = vfs
            .open(
                &p,
                OpenOptions {
                    truncate: true,
                    ..RW
                },
            )
            .unwrap();
        assert_eq!(f.len().unwrap(), 0);
        drop(f);
        let missing = vfs
            .open(&sub.join("nope"), OpenOptions::default())
            .unwrap_err();
        assert!(
            matches!(&missing, Error::Io { source, .. } if source.kind() == ErrorKind::NotFound)
        );

        vfs.open(&sub.join("c"), RW).unwrap();
        vfs.rename(&p, &sub.join("z")).unwrap();
        assert_eq!(
            vfs.list_dir(&sub).unwrap(),
            vec!["c".to_string(), "z".to_string()]
        );
        vfs.remove_file(&sub.join("c")).unwrap();
        vfs.sync_dir(&sub).unwrap();
        assert_eq!(vfs.list_dir(&sub).unwrap(), vec!["z".to_string()]);
        assert!(!vfs.exists(&sub.join("c")));
        assert!(matches!(
            vfs.remove_file(&sub.join("c")),
            Err(Error::Io { .. })
        ));
    }

    #[test]
    fn lock_excludes_a_second_holder_until_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let vfs = StdVfs::new();
        let p = dir.path().join("LOCK");
        let g = vfs.lock(&p).unwrap();
        assert_eq!(g.path(), p.as_path());
        assert!(matches!(vfs.lock(&p), Err(Error::Locked(q)) if q == p));
        drop(g);
        let g2 = vfs.lock(&p).unwrap();
        drop(g2);
    }

    #[test]
    fn direct_io_works_or_is_refused_cleanly() {
        let dir = tempfile::tempdir().unwrap();
        let vfs = StdVfs::new();
        let p = dir.path().join("direct");
        match vfs.open(&p, OpenOptions { direct: true, ..RW }) {
            Ok(f) => {
                let mut b = PageBuf::new(4096);
                b[7] = 7;
                f.write_all_at(&b, 4096).unwrap();
                let mut r = PageBuf::new(4096);
                assert_eq!(f.read_at(&mut r, 4096).unwrap(), 4096);
                assert_eq!(r[7], 7);
            }
            Err(Error::InvalidArgument(msg)) => {
                assert!(
                    msg.contains("O_DIRECT") && msg.contains(&*p.to_string_lossy()),
                    "{msg}"
                );
            }
            Err(e) => panic!("unexpected error {e}"),
        }
    }
}

#[cfg(test)]
mod lock_and_read_only_tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn shared_and_exclusive_locks_on_real_files() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("LOCK");
        let vfs = StdVfs;
        assert!(vfs.lock_shared(&p).is_err(), "a shared lock never creates");
        let x = vfs.lock(&p).unwrap();
        assert!(matches!(vfs.lock_shared(&p), Err(Error::Locked(_))));
        drop(x);
        let a = vfs.lock_shared(&p).unwrap();
        let b = vfs.lock_shared(&p).unwrap();
        assert!(matches!(vfs.lock(&p), Err(Error::Locked(_))));
        drop((a, b));
        vfs.lock(&p).unwrap();
    }

    #[test]
    fn read_only_handles_of_a_read_only_file() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("f");
        std::fs::write(&p, b"data").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o444)).unwrap();
        let f = StdVfs.open(&p, OpenOptions::READ_ONLY).unwrap();
        let mut buf = [0u8; 4];
        assert_eq!(f.read_at(&mut buf, 0).unwrap(), 4);
        assert_eq!(&buf, b"data");
        let denied = |r: Result<()>| matches!(r, Err(Error::Io { source, .. }) if source.kind() == ErrorKind::PermissionDenied);
        assert!(denied(f.write_all_at(b"x", 0)));
        assert!(denied(f.set_len(0)));
        f.sync_data().unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"data");
        assert!(matches!(
            StdVfs.open(
                &p,
                OpenOptions {
                    create: true,
                    ..OpenOptions::READ_ONLY
                }
            ),
            Err(Error::InvalidArgument(_))
        ));
    }
}
