//! Batched page reads of a shard file: the pages one query needs, known up front, read together by a small
//! pool of I/O threads — in *spans* of nearby pages, one positional read per span into page-aligned buffers
//! (so O_DIRECT applies) — instead of one dependent read after another.
//!
//! ## Spans
//! The sorted pages are cut into spans ([`spans_of`]): a span takes in the next wanted page while the gap
//! of unwanted pages before it is at most [`MAX_GAP_BYTES`] and the span stays within [`MAX_SPAN_BYTES`]. A
//! wide sampling query wants pages densely spread over its range's pages (k = 1000 draws over a few hundred
//! or thousand pages), so its reads become a few dozen to a few hundred larger ones; on the disk measured a
//! read costs about as much as 4 pages of bandwidth. Measured (10M records, O_DIRECT, 30 queries of
//! k = 1000, shared noisy machine), read calls / pages per query: at 1% 462 / 469 one page per read, 54 /
//! 409 in spans; at 10% 1,060 / 1,060 and 151 / 2,972.
//!
//! ## Pool
//! [`IO_THREADS`] threads, started on first use and kept for the life of the process, each blocking in reads
//! it takes from one shared queue. A batch of n spans is split into w = min(IO_THREADS + 1,
//! ⌈n / [`SPANS_PER_GROUP`]⌉) striped groups (group g holds the g-th, (g + w)-th, … span of the sorted
//! list): the caller reads group 0 itself and waits for the pool's answers for the others. With one group
//! (a small batch, or a pool whose threads could not start) the caller reads every span itself, and so does
//! a batch read on a pool thread or inside the caller's own task of [`run_jobs`] (which spreads several
//! shards' batches over the pool): no pool thread ever waits for the pool.
//!
//! ## Invariants
//! * Every page of every span — the wanted pages and the gap pages between them — is read exactly once and
//!   its checksum verified (by `ImmutableFile::read_pages`), by whichever thread reads it; reads are counted
//!   in the file's `IoStats` (one call per span, with its bytes).
//! * A damaged or short page of a span (gap pages included: damage met by a read is reported) fails the
//!   whole batch with `Error::Corruption` naming the file and the page's offset (when several groups fail,
//!   the error of the lowest group); nothing of a failed batch is served.
//! * Pages must be sorted, distinct and inside the file (the caller's duty; a page past the end is a short
//!   read, hence corruption). Gap pages lie between two wanted pages, so inside the file too.
//!
//! ## Cost
//! One read call per span (at most one per page) and the spans' bytes (at most [`MAX_GAP_BYTES`] more per
//! gap than the pages wanted), about ⌈spans / w⌉ deep per thread; per batch w − 1 jobs through the queue and
//! w page-aligned buffers. The caller's thread also reads, so a batch never waits for a busy pool alone.

use crate::error::{Error, Result};
use crate::storage::PageBuf;
use crate::storage::immutable_file::ImmutableFile;
use parking_lot::Mutex;
use std::cell::Cell;
use std::sync::{Arc, OnceLock, mpsc};

/// Threads of the shard I/O pool.
pub const IO_THREADS: usize = 8;
/// Spans a group should have at least before a batch is split further.
pub const SPANS_PER_GROUP: usize = 2;
/// Bytes of pages not wanted that a read may span to join two wanted pages. On the virtio disk measured
/// (O_DIRECT, 2026-11) a separate read costs about 1/35,000 s of the disk's random-read rate whatever the
/// depth, and a page of gap about 7 µs of its ~600 MB/s, so a gap of up to ~4 pages costs less read than
/// skipped; 32 KiB (8 pages of 4 KiB) measured as good as any at 1% and 10% of 10M records (module doc).
pub const MAX_GAP_BYTES: usize = 32 << 10;
/// Most bytes one read covers, so a batch's reads still spread over the pool's threads.
pub const MAX_SPAN_BYTES: usize = 256 << 10;

type Job = Box<dyn FnOnce() + Send + 'static>;

/// The shard I/O pool: a queue of jobs and the threads that run them.
struct Pool {
    jobs: mpsc::Sender<Job>,
}

