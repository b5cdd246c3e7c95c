//! A pipelined RESP load generator: N connections on one thread (a tokio current-thread runtime, so the
//! client costs about what `redis-benchmark` costs), each keeping a pipeline of P commands in flight: it sends
//! P commands, reads their P replies, and repeats until the phase's time is up.
//!
//! Keys are 8-byte big-endian numbers spread evenly over the 64-bit space (`key i = i · ⌊2⁶⁴ / n⌋`), so even
//! range splits put n / N of them in each partition; rank i of the key distribution is key i, so under Zipf
//! the hottest keys are the lowest ones (one range partition holds them: the skew the hot-key cache evens
//! out). Values are `value_size` bytes.
//!
//! Operations follow a YCSB-style mix: read (GET), update (SET), read-modify-write (GET then SET of the same
//! key, timed as one operation, YCSB-F). Latency of an operation is from the moment its pipeline was written
//! to the moment its reply (its last reply, for read-modify-write) arrived; with pipelining that includes
//! waiting behind the earlier commands of its pipeline, as it does for `redis-benchmark -P`. The client is
//! closed-loop: throughput is what the server sustains with N × P requests outstanding.

use crate::distributions::Zipfian;
use crate::error::{BenchError, Result};
use crate::measure::Latency;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// Which keys operations pick.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KeyDist {
    Uniform,
    /// Zipf with this θ over ranks (rank 0 hottest), rank i being key i: the hottest keys are the lowest
    /// ones, all in the first range partition (the worst case for range partitioning).
    Zipf(f64),
    /// Zipf with this θ over ranks, the ranks scattered over the key space by a fixed permutation (rank i is
    /// key `i · s mod n`, `s` coprime with `n`), as YCSB scrambles its zipfian keys: hot keys land in every
    /// range partition.
    ZipfScattered(f64),
}

/// The stride of [`KeyDist::ZipfScattered`]'s permutation over `n` keys: near `n` times the golden ratio's
/// fraction, and coprime with `n`.
fn scatter_stride(n: u64) -> u64 {
    let gcd = |mut a: u64, mut b: u64| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    let mut s = ((n as f64) * 0.618_033_988_749_895) as u64 | 1;
    while n > 1 && gcd(s, n) != 1 {
        s += 2;
    }
    s.max(1)
}

/// The key index of `rank` under the scattering permutation with `stride` over `n` keys.
fn scatter(rank: u64, stride: u64, n: u64) -> u64 {
    ((u128::from(rank) * u128::from(stride)) % u128::from(n.max(1))) as u64
}

/// Fractions of reads, updates and read-modify-writes (summing to 1).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Mix {
    pub read: f64,
    pub update: f64,
    pub rmw: f64,
}

impl Mix {
    pub const READS: Mix = Mix {
        read: 1.0,
        update: 0.0,
        rmw: 0.0,
    };
    pub const UPDATES: Mix = Mix {
        read: 0.0,
        update: 1.0,
        rmw: 0.0,
    };
    /// YCSB A (50% read, 50% update), B (95/5), C (read only), F (50% read, 50% read-modify-write).
    pub fn ycsb(workload: char) -> Option<Mix> {
        Some(match workload {
            'a' => Mix {
                read: 0.5,
                update: 0.5,
                rmw: 0.0,
            },
            'b' => Mix {
                read: 0.95,
                update: 0.05,
                rmw: 0.0,
            },
            'c' => Mix::READS,
            'f' => Mix {
                read: 0.5,
                update: 0.0,
                rmw: 0.5,
            },
            _ => return None,
        })
    }
}

/// One phase of load.
#[derive(Debug, Clone)]
pub struct LoadSpec {
    pub addr: SocketAddr,
    pub connections: usize,
    pub pipeline: usize,
    /// Keys 0..keys.
    pub keys: u64,
    pub value_size: usize,
    pub dist: KeyDist,
    pub mix: Mix,
    pub duration: Duration,
    pub seed: u64,
}

/// What a phase measured.
#[derive(Debug, Default)]
pub struct LoadOutcome {
    pub secs: f64,
    pub reads: Latency,
    pub updates: Latency,
    pub rmws: Latency,
    /// Error replies.
    pub errors: u64,
    /// The first error reply's text.
    pub first_error: Option<String>,
}

impl LoadOutcome {
    /// Operations of every kind.
    pub fn ops(&self) -> u64 {
        self.reads.count() + self.updates.count() + self.rmws.count()
    }
}

