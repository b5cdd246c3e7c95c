//! [`PmWindow`]: a sub-range of a region seen as a region of its own, so that two structures can share one
//! PM region (and one traffic model or crash model) without either reaching the other's bytes.
//!
//! Invariants: offset `o` of the window is offset `base + o` of the region; every access is checked against
//! the window's length first (`InvalidArgument` outside it, as for any region), so nothing outside
//! `[base, base + len)` is ever touched. `base` must be a multiple of 4 KiB so that lines, XPLines and
//! pages keep their alignment (and the traffic model sees the same XPLines). Fences are the region's own
//! (a fence orders every store of the region, not only the window's). Cost: one bounds check and one add
//! per access on top of the region's.

use super::{PersistMode, Pm, check_range};
use crate::error::{Error, Result};

/// Bytes `[base, base + len)` of the region `Q` (any [`Pm`], typically an `Arc` shared with other windows).
#[derive(Debug, Clone)]
pub struct PmWindow<Q> {
    region: Q,
    base: u64,
    len: u64,
}

impl<Q: Pm> PmWindow<Q> {
    /// The window `[base, base + len)` of `region`; `InvalidArgument` unless it lies inside the region and
    /// `base` is 4 KiB-aligned.
    pub fn new(region: Q, base: u64, len: u64) -> Result<Self> {
        if !base.is_multiple_of(4096) {
            return Err(Error::invalid(format!(
                "PM window at {base} is not 4 KiB-aligned"
            )));
        }
        check_range(region.len(), base, len)?;
        Ok(PmWindow { region, base, len })
    }

    /// The whole region the window is part of.
    pub fn region(&self) -> &Q {
        &self.region
    }

    /// Where the window starts in the region.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// Gives the region back.
    pub fn into_region(self) -> Q {
        self.region
    }

    #[inline]
    fn at(&self, off: u64, n: u64) -> Result<u64> {
        check_range(self.len, off, n)?;
        Ok(self.base + off)
    }
}

impl<Q: Pm> Pm for PmWindow<Q> {
    fn len(&self) -> u64 {
        self.len
    }
    fn mode(&self) -> PersistMode {
        self.region.mode()
    }
    fn read(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        let at = self.at(off, buf.len() as u64)?;
        self.region.read(at, buf)
    }
    fn write(&self, off: u64, data: &[u8]) -> Result<()> {
        let at = self.at(off, data.len() as u64)?;
        self.region.write(at, data)
    }
    fn read_pair(&self, off: u64) -> Result<(u64, u64)> {
        let at = self.at(off, 16)?;
        self.region.read_pair(at)
    }
    fn load_u64_atomic(&self, off: u64) -> Result<u64> {
        let at = self.at(off, 8)?;
        self.region.load_u64_atomic(at)
    }
    fn store_u64_atomic(&self, off: u64, value: u64) -> Result<()> {
        let at = self.at(off, 8)?;
        self.region.store_u64_atomic(at, value)
    }
    fn compare_exchange_u64(
        &self,
        off: u64,
        current: u64,
        new: u64,
    ) -> Result<std::result::Result<u64, u64>> {
        let at = self.at(off, 8)?;
        self.region.compare_exchange_u64(at, current, new)
    }
    fn flush(&self, off: u64, len: u64) -> Result<()> {
        let at = self.at(off, len)?;
        self.region.flush(at, len)
    }
    fn fence(&self) {
        self.region.fence()
    }
    fn write_nt(&self, off: u64, data: &[u8]) -> Result<()> {
        let at = self.at(off, data.len() as u64)?;
        self.region.write_nt(at, data)
    }
    fn persist(&self, off: u64, len: u64) -> Result<()> {
        let at = self.at(off, len)?;
        self.region.persist(at, len)
    }
    fn prefetch(&self, off: u64) {
        if off < self.len {
            self.region.prefetch(self.base + off);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::pm::MmapRegion;

    #[test]
    fn window_shifts_and_bounds_every_access() {
        let region = MmapRegion::anonymous(3 * 4096, PersistMode::Adr).unwrap();
        assert!(PmWindow::new(&region, 100, 64).is_err(), "unaligned base");
        assert!(
            PmWindow::new(&region, 4096, 3 * 4096).is_err(),
            "past the end"
        );
        let w = PmWindow::new(&region, 4096, 4096).unwrap();
        w.write(8, b"abcdefgh").unwrap();
        assert_eq!(region.read_vec(4096 + 8, 8).unwrap(), b"abcdefgh");
        w.store_u64_atomic(4088, 7).unwrap();
        assert_eq!(region.load_u64_atomic(8184).unwrap(), 7);
        assert!(
            w.write(4090, b"abcdefgh").is_err(),
            "crosses the window's end"
        );
        assert!(w.read_vec(4096, 1).is_err());
        assert!(w.write_nt(3840, &[1u8; 512]).is_err());
        // Nothing outside the window was written by the refused accesses.
        assert_eq!(region.read_vec(8192, 16).unwrap(), vec![0u8; 16]);
        w.persist(0, 4096).unwrap();
    }
}
