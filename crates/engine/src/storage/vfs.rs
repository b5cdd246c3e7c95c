//! The `Vfs` trait: every byte the engine reads or writes goes through it, so tests can swap the real file
//! system for an in-memory one or a fault-injecting one.

use crate::error::Result;
use std::fmt::Debug;
use std::path::{Path, PathBuf};

/// How to open a file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpenOptions {
    /// Create the file if it does not exist.
    pub create: bool,
    /// Truncate the file to length 0 on open.
    pub truncate: bool,
    /// Bypass the OS page cache (O_DIRECT). Every read and write must then use buffers, offsets and lengths
    /// aligned to `DIRECT_IO_ALIGN`. A backend or file system that cannot do it returns
    /// `Error::InvalidArgument` naming the path.
    pub direct: bool,
    /// Open for reading only (no write access is asked of the OS, so it works on a read-only mount). Writes
    /// and `set_len` on the handle fail with `Error::Io` of kind `PermissionDenied`; `sync_data` does nothing.
    /// Together with `create` or `truncate` it is `Error::InvalidArgument`.
    pub read_only: bool,
}

impl OpenOptions {
    /// Options for reading an existing file only.
    pub const READ_ONLY: OpenOptions = OpenOptions {
        create: false,
        truncate: false,
        direct: false,
        read_only: true,
    };

    /// `Error::InvalidArgument` if `read_only` is combined with `create` or `truncate`.
    pub fn validate(&self, path: &Path) -> Result<()> {
        if self.read_only && (self.create || self.truncate) {
            return Err(crate::error::Error::invalid(format!(
                "{}: a read-only open cannot create or truncate",
                path.display()
            )));
        }
        Ok(())
    }
}

/// The error of a write through a read-only handle.
pub fn read_only_handle(path: &Path) -> crate::error::Error {
    crate::error::Error::io(
        path,
        std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            "write through a handle opened read-only",
        ),
    )
}

/// Alignment that O_DIRECT I/O requires of buffers, offsets and lengths.
pub const DIRECT_IO_ALIGN: usize = 4096;

/// Whether and how a file of a file system can be memory-mapped by this process (what persistent-memory
/// regions, `storage::pm`, need: loads and stores to the file's bytes, not reads and writes through the
/// `Vfs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileMapping {
    /// The path is a real file of the operating system: a shared mapping reaches it (stores land in the OS
    /// page cache, as writes do).
    Shared,
    /// The path is a real, unmodified file, but nothing may be written to it (a read-only handle's overlay):
    /// map it privately (copy-on-write), so stores stay in this process.
    PrivateCopy,
    /// The file lives elsewhere (in memory, behind fault injection, modified in an overlay): read and write
    /// it through the `Vfs` only.
    Unavailable,
}

/// A file system. Implementations are cheap to share (`Arc<dyn Vfs>`) and safe to use from many threads.
pub trait Vfs: Send + Sync + Debug {
    /// Opens (and with `create`, creates) a file for reading and writing.
    fn open(&self, path: &Path, opts: OpenOptions) -> Result<Box<dyn VfsFile>>;
    /// True if a file or directory exists at `path`.
    fn exists(&self, path: &Path) -> bool;
    /// Creates a directory and its parents.
    fn create_dir_all(&self, path: &Path) -> Result<()>;
    /// Names (not paths) of the entries of a directory, sorted.
    fn list_dir(&self, path: &Path) -> Result<Vec<String>>;
    /// Removes a file.
    fn remove_file(&self, path: &Path) -> Result<()>;
    /// Atomically renames `from` to `to`, replacing `to`.
    fn rename(&self, from: &Path, to: &Path) -> Result<()>;
    /// Makes the directory's entries (creates, renames, removes) durable.
    fn sync_dir(&self, path: &Path) -> Result<()>;
    /// Takes an exclusive lock on `path` (created if missing), held until the returned guard is dropped.
    /// If another holder has it (exclusive or shared): `Error::Locked`.
    fn lock(&self, path: &Path) -> Result<Box<dyn VfsLock>>;
    /// Takes a shared lock on the existing file `path` (opened read-only, never created: a missing file is
    /// `Error::Io` of kind `NotFound`). Shared holders coexist; while an exclusive holder has it:
    /// `Error::Locked`.
    fn lock_shared(&self, path: &Path) -> Result<Box<dyn VfsLock>>;
    /// Removes an empty directory. Backends without real directories may do nothing (the default).
    fn remove_dir(&self, path: &Path) -> Result<()> {
        let _ = path;
        Ok(())
    }
    /// How `path` (an existing file, or one about to be created) can be memory-mapped; by default it
    /// cannot.
    fn mapping(&self, path: &Path) -> FileMapping {
        let _ = path;
        FileMapping::Unavailable
    }
}

