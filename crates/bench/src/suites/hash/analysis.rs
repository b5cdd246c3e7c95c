//! The suite's report: per-phase tables of the main run (one thread), the end state, the new experiments
//! (`sections`: thread sweep, zipf 0.8, YCSB, recovery, each beside the seed's table) and the goals,
//! measured from the same run.

use super::recovery::ELIMDA_WORKLOAD;
use super::rounds::insert_round_workload;
use super::{
    CCEH, CCEH_MODEL, DASH, DASH_MODEL, ELIMDA, ELIMDA_MODEL, HASHBROWN, PHASES, SuiteConfig,
};
use crate::result::BenchResult;
use std::fmt::Write as _;

const XPLINE: f64 = 256.0;

/// The 1-thread row of `engine` in `workload`.
pub(super) fn find<'a>(
    rows: &'a [BenchResult],
    engine: &str,
    workload: &str,
) -> Option<&'a BenchResult> {
    find_at(rows, engine, workload, 1)
}

/// The row of `engine` in `workload` at `threads` threads.
pub(super) fn find_at<'a>(
    rows: &'a [BenchResult],
    engine: &str,
    workload: &str,
    threads: u32,
) -> Option<&'a BenchResult> {
    rows.iter()
        .find(|r| r.engine == engine && r.workload == workload && r.threads == threads)
}

fn per_op(b: Option<u64>, ops: u64) -> Option<f64> {
    b.map(|b| b as f64 / ops.max(1) as f64)
}

pub(super) fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

/// A ratio as `1.23×`; `–` when undefined (both sides zero, e.g. the writes of a lookup phase).
pub(super) fn times(v: Option<f64>) -> String {
    v.map_or("–".into(), |v| format!("{v:.2}×"))
}

pub(super) fn fmt(v: Option<f64>, digits: usize) -> String {
    v.map_or("n/a".into(), |v| format!("{v:.digits$}"))
}

/// Media bytes per operation of `engine`'s model rows in `workload`: (read, write).
fn media(rows: &[BenchResult], engine: &str, workload: &str) -> (Option<f64>, Option<f64>) {
    find(rows, engine, workload).map_or((None, None), |r| {
        (per_op(r.bytes_read, r.ops), per_op(r.bytes_written, r.ops))
    })
}

