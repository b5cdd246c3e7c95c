//! `HookedVfs`: forwards every operation to another [`Vfs`] after showing it to a [`VfsHook`], which may
//! count it, hold it up or refuse it. Tests build their probes and gates on it instead of forwarding each
//! method of both traits themselves.
//!
//! What the hook sees: `open` (with whether it creates), `create_dir_all`, `list_dir`, `remove_file`,
//! `rename`, `sync_dir`, `lock`/`lock_shared`, and on files `read_at`, `write_all_at`, `set_len`,
//! `sync_data` — each with its path. `exists`, `len` and `path` cannot fail and are not shown; `remove_dir`
//! and `mapping` keep the trait's defaults (no directories removed, no mapping), as a wrapper that does not
//! know its base's mapping must.
//!
//! Cost: one call of the hook per operation.

use super::vfs::{OpenOptions, Vfs, VfsFile, VfsLock};
use crate::error::Result;
use std::fmt::Debug;
use std::path::Path;
use std::sync::Arc;

/// An operation about to reach the wrapped file system.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VfsOp<'a> {
    /// `Vfs::open`; `create` as the options ask.
    Open {
        create: bool,
    },
    CreateDirAll,
    ListDir,
    RemoveFile,
    /// `Vfs::rename` of the hook's path to `to`.
    Rename {
        to: &'a Path,
    },
    SyncDir,
    /// `Vfs::lock` or `Vfs::lock_shared`.
    Lock,
    /// `VfsFile::read_at` at `offset`.
    Read {
        offset: u64,
    },
    /// `VfsFile::write_all_at` at `offset`.
    Write {
        offset: u64,
    },
    SetLen,
    /// `VfsFile::sync_data`.
    Sync,
}

/// What a [`HookedVfs`] calls before each operation (module doc); an error is the operation's result.
pub trait VfsHook: Send + Sync + Debug {
    fn before(&self, op: VfsOp<'_>, path: &Path) -> Result<()>;
}

/// A file system that shows every operation to a hook before forwarding it (module doc).
#[derive(Debug)]
pub struct HookedVfs<H> {
    base: Arc<dyn Vfs>,
    hook: Arc<H>,
}

impl<H: VfsHook + 'static> HookedVfs<H> {
    /// `base` with `hook` in front of it.
    pub fn new(base: Arc<dyn Vfs>, hook: Arc<H>) -> HookedVfs<H> {
        HookedVfs { base, hook }
    }
}

#[derive(Debug)]
struct HookedFile<H> {
    file: Box<dyn VfsFile>,
    hook: Arc<H>,
}

impl<H: VfsHook> VfsFile for HookedFile<H> {
    fn path(&self) -> &Path {
        self.file.path()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        self.hook.before(VfsOp::Read { offset }, self.file.path())?;
        self.file.read_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.hook
            .before(VfsOp::Write { offset }, self.file.path())?;
        self.file.write_all_at(buf, offset)
    }
    fn len(&self) -> Result<u64> {
        self.file.len()
    }
    fn set_len(&self, len: u64) -> Result<()> {
        self.hook.before(VfsOp::SetLen, self.file.path())?;
        self.file.set_len(len)
    }
    fn sync_data(&self) -> Result<()> {
        self.hook.before(VfsOp::Sync, self.file.path())?;
        self.file.sync_data()
    }
}

impl<H: VfsHook + 'static> Vfs for HookedVfs<H> {
    fn open(&self, path: &Path, opts: OpenOptions) -> Result<Box<dyn VfsFile>> {
        self.hook.before(
            VfsOp::Open {
                create: opts.create,
            },
            path,
        )?;
        Ok(Box::new(HookedFile {
            file: self.base.open(path, opts)?,
            hook: self.hook.clone(),
        }))
    }
    fn exists(&self, path: &Path) -> bool {
        self.base.exists(path)
    }
    fn create_dir_all(&self, path: &Path) -> Result<()> {
        self.hook.before(VfsOp::CreateDirAll, path)?;
        self.base.create_dir_all(path)
    }
    fn list_dir(&self, path: &Path) -> Result<Vec<String>> {
        self.hook.before(VfsOp::ListDir, path)?;
        self.base.list_dir(path)
    }
    fn remove_file(&self, path: &Path) -> Result<()> {
        self.hook.before(VfsOp::RemoveFile, path)?;
        self.base.remove_file(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        self.hook.before(VfsOp::Rename { to }, from)?;
        self.base.rename(from, to)
    }
    fn sync_dir(&self, path: &Path) -> Result<()> {
        self.hook.before(VfsOp::SyncDir, path)?;
        self.base.sync_dir(path)
    }
    fn lock(&self, path: &Path) -> Result<Box<dyn VfsLock>> {
        self.hook.before(VfsOp::Lock, path)?;
        self.base.lock(path)
    }
    fn lock_shared(&self, path: &Path) -> Result<Box<dyn VfsLock>> {
        self.hook.before(VfsOp::Lock, path)?;
        self.base.lock_shared(path)
    }
}
