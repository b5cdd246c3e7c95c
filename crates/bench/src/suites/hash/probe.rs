//! What the hash family's profiling probes (`examples/hash_lookup.rs`, `examples/hash_write.rs`) share: their
//! key generator, the value stored under a key, the thread's CPU clock and positional arguments.

/// The next value of a xorshift64 generator (the probes' keys: cheap, and the same on every run).
pub fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// The value a probe stores under `k` (the suite's, so answers can be checked).
pub fn value(k: u64) -> u64 {
    super::value(k)
}

/// CPU time of this thread, in nanoseconds (0 where `/proc/thread-self/schedstat` is unreadable).
pub fn thread_cpu_ns() -> u64 {
    crate::measure::schedstat("/proc/thread-self/schedstat").map_or(0, |(cpu, _)| cpu)
}

/// Positional argument `i` of the command line parsed as a `T`, or `default` when absent or unparsable.
pub fn arg<T: std::str::FromStr>(i: usize, default: T) -> T {
    std::env::args()
        .nth(i)
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}
