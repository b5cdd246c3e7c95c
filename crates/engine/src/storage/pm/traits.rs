//! The [`Pm`] trait: the one interface every persistent-memory access goes through.

use super::PersistMode;
use crate::error::Result;

/// A region of persistent memory addressed by `u64` offsets in `[0, len())`.
///
/// Every method is bounds-checked and returns `Error::InvalidArgument` (changing nothing) for an access that
/// does not fit the region or breaks an alignment rule. Multi-byte values are little-endian. Implementations
/// are `Send + Sync`; see the module documentation of `storage::pm` for what racing accesses mean.
///
/// Durability protocol, per [`mode`](Pm::mode):
/// * ADR: `write` / `store_u64_atomic` → `flush` the lines → `fence`; only then is the data durable. A line
///   may also reach PM earlier at any moment (the CPU cache evicts dirty lines on its own), so anything
///   written is *possibly* durable, and only flushed-and-fenced data is *certainly* durable.
/// * eADR: a store is durable as soon as it is made; `fence` only orders.
/// * [`write_nt`](Pm::write_nt) bypasses the CPU cache: its XPLines need no flush, only a later `fence`.
pub trait Pm: Send + Sync {
    /// Size of the region in bytes.
    fn len(&self) -> u64;

    /// True for a region of zero bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The persistence domain this region is used under (decides what [`persist`](Pm::persist) does).
    fn mode(&self) -> PersistMode;

    /// Copies `buf.len()` bytes starting at `off` into `buf`.
    fn read(&self, off: u64, buf: &mut [u8]) -> Result<()>;

    /// Stores `data` at `off` through the CPU cache (not durable until flushed and fenced under ADR).
    /// Not atomic beyond single aligned words.
    fn write(&self, off: u64, data: &[u8]) -> Result<()>;

    /// Atomically loads the aligned 8-byte word at `off` (acquire ordering). `off` must be a multiple of 8.
    fn load_u64_atomic(&self, off: u64) -> Result<u64>;

    /// Atomically stores the aligned 8-byte word at `off` (release ordering): the commit store, the unit
    /// that never tears in a crash. `off` must be a multiple of 8.
    fn store_u64_atomic(&self, off: u64, value: u64) -> Result<()>;

    /// Atomically replaces the aligned 8-byte word at `off` with `new` if it equals `current` (acq-rel).
    /// Returns `Ok(Ok(current))` on success and `Ok(Err(actual))` with the value found otherwise.
    fn compare_exchange_u64(
        &self,
        off: u64,
        current: u64,
        new: u64,
    ) -> Result<std::result::Result<u64, u64>>;

    /// Writes back every 64 B cache line that overlaps `[off, off + len)` (clwb / clflushopt / clflush).
    /// Does not order anything by itself: a [`fence`](Pm::fence) must follow. `len == 0` does nothing.
    fn flush(&self, off: u64, len: u64) -> Result<()>;

    /// A store fence (sfence): earlier flushes and non-temporal writes complete before later stores. Each
    /// call is one persist point.
    fn fence(&self);

    /// Writes whole 256 B XPLines with non-temporal stores, bypassing the CPU cache. `off` and `data.len()`
    /// must be multiples of 256. Needs a later [`fence`](Pm::fence) (one fence can cover many calls) before
    /// the data is durable or ordered before later stores. Concurrent readers may see it word by word.
    fn write_nt(&self, off: u64, data: &[u8]) -> Result<()>;

    /// A hint that the line holding `off` will be read soon: the backing memory's line is asked into the CPU
    /// cache so that its miss overlaps other work. Reads nothing observably, changes nothing, counts no
    /// traffic (the [`read`](Pm::read) that follows is what a traffic model charges); an offset outside the
    /// region is ignored. The default does nothing.
    fn prefetch(&self, off: u64) {
        let _ = off;
    }

