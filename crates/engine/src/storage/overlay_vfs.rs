//! `OverlayVfs`: a copy-on-write view of another file system that keeps every change in memory.
//!
//! A read-only database handle opens its files through one: recovery may replay a write-ahead log into the
//! index (which evicts dirty pages, builds shard files, writes state files), and all of it lands here, while
//! the underlying file system is never written — so reads work on a read-only mount and on a full disk.
//!
//! Invariants:
//! * Nothing reaches `base` but reads: base files are opened with `OpenOptions::READ_ONLY` (never O_DIRECT:
//!   the overlay copies through its own buffers), and creates, writes, `set_len`, removes, renames, syncs and
//!   locks stay in memory.
//! * Every path has one shared state, so all handles of a path see the same bytes. A file's bytes are its
//!   modified 4 KiB chunks, else the base file's bytes below `base_len`, else zeros; `base_len` is the lowest
//!   length the file was ever cut to, so growing it again reads zeros, never stale base bytes.
//! * The name space is the base's, minus the paths removed here, plus the files and directories made here.
//!
//! Cost: a read copies the bytes once (plus a base read for untouched chunks); the first write to a chunk
//! copies it from the base (one 4 KiB read). Memory: 4 KiB per modified chunk
//! ([`OverlayVfs::overlay_bytes`]) plus a map entry.

use super::mem_vfs::LockTable;
use super::vfs::{OpenOptions, Vfs, VfsFile, VfsLock, read_exact_at, read_only_handle};
use crate::error::{Error, Result};
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Size of the units in which modified bytes are kept.
const CHUNK: u64 = 4096;

/// A file system that reads `base` and keeps every change in memory (see the module doc).
#[derive(Debug)]
pub struct OverlayVfs {
    base: Arc<dyn Vfs>,
    names: Mutex<Names>,
    locks: Arc<LockTable>,
    /// Bytes held by modified chunks, over every file.
    held: Arc<AtomicU64>,
}

#[derive(Debug, Default)]
struct Names {
    /// Paths with overlay state: created here, or opened (through the overlay) from the base.
    files: HashMap<PathBuf, Arc<Mutex<Content>>>,
    /// Base paths hidden by a remove or a rename.
    removed: BTreeSet<PathBuf>,
    /// Directories made here.
    dirs: BTreeSet<PathBuf>,
}

/// The bytes of one file as the overlay sees them.
#[derive(Debug)]
struct Content {
    /// The base file, opened read-only (`None` for a file made here).
    base: Option<Box<dyn VfsFile>>,
    /// Bytes of the base file still visible.
    base_len: u64,
    len: u64,
    /// Modified chunks by index.
    chunks: BTreeMap<u64, Box<[u8]>>,
    held: Arc<AtomicU64>,
}

impl Drop for Content {
    fn drop(&mut self) {
        self.held
            .fetch_sub(self.chunks.len() as u64 * CHUNK, Ordering::Relaxed);
    }
}

impl Content {
    fn new(base: Option<Box<dyn VfsFile>>, len: u64, held: Arc<AtomicU64>) -> Result<Content> {
        Ok(Content {
            base,
            base_len: len,
            len,
            chunks: BTreeMap::new(),
            held,
        })
    }

    /// Fills `out` with the base bytes at `offset` (zeros past `base_len`).
    fn read_base(&self, out: &mut [u8], offset: u64) -> Result<()> {
        out.fill(0);
        let Some(base) = &self.base else {
            return Ok(());
        };
        if offset >= self.base_len {
            return Ok(());
        }
        let n = out.len().min((self.base_len - offset) as usize);
        read_exact_at(base.as_ref(), &mut out[..n], offset)?;
        Ok(())
    }

