//! The corruption campaign: for each index family, healthy databases (cleanly closed, and left by a crash with
//! acknowledged writes only in the WAL) get seeded damage — 1–8 overwritten bytes at a random offset of a
//! random file (biased so both meta slots, the WAL header and the WAL records are hit), truncations and
//! deletions of every file — and each trial must end **detected** (`Error::Corruption` naming a file of the
//! database, at open, on a read or by `check`) or **harmless** (every read equals the model). Zero silent
//! wrong reads, zero panics, zero errors of another kind. Each trial runs twice: read-only open, and
//! read-write open (which recovers and may rewrite).
//!
//! `STRATA_CAMPAIGN_TRIALS` sets the trials per family (default 200); the tally per family, file kind and
//! outcome is printed (`--nocapture`).

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the test failing

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use strata::Config;
use strata::Direction;
use strata::KeyRange;
use strata::WriteOp;
use strata::options::DynOptions;
use strata::vfs::FaultVfs;
use strata::vfs::MemVfs;
use strata::vfs::Vfs;
use strata::{Durability, Error, IndexConfig, IndexKind, Options, RawDb, TypeKind};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

const DIR: &str = "/db";
const PS: u64 = 4096;
const RECORDS: u64 = 2000;

fn trials() -> u64 {
    std::env::var("STRATA_CAMPAIGN_TRIALS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200)
}

struct Family {
    name: &'static str,
    config: Config,
}

fn families() -> Vec<Family> {
    let base = |index: IndexKind, key| Config {
        index: index.default_config(),
        key,
        value: TypeKind::U64,
        ..Config::default()
    };
    let dyn_opts = DynOptions {
        buffer_capacity: 128,
        ..DynOptions::default()
    };
    let dynamized = Config::with_index(IndexConfig::Dynamized(dyn_opts.clone()));
    let dyn_disk = Config::with_index(IndexConfig::Dynamized(DynOptions {
        memory_budget: 16 << 10,
        ..dyn_opts
    }));
    vec![
        Family {
            name: "btree-u64",
            config: base(IndexKind::BTree, TypeKind::U64),
        },
        Family {
            name: "btree-bytes",
            config: base(IndexKind::BTree, TypeKind::Bytes),
        },
        Family {
            name: "betree",
            config: base(IndexKind::BeTree, TypeKind::U64),
        },
        Family {
            name: "dynamized",
            config: dynamized,
        },
        Family {
            name: "dynamized-disk",
            config: dyn_disk,
        },
        Family {
            name: "hash",
            config: base(IndexKind::Hash, TypeKind::U64),
        },
    ]
}

fn options(vfs: Arc<dyn Vfs>) -> Options {
    Options {
        vfs,
        cache_bytes: 256 << 10,
        ..Options::default()
    }
}

fn key(c: &Config, i: u64) -> Vec<u8> {
    match c.key {
        TypeKind::U64 => i.to_be_bytes().to_vec(),
        TypeKind::Bytes => format!("k{i:07}").into_bytes(),
    }
}

fn apply(model: &mut Model, db: &RawDb, ops: &[WriteOp], d: Option<Durability>) {
    db.write(ops, d).unwrap();
    for op in ops {
        match op {
            WriteOp::Put { key, value } => {
                model.insert(key.clone(), value.clone());
            }
            WriteOp::Delete { key } => {
                model.remove(key);
            }
            _ => unreachable!(),
        }
    }
}

/// A database image: every file's bytes, and what it must read as.
#[derive(Clone)]
struct Image {
    files: Vec<(PathBuf, Vec<u8>)>,
    model: Model,
}

fn snapshot(mem: &MemVfs, model: Model) -> Image {
    Image {
        files: mem
            .file_paths()
            .into_iter()
            .map(|p| {
                let b = mem.file_bytes(&p).unwrap();
                (p, b)
            })
            .collect(),
        model,
    }
}

/// Two healthy images of a family: cleanly closed, and left by a crash with synced writes in the WAL only.
fn images(f: &Family) -> [Image; 2] {
    let c = &f.config;
    let mem = Arc::new(MemVfs::new());
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut model = Model::new();
    let db = RawDb::create(DIR, c, &options(mem.clone())).unwrap();
    for b in 0..RECORDS / 100 {
        let ops: Vec<WriteOp> = (b * 100..(b + 1) * 100)
            .map(|i| WriteOp::Put {
                key: key(c, i * 3),
                value: (i * 10).to_be_bytes().to_vec(),
            })
            .collect();
        apply(&mut model, &db, &ops, None);
    }
    db.checkpoint().unwrap();
    // Updates and deletes after a checkpoint, so both meta slots hold real checkpoints.
    for _ in 0..300 {
        let i = rng.random_range(0..RECORDS) * 3;
        let op = if rng.random_bool(0.3) {
            WriteOp::Delete { key: key(c, i) }
        } else {
            WriteOp::Put {
                key: key(c, i),
                value: rng.random::<u64>().to_be_bytes().to_vec(),
            }
        };
        apply(&mut model, &db, &[op], None);
    }
    db.close().unwrap();
    let clean = snapshot(&mem, model.clone());

    let life = FaultVfs::new(mem.clone());
    let db = RawDb::open(DIR, &options(Arc::new(life.clone()))).unwrap();
    for _ in 0..60 {
        let i = rng.random_range(0..RECORDS * 3);
        let op = if rng.random_bool(0.2) {
            WriteOp::Delete { key: key(c, i) }
        } else {
            WriteOp::Put {
                key: key(c, i),
                value: rng.random::<u64>().to_be_bytes().to_vec(),
            }
        };
        apply(&mut model, &db, &[op], Some(Durability::Sync));
    }
    std::mem::forget(db);
    life.fail_after(0);
    mem.crash();
    [clean, snapshot(&mem, model)]
}

fn load(img: &Image) -> Arc<MemVfs> {
    let mem = Arc::new(MemVfs::new());
    for (p, b) in &img.files {
        mem.set_file_bytes(p, b.clone());
    }
    mem
}

#[derive(Debug, Clone, Copy)]
enum Harm {
    Overwrite { at: u64, len: usize },
    Truncate { len: u64 },
    Delete,
}

/// What part of a file a damage hits (the tally's row).
fn part(path: &Path, harm: Harm) -> String {
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    let kind = if name.starts_with("wal-") {
        "WAL".to_string()
    } else if name.starts_with("shard-") {
        "shard file".to_string()
    } else {
        name
    };
    let Harm::Overwrite { at, .. } = harm else {
        return kind;
    };
    match kind.as_str() {
        "data.pages" if at < PS => "data.pages meta slot 0".into(),
        "data.pages" if at < 2 * PS => "data.pages meta slot 1".into(),
        "data.pages" => "data.pages pages".into(),
        "WAL" if at < 1024 => "WAL header".into(),
        "hash.pm" if at < 4096 => "hash.pm header/ledger".into(),
        "hash.pm" => "hash.pm index region".into(),
        _ => kind,
    }
}

/// A seeded damage of one file of `img`.
fn pick(img: &Image, rng: &mut ChaCha8Rng) -> (usize, Harm) {
    let i = rng.random_range(0..img.files.len());
    let (path, bytes) = &img.files[i];
    let len = bytes.len() as u64;
    let r = rng.random_range(0..100);
    let harm = if r < 12 || len == 0 {
        Harm::Delete
    } else if r < 25 {
        Harm::Truncate {
            len: match rng.random_range(0..4) {
                0 => 0,
                1 => len / 2,
                2 => len - 1,
                _ => rng.random_range(0..len),
            },
        }
    } else {
        let n = rng.random_range(1..=8usize);
        let name = path.to_string_lossy();
        // Bias: both meta slots, the WAL header and the WAL's records get their share, and so do the bytes
        // of the hash region that hold something (its header, ledger slots, log records, slots, meta lines),
        // which are a small part of a mostly empty file.
        let at = if name.ends_with("data.pages") && rng.random_bool(0.5) {
            rng.random_range(0..2 * PS.min(len))
        } else if name.ends_with("hash.pm") && rng.random_bool(0.2) {
            // The header (0..64) and the ledger slots (1024..1096, 1152..1224).
            *[0u64, 1024, 1152].get(rng.random_range(0..3)).unwrap() + rng.random_range(0..72)
        } else if name.ends_with("hash.pm") && rng.random_bool(0.7) {
            let used: Vec<u64> = (0..len).filter(|&i| bytes[i as usize] != 0).collect();
            used[rng.random_range(0..used.len())]
        } else if name.contains("/wal-") && rng.random_bool(0.6) {
            let end = bytes
                .iter()
                .rposition(|&b| b != 0)
                .map_or(len, |e| e as u64 + 64);
            rng.random_range(0..end.min(len))
        } else {
            rng.random_range(0..len)
        };
        Harm::Overwrite {
            at,
            len: n.min((len - at) as usize),
        }
    };
    (i, harm)
}

fn damage(mem: &MemVfs, img: &Image, i: usize, harm: Harm, rng: &mut ChaCha8Rng) {
    let (path, bytes) = &img.files[i];
    match harm {
        Harm::Delete => mem.remove_file(path).unwrap(),
        Harm::Truncate { len } => mem.set_file_bytes(path, bytes[..len as usize].to_vec()),
        Harm::Overwrite { at, len } => {
            let mut b = bytes.clone();
            for x in &mut b[at as usize..at as usize + len] {
                *x ^= rng.random_range(1..=255u8);
            }
            mem.set_file_bytes(path, b);
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    DetectedAtOpen,
    DetectedOnRead,
    DetectedByCheck,
    Harmless,
}

/// Opens the damaged database, reads everything, checks: the outcome, or a description of a failure.
fn trial(mem: Arc<MemVfs>, model: &Model, c: &Config, read_only: bool) -> Result<Outcome, String> {
    let named = |e: &Error| match e {
        Error::Corruption { file, .. } if file.starts_with(DIR) => Ok(()),
        e => Err(format!(
            "an error that is not corruption naming a file: {e}"
        )),
    };
    let open = if read_only {
        RawDb::open_read_only
    } else {
        RawDb::open
    };
    let db = match open(Path::new(DIR), &options(mem)) {
        Ok(db) => db,
        Err(e) => return named(&e).map(|()| Outcome::DetectedAtOpen),
    };
    // A family without key order has no scan or count: its gets of every key (below) and `len` must agree
    // with the model instead.
    let ordered = db.capabilities().ordered;
    let read = || -> strata::Result<Option<String>> {
        if !ordered && db.len() != model.len() as u64 {
            return Ok(Some(format!(
                "len is {}, the model has {} records",
                db.len(),
                model.len()
            )));
        }
        let mut all = Vec::new();
        if ordered {
            db.scan_into(&KeyRange::all(), Direction::Forward, usize::MAX, &mut all)?;
        }
        let got: Model = all.into_iter().collect();
        if ordered && &got != model {
            return Ok(Some(format!(
                "a full scan returned {} records, the model has {}",
                got.len(),
                model.len()
            )));
        }
        for i in 0..RECORDS * 3 {
            let k = key(c, i);
            if db.get(&k)? != model.get(&k).cloned() {
                return Ok(Some(format!("get of key {i} differs from the model")));
            }
        }
        if ordered && db.count_range(&KeyRange::all())? != model.len() as u64 {
            return Ok(Some("the count differs from the model".into()));
        }
        Ok(None)
    };
    match read() {
        Ok(Some(silent)) => return Err(format!("SILENT WRONG READ: {silent}")),
        Ok(None) => {}
        Err(e) => return named(&e).map(|()| Outcome::DetectedOnRead),
    }
    match db.check() {
        Ok(_) => Ok(Outcome::Harmless),
        Err(e) => named(&e).map(|()| Outcome::DetectedByCheck),
    }
}

#[test]
fn damage_is_detected_or_harmless_never_silent() {
    let n = trials();
    let mut failures = Vec::new();
    let mut tally: BTreeMap<(String, String, &str), [u64; 4]> = BTreeMap::new();
    for f in families() {
        let imgs = images(&f);
        // Both images read back whole before any damage.
        for img in &imgs {
            for ro in [true, false] {
                assert_eq!(
                    trial(load(img), &img.model, &f.config, ro),
                    Ok(Outcome::Harmless),
                    "{}: the healthy image",
                    f.name
                );
            }
        }
        let mut rng = ChaCha8Rng::seed_from_u64(0x5eed ^ f.name.len() as u64);
        for t in 0..n {
            let img = &imgs[(t % 2) as usize];
            let (i, harm) = pick(img, &mut rng);
            let seed = rng.random::<u64>();
            for ro in [true, false] {
                let mem = load(img);
                damage(&mem, img, i, harm, &mut ChaCha8Rng::seed_from_u64(seed));
                let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
                    trial(mem, &img.model, &f.config, ro)
                }))
                .unwrap_or_else(|p| {
                    Err(format!(
                        "PANIC: {}",
                        p.downcast_ref::<String>()
                            .cloned()
                            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                            .unwrap_or_default()
                    ))
                });
                let what = format!(
                    "{} trial {t} ({}, {}): {:?} of {}",
                    f.name,
                    if t % 2 == 0 { "clean" } else { "crashed" },
                    if ro { "read-only" } else { "read-write" },
                    harm,
                    img.files[i].0.display()
                );
                match result {
                    Ok(o) => {
                        let kind = match harm {
                            Harm::Overwrite { .. } => "overwrite",
                            Harm::Truncate { .. } => "truncate",
                            Harm::Delete => "delete",
                        };
                        tally
                            .entry((f.name.to_string(), part(&img.files[i].0, harm), kind))
                            .or_default()[o as usize] += 1;
                    }
                    Err(e) => failures.push(format!("{what}: {e}")),
                }
            }
        }
    }
    eprintln!(
        "{:<16} {:<24} {:<10} {:>6} {:>6} {:>6} {:>8}",
        "family", "file (part)", "damage", "open", "read", "check", "harmless"
    );
    for ((fam, file, kind), c) in &tally {
        eprintln!(
            "{fam:<16} {file:<24} {kind:<10} {:>6} {:>6} {:>6} {:>8}",
            c[0], c[1], c[2], c[3]
        );
    }
    assert!(
        failures.is_empty(),
        "{} of the trials failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
