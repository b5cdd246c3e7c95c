//! The point reads of one turn of a network loop, looked up together: one batched lookup per partition for
//! the GETs of every connection the loop serves in that turn.
//!
//! At pipeline depth 1 each connection brings one GET per turn, so a pipeline's own batch
//! ([`strata::RawDb::get_many`]) is a lone lookup whose cache misses (the page table, the frame, the node's
//! header, slot array and cell at each level) are paid one after another. Here a connection whose pipeline
//! has only a few point reads left at the end of planning hands them to its loop's open batch and yields
//! once; the first connection back from its yield runs the batch, so the lookups of every connection that
//! joined during that turn are interleaved and their misses overlap. The others find their answers waiting.
//! This is the read-side twin of the per-turn group commit at durability `flush` ([`crate::conn`]).
//!
//! When to batch ([`join`]): a pipeline joins the open batch if there is one; else it opens one only while
//! the loop's last batch gathered more than one connection (a busy loop), and once every [`PROBE_EVERY`]
//! pipelines otherwise (to notice that the load came back: the connections of that turn join the probe). A
//! lone connection thus pays no yield on almost every request. Pipelines with at least [`JOIN_BELOW`] point
//! reads make a batch of their own (they fill the engine's group of interleaved descents themselves).
//!
//! Invariants:
//! - the batch lives in a thread-local of the loop's thread; a connection only moves to another loop
//!   between pipelines, so it collects its answers on the thread it joined on;
//! - a read joins the batch only at the end of its pipeline's planning (nothing of the pipeline that comes
//!   after it has been applied or queued to run) and is answered before any job of that pipeline runs, so a
//!   connection's own order is kept as with reads made in place; reads of other connections are concurrent
//!   with it anyway;
//! - every joined read is answered exactly once: the batch runs when its first owner comes back from its
//!   yield, and each owner takes its own answers (a contiguous run of the batch), after which the answered
//!   batch is dropped once every owner took its share.
//!
//! Cost: per joining pipeline one yield (a task re-poll; the loop polls for I/O once more before it runs
//! the yielded tasks) and a few vector pushes; per batch and partition one `get_many`.

use crate::store::Store;
use smallvec::SmallVec;
use std::cell::RefCell;
use std::collections::VecDeque;

/// Pipelines with this many point reads or more look them up on their own.
pub const JOIN_BELOW: usize = 16;

/// While batches gather only one connection, every this many pipelines still opens one.
pub const PROBE_EVERY: u32 = 16;

/// What one read is answered with: the engine's answer for the key.
pub type ReadAnswer = strata::Result<Option<Vec<u8>>>;

/// A pipeline's place in a batch: which batch, and its run of reads in it.
#[derive(Debug, Clone, Copy)]
pub struct Joined {
    batch: u64,
    start: usize,
    len: usize,
}

/// The batch reads join this turn.
struct Open {
    id: u64,
    /// The store it reads (a thread serves one server; checked anyway).
    store: usize,
    /// Each read's partition and key, in the order they joined.
    reads: Vec<(usize, Vec<u8>)>,
    owners: usize,
}

/// A batch that ran: each read's answer (taken by its owner), and how many owners have yet to take theirs.
struct Answered {
    id: u64,
    answers: Vec<Option<ReadAnswer>>,
    owners_left: usize,
}

#[derive(Default)]
struct Loop {
    next_id: u64,
    open: Option<Open>,
    answered: VecDeque<Answered>,
    /// The last batch gathered more than one connection.
    busy: bool,
    /// Pipelines that read in place since a batch was last opened.
    since_open: u32,
    /// Vectors kept from earlier batches (empty, with their capacity: glibc's malloc consolidates its free
    /// lists on larger requests, which cost more than their size says).
    spare_reads: Vec<(usize, Vec<u8>)>,
    spare_answers: Vec<Option<ReadAnswer>>,
    of_part: Vec<usize>,
}

thread_local! {
    static LOOP: RefCell<Loop> = RefCell::new(Loop::default());
}

