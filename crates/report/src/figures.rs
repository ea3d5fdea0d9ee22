//! The figures of a report and of a comparison, as data ready to draw.

use std::collections::BTreeMap;

use crate::analysis::{self, size_label, MIB};
use crate::load::{Input, RunData};
use crate::plot::{BarChart, BarSeries, Figure, Legend, Line, LineChart};
use crate::records::StateSample;
use crate::stats::{ecdf, mean_cdf_band, mean_ci, thin, PLOT_POINTS};

/// A figure and the file stem it is written under (`<stem>.svg`, `<stem>.png`).
pub(crate) struct Named {
    pub stem: String,
    pub figure: Figure,
    /// How to read the figure, where its title cannot say it all; shown after the title in the
    /// page's caption. Empty for none.
    pub caption: String,
}

/// A CDF curve: the step ECDF for one run, or the mean CDF with its 95% band for trials.
pub(crate) fn cdf_line(label: String, color: usize, per_trial: &[Vec<f64>]) -> Line {
    if per_trial.len() == 1 {
        let points = thin(&ecdf(&per_trial[0]), PLOT_POINTS);
        let mut steps = Vec::with_capacity(points.len() * 2);
        let mut below = 0.0;
        for (x, f) in points {
            steps.push((x, below));
            steps.push((x, f));
            below = f;
        }
        return Line {
            label,
            color,
            points: steps,
            band: Vec::new(),
            faint: false,
            markers: false,
        };
    }
    let band = mean_cdf_band(per_trial);
    let points = band.iter().map(|p| (p.ci.mean, p.level)).collect();
    let mut polygon: Vec<(f64, f64)> = band
        .iter()
        .filter_map(|p| Some((p.ci.low()?, p.level)))
        .collect();
    polygon.extend(
        band.iter()
            .rev()
            .filter_map(|p| Some((p.ci.high()?, p.level))),
    );
    Line {
        label,
        color,
        points,
        band: polygon,
        faint: false,
        markers: false,
    }
}

/// A time series averaged over trials at each x, with its 95% band when there are trials.
pub(crate) fn mean_series(label: String, color: usize, per_trial: &[BTreeMap<u64, f64>]) -> Line {
    let mut xs: Vec<u64> = per_trial.iter().flat_map(|m| m.keys().copied()).collect();
    xs.sort_unstable();
    xs.dedup();
    let cis: Vec<(f64, crate::stats::MeanCi)> = xs
        .iter()
        .map(|x| {
            // A trial without a sample at x (it ended earlier) is left out there.
            let values: Vec<f64> = per_trial
                .iter()
                .map(|m| m.get(x).copied().unwrap_or(f64::NAN))
                .collect();
            (*x as f64, mean_ci(&values))
        })
        .collect();
    let mut band: Vec<(f64, f64)> = cis
        .iter()
        .filter_map(|(x, c)| Some((*x, c.low()?)))
        .collect();
    band.extend(cis.iter().rev().filter_map(|(x, c)| Some((*x, c.high()?))));
    Line {
        label,
        color,
        points: cis.iter().map(|(x, c)| (*x, c.mean)).collect(),
        band,
        faint: false,
        markers: false,
    }
}

fn cdf_chart(title: String, x_label: &str, lines: Vec<Line>) -> Figure {
    Figure::Lines(LineChart {
        title,
        x_label: x_label.to_string(),
        y_label: "fraction".to_string(),
        lines,
        y_max: Some(1.0),
        marker: None,
        legend: Legend::LowerRight,
    })
}

/// " (mean of K trials, 95% CI shaded)" when there are several runs.
fn trials_note(runs: &[RunData]) -> String {
    if runs.len() > 1 {
        format!(" (mean of {} trials, 95% CI shaded)", runs.len())
    } else {
        String::new()
    }
}

fn goodput_per_second(run: &RunData) -> BTreeMap<u64, f64> {
    analysis::goodput_series(run)
        .into_iter()
        .map(|(s, b)| (s, b as f64 / MIB))
        .collect()
}

fn bootstrap_marker(runs: &[RunData]) -> Option<(f64, String)> {
    bootstrap_end(runs.first()?)
}

