//! The per-group summary of what users experienced.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::cpu::CpuSums;
use crate::records::{DownloadRecord, Outcome, RelaySample};

const MIB: f64 = 1024.0 * 1024.0;

/// p50, p90 and p99 of a sample, by the nearest-rank method.
///
/// Nearest rank (the `p`-th percentile of `n` sorted values is the value at 1-based rank
/// `ceil(p * n / 100)`) always returns a value that was actually measured, needs no floating
/// point to pick the rank and so cannot differ between platforms, and is the definition most
/// readers can check by hand. With no values, `n` is 0 and the percentiles are NaN (rendered as
/// `-`; `null` in JSON) rather than a zero that would look like a real, excellent result.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    /// The median: the value at rank `ceil(n / 2)`.
    pub p50: f64,
    /// The 90th percentile: the value at rank `ceil(0.9 n)`.
    pub p90: f64,
    /// The 99th percentile: the value at rank `ceil(0.99 n)`.
    pub p99: f64,
    /// How many values the percentiles are over.
    pub n: usize,
}

/// Computes [`Percentiles`] of `values` (in any order).
pub fn percentiles(values: &[f64]) -> Percentiles {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let at = |p: usize| {
        if n == 0 {
            f64::NAN
        } else {
            let rank = (p * n).div_ceil(100).max(1);
            sorted[rank - 1]
        }
    };
    Percentiles {
        p50: at(50),
        p90: at(90),
        p99: at(99),
        n,
    }
}

/// Download statistics of one client group, over the measured period.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GroupSummary {
    /// The group's name (its `clients:` entry).
    pub group: String,
    /// All downloads started after bootstrap, whatever their outcome.
    pub downloads: usize,
    /// Downloads that ended in an error.
    pub errors: usize,
    /// Downloads abandoned at the workload's timeout.
    pub timeouts: usize,
    /// `(errors + timeouts) / downloads`: a timeout is a failed download from the user's point
    /// of view, as in tgen/OnionPerf, where timeouts are reported as transfer errors.
    pub error_rate: f64,
    /// Over successful downloads only: a failed download's partial times would mix two very
    /// different populations.
    pub ttfb: Percentiles,
    /// Time to last byte in seconds, over successful downloads of every size.
    pub ttlb: Percentiles,
    /// TTLB per download size, ascending by size, since TTLB is only comparable within a size.
    pub ttlb_by_size: Vec<(u64, Percentiles)>,
    /// The group's transfers are uploads (a group's clients all do the same).
    #[serde(default)]
    pub upload: bool,
    /// Uploading groups: each client's goodput in bytes per second ([`upload_goodput`]),
    /// as percentiles over the clients with a successful upload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upload_goodput: Option<Percentiles>,
}

/// One client's uploads over the measured period.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClientGoodput {
    /// The client host's name.
    pub client: String,
    /// The client's group.
    pub group: String,
    /// Successful uploads started after bootstrap.
    pub uploads: usize,
    /// Bytes those uploads sent.
    pub bytes: u64,
    /// Their times to last byte summed, in seconds.
    pub seconds: f64,
}

impl ClientGoodput {
    /// Bytes per second: size / duration over the client's successful uploads together.
    pub fn goodput(&self) -> f64 {
        if self.seconds > 0.0 {
            self.bytes as f64 / self.seconds
        } else {
            f64::NAN
        }
    }
}

/// Per client, its successful uploads started after bootstrap, by group then client name.
/// An upload lasts from its start to the server's response (`ttlb_s`), so goodput is what the
/// user sees, the wait for a circuit included.
pub fn upload_goodput(downloads: &[DownloadRecord]) -> Vec<ClientGoodput> {
    let mut uploads = UploadSums::default();
    for d in downloads {
        uploads.add(d);
    }
    uploads.clients().cloned().collect()
}

/// Each uploading client's successful uploads after bootstrap, summed one record at a time
/// (in record order, so the sums are the same on every run): one entry per client, whatever
/// the number of uploads.
#[derive(Clone, Debug, Default)]
struct UploadSums {
    /// By group, then client.
    clients: BTreeMap<String, BTreeMap<String, ClientGoodput>>,
}

