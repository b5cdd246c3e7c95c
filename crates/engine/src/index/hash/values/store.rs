//! [`ValueStore`]: a [`ValueLog`] and the cleaning that keeps room in it, for any owner whose
//! [`PmHashIndex`] maps keys to the log's handles ([`ValueIndex`](super::ValueIndex) in one region, the
//! `hash` family's `hash.values` file beside `hash.pm`).
//!
//! ## Invariants
//! * Every handle the index holds names a valid record of its key in the log's `[tail, head)`.
//! * Room: before a run of appends of `need` bytes (pads included), [`make_room`](ValueStore::make_room)
//!   cleans until `free >= need + 2 * MAX_RECORD` (one copy in flight and a pad stay possible), so the appends
//!   themselves never clean and the handles they return stay valid until the next `make_room`.
//! * Cleaning walks records from the tail; a record is live exactly when the index maps its key to its
//!   handle; live ones are copied to the head (each persisted), their keys repointed through the index
//!   (durable), then the tail past the stretch is persisted. The value bytes a key maps to never change.
//!
//! Cost: an append is one record write and persist; cleaning copies the live part of what it passes.

use super::super::PmHashIndex;
use super::vlog::{self, MAX_RECORD, TailRecord, ValueLog};
use super::{ValueStats, shifted};
use crate::error::{Error, Result};
use crate::storage::pm::Pm;

/// The value log of an owner, with its cleaning counters.
#[derive(Debug)]
pub struct ValueStore<Q: Pm> {
    log: ValueLog<Q>,
    /// Added to the log's damage offsets (where its window starts in the owner's file or region).
    base: u64,
    stats: ValueStats,
}

/// Bytes the appends of values of `lens` take at most (records, and a pad should they reach the ring's end).
pub fn batch_need(lens: impl IntoIterator<Item = usize>) -> u64 {
    lens.into_iter().map(vlog::record_bytes).sum::<u64>() + MAX_RECORD
}

impl<Q: Pm> ValueStore<Q> {
    pub fn new(log: ValueLog<Q>, base: u64) -> Self {
        ValueStore {
            log,
            base,
            stats: ValueStats::default(),
        }
    }

    pub fn log(&self) -> &ValueLog<Q> {
        &self.log
    }

    pub fn stats(&self) -> ValueStats {
        self.stats
    }

    pub fn into_log(self) -> ValueLog<Q> {
        self.log
    }

    /// The most `need` may be for `make_room` to succeed with an empty log.
    pub fn max_need(&self) -> u64 {
        self.log.capacity() - 2 * MAX_RECORD
    }

    /// Drops the records after the last one `index` names (`starts`: where the records of the log's run
    /// begin, from [`ValueLog::open`]): orphans of writes a crash cut short. Gives their room back.
    pub fn drop_orphans<P: Pm, I: PmHashIndex<P>>(
        &mut self,
        index: &I,
        starts: &[u64],
    ) -> Result<()> {
        for &start in starts.iter().rev() {
            if let Some((TailRecord::Value { key, handle, .. }, _)) =
                self.log.peek(start).map_err(|e| shifted(e, self.base))?
                && index.get(key)? == Some(handle)
            {
                break;
            }
            self.log.truncate(start);
        }
        Ok(())
    }

    /// Appends and persists `key`'s value; returns its handle. The caller made room (`make_room`).
    pub fn append(&mut self, key: u64, value: &[u8]) -> Result<u64> {
        let handle = self.log.append(key, value)?;
        self.stats.appended_bytes += vlog::record_bytes(value.len());
        Ok(handle)
    }

    /// Copies the value `handle` names (checked to be `key`'s) into `out`.
    pub fn read(&self, key: u64, handle: u64, out: &mut Vec<u8>) -> Result<()> {
        self.log
            .read(key, handle, out)
            .map_err(|e| shifted(e, self.base))
    }

    /// Cleans the log's tail until appends of `need` bytes leave room for cleaning to go on (two longest
    /// records: one copy in flight and a pad). `ResourceExhausted` when a whole lap of cleaning does not make
    /// the room (the live values fill the log).
    pub fn make_room<P: Pm, I: PmHashIndex<P>>(&mut self, index: &mut I, need: u64) -> Result<()> {
        let reserve = 2 * MAX_RECORD;
        let mut passed = 0;
        while self.log.free() < need + reserve {
            let advanced = self.clean_stretch(index, self.log.free().saturating_sub(MAX_RECORD))?;
            passed += advanced;
            if advanced == 0 || passed > self.log.capacity() {
                return Err(Error::ResourceExhausted(format!(
                    "value log of {} bytes is full of live values ({} in use, {need} more needed)",
                    self.log.capacity(),
                    self.log.used()
                )));
            }
        }
        Ok(())
    }

    /// Walks records from the tail while their live ones fit `budget` bytes of copies, copies those to the
    /// head, repoints their keys, and persists the tail after the stretch. Returns how far the tail moved.
    fn clean_stretch<P: Pm, I: PmHashIndex<P>>(
        &mut self,
        index: &mut I,
        budget: u64,
    ) -> Result<u64> {
        let mut at = self.log.tail();
        let mut live = Vec::new();
        let mut live_bytes = 0;
        while let Some((rec, size)) = self.log.peek(at).map_err(|e| shifted(e, self.base))? {
            if let TailRecord::Value { key, handle, bytes } = rec
                && index.get(key)? == Some(handle)
            {
                let cost = vlog::record_bytes(bytes.len());
                if live_bytes + cost > budget {
                    break;
                }
                live_bytes += cost;
                live.push((key, bytes));
            }
            at += size;
        }
        let start = self.log.tail();
        for (key, bytes) in &live {
            let handle = self.append(*key, bytes)?;
            index.insert(*key, handle)?;
        }
        self.log.advance_tail(at)?;
        self.stats.cleanings += 1;
        self.stats.copied += live.len() as u64;
        self.stats.cleaned_bytes += at - start;
        Ok(at - start)
    }
}
