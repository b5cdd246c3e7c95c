//! Every engine of the build against a `BTreeMap` model: seeded random puts, batches, deletes and gets, scans
//! in both directions with bounds and limits, then checkpoint, close, reopen and a full comparison. Range
//! counts and sampling must be refused exactly by the engines that do not have them. A short run at every
//! durability level checks that each level's writes survive a close and reopen. An engine without key order
//! (the hash family) must refuse every scan with an error; its contents are checked by gets.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the test failing

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use strata::Durability;
use strata_bench::driver::{Driver, EngineOptions, ValueFormat, engines};
use strata_bench::values::ValueCodec;
use strata_bench::{BenchError, Result};

type Model = BTreeMap<u64, Vec<u8>>;

/// The records of a scan; `None` for an engine without key order, after checking that it refused the scan.
fn scan_all(
    db: &dyn Driver,
    ordered: bool,
    lo: u64,
    hi: u64,
    limit: u64,
    reverse: bool,
) -> Option<Vec<(u64, Vec<u8>)>> {
    let mut out = Vec::new();
    let scanned = db.scan(lo, hi, limit, reverse, &mut |k, v| {
        out.push((k, v.to_vec()));
        Ok(())
    });
    if !ordered {
        // An empty range is empty for every engine; any other scan is refused.
        let empty = lo > hi || limit == 0;
        assert!(
            out.is_empty()
                && (if empty {
                    scanned.is_ok()
                } else {
                    scanned.is_err()
                }),
            "a scan of [{lo}, {hi}] limit {limit} of an engine without key order must be refused"
        );
        return None;
    }
    assert_eq!(scanned.unwrap(), out.len() as u64);
    Some(out)
}

fn expected(model: &Model, lo: u64, hi: u64, limit: u64, reverse: bool) -> Vec<(u64, Vec<u8>)> {
    if lo > hi {
        return Vec::new();
    }
    let range = model.range(lo..=hi).map(|(k, v)| (*k, v.clone()));
    if reverse {
        range.rev().take(limit as usize).collect()
    } else {
        range.take(limit as usize).collect()
    }
}

fn check_contents(name: &str, db: &dyn Driver, ordered: bool, model: &Model) {
    if let Some(all) = scan_all(db, ordered, 0, u64::MAX, u64::MAX, false) {
        assert_eq!(
            all,
            expected(model, 0, u64::MAX, u64::MAX, false),
            "{name}: full scan"
        );
    }
    let mut buf = Vec::new();
    for (k, v) in model {
        assert!(db.get(*k, &mut buf).unwrap(), "{name}: {k} missing");
        assert_eq!(&buf, v, "{name}: value of {k}");
    }
    // Without a full scan, absent keys are checked one by one (the models use keys below 2,000).
    if !ordered {
        for k in (0..2000).filter(|k| !model.contains_key(k)) {
            assert!(
                !db.get(k, &mut buf).unwrap(),
                "{name}: {k} should be absent"
            );
        }
    }
}

fn exercise(format: ValueFormat) {
    let codec = match format {
        ValueFormat::U64 => ValueCodec::u64(),
        ValueFormat::Bytes => ValueCodec::bytes(100).unwrap(),
    };
    for engine in engines() {
        let name = engine.name();
        let ordered = engine.ordered();
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("db");
        let opts = EngineOptions {
            cache_bytes: 4 << 20,
            values: format,
            ..EngineOptions::default()
        };
        if format == ValueFormat::Bytes && !engine.capabilities().byte_values {
            // Engines that store u64 values only refuse byte-string databases.
            assert!(
                matches!(engine.create(&dir, &opts), Err(BenchError::Usage(_))),
                "{name}: byte values should be refused"
            );
            continue;
        }
        let db = engine.create(&dir, &opts).unwrap();
        let mut model = Model::new();
        let mut versions: BTreeMap<u64, u32> = BTreeMap::new();
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let mut buf = Vec::new();
        let mut next_version = |k: u64| {
            let v = versions.entry(k).or_insert(0);
            *v += 1;
            codec.value(k, *v)
        };
        for step in 0..3000 {
            let k = rng.random_range(0..600u64) * 3;
            match rng.random_range(0..10) {
                0..=3 => {
                    let v = next_version(k);
                    db.put(k, &v).unwrap();
                    model.insert(k, v);
                }
                4 => {
                    let recs: Vec<(u64, Vec<u8>)> = (0..rng.random_range(1..20))
                        .map(|i| {
                            let key = (k + i * 7) % 1800;
                            (key, next_version(key))
                        })
                        .collect();
                    let refs: Vec<(u64, &[u8])> = recs.iter().map(|(k, v)| (*k, &v[..])).collect();
                    db.put_batch(&refs).unwrap();
                    for (k, v) in recs {
                        model.insert(k, v);
                    }
                }
                5 => {
                    db.delete(k).unwrap();
                    model.remove(&k);
                }
                6..=8 => {
                    let found = db.get(k, &mut buf).unwrap();
                    assert_eq!(
                        found,
                        model.contains_key(&k),
                        "{name}: get {k} at step {step}"
                    );
                    if found {
                        assert_eq!(Some(&buf), model.get(&k), "{name}: value of {k}");
                    }
                }
                _ => {
                    let lo = rng.random_range(0..2000);
                    let hi = rng.random_range(0..2000);
                    let limit = rng.random_range(0..50);
                    let reverse = rng.random_bool(0.5);
                    if let Some(got) = scan_all(db.as_ref(), ordered, lo, hi, limit, reverse) {
                        assert_eq!(
                            got,
                            expected(&model, lo, hi, limit, reverse),
                            "{name}: scan [{lo}, {hi}] limit {limit} reverse {reverse}"
                        );
                    }
                }
            }
        }
        if ordered {
            assert_eq!(
                scan_all(db.as_ref(), ordered, 10, 5, 10, false),
                Some(vec![])
            );
            assert_eq!(
                scan_all(db.as_ref(), ordered, 0, 100, 0, false),
                Some(vec![])
            );
            // A visitor error stops the scan and comes back.
            let stopped: Result<u64> = db.scan(0, u64::MAX, u64::MAX, false, &mut |_, _| {
                Err(BenchError::Verify("stop".into()))
            });
            assert!(matches!(stopped, Err(BenchError::Verify(_))) || model.is_empty());
        }
        check_contents(name, db.as_ref(), ordered, &model);

        let caps = engine.capabilities();
        let count = db.count(0, 1000);
        let mut rng2 = ChaCha8Rng::seed_from_u64(1);
        let sample = db.sample(0, 1000, 5, &mut rng2);
        if caps.count {
            let want = model.range(0..=1000).count() as u64;
            assert_eq!(count.unwrap(), want, "{name}: count");
        } else {
            match count {
                Err(BenchError::Usage(msg)) => assert!(msg.contains(name), "{name}: {msg}"),
                other => panic!("{name}: count should be refused, got {other:?}"),
            }
        }
        if caps.sample {
            for (k, v) in sample.unwrap() {
                assert_eq!(model.get(&k), Some(&v), "{name}: sample");
            }
        } else {
            match sample {
                Err(BenchError::Usage(msg)) => assert!(msg.contains(name), "{name}: {msg}"),
                other => panic!("{name}: sample should be refused, got {other:?}"),
            }
        }

        db.checkpoint().unwrap();
        db.close().unwrap();
        let db = engine.open(&dir, &opts).unwrap();
        check_contents(name, db.as_ref(), ordered, &model);
        db.close().unwrap();
        assert!(
            engine.open(&tmp.path().join("missing"), &opts).is_err(),
            "{name}: opening a directory without a database"
        );
        assert!(!engine.settings(&opts).is_empty() && !engine.version().is_empty());
    }
}

