//! Point-in-time views of a database ([`RawDb::snapshot`], [`Db::snapshot`](super::Db::snapshot)).
//!
//! A snapshot reads the records as they were when it was taken: every batch applied before is seen whole,
//! none applied after is seen at all, while writers go on. Only families with
//! [`Capabilities::snapshots`](crate::Capabilities) have them (the learned index keeps the versions a live
//! snapshot can read in its records' version chains); the others answer `InvalidArgument`.
//!
//! Cost: taking one is a registration under a short lock; reads cost what the index's own reads cost plus
//! a walk of a record's version chain to the snapshot's version. While it lives, the versions it can read
//! are not reclaimed, so memory grows with the writes made meanwhile: drop snapshots when done. A snapshot
//! holds the database handle (like an iterator), so it stays readable until dropped.

use super::{RawDb, RawIter};
use crate::error::Result;
use crate::index::{Direction, IndexSnapshot, KeyRange, RecordVisitor, collect_into};
use std::sync::Arc;

/// A point-in-time view of an untyped database (see the module doc). Clones share the view.
#[derive(Clone)]
pub struct RawSnapshot {
    db: RawDb,
    view: Arc<dyn IndexSnapshot>,
}

impl std::fmt::Debug for RawSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawSnapshot").field("db", &self.db).finish()
    }
}

impl RawSnapshot {
    pub(super) fn new(db: RawDb, view: Box<dyn IndexSnapshot>) -> RawSnapshot {
        RawSnapshot {
            db,
            view: Arc::from(view),
        }
    }

    /// Looks a key up as of the snapshot; on a hit, the value replaces `out`'s contents.
    pub fn get_into(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        self.db.validate_key(key)?;
        self.view.get(key, out)
    }

    /// Looks a key up as of the snapshot.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut out = Vec::new();
        Ok(self.get_into(key, &mut out)?.then_some(out))
    }

    /// Appends up to `max` records of `range` as of the snapshot, in `dir` order, to `out`.
    pub fn scan_into(
        &self,
        range: &KeyRange,
        dir: Direction,
        max: usize,
        out: &mut Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<()> {
        self.scan_visit(range, dir, max, &mut collect_into(out))
            .map(drop)
    }

    /// Calls `visit(key, value)` for up to `max` records of `range` as of the snapshot, in `dir` order,
    /// until it returns `false`; returns how many it visited.
    pub fn scan_visit(
        &self,
        range: &KeyRange,
        dir: Direction,
        max: usize,
        visit: &mut RecordVisitor<'_>,
    ) -> Result<usize> {
        self.view.scan_visit(range, dir, max, visit)
    }

    /// An ordered iterator over `range` as of the snapshot: unlike [`RawDb::range`], every chunk it reads
    /// comes from the same point in time, so the whole iteration is consistent.
    pub fn range(&self, range: KeyRange, dir: Direction) -> RawIter {
        RawIter::over_snapshot(self.clone(), range, dir)
    }
}
