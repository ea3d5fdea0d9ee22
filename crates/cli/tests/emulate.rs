//! `onionlab emulate` with real tor: a minimal network end to end, clean-up after Ctrl-C, and
//! the refusals. The tests that start tor need root and Debian's tor; without them they are
//! skipped with a notice, except in CI (`CI` set), where `.ci/run` installs tor and they must
//! run.

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_onionlab")
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("onionlab-emu-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    dir
}

fn on_path(tool: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).any(|d| d.join(tool).is_file())
}

/// Held by each test that starts a private Tor network, so that two never run at once: on a
/// 2-core machine two networks' tors and switches starve each other, and a tor that waits too
/// long on its first consensus can miss its guards and never bootstrap.
static REAL_TOR: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// One private Tor network at a time (see [`REAL_TOR`]); a test that failed while holding the
/// lock does not stop the next.
fn one_network_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    REAL_TOR.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether this machine can run real emulations; says why not (or fails, in CI).
fn can_emulate(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let tools = ["tor", "tor-gencert", "ip", "tc"]
        .iter()
        .all(|t| on_path(t));
    if root && tools {
        return true;
    }
    let why =
        format!("{test}: needs root, tor, tor-gencert, ip and tc (root: {root}, tools: {tools})");
    if std::env::var_os("CI").is_some() {
        panic!("{why}; CI must be able to emulate (.ci/run installs tor)");
    }
    eprintln!("skipped {why}");
    false
}

/// Namespaces of the emulation run by process `pid`.
fn namespaces_of(pid: u32) -> Vec<String> {
    fs::read_dir("/run/netns")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| n.starts_with(&format!("onionlab-{pid}-")))
                .collect()
        })
        .unwrap_or_default()
}

/// Processes whose command line mentions `needle` (e.g. the lab's working directory).
fn processes_mentioning(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for e in fs::read_dir("/proc").unwrap().filter_map(|e| e.ok()) {
        let Ok(cmdline) = fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(needle) {
            found.push(format!("{}: {cmdline}", e.file_name().to_string_lossy()));
        }
    }
    found
}

fn assert_clean(pid: u32) {
    assert_eq!(
        namespaces_of(pid),
        Vec::<String>::new(),
        "namespaces left behind"
    );
    let work = std::env::temp_dir().join(format!("onionlab-{pid}"));
    assert!(!work.exists(), "{} left behind", work.display());
    let left = processes_mentioning(&work.display().to_string());
    assert!(left.is_empty(), "processes left behind: {left:?}");
}

fn csv_rows(path: &Path) -> Vec<Vec<String>> {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .skip(1)
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect()
}

/// The built-in network as it is, so with `network.segment_offload` (the default): the hosts'
/// kernels send super-frames, which the switch cuts into wire segments, and the download
/// still arrives whole.
#[test]
fn minimal_network_downloads_through_real_tor() {
    if can_emulate("minimal_network_downloads_through_real_tor") {
        minimal_network("minimal", true);
    }
}

/// The same network with `segment_offload: false`: every host's kernel sends wire-sized
/// frames, and the switch has nothing to cut.
#[test]
fn minimal_network_with_the_kernels_offloads_off() {
    if can_emulate("minimal_network_with_the_kernels_offloads_off") {
        minimal_network("minimal-no-offload", false);
    }
}

