//! The cache log: the write-ahead log of the hot-key cache, in generations `DIR/cache-<gen>.log`.
//!
//! A write to a cached key is answered from the cache once its record is durable here (group commit: whoever
//! writes — a waiting connection at durability `none` and `flush`, the log's thread at `sync` — takes every
//! pending record and writes them with one `write`, and at durability `sync` one `fdatasync`). A waiting
//! connection never syncs nor starts a generation: those wait, on a network thread, for the disk. At `none`
//! and `flush` the log's thread syncs what was written within [`BACKGROUND_SYNC`](crate::store::BACKGROUND_SYNC),
//! without holding the file (connections go on writing meanwhile); a generation's start waits for the
//! thread. A record:
//!
//! | bytes | field |
//! |---|---|
//! | 4 | body length `u32` LE |
//! | 4 | xxh3-64 of the body, low 32 bits, LE |
//! | 1 | kind: 1 write, 2 delete (the key is absent), 3 evicted (the key's value now lives in its partition) |
//! | 8 | sequence number `u64` LE (increasing over the server's life) |
//! | 2 | key length `u16` LE, then the key |
//! | 4 + n | (kind 1) value length `u32` LE, then the value |
//!
//! Recovery reads every generation in order; for each key the last record decides: a write or delete is
//! applied to the key's partition, an eviction means the partition already has the newest value. A record
//! cut short at the end of the newest generation is a torn tail (a write that was never acknowledged); any
//! other damage is an error naming the file and offset.
//!
//! Generations: a snapshot starts a new generation, writes every dirty cached value back to its partition,
//! waits until the partitions have made them durable, then deletes the older generations. A record appended
//! after a generation was started goes to the new generation's file, never the old one (which the snapshot
//! deletes even if it wrote that key back before the record).

use crate::error::{ServerError, ServerResult};
use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use strata::Durability;

/// What a record says about its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogRecord {
    Write {
        key: Vec<u8>,
        value: Vec<u8>,
        seq: u64,
    },
    Delete {
        key: Vec<u8>,
        seq: u64,
    },
    Evict {
        key: Vec<u8>,
        seq: u64,
    },
}

impl LogRecord {
    fn key(&self) -> &[u8] {
        match self {
            LogRecord::Write { key, .. }
            | LogRecord::Delete { key, .. }
            | LogRecord::Evict { key, .. } => key,
        }
    }

    fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&[0u8; 8]);
        let (kind, seq) = match self {
            LogRecord::Write { seq, .. } => (1u8, *seq),
            LogRecord::Delete { seq, .. } => (2, *seq),
            LogRecord::Evict { seq, .. } => (3, *seq),
        };
        out.push(kind);
        out.extend_from_slice(&seq.to_le_bytes());
        let key = self.key();
        out.extend_from_slice(&(key.len() as u16).to_le_bytes());
        out.extend_from_slice(key);
        if let LogRecord::Write { value, .. } = self {
            out.extend_from_slice(&(value.len() as u32).to_le_bytes());
            out.extend_from_slice(value);
        }
        let body_len = out.len() - start - 8;
        let sum = xxhash_rust::xxh3::xxh3_64(&out[start + 8..]) as u32;
        out[start..start + 4].copy_from_slice(&(body_len as u32).to_le_bytes());
        out[start + 4..start + 8].copy_from_slice(&sum.to_le_bytes());
    }

    fn decode(body: &[u8]) -> Option<LogRecord> {
        let kind = *body.first()?;
        let seq = u64::from_le_bytes(body.get(1..9)?.try_into().ok()?);
        let klen = u16::from_le_bytes(body.get(9..11)?.try_into().ok()?) as usize;
        let key = body.get(11..11 + klen)?.to_vec();
        let rest = body.get(11 + klen..)?;
        match kind {
            1 => {
                let vlen = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?) as usize;
                let value = rest.get(4..4 + vlen)?.to_vec();
                (rest.len() == 4 + vlen).then_some(LogRecord::Write { key, value, seq })
            }
            2 => rest.is_empty().then_some(LogRecord::Delete { key, seq }),
            3 => rest.is_empty().then_some(LogRecord::Evict { key, seq }),
            _ => None,
        }
    }
}

/// Most bytes of one record body (keys up to 64 KiB, cached values are small, but be generous).
const MAX_BODY: usize = 16 << 20;

