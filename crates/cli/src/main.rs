//! # `strata`: the command-line tool
//!
//! Creates, queries, loads, checks and benchmarks Strata databases. Every database command takes `--db DIR`;
//! keys and values are parsed and printed per the database's manifest types (see `codec`).
//!
//! Exit codes: 0 success; 1 error (including `get` of a missing key, which prints nothing); 2 the database
//! is damaged (`Error::Corruption`, e.g. from `strata check`); 64 a mistake on the command line (bad syntax,
//! an option value out of range, a key or value that is not of the database's type, an option the database
//! does not take). Errors are printed to stderr as `strata: <error>`. A closed stdout pipe
//! (`strata scan | head`) ends the command quietly with status 0.
//!
//! Commands that only read (`get`, `scan`, `count`, `sample`, `check`, `stats`) open the database read-only:
//! they never write, so they work on a read-only file system or a full disk and beside each other.

/// The process's allocator: mimalloc, whose frees from other threads take no lock a writer could wait on
/// (README, "Allocator").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod bench;
mod codec;
mod commands;
mod load;
mod serve;

use clap::error::ErrorKind;
use clap::parser::ValueSource;
use clap::{ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;
use strata::options::BeTreeOptions;
use strata::options::{DeletePolicy, DynOptions, Layout};
use strata::{IndexConfig, IndexKind};

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

    /// Buffer pool budget in bytes of a B+-tree or Bε-tree database (suffixes K, M, G accepted, binary multiples). A
    /// dynamized database's memory is set once, by `create --memory-budget`.
    #[arg(long, global = true, value_name = "BYTES", default_value = "64MiB", value_parser = codec::parse_size)]
    cache: usize,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LayoutArg {
    /// One shard per level; a flush or merge rewrites the receiving level's shard (fewest shards).
    Leveling,
    /// Up to S shards per level; a full level is merged into one shard of the next (least merge work).
    Tiering,
    /// Bentley–Saxe: level i is empty or one shard of up to N·2^i entries (S is fixed at 2).
    Bsm,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum DeleteArg {
    /// A tombstone record in the newer shard, cancelled with its target when they meet in a merge.
    Tombstone,
    /// A tag bit set in place on the old record.
    Tagging,
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

impl From<LayoutArg> for Layout {
    fn from(l: LayoutArg) -> Self {
        match l {
            LayoutArg::Leveling => Layout::Leveling,
            LayoutArg::Tiering => Layout::Tiering,
            LayoutArg::Bsm => Layout::Bsm,
        }
    }
}

impl From<Layout> for LayoutArg {
    fn from(l: Layout) -> Self {
        match l {
            Layout::Leveling => LayoutArg::Leveling,
            Layout::Tiering => LayoutArg::Tiering,
            Layout::Bsm => LayoutArg::Bsm,
        }
    }
}

impl From<DeleteArg> for DeletePolicy {
    fn from(d: DeleteArg) -> Self {
        match d {
            DeleteArg::Tombstone => DeletePolicy::Tombstone,
            DeleteArg::Tagging => DeletePolicy::Tagging,
        }
    }
}

impl From<DeletePolicy> for DeleteArg {
    fn from(d: DeletePolicy) -> Self {
        match d {
            DeletePolicy::Tombstone => DeleteArg::Tombstone,
            DeletePolicy::Tagging => DeleteArg::Tagging,
        }
    }
}

/// The structure of a dynamized index; defaults are the engine's (`DynOptions::default()`).
#[derive(Debug, Args)]
#[command(next_help_heading = "Dynamized index options (only with --index dynamized)")]
struct DynArgs {
    /// How shards are arranged in levels.
    #[arg(long, value_enum, default_value_t = DynOptions::default().layout.into())]
    layout: LayoutArg,
    /// Level growth factor S, 2 to 64: level i holds up to N·S^(i+1) entries (bsm always uses 2).
    #[arg(long, value_name = "S", default_value_t = DynOptions::default().scale_factor)]
    scale_factor: usize,
    /// Buffer capacity N in operations, 1 to 67108864: writes gather in the buffer, and a full buffer is
    /// sorted into a new shard.
    #[arg(long, value_name = "N", default_value_t = DynOptions::default().buffer_capacity)]
    buffer: usize,
    /// How a delete or an overwrite removes the old version of a key.
    #[arg(long, value_enum, default_value_t = DynOptions::default().delete_policy.into())]
    delete: DeleteArg,
    /// δ, in (0, 1]: a level whose tombstones and tagged records exceed this share of its capacity is
    /// compacted (this bounds the share of rejected sample draws).
    #[arg(long, value_name = "D", default_value_t = DynOptions::default().max_delete_proportion)]
    max_delete_proportion: f64,
    /// False-positive rate, in (0, 1), of every shard's Bloom filters (over its keys and its tombstones).
    #[arg(long, value_name = "P", default_value_t = DynOptions::default().bloom_fpr)]
    bloom_fpr: f64,
    /// Bytes of memory for the buffers, the in-memory levels and the Bloom filters (suffixes K, M, G, as
    /// for --cache); levels beyond it stay on disk in their shard files. 0 = unlimited.
    #[arg(long, value_name = "BYTES", value_parser = codec::parse_size,
          default_value_t = DynOptions::default().memory_budget as usize)]
    memory_budget: usize,
    /// Records carry sampling weights (`put --weight W`; plain puts weigh 1) and `sample` draws in
    /// proportion to them.
    #[arg(long)]
    weighted: bool,
}

impl BeTreeArgs {
    fn options(&self) -> BeTreeOptions {
        BeTreeOptions {
            epsilon: self.epsilon,
            merge_operator: self.merge_operator.clone(),
        }
    }
}

impl DynArgs {
    fn options(&self) -> DynOptions {
        DynOptions {
            layout: self.layout.into(),
            scale_factor: self.scale_factor,
            buffer_capacity: self.buffer,
            delete_policy: self.delete.into(),
            max_delete_proportion: self.max_delete_proportion,
            bloom_fpr: self.bloom_fpr,
            weighted: self.weighted,
            memory_budget: self.memory_budget as u64,
            ..DynOptions::default()
        }
    }
}

/// Options of `create --index betree`.
#[derive(Debug, Args)]
struct BeTreeArgs {
    /// Bε-tree ε in (0, 1]: an inner node has about (page size / 8)^ε children and spends the rest of its
    /// page on buffered messages (smaller: faster writes, slower reads).
    #[arg(long, default_value_t = 0.5, value_name = "E", value_parser = parse_epsilon)]
    epsilon: f64,
    /// Bε-tree merge operator for the `merge` command: u64-add (add u64 operands to u64 values; a merge that
    /// would overflow is refused, at the cost of reading the key) or u64-add-saturating (the same, saturating
    /// at 18446744073709551615, without a read).
    #[arg(long, value_name = "NAME", value_parser = clap::builder::PossibleValuesParser::new(strata::options::BUILTIN_MERGE_OPERATORS))]
    merge_operator: Option<String>,
}

/// The names of the index families of this build, with their summaries, for `--index`.
fn index_names() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(
        IndexKind::ALL
            .iter()
            .map(|k| clap::builder::PossibleValue::new(k.name()).help(k.summary())),
    )
}

