//! The request parser: RESP arrays of bulk strings (what every client library sends) and inline commands
//! (what `telnet` and `redis-cli` in some modes send), one command at a time from the front of a buffer.
//!
//! Every length is bounded before anything is allocated: an array may hold at most [`Limits::max_args`]
//! arguments, a bulk string at most [`Limits::max_bulk`] bytes, an inline command at most
//! [`Limits::max_inline`] bytes. A violation, or any byte that cannot start what the grammar expects, is a
//! [`ProtocolError`] whose text follows Redis's (`Protocol error: ...`); the connection answers it and closes.
//! The parser never panics on any input (fuzzed: `fuzz/` target `resp_request`, and a stable smoke test).
//!
//! The parser returns the *positions* of the arguments in the buffer, so the caller can freeze the consumed
//! bytes once and hand out zero-copy slices.
//!
//! Cost: one pass over the command's header lines; the bulk payloads are skipped, not scanned. A header
//! line in the usual form (`<tag>`, digits, CRLF) is read in one loop over its digits; any other line takes
//! the general path, which finds the line's end first and reports what is wrong with it. A command of up to
//! [`INLINE_ARGS`] arguments allocates nothing. A command that is not complete yet is parsed again from its
//! start when more bytes arrive (its header lines only).

use smallvec::SmallVec;
use std::ops::Range;

/// Commands with at most this many arguments keep their ranges inline (no allocation).
pub const INLINE_ARGS: usize = 4;

/// The byte ranges of a command's arguments in its buffer.
pub type ArgRanges = SmallVec<[Range<usize>; INLINE_ARGS]>;

/// Bounds on what one request may claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most bytes of one bulk string (an argument).
    pub max_bulk: usize,
    /// Most arguments of one command.
    pub max_args: usize,
    /// Most bytes of one inline command line.
    pub max_inline: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bulk: 1 << 20,
            max_args: 1 << 20,
            max_inline: 64 << 10,
        }
    }
}

/// Malformed or oversized input. The text is what the client is told (after `-ERR `).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolError(pub String);

impl std::fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Protocol error: {}", self.0)
    }
}

/// One step of parsing the front of a buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// The buffer holds only part of a command: read more.
    Incomplete,
    /// A command: its arguments' byte ranges in the buffer, and the bytes it took (drop them).
    Command { args: ArgRanges, consumed: usize },
    /// An empty inline line or an empty array (`*0`, `*-1`): nothing to run; drop `consumed` bytes.
    Nothing { consumed: usize },
}

/// Finds the end of the line starting at `from`: the index of its `\r` (the line must end in `\r\n`).
fn line_end(buf: &[u8], from: usize) -> Option<usize> {
    let rest = buf.get(from..)?;
    let nl = rest.iter().position(|&b| b == b'\n')?;
    Some(from + nl)
}

/// Parses the decimal integer of a header line `buf[from..cr]` (an optional `-`, then digits).
fn header_int(buf: &[u8], from: usize, to: usize, what: &str) -> Result<i64, ProtocolError> {
    let digits = buf.get(from..to).unwrap_or_default();
    let bad = || ProtocolError(format!("invalid {what} length"));
    let (neg, digits) = match digits.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, digits),
    };
    if digits.is_empty() || digits.len() > 18 || !digits.iter().all(u8::is_ascii_digit) {
        return Err(bad());
    }
    let v = digits
        .iter()
        .fold(0i64, |acc, &d| acc * 10 + i64::from(d - b'0'));
    Ok(if neg { -v } else { v })
}

/// Reads a header line `<tag><int>\r\n` at `at`: `Ok(None)` if incomplete, else (value, index after the line).
#[inline]
fn header(
    buf: &[u8],
    at: usize,
    tag: u8,
    what: &str,
    max_line: usize,
) -> Result<Option<(i64, usize)>, ProtocolError> {
    clean_header(buf, at, tag).map_or_else(
        || general_header(buf, at, tag, what, max_line),
        |h| Ok(Some(h)),
    )
}

/// The usual header line at `at`: `tag`, an optional `-`, 1 to 18 digits, CRLF; its value and the index
/// after it. `None` for anything else (incomplete, malformed, or longer), which [`general_header`] reads:
/// on a line of this form both give the same value.
#[inline]
fn clean_header(buf: &[u8], at: usize, tag: u8) -> Option<(i64, usize)> {
    let line = buf.get(at..)?;
    if line.first() != Some(&tag) {
        return None;
    }
    let neg = line.get(1) == Some(&b'-');
    let first = 1 + usize::from(neg);
    let mut v = 0i64;
    let mut i = first;
    while let Some(&d) = line.get(i) {
        if !d.is_ascii_digit() || i - first == 18 {
            break;
        }
        v = v * 10 + i64::from(d - b'0');
        i += 1;
    }
    if i == first || line.get(i..i + 2) != Some(b"\r\n") {
        return None;
    }
    Some((if neg { -v } else { v }, at + i + 2))
}

