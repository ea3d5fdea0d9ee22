//! Chosen relays over time: which relays a report plots on their own, checking that the runs
//! have them, and their figures.
//!
//! Made for experiments about one relay, such as the socket exhaustion attack: the victim's
//! throughput and open sockets per second show what the attack did and when. The plot of the
//! busiest relays cannot show it, since a victim starved by the attack drops out of it. The
//! relays come from run.json's `plot_relays` (the scenario's attack victims and
//! `report.relays`) and from the caller ([`ReportOptions`](crate::ReportOptions)).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::analysis::MIB;
use crate::figures::{bootstrap_end, file_safe, mean_series, trial_name, Named};
use crate::load::{Input, RunData};
use crate::output::{ReportError, RELAYS_CSV};
use crate::plot::{Figure, Legend, Line, LineChart};
use crate::records::RelaySample;

/// Most relay names an error lists: enough to show how names are spelled, few enough to read.
const NAMES_SHOWN: usize = 8;

/// A relay to plot and where its name came from, for error messages.
struct Wanted {
    name: String,
    /// Named in a run.json's `plot_relays` rather than by the caller.
    from_run: bool,
}

/// The relays to plot: every run's `plot_relays` in run order, then `extra`; each name once,
/// where it first appears.
fn wanted<'a>(runs: impl IntoIterator<Item = &'a RunData>, extra: &[String]) -> Vec<Wanted> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    let from_runs = runs
        .into_iter()
        .flat_map(|r| r.info.plot_relays.iter().map(|n| (n, true)));
    for (name, from_run) in from_runs.chain(extra.iter().map(|n| (n, false))) {
        if seen.insert(name.clone()) {
            out.push(Wanted {
                name: name.clone(),
                from_run,
            });
        }
    }
    out
}

/// File stems for the relays' figures, `<prefix><name>`, made file-safe and then unique (two
/// names may differ only in characters that are not safe in a file name).
fn stems(prefix: &str, wanted: &[Wanted]) -> Vec<String> {
    let mut used = BTreeSet::new();
    wanted
        .iter()
        .map(|w| {
            let base = format!("{prefix}{}", file_safe(&w.name));
            let mut stem = base.clone();
            let mut n = 2;
            while !used.insert(stem.clone()) {
                stem = format!("{base}-{n}");
                n += 1;
            }
            stem
        })
        .collect()
}

fn has_relay(run: &RunData, name: &str) -> bool {
    run.relays.iter().any(|r| r.relay == name)
}

/// Whether any of `runs` measured relays at all: a run stopped before its first second has
/// an empty relays.csv, which says nothing about which relays exist.
fn any_samples<'a>(runs: impl IntoIterator<Item = &'a RunData>) -> bool {
    runs.into_iter().any(|r| !r.relays.is_empty())
}

/// Why `w` cannot be plotted from `runs` (`absent` says where it is missing), in words that
/// show which names would do.
fn unknown_relay(w: &Wanted, runs: &[&RunData], absent: &str) -> String {
    let names: BTreeSet<&str> = runs
        .iter()
        .flat_map(|r| r.relays.iter().map(|s| s.relay.as_str()))
        .collect();
    let origin = if w.from_run {
        " (named in run.json's plot_relays)"
    } else {
        ""
    };
    let mut shown: Vec<&str> = names.iter().take(NAMES_SHOWN).copied().collect();
    let list = if names.len() > NAMES_SHOWN {
        format!(
            "{} and {} more",
            shown.join(", "),
            names.len() - NAMES_SHOWN
        )
    } else {
        let last = shown.pop().unwrap_or_default();
        if shown.is_empty() {
            last.to_string()
        } else {
            format!("{} and {last}", shown.join(", "))
        }
    };
    let hint = names
        .iter()
        .find(|n| n.eq_ignore_ascii_case(&w.name))
        .map(|n| format!("; did you mean {n:?}? (names are case-sensitive)"))
        .unwrap_or_default();
    format!(
        "cannot plot relay {:?}{origin}: {absent}; the relays there are {list}{hint}",
        w.name
    )
}