/// Parses `KEY=VALUE` of `-o`: the value as JSON if it parses as JSON, else as a string.
fn parse_key_value(text: &str) -> Result<(String, serde_json::Value), String> {
    let (key, value) = text
        .split_once('=')
        .ok_or_else(|| format!("expected KEY=VALUE, got {text:?}"))?;
    if key.is_empty() {
        return Err(format!("expected KEY=VALUE, got {text:?}"));
    }
    let value = serde_json::from_str(value).unwrap_or_else(|_| serde_json::Value::from(value));
    Ok((key.to_string(), value))
}

/// Parses a page size: a power of two from 4 KiB to 4 MiB.
fn parse_page_size(text: &str) -> Result<usize, String> {
    let size = codec::parse_size(text)?;
    strata::lab::storage::page::validate_page_size(size)
        .map(|()| size)
        .map_err(|e| match e {
            strata::Error::InvalidArgument(m) => m,
            e => e.to_string(),
        })
}

/// Parses a Bε-tree ε: a number in (0, 1].
fn parse_epsilon(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(e) if e > 0.0 && e <= 1.0 => Ok(e),
        _ => Err(format!(
            "epsilon (ε) must be a number in (0, 1], got {text:?}"
        )),
    }
}

/// Parses a sampling weight: a finite number ≥ 0.
fn parse_weight(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(w) if w.is_finite() && w >= 0.0 => Ok(w),
        Ok(_) => Err(format!(
            "the weight must be finite and at least 0, got {text:?}"
        )),
        Err(_) => Err(format!(
            "expected a number such as 2.5 for the weight, got {text:?}"
        )),
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create a database.
    Create {
        /// Index family (the families of this build, from the engine's registry).
        #[arg(long, default_value = "btree", value_parser = index_names())]
        index: String,
        /// An option of the index family by name, as KEY=VALUE (repeatable; VALUE is JSON when it parses as
        /// JSON, else a string): e.g. `-o layout=leveling -o scale_factor=4`. Applied after the family's own
        /// flags below. Any family's options can be set this way.
        #[arg(short = 'o', long = "option", value_name = "KEY=VALUE", value_parser = parse_key_value)]
        options: Vec<(String, serde_json::Value)>,
        /// Key type.
        #[arg(long, value_enum, default_value = "u64")]
        key: TypeArg,
        /// Value type.
        #[arg(long, value_enum, default_value = "u64")]
        value: TypeArg,
        /// Page size in bytes: a power of two from 4096 to 4194304 (4 MiB); the btree index takes pages up to
        /// 65536 (64 KiB).
        #[arg(long, default_value_t = 4096, value_parser = parse_page_size)]
        page_size: usize,
        /// Default durability of writes.
        #[arg(long, value_enum, default_value = "flush")]
        durability: DurabilityArg,
        /// Read and write pages with O_DIRECT, bypassing the OS page cache.
        #[arg(long)]
        direct_io: bool,
        #[command(flatten)]
        dynamized: DynArgs,
        #[command(flatten)]
        betree: BeTreeArgs,
    },
    /// Insert or overwrite one record.
    Put {
        #[arg(allow_hyphen_values = true)]
        key: String,
        #[arg(allow_hyphen_values = true)]
        value: String,
        /// Sampling weight of the record, finite and ≥ 0 (weighted dynamized databases only; default 1).
        #[arg(long, value_name = "W", value_parser = parse_weight, allow_negative_numbers = true)]
        weight: Option<f64>,
    },
    /// Print the value of a key (exit status 1 and no output when absent).
    Get {
        #[arg(allow_hyphen_values = true)]
        key: String,
    },
    /// Combine OPERAND with the key's value by the database's merge operator (a Bε-tree created with
    /// `--merge-operator`, e.g. u64-add: `merge 7 1` adds 1 to key 7's value, absent counting as 0).
    Merge {
        #[arg(allow_hyphen_values = true)]
        key: String,
        #[arg(allow_hyphen_values = true)]
        operand: String,
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
    /// Draw K independent samples (with replacement) of the records in [FROM, TO].
    ///
    /// Uniform samples, or samples in proportion to the records' weights in a weighted database.
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
        /// Records per atomic write batch (at least 1).
        #[arg(long, default_value_t = 1, conflicts_with = "bulk", value_parser = clap::value_parser!(u64).range(1..))]
        batch: u64,
        /// Build the tree bottom-up with full pages (B+-tree only; sequential order, empty database only;
        /// bypasses the WAL).
        #[arg(long)]
        bulk: bool,
    },
    /// Verify every checksum and structural invariant, of the index and of the write-ahead log (exit status
    /// 2 on damage).
    Check,
    /// Open a damaged database by dropping what cannot be recovered, and report what was dropped.
    ///
    /// A write-ahead log damaged in the middle is cut at the damage (the records after it are lost), a
    /// missing or unreadable log is replaced, and an index that fell back to an older checkpoint is accepted
    /// as it is. Without damage it just recovers the database (replays and checkpoints its log) and reports
    /// nothing dropped. Damage inside the index itself cannot be repaired this way; `check` still reports it.
    Repair,
    /// Print statistics as JSON.
    Stats,
    /// Run a benchmark suite.
    Bench(bench::BenchArgs),
    /// Serve the database directory over the Redis protocol (RESP2/RESP3): partitions in DIR/p<i>, GET/SET
    /// and friends, SCAN, and the ordered RANGE, COUNT and SAMPLE commands.
    Serve(Box<serve::ServeArgs>),
}

