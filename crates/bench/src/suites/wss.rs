//! # The `wss` suite
//!
//! Weighted sampling on the weighted dynamized index (`strata-dynamized` with `DynOptions { weighted: true
//! }`, WIRS shards): Rumbaugh & Xie's weighted experiments at this machine's scale. One load of N =
//! `--records` (default 2 000 000) weighted records by the protocol of [`super::sampling`] (weights are
//! Pareto(α = 1.5) integers from 1 to 100 000; 10% warm-up; inserts with 5% deletes interleaved), then:
//!
//! 1. `wss`: the `insert` row of the load, and Q = `--ops` (default 1000) weighted set sampling queries of
//!    k = 1000 over the whole set (`sample` rows); `static-alias`, one alias table over every live record,
//!    answers the same queries (the query-latency ideal of WSS).
//! 2. `wirs`: Q weighted range sampling queries of k = 1000 over 0.1% of the live records on the same
//!    database; `static-isam` built with weights (prefix sums, one binary search per draw) answers the same
//!    queries.
//!
//! Every sample is checked: live, in range, its key's value, and over all samples the mean sampled weight
//! must be Σw²/Σw of the queries' ranges within 6 standard deviations.
//!
//! **Missing baseline**: the paper's weighted AB-tree (an aggregate B+-tree with subtree weight sums) does
//! not exist in this project — `strata-btree` keeps subtree counts only and cannot sample by weight — so the
//! suite has no AB-tree rows; the report says so.

use super::SuiteConfig;
use super::common::Ctx;
use super::irs::{DYNAMIZED, STATIC_ISAM, engine_bars, goal_row, latency_ratio, static_phase};
use super::sampling::{K, Protocol, range_queries, whole_set_queries};
use crate::driver::{Engine, StaticAlias, StaticIsam, StrataDynamized};
use crate::error::{BenchError, Result};
use crate::plot::{self, Bars, Figure, Unit};
use crate::result::BenchResult;
use std::fmt::Write as _;
use std::path::Path;
use strata::index::dynamized::{DynOptions, RuntimeOptions};

pub const NAME: &str = "wss";
pub const DESCRIPTION: &str = "weighted set sampling (k = 1000, whole set) and weighted range sampling (0.1%) on the weighted dynamized index vs a static alias table and a weighted static ISAM; insert throughput with 5% deletes (no weighted AB-tree baseline yet)";
pub const DEFAULT_RECORDS: u64 = 2_000_000;
/// Queries per workload when `--ops` is not given.
pub const DEFAULT_QUERIES: u64 = 1000;

pub const STATIC_ALIAS: &str = "static-alias";
pub const WSS: &str = "wss";
pub const WIRS: &str = "wirs";

/// The weighted dynamized index with the paper's options.
fn weighted_options() -> DynOptions {
    DynOptions {
        weighted: true,
        ..DynOptions::default()
    }
}

fn queries(cfg: &SuiteConfig) -> u64 {
    cfg.ops.unwrap_or(DEFAULT_QUERIES)
}

/// Method notes for the report.
pub fn notes(cfg: &SuiteConfig) -> Vec<String> {
    let q = queries(cfg);
    vec![
        format!(
            "One weighted load of {} records: keys are distinct uniformly random u64s with checkable u64 values \
             and Pareto(α = {}) integer weights from 1 to {}; the first 10% are an untimed warm-up, the rest \
             are inserted with 5% deletes interleaved (victims: uniformly random live keys); the `insert` row \
             of `{WSS}` counts inserts plus deletes. Engine: `{DYNAMIZED}` with {}.",
            cfg.records,
            super::sampling::PARETO_ALPHA,
            super::sampling::MAX_WEIGHT,
            StrataDynamized::new(weighted_options(), RuntimeOptions::default()).describe(),
        ),
        format!(
            "`{WSS}`: {q} queries of k = {K} weighted samples over the whole set; `{STATIC_ALIAS}` (one \
             Walker/Vose alias table over every live record, built after the load) answers the same number of \
             queries. `{WIRS}`: {q} queries of k = {K} weighted samples over ranges of 0.1% of the live records \
             at random positions; `{STATIC_ISAM}` (one ISAM shard with weight prefix sums) answers the same \
             ranges. Every engine and ideal hands samples over by visitor, without allocating per sample."
        ),
        "Checks: every sample is live, in its range and carries its key's value; over all samples of a phase \
         the mean sampled weight must equal Σw²/Σw of the queried ranges within 6 standard deviations (a \
         uniform sampler is far off); a wrong engine aborts the run."
            .into(),
        "Missing baseline: this project's AB-tree (`strata-btree`) keeps subtree COUNTS only, so it cannot \
         sample by weight; the paper's weighted AB-tree (subtree weight sums) has no counterpart yet, and the \
         suite posts no AB-tree rows rather than pretend."
            .into(),
    ]
}

