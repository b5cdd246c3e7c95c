//! A sampling query's reads from shards on disk ([`Shard::fetches_in_batches`]), spread over the shard I/O
//! pool (`shard_file::batch_read`) so that a query waits for about one page read per step instead of one
//! per page or per shard:
//!
//! 1. [`warm_disk_bounds`]: the pages the shards' bound searches will read (known from the in-memory
//!    fences), one pool task per shard, so preprocessing then finds them cached.
//! 2. [`BatchedFetch`]: a round's drawn records. Each disk shard's draws are sorted and cut into chunks of
//!    whole pages ([`Shard::records_per_read`]), about ⌈pages / (pool threads + 1)⌉ distinct pages each, and
//!    every chunk of every shard is one task of one `run_jobs` call: each distinct page is read once (pages
//!    the bound searches cached are not read at all), nearby pages of a chunk in one call (spans,
//!    `shard_file::batch_read`; the chunks of a shard are consecutive page ranges, so a wide range's
//!    pages become a few large reads), and the round's reads run about as deep as its spans divided by
//!    the threads, not as the sum over shards.
//! 3. [`TombstoneAnswers`]: a round's tombstone checks, the keys each shard's tombstone filter lets through,
//!    one task per shard.
//!
//! With batched reads off on the query's thread (`with_batched_reads(false)`), steps 1–3 run on that thread,
//! one shard and one page after another (for comparisons; the answers are the same).
//!
//! Invariants: answers (records, tombstone verdicts) are exactly those of the shards' one-at-a-time calls,
//! in the round's draw order; an error of any task fails the round (the query), with nothing served from it.
//! Cost per round: O(draws · log draws) to sort the indexes, one task (a boxed closure and a channel
//! message) per chunk or shard.

use super::run::Record;
use super::shard::Shard;
use super::shard_file::batch_read::{IO_THREADS, Task, batched_reads, run_jobs};
use super::version::ShardSlot;
use crate::algo::bloom::KeyHash;
use crate::error::Result;
use parking_lot::Mutex;
use std::sync::Arc;

/// With batched reads on (`shard_file::batched_reads`) and two or more shards that fetch in batches (on
/// disk), reads the pages their bound searches will need — about four per shard, known from the in-memory
/// fences — on the shard I/O pool, one task per shard, so the query's preprocessing then finds them cached
/// instead of reading them one shard after another.
pub(super) fn warm_disk_bounds<S: Shard>(
    shards: &[&Arc<ShardSlot<S>>],
    lo: u64,
    hi: u64,
) -> Result<()> {
    if !batched_reads()
        || shards
            .iter()
            .filter(|s| s.shard.fetches_in_batches())
            .count()
            < 2
    {
        return Ok(());
    }
    let tasks: Vec<Task> = shards
        .iter()
        .filter(|s| s.shard.fetches_in_batches())
        .map(|&s| {
            let slot = s.clone();
            Box::new(move || slot.shard.warm_bounds(lo, hi)) as Task
        })
        .collect();
    run_jobs(tasks)
}

/// Runs `work` over `items` — each a shard position and what to ask it — as tasks of one [`run_jobs`] call
/// (batched reads on) or one after another on this thread (off), and returns each item's answer in `items`
/// order.
fn answer_all<S: Shard, I: Send + 'static, A: Send + 'static>(
    shards: &[&Arc<ShardSlot<S>>],
    items: Vec<(usize, I)>,
    work: fn(&S, &I) -> Result<A>,
) -> Result<Vec<A>> {
    if !batched_reads() || items.len() < 2 {
        return items
            .iter()
            .map(|(p, item)| work(&shards[*p].shard, item))
            .collect();
    }
    let answers: Arc<Mutex<Vec<Option<A>>>> =
        Arc::new(Mutex::new((0..items.len()).map(|_| None).collect()));
    let tasks: Vec<Task> = items
        .into_iter()
        .enumerate()
        .map(|(n, (p, item))| {
            let (slot, answers) = (shards[p].clone(), answers.clone());
            Box::new(move || {
                let a = work(&slot.shard, &item)?;
                answers.lock()[n] = Some(a);
                Ok(())
            }) as Task
        })
        .collect();
    run_jobs(tasks)?;
    let answers = std::mem::take(&mut *answers.lock());
    // `run_jobs` returned Ok: every task ran and stored its answer.
    Ok(answers.into_iter().flatten().collect())
}

/// A round's tombstone checks against shards that fetch in batches (on disk), answered in one batch per
/// shard: for shard position `q`, the sorted keys of the round's fetched records of older shards that its
/// tombstone filter lets through, and whether `q` holds a tombstone for each. A key its filter rejects is not
/// listed, and is not tombstoned there.
#[derive(Default)]
pub(super) struct TombstoneAnswers {
    /// Per shard position: `Some((keys, dead))` when answered this round.
    by_shard: Vec<Option<(Vec<u64>, Vec<bool>)>>,
}

