//! A partition's executor: its queue of jobs and its worker state behind one lock, run by whoever finds the
//! partition idle.
//!
//! A connection that submits a job of point operations runs the partition's queue itself when no other
//! thread is running it (flat combining): it takes the worker lock, runs every queued job as one group with
//! one commit, answers them, releases the lock, and looks at the queue once more. A job that arrives while
//! another thread holds the lock stays queued, and that thread runs it before it lets go. So an idle
//! partition costs a submitter no thread hand-off at all, and a busy one still commits many jobs as a group.
//!
//! Each partition also has a thread of its own, which runs what a connection's thread should not: jobs with
//! range operations (RANGE, COUNT, SAMPLE, DBSIZE and cache write-backs, which can take long), every job at
//! durability `sync` (an `fsync` would stall a network thread), the once-a-second background sync at
//! durability `none`, and whatever is left queued when a connection's thread stops at such a job.
//!
//! Invariant (no stranded job): a submitter pushes its job and then tries the lock; a runner, after it
//! releases the lock, looks at the queue again. Both the push and that look happen under the queue's mutex,
//! so either the runner sees the job, or the submitter's try of the lock comes after the runner released it.
//! Jobs run in queue order, so one connection's jobs at a partition run in the order it sent them.

use super::worker::{Job, JobResults, Worker};
use super::{MAX_GROUP, Op};
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// Who runs a partition's queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Runner {
    /// A connection's (network) thread: runs point-operation jobs, leaves the rest to the partition's thread.
    Connection,
    /// The partition's own thread: runs everything.
    Thread,
}

/// One partition's queue, worker state and the wake-up of its thread.
pub(crate) struct Executor {
    queue: Mutex<VecDeque<Job>>,
    worker: Mutex<Worker>,
    /// Wakes the partition's thread (a full channel means a wake-up is already pending).
    wake: Sender<()>,
    /// Run submitted point jobs on the submitter's thread (off at durability `sync`).
    inline: bool,
    stopping: AtomicBool,
}

impl Executor {
    /// An executor over `worker`, and the receiving end of its thread's wake-ups.
    pub(super) fn new(worker: Worker, inline: bool) -> (Executor, Receiver<()>) {
        let (wake, woken) = crossbeam_channel::bounded(1);
        let exec = Executor {
            queue: Mutex::new(VecDeque::new()),
            worker: Mutex::new(worker),
            wake,
            inline,
            stopping: AtomicBool::new(false),
        };
        (exec, woken)
    }

    /// Queues `job`, then runs the queue on this thread if the partition is idle and the job is made of point
    /// operations (else the partition's thread runs it). Answers go to the job's reply channel.
    pub fn submit(&self, job: Job) -> Result<(), Job> {
        if self.stopping.load(Ordering::Acquire) {
            return Err(job);
        }
        let inline = self.inline && !job.ops.iter().any(runs_long);
        self.queue.lock().push_back(job);
        if inline {
            self.run(Runner::Connection);
        } else {
            self.wake_thread();
        }
        Ok(())
    }

    /// Queues `job` like [`submit`](Self::submit) but does not run the queue yet: the caller lets the other
    /// connections of this moment queue theirs, then calls [`run_queued`](Self::run_queued), so one group —
    /// one WAL write — commits all of them (the cross-connection group commit at durability `flush`). A job
    /// the partition's thread must run is handed to it at once.
    pub fn enqueue(&self, job: Job) -> Result<(), Job> {
        if self.stopping.load(Ordering::Acquire) {
            return Err(job);
        }
        let inline = self.inline && !job.ops.iter().any(runs_long);
        self.queue.lock().push_back(job);
        if !inline {
            self.wake_thread();
        }
        Ok(())
    }

    /// Runs the queue on this thread if the partition is idle (after [`enqueue`](Self::enqueue)). The
    /// no-stranded-job invariant holds as for `submit`: the job was pushed before this try of the lock.
    pub fn run_queued(&self) {
        if self.inline {
            self.run(Runner::Connection);
        }
    }

