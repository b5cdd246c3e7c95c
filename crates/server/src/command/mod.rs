//! # Commands
//!
//! A command's arguments become a [`Plan`]: either a reply right away (connection and server commands:
//! PING, HELLO, INFO, ...) or operations on partitions ([`Op`]s, each routed to the partition of its key)
//! and a [`Finish`] that turns their results into the reply. The connection runs the plans of a whole
//! pipeline at once — one job per partition — and finishes them in order, so a pipeline costs one round
//! trip to each partition it touches, and a partition sees one connection's operations in the order sent.
//!
//! Errors follow Redis's texts where Redis has the command (`ERR wrong number of arguments for 'get'
//! command`, `ERR unknown command 'x', with args beginning with: ...`, `ERR syntax error`, ...).

mod admin;
mod glob;
mod keys;
mod ordered;

pub use admin::{COMMANDS, CommandSpec};
pub use ordered::CursorTable;

use crate::ServerSettings;
use crate::cluster::{Cluster, SlotDecision};
use crate::resp::{Protocol, Reply};
use crate::store::{Op, OpResult, Store};
use bytes::Bytes;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::time::Instant;

/// What every connection shares.
pub struct Shared {
    pub store: Store,
    pub settings: ServerSettings,
    pub cluster: Option<Cluster>,
    pub cursors: CursorTable,
    pub started: Instant,
    pub next_client_id: AtomicU64,
    pub clients: AtomicUsize,
    pub total_connections: AtomicU64,
    pub total_commands: AtomicU64,
    pub rejected_connections: AtomicU64,
    /// Batches of point reads of a loop's turn run, and the reads they answered (see [`crate::turn_reads`]).
    pub turn_read_batches: AtomicU64,
    pub turn_batched_reads: AtomicU64,
    /// The network loops and their connections.
    pub net: Arc<crate::net_loops::NetLoops>,
}

impl Shared {
    /// The shared state of a server over `store`.
    pub fn new(
        store: Store,
        settings: ServerSettings,
        cluster: Option<Cluster>,
        net: Arc<crate::net_loops::NetLoops>,
    ) -> Arc<Shared> {
        Arc::new(Shared {
            store,
            settings,
            cluster,
            cursors: CursorTable::default(),
            started: Instant::now(),
            next_client_id: AtomicU64::new(1),
            clients: AtomicUsize::new(0),
            total_connections: AtomicU64::new(0),
            total_commands: AtomicU64::new(0),
            rejected_connections: AtomicU64::new(0),
            turn_read_batches: AtomicU64::new(0),
            turn_batched_reads: AtomicU64::new(0),
            net,
        })
    }
}

/// One connection's state.
#[derive(Debug)]
pub struct Session {
    pub id: u64,
    pub proto: Protocol,
    pub name: Option<Bytes>,
    pub authenticated: bool,
    /// QUIT was received: answer it, then close.
    pub quit: bool,
    /// ASKING was the previous command (cluster mode: an importing slot may be served once).
    pub asking: bool,
    pub peer: String,
}

/// How a command's reply is made from its operations' results (in the order of its operations).
#[derive(Debug)]
pub enum Finish {
    /// GET-like: the value or null.
    Value,
    /// SET without GET: OK, or null when NX/XX refused.
    SetOk,
    /// SET ... GET and GETSET: the old value.
    OldValue,
    /// Integer results as they are (INCR, APPEND, STRLEN).
    Int,
    /// Booleans as 1/0 (EXISTS of one key, DEL of one key, SETNX).
    Bool,
    /// The number of true results (DEL, EXISTS and UNLINK of several keys).
    CountTrue,
    /// Sum of integer results (DBSIZE, COUNT).
    Sum,
    /// MGET: an array of values.
    Values,
    /// MSET: OK.
    AllOk,
    /// STRLEN: the length of the value as the client sees it.
    Strlen,
    Range(ordered::RangeFinish),
    Sample(ordered::SampleFinish),
    /// SAMPLE's first round (counts); [`next_round`] makes the second.
    SampleSplit(ordered::SampleSplit),
    Scan(ordered::ScanFinish),
    /// Cluster mode, a migrating slot: `-ASK` when no key was here, `-TRYAGAIN` when some were, else the
    /// inner finish.
    Ask {
        slot: u16,
        target: String,
        inner: Box<Finish>,
    },
}

/// What to do for one command.
/// A plan's operations, (partition, operation): most commands have one, which needs no allocation of its own.
pub type RoutedOps = smallvec::SmallVec<[(usize, Op); 1]>;

