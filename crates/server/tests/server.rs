//! The server through a real client library (the `redis` crate, sync and async, RESP2 and RESP3) and raw
//! sockets, on an ephemeral loopback port.
#![allow(clippy::unwrap_used)]

use redis::{Commands, RedisResult, Value};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;
use strata::{Durability, IndexConfig, IndexKind};
use strata_server::{Partitioning, RunningServer, ServerConfig, ServerSettings, StoreConfig};

struct TestServer {
    server: Option<RunningServer>,
    _dir: tempfile::TempDir,
}

impl TestServer {
    fn url(&self) -> String {
        format!("redis://{}", self.server.as_ref().unwrap().addr())
    }
    fn addr(&self) -> std::net::SocketAddr {
        self.server.as_ref().unwrap().addr()
    }
    fn client(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .unwrap()
            .get_connection()
            .unwrap()
    }
}

fn start_with(
    partitions: usize,
    partitioning: Partitioning,
    kind: IndexKind,
    edit: impl FnOnce(&mut ServerSettings),
) -> TestServer {
    start_configured(partitions, partitioning, kind, edit, |_| {})
}

fn start_configured(
    partitions: usize,
    partitioning: Partitioning,
    kind: IndexKind,
    edit: impl FnOnce(&mut ServerSettings),
    edit_store: impl FnOnce(&mut StoreConfig),
) -> TestServer {
    let dir = tempfile::tempdir().unwrap();
    let mut settings = ServerSettings {
        port: 0,
        ..ServerSettings::default()
    };
    edit(&mut settings);
    let mut store = StoreConfig {
        dir: dir.path().join("srv"),
        partitions,
        partitioning,
        index: kind.default_config(),
        durability: Durability::Flush,
        cache_bytes: 8 << 20,
        hot_cache: None,
        partition_capacity: None,
    };
    edit_store(&mut store);
    let server = strata_server::start(ServerConfig {
        settings,
        store,
        io_threads: 2,
        placement: Default::default(),
    })
    .unwrap();
    TestServer {
        server: Some(server),
        _dir: dir,
    }
}

fn start(partitions: usize, partitioning: Partitioning) -> TestServer {
    start_with(partitions, partitioning, IndexKind::BTree, |_| {})
}

fn range() -> Partitioning {
    Partitioning::Range { splits: Vec::new() }
}

