//! A partition's worker state: runs groups of jobs in order and commits their writes as one (its executor decides
//! which thread runs it).

use super::PartitionCounters;
use super::executor::Executor;
use super::pacer::Pacer;
use crate::cache::{HotCache, Served};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use strata::{Direction, Durability, KeyRange, RawDb, WriteOp};
use xxhash_rust::xxh3::xxh3_64;

/// At durability `none`, how long an acknowledged write may stay only in memory.
pub const BACKGROUND_SYNC: Duration = Duration::from_secs(1);

/// What a SET does when the key exists or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetCondition {
    Always,
    /// NX: only if absent.
    IfAbsent,
    /// XX: only if present.
    IfPresent,
}

/// One operation on one partition. Keys and values are the engine's encoded bytes.
#[derive(Debug, Clone)]
pub enum Op {
    Get(Vec<u8>),
    Set {
        key: Vec<u8>,
        value: Vec<u8>,
        condition: SetCondition,
        /// Return the old value (SET ... GET, GETSET).
        get_old: bool,
    },
    /// Removes the key; answers whether it existed.
    Del(Vec<u8>),
    Exists(Vec<u8>),
    /// Adds `by` to the key's value read as a decimal integer (`u64_values`: stored as a `u64`).
    Incr {
        key: Vec<u8>,
        by: i64,
        u64_values: bool,
    },
    Append {
        key: Vec<u8>,
        value: Vec<u8>,
    },
    /// Up to `limit` records of the range in key order (`reverse`: descending).
    Range {
        lo: Bound<Vec<u8>>,
        hi: Bound<Vec<u8>>,
        limit: usize,
        reverse: bool,
    },
    Count {
        lo: Bound<Vec<u8>>,
        hi: Bound<Vec<u8>>,
    },
    /// `k` uniform samples (with replacement) of the range's records (none if it is empty).
    Sample {
        lo: Bound<Vec<u8>>,
        hi: Bound<Vec<u8>>,
        k: usize,
        seed: u64,
    },
    /// Number of records.
    Len,
    /// Install the key in the hot-key cache with its current value (it became hot).
    Populate(Vec<u8>),
    /// Take the key out of the cache: its value goes (back) into this partition.
    Evict(Vec<u8>),
    /// Write this partition's dirty cached values into it (a cache snapshot).
    FlushCached,
    /// Run the operation only if its key exists here, else answer [`OpResult::Absent`] (cluster mode, a
    /// migrating slot).
    IfPresent(Box<Op>),
}

/// The answer to one [`Op`].
#[derive(Debug, Clone, PartialEq)]
pub enum OpResult {
    /// A value or none (GET; SET with `get_old`).
    Value(Option<Vec<u8>>),
    /// SET: whether it wrote (NX/XX may refuse).
    Written(bool),
    /// The old value, and whether SET wrote.
    WrittenWithOld(bool, Option<Vec<u8>>),
    Bool(bool),
    Int(i64),
    Records(Vec<(Vec<u8>, Vec<u8>)>),
    Sample(Vec<(Vec<u8>, Vec<u8>)>),
    /// The operation failed; the text is the client's error reply (with its code).
    Error(String),
    /// [`Op::IfPresent`]: the key is not here, the operation did not run.
    Absent,
    /// No answer arrived (the placeholder a pipeline's results start from; finishing a command with it
    /// answers an error).
    NoAnswer,
}

/// The answers to a job: one per operation, and the cache-log ticket that must be durable before they are
/// given to the client (0: none).
#[derive(Debug, Default)]
pub struct JobReply {
    pub results: JobResults,
    pub ticket: u64,
}

/// A job's operations: one is held inline (a pipeline of depth 1 allocates no vector for its job).
pub type JobOps = smallvec::SmallVec<[Op; 1]>;
/// A job's answers, one per operation: one is held inline.
pub type JobResults = smallvec::SmallVec<[OpResult; 1]>;

/// A batch of operations for one partition and where to send their answers (in the same order).
#[derive(Debug)]
pub struct Job {
    pub ops: JobOps,
    pub reply: tokio::sync::oneshot::Sender<JobReply>,
}

