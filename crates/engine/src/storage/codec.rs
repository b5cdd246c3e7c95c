//! The one codec of on-disk integers: a bounds-checked little-endian [`Reader`] and [`Writer`], and
//! positional getters and setters for fixed page layouts.
//!
//! Every decoder of bytes read from disk goes through [`Reader`] (sequential records: WAL records, state
//! files, headers) or [`get`] (fixed offsets inside a page whose length was checked): a short buffer is a
//! [`Short`] error naming what was wanted where, never a panic. Encoders use [`Writer`], so both directions
//! share one byte order and one set of widths.
//!
//! Cost: each read is a bounds check and a copy of at most 8 bytes.

// A decoder of bytes read from disk: every index and slice is checked.
#![deny(clippy::indexing_slicing)]

/// A read past the end of a buffer: `wanted` bytes at offset `at` of a `len`-byte buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Short {
    pub at: usize,
    pub wanted: usize,
    pub len: usize,
}

impl std::fmt::Display for Short {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} bytes wanted at offset {} of a {}-byte record",
            self.wanted, self.at, self.len
        )
    }
}

impl std::error::Error for Short {}

impl From<Short> for String {
    fn from(s: Short) -> String {
        s.to_string()
    }
}

/// Reads little-endian values from the front of a byte slice, checking every length.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

macro_rules! read_le {
    ($($name:ident: $t:ty),*) => {$(
        #[doc = concat!("The next `", stringify!($t), "`, little endian.")]
        pub fn $name(&mut self) -> Result<$t, Short> {
            Ok(<$t>::from_le_bytes(self.array()?))
        }
    )*};
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes, at: 0 }
    }

    /// A reader of `bytes` positioned at `at` ([`Short`] if `at` is past the end).
    pub fn new_at(bytes: &'a [u8], at: usize) -> Result<Self, Short> {
        let mut r = Reader::new(bytes);
        r.skip(at)?;
        Ok(r)
    }

    /// Offset of the next byte.
    pub fn position(&self) -> usize {
        self.at
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }

    /// The next `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], Short> {
        let short = Short {
            at: self.at,
            wanted: n,
            len: self.bytes.len(),
        };
        let end = self.at.checked_add(n).ok_or(short)?;
        let s = self.bytes.get(self.at..end).ok_or(short)?;
        self.at = end;
        Ok(s)
    }

    /// The next `N` bytes as an array.
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], Short> {
        let s = self.bytes(N)?;
        let mut out = [0u8; N];
        out.copy_from_slice(s);
        Ok(out)
    }

    /// Skips `n` bytes.
    pub fn skip(&mut self, n: usize) -> Result<(), Short> {
        self.bytes(n).map(drop)
    }

    read_le!(u8: u8, u16: u16, u32: u32, u64: u64);

    /// The next `f64` (its bits, little endian).
    pub fn f64(&mut self) -> Result<f64, Short> {
        self.u64().map(f64::from_bits)
    }

    /// A count that must not exceed what the rest of the buffer could hold at `unit` bytes per item
    /// (so a damaged count never asks for an absurd allocation).
    pub fn count(&mut self, count: u64, unit: usize) -> Result<usize, String> {
        let most = self.remaining() / unit.max(1);
        match usize::try_from(count) {
            Ok(n) if n <= most => Ok(n),
            _ => Err(format!(
                "count {count} at offset {} exceeds the {} bytes left",
                self.at,
                self.remaining()
            )),
        }
    }

    /// `Err` naming the trailing bytes unless everything was read.
    pub fn finish(&self) -> Result<(), String> {
        match self.remaining() {
            0 => Ok(()),
            n => Err(format!("{n} trailing bytes after offset {}", self.at)),
        }
    }
}

/// Appends little-endian values to a byte vector.
#[derive(Debug)]
pub struct Writer<'a> {
    out: &'a mut Vec<u8>,
}

macro_rules! write_le {
    ($($name:ident: $t:ty),*) => {$(
        #[doc = concat!("Appends a `", stringify!($t), "`, little endian.")]
        pub fn $name(&mut self, v: $t) -> &mut Self {
            self.out.extend_from_slice(&v.to_le_bytes());
            self
        }
    )*};
}