impl UploadSums {
    fn add(&mut self, d: &DownloadRecord) {
        if !d.upload || d.bootstrap || !d.outcome.is_ok() {
            return;
        }
        let Some(t) = d.ttlb_s else { return };
        if !self.clients.contains_key(&d.group) {
            self.clients.insert(d.group.clone(), BTreeMap::new());
        }
        let group = self.clients.get_mut(&d.group).expect("inserted above");
        if !group.contains_key(&d.client) {
            let blank = ClientGoodput {
                client: d.client.clone(),
                group: d.group.clone(),
                uploads: 0,
                bytes: 0,
                seconds: 0.0,
            };
            group.insert(d.client.clone(), blank);
        }
        let c = group.get_mut(&d.client).expect("inserted above");
        c.uploads += 1;
        c.bytes += d.size_bytes;
        c.seconds += t;
    }

    /// By group, then client name.
    fn clients(&self) -> impl Iterator<Item = &ClientGoodput> {
        self.clients.values().flat_map(BTreeMap::values)
    }
}

/// Summarizes downloads per group, leaving out those started during bootstrap.
///
/// Groups are sorted by name, not by first appearance, so the summary does not depend on the
/// order in which per-thread record lists were merged.
pub fn summarize(downloads: &[DownloadRecord]) -> Vec<GroupSummary> {
    let mut stats = DownloadStats::default();
    for d in downloads {
        stats.add(d);
    }
    stats.summary()
}

/// What [`summarize`] needs of the downloads, gathered one record at a time, so that a run
/// can summarize its downloads while they stream to `downloads.csv` instead of holding every
/// record until the end.
///
/// Percentiles are exact (nearest rank), which needs every value: each successful download
/// after bootstrap leaves its time to first byte and its time to last byte (two `f64`, 16
/// bytes, plus the spare capacity of growing vectors); failures and bootstrap downloads leave
/// only counts, and uploads a running sum per client. That is all a run keeps per download.
#[derive(Clone, Debug, Default)]
pub struct DownloadStats {
    groups: BTreeMap<String, GroupSums>,
    uploads: UploadSums,
}

#[derive(Clone, Debug, Default)]
struct GroupSums {
    downloads: usize,
    errors: usize,
    timeouts: usize,
    ttfb: Vec<f64>,
    /// Times to last byte by size; the group's are all of them together.
    ttlb_by_size: BTreeMap<u64, Vec<f64>>,
    upload: bool,
}

impl DownloadStats {
    /// Counts one download (or upload); those started during bootstrap are left out.
    pub fn add(&mut self, d: &DownloadRecord) {
        self.uploads.add(d);
        if d.bootstrap {
            return;
        }
        if !self.groups.contains_key(&d.group) {
            self.groups.insert(d.group.clone(), GroupSums::default());
        }
        let acc = self.groups.get_mut(&d.group).expect("inserted above");
        acc.downloads += 1;
        acc.upload |= d.upload;
        match d.outcome {
            Outcome::Ok => {
                acc.ttfb.extend(d.ttfb_s);
                if let Some(t) = d.ttlb_s {
                    acc.ttlb_by_size.entry(d.size_bytes).or_default().push(t);
                }
            }
            Outcome::Timeout => acc.timeouts += 1,
            Outcome::Error(_) => acc.errors += 1,
        }
    }

    /// The per-group summary of the downloads added so far, groups sorted by name.
    pub fn summary(&self) -> Vec<GroupSummary> {
        let mut goodput: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
        for c in self.uploads.clients() {
            let g = c.goodput();
            if g.is_finite() {
                goodput.entry(c.group.as_str()).or_default().push(g);
            }
        }
        self.groups
            .iter()
            .map(|(group, acc)| {
                // Percentiles sort their values, so the order sizes are joined in is moot.
                let ttlb: Vec<f64> = acc.ttlb_by_size.values().flatten().copied().collect();
                GroupSummary {
                    upload: acc.upload,
                    upload_goodput: acc.upload.then(|| {
                        percentiles(goodput.get(group.as_str()).map_or(&[][..], Vec::as_slice))
                    }),
                    group: group.clone(),
                    downloads: acc.downloads,
                    errors: acc.errors,
                    timeouts: acc.timeouts,
                    error_rate: (acc.errors + acc.timeouts) as f64 / acc.downloads as f64,
                    ttfb: percentiles(&acc.ttfb),
                    ttlb: percentiles(&ttlb),
                    ttlb_by_size: acc
                        .ttlb_by_size
                        .iter()
                        .map(|(&size, v)| (size, percentiles(v)))
                        .collect(),
                }
            })
            .collect()
    }
}

