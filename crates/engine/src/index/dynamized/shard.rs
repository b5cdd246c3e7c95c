//! The static structure the framework dynamizes: the [`Shard`] trait.
//!
//! A shard is immutable once built. It holds records with unique ascending keys and, separately, tombstones
//! with unique ascending keys (see `run`). The framework needs every shard to be *sorted* (it cancels
//! tombstones in merges, answers range queries and scans through `lower_bound`/`upper_bound`); beyond that a
//! shard only has to answer indexed access and, for weighted sampling, weighted draws.
//!
//! Methods that may read from disk return `Result`: an in-memory shard never fails, an on-disk shard reports
//! damage as `Error::Corruption` with its file and offset.
//!
//! Tags, Bloom filters and identity live beside the shard in the framework's `ShardSlot`, so a new static
//! structure only implements what is specific to it.

use super::column_run::ColumnRun;
use super::run::{Record, SortedRun};
use crate::algo::alias::ColumnPick;
pub use crate::algo::prefetch_line;
use crate::error::Result;
use rand::RngCore;

/// A draw inside a shard, which may take stages: a stage that needs a cache line asks the CPU for it and
/// returns [`DrawStep::Pending`]; the caller resumes the draw with [`RangeDrawer::advance`] after starting
/// other draws, so that the cache misses of many draws overlap instead of following one another.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DrawStep {
    /// The drawn record index.
    Done(usize),
    /// Waiting on a cache line that was asked for.
    Pending(PendingDraw),
}

/// The state of a pending draw; its meaning is the drawer's own.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PendingDraw {
    pub stage: u32,
    pub at: usize,
    pub pick: ColumnPick,
}

/// Repeated draws in one index range of one shard (see [`Shard::drawer`]).
pub trait RangeDrawer {
    /// Starts one draw.
    fn start(&self, rng: &mut Words<'_>) -> Result<DrawStep>;
    /// Resumes a draw that [`start`](Self::start) or `advance` left pending.
    fn advance(&self, pending: PendingDraw, rng: &mut Words<'_>) -> Result<DrawStep>;
    /// One whole draw, stage after stage.
    fn draw(&self, rng: &mut Words<'_>) -> Result<usize> {
        let mut step = self.start(rng)?;
        loop {
            match step {
                DrawStep::Done(i) => return Ok(i),
                DrawStep::Pending(p) => step = self.advance(p, rng)?,
            }
        }
    }
}

/// A boxed drawer.
pub type Drawer<'a> = Box<dyn RangeDrawer + 'a>;

/// The default drawer: each draw is one [`Shard::sample_in`], in a single stage.
pub struct SampleIn<'a, S> {
    pub shard: &'a S,
    pub lo: usize,
    pub hi: usize,
}

impl<S: Shard> RangeDrawer for SampleIn<'_, S> {
    fn start(&self, rng: &mut Words<'_>) -> Result<DrawStep> {
        Ok(DrawStep::Done(self.shard.sample_in(self.lo, self.hi, rng)?))
    }
    /// Never left pending by `start`; a call draws afresh.
    fn advance(&self, _pending: PendingDraw, rng: &mut Words<'_>) -> Result<DrawStep> {
        self.start(rng)
    }
}

/// How a shard is to be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuildOptions {
    /// Keep per-record weights (weighted sampling); without them every weight is 1.
    pub weighted: bool,
    /// Threads a build may use (large in-memory merges and their filters split by parts; at least 1).
    pub threads: usize,
}

impl BuildOptions {
    /// One thread, weights kept as `weighted` says.
    pub const fn single(weighted: bool) -> BuildOptions {
        BuildOptions {
            weighted,
            threads: 1,
        }
    }
}

