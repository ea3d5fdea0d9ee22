//! Where relays' modelled CPU time went: the busiest relays' mean split, for the report's plot,
//! the report's summary and summary.txt.
//!
//! Relays are ranked by their main thread's mean busy fraction, not by bytes, because the
//! main thread is what limits a relay: one saturated core caps what it forwards however many
//! cores its machine has, and relays carrying the same bytes can differ in CPU (exits do more
//! crypto per cell, TLS and kernel costs grow with channels and packets rather than bytes).

use std::collections::BTreeMap;

use crate::analysis::first_measured_second;
use crate::figures::Named;
use crate::load::RunData;
use crate::plot::{Figure, Segment, StackedBarChart};
use crate::records::RelaySample;

/// Relays in the plot: enough to see how the load spreads, few enough to read the names.
pub(crate) const CPU_PLOT_RELAYS: usize = 10;

/// One relay's CPU averaged over its measured seconds (fractions of a core, as in
/// [`CpuShare`](crate::CpuShare)).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct RelayCpu {
    pub relay: String,
    /// Seconds with a CPU measurement after bootstrap, of all trials together.
    pub seconds: u64,
    pub busy: f64,
    pub crypto: f64,
    pub kernel: f64,
    pub tls: f64,
    pub other: f64,
    pub workers: f64,
    pub onion_skins: f64,
}

/// Every relay with a CPU measurement among `samples`, busiest main thread first (ties by
/// name, so the order never depends on the order of the samples).
pub(crate) fn rank_cpu<'a>(samples: impl IntoIterator<Item = &'a RelaySample>) -> Vec<RelayCpu> {
    let mut sums = CpuSums::default();
    for s in samples {
        sums.add(s);
    }
    sums.ranked()
}

/// Each relay's CPU measurements summed, one sample at a time: what [`rank_cpu`] needs, kept
/// by a run while its samples stream to `relays.csv` (one entry per relay, whatever the
/// run's length).
#[derive(Clone, Debug, Default)]
pub(crate) struct CpuSums {
    sums: BTreeMap<String, RelayCpu>,
}

impl CpuSums {
    /// Adds one relay second (nothing if it has no CPU measurement). Sums are made in the
    /// order samples are added, which the files fix, so the means are the same on every run.
    pub(crate) fn add(&mut self, s: &RelaySample) {
        let Some(c) = &s.cpu else { return };
        if !self.sums.contains_key(&s.relay) {
            let zero = RelayCpu {
                relay: s.relay.clone(),
                ..Default::default()
            };
            self.sums.insert(s.relay.clone(), zero);
        }
        let r = self.sums.get_mut(&s.relay).expect("inserted above");
        r.seconds += 1;
        r.busy += c.busy;
        r.crypto += c.crypto;
        r.kernel += c.kernel;
        r.tls += c.tls;
        r.other += c.other;
        r.workers += c.workers;
        r.onion_skins += c.onion_skins as f64;
    }

    /// The relays' means, busiest main thread first.
    pub(crate) fn ranked(&self) -> Vec<RelayCpu> {
        let mut ranked: Vec<RelayCpu> = self
            .sums
            .values()
            .cloned()
            .map(|mut r| {
                let n = r.seconds as f64;
                for x in [
                    &mut r.busy,
                    &mut r.crypto,
                    &mut r.kernel,
                    &mut r.tls,
                    &mut r.other,
                    &mut r.workers,
                    &mut r.onion_skins,
                ] {
                    *x /= n;
                }
                r
            })
            .collect();
        ranked.sort_by(|a, b| b.busy.total_cmp(&a.busy).then(a.relay.cmp(&b.relay)));
        ranked
    }

    /// The line of summary.txt about CPU (see [`render_cpu_summary`]).
    pub(crate) fn summary_line(&self) -> String {
        match self.ranked().first() {
            Some(r) => format!(
                "Busiest relay CPU (mean over {} s after bootstrap): {}\n",
                r.seconds,
                describe(r)
            ),
            None => String::new(),
        }
    }
}

/// Whether any run measured CPU at all: only runs with a CPU model have the columns.
pub(crate) fn has_cpu(runs: &[RunData]) -> bool {
    runs.iter()
        .any(|r| r.relays.iter().any(|s| s.cpu.is_some()))
}

/// [`rank_cpu`] over the seconds after each run's bootstrap, the trials' seconds together.
fn rank_runs(runs: &[RunData]) -> Vec<RelayCpu> {
    rank_cpu(runs.iter().flat_map(|r| {
        let from = first_measured_second(r);
        r.relays.iter().filter(move |s| s.second >= from)
    }))
}

/// The busiest relay's split in words, e.g. `exit1: main thread 0.832 of a core (crypto 0.301,
/// kernel I/O 0.250, TLS 0.200, other 0.081); workers 0.120 cores, 3.2 onion skins/s`.
fn describe(r: &RelayCpu) -> String {
    format!(
        "{}: main thread {:.3} of a core (crypto {:.3}, kernel I/O {:.3}, TLS {:.3}, other {:.3}); \
         workers {:.3} cores, {:.1} onion skins/s",
        r.relay, r.busy, r.crypto, r.kernel, r.tls, r.other, r.workers, r.onion_skins
    )
}

