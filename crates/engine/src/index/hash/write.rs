//! The write path under a bucket's lock: find the key's visible version, make room in the tail, append the
//! log record (the acknowledgement), stage the new version in the D-bucket, and write the D-bucket back as
//! one whole XPLine when it is full or when log space needs it. A delete of a committed version is done in
//! place instead: the tombstone bit of its slot in its chunk's commit word (`delete_in_place`).
//!
//! No PM is read before a write unless the key's 16-bit fingerprint matches a live slot outside the tail
//! (an update, or ≈ live slots / 65,536 false matches): a new key costs a DRAM scan only.

use super::bucket::{Shape, Writer};
use super::generation::{Generation, commit_word};
use super::index::HashIndex;
use super::layout::{CHUNK_SLOTS, ChunkHead, chunk_image, corruption, fingerprint, hash};
use super::log::{Log, LogStats};
use crate::error::Result;
use crate::storage::pm::Pm;

/// Bits of a pin that hold the log position (the log number is above them).
pub(super) const PIN_LSN: u64 = (1 << 56) - 1;

/// Records ahead whose buckets log-space freeing asks the CPU for (`HashIndex::free_log_space`).
const FREE_AHEAD: u64 = 8;

/// What became of a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Applied {
    /// Done; the key's previous visible value.
    Done(Option<u64>),
    /// The generation was replaced by a doubling: retry in the next one.
    Moved,
    /// Done here, but the bucket of the next generation a doubling builds has no room for the mirrored
    /// write: finish the doubling, retry there (see `grow`).
    MirrorFull,
    /// The bucket has no room left (chain and pool full of live records): double the table, retry.
    NeedGrow,
}

/// Where a write comes from.
pub(super) enum Source<'a> {
    /// A new write: its record is appended to this log.
    Live(&'a mut Log),
    /// A record replayed by recovery: already in log `pin >> 56` at position `pin & PIN_LSN`.
    Replay {
        pin: u64,
        seq: u64,
        /// Redo area for a compaction.
        scratch: u64,
        stats: &'a mut LogStats,
    },
}

impl Source<'_> {
    fn scratch(&self) -> u64 {
        match self {
            Source::Live(log) => log.id,
            Source::Replay { scratch, .. } => *scratch,
        }
    }
    fn stats(&mut self) -> &mut LogStats {
        match self {
            Source::Live(log) => &mut log.stats,
            Source::Replay { stats, .. } => stats,
        }
    }
}

/// Whether the tail has room after [`HashIndex::make_room`].
enum Room {
    Ready,
    Compacted,
    NeedGrow,
}

impl<P: Pm> HashIndex<P> {
    /// The live slot holding `key` in bucket `b` and its value (under the bucket's lock).
    pub(super) fn find_locked(
        &self,
        g: &Generation,
        b: u64,
        fp: u16,
        key: u64,
    ) -> Result<Option<(usize, u64)>> {
        let bucket = &g.buckets[b as usize];
        let shape = bucket.shape();
        let found = bucket.find_live(&g.pool, shape, fp, |p| {
            match g.slot(&self.pm, b, bucket, shape, p) {
                Ok((k, v)) if k == key => Some(Ok((p, v))),
                Ok(_) => None,
                Err(e) => Some(Err(e)),
            }
        });
        found.transpose()
    }

