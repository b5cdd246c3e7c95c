//! Driver for Strata's B+-tree family (`strata-btree`): a [`RawDb`] with `u64` keys and `u64` or byte-string
//! values (by [`ValueFormat`]), the bench's cache budget as its buffer pool and the bench's durability as its
//! default. I/O counters come from the engine's `IoSnapshot` (every file kind summed; page-file counters
//! separately).
//!
//! [`StrataDriver`] serves every Strata index family behind [`RawDb`] (the dynamized and Bε-tree families
//! reuse it), and [`open_tree`] creates or opens the databases of the tree families (`strata-btree`,
//! `strata-betree`) the same way.

use super::{
    Capabilities, Driver, Engine, EngineOptions, IoTotals, ValueFormat, Visit, unsupported,
};
use crate::error::Result;
use std::path::Path;
use strata::Config;
use strata::WriteOp;
use strata::vfs::FileKind;
use strata::vfs::IoSnapshot;
use strata::{Direction, KeyRange, Options, RawDb, TypeKind};

/// The `strata-btree` engine.
#[derive(Debug, Clone, Copy, Default)]
pub struct StrataBTree;

pub(super) fn options(opts: &EngineOptions) -> Options {
    Options {
        cache_bytes: opts.cache_bytes,
        durability: Some(opts.durability),
        ..Options::default()
    }
}

/// Records fetched per scan call.
const SCAN_CHUNK: u64 = 256;

impl Engine for StrataBTree {
    fn name(&self) -> &'static str {
        "strata-btree"
    }

    fn version(&self) -> String {
        env!("CARGO_PKG_VERSION").to_string()
    }

    fn capabilities(&self) -> Capabilities {
        super::capabilities_of(&strata::IndexKind::BTree.default_config())
    }

    fn settings(&self, opts: &EngineOptions) -> String {
        tree_settings("B+-tree with subtree counts", opts)
    }

    fn open_dir(&self, dir: &Path, opts: &EngineOptions, create: bool) -> Result<Box<dyn Driver>> {
        open_tree(self, dir, opts, create, Config::default())
    }
}

/// The settings line of a tree family (`family` names it): the buffer pool, pages, WAL and value format.
pub(super) fn tree_settings(family: &str, opts: &EngineOptions) -> String {
    format!(
        "{family}; buffer pool {} bytes (CLOCK), {}-byte pages{}, WAL with durability `{}`, checkpoint every \
         64 MiB of WAL; {} values",
        opts.cache_bytes,
        opts.page_size,
        if opts.direct_io { ", O_DIRECT" } else { "" },
        opts.durability.name(),
        match opts.values {
            ValueFormat::U64 => "inline u64",
            ValueFormat::Bytes => "byte-string",
        }
    )
}

/// A usage error when `opts` asks for byte-string values from an engine that stores `u64` values only.
pub(super) fn check_value_format(engine: &dyn Engine, opts: &EngineOptions) -> Result<()> {
    if opts.values == ValueFormat::Bytes && !engine.capabilities().byte_values {
        return Err(crate::BenchError::Usage(format!(
            "{} stores u64 values only (run with --value-size 8)",
            engine.name()
        )));
    }
    Ok(())
}

/// Opens the database in `dir`, or when `create` creates one with `family`'s index family and its options
/// (the rest of `family` is ignored): `u64` keys, values by [`ValueFormat`], and the bench's page size,
/// durability and O_DIRECT setting. The driver is named after `engine` and offers its capabilities.
pub(super) fn open_tree(
    engine: &dyn Engine,
    dir: &Path,
    opts: &EngineOptions,
    create: bool,
    family: Config,
) -> Result<Box<dyn Driver>> {
    check_value_format(engine, opts)?;
    let db = if create {
        let config = Config {
            key: TypeKind::U64,
            value: match opts.values {
                ValueFormat::U64 => TypeKind::U64,
                ValueFormat::Bytes => TypeKind::Bytes,
            },
            page_size: opts.page_size,
            durability: opts.durability,
            direct_io: opts.direct_io,
            ..family
        };
        RawDb::create(dir, &config, &options(opts))?
    } else {
        RawDb::open(dir, &options(opts))?
    };
    Ok(Box::new(StrataDriver::new(engine, db)))
}

/// An open Strata database (any index family behind [`RawDb`]).
pub struct StrataDriver {
    name: &'static str,
    db: RawDb,
    /// What the engine offers: range counts and sampling are refused without them (the Bε-tree counts by
    /// a scan, which the bench does not pass off as a range count).
    caps: Capabilities,
    /// The index keeps its keys in order; scans are refused without it (the hash family).
    ordered: bool,
    /// The index keeps sampling weights (a weighted dynamized index).
    weighted: bool,
    /// The index reports its height cheaply (a Bε-tree's statistics count its records with a full scan, so
    /// its drivers report no height rather than scan the tree at the end of every phase).
    cheap_height: bool,
}

impl StrataDriver {
    /// A driver over `db` named after `engine` (and with its capabilities).
    pub(super) fn new(engine: &dyn Engine, db: RawDb) -> Self {
        let index = db.capabilities();
        StrataDriver {
            name: engine.name(),
            db,
            caps: engine.capabilities(),
            ordered: index.ordered,
            weighted: index.weighted,
            cheap_height: index.cheap_len,
        }
    }
}