/// Runs the built-in `emulation-minimal` (with `segment_offload: false` unless `offload`) and
/// checks its download, its relays' counts, run.json's switch and CPU figures, and the clean-up.
fn minimal_network(name: &str, offload: bool) {
    let _network = one_network_at_a_time();
    let out = tmp(name);
    let mut args = vec![
        "emulate".to_string(),
        "-o".into(),
        out.to_str().unwrap().into(),
        "--no-report".into(),
        "--quiet".into(),
    ];
    if !offload {
        let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
        let text = fs::read_to_string(example.join("emulation-minimal.yaml")).unwrap();
        let text = text.replace("network:\n", "network:\n  segment_offload: false\n");
        assert!(text.contains("segment_offload: false"));
        let file = out.with_extension("yaml");
        fs::write(&file, text).unwrap();
        args.push(file.to_str().unwrap().into());
    }
    let started = Instant::now();
    let child = Command::new(bin())
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let result = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert!(result.status.success(), "emulate failed: {stderr}");
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(300),
        "bootstrap and run took {took:?}, more than the 5 minutes CI allows"
    );

    // One 1 MiB download, through a guard, a middle and an exit of the scenario.
    let downloads = csv_rows(&out.join("downloads.csv"));
    assert_eq!(downloads.len(), 1, "{downloads:?}");
    let d = &downloads[0];
    // A failed download is tor's doing: show what the client's and the exit's tor said.
    let log_tail = |name: &str| {
        let text = fs::read_to_string(out.join(format!("tor/{name}.log"))).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    };
    assert_eq!(
        (d[0].as_str(), d[2].as_str(), d[7].as_str()),
        ("client-perf-1", "1048576", "ok"),
        "client's log:\n{}\nexit's log:\n{}",
        log_tail("client-perf-1"),
        log_tail("exit")
    );
    let ttfb: f64 = d[5].parse().unwrap();
    let ttlb: f64 = d[6].parse().unwrap();
    assert!(0.0 < ttfb && ttfb <= ttlb && ttlb < 60.0, "{d:?}");
    // The request went out once the SOCKS reply came, before the first byte.
    let request: f64 = d[13].parse().unwrap();
    assert!(0.0 < request && request < ttfb, "{d:?}");
    // Guards may also serve as middles; the only exit is "exit".
    let (guard, middle) = (d[9].as_str(), d[10].as_str());
    assert!(["guard1", "guard2"].contains(&guard), "guard {guard:?}");
    assert!(
        ["guard1", "guard2", "middle"].contains(&middle) && middle != guard,
        "{d:?}"
    );
    assert_eq!(d[11], "exit");
    // The path's relays carried the megabyte, as counted by tor itself.
    let relays = csv_rows(&out.join("relays.csv"));
    let written = |name: &str| -> u64 {
        relays
            .iter()
            .filter(|r| r[0] == name)
            .map(|r| r[3].parse::<u64>().unwrap())
            .sum()
    };
    assert!(written("exit") >= 1 << 20, "exit wrote {}", written("exit"));
    // The path's middle, which may be a guard (checked above), not the relay named "middle".
    assert!(
        written(middle) >= 1 << 20,
        "middle {middle} wrote {}",
        written(middle)
    );

    let run: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(out.join("run.json")).unwrap()).unwrap();
    assert_eq!(run["mode"], "emulation");
    assert_eq!(run["complete"], true);
    assert!(run["emulation"]["tor_version"]
        .as_str()
        .unwrap()
        .starts_with("0."));
    let switch = &run["emulation"]["switch"];
    let count = |key: &str| {
        switch[key]
            .as_u64()
            .unwrap_or_else(|| panic!("{key} in {switch}"))
    };
    if offload {
        assert!(
            count("gso_frames") > 0,
            "no super-frames with offloads on: {switch}"
        );
        assert!(count("gso_segments") > count("gso_frames"), "{switch}");
        assert_eq!(count("gso_frames_whole"), 0, "{switch}");
    } else {
        assert_eq!(count("gso_frames"), 0, "{switch}");
    }
    // CPU over the 40 s after bootstrap: every tor has a figure, and the relays that carried
    // the megabyte used some.
    let cpu = &run["emulation"]["cpu"];
    let measured = cpu["measured_seconds"].as_f64().unwrap();
    assert!((39.0..45.0).contains(&measured), "{cpu}");
    assert!(cpu["clock_ticks_per_second"].as_u64().unwrap() > 0, "{cpu}");
    assert!(cpu["machine_cores"].as_u64().unwrap() >= 1, "{cpu}");
    let tors = cpu["tors"].as_object().unwrap();
    assert_eq!(tors.len(), 8, "3 authorities, 4 relays, 1 client: {cpu}");
    let seconds = |v: &serde_json::Value, key: &str| {
        v[key].as_f64().unwrap_or_else(|| panic!("{key} in {v}"))
    };
    for (name, t) in tors {
        assert!(
            seconds(t, "user_s") >= 0.0 && seconds(t, "system_s") >= 0.0,
            "{name}: {t}"
        );
    }
    let role = |r: &str| tors.values().filter(|t| t["role"] == r).count();
    assert_eq!(
        (role("authority"), role("relay"), role("client")),
        (3, 4, 1)
    );
    assert!(seconds(&tors["exit"], "user_s") > 0.0, "{cpu}");
    assert!(seconds(&cpu["emulator"], "user_s") > 0.0, "{cpu}");
    assert!(out.join("tor/exit.log").exists(), "tor logs are kept");
    assert_clean(pid);
    let _ = fs::remove_dir_all(&out);
    let _ = fs::remove_file(out.with_extension("yaml"));
}

