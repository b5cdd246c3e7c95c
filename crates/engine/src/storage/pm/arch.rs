//! The persist instructions: cache-line write-back, store fence and non-temporal 8-byte stores.
//!
//! On x86-64 the write-back instruction is chosen once at run time from CPUID leaf 7 (`clwb`, else
//! `clflushopt`, else `clflush`, which every x86-64 CPU has). `clwb` and `clflushopt` have no stable
//! intrinsic, so they are emitted with inline assembly; std's `is_x86_feature_detected!` does not know them
//! either, hence the direct CPUID query. On other targets every primitive is a portable fallback: a
//! sequentially consistent fence stands in for write-back and `sfence`, and a plain atomic store for the
//! non-temporal store (durability of a file-backed region then comes from `msync` alone).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// The instruction [`flush_range`] uses to write a cache line back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FlushInstr {
    /// Write back and keep the line cached (best).
    Clwb,
    /// Write back and invalidate, weakly ordered.
    Clflushopt,
    /// Write back and invalidate, strongly ordered (serialises with other flushes; slowest).
    Clflush,
    /// Not x86-64: no cache-line control; a memory fence only.
    Portable,
}

impl FlushInstr {
    /// The instruction's mnemonic (`"clwb"`, …, `"portable"`), for reports.
    pub fn name(self) -> &'static str {
        match self {
            FlushInstr::Clwb => "clwb",
            FlushInstr::Clflushopt => "clflushopt",
            FlushInstr::Clflush => "clflush",
            FlushInstr::Portable => "portable",
        }
    }
}

/// The write-back instruction of this CPU, detected on first use.
pub fn flush_instr() -> FlushInstr {
    static DETECTED: OnceLock<FlushInstr> = OnceLock::new();
    *DETECTED.get_or_init(detect)
}

#[cfg(target_arch = "x86_64")]
fn detect() -> FlushInstr {
    use core::arch::x86_64::{__cpuid, __cpuid_count};
    // `__cpuid*` became safe functions after this crate's minimum Rust version; the `unsafe` keeps older
    // compilers happy and the `allow` keeps newer ones quiet.
    // SAFETY: CPUID exists on every x86-64 CPU; leaf 7 is only queried when leaf 0 reports it.
    #[allow(unused_unsafe)]
    let ebx = unsafe {
        if __cpuid(0).eax < 7 {
            0
        } else {
            __cpuid_count(7, 0).ebx
        }
    };
    const CLFLUSHOPT: u32 = 1 << 23;
    const CLWB: u32 = 1 << 24;
    if ebx & CLWB != 0 {
        FlushInstr::Clwb
    } else if ebx & CLFLUSHOPT != 0 {
        FlushInstr::Clflushopt
    } else {
        FlushInstr::Clflush
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> FlushInstr {
    FlushInstr::Portable
}

/// Writes back every cache line that overlaps `[addr, addr + len)`, with the instruction of [`flush_instr`].
/// Unordered with respect to later stores until a [`store_fence`].
///
/// # Safety
/// Every byte of `[addr, addr + len)` must be inside one live memory mapping. (Whole cache lines are touched,
/// which is fine: a line never crosses a page, and mappings are made of whole pages.)
pub unsafe fn flush_range(addr: *const u8, len: usize) {
    if len == 0 {
        return;
    }
    let line = super::CACHE_LINE as usize;
    let first = addr.wrapping_sub(addr as usize % line);
    let lines = (addr as usize % line + len).div_ceil(line);
    let instr = flush_instr();
    for i in 0..lines {
        let p = first.wrapping_add(i * line);
        // SAFETY: `p` lies in a cache line that overlaps the caller's range, hence inside the same mapped
        // page; the flush instructions do not change memory contents.
        unsafe { flush_line(instr, p) };
    }
}

#[cfg(target_arch = "x86_64")]
#[inline]
unsafe fn flush_line(instr: FlushInstr, p: *const u8) {
    use core::arch::asm;
    // The asm blocks are deliberately not `nomem`: the compiler must keep earlier stores before them.
    match instr {
        // SAFETY: `p` is mapped (caller); CPUID reported CLWB.
        FlushInstr::Clwb => unsafe {
            asm!("clwb [{0}]", in(reg) p, options(nostack, preserves_flags));
        },
        // SAFETY: `p` is mapped (caller); CPUID reported CLFLUSHOPT.
        FlushInstr::Clflushopt => unsafe {
            asm!("clflushopt [{0}]", in(reg) p, options(nostack, preserves_flags));
        },
        // SAFETY: `p` is mapped (caller); CLFLUSH is part of SSE2, which every x86-64 CPU has.
        FlushInstr::Clflush | FlushInstr::Portable => unsafe {
            core::arch::x86_64::_mm_clflush(p);
        },
    }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline]
unsafe fn flush_line(_instr: FlushInstr, _p: *const u8) {
    std::sync::atomic::fence(Ordering::SeqCst);
}

/// A store fence: earlier write-backs and non-temporal stores complete before later stores.
#[inline]
pub fn store_fence() {
    std::sync::atomic::compiler_fence(Ordering::SeqCst);
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SFENCE is part of SSE, which every x86-64 CPU has; it has no memory operands.
    unsafe {
        core::arch::x86_64::_mm_sfence();
    }
    #[cfg(not(target_arch = "x86_64"))]
    std::sync::atomic::fence(Ordering::SeqCst);
    std::sync::atomic::compiler_fence(Ordering::SeqCst);
}

/// Stores `value` into `word` with a non-temporal (cache-bypassing, write-combining) store. Weakly ordered:
/// a [`store_fence`] must follow before the data is ordered before later stores.
#[inline]
pub fn store_nt(word: &AtomicU64, value: u64) {
    #[cfg(target_arch = "x86_64")]
    {
        let p = word.as_ptr();
        // SAFETY: `p` points to a live, 8-byte-aligned `AtomicU64` (from the reference). MOVNTI stores the 8
        // bytes in one aligned access, which the hardware performs atomically, so the block behaves like a
        // relaxed atomic store of `value` to an `AtomicU64`: it cannot form a data race with other atomic
        // accesses to the word.
        unsafe {
            core::arch::asm!("movnti [{0}], {1}", in(reg) p, in(reg) value, options(nostack, preserves_flags));
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    word.store(value, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primitives_run_and_keep_memory_contents() {
        let words: Vec<AtomicU64> = (0..32).map(AtomicU64::new).collect();
        for (i, w) in words.iter().enumerate() {
            store_nt(w, 1000 + i as u64);
        }
        store_fence();
        // SAFETY: the range is the vector's own live allocation.
        unsafe { flush_range(words.as_ptr().cast::<u8>(), words.len() * 8) };
        // An unaligned start and a length that ends mid-line.
        // SAFETY: as above, a sub-range of the same allocation.
        unsafe { flush_range(words.as_ptr().cast::<u8>().wrapping_add(3), 70) };
        store_fence();
        for (i, w) in words.iter().enumerate() {
            assert_eq!(w.load(Ordering::Relaxed), 1000 + i as u64);
        }
        #[cfg(target_arch = "x86_64")]
        assert_ne!(flush_instr(), FlushInstr::Portable);
    }
}
