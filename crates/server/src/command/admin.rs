//! The command table, and the commands answered without touching a partition: PING, ECHO, HELLO, AUTH,
//! SELECT, QUIT, COMMAND (COUNT, INFO, DOCS, LIST), CLIENT (ID, SETNAME, GETNAME, SETINFO, INFO), CONFIG GET,
//! INFO.

use super::{Plan, Session, Shared, is};
use crate::resp::{Protocol, Reply};
use bytes::Bytes;
use std::sync::atomic::Ordering;
use strata::Durability;

/// Which module plans a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    Connection,
    Server,
    Keys,
    Ordered,
}

/// One command: its name, arity as Redis states it (n: exactly n arguments including the name; −n: at
/// least n), flags, key positions, and a one-line summary (COMMAND DOCS).
#[derive(Debug)]
pub struct CommandSpec {
    pub name: &'static str,
    pub arity: i32,
    pub flags: &'static [&'static str],
    pub first_key: i64,
    pub last_key: i64,
    pub step: i64,
    pub group: Group,
    pub summary: &'static str,
}

const fn spec(
    name: &'static str,
    arity: i32,
    flags: &'static [&'static str],
    keys: (i64, i64, i64),
    group: Group,
    summary: &'static str,
) -> CommandSpec {
    CommandSpec {
        name,
        arity,
        flags,
        first_key: keys.0,
        last_key: keys.1,
        step: keys.2,
        group,
        summary,
    }
}

const R: &[&str] = &["readonly", "fast"];
const W: &[&str] = &["write", "denyoom", "fast"];
const ADMIN: &[&str] = &["loading", "stale", "fast"];
const NONE: (i64, i64, i64) = (0, 0, 0);
const ONE: (i64, i64, i64) = (1, 1, 1);
const ALL: (i64, i64, i64) = (1, -1, 1);