    fn read(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        if offset >= self.len {
            return Ok(0);
        }
        let n = buf.len().min((self.len - offset) as usize);
        let mut done = 0;
        while done < n {
            let pos = offset + done as u64;
            let (index, within) = (pos / CHUNK, (pos % CHUNK) as usize);
            let take = (n - done).min(CHUNK as usize - within);
            let out = &mut buf[done..done + take];
            match self.chunks.get(&index) {
                Some(chunk) => out.copy_from_slice(&chunk[within..within + take]),
                None => self.read_base(out, pos)?,
            }
            done += take;
        }
        Ok(n)
    }

    fn write(&mut self, buf: &[u8], offset: u64) -> Result<()> {
        let end = offset
            .checked_add(buf.len() as u64)
            .ok_or_else(|| Error::invalid("write past the largest file offset"))?;
        let mut done = 0;
        while done < buf.len() {
            let pos = offset + done as u64;
            let (index, within) = (pos / CHUNK, (pos % CHUNK) as usize);
            let take = (buf.len() - done).min(CHUNK as usize - within);
            if !self.chunks.contains_key(&index) {
                let mut chunk = vec![0u8; CHUNK as usize].into_boxed_slice();
                // Bytes of the chunk past the file's end stay zero.
                let visible = self.len.saturating_sub(index * CHUNK).min(CHUNK) as usize;
                self.read_base(&mut chunk[..visible], index * CHUNK)?;
                self.chunks.insert(index, chunk);
                self.held.fetch_add(CHUNK, Ordering::Relaxed);
            }
            let chunk = self.chunks.get_mut(&index).expect("just inserted");
            chunk[within..within + take].copy_from_slice(&buf[done..done + take]);
            done += take;
        }
        self.len = self.len.max(end);
        Ok(())
    }

    fn set_len(&mut self, len: u64) {
        if len < self.len {
            self.base_len = self.base_len.min(len);
            let first_gone = len.div_ceil(CHUNK);
            let gone = self.chunks.split_off(&first_gone);
            self.held
                .fetch_sub(gone.len() as u64 * CHUNK, Ordering::Relaxed);
            if let Some(chunk) = self.chunks.get_mut(&(len / CHUNK)) {
                chunk[(len % CHUNK) as usize..].fill(0);
            }
        }
        self.len = len;
    }
}

/// A handle of an [`OverlayVfs`] file.
#[derive(Debug)]
struct OverlayFile {
    content: Arc<Mutex<Content>>,
    path: PathBuf,
    read_only: bool,
}

fn not_found(path: &Path) -> Error {
    Error::io(
        path,
        std::io::Error::new(ErrorKind::NotFound, "no such file or directory (overlay)"),
    )
}