/// The results of a plan's operations, in their order.
pub type OpResults = smallvec::SmallVec<[OpResult; 1]>;

#[derive(Debug)]
pub enum Plan {
    /// Reply now.
    Now(Reply),
    /// Run `ops` (partition, operation), then finish.
    Routed { ops: RoutedOps, finish: Finish },
}

impl Plan {
    fn error(text: impl Into<String>) -> Plan {
        Plan::Now(Reply::Error(text.into()))
    }
}

/// The reply to a command whose name or arity is wrong.
pub fn wrong_arity(name: &str) -> Plan {
    Plan::error(format!(
        "ERR wrong number of arguments for '{}' command",
        name.to_ascii_lowercase()
    ))
}

/// Redis's text for an unknown command.
pub fn unknown_command(args: &[Bytes]) -> Plan {
    let name = String::from_utf8_lossy(args.first().map_or(&b""[..], |a| a));
    let mut rest = String::new();
    for a in args.iter().skip(1).take(20) {
        rest.push('\'');
        rest.push_str(
            &String::from_utf8_lossy(a)
                .chars()
                .take(128)
                .collect::<String>(),
        );
        rest.push_str("' ");
    }
    Plan::error(format!(
        "ERR unknown command '{}', with args beginning with: {rest}",
        name.chars().take(128).collect::<String>()
    ))
}

/// The command named `name` (in any case). The table is scanned only among the names of `name`'s length
/// (a few), not from its start: GET and SET sit behind a dozen connection and server commands.
pub fn find_spec(name: &[u8]) -> Option<&'static CommandSpec> {
    static BY_LENGTH: std::sync::LazyLock<Vec<Vec<&'static CommandSpec>>> =
        std::sync::LazyLock::new(|| {
            let longest = COMMANDS.iter().map(|c| c.name.len()).max().unwrap_or(0);
            let mut by_length = vec![Vec::new(); longest + 1];
            for c in COMMANDS {
                by_length[c.name.len()].push(c);
            }
            by_length
        });
    BY_LENGTH
        .get(name.len())?
        .iter()
        .copied()
        .find(|c| c.name.as_bytes().eq_ignore_ascii_case(name))
}

/// Plans one command.
pub fn plan(shared: &Shared, session: &mut Session, args: &[Bytes]) -> Plan {
    let Some(first) = args.first() else {
        return Plan::Now(Reply::Ok);
    };
    let Some(spec) = find_spec(first) else {
        return unknown_command(args);
    };
    let arity_ok = if spec.arity >= 0 {
        args.len() == spec.arity as usize
    } else {
        args.len() >= spec.arity.unsigned_abs() as usize
    };
    if !arity_ok {
        return wrong_arity(spec.name);
    }
    if !session.authenticated && !matches!(spec.name, "AUTH" | "HELLO" | "QUIT") {
        return Plan::error("NOAUTH Authentication required.");
    }
    let asking = std::mem::take(&mut session.asking);
    let mut migrating = None;
    if let Some(cluster) = &shared.cluster
        && spec.first_key > 0
    {
        let last = if spec.last_key < 0 {
            args.len() as i64 + spec.last_key
        } else {
            spec.last_key
        };
        let mut slot = None;
        let mut i = spec.first_key;
        while i <= last {
            let s = crate::cluster::key_slot(&args[i as usize]);
            if slot.is_some_and(|x| x != s) {
                return Plan::error("CROSSSLOT Keys in request don't hash to the same slot");
            }
            slot = Some(s);
            i += spec.step.max(1);
        }
        if let Some(slot) = slot {
            match cluster.decide(slot, asking) {
                SlotDecision::Local => {}
                SlotDecision::Moved(addr) if addr.is_empty() => {
                    return Plan::error(format!("CLUSTERDOWN Hash slot {slot} not served"));
                }
                SlotDecision::Moved(addr) => return Plan::error(format!("MOVED {slot} {addr}")),
                SlotDecision::Migrating(target) => migrating = Some((slot, target)),
            }
        }
    }
    let plan = match spec.group {
        admin::Group::Connection | admin::Group::Server => admin::plan(shared, session, spec, args),
        admin::Group::Keys => keys::plan(shared, spec, args),
        admin::Group::Ordered => ordered::plan(shared, spec, args),
    };
    match (plan, migrating) {
        (Plan::Routed { ops, finish }, Some((slot, target))) => Plan::Routed {
            ops: ops
                .into_iter()
                .map(|(p, op)| (p, Op::IfPresent(Box::new(op))))
                .collect(),
            finish: Finish::Ask {
                slot,
                target,
                inner: Box::new(finish),
            },
        },
        (plan, _) => plan,
    }
}