    /// Applies a put (`Some`) or delete (`None`) of `key` to bucket `b` of `g`, whose lock is held as `w`.
    /// A delete of an absent key writes nothing.
    pub(super) fn apply(
        &self,
        g: &Generation,
        b: u64,
        w: &mut Writer,
        mut src: Source<'_>,
        key: u64,
        value: Option<u64>,
    ) -> Result<Applied> {
        let bucket = &g.buckets[b as usize];
        let fp = fingerprint(hash(key));
        // A staged entry of the key (put or tombstone) is replaced; else a live committed version is killed.
        let shape = bucket.shape();
        let staged = (shape.committed()..shape.tail_used()).find(|&i| bucket.tail_key(i) == key);
        let mut found = match staged {
            Some(i) => {
                let p = shape.tail_start() + i;
                bucket
                    .is_live(&g.pool, p)
                    .then(|| (p, bucket.tail_slot(i).1))
            }
            None => self.find_locked(g, b, fp, key)?,
        };
        let old = found.map(|(_, v)| v);
        if value.is_none() && found.is_none() {
            return Ok(Applied::Done(None));
        }
        // A live write's delete of a committed version (`find_locked` finds only live slots, and a live
        // slot of the key in the D-bucket would be `staged`): in place, in the slot's commit word.
        if value.is_none()
            && staged.is_none()
            && let (Source::Live(log), Some((p, _))) = (&mut src, found)
        {
            self.delete_in_place(g, b, w, p, &mut log.stats)?;
            return Ok(Applied::Done(old));
        }
        if staged.is_none() && shape.tail_used() == CHUNK_SLOTS {
            match self.make_room(g, b, w, src.scratch(), src.stats())? {
                Room::Ready => {}
                Room::Compacted => found = self.find_locked(g, b, fp, key)?,
                Room::NeedGrow => return Ok(Applied::NeedGrow),
            }
        }
        let (seq, pin) = match &mut src {
            Source::Live(log) => {
                let seq = w.seq + 1;
                let lsn = log.append(&self.pm, key, value, seq, b)?;
                (seq, log.id << 56 | lsn)
            }
            Source::Replay { pin, seq, .. } => (*seq, *pin),
        };
        w.seq = w.seq.max(seq);
        bucket.edit(|| {
            let shape = bucket.shape();
            let start = shape.tail_start();
            let (committed, mut staged_n) = (shape.committed(), shape.staged());
            let mut shadows = false;
            match (staged, found) {
                (Some(i), _) => {
                    shadows = w.shadows >> i & 1 == 1;
                    self.remove_staged(g, bucket, w, shape, i);
                    staged_n -= 1;
                }
                (None, Some((p, _))) => {
                    bucket.set_live(&g.pool, p, false);
                    shadows = true;
                }
                (None, None) => {}
            }
            // A delete that cancels a staged put still stages a tombstone: the put's record may sit in
            // another thread's log whose tail has not passed it, and replay would bring it back unless this
            // record stays pinned until a chunk commit (whose sequence number covers both) holds it.
            if value.is_some() || shadows || staged.is_some() {
                let i = committed + staged_n;
                let bit = 1u16 << i;
                bucket.set_tail_slot(i, key, value.unwrap_or(0));
                bucket.set_fp(&g.pool, start + i, fp);
                bucket.set_live(&g.pool, start + i, value.is_some());
                w.tail_tomb = if value.is_some() {
                    w.tail_tomb & !bit
                } else {
                    w.tail_tomb | bit
                };
                w.shadows = if shadows {
                    w.shadows | bit
                } else {
                    w.shadows & !bit
                };
                w.pins[i] = pin;
                staged_n += 1;
            }
            bucket.set_shape(Shape::new(shape.chunks(), committed, staged_n));
        });
        let shape = bucket.shape();
        if shape.tail_used() == CHUNK_SLOTS || shape.staged() >= self.dbucket_slots {
            self.flush(g, b, w, src.stats())?;
        }
        Ok(Applied::Done(old))
    }