/// The end of `run`'s bootstrap period as a marker for plots over time; none without one.
pub(crate) fn bootstrap_end(run: &RunData) -> Option<(f64, String)> {
    let b = run.info.bootstrap_seconds;
    (b > 0.0).then(|| (b, "end of bootstrap".to_string()))
}

type Pick = fn(&RunData, &dyn Fn(&str, u64) -> bool) -> Vec<f64>;

/// The figures of `onionlab report`, in page order.
pub(crate) fn report_figures(input: &Input) -> Vec<Named> {
    let runs = input.runs();
    let refs: Vec<&RunData> = runs.iter().collect();
    let groups = analysis::groups(&refs);
    let sizes = analysis::sizes(&refs);
    let note = trials_note(runs);
    let mut out = Vec::new();

    let by = |f: &dyn Fn(&RunData) -> Vec<f64>| -> Vec<Vec<f64>> { runs.iter().map(f).collect() };
    for (metric, name, pick) in [
        ("ttfb", "time to first byte", analysis::ttfb as Pick),
        ("ttlb", "time to last byte", analysis::ttlb),
    ] {
        let lines = groups
            .iter()
            .enumerate()
            .map(|(i, g)| cdf_line(g.clone(), i, &by(&|r| pick(r, &|gr: &str, _| gr == g))))
            .collect();
        out.push(Named {
            stem: format!("{metric}_cdf_by_group"),
            figure: cdf_chart(
                format!("CDF of {name} per client group{note}"),
                &format!("{name} (s)"),
                lines,
            ),
            caption: String::new(),
        });
        let lines = sizes
            .iter()
            .enumerate()
            .map(|(i, s)| {
                cdf_line(
                    size_label(*s),
                    i,
                    &by(&|r| pick(r, &|_: &str, sz| sz == *s)),
                )
            })
            .collect();
        out.push(Named {
            stem: format!("{metric}_cdf_by_size"),
            figure: cdf_chart(
                format!("CDF of {name} per download size{note}"),
                &format!("{name} (s)"),
                lines,
            ),
            caption: String::new(),
        });
    }

    let lines = groups
        .iter()
        .enumerate()
        .map(|(i, g)| {
            cdf_line(
                g.clone(),
                i,
                &by(&|r| analysis::client_medians(r, |gr| gr == g)),
            )
        })
        .collect();
    out.push(Named {
        stem: "client_median_ttlb_cdf".into(),
        figure: cdf_chart(
            format!("CDF of each client's median time to last byte{note}"),
            "median time to last byte (s)",
            lines,
        ),
        caption: String::new(),
    });

    out.push(Named {
        stem: "circuit_build_cdf".into(),
        figure: cdf_chart(
            format!("CDF of circuit build times{note}"),
            "circuit build time (s)",
            vec![cdf_line(
                "built circuits".into(),
                0,
                &by(&analysis::circuit_build_times),
            )],
        ),
        caption: String::new(),
    });

    let per_trial: Vec<BTreeMap<u64, f64>> = runs.iter().map(goodput_per_second).collect();
    out.push(Named {
        stem: "relay_goodput".into(),
        figure: Figure::Lines(LineChart {
            title: format!("Total relay goodput (bytes written by all relays){note}"),
            x_label: "simulated time (s)".into(),
            y_label: "MiB/s".into(),
            lines: vec![mean_series("all relays".into(), 0, &per_trial)],
            y_max: None,
            marker: bootstrap_marker(runs),
            legend: Legend::LowerRight,
        }),
        caption: String::new(),
    });

    if let Some(first) = runs.first() {
        let busiest = analysis::busiest_relays(first, 5);
        let lines = busiest
            .iter()
            .enumerate()
            .map(|(i, relay)| Line {
                label: relay.clone(),
                color: i,
                points: first
                    .relays
                    .iter()
                    .filter(|r| &r.relay == relay)
                    .map(|r| (r.second as f64, r.bytes_written as f64 / MIB))
                    .collect(),
                band: Vec::new(),
                faint: false,
                markers: false,
            })
            .collect();
        let which = if runs.len() > 1 {
            format!(" ({})", trial_name(first))
        } else {
            String::new()
        };
        out.push(Named {
            stem: "relay_throughput_busiest".into(),
            figure: Figure::Lines(LineChart {
                title: format!("Throughput of the {} busiest relays{which}", busiest.len()),
                x_label: "simulated time (s)".into(),
                y_label: "MiB/s written".into(),
                lines,
                y_max: None,
                marker: bootstrap_marker(runs),
                legend: Legend::UpperRight,
            }),
            caption: String::new(),
        });
    }
    out.extend(crate::cpu::cpu_figure(runs));

    out.push(Named {
        stem: "error_rates".into(),
        figure: error_bars(
            format!("Errors and timeouts per client group{note}"),
            &groups,
            vec![
                ("errors".into(), 0, runs, ErrorKind::Errors),
                ("timeouts".into(), 1, runs, ErrorKind::Timeouts),
            ],
        ),
        caption: String::new(),
    });

    let lines = runs
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let mut points = r.info.progress.clone();
            if points.is_empty() {
                points = vec![(0.0, 0.0), (r.info.wall_seconds, r.info.sim_seconds)];
            }
            Line {
                label: run_label(runs, r),
                color: i,
                points,
                band: Vec::new(),
                faint: false,
                markers: false,
            }
        })
        .collect();
    out.push(Named {
        stem: "diagnostics_progress".into(),
        figure: Figure::Lines(LineChart {
            title: "Simulated time against wall-clock time".into(),
            x_label: "wall-clock time (s)".into(),
            y_label: "simulated time (s)".into(),
            lines,
            y_max: None,
            marker: None,
            legend: Legend::UpperLeft,
        }),
        caption: String::new(),
    });

    // Runs that counted their network's state (simulations; emulations and older runs do
    // not) get their resident memory over simulated time, and what the network held last.
    let counted: Vec<(usize, &RunData)> = runs
        .iter()
        .enumerate()
        .filter(|(_, r)| !r.info.state.is_empty())
        .collect();
    if !counted.is_empty() {
        let lines = counted
            .iter()
            .map(|&(i, r)| Line {
                label: run_label(runs, r),
                color: i,
                points: (r.info.state.iter())
                    .map(|s| (s.sim_s, s.rss_bytes as f64 / MIB))
                    .collect(),
                band: Vec::new(),
                faint: false,
                markers: false,
            })
            .collect();
        let held: Vec<String> = counted
            .iter()
            .filter_map(|&(_, r)| {
                let s = r.info.state.last()?;
                let who = run_label(runs, r);
                Some(format!(
                    "{}at {:.0} s: {} client circuits, {} client channels, {} relay-to-relay \
                     channels, {} sockets, {} pending events, {} cells queued at relays{}",
                    if who.is_empty() {
                        who
                    } else {
                        format!("{who} ")
                    },
                    s.sim_s,
                    s.client_circuits,
                    s.client_channels,
                    s.relay_channels / 2,
                    s.sockets,
                    s.pending_events,
                    s.queued_cells,
                    last_stretch(&r.info.state)
                ))
            })
            .collect();
        out.push(Named {
            stem: "diagnostics_memory".into(),
            figure: Figure::Lines(LineChart {
                title: "Resident memory against simulated time".into(),
                x_label: "simulated time (s)".into(),
                y_label: "resident memory (MiB)".into(),
                lines,
                y_max: None,
                marker: None,
                legend: Legend::UpperLeft,
            }),
            caption: format!(
                "What the network held at the last count (counted every 10 simulated seconds; \
                 run.json's state has the whole series): {}.",
                held.join("; ")
            ),
        });
    }

    let workers = runs.iter().map(|r| r.info.workers.len()).max().unwrap_or(0);
    let blocked = |w: usize| -> Vec<f64> {
        runs.iter()
            .map(|r| {
                r.info.workers.get(w).map_or(f64::NAN, |w| {
                    let total = w.busy_s + w.blocked_s;
                    if total > 0.0 {
                        100.0 * w.blocked_s / total
                    } else {
                        f64::NAN
                    }
                })
            })
            .collect()
    };
    let cis: Vec<_> = (0..workers).map(|w| mean_ci(&blocked(w))).collect();
    out.push(Named {
        stem: "diagnostics_workers".into(),
        figure: Figure::Bars(BarChart {
            title: format!("Share of each worker's time blocked at the round barrier{note}"),
            y_label: "% of busy + blocked time".into(),
            categories: (0..workers).map(|w| format!("worker {}", w + 1)).collect(),
            series: vec![BarSeries {
                label: String::new(),
                color: 0,
                values: cis.iter().map(|c| Some(c.mean)).collect(),
                intervals: cis.iter().map(|c| Some((c.low()?, c.high()?))).collect(),
            }],
        }),
        caption: worker_caption(runs, workers),
    });
    out
}

