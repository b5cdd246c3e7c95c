//! A model of the write protocol (per-thread collecting logs, a bucket's sequence numbers, its D-bucket,
//! flushes by the writer or by another thread freeing log space, log-tail advances) run under randomized
//! schedules with `shuttle`, with a crash at a random moment of every schedule. The crash image is
//! recovered with the index's rule — keep the chain, replay every log record (from its log's tail) whose
//! sequence number is above the chain's largest committed one, in sequence order — and must hold, for each
//! key, its last acknowledged write or a later one that was in flight.
//!
//! The model is small (one bucket, two writers, a 6-record ring per log, 3-slot D-buckets) so that every
//! schedule crosses log reclamation from both threads, flushes and deletes. Iterations:
//! `STRATA_SHUTTLE_ITERATIONS` (2,000 by default). Replaying in log order instead of sequence order, or
//! replaying records the chain already holds, fails it within the default iterations.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the test failing

use std::collections::HashMap;

use shuttle::rand::{Rng, thread_rng};
use shuttle::sync::{Arc, Mutex};
use shuttle::thread;

const CAP: usize = 6;
const STAGE: usize = 3;
const KEYS: u64 = 3;
const THREADS: usize = 2;
const OPS: u64 = 7;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Rec {
    key: u64,
    value: Option<u64>,
    seq: u64,
}

/// What PM holds (every change to it is one step the crash may fall between).
#[derive(Debug, Clone, Default)]
struct Durable {
    /// Each log's records by position; `tails[i]` is the persisted tail of log `i`.
    logs: Vec<Vec<Rec>>,
    tails: Vec<usize>,
    /// Committed chunks: their records in order, and the bucket's sequence number at the commit.
    chain: Vec<(Vec<Rec>, u64)>,
    /// Writes whose record is in a log (acknowledged or in flight), and those acknowledged.
    started: Vec<Rec>,
    acked: Vec<Rec>,
}

/// The bucket's DRAM state.
#[derive(Debug, Default)]
struct Bucket {
    seq: u64,
    /// Staged records with (log, position) and whether the key's newest chain version is a put.
    staged: Vec<(Rec, usize, usize, bool)>,
    /// Newest chain version of each key (DRAM mirror of the chain's live bits).
    newest: HashMap<u64, Option<u64>>,
}

struct Model {
    durable: Mutex<Durable>,
    bucket: Mutex<Bucket>,
    heads: Vec<Mutex<usize>>,
}

impl Model {
    fn flush(&self, b: &mut Bucket) {
        if b.staged.is_empty() {
            return;
        }
        let recs: Vec<Rec> = b.staged.drain(..).map(|(r, ..)| r).collect();
        for r in &recs {
            b.newest.insert(r.key, r.value);
        }
        self.durable.lock().unwrap().chain.push((recs, b.seq));
    }

    fn write(&self, t: usize, key: u64, value: Option<u64>) {
        let mut head = self.heads[t].lock().unwrap();
        let tail = self.durable.lock().unwrap().tails[t];
        if *head - tail >= CAP {
            let target = *head - CAP / 2;
            for _ in tail..target {
                let mut b = self.bucket.lock().unwrap();
                if b.staged
                    .iter()
                    .any(|&(_, log, lsn, _)| log == t && lsn < target)
                {
                    self.flush(&mut b);
                }
            }
            self.durable.lock().unwrap().tails[t] = target;
        }
        let mut b = self.bucket.lock().unwrap();
        let staged = b.staged.iter().position(|(r, ..)| r.key == key);
        let visible = match staged {
            Some(i) => b.staged[i].0.value,
            None => b.newest.get(&key).copied().flatten(),
        };
        if value.is_none() && visible.is_none() {
            return; // A delete of an absent key writes nothing.
        }
        b.seq += 1;
        let rec = Rec {
            key,
            value,
            seq: b.seq,
        };
        {
            let mut d = self.durable.lock().unwrap();
            d.logs[t].push(rec);
            d.started.push(rec);
        }
        let shadows = match staged {
            Some(i) => b.staged.remove(i).3,
            None => b.newest.get(&key).copied().flatten().is_some(),
        };
        // A delete that cancels a staged put still stages a tombstone: the put's record may sit in another
        // log whose tail has not passed it yet, and this record must stay pinned until a chain holds it.
        if value.is_some() || shadows || staged.is_some() {
            b.staged.push((rec, t, *head, shadows));
        }
        *head += 1;
        if b.staged.len() == STAGE {
            self.flush(&mut b);
        }
        drop(b);
        drop(head);
        self.durable.lock().unwrap().acked.push(rec);
    }
}

/// The index's recovery rule on a crash image: each key's visible value.
fn recover(d: &Durable) -> HashMap<u64, Option<u64>> {
    let mut state = HashMap::new();
    for (recs, _) in &d.chain {
        for r in recs {
            state.insert(r.key, r.value);
        }
    }
    let committed = d.chain.iter().map(|&(_, s)| s).max().unwrap_or(0);
    let mut replay: Vec<Rec> = d
        .logs
        .iter()
        .zip(&d.tails)
        .flat_map(|(log, &tail)| log[tail..].iter().copied())
        .filter(|r| r.seq > committed)
        .collect();
    replay.sort_by_key(|r| r.seq);
    for r in replay {
        state.insert(r.key, r.value);
    }
    state
}

/// Panics unless every key holds its last acknowledged write or a later write in flight.
fn check(d: &Durable) {
    let state = recover(d);
    for key in 0..KEYS {
        let got = state.get(&key).copied().flatten();
        let last = d
            .acked
            .iter()
            .filter(|r| r.key == key)
            .max_by_key(|r| r.seq);
        let floor = last.map_or(0, |r| r.seq);
        let mut allowed = vec![last.and_then(|r| r.value)];
        allowed.extend(
            d.started
                .iter()
                .filter(|r| r.key == key && r.seq > floor)
                .map(|r| r.value),
        );
        assert!(
            allowed.contains(&got),
            "key {key}: recovered {got:?}, allowed {allowed:?}\n{d:#?}"
        );
    }
}

fn schedule() {
    let model = Arc::new(Model {
        durable: Mutex::new(Durable {
            logs: vec![Vec::new(); THREADS],
            tails: vec![0; THREADS],
            ..Durable::default()
        }),
        bucket: Mutex::new(Bucket::default()),
        heads: (0..THREADS).map(|_| Mutex::new(0)).collect(),
    });
    let writers: Vec<_> = (0..THREADS)
        .map(|t| {
            let model = Arc::clone(&model);
            thread::spawn(move || {
                // The workload is drawn from the schedule's own random source, so a failing schedule
                // replays exactly (and every schedule tries another interleaving of keys and deletes).
                let mut rng = thread_rng();
                for op in 0..OPS {
                    let key = rng.gen_range(0..KEYS);
                    let value = (rng.gen_range(0..4) != 0).then_some(op << 4 | t as u64);
                    model.write(t, key, value);
                }
            })
        })
        .collect();
    let crasher = {
        let model = Arc::clone(&model);
        thread::spawn(move || {
            for _ in 0..4 {
                thread::yield_now();
                let image = model.durable.lock().unwrap().clone();
                check(&image);
            }
        })
    };
    for w in writers {
        w.join().unwrap();
    }
    crasher.join().unwrap();
    check(&model.durable.lock().unwrap());
}

#[test]
fn log_and_bucket_protocol_survives_a_crash_anywhere() {
    let iterations = std::env::var("STRATA_SHUTTLE_ITERATIONS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    shuttle::check_random(schedule, iterations);
}
