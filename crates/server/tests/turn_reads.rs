//! Point reads of many connections batched per turn of a network loop (`strata_server::turn_reads`): every
//! client reads its own writes and nobody else's answers, while the loops do batch.
#![allow(clippy::unwrap_used)]

use redis::Commands;
use strata::{Durability, IndexKind};
use strata_server::{Partitioning, ServerConfig, ServerSettings, StoreConfig};

fn info_field(c: &mut redis::Connection, name: &str) -> u64 {
    let info: String = redis::cmd("INFO").arg("stats").query(c).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("INFO stats has no {name}"))
}

/// Clients at pipeline depth 1 (and some at 3) write and read their own keys and read shared ones; each
/// checks every answer against its model. The loops must have batched reads of several connections.
#[test]
fn concurrent_clients_get_their_own_answers_from_turn_batches() {
    let dir = tempfile::tempdir().unwrap();
    let server = strata_server::start(ServerConfig {
        settings: ServerSettings {
            port: 0,
            ..ServerSettings::default()
        },
        store: StoreConfig {
            dir: dir.path().join("srv"),
            partitions: 2,
            partitioning: Partitioning::Hash,
            index: IndexKind::BTree.default_config(),
            durability: Durability::Flush,
            cache_bytes: 8 << 20,
            hot_cache: None,
            partition_capacity: None,
        },
        io_threads: 2,
        placement: Default::default(),
    })
    .unwrap();
    let url = format!("redis://{}", server.addr());
    let client = redis::Client::open(url).unwrap();
    let mut admin = client.get_connection().unwrap();
    for i in 0..100 {
        let _: () = admin.set(format!("shared{i}"), format!("s{i}")).unwrap();
    }
    let clients = 24;
    let rounds = 1500u32;
    std::thread::scope(|s| {
        for t in 0..clients {
            let client = client.clone();
            s.spawn(move || {
                let mut c = client.get_connection().unwrap();
                let mut model = std::collections::HashMap::new();
                for r in 0..rounds {
                    let key = format!("c{t}-{}", r % 37);
                    let shared = format!("shared{}", (r * 7 + t) % 100);
                    match r % 4 {
                        0 => {
                            let value = format!("{t}:{r}");
                            let _: () = c.set(&key, &value).unwrap();
                            model.insert(key, value);
                        }
                        1 => {
                            let got: Option<String> = c.get(&key).unwrap();
                            assert_eq!(got.as_ref(), model.get(&key), "client {t} round {r}");
                        }
                        2 => {
                            let got: Option<String> = c.get(&shared).unwrap();
                            let want = format!("s{}", (r * 7 + t) % 100);
                            assert_eq!(got, Some(want));
                        }
                        _ => {
                            // Three reads in one pipeline: a run of several reads in one batch.
                            let other = format!("c{t}-{}", (r + 5) % 37);
                            let (a, b, e): (Option<String>, Option<String>, bool) = redis::pipe()
                                .get(&key)
                                .get(&shared)
                                .exists(&other)
                                .query(&mut c)
                                .unwrap();
                            assert_eq!(a.as_ref(), model.get(&key));
                            assert_eq!(b, Some(format!("s{}", (r * 7 + t) % 100)));
                            assert_eq!(e, model.contains_key(&other));
                        }
                    }
                }
            });
        }
    });
    let batches = info_field(&mut admin, "turn_read_batches");
    let reads = info_field(&mut admin, "turn_batched_reads");
    assert!(batches > 0, "the loops batched reads");
    assert!(
        reads > batches,
        "some batch took reads of several connections ({reads} reads in {batches} batches)"
    );
    drop(admin);
    server.shutdown().unwrap();
}
