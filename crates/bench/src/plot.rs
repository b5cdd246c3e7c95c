//! # Figures of a benchmark run
//!
//! [`write_figures`] turns a run's rows into SVG and PNG files of [`SIZE`] pixels (the same drawing code
//! renders both; text uses the DejaVu Sans font embedded by the `dejavu` crate, so no system font library is
//! needed):
//!
//! * `throughput`: grouped bars of throughput per workload, one bar per engine. A workload's throughput is
//!   all its operations (every op of the phase) over the phase's time, at the smallest thread count run.
//! * `latency-<workload>`: for each workload, p50 / p99 / p99.9 latency of each operation, one bar per
//!   engine, on a log scale (at the smallest thread count run).
//! * `threads`: throughput against thread count, one small chart per workload that ran at two or more
//!   thread counts, one line per engine (only written when some workload did).
//!
//! Suites with figures of their own (the sampling suites: [`crate::suites::irs`], [`crate::suites::wss`])
//! draw them with the same pieces: grouped bar charts (linear or log scale, rates or latencies, optionally
//! clustered) and line panels over evenly spaced categories (`lines_figure`, `bars_figure`).
//!
//! Every engine keeps one colour in every figure (engines in order of first appearance in the results);
//! the legend sits in its own column right of the plot so that it never hides data.

use crate::error::{BenchError, Result};
use crate::result::{BenchResult, first_seen};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontTransform;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::{Path, PathBuf};
use std::sync::Once;

/// Width and height of every figure, in pixels.
pub const SIZE: (u32, u32) = (1000, 600);
const FONT: &str = "sans-serif";
/// Font sizes (pixels) of titles, labels and small labels.
const TITLE_PX: u32 = 22;
const LABEL_PX: u32 = 14;
const SMALL_PX: u32 = 12;

/// One written figure: a title and the files (an .svg and a .png with the same stem).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Figure {
    pub title: String,
    pub svg: PathBuf,
    pub png: PathBuf,
}

/// Colours of engines 0, 1, 2, … (the Okabe–Ito colour-blind-friendly palette, then repeats).
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
        // The embedded fonts are valid TrueType files; should registration fail anyway, drawing text
        // reports an error (`write_figures` returns it) rather than panicking.
        let _ = plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular());
        let _ = plotters::style::register_font(FONT, FontStyle::Bold, dejavu::sans::bold());
    });
}

/// `v` with at most two decimals, trailing zeros removed.
fn trim(v: f64) -> String {
    let s = format!("{v:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" { "0".into() } else { s.into() }
}

/// A rate with a K/M/G suffix (`1.5K`, `800K`, `1.25M`).
fn fmt_rate(v: f64) -> String {
    let a = v.abs();
    if a >= 1e9 {
        format!("{}G", trim(v / 1e9))
    } else if a >= 1e6 {
        format!("{}M", trim(v / 1e6))
    } else if a >= 1e3 {
        format!("{}K", trim(v / 1e3))
    } else {
        trim(v)
    }
}

/// A latency given in microseconds, in the unit that suits it (`100ns`, `10µs`, `1ms`, `2s`).
fn fmt_latency(us: f64) -> String {
    if us >= 1e6 {
        format!("{}s", trim(us / 1e6))
    } else if us >= 1e3 {
        format!("{}ms", trim(us / 1e3))
    } else if us >= 1.0 {
        format!("{}µs", trim(us))
    } else {
        format!("{}ns", trim(us * 1e3))
    }
}

type DrawResult<T, DB> =
    std::result::Result<T, DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

fn font(px: u32) -> FontDesc<'static> {
    (FONT, px).into_font()
}

/// Width in pixels of `text` in `style` (a rough estimate should the font not measure).
fn text_width<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    text: &str,
    style: &TextStyle<'_>,
) -> u32 {
    area.estimate_text_size(text, style)
        .map(|(w, _)| w)
        .unwrap_or_else(|_| (text.chars().count() as f64 * style.font.get_size() * 0.62) as u32)
}

