//! Flushes: a sealed buffer becomes a pending shard (see the module doc of `core`).
//!
//! The flusher takes the oldest sealed buffer, waits until its last writers have published, and resolves it
//! into a sorted run: the last operation per key. For each key it must know whether an older live version
//! exists: the global key filter (`global_keys`) rules out almost every new key with one probe (the same
//! pass inserts the run's record keys), and only the keys it reports are looked up in the shards, newest
//! first, record and tombstone filters probed together and pipelined (`Version::lookup_shards_many`). Where an older live version
//! exists, the delete policy removes it — a tombstone in the new run, or a tag set in place. So at every
//! moment each key has at most one live record, and each tombstone and each tag stands for exactly one dead
//! record (exact counts follow). The run becomes a shard built for level 0 (its key filter filled in the
//! global filter's pass, with each key's filter bits computed once for both; its tombstone filter from the
//! hashes computed once per key) and is published as the newest pending shard, in the same version that drops the
//! buffer.
//!
//! Tags of a shard that a merge has replaced meanwhile would be lost: tags are set under the tag lock, and a
//! key whose record's shard is marked replaced is looked up again in the current version (see
//! `reconstruction::install` for the other half).
//!
//! Cost per flush of N_b operations: a sort of N_b (key, slot) pairs, one hash and one global filter cache
//! line per key, shard probes for the few candidates, and a shard build of N_b records.

use super::*;
use crate::algo::bloom::{BloomFilter, KeyHash};

impl<S: Shard> Shared<S> {
    pub(super) fn flusher_loop(self: Arc<Self>) {
        loop {
            {
                let mut st = self.work.lock();
                loop {
                    if st.shutdown {
                        return;
                    }
                    if self.current.load().buffers.len() > 1 {
                        break;
                    }
                    self.flush_cv.wait(&mut st);
                }
            }
            let flushed =
                threads::charged(&self.counters.flusher_cpu_nanos, || self.flush_oldest(true));
            match flushed {
                Ok(_) => {}
                Err(e) => {
                    self.fail(&e);
                    return;
                }
            }
            let _st = self.work.lock();
            self.merge_cv.notify_one();
            self.done_cv.notify_all();
        }
    }

    /// Flushes every sealed buffer (inline mode, or a writer helping a quiesce).
    pub(super) fn flush_all_inline(self: &Arc<Self>) -> Result<()> {
        while self.flush_oldest(false)? {}
        Ok(())
    }

    /// Flushes the oldest sealed buffer, if any; `background` says the flusher thread runs it (then it
    /// waits for the merger while `max_pending_shards` shards are pending). Returns whether it flushed.
    fn flush_oldest(self: &Arc<Self>, background: bool) -> Result<bool> {
        let _f = self.flush_lock.lock();
        let v = self.current.load_full();
        if v.buffers.len() < 2 {
            return Ok(false);
        }
        let oldest = v.buffers.last().expect("a sealed buffer").clone();
        drop(v);
        self.work.lock().flushing = true;
        let t = &self.throttling;
        let began = self.epoch.elapsed().as_nanos() as u64;
        t.flush_started.store(began.max(1), Ordering::Release);
        let r = if background {
            self.wait_for_pending_room()
        } else {
            Ok(())
        }
        .and_then(|()| self.flush_buffer(&oldest));
        t.flush_started.store(0, Ordering::Release);
        let took = (self.epoch.elapsed().as_nanos() as u64).saturating_sub(began);
        let old = t.flush_nanos.load(Ordering::Relaxed);
        t.flush_nanos.store(
            if old == 0 { took } else { (old * 3 + took) / 4 },
            Ordering::Relaxed,
        );
        self.work.lock().flushing = false;
        r?;
        self.recycle(oldest);
        Ok(true)
    }

    /// Waits while `max_pending_shards` shards wait for the merger.
    fn wait_for_pending_room(&self) -> Result<()> {
        let limit = self.factory.max_pending(self.rt.max_pending_shards).max(1);
        let mut waited: Option<Instant> = None;
        let mut st = self.work.lock();
        while self.current.load().pending.len() >= limit {
            self.check_failed()?;
            if st.shutdown {
                break;
            }
            if waited.is_none() {
                waited = Some(Instant::now());
                self.counters.flush_waits.fetch_add(1, Ordering::Relaxed);
            }
            self.merge_cv.notify_one();
            self.done_cv.wait_for(&mut st, Duration::from_millis(10));
        }
        if let Some(t) = waited {
            self.counters
                .flush_wait_nanos
                .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        }
        Ok(())
    }

