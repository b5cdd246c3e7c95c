//! Tests of [`ValueIndex`] over both indexes. The shared harness (`testkit`: model proptest with reopen,
//! crash at every persist point under ADR and eADR) drives `u64` values; [`Expanded`] turns each `u64`
//! into a value of 8..=256 bytes derived from it (and the key) and checks every byte on the way back, so
//! every check of the harness also checks the whole variable-length value. Small value logs make cleaning
//! (copying live values, advancing the tail) happen throughout.

use proptest::prelude::*;
use xxhash_rust::xxh3::xxh3_64_with_seed;

use super::{MAX_VALUE, Part, ValueIndex};
use crate::error::{Error, Result};
use crate::index::hash::PmHashIndex;
use crate::index::hash::dash::{DashConfig, DashIndex};
use crate::index::hash::testkit::{self, CrashSpec, ModelOp, cases, model_op};
use crate::index::hash::{HashConfig, HashIndex};
use crate::storage::pm::{MmapRegion, PersistMode, Pm, ShadowPm};

/// The bytes stored for `(key, v)`: `v` then a stream derived from both; 8..=256 bytes long.
fn expand(key: u64, v: u64) -> Vec<u8> {
    let len = 8 + (xxh3_64_with_seed(&v.to_le_bytes(), key) % 249) as usize;
    let mut out = v.to_le_bytes().to_vec();
    let mut i = 0u64;
    while out.len() < len {
        let word = xxh3_64_with_seed(&i.to_le_bytes(), key ^ v.rotate_left(17));
        out.extend_from_slice(&word.to_le_bytes()[..(len - out.len()).min(8)]);
        i += 1;
    }
    out
}

/// The `u64` whose expansion `bytes` is, or `Corruption` (a value never written, or damaged).
fn contract(key: u64, bytes: &[u8]) -> Result<u64> {
    let v = bytes
        .get(..8)
        .map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()));
    match v {
        Some(v) if expand(key, v) == bytes => Ok(v),
        _ => Err(Error::corruption(
            std::path::Path::new("<test>"),
            0,
            format!("key {key}: value of {} bytes is no expansion", bytes.len()),
        )),
    }
}

/// A [`ValueIndex`] seen as a `u64 → u64` index through [`expand`] / [`contract`].
#[derive(Debug)]
pub struct Expanded<P: Pm, I>(pub ValueIndex<P, I>);

impl<P: Pm, I: PmHashIndex<Part<P>>> PmHashIndex<P> for Expanded<P, I> {
    fn name() -> &'static str {
        "values"
    }
    fn open(pm: P) -> Result<Self> {
        ValueIndex::open(pm).map(Expanded)
    }
    fn pm(&self) -> &P {
        self.0.pm()
    }
    fn into_pm(self) -> P {
        self.0.into_pm()
    }
    fn insert(&mut self, key: u64, value: u64) -> Result<()> {
        self.0.put(key, &expand(key, value))
    }
    fn get(&self, key: u64) -> Result<Option<u64>> {
        self.0.get(key)?.map(|b| contract(key, &b)).transpose()
    }
    fn remove(&mut self, key: u64) -> Result<bool> {
        self.0.remove(key)
    }
    fn len(&self) -> u64 {
        self.0.len()
    }
    fn for_each(&self, mut visit: impl FnMut(u64, u64)) -> Result<()> {
        let mut bad = None;
        self.0.for_each(|k, b| match contract(k, b) {
            Ok(v) => visit(k, v),
            Err(e) => bad = Some(e),
        })?;
        bad.map_or(Ok(()), Err)
    }
    fn check_invariants(&self) -> Result<()> {
        self.0.check_invariants()?;
        self.for_each(|_, _| {})
    }
    fn load_factor(&self) -> f64 {
        self.0.inner().load_factor()
    }
    fn capacity(&self) -> u64 {
        self.0.inner().capacity()
    }
    fn dram_bytes(&self) -> u64 {
        self.0.inner().dram_bytes()
    }
    fn pm_bytes_used(&self) -> u64 {
        self.0.inner().pm_bytes_used()
    }
}