/// `text`, shortened with an ellipsis in the middle (names often differ only at their ends) when wider
/// than `max_px`.
fn fit<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    text: &str,
    style: &TextStyle<'_>,
    max_px: u32,
) -> String {
    if text_width(area, text, style) <= max_px {
        return text.to_string();
    }
    let chars: Vec<char> = text.chars().collect();
    for keep in (1..chars.len()).rev() {
        let (head, tail) = (keep.div_ceil(2), keep / 2);
        let s: String = chars[..head]
            .iter()
            .chain(['…'].iter())
            .chain(chars[chars.len() - tail..].iter())
            .collect();
        if text_width(area, &s, style) <= max_px {
            return s;
        }
    }
    String::new()
}

/// Width of the legend column for these names.
fn legend_width<'a, DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    names: impl Iterator<Item = &'a str>,
) -> u32 {
    let style = font(LABEL_PX).into_text_style(root);
    let widest = names
        .map(|n| text_width(root, n, &style))
        .max()
        .unwrap_or(0);
    (widest + 50).clamp(130, 300)
}

/// The legend: a colour swatch and a name per engine, from the top of `area`.
fn draw_legend<'a, DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    top: i32,
    entries: impl Iterator<Item = (&'a str, usize)>,
) -> DrawResult<(), DB> {
    let style = font(LABEL_PX)
        .into_text_style(area)
        .pos(Pos::new(HPos::Left, VPos::Center));
    let max_px = area.dim_in_pixel().0.saturating_sub(40);
    for (row, (name, c)) in entries.enumerate() {
        let y = top + row as i32 * 24;
        area.draw(&Rectangle::new(
            [(8, y - 7), (24, y + 7)],
            colour(c).filled(),
        ))?;
        area.draw(&Text::new(
            fit(area, name, &style, max_px),
            (30, y),
            style.clone(),
        ))?;
    }
    Ok(())
}

/// What a value axis shows, which decides its tick labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unit {
    /// Operations per second (`1.5K`, `2M`).
    Rate,
    /// Microseconds (`100ns`, `10µs`, `1ms`).
    Latency,
}

impl Unit {
    fn label(self, v: f64) -> String {
        match self {
            Unit::Rate => fmt_rate(v),
            Unit::Latency => fmt_latency(v),
        }
    }
}

/// True when the positive values span a decade or more (they read better on a log scale).
pub(crate) fn spans_decades(values: impl Iterator<Item = f64>) -> bool {
    let (mut min, mut max) = (f64::INFINITY, 0.0f64);
    for v in values.filter(|v| v.is_finite() && *v > 0.0) {
        min = min.min(v);
        max = max.max(v);
    }
    min.is_finite() && max >= 10.0 * min
}

/// One series of a bar chart: an engine's name, colour index and value per group (`None` = no bar).
pub(crate) struct Series {
    pub name: String,
    pub colour: usize,
    pub values: Vec<Option<f64>>,
}

/// A grouped bar chart: groups along x, one bar per series in each group. Groups may be gathered into
/// clusters (a second row of labels under the first, with a separator line between clusters).
pub(crate) struct Bars {
    pub title: String,
    pub y_desc: String,
    /// Log scale (whole decades) instead of a linear one from 0.
    pub log: bool,
    pub unit: Unit,
    pub groups: Vec<String>,
    /// (label, number of consecutive groups it spans); empty = no second row.
    pub clusters: Vec<(String, usize)>,
    pub series: Vec<Series>,
}

impl Bars {
    fn values(&self) -> impl Iterator<Item = f64> + '_ {
        self.series
            .iter()
            .flat_map(|s| s.values.iter().flatten().copied())
    }
}

/// How group labels are set under the x axis.
struct XLabels {
    style_px: u32,
    rotate: bool,
    /// The labels, shortened if they had to be.
    texts: Vec<String>,
    /// Height of the label area.
    height: u32,
}

