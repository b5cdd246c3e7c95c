//! `strata serve`: the Redis-protocol server (crate `strata-server`) over the partitions in `--db DIR`.

use crate::{CliError, CliResult, DurabilityArg};
use clap::{Args, ValueEnum};
use std::path::Path;
use std::time::Duration;
use strata::{IndexConfig, IndexKind};
use strata_server::cluster::{ClusterConfig, NodeConfig};
use strata_server::{Partitioning, ServerConfig, ServerSettings, StoreConfig};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PartitioningArg {
    /// A hash of the key picks the partition: balanced; every range touches every partition.
    Hash,
    /// Key ranges (even splits of the first 8 key bytes, or --split-keys): ranges stay local.
    Range,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum IoPlacement {
    /// On the network threads already serving; more threads when one saturates, fewer when light.
    FollowLoad,
    /// Dealt out round robin at accept, never moved.
    RoundRobin,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on (127.0.0.1 by default: this machine only).
    #[arg(long, default_value = "127.0.0.1")]
    bind: String,
    /// TCP port (0: any free port, printed at start).
    #[arg(long, default_value_t = 6379)]
    port: u16,
    /// Partitions, each its own database in DIR/p<i> with its own worker thread.
    #[arg(long, default_value_t = strata_server::DEFAULT_PARTITIONS, value_parser = clap::value_parser!(u32).range(1..=1024))]
    partitions: u32,
    /// How keys are spread over the partitions.
    #[arg(long, value_enum, default_value = "hash")]
    partitioning: PartitioningArg,
    /// Range partitioning: the N − 1 keys where partitions 1..N start, comma-separated, ascending.
    #[arg(long, value_delimiter = ',', value_name = "KEY,KEY,...")]
    split_keys: Vec<String>,
    /// Index family of the partitions (btree and betree store any bytes; dynamized stores decimal u64 keys
    /// and values).
    #[arg(long, default_value = "btree", value_parser = crate::index_names())]
    index: String,
    /// An option of the index family, as KEY=VALUE (as for `create`).
    #[arg(short = 'o', long = "option", value_name = "KEY=VALUE", value_parser = crate::parse_key_value)]
    options: Vec<(String, serde_json::Value)>,
    /// When a write is acknowledged: none (in memory), flush (handed to the OS: survives kill -9), sync
    /// (fdatasync'ed: survives power loss). Writes waiting at the same time share one flush or sync.
    #[arg(long, value_enum, default_value = "flush")]
    durability: DurabilityArg,
    /// Password clients must give with AUTH (or HELLO ... AUTH default PASSWORD).
    #[arg(long)]
    requirepass: Option<String>,
    /// Most connections at once.
    #[arg(long, default_value_t = 10_000)]
    maxclients: usize,
    /// Close connections idle this many seconds (0: never).
    #[arg(long, default_value_t = 0)]
    timeout: u64,
    /// Network threads (0: one per core).
    #[arg(long, default_value_t = 0)]
    io_threads: usize,
    /// How connections are placed on the network threads: follow-load (on the threads already serving,
    /// moved to more threads when one saturates and back when the load is light) or round-robin (dealt out
    /// at accept, never moved).
    #[arg(long, value_enum, default_value = "follow-load")]
    io_placement: IoPlacement,
    /// Entries of the hot-key write-back cache (0: no cache). Hot keys are served and updated in the cache,
    /// their writes made durable in the cache log, and written back to their partitions later.
    #[arg(long, default_value_t = 10_000)]
    cache_entries: usize,
    /// Largest value the hot-key cache holds, in bytes.
    #[arg(long, default_value_t = 128)]
    cache_max_value: usize,
    /// Accesses (Count-Min estimate, halved at every snapshot) that make a key hot.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..))]
    hot_threshold: u16,
    /// Milliseconds between cache snapshots (dirty cached values written back to their partitions).
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(10..))]
    snapshot_ms: u64,
    /// For benchmarks: emulate each partition as a server that serves at most this many operations per
    /// second (0: no limit), as FarReach's evaluation emulates one server per partition. Every operation
    /// then runs on the partition's own thread, and a group's answers wait until the partition would have
    /// served it.
    #[arg(long, default_value_t = 0)]
    partition_capacity: u64,
    /// Cluster mode: the hash slots this node owns, as A-B ranges (comma-separated). Other nodes are named
    /// by --cluster-peer; clients are redirected to them with -MOVED.
    #[arg(long, value_delimiter = ',', value_name = "A-B,...")]
    cluster_slots: Vec<String>,
    /// Cluster mode: another node and its slots, as HOST:PORT=A-B[,A-B...] (repeatable).
    #[arg(long, value_name = "HOST:PORT=A-B")]
    cluster_peer: Vec<String>,
    /// Cluster mode: the address clients reach this node at (default: --bind and --port).
    #[arg(long, value_name = "HOST:PORT")]
    cluster_announce: Option<String>,
    /// Cluster mode from a JSON file: {"myself": "HOST:PORT", "nodes": [{"addr": ..., "slots": ["A-B"],
    /// "migrating": {"SLOT": "HOST:PORT"}, "importing": {...}}]}.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["cluster_slots", "cluster_peer"])]
    cluster_config: Option<std::path::PathBuf>,
}

