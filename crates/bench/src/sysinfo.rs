//! The machine a run happened on (cores, memory, kernel, CPU model) and UTC timestamps, read from `std` and
//! Linux's `/proc` without extra dependencies. Every field is optional: on other systems it is simply absent.

use serde::Serialize;
use std::time::{SystemTime, UNIX_EPOCH};

/// Description of the machine.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// `std::thread::available_parallelism`.
    pub cores: Option<usize>,
    /// `MemTotal` of `/proc/meminfo`, in bytes.
    pub memory_bytes: Option<u64>,
    /// `/proc/sys/kernel/osrelease`.
    pub kernel: Option<String>,
    /// First `model name` of `/proc/cpuinfo`.
    pub cpu: Option<String>,
    pub os: &'static str,
    pub arch: &'static str,
    /// Type and device of the filesystem holding the data directory (`/proc/self/mounts`), when known.
    pub filesystem: Option<String>,
}

/// `rustc --version` of the compiler that built the lab (recorded by the build script).
pub const RUSTC_VERSION: &str = env!("STRATA_RUSTC_VERSION");

/// The filesystem type and device of the mount that holds `path` (longest matching mount point).
pub fn filesystem_of(path: &std::path::Path) -> Option<String> {
    let path = std::fs::canonicalize(path).ok()?;
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    let mut best: Option<(usize, String)> = None;
    for line in mounts.lines() {
        let mut f = line.split_whitespace();
        let (Some(dev), Some(mnt), Some(fs)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let mnt = mnt.replace("\\040", " ");
        if path.starts_with(&mnt) && best.as_ref().is_none_or(|(len, _)| mnt.len() >= *len) {
            best = Some((mnt.len(), format!("{fs} ({dev} on {mnt})")));
        }
    }
    best.map(|(_, s)| s)
}

impl Machine {
    pub fn detect() -> Self {
        Machine {
            cores: std::thread::available_parallelism().ok().map(|n| n.get()),
            memory_bytes: meminfo_total(),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .ok()
                .map(|s| s.trim().to_string()),
            cpu: cpu_model(),
            os: std::env::consts::OS,
            arch: std::env::consts::ARCH,
            filesystem: None,
        }
    }
}

fn meminfo_total() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    info.lines().find_map(|l| {
        let kb: u64 = l
            .strip_prefix("MemTotal:")?
            .trim()
            .strip_suffix("kB")?
            .trim()
            .parse()
            .ok()?;
        Some(kb * 1024)
    })
}

fn cpu_model() -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    info.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == "model name").then(|| v.trim().to_string())
    })
}

/// A UTC date and time, to the second.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UtcTime {
    pub year: i64,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
}

impl UtcTime {
    pub fn now() -> Self {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        Self::from_unix(secs as i64)
    }

    /// Civil date of a Unix timestamp (Howard Hinnant's `civil_from_days`).
    pub fn from_unix(secs: i64) -> Self {
        let days = secs.div_euclid(86_400);
        let rem = secs.rem_euclid(86_400);
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        let year = yoe + era * 400 + i64::from(month <= 2);
        UtcTime {
            year,
            month,
            day,
            hour: (rem / 3600) as u32,
            minute: (rem % 3600 / 60) as u32,
            second: (rem % 60) as u32,
        }
    }

    /// `2025-01-31T12-34-56Z`: sortable and safe in file names (no colons).
    pub fn file_name(&self) -> String {
        format!(
            "{:04}-{:02}-{:02}T{:02}-{:02}-{:02}Z",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )
    }

    /// ISO 8601: `2025-01-31T12:34:56Z`.
    pub fn iso(&self) -> String {
        format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(UtcTime::from_unix(0).iso(), "1970-01-01T00:00:00Z");
        assert_eq!(
            UtcTime::from_unix(951_782_400).iso(),
            "2000-02-29T00:00:00Z"
        );
        assert_eq!(
            UtcTime::from_unix(1_735_689_599).iso(),
            "2024-12-31T23:59:59Z"
        );
        assert_eq!(
            UtcTime::from_unix(1_735_689_600).file_name(),
            "2025-01-01T00-00-00Z"
        );
    }

    #[test]
    fn machine_detects_cores() {
        assert!(Machine::detect().cores.unwrap_or(1) >= 1);
    }
}