/// Chooses horizontal labels (normal or small font) when they fit their group's width, else rotated ones.
fn x_labels<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    groups: &[String],
    group_px: f64,
    clusters: bool,
) -> XLabels {
    let extra = if clusters { 24 } else { 0 };
    for px in [LABEL_PX, SMALL_PX] {
        let style = font(px).into_text_style(root);
        let widest = groups
            .iter()
            .map(|g| text_width(root, g, &style))
            .max()
            .unwrap_or(0);
        if f64::from(widest) <= group_px * 0.95 {
            return XLabels {
                style_px: px,
                rotate: false,
                texts: groups.to_vec(),
                height: 36 + extra,
            };
        }
    }
    // Rotated: the label area takes what the longest label needs, up to 40 % of the figure.
    let style = font(SMALL_PX).into_text_style(root);
    let max_px = SIZE.1 * 2 / 5 - 20;
    let texts: Vec<String> = groups
        .iter()
        .map(|g| fit(root, g, &style, max_px))
        .collect();
    let widest = texts
        .iter()
        .map(|g| text_width(root, g, &style))
        .max()
        .unwrap_or(0);
    XLabels {
        style_px: SMALL_PX,
        rotate: true,
        texts,
        height: widest + 20 + extra,
    }
}

/// The log scale's range: whole decades around the positive values, at least two of them.
fn log_range(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (mut min, mut max) = (f64::INFINITY, 0.0f64);
    for v in values.filter(|v| v.is_finite() && *v > 0.0) {
        min = min.min(v);
        max = max.max(v);
    }
    if !min.is_finite() {
        return (0.1, 10.0);
    }
    let lo = 10f64.powi(min.log10().floor() as i32);
    let hi = 10f64.powi(max.log10().ceil() as i32).max(lo * 100.0);
    // A hair wider, so that rounding never drops the end decades' ticks.
    (lo * (1.0 - 1e-9), hi * (1.0 + 1e-9))
}

fn draw_bars<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, bars: &Bars) -> DrawResult<(), DB> {
    root.fill(&WHITE)?;
    let n = bars.groups.len().max(1);
    let k = bars.series.len().max(1);
    let legend_w = legend_width(root, bars.series.iter().map(|s| s.name.as_str()));
    let (area, legend) = root.split_horizontally(SIZE.0 - legend_w);
    const Y_LABELS: u32 = 80;
    const MARGIN: u32 = 12;
    let plot_w = f64::from(SIZE.0 - legend_w - Y_LABELS - 2 * MARGIN);
    let labels = x_labels(
        root,
        &bars.groups,
        plot_w / n as f64,
        !bars.clusters.is_empty(),
    );
    let title_style = font(TITLE_PX).style(FontStyle::Bold).into_text_style(root);
    let title = fit(root, &bars.title, &title_style, SIZE.0 - legend_w - 20);
    let mut builder = ChartBuilder::on(&area);
    builder
        .caption(title, title_style)
        .margin(MARGIN)
        .x_label_area_size(labels.height)
        .y_label_area_size(Y_LABELS);
    let x_range = 0.0..n as f64;
    if bars.log {
        let (lo, hi) = log_range(bars.values());
        let mut chart = builder.build_cartesian_2d(x_range, (lo..hi).log_scale())?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .y_desc(bars.y_desc.as_str())
            .y_label_formatter(&|v| bars.unit.label(*v))
            .label_style(font(LABEL_PX))
            .draw()?;
        // Zero, negative and NaN values become empty bars on the bottom line; infinite ones reach the top.
        let clamp = |v: f64| if v.is_nan() { lo } else { v.clamp(lo, hi) };
        draw_bar_series(&mut chart, bars, k, lo, clamp)?;
        let bottom = chart.backend_coord(&(0.0, lo)).1;
        draw_x_labels(root, &chart, bars, &labels, bottom, (lo, hi))?;
    } else {
        let max = bars
            .values()
            .filter(|v| v.is_finite())
            .fold(0.0f64, f64::max);
        let hi = if max > 0.0 { max * 1.1 } else { 1.0 };
        let mut chart = builder.build_cartesian_2d(x_range, 0.0..hi)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .y_desc(bars.y_desc.as_str())
            .y_label_formatter(&|v| bars.unit.label(*v))
            .label_style(font(LABEL_PX))
            .draw()?;
        let clamp = |v: f64| if v.is_finite() { v.clamp(0.0, hi) } else { 0.0 };
        draw_bar_series(&mut chart, bars, k, 0.0, clamp)?;
        let bottom = chart.backend_coord(&(0.0, 0.0)).1;
        draw_x_labels(root, &chart, bars, &labels, bottom, (0.0, hi))?;
    }
    draw_legend(
        &legend,
        60,
        bars.series.iter().map(|s| (s.name.as_str(), s.colour)),
    )?;
    root.present()
}

