//! # Persistent-memory (PM) layer
//!
//! The byte-addressable substrate that the PM hash index family (issue 17: ElimDA, with Dash- and CCEH-style
//! baselines) runs on. It knows nothing about indexes. Every PM access of an index goes through one trait,
//! [`Pm`], so the same index code runs on three backends:
//!
//! * [`MmapRegion`] ([`mmap`]): a shared mapping of a file — on tmpfs for DRAM speed (throughput runs), on a
//!   regular file for durability through [`MmapRegion::sync`] (`msync`), or anonymous. Persist primitives are
//!   the real instructions ([`arch`]): `clwb`, else `clflushopt`, else `clflush`; `sfence`; `movnti` for
//!   non-temporal full-XPLine writes.
//! * [`CountingPm`] ([`counting`]): wraps any `Pm` and models the traffic the accesses would cause on Intel
//!   Optane — 64 B lines between CPU and memory controller, 256 B XPLines through a per-DIMM XPBuffer
//!   ([`xpbuffer`]) at the media — into [`Traffic`] counters ([`traffic`]) that can be snapshotted and
//!   subtracted. Optionally it also charges real time ([`pacing`]): a busy-wait per XPBuffer read miss and
//!   a token bucket over media write bytes, so that a run is bound by emulated PM latency and bandwidth.
//! * [`ShadowPm`] ([`shadow`]): the crash model for tests. A working image and a durable image; lines move to
//!   the durable image only through flush + fence (ADR), or the working image is the durable one (eADR); a
//!   crash image adds a random subset of not-yet-durable lines, optionally torn at 8 B granularity.
//!
//! ## Vocabulary
//! * **Offset**: a `u64` byte position inside a region. Structures in PM store offsets, never pointers, so an
//!   image means the same thing wherever it is mapped.
//! * **Line**: 64 B ([`CACHE_LINE`]), the unit of CPU caches and of `flush`. **XPLine**: 256 B ([`XPLINE`]),
//!   the unit of the Optane media; [`Pm::write_nt`] writes whole XPLines.
//! * **Persist point**: one [`Pm::fence`]. Under [`PersistMode::Adr`] a store is durable once its line was
//!   flushed and a later fence completed; under [`PersistMode::Eadr`] once it is globally visible (the CPU
//!   caches are in the persistence domain), so only ordering fences remain. [`Pm::persist`] does the right
//!   thing for the region's mode.
//!
//! ## Invariants (every backend)
//! * Every access is bounds-checked: an access outside `[0, len)` or a misaligned atomic/non-temporal access
//!   returns `Error::InvalidArgument` and changes nothing. No offset read off PM can cause a panic or touch
//!   memory outside the region.
//! * An 8-byte-aligned 8-byte store ([`Pm::store_u64_atomic`], [`Pm::compare_exchange_u64`]) is the unit of
//!   failure atomicity: it is never torn by a crash. Nothing larger is atomic; in particular a `write` of
//!   several words may be seen (by another thread or after a crash) partly applied, word by word.
//! * Multi-byte values are little-endian in PM ([`Pm::read_u64`], [`Pm::write_u64`] and the atomics agree).
//! * Concurrency: all methods take `&self` and every backend is `Send + Sync`; concurrent accesses to
//!   overlapping bytes are never undefined behaviour (the mmap backend accesses memory only through aligned
//!   8-byte atomics), but only the atomic methods give a meaningful result when they race — the index must
//!   order conflicting plain writes with its own locks or commit words.
//!
//! ## Cost model
//! On [`MmapRegion`]: `read`/`write` copy word by word with relaxed atomics (plain `mov`s on x86-64; a write
//! that covers a word only partly costs one `lock cmpxchg`); `flush` costs one cache-line write-back
//! instruction per 64 B line of the range; `fence` one `sfence`; `persist` both in ADR and only the fence in
//! eADR; `write_nt` one `movnti` per 8 B, no read of the destination. On tmpfs these cost DRAM cycles but add
//! no durability; on a regular file only `sync` (`msync`) makes data durable. [`CountingPm`] adds one mutex
//! acquisition and a model update per call; [`ShadowPm`] keeps everything behind one mutex (tests only).

