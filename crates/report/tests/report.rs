//! Reports and comparisons on synthetic run directories.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use onionlab_report::{
    load_input, write_comparison, write_comparison_with, write_report, write_report_with,
    CircuitRecord, CpuShare, DownloadRecord, Input, Outcome, OutputDir, RelaySample, ReportOptions,
    RunData, RunInfo, StateSample, TrialsManifest, WorkerRecord, COMPARE_HTML, COMPARISON_CSV,
    REPORT_HTML,
};

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        let path =
            std::env::temp_dir().join(format!("onionlab-report-it-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A deterministic pseudo-random stream for synthetic data.
struct Lcg(u64);

impl Lcg {
    fn unit(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
}

fn info(name: &str, seed: u64) -> RunInfo {
    RunInfo {
        scenario_name: name.into(),
        scenario: serde_json::json!({
            "name": name,
            "run": {"seed": seed, "stop_time": "2m", "bootstrap": "20s"},
            "tor": {"scheduler": "kist", "flow_control": "vegas"},
            "relays": {"generate": {"guard": 2, "exit": 2, "middle": 1}},
            "servers": [{"name": "web", "count": 3}],
            "clients": [{"name": "web", "count": 6}, {"name": "perf", "count": 2}],
        }),
        seed,
        version: "0.1.0".into(),
        commit: "0123456789ab".into(),
        threads: 2,
        sim_seconds: 120.0,
        bootstrap_seconds: 20.0,
        wall_seconds: 3.5,
        speed: 34.0,
        events: 1000,
        rounds: 100,
        events_per_sec: 300.0,
        peak_rss_bytes: 1 << 20,
        workers: vec![
            WorkerRecord {
                hosts: 10,
                events: 600,
                busy_s: 3.0,
                blocked_s: 0.5,
                stolen: 0,
                runs: 0,
            },
            WorkerRecord {
                hosts: 9,
                events: 400,
                busy_s: 2.0,
                blocked_s: 1.5,
                stolen: 0,
                runs: 0,
            },
        ],
        spans: Vec::new(),
        complete: true,
        mode: "simulation".into(),
        interrupted_reason: None,
        progress: vec![(0.0, 0.0), (1.0, 30.0), (2.2, 70.0), (3.5, 120.0)],
        emulation: None,
        plot_relays: Vec::new(),
        transport: None,
        directory: None,
        cpu: None,
        state: Vec::new(),
        processes: Vec::new(),
    }
}

/// Writes a small but complete run: two groups (one mixing sizes), failures, bootstrap
/// downloads, five relays sampled every second and some circuits.
fn write_run(dir: &Path, name: &str, seed: u64) -> RunData {
    let mut rng = Lcg(seed);
    let mut downloads = Vec::new();
    let relays_names = ["guard1", "guard2", "exit1", "exit2", "middle1"];
    for i in 0..120 {
        let (client, group, size) = if i % 3 == 0 {
            (
                format!("client-perf-{}", i % 2 + 1),
                "perf",
                if i % 2 == 0 { 50 << 10 } else { 1 << 20 },
            )
        } else {
            (format!("client-web-{}", i % 6 + 1), "web", 320 << 10)
        };
        let start = i as f64;
        let ttfb = 0.3 + rng.unit();
        let ttlb = ttfb + size as f64 / 300_000.0 * (0.5 + rng.unit());
        let outcome = match i % 17 {
            5 => Outcome::Timeout,
            11 => Outcome::Error("circuit closed".into()),
            _ => Outcome::Ok,
        };
        downloads.push(DownloadRecord {
            client,
            group: group.into(),
            size_bytes: size,
            start_s: start,
            circuit_build_s: Some(0.4),
            ttfb_s: Some(ttfb),
            ttlb_s: outcome.is_ok().then_some(ttlb),
            request_s: Some(ttfb / 2.0),
            throughput_mbit_s: None,
            outcome,
            server: "server-web-1".into(),
            guard: "guard1".into(),
            middle: "middle1".into(),
            exit: "exit1".into(),
            bootstrap: start < 20.0,
            upload: false,
        });
    }
    let mut relays = Vec::new();
    for (k, relay) in relays_names.iter().enumerate() {
        for second in 1..=120u64 {
            let bytes = ((k as f64 + 1.0) * 100_000.0 * (1.0 + rng.unit())) as u64;
            relays.push(RelaySample {
                relay: relay.to_string(),
                second,
                bytes_read: bytes,
                bytes_written: bytes,
                cells_in: Some(bytes / 514),
                cells_out: Some(bytes / 514),
                queued_cells: Some(0),
                open_sockets: Some(4),
                socket_queued_bytes: Some(0),
                circuits_killed: Some(0),
                conn_limit_refusals: Some(0),
                cpu: None,
            });
        }
    }
    let circuits = (0..40)
        .map(|i| CircuitRecord {
            client: format!("client-web-{}", i % 6 + 1),
            circuit: i,
            purpose: "exit".into(),
            guard: "guard1".into(),
            middle: "middle1".into(),
            exit: "exit1".into(),
            start_s: i as f64 * 3.0,
            build_s: (i % 9 != 4).then(|| 0.2 + rng.unit()),
            outcome: if i % 9 == 4 { "timeout" } else { "built" }.into(),
            streams: 2,
            closed_s: None,
        })
        .collect::<Vec<_>>();
    let out = OutputDir::create(dir).unwrap();
    out.write_downloads(&downloads).unwrap();
    out.write_relays(&relays).unwrap();
    out.write_circuits(&circuits).unwrap();
    out.write_run(&info(name, seed)).unwrap();
    RunData::load(dir).unwrap()
}

fn write_trials(dir: &Path, name: &str, seeds: &[u64]) {
    let trials: Vec<String> = (1..=seeds.len()).map(|i| format!("trial-{i}")).collect();
    for (t, seed) in trials.iter().zip(seeds) {
        write_run(&dir.join(t), name, *seed);
    }
    OutputDir::create(dir)
        .unwrap()
        .write_trials(&TrialsManifest {
            scenario: name.into(),
            trials,
            seeds: seeds.to_vec(),
        })
        .unwrap();
}

const REPORT_PLOTS: [&str; 11] = [
    "ttfb_cdf_by_group",
    "ttfb_cdf_by_size",
    "ttlb_cdf_by_group",
    "ttlb_cdf_by_size",
    "client_median_ttlb_cdf",
    "circuit_build_cdf",
    "relay_goodput",
    "relay_throughput_busiest",
    "error_rates",
    "diagnostics_progress",
    "diagnostics_workers",
];

/// Values of `attr="..."` attributes in an HTML page.
fn attribute_values(html: &str, attr: &str) -> Vec<String> {
    let needle = format!(" {attr}=\"");
    let mut out = Vec::new();
    let mut rest = html;
    while let Some(i) = rest.find(&needle) {
        rest = &rest[i + needle.len()..];
        let end = rest.find('"').unwrap();
        out.push(rest[..end].to_string());
        rest = &rest[end..];
    }
    out
}

/// Every src/href names a plain file in `dir`, and nothing points at the network.
fn check_links(dir: &Path, html: &str) -> usize {
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "external reference"
    );
    assert!(!html.contains("<script"), "no JavaScript needed");
    let mut links = attribute_values(html, "src");
    links.extend(attribute_values(html, "href"));
    for link in &links {
        assert!(
            !link.contains('/') && !link.contains(':'),
            "not a local file: {link}"
        );
        let path = dir.join(link);
        assert!(path.is_file(), "{link} does not exist");
        assert!(fs::metadata(&path).unwrap().len() > 0, "{link} is empty");
    }
    links.len()
}

#[test]
fn report_writes_every_plot_and_a_self_contained_page() {
    let tmp = TempDir::new("report");
    write_run(&tmp.0, "toy", 1);
    let input = load_input(&tmp.0).unwrap();
    assert_eq!(input.label(), "toy");
    assert_eq!(input.runs().len(), 1);
    let files = write_report(&input, &tmp.0).unwrap();
    for stem in REPORT_PLOTS {
        for ext in ["svg", "png"] {
            let path = tmp.0.join(format!("{stem}.{ext}"));
            assert!(files.contains(&path), "{stem}.{ext} not returned");
            assert!(fs::metadata(&path).unwrap().len() > 0, "{stem}.{ext} empty");
        }
        let svg = fs::read_to_string(tmp.0.join(format!("{stem}.svg"))).unwrap();
        assert!(svg.contains("<svg") && svg.contains("</svg>"));
        let png = fs::read(tmp.0.join(format!("{stem}.png"))).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    }
    let html = fs::read_to_string(tmp.0.join(REPORT_HTML)).unwrap();
    assert!(files.contains(&tmp.0.join(REPORT_HTML)));
    // Per plot: the image, and links to its SVG and PNG.
    assert_eq!(check_links(&tmp.0, &html), REPORT_PLOTS.len() * 3);
    for needle in [
        "kist", "vegas", "toy", "2m", "20s", "perf", "web", "ttlb p99", "MiB/s",
    ] {
        assert!(html.contains(needle), "report.html lacks {needle}");
    }
    // The busiest relay is named in the per-relay plot's legend.
    let busiest = fs::read_to_string(tmp.0.join("relay_throughput_busiest.svg")).unwrap();
    assert!(busiest.contains("middle1"));
}

#[test]
fn report_is_deterministic() {
    let tmp = TempDir::new("determinism");
    let (a, b) = (tmp.0.join("a"), tmp.0.join("b"));
    write_run(&a, "toy", 3);
    write_run(&b, "toy", 3);
    let read = |dir: &Path| -> Vec<(String, Vec<u8>)> {
        let input = load_input(dir).unwrap();
        let mut files: Vec<_> = write_report(&input, dir)
            .unwrap()
            .into_iter()
            .map(|p| {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                (name, fs::read(&p).unwrap())
            })
            .collect();
        files.sort();
        files
    };
    let (fa, fb) = (read(&a), read(&b));
    assert_eq!(fa.len(), fb.len());
    for ((na, ba), (nb, bb)) in fa.iter().zip(&fb) {
        assert_eq!(na, nb);
        assert!(ba == bb, "{na} differs between identical inputs");
    }
    // And again in the same place.
    assert_eq!(read(&a), fa);
}

#[test]
fn trials_report_shows_intervals() {
    let tmp = TempDir::new("trials");
    write_trials(&tmp.0, "toy", &[1, 2, 3]);
    let input = load_input(&tmp.0).unwrap();
    assert!(matches!(input, Input::Trials { .. }));
    assert_eq!(input.runs().len(), 3);
    write_report(&input, &tmp.0).unwrap();
    let html = fs::read_to_string(tmp.0.join(REPORT_HTML)).unwrap();
    check_links(&tmp.0, &html);
    assert!(html.contains("±") && html.contains("1, 2, 3"), "{html}");
    let svg = fs::read_to_string(tmp.0.join("ttlb_cdf_by_group.svg")).unwrap();
    assert!(svg.contains("mean of 3 trials"));
    // The band is a filled polygon.
    assert!(svg.contains("<polygon"), "no band drawn");
}

#[test]
fn comparing_a_run_with_itself_shows_no_change() {
    let tmp = TempDir::new("self");
    let run = tmp.0.join("run");
    write_run(&run, "toy", 5);
    let inputs = vec![
        ("base".to_string(), load_input(&run).unwrap()),
        ("again".to_string(), load_input(&run).unwrap()),
    ];
    let out = tmp.0.join("cmp");
    let text = write_comparison(&inputs, &out).unwrap();
    let rows: Vec<&str> = text.lines().skip(1).take_while(|l| !l.is_empty()).collect();
    assert!(rows.len() > 10, "{text}");
    for row in &rows {
        assert!(row.ends_with("+0.0%"), "non-zero change: {row}");
    }
    let csv = fs::read_to_string(out.join(COMPARISON_CSV)).unwrap();
    let mut changes = 0;
    for line in csv.lines().skip(1) {
        let change = line.rsplit(',').next().unwrap();
        if line.contains(",again,") {
            assert_eq!(change, "0.000000", "{line}");
            changes += 1;
        }
    }
    assert_eq!(changes, rows.len());
    let html = fs::read_to_string(out.join(COMPARE_HTML)).unwrap();
    assert!(check_links(&out, &html) > 10);
}

#[test]
fn a_group_of_many_sizes_gets_no_statistics_per_size() {
    // A `markov` group draws each download's size; like the summary and the figures, the
    // comparison keeps its group-wide rows only, while a group of few sizes keeps its own.
    let tmp = TempDir::new("sizes");
    let run = tmp.0.join("run");
    let mut data = write_run(&run, "toy", 7);
    let mut many = data.downloads[0].clone();
    many.group = "users".into();
    many.bootstrap = false;
    many.outcome = Outcome::Ok;
    for i in 0..200u64 {
        many.size_bytes = 1000 + i;
        many.ttfb_s = Some(0.5);
        many.ttlb_s = Some(1.0 + i as f64 / 100.0);
        data.downloads.push(many.clone());
    }
    OutputDir::create(&run)
        .unwrap()
        .write_downloads(&data.downloads)
        .unwrap();
    let inputs = vec![("base".to_string(), load_input(&run).unwrap())];
    let out = tmp.0.join("cmp");
    write_comparison(&inputs, &out).unwrap();
    let csv = fs::read_to_string(out.join(COMPARISON_CSV)).unwrap();
    let users: Vec<&str> = csv.lines().filter(|l| l.starts_with("users,")).collect();
    assert!(
        users.iter().any(|l| l.starts_with("users,,ttfb_p50_s,")),
        "{csv}"
    );
    assert!(users.iter().all(|l| l.starts_with("users,,")), "{users:?}");
    assert!(csv.contains("perf,51200,ttlb_p50_s,"), "{csv}");
}

#[test]
fn comparison_overlays_runs_and_trials() {
    let tmp = TempDir::new("overlay");
    write_run(&tmp.0.join("one"), "toy", 1);
    write_trials(&tmp.0.join("many"), "toy-kist-lite", &[11, 12, 13, 14]);
    let inputs = vec![
        (
            "vanilla".to_string(),
            load_input(&tmp.0.join("one")).unwrap(),
        ),
        (
            "kist-lite".to_string(),
            load_input(&tmp.0.join("many")).unwrap(),
        ),
    ];
    let out = tmp.0.join("cmp");
    let text = write_comparison(&inputs, &out).unwrap();
    assert!(text.starts_with("group"));
    assert!(
        text.contains("change (kist-lite)") && text.contains(" ± "),
        "{text}"
    );
    assert!(text.contains("No interval for \"vanilla\""), "{text}");
    for stem in [
        "compare_ttfb_cdf",
        "compare_ttlb_cdf_320KiB",
        "compare_ttlb_cdf_50KiB",
        "compare_ttlb_cdf_1MiB",
        "compare_client_median_ttlb_cdf_web",
        "compare_circuit_build_cdf",
        "compare_relay_goodput",
        "compare_error_rates",
    ] {
        let svg = fs::read_to_string(out.join(format!("{stem}.svg"))).unwrap();
        assert!(
            svg.contains("vanilla") && svg.contains("kist-lite"),
            "{stem} legend"
        );
        assert!(fs::metadata(out.join(format!("{stem}.png"))).unwrap().len() > 0);
    }
    // Duplicate labels and no inputs are refused.
    let dup = vec![
        ("x".to_string(), inputs[0].1.clone()),
        ("x".to_string(), inputs[1].1.clone()),
    ];
    let err = write_comparison(&dup, &out).unwrap_err().to_string();
    assert!(err.contains("labelled \"x\""), "{err}");
    assert!(write_comparison(&[], &out).is_err());
}

#[test]
fn broken_inputs_give_clear_errors() {
    let tmp = TempDir::new("broken");
    let missing = tmp.0.join("nope");
    let err = load_input(&missing).unwrap_err().to_string();
    assert!(
        err.contains("nope") && err.contains("no such directory"),
        "{err}"
    );

    let empty = tmp.0.join("empty");
    fs::create_dir_all(&empty).unwrap();
    let err = load_input(&empty).unwrap_err().to_string();
    assert!(err.contains("not a run directory (no run.json)"), "{err}");
    let err = RunData::load(&empty).unwrap_err().to_string();
    assert!(err.contains("not a run directory (no run.json)"), "{err}");

    let run = tmp.0.join("run");
    write_run(&run, "toy", 1);
    let csv_path = run.join("downloads.csv");
    let text = fs::read_to_string(&csv_path).unwrap();
    let lines_ok: Vec<String> = text.lines().map(String::from).collect();
    let mut lines = lines_ok.clone();
    lines[3] = lines[3].replacen(",327680,", ",lots,", 1);
    fs::write(&csv_path, lines.join("\n") + "\n").unwrap();
    let err = load_input(&run).unwrap_err().to_string();
    assert!(
        err.contains("downloads.csv:4:") && err.contains("size_bytes") && err.contains("lots"),
        "{err}"
    );

    // A row with too few fields.
    let mut short = lines_ok.clone();
    short[3] = "client-web-1,web,327680".into();
    fs::write(&csv_path, short.join("\n") + "\n").unwrap();
    let err = load_input(&run).unwrap_err().to_string();
    assert!(
        err.contains("downloads.csv:4:") && err.contains("3 fields"),
        "{err}"
    );

    // A missing required column; an extra one is fine.
    let header: Vec<&str> = lines_ok[0].split(',').collect();
    assert_eq!(header[6], "ttlb_s");
    let renamed = lines_ok[0].replace("ttlb_s", "ttlb");
    let mut no_col = lines_ok.clone();
    no_col[0] = renamed;
    fs::write(&csv_path, no_col.join("\n") + "\n").unwrap();
    let err = load_input(&run).unwrap_err().to_string();
    assert!(
        err.contains("downloads.csv:1:") && err.contains("missing required column(s): ttlb_s"),
        "{err}"
    );
    let extra: Vec<String> = lines_ok
        .iter()
        .enumerate()
        .map(|(i, l)| format!("{l},{}", if i == 0 { "future_column" } else { "x" }))
        .collect();
    fs::write(&csv_path, extra.join("\n") + "\n").unwrap();
    if let Err(e) = load_input(&run) {
        panic!("an extra column is refused: {e}");
    }

    fs::remove_file(run.join("relays.csv")).unwrap();
    let err = load_input(&run).unwrap_err().to_string();
    assert!(
        err.contains("relays.csv") && err.contains("missing"),
        "{err}"
    );

    fs::write(run.join("run.json"), "{\"scenario_name\": 3}").unwrap();
    let err = load_input(&run).unwrap_err().to_string();
    assert!(err.contains("run.json"), "{err}");

    // Trials of different scenarios.
    let mixed = tmp.0.join("mixed");
    write_run(&mixed.join("trial-1"), "toy", 1);
    write_run(&mixed.join("trial-2"), "small", 2);
    let err = load_input(&mixed).unwrap_err().to_string();
    assert!(
        err.contains("different scenarios") && err.contains("trial-2") && err.contains("small"),
        "{err}"
    );
    OutputDir::create(&mixed)
        .unwrap()
        .write_trials(&TrialsManifest {
            scenario: "toy".into(),
            trials: vec!["trial-1".into(), "trial-2".into()],
            seeds: vec![1, 2],
        })
        .unwrap();
    let err = load_input(&mixed).unwrap_err().to_string();
    assert!(
        err.contains("different scenarios") && err.contains("\"small\""),
        "{err}"
    );

    // A manifest naming a trial that is not there, and one with a wrong seed.
    let stale = tmp.0.join("stale");
    write_trials(&stale, "toy", &[1, 2]);
    fs::remove_dir_all(stale.join("trial-2")).unwrap();
    let err = load_input(&stale).unwrap_err().to_string();
    assert!(
        err.contains("trials.json") && err.contains("trial-2"),
        "{err}"
    );
    let seeds = tmp.0.join("seeds");
    write_trials(&seeds, "toy", &[1, 2]);
    fs::write(
        seeds.join("trials.json"),
        r#"{"scenario": "toy", "trials": ["trial-1", "trial-2"], "seeds": [1, 9]}"#,
    )
    .unwrap();
    let err = load_input(&seeds).unwrap_err().to_string();
    assert!(err.contains("seed 9") && err.contains("trial-2"), "{err}");
}

#[test]
fn older_run_json_without_progress_loads() {
    let tmp = TempDir::new("old");
    write_run(&tmp.0, "toy", 1);
    let path = tmp.0.join("run.json");
    let mut value: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(&path).unwrap()).unwrap();
    value.as_object_mut().unwrap().remove("progress");
    fs::write(&path, serde_json::to_string(&value).unwrap()).unwrap();
    let input = load_input(&tmp.0).unwrap();
    assert!(input.runs()[0].info.progress.is_empty());
    write_report(&input, &tmp.0).unwrap();
    let names: BTreeSet<String> = fs::read_dir(&tmp.0)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.contains("diagnostics_progress.png"));
}