/// [`header`] for any line: finds its end, then checks its form.
fn general_header(
    buf: &[u8],
    at: usize,
    tag: u8,
    what: &str,
    max_line: usize,
) -> Result<Option<(i64, usize)>, ProtocolError> {
    match buf.get(at) {
        None => return Ok(None),
        Some(&b) if b != tag => {
            return Err(ProtocolError(format!(
                "expected '{}', got '{}'",
                tag as char,
                (b as char).escape_default()
            )));
        }
        Some(_) => {}
    }
    let Some(nl) = line_end(buf, at) else {
        if buf.len() - at > max_line {
            return Err(ProtocolError(format!("too big {what} count string")));
        }
        return Ok(None);
    };
    if nl == at || buf.get(nl - 1) != Some(&b'\r') {
        return Err(ProtocolError(format!("invalid {what} length")));
    }
    let v = header_int(buf, at + 1, nl - 1, what)?;
    Ok(Some((v, nl + 1)))
}

/// Parses one command from the front of `buf`.
pub fn parse_request(buf: &[u8], limits: &Limits) -> Result<Parsed, ProtocolError> {
    match buf.first() {
        None => Ok(Parsed::Incomplete),
        Some(b'*') => parse_array(buf, limits),
        Some(_) => parse_inline(buf, limits),
    }
}

/// Header lines are short: an integer of at most 20 characters plus the tag and `\r`.
const MAX_HEADER_LINE: usize = 32;

fn parse_array(buf: &[u8], limits: &Limits) -> Result<Parsed, ProtocolError> {
    let Some((n, mut at)) = header(buf, 0, b'*', "multibulk", MAX_HEADER_LINE)? else {
        return Ok(Parsed::Incomplete);
    };
    if n <= 0 {
        return Ok(Parsed::Nothing { consumed: at });
    }
    let n = n as usize;
    if n > limits.max_args {
        return Err(ProtocolError("invalid multibulk length".into()));
    }
    let mut args = ArgRanges::new();
    if n > INLINE_ARGS {
        args.reserve_exact(n.min(1024));
    }
    for _ in 0..n {
        let Some((len, start)) = header(buf, at, b'$', "bulk", MAX_HEADER_LINE)? else {
            return Ok(Parsed::Incomplete);
        };
        if len < 0 || len as u64 > limits.max_bulk as u64 {
            return Err(ProtocolError("invalid bulk length".into()));
        }
        let end = start + len as usize;
        match buf.get(end..end + 2) {
            None => return Ok(Parsed::Incomplete),
            Some(b"\r\n") => {}
            Some(_) => return Err(ProtocolError("bulk string not followed by CRLF".into())),
        }
        args.push(start..end);
        at = end + 2;
    }
    Ok(Parsed::Command { args, consumed: at })
}

fn parse_inline(buf: &[u8], limits: &Limits) -> Result<Parsed, ProtocolError> {
    let Some(nl) = line_end(buf, 0) else {
        if buf.len() > limits.max_inline {
            return Err(ProtocolError("too big inline request".into()));
        }
        return Ok(Parsed::Incomplete);
    };
    if nl > limits.max_inline {
        return Err(ProtocolError("too big inline request".into()));
    }
    let line_to = if nl > 0 && buf.get(nl - 1) == Some(&b'\r') {
        nl - 1
    } else {
        nl
    };
    let args = split_inline(buf, line_to)?;
    if args.is_empty() {
        return Ok(Parsed::Nothing { consumed: nl + 1 });
    }
    if args.len() > limits.max_args {
        return Err(ProtocolError("invalid multibulk length".into()));
    }
    Ok(Parsed::Command {
        args,
        consumed: nl + 1,
    })
}

