//! Generated networks against the live Tor network: what Tor Metrics measured beside what the
//! same kind of measurement finds in onionlab.
//!
//! The live side is a distribution per statistic, given as quantiles (the shipped
//! `data/live/tor-metrics-2019.json`: Torperf/OnionPerf downloads of 50 KiB, 1 MiB and 5 MiB,
//! circuit build times, daily timeouts). The model side is several runs of networks sampled
//! independently from one consensus, as Jansen, Tracey and Goldberg ("Once is Never Enough",
//! USENIX Security 2021) run them: a statistic (a median, a 90th percentile, an error rate) is
//! taken once per network from its OnionPerf-like clients (the client groups whose workload is
//! `perf`), and reported as the mean over networks with its 95% Student-t interval
//! ([`crate::stats::mean_ci`]). Percentiles of one network are nearest-rank, as everywhere in
//! onionlab's reports; the live ones interpolate between order statistics, as Tor Metrics
//! computes them. The figures draw each network-set's mean CDF with its band
//! ([`crate::stats::mean_cdf_band`]) over the live CDF.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::analysis::size_label;
use crate::figures::{cdf_line, Named};
use crate::load::RunData;
use crate::output::{fixed, OutputDir, ReportError};
use crate::plot::{Figure, Legend, Line, LineChart, Rasterizer};
use crate::records::Outcome;
use crate::report::{font_note, html_escape, html_table, page_start, write_figures};
use crate::stats::{mean_ci, quantile, MeanCi};

/// The page `write_live_page` writes.
pub const LIVE_HTML: &str = "index.html";
/// The table behind the page, one row per statistic.
pub const LIVE_CSV: &str = "live.csv";

/// One live distribution: its quantiles at [`LiveData::quantiles`], with the count, minimum
/// and maximum of the measurements behind them.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct LiveDistribution {
    pub count: u64,
    pub min: f64,
    pub max: f64,
    pub values: Vec<f64>,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct LivePeriod {
    pub from: String,
    pub to: String,
}

/// One day of measurement downloads.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct LiveDay {
    pub date: String,
    pub requests: u64,
    pub timeouts: u64,
    pub failures: u64,
}

/// The relays' bandwidth on one day, Gbit/s: what they advertised (the sum over relays of the
/// least of BandwidthRate, BandwidthBurst and observed bandwidth) and what their bandwidth
/// histories say they used.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct LiveBandwidthDay {
    pub date: String,
    pub advertised: f64,
    pub consumed: f64,
}

/// What the live network measured in a period (the format of `data/live/*.json`).
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct LiveData {
    /// The dates the measurements span, for the legend.
    pub period: LivePeriod,
    /// Probability levels of every distribution's `values`, ascending, within (0, 1).
    pub quantiles: Vec<f64>,
    /// Time to last byte by download size in bytes (written as a string key).
    pub time_to_last_byte_s: BTreeMap<String, LiveDistribution>,
    /// Build times of the circuits the measurement downloads used, in seconds.
    pub circuit_build_time_s: LiveDistribution,
    /// OnionPerf's request to first response byte (DATAREQUEST to DATARESPONSE): one round
    /// trip over the circuit and the server's answer, where the file has it.
    #[serde(default)]
    pub circuit_round_trip_s: Option<LiveDistribution>,
    /// Throughput of successful 1 MiB and 5 MiB downloads between their 0.5th and 1st MiB, in
    /// Mbit/s, as Tor Metrics computes it, where the file has it.
    #[serde(default)]
    pub throughput_mbit_s: Option<LiveDistribution>,
    /// Per day: measurement downloads requested, timed out and failed, for the error rate.
    pub daily_downloads: Vec<LiveDay>,
    /// The relays' advertised and consumed bandwidth per day; empty where the file has none.
    #[serde(default)]
    pub daily_relay_bandwidth_gbit_s: Vec<LiveBandwidthDay>,
}