/// Per-phase tables, the end state and the goals, measured.
pub fn analysis(_cfg: &SuiteConfig, rows: &[BenchResult]) -> String {
    let tput = |e: &str, w: &str| find(rows, e, w).map(|r| r.ops_per_sec);
    let mut s = String::new();
    for (w, _) in PHASES {
        let _ = writeln!(
            s,
            "### {w}\n\n| engine | Mops/s | p50 µs | p99 µs | media read B/op | media write B/op |\n|---|---|---|---|---|---|"
        );
        for (e, m) in [
            (ELIMDA, Some(ELIMDA_MODEL)),
            (DASH, Some(DASH_MODEL)),
            (CCEH, Some(CCEH_MODEL)),
            (HASHBROWN, None),
        ] {
            let Some(r) = find(rows, e, w) else { continue };
            let (rd, wr) = m.map_or((None, None), |m| media(rows, m, w));
            let _ = writeln!(
                s,
                "| {e} | {:.2} | {:.3} | {:.3} | {} | {} |",
                r.ops_per_sec / 1e6,
                r.p50_us,
                r.p99_us,
                fmt(rd, 1),
                fmt(wr, 1)
            );
        }
        let (er, ew) = media(rows, ELIMDA_MODEL, w);
        let (dr, dw) = media(rows, DASH_MODEL, w);
        let _ = writeln!(
            s,
            "| **elimda ÷ dash** | {} | | | {} | {} |\n",
            times(ratio(tput(ELIMDA, w), tput(DASH, w))),
            times(ratio(er, dr)),
            times(ratio(ew, dw))
        );
    }
    // The end state is what the last phase's rows carry (N live keys after the deletes).
    s.push_str("### End state (after delete: N live keys)\n\n| engine | load factor | DRAM B/key | PM B/key |\n|---|---|---|---|\n");
    for r in rows
        .iter()
        .filter(|r| r.workload == "delete" && r.threads == 1)
    {
        let live = r.records.max(1) as f64;
        let _ = writeln!(
            s,
            "| {} | {} | {:.1} | {:.1} |",
            r.engine,
            fmt(r.load_factor, 3),
            r.rss_bytes.unwrap_or(0) as f64 / live,
            r.disk_bytes as f64 / live
        );
    }
    s.push('\n');
    s.push_str(&super::sections::sections(rows));
    s.push_str(&super::exp_sections::param_sections(rows));
    s.push_str(&super::values::section(rows));
    s.push_str(&super::exp_sections::limited_section(rows));
    s.push_str("### Goals (issue 17, one run)\n\n| goal | measured | met |\n|---|---|---|\n");
    let mut goal = |what: &str, v: Option<f64>, unit: &str, ok: fn(f64) -> bool| {
        let met = match v {
            Some(v) if ok(v) => "met",
            Some(_) => "not met",
            None => "n/a",
        };
        let _ = writeln!(s, "| {what} | {}{unit} | {met} |", fmt(v, 2));
    };
    let r = |w: &str| ratio(tput(ELIMDA, w), tput(DASH, w));
    goal("insert throughput ≥ 2.5× dash", r("insert"), "×", |v| {
        v >= 2.5
    });
    goal(
        "positive search ≥ 1.0× dash",
        r("pos-search"),
        "×",
        |v| v >= 1.0,
    );
    goal(
        "negative search ≥ 1.2× dash",
        r("neg-search"),
        "×",
        |v| v >= 1.2,
    );
    goal("delete ≥ 1.0× dash", r("delete"), "×", |v| v >= 1.0);
    let total = |e: &str, write: bool| -> Option<f64> {
        PHASES.iter().try_fold(0.0, |acc, (w, _)| {
            let r = find(rows, e, w)?;
            Some(acc + (if write { r.bytes_written } else { r.bytes_read })? as f64)
        })
    };
    goal(
        "media writes, the four phases, ≤ 0.5× dash",
        ratio(total(ELIMDA_MODEL, true), total(DASH_MODEL, true)),
        "×",
        |v| v <= 0.5,
    );
    goal(
        "media reads, the four phases, ≤ 0.2× dash",
        ratio(total(ELIMDA_MODEL, false), total(DASH_MODEL, false)),
        "×",
        |v| v <= 0.2,
    );
    let xplines_read = |phase: &str| media(rows, ELIMDA_MODEL, phase).0.map(|b| b / XPLINE);
    goal(
        "elimda media reads per positive search ≤ 1 XPLine (256 B)",
        xplines_read("pos-search"),
        " XPLines",
        |v| v <= 1.0,
    );
    goal(
        "elimda media reads per negative search = 0",
        xplines_read("neg-search"),
        " XPLines",
        |v| v == 0.0,
    );
    goal(
        "positive search ≥ 0.5× hashbrown",
        ratio(tput(ELIMDA, "pos-search"), tput(HASHBROWN, "pos-search")),
        "×",
        |v| v >= 0.5,
    );
    let ins = |t: u32| find_at(rows, ELIMDA, "insert", t).map(|r| r.ops_per_sec);
    goal(
        "elimda inserts, 2 threads ≥ 1.8× 1 thread",
        ratio(ins(2), ins(1)),
        "×",
        |v| v >= 1.8,
    );
    goal(
        "elimda recovery linear in items: time per item within ±30 % of its mean over the sizes (1 thread)",
        recovery_deviation(rows, 1).map(|d| d * 100.0),
        " % largest deviation",
        |v| v <= 30.0,
    );
    let largest = |t: u32| {
        recovery_rows(rows, t)
            .into_iter()
            .max_by_key(|r| r.records)
            .map(|r| r.secs)
    };
    goal(
        "elimda recovery of N items faster with 2 threads than 1 (1-thread time ÷ 2-thread time > 1)",
        ratio(largest(1), largest(2)),
        "×",
        |v| v > 1.0,
    );
    let at = |t: u32| find_at(rows, ELIMDA, "insert", t);
    let cpu = |t: u32| at(t).and_then(|r| r.thread_cpu_us);
    let wait = |t: u32| at(t).and_then(|r| r.run_wait_us);
    let _ = writeln!(
        s,
        "\nelimda inserts, CPU time per insert summed over the threads (schedstat): {} µs at 1 thread, {} µs at \
         2 threads; run-queue wait per insert {} µs and {} µs. With two free cores, 2 threads would reach \
         2 × (CPU at 1 ÷ CPU at 2) = {} of 1 thread; the rest of the gap is cores the threads did not get. \
         Round by round (the goal rows take each engine's fastest round): elimda ÷ dash inserts at 1 thread \
         {}; elimda inserts at 2 threads ÷ 1 thread {}.\n",
        fmt(cpu(1), 3),
        fmt(cpu(2), 3),
        fmt(wait(1), 3),
        fmt(wait(2), 3),
        times(ratio(cpu(1), cpu(2)).map(|r| 2.0 * r)),
        per_round(rows, (ELIMDA, 1), (DASH, 1)),
        per_round(rows, (ELIMDA, 2), (ELIMDA, 1)),
    );
    let _ = writeln!(
        s,
        "Like for like (huge pages): each round's inserts with the process's AnonHugePages at the end of the \
         phase (the elimda bucket array is advised for huge pages; the kernel may not grant them) — elimda 1 \
         thread {}; elimda 2 threads {}; dash 1 thread {}. elimda 2 threads ÷ 1 thread over the rounds: {}.\n",
        round_detail(rows, ELIMDA, 1),
        round_detail(rows, ELIMDA, 2),
        round_detail(rows, DASH, 1),
        spread(&round_ratios(rows, (ELIMDA, 2), (ELIMDA, 1))),
    );
    s
}