/// A run that counted its network's state gets its memory over simulated time, with what the
/// network held at the last count in the caption; runs without a count get no such figure.
#[test]
fn a_counted_run_plots_its_memory_and_names_what_it_held() {
    let tmp = TempDir::new("state");
    write_run(&tmp.0, "toy", 1);
    let path = tmp.0.join("run.json");
    let mut info: RunInfo = serde_json::from_str(&fs::read_to_string(&path).unwrap()).unwrap();
    info.state = (1..=3)
        .map(|i| StateSample {
            sim_s: 10.0 * i as f64,
            wall_s: i as f64,
            rss_bytes: (i * 100) << 20,
            events: 5_000_000 * i,
            pending_events: 1_000 * i,
            client_channels: 6,
            relay_channels: 2 * 17,
            relay_client_channels: 6,
            client_circuits: 12 + i,
            relay_circuits: 36,
            streams: 3,
            exit_streams: 3,
            sockets: 58,
            socket_slots: 60,
            queued_cells: 5 * i,
        })
        .collect();
    fs::write(&path, serde_json::to_string(&info).unwrap()).unwrap();
    let input = load_input(&tmp.0).unwrap();
    write_report(&input, &tmp.0).unwrap();
    assert!(tmp.0.join("diagnostics_memory.svg").exists());
    let html = fs::read_to_string(tmp.0.join(REPORT_HTML)).unwrap();
    assert!(
        html.contains(
            "at 30 s: 15 client circuits, 6 client channels, 17 relay-to-relay channels, 58 \
             sockets, 3000 pending events, 15 cells queued at relays, 0.5 M events per \
             simulated second and 5.0 M per wall second since 20 s"
        ),
        "the caption names what the network held last, and what the last stretch cost"
    );
    // Without a count, no memory figure.
    let bare = TempDir::new("state-none");
    write_run(&bare.0, "toy", 1);
    write_report(&load_input(&bare.0).unwrap(), &bare.0).unwrap();
    assert!(!bare.0.join("diagnostics_memory.svg").exists());
}

