//! [`CountingPm`]: a wrapper that models the memory traffic of every access as on Intel Optane.
//!
//! ## Traffic rules
//! **CPU side** (64 B lines between the cores and the memory controller):
//! * A `read` (or atomic load / compare-exchange) costs 64 B of CPU read per line it touches and sends each
//!   such line to the media model as a read — unless the model holds that line dirty (it was written and not
//!   yet written back: a cache hit, free). No cache of clean lines is modelled: a PM index keeps what is hot
//!   in DRAM, and every probe of PM is counted as a miss.
//! * A `write` / atomic store / successful compare-exchange makes the lines it touches **dirty**. A dirty
//!   line costs 64 B of CPU write (and one 64 B write-back to the media model) each time it is written back,
//!   which happens: at a `flush` covering it (a flush of a clean line is free); when it is the least recently
//!   written of more than `cpu_dirty_lines` dirty lines (the cache evicts it — under eADR, where nobody
//!   flushes, this is how lines reach PM; under ADR it models the cache evicting before the flush, which then
//!   finds the line clean); and at [`CountingPm::drain`]. With `cpu_dirty_lines == 0` every write is
//!   written back at once (write-through: "every written line costs a write-back").
//! * A `write_nt` costs its bytes of CPU write, bypasses the dirty set (dropping any dirty copy of its lines,
//!   which it overwrites whole) and reaches the media as whole XPLines.
//!
//! **Media side** ([`XpBuffer`]): 256 B XPLines through a per-DIMM XPBuffer LRU; read misses cost 256 B of
//! media read, written XPLines cost 256 B of media write when they leave the buffer, plus 256 B of media read
//! when only partly written and never loaded (read-modify-write). See [`super::xpbuffer`].
//!
//! Counts are complete only after [`CountingPm::drain`] (dirty lines and buffered XPLines still owe their
//! writes); take the end snapshot after it.
//!
//! **Emulated time** (off by default, [`TrafficConfig`]): every call that made the model read XPLines from
//! the media busy-waits `read_miss_latency_ns` per read miss, and every call that made it write media
//! bytes charges them to a [`WriteBucket`] at `write_bandwidth` and busy-waits for what it owes (see
//! [`super::pacing`]). The wait is paid by whichever call caused the media traffic (often a later one: an
//! eviction), outside the model's lock, and counted in `stall_ns`. [`CountingPm::drain`] charges nothing:
//! it is bookkeeping between measurements, not an access.
//!
//! **Logical bytes** are whatever the caller declares with [`CountingPm::record_logical`] (e.g. 16 B per
//! inserted 8 B key + 8 B value); amplification is media bytes ÷ logical bytes.
//!
//! ## Concurrency and cost
//! One `parking_lot::Mutex` guards the whole model (dirty set and XPBuffers): one uncontended lock and a
//! handful of hash-map and 64-entry scans per call. Threads share one dirty set (one shared cache, not one per
//! core). That is cheap enough for functional multi-threaded runs but serialises PM accesses, so measure
//! throughput on the bare region and traffic on this wrapper. Logical bytes are a lock-free atomic.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::pacing::WriteBucket;
use super::traffic::{Traffic, TrafficConfig};
use super::xpbuffer::XpBuffer;
use super::{CACHE_LINE, PersistMode, Pm, XPLINE, lines_covering};
use crate::error::Result;

/// The model behind the mutex: the CPU's dirty lines, the XPBuffers, and the non-media counters.
#[derive(Debug)]
struct Model {
    /// Dirty line number → stamp of its last write.
    dirty: HashMap<u64, u64>,
    /// (line, stamp) in write order; entries whose stamp no longer matches `dirty` are stale.
    order: VecDeque<(u64, u64)>,
    clock: u64,
    capacity: usize,
    media: XpBuffer,
    counts: Traffic,
    /// The write-bandwidth token bucket, when the bandwidth is limited.
    pacer: Option<WriteBucket>,
}

impl Model {
    /// A CPU read of `line` (the XPBuffer counts a miss).
    fn read_line(&mut self, line: u64) {
        if self.dirty.contains_key(&line) {
            return;
        }
        self.counts.cpu_read_bytes += CACHE_LINE;
        self.media.read(line * CACHE_LINE);
    }

