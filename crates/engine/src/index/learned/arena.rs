//! Huge-page arena for the groups' key arrays and records.
//!
//! A lookup in a large index touches a group's key array and records at a random place: with 4 KiB pages
//! each of those misses adds a TLB miss and a page walk (at 10M keys the arrays span ~560 MB, whose page
//! tables alone are ~1 MB: the walk itself misses the cache). The profile of the 10M read-only phase
//! put about half of a lookup's samples there. With 2 MiB pages the same data needs ~280 TLB entries,
//! which the second-level TLB holds whole.
//!
//! An [`Arena`] hands out [`ArenaSlice`]s (owned arrays, like `Box<[T]>`) from *chunks*: anonymous
//! mappings whose 2 MiB-aligned interior of [`CHUNK_BYTES`] (or, for an array larger than a quarter of
//! that, a dedicated multiple of 2 MiB) is advised `MADV_HUGEPAGE` before it is touched, and bump-allocated
//! in 64-byte-aligned steps. Each slice holds a reference count on its chunk; a chunk is unmapped (its
//! memory returned to the system) when the arena has moved on from it and its last slice is dropped — for
//! a group, when the maintainer frees it after the epoch retired it (`retire.rs`). A compaction's new
//! groups take fresh space, so old chunks empty as their groups are replaced.
//!
//! Invariants: a slice's elements lie inside its chunk's mapping, which outlives the slice (it holds the
//! `Arc`); slices never overlap (the bump offset only grows, under the arena's lock).
//!
//! Cost: one lock and a bump per slice (a mapping per [`CHUNK_BYTES`] of data); memory: at most one
//! chunk's tail per chunk unused, and a chunk stays mapped while any of its slices lives.

use parking_lot::Mutex;
use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A huge page.
pub const HUGE_PAGE: usize = 2 << 20;
/// Bytes of a shared chunk (one huge page: a chunk kept alive by one long-lived group wastes at most this).
pub const CHUNK_BYTES: usize = HUGE_PAGE;
/// Alignment of every slice (a cache line).
const SLICE_ALIGN: usize = 64;

/// One mapping: `bytes` bytes from `base`, 2 MiB-aligned.
struct Chunk {
    /// Keeps the mapping alive; never accessed through (slices write through raw pointers).
    _map: memmap2::MmapMut,
    base: NonNull<u8>,
    bytes: usize,
    mapped: Arc<AtomicUsize>,
}

// SAFETY: a chunk is a mapping and its address; the bytes in it belong to the slices, which carry their
// own `Send`/`Sync` bounds.
unsafe impl Send for Chunk {}
// SAFETY: as above.
unsafe impl Sync for Chunk {}

impl Chunk {
    /// Maps a chunk of `bytes` (a multiple of [`HUGE_PAGE`]) and advises huge pages for it.
    fn map(bytes: usize, mapped: &Arc<AtomicUsize>) -> Chunk {
        // Map one huge page more, so the mapping holds a 2 MiB-aligned run of `bytes`.
        let mut map = match memmap2::MmapOptions::new()
            .len(bytes + HUGE_PAGE)
            .map_anon()
        {
            Ok(m) => m,
            // Out of address space: fail as a `Vec` does.
            Err(_) => std::alloc::handle_alloc_error(
                Layout::from_size_align(bytes, HUGE_PAGE).unwrap_or(Layout::new::<u64>()),
            ),
        };
        let start = map.as_mut_ptr();
        let skip = start.align_offset(HUGE_PAGE);
        let base = NonNull::new(start.wrapping_add(skip)).unwrap_or(NonNull::dangling());
        crate::algo::advise_huge_pages(base.as_ptr() as usize, bytes);
        mapped.fetch_add(bytes, Ordering::Relaxed);
        Chunk {
            _map: map,
            base,
            bytes,
            mapped: mapped.clone(),
        }
    }
}

