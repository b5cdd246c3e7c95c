//! # The `server` suite
//!
//! `strata serve` (in this process) against a real `redis-server` (a child process with AOF `everysec`, when
//! the Debian package is installed), driven by the pipelined RESP load generator of [`crate::resp_load`]
//! (one client thread, so the client costs about what `redis-benchmark` costs). N = `--records` keys
//! (default 100,000) of `--value-size`-byte values (default 100) are preloaded before each group of phases;
//! every phase runs `--ops` seconds (default 3) with 50 connections.
//!
//! 1. `set-pP` / `get-pP`: uniform SET then GET, pipeline P = 16 and 1, on `strata-serve` (the server's
//!    default of 2 hash partitions, the durability of the run, hot-key cache on) and `redis-server`. When
//!    `redis-benchmark` is installed, the same four phases again with it as the client (`rb-set-pP`,
//!    `rb-get-pP`; see [`crate::redis_benchmark`] for how its report becomes a row).
//! 2. `zipf-w50-<hash|range>-<n>p`: Zipf 0.99, 50% GET / 50% SET, pipeline 16, range partitions 1, 2, 4, 8
//!    and hash partitions 4, each with the hot-key cache (`strata-serve`) and without
//!    (`strata-serve-nocache`); the hottest keys are the lowest, all in the first range partition.
//!    `zipfs-w50-range-<n>p` (n = 2, 4, 8): the same with the ranks scattered over the key space by a fixed
//!    permutation, as YCSB scrambles its zipfian keys. `zipf[s]-w50-range-4p-cap25k`: both shapes at 4
//!    partitions with each partition emulated as a server of [`PARTITION_CAPACITY`] operations per second
//!    (`--partition-capacity`, FarReach's setting: one server per partition, so the busiest bounds the
//!    throughput; on this machine the partitions otherwise share the cores and never become the bound). Rows carry the **imbalance ratio** (most ÷ fewest operations a partition ran
//!    during the phase) and the **normalized throughput** (total ÷ the busiest partition's, FarReach's
//!    measure: cache hits count in the total and on no partition).
//! 3. `ycsb-a`, `ycsb-b`, `ycsb-c`, `ycsb-f`: Zipf 0.99, pipeline 16, both engines.
//! 4. `sample-all` / `sample-one`: SAMPLE of k = 100 over the whole key space (all 4 range partitions) and
//!    over one partition's range, one query at a time on one connection.
//!
//! `STRATA_SERVER_WORKLOADS` (comma-separated, default all) picks the groups that run: `peer` (1),
//! `skew` (2), `ycsb` (3), `sample` (4). For example, only the GET/SET rows against redis-server:
//! `STRATA_SERVER_WORKLOADS=peer strata bench --suite server`. With `STRATA_SERVER_VERBOSE` set, each strata
//! phase of groups 1 and 3 says on stderr how many connections moved between the server's network loops.

use super::SuiteConfig;
use crate::driver::Engine;
use crate::error::{BenchError, Result};
use crate::measure::{Latency, PhaseLabels, RowParts, row};
use crate::redis_benchmark::{self, RbOutcome, RbSpec};
use crate::resp_load::{self, KeyDist, LoadOutcome, LoadSpec, Mix};
use crate::result::BenchResult;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};
use strata_server::cache::CacheConfig;
use strata_server::{Partitioning, RunningServer, ServerConfig, ServerSettings, StoreConfig};

pub const NAME: &str = "server";
pub const DESCRIPTION: &str = "strata serve over the Redis protocol against redis-server (AOF everysec): GET/SET at pipeline 16 and 1, Zipf 0.99 50% writes with and without the hot-key cache over 1-8 hash/range partitions (imbalance, normalized throughput), YCSB A/B/C/F, SAMPLE across partitions";
pub const DEFAULT_RECORDS: u64 = 100_000;
/// Seconds per phase when `--ops` is not given.
pub const DEFAULT_PHASE_SECS: u64 = 3;
const CONNECTIONS: usize = 50;
pub const STRATA: &str = "strata-serve";
pub const STRATA_NOCACHE: &str = "strata-serve-nocache";
pub const REDIS: &str = "redis-server";

/// The workload groups `STRATA_SERVER_WORKLOADS` can name (module doc).
pub const GROUPS: [&str; 4] = ["peer", "skew", "ycsb", "sample"];

