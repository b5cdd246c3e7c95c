//! String commands on single keys and key lists: GET, SET (NX/XX/GET), SETNX, GETSET, DEL, UNLINK, EXISTS,
//! MGET, MSET, INCR/INCRBY/DECR/DECRBY, APPEND, STRLEN.
//!
//! Keys (and, in u64 mode, values) are encoded here ([`KeyMode::encode`]); a key the mode cannot take, or one
//! longer than the index allows, is an error reply for that command only.

use super::admin::CommandSpec;
use super::{Finish, Plan, RoutedOps, Shared, int_arg, is};
use crate::resp::Reply;
use crate::store::{KeyMode, Op, SetCondition};
use bytes::Bytes;

/// Encodes a client key, or the error reply for it.
pub fn encode_key(shared: &Shared, key: &[u8]) -> Result<Vec<u8>, Reply> {
    let mode = shared.store.layout().key_mode;
    let encoded = mode.encode(key).ok_or_else(|| match mode {
        KeyMode::U64 => Reply::err(
            "keys of this server's dynamized index are decimal integers from 0 to 18446744073709551615",
        ),
        KeyMode::Bytes => Reply::err("invalid key"),
    })?;
    let max = shared.store.max_key_len();
    if encoded.len() > max {
        return Err(Reply::err(format!(
            "key of {} bytes is longer than the index's limit of {max} bytes",
            encoded.len()
        )));
    }
    Ok(encoded)
}

/// Encodes a client value, or the error reply for it.
fn encode_value(shared: &Shared, value: &[u8]) -> Result<Vec<u8>, Reply> {
    let mode = shared.store.layout().key_mode;
    let encoded = mode.encode(value).ok_or_else(|| {
        Reply::err(
            "values of this server's dynamized index are decimal integers from 0 to 18446744073709551615",
        )
    })?;
    if encoded.len() > strata::MAX_VALUE_LEN {
        return Err(Reply::err(format!(
            "value of {} bytes exceeds the limit of {} bytes",
            encoded.len(),
            strata::MAX_VALUE_LEN
        )));
    }
    Ok(encoded)
}

/// One operation on the partition of `key`.
fn on_key(shared: &Shared, key: &[u8], op: impl FnOnce(Vec<u8>) -> Op, finish: Finish) -> Plan {
    match encode_key(shared, key) {
        Ok(k) => Plan::Routed {
            ops: smallvec::smallvec![(shared.store.route(&k), op(k))],
            finish,
        },
        Err(e) => Plan::Now(e),
    }
}

/// One operation per key, each on its key's partition.
fn on_keys(shared: &Shared, keys: &[Bytes], op: impl Fn(Vec<u8>) -> Op, finish: Finish) -> Plan {
    let mut ops = RoutedOps::with_capacity(keys.len());
    for key in keys {
        match encode_key(shared, key) {
            Ok(k) => ops.push((shared.store.route(&k), op(k))),
            Err(e) => return Plan::Now(e),
        }
    }
    Plan::Routed { ops, finish }
}

fn set(shared: &Shared, key: &[u8], value: &[u8], condition: SetCondition, get_old: bool) -> Plan {
    let value = match encode_value(shared, value) {
        Ok(v) => v,
        Err(e) => return Plan::Now(e),
    };
    let finish = if get_old {
        Finish::OldValue
    } else {
        Finish::SetOk
    };
    on_key(
        shared,
        key,
        |key| Op::Set {
            key,
            value,
            condition,
            get_old,
        },
        finish,
    )
}

fn incr(shared: &Shared, key: &[u8], by: i64) -> Plan {
    let u64_values = shared.store.layout().key_mode == KeyMode::U64;
    on_key(
        shared,
        key,
        |key| Op::Incr {
            key,
            by,
            u64_values,
        },
        Finish::Int,
    )
}

pub(super) fn plan(shared: &Shared, spec: &CommandSpec, args: &[Bytes]) -> Plan {
    let a = |i: usize| args.get(i).map_or(&b""[..], |b| &b[..]);
    match spec.name {
        "GET" => on_key(shared, a(1), Op::Get, Finish::Value),
        "SET" => {
            let mut condition = SetCondition::Always;
            let mut get_old = false;
            for opt in &args[3..] {
                if is(opt, "NX") && condition == SetCondition::Always {
                    condition = SetCondition::IfAbsent;
                } else if is(opt, "XX") && condition == SetCondition::Always {
                    condition = SetCondition::IfPresent;
                } else if is(opt, "GET") {
                    get_old = true;
                } else {
                    // EX/PX/KEEPTTL and the rest: keys never expire here.
                    return Plan::Now(Reply::err("syntax error"));
                }
            }
            set(shared, a(1), a(2), condition, get_old)
        }
        "SETNX" => {
            let value = match encode_value(shared, a(2)) {
                Ok(v) => v,
                Err(e) => return Plan::Now(e),
            };
            on_key(
                shared,
                a(1),
                |key| Op::Set {
                    key,
                    value,
                    condition: SetCondition::IfAbsent,
                    get_old: false,
                },
                Finish::Bool,
            )
        }
        "GETSET" => set(shared, a(1), a(2), SetCondition::Always, true),
        "DEL" | "UNLINK" => on_keys(shared, &args[1..], Op::Del, Finish::CountTrue),
        "EXISTS" => on_keys(shared, &args[1..], Op::Exists, Finish::CountTrue),
        "MGET" => on_keys(shared, &args[1..], Op::Get, Finish::Values),
        "MSET" => {
            if args.len().is_multiple_of(2) {
                return super::wrong_arity("MSET");
            }
            let mut ops = RoutedOps::with_capacity(args.len() / 2);
            for pair in args[1..].chunks(2) {
                let (key, value) =
                    match (encode_key(shared, &pair[0]), encode_value(shared, &pair[1])) {
                        (Ok(k), Ok(v)) => (k, v),
                        (Err(e), _) | (_, Err(e)) => return Plan::Now(e),
                    };
                ops.push((
                    shared.store.route(&key),
                    Op::Set {
                        key,
                        value,
                        condition: SetCondition::Always,
                        get_old: false,
                    },
                ));
            }
            Plan::Routed {
                ops,
                finish: Finish::AllOk,
            }
        }
        "INCR" => incr(shared, a(1), 1),
        "DECR" => incr(shared, a(1), -1),
        "INCRBY" | "DECRBY" => match int_arg(a(2)) {
            Ok(by) if spec.name == "INCRBY" => incr(shared, a(1), by),
            Ok(by) => match by.checked_neg() {
                Some(neg) => incr(shared, a(1), neg),
                None => Plan::Now(Reply::err("decrement would overflow")),
            },
            Err(e) => Plan::Now(e),
        },
        "APPEND" => {
            if shared.store.layout().key_mode == KeyMode::U64 {
                return Plan::Now(Reply::err(
                    "APPEND needs string values; this server's dynamized index stores integers",
                ));
            }
            let value = a(2).to_vec();
            on_key(shared, a(1), |key| Op::Append { key, value }, Finish::Int)
        }
        "STRLEN" => on_key(shared, a(1), Op::Get, Finish::Strlen),
        _ => super::unknown_command(args),
    }
}
