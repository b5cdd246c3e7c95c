//! The DRAM side of one P-bucket: a mirror of its meta line, one fingerprint per slot, a bitmap of the
//! slots that hold a key's visible version, and the D-bucket (one XPLine of staged records).

use super::layout::{CHUNK_SLOTS, SLOTS, chunk_bits, with_chunk_bits};

/// DRAM state of one bucket (≈ 600 B per 4 KiB P-bucket).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bucket {
    /// Fingerprint of the key in each valid slot (meaningless elsewhere).
    pub fps: [u8; SLOTS],
    /// Mirror of the PM meta line: per chunk 16 valid and 16 tombstone bits.
    pub meta: [u64; 8],
    /// Slots holding the visible version of their key: the key's newest P-bucket version, not a tombstone,
    /// and not superseded by a D-bucket entry. At most one per key, so a lookup needs no ordering.
    pub live: [u64; 4],
    /// Slots in use (a prefix of the P-bucket, filled in slot order = age order).
    pub fill: u16,
    /// Staged entries in the D-bucket (distinct keys; at most 15 at rest, 16 triggers a flush).
    pub dlen: u8,
    /// Tombstone bit of each D-bucket entry.
    pub dtomb: u16,
    /// Log position of the oldest record staged here (meaningful when `dlen > 0`).
    pub dfirst: u64,
    pub dkeys: [u64; CHUNK_SLOTS],
    pub dvals: [u64; CHUNK_SLOTS],
}

impl Default for Bucket {
    fn default() -> Self {
        Bucket {
            fps: [0; SLOTS],
            meta: [0; 8],
            live: [0; 4],
            fill: 0,
            dlen: 0,
            dtomb: 0,
            dfirst: 0,
            dkeys: [0; CHUNK_SLOTS],
            dvals: [0; CHUNK_SLOTS],
        }
    }
}

impl Bucket {
    /// Index of `key` in the D-bucket.
    pub fn staged(&self, key: u64) -> Option<usize> {
        self.dkeys[..self.dlen as usize]
            .iter()
            .position(|&k| k == key)
    }

    /// The D-bucket entry `i` as a visible value (`None` = tombstone).
    pub fn staged_value(&self, i: usize) -> Option<u64> {
        (self.dtomb & (1 << i) == 0).then_some(self.dvals[i])
    }

    /// Live slots whose fingerprint is `fp`: the only slots a lookup may have to read.
    pub fn candidates(&self, fp: u8) -> impl Iterator<Item = usize> + '_ {
        (0..self.fill as usize).filter(move |&s| self.fps[s] == fp && self.is_live(s))
    }

    pub fn is_live(&self, s: usize) -> bool {
        self.live[s / 64] & (1 << (s % 64)) != 0
    }
    pub fn set_live(&mut self, s: usize, on: bool) {
        if on {
            self.live[s / 64] |= 1 << (s % 64);
        } else {
            self.live[s / 64] &= !(1 << (s % 64));
        }
    }
    pub fn live_count(&self) -> u64 {
        self.live.iter().map(|w| w.count_ones() as u64).sum()
    }

    /// Whether slot `s` is valid, and whether it is a tombstone.
    pub fn slot_bits(&self, s: usize) -> (bool, bool) {
        let (valid, tomb) = chunk_bits(&self.meta, s / CHUNK_SLOTS);
        let bit = 1u16 << (s % CHUNK_SLOTS);
        (valid & bit != 0, tomb & bit != 0)
    }

    /// Stages `key → value` (`None` = tombstone) from log position `lsn`, replacing a staged entry of the
    /// same key in place. Returns whether this was the first entry (the bucket joins the staged set).
    pub fn stage(&mut self, key: u64, value: Option<u64>, lsn: u64) -> bool {
        let mut first = false;
        let i = match self.staged(key) {
            Some(i) => i,
            None => {
                let i = self.dlen as usize;
                if i == 0 {
                    self.dfirst = lsn;
                    first = true;
                }
                self.dlen += 1;
                self.dkeys[i] = key;
                i
            }
        };
        self.dvals[i] = value.unwrap_or(0);
        match value {
            Some(_) => self.dtomb &= !(1 << i),
            None => self.dtomb |= 1 << i,
        }
        first
    }

    /// Where the next flush goes: chunk `c` (the P-bucket's tail chunk), first free slot `o` in it, and
    /// how many staged entries `k` fit there (the first `k` are flushed; the rest stay staged).
    pub fn flush_plan(&self) -> (usize, usize, usize) {
        let fill = self.fill as usize;
        let o = fill % CHUNK_SLOTS;
        (
            fill / CHUNK_SLOTS,
            o,
            (self.dlen as usize).min(CHUNK_SLOTS - o),
        )
    }

    /// Writes the first `k` staged entries into `img` (the tail chunk's XPLine) from slot `o` on.
    pub fn place(&self, img: &mut [u8; CHUNK_SLOTS * 16], o: usize, k: usize) {
        for i in 0..k {
            let at = (o + i) * 16;
            img[at..at + 8].copy_from_slice(&self.dkeys[i].to_le_bytes());
            img[at + 8..at + 16].copy_from_slice(&self.dvals[i].to_le_bytes());
        }
    }

    /// The meta word (index, value) that commits the first `k` staged entries at slot `o` of chunk `c`.
    pub fn commit_word(&self, c: usize, o: usize, k: usize) -> (usize, u64) {
        let (valid, tomb) = chunk_bits(&self.meta, c);
        let valid = valid | ((((1u32 << k) - 1) << o) as u16);
        let tomb = tomb | (((self.dtomb as u32 & ((1 << k) - 1)) << o) as u16);
        (c / 2, with_chunk_bits(&self.meta, c, valid, tomb))
    }

    /// Mirrors a committed flush of the first `k` staged entries; `fp_of` gives a key's fingerprint.
    pub fn committed(&mut self, word: (usize, u64), k: usize, fp_of: impl Fn(u64) -> u8) {
        self.meta[word.0] = word.1;
        let fill = self.fill as usize;
        for i in 0..k {
            self.fps[fill + i] = fp_of(self.dkeys[i]);
            self.set_live(fill + i, self.dtomb & (1 << i) == 0);
        }
        self.fill += k as u16;
        let n = self.dlen as usize;
        self.dkeys.copy_within(k..n, 0);
        self.dvals.copy_within(k..n, 0);
        self.dtomb = ((self.dtomb as u32) >> k) as u16;
        self.dlen -= k as u8;
    }

    /// True when the P-bucket has no free slot.
    pub fn full(&self) -> bool {
        self.fill as usize == SLOTS
    }
}