/// A run's line label where several runs share a chart (none for a run alone).
fn run_label(runs: &[RunData], r: &RunData) -> String {
    if runs.len() > 1 {
        trial_name(r)
    } else {
        String::new()
    }
}

/// Each worker's busy and blocked seconds and the host rounds it ran for other workers (work
/// stealing), as means over the runs that had that worker.
fn worker_caption(runs: &[RunData], workers: usize) -> String {
    let parts: Vec<String> = (0..workers)
        .filter_map(|w| {
            let had: Vec<_> = runs.iter().filter_map(|r| r.info.workers.get(w)).collect();
            if had.is_empty() {
                return None;
            }
            let n = had.len() as f64;
            let busy = had.iter().map(|x| x.busy_s).sum::<f64>() / n;
            let blocked = had.iter().map(|x| x.blocked_s).sum::<f64>() / n;
            let stolen = had.iter().map(|x| x.stolen as f64).sum::<f64>() / n;
            Some(format!(
                "worker {}: busy {busy:.1} s, blocked {blocked:.1} s, {stolen:.0} host rounds \
                 taken from other workers",
                w + 1
            ))
        })
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!(
            "Per worker{}: {}.",
            if runs.len() > 1 {
                " (mean over runs)"
            } else {
                ""
            },
            parts.join("; ")
        )
    }
}

