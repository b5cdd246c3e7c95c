//! # Checkable values
//!
//! Every value the lab writes says which key and which version of that key it belongs to, so that every read
//! can be checked: a value read back must decode, must name the key it was read under, and must carry a
//! version the workload actually wrote.
//!
//! The first 8 bytes are the big-endian word `version << 40 | key` (keys below 2^40, versions below 2^24).
//! In [`ValueFormat::U64`] that word is the whole value; in [`ValueFormat::Bytes`] it is followed by filler
//! bytes drawn from a SplitMix64 stream seeded by the word, up to the run's value size (at least 8), so a
//! value damaged anywhere fails the check. Version 0 is never written (it means "absent" in version tables).

use crate::driver::ValueFormat;
use crate::error::{BenchError, Result};

/// Keys must be below this.
pub const KEY_LIMIT: u64 = 1 << 40;
/// Versions must be below this.
pub const VERSION_LIMIT: u32 = 1 << 24;

/// Encodes and checks the values of one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValueCodec {
    format: ValueFormat,
    size: usize,
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The `len` filler bytes after header `word`, in chunks of up to 8 bytes.
fn filler(word: u64, len: usize) -> impl Iterator<Item = Filler> {
    let mut state = word;
    (0..len.div_ceil(8)).map(move |i| Filler {
        bytes: splitmix64(&mut state).to_le_bytes(),
        len: (len - i * 8).min(8),
    })
}

/// One chunk of filler.
struct Filler {
    bytes: [u8; 8],
    len: usize,
}

impl Filler {
    fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

impl ValueCodec {
    /// 8-byte `u64` values.
    pub fn u64() -> Self {
        ValueCodec {
            format: ValueFormat::U64,
            size: 8,
        }
    }

    /// Byte-string values of `size` bytes (at least 8).
    pub fn bytes(size: usize) -> Result<Self> {
        if !(8..=1 << 20).contains(&size) {
            return Err(BenchError::Usage(format!(
                "value size {size} must be 8 to 1048576 bytes"
            )));
        }
        Ok(ValueCodec {
            format: ValueFormat::Bytes,
            size,
        })
    }

    pub fn format(&self) -> ValueFormat {
        self.format
    }

    /// Bytes per value.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Writes the value of `key` at `version` into `out` (replacing its contents).
    pub fn encode(&self, key: u64, version: u32, out: &mut Vec<u8>) {
        debug_assert!(key < KEY_LIMIT && version > 0 && version < VERSION_LIMIT);
        let word = (u64::from(version) << 40) | key;
        out.clear();
        out.extend_from_slice(&word.to_be_bytes());
        for chunk in filler(word, self.size - 8) {
            out.extend_from_slice(chunk.as_slice());
        }
    }

    /// A fresh value of `key` at `version`.
    pub fn value(&self, key: u64, version: u32) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.size);
        self.encode(key, version, &mut v);
        v
    }

    /// The version carried by `bytes`, read under `key`; an error says what is wrong.
    pub fn decode(&self, key: u64, bytes: &[u8]) -> Result<u32> {
        let bad = |what: &str| {
            Err(BenchError::Verify(format!(
                "value read under key {key} {what} ({} bytes: {})",
                bytes.len(),
                hex_prefix(bytes)
            )))
        };
        if bytes.len() != self.size {
            return bad(&format!("has the wrong length, expected {}", self.size));
        }
        let word = u64::from_be_bytes(bytes[..8].try_into().expect("8 bytes"));
        if word & (KEY_LIMIT - 1) != key {
            return bad(&format!("belongs to key {}", word & (KEY_LIMIT - 1)));
        }
        let version = (word >> 40) as u32;
        if version == 0 {
            return bad("carries version 0, which is never written");
        }
        // Compare the filler in place: this runs on every read of a benchmark, so it does not allocate.
        let mut rest = bytes[8..].chunks(8);
        if !filler(word, self.size - 8).all(|chunk| rest.next() == Some(chunk.as_slice())) {
            return bad("is damaged after its header");
        }
        Ok(version)
    }

    /// Checks that `bytes`, read under `key`, is exactly version `version`.
    pub fn check(&self, key: u64, version: u32, bytes: &[u8]) -> Result<()> {
        let got = self.decode(key, bytes)?;
        if got != version {
            return Err(BenchError::Verify(format!(
                "key {key}: read version {got}, expected {version}"
            )));
        }
        Ok(())
    }
}

fn hex_prefix(bytes: &[u8]) -> String {
    let mut s: String = bytes.iter().take(16).map(|b| format!("{b:02x}")).collect();
    if bytes.len() > 16 {
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_and_damage_is_caught() {
        for codec in [
            ValueCodec::u64(),
            ValueCodec::bytes(8).unwrap(),
            ValueCodec::bytes(100).unwrap(),
        ] {
            let v = codec.value(12345, 7);
            assert_eq!(v.len(), codec.size());
            assert_eq!(codec.decode(12345, &v).unwrap(), 7);
            codec.check(12345, 7, &v).unwrap();
            assert!(codec.check(12345, 8, &v).is_err());
            assert!(codec.decode(12346, &v).is_err(), "wrong key");
            for i in 0..v.len() {
                let mut d = v.clone();
                d[i] ^= 0x10;
                assert!(codec.check(12345, 7, &d).is_err(), "flip at byte {i}");
                if codec.size() > 8 {
                    // The filler depends on the header: any flip fails decoding itself.
                    assert!(codec.decode(12345, &d).is_err(), "flip at byte {i}");
                }
            }
            assert!(codec.decode(12345, &v[..v.len() - 1]).is_err());
        }
        assert_ne!(
            ValueCodec::bytes(100).unwrap().value(1, 1),
            ValueCodec::bytes(100).unwrap().value(1, 2)
        );
        assert!(ValueCodec::bytes(7).is_err());
    }
}
