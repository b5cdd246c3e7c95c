//! The database commands: create, put, get, del, merge, scan, count, sample, check, repair, stats.
//!
//! Reading commands open the database read-only ([`open_read`]); writing ones read-write ([`open`]). Either
//! way, what recovery had to do (a WAL replayed, a torn tail cut, a spare checkpoint rewritten) is told on
//! stderr as a note.

use crate::codec;
use crate::{CliError, CliResult};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::io::{BufWriter, Write};
use std::ops::Bound;
use std::path::Path;
use strata::WriteOp;
use strata::{Config, Direction, KeyRange, Options, RawDb};

/// Samples drawn per engine call by `sample`.
const SAMPLE_CHUNK: usize = 1 << 16;

/// Opens the database read-write (recovering it durably).
fn open(dir: &Path, options: &Options) -> CliResult<RawDb> {
    let db = RawDb::open(dir, options)?;
    note_recovery(&db, false);
    Ok(db)
}

/// Opens the database read-only: a shared lock, nothing written (a WAL is replayed in memory).
pub fn open_read(dir: &Path, options: &Options) -> CliResult<RawDb> {
    let db = RawDb::open_read_only(dir, options)?;
    note_recovery(&db, true);
    Ok(db)
}

/// Tells on stderr what recovery did, when it did anything worth knowing.
fn note_recovery(db: &RawDb, read_only: bool) {
    let r = db.recovery();
    if r.replayed_records > 0 && read_only {
        eprintln!(
            "strata: note: {} was not closed cleanly: replayed {} write-ahead-log record(s) in memory (read-only); \
             a write command or `strata repair` makes the recovery durable",
            db.path().display(),
            r.replayed_records
        );
    }
    if r.torn_tail_bytes > 0 {
        eprintln!(
            "strata: note: the write-ahead log ended in a torn write of {} bytes (records a crash kept from \
             becoming durable); recovered up to it",
            r.torn_tail_bytes
        );
    }
    if let Some(d) = &r.spare_checkpoint_rewritten {
        eprintln!("strata: note: rewrote an unusable spare checkpoint slot ({d})");
    }
}

fn key_arg(db: &RawDb, text: &str) -> CliResult<Vec<u8>> {
    codec::parse(db.manifest().key, "key", text).map_err(CliError::Usage)
}

fn value_arg(db: &RawDb, text: &str) -> CliResult<Vec<u8>> {
    codec::parse(db.manifest().value, "value", text).map_err(CliError::Usage)
}

/// Stdout, buffered; the caller flushes it.
fn stdout() -> BufWriter<std::io::StdoutLock<'static>> {
    BufWriter::new(std::io::stdout().lock())
}

/// Writes one `KEY<TAB>VALUE` line.
fn write_record(out: &mut impl Write, db: &RawDb, key: &[u8], value: &[u8]) -> std::io::Result<()> {
    let m = db.manifest();
    writeln!(
        out,
        "{}\t{}",
        codec::format(m.key, key),
        codec::format(m.value, value)
    )
}

/// Prints one line to stdout (a closed pipe is an error the caller ends quietly on).
pub fn print_line(line: &str) -> CliResult {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()?;
    Ok(())
}

pub fn create(dir: &Path, config: &Config, options: &Options) -> CliResult {
    // Whatever `create` refuses as an invalid argument is a mistake in the options given (nothing was made).
    let db = RawDb::create(dir, config, options).map_err(|e| match e {
        strata::Error::InvalidArgument(m) => CliError::Usage(m),
        e => CliError::Engine(e),
    })?;
    db.close()?;
    let options = config.index.describe();
    print_line(&format!(
        "created a {} database in {} ({} keys, {} values, {}-byte pages, durability {}{}{})",
        config.index.kind().name(),
        dir.display(),
        config.key.name(),
        config.value.name(),
        config.page_size,
        config.durability.name(),
        if config.direct_io { ", O_DIRECT" } else { "" },
        if options.is_empty() {
            String::new()
        } else {
            format!("; {options}")
        }
    ))
}

/// `merge KEY OPERAND`: combines the operand with the key's value by the database's merge operator.
pub fn merge(dir: &Path, options: &Options, key: &str, operand: &str) -> CliResult {
    let db = open(dir, options)?;
    let key = key_arg(&db, key)?;
    let operand = value_arg(&db, operand)?;
    db.write(&[WriteOp::Merge { key, operand }], None)?;
    Ok(db.close()?)
}

pub fn put(
    dir: &Path,
    options: &Options,
    key: &str,
    value: &str,
    weight: Option<f64>,
) -> CliResult {
    let db = open(dir, options)?;
    let k = key_arg(&db, key)?;
    let v = value_arg(&db, value)?;
    match weight {
        None => db.insert(&k, &v)?,
        Some(weight) => {
            if !db.capabilities().weighted {
                return Err(CliError::Usage(format!(
                    "--weight needs a weighted database, and {} is a {} database without weights (create \
                     one that keeps weights, e.g. `strata create --index dynamized --weighted`)",
                    dir.display(),
                    db.manifest().index.kind().name()
                )));
            }
            db.write(
                &[WriteOp::PutWeighted {
                    key: k,
                    value: v,
                    weight,
                }],
                None,
            )?;
        }
    }
    Ok(db.close()?)
}

