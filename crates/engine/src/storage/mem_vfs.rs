//! `MemVfs`: an in-memory file system that can simulate a power loss.
//!
//! Model:
//! * Each file (an "inode") keeps its current bytes and its *durable image*: the bytes as of its last
//!   `sync_data`. A file never synced since it was created has no durable image.
//! * [`MemVfs::crash`] simulates a power loss: every file reverts to its durable image, a file without one
//!   disappears, every lock is released, and every handle opened before the crash is detached (its reads and
//!   writes go to an orphaned copy that nothing can see any more, like the handles of a dead process).
//! * Simplification: directory operations (`rename`, `remove_file`, creating a directory) are durable at once;
//!   `sync_dir` only checks that the directory exists. A renamed file keeps its durable image under the new
//!   name. A file created by `open` (with `create`) is *not* durable until it is synced.
//! * Directories: `create_dir_all` records them; opening a file with `create` records its parent directories
//!   too, so a missing parent is not an error (unlike a real file system).
//! * Locks are an in-process table: `lock` of a path anyone holds, or `lock_shared` of a path held exclusively,
//!   is `Error::Locked`; shared holders coexist; dropping a guard releases it.
//! * `OpenOptions::read_only` handles refuse writes and `set_len` (`PermissionDenied`); their `sync_data` does
//!   nothing.
//! * `OpenOptions::direct` is accepted and ignored (memory has no alignment requirement).
//!
//! Thread safety: one `parking_lot::Mutex` for the name space, one per file for its bytes. Lock order: name
//! space, then file. Positional reads and writes of one file are serialised by the file's mutex.
//!
//! Cost: a read or write copies the bytes once; `sync_data` copies only the byte range changed since the last
//! sync (tracked as one dirty interval), so syncing an append-only log costs O(appended bytes).

use super::vfs::{OpenOptions, Vfs, VfsFile, VfsLock, read_only_handle};
use crate::error::{Error, Result};
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The bytes of one file.
#[derive(Debug, Default)]
struct InodeData {
    current: Vec<u8>,
    /// Bytes as of the last `sync_data`; `None` if never synced since creation.
    durable: Option<Vec<u8>>,
    /// Byte interval `[lo, hi)` of `current` that may differ from `durable` (after resizing `durable` to the
    /// current length, which truncates or zero-extends it). `None`: nothing changed since the last sync.
    dirty: Option<(usize, usize)>,
    /// Bytes handed to [`VfsFile::start_writeback`] (memory has no device: only counted, for tests).
    writeback_hinted: u64,
    /// The largest length asked of [`VfsFile::allocate`] (memory allocates nothing: only noted, for tests).
    allocated: u64,
    /// The largest end of a range given to [`VfsFile::allocate_ahead`] (only noted, for tests).
    allocated_ahead: u64,
}

impl InodeData {
    fn with_durable(bytes: Vec<u8>) -> Self {
        InodeData {
            durable: Some(bytes.clone()),
            current: bytes,
            dirty: None,
            writeback_hinted: 0,
            allocated: 0,
            allocated_ahead: 0,
        }
    }

    fn mark(&mut self, lo: usize, hi: usize) {
        if lo >= hi {
            return;
        }
        self.dirty = Some(match self.dirty {
            None => (lo, hi),
            Some((a, b)) => (a.min(lo), b.max(hi)),
        });
    }

    fn write(&mut self, buf: &[u8], offset: usize) {
        let end = offset + buf.len();
        let old_len = self.current.len();
        if end > old_len {
            self.current.resize(end, 0);
        }
        self.current[offset..end].copy_from_slice(buf);
        // A write past the end also zero-fills the gap from the old end.
        self.mark(offset.min(old_len), end);
    }

    fn set_len(&mut self, len: usize) {
        let old_len = self.current.len();
        self.current.resize(len, 0);
        self.mark(old_len.min(len), len);
    }

    fn sync(&mut self) {
        match &mut self.durable {
            None => self.durable = Some(self.current.clone()),
            Some(d) => {
                d.resize(self.current.len(), 0);
                if let Some((lo, hi)) = self.dirty {
                    let hi = hi.min(self.current.len());
                    if lo < hi {
                        d[lo..hi].copy_from_slice(&self.current[lo..hi]);
                    }
                }
            }
        }
        self.dirty = None;
    }
}

