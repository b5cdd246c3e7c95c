//! The `irs` suite's figures.

use super::*;

/// Colour index of a series, the same in every figure of the sampling suites.
pub(crate) fn colour_of(series: &str) -> usize {
    [
        BTREE,
        DYNAMIZED,
        STATIC_ISAM,
        "static-alias",
        THROTTLED_SERIES,
    ]
    .iter()
    .position(|s| *s == series)
    .unwrap_or(5)
}

/// Bars of `f(row)` per (group = workload) for each engine of `engines`, op `op` at one thread.
pub(crate) fn engine_bars(
    results: &[BenchResult],
    engines: &[&str],
    groups: &[(&str, &str)],
    op: &str,
    f: fn(&BenchResult) -> f64,
) -> Vec<Series> {
    engines
        .iter()
        .filter_map(|e| {
            let values: Vec<Option<f64>> = groups
                .iter()
                .map(|(w, _)| find(results, e, w, op, 1).map(f))
                .collect();
            values.iter().any(Option::is_some).then(|| Series {
                name: e.to_string(),
                colour: colour_of(e),
                values,
            })
        })
        .collect()
}

/// Latency statistics shown per query in the sampling figures.
pub(crate) type Stat = (&'static str, fn(&BenchResult) -> f64);
pub(crate) const LATENCY_STATS: [Stat; 3] = [
    ("mean", |r| r.mean_us),
    ("p50", |r| r.p50_us),
    ("p99", |r| r.p99_us),
];

/// Bars of sampling latency statistics, a cluster per (workload, label), a bar per engine.
pub(crate) fn sample_latency_bars(
    results: &[BenchResult],
    title: String,
    engines: &[&str],
    clusters: &[(&str, &str)],
) -> Bars {
    let series = engines
        .iter()
        .filter_map(|e| {
            let values: Vec<Option<f64>> = clusters
                .iter()
                .flat_map(|(w, _)| {
                    let row = find(results, e, w, "sample", 1);
                    LATENCY_STATS.iter().map(move |(_, f)| row.map(f))
                })
                .collect();
            values.iter().any(Option::is_some).then(|| Series {
                name: e.to_string(),
                colour: colour_of(e),
                values,
            })
        })
        .collect();
    Bars {
        title,
        y_desc: format!("latency per query of k = {K} (log scale)"),
        log: true,
        unit: Unit::Latency,
        groups: clusters
            .iter()
            .flat_map(|_| LATENCY_STATS.iter().map(|(n, _)| n.to_string()))
            .collect(),
        clusters: clusters
            .iter()
            .map(|(_, label)| (label.to_string(), LATENCY_STATS.len()))
            .collect(),
        series,
    }
}

/// The figures of the suite (see the module doc of [`crate::plot`]): insert throughput, sampling latency,
/// thread scaling, insert tail latency, one figure per sweep.
pub fn figures(results: &[BenchResult], dir: &Path) -> Result<Vec<Figure>> {
    if results.is_empty() {
        return Ok(Vec::new());
    }
    plot::prepare(dir)?;
    let mut figs = Vec::new();
    let places = [(MEMORY, "in memory"), (DISK, "on disk")];
    let series = engine_bars(results, &[BTREE, DYNAMIZED], &places, "insert", |r| {
        r.ops_per_sec
    });
    if !series.is_empty() {
        let log = plot::spans_decades(
            series
                .iter()
                .flat_map(|s| s.values.iter().flatten().copied()),
        );
        figs.push(plot::bars_figure(
            dir,
            "irs-insert",
            &Bars {
                title: "Insert throughput, 5% deletes".into(),
                y_desc: if log {
                    "inserts + deletes per second (log scale)".into()
                } else {
                    "inserts + deletes per second".into()
                },
                log,
                unit: Unit::Rate,
                groups: places.iter().map(|p| p.1.to_string()).collect(),
                clusters: Vec::new(),
                series,
            },
        )?);
    }
    let bars = sample_latency_bars(
        results,
        format!("IRS sampling latency, k = {K}, 0.1% selectivity"),
        &[BTREE, DYNAMIZED, STATIC_ISAM],
        &places,
    );
    if !bars.series.is_empty() {
        figs.push(plot::bars_figure(dir, "irs-sample", &bars)?);
    }
    if let Some(lines) = thread_lines(results) {
        figs.push(plot::lines_figure(dir, "irs-threads", &lines)?);
    }
    let tails: Vec<(&str, &str, &str)> = [
        (BTREE, MEMORY, BTREE),
        (DYNAMIZED, MEMORY, DYNAMIZED),
        (DYNAMIZED, THROTTLED, THROTTLED_SERIES),
    ]
    .into_iter()
    .filter(|(e, w, _)| find(results, e, w, "insert", 1).is_some())
    .collect();
    if !tails.is_empty() {
        type Q = (&'static str, fn(&BenchResult) -> f64);
        let stats: [Q; 4] = [
            ("p50", |r| r.p50_us),
            ("p99", |r| r.p99_us),
            ("p99.9", |r| r.p999_us),
            ("max", |r| r.max_us),
        ];
        figs.push(plot::bars_figure(
            dir,
            "irs-tail",
            &Bars {
                title: "Insert tail latency in memory, with and without throttling".into(),
                y_desc: "latency per insert or delete (log scale)".into(),
                log: true,
                unit: Unit::Latency,
                groups: stats.iter().map(|q| q.0.to_string()).collect(),
                clusters: Vec::new(),
                series: tails
                    .iter()
                    .map(|(e, w, name)| {
                        let r = find(results, e, w, "insert", 1).expect("filtered");
                        Series {
                            name: name.to_string(),
                            colour: colour_of(name),
                            values: stats.iter().map(|q| Some((q.1)(r))).collect(),
                        }
                    })
                    .collect(),
            },
        )?);
    }
    for (prefix, what) in SWEEPS {
        if let Some(lines) = sweep_lines(results, prefix, what) {
            let stem = prefix.trim_end_matches('-');
            figs.push(plot::lines_figure(dir, stem, &lines)?);
        }
    }
    Ok(figs)
}

/// Insert throughput and p99 latency against writer threads, one line per engine.
fn thread_lines(results: &[BenchResult]) -> Option<Lines> {
    let mut counts: Vec<u32> = results
        .iter()
        .filter(|r| r.workload == THREADS)
        .map(|r| r.threads)
        .collect();
    counts.sort_unstable();
    counts.dedup();
    if counts.is_empty() {
        return None;
    }
    let engines: Vec<&str> = [BTREE, DYNAMIZED]
        .into_iter()
        .filter(|e| {
            results
                .iter()
                .any(|r| r.workload == THREADS && r.engine == *e)
        })
        .collect();
    let line = |f: fn(&BenchResult) -> f64| -> Vec<(usize, Vec<(usize, f64)>)> {
        engines
            .iter()
            .map(|e| {
                let pts = counts
                    .iter()
                    .enumerate()
                    .filter_map(|(i, t)| Some((i, f(find(results, e, THREADS, "insert", *t)?))))
                    .collect();
                (colour_of(e), pts)
            })
            .collect()
    };
    let categories: Vec<String> = counts.iter().map(u32::to_string).collect();
    let p99 = line(|r| r.p99_us);
    Some(Lines {
        title: "Insert thread scaling, 5% deletes, in memory".into(),
        panels: vec![
            Panel {
                caption: "insert throughput".into(),
                x_desc: "writer threads".into(),
                categories: categories.clone(),
                y_desc: "inserts + deletes per second".into(),
                unit: Unit::Rate,
                log: false,
                lines: line(|r| r.ops_per_sec),
            },
            Panel {
                caption: "insert p99 latency".into(),
                x_desc: "writer threads".into(),
                categories,
                y_desc: "latency (log scale)".into(),
                unit: Unit::Latency,
                log: true,
                lines: p99,
            },
        ],
        legend: engines
            .iter()
            .map(|e| (e.to_string(), colour_of(e)))
            .collect(),
    })
}

/// Insert throughput and sampling latency against the swept parameter.
fn sweep_lines(results: &[BenchResult], prefix: &str, what: &str) -> Option<Lines> {
    let workloads = first_seen(
        results
            .iter()
            .filter(|r| r.engine == DYNAMIZED && r.workload.starts_with(prefix))
            .map(|r| r.workload.as_str()),
    );
    if workloads.is_empty() {
        return None;
    }
    let point = |op: &str, f: fn(&BenchResult) -> f64| -> Vec<(usize, f64)> {
        workloads
            .iter()
            .enumerate()
            .filter_map(|(i, w)| Some((i, f(find(results, DYNAMIZED, w, op, 1)?))))
            .collect()
    };
    let latency = point("sample", |r| r.mean_us);
    let log = plot::spans_decades(latency.iter().map(|p| p.1));
    let categories: Vec<String> = workloads
        .iter()
        .map(|w| w[prefix.len()..].to_string())
        .collect();
    let c = colour_of(DYNAMIZED);
    Some(Lines {
        title: format!("Sweep of the {what}"),
        panels: vec![
            Panel {
                caption: "insert throughput".into(),
                x_desc: what.into(),
                categories: categories.clone(),
                y_desc: "inserts + deletes per second".into(),
                unit: Unit::Rate,
                log: false,
                lines: vec![(c, point("insert", |r| r.ops_per_sec))],
            },
            Panel {
                caption: format!("sampling latency, k = {K}"),
                x_desc: what.into(),
                categories,
                y_desc: if log {
                    "mean latency per query (log scale)".into()
                } else {
                    "mean latency per query".into()
                },
                unit: Unit::Latency,
                log,
                lines: vec![(c, latency)],
            },
        ],
        legend: vec![(DYNAMIZED.to_string(), c)],
    })
}