impl Drop for Chunk {
    fn drop(&mut self) {
        self.mapped.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// The arena (see the module doc).
#[derive(Default)]
pub struct Arena {
    /// The chunk being filled and the bytes of it handed out.
    current: Mutex<Option<(Arc<Chunk>, usize)>>,
    /// Bytes of all chunks still mapped (the arena's and those its live slices keep).
    mapped: Arc<AtomicUsize>,
}

impl Arena {
    /// An arena with no chunk yet.
    pub fn new() -> Arena {
        Arena::default()
    }

    /// Bytes of the chunks still mapped: the current one and every one a live slice holds.
    pub fn mapped_bytes(&self) -> usize {
        self.mapped.load(Ordering::Relaxed)
    }

    /// The counter behind [`mapped_bytes`](Self::mapped_bytes), which outlives the arena (tests check that
    /// dropping an index returns every chunk).
    #[cfg(test)]
    pub(super) fn mapped_counter(&self) -> Arc<AtomicUsize> {
        self.mapped.clone()
    }

    /// Moves `items` into the arena.
    pub fn slice<T>(&self, mut items: Vec<T>) -> ArenaSlice<T> {
        let len = items.len();
        let bytes = len * std::mem::size_of::<T>();
        if bytes == 0 {
            // Nothing to place (or zero-sized elements): a dangling pointer is a valid empty slice.
            return ArenaSlice {
                ptr: NonNull::dangling(),
                len,
                _chunk: None,
            };
        }
        debug_assert!(std::mem::align_of::<T>() <= SLICE_ALIGN);
        let (chunk, at) = self.reserve(bytes);
        let dst = chunk.base.as_ptr().wrapping_add(at).cast::<T>();
        // SAFETY: `reserve` gave us `bytes` bytes at `dst`, inside the chunk's mapping (writable, not
        // shared with any other slice), aligned to 64 ≥ align_of::<T>(). The items move: the vector's
        // length is set to 0 before it is dropped, so it frees its buffer without dropping them.
        unsafe {
            std::ptr::copy_nonoverlapping(items.as_ptr(), dst, len);
            items.set_len(0);
        }
        ArenaSlice {
            ptr: NonNull::new(dst).unwrap_or(NonNull::dangling()),
            len,
            _chunk: Some(chunk),
        }
    }

    /// `bytes` bytes of some chunk: the chunk and the offset in it.
    fn reserve(&self, bytes: usize) -> (Arc<Chunk>, usize) {
        if bytes > CHUNK_BYTES / 4 {
            // A large array gets its own chunk, leaving the current one to the small ones.
            let own = bytes.next_multiple_of(HUGE_PAGE);
            return (Arc::new(Chunk::map(own, &self.mapped)), 0);
        }
        let mut current = self.current.lock();
        if let Some((chunk, used)) = current.as_mut() {
            let at = used.next_multiple_of(SLICE_ALIGN);
            if at + bytes <= chunk.bytes {
                *used = at + bytes;
                return (chunk.clone(), at);
            }
        }
        let chunk = Arc::new(Chunk::map(CHUNK_BYTES, &self.mapped));
        *current = Some((chunk.clone(), bytes));
        (chunk, 0)
    }
}

/// An owned array in an arena chunk (see the module doc); dereferences to `[T]`.
pub struct ArenaSlice<T> {
    ptr: NonNull<T>,
    len: usize,
    _chunk: Option<Arc<Chunk>>,
}

// SAFETY: the slice owns its elements as a `Box<[T]>` would; the chunk is `Send + Sync`.
unsafe impl<T: Send> Send for ArenaSlice<T> {}
// SAFETY: as above: shared access hands out `&T` only.
unsafe impl<T: Sync> Sync for ArenaSlice<T> {}

impl<T> std::ops::Deref for ArenaSlice<T> {
    type Target = [T];
    #[inline]
    fn deref(&self) -> &[T] {
        // SAFETY: `ptr` holds `len` initialized elements (moved in by `Arena::slice`, or none), kept
        // mapped by `_chunk` while `self` lives.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T> Drop for ArenaSlice<T> {
    fn drop(&mut self) {
        // SAFETY: the elements are initialized and owned by this slice alone; they are dropped once, here,
        // before `_chunk` (a field, dropped after this body) may unmap their memory.
        unsafe {
            std::ptr::drop_in_place(std::ptr::slice_from_raw_parts_mut(
                self.ptr.as_ptr(),
                self.len,
            ));
        }
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for ArenaSlice<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// Whether the mapping holding `addr` is eligible for transparent huge pages and how many bytes of it are
/// backed by them (`/proc/self/smaps`; `None` where it cannot be read).
pub fn huge_page_state(addr: usize) -> Option<(bool, usize)> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let mut inside = false;
    let mut eligible = None;
    let mut huge = None;
    for line in smaps.lines() {
        let mut parts = line.split_whitespace();
        let first = parts.next().unwrap_or("");
        if let Some((lo, hi)) = first.split_once('-')
            && let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
        {
            if inside {
                break;
            }
            inside = (lo..hi).contains(&addr);
            continue;
        }
        if !inside {
            continue;
        }
        let value = parts.next().and_then(|v| v.parse::<usize>().ok());
        match first {
            "AnonHugePages:" => huge = value.map(|kb| kb * 1024),
            "THPeligible:" => eligible = value.map(|v| v == 1),
            _ => {}
        }
    }
    Some((eligible?, huge?))
}

/// Bytes of anonymous memory of this process backed by transparent huge pages
/// (`/proc/self/smaps_rollup`; `None` where it cannot be read).
pub fn process_huge_bytes() -> Option<usize> {
    let rollup = std::fs::read_to_string("/proc/self/smaps_rollup").ok()?;
    rollup.lines().find_map(|l| {
        let rest = l.strip_prefix("AnonHugePages:")?;
        rest.split_whitespace()
            .next()?
            .parse::<usize>()
            .ok()
            .map(|kb| kb * 1024)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thp_available() -> bool {
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .is_ok_and(|s| !s.contains("[never]"))
    }

    #[test]
    fn slices_hold_their_items_and_chunks_return_when_the_last_slice_goes() {
        let arena = Arena::new();
        let a = arena.slice((0..1000u64).collect());
        let b = arena.slice(vec![String::from("x"); 300]);
        let big = arena.slice(vec![7u64; CHUNK_BYTES / 8 + 1]);
        assert_eq!(a.iter().sum::<u64>(), 999 * 1000 / 2);
        assert!(b.iter().all(|s| s == "x"));
        assert!(big.iter().all(|&v| v == 7));
        assert_eq!(
            a.as_ptr() as usize % HUGE_PAGE,
            0,
            "a new chunk starts on a huge page"
        );
        assert_eq!(b.as_ptr() as usize % SLICE_ALIGN, 0);
        // One shared chunk and the big array's own (two huge pages).
        assert_eq!(arena.mapped_bytes(), CHUNK_BYTES + 2 * HUGE_PAGE);
        drop(big);
        assert_eq!(arena.mapped_bytes(), CHUNK_BYTES);
        // Fill the shared chunk: the arena moves on to a new one; the old one stays while `a` and `b` live.
        let fill: Vec<_> = (0..16)
            .map(|_| arena.slice(vec![1u8; CHUNK_BYTES / 8]))
            .collect();
        assert_eq!(arena.mapped_bytes(), 3 * CHUNK_BYTES);
        drop((a, b));
        drop(fill);
        // Only the chunk being filled remains; dropping the arena returns it too.
        assert_eq!(arena.mapped_bytes(), CHUNK_BYTES);
        let mapped = arena.mapped.clone();
        drop(arena);
        assert_eq!(mapped.load(Ordering::Relaxed), 0);
        let empty = Arena::new().slice(Vec::<u64>::new());
        assert!(empty.is_empty());
    }

    #[test]
    fn chunks_are_advised_huge_pages() {
        let arena = Arena::new();
        let s = arena.slice(vec![1u64; CHUNK_BYTES / 8]);
        let Some((eligible, huge)) = huge_page_state(s.as_ptr() as usize) else {
            return; // no /proc: nothing to check
        };
        if thp_available() {
            assert!(
                eligible,
                "the chunk's mapping is not eligible for huge pages"
            );
        }
        // Backing by a huge page depends on free memory; report it rather than assert it.
        eprintln!("chunk eligible {eligible}, {huge} bytes on huge pages");
        assert!(huge <= CHUNK_BYTES);
    }
}
