//! Cache snapshots: periodically, every dirty cached value is written into its partition and the cache log's
//! older generations are deleted (see `cache`'s module doc).

use super::executor::Executor;
use super::{Job, Op};
use crate::cache::HotCache;
use crate::error::{ServerError, ServerResult};
use crossbeam_channel::{RecvTimeoutError, Sender};
use parking_lot::RwLock;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Takes one snapshot: starts a new log generation, has every partition write its dirty cached values into
/// itself (and commit), then deletes the older generations.
pub(crate) fn take(
    cache: &HotCache,
    partitions: &RwLock<Vec<Arc<Executor>>>,
    dir: &Path,
) -> ServerResult<()> {
    cache.age();
    let old = cache.rotate();
    let mut waiting = Vec::new();
    for (p, exec) in partitions.read().iter().enumerate() {
        let (reply, rx) = tokio::sync::oneshot::channel();
        exec.submit(Job {
            ops: smallvec::smallvec![Op::FlushCached],
            reply,
        })
        .map_err(|_| ServerError::Engine(format!("partition {p} has stopped")))?;
        waiting.push((p, rx));
    }
    for (p, rx) in waiting {
        let reply = rx
            .blocking_recv()
            .map_err(|_| ServerError::Engine(format!("partition {p} stopped during a snapshot")))?;
        if let Some(crate::store::OpResult::Error(e)) = reply.results.into_iter().next() {
            return Err(ServerError::Engine(format!(
                "snapshot of partition {p}: {e}"
            )));
        }
    }
    cache.retire(dir, &old)
}

/// Starts the snapshot thread; dropping the returned sender stops it.
pub(super) fn spawn(
    cache: Arc<HotCache>,
    partitions: Arc<RwLock<Vec<Arc<Executor>>>>,
    dir: PathBuf,
    every: Duration,
) -> ServerResult<(Sender<()>, std::thread::JoinHandle<()>)> {
    let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
    let thread = std::thread::Builder::new()
        .name("strata-snapshot".into())
        .spawn(move || {
            loop {
                match stopped.recv_timeout(every) {
                    Err(RecvTimeoutError::Timeout) => {
                        // A failed snapshot leaves the log generations in place: nothing is lost, the next
                        // snapshot tries again.
                        let _ = take(&cache, &partitions, &dir);
                    }
                    _ => return,
                }
            }
        })
        .map_err(|e| ServerError::Engine(format!("starting the snapshot thread: {e}")))?;
    Ok((stop, thread))
}