/// Total relay write throughput in bytes per second over the measured period.
///
/// Sums `bytes_written` over all relays for seconds `>= from_second` and divides by the length
/// of the period, which runs from `from_second` through the last second present in `relays`
/// (so the sampler should emit the final second even when it was idle). Summing over all
/// relays counts each payload byte once per hop, the same convention as the relay goodput
/// reported by Shadow/tornettools, so results are comparable with theirs.
pub fn total_goodput(relays: &[RelaySample], from_second: u64) -> f64 {
    let mut sum = GoodputSum::new(from_second);
    for s in relays {
        sum.add(s);
    }
    sum.bytes_per_second()
}

/// [`total_goodput`] one sample at a time: a byte count and the last second seen.
#[derive(Clone, Copy, Debug)]
struct GoodputSum {
    from_second: u64,
    bytes: u128,
    last: Option<u64>,
}

impl GoodputSum {
    fn new(from_second: u64) -> Self {
        GoodputSum {
            from_second,
            bytes: 0,
            last: None,
        }
    }

    fn add(&mut self, s: &RelaySample) {
        self.last = self.last.max(Some(s.second));
        if s.second >= self.from_second {
            self.bytes += s.bytes_written as u128;
        }
    }

    fn bytes_per_second(&self) -> f64 {
        match self.last {
            Some(last) if last >= self.from_second => {
                self.bytes as f64 / (last - self.from_second + 1) as f64
            }
            _ => 0.0,
        }
    }
}

/// A run's `summary.txt`, built while its records stream to the files: each batch of
/// downloads and relay seconds is added once written, and only what the summary needs stays
/// in memory (see [`DownloadStats`]; relay seconds leave a byte count and, with a CPU model,
/// one sum per relay), so a long run's memory does not grow with its relay samples.
#[derive(Clone, Debug)]
pub struct RunSummary {
    downloads: DownloadStats,
    goodput: GoodputSum,
    cpu: CpuSums,
}

impl RunSummary {
    /// For a run whose measured period starts at second `from_second` (the first second
    /// after bootstrap, as [`total_goodput`] takes it).
    pub fn new(from_second: u64) -> Self {
        RunSummary {
            downloads: DownloadStats::default(),
            goodput: GoodputSum::new(from_second),
            cpu: CpuSums::default(),
        }
    }

    /// Adds a batch of records, in the order they were written.
    pub fn add(&mut self, downloads: &[DownloadRecord], relays: &[RelaySample]) {
        for d in downloads {
            self.downloads.add(d);
        }
        for s in relays {
            self.goodput.add(s);
            if s.second >= self.goodput.from_second {
                self.cpu.add(s);
            }
        }
    }

    /// The groups' summary so far.
    pub fn groups(&self) -> Vec<GroupSummary> {
        self.downloads.summary()
    }

    /// `summary.txt`: exactly what [`render_summary`] and
    /// [`render_cpu_summary`](crate::render_cpu_summary) make of the same records.
    pub fn render(&self, complete: bool) -> String {
        render_summary(&self.groups(), self.goodput.bytes_per_second(), complete)
            + &self.cpu.summary_line()
    }
}

fn size_label(bytes: u64) -> String {
    const KIB: u64 = 1024;
    if bytes >= KIB * KIB && bytes.is_multiple_of(KIB * KIB) {
        format!("{} MiB", bytes / (KIB * KIB))
    } else if bytes >= KIB && bytes.is_multiple_of(KIB) {
        format!("{} KiB", bytes / KIB)
    } else {
        format!("{bytes} B")
    }
}

fn secs(x: f64, n: usize) -> String {
    if n == 0 {
        "-".to_string()
    } else {
        format!("{x:.3}")
    }
}

fn row(
    group: String,
    downloads: String,
    error_rate: String,
    ttfb: Option<&Percentiles>,
    ttlb: &Percentiles,
) -> Vec<String> {
    let blank = || vec![String::new(); 3];
    let cells = |p: &Percentiles| vec![secs(p.p50, p.n), secs(p.p90, p.n), secs(p.p99, p.n)];
    let mut r = vec![group, downloads, error_rate];
    r.extend(ttfb.map(cells).unwrap_or_else(blank));
    r.extend(cells(ttlb));
    r
}

/// Groups with more distinct sizes than this get no TTLB row per size: their sizes are drawn
/// (the `markov` workload draws each stream's), and hundreds of rows of a few downloads each
/// would bury the table.
const MAX_SIZE_ROWS: usize = crate::analysis::MAX_SIZES_PER_GROUP;

