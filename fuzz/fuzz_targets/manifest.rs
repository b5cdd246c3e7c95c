#![no_main]
//! Fuzz target `manifest`: see `strata::lab::fuzz::manifest`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| strata::lab::fuzz::manifest(data));