/// Turns the run in `dir` into one under the socket exhaustion attack: from second 40 to 89
/// middle1 opens sockets (40 more each second, up to a limit of 1000) and writes a quarter of
/// what it did before. run.json asks for `plot` to be plotted over time.
fn attack(dir: &Path, plot: &[&str]) {
    let mut data = RunData::load(dir).unwrap();
    for r in data.relays.iter_mut().filter(|r| r.relay == "middle1") {
        if (40..90).contains(&r.second) {
            r.open_sockets = Some(((r.second - 39) as u32 * 40).min(1000));
            r.bytes_written /= 4;
        }
    }
    data.info.plot_relays = plot.iter().map(|s| s.to_string()).collect();
    let out = OutputDir::create(dir).unwrap();
    out.write_relays(&data.relays).unwrap();
    out.write_run(&data.info).unwrap();
}

/// A text element of an SVG holding exactly `s`, as plotters writes it.
fn text(s: &str) -> String {
    format!(">\n{s}\n</text>")
}

fn relay_options(relays: &[&str]) -> ReportOptions {
    ReportOptions {
        relays: relays.iter().map(|s| s.to_string()).collect(),
    }
}

fn relay_files(dir: &Path) -> BTreeSet<String> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("relay_") && !n.contains("goodput") && !n.contains("busiest"))
        .collect()
}

