//! One client connection: read, parse every complete command, run them as one pipeline, write the replies.
//!
//! Bounds: the query buffer holds at most `max_query_buffer` bytes (a longer incomplete command is a
//! protocol error and the connection closes); a pipeline runs at most [`MAX_PIPELINE`] commands before its
//! replies are written, so the reply buffer of one connection stays bounded by what those commands return;
//! an idle connection closes after the idle timeout.
//!
//! Cost per pipeline: one socket read, one socket write of all its replies, and one job per partition it
//! queues work at. At durability `flush` a job with writes is queued, the task yields once (tokio runs
//! yielded tasks after the ready ones and an I/O poll), and only then runs the queue: the connections
//! served in the same turn of the event loop have queued theirs by then, and one group commit — one WAL
//! write — answers them all. Reads never wait for that turn (point reads go to the database directly and
//! count for their partition, unless partitions are emulated servers of fixed capacity, whose queues serve
//! every operation), and a write is still acknowledged only after its WAL bytes reached the OS.
//!
//! A pipeline's point reads on the database are made together, one batched lookup per partition
//! (`RawDb::get_many`: the B+-tree interleaves the descents so their cache misses overlap), right after
//! planning and before any job of the pipeline runs — or earlier, when the planning reaches a write, so a
//! read never sees a write that comes after it in its pipeline. When only a few point reads are left at the
//! end of planning (pipeline depth 1), they join the network loop's batch of that turn instead
//! ([`crate::turn_reads`]): one yield, and the GETs of every connection served in the turn are looked up
//! together.
//!
//! A pipeline of one command whose plan is one operation (GET, SET, INCR, ... at pipeline depth 1, the
//! commonest request) takes the same steps without the pipeline's tables (plans, per-partition jobs and
//! slots, result vectors, the queued-key set): `run_one`, about 200 instructions less per GET and 900 less
//! per SET (callgrind, `redis-benchmark -P 1 -c 50`). Which operation goes where is decided by one function
//! (`take_op`) for both paths.

use crate::cache::Served;
use crate::command::{self, OpResults, Plan, Session, Shared};
use crate::resp::{Limits, Parsed, Protocol, Reply, parse_request};
use crate::store::{Job, JobOps, Op, OpResult};
use crate::turn_reads;
use bytes::{Bytes, BytesMut};
use smallvec::SmallVec;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One command's arguments (slices of the frame it came in); short commands need no allocation of their own.
type Args = smallvec::SmallVec<[Bytes; 3]>;

/// Most commands run as one pipeline step.
pub const MAX_PIPELINE: usize = 1024;

/// A connection's state between pipelines: what moves with it to another network loop.
pub struct Connection {
    session: Session,
    /// Unparsed input (at most an incomplete command between pipelines).
    input: BytesMut,
    output: BytesMut,
    scratch: Scratch,
    /// The network loop serving it.
    pub home: usize,
}

impl Connection {
    /// A new connection from `peer`, served by loop `home`.
    pub fn new(shared: &Shared, peer: String, home: usize) -> Connection {
        Connection {
            session: Session {
                id: shared.next_client_id.fetch_add(1, Ordering::Relaxed),
                proto: Protocol::Resp2,
                name: None,
                authenticated: shared.settings.requirepass.is_none(),
                quit: false,
                asking: false,
                peer,
            },
            input: BytesMut::with_capacity(16 << 10),
            output: BytesMut::with_capacity(16 << 10),
            // Kept across pipelines, so a pipeline allocates no vectors of its own for them (glibc's malloc
            // consolidates its free lists at every large request: per-pipeline vectors of a kilobyte cost
            // more than their size says).
            scratch: Scratch::default(),
            home,
        }
    }
}

/// Why [`serve`] returned.
pub enum Ended {
    /// The client closed it, QUIT, a protocol error or the idle timeout.
    Closed,
    /// It is to go on at network loop `to` (see [`crate::net_loops`]), with its socket.
    Moved {
        to: usize,
        conn: Box<Connection>,
        stream: std::net::TcpStream,
    },
}

