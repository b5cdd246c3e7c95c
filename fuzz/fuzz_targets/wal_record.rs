#![no_main]
//! Fuzz target `wal_record`: see `strata::lab::fuzz::wal_record`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| strata::lab::fuzz::wal_record(data));
