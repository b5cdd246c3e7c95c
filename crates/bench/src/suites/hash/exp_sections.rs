//! The report's sections for the parameter sweeps (Exp 11 collecting-log size, Exp 12 bucket sizes) and
//! the limited-bandwidth run (Exp 13), each with the seed's table (`reference/hashing.md` §5) beside ours.

use super::analysis::{find_at, fmt, ratio, times};
use super::limited::{CCEH_LIMITED, DASH_LIMITED, ELIMDA_LIMITED, READ_MISS_NS, WRITE_BANDWIDTH};
use super::params::{DBUCKET_SLOTS, LOG_LINES, dbucket_workload, log_workload, pbucket_workload};
use super::{CCEH, CCEH_MODEL, DASH, DASH_MODEL, ELIMDA, ELIMDA_MODEL, PHASES};
use crate::result::BenchResult;
use std::fmt::Write as _;

/// Seed Exp 11, Mops/s at 1 / 2 / 4 threads per log size (64 B lines).
const SEED_LOG: [(u64, [f64; 3]); 5] = [
    (1024, [4.063, 5.899, 7.964]),
    (2048, [4.040, 5.840, 8.185]),
    (4096, [4.080, 5.761, 8.035]),
    (8192, [4.061, 5.904, 8.176]),
    (16384, [3.935, 5.720, 7.375]),
];
/// Seed Exp 12, D-bucket bytes → insert / positive search Mops/s.
const SEED_DBUCKET: [(u64, [f64; 2]); 5] = [
    (32, [3.146, 3.280]),
    (64, [3.535, 3.261]),
    (128, [3.936, 3.265]),
    (256, [4.291, 3.223]),
    (512, [4.251, 3.203]),
];
/// Seed Exp 12, P-bucket KiB → insert / positive search Mops/s.
const SEED_PBUCKET: [(u64, [f64; 2]); 5] = [
    (1, [3.467, 3.533]),
    (2, [3.857, 3.426]),
    (4, [4.289, 3.206]),
    (8, [4.616, 2.756]),
    (16, [4.751, 2.394]),
];

/// Thread counts of `rows` of `engine` in `workload`, ascending.
fn counts(rows: &[BenchResult], engine: &str, workload: &str) -> Vec<u32> {
    let mut t: Vec<u32> = rows
        .iter()
        .filter(|r| r.engine == engine && r.workload == workload)
        .map(|r| r.threads)
        .collect();
    t.sort_unstable();
    t.dedup();
    t
}

/// D-bucket flushes per operation of a row (`page_writes`), and the share forced by log space.
fn flushes(r: Option<&BenchResult>) -> (String, String) {
    let per = r.and_then(|r| r.page_writes.map(|f| f as f64 / r.ops.max(1) as f64));
    let forced = r.and_then(|r| {
        ratio(
            r.io_writes.map(|f| f as f64),
            r.page_writes.map(|f| f as f64),
        )
    });
    (
        fmt(per, 3),
        forced.map_or("–".into(), |v| format!("{:.0} %", v * 100.0)),
    )
}

