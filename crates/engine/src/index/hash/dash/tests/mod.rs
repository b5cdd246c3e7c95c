//! Tests of the Dash-style index: model test with reopen (`model`), crash consistency under ADR and eADR
//! (`crash`), PM traffic (`traffic`), damage (`recovery`), load factor before splits (`model`).

mod crash;
mod model;
mod recovery;
mod traffic;

use std::collections::HashMap;

use super::{DashConfig, DashIndex};
use crate::storage::pm::Pm;

/// Segments of 4 normal + 1 stash bucket (70 slots): splits and doublings come early.
pub fn tiny_config() -> DashConfig {
    DashConfig {
        segment_buckets: 4,
        stash_buckets: 1,
        initial_depth: 0,
    }
}

/// Checks the index against `model` exactly: every model key, every record, no duplicates, `len`, and the
/// structural invariants.
pub fn assert_matches<P: Pm>(index: &DashIndex<P>, model: &HashMap<u64, u64>) {
    index.check_invariants().unwrap();
    let mut seen = HashMap::new();
    for (k, v) in index.entries().unwrap() {
        assert!(seen.insert(k, v).is_none(), "key {k} visited twice");
    }
    assert_eq!(&seen, model, "records differ from the model");
    assert_eq!(index.len(), model.len() as u64);
    for (&k, &v) in model {
        assert_eq!(index.get(k).unwrap(), Some(v), "key {k}");
    }
}
