//! Reconstruction: the worker loop, flushes and merges of [`Shared`](super::Shared).
//!
//! The worker takes the oldest sealed buffer, waits until its last writers have published, and resolves it
//! into a sorted run: the last operation per key. For each key it probes the shards (newest first, Bloom
//! filtered) for a live older version; if there is one, the delete policy removes it — a tombstone in the new
//! run, or a tag set in place. So at every moment each key has at most one live record, and each tombstone
//! and each tag stands for exactly one dead record (exact counts follow). The run becomes a shard, the layout
//! policy places it (see `layout`), δ is enforced, and the new version is swapped in atomically.
//!

use super::*;

impl<S: Shard> Shared<S> {
    pub(super) fn worker_loop(self: Arc<Self>) {
        loop {
            {
                let mut st = self.work.lock();
                loop {
                    if st.shutdown {
                        return;
                    }
                    if self.current.load().buffers.len() > 1 || st.compact_requested {
                        break;
                    }
                    self.work_cv.wait(&mut st);
                }
            }
            if let Err(e) = self.reconstruct_once() {
                self.fail(&e);
                return;
            }
            self.done_cv.notify_all();
        }
    }

    fn set_busy(&self, busy: bool) {
        self.work.lock().busy = busy;
    }

    /// One unit of reconstruction work: flush the oldest sealed buffer, or else a requested compaction.
    pub(super) fn reconstruct_once(&self) -> Result<()> {
        let _r = self.recon.lock();
        self.set_busy(true);
        let r = (|| {
            let v = self.current.load_full();
            if v.buffers.len() > 1 {
                let oldest = v.buffers.last().expect("a sealed buffer").clone();
                drop(v);
                self.flush(&oldest)
            } else {
                let requested = std::mem::take(&mut self.work.lock().compact_requested);
                if requested {
                    self.compact_worst()?;
                }
                Ok(())
            }
        })();
        self.set_busy(false);
        self.done_cv.notify_all();
        r
    }

    fn build_slot(&self, run: SortedRun, level: usize) -> Result<Arc<ShardSlot<S>>> {
        let id = self.next_shard_id.fetch_add(1, Ordering::AcqRel);
        let opts = BuildOptions {
            weighted: self.opts.weighted,
            threads: self.rt.reconstruction_threads.max(1),
        };
        let (key_filter, tomb_filter) = filters_for_run(&run, self.opts.bloom_fpr)?;
        let shard =
            self.factory
                .build(id, run, level, opts, (&key_filter, tomb_filter.as_ref()))?;
        Ok(Arc::new(ShardSlot::from_parts(
            id,
            shard,
            key_filter,
            tomb_filter,
        )))
    }

    /// The merge step the layout policies call. A lone input that would come out unchanged (not the
    /// bottom merge of a shard with deleted entries) is moved as it is if the factory keeps it at `level`;
    /// anything else is merged and built for `level` by the factory.
    fn merge(
        &self,
        inputs: &[Arc<ShardSlot<S>>],
        bottom: bool,
        level: usize,
    ) -> Result<Option<Arc<ShardSlot<S>>>> {
        if let [only] = inputs
            && !(bottom && only.deleted() > 0)
            && self.factory.keeps(&only.shard, level)
        {
            return Ok(Some(only.clone()));
        }
        let views: Vec<MergeInput<'_, S>> = inputs
            .iter()
            .map(|s| MergeInput {
                shard: &s.shard,
                tags: &s.tags,
            })
            .collect();
        let id = self.next_shard_id.fetch_add(1, Ordering::AcqRel);
        let opts = BuildOptions {
            weighted: self.opts.weighted,
            threads: self.rt.reconstruction_threads.max(1),
        };
        let built =
            self.factory
                .build_merged(id, &views, bottom, level, opts, self.opts.bloom_fpr)?;
        self.counters.merges.fetch_add(1, Ordering::Relaxed);
        let Some((shard, (key_filter, tomb_filter))) = built else {
            return Ok(None);
        };
        self.counters.merged_entries.fetch_add(
            (shard.len() + shard.tombstone_count()) as u64,
            Ordering::Relaxed,
        );
        Ok(Some(Arc::new(ShardSlot::from_parts(
            id,
            shard,
            key_filter,
            tomb_filter,
        ))))
    }