/// Every command the server answers.
pub static COMMANDS: &[CommandSpec] = &[
    spec(
        "PING",
        -1,
        ADMIN,
        NONE,
        Group::Connection,
        "Returns the server's liveliness response.",
    ),
    spec(
        "ECHO",
        2,
        ADMIN,
        NONE,
        Group::Connection,
        "Returns the given string.",
    ),
    spec(
        "HELLO",
        -1,
        ADMIN,
        NONE,
        Group::Connection,
        "Handshakes with the server (RESP2 or RESP3).",
    ),
    spec(
        "AUTH",
        -2,
        ADMIN,
        NONE,
        Group::Connection,
        "Authenticates the connection.",
    ),
    spec(
        "SELECT",
        2,
        ADMIN,
        NONE,
        Group::Connection,
        "Selects database 0 (the only one).",
    ),
    spec(
        "QUIT",
        -1,
        ADMIN,
        NONE,
        Group::Connection,
        "Closes the connection.",
    ),
    spec(
        "CLIENT",
        -2,
        ADMIN,
        NONE,
        Group::Connection,
        "Connection management: ID, SETNAME, GETNAME, SETINFO, INFO.",
    ),
    spec(
        "COMMAND",
        -1,
        ADMIN,
        NONE,
        Group::Server,
        "Returns information about commands.",
    ),
    spec(
        "CLUSTER",
        -2,
        ADMIN,
        NONE,
        Group::Server,
        "Cluster mode: SLOTS, SHARDS, NODES, MYID, INFO, KEYSLOT.",
    ),
    spec(
        "ASKING",
        1,
        ADMIN,
        NONE,
        Group::Connection,
        "Lets the next command use an importing slot.",
    ),
    spec(
        "READONLY",
        1,
        ADMIN,
        NONE,
        Group::Connection,
        "Accepted (every node is a primary).",
    ),
    spec(
        "READWRITE",
        1,
        ADMIN,
        NONE,
        Group::Connection,
        "Accepted (every node is a primary).",
    ),
    spec(
        "CONFIG",
        -2,
        ADMIN,
        NONE,
        Group::Server,
        "CONFIG GET of the server's settings.",
    ),
    spec(
        "INFO",
        -1,
        ADMIN,
        NONE,
        Group::Server,
        "Returns information and statistics about the server.",
    ),
    spec(
        "DBSIZE",
        1,
        R,
        NONE,
        Group::Ordered,
        "Returns the number of keys.",
    ),
    spec(
        "GET",
        2,
        R,
        ONE,
        Group::Keys,
        "Returns the string value of a key.",
    ),
    spec(
        "SET",
        -3,
        W,
        ONE,
        Group::Keys,
        "Sets the string value of a key (NX, XX, GET).",
    ),
    spec(
        "SETNX",
        3,
        W,
        ONE,
        Group::Keys,
        "Sets the value of a key only when it does not exist.",
    ),
    spec(
        "GETSET",
        3,
        W,
        ONE,
        Group::Keys,
        "Sets a key and returns its old value.",
    ),
    spec("DEL", -2, W, ALL, Group::Keys, "Deletes keys."),
    spec("UNLINK", -2, W, ALL, Group::Keys, "Deletes keys."),
    spec(
        "EXISTS",
        -2,
        R,
        ALL,
        Group::Keys,
        "Counts the given keys that exist.",
    ),
    spec(
        "MGET",
        -2,
        R,
        ALL,
        Group::Keys,
        "Returns the values of keys.",
    ),
    spec("MSET", -3, W, (1, -1, 2), Group::Keys, "Sets several keys."),
    spec(
        "INCR",
        2,
        W,
        ONE,
        Group::Keys,
        "Increments the integer value of a key by one.",
    ),
    spec(
        "INCRBY",
        3,
        W,
        ONE,
        Group::Keys,
        "Increments the integer value of a key by a number.",
    ),
    spec(
        "DECR",
        2,
        W,
        ONE,
        Group::Keys,
        "Decrements the integer value of a key by one.",
    ),
    spec(
        "DECRBY",
        3,
        W,
        ONE,
        Group::Keys,
        "Decrements the integer value of a key by a number.",
    ),
    spec(
        "APPEND",
        3,
        W,
        ONE,
        Group::Keys,
        "Appends a string to the value of a key.",
    ),
    spec(
        "STRLEN",
        2,
        R,
        ONE,
        Group::Keys,
        "Returns the length of a string value.",
    ),
    spec(
        "SCAN",
        -2,
        &["readonly"],
        NONE,
        Group::Ordered,
        "Iterates over the keys (cursor, MATCH, COUNT).",
    ),
    spec(
        "RANGE",
        -3,
        &["readonly"],
        NONE,
        Group::Ordered,
        "RANGE lo hi [LIMIT n] [REV]: records in key order.",
    ),
    spec(
        "COUNT",
        3,
        &["readonly"],
        NONE,
        Group::Ordered,
        "COUNT lo hi: number of keys in [lo, hi].",
    ),
    spec(
        "SAMPLE",
        -4,
        &["readonly"],
        NONE,
        Group::Ordered,
        "SAMPLE lo hi k [SEED s]: k uniform samples of [lo, hi].",
    ),
];

/// The version reported to clients (HELLO, INFO): Redis-7-compatible commands.
pub const REDIS_VERSION: &str = "7.0.0";

fn command_info(c: &CommandSpec) -> Reply {
    Reply::Array(vec![
        Reply::text(c.name.to_ascii_lowercase()),
        Reply::Int(i64::from(c.arity)),
        Reply::Set(c.flags.iter().map(|f| Reply::Status((*f).into())).collect()),
        Reply::Int(c.first_key),
        Reply::Int(c.last_key),
        Reply::Int(c.step),
        Reply::Array(Vec::new()),
        Reply::Array(Vec::new()),
        Reply::Array(Vec::new()),
        Reply::Array(Vec::new()),
    ])
}

fn mode_name(shared: &Shared) -> &'static str {
    if shared.cluster.is_some() {
        "cluster"
    } else {
        "standalone"
    }
}

