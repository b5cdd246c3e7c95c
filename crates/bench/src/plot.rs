//! # Figures of a benchmark run
//!
//! [`write_figures`] turns a run's rows into SVG and PNG files (the same drawing code renders both; text uses
//! the DejaVu Sans font embedded by the `dejavu` crate, so no system font library is needed):
//!
//! * `throughput`: grouped bars of throughput per workload, one bar per engine (a workload's throughput is
//!   all its operations over the phase's time, at the smallest thread count run);
//! * `latency-<workload>`: for each workload, p50 / p99 / p99.9 latency per operation and engine, log scale;
//! * `threads`: throughput against thread count, one small chart per workload that ran at two or more
//!   thread counts, one line per engine.
//!
//! Every engine keeps one colour in every figure (order of first appearance).

use crate::error::{BenchError, Result};
use crate::result::BenchResult;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontTransform;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::{Path, PathBuf};
use std::sync::Once;

/// Width and height of every figure, in pixels.
pub const SIZE: (u32, u32) = (1000, 600);
const FONT: &str = "sans-serif";

/// One written figure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Figure {
    pub title: String,
    pub svg: PathBuf,
    pub png: PathBuf,
}

/// Colours of engines 0, 1, 2, … (a colour-blind-friendly palette, then repeats).
const COLOURS: [RGBColor; 8] = [
    RGBColor(0, 114, 178),
    RGBColor(230, 159, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(86, 180, 233),
    RGBColor(213, 94, 0),
    RGBColor(120, 120, 120),
    RGBColor(240, 228, 66),
];

fn colour(i: usize) -> RGBColor {
    COLOURS[i % COLOURS.len()]
}

fn register_fonts() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The embedded fonts are valid TrueType files; should registration fail anyway, text is skipped by
        // the backends rather than breaking the run.
        let _ = plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular());
        let _ = plotters::style::register_font(FONT, FontStyle::Bold, dejavu::sans::bold());
    });
}

fn first_seen<'a>(items: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut out: Vec<&str> = Vec::new();
    for s in items {
        if !out.contains(&s) {
            out.push(s);
        }
    }
    out
}

/// A grouped bar chart: groups along x, one bar per series in each group.
struct Bars {
    title: String,
    y_desc: String,
    log: bool,
    groups: Vec<String>,
    /// (series name, colour index, value per group; `None` = no bar).
    series: Vec<(String, usize, Vec<Option<f64>>)>,
}

/// Throughput with a K/M suffix.
fn fmt_rate(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.0}K", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

fn fmt_latency(v: f64) -> String {
    if v >= 1000.0 {
        format!("{:.0}ms", v / 1000.0)
    } else if v >= 1.0 {
        format!("{v:.0}µs")
    } else {
        format!("{v:.2}µs")
    }
}

type DrawResult<T, DB> =
    std::result::Result<T, DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