pub mod arch;
pub mod counting;
pub mod mmap;
pub mod pacing;
pub mod shadow;
pub mod traffic;
pub mod traits;
pub mod window;
mod words;
pub mod xpbuffer;

#[cfg(test)]
mod counting_tests;
#[cfg(test)]
mod mmap_tests;
#[cfg(test)]
mod shadow_tests;

pub use counting::CountingPm;
pub use mmap::MmapRegion;
pub use pacing::WriteBucket;
pub use shadow::{CrashPlan, ShadowPm};
pub use traffic::{Traffic, TrafficConfig};
pub use traits::Pm;
pub use window::PmWindow;
pub use xpbuffer::XpBuffer;

use crate::error::{Error, Result};

/// Bytes in a CPU cache line: the unit of `flush` and of CPU-side traffic.
pub const CACHE_LINE: u64 = 64;
/// Bytes in an Optane XPLine: the unit of media traffic and of [`Pm::write_nt`].
pub const XPLINE: u64 = 256;
/// Bytes in the failure-atomic commit word.
pub const WORD: u64 = 8;

/// Where the persistence domain starts, which decides what [`Pm::persist`] must do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum PersistMode {
    /// Asynchronous DRAM refresh: only the memory controller is persistent; a store must be written back from
    /// the CPU cache (`flush`) and ordered by a `fence` before it is durable.
    Adr,
    /// Extended ADR: the CPU caches are persistent too; a globally visible store is durable, and `persist`
    /// is an ordering fence only.
    Eadr,
}

impl PersistMode {
    /// A short lowercase name (`"adr"`, `"eadr"`) for reports.
    pub fn name(self) -> &'static str {
        match self {
            PersistMode::Adr => "adr",
            PersistMode::Eadr => "eadr",
        }
    }
}

/// `Ok` when `[off, off + n)` lies inside a region of `len` bytes. Inlined: every PM access checks, so the
/// check is a compare and a branch, and only the error is built out of line.
#[inline]
pub(crate) fn check_range(len: u64, off: u64, n: u64) -> Result<()> {
    match off.checked_add(n) {
        Some(end) if end <= len => Ok(()),
        _ => Err(out_of_range(len, off, n)),
    }
}

#[cold]
#[inline(never)]
fn out_of_range(len: u64, off: u64, n: u64) -> Error {
    Error::invalid(format!(
        "PM access of {n} bytes at offset {off} is outside the region of {len} bytes"
    ))
}

/// `Ok` when the 8-byte word at `off` is 8-byte aligned and inside the region.
pub(crate) fn check_word(len: u64, off: u64) -> Result<()> {
    if !off.is_multiple_of(WORD) {
        return Err(Error::invalid(format!(
            "PM atomic access at offset {off} is not 8-byte aligned"
        )));
    }
    check_range(len, off, WORD)
}

/// `Ok` when `[off, off + n)` is a run of whole, aligned XPLines inside the region.
pub(crate) fn check_xplines(len: u64, off: u64, n: u64) -> Result<()> {
    if !off.is_multiple_of(XPLINE) || !n.is_multiple_of(XPLINE) {
        return Err(Error::invalid(format!(
            "PM non-temporal write of {n} bytes at offset {off} is not whole aligned 256-byte XPLines"
        )));
    }
    check_range(len, off, n)
}

/// The 64 B lines `[first, end)` (as line numbers) that cover `[off, off + n)`; empty when `n == 0`.
pub(crate) fn lines_covering(off: u64, n: u64) -> std::ops::Range<u64> {
    if n == 0 {
        return 0..0;
    }
    let first = off / CACHE_LINE;
    let last = (off + n - 1) / CACHE_LINE;
    first..last + 1
}

/// A byte count as `usize`, or `InvalidArgument` when it does not fit this platform's address space.
pub(crate) fn to_usize(n: u64) -> Result<usize> {
    usize::try_from(n).map_err(|_| Error::invalid(format!("{n} bytes do not fit in memory")))
}
