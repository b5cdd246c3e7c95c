//! Tests of the hash index: a model test with reopen (`model`), crash consistency under ADR and eADR
//! (`crash`), PM traffic (`traffic`), parallel recovery and damage (`recovery`).

mod crash;
mod model;
mod recovery;
mod traffic;

use std::collections::HashMap;

use super::{HashConfig, HashIndex};
use crate::storage::pm::Pm;

/// One bucket, a 16-line log (32 records): resizes, compactions and log-space pressure come early.
pub fn tiny_config() -> HashConfig {
    HashConfig {
        initial_buckets: 1,
        log_lines: 16,
        logs: 1,
    }
}

/// Checks the index against `model` exactly: every model key, every visible record, no duplicates,
/// `len`, and the structural invariants.
pub fn assert_matches<P: Pm>(index: &HashIndex<P>, model: &HashMap<u64, u64>) {
    index.check_invariants().unwrap();
    let entries = index.entries().unwrap();
    let mut seen = HashMap::new();
    for &(k, v) in &entries {
        assert!(seen.insert(k, v).is_none(), "key {k} visited twice");
    }
    assert_eq!(&seen, model, "visible records differ from the model");
    assert_eq!(index.len(), model.len() as u64);
    for (&k, &v) in model {
        assert_eq!(index.get(k).unwrap(), Some(v), "key {k}");
    }
}