fn draw_bars<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, bars: &Bars) -> DrawResult<(), DB> {
    root.fill(&WHITE)?;
    let n = bars.groups.len().max(1);
    let k = bars.series.len().max(1);
    let values = || {
        bars.series
            .iter()
            .flat_map(|s| s.2.iter().flatten().copied())
    };
    let max = values().filter(|v| v.is_finite()).fold(0.0f64, f64::max);
    let longest = bars
        .groups
        .iter()
        .map(|g| g.chars().count())
        .max()
        .unwrap_or(0);
    let rotate = longest * n > 110;
    let bottom = if rotate {
        (longest as u32 * 8 + 20).min(220)
    } else {
        40
    };
    let (area, legend) = root.split_horizontally(SIZE.0 - 170);
    let title = (FONT, 22).into_font().style(FontStyle::Bold);
    let mut builder = ChartBuilder::on(&area);
    builder
        .caption(&bars.title, title)
        .margin(10)
        .x_label_area_size(bottom)
        .y_label_area_size(80);
    let x_range = 0.0..n as f64;
    let label_style = if rotate {
        (FONT, 13)
            .into_font()
            .transform(FontTransform::Rotate90)
            .into_text_style(&area)
    } else {
        (FONT, 14).into_font().into_text_style(&area)
    };
    if bars.log {
        let lo = values()
            .filter(|v| v.is_finite() && *v > 0.0)
            .fold(f64::INFINITY, f64::min);
        let lo = if lo.is_finite() { lo / 2.0 } else { 0.01 };
        let hi = (max * 2.0).max(lo * 10.0);
        let mut chart = builder.build_cartesian_2d(x_range, (lo..hi).log_scale())?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .y_desc(bars.y_desc.as_str())
            .y_label_formatter(&|v| fmt_latency(*v))
            .label_style((FONT, 14))
            .draw()?;
        draw_group_labels(root, &chart, bars, &label_style, rotate, lo)?;
        for (j, (_, c, vals)) in bars.series.iter().enumerate() {
            chart.draw_series(vals.iter().enumerate().filter_map(|(i, v)| {
                let v = (*v)?.max(lo);
                Some(bar(i, j, k, lo, v, colour(*c)))
            }))?;
        }
    } else {
        let hi = if max > 0.0 { max * 1.1 } else { 1.0 };
        let mut chart = builder.build_cartesian_2d(x_range, 0.0..hi)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .y_desc(bars.y_desc.as_str())
            .y_label_formatter(&|v| fmt_rate(*v))
            .label_style((FONT, 14))
            .draw()?;
        draw_group_labels(root, &chart, bars, &label_style, rotate, 0.0)?;
        for (j, (_, c, vals)) in bars.series.iter().enumerate() {
            chart.draw_series(vals.iter().enumerate().filter_map(|(i, v)| {
                let v = (*v)?;
                let v = if v.is_finite() { v.max(0.0) } else { 0.0 };
                Some(bar(i, j, k, 0.0, v, colour(*c)))
            }))?;
        }
    }
    draw_legend(
        &legend,
        bars.series.iter().map(|(name, c, _)| (name.as_str(), *c)),
    )?;
    root.present()
}

/// Bar `j` of `k` in group `i`, from `y0` to `y1`.
fn bar(i: usize, j: usize, k: usize, y0: f64, y1: f64, c: RGBColor) -> Rectangle<(f64, f64)> {
    let width = 0.8 / k as f64;
    let x0 = i as f64 + 0.1 + j as f64 * width;
    Rectangle::new([(x0, y0), (x0 + width * 0.92, y1)], c.filled())
}

/// Group names under the x axis, centred on their groups (drawn on the root area so that rotated labels
/// are not clipped).
fn draw_group_labels<DB: DrawingBackend, Y: Ranged<ValueType = f64>>(
    root: &DrawingArea<DB, Shift>,
    chart: &ChartContext<'_, DB, Cartesian2d<plotters::coord::types::RangedCoordf64, Y>>,
    bars: &Bars,
    style: &TextStyle<'_>,
    rotate: bool,
    y0: f64,
) -> DrawResult<(), DB> {
    for (i, g) in bars.groups.iter().enumerate() {
        let (x, y) = chart.backend_coord(&(i as f64 + 0.5, y0));
        let pos = if rotate {
            Pos::new(HPos::Left, VPos::Center)
        } else {
            Pos::new(HPos::Center, VPos::Top)
        };
        root.draw(&Text::new(g.clone(), (x, y + 8), style.pos(pos)))?;
    }
    Ok(())
}

fn draw_legend<'a, DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    entries: impl Iterator<Item = (&'a str, usize)>,
) -> DrawResult<(), DB> {
    let style = (FONT, 14).into_font().into_text_style(area);
    for (row, (name, c)) in entries.enumerate() {
        let y = 60 + row as i32 * 24;
        area.draw(&Rectangle::new([(8, y), (24, y + 14)], colour(c).filled()))?;
        area.draw(&Text::new(name.to_string(), (30, y), style.clone()))?;
    }
    Ok(())
}

/// One engine's line in a thread panel: colour index, engine name, (threads, ops/s) points.
type Line = (usize, String, Vec<(u32, f64)>);

/// Lines of throughput against threads, one chart per workload.
struct ThreadLines {
    /// (workload, its lines).
    panels: Vec<(String, Vec<Line>)>,
    engines: Vec<(String, usize)>,
}