#[test]
fn string_commands_follow_redis() {
    for partitioning in [Partitioning::Hash, range()] {
        let srv = start(3, partitioning);
        let mut c = srv.client();
        let pong: String = redis::cmd("PING").query(&mut c).unwrap();
        assert_eq!(pong, "PONG");
        let echo: String = redis::cmd("ECHO").arg("hi").query(&mut c).unwrap();
        assert_eq!(echo, "hi");
        let _: () = c.set("k1", "v1").unwrap();
        assert_eq!(c.get::<_, String>("k1").unwrap(), "v1");
        assert_eq!(c.get::<_, Option<String>>("nope").unwrap(), None);
        // NX / XX / GET.
        let r: Option<String> = redis::cmd("SET")
            .arg("k1")
            .arg("x")
            .arg("NX")
            .query(&mut c)
            .unwrap();
        assert_eq!(r, None);
        let r: Option<String> = redis::cmd("SET")
            .arg("k2")
            .arg("x")
            .arg("XX")
            .query(&mut c)
            .unwrap();
        assert_eq!(r, None);
        let r: Option<String> = redis::cmd("SET")
            .arg("k1")
            .arg("v2")
            .arg("XX")
            .arg("GET")
            .query(&mut c)
            .unwrap();
        assert_eq!(r.as_deref(), Some("v1"));
        let old: Option<String> = c.getset("k1", "v3").unwrap();
        assert_eq!(old.as_deref(), Some("v2"));
        let set: bool = c.set_nx("k1", "zz").unwrap();
        assert!(!set);
        let e = redis::cmd("SET")
            .arg("k")
            .arg("v")
            .arg("EX")
            .arg("10")
            .query::<()>(&mut c);
        assert!(e.unwrap_err().to_string().contains("syntax error"));
        // Counters.
        assert_eq!(c.incr::<_, _, i64>("n", 1).unwrap(), 1);
        assert_eq!(c.incr::<_, _, i64>("n", 41).unwrap(), 42);
        assert_eq!(c.decr::<_, _, i64>("n", 50).unwrap(), -8);
        let e = c.incr::<_, _, i64>("k1", 1).unwrap_err();
        assert!(e.to_string().contains("not an integer"), "{e}");
        let _: () = c.set("big", i64::MAX).unwrap();
        let e = c.incr::<_, _, i64>("big", 1).unwrap_err();
        assert!(e.to_string().contains("overflow"), "{e}");
        // Strings.
        assert_eq!(c.append::<_, _, i64>("s", "ab").unwrap(), 2);
        assert_eq!(c.append::<_, _, i64>("s", "cd").unwrap(), 4);
        assert_eq!(c.strlen::<_, i64>("s").unwrap(), 4);
        assert_eq!(c.strlen::<_, i64>("none").unwrap(), 0);
        // Multi-key.
        let _: () = c.mset(&[("m1", "1"), ("m2", "2"), ("m3", "3")]).unwrap();
        let got: Vec<Option<String>> = c.mget(&["m1", "none", "m3"]).unwrap();
        assert_eq!(got, vec![Some("1".into()), None, Some("3".into())]);
        assert_eq!(c.exists::<_, i64>(&["m1", "m2", "none", "m1"]).unwrap(), 3);
        assert_eq!(c.del::<_, i64>(&["m1", "m2", "none"]).unwrap(), 2);
        assert_eq!(c.unlink::<_, i64>("m3").unwrap(), 1);
        assert_eq!(c.exists::<_, i64>("m3").unwrap(), 0);
        let n: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
        assert_eq!(n, 4, "k1 n big s and nothing else");
        // Errors.
        let e = redis::cmd("GET").query::<()>(&mut c).unwrap_err();
        assert!(
            e.to_string()
                .contains("wrong number of arguments for 'get'"),
            "{e}"
        );
        let e = redis::cmd("FROB").arg("x").query::<()>(&mut c).unwrap_err();
        assert!(e.to_string().contains("unknown command 'FROB'"), "{e}");
        let ok: String = redis::cmd("SELECT").arg(0).query(&mut c).unwrap();
        assert_eq!(ok, "OK");
        assert!(redis::cmd("SELECT").arg(1).query::<()>(&mut c).is_err());
    }
}

#[test]
fn binary_keys_and_values_round_trip() {
    let srv = start(4, range());
    let mut c = srv.client();
    let key: Vec<u8> = (0..=255u8).collect();
    let value: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
    let _: () = c.set(&key, &value).unwrap();
    assert_eq!(c.get::<_, Vec<u8>>(&key).unwrap(), value);
    let empty: Vec<u8> = Vec::new();
    let _: () = c.set("empty", &empty).unwrap();
    assert_eq!(c.get::<_, Vec<u8>>("empty").unwrap(), empty);
    // A value over the engine's limit is refused, the connection stays usable.
    let huge = vec![0u8; strata::MAX_VALUE_LEN + 1];
    assert!(c.set::<_, _, ()>("huge", &huge).is_err());
}