type BarChart<'a, DB, Y> =
    ChartContext<'a, DB, Cartesian2d<plotters::coord::types::RangedCoordf64, Y>>;

fn draw_bar_series<DB: DrawingBackend, Y: Ranged<ValueType = f64>>(
    chart: &mut BarChart<'_, DB, Y>,
    bars: &Bars,
    k: usize,
    base: f64,
    clamp: impl Fn(f64) -> f64,
) -> DrawResult<(), DB> {
    let width = 0.8 / k as f64;
    for (j, s) in bars.series.iter().enumerate() {
        let c = colour(s.colour);
        chart.draw_series(s.values.iter().enumerate().filter_map(|(i, v)| {
            let x0 = i as f64 + 0.1 + j as f64 * width;
            let top = clamp((*v)?);
            Some(Rectangle::new(
                [(x0, base), (x0 + width * 0.9, top)],
                c.filled(),
            ))
        }))?;
    }
    Ok(())
}

/// Group labels under the x axis, centred on their groups (drawn on the root area so that rotated labels
/// are not clipped), then cluster labels and separators.
fn draw_x_labels<DB: DrawingBackend, Y: Ranged<ValueType = f64>>(
    root: &DrawingArea<DB, Shift>,
    chart: &BarChart<'_, DB, Y>,
    bars: &Bars,
    labels: &XLabels,
    bottom: i32,
    (y_lo, y_hi): (f64, f64),
) -> DrawResult<(), DB> {
    let x_of = |x: f64| chart.backend_coord(&(x, y_lo)).0;
    let style = if labels.rotate {
        font(labels.style_px)
            .transform(FontTransform::Rotate90)
            .into_text_style(root)
            .pos(Pos::new(HPos::Left, VPos::Center))
    } else {
        font(labels.style_px)
            .into_text_style(root)
            .pos(Pos::new(HPos::Center, VPos::Top))
    };
    for (i, g) in labels.texts.iter().enumerate() {
        let x = x_of(i as f64 + 0.5);
        root.draw(&Text::new(g.clone(), (x, bottom + 8), style.clone()))?;
    }
    if bars.clusters.is_empty() {
        return Ok(());
    }
    let cluster_style = font(LABEL_PX)
        .style(FontStyle::Bold)
        .into_text_style(root)
        .pos(Pos::new(HPos::Center, VPos::Top));
    let row_y = bottom + labels.height as i32 - 26;
    let mut start = 0usize;
    for (c, (name, span)) in bars.clusters.iter().enumerate() {
        let end = start + span;
        let (x0, x1) = (x_of(start as f64), x_of(end as f64));
        let text = fit(root, name, &cluster_style, (x1 - x0).max(0) as u32);
        root.draw(&Text::new(
            text,
            ((x0 + x1) / 2, row_y),
            cluster_style.clone(),
        ))?;
        if c > 0 {
            let top = chart.backend_coord(&(0.0, y_hi)).1;
            root.draw(&PathElement::new(
                vec![(x0, top), (x0, row_y + 16)],
                RGBColor(150, 150, 150).stroke_width(1),
            ))?;
        }
        start = end;
    }
    Ok(())
}