#[test]
fn report_plots_named_relays_over_time() {
    let tmp = TempDir::new("relays");
    write_run(&tmp.0, "attack", 1);
    attack(&tmp.0, &["middle1"]);
    let input = load_input(&tmp.0).unwrap();
    assert_eq!(input.runs()[0].info.plot_relays, ["middle1"]);

    // run.json's relay, then the caller's; middle1 named twice is plotted once.
    let files = write_report_with(&input, &tmp.0, &relay_options(&["guard2", "middle1"])).unwrap();
    let stems = [
        "relay_middle1_throughput",
        "relay_middle1_sockets",
        "relay_guard2_throughput",
        "relay_guard2_sockets",
    ];
    let mut expected = BTreeSet::new();
    for stem in stems {
        for ext in ["svg", "png"] {
            let path = tmp.0.join(format!("{stem}.{ext}"));
            assert!(files.contains(&path), "{stem}.{ext} not returned");
            expected.insert(format!("{stem}.{ext}"));
        }
    }
    assert_eq!(relay_files(&tmp.0), expected);
    let html = fs::read_to_string(tmp.0.join(REPORT_HTML)).unwrap();
    assert_eq!(
        check_links(&tmp.0, &html),
        (REPORT_PLOTS.len() + stems.len()) * 3
    );
    let at = |needle: &str| {
        html.find(needle)
            .unwrap_or_else(|| panic!("report.html lacks {needle}"))
    };
    // After the other plots, in the order asked for, with captions.
    assert!(at("diagnostics_workers.svg") < at("Relays over time"));
    let positions: Vec<usize> = stems
        .iter()
        .map(|s| at(&format!("src=\"{s}.svg\"")))
        .collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{positions:?}");
    at("Bytes relay middle1 wrote and read in each simulated second.");
    at("Sockets the relay held open");

    let throughput = fs::read_to_string(tmp.0.join("relay_middle1_throughput.svg")).unwrap();
    for needle in [
        "Relay middle1 over time: throughput",
        "written",
        "read",
        "MiB/s",
    ] {
        assert!(
            throughput.contains(needle),
            "throughput plot lacks {needle}"
        );
    }
    let sockets = fs::read_to_string(tmp.0.join("relay_middle1_sockets.svg")).unwrap();
    assert!(sockets.contains("Relay middle1 over time: open sockets"));
    // One run: no band, no faint lines.
    assert!(!sockets.contains("<polygon") && !sockets.contains("opacity=\"0.3\""));

    // write_report plots the relays run.json names, and no others.
    for f in relay_files(&tmp.0) {
        fs::remove_file(tmp.0.join(f)).unwrap();
    }
    write_report(&input, &tmp.0).unwrap();
    let only: BTreeSet<String> = stems[..2]
        .iter()
        .flat_map(|s| [format!("{s}.svg"), format!("{s}.png")])
        .collect();
    assert_eq!(relay_files(&tmp.0), only);
}

