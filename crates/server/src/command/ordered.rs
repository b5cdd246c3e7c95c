//! Commands over key ranges, scattered to the partitions a range overlaps and gathered in order:
//!
//! * `RANGE lo hi [LIMIT n] [REV]`: up to n (default 1,000) records with keys in `[lo, hi]`, ascending (or
//!   descending), as a flat array `key, value, key, value, ...`. `-` and `+` stand for no bound.
//! * `COUNT lo hi`: the number of keys in `[lo, hi]`.
//! * `SAMPLE lo hi k [SEED s]`: k independent uniform samples (with replacement) of the records in `[lo, hi]`
//!   across all partitions, as a flat `key, value, ...` array. Two rounds: every overlapping partition
//!   answers its exact count c_i; the k draws are split over the partitions by a multinomial with
//!   probabilities c_i / Σc (one uniform draw of a partition per sample); then partition i draws its k_i
//!   samples of its own records, and sample j is the next unused sample of the partition drawn for it. So
//!   every record of the union is equally likely in every position and the samples are independent (exactly,
//!   when no write changes the range between the two rounds; a partition whose part of the range emptied in
//!   between makes the command answer "try again"). The work is k samples in all, not k per partition; a
//!   range inside one partition takes one round. Families that cannot sample answer an error.
//! * `SCAN cursor [MATCH pattern] [COUNT n]`: walks the partitions one after another in key order; cursors
//!   are numbers that name the scan's position (partition, last key) in a server-wide table of at most
//!   [`MAX_CURSORS`] live cursors (the oldest go first; a forgotten cursor is an error, never a silent
//!   restart).
//! * `DBSIZE`: the sum of the partitions' record counts.

use super::admin::CommandSpec;
use super::keys::encode_key;
use super::{Finish, Plan, RoutedOps, Shared, int_arg, is};
use crate::resp::Reply;
use crate::store::{Op, OpResult};
use bytes::Bytes;
use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{HashMap, VecDeque};
use std::ops::Bound;

/// Records RANGE returns when no LIMIT is given.
pub const DEFAULT_RANGE_LIMIT: usize = 1000;
/// Most records one RANGE may ask for.
pub const MAX_RANGE_LIMIT: usize = 1_000_000;
/// Most samples one SAMPLE may ask for.
pub const MAX_SAMPLES: usize = 1_000_000;
/// Live SCAN cursors kept.
pub const MAX_CURSORS: usize = 100_000;
/// Keys a SCAN step reads when no COUNT is given.
const DEFAULT_SCAN_COUNT: usize = 10;
/// Most keys one SCAN step reads.
const MAX_SCAN_COUNT: usize = 100_000;

/// The bounds of a key range, encoded.
type KeyBounds = (Bound<Vec<u8>>, Bound<Vec<u8>>);

fn bound(shared: &Shared, a: &[u8], low: bool) -> Result<Bound<Vec<u8>>, Reply> {
    if (low && a == b"-") || (!low && a == b"+") {
        return Ok(Bound::Unbounded);
    }
    encode_key(shared, a).map(Bound::Included)
}

fn bounds(shared: &Shared, lo: &[u8], hi: &[u8]) -> Result<KeyBounds, Reply> {
    Ok((bound(shared, lo, true)?, bound(shared, hi, false)?))
}