    /// Flushes a sealed buffer into the levels.
    fn flush(&self, buffer: &Arc<MutableBuffer>) -> Result<()> {
        let t = &self.throttling;
        let began = self.epoch.elapsed().as_nanos() as u64;
        t.flush_started.store(began.max(1), Ordering::Release);
        let r = self.flush_buffer(buffer);
        t.flush_started.store(0, Ordering::Release);
        let took = (self.epoch.elapsed().as_nanos() as u64).saturating_sub(began);
        let old = t.flush_nanos.load(Ordering::Relaxed);
        t.flush_nanos.store(
            if old == 0 { took } else { (old * 3 + took) / 4 },
            Ordering::Relaxed,
        );
        r
    }

    fn flush_buffer(&self, buffer: &Arc<MutableBuffer>) -> Result<()> {
        buffer.settle();
        let ops = buffer.resolved();
        let base = self.current.load_full();
        // Resolve against the shards (only this worker changes them, so `base.levels` stays current).
        let mut run = SortedRun {
            records: Vec::with_capacity(ops.len()),
            tombstones: Vec::new(),
        };
        let mut to_tag: Vec<(Arc<ShardSlot<S>>, usize)> = Vec::new();
        let keys: Vec<u64> = ops.iter().map(|e| e.key).collect();
        let older = base.lookup_shards_many(&keys)?;
        for (e, older) in ops.iter().zip(older) {
            if let Some((slot, i)) = older {
                match self.opts.delete_policy {
                    DeletePolicy::Tombstone => run.tombstones.push(e.key),
                    DeletePolicy::Tagging => to_tag.push((slot.clone(), i)),
                }
            }
            if e.kind == OpKind::Put {
                run.records.push(Record {
                    key: e.key,
                    value: e.value,
                    weight: if self.opts.weighted { e.weight } else { 1.0 },
                });
            }
        }
        let mut levels = base.levels.clone();
        drop(base);
        if !to_tag.is_empty() {
            // No reader may see a tag without the buffer operation that explains it.
            self.wait_for_earlier_readers();
            for (slot, i) in &to_tag {
                slot.tags.set(*i);
            }
        }
        if run.entries() > 0 {
            let slot = self.build_slot(run, 0)?;
            layout::place(
                &mut levels,
                slot,
                &self.opts,
                &mut |inputs, bottom, level| self.merge(inputs, bottom, level),
            )?;
        }
        let compactions =
            layout::enforce_delete_bound(&mut levels, &self.opts, &mut |inputs, bottom, level| {
                self.merge(inputs, bottom, level)
            })?;
        self.counters
            .compactions
            .fetch_add(compactions as u64, Ordering::Relaxed);
        self.counters.flushes.fetch_add(1, Ordering::Relaxed);
        let st = self.work.lock();
        let cur = self.current.load_full();
        let buffers = cur
            .buffers
            .iter()
            .filter(|b| !Arc::ptr_eq(b, buffer))
            .cloned()
            .collect();
        self.publish(Version {
            seq: cur.seq + 1,
            buffers,
            levels,
        });
        drop(st);
        Ok(())
    }

    /// Compacts the level with the largest share of deleted entries. Returns whether it did anything.
    pub(super) fn compact_worst(&self) -> Result<bool> {
        let base = self.current.load_full();
        let Some(i) = layout::most_deleted_level(&base.levels) else {
            return Ok(false);
        };
        let mut levels = base.levels.clone();
        drop(base);
        let mut merge =
            |inputs: &[Arc<ShardSlot<S>>], bottom, level| self.merge(inputs, bottom, level);
        layout::compact_level(&mut levels, i, &self.opts, &mut merge)?;
        layout::enforce_delete_bound(&mut levels, &self.opts, &mut merge)?;
        self.counters.compactions.fetch_add(1, Ordering::Relaxed);
        let _st = self.work.lock();
        let cur = self.current.load_full();
        self.publish(Version {
            seq: cur.seq + 1,
            buffers: cur.buffers.clone(),
            levels,
        });
        Ok(true)
    }
}
