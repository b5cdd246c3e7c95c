//! Merges: the merger's tasks of [`Shared`](super::Shared) — placing pending shards, enforcing δ, compacting.
//!
//! One task at a time (the `recon` lock). A task starts from the current version's levels, runs the layout
//! policy on a private copy (`layout::place` for the oldest pending shard, then `layout::enforce_delete_bound`;
//! or a compaction), building merged shards through the factory, and publishes the result with
//! [`install`](Shared::install): the new levels, the pending shards minus the one placed, and whatever the
//! flusher published meanwhile (newer buffers and pending shards), so flushes never wait for a merge.
//!
//! ## Tags set during a merge
//! Under tagging a flush may tag a record of a shard while a merge reads that shard: the merge may or may not
//! have seen the tag, and once the merge is published the old shard is gone. So a task keeps a copy of the tag
//! bits of every shard it merges, taken before the merge reads them, and `install` (under the tag lock, which
//! the flusher holds while it sets tags) carries every tag set since onto the merged records: the tagged
//! record was its key's only live record, so the newest record of the key in the task's levels is it (or, if
//! the merge saw the tag and dropped it, an older record of the key, tagged long ago). Then it marks the merged
//! shards replaced, and a flush that still holds one of them looks its key up again instead (`flush`).

use super::*;
use crate::algo::bloom::{BloomFilter, KeyHash};

/// The shards a task merged, with a copy of their tag bits (tagging only) taken before the merge read them.
type MergeLog<S> = Vec<(Arc<ShardSlot<S>>, Option<Vec<u64>>)>;

impl<S: Shard> Shared<S> {
    pub(super) fn merger_loop(self: Arc<Self>) {
        threads::lower_priority(threads::nice_step(0, threads::MERGER_NICE));
        loop {
            {
                let mut st = self.work.lock();
                loop {
                    if st.shutdown {
                        return;
                    }
                    if !self.current.load().pending.is_empty()
                        || st.compact_requested
                        || st.enforce_requested
                    {
                        st.merging = true;
                        break;
                    }
                    self.merge_cv.wait(&mut st);
                }
            }
            let r = threads::charged(&self.counters.merger_cpu_nanos, || self.merge_once());
            let mut st = self.work.lock();
            st.merging = false;
            self.done_cv.notify_all();
            drop(st);
            if let Err(e) = r {
                self.fail(&e);
                return;
            }
        }
    }

    /// Places every pending shard and enforces δ (inline mode).
    pub(super) fn merge_all_inline(&self) -> Result<()> {
        loop {
            let more = {
                let st = self.work.lock();
                !self.current.load().pending.is_empty() || st.enforce_requested
            };
            if !more {
                return Ok(());
            }
            self.merge_once()?;
        }
    }

    /// One merger task: place the oldest pending shard, or enforce δ after tags, or a requested compaction.
    fn merge_once(&self) -> Result<()> {
        let _r = self.recon.lock();
        let (compact, enforce) = {
            let mut st = self.work.lock();
            // A placement enforces δ too; tags set after this point ask again.
            let enforce = std::mem::take(&mut st.enforce_requested);
            (std::mem::take(&mut st.compact_requested), enforce)
        };
        let base = self.current.load_full();
        let incoming = base.pending.first().cloned();
        if incoming.is_none() && !compact && !enforce {
            return Ok(());
        }
        let mut levels = base.levels.clone();
        drop(base);
        let mut log: MergeLog<S> = Vec::new();
        let mut merge = |inputs: &[Arc<ShardSlot<S>>], bottom, level| {
            self.merge(inputs, bottom, level, &mut log)
        };
        if let Some(slot) = &incoming {
            layout::place(&mut levels, slot.clone(), &self.opts, &mut merge)?;
        } else if compact && let Some(i) = layout::most_deleted_level(&levels) {
            layout::compact_level(&mut levels, i, &self.opts, &mut merge)?;
            self.counters.compactions.fetch_add(1, Ordering::Relaxed);
        }
        let compactions = layout::enforce_delete_bound(&mut levels, &self.opts, &mut merge)?;
        self.counters
            .compactions
            .fetch_add(compactions as u64, Ordering::Relaxed);
        if compact && incoming.is_some() {
            // Not served by this task: ask again.
            self.work.lock().compact_requested = true;
        }
        self.install(incoming.map(|s| s.id), levels, log)
    }

    /// Compacts the level with the largest share of deleted entries, synchronously. Returns whether it did
    /// anything.
    pub(super) fn compact_worst(&self) -> Result<bool> {
        let _r = self.recon.lock();
        let base = self.current.load_full();
        let Some(i) = layout::most_deleted_level(&base.levels) else {
            return Ok(false);
        };
        let mut levels = base.levels.clone();
        drop(base);
        let mut log: MergeLog<S> = Vec::new();
        let mut merge = |inputs: &[Arc<ShardSlot<S>>], bottom, level| {
            self.merge(inputs, bottom, level, &mut log)
        };
        layout::compact_level(&mut levels, i, &self.opts, &mut merge)?;
        layout::enforce_delete_bound(&mut levels, &self.opts, &mut merge)?;
        self.counters.compactions.fetch_add(1, Ordering::Relaxed);
        self.install(None, levels, log)?;
        Ok(true)
    }