/// The groups to run: `STRATA_SERVER_WORKLOADS`'s list, or all; an unknown name is a usage error.
pub fn groups_from(list: Option<&str>) -> Result<Vec<&'static str>> {
    super::common::workload_groups("STRATA_SERVER_WORKLOADS", &GROUPS, list)
}

fn phase(cfg: &SuiteConfig) -> Duration {
    Duration::from_secs(cfg.ops.unwrap_or(DEFAULT_PHASE_SECS).max(1))
}

/// Method notes for the report.
pub fn notes(cfg: &SuiteConfig) -> Vec<String> {
    vec![
        format!(
            "{} keys of {} bytes, preloaded; every phase runs {} s with {CONNECTIONS} connections on one client \
             thread (tokio), closed loop; latency from a pipeline's write to each reply. Client and servers share \
             this machine's cores.",
            cfg.records,
            cfg.codec.size(),
            phase(cfg).as_secs()
        ),
        format!(
            "`{STRATA}`: `strata serve` in this process, B+-tree partitions ({} hash partitions, the server's \
             default, for the peer and YCSB rows), durability `{}`, hot-key cache of 10,000 entries (values \
             ≤ 128 B), one network loop per core with load-following placement (connections gather on one \
             loop while it has room and spread when it saturates); `{STRATA_NOCACHE}`: the same without the cache. `{REDIS}`: the \
             Debian `redis-server` with `appendonly yes`, `appendfsync everysec`, no RDB snapshots.",
            strata_server::DEFAULT_PARTITIONS,
            cfg.durability.name()
        ),
        "`rb-*` rows: `redis-benchmark -t set|get -P P -c 50 -d <value size> -r <records>` as the client, \
         its request count sized by a 20,000-request calibration run to last about one phase; its p99.9 is \
         its report's 99.902% point."
            .into(),
        "Imbalance = most ÷ fewest operations run by one partition during the phase (INFO partitions); \
         normalized throughput = total operations ÷ the busiest partition's."
            .into(),
        "Server CPU µs/op (GET/SET and YCSB rows): user + system time of the server during the phase ÷ its \
         operations — every thread of this process but the load generator's for `strata-serve`, the \
         redis-server process for `redis-server`. A counted figure: it holds when other work on the machine \
         makes throughput noisy."
            .into(),
    ]
}

struct Strata {
    server: Option<RunningServer>,
    addr: SocketAddr,
}

fn start_strata(
    cfg: &SuiteConfig,
    dir: &Path,
    partitions: usize,
    partitioning: Partitioning,
    cache: bool,
    capacity: Option<u64>,
) -> Result<Strata> {
    let _ = std::fs::remove_dir_all(dir);
    let server = strata_server::start(ServerConfig {
        settings: ServerSettings {
            port: 0,
            ..ServerSettings::default()
        },
        store: StoreConfig {
            dir: dir.to_path_buf(),
            partitions,
            partitioning,
            index: strata::IndexConfig::default(),
            durability: cfg.durability,
            cache_bytes: cfg.cache_bytes / partitions.max(1),
            hot_cache: cache.then(CacheConfig::default),
            partition_capacity: capacity,
        },
        io_threads: 0,
        placement: Default::default(),
    })
    .map_err(|e| BenchError::Usage(format!("starting strata serve: {e}")))?;
    let addr = server.addr();
    Ok(Strata {
        server: Some(server),
        addr,
    })
}

impl Strata {
    /// Connections moved between the server's network loops so far.
    fn moves(&self) -> u64 {
        self.server
            .as_ref()
            .map_or(0, |s| s.network_loops().moves())
    }
}

/// With `STRATA_SERVER_VERBOSE` set, says on stderr how many connections moved between strata's network
/// loops during a phase (a split at pipeline depth 1 costs CPU per command: see `strata_server::net_loops`).
fn report_moves(engine: &str, workload: &str, strata: &Strata, before: u64) {
    if engine == STRATA && std::env::var_os("STRATA_SERVER_VERBOSE").is_some() {
        eprintln!(
            "{engine} {workload}: {} connection moves between network loops",
            strata.moves().saturating_sub(before)
        );
    }
}

impl Drop for Strata {
    fn drop(&mut self) {
        if let Some(s) = self.server.take() {
            let _ = s.shutdown();
        }
    }
}

