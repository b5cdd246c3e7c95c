//! The ordered iterator over encoded records ([`RawIter`]).

use super::{RawDb, RawSnapshot};
use crate::error::Result;
use crate::index::{Direction, KeyRange};

/// What an iterator reads: the live database, or a snapshot of it.
enum Source {
    Live(RawDb),
    Snapshot(RawSnapshot),
}

impl Source {
    fn scan_into(
        &self,
        range: &KeyRange,
        dir: Direction,
        max: usize,
        out: &mut Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<()> {
        match self {
            Source::Live(db) => db.scan_into(range, dir, max, out),
            Source::Snapshot(s) => s.scan_into(range, dir, max, out),
        }
    }
}

/// Chunk size of iterators.
const ITER_CHUNK: usize = 256;

/// Ordered iterator over encoded records (see [`RawDb::range`]).
pub struct RawIter {
    source: Source,
    range: KeyRange,
    dir: Direction,
    buf: Vec<(Vec<u8>, Vec<u8>)>,
    pos: usize,
    done: bool,
}

impl RawIter {
    /// An iterator over `range` of `db` in `dir` order.
    pub(super) fn new(db: RawDb, range: KeyRange, dir: Direction) -> RawIter {
        RawIter::from_source(Source::Live(db), range, dir)
    }

    /// An iterator over `range` of `snapshot` in `dir` order.
    pub(super) fn over_snapshot(snapshot: RawSnapshot, range: KeyRange, dir: Direction) -> RawIter {
        RawIter::from_source(Source::Snapshot(snapshot), range, dir)
    }

    fn from_source(source: Source, range: KeyRange, dir: Direction) -> RawIter {
        RawIter {
            source,
            range,
            dir,
            buf: Vec::new(),
            pos: 0,
            done: false,
        }
    }
}

impl Iterator for RawIter {
    type Item = Result<(Vec<u8>, Vec<u8>)>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.pos == self.buf.len() {
            if self.done {
                return None;
            }
            if let Some((last, _)) = self.buf.last() {
                let after = std::ops::Bound::Excluded(last.clone());
                match self.dir {
                    Direction::Forward => self.range.lo = after,
                    Direction::Reverse => self.range.hi = after,
                }
            }
            self.buf.clear();
            self.pos = 0;
            if let Err(e) = self
                .source
                .scan_into(&self.range, self.dir, ITER_CHUNK, &mut self.buf)
            {
                self.done = true;
                return Some(Err(e));
            }
            if self.buf.len() < ITER_CHUNK {
                self.done = true;
            }
            if self.buf.is_empty() {
                return None;
            }
        }
        let item = std::mem::take(&mut self.buf[self.pos]);
        self.pos += 1;
        if self.pos == self.buf.len() {
            // Keep the last key for the next chunk's start.
            self.buf[self.pos - 1].0 = item.0.clone();
        }
        Some(Ok(item))
    }
}