/// Serves one connection until it closes or its loop asks it to move (only between pipelines: every reply
/// written, at most an incomplete command buffered, which moves with it).
pub async fn serve(shared: Arc<Shared>, mut stream: TcpStream, mut conn: Box<Connection>) -> Ended {
    let _ = stream.set_nodelay(true);
    let limits = shared.settings.limits;
    let max_query = shared.settings.max_query_buffer;
    let idle = shared.settings.idle_timeout;
    let Connection {
        session,
        input,
        output,
        scratch,
        home,
    } = &mut *conn;
    loop {
        if let Some(to) = shared.net.take_leave(*home) {
            return match stream.into_std() {
                Ok(stream) => Ended::Moved { to, conn, stream },
                Err(_) => Ended::Closed,
            };
        }
        let read = match idle {
            Some(t) => match tokio::time::timeout(t, stream.read_buf(input)).await {
                Ok(r) => r,
                Err(_) => break,
            },
            None => stream.read_buf(input).await,
        };
        match read {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        loop {
            let error = take_commands(input, &limits, &mut scratch.commands);
            if !scratch.commands.is_empty() {
                run_pipeline(&shared, session, scratch, output).await;
            }
            let overflow = error.is_none() && input.len() > max_query;
            if let Some(e) = &error {
                Reply::err(e).encode(session.proto, output);
            } else if overflow {
                Reply::err("Protocol error: the query buffer is over its limit")
                    .encode(session.proto, output);
            }
            if !output.is_empty() {
                if stream.write_all(output).await.is_err() {
                    return Ended::Closed;
                }
                output.clear();
            }
            if error.is_some() || overflow || session.quit {
                let _ = stream.shutdown().await;
                return Ended::Closed;
            }
            // More complete commands than one pipeline step takes: go on without reading.
            if !has_complete_command(input, &limits) {
                break;
            }
        }
        if input.capacity() > 4 * max_query.max(1 << 20) && input.is_empty() {
            *input = BytesMut::with_capacity(16 << 10);
        }
    }
    Ended::Closed
}

fn has_complete_command(input: &BytesMut, limits: &Limits) -> bool {
    matches!(
        parse_request(input, limits),
        Ok(Parsed::Command { .. } | Parsed::Nothing { .. })
    )
}

/// Moves up to [`MAX_PIPELINE`] complete commands from the front of `input` into `commands` (empty on
/// entry); returns the protocol error that stopped parsing, if any.
fn take_commands(
    input: &mut BytesMut,
    limits: &Limits,
    commands: &mut Vec<Args>,
) -> Option<String> {
    while commands.len() < MAX_PIPELINE {
        match parse_request(input, limits) {
            Ok(Parsed::Incomplete) => break,
            Ok(Parsed::Nothing { consumed }) => {
                let _ = input.split_to(consumed);
            }
            Ok(Parsed::Command { args, consumed }) => {
                let frame = input.split_to(consumed).freeze();
                // Pushed one by one: a command's few arguments fit `Args` inline, and `collect` pays for
                // its general reserve-and-fill path on every command.
                let mut command = Args::new();
                for r in args {
                    command.push(frame.slice(r));
                }
                commands.push(command);
            }
            Err(e) => return Some(e.to_string()),
        }
    }
    None
}

/// A connection's vectors for running pipelines, empty between pipelines (their capacity stays).
#[derive(Default)]
struct Scratch {
    commands: Vec<Args>,
    plans: Vec<Planned>,
    /// Results given at once (by the cache or a direct read): (plan index, operation index), result.
    early: Vec<((usize, usize), OpResult)>,
    /// Hashes of the keys queued at partitions (xxh3 values already: the table uses them as they are).
    queued: hashbrown::HashTable<u64>,
    /// Per partition: the operations of its job (handed over with the job), and where each one's result goes.
    per_part: Vec<JobOps>,
    slots: Vec<Vec<(usize, usize)>>,
    /// Per partition: the point reads answered on this thread, in one batch after planning.
    direct: Vec<Vec<DirectRead>>,
    /// The reads handed to the loop's turn batch: where each one's result goes, and whether it is an EXISTS.
    joined: Vec<((usize, usize), bool)>,
    /// Results of every routed plan, by plan then by operation.
    results: Vec<OpResults>,
}

/// A point read answered from a partition's database on this thread: where its result goes, its key, and
/// whether the command asks only whether the key exists (EXISTS) or for the value (GET).
struct DirectRead {
    at: (usize, usize),
    key: Vec<u8>,
    exists: bool,
}

/// The key of a GET or EXISTS and whether it is an EXISTS; `None` for other operations.
fn point_read(op: Op) -> Result<(Vec<u8>, bool), Op> {
    match op {
        Op::Get(k) => Ok((k, false)),
        Op::Exists(k) => Ok((k, true)),
        op => Err(op),
    }
}

/// Answers the direct reads planned so far (taking them out of `direct`), with one batched lookup per
/// partition so that the lookups' cache misses overlap; if a batch fails, each of its reads is answered
/// alone (with its own error).
fn answer_direct_reads(
    shared: &Shared,
    direct: &mut [Vec<DirectRead>],
    early: &mut Vec<((usize, usize), OpResult)>,
) {
    for (p, reads) in direct.iter_mut().enumerate() {
        if reads.is_empty() {
            continue;
        }
        let keys: SmallVec<[&[u8]; 16]> = reads.iter().map(|r| &r.key[..]).collect();
        let read = shared.store.read_direct(p, &keys, |i, v| {
            early.push((reads[i].at, read_result(reads[i].exists, v)));
        });
        drop(keys);
        if read {
            reads.clear();
        }
    }
}

/// The result of a GET (or an EXISTS, `exists`) from the engine's answer.
fn read_result(exists: bool, v: turn_reads::ReadAnswer) -> OpResult {
    match v {
        Ok(v) if exists => OpResult::Bool(v.is_some()),
        Ok(v) => OpResult::Value(v),
        Err(e) => OpResult::Error(format!("ERR {e}")),
    }
}

/// Answers the direct reads left at the end of planning: with the loop's turn batch when it pays (see
/// [`turn_reads`]: one yield, then the batch), else here at once.
async fn answer_last_direct_reads(
    shared: &Shared,
    direct: &mut [Vec<DirectRead>],
    joined: &mut Vec<((usize, usize), bool)>,
    early: &mut Vec<((usize, usize), OpResult)>,
) {
    let n = direct.iter().map(Vec::len).sum();
    let batch = turn_reads::join(&shared.store, n, |batch| {
        for (p, reads) in direct.iter_mut().enumerate() {
            for r in reads.drain(..) {
                batch.push((p, r.key));
                joined.push((r.at, r.exists));
            }
        }
    });
    let Some(batch) = batch else {
        answer_direct_reads(shared, direct, early);
        return;
    };
    tokio::task::yield_now().await;
    let before = early.len();
    let ran = turn_reads::collect(&shared.store, batch, |i, v| {
        if let Some(&(at, exists)) = joined.get(i) {
            early.push((at, read_result(exists, v)));
        }
    });
    if let Some(ran) = ran {
        shared.turn_read_batches.fetch_add(1, Ordering::Relaxed);
        shared
            .turn_batched_reads
            .fetch_add(ran.reads as u64, Ordering::Relaxed);
    }
    if early.len() - before < joined.len() {
        // Never expected: an answer went missing. Each read still gets a reply.
        for &(at, _) in joined.iter() {
            if !early[before..].iter().any(|(a, _)| *a == at) {
                early.push((at, OpResult::Error("ERR the read was not answered".into())));
            }
        }
    }
    joined.clear();
}

/// The slot of an operation no command waits for (a cache population).
const NO_SLOT: (usize, usize) = (usize::MAX, usize::MAX);

/// A plan whose operations went to the partitions: how many, and how to finish.
enum Planned {
    Now(Reply),
    Routed(usize, command::Finish),
}

/// Runs a pipeline: plans every command, sends one job per partition touched, then finishes the commands
/// in order and encodes their replies.
async fn run_pipeline(
    shared: &Arc<Shared>,
    session: &mut Session,
    scratch: &mut Scratch,
    output: &mut BytesMut,
) {
    let Scratch {
        commands,
        plans,
        early,
        queued,
        per_part,
        slots,
        direct,
        joined,
        results,
    } = scratch;
    shared
        .total_commands
        .fetch_add(commands.len() as u64, Ordering::Relaxed);
    let parts = shared.store.partitions();

    // Per partition: its operations, and for each, (plan index, index among the plan's operations).
    per_part.resize_with(parts, JobOps::new);
    slots.resize_with(parts, Vec::new);
    direct.resize_with(parts, Vec::new);
    let cache = shared.store.cache().map(|c| &**c);
    // Each command's sketch counters are asked for before planning, so the sketch misses of a pipeline's
    // keys overlap with each other and with the planning (in `bytes` mode a command's key, its second
    // argument, is the key the sketch counts). A pipeline of one command too: its miss overlaps its plan.
    if let Some(cache) = cache
        && shared.store.layout().key_mode == crate::store::KeyMode::Bytes
    {
        for key in commands.iter().filter_map(|args| args.get(1)) {
            cache.prefetch(key);
        }
    }
    // A pipeline of one command with one operation (a GET or SET at pipeline depth 1) takes the short way.
    let mut first = None;
    if let [args] = &commands[..]
        && !session.quit
    {
        match command::plan(shared, session, args) {
            Plan::Routed { mut ops, finish }
                if ops.len() == 1 && !command::has_next_round(&finish) =>
            {
                commands.clear();
                if let Some((p, op)) = ops.pop() {
                    run_one(
                        shared,
                        session,
                        (p, op),
                        finish,
                        direct,
                        joined,
                        early,
                        output,
                    )
                    .await;
                }
                return;
            }
            plan => first = Some(plan),
        }
    }
    // The cache-log ticket the early results wait for.
    let mut ticket = 0u64;
    for args in commands.iter() {
        // After QUIT, nothing more of this pipeline runs.
        if session.quit {
            break;
        }
        let plan = match first
            .take()
            .unwrap_or_else(|| command::plan(shared, session, args))
        {
            Plan::Now(reply) => Planned::Now(reply),
            Plan::Routed { ops, finish } => {
                let n = ops.len();
                for (j, (p, op)) in ops.into_iter().enumerate() {
                    let at = (plans.len(), j);
                    let key_hash = crate::cache::op_key(&op).map(crate::cache::key_hash);
                    // A key this pipeline already queued at its partition stays there (it is neither served
                    // by the cache nor read here), so this connection's operations on it keep their order.
                    // Keys are tracked by hash: a collision only sends an operation the slower, safe way.
                    let queued_before =
                        key_hash.is_some_and(|h| queued.find(h, |&q| q == h).is_some());
                    // A write the cache may answer at once comes after the reads planned before it.
                    if crate::store::writes(&op) && direct.iter().any(|reads| !reads.is_empty()) {
                        answer_direct_reads(shared, direct, early);
                    }
                    let idle = per_part[p].is_empty();
                    let (taken, populate) = take_op(shared, p, op, key_hash, queued_before, idle);
                    match taken {
                        Taken::Answered(r, t) => {
                            ticket = ticket.max(t);
                            early.push((at, r));
                        }
                        Taken::Read { key, exists } => {
                            direct[p].push(DirectRead { at, key, exists });
                        }
                        Taken::Queued(op) => {
                            if let Some(h) = key_hash
                                && !queued_before
                            {
                                queued.insert_unique(h, h, |&q| q);
                            }
                            per_part[p].push(op);
                            slots[p].push(at);
                        }
                    }
                    if let Some(op) = populate {
                        per_part[p].push(op);
                        slots[p].push(NO_SLOT);
                    }
                }
                Planned::Routed(n, finish)
            }
        };
        plans.push(plan);
    }
    if direct.iter().any(|reads| !reads.is_empty()) {
        answer_last_direct_reads(shared, direct, joined, early).await;
    }
    results.clear();
    results.extend(plans.iter().map(|p| match p {
        Planned::Routed(n, _) => no_answers(*n),
        Planned::Now(_) => OpResults::new(),
    }));
    for ((i, j), r) in early.drain(..) {
        results[i][j] = r;
    }
    queued.clear();
    commands.clear();
    // A pipeline answered without any job (reads made here, the cache) skips the jobs' machinery.
    if per_part.iter().any(|ops| !ops.is_empty()) {
        ticket = ticket.max(run_jobs(shared, per_part, slots, results).await);
    }
    // Writes answered by the cache are acknowledged once their log records are durable.
    if ticket > 0
        && let Some(cache) = cache
        && let Err(e) = cache.log().wait_async(ticket).await
    {
        for r in results.iter_mut().flatten() {
            *r = OpResult::Error(e.clone());
        }
    }
    if plans
        .iter()
        .any(|p| matches!(p, Planned::Routed(_, f) if command::has_next_round(f)))
    {
        second_rounds(shared, plans, results).await;
    }
    for (plan, res) in plans.drain(..).zip(results.drain(..)) {
        let reply = match plan {
            Planned::Now(r) => r,
            Planned::Routed(_, finish) => command::finish(shared, &finish, res),
        };
        reply.encode(session.proto, output);
    }
}

/// How a pipeline takes up one operation of a plan ([`take_op`]).
enum Taken {
    /// The hot-key cache answered it; the answer waits for this cache-log ticket (0: none).
    Answered(OpResult, u64),
    /// A point read made on this thread: GET, or EXISTS (`exists`).
    Read { key: Vec<u8>, exists: bool },
    /// It goes to its partition's queue.
    Queued(Op),
}

/// Takes up `op` of partition `p` (its key's hash `key_hash`, if it has a key), and says whether the sketch
/// asks for the key to be brought into the cache (the population operation to queue after it):
/// - a key this pipeline already queued at its partition (`queued_before`) stays there: it is neither
///   served by the cache nor read here, so this connection's operations on it keep their order;
/// - else the cache answers what it can;
/// - a point read on a partition this pipeline has queued nothing at yet (`partition_idle`) reads the
///   database here: every acknowledged write is already in it, and nothing of this connection waits in the
///   partition's queue to come before it. The pipeline makes such reads before any of its jobs runs, so
///   they still come before everything it queues.
#[inline(always)]
fn take_op(
    shared: &Shared,
    p: usize,
    op: Op,
    key_hash: Option<u64>,
    queued_before: bool,
    partition_idle: bool,
) -> (Taken, Option<Op>) {
    let mut populate = None;
    if let (Some(cache), false, Some(h)) = (shared.store.cache(), queued_before, key_hash) {
        match cache.serve_hashed(&op, h) {
            Served::Done(r, t) => return (Taken::Answered(r, t), None),
            Served::NotCached => {
                if let Some(key) = crate::cache::op_key(&op)
                    && cache.touch(key, h)
                {
                    populate = Some(Op::Populate(key.to_vec()));
                }
            }
            Served::NeedsEviction => {}
        }
    }
    if !queued_before && partition_idle && shared.store.direct_reader(p).is_some() {
        return match point_read(op) {
            Ok((key, exists)) => (Taken::Read { key, exists }, populate),
            Err(op) => (Taken::Queued(op), populate),
        };
    }
    (Taken::Queued(op), populate)
}

/// Runs a pipeline of one command whose plan is one operation `(p, op)` (GET, SET, INCR, ... at pipeline
/// depth 1) as [`run_pipeline`] would, without its per-pipeline tables: the operation is taken up
/// ([`take_op`]), a read is made here (through the loop's turn batch when it pays), anything queued goes
/// as one job, and a cache-answered write waits for its log record. `direct`, `joined` and `early` are the
/// connection's scratch vectors (empty on entry and on return).
#[allow(clippy::too_many_arguments)]
async fn run_one(
    shared: &Shared,
    session: &Session,
    (p, op): (usize, Op),
    finish: command::Finish,
    direct: &mut [Vec<DirectRead>],
    joined: &mut Vec<((usize, usize), bool)>,
    early: &mut Vec<((usize, usize), OpResult)>,
    output: &mut BytesMut,
) {
    let key_hash = crate::cache::op_key(&op).map(crate::cache::key_hash);
    let (taken, populate) = take_op(shared, p, op, key_hash, false, true);
    let mut ticket = 0;
    let mut answer = None;
    let mut job = JobOps::new();
    match taken {
        Taken::Answered(r, t) => {
            ticket = t;
            answer = Some(r);
        }
        Taken::Read { key, exists } => {
            direct[p].push(DirectRead {
                at: (0, 0),
                key,
                exists,
            });
            answer_last_direct_reads(shared, direct, joined, early).await;
            answer = early.pop().map(|(_, r)| r);
            early.clear();
        }
        Taken::Queued(op) => job.push(op),
    }
    if let Some(op) = populate {
        job.push(op);
    }
    if !job.is_empty() {
        match send_job(shared, p, job) {
            Ok((rx, defer)) => {
                if defer {
                    tokio::task::yield_now().await;
                    shared.store.run_queued(p);
                }
                let reply = rx.await.unwrap_or_default();
                ticket = ticket.max(reply.ticket);
                // The population answers nothing (it comes after the command's own operation, if queued).
                if answer.is_none() {
                    answer =
                        Some(reply.results.into_iter().next().unwrap_or_else(|| {
                            OpResult::Error(format!("ERR partition {p} stopped"))
                        }));
                }
            }
            Err(e) => {
                if answer.is_none() {
                    answer = Some(OpResult::Error(e));
                }
            }
        }
    }
    let mut answer = answer.unwrap_or_else(no_answer);
    if ticket > 0
        && let Some(cache) = shared.store.cache()
        && let Err(e) = cache.log().wait_async(ticket).await
    {
        answer = OpResult::Error(e);
    }
    command::finish(shared, &finish, smallvec::smallvec![answer]).encode(session.proto, output);
}

/// Sends partition `p` the job of `ops`: queued, to run after this turn of the loop, when it has writes at
/// durability `flush` (the other connections served in this turn queue theirs, and the first of them to
/// run the queue commits all with one WAL write; the caller yields, then runs the queue: `true`); else
/// submitted at once (`false`). The answers come on the receiver; the error reply when the partition
/// takes no job.
fn send_job(
    shared: &Shared,
    p: usize,
    ops: JobOps,
) -> Result<(tokio::sync::oneshot::Receiver<crate::store::JobReply>, bool), String> {
    let defer = shared.store.defers_commits() && ops.iter().any(crate::store::writes);
    let (tx, rx) = tokio::sync::oneshot::channel();
    let job = Job { ops, reply: tx };
    let queued = if defer {
        shared.store.enqueue(p, job)
    } else {
        shared.store.submit(p, job)
    };
    match queued {
        Ok(()) => Ok((rx, defer)),
        Err(e) => Err(format!("ERR {e}")),
    }
}

fn no_answer() -> OpResult {
    OpResult::NoAnswer
}

/// `n` placeholders for a plan's results (pushed one by one: most plans have one operation, held inline).
fn no_answers(n: usize) -> OpResults {
    let mut results = OpResults::with_capacity(n);
    for _ in 0..n {
        results.push(OpResult::NoAnswer);
    }
    results
}

/// Sends each partition its operations as one job and puts every answer at its slot in `results` (slots
/// [`NO_SLOT`] are dropped); returns the highest cache-log ticket the answers wait for. Leaves `per_part`
/// and `slots` empty (their outer capacity stays).
async fn run_jobs(
    shared: &Shared,
    per_part: &mut [JobOps],
    slots: &mut [Vec<(usize, usize)>],
    results: &mut [OpResults],
) -> u64 {
    let mut waiting = smallvec::SmallVec::<[_; 2]>::new();
    let mut deferred = false;
    for (p, ops) in per_part.iter_mut().enumerate() {
        if ops.is_empty() {
            continue;
        }
        match send_job(shared, p, std::mem::take(ops)) {
            Ok((rx, defer)) => {
                deferred |= defer;
                waiting.push((p, rx, defer));
            }
            Err(e) => {
                for &(i, j) in slots[p].iter().filter(|&&s| s != NO_SLOT) {
                    results[i][j] = OpResult::Error(e.clone());
                }
            }
        }
    }
    if deferred {
        // Back of the runtime's queue (tokio runs deferred tasks after the ready ones and an I/O poll).
        tokio::task::yield_now().await;
        for &(p, _, defer) in &waiting {
            if defer {
                shared.store.run_queued(p);
            }
        }
    }
    let mut ticket = 0;
    for (p, rx, _) in waiting {
        let reply = rx.await.unwrap_or_default();
        ticket = ticket.max(reply.ticket);
        let mut answers = reply.results.into_iter();
        for &(i, j) in &slots[p] {
            let answer = answers
                .next()
                .unwrap_or_else(|| OpResult::Error(format!("ERR partition {p} stopped")));
            if (i, j) != NO_SLOT {
                results[i][j] = answer;
            }
        }
    }
    for s in slots.iter_mut() {
        s.clear();
    }
    ticket
}

/// Runs the second round of the plans that have one (their operations, grouped per partition, then their
/// new finish), replacing their results.
async fn second_rounds(shared: &Shared, plans: &mut [Planned], results: &mut [OpResults]) {
    let parts = shared.store.partitions();
    let mut per_part: Vec<JobOps> = vec![JobOps::new(); parts];
    let mut slots: Vec<Vec<(usize, usize)>> = vec![Vec::new(); parts];
    for (i, plan) in plans.iter_mut().enumerate() {
        let Planned::Routed(n, finish) = plan else {
            continue;
        };
        if let Some((ops, next)) = command::next_round(finish, &results[i]) {
            *n = ops.len();
            *finish = next;
            results[i] = no_answers(ops.len());
            for (j, (p, op)) in ops.into_iter().enumerate() {
                per_part[p].push(op);
                slots[p].push((i, j));
            }
        }
    }
    // Nothing is sent when no plan has a second round.
    run_jobs(shared, &mut per_part, &mut slots, results).await;
}
