//! # Shared algorithms
//!
//! Building blocks that several index families use (DESIGN §1): they know nothing about pages or files.
//!
//! * [`alias`]: Walker's alias method (Vose's construction) — O(n) build, O(1) weighted draws; the global
//!   "which shard" step of dynamized sampling and the per-shard weighted set sampler.
//! * [`bloom`]: a Bloom filter with double hashing over xxh3 — no false negatives, false-positive rate set at
//!   construction; the dynamized family keeps one per shard over its tombstones.
//! * [`isam`]: static separator levels over a sorted `u64` array (ISAM), the search structure of in-memory
//!   shards.
//! * [`loser_tree`]: a tournament tree over sorted streams' heads — the m-way merge of dynamized shards.
//! * [`on_threads`]: fork-join over scoped threads, for reconstructions that split their work by parts.

pub mod alias;
pub mod bloom;
pub mod isam;
pub mod loser_tree;

/// Runs `work(0)`, …, `work(parts - 1)` at the same time, `work(0)` on the calling thread and each other part
/// on a scoped thread of its own, and returns the results in part order. A panic in a part is raised again
/// here once every part has stopped.
pub fn on_threads<T: Send>(parts: usize, work: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let work = &work;
    std::thread::scope(|scope| {
        let spawned: Vec<_> = (1..parts).map(|j| scope.spawn(move || work(j))).collect();
        let mut out = Vec::with_capacity(parts.max(1));
        out.push(work(0));
        out.extend(spawned.into_iter().map(|h| match h.join() {
            Ok(v) => v,
            Err(panic) => std::panic::resume_unwind(panic),
        }));
        out
    })
}

/// Asks the kernel to back the 2 MiB-aligned interior of the `bytes` bytes at address `start` (memory not
/// yet touched, for the hint to take) with transparent huge pages: for arrays probed at random, where with
/// 4 KiB pages nearly every probe adds a TLB miss to its cache miss. A hint only: nothing changes if the
/// kernel declines; no effect off Linux.
pub fn advise_huge_pages(start: usize, bytes: usize) {
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        let first = start.next_multiple_of(HUGE);
        let end = (start + bytes) / HUGE * HUGE;
        if end > first {
            // SAFETY: MADV_HUGEPAGE only changes how the kernel backs the pages of a range, never their
            // contents, so the call cannot affect memory safety whatever the range holds (an unmapped range
            // is an error, ignored: the advice is a hint).
            unsafe {
                libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (start, bytes);
}

/// Asks the CPU to bring the cache line holding `item` into the cache (no effect on other targets).
#[inline]
pub fn prefetch_line<T>(item: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: `_mm_prefetch` needs SSE, which every x86_64 CPU has; a prefetch is only a hint that
        // never faults and never reads or writes memory observably, and the pointer comes from a reference.
        unsafe { _mm_prefetch::<_MM_HINT_T0>((item as *const T).cast::<i8>()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = item;
}
