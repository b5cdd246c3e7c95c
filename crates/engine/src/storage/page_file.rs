//! `PageFile`: a file of fixed-size checksummed pages with free-list allocation and copy-on-write commits.
//!
//! ## Layout
//! Page `id` lives at byte offset `id × page_size`. Pages 0 and 1 are the two **meta slots**; every other page
//! starts with the common header of [`page`]. A meta slot's body, after the 24-byte header
//! (type `Meta`, header epoch = committed epoch, checksum seeded with the slot id), little endian:
//!
//! | offset | field                                                               |
//! |--------|---------------------------------------------------------------------|
//! | 24     | magic `b"STRATAPF"`                                                 |
//! | 32     | format version `u32` (= 1)                                          |
//! | 36     | page size `u32`                                                     |
//! | 40     | committed epoch `u64` (commit `e` is written to slot `e % 2`)        |
//! | 48     | page count `u64`: high-water mark of pages in use, including 0 and 1 |
//! | 56     | free-list head `u64` (0 = no free-list page)                         |
//! | 64     | free-list length `u64`: ids stored in the chain                      |
//! | 72     | user root length `u16` (≤ 512)                                       |
//! | 74     | user root bytes                                                     |
//!
//! A free-list page (type `FreeList`) holds after the header: next page `u64` (0 = end), count `u32`, then
//! `count` page ids `u64`.
//!
//! ## Invariants
//! * The working epoch is the last committed epoch + 1. Pages allocated now are stamped with it by their
//!   writer; a page with an older epoch belongs to the last commit and must not be written in place.
//! * Every page id in `[2, page_count)` is exactly one of: referenced by the caller's structure, in `free`
//!   (reusable now), in `pending` (freed since the last commit but referenced by it), or in `chain` (holding
//!   the last commit's free list). `unreachable_pages` returns the last three.
//! * No page referenced by the last commit (its structure pages, its free-list chain, its meta slot) is written
//!   before a newer meta slot is durable: allocation only hands out `free` pages or grows the file, a commit
//!   builds its free-list chain only from `free` pages or new pages, and writes the *other* meta slot.
//! * A commit is: write the free-list chain, extend the file to the committed page count if it is shorter,
//!   `fdatasync`, write meta slot `epoch % 2`, `fdatasync`. A crash at any point leaves either the previous
//!   commit or the new one readable; opening picks the valid slot with the highest epoch and cuts the file
//!   back to the committed page count. A file shorter than that count is truncated: `Error::Corruption`.
//! * A commit can be split in two ([`PageFile::begin_commit`], [`PageFile::finish_commit`]) so that writes go
//!   on while it is written: `begin_commit` seals epoch `E` in memory (its free list, page count and
//!   free-list chain, taken from `free` or new pages) and starts `E + 1`; pages of `E` are then copied on
//!   write, so their images stay what the commit writes. Until `finish_commit` has made the meta slot durable,
//!   pages freed in `E + 1` stay `pending` and the sealed commit's chain and released pages stay unreachable
//!   to allocation, so neither the last durable commit nor the sealed one is overwritten. At most one commit
//!   is sealed at a time; the synchronous `commit` is `begin_commit` + `finish_commit` (rolled back if the
//!   second half fails).
//! * Opening does not decide whether falling back to the older slot is safe: it reports the other slot's
//!   problem as [`PageFile::spare_damage`], and the caller (the database shell, which knows what the
//!   write-ahead log covers) decides whether the fallback lost acknowledged writes.
//!
//! ## Blocks ahead of the end
//! A write past the blocks reserved so far first asks the file system to allocate the next
//! [`RESERVE_STEP`]s beyond it ([`VfsFile::allocate_ahead`]: `fallocate` that keeps the length, so the file
//! reads and checks exactly as before). Pages written into sparse space would each need a block allocated,
//! and on ext4 that waits for the file's block mapping while the write-back of a commit's pages holds it to
//! allocate theirs: 4–36 ms waits of a B+-tree writer evicting a dirty page during a checkpoint, at 10M
//! writes.
//!
//! ## Cost
//! `allocate` and `free` are O(1) in memory (amortised: the `free` and `pending` sets are bitmaps, see
//! `id_set`, which touch the heap only when they grow), no I/O. `read_page`/`write_page`: one positional I/O of
//! `page_size` bytes plus an xxh3 pass. `commit`: one write per free-list page (≈ `page_size / 8` ids each),
//! one meta write, two `fdatasync`s, plus an O(n log n) sort of the free set.

use super::codec::{Short, get, put};
use super::io_stats::{FileKind, IoStats};
use super::page::{
    self, PAGE_HEADER_LEN, PageBuf, PageId, PageType, page_epoch, page_type, set_page_epoch,
    set_page_type, stamp_checksum, verify_checksum,
};
use super::vfs::{OpenOptions, Vfs, VfsFile, read_exact_at};
use crate::error::{Damage, Error, Result};

/// Bytes past the end of the writes that are reserved at a time ([`VfsFile::allocate_ahead`]): at least
/// this much, and at least an eighth of the file.
pub const RESERVE_STEP: u64 = 4 << 20;
use id_set::IdSet;
use parking_lot::Mutex;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Options fixed when a page file is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageFileOptions {
    pub page_size: usize,
    pub direct: bool,
}