/// One relay's value in each second of one run; seconds without a value are absent.
fn per_second(
    run: &RunData,
    relay: &str,
    value: impl Fn(&RelaySample) -> Option<f64>,
) -> BTreeMap<u64, f64> {
    run.relays
        .iter()
        .filter(|r| r.relay == relay)
        .filter_map(|r| Some((r.second, value(r)?)))
        .collect()
}

fn written(r: &RelaySample) -> Option<f64> {
    Some(r.bytes_written as f64 / MIB)
}

fn read(r: &RelaySample) -> Option<f64> {
    Some(r.bytes_read as f64 / MIB)
}

fn sockets(r: &RelaySample) -> Option<f64> {
    r.open_sockets.map(f64::from)
}

/// Each trial faintly (when there are several) under the mean over trials with its 95% band;
/// a single run is its own line.
fn trials_and_mean(label: &str, color: usize, per_trial: &[BTreeMap<u64, f64>]) -> Vec<Line> {
    let mut lines = Vec::new();
    if per_trial.len() > 1 {
        lines.extend(per_trial.iter().map(|t| Line {
            label: String::new(),
            color,
            points: t.iter().map(|(s, v)| (*s as f64, *v)).collect(),
            band: Vec::new(),
            faint: true,
            markers: false,
        }));
    }
    lines.push(mean_series(label.to_string(), color, per_trial));
    lines
}

fn over_time(
    title: String,
    y_label: &str,
    lines: Vec<Line>,
    marker: Option<(f64, String)>,
    legend: Legend,
) -> Figure {
    Figure::Lines(LineChart {
        title,
        x_label: "simulated time (s)".into(),
        y_label: y_label.into(),
        lines,
        y_max: None,
        marker,
        legend,
    })
}

/// " (mean of K trials, 95% CI shaded)" for several runs.
fn mean_note(k: usize) -> String {
    if k > 1 {
        format!(" (mean of {k} trials, 95% CI shaded)")
    } else {
        String::new()
    }
}

const SOCKETS_CAPTION: &str = "Sockets the relay held open at the end of each simulated \
second; at its connection limit a relay refuses new connections.";

/// The relays' figures and what the page should say about relays it could not plot in full.
#[derive(Default)]
pub(crate) struct RelayPlots {
    pub figures: Vec<Named>,
    pub notes: Vec<String>,
}

/// For `report`: per relay, throughput (bytes written and read) and open sockets over time.
///
/// A relay that no run of `input` has is an error ([`ReportError::Invalid`], naming the relay
/// and relays that exist) unless the runs measured no relay at all; one missing from some
/// trials is plotted from the others, with a note.
pub(crate) fn report_relays(input: &Input, extra: &[String]) -> Result<RelayPlots, ReportError> {
    let runs = input.runs();
    let wanted = wanted(runs, extra);
    let mut out = RelayPlots::default();
    if wanted.is_empty() {
        return Ok(out);
    }
    let all: Vec<&RunData> = runs.iter().collect();
    if !any_samples(runs) {
        out.notes.push(format!(
            "relays.csv holds no samples (the run stopped before its first simulated second), \
             so {} cannot be plotted.",
            quoted_list(wanted.iter().map(|w| w.name.as_str()))
        ));
        return Ok(out);
    }
    let stems = stems("relay_", &wanted);
    for (w, stem) in wanted.iter().zip(&stems) {
        let with: Vec<&RunData> = all
            .iter()
            .copied()
            .filter(|r| has_relay(r, &w.name))
            .collect();
        if with.is_empty() {
            let (path, absent) = match input {
                Input::Run(run) => (
                    run.dir.join(RELAYS_CSV),
                    "there is no relay of that name in relays.csv".to_string(),
                ),
                Input::Trials { dir, .. } => (
                    dir.clone(),
                    format!(
                        "there is no relay of that name in relays.csv of any of the {} trials",
                        runs.len()
                    ),
                ),
            };
            return Err(ReportError::Invalid {
                path,
                message: unknown_relay(w, &all, &absent),
            });
        }
        if with.len() < runs.len() {
            let missing: Vec<String> = all
                .iter()
                .filter(|r| !has_relay(r, &w.name))
                .map(|r| trial_name(r))
                .collect();
            out.notes.push(format!(
                "Relay {:?} is not in relays.csv of {}; its plots are of the other trials.",
                w.name,
                missing.join(", ")
            ));
        }
        let k = with.len();
        let note = mean_note(k);
        let marker = bootstrap_end(with[0]);
        let series = |value: fn(&RelaySample) -> Option<f64>| -> Vec<BTreeMap<u64, f64>> {
            with.iter().map(|r| per_second(r, &w.name, value)).collect()
        };
        let mut lines = trials_and_mean("written", 0, &series(written));
        lines.extend(trials_and_mean("read", 1, &series(read)));
        let how = if k > 1 {
            format!(
                " Bold: the mean over the {k} trials, with its 95% Student-t interval shaded; \
                 faint: each trial."
            )
        } else {
            String::new()
        };
        out.figures.push(Named {
            stem: format!("{stem}_throughput"),
            figure: over_time(
                format!("Relay {} over time: throughput{note}", w.name),
                "MiB/s",
                lines,
                marker.clone(),
                Legend::UpperRight,
            ),
            caption: format!(
                "Bytes relay {} wrote and read in each simulated second.{how}",
                w.name
            ),
        });
        let socket_series: Vec<_> = series(sockets)
            .into_iter()
            .filter(|t| !t.is_empty())
            .collect();
        if socket_series.is_empty() {
            out.notes.push(format!(
                "Relay {:?}: open sockets were not measured (emulated runs report only byte \
                 counts), so only its throughput is plotted.",
                w.name
            ));
            continue;
        }
        let k = socket_series.len();
        out.figures.push(Named {
            stem: format!("{stem}_sockets"),
            figure: over_time(
                format!("Relay {} over time: open sockets{}", w.name, mean_note(k)),
                "open sockets",
                trials_and_mean("open sockets", 0, &socket_series),
                marker,
                Legend::UpperLeft,
            ),
            caption: format!(
                "{SOCKETS_CAPTION}{}",
                if k > 1 {
                    format!(
                        " Bold: the mean over the {k} trials, with its 95% Student-t interval \
                         shaded; faint: each trial."
                    )
                } else {
                    String::new()
                }
            ),
        });
    }
    Ok(out)
}