/// The summary as a table of cells, header first: per group the downloads, error rate and
/// TTFB/TTLB percentiles in seconds, plus one indented TTLB row per size for groups that mix
/// a few sizes (at most 8). Shared by the text summary and the HTML report so both show the
/// same figures.
pub fn summary_table(groups: &[GroupSummary]) -> Vec<Vec<String>> {
    let header: Vec<String> = [
        "group",
        "downloads",
        "error rate",
        "ttfb p50",
        "ttfb p90",
        "ttfb p99",
        "ttlb p50",
        "ttlb p90",
        "ttlb p99",
    ]
    .map(String::from)
    .to_vec();
    let mut rows = vec![header];
    for g in groups {
        let label = if g.upload {
            format!("{} (upload)", g.group)
        } else {
            g.group.clone()
        };
        rows.push(row(
            label,
            g.downloads.to_string(),
            format!("{:.2}%", g.error_rate * 100.0),
            Some(&g.ttfb),
            &g.ttlb,
        ));
        if (2..=MAX_SIZE_ROWS).contains(&g.ttlb_by_size.len()) {
            for (size, p) in &g.ttlb_by_size {
                rows.push(row(
                    format!("  {}", size_label(*size)),
                    String::new(),
                    String::new(),
                    None,
                    p,
                ));
            }
        }
    }
    rows
}