/// Magic bytes of a meta slot.
pub const META_MAGIC: &[u8; 8] = b"STRATAPF";
/// On-disk format version this build reads and writes.
pub const FORMAT_VERSION: u32 = 1;
/// Longest user root a commit accepts.
pub const MAX_USER_ROOT: usize = 512;

const OFF_MAGIC: usize = PAGE_HEADER_LEN;
const OFF_VERSION: usize = OFF_MAGIC + 8;
const OFF_PAGE_SIZE: usize = OFF_VERSION + 4;
const OFF_EPOCH: usize = OFF_PAGE_SIZE + 4;
const OFF_PAGE_COUNT: usize = OFF_EPOCH + 8;
const OFF_FL_HEAD: usize = OFF_PAGE_COUNT + 8;
const OFF_FL_LEN: usize = OFF_FL_HEAD + 8;
const OFF_ROOT_LEN: usize = OFF_FL_LEN + 8;
const OFF_ROOT: usize = OFF_ROOT_LEN + 2;

const OFF_FL_NEXT: usize = PAGE_HEADER_LEN;
const OFF_FL_COUNT: usize = OFF_FL_NEXT + 8;
const OFF_FL_IDS: usize = OFF_FL_COUNT + 4;

/// Number of page ids one free-list page holds.
pub fn free_list_capacity(page_size: usize) -> usize {
    (page_size - OFF_FL_IDS) / 8
}

/// The contents of a meta slot.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Meta {
    epoch: u64,
    page_count: u64,
    fl_head: PageId,
    fl_len: u64,
    user_root: Vec<u8>,
}

impl Meta {
    fn encode(&self, buf: &mut [u8], page_size: usize, slot: PageId) {
        buf.fill(0);
        set_page_type(buf, PageType::Meta);
        set_page_epoch(buf, self.epoch);
        buf[OFF_MAGIC..OFF_MAGIC + 8].copy_from_slice(META_MAGIC);
        put::<u32>(buf, OFF_VERSION, FORMAT_VERSION);
        put::<u32>(buf, OFF_PAGE_SIZE, page_size as u32);
        put::<u64>(buf, OFF_EPOCH, self.epoch);
        put::<u64>(buf, OFF_PAGE_COUNT, self.page_count);
        put::<u64>(buf, OFF_FL_HEAD, self.fl_head);
        put::<u64>(buf, OFF_FL_LEN, self.fl_len);
        put::<u16>(buf, OFF_ROOT_LEN, self.user_root.len() as u16);
        buf[OFF_ROOT..OFF_ROOT + self.user_root.len()].copy_from_slice(&self.user_root);
        stamp_checksum(buf, slot);
    }
}

/// Why a meta slot could not be used.
enum SlotState {
    Valid(Meta),
    /// Checksum and magic verify but the slot was written by another format version or page size.
    Incompatible(String),
    Invalid(String),
}

fn decode_meta(buf: &[u8], slot: PageId, page_size: usize) -> SlotState {
    decode_meta_fields(buf, slot, page_size)
        .unwrap_or_else(|short| SlotState::Invalid(format!("meta page too short: {short}")))
}

fn decode_meta_fields(buf: &[u8], slot: PageId, page_size: usize) -> Result<SlotState, Short> {
    if !verify_checksum(buf, slot) {
        return Ok(SlotState::Invalid("checksum mismatch".into()));
    }
    if buf.get(OFF_MAGIC..OFF_MAGIC + 8) != Some(&META_MAGIC[..]) {
        return Ok(SlotState::Invalid("bad magic".into()));
    }
    if page_type(buf) != PageType::Meta as u8 {
        return Ok(SlotState::Invalid(format!(
            "page type {} is not a meta page",
            page_type(buf)
        )));
    }
    let version = get::<u32>(buf, OFF_VERSION)?;
    if version != FORMAT_VERSION {
        return Ok(SlotState::Incompatible(format!(
            "page file format version {version}, this build reads version {FORMAT_VERSION}"
        )));
    }
    let stored_size = get::<u32>(buf, OFF_PAGE_SIZE)? as usize;
    if stored_size != page_size {
        return Ok(SlotState::Incompatible(format!(
            "page file was created with page size {stored_size}, opened with page size {page_size}"
        )));
    }
    let meta = Meta {
        epoch: get::<u64>(buf, OFF_EPOCH)?,
        page_count: get::<u64>(buf, OFF_PAGE_COUNT)?,
        fl_head: get::<u64>(buf, OFF_FL_HEAD)?,
        fl_len: get::<u64>(buf, OFF_FL_LEN)?,
        user_root: Vec::new(),
    };
    if meta.epoch == u64::MAX {
        return Ok(SlotState::Invalid("epoch has no successor".into()));
    }
    if meta.epoch != 0 && meta.epoch % 2 != slot {
        return Ok(SlotState::Invalid(format!(
            "epoch {} does not belong in slot {slot}",
            meta.epoch
        )));
    }
    if meta.page_count < 2 || meta.page_count.checked_mul(page_size as u64).is_none() {
        return Ok(SlotState::Invalid(format!(
            "page count {} is impossible",
            meta.page_count
        )));
    }
    if meta.fl_head != 0 && (meta.fl_head < 2 || meta.fl_head >= meta.page_count) {
        return Ok(SlotState::Invalid(format!(
            "free-list head {} outside the file ({} pages)",
            meta.fl_head, meta.page_count
        )));
    }
    if meta.fl_head == 0 && meta.fl_len != 0 {
        return Ok(SlotState::Invalid(format!(
            "free list of {} ids without a head page",
            meta.fl_len
        )));
    }
    let root_len = get::<u16>(buf, OFF_ROOT_LEN)? as usize;
    if root_len > MAX_USER_ROOT {
        return Ok(SlotState::Invalid(format!(
            "user root length {root_len} > {MAX_USER_ROOT}"
        )));
    }
    let user_root = buf
        .get(OFF_ROOT..OFF_ROOT + root_len)
        .ok_or(Short {
            at: OFF_ROOT,
            wanted: root_len,
            len: buf.len(),
        })?
        .to_vec();
    Ok(SlotState::Valid(Meta { user_root, ..meta }))
}

