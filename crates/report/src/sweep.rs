//! A sweep: one metric of each compared input plotted against a setting the inputs vary.
//!
//! The comparison's CDFs overlay every input, which stops being readable past a handful; an
//! experiment that varies a setting over many values (a loss rate, a client count) asks a
//! different question, "how does the result change with the setting", which is one number per
//! input drawn against that setting's value, one curve per combination of the other settings
//! varied. The caller (the experiment) knows which setting each input had; this module computes
//! the metric from each input's trials and writes the plot, the table and the page section.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::analysis::MIB;
use crate::load::{Input, RunData};
use crate::output::{fixed, OutputDir, ReportError};
use crate::plot::{Figure, Legend, Line, LineChart};
use crate::records::DownloadRecord;
use crate::stats::{mean_ci, MeanCi};

/// The sweep's table, beside its plot in the comparison folder.
pub const SWEEP_CSV: &str = "sweep.csv";

/// What a sweep measures in each trial.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SweepMetric {
    /// The slowest uploading client's goodput (MiB/s): per client of an `upload` group, the
    /// size of its first completed upload over that upload's time to last byte; the minimum
    /// over those clients. A client that completed none counts as 0.
    SlowestUploadGoodput,
    /// The same over the downloading clients (every group without `upload`) and their first
    /// completed download.
    SlowestDownloadGoodput,
}

impl SweepMetric {
    /// Every metric, in the order error messages list them.
    pub const ALL: [SweepMetric; 2] = [
        SweepMetric::SlowestUploadGoodput,
        SweepMetric::SlowestDownloadGoodput,
    ];

    /// The name an experiment file uses.
    pub fn id(self) -> &'static str {
        match self {
            SweepMetric::SlowestUploadGoodput => "slowest_upload_goodput",
            SweepMetric::SlowestDownloadGoodput => "slowest_download_goodput",
        }
    }

    /// The metric an experiment file names by [`SweepMetric::id`]; `None` for any other name.
    pub fn from_id(id: &str) -> Option<SweepMetric> {
        SweepMetric::ALL.into_iter().find(|m| m.id() == id)
    }

    /// What the metric is, for the plot's axis, the page and the printed table.
    pub fn describe(self) -> &'static str {
        match self {
            SweepMetric::SlowestUploadGoodput => "slowest client's upload goodput (MiB/s)",
            SweepMetric::SlowestDownloadGoodput => "slowest client's download goodput (MiB/s)",
        }
    }

    /// The plot's title: short, since the axes say the rest.
    fn title(self) -> &'static str {
        match self {
            SweepMetric::SlowestUploadGoodput => "Slowest client's upload goodput",
            SweepMetric::SlowestDownloadGoodput => "Slowest client's download goodput",
        }
    }

    /// Whether the metric reads uploads (else downloads).
    fn uploads(self) -> bool {
        self == SweepMetric::SlowestUploadGoodput
    }

    /// Whether a client group of a scenario (as recorded in run.json) takes part: uploaders
    /// for the upload metric, every other group for the download metric.
    pub fn counts_group(self, group: &Value) -> bool {
        let uploads = group
            .get("workload")
            .and_then(Value::as_object)
            .is_some_and(|w| w.contains_key("upload"));
        uploads == self.uploads()
    }
}

/// Where one compared input sits in the sweep; given per input, in the comparison's order.
#[derive(Clone, Debug, PartialEq)]
pub struct SweepPoint {
    /// The curve it belongs to (the values of the series settings, as a label); inputs with
    /// the same label form one curve. Empty: the only curve.
    pub series: String,
    /// Its value of the swept setting.
    pub x: f64,
}

/// A sweep over the inputs of a comparison.
#[derive(Clone, Debug, PartialEq)]
pub struct Sweep {
    /// The x axis' label: the swept setting.
    pub x_label: String,
    /// The settings whose values tell the curves apart, for the legend's title and the page.
    pub series_label: String,
    /// What is plotted against the swept setting, one value per input (the mean over its trials).
    pub metric: SweepMetric,
    /// One per input, in the inputs' order.
    pub points: Vec<SweepPoint>,
}