#[derive(Debug, Default)]
struct Inode {
    data: Mutex<InodeData>,
}

#[derive(Debug, Default)]
struct NameSpace {
    files: BTreeMap<PathBuf, Arc<Inode>>,
    dirs: BTreeSet<PathBuf>,
}

impl NameSpace {
    fn add_parents(&mut self, path: &Path) {
        for a in path.ancestors().skip(1) {
            if a.as_os_str().is_empty() {
                break;
            }
            self.dirs.insert(a.to_path_buf());
        }
    }
}

/// Locked paths with the tokens of their current holders (so a guard from before a crash cannot release a
/// lock taken after it): one token for an exclusive holder, one per shared holder; `exclusive` marks which.
#[derive(Debug, Default)]
pub(crate) struct LockTable {
    held: Mutex<HashMap<PathBuf, Vec<u64>>>,
    exclusive: Mutex<BTreeSet<u64>>,
    next_token: AtomicU64,
}

impl LockTable {
    /// Takes the lock of `path` for a new holder, or `Error::Locked`.
    pub(crate) fn take(self: &Arc<Self>, path: &Path, exclusive: bool) -> Result<Box<dyn VfsLock>> {
        let mut held = self.held.lock();
        let mut excl = self.exclusive.lock();
        if let Some(tokens) = held.get(path)
            && !tokens.is_empty()
            && (exclusive || tokens.iter().any(|t| excl.contains(t)))
        {
            return Err(Error::Locked(path.to_path_buf()));
        }
        let token = self.next_token.fetch_add(1, Ordering::Relaxed);
        held.entry(path.to_path_buf()).or_default().push(token);
        if exclusive {
            excl.insert(token);
        }
        Ok(Box::new(MemLock {
            path: path.to_path_buf(),
            token,
            table: self.clone(),
        }))
    }
}

/// An in-memory file system with crash simulation. Share it as `Arc<MemVfs>` (it coerces to `Arc<dyn Vfs>`).
#[derive(Debug, Default)]
pub struct MemVfs {
    ns: Mutex<NameSpace>,
    locks: Arc<LockTable>,
}

fn not_found(path: &Path) -> Error {
    Error::io(
        path,
        std::io::Error::new(ErrorKind::NotFound, "no such file or directory (MemVfs)"),
    )
}

impl MemVfs {
    pub fn new() -> Self {
        Self::default()
    }

    /// Simulates a power loss: every file reverts to its last synced image; files never synced since their
    /// creation disappear; locks are released; handles opened before are detached.
    pub fn crash(&self) {
        let mut ns = self.ns.lock();
        let old = std::mem::take(&mut ns.files);
        for (path, inode) in old {
            let d = inode.data.lock();
            if let Some(img) = &d.durable {
                let fresh = Inode {
                    data: Mutex::new(InodeData::with_durable(img.clone())),
                };
                ns.files.insert(path, Arc::new(fresh));
            }
        }
        self.locks.held.lock().clear();
        self.locks.exclusive.lock().clear();
    }

    /// The current bytes of a file (including unsynced writes), or `None` if it does not exist.
    pub fn file_bytes(&self, path: impl AsRef<Path>) -> Option<Vec<u8>> {
        let ns = self.ns.lock();
        ns.files
            .get(path.as_ref())
            .map(|i| i.data.lock().current.clone())
    }

    /// The bytes the file would have after a crash now, or `None` if it would not exist.
    pub fn durable_bytes(&self, path: impl AsRef<Path>) -> Option<Vec<u8>> {
        let ns = self.ns.lock();
        ns.files
            .get(path.as_ref())
            .and_then(|i| i.data.lock().durable.clone())
    }

    /// Replaces a file's bytes, current *and* durable (as if the medium changed them: for corruption tests).
    /// Creates the file if missing. Open handles of the file see the new bytes.
    pub fn set_file_bytes(&self, path: impl AsRef<Path>, bytes: impl Into<Vec<u8>>) {
        let path = path.as_ref();
        let bytes = bytes.into();
        let mut ns = self.ns.lock();
        if let Some(inode) = ns.files.get(path) {
            *inode.data.lock() = InodeData::with_durable(bytes);
        } else {
            ns.add_parents(path);
            let inode = Inode {
                data: Mutex::new(InodeData::with_durable(bytes)),
            };
            ns.files.insert(path.to_path_buf(), Arc::new(inode));
        }
    }