/// Splits an inline line into arguments at spaces and tabs. Double-quoted arguments are allowed but, unlike
/// Redis, without escapes inside (an argument with spaces or binary bytes should be sent as RESP), and single
/// quotes are ordinary characters; an unbalanced quote is an error.
fn split_inline(buf: &[u8], to: usize) -> Result<ArgRanges, ProtocolError> {
    let line = buf.get(..to).unwrap_or_default();
    let mut args = ArgRanges::new();
    let mut i = 0;
    while i < line.len() {
        match line.get(i) {
            Some(b' ' | b'\t') => i += 1,
            Some(b'"') => {
                let start = i + 1;
                let Some(close) = line
                    .get(start..)
                    .and_then(|r| r.iter().position(|&b| b == b'"'))
                else {
                    return Err(ProtocolError("unbalanced quotes in request".into()));
                };
                let end = start + close;
                if line.get(end + 1).is_some_and(|&b| b != b' ' && b != b'\t') {
                    return Err(ProtocolError("unbalanced quotes in request".into()));
                }
                args.push(start..end);
                i = end + 1;
            }
            Some(_) => {
                let start = i;
                while line.get(i).is_some_and(|&b| b != b' ' && b != b'\t') {
                    i += 1;
                }
                args.push(start..i);
            }
            None => break,
        }
    }
    Ok(args)
}