/// The operations and finish of another round, for plans that take two (SAMPLE over several partitions).
pub fn next_round(finish: &Finish, results: &[OpResult]) -> Option<(RoutedOps, Finish)> {
    match finish {
        Finish::SampleSplit(s) => s.second_round(results),
        _ => None,
    }
}

/// Whether a routed plan with this finish may have a second round ([`next_round`]).
pub fn has_next_round(finish: &Finish) -> bool {
    matches!(finish, Finish::SampleSplit(_))
}

/// Turns the results of a routed plan's operations (in the order of its operations) into its reply.
pub fn finish(shared: &Shared, finish: &Finish, results: OpResults) -> Reply {
    if let Finish::Ask {
        slot,
        target,
        inner,
    } = finish
    {
        let absent = results
            .iter()
            .filter(|r| matches!(r, OpResult::Absent))
            .count();
        return if absent == results.len() {
            Reply::Error(format!("ASK {slot} {target}"))
        } else if absent > 0 {
            Reply::Error("TRYAGAIN Multiple keys request during rehashing of slot".into())
        } else {
            self::finish(shared, inner, results)
        };
    }
    if let Some(e) = results.iter().find_map(|r| match r {
        OpResult::Error(e) => Some(e.clone()),
        OpResult::NoAnswer => Some("ERR no answer".to_string()),
        _ => None,
    }) {
        return Reply::Error(e);
    }
    let mode = shared.store.layout().key_mode;
    let value = |v: Option<Vec<u8>>| match v {
        Some(v) => Reply::Bulk(Bytes::from(mode.decode(v))),
        None => Reply::Null,
    };
    let mut results = results.into_iter();
    match finish {
        Finish::Strlen => match results.next() {
            Some(OpResult::Value(v)) => Reply::Int(v.map_or(0, |v| mode.decode(v).len() as i64)),
            other => unexpected(other),
        },
        Finish::Value => match results.next() {
            Some(OpResult::Value(v)) => value(v),
            other => unexpected(other),
        },
        Finish::SetOk => match results.next() {
            Some(OpResult::Written(true)) => Reply::Ok,
            Some(OpResult::Written(false)) => Reply::Null,
            other => unexpected(other),
        },
        Finish::OldValue => match results.next() {
            Some(OpResult::WrittenWithOld(_, old)) => value(old),
            other => unexpected(other),
        },
        Finish::Int => match results.next() {
            Some(OpResult::Int(n)) => Reply::Int(n),
            other => unexpected(other),
        },
        Finish::Bool => match results.next() {
            Some(OpResult::Bool(b)) => Reply::Int(i64::from(b)),
            Some(OpResult::Written(b)) => Reply::Int(i64::from(b)),
            other => unexpected(other),
        },
        Finish::CountTrue => Reply::Int(
            results
                .filter(|r| matches!(r, OpResult::Bool(true)))
                .count() as i64,
        ),
        Finish::Sum => Reply::Int(
            results
                .map(|r| match r {
                    OpResult::Int(n) => n,
                    _ => 0,
                })
                .sum(),
        ),
        Finish::Values => Reply::Array(
            results
                .map(|r| match r {
                    OpResult::Value(v) => value(v),
                    _ => Reply::Null,
                })
                .collect(),
        ),
        Finish::AllOk => Reply::Ok,
        Finish::Range(f) => f.finish(shared, results.collect()),
        Finish::Sample(f) => f.finish(shared, results.collect()),
        // No second round: the range is empty.
        Finish::SampleSplit(_) => Reply::Array(Vec::new()),
        Finish::Scan(f) => f.finish(shared, results.collect()),
        Finish::Ask { .. } => unexpected(None),
    }
}

fn unexpected(r: Option<OpResult>) -> Reply {
    Reply::err(format!("internal error: unexpected result {r:?}"))
}

/// Parses an integer argument as Redis does (`ERR value is not an integer or out of range`).
pub fn int_arg(a: &[u8]) -> Result<i64, Reply> {
    std::str::from_utf8(a)
        .ok()
        .filter(|s| !s.starts_with('+') && !s.is_empty())
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| Reply::err("value is not an integer or out of range"))
}

/// True if `a` equals `word` ignoring ASCII case.
pub fn is(a: &[u8], word: &str) -> bool {
    a.eq_ignore_ascii_case(word.as_bytes())
}