/// Allocation state, guarded by one mutex.
#[derive(Debug)]
struct State {
    /// Working epoch = committed epoch + 1.
    epoch: u64,
    page_count: u64,
    /// Reusable now.
    free: IdSet,
    /// Freed since the last commit but referenced by it: reusable after the next commit.
    pending: IdSet,
    /// Pages holding the last commit's free-list chain, in chain order.
    chain: Vec<PageId>,
    /// What the last committed meta slot says.
    committed: Meta,
    /// A commit begun and not finished: its epoch, its free-list chain pages, and the pages freed before it
    /// that the last commit references (reusable once it is durable).
    sealed: Option<Sealed>,
    /// Why the other meta slot (not the committed one) is unusable, if it is: damage, or the torn write of a
    /// commit that never completed. Cleared by the next commit, which rewrites that slot.
    spare_damage: Option<Damage>,
}

/// The in-memory half of a commit under way (see [`PageFile::begin_commit`]).
#[derive(Debug)]
struct Sealed {
    epoch: u64,
    /// The pages its free-list chain goes to.
    chain: Vec<PageId>,
    /// Pages freed before it that the last commit references.
    released: Vec<PageId>,
    /// For an abort: the chain pages that came from `free`, and the page count before.
    taken_from_free: Vec<PageId>,
    page_count_before: u64,
}

/// A commit begun by [`PageFile::begin_commit`], to be made durable by [`PageFile::finish_commit`].
#[derive(Debug)]
pub struct SealedCommit {
    meta: Meta,
    chain_pages: Vec<PageId>,
    entries: Vec<PageId>,
}

impl SealedCommit {
    /// The epoch being committed: pages stamped with it or an older one are part of it.
    pub fn epoch(&self) -> u64 {
        self.meta.epoch
    }
}

/// A file of fixed-size checksummed pages with free-list allocation and copy-on-write checkpoints.
#[derive(Debug)]
pub struct PageFile {
    file: Box<dyn VfsFile>,
    path: PathBuf,
    page_size: usize,
    /// Opened with O_DIRECT: unaligned buffers are bounced through an aligned one.
    direct: bool,
    stats: Arc<IoStats>,
    state: Mutex<State>,
    /// Mirrors of `State::page_count` and `State::epoch` (written under the state mutex), so page reads and
    /// writes never wait for a commit that holds the mutex during its I/O.
    page_count: AtomicU64,
    epoch: AtomicU64,
    /// File offset up to which blocks were reserved ahead (or the file held bytes when opened).
    reserved: AtomicU64,
}

impl PageFile {
    /// Creates (or truncates) a page file: both meta slots at epoch 0, no pages, empty user root; synced.
    pub fn create(
        vfs: &Arc<dyn Vfs>,
        path: &Path,
        opts: PageFileOptions,
        stats: Arc<IoStats>,
    ) -> Result<PageFile> {
        page::validate_page_size(opts.page_size)?;
        let file = vfs.open(
            path,
            OpenOptions {
                create: true,
                truncate: true,
                direct: opts.direct,
                read_only: false,
            },
        )?;
        let meta = Meta {
            epoch: 0,
            page_count: 2,
            fl_head: 0,
            fl_len: 0,
            user_root: Vec::new(),
        };
        let pf = PageFile {
            file,
            path: path.to_path_buf(),
            page_size: opts.page_size,
            direct: opts.direct,
            stats,
            state: Mutex::new(State {
                epoch: 1,
                page_count: 2,
                free: IdSet::default(),
                pending: IdSet::default(),
                sealed: None,
                chain: Vec::new(),
                committed: meta.clone(),
                spare_damage: None,
            }),
            page_count: AtomicU64::new(2),
            epoch: AtomicU64::new(1),
            reserved: AtomicU64::new(0),
        };
        let mut buf = PageBuf::new(opts.page_size);
        for slot in 0..2 {
            meta.encode(&mut buf, opts.page_size, slot);
            pf.write_raw(slot, &buf)?;
        }
        pf.sync()?;
        Ok(pf)
    }