fn draw_threads<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    t: &ThreadLines,
) -> DrawResult<(), DB> {
    root.fill(&WHITE)?;
    let (main, legend) = root.split_horizontally(SIZE.0 - 170);
    let main = main.titled(
        "Throughput against threads",
        (FONT, 22).into_font().style(FontStyle::Bold),
    )?;
    let n = t.panels.len();
    let cols = (n as f64).sqrt().ceil().max(1.0) as usize;
    let rows = n.div_ceil(cols).max(1);
    for (panel, (workload, lines)) in main.split_evenly((rows, cols)).iter().zip(&t.panels) {
        let max_t = lines
            .iter()
            .flat_map(|l| l.2.iter().map(|p| p.0))
            .max()
            .unwrap_or(1);
        let max_y = lines
            .iter()
            .flat_map(|l| l.2.iter().map(|p| p.1))
            .filter(|v| v.is_finite())
            .fold(0.0f64, f64::max);
        let mut chart = ChartBuilder::on(panel)
            .caption(workload, (FONT, 15))
            .margin(8)
            .x_label_area_size(28)
            .y_label_area_size(56)
            .build_cartesian_2d(0.5..max_t as f64 + 0.5, 0.0..(max_y * 1.15).max(1.0))?;
        chart
            .configure_mesh()
            .x_labels(max_t.min(16) as usize)
            .x_label_formatter(&|v| {
                if (v - v.round()).abs() < 1e-6 && *v >= 1.0 {
                    format!("{v:.0}")
                } else {
                    String::new()
                }
            })
            .y_label_formatter(&|v| fmt_rate(*v))
            .label_style((FONT, 12))
            .draw()?;
        for (c, _, points) in lines {
            let pts: Vec<(f64, f64)> = points
                .iter()
                .map(|(t, y)| (f64::from(*t), if y.is_finite() { *y } else { 0.0 }))
                .collect();
            let col = colour(*c);
            chart.draw_series(LineSeries::new(pts.clone(), col.stroke_width(2)))?;
            chart.draw_series(pts.into_iter().map(|p| Circle::new(p, 4, col.filled())))?;
        }
    }
    draw_legend(&legend, t.engines.iter().map(|(n, c)| (n.as_str(), *c)))?;
    root.present()
}

/// Total throughput of each (engine, workload, threads) phase: all its ops over the phase's time.
fn phase_rate(results: &[BenchResult], engine: &str, workload: &str, threads: u32) -> Option<f64> {
    let rows: Vec<&BenchResult> = results
        .iter()
        .filter(|r| r.engine == engine && r.workload == workload && r.threads == threads)
        .collect();
    let secs = rows.first()?.secs;
    let ops: u64 = rows.iter().map(|r| r.ops).sum();
    Some(if secs > 0.0 { ops as f64 / secs } else { 0.0 })
}

fn min_threads(results: &[BenchResult], workload: &str) -> u32 {
    results
        .iter()
        .filter(|r| r.workload == workload)
        .map(|r| r.threads)
        .min()
        .unwrap_or(1)
}

