//! `strata serve` as a process: kill -9 under a writing client, at each durability, then a restart that
//! must hold every acknowledged write (durability flush and sync; at none, every write acknowledged more
//! than the background-sync interval before the kill) and nothing that was never written.
//!
//! Iterations per durability: `STRATA_CRASH_ITERATIONS` (default 3).
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_strata");

fn iterations() -> usize {
    std::env::var("STRATA_CRASH_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
}

/// Starts `strata serve` on a free port; returns the child and its address.
fn serve(dir: &std::path::Path, extra: &[&str]) -> (Child, String) {
    let mut child = Command::new(BIN)
        .args(["serve", "--db"])
        .arg(dir)
        .args(["--port", "0", "--partitions", "3", "--io-threads", "1"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("strata serve: listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_string();
    (child, addr)
}

/// A minimal RESP client: sends commands, reads one simple or bulk reply per command.
struct Client {
    stream: BufReader<TcpStream>,
}

impl Client {
    fn connect(addr: &str) -> Client {
        let stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        Client {
            stream: BufReader::new(stream),
        }
    }

    fn send(&mut self, args: &[&[u8]]) -> std::io::Result<()> {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
        self.stream.get_mut().write_all(&out)
    }

    /// One reply: `Ok(Some(bytes))` for a bulk or simple string, `Ok(None)` for null.
    fn reply(&mut self) -> std::io::Result<Option<Vec<u8>>> {
        let mut line = Vec::new();
        self.stream.read_until(b'\n', &mut line)?;
        if line.is_empty() {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        match line[0] {
            b'+' => Ok(Some(line[1..line.len() - 2].to_vec())),
            b'$' => {
                let n: i64 = std::str::from_utf8(&line[1..line.len() - 2])
                    .unwrap()
                    .parse()
                    .unwrap();
                if n < 0 {
                    return Ok(None);
                }
                let mut buf = vec![0u8; n as usize + 2];
                self.stream.read_exact(&mut buf)?;
                buf.truncate(n as usize);
                Ok(Some(buf))
            }
            _ => panic!("unexpected reply {:?}", String::from_utf8_lossy(&line)),
        }
    }
}

/// Writes `SET k<i> v<i>` in pipelines of 16 until the server dies; returns the acknowledged indexes.
fn write_until_killed(addr: &str, acked: &mut Vec<u32>, deadline: Instant) {
    let mut c = Client::connect(addr);
    let mut next = 0u32;
    loop {
        let batch: Vec<u32> = (next..next + 16).collect();
        next += 16;
        for i in &batch {
            let k = format!("k{i}");
            let v = format!("v{i}");
            if c.send(&[b"SET", k.as_bytes(), v.as_bytes()]).is_err() {
                return;
            }
        }
        for i in batch {
            match c.reply() {
                Ok(Some(r)) if r == b"OK" => acked.push(i),
                _ => return,
            }
        }
        if Instant::now() > deadline {
            return;
        }
    }
}

/// Writes, kills the server, restarts it and checks the keys. At durability `none` the client stops writing
/// `quiet` before the kill: writes acknowledged that long before are synced in the background and must
/// survive too.
fn kill_run(durability: &str, quiet: Option<Duration>) {
    for iteration in 0..iterations() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("srv");
        let (mut child, addr) = serve(&db, &["--durability", durability]);
        let writing = Duration::from_millis(150 + 97 * iteration as u64 % 400);
        let kill_after = writing + quiet.unwrap_or_default();
        let deadline = Instant::now()
            + if quiet.is_some() {
                writing
            } else {
                Duration::from_secs(30)
            };
        let pid = child.id();
        let killer = std::thread::spawn(move || {
            std::thread::sleep(kill_after);
            // SAFETY: sending SIGKILL to our own child process, which is still ours to reap.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        });
        let mut acked = Vec::new();
        write_until_killed(&addr, &mut acked, deadline);
        killer.join().unwrap();
        let _ = child.wait();
        assert!(
            !acked.is_empty(),
            "no write was acknowledged before the kill"
        );
        let (mut child, addr) = serve(&db, &["--durability", durability]);
        let mut c = Client::connect(&addr);
        let last = *acked.last().unwrap();
        // Every acknowledged key, and the next pipeline's worth beyond, which may or may not be there.
        let mut present = 0;
        for i in 0..=last + 16 {
            let k = format!("k{i}");
            c.send(&[b"GET", k.as_bytes()]).unwrap();
            match c.reply().unwrap() {
                Some(v) => {
                    assert_eq!(v, format!("v{i}").into_bytes(), "key {k} has a wrong value");
                    present += 1;
                }
                None if i <= last => {
                    panic!(
                        "durability {durability}: acknowledged key {k} lost (iteration {iteration}, {} acked)",
                        acked.len()
                    )
                }
                None => {}
            }
        }
        // Nothing that was never written.
        let k = format!("k{}", last + 1000);
        c.send(&[b"GET", k.as_bytes()]).unwrap();
        assert_eq!(c.reply().unwrap(), None);
        eprintln!(
            "durability {durability}, iteration {iteration}: {} acknowledged, {present} present after restart",
            acked.len()
        );
        child.kill().unwrap();
        let _ = child.wait();
    }
}

#[test]
fn kill_9_keeps_every_acknowledged_write_at_flush() {
    kill_run("flush", None);
}

#[test]
fn kill_9_keeps_every_acknowledged_write_at_sync() {
    kill_run("sync", None);
}

#[test]
fn kill_9_at_durability_none_keeps_writes_acknowledged_a_second_before() {
    kill_run("none", Some(Duration::from_millis(1600)));
}

#[test]
fn serve_refuses_bad_flags_with_exit_64() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        vec!["--partitions", "0"],
        vec!["--partitioning", "hash", "--split-keys", "m"],
        vec![
            "--partitioning",
            "range",
            "--partitions",
            "3",
            "--split-keys",
            "m",
        ],
        vec!["--index", "nope"],
    ] {
        let out = Command::new(BIN)
            .args(["serve", "--port", "0", "--db"])
            .arg(dir.path().join("s"))
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(64), "{args:?}: {out:?}");
    }
}

/// Hot keys (a few keys written over and over, so the write-back cache takes them, snapshots and evicts):
/// after kill -9 and a restart every key holds its last acknowledged value or a later one.
#[test]
fn kill_9_keeps_acknowledged_writes_of_cached_hot_keys() {
    const KEYS: u32 = 20;
    for iteration in 0..iterations() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("srv");
        let flags = [
            "--durability",
            "flush",
            "--hot-threshold",
            "2",
            "--snapshot-ms",
            "100",
            "--cache-entries",
            "12",
        ];
        let (mut child, addr) = serve(&db, &flags);
        let pid = child.id();
        let kill_after = Duration::from_millis(300 + 131 * iteration as u64 % 500);
        let killer = std::thread::spawn(move || {
            std::thread::sleep(kill_after);
            // SAFETY: sending SIGKILL to our own child process, which is still ours to reap.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        });
        let mut last_acked = vec![None::<u32>; KEYS as usize];
        let mut c = Client::connect(&addr);
        let mut next = 0u32;
        'writing: loop {
            let batch: Vec<u32> = (next..next + 16).collect();
            next += 16;
            for i in &batch {
                let k = format!("h{}", i % KEYS);
                if c.send(&[b"SET", k.as_bytes(), i.to_string().as_bytes()])
                    .is_err()
                {
                    break 'writing;
                }
            }
            for i in batch {
                match c.reply() {
                    Ok(Some(r)) if r == b"OK" => last_acked[(i % KEYS) as usize] = Some(i),
                    _ => break 'writing,
                }
            }
        }
        killer.join().unwrap();
        let _ = child.wait();
        let (mut child, addr) = serve(&db, &flags);
        let mut c = Client::connect(&addr);
        for (k, acked) in last_acked.iter().enumerate() {
            let key = format!("h{k}");
            c.send(&[b"GET", key.as_bytes()]).unwrap();
            let got = c.reply().unwrap();
            match (acked, got) {
                (None, _) => {}
                (Some(a), None) => panic!("key {key}: acknowledged value {a} lost"),
                (Some(a), Some(v)) => {
                    let v: u32 = String::from_utf8(v).unwrap().parse().unwrap();
                    assert!(
                        v >= *a && v % KEYS == k as u32,
                        "key {key}: {v} after acknowledged {a}"
                    );
                }
            }
        }
        eprintln!("hot keys, iteration {iteration}: {next} writes sent");
        child.kill().unwrap();
        let _ = child.wait();
    }
}