#[derive(Clone, Copy)]
pub(crate) enum ErrorKind {
    Errors,
    Timeouts,
    Both,
}

/// Bars of failure rates (% of measured downloads) per group; one series per entry, each a
/// set of runs averaged with a 95% whisker when there are several.
pub(crate) fn error_bars(
    title: String,
    groups: &[String],
    series: Vec<(String, usize, &[RunData], ErrorKind)>,
) -> Figure {
    let series = series
        .into_iter()
        .map(|(label, color, runs, kind)| {
            let cis: Vec<_> = groups
                .iter()
                .map(|g| {
                    let rates: Vec<f64> = runs
                        .iter()
                        .map(|r| {
                            let (errors, timeouts, n) = analysis::failures(r, g);
                            let failed = match kind {
                                ErrorKind::Errors => errors,
                                ErrorKind::Timeouts => timeouts,
                                ErrorKind::Both => errors + timeouts,
                            };
                            if n == 0 {
                                f64::NAN
                            } else {
                                100.0 * failed as f64 / n as f64
                            }
                        })
                        .collect();
                    mean_ci(&rates)
                })
                .collect();
            BarSeries {
                label,
                color,
                values: cis.iter().map(|c| Some(c.mean)).collect(),
                intervals: cis.iter().map(|c| Some((c.low()?, c.high()?))).collect(),
            }
        })
        .collect();
    Figure::Bars(BarChart {
        title,
        y_label: "% of downloads".into(),
        categories: groups.to_vec(),
        series,
    })
}

/// The directory name of a trial (`trial-3`), or its path when it has none.
pub(crate) fn trial_name(run: &RunData) -> String {
    run.dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| run.dir.display().to_string())
}