/// What a worker needs of the rest of the store.
#[derive(Clone)]
pub(super) struct Peers {
    /// The hot-key cache, if on.
    pub cache: Option<Arc<HotCache>>,
    /// Every partition's executor (to ask another partition to evict a cache victim).
    pub partitions: Arc<parking_lot::RwLock<Vec<Arc<Executor>>>>,
}

/// A partition's state: its database, the writes of the group being run, and its counters. It lives in the
/// partition's [`Executor`], which runs groups of jobs on it.
pub(crate) struct Worker {
    partition: usize,
    peers: Peers,
    /// The emulated capacity of this partition (`--partition-capacity`), if any.
    pacer: Option<Pacer>,
    /// Highest cache-log ticket of the current job.
    ticket: u64,
    db: RawDb,
    durability: Durability,
    counters: Arc<PartitionCounters>,
    /// Writes of the current group not yet committed.
    pending: Vec<WriteOp>,
    /// Their effect on point reads: key → index in `pending` of its newest write.
    overlay: hashbrown::HashTable<usize>,
    /// Set when a group commit failed: the database refuses writes from then on.
    failed: Option<String>,
    /// Writes were committed since the last background sync (durability `none`).
    unsynced: bool,
}

impl Worker {
    pub(super) fn new(
        partition: usize,
        db: RawDb,
        durability: Durability,
        counters: Arc<PartitionCounters>,
        peers: Peers,
        pacer: Option<Pacer>,
    ) -> Worker {
        Worker {
            partition,
            pacer,
            peers,
            ticket: 0,
            db,
            durability,
            counters,
            pending: Vec::new(),
            overlay: hashbrown::HashTable::new(),
            failed: None,
            unsynced: false,
        }
    }

    /// Runs a group of jobs: every operation in order, then one commit of their writes, then the answers
    /// (every answer of the group becomes the commit's error if it failed). Leaves `group` empty.
    pub(super) fn run_group(&mut self, group: &mut Vec<(Job, JobResults)>) {
        let start = self.pacer.is_some().then(Instant::now);
        let mut commit_error = None;
        let mut tickets = Vec::with_capacity(group.len());
        let mut n_ops = 0;
        for (job, results) in group.iter_mut() {
            self.ticket = 0;
            n_ops += job.ops.len();
            for op in job.ops.drain(..) {
                results.push(self.apply(op, &mut commit_error));
            }
            tickets.push(self.ticket);
        }
        if let Err(e) = self.commit() {
            commit_error.get_or_insert(e);
        }
        self.counters.ops.fetch_add(n_ops as u64, Ordering::Relaxed);
        if let (Some(pacer), Some(start)) = (&mut self.pacer, start) {
            pacer.serve(start, n_ops);
        }
        for ((job, mut results), ticket) in group.drain(..).zip(tickets) {
            if let Some(e) = &commit_error {
                // Nothing of this group is known to be durable: every answer becomes the error.
                results
                    .iter_mut()
                    .for_each(|r| *r = OpResult::Error(e.clone()));
            }
            let _ = job.reply.send(JobReply { results, ticket });
        }
    }

    /// At durability `none`, writes are acknowledged from memory; this makes them durable (WAL written and
    /// synced) at most about [`BACKGROUND_SYNC`] later, as Redis's `appendfsync everysec` does.
    pub(super) fn background_sync(&mut self, last_sync: &mut Instant) {
        *last_sync = Instant::now();
        if self.durability != Durability::None || !self.unsynced || self.failed.is_some() {
            return;
        }
        match self.db.flush() {
            Ok(()) => self.unsynced = false,
            Err(e) => self.failed = Some(format!("ERR background sync failed: {e}")),
        }
    }

