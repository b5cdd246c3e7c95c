#![no_main]
//! Fuzz target `wal_frames`: see `strata::lab::fuzz::wal_frames`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| strata::lab::fuzz::wal_frames(data));