#[test]
fn trials_report_plots_each_trial_faintly_under_the_mean() {
    let tmp = TempDir::new("relay-trials");
    write_trials(&tmp.0, "attack", &[1, 2, 3]);
    for t in 1..=3 {
        attack(&tmp.0.join(format!("trial-{t}")), &["middle1"]);
    }
    let input = load_input(&tmp.0).unwrap();
    write_report(&input, &tmp.0).unwrap();
    let html = fs::read_to_string(tmp.0.join(REPORT_HTML)).unwrap();
    check_links(&tmp.0, &html);
    assert!(html.contains("faint: each trial"), "{html}");
    let throughput = fs::read_to_string(tmp.0.join("relay_middle1_throughput.svg")).unwrap();
    assert!(throughput.contains("mean of 3 trials"));
    // Bands for written and read, and each of the 3 trials faintly for both.
    assert_eq!(throughput.matches("<polygon").count(), 2);
    assert_eq!(throughput.matches("opacity=\"0.3\"").count(), 6);
    let sockets = fs::read_to_string(tmp.0.join("relay_middle1_sockets.svg")).unwrap();
    assert!(sockets.contains("mean of 3 trials"));
    assert_eq!(sockets.matches("opacity=\"0.3\"").count(), 3);

    // A relay one trial lacks is plotted from the others, and the page says so.
    let trial = tmp.0.join("trial-2");
    let mut data = RunData::load(&trial).unwrap();
    data.relays.retain(|r| r.relay != "middle1");
    OutputDir::create(&trial)
        .unwrap()
        .write_relays(&data.relays)
        .unwrap();
    let input = load_input(&tmp.0).unwrap();
    write_report(&input, &tmp.0).unwrap();
    let html = fs::read_to_string(tmp.0.join(REPORT_HTML)).unwrap();
    assert!(
        html.contains("Relay &quot;middle1&quot; is not in relays.csv of trial-2"),
        "{html}"
    );
    let throughput = fs::read_to_string(tmp.0.join("relay_middle1_throughput.svg")).unwrap();
    assert!(throughput.contains("mean of 2 trials"));
}

