//! Drawing figures: SVG with plotters, PNG by rasterizing that same SVG with resvg.
//!
//! Rasterizing the SVG (rather than drawing a second time with a bitmap backend) guarantees the
//! PNG shows exactly what the SVG shows, and resvg is pure Rust, so no system library is needed
//! to build. Plotters lays text out with its built-in size estimate (no font is read while
//! drawing), which keeps the SVG independent of the fonts installed. Only the PNG needs a font
//! file, found at run time by [`find_font`]; without one the PNG is still written, with no
//! text, and the HTML page says so.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use resvg::tiny_skia;
use resvg::usvg;

use crate::output::ReportError;

pub(crate) const WIDTH: u32 = 800;
pub(crate) const HEIGHT: u32 = 500;
/// PNGs are drawn at twice the SVG's size so they stay sharp in papers and slides.
const PNG_SCALE: f32 = 2.0;
const FONT: &str = "sans-serif";

/// Tableau 10: distinguishable, and still readable in grey-scale print.
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

pub(crate) fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// One curve, optionally with a shaded band (a closed polygon in data coordinates).
#[derive(Clone, Debug, Default)]
pub(crate) struct Line {
    pub label: String,
    pub color: usize,
    pub points: Vec<(f64, f64)>,
    pub band: Vec<(f64, f64)>,
    /// Drawn thin and pale beneath every other curve, and left out of the legend: one trial
    /// behind the mean over trials, so the spread between trials shows without hiding the mean.
    pub faint: bool,
    /// A dot at every point: for curves through a few measured points (a sweep), where the
    /// line between them is only a guide to the eye.
    pub markers: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Legend {
    LowerRight,
    UpperRight,
    UpperLeft,
}

#[derive(Clone, Debug)]
pub(crate) struct LineChart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub lines: Vec<Line>,
    /// Fixed y range top (1 for CDFs); otherwise fitted to the data.
    pub y_max: Option<f64>,
    /// A labelled vertical marker, e.g. the end of the bootstrap period.
    pub marker: Option<(f64, String)>,
    pub legend: Legend,
}

#[derive(Clone, Debug)]
pub(crate) struct BarSeries {
    pub label: String,
    pub color: usize,
    /// One value per category; `None` draws nothing there.
    pub values: Vec<Option<f64>>,
    /// Optional interval per category, drawn as a whisker.
    pub intervals: Vec<Option<(f64, f64)>>,
}

#[derive(Clone, Debug)]
pub(crate) struct BarChart {
    pub title: String,
    pub y_label: String,
    pub categories: Vec<String>,
    pub series: Vec<BarSeries>,
}

/// One part of every bar of a [`StackedBarChart`], or its thin bar.
#[derive(Clone, Debug)]
pub(crate) struct Segment {
    pub label: String,
    pub color: usize,
    /// One value per category; not finite or negative draws nothing there.
    pub values: Vec<f64>,
}

/// Horizontal bars, one per category from the top down, each stacked from `segments` in
/// order and labelled with its total; with `thin`, a narrow bar under each for a quantity
/// that is not part of the whole the stack adds up to. Horizontal, so that long category names
/// (relay names) stay readable; the legend sits in a row of its own below the plot, where no
/// bar can hide it.
#[derive(Clone, Debug)]
pub(crate) struct StackedBarChart {
    pub title: String,
    pub x_label: String,
    pub categories: Vec<String>,
    pub segments: Vec<Segment>,
    pub thin: Option<Segment>,
}

#[derive(Clone, Debug)]
pub(crate) enum Figure {
    Lines(LineChart),
    Bars(BarChart),
    Stacked(StackedBarChart),
}

impl Figure {
    pub(crate) fn title(&self) -> &str {
        match self {
            Figure::Lines(c) => &c.title,
            Figure::Bars(c) => &c.title,
            Figure::Stacked(c) => &c.title,
        }
    }
}

fn plot_err<E: std::fmt::Debug>(file: &str) -> impl Fn(E) -> ReportError + '_ {
    move |e| ReportError::Plot {
        file: file.to_string(),
        message: format!("{e:?}"),
    }
}

/// Draws `figure` as an SVG document; `file` only names it in errors.
pub(crate) fn render_svg(figure: &Figure, file: &str) -> Result<String, ReportError> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err(file))?;
        match figure {
            Figure::Lines(chart) => draw_lines(&root, chart, file)?,
            Figure::Bars(chart) => draw_bars(&root, chart, file)?,
            Figure::Stacked(chart) => draw_stacked(&root, chart, file)?,
        }
        root.present().map_err(plot_err(file))?;
    }
    Ok(svg)
}

