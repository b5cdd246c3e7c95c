//! # `strata`: the command-line tool
//!
//! Creates, queries, loads, checks and benchmarks Strata databases. Every database command takes `--db DIR`;
//! keys and values are parsed and printed per the database's manifest types (see `codec`).
//!
//! Exit codes: 0 success; 1 error (including `get` of a missing key, which prints nothing); 2 the database
//! is damaged (`Error::Corruption`, e.g. from `strata check`); 64 invalid command-line syntax. Errors are
//! printed to stderr as `strata: <error>`. A closed stdout pipe (`strata scan | head`) ends the command
//! quietly with status 0.

mod bench;
mod codec;
mod commands;
mod load;

use clap::{Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;

/// Exit status for damage found in a database.
const EXIT_CORRUPTION: u8 = 2;
/// Exit status for command-line syntax errors (sysexits' EX_USAGE), kept apart from corruption.
const EXIT_USAGE: u8 = 64;

#[derive(Debug, Parser)]
#[command(
    name = "strata",
    version,
    about = "Create, query, load, check and benchmark Strata databases",
    after_help = "Exit status: 0 ok, 1 error or key not found, 2 database damaged, 64 bad command line."
)]
struct Cli {
    /// Database directory.
    #[arg(long, global = true, value_name = "DIR")]
    db: Option<PathBuf>,