/// Partitions emulated as servers of fixed capacity: every operation (point reads too) is served and
/// counted by its partition, and a partition never serves faster than its capacity.
#[test]
fn emulated_partition_servers_keep_their_capacity() {
    let capacity = 2_000; // operations per second per partition
    let srv = start_configured(
        2,
        range(),
        IndexKind::BTree,
        |_| {},
        |s| s.partition_capacity = Some(capacity),
    );
    let mut c = srv.client();
    // 200 SETs and 200 GETs, all in partition 0 (keys below the split at 0x80...).
    let ops = 400;
    let began = std::time::Instant::now();
    let mut pipe = redis::pipe();
    for i in 0..ops / 2 {
        pipe.cmd("SET").arg(format!("k{i:04}")).arg(i).ignore();
    }
    for i in 0..ops / 2 {
        pipe.cmd("GET").arg(format!("k{i:04}"));
    }
    let got: Vec<u64> = pipe.query(&mut c).unwrap();
    let elapsed = began.elapsed();
    assert_eq!(got, (0..ops as u64 / 2).collect::<Vec<_>>());
    // 400 operations at 2,000/s take at least 200 ms.
    assert!(
        elapsed >= Duration::from_millis(200),
        "served in {elapsed:?}"
    );
    assert!(partition_ops(&mut c, 0) >= ops as u64);
    // Without emulation, point reads run on the connection's thread and still count for their partition
    // (the imbalance figures of INFO partitions include them).
    let free = start(2, range());
    let mut c = free.client();
    let _: () = c.set("k0000", 1).unwrap();
    for _ in 0..100 {
        assert_eq!(c.get::<_, u64>("k0000").unwrap(), 1);
    }
    assert!(partition_ops(&mut c, 0) >= 101);
}