impl TombstoneAnswers {
    pub(super) fn batch<S: Shard>(
        &mut self,
        shards: &[&Arc<ShardSlot<S>>],
        in_batches: &[bool],
        tomb_intervals: &[(usize, usize, usize)],
        fetched: &[(usize, usize, Record, KeyHash)],
    ) -> Result<()> {
        self.by_shard.clear();
        self.by_shard.resize_with(shards.len(), || None);
        let mut asks: Vec<(usize, Vec<u64>)> = Vec::new();
        for &(q, _, _) in tomb_intervals {
            if !in_batches[q] {
                continue;
            }
            let slot = shards[q];
            let mut keys: Vec<u64> = fetched
                .iter()
                .filter(|&&(p, _, _, hash)| q < p && slot.may_have_tombstone(hash))
                .map(|&(_, _, rec, _)| rec.key)
                .collect();
            keys.sort_unstable();
            keys.dedup();
            if keys.is_empty() {
                self.by_shard[q] = Some((keys, Vec::new()));
            } else {
                asks.push((q, keys));
            }
        }
        let dead = answer_all(shards, asks.clone(), |shard: &S, keys: &Vec<u64>| {
            let mut dead = Vec::with_capacity(keys.len());
            shard.has_tombstones(keys, &mut dead)?;
            Ok(dead)
        })?;
        for ((q, keys), dead) in asks.into_iter().zip(dead) {
            self.by_shard[q] = Some((keys, dead));
        }
        Ok(())
    }

    /// Whether shard position `q` holds a tombstone for `key`, if this round answered for `q`.
    #[inline]
    pub(super) fn answer(&self, q: usize, key: u64) -> Option<bool> {
        let (keys, dead) = self.by_shard.get(q)?.as_ref()?;
        Some(keys.binary_search(&key).is_ok_and(|j| dead[j]))
    }
}

/// A round's records of the shards that fetch in batches ([`Shard::fetches_in_batches`]), fetched as the
/// module doc says; `records[j]` is then the record of the round's draw `j` (draws of other shards leave a
/// placeholder). Draw order, and so the rng's use and the output, is the same as fetching one by one.
pub(super) struct BatchedFetch {
    in_batches: Vec<bool>,
    /// Per shard position: `(index, draw)` of the round's draws from it (draw = position in the round).
    drawn: Vec<Vec<(usize, usize)>>,
    pub(super) records: Vec<Record>,
}

impl BatchedFetch {
    pub(super) fn new(in_batches: &[bool]) -> Self {
        BatchedFetch {
            in_batches: in_batches.to_vec(),
            drawn: vec![Vec::new(); in_batches.len()],
            records: Vec::new(),
        }
    }

    pub(super) fn fetch<S: Shard>(
        &mut self,
        shards: &[&Arc<ShardSlot<S>>],
        positions: &[(usize, usize)],
    ) -> Result<()> {
        const PLACEHOLDER: Record = Record {
            key: 0,
            value: 0,
            weight: 0.0,
        };
        self.records.clear();
        self.records.resize(positions.len(), PLACEHOLDER);
        for (j, &(p, i)) in positions.iter().enumerate() {
            if self.in_batches[p] {
                self.drawn[p].push((i, j));
            }
        }
        // Distinct read units (pages) per shard, then chunks of about `per_chunk` of them.
        let mut units = 0;
        for (p, drawn) in self.drawn.iter_mut().enumerate() {
            if drawn.is_empty() {
                continue;
            }
            drawn.sort_unstable();
            let per = shards[p].shard.records_per_read().max(1);
            units += 1 + drawn
                .windows(2)
                .filter(|w| w[0].0 / per != w[1].0 / per)
                .count();
        }
        let per_chunk = units.div_ceil(IO_THREADS + 1).max(1);
        // Per chunk: (shard position, record indexes) to ask, and the round's draws they answer.
        let mut asks: Vec<(usize, Vec<usize>)> = Vec::new();
        let mut answers_for: Vec<Vec<usize>> = Vec::new();
        for (p, drawn) in self.drawn.iter_mut().enumerate() {
            if drawn.is_empty() {
                continue;
            }
            let per = shards[p].shard.records_per_read().max(1);
            let (mut indexes, mut draws, mut in_chunk) = (Vec::new(), Vec::new(), 0);
            for (n, &(i, j)) in drawn.iter().enumerate() {
                let new_unit = n == 0 || drawn[n - 1].0 / per != i / per;
                if new_unit && in_chunk == per_chunk {
                    asks.push((p, std::mem::take(&mut indexes)));
                    answers_for.push(std::mem::take(&mut draws));
                    in_chunk = 0;
                }
                in_chunk += usize::from(new_unit);
                indexes.push(i);
                draws.push(j);
            }
            asks.push((p, indexes));
            answers_for.push(draws);
            drawn.clear();
        }
        let got = answer_all(shards, asks, |shard: &S, indexes: &Vec<usize>| {
            let mut got = Vec::with_capacity(indexes.len());
            shard.records_at(indexes, &mut got)?;
            Ok(got)
        })?;
        for (draws, got) in answers_for.iter().zip(got) {
            for (&j, rec) in draws.iter().zip(got) {
                self.records[j] = rec;
            }
        }
        Ok(())
    }
}
