//! The background threads' place on the CPU: their scheduling priority and the CPU time they use.
//!
//! On a machine with few cores the writer shares them with the flusher, the merger and the key-filter
//! rebuild. The merger and the rebuild *can* run at a lower priority (a higher nice value,
//! `STRATA_DYN_NICE=<merger>,<key filter>`), but by default they do not: measured on the `irs` suite at 10M
//! records on 2 busy cores, a merger at nice +5 fell far enough behind that the flusher waited at the pending
//! shards' bound (`max_pending_shards`) behind it, and with up to 96 pending shards to probe each flush cost
//! more: writer stalls went from 21 (0.75 s) to 196 (4.2 s) and the flusher's CPU time from 2.3 s to 3.3 s.
//! The writer waits on the merger through that bound, so the merger must not be starved. What keeps a core
//! for the writer is the number of threads a merge uses (`RuntimeOptions::reconstruction_threads`: every
//! core but one).
//!
//! CPU time is counted per worker (`DynCounters::*_cpu_nanos`) from the thread's own CPU clock, so the
//! reconstruction cost per operation can be read from a run without a profiler.

/// How much the merger's nice value is raised (the threads a parallel merge starts inherit it): by default
/// not at all (see the module doc).
pub(super) const MERGER_NICE: i32 = 0;
/// How much the global key filter's rebuild thread's nice value is raised: by default not at all (a starved
/// rebuild leaves the global filter over-full, and its false positives cost the flusher lookups).
pub(super) const KEY_FILTER_NICE: i32 = 0;
/// `<merger>,<key filter>` in the environment overrides the two steps above (for experiments, e.g. `5,10`).
pub(super) const NICE_ENV: &str = "STRATA_DYN_NICE";

/// The step of the worker at `which` (0: merger, 1: key filter) from [`NICE_ENV`], else `default`.
pub(super) fn nice_step(which: usize, default: i32) -> i32 {
    std::env::var(NICE_ENV)
        .ok()
        .and_then(|v| v.split(',').nth(which)?.trim().parse().ok())
        .unwrap_or(default)
}

/// The calling thread's nice value (0 where the platform has none, or if it cannot be read).
pub(super) fn nice_value() -> i32 {
    #[cfg(target_os = "linux")]
    {
        // Linux keeps a nice value per thread: PRIO_PROCESS with a thread id reads this thread's.
        rustix::process::getpriority_process(Some(rustix::thread::gettid())).unwrap_or(0)
    }
    #[cfg(not(target_os = "linux"))]
    0
}

/// Raises the calling thread's nice value by `by` (at most to 19): a lower scheduling priority for this
/// thread only (Linux keeps one per thread; threads it starts inherit it). A hint: nothing changes if the
/// system refuses, or on other platforms.
pub(super) fn lower_priority(by: i32) {
    if by <= 0 {
        return;
    }
    #[cfg(target_os = "linux")]
    {
        let target = nice_value().saturating_add(by).min(19);
        // A refusal leaves the priority as it was (the hint is dropped).
        let _ = rustix::process::setpriority_process(Some(rustix::thread::gettid()), target);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = by;
}

/// CPU time the calling thread has used, in nanoseconds.
pub(super) fn thread_cpu_nanos() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    u64::try_from(ts.tv_sec)
        .unwrap_or(0)
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::try_from(ts.tv_nsec).unwrap_or(0))
}

/// Runs `work` and adds the CPU time it took on this thread to `counter`.
pub(super) fn charged<T>(counter: &std::sync::atomic::AtomicU64, work: impl FnOnce() -> T) -> T {
    let before = thread_cpu_nanos();
    let out = work();
    let took = thread_cpu_nanos().saturating_sub(before);
    counter.fetch_add(took, std::sync::atomic::Ordering::Relaxed);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The thread clock advances with work done on the thread and `charged` adds it to the counter.
    #[test]
    fn cpu_time_is_counted() {
        let counter = std::sync::atomic::AtomicU64::new(0);
        let sum = charged(&counter, || {
            let mut x = 0u64;
            for i in 0..20_000_000u64 {
                x = std::hint::black_box(x.wrapping_add(i * i));
            }
            x
        });
        std::hint::black_box(sum);
        let nanos = counter.load(std::sync::atomic::Ordering::Relaxed);
        if cfg!(target_os = "linux") {
            assert!(nanos > 1_000_000, "{nanos} ns counted for 20M additions");
        }
    }

    /// Lowering the priority of a fresh thread works (and does not touch the caller's).
    #[test]
    fn priority_lowers_on_its_own_thread() {
        let before = nice_value();
        std::thread::spawn(move || {
            lower_priority(3);
            if cfg!(target_os = "linux") {
                let now = nice_value();
                assert_eq!(now, (before + 3).min(19));
            }
        })
        .join()
        .unwrap();
        assert_eq!(nice_value(), before, "the caller's priority changed");
    }
}
