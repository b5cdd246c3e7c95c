//! A partition emulated as a server of fixed capacity (`--partition-capacity`), for benchmarks.
//!
//! FarReach's evaluation emulates each partition as its own server ("server rotation"): the throughput a
//! system reaches is set by its busiest partition. On one small machine the partitions share the cores, so a
//! skewed load never makes one partition the bottleneck and the cache's relief does not show in wall-clock
//! throughput. With a capacity of C operations per second, a partition's worker serves a group of n
//! operations in at least n / C seconds of a virtual clock: the group's answers wait until the partition
//! would have finished them. The clock never runs behind real time (an idle partition does not bank
//! capacity), and real work that takes longer than its budget is not charged twice.
//!
//! Cost: one `Instant::now` per group, and a sleep when the group finished before its budget.

use std::time::{Duration, Instant};

/// The virtual clock of one emulated partition server.
#[derive(Debug, Clone)]
pub(crate) struct Pacer {
    per_op: Duration,
    /// When the partition finishes the work admitted so far.
    busy_until: Instant,
}

impl Pacer {
    /// A partition that serves `ops_per_sec` operations per second (at least 1).
    pub(crate) fn new(ops_per_sec: u64) -> Pacer {
        Pacer {
            per_op: Duration::from_secs(1) / u32::try_from(ops_per_sec.max(1)).unwrap_or(u32::MAX),
            busy_until: Instant::now(),
        }
    }

    /// Admits a group of `ops` operations that began at `start`; returns when the partition finishes it.
    pub(crate) fn admit(&mut self, start: Instant, ops: usize) -> Instant {
        let begin = self.busy_until.max(start);
        self.busy_until = begin + self.per_op * u32::try_from(ops).unwrap_or(u32::MAX);
        self.busy_until
    }

    /// Admits a group of `ops` operations that began at `start` and waits until the partition finishes it.
    pub(crate) fn serve(&mut self, start: Instant, ops: usize) {
        let done = self.admit(start, ops);
        if let Some(wait) = done.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_take_their_budget_back_to_back_and_idle_time_is_not_banked() {
        let mut p = Pacer::new(1000); // 1 ms per operation
        let t0 = p.busy_until;
        let ms = Duration::from_millis;
        // Two groups arriving together: the second starts when the first is done.
        assert_eq!(p.admit(t0, 10), t0 + ms(10));
        assert_eq!(p.admit(t0, 5), t0 + ms(15));
        // A group arriving after the partition went idle starts at its arrival, not at the old clock.
        assert_eq!(p.admit(t0 + ms(100), 1), t0 + ms(101));
        // Arriving while busy: queued behind the work admitted.
        assert_eq!(p.admit(t0 + ms(100), 4), t0 + ms(105));
    }

    #[test]
    fn serving_never_answers_before_the_budget() {
        let mut p = Pacer::new(10_000); // 100 µs per operation
        let start = Instant::now();
        for _ in 0..10 {
            p.serve(Instant::now(), 20);
        }
        // 200 operations at 10,000/s take at least 20 ms (sleep never returns early).
        assert!(start.elapsed() >= Duration::from_millis(20));
    }
}
