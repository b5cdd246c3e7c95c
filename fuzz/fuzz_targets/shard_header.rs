#![no_main]
//! Fuzz target `shard_header`: see `strata::lab::fuzz::shard_header`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| strata::lab::fuzz::shard_header(data));
