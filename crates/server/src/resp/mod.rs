//! RESP, the Redis serialization protocol: the request parser ([`parse`]) and the reply encoder
//! ([`reply`]).
//!
//! The parser is our own rather than a crate's: requests are only ever arrays of bulk strings or inline
//! lines, so a small parser that bounds every length before allocating, returns zero-copy positions and is
//! fuzzed (`fuzz/` target `resp_request`) is less code to trust than a general RESP3 codec whose limits we
//! would have to wrap anyway.

pub mod parse;
pub mod reply;

pub use parse::{Limits, Parsed, ProtocolError, parse_request};
pub use reply::{Protocol, Reply};