impl Sweep {
    /// The plot's file stem, `sweep_<metric>`.
    pub fn stem(&self) -> String {
        format!("sweep_{}", self.metric.id())
    }
}

/// One trial's metric: the slowest client's goodput and the clients that finished nothing.
#[derive(Clone, Debug, PartialEq)]
pub struct Slowest {
    /// Bytes per second; NaN when the run has no client the metric counts.
    pub goodput: f64,
    /// The slowest client, if any client counts.
    pub client: Option<String>,
    /// Clients that completed no transfer of the metric's direction (each counted as 0).
    pub unfinished: Vec<String>,
}

/// The slowest of `clients` by the goodput of its first completed transfer in `downloads`:
/// uploads when `uploads`, else downloads. A transfer counts when it succeeded and started
/// after the bootstrap period; "first" is the one that ended first. Goodput is its size over
/// its time to last byte, which runs from when the application asked for it (so a wait for a
/// circuit counts, as for the summary's upload goodput). A client without one counts as 0 and
/// is listed in `unfinished`: a client that never finished is the slowest of all, and leaving
/// it out would make heavier loss look better.
pub fn slowest_goodput(clients: &[String], downloads: &[DownloadRecord], uploads: bool) -> Slowest {
    let mut slowest: Option<(f64, &String)> = None;
    let mut unfinished = Vec::new();
    for client in clients {
        let first = downloads
            .iter()
            .filter(|d| d.client == *client && d.upload == uploads)
            .filter(|d| d.outcome.is_ok() && !d.bootstrap)
            .filter_map(|d| d.ttlb_s.map(|t| (d, t)))
            .min_by(|(a, ta), (b, tb)| (a.start_s + ta).total_cmp(&(b.start_s + tb)));
        let goodput = match first {
            Some((d, t)) if t > 0.0 => d.size_bytes as f64 / t,
            Some(_) => f64::INFINITY,
            None => {
                unfinished.push(client.clone());
                0.0
            }
        };
        if slowest.is_none_or(|(g, _)| goodput < g) {
            slowest = Some((goodput, client));
        }
    }
    Slowest {
        goodput: slowest.map_or(f64::NAN, |(g, _)| g),
        client: slowest.map(|(_, c)| c.clone()),
        unfinished,
    }
}

/// The client hosts of a run that `metric` counts, from the scenario in its run.json: group
/// `g` of `count` clients is `client-g-1` … `client-g-count` (as the scenario names hosts).
pub fn metric_clients(run: &RunData, metric: SweepMetric) -> Vec<String> {
    let Some(groups) = run.info.scenario.get("clients").and_then(Value::as_array) else {
        return Vec::new();
    };
    let mut clients = Vec::new();
    for g in groups.iter().filter(|g| metric.counts_group(g)) {
        let Some(name) = g.get("name").and_then(Value::as_str) else {
            continue;
        };
        let count = g.get("count").and_then(Value::as_u64).unwrap_or(1);
        clients.extend((1..=count).map(|i| format!("client-{name}-{i}")));
    }
    clients
}

/// One input's point of the sweep, computed over its trials.
#[derive(Clone, Debug)]
pub(crate) struct SweepRow {
    pub series: String,
    pub x: f64,
    pub label: String,
    /// The metric in MiB/s, mean over trials with its interval.
    pub value: MeanCi,
    pub trials: usize,
    /// Clients that completed nothing, over all trials, as `trial: client`.
    pub unfinished: Vec<String>,
    /// Relay channels on QUIC and left on TCP, summed over trials, where runs recorded them.
    pub quic: Option<(u64, u64)>,
}