#[test]
fn comparison_overlays_named_relays() {
    let tmp = TempDir::new("relay-compare");
    let (one, many, other) = (tmp.0.join("one"), tmp.0.join("many"), tmp.0.join("other"));
    write_run(&one, "vanilla", 1);
    attack(&one, &["middle1"]);
    write_trials(&many, "pctcp", &[11, 12, 13]);
    for t in 1..=3 {
        attack(&many.join(format!("trial-{t}")), &["middle1"]);
    }
    write_run(&other, "imux", 2);
    // This design's relays have other names, so middle1 is missing from it.
    let mut data = RunData::load(&other).unwrap();
    for r in &mut data.relays {
        r.relay = r.relay.replace("middle", "mid");
    }
    OutputDir::create(&other)
        .unwrap()
        .write_relays(&data.relays)
        .unwrap();
    let inputs: Vec<(String, Input)> = [("vanilla", &one), ("pctcp", &many), ("imux", &other)]
        .into_iter()
        .map(|(l, d)| (l.to_string(), load_input(d).unwrap()))
        .collect();
    let out = tmp.0.join("cmp");
    write_comparison_with(&inputs, &out, &relay_options(&["exit1"])).unwrap();
    let html = fs::read_to_string(out.join(COMPARE_HTML)).unwrap();
    check_links(&out, &html);
    assert!(
        html.contains("Relay &quot;middle1&quot; is not in relays.csv of &quot;imux&quot;"),
        "{html}"
    );
    for (stem, labels) in [
        (
            "compare_relay_middle1_throughput",
            &["vanilla", "pctcp"][..],
        ),
        ("compare_relay_middle1_sockets", &["vanilla", "pctcp"]),
        (
            "compare_relay_exit1_throughput",
            &["vanilla", "pctcp", "imux"],
        ),
        ("compare_relay_exit1_sockets", &["vanilla", "pctcp", "imux"]),
    ] {
        assert!(html.contains(&format!("src=\"{stem}.svg\"")), "{stem}");
        let svg = fs::read_to_string(out.join(format!("{stem}.svg"))).unwrap();
        for label in labels {
            assert!(svg.contains(&text(label)), "{stem} lacks {label}");
        }
        // The means with the trials' band, no single trials.
        assert_eq!(svg.matches("<polygon").count(), 1, "{stem}");
        assert!(!svg.contains("opacity=\"0.3\""), "{stem}");
        assert_eq!(
            svg.contains(&text("imux")),
            labels.contains(&"imux"),
            "{stem}: imux"
        );
    }

    // A relay that no input has is an error naming it, and nothing is written.
    let fresh = tmp.0.join("cmp2");
    let err = write_comparison_with(&inputs, &fresh, &relay_options(&["victim9"])).unwrap_err();
    assert!(err.is_bad_input());
    let msg = err.to_string();
    assert!(
        msg.contains("\"victim9\"") && msg.contains("middle1") && msg.contains("imux"),
        "{msg}"
    );
    assert!(!fresh.exists());
}