/// One engine's line in a thread panel: colour index, (threads, ops/s) points in increasing threads.
type Line = (usize, Vec<(u32, f64)>);

/// One panel of a line figure: values over categories along x (evenly spaced, so that 1, 2, 4, 8 … or
/// 1000, 4000, 12000 … read as a log scale), one line per series.
pub(crate) struct Panel {
    pub caption: String,
    pub x_desc: String,
    pub categories: Vec<String>,
    pub y_desc: String,
    pub unit: Unit,
    /// Log scale (whole decades) instead of a linear one from 0.
    pub log: bool,
    /// (colour index, (category index, value) points in increasing category).
    pub lines: Vec<(usize, Vec<(usize, f64)>)>,
}

/// A figure of line panels side by side (a grid when there are more than three), one legend for all.
pub(crate) struct Lines {
    pub title: String,
    pub panels: Vec<Panel>,
    /// (series name, colour index) of every series with a line.
    pub legend: Vec<(String, usize)>,
}

type PanelChart<'a, DB, Y> =
    ChartContext<'a, DB, Cartesian2d<plotters::coord::types::RangedCoordf64, Y>>;

/// The category ticks under the x axis and the lines of one panel.
fn draw_panel_lines<DB: DrawingBackend, Y: Ranged<ValueType = f64>>(
    root: &DrawingArea<DB, Shift>,
    chart: &mut PanelChart<'_, DB, Y>,
    panel: &Panel,
    (base, small): (f64, u32),
    clamp: impl Fn(f64) -> f64,
) -> DrawResult<(), DB> {
    let tick_style = font(small)
        .into_text_style(root)
        .pos(Pos::new(HPos::Center, VPos::Top));
    for (i, c) in panel.categories.iter().enumerate() {
        let (x, y) = chart.backend_coord(&(i as f64, base));
        root.draw(&Text::new(c.clone(), (x, y + 4), tick_style.clone()))?;
    }
    for (c, points) in &panel.lines {
        let pts: Vec<(f64, f64)> = points.iter().map(|(i, y)| (*i as f64, clamp(*y))).collect();
        let col = colour(*c);
        chart.draw_series(LineSeries::new(pts.clone(), col.stroke_width(2)))?;
        chart.draw_series(pts.into_iter().map(|p| Circle::new(p, 4, col.filled())))?;
    }
    Ok(())
}