pub fn get(dir: &Path, options: &Options, key: &str) -> CliResult {
    let db = open_read(dir, options)?;
    let k = key_arg(&db, key)?;
    match db.get(&k)? {
        Some(v) => {
            let mut out = stdout();
            writeln!(out, "{}", codec::format(db.manifest().value, &v))?;
            out.flush()?;
            Ok(())
        }
        None => Err(CliError::NotFound),
    }
}

pub fn del(dir: &Path, options: &Options, key: &str) -> CliResult {
    let db = open(dir, options)?;
    let k = key_arg(&db, key)?;
    db.delete(&k)?;
    Ok(db.close()?)
}

pub fn scan(
    dir: &Path,
    options: &Options,
    from: Option<&str>,
    to: Option<&str>,
    limit: Option<u64>,
    reverse: bool,
) -> CliResult {
    let db = open_read(dir, options)?;
    let bound = |text: Option<&str>| -> CliResult<Bound<Vec<u8>>> {
        Ok(match text {
            Some(t) => Bound::Included(key_arg(&db, t)?),
            None => Bound::Unbounded,
        })
    };
    let range = KeyRange {
        lo: bound(from)?,
        hi: bound(to)?,
    };
    let direction = if reverse {
        Direction::Reverse
    } else {
        Direction::Forward
    };
    let mut out = stdout();
    let limit = limit.map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX));
    for item in db.range(range, direction).take(limit) {
        let (k, v) = item?;
        write_record(&mut out, &db, &k, &v)?;
    }
    out.flush()?;
    Ok(())
}

fn inclusive(db: &RawDb, from: &str, to: &str) -> CliResult<KeyRange> {
    Ok(KeyRange::inclusive(key_arg(db, from)?, key_arg(db, to)?))
}

pub fn count(dir: &Path, options: &Options, from: &str, to: &str) -> CliResult {
    let db = open_read(dir, options)?;
    let n = db.count_range(&inclusive(&db, from, to)?)?;
    let mut out = stdout();
    writeln!(out, "{n}")?;
    out.flush()?;
    Ok(())
}

pub fn sample(
    dir: &Path,
    options: &Options,
    from: &str,
    to: &str,
    k: usize,
    seed: Option<u64>,
) -> CliResult {
    let db = open_read(dir, options)?;
    let range = inclusive(&db, from, to)?;
    let mut rng = match seed {
        Some(s) => ChaCha8Rng::seed_from_u64(s),
        None => ChaCha8Rng::from_os_rng(),
    };
    let mut out = stdout();
    // Samples are independent, so drawing them in chunks keeps memory bounded for any k.
    let mut left = k;
    while left > 0 {
        let n = left.min(SAMPLE_CHUNK);
        let records = db.sample_range(&range, n, &mut rng)?;
        if records.is_empty() {
            break; // empty range
        }
        for (key, value) in &records {
            write_record(&mut out, &db, key, value)?;
        }
        left -= n;
    }
    out.flush()?;
    Ok(())
}

pub fn check(dir: &Path, options: &Options) -> CliResult {
    let db = open_read(dir, options)?;
    let report = db.check()?;
    for note in &report.notes {
        eprintln!("strata: note: {note}");
    }
    print_line(&format!(
        "ok: {} records, height {}, {} pages checked, {} free pages, {} WAL records ({})",
        report.records,
        report.height,
        report.pages_checked,
        report.free_pages,
        report.wal_records,
        dir.display()
    ))
}

/// `repair`: opens the database dropping what cannot be recovered, prints what was dropped.
pub fn repair(dir: &Path, options: &Options) -> CliResult {
    let info = RawDb::repair(dir, options)?;
    if info.repairs.is_empty() {
        return print_line(&format!(
            "nothing to repair: recovered {} ({} write-ahead-log record(s) replayed)",
            dir.display(),
            info.replayed_records
        ));
    }
    for r in &info.repairs {
        print_line(&format!("dropped: {r}"))?;
    }
    print_line(&format!(
        "repaired {} ({} write-ahead-log record(s) replayed); run `strata check` to verify the index",
        dir.display(),
        info.replayed_records
    ))
}

/// What `stats` prints: the database's statistics, then its index family's options and capabilities.
#[derive(serde::Serialize)]
struct StatsOutput<'a> {
    #[serde(flatten)]
    stats: &'a strata::DbStats,
    index_options: serde_json::Value,
    capabilities: strata::Capabilities,
}

pub fn stats(dir: &Path, options: &Options) -> CliResult {
    let db = open_read(dir, options)?;
    let stats = db.stats()?;
    let json = serde_json::to_string_pretty(&StatsOutput {
        stats: &stats,
        index_options: db.manifest().index.options_json(),
        capabilities: db.capabilities(),
    })
    .map_err(|e| CliError::Refused(format!("cannot serialise statistics: {e}")))?;
    let mut out = stdout();
    writeln!(out, "{json}")?;
    out.flush()?;
    Ok(())
}