    /// Queues `job` for the partition's thread (from inside another partition's worker: never runs inline,
    /// so no thread ever runs two partitions at once).
    pub fn submit_to_thread(&self, job: Job) {
        self.queue.lock().push_back(job);
        self.wake_thread();
    }

    fn wake_thread(&self) {
        let _ = self.wake.try_send(());
    }

    /// Runs queued jobs while this thread can take the worker lock and there are jobs `runner` may run.
    fn run(&self, runner: Runner) {
        let mut group: Vec<(Job, JobResults)> = Vec::new();
        loop {
            let Some(mut worker) = self.worker.try_lock() else {
                // Whoever holds the lock looks at the queue after releasing it.
                return;
            };
            loop {
                let left_for_thread = self.take_group(runner, &mut group);
                if group.is_empty() {
                    if left_for_thread {
                        self.wake_thread();
                    }
                    break;
                }
                worker.run_group(&mut group);
            }
            drop(worker);
            // The look after releasing: a job pushed while the lock was held, and whose submitter found the
            // lock taken, is run here.
            let queue = self.queue.lock();
            match queue.front() {
                None => return,
                Some(job) if runner == Runner::Connection && job.ops.iter().any(runs_long) => {
                    drop(queue);
                    self.wake_thread();
                    return;
                }
                Some(_) => {}
            }
        }
    }

    /// Moves up to [`MAX_GROUP`] jobs from the queue into `group`; a connection's thread stops before a job
    /// it must leave to the partition's thread. Returns whether it stopped at such a job.
    fn take_group(&self, runner: Runner, group: &mut Vec<(Job, JobResults)>) -> bool {
        let mut queue = self.queue.lock();
        while group.len() < MAX_GROUP {
            match queue.front() {
                None => return false,
                Some(job) if runner == Runner::Connection && job.ops.iter().any(runs_long) => {
                    return true;
                }
                Some(_) => {}
            }
            if let Some(job) = queue.pop_front() {
                group.push((job, JobResults::new()));
            }
        }
        false
    }

    /// The partition's thread: runs what it is woken for, syncs in the background at durability `none`, and
    /// at stop runs what is left and returns.
    pub(super) fn thread_loop(&self, woken: Receiver<()>) {
        let mut last_sync = Instant::now();
        loop {
            let stop = match woken.recv_timeout(super::BACKGROUND_SYNC) {
                Ok(()) | Err(RecvTimeoutError::Timeout) => self.stopping.load(Ordering::Acquire),
                Err(RecvTimeoutError::Disconnected) => true,
            };
            if stop {
                // Wait for a connection's thread to finish, then run whatever is queued.
                self.run_blocking();
                self.worker.lock().background_sync(&mut last_sync);
                return;
            }
            self.run(Runner::Thread);
            if last_sync.elapsed() >= super::BACKGROUND_SYNC {
                self.worker.lock().background_sync(&mut last_sync);
            }
        }
    }

    /// Runs every queued job, waiting for the lock.
    fn run_blocking(&self) {
        let mut group = Vec::new();
        let mut worker = self.worker.lock();
        loop {
            self.take_group(Runner::Thread, &mut group);
            if group.is_empty() {
                return;
            }
            worker.run_group(&mut group);
        }
    }

    /// Refuses new jobs and has the partition's thread run what is queued and end.
    pub(super) fn stop(&self) {
        self.stopping.store(true, Ordering::Release);
        self.wake_thread();
    }
}