/// The process's pool, started on first use; `None` if no thread could be started.
fn pool() -> Option<&'static Pool> {
    static POOL: OnceLock<Option<Pool>> = OnceLock::new();
    POOL.get_or_init(|| {
        let (jobs, queue) = mpsc::channel::<Job>();
        let queue = Arc::new(Mutex::new(queue));
        let mut started = 0;
        for i in 0..IO_THREADS {
            let queue = queue.clone();
            let worker = move || {
                // A pool thread reads a batch it is given itself (see `INLINE`).
                INLINE.with(|i| i.set(true));
                loop {
                    // One thread waits in `recv`, the others for the lock: a job goes to one of them.
                    let job = match queue.lock().recv() {
                        Ok(job) => job,
                        Err(_) => return,
                    };
                    job();
                }
            };
            let spawned = std::thread::Builder::new()
                .name(format!("strata-shard-io-{i}"))
                .spawn(worker);
            started += usize::from(spawned.is_ok());
        }
        (started > 0).then_some(Pool { jobs })
    })
    .as_ref()
}

thread_local! {
    static BATCHED: Cell<bool> = const { Cell::new(true) };
    /// Set on the pool's threads, and on a caller while it runs its own share of [`run_jobs`]: a batch read
    /// there reads every page on the thread itself instead of queueing groups for the pool. So no pool
    /// thread ever waits for the pool (which could deadlock when every thread waited), and tasks that
    /// [`run_jobs`] already spread over the pool do not queue again behind each other.
    static INLINE: Cell<bool> = const { Cell::new(false) };
}

/// Whether disk shards read a query's pages as one batch on this thread (the default), or one page at a
/// time through their page cache.
pub fn batched_reads() -> bool {
    BATCHED.with(Cell::get)
}

/// Runs `f` with batched reads `on` or off on this thread (for comparisons and tests: answers are the same
/// either way), then restores the previous setting.
pub fn with_batched_reads<T>(on: bool, f: impl FnOnce() -> T) -> T {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            BATCHED.with(|b| b.set(self.0));
        }
    }
    let _restore = Restore(BATCHED.with(|b| b.replace(on)));
    f()
}

/// The pages of one batch, read and checksum-verified.
pub struct PageBatch {
    /// The batch's page numbers, sorted and distinct.
    pages: Vec<u64>,
    /// Per page of `pages`: its group and its byte offset in that group's buffer.
    at: Vec<(usize, usize)>,
    /// Group g holds its spans' pages back to back (gap pages included), in page order.
    groups: Vec<PageBuf>,
    page_size: usize,
}

impl PageBatch {
    /// The page numbers read, ascending.
    pub fn pages(&self) -> &[u64] {
        &self.pages
    }

    /// Page `page_no` (trailer included) if the batch holds it.
    pub fn page(&self, page_no: u64) -> Option<&[u8]> {
        let j = self.pages.binary_search(&page_no).ok()?;
        Some(self.at(j))
    }

    /// The `j`-th page of the batch (in ascending page order).
    pub fn at(&self, j: usize) -> &[u8] {
        let (g, at) = self.at[j];
        &self.groups[g][at..at + self.page_size]
    }
}

/// [`INLINE`] on for this thread until dropped (then as before, also when unwinding).
struct InlineReads(bool);

impl InlineReads {
    fn on() -> InlineReads {
        InlineReads(INLINE.with(|i| i.replace(true)))
    }
}

impl Drop for InlineReads {
    fn drop(&mut self) {
        INLINE.with(|i| i.set(self.0));
    }
}

/// A unit of work for [`run_jobs`].
pub type Task = Box<dyn FnOnce() -> Result<()> + Send + 'static>;

