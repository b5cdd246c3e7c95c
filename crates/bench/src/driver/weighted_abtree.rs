//! # The weighted AB-tree baseline (`weighted-ab-tree`)
//!
//! The baseline of Rumbaugh & Xie's weighted sampling experiments: an in-memory B+-tree whose inner nodes
//! keep, per child, the subtree's record count and weight sum (an aggregate B+-tree, the paper's TLX-based
//! "weighted AB-tree"), sampled by Olken's method — every sample is an independent root-to-leaf descent that
//! picks children in proportion to their weight sums.
//!
//! [`WeightedBPlusTree`] is the structure: `u64` keys, `u64` values, `f64` weights (finite, ≥ 0; anything
//! else is refused with [`WeightedTreeError::InvalidWeight`], never a panic). Nodes live in two arenas
//! (`Vec`s of leaves and of inner nodes, with free lists); a child id is an index into the leaf arena when
//! its parent sits just above the leaves, into the inner arena otherwise.
//!
//! * Leaves hold sorted keys with their values and weights, at most `fanout` (default [`FANOUT`] = 64).
//! * Inner nodes hold `m` children (at most `fanout`), `m − 1` strictly increasing separator keys, and per
//!   child its subtree's record count and weight sum. Every key of child `j` lies in `[sep[j−1], sep[j])`.
//!
//! ## Invariants (checked by [`WeightedBPlusTree::check`])
//!
//! * Every leaf is at the same depth ([`height`](WeightedBPlusTree::height) levels, 1 = the root is a
//!   leaf).
//! * Every node but the root has between `fanout / 2` and `fanout` entries; an inner root has at least 2
//!   children. So the height is at most 1 + ⌈log_{fanout/2}(n)⌉.
//! * Each inner entry's count and weight sum are exactly (bit for bit) the sum, left to right, of the
//!   child's own entries (its children's counts and sums, or a leaf's weights). They are never adjusted by
//!   deltas: whenever a node changes, its parent's entry is recomputed from the node's contents, so
//!   floating-point error does not accumulate over any number of updates — each stored sum is as exact as a
//!   fresh left-to-right sum of ≤ `fanout` terms per level.
//! * A weight sum is 0 exactly when every weight below it is 0, so descents never enter a zero-weight
//!   subtree and never pick a zero-weight record.
//!
//! ## Operations and cost (B = fanout, n = records)
//!
//! * [`insert`](WeightedBPlusTree::insert) (insert or overwrite) and [`delete`](WeightedBPlusTree::delete)
//!   (absent key: no effect): one descent, then the entries of the path are recomputed bottom-up, with
//!   splits on overflow and, on underflow, a merge with a sibling or an even redistribution between the two
//!   — O(B log_B n).
//! * [`get`](WeightedBPlusTree::get): O(log n). [`count`](WeightedBPlusTree::count) of a key range: two
//!   rank descents, O(B log_B n).
//! * [`sample`](WeightedBPlusTree::sample) (weighted set sampling, k records over the whole set, with
//!   replacement): u uniform in [0, W), then a descent by prefix weight — O(k · B log_B n).
//! * [`sample_range`](WeightedBPlusTree::sample_range) (weighted independent range sampling over
//!   `[lo, hi]`): one descent each for the prefix weight before `lo` (P_lo) and up to `hi` (P_hi), then per
//!   sample u uniform in [P_lo, P_hi) and a descent by prefix weight — O(B log_B n + k · B log_B n). The
//!   descent accumulates prefixes in the same order as the prefix descents, but a stored child sum and the
//!   running sum of that child's entries can differ in the last bit, so a draw within rounding distance of
//!   P_lo or P_hi may land on the neighbouring record just outside the range; such draws are rejected and
//!   redrawn (probability ~10⁻¹⁶ · total / range weight per draw). An empty range, or one whose records all
//!   weigh 0 (decided exactly, from the per-child sums of the range's canonical decomposition, one more
//!   O(B log_B n) pass per query), returns nothing — as the other drivers do. Weights whose sums overflow
//!   `f64` ([`WeightedTreeError::WeightOverflow`]) or ranges whose weight is below the resolution of the
//!   prefix sums ([`WeightedTreeError::BelowResolution`]) are errors, not endless redraws.
//!
//! [`WeightedAbTree`] is the [`Engine`] and [`WeightedAbTreeDriver`] the [`Driver`]: the structure behind a
//! `RwLock` (samples, gets, counts and scans share it; writes take it exclusively). It lives in memory
//! only: no files, no WAL, no persistence. Creating a database creates its directory (so the lab's
//! disk-usage measure reads 0 bytes) and an empty tree; opening an existing one is a usage error, as there is
//! nothing to reopen; [`Driver::checkpoint`] does nothing. Plain [`Driver::put`] stores weight 1.

use super::{Capabilities, Driver, Engine, EngineOptions, ValueFormat, Visit};
use crate::error::{BenchError, Result};
use std::path::Path;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

mod queries;
mod tree;

pub use tree::{FANOUT, WeightedBPlusTree, WeightedTreeError};

/// The engine's name in results.
pub const NAME: &str = "weighted-ab-tree";

/// The `weighted-ab-tree` engine: an in-memory [`WeightedBPlusTree`] per database (module doc).
#[derive(Debug, Clone, Copy, Default)]
pub struct WeightedAbTree;

