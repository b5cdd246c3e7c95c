#![no_main]
//! Fuzz target `resp_request`: the server's request parser over a stream of commands, see
//! `strata_server::resp::parse::fuzz_stream`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| strata_server::resp::parse::fuzz_stream(data));