impl LiveData {
    /// Reads and checks a live data file: the quantile levels ascend within (0, 1), every
    /// distribution has a value per level and its values do not decrease, sizes are whole
    /// numbers of bytes.
    pub fn parse(text: &str, source: &str) -> Result<LiveData, String> {
        let live: LiveData = serde_json::from_str(text).map_err(|e| format!("{source}: {e}"))?;
        let q = &live.quantiles;
        if q.is_empty()
            || q.windows(2).any(|w| w[0] >= w[1])
            || q[0] <= 0.0
            || q[q.len() - 1] >= 1.0
        {
            return Err(format!(
                "{source}: quantiles: expected ascending levels strictly between 0 and 1"
            ));
        }
        let dists = live
            .time_to_last_byte_s
            .iter()
            .map(|(k, d)| (format!("time_to_last_byte_s.{k}"), d))
            .chain([(
                "circuit_build_time_s".to_string(),
                &live.circuit_build_time_s,
            )])
            .chain(
                (live.circuit_round_trip_s.iter()).map(|d| ("circuit_round_trip_s".to_string(), d)),
            )
            .chain((live.throughput_mbit_s.iter()).map(|d| ("throughput_mbit_s".to_string(), d)));
        for (name, d) in dists {
            if d.values.len() != q.len() {
                return Err(format!(
                    "{source}: {name}: {} values for {} quantile levels",
                    d.values.len(),
                    q.len()
                ));
            }
            if d.values.windows(2).any(|w| w[0] > w[1]) || d.values.iter().any(|v| !v.is_finite()) {
                return Err(format!(
                    "{source}: {name}: values must be finite and not decrease"
                ));
            }
        }
        for size in live.time_to_last_byte_s.keys() {
            if size.parse::<u64>().is_err() {
                return Err(format!(
                    "{source}: time_to_last_byte_s: {size:?} is not a size in bytes"
                ));
            }
        }
        Ok(live)
    }

    /// The live distribution's `q`-quantile, interpolated linearly between the listed levels
    /// (`q` must lie within them).
    pub fn quantile(&self, d: &LiveDistribution, q: f64) -> f64 {
        let levels = &self.quantiles;
        let i = levels.partition_point(|&l| l < q);
        if i < levels.len() && levels[i] == q {
            return d.values[i];
        }
        if i == 0 || i == levels.len() {
            return f64::NAN;
        }
        let (l0, l1) = (levels[i - 1], levels[i]);
        d.values[i - 1] + (d.values[i] - d.values[i - 1]) * (q - l0) / (l1 - l0)
    }

    /// The share of measurement downloads that timed out or failed over the whole period.
    pub fn error_rate(&self) -> f64 {
        let requests: u64 = self.daily_downloads.iter().map(|d| d.requests).sum();
        let bad: u64 = (self.daily_downloads.iter())
            .map(|d| d.timeouts + d.failures)
            .sum();
        if requests == 0 {
            f64::NAN
        } else {
            bad as f64 / requests as f64
        }
    }

    /// The download sizes, smallest first.
    pub fn sizes(&self) -> Vec<u64> {
        let mut s: Vec<u64> = (self.time_to_last_byte_s.keys())
            .filter_map(|k| k.parse().ok())
            .collect();
        s.sort_unstable();
        s
    }
}

/// What one network's OnionPerf-like clients measured after the bootstrap period.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NetworkSample {
    /// Times to last byte of successful downloads, by size.
    pub ttlb: BTreeMap<u64, Vec<f64>>,
    /// Build times of the circuits successful downloads used.
    pub circuit_build: Vec<f64>,
    /// Successful downloads' request to first byte (`ttfb_s - request_s`).
    pub round_trip: Vec<f64>,
    /// Successful downloads' throughput between their 0.5th and 1st MiB, Mbit/s
    /// (`throughput_mbit_s`, as Tor Metrics takes it).
    pub throughput: Vec<f64>,
    /// Measurement downloads finished, whatever their outcome.
    pub downloads: u64,
    /// Of those, the ones that timed out or failed.
    pub errors: u64,
}

