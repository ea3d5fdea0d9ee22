//! `onionlab experiment` and `onionlab reproduce`: variants of a scenario run as trials, kept
//! across invocations, and compared in one report.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::SystemTime;

fn onionlab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_onionlab"))
        .args(args)
        .output()
        .expect("onionlab runs")
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("onionlab-exp-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

fn streams(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn ok(out: &Output) -> String {
    let (stdout, stderr) = streams(out);
    assert!(
        out.status.success(),
        "exit {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status.code()
    );
    stdout
}

/// A network small enough that a run takes a second or two.
const TINY: &str = r#"
name: tiny
run: { seed: 7, stop_time: 2m, bootstrap: 1m }
network: { graph: builtin, builtin: { latency: 20ms, bandwidth: 1 Gbit } }
authorities: 1
relays:
  generate: { guard: 3, exit: 2, guard_exit: 1, middle: 2, bandwidth: { fixed: 2 MiB/s } }
servers: [ { name: web, count: 2, bandwidth: 1 Gbit } ]
clients:
  - { name: web, count: 4, workload: { web: { size: 320 KiB, pause: [1s, 10s] } }, bandwidth: 50 Mbit }
  - { name: bulk, count: 1, workload: { bulk: { size: 5 MiB } }, bandwidth: 50 Mbit }
"#;

/// An experiment comparing the KIST and vanilla schedulers on [`TINY`], two trials each.
fn experiment(vanilla_interval: u32) -> String {
    format!(
        r#"
name: sched
scenario: tiny.yaml
trials: 2
variants:
  - name: kist
    set: {{}}
  - name: vanilla
    set:
      tor.scheduler: vanilla
      tor.kist_run_interval_ms: {vanilla_interval}
"#
    )
}

/// Writes the tiny scenario and an experiment file into `dir`; returns the experiment's path.
fn setup(dir: &Path, experiment_text: &str) -> PathBuf {
    fs::write(dir.join("tiny.yaml"), TINY).unwrap();
    let path = dir.join("sched.yaml");
    fs::write(&path, experiment_text).unwrap();
    path
}

fn trial_dirs(out: &Path) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for variant in ["kist", "vanilla"] {
        for k in 1..=2 {
            dirs.push(out.join(variant).join(format!("trial-{k}")));
        }
    }
    dirs
}

/// run.json's content and modification time, per trial.
fn snapshot(out: &Path) -> Vec<(String, SystemTime)> {
    trial_dirs(out)
        .iter()
        .map(|d| {
            let p = d.join("run.json");
            (
                fs::read_to_string(&p).unwrap(),
                fs::metadata(&p).unwrap().modified().unwrap(),
            )
        })
        .collect()
}

fn lines_with<'a>(stdout: &'a str, word: &str) -> Vec<&'a str> {
    stdout.lines().filter(|l| l.contains(word)).collect()
}

