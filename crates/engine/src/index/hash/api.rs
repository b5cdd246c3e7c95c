//! The operations both persistent hash indexes offer ([`HashIndex`](super::HashIndex) and
//! [`DashIndex`](super::dash::DashIndex)), as one trait, so that tests and benchmarks can drive either.

use crate::error::Result;
use crate::storage::pm::Pm;

/// A persistent `u64 → u64` hash index over a PM region `P`. Single writer (`&mut self`), readers between
/// writes (`&self`); every method delegates to the index's inherent method of the same name.
pub trait PmHashIndex<P: Pm>: Sized {
    /// Short name of the design (for reports and benchmark labels).
    fn name() -> &'static str;
    /// Recovers the index stored in `pm` (`Error::Corruption` on damage).
    fn open(pm: P) -> Result<Self>;
    /// The region the index lives in.
    fn pm(&self) -> &P;
    /// Gives the region back (nothing is written: every acknowledged write is already durable).
    fn into_pm(self) -> P;
    /// Inserts or updates `key`; durable when it returns.
    fn insert(&mut self, key: u64, value: u64) -> Result<()>;
    /// The value of `key`, if present.
    fn get(&self, key: u64) -> Result<Option<u64>>;
    /// Removes `key`; `true` when it was present. Durable when it returns.
    fn remove(&mut self, key: u64) -> Result<bool>;
    /// Live keys.
    fn len(&self) -> u64;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Calls `visit(key, value)` once for every live key.
    fn for_each(&self, visit: impl FnMut(u64, u64)) -> Result<()>;
    /// Every live record, in no particular order.
    fn entries(&self) -> Result<Vec<(u64, u64)>> {
        let mut out = Vec::with_capacity(self.len() as usize);
        self.for_each(|k, v| out.push((k, v)))?;
        Ok(out)
    }
    /// The structural self-check (any mismatch is `Error::Corruption`).
    fn check_invariants(&self) -> Result<()>;
    /// Live keys ÷ slots.
    fn load_factor(&self) -> f64;
    /// Slots of the current table.
    fn capacity(&self) -> u64;
    /// Bytes of DRAM the index holds.
    fn dram_bytes(&self) -> u64;
    /// Bytes of the region in use.
    fn pm_bytes_used(&self) -> u64;
}

/// Implements [`PmHashIndex`] for an index type by delegating to its inherent methods.
macro_rules! delegate_pm_hash_index {
    ($index:ident, $name:literal) => {
        impl<P: Pm> PmHashIndex<P> for $index<P> {
            fn name() -> &'static str {
                $name
            }
            fn open(pm: P) -> Result<Self> {
                $index::open(pm)
            }
            fn pm(&self) -> &P {
                $index::pm(self)
            }
            fn into_pm(self) -> P {
                $index::into_pm(self)
            }
            fn insert(&mut self, key: u64, value: u64) -> Result<()> {
                $index::insert(self, key, value)
            }
            fn get(&self, key: u64) -> Result<Option<u64>> {
                $index::get(self, key)
            }
            fn remove(&mut self, key: u64) -> Result<bool> {
                $index::remove(self, key)
            }
            fn len(&self) -> u64 {
                $index::len(self)
            }
            fn for_each(&self, visit: impl FnMut(u64, u64)) -> Result<()> {
                $index::for_each(self, visit)
            }
            fn check_invariants(&self) -> Result<()> {
                $index::check_invariants(self)
            }
            fn load_factor(&self) -> f64 {
                $index::load_factor(self)
            }
            fn capacity(&self) -> u64 {
                $index::capacity(self)
            }
            fn dram_bytes(&self) -> u64 {
                $index::dram_bytes(self)
            }
            fn pm_bytes_used(&self) -> u64 {
                $index::pm_bytes_used(self)
            }
        }
    };
}

use super::HashIndex;
use super::dash::DashIndex;

delegate_pm_hash_index!(HashIndex, "elimda");
delegate_pm_hash_index!(DashIndex, "dash");