impl NetworkSample {
    /// The measurement downloads of `run`: those of client groups whose workload is `perf`.
    pub fn of(run: &RunData) -> NetworkSample {
        let groups = perf_groups(run);
        let mut s = NetworkSample::default();
        for d in run.measured_downloads() {
            if d.upload || !groups.contains(&d.group) {
                continue;
            }
            s.downloads += 1;
            match (&d.outcome, d.ttlb_s) {
                (Outcome::Ok, Some(t)) => {
                    s.ttlb.entry(d.size_bytes).or_default().push(t);
                    if let Some(b) = d.circuit_build_s {
                        s.circuit_build.push(b);
                    }
                    if let (Some(first), Some(request)) = (d.ttfb_s, d.request_s) {
                        s.round_trip.push(first - request);
                    }
                    s.throughput.extend(d.throughput_mbit_s);
                }
                _ => s.errors += 1,
            }
        }
        s
    }
}

/// The client groups of a run whose workload is `perf`, from the scenario it recorded.
fn perf_groups(run: &RunData) -> BTreeSet<String> {
    let clients = run.info.scenario.get("clients").and_then(|c| c.as_array());
    (clients.into_iter().flatten())
        .filter(|c| c.get("workload").and_then(|w| w.get("perf")).is_some())
        .filter_map(|c| Some(c.get("name")?.as_str()?.to_string()))
        .collect()
}

/// One statistic of the comparison.
#[derive(Clone, Debug, PartialEq)]
pub struct LiveRow {
    /// What is compared and its unit, e.g. `time to last byte, 1 MiB, median (s)`.
    pub statistic: String,
    /// Over networks.
    pub model: MeanCi,
    /// The live network's value of the statistic, in the same unit.
    pub live: f64,
}

impl LiveRow {
    /// The model's mean against the live value, in percent (+ = the model is higher).
    pub fn difference_pct(&self) -> f64 {
        100.0 * (self.model.mean / self.live - 1.0)
    }
}

/// The quantiles a time is compared at: its median and its slow tail.
const TIME_QUANTILES: [(f64, &str); 2] = [(0.5, "median"), (0.9, "p90")];
/// The quantiles a throughput is compared at: its median and its slow tail, which for a rate
/// is the low end.
const RATE_QUANTILES: [(f64, &str); 2] = [(0.5, "median"), (0.1, "p10")];

/// The comparison's rows: the median and 90th percentile of time to last byte per live size,
/// of circuit build time and (where the live data has it) of the circuit round trip, the
/// median and 10th percentile of throughput (where the live data has it), then the error
/// rate.
pub fn compare(networks: &[NetworkSample], live: &LiveData) -> Vec<LiveRow> {
    let mut rows = Vec::new();
    let mut add_at = |quantiles: [(f64, &str); 2],
                      unit: &str,
                      name: String,
                      per_network: &dyn Fn(&NetworkSample) -> Vec<f64>,
                      d| {
        for (q, label) in quantiles {
            let values: Vec<f64> = (networks.iter())
                .map(|n| quantile(&per_network(n), q))
                .collect();
            rows.push(LiveRow {
                statistic: format!("{name}, {label} ({unit})"),
                model: mean_ci(&values),
                live: live.quantile(d, q),
            });
        }
    };
    let mut add = |name, per_network: &dyn Fn(&NetworkSample) -> Vec<f64>, d| {
        add_at(TIME_QUANTILES, "s", name, per_network, d)
    };
    for size in live.sizes() {
        let d = &live.time_to_last_byte_s[&size.to_string()];
        add(
            format!("time to last byte, {}", size_label(size)),
            &|n| n.ttlb.get(&size).cloned().unwrap_or_default(),
            d,
        );
    }
    add(
        "circuit build time".into(),
        &|n| n.circuit_build.clone(),
        &live.circuit_build_time_s,
    );
    if let Some(d) = &live.circuit_round_trip_s {
        add(
            "circuit round trip (request to first byte)".into(),
            &|n| n.round_trip.clone(),
            d,
        );
    }
    if let Some(d) = &live.throughput_mbit_s {
        add_at(
            RATE_QUANTILES,
            "Mbit/s",
            "throughput, 0.5 to 1 MiB".into(),
            &|n| n.throughput.clone(),
            d,
        );
    }
    let rates: Vec<f64> = (networks.iter())
        .map(|n| {
            if n.downloads == 0 {
                f64::NAN
            } else {
                n.errors as f64 / n.downloads as f64
            }
        })
        .collect();
    rows.push(LiveRow {
        statistic: "downloads timed out or failed (share)".into(),
        model: mean_ci(&rates),
        live: live.error_rate(),
    });
    rows
}