    /// Publishes a task's `levels` (and drops the pending shard `placed` from the pending ones), carrying
    /// the tags set during its merges onto the merged records (see the module doc), and notes the merged
    /// shards' ids as replaced (their files may go at the next checkpoint).
    fn install(&self, placed: Option<u64>, levels: Vec<Level<S>>, log: MergeLog<S>) -> Result<()> {
        let _t = self.tag_lock.lock();
        for (input, before) in &log {
            self.replaced_ids.lock().push(input.id);
            let Some(before) = before else {
                continue;
            };
            let now = input.tags.bits();
            for (w, (&a, &b)) in now.iter().zip(before).enumerate() {
                let mut fresh = a & !b;
                while fresh != 0 {
                    let i = w * 64 + fresh.trailing_zeros() as usize;
                    fresh &= fresh - 1;
                    let key = input.shard.key_at(i)?;
                    carry_tag(&levels, key)?;
                }
            }
            input.mark_replaced();
        }
        let _st = self.work.lock();
        let cur = self.current.load_full();
        let mut pending = cur.pending.clone();
        if let Some(id) = placed {
            debug_assert_eq!(pending.first().map(|s| s.id), Some(id));
            pending.retain(|s| s.id != id);
        }
        self.publish(Version {
            seq: cur.seq + 1,
            buffers: cur.buffers.clone(),
            pending,
            levels,
        });
        Ok(())
    }

    /// Builds a shard of `run` for `level` with `key_filter` (over its record keys, sized for them) and a
    /// tombstone filter built from the hashes of its tombstones (the flush has them already: each key is
    /// hashed once).
    pub(super) fn build_slot_filtered(
        &self,
        run: ColumnRun,
        level: usize,
        key_filter: BloomFilter,
        tombstone_hashes: &[KeyHash],
    ) -> Result<Arc<ShardSlot<S>>> {
        debug_assert_eq!(run.tombstones.len(), tombstone_hashes.len());
        let tomb_filter = if tombstone_hashes.is_empty() {
            None
        } else {
            let mut f = BloomFilter::new(tombstone_hashes.len(), self.opts.bloom_fpr)?;
            f.insert_hashes(tombstone_hashes.iter().copied());
            Some(f)
        };
        self.build_slot_with(run, level, key_filter, tomb_filter)
    }

    /// Builds a shard of `run` for `level` with the filters given.
    fn build_slot_with(
        &self,
        run: ColumnRun,
        level: usize,
        key_filter: BloomFilter,
        tomb_filter: Option<BloomFilter>,
    ) -> Result<Arc<ShardSlot<S>>> {
        let id = self.next_shard_id.fetch_add(1, Ordering::AcqRel);
        let opts = BuildOptions {
            weighted: self.opts.weighted,
            threads: self.rt.reconstruction_threads.max(1),
        };
        let shard = self.factory.build_columns(
            id,
            run,
            level,
            opts,
            (&key_filter, tomb_filter.as_ref()),
        )?;
        Ok(Arc::new(ShardSlot::from_parts(
            id,
            shard,
            key_filter,
            tomb_filter,
        )))
    }

    /// The merge step the layout policies call. A lone input that would come out unchanged (not the
    /// bottom merge of a shard with deleted entries) is moved as it is if the factory keeps it at `level`;
    /// anything else is merged and built for `level` by the factory (and logged, under tagging).
    fn merge(
        &self,
        inputs: &[Arc<ShardSlot<S>>],
        bottom: bool,
        level: usize,
        log: &mut MergeLog<S>,
    ) -> Result<Option<Arc<ShardSlot<S>>>> {
        if let [only] = inputs
            && !(bottom && only.deleted() > 0)
            && self.factory.keeps(&only.shard, level)
        {
            return Ok(Some(only.clone()));
        }
        let tagging = self.opts.delete_policy == DeletePolicy::Tagging;
        log.extend(
            inputs
                .iter()
                .map(|s| (s.clone(), tagging.then(|| s.tags.bits()))),
        );
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
        if shard.resident() && inputs.iter().any(|s| !s.shard.resident()) {
            // Keys the global key filter may not have: it covers resident shards only.
            let mut hashes = Vec::with_capacity(shard.len());
            for i in 0..shard.len() {
                hashes.push(BloomFilter::hash_u64(shard.key_at(i)?));
            }
            self.global_keys.lock().insert(hashes.iter().copied());
        }
        Ok(Some(Arc::new(ShardSlot::from_parts(
            id,
            shard,
            key_filter,
            tomb_filter,
        ))))
    }
}

/// Tags the newest record of `key` in `levels` if it is not tagged (see the module doc).
fn carry_tag<S: Shard>(levels: &[Level<S>], key: u64) -> Result<()> {
    for slot in levels.iter().flat_map(|l| l.iter().rev()) {
        if slot.may_contain_key(key)
            && let Some(i) = slot.shard.find(key)?
        {
            slot.tags.set(i);
            return Ok(());
        }
    }
    Ok(())
}
