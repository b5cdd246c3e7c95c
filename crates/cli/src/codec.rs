//! Keys and values on the command line.
//!
//! Input is parsed per the database's manifest types: `u64` in decimal; byte strings as UTF-8 text, or as
//! hexadecimal after a `0x` prefix. Output: `u64` in decimal; byte strings as text when they are valid UTF-8
//! without control characters (and do not themselves start with `0x`), otherwise as `0x`-prefixed hex, so
//! that everything printed can be typed back in.

use strata::TypeKind;

/// Encodes one command-line argument as a key or value of type `kind`; `what` names it in errors.
pub fn parse(kind: TypeKind, what: &str, text: &str) -> Result<Vec<u8>, String> {
    match kind {
        TypeKind::U64 => text
            .parse::<u64>()
            .map(|v| v.to_be_bytes().to_vec())
            .map_err(|_| format!("expected a u64 (decimal, 0 to {}) for the {what}, got {text:?}", u64::MAX)),
        TypeKind::Bytes => match text.strip_prefix("0x") {
            Some(hex) => decode_hex(hex).ok_or_else(|| {
                format!("the {what} {text:?} starts with 0x but the rest is not an even number of hex digits")
            }),
            None => Ok(text.as_bytes().to_vec()),
        },
    }
}

/// Formats an encoded key or value of type `kind` for output.
pub fn format(kind: TypeKind, bytes: &[u8]) -> String {
    match kind {
        TypeKind::U64 => match <[u8; 8]>::try_from(bytes) {
            Ok(b) => u64::from_be_bytes(b).to_string(),
            Err(_) => encode_hex(bytes),
        },
        TypeKind::Bytes => match std::str::from_utf8(bytes) {
            Ok(s) if !s.starts_with("0x") && !s.chars().any(char::is_control) => s.to_string(),
            _ => encode_hex(bytes),
        },
    }
}

fn decode_hex(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    hex.as_bytes()
        .chunks(2)
        .map(|pair| {
            let hi = (pair[0] as char).to_digit(16)?;
            let lo = (pair[1] as char).to_digit(16)?;
            Some((hi * 16 + lo) as u8)
        })
        .collect()
}

/// `0x` followed by two lowercase hex digits per byte.
pub fn encode_hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(2 + 2 * bytes.len());
    s.push_str("0x");
    for b in bytes {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// Parses a byte count: digits with an optional binary suffix `K`/`KiB`, `M`/`MiB`, `G`/`GiB` (any case,
/// `KB` etc. also mean powers of 1024).
pub fn parse_size(text: &str) -> Result<usize, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, suffix) = t.split_at(split);
    let n: usize = digits
        .parse()
        .map_err(|_| format!("expected a size in bytes such as 67108864 or 64MiB, got {text:?}"))?;
    let shift = match suffix.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        _ => return Err(format!("unknown size suffix in {text:?} (use K, M or G)")),
    };
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("size {text:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn u64_round_trip_and_errors() {
        let b = parse(TypeKind::U64, "key", "42").unwrap();
        assert_eq!(b, 42u64.to_be_bytes());
        assert_eq!(format(TypeKind::U64, &b), "42");
        let e = parse(TypeKind::U64, "key", "x1").unwrap_err();
        assert!(e.contains("expected a u64"), "{e}");
        assert!(parse(TypeKind::U64, "key", "-1").is_err());
        assert!(parse(TypeKind::U64, "key", "18446744073709551616").is_err());
    }

    #[test]
    fn bytes_text_and_hex() {
        assert_eq!(parse(TypeKind::Bytes, "key", "abc").unwrap(), b"abc");
        assert_eq!(
            parse(TypeKind::Bytes, "key", "0x00ff").unwrap(),
            vec![0, 255]
        );
        assert!(parse(TypeKind::Bytes, "key", "0x0").is_err());
        assert!(parse(TypeKind::Bytes, "key", "0xzz").is_err());
        assert_eq!(format(TypeKind::Bytes, b"hello world"), "hello world");
        assert_eq!(format(TypeKind::Bytes, &[0, 255]), "0x00ff");
        assert_eq!(format(TypeKind::Bytes, b"a\tb"), "0x610962");
        assert_eq!(format(TypeKind::Bytes, b"0x12"), "0x30783132");
        for s in ["héllo", "0x1", "a\nb", ""] {
            let shown = format(TypeKind::Bytes, s.as_bytes());
            assert_eq!(parse(TypeKind::Bytes, "key", &shown).unwrap(), s.as_bytes());
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_size("2g").unwrap(), 2 << 30);
        assert_eq!(parse_size("8K").unwrap(), 8192);
        assert!(parse_size("12 parsecs").is_err());
        assert!(parse_size("").is_err());
    }
}
