//! `strata load`: fills a database with u64 keys 0..N-1 (value = key), in sequential or seeded random order,
//! in write batches of a chosen size and durability, or with the bulk loader.
//!
//! Keys and values are encoded per the database's types: `u64` as itself, byte strings as the decimal key
//! (`"42"`). The reported time runs from the first write to the end of the closing checkpoint, so it includes
//! getting the data into the page file.

use crate::commands::print_line;
use crate::{CliError, CliResult};
use indicatif::{ProgressBar, ProgressStyle};
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use std::io::IsTerminal;
use std::path::Path;
use std::time::Instant;
use strata::WriteOp;
use strata::{Durability, Options, RawDb, TypeKind};

/// What `strata load` was asked to do.
#[derive(Debug, Clone)]
pub struct LoadArgs {
    pub records: u64,
    pub random: bool,
    pub seed: u64,
    /// `None`: the database's default durability.
    pub durability: Option<Durability>,
    pub batch: usize,
    pub bulk: bool,
}

fn encode(kind: TypeKind, n: u64) -> Vec<u8> {
    match kind {
        TypeKind::U64 => n.to_be_bytes().to_vec(),
        TypeKind::Bytes => n.to_string().into_bytes(),
    }
}

fn progress(len: u64) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template("loading [{bar:40}] {pos}/{len} {per_sec} eta {eta}")
            .expect("valid progress template")
            .progress_chars("=> "),
    );
    bar
}

/// The numbers 0..n in the byte-wise order of their decimal strings ("0", "1", "10", "100", …, "11", …, "2",
/// …), without materialising them: the order a bulk load of byte-string keys needs.
struct DecimalOrder {
    n: u64,
    next: Option<u64>,
}

impl DecimalOrder {
    fn new(n: u64) -> Self {
        DecimalOrder {
            n,
            next: (n > 0).then_some(0),
        }
    }
}

impl Iterator for DecimalOrder {
    type Item = u64;
    fn next(&mut self) -> Option<u64> {
        let cur = self.next?;
        let n = self.n;
        self.next = if cur == 0 {
            (n > 1).then_some(1)
        } else if let Some(child) = cur.checked_mul(10).filter(|&c| c < n) {
            Some(child)
        } else {
            // Next sibling, climbing while the last digit is 9 or the sibling is past the end.
            let mut c = cur;
            loop {
                if c % 10 != 9 && c + 1 < n {
                    break Some(c + 1);
                }
                c /= 10;
                if c == 0 {
                    break None;
                }
            }
        };
        Some(cur)
    }
}

pub fn run(dir: &Path, options: &Options, args: &LoadArgs) -> CliResult {
    if args.batch == 0 {
        return Err(CliError::Usage("--batch must be at least 1".into()));
    }
    if args.bulk && args.random {
        return Err(CliError::Usage(
            "--bulk loads keys in sequential order only; drop --order random".into(),
        ));
    }
    let db = RawDb::open(dir, options)?;
    let (kk, vk) = (db.manifest().key, db.manifest().value);
    let bar = progress(args.records);
    let start = Instant::now();
    if args.bulk {
        if !db.is_empty() {
            return Err(CliError::Refused(format!(
                "--bulk needs an empty database; {} holds {} records",
                dir.display(),
                db.len()
            )));
        }
        let keys: Box<dyn Iterator<Item = u64>> = match kk {
            TypeKind::U64 => Box::new(0..args.records),
            TypeKind::Bytes => Box::new(DecimalOrder::new(args.records)),
        };
        let mut records = keys.map(|k| {
            bar.inc(1);
            (encode(kk, k), encode(vk, k))
        });
        db.bulk_load(&mut records).map_err(|e| match e {
            // A family without a bulk loader refuses it before taking any record.
            strata::Error::InvalidArgument(m) if !db.capabilities().bulk_load => {
                CliError::Usage(format!(
                    "--bulk: {m}; load this {} database without --bulk",
                    db.manifest().index.kind().name()
                ))
            }
            e => CliError::Engine(e),
        })?;
    } else {
        let keys: Box<dyn Iterator<Item = u64>> = if args.random {
            let mut keys: Vec<u64> = (0..args.records).collect();
            keys.shuffle(&mut ChaCha8Rng::seed_from_u64(args.seed));
            Box::new(keys.into_iter())
        } else {
            Box::new(0..args.records)
        };
        let mut ops = Vec::with_capacity(args.batch.min(1 << 16));
        for k in keys {
            ops.push(WriteOp::Put {
                key: encode(kk, k),
                value: encode(vk, k),
            });
            if ops.len() == args.batch {
                db.write(&ops, args.durability)?;
                bar.inc(ops.len() as u64);
                ops.clear();
            }
        }
        if !ops.is_empty() {
            db.write(&ops, args.durability)?;
            bar.inc(ops.len() as u64);
        }
    }
    db.close()?;
    bar.finish_and_clear();
    let secs = start.elapsed().as_secs_f64();
    let rate = if secs > 0.0 {
        args.records as f64 / secs
    } else {
        0.0
    };
    print_line(&format!(
        "loaded {} records in {secs:.3} s ({rate:.0} records/s)",
        args.records
    ))
}

#[cfg(test)]
mod tests {
    use super::DecimalOrder;

    #[test]
    fn decimal_order_is_sorted_and_complete() {
        for n in [0u64, 1, 2, 9, 10, 11, 99, 100, 101, 1234, 10_000] {
            let got: Vec<u64> = DecimalOrder::new(n).collect();
            let mut want: Vec<u64> = (0..n).collect();
            want.sort_by_key(|k| k.to_string());
            assert_eq!(got, want, "n = {n}");
        }
    }
}
