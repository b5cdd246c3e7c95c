//! # Cluster mode: the Redis Cluster protocol over several `strata serve` processes
//!
//! Each server owns some of the 16,384 hash slots (slot = CRC16-XMODEM of the key, or of its `{hash tag}`,
//! modulo 16,384, as Redis computes it). The slot map is static, given on the command line
//! (`--cluster-slots`, `--cluster-peer`) or in a JSON file (`--cluster-config`), and answered through
//! CLUSTER SLOTS / SHARDS / NODES / MYID / INFO / KEYSLOT, so cluster-aware clients (`redis-cli -c`, the
//! `redis` crate's cluster client) send each key to its owner. A key command for a slot this node does not
//! own is answered `-MOVED <slot> <host>:<port>`; keys of one command must share a slot (`-CROSSSLOT`).
//!
//! Slot migration, as Redis clients expect it: a slot listed as *migrating* to another node is still served
//! here for keys that exist here; a command on a key that does not exist here is answered
//! `-ASK <slot> <host>:<port>` (and `-TRYAGAIN` when a multi-key command finds some of its keys here and some
//! not). A slot listed as *importing* from another node is served only for a command right after `ASKING`.
//!
//! Ordered commands (RANGE, COUNT, SAMPLE, SCAN, DBSIZE) are per node, as SCAN and DBSIZE are in Redis
//! Cluster.

use crate::error::{ServerError, ServerResult};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// Number of hash slots.
pub const SLOTS: u16 = 16384;

/// One node of the cluster as the configuration lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeConfig {
    /// `host:port` clients reach it at.
    pub addr: String,
    /// Slot ranges it owns, as `"a-b"` or `"a"`.
    pub slots: Vec<String>,
    /// Slots it is moving to another node: slot → that node's `host:port`.
    #[serde(default)]
    pub migrating: HashMap<u16, String>,
    /// Slots it is taking over from another node: slot → that node's `host:port`.
    #[serde(default)]
    pub importing: HashMap<u16, String>,
}

/// The cluster configuration: every node, and which one this server is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterConfig {
    /// This server's `host:port` (one of `nodes`).
    pub myself: String,
    pub nodes: Vec<NodeConfig>,
}

/// Parses `"a-b"` or `"a"` into an inclusive slot range.
pub fn parse_slot_range(text: &str) -> ServerResult<(u16, u16)> {
    let bad = || {
        ServerError::Usage(format!(
            "bad slot range {text:?} (expected A-B with 0 ≤ A ≤ B ≤ 16383)"
        ))
    };
    let (a, b) = match text.split_once('-') {
        Some((a, b)) => (a.trim(), b.trim()),
        None => (text.trim(), text.trim()),
    };
    let a: u16 = a.parse().map_err(|_| bad())?;
    let b: u16 = b.parse().map_err(|_| bad())?;
    if a > b || b >= SLOTS {
        return Err(bad());
    }
    Ok((a, b))
}

/// The slot of a key: CRC16-XMODEM of the key, or of the text between the first `{` and the next `}` when
/// that is not empty.
pub fn key_slot(key: &[u8]) -> u16 {
    let hashed = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            rest.iter()
                .position(|&b| b == b'}')
                .filter(|&close| close > 0)
                .map(|close| &rest[..close])
        })
        .unwrap_or(key);
    crc16_xmodem(hashed) % SLOTS
}

