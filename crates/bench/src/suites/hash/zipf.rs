//! The Zipf 0.8 variant of the main phases (the seed's Exp 1 "zipfian" column), one thread, on `elimda`,
//! `dash` and `cceh`: the same uniform preload, then each operation's key is drawn by a Zipf(0.8) rank over
//! its pool (the pools are random keys, so popular keys are scattered over the hash space):
//!
//! * `zipf-insert`: N/2 upserts over the pool of N/2 new keys (repeats update);
//! * `zipf-pos-search`: N/2 lookups over the keys present after the inserts;
//! * `zipf-neg-search`: N/2 lookups over N absent keys;
//! * `zipf-delete`: N/2 deletes over the present keys; a repeat finds its key gone (checked: the expected
//!   answer of each delete is computed up front).

use super::{
    CCEH, DASH, ELIMDA, Expect, Keys, Ops, Persistent, Step, SuiteConfig, exhausted, phases,
    region_bytes,
};
use crate::distributions::Zipfian;
use crate::error::Result;
use crate::result::BenchResult;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::collections::HashSet;
use strata::lab::index::hash::cceh::{CcehConfig, CcehIndex};
use strata::lab::index::hash::dash::{DashConfig, DashIndex};
use strata::lab::index::hash::{HashConfig, HashIndex};
use strata::lab::storage::pm::{MmapRegion, PersistMode};

/// The skew of the variant.
pub const THETA: f64 = 0.8;
/// The workloads, in order, and their operation kinds.
pub const WORKLOADS: [(&str, &str); 4] = [
    ("zipf-insert", "insert"),
    ("zipf-pos-search", "read"),
    ("zipf-neg-search", "read"),
    ("zipf-delete", "delete"),
];

/// The key lists of the variant and the expected answer of each delete.
struct Plan {
    insert: Vec<u64>,
    pos: Vec<u64>,
    neg: Vec<u64>,
    delete: Vec<u64>,
    deleted: Vec<bool>,
}

fn draw(pool: &[u64], count: usize, rng: &mut ChaCha8Rng) -> Vec<u64> {
    let z = Zipfian::new(pool.len() as u64, THETA);
    (0..count).map(|_| pool[z.next(rng) as usize]).collect()
}

fn plan(cfg: &SuiteConfig, k: &Keys) -> Plan {
    let n = cfg.records as usize;
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed ^ 0x5a1f);
    let insert = draw(&k.insert, k.insert.len(), &mut rng);
    let inserted: HashSet<u64> = insert.iter().copied().collect();
    let mut present = k.preload.clone();
    present.extend(k.insert.iter().filter(|key| inserted.contains(key)));
    let pos = draw(&present, n / 2, &mut rng);
    let neg = draw(&k.neg, n / 2, &mut rng);
    let delete = draw(&present, k.delete.len(), &mut rng);
    let mut gone = HashSet::new();
    let deleted = delete.iter().map(|&key| gone.insert(key)).collect();
    Plan {
        insert,
        pos,
        neg,
        delete,
        deleted,
    }
}

/// The variant's rows for `elimda`, `dash` and `cceh`, each on a fresh eADR region.
pub(super) fn rows(cfg: &SuiteConfig, k: &Keys) -> Result<Vec<BenchResult>> {
    let p = plan(cfg, k);
    let steps: Vec<Step<'_>> = WORKLOADS
        .iter()
        .map(|&(workload, op)| {
            let (keys, expect): (&[u64], _) = match workload {
                "zipf-insert" => (&p.insert, Expect::Stored),
                "zipf-pos-search" => (&p.pos, Expect::Found),
                "zipf-neg-search" => (&p.neg, Expect::Absent),
                _ => (&p.delete, Expect::Deleted(Some(&p.deleted))),
            };
            Step {
                workload,
                op,
                keys,
                expect,
            }
        })
        .collect();
    let bytes = region_bytes(cfg);
    let region = || MmapRegion::anonymous(bytes, PersistMode::Eadr);
    let mut out = Vec::new();
    let mut one = |engine: &'static str, index: &mut dyn Ops| -> Result<()> {
        let rows = phases(cfg, engine, index, &k.preload, &steps, None)
            .map_err(|e| exhausted(engine, bytes, e))?;
        out.extend(rows);
        Ok(())
    };
    let idx = HashIndex::create(region()?, HashConfig::default())?;
    one(ELIMDA, &mut Persistent(idx, std::marker::PhantomData))?;
    let idx = DashIndex::create(region()?, DashConfig::default())?;
    one(DASH, &mut Persistent(idx, std::marker::PhantomData))?;
    let idx = CcehIndex::create(region()?, CcehConfig::default())?;
    one(CCEH, &mut Persistent(idx, std::marker::PhantomData))?;
    Ok(out)
}
