//! I/O counters per file kind. Cheap atomics, shared by every file of a database; anyone can take a snapshot
//! and subtract two snapshots to measure an interval.

use std::ops::Sub;
use std::sync::atomic::{AtomicU64, Ordering};

/// What a file holds; counters are kept per kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileKind {
    /// Fixed-size pages of an index (`data.pages`).
    Pages,
    /// The write-ahead log.
    Wal,
    /// The manifest and other small metadata files.
    Meta,
    /// Immutable shard files of the dynamized family.
    Shards,
}

impl FileKind {
    pub const ALL: [FileKind; 4] = [
        FileKind::Pages,
        FileKind::Wal,
        FileKind::Meta,
        FileKind::Shards,
    ];
    fn index(self) -> usize {
        self as usize
    }
    pub fn name(self) -> &'static str {
        match self {
            FileKind::Pages => "pages",
            FileKind::Wal => "wal",
            FileKind::Meta => "meta",
            FileKind::Shards => "shards",
        }
    }
}

/// Counters of one kind at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct IoCounts {
    /// Read calls (for page files: pages read).
    pub reads: u64,
    /// Write calls (for page files: pages written).
    pub writes: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// `fdatasync` calls.
    pub syncs: u64,
}

impl Sub for IoCounts {
    type Output = IoCounts;
    fn sub(self, o: IoCounts) -> IoCounts {
        IoCounts {
            reads: self.reads.saturating_sub(o.reads),
            writes: self.writes.saturating_sub(o.writes),
            bytes_read: self.bytes_read.saturating_sub(o.bytes_read),
            bytes_written: self.bytes_written.saturating_sub(o.bytes_written),
            syncs: self.syncs.saturating_sub(o.syncs),
        }
    }
}

impl std::ops::Add for IoCounts {
    type Output = IoCounts;
    fn add(self, o: IoCounts) -> IoCounts {
        IoCounts {
            reads: self.reads + o.reads,
            writes: self.writes + o.writes,
            bytes_read: self.bytes_read + o.bytes_read,
            bytes_written: self.bytes_written + o.bytes_written,
            syncs: self.syncs + o.syncs,
        }
    }
}

/// A snapshot of every kind's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoSnapshot {
    kinds: [IoCounts; 4],
}

impl IoSnapshot {
    pub fn kind(&self, kind: FileKind) -> IoCounts {
        self.kinds[kind.index()]
    }
    pub fn total(&self) -> IoCounts {
        self.kinds.iter().fold(IoCounts::default(), |a, &b| a + b)
    }
}

impl Sub for IoSnapshot {
    type Output = IoSnapshot;
    fn sub(self, o: IoSnapshot) -> IoSnapshot {
        let mut kinds = [IoCounts::default(); 4];
        for (i, k) in kinds.iter_mut().enumerate() {
            *k = self.kinds[i] - o.kinds[i];
        }
        IoSnapshot { kinds }
    }
}

impl serde::Serialize for IoSnapshot {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(FileKind::ALL.len()))?;
        for kind in FileKind::ALL {
            m.serialize_entry(kind.name(), &self.kind(kind))?;
        }
        m.end()
    }
}

#[derive(Debug, Default)]
struct AtomicCounts {
    reads: AtomicU64,
    writes: AtomicU64,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
    syncs: AtomicU64,
}

/// Live counters, shared (`Arc<IoStats>`) by every file of a database.
#[derive(Debug, Default)]
pub struct IoStats {
    kinds: [AtomicCounts; 4],
}

impl IoStats {
    pub fn new() -> Self {
        Self::default()
    }
    #[inline]
    pub fn record_read(&self, kind: FileKind, bytes: usize) {
        let c = &self.kinds[kind.index()];
        c.reads.fetch_add(1, Ordering::Relaxed);
        c.bytes_read.fetch_add(bytes as u64, Ordering::Relaxed);
    }
    #[inline]
    pub fn record_write(&self, kind: FileKind, bytes: usize) {
        let c = &self.kinds[kind.index()];
        c.writes.fetch_add(1, Ordering::Relaxed);
        c.bytes_written.fetch_add(bytes as u64, Ordering::Relaxed);
    }
    #[inline]
    pub fn record_sync(&self, kind: FileKind) {
        self.kinds[kind.index()]
            .syncs
            .fetch_add(1, Ordering::Relaxed);
    }
    pub fn snapshot(&self) -> IoSnapshot {
        let mut kinds = [IoCounts::default(); 4];
        for (i, k) in kinds.iter_mut().enumerate() {
            let c = &self.kinds[i];
            *k = IoCounts {
                reads: c.reads.load(Ordering::Relaxed),
                writes: c.writes.load(Ordering::Relaxed),
                bytes_read: c.bytes_read.load(Ordering::Relaxed),
                bytes_written: c.bytes_written.load(Ordering::Relaxed),
                syncs: c.syncs.load(Ordering::Relaxed),
            };
        }
        IoSnapshot { kinds }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshots_subtract_per_kind() {
        let s = IoStats::new();
        s.record_read(FileKind::Pages, 4096);
        let a = s.snapshot();
        s.record_read(FileKind::Pages, 4096);
        s.record_write(FileKind::Wal, 100);
        s.record_sync(FileKind::Wal);
        let d = s.snapshot() - a;
        assert_eq!(d.kind(FileKind::Pages).reads, 1);
        assert_eq!(d.kind(FileKind::Pages).bytes_read, 4096);
        assert_eq!(d.kind(FileKind::Wal).writes, 1);
        assert_eq!(d.kind(FileKind::Wal).syncs, 1);
        assert_eq!(d.total().reads, 1);
        assert_eq!(d.total().bytes_written, 100);
    }
}
