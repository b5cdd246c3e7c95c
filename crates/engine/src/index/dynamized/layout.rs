//! Reconstruction planning: where a flushed shard goes under each layout policy, and compaction of levels
//! with too many deleted entries.
//!
//! Level `i` holds at most `capacity(i)` = N_b · s^(i+1) entries (BSM: N_b · 2^i). Merges always run from the
//! bottom of the affected range upwards (level j−1 into j first, then j−2 into j−1, …), so a tombstone is
//! never moved below an older record of its key without meeting it: the tombstone ordering invariant.
//!
//! * **Leveling**: the new shard is merged into level 0 if it fits; otherwise the first level j that can
//!   absorb level j−1 is found (a new level if none), level j−1 is merged into j, the levels above move down
//!   by one without rewriting, and the new shard becomes level 0.
//! * **Tiering**: level 0 takes the new shard as another run while it has fewer than s runs; otherwise the
//!   first level j with fewer than s runs is found, and from j upwards every level's runs are merged into one
//!   run appended to the level below; the new shard becomes level 0's only run.
//! * **BSM**: the new shard and every level above the first empty one are merged into that level.
//!
//! Compaction: a level whose tombstones plus tags exceed δ · capacity, or (leveling) whose entries exceed its
//! capacity after a compaction above it, is merged down: with the level below into one shard there
//! (leveling, BSM), or into one new run of the level below (tiering, as when the level fills up); the last
//! level is rebuilt in place, which drops its tombstones and tagged records.
//!
//! Moves: every shard that lands on a level goes through the merge function with that target level, a lone
//! shard too. The merge function moves a lone shard unchanged when nothing in it would change and its shard
//! factory accepts it at the target level, and rebuilds it for that level otherwise — so a shard built for
//! an in-memory level is rewritten as a disk shard when it moves down to a level that lives on disk
//! (`core::ShardFactory`).
//!
//! Cost (amortised, per record): leveling O(s · log_s(n/N_b)) rewrites, tiering O(log_s(n/N_b)), BSM
//! O(log₂(n/N_b)); a query visits 1 (leveling, BSM) or up to s (tiering) shards per level.

use super::options::{DynOptions, Layout};
use super::version::{Level, ShardSlot};
use crate::error::Result;
use std::sync::Arc;

/// Builds one shard for level `level` (third argument) from shards given newest first; `bottom` = nothing
/// older exists below them. Returns `None` when everything cancelled out; may return a lone input as it is
/// (a move).
pub type MergeFn<'a, S> =
    dyn FnMut(&[Arc<ShardSlot<S>>], bool, usize) -> Result<Option<Arc<ShardSlot<S>>>> + 'a;

fn entries<S: super::shard::Shard>(level: &Level<S>) -> u64 {
    level.iter().map(|s| s.entries()).sum()
}

fn deleted<S: super::shard::Shard>(level: &Level<S>) -> u64 {
    level.iter().map(|s| s.deleted()).sum()
}

/// True if every level after `i` is empty.
fn nothing_below<S>(levels: &[Level<S>], i: usize) -> bool {
    levels[i + 1..].iter().all(Vec::is_empty)
}

/// Merges the runs of `upper` (moved out) into level `to` together with level `to`'s own runs when
/// `with_target`, leaving the result as level `to`'s newest run.
fn merge_into<S: super::shard::Shard>(
    levels: &mut [Level<S>],
    from: usize,
    to: usize,
    with_target: bool,
    merge: &mut MergeFn<'_, S>,
) -> Result<()> {
    let upper = std::mem::take(&mut levels[from]);
    if upper.is_empty() {
        return Ok(());
    }
    let mut inputs: Vec<Arc<ShardSlot<S>>> = upper.into_iter().rev().collect();
    if with_target {
        inputs.extend(std::mem::take(&mut levels[to]).into_iter().rev());
    }
    let bottom = levels[to].is_empty() && nothing_below(levels, to);
    // A lone shard that would come out unchanged is moved by `merge` (if it may live at `to`).
    if let Some(slot) = merge(&inputs, bottom, to)? {
        levels[to].push(slot);
    }
    Ok(())
}

/// Tiering: merges the runs of level `from` into one new run of the level below, first making room there
/// (the first level below with fewer than `s` runs, or a new one, takes the runs above it merged, bottom
/// up), so a level only ever receives runs newer than its own.
fn tier_down<S: super::shard::Shard>(
    levels: &mut Vec<Level<S>>,
    from: usize,
    s: usize,
    merge: &mut MergeFn<'_, S>,
) -> Result<()> {
    let j = (from + 1..=levels.len())
        .find(|&l| l == levels.len() || levels[l].len() < s)
        .expect("the last candidate always qualifies");
    if j == levels.len() {
        levels.push(Vec::new());
    }
    for l in (from + 1..=j).rev() {
        merge_into(levels, l - 1, l, false, merge)?;
    }
    Ok(())
}