/// The key of rank `i` among `n`.
pub fn key(i: u64, n: u64) -> [u8; 8] {
    (i.wrapping_mul(u64::MAX / n.max(1))).to_be_bytes()
}

fn push_command(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// Reads one reply; returns its error text if it is an error.
async fn read_reply(
    r: &mut BufReader<TcpStream>,
    line: &mut Vec<u8>,
) -> std::io::Result<Option<String>> {
    line.clear();
    read_line(r, line).await?;
    match line.first() {
        Some(b'-') => Ok(Some(
            String::from_utf8_lossy(&line[1..]).trim_end().to_string(),
        )),
        Some(b'$') => {
            let n: i64 = std::str::from_utf8(&line[1..])
                .ok()
                .and_then(|s| s.trim_end().parse().ok())
                .ok_or_else(|| bad("bulk length"))?;
            if n >= 0 {
                let mut skip = vec![0u8; n as usize + 2];
                r.read_exact(&mut skip).await?;
            }
            Ok(None)
        }
        Some(b'+' | b':' | b'_') => Ok(None),
        _ => Err(bad("unexpected reply")),
    }
}

fn bad(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string())
}

async fn read_line(r: &mut BufReader<TcpStream>, line: &mut Vec<u8>) -> std::io::Result<()> {
    use tokio::io::AsyncBufReadExt;
    let n = r.read_until(b'\n', line).await?;
    if n == 0 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(())
}

#[derive(Clone, Copy)]
enum Kind {
    Read,
    Update,
    Rmw,
}

async fn connection(
    spec: LoadSpec,
    index: usize,
    deadline: Instant,
) -> std::io::Result<LoadOutcome> {
    let stream = TcpStream::connect(spec.addr).await?;
    stream.set_nodelay(true)?;
    let mut r = BufReader::with_capacity(64 << 10, stream);
    let mut rng =
        ChaCha8Rng::seed_from_u64(spec.seed ^ (index as u64 + 1).wrapping_mul(0x9E37_79B9));
    let zipf = match spec.dist {
        KeyDist::Zipf(theta) | KeyDist::ZipfScattered(theta) => {
            Some(Zipfian::new(spec.keys, theta))
        }
        KeyDist::Uniform => None,
    };
    let stride = match spec.dist {
        KeyDist::ZipfScattered(_) => Some(scatter_stride(spec.keys)),
        _ => None,
    };
    let value = vec![b'v'; spec.value_size];
    let mut out = LoadOutcome::default();
    let mut buf = Vec::with_capacity(spec.pipeline * (spec.value_size + 64));
    let mut kinds = Vec::with_capacity(spec.pipeline);
    let mut line = Vec::with_capacity(128);
    while Instant::now() < deadline {
        buf.clear();
        kinds.clear();
        for _ in 0..spec.pipeline {
            let mut rank = match &zipf {
                Some(z) => z.next(&mut rng),
                None => rng.random_range(0..spec.keys),
            };
            if let Some(s) = stride {
                rank = scatter(rank, s, spec.keys);
            }
            let k = key(rank, spec.keys);
            let u: f64 = rng.random();
            let kind = if u < spec.mix.read {
                Kind::Read
            } else if u < spec.mix.read + spec.mix.update {
                Kind::Update
            } else {
                Kind::Rmw
            };
            match kind {
                Kind::Read => push_command(&mut buf, &[b"GET", &k]),
                Kind::Update => push_command(&mut buf, &[b"SET", &k, &value]),
                Kind::Rmw => {
                    push_command(&mut buf, &[b"GET", &k]);
                    push_command(&mut buf, &[b"SET", &k, &value]);
                }
            }
            kinds.push(kind);
        }
        let sent = Instant::now();
        r.get_mut().write_all(&buf).await?;
        for &kind in &kinds {
            let replies = if matches!(kind, Kind::Rmw) { 2 } else { 1 };
            for _ in 0..replies {
                if let Some(e) = read_reply(&mut r, &mut line).await? {
                    out.errors += 1;
                    out.first_error.get_or_insert(e);
                }
            }
            let lat = sent.elapsed();
            match kind {
                Kind::Read => out.reads.record(lat),
                Kind::Update => out.updates.record(lat),
                Kind::Rmw => out.rmws.record(lat),
            }
        }
    }
    Ok(out)
}

