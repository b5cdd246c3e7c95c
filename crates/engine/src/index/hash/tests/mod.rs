//! Tests of the hash index: a model test with reopen (`model`), crash consistency under ADR and eADR
//! (`crash`), doublings a slice per write (`grow`), PM traffic (`traffic`), parallel recovery and damage (`recovery`), many threads against a
//! model (`concurrent`). The randomized-schedule model of the log and bucket protocol is the integration
//! test `tests/hash_protocol.rs` (shuttle's panic hook is process-wide: it gets a process of its own).

mod concurrent;
mod crash;
mod grow;
mod model;
mod recovery;
mod traffic;

use super::HashConfig;
pub use crate::index::hash::testkit::assert_matches;

/// One bucket, a 16-line log (32 records): resizes, compactions, pool chunks and log-space pressure come
/// early.
pub fn tiny_config() -> HashConfig {
    HashConfig {
        initial_buckets: 1,
        log_lines: 16,
        logs: 1,
        ..HashConfig::default()
    }
}