fn render(
    dir: &Path,
    stem: &str,
    title: &str,
    draw_svg: impl Fn(&DrawingArea<SVGBackend<'_>, Shift>) -> std::result::Result<(), String>,
    draw_png: impl Fn(&DrawingArea<BitMapBackend<'_>, Shift>) -> std::result::Result<(), String>,
) -> Result<Figure> {
    let svg = dir.join(format!("{stem}.svg"));
    let png = dir.join(format!("{stem}.png"));
    let fail = |path: &Path, e: String| BenchError::io(path, std::io::Error::other(e));
    {
        let root = SVGBackend::new(&svg, SIZE).into_drawing_area();
        draw_svg(&root).map_err(|e| fail(&svg, e))?;
    }
    {
        let root = BitMapBackend::new(&png, SIZE).into_drawing_area();
        draw_png(&root).map_err(|e| fail(&png, e))?;
    }
    Ok(Figure {
        title: title.to_string(),
        svg,
        png,
    })
}

fn bars_figure(dir: &Path, stem: &str, bars: &Bars) -> Result<Figure> {
    render(
        dir,
        stem,
        &bars.title,
        |root| draw_bars(root, bars).map_err(|e| e.to_string()),
        |root| draw_bars(root, bars).map_err(|e| e.to_string()),
    )
}

/// A file-name-safe version of a workload name.
fn stem_of(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Writes every figure the results support into `dir` (created if missing) and returns them in order.
pub fn write_figures(results: &[BenchResult], dir: &Path) -> Result<Vec<Figure>> {
    if results.is_empty() {
        return Ok(Vec::new());
    }
    register_fonts();
    std::fs::create_dir_all(dir).map_err(|e| BenchError::io(dir, e))?;
    let engines = first_seen(results.iter().map(|r| r.engine.as_str()));
    let workloads = first_seen(results.iter().map(|r| r.workload.as_str()));
    let colour_of = |e: &str| engines.iter().position(|x| *x == e).unwrap_or(0);
    let mut figures = Vec::new();

    let throughput = Bars {
        title: "Throughput per workload".into(),
        y_desc: "operations per second".into(),
        log: false,
        groups: workloads.iter().map(|w| w.to_string()).collect(),
        series: engines
            .iter()
            .map(|e| {
                let vals = workloads
                    .iter()
                    .map(|w| phase_rate(results, e, w, min_threads(results, w)))
                    .collect();
                (e.to_string(), colour_of(e), vals)
            })
            .collect(),
    };
    figures.push(bars_figure(dir, "throughput", &throughput)?);

    for w in &workloads {
        let t = min_threads(results, w);
        let rows: Vec<&BenchResult> = results
            .iter()
            .filter(|r| r.workload == *w && r.threads == t)
            .collect();
        let ops = first_seen(rows.iter().map(|r| r.op.as_str()));
        type Quantile = fn(&BenchResult) -> f64;
        let quantiles: [(&str, Quantile); 3] = [
            ("p50", |r| r.p50_us),
            ("p99", |r| r.p99_us),
            ("p99.9", |r| r.p999_us),
        ];
        let mut groups = Vec::new();
        for op in &ops {
            for (q, _) in &quantiles {
                groups.push(format!("{op} {q}"));
            }
        }
        let series = engines
            .iter()
            .filter(|e| rows.iter().any(|r| r.engine == **e))
            .map(|e| {
                let mut vals = Vec::new();
                for op in &ops {
                    let row = rows.iter().find(|r| r.engine == *e && r.op == *op);
                    for (_, f) in &quantiles {
                        vals.push(row.map(|r| f(r)));
                    }
                }
                (e.to_string(), colour_of(e), vals)
            })
            .collect();
        let bars = Bars {
            title: format!(
                "Latency percentiles, {w} ({t} thread{})",
                if t == 1 { "" } else { "s" }
            ),
            y_desc: "latency (log scale)".into(),
            log: true,
            groups,
            series,
        };
        figures.push(bars_figure(dir, &format!("latency-{}", stem_of(w)), &bars)?);
    }

    let swept: Vec<&str> = workloads
        .iter()
        .copied()
        .filter(|w| {
            let mut ts: Vec<u32> = results
                .iter()
                .filter(|r| r.workload == *w)
                .map(|r| r.threads)
                .collect();
            ts.sort_unstable();
            ts.dedup();
            ts.len() >= 2
        })
        .collect();
    if !swept.is_empty() {
        let panels = swept
            .iter()
            .map(|w| {
                let lines = engines
                    .iter()
                    .filter_map(|e| {
                        let mut ts: Vec<u32> = results
                            .iter()
                            .filter(|r| r.engine == *e && r.workload == *w)
                            .map(|r| r.threads)
                            .collect();
                        ts.sort_unstable();
                        ts.dedup();
                        if ts.is_empty() {
                            return None;
                        }
                        let points = ts
                            .iter()
                            .filter_map(|t| Some((*t, phase_rate(results, e, w, *t)?)))
                            .collect();
                        Some((colour_of(e), e.to_string(), points))
                    })
                    .collect();
                (w.to_string(), lines)
            })
            .collect();
        let lines = ThreadLines {
            panels,
            engines: engines
                .iter()
                .map(|e| (e.to_string(), colour_of(e)))
                .collect(),
        };
        figures.push(render(
            dir,
            "threads",
            "Throughput against threads",
            |root| draw_threads(root, &lines).map_err(|e| e.to_string()),
            |root| draw_threads(root, &lines).map_err(|e| e.to_string()),
        )?);
    }
    Ok(figures)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(
        engine: &str,
        workload: &str,
        op: &str,
        threads: u32,
        ops: u64,
        secs: f64,
    ) -> BenchResult {
        BenchResult {
            suite: "t".into(),
            engine: engine.into(),
            workload: workload.into(),
            op: op.into(),
            threads,
            records: 1000,
            ops,
            secs,
            ops_per_sec: ops as f64 / secs,
            p50_us: 1.5,
            p99_us: 20.0,
            p999_us: 300.0,
            max_us: 5000.0,
            mean_us: 3.0,
            io_reads: None,
            io_writes: None,
            bytes_read: None,
            bytes_written: None,
            io_syncs: None,
            page_reads: None,
            page_writes: None,
            rss_bytes: None,
            rss_scope: "phase".into(),
            disk_bytes: 1,
            durability: "none".into(),
            cache_bytes: 1,
            page_size: 4096,
            height: None,
            os_read_bytes: None,
            os_write_bytes: None,
            os_rchar: None,
            os_wchar: None,
        }
    }

    fn png_size(path: &Path) -> (u32, u32) {
        let bytes = std::fs::read(path).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{}", path.display());
        assert_eq!(&bytes[12..16], b"IHDR");
        let w = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
        let h = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
        (w, h)
    }

    #[test]
    fn figures_cover_throughput_latency_and_threads() {
        let mut rows = Vec::new();
        for (i, e) in ["strata-btree", "redb", "a-peer-with-a-long-name"]
            .iter()
            .enumerate()
        {
            rows.push(row(e, "fillrandom", "insert", 1, 1000, 0.5 + i as f64));
            for t in [1, 2, 4] {
                rows.push(row(e, "ycsb-a", "read", t, 500, 0.25 * f64::from(t)));
                rows.push(row(e, "ycsb-a", "update", t, 500, 0.25 * f64::from(t)));
            }
        }
        // A zero-throughput row and a zero latency must not break the scales.
        let mut zero = row("redb", "scan", "scan", 1, 0, 0.0);
        zero.p50_us = 0.0;
        rows.push(zero);
        let tmp = tempfile::tempdir().unwrap();
        let figs = write_figures(&rows, &tmp.path().join("figs")).unwrap();
        let stems: Vec<String> = figs
            .iter()
            .map(|f| f.svg.file_stem().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            stems,
            [
                "throughput",
                "latency-fillrandom",
                "latency-ycsb-a",
                "latency-scan",
                "threads"
            ]
        );
        for f in &figs {
            let svg = std::fs::read_to_string(&f.svg).unwrap();
            assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
            assert!(svg.contains("redb"), "{}", f.svg.display());
            // Only redb ran the scan workload: the others are not in its legend.
            let scan_only = f.svg.ends_with("latency-scan.svg");
            assert_eq!(
                svg.contains("strata-btree"),
                !scan_only,
                "{}",
                f.svg.display()
            );
            assert_eq!(png_size(&f.png), SIZE);
        }
        let throughput = std::fs::read_to_string(&figs[0].svg).unwrap();
        assert!(throughput.contains("Throughput per workload") && throughput.contains("ycsb-a"));
        assert!(
            std::fs::read_to_string(&figs[2].svg)
                .unwrap()
                .contains("update p99.9")
        );
    }

    #[test]
    fn no_rows_no_figures() {
        let tmp = tempfile::tempdir().unwrap();
        assert!(write_figures(&[], tmp.path()).unwrap().is_empty());
        // One engine, one workload, one thread count: no thread figure.
        let figs = write_figures(&[row("e", "w", "read", 1, 10, 1.0)], tmp.path()).unwrap();
        assert_eq!(figs.len(), 2);
    }

    #[test]
    fn many_long_workload_names_fit() {
        let rows: Vec<BenchResult> = (0..12)
            .map(|i| {
                row(
                    "e",
                    &format!("a-rather-long-workload-name-{i}"),
                    "read",
                    1,
                    10,
                    1.0,
                )
            })
            .collect();
        let tmp = tempfile::tempdir().unwrap();
        let figs = write_figures(&rows, tmp.path()).unwrap();
        assert_eq!(png_size(&figs[0].png), SIZE);
    }
}