fn hello_map(shared: &Shared, session: &Session) -> Reply {
    Reply::Map(vec![
        (Reply::text("server"), Reply::text("strata")),
        (Reply::text("version"), Reply::text(REDIS_VERSION)),
        (
            Reply::text("proto"),
            Reply::Int(if session.proto == Protocol::Resp3 {
                3
            } else {
                2
            }),
        ),
        (Reply::text("id"), Reply::Int(session.id as i64)),
        (Reply::text("mode"), Reply::text(mode_name(shared))),
        (Reply::text("role"), Reply::text("master")),
        (Reply::text("modules"), Reply::Array(Vec::new())),
    ])
}

fn check_password(shared: &Shared, password: &[u8]) -> bool {
    match &shared.settings.requirepass {
        // Compared in full whatever the first difference, so timing does not leak the prefix.
        Some(p) => {
            p.len() == password.len()
                && p.as_bytes()
                    .iter()
                    .zip(password)
                    .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                    == 0
        }
        None => false,
    }
}

pub(super) fn plan(
    shared: &Shared,
    session: &mut Session,
    spec: &CommandSpec,
    args: &[Bytes],
) -> Plan {
    Plan::Now(reply(shared, session, spec, args))
}

fn reply(shared: &Shared, session: &mut Session, spec: &CommandSpec, args: &[Bytes]) -> Reply {
    let arg = |i: usize| args.get(i).map_or(&b""[..], |b| &b[..]);
    match spec.name {
        "PING" => match args.len() {
            1 => Reply::Status("PONG".into()),
            2 => Reply::Bulk(args[1].clone()),
            _ => Reply::err("wrong number of arguments for 'ping' command"),
        },
        "ECHO" => Reply::Bulk(args[1].clone()),
        "QUIT" => {
            session.quit = true;
            Reply::Ok
        }
        "SELECT" => match arg(1) {
            b"0" => Reply::Ok,
            _ => Reply::err("DB index is out of range"),
        },
        "AUTH" => {
            let password = match args.len() {
                2 => arg(1),
                // AUTH username password: the only user is "default".
                3 if arg(1) == b"default" => arg(2),
                3 => {
                    return Reply::Error(
                        "WRONGPASS invalid username-password pair or user is disabled.".into(),
                    );
                }
                _ => return Reply::err("syntax error"),
            };
            if shared.settings.requirepass.is_none() {
                return Reply::err(
                    "AUTH <password> called without any password configured for the default user. Are you \
                     sure your configuration is correct?",
                );
            }
            if check_password(shared, password) {
                session.authenticated = true;
                Reply::Ok
            } else {
                Reply::Error("WRONGPASS invalid username-password pair or user is disabled.".into())
            }
        }
        "HELLO" => {
            let mut proto = session.proto;
            let mut i = 1;
            if args.len() > 1 {
                match arg(1) {
                    b"2" => proto = Protocol::Resp2,
                    b"3" => proto = Protocol::Resp3,
                    _ => {
                        return Reply::Error("NOPROTO unsupported protocol version".into());
                    }
                }
                i = 2;
            }
            let mut name = None;
            while i < args.len() {
                if is(arg(i), "AUTH") && i + 2 < args.len() {
                    if arg(i + 1) != b"default" || !check_password(shared, arg(i + 2)) {
                        return Reply::Error(
                            "WRONGPASS invalid username-password pair or user is disabled.".into(),
                        );
                    }
                    session.authenticated = true;
                    i += 3;
                } else if is(arg(i), "SETNAME") && i + 1 < args.len() {
                    name = Some(args[i + 1].clone());
                    i += 2;
                } else {
                    return Reply::err("syntax error");
                }
            }
            if !session.authenticated {
                return Reply::Error("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time".into());
            }
            session.proto = proto;
            if name.is_some() {
                session.name = name;
            }
            hello_map(shared, session)
        }
        "CLIENT" => {
            let sub = String::from_utf8_lossy(arg(1)).to_ascii_uppercase();
            match (sub.as_str(), args.len()) {
                ("ID", 2) => Reply::Int(session.id as i64),
                ("SETNAME", 3) => {
                    if arg(2).iter().any(|&b| b <= b' ' || b > b'~') {
                        return Reply::err(
                            "Client names cannot contain spaces, newlines or special characters.",
                        );
                    }
                    session.name = Some(args[2].clone()).filter(|n| !n.is_empty());
                    Reply::Ok
                }
                ("GETNAME", 2) => session.name.clone().map_or(Reply::Null, Reply::Bulk),
                ("SETINFO", 4) => Reply::Ok,
                ("INFO", 2) => Reply::text(format!(
                    "id={} addr={} name={} db=0 resp={}\n",
                    session.id,
                    session.peer,
                    session
                        .name
                        .as_ref()
                        .map(|n| String::from_utf8_lossy(n).into_owned())
                        .unwrap_or_default(),
                    if session.proto == Protocol::Resp3 {
                        3
                    } else {
                        2
                    }
                )),
                _ => Reply::err(format!(
                    "unknown subcommand '{}'. Try CLIENT HELP.",
                    String::from_utf8_lossy(arg(1))
                )),
            }
        }
        "COMMAND" => {
            let sub = String::from_utf8_lossy(arg(1)).to_ascii_uppercase();
            match sub.as_str() {
                "" => Reply::Array(COMMANDS.iter().map(command_info).collect()),
                "COUNT" => Reply::Int(COMMANDS.len() as i64),
                "LIST" => Reply::Array(
                    COMMANDS
                        .iter()
                        .map(|c| Reply::text(c.name.to_ascii_lowercase()))
                        .collect(),
                ),
                "INFO" => Reply::Array(
                    args[2..]
                        .iter()
                        .map(|n| {
                            let n = String::from_utf8_lossy(n).to_ascii_uppercase();
                            COMMANDS
                                .iter()
                                .find(|c| c.name == n)
                                .map_or(Reply::NullArray, command_info)
                        })
                        .collect(),
                ),
                "DOCS" => {
                    let wanted: Vec<String> = args[2..]
                        .iter()
                        .map(|n| String::from_utf8_lossy(n).to_ascii_uppercase())
                        .collect();
                    Reply::Map(
                        COMMANDS
                            .iter()
                            .filter(|c| wanted.is_empty() || wanted.iter().any(|w| w == c.name))
                            .map(|c| {
                                (
                                    Reply::text(c.name.to_ascii_lowercase()),
                                    Reply::Map(vec![
                                        (Reply::text("summary"), Reply::text(c.summary)),
                                        (Reply::text("since"), Reply::text("1.0.0")),
                                        (Reply::text("group"), Reply::text("generic")),
                                    ]),
                                )
                            })
                            .collect(),
                    )
                }
                _ => Reply::err(format!(
                    "unknown subcommand '{}'. Try COMMAND HELP.",
                    String::from_utf8_lossy(arg(1))
                )),
            }
        }
        "CONFIG" => {
            let sub = String::from_utf8_lossy(arg(1)).to_ascii_uppercase();
            match (sub.as_str(), args.len()) {
                ("GET", n) if n >= 3 => {
                    let params = config_params(shared);
                    let mut out = Vec::new();
                    for pattern in &args[2..] {
                        let pattern = pattern.to_ascii_lowercase();
                        for (k, v) in &params {
                            if super::glob::matches(&pattern, k.as_bytes())
                                && !out
                                    .iter()
                                    .any(|(kk, _): &(Reply, Reply)| kk == &Reply::text(*k))
                            {
                                out.push((Reply::text(*k), Reply::text(v.clone())));
                            }
                        }
                    }
                    Reply::Map(out)
                }
                ("SET", _) | ("RESETSTAT", _) | ("REWRITE", _) => Reply::err(
                    "CONFIG SET is not supported: settings are fixed by the command line",
                ),
                _ => Reply::err(format!(
                    "unknown subcommand or wrong number of arguments for '{}'. Try CONFIG HELP.",
                    String::from_utf8_lossy(arg(1))
                )),
            }
        }
        "INFO" => Reply::text(info(shared, args.get(1).map(|s| s.to_ascii_lowercase()))),
        "ASKING" => {
            if shared.cluster.is_none() {
                return Reply::err("This instance has cluster support disabled");
            }
            session.asking = true;
            Reply::Ok
        }
        "READONLY" | "READWRITE" => Reply::Ok,
        "CLUSTER" => {
            let Some(cluster) = &shared.cluster else {
                return Reply::err("This instance has cluster support disabled");
            };
            let sub = String::from_utf8_lossy(arg(1)).to_ascii_uppercase();
            match (sub.as_str(), args.len()) {
                ("SLOTS", 2) => cluster.slots_reply(),
                ("SHARDS", 2) => cluster.shards_reply(),
                ("NODES", 2) => Reply::text(cluster.nodes_text()),
                ("MYID", 2) => Reply::text(cluster.my_id()),
                ("INFO", 2) => Reply::text(cluster.info_text()),
                ("KEYSLOT", 3) => Reply::Int(i64::from(crate::cluster::key_slot(arg(2)))),
                _ => Reply::err(format!(
                    "unknown subcommand or wrong number of arguments for '{}'. Try CLUSTER HELP.",
                    String::from_utf8_lossy(arg(1))
                )),
            }
        }
        _ => Reply::err("unknown command"),
    }
}

