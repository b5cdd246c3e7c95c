#![no_main]
//! Fuzz target `bloom`: see `strata::lab::fuzz::bloom`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| strata::lab::fuzz::bloom(data));