/// `"a"`, `"a" and "b"`, `"a", "b" and "c"`.
fn quoted_list<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let mut q: Vec<String> = names.map(|n| format!("{n:?}")).collect();
    let last = q.pop().unwrap_or_default();
    if q.is_empty() {
        last
    } else {
        format!("{} and {last}", q.join(", "))
    }
}

/// For `compare`: per relay, every input that has it overlaid (bytes written, then open
/// sockets), each as the mean over its trials with the 95% band.
///
/// The relays are every input's `plot_relays` and `extra`. A relay missing from some inputs is
/// plotted for the others, with a note; one that no input has is an error
/// ([`ReportError::Invalid`] on `out`) unless no input measured relays at all.
pub(crate) fn compare_relays(
    inputs: &[(String, Input)],
    extra: &[String],
    out_dir: &Path,
) -> Result<RelayPlots, ReportError> {
    let wanted = wanted(inputs.iter().flat_map(|(_, i)| i.runs()), extra);
    let mut out = RelayPlots::default();
    if wanted.is_empty() {
        return Ok(out);
    }
    let all: Vec<&RunData> = inputs.iter().flat_map(|(_, i)| i.runs()).collect();
    if !any_samples(all.iter().copied()) {
        out.notes.push(format!(
            "No input's relays.csv holds samples, so {} cannot be plotted.",
            quoted_list(wanted.iter().map(|w| w.name.as_str()))
        ));
        return Ok(out);
    }
    let any_trials = inputs.iter().any(|(_, i)| i.runs().len() > 1);
    let note = if any_trials {
        " (trials: mean, 95% CI shaded)"
    } else {
        ""
    };
    let marker = inputs
        .first()
        .and_then(|(_, i)| i.runs().first())
        .and_then(bootstrap_end);
    let stems = stems("compare_relay_", &wanted);
    for (w, stem) in wanted.iter().zip(&stems) {
        // (input index, label, the input's runs that have the relay)
        let mut having: Vec<(usize, &str, Vec<&RunData>)> = Vec::new();
        let mut absent = Vec::new();
        for (i, (label, input)) in inputs.iter().enumerate() {
            let with: Vec<&RunData> = input
                .runs()
                .iter()
                .filter(|r| has_relay(r, &w.name))
                .collect();
            if with.is_empty() {
                absent.push(format!("{label:?}"));
                continue;
            }
            if with.len() < input.runs().len() {
                let missing: Vec<String> = input
                    .runs()
                    .iter()
                    .filter(|r| !has_relay(r, &w.name))
                    .map(trial_name)
                    .collect();
                out.notes.push(format!(
                    "Relay {:?} is not in relays.csv of {} of {label:?}; that input's mean is \
                     over its other trials.",
                    w.name,
                    missing.join(", ")
                ));
            }
            having.push((i, label, with));
        }
        if having.is_empty() {
            let dirs: Vec<String> = inputs
                .iter()
                .map(|(l, i)| format!("{l:?} ({})", i.dir().display()))
                .collect();
            return Err(ReportError::Invalid {
                path: out_dir.to_path_buf(),
                message: unknown_relay(
                    w,
                    &all,
                    &format!(
                        "there is no relay of that name in relays.csv of any input compared ({})",
                        dirs.join(", ")
                    ),
                ),
            });
        }
        if !absent.is_empty() {
            out.notes.push(format!(
                "Relay {:?} is not in relays.csv of {}, so its plots leave {} out.",
                w.name,
                absent.join(", "),
                if absent.len() == 1 {
                    "that input"
                } else {
                    "those inputs"
                }
            ));
        }
        let lines = |value: fn(&RelaySample) -> Option<f64>| -> Vec<Line> {
            having
                .iter()
                .filter_map(|(i, label, runs)| {
                    let per_trial: Vec<BTreeMap<u64, f64>> = runs
                        .iter()
                        .map(|r| per_second(r, &w.name, value))
                        .filter(|t| !t.is_empty())
                        .collect();
                    // Colours follow the input, as in every other comparison plot.
                    (!per_trial.is_empty()).then(|| mean_series(label.to_string(), *i, &per_trial))
                })
                .collect()
        };
        out.figures.push(Named {
            stem: format!("{stem}_throughput"),
            figure: over_time(
                format!("Relay {} over time: bytes written{note}", w.name),
                "MiB/s written",
                lines(written),
                marker.clone(),
                Legend::UpperRight,
            ),
            caption: format!(
                "Bytes relay {} wrote in each simulated second, one line per input.",
                w.name
            ),
        });
        let socket_lines = lines(sockets);
        let unmeasured: Vec<String> = having
            .iter()
            .filter(|(i, _, _)| !socket_lines.iter().any(|l| l.color == *i))
            .map(|(_, label, _)| format!("{label:?}"))
            .collect();
        if !unmeasured.is_empty() {
            out.notes.push(format!(
                "Relay {:?}: open sockets were not measured in {} (emulated runs report only \
                 byte counts).",
                w.name,
                unmeasured.join(", ")
            ));
        }
        if socket_lines.is_empty() {
            continue;
        }
        out.figures.push(Named {
            stem: format!("{stem}_sockets"),
            figure: over_time(
                format!("Relay {} over time: open sockets{note}", w.name),
                "open sockets",
                socket_lines,
                marker.clone(),
                Legend::UpperLeft,
            ),
            caption: SOCKETS_CAPTION.into(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    use crate::records::RunInfo;

    fn run(trial: &str, plot: &[&str], samples: Vec<RelaySample>) -> RunData {
        let info: RunInfo = serde_json::from_value(serde_json::json!({
            "scenario_name": "attack", "scenario": {}, "seed": 1, "version": "0",
            "threads": 1, "sim_seconds": 3.0, "bootstrap_seconds": 0.0, "wall_seconds": 1.0,
            "speed": 3.0, "events": 0, "rounds": 0, "events_per_sec": 0.0,
            "peak_rss_bytes": 0, "workers": [], "complete": true, "mode": "simulation",
            "interrupted_reason": null, "plot_relays": plot,
        }))
        .unwrap();
        RunData {
            dir: PathBuf::from("/runs").join(trial),
            info,
            downloads: Vec::new(),
            relays: samples,
            circuits: Vec::new(),
        }
    }

    fn sample(relay: &str, second: u64, mib: u64, sockets: Option<u32>) -> RelaySample {
        RelaySample {
            relay: relay.into(),
            second,
            bytes_read: mib * 2 * MIB as u64,
            bytes_written: mib * MIB as u64,
            open_sockets: sockets,
            ..RelaySample::default()
        }
    }

    fn lines(figure: &Figure) -> &[Line] {
        match figure {
            Figure::Lines(c) => &c.lines,
            _ => panic!("not a line chart"),
        }
    }

    /// The bold line of a trials figure passes through the mean of the trials at each second.
    #[test]
    fn trials_are_drawn_faintly_under_their_mean() {
        let runs: Vec<RunData> = (1..=3)
            .map(|k| {
                let samples = (1..=3)
                    .map(|s| sample("v", s, k * s, Some((10 * k) as u32)))
                    .chain(std::iter::once(sample("other", 1, 1, Some(1))))
                    .collect();
                run(&format!("trial-{k}"), &["v"], samples)
            })
            .collect();
        let input = Input::Trials {
            dir: PathBuf::from("/runs"),
            name: "attack".into(),
            runs,
        };
        let plots = report_relays(&input, &[]).unwrap();
        assert!(plots.notes.is_empty(), "{:?}", plots.notes);
        let stems: Vec<&str> = plots.figures.iter().map(|f| f.stem.as_str()).collect();
        assert_eq!(stems, ["relay_v_throughput", "relay_v_sockets"]);

        let throughput = lines(&plots.figures[0].figure);
        // Written: three faint trials then the mean; read likewise.
        assert_eq!(throughput.len(), 8);
        let written = &throughput[3];
        assert!(throughput[..3].iter().all(|l| l.faint && l.color == 0));
        assert!(!written.faint && written.label == "written");
        // Trial k writes k*s MiB in second s: the mean over k = 1, 2, 3 is 2s.
        assert_eq!(written.points, [(1.0, 2.0), (2.0, 4.0), (3.0, 6.0)]);
        assert!(!written.band.is_empty());
        let read = &throughput[7];
        assert_eq!(read.label, "read");
        assert_eq!(read.points, [(1.0, 4.0), (2.0, 8.0), (3.0, 12.0)]);

        let sockets = lines(&plots.figures[1].figure);
        assert_eq!(sockets.len(), 4);
        assert_eq!(sockets[3].points, [(1.0, 20.0), (2.0, 20.0), (3.0, 20.0)]);
    }

    /// Without socket counts (an emulated run) only the throughput is plotted, with a note; a
    /// run with no relay samples at all cannot say which relays exist, so it is no error.
    #[test]
    fn missing_measurements_are_noted() {
        let emulated = run("emu", &[], vec![sample("v", 1, 1, None)]);
        let plots = report_relays(&Input::Run(emulated), &["v".into()]).unwrap();
        assert_eq!(plots.figures.len(), 1);
        assert_eq!(plots.figures[0].stem, "relay_v_throughput");
        assert!(plots.notes[0].contains("open sockets were not measured"));

        let empty = run("early", &["v"], Vec::new());
        let plots = report_relays(&Input::Run(empty), &[]).unwrap();
        assert!(plots.figures.is_empty());
        assert!(plots.notes[0].contains("no samples"), "{:?}", plots.notes);
    }

    /// Names that become the same file name still get files of their own.
    #[test]
    fn stems_are_unique() {
        let wanted: Vec<Wanted> = ["a b", "a_b", "a/b"]
            .iter()
            .map(|n| Wanted {
                name: n.to_string(),
                from_run: false,
            })
            .collect();
        assert_eq!(
            stems("relay_", &wanted),
            ["relay_a_b", "relay_a_b-2", "relay_a_b-3"]
        );
    }

    /// Long lists are cut short.
    #[test]
    fn unknown_relay_lists_a_few_names() {
        let samples = (0..20)
            .map(|i| sample(&format!("r{i:02}"), 1, 1, None))
            .collect();
        let r = run("one", &[], samples);
        let w = Wanted {
            name: "x".into(),
            from_run: false,
        };
        let msg = unknown_relay(&w, &[&r], "not here");
        assert!(
            msg.ends_with(
                "the relays there are r00, r01, r02, r03, r04, r05, r06, r07 and 12 more"
            ),
            "{msg}"
        );
    }
}