#[test]
fn unknown_relays_are_errors_naming_them() {
    let tmp = TempDir::new("relay-unknown");
    write_run(&tmp.0, "attack", 1);
    let input = load_input(&tmp.0).unwrap();
    let err = write_report_with(&input, &tmp.0, &relay_options(&["victim9"])).unwrap_err();
    assert!(err.is_bad_input());
    let msg = err.to_string();
    assert!(
        msg.contains("relays.csv")
            && msg.contains("\"victim9\"")
            && msg.contains("exit1, exit2, guard1, guard2 and middle1"),
        "{msg}"
    );
    // Checked before anything is written.
    assert!(!tmp.0.join(REPORT_HTML).exists());

    let msg = write_report_with(&input, &tmp.0, &relay_options(&["Middle1"]))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("did you mean \"middle1\"?"), "{msg}");

    // A name in run.json says where it came from; in trials the error names the trials.
    attack(&tmp.0, &["middle9"]);
    let msg = write_report(&load_input(&tmp.0).unwrap(), &tmp.0)
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("\"middle9\"") && msg.contains("plot_relays"),
        "{msg}"
    );
    let trials = tmp.0.join("trials");
    write_trials(&trials, "toy", &[1, 2]);
    let input = load_input(&trials).unwrap();
    let msg = write_report_with(&input, &trials, &relay_options(&["nope"]))
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("\"nope\"") && msg.contains("any of the 2 trials"),
        "{msg}"
    );
}

#[test]
fn naming_no_relays_leaves_reports_unchanged() {
    let tmp = TempDir::new("relay-none");
    let (a, b) = (tmp.0.join("a"), tmp.0.join("b"));
    write_run(&a, "toy", 4);
    write_run(&b, "toy", 4);
    // An empty list is left out of run.json, as before the field existed.
    assert!(!fs::read_to_string(a.join("run.json"))
        .unwrap()
        .contains("plot_relays"));
    let input = load_input(&a).unwrap();
    let plain = write_report(&input, &a).unwrap();
    let html = fs::read(a.join(REPORT_HTML)).unwrap();
    let with = write_report_with(&load_input(&b).unwrap(), &b, &ReportOptions::default()).unwrap();
    assert_eq!(plain.len(), with.len());
    assert_eq!(plain.len(), REPORT_PLOTS.len() * 2 + 1);
    assert!(relay_files(&a).is_empty());
    for (p, q) in plain.iter().zip(&with) {
        assert_eq!(p.file_name(), q.file_name());
        assert!(
            fs::read(p).unwrap() == fs::read(q).unwrap(),
            "{p:?} differs"
        );
    }
    let text = String::from_utf8(html).unwrap();
    assert!(!text.contains("Relays over time"));

    let inputs = vec![
        ("x".to_string(), load_input(&a).unwrap()),
        ("y".to_string(), load_input(&b).unwrap()),
    ];
    let (c1, c2) = (tmp.0.join("c1"), tmp.0.join("c2"));
    let t1 = write_comparison(&inputs, &c1).unwrap();
    let t2 = write_comparison_with(&inputs, &c2, &ReportOptions::default()).unwrap();
    assert_eq!(t1, t2);
    assert_eq!(
        fs::read(c1.join(COMPARE_HTML)).unwrap(),
        fs::read(c2.join(COMPARE_HTML)).unwrap()
    );
    assert!(relay_files(&c1).is_empty());
}