    /// Makes `[off, off + len)` durable and orders it before later stores: flush + fence under ADR, fence
    /// only under eADR.
    fn persist(&self, off: u64, len: u64) -> Result<()> {
        match self.mode() {
            PersistMode::Adr => self.flush(off, len)?,
            PersistMode::Eadr => super::check_range(self.len(), off, len)?,
        }
        self.fence();
        Ok(())
    }

    /// Reads the two little-endian `u64`s at `off` (16 bytes, any alignment; not atomic as a pair): a hash
    /// slot's key and value. Counted and checked like [`read`](Pm::read) of 16 bytes; regions over plain
    /// memory override it with two word loads (a lookup's one PM read, without the byte-copy loop).
    fn read_pair(&self, off: u64) -> Result<(u64, u64)> {
        let mut b = [0u8; 16];
        self.read(off, &mut b)?;
        Ok(le_pair(&b))
    }

    /// Reads the little-endian `u64` at `off` (any alignment; not atomic).
    fn read_u64(&self, off: u64) -> Result<u64> {
        let mut bytes = [0u8; 8];
        self.read(off, &mut bytes)?;
        Ok(u64::from_le_bytes(bytes))
    }

    /// Writes `value` little-endian at `off` (any alignment; not atomic, see
    /// [`store_u64_atomic`](Pm::store_u64_atomic) for the commit store).
    fn write_u64(&self, off: u64, value: u64) -> Result<()> {
        self.write(off, &value.to_le_bytes())
    }

    /// Reads `len` bytes at `off` into a new vector.
    fn read_vec(&self, off: u64, len: usize) -> Result<Vec<u8>> {
        super::check_range(self.len(), off, len as u64)?;
        let mut buf = vec![0u8; len];
        self.read(off, &mut buf)?;
        Ok(buf)
    }
}

/// The two little-endian `u64`s of 16 bytes (a hash slot's key and value).
pub(crate) fn le_pair(b: &[u8; 16]) -> (u64, u64) {
    let (k, v) = b.split_at(8);
    (
        u64::from_le_bytes(k.try_into().expect("8 bytes")),
        u64::from_le_bytes(v.try_into().expect("8 bytes")),
    )
}

/// `Pm` through a reference or a shared pointer: every call forwarded to the region it points to.
macro_rules! forward_pm {
    ($($ptr:ty),*) => {$(
        impl<P: Pm + ?Sized> Pm for $ptr {
            fn len(&self) -> u64 {
                (**self).len()
            }
            fn mode(&self) -> PersistMode {
                (**self).mode()
            }
            fn read(&self, off: u64, buf: &mut [u8]) -> Result<()> {
                (**self).read(off, buf)
            }
            fn write(&self, off: u64, data: &[u8]) -> Result<()> {
                (**self).write(off, data)
            }
            fn read_pair(&self, off: u64) -> Result<(u64, u64)> {
                (**self).read_pair(off)
            }
            fn load_u64_atomic(&self, off: u64) -> Result<u64> {
                (**self).load_u64_atomic(off)
            }
            fn store_u64_atomic(&self, off: u64, value: u64) -> Result<()> {
                (**self).store_u64_atomic(off, value)
            }
            fn compare_exchange_u64(
                &self,
                off: u64,
                current: u64,
                new: u64,
            ) -> Result<std::result::Result<u64, u64>> {
                (**self).compare_exchange_u64(off, current, new)
            }
            fn flush(&self, off: u64, len: u64) -> Result<()> {
                (**self).flush(off, len)
            }
            fn fence(&self) {
                (**self).fence()
            }
            fn write_nt(&self, off: u64, data: &[u8]) -> Result<()> {
                (**self).write_nt(off, data)
            }
            fn persist(&self, off: u64, len: u64) -> Result<()> {
                (**self).persist(off, len)
            }
            fn prefetch(&self, off: u64) {
                (**self).prefetch(off)
            }
        }
    )*};
}

forward_pm!(&P, std::sync::Arc<P>);