    fn dirty_line(&mut self, line: u64) {
        if self.capacity == 0 {
            self.write_back(line);
            return;
        }
        self.clock += 1;
        self.dirty.insert(line, self.clock);
        self.order.push_back((line, self.clock));
        while self.dirty.len() > self.capacity {
            self.evict_lru();
        }
        if self.order.len() > 2 * self.dirty.len() + 1024 {
            let dirty = &self.dirty;
            self.order.retain(|(l, s)| dirty.get(l) == Some(s));
        }
    }

    fn evict_lru(&mut self) {
        while let Some((line, stamp)) = self.order.pop_front() {
            if self.dirty.get(&line) == Some(&stamp) {
                self.dirty.remove(&line);
                self.write_back(line);
                return;
            }
        }
    }

    fn flush_line(&mut self, line: u64) {
        if self.dirty.remove(&line).is_some() {
            self.write_back(line);
        }
    }

    fn write_back(&mut self, line: u64) {
        self.counts.cpu_write_bytes += CACHE_LINE;
        self.media.write(line * CACHE_LINE);
    }

    fn write_nt(&mut self, off: u64, len: u64) {
        for line in lines_covering(off, len) {
            self.dirty.remove(&line);
        }
        self.counts.cpu_write_bytes += len;
        let mut xp = off;
        while xp < off + len {
            self.media.write_xpline(xp);
            xp += XPLINE;
        }
    }

    fn drain(&mut self) {
        let mut lines: Vec<u64> = self.dirty.drain().map(|(l, _)| l).collect();
        lines.sort_unstable();
        self.order.clear();
        for line in lines {
            self.write_back(line);
        }
        self.media.drain();
    }

    fn snapshot(&self) -> Traffic {
        let m = self.media.counts();
        Traffic {
            media_read_bytes: m.read_bytes,
            media_write_bytes: m.write_bytes,
            xpbuffer_read_hits: m.read_hits,
            xpbuffer_read_misses: m.read_misses,
            rmw_xplines: m.rmw,
            ..self.counts
        }
    }
}

/// A [`Pm`] that forwards every call to `inner` and counts the traffic it would cause (module docs).
#[derive(Debug)]
pub struct CountingPm<P> {
    inner: P,
    config: TrafficConfig,
    model: Mutex<Model>,
    logical: AtomicU64,
    /// Zero of the write bucket's clock.
    epoch: Instant,
}

impl<P: Pm> CountingPm<P> {
    /// Wraps `inner` with the default model ([`TrafficConfig::default`]).
    pub fn new(inner: P) -> Self {
        let config = TrafficConfig::default();
        Self::build(inner, config)
    }

