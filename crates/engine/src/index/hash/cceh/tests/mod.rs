//! Tests of the CCEH-style index: model test with reopen and load factor (`model`), crash consistency
//! under ADR and eADR (`crash`), PM traffic (`traffic`), damage (`recovery`).

mod crash;
mod model;
mod recovery;
mod traffic;

use super::CcehConfig;
pub use crate::index::hash::testkit::assert_matches;

/// Segments of 8 lines (32 slots) probed in runs of 2 lines (8 slots): splits and doublings come early.
pub fn tiny_config() -> CcehConfig {
    CcehConfig {
        segment_lines: 8,
        run_lines: 2,
        initial_depth: 0,
    }
}