/// Runs the suite on `strata-dynamized` (weighted) — it must be among `engines`.
pub fn run(cfg: &SuiteConfig, engines: &[Box<dyn Engine>]) -> Result<Vec<BenchResult>> {
    if cfg.records < 10 {
        return Err(BenchError::Usage(format!(
            "the {NAME} suite needs at least 10 records"
        )));
    }
    if cfg.codec.size() != 8 {
        return Err(BenchError::Usage(format!(
            "the {NAME} suite stores u64 values (--value-size 8)"
        )));
    }
    if !engines.iter().any(|e| e.name() == DYNAMIZED) {
        return Err(BenchError::Usage(format!(
            "the {NAME} suite needs the {DYNAMIZED} engine (the weighted AB-tree baseline does not exist yet)"
        )));
    }
    let q = queries(cfg);
    let engine = StrataDynamized::new(weighted_options(), RuntimeOptions::default());
    let mut ctx = Ctx::new(NAME, cfg, &engine);
    ctx.opts.cache_bytes = 0;
    let p = Protocol::paper(cfg.records, true);
    // One database: the load, then the whole-set queries, then the range queries.
    let dir = cfg.data_dir.join(DYNAMIZED).join("weighted");
    let db = ctx.create(&dir)?;
    let (mut out, live) = super::sampling::load(&ctx, db.as_ref(), &dir, WSS, 1, &p)?;
    let live = super::sampling::LiveSet::new(live, true);
    let whole = whole_set_queries(&live.keys, q);
    out.extend(super::sampling::sample_phase(
        &ctx,
        DYNAMIZED,
        db.as_ref(),
        &dir,
        WSS,
        &live,
        &whole,
    )?);
    let ranges = range_queries(&live.keys, q, cfg.seed, WIRS);
    out.extend(super::sampling::sample_phase(
        &ctx,
        DYNAMIZED,
        db.as_ref(),
        &dir,
        WIRS,
        &live,
        &ranges,
    )?);
    db.close()?;
    super::common::remove_dir(&dir)?;
    let records = live.records();
    let alias = StaticAlias::build(&records)?;
    out.extend(static_phase(
        &ctx,
        STATIC_ALIAS,
        &alias,
        WSS,
        &live,
        &whole,
    )?);
    drop(alias);
    let isam = StaticIsam::build(&records, true)?;
    out.extend(static_phase(
        &ctx,
        STATIC_ISAM,
        &isam,
        WIRS,
        &live,
        &ranges,
    )?);
    Ok(out)
}

/// The suite's findings: sampling latency against the static ideals, insert throughput, the missing
/// baseline (Markdown).
pub fn analysis(cfg: &SuiteConfig, results: &[BenchResult]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Weighted sampling, {} records, k = {K} (ratios computed from the rows; latency = mean per query):\n",
        cfg.records
    );
    let _ = writeln!(s, "| comparison | measured | target | met |");
    let _ = writeln!(s, "|---|---|---|---|");
    goal_row(
        &mut s,
        &format!("WSS sampling latency, {DYNAMIZED} / {STATIC_ALIAS}"),
        latency_ratio(results, WSS, DYNAMIZED, STATIC_ALIAS),
        "≤ 1.5× (close to a static alias)",
        |r| r <= 1.5,
    );
    goal_row(
        &mut s,
        &format!("WIRS sampling latency, {DYNAMIZED} / {STATIC_ISAM} (weighted)"),
        latency_ratio(results, WIRS, DYNAMIZED, STATIC_ISAM),
        "≤ 1.5×",
        |r| r <= 1.5,
    );
    s.push('\n');
    super::irs::engine_table(&mut s, results, &[WSS, WIRS]);
    let _ = writeln!(
        s,
        "\n**Missing baseline:** the weighted AB-tree (Olken's method on an aggregate B+-tree with subtree \
         weight sums) is not measured: `strata-btree` keeps subtree counts only and cannot sample by weight. \
         The paper's headline comparisons for WSS (insert throughput against the AB-tree, sampling latency \
         against Olken's method) need that baseline."
    );
    s
}

/// The figures of the suite: sampling latency (WSS and WIRS, against the static ideals) and insert
/// throughput.
pub fn figures(results: &[BenchResult], dir: &Path) -> Result<Vec<Figure>> {
    if results.is_empty() {
        return Ok(Vec::new());
    }
    plot::prepare(dir)?;
    let mut figs = Vec::new();
    let bars = super::irs::sample_latency_bars(
        results,
        format!("Weighted sampling latency, k = {K}"),
        &[DYNAMIZED, STATIC_ALIAS, STATIC_ISAM],
        &[(WSS, "WSS (whole set)"), (WIRS, "WIRS (0.1% ranges)")],
    );
    if !bars.series.is_empty() {
        figs.push(plot::bars_figure(dir, "wss-sample", &bars)?);
    }
    let series = engine_bars(
        results,
        &[DYNAMIZED],
        &[(WSS, "in memory")],
        "insert",
        |r| r.ops_per_sec,
    );
    if !series.is_empty() {
        figs.push(plot::bars_figure(
            dir,
            "wss-insert",
            &Bars {
                title: "Weighted insert throughput, 5% deletes (no weighted AB-tree baseline)"
                    .into(),
                y_desc: "inserts + deletes per second".into(),
                log: false,
                unit: Unit::Rate,
                groups: vec!["in memory".into()],
                clusters: Vec::new(),
                series,
            },
        )?);
    }
    Ok(figs)
}
