//! Shared pieces of the integration tests: a child test process that writes and prints the index of every
//! acknowledged write, killed with SIGKILL after a delay (the process-kill tests); a temporary directory on
//! tmpfs (the hash family's tests).

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the test failing
#![allow(dead_code)] // each test binary includes this module and uses some of it

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Iterations of a kill test: `STRATA_CRASH_ITERATIONS`, 4 by default.
pub fn iterations() -> u64 {
    std::env::var("STRATA_CRASH_ITERATIONS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4)
}

/// Runs the ignored test `child` of this test binary with `env` set, kills it with SIGKILL after
/// `wait_ms`, and returns how many writes it acknowledged: one more than the last number it printed on a
/// line of its own (0 if none).
pub fn run_and_kill(child: &str, env: &[(&str, String)], wait_ms: u64) -> u64 {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = Command::new(&exe);
    cmd.args([
        "--exact",
        child,
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut process = cmd.spawn().unwrap();
    let stdout = process.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut last: Option<u64> = None;
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Ok(k) = line.trim().parse::<u64>() {
                last = Some(k);
            }
        }
        last
    });
    std::thread::sleep(Duration::from_millis(wait_ms));
    process.kill().unwrap();
    process.wait().unwrap();
    reader.join().unwrap().map_or(0, |k| k + 1)
}

/// A temporary directory on tmpfs when there is one (the hash region's fast, eADR-style home), else in the
/// system's temporary directory.
pub fn memory_tempdir() -> tempfile::TempDir {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        tempfile::tempdir_in(shm).unwrap()
    } else {
        tempfile::tempdir().unwrap()
    }
}

/// The families whose checkpoints finish in the background (every one with files a checkpoint writes).
pub fn background_checkpoint_families() -> Vec<strata::IndexConfig> {
    vec![
        strata::IndexConfig::default(),
        strata::IndexConfig::BeTree(strata::options::BeTreeOptions::default()),
        strata::IndexKind::Dynamized.default_config(),
        strata::IndexKind::Learned.default_config(),
    ]
}

/// WAL files in the directory `/db` of `mem`.
pub fn wal_files(mem: &strata::vfs::MemVfs) -> usize {
    use strata::vfs::Vfs;
    mem.list_dir(std::path::Path::new("/db"))
        .unwrap()
        .iter()
        .filter(|n| n.starts_with("wal-"))
        .count()
}

/// Waits (bounded) until no checkpoint is finishing in `/db` of `mem`: the WAL it retires is gone.
pub fn wait_checkpoint_done(mem: &strata::vfs::MemVfs) {
    for _ in 0..60_000 {
        if wal_files(mem) == 1 {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("a checkpoint in the background did not finish within a minute");
}

/// The write of record `i` the checkpoint tests make: its big-endian number as the key, a small value.
pub fn numbered_put(i: u64) -> strata::WriteOp {
    strata::WriteOp::Put {
        key: i.to_be_bytes().to_vec(),
        value: (i % 251).to_be_bytes().to_vec(),
    }
}