/// A static, sorted structure over records and tombstones.
pub trait Shard: Send + Sync + Sized + 'static {
    /// Name of the structure (for stats and reports).
    const NAME: &'static str;

    /// Builds the shard from a sorted run.
    fn build(run: SortedRun, opts: BuildOptions) -> Result<Self>;

    /// Builds the shard from a sorted run in columns (what flushes and in-memory merges produce). The
    /// default converts it to records for [`build`](Self::build); shards stored in columns take the
    /// vectors over without copying.
    fn build_columns(run: ColumnRun, opts: BuildOptions) -> Result<Self> {
        Self::build(run.into_sorted_run(), opts)
    }

    /// Records (tombstones not included).
    fn len(&self) -> usize;
    /// True when the shard holds no record.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Tombstones.
    fn tombstone_count(&self) -> usize;
    /// Key of record `i` (`i < len()`).
    fn key_at(&self, i: usize) -> Result<u64>;
    /// Record `i` (`i < len()`).
    fn record_at(&self, i: usize) -> Result<Record>;
    /// Appends records `indexes[0]`, `indexes[1]`, … (each `< len()`, in any order, repeats allowed) to `out`
    /// in that order. A shard on disk reads each distinct page once, every page of the call together, nearby
    /// pages in one call (`DiskShard`); by default one [`record_at`](Self::record_at) after another.
    fn records_at(&self, indexes: &[usize], out: &mut Vec<Record>) -> Result<()> {
        out.reserve(indexes.len());
        for &i in indexes {
            out.push(self.record_at(i)?);
        }
        Ok(())
    }
    /// True when [`records_at`](Self::records_at) over many indexes is much cheaper than as many
    /// `record_at` calls (a shard on disk: one batch of reads instead of one dependent read per record), so a
    /// sampler should gather a round's indexes per shard first. False by default.
    fn fetches_in_batches(&self) -> bool {
        false
    }
    /// Records per unit of [`records_at`](Self::records_at)'s reads: records `i` and `j` share a read when
    /// `i / n == j / n` (a disk shard: records per page). A sampler splitting a round's fetches into parallel
    /// tasks cuts them between such units, so no page is read twice. 1 by default.
    fn records_per_read(&self) -> usize {
        1
    }
    /// Appends the weights of records `lo..hi` (`hi ≤ len()`) to `out`.
    fn extend_weights(&self, lo: usize, hi: usize, out: &mut Vec<f64>) -> Result<()> {
        for i in lo..hi {
            out.push(self.record_at(i)?.weight);
        }
        Ok(())
    }
    /// Key of tombstone `j` (`j < tombstone_count()`).
    fn tombstone_at(&self, j: usize) -> Result<u64>;
    /// Index of the first tombstone ≥ `key` (`tombstone_count()` if none); by default a binary search over
    /// [`tombstone_at`](Self::tombstone_at).
    fn tombstone_lower_bound(&self, key: u64) -> Result<usize> {
        let (mut lo, mut hi) = (0usize, self.tombstone_count());
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.tombstone_at(mid)? < key {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok(lo)
    }
    /// Appends whether the shard holds a tombstone for each of `keys` to `out`, in order. A shard on disk
    /// reads the tombstone pages of all of them as one batch; by default one
    /// [`has_tombstone`](Self::has_tombstone) after another.
    fn has_tombstones(&self, keys: &[u64], out: &mut Vec<bool>) -> Result<()> {
        for &k in keys {
            out.push(self.has_tombstone(k)?);
        }
        Ok(())
    }
    /// Reads ahead what [`lower_bound`](Self::lower_bound)`(lo)`, [`upper_bound`](Self::upper_bound)`(hi)`
    /// and the tombstone bounds of `lo` and `hi` will read, so that a query's preprocessing finds it cached
    /// (a shard on disk: the few pages its fences point to). Nothing by default.
    fn warm_bounds(&self, lo: u64, hi: u64) -> Result<()> {
        let _ = (lo, hi);
        Ok(())
    }
    /// Index of the first record with a key ≥ `key` (`len()` if none).
    fn lower_bound(&self, key: u64) -> Result<usize>;
    /// Index of the first record with a key > `key` (`len()` if none).
    fn upper_bound(&self, key: u64) -> Result<usize>;
    /// True if the shard holds a tombstone for `key`.
    fn has_tombstone(&self, key: u64) -> Result<bool>;
    /// Index of the record with `key`, if any.
    fn find(&self, key: u64) -> Result<Option<usize>> {
        let i = self.lower_bound(key)?;
        Ok((i < self.len() && self.key_at(i)? == key).then_some(i))
    }
    /// [`find`](Self::find) of every key of `keys`, appended to `out` in order. In-memory shards search
    /// them together so that their cache misses overlap (a flush looks up hundreds of keys per shard).
    fn find_many(&self, keys: &[u64], out: &mut Vec<Option<usize>>) -> Result<()> {
        for &key in keys {
            out.push(self.find(key)?);
        }
        Ok(())
    }
    /// Bytes of memory the shard holds (records and search structure; for on-disk shards what stays
    /// resident).
    fn memory_bytes(&self) -> usize;

    /// True when the shard's keys are in memory (every key can be listed without I/O). The global key filter
    /// covers exactly the resident shards; the others are asked about every key a flush writes (on-disk
    /// shards answer most of those from their in-memory key filter).
    fn resident(&self) -> bool {
        true
    }

    /// A hint that record `i` will be read soon (in-memory shards prefetch its cache lines); no effect by
    /// default.
    #[inline]
    fn prefetch(&self, i: usize) {
        let _ = i;
    }

    /// Total weight of records `lo..hi` (their count in unweighted shards).
    fn range_weight(&self, lo: usize, hi: usize) -> Result<f64> {
        Ok(hi.saturating_sub(lo) as f64)
    }
    /// A drawer for many draws in `lo..hi` (non-empty, of positive weight): per-query preprocessing done
    /// once, after which each call draws one index as [`sample_in`](Self::sample_in) does. By default each
    /// call is a `sample_in`; shards with costlier single draws (the WIRS tree) build a per-range sampler.
    fn drawer(&self, lo: usize, hi: usize) -> Result<Drawer<'_>> {
        Ok(Box::new(SampleIn {
            shard: self,
            lo,
            hi,
        }))
    }
    /// One record index of `lo..hi` (non-empty) drawn with probability proportional to its weight (uniform
    /// in unweighted shards).
    fn sample_in(&self, lo: usize, hi: usize, rng: &mut dyn RngCore) -> Result<usize> {
        Ok(lo + uniform_below(rng, (hi - lo) as u64) as usize)
    }
}