/// A low bound above the high bound: the range is empty.
fn is_empty(lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> bool {
    matches!((lo, hi), (Bound::Included(l), Bound::Included(h)) if l > h)
}

/// How RANGE's per-partition lists become one.
#[derive(Debug)]
pub struct RangeFinish {
    limit: usize,
    reverse: bool,
}

impl RangeFinish {
    pub(super) fn finish(&self, shared: &Shared, results: Vec<OpResult>) -> Reply {
        let mut all = Vec::new();
        for r in results {
            if let OpResult::Records(recs) = r {
                all.extend(recs);
            }
        }
        // Each list is ordered; under range partitioning they are also in partition order already, but hash
        // partitions interleave: one sort of at most (partitions × limit) records.
        if self.reverse {
            all.sort_by(|a, b| b.0.cmp(&a.0));
        } else {
            all.sort_by(|a, b| a.0.cmp(&b.0));
        }
        all.truncate(self.limit);
        flat_records(shared, all)
    }
}

fn flat_records(shared: &Shared, records: Vec<(Vec<u8>, Vec<u8>)>) -> Reply {
    let mode = shared.store.layout().key_mode;
    let mut out = Vec::with_capacity(records.len() * 2);
    for (k, v) in records {
        out.push(Reply::Bulk(Bytes::from(mode.decode(k))));
        out.push(Reply::Bulk(Bytes::from(mode.decode(v))));
    }
    Reply::Array(out)
}

/// The seed of partition `p`'s sample stream: each partition draws from its own stream, all fixed by the
/// command's seed.
fn partition_seed(seed: u64, p: usize) -> u64 {
    seed ^ (p as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// SAMPLE over several partitions, first round: their exact counts of the range.
#[derive(Debug)]
pub struct SampleSplit {
    k: usize,
    seed: u64,
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    partitions: Vec<usize>,
}

impl SampleSplit {
    /// The second round from the counts: k draws of a partition, each with probability count / total (a
    /// multinomial split of k), then k_i samples from partition i. `None` when the range is empty (or a
    /// count failed): the first round's finish answers.
    pub(super) fn second_round(&self, results: &[OpResult]) -> Option<(RoutedOps, Finish)> {
        let counts: Vec<u64> = results
            .iter()
            .map(|r| match r {
                OpResult::Int(n) => Some(*n as u64),
                _ => None,
            })
            .collect::<Option<_>>()?;
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return None;
        }
        let mut prefix = Vec::with_capacity(counts.len());
        let mut acc = 0u64;
        for c in &counts {
            acc += c;
            prefix.push(acc);
        }
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        let drawn: Vec<usize> = (0..self.k)
            .map(|_| {
                let u = rng.random_range(0..total);
                prefix.partition_point(|&end| end <= u)
            })
            .collect();
        let mut ops = RoutedOps::new();
        // Index of each partition's operation in `ops`.
        let mut op_of = vec![usize::MAX; counts.len()];
        for (i, &p) in self.partitions.iter().enumerate() {
            let k_i = drawn.iter().filter(|&&d| d == i).count();
            if k_i > 0 {
                op_of[i] = ops.len();
                ops.push((
                    p,
                    Op::Sample {
                        lo: self.lo.clone(),
                        hi: self.hi.clone(),
                        k: k_i,
                        seed: partition_seed(self.seed, p),
                    },
                ));
            }
        }
        let order = drawn.into_iter().map(|i| op_of[i]).collect();
        Some((ops, Finish::Sample(SampleFinish { order })))
    }
}

/// How per-partition samples become k samples of the union, in the order the partitions were drawn.
#[derive(Debug)]
pub struct SampleFinish {
    /// For each sample, the index of the operation (partition) it comes from.
    order: Vec<usize>,
}

impl SampleFinish {
    pub(super) fn finish(&self, shared: &Shared, results: Vec<OpResult>) -> Reply {
        let mut lists = Vec::with_capacity(results.len());
        for r in results {
            match r {
                OpResult::Sample(records) => lists.push(records.into_iter()),
                other => return Reply::err(format!("internal error: {other:?}")),
            }
        }
        let mut picked = Vec::with_capacity(self.order.len());
        for &i in &self.order {
            match lists.get_mut(i).and_then(Iterator::next) {
                Some(rec) => picked.push(rec),
                // The partition's part of the range emptied between the count and the sample.
                None if picked.is_empty() && lists.iter().all(|l| l.len() == 0) => break,
                None => return Reply::err("the range changed while SAMPLE ran; try again"),
            }
        }
        flat_records(shared, picked)
    }
}

/// How a SCAN step's records become the reply and the next cursor.
#[derive(Debug)]
pub struct ScanFinish {
    partition: usize,
    count: usize,
    pattern: Option<Vec<u8>>,
}

impl ScanFinish {
    pub(super) fn finish(&self, shared: &Shared, results: Vec<OpResult>) -> Reply {
        let records = match results.into_iter().next() {
            Some(OpResult::Records(r)) => r,
            other => return Reply::err(format!("internal error: {other:?}")),
        };
        let exhausted = records.len() < self.count;
        let next = if exhausted {
            if self.partition + 1 < shared.store.partitions() {
                shared.cursors.register(self.partition + 1, None)
            } else {
                0
            }
        } else {
            let last = records.last().map(|r| r.0.clone());
            shared.cursors.register(self.partition, last)
        };
        let mode = shared.store.layout().key_mode;
        let keys = records
            .into_iter()
            .map(|(k, _)| mode.decode(k))
            .filter(|k| {
                self.pattern
                    .as_deref()
                    .is_none_or(|p| super::glob::matches(p, k))
            })
            .map(|k| Reply::Bulk(Bytes::from(k)))
            .collect();
        Reply::Array(vec![Reply::text(next.to_string()), Reply::Array(keys)])
    }
}

/// SCAN positions by cursor number.
#[derive(Default)]
pub struct CursorTable {
    inner: Mutex<Cursors>,
}

#[derive(Default)]
struct Cursors {
    next: u64,
    by_id: HashMap<u64, (usize, Option<Vec<u8>>)>,
    order: VecDeque<u64>,
}

impl CursorTable {
    /// A new cursor for the position after `last` in `partition` (from its start if `None`).
    pub fn register(&self, partition: usize, last: Option<Vec<u8>>) -> u64 {
        let mut c = self.inner.lock();
        c.next += 1;
        let id = c.next;
        c.by_id.insert(id, (partition, last));
        c.order.push_back(id);
        while c.order.len() > MAX_CURSORS {
            if let Some(old) = c.order.pop_front() {
                c.by_id.remove(&old);
            }
        }
        id
    }

    /// The position of cursor `id` (cursor 0: the start).
    pub fn position(&self, id: u64) -> Option<(usize, Option<Vec<u8>>)> {
        if id == 0 {
            return Some((0, None));
        }
        self.inner.lock().by_id.get(&id).cloned()
    }
}

/// One operation per partition the range `[lo, hi]` overlaps: `op(lo, hi, partition)`.
fn scatter(
    shared: &Shared,
    lo: &Bound<Vec<u8>>,
    hi: &Bound<Vec<u8>>,
    op: impl Fn(Bound<Vec<u8>>, Bound<Vec<u8>>, usize) -> Op,
) -> RoutedOps {
    shared
        .store
        .overlapping(lo, hi)
        .into_iter()
        .map(|p| (p, op(lo.clone(), hi.clone(), p)))
        .collect()
}

pub(super) fn plan(shared: &Shared, spec: &CommandSpec, args: &[Bytes]) -> Plan {
    match plan_checked(shared, spec, args) {
        Ok(p) => p,
        Err(reply) => Plan::Now(reply),
    }
}

fn plan_checked(shared: &Shared, spec: &CommandSpec, args: &[Bytes]) -> Result<Plan, Reply> {
    let store = &shared.store;
    match spec.name {
        "DBSIZE" => Ok(Plan::Routed {
            ops: (0..store.partitions()).map(|p| (p, Op::Len)).collect(),
            finish: Finish::Sum,
        }),
        "RANGE" => {
            let (lo, hi) = bounds(shared, &args[1], &args[2])?;
            let mut limit = DEFAULT_RANGE_LIMIT;
            let mut reverse = false;
            let mut i = 3;
            while i < args.len() {
                if is(&args[i], "LIMIT") && i + 1 < args.len() {
                    limit = usize::try_from(int_arg(&args[i + 1])?)
                        .ok()
                        .filter(|&n| n <= MAX_RANGE_LIMIT)
                        .ok_or_else(|| {
                            Reply::err(format!("LIMIT must be 0 to {MAX_RANGE_LIMIT}"))
                        })?;
                    i += 2;
                } else if is(&args[i], "REV") {
                    reverse = true;
                    i += 1;
                } else {
                    return Err(Reply::err("syntax error"));
                }
            }
            if is_empty(&lo, &hi) || limit == 0 {
                return Ok(Plan::Now(Reply::Array(Vec::new())));
            }
            let ops = scatter(shared, &lo, &hi, |lo, hi, _| Op::Range {
                lo,
                hi,
                limit,
                reverse,
            });
            Ok(Plan::Routed {
                ops,
                finish: Finish::Range(RangeFinish { limit, reverse }),
            })
        }
        "COUNT" => {
            let (lo, hi) = bounds(shared, &args[1], &args[2])?;
            if is_empty(&lo, &hi) {
                return Ok(Plan::Now(Reply::Int(0)));
            }
            let ops = scatter(shared, &lo, &hi, |lo, hi, _| Op::Count { lo, hi });
            Ok(Plan::Routed {
                ops,
                finish: Finish::Sum,
            })
        }
        "SAMPLE" => {
            if !store.capabilities().sample {
                return Err(Reply::err(format!(
                    "the {} index cannot sample (start the server with --index btree or dynamized)",
                    store.layout().index
                )));
            }
            let (lo, hi) = bounds(shared, &args[1], &args[2])?;
            let k = usize::try_from(int_arg(&args[3])?)
                .ok()
                .filter(|&k| k <= MAX_SAMPLES)
                .ok_or_else(|| Reply::err(format!("k must be 0 to {MAX_SAMPLES}")))?;
            let seed = match args.get(4..) {
                Some([]) | None => rand::rng().random(),
                Some([word, s]) if is(word, "SEED") => int_arg(s)? as u64,
                Some(_) => return Err(Reply::err("syntax error")),
            };
            if is_empty(&lo, &hi) || k == 0 {
                return Ok(Plan::Now(Reply::Array(Vec::new())));
            }
            let partitions = store.overlapping(&lo, &hi);
            if let [p] = partitions[..] {
                // One partition: its count and samples in one round.
                return Ok(Plan::Routed {
                    ops: smallvec::smallvec![(
                        p,
                        Op::Sample {
                            lo,
                            hi,
                            k,
                            seed: partition_seed(seed, p),
                        },
                    )],
                    finish: Finish::Sample(SampleFinish { order: vec![0; k] }),
                });
            }
            // Several: their exact counts first, then a multinomial split of k (`SampleSplit`).
            let ops = partitions
                .iter()
                .map(|&p| {
                    (
                        p,
                        Op::Count {
                            lo: lo.clone(),
                            hi: hi.clone(),
                        },
                    )
                })
                .collect();
            Ok(Plan::Routed {
                ops,
                finish: Finish::SampleSplit(SampleSplit {
                    k,
                    seed,
                    lo,
                    hi,
                    partitions,
                }),
            })
        }
        "SCAN" => {
            let id = std::str::from_utf8(&args[1])
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
                .ok_or_else(|| Reply::err("invalid cursor"))?;
            let (partition, last) = shared
                .cursors
                .position(id)
                .ok_or_else(|| Reply::err("invalid cursor (it expired or was never issued)"))?;
            let mut count = DEFAULT_SCAN_COUNT;
            let mut pattern = None;
            let mut i = 2;
            while i < args.len() {
                if is(&args[i], "MATCH") && i + 1 < args.len() {
                    pattern = Some(args[i + 1].to_vec()).filter(|p| p != b"*");
                    i += 2;
                } else if is(&args[i], "COUNT") && i + 1 < args.len() {
                    count = usize::try_from(int_arg(&args[i + 1])?)
                        .ok()
                        .filter(|&n| n >= 1)
                        .ok_or_else(|| Reply::err("syntax error"))?
                        .min(MAX_SCAN_COUNT);
                    i += 2;
                } else if is(&args[i], "TYPE") && i + 1 < args.len() {
                    if !is(&args[i + 1], "string") {
                        // Every key holds a string: no key has another type.
                        return Ok(Plan::Now(Reply::Array(vec![
                            Reply::text("0"),
                            Reply::Array(Vec::new()),
                        ])));
                    }
                    i += 2;
                } else {
                    return Err(Reply::err("syntax error"));
                }
            }
            let lo = last.map_or(Bound::Unbounded, Bound::Excluded);
            Ok(Plan::Routed {
                ops: smallvec::smallvec![(
                    partition,
                    Op::Range {
                        lo,
                        hi: Bound::Unbounded,
                        limit: count,
                        reverse: false,
                    },
                )],
                finish: Finish::Scan(ScanFinish {
                    partition,
                    count,
                    pattern,
                }),
            })
        }
        _ => Ok(super::unknown_command(args)),
    }
}