/// Runs one phase.
pub fn run(spec: &LoadSpec) -> Result<LoadOutcome> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| BenchError::Usage(format!("starting the load generator: {e}")))?;
    rt.block_on(async {
        let start = Instant::now();
        let deadline = start + spec.duration;
        let tasks: Vec<_> = (0..spec.connections)
            .map(|i| tokio::spawn(connection(spec.clone(), i, deadline)))
            .collect();
        let mut total = LoadOutcome::default();
        for t in tasks {
            let o = t
                .await
                .map_err(|e| BenchError::Usage(format!("load connection failed: {e}")))?
                .map_err(|e| BenchError::Usage(format!("load connection to {}: {e}", spec.addr)))?;
            total.reads.merge(&o.reads);
            total.updates.merge(&o.updates);
            total.rmws.merge(&o.rmws);
            total.errors += o.errors;
            if total.first_error.is_none() {
                total.first_error = o.first_error;
            }
        }
        total.secs = start.elapsed().as_secs_f64();
        Ok(total)
    })
}

/// Loads keys 0..keys with `value_size`-byte values (SET, pipelines of 64 over 8 connections).
pub fn preload(addr: SocketAddr, keys: u64, value_size: usize) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| BenchError::Usage(format!("starting the loader: {e}")))?;
    rt.block_on(async {
        let conns = 8u64;
        let tasks: Vec<_> = (0..conns)
            .map(|c| {
                tokio::spawn(async move {
                    let stream = TcpStream::connect(addr).await?;
                    let mut r = BufReader::new(stream);
                    let value = vec![b'v'; value_size];
                    let mut line = Vec::new();
                    let mut buf = Vec::new();
                    let mine: Vec<u64> = (c..keys).step_by(conns as usize).collect();
                    for chunk in mine.chunks(64) {
                        buf.clear();
                        for &i in chunk {
                            push_command(&mut buf, &[b"SET", &key(i, keys), &value]);
                        }
                        r.get_mut().write_all(&buf).await?;
                        for _ in chunk {
                            if let Some(e) = read_reply(&mut r, &mut line).await? {
                                return Err(std::io::Error::other(e));
                            }
                        }
                    }
                    Ok::<(), std::io::Error>(())
                })
            })
            .collect();
        for t in tasks {
            t.await
                .map_err(|e| BenchError::Usage(format!("preload failed: {e}")))?
                .map_err(|e| BenchError::Usage(format!("preload of {addr}: {e}")))?;
        }
        Ok(())
    })
}

/// Sends one command and returns its reply as text (bulk strings and simple strings; for INFO and SAMPLE
/// timing).
pub fn command(addr: SocketAddr, args: &[&[u8]]) -> Result<String> {
    use std::io::{BufRead, Read, Write};
    let err = |e: std::io::Error| BenchError::Usage(format!("{addr}: {e}"));
    let s = std::net::TcpStream::connect(addr).map_err(err)?;
    let mut r = std::io::BufReader::new(s);
    let mut buf = Vec::new();
    push_command(&mut buf, args);
    r.get_mut().write_all(&buf).map_err(err)?;
    let mut line = String::new();
    r.read_line(&mut line).map_err(err)?;
    match line.as_bytes().first() {
        Some(b'$') => {
            let n: usize = line[1..].trim().parse().unwrap_or(0);
            let mut body = vec![0u8; n + 2];
            r.read_exact(&mut body).map_err(err)?;
            body.truncate(n);
            Ok(String::from_utf8_lossy(&body).into_owned())
        }
        Some(b'-') => Err(BenchError::Usage(format!("{addr}: {}", line.trim()))),
        _ => Ok(line.trim().to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scattering_is_a_permutation_that_spreads_the_hottest_ranks() {
        for n in [1u64, 2, 7, 100, 1000, 100_000] {
            let s = scatter_stride(n);
            let mut seen = vec![false; n as usize];
            for r in 0..n {
                let k = scatter(r, s, n) as usize;
                assert!(!seen[k], "rank {r} of {n} maps to a key taken");
                seen[k] = true;
            }
        }
        // The 8 hottest ranks of 100,000 keys fall in every quarter of the key space.
        let n = 100_000;
        let s = scatter_stride(n);
        let mut quarters = [0; 4];
        for r in 0..8 {
            quarters[(scatter(r, s, n) * 4 / n) as usize] += 1;
        }
        assert!(quarters.iter().all(|&q| q > 0), "{quarters:?}");
    }
}
