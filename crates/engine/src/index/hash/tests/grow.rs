//! Doublings done a slice per write (`grow`): the write that starts one does not finish it, writes to moved
//! buckets are mirrored into the next generation, a process that stops mid-doubling recovers every write
//! from the old generation, and a later doubling at the same place never replays what an abandoned one
//! left in its logs.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use super::assert_matches;
use crate::index::hash::grow::SLICE;
use crate::index::hash::layout::hash;
use crate::index::hash::{HashConfig, HashIndex};
use crate::storage::pm::{MmapRegion, PersistMode};

fn config() -> HashConfig {
    HashConfig {
        initial_buckets: 1024,
        log_lines: 64,
        logs: 1,
        ..HashConfig::default()
    }
}

/// True while a doubling is under way.
fn growing(index: &HashIndex<&MmapRegion>) -> bool {
    index.resize.lock().is_some()
}

/// Inserts `key → key` for new keys from `*next` on until a doubling starts; returns with it under way.
fn until_growing(index: &HashIndex<&MmapRegion>, model: &mut HashMap<u64, u64>, next: &mut u64) {
    let grows = index.stats().grows;
    while !growing(index) {
        index.insert(*next, *next).unwrap();
        model.insert(*next, *next);
        *next += 1;
        assert!(*next < 1_000_000, "no doubling started");
    }
    assert_eq!(
        index.stats().grows,
        grows,
        "the write that started the doubling finished it"
    );
}

/// Overwrites every key of `model` with `value(key)` (each in a moved bucket or not, as the doubling
/// stands), stopping before the doubling finishes; returns how many it wrote.
fn overwrite_while_growing(
    index: &HashIndex<&MmapRegion>,
    model: &mut HashMap<u64, u64>,
    value: impl Fn(u64) -> u64,
) -> usize {
    let mut keys: Vec<u64> = model.keys().copied().collect();
    keys.sort_unstable();
    let mut written = 0;
    for k in keys {
        // Leave the last slices undone: the next write might switch.
        let g = index.current();
        if g.moved.load(Ordering::Relaxed) + 2 * SLICE >= g.layout.buckets() {
            break;
        }
        index.insert(k, value(k)).unwrap();
        model.insert(k, value(k));
        written += 1;
    }
    written
}

#[test]
fn a_doubling_runs_a_slice_per_write_and_mirrors_moved_buckets() {
    let pm = MmapRegion::anonymous(64 << 20, PersistMode::Adr).unwrap();
    let index = HashIndex::create(&pm, config()).unwrap();
    let (mut model, mut next) = (HashMap::new(), 0);
    until_growing(&index, &mut model, &mut next);
    let written = overwrite_while_growing(&index, &mut model, |k| k ^ 0xA5A5);
    assert!(written > 64, "only {written} writes during the doubling");
    let moved = index.current().moved.load(Ordering::Relaxed);
    assert!(moved > 0, "no bucket moved after {written} writes");
    // Every write so far is seen, before and after the switch, and after a reopen.
    assert_matches(&index, &model);
    while growing(&index) {
        index.insert(next, next).unwrap();
        model.insert(next, next);
        next += 1;
    }
    assert_eq!(index.stats().grows, 1);
    assert_matches(&index, &model);
    drop(index);
    let index = HashIndex::open(&pm).unwrap();
    assert_matches(&index, &model);
}

#[test]
fn stopping_mid_doubling_recovers_the_old_generation_and_a_later_doubling_ignores_its_logs() {
    let pm = MmapRegion::anonymous(64 << 20, PersistMode::Adr).unwrap();
    let index = HashIndex::create(&pm, config()).unwrap();
    let (mut model, mut next) = (HashMap::new(), 0);
    until_growing(&index, &mut model, &mut next);
    // Writes to moved buckets only, each mirrored into the next generation's log, then the process stops.
    let mut mirrored = Vec::new();
    let mut keys: Vec<u64> = model.keys().copied().collect();
    keys.sort_unstable();
    for k in keys {
        let g = index.current();
        let moved = g.moved.load(Ordering::Relaxed);
        if moved + 2 * SLICE >= g.layout.buckets() {
            break;
        }
        if hash(k) & g.layout.mask() < moved {
            index.insert(k, k + 1_000_000).unwrap();
            model.insert(k, k + 1_000_000);
            mirrored.push(k);
        } else {
            // Not mirrored (copied with its bucket later), but it drives the doubling's slices.
            index.insert(k, model[&k]).unwrap();
        }
    }
    assert!(
        mirrored.len() > 64,
        "only {} mirrored writes",
        mirrored.len()
    );
    drop(index);
    let index = HashIndex::open(&pm).unwrap();
    assert_matches(&index, &model);
    // The next doubling (at the same place and number) ends; then a few writes to its logs, fewer than
    // the abandoned attempt left there, of keys whose old records lie past them.
    while growing(&index) || index.stats().grows == 0 {
        index.insert(next, next).unwrap();
        model.insert(next, next);
        next += 1;
    }
    for &k in mirrored.iter().rev().take(16) {
        index.insert(k, k + 2_000_000).unwrap();
        model.insert(k, k + 2_000_000);
    }
    assert_matches(&index, &model);
    drop(index);
    let index = HashIndex::open(&pm).unwrap();
    assert_matches(&index, &model);
}
