//! [`CoreView`]: the ElimDA-style index's window onto `hash.pm` — its region starts at file offset
//! [`HEADER_BYTES`], so the family's header page is out of its reach and its XPLines and buckets keep their
//! alignment. Every access is bounds-checked against the window, shifted, and passed to the [`RegionFile`],
//! which decides what a fence costs (see `region`).

use std::sync::Arc;

use super::header::HEADER_BYTES;
use super::region::RegionFile;
use crate::error::Result;
use crate::storage::pm::{PersistMode, Pm, check_range};

/// The index's region inside `hash.pm`: offset 0 here is byte [`HEADER_BYTES`] of the file. Every access is
/// checked against the region (so the index never reaches the family's page) and passed to the file.
#[derive(Debug, Clone)]
pub struct CoreView(Arc<RegionFile>);

impl CoreView {
    pub fn new(region: Arc<RegionFile>) -> CoreView {
        CoreView(region)
    }

    fn at(&self, off: u64, len: u64) -> Result<u64> {
        check_range(self.len(), off, len)?;
        Ok(HEADER_BYTES + off)
    }
}

impl Pm for CoreView {
    fn len(&self) -> u64 {
        self.0.header().total - HEADER_BYTES
    }

    fn mode(&self) -> PersistMode {
        self.0.persist_mode().pm_mode()
    }

    fn read(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        let at = self.at(off, buf.len() as u64)?;
        self.0.map().read(at, buf)
    }

    fn read_pair(&self, off: u64) -> Result<(u64, u64)> {
        let at = self.at(off, 16)?;
        self.0.map().read_pair(at)
    }

    fn write(&self, off: u64, data: &[u8]) -> Result<()> {
        let at = self.at(off, data.len() as u64)?;
        self.0.write(at, data)
    }

    fn load_u64_atomic(&self, off: u64) -> Result<u64> {
        let at = self.at(off, 8)?;
        self.0.map().load_u64_atomic(at)
    }

    fn store_u64_atomic(&self, off: u64, value: u64) -> Result<()> {
        let at = self.at(off, 8)?;
        self.0.map().store_u64_atomic(at, value)?;
        self.0.touched(at, 8);
        Ok(())
    }

    fn compare_exchange_u64(
        &self,
        off: u64,
        current: u64,
        new: u64,
    ) -> Result<std::result::Result<u64, u64>> {
        let at = self.at(off, 8)?;
        let r = self.0.map().compare_exchange_u64(at, current, new)?;
        if r.is_ok() {
            self.0.touched(at, 8);
        }
        Ok(r)
    }

    /// Cache-line write-back only where it is the persist mechanism (ADR on a mapping); msync mode and
    /// images make stores durable at the fence.
    fn flush(&self, off: u64, len: u64) -> Result<()> {
        let at = self.at(off, len)?;
        self.0.flush_lines(at, len)
    }

    fn fence(&self) {
        self.0.fence();
    }

    fn write_nt(&self, off: u64, data: &[u8]) -> Result<()> {
        let at = self.at(off, data.len() as u64)?;
        self.0.map().write_nt(at, data)?;
        self.0.touched(at, data.len() as u64);
        Ok(())
    }
}