/// A live distribution as a CDF curve through its quantiles.
fn live_line(d: &LiveDistribution, live: &LiveData, color: usize) -> Line {
    Line {
        label: format!("live Tor, {} to {}", live.period.from, live.period.to),
        color,
        points: d
            .values
            .iter()
            .copied()
            .zip(live.quantiles.iter().copied())
            .collect(),
        band: Vec::new(),
        faint: false,
        markers: false,
    }
}

/// One CDF figure per live size and one of circuit build times, with a curve per set of
/// networks (a variant) and the live one.
pub(crate) fn figures(variants: &[(String, Vec<NetworkSample>)], live: &LiveData) -> Vec<Named> {
    let chart = |title: String, x: &str, pick: &dyn Fn(&NetworkSample) -> Vec<f64>, d| {
        let mut lines: Vec<Line> = (variants.iter().enumerate())
            .map(|(i, (name, networks))| {
                let k = networks.len();
                let label = format!("{name} ({k} network{})", if k == 1 { "" } else { "s" });
                cdf_line(label, i, &networks.iter().map(pick).collect::<Vec<_>>())
            })
            .collect();
        lines.push(live_line(d, live, variants.len()));
        LineChart {
            title,
            x_label: x.into(),
            y_label: "fraction".into(),
            lines,
            y_max: Some(1.0),
            marker: None,
            legend: Legend::LowerRight,
        }
    };
    let mut out = Vec::new();
    for size in live.sizes() {
        out.push(Named {
            stem: format!("live_ttlb_{size}"),
            figure: Figure::Lines(chart(
                format!(
                    "Time to last byte, {}: onionlab and the live network",
                    size_label(size)
                ),
                "time to last byte (s)",
                &|n| n.ttlb.get(&size).cloned().unwrap_or_default(),
                &live.time_to_last_byte_s[&size.to_string()],
            )),
            caption: "OnionPerf-like clients after the bootstrap period; a band is the 95% \
                      interval of the mean over networks."
                .into(),
        });
    }
    out.push(Named {
        stem: "live_circuit_build".into(),
        figure: Figure::Lines(chart(
            "Circuit build time: onionlab and the live network".into(),
            "circuit build time (s)",
            &|n| n.circuit_build.clone(),
            &live.circuit_build_time_s,
        )),
        caption: "Circuits that carried a successful measurement download.".into(),
    });
    if let Some(d) = &live.circuit_round_trip_s {
        out.push(Named {
            stem: "live_circuit_round_trip".into(),
            figure: Figure::Lines(chart(
                "Circuit round trip: onionlab and the live network".into(),
                "request to first byte (s)",
                &|n| n.round_trip.clone(),
                d,
            )),
            caption: "From a successful measurement download's request to its first byte: one \
                      round trip over the circuit and the server's answer."
                .into(),
        });
    }
    if let Some(d) = &live.throughput_mbit_s {
        out.push(Named {
            stem: "live_throughput".into(),
            figure: Figure::Lines(chart(
                "Throughput: onionlab and the live network".into(),
                "throughput between the 0.5th and 1st MiB (Mbit/s)",
                &|n| n.throughput.clone(),
                d,
            )),
            caption: "Successful 1 MiB and 5 MiB measurement downloads, 4,194,304 bits over the \
                      time from their 524,288th to their 1,048,576th byte, as Tor Metrics \
                      computes it."
                .into(),
        });
    }
    out
}

