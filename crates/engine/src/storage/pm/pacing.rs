//! Emulated media timing for the traffic model (limited PM bandwidth, Exp 13 of the hash experiments):
//! a token bucket over media write bytes ([`WriteBucket`]). [`CountingPm`](super::CountingPm) charges it
//! with every media write its model produces (XPLines leaving the XPBuffer) and busy-waits for what it
//! returns, next to the fixed wait per XPBuffer read miss; so throughput really drops when an index writes
//! more media bytes than the rate allows.
//!
//! ## The bucket
//! Virtual scheduling on the caller's clock (nanoseconds since the model was made): `busy_until` is when
//! the media would finish every write charged so far at `rate` bytes per second. A charge of `n` bytes at
//! time `now` moves it to `max(busy_until, now) + n / rate` and asks the writer to wait until it is at most
//! `burst` ahead of `now` (a token bucket of `burst` bytes refilled at `rate`: an idle medium accepts
//! `burst` bytes at once, a busy one one byte per `1 / rate`). Time is kept in picoseconds, so the cost of
//! an XPLine is exact at rates that divide 256 · 10¹² B/s (1, 2, 4 GB/s …) and within 1 ps otherwise.
//!
//! Invariants: waits are never negative; the sum of costs charged equals the bytes charged ÷ rate
//! (independent of the clock, see [`WriteBucket::busy_ps`]); with `burst = 0` a caller that waits as told
//! never runs ahead of the rate. Cost: a few integer operations per charge.

/// Picoseconds per second.
const PS_PER_SEC: u128 = 1_000_000_000_000;

/// A token bucket over media write bytes, on a caller-supplied clock (module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteBucket {
    rate: u64,
    burst_ps: u64,
    /// When the media finishes the writes charged so far, in ps on the caller's clock.
    busy_until_ps: u64,
    /// Transfer time of every byte charged so far, in ps.
    busy_ps: u64,
}

impl WriteBucket {
    /// A bucket of `burst_bytes` refilled at `bytes_per_sec` (> 0; the caller validates).
    pub fn new(bytes_per_sec: u64, burst_bytes: u64) -> Self {
        let rate = bytes_per_sec.max(1);
        let mut b = WriteBucket {
            rate,
            burst_ps: 0,
            busy_until_ps: 0,
            busy_ps: 0,
        };
        b.burst_ps = b.cost_ps(burst_bytes);
        b
    }

    /// Transfer time of `bytes` at the bucket's rate, in ps.
    pub fn cost_ps(&self, bytes: u64) -> u64 {
        let ps = u128::from(bytes) * PS_PER_SEC / u128::from(self.rate);
        u64::try_from(ps).unwrap_or(u64::MAX)
    }

    /// Charges `bytes` written at `now_ns`; returns the nanoseconds the writer must wait (rounded up).
    pub fn charge(&mut self, now_ns: u64, bytes: u64) -> u64 {
        if bytes == 0 {
            return 0;
        }
        let now = now_ns.saturating_mul(1000);
        let cost = self.cost_ps(bytes);
        self.busy_ps = self.busy_ps.saturating_add(cost);
        self.busy_until_ps = self.busy_until_ps.max(now).saturating_add(cost);
        self.busy_until_ps
            .saturating_sub(now.saturating_add(self.burst_ps))
            .div_ceil(1000)
    }

    /// Transfer time of every byte charged so far, in ps (bytes ÷ rate, whatever the clock said).
    pub fn busy_ps(&self) -> u64 {
        self.busy_ps
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 1 GB/s = 1 byte per ns, a burst of four XPLines.
    fn gigabyte() -> WriteBucket {
        WriteBucket::new(1_000_000_000, 1024)
    }

    #[test]
    fn an_idle_medium_takes_the_burst_then_one_xpline_per_256_ns() {
        let mut b = gigabyte();
        let waits: Vec<u64> = (0..8).map(|_| b.charge(0, 256)).collect();
        assert_eq!(waits, [0, 0, 0, 0, 256, 512, 768, 1024]);
        assert_eq!(b.busy_ps(), 8 * 256_000);
    }

    #[test]
    fn a_writer_that_waits_as_told_runs_at_the_rate() {
        let mut b = WriteBucket::new(2_000_000_000, 0);
        let mut now = 0;
        for _ in 0..1000 {
            now += b.charge(now, 256);
        }
        // 1,000 XPLines at 2 GB/s: 128 ns each; the first waits its own transfer too.
        assert_eq!(now, 1000 * 128);
        assert_eq!(b.busy_ps(), 1000 * 128_000);
    }

    #[test]
    fn idle_time_refills_the_bucket_up_to_the_burst() {
        let mut b = gigabyte();
        assert_eq!(b.charge(0, 2048), 1024);
        // At 2,048 ns everything charged is done: a full burst again, no more.
        assert_eq!(b.charge(2048, 1024), 0);
        assert_eq!(b.charge(2048, 256), 256);
        // Long idle: still only one burst.
        assert_eq!(b.charge(1_000_000, 1280), 256);
    }

    #[test]
    fn odd_rates_keep_exact_totals_and_round_waits_up() {
        let mut b = WriteBucket::new(3_000_000_000, 0);
        assert_eq!(b.charge(0, 1), 1); // 333 ps rounds up to 1 ns.
        let total: u64 = (0..999).map(|_| b.charge(0, 1)).sum();
        assert!(total > 0);
        assert_eq!(b.busy_ps(), 1000 * 333);
        assert_eq!(b.charge(0, 0), 0);
    }
}