/// The fuzz entry point (`fuzz/` target `resp_request` and the smoke test): parses `data` as a stream of
/// commands under small limits and under the defaults, checking what the parser promises — every command
/// consumes at least one byte and no more than it was given, and its arguments lie inside what it consumed.
/// Panics if a promise is broken.
pub fn fuzz_stream(data: &[u8]) {
    let small = Limits {
        max_bulk: 64,
        max_args: 8,
        max_inline: 128,
    };
    for limits in [small, Limits::default()] {
        let mut rest = data;
        loop {
            match parse_request(rest, &limits) {
                Ok(Parsed::Incomplete) | Err(_) => break,
                Ok(Parsed::Nothing { consumed }) => {
                    assert!(consumed > 0 && consumed <= rest.len());
                    rest = &rest[consumed..];
                }
                Ok(Parsed::Command { args, consumed }) => {
                    assert!(consumed > 0 && consumed <= rest.len());
                    assert!(!args.is_empty() && args.len() <= limits.max_args);
                    for a in &args {
                        assert!(a.start <= a.end && a.end <= consumed);
                        assert!(a.end - a.start <= limits.max_bulk.max(limits.max_inline));
                    }
                    rest = &rest[consumed..];
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seeded random and mutated streams through the fuzz entry point (the long runs use cargo-fuzz).
    #[test]
    fn fuzz_smoke() {
        use rand::{Rng, SeedableRng};
        let iters: usize = std::env::var("STRATA_FUZZ_SMOKE_ITERS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(20_000);
        let seeds: [&[u8]; 5] = [
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n",
            b"PING\r\nGET \"a b\"\r\n",
            b"*2\r\n$3\r\nGET\r\n$-1\r\n",
            b"*-1\r\n*0\r\n\r\n",
            b"*1\r\n$70\r\n0123456789012345678901234567890123456789012345678901234567890123456789\r\n",
        ];
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        for i in 0..iters {
            let mut input = seeds[i % seeds.len()].repeat(1 + i % 3);
            for _ in 0..rng.random_range(0..6) {
                let at = rng.random_range(0..input.len());
                match rng.random_range(0..4) {
                    0 => input[at] = rng.random(),
                    1 => {
                        input[at] = *b"*$\r\n-0123456789\" "
                            .get(rng.random_range(0..16))
                            .unwrap_or(&b'x')
                    }
                    2 => {
                        input.remove(at);
                    }
                    _ => input.insert(at, rng.random()),
                }
                if input.is_empty() {
                    input.push(b'*');
                }
            }
            fuzz_stream(&input);
        }
    }

    fn args(buf: &[u8]) -> (Vec<Vec<u8>>, usize) {
        match parse_request(buf, &Limits::default()).unwrap() {
            Parsed::Command { args, consumed } => (
                args.into_iter().map(|r| buf[r].to_vec()).collect(),
                consumed,
            ),
            other => panic!("{other:?}"),
        }
    }

    /// The one-loop reading of a usual header line gives what the general one gives, on lines of every
    /// form (clean, signed, too long, malformed, cut short).
    #[test]
    fn clean_header_lines_read_as_the_general_path_reads_them() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let mut clean = 0;
        for _ in 0..50_000 {
            let mut line = vec![b'$'];
            const ALPHABET: &[u8] = b"0123456789012345678-\r\nx";
            for _ in 0..rng.random_range(0..24) {
                line.push(ALPHABET[rng.random_range(0..ALPHABET.len())]);
            }
            if rng.random_bool(0.7) {
                line.extend_from_slice(b"\r\n");
            }
            let general = general_header(&line, 0, b'$', "bulk", MAX_HEADER_LINE);
            if let Some(h) = clean_header(&line, 0, b'$') {
                clean += 1;
                assert_eq!(general, Ok(Some(h)), "{:?}", String::from_utf8_lossy(&line));
            }
            assert_eq!(
                header(&line, 0, b'$', "bulk", MAX_HEADER_LINE),
                general,
                "{:?}",
                String::from_utf8_lossy(&line)
            );
        }
        assert!(clean > 1_000, "the clean form was generated {clean} times");
        assert_eq!(clean_header(b"$-12\r\n", 0, b'$'), Some((-12, 6)));
        assert_eq!(clean_header(b"x$5\r\n", 1, b'$'), Some((5, 5)));
        assert_eq!(
            clean_header(b"$999999999999999999\r\n", 0, b'$'),
            Some((999_999_999_999_999_999, 21))
        );
        assert_eq!(clean_header(b"$1000000000000000000\r\n", 0, b'$'), None);
        assert_eq!(clean_header(b"$-\r\n", 0, b'$'), None);
        assert_eq!(clean_header(b"$5\r", 0, b'$'), None);
    }

    #[test]
    fn arrays_of_bulk_strings() {
        let buf = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nva\r\nl\r\n*1\r\n$4\r\nPING\r\n";
        let (a, used) = args(buf);
        assert_eq!(a, vec![b"SET".to_vec(), b"k".to_vec(), b"va\r\nl".to_vec()]);
        let (b, used2) = args(&buf[used..]);
        assert_eq!(b, vec![b"PING".to_vec()]);
        assert_eq!(used + used2, buf.len());
        let (e, _) = args(b"*1\r\n$0\r\n\r\n");
        assert_eq!(e, vec![Vec::<u8>::new()]);
    }

    #[test]
    fn every_prefix_of_a_command_is_incomplete() {
        let buf = b"*2\r\n$3\r\nGET\r\n$10\r\n0123456789\r\n";
        for cut in 0..buf.len() {
            assert_eq!(
                parse_request(&buf[..cut], &Limits::default()).unwrap(),
                Parsed::Incomplete,
                "cut at {cut}"
            );
        }
        assert_eq!(args(buf).1, buf.len());
    }

    #[test]
    fn inline_commands() {
        let (a, used) = args(b"set  key \"a value\"\r\nGET key\n");
        assert_eq!(
            a,
            vec![b"set".to_vec(), b"key".to_vec(), b"a value".to_vec()]
        );
        assert_eq!(used, 20);
        let (b, _) = args(b"GET key\n");
        assert_eq!(b, vec![b"GET".to_vec(), b"key".to_vec()]);
        assert_eq!(
            parse_request(b"  \r\n", &Limits::default()).unwrap(),
            Parsed::Nothing { consumed: 4 }
        );
        assert!(parse_request(b"GET \"k\r\n", &Limits::default()).is_err());
        assert!(parse_request(b"GET \"k\"x\r\n", &Limits::default()).is_err());
    }

    #[test]
    fn bounds_and_garbage_are_errors_not_allocations() {
        let limits = Limits {
            max_bulk: 10,
            max_args: 4,
            max_inline: 16,
        };
        let err = |b: &[u8]| parse_request(b, &limits).unwrap_err().0;
        assert_eq!(err(b"*5\r\n"), "invalid multibulk length");
        assert_eq!(err(b"*9223372036854775807\r\n"), "invalid multibulk length");
        assert_eq!(err(b"*1\r\n$11\r\n"), "invalid bulk length");
        assert_eq!(err(b"*1\r\n$-1\r\n"), "invalid bulk length");
        assert_eq!(err(b"*x\r\n"), "invalid multibulk length");
        assert_eq!(err(b"*1\r\n+OK\r\n"), "expected '$', got '+'");
        assert_eq!(err(b"*1\r\n$2\r\nabcd"), "bulk string not followed by CRLF");
        assert_eq!(err(b"*1\n"), "invalid multibulk length");
        assert_eq!(err(&[b'a'; 17]), "too big inline request");
        assert_eq!(
            err(b"*11111111111111111111111111111111111"),
            "too big multibulk count string"
        );
        assert_eq!(
            parse_request(b"*0\r\n", &limits).unwrap(),
            Parsed::Nothing { consumed: 4 }
        );
        assert_eq!(
            parse_request(b"*-1\r\n", &limits).unwrap(),
            Parsed::Nothing { consumed: 5 }
        );
    }
}
