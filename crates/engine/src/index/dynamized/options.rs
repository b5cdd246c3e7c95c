//! Options of a dynamized index.

use crate::error::{Error, Result};

/// How shards are arranged in levels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    /// One shard per level; a flush or merge rewrites the receiving level's shard.
    Leveling,
    /// Up to `scale_factor` shards per level; a full level is merged into one shard of the next level.
    Tiering,
    /// Bentley–Saxe binary decomposition: level i is empty or holds one shard of up to N_b·2^i entries.
    Bsm,
}

/// How deletes (and overwrites) remove the old version of a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeletePolicy {
    /// A tombstone in the newer shard, cancelled with its target in a merge.
    Tombstone,
    /// A tag bit set in place on the old record.
    Tagging,
}

impl std::str::FromStr for Layout {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "leveling" => Ok(Layout::Leveling),
            "tiering" => Ok(Layout::Tiering),
            "bsm" => Ok(Layout::Bsm),
            o => Err(Error::invalid(format!(
                "unknown layout {o:?} (expected leveling, tiering or bsm)"
            ))),
        }
    }
}

impl std::str::FromStr for DeletePolicy {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "tombstone" => Ok(DeletePolicy::Tombstone),
            "tagging" => Ok(DeletePolicy::Tagging),
            o => Err(Error::invalid(format!(
                "unknown delete policy {o:?} (expected tombstone or tagging)"
            ))),
        }
    }
}

impl Layout {
    pub fn name(self) -> &'static str {
        match self {
            Layout::Leveling => "leveling",
            Layout::Tiering => "tiering",
            Layout::Bsm => "bsm",
        }
    }
}

impl DeletePolicy {
    pub fn name(self) -> &'static str {
        match self {
            DeletePolicy::Tombstone => "tombstone",
            DeletePolicy::Tagging => "tagging",
        }
    }
}

/// The structural options of a dynamized index (recorded in the database manifest).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DynOptions {
    pub layout: Layout,
    /// Level growth factor s (≥ 2; BSM uses 2 whatever is set).
    pub scale_factor: usize,
    /// Buffer capacity N_b in operations.
    pub buffer_capacity: usize,
    pub delete_policy: DeletePolicy,
    /// δ: a level whose deleted entries (tombstones and tags) exceed this share of its capacity is compacted.
    pub max_delete_proportion: f64,
    /// A sampling query whose share of rejected draws exceeds this asks for a compaction of the level with
    /// the most deleted entries.
    pub max_rejection_rate: f64,
    /// False-positive rate of the per-shard Bloom filters (over record keys and over tombstones).
    pub bloom_fpr: f64,
    /// Records carry weights (weighted sampling).
    pub weighted: bool,
    /// Bytes of memory for the buffers, the in-memory levels and every Bloom filter; levels that do not fit
    /// live on disk as shard files read page by page. 0 = no limit: every level in memory.
    pub memory_budget: u64,
}

impl Default for DynOptions {
    fn default() -> Self {
        DynOptions {
            layout: Layout::Tiering,
            scale_factor: 6,
            buffer_capacity: 12_000,
            delete_policy: DeletePolicy::Tombstone,
            max_delete_proportion: 0.05,
            max_rejection_rate: 0.5,
            bloom_fpr: 0.01,
            weighted: false,
            memory_budget: 0,
        }
    }
}

impl DynOptions {
    /// Checks every option; the message says which one is wrong.
    pub fn validate(&self) -> Result<()> {
        if !(2..=64).contains(&self.scale_factor) {
            return Err(Error::invalid(format!(
                "scale factor {} is out of range (2 to 64)",
                self.scale_factor
            )));
        }
        if !(1..=1 << 26).contains(&self.buffer_capacity) {
            return Err(Error::invalid(format!(
                "buffer capacity {} is out of range (1 to 67108864)",
                self.buffer_capacity
            )));
        }
        if !(self.max_delete_proportion > 0.0 && self.max_delete_proportion <= 1.0) {
            return Err(Error::invalid(format!(
                "maximum delete proportion {} must be in (0, 1]",
                self.max_delete_proportion
            )));
        }
        if !(self.max_rejection_rate > 0.0 && self.max_rejection_rate <= 1.0) {
            return Err(Error::invalid(format!(
                "maximum rejection rate {} must be in (0, 1]",
                self.max_rejection_rate
            )));
        }
        if !(self.bloom_fpr > 0.0 && self.bloom_fpr < 1.0) {
            return Err(Error::invalid(format!(
                "Bloom filter false-positive rate {} must be in (0, 1)",
                self.bloom_fpr
            )));
        }
        Ok(())
    }

    /// The effective growth factor (2 for BSM).
    pub fn growth(&self) -> usize {
        match self.layout {
            Layout::Bsm => 2,
            _ => self.scale_factor,
        }
    }

    /// Entries level `i` may hold.
    pub fn level_capacity(&self, i: usize) -> u64 {
        let g = self.growth() as u64;
        let base = self.buffer_capacity as u64;
        let exp = match self.layout {
            Layout::Bsm => i as u32,
            _ => i as u32 + 1,
        };
        g.checked_pow(exp)
            .and_then(|p| p.checked_mul(base))
            .unwrap_or(u64::MAX)
    }
}

/// Options of one open handle (not recorded on disk).
#[derive(Debug, Clone, PartialEq)]
pub struct RuntimeOptions {
    /// Run reconstructions on a background thread (false: inline, in the writer that fills the buffer).
    pub background: bool,
    /// Sealed buffers that may wait for their flush before writers stall (each N_b operations of memory).
    pub max_sealed_buffers: usize,
    /// Flushed shards that may wait for their placement in the levels (while the merger runs a long merge)
    /// before the flusher waits; queries visit each of them as one more shard.
    pub max_pending_shards: usize,
    /// Probabilistic insert throttling: while a flush runs, each write is delayed by one sleep with the
    /// probability that spreads the active buffer's remaining slots over the flush's expected remaining time
    /// (from the durations of recent flushes), so writers slow down a little, early, instead of stalling for
    /// the rest of the flush when the active buffer fills.
    pub throttle: bool,
    /// Delay of one throttled write.
    pub throttle_delay: std::time::Duration,
    /// Threads one reconstruction may use: a large in-memory merge and its Bloom filter are split by key
    /// range over this many (default: the machine's cores but one, at least 1: a core stays the writer's).
    /// 1 keeps every reconstruction on the worker.
    pub reconstruction_threads: usize,
}

impl Default for RuntimeOptions {
    fn default() -> Self {
        RuntimeOptions {
            background: true,
            max_sealed_buffers: 2,
            max_pending_shards: 96,
            throttle: false,
            throttle_delay: std::time::Duration::from_micros(20),
            // Every core but the writer's: a merge split over all of them would preempt the writer.
            reconstruction_threads: std::thread::available_parallelism()
                .map_or(1, |n| usize::from(n).saturating_sub(1))
                .max(1),
        }
    }
}
