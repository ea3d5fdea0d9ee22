//! The `onionlab` command as users and scripts use it.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn onionlab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_onionlab"))
        .args(args)
        .output()
        .expect("onionlab runs")
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("onionlab-cli-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    dir
}

/// A scenario small enough to run in a second or two.
const TINY: &str = r#"
name: tiny
run: { seed: 7, stop_time: 3m, bootstrap: 1m }
network: { graph: builtin, builtin: { latency: 20ms, bandwidth: 1 Gbit } }
authorities: 1
relays:
  generate: { guard: 3, exit: 2, guard_exit: 1, middle: 4, bandwidth: { fixed: 2 MiB/s } }
servers: [ { name: web, count: 2, bandwidth: 1 Gbit } ]
clients:
  - { name: web, count: 6, workload: { web: { size: 320 KiB, pause: [1s, 10s] } }, bandwidth: 50 Mbit }
  - { name: bulk, count: 2, workload: { bulk: { size: 5 MiB } }, bandwidth: 50 Mbit }
"#;

fn tiny_file(dir: &Path) -> PathBuf {
    fs::create_dir_all(dir).unwrap();
    let path = dir.join("tiny.yaml");
    fs::write(&path, TINY).unwrap();
    path
}

#[test]
fn check_accepts_every_example() {
    for entry in fs::read_dir(repo().join("examples")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let out = onionlab(&["check", path.to_str().unwrap()]);
            assert!(
                out.status.success(),
                "{}: {}",
                path.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

#[test]
fn broken_scenarios_exit_2_with_a_clear_error_and_no_panic() {
    let dir = repo().join("crates/scenario/tests/broken");
    let mut n = 0;
    for entry in fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let text = fs::read_to_string(&path).unwrap();
        let expect = text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("# expect:"))
            .map(str::trim)
            .unwrap_or_default()
            .to_string();
        for command in ["check", "run"] {
            let out = onionlab(
                &[command, path.to_str().unwrap(), "--quiet"]
                    [..if command == "check" { 2 } else { 3 }],
            );
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(
                out.status.code(),
                Some(2),
                "{command} {}: {stderr}",
                path.display()
            );
            assert!(!stderr.contains("panicked"), "{}: {stderr}", path.display());
            let name = path.file_name().unwrap().to_str().unwrap();
            assert!(
                stderr.contains(name),
                "{}: error does not name the file: {stderr}",
                path.display()
            );
            assert!(
                stderr.contains(&expect),
                "{}: expected `{expect}` in {stderr}",
                path.display()
            );
        }
        n += 1;
    }
    assert!(n >= 20, "only {n} broken scenarios");
}

/// What `cargo install` gives a user: the binary alone, run from an empty directory, with no
/// checkout, home or onionlab variable to find anything through. Every built-in scenario must
/// still check, and the toy network must run.
#[test]
fn the_binary_alone_runs_every_builtin_scenario_from_an_empty_directory() {
    let dir = tmp("alone");
    let bin_dir = dir.join("bin");
    let work = dir.join("work");
    fs::create_dir_all(&bin_dir).unwrap();
    fs::create_dir_all(&work).unwrap();
    let bin = bin_dir.join("onionlab");
    fs::copy(env!("CARGO_BIN_EXE_onionlab"), &bin).unwrap();
    let run = |args: &[&str]| {
        let mut cmd = Command::new(&bin);
        cmd.args(args).current_dir(&work);
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("ONIONLAB_") {
                cmd.env_remove(key);
            }
        }
        let nowhere = dir.join("nowhere");
        for key in ["HOME", "ONIONLAB_SHARED", "ONIONLAB_DATA", "ONIONLAB_FONT"] {
            cmd.env(key, &nowhere);
        }
        cmd.output().expect("onionlab runs")
    };
    for name in onionlab_scenario::BUILTIN_NAMES {
        let out = run(&["check", name]);
        assert!(
            out.status.success(),
            "check {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = run(&["run", "--stop-time", "1m", "--quiet"]);
    assert!(
        out.status.success(),
        "run: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let info: serde_json::Value =
        serde_json::from_slice(&fs::read(work.join("out/toy/run.json")).unwrap()).unwrap();
    assert_eq!(info["complete"], true);
    assert!(info["sim_seconds"].as_f64().unwrap() >= 60.0);
    let downloads = fs::read_to_string(work.join("out/toy/downloads.csv")).unwrap();
    assert!(downloads.lines().count() > 10, "hardly any downloads");
    let _ = fs::remove_dir_all(&dir);
}

/// `--version` names the commit the binary was built from, and `run.json` records the same.
#[test]
fn the_version_names_the_commit() {
    let out = onionlab(&["--version"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let commit = text
        .trim()
        .strip_prefix(&format!("onionlab {} (commit ", env!("CARGO_PKG_VERSION")))
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("unexpected --version output: {text}"));
    let hash = commit.strip_suffix("-modified").unwrap_or(commit);
    assert!(
        hash == "unknown" || (hash.len() == 12 && hash.bytes().all(|b| b.is_ascii_hexdigit())),
        "not a commit: {commit}"
    );
    let dir = tmp("version");
    let out = onionlab(&[
        "run",
        tiny_file(&dir).to_str().unwrap(),
        "-o",
        dir.join("out").to_str().unwrap(),
        "--stop-time",
        "70s",
        "--no-report",
        "--quiet",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let info: serde_json::Value =
        serde_json::from_slice(&fs::read(dir.join("out/run.json")).unwrap()).unwrap();
    assert_eq!(info["commit"], commit);
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn bad_flags_and_missing_files_exit_2() {
    for args in [
        vec!["run", "no/such/file.yaml"],
        vec!["check", "no/such/file.yaml"],
        vec!["run", "toy", "--threads", "0"],
        vec!["run", "toy", "--stop-time", "ten minutes"],
        vec!["run", "toy", "--stop-time", "0s"],
        vec!["run", "toy", "--seed", "-1"],
        vec!["run", "toy", "--threads", "1000000"],
        vec!["run", "toy", "--trials", "100000"],
        vec!["run", "toy", "--inject-fault", "3"],
        vec!["run", "toy", "--max-memory", "0"],
        vec!["run", "toy", "--max-memory", "lots"],
        vec!["run", "toy", "--max-memory", "-5 GiB"],
        vec!["frobnicate"],
    ] {
        let out = onionlab(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

#[test]
fn a_run_writes_the_documented_files() {
    let dir = tmp("files");
    let scenario = tiny_file(&dir);
    let out_dir = dir.join("out");
    let out = onionlab(&[
        "run",
        scenario.to_str().unwrap(),
        "-o",
        out_dir.to_str().unwrap(),
        "--threads",
        "2",
        "--stop-time",
        "2m",
        "--seed",
        "3",
        "--quiet",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(out_dir.join("run.json")).unwrap()).unwrap();
    for key in [
        "sim_seconds",
        "wall_seconds",
        "events",
        "peak_rss_bytes",
        "threads",
        "seed",
        "complete",
    ] {
        assert!(run.get(key).is_some(), "run.json lacks {key}");
    }
    assert_eq!(run["complete"], true);
    assert_eq!(run["seed"], 3);
    assert_eq!(run["threads"], 2);
    assert_eq!(run["sim_seconds"], 120.0);
    let downloads = fs::read_to_string(out_dir.join("downloads.csv")).unwrap();
    assert!(downloads
        .starts_with("client,group,size_bytes,start_s,circuit_build_s,ttfb_s,ttlb_s,outcome"));
    let ok = downloads.lines().filter(|l| l.contains(",ok,")).count();
    assert!(ok >= 10, "only {ok} completed downloads:\n{downloads}");
    // Completed downloads have both times; the sizes are the scenario's.
    for line in downloads.lines().skip(1).filter(|l| l.contains(",ok,")) {
        let cols: Vec<&str> = line.split(',').collect();
        assert!(cols[2] == "327680" || cols[2] == "5242880", "{line}");
        let (ttfb, ttlb): (f64, f64) = (cols[5].parse().unwrap(), cols[6].parse().unwrap());
        assert!(ttfb > 0.0 && ttlb >= ttfb, "{line}");
    }
    assert!(
        fs::read_to_string(out_dir.join("relays.csv"))
            .unwrap()
            .lines()
            .count()
            > 10 * 100
    );
    assert!(
        fs::read_to_string(out_dir.join("circuits.csv"))
            .unwrap()
            .lines()
            .count()
            > 8
    );
    // The summary table is printed and saved.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("web") && stdout.contains("bulk") && stdout.contains("goodput"));
    assert!(out_dir.join("summary.txt").exists());
    let _ = fs::remove_dir_all(&dir);
}

/// Thread counts and work stealing (on or off) that must all give the one-thread results.
const ANY_THREADS: [(&str, bool); 5] = [
    ("1", true),
    ("2", true),
    ("2", false),
    ("3", true),
    ("3", false),
];

/// The counts of a run's state series: part of the determinism contract too, unlike its wall
/// times and resident sizes, which are the run's own.
fn state_counts(out_dir: &Path) -> Vec<serde_json::Value> {
    let run: serde_json::Value =
        serde_json::from_slice(&fs::read(out_dir.join("run.json")).unwrap()).unwrap();
    let mut state = run["state"]
        .as_array()
        .expect("run.json has a state series")
        .clone();
    for sample in &mut state {
        let sample = sample.as_object_mut().unwrap();
        sample.remove("wall_s");
        sample.remove("rss_bytes");
    }
    state
}

/// Runs `scenario` (with `extra` flags) once per `(threads, stealing)` of `runs`, each into
/// its own folder of `dir`, and asserts that every output file is byte-identical to the first
/// run's and that no host was stolen with stealing off or on one thread. Returns the folders.
fn identical_runs(
    scenario: &str,
    extra: &[&str],
    runs: &[(&str, bool)],
    dir: &Path,
) -> Vec<PathBuf> {
    let mut outputs = Vec::new();
    for &(threads, stealing) in runs {
        let out_dir = dir.join(format!("{threads}-{stealing}"));
        let mut args = vec![
            "run",
            scenario,
            "-o",
            out_dir.to_str().unwrap(),
            "--threads",
            threads,
            "--quiet",
            "--no-report",
        ];
        args.extend_from_slice(extra);
        if !stealing {
            args.push("--no-work-stealing");
        }
        let out = onionlab(&args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let run: serde_json::Value =
            serde_json::from_slice(&fs::read(out_dir.join("run.json")).unwrap()).unwrap();
        let stolen: u64 = run["workers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["stolen"].as_u64().unwrap())
            .sum();
        if !stealing || threads == "1" {
            assert_eq!(stolen, 0, "{threads} threads, stealing {stealing}");
        }
        outputs.push(out_dir);
    }
    let first = state_counts(&outputs[0]);
    assert!(!first.is_empty(), "{scenario}: no state samples");
    for (out_dir, (threads, stealing)) in outputs.iter().zip(runs).skip(1) {
        assert!(
            state_counts(out_dir) == first,
            "{scenario}: the state series differs between {} thread(s) and {threads} (stealing \
             {stealing})",
            runs[0].0
        );
    }
    for file in ["downloads.csv", "relays.csv", "circuits.csv", "summary.txt"] {
        let a = fs::read(outputs[0].join(file)).unwrap();
        assert!(a.len() > 100, "{file} is nearly empty");
        for (out_dir, (threads, stealing)) in outputs.iter().zip(runs).skip(1) {
            let b = fs::read(out_dir.join(file)).unwrap();
            assert!(
                a == b,
                "{scenario}: {file} differs between {} thread(s) and {threads} (stealing {stealing})",
                runs[0].0
            );
        }
    }
    outputs
}

#[test]
fn the_toy_scenario_gives_identical_results_on_any_thread_count_with_or_without_stealing() {
    let dir = tmp("determinism");
    let extra = ["--stop-time", "6m", "--seed", "1"];
    let outputs = identical_runs("toy", &extra, &ANY_THREADS, &dir);
    // The report of such a run must draw too.
    let out = onionlab(&["report", outputs[0].to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = fs::remove_dir_all(&dir);
}

/// run.json counts what the network holds every ten simulated seconds, so that a long run's
/// memory can be put down to channels, circuits, sockets and queues.
#[test]
fn run_json_counts_the_networks_state_every_ten_simulated_seconds() {
    let dir = tmp("state");
    let scenario = tiny_file(&dir);
    let out_dir = dir.join("out");
    let out = onionlab(&[
        "run",
        scenario.to_str().unwrap(),
        "-o",
        out_dir.to_str().unwrap(),
        "--stop-time",
        "1m",
        "--quiet",
        "--no-report",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run: serde_json::Value =
        serde_json::from_slice(&fs::read(out_dir.join("run.json")).unwrap()).unwrap();
    let state = run["state"].as_array().unwrap();
    let times: Vec<f64> = state.iter().map(|s| s["sim_s"].as_f64().unwrap()).collect();
    // Every leg of ten seconds, and the last one that ends just past the stop time.
    assert_eq!(&times[..6], &[10.0, 20.0, 30.0, 40.0, 50.0, 60.0]);
    assert_eq!(times.len(), 7);
    let n = |s: &serde_json::Value, k: &str| s[k].as_u64().unwrap_or_else(|| panic!("{k}"));
    let last = state.last().unwrap();
    // Eight clients, each with a channel to its guard, which counts it as a client channel.
    assert_eq!(n(last, "client_channels"), 8);
    assert_eq!(n(last, "relay_client_channels"), 8);
    assert!(n(last, "client_circuits") >= 8);
    // A relay-to-relay channel has two ends, each counted by its relay.
    assert!(n(last, "relay_channels") > 0 && n(last, "relay_channels") % 2 == 0);
    assert!(n(last, "relay_circuits") >= 2 * n(last, "client_circuits"));
    // Each channel end has its socket; sockets are never more than their slots.
    let ends =
        n(last, "client_channels") + n(last, "relay_channels") + n(last, "relay_client_channels");
    assert!(n(last, "sockets") >= ends, "{last}");
    assert!(n(last, "sockets") <= n(last, "socket_slots"));
    assert!(n(last, "pending_events") > 0 && n(last, "rss_bytes") > 0);
    // Events handled so far: growing sample by sample, the last one the run's total.
    assert!(state
        .windows(2)
        .all(|w| n(&w[0], "events") < n(&w[1], "events")));
    assert_eq!(n(last, "events"), n(&run, "events"));
    // Downloads run back to back: some stream is always in transfer.
    assert!(
        state.iter().skip(2).all(|s| n(s, "streams") > 0),
        "{state:?}"
    );
    let _ = fs::remove_dir_all(&dir);
}

/// Ctrl-C, and the SIGTERM and SIGHUP that `timeout`, `kill` and batch schedulers send, stop
/// the run at the next round boundary with everything measured so far written, marked partial.
#[test]
fn signals_stop_the_run_and_keep_partial_results() {
    for (signal, name) in [
        (libc::SIGINT, "int"),
        (libc::SIGTERM, "term"),
        (libc::SIGHUP, "hup"),
    ] {
        let dir = tmp(&format!("signal-{name}"));
        let out_dir = dir.join("out");
        let child = Command::new(env!("CARGO_BIN_EXE_onionlab"))
            .args(["run", "toy", "-o", out_dir.to_str().unwrap(), "--quiet"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_secs(4));
        // SAFETY: kill has no memory-safety preconditions; the child is ours and alive.
        assert_eq!(unsafe { libc::kill(child.id() as i32, signal) }, 0);
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(130),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let run: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(out_dir.join("run.json")).unwrap()).unwrap();
        assert_eq!(run["complete"], false, "{name}");
        assert!(run["sim_seconds"].as_f64().unwrap() < 3600.0);
        assert!(
            run["interrupted_reason"]
                .as_str()
                .unwrap()
                .contains("interrupted"),
            "{name}: {}",
            run["interrupted_reason"]
        );
        let rows = fs::read_to_string(out_dir.join("downloads.csv"))
            .unwrap()
            .lines()
            .count();
        assert!(rows > 10, "{name}: only {rows} lines in downloads.csv");
        assert!(fs::read_to_string(out_dir.join("summary.txt"))
            .unwrap()
            .contains("PARTIAL"));
        let _ = fs::remove_dir_all(&dir);
    }
}

/// A network of 100,000 clients: some hundreds of MiB to build, gigabytes within its first
/// simulated seconds.
fn crowd_file(dir: &Path) -> PathBuf {
    fs::create_dir_all(dir).unwrap();
    let path = dir.join("crowd.yaml");
    fs::write(
        &path,
        TINY.replace("name: tiny", "name: crowd")
            .replace("count: 6,", "count: 100000,"),
    )
    .unwrap();
    path
}

/// The run.json of a run stopped for its memory: partial, with a reason holding `why`, and a
/// summary marked partial beside it.
fn assert_stopped_for_memory(out_dir: &Path, why: &str) -> serde_json::Value {
    let json: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(out_dir.join("run.json")).unwrap()).unwrap();
    assert_eq!(json["complete"], false);
    let reason = json["interrupted_reason"].as_str().unwrap();
    assert!(reason.contains(why), "{reason}");
    assert!(fs::read_to_string(out_dir.join("summary.txt"))
        .unwrap()
        .contains("PARTIAL"));
    json
}

/// A run whose resident memory passes `--max-memory` stops as Ctrl-C stops it, with its results
/// kept and marked partial, and says why, with an exit code of its own; under a limit it is
/// not touched. The limit holds while the network is built, too, within the documented
/// margin.
#[test]
fn a_run_past_its_memory_limit_stops_with_its_results() {
    let dir = tmp("max-memory");
    let out_dir = dir.join("out");
    let run = |scenario: &str, limit: &str| {
        onionlab(&[
            "run",
            scenario,
            "-o",
            out_dir.to_str().unwrap(),
            "--force",
            "--quiet",
            "--no-report",
            "--stop-time",
            "20s",
            "--max-memory",
            limit,
        ])
    };
    // No process of this size fits in 1 MiB: the first look stops it, before the first host.
    let out = run("toy", "1 MiB");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("--max-memory 1.0 MiB"), "{stderr}");
    assert!(stderr.contains("marked partial"), "{stderr}");
    let json = assert_stopped_for_memory(&out_dir, "resident memory");
    assert!(json["sim_seconds"].as_f64().unwrap() < 20.0);

    // 100,000 clients take more than 96 MiB to build: construction stops part of the way.
    let crowd = crowd_file(&dir);
    let out = run(crowd.to_str().unwrap(), "96 MiB");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    let json = assert_stopped_for_memory(&out_dir, "stopped while building the network");
    let reason = json["interrupted_reason"].as_str().unwrap();
    assert!(reason.contains("nothing simulated"), "{reason}");
    assert!(reason.contains("above --max-memory 96.0 MiB"), "{reason}");
    // The watch looks every 50 ms and construction every 1024 hosts; the docs promise tens
    // of MiB, and this network grows far more slowly than a million hosts do.
    let peak = json["peak_rss_bytes"].as_u64().unwrap();
    assert!(peak < (96 + 64) << 20, "peak {} MiB", peak >> 20);

    for limit in ["8 GiB", "none"] {
        let out = run("toy", limit);
        assert!(
            out.status.success(),
            "{limit}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let json: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(out_dir.join("run.json")).unwrap()).unwrap();
        assert_eq!(json["complete"], true, "{limit}");
    }
    let _ = fs::remove_dir_all(&dir);
}

/// Under an address-space limit (`ulimit -v`) a run that outgrows it stops with its results
/// and exit 3, whether the watch sees the address space near the limit or an allocation fails
/// first (the reserve given back makes room to stop): never an abort.
#[test]
fn a_run_past_its_address_space_limit_stops_with_its_results() {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    let dir = tmp("ulimit-v");
    let out_dir = dir.join("out");
    let crowd = crowd_file(&dir);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_onionlab"));
    cmd.args([
        "run",
        crowd.to_str().unwrap(),
        "-o",
        out_dir.to_str().unwrap(),
        "--quiet",
        "--no-report",
        "--stop-time",
        "60s",
        "--max-memory",
        "none",
    ]);
    // Above what the process maps at its start (about 1.6 GiB with mimalloc's first arena and
    // the reserve), below what this network maps within its first simulated minute.
    const LIMIT: u64 = 1900 << 20;
    // SAFETY: setrlimit is async-signal-safe and touches nothing of the parent's.
    unsafe {
        cmd.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: LIMIT as libc::rlim_t,
                rlim_max: LIMIT as libc::rlim_t,
            };
            libc::setrlimit(libc::RLIMIT_AS, &limit);
            Ok(())
        });
    }
    let out = cmd.output().expect("onionlab runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.signal(), None, "{stderr}");
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    let json: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(out_dir.join("run.json")).unwrap()).unwrap();
    assert_eq!(json["complete"], false);
    let reason = json["interrupted_reason"].as_str().unwrap();
    assert!(
        reason.contains("ulimit -v"),
        "the reason names the limit: {reason}"
    );
    let _ = fs::remove_dir_all(&dir);
}

/// A process that dies without warning (SIGKILL here; an abort or the out-of-memory killer
/// alike) still leaves what it measured: the CSV files grow as the run goes, and run.json,
/// written at the start, says the run did not finish. The report reads such a directory.
#[test]
fn a_killed_run_leaves_what_it_measured() {
    let dir = tmp("sigkill");
    let out_dir = dir.join("out");
    let mut child = Command::new(env!("CARGO_BIN_EXE_onionlab"))
        .args(["run", "toy", "-o", out_dir.to_str().unwrap(), "--quiet"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let downloads = out_dir.join("downloads.csv");
    // run.json is replaced whole (written aside, then renamed), so it always parses.
    let samples = || {
        fs::read_to_string(out_dir.join("run.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .and_then(|r| r["state"].as_array().map(Vec::len))
            .unwrap_or(0)
    };
    let started = std::time::Instant::now();
    while fs::read_to_string(&downloads).map_or(0, |t| t.lines().count()) < 100 || samples() < 2 {
        assert!(
            started.elapsed().as_secs() < 120,
            "no downloads and state samples written within 2 minutes"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let run: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(out_dir.join("run.json")).unwrap()).unwrap();
    assert_eq!(run["complete"], false);
    assert!(run["interrupted_reason"]
        .as_str()
        .unwrap()
        .contains("did not finish"));
    // How far it got, and at what cost, as of its last state sample.
    let last = run["state"].as_array().unwrap().last().unwrap().clone();
    assert!(run["sim_seconds"].as_f64().unwrap() >= 20.0, "{run}");
    assert_eq!(run["sim_seconds"], last["sim_s"]);
    assert!(run["events"].as_u64().unwrap() > 0);
    assert_eq!(run["events"], last["events"]);
    assert!(run["wall_seconds"].as_f64().unwrap() > 0.0);
    assert!(run["peak_rss_bytes"].as_u64().unwrap() > 0);
    for file in ["downloads.csv", "relays.csv", "circuits.csv"] {
        let text = fs::read_to_string(out_dir.join(file)).unwrap();
        let columns = text.lines().next().unwrap().split(',').count();
        for line in text.lines() {
            assert_eq!(
                line.split(',').count(),
                columns,
                "{file}: torn row {line:?}"
            );
        }
        assert!(text.ends_with('\n'), "{file} ends mid-row");
    }
    let out = onionlab(&["report", out_dir.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = fs::remove_dir_all(&dir);
}

/// A panic in one host's model (injected on host 19, which round robin gives the second worker)
/// ends the run with exit 1 and the results up to then on disk, marked partial.
#[test]
fn a_model_panic_leaves_partial_results() {
    let dir = tmp("fault");
    let out_dir = dir.join("out");
    let out = onionlab(&[
        "run",
        tiny_file(&dir).to_str().unwrap(),
        "-o",
        out_dir.to_str().unwrap(),
        "--threads",
        "2",
        "--inject-fault",
        "19@100s",
        "--no-report",
        "--quiet",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("injected fault"), "{stderr}");
    assert!(stderr.contains("marked partial"), "{stderr}");
    let run: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(out_dir.join("run.json")).unwrap()).unwrap();
    assert_eq!(run["complete"], false);
    assert!(run["interrupted_reason"]
        .as_str()
        .unwrap()
        .contains("injected fault"));
    let sim = run["sim_seconds"].as_f64().unwrap();
    assert!((90.0..=100.0).contains(&sim), "stopped at {sim} s");
    let ok = fs::read_to_string(out_dir.join("downloads.csv"))
        .unwrap()
        .lines()
        .filter(|l| l.contains(",ok,"))
        .count();
    assert!(ok >= 5, "only {ok} downloads kept");
    let relays = fs::read_to_string(out_dir.join("relays.csv")).unwrap();
    assert!(relays.lines().any(|l| l.split(',').nth(1) == Some("90")));
    assert!(fs::read_to_string(out_dir.join("summary.txt"))
        .unwrap()
        .contains("PARTIAL"));
    let _ = fs::remove_dir_all(&dir);
}

/// A directory holding another run's results is refused, so old and new files never mix;
/// `--force` replaces onionlab's files and keeps the user's.
#[test]
fn an_output_directory_with_results_needs_force() {
    let dir = tmp("force");
    let scenario = tiny_file(&dir);
    let out_dir = dir.join("out");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "run",
            scenario.to_str().unwrap(),
            "-o",
            out_dir.to_str().unwrap(),
            "--stop-time",
            "70s",
            "--quiet",
        ];
        args.extend_from_slice(extra);
        onionlab(&args)
    };
    assert!(run(&["--no-report"]).status.success());
    fs::write(out_dir.join("notes.txt"), "mine").unwrap();
    fs::write(out_dir.join("old_plot.svg"), "<svg/>").unwrap();
    let again = run(&["--no-report"]);
    assert_eq!(again.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(
        stderr.contains("holds the results of another run") && stderr.contains("--force"),
        "{stderr}"
    );
    let before = fs::metadata(out_dir.join("run.json"))
        .unwrap()
        .modified()
        .unwrap();
    assert!(run(&["--no-report", "--force", "--seed", "9"])
        .status
        .success());
    let info: serde_json::Value =
        serde_json::from_slice(&fs::read(out_dir.join("run.json")).unwrap()).unwrap();
    assert_eq!(info["seed"], 9);
    assert!(
        fs::metadata(out_dir.join("run.json"))
            .unwrap()
            .modified()
            .unwrap()
            >= before
    );
    assert_eq!(
        fs::read_to_string(out_dir.join("notes.txt")).unwrap(),
        "mine"
    );
    assert!(!out_dir.join("old_plot.svg").exists());
    // The output path must be a directory; the error says which path it means.
    let file = dir.join("afile");
    fs::write(&file, "x").unwrap();
    let sub = file.join("sub");
    let out = onionlab(&[
        "run",
        scenario.to_str().unwrap(),
        "-o",
        sub.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("output directory"), "{stderr}");
    let _ = fs::remove_dir_all(&dir);
}

/// relays.csv covers every second of the run, the last one included.
#[test]
fn relay_seconds_include_the_last_one() {
    let dir = tmp("last-second");
    let out_dir = dir.join("out");
    let out = onionlab(&[
        "run",
        tiny_file(&dir).to_str().unwrap(),
        "-o",
        out_dir.to_str().unwrap(),
        "--stop-time",
        "70s",
        "--no-report",
        "--quiet",
    ]);
    assert!(out.status.success());
    let relays = fs::read_to_string(out_dir.join("relays.csv")).unwrap();
    let seconds: std::collections::BTreeSet<u64> = relays
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(1).unwrap().parse().unwrap())
        .collect();
    assert_eq!(seconds.first(), Some(&1));
    assert_eq!(seconds.last(), Some(&70));
    assert_eq!(seconds.len(), 70);
    let _ = fs::remove_dir_all(&dir);
}

/// IMUX under shortest queue on `imux-small`: every bulk client keeps downloading and no
/// download times out. Connections the connection manager closes carry cells up to the
/// closing handshake; when such cells were dropped, their circuits stalled until the 5-minute
/// timeout (in the first 4 minutes, 4 of the 12 bulk clients finished nothing).
#[test]
fn imux_small_under_shortest_queue_stalls_no_circuit() {
    let dir = tmp("imux-sq");
    fs::create_dir_all(&dir).unwrap();
    let base = fs::read_to_string(repo().join("examples/imux-small.yaml")).unwrap();
    assert!(base.contains("  channel: vanilla\n"));
    let scenario = base.replace(
        "  channel: vanilla\n",
        "  channel: imux\n  imux_scheduler: shortest_queue\n",
    );
    let file = dir.join("imux-sq.yaml");
    fs::write(&file, scenario).unwrap();
    let out_dir = dir.join("out");
    let out = onionlab(&[
        "run",
        file.to_str().unwrap(),
        "-o",
        out_dir.to_str().unwrap(),
        "--stop-time",
        "4m",
        "--no-report",
        "--quiet",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let downloads = fs::read_to_string(out_dir.join("downloads.csv")).unwrap();
    let mut bulk_ok = std::collections::BTreeMap::<String, u32>::new();
    for line in downloads.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let (client, group, outcome) = (f[0], f[1], f[7]);
        assert_eq!(outcome, "ok", "{line}");
        if group == "bulk" {
            *bulk_ok.entry(client.to_string()).or_default() += 1;
        }
    }
    assert_eq!(
        bulk_ok.len(),
        12,
        "bulk clients with a finished download: {bulk_ok:?}"
    );
    let _ = fs::remove_dir_all(&dir);
}

/// An upload scenario (uploads and downloads over a lossy middle-exit link): identical
/// results on one and two threads, uploads marked in downloads.csv, and a report that shows
/// each client's upload goodput.
#[test]
fn uploads_give_identical_results_on_one_and_two_threads_and_a_report() {
    let dir = tmp("uploads");
    let scenario = repo().join("examples/upload-loss.yaml");
    let outputs = identical_runs(
        scenario.to_str().unwrap(),
        &["--stop-time", "3m"],
        &[("1", true), ("2", true)],
        &dir,
    );
    let downloads = fs::read_to_string(outputs[0].join("downloads.csv")).unwrap();
    let mut lines = downloads.lines();
    assert!(lines
        .next()
        .unwrap()
        .ends_with(",bootstrap,direction,request_s,throughput_mbit_s"));
    let rows: Vec<&str> = lines.collect();
    let ok_uploads = rows
        .iter()
        .filter(|r| r.contains(",ok,") && r.contains(",upload,"))
        .count();
    assert!(ok_uploads >= 4, "{downloads}");
    assert!(rows.iter().any(|r| r.contains(",download,")));
    // The 5 MiB downloads that finished have a throughput (the last column, the same on one
    // and two threads), the uploads none.
    let throughput = |r: &str| r.rsplit(',').next().unwrap().parse::<f64>().ok();
    let done: Vec<&str> = (rows.iter().copied())
        .filter(|r| r.contains(",ok,") && r.contains(",download,"))
        .collect();
    assert!(!done.is_empty() && done.iter().all(|r| throughput(r).is_some_and(|t| t > 0.0)));
    assert!((rows.iter().copied())
        .filter(|r| r.contains(",upload,"))
        .all(|r| throughput(r).is_none()));
    let summary = fs::read_to_string(outputs[0].join("summary.txt")).unwrap();
    assert!(summary.contains("up (upload)"), "{summary}");
    assert!(summary.contains("Upload goodput per client"), "{summary}");
    let out = onionlab(&["report", outputs[0].to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html = fs::read_to_string(outputs[0].join("report.html")).unwrap();
    assert!(html.contains("Upload goodput per client"));
    assert!(html.contains("client-up-1"));
    let _ = fs::remove_dir_all(&dir);
}

/// A small network with a markov group: identical results on one and two threads.
#[test]
fn markov_clients_give_identical_results_on_one_and_two_threads() {
    let dir = tmp("markov");
    fs::create_dir_all(&dir).unwrap();
    let scenario = dir.join("markov.yaml");
    fs::write(
        &scenario,
        r#"
run: { seed: 5, stop_time: 3m, bootstrap: 1m }
network: { graph: builtin, builtin: { latency: 20ms, bandwidth: 1 Gbit } }
authorities: 1
relays:
  generate: { guard: 3, exit: 2, guard_exit: 1, middle: 4, bandwidth: { fixed: 5 MiB/s } }
servers: [ { name: web, count: 3, bandwidth: 1 Gbit } ]
clients:
  - { name: users, count: 6, workload: { markov: { users: 20 } }, servers: web, bandwidth: 50 Mbit, start: [0s, 20s] }
  - { name: perf, count: 1, workload: { perf: { size: 50 KiB } }, bandwidth: 50 Mbit }
"#,
    )
    .unwrap();
    let outputs = identical_runs(
        scenario.to_str().unwrap(),
        &[],
        &[("1", true), ("2", true)],
        &dir,
    );
    let downloads = fs::read_to_string(outputs[0].join("downloads.csv")).unwrap();
    let markov: Vec<&str> = downloads
        .lines()
        .filter(|l| l.split(',').nth(1) == Some("users"))
        .collect();
    // 120 users for 3 minutes: about 70 circuits of about 11 streams each.
    assert!(markov.len() > 100, "{} markov streams", markov.len());
    let sizes: std::collections::HashSet<&str> = markov
        .iter()
        .map(|l| l.split(',').nth(2).unwrap())
        .collect();
    assert!(sizes.len() > 20, "stream sizes are drawn: {sizes:?}");
    // Each of a host's 20 users has its own guards (and its own connection to them): the
    // host's circuits go through several guards, where one Tor client's would all take its
    // first primary guard (its second only for circuits whose exit is that guard, which the
    // weights here make rare).
    let circuits = fs::read_to_string(outputs[0].join("circuits.csv")).unwrap();
    let mut guards: std::collections::HashMap<&str, std::collections::HashSet<&str>> =
        Default::default();
    for l in circuits.lines().filter(|l| l.starts_with("client-users-")) {
        let f: Vec<&str> = l.split(',').collect();
        guards.entry(f[0]).or_default().insert(f[3]);
    }
    assert_eq!(guards.len(), 6, "every markov host built circuits");
    for (host, g) in &guards {
        assert!(g.len() >= 2, "{host} used only the guards {g:?}");
    }
    let _ = fs::remove_dir_all(&dir);
}

/// A warm start (`tor.warm_channels`): the relays open their channels to each other as the
/// run starts, before any client has built a circuit, and the results are the same on one
/// and two threads.
#[test]
fn warm_channels_open_at_the_start_and_give_identical_results_on_one_and_two_threads() {
    let dir = tmp("warm");
    fs::create_dir_all(&dir).unwrap();
    let scenario = |warm: bool| {
        let path = dir.join(format!("warm-{warm}.yaml"));
        fs::write(
            &path,
            format!(
                r#"
run: {{ seed: 3, stop_time: 90s, bootstrap: 1m }}
network: {{ graph: builtin, builtin: {{ latency: 20ms, bandwidth: 1 Gbit }} }}
tor: {{ warm_channels: {warm} }}
authorities: 1
relays:
  generate: {{ guard: 3, exit: 2, guard_exit: 1, middle: 4, bandwidth: {{ fixed: 5 MiB/s }} }}
servers: [ {{ name: web, count: 3, bandwidth: 1 Gbit }} ]
clients:
  - {{ name: users, count: 6, workload: {{ markov: {{ users: 20 }} }}, servers: web, bandwidth: 50 Mbit, start: [20s, 30s] }}
"#
            ),
        )
        .unwrap();
        path
    };
    let warm = identical_runs(
        scenario(true).to_str().unwrap(),
        &[],
        &[("1", true), ("2", true)],
        &dir.join("warm"),
    );
    let cold = identical_runs(
        scenario(false).to_str().unwrap(),
        &[],
        &[("1", true)],
        &dir.join("cold"),
    );
    // At 10 s the users have not started their sessions (their tor has built its first
    // circuits). 120 users' circuits over the last hour pass between every pair of relays
    // that a path may join (here about 24 pairs: a guard and a middle, or a middle and an
    // exit), and each end of a pair counts a channel.
    let channels_at_10s = |out: &Path| state_counts(out)[0]["relay_channels"].as_u64().unwrap();
    let (warm_channels, cold_channels) = (channels_at_10s(&warm[0]), channels_at_10s(&cold[0]));
    assert!(
        warm_channels >= 40 && warm_channels > cold_channels,
        "{warm_channels} relay channel ends at 10 s from a warm start, {cold_channels} from a cold one"
    );
    let _ = fs::remove_dir_all(&dir);
}

/// A generated network, whose relays are held by links at their rates, gives byte-identical
/// results on one and two threads, and differs from the same network with token buckets.
#[test]
fn relays_held_by_their_links_give_identical_results_on_one_and_two_threads() {
    let dir = tmp("link-limit");
    fs::create_dir_all(&dir).unwrap();
    let net = dir.join("net.yaml");
    let out = onionlab(&[
        "generate",
        "--consensus",
        "consensus-2019-microdesc",
        "--scale",
        "0.003",
        "--stop-time",
        "90s",
        "-o",
        net.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = fs::read_to_string(&net).unwrap();
    assert!(text.contains(", limit: link,"), "{text}");
    let link = identical_runs(
        net.to_str().unwrap(),
        &[],
        &[("1", true), ("2", true)],
        &dir.join("link"),
    );
    let bucket_net = dir.join("bucket.yaml");
    fs::write(
        &bucket_net,
        text.replace(", limit: link,", ", limit: bucket,"),
    )
    .unwrap();
    let bucket = identical_runs(
        bucket_net.to_str().unwrap(),
        &[],
        &[("1", true)],
        &dir.join("bucket"),
    );
    let relays = |out: &Path| fs::read(out.join("relays.csv")).unwrap();
    assert_ne!(
        relays(&link[0]),
        relays(&bucket[0]),
        "the limit changed nothing"
    );
    let _ = fs::remove_dir_all(&dir);
}

/// `generate` writes a scenario that passes `check`, keeps every relay at scale 1, is the same
/// for the same arguments, and refuses bad flags with exit 2.
#[test]
fn generate_writes_checked_scenarios_and_refuses_bad_flags() {
    let dir = tmp("generate");
    fs::create_dir_all(&dir).unwrap();
    let small = dir.join("small.yaml");
    let args = |out: &Path, scale: &str| {
        vec![
            "generate".to_string(),
            "--consensus".into(),
            "consensus-2023".into(),
            "--scale".into(),
            scale.into(),
            "-o".into(),
            out.to_str().unwrap().into(),
            "--force".into(),
        ]
    };
    let run = |a: Vec<String>| onionlab(&a.iter().map(String::as_str).collect::<Vec<_>>());
    let out = run(args(&small, "0.005"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let first = fs::read(&small).unwrap();
    let out = onionlab(&["check", small.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(shown.contains("valid: 34 relays, 3 authorities"), "{shown}");
    let text = String::from_utf8_lossy(&first).to_string();
    assert!(
        text.starts_with("# Generated by onionlab generate"),
        "{text}"
    );
    assert!(
        text.contains("markov: { users: 50 }") && text.contains("perf-5m"),
        "{text}"
    );
    // Tor runs as the consensus's period ran it: consensus-2023 sets cc_alg=2 and
    // KISTSchedRunInterval=2; consensus-2019-microdesc has no congestion control, so its
    // network keeps SENDME windows and tor 0.4.2's defaults where its params line is silent.
    for needle in [
        "network: { graph: internet-geo, lookahead_floor: 1ms }",
        "  flow_control: vegas",
        "  kist_run_interval_ms: 2 ",
        "# KISTSchedRunInterval=2",
        "  max_circuit_queue_cells: 1250 ",
        "  vegas_beta: 248 ",
        "# cc_vegas_beta_exit not in params: tor 0.4.7.13's default",
    ] {
        assert!(text.contains(needle), "{needle:?} not in {text}");
    }
    let old = dir.join("2019.yaml");
    let mut a = args(&old, "0.005");
    a[2] = "consensus-2019-microdesc".into();
    let out = run(a);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text_2019 = fs::read_to_string(&old).unwrap();
    for needle in [
        "  flow_control: sendme",
        "# no cc_alg:",
        "  kist_run_interval_ms: 10 ",
        "  max_circuit_queue_cells: 50000 ",
        "  num_primary_guards: 1 ",
        "  cbt_num_xm_modes: 3 ",
        "  cbt_min_timeout_ms: 1500 ",
        "  circuit_window: 1000 ",
        // Relays start connected wherever the load's circuits passed within tor's idle
        // timeout for relay channels, an hour where the consensus does not set it.
        "  warm_channels: true",
        "  relay_channel_idle_timeout_s: 3600 ",
        // OnionPerf's sites of the time, on hosted links.
        "name: perf-5m-hk, count: 1, country: HK, bandwidth_down: 1 Gbit, bandwidth_up: 1 Gbit",
        // Capacities add up to what the relays advertised that day: 415.506 Gbit/s over a
        // weight sum of 72,116,976 is 720 B/s per unit. Relays sit where their addresses
        // say, by the country table nearest 2019-12-15. Each relay's link, not a token
        // bucket, holds it to its rate.
        "count: 32, rate_per_weight: 720, limit: link, place: address, geoip: geoip-2021 }",
        // OnionPerf's own server at each site.
        "name: perf-hk, count: 1, country: HK, bandwidth: 1 Gbit, dedicated: true }",
        "servers: perf-hk,",
        "the 415.506 Gbit/s its relays advertised on 2019-12-15",
    ] {
        assert!(text_2019.contains(needle), "{needle:?} not in {text_2019}");
    }
    assert!(!text_2019.contains("vegas_"), "{text_2019}");
    // No advertised bandwidth ships for 2023: weights are read as kB/s.
    assert!(!text.contains("rate_per_weight"), "{text}");
    assert!(
        text.contains("limit: link, place: address, geoip: geoip-2023 }"),
        "{text}"
    );
    assert!(
        text.contains("of 2023-06-01 does not ship with onionlab"),
        "{text}"
    );
    assert!(!text_2019.contains("perf-5m-de"), "{text_2019}");
    assert!(
        text.contains("name: perf-50k-de, count: 1, country: DE"),
        "{text}"
    );
    // The same arguments give the same file.
    let out = run(args(&small, "0.005"));
    assert!(out.status.success());
    assert_eq!(fs::read(&small).unwrap(), first);

    let full = dir.join("full.yaml");
    let out = run(args(&full, "1.0"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // consensus-2023 lists 6,876 relays: the network has every one.
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("valid: 6876 relays"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    let bad: [&[&str]; 6] = [
        &["--scale", "0"],
        &["--scale", "1.5"],
        &["--scale", "0.1", "--load", "0"],
        &["--scale", "0.1", "--load", "11"],
        &["--scale", "0.1", "--stop-time", "10"],
        &["--scale", "nan"],
    ];
    for flags in bad {
        let mut a = vec!["generate", "--consensus", "consensus-2023", "-o"];
        let target = dir.join("bad.yaml");
        a.push(target.to_str().unwrap());
        a.extend_from_slice(flags);
        let out = onionlab(&a);
        assert_eq!(out.status.code(), Some(2), "{flags:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).starts_with("error: "),
            "{flags:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!target.exists());
    }
    // An existing file is kept without --force.
    let out = onionlab(&[
        "generate",
        "--consensus",
        "consensus-2023",
        "--scale",
        "0.01",
        "-o",
        small.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(fs::read(&small).unwrap(), first);
    let out = onionlab(&["generate", "--consensus", "no-such-file", "--scale", "0.1"]);
    assert_eq!(out.status.code(), Some(2));
    let _ = fs::remove_dir_all(&dir);
}

/// `network.segment_offload` (on by default) keeps the determinism contract (1, 2 and 3
/// threads, stealing on and off), finishes about as many downloads as without it in fewer
/// events, and run.json's scenario records which was used.
#[test]
fn segment_offload_gives_identical_results_on_any_thread_count_in_fewer_events() {
    let dir = tmp("offload");
    let offload = tiny_file(&dir);
    let plain = dir.join("tiny-no-offload.yaml");
    let text = TINY.replace(
        "network: { graph: builtin,",
        "network: { segment_offload: false, graph: builtin,",
    );
    assert_ne!(text, TINY);
    fs::write(&plain, text).unwrap();
    let on = identical_runs(
        offload.to_str().unwrap(),
        &[],
        &ANY_THREADS,
        &dir.join("on"),
    );
    let off = identical_runs(
        plain.to_str().unwrap(),
        &[],
        &[("1", true)],
        &dir.join("off"),
    );
    let run = |out_dir: &Path| -> serde_json::Value {
        serde_json::from_slice(&fs::read(out_dir.join("run.json")).unwrap()).unwrap()
    };
    let (on_run, off_run) = (run(&on[0]), run(&off[0]));
    assert_eq!(on_run["scenario"]["network"]["segment_offload"], true);
    assert_eq!(off_run["scenario"]["network"]["segment_offload"], false);
    let events = |r: &serde_json::Value| r["events"].as_u64().unwrap();
    assert!(
        events(&on_run) < events(&off_run) * 9 / 10,
        "{} events with offload, {} without",
        events(&on_run),
        events(&off_run)
    );
    let downloads = |out_dir: &Path| {
        fs::read_to_string(out_dir.join("downloads.csv"))
            .unwrap()
            .lines()
            .count() as f64
    };
    let (a, b) = (downloads(&on[0]), downloads(&off[0]));
    assert!(
        (a - b).abs() <= 0.1 * b,
        "{a} downloads with offload, {b} without"
    );
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn the_one_percent_network_gives_identical_results_on_any_thread_count_with_or_without_stealing_and_spans(
) {
    let dir = tmp("determinism-1pct");
    let scenario = repo().join("examples/net-1pct.yaml");
    let extra = ["--stop-time", "2m30s", "--seed", "1"];
    let with_spans = identical_runs(scenario.to_str().unwrap(), &extra, &ANY_THREADS, &dir);
    // Its hosts far from all others run several rounds at a time; round by round, every
    // output is the same.
    let spans = |out_dir: &Path| -> Vec<u64> {
        let run: serde_json::Value =
            serde_json::from_slice(&fs::read(out_dir.join("run.json")).unwrap()).unwrap();
        let spans = run["spans"].as_array().expect("run.json has spans");
        spans.iter().map(|n| n.as_u64().unwrap()).collect()
    };
    let used = spans(&with_spans[0]);
    assert!(
        used[0] > 0 && used[1..].iter().sum::<u64>() > used[0],
        "hosts by span: {used:?}"
    );
    let no_spans = [&extra[..], &["--no-spans"]].concat();
    let by_round = identical_runs(
        scenario.to_str().unwrap(),
        &no_spans,
        &[("2", true)],
        &dir.join("no-spans"),
    );
    assert_eq!(spans(&by_round[0])[1..], [0, 0, 0]);
    assert!(state_counts(&with_spans[0]) == state_counts(&by_round[0]));
    for file in ["downloads.csv", "relays.csv", "circuits.csv", "summary.txt"] {
        assert!(
            fs::read(with_spans[0].join(file)).unwrap()
                == fs::read(by_round[0].join(file)).unwrap(),
            "{file} differs between spans and round by round"
        );
    }
    let _ = fs::remove_dir_all(&dir);
}
