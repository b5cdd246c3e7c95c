//! Tests of the hash index: a model test with reopen (`model`), crash consistency under ADR and eADR
//! (`crash`), PM traffic (`traffic`), parallel recovery and damage (`recovery`).

mod crash;
mod model;
mod recovery;
mod traffic;

use super::HashConfig;
pub use crate::index::hash::testkit::assert_matches;

/// One bucket, a 16-line log (32 records): resizes, compactions and log-space pressure come early.
pub fn tiny_config() -> HashConfig {
    HashConfig {
        initial_buckets: 1,
        log_lines: 16,
        logs: 1,
    }
}