    /// Deletes the committed live slot `p` of bucket `b` (lock held as `w`) in place: sets the slot's
    /// tombstone bit in its chunk's commit word — one 8 B store, written back and fenced, the
    /// acknowledgement — then clears its live bit. Recovery keeps the newest version of each key, and a
    /// tombstone hides it (and every older one), so the key stays deleted; no log record, no D-bucket slot,
    /// and no later compaction for it to cause beyond the dead slot. The commit word shares the slot's
    /// XPLine, which the delete just read to confirm the key.
    fn delete_in_place(
        &self,
        g: &Generation,
        b: u64,
        w: &mut Writer,
        p: usize,
        stats: &mut LogStats,
    ) -> Result<()> {
        let bucket = &g.buckets[b as usize];
        let shape = bucket.shape();
        let (pos, i) = (p / CHUNK_SLOTS, p % CHUNK_SLOTS);
        let off = g.chunk_off(b, bucket, pos);
        let in_tail = pos == shape.tail();
        let head = if in_tail {
            w.tail_head
        } else {
            ChunkHead(self.pm.load_u64_atomic(off)?)
        };
        head.validate(off)?;
        let bit = 1u16 << i;
        if i >= head.count() || head.tomb() & bit != 0 {
            return Err(corruption(
                off,
                format!("bucket {b}: live slot {p} is not a committed put in its chunk"),
            ));
        }
        let new = ChunkHead::new(head.count(), head.tomb() | bit, head.seq());
        commit_word(&self.pm, off, new.0)?;
        if in_tail {
            w.tail_head = new;
            w.tail_tomb |= bit;
        }
        bucket.edit(|| bucket.set_live(&g.pool, p, false));
        stats.in_place_deletes += 1;
        Ok(())
    }

    /// Removes staged tail slot `i`, moving the later staged slots down one (they stay in sequence order).
    fn remove_staged(
        &self,
        g: &Generation,
        bucket: &super::bucket::Bucket,
        w: &mut Writer,
        shape: Shape,
        i: usize,
    ) {
        let start = shape.tail_start();
        let last = shape.tail_used() - 1;
        for j in i..last {
            let (k, v) = bucket.tail_slot(j + 1);
            bucket.set_tail_slot(j, k, v);
            bucket.set_fp(&g.pool, start + j, bucket.fp(&g.pool, start + j + 1));
            bucket.set_live(&g.pool, start + j, bucket.is_live(&g.pool, start + j + 1));
            w.pins[j] = w.pins[j + 1];
        }
        let keep = |bits: u16| {
            let low = bits & ((1 << i) - 1);
            let high = (bits >> (i + 1)) << i;
            low | high
        };
        w.tail_tomb = keep(w.tail_tomb);
        w.shadows = keep(w.shadows);
        bucket.set_live(&g.pool, start + last, false);
    }

    /// Writes bucket `b`'s D-bucket to its tail chunk: the whole tail (committed slots rewritten unchanged
    /// from DRAM, staged ones added) as one aligned non-temporal XPLine write under the old commit word,
    /// a fence, then the new commit word (count, tombstones, the bucket's sequence number), persisted.
    /// A crash before the commit leaves the new slots invisible; their records are still in the logs.
    pub(super) fn flush(
        &self,
        g: &Generation,
        b: u64,
        w: &mut Writer,
        stats: &mut LogStats,
    ) -> Result<()> {
        let bucket = &g.buckets[b as usize];
        let shape = bucket.shape();
        if shape.staged() == 0 {
            return Ok(());
        }
        let pos = shape.tail();
        let used = shape.tail_used();
        let off = g.chunk_off(b, bucket, pos);
        if w.tail_head.count() == 0 && pos < g.layout.home_chunks() {
            // A home chunk's space may hold a stale commit word from an older generation: zero it durably
            // first, so that a torn write below never pairs it with this chunk's identity.
            commit_word(&self.pm, off, 0)?;
        }
        let mut slots = [(0u64, 0u64); CHUNK_SLOTS];
        for (i, s) in slots.iter_mut().enumerate().take(used) {
            *s = bucket.tail_slot(i);
        }
        let img = chunk_image(w.tail_head, g.tag(self.geo.nonce, b, pos), &slots[..used]);
        self.pm.write_nt(off, &img)?;
        self.pm.fence();
        let head = ChunkHead::new(used, w.tail_tomb & ((1 << used) - 1), w.seq);
        commit_word(&self.pm, off, head.0)?;
        stats.flushes += 1;
        if shape.committed() > 0 {
            stats.partial_flushes += 1;
        }
        w.tail_head = head;
        w.shadows = 0;
        bucket.set_shape(Shape::new(shape.chunks(), used, 0));
        Ok(())
    }