    /// Bytes handed to the file's writeback hints ([`VfsFile::start_writeback`]) so far, or `None` if it
    /// does not exist.
    pub fn writeback_hinted(&self, path: impl AsRef<Path>) -> Option<u64> {
        let ns = self.ns.lock();
        ns.files
            .get(path.as_ref())
            .map(|i| i.data.lock().writeback_hinted)
    }

    /// The largest length the file was extended to by [`VfsFile::allocate`] (and not truncated below
    /// since), or `None` if it does not exist.
    pub fn allocated(&self, path: impl AsRef<Path>) -> Option<u64> {
        let ns = self.ns.lock();
        ns.files.get(path.as_ref()).map(|i| i.data.lock().allocated)
    }

    /// The largest end of a range the file was given to [`VfsFile::allocate_ahead`], or `None` if it does
    /// not exist.
    pub fn allocated_ahead(&self, path: impl AsRef<Path>) -> Option<u64> {
        let ns = self.ns.lock();
        ns.files
            .get(path.as_ref())
            .map(|i| i.data.lock().allocated_ahead)
    }

    /// Paths of every file, sorted.
    pub fn file_paths(&self) -> Vec<PathBuf> {
        self.ns.lock().files.keys().cloned().collect()
    }
}

/// An open file of [`MemVfs`].
#[derive(Debug)]
struct MemFile {
    inode: Arc<Inode>,
    path: PathBuf,
    read_only: bool,
}

#[derive(Debug)]
struct MemLock {
    path: PathBuf,
    token: u64,
    table: Arc<LockTable>,
}

impl Drop for MemLock {
    fn drop(&mut self) {
        let mut held = self.table.held.lock();
        if let Some(tokens) = held.get_mut(&self.path) {
            tokens.retain(|&t| t != self.token);
            if tokens.is_empty() {
                held.remove(&self.path);
            }
        }
    }
}

impl VfsLock for MemLock {
    fn path(&self) -> &Path {
        &self.path
    }
}

impl Vfs for MemVfs {
    fn open(&self, path: &Path, opts: OpenOptions) -> Result<Box<dyn VfsFile>> {
        opts.validate(path)?;
        let mut ns = self.ns.lock();
        if ns.dirs.contains(path) {
            return Err(Error::io(
                path,
                std::io::Error::new(ErrorKind::IsADirectory, "is a directory (MemVfs)"),
            ));
        }
        let inode = match ns.files.get(path) {
            Some(i) => i.clone(),
            None if opts.create => {
                ns.add_parents(path);
                let i = Arc::new(Inode::default());
                ns.files.insert(path.to_path_buf(), i.clone());
                i
            }
            None => return Err(not_found(path)),
        };
        drop(ns);
        if opts.truncate {
            inode.data.lock().set_len(0);
        }
        Ok(Box::new(MemFile {
            inode,
            path: path.to_path_buf(),
            read_only: opts.read_only,
        }))
    }

    fn exists(&self, path: &Path) -> bool {
        let ns = self.ns.lock();
        ns.files.contains_key(path) || ns.dirs.contains(path)
    }

    fn create_dir_all(&self, path: &Path) -> Result<()> {
        let mut ns = self.ns.lock();
        if ns.files.contains_key(path) {
            return Err(Error::io(
                path,
                std::io::Error::new(
                    ErrorKind::AlreadyExists,
                    "a file exists at this path (MemVfs)",
                ),
            ));
        }
        ns.add_parents(path);
        ns.dirs.insert(path.to_path_buf());
        Ok(())
    }

    fn list_dir(&self, path: &Path) -> Result<Vec<String>> {
        let ns = self.ns.lock();
        if !ns.dirs.contains(path) {
            return Err(not_found(path));
        }
        let names: BTreeSet<String> = ns
            .files
            .keys()
            .chain(ns.dirs.iter())
            .filter(|p| p.parent() == Some(path))
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect();
        Ok(names.into_iter().collect())
    }

