//! # Values up to 256 B for the persistent hash indexes (Exp 8)
//!
//! [`ValueIndex`] stores byte values of 0..=256 B beside any [`PmHashIndex`] (the ElimDA-style index or the
//! Dash-style baseline): each value goes out of line into a [`ValueLog`] in the same PM region, and the
//! index maps the key to the value's 8 B **handle** (log position and length). Keys stay `u64`.
//!
//! ## Region layout (offsets in the region; little-endian)
//! * `[0, 4096)` superblock: magic `STRHVAL1`, version, index bytes, value-log bytes, nonce, xxh3 at 56.
//! * `[4096, 4096 + index bytes)` the index's own region (a [`PmWindow`]: it sees offset 0 there).
//! * then the value log's window (control page and ring, see [`vlog`]).
//!
//! ## Crash-consistency protocol
//! * **Put**: append the value record to the value log and persist it, *then* write `key → handle` to the
//!   index, whose own protocol makes it durable (the acknowledgement). A crash in between leaves an orphan
//!   record that nothing names (dead, reclaimed by cleaning).
//! * **Delete**: the index's delete; the record becomes dead.
//! * **Cleaning** (when an append lacks room): walk records from the log's tail; a record is live exactly
//!   when the index maps its key to its handle; copy the live ones of a stretch to the head (each
//!   persisted), repoint their keys through the index (durable), then persist the tail past the stretch.
//!   Copies only use free space (never bytes at or after the durable tail), so a crash anywhere leaves
//!   every handle the index holds readable.
//! * **Recovery**: superblock, the index's recovery, the value log's scan from its durable tail, then the
//!   run's suffix that no key names (orphans of cut-short writes) is dropped, which gives back the room
//!   cleaning keeps in reserve. A handle outside the log's live range or a record that does not validate
//!   is `Error::Corruption` (offsets of the whole region).
//!
//! ## Cost model
//! * Put: one record write of `16 + len` B (rounded to 16) and one persist, plus the index's write;
//!   amortised cleaning copies the live part of what it passes (none when values are overwritten or
//!   deleted before the log laps).
//! * Positive get: the index's lookup plus one PM read of the record (one or two XPLines); a miss costs the
//!   index's miss only.
//! * DRAM: nothing per value. Single writer (`&mut self`, as [`PmHashIndex`]); readers share `&self`.

mod store;
mod vlog;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use super::PmHashIndex;
use super::format::{corruption_in, le, read_superblock, write_superblock};
use crate::error::{Error, Result};
use crate::storage::pm::{Pm, PmWindow};
pub use store::{ValueStore, batch_need};
pub use vlog::{CONTROL_BYTES, MAX_VALUE, TailRecord, ValueLog};

/// The window each part of the region is seen through.
pub type Part<P> = PmWindow<Arc<P>>;

const SUPER_BYTES: u64 = 4096;
const MAGIC: u64 = u64::from_le_bytes(*b"STRHVAL1");
const VERSION: u64 = 1;
const SB_VERSION: u64 = 8;
const SB_INDEX_BYTES: u64 = 16;
const SB_LOG_BYTES: u64 = 24;
const SB_NONCE: u64 = 32;
const SB_CHECK: u64 = 56;

fn corruption(offset: u64, detail: impl Into<String>) -> Error {
    corruption_in("<pm value index>", offset, detail)
}

/// Counters of cleaning (DRAM only, reset by `open`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ValueStats {
    /// Cleaning passes, records copied by them and bytes their tails advanced over.
    pub cleanings: u64,
    pub copied: u64,
    pub cleaned_bytes: u64,
    /// Value bytes appended (records, pads and copies included).
    pub appended_bytes: u64,
}

/// A hash index of `u64 → bytes (≤ 256 B)` over one PM region (module docs).
#[derive(Debug)]
pub struct ValueIndex<P: Pm, I> {
    inner: I,
    /// The value log (its damage reports shifted to the region's offsets) and its cleaning.
    store: ValueStore<Part<P>>,
    region: Arc<P>,
}

/// The two windows of a region of `len` bytes whose value log has `log_bytes`.
fn split<P: Pm>(region: &Arc<P>, log_bytes: u64) -> Result<(Part<P>, Part<P>)> {
    let len = region.len();
    let index_bytes = len
        .checked_sub(SUPER_BYTES + log_bytes)
        .filter(|&n| n > 0 && n.is_multiple_of(4096))
        .ok_or_else(|| {
            Error::invalid(format!(
                "a region of {len} bytes cannot hold a value log of {log_bytes} bytes and an index \
                 (both multiples of 4 KiB)"
            ))
        })?;
    Ok((
        PmWindow::new(region.clone(), SUPER_BYTES, index_bytes)?,
        PmWindow::new(region.clone(), SUPER_BYTES + index_bytes, log_bytes)?,
    ))
}

fn log_seed(nonce: u64) -> u64 {
    nonce ^ 0x5641_4C55_454C_4F47
}

impl<P: Pm, I: PmHashIndex<Part<P>>> ValueIndex<P, I> {
    /// Formats `pm` with a value log of `log_bytes` (a multiple of 4 KiB) and the rest for the index, which
    /// `create` formats in its window.
    pub fn create(
        pm: P,
        log_bytes: u64,
        create: impl FnOnce(Part<P>) -> Result<I>,
    ) -> Result<Self> {
        let region = Arc::new(pm);
        let (index_part, log_part) = split(&region, log_bytes)?;
        let nonce: u64 = rand::random();
        let log = ValueLog::create(log_part, log_seed(nonce))?;
        let inner = create(index_part)?;
        // The superblock last: an unfinished create fails to open.
        write_superblock(
            &*region,
            SB_CHECK,
            &[
                (0, MAGIC),
                (SB_VERSION, VERSION),
                (SB_INDEX_BYTES, region.len() - SUPER_BYTES - log_bytes),
                (SB_LOG_BYTES, log_bytes),
                (SB_NONCE, nonce),
            ],
        )?;
        region.persist(0, SUPER_BYTES)?;
        let log_base = region.len() - log_bytes;
        Ok(ValueIndex {
            inner,
            store: ValueStore::new(log, log_base),
            region,
        })
    }

