//! What the figures and tables measure, per run.

use std::collections::{BTreeMap, BTreeSet};

use crate::load::RunData;
use crate::records::Outcome;
use crate::stats::{mean_ci, quantile, MeanCi};
use crate::summary::total_goodput;

pub(crate) const MIB: f64 = 1024.0 * 1024.0;

/// Successful downloads started after bootstrap, with their TTFB and TTLB.
pub(crate) fn ok_times(run: &RunData) -> impl Iterator<Item = (&str, u64, &str, f64, f64)> {
    run.measured_downloads()
        .filter(|d| d.outcome.is_ok())
        .filter_map(|d| {
            Some((
                d.group.as_str(),
                d.size_bytes,
                d.client.as_str(),
                d.ttfb_s?,
                d.ttlb_s?,
            ))
        })
}

/// Groups with at least one measured download in any run, sorted.
pub(crate) fn groups(runs: &[&RunData]) -> Vec<String> {
    let set: BTreeSet<&str> = runs
        .iter()
        .flat_map(|r| r.measured_downloads().map(|d| d.group.as_str()))
        .collect();
    set.into_iter().map(String::from).collect()
}

/// The download sizes that get a curve or a figure of their own: those of groups that fetch a
/// few sizes (at most [`MAX_SIZES_PER_GROUP`] over all runs), as the summary's rows per size
/// do. A group whose workload draws each download's size (`markov`) fetches thousands, one
/// figure each would bury the report and take minutes to draw; its downloads still count in
/// the figures per group and over all downloads.
pub(crate) fn sizes(runs: &[&RunData]) -> Vec<u64> {
    let mut by_group: BTreeMap<&str, BTreeSet<u64>> = BTreeMap::new();
    for (group, size, ..) in runs.iter().flat_map(|r| ok_times(r)) {
        by_group.entry(group).or_default().insert(size);
    }
    let set: BTreeSet<u64> = (by_group.into_values())
        .filter(|s| s.len() <= MAX_SIZES_PER_GROUP)
        .flatten()
        .collect();
    set.into_iter().collect()
}

/// The most distinct sizes a group may fetch and still have its sizes shown one by one.
pub(crate) const MAX_SIZES_PER_GROUP: usize = 8;

pub(crate) fn ttfb(run: &RunData, keep: &dyn Fn(&str, u64) -> bool) -> Vec<f64> {
    ok_times(run)
        .filter(|t| keep(t.0, t.1))
        .map(|t| t.3)
        .collect()
}

pub(crate) fn ttlb(run: &RunData, keep: &dyn Fn(&str, u64) -> bool) -> Vec<f64> {
    ok_times(run)
        .filter(|t| keep(t.0, t.1))
        .map(|t| t.4)
        .collect()
}

/// Each client's median (nearest rank) TTLB over its successful measured downloads.
pub(crate) fn client_medians(run: &RunData, keep: impl Fn(&str) -> bool) -> Vec<f64> {
    let mut per_client: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for (group, _, client, _, ttlb) in ok_times(run) {
        if keep(group) {
            per_client.entry(client).or_default().push(ttlb);
        }
    }
    per_client.values().map(|v| quantile(v, 0.5)).collect()
}

/// Build times of circuits that were built and launched after bootstrap: circuits built while
/// the network warms up (and before the build-timeout estimate settles) are left out, as for
/// downloads.
pub(crate) fn circuit_build_times(run: &RunData) -> Vec<f64> {
    let from = run.info.bootstrap_seconds;
    run.circuits
        .iter()
        .filter(|c| c.outcome == "built" && c.start_s >= from)
        .filter_map(|c| c.build_s)
        .collect()
}

/// Sum of `bytes_written` over relays, per simulated second, ascending; seconds with no row
/// for any relay are absent.
pub(crate) fn goodput_series(run: &RunData) -> BTreeMap<u64, u64> {
    let mut per_second: BTreeMap<u64, u64> = BTreeMap::new();
    for r in &run.relays {
        *per_second.entry(r.second).or_default() += r.bytes_written;
    }
    per_second
}