    fn remove_file(&self, path: &Path) -> Result<()> {
        let mut ns = self.ns.lock();
        ns.files
            .remove(path)
            .map(|_| ())
            .ok_or_else(|| not_found(path))
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        let mut ns = self.ns.lock();
        let inode = ns.files.remove(from).ok_or_else(|| not_found(from))?;
        ns.add_parents(to);
        ns.files.insert(to.to_path_buf(), inode);
        Ok(())
    }

    fn sync_dir(&self, path: &Path) -> Result<()> {
        if self.ns.lock().dirs.contains(path) {
            Ok(())
        } else {
            Err(not_found(path))
        }
    }

    fn lock(&self, path: &Path) -> Result<Box<dyn VfsLock>> {
        {
            let mut ns = self.ns.lock();
            if !ns.files.contains_key(path) {
                ns.add_parents(path);
                ns.files
                    .insert(path.to_path_buf(), Arc::new(Inode::default()));
            }
        }
        self.locks.take(path, true)
    }

    fn lock_shared(&self, path: &Path) -> Result<Box<dyn VfsLock>> {
        if !self.ns.lock().files.contains_key(path) {
            return Err(not_found(path));
        }
        self.locks.take(path, false)
    }
}

impl VfsFile for MemFile {
    fn path(&self) -> &Path {
        &self.path
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        let d = self.inode.data.lock();
        let len = d.current.len() as u64;
        if offset >= len {
            return Ok(0);
        }
        let start = offset as usize;
        let n = buf.len().min(d.current.len() - start);
        buf[..n].copy_from_slice(&d.current[start..start + n]);
        Ok(n)
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        if self.read_only {
            return Err(read_only_handle(&self.path));
        }
        let offset =
            usize::try_from(offset).map_err(|_| Error::invalid("offset too large for MemVfs"))?;
        self.inode.data.lock().write(buf, offset);
        Ok(())
    }

    fn len(&self) -> Result<u64> {
        Ok(self.inode.data.lock().current.len() as u64)
    }

    fn set_len(&self, len: u64) -> Result<()> {
        if self.read_only {
            return Err(read_only_handle(&self.path));
        }
        let len =
            usize::try_from(len).map_err(|_| Error::invalid("length too large for MemVfs"))?;
        let mut data = self.inode.data.lock();
        data.set_len(len);
        data.allocated = data.allocated.min(len as u64);
        Ok(())
    }

    fn allocate(&self, len: u64) -> Result<()> {
        let grown = len.max(self.len()?);
        self.set_len(grown)?;
        let mut data = self.inode.data.lock();
        data.allocated = data.allocated.max(grown);
        Ok(())
    }

    fn sync_data(&self) -> Result<()> {
        if self.read_only {
            return Ok(());
        }
        self.inode.data.lock().sync();
        Ok(())
    }

    fn allocate_ahead(&self, offset: u64, len: u64) {
        if !self.read_only {
            let mut data = self.inode.data.lock();
            data.allocated_ahead = data.allocated_ahead.max(offset.saturating_add(len));
        }
    }