fn finite(p: &(f64, f64)) -> bool {
    p.0.is_finite() && p.1.is_finite()
}

/// Fits `lo..hi` around values, never empty, so a single point or no data still draws.
fn span(values: impl Iterator<Item = f64>, floor_zero: bool) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() || !hi.is_finite() {
        return (0.0, 1.0);
    }
    if floor_zero {
        lo = lo.min(0.0);
    }
    if hi <= lo {
        hi = lo + 1.0;
    }
    (lo, hi)
}

fn no_data(root: &DrawingArea<SVGBackend, Shift>, file: &str) -> Result<(), ReportError> {
    let grey = BLACK.mix(0.6);
    let style = TextStyle::from((FONT, 18).into_font())
        .color(&grey)
        .pos(Pos::new(HPos::Center, VPos::Center));
    root.draw(&Text::new(
        "no data",
        (WIDTH as i32 / 2, HEIGHT as i32 / 2),
        style,
    ))
    .map_err(plot_err(file))
}

fn draw_lines(
    root: &DrawingArea<SVGBackend, Shift>,
    c: &LineChart,
    file: &str,
) -> Result<(), ReportError> {
    let all_points = || {
        c.lines
            .iter()
            .flat_map(|l| l.points.iter().chain(l.band.iter()))
            .filter(|p| finite(p))
    };
    let has_data = c.lines.iter().any(|l| l.points.iter().any(finite));
    let (x0, mut x1) = span(all_points().map(|p| p.0), true);
    if let Some((x, _)) = &c.marker {
        x1 = x1.max(*x);
    }
    let (y0, y1) = match c.y_max {
        Some(top) => (0.0, top),
        None => {
            let (lo, hi) = span(all_points().map(|p| p.1), true);
            (lo, hi * 1.05)
        }
    };
    let mut chart = ChartBuilder::on(root)
        .caption(&c.title, (FONT, 20))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(plot_err(file))?;
    chart
        .configure_mesh()
        .x_desc(c.x_label.as_str())
        .y_desc(c.y_label.as_str())
        .label_style((FONT, 13))
        .axis_desc_style((FONT, 15))
        .light_line_style(RGBColor(238, 238, 238))
        .draw()
        .map_err(plot_err(file))?;

    // Bands first, so every curve stays visible on top of every band.
    for line in &c.lines {
        let band: Vec<(f64, f64)> = line.band.iter().copied().filter(finite).collect();
        if band.len() >= 3 {
            chart
                .draw_series(std::iter::once(Polygon::new(
                    band,
                    color(line.color).mix(0.2).filled(),
                )))
                .map_err(plot_err(file))?;
        }
    }
    // Faint curves next, so the bold ones are drawn over them.
    for line in c.lines.iter().filter(|l| l.faint) {
        let points: Vec<(f64, f64)> = line.points.iter().copied().filter(finite).collect();
        chart
            .draw_series(LineSeries::new(
                points,
                color(line.color).mix(0.3).stroke_width(1),
            ))
            .map_err(plot_err(file))?;
    }
    let mut labelled = false;
    for line in c.lines.iter().filter(|l| !l.faint) {
        let points: Vec<(f64, f64)> = line.points.iter().copied().filter(finite).collect();
        let col = color(line.color);
        if line.markers {
            chart
                .draw_series(
                    points
                        .iter()
                        .map(|&p| Circle::new(p, 4, col.filled()))
                        .collect::<Vec<_>>(),
                )
                .map_err(plot_err(file))?;
        }
        let series = chart
            .draw_series(LineSeries::new(points, col.stroke_width(2)))
            .map_err(plot_err(file))?;
        if !line.label.is_empty() {
            labelled = true;
            series.label(line.label.as_str()).legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], col.stroke_width(2))
            });
        }
    }
    if let Some((x, label)) = &c.marker {
        let grey = BLACK.mix(0.45);
        let series = chart
            .draw_series(LineSeries::new(
                vec![(*x, y0), (*x, y1)],
                grey.stroke_width(1),
            ))
            .map_err(plot_err(file))?;
        labelled = true;
        series.label(label.as_str()).legend(move |(x, y)| {
            PathElement::new(vec![(x, y), (x + 20, y)], grey.stroke_width(1))
        });
    }
    if labelled {
        let position = match c.legend {
            Legend::LowerRight => SeriesLabelPosition::LowerRight,
            Legend::UpperRight => SeriesLabelPosition::UpperRight,
            Legend::UpperLeft => SeriesLabelPosition::UpperLeft,
        };
        chart
            .configure_series_labels()
            .position(position)
            .label_font((FONT, 13))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.4))
            .draw()
            .map_err(plot_err(file))?;
    }
    if !has_data {
        no_data(root, file)?;
    }
    Ok(())
}