#[test]
fn an_experiment_runs_compares_and_resumes() {
    let dir = tmp("resume");
    let file = setup(&dir, &experiment(10));
    let out = dir.join("out");
    let run = || {
        onionlab(&[
            "experiment",
            file.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "--quiet",
        ])
    };

    // (a) Every variant's trials run, and one comparison covers them.
    let stdout = ok(&run());
    assert_eq!(lines_with(&stdout, ": ran in ").len(), 4, "{stdout}");
    assert!(
        stdout.contains("variant 2/2 (vanilla) trial 1/2: ran in"),
        "{stdout}"
    );
    for d in trial_dirs(&out) {
        let info: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(d.join("run.json")).unwrap()).unwrap();
        assert_eq!(info["complete"], true, "{}", d.display());
        for f in ["downloads.csv", "relays.csv", "circuits.csv"] {
            assert!(d.join(f).is_file(), "{}/{f}", d.display());
        }
    }
    // Paired trials: the same seeds in every variant, different from trial to trial.
    let seed = |v: &str, k: u32| {
        let p = out.join(v).join(format!("trial-{k}")).join("run.json");
        let info: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(p).unwrap()).unwrap();
        info["seed"].as_u64().unwrap()
    };
    assert_eq!(seed("kist", 1), seed("vanilla", 1));
    assert_ne!(seed("kist", 1), seed("kist", 2));
    let scheduler = |v: &str| {
        let p = out.join(v).join("trial-1").join("run.json");
        let info: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(p).unwrap()).unwrap();
        info["scenario"]["tor"]["scheduler"].clone()
    };
    assert_eq!(scheduler("kist"), "kist");
    assert_eq!(scheduler("vanilla"), "vanilla");
    let compare = out.join("compare");
    assert!(compare.join("compare.html").is_file());
    let csv = fs::read_to_string(compare.join("comparison.csv")).unwrap();
    assert!(csv.contains(",kist,") && csv.contains(",vanilla,"), "{csv}");
    let html = fs::read_to_string(compare.join("compare.html")).unwrap();
    assert!(html.contains("kist vs vanilla"), "baseline first");
    for v in ["kist", "vanilla"] {
        assert!(out.join(v).join("trials.json").is_file());
    }
    // Without `sweep:` there is no sweep anywhere.
    assert!(!compare.join("sweep.csv").exists());
    assert!(!html.contains("Sweep"), "no sweep section");
    let record: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(out.join("experiment.json")).unwrap()).unwrap();
    assert_eq!(record["name"], "sched");
    assert_eq!(record["trials"], 2);
    assert_eq!(record["complete"], true);
    assert_eq!(record["variants"][1]["name"], "vanilla");
    assert_eq!(record["variants"][1]["set"][0]["path"], "tor.scheduler");
    assert_eq!(record["variants"][1]["set"][0]["value"], "vanilla");
    assert_eq!(record["variants"][1]["set"][1]["value"], 10);
    assert_eq!(record["variants"][0]["trials"][1]["status"], "ran");
    assert!(record.get("sweep").is_none(), "{record}");

    // (b) Again: nothing runs, nothing is rewritten, the comparison is made again.
    let before = snapshot(&out);
    let stdout = ok(&run());
    assert_eq!(lines_with(&stdout, ": kept").len(), 4, "{stdout}");
    assert!(lines_with(&stdout, ": ran in ").is_empty(), "{stdout}");
    assert_eq!(snapshot(&out), before);
    let record: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(out.join("experiment.json")).unwrap()).unwrap();
    assert_eq!(record["variants"][0]["trials"][0]["status"], "kept");

    // The same experiment started from another folder (a different path to the same files)
    // still finds its trials.
    let moved = Command::new(env!("CARGO_BIN_EXE_onionlab"))
        .args(["experiment", "sched.yaml", "-o", "out", "--quiet"])
        .current_dir(&dir)
        .output()
        .unwrap();
    let stdout = ok(&moved);
    assert_eq!(lines_with(&stdout, ": kept").len(), 4, "{stdout}");

    // (c) One variant changed: only its trials run again.
    fs::write(&file, experiment(20)).unwrap();
    let stdout = ok(&run());
    let ran = lines_with(&stdout, ": ran in ");
    assert_eq!(ran.len(), 2, "{stdout}");
    assert!(ran.iter().all(|l| l.contains("(vanilla)")), "{stdout}");
    assert!(ran[0].contains("another scenario"), "{stdout}");
    let kept = lines_with(&stdout, ": kept");
    assert_eq!(kept.len(), 2, "{stdout}");
    assert!(kept.iter().all(|l| l.contains("(kist)")), "{stdout}");
    let after = snapshot(&out);
    assert_eq!(after[..2], before[..2], "kist's trials untouched");
    assert_ne!(after[2].0, before[2].0, "vanilla's trials rerun");

    // An incomplete trial (a run that was stopped) runs again; the others are kept.
    let partial = out.join("kist").join("trial-2").join("run.json");
    let text = fs::read_to_string(&partial).unwrap();
    fs::write(
        &partial,
        text.replace("\"complete\": true", "\"complete\": false"),
    )
    .unwrap();
    let stdout = ok(&run());
    let ran = lines_with(&stdout, ": ran in ");
    assert_eq!(ran.len(), 1, "{stdout}");
    assert!(
        ran[0].contains("(kist) trial 2/2") && ran[0].contains("incomplete"),
        "{stdout}"
    );

    // --trials 3 adds a third trial per variant and keeps the first two.
    let stdout = ok(&onionlab(&[
        "experiment",
        file.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--quiet",
        "--trials",
        "3",
    ]));
    assert_eq!(lines_with(&stdout, ": kept").len(), 4, "{stdout}");
    assert_eq!(lines_with(&stdout, ": ran in ").len(), 2, "{stdout}");
    assert!(out
        .join("vanilla")
        .join("trial-3")
        .join("run.json")
        .is_file());
    let _ = fs::remove_dir_all(&dir);
}