/// `live.csv`: per variant and statistic, the model's mean and interval and the live value,
/// with six decimals as every onionlab CSV; an empty cell where there is no value.
pub(crate) fn rows_csv(variants: &[(String, Vec<LiveRow>)]) -> Result<Vec<u8>, csv::Error> {
    let mut w = csv::WriterBuilder::new()
        .terminator(csv::Terminator::Any(b'\n'))
        .from_writer(Vec::new());
    w.write_record([
        "variant",
        "statistic",
        "networks",
        "model_mean",
        "model_ci_low",
        "model_ci_high",
        "live",
        "difference_pct",
    ])?;
    let cell = |x: Option<f64>| x.filter(|x| x.is_finite()).map(fixed).unwrap_or_default();
    for (name, rows) in variants {
        for r in rows {
            w.write_record([
                name.clone(),
                r.statistic.clone(),
                r.model.k.to_string(),
                cell(Some(r.model.mean)),
                cell(r.model.low()),
                cell(r.model.high()),
                cell(Some(r.live)),
                cell(Some(r.difference_pct())),
            ])?;
        }
    }
    w.into_inner().map_err(|e| e.into_error().into())
}

/// Writes `live.csv`, the figures and `index.html` into `out` for each variant's networks;
/// returns the page.
pub fn write_live_page(
    out: &Path,
    title: &str,
    about: &str,
    variants: &[(String, Vec<RunData>)],
    live: &LiveData,
) -> Result<PathBuf, ReportError> {
    let dir = OutputDir::create(out)?;
    let samples: Vec<(String, Vec<NetworkSample>)> = (variants.iter())
        .map(|(name, runs)| (name.clone(), runs.iter().map(NetworkSample::of).collect()))
        .collect();
    let rows: Vec<(String, Vec<LiveRow>)> = (samples.iter())
        .map(|(name, networks)| (name.clone(), compare(networks, live)))
        .collect();
    let csv = rows_csv(&rows).map_err(|source| ReportError::Csv {
        path: out.join(LIVE_CSV),
        source,
    })?;
    dir.write_bytes(LIVE_CSV, &csv)?;
    let raster = Rasterizer::new();
    let (_, figures_html) = write_figures(&figures(&samples, live), &dir, &raster)?;
    let mut html = page_start(title);
    let _ = writeln!(html, "<p>{}</p>", html_escape(about));
    let mut header = vec!["statistic".to_string(), "live".to_string()];
    header.extend(rows.iter().map(|(name, _)| format!("{name} (mean ± 95%)")));
    let statistics = rows.first().map(|(_, r)| r.len()).unwrap_or(0);
    let table: Vec<Vec<String>> = (0..statistics)
        .map(|i| {
            let first = &rows[0].1[i];
            let mut row = vec![first.statistic.clone(), format!("{:.3}", first.live)];
            for (_, r) in &rows {
                let r = &r[i];
                row.push(match r.model.half_width {
                    Some(h) => {
                        format!("{:.3} ± {h:.3} ({:+.0}%)", r.model.mean, r.difference_pct())
                    }
                    None => format!("{:.3} ({:+.0}%)", r.model.mean, r.difference_pct()),
                });
            }
            row
        })
        .collect();
    html.push_str(&html_table(&header, &table));
    for (name, networks) in &samples {
        let _ = writeln!(
            html,
            "<p class=\"note\">{}: {} networks; measurement downloads {}.</p>",
            html_escape(name),
            networks.len(),
            networks
                .iter()
                .map(|n| format!("{} ({} failed)", n.downloads, n.errors))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let _ = writeln!(
        html,
        "<p class=\"note\">The table is also in <a href=\"{LIVE_CSV}\">{LIVE_CSV}</a>.</p>"
    );
    html.push_str(&figures_html);
    html.push_str(&font_note(&raster));
    html.push_str("</body>\n</html>\n");
    dir.write_bytes(LIVE_HTML, html.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live() -> LiveData {
        LiveData::parse(
            r#"{"period": {"from": "2019-01-01", "to": "2019-12-31"},
                "quantiles": [0.1, 0.5, 0.9],
                "time_to_last_byte_s": {"1000": {"count": 9, "min": 0.5, "max": 9,
                                                  "values": [1.0, 2.0, 4.0]}},
                "circuit_build_time_s": {"count": 9, "min": 0.1, "max": 3,
                                         "values": [0.5, 1.0, 2.0]},
                "circuit_round_trip_s": {"count": 9, "min": 0.1, "max": 2,
                                         "values": [0.2, 0.4, 0.8]},
                "throughput_mbit_s": {"count": 9, "min": 1, "max": 9,
                                      "values": [2.0, 4.0, 8.0]},
                "daily_downloads": [{"date": "2019-01-01", "requests": 90, "timeouts": 8,
                                     "failures": 2},
                                    {"date": "2019-01-02", "requests": 10, "timeouts": 0,
                                     "failures": 0}]}"#,
            "t.json",
        )
        .unwrap()
    }

    /// Worked by hand: network A's five 1000-byte downloads have nearest-rank median 3 and p90
    /// 5; network B's have 5 and 7. The mean medians are 4 and 6, each with half-width
    /// t(0.975, 1) · sd / √2 = 12.706 · √2 / √2 = 12.706; the live median is 2, p90 4.
    #[test]
    fn the_comparison_matches_a_hand_computed_example() {
        let a = NetworkSample {
            ttlb: BTreeMap::from([(1000, vec![1.0, 2.0, 3.0, 4.0, 5.0])]),
            circuit_build: vec![0.5, 1.5],
            round_trip: vec![0.3, 0.5, 0.7],
            throughput: vec![9.0, 2.0, 6.0, 3.0, 8.0],
            downloads: 6,
            errors: 1,
        };
        let b = NetworkSample {
            ttlb: BTreeMap::from([(1000, vec![3.0, 4.0, 5.0, 6.0, 7.0])]),
            circuit_build: vec![1.0, 2.0],
            round_trip: vec![0.1, 0.3],
            throughput: vec![5.0, 4.0],
            downloads: 5,
            errors: 0,
        };
        let rows = compare(&[a, b], &live());
        let names: Vec<&str> = rows.iter().map(|r| r.statistic.as_str()).collect();
        assert_eq!(
            names,
            [
                "time to last byte, 1000 B, median (s)",
                "time to last byte, 1000 B, p90 (s)",
                "circuit build time, median (s)",
                "circuit build time, p90 (s)",
                "circuit round trip (request to first byte), median (s)",
                "circuit round trip (request to first byte), p90 (s)",
                "throughput, 0.5 to 1 MiB, median (Mbit/s)",
                "throughput, 0.5 to 1 MiB, p10 (Mbit/s)",
                "downloads timed out or failed (share)",
            ]
        );
        let close = |x: f64, y: f64| (x - y).abs() < 1e-9;
        assert!(close(rows[0].model.mean, 4.0) && close(rows[0].live, 2.0));
        assert!((rows[0].model.half_width.unwrap() - 12.706).abs() < 1e-3);
        assert!(close(rows[0].difference_pct(), 100.0));
        assert!(close(rows[1].model.mean, 6.0) && close(rows[1].live, 4.0));
        // Build times: nearest-rank medians 0.5 and 1.0, p90s 1.5 and 2.0.
        assert!(close(rows[2].model.mean, 0.75) && close(rows[2].live, 1.0));
        assert!(close(rows[3].model.mean, 1.75) && close(rows[3].live, 2.0));
        // Round trips: nearest-rank medians 0.5 and 0.1, p90s 0.7 and 0.3.
        assert!(close(rows[4].model.mean, 0.3) && close(rows[4].live, 0.4));
        assert!(close(rows[5].model.mean, 0.5) && close(rows[5].live, 0.8));
        // Throughput: nearest-rank medians 6 and 4, 10th percentiles 2 and 4 (the lowest of
        // each), against the live 4 and 2.
        assert!(close(rows[6].model.mean, 5.0) && close(rows[6].live, 4.0));
        assert!(close(rows[7].model.mean, 3.0) && close(rows[7].live, 2.0));
        // Errors: 1/6 and 0/5, against 10 of 100 live requests.
        assert!(close(rows[8].model.mean, 1.0 / 12.0) && close(rows[8].live, 0.1));
        let csv = String::from_utf8(rows_csv(&[("as-generated".into(), rows)]).unwrap()).unwrap();
        assert!(
            csv.contains(
                "as-generated,\"time to last byte, 1000 B, median (s)\",2,4.000000,-8.706"
            ),
            "{csv}"
        );
    }

    #[test]
    fn live_quantiles_interpolate_between_levels_and_stay_within_them() {
        let l = live();
        let d = &l.circuit_build_time_s;
        assert_eq!(l.quantile(d, 0.5), 1.0);
        assert!((l.quantile(d, 0.7) - 1.5).abs() < 1e-12);
        assert_eq!(l.quantile(d, 0.1), 0.5);
        assert!(l.quantile(d, 0.05).is_nan() && l.quantile(d, 0.95).is_nan());
    }

    #[test]
    fn malformed_live_files_are_refused_with_the_field() {
        let bad = [
            (r#""quantiles": [0.5, 0.25, 0.9]"#, "quantiles"),
            (r#""quantiles": [0, 0.5, 0.9]"#, "quantiles"),
        ];
        let good = r#"{"period": {"from": "a", "to": "b"}, "quantiles": [0.25, 0.5, 0.9],
            "time_to_last_byte_s": {"1000": {"count": 1, "min": 0, "max": 1, "values": [1, 2, 3]}},
            "circuit_build_time_s": {"count": 1, "min": 0, "max": 1, "values": [1, 2, 3]},
            "daily_downloads": []}"#;
        assert!(LiveData::parse(good, "g.json").is_ok());
        for (q, field) in bad {
            let text = good.replace(r#""quantiles": [0.25, 0.5, 0.9]"#, q);
            let e = LiveData::parse(&text, "b.json").unwrap_err();
            assert!(e.starts_with("b.json: ") && e.contains(field), "{e}");
        }
        let short = good.replacen("[1, 2, 3]", "[1, 2]", 1);
        let e = LiveData::parse(&short, "s.json").unwrap_err();
        assert!(e.contains("time_to_last_byte_s.1000: 2 values"), "{e}");
        let falling = good.replacen("[1, 2, 3]", "[3, 2, 1]", 1);
        assert!(LiveData::parse(&falling, "f.json")
            .unwrap_err()
            .contains("not decrease"));
    }

    /// The shipped 2019 file parses and holds the quartiles the artifact it comes from
    /// publishes (1.23 s, 3.35 s and 11.06 s median time to last byte; 1.08 s build time).
    #[test]
    fn the_shipped_2019_data_parses_with_its_published_medians() {
        let text = include_str!("../../../data/live/tor-metrics-2019.json");
        let l = LiveData::parse(text, "tor-metrics-2019.json").unwrap();
        assert_eq!(l.sizes(), [51_200, 1_048_576, 5_242_880]);
        let med = |s: &str| l.quantile(&l.time_to_last_byte_s[s], 0.5);
        assert_eq!(
            (med("51200"), med("1048576"), med("5242880")),
            (1.23, 3.35, 11.06)
        );
        assert_eq!(l.quantile(&l.circuit_build_time_s, 0.5), 1.08);
        let round_trip = l.circuit_round_trip_s.as_ref().unwrap();
        assert_eq!(l.quantile(round_trip, 0.5), 0.40);
        let throughput = l.throughput_mbit_s.as_ref().unwrap();
        assert_eq!(
            (l.quantile(throughput, 0.5), l.quantile(throughput, 0.1)),
            (4.194, 1.712)
        );
        assert_eq!(throughput.count, 17_438 + 8_699);
        assert!((l.error_rate() - 12_292.0 / 144_894.0).abs() < 1e-12);
    }
}