/// A run whose relays ran on a modelled CPU: exit1's main thread the busiest.
fn write_cpu_run(dir: &Path) -> RunData {
    let mut run = write_run(dir, "toy", 3);
    for s in &mut run.relays {
        let load = match s.relay.as_str() {
            "exit1" => 0.9,
            "guard1" => 0.5,
            _ => 0.2,
        };
        s.cpu = Some(CpuShare {
            busy: load,
            crypto: load * 0.4,
            kernel: load * 0.3,
            tls: load * 0.2,
            other: load * 0.1,
            workers: 0.015625,
            onion_skins: 2,
        });
    }
    let out = OutputDir::create(dir).unwrap();
    out.write_relays(&run.relays).unwrap();
    RunData::load(dir).unwrap()
}

#[test]
fn cpu_columns_round_trip_and_are_plotted() {
    let tmp = TempDir::new("cpu");
    let written = write_cpu_run(&tmp.0);
    let csv = fs::read_to_string(tmp.0.join("relays.csv")).unwrap();
    let header = csv.lines().next().unwrap();
    assert!(
        header
            .ends_with(",cpu_busy,cpu_crypto,cpu_kernel,cpu_tls,cpu_other,cpu_workers,onion_skins"),
        "{header}"
    );
    let exit1 = written.relays.iter().find(|s| s.relay == "exit1").unwrap();
    let c = exit1.cpu.unwrap();
    assert!(
        (c.busy - 0.9).abs() < 1e-6 && (c.crypto - 0.36).abs() < 1e-6,
        "{c:?}"
    );
    assert_eq!((c.workers, c.onion_skins), (0.015625, 2));

    let input = load_input(&tmp.0).unwrap();
    let files = write_report(&input, &tmp.0).unwrap();
    assert!(files.contains(&tmp.0.join("relay_cpu_busiest.svg")));
    let svg = fs::read_to_string(tmp.0.join("relay_cpu_busiest.svg")).unwrap();
    assert!(svg.contains("exit1") && svg.contains("crypto") && svg.contains("kernel I/O"));
    let html = fs::read_to_string(tmp.0.join(REPORT_HTML)).unwrap();
    assert!(
        html.contains("Busiest relay CPU") && html.contains("exit1: main thread 0.900 of a core"),
        "report lacks the CPU summary"
    );

    // Compared with a run without a CPU model: one bar, for the run that has one.
    let plain = TempDir::new("cpu-compare-plain");
    write_run(&plain.0, "toy", 3);
    let out = TempDir::new("cpu-compare");
    write_comparison(
        &[
            ("none".to_string(), load_input(&plain.0).unwrap()),
            ("native".to_string(), load_input(&tmp.0).unwrap()),
        ],
        &out.0,
    )
    .unwrap();
    let svg = fs::read_to_string(out.0.join("compare_relay_cpu.svg")).unwrap();
    assert!(
        svg.contains("native (exit1)") && !svg.contains("none ("),
        "{svg}"
    );

    // A run without a CPU model has neither the columns nor the plot.
    let plain = TempDir::new("cpu-plain");
    write_run(&plain.0, "toy", 3);
    assert!(!fs::read_to_string(plain.0.join("relays.csv"))
        .unwrap()
        .contains("cpu_busy"));
    let files = write_report(&load_input(&plain.0).unwrap(), &plain.0).unwrap();
    assert!(!files
        .iter()
        .any(|f| f.file_name().unwrap().to_string_lossy().contains("cpu")));
    let html = fs::read_to_string(plain.0.join(REPORT_HTML)).unwrap();
    assert!(!html.contains("Busiest relay CPU"));
}

#[test]
fn broken_cpu_columns_give_clear_errors() {
    let tmp = TempDir::new("cpu-broken");
    write_cpu_run(&tmp.0);
    let path = tmp.0.join("relays.csv");
    let text = fs::read_to_string(&path).unwrap();

    // One column of the set missing.
    let cut: String = text
        .lines()
        .map(|l| l.rsplit_once(',').unwrap().0.to_string() + "\n")
        .collect();
    fs::write(&path, &cut).unwrap();
    let err = RunData::load(&tmp.0).unwrap_err().to_string();
    assert!(
        err.contains("relays.csv") && err.contains("not onion_skins"),
        "{err}"
    );

    // A cell emptied while the others are there.
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    let mut cells: Vec<&str> = lines[1].split(',').collect();
    let busy = cells.len() - 7;
    cells[busy] = "";
    lines[1] = cells.join(",");
    fs::write(&path, lines.join("\n") + "\n").unwrap();
    let err = RunData::load(&tmp.0).unwrap_err().to_string();
    assert!(err.contains("cpu_busy") && err.contains("empty"), "{err}");

    // A negative share.
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    let mut cells: Vec<&str> = lines[1].split(',').collect();
    cells[busy + 1] = "-0.5";
    lines[1] = cells.join(",");
    fs::write(&path, lines.join("\n") + "\n").unwrap();
    let err = RunData::load(&tmp.0).unwrap_err().to_string();
    assert!(
        err.contains("cpu_crypto") && err.contains("not a non-negative number"),
        "{err}"
    );
}