/// The first simulated second after bootstrap, as the CLI's summary counts it.
pub(crate) fn first_measured_second(run: &RunData) -> u64 {
    run.info.bootstrap_seconds.max(0.0).floor() as u64 + 1
}

/// The `count` relays that wrote the most after bootstrap, busiest first (ties by name).
pub(crate) fn busiest_relays(run: &RunData, count: usize) -> Vec<String> {
    let from = first_measured_second(run);
    let mut totals: BTreeMap<&str, u128> = BTreeMap::new();
    for r in run.relays.iter().filter(|r| r.second >= from) {
        *totals.entry(r.relay.as_str()).or_default() += r.bytes_written as u128;
    }
    let mut ranked: Vec<(&str, u128)> = totals.into_iter().collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    ranked
        .into_iter()
        .take(count)
        .map(|(name, _)| name.to_string())
        .collect()
}

/// `(errors, timeouts, downloads)` of a group's measured downloads.
pub(crate) fn failures(run: &RunData, group: &str) -> (usize, usize, usize) {
    let mut counts = (0, 0, 0);
    for d in run.measured_downloads().filter(|d| d.group == group) {
        counts.2 += 1;
        match d.outcome {
            Outcome::Ok => {}
            Outcome::Timeout => counts.1 += 1,
            Outcome::Error(_) => counts.0 += 1,
        }
    }
    counts
}

/// A statistic of the comparison table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Metric {
    Downloads,
    ErrorRate,
    TtfbP50,
    TtfbP90,
    TtfbP99,
    TtlbP50,
    TtlbP90,
    TtlbP99,
    CircuitBuildP50,
    CircuitBuildP90,
    CircuitBuildP99,
    Goodput,
}

impl Metric {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Metric::Downloads => "downloads",
            Metric::ErrorRate => "error rate (%)",
            Metric::TtfbP50 => "ttfb p50 (s)",
            Metric::TtfbP90 => "ttfb p90 (s)",
            Metric::TtfbP99 => "ttfb p99 (s)",
            Metric::TtlbP50 => "ttlb p50 (s)",
            Metric::TtlbP90 => "ttlb p90 (s)",
            Metric::TtlbP99 => "ttlb p99 (s)",
            Metric::CircuitBuildP50 => "circuit build p50 (s)",
            Metric::CircuitBuildP90 => "circuit build p90 (s)",
            Metric::CircuitBuildP99 => "circuit build p99 (s)",
            Metric::Goodput => "relay goodput (MiB/s)",
        }
    }

    /// A short machine-friendly name for the CSV.
    pub(crate) fn id(self) -> &'static str {
        match self {
            Metric::Downloads => "downloads",
            Metric::ErrorRate => "error_rate_pct",
            Metric::TtfbP50 => "ttfb_p50_s",
            Metric::TtfbP90 => "ttfb_p90_s",
            Metric::TtfbP99 => "ttfb_p99_s",
            Metric::TtlbP50 => "ttlb_p50_s",
            Metric::TtlbP90 => "ttlb_p90_s",
            Metric::TtlbP99 => "ttlb_p99_s",
            Metric::CircuitBuildP50 => "circuit_build_p50_s",
            Metric::CircuitBuildP90 => "circuit_build_p90_s",
            Metric::CircuitBuildP99 => "circuit_build_p99_s",
            Metric::Goodput => "relay_goodput_mib_s",
        }
    }

    pub(crate) fn decimals(self) -> usize {
        match self {
            Metric::Downloads => 1,
            Metric::ErrorRate => 2,
            _ => 3,
        }
    }
}

/// Where a statistic applies: a client group (or all of the network, `group == None`) and a
/// download size (`None`: all sizes).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Key {
    /// `None` sorts first; network-wide rows are put last by [`sorted_keys`].
    pub group: Option<String>,
    pub size: Option<u64>,
    pub metric: Metric,
}

