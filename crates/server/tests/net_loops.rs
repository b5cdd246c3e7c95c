//! Connections moving between network loops (`net_loops`): nothing lost, reordered or duplicated when a
//! connection moves between pipelines, even with half a command buffered; and load-following placement
//! gathering a light load on one loop.
#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use strata::{Durability, IndexConfig};
use strata_server::net_loops::{Move, Placement};
use strata_server::{Partitioning, RunningServer, ServerConfig, ServerSettings, StoreConfig};

fn start(dir: &std::path::Path, placement: Placement) -> RunningServer {
    strata_server::start(ServerConfig {
        settings: ServerSettings {
            port: 0,
            ..ServerSettings::default()
        },
        store: StoreConfig {
            dir: dir.join("srv"),
            partitions: 2,
            partitioning: Partitioning::Hash,
            index: IndexConfig::default(),
            durability: Durability::Flush,
            cache_bytes: 8 << 20,
            hot_cache: None,
            partition_capacity: None,
        },
        io_threads: 2,
        placement,
    })
    .unwrap()
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A socket whose reads fail after 10 s instead of waiting for ever.
fn connect(addr: std::net::SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

fn read_exactly(s: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut buf = vec![0; n];
    s.read_exact(&mut buf).unwrap();
    buf
}

#[test]
fn a_connection_moves_with_half_a_command_buffered() {
    let dir = tempfile::tempdir().unwrap();
    // Round robin: no load-following moves besides the ones this test asks for.
    let srv = start(dir.path(), Placement::RoundRobin);
    let net = srv.network_loops();
    let mut s = connect(srv.addr());
    s.write_all(b"PING\r\n").unwrap();
    assert_eq!(read_exactly(&mut s, 7), b"+PONG\r\n");
    assert_eq!(net.connections(), vec![1, 0]);
    // Time for the server to reach its read (a request seen before it would move the connection empty).
    std::thread::sleep(Duration::from_millis(200));
    net.request(Move {
        from: 0,
        to: 1,
        count: 1,
    });
    // The connection waits for input; half a command wakes it, and it moves with the half buffered.
    s.write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhel")
        .unwrap();
    wait_until("the connection moved", || net.connections() == vec![0, 1]);
    assert_eq!(net.moves(), 1);
    s.write_all(b"lo\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n")
        .unwrap();
    assert_eq!(read_exactly(&mut s, 5 + 11), b"+OK\r\n$5\r\nhello\r\n");
}

/// Eight clients pipeline SETs and GETs of their own keys, checking every reply, while the test moves
/// connections back and forth between the two loops as fast as they go.
#[test]
fn pipelines_keep_their_replies_while_connections_move() {
    let dir = tempfile::tempdir().unwrap();
    let srv = start(dir.path(), Placement::RoundRobin);
    let addr = srv.addr();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        let clients: Vec<_> = (0..8)
            .map(|c| {
                scope.spawn(move || {
                    let client = redis::Client::open(format!("redis://{addr}")).unwrap();
                    let mut conn = client.get_connection().unwrap();
                    conn.set_read_timeout(Some(Duration::from_secs(10)))
                        .unwrap();
                    for round in 0..300u32 {
                        let mut pipe = redis::pipe();
                        for i in 0..10 {
                            let key = format!("c{c}-k{i}");
                            pipe.set(&key, format!("{round}-{i}")).ignore();
                            pipe.get(&key);
                        }
                        let got: Vec<String> = pipe.query(&mut conn).unwrap();
                        let want: Vec<String> = (0..10).map(|i| format!("{round}-{i}")).collect();
                        assert_eq!(got, want, "client {c} round {round}");
                    }
                })
            })
            .collect();
        let net = srv.network_loops();
        let mover = scope.spawn(|| {
            let mut from = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                net.request(Move {
                    from,
                    to: 1 - from,
                    count: 4,
                });
                from = 1 - from;
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        for c in clients {
            c.join().unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        mover.join().unwrap();
    });
    let net = srv.network_loops();
    assert!(
        net.moves() >= 50,
        "connections moved only {} times",
        net.moves()
    );
    wait_until("every client closed", || {
        net.connections().iter().sum::<usize>() == 0
    });
}

/// Under load-following placement, new connections join the loop already serving, and connections spread
/// over two loops by hand go back to one while the load is light.
#[test]
fn a_light_load_gathers_on_one_loop() {
    let dir = tempfile::tempdir().unwrap();
    let srv = start(dir.path(), Placement::FollowLoad);
    let net = srv.network_loops();
    let mut conns: Vec<TcpStream> = (0..6).map(|_| connect(srv.addr())).collect();
    let ping = |conns: &mut Vec<TcpStream>| {
        for s in conns.iter_mut() {
            s.write_all(b"PING\r\n").unwrap();
            assert_eq!(read_exactly(s, 7), b"+PONG\r\n");
        }
    };
    ping(&mut conns);
    assert_eq!(net.connections(), vec![6, 0]);
    net.request(Move {
        from: 0,
        to: 1,
        count: 3,
    });
    ping(&mut conns);
    wait_until("three connections moved", || {
        net.connections() == vec![3, 3]
    });
    // A light load (a few pings a tick): the controller gathers them on one loop again.
    wait_until("one loop serves all", || {
        ping(&mut conns);
        std::thread::sleep(Duration::from_millis(20));
        net.connections().contains(&6)
    });
    assert!(net.moves() >= 6);
    let mut c = redis::Client::open(format!("redis://{}", srv.addr()))
        .unwrap()
        .get_connection()
        .unwrap();
    let info: String = redis::cmd("INFO").arg("clients").query(&mut c).unwrap();
    for field in [
        "io_threads:2",
        "io_placement:follow-load",
        "io_threads_serving:1",
    ] {
        assert!(info.contains(field), "{field} missing in {info}");
    }
}