/// Computes every input's point: the metric per trial, then the mean and interval.
pub(crate) fn sweep_rows(inputs: &[(String, Input)], sweep: &Sweep) -> Vec<SweepRow> {
    let mut rows: Vec<SweepRow> = inputs
        .iter()
        .zip(&sweep.points)
        .map(|((label, input), point)| {
            let runs = input.runs();
            let mut values = Vec::with_capacity(runs.len());
            let mut unfinished = Vec::new();
            for run in runs {
                let clients = metric_clients(run, sweep.metric);
                let s = slowest_goodput(&clients, &run.downloads, sweep.metric.uploads());
                values.push(s.goodput / MIB);
                let trial = crate::figures::trial_name(run);
                unfinished.extend(s.unfinished.iter().map(|c| {
                    if runs.len() > 1 {
                        format!("{trial}: {c}")
                    } else {
                        c.clone()
                    }
                }));
            }
            let transports: Vec<_> = runs
                .iter()
                .filter_map(|r| r.info.transport.as_ref())
                .collect();
            let quic = transports
                .iter()
                .any(|t| t.quic_channels + t.tcp_fallbacks > 0)
                .then(|| {
                    transports.iter().fold((0, 0), |(q, f), t| {
                        (q + t.quic_channels, f + t.tcp_fallbacks)
                    })
                });
            SweepRow {
                series: point.series.clone(),
                x: point.x,
                label: label.clone(),
                value: mean_ci(&values),
                trials: runs.len(),
                unfinished,
                quic,
            }
        })
        .collect();
    // Curves in the order their first input came, points along each by x.
    let order: Vec<String> = series_order(&rows);
    rows.sort_by(|a, b| {
        let ia = order.iter().position(|s| *s == a.series);
        let ib = order.iter().position(|s| *s == b.series);
        ia.cmp(&ib).then(a.x.total_cmp(&b.x))
    });
    rows
}

fn series_order(rows: &[SweepRow]) -> Vec<String> {
    let mut seen = BTreeSet::new();
    rows.iter()
        .filter(|r| seen.insert(r.series.clone()))
        .map(|r| r.series.clone())
        .collect()
}

/// The plot: one line per series through its points by x, with the 95% band where there are
/// trials.
pub(crate) fn sweep_figure(sweep: &Sweep, rows: &[SweepRow]) -> Figure {
    let lines = series_order(rows)
        .iter()
        .enumerate()
        .map(|(i, series)| {
            let mine: Vec<&SweepRow> = rows.iter().filter(|r| r.series == *series).collect();
            let points = mine.iter().map(|r| (r.x, r.value.mean)).collect();
            let mut band: Vec<(f64, f64)> = mine
                .iter()
                .filter_map(|r| Some((r.x, r.value.low()?)))
                .collect();
            let high: Vec<(f64, f64)> = mine
                .iter()
                .filter_map(|r| Some((r.x, r.value.high()?)))
                .collect();
            band.extend(high.into_iter().rev());
            Line {
                label: series.clone(),
                color: i,
                points,
                band,
                faint: false,
                markers: true,
            }
        })
        .collect();
    let any_trials = rows.iter().any(|r| r.trials > 1);
    Figure::Lines(LineChart {
        title: format!(
            "{}{}",
            sweep.metric.title(),
            if any_trials {
                " (mean, 95% CI shaded)"
            } else {
                ""
            }
        ),
        x_label: sweep.x_label.clone(),
        y_label: sweep.metric.describe().into(),
        lines,
        y_max: None,
        marker: None,
        legend: Legend::UpperRight,
    })
}

/// `sweep.csv`: one row per input, curves in order, points by x.
pub(crate) fn sweep_csv(sweep: &Sweep, rows: &[SweepRow]) -> Result<Vec<u8>, csv::Error> {
    let mut w = csv::WriterBuilder::new()
        .terminator(csv::Terminator::Any(b'\n'))
        .from_writer(Vec::new());
    w.write_record([
        "series",
        "x",
        "metric",
        "variant",
        "trials",
        "mean",
        "ci_low",
        "ci_high",
        "unfinished_clients",
        "quic_channels",
        "tcp_fallbacks",
    ])?;
    let opt = |x: Option<f64>| x.filter(|x| x.is_finite()).map(fixed).unwrap_or_default();
    for r in rows {
        let (quic, fallbacks) = match r.quic {
            Some((q, f)) => (q.to_string(), f.to_string()),
            None => (String::new(), String::new()),
        };
        w.write_record([
            r.series.clone(),
            r.x.to_string(),
            sweep.metric.id().to_string(),
            r.label.clone(),
            r.trials.to_string(),
            opt(Some(r.value.mean)),
            opt(r.value.low()),
            opt(r.value.high()),
            r.unfinished.len().to_string(),
            quic,
            fallbacks,
        ])?;
    }
    w.into_inner().map_err(|e| e.into_error().into())
}

