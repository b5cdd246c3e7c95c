//! The writer's side of [`Shared`](super::Shared): appends, sealing, stalls, throttling, buffer reuse.
//!
//! A write is one slot claim in the active buffer. When it does not fit, the writer seals the buffer (if
//! fewer than `max_sealed_buffers` sealed buffers wait) and appends to the fresh one; otherwise it stalls
//! until the flusher frees one — the only wait a writer ever has on reconstruction. A fresh buffer is a
//! flushed one reset for reuse when one is free (no allocation, no page faults on the writer's path), else a
//! new one. A flushed buffer is free once no version lists it and nobody else holds it (`Arc` strong count
//! 1); the flusher collects free buffers after each flush, and the writer that seals pops one and resets it
//! (zeroing its key index, ≈ 2.7 bytes per slot, leaves that index in the writer's own cache).

use super::*;

impl<S: Shard> Shared<S> {
    /// Applies puts and deletes as one batch: readers see all of it or none of it.
    pub(super) fn write_batch(self: &Arc<Self>, entries: &[BufferEntry]) -> Result<()> {
        if self.opts.weighted
            && let Some(e) = entries
                .iter()
                .find(|e| e.kind == OpKind::Put && !(e.weight.is_finite() && e.weight >= 0.0))
        {
            return Err(Error::invalid(format!(
                "weight {} of key {} must be finite and non-negative",
                e.weight, e.key
            )));
        }
        self.check_failed()?;
        if entries.is_empty() {
            return Ok(());
        }
        // Unweighted records weigh 1, in the buffer as in the shards.
        let normalized: Vec<BufferEntry>;
        let entries = if !self.opts.weighted
            && entries
                .iter()
                .any(|e| e.kind == OpKind::Put && e.weight != 1.0)
        {
            normalized = entries
                .iter()
                .map(|e| BufferEntry { weight: 1.0, ..*e })
                .collect();
            &normalized[..]
        } else {
            entries
        };
        if self.rt.throttle {
            self.throttle();
        }
        if entries.len() > self.opts.buffer_capacity {
            return self.write_oversized(entries);
        }
        loop {
            let v = self.current.load();
            match v.buffers[0].append_batch(entries) {
                Ok(()) => return Ok(()),
                Err(_) => {
                    let full = v.buffers[0].clone();
                    drop(v);
                    self.rotate(&full)?;
                }
            }
        }
    }