/// A `redis-server` child process.
struct Redis {
    child: std::process::Child,
    addr: SocketAddr,
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_redis(dir: &Path) -> Option<Redis> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).ok()?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .ok()?
        .local_addr()
        .ok()?
        .port();
    let child = std::process::Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
        ])
        .args([
            "--appendonly",
            "yes",
            "--appendfsync",
            "everysec",
            "--daemonize",
            "no",
        ])
        .arg("--dir")
        .arg(dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()?;
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().ok()?;
    let redis = Redis { child, addr };
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        if resp_load::command(addr, &[b"PING"]).is_ok() {
            return Some(redis);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

/// Whose CPU time is the server's.
#[derive(Debug, Clone, Copy)]
enum ServerCpu {
    /// `strata serve` in this process: every thread but the calling one (the load generator's).
    InProcess,
    /// A child process (redis-server).
    Child(u32),
}

/// CPU time (user + system) of a `/proc/.../stat` file, in clock ticks.
fn stat_ticks(path: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    // Fields after the command name (which may hold spaces), from field 3 (state) on: utime and stime are
    // fields 14 and 15.
    let fields: Vec<&str> = text.rsplit_once(')')?.1.split_whitespace().collect();
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

impl ServerCpu {
    /// The server's CPU time so far, in clock ticks.
    fn ticks(self) -> Option<u64> {
        match self {
            ServerCpu::InProcess => Some(
                stat_ticks("/proc/self/stat")?
                    .saturating_sub(stat_ticks("/proc/thread-self/stat")?),
            ),
            ServerCpu::Child(pid) => stat_ticks(&format!("/proc/{pid}/stat")),
        }
    }
}

/// Clock ticks per second of `/proc` stat files (`USER_HZ`, 100 on every Linux architecture this runs on).
const TICKS_PER_SEC: f64 = 100.0;

/// Operations each partition has run (INFO partitions).
fn partition_ops(addr: SocketAddr) -> Result<Vec<u64>> {
    let info = resp_load::command(addr, &[b"INFO", b"partitions"])?;
    Ok(info
        .lines()
        .filter(|l| l.starts_with('p') && l.contains(":ops="))
        .filter_map(|l| l.split(":ops=").nth(1)?.split(',').next()?.parse().ok())
        .collect())
}

fn labels(cfg: &SuiteConfig, engine: &str, workload: &str) -> PhaseLabels {
    PhaseLabels {
        suite: NAME.into(),
        engine: engine.into(),
        workload: workload.into(),
        records: cfg.records,
        threads: CONNECTIONS as u32,
        durability: cfg.durability.name().into(),
        cache_bytes: cfg.cache_bytes as u64,
        page_size: cfg.page_size,
    }
}

/// What the rows of a phase over the network share: its time and the server's directory size (no engine
/// I/O counters or RSS: redis-server runs in a process of its own, so they would not compare).
fn row_parts(secs: f64, dir: &Path) -> RowParts {
    RowParts {
        secs,
        io: None,
        os: None,
        rss: None,
        rss_scope: "none",
        disk_bytes: crate::measure::dir_bytes(dir).unwrap_or(0),
        height: None,
    }
}

/// The rows of one load phase; `partitions` = per-partition operation counts during it (strata only).
fn rows(
    cfg: &SuiteConfig,
    engine: &str,
    workload: &str,
    out: &LoadOutcome,
    partitions: Option<Vec<u64>>,
    disk: &Path,
    cpu_ticks: Option<u64>,
) -> Result<Vec<BenchResult>> {
    if out.errors > 0 {
        return Err(BenchError::Usage(format!(
            "{engine} {workload}: {} error replies, the first: {}",
            out.errors,
            out.first_error.as_deref().unwrap_or("?")
        )));
    }
    let parts = row_parts(out.secs, disk);
    let l = labels(cfg, engine, workload);
    let (imbalance, normalized) = match &partitions {
        Some(p) if !p.is_empty() => {
            let max = p.iter().copied().max().unwrap_or(0);
            let min = p.iter().copied().min().unwrap_or(0);
            let total = out.ops();
            (
                Some(if min == 0 {
                    f64::INFINITY
                } else {
                    max as f64 / min as f64
                }),
                Some(if max == 0 {
                    f64::INFINITY
                } else {
                    total as f64 / max as f64
                }),
            )
        }
        _ => (None, None),
    };
    let mut result = Vec::new();
    for (op, lat) in [
        ("read", &out.reads),
        ("update", &out.updates),
        ("rmw", &out.rmws),
    ] {
        if lat.count() > 0 {
            let mut r = row(&l, op, lat, &parts);
            r.imbalance = imbalance;
            r.normalized = normalized;
            r.server_cpu_us = cpu_ticks
                .filter(|_| out.ops() > 0)
                .map(|t| t as f64 / TICKS_PER_SEC * 1e6 / out.ops() as f64);
            result.push(r);
        }
    }
    Ok(result)
}

fn load(
    cfg: &SuiteConfig,
    addr: SocketAddr,
    pipeline: usize,
    dist: KeyDist,
    mix: Mix,
) -> Result<LoadOutcome> {
    resp_load::run(&LoadSpec {
        addr,
        connections: CONNECTIONS,
        pipeline,
        keys: cfg.records,
        value_size: cfg.codec.size(),
        dist,
        mix,
        duration: phase(cfg),
        seed: cfg.seed,
    })
}

/// Runs the suite (its engines are its own: the engine list is not used).
pub fn run(cfg: &SuiteConfig, _engines: &[Box<dyn Engine>]) -> Result<Vec<BenchResult>> {
    let groups = groups_from(std::env::var("STRATA_SERVER_WORKLOADS").ok().as_deref())?;
    let mut out = Vec::new();
    if groups.contains(&"peer") || groups.contains(&"ycsb") {
        out.extend(peer_and_ycsb(cfg, &groups)?);
    }
    if groups.contains(&"skew") {
        out.extend(skew(cfg)?);
    }
    if groups.contains(&"sample") {
        out.extend(sample(cfg)?);
    }
    Ok(out)
}

/// Groups 1 and 3: GET/SET and YCSB on strata and redis-server.
fn peer_and_ycsb(cfg: &SuiteConfig, groups: &[&str]) -> Result<Vec<BenchResult>> {
    let mut out = Vec::new();
    let data = &cfg.data_dir;
    let zipf = KeyDist::Zipf(0.99);
    // 1 and 3: the peer comparison and YCSB, on strata (the server's defaults: hash partitions, cache) and
    // redis.
    let strata_dir = data.join("strata");
    let redis_dir = data.join("redis");
    let parts = strata_server::DEFAULT_PARTITIONS as usize;
    let strata = start_strata(cfg, &strata_dir, parts, Partitioning::Hash, true, None)?;
    let redis = start_redis(&redis_dir);
    let mut targets = vec![(
        STRATA,
        strata.addr,
        strata_dir.as_path(),
        ServerCpu::InProcess,
    )];
    if let Some(r) = &redis {
        targets.push((
            REDIS,
            r.addr,
            redis_dir.as_path(),
            ServerCpu::Child(r.child.id()),
        ));
    }
    for &(_, addr, _, _) in &targets {
        resp_load::preload(addr, cfg.records, cfg.codec.size())?;
    }
    // Each workload runs on every engine back to back, so a ratio compares phases close in time (the
    // machine's speed drifts over a run).
    let mut workloads: Vec<(String, usize, KeyDist, Mix)> = Vec::new();
    let peer = if groups.contains(&"peer") {
        &[16, 1][..]
    } else {
        &[]
    };
    for &pipeline in peer {
        workloads.push((
            format!("set-p{pipeline}"),
            pipeline,
            KeyDist::Uniform,
            Mix::UPDATES,
        ));
        workloads.push((
            format!("get-p{pipeline}"),
            pipeline,
            KeyDist::Uniform,
            Mix::READS,
        ));
    }
    let ycsb = if groups.contains(&"ycsb") {
        &['a', 'b', 'c', 'f'][..]
    } else {
        &[]
    };
    for &w in ycsb {
        workloads.push((
            format!("ycsb-{w}"),
            16,
            zipf,
            Mix::ycsb(w).unwrap_or(Mix::READS),
        ));
    }
    for (workload, pipeline, dist, mix) in &workloads {
        for &(engine, addr, dir, cpu) in &targets {
            let before = cpu.ticks();
            let moves = strata.moves();
            let o = load(cfg, addr, *pipeline, *dist, *mix)?;
            let ticks = cpu.ticks().zip(before).map(|(a, b)| a.saturating_sub(b));
            report_moves(engine, workload, &strata, moves);
            out.extend(rows(cfg, engine, workload, &o, None, dir, ticks)?);
        }
    }
    // 1 again with `redis-benchmark` as the client, when it is installed (the keys it sets are its own,
    // `key:` and a number below N, so its GETs run after its SETs).
    if groups.contains(&"peer") && redis_benchmark::available() {
        for pipeline in [16, 1] {
            for (test, op) in [("set", "update"), ("get", "read")] {
                for &(engine, addr, dir, cpu) in &targets {
                    let spec = RbSpec {
                        addr,
                        test,
                        pipeline,
                        connections: CONNECTIONS,
                        value_size: cfg.codec.size(),
                        keyspace: cfg.records,
                    };
                    let before = cpu.ticks();
                    let moves = strata.moves();
                    let o = redis_benchmark::run(&spec, phase(cfg))?;
                    let ticks = cpu.ticks().zip(before).map(|(a, b)| a.saturating_sub(b));
                    let workload = format!("{RB_PREFIX}{test}-p{pipeline}");
                    report_moves(engine, &workload, &strata, moves);
                    out.push(rb_row(cfg, engine, &workload, op, &o, dir, ticks));
                }
            }
        }
    }
    drop(strata);
    drop(redis);
    Ok(out)
}

/// Operations per second of each emulated partition server in the `-cap` skew rows. Chosen so that the
/// partitions, not the machine's cores, bound the throughput without the cache: four balanced partitions
/// serve at most 100,000 ops/s, well under what this 2-core machine serves with unlimited partitions at
/// pipeline 16 (the uncapped `zipf*-w50-range-4p` rows of the same run show it).
pub const PARTITION_CAPACITY: u64 = 25_000;

/// Workload names of the rows measured with `redis-benchmark` start with this.
pub const RB_PREFIX: &str = "rb-";

/// A row of a `redis-benchmark` run (its latencies are its report's, in ms; no histogram of ours).
fn rb_row(
    cfg: &SuiteConfig,
    engine: &str,
    workload: &str,
    op: &str,
    o: &RbOutcome,
    dir: &Path,
    cpu_ticks: Option<u64>,
) -> BenchResult {
    let mut r = row(
        &labels(cfg, engine, workload),
        op,
        &Latency::new(),
        &row_parts(o.secs, dir),
    );
    r.ops = o.requests;
    r.ops_per_sec = o.ops_per_sec;
    r.mean_us = o.mean_ms * 1e3;
    r.p50_us = o.p50_ms * 1e3;
    r.p99_us = o.p99_ms * 1e3;
    r.p999_us = o.p999_ms * 1e3;
    r.max_us = o.max_ms * 1e3;
    r.server_cpu_us = cpu_ticks
        .filter(|_| o.requests > 0)
        .map(|t| t as f64 / TICKS_PER_SEC * 1e6 / o.requests as f64);
    r
}

/// Group 2: skew over partitions with and without the cache.
fn skew(cfg: &SuiteConfig) -> Result<Vec<BenchResult>> {
    let mut out = Vec::new();
    let data = &cfg.data_dir;
    let zipf = KeyDist::Zipf(0.99);
    // 2: skew over partitions, with and without the cache: hot keys clustered at the low end of the key
    // space (range partitions 1, 2, 4, 8; hash 4), then scattered over it (range partitions 2, 4, 8).
    let mut layouts: Vec<(Partitioning, &str, usize, KeyDist)> = [1, 2, 4, 8]
        .into_iter()
        .map(|n| (Partitioning::Range { splits: Vec::new() }, "range", n, zipf))
        .collect();
    layouts.push((Partitioning::Hash, "hash", 4, zipf));
    layouts.extend([2, 4, 8].into_iter().map(|n| {
        (
            Partitioning::Range { splits: Vec::new() },
            "range",
            n,
            KeyDist::ZipfScattered(0.99),
        )
    }));
    let mut layouts: Vec<_> = layouts.into_iter().map(|l| (l, None)).collect();
    // The cache goal's layouts again with each partition emulated as a server of fixed capacity (FarReach's
    // setting: the busiest partition bounds the throughput).
    for dist in [KeyDist::ZipfScattered(0.99), zipf] {
        layouts.push((
            (Partitioning::Range { splits: Vec::new() }, "range", 4, dist),
            Some(PARTITION_CAPACITY),
        ));
    }
    for ((partitioning, kind, n, dist), capacity) in layouts {
        let name = match dist {
            KeyDist::ZipfScattered(_) => "zipfs",
            _ => "zipf",
        };
        let capped = capacity.map_or(String::new(), |c| format!("-cap{}k", c / 1000));
        for cache in [false, true] {
            let dir = data.join(format!("skew-{name}-{kind}-{n}{capped}-{cache}"));
            let s = start_strata(cfg, &dir, n, partitioning.clone(), cache, capacity)?;
            resp_load::preload(s.addr, cfg.records, cfg.codec.size())?;
            let before = partition_ops(s.addr)?;
            let o = load(cfg, s.addr, 16, dist, Mix::ycsb('a').unwrap_or(Mix::READS))?;
            let after = partition_ops(s.addr)?;
            let delta: Vec<u64> = after
                .iter()
                .zip(&before)
                .map(|(a, b)| a.saturating_sub(*b))
                .collect();
            let engine = if cache { STRATA } else { STRATA_NOCACHE };
            out.extend(rows(
                cfg,
                engine,
                &format!("{name}-w50-{kind}-{n}p{capped}"),
                &o,
                Some(delta),
                &dir,
                None,
            )?);
            drop(s);
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    Ok(out)
}

/// Group 4: SAMPLE across all partitions against one partition's range.
fn sample(cfg: &SuiteConfig) -> Result<Vec<BenchResult>> {
    let mut out = Vec::new();
    let data = &cfg.data_dir;
    let dir = data.join("sample");
    let s = start_strata(
        cfg,
        &dir,
        4,
        Partitioning::Range { splits: Vec::new() },
        true,
        None,
    )?;
    resp_load::preload(s.addr, cfg.records, cfg.codec.size())?;
    let quarter = (u64::MAX / 4).to_be_bytes();
    let queries = 200;
    for (workload, lo, hi) in [
        ("sample-all", &b"-"[..], &b"+"[..]),
        ("sample-one", &[0u8][..], &quarter[..]),
    ] {
        let mut lat = Latency::new();
        let start = Instant::now();
        for q in 0..queries {
            let seed = q.to_string();
            let t = Instant::now();
            resp_load::command(
                s.addr,
                &[b"SAMPLE", lo, hi, b"100", b"SEED", seed.as_bytes()],
            )?;
            lat.record(t.elapsed());
        }
        let parts = row_parts(start.elapsed().as_secs_f64(), &dir);
        let mut l = labels(cfg, STRATA, workload);
        l.threads = 1;
        out.push(row(&l, "sample", &lat, &parts));
    }
    Ok(out)
}

fn find<'a>(
    rows: &'a [BenchResult],
    engine: &str,
    workload: &str,
    op: &str,
) -> Option<&'a BenchResult> {
    rows.iter()
        .find(|r| r.engine == engine && r.workload == workload && r.op == op)
}

/// The goals of the issue, measured.
pub fn analysis(_cfg: &SuiteConfig, rows: &[BenchResult]) -> String {
    let mut s = String::from("### Goals\n\n| goal | measured | met |\n|---|---|---|\n");
    let ratio = |a: Option<&BenchResult>, b: Option<&BenchResult>| match (a, b) {
        (Some(a), Some(b)) if b.ops_per_sec > 0.0 => Some(a.ops_per_sec / b.ops_per_sec),
        _ => None,
    };
    for (prefix, p) in [("", 16), ("", 1), (RB_PREFIX, 16), (RB_PREFIX, 1)] {
        for (w, op) in [("set", "update"), ("get", "read")] {
            let wl = format!("{prefix}{w}-p{p}");
            if prefix == RB_PREFIX && find(rows, STRATA, &wl, op).is_none() {
                continue;
            }
            let r = ratio(find(rows, STRATA, &wl, op), find(rows, REDIS, &wl, op));
            let tail = match (find(rows, STRATA, &wl, op), find(rows, REDIS, &wl, op)) {
                (Some(a), Some(b)) if b.p999_us > 0.0 => Some(a.p999_us / b.p999_us),
                _ => None,
            };
            let cpu = |engine: &str| {
                find(rows, engine, &wl, op)
                    .and_then(|r| r.server_cpu_us)
                    .map_or("n/a".to_string(), |c| format!("{c:.2}"))
            };
            let _ = writeln!(
                s,
                "| {wl}: throughput ≥ 1.0× redis, p99.9 ≤ 2× | {} throughput, {} p99.9; server CPU {} vs {} µs/op | {} |",
                r.map_or("n/a (no redis-server)".into(), |r| format!("{r:.2}×")),
                tail.map_or("n/a".into(), |t| format!("{t:.2}×")),
                cpu(STRATA),
                cpu(REDIS),
                match (r, tail) {
                    (Some(r), Some(t)) =>
                        if r >= 1.0 && t <= 2.0 {
                            "yes"
                        } else {
                            "no"
                        },
                    _ => "n/a",
                }
            );
        }
    }
    // The cache goal, with the hot keys scattered over the key space (as YCSB scrambles them) and clustered
    // in the first partition (where no cache of 10,000 entries can even the load out: the first quarter of
    // the key space holds ranks beyond the cache's reach that outweigh any other quarter).
    let capped = format!("-cap{}k", PARTITION_CAPACITY / 1000);
    for wl in [
        "zipfs-w50-range-4p".to_string(),
        "zipf-w50-range-4p".to_string(),
        format!("zipfs-w50-range-4p{capped}"),
        format!("zipf-w50-range-4p{capped}"),
    ] {
        let sum = |engine: &str| -> Option<(f64, Option<f64>, Option<f64>)> {
            let rs: Vec<&BenchResult> = rows
                .iter()
                .filter(|r| r.engine == engine && r.workload == wl)
                .collect();
            (!rs.is_empty()).then(|| {
                (
                    rs.iter().map(|r| r.ops_per_sec).sum(),
                    rs[0].imbalance,
                    rs[0].normalized,
                )
            })
        };
        let (Some((on, imb_on, norm_on)), Some((off, imb_off, norm_off))) =
            (sum(STRATA), sum(STRATA_NOCACHE))
        else {
            continue;
        };
        let fmt = |v: Option<f64>| v.map_or("n/a".into(), |i| format!("{i:.2}"));
        let _ = writeln!(
            s,
            "| {wl}: cache ≥ 2× no cache, imbalance ≤ 1.2 | {:.2}× throughput ({} normalized); imbalance {} with the cache, {} without | {} |",
            on / off,
            match (norm_on, norm_off) {
                (Some(a), Some(b)) if b > 0.0 => format!("{:.2}×", a / b),
                _ => "n/a".into(),
            },
            fmt(imb_on),
            fmt(imb_off),
            if on / off >= 2.0 && imb_on.is_some_and(|i| i <= 1.2) {
                "yes"
            } else {
                "no"
            }
        );
    }
    if let (Some(all), Some(one)) = (
        find(rows, STRATA, "sample-all", "sample"),
        find(rows, STRATA, "sample-one", "sample"),
    ) {
        let r = all.p50_us / one.p50_us.max(1e-9);
        let _ = writeln!(
            s,
            "| SAMPLE over 4 partitions within 2× of one partition (p50) | {r:.2}× ({:.0} µs vs {:.0} µs) | {} |",
            all.p50_us,
            one.p50_us,
            if r <= 2.0 { "yes" } else { "no" }
        );
    }
    s.push_str("\n### Skew over partitions (Zipf 0.99, 50% writes)\n\n| workload | engine | ops/s | imbalance | normalized |\n|---|---|---|---|---|\n");
    let mut seen = Vec::new();
    for r in rows.iter().filter(|r| r.workload.starts_with("zipf")) {
        let key = (r.engine.clone(), r.workload.clone());
        if seen.contains(&key) {
            continue;
        }
        seen.push(key);
        let total: f64 = rows
            .iter()
            .filter(|x| x.engine == r.engine && x.workload == r.workload)
            .map(|x| x.ops_per_sec)
            .sum();
        let _ = writeln!(
            s,
            "| {} | {} | {total:.0} | {} | {} |",
            r.workload,
            r.engine,
            r.imbalance.map_or("-".into(), |v| format!("{v:.2}")),
            r.normalized.map_or("-".into(), |v| format!("{v:.2}")),
        );
    }
    s
}
