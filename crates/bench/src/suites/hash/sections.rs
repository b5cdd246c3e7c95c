//! The report's sections for the thread sweep, the Zipf 0.8 variant, YCSB and recovery, each with the
//! seed's figures (`reference/hashing.md` §5, Optane, Mops/s or seconds) beside ours: only shapes and ratios
//! compare (ours are DRAM-backed, on a shared 2-core machine).

use super::analysis::{find, find_at, fmt, ratio, recovery_rows, times};
use super::recovery::{DASH_FIRST, DASH_OPEN, DASH_REPAIR};
use super::{CCEH, DASH, ELIMDA, PHASES, ycsb, zipf};
use crate::result::BenchResult;
use std::fmt::Write as _;

/// Seed Exp 2 (uniform), Mops/s at 1 / 2 / 4 threads: phase, system, figures.
const SEED_SWEEP: [(&str, &str, [f64; 3]); 10] = [
    ("insert", DASH, [1.080, 2.067, 3.541]),
    ("insert", ELIMDA, [3.923, 5.906, 8.581]),
    ("pos-search", DASH, [3.333, 5.646, 9.280]),
    ("pos-search", ELIMDA, [3.232, 6.388, 12.122]),
    ("neg-search", DASH, [3.335, 5.642, 9.313]),
    ("neg-search", ELIMDA, [4.671, 8.876, 16.607]),
    ("delete", DASH, [1.899, 3.599, 5.936]),
    ("delete", ELIMDA, [1.891, 3.799, 7.616]),
    ("insert", CCEH, [0.693, 1.332, 2.437]),
    ("pos-search", CCEH, [2.146, 4.352, 9.024]),
];
/// Seed Exp 1, zipfian column (skew unstated), Mops/s: insert / pos / neg / delete.
const SEED_ZIPF: [(&str, [f64; 4]); 3] = [
    (ELIMDA, [3.009, 3.520, 5.613, 1.617]),
    (DASH, [1.054, 3.336, 3.333, 1.608]),
    (CCEH, [0.589, 2.047, 0.713, 1.224]),
];
/// Seed Exp 3 (YCSB, uniform), Mops/s at 1 / 2 / 4 threads (A and B have no DASH row in the seed).
const SEED_YCSB: [(&str, &str, [f64; 3]); 10] = [
    ("ycsb-a", ELIMDA, [2.153, 4.168, 7.993]),
    ("ycsb-a", CCEH, [1.942, 3.613, 6.282]),
    ("ycsb-b", ELIMDA, [2.506, 5.062, 10.146]),
    ("ycsb-b", CCEH, [1.554, 3.214, 6.395]),
    ("ycsb-f", ELIMDA, [2.477, 4.508, 7.882]),
    ("ycsb-f", DASH, [1.361, 2.771, 4.812]),
    ("ycsb-f", CCEH, [0.732, 1.390, 2.746]),
    ("ycsb-d", ELIMDA, [2.330, 4.856, 9.456]),
    ("ycsb-d", DASH, [2.548, 4.557, 7.806]),
    ("ycsb-d", CCEH, [1.519, 3.088, 6.071]),
];
/// Seed Exp 10, ElimDA recovery seconds at 10 / 20 / 40 / 90 M items: threads, figures (0.318 s is the
/// seed's figure, not an approximation of 1/π).
#[allow(clippy::approx_constant)]
const SEED_RECOVERY: [(u32, [f64; 4]); 3] = [
    (1, [1.019, 1.701, 4.148, 11.999]),
    (2, [0.641, 1.107, 2.561, 6.831]),
    (4, [0.318, 0.604, 1.463, 4.437]),
];

fn seed3(v: Option<&[f64; 3]>) -> String {
    v.map_or("–".into(), |v| {
        format!("{:.3} / {:.3} / {:.3}", v[0], v[1], v[2])
    })
}

/// Thread counts present among `rows` of `workload`, ascending.
fn thread_counts(rows: &[BenchResult], workload: &str) -> Vec<u32> {
    let mut t: Vec<u32> = rows
        .iter()
        .filter(|r| r.workload == workload)
        .map(|r| r.threads)
        .collect();
    t.sort_unstable();
    t.dedup();
    t
}

/// A table of Mops/s per thread count for each (workload, engine), with the seed's 1 / 2 / 4 figures.
fn sweep_table(
    s: &mut String,
    rows: &[BenchResult],
    cells: &[(&str, &str)],
    seed: &[(&str, &str, [f64; 3])],
) {
    let counts = thread_counts(rows, cells.first().map_or("", |c| c.0));
    let head: Vec<String> = counts.iter().map(|t| format!("{t} thr")).collect();
    let _ = writeln!(
        s,
        "| workload | engine | {} | 2 ÷ 1 thr | seed 1 / 2 / 4 thr | seed 2 ÷ 1 |\n|---|---|{}---|---|---|",
        head.join(" | "),
        "---|".repeat(counts.len())
    );
    for &(w, e) in cells {
        let at = |t: u32| find_at(rows, e, w, t).map(|r| r.ops_per_sec / 1e6);
        if at(1).is_none() {
            continue;
        }
        let figures: Vec<String> = counts.iter().map(|&t| fmt(at(t), 3)).collect();
        let sd = seed.iter().find(|x| x.0 == w && x.1 == e).map(|x| &x.2);
        let _ = writeln!(
            s,
            "| {w} | {e} | {} | {} | {} | {} |",
            figures.join(" | "),
            times(ratio(at(2), at(1))),
            seed3(sd),
            times(sd.map(|v| v[1] / v[0]))
        );
    }
    s.push('\n');
}