    fn start_writeback(&self, _offset: u64, len: u64) {
        if !self.read_only {
            self.inode.data.lock().writeback_hinted += len;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const RW: OpenOptions = OpenOptions {
        create: true,
        truncate: false,
        direct: false,
        read_only: false,
    };

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    #[test]
    fn write_read_len_set_len() {
        let vfs = MemVfs::new();
        let f = vfs.open(&p("/d/f"), RW).unwrap();
        assert_eq!(f.path(), Path::new("/d/f"));
        f.write_all_at(b"abc", 2).unwrap();
        assert_eq!(f.len().unwrap(), 5);
        let mut b = [9u8; 8];
        assert_eq!(f.read_at(&mut b, 0).unwrap(), 5);
        assert_eq!(&b[..5], b"\0\0abc");
        assert_eq!(f.read_at(&mut b, 5).unwrap(), 0);
        assert_eq!(f.read_at(&mut b, 99).unwrap(), 0);
        f.set_len(3).unwrap();
        assert_eq!(vfs.file_bytes("/d/f").unwrap(), b"\0\0a");
        f.set_len(6).unwrap();
        assert_eq!(vfs.file_bytes("/d/f").unwrap(), b"\0\0a\0\0\0");
        // A second handle sees the same bytes; truncate on open empties the file.
        let g = vfs
            .open(
                &p("/d/f"),
                OpenOptions {
                    truncate: true,
                    ..RW
                },
            )
            .unwrap();
        assert_eq!(g.len().unwrap(), 0);
        assert_eq!(f.len().unwrap(), 0);
        assert!(matches!(
            vfs.open(&p("/d/missing"), OpenOptions::default()),
            Err(Error::Io { source, .. }) if source.kind() == ErrorKind::NotFound
        ));
    }

    #[test]
    fn directories_rename_remove_list() {
        let vfs = MemVfs::new();
        vfs.create_dir_all(&p("/db/sub")).unwrap();
        assert!(vfs.exists(&p("/db")) && vfs.exists(&p("/db/sub")));
        vfs.open(&p("/db/b"), RW).unwrap();
        vfs.open(&p("/db/a"), RW).unwrap();
        assert_eq!(vfs.list_dir(&p("/db")).unwrap(), vec!["a", "b", "sub"]);
        vfs.rename(&p("/db/a"), &p("/db/c")).unwrap();
        vfs.remove_file(&p("/db/b")).unwrap();
        assert_eq!(vfs.list_dir(&p("/db")).unwrap(), vec!["c", "sub"]);
        assert!(!vfs.exists(&p("/db/a")));
        assert!(vfs.remove_file(&p("/db/a")).is_err());
        assert!(vfs.rename(&p("/db/a"), &p("/db/x")).is_err());
        assert!(vfs.list_dir(&p("/nowhere")).is_err());
        vfs.sync_dir(&p("/db")).unwrap();
        assert!(vfs.sync_dir(&p("/nowhere")).is_err());
    }

    #[test]
    fn crash_keeps_only_synced_bytes() {
        let vfs = MemVfs::new();
        let f = vfs.open(&p("/f"), RW).unwrap();
        f.write_all_at(b"hello world", 0).unwrap();
        f.sync_data().unwrap();
        f.write_all_at(b"HELLO", 0).unwrap(); // overwrite, not synced
        f.write_all_at(b"!!!", 11).unwrap(); // append, not synced
        assert_eq!(vfs.durable_bytes("/f").unwrap(), b"hello world");
        let never = vfs.open(&p("/never"), RW).unwrap();
        never.write_all_at(b"x", 0).unwrap();
        vfs.crash();
        assert_eq!(vfs.file_bytes("/f").unwrap(), b"hello world");
        assert!(vfs.file_bytes("/never").is_none());
        assert!(!vfs.exists(&p("/never")));
        // Handles from before the crash are detached.
        f.write_all_at(b"zzz", 0).unwrap();
        assert_eq!(vfs.file_bytes("/f").unwrap(), b"hello world");
        // Shrinking then syncing is durable too.
        let f = vfs.open(&p("/f"), RW).unwrap();
        f.set_len(5).unwrap();
        f.sync_data().unwrap();
        f.set_len(0).unwrap();
        vfs.crash();
        assert_eq!(vfs.file_bytes("/f").unwrap(), b"hello");
    }

    #[test]
    fn rename_moves_the_durable_image_and_set_file_bytes_is_durable() {
        let vfs = MemVfs::new();
        let f = vfs.open(&p("/tmp1"), RW).unwrap();
        f.write_all_at(b"manifest", 0).unwrap();
        f.sync_data().unwrap();
        vfs.rename(&p("/tmp1"), &p("/MANIFEST")).unwrap();
        vfs.crash();
        assert_eq!(vfs.file_bytes("/MANIFEST").unwrap(), b"manifest");
        assert!(vfs.file_bytes("/tmp1").is_none());
        vfs.set_file_bytes("/MANIFEST", b"damaged");
        vfs.crash();
        assert_eq!(vfs.file_bytes("/MANIFEST").unwrap(), b"damaged");
        vfs.set_file_bytes("/new/file", &b"x"[..]);
        assert!(vfs.exists(&p("/new")));
        assert_eq!(vfs.file_paths(), vec![p("/MANIFEST"), p("/new/file")]);
    }

    #[test]
    fn locks_exclude_and_release() {
        let vfs = MemVfs::new();
        let g = vfs.lock(&p("/db/LOCK")).unwrap();
        assert_eq!(g.path(), Path::new("/db/LOCK"));
        assert!(vfs.exists(&p("/db/LOCK")));
        assert!(matches!(vfs.lock(&p("/db/LOCK")), Err(Error::Locked(q)) if q == p("/db/LOCK")));
        drop(g);
        let g = vfs.lock(&p("/db/LOCK")).unwrap();
        // A crash releases every lock; the stale guard must not release the new holder's lock.
        vfs.crash();
        let g2 = vfs.lock(&p("/db/LOCK")).unwrap();
        drop(g);
        assert!(matches!(vfs.lock(&p("/db/LOCK")), Err(Error::Locked(_))));
        drop(g2);
        vfs.lock(&p("/db/LOCK")).unwrap();
    }

    #[derive(Debug, Clone)]
    enum Op {
        Write(usize, Vec<u8>),
        SetLen(usize),
        Sync,
        Crash,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0usize..200, proptest::collection::vec(any::<u8>(), 0..40)).prop_map(|(o, b)| Op::Write(o, b)),
            1 => (0usize..220).prop_map(Op::SetLen),
            2 => Just(Op::Sync),
            1 => Just(Op::Crash),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        /// The incremental durable image equals a naive full copy taken at each sync.
        #[test]
        fn incremental_sync_matches_a_naive_model(ops in proptest::collection::vec(op(), 1..60)) {
            let vfs = MemVfs::new();
            let path = p("/f");
            let mut f = vfs.open(&path, RW).unwrap();
            let mut cur: Vec<u8> = Vec::new();
            let mut durable: Option<Vec<u8>> = None;
            for op in ops {
                match op {
                    Op::Write(o, b) => {
                        if cur.len() < o + b.len() { cur.resize(o + b.len(), 0); }
                        cur[o..o + b.len()].copy_from_slice(&b);
                        f.write_all_at(&b, o as u64).unwrap();
                    }
                    Op::SetLen(n) => { cur.resize(n, 0); f.set_len(n as u64).unwrap(); }
                    Op::Sync => { durable = Some(cur.clone()); f.sync_data().unwrap(); }
                    Op::Crash => {
                        vfs.crash();
                        match &durable {
                            None => { prop_assert!(vfs.file_bytes(&path).is_none()); cur.clear(); }
                            Some(d) => { prop_assert_eq!(vfs.file_bytes(&path).unwrap(), d.clone()); cur = d.clone(); }
                        }
                        f = vfs.open(&path, RW).unwrap();
                    }
                }
                prop_assert_eq!(vfs.file_bytes(&path).unwrap(), cur.clone());
            }
        }
    }
}

#[cfg(test)]
mod lock_and_read_only_tests {
    use super::*;

