#![no_main]
//! Fuzz target `betree_node`: see `strata::lab::fuzz::betree_node`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| strata::lab::fuzz::betree_node(data));