/// The cluster configuration the flags describe, if any.
fn cluster_config(args: &ServeArgs) -> CliResult<Option<ClusterConfig>> {
    if let Some(path) = &args.cluster_config {
        return strata_server::cluster::Cluster::from_file(path)
            .map(Some)
            .map_err(server_error);
    }
    if args.cluster_slots.is_empty() && args.cluster_peer.is_empty() {
        return Ok(None);
    }
    if args.port == 0 && args.cluster_announce.is_none() {
        return Err(CliError::Usage(
            "cluster mode needs a fixed --port (or --cluster-announce)".into(),
        ));
    }
    let myself = args
        .cluster_announce
        .clone()
        .unwrap_or_else(|| format!("{}:{}", args.bind, args.port));
    let mut nodes = vec![NodeConfig {
        addr: myself.clone(),
        slots: args.cluster_slots.clone(),
        migrating: Default::default(),
        importing: Default::default(),
    }];
    for peer in &args.cluster_peer {
        let (addr, slots) = peer.split_once('=').ok_or_else(|| {
            CliError::Usage(format!(
                "--cluster-peer {peer:?}: expected HOST:PORT=A-B[,A-B...]"
            ))
        })?;
        nodes.push(NodeConfig {
            addr: addr.to_string(),
            slots: slots.split(',').map(str::to_string).collect(),
            migrating: Default::default(),
            importing: Default::default(),
        });
    }
    Ok(Some(ClusterConfig { myself, nodes }))
}

/// Starts the server and serves until SIGINT or SIGTERM, then closes the partitions cleanly.
pub fn run(dir: &Path, cache: usize, args: ServeArgs) -> CliResult {
    let cluster = cluster_config(&args)?;
    let kind: IndexKind = args.index.parse()?;
    let mut json = kind.default_config().options_json();
    if let Some(object) = json.as_object_mut() {
        for (key, value) in args.options {
            object.insert(key, value);
        }
    }
    let index = IndexConfig::from_json(kind, json).map_err(|e| match e {
        strata::Error::InvalidArgument(m) => CliError::Usage(m),
        e => CliError::Engine(e),
    })?;
    let partitioning = match args.partitioning {
        PartitioningArg::Hash if !args.split_keys.is_empty() => {
            return Err(CliError::Usage(
                "--split-keys needs --partitioning range".into(),
            ));
        }
        PartitioningArg::Hash => Partitioning::Hash,
        PartitioningArg::Range => {
            let mode = strata_server::store::KeyMode::for_index(kind);
            let splits = args
                .split_keys
                .iter()
                .map(|k| {
                    mode.encode(k.as_bytes()).ok_or_else(|| {
                        CliError::Usage(format!("split key {k:?} is not a key of the {kind} index"))
                    })
                })
                .collect::<CliResult<Vec<_>>>()?;
            Partitioning::Range { splits }
        }
    };
    let config = ServerConfig {
        settings: ServerSettings {
            cluster,
            bind: args.bind,
            port: args.port,
            requirepass: args.requirepass,
            max_clients: args.maxclients,
            idle_timeout: (args.timeout > 0).then(|| Duration::from_secs(args.timeout)),
            ..ServerSettings::default()
        },
        store: StoreConfig {
            dir: dir.to_path_buf(),
            partitions: args.partitions as usize,
            partitioning,
            index,
            durability: args.durability.into(),
            cache_bytes: cache,
            hot_cache: (args.cache_entries > 0).then(|| strata_server::cache::CacheConfig {
                capacity: args.cache_entries,
                max_value: args.cache_max_value,
                hot_threshold: args.hot_threshold,
                snapshot_interval: Duration::from_millis(args.snapshot_ms),
            }),
            partition_capacity: (args.partition_capacity > 0).then_some(args.partition_capacity),
        },
        io_threads: args.io_threads,
        placement: match args.io_placement {
            IoPlacement::FollowLoad => strata_server::net_loops::Placement::FollowLoad,
            IoPlacement::RoundRobin => strata_server::net_loops::Placement::RoundRobin,
        },
    };
    let server = strata_server::start(config).map_err(server_error)?;
    println!("strata serve: listening on {}", server.addr());
    eprintln!(
        "strata serve: {} partition(s) in {}; stop with Ctrl-C or SIGTERM",
        args.partitions,
        dir.display()
    );
    strata_server::wait_for_signal().map_err(server_error)?;
    eprintln!("strata serve: stopping");
    server.shutdown().map_err(server_error)
}

fn server_error(e: strata_server::ServerError) -> CliError {
    match e {
        strata_server::ServerError::Usage(m) => CliError::Usage(m),
        e => CliError::Refused(e.to_string()),
    }
}