/// Operations that may take long (they read ranges, or write back many cached values): a connection's thread
/// leaves them to the partition's thread.
fn runs_long(op: &Op) -> bool {
    match op {
        Op::Range { .. }
        | Op::Count { .. }
        | Op::Sample { .. }
        | Op::Len
        | Op::FlushCached
        | Op::Populate(_)
        | Op::Evict(_) => true,
        Op::IfPresent(inner) => runs_long(inner),
        Op::Get(_)
        | Op::Set { .. }
        | Op::Del(_)
        | Op::Exists(_)
        | Op::Incr { .. }
        | Op::Append { .. } => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::worker::{JobReply, Peers};
    use crate::store::{OpResult, PartitionCounters, SetCondition};
    use std::sync::Arc;
    use std::time::Duration;
    use strata::{Config, Durability, Options, RawDb, TypeKind};

    fn executor(dir: &std::path::Path) -> (Arc<Executor>, std::thread::JoinHandle<()>, RawDb) {
        let (exec, woken, db, _) = executor_without_thread(dir);
        let on_thread = exec.clone();
        let thread = std::thread::spawn(move || on_thread.thread_loop(woken));
        (exec, thread, db)
    }

    /// An executor whose partition thread is not started (nothing runs a job unless the test does).
    fn executor_without_thread(
        dir: &std::path::Path,
    ) -> (Arc<Executor>, Receiver<()>, RawDb, Arc<PartitionCounters>) {
        let config = Config {
            key: TypeKind::Bytes,
            value: TypeKind::Bytes,
            durability: Durability::Flush,
            ..Config::default()
        };
        let db = RawDb::open_or_create(dir, &config, &Options::default()).unwrap();
        let peers = Peers {
            cache: None,
            partitions: Arc::default(),
        };
        let counters = Arc::new(PartitionCounters::default());
        let worker = Worker::new(
            0,
            db.clone(),
            Durability::Flush,
            counters.clone(),
            peers,
            None,
        );
        let (exec, woken) = Executor::new(worker, true);
        (Arc::new(exec), woken, db, counters)
    }

    /// Jobs enqueued by several connections before any of them runs the queue commit as one group: one WAL
    /// append for all their writes, and every job answered by the first `run_queued`.
    #[test]
    fn enqueued_jobs_of_several_connections_commit_together() {
        let dir = tempfile::tempdir().unwrap();
        let (exec, _woken, db, counters) = executor_without_thread(dir.path());
        let mut replies = Vec::new();
        for i in 0..5u8 {
            let (j, rx) = job(vec![Op::Set {
                key: vec![b'k', i],
                value: vec![i],
                condition: SetCondition::Always,
                get_old: false,
            }]);
            exec.enqueue(j).unwrap_or_else(|_| panic!("refused"));
            replies.push(rx);
        }
        assert_eq!(
            counters.commits.load(Ordering::Relaxed),
            0,
            "nothing ran yet"
        );
        assert!(replies.iter_mut().all(|rx| rx.try_recv().is_err()));
        exec.run_queued();
        for rx in replies {
            assert_eq!(
                rx.blocking_recv().unwrap().results.into_vec(),
                vec![OpResult::Written(true)]
            );
        }
        assert_eq!(counters.commits.load(Ordering::Relaxed), 1);
        assert_eq!(counters.writes.load(Ordering::Relaxed), 5);
        // A later run finds nothing to do; the writes are in the database.
        exec.run_queued();
        assert_eq!(counters.commits.load(Ordering::Relaxed), 1);
        assert_eq!(db.get(&[b'k', 4]).unwrap(), Some(vec![4]));
    }

    fn job(ops: Vec<Op>) -> (Job, tokio::sync::oneshot::Receiver<JobReply>) {
        let (reply, rx) = tokio::sync::oneshot::channel();
        (
            Job {
                ops: ops.into(),
                reply,
            },
            rx,
        )
    }

    /// Many threads submit point (and range) jobs at once: every job is answered (none is left in the queue
    /// while nobody runs it), each thread's writes land in its order, and range jobs see every write answered
    /// before them.
    #[test]
    fn concurrent_submitters_get_every_answer_in_order() {
        submitters_race(false);
        submitters_race(true);
    }

    fn submitters_race(with_ranges: bool) {
        let dir = tempfile::tempdir().unwrap();
        let (exec, thread, db) = executor(dir.path());
        let threads = 6;
        let per_thread = 20_000u64;
        std::thread::scope(|s| {
            for t in 0..threads {
                let exec = exec.clone();
                s.spawn(move || {
                    let key = format!("k{t}").into_bytes();
                    for i in 0..per_thread {
                        let mut ops = vec![Op::Set {
                            key: key.clone(),
                            value: i.to_string().into_bytes(),
                            condition: SetCondition::Always,
                            get_old: true,
                        }];
                        if with_ranges && i % 100 == 0 {
                            ops.push(Op::Count {
                                lo: std::ops::Bound::Unbounded,
                                hi: std::ops::Bound::Unbounded,
                            });
                        }
                        let (job, rx) = job(ops);
                        exec.submit(job).unwrap_or_else(|_| panic!("refused"));
                        let deadline = std::time::Instant::now() + Duration::from_millis(750);
                        let mut rx = rx;
                        let reply = loop {
                            match rx.try_recv() {
                                Ok(r) => break r,
                                Err(tokio::sync::oneshot::error::TryRecvError::Empty) => {
                                    assert!(
                                        std::time::Instant::now() < deadline,
                                        "job {i} of thread {t} waited for the partition thread's periodic wake-up"
                                    );
                                    std::thread::yield_now();
                                }
                                Err(e) => panic!("reply dropped: {e}"),
                            }
                        };
                        let old = (i > 0).then(|| (i - 1).to_string().into_bytes());
                        assert_eq!(reply.results[0], OpResult::WrittenWithOld(true, old));
                        if with_ranges && i % 100 == 0 {
                            assert!(matches!(reply.results[1], OpResult::Int(n) if n >= 1));
                        }
                    }
                });
            }
        });
        exec.stop();
        thread.join().unwrap();
        for t in 0..threads {
            let v = db.get(format!("k{t}").as_bytes()).unwrap();
            assert_eq!(v, Some((per_thread - 1).to_string().into_bytes()));
        }
        let (late, _) = job(vec![Op::Len]);
        assert!(
            exec.submit(late).is_err(),
            "a stopped executor takes no job"
        );
    }

    /// Point reads inside a group see the group's earlier writes (the overlay), key by key, before the commit.
    #[test]
    fn a_group_reads_its_own_writes() {
        let dir = tempfile::tempdir().unwrap();
        let (exec, thread, db) = executor(dir.path());
        let set = |k: &str, v: &str| Op::Set {
            key: k.as_bytes().to_vec(),
            value: v.as_bytes().to_vec(),
            condition: SetCondition::Always,
            get_old: false,
        };
        let get = |k: &str| Op::Get(k.as_bytes().to_vec());
        let value = |v: &str| OpResult::Value(Some(v.as_bytes().to_vec()));
        let (first, rx1) = job(vec![set("a", "1"), get("a"), set("b", "2"), set("a", "3")]);
        let (second, rx2) = job(vec![
            get("a"),
            get("b"),
            Op::Del(b"a".to_vec()),
            get("a"),
            Op::Incr {
                key: b"n".to_vec(),
                by: 5,
                u64_values: false,
            },
            Op::Incr {
                key: b"n".to_vec(),
                by: 2,
                u64_values: false,
            },
            get("n"),
        ]);
        // Both jobs queued before anyone runs them: one group, one commit.
        exec.queue.lock().extend([first, second]);
        exec.run(Runner::Connection);
        let r1 = rx1.blocking_recv().unwrap().results.into_vec();
        let r2 = rx2.blocking_recv().unwrap().results.into_vec();
        assert_eq!(
            r1,
            vec![
                OpResult::Written(true),
                value("1"),
                OpResult::Written(true),
                OpResult::Written(true)
            ]
        );
        assert_eq!(
            r2,
            vec![
                value("3"),
                value("2"),
                OpResult::Bool(true),
                OpResult::Value(None),
                OpResult::Int(5),
                OpResult::Int(7),
                value("7")
            ]
        );
        exec.stop();
        thread.join().unwrap();
        assert_eq!(db.get(b"a").unwrap(), None);
        assert_eq!(db.get(b"b").unwrap(), Some(b"2".to_vec()));
        assert_eq!(db.get(b"n").unwrap(), Some(b"7".to_vec()));
    }
}