/// Runs `tasks` on the shard I/O pool (the caller runs the first itself) and waits for all of them; the
/// error of the first failing task (in `tasks` order) if any. For independent reads of several files, such
/// as the bound pages of every disk shard a query reads.
pub fn run_jobs(mut tasks: Vec<Task>) -> Result<()> {
    if tasks.is_empty() {
        return Ok(());
    }
    let first = tasks.remove(0);
    let (done, answers) = mpsc::channel::<(usize, Result<()>)>();
    let rest = tasks.len();
    for (g, task) in tasks.into_iter().enumerate() {
        let done = done.clone();
        let job: Job = Box::new(move || {
            let _ = done.send((g + 1, task()));
        });
        // On a pool thread, or inside the caller's own share of an outer `run_jobs`, the tasks run here:
        // a pool thread that queued work and waited for it could wait on work queued behind its own kind.
        match pool().filter(|_| !INLINE.with(Cell::get)) {
            Some(pool) => {
                if let Err(mpsc::SendError(job)) = pool.jobs.send(job) {
                    job();
                }
            }
            None => job(),
        }
    }
    drop(done);
    let first = {
        let _inline = InlineReads::on();
        first()
    };
    let mut failed: Option<(usize, Error)> = first.err().map(|e| (0, e));
    let mut answered = 0;
    for (g, r) in answers.iter() {
        answered += 1;
        if let Err(e) = r
            && failed.as_ref().is_none_or(|(f, _)| g < *f)
        {
            failed = Some((g, e));
        }
    }
    if let Some((_, e)) = failed {
        return Err(e);
    }
    if answered < rest {
        return Err(Error::Io {
            path: std::path::PathBuf::new(),
            source: std::io::Error::other("a shard I/O thread stopped before answering"),
        });
    }
    Ok(())
}

/// The spans a batch of `pages` (sorted, distinct) is read in: `(first page, pages)`, each covering wanted
/// pages whose gaps (pages not wanted in between) are at most `max_gap` pages, and at most `max_pages`
/// pages long. One read of a span costs one call; its gap pages cost only their bytes.
pub fn spans_of(pages: &[u64], max_gap: u64, max_pages: u64) -> Vec<(u64, u64)> {
    let mut spans: Vec<(u64, u64)> = Vec::new();
    for &p in pages {
        match spans.last_mut() {
            Some((first, len))
                if p - (*first + *len) <= max_gap && p + 1 - *first <= max_pages.max(1) =>
            {
                *len = p + 1 - *first;
            }
            _ => spans.push((p, 1)),
        }
    }
    spans
}

/// The gap (in pages) a span may bridge, and the most pages it may cover, for `page_size`-byte pages:
/// [`MAX_GAP_BYTES`] and [`MAX_SPAN_BYTES`] in whole pages (at least one page per span).
pub fn span_limits(page_size: usize) -> (u64, u64) {
    let ps = page_size.max(1);
    (
        (MAX_GAP_BYTES / ps) as u64,
        (MAX_SPAN_BYTES / ps).max(1) as u64,
    )
}

/// Reads `spans` of `file` into consecutive pages of a new buffer, one call per span.
fn read_spans(file: &ImmutableFile, spans: &[(u64, u64)], page_size: usize) -> Result<PageBuf> {
    let total: u64 = spans.iter().map(|&(_, n)| n).sum();
    let mut buf = PageBuf::new((total as usize).max(1) * page_size);
    let mut at = 0;
    for &(first, n) in spans {
        let len = n as usize * page_size;
        file.read_pages(first, &mut buf[at..at + len])?;
        at += len;
    }
    Ok(buf)
}