impl OverlayVfs {
    /// An overlay over `base`.
    pub fn new(base: Arc<dyn Vfs>) -> OverlayVfs {
        OverlayVfs {
            base,
            names: Mutex::new(Names::default()),
            locks: Arc::new(LockTable::default()),
            held: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Bytes of memory held by modified chunks.
    pub fn overlay_bytes(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    /// The shared content of `path`, loading it from the base on first use; `None` if it does not exist.
    fn content(&self, names: &mut Names, path: &Path) -> Result<Option<Arc<Mutex<Content>>>> {
        if let Some(c) = names.files.get(path) {
            return Ok(Some(c.clone()));
        }
        if names.removed.contains(path) || names.dirs.contains(path) || !self.base.exists(path) {
            return Ok(None);
        }
        let base = self.base.open(path, OpenOptions::READ_ONLY)?;
        let len = base.len()?;
        let c = Arc::new(Mutex::new(Content::new(
            Some(base),
            len,
            self.held.clone(),
        )?));
        names.files.insert(path.to_path_buf(), c.clone());
        Ok(Some(c))
    }

    fn exists_in(&self, names: &Names, path: &Path) -> bool {
        names.files.contains_key(path)
            || names.dirs.contains(path)
            || (!names.removed.contains(path) && self.base.exists(path))
    }
}

impl Vfs for OverlayVfs {
    /// A base file the overlay holds no state for (never opened, changed or removed through it) may be
    /// mapped privately: its bytes are the base's, and stores to a private mapping stay in this process, as
    /// the overlay's changes do. Anything else is read and written through the overlay only.
    fn mapping(&self, path: &Path) -> super::vfs::FileMapping {
        let names = self.names.lock();
        let untouched = !names.files.contains_key(path) && !names.removed.contains(path);
        match self.base.mapping(path) {
            super::vfs::FileMapping::Shared if untouched => super::vfs::FileMapping::PrivateCopy,
            _ => super::vfs::FileMapping::Unavailable,
        }
    }

    fn open(&self, path: &Path, opts: OpenOptions) -> Result<Box<dyn VfsFile>> {
        opts.validate(path)?;
        let mut names = self.names.lock();
        let content = match self.content(&mut names, path)? {
            Some(c) => c,
            None if opts.create => {
                let c = Arc::new(Mutex::new(Content::new(None, 0, self.held.clone())?));
                names.removed.remove(path);
                names.files.insert(path.to_path_buf(), c.clone());
                c
            }
            None => return Err(not_found(path)),
        };
        drop(names);
        if opts.truncate {
            content.lock().set_len(0);
        }
        Ok(Box::new(OverlayFile {
            content,
            path: path.to_path_buf(),
            read_only: opts.read_only,
        }))
    }

    fn exists(&self, path: &Path) -> bool {
        self.exists_in(&self.names.lock(), path)
    }

    fn create_dir_all(&self, path: &Path) -> Result<()> {
        let mut names = self.names.lock();
        for a in path.ancestors() {
            if a.as_os_str().is_empty() || self.base.exists(a) {
                break;
            }
            names.dirs.insert(a.to_path_buf());
        }
        Ok(())
    }

    fn list_dir(&self, path: &Path) -> Result<Vec<String>> {
        let names = self.names.lock();
        let mut out: BTreeSet<String> = BTreeSet::new();
        if names.dirs.contains(path) {
            // Made here: only what was made here.
        } else if self.base.exists(path) && !names.removed.contains(path) {
            for name in self.base.list_dir(path)? {
                if !names.removed.contains(&path.join(&name)) {
                    out.insert(name);
                }
            }
        } else {
            return Err(not_found(path));
        }
        for p in names.files.keys().chain(names.dirs.iter()) {
            if p.parent() == Some(path)
                && let Some(n) = p.file_name()
            {
                out.insert(n.to_string_lossy().into_owned());
            }
        }
        Ok(out.into_iter().collect())
    }

    fn remove_file(&self, path: &Path) -> Result<()> {
        let mut names = self.names.lock();
        if !self.exists_in(&names, path) || names.dirs.contains(path) {
            return Err(not_found(path));
        }
        names.files.remove(path);
        if self.base.exists(path) {
            names.removed.insert(path.to_path_buf());
        }
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        let mut names = self.names.lock();
        let content = self
            .content(&mut names, from)?
            .ok_or_else(|| not_found(from))?;
        names.files.remove(from);
        if self.base.exists(from) {
            names.removed.insert(from.to_path_buf());
        }
        names.removed.remove(to);
        names.files.insert(to.to_path_buf(), content);
        Ok(())
    }

    fn sync_dir(&self, path: &Path) -> Result<()> {
        if self.exists(path) {
            Ok(())
        } else {
            Err(not_found(path))
        }
    }

    fn lock(&self, path: &Path) -> Result<Box<dyn VfsLock>> {
        self.locks.take(path, true)
    }

    fn lock_shared(&self, path: &Path) -> Result<Box<dyn VfsLock>> {
        if !self.exists(path) {
            return Err(not_found(path));
        }
        self.locks.take(path, false)
    }

    fn remove_dir(&self, path: &Path) -> Result<()> {
        self.names.lock().dirs.remove(path);
        Ok(())
    }
}

impl VfsFile for OverlayFile {
    fn path(&self) -> &Path {
        &self.path
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        self.content.lock().read(buf, offset)
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        if self.read_only {
            return Err(read_only_handle(&self.path));
        }
        self.content.lock().write(buf, offset)
    }

    fn len(&self) -> Result<u64> {
        Ok(self.content.lock().len)
    }

    fn set_len(&self, len: u64) -> Result<()> {
        if self.read_only {
            return Err(read_only_handle(&self.path));
        }
        self.content.lock().set_len(len);
        Ok(())
    }

    fn sync_data(&self) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::fault_vfs::FaultVfs;
    use crate::storage::mem_vfs::MemVfs;
    use proptest::prelude::*;

    const FILES: [&str; 3] = ["/d/a", "/d/b", "/d/c"];

    #[derive(Debug, Clone)]
    enum Op {
        Write {
            file: usize,
            at: u64,
            len: usize,
            byte: u8,
        },
        SetLen {
            file: usize,
            len: u64,
        },
        Create {
            file: usize,
            truncate: bool,
        },
        Remove {
            file: usize,
        },
        Rename {
            from: usize,
            to: usize,
        },
        Read {
            file: usize,
            at: u64,
            len: usize,
        },
    }

    fn op() -> impl Strategy<Value = Op> {
        let f = 0..FILES.len();
        prop_oneof![
            4 => (f.clone(), 0u64..20_000, 1usize..9000, any::<u8>())
                .prop_map(|(file, at, len, byte)| Op::Write { file, at, len, byte }),
            1 => (f.clone(), 0u64..20_000).prop_map(|(file, len)| Op::SetLen { file, len }),
            1 => (f.clone(), any::<bool>()).prop_map(|(file, truncate)| Op::Create { file, truncate }),
            1 => f.clone().prop_map(|file| Op::Remove { file }),
            1 => (f.clone(), f.clone()).prop_map(|(from, to)| Op::Rename { from, to }),
            3 => (f, 0u64..20_000, 1usize..9000).prop_map(|(file, at, len)| Op::Read { file, at, len }),
        ]
    }

    /// A `MemVfs` with the three files, the first two filled with a pattern.
    fn seeded() -> Arc<MemVfs> {
        let mem = Arc::new(MemVfs::new());
        mem.create_dir_all(Path::new("/d")).unwrap();
        for (i, f) in FILES[..2].iter().enumerate() {
            let bytes: Vec<u8> = (0..10_000u32).map(|j| (j * 7 + i as u32) as u8).collect();
            mem.set_file_bytes(f, bytes);
        }
        mem
    }

    fn rw() -> OpenOptions {
        OpenOptions::default()
    }

    /// Applies `op` to `vfs`; returns what a read returned, and whether the op succeeded.
    fn run(vfs: &dyn Vfs, op: &Op) -> (bool, Option<Vec<u8>>) {
        let p = |i: usize| Path::new(FILES[i]);
        let r = match op {
            Op::Write {
                file,
                at,
                len,
                byte,
            } => vfs
                .open(p(*file), rw())
                .and_then(|f| f.write_all_at(&vec![*byte; *len], *at)),
            Op::SetLen { file, len } => vfs.open(p(*file), rw()).and_then(|f| f.set_len(*len)),
            Op::Create { file, truncate } => vfs
                .open(
                    p(*file),
                    OpenOptions {
                        create: true,
                        truncate: *truncate,
                        ..rw()
                    },
                )
                .map(drop),
            Op::Remove { file } => vfs.remove_file(p(*file)),
            Op::Rename { from, to } => vfs.rename(p(*from), p(*to)),
            Op::Read { file, at, len } => {
                return match vfs.open(p(*file), OpenOptions::READ_ONLY) {
                    Ok(f) => {
                        let mut buf = vec![0u8; *len];
                        let n = f.read_at(&mut buf, *at).unwrap();
                        buf.truncate(n);
                        (true, Some(buf))
                    }
                    Err(_) => (false, None),
                };
            }
        };
        (r.is_ok(), None)
    }

    proptest! {
        #[test]
        fn the_overlay_behaves_like_a_file_system_and_never_writes_its_base(
            ops in proptest::collection::vec(op(), 1..60)
        ) {
            let base = seeded();
            let before: Vec<(PathBuf, Vec<u8>)> = base
                .file_paths()
                .into_iter()
                .map(|p| { let b = base.file_bytes(&p).unwrap(); (p, b) })
                .collect();
            let model = seeded();
            let overlay = OverlayVfs::new(base.clone());
            for op in &ops {
                prop_assert_eq!(run(&overlay, op), run(model.as_ref(), op), "{:?}", op);
            }
            for f in FILES {
                let path = Path::new(f);
                prop_assert_eq!(overlay.exists(path), model.exists(path));
                if model.exists(path) {
                    let o = overlay.open(path, OpenOptions::READ_ONLY).unwrap();
                    let len = o.len().unwrap() as usize;
                    let mut got = vec![0u8; len];
                    read_exact_at(o.as_ref(), &mut got, 0).unwrap();
                    prop_assert_eq!(got, model.file_bytes(path).unwrap(), "{}", f);
                }
            }
            prop_assert_eq!(
                overlay.list_dir(Path::new("/d")).unwrap(),
                model.list_dir(Path::new("/d")).unwrap()
            );
            let after: Vec<(PathBuf, Vec<u8>)> = base
                .file_paths()
                .into_iter()
                .map(|p| { let b = base.file_bytes(&p).unwrap(); (p, b) })
                .collect();
            prop_assert_eq!(before, after, "the base is untouched");
        }
    }

    #[test]
    fn a_full_disk_underneath_does_not_matter() {
        let mem = seeded();
        let fault = FaultVfs::new(mem.clone());
        fault.refuse_writes(ErrorKind::StorageFull);
        let base: Arc<dyn Vfs> = Arc::new(fault.clone());
        assert!(
            base.open(
                Path::new("/d/x"),
                OpenOptions {
                    create: true,
                    ..rw()
                }
            )
            .is_err()
        );
        let overlay = OverlayVfs::new(base);
        let f = overlay
            .open(
                Path::new("/d/x"),
                OpenOptions {
                    create: true,
                    ..rw()
                },
            )
            .unwrap();
        f.write_all_at(&[9u8; 50_000], 100).unwrap();
        f.sync_data().unwrap();
        let a = overlay.open(Path::new("/d/a"), rw()).unwrap();
        a.write_all_at(b"hello", 4090).unwrap();
        a.set_len(5000).unwrap();
        overlay.sync_dir(Path::new("/d")).unwrap();
        overlay
            .rename(Path::new("/d/x"), Path::new("/d/y"))
            .unwrap();
        overlay.remove_file(Path::new("/d/b")).unwrap();
        let _l = overlay.lock(Path::new("/d/LOCK")).unwrap();
        assert!(overlay.lock(Path::new("/d/LOCK")).is_err());
        let mut buf = [0u8; 5];
        assert_eq!(a.read_at(&mut buf, 4090).unwrap(), 5);
        assert_eq!(&buf, b"hello");
        assert_eq!(overlay.list_dir(Path::new("/d")).unwrap(), vec!["a", "y"]);
        assert!(overlay.overlay_bytes() >= 13 * CHUNK);
        assert_eq!(mem.file_bytes("/d/a").unwrap().len(), 10_000);
        assert!(!mem.exists(Path::new("/d/y")));
        // A read-only handle of the overlay refuses writes.
        let r = overlay
            .open(Path::new("/d/a"), OpenOptions::READ_ONLY)
            .unwrap();
        assert!(
            matches!(r.write_all_at(b"x", 0), Err(Error::Io { source, .. }) if source.kind() == ErrorKind::PermissionDenied)
        );
        drop((f, a, r));
        drop(overlay);
    }
}
