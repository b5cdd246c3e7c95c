//! Redis's glob patterns (SCAN MATCH, CONFIG GET): `*` any run, `?` one byte, `[abc]`, `[^a-z]`, `\x` a
//! literal. Iterative with one backtrack point for `*`, so a pattern costs O(|pattern| · |text|) at worst.

/// True if `text` matches `pattern`.
pub fn matches(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0usize, 0usize);
    // Where to resume after the last `*`: (pattern index after it, text index it has eaten up to).
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        let step = match pattern.get(p) {
            Some(b'*') => {
                star = Some((p + 1, t));
                p += 1;
                continue;
            }
            Some(b'?') => Some(p + 1),
            Some(b'[') => class(pattern, p, text[t]),
            Some(b'\\') if p + 1 < pattern.len() => (pattern[p + 1] == text[t]).then_some(p + 2),
            Some(&c) => (c == text[t]).then_some(p + 1),
            None => None,
        };
        match (step, star) {
            (Some(next), _) => {
                p = next;
                t += 1;
            }
            (None, Some((after, eaten))) => {
                p = after;
                t = eaten + 1;
                star = Some((after, eaten + 1));
            }
            (None, None) => return false,
        }
    }
    pattern[p.min(pattern.len())..].iter().all(|&c| c == b'*')
}

/// Matches `c` against the class starting at `pattern[at] == b'['`: the index after the class if it matches.
fn class(pattern: &[u8], at: usize, c: u8) -> Option<usize> {
    let mut i = at + 1;
    let negate = pattern.get(i) == Some(&b'^');
    if negate {
        i += 1;
    }
    let mut hit = false;
    loop {
        match pattern.get(i) {
            // An unterminated class ends at the end of the pattern, as in Redis.
            None => break,
            Some(b']') => {
                i += 1;
                break;
            }
            Some(b'\\') if i + 1 < pattern.len() => {
                hit |= pattern[i + 1] == c;
                i += 2;
            }
            Some(&lo)
                if pattern.get(i + 1) == Some(&b'-')
                    && i + 2 < pattern.len()
                    && pattern[i + 2] != b']' =>
            {
                let hi = pattern[i + 2];
                let (lo, hi) = if lo <= hi { (lo, hi) } else { (hi, lo) };
                hit |= (lo..=hi).contains(&c);
                i += 3;
            }
            Some(&x) => {
                hit |= x == c;
                i += 1;
            }
        }
    }
    (hit != negate).then_some(i)
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn redis_glob_semantics() {
        let yes = [
            ("*", ""),
            ("*", "abc"),
            ("a*", "abc"),
            ("*c", "abc"),
            ("a?c", "abc"),
            ("h[ae]llo", "hello"),
            ("h[^e]llo", "hallo"),
            ("h[a-b]llo", "hbllo"),
            ("user:*:name", "user:42:name"),
            ("a\\*b", "a*b"),
            ("*a*a*a*", "banana-a"),
        ];
        let no = [
            ("a*", "bac"),
            ("a?c", "ac"),
            ("h[ae]llo", "hillo"),
            ("h[^e]llo", "hello"),
            ("a\\*b", "aab"),
            ("abc", "abcd"),
            ("", "a"),
        ];
        for (p, t) in yes {
            assert!(matches(p.as_bytes(), t.as_bytes()), "{p} ~ {t}");
        }
        for (p, t) in no {
            assert!(!matches(p.as_bytes(), t.as_bytes()), "{p} !~ {t}");
        }
        // Pathological patterns stay polynomial.
        let text = vec![b'a'; 2000];
        assert!(!matches(b"*a*a*a*a*a*a*a*b", &text));
    }
}