fn store_id(store: &Store) -> usize {
    std::ptr::from_ref(store) as usize
}

/// Hands a pipeline's `n` point reads to this loop's batch if they should wait for it (see the module doc):
/// then `fill` pushes them, as (partition, key), and the caller yields once and calls [`collect`]. `None`
/// (and `fill` not called) when they should be read in place.
pub fn join(
    store: &Store,
    n: usize,
    fill: impl FnOnce(&mut Vec<(usize, Vec<u8>)>),
) -> Option<Joined> {
    if n == 0 || n >= JOIN_BELOW {
        return None;
    }
    let id = store_id(store);
    LOOP.with_borrow_mut(|l| {
        let open_here = l.open.as_ref().is_some_and(|o| o.store == id);
        if !open_here {
            if l.open.is_some() || !(l.busy || l.since_open >= PROBE_EVERY) {
                l.since_open = l.since_open.saturating_add(1);
                return None;
            }
            l.since_open = 0;
            l.next_id += 1;
            l.open = Some(Open {
                id: l.next_id,
                store: id,
                reads: std::mem::take(&mut l.spare_reads),
                owners: 0,
            });
        }
        let open = l.open.as_mut()?;
        let start = open.reads.len();
        fill(&mut open.reads);
        open.owners += 1;
        Some(Joined {
            batch: open.id,
            start,
            len: open.reads.len() - start,
        })
    })
}

/// A batch this call ran: its reads and how many pipelines they came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ran {
    pub reads: usize,
    pub owners: usize,
}

/// Gives `answer` each of `joined`'s reads' answers (its index among them, in the order they joined): runs
/// the batch first if no owner has yet, and then says so.
pub fn collect(
    store: &Store,
    joined: Joined,
    mut answer: impl FnMut(usize, ReadAnswer),
) -> Option<Ran> {
    LOOP.with_borrow_mut(|l| {
        let mut ran = None;
        if l.open.as_ref().is_some_and(|o| o.id == joined.batch)
            && let Some(open) = l.open.take()
        {
            l.busy = open.owners > 1;
            ran = Some(Ran {
                reads: open.reads.len(),
                owners: open.owners,
            });
            let mut answers = std::mem::take(&mut l.spare_answers);
            run(store, &open.reads, &mut l.of_part, &mut answers);
            l.answered.push_back(Answered {
                id: open.id,
                answers,
                owners_left: open.owners,
            });
            let mut reads = open.reads;
            reads.clear();
            l.spare_reads = reads;
        }
        let Some(at) = l.answered.iter().position(|a| a.id == joined.batch) else {
            return ran;
        };
        let done = &mut l.answered[at];
        for (i, slot) in done.answers[joined.start..joined.start + joined.len]
            .iter_mut()
            .enumerate()
        {
            if let Some(a) = slot.take() {
                answer(i, a);
            }
        }
        done.owners_left -= 1;
        if done.owners_left == 0
            && let Some(mut done) = l.answered.remove(at)
        {
            done.answers.clear();
            l.spare_answers = done.answers;
        }
        ran
    })
}