    /// Makes the pending writes durable (one WAL append at the store's durability).
    fn commit(&mut self) -> Result<(), String> {
        if self.pending.is_empty() {
            return Ok(());
        }
        self.overlay.clear();
        let n = self.pending.len();
        let written = match &self.failed {
            Some(e) => Err(e.clone()),
            None => self
                .db
                .write(&self.pending, Some(self.durability))
                .map_err(|e| {
                    let text = format!("ERR write failed: {e}");
                    self.failed = Some(text.clone());
                    text
                }),
        };
        // Keep the allocation for the next group.
        self.pending.clear();
        match written {
            Ok(()) => {
                self.counters.writes.fetch_add(n as u64, Ordering::Relaxed);
                self.counters.commits.fetch_add(1, Ordering::Relaxed);
                self.unsynced = true;
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    fn read(&self, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
        let newest = self
            .overlay
            .find(xxh3_64(key), |&i| self.pending_key_is(i, key))
            .and_then(|&i| self.pending.get(i));
        match newest {
            Some(WriteOp::Put { value, .. }) => Ok(Some(value.clone())),
            Some(_) => Ok(None),
            None => self.db.get(key).map_err(engine_error),
        }
    }

    fn pending_key_is(&self, i: usize, key: &[u8]) -> bool {
        self.pending.get(i).is_some_and(|w| w.key() == key)
    }

    /// Queues `op` as the newest write of its key in this group.
    fn queue(&mut self, op: WriteOp) {
        let i = self.pending.len();
        let pending = &self.pending;
        let key = op.key();
        let entry = self.overlay.entry(
            xxh3_64(key),
            |&j| pending.get(j).is_some_and(|w| w.key() == key),
            |&j| pending.get(j).map_or(0, |w| xxh3_64(w.key())),
        );
        match entry {
            hashbrown::hash_table::Entry::Occupied(mut e) => *e.get_mut() = i,
            hashbrown::hash_table::Entry::Vacant(e) => {
                e.insert(i);
            }
        }
        self.pending.push(op);
    }

    /// Queues a write. Keys and values are checked here, so one bad write never fails its group.
    fn put(&mut self, key: Vec<u8>, value: Vec<u8>) -> Result<(), String> {
        self.db.validate_key(&key).map_err(engine_error)?;
        if value.len() > strata::MAX_VALUE_LEN {
            return Err(format!(
                "ERR value of {} bytes exceeds the limit of {} bytes",
                value.len(),
                strata::MAX_VALUE_LEN
            ));
        }
        self.queue(WriteOp::Put { key, value });
        Ok(())
    }

    fn delete(&mut self, key: &[u8]) {
        self.queue(WriteOp::Delete { key: key.to_vec() });
    }

    fn apply(&mut self, op: Op, commit_error: &mut Option<String>) -> OpResult {
        match self.try_apply(op, commit_error) {
            Ok(r) => r,
            Err(e) => OpResult::Error(e),
        }
    }

    fn try_apply(&mut self, op: Op, commit_error: &mut Option<String>) -> Result<OpResult, String> {
        if self.failed.is_some() && writes(&op) {
            return Err(self.failed.clone().unwrap_or_default());
        }
        if let Some(cache) = self.peers.cache.clone() {
            match cache.serve(&op) {
                Served::Done(r, t) => {
                    self.ticket = self.ticket.max(t);
                    return Ok(r);
                }
                Served::NotCached => {}
                Served::NeedsEviction => {
                    if let Some(key) = crate::cache::op_key(&op) {
                        self.evict(&cache, key, commit_error)?;
                    }
                }
            }
        }
        match op {
            Op::Get(key) => Ok(OpResult::Value(self.read(&key)?)),
            Op::Exists(key) => Ok(OpResult::Bool(self.read(&key)?.is_some())),
            Op::Set {
                key,
                value,
                condition,
                get_old,
            } => {
                let old = if get_old || condition != SetCondition::Always {
                    self.read(&key)?
                } else {
                    None
                };
                let write = match condition {
                    SetCondition::Always => true,
                    SetCondition::IfAbsent => old.is_none(),
                    SetCondition::IfPresent => old.is_some(),
                };
                if write {
                    self.put(key, value)?;
                }
                Ok(if get_old {
                    OpResult::WrittenWithOld(write, old)
                } else {
                    OpResult::Written(write)
                })
            }
            Op::Del(key) => {
                let existed = self.read(&key)?.is_some();
                if existed {
                    self.delete(&key);
                }
                Ok(OpResult::Bool(existed))
            }
            Op::Incr {
                key,
                by,
                u64_values,
            } => {
                let old = self.read(&key)?;
                let next = incr(old.as_deref(), by, u64_values)?;
                let stored = counter_bytes(next, u64_values);
                self.put(key, stored)?;
                Ok(OpResult::Int(next))
            }
            Op::Append { key, value } => {
                let mut v = self.read(&key)?.unwrap_or_default();
                if v.len() + value.len() > strata::MAX_VALUE_LEN {
                    return Err(format!(
                        "ERR string exceeds maximum allowed size ({} bytes)",
                        strata::MAX_VALUE_LEN
                    ));
                }
                v.extend_from_slice(&value);
                let len = v.len() as i64;
                self.put(key, v)?;
                Ok(OpResult::Int(len))
            }
            Op::IfPresent(inner) => {
                let key = crate::cache::op_key(&inner)
                    .map(<[u8]>::to_vec)
                    .unwrap_or_default();
                let here = match self
                    .peers
                    .cache
                    .as_ref()
                    .map(|c| c.serve(&Op::Exists(key.clone())))
                {
                    Some(Served::Done(OpResult::Bool(b), _)) => b,
                    _ => self.read(&key)?.is_some(),
                };
                if here {
                    self.try_apply(*inner, commit_error)
                } else {
                    Ok(OpResult::Absent)
                }
            }
            Op::Populate(key) => {
                let Some(cache) = self.peers.cache.clone() else {
                    return Ok(OpResult::Bool(false));
                };
                let value = self.read(&key)?;
                if let Some((p, victim)) = cache.populate(&key, value, self.partition) {
                    if p == self.partition {
                        self.evict(&cache, &victim, commit_error)?;
                    } else if let Some(q) = self.peers.partitions.read().get(p) {
                        let (reply, _) = tokio::sync::oneshot::channel();
                        q.submit_to_thread(Job {
                            ops: smallvec::smallvec![Op::Evict(victim)],
                            reply,
                        });
                    }
                }
                Ok(OpResult::Bool(true))
            }
            Op::Evict(key) => {
                if let Some(cache) = self.peers.cache.clone() {
                    self.evict(&cache, &key, commit_error)?;
                }
                Ok(OpResult::Bool(true))
            }
            Op::FlushCached => {
                self.commit_before_read(commit_error);
                Ok(OpResult::Bool(true))
            }
            Op::Range {
                lo,
                hi,
                limit,
                reverse,
            } => {
                self.commit_before_read(commit_error);
                let range = key_range(&lo, &hi);
                let dir = if reverse {
                    Direction::Reverse
                } else {
                    Direction::Forward
                };
                let mut out = Vec::new();
                self.db
                    .scan_into(&range, dir, limit, &mut out)
                    .map_err(engine_error)?;
                Ok(OpResult::Records(out))
            }
            Op::Count { lo, hi } => {
                self.commit_before_read(commit_error);
                let n = self
                    .db
                    .count_range(&key_range(&lo, &hi))
                    .map_err(engine_error)?;
                Ok(OpResult::Int(n as i64))
            }
            Op::Sample { lo, hi, k, seed } => {
                self.commit_before_read(commit_error);
                let mut rng = ChaCha8Rng::seed_from_u64(seed);
                let records = self
                    .db
                    .sample_range(&key_range(&lo, &hi), k, &mut rng)
                    .map_err(engine_error)?;
                Ok(OpResult::Sample(records))
            }
            Op::Len => {
                self.commit_before_read(commit_error);
                Ok(OpResult::Int(self.db.len() as i64))
            }
        }
    }

    /// Range reads see the database, not the overlay or the cache: write this partition's dirty cached
    /// values into it and commit what is pending first.
    fn commit_before_read(&mut self, commit_error: &mut Option<String>) {
        if let Some(cache) = &self.peers.cache {
            for (key, value) in cache.drain_dirty(self.partition) {
                self.queue_write_back(key, value);
            }
        }
        if let Err(e) = self.commit() {
            commit_error.get_or_insert(e);
        }
    }

    /// Queues a cached value (`None`: deleted) as a write to this partition. Cached values were checked
    /// when they were written.
    fn queue_write_back(&mut self, key: Vec<u8>, value: Option<Vec<u8>>) {
        self.counters.write_backs.fetch_add(1, Ordering::Relaxed);
        self.queue(match value {
            Some(value) => WriteOp::Put { key, value },
            None => WriteOp::Delete { key },
        });
    }

    /// Takes `key` out of the cache into this partition: its dirty value is committed here first, then the
    /// eviction is logged (and made durable), so recovery never replays an older cached value over newer
    /// writes made here after the eviction.
    fn evict(
        &mut self,
        cache: &HotCache,
        key: &[u8],
        commit_error: &mut Option<String>,
    ) -> Result<(), String> {
        let taken = cache.take_for_eviction(key, |write| match write {
            Some(value) => {
                self.queue_write_back(key.to_vec(), value);
                self.commit()
            }
            None => Ok(()),
        });
        let needs_record = match taken {
            Ok(Some(n)) => n,
            Ok(None) => return Ok(()),
            Err(e) => {
                commit_error.get_or_insert(e.clone());
                return Err(e);
            }
        };
        if needs_record {
            let t = cache.log_eviction(key);
            if self.durability != Durability::None {
                cache.log().wait(t)?;
            }
        }
        Ok(())
    }
}

/// True if `op` may write to its partition.
pub(crate) fn writes(op: &Op) -> bool {
    matches!(
        op,
        Op::Set { .. }
            | Op::Del(_)
            | Op::Incr { .. }
            | Op::Append { .. }
            | Op::Populate(_)
            | Op::Evict(_)
            | Op::FlushCached
    ) || matches!(op, Op::IfPresent(inner) if writes(inner))
}

/// How a counter's value is stored: a `u64` (`u64_values`, never negative: `incr` refuses that) or decimal
/// text.
pub(crate) fn counter_bytes(n: i64, u64_values: bool) -> Vec<u8> {
    if u64_values {
        (n as u64).to_be_bytes().to_vec()
    } else {
        n.to_string().into_bytes()
    }
}

/// The new value of INCRBY `by` on `old` (decimal text, or a `u64` when `u64_values`).
pub(crate) fn incr(old: Option<&[u8]>, by: i64, u64_values: bool) -> Result<i64, String> {
    const NOT_INT: &str = "ERR value is not an integer or out of range";
    let current: i64 = match old {
        None => 0,
        Some(v) if u64_values => {
            let b: [u8; 8] = v.try_into().map_err(|_| NOT_INT.to_string())?;
            i64::try_from(u64::from_be_bytes(b)).map_err(|_| NOT_INT.to_string())?
        }
        Some(v) => std::str::from_utf8(v)
            .ok()
            .filter(|s| !s.is_empty() && s.len() <= 20 && !s.starts_with('+'))
            .and_then(|s| s.parse::<i64>().ok())
            .ok_or_else(|| NOT_INT.to_string())?,
    };
    let next = current
        .checked_add(by)
        .ok_or_else(|| "ERR increment or decrement would overflow".to_string())?;
    if u64_values && next < 0 {
        return Err(
            "ERR the value would be negative, and this index stores unsigned integers".into(),
        );
    }
    Ok(next)
}

fn key_range(lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> KeyRange {
    KeyRange {
        lo: lo.clone(),
        hi: hi.clone(),
    }
}

fn engine_error(e: strata::Error) -> String {
    match e {
        strata::Error::InvalidArgument(m) => format!("ERR {m}"),
        other => format!("ERR {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn incr_follows_redis() {
        assert_eq!(incr(None, 5, false), Ok(5));
        assert_eq!(incr(Some(b"-3"), 1, false), Ok(-2));
        assert!(incr(Some(b"x"), 1, false).is_err());
        assert!(incr(Some(b" 1"), 1, false).is_err());
        assert!(incr(Some(b"+1"), 1, false).is_err());
        assert_eq!(
            incr(Some(b"9223372036854775807"), 1, false),
            Err("ERR increment or decrement would overflow".into())
        );
        assert_eq!(incr(Some(&7u64.to_be_bytes()), 3, true), Ok(10));
        assert!(incr(Some(&7u64.to_be_bytes()), -8, true).is_err());
    }
}