fn draw_lines<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, l: &Lines) -> DrawResult<(), DB> {
    root.fill(&WHITE)?;
    let legend_w = legend_width(root, l.legend.iter().map(|e| e.0.as_str()));
    let (main, legend) = root.split_horizontally(SIZE.0 - legend_w);
    let title_style = font(TITLE_PX).style(FontStyle::Bold).into_text_style(root);
    let title = fit(root, &l.title, &title_style, SIZE.0 - legend_w - 20);
    let main = main.titled(&title, title_style)?;
    let n = l.panels.len();
    let cols = if n <= 3 {
        n.max(1)
    } else {
        (n as f64).sqrt().ceil() as usize
    };
    let rows = n.div_ceil(cols).max(1);
    let small = if n > 4 { SMALL_PX } else { LABEL_PX };
    for (area, panel) in main.split_evenly((rows, cols)).iter().zip(&l.panels) {
        let values = || panel.lines.iter().flat_map(|l| l.1.iter().map(|p| p.1));
        let caption_style = font(LABEL_PX).style(FontStyle::Bold).into_text_style(root);
        let caption = fit(
            root,
            &panel.caption,
            &caption_style,
            area.dim_in_pixel().0.saturating_sub(20),
        );
        let mut builder = ChartBuilder::on(area);
        builder
            .caption(caption, caption_style)
            .margin(8)
            .x_label_area_size(small * 2 + 14)
            .y_label_area_size(small * 4 + 10);
        let x_range = -0.5..panel.categories.len() as f64 - 0.5;
        if panel.log {
            let (lo, hi) = log_range(values());
            let mut chart = builder.build_cartesian_2d(x_range, (lo..hi).log_scale())?;
            chart
                .configure_mesh()
                .disable_x_mesh()
                .x_labels(0)
                .x_desc(panel.x_desc.as_str())
                .y_desc(panel.y_desc.as_str())
                .y_label_formatter(&|v| panel.unit.label(*v))
                .label_style(font(small))
                .axis_desc_style(font(small))
                .draw()?;
            let clamp = |v: f64| if v.is_nan() { lo } else { v.clamp(lo, hi) };
            draw_panel_lines(root, &mut chart, panel, (lo, small), clamp)?;
        } else {
            let max_y = values().filter(|v| v.is_finite()).fold(0.0f64, f64::max);
            let hi = if max_y > 0.0 { max_y * 1.15 } else { 1.0 };
            let mut chart = builder.build_cartesian_2d(x_range, 0.0..hi)?;
            chart
                .configure_mesh()
                .disable_x_mesh()
                .x_labels(0)
                .x_desc(panel.x_desc.as_str())
                .y_desc(panel.y_desc.as_str())
                .y_labels(6)
                .y_label_formatter(&|v| panel.unit.label(*v))
                .label_style(font(small))
                .axis_desc_style(font(small))
                .draw()?;
            let clamp = |v: f64| if v.is_finite() { v.clamp(0.0, hi) } else { 0.0 };
            draw_panel_lines(root, &mut chart, panel, (0.0, small), clamp)?;
        }
    }
    draw_legend(&legend, 60, l.legend.iter().map(|(n, c)| (n.as_str(), *c)))?;
    root.present()
}

/// Throughput against threads: one panel per workload (`(workload, its lines)`), one line per engine
/// (`engines`: name and colour index of every engine with a line).
fn thread_lines(panels: Vec<(String, Vec<Line>)>, engines: Vec<(String, usize)>) -> Lines {
    let panels = panels
        .into_iter()
        .map(|(workload, lines)| {
            // Thread counts are categories along x (evenly spaced: 1, 2, 4, 8 … read as a log scale).
            let mut counts: Vec<u32> = lines.iter().flat_map(|l| l.1.iter().map(|p| p.0)).collect();
            counts.sort_unstable();
            counts.dedup();
            let index = |t: u32| counts.iter().position(|c| *c == t).unwrap_or(0);
            Panel {
                caption: workload,
                x_desc: "threads".into(),
                categories: counts.iter().map(u32::to_string).collect(),
                y_desc: String::new(),
                unit: Unit::Rate,
                log: false,
                lines: lines
                    .iter()
                    .map(|(c, points)| (*c, points.iter().map(|(t, y)| (index(*t), *y)).collect()))
                    .collect(),
            }
        })
        .collect();
    Lines {
        title: "Throughput against threads".into(),
        panels,
        legend: engines,
    }
}

/// Total throughput of an (engine, workload, threads) combination: all its ops over its time. The rows of
/// one phase (ops run side by side, e.g. YCSB A's reads and updates) share the phase's `secs`, so they count
/// its time once: their bar is the sum of their rows' `ops_per_sec`, as the report's table shows them. Rows
/// with other `secs` come from phases run one after another under the same workload name, whose times add
/// up. `None` when the engine did not run it; zero for no time.
fn phase_rate(results: &[BenchResult], engine: &str, workload: &str, threads: u32) -> Option<f64> {
    let rows: Vec<&BenchResult> = results
        .iter()
        .filter(|r| r.engine == engine && r.workload == workload && r.threads == threads)
        .collect();
    if rows.is_empty() {
        return None;
    }
    let ops: u64 = rows.iter().map(|r| r.ops).sum();
    let mut phase_secs: Vec<u64> = rows.iter().map(|r| r.secs.to_bits()).collect();
    phase_secs.sort_unstable();
    phase_secs.dedup();
    let secs: f64 = phase_secs.into_iter().map(f64::from_bits).sum();
    Some(if secs > 0.0 && secs.is_finite() {
        ops as f64 / secs
    } else {
        0.0
    })
}

