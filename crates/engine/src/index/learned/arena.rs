//! Huge-page arena for the groups' key arrays and records.
//!
//! A lookup in a large index touches a group's key array and records at a random place: with 4 KiB pages
//! each of those misses adds a TLB miss and a page walk (at 10M keys the arrays span ~560 MB, whose page
//! tables alone are ~1 MB: the walk itself misses the cache). The profile of the 10M read-only phase
//! put about half of a lookup's samples there. With 2 MiB pages the same data needs ~280 TLB entries,
//! which the second-level TLB holds whole.
//!
//! An [`Arena`] hands out [`ArenaSlice`]s (owned arrays, like `Box<[T]>`) from *chunks*: anonymous
//! mappings whose 2 MiB-aligned interior of [`CHUNK_BYTES`] is advised `MADV_HUGEPAGE` before it is
//! touched. A shared chunk is handed out in runs of [`UNIT`]s (16 KiB), first fit over the chunks with a
//! bit map per chunk, and a slice's run is given back when it is dropped — for a group, when the
//! maintainer frees it after the epoch retired it (`retire.rs`) — so the holes that replaced groups leave
//! are filled by the next ones (a bump allocator left them pinned by the live groups around them: a
//! sorted load, whose tail group is rebuilt again and again, mapped twice its data). A slice over half a
//! chunk gets a chunk of its own, a multiple of 2 MiB. [`Arena::trim`] unmaps the shared chunks no slice
//! uses but one; a chunk a slice still holds (its `Arc`) stays mapped until that slice goes.
//!
//! Invariants: a slice's elements lie inside its chunk's mapping, which outlives the slice (it holds the
//! `Arc`); the runs of live slices never overlap (a run's bits are set, under the chunk's lock, from its
//! allocation until its slice is dropped).
//!
//! Cost: a lock and a first-fit scan of the chunks' bit maps per slice (a few hundred words at 10M keys;
//! slices are made by loads and compactions only), a lock per slice dropped; memory: under one unit per
//! slice unused, plus the holes first fit leaves.

use parking_lot::Mutex;
use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A huge page.
pub const HUGE_PAGE: usize = 2 << 20;
/// Bytes of a shared chunk (one huge page: a chunk kept alive by one long-lived group wastes at most this).
pub const CHUNK_BYTES: usize = HUGE_PAGE;
/// The unit a shared chunk is handed out in (a group's 4,096 keys are 2 units, its records 12).
pub const UNIT: usize = 16 << 10;
/// Units of a shared chunk (one bit each in its map).
const UNITS: usize = CHUNK_BYTES / UNIT;
/// Largest slice placed in a shared chunk; a larger one gets a chunk of its own.
const SHARED_MAX: usize = CHUNK_BYTES / 2;

/// One mapping: `bytes` bytes from `base`, 2 MiB-aligned, and which of its units are handed out.
struct Chunk {
    /// Keeps the mapping alive; never accessed through (slices write through raw pointers).
    _map: memmap2::MmapMut,
    base: NonNull<u8>,
    bytes: usize,
    /// Bit `u` set: unit `u` belongs to a live slice (shared chunks only).
    used: Mutex<u128>,
    mapped: Arc<AtomicUsize>,
}

// SAFETY: a chunk is a mapping, its address and a locked bit map; the bytes in it belong to the slices,
// which carry their own `Send`/`Sync` bounds.
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
            used: Mutex::new(0),
            mapped: mapped.clone(),
        }
    }

    /// Takes the first run of `units` free units (first fit); its first unit.
    fn take(&self, units: usize) -> Option<usize> {
        let mut used = self.used.lock();
        let mask = run_mask(units);
        let first = (0..=UNITS.checked_sub(units)?).find(|&u| (*used >> u) & mask == 0)?;
        *used |= mask << first;
        Some(first)
    }

    /// Gives back the run of `units` units from `first`.
    fn give_back(&self, first: usize, units: usize) {
        let mut used = self.used.lock();
        *used &= !(run_mask(units) << first);
    }

    fn is_empty(&self) -> bool {
        *self.used.lock() == 0
    }
}