    /// Wraps `inner` with the model `config` (validated).
    pub fn with_config(inner: P, config: TrafficConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self::build(inner, config))
    }

    fn build(inner: P, config: TrafficConfig) -> Self {
        CountingPm {
            inner,
            config,
            model: Mutex::new(Model {
                dirty: HashMap::new(),
                order: VecDeque::new(),
                clock: 0,
                capacity: config.cpu_dirty_lines,
                media: XpBuffer::new(config.dimms, config.interleave_bytes, config.xpbuffer_lines),
                counts: Traffic::default(),
                pacer: (config.write_bandwidth > 0)
                    .then(|| WriteBucket::new(config.write_bandwidth, config.write_burst_bytes)),
            }),
            logical: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }

    /// The wrapped region.
    pub fn inner(&self) -> &P {
        &self.inner
    }

    /// Unwraps the region, dropping the counters.
    pub fn into_inner(self) -> P {
        self.inner
    }

    /// The model's parameters.
    pub fn config(&self) -> &TrafficConfig {
        &self.config
    }

    /// Declares `bytes` of payload (the denominator of amplification).
    pub fn record_logical(&self, bytes: u64) {
        self.logical.fetch_add(bytes, Ordering::Relaxed);
    }

    /// The counters now. Writes still owed by dirty lines and buffered XPLines are not included until
    /// [`drain`](Self::drain).
    pub fn snapshot(&self) -> Traffic {
        let mut t = self.model.lock().snapshot();
        t.logical_bytes = self.logical.load(Ordering::Relaxed);
        t
    }

    /// Writes back every dirty line (in address order) and evicts every XPBuffer entry, paying what they
    /// owe. Afterwards the counters are complete; the next access starts from empty caches.
    pub fn drain(&self) {
        self.model.lock().drain();
    }

    /// Lines the model currently holds dirty.
    pub fn dirty_lines(&self) -> usize {
        self.model.lock().dirty.len()
    }

    /// Runs `f` on the model, then charges the emulated time of the media traffic it caused (read-miss
    /// latency, write pacing) and busy-waits for it after releasing the lock.
    fn modelled<R>(&self, f: impl FnOnce(&mut Model) -> R) -> R {
        let (r, wait) = {
            let mut guard = self.model.lock();
            let m = &mut *guard;
            let before = m.media.counts();
            let r = f(m);
            let after = m.media.counts();
            let misses = after.read_misses - before.read_misses;
            let mut wait = self.config.read_miss_latency_ns.saturating_mul(misses);
            let written = after.write_bytes - before.write_bytes;
            if let Some(bucket) = m.pacer.as_mut().filter(|_| written > 0) {
                let now = u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
                wait = wait.saturating_add(bucket.charge(now, written));
                m.counts.write_busy_ns = bucket.busy_ps() / 1000;
            }
            m.counts.stall_ns = m.counts.stall_ns.saturating_add(wait);
            (r, wait)
        };
        if wait > 0 {
            let until = Instant::now() + Duration::from_nanos(wait);
            while Instant::now() < until {
                std::hint::spin_loop();
            }
        }
        r
    }

    /// Counts a read of `[off, off + len)`.
    fn count_read(&self, off: u64, len: u64) {
        self.modelled(|m| {
            m.counts.requested_read_bytes += len;
            for line in lines_covering(off, len) {
                m.read_line(line);
            }
        });
    }

    fn count_write(&self, off: u64, len: u64) {
        self.modelled(|m| {
            m.counts.requested_write_bytes += len;
            for line in lines_covering(off, len) {
                m.dirty_line(line);
            }
        });
    }
}

impl<P: Pm> Pm for CountingPm<P> {
    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn mode(&self) -> PersistMode {
        self.inner.mode()
    }

    fn read(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        self.inner.read(off, buf)?;
        self.count_read(off, buf.len() as u64);
        Ok(())
    }

    fn write(&self, off: u64, data: &[u8]) -> Result<()> {
        self.inner.write(off, data)?;
        self.count_write(off, data.len() as u64);
        Ok(())
    }

    fn load_u64_atomic(&self, off: u64) -> Result<u64> {
        let v = self.inner.load_u64_atomic(off)?;
        self.count_read(off, 8);
        Ok(v)
    }

    fn store_u64_atomic(&self, off: u64, value: u64) -> Result<()> {
        self.inner.store_u64_atomic(off, value)?;
        self.count_write(off, 8);
        Ok(())
    }

    fn compare_exchange_u64(
        &self,
        off: u64,
        current: u64,
        new: u64,
    ) -> Result<std::result::Result<u64, u64>> {
        let r = self.inner.compare_exchange_u64(off, current, new)?;
        self.count_read(off, 8);
        if r.is_ok() {
            self.count_write(off, 8);
        }
        Ok(r)
    }

    fn flush(&self, off: u64, len: u64) -> Result<()> {
        self.inner.flush(off, len)?;
        self.modelled(|m| {
            m.counts.flushes += 1;
            for line in lines_covering(off, len) {
                m.flush_line(line);
            }
        });
        Ok(())
    }

    fn fence(&self) {
        self.inner.fence();
        self.model.lock().counts.fences += 1;
    }

    fn write_nt(&self, off: u64, data: &[u8]) -> Result<()> {
        self.inner.write_nt(off, data)?;
        self.modelled(|m| {
            m.counts.requested_write_bytes += data.len() as u64;
            m.write_nt(off, data.len() as u64);
        });
        Ok(())
    }

    /// Forwarded, not counted: the read that follows is charged.
    fn prefetch(&self, off: u64) {
        self.inner.prefetch(off);
    }
}