/// Distinct thread counts a workload ran at, increasing.
fn thread_counts(results: &[BenchResult], workload: &str, engine: Option<&str>) -> Vec<u32> {
    let mut ts: Vec<u32> = results
        .iter()
        .filter(|r| r.workload == workload && engine.is_none_or(|e| r.engine == e))
        .map(|r| r.threads)
        .collect();
    ts.sort_unstable();
    ts.dedup();
    ts
}

fn plural(t: u32) -> &'static str {
    if t == 1 { "" } else { "s" }
}

/// Draws one figure into `<stem>.svg` and `<stem>.png` in `dir`.
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

/// Gets `dir` ready for figures: creates it and registers the embedded fonts (suites that draw their own
/// figures call this first).
pub(crate) fn prepare(dir: &Path) -> Result<()> {
    register_fonts();
    std::fs::create_dir_all(dir).map_err(|e| BenchError::io(dir, e))
}

/// Draws `lines` into `<stem>.svg` and `<stem>.png` in `dir` (which must exist).
pub(crate) fn lines_figure(dir: &Path, stem: &str, lines: &Lines) -> Result<Figure> {
    render(
        dir,
        stem,
        &lines.title,
        |root| draw_lines(root, lines).map_err(|e| e.to_string()),
        |root| draw_lines(root, lines).map_err(|e| e.to_string()),
    )
}

/// Draws `bars` into `<stem>.svg` and `<stem>.png` in `dir` (which must exist).
pub(crate) fn bars_figure(dir: &Path, stem: &str, bars: &Bars) -> Result<Figure> {
    render(
        dir,
        stem,
        &bars.title,
        |root| draw_bars(root, bars).map_err(|e| e.to_string()),
        |root| draw_bars(root, bars).map_err(|e| e.to_string()),
    )
}

/// A file-name-safe, length-limited version of a workload name, distinct from the names in `used` (which it
/// joins).
fn stem_of(name: &str, used: &mut Vec<String>) -> String {
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .take(100)
        .collect();
    let mut stem = safe.clone();
    let mut n = 1;
    while used.contains(&stem) {
        n += 1;
        stem = format!("{safe}-{n}");
    }
    used.push(stem.clone());
    stem
}

/// Writes every figure the results support into `dir` (created if missing) and returns them in order:
/// `throughput`, then `latency-<workload>` per workload (order of first appearance), then `threads` if some
/// workload ran at two or more thread counts. No rows, no figures (and no directory).
/// The throughput figure's data: per workload (at its smallest thread count, named when it is not 1), a bar
/// per engine of [`phase_rate`].
fn throughput_bars(results: &[BenchResult]) -> Bars {
    let engines = first_seen(results.iter().map(|r| r.engine.as_str()));
    let workloads = first_seen(results.iter().map(|r| r.workload.as_str()));
    let colour_of = |e: &str| engines.iter().position(|x| *x == e).unwrap_or(0);
    let min_threads = |w: &str| {
        thread_counts(results, w, None)
            .first()
            .copied()
            .unwrap_or(1)
    };
    Bars {
        title: "Throughput per workload".into(),
        y_desc: "operations per second".into(),
        log: false,
        unit: Unit::Rate,
        groups: workloads
            .iter()
            .map(|w| match min_threads(w) {
                1 => w.to_string(),
                t => format!("{w} ({t} threads)"),
            })
            .collect(),
        clusters: Vec::new(),
        series: engines
            .iter()
            .map(|e| Series {
                name: e.to_string(),
                colour: colour_of(e),
                values: workloads
                    .iter()
                    .map(|w| phase_rate(results, e, w, min_threads(w)))
                    .collect(),
            })
            .collect(),
    }
}

