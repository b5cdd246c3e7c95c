//! Replies and their encoding in RESP2 or RESP3 (chosen per connection by `HELLO`).
//!
//! RESP3-only types degrade as Redis degrades them for RESP2 clients: a map becomes a flat array of
//! alternating keys and values, a set an array, a double a bulk string, a boolean the integer 1 or 0, and
//! null `$-1` (or `*-1` where Redis sends a null array).

use bytes::{BufMut, Bytes, BytesMut};

/// The protocol version a connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protocol {
    #[default]
    Resp2,
    Resp3,
}

/// One reply.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// `+OK`.
    Ok,
    /// A simple string (`+...`); no CR or LF inside.
    Status(String),
    /// An error (`-...`): the text starts with its code (`ERR`, `WRONGTYPE`, `MOVED`...); no CR or LF inside.
    Error(String),
    Int(i64),
    Bulk(Bytes),
    /// A null bulk string (RESP3 null).
    Null,
    /// A null array (RESP3 null).
    NullArray,
    Array(Vec<Reply>),
    Map(Vec<(Reply, Reply)>),
    Set(Vec<Reply>),
    Double(f64),
    Bool(bool),
}

impl Reply {
    /// An error reply with the `ERR` code.
    pub fn err(text: impl std::fmt::Display) -> Reply {
        Reply::Error(format!("ERR {text}"))
    }

    /// A bulk string copied from bytes.
    pub fn bulk(bytes: &[u8]) -> Reply {
        Reply::Bulk(Bytes::copy_from_slice(bytes))
    }

    /// A bulk string of a text.
    pub fn text(s: impl Into<String>) -> Reply {
        Reply::Bulk(Bytes::from(s.into()))
    }

    /// True for an error reply.
    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }

    /// Appends the reply's encoding to `out`.
    pub fn encode(&self, proto: Protocol, out: &mut BytesMut) {
        let resp3 = proto == Protocol::Resp3;
        match self {
            Reply::Ok => out.put_slice(b"+OK\r\n"),
            Reply::Status(s) => line(out, b'+', one_line(s).as_bytes()),
            Reply::Error(s) => line(out, b'-', one_line(s).as_bytes()),
            Reply::Int(n) => int_line(out, b':', *n),
            Reply::Bulk(b) => bulk(out, b),
            Reply::Null if resp3 => out.put_slice(b"_\r\n"),
            Reply::Null => out.put_slice(b"$-1\r\n"),
            Reply::NullArray if resp3 => out.put_slice(b"_\r\n"),
            Reply::NullArray => out.put_slice(b"*-1\r\n"),
            Reply::Array(items) => {
                int_line(out, b'*', items.len() as i64);
                for item in items {
                    item.encode(proto, out);
                }
            }
            Reply::Set(items) => {
                int_line(out, if resp3 { b'~' } else { b'*' }, items.len() as i64);
                for item in items {
                    item.encode(proto, out);
                }
            }
            Reply::Map(pairs) => {
                if resp3 {
                    int_line(out, b'%', pairs.len() as i64);
                } else {
                    int_line(out, b'*', 2 * pairs.len() as i64);
                }
                for (k, v) in pairs {
                    k.encode(proto, out);
                    v.encode(proto, out);
                }
            }
            Reply::Double(d) => {
                let text = format_double(*d);
                if resp3 {
                    line(out, b',', text.as_bytes());
                } else {
                    bulk(out, text.as_bytes());
                }
            }
            Reply::Bool(b) if resp3 => out.put_slice(if *b { b"#t\r\n" } else { b"#f\r\n" }),
            Reply::Bool(b) => int_line(out, b':', i64::from(*b)),
        }
    }
}

/// Simple strings and errors cannot hold CR or LF: they become spaces.
fn one_line(s: &str) -> std::borrow::Cow<'_, str> {
    if s.contains(['\r', '\n']) {
        std::borrow::Cow::Owned(s.replace(['\r', '\n'], " "))
    } else {
        std::borrow::Cow::Borrowed(s)
    }
}

fn format_double(d: f64) -> String {
    if d.is_nan() {
        "nan".into()
    } else if d.is_infinite() {
        if d > 0.0 { "inf".into() } else { "-inf".into() }
    } else {
        format!("{d}")
    }
}

fn line(out: &mut BytesMut, tag: u8, body: &[u8]) {
    out.reserve(body.len() + 3);
    out.put_u8(tag);
    out.put_slice(body);
    out.put_slice(b"\r\n");
}

fn int_line(out: &mut BytesMut, tag: u8, n: i64) {
    let mut digits = itoa_buf(n);
    line(out, tag, digits.as_bytes_mut());
}

fn bulk(out: &mut BytesMut, b: &[u8]) {
    int_line(out, b'$', b.len() as i64);
    out.reserve(b.len() + 2);
    out.put_slice(b);
    out.put_slice(b"\r\n");
}

/// A small stack buffer with the decimal digits of `n`.
struct Digits {
    buf: [u8; 20],
    start: usize,
}

impl Digits {
    fn as_bytes_mut(&mut self) -> &[u8] {
        &self.buf[self.start..]
    }
}

fn itoa_buf(n: i64) -> Digits {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    let neg = n < 0;
    let mut v = n.unsigned_abs();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    if neg {
        i -= 1;
        buf[i] = b'-';
    }
    Digits { buf, start: i }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(r: &Reply, p: Protocol) -> Vec<u8> {
        let mut out = BytesMut::new();
        r.encode(p, &mut out);
        out.to_vec()
    }

    #[test]
    fn resp2_and_resp3_encodings() {
        use Protocol::*;
        assert_eq!(enc(&Reply::Ok, Resp2), b"+OK\r\n");
        assert_eq!(enc(&Reply::Int(-42), Resp2), b":-42\r\n");
        assert_eq!(
            enc(&Reply::Int(i64::MIN), Resp2),
            b":-9223372036854775808\r\n"
        );
        assert_eq!(enc(&Reply::bulk(b"ab"), Resp2), b"$2\r\nab\r\n");
        assert_eq!(enc(&Reply::Null, Resp2), b"$-1\r\n");
        assert_eq!(enc(&Reply::Null, Resp3), b"_\r\n");
        assert_eq!(enc(&Reply::NullArray, Resp2), b"*-1\r\n");
        let map = Reply::Map(vec![(Reply::text("a"), Reply::Int(1))]);
        assert_eq!(enc(&map, Resp2), b"*2\r\n$1\r\na\r\n:1\r\n");
        assert_eq!(enc(&map, Resp3), b"%1\r\n$1\r\na\r\n:1\r\n");
        assert_eq!(enc(&Reply::Double(1.5), Resp3), b",1.5\r\n");
        assert_eq!(enc(&Reply::Double(1.5), Resp2), b"$3\r\n1.5\r\n");
        assert_eq!(enc(&Reply::Bool(true), Resp2), b":1\r\n");
        assert_eq!(enc(&Reply::Bool(false), Resp3), b"#f\r\n");
        assert_eq!(
            enc(&Reply::Error("ERR a\r\nb".into()), Resp2),
            b"-ERR a  b\r\n"
        );
        let set = Reply::Set(vec![Reply::Int(1)]);
        assert_eq!(enc(&set, Resp3), b"~1\r\n:1\r\n");
        assert_eq!(enc(&set, Resp2), b"*1\r\n:1\r\n");
    }
}