/// Ctrl-C during the second trial (the signal handler must reach every run of the process, not
/// only the first) stops the experiment with exit 130, keeps the first trial and marks the
/// second partial; the same command then keeps the first and runs the second again.
#[test]
fn an_interrupted_experiment_keeps_its_finished_trials() {
    use std::io::{BufRead, BufReader};
    let dir = tmp("interrupt");
    let file = setup(
        &dir,
        "scenario: tiny.yaml\ntrials: 2\nstop_time: 10m\nvariants:\n  - name: only\n",
    );
    let out = dir.join("out");
    let args = [
        "experiment",
        file.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--quiet",
    ];
    let mut child = Command::new(env!("CARGO_BIN_EXE_onionlab"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = String::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        seen.push_str(&line);
        seen.push('\n');
        if line.contains("trial 1/2: ran in") {
            break;
        }
    }
    assert!(seen.contains("trial 1/2: ran in"), "{seen}");
    // SAFETY: signalling a child process this test started and has not yet waited for.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert_eq!(status.code(), Some(130), "{seen}{rest:?}\n{stderr}");
    assert!(
        stderr.contains("experiment interrupted at variant 1/1 (only) trial 2/2"),
        "{stderr}"
    );
    let info = |k: u32| -> serde_json::Value {
        let p = out.join("only").join(format!("trial-{k}")).join("run.json");
        serde_json::from_str(&fs::read_to_string(p).unwrap()).unwrap()
    };
    assert_eq!(info(1)["complete"], true);
    // The signal may land while trial 2 runs (it leaves a partial run) or just before it
    // starts (it leaves nothing): both are a correct stop at trial 2.
    let trial2_started = out.join("only/trial-2/run.json").exists();
    if trial2_started {
        assert_eq!(info(2)["complete"], false);
    }
    let record: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(out.join("experiment.json")).unwrap()).unwrap();
    assert_eq!(record["complete"], false);
    assert_eq!(record["variants"][0]["trials"][0]["status"], "ran");
    assert_eq!(record["variants"][0]["trials"][1]["status"], "not run");
    assert!(!out.join("compare").exists());

    let stdout = ok(&onionlab(&args));
    assert!(stdout.contains("trial 1/2: kept"), "{stdout}");
    assert!(stdout.contains("trial 2/2: ran in"), "{stdout}");
    assert_eq!(
        stdout.contains("replaced an incomplete run"),
        trial2_started,
        "{stdout}"
    );
    assert_eq!(info(2)["complete"], true);
    assert!(out.join("compare").join("compare.html").is_file());
    let _ = fs::remove_dir_all(&dir);
}

/// Runs `experiment FILE --check` on `text` (beside the tiny scenario) and expects exit 2
/// with an error naming the file and containing every one of `expect`.
fn refused(dir: &Path, name: &str, text: &str, expect: &[&str]) {
    fs::write(dir.join("tiny.yaml"), TINY).unwrap();
    let path = dir.join(format!("{name}.yaml"));
    fs::write(&path, text).unwrap();
    for check in [true, false] {
        let mut args = vec!["experiment", path.to_str().unwrap(), "--quiet"];
        let out_dir = dir.join(format!("out-{name}"));
        args.extend(["-o", out_dir.to_str().unwrap()]);
        if check {
            args.push("--check");
        }
        let out = onionlab(&args);
        let (_, stderr) = streams(&out);
        assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
        assert!(!stderr.contains("panicked"), "{name}: {stderr}");
        assert!(
            stderr.contains(&format!("{name}.yaml")),
            "{name}: the error does not name the file: {stderr}"
        );
        for e in expect {
            assert!(stderr.contains(e), "{name}: expected `{e}` in {stderr}");
        }
        assert!(
            !out_dir.exists(),
            "{name}: nothing is written for bad input"
        );
    }
}

