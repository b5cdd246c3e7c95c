#![no_main]
//! Fuzz target `dyn_state`: see `strata::lab::fuzz::dyn_state`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| strata::lab::fuzz::dyn_state(data));