impl<'a> Writer<'a> {
    pub fn new(out: &'a mut Vec<u8>) -> Self {
        Writer { out }
    }

    write_le!(u8: u8, u16: u16, u32: u32, u64: u64);

    /// Appends an `f64` (its bits, little endian).
    pub fn f64(&mut self, v: f64) -> &mut Self {
        self.u64(v.to_bits())
    }

    /// Appends raw bytes.
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.out.extend_from_slice(b);
        self
    }

    /// Bytes written so far (the whole vector).
    pub fn len(&self) -> usize {
        self.out.len()
    }

    /// True if the vector is empty.
    pub fn is_empty(&self) -> bool {
        self.out.is_empty()
    }
}

/// A little-endian integer at a fixed offset of a page or record.
pub trait Fixed: Sized + Copy {
    const WIDTH: usize;
    fn from_le(b: &[u8]) -> Self;
    fn to_le(self, out: &mut [u8]);
}

macro_rules! fixed {
    ($($t:ty),*) => {$(
        impl Fixed for $t {
            const WIDTH: usize = std::mem::size_of::<$t>();
            fn from_le(b: &[u8]) -> Self {
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(b);
                <$t>::from_le_bytes(a)
            }
            fn to_le(self, out: &mut [u8]) {
                out.copy_from_slice(&self.to_le_bytes());
            }
        }
    )*};
}
fixed!(u8, u16, u32, u64);

/// The `T` at offset `at` of `b`; [`Short`] if `b` is too short.
pub fn get<T: Fixed>(b: &[u8], at: usize) -> Result<T, Short> {
    at.checked_add(T::WIDTH)
        .and_then(|end| b.get(at..end))
        .map(T::from_le)
        .ok_or(Short {
            at,
            wanted: T::WIDTH,
            len: b.len(),
        })
}

/// Stores `v` at offset `at` of `b`. Panics if `b` is too short: layouts are fixed by the encoder, whose
/// buffers are sized for them (a bug, never input).
#[allow(clippy::indexing_slicing)]
pub fn put<T: Fixed>(b: &mut [u8], at: usize, v: T) {
    v.to_le(&mut b[at..at + T::WIDTH]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writer_and_reader_round_trip_and_short_reads_are_errors() {
        let mut buf = Vec::new();
        Writer::new(&mut buf)
            .u8(7)
            .u16(0x1234)
            .u32(0xdead_beef)
            .u64(u64::MAX - 3)
            .f64(2.5)
            .bytes(b"xyz");
        assert_eq!(buf.len(), 1 + 2 + 4 + 8 + 8 + 3);
        let mut r = Reader::new(&buf);
        assert_eq!(r.u8().unwrap(), 7);
        assert_eq!(r.u16().unwrap(), 0x1234);
        assert_eq!(r.u32().unwrap(), 0xdead_beef);
        assert_eq!(r.u64().unwrap(), u64::MAX - 3);
        assert_eq!(r.f64().unwrap(), 2.5);
        assert!(r.finish().is_err());
        assert_eq!(r.bytes(3).unwrap(), b"xyz");
        r.finish().unwrap();
        let e = r.u32().unwrap_err();
        assert_eq!(
            e,
            Short {
                at: 26,
                wanted: 4,
                len: 26
            }
        );
        assert!(Reader::new(&buf).bytes(usize::MAX).is_err());
        assert!(Reader::new(&buf).count(27, 1).is_err());
        assert_eq!(Reader::new(&buf).count(3, 8).unwrap(), 3);
        assert_eq!(get::<u32>(&buf, 3).unwrap(), 0xdead_beef);
        assert!(get::<u64>(&buf, 20).is_err());
        assert!(get::<u64>(&buf, usize::MAX).is_err());
        let mut page = [0u8; 16];
        put(&mut page, 8, 0x0102_0304_0506_0708u64);
        assert_eq!(get::<u64>(&page, 8).unwrap(), 0x0102_0304_0506_0708);
    }
}