#[test]
fn bad_experiments_exit_2_naming_the_file_and_field() {
    let dir = tmp("bad");
    let variants = |set: &str| {
        format!("scenario: tiny.yaml\nvariants:\n  - name: base\n  - name: other\n    set: {set}\n")
    };
    refused(
        &dir,
        "unknown-key",
        &variants("{ tor.shceduler: vanilla }"),
        &[
            "variant other",
            "tor.shceduler",
            "unknown field `shceduler`",
        ],
    );
    refused(
        &dir,
        "bad-value",
        &variants("{ tor.scheduler: fast }"),
        &["variant other", "tor.scheduler", "kist, kist_lite, vanilla"],
    );
    refused(
        &dir,
        "through-a-list",
        &variants("{ clients.count: 3 }"),
        &["variant other", "clients.count", "`clients` is a list"],
    );
    refused(
        &dir,
        "bad-name",
        "scenario: tiny.yaml\nvariants:\n  - name: base\n  - name: ../escape\n",
        &["variants[1].name", "letters, digits"],
    );
    refused(
        &dir,
        "duplicate-names",
        "scenario: tiny.yaml\nvariants:\n  - name: base\n  - name: Base\n",
        &["variants[1].name", "also the name of variants[0]"],
    );
    refused(
        &dir,
        "reserved-name",
        "scenario: tiny.yaml\nvariants:\n  - name: compare\n",
        &["variants[0].name", "where the comparison goes"],
    );
    refused(
        &dir,
        "missing-scenario",
        "scenario: nowhere.yaml\nvariants:\n  - name: base\n",
        &["scenario", "nowhere.yaml", "not a built-in scenario"],
    );
    refused(
        &dir,
        "no-scenario",
        "variants:\n  - name: base\n",
        &["missing field `scenario`"],
    );
    refused(
        &dir,
        "zero-trials",
        "scenario: tiny.yaml\ntrials: 0\nvariants:\n  - name: base\n",
        &["trials", "expected 1 to 1000 trials, found 0"],
    );
    refused(
        &dir,
        "misspelt-field",
        "scenario: tiny.yaml\ntrails: 3\nvariants:\n  - name: base\n",
        &[":2: trails", "unknown field `trails`"],
    );
    refused(
        &dir,
        "no-variants",
        "scenario: tiny.yaml\nvariants: []\n",
        &["variants", "at least one variant"],
    );
    refused(
        &dir,
        "bad-stop-time",
        "scenario: tiny.yaml\nstop_time: 5\nvariants:\n  - name: base\n",
        &["stop_time"],
    );
    refused(
        &dir,
        "twice",
        "scenario: tiny.yaml\nvariants:\n  - name: base\n    set: { run.seed: 1, run.seed: 2 }\n",
        &["run.seed"],
    );
    let many: String = (0..65).map(|i| format!("  - name: v{i}\n")).collect();
    refused(
        &dir,
        "too-many",
        &format!("scenario: tiny.yaml\nvariants:\n{many}"),
        &["variants", "at most 64"],
    );
    fs::write(dir.join("huge.yaml"), "#".repeat(2 << 20)).unwrap();
    let out = onionlab(&["experiment", dir.join("huge.yaml").to_str().unwrap()]);
    let (_, stderr) = streams(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("huge.yaml") && stderr.contains("larger than 1 MiB"),
        "{stderr}"
    );

    let out = onionlab(&["experiment", dir.join("absent.yaml").to_str().unwrap()]);
    let (_, stderr) = streams(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("absent.yaml"), "{stderr}");

    let good = setup(&dir, &experiment(10));
    for (flag, value, expect) in [
        ("--trials", "0", "--trials: expected 1 to 1000"),
        (
            "--stop-time",
            "0s",
            "--stop-time: expected a positive duration",
        ),
        ("--threads", "0", "--threads"),
    ] {
        let out = onionlab(&["experiment", good.to_str().unwrap(), flag, value, "--check"]);
        let (_, stderr) = streams(&out);
        assert_eq!(out.status.code(), Some(2), "{flag}: {stderr}");
        assert!(stderr.contains(expect), "{flag}: {stderr}");
    }
    // An output folder the experiment cannot make: `--check` refuses it as the run does.
    let file = dir.join("a-file");
    fs::write(&file, "x").unwrap();
    for out_dir in [file.clone(), file.join("below")] {
        for check in [true, false] {
            let mut args = vec![
                "experiment",
                good.to_str().unwrap(),
                "-o",
                out_dir.to_str().unwrap(),
                "--quiet",
            ];
            if check {
                args.push("--check");
            }
            let out = onionlab(&args);
            let (_, stderr) = streams(&out);
            assert_eq!(out.status.code(), Some(2), "{check}: {stderr}");
            assert!(
                stderr.contains("output directory") && stderr.contains("a-file"),
                "{check}: {stderr}"
            );
            assert!(!stderr.contains("os error"), "{stderr}");
        }
    }
    let _ = fs::remove_dir_all(&dir);
}