/// Random words drawn in blocks from a `&mut dyn RngCore`: one virtual call per 64 words instead of one
/// per word (a sampling query needs about three words per draw), and a concrete type, so that drawers and
/// alias tables drawing from it inline their word fetches.
pub struct Words<'a> {
    rng: &'a mut dyn RngCore,
    words: [u64; 64],
    next: usize,
}

impl<'a> Words<'a> {
    pub fn new(rng: &'a mut dyn RngCore) -> Self {
        Words {
            rng,
            words: [0; 64],
            next: 64,
        }
    }
}

impl RngCore for Words<'_> {
    fn next_u32(&mut self) -> u32 {
        self.next_u64() as u32
    }
    #[inline]
    fn next_u64(&mut self) -> u64 {
        if self.next == self.words.len() {
            let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut self.words);
            self.rng.fill_bytes(bytes);
            self.next = 0;
        }
        let w = self.words[self.next];
        self.next += 1;
        w
    }
    fn fill_bytes(&mut self, dst: &mut [u8]) {
        self.rng.fill_bytes(dst)
    }
}

/// A uniform integer in `0..n` (`n > 0`), by Lemire's multiply-shift with rejection (no modulo bias).
#[inline]
pub fn uniform_below<R: RngCore + ?Sized>(rng: &mut R, n: u64) -> u64 {
    debug_assert!(n > 0);
    let m = u128::from(rng.next_u64()) * u128::from(n);
    if (m as u64) < n {
        // The rare case where the low half may fall in the biased zone: compute its bound (a division)
        // only here, and redraw while inside it.
        let zone = n.wrapping_neg() % n;
        let mut m = m;
        while (m as u64) < zone {
            m = u128::from(rng.next_u64()) * u128::from(n);
        }
        return (m >> 64) as u64;
    }
    (m >> 64) as u64
}

/// A uniform real in `[0, 1)` with 53 bits.
#[inline]
pub fn unit_f64<R: RngCore + ?Sized>(rng: &mut R) -> f64 {
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}