    fn flush_buffer(self: &Arc<Self>, buffer: &Arc<MutableBuffer>) -> Result<()> {
        buffer.settle();
        let ops = buffer.resolved();
        let keys: Vec<u64> = ops.iter().map(|e| e.key).collect();
        let hashes: Vec<KeyHash> = keys.iter().map(|&k| BloomFilter::hash_u64(k)).collect();
        // The shard's record keys (puts) go into the global filter in the same pass (see `global_keys`),
        // and into the new shard's key filter: each key's filter bits are computed once for both.
        let puts = ops.iter().filter(|e| e.kind == OpKind::Put).count();
        let mut key_filter = BloomFilter::new(puts, self.opts.bloom_fpr)?;
        let candidates = self.global_keys.lock().candidates_inserting(
            &hashes,
            |j| ops[j].kind == OpKind::Put,
            Some(&mut key_filter),
        );
        let c = &self.counters;
        c.resolved_keys
            .fetch_add(keys.len() as u64, Ordering::Relaxed);
        c.candidate_keys
            .fetch_add(candidates.len() as u64, Ordering::Relaxed);
        let base = self.current.load_full();
        let older = base.lookup_shards_many(&keys, &hashes, candidates)?;
        let mut run = ColumnRun::with_capacity(puts, 0, self.opts.weighted);
        let mut tombstone_hashes: Vec<KeyHash> = Vec::new();
        let mut to_tag: Vec<(Arc<ShardSlot<S>>, usize, u64)> = Vec::new();
        for ((e, older), &hash) in ops.iter().zip(older).zip(&hashes) {
            if let Some((slot, i)) = older {
                match self.opts.delete_policy {
                    DeletePolicy::Tombstone => {
                        run.tombstones.push(e.key);
                        tombstone_hashes.push(hash);
                    }
                    DeletePolicy::Tagging => to_tag.push((slot.clone(), i, e.key)),
                }
            }
            if e.kind == OpKind::Put {
                run.push_record(&Record {
                    key: e.key,
                    value: e.value,
                    weight: e.weight,
                });
            }
        }
        drop(base);
        if !to_tag.is_empty() {
            self.set_tags(&to_tag)?;
        }
        let slot = if run.entries() > 0 {
            Some(self.build_slot_filtered(run, 0, key_filter, &tombstone_hashes)?)
        } else {
            None
        };
        {
            let mut st = self.work.lock();
            if !to_tag.is_empty() {
                // The tags may have pushed a level over δ.
                st.enforce_requested = true;
            }
            let cur = self.current.load_full();
            let buffers = cur
                .buffers
                .iter()
                .filter(|b| !Arc::ptr_eq(b, buffer))
                .cloned()
                .collect();
            let mut pending = cur.pending.clone();
            pending.extend(slot);
            self.publish(Version {
                seq: cur.seq + 1,
                buffers,
                pending,
                levels: cur.levels.clone(),
            });
        }
        self.counters.flushes.fetch_add(1, Ordering::Relaxed);
        // A rebuild begins only here, after the publication: its version has this shard.
        let mut g = self.global_keys.lock();
        if g.wants_rebuild() {
            g.begin_rebuild();
            drop(g);
            self.start_key_filter_rebuild()?;
        }
        Ok(())
    }

    /// Tags the older versions a flush deletes (tagging policy). No reader may see a tag without the buffer
    /// operation that explains it, so first every reader of an older version must be gone.
    fn set_tags(&self, to_tag: &[(Arc<ShardSlot<S>>, usize, u64)]) -> Result<()> {
        self.wait_for_earlier_readers();
        let _t = self.tag_lock.lock();
        let mut moved: Option<Arc<Version<S>>> = None;
        for (slot, i, key) in to_tag {
            if !slot.is_replaced() {
                slot.tags.set(*i);
                continue;
            }
            // A merge that read this shard was published since the lookup: tag the key's live record where
            // it is now (the tag lock keeps merges from publishing meanwhile).
            let cur = moved.get_or_insert_with(|| self.current.load_full());
            if let Some((now, j)) = cur.lookup_shards(*key, 0)? {
                now.tags.set(j);
            }
        }
        Ok(())
    }

    /// Rebuilds the global key filter over a current version: on a thread of its own in background mode,
    /// in the caller otherwise. `begin_rebuild` has been called.
    fn start_key_filter_rebuild(self: &Arc<Self>) -> Result<()> {
        if !self.rt.background {
            return self.rebuild_key_filter();
        }
        let mut slot = self.rebuild_thread.lock();
        if let Some(h) = slot.take() {
            // The previous rebuild finished (only one runs at a time): collect its thread.
            let _ = h.join();
        }
        self.work.lock().rebuilding = true;
        let s = self.clone();
        let spawned = std::thread::Builder::new()
            .name("strata-dyn-keys".into())
            .spawn(move || {
                threads::lower_priority(threads::nice_step(1, threads::KEY_FILTER_NICE));
                let rebuilt =
                    threads::charged(&s.counters.key_filter_cpu_nanos, || s.rebuild_key_filter());
                if let Err(e) = rebuilt {
                    s.fail(&e);
                }
                let mut st = s.work.lock();
                st.rebuilding = false;
                s.done_cv.notify_all();
            });
        match spawned {
            Ok(h) => {
                *slot = Some(h);
                Ok(())
            }
            Err(_) => {
                // No thread: rebuild here.
                self.work.lock().rebuilding = false;
                self.rebuild_key_filter()
            }
        }
    }

    fn rebuild_key_filter(&self) -> Result<()> {
        let (fpr, min) = {
            let g = self.global_keys.lock();
            (g.fpr(), g.min_capacity())
        };
        let v = self.current.load_full();
        match GlobalKeys::build(&v, fpr, min) {
            Ok(r) => {
                drop(v);
                self.global_keys.lock().finish_rebuild(r);
                self.counters
                    .key_filter_rebuilds
                    .fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err(e) => {
                self.global_keys.lock().abort_rebuild();
                Err(e)
            }
        }
    }
}