/// The line of summary.txt about CPU: the relay with the busiest main thread over the seconds
/// from `from_second` on (the measured period, as for [`total_goodput`](crate::total_goodput))
/// and where its time went. Empty when no sample there has a CPU measurement, so the summary
/// of a run without a CPU model stays as it was.
pub fn render_cpu_summary(relays: &[RelaySample], from_second: u64) -> String {
    let mut sums = CpuSums::default();
    for s in relays.iter().filter(|s| s.second >= from_second) {
        sums.add(s);
    }
    sums.summary_line()
}

/// The report's summary line about CPU (HTML-escaped by the caller); `None` without CPU
/// measurements after bootstrap.
pub(crate) fn cpu_summary_line(runs: &[RunData]) -> Option<String> {
    let ranked = rank_runs(runs);
    let r = ranked.first()?;
    let over = if runs.len() > 1 {
        format!("the {} trials' seconds after bootstrap", runs.len())
    } else {
        "the seconds after bootstrap".to_string()
    };
    Some(format!(
        "Busiest relay CPU (mean over {over}): {}.",
        describe(r)
    ))
}

pub(crate) const CPU_CAPTION: &str =
    "Each relay's main thread as the mean fraction of a core it was \
busy per second after bootstrap, split into relay cell crypto, kernel I/O (system calls and \
the kernel's packet work), TLS (records on its channels) and other work (tor's bookkeeping); \
the number is its total. The thin bar below: the onion-skin worker threads' mean busy time, \
in cores. Relays ranked by the main thread's mean busy fraction.";

/// "Relay CPU: the busiest relays": the (up to) [`CPU_PLOT_RELAYS`] relays whose main thread
/// was busiest on average after bootstrap, for trials over their seconds together; `None`
/// for runs without CPU measurements, so their reports stay as they were.
pub(crate) fn cpu_figure(runs: &[RunData]) -> Option<Named> {
    if !has_cpu(runs) {
        return None;
    }
    let mut ranked = rank_runs(runs);
    ranked.truncate(CPU_PLOT_RELAYS);
    let which = if runs.len() > 1 {
        format!(" ({} trials together)", runs.len())
    } else {
        String::new()
    };
    let caption = if runs.len() > 1 {
        format!(
            "{CPU_CAPTION} Means over the seconds of all {} trials together.",
            runs.len()
        )
    } else {
        CPU_CAPTION.to_string()
    };
    Some(Named {
        stem: "relay_cpu_busiest".into(),
        figure: split_chart(
            format!("Relay CPU: the busiest relays{which}"),
            ranked.iter().map(|r| (r.relay.clone(), r)).collect(),
        ),
        caption,
    })
}

/// "Relay CPU by variant": for each compared run or set of trials, its busiest relay's mean
/// split (over its trials' seconds after bootstrap together), one bar each, so a change of
/// CPU profile shows where the time moved and whether the bottleneck moved to another relay.
/// `None` unless some input has CPU measurements.
pub(crate) fn compare_cpu_figure(inputs: &[(String, crate::Input)]) -> Option<Named> {
    let busiest: Vec<(String, RelayCpu)> = inputs
        .iter()
        .filter_map(|(label, input)| {
            let r = rank_runs(input.runs()).into_iter().next()?;
            Some((format!("{label} ({})", r.relay), r))
        })
        .collect();
    if busiest.is_empty() {
        return None;
    }
    Some(Named {
        stem: "compare_relay_cpu".into(),
        figure: split_chart(
            "Relay CPU: each variant's busiest relay".into(),
            busiest.iter().map(|(c, r)| (c.clone(), r)).collect(),
        ),
        caption: format!(
            "{CPU_CAPTION} One bar per variant: its busiest relay (named), means over the \
             seconds of all its trials together; variants without a CPU model have no bar."
        ),
    })
}

/// One bar per named relay: its main thread's split stacked, its workers as the thin bar.
fn split_chart(title: String, bars: Vec<(String, &RelayCpu)>) -> Figure {
    let segment = |label: &str, color: usize, value: fn(&RelayCpu) -> f64| Segment {
        label: label.into(),
        color,
        values: bars.iter().map(|(_, r)| value(r)).collect(),
    };
    Figure::Stacked(StackedBarChart {
        title,
        x_label: "mean fraction of a core".into(),
        categories: bars.iter().map(|(name, _)| name.clone()).collect(),
        segments: vec![
            segment("crypto", 0, |r| r.crypto),
            segment("kernel I/O", 1, |r| r.kernel),
            segment("TLS", 2, |r| r.tls),
            segment("other", 7, |r| r.other),
        ],
        thin: Some(segment("workers (onion skins)", 4, |r| r.workers)),
    })
}