/// Every statistic of the comparison table for one run.
pub(crate) fn run_stats(run: &RunData) -> BTreeMap<Key, f64> {
    let mut out = BTreeMap::new();
    let runs = [run];
    for group in groups(&runs) {
        let key = |size: Option<u64>, metric| Key {
            group: Some(group.clone()),
            size,
            metric,
        };
        let (errors, timeouts, downloads) = failures(run, &group);
        out.insert(key(None, Metric::Downloads), downloads as f64);
        out.insert(
            key(None, Metric::ErrorRate),
            100.0 * (errors + timeouts) as f64 / downloads as f64,
        );
        let f = ttfb(run, &|g, _| g == group);
        for (m, q) in [
            (Metric::TtfbP50, 0.5),
            (Metric::TtfbP90, 0.9),
            (Metric::TtfbP99, 0.99),
        ] {
            out.insert(key(None, m), quantile(&f, q));
        }
        // One pass over the group's downloads: a `markov` group fetches thousands of sizes,
        // and a pass per size was quadratic (hours on a 10% network). Like the summary's rows
        // and the report's figures, such a group gets no statistics per size.
        let mut by_size: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
        for t in ok_times(run).filter(|t| t.0 == group) {
            by_size.entry(t.1).or_default().push(t.4);
        }
        if by_size.len() <= MAX_SIZES_PER_GROUP {
            for (size, l) in by_size {
                for (m, q) in [
                    (Metric::TtlbP50, 0.5),
                    (Metric::TtlbP90, 0.9),
                    (Metric::TtlbP99, 0.99),
                ] {
                    out.insert(key(Some(size), m), quantile(&l, q));
                }
            }
        }
    }
    let network = |metric| Key {
        group: None,
        size: None,
        metric,
    };
    let builds = circuit_build_times(run);
    for (m, q) in [
        (Metric::CircuitBuildP50, 0.5),
        (Metric::CircuitBuildP90, 0.9),
        (Metric::CircuitBuildP99, 0.99),
    ] {
        out.insert(network(m), quantile(&builds, q));
    }
    out.insert(
        network(Metric::Goodput),
        total_goodput(&run.relays, first_measured_second(run)) / MIB,
    );
    out
}

/// Per key, the mean and interval across the runs of one input. A key missing from a trial
/// (e.g. no download of that size) counts as undefined there, not as zero.
pub(crate) fn input_stats(runs: &[RunData]) -> BTreeMap<Key, MeanCi> {
    let per_run: Vec<BTreeMap<Key, f64>> = runs.iter().map(run_stats).collect();
    let keys: BTreeSet<&Key> = per_run.iter().flat_map(|m| m.keys()).collect();
    keys.into_iter()
        .map(|k| {
            let values: Vec<f64> = per_run
                .iter()
                .map(|m| m.get(k).copied().unwrap_or(f64::NAN))
                .collect();
            (k.clone(), mean_ci(&values))
        })
        .collect()
}

/// Group rows first (by group, then size, then metric), network-wide rows last.
pub(crate) fn sorted_keys<'a>(keys: impl Iterator<Item = &'a Key>) -> Vec<Key> {
    let set: BTreeSet<&Key> = keys.collect();
    let (mut grouped, network): (Vec<Key>, Vec<Key>) =
        set.into_iter().cloned().partition(|k| k.group.is_some());
    grouped.extend(network);
    grouped
}

pub(crate) fn size_label(bytes: u64) -> String {
    const KIB: u64 = 1024;
    if bytes >= KIB * KIB && bytes.is_multiple_of(KIB * KIB) {
        format!("{} MiB", bytes / (KIB * KIB))
    } else if bytes >= KIB && bytes.is_multiple_of(KIB) {
        format!("{} KiB", bytes / KIB)
    } else {
        format!("{bytes} B")
    }
}
