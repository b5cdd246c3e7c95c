//! # The `wss` suite
//!
//! Weighted sampling on the weighted dynamized index (`strata-dynamized` with `DynOptions { weighted: true
//! }`, WIRS shards) against the paper's baseline, the weighted AB-tree (`weighted-ab-tree`), and static
//! ideals: Rumbaugh & Xie's weighted experiments at this machine's scale. Each engine gets one load of N =
//! `--records` (default 2 000 000) weighted records by the protocol of `suites::sampling` (weights are
//! Pareto(α = 1.5) integers from 1 to 100 000; 10% warm-up; inserts with 5% deletes interleaved), then:
//!
//! 1. `wss`: the `insert` row of the load, and Q = `--ops` (default 1000) weighted set sampling queries of
//!    k = 1000 over the whole set (`sample` rows); `static-alias`, one alias table over every live record,
//!    answers the same queries (the query-latency ideal of WSS).
//! 2. `wirs`: Q weighted range sampling queries of k = 1000 over 0.1% of the live records on the same
//!    database; `static-isam` built with weights (prefix sums, one binary search per draw) answers the same
//!    queries.
//!
//! The baseline, `weighted-ab-tree` ([`crate::driver::WeightedAbTree`]), is an in-memory aggregate B+-tree
//! (fanout 64) whose inner nodes keep each child's record count and weight sum; every sample is an
//! independent root-to-leaf descent choosing children in proportion to their weight sums (Olken's method),
//! and a range sample first takes the prefix weights before `lo` and up to `hi`. It gets exactly the
//! dynamized index's load — the same keys, weights and delete victims (the writers' random choices are
//! seeded by the run and the workload; the suite checks that both end with the same live keys) — and answers
//! the same WSS and WIRS queries. It is not in the general engine list (`--engines`): the suite builds it
//! itself whenever it runs. The analysis posts the dynamized index's sampling latency and insert throughput
//! against it: sampling latency ≤ 0.5× (issue 18's goal for WSS and WIRS), and insert throughput against the
//! target the seed's issue states for IRS (≥ 2×), for reference.
//!
//! Every sample of every engine and ideal is checked: live, in range, its key's value, and over all samples
//! the mean sampled weight must be Σw²/Σw of the queries' ranges within 6 standard deviations.

use super::SuiteConfig;
use super::common::{Ctx, verify};
use super::irs::{
    BTREE, DYNAMIZED, STATIC_ISAM, colour_of, engine_bars, find, goal_row, latency_ratio,
    static_phase, throughput_ratio,
};
use super::sampling::{K, LiveSet, Protocol, range_queries, whole_set_queries};
use crate::driver::{Engine, StaticAlias, StaticIsam, StrataDynamized, WeightedAbTree};
use crate::error::{BenchError, Result};
use crate::plot::{self, Bars, Figure, Series, Unit};
use crate::result::BenchResult;
use std::fmt::Write as _;
use std::path::Path;
use strata::options::{DynOptions, RuntimeOptions};

pub const NAME: &str = "wss";
pub const DESCRIPTION: &str = "weighted set sampling (k = 1000, whole set) and weighted range sampling (0.1%) on the weighted dynamized index vs the weighted AB-tree (aggregate B+-tree, Olken's method), a static alias table and a weighted static ISAM; insert throughput with 5% deletes against the weighted AB-tree";
pub const DEFAULT_RECORDS: u64 = 2_000_000;
/// Queries per workload when `--ops` is not given.
pub const DEFAULT_QUERIES: u64 = 1000;