/// Operations partition `p` ran, from INFO partitions.
fn partition_ops(c: &mut redis::Connection, p: usize) -> u64 {
    let info: String = redis::cmd("INFO").arg("partitions").query(c).unwrap();
    info.lines()
        .find(|l| l.starts_with(&format!("p{p}:")))
        .and_then(|l| {
            l.split("ops=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .unwrap_or_else(|| panic!("{info}"))
}

/// RANGE, COUNT and SCAN against a model, over hash and range partitions.
#[test]
fn ordered_commands_agree_with_a_model() {
    for partitioning in [Partitioning::Hash, range()] {
        let srv = start(4, partitioning);
        let mut c = srv.client();
        let mut model = BTreeMap::new();
        for i in 0..500u32 {
            // Spread the first bytes so even range splits put keys in every partition.
            let k = format!("{}{i:04}", (b'!' + (i * 37 % 90) as u8) as char);
            let v = format!("v{i}");
            let _: () = c.set(&k, &v).unwrap();
            model.insert(k, v);
        }
        let flat = |v: Vec<String>| -> Vec<(String, String)> {
            v.chunks(2).map(|p| (p[0].clone(), p[1].clone())).collect()
        };
        let all: Vec<String> = redis::cmd("RANGE")
            .arg("-")
            .arg("+")
            .arg("LIMIT")
            .arg(10_000)
            .query(&mut c)
            .unwrap();
        let expect: Vec<(String, String)> = model.clone().into_iter().collect();
        assert_eq!(flat(all), expect);
        let lo = "5";
        let hi = "Q";
        let got: Vec<String> = redis::cmd("RANGE")
            .arg(lo)
            .arg(hi)
            .arg("LIMIT")
            .arg(7)
            .arg("REV")
            .query(&mut c)
            .unwrap();
        let expect: Vec<(String, String)> = model
            .range(lo.to_string()..=hi.to_string())
            .rev()
            .take(7)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        assert_eq!(flat(got), expect);
        let n: u64 = redis::cmd("COUNT").arg(lo).arg(hi).query(&mut c).unwrap();
        assert_eq!(
            n as usize,
            model.range(lo.to_string()..=hi.to_string()).count()
        );
        let n: u64 = redis::cmd("COUNT").arg("z").arg("a").query(&mut c).unwrap();
        assert_eq!(n, 0);
        // SCAN through the client's iterator sees every key once.
        let mut seen: Vec<String> = c.scan().unwrap().map(Result::unwrap).collect();
        seen.sort();
        assert_eq!(seen, model.keys().cloned().collect::<Vec<_>>());
        let matched: Vec<String> = c.scan_match("A*").unwrap().map(Result::unwrap).collect();
        let expect: Vec<&String> = model.keys().filter(|k| k.starts_with('A')).collect();
        assert_eq!(matched.len(), expect.len());
        assert!(
            redis::cmd("SCAN")
                .arg(123456789)
                .query::<()>(&mut c)
                .is_err()
        );
    }
}

/// SAMPLE over ranges spanning partitions is uniform over the union (chi-square, fixed seeds).
#[test]
fn sample_is_uniform_across_partitions() {
    let srv = start(4, range());
    let mut c = srv.client();
    // 64 keys, unevenly spread: partition sizes differ a lot, which a per-partition split would show.
    let keys: Vec<Vec<u8>> = (0..64u8)
        .map(|i| {
            let first = if i < 48 { 0x10 } else { 0x10 + (i - 47) * 15 };
            vec![first, i]
        })
        .collect();
    for k in &keys {
        let _: () = c.set(k, k).unwrap();
    }
    let k = 64 * 400;
    let got: Vec<Vec<u8>> = redis::cmd("SAMPLE")
        .arg("-")
        .arg("+")
        .arg(k)
        .arg("SEED")
        .arg(7)
        .query(&mut c)
        .unwrap();
    assert_eq!(got.len(), 2 * k);
    let mut counts = BTreeMap::new();
    for pair in got.chunks(2) {
        assert_eq!(pair[0], pair[1], "a sample is a stored record");
        *counts.entry(pair[0].clone()).or_insert(0u32) += 1;
    }
    assert_eq!(counts.len(), 64);
    let expected = k as f64 / 64.0;
    let chi2: f64 = counts
        .values()
        .map(|&o| (o as f64 - expected).powi(2) / expected)
        .sum();
    // 63 degrees of freedom: P(chi2 > 130) < 1e-6.
    assert!(chi2 < 130.0, "chi-square {chi2}");
    // The same seed gives the same samples; a narrower range samples only inside it.
    let again: Vec<Vec<u8>> = redis::cmd("SAMPLE")
        .arg("-")
        .arg("+")
        .arg(k)
        .arg("SEED")
        .arg(7)
        .query(&mut c)
        .unwrap();
    assert_eq!(again, got);
    let inside: Vec<Vec<u8>> = redis::cmd("SAMPLE")
        .arg(&keys[10])
        .arg(&keys[50])
        .arg(200)
        .query(&mut c)
        .unwrap();
    assert!(
        inside
            .chunks(2)
            .all(|p| p[0] >= keys[10] && p[0] <= keys[50])
    );
    let none: Vec<Vec<u8>> = redis::cmd("SAMPLE")
        .arg("x")
        .arg("y")
        .arg(5)
        .query(&mut c)
        .unwrap();
    assert!(none.is_empty());
}

#[test]
fn families_that_cannot_sample_say_so() {
    let srv = start_with(2, Partitioning::Hash, IndexKind::BeTree, |_| {});
    let mut c = srv.client();
    let _: () = c.set("a", "1").unwrap();
    let e = redis::cmd("SAMPLE")
        .arg("-")
        .arg("+")
        .arg(3)
        .query::<()>(&mut c)
        .unwrap_err();
    assert!(e.to_string().contains("cannot sample"), "{e}");
    let n: u64 = redis::cmd("COUNT").arg("-").arg("+").query(&mut c).unwrap();
    assert_eq!(n, 1);
}

#[test]
fn the_dynamized_index_serves_integer_keys_and_samples() {
    let srv = start_with(2, range(), IndexKind::Dynamized, |_| {});
    let mut c = srv.client();
    for i in 0..100u64 {
        let _: () = c.set(i * 10, i).unwrap();
    }
    assert_eq!(c.get::<_, u64>(70).unwrap(), 7);
    assert_eq!(c.incr::<_, _, u64>(70, 5).unwrap(), 12);
    let e = c.set::<_, _, ()>("abc", 1).unwrap_err();
    assert!(e.to_string().contains("decimal integers"), "{e}");
    let e = c.set::<_, _, ()>(5, "x").unwrap_err();
    assert!(e.to_string().contains("decimal integers"), "{e}");
    let n: u64 = redis::cmd("COUNT").arg(100).arg(199).query(&mut c).unwrap();
    assert_eq!(n, 10);
    let s: Vec<u64> = redis::cmd("SAMPLE")
        .arg(100)
        .arg(199)
        .arg(50)
        .query(&mut c)
        .unwrap();
    assert!(
        s.chunks(2)
            .all(|p| (100..=199).contains(&p[0]) && p[1] == p[0] / 10)
    );
    let _: () = c.del(150).unwrap();
    let s: Vec<u64> = redis::cmd("SAMPLE")
        .arg(150)
        .arg(150)
        .arg(10)
        .query(&mut c)
        .unwrap();
    assert!(s.is_empty(), "a deleted record is never sampled");
}

#[test]
fn resp3_and_the_async_client() {
    let srv = start(2, Partitioning::Hash);
    let url = format!("{}?protocol=resp3", srv.url());
    let client = redis::Client::open(url).unwrap();
    let mut c = client.get_connection().unwrap();
    let _: () = c.set("a", "1").unwrap();
    let v: Value = redis::cmd("GET").arg("nope").query(&mut c).unwrap();
    assert_eq!(v, Value::Nil);
    let hello: Value = redis::cmd("HELLO").arg(3).query(&mut c).unwrap();
    assert!(matches!(hello, Value::Map(_)), "{hello:?}");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = redis::Client::open(srv.url()).unwrap();
        let mut a = client.get_multiplexed_async_connection().await.unwrap();
        let mut pipe = redis::pipe();
        for i in 0..200 {
            pipe.set(format!("p{i}"), i).ignore();
        }
        pipe.get("p7").get("p199").cmd("DBSIZE");
        let (x, y, n): (i64, i64, i64) = pipe.query_async(&mut a).await.unwrap();
        assert_eq!((x, y, n), (7, 199, 201));
    });
}

#[test]
fn auth_is_required_when_a_password_is_set() {
    let srv = start_with(1, Partitioning::Hash, IndexKind::BTree, |s| {
        s.requirepass = Some("s3cret".into());
    });
    let mut c = srv.client();
    let e = c.get::<_, Option<String>>("a").unwrap_err();
    assert!(e.to_string().contains("NOAUTH"), "{e}");
    let e = redis::cmd("AUTH")
        .arg("wrong")
        .query::<()>(&mut c)
        .unwrap_err();
    assert!(e.to_string().contains("WRONGPASS"), "{e}");
    let ok: String = redis::cmd("AUTH").arg("s3cret").query(&mut c).unwrap();
    assert_eq!(ok, "OK");
    let _: () = c.set("a", "1").unwrap();
    let url = srv.url().replace("redis://", "redis://default:s3cret@");
    let mut c2 = redis::Client::open(url).unwrap().get_connection().unwrap();
    assert_eq!(c2.get::<_, String>("a").unwrap(), "1");
}

/// Sends raw bytes and returns what the server answers until it closes or goes quiet.
fn raw(addr: std::net::SocketAddr, bytes: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    s.write_all(bytes).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
    out
}

#[test]
fn inline_pipelined_and_malformed_input() {
    let srv = start(2, Partitioning::Hash);
    let addr = srv.addr();
    assert_eq!(
        raw(addr, b"PING\r\nSET a 1\r\nGET a\r\nQUIT\r\nGET a\r\n"),
        b"+PONG\r\n+OK\r\n$1\r\n1\r\n+OK\r\n"
    );
    // A pipeline split at every byte still answers in order.
    let cmds = b"*3\r\n$3\r\nSET\r\n$1\r\nb\r\n$2\r\n22\r\n*2\r\n$3\r\nGET\r\n$1\r\nb\r\n";
    let mut s = TcpStream::connect(addr).unwrap();
    for &b in cmds.iter() {
        s.write_all(&[b]).unwrap();
    }
    let mut buf = [0u8; 13];
    s.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"+OK\r\n$2\r\n22\r\n");
    // Protocol errors answer and close; nothing before them is lost.
    let out = raw(addr, b"SET c 3\r\n*1\r\n$999999999999\r\n");
    assert_eq!(out, b"+OK\r\n-ERR Protocol error: invalid bulk length\r\n");
    let out = raw(addr, b"*2\r\n$3\r\nGET\r\n+x\r\n");
    assert!(
        out.starts_with(b"-ERR Protocol error"),
        "{}",
        String::from_utf8_lossy(&out)
    );
    let out = raw(addr, b"*99999999\r\n");
    assert!(out.starts_with(b"-ERR Protocol error: invalid multibulk length"));
    // A truncated frame followed by the client going away is harmless.
    let _ = raw(addr, b"*2\r\n$3\r\nGET\r\n$10\r\nabc");
    let mut c = srv.client();
    assert_eq!(c.get::<_, String>("c").unwrap(), "3");
    // An oversized inline line.
    let long = vec![b'a'; 70 << 10];
    let out = raw(addr, &long);
    assert!(out.starts_with(b"-ERR Protocol error: too big inline request"));
}