/// Renders the human-readable summary: one row per group, plus one indented TTLB row per size
/// for groups that mix sizes (perf groups usually do not, web and bulk never do).
///
/// The group name is left-aligned and every number right-aligned in columns as wide as their
/// widest cell, so the table stays aligned for any group names and magnitudes.
pub fn render_summary(groups: &[GroupSummary], goodput_bytes_per_s: f64, complete: bool) -> String {
    let rows = summary_table(groups);
    let columns = rows[0].len();
    let widths: Vec<usize> = (0..columns)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();

    let mut out = String::new();
    if !complete {
        out.push_str(
            "PARTIAL RUN: the simulation stopped before its configured end; \
             results cover only the simulated time reached.\n\n",
        );
    }
    if groups.is_empty() {
        out.push_str("No downloads were measured after the bootstrap period.\n");
    } else {
        for r in &rows {
            let mut line = String::new();
            for (c, cell) in r.iter().enumerate() {
                if c == 0 {
                    let _ = write!(line, "{cell:<w$}", w = widths[c]);
                } else {
                    let _ = write!(line, "  {cell:>w$}", w = widths[c]);
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out.push_str(
            "\nTimes in seconds from download start; nearest-rank percentiles over successful \
             downloads.\nError rate counts errors and timeouts. The bootstrap period is excluded.\n",
        );
        let uploads: Vec<&GroupSummary> = groups.iter().filter(|g| g.upload).collect();
        if !uploads.is_empty() {
            out.push_str(
                "Uploads: time to first byte is when the first DATA cell left the client, to \
                 last byte when the server's answer arrived.\nUpload goodput per client (its \
                 bytes over its uploads' times to last byte), MiB/s:\n",
            );
            for g in uploads {
                let p = g.upload_goodput.unwrap_or_else(|| percentiles(&[]));
                let _ = writeln!(
                    out,
                    "  {}: p50 {} p90 {} over {} clients",
                    g.group,
                    secs(p.p50 / MIB, p.n),
                    secs(p.p90 / MIB, p.n),
                    p.n
                );
            }
        }
    }
    let _ = writeln!(
        out,
        "Total relay goodput: {:.3} MiB/s",
        goodput_bytes_per_s / MIB
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(group: &str, size: u64, outcome: Outcome, ttfb: f64, ttlb: f64) -> DownloadRecord {
        DownloadRecord {
            client: format!("{group}-client"),
            group: group.into(),
            size_bytes: size,
            start_s: 2000.0,
            circuit_build_s: Some(0.3),
            ttfb_s: Some(ttfb),
            ttlb_s: outcome.is_ok().then_some(ttlb),
            request_s: Some(ttfb / 2.0),
            throughput_mbit_s: None,
            outcome,
            server: "s".into(),
            guard: "g".into(),
            middle: "m".into(),
            exit: "e".into(),
            bootstrap: false,
            upload: false,
        }
    }

    #[test]
    fn nearest_rank_percentiles_match_hand_computation() {
        // 1..=10 shuffled. p50: rank ceil(5) = 5 -> 5; p90: rank 9 -> 9; p99: rank ceil(9.9) = 10.
        let p = percentiles(&[7.0, 3.0, 10.0, 1.0, 9.0, 2.0, 8.0, 4.0, 6.0, 5.0]);
        assert_eq!(
            p,
            Percentiles {
                p50: 5.0,
                p90: 9.0,
                p99: 10.0,
                n: 10
            }
        );
        // Four values: p50 rank 2, p90 rank ceil(3.6) = 4, p99 rank 4.
        let p = percentiles(&[0.4, 0.1, 0.3, 0.2]);
        assert_eq!((p.p50, p.p90, p.p99), (0.2, 0.4, 0.4));
        // 1..=200: p50 rank 100, p90 rank 180, p99 rank 198.
        let v: Vec<f64> = (1..=200).rev().map(f64::from).collect();
        let p = percentiles(&v);
        assert_eq!((p.p50, p.p90, p.p99), (100.0, 180.0, 198.0));
        let p = percentiles(&[42.0]);
        assert_eq!((p.p50, p.p90, p.p99, p.n), (42.0, 42.0, 42.0, 1));
        let p = percentiles(&[]);
        assert_eq!(p.n, 0);
        assert!(p.p50.is_nan() && p.p90.is_nan() && p.p99.is_nan());
    }

    #[test]
    fn summarize_counts_outcomes_and_skips_bootstrap() {
        let mut boot = rec("web", 100, Outcome::Ok, 99.0, 99.0);
        boot.bootstrap = true;
        let records = vec![
            rec("web", 100, Outcome::Ok, 0.5, 1.0),
            boot,
            rec("bulk", 5 << 20, Outcome::Ok, 0.7, 20.0),
            rec("web", 100, Outcome::Ok, 0.6, 3.0),
            rec("web", 100, Outcome::Timeout, 0.9, 0.0),
            rec("web", 100, Outcome::Error("refused".into()), 0.0, 0.0),
            rec("web", 100, Outcome::Ok, 0.4, 2.0),
        ];
        let groups = summarize(&records);
        let names: Vec<_> = groups.iter().map(|g| g.group.as_str()).collect();
        assert_eq!(names, ["bulk", "web"], "sorted by name");
        let web = &groups[1];
        assert_eq!((web.downloads, web.errors, web.timeouts), (5, 1, 1));
        assert_eq!(web.error_rate, 0.4);
        // Successful TTFBs 0.4, 0.5, 0.6: p50 rank 2 = 0.5, p90/p99 rank 3 = 0.6.
        assert_eq!((web.ttfb.p50, web.ttfb.p90, web.ttfb.n), (0.5, 0.6, 3));
        assert_eq!((web.ttlb.p50, web.ttlb.p99, web.ttlb.n), (2.0, 3.0, 3));
        assert_eq!(web.ttlb_by_size.len(), 1);
        assert_eq!(web.ttlb_by_size[0].0, 100);
        assert_eq!(groups[0].error_rate, 0.0);
    }

    #[test]
    fn ttlb_by_size_is_sorted_by_size() {
        let records = vec![
            rec("perf", 5 << 20, Outcome::Ok, 0.5, 30.0),
            rec("perf", 50 << 10, Outcome::Ok, 0.5, 1.0),
            rec("perf", 1 << 20, Outcome::Ok, 0.5, 8.0),
            rec("perf", 50 << 10, Outcome::Ok, 0.5, 2.0),
        ];
        let g = &summarize(&records)[0];
        let sizes: Vec<u64> = g.ttlb_by_size.iter().map(|(s, _)| *s).collect();
        assert_eq!(sizes, [50 << 10, 1 << 20, 5 << 20]);
        assert_eq!(g.ttlb_by_size[0].1.n, 2);
        assert_eq!(g.ttlb_by_size[0].1.p90, 2.0);
    }

    #[test]
    fn goodput_averages_over_measured_seconds() {
        let sample = |relay: &str, second, bytes_written| RelaySample {
            relay: relay.into(),
            second,
            bytes_read: 0,
            bytes_written,
            ..RelaySample::default()
        };
        let relays = vec![
            sample("a", 0, 1_000_000),
            sample("a", 10, 100),
            sample("b", 10, 300),
            sample("a", 11, 200),
            sample("b", 13, 400),
        ];
        // Seconds 10..=13 (4 s), 1000 bytes.
        assert_eq!(total_goodput(&relays, 10), 250.0);
        assert_eq!(total_goodput(&relays, 14), 0.0);
        assert_eq!(total_goodput(&[], 0), 0.0);
    }

    #[test]
    fn summary_table_lists_groups_aligned() {
        let records = vec![
            rec("web", 320 << 10, Outcome::Ok, 0.5, 1.25),
            rec("bulk", 5 << 20, Outcome::Ok, 0.7, 20.0),
            rec("perf-50k", 50 << 10, Outcome::Timeout, 0.0, 0.0),
            rec("mixed", 50 << 10, Outcome::Ok, 0.5, 1.0),
            rec("mixed", 1 << 20, Outcome::Ok, 0.5, 8.0),
        ];
        let groups = summarize(&records);
        let text = render_summary(&groups, 3.0 * 1024.0 * 1024.0, true);
        assert!(!text.contains("PARTIAL RUN"));
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("group"));
        for g in ["web", "bulk", "perf-50k", "mixed", "  50 KiB", "  1 MiB"] {
            assert!(
                lines.iter().any(|l| l.starts_with(&format!("{g} "))),
                "no row for {g}:\n{text}"
            );
        }
        // Right-aligned columns: every table row ends at the same column.
        let table: Vec<&str> = lines
            .iter()
            .take_while(|l| !l.is_empty())
            .copied()
            .collect();
        assert_eq!(table.len(), 7);
        assert!(table.iter().all(|l| l.len() == table[0].len()), "{text}");
        let web = table.iter().find(|l| l.starts_with("web ")).unwrap();
        assert!(web.contains("0.00%") && web.contains("1.250"), "{web}");
        let perf = table.iter().find(|l| l.starts_with("perf-50k")).unwrap();
        assert!(perf.contains("100.00%") && perf.contains(" -"), "{perf}");
        assert!(text.contains("Total relay goodput: 3.000 MiB/s"));

        let partial = render_summary(&groups, 0.0, false);
        assert!(partial.starts_with("PARTIAL RUN"));
        assert_eq!(partial, render_summary(&groups, 0.0, false));
        assert!(render_summary(&[], 0.0, true).contains("No downloads"));
    }

    /// A run summarizes its records in batches as they are written (`RunSummary`) and keeps
    /// none of them; the summary must be the one the whole record lists give, to the byte.
    #[test]
    fn a_summary_built_in_batches_is_the_one_of_all_records() {
        use crate::records::CpuShare;
        let mut downloads = Vec::new();
        for i in 0..300u32 {
            let group = ["web", "bulk", "perf"][i as usize % 3];
            let size = [320 << 10, 5 << 20, 50 << 10, 1 << 20][i as usize % 4];
            let outcome = match i % 17 {
                0 => Outcome::Timeout,
                1 => Outcome::Error("circuit closed".into()),
                _ => Outcome::Ok,
            };
            let t = f64::from(i * 7919 % 1000) / 97.0;
            let mut d = rec(group, size, outcome, t / 3.0, t);
            d.client = format!("c{}", i % 11);
            d.bootstrap = i < 40;
            d.upload = group == "bulk";
            downloads.push(d);
        }
        let mut relays = Vec::new();
        for second in 1..=30u64 {
            for r in 0..4u64 {
                relays.push(RelaySample {
                    relay: format!("relay{r}"),
                    second,
                    bytes_written: second * 1000 + r * 7,
                    cpu: (r != 3).then(|| CpuShare {
                        busy: (second * (r + 1)) as f64 / 97.0,
                        crypto: 0.1 / (second as f64),
                        ..CpuShare::default()
                    }),
                    ..RelaySample::default()
                });
            }
        }
        let from = 11;
        let whole = render_summary(&summarize(&downloads), total_goodput(&relays, from), true)
            + &crate::render_cpu_summary(&relays, from);
        assert!(
            whole.contains("(upload)") && whole.contains("Busiest relay CPU"),
            "{whole}"
        );
        let mut batched = RunSummary::new(from);
        let (d, r): (Vec<_>, Vec<_>) =
            (downloads.chunks(37).collect(), relays.chunks(13).collect());
        for i in 0..d.len().max(r.len()) {
            batched.add(
                d.get(i).copied().unwrap_or(&[]),
                r.get(i).copied().unwrap_or(&[]),
            );
        }
        assert_eq!(batched.render(true), whole);
        assert_eq!(batched.groups(), summarize(&downloads));
    }
}