impl Engine for WeightedAbTree {
    fn name(&self) -> &'static str {
        NAME
    }

    fn version(&self) -> String {
        env!("CARGO_PKG_VERSION").to_string()
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            count: true,
            sample: true,
            byte_values: false,
        }
    }

    fn settings(&self, _opts: &EngineOptions) -> String {
        format!(
            "in-memory aggregate B+-tree, fanout {FANOUT} (leaves of at most {FANOUT} records; inner nodes of at \
             most {FANOUT} children with per-child record counts and weight sums), Olken's method (one \
             root-to-leaf descent per sample); no files, no WAL, no persistence (durability, cache budget and \
             page size do not apply); inline u64 values"
        )
    }

    fn open_dir(&self, dir: &Path, opts: &EngineOptions, create: bool) -> Result<Box<dyn Driver>> {
        if opts.values != ValueFormat::U64 {
            return Err(BenchError::Usage(format!(
                "{NAME} stores u64 values only (run with --value-size 8)"
            )));
        }
        if !create {
            return Err(BenchError::Usage(format!(
                "{NAME} lives in memory only and keeps no files: there is no database in {} to open",
                dir.display()
            )));
        }
        // The directory stays empty; it exists so that a phase can measure its (zero) disk usage.
        std::fs::create_dir_all(dir).map_err(|e| BenchError::io(dir, e))?;
        Ok(Box::new(
            WeightedAbTreeDriver::new(WeightedBPlusTree::new()),
        ))
    }
}

/// An open `weighted-ab-tree` database: a [`WeightedBPlusTree`] behind a `RwLock`.
#[derive(Debug)]
pub struct WeightedAbTreeDriver {
    tree: RwLock<WeightedBPlusTree>,
}

impl WeightedAbTreeDriver {
    /// A driver over `tree`.
    pub fn new(tree: WeightedBPlusTree) -> Self {
        WeightedAbTreeDriver {
            tree: RwLock::new(tree),
        }
    }

    fn read(&self) -> Result<RwLockReadGuard<'_, WeightedBPlusTree>> {
        self.tree
            .read()
            .map_err(|_| BenchError::peer(NAME, "a writer panicked while holding the tree"))
    }

    fn write(&self) -> Result<RwLockWriteGuard<'_, WeightedBPlusTree>> {
        self.tree
            .write()
            .map_err(|_| BenchError::peer(NAME, "a writer panicked while holding the tree"))
    }
}

/// A value of the `u64` format: exactly 8 big-endian bytes.
fn decode_value(value: &[u8]) -> Result<u64> {
    let bytes: [u8; 8] = value.try_into().map_err(|_| {
        BenchError::Usage(format!(
            "{NAME} stores u64 values: {} bytes given, 8 expected",
            value.len()
        ))
    })?;
    Ok(u64::from_be_bytes(bytes))
}

impl Driver for WeightedAbTreeDriver {
    fn engine(&self) -> &'static str {
        NAME
    }

    fn put(&self, key: u64, value: &[u8]) -> Result<()> {
        self.put_weighted(key, value, 1.0)
    }

    fn put_weighted(&self, key: u64, value: &[u8], weight: f64) -> Result<()> {
        let value = decode_value(value)?;
        self.write()?.insert(key, value, weight)?;
        Ok(())
    }

    fn put_batch(&self, records: &[(u64, &[u8])]) -> Result<()> {
        // All or nothing: every value is checked before the first insert (weight 1 cannot be refused).
        let values = records
            .iter()
            .map(|(_, v)| decode_value(v))
            .collect::<Result<Vec<u64>>>()?;
        let mut tree = self.write()?;
        for ((key, _), value) in records.iter().zip(values) {
            tree.insert(*key, value, 1.0)?;
        }
        Ok(())
    }

    fn get(&self, key: u64, value: &mut Vec<u8>) -> Result<bool> {
        match self.read()?.get(key) {
            Some((v, _)) => {
                value.clear();
                value.extend_from_slice(&v.to_be_bytes());
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn delete(&self, key: u64) -> Result<()> {
        self.write()?.delete(key);
        Ok(())
    }

    fn scan_range(
        &self,
        lo: u64,
        hi: u64,
        limit: u64,
        reverse: bool,
        visit: &mut Visit<'_>,
    ) -> Result<u64> {
        if limit == 0 {
            return Ok(0);
        }
        let tree = self.read()?;
        let mut seen = 0u64;
        tree.visit_range(lo, hi, reverse, &mut |k, v| {
            visit(k, &v.to_be_bytes())?;
            seen += 1;
            Ok::<bool, BenchError>(seen < limit)
        })?;
        Ok(seen)
    }

    fn count(&self, lo: u64, hi: u64) -> Result<u64> {
        Ok(self.read()?.count(lo, hi))
    }

    fn sample_visit(
        &self,
        lo: u64,
        hi: u64,
        k: usize,
        rng: &mut dyn rand::RngCore,
        visit: &mut dyn FnMut(u64, &[u8]) -> Result<()>,
    ) -> Result<()> {
        self.read()?.sample_range(lo, hi, k, rng, |key, value| {
            visit(key, &value.to_be_bytes())
        })?;
        Ok(())
    }

    /// Nothing to do: the tree has no files.
    fn checkpoint(&self) -> Result<()> {
        Ok(())
    }

    fn height(&self) -> Option<u32> {
        self.read().ok().map(|t| t.height())
    }

    fn close(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests;