pub fn write_figures(results: &[BenchResult], dir: &Path) -> Result<Vec<Figure>> {
    if results.is_empty() {
        return Ok(Vec::new());
    }
    register_fonts();
    std::fs::create_dir_all(dir).map_err(|e| BenchError::io(dir, e))?;
    let engines = first_seen(results.iter().map(|r| r.engine.as_str()));
    let workloads = first_seen(results.iter().map(|r| r.workload.as_str()));
    let colour_of = |e: &str| engines.iter().position(|x| *x == e).unwrap_or(0);
    let min_threads = |w: &str| {
        thread_counts(results, w, None)
            .first()
            .copied()
            .unwrap_or(1)
    };
    let mut figures = Vec::new();

    let throughput = throughput_bars(results);
    figures.push(bars_figure(dir, "throughput", &throughput)?);

    // Latency percentiles per workload: a cluster per op, a group per percentile, a bar per engine.
    type Quantile = fn(&BenchResult) -> f64;
    let quantiles: [(&str, Quantile); 3] = [
        ("p50", |r| r.p50_us),
        ("p99", |r| r.p99_us),
        ("p99.9", |r| r.p999_us),
    ];
    let mut stems = vec!["throughput".to_string(), "threads".to_string()];
    for w in &workloads {
        let t = min_threads(w);
        let rows: Vec<&BenchResult> = results
            .iter()
            .filter(|r| r.workload == *w && r.threads == t)
            .collect();
        let ops = first_seen(rows.iter().map(|r| r.op.as_str()));
        let groups = ops
            .iter()
            .flat_map(|_| quantiles.iter().map(|q| q.0.to_string()))
            .collect();
        let series = engines
            .iter()
            .filter(|e| rows.iter().any(|r| r.engine == **e))
            .map(|e| Series {
                name: e.to_string(),
                colour: colour_of(e),
                values: ops
                    .iter()
                    .flat_map(|op| {
                        let row = rows.iter().find(|r| r.engine == *e && r.op == *op);
                        quantiles.iter().map(move |(_, f)| row.map(|r| f(r)))
                    })
                    .collect(),
            })
            .collect();
        let several = thread_counts(results, w, None).len() > 1;
        let title = if t != 1 || several {
            format!("Latency percentiles, {w} ({t} thread{})", plural(t))
        } else {
            format!("Latency percentiles, {w}")
        };
        let bars = Bars {
            title,
            y_desc: "latency per operation (log scale)".into(),
            log: true,
            unit: Unit::Latency,
            groups,
            clusters: ops
                .iter()
                .map(|op| (op.to_string(), quantiles.len()))
                .collect(),
            series,
        };
        figures.push(bars_figure(
            dir,
            &stem_of(&format!("latency-{w}"), &mut stems),
            &bars,
        )?);
    }

    // Throughput against threads, for workloads run at several thread counts.
    let panels: Vec<(String, Vec<Line>)> = workloads
        .iter()
        .filter(|w| thread_counts(results, w, None).len() >= 2)
        .map(|w| {
            let lines = engines
                .iter()
                .filter_map(|e| {
                    let points: Vec<(u32, f64)> = thread_counts(results, w, Some(e))
                        .into_iter()
                        .filter_map(|t| Some((t, phase_rate(results, e, w, t)?)))
                        .collect();
                    (!points.is_empty()).then(|| (colour_of(e), points))
                })
                .collect();
            (w.to_string(), lines)
        })
        .collect();
    if !panels.is_empty() {
        let legend = engines
            .iter()
            .map(|e| (e.to_string(), colour_of(e)))
            .filter(|(_, c)| panels.iter().any(|p| p.1.iter().any(|l| l.0 == *c)))
            .collect();
        figures.push(lines_figure(dir, "threads", &thread_lines(panels, legend))?);
    }
    Ok(figures)
}

#[cfg(test)]
mod tests;