fn draw_bars(
    root: &DrawingArea<SVGBackend, Shift>,
    c: &BarChart,
    file: &str,
) -> Result<(), ReportError> {
    let n = c.categories.len().max(1);
    let top = c
        .series
        .iter()
        .flat_map(|s| {
            let values = s.values.iter().flatten().copied();
            let highs = s.intervals.iter().flatten().map(|iv| iv.1);
            values.chain(highs)
        })
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max);
    let y1 = if top > 0.0 { top * 1.15 } else { 1.0 };
    let mut chart = ChartBuilder::on(root)
        .caption(&c.title, (FONT, 20))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..n as f64, 0.0..y1)
        .map_err(plot_err(file))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_label_formatter(&|_| String::new())
        .y_desc(c.y_label.as_str())
        .label_style((FONT, 13))
        .axis_desc_style((FONT, 15))
        .light_line_style(RGBColor(238, 238, 238))
        .draw()
        .map_err(plot_err(file))?;

    let slots = c.series.len().max(1) as f64;
    let width = 0.8 / slots;
    for (j, s) in c.series.iter().enumerate() {
        let col = color(s.color);
        let left = |i: usize| i as f64 + 0.1 + j as f64 * width;
        let bars: Vec<_> = s
            .values
            .iter()
            .enumerate()
            .filter_map(|(i, v)| v.filter(|v| v.is_finite()).map(|v| (i, v)))
            .map(|(i, v)| Rectangle::new([(left(i), 0.0), (left(i) + width, v)], col.filled()))
            .collect();
        let series = chart.draw_series(bars).map_err(plot_err(file))?;
        if !s.label.is_empty() {
            series
                .label(s.label.as_str())
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], col.filled()));
        }
        // Values written above the bars, so a zero rate reads as measured rather than missing.
        let value_style =
            TextStyle::from((FONT, 11).into_font()).pos(Pos::new(HPos::Center, VPos::Bottom));
        for (i, v) in s.values.iter().enumerate() {
            let Some(v) = v.filter(|v| v.is_finite()) else {
                continue;
            };
            let (x, y) = chart.backend_coord(&(left(i) + width / 2.0, v));
            root.draw(&Text::new(
                format!("{v:.2}"),
                (x, y - 3),
                value_style.clone(),
            ))
            .map_err(plot_err(file))?;
        }
        for (i, iv) in s.intervals.iter().enumerate() {
            let Some((lo, hi)) = iv.filter(|iv| iv.0.is_finite() && iv.1.is_finite()) else {
                continue;
            };
            let mid = left(i) + width / 2.0;
            let cap = width / 4.0;
            let whisker = vec![
                vec![(mid, lo.max(0.0)), (mid, hi)],
                vec![(mid - cap, hi), (mid + cap, hi)],
                vec![(mid - cap, lo.max(0.0)), (mid + cap, lo.max(0.0))],
            ];
            chart
                .draw_series(
                    whisker
                        .into_iter()
                        .map(|p| PathElement::new(p, BLACK.stroke_width(1))),
                )
                .map_err(plot_err(file))?;
        }
    }
    // Category names, centred under their group of bars, in pixel coordinates.
    let style = TextStyle::from((FONT, 14).into_font()).pos(Pos::new(HPos::Center, VPos::Top));
    for (i, name) in c.categories.iter().enumerate() {
        let (x, y) = chart.backend_coord(&(i as f64 + 0.5, 0.0));
        root.draw(&Text::new(name.as_str(), (x, y + 8), style.clone()))
            .map_err(plot_err(file))?;
    }
    if c.series.len() > 1 || c.series.iter().any(|s| !s.label.is_empty()) {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .label_font((FONT, 13))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.4))
            .draw()
            .map_err(plot_err(file))?;
    }
    let has_data = c
        .series
        .iter()
        .any(|s| s.values.iter().flatten().any(|v| v.is_finite()));
    if !has_data {
        no_data(root, file)?;
    }
    Ok(())
}

