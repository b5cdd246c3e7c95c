//! Where a new record goes inside its segment: balanced insert into the less full of its home bucket `y`
//! and `y + 1`, else displacement (a record of `y + 1` at home moves on to `y + 2`, or a record of `y` that
//! lives one past its home moves back to `y − 1`), else a stash bucket (and the home bucket's overflow
//! count goes up). Every step is slot write → persist → 8 B header commit → persist.

use super::index::{DashIndex, slot_off};
use super::layout::{FP_OFF, Header, fingerprint, hash};
use crate::error::Result;
use crate::storage::pm::Pm;

impl<P: Pm> DashIndex<P> {
    /// Writes `key, value` into free slot `s` of the bucket at `b` (header `hdr`) and commits it: slot and
    /// fingerprint are persisted before the header word that sets the slot's bit.
    pub(super) fn write_record(
        &self,
        b: u64,
        hdr: Header,
        s: usize,
        key: u64,
        value: u64,
        fp: u8,
    ) -> Result<()> {
        let mut kv = [0u8; 16];
        kv[..8].copy_from_slice(&key.to_le_bytes());
        kv[8..].copy_from_slice(&value.to_le_bytes());
        let at = slot_off(b, s);
        self.pm.write(at, &kv)?;
        self.pm.write(b + FP_OFF + s as u64, &[fp])?;
        self.pm.flush(at, 16)?;
        self.pm.flush(b + FP_OFF + s as u64, 1)?;
        self.pm.fence();
        self.commit_header(b, hdr.with_bit(s, true))
    }

    /// Places a new record (hash `h`, home bucket `y` of segment `seg`); `false` when the segment has no
    /// legal free slot left, so it must split.
    pub(super) fn place(&mut self, seg: u64, y: u64, h: u64, key: u64, value: u64) -> Result<bool> {
        let mask = self.geo.buckets - 1;
        let fp = fingerprint(h);
        let home = self.geo.bucket_off(seg, y);
        let next = self.geo.bucket_off(seg, (y + 1) & mask);
        let (hy, hn) = (self.header(home)?, self.header(next)?);
        // Balanced insert: the less full of the two (home on a tie).
        let target = match (hy.free_slot(), hn.free_slot()) {
            (Some(_), Some(t)) if hn.count() < hy.count() => Some((next, hn, t)),
            (Some(s), _) => Some((home, hy, s)),
            (None, Some(t)) => Some((next, hn, t)),
            (None, None) => None,
        };
        if let Some((b, hdr, s)) = target {
            self.write_record(b, hdr, s, key, value, fp)?;
            return Ok(true);
        }
        // Displacement: free a slot in y + 1 (moving a record at home there to y + 2) or in y (moving a
        // record that lives one past its home back to y − 1).
        for (from, to, home_of_movable) in [
            ((y + 1) & mask, (y + 2) & mask, (y + 1) & mask),
            (y, y.wrapping_sub(1) & mask, y.wrapping_sub(1) & mask),
        ] {
            if let Some(freed) = self.displace(seg, from, to, home_of_movable)? {
                let b = self.geo.bucket_off(seg, from);
                let hdr = self.header(b)?;
                self.write_record(b, hdr, freed, key, value, fp)?;
                self.stats.displacements += 1;
                return Ok(true);
            }
        }
        // Stash: the first stash bucket with room; then the home bucket counts one more overflow record.
        for i in 0..self.geo.stash {
            let b = self.geo.bucket_off(seg, self.geo.buckets + i);
            let hdr = self.header(b)?;
            if let Some(s) = hdr.free_slot() {
                self.write_record(b, hdr, s, key, value, fp)?;
                let hh = self.header(home)?;
                self.commit_header(home, hh.with_overflow(hh.overflow() + 1))?;
                self.stats.stash_inserts += 1;
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Moves one record of bucket `from` whose home is `home` into bucket `to` (copy committed first, then
    /// the original's bit cleared: a crash in between leaves a duplicate that recovery drops). Returns the
    /// freed slot of `from`, or `None` when `to` is full or no record of `from` may move.
    fn displace(&self, seg: u64, from: u64, to: u64, home: u64) -> Result<Option<usize>> {
        let (fb, tb) = (self.geo.bucket_off(seg, from), self.geo.bucket_off(seg, to));
        let th = self.header(tb)?;
        let Some(free) = th.free_slot() else {
            return Ok(None);
        };
        let fh = self.header(fb)?;
        for s in 0..super::layout::SLOTS {
            if !fh.used(s) {
                continue;
            }
            let (k, v) = self.read_slot(fb, s)?;
            let h = hash(k);
            if h & (self.geo.buckets - 1) == home {
                self.write_record(tb, th, free, k, v, fingerprint(h))?;
                self.commit_header(fb, fh.with_bit(s, false))?;
                return Ok(Some(s));
            }
        }
        Ok(None)
    }
}