#[test]
fn engines_match_a_model_with_u64_values() {
    exercise(ValueFormat::U64);
}

#[test]
fn engines_match_a_model_with_byte_values() {
    exercise(ValueFormat::Bytes);
}

#[test]
fn every_durability_level_survives_close_and_reopen() {
    for engine in engines() {
        let name = engine.name();
        // Byte-string values where the engine stores them, else u64 values.
        let (codec, values) = if engine.capabilities().byte_values {
            (ValueCodec::bytes(100).unwrap(), ValueFormat::Bytes)
        } else {
            (ValueCodec::u64(), ValueFormat::U64)
        };
        for durability in [Durability::None, Durability::Flush, Durability::Sync] {
            let tmp = tempfile::tempdir().unwrap();
            let dir = tmp.path().join("db");
            let opts = EngineOptions {
                cache_bytes: 4 << 20,
                durability,
                values,
                ..EngineOptions::default()
            };
            assert!(!engine.settings(&opts).is_empty());
            let db = engine.create(&dir, &opts).unwrap();
            let mut model = Model::new();
            for k in 0..16u64 {
                let v = codec.value(k, 1);
                db.put(k, &v).unwrap();
                model.insert(k, v);
            }
            let batch: Vec<(u64, Vec<u8>)> = (8..24u64).map(|k| (k, codec.value(k, 2))).collect();
            let refs: Vec<(u64, &[u8])> = batch.iter().map(|(k, v)| (*k, &v[..])).collect();
            db.put_batch(&refs).unwrap();
            model.extend(batch);
            for k in [0, 5, 23] {
                db.delete(k).unwrap();
                model.remove(&k);
            }
            // No checkpoint: closing alone must keep every write.
            db.close().unwrap();
            let db = engine.open(&dir, &opts).unwrap();
            check_contents(
                &format!("{name} ({durability:?})"),
                db.as_ref(),
                engine.ordered(),
                &model,
            );
            db.close().unwrap();
        }
    }
}

#[test]
fn drivers_are_shared_by_threads() {
    let codec = ValueCodec::u64();
    const THREADS: u64 = 4;
    const PER_THREAD: u64 = 200;
    for engine in engines() {
        let name = engine.name();
        let ordered = engine.ordered();
        let tmp = tempfile::tempdir().unwrap();
        let opts = EngineOptions {
            cache_bytes: 4 << 20,
            ..EngineOptions::default()
        };
        let db = engine.create(&tmp.path().join("db"), &opts).unwrap();
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let db = db.as_ref();
                s.spawn(move || {
                    let mut buf = Vec::new();
                    for i in 0..PER_THREAD {
                        let k = i * THREADS + t;
                        if i % 10 == 0 {
                            let recs = [(k, codec.value(k, 1))];
                            let refs: Vec<(u64, &[u8])> =
                                recs.iter().map(|(k, v)| (*k, &v[..])).collect();
                            db.put_batch(&refs).unwrap();
                        } else {
                            db.put(k, &codec.value(k, 1)).unwrap();
                        }
                        assert!(db.get(k, &mut buf).unwrap(), "{name}: own write of {k}");
                        codec.check(k, 1, &buf).unwrap();
                        // Other threads' records in a scan must be whole and in order.
                        if ordered {
                            let mut last = None;
                            db.scan(0, k, 20, true, &mut |key, v| {
                                assert!(last.is_none_or(|l| key < l), "{name}: order");
                                last = Some(key);
                                codec.check(key, 1, v)
                            })
                            .unwrap();
                        }
                    }
                });
            }
        });
        let model: Model = (0..THREADS * PER_THREAD)
            .map(|k| (k, codec.value(k, 1)))
            .collect();
        check_contents(name, db.as_ref(), ordered, &model);
        db.close().unwrap();
    }
}