fn elimda_config() -> HashConfig {
    HashConfig {
        initial_buckets: 1,
        log_lines: 16,
        logs: 1,
        ..HashConfig::default()
    }
}

fn dash_config() -> DashConfig {
    DashConfig {
        segment_buckets: 4,
        stash_buckets: 1,
        initial_depth: 0,
    }
}

type Elimda<P> = Expanded<P, HashIndex<Part<P>>>;
type Dash<P> = Expanded<P, DashIndex<Part<P>>>;

fn elimda<P: Pm>(pm: P, log_bytes: u64) -> Result<Elimda<P>> {
    ValueIndex::create(pm, log_bytes, |w| HashIndex::create(w, elimda_config())).map(Expanded)
}

fn dash<P: Pm>(pm: P, log_bytes: u64) -> Result<Dash<P>> {
    ValueIndex::create(pm, log_bytes, |w| DashIndex::create(w, dash_config())).map(Expanded)
}

// ---- Model tests with reopen ----

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn elimda_values_match_hashmap_across_reopens(
        ops in prop::collection::vec(model_op(200, (1usize..3).prop_map(ModelOp::Reopen)), 1..900)
    ) {
        let pm = MmapRegion::anonymous(1 << 20, PersistMode::Adr).unwrap();
        let index = elimda(pm, 64 << 10).unwrap();
        testkit::model_run(index, ops, |pm, _| ValueIndex::open(pm).map(Expanded), None)?;
    }

    #[test]
    fn dash_values_match_hashmap_across_reopens(
        ops in prop::collection::vec(model_op(200, (1usize..3).prop_map(ModelOp::Reopen)), 1..900)
    ) {
        let pm = MmapRegion::anonymous(1 << 20, PersistMode::Adr).unwrap();
        let index = dash(pm, 64 << 10).unwrap();
        testkit::model_run(index, ops, |pm, _| ValueIndex::open(pm).map(Expanded), None)?;
    }
}

// ---- Crash at every persist point ----

const ELIMDA_SPEC: CrashSpec<Elimda<ShadowPm>> = CrashSpec {
    region: (1 << 20) + (48 << 10),
    keys: 150,
    extra_inserts: 40,
    create: |pm| elimda(pm, 44 << 10),
};

const DASH_SPEC: CrashSpec<Dash<ShadowPm>> = CrashSpec {
    region: (256 << 10) + (48 << 10),
    keys: 150,
    extra_inserts: 60,
    create: |pm| dash(pm, 44 << 10),
};

fn crash<I: PmHashIndex<ShadowPm>>(
    spec: &CrashSpec<I>,
    mode: PersistMode,
    ops: usize,
    stats: fn(&I) -> super::ValueStats,
) {
    let (images, fences) = testkit::crash_every_persist_point(
        spec,
        mode,
        ops,
        |_| {},
        |index| {
            let s = stats(index);
            // The log lapped: cleaning copied live values and moved the tail many times.
            assert!(s.cleanings >= 10 && s.copied > 0, "{s:?}");
        },
    );
    assert!(images + 4 >= fences, "{images} images for {fences} fences");
}

#[test]
fn elimda_values_adr_crash_at_every_persist_point() {
    crash(&ELIMDA_SPEC, PersistMode::Adr, 900, |i| i.0.stats());
}

#[test]
fn elimda_values_eadr_crash_at_every_persist_point() {
    crash(&ELIMDA_SPEC, PersistMode::Eadr, 900, |i| i.0.stats());
}

#[test]
fn dash_values_adr_crash_at_every_persist_point() {
    crash(&DASH_SPEC, PersistMode::Adr, 900, |i| i.0.stats());
}

