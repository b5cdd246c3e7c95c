//! Transparent-huge-page coverage of the process, for the main rows: the DRAM bucket array of `elimda` is
//! advised for huge pages (`MADV_HUGEPAGE`), and whether the kernel grants them (it may not, when memory is
//! fragmented) changes the cost of every random bucket access by a TLB miss. A round or a thread count that
//! got huge pages and one that did not are not like for like, so each main row records the process's
//! `AnonHugePages` at the end of its phase (only the row's index is alive then; the harness's own memory is
//! small and not advised).
//!
//! Cost: one read of `/proc/self/smaps_rollup` (a walk of the process's mappings) per phase, outside the
//! timed part.

/// The `AnonHugePages:` figure (kB) of a smaps text, in bytes.
fn parse_anon_huge(text: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix("AnonHugePages:")?;
        let kb: u64 = rest.trim().strip_suffix("kB")?.trim().parse().ok()?;
        Some(kb * 1024)
    })
}

/// The share of the `bytes` bytes at address `start` backed by huge pages: over the mappings of
/// `/proc/self/smaps` that overlap the range, their `AnonHugePages` (each capped at its overlap), divided by
/// `bytes`. `madvise` splits the advised 2 MiB-aligned interior into a mapping of its own, so the cap only
/// matters at the unaligned ends (which are never huge-backed anyway).
pub fn huge_share(start: usize, bytes: usize) -> Option<f64> {
    if bytes == 0 {
        return None;
    }
    let text = std::fs::read_to_string("/proc/self/smaps").ok()?;
    Some(huge_in_range(&text, start as u64, bytes as u64)? as f64 / bytes as f64)
}

/// Huge-backed bytes of `[start, start + bytes)` from a smaps text.
fn huge_in_range(text: &str, start: u64, bytes: u64) -> Option<u64> {
    let end = start + bytes;
    let mut overlap = 0u64;
    let mut total = 0u64;
    let mut seen = false;
    for line in text.lines() {
        let head = line.split_whitespace().next().unwrap_or("");
        if let Some((a, b)) = head.split_once('-')
            && let (Ok(a), Ok(b)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16))
        {
            overlap = b.min(end).saturating_sub(a.max(start));
            continue;
        }
        if overlap > 0
            && let Some(huge) = parse_anon_huge(line)
        {
            total += huge.min(overlap);
            seen = true;
        }
    }
    seen.then_some(total)
}

/// Mebibytes, for the report.
pub fn mib(bytes: Option<u64>) -> String {
    bytes.map_or("–".to_string(), |b| format!("{}", b >> 20))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_rollup_line() {
        let text = "Rss:  1000 kB\nAnonHugePages:      4096 kB\nShared_Hugetlb: 0 kB\n";
        assert_eq!(parse_anon_huge(text), Some(4 << 20));
        assert_eq!(parse_anon_huge("Rss: 1 kB\n"), None);
    }

    #[test]
    fn counts_the_mappings_that_overlap_the_range() {
        let text = "1000-5000 rw-p 00000000 00:00 0\nAnonHugePages:         8 kB\n\
                    5000-9000 rw-p 00000000 00:00 0\nAnonHugePages:        16 kB\n\
                    9000-a000 rw-p 00000000 00:00 0\nAnonHugePages:         4 kB\n";
        // [0x3000, 0x7000): 0x2000 of the first (8 KiB huge, capped at 8 KiB) and 0x2000 of the second
        // (16 KiB huge, capped at 8 KiB); the third does not overlap.
        assert_eq!(huge_in_range(text, 0x3000, 0x4000), Some(16 << 10));
        assert_eq!(huge_in_range(text, 0xb000, 0x1000), None);
    }

    #[test]
    fn reads_this_process_on_linux() {
        if cfg!(target_os = "linux") && std::path::Path::new("/proc/self/smaps_rollup").exists() {
            assert!(strata::lab::index::learned::arena::process_huge_bytes().is_some());
        }
    }
}
