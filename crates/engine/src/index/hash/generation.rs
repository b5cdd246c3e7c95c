//! A table generation in DRAM ([`Generation`]): its PM layout, the DRAM state of its buckets and pool
//! chunks, and its collecting logs; plus the PM writes every generation shares (formatting a new one,
//! committing a word, reading a slot, the identity of a chunk).

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};

use super::bucket::{Bucket, Pool, Shape};
use super::index::Padded;
use super::layout::{Gen, slot_off};
use super::log::Log;
use super::spin::SpinMutex;
use crate::error::Result;
use crate::storage::pm::{Pm, XPLINE};

/// One generation: a table of `2^log2` buckets with its logs, pool and redo areas (layout in [`Gen`]).
#[derive(Debug)]
pub struct Generation {
    pub layout: Gen,
    pub buckets: Box<[Bucket]>,
    /// Each alone on its lines: every write updates its log's cursor and counters.
    pub logs: Box<[Padded<SpinMutex<Log>>]>,
    pub pool: Pool,
    /// The generation a doubling of this one builds (null until one starts; see `grow`). Owned by the
    /// index's list of generations, so it never moves or goes while this one is reachable.
    pub next: AtomicPtr<Generation>,
    /// Buckets `0..moved` are copied into `next`: their writes are mirrored there.
    pub moved: AtomicU64,
    /// `next` replaced this generation: nothing may write its space (set holding every one of its logs).
    pub retired: AtomicBool,
    /// `layout.bucket_off(0)` and `layout.pool_off()`, kept so that a lookup's slot offset is two
    /// multiply-adds, not the layout's chain of rounded sizes.
    home_base: u64,
    pool_base: u64,
}

/// `n` empty buckets, in memory the kernel is asked to back with transparent huge pages before it is first
/// touched (when `n` buckets span whole 2 MiB pages): every write and lookup lands on a random bucket, and
/// with 4 KiB pages nearly each one adds a TLB miss (a page walk) to its cache miss. A hint only.
fn new_buckets(n: usize, pool: &Pool) -> Box<[Bucket]> {
    let mut v: Vec<Bucket> = Vec::with_capacity(n);
    crate::algo::advise_huge_pages(v.as_ptr() as usize, n * size_of::<Bucket>());
    v.extend((0..n).map(|_| pool.new_bucket()));
    v.into_boxed_slice()
}

impl Generation {
    /// The DRAM state of an empty generation laid out as `layout`.
    pub fn new(layout: Gen, nonce: u64) -> Generation {
        let pool = Pool::new(layout.pool_chunks, layout.home_chunks());
        Generation {
            buckets: new_buckets(layout.buckets() as usize, &pool),
            logs: (0..layout.logs)
                .map(|i| Padded(SpinMutex::new(Log::new(&layout, nonce, i))))
                .collect(),
            pool,
            layout,
            next: AtomicPtr::new(std::ptr::null_mut()),
            moved: AtomicU64::new(0),
            retired: AtomicBool::new(false),
            home_base: layout.bucket_off(0),
            pool_base: layout.pool_off(),
        }
    }

    /// The generation a doubling of this one builds, once it started.
    pub fn next_generation(&self) -> Option<&Generation> {
        let p = self.next.load(Ordering::Acquire);
        // SAFETY: `next` is null or was set (`grow`) from a reference to a boxed generation in the index's
        // list, which keeps it (unmoved) at least as long as this one: `reclaim` frees only generations
        // older than the current one, and never the one after a generation still in the list.
        unsafe { p.as_ref() }
    }

    /// Writes and flushes the header and zero log tails (the caller fences): what a doubling writes first
    /// (its slices zero the logs and pool, `grow`).
    pub fn format_header<P: Pm>(&self, pm: &P, nonce: u64) -> Result<()> {
        let g = &self.layout;
        g.write_header(pm, nonce)?;
        for i in 0..g.logs {
            pm.write_u64(g.tail_word(i), 0)?;
        }
        pm.flush(g.off, g.tail_word(g.logs) - g.off)
    }

    /// Writes what makes the generation valid apart from its buckets — header, zero log tails, a zeroed
    /// pool — and fences. The caller writes the buckets, then switches the root word.
    pub fn format<P: Pm>(&self, pm: &P, nonce: u64) -> Result<()> {
        let g = &self.layout;
        self.format_header(pm, nonce)?;
        let zeros = vec![0u8; 64 * XPLINE as usize];
        let mut at = g.pool_off();
        let end = g.pool_chunk(g.pool_chunks);
        while at < end {
            let n = (end - at).min(zeros.len() as u64);
            pm.write_nt(at, &zeros[..n as usize])?;
            at += n;
        }
        pm.fence();
        Ok(())
    }

    /// Offset of the chunk at chain position `pos` of bucket `b`.
    #[inline]
    pub fn chunk_off(&self, b: u64, bucket: &Bucket, pos: usize) -> u64 {
        if pos < self.pool.home {
            self.home_base + b * self.layout.bucket_bytes() + pos as u64 * XPLINE
        } else {
            self.pool_base + u64::from(bucket.overflow(&self.pool, pos)) * XPLINE
        }
    }

    /// Identity word of the chunk at chain position `pos` of bucket `b`.
    pub fn tag(&self, nonce: u64, b: u64, pos: usize) -> u64 {
        if pos < self.layout.home_chunks() {
            self.layout.home_tag(nonce, b, pos)
        } else {
            self.layout.pool_tag(nonce, b, pos)
        }
    }

    /// Key and value of chain slot `p` of bucket `b`: the tail's from DRAM, others with one 16 B PM read
    /// (one line of one XPLine). Safe inside a seqlock read: a torn shape or link gives a wrong offset,
    /// which the bounds check refuses or the version check discards.
    #[inline]
    pub fn slot<P: Pm>(
        &self,
        pm: &P,
        b: u64,
        bucket: &Bucket,
        shape: Shape,
        p: usize,
    ) -> Result<(u64, u64)> {
        let start = shape.tail_start();
        if p >= start {
            return Ok(bucket.tail_slot(p - start));
        }
        let chunk = self.chunk_off(b, bucket, p / super::layout::CHUNK_SLOTS);
        pm.read_pair(slot_off(chunk, p % super::layout::CHUNK_SLOTS))
    }

    /// Bytes of DRAM the generation holds (buckets, pool mirror, log rings).
    pub fn dram_bytes(&self) -> u64 {
        self.buckets.len() as u64 * (Bucket::dram_bytes() + self.pool.ext_bytes())
            + self.pool.dram_bytes()
            + self.layout.logs * self.layout.log_records * 4
    }
}

/// Stores the 8 B word `value` at `off` and makes it durable: store, write-back of its line, fence — in
/// both modes. Under eADR the write-back is not needed for durability; it is done so that the line reaches
/// the media while the XPLine it belongs to (just written whole) is still in the XPBuffer, instead of
/// being evicted from the cache later as a lone partial XPLine (a 256 B read-modify-write).
pub fn commit_word<P: Pm>(pm: &P, off: u64, value: u64) -> Result<()> {
    pm.store_u64_atomic(off, value)?;
    pm.flush(off, 8)?;
    pm.fence();
    Ok(())
}