    /// Buffer pool budget in bytes (suffixes K, M, G accepted, binary multiples).
    #[arg(long, global = true, value_name = "BYTES", default_value = "64MiB", value_parser = codec::parse_size)]
    cache: usize,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum IndexArg {
    /// B+-tree with subtree counts (range counting and sampling).
    Btree,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum TypeArg {
    /// Unsigned 64-bit integers (decimal on the command line).
    U64,
    /// Byte strings (UTF-8 text, or hex after 0x).
    Bytes,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum DurabilityArg {
    /// In memory until the next flush, stronger write, checkpoint or clean close.
    None,
    /// Handed to the OS before the call returns (survives a killed process).
    Flush,
    /// fdatasync'ed before the call returns (survives power loss).
    Sync,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum OrderArg {
    Sequential,
    Random,
}

impl From<TypeArg> for strata::TypeKind {
    fn from(t: TypeArg) -> Self {
        match t {
            TypeArg::U64 => strata::TypeKind::U64,
            TypeArg::Bytes => strata::TypeKind::Bytes,
        }
    }
}

impl From<DurabilityArg> for strata::Durability {
    fn from(d: DurabilityArg) -> Self {
        match d {
            DurabilityArg::None => strata::Durability::None,
            DurabilityArg::Flush => strata::Durability::Flush,
            DurabilityArg::Sync => strata::Durability::Sync,
        }
    }
}

impl From<IndexArg> for strata::IndexKind {
    fn from(i: IndexArg) -> Self {
        match i {
            IndexArg::Btree => strata::IndexKind::BTree,
        }
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create a database.
    Create {
        /// Index family.
        #[arg(long, value_enum, default_value = "btree")]
        index: IndexArg,
        /// Key type.
        #[arg(long, value_enum, default_value = "u64")]
        key: TypeArg,
        /// Value type.
        #[arg(long, value_enum, default_value = "u64")]
        value: TypeArg,
        /// Page size in bytes: a power of two from 4096 to 65536.
        #[arg(long, default_value_t = 4096)]
        page_size: usize,
        /// Default durability of writes.
        #[arg(long, value_enum, default_value = "flush")]
        durability: DurabilityArg,
        /// Read and write pages with O_DIRECT, bypassing the OS page cache.
        #[arg(long)]
        direct_io: bool,
    },
    /// Insert or overwrite one record.
    Put {
        #[arg(allow_hyphen_values = true)]
        key: String,
        #[arg(allow_hyphen_values = true)]
        value: String,
    },
    /// Print the value of a key (exit status 1 and no output when absent).
    Get {
        #[arg(allow_hyphen_values = true)]
        key: String,
    },
    /// Remove a key (no effect if absent).
    Del {
        #[arg(allow_hyphen_values = true)]
        key: String,
    },
    /// Print records in key order, one `KEY<TAB>VALUE` line each.
    Scan {
        /// Smallest key (inclusive).
        #[arg(long, allow_hyphen_values = true)]
        from: Option<String>,
        /// Largest key (inclusive).
        #[arg(long, allow_hyphen_values = true)]
        to: Option<String>,
        /// Print at most this many records.
        #[arg(long)]
        limit: Option<u64>,
        /// Descending order.
        #[arg(long)]
        reverse: bool,
    },
    /// Count the records with keys in [FROM, TO].
    Count {
        #[arg(long, allow_hyphen_values = true)]
        from: String,
        #[arg(long, allow_hyphen_values = true)]
        to: String,
    },
    /// Draw K independent uniform samples (with replacement) of the records in [FROM, TO].
    Sample {
        #[arg(long, allow_hyphen_values = true)]
        from: String,
        #[arg(long, allow_hyphen_values = true)]
        to: String,
        /// Number of samples.
        #[arg(short = 'k')]
        k: usize,
        /// Seed of the random generator (the same seed gives the same samples); random when absent.
        #[arg(long)]
        seed: Option<u64>,
    },
    /// Load u64 keys 0..N-1 with value = key (the decimal key as bytes for byte-string types).
    Load {
        /// Number of records.
        #[arg(long)]
        records: u64,
        /// Key order (random = seeded Fisher–Yates shuffle).
        #[arg(long, value_enum, default_value = "sequential")]
        order: OrderArg,
        /// Seed of the random order.
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Durability of each batch (default: the database's).
        #[arg(long, value_enum, conflicts_with = "bulk")]
        durability: Option<DurabilityArg>,
        /// Records per atomic write batch.
        #[arg(long, default_value_t = 1, conflicts_with = "bulk")]
        batch: usize,
        /// Build the tree bottom-up with full pages (sequential order, empty database only; bypasses the WAL).
        #[arg(long)]
        bulk: bool,
    },
    /// Verify every checksum and structural invariant (exit status 2 on damage).
    Check,
    /// Print statistics as JSON.
    Stats,
    /// Run a benchmark suite.
    Bench(bench::BenchArgs),
}

/// Everything that ends a command unsuccessfully.
#[derive(Debug)]
enum CliError {
    /// The engine reported an error.
    Engine(strata::Error),
    /// The benchmark lab reported an error.
    Bench(strata_bench::BenchError),
    /// A bad argument, with the message to show.
    Usage(String),
    /// Writing the output failed.
    Output(std::io::Error),
    /// `get` of an absent key: exit status 1, no message.
    NotFound,
}

impl From<strata::Error> for CliError {
    fn from(e: strata::Error) -> Self {
        CliError::Engine(e)
    }
}

impl From<strata_bench::BenchError> for CliError {
    fn from(e: strata_bench::BenchError) -> Self {
        match e {
            strata_bench::BenchError::Engine(e) => CliError::Engine(e),
            e => CliError::Bench(e),
        }
    }
}

impl From<std::io::Error> for CliError {
    fn from(e: std::io::Error) -> Self {
        CliError::Output(e)
    }
}

type CliResult<T = ()> = Result<T, CliError>;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(EXIT_USAGE)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(CliError::NotFound) => ExitCode::FAILURE,
        Err(CliError::Output(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(CliError::Engine(e)) => {
            eprintln!("strata: {e}");
            if matches!(e, strata::Error::Corruption { .. }) {
                ExitCode::from(EXIT_CORRUPTION)
            } else {
                ExitCode::FAILURE
            }
        }
        Err(CliError::Bench(e)) => {
            eprintln!("strata: {e}");
            ExitCode::FAILURE
        }
        Err(CliError::Usage(msg)) => {
            eprintln!("strata: {msg}");
            ExitCode::FAILURE
        }
        Err(CliError::Output(e)) => {
            eprintln!("strata: writing output: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> CliResult {
    let Cli { db, cache, command } = cli;
    let dir = || {
        db.clone()
            .ok_or_else(|| CliError::Usage("this command needs --db DIR".into()))
    };
    let options = strata::Options {
        cache_bytes: cache,
        ..strata::Options::default()
    };
    match command {
        Command::Create {
            index,
            key,
            value,
            page_size,
            durability,
            direct_io,
        } => {
            let config = strata::Config {
                index: index.into(),
                key: key.into(),
                value: value.into(),
                page_size,
                durability: durability.into(),
                direct_io,
                dynamized: strata::index::dynamized::DynOptions::default(),
            };
            commands::create(&dir()?, &config, &options)
        }
        Command::Put { key, value } => commands::put(&dir()?, &options, &key, &value),
        Command::Get { key } => commands::get(&dir()?, &options, &key),
        Command::Del { key } => commands::del(&dir()?, &options, &key),
        Command::Scan {
            from,
            to,
            limit,
            reverse,
        } => commands::scan(
            &dir()?,
            &options,
            from.as_deref(),
            to.as_deref(),
            limit,
            reverse,
        ),
        Command::Count { from, to } => commands::count(&dir()?, &options, &from, &to),
        Command::Sample { from, to, k, seed } => {
            commands::sample(&dir()?, &options, &from, &to, k, seed)
        }
        Command::Load {
            records,
            order,
            seed,
            durability,
            batch,
            bulk,
        } => load::run(
            &dir()?,
            &options,
            &load::LoadArgs {
                records,
                random: order == OrderArg::Random,
                seed,
                durability: durability.map(Into::into),
                batch,
                bulk,
            },
        ),
        Command::Check => commands::check(&dir()?, &options),
        Command::Stats => commands::stats(&dir()?, &options),
        Command::Bench(args) => bench::run(&args, cache),
    }
}