    #[test]
    fn shared_and_exclusive_locks_exclude_each_other() {
        let mem = MemVfs::new();
        let p = Path::new("/d/LOCK");
        assert!(
            mem.lock_shared(p).is_err(),
            "no shared lock of a missing file"
        );
        let x = mem.lock(p).unwrap();
        assert!(matches!(mem.lock_shared(p), Err(Error::Locked(_))));
        assert!(matches!(mem.lock(p), Err(Error::Locked(_))));
        drop(x);
        let a = mem.lock_shared(p).unwrap();
        let b = mem.lock_shared(p).unwrap();
        assert!(matches!(mem.lock(p), Err(Error::Locked(_))));
        drop(a);
        assert!(matches!(mem.lock(p), Err(Error::Locked(_))));
        drop(b);
        let _x = mem.lock(p).unwrap();
    }

    #[test]
    fn read_only_handles_refuse_writes() {
        let mem = MemVfs::new();
        let p = Path::new("/f");
        mem.set_file_bytes(p, b"abc".to_vec());
        assert!(
            mem.open(
                p,
                OpenOptions {
                    truncate: true,
                    ..OpenOptions::READ_ONLY
                }
            )
            .is_err()
        );
        let f = mem.open(p, OpenOptions::READ_ONLY).unwrap();
        let denied = |r: Result<()>| matches!(r, Err(Error::Io { source, .. }) if source.kind() == ErrorKind::PermissionDenied);
        assert!(denied(f.write_all_at(b"x", 0)));
        assert!(denied(f.set_len(0)));
        f.sync_data().unwrap();
        let mut buf = [0u8; 3];
        assert_eq!(f.read_at(&mut buf, 0).unwrap(), 3);
        assert_eq!(mem.file_bytes(p).unwrap(), b"abc");
    }
}