/// `mean ± half` in MiB/s with three decimals, `-` when undefined.
fn value_text(v: &MeanCi) -> String {
    if !v.mean.is_finite() {
        return "-".into();
    }
    match v.half_width {
        Some(h) => format!("{:.3} ± {:.3}", v.mean, h),
        None => format!("{:.3}", v.mean),
    }
}

/// The table's header and rows, shared by the page and the printed text.
pub(crate) fn sweep_table(sweep: &Sweep, rows: &[SweepRow]) -> (Vec<String>, Vec<Vec<String>>) {
    let quic = rows.iter().any(|r| r.quic.is_some());
    let mut header = vec![
        if sweep.series_label.is_empty() {
            "series".to_string()
        } else {
            sweep.series_label.clone()
        },
        sweep.x_label.clone(),
        "variant".into(),
        "trials".into(),
        sweep.metric.describe().into(),
        "clients unfinished".into(),
    ];
    if quic {
        header.push("channels on QUIC / stayed on TCP".into());
    }
    let body = rows
        .iter()
        .map(|r| {
            let mut row = vec![
                r.series.clone(),
                r.x.to_string(),
                r.label.clone(),
                r.trials.to_string(),
                value_text(&r.value),
                if r.unfinished.is_empty() {
                    "0".into()
                } else {
                    format!("{} (counted as 0)", r.unfinished.len())
                },
            ];
            if quic {
                row.push(match r.quic {
                    Some((q, f)) => format!("{q} / {f}"),
                    None => "-".into(),
                });
            }
            row
        })
        .collect();
    (header, body)
}

/// The note under the plot and table: how the metric is computed, and which points count
/// clients that finished nothing.
pub(crate) fn sweep_notes(sweep: &Sweep, rows: &[SweepRow]) -> Vec<String> {
    let what = if sweep.metric.uploads() {
        "upload"
    } else {
        "download"
    };
    let mut notes = vec![format!(
        "Per trial, each client's goodput is the size of its first completed {what} (started \
         after the bootstrap period) over its time to last byte; the metric is the minimum over \
         the clients, and a client that completed none counts as 0. Inputs with trials show \
         the mean over trials ± the half-width of its 95% Student-t interval."
    )];
    let flagged: Vec<String> = rows
        .iter()
        .filter(|r| !r.unfinished.is_empty())
        .map(|r| format!("{} ({})", r.label, r.unfinished.join(", ")))
        .collect();
    if !flagged.is_empty() {
        notes.push(format!(
            "FLAGGED: clients that completed no {what} before the run ended, counted as 0: {}. \
             A longer stop time would measure them.",
            flagged.join("; ")
        ));
    }
    notes
}

/// Writes the sweep's plot (through `write_figure`, which the page's other figures use too)
/// and `sweep.csv` into `dir`; returns the rows for the page and the text.
pub(crate) fn write_sweep_files(
    inputs: &[(String, Input)],
    sweep: &Sweep,
    dir: &OutputDir,
    out: &Path,
) -> Result<(Vec<SweepRow>, PathBuf), ReportError> {
    if sweep.points.len() != inputs.len() {
        return Err(ReportError::Invalid {
            path: out.to_path_buf(),
            message: format!(
                "the sweep places {} inputs but {} are compared",
                sweep.points.len(),
                inputs.len()
            ),
        });
    }
    let rows = sweep_rows(inputs, sweep);
    let csv = sweep_csv(sweep, &rows).map_err(|source| ReportError::Csv {
        path: out.join(SWEEP_CSV),
        source,
    })?;
    let path = dir.write_bytes(SWEEP_CSV, &csv)?;
    Ok((rows, path))
}

