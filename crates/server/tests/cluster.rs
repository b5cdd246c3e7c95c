//! Cluster mode: three in-process servers with a static slot map, the `redis` crate's cluster client
//! following MOVED, and the ASK/ASKING protocol of a migrating slot.
#![allow(clippy::unwrap_used)]

use redis::Commands;
use redis::cluster::ClusterClient;
use std::collections::HashMap;
use strata::{Durability, IndexConfig};
use strata_server::cluster::{ClusterConfig, NodeConfig, key_slot};
use strata_server::{Partitioning, RunningServer, ServerConfig, ServerSettings, StoreConfig};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn node(addr: &str, slots: &[&str]) -> NodeConfig {
    NodeConfig {
        addr: addr.into(),
        slots: slots.iter().map(|s| s.to_string()).collect(),
        migrating: HashMap::new(),
        importing: HashMap::new(),
    }
}

fn start(dir: &std::path::Path, port: u16, myself: &str, nodes: &[NodeConfig]) -> RunningServer {
    strata_server::start(ServerConfig {
        settings: ServerSettings {
            port,
            cluster: Some(ClusterConfig {
                myself: myself.into(),
                nodes: nodes.to_vec(),
            }),
            ..ServerSettings::default()
        },
        store: StoreConfig {
            dir: dir.join(format!("node-{port}")),
            partitions: 2,
            partitioning: Partitioning::Hash,
            index: IndexConfig::default(),
            durability: Durability::Flush,
            cache_bytes: 4 << 20,
            hot_cache: None,
            partition_capacity: None,
        },
        io_threads: 1,
        placement: Default::default(),
    })
    .unwrap()
}

#[test]
fn the_cluster_client_spreads_keys_over_three_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let ports = [free_port(), free_port(), free_port()];
    let addrs: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let nodes = vec![
        node(&addrs[0], &["0-5460"]),
        node(&addrs[1], &["5461-10922"]),
        node(&addrs[2], &["10923-16383"]),
    ];
    let servers: Vec<RunningServer> = (0..3)
        .map(|i| start(dir.path(), ports[i], &addrs[i], &nodes))
        .collect();
    let client = ClusterClient::new(vec![format!("redis://{}", addrs[0])]).unwrap();
    let mut c = client.get_connection().unwrap();
    for i in 0..300 {
        let _: () = c.set(format!("key{i}"), i).unwrap();
    }
    for i in 0..300 {
        assert_eq!(c.get::<_, i64>(format!("key{i}")).unwrap(), i);
    }
    // Keys landed on all three nodes, each only on the owner of its slot.
    for (n, addr) in addrs.iter().enumerate() {
        let mut direct = redis::Client::open(format!("redis://{addr}"))
            .unwrap()
            .get_connection()
            .unwrap();
        let size: i64 = redis::cmd("DBSIZE").query(&mut direct).unwrap();
        assert!(size > 50, "node {n} holds {size} keys");
        for i in 0..300 {
            let key = format!("key{i}");
            let slot = key_slot(key.as_bytes());
            let owner = match slot {
                0..=5460 => 0,
                5461..=10922 => 1,
                _ => 2,
            };
            let r: redis::RedisResult<Option<i64>> = direct.get(&key);
            if owner == n {
                assert_eq!(r.unwrap(), Some(i));
            } else {
                let e = r.unwrap_err().to_string();
                assert!(e.contains("MOVED") || e.contains("Moved"), "{e}");
            }
        }
    }
    // Hash tags keep multi-key commands on one node; different slots are refused.
    let _: () = c.mset(&[("{u1}a", 1), ("{u1}b", 2)]).unwrap();
    let got: Vec<i64> = c.mget(&["{u1}a", "{u1}b"]).unwrap();
    assert_eq!(got, vec![1, 2]);
    let mut direct = redis::Client::open(format!("redis://{}", addrs[0]))
        .unwrap()
        .get_connection()
        .unwrap();
    let e = redis::cmd("MGET")
        .arg("a")
        .arg("b")
        .query::<()>(&mut direct)
        .unwrap_err();
    assert!(e.to_string().to_uppercase().contains("CROSSSLOT"), "{e}");
    let keyslot: i64 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg("foo")
        .query(&mut direct)
        .unwrap();
    assert_eq!(keyslot, 12182);
    drop(servers);
}

#[test]
fn a_migrating_slot_answers_ask_and_the_importing_node_takes_asking() {
    let dir = tempfile::tempdir().unwrap();
    let ports = [free_port(), free_port()];
    let addrs: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let slot = key_slot(b"moving");
    let other = (0..100_000)
        .map(|i| format!("k{i}"))
        .find(|k| key_slot(k.as_bytes()) == slot)
        .unwrap();
    // Before the migration A owns everything and holds `other`.
    let alone = vec![node(&addrs[0], &["0-16383"])];
    let sa = start(dir.path(), ports[0], &addrs[0], &alone);
    let mut ca = redis::Client::open(format!("redis://{}", addrs[0]))
        .unwrap()
        .get_connection()
        .unwrap();
    let _: () = ca.set(&other, "old").unwrap();
    drop(ca);
    sa.shutdown().unwrap();
    let mut a = node(&addrs[0], &["0-16383"]);
    a.migrating.insert(slot, addrs[1].clone());
    let mut b = node(&addrs[1], &[]);
    b.importing.insert(slot, addrs[0].clone());
    let nodes = vec![a, b];
    let _sa = start(dir.path(), ports[0], &addrs[0], &nodes);
    let _sb = start(dir.path(), ports[1], &addrs[1], &nodes);
    let mut ca = redis::Client::open(format!("redis://{}", addrs[0]))
        .unwrap()
        .get_connection()
        .unwrap();
    let mut cb = redis::Client::open(format!("redis://{}", addrs[1]))
        .unwrap()
        .get_connection()
        .unwrap();
    // A key of the migrating slot that is not on A: ASK to B (reads and writes).
    let e = ca
        .get::<_, Option<String>>("moving")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&format!("{slot}")) && e.contains(&addrs[1]),
        "{e}"
    );
    let e = ca.set::<_, _, ()>("moving", "x").unwrap_err().to_string();
    assert!(e.contains(&addrs[1]), "{e}");
    // B serves the slot only right after ASKING.
    let e = cb
        .get::<_, Option<String>>("moving")
        .unwrap_err()
        .to_string();
    assert!(e.contains("MOVED") || e.contains("Moved"), "{e}");
    let _: () = redis::cmd("ASKING").query(&mut cb).unwrap();
    let _: () = cb.set("moving", "here").unwrap();
    let _: () = redis::cmd("ASKING").query(&mut cb).unwrap();
    assert_eq!(cb.get::<_, String>("moving").unwrap(), "here");
    // A key of the slot that A still has is served by A.
    assert_eq!(ca.get::<_, String>(&other).unwrap(), "old");
    let _: () = ca.set(&other, "new").unwrap();
    assert_eq!(ca.get::<_, String>(&other).unwrap(), "new");
    // Multi-key commands: all keys here are served; some here and some not is TRYAGAIN.
    let e = redis::cmd("MGET")
        .arg(&other)
        .arg(&other)
        .query::<Vec<String>>(&mut ca);
    assert_eq!(e.unwrap(), vec!["new".to_string(), "new".to_string()]);
    let e = redis::cmd("MGET")
        .arg(&other)
        .arg("moving")
        .query::<Vec<String>>(&mut ca)
        .unwrap_err()
        .to_string();
    assert!(e.to_uppercase().contains("TRYAGAIN"), "{e}");
}
