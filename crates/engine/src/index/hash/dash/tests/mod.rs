//! Tests of the Dash-style index: model test with reopen (`model`), crash consistency under ADR and eADR
//! (`crash`), lazy recovery (`lazy`), many threads against a model (`stress`), PM traffic (`traffic`),
//! damage (`recovery`), load factor before splits (`model`).

mod crash;
mod lazy;
mod model;
mod recovery;
mod stress;
mod traffic;

use super::DashConfig;
pub use crate::index::hash::testkit::assert_matches;

/// Segments of 4 normal + 1 stash bucket (70 slots): splits and doublings come early.
pub fn tiny_config() -> DashConfig {
    DashConfig {
        segment_buckets: 4,
        stash_buckets: 1,
        initial_depth: 0,
    }
}