pub const STATIC_ALIAS: &str = "static-alias";
/// The paper's baseline: an aggregate B+-tree with subtree weight sums, sampled by Olken's method.
pub const AB_TREE: &str = "weighted-ab-tree";
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
            "One weighted load of {} records per engine: keys are distinct uniformly random u64s with checkable \
             u64 values and Pareto(α = {}) integer weights from 1 to {}; the first 10% are an untimed warm-up, \
             the rest are inserted with 5% deletes interleaved (victims: uniformly random live keys); the \
             `insert` row of `{WSS}` counts inserts plus deletes. Engines: `{DYNAMIZED}` with {}, then \
             `{AB_TREE}` with exactly the same load (the same keys, weights and delete victims: the writer's \
             random choices are seeded by the run and the workload; both must end with the same live keys).",
            cfg.records,
            super::sampling::PARETO_ALPHA,
            super::sampling::MAX_WEIGHT,
            StrataDynamized::new(weighted_options(), RuntimeOptions::default()).describe(),
        ),
        format!(
            "`{WSS}`: {q} queries of k = {K} weighted samples over the whole set, answered by both engines; \
             `{STATIC_ALIAS}` (one Walker/Vose alias table over every live record, built after the load) \
             answers the same number of queries. `{WIRS}`: {q} queries of k = {K} weighted samples over ranges \
             of 0.1% of the live records at random positions, the same ranges for both engines; \
             `{STATIC_ISAM}` (one ISAM shard with weight prefix sums) answers the same ranges. Every engine and \
             ideal hands samples over by visitor, without allocating per sample."
        ),
        "Checks: every sample is live, in its range and carries its key's value; over all samples of a phase \
         the mean sampled weight must equal Σw²/Σw of the queried ranges within 6 standard deviations (a \
         uniform sampler is far off); a wrong engine aborts the run."
            .into(),
        format!(
            "Baseline `{AB_TREE}`, the paper's weighted AB-tree (written for this lab; not an engine of \
             `--engines`, the suite always builds it): {}. A whole-set sample draws u uniformly below the total \
             weight and descends by prefix weight; a range sample first takes the prefix weights before `lo` \
             and up to `hi` (one descent each), then draws u uniformly between them per sample. Like \
             `{DYNAMIZED}` here it holds everything in memory with no memory budget; unlike it, it has no WAL — \
             `{DYNAMIZED}` logs every write to Strata's WAL with durability `{}`, so the insert ratio includes \
             that cost.",
            WeightedAbTree.settings(&cfg.engine_options()),
            cfg.durability.name(),
        ),
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
            "the {NAME} suite needs the {DYNAMIZED} engine (it builds its {AB_TREE} baseline itself)"
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
    out.extend(ab_tree_phases(cfg, &p, &live, &whole, &ranges)?);
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

/// The weighted AB-tree's rows: the load of `p` (which must leave the live keys of `live`, the dynamized
/// index's), then the WSS queries `whole` and the WIRS queries `ranges`.
fn ab_tree_phases(
    cfg: &SuiteConfig,
    p: &Protocol,
    live: &LiveSet,
    whole: &[super::sampling::Query],
    ranges: &[super::sampling::Query],
) -> Result<Vec<BenchResult>> {
    let engine = WeightedAbTree;
    let mut ctx = Ctx::new(NAME, cfg, &engine);
    ctx.opts.cache_bytes = 0;
    let dir = cfg.data_dir.join(AB_TREE).join("weighted");
    let db = ctx.create(&dir)?;
    let (mut out, keys) = super::sampling::load(&ctx, db.as_ref(), &dir, WSS, 1, p)?;
    verify(keys == live.keys, || {
        format!(
            "{AB_TREE}: the load left {} live keys, not the {} of {DYNAMIZED}'s identical load",
            keys.len(),
            live.keys.len()
        )
    })?;
    drop(keys);
    for (workload, queries) in [(WSS, whole), (WIRS, ranges)] {
        out.extend(super::sampling::sample_phase(
            &ctx,
            AB_TREE,
            db.as_ref(),
            &dir,
            workload,
            live,
            queries,
        )?);
    }
    db.close()?;
    super::common::remove_dir(&dir)?;
    Ok(out)
}

