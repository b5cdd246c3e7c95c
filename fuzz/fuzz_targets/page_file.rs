#![no_main]
//! Fuzz target `page_file`: see `strata::lab::fuzz::page_file`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| strata::lab::fuzz::page_file(data));