/// `units` low bits set (`units` ≤ 128).
fn run_mask(units: usize) -> u128 {
    if units >= UNITS {
        u128::MAX
    } else {
        (1u128 << units) - 1
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
    /// The shared chunks, oldest first (each also held by its live slices).
    chunks: Mutex<Vec<Arc<Chunk>>>,
    /// Bytes of all chunks still mapped (the arena's and those its live slices keep).
    mapped: Arc<AtomicUsize>,
}

impl Arena {
    /// An arena with no chunk yet.
    pub fn new() -> Arena {
        Arena::default()
    }

    /// Bytes of the chunks still mapped: the shared ones and every one a live slice holds.
    pub fn mapped_bytes(&self) -> usize {
        self.mapped.load(Ordering::Relaxed)
    }

    /// The counter behind [`mapped_bytes`](Self::mapped_bytes), which outlives the arena (tests check that
    /// dropping an index returns every chunk).
    #[cfg(test)]
    pub(super) fn mapped_counter(&self) -> Arc<AtomicUsize> {
        self.mapped.clone()
    }

    /// Unmaps the shared chunks no live slice uses, but one (kept for the next slices).
    pub fn trim(&self) {
        let mut chunks = self.chunks.lock();
        let mut spare = false;
        chunks.retain(|c| {
            if !c.is_empty() {
                return true;
            }
            !std::mem::replace(&mut spare, true)
        });
    }

    /// Moves `items` into the arena.
    pub fn slice<T>(&self, items: Vec<T>) -> ArenaSlice<T> {
        let len = items.len();
        let bytes = len * std::mem::size_of::<T>();
        if bytes == 0 {
            // Nothing to place (or zero-sized elements): a dangling pointer is a valid empty slice.
            return ArenaSlice {
                ptr: NonNull::dangling(),
                len,
                place: None,
            };
        }
        Self::place(items, self.reserve(bytes))
    }

    /// Moves `items` to `place` (reserved for them: at least their bytes).
    fn place<T>(mut items: Vec<T>, place: Place) -> ArenaSlice<T> {
        let len = items.len();
        debug_assert!(std::mem::align_of::<T>() <= UNIT);
        debug_assert!(
            len * std::mem::size_of::<T>() <= place.units.max(1) * UNIT || place.first == 0
        );
        let dst = place
            .chunk
            .base
            .as_ptr()
            .wrapping_add(place.first * UNIT)
            .cast::<T>();
        // SAFETY: `place` holds the items' bytes at `dst` (reserved for them by the caller), inside the chunk's mapping (writable, handed
        // to no other live slice), aligned to a unit ≥ align_of::<T>(). The items move: the vector's
        // length is set to 0 before it is dropped, so it frees its buffer without dropping them.
        unsafe {
            std::ptr::copy_nonoverlapping(items.as_ptr(), dst, len);
            items.set_len(0);
        }
        ArenaSlice {
            ptr: NonNull::new(dst).unwrap_or(NonNull::dangling()),
            len,
            place: Some(place),
        }
    }

    /// Moves `a` and `b` into the arena side by side (one run of units when they share a chunk: a
    /// group's keys and records, so that freeing a group leaves one hole its successor fits).
    pub fn pair<A, B>(&self, a: Vec<A>, b: Vec<B>) -> (ArenaSlice<A>, ArenaSlice<B>) {
        let (bytes_a, bytes_b) = (
            a.len() * std::mem::size_of::<A>(),
            b.len() * std::mem::size_of::<B>(),
        );
        if bytes_a == 0 || bytes_b == 0 || bytes_a + bytes_b > SHARED_MAX {
            return (self.slice(a), self.slice(b));
        }
        let units_a = bytes_a.div_ceil(UNIT);
        let both = self.reserve((units_a + bytes_b.div_ceil(UNIT)) * UNIT);
        let second = Place {
            chunk: both.chunk.clone(),
            first: both.first + units_a,
            units: both.units - units_a,
        };
        let first = Place {
            units: units_a,
            ..both
        };
        (Self::place(a, first), Self::place(b, second))
    }

    /// `bytes` bytes of some chunk.
    fn reserve(&self, bytes: usize) -> Place {
        if bytes > SHARED_MAX {
            // A large array gets its own chunk, leaving the shared ones to the small ones.
            let own = bytes.next_multiple_of(HUGE_PAGE);
            return Place {
                chunk: Arc::new(Chunk::map(own, &self.mapped)),
                first: 0,
                units: 0,
            };
        }
        let units = bytes.div_ceil(UNIT);
        let mut chunks = self.chunks.lock();
        for chunk in chunks.iter() {
            if let Some(first) = chunk.take(units) {
                return Place {
                    chunk: chunk.clone(),
                    first,
                    units,
                };
            }
        }
        let chunk = Arc::new(Chunk::map(CHUNK_BYTES, &self.mapped));
        let first = chunk.take(units).unwrap_or(0);
        chunks.push(chunk.clone());
        Place {
            chunk,
            first,
            units,
        }
    }
}

/// Where a slice lives: its chunk and its run of units there (none for a chunk of its own).
struct Place {
    chunk: Arc<Chunk>,
    first: usize,
    units: usize,
}

/// An owned array in an arena chunk (see the module doc); dereferences to `[T]`.
pub struct ArenaSlice<T> {
    ptr: NonNull<T>,
    len: usize,
    place: Option<Place>,
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
        // mapped by `place` while `self` lives.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T> Drop for ArenaSlice<T> {
    fn drop(&mut self) {
        // SAFETY: the elements are initialized and owned by this slice alone; they are dropped once, here,
        // before their units are given back and before `place` (a field, dropped after this body) may
        // unmap their memory.
        unsafe {
            std::ptr::drop_in_place(std::ptr::slice_from_raw_parts_mut(
                self.ptr.as_ptr(),
                self.len,
            ));
        }
        if let Some(p) = &self.place {
            p.chunk.give_back(p.first, p.units);
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
    fn slices_hold_their_items_and_chunks_return_when_their_slices_go() {
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
        assert_eq!(b.as_ptr() as usize, a.as_ptr() as usize + UNIT);
        // One shared chunk and the big array's own (two huge pages).
        assert_eq!(arena.mapped_bytes(), CHUNK_BYTES + 2 * HUGE_PAGE);
        drop(big);
        assert_eq!(arena.mapped_bytes(), CHUNK_BYTES);
        // 16 slices of 16 units: 7 fit beside `a` and `b`, 8 in a second chunk, the last in a third.
        let fill: Vec<_> = (0..16).map(|_| arena.slice(vec![1u8; 16 * UNIT])).collect();
        assert_eq!(arena.mapped_bytes(), 3 * CHUNK_BYTES);
        drop((a, b));
        drop(fill);
        // Trimming keeps one empty chunk for the next slices; dropping the arena returns it too.
        arena.trim();
        assert_eq!(arena.mapped_bytes(), CHUNK_BYTES);
        let mapped = arena.mapped.clone();
        drop(arena);
        assert_eq!(mapped.load(Ordering::Relaxed), 0);
        let empty = Arena::new().slice(Vec::<u64>::new());
        assert!(empty.is_empty());
    }

    #[test]
    fn a_dropped_slice_leaves_a_hole_the_next_slices_fill() {
        let arena = Arena::new();
        let a = arena.slice(vec![1u64; 3 * UNIT / 8]);
        let b = arena.slice(vec![2u64; UNIT / 8]);
        let at = a.as_ptr() as usize;
        drop(a);
        // Two slices that fit the three units `a` left: first fit puts them there, not after `b`.
        let c = arena.slice(vec![3u64; 2 * UNIT / 8]);
        let d = arena.slice(vec![4u64; UNIT / 8 - 1]);
        assert_eq!(c.as_ptr() as usize, at);
        assert_eq!(d.as_ptr() as usize, at + 2 * UNIT);
        assert!(
            c.iter().all(|&v| v == 3) && d.iter().all(|&v| v == 4) && b.iter().all(|&v| v == 2)
        );
        // Half a chunk fits after `b`; a second half does not fit there any more: a second chunk.
        let e = arena.slice(vec![5u8; SHARED_MAX]);
        assert_eq!(e.as_ptr() as usize, at + 4 * UNIT);
        let f = arena.slice(vec![6u8; SHARED_MAX]);
        assert_eq!(arena.mapped_bytes(), 2 * CHUNK_BYTES);
        assert_eq!(f.as_ptr() as usize % HUGE_PAGE, 0);
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