/// Looks the reads up into `answers` (empty on entry), one `get_many` per partition (each read alone if
/// its partition's batch fails); `of_part` is scratch.
fn run(
    store: &Store,
    reads: &[(usize, Vec<u8>)],
    of_part: &mut Vec<usize>,
    answers: &mut Vec<Option<ReadAnswer>>,
) {
    answers.resize_with(reads.len(), || None);
    let mut keys: SmallVec<[&[u8]; 64]> = SmallVec::new();
    for p in 0..store.partitions() {
        of_part.clear();
        of_part.extend((0..reads.len()).filter(|&i| reads[i].0 == p));
        if of_part.is_empty() {
            continue;
        }
        keys.clear();
        keys.extend(of_part.iter().map(|&i| &reads[i].1[..]));
        let read = store.read_direct(p, &keys, |j, v| answers[of_part[j]] = Some(v));
        if !read {
            for &i in of_part.iter() {
                answers[i] = Some(Err(strata::Error::invalid(format!(
                    "partition {p} takes no direct reads"
                ))));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Partitioning, StoreConfig};
    use strata::{Durability, IndexKind, WriteOp};

    fn store(dir: &std::path::Path) -> Store {
        let store = Store::open(&StoreConfig {
            dir: dir.join("srv"),
            partitions: 2,
            partitioning: Partitioning::Hash,
            index: IndexKind::BTree.default_config(),
            durability: Durability::Flush,
            cache_bytes: 4 << 20,
            hot_cache: None,
            partition_capacity: None,
        })
        .unwrap();
        for i in 0..200u32 {
            let key = format!("k{i}").into_bytes();
            let p = store.route(&key);
            let op = WriteOp::Put {
                key,
                value: format!("v{i}").into_bytes(),
            };
            store.db(p).unwrap().write(&[op], None).unwrap();
        }
        store
    }

    fn keys(store: &Store, ids: &[u32]) -> impl FnOnce(&mut Vec<(usize, Vec<u8>)>) {
        let reads: Vec<(usize, Vec<u8>)> = ids
            .iter()
            .map(|i| {
                let k = format!("k{i}").into_bytes();
                (store.route(&k), k)
            })
            .collect();
        move |batch| batch.extend(reads)
    }

    fn answers(store: &Store, joined: Joined) -> (Vec<Option<Vec<u8>>>, Option<Ran>) {
        let mut got = vec![None; joined.len];
        let ran = collect(store, joined, |i, a| got[i] = Some(a.unwrap()));
        (got.into_iter().map(|a| a.unwrap()).collect(), ran)
    }

    fn value(i: u32) -> Option<Vec<u8>> {
        (i < 200).then(|| format!("v{i}").into_bytes())
    }

    fn pending() -> (bool, usize) {
        LOOP.with_borrow(|l| (l.open.is_some(), l.answered.len()))
    }

    /// A quiet loop reads in place but probes every PROBE_EVERY pipelines; the pipelines that join a batch get
    /// exactly their own answers whichever of them comes back first; a batch of several pipelines keeps the
    /// loop batching; a pipeline with a group of reads of its own never joins.
    #[test]
    fn pipelines_of_a_turn_share_one_batch_and_get_their_own_answers() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path());
        // A fresh thread: a fresh loop state.
        std::thread::scope(|s| {
            s.spawn(|| {
                for _ in 0..PROBE_EVERY {
                    assert!(join(&store, 1, |_| panic!("reads in place")).is_none());
                }
                let a = join(&store, 1, keys(&store, &[7])).expect("the probe opens a batch");
                let b = join(&store, 3, keys(&store, &[1, 500, 42])).expect("joins");
                let c = join(&store, 2, keys(&store, &[199, 3])).expect("joins");
                assert!(join(&store, JOIN_BELOW, |_| panic!("a group of its own")).is_none());
                assert_eq!(pending(), (true, 0));
                let (got, ran) = answers(&store, b);
                assert_eq!(got, vec![value(1), value(500), value(42)]);
                assert_eq!(
                    ran,
                    Some(Ran {
                        reads: 6,
                        owners: 3
                    })
                );
                assert_eq!(pending(), (false, 1));
                let (got, ran) = answers(&store, c);
                assert_eq!((got, ran), (vec![value(199), value(3)], None));
                let (got, ran) = answers(&store, a);
                assert_eq!((got, ran), (vec![value(7)], None));
                assert_eq!(
                    pending(),
                    (false, 0),
                    "an answered batch goes once all took theirs"
                );
                // The loop is busy now: the next pipeline opens a batch at once, and a batch of one pipeline
                // makes it quiet again.
                let d = join(&store, 1, keys(&store, &[5])).expect("busy: opens");
                let (got, ran) = answers(&store, d);
                assert_eq!(
                    (got, ran),
                    (
                        vec![value(5)],
                        Some(Ran {
                            reads: 1,
                            owners: 1
                        })
                    )
                );
                assert!(join(&store, 1, |_| panic!("quiet again")).is_none());
            });
        });
        store.close().unwrap();
    }
}