/// About the width in pixels of `text` set at `size` in a sans-serif font (0.6 of the size
/// per character): enough to keep names clear of the plot without reading a font file, which
/// would make the SVG depend on the fonts installed.
fn text_width(text: &str, size: u32) -> i32 {
    (text.chars().count() as u32 * size * 3 / 5) as i32
}

fn usable(v: f64) -> Option<f64> {
    (v.is_finite() && v >= 0.0).then_some(v)
}

fn draw_stacked(
    root: &DrawingArea<SVGBackend, Shift>,
    c: &StackedBarChart,
    file: &str,
) -> Result<(), ReportError> {
    const LEGEND_HEIGHT: i32 = 34;
    let n = c.categories.len();
    let value = |s: &Segment, i: usize| s.values.get(i).copied().and_then(usable);
    let totals: Vec<f64> = (0..n)
        .map(|i| c.segments.iter().filter_map(|s| value(s, i)).sum())
        .collect();
    let thin: Vec<Option<f64>> = (0..n)
        .map(|i| c.thin.as_ref().and_then(|s| value(s, i)))
        .collect();
    let top = totals
        .iter()
        .copied()
        .chain(thin.iter().flatten().copied())
        .fold(0.0f64, f64::max);
    // Room right of the longest bar for its value.
    let x1 = if top > 0.0 { top * 1.15 } else { 1.0 };
    let names = c
        .categories
        .iter()
        .map(|name| text_width(name, 13))
        .max()
        .unwrap_or(0);
    let (plot, legend) = root.split_vertically(HEIGHT as i32 - LEGEND_HEIGHT);
    let mut chart = ChartBuilder::on(&plot)
        .caption(&c.title, (FONT, 20))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size((names + 20).clamp(70, 260))
        .build_cartesian_2d(0.0..x1, 0.0..n.max(1) as f64)
        .map_err(plot_err(file))?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_label_formatter(&|_| String::new())
        .x_desc(c.x_label.as_str())
        .label_style((FONT, 13))
        .axis_desc_style((FONT, 15))
        .light_line_style(RGBColor(238, 238, 238))
        .draw()
        .map_err(plot_err(file))?;

    // Category i's band, counted from the top; the thin bar takes its lower part.
    let band = |i: usize| (n - 1 - i) as f64;
    let (main_lo, main_hi) = if c.thin.is_some() {
        (0.42, 0.88)
    } else {
        (0.15, 0.85)
    };
    let value_style =
        TextStyle::from((FONT, 11).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
    for i in 0..n {
        let y = band(i);
        let mut left = 0.0;
        let mut bars = Vec::new();
        for s in &c.segments {
            let Some(v) = value(s, i) else { continue };
            bars.push(Rectangle::new(
                [(left, y + main_lo), (left + v, y + main_hi)],
                color(s.color).filled(),
            ));
            left += v;
        }
        chart.draw_series(bars).map_err(plot_err(file))?;
        // The total written at the bar's end, so a zero reads as measured rather than missing.
        let (px, py) = chart.backend_coord(&(totals[i], y + (main_lo + main_hi) / 2.0));
        root.draw(&Text::new(
            format!("{:.2}", totals[i]),
            (px + 4, py),
            value_style.clone(),
        ))
        .map_err(plot_err(file))?;
        if let (Some(s), Some(v)) = (&c.thin, thin[i]) {
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(0.0, y + 0.14), (v, y + 0.34)],
                    color(s.color).filled(),
                )))
                .map_err(plot_err(file))?;
            let (px, py) = chart.backend_coord(&(v, y + 0.24));
            root.draw(&Text::new(
                format!("{v:.2}"),
                (px + 4, py),
                value_style.clone(),
            ))
            .map_err(plot_err(file))?;
        }
    }
    let name_style =
        TextStyle::from((FONT, 13).into_font()).pos(Pos::new(HPos::Right, VPos::Center));
    for (i, name) in c.categories.iter().enumerate() {
        let (x, y) = chart.backend_coord(&(0.0, band(i) + 0.5));
        root.draw(&Text::new(name.as_str(), (x - 8, y), name_style.clone()))
            .map_err(plot_err(file))?;
    }

    // The legend: swatch and label per segment, then the thin bar's, centred in one row.
    let entries: Vec<(&Segment, bool)> = c
        .segments
        .iter()
        .map(|s| (s, false))
        .chain(c.thin.iter().map(|s| (s, true)))
        .filter(|(s, _)| !s.label.is_empty())
        .collect();
    let label_style =
        TextStyle::from((FONT, 13).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
    let widths: Vec<i32> = entries
        .iter()
        .map(|(s, _)| 18 + text_width(&s.label, 13))
        .collect();
    let gap = 22;
    let total = widths.iter().sum::<i32>() + gap * (widths.len() as i32 - 1).max(0);
    let mut x = (WIDTH as i32 - total).max(0) / 2;
    let y = LEGEND_HEIGHT / 2;
    for ((s, is_thin), w) in entries.iter().zip(&widths) {
        let (top, bottom) = if *is_thin {
            (y - 2, y + 3)
        } else {
            (y - 5, y + 6)
        };
        legend
            .draw(&Rectangle::new(
                [(x, top), (x + 12, bottom)],
                color(s.color).filled(),
            ))
            .map_err(plot_err(file))?;
        legend
            .draw(&Text::new(
                s.label.as_str(),
                (x + 18, y),
                label_style.clone(),
            ))
            .map_err(plot_err(file))?;
        x += w + gap;
    }
    if n == 0 {
        no_data(root, file)?;
    }
    Ok(())
}