fn log_path(dir: &Path, generation: u64) -> PathBuf {
    dir.join(format!("cache-{generation:016}.log"))
}

/// The generations present in `dir`, ascending.
fn generations(dir: &Path) -> ServerResult<Vec<u64>> {
    let mut out = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(ServerError::io(dir, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| ServerError::io(dir, e))?;
        let name = entry.file_name();
        if let Some(g) = name
            .to_str()
            .and_then(|n| n.strip_prefix("cache-"))
            .and_then(|n| n.strip_suffix(".log"))
            .and_then(|n| n.parse::<u64>().ok())
        {
            out.push(g);
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// What recovery found in the cache log.
#[derive(Debug)]
pub struct Recovered {
    /// The last record of each key.
    pub last: HashMap<Vec<u8>, LogRecord>,
    /// The highest sequence number seen.
    pub max_seq: u64,
    /// The generations read (to delete once their records are applied).
    pub generations: Vec<u64>,
}

/// Reads every generation of the cache log in `dir`.
pub fn recover(dir: &Path) -> ServerResult<Recovered> {
    let gens = generations(dir)?;
    let mut last = HashMap::new();
    let mut max_seq = 0;
    for (i, &g) in gens.iter().enumerate() {
        let path = log_path(dir, g);
        let bytes = std::fs::read(&path).map_err(|e| ServerError::io(&path, e))?;
        let newest = i + 1 == gens.len();
        let mut at = 0usize;
        while at < bytes.len() {
            let corrupt = |detail: &str| {
                ServerError::Engine(format!(
                    "corruption in {} at offset {at}: {detail} (the cache log holds acknowledged writes; \
                     move the file away only if losing them is acceptable)",
                    path.display()
                ))
            };
            let Some(head) = bytes.get(at..at + 8) else {
                if newest {
                    break; // torn tail: a record cut short by the crash
                }
                return Err(corrupt("record header cut short"));
            };
            let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
            let sum = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
            if len > MAX_BODY {
                return Err(corrupt("record length out of range"));
            }
            let Some(body) = bytes.get(at + 8..at + 8 + len) else {
                if newest {
                    break;
                }
                return Err(corrupt("record cut short"));
            };
            if xxhash_rust::xxh3::xxh3_64(body) as u32 != sum {
                return Err(corrupt("record checksum mismatch"));
            }
            let rec = LogRecord::decode(body).ok_or_else(|| corrupt("malformed record"))?;
            let seq = match &rec {
                LogRecord::Write { seq, .. }
                | LogRecord::Delete { seq, .. }
                | LogRecord::Evict { seq, .. } => *seq,
            };
            max_seq = max_seq.max(seq);
            last.insert(rec.key().to_vec(), rec);
            at += 8 + len;
        }
    }
    Ok(Recovered {
        last,
        max_seq,
        generations: gens,
    })
}

/// Deletes generations `gens` (their records have been applied to the partitions).
pub fn remove_generations(dir: &Path, gens: &[u64]) -> ServerResult<()> {
    for &g in gens {
        let path = log_path(dir, g);
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(ServerError::io(&path, e)),
        }
    }
    sync_dir(dir);
    Ok(())
}

fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

struct Pending {
    buf: Vec<u8>,
    last_ticket: u64,
    /// Generations started and not yet created: each with the length of `buf` when it was started (the
    /// records before that go to the generation before it).
    rotations: Vec<(u64, usize)>,
    shutdown: bool,
    error: Option<String>,
}

/// The open generation and its sync state; whoever holds it writes the pending records.
struct LogFile {
    /// Shared so the log's thread can sync it without holding the `LogFile`.
    file: Arc<File>,
    /// Written since the last `fdatasync`.
    unsynced: bool,
    last_sync: std::time::Instant,
    /// The batch being written (kept for its allocation).
    batch: Vec<u8>,
}

struct Inner {
    dir: PathBuf,
    durability: Durability,
    pending: Mutex<Pending>,
    file: Mutex<LogFile>,
    work: Condvar,
    done: Condvar,
    durable: AtomicU64,
    notify: tokio::sync::Notify,
    generation: AtomicU64,
}

/// The cache log of a running server. At durability `none` and `flush` a waiter writes the pending records
/// itself when no other thread is writing (one `write` for every record pending, no thread hand-off); at
/// `sync` the log's own thread writes and syncs, so an `fdatasync` never stalls a network thread. The thread
/// also writes what nobody waits for (durability `none`) within [`IDLE_WRITE`], and syncs within
/// [`BACKGROUND_SYNC`](crate::store::BACKGROUND_SYNC).
pub struct CacheLog {
    inner: Arc<Inner>,
    writer: Option<std::thread::JoinHandle<()>>,
}

/// How long records nobody waits for may stay in memory before the log's thread writes them.
pub const IDLE_WRITE: std::time::Duration = std::time::Duration::from_millis(200);

impl CacheLog {
    pub fn start(dir: &Path, generation: u64, durability: Durability) -> ServerResult<CacheLog> {
        let path = log_path(dir, generation);
        let file = File::create(&path).map_err(|e| ServerError::io(&path, e))?;
        file.sync_all().map_err(|e| ServerError::io(&path, e))?;
        sync_dir(dir);
        let inner = Arc::new(Inner {
            dir: dir.to_path_buf(),
            durability,
            pending: Mutex::new(Pending {
                buf: Vec::new(),
                last_ticket: 0,
                rotations: Vec::new(),
                shutdown: false,
                error: None,
            }),
            file: Mutex::new(LogFile {
                file: Arc::new(file),
                unsynced: false,
                last_sync: std::time::Instant::now(),
                batch: Vec::new(),
            }),
            work: Condvar::new(),
            done: Condvar::new(),
            durable: AtomicU64::new(0),
            notify: tokio::sync::Notify::new(),
            generation: AtomicU64::new(generation),
        });
        let w = inner.clone();
        let writer = std::thread::Builder::new()
            .name("strata-cache-log".into())
            .spawn(move || writer_loop(&w))
            .map_err(|e| ServerError::Engine(format!("starting the cache log writer: {e}")))?;
        Ok(CacheLog {
            inner,
            writer: Some(writer),
        })
    }

    pub fn append(&self, rec: &LogRecord) -> u64 {
        let mut p = self.inner.pending.lock();
        rec.encode(&mut p.buf);
        p.last_ticket += 1;
        let t = p.last_ticket;
        drop(p);
        if !self.inner.waiters_write() {
            self.inner.work.notify_one();
        }
        t
    }

    pub fn generation(&self) -> u64 {
        self.inner.generation.load(Ordering::Acquire)
    }

    pub fn rotate(&self, g: u64) {
        let mut p = self.inner.pending.lock();
        let at = p.buf.len();
        p.rotations.push((g, at));
        self.inner.generation.store(g, Ordering::Release);
        drop(p);
        self.inner.work.notify_one();
    }

    pub fn durable(&self) -> u64 {
        self.inner.durable.load(Ordering::Acquire)
    }

    pub fn error(&self) -> Option<String> {
        self.inner.pending.lock().error.clone()
    }

    /// Blocks until every record up to `ticket` is durable.
    pub fn wait(&self, ticket: u64) -> Result<(), String> {
        let mut p = self.inner.pending.lock();
        loop {
            if self.durable() >= ticket {
                return Ok(());
            }
            if let Some(e) = &p.error {
                return Err(e.clone());
            }
            if let Some(mut file) = self.try_write(&p) {
                drop(p);
                self.inner.write_pending(&mut file, false);
                drop(file);
                p = self.inner.pending.lock();
                continue;
            }
            // Whoever writes takes the pending lock before it notifies: no wake-up is missed.
            self.inner.done.wait(&mut p);
        }
    }

    /// Waits until every record up to `ticket` is durable, writing the pending records itself when it can.
    pub async fn wait_async(&self, ticket: u64) -> Result<(), String> {
        loop {
            let notified = self.inner.notify.notified();
            if self.durable() >= ticket {
                return Ok(());
            }
            if let Some(e) = self.error() {
                return Err(e);
            }
            let wrote = {
                let p = self.inner.pending.lock();
                let file = self.try_write(&p);
                drop(p);
                file.map(|mut file| self.inner.write_pending(&mut file, false))
                    .is_some()
            };
            if !wrote {
                notified.await;
            }
        }
    }

    /// The file, if waiters write at this durability, no generation waits to be started (the log's thread
    /// does that) and nobody is writing now. `p`: the pending records, locked.
    fn try_write(&self, p: &Pending) -> Option<parking_lot::MutexGuard<'_, LogFile>> {
        if self.inner.waiters_write() && p.rotations.is_empty() {
            self.inner.file.try_lock()
        } else {
            None
        }
    }
}

impl Drop for CacheLog {
    fn drop(&mut self) {
        self.inner.pending.lock().shutdown = true;
        self.inner.work.notify_one();
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
    }
}

impl Inner {
    /// Waiters write the log themselves (durability `none` and `flush`); at `sync` the log's thread does.
    fn waiters_write(&self) -> bool {
        self.durability != Durability::Sync
    }

    /// Writes every pending record with the file held, then marks them durable and wakes the waiters.
    /// `by_thread`: the log's thread calls, which also starts the generations waiting (each after syncing the
    /// one before) and syncs at durability `sync`. After a failure the log refuses everything: the error is
    /// every waiter's answer.
    fn write_pending(&self, f: &mut LogFile, by_thread: bool) {
        let (ticket, rotations) = {
            let mut p = self.pending.lock();
            if p.error.is_some() || (!by_thread && !p.rotations.is_empty()) {
                return;
            }
            std::mem::swap(&mut f.batch, &mut p.buf);
            (p.last_ticket, std::mem::take(&mut p.rotations))
        };
        let result = (|| -> std::io::Result<()> {
            let mut from = 0;
            for &(g, at) in &rotations {
                f.write(from..at)?;
                f.sync()?;
                let path = log_path(&self.dir, g);
                let file = File::create(&path)?;
                file.sync_all()?;
                sync_dir(&self.dir);
                f.file = Arc::new(file);
                from = at;
            }
            f.write(from..f.batch.len())?;
            if self.durability == Durability::Sync {
                f.sync()?;
            }
            Ok(())
        })();
        f.batch.clear();
        self.finish_write(ticket, result);
    }

    /// Records the outcome of a write (or a sync) of the records up to `ticket` and wakes the waiters.
    fn finish_write(&self, ticket: u64, result: std::io::Result<()>) {
        let mut p = self.pending.lock();
        match result {
            Ok(()) => {
                self.durable.fetch_max(ticket, Ordering::AcqRel);
            }
            Err(e) => p.error = Some(format!("ERR cache log write failed: {e}")),
        }
        drop(p);
        self.done.notify_all();
        self.notify.notify_waiters();
    }

    /// At durability `none` and `flush`, on the log's thread: syncs what was written if the last sync is
    /// [`BACKGROUND_SYNC`](crate::store::BACKGROUND_SYNC) old, after letting go of the file, so connections
    /// go on writing during the `fdatasync`.
    fn background_sync(&self, mut f: parking_lot::MutexGuard<'_, LogFile>) {
        if !f.unsynced || f.last_sync.elapsed() < crate::store::BACKGROUND_SYNC {
            return;
        }
        let file = f.file.clone();
        f.unsynced = false;
        f.last_sync = std::time::Instant::now();
        drop(f);
        if let Err(e) = file.sync_data() {
            self.pending.lock().error = Some(format!("ERR cache log sync failed: {e}"));
            self.done.notify_all();
            self.notify.notify_waiters();
        }
    }
}

impl LogFile {
    /// Writes `range` of the batch to the open generation.
    fn write(&mut self, range: std::ops::Range<usize>) -> std::io::Result<()> {
        if !range.is_empty() {
            (&*self.file).write_all(&self.batch[range])?;
            self.unsynced = true;
        }
        Ok(())
    }

    /// Syncs the open generation if anything was written to it since its last sync.
    fn sync(&mut self) -> std::io::Result<()> {
        if self.unsynced {
            self.file.sync_data()?;
            self.unsynced = false;
            self.last_sync = std::time::Instant::now();
        }
        Ok(())
    }
}

/// The log's thread: writes when woken (rotations, every append at `sync`), every [`IDLE_WRITE`] what is
/// pending, syncs what was written, and at shutdown writes and syncs the rest.
fn writer_loop(inner: &Inner) {
    loop {
        let shutdown = {
            let mut p = inner.pending.lock();
            if p.buf.is_empty() && p.rotations.is_empty() && !p.shutdown {
                inner.work.wait_for(&mut p, IDLE_WRITE);
            }
            p.shutdown
        };
        let mut file = inner.file.lock();
        inner.write_pending(&mut file, true);
        if inner.pending.lock().error.is_some() {
            return;
        }
        if shutdown {
            let _ = file.sync();
            return;
        }
        inner.background_sync(file);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(key: &[u8], seq: u64) -> LogRecord {
        LogRecord::Write {
            key: key.to_vec(),
            value: vec![seq as u8; 8],
            seq,
        }
    }

    /// A record appended after a generation was started is in the new generation's file even when the
    /// records before it are written in the same batch, so deleting the old generation loses nothing written
    /// after the snapshot began.
    #[test]
    fn records_after_a_generation_starts_go_to_its_file() {
        for durability in [Durability::None, Durability::Flush, Durability::Sync] {
            let dir = tempfile::tempdir().unwrap();
            let log = CacheLog::start(dir.path(), 1, durability).unwrap();
            log.append(&write(b"a", 1));
            log.rotate(2);
            let t = log.append(&write(b"b", 2));
            log.wait(t).unwrap();
            remove_generations(dir.path(), &[1]).unwrap();
            let r = recover(dir.path()).unwrap();
            assert_eq!(r.generations, vec![2], "{durability:?}");
            assert_eq!(
                r.last.keys().collect::<Vec<_>>(),
                vec![&b"b".to_vec()],
                "{durability:?}: only the record after the rotation is in generation 2"
            );
        }
    }

    /// At `flush` connections write the records; the log's thread syncs them within the background period.
    #[test]
    fn the_logs_thread_syncs_what_connections_wrote() {
        let dir = tempfile::tempdir().unwrap();
        let log = CacheLog::start(dir.path(), 1, Durability::Flush).unwrap();
        let t = log.append(&write(b"a", 1));
        log.wait(t).unwrap();
        assert!(
            log.inner.file.lock().unsynced,
            "the waiter wrote without syncing"
        );
        let deadline = std::time::Instant::now() + crate::store::BACKGROUND_SYNC + IDLE_WRITE * 10;
        while log.inner.file.lock().unsynced {
            assert!(
                std::time::Instant::now() < deadline,
                "the log's thread did not sync in the background"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert_eq!(log.durable(), t);
    }

    #[test]
    fn records_round_trip_and_the_last_record_per_key_wins() {
        let dir = tempfile::tempdir().unwrap();
        let log = CacheLog::start(dir.path(), 1, Durability::Flush).unwrap();
        let t1 = log.append(&LogRecord::Write {
            key: b"a".to_vec(),
            value: b"1".to_vec(),
            seq: 1,
        });
        log.append(&LogRecord::Write {
            key: b"b".to_vec(),
            value: vec![7; 300],
            seq: 2,
        });
        log.rotate(2);
        log.append(&LogRecord::Delete {
            key: b"a".to_vec(),
            seq: 3,
        });
        let t4 = log.append(&LogRecord::Evict {
            key: b"b".to_vec(),
            seq: 4,
        });
        log.wait(t4).unwrap();
        assert!(log.durable() >= t1);
        drop(log);
        let Recovered {
            last,
            max_seq,
            generations: gens,
        } = recover(dir.path()).unwrap();
        assert_eq!(gens, vec![1, 2]);
        assert_eq!(max_seq, 4);
        assert_eq!(
            last[&b"a"[..]],
            LogRecord::Delete {
                key: b"a".to_vec(),
                seq: 3
            }
        );
        assert_eq!(
            last[&b"b"[..]],
            LogRecord::Evict {
                key: b"b".to_vec(),
                seq: 4
            }
        );
        remove_generations(dir.path(), &gens).unwrap();
        assert!(recover(dir.path()).unwrap().last.is_empty());
    }

    #[test]
    fn a_torn_tail_is_dropped_and_damage_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let log = CacheLog::start(dir.path(), 5, Durability::Flush).unwrap();
        let t = log.append(&LogRecord::Write {
            key: b"k".to_vec(),
            value: b"v".to_vec(),
            seq: 9,
        });
        log.wait(t).unwrap();
        drop(log);
        let path = log_path(dir.path(), 5);
        let good = std::fs::read(&path).unwrap();
        let mut torn = good.clone();
        torn.extend_from_slice(&good[..good.len() - 3]);
        std::fs::write(&path, &torn).unwrap();
        assert_eq!(recover(dir.path()).unwrap().last.len(), 1);
        let mut bad = good.clone();
        bad[12] ^= 1;
        std::fs::write(&path, &bad).unwrap();
        let e = recover(dir.path()).unwrap_err().to_string();
        assert!(e.contains("checksum") && e.contains("offset 0"), "{e}");
    }
}
