//! The media side of the Optane traffic model: 256 B XPLines through a per-DIMM XPBuffer.
//!
//! Addresses are interleaved over `dimms` DIMMs in units of `interleave_bytes` (DIMM = ⌊addr / interleave⌋
//! mod dimms). Each DIMM has an XPBuffer: an LRU of `lines_per_dimm` XPLines that combines writes and serves
//! reads. Each buffered XPLine remembers which of its four 64 B sub-lines were written and whether its old
//! contents were read from the media. The rules, per 64 B request from the CPU side:
//!
//! * **read**: a hit (no media traffic) when the XPLine is buffered and either its contents were loaded or
//!   the requested sub-line was written; otherwise a miss that reads 256 B from the media and marks the
//!   XPLine loaded (inserting it, evicting the LRU XPLine of that DIMM when full).
//! * **write** (a 64 B write-back): marks the sub-line written, inserting the XPLine without reading it.
//! * **full XPLine write** (non-temporal 256 B): marks all four sub-lines written.
//! * **eviction** (LRU, or [`XpBuffer::drain`]): nothing written → free; all four sub-lines written → 256 B
//!   media write; partly written → 256 B media write, plus a 256 B media read (read-modify-write) unless the
//!   contents were already loaded by an earlier read miss.
//!
//! Every access, read or write, makes its XPLine the most recently used one of its DIMM.

use super::{CACHE_LINE, XPLINE};

/// The written-mask of an XPLine whose four sub-lines were all written.
const FULL: u8 = 0b1111;

/// Media-side counters of an [`XpBuffer`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MediaCounts {
    /// Bytes read from the media (256 per read miss or read-modify-write).
    pub read_bytes: u64,
    /// Bytes written to the media (256 per written XPLine leaving the buffer).
    pub write_bytes: u64,
    /// 64 B reads served by the buffer.
    pub read_hits: u64,
    /// 64 B reads that had to read their XPLine from the media.
    pub read_misses: u64,
    /// Partly written XPLines that left the buffer without their contents loaded (each cost a 256 B read).
    pub rmw: u64,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    xpline: u64,
    last_use: u64,
    written: u8,
    loaded: bool,
}

/// The XPBuffers of all DIMMs, with their media counters.
#[derive(Debug, Clone)]
pub struct XpBuffer {
    dimms: Vec<Vec<Entry>>,
    lines_per_dimm: usize,
    interleave: u64,
    clock: u64,
    counts: MediaCounts,
}

impl XpBuffer {
    /// A model of `dimms` DIMMs interleaved every `interleave_bytes`, each buffering `lines_per_dimm`
    /// XPLines. Zero values are treated as 1 (the caller validates configurations).
    pub fn new(dimms: usize, interleave_bytes: u64, lines_per_dimm: usize) -> Self {
        let dimms = dimms.max(1);
        let lines_per_dimm = lines_per_dimm.max(1);
        XpBuffer {
            dimms: (0..dimms)
                .map(|_| Vec::with_capacity(lines_per_dimm))
                .collect(),
            lines_per_dimm,
            interleave: interleave_bytes.max(1),
            clock: 0,
            counts: MediaCounts::default(),
        }
    }

    /// The DIMM that holds byte address `addr`.
    pub fn dimm_of(&self, addr: u64) -> usize {
        ((addr / self.interleave) % self.dimms.len() as u64) as usize
    }

    /// The counters so far.
    pub fn counts(&self) -> MediaCounts {
        self.counts
    }

    /// XPLines currently buffered, over all DIMMs.
    pub fn resident(&self) -> usize {
        self.dimms.iter().map(Vec::len).sum()
    }

    /// A 64 B read of the line holding byte address `addr`. Returns true when it missed the buffer.
    pub fn read(&mut self, addr: u64) -> bool {
        let bit = sub_line_bit(addr);
        let entry = self.entry(addr);
        let miss = !(entry.loaded || entry.written & bit != 0);
        if miss {
            entry.loaded = true;
            self.counts.read_bytes += XPLINE;
            self.counts.read_misses += 1;
        } else {
            self.counts.read_hits += 1;
        }
        miss
    }

    /// A 64 B write-back of the line holding byte address `addr`.
    pub fn write(&mut self, addr: u64) {
        let bit = sub_line_bit(addr);
        self.entry(addr).written |= bit;
    }

    /// A full 256 B write of the XPLine holding byte address `addr`.
    pub fn write_xpline(&mut self, addr: u64) {
        self.entry(addr).written = FULL;
    }

