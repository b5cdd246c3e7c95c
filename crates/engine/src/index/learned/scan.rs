//! Range scans at a snapshot: group by group, merging each group's array with its buffers in key order,
//! each group clipped to its own key range (from its pivot to the next group's).
//!
//! A scan reads every record at one sequence number, so it sees a consistent point-in-time view however
//! long it runs and whatever writes go on. When it reaches a record that a compaction moved, it restarts
//! from the root at that key (the keys before it were already visited) and goes on in the new group.
//!
//! Cost: per group, binary searches to the range's ends, then one record read per candidate (dead and
//! removed records are skipped).

use super::core::LearnedIndex;
use super::group::Group;
use super::slot::{Read, Slot};
use crate::index::Direction;
use crossbeam_epoch::{self as epoch, Guard};

/// Why a group's scan stopped.
enum Stop {
    /// The visitor or `max` ended the scan.
    Done,
    /// A record moved: restart from the root at this key.
    Restart(u64),
    /// The group is exhausted.
    Next,
}

impl LearnedIndex {
    /// Visits up to `max` records of `lo..=hi` in `dir` order at sequence number `at` (a live snapshot's,
    /// or a fresh one when `at` is `None`), while `visit` returns true; returns how many it visited.
    pub fn scan(
        &self,
        lo: u64,
        hi: u64,
        dir: Direction,
        max: usize,
        visit: &mut dyn FnMut(u64, &[u8]) -> bool,
    ) -> usize {
        let snap = self.snapshot();
        snap.scan(lo, hi, dir, max, visit)
    }

    pub(super) fn scan_at(
        &self,
        lo: u64,
        hi: u64,
        dir: Direction,
        max: usize,
        at: u64,
        visit: &mut dyn FnMut(u64, &[u8]) -> bool,
    ) -> usize {
        if lo > hi || max == 0 {
            return 0;
        }
        let guard = epoch::pin();
        let mut count = 0;
        let (mut lo, mut hi) = (lo, hi);
        'restart: loop {
            let root = self.root(&guard);
            let mut i = root.locate(if dir == Direction::Forward { lo } else { hi });
            while let Some((_, g)) = root.group(i, &guard) {
                // Clip to the group's own range: a merge's shared temporary buffer may hold keys of the
                // neighbour's range (see `merge.rs`).
                let own_lo = lo.max(root.pivots.get(i).copied().unwrap_or(0));
                let own_hi = root
                    .pivots
                    .get(i + 1)
                    .map_or(hi, |&p| hi.min(p.saturating_sub(1)));
                let stop = if own_lo <= own_hi {
                    scan_group(g, own_lo, own_hi, dir, at, max, &mut count, visit, &guard)
                } else {
                    Stop::Next
                };
                match stop {
                    Stop::Done => return count,
                    Stop::Restart(k) => {
                        if dir == Direction::Forward {
                            lo = k;
                        } else {
                            hi = k;
                        }
                        continue 'restart;
                    }
                    Stop::Next => {}
                }
                match dir {
                    Direction::Forward => {
                        i += 1;
                        match root.pivots.get(i) {
                            Some(&p) if p <= hi => lo = lo.max(p),
                            _ => return count,
                        }
                    }
                    Direction::Reverse => {
                        let Some(p) = root.pivots.get(i).copied().filter(|&p| p > lo && i > 0)
                        else {
                            return count;
                        };
                        hi = hi.min(p - 1);
                        i -= 1;
                    }
                }
            }
            return count;
        }
    }
}

/// One candidate source of a group: its records within the range, in key order.
enum Source<'g> {
    Array(&'g [u64], &'g [Slot]),
    Buffer(Vec<(u64, *const Slot)>),
}

impl<'g> Source<'g> {
    fn len(&self) -> usize {
        match self {
            Source::Array(k, _) => k.len(),
            Source::Buffer(e) => e.len(),
        }
    }

    /// The `i`th candidate in `dir` order.
    fn get(&self, i: usize, dir: Direction) -> Option<(u64, &'g Slot)> {
        let i = match dir {
            Direction::Forward => i,
            Direction::Reverse => self.len().checked_sub(i + 1)?,
        };
        match self {
            Source::Array(k, s) => Some((*k.get(i)?, s.get(i)?)),
            // SAFETY: buffer records live as long as their buffer, reached while pinned.
            Source::Buffer(e) => e.get(i).map(|&(k, p)| (k, unsafe { &*p })),
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn scan_group(
    g: &Group,
    lo: u64,
    hi: u64,
    dir: Direction,
    at: u64,
    max: usize,
    count: &mut usize,
    visit: &mut dyn FnMut(u64, &[u8]) -> bool,
    guard: &Guard,
) -> Stop {
    let a = g.search.lower_bound(&g.keys, lo);
    let b = if hi == u64::MAX {
        g.keys.len()
    } else {
        g.search.lower_bound(&g.keys, hi + 1)
    }
    .max(a);
    let mut sources = vec![Source::Array(
        g.keys.get(a..b).unwrap_or(&[]),
        g.slots.get(a..b).unwrap_or(&[]),
    )];
    for buffer in g.buffers().into_iter().flatten() {
        sources.push(Source::Buffer(buffer.range(lo, hi, guard)));
    }
    let mut pos = vec![0usize; sources.len()];
    loop {
        // The next candidate in `dir` order; ties go to the earlier source.
        let mut best: Option<(usize, u64)> = None;
        for (si, s) in sources.iter().enumerate() {
            if let Some((k, _)) = pos.get(si).and_then(|&p| s.get(p, dir)) {
                let better = match (best, dir) {
                    (None, _) => true,
                    (Some((_, bk)), Direction::Forward) => k < bk,
                    (Some((_, bk)), Direction::Reverse) => k > bk,
                };
                if better {
                    best = Some((si, k));
                }
            }
        }
        let Some((si, k)) = best else {
            return Stop::Next;
        };
        let Some((_, slot)) = sources
            .get(si)
            .zip(pos.get(si))
            .and_then(|(s, &p)| s.get(p, dir))
        else {
            return Stop::Next;
        };
        if let Some(p) = pos.get_mut(si) {
            *p += 1;
        }
        match slot.read(at, guard) {
            Read::Found(Some(v)) => {
                *count += 1;
                if !visit(k, &v) || *count >= max {
                    return Stop::Done;
                }
            }
            Read::Found(None) | Read::Dead => {}
            Read::Moved => return Stop::Restart(k),
        }
    }
}