    /// Probabilistic insert throttling. While a flush is pending, the active buffer must not fill before
    /// the flush is expected to end (else the next writer stalls for the rest of it). With `left` the
    /// expected remaining flush time and `room` the active buffer's free slots, every insert should take at
    /// least `left / room`; an insert is delayed by one sleep with the probability that makes the average
    /// delay per insert that long. No flush pending: no delay.
    fn throttle(&self) {
        let v = self.current.load();
        if v.buffers.len() == 1 {
            return;
        }
        let active = &v.buffers[0];
        let room = active.capacity().saturating_sub(active.len()) as f64;
        drop(v);
        let t = &self.throttling;
        let started = t.flush_started.load(Ordering::Acquire);
        let estimate = t.flush_nanos.load(Ordering::Relaxed) as f64;
        if started == 0 || estimate == 0.0 || room < 1.0 {
            return;
        }
        let elapsed = self.epoch.elapsed().as_nanos() as f64 - started as f64;
        let left = (estimate - elapsed).max(0.0);
        let sleep = t.sleep_nanos.load(Ordering::Relaxed).max(1) as f64;
        let p = (left / room / sleep).min(1.0);
        if p <= 0.0 {
            return;
        }
        // xorshift64*: a cheap shared random stream; races between writers only mix it more.
        let mut x = t.seed.load(Ordering::Relaxed);
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        t.seed.store(x, Ordering::Relaxed);
        let r = (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64;
        if r < p {
            self.counters.throttled.fetch_add(1, Ordering::Relaxed);
            let began = Instant::now();
            std::thread::sleep(self.rt.throttle_delay);
            // What a sleep really takes (timer slack makes it longer than asked): an average over recent ones.
            let took = began.elapsed().as_nanos() as u64;
            let old = t.sleep_nanos.load(Ordering::Relaxed);
            t.sleep_nanos.store(
                if old == 0 { took } else { (old * 7 + took) / 8 },
                Ordering::Relaxed,
            );
        }
    }

    /// Seals `full` if it is still the active buffer; stalls while too many sealed buffers wait.
    fn rotate(self: &Arc<Self>, full: &Arc<MutableBuffer>) -> Result<()> {
        let mut stalled: Option<Instant> = None;
        let result = loop {
            self.check_failed()?;
            let v = self.current.load();
            if !Arc::ptr_eq(&v.buffers[0], full) {
                break Ok(());
            }
            // At least the full buffer itself may wait: with none allowed, nothing would ever be sealed.
            if v.buffers.len() - 1 < self.rt.max_sealed_buffers.max(1) {
                drop(v);
                break self.seal(full);
            }
            drop(v);
            if self.rt.background {
                let mut st = self.work.lock();
                if stalled.is_none() {
                    stalled = Some(Instant::now());
                    self.counters.stalls.fetch_add(1, Ordering::Relaxed);
                }
                self.flush_cv.notify_one();
                self.done_cv.wait_for(&mut st, Duration::from_millis(10));
            } else {
                self.flush_all_inline()?;
                self.merge_all_inline()?;
            }
        };
        if let Some(t) = stalled {
            self.counters
                .stall_nanos
                .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        }
        result
    }

    /// A batch larger than a buffer: it fills a buffer of its own, which is published already sealed
    /// (below a fresh active buffer and above the previous one, which is sealed too).
    fn write_oversized(self: &Arc<Self>, entries: &[BufferEntry]) -> Result<()> {
        let own = Arc::new(MutableBuffer::new(entries.len()));
        own.append_batch(entries)
            .expect("a buffer of the batch's size holds the batch");
        {
            let _st = self.work.lock();
            let v = self.current.load_full();
            self.publish_sealed(&v, Some(own));
        }
        self.after_seal()
    }

    /// Publishes `v` with a fresh active buffer, `extra` (sealed) below it, then `v`'s buffers. Under `work`.
    fn publish_sealed(&self, v: &Version<S>, extra: Option<Arc<MutableBuffer>>) {
        let mut buffers = Vec::with_capacity(v.buffers.len() + 2);
        buffers.push(self.fresh_buffer());
        buffers.extend(extra);
        buffers.extend(v.buffers.iter().cloned());
        self.publish(Version {
            seq: v.seq + 1,
            buffers,
            pending: v.pending.clone(),
            levels: v.levels.clone(),
        });
    }

    /// After a buffer was sealed: wake the flusher, or flush and merge here without background work.
    fn after_seal(self: &Arc<Self>) -> Result<()> {
        if self.rt.background {
            self.flush_cv.notify_one();
            Ok(())
        } else {
            self.flush_all_inline()?;
            self.merge_all_inline()
        }
    }

    /// Publishes a version whose active buffer is fresh and `active` sealed (if it is still the active one).
    pub(super) fn seal(self: &Arc<Self>, active: &Arc<MutableBuffer>) -> Result<()> {
        let st = self.work.lock();
        let v = self.current.load_full();
        if Arc::ptr_eq(&v.buffers[0], active) {
            self.publish_sealed(&v, None);
            // A buffer sealed before it is full (`quiesce`) must take no more writes: one that landed after
            // its flush settled it would be lost.
            active.close();
        }
        drop(st);
        // Not held into an inline flush: a tagging flush waits for the readers of older versions.
        drop(v);
        self.after_seal()
    }

    /// An empty buffer of the index's capacity: a reset spare if there is one.
    fn fresh_buffer(&self) -> Arc<MutableBuffer> {
        self.counters.buffers_sealed.fetch_add(1, Ordering::Relaxed);
        let free = self.spare_buffers.lock().1.pop();
        if let Some(b) = free {
            // Reset here, by the writer that is about to fill it: zeroing the key index brings it into this
            // core's cache, so the writer's index probes hit the cache instead of missing on lines another
            // core (the flusher, if it reset the buffer) holds. About 2 bytes per slot, once per buffer.
            b.reset();
            self.counters
                .buffers_recycled
                .fetch_add(1, Ordering::Relaxed);
            return b;
        }
        Arc::new(MutableBuffer::new(self.opts.buffer_capacity))
    }

    /// Bytes of the buffers kept for reuse.
    pub(super) fn spare_bytes(&self) -> usize {
        let spares = self.spare_buffers.lock();
        spares
            .0
            .iter()
            .chain(&spares.1)
            .map(|b| b.memory_bytes())
            .sum()
    }

    /// Keeps a flushed buffer for reuse, and resets the kept ones nobody reads any more.
    pub(super) fn recycle(&self, flushed: Arc<MutableBuffer>) {
        let mut spares = self.spare_buffers.lock();
        if flushed.capacity() == self.opts.buffer_capacity {
            spares.0.push(flushed);
        }
        let (held, ready) = &mut *spares;
        let mut i = 0;
        while i < held.len() {
            // Strong count 1: no version lists it and no reader cloned it; nobody can reach it any more.
            if Arc::strong_count(&held[i]) == 1 {
                let b = held.swap_remove(i);
                // As many as may be sealed at once: with the active one and the sealed ones, at most
                // 1 + 2 · max_sealed_buffers buffers (the memory plan of `tiered` counts that many).
                if ready.len() < self.rt.max_sealed_buffers.max(1) {
                    ready.push(b);
                }
            } else {
                i += 1;
            }
        }
        // Buffers pinned by long readers are not waited for: beyond a few, they are simply dropped.
        if held.len() > 2 * self.rt.max_sealed_buffers.max(1) {
            held.remove(0);
        }
    }
}