/// The suite's findings: sampling latency and insert throughput against the weighted AB-tree, sampling
/// latency against the static ideals (Markdown).
pub fn analysis(cfg: &SuiteConfig, results: &[BenchResult]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Weighted sampling, {} records, k = {K} (ratios computed from the rows; latency = mean per query):\n",
        cfg.records
    );
    let _ = writeln!(s, "| comparison | measured | target | met |");
    let _ = writeln!(s, "|---|---|---|---|");
    let irs_goal = |g: &str| format!("{g} (IRS goal, for reference)");
    goal_row(
        &mut s,
        &format!("WSS sampling latency, {DYNAMIZED} / {AB_TREE}"),
        latency_ratio(results, WSS, DYNAMIZED, AB_TREE),
        "≤ 0.5× (issue 18)",
        |r| r <= 0.5,
    );
    goal_row(
        &mut s,
        &format!("WIRS sampling latency, {DYNAMIZED} / {AB_TREE}"),
        latency_ratio(results, WIRS, DYNAMIZED, AB_TREE),
        "≤ 0.5× (issue 18)",
        |r| r <= 0.5,
    );
    goal_row(
        &mut s,
        &format!(
            "insert throughput (5% deletes; the one load WSS and WIRS share), {DYNAMIZED} / {AB_TREE}"
        ),
        throughput_ratio(results, WSS, DYNAMIZED, AB_TREE),
        &irs_goal("≥ 2×"),
        |r| r >= 2.0,
    );
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
    let _ = writeln!(
        s,
        "\nSampling latency against `{AB_TREE}`: issue 18's goal for WSS and WIRS (≤ 0.5×). Insert \
         throughput: the IRS goal (≥ 2× the AB-tree), for reference only (informational: `met` says whether \
         the IRS target would be reached)."
    );
    s.push('\n');
    super::irs::engine_table(&mut s, results, &[WSS, WIRS]);
    if let Some(r) = find(results, AB_TREE, WSS, "insert", 1) {
        let _ = writeln!(
            s,
            "\n`{AB_TREE}` (the paper's baseline: an in-memory aggregate B+-tree of fanout 64 with per-child \
             record counts and weight sums; each sample is one root-to-leaf descent, Olken's method) was {} \
             levels high after the load of {} records. It keeps no WAL, while every write of `{DYNAMIZED}` \
             goes through Strata's WAL (durability `{}`).",
            r.height.map_or_else(|| "?".into(), |h| h.to_string()),
            r.records,
            cfg.durability.name(),
        );
    }
    s
}

/// The figures of the suite: sampling latency (WSS and WIRS, against the weighted AB-tree and the static
/// ideals) and insert throughput (against the weighted AB-tree).
pub fn figures(results: &[BenchResult], dir: &Path) -> Result<Vec<Figure>> {
    if results.is_empty() {
        return Ok(Vec::new());
    }
    plot::prepare(dir)?;
    let mut figs = Vec::new();
    let mut bars = super::irs::sample_latency_bars(
        results,
        format!("Weighted sampling latency, k = {K}"),
        &[DYNAMIZED, AB_TREE, STATIC_ALIAS, STATIC_ISAM],
        &[(WSS, "WSS (whole set)"), (WIRS, "WIRS (0.1% ranges)")],
    );
    ab_tree_colour(&mut bars.series);
    if !bars.series.is_empty() {
        figs.push(plot::bars_figure(dir, "wss-sample", &bars)?);
    }
    let mut series = engine_bars(
        results,
        &[DYNAMIZED, AB_TREE],
        &[(WSS, "in memory")],
        "insert",
        |r| r.ops_per_sec,
    );
    ab_tree_colour(&mut series);
    if !series.is_empty() {
        figs.push(plot::bars_figure(
            dir,
            "wss-insert",
            &Bars {
                title: "Weighted insert throughput, 5% deletes".into(),
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

/// Draws the weighted AB-tree in the colour of the `irs` suite's AB-tree (`strata-btree`, which has no rows
/// here): the AB-tree baseline looks the same in both suites' figures and stands apart from
/// `strata-dynamized`.
fn ab_tree_colour(series: &mut [Series]) {
    for s in series.iter_mut().filter(|s| s.name == AB_TREE) {
        s.colour = colour_of(BTREE);
    }
}