/// The four sections, in order.
pub(super) fn sections(rows: &[BenchResult]) -> String {
    let mut s = String::new();
    s.push_str(
        "### Thread sweep (Exp 2, uniform; Mops/s)\n\nThe machine has 2 cores (shared with other work): counts \
         above 2 are oversubscribed. `cceh` has a single writer and is not swept.\n\n",
    );
    let cells: Vec<(&str, &str)> = PHASES
        .iter()
        .flat_map(|&(w, _)| [(w, ELIMDA), (w, DASH)])
        .collect();
    sweep_table(&mut s, rows, &cells, &SEED_SWEEP);
    zipf_section(&mut s, rows);
    s.push_str(
        "### YCSB (Exp 3; Zipf 0.99 requests, D: latest; Mops/s)\n\n`cceh` at one thread only (single \
         writer, driven through an uncontended mutex). The seed's A and B have no DASH row.\n\n",
    );
    let cells: Vec<(&str, &str)> = ycsb::WORKLOADS
        .iter()
        .flat_map(|&(w, _)| [(w, ELIMDA), (w, DASH), (w, CCEH)])
        .collect();
    sweep_table(&mut s, rows, &cells, &SEED_YCSB);
    recovery_section(&mut s, rows);
    s
}

fn zipf_section(s: &mut String, rows: &[BenchResult]) {
    s.push_str(
        "### Zipf 0.8 (Exp 1's zipfian column, one thread; Mops/s)\n\n| engine | insert | pos-search | \
         neg-search | delete | seed (zipfian, skew unstated) ins / pos / neg / del |\n|---|---|---|---|---|---|\n",
    );
    let tput = |e: &str, w: &str| find(rows, e, w).map(|r| r.ops_per_sec / 1e6);
    for (e, seed) in SEED_ZIPF {
        let figures: Vec<String> = zipf::WORKLOADS
            .iter()
            .map(|(w, _)| fmt(tput(e, w), 3))
            .collect();
        let _ = writeln!(
            s,
            "| {e} | {} | {:.3} / {:.3} / {:.3} / {:.3} |",
            figures.join(" | "),
            seed[0],
            seed[1],
            seed[2],
            seed[3]
        );
    }
    let ours: Vec<String> = zipf::WORKLOADS
        .iter()
        .map(|(w, _)| times(ratio(tput(ELIMDA, w), tput(DASH, w))))
        .collect();
    let seed: Vec<String> = (0..4)
        .map(|i| format!("{:.2}×", SEED_ZIPF[0].1[i] / SEED_ZIPF[1].1[i]))
        .collect();
    let _ = writeln!(
        s,
        "| **elimda ÷ dash** | {} | {} |\n",
        ours.join(" | "),
        seed.join(" / ")
    );
}

fn recovery_section(s: &mut String, rows: &[BenchResult]) {
    s.push_str(
        "### Recovery time vs items and threads (Exp 10)\n\nelimda: DRAM state dropped (unflushed D-buckets \
         only in the logs), rebuilt with `recover_with_threads`; median of 3.\n\n| items | threads | ms | ns per \
         item | 1 thr ÷ this |\n|---|---|---|---|---|\n",
    );
    let mut counts = thread_counts(rows, super::recovery::ELIMDA_WORKLOAD);
    counts.retain(|&t| t > 0);
    let one = recovery_rows(rows, 1);
    for &t in &counts {
        for r in recovery_rows(rows, t) {
            let base = one.iter().find(|o| o.records == r.records).map(|o| o.secs);
            let _ = writeln!(
                s,
                "| {} | {t} | {:.1} | {:.1} | {} |",
                r.records,
                r.secs * 1e3,
                r.secs * 1e9 / r.records.max(1) as f64,
                times(ratio(base, Some(r.secs)))
            );
        }
    }
    s.push_str(
        "\nSeed (ElimDA on Optane, seconds) at 10 / 20 / 40 / 90 M items:\n\n| threads | 10 M | 20 M | 40 M | \
         90 M | ns per item 10 M → 90 M |\n|---|---|---|---|---|---|\n",
    );
    for (t, v) in SEED_RECOVERY {
        let _ = writeln!(
            s,
            "| {t} | {:.3} | {:.3} | {:.3} | {:.3} | {:.0} → {:.0} |",
            v[0],
            v[1],
            v[2],
            v[3],
            v[0] * 1e9 / 10e6,
            v[3] * 1e9 / 90e6
        );
    }
    s.push_str(
        "\ndash, lazy recovery after a crash (dropped without a clean close), one thread:\n\n| items | open ms | \
         first 1,000 lookups ms | repair_all ms | elimda full recovery, 1 thr, ms |\n|---|---|---|---|---|\n",
    );
    for r in rows
        .iter()
        .filter(|r| r.engine == DASH && r.workload == DASH_OPEN)
    {
        let at = |w: &str| {
            rows.iter()
                .find(|x| x.engine == DASH && x.workload == w && x.records == r.records)
                .map(|x| x.secs * 1e3)
        };
        let full = one
            .iter()
            .find(|o| o.records == r.records)
            .map(|o| o.secs * 1e3);
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} |",
            r.records,
            fmt(at(DASH_OPEN), 3),
            fmt(at(DASH_FIRST), 3),
            fmt(at(DASH_REPAIR), 1),
            fmt(full, 1)
        );
    }
    s.push('\n');
}
