//! Where a new record goes inside its segment, with its home bucket `y` and `y + 1` locked by the caller:
//! balanced insert into the less full of the two, else displacement (a record of `y + 1` at home moves on
//! to `y + 2`, or a record of `y` that lives one past its home moves back to `y − 1`; the third bucket is
//! only try-locked, so displacement never waits), else a stash bucket (and the home bucket's overflow
//! hints: an overflow fingerprint, or the overflow count when its four are taken). Every record is written
//! slot → persist → 8 B header commit → persist.

use std::sync::atomic::Ordering;

use super::index::{DashIndex, slot_off};
use super::layout::{FP_OFF, Header, SLOTS, fingerprint, hash};
use super::lock::Locked;
use crate::error::Result;
use crate::storage::pm::Pm;

/// What [`DashIndex::place`] did.
pub(super) enum Placed<'a, P: Pm> {
    /// The record is committed (and the locks released).
    Done,
    /// No legal free slot: the locks of the home bucket and the next one, handed back.
    Full(Locked<'a, P>, Locked<'a, P>),
}

impl<P: Pm> DashIndex<P> {
    /// Writes `key, value` (fingerprint `fp`) into free slot `s` of the bucket at `b` and persists slot and
    /// fingerprint; the caller's header store then commits it.
    pub(super) fn write_slot(&self, b: u64, s: usize, key: u64, value: u64, fp: u8) -> Result<()> {
        let mut kv = [0u8; 16];
        kv[..8].copy_from_slice(&key.to_le_bytes());
        kv[8..].copy_from_slice(&value.to_le_bytes());
        let at = slot_off(b, s);
        self.pm.write(at, &kv)?;
        self.pm.write(b + FP_OFF + s as u64, &[fp])?;
        self.pm.flush(at, 16)?;
        self.pm.flush(b + FP_OFF + s as u64, 1)?;
        self.pm.fence();
        Ok(())
    }

    /// Writes a new record into free slot `s` of the locked bucket `guard` and commits it (the commit
    /// store also unlocks the bucket).
    fn write_record(
        &self,
        guard: Locked<'_, P>,
        s: usize,
        key: u64,
        value: u64,
        fp: u8,
    ) -> Result<()> {
        self.write_slot(guard.bucket, s, key, value, fp)?;
        let hdr = guard.header().with_bit(s, true);
        guard.commit_release(hdr)
    }

    /// Places a new record (hash `h`) in segment `seg`, whose buckets `home` (`y`) and `next` (`y + 1`)
    /// the caller has locked. [`Placed::Full`] hands the locks back when the segment has no legal free
    /// slot left, so it must split.
    pub(super) fn place<'a>(
        &'a self,
        seg: u64,
        h: u64,
        key: u64,
        value: u64,
        mut home: Locked<'a, P>,
        mut next: Locked<'a, P>,
    ) -> Result<Placed<'a, P>> {
        let fp = fingerprint(h);
        let (hy, hn) = (home.header(), next.header());
        // Balanced insert: the less full of the two (home on a tie).
        match (hy.free_slot(), hn.free_slot()) {
            (Some(_), Some(t)) if hn.count() < hy.count() => {
                self.write_record(next, t, key, value, fp)?;
                return Ok(Placed::Done);
            }
            (Some(s), _) => {
                self.write_record(home, s, key, value, fp)?;
                return Ok(Placed::Done);
            }
            (None, Some(t)) => {
                self.write_record(next, t, key, value, fp)?;
                return Ok(Placed::Done);
            }
            (None, None) => {}
        }
        // Displacement: free a slot in y + 1 (moving a record at home there to y + 2) or in y (moving a
        // record that lives one past its home back to y − 1).
        let mask = self.geo.buckets - 1;
        let y = h & mask;
        if let Some(freed) = self.displace(seg, &mut next, (y + 2) & mask, (y + 1) & mask)? {
            self.write_record(next, freed, key, value, fp)?;
            self.counters.displacements.fetch_add(1, Ordering::Relaxed);
            return Ok(Placed::Done);
        }
        let back = y.wrapping_sub(1) & mask;
        if let Some(freed) = self.displace(seg, &mut home, back, back)? {
            self.write_record(home, freed, key, value, fp)?;
            self.counters.displacements.fetch_add(1, Ordering::Relaxed);
            return Ok(Placed::Done);
        }
        // Stash: the first stash bucket with room; then the home bucket's hints.
        for i in 0..self.geo.stash {
            let b = self.geo.bucket_off(seg, self.geo.buckets + i);
            let stash = Locked::lock(&self.pm, b)?;
            let Some(s) = stash.header().free_slot() else {
                continue;
            };
            self.write_record(stash, s, key, value, fp)?;
            self.update_overflow(&mut home, |o, count| {
                if !o.add(fp, i) {
                    *count += 1;
                }
            })?;
            self.counters.stash_inserts.fetch_add(1, Ordering::Relaxed);
            return Ok(Placed::Done);
        }
        Ok(Placed::Full(home, next))
    }

    /// Moves one record of the locked bucket `from` whose home is bucket `home` into bucket `to` (copy
    /// committed first, then the original's bit cleared: a crash in between leaves a duplicate that repair
    /// drops). Returns the freed slot of `from`, or `None` when `to` is busy (locked by another thread),
    /// full, or no record of `from` may move.
    fn displace(
        &self,
        seg: u64,
        from: &mut Locked<'_, P>,
        to: u64,
        home: u64,
    ) -> Result<Option<usize>> {
        let tb = self.geo.bucket_off(seg, to);
        if tb == from.bucket {
            return Ok(None);
        }
        let Some(dest) = Locked::try_lock(&self.pm, tb)? else {
            return Ok(None);
        };
        let Some(free) = dest.header().free_slot() else {
            return Ok(None);
        };
        let fh: Header = from.header();
        for s in 0..SLOTS {
            if !fh.used(s) {
                continue;
            }
            let (k, v) = self.read_slot(from.bucket, s)?;
            let h = hash(k);
            if h & (self.geo.buckets - 1) == home {
                self.write_slot(tb, free, k, v, fingerprint(h))?;
                let hdr = dest.header().with_bit(free, true);
                dest.commit_release(hdr)?;
                from.commit(fh.with_bit(s, false))?;
                return Ok(Some(s));
            }
        }
        Ok(None)
    }
}