#[test]
fn many_connections_open_and_close() {
    let srv = start(2, Partitioning::Hash);
    let addr = srv.addr();
    let n = std::env::var("STRATA_SERVER_CONNECTIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    for i in 0..n {
        let mut s = TcpStream::connect(addr).unwrap();
        if i % 100 == 0 {
            s.write_all(b"PING\r\n").unwrap();
            let mut buf = [0u8; 7];
            s.read_exact(&mut buf).unwrap();
            assert_eq!(&buf, b"+PONG\r\n");
        }
    }
    let mut c = srv.client();
    let info: String = redis::cmd("INFO").arg("stats").query(&mut c).unwrap();
    let total: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("total_connections_received:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(total > n as u64, "{info}");
}

#[test]
fn maxclients_refuses_extra_connections() {
    let srv = start_with(1, Partitioning::Hash, IndexKind::BTree, |s| {
        s.max_clients = 2
    });
    let _a = srv.client();
    let _b = srv.client();
    let out = raw(srv.addr(), b"PING\r\n");
    assert_eq!(out, b"-ERR max number of clients reached\r\n");
}

#[test]
fn data_survives_a_restart_and_the_layout_is_enforced() -> RedisResult<()> {
    let dir = tempfile::tempdir().unwrap();
    let config = |partitions| ServerConfig {
        settings: ServerSettings {
            port: 0,
            ..ServerSettings::default()
        },
        store: StoreConfig {
            dir: dir.path().join("srv"),
            partitions,
            partitioning: Partitioning::Hash,
            index: IndexConfig::default(),
            durability: Durability::Flush,
            cache_bytes: 8 << 20,
            hot_cache: None,
            partition_capacity: None,
        },
        io_threads: 1,
        placement: Default::default(),
    };
    let srv = strata_server::start(config(3)).unwrap();
    let mut c = redis::Client::open(format!("redis://{}", srv.addr()))?.get_connection()?;
    for i in 0..300 {
        let _: () = c.set(format!("k{i}"), i)?;
    }
    drop(c);
    srv.shutdown().unwrap();
    let e = strata_server::start(config(4)).err().unwrap();
    assert!(e.to_string().contains("same"), "{e}");
    let srv = strata_server::start(config(3)).unwrap();
    let mut c = redis::Client::open(format!("redis://{}", srv.addr()))?.get_connection()?;
    for i in 0..300 {
        assert_eq!(c.get::<_, i64>(format!("k{i}"))?, i);
    }
    Ok(())
}

#[test]
fn tools_handshakes_work() {
    let srv = start(2, Partitioning::Hash);
    let mut c = srv.client();
    let docs: Value = redis::cmd("COMMAND").arg("DOCS").query(&mut c).unwrap();
    assert!(matches!(docs, Value::Array(_) | Value::Map(_)));
    let count: i64 = redis::cmd("COMMAND").arg("COUNT").query(&mut c).unwrap();
    assert!(count > 20);
    let cfg: BTreeMap<String, String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("appendonly")
        .query(&mut c)
        .unwrap();
    assert_eq!(cfg.get("appendonly").map(String::as_str), Some("yes"));
    let cfg: BTreeMap<String, String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("*")
        .query(&mut c)
        .unwrap();
    assert!(cfg.contains_key("save") && cfg.contains_key("maxclients"));
    let _: () = redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg("me")
        .query(&mut c)
        .unwrap();
    let name: String = redis::cmd("CLIENT").arg("GETNAME").query(&mut c).unwrap();
    assert_eq!(name, "me");
    let id: i64 = redis::cmd("CLIENT").arg("ID").query(&mut c).unwrap();
    assert!(id > 0);
    let info: String = redis::cmd("INFO").query(&mut c).unwrap();
    for section in [
        "# Server",
        "# Clients",
        "# Stats",
        "# Persistence",
        "# Keyspace",
        "# Partitions",
    ] {
        assert!(info.contains(section), "{section} missing in {info}");
    }
}

fn start_cached(
    dir: &std::path::Path,
    capacity: usize,
    partitioning: Partitioning,
) -> RunningServer {
    strata_server::start(ServerConfig {
        settings: ServerSettings {
            port: 0,
            ..ServerSettings::default()
        },
        store: StoreConfig {
            dir: dir.join("srv"),
            partitions: 3,
            partitioning,
            index: IndexConfig::default(),
            durability: Durability::Flush,
            cache_bytes: 8 << 20,
            hot_cache: Some(strata_server::cache::CacheConfig {
                capacity,
                max_value: 16,
                hot_threshold: 2,
                snapshot_interval: Duration::from_millis(50),
            }),
            partition_capacity: None,
        },
        io_threads: 2,
        placement: Default::default(),
    })
    .unwrap()
}

/// Random operations on a few hot keys, with a tiny cache (populations, evictions, snapshots and values
/// growing past the cache's limit all happen), against a model; then a restart.
#[test]
fn the_hot_key_cache_agrees_with_a_model_across_restarts() {
    for partitioning in [Partitioning::Hash, range()] {
        cache_model_run(partitioning);
    }
}

fn cache_model_run(partitioning: Partitioning) {
    use rand::{Rng, SeedableRng};
    let dir = tempfile::tempdir().unwrap();
    let mut model: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
    for round in 0..3 {
        let srv = start_cached(dir.path(), 6, partitioning.clone());
        let url = format!("redis://{}", srv.addr());
        let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
        for step in 0..3000 {
            // Skewed: most operations on a few keys.
            let k = if rng.random_bool(0.8) {
                format!("hot{}", rng.random_range(0..4))
            } else {
                format!("cold{}", rng.random_range(0..40))
            };
            match rng.random_range(0..10) {
                0..=3 => {
                    let got: Option<Vec<u8>> = c.get(&k).unwrap();
                    assert_eq!(
                        got.as_ref(),
                        model.get(&k),
                        "GET {k} at round {round} step {step}"
                    );
                }
                4..=5 => {
                    let v = format!("{step}").into_bytes();
                    let _: () = c.set(&k, &v).unwrap();
                    model.insert(k, v);
                }
                6 => {
                    let n: i64 = c.del(&k).unwrap();
                    assert_eq!(n, i64::from(model.remove(&k).is_some()));
                }
                7 => {
                    let r: RedisResult<i64> = c.incr(&k, 3);
                    let expect = match model.get(&k) {
                        None => Some(3),
                        Some(v) => std::str::from_utf8(v)
                            .ok()
                            .and_then(|s| s.parse::<i64>().ok())
                            .map(|n| n + 3),
                    };
                    match expect {
                        Some(n) => {
                            assert_eq!(r.unwrap(), n);
                            model.insert(k, n.to_string().into_bytes());
                        }
                        None => assert!(r.is_err()),
                    }
                }
                8 => {
                    // Appends push values past the cache's 16-byte limit now and then.
                    let n: i64 = c.append(&k, "xy").unwrap();
                    let v = model.entry(k).or_default();
                    v.extend_from_slice(b"xy");
                    assert_eq!(n as usize, v.len());
                }
                _ => {
                    let all: Vec<Vec<u8>> = redis::cmd("RANGE")
                        .arg("-")
                        .arg("+")
                        .arg("LIMIT")
                        .arg(1000)
                        .query(&mut c)
                        .unwrap();
                    let got: Vec<(Vec<u8>, Vec<u8>)> = all
                        .chunks(2)
                        .map(|p| (p[0].clone(), p[1].clone()))
                        .collect();
                    let expect: Vec<(Vec<u8>, Vec<u8>)> = model
                        .iter()
                        .map(|(k, v)| (k.clone().into_bytes(), v.clone()))
                        .collect();
                    assert_eq!(got, expect, "RANGE at round {round} step {step}");
                }
            }
        }
        let info: String = redis::cmd("INFO").arg("cache").query(&mut c).unwrap();
        let field = |name: &str| -> u64 {
            info.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().parse().ok())
                .unwrap()
        };
        assert!(field("cache_hits:") > 500, "{info}");
        assert!(field("cache_evictions:") > 0, "{info}");
        drop(c);
        srv.shutdown().unwrap();
    }
}