/// Exp 11 and Exp 12.
pub(super) fn param_sections(rows: &[BenchResult]) -> String {
    let mut s = String::new();
    let threads = counts(rows, ELIMDA, &log_workload(LOG_LINES[0]));
    let head: Vec<String> = threads.iter().map(|t| format!("{t} thr")).collect();
    let _ = writeln!(
        s,
        "### Collecting-log size (Exp 11; elimda inserts, Mops/s)\n\nEach log exactly this size (one per \
         thread, `fixed_log`), preload N then N/2 inserts. `growing` = the default (logs grow with the table: \
         16 records per bucket in all; the main `insert` rows). Flushes = D-bucket writes (whole XPLines) per \
         insert at 1 thread, and the share of them forced early by log space.\n\n| log | {} | flushes / insert | \
         forced | seed 1 / 2 / 4 thr |\n|---|{}---|---|---|",
        head.join(" | "),
        "---|".repeat(threads.len())
    );
    let line = |s: &mut String, name: String, workload: &str, seed: Option<&[f64; 3]>| {
        let figures: Vec<String> = threads
            .iter()
            .map(|&t| {
                fmt(
                    find_at(rows, ELIMDA, workload, t).map(|r| r.ops_per_sec / 1e6),
                    3,
                )
            })
            .collect();
        let (per, forced) = flushes(find_at(rows, ELIMDA, workload, 1));
        let seed = seed.map_or("–".into(), |v| {
            format!("{:.3} / {:.3} / {:.3}", v[0], v[1], v[2])
        });
        let _ = writeln!(
            s,
            "| {name} | {} | {per} | {forced} | {seed} |",
            figures.join(" | ")
        );
    };
    for (lines, seed) in SEED_LOG {
        let name = format!("{lines} lines ({} KiB)", lines * 64 / 1024);
        line(&mut s, name, &log_workload(lines), Some(&seed));
    }
    line(&mut s, "growing (default)".into(), PHASES[0].0, None);
    s.push_str(
        "\n### D- and P-bucket sizes (Exp 12; elimda, one thread, Mops/s)\n\nA D-bucket is written back when \
         it holds this many staged entries (16 B each; `dbucket_slots`); 15 entries fill a whole 256 B chunk \
         with its 16 B header, the default. Every write-back is one whole-XPLine write of the tail chunk \
         (committed entries rewritten from DRAM).\n\n| D-bucket | entries | insert | pos-search | flushes / \
         insert | seed insert / pos |\n|---|---|---|---|---|---|\n",
    );
    for (bytes, seed) in SEED_DBUCKET {
        let slots = DBUCKET_SLOTS.iter().find(|d| d.1 == bytes).map(|d| d.0);
        let at = |phase: &str| find_at(rows, ELIMDA, &dbucket_workload(bytes, phase), 1);
        let tput = |phase: &str| match slots {
            Some(_) => fmt(at(phase).map(|r| r.ops_per_sec / 1e6), 3),
            None => "–".into(),
        };
        let (per, _) = flushes(at("insert"));
        let _ = writeln!(
            s,
            "| {bytes} B | {} | {} | {} | {per} | {:.3} / {:.3} |",
            slots.map_or("not measured".into(), |n| n.to_string()),
            tput("insert"),
            tput("pos-search"),
            seed[0],
            seed[1]
        );
    }
    s.push_str(
        "\nNot measured: the 512 B D-bucket (it would stage into two chunks; the write path stages into the one \
         tail chunk).\n\nP-buckets (`pbucket_bytes`, recorded in the region): 4 / 8 / 16 / 32 / 64 home chunks of \
         15 slots (past 240 home slots, a DRAM bucket mirrors the rest in its extension); a chain continues in \
         up to 14 pool chunks either way. The default D-bucket (15 entries).\n\n| P-bucket | \
         home slots | insert | pos-search | flushes / insert | seed insert / pos |\n|---|---|---|---|---|---|\n",
    );
    for (kib, seed) in SEED_PBUCKET {
        let bytes = kib * 1024;
        let at = |phase: &str| find_at(rows, ELIMDA, &pbucket_workload(bytes, phase), 1);
        let tput = |phase: &str| fmt(at(phase).map(|r| r.ops_per_sec / 1e6), 3);
        let (per, _) = flushes(at("insert"));
        let _ = writeln!(
            s,
            "| {kib} KiB | {} | {} | {} | {per} | {:.3} / {:.3} |",
            bytes / 256 * 15,
            tput("insert"),
            tput("pos-search"),
            seed[0],
            seed[1]
        );
    }
    s.push('\n');
    let ins = |w: &str| find_at(rows, ELIMDA, w, 1).map(|r| r.ops_per_sec);
    // Throughput of `phase` with P-buckets of `bytes` ÷ with the default 4 KiB.
    let per_4k = |bytes: u64, phase: &str| {
        times(ratio(
            ins(&pbucket_workload(bytes, phase)),
            ins(&pbucket_workload(4096, phase)),
        ))
    };
    let _ = writeln!(
        s,
        "Ratios in this run: insert 32 B ÷ 256 B D-bucket {} (seed {:.2}×); 1 KiB ÷ 4 KiB P-bucket insert {} \
         (seed {:.2}×), pos-search {} (seed {:.2}×); 16 KiB ÷ 4 KiB P-bucket insert {} (seed {:.2}×), \
         pos-search {} (seed {:.2}×); log 1,024 ÷ 8,192 lines {} (seed {:.2}×).\n",
        times(ratio(
            ins(&dbucket_workload(32, "insert")),
            ins(&dbucket_workload(256, "insert"))
        )),
        SEED_DBUCKET[0].1[0] / SEED_DBUCKET[3].1[0],
        per_4k(1024, "insert"),
        SEED_PBUCKET[0].1[0] / SEED_PBUCKET[2].1[0],
        per_4k(1024, "pos-search"),
        SEED_PBUCKET[0].1[1] / SEED_PBUCKET[2].1[1],
        per_4k(16384, "insert"),
        SEED_PBUCKET[4].1[0] / SEED_PBUCKET[2].1[0],
        per_4k(16384, "pos-search"),
        SEED_PBUCKET[4].1[1] / SEED_PBUCKET[2].1[1],
        times(ratio(ins(&log_workload(1024)), ins(&log_workload(8192)))),
        SEED_LOG[0].1[0] / SEED_LOG[3].1[0],
    );
    s
}