fn config_params(shared: &Shared) -> Vec<(&'static str, String)> {
    let s = &shared.settings;
    vec![
        ("bind", s.bind.clone()),
        ("port", s.port.to_string()),
        ("maxclients", s.max_clients.to_string()),
        (
            "timeout",
            s.idle_timeout.map_or(0, |d| d.as_secs()).to_string(),
        ),
        ("databases", "1".into()),
        ("save", String::new()),
        (
            "appendonly",
            if shared.store.durability() == Durability::None {
                "no"
            } else {
                "yes"
            }
            .into(),
        ),
        (
            "appendfsync",
            match shared.store.durability() {
                Durability::Sync => "always",
                Durability::Flush => "no",
                Durability::None => "no",
            }
            .into(),
        ),
        ("proto-max-bulk-len", s.limits.max_bulk.to_string()),
        ("client-query-buffer-limit", s.max_query_buffer.to_string()),
        (
            "cluster-enabled",
            if shared.cluster.is_some() {
                "yes"
            } else {
                "no"
            }
            .into(),
        ),
    ]
}

/// The INFO text: sections server, clients, stats, persistence, keyspace and partitions.
fn info(shared: &Shared, section: Option<Vec<u8>>) -> String {
    use std::fmt::Write;
    let want = |name: &str| match &section {
        None => true,
        Some(s) => s == b"all" || s == b"everything" || s == b"default" || s == name.as_bytes(),
    };
    let store = &shared.store;
    let mut out = String::new();
    let s = &shared.settings;
    if want("server") {
        let _ = write!(
            out,
            "# Server\r\nredis_version:{REDIS_VERSION}\r\nstrata_version:{}\r\nredis_mode:{}\r\nos:{}\r\n\
             process_id:{}\r\ntcp_port:{}\r\nuptime_in_seconds:{}\r\n\r\n",
            env!("CARGO_PKG_VERSION"),
            mode_name(shared),
            std::env::consts::OS,
            std::process::id(),
            s.port,
            shared.started.elapsed().as_secs()
        );
    }
    if want("clients") {
        let per_loop = shared.net.connections();
        let _ = write!(
            out,
            "# Clients\r\nconnected_clients:{}\r\nmaxclients:{}\r\nio_threads:{}\r\nio_placement:{}\r\n\
             io_threads_serving:{}\r\nio_connections:{}\r\nio_connection_moves:{}\r\n\r\n",
            shared.clients.load(Ordering::Relaxed),
            s.max_clients,
            per_loop.len(),
            match shared.net.placement() {
                crate::net_loops::Placement::FollowLoad => "follow-load",
                crate::net_loops::Placement::RoundRobin => "round-robin",
            },
            per_loop.iter().filter(|&&c| c > 0).count(),
            per_loop
                .iter()
                .map(|c| c.to_string())
                .collect::<Vec<_>>()
                .join(","),
            shared.net.moves()
        );
    }
    let ops = store.ops_per_partition();
    if want("stats") {
        let max = ops.iter().copied().max().unwrap_or(0);
        let min = ops.iter().copied().min().unwrap_or(0);
        let total: u64 = ops.iter().sum();
        let _ = write!(
            out,
            "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\n\
             rejected_connections:{}\r\npartition_ops_total:{total}\r\npartition_ops_max:{max}\r\n\
             partition_ops_min:{min}\r\nimbalance_ratio:{}\r\nturn_read_batches:{}\r\n\
             turn_batched_reads:{}\r\n\r\n",
            shared.total_connections.load(Ordering::Relaxed),
            shared.total_commands.load(Ordering::Relaxed),
            shared.rejected_connections.load(Ordering::Relaxed),
            if min == 0 {
                "inf".to_string()
            } else {
                format!("{:.3}", max as f64 / min as f64)
            },
            shared.turn_read_batches.load(Ordering::Relaxed),
            shared.turn_batched_reads.load(Ordering::Relaxed),
        );
    }
    if want("persistence") {
        let commits: u64 = (0..store.partitions())
            .filter_map(|p| store.counters(p))
            .map(|c| c.commits.load(Ordering::Relaxed))
            .sum();
        let _ = write!(
            out,
            "# Persistence\r\nloading:0\r\ndurability:{}\r\naof_enabled:{}\r\ngroup_commits:{commits}\r\n\
             dir:{}\r\n\r\n",
            format!("{:?}", store.durability()).to_lowercase(),
            u8::from(store.durability() != Durability::None),
            store.dir().display()
        );
    }
    if want("keyspace") {
        let keys: u64 = (0..store.partitions())
            .filter_map(|p| store.db(p))
            .map(|db| db.len())
            .sum();
        let _ = write!(
            out,
            "# Keyspace\r\ndb0:keys={keys},expires=0,avg_ttl=0\r\n\r\n"
        );
    }
    if want("cluster") {
        let _ = write!(
            out,
            "# Cluster\r\ncluster_enabled:{}\r\n\r\n",
            u8::from(shared.cluster.is_some())
        );
    }
    if want("cache")
        && let Some(cache) = store.cache()
    {
        let c = &cache.counters;
        let _ = write!(
            out,
            "# Cache\r\ncache_entries:{}\r\ncache_capacity:{}\r\ncache_hits:{}\r\ncache_populations:{}\r\n\
             cache_evictions:{}\r\n\r\n",
            cache.len(),
            cache.config().capacity,
            c.hits.load(Ordering::Relaxed),
            c.populations.load(Ordering::Relaxed),
            c.evictions.load(Ordering::Relaxed),
        );
    }
    if want("partitions") {
        let layout = store.layout();
        let kind = match layout.partitioning {
            crate::store::Partitioning::Hash => "hash",
            crate::store::Partitioning::Range { .. } => "range",
        };
        let _ = write!(
            out,
            "# Partitions\r\npartitions:{}\r\npartitioning:{kind}\r\nindex:{}\r\n",
            store.partitions(),
            layout.index
        );
        for (p, n) in ops.iter().enumerate() {
            let writes = store
                .counters(p)
                .map_or(0, |c| c.writes.load(Ordering::Relaxed));
            let keys = store.db(p).map_or(0, |db| db.len());
            let write_backs = store
                .counters(p)
                .map_or(0, |c| c.write_backs.load(Ordering::Relaxed));
            let _ = write!(
                out,
                "p{p}:ops={n},writes={writes},keys={keys},cache_write_backs={write_backs}\r\n"
            );
        }
        out.push_str("\r\n");
    }
    out
}