/// Everything that ends a command unsuccessfully.
#[derive(Debug)]
enum CliError {
    /// The engine reported an error.
    Engine(strata::Error),
    /// The benchmark lab reported an error.
    Bench(strata_bench::BenchError),
    /// A mistake on the command line, with the message to show (exit status 64).
    Usage(String),
    /// A command the database's state refuses, with the message to show (exit status 1).
    Refused(String),
    /// An invalid combination of command-line arguments (exit status 64, like clap's own errors).
    Syntax(clap::Error),
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

/// Prints a clap error (or help/version output) and returns its exit status.
fn clap_exit(e: &clap::Error) -> ExitCode {
    let _ = e.print();
    if e.use_stderr() {
        ExitCode::from(EXIT_USAGE)
    } else {
        ExitCode::SUCCESS
    }
}

fn main() -> ExitCode {
    let parsed = Cli::command()
        .try_get_matches()
        .and_then(|m| Cli::from_arg_matches(&m).map(|cli| (cli, m)));
    let (cli, matches) = match parsed {
        Ok(p) => p,
        Err(e) => return clap_exit(&e),
    };
    match run(cli, &matches) {
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
            ExitCode::from(EXIT_USAGE)
        }
        Err(CliError::Refused(msg)) => {
            eprintln!("strata: {msg}");
            ExitCode::FAILURE
        }
        Err(CliError::Syntax(e)) => clap_exit(&e),
        Err(CliError::Output(e)) => {
            eprintln!("strata: writing output: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A command-line error of subcommand `name`, formatted by clap with that subcommand's usage.
fn syntax_error(name: &str, kind: ErrorKind, message: impl std::fmt::Display) -> CliError {
    let mut cmd = Cli::command();
    cmd.build();
    let sub = cmd
        .find_subcommand_mut(name)
        .expect("the subcommand exists");
    CliError::Syntax(sub.error(kind, message))
}

/// Refuses the options of group `G` (given on the command line) for an index they do not apply to.
fn refuse_given<G: Args>(create: &ArgMatches, what: &str, index: &str) -> CliResult {
    let probe = G::augment_args(clap::Command::new("probe"));
    let given: Vec<String> = probe
        .get_arguments()
        .filter(|a| create.value_source(a.get_id().as_str()) == Some(ValueSource::CommandLine))
        .map(|a| format!("--{}", a.get_long().unwrap_or(a.get_id().as_str())))
        .collect();
    if given.is_empty() {
        return Ok(());
    }
    Err(syntax_error(
        "create",
        ErrorKind::ArgumentConflict,
        format!(
            "{} {} only to {what}; add --index {index}",
            given.join(", "),
            if given.len() == 1 { "applies" } else { "apply" }
        ),
    ))
}

/// The index family and options of `create`: the family's defaults, then its flag group (flags of other
/// families' groups are refused), then the `-o KEY=VALUE` settings. Options the family refuses are refused
/// by `create` before anything is made (exit status 64).
fn index_config(
    create: &ArgMatches,
    kind: IndexKind,
    dynamized: &DynArgs,
    betree: &BeTreeArgs,
    sets: Vec<(String, serde_json::Value)>,
) -> CliResult<IndexConfig> {
    let mut json = kind.default_config().options_json();
    let group = |family: &str, options: serde_json::Value, refuse: &dyn Fn() -> CliResult| {
        if kind.name() == family {
            Ok(Some(options))
        } else {
            refuse().map(|()| None)
        }
    };
    let dyn_json = serde_json::to_value(dynamized.options()).expect("options serialize");
    let betree_json = serde_json::to_value(betree.options()).expect("options serialize");
    for options in [
        group("dynamized", dyn_json, &|| {
            refuse_given::<DynArgs>(create, "a dynamized index", "dynamized")
        })?,
        group("betree", betree_json, &|| {
            refuse_given::<BeTreeArgs>(create, "a Bε-tree", "betree")
        })?,
    ]
    .into_iter()
    .flatten()
    {
        json = options;
    }
    let Some(object) = json.as_object_mut() else {
        unreachable!("index options are a JSON object");
    };
    for (key, value) in sets {
        object.insert(key, value);
    }
    IndexConfig::from_json(kind, json).map_err(|e| match e {
        strata::Error::InvalidArgument(m) => CliError::Usage(m),
        e => CliError::Engine(e),
    })
}

fn run(cli: Cli, matches: &ArgMatches) -> CliResult {
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
            dynamized,
            betree,
            options: sets,
        } => {
            let create = matches
                .subcommand_matches("create")
                .expect("the create subcommand was parsed");
            let kind: IndexKind = index.parse()?;
            let config = strata::Config {
                index: index_config(create, kind, &dynamized, &betree, sets)?,
                key: key.into(),
                value: value.into(),
                page_size,
                durability: durability.into(),
                direct_io,
            };
            commands::create(&dir()?, &config, &options)
        }
        Command::Put { key, value, weight } => {
            commands::put(&dir()?, &options, &key, &value, weight)
        }
        Command::Get { key } => commands::get(&dir()?, &options, &key),
        Command::Del { key } => commands::del(&dir()?, &options, &key),
        Command::Merge { key, operand } => commands::merge(&dir()?, &options, &key, &operand),
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
                batch: batch as usize,
                bulk,
            },
        ),
        Command::Check => commands::check(&dir()?, &options),
        Command::Repair => commands::repair(&dir()?, &options),
        Command::Stats => commands::stats(&dir()?, &options),
        Command::Bench(args) => bench::run(&args, cache),
        Command::Serve(args) => serve::run(&dir()?, cache, *args),
    }
}
