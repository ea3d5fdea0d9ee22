//! `onionlab reproduce live-network` end to end on a tiny network: it generates the 2019
//! network, runs the sampled networks and writes the comparison with the live data.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn onionlab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_onionlab"))
        .args(args)
        .output()
        .expect("run onionlab")
}

/// What `scripts/NAME` printed for `run`; it must succeed.
fn python_script(name: &str, run: &Path) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scripts")
        .join(name);
    let out = Command::new("python3")
        .arg(script)
        .arg(run)
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{name}: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("onionlab-live-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    dir
}

#[test]
fn live_network_compares_sampled_networks_with_the_live_data() {
    let dir = tmp("run");
    let d = dir.to_str().unwrap();
    let args = [
        "reproduce",
        "live-network",
        "--scale",
        "0.003",
        "--trials",
        "2",
        "--stop-time",
        "2m",
        "--threads",
        "2",
        "--variants",
        "as-generated,vegas,random-placement,token-bucket",
        "--quiet",
        "-o",
        d,
    ];
    let out = onionlab(&args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The network is the one `generate` writes for the 2019 consensus.
    let network = fs::read_to_string(dir.join("network.yaml")).unwrap();
    assert!(network.contains("consensus-2019-microdesc"), "{network}");
    assert!(
        network.contains("graph: internet-geo") && network.contains("flow_control: sendme"),
        "{network}"
    );
    assert!(
        network.contains("limit: link, place: address, geoip: geoip-2021"),
        "{network}"
    );
    assert!(network.contains("servers: perf-hk") && network.contains("dedicated: true"));
    for variant in ["as-generated", "vegas", "random-placement", "token-bucket"] {
        for trial in ["trial-1", "trial-2"] {
            let run = dir.join(variant).join(trial);
            assert!(run.join("downloads.csv").is_file(), "{}", run.display());
        }
    }
    // Each site's perf clients fetch from its own server, and users never do.
    let downloads = fs::read_to_string(dir.join("as-generated/trial-1/downloads.csv")).unwrap();
    let mut perf_rows = 0;
    for row in downloads.lines().skip(1) {
        // An error's reason may hold a comma; the columns after the outcome never do.
        let group = row.split(',').nth(1).unwrap();
        let server = row.rsplit(',').nth(6).unwrap();
        match group.strip_prefix("perf-") {
            Some(g) => {
                let site = g.rsplit('-').next().unwrap();
                assert_eq!(server, format!("server-perf-{site}-1"), "{row}");
                perf_rows += 1;
            }
            None => assert!(!server.starts_with("server-perf-"), "{row}"),
        }
    }
    assert!(perf_rows > 0, "{downloads}");
    let vegas = fs::read_to_string(dir.join("vegas/trial-1/run.json")).unwrap();
    assert!(vegas.contains("\"flow_control\": \"vegas\""));
    // The table: every statistic of every variant, over both networks, beside the live value.
    let csv = fs::read_to_string(dir.join("live.csv")).unwrap();
    let rows: Vec<&str> = csv.lines().collect();
    assert_eq!(
        rows[0],
        "variant,statistic,networks,model_mean,model_ci_low,model_ci_high,live,difference_pct"
    );
    assert_eq!(rows.len(), 1 + 4 * (3 * 2 + 2 + 2 + 2 + 1), "{csv}");
    // Every network's measurements have request times, so the round trip has a value.
    let round_trip = rows
        .iter()
        .find(|r| {
            r.starts_with("as-generated,\"circuit round trip (request to first byte), median (s)\"")
        })
        .unwrap();
    assert!(round_trip.contains(",0.400000,"), "{round_trip}");
    // And the 1 MiB and 5 MiB downloads have throughputs, beside the live 4.19 Mbit/s.
    let throughput = rows
        .iter()
        .find(|r| r.starts_with("as-generated,\"throughput, 0.5 to 1 MiB, median (Mbit/s)\""))
        .unwrap();
    let model_mean = throughput.rsplit(',').nth(4).unwrap();
    assert!(
        model_mean.parse::<f64>().is_ok_and(|m| m > 0.0) && throughput.contains(",4.194000,"),
        "{throughput}"
    );
    let median_1m = rows
        .iter()
        .find(|r| r.starts_with("random-placement,\"time to last byte, 1 MiB, median (s)\""))
        .unwrap();
    assert!(median_1m.contains(",3.350000,"), "{median_1m}");
    let page = fs::read_to_string(dir.join("index.html")).unwrap();
    for needle in [
        "live_ttlb_5242880.svg",
        "live_circuit_build.svg",
        "live_circuit_round_trip.svg",
        "live_throughput.svg",
        "live.csv",
        "2019-12-31",
        "vegas (mean",
    ] {
        assert!(page.contains(needle), "{needle} not in the page");
    }
    assert!(dir.join("live_ttlb_51200.png").is_file());
    assert!(
        stdout.contains("time to last byte, 50 KiB, median (s)"),
        "{stdout}"
    );
    // Run again, it keeps the complete networks and writes the same table.
    let again = onionlab(&args);
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert_eq!(fs::read_to_string(dir.join("live.csv")).unwrap(), csv);
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn live_network_is_listed_checked_and_alone_in_taking_scale_and_variants() {
    let out = onionlab(&["reproduce", "--list"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("live-network "));
    let dir = tmp("check");
    let out = onionlab(&[
        "reproduce",
        "live-network",
        "--check",
        "--scale",
        "0.01",
        "-o",
        dir.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("valid: 63 relays"));
    assert!(!dir.join("as-generated").exists(), "--check ran something");
    for bad in [["--scale", "0"], ["--scale", "2"]] {
        let mut a = vec![
            "reproduce",
            "live-network",
            "--check",
            "-o",
            dir.to_str().unwrap(),
        ];
        a.extend(bad);
        let out = onionlab(&a);
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("--scale"));
    }
    let out = onionlab(&["reproduce", "schedulers", "--scale", "0.1", "--check"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("only `reproduce live-network`"));
    let out = onionlab(&["reproduce", "imux", "--variants", "vegas", "--check"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--variants: only `reproduce"));
    // --variants picks among the three, and names the three when it is given another.
    let d = dir.to_str().unwrap();
    let base = [
        "reproduce",
        "live-network",
        "--check",
        "--scale",
        "0.01",
        "-o",
        d,
    ];
    let out = onionlab(&[&base[..], &["--variants", "vegas,as-generated"]].concat());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let experiment = fs::read_to_string(dir.join("live-network.yaml")).unwrap();
    assert!(experiment.contains("- name: as-generated"), "{experiment}");
    assert!(experiment.contains("name: vegas") && !experiment.contains("internet-2018"));
    let out = onionlab(&[&base[..], &["--variants", "as-generated,loss"]].concat());
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no variant \"loss\"") && err.contains("internet-2018"),
        "{err}"
    );
    let _ = fs::remove_dir_all(&dir);
}

/// `scripts/live-partial.py` puts back the measurement downloads a run ends with in flight:
/// they are exactly the ones that the same network, run half a minute longer, finishes after
/// that moment. `scripts/circuit-warmup.py` reads the longer run's circuits.
#[test]
fn the_analysis_scripts_find_downloads_in_flight_and_cold_connections() {
    let dir = tmp("partial");
    fs::create_dir_all(&dir).unwrap();
    let net = dir.join("net.yaml");
    let n = net.to_str().unwrap();
    let out = onionlab(&[
        "generate",
        "--consensus",
        "consensus-2019-microdesc",
        "--scale",
        "0.003",
        "--stop-time",
        "3m",
        "-o",
        n,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Ten OnionPerf-like clients per site and size instead of one, so that some are in flight.
    let mut text = fs::read_to_string(&net).unwrap();
    for size in ["50k", "1m", "5m"] {
        for site in ["us", "nl", "hk"] {
            let one = format!("name: perf-{size}-{site}, count: 1,");
            assert!(text.contains(&one), "{one} not in {text}");
            text = text.replace(&one, &format!("name: perf-{size}-{site}, count: 10,"));
        }
    }
    fs::write(&net, text).unwrap();
    let rows = |stop: &str| {
        let run = dir.join(stop);
        let out = onionlab(&[
            "run",
            n,
            "-o",
            run.to_str().unwrap(),
            "--stop-time",
            stop,
            "--threads",
            "2",
            "--quiet",
            "--no-report",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let csv = fs::read_to_string(run.join("downloads.csv")).unwrap();
        // The measurement downloads after the bootstrap (the 3-minute network's is 90 s), by
        // the columns up to the outcome, which never hold a comma (an error's reason may).
        let perf: Vec<String> = csv
            .lines()
            .filter(|r| r.split(',').nth(1).is_some_and(|g| g.starts_with("perf-")))
            .filter(|r| r.rsplit(',').nth(2) == Some("false"))
            .map(|r| r.split(',').take(8).collect::<Vec<_>>().join(","))
            .collect();
        (run, perf)
    };
    let (short, finished) = rows("150s");
    let (long_run, longer) = rows("3m");
    // The first 150 seconds are the same run.
    for row in &finished {
        assert!(longer.contains(row), "{row} only in the shorter run");
    }
    let started_before_end = |row: &String| {
        let start: f64 = row.split(',').nth(3).unwrap().parse().unwrap();
        start < 150.0
    };
    let in_flight = longer
        .iter()
        .filter(|r| started_before_end(r) && !finished.contains(r))
        .count();
    assert!(in_flight > 0, "no download in flight at 150 seconds");
    let stdout = python_script("live-partial.py", &short);
    assert!(
        stdout.contains(&format!(", {in_flight} in flight at the end")),
        "expected {in_flight} in flight:\n{stdout}"
    );
    assert!(stdout.contains("measured from 90 to 150 s"), "{stdout}");
    assert!(stdout.contains("TTLB 5 MiB, median") && stdout.contains("25.112"));

    // `scripts/circuit-warmup.py` counts every built circuit, and the network warms up: a
    // larger share of the users' circuits find both relay pairs used before in the last
    // minute than in the first.
    let circuits = fs::read_to_string(long_run.join("circuits.csv")).unwrap();
    let built = circuits
        .lines()
        .filter(|r| r.split(',').nth(8) == Some("built"))
        .count();
    let stdout = python_script("circuit-warmup.py", &long_run);
    assert!(
        stdout.contains(&format!(": {built} circuits built,")),
        "expected {built} circuits:\n{stdout}"
    );
    let by_minute = stdout.lines().nth(2).unwrap();
    // "  0: 97% of 445  1: 98% of 482  2: 99% of 476": the share ends every part but the last.
    let parts: Vec<&str> = by_minute.split("% of").collect();
    let shares: Vec<u32> = parts[..parts.len() - 1]
        .iter()
        .map(|part| part.rsplit(' ').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(shares.len(), 3, "{by_minute}");
    assert!(shares[0] < shares[2], "{by_minute}");
    let _ = fs::remove_dir_all(&dir);
}