/// Three relays, a middle-exit link whose loss the sweep varies, and uploading clients: a
/// run takes about a second.
const TINY_UPLOADS: &str = r#"
name: tiny-up
run: { seed: 3, stop_time: 30s, bootstrap: 1s }
network:
  graph: builtin
  builtin: { latency: 10ms, bandwidth: 1 Gbit }
  impairments: [ { between: [middle, exit], loss: 0.0 } ]
authorities: 1
relays:
  list:
    - { name: guard, flags: [guard, fast, stable], bandwidth_rate: 20 MiB/s }
    - { name: middle, flags: [fast, stable], bandwidth_rate: 20 MiB/s }
    - { name: exit, flags: [exit, fast, stable], bandwidth_rate: 20 MiB/s }
servers: [ { name: sink, bandwidth: 1 Gbit } ]
clients:
  - { name: up, count: 1, workload: { upload: { size: 1 MiB } }, bandwidth: 50 Mbit, start: 2s }
"#;

/// A sweep over loss (x) and client count (series), two trials per variant; the first variant
/// is listed last on purpose, to show that points are ordered by x and curves by first
/// appearance.
const SWEEP_EXPERIMENT: &str = r#"
name: sweep
scenario: tiny-up.yaml
trials: 2
sweep:
  x: network.impairments.0.loss
  series: [ "clients[0].count" ]
  metric: slowest_upload_goodput
variants:
  - { name: one-lossy, set: { network.impairments.0.loss: 0.02 } }
  - { name: two-clean, set: { clients.0.count: 2 } }
  - { name: two-lossy, set: { clients.0.count: 2, network.impairments.0.loss: 0.02 } }
  - { name: one-clean, set: { network.impairments.0.loss: 0 } }
"#;

/// The slowest client's goodput in MiB/s, computed here from a trial's downloads.csv the
/// plain way: per client its first finished upload's size over its time to last byte, the
/// minimum over `clients`, 0 for a client without one.
fn slowest_from_csv(trial: &Path, clients: usize) -> f64 {
    let text = fs::read_to_string(trial.join("downloads.csv")).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    (1..=clients)
        .map(|i| {
            let name = format!("client-up-{i}");
            rows.iter()
                .filter(|r| r[col("client")] == name && r[col("outcome")] == "ok")
                .filter(|r| r[col("direction")] == "upload" && r[col("bootstrap")] == "false")
                .map(|r| {
                    let start: f64 = r[col("start_s")].parse().unwrap();
                    let ttlb: f64 = r[col("ttlb_s")].parse().unwrap();
                    let size: f64 = r[col("size_bytes")].parse().unwrap();
                    (start + ttlb, size / ttlb / (1024.0 * 1024.0))
                })
                .min_by(|a, b| a.0.total_cmp(&b.0))
                .map_or(0.0, |(_, g)| g)
        })
        .fold(f64::INFINITY, f64::min)
}

