#![no_main]
//! Fuzz target `btree_node`: see `strata::lab::fuzz::btree_node`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| strata::lab::fuzz::btree_node(data));