/// Each round's insert row of `engine` at `threads` threads: Mops/s, CPU µs per insert, huge-page MiB.
fn round_detail(rows: &[BenchResult], engine: &str, threads: u32) -> String {
    let parts: Vec<String> = (1..)
        .map_while(|round| find_at(rows, engine, &insert_round_workload(round), threads))
        .map(|r| {
            let array = r.array_huge_share.map_or(String::new(), |v| {
                format!(", bucket array {:.0} % huge", v * 100.0)
            });
            format!(
                "{} Mops/s, {} µs CPU, {} MiB huge{array}",
                fmt(Some(r.ops_per_sec / 1e6), 2),
                fmt(r.thread_cpu_us, 3),
                super::thp::mib(r.huge_page_bytes)
            )
        })
        .collect();
    format!("[{}]", parts.join("; "))
}

/// The ratios of `a`'s to `b`'s insert throughput in each round.
fn round_ratios(rows: &[BenchResult], a: (&str, u32), b: (&str, u32)) -> Vec<f64> {
    let rate = |(engine, threads): (&str, u32), round: usize| {
        find_at(rows, engine, &insert_round_workload(round), threads).map(|r| r.ops_per_sec)
    };
    (1..)
        .map_while(|round| ratio(rate(a, round), rate(b, round)))
        .collect()
}

/// `median (min – max, n rounds)` of ratios.
fn spread(ratios: &[f64]) -> String {
    let mut v = ratios.to_vec();
    v.sort_by(f64::total_cmp);
    match (v.first(), v.last()) {
        (Some(&lo), Some(&hi)) => format!(
            "median {} (min {}, max {}, {} rounds)",
            times(Some(v[v.len() / 2])),
            times(Some(lo)),
            times(Some(hi)),
            v.len()
        ),
        _ => "–".to_string(),
    }
}

/// The ratios of `a`'s to `b`'s insert throughput (engine, threads) in each round, as `[2.41×, 2.55×]`.
fn per_round(rows: &[BenchResult], a: (&str, u32), b: (&str, u32)) -> String {
    let ratios: Vec<String> = round_ratios(rows, a, b)
        .into_iter()
        .map(|v| times(Some(v)))
        .collect();
    format!("[{}]", ratios.join(", "))
}

/// ElimDA's recovery rows at `threads` threads, one per size.
pub(super) fn recovery_rows(rows: &[BenchResult], threads: u32) -> Vec<&BenchResult> {
    rows.iter()
        .filter(|r| r.engine == ELIMDA && r.workload == ELIMDA_WORKLOAD && r.threads == threads)
        .collect()
}

/// ElimDA's recovery time per item at `threads` threads: the largest relative deviation of a size's value
/// from the mean over the sizes (0 = exactly linear).
pub(super) fn recovery_deviation(rows: &[BenchResult], threads: u32) -> Option<f64> {
    let per_item: Vec<f64> = recovery_rows(rows, threads)
        .iter()
        .map(|r| r.secs / r.records.max(1) as f64)
        .collect();
    if per_item.len() < 2 {
        return None;
    }
    let mean = per_item.iter().sum::<f64>() / per_item.len() as f64;
    per_item
        .iter()
        .map(|v| (v / mean - 1.0).abs())
        .reduce(f64::max)
}