#[test]
fn a_sweep_plots_the_metric_against_the_swept_setting() {
    let dir = tmp("sweep");
    fs::write(dir.join("tiny-up.yaml"), TINY_UPLOADS).unwrap();
    let file = dir.join("sweep.yaml");
    fs::write(&file, SWEEP_EXPERIMENT).unwrap();
    let out = dir.join("out");
    let stdout = ok(&onionlab(&[
        "experiment",
        file.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--quiet",
    ]));
    let compare = out.join("compare");
    // The summary names the plot and the table, after the sweep's own table.
    assert!(stdout.contains("Sweep: slowest_upload_goodput"), "{stdout}");
    assert!(
        stdout.contains("sweep_slowest_upload_goodput.svg") && stdout.contains("sweep.csv"),
        "{stdout}"
    );
    for f in [
        "sweep_slowest_upload_goodput.svg",
        "sweep_slowest_upload_goodput.png",
        "sweep.csv",
    ] {
        assert!(compare.join(f).is_file(), "{f} missing");
    }
    let svg = fs::read_to_string(compare.join("sweep_slowest_upload_goodput.svg")).unwrap();
    assert!(
        svg.contains("count=1") && svg.contains("count=2"),
        "a curve per count"
    );
    let html = fs::read_to_string(compare.join("compare.html")).unwrap();
    assert!(html.contains("src=\"sweep_slowest_upload_goodput.svg\""));
    assert!(html.contains("href=\"sweep.csv\""));

    let csv = fs::read_to_string(compare.join("sweep.csv")).unwrap();
    let mut lines = csv.lines();
    assert_eq!(
        lines.next().unwrap(),
        "series,x,metric,variant,trials,mean,ci_low,ci_high,unfinished_clients,quic_channels,\
         tcp_fallbacks"
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    let placed: Vec<(&str, &str, &str)> = rows.iter().map(|r| (r[0], r[1], r[3])).collect();
    assert_eq!(
        placed,
        [
            ("count=1", "0", "one-clean"),
            ("count=1", "0.02", "one-lossy"),
            ("count=2", "0", "two-clean"),
            ("count=2", "0.02", "two-lossy"),
        ],
        "{csv}"
    );
    for r in &rows {
        assert_eq!(r[2], "slowest_upload_goodput");
        assert_eq!(r[4], "2", "two trials");
        // The mean is that of the metric computed independently from each trial's files.
        let clients = if r[0] == "count=1" { 1 } else { 2 };
        let per_trial: Vec<f64> = (1..=2)
            .map(|k| slowest_from_csv(&out.join(r[3]).join(format!("trial-{k}")), clients))
            .collect();
        let mean: f64 = per_trial.iter().sum::<f64>() / 2.0;
        let written: f64 = r[5].parse().unwrap();
        assert!(
            (written - mean).abs() < 1e-6,
            "{}: {written} against {mean}",
            r[3]
        );
        assert!(mean > 0.0, "{}: every client finishes an upload", r[3]);
        let (low, high): (f64, f64) = (r[6].parse().unwrap(), r[7].parse().unwrap());
        // (Written to six decimals: two equal trials give an interval of width 0.)
        assert!(
            low <= mean + 1e-6 && mean <= high + 1e-6,
            "{}: interval around the mean",
            r[3]
        );
        assert_eq!(r[8], "0");
    }
    // Loss slows the slowest client down.
    let mean = |variant: &str| -> f64 {
        rows.iter().find(|r| r[3] == variant).unwrap()[5]
            .parse()
            .unwrap()
    };
    assert!(mean("one-lossy") < mean("one-clean"), "{csv}");

    let record: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(out.join("experiment.json")).unwrap()).unwrap();
    assert_eq!(record["sweep"]["x"], "network.impairments.0.loss");
    assert_eq!(record["sweep"]["metric"], "slowest_upload_goodput");
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn bad_sweeps_exit_2_naming_the_file_and_field() {
    let dir = tmp("bad-sweep");
    let with_sweep = |sweep: &str| {
        format!(
            "scenario: tiny.yaml\nsweep: {sweep}\nvariants:\n  - name: base\n    set: {{ \
             network.impairments: [ {{ between: [\"clients:bulk\", guard1], loss: 0.0 }} ] }}\n  \
             - name: lossy\n    set: {{ network.impairments: [ {{ between: [\"clients:bulk\", \
             guard1], loss: 0.01 }} ], tor.scheduler: vanilla }}\n"
        )
    };
    refused(
        &dir,
        "sweep-unknown-metric",
        &with_sweep("{ x: network.impairments.0.loss, metric: goodput }"),
        &[
            "sweep.metric",
            "unknown metric \"goodput\"",
            "slowest_upload_goodput",
        ],
    );
    refused(
        &dir,
        "sweep-unknown-path",
        &with_sweep("{ x: network.impairments.0.los, metric: slowest_download_goodput }"),
        &[
            "sweep.x",
            "`network.impairments.0.los` is not a setting",
            "no `los` in `network.impairments.0`",
        ],
    );
    refused(
        &dir,
        "sweep-unset-path",
        &with_sweep(
            "{ x: network.impairments.0.loss, series: [run.seed], \
             metric: slowest_download_goodput }",
        ),
        &["sweep.series[0]", "no variant sets `run.seed`"],
    );
    refused(
        &dir,
        "sweep-text-x",
        &with_sweep("{ x: tor.scheduler, metric: slowest_download_goodput }"),
        &["sweep.x", "the x axis needs a number"],
    );
    refused(
        &dir,
        "sweep-no-uploads",
        &with_sweep("{ x: network.impairments.0.loss, metric: slowest_upload_goodput }"),
        &["sweep.metric", "no client group of that kind"],
    );
    refused(
        &dir,
        "sweep-same-place",
        "scenario: tiny.yaml\nsweep: { x: run.seed, metric: slowest_download_goodput }\n\
         variants:\n  - { name: kist, set: { run.seed: 5 } }\n  - { name: vanilla, set: { \
         run.seed: 5, tor.scheduler: vanilla } }\n",
        &["sweep", "variants kist and vanilla", "same x and series"],
    );
    refused(
        &dir,
        "sweep-misspelt-key",
        &with_sweep("{ x: network.impairments.0.loss, metrc: slowest_download_goodput }"),
        &["sweep", "unknown field `metrc`"],
    );
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn reproductions_are_listed_and_valid_from_any_folder() {
    let dir = tmp("reproduce");
    let list = Command::new(env!("CARGO_BIN_EXE_onionlab"))
        .args(["reproduce", "--list"])
        .current_dir(&dir)
        .output()
        .unwrap();
    let stdout = ok(&list);
    assert!(stdout.contains("schedulers"), "{stdout}");
    assert!(
        stdout.contains("examples/experiments/schedulers.yaml"),
        "{stdout}"
    );
    let names: Vec<&str> = stdout
        .lines()
        .filter(|l| !l.starts_with(' '))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(!names.is_empty());
    for name in names {
        let out = Command::new(env!("CARGO_BIN_EXE_onionlab"))
            .args(["reproduce", name, "--check"])
            .current_dir(&dir)
            .output()
            .unwrap();
        let stdout = ok(&out);
        assert!(stdout.contains(": valid: "), "{name}: {stdout}");
        let (_, stderr) = streams(&out);
        assert!(!stderr.contains("warning"), "{name}: {stderr}");
    }
    let out = onionlab(&["reproduce", "nothing-of-that-name"]);
    let (_, stderr) = streams(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("no such reproduction") && stderr.contains("schedulers"),
        "{stderr}"
    );
    let _ = fs::remove_dir_all(&dir);
}

/// The shipped experiment file is the one `reproduce` embeds, and runs as a file too.
#[test]
fn the_shipped_experiment_file_checks_on_its_own() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let file = repo.join("examples/experiments/schedulers.yaml");
    let stdout = ok(&onionlab(&[
        "experiment",
        file.to_str().unwrap(),
        "--check",
    ]));
    assert!(
        stdout.contains("valid: 3 variants of toy, 3 trials each"),
        "{stdout}"
    );
}