    /// Gives a full tail (all committed) a successor: the next home chunk, a pool chunk, or room made by
    /// compacting the bucket (when a quarter of its slots are dead, or as the last resort).
    fn make_room(
        &self,
        g: &Generation,
        b: u64,
        w: &mut Writer,
        scratch: u64,
        stats: &mut LogStats,
    ) -> Result<Room> {
        let bucket = &g.buckets[b as usize];
        let mut compacted = false;
        loop {
            let shape = bucket.shape();
            if shape.tail_used() < CHUNK_SLOTS {
                return Ok(if compacted {
                    Room::Compacted
                } else {
                    Room::Ready
                });
            }
            let chunks = shape.chunks();
            let start_next = |w: &mut Writer| {
                *w = Writer {
                    seq: w.seq,
                    ..Writer::default()
                };
                bucket.edit(|| bucket.set_shape(Shape::new(chunks + 1, 0, 0)));
            };
            if chunks < g.layout.home_chunks() {
                start_next(w);
                continue;
            }
            let fill = shape.fill() as u64;
            let dead = fill - bucket.live_count(&g.pool);
            if !compacted && dead > 0 && dead * 4 >= fill {
                self.compact(g, b, w, scratch, stats)?;
                compacted = true;
                continue;
            }
            if chunks < g.layout.max_chain()
                && let Some(c) = g.pool.free.lock().pop()
            {
                bucket.edit(|| bucket.set_overflow(&g.pool, chunks, c));
                start_next(w);
                stats.overflow_chunks += 1;
                continue;
            }
            if !compacted && dead > 0 {
                self.compact(g, b, w, scratch, stats)?;
                compacted = true;
                continue;
            }
            return Ok(Room::NeedGrow);
        }
    }

    /// Frees log space a step at a time: once `log`'s ring is 7/8 full, writes back every D-bucket that
    /// holds one of the ring's oldest `cap / 64` records (at least one), then persists the new tail. So a
    /// write pays for at most a 64th of the ring (a full ring's older half at once stalled the write that
    /// found it full for tens of milliseconds), the ring stays about 7/8 full (records stay staged longer,
    /// D-buckets are written back fuller) and an append always finds room.
    pub(super) fn free_log_space(&self, g: &Generation, log: &mut Log) -> Result<()> {
        let cap = log.capacity();
        if log.head - log.durable_tail < cap - cap / 8 {
            return Ok(());
        }
        let target = log.durable_tail + (cap / 64).max(1);
        let mut last = u32::MAX;
        // Consecutive records belong to random buckets, each a cache miss: ask for the buckets
        // `FREE_AHEAD` records ahead, so that the misses overlap instead of following one another (they
        // were a fifth of an insert's time).
        let ahead = |lsn: u64| {
            if lsn < target {
                let b = log.ring[(lsn % cap) as usize];
                g.buckets[b as usize].prefetch_writer();
            }
        };
        for lsn in log.durable_tail..log.durable_tail + FREE_AHEAD {
            ahead(lsn);
        }
        for lsn in log.durable_tail..target {
            ahead(lsn + FREE_AHEAD);
            let b = log.ring[(lsn % cap) as usize];
            if b == last {
                continue;
            }
            last = b;
            let bucket = &g.buckets[b as usize];
            let mut w = bucket.writer.lock();
            let shape = bucket.shape();
            // A pin of this log below `target` is `log.id << 56 | lsn` with `lsn < target`: one subtraction
            // tells (a pin of another log wraps to at least 2^56 > `target`).
            debug_assert!(target <= PIN_LSN, "log positions fit a pin");
            let mine = log.id << 56;
            let pinned = w.pins[shape.committed()..shape.tail_used()]
                .iter()
                .any(|&pin| pin.wrapping_sub(mine) < target);
            if pinned {
                self.flush(g, u64::from(b), &mut w, &mut log.stats)?;
                log.stats.forced_flushes += 1;
            }
        }
        log.persist_tail(&self.pm, target)
    }
}
