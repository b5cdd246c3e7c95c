//! Unit tests of the suite's harness: the answer checks catch a broken index (single- and multi-threaded),
//! the thread split covers every operation, the sweep always has the goal's thread counts. The end-to-end
//! run is `lab_tests::the_hash_suite_runs_every_experiment_at_a_tiny_size`.

use super::threads::{Concurrent, parallel, split};
use super::*;
use std::sync::Mutex;

pub(super) fn cfg(records: u64, threads: Vec<u32>) -> SuiteConfig {
    let opts = crate::suites::RunOptions::new(NAME);
    SuiteConfig {
        records,
        ops: None,
        threads,
        target_rate: None,
        codec: crate::values::ValueCodec::u64(),
        nexts: 0,
        cache_bytes: 0,
        durability: opts.durability,
        page_size: 4096,
        seed: 7,
        data_dir: std::env::temp_dir(),
        progress: false,
    }
}

/// A DRAM map that loses every 97th insert (a broken index).
struct Lossy(DramMap, u64);

impl Ops for Lossy {
    fn put(&mut self, k: u64, v: u64) -> Result<()> {
        self.1 += 1;
        if !self.1.is_multiple_of(97) {
            self.0.insert(k, v);
        }
        Ok(())
    }
    fn lookup(&self, k: u64) -> Result<Option<u64>> {
        Ok(self.0.get(&k).copied())
    }
    fn del(&mut self, k: u64) -> Result<bool> {
        Ok(self.0.remove(&k).is_some())
    }
    fn state(&self) -> (f64, u64, u64) {
        (0.0, 0, 0)
    }
}

#[test]
fn the_single_threaded_harness_catches_lost_inserts_and_passes_a_correct_map() {
    let c = cfg(3000, vec![1]);
    let k = keys(&c);
    let err = phases(
        &c,
        ELIMDA,
        &mut Lossy(DramMap::default(), 0),
        &k.preload,
        &main_steps(&k),
        None,
    )
    .unwrap_err();
    assert!(err.to_string().contains("wrong answer"), "{err}");
    let rows = phases(
        &c,
        HASHBROWN,
        &mut DramMap::default(),
        &k.preload,
        &main_steps(&k),
        None,
    )
    .unwrap();
    assert_eq!(rows.len(), PHASES.len());
}

impl Concurrent for Mutex<Lossy> {
    fn put(&self, k: u64, v: u64) -> Result<()> {
        self.lock().unwrap().put(k, v)
    }
    fn lookup(&self, k: u64) -> Result<Option<u64>> {
        self.lock().unwrap().lookup(k)
    }
    fn del(&self, k: u64) -> Result<bool> {
        self.lock().unwrap().del(k)
    }
    fn state(&self) -> (f64, u64, u64) {
        (0.0, 0, 0)
    }
}

#[test]
fn the_parallel_harness_counts_wrong_answers_from_every_thread() {
    let index = Mutex::new(Lossy(DramMap::default(), 0));
    let keys: Vec<u64> = (1..=10_000).collect();
    let t = parallel(&split(&keys, 2), |_, &k| {
        index.put(k, value(k)).map(|()| true)
    })
    .unwrap();
    assert_eq!((t.wrong, t.lat.count()), (0, 10_000));
    let t = parallel(&split(&keys, 3), |_, &k| {
        Ok(index.lookup(k)? == Some(value(k)))
    })
    .unwrap();
    assert_eq!(t.wrong, 10_000 / 97);
    assert!(t.secs > 0.0);
}

#[test]
fn split_covers_every_item_once_with_one_run_per_thread() {
    let items: Vec<u32> = (0..10).collect();
    for threads in 1..=12 {
        let runs = split(&items, threads);
        assert_eq!(runs.len(), threads);
        let all: Vec<u32> = runs.concat();
        assert_eq!(all, items, "{threads} threads");
    }
}

#[test]
fn the_sweep_always_has_one_and_two_threads() {
    assert_eq!(sweep(&cfg(10, vec![1])), vec![1, 2]);
    assert_eq!(sweep(&cfg(10, vec![4, 1])), vec![1, 2, 4]);
    assert_eq!(sweep(&cfg(10, vec![3])), vec![1, 2, 3]);
}