/// Seed Exp 13 (limited PM bandwidth, setting and threads unstated), Mops/s: ins / pos / neg / del.
const SEED_LIMITED: [(&str, [f64; 4]); 3] = [
    (ELIMDA, [4.863, 23.041, 71.332, 5.618]),
    (DASH, [1.458, 5.727, 5.284, 1.691]),
    (CCEH, [1.554, 5.815, 2.205, 3.164]),
];

/// Exp 13.
pub(super) fn limited_section(rows: &[BenchResult]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "### Limited PM bandwidth (Exp 13; one thread, Mops/s)\n\nThe main phases on the Optane traffic model \
         (ADR, as the `*-adr-model` rows) charging real time: {READ_MISS_NS} ns busy-wait per XPBuffer read \
         miss, media writes paced at {:.1} GB/s (token bucket, 16 KiB burst). `÷ untimed` = this row ÷ the \
         engine's `*-adr-model` row (the same model without the waits): what the emulated latency and \
         bandwidth cost it. Media bytes per insert from the same run.\n\n| engine | insert | pos-search | \
         neg-search | delete | ÷ untimed ins / pos / neg / del | media read / write B per insert | seed ins / \
         pos / neg / del |\n|---|---|---|---|---|---|---|---|",
        WRITE_BANDWIDTH as f64 / 1e9
    );
    let tput = |e: &str, w: &str| find_at(rows, e, w, 1).map(|r| r.ops_per_sec);
    let engines = [
        (ELIMDA_LIMITED, ELIMDA_MODEL, ELIMDA),
        (DASH_LIMITED, DASH_MODEL, DASH),
        (CCEH_LIMITED, CCEH_MODEL, CCEH),
    ];
    for (limited, untimed, plain) in engines {
        let figures: Vec<String> = PHASES
            .iter()
            .map(|(w, _)| fmt(tput(limited, w).map(|v| v / 1e6), 3))
            .collect();
        let drop: Vec<String> = PHASES
            .iter()
            .map(|(w, _)| times(ratio(tput(limited, w), tput(untimed, w))))
            .collect();
        let ins = find_at(rows, limited, PHASES[0].0, 1);
        let per = |b: Option<u64>| ins.and_then(|r| b.map(|b| b as f64 / r.ops.max(1) as f64));
        let seed = SEED_LIMITED.iter().find(|x| x.0 == plain).map(|x| x.1);
        let _ = writeln!(
            s,
            "| {limited} | {} | {} | {} / {} | {} |",
            figures.join(" | "),
            drop.join(" / "),
            fmt(per(ins.and_then(|r| r.bytes_read)), 1),
            fmt(per(ins.and_then(|r| r.bytes_written)), 1),
            seed.map_or("–".into(), |v| format!(
                "{:.3} / {:.3} / {:.3} / {:.3}",
                v[0], v[1], v[2], v[3]
            ))
        );
    }
    let ours = |a: &str, b: &str| -> Vec<String> {
        PHASES
            .iter()
            .map(|(w, _)| times(ratio(tput(a, w), tput(b, w))))
            .collect()
    };
    let seed: Vec<String> = (0..4)
        .map(|i| format!("{:.2}×", SEED_LIMITED[0].1[i] / SEED_LIMITED[1].1[i]))
        .collect();
    let _ = writeln!(
        s,
        "| **elimda ÷ dash, limited** | {} | | | seed {} |\n| elimda ÷ dash, untimed model (`*-adr-model`) | {} \
         | | | |\n| elimda ÷ dash, eADR main rows (no model) | {} | | | |\n",
        ours(ELIMDA_LIMITED, DASH_LIMITED).join(" | "),
        seed.join(" / "),
        ours(ELIMDA_MODEL, DASH_MODEL).join(" | "),
        ours(ELIMDA, DASH).join(" | "),
    );
    s
}
