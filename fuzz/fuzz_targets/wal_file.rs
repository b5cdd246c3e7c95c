#![no_main]
//! Fuzz target `wal_file`: see `strata::lab::fuzz::wal_file`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| strata::lab::fuzz::wal_file(data));