fn crc16_xmodem(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in data {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// A node's 40-character id, derived from its address so every server computes the same ids.
fn node_id(addr: &str) -> String {
    let a = xxhash_rust::xxh3::xxh3_128(addr.as_bytes());
    let b = xxhash_rust::xxh3::xxh3_64_with_seed(addr.as_bytes(), 7);
    format!("{a:032x}{:08x}", b as u32)
}

/// Where a command on a slot goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotDecision {
    /// Served here.
    Local,
    /// Served here if its keys exist here, else `-ASK` to this address.
    Migrating(String),
    /// `-MOVED` to this address.
    Moved(String),
}

/// The slot map in force.
#[derive(Debug)]
pub struct Cluster {
    config: ClusterConfig,
    ids: Vec<String>,
    /// Owner (index into `config.nodes`) of every slot; `u16::MAX`: unassigned.
    owner: Vec<u16>,
    me: usize,
}

impl Cluster {
    /// Checks a configuration: `myself` is listed, ranges are valid and no slot has two owners.
    pub fn new(config: ClusterConfig) -> ServerResult<Cluster> {
        let me = config
            .nodes
            .iter()
            .position(|n| n.addr == config.myself)
            .ok_or_else(|| {
                ServerError::Usage(format!(
                    "the cluster configuration does not list this node ({})",
                    config.myself
                ))
            })?;
        let mut owner = vec![u16::MAX; SLOTS as usize];
        for (i, n) in config.nodes.iter().enumerate() {
            for r in &n.slots {
                let (a, b) = parse_slot_range(r)?;
                for s in a..=b {
                    if owner[s as usize] != u16::MAX {
                        return Err(ServerError::Usage(format!(
                            "slot {s} is assigned to both {} and {}",
                            config.nodes[owner[s as usize] as usize].addr, n.addr
                        )));
                    }
                    owner[s as usize] = i as u16;
                }
            }
        }
        let ids = config.nodes.iter().map(|n| node_id(&n.addr)).collect();
        Ok(Cluster {
            config,
            ids,
            owner,
            me,
        })
    }

    /// Reads a JSON configuration file.
    pub fn from_file(path: &std::path::Path) -> ServerResult<ClusterConfig> {
        let bytes = std::fs::read(path).map_err(|e| ServerError::io(path, e))?;
        serde_json::from_slice(&bytes).map_err(|e| {
            ServerError::Usage(format!(
                "{}: not a cluster configuration: {e}",
                path.display()
            ))
        })
    }

    fn myself(&self) -> &NodeConfig {
        &self.config.nodes[self.me]
    }

    /// This node's id.
    pub fn my_id(&self) -> &str {
        &self.ids[self.me]
    }

    /// Where a command on `slot` goes (`asking`: the connection sent ASKING just before).
    pub fn decide(&self, slot: u16, asking: bool) -> SlotDecision {
        let me = self.myself();
        if let Some(target) = me.migrating.get(&slot) {
            return SlotDecision::Migrating(target.clone());
        }
        if asking && me.importing.contains_key(&slot) {
            return SlotDecision::Local;
        }
        match self.owner[slot as usize] {
            o if o as usize == self.me => SlotDecision::Local,
            u16::MAX => SlotDecision::Moved(String::new()),
            o => SlotDecision::Moved(self.config.nodes[o as usize].addr.clone()),
        }
    }

    /// Contiguous runs of slots with one owner: (first, last, owner index).
    fn runs(&self) -> Vec<(u16, u16, usize)> {
        let mut out: Vec<(u16, u16, usize)> = Vec::new();
        for s in 0..SLOTS {
            let o = self.owner[s as usize];
            if o == u16::MAX {
                continue;
            }
            match out.last_mut() {
                Some(last) if last.2 == o as usize && last.1 + 1 == s => last.1 = s,
                _ => out.push((s, s, o as usize)),
            }
        }
        out
    }

    fn split_addr(addr: &str) -> (String, i64) {
        match addr.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), p.parse().unwrap_or(0)),
            None => (addr.to_string(), 0),
        }
    }

    /// CLUSTER SLOTS.
    pub fn slots_reply(&self) -> crate::resp::Reply {
        use crate::resp::Reply;
        Reply::Array(
            self.runs()
                .into_iter()
                .map(|(a, b, o)| {
                    let (host, port) = Self::split_addr(&self.config.nodes[o].addr);
                    Reply::Array(vec![
                        Reply::Int(i64::from(a)),
                        Reply::Int(i64::from(b)),
                        Reply::Array(vec![
                            Reply::text(host),
                            Reply::Int(port),
                            Reply::text(self.ids[o].clone()),
                        ]),
                    ])
                })
                .collect(),
        )
    }

    /// CLUSTER SHARDS.
    pub fn shards_reply(&self) -> crate::resp::Reply {
        use crate::resp::Reply;
        let runs = self.runs();
        Reply::Array(
            self.config
                .nodes
                .iter()
                .enumerate()
                .map(|(i, n)| {
                    let slots = runs
                        .iter()
                        .filter(|r| r.2 == i)
                        .flat_map(|r| [Reply::Int(i64::from(r.0)), Reply::Int(i64::from(r.1))])
                        .collect();
                    let (host, port) = Self::split_addr(&n.addr);
                    Reply::Map(vec![
                        (Reply::text("slots"), Reply::Array(slots)),
                        (
                            Reply::text("nodes"),
                            Reply::Array(vec![Reply::Map(vec![
                                (Reply::text("id"), Reply::text(self.ids[i].clone())),
                                (Reply::text("port"), Reply::Int(port)),
                                (Reply::text("ip"), Reply::text(host.clone())),
                                (Reply::text("endpoint"), Reply::text(host)),
                                (Reply::text("role"), Reply::text("master")),
                                (Reply::text("replication-offset"), Reply::Int(0)),
                                (Reply::text("health"), Reply::text("online")),
                            ])]),
                        ),
                    ])
                })
                .collect(),
        )
    }

    /// CLUSTER NODES.
    pub fn nodes_text(&self) -> String {
        let runs = self.runs();
        let mut out = String::new();
        for (i, n) in self.config.nodes.iter().enumerate() {
            let (host, port) = Self::split_addr(&n.addr);
            let flags = if i == self.me {
                "myself,master"
            } else {
                "master"
            };
            out.push_str(&format!(
                "{} {host}:{port}@{} {flags} - 0 0 {} connected",
                self.ids[i],
                port + 10000,
                i + 1
            ));
            for r in runs.iter().filter(|r| r.2 == i) {
                if r.0 == r.1 {
                    out.push_str(&format!(" {}", r.0));
                } else {
                    out.push_str(&format!(" {}-{}", r.0, r.1));
                }
            }
            if i == self.me {
                for (slot, target) in &n.migrating {
                    let to = self.config.nodes.iter().position(|x| &x.addr == target);
                    let id = to.map_or("-", |t| self.ids[t].as_str());
                    out.push_str(&format!(" [{slot}->-{id}]"));
                }
                for (slot, source) in &n.importing {
                    let from = self.config.nodes.iter().position(|x| &x.addr == source);
                    let id = from.map_or("-", |f| self.ids[f].as_str());
                    out.push_str(&format!(" [{slot}-<-{id}]"));
                }
            }
            out.push('\n');
        }
        out
    }

    /// CLUSTER INFO.
    pub fn info_text(&self) -> String {
        let assigned = self.owner.iter().filter(|&&o| o != u16::MAX).count();
        let state = if assigned == SLOTS as usize {
            "ok"
        } else {
            "fail"
        };
        format!(
            "cluster_enabled:1\r\ncluster_state:{state}\r\ncluster_slots_assigned:{assigned}\r\n\
             cluster_slots_ok:{assigned}\r\ncluster_slots_pfail:0\r\ncluster_slots_fail:0\r\n\
             cluster_known_nodes:{}\r\ncluster_size:{}\r\ncluster_current_epoch:{}\r\n\
             cluster_my_epoch:{}\r\n",
            self.config.nodes.len(),
            self.config
                .nodes
                .iter()
                .filter(|n| !n.slots.is_empty())
                .count(),
            self.config.nodes.len(),
            self.me + 1
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis() {
        // Values from the Redis Cluster specification and `CLUSTER KEYSLOT` of a real server.
        assert_eq!(crc16_xmodem(b"123456789"), 0x31C3);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"foo{}{bar}"), key_slot(b"foo{}{bar}"));
        assert_ne!(
            key_slot(b"foo{}{bar}"),
            key_slot(b"bar"),
            "an empty tag hashes the whole key"
        );
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
    }

    fn three() -> ClusterConfig {
        ClusterConfig {
            myself: "127.0.0.1:7001".into(),
            nodes: vec![
                NodeConfig {
                    addr: "127.0.0.1:7000".into(),
                    slots: vec!["0-5460".into()],
                    migrating: HashMap::new(),
                    importing: HashMap::new(),
                },
                NodeConfig {
                    addr: "127.0.0.1:7001".into(),
                    slots: vec!["5461-10922".into()],
                    migrating: HashMap::from([(5461, "127.0.0.1:7000".to_string())]),
                    importing: HashMap::from([(100, "127.0.0.1:7000".to_string())]),
                },
                NodeConfig {
                    addr: "127.0.0.1:7002".into(),
                    slots: vec!["10923-16383".into()],
                    migrating: HashMap::new(),
                    importing: HashMap::new(),
                },
            ],
        }
    }

    #[test]
    fn decisions_and_topology() {
        let c = Cluster::new(three()).unwrap();
        assert_eq!(c.decide(6000, false), SlotDecision::Local);
        assert_eq!(
            c.decide(5, false),
            SlotDecision::Moved("127.0.0.1:7000".into())
        );
        assert_eq!(
            c.decide(12000, true),
            SlotDecision::Moved("127.0.0.1:7002".into())
        );
        assert_eq!(
            c.decide(5461, false),
            SlotDecision::Migrating("127.0.0.1:7000".into())
        );
        assert_eq!(
            c.decide(100, false),
            SlotDecision::Moved("127.0.0.1:7000".into())
        );
        assert_eq!(c.decide(100, true), SlotDecision::Local);
        assert_eq!(c.runs().len(), 3);
        assert!(c.info_text().contains("cluster_state:ok"));
        let nodes = c.nodes_text();
        assert_eq!(nodes.lines().count(), 3);
        assert!(nodes.contains("myself,master") && nodes.contains(" 5461-10922"));
        let mut bad = three();
        bad.nodes[2].slots.push("5000-5001".into());
        assert!(Cluster::new(bad).is_err());
        let mut stranger = three();
        stranger.myself = "127.0.0.1:9".into();
        assert!(Cluster::new(stranger).is_err());
        assert!(parse_slot_range("5-3").is_err());
        assert!(parse_slot_range("16384").is_err());
        assert_eq!(parse_slot_range("7").unwrap(), (7, 7));
    }
}