    /// Recovers the index and value log stored in `pm` (`Corruption` on damage).
    pub fn open(pm: P) -> Result<Self> {
        let b = read_superblock(&pm, SUPER_BYTES, SB_CHECK, MAGIC, |at, what| {
            corruption(at, what)
        })?;
        let word = |at: u64| le(&b[at as usize..]);
        if word(SB_VERSION) != VERSION {
            return Err(Error::Incompatible(format!(
                "value index version {}, this build reads version {VERSION}",
                word(SB_VERSION)
            )));
        }
        let (index_bytes, log_bytes) = (word(SB_INDEX_BYTES), word(SB_LOG_BYTES));
        if index_bytes
            .checked_add(log_bytes)
            .and_then(|n| n.checked_add(SUPER_BYTES))
            != Some(pm.len())
        {
            return Err(corruption(
                SB_INDEX_BYTES,
                format!(
                    "index of {index_bytes} and value log of {log_bytes} bytes in a region of {}",
                    pm.len()
                ),
            ));
        }
        let region = Arc::new(pm);
        let (index_part, log_part) =
            split(&region, log_bytes).map_err(|e| corruption(SB_LOG_BYTES, e.to_string()))?;
        let log_base = SUPER_BYTES + index_bytes;
        let inner = I::open(index_part).map_err(|e| shifted(e, SUPER_BYTES))?;
        let (log, starts) =
            ValueLog::open(log_part, log_seed(word(SB_NONCE))).map_err(|e| shifted(e, log_base))?;
        let mut store = ValueStore::new(log, log_base);
        // Records after the last one the index names are orphans of writes a crash cut short (a put's
        // value, or copies of a cleaning pass): dropping them gives their space back, so that cleaning
        // always has the room it keeps in reserve.
        store.drop_orphans(&inner, &starts)?;
        Ok(ValueIndex {
            inner,
            store,
            region,
        })
    }

    /// The index of handles.
    pub fn inner(&self) -> &I {
        &self.inner
    }

    /// The whole region.
    pub fn pm(&self) -> &P {
        &self.region
    }

    /// Gives the region back (every acknowledged write is durable already).
    pub fn into_pm(self) -> P {
        let ValueIndex {
            inner,
            store,
            region,
        } = self;
        drop(inner.into_pm());
        drop(store.into_log().into_pm());
        match Arc::try_unwrap(region) {
            Ok(pm) => pm,
            // The two windows were the only other owners, and both were just dropped.
            Err(_) => unreachable!("a window of the region outlived its index"),
        }
    }

    pub fn stats(&self) -> ValueStats {
        self.store.stats()
    }

    /// The value log's capacity and the bytes between its tail and head.
    pub fn log_usage(&self) -> (u64, u64) {
        (self.store.log().capacity(), self.store.log().used())
    }

    /// Inserts or replaces `key`'s value (at most [`MAX_VALUE`] bytes; longer is `InvalidArgument`).
    /// Durable when it returns.
    pub fn put(&mut self, key: u64, value: &[u8]) -> Result<()> {
        if value.len() > MAX_VALUE {
            return Err(Error::invalid(format!(
                "a value of {} bytes; the hash index stores values of at most {MAX_VALUE} bytes",
                value.len()
            )));
        }
        let need = self.store.log().cost(value.len());
        self.store.make_room(&mut self.inner, need)?;
        let handle = self.store.append(key, value)?;
        self.inner.insert(key, handle)
    }

    /// Copies `key`'s value into `out`; false (and `out` untouched) when the key is absent.
    pub fn get_into(&self, key: u64, out: &mut Vec<u8>) -> Result<bool> {
        match self.inner.get(key)? {
            Some(handle) => {
                self.store.read(key, handle, out)?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// `key`'s value, if present.
    pub fn get(&self, key: u64) -> Result<Option<Vec<u8>>> {
        let mut out = Vec::new();
        Ok(self.get_into(key, &mut out)?.then_some(out))
    }

    /// Removes `key`; true when it was present. Durable when it returns.
    pub fn remove(&mut self, key: u64) -> Result<bool> {
        self.inner.remove(key)
    }

    /// Live keys.
    pub fn len(&self) -> u64 {
        self.inner.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Calls `visit(key, value)` once per live key.
    pub fn for_each(&self, mut visit: impl FnMut(u64, &[u8])) -> Result<()> {
        let mut handles = Vec::with_capacity(self.len() as usize);
        self.inner.for_each(|k, h| handles.push((k, h)))?;
        let mut buf = Vec::new();
        for (k, h) in handles {
            self.store.read(k, h, &mut buf)?;
            visit(k, &buf);
        }
        Ok(())
    }

    /// The index's self-check, and every handle names a valid record of its key in the log's live range.
    pub fn check_invariants(&self) -> Result<()> {
        self.inner.check_invariants()?;
        self.for_each(|_, _| {})
    }
}

/// A damage report of a window, shifted to the region's offsets.
fn shifted(e: Error, base: u64) -> Error {
    e.relocated(|file, offset| (file, offset + base))
}