/// The sweep as printed after the comparison's table.
pub(crate) fn sweep_text(sweep: &Sweep, rows: &[SweepRow]) -> String {
    let (header, body) = sweep_table(sweep, rows);
    let mut all = vec![header];
    all.extend(body);
    let mut out = format!("\nSweep: {} against {}\n", sweep.metric.id(), sweep.x_label);
    out.push_str(&crate::report::align(&all, 3));
    for n in sweep_notes(sweep, rows) {
        let _ = writeln!(out, "{n}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::Outcome;

    fn upload(client: &str, start: f64, ttlb: f64, outcome: Outcome) -> DownloadRecord {
        DownloadRecord {
            client: client.into(),
            group: "up".into(),
            size_bytes: 32 << 20,
            start_s: start,
            circuit_build_s: Some(0.5),
            ttfb_s: Some(0.2),
            ttlb_s: Some(ttlb),
            request_s: Some(0.1),
            throughput_mbit_s: None,
            outcome,
            server: "server-sink-1".into(),
            guard: "guard".into(),
            middle: "middle".into(),
            exit: "exit".into(),
            bootstrap: false,
            upload: true,
        }
    }

    fn clients(n: usize) -> Vec<String> {
        (1..=n).map(|i| format!("client-up-{i}")).collect()
    }

    /// The slowest client decides, each client by its first completed upload: later uploads,
    /// failed ones, bootstrap ones and downloads do not count.
    #[test]
    fn the_slowest_client_by_its_first_completed_upload() {
        let mib32 = (32u64 << 20) as f64;
        let mut records = vec![
            // Client 1: 32 MiB in 16 s (2 MiB/s), then a slower second upload that is ignored.
            upload("client-up-1", 10.0, 16.0, Outcome::Ok),
            upload("client-up-1", 26.0, 64.0, Outcome::Ok),
            // Client 2: a timeout first (not completed), then 32 MiB in 8 s; a bootstrap
            // upload that was slower does not count either.
            upload("client-up-2", 10.0, 300.0, Outcome::Timeout),
            upload("client-up-2", 310.0, 8.0, Outcome::Ok),
            upload("client-up-2", 1.0, 100.0, Outcome::Ok),
        ];
        records[4].bootstrap = true;
        // A download by client 2 is not an upload.
        let mut download = upload("client-up-2", 5.0, 1000.0, Outcome::Ok);
        download.upload = false;
        records.push(download);

        let s = slowest_goodput(&clients(2), &records, true);
        assert_eq!(s.goodput, mib32 / 16.0);
        assert_eq!(s.client.as_deref(), Some("client-up-1"));
        assert!(s.unfinished.is_empty());

        // The download metric sees only the download.
        let d = slowest_goodput(&clients(2), &records, false);
        assert_eq!(d.goodput, 0.0, "client 1 downloaded nothing");
        assert_eq!(d.unfinished, vec!["client-up-1".to_string()]);

        // A third client that never completed an upload is the slowest, at 0, and flagged.
        let s = slowest_goodput(&clients(3), &records, true);
        assert_eq!(s.goodput, 0.0);
        assert_eq!(s.client.as_deref(), Some("client-up-3"));
        assert_eq!(s.unfinished, vec!["client-up-3".to_string()]);

        // No client: no value.
        assert!(slowest_goodput(&[], &records, true).goodput.is_nan());
    }

    /// "First" is the first to end, which for back-to-back uploads is the first started; a
    /// client's uploads may come in any order in the file.
    #[test]
    fn first_completed_means_first_to_end() {
        let records = vec![
            upload("client-up-1", 50.0, 10.0, Outcome::Ok),
            upload("client-up-1", 10.0, 40.0, Outcome::Ok),
        ];
        let s = slowest_goodput(&clients(1), &records, true);
        assert_eq!(s.goodput, (32u64 << 20) as f64 / 40.0);
    }

    #[test]
    fn metric_names_round_trip() {
        for m in SweepMetric::ALL {
            assert_eq!(SweepMetric::from_id(m.id()), Some(m));
        }
        assert_eq!(SweepMetric::from_id("goodput"), None);
        let upload = serde_json::json!({ "name": "up", "workload": { "upload": {} } });
        let web = serde_json::json!({ "name": "web", "workload": { "web": {} } });
        assert!(SweepMetric::SlowestUploadGoodput.counts_group(&upload));
        assert!(!SweepMetric::SlowestUploadGoodput.counts_group(&web));
        assert!(SweepMetric::SlowestDownloadGoodput.counts_group(&web));
    }
}
