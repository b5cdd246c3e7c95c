//! # Storage layer
//!
//! Owns every byte that reaches a file. Knows nothing about indexes.
//!
//! * [`vfs`]: the `Vfs` / `VfsFile` traits and three backends: [`StdVfs`] (real files, optional O_DIRECT),
//!   [`MemVfs`] (in memory, with a `crash()` that throws away every write not yet synced) and [`FaultVfs`]
//!   (wraps a `MemVfs`; every operation fails after N operations, plus the crash of its `MemVfs`, and it can
//!   refuse every change like a full disk or a read-only mount). [`OverlayVfs`] is a copy-on-write view of
//!   any of them that keeps every change in memory (what read-only database handles open their files
//!   through). Files open read-write or `read_only`; locks are exclusive (`lock`) or shared (`lock_shared`).
//! * [`page_file`]: fixed-size pages (a power of two from 4 KiB to 4 MiB, fixed at creation; the B+-tree
//!   takes pages up to 64 KiB), each with an xxh3 checksum seeded by its page id ([`page`] documents the
//!   header). Pages are allocated from a free list or by extending the file. Durability is by **copy-on-write
//!   checkpoints**: two meta slots (pages 0 and 1) alternate; a commit writes the free list to fresh pages,
//!   `fdatasync`s, writes the other meta slot, `fdatasync`s. Every page image carries the epoch it was
//!   allocated in; pages of the last committed epoch are never written again until a newer commit no longer
//!   references them, so a crash at any moment leaves the last commit intact.
//! * [`buffer_pool`]: a CLOCK cache of page frames within a memory budget in bytes; RAII pin guards
//!   (`PageReadGuard`, `PageWriteGuard`), dirty tracking, write-back on eviction. Hits take no lock (a
//!   lock-free page table and one compare-and-swap on the frame); misses do their I/O outside the
//!   replacement mutex, each holding only its own frame, so they overlap. A freshly allocated page is
//!   zeroed in memory and never read from disk. `write_cow` gives a writable page, relocating it first when it
//!   belongs to the last commit.
//! * [`log`]: an append-only log of checksummed frames in a preallocated file with a two-slot header; recovery
//!   tells a torn tail (never-durable last records, zeros from a sector boundary) from damage and truncation
//!   (`Error::Corruption`), and never writes.
//! * [`immutable_file`]: files written once front to back (page 0 last), synced, then only read, every page
//!   sealed with an xxh3 checksum seeded by (file id, page number) — the dynamized index's shard files — and
//!   [`extent_cache`], a small LRU cache of runs of their pages with read-ahead for sequential passes.
//! * [`io_stats`]: read/write/byte/fsync counters per file kind, snapshotted and subtracted by anyone.
//! * [`pm`]: persistent-memory regions behind one `Pm` trait (offsets, 8 B atomic commit stores, flush /
//!   fence / persist in ADR or eADR mode, non-temporal XPLine writes): an mmap region, an Optane traffic
//!   model (`CountingPm`) and a crash model (`ShadowPm`); its module doc states invariants and costs.
//!
//! ## Invariants
//! * A page's on-disk bytes always verify against its checksum unless the media damaged them; every read
//!   verifies and reports damage as `Error::Corruption { file, offset = page id × page size }`.
//! * No page referenced by the last committed meta slot is overwritten before a newer meta slot is durable.
//! * A page id is never handed out twice without being freed in between.
//!
//! ## Media assumptions
//! `fdatasync` makes earlier writes durable; a torn page write is detected by its checksum; the two meta slots
//! are in different sectors, so a torn write damages at most one of them.
//!
//! ## Cost model
//! A buffer-pool hit costs a page-table lookup and a compare-and-swap on its frame; a miss costs one page read, plus one page write when
//! the CLOCK victim is dirty. A commit costs one write per dirty page, one per free-list page, one meta write
//! and two `fdatasync`s.

pub mod buffer_pool;
pub mod codec;
pub mod extent_cache;
pub mod fault_vfs;
pub mod hooked_vfs;
pub mod immutable_file;
pub mod io_stats;
pub mod log;
pub mod mem_vfs;
pub mod overlay_vfs;
pub mod page;
pub mod page_accounting;
pub mod page_file;
mod page_table;
pub mod pm;
pub mod sealed;
pub mod std_vfs;
pub mod vfs;

pub use buffer_pool::{BufferPool, PageReadGuard, PageValidator, PageWriteGuard};
pub use fault_vfs::FaultVfs;
pub use hooked_vfs::{HookedVfs, VfsHook, VfsOp};
pub use io_stats::{FileKind, IoCounts, IoSnapshot, IoStats};
pub use log::{
    LogHeader, LogRecovery, LogWriter, RecoverMode, Salvaged, read_log_header, recover_log,
};
pub use mem_vfs::MemVfs;
pub use overlay_vfs::OverlayVfs;
pub use page::{PageBuf, PageId, PageType};
pub use page_accounting::check_page_accounting;
pub use page_file::{PageFile, PageFileOptions};
pub use std_vfs::StdVfs;
pub use vfs::{FileMapping, OpenOptions, Vfs, VfsFile, VfsLock};
