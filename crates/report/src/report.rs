//! `report.html` for one input and `compare.html` for several, with their plots and tables.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::analysis::{self, input_stats, size_label, sorted_keys, Key, MIB};
use crate::figures::{self, compare_figures, report_figures, Named};
use crate::load::{Input, RunData};
use crate::output::{fixed, OutputDir, ReportError};
use crate::plot::{render_svg, Rasterizer, FONT_PATHS, HEIGHT, WIDTH};
use crate::relay_plots;
use crate::stats::MeanCi;
use crate::summary::{summarize, summary_table, total_goodput, upload_goodput};
use crate::sweep::{self, Sweep};

/// File name of the page reporting on one input, a run or a set of trials.
pub const REPORT_HTML: &str = "report.html";
/// File name of the page comparing several inputs.
pub const COMPARE_HTML: &str = "compare.html";
/// File name of the comparison's table as tidy data: one row per statistic and input, with
/// the mean over trials, its 95% interval and the change from the first input.
pub const COMPARISON_CSV: &str = "comparison.csv";

/// Escapes text for HTML element content and double-quoted attributes.
pub(crate) fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

const STYLE: &str = "body{font-family:sans-serif;margin:2em auto;max-width:60em;padding:0 1em;\
color:#222}table{border-collapse:collapse;margin:1em 0}th,td{border:1px solid #ccc;\
padding:.25em .6em}td.n{text-align:right;font-variant-numeric:tabular-nums}th{background:#f3f3f3}\
figure{margin:2em 0}figure img{max-width:100%;height:auto;border:1px solid #eee}\
.note{color:#555;font-size:.9em}.partial{color:#a00;font-weight:bold}";

pub(crate) fn page_start(title: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>{}</h1>\n",
        html_escape(title),
        html_escape(title)
    )
}