#[test]
fn interrupted_emulation_leaves_nothing_behind() {
    if !can_emulate("interrupted_emulation_leaves_nothing_behind") {
        return;
    }
    let _network = one_network_at_a_time();
    let out = tmp("interrupted");
    let mut child = Command::new(bin())
        .args([
            "emulate",
            "-o",
            out.to_str().unwrap(),
            "--no-report",
            "--stop-time",
            "10m",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    // Wait until the workload runs, then press Ctrl-C.
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let started = Instant::now();
    let mut log = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        log.push(line.clone());
        if line.contains("running the workload") {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "no bootstrap: {log:?}"
        );
    }
    assert!(
        !namespaces_of(pid).is_empty(),
        "the lab exists while running: {log:?}"
    );
    std::thread::sleep(Duration::from_secs(3));
    // SAFETY: kill(2) on our own child.
    unsafe {
        libc::kill(pid as i32, libc::SIGINT);
    }
    log.extend(lines.map_while(Result::ok));
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{log:?}");
    let run: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(out.join("run.json")).unwrap()).unwrap();
    assert_eq!(
        run["complete"], false,
        "an interrupted run is marked partial"
    );
    assert!(run["interrupted_reason"]
        .as_str()
        .unwrap()
        .contains("interrupted"));
    assert_clean(pid);
    let _ = fs::remove_dir_all(&out);
}

fn onionlab(args: &[&str], path: Option<&str>) -> Output {
    let mut cmd = Command::new(bin());
    cmd.args(args);
    if let Some(p) = path {
        cmd.env("PATH", p);
    }
    cmd.output().unwrap()
}

#[test]
fn too_large_a_scenario_is_refused_before_anything_starts() {
    let out = onionlab(&["emulate", "toy"], None);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("needs 498 tor processes") && err.contains("at most 40"),
        "{err}"
    );
}

#[test]
fn missing_tools_are_named_with_the_package_to_install() {
    let empty = tmp("empty-path");
    fs::create_dir_all(&empty).unwrap();
    let out = onionlab(&["emulate"], Some(empty.to_str().unwrap()));
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("tor, tor-gencert, ip, tc") && err.contains("apt-get install -y tor iproute2"),
        "{err}"
    );
    let _ = fs::remove_dir_all(&empty);
}

#[test]
fn emulation_without_privileges_says_so() {
    // Root is needed to drop privileges for the child; setpriv comes with util-linux.
    if !can_emulate("emulation_without_privileges_says_so") {
        return;
    }
    assert!(
        on_path("setpriv"),
        "setpriv (util-linux) is needed to run onionlab without privileges"
    );
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
        ])
        .args([bin(), "emulate"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("needs root or CAP_NET_ADMIN"), "{err}");
}
