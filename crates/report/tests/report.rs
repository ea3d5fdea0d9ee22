//! Reports and comparisons on synthetic run directories.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use onionlab_report::{
    load_input, write_comparison, write_report, CircuitRecord, DownloadRecord, Input, Outcome,
    OutputDir, RelaySample, RunData, RunInfo, TrialsManifest, WorkerRecord, COMPARE_HTML,
    COMPARISON_CSV, REPORT_HTML,
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
            },
            WorkerRecord {
                hosts: 9,
                events: 400,
                busy_s: 2.0,
                blocked_s: 1.5,
            },
        ],
        complete: true,
        mode: "simulation".into(),
        interrupted_reason: None,
        progress: vec![(0.0, 0.0), (1.0, 30.0), (2.2, 70.0), (3.5, 120.0)],
        emulation: None,
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
            outcome,
            server: "server-web-1".into(),
            guard: "guard1".into(),
            middle: "middle1".into(),
            exit: "exit1".into(),
            bootstrap: start < 20.0,
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