#[test]
fn dash_values_eadr_crash_at_every_persist_point() {
    crash(&DASH_SPEC, PersistMode::Eadr, 900, |i| i.0.stats());
}

// ---- Limits and damage ----

#[test]
fn values_of_every_length_up_to_the_limit_and_a_typed_error_above() {
    let pm = MmapRegion::anonymous(1 << 20, PersistMode::Eadr).unwrap();
    let mut index =
        ValueIndex::create(pm, 64 << 10, |w| HashIndex::create(w, elimda_config())).unwrap();
    for len in 0..=MAX_VALUE {
        let v: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
        index.put(len as u64, &v).unwrap();
    }
    match index.put(999, &[1u8; MAX_VALUE + 1]) {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("at most 256"), "{m}"),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    assert_eq!(index.get(999).unwrap(), None);
    let index: ValueIndex<_, HashIndex<_>> = ValueIndex::open(index.into_pm()).unwrap();
    for len in 0..=MAX_VALUE {
        let v: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
        assert_eq!(index.get(len as u64).unwrap(), Some(v), "length {len}");
    }
    index.check_invariants().unwrap();
}

#[test]
fn a_log_full_of_live_values_is_resource_exhausted_and_stays_consistent() {
    let pm = MmapRegion::anonymous(1 << 20, PersistMode::Adr).unwrap();
    let mut index =
        ValueIndex::create(pm, 20 << 10, |w| HashIndex::create(w, elimda_config())).unwrap();
    let mut stored = 0u64;
    let err = loop {
        match index.put(stored, &[stored as u8; 200]) {
            Ok(()) => stored += 1,
            Err(e) => break e,
        }
    };
    assert!(matches!(err, Error::ResourceExhausted(_)), "{err:?}");
    assert!(stored > 50, "{stored}");
    // Deleting makes room again; everything acknowledged is there after a reopen.
    for k in 0..stored / 2 {
        assert!(index.remove(k).unwrap());
    }
    index.put(stored, &[9u8; 200]).unwrap();
    let index: ValueIndex<_, HashIndex<_>> = ValueIndex::open(index.into_pm()).unwrap();
    index.check_invariants().unwrap();
    assert_eq!(index.len(), stored - stored / 2 + 1);
    for k in stored / 2..stored {
        assert_eq!(index.get(k).unwrap(), Some(vec![k as u8; 200]));
    }
}

#[test]
fn damage_is_corruption_never_a_panic() {
    let pm = MmapRegion::anonymous(1 << 20, PersistMode::Adr).unwrap();
    let mut index =
        ValueIndex::create(pm, 64 << 10, |w| HashIndex::create(w, elimda_config())).unwrap();
    for k in 0..100u64 {
        index.put(k, &[k as u8; 40]).unwrap();
    }
    let pm = index.into_pm();
    let log_ring = pm.len() - (64 << 10) + 4096;
    // A byte of the first value record's body: that key's lookup is damage, the others are fine.
    let byte = pm.read_vec(log_ring + 20, 1).unwrap()[0];
    pm.write(log_ring + 20, &[byte ^ 1]).unwrap();
    // The scan stops at the damaged record: every later handle is outside the live range, and the
    // self-check reports it.
    let index: ValueIndex<_, HashIndex<_>> = ValueIndex::open(&pm).unwrap();
    assert!(matches!(index.get(0), Err(Error::Corruption { .. })));
    assert!(matches!(
        index.check_invariants(),
        Err(Error::Corruption { .. })
    ));
    drop(index);
    // A changed version word or field fails the open.
    let v = pm.read_u64(8).unwrap();
    pm.write_u64(8, v + 1).unwrap();
    assert!(ValueIndex::<_, HashIndex<_>>::open(&pm).is_err());
    pm.write_u64(8, v).unwrap();
    pm.write_u64(16, 4096).unwrap();
    assert!(matches!(
        ValueIndex::<_, HashIndex<_>>::open(&pm),
        Err(Error::Corruption { .. })
    ));
}