/// Places a freshly flushed shard into `levels`.
pub fn place<S: super::shard::Shard>(
    levels: &mut Vec<Level<S>>,
    incoming: Arc<ShardSlot<S>>,
    opts: &DynOptions,
    merge: &mut MergeFn<'_, S>,
) -> Result<()> {
    if levels.is_empty() {
        levels.push(Vec::new());
    }
    match opts.layout {
        Layout::Leveling => {
            if entries(&levels[0]) + incoming.entries() <= opts.level_capacity(0) {
                levels[0].push(incoming);
                return merge_into(levels, 0, 0, false, merge);
            }
            let j = (1..=levels.len())
                .find(|&i| {
                    i == levels.len()
                        || entries(&levels[i]) + entries(&levels[i - 1]) <= opts.level_capacity(i)
                })
                .expect("the last candidate always qualifies");
            if j == levels.len() {
                levels.push(Vec::new());
            }
            for i in (1..=j).rev() {
                merge_into(levels, i - 1, i, true, merge)?;
            }
            levels[0].push(incoming);
        }
        Layout::Tiering => {
            let s = opts.scale_factor;
            if levels[0].len() < s {
                levels[0].push(incoming);
                return Ok(());
            }
            tier_down(levels, 0, s, merge)?;
            levels[0].push(incoming);
        }
        Layout::Bsm => {
            let j = (0..=levels.len())
                .find(|&i| i == levels.len() || levels[i].is_empty())
                .expect("the last candidate always qualifies");
            if j == levels.len() {
                levels.push(Vec::new());
            }
            let mut inputs = vec![incoming];
            for level in levels[..j].iter_mut() {
                inputs.extend(std::mem::take(level).into_iter().rev());
            }
            let bottom = nothing_below(levels, j);
            if let Some(slot) = merge(&inputs, bottom, j)? {
                levels[j].push(slot);
            }
        }
    }
    Ok(())
}

/// True if level `i` holds more deleted entries than δ allows.
pub fn over_delete_bound<S: super::shard::Shard>(
    levels: &[Level<S>],
    i: usize,
    opts: &DynOptions,
) -> bool {
    deleted(&levels[i]) as f64 > opts.max_delete_proportion * opts.level_capacity(i) as f64
}

/// Merges level `i` into the level below, or rebuilds it in place (dropping every tombstone and tagged
/// record) if it is the last level. Leveling and BSM merge it with the level below into one shard there;
/// tiering merges its runs into one new run of the level below, first making room there as a flush does
/// (so a compaction never rewrites the deeper level's runs, which are no more deleted than before).
pub fn compact_level<S: super::shard::Shard>(
    levels: &mut Vec<Level<S>>,
    i: usize,
    opts: &DynOptions,
    merge: &mut MergeFn<'_, S>,
) -> Result<()> {
    if i + 1 == levels.len() {
        let inputs: Vec<_> = std::mem::take(&mut levels[i]).into_iter().rev().collect();
        if let Some(slot) = merge(&inputs, true, i)? {
            levels[i].push(slot);
        }
        return Ok(());
    }
    if opts.layout == Layout::Tiering {
        return tier_down(levels, i, opts.scale_factor, merge);
    }
    merge_into(levels, i, i + 1, true, merge)?;
    // Leveling and BSM keep one shard per level; a merge may have overfilled the level below, which the
    // caller's sweep handles.
    Ok(())
}

/// Enforces δ on every level, top down; a compaction that overfills the level below (leveling) carries on
/// there. Returns how many compactions ran.
pub fn enforce_delete_bound<S: super::shard::Shard>(
    levels: &mut Vec<Level<S>>,
    opts: &DynOptions,
    merge: &mut MergeFn<'_, S>,
) -> Result<usize> {
    let mut ran = 0;
    let mut i = 0;
    while i < levels.len() {
        let overfull = opts.layout == Layout::Leveling
            && i + 1 < levels.len()
            && entries(&levels[i]) > opts.level_capacity(i);
        if over_delete_bound(levels, i, opts) || overfull {
            compact_level(levels, i, opts, merge)?;
            ran += 1;
        }
        i += 1;
    }
    while levels.last().is_some_and(Vec::is_empty) {
        levels.pop();
    }
    Ok(ran)
}

/// The level with the largest share of deleted entries, if any level has one.
pub fn most_deleted_level<S: super::shard::Shard>(levels: &[Level<S>]) -> Option<usize> {
    levels
        .iter()
        .enumerate()
        .filter(|(_, l)| deleted(l) > 0)
        .max_by(|(_, a), (_, b)| {
            let ra = deleted(a) as f64 / entries(a).max(1) as f64;
            let rb = deleted(b) as f64 / entries(b).max(1) as f64;
            ra.total_cmp(&rb)
        })
        .map(|(i, _)| i)
}