    /// Opens an existing page file at its last valid commit (see the module doc).
    pub fn open(
        vfs: &Arc<dyn Vfs>,
        path: &Path,
        opts: PageFileOptions,
        stats: Arc<IoStats>,
    ) -> Result<PageFile> {
        page::validate_page_size(opts.page_size)?;
        let file = vfs.open(
            path,
            OpenOptions {
                create: false,
                truncate: false,
                direct: opts.direct,
                read_only: false,
            },
        )?;
        let ps = opts.page_size;
        let file_len = file.len()?;
        let mut buf = PageBuf::new(ps);
        let mut reasons = Vec::new();
        let mut incompatible = None;
        let mut best: Option<Meta> = None;
        let mut invalid: [Option<String>; 2] = [None, None];
        for slot in 0..2u64 {
            let state = read_meta_slot(&*file, &mut buf, slot, ps)?;
            stats.record_read(FileKind::Pages, ps);
            match state {
                SlotState::Valid(m) => {
                    if best.as_ref().is_none_or(|b| m.epoch > b.epoch) {
                        best = Some(m);
                    }
                }
                SlotState::Incompatible(msg) => {
                    reasons.push(format!("slot {slot}: {msg}"));
                    invalid[slot as usize] = Some(msg.clone());
                    incompatible = Some(msg);
                }
                SlotState::Invalid(msg) => {
                    reasons.push(format!("slot {slot}: {msg}"));
                    invalid[slot as usize] = Some(msg);
                }
            }
        }
        let Some(meta) = best else {
            if let Some(msg) = incompatible.or_else(|| probe_other_page_size(&*file, ps)) {
                return Err(Error::Incompatible(format!("{}: {msg}", path.display())));
            }
            if file_len < 2 * ps as u64 {
                return Err(Error::corruption(
                    path,
                    0,
                    format!(
                        "file is {file_len} bytes, shorter than the two meta pages of {ps} bytes"
                    ),
                ));
            }
            return Err(Error::corruption(
                path,
                0,
                format!("no valid meta slot: {}", reasons.join("; ")),
            ));
        };

        let committed_slot = meta.epoch % 2;
        let spare = 1 - committed_slot;
        let spare_damage = invalid[spare as usize].take().map(|reason| {
            Damage::new(
                path,
                spare * ps as u64,
                format!(
                    "meta slot {spare} (the spare checkpoint; the last commit is epoch {} in slot {committed_slot}) \
                     is unusable: {reason}",
                    meta.epoch
                ),
            )
        });
        let committed_len = meta.page_count * ps as u64;
        if file_len < committed_len {
            return Err(Error::corruption(
                path,
                file_len,
                format!(
                    "file is {file_len} bytes, but its last commit (epoch {}) has {} pages of {ps} bytes: \
                     it was truncated",
                    meta.epoch, meta.page_count
                ),
            ));
        }
        let pf = PageFile {
            file,
            path: path.to_path_buf(),
            page_size: ps,
            direct: opts.direct,
            stats,
            state: Mutex::new(State {
                epoch: meta.epoch + 1,
                page_count: meta.page_count,
                free: IdSet::default(),
                pending: IdSet::default(),
                sealed: None,
                chain: Vec::new(),
                committed: meta.clone(),
                spare_damage,
            }),
            page_count: AtomicU64::new(meta.page_count),
            epoch: AtomicU64::new(meta.epoch + 1),
            reserved: AtomicU64::new(committed_len),
        };
        let (chain, ids) = pf.load_free_list(&meta)?;
        {
            let mut st = pf.state.lock();
            st.free = ids.into_iter().collect();
            st.chain = chain;
        }
        if file_len > committed_len {
            // Pages written after the last commit: garbage.
            pf.file.set_len(committed_len)?;
        }
        Ok(pf)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// The working epoch: pages allocated now belong to it.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// The epoch of the last commit (working epoch − 1).
    pub fn committed_epoch(&self) -> u64 {
        self.state.lock().committed.epoch
    }

    /// Why the spare meta slot (the one the last commit did not write) is unusable, if it is: found at open
    /// or by [`check`](Self::check), cleared by the next commit. Harmless while the committed slot is intact,
    /// but it is damage unless a commit was torn by a crash.
    pub fn spare_damage(&self) -> Option<Damage> {
        self.state.lock().spare_damage.clone()
    }

    /// The user root bytes of the last commit.
    pub fn user_root(&self) -> Vec<u8> {
        self.state.lock().committed.user_root.clone()
    }

    /// Byte offset of page `id` (saturating: a damaged reference may hold any id).
    fn offset(&self, id: PageId) -> u64 {
        id.saturating_mul(self.page_size as u64)
    }

    /// `Corruption` unless page `id` is one of the file's pages (≥ 2, < page count), as a reference read
    /// from another page must be.
    pub fn check_page_id(&self, id: PageId) -> Result<()> {
        let count = self.page_count();
        if id < 2 || id >= count {
            return Err(Error::corruption(
                &self.path,
                self.offset(id),
                format!("reference to page {id} outside the file's pages 2..{count}"),
            ));
        }
        Ok(())
    }

    /// Reads and verifies page `id` (≥ 2, < page count) into `buf` (`page_size` bytes).
    pub fn read_page(&self, id: PageId, buf: &mut [u8]) -> Result<()> {
        assert_eq!(buf.len(), self.page_size, "buffer is not one page");
        self.check_page_id(id)?;
        let off = self.offset(id);
        let n = self.read_aligned(buf, off)?;
        self.stats.record_read(FileKind::Pages, self.page_size);
        if n < self.page_size {
            return Err(Error::corruption(
                &self.path,
                off,
                format!(
                    "page {id}: truncated page ({n} of {} bytes)",
                    self.page_size
                ),
            ));
        }
        if !verify_checksum(buf, id) {
            return Err(Error::corruption(
                &self.path,
                off,
                format!("page {id}: checksum mismatch"),
            ));
        }
        Ok(())
    }

    /// Stamps `buf`'s checksum for page `id` and writes it. The caller guarantees that page `id` is not part
    /// of the last commit. Ids 0 and 1 (meta slots) and ids beyond the page count are refused.
    pub fn write_page(&self, id: PageId, buf: &mut [u8]) -> Result<()> {
        assert_eq!(buf.len(), self.page_size, "buffer is not one page");
        let count = self.page_count();
        if id < 2 || id >= count {
            return Err(Error::invalid(format!(
                "write of page {id} outside the allocatable pages 2..{count} of {}",
                self.path.display()
            )));
        }
        stamp_checksum(buf, id);
        self.write_raw(id, buf)
    }

    fn write_raw(&self, id: PageId, buf: &[u8]) -> Result<()> {
        self.reserve_ahead(self.offset(id) + buf.len() as u64);
        if self.direct && !is_aligned(buf) {
            let mut bounce = PageBuf::new(buf.len());
            bounce.copy_from_slice(buf);
            self.file.write_all_at(&bounce, self.offset(id))?;
        } else {
            self.file.write_all_at(buf, self.offset(id))?;
        }
        self.stats.record_write(FileKind::Pages, self.page_size);
        Ok(())
    }

    /// Reserves the blocks of the next steps when a write ends past those reserved (module doc). Two
    /// threads may both reserve the same range: harmless, the second finds its blocks there.
    fn reserve_ahead(&self, end: u64) {
        let reserved = self.reserved.load(Ordering::Relaxed);
        if end <= reserved {
            return;
        }
        let to = (end + (end / 8).max(RESERVE_STEP)).next_multiple_of(RESERVE_STEP);
        self.file.allocate_ahead(reserved, to - reserved);
        self.reserved.fetch_max(to, Ordering::Relaxed);
    }

    /// Reads a page at `off`, through an aligned bounce buffer when O_DIRECT needs one.
    fn read_aligned(&self, buf: &mut [u8], off: u64) -> Result<usize> {
        if self.direct && !is_aligned(buf) {
            let mut bounce = PageBuf::new(buf.len());
            let n = read_exact_at(&*self.file, &mut bounce, off)?;
            buf.copy_from_slice(&bounce);
            Ok(n)
        } else {
            read_exact_at(&*self.file, buf, off)
        }
    }

    /// Hands out a page id: the lowest reusable free page, else a new page at the end. No I/O.
    pub fn allocate(&self) -> PageId {
        let mut st = self.state.lock();
        if let Some(id) = st.free.pop_first() {
            return id;
        }
        let id = st.page_count;
        st.page_count += 1;
        self.page_count.store(st.page_count, Ordering::Release);
        id
    }

    /// Frees page `id`, whose image carries `page_epoch`. A page of the working epoch is reusable at once;
    /// an older one is still referenced by the last commit and becomes reusable after the next commit.
    pub fn free(&self, id: PageId, page_epoch: u64) {
        let mut st = self.state.lock();
        debug_assert!(
            id >= 2 && id < st.page_count,
            "free of page {id} outside 2..{}",
            st.page_count
        );
        debug_assert!(
            !st.free.contains(id) && !st.pending.contains(id) && !st.chain.contains(&id),
            "double free of page {id}"
        );
        debug_assert!(
            page_epoch <= st.epoch,
            "page {id} has a future epoch {page_epoch}"
        );
        if page_epoch == st.epoch {
            st.free.insert(id);
        } else {
            st.pending.insert(id);
        }
    }

    /// Makes the current state durable: every page written so far plus `user_root` (≤ 512 bytes). The caller
    /// must have written every dirty page first. On error the in-memory state is unchanged.
    pub fn commit(&self, user_root: &[u8]) -> Result<()> {
        let sealed = self.begin_commit(user_root)?;
        let epoch = sealed.epoch();
        self.finish_commit(sealed)
            .inspect_err(|_| self.abort_commit(epoch))
    }

    /// Undoes [`begin_commit`](Self::begin_commit) of `epoch` after its [`finish_commit`](Self::finish_commit)
    /// failed, when nothing was allocated or freed in between (the synchronous [`commit`](Self::commit)):
    /// the in-memory state is then what it was before the commit.
    fn abort_commit(&self, epoch: u64) {
        let mut st = self.state.lock();
        let Some(sealed) = st.sealed.take_if(|s| s.epoch == epoch) else {
            return;
        };
        st.pending.extend(sealed.released);
        st.free.extend(sealed.taken_from_free);
        st.page_count = sealed.page_count_before;
        st.epoch = epoch;
        self.page_count.store(st.page_count, Ordering::Release);
        self.epoch.store(st.epoch, Ordering::Release);
    }

    /// The first half of a commit, in memory only: seals the working epoch `E` as the one to commit with
    /// `user_root` (≤ 512 bytes) — its free list, its page count, the pages its free-list chain goes to —
    /// and starts epoch `E + 1`, so writes can go on while [`finish_commit`](Self::finish_commit) makes `E`
    /// durable. From now on pages of epoch `E` are copied on write like those of the last commit, and pages
    /// freed are reusable only after the commit of `E + 1`. One commit at a time.
    pub fn begin_commit(&self, user_root: &[u8]) -> Result<SealedCommit> {
        if user_root.len() > MAX_USER_ROOT {
            return Err(Error::invalid(format!(
                "user root of {} bytes exceeds the maximum of {MAX_USER_ROOT}",
                user_root.len()
            )));
        }
        let mut st = self.state.lock();
        if st.sealed.is_some() {
            return Err(Error::invalid(format!(
                "{}: a commit is already under way",
                self.path.display()
            )));
        }
        let cap = free_list_capacity(self.page_size);
        let total = st.free.len() + st.pending.len() + st.chain.len();

        // Choose the chain pages: from the reusable `free` set (largest ids first), else new pages. A page
        // taken from `free` stops being an entry, so fewer entries may need fewer pages.
        let mut from_free = 0usize;
        let mut extend = 0u64;
        loop {
            let entries = total - from_free;
            let needed = entries.div_ceil(cap);
            if from_free + extend as usize >= needed {
                break;
            }
            if from_free < st.free.len() {
                from_free += 1;
            } else {
                extend += 1;
            }
        }
        let taken_from_free: Vec<PageId> = st.free.iter().rev().take(from_free).collect();
        let mut chain_pages = taken_from_free.clone();
        chain_pages.extend(st.page_count..st.page_count + extend);
        let new_page_count = st.page_count + extend;
        for id in &chain_pages {
            st.free.remove(*id);
        }

        let mut entries: Vec<PageId> = st
            .free
            .iter()
            .chain(st.pending.iter())
            .chain(st.chain.iter().copied())
            .collect();
        entries.sort_unstable();
        debug_assert!(
            entries.windows(2).all(|w| w[0] < w[1]),
            "a page is in two free sets"
        );
        debug_assert!(chain_pages.len() * cap >= entries.len());
        let meta = Meta {
            epoch: st.epoch,
            page_count: new_page_count,
            fl_head: chain_pages.first().copied().unwrap_or(0),
            fl_len: entries.len() as u64,
            user_root: user_root.to_vec(),
        };
        // What the last commit references but this one does not (its pages freed since, and its free-list
        // chain, which stays in `chain` until then): reusable once this one is durable.
        let released: Vec<PageId> = st.pending.drain_to_vec();
        st.sealed = Some(Sealed {
            epoch: st.epoch,
            chain: chain_pages.clone(),
            released,
            taken_from_free,
            page_count_before: st.page_count,
        });
        st.page_count = new_page_count;
        st.epoch += 1;
        self.page_count.store(st.page_count, Ordering::Release);
        self.epoch.store(st.epoch, Ordering::Release);
        Ok(SealedCommit {
            meta,
            chain_pages,
            entries,
        })
    }

    /// The second half of a commit: writes the sealed epoch's free-list chain, extends the file to its page
    /// count if it is shorter, `fdatasync`s, writes its meta slot and `fdatasync`s again. The caller must have
    /// written every dirty page of the sealed epoch (or older) first. Runs beside writes of the next epoch.
    /// After an error the commit is not durable and no later one can start (the caller's handle is expected
    /// to give up: the file on disk still holds the previous commit).
    pub fn finish_commit(&self, sealed: SealedCommit) -> Result<()> {
        let SealedCommit {
            meta,
            chain_pages,
            entries,
        } = sealed;
        let cap = free_list_capacity(self.page_size);
        // Write the chain. (Its last page may hold no id: with one reusable page and nothing else, that page
        // itself becomes the chain.)
        let mut buf = PageBuf::new(self.page_size);
        for (i, &pid) in chain_pages.iter().enumerate() {
            let ids = &entries[(i * cap).min(entries.len())..((i + 1) * cap).min(entries.len())];
            buf.clear();
            set_page_type(&mut buf, PageType::FreeList);
            set_page_epoch(&mut buf, meta.epoch);
            put::<u64>(
                &mut buf,
                OFF_FL_NEXT,
                chain_pages.get(i + 1).copied().unwrap_or(0),
            );
            put::<u32>(&mut buf, OFF_FL_COUNT, ids.len() as u32);
            for (j, &id) in ids.iter().enumerate() {
                put::<u64>(&mut buf, OFF_FL_IDS + 8 * j, id);
            }
            stamp_checksum(&mut buf, pid);
            self.write_raw(pid, &buf)?;
        }
        // The file holds every page the commit counts, even pages allocated and freed without ever being
        // written: a file shorter than its commit's page count is then always damage (truncation).
        let needed = meta.page_count * self.page_size as u64;
        if self.file.len()? < needed {
            self.file.set_len(needed)?;
        }
        self.sync()?;

        let slot = meta.epoch % 2;
        meta.encode(&mut buf, self.page_size, slot);
        self.write_raw(slot, &buf)?;
        self.sync()?;

        let mut st = self.state.lock();
        let sealed = st
            .sealed
            .take()
            .filter(|s| s.epoch == meta.epoch)
            .ok_or_else(|| {
                Error::invalid(format!(
                    "{}: commit of epoch {} finished without being begun",
                    self.path.display(),
                    meta.epoch
                ))
            })?;
        st.free.extend(sealed.released);
        let old_chain = std::mem::replace(&mut st.chain, sealed.chain);
        st.free.extend(old_chain);
        st.committed = meta;
        st.spare_damage = None;
        Ok(())
    }

    /// The epoch of a commit begun and not yet finished, if any.
    pub fn sealed_epoch(&self) -> Option<u64> {
        self.state.lock().sealed.as_ref().map(|s| s.epoch)
    }

    /// Pages in use or accounted for: the high-water mark, including the meta slots.
    pub fn page_count(&self) -> u64 {
        self.page_count.load(Ordering::Acquire)
    }

    /// Every page that no structure references: reusable now, freed since the last commit, or holding the
    /// last commit's free list. Sorted.
    pub fn unreachable_pages(&self) -> Vec<PageId> {
        let st = self.state.lock();
        let mut v: Vec<PageId> = st
            .free
            .iter()
            .chain(st.pending.iter())
            .chain(st.chain.iter().copied())
            .chain(
                st.sealed
                    .iter()
                    .flat_map(|s| s.chain.iter().chain(&s.released).copied()),
            )
            .collect();
        v.sort_unstable();
        v
    }

    /// Number of pages reusable now.
    pub fn free_count(&self) -> usize {
        self.state.lock().free.len()
    }

    /// Number of pages freed since the last commit that become reusable after the next one.
    pub fn pending_count(&self) -> usize {
        self.state.lock().pending.len()
    }

    /// `fdatasync` of the file.
    pub fn sync(&self) -> Result<()> {
        self.file.sync_data()?;
        self.stats.record_sync(FileKind::Pages);
        Ok(())
    }

    /// Re-reads the last commit's meta slot and free-list chain from disk and verifies them against the
    /// in-memory state, and that the file is not shorter than the commit. Returns the number of ids in the
    /// persisted free list. The spare meta slot is re-read too: its state is then what
    /// [`spare_damage`](Self::spare_damage) reports (not an error here: only the caller can tell a torn
    /// commit from damage).
    pub fn check(&self) -> Result<u64> {
        let (committed, chain) = {
            let st = self.state.lock();
            (st.committed.clone(), st.chain.clone())
        };
        let file_len = self.file.len()?;
        let committed_len = committed.page_count * self.page_size as u64;
        if file_len < committed_len {
            return Err(Error::corruption(
                &self.path,
                file_len,
                format!(
                    "file is {file_len} bytes, but the last commit has {} pages of {} bytes: it was truncated",
                    committed.page_count, self.page_size
                ),
            ));
        }
        let slot = committed.epoch % 2;
        let mut buf = PageBuf::new(self.page_size);
        let on_disk = read_meta_slot(&*self.file, &mut buf, slot, self.page_size)?;
        self.stats.record_read(FileKind::Pages, self.page_size);
        match on_disk {
            SlotState::Valid(m) if m == committed => {}
            SlotState::Valid(_) => {
                return Err(Error::corruption(
                    &self.path,
                    self.offset(slot),
                    format!("meta slot {slot} differs from the last commit"),
                ));
            }
            SlotState::Incompatible(msg) | SlotState::Invalid(msg) => {
                return Err(Error::corruption(
                    &self.path,
                    self.offset(slot),
                    format!("meta slot {slot}: {msg}"),
                ));
            }
        }
        // The spare slot: an older commit (or, right after creation, the same empty one).
        let spare = 1 - slot;
        let spare_state = read_meta_slot(&*self.file, &mut buf, spare, self.page_size)?;
        self.stats.record_read(FileKind::Pages, self.page_size);
        let problem = match spare_state {
            SlotState::Valid(m) if m.epoch < committed.epoch || m == committed => None,
            SlotState::Valid(m) => Some(format!(
                "holds epoch {}, not older than the last commit's {}",
                m.epoch, committed.epoch
            )),
            SlotState::Incompatible(msg) | SlotState::Invalid(msg) => Some(msg),
        };
        self.state.lock().spare_damage = problem.map(|reason| {
            Damage::new(
                &self.path,
                self.offset(spare),
                format!(
                    "meta slot {spare} (the spare checkpoint; the last commit is epoch {} in slot {slot}) is \
                     unusable: {reason}",
                    committed.epoch
                ),
            )
        });
        let (disk_chain, ids) = self.load_free_list(&committed)?;
        if disk_chain != chain {
            return Err(Error::corruption(
                &self.path,
                self.offset(committed.fl_head),
                "free-list chain differs from the one in memory",
            ));
        }
        Ok(ids.len() as u64)
    }

    /// Reads and verifies the free-list chain of `meta`: returns (chain pages, ids stored).
    fn load_free_list(&self, meta: &Meta) -> Result<(Vec<PageId>, Vec<PageId>)> {
        let cap = free_list_capacity(self.page_size);
        let mut chain = Vec::new();
        let mut ids = Vec::new();
        let mut seen: HashSet<PageId> = HashSet::new();
        let mut buf = PageBuf::new(self.page_size);
        let mut next = meta.fl_head;
        let mut prev_off = 0u64;
        while next != 0 {
            let pid = next;
            let off = self.offset(pid);
            if pid < 2 || pid >= meta.page_count {
                return Err(Error::corruption(
                    &self.path,
                    prev_off,
                    format!(
                        "free-list link to page {pid} outside the file's pages 2..{}",
                        meta.page_count
                    ),
                ));
            }
            if !seen.insert(pid) {
                return Err(Error::corruption(
                    &self.path,
                    prev_off,
                    format!("free-list link to page {pid} forms a cycle or repeats a free page"),
                ));
            }
            let n = read_exact_at(&*self.file, &mut buf, off)?;
            self.stats.record_read(FileKind::Pages, self.page_size);
            if n < self.page_size {
                return Err(Error::corruption(
                    &self.path,
                    off,
                    format!("free-list page {pid}: truncated page"),
                ));
            }
            if !verify_checksum(&buf, pid) {
                return Err(Error::corruption(
                    &self.path,
                    off,
                    format!("page {pid}: checksum mismatch"),
                ));
            }
            if page_type(&buf) != PageType::FreeList as u8 {
                return Err(Error::corruption(
                    &self.path,
                    off,
                    format!(
                        "page {pid}: type {} where a free-list page was expected",
                        page_type(&buf)
                    ),
                ));
            }
            if page_epoch(&buf) > meta.epoch {
                return Err(Error::corruption(
                    &self.path,
                    off,
                    format!(
                        "free-list page {pid}: epoch {} newer than commit {}",
                        page_epoch(&buf),
                        meta.epoch
                    ),
                ));
            }
            let field = |at: usize| {
                get::<u64>(&buf, at).map_err(|e| {
                    Error::corruption(&self.path, off, format!("free-list page {pid}: {e}"))
                })
            };
            let count = get::<u32>(&buf, OFF_FL_COUNT).map_err(|e| {
                Error::corruption(&self.path, off, format!("free-list page {pid}: {e}"))
            })? as usize;
            if count > cap {
                return Err(Error::corruption(
                    &self.path,
                    off,
                    format!("free-list page {pid}: count {count} exceeds capacity {cap}"),
                ));
            }
            for j in 0..count {
                let id = field(OFF_FL_IDS + 8 * j)?;
                if id < 2 || id >= meta.page_count {
                    return Err(Error::corruption(
                        &self.path,
                        off,
                        format!(
                            "free-list page {pid}: id {id} outside the file's pages 2..{}",
                            meta.page_count
                        ),
                    ));
                }
                if !seen.insert(id) {
                    return Err(Error::corruption(
                        &self.path,
                        off,
                        format!("free-list page {pid}: page {id} listed twice"),
                    ));
                }
                ids.push(id);
            }
            chain.push(pid);
            prev_off = off;
            next = field(OFF_FL_NEXT)?;
        }
        if ids.len() as u64 != meta.fl_len {
            return Err(Error::corruption(
                &self.path,
                self.offset(meta.fl_head),
                format!(
                    "free list holds {} ids, the meta slot says {}",
                    ids.len(),
                    meta.fl_len
                ),
            ));
        }
        Ok((chain, ids))
    }
}

/// Reads and decodes meta slot `slot` into `buf` (a short read is an invalid slot).
fn read_meta_slot(
    file: &dyn VfsFile,
    buf: &mut [u8],
    slot: PageId,
    ps: usize,
) -> Result<SlotState> {
    let n = read_exact_at(file, buf, slot * ps as u64)?;
    Ok(if n < ps {
        SlotState::Invalid(format!("truncated ({n} of {ps} bytes)"))
    } else {
        decode_meta(buf, slot, ps)
    })
}

/// When no slot verifies with the requested page size: a slot that verifies with the page size stored in
/// slot 0 means the file was created with another page size. Returns a message naming both sizes.
fn probe_other_page_size(file: &dyn VfsFile, requested: usize) -> Option<String> {
    let mut head = PageBuf::new(page::MIN_PAGE_SIZE);
    let n = read_exact_at(file, &mut head, 0).ok()?;
    if head.get(OFF_MAGIC..OFF_MAGIC + 8) != Some(&META_MAGIC[..]) || n < OFF_PAGE_SIZE + 4 {
        return None;
    }
    let stored = get::<u32>(&head, OFF_PAGE_SIZE).ok()? as usize;
    if stored == requested || page::validate_page_size(stored).is_err() {
        return None;
    }
    let mut buf = PageBuf::new(stored);
    for slot in 0..2u64 {
        if read_exact_at(file, &mut buf, slot * stored as u64).ok()? == stored
            && let SlotState::Valid(_) = decode_meta(&buf, slot, stored)
        {
            return Some(format!(
                "page file was created with page size {stored}, opened with page size {requested}"
            ));
        }
    }
    None
}

/// True if `buf` meets O_DIRECT's alignment.
fn is_aligned(buf: &[u8]) -> bool {
    (buf.as_ptr() as usize).is_multiple_of(super::vfs::DIRECT_IO_ALIGN)
}

mod id_set;
#[cfg(test)]
mod tests;