/// Characters safe in a file name on every platform; anything else becomes `_`.
pub(crate) fn file_safe(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The figures of a comparison: every input overlaid, one colour per input.
pub(crate) fn compare_figures(inputs: &[(String, Input)]) -> Vec<Named> {
    let all: Vec<&RunData> = inputs.iter().flat_map(|(_, i)| i.runs()).collect();
    let groups = analysis::groups(&all);
    let sizes = analysis::sizes(&all);
    let any_trials = inputs.iter().any(|(_, i)| i.runs().len() > 1);
    let note = if any_trials {
        " (trials: mean, 95% CI shaded)"
    } else {
        ""
    };
    let per_input = |f: &dyn Fn(&RunData) -> Vec<f64>| -> Vec<Line> {
        inputs
            .iter()
            .enumerate()
            .map(|(i, (label, input))| {
                let samples: Vec<Vec<f64>> = input.runs().iter().map(f).collect();
                cdf_line(label.clone(), i, &samples)
            })
            .collect()
    };
    let mut out = Vec::new();
    out.push(Named {
        stem: "compare_ttfb_cdf".into(),
        figure: cdf_chart(
            format!("CDF of time to first byte, all downloads{note}"),
            "time to first byte (s)",
            per_input(&|r| analysis::ttfb(r, &|_, _| true)),
        ),
        caption: String::new(),
    });
    for size in &sizes {
        out.push(Named {
            stem: format!(
                "compare_ttlb_cdf_{}",
                file_safe(&size_label(*size).replace(' ', ""))
            ),
            figure: cdf_chart(
                format!(
                    "CDF of time to last byte, {} downloads{note}",
                    size_label(*size)
                ),
                "time to last byte (s)",
                per_input(&|r| analysis::ttlb(r, &|_, s| s == *size)),
            ),
            caption: String::new(),
        });
    }
    for group in &groups {
        out.push(Named {
            stem: format!("compare_client_median_ttlb_cdf_{}", file_safe(group)),
            figure: cdf_chart(
                format!("CDF of per-client median time to last byte, group {group}{note}"),
                "median time to last byte (s)",
                per_input(&|r| analysis::client_medians(r, |g| g == group)),
            ),
            caption: String::new(),
        });
    }
    out.push(Named {
        stem: "compare_circuit_build_cdf".into(),
        figure: cdf_chart(
            format!("CDF of circuit build times{note}"),
            "circuit build time (s)",
            per_input(&analysis::circuit_build_times),
        ),
        caption: String::new(),
    });
    let lines = inputs
        .iter()
        .enumerate()
        .map(|(i, (label, input))| {
            let per_trial: Vec<_> = input.runs().iter().map(goodput_per_second).collect();
            mean_series(label.clone(), i, &per_trial)
        })
        .collect();
    out.push(Named {
        stem: "compare_relay_goodput".into(),
        figure: Figure::Lines(LineChart {
            title: format!("Total relay goodput{note}"),
            x_label: "simulated time (s)".into(),
            y_label: "MiB/s".into(),
            lines,
            y_max: None,
            marker: inputs.first().and_then(|(_, i)| bootstrap_marker(i.runs())),
            legend: Legend::UpperRight,
        }),
        caption: String::new(),
    });
    out.push(Named {
        stem: "compare_error_rates".into(),
        figure: error_bars(
            format!("Errors and timeouts per client group{note}"),
            &groups,
            inputs
                .iter()
                .enumerate()
                .map(|(i, (label, input))| (label.clone(), i, input.runs(), ErrorKind::Both))
                .collect(),
        ),
        caption: String::new(),
    });
    out.extend(crate::cpu::compare_cpu_figure(inputs));
    out
}

/// The cost of a run's last stretch between state samples (", 64.6 M events per simulated
/// second and 17.4 M per wall second since 150 s"), or nothing where the samples do not say
/// (run.json files written before they counted events).
fn last_stretch(state: &[StateSample]) -> String {
    let [.., a, b] = state else {
        return String::new();
    };
    let (sim, wall) = (b.sim_s - a.sim_s, b.wall_s - a.wall_s);
    if a.events == 0 || b.events <= a.events || sim <= 0.0 || wall <= 0.0 {
        return String::new();
    }
    let events = (b.events - a.events) as f64;
    format!(
        ", {:.1} M events per simulated second and {:.1} M per wall second since {:.0} s",
        events / sim / 1e6,
        events / wall / 1e6,
        a.sim_s
    )
}