/// Reads `pages` (sorted, distinct) of `file` (`page_size`-byte pages, `path` for errors) as one batch; see
/// the module doc.
pub fn read_batch(
    file: &Arc<ImmutableFile>,
    path: &std::path::Path,
    page_size: usize,
    pages: Vec<u64>,
) -> Result<PageBatch> {
    debug_assert!(pages.windows(2).all(|w| w[0] < w[1]));
    let (max_gap, max_pages) = span_limits(page_size);
    let spans = spans_of(&pages, max_gap, max_pages);
    let n = spans.len();
    let pool = pool().filter(|_| !INLINE.with(Cell::get));
    let w = match pool {
        Some(_) => n.div_ceil(SPANS_PER_GROUP).clamp(1, IO_THREADS + 1),
        None => 1,
    };
    let group =
        |g: usize| -> Vec<(u64, u64)> { spans.iter().skip(g).step_by(w).copied().collect() };
    let (done, answers) = mpsc::channel::<(usize, Result<PageBuf>)>();
    if let Some(pool) = pool {
        for g in 1..w {
            let (list, file, done) = (group(g), file.clone(), done.clone());
            let job: Job = Box::new(move || {
                let _ = done.send((g, read_spans(&file, &list, page_size)));
            });
            // A pool whose threads are gone hands the job back: run it here.
            if let Err(mpsc::SendError(job)) = pool.jobs.send(job) {
                job();
            }
        }
    }
    drop(done);
    let mut groups: Vec<Option<PageBuf>> = (0..w).map(|_| None).collect();
    let mut failed: Option<(usize, Error)> = None;
    let mut answer = |g: usize, r: Result<PageBuf>| match r {
        Ok(buf) => groups[g] = Some(buf),
        Err(e) if failed.as_ref().is_none_or(|(f, _)| g < *f) => failed = Some((g, e)),
        Err(_) => {}
    };
    answer(0, read_spans(file, &group(0), page_size));
    for (g, r) in answers.iter() {
        answer(g, r);
    }
    if let Some((_, e)) = failed {
        return Err(e);
    }
    let groups: Option<Vec<PageBuf>> = groups.into_iter().collect();
    let Some(groups) = groups else {
        return Err(Error::Io {
            path: path.to_path_buf(),
            source: std::io::Error::other("a shard I/O thread stopped before answering"),
        });
    };
    // Where each wanted page landed: span s is in group s % w, after the earlier spans of that group.
    let mut at = Vec::with_capacity(pages.len());
    let mut filled = vec![0usize; w];
    let mut wanted = pages.iter().peekable();
    for (s, &(first, len)) in spans.iter().enumerate() {
        let g = s % w;
        while let Some(&p) = wanted.next_if(|&&p| p < first + len) {
            at.push((g, filled[g] + (p - first) as usize * page_size));
        }
        filled[g] += len as usize * page_size;
    }
    Ok(PageBatch {
        pages,
        at,
        groups,
        page_size,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// Spans join wanted pages across gaps of at most `max_gap` pages, up to `max_pages` long.
    #[test]
    fn spans_join_near_pages_within_their_limits() {
        assert!(spans_of(&[], 8, 64).is_empty());
        assert_eq!(spans_of(&[5], 8, 64), [(5, 1)]);
        // Gaps of 0, 8 (joined) and 9 (not) pages.
        assert_eq!(spans_of(&[1, 2, 11, 21], 8, 64), [(1, 11), (21, 1)]);
        assert_eq!(spans_of(&[1, 2, 11, 21], 0, 64), [(1, 2), (11, 1), (21, 1)]);
        // Dense pages cut at the span limit.
        let dense: Vec<u64> = (100..250).collect();
        assert_eq!(spans_of(&dense, 8, 64), [(100, 64), (164, 64), (228, 22)]);
        assert_eq!(spans_of(&[3, 4, 5], 8, 1), [(3, 1), (4, 1), (5, 1)]);
        assert_eq!(span_limits(4096), (8, 64));
        assert_eq!(span_limits(64 << 10), (0, 4));
        assert_eq!(span_limits(4 << 20), (0, 1));
    }

    /// Tasks that themselves spread work with `run_jobs` (more of them than the pool has threads) finish:
    /// no pool thread waits for work queued behind the tasks it is running.
    #[test]
    fn nested_jobs_never_wait_on_the_pool() {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let ran = Arc::new(AtomicUsize::new(0));
            let outer: Vec<Task> = (0..4 * (IO_THREADS + 1))
                .map(|_| {
                    let ran = ran.clone();
                    Box::new(move || {
                        let inner: Vec<Task> = (0..IO_THREADS + 1)
                            .map(|_| {
                                let ran = ran.clone();
                                Box::new(move || {
                                    ran.fetch_add(1, Ordering::Relaxed);
                                    std::thread::sleep(Duration::from_millis(1));
                                    Ok(())
                                }) as Task
                            })
                            .collect();
                        run_jobs(inner)
                    }) as Task
                })
                .collect();
            let r = run_jobs(outer);
            let _ = tx.send((r.is_ok(), ran.load(Ordering::Relaxed)));
        });
        let (ok, ran) = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("nested run_jobs did not finish: pool threads wait on the pool");
        assert!(ok);
        assert_eq!(ran, 4 * (IO_THREADS + 1) * (IO_THREADS + 1));
    }
}