/// An HTML table; cells whose first character is a digit, sign or `-` alone are numbers and
/// right-aligned.
pub(crate) fn html_table(header: &[String], rows: &[Vec<String>]) -> String {
    let mut out = String::from("<table>\n<thead><tr>");
    for h in header {
        let _ = write!(out, "<th>{}</th>", html_escape(h));
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    for row in rows {
        out.push_str("<tr>");
        for (i, cell) in row.iter().enumerate() {
            let numeric = i > 0
                && (cell == "-"
                    || cell
                        .chars()
                        .next()
                        .is_some_and(|c| c.is_ascii_digit() || c == '+' || c == '-'));
            let class = if numeric { " class=\"n\"" } else { "" };
            let _ = write!(out, "<td{class}>{}</td>", html_escape(cell));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody>\n</table>\n");
    out
}

/// Writes every figure as SVG and PNG; returns the files and the HTML for the page.
pub(crate) fn write_figures(
    figures: &[Named],
    dir: &OutputDir,
    raster: &Rasterizer,
) -> Result<(Vec<PathBuf>, String), ReportError> {
    let mut files = Vec::new();
    let mut html = String::new();
    for f in figures {
        let svg_name = format!("{}.svg", f.stem);
        let png_name = format!("{}.png", f.stem);
        let svg = render_svg(&f.figure, &svg_name)?;
        let png = raster.png(&svg, &png_name)?;
        files.push(dir.write_bytes(&svg_name, svg.as_bytes())?);
        files.push(dir.write_bytes(&png_name, &png)?);
        let title = html_escape(f.figure.title());
        let caption = if f.caption.is_empty() {
            String::new()
        } else {
            format!("{} ", html_escape(&f.caption))
        };
        let _ = write!(
            html,
            "<figure id=\"{stem}\">\n<img src=\"{svg}\" alt=\"{title}\" width=\"{WIDTH}\" \
             height=\"{HEIGHT}\">\n<figcaption>{title}. {caption}<a href=\"{svg}\">SVG</a>, \
             <a href=\"{png}\">PNG</a></figcaption>\n</figure>\n",
            stem = html_escape(&f.stem),
            svg = html_escape(&svg_name),
            png = html_escape(&png_name),
        );
    }
    Ok((files, html))
}

pub(crate) fn font_note(raster: &Rasterizer) -> String {
    match raster.font() {
        Some(path) => format!(
            "<p class=\"note\">PNG text is set in {}.</p>\n",
            html_escape(
                &path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default()
            )
        ),
        None => format!(
            "<p class=\"note\">No TrueType font was found (looked for $ONIONLAB_FONT and {}), \
             so the PNG files have no text. The SVG files are complete. Install DejaVu Sans \
             (Debian: fonts-dejavu-core) or set ONIONLAB_FONT to a .ttf file.</p>\n",
            html_escape(&FONT_PATHS.join(", "))
        ),
    }
}

fn json_text(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

fn count_of(v: &Value) -> u64 {
    v.get("count").and_then(Value::as_u64).unwrap_or(1)
}

/// Relays a scenario asks for, when its `relays` section says so directly.
fn scenario_relays(scenario: &Value) -> Option<u64> {
    let relays = scenario.get("relays")?;
    if let Some(g) = relays.get("generate") {
        let n = ["guard", "exit", "guard_exit", "middle"]
            .iter()
            .map(|k| g.get(*k).and_then(Value::as_u64).unwrap_or(0))
            .sum();
        return Some(n);
    }
    if let Some(list) = relays.get("list").and_then(Value::as_array) {
        return Some(list.iter().map(count_of).sum());
    }
    relays.get("sample")?.get("count")?.as_u64()
}

fn seconds(x: f64) -> String {
    format!("{} s", fixed(x).trim_end_matches('0').trim_end_matches('.'))
}

/// The scenario's key settings as (name, value) rows.
fn settings_rows(input: &Input) -> Vec<Vec<String>> {
    let runs = input.runs();
    let Some(first) = runs.first() else {
        return Vec::new();
    };
    let info = &first.info;
    let s = &info.scenario;
    let mut rows: Vec<(&str, String)> = vec![("scenario", info.scenario_name.clone())];
    let seeds: Vec<String> = runs.iter().map(|r| r.info.seed.to_string()).collect();
    if runs.len() > 1 {
        rows.push(("trials", runs.len().to_string()));
        rows.push(("seeds", seeds.join(", ")));
    } else {
        rows.push(("seed", seeds.join(", ")));
    }
    let run = s.get("run");
    rows.push((
        "stop time",
        json_text(run.and_then(|r| r.get("stop_time"))).unwrap_or_else(|| "-".into()),
    ));
    rows.push((
        "bootstrap",
        json_text(run.and_then(|r| r.get("bootstrap")))
            .unwrap_or_else(|| seconds(info.bootstrap_seconds)),
    ));
    let relays = scenario_relays(s).unwrap_or_else(|| {
        first
            .relays
            .iter()
            .map(|r| r.relay.as_str())
            .collect::<BTreeSet<_>>()
            .len() as u64
    });
    rows.push(("relays", relays.to_string()));
    for key in ["servers", "clients"] {
        if let Some(list) = s.get(key).and_then(Value::as_array) {
            let groups: Vec<String> = list
                .iter()
                .map(|g| {
                    let name = json_text(g.get("name")).unwrap_or_default();
                    format!("{name}: {}", count_of(g))
                })
                .collect();
            let total: u64 = list.iter().map(count_of).sum();
            let detail = if groups.is_empty() {
                String::new()
            } else {
                format!(" ({})", groups.join(", "))
            };
            rows.push((key, format!("{total}{detail}")));
        }
    }
    let tor = s.get("tor");
    for (label, key) in [
        ("tor scheduler", "scheduler"),
        ("flow control", "flow_control"),
    ] {
        if let Some(v) = json_text(tor.and_then(|t| t.get(key))) {
            rows.push((label, v));
        }
    }
    if let Some(v) = json_text(tor.and_then(|t| t.get("channel"))) {
        rows.push(("channel design", v));
    }
    // How the channels were carried, per trial: QUIC's outcome and what each transport put
    // on the wire beyond the cells it carried.
    let transports: Vec<&crate::records::TransportRecord> = runs
        .iter()
        .filter_map(|r| r.info.transport.as_ref())
        .collect();
    if transports
        .iter()
        .any(|t| t.quic_channels + t.tcp_fallbacks > 0)
    {
        let outcome: Vec<String> = transports
            .iter()
            .map(|t| {
                format!(
                    "{} on QUIC, {} stayed on TCP",
                    t.quic_channels, t.tcp_fallbacks
                )
            })
            .collect();
        rows.push(("relay channels opened", outcome.join("; ")));
    }
    let overheads: Vec<String> = transports
        .iter()
        .filter_map(|t| t.overhead())
        .map(|o| format!("{:.1}%", 100.0 * o))
        .collect();
    if !overheads.is_empty() {
        rows.push(("relays' wire bytes beyond cell bytes", overheads.join(", ")));
    }
    let threads: BTreeSet<usize> = runs.iter().map(|r| r.info.threads).collect();
    rows.push((
        "threads",
        threads
            .iter()
            .map(|t| t.to_string())
            .collect::<Vec<_>>()
            .join(", "),
    ));
    let sims: Vec<String> = runs.iter().map(|r| seconds(r.info.sim_seconds)).collect();
    rows.push(("simulated time reached", sims.join(", ")));
    let walls: Vec<String> = runs
        .iter()
        .map(|r| format!("{:.1} s", r.info.wall_seconds))
        .collect();
    rows.push(("wall-clock time", walls.join(", ")));
    let partial: Vec<String> = runs
        .iter()
        .filter(|r| !r.info.complete)
        .map(|r| {
            let why = r.info.interrupted_reason.clone().unwrap_or_default();
            if runs.len() > 1 {
                format!("{}: {why}", figures::trial_name(r))
            } else {
                why
            }
        })
        .collect();
    rows.push((
        "complete",
        if partial.is_empty() {
            "yes".into()
        } else {
            format!("no, PARTIAL ({})", partial.join("; "))
        },
    ));
    rows.push(("onionlab version", info.version.clone()));
    rows.into_iter()
        .map(|(k, v)| vec![k.to_string(), v])
        .collect()
}

/// The run summary (as in summary.txt) as table rows.
fn summary_rows(run: &RunData) -> (Vec<String>, Vec<Vec<String>>, String) {
    let mut rows = summary_table(&summarize(&run.downloads));
    let header = rows.remove(0);
    let goodput = total_goodput(&run.relays, analysis::first_measured_second(run)) / MIB;
    (header, rows, format!("{goodput:.3} MiB/s"))
}

fn key_cells(k: &Key) -> [String; 3] {
    [
        k.group.clone().unwrap_or_else(|| "(network)".into()),
        k.size.map(size_label).unwrap_or_else(|| "all".into()),
        k.metric.name().to_string(),
    ]
}

fn number(x: f64, decimals: usize) -> String {
    if x.is_finite() {
        format!("{x:.decimals$}")
    } else {
        "-".into()
    }
}

/// `mean ± half` (or the bare value without an interval).
fn value_cell(ci: Option<&MeanCi>, decimals: usize) -> String {
    match ci {
        None => "-".into(),
        Some(c) => match c.half_width {
            Some(h) if c.mean.is_finite() => {
                format!("{} ± {}", number(c.mean, decimals), number(h, decimals))
            }
            _ => number(c.mean, decimals),
        },
    }
}

/// Relative change of `value` against `base` in percent; `None` where undefined.
pub fn relative_change(base: f64, value: f64) -> Option<f64> {
    if !base.is_finite() || !value.is_finite() {
        None
    } else if base == value {
        Some(0.0)
    } else if base == 0.0 {
        None
    } else {
        Some((value - base) / base * 100.0)
    }
}

fn change_cell(change: Option<f64>) -> String {
    match change {
        Some(c) => format!("{c:+.1}%"),
        None => "-".into(),
    }
}

/// What a report or comparison shows beyond what the runs' run.json ask for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReportOptions {
    /// Relays to plot over time (throughput and open sockets per second), after those in the
    /// runs' `plot_relays`; a name given twice is plotted once. Each must be in relays.csv:
    /// a relay that no run has is an error, since a misspelt name would otherwise silently
    /// plot nothing.
    pub relays: Vec<String>,
}

/// The page section for relays plotted over time; empty when there are none, so pages that
/// plot no relay stay exactly as they were.
fn relays_section(figures_html: &str, notes: &[String]) -> String {
    if figures_html.is_empty() && notes.is_empty() {
        return String::new();
    }
    let mut html = String::from(
        "<h3>Relays over time</h3>\n<p class=\"note\">Relays named by the scenario (attack \
         victims, <code>report: { relays }</code>) or on the command line, per simulated \
         second.</p>\n",
    );
    for n in notes {
        let _ = writeln!(html, "<p class=\"note\">{}</p>", html_escape(n));
    }
    html.push_str(figures_html);
    html
}

/// The summary's line about the busiest relay's CPU; empty without CPU measurements, so the
/// pages of runs without a CPU model stay as they were.
fn cpu_paragraph(runs: &[RunData]) -> String {
    match crate::cpu::cpu_summary_line(runs) {
        Some(line) => format!(
            "<p>{}</p>\n<p class=\"note\">{}</p>\n",
            html_escape(&line),
            html_escape(
                "Fractions of a core: the main thread's busy time per second by what it did, \
                 and the onion-skin worker threads' together."
            )
        ),
        None => String::new(),
    }
}

/// Writes plots (SVG and PNG) and `report.html` into `out`; returns the files written.
///
/// Relays named in run.json's `plot_relays` are plotted over time; see [`write_report_with`].
pub fn write_report(input: &Input, out: &Path) -> Result<Vec<PathBuf>, ReportError> {
    write_report_with(input, out, &ReportOptions::default())
}

/// [`write_report`], also plotting `options.relays` over time.
///
/// Each relay in run.json's `plot_relays` or `options.relays` gets `relay_<name>_throughput`
/// (bytes written and read per second) and, where the runs counted sockets,
/// `relay_<name>_sockets` (open sockets per second), after the other plots; for trials, each
/// trial faintly under the mean with its 95% band. A relay that no run has is
/// [`ReportError::Invalid`] (see [`ReportError::is_bad_input`]), found before anything is
/// written.
pub fn write_report_with(
    input: &Input,
    out: &Path,
    options: &ReportOptions,
) -> Result<Vec<PathBuf>, ReportError> {
    let relays = relay_plots::report_relays(input, &options.relays)?;
    let dir = OutputDir::create(out)?;
    let raster = Rasterizer::new();
    let (mut files, figures_html) = write_figures(&report_figures(input), &dir, &raster)?;
    let (relay_files, relay_html) = write_figures(&relays.figures, &dir, &raster)?;
    files.extend(relay_files);

    let label = input.label();
    let mut html = page_start(&format!("onionlab report: {label}"));
    let runs = input.runs();
    if runs.iter().any(|r| !r.info.complete) {
        html.push_str(
            "<p class=\"partial\">PARTIAL RUN: the simulation stopped before its configured end; \
             results cover only the simulated time reached.</p>\n",
        );
    }
    html.push_str("<h2>Settings</h2>\n");
    html.push_str(&html_table(
        &["setting".into(), "value".into()],
        &settings_rows(input),
    ));
    html.push_str("<h2>Summary</h2>\n");
    match input {
        Input::Run(run) => {
            let (header, rows, goodput) = summary_rows(run);
            if rows.is_empty() {
                html.push_str("<p>No downloads were measured after the bootstrap period.</p>\n");
            } else {
                html.push_str(&html_table(&header, &rows));
            }
            let _ = write!(
                html,
                "<p>Total relay goodput: {}</p>\n<p class=\"note\">Times in seconds from \
                 download start; nearest-rank percentiles over successful downloads. Error rate \
                 counts errors and timeouts. The bootstrap period is excluded.</p>\n",
                html_escape(&goodput)
            );
            html.push_str(&cpu_paragraph(runs));
            let uploads = upload_goodput(&run.downloads);
            if !uploads.is_empty() {
                html.push_str("<h3>Upload goodput per client</h3>\n");
                let rows: Vec<Vec<String>> = uploads
                    .iter()
                    .map(|c| {
                        vec![
                            c.client.clone(),
                            c.group.clone(),
                            c.uploads.to_string(),
                            format!("{:.3}", c.bytes as f64 / MIB),
                            number(c.goodput() / MIB, 3),
                        ]
                    })
                    .collect();
                html.push_str(&html_table(
                    &["client", "group", "uploads", "MiB", "goodput MiB/s"].map(String::from),
                    &rows,
                ));
                html.push_str(
                    "<p class=\"note\">Goodput: the client's bytes over the sum of its \
                     uploads' times to last byte (from the start of each upload to the server's \
                     answer), over successful uploads started after the bootstrap period. \
                     Groups marked (upload) above: time to first byte is when the first DATA \
                     cell left the client.</p>\n",
                );
            }
        }
        Input::Trials { .. } => {
            let stats = input_stats(runs);
            let rows: Vec<Vec<String>> = sorted_keys(stats.keys())
                .iter()
                .map(|k| {
                    let mut row = key_cells(k).to_vec();
                    row.push(value_cell(stats.get(k), k.metric.decimals()));
                    row
                })
                .collect();
            html.push_str(&html_table(
                &["group", "size", "statistic", "mean ± 95% CI"].map(String::from),
                &rows,
            ));
            let _ = writeln!(
                html,
                "<p class=\"note\">Each statistic is computed per trial (nearest-rank \
                 percentiles over successful downloads after bootstrap), then averaged over the \
                 {} trials with a 95% Student-t interval.{}</p>",
                runs.len(),
                if runs.len() < 2 {
                    " With one trial there is no interval."
                } else {
                    ""
                }
            );
            html.push_str(&cpu_paragraph(runs));
        }
    }
    html.push_str("<h2>Plots</h2>\n");
    html.push_str(&font_note(&raster));
    html.push_str(&figures_html);
    html.push_str(&relays_section(&relay_html, &relays.notes));
    html.push_str("</body>\n</html>\n");
    files.push(dir.write_bytes(REPORT_HTML, html.as_bytes())?);
    Ok(files)
}

/// Pads columns to their widest cell: the first `left` columns left-aligned, the rest right.
pub(crate) fn align(rows: &[Vec<String>], left: usize) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .map(|r| r.get(c).map_or(0, |s| s.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (c, cell) in r.iter().enumerate() {
            if c > 0 {
                line.push_str("  ");
            }
            if c < left {
                let _ = write!(line, "{cell:<w$}", w = widths[c]);
            } else {
                let _ = write!(line, "{cell:>w$}", w = widths[c]);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// The comparison of several inputs, computed once for the text, the CSV and the page.
struct Comparison {
    labels: Vec<String>,
    trials: Vec<usize>,
    keys: Vec<Key>,
    stats: Vec<BTreeMap<Key, MeanCi>>,
}

impl Comparison {
    fn new(inputs: &[(String, Input)]) -> Self {
        let stats: Vec<_> = inputs.iter().map(|(_, i)| input_stats(i.runs())).collect();
        let keys = sorted_keys(stats.iter().flat_map(|s| s.keys()));
        Comparison {
            labels: inputs.iter().map(|(l, _)| l.clone()).collect(),
            trials: inputs.iter().map(|(_, i)| i.runs().len()).collect(),
            keys,
            stats,
        }
    }

    fn change(&self, key: &Key, i: usize) -> Option<f64> {
        let base = self.stats[0].get(key)?.mean;
        let value = self.stats[i].get(key)?.mean;
        relative_change(base, value)
    }

    fn header(&self) -> Vec<String> {
        let mut h = vec!["group".into(), "size".into(), "statistic".into()];
        for (i, label) in self.labels.iter().enumerate() {
            h.push(label.clone());
            if i > 0 {
                h.push(format!("change ({label})"));
            }
        }
        h
    }

    fn rows(&self) -> Vec<Vec<String>> {
        self.keys
            .iter()
            .map(|k| {
                let mut row = key_cells(k).to_vec();
                for i in 0..self.labels.len() {
                    row.push(value_cell(self.stats[i].get(k), k.metric.decimals()));
                    if i > 0 {
                        row.push(change_cell(self.change(k, i)));
                    }
                }
                row
            })
            .collect()
    }

    fn notes(&self) -> Vec<String> {
        let mut notes = vec![format!(
            "Changes are relative to the first input, {:?}.",
            self.labels[0]
        )];
        if self.trials.iter().any(|&k| k > 1) {
            notes.push(
                "Inputs with trials show the mean over trials ± the half-width of its 95% \
                 Student-t interval; single runs show their value."
                    .into(),
            );
        }
        let single: Vec<&str> = self
            .labels
            .iter()
            .zip(&self.trials)
            .filter(|(_, &k)| k == 1)
            .map(|(l, _)| l.as_str())
            .collect();
        if !single.is_empty() && single.len() < self.labels.len() {
            notes.push(format!(
                "No interval for {} (one run).",
                single
                    .iter()
                    .map(|l| format!("{l:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        notes.push(
            "Percentiles are nearest-rank over successful downloads after bootstrap; error rate \
             counts errors and timeouts."
                .into(),
        );
        notes
    }

    fn text(&self) -> String {
        let mut rows = vec![self.header()];
        rows.extend(self.rows());
        let mut out = align(&rows, 3);
        out.push('\n');
        for n in self.notes() {
            out.push_str(&n);
            out.push('\n');
        }
        out
    }

    fn csv(&self) -> Result<Vec<u8>, csv::Error> {
        let mut w = csv::WriterBuilder::new()
            .terminator(csv::Terminator::Any(b'\n'))
            .from_writer(Vec::new());
        w.write_record([
            "group",
            "size_bytes",
            "metric",
            "label",
            "trials",
            "mean",
            "ci_low",
            "ci_high",
            "change_pct",
        ])?;
        let opt = |x: Option<f64>| x.filter(|x| x.is_finite()).map(fixed).unwrap_or_default();
        for k in &self.keys {
            for (i, label) in self.labels.iter().enumerate() {
                let Some(ci) = self.stats[i].get(k) else {
                    continue;
                };
                w.write_record([
                    k.group.clone().unwrap_or_default(),
                    k.size.map(|s| s.to_string()).unwrap_or_default(),
                    k.metric.id().to_string(),
                    label.clone(),
                    ci.k.to_string(),
                    opt(Some(ci.mean)),
                    opt(ci.low()),
                    opt(ci.high()),
                    opt(self.change(k, i)),
                ])?;
            }
        }
        w.into_inner().map_err(|e| e.into_error().into())
    }
}

/// Overlays several inputs in the same plots and writes `compare.html`, the plots and
/// `comparison.csv` into `out`; returns the comparison table as text.
///
/// Relays named in the inputs' `plot_relays` are plotted over time; see
/// [`write_comparison_with`].
pub fn write_comparison(inputs: &[(String, Input)], out: &Path) -> Result<String, ReportError> {
    write_comparison_with(inputs, out, &ReportOptions::default())
}

/// [`write_comparison`], also plotting `options.relays` over time.
///
/// Each relay in any input's `plot_relays` or in `options.relays` gets
/// `compare_relay_<name>_throughput` (bytes written per second) and, where counted,
/// `compare_relay_<name>_sockets`, every input that has the relay overlaid as the mean over
/// its trials with the 95% band. An input without the relay is left out of its plots, and the
/// page says so; a relay that no input has is [`ReportError::Invalid`], found before anything
/// is written.
pub fn write_comparison_with(
    inputs: &[(String, Input)],
    out: &Path,
    options: &ReportOptions,
) -> Result<String, ReportError> {
    write_comparison_sweep(inputs, out, options, None)
}

/// [`write_comparison_with`], and with `sweep` also the sweep's plot (`sweep_<metric>.svg`
/// and `.png`), its table (`sweep.csv`, see [`crate::SWEEP_CSV`]) and a section of
/// `compare.html` showing both, before the other plots; the returned text then ends with the
/// sweep's table. Without a sweep the outputs are exactly [`write_comparison_with`]'s.
///
/// `sweep.points` gives each input's place, in the inputs' order; a different count is
/// [`ReportError::Invalid`].
pub fn write_comparison_sweep(
    inputs: &[(String, Input)],
    out: &Path,
    options: &ReportOptions,
    sweep: Option<&Sweep>,
) -> Result<String, ReportError> {
    let invalid = |message: String| ReportError::Invalid {
        path: out.to_path_buf(),
        message,
    };
    if inputs.is_empty() {
        return Err(invalid("nothing to compare: no inputs".into()));
    }
    let mut seen = BTreeSet::new();
    for (label, _) in inputs {
        if !seen.insert(label.as_str()) {
            return Err(invalid(format!(
                "two inputs are labelled {label:?}; labels must differ to tell them apart"
            )));
        }
    }
    let relays = relay_plots::compare_relays(inputs, &options.relays, out)?;
    let dir = OutputDir::create(out)?;
    let comparison = Comparison::new(inputs);
    let mut text = comparison.text();
    let csv = comparison.csv().map_err(|source| ReportError::Csv {
        path: out.join(COMPARISON_CSV),
        source,
    })?;
    dir.write_bytes(COMPARISON_CSV, &csv)?;

    let raster = Rasterizer::new();
    let sweep_html = match sweep {
        Some(sweep) => {
            let (rows, _) = sweep::write_sweep_files(inputs, sweep, &dir, out)?;
            text.push_str(&sweep::sweep_text(sweep, &rows));
            sweep_section(sweep, &rows, &dir, &raster)?
        }
        None => String::new(),
    };
    let (_, figures_html) = write_figures(&compare_figures(inputs), &dir, &raster)?;
    let (_, relay_html) = write_figures(&relays.figures, &dir, &raster)?;
    let title = format!("onionlab comparison: {}", comparison.labels.join(" vs "));
    let mut html = page_start(&title);
    html.push_str("<h2>Inputs</h2>\n");
    let input_rows: Vec<Vec<String>> = inputs
        .iter()
        .map(|(label, input)| {
            let runs = input.runs();
            let seeds: Vec<String> = runs.iter().map(|r| r.info.seed.to_string()).collect();
            let complete = if runs.iter().all(|r| r.info.complete) {
                "yes"
            } else {
                "no, PARTIAL"
            };
            vec![
                label.clone(),
                input.label(),
                input.dir().display().to_string(),
                runs.len().to_string(),
                seeds.join(", "),
                complete.to_string(),
            ]
        })
        .collect();
    html.push_str(&html_table(
        &[
            "label",
            "scenario",
            "directory",
            "runs",
            "seeds",
            "complete",
        ]
        .map(String::from),
        &input_rows,
    ));
    html.push_str("<h2>Comparison</h2>\n");
    html.push_str(&html_table(&comparison.header(), &comparison.rows()));
    for n in comparison.notes() {
        let _ = writeln!(html, "<p class=\"note\">{}</p>", html_escape(&n));
    }
    let _ = writeln!(
        html,
        "<p>The table as tidy data: <a href=\"{COMPARISON_CSV}\">{COMPARISON_CSV}</a>.</p>"
    );
    html.push_str(&sweep_html);
    html.push_str("<h2>Plots</h2>\n");
    html.push_str(&font_note(&raster));
    html.push_str(&figures_html);
    html.push_str(&relays_section(&relay_html, &relays.notes));
    html.push_str("</body>\n</html>\n");
    dir.write_bytes(COMPARE_HTML, html.as_bytes())?;
    Ok(text)
}

/// The page's sweep section: the plot, the table and how to read them, with a link to
/// `sweep.csv`. The plot is written here, like every figure of the page.
fn sweep_section(
    sweep: &Sweep,
    rows: &[sweep::SweepRow],
    dir: &OutputDir,
    raster: &Rasterizer,
) -> Result<String, ReportError> {
    let figure = figures::Named {
        stem: sweep.stem(),
        figure: sweep::sweep_figure(sweep, rows),
        caption: if sweep.series_label.is_empty() {
            String::new()
        } else {
            format!("One curve per {}.", sweep.series_label)
        },
    };
    let (_, figure_html) = write_figures(std::slice::from_ref(&figure), dir, raster)?;
    let mut html = format!(
        "<h2 id=\"sweep\">Sweep: {} against {}</h2>\n",
        html_escape(sweep.metric.describe()),
        html_escape(&sweep.x_label)
    );
    html.push_str(&figure_html);
    let (header, body) = sweep::sweep_table(sweep, rows);
    html.push_str(&html_table(&header, &body));
    for n in sweep::sweep_notes(sweep, rows) {
        let class = if n.starts_with("FLAGGED") {
            "partial"
        } else {
            "note"
        };
        let _ = writeln!(html, "<p class=\"{class}\">{}</p>", html_escape(&n));
    }
    let _ = writeln!(
        html,
        "<p>The sweep as tidy data: <a href=\"{csv}\">{csv}</a>.</p>",
        csv = sweep::SWEEP_CSV
    );
    Ok(html)
}