/// Where a sans-serif TrueType font is commonly installed: Debian/Ubuntu (`fonts-dejavu-core`),
/// Fedora, Arch, Alpine, then Liberation, macOS and Windows fallbacks.
pub const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/ttf-dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
    "/System/Library/Fonts/Supplemental/Arial.ttf",
    "/Library/Fonts/Arial.ttf",
    "C:\\Windows\\Fonts\\arial.ttf",
];

/// The font for PNG text: `$ONIONLAB_FONT` if it names a file, else the first of
/// [`FONT_PATHS`] that exists. One fixed file, not a scan of every installed font, so the
/// PNGs depend on as little of the machine as possible.
pub fn find_font() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("ONIONLAB_FONT").map(PathBuf::from) {
        if path.is_file() {
            return Some(path);
        }
    }
    FONT_PATHS.iter().map(PathBuf::from).find(|p| p.is_file())
}

/// Turns SVG documents into PNG files, with the font loaded once.
pub(crate) struct Rasterizer {
    options: usvg::Options<'static>,
    font: Option<PathBuf>,
}

impl Rasterizer {
    pub(crate) fn new() -> Self {
        Self::with_font(find_font().as_deref())
    }

    /// A font file that cannot be read or parsed is treated as no font: PNG text is a
    /// convenience, never a reason to fail a report.
    pub(crate) fn with_font(font: Option<&Path>) -> Self {
        let mut options = usvg::Options::default();
        let mut db = usvg::fontdb::Database::new();
        let mut loaded = None;
        if let Some(path) = font {
            if let Ok(bytes) = std::fs::read(path) {
                db.load_font_data(bytes);
                let family = db
                    .faces()
                    .next()
                    .and_then(|f| f.families.first())
                    .map(|(name, _)| name.clone());
                if let Some(family) = family {
                    db.set_sans_serif_family(family.clone());
                    options.font_family = family;
                    loaded = Some(path.to_path_buf());
                }
            }
        }
        options.fontdb = Arc::new(db);
        Rasterizer {
            options,
            font: loaded,
        }
    }

    /// The font file in use, if any.
    pub(crate) fn font(&self) -> Option<&Path> {
        self.font.as_deref()
    }

    pub(crate) fn png(&self, svg: &str, file: &str) -> Result<Vec<u8>, ReportError> {
        let tree = usvg::Tree::from_str(svg, &self.options).map_err(plot_err(file))?;
        let size = tree.size();
        let w = (size.width() * PNG_SCALE).ceil() as u32;
        let h = (size.height() * PNG_SCALE).ceil() as u32;
        let mut pixmap =
            tiny_skia::Pixmap::new(w.max(1), h.max(1)).ok_or_else(|| ReportError::Plot {
                file: file.to_string(),
                message: format!("cannot allocate a {w}x{h} image"),
            })?;
        pixmap.fill(tiny_skia::Color::WHITE);
        resvg::render(
            &tree,
            tiny_skia::Transform::from_scale(PNG_SCALE, PNG_SCALE),
            &mut pixmap.as_mut(),
        );
        pixmap.encode_png().map_err(plot_err(file))
    }
}

impl Default for Rasterizer {
    fn default() -> Self {
        Self::new()
    }
}