fn totals(s: &IoSnapshot) -> IoTotals {
    let all = s.total();
    let pages = s.kind(FileKind::Pages);
    IoTotals {
        reads: all.reads,
        writes: all.writes,
        bytes_read: all.bytes_read,
        bytes_written: all.bytes_written,
        syncs: all.syncs,
        page_reads: pages.reads,
        page_writes: pages.writes,
    }
}

/// The keys `[lo, hi]` as an engine range.
fn inclusive(lo: u64, hi: u64) -> KeyRange {
    KeyRange::inclusive(lo.to_be_bytes().to_vec(), hi.to_be_bytes().to_vec())
}

fn key_of(bytes: &[u8]) -> u64 {
    u64::from_be_bytes(bytes.try_into().expect("u64 keys are 8 bytes"))
}

impl Driver for StrataDriver {
    fn engine(&self) -> &'static str {
        self.name
    }

    fn put(&self, key: u64, value: &[u8]) -> Result<()> {
        Ok(self.db.insert(&key.to_be_bytes(), value)?)
    }

    fn put_weighted(&self, key: u64, value: &[u8], weight: f64) -> Result<()> {
        if !self.weighted {
            return Err(crate::BenchError::Usage(format!(
                "this {} database stores no weights",
                self.name
            )));
        }
        let op = WriteOp::PutWeighted {
            key: key.to_be_bytes().to_vec(),
            value: value.to_vec(),
            weight,
        };
        Ok(self.db.write(std::slice::from_ref(&op), None)?)
    }

    fn put_batch(&self, records: &[(u64, &[u8])]) -> Result<()> {
        let ops: Vec<WriteOp> = records
            .iter()
            .map(|(k, v)| WriteOp::Put {
                key: k.to_be_bytes().to_vec(),
                value: v.to_vec(),
            })
            .collect();
        Ok(self.db.write(&ops, None)?)
    }

    /// `RawDb::bulk_load`: families with a bulk load (the B+-tree) build their pages bottom-up and full,
    /// bypassing the WAL, and checkpoint once.
    fn bulk_load(&self, records: &mut dyn Iterator<Item = (u64, Vec<u8>)>) -> Result<u64> {
        let mut encoded = records.map(|(k, v)| (k.to_be_bytes().to_vec(), v));
        Ok(self.db.bulk_load(&mut encoded)?)
    }

    fn get(&self, key: u64, value: &mut Vec<u8>) -> Result<bool> {
        Ok(self.db.get_into(&key.to_be_bytes(), value)?)
    }

    fn delete(&self, key: u64) -> Result<()> {
        Ok(self.db.delete(&key.to_be_bytes())?)
    }

    fn scan_range(
        &self,
        lo: u64,
        hi: u64,
        limit: u64,
        reverse: bool,
        visit: &mut Visit<'_>,
    ) -> Result<u64> {
        if !self.ordered {
            return Err(unsupported(self.name, "scans (it keeps no key order)"));
        }
        let (mut lo, mut hi) = (lo, hi);
        let dir = if reverse {
            Direction::Reverse
        } else {
            Direction::Forward
        };
        let mut seen = 0u64;
        // Chunks bound how long one call holds the tree's read lock; the next chunk resumes after the last key.
        while seen < limit && lo <= hi {
            let want = (limit - seen).min(SCAN_CHUNK) as usize;
            let range = inclusive(lo, hi);
            let mut last = None;
            let mut failed = None;
            let got = self.db.scan_visit(&range, dir, want, &mut |k, v| {
                let k = key_of(k);
                last = Some(k);
                match visit(k, v) {
                    Ok(()) => Ok(true),
                    Err(e) => {
                        failed = Some(e);
                        Ok(false)
                    }
                }
            })?;
            if let Some(e) = failed {
                return Err(e);
            }
            seen += got as u64;
            let Some(last) = last.filter(|_| got == want) else {
                break;
            };
            if reverse {
                match last.checked_sub(1) {
                    Some(h) => hi = h,
                    None => break,
                }
            } else {
                match last.checked_add(1) {
                    Some(l) => lo = l,
                    None => break,
                }
            }
        }
        Ok(seen)
    }

    fn count(&self, lo: u64, hi: u64) -> Result<u64> {
        if !self.caps.count {
            return Err(unsupported(self.name, "range counts"));
        }
        let range = inclusive(lo, hi);
        Ok(self.db.count_range(&range)?)
    }

    fn sample_visit(
        &self,
        lo: u64,
        hi: u64,
        k: usize,
        rng: &mut dyn rand::RngCore,
        visit: &mut dyn FnMut(u64, &[u8]) -> Result<()>,
    ) -> Result<()> {
        if !self.caps.sample {
            return Err(unsupported(self.name, "range sampling"));
        }
        let range = inclusive(lo, hi);
        let mut failed = None;
        let r = self.db.sample_visit(&range, k, rng, &mut |key, value| {
            visit(key_of(key), value).map_err(|e| {
                let msg = e.to_string();
                failed = Some(e);
                strata::Error::invalid(msg)
            })
        });
        match (failed, r) {
            (Some(e), _) => Err(e),
            (None, r) => Ok(r?),
        }
    }

    fn checkpoint(&self) -> Result<()> {
        Ok(self.db.checkpoint()?)
    }

    fn settle(&self) -> Result<()> {
        Ok(self.db.settle()?)
    }

    fn height(&self) -> Option<u32> {
        self.cheap_height.then(|| self.db.index_stats().height)
    }

    fn io(&self) -> Option<IoTotals> {
        Some(totals(&self.db.io()))
    }

    fn close(self: Box<Self>) -> Result<()> {
        Ok(self.db.close()?)
    }
}
