#![no_main]
//! Fuzz target `root_records`: see `strata::lab::fuzz::root_records`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| strata::lab::fuzz::root_records(data));