/// An open file. Reads and writes are positional, so one file can be shared by many threads.
pub trait VfsFile: Send + Sync + Debug {
    /// The path the file was opened with (used in error messages).
    fn path(&self) -> &Path;
    /// Reads up to `buf.len()` bytes at `offset`; returns how many were read (fewer only at end of file).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize>;
    /// Writes all of `buf` at `offset`, extending the file if needed.
    fn write_all_at(&self, buf: &[u8], offset: u64) -> Result<()>;
    /// Current length in bytes.
    fn len(&self) -> Result<u64>;
    /// True when the file has no bytes.
    fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }
    /// Truncates or extends (with zeros) to `len` bytes.
    fn set_len(&self, len: u64) -> Result<()>;
    /// Extends the file (with zeros) to `len` bytes, at least its length, with the blocks of the new bytes
    /// allocated now where the file system can (Linux `fallocate`): later writes into them allocate
    /// nothing. A preallocated log grows this way, so that its appends never wait for the file's block
    /// mapping, which the write-back of its earlier pages holds while it allocates their blocks (ext4's
    /// delayed allocation). Without such a call (the default), [`set_len`](Self::set_len).
    fn allocate(&self, len: u64) -> Result<()> {
        self.set_len(len)
    }
    /// A hint: allocate the blocks of `len` bytes at `offset` (past the end of the file too) without
    /// changing its length (Linux `fallocate` with `FALLOC_FL_KEEP_SIZE`), so that later writes there
    /// allocate nothing. Nothing changes what the file reads as; file systems without such a call ignore
    /// it (the default).
    fn allocate_ahead(&self, _offset: u64, _len: u64) {}
    /// Makes the data (and the length) durable: `fdatasync`.
    fn sync_data(&self) -> Result<()>;
    /// A hint: start writing `len` bytes at `offset` back to the device without waiting for them, so a
    /// later [`sync_data`](Self::sync_data) finds less to write (Linux `sync_file_range` with
    /// `SYNC_FILE_RANGE_WRITE`). Nothing is promised durable by it; file systems without such a call ignore
    /// it (the default).
    fn start_writeback(&self, _offset: u64, _len: u64) {}
}

/// A lock on a path (exclusive or shared); released on drop.
pub trait VfsLock: Send + Sync + Debug {
    fn path(&self) -> &Path;
}

/// Convenience: reads exactly `buf.len()` bytes or reports how many were available.
pub fn read_exact_at(file: &dyn VfsFile, buf: &mut [u8], offset: u64) -> Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        let n = file.read_at(&mut buf[done..], offset + done as u64)?;
        if n == 0 {
            break;
        }
        done += n;
    }
    Ok(done)
}

/// Replaces `dir/name` with `bytes` atomically: writes `dir/name.tmp`, syncs it, renames it over `name` and
/// syncs the directory, counting the I/O as metadata. A crash leaves either the old file or the new one.
pub fn write_file_atomically(
    vfs: &dyn Vfs,
    dir: &Path,
    name: &str,
    bytes: &[u8],
    stats: &super::IoStats,
) -> Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let file = vfs.open(
        &tmp,
        OpenOptions {
            create: true,
            truncate: true,
            ..OpenOptions::default()
        },
    )?;
    file.write_all_at(bytes, 0)?;
    stats.record_write(super::FileKind::Meta, bytes.len());
    file.sync_data()?;
    stats.record_sync(super::FileKind::Meta);
    drop(file);
    vfs.rename(&tmp, &dir.join(name))?;
    vfs.sync_dir(dir)
}

/// Joins a directory and a file name.
pub fn join(dir: &Path, name: &str) -> PathBuf {
    dir.join(name)
}