    /// Evicts every buffered XPLine, paying for the written ones: what the media will have done once all
    /// outstanding writes have drained.
    pub fn drain(&mut self) {
        let mut evicted = Vec::new();
        for dimm in &mut self.dimms {
            evicted.append(dimm);
        }
        evicted.sort_by_key(|e| e.last_use);
        for e in evicted {
            self.pay_eviction(e);
        }
    }

    /// The buffered entry of the XPLine holding `addr`, made most recently used; inserted (evicting the LRU
    /// entry of its DIMM when full) when absent.
    fn entry(&mut self, addr: u64) -> &mut Entry {
        self.clock += 1;
        let clock = self.clock;
        let xpline = addr / XPLINE;
        let d = self.dimm_of(addr);
        if let Some(i) = self.dimms[d].iter().position(|e| e.xpline == xpline) {
            let e = &mut self.dimms[d][i];
            e.last_use = clock;
            return e;
        }
        if self.dimms[d].len() >= self.lines_per_dimm {
            let lru = self.dimms[d]
                .iter()
                .enumerate()
                .min_by_key(|(_, e)| e.last_use)
                .map(|(i, _)| i);
            if let Some(i) = lru {
                let victim = self.dimms[d].swap_remove(i);
                self.pay_eviction(victim);
            }
        }
        let dimm = &mut self.dimms[d];
        dimm.push(Entry {
            xpline,
            last_use: clock,
            written: 0,
            loaded: false,
        });
        let last = dimm.len() - 1;
        &mut dimm[last]
    }

    fn pay_eviction(&mut self, e: Entry) {
        if e.written == 0 {
            return;
        }
        if e.written != FULL && !e.loaded {
            self.counts.read_bytes += XPLINE;
            self.counts.rmw += 1;
        }
        self.counts.write_bytes += XPLINE;
    }
}

/// The written-mask bit of the 64 B sub-line that holds `addr` within its XPLine.
fn sub_line_bit(addr: u64) -> u8 {
    1 << ((addr % XPLINE) / CACHE_LINE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleave_maps_4k_units_round_robin() {
        let b = XpBuffer::new(6, 4096, 64);
        assert_eq!(b.dimm_of(0), 0);
        assert_eq!(b.dimm_of(4095), 0);
        assert_eq!(b.dimm_of(4096), 1);
        assert_eq!(b.dimm_of(5 * 4096 + 17), 5);
        assert_eq!(b.dimm_of(6 * 4096), 0);
    }

    #[test]
    fn lru_evicts_least_recently_used_and_pays_by_written_state() {
        let mut b = XpBuffer::new(1, 4096, 2);
        b.write(0); // XPLine 0: one sub-line written, not loaded.
        b.write_xpline(256); // XPLine 1: fully written.
        assert!(!b.read(0)); // Hit on the written sub-line; XPLine 0 becomes MRU.
        b.read(512); // XPLine 2 misses and evicts the LRU, XPLine 1: a full write.
        assert_eq!(b.counts().write_bytes, 256);
        assert_eq!(b.counts().read_bytes, 256);
        assert_eq!(b.counts().rmw, 0);
        b.read(768); // Evicts XPLine 0 (partly written, never loaded): RMW read + write.
        assert_eq!(b.counts().rmw, 1);
        assert_eq!(b.counts().read_bytes, 256 * 3);
        assert_eq!(b.counts().write_bytes, 512);
        b.drain(); // XPLines 2 and 3 were only read: free.
        assert_eq!(b.counts().write_bytes, 512);
        assert_eq!(b.resident(), 0);
    }

    #[test]
    fn partial_write_after_a_read_miss_needs_no_second_read() {
        let mut b = XpBuffer::new(6, 4096, 64);
        assert!(b.read(1024 + 128));
        b.write(1024 + 64);
        assert!(!b.read(1024 + 192), "loaded contents serve every sub-line");
        b.drain();
        let c = b.counts();
        assert_eq!((c.read_bytes, c.write_bytes, c.rmw), (256, 256, 0));
        assert_eq!((c.read_hits, c.read_misses), (1, 1));
    }

    #[test]
    fn unwritten_sub_line_of_a_write_only_xpline_misses() {
        let mut b = XpBuffer::new(1, 4096, 4);
        b.write(0);
        assert!(b.read(64), "sub-line 1 was never written nor loaded");
        b.drain();
        assert_eq!((b.counts().read_bytes, b.counts().write_bytes), (256, 256));
    }
}