/// Pipelines of mixed reads and writes on a few keys, with and without the hot-key cache, against a model
/// applied in pipeline order: a pipeline's point reads are answered in batches per partition, and a read
/// must still see exactly the writes that come before it in its pipeline (and none after).
#[test]
fn pipelines_of_mixed_commands_agree_with_a_model() {
    use rand::{Rng, SeedableRng};
    let cached_dir = tempfile::tempdir().unwrap();
    let cached = start_cached(cached_dir.path(), 6, Partitioning::Hash);
    let plain = start(3, range());
    for addr in [cached.addr(), plain.addr()] {
        let mut c = redis::Client::open(format!("redis://{addr}"))
            .unwrap()
            .get_connection()
            .unwrap();
        let mut model: BTreeMap<String, Vec<u8>> = BTreeMap::new();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        for step in 0..400 {
            let mut pipe = redis::pipe();
            let mut expect: Vec<Value> = Vec::new();
            for i in 0..rng.random_range(1..40) {
                let k = if rng.random_bool(0.7) {
                    format!("hot{}", rng.random_range(0..4))
                } else {
                    format!("k{:03}", rng.random_range(0..60))
                };
                match rng.random_range(0..10) {
                    0..=4 => {
                        pipe.get(&k);
                        expect.push(
                            model
                                .get(&k)
                                .map_or(Value::Nil, |v| Value::BulkString(v.clone())),
                        );
                    }
                    5 => {
                        pipe.exists(&k);
                        expect.push(Value::Int(i64::from(model.contains_key(&k))));
                    }
                    6..=7 => {
                        let v = format!("{step}.{i}").into_bytes();
                        pipe.set(&k, &v);
                        model.insert(k, v);
                        expect.push(Value::Okay);
                    }
                    8 => {
                        pipe.del(&k);
                        expect.push(Value::Int(i64::from(model.remove(&k).is_some())));
                    }
                    _ => {
                        let k2 = format!("k{:03}", rng.random_range(0..60));
                        pipe.mget(&[&k, &k2]);
                        expect.push(Value::Array(
                            [&k, &k2]
                                .iter()
                                .map(|k| {
                                    model
                                        .get(*k)
                                        .map_or(Value::Nil, |v| Value::BulkString(v.clone()))
                                })
                                .collect(),
                        ));
                    }
                }
            }
            let got: Vec<Value> = pipe.query(&mut c).unwrap();
            assert_eq!(got, expect, "pipeline {step} on {addr}");
        }
    }
}
