//! Real programs in simulated time (`processes:` in a scenario), through the `onionlab`
//! command: their outputs, their determinism, how failures are recorded, and that no process
//! outlives the run.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn onionlab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_onionlab"))
        .args(args)
        .output()
        .expect("onionlab runs")
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("onionlab-proc-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

/// Test program `name` built into `dir` (a copy per test, so that a search for leftover
/// processes by path finds only this test's).
fn program(name: &str, dir: &Path) -> PathBuf {
    let shared = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("programs");
    let built = onionlab_process::programs::build(name, &shared).unwrap();
    let own = dir.join(name);
    fs::copy(built, &own).unwrap();
    own
}

fn write(dir: &Path, file: &str, text: &str) -> PathBuf {
    let path = dir.join(file);
    fs::write(&path, text).unwrap();
    path
}

fn run_json(out_dir: &Path) -> serde_json::Value {
    serde_json::from_str(&fs::read_to_string(out_dir.join("run.json")).unwrap()).unwrap()
}

fn stdout_of(out_dir: &Path, host: &str) -> String {
    fs::read_to_string(out_dir.join("processes").join(host).join("stdout")).unwrap()
}

/// Processes whose command line names `path` (a program copied for one test).
fn processes_running(path: &Path) -> Vec<u32> {
    let want = path.to_str().unwrap().as_bytes();
    let mut pids = Vec::new();
    for entry in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(cmd) = fs::read(entry.path().join("cmdline")) {
            if cmd.split(|&b| b == 0).next() == Some(want) {
                pids.push(pid);
            }
        }
    }
    pids
}

/// Runs `scenario` on one thread and on two, with `--trace-syscalls`, into `out-LABEL-1` and
/// `out-LABEL-2` in `dir`; checks that both exit 0 and returns the two folders with what the
/// first printed on stderr.
fn run_on_one_and_two_threads(scenario: &Path, dir: &Path, label: &str) -> (Vec<PathBuf>, String) {
    let mut runs = Vec::new();
    let mut first_stderr = String::new();
    for threads in ["1", "2"] {
        let out_dir = dir.join(format!("out-{label}-{threads}"));
        let stderr = run_once(
            scenario,
            &out_dir,
            &["--threads", threads, "--trace-syscalls"],
        );
        if runs.is_empty() {
            first_stderr = stderr;
        }
        runs.push(out_dir);
    }
    (runs, first_stderr)
}

/// Runs `scenario` into `out_dir` with the options `extra`, without a report; checks that it
/// exits 0 and returns what it printed on stderr.
fn run_once(scenario: &Path, out_dir: &Path, extra: &[&str]) -> String {
    let mut args = vec![
        "run",
        scenario.to_str().unwrap(),
        "-o",
        out_dir.to_str().unwrap(),
        "--no-report",
    ];
    args.extend_from_slice(extra);
    let out = onionlab(&args);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    stderr
}

/// Every process of the run in `out_dir` exited 0 and made no call onionlab lacks.
fn all_exited_cleanly(out_dir: &Path) {
    for p in run_json(out_dir)["processes"].as_array().unwrap() {
        assert_eq!(p["exit_code"], 0, "{p}");
        assert_eq!(p["unsupported_calls"], serde_json::json!({}), "{p}");
    }
}

/// The trace of `host`'s calls in the run in `dir`.
fn trace(dir: &Path, host: &str) -> String {
    fs::read_to_string(dir.join("processes").join(host).join("syscalls.log")).unwrap()
}

#[test]
fn programs_run_in_simulated_time_identically_on_any_thread_count() {
    let dir = tmp("clock");
    let clock = program("clock", &dir);
    let scenario = write(
        &dir,
        "clock.yaml",
        &format!(
            "name: clock\nrun: {{ seed: 5, stop_time: 20s }}\nprocesses:\n  \
             - {{ name: clock, count: 2, path: {}, start: 1s }}\n  \
             - {{ name: date, path: /bin/date, args: [-u, '+%F %T.%N'], start: 2500ms }}\n",
            clock.display()
        ),
    );
    let (runs, stderr) = run_on_one_and_two_threads(&scenario, &dir, "clock");
    assert!(
        stderr.contains(
            "process process-clock-1: exited with status 3 at 4.020000 s; unsupported \
             system calls, answered ENOSYS: inotify_init1 ×1"
        ),
        "{stderr}"
    );
    let out_dir = &runs[0];
    let text = stdout_of(out_dir, "process-clock-1");
    let lines: Vec<&str> = text.lines().collect();
    // Started at 1 s: the clocks read 2000-01-01 00:00:01, then move only by what it slept.
    assert_eq!(
        lines[0],
        "start: realtime 946684801.000000000 monotonic 946684801.000000000 gettimeofday \
         946684801.000000 time 946684801"
    );
    assert!(lines[1].starts_with("after nanosleep 1.5 s: realtime 946684802.500000000 "));
    assert!(
        lines[2].starts_with("after clock_nanosleep to +2 s 250 ns: realtime 946684804.000000250 ")
    );
    assert!(lines[3].starts_with("after usleep 20 ms: realtime 946684804.020000250 "));
    assert!(
        text.contains("uname: Linux process-clock-1 x86_64\n"),
        "{text}"
    );
    // The same machine everywhere: up since simulated time 0, 16 GiB, 1024 descriptors.
    assert!(
        text.contains(
            "sysinfo: uptime 4 s, memory 16384 MiB, free 8192 MiB\ndescriptor limit 1024 1024\n"
        ),
        "{text}"
    );
    // Each host draws from its own stream: the two instances print different bytes.
    let bytes = |t: &str| {
        t.lines()
            .find(|l| l.starts_with("getrandom:"))
            .unwrap()
            .to_string()
    };
    let other = stdout_of(out_dir, "process-clock-2");
    assert_ne!(bytes(&text), bytes(&other));
    assert_eq!(
        stdout_of(out_dir, "process-date-1"),
        "2000-01-01 00:00:02.500000000\n"
    );
    assert_eq!(
        fs::read_to_string(out_dir.join("processes/process-clock-1/note.txt")).unwrap(),
        "written natively in the process's directory\n"
    );
    let run = run_json(out_dir);
    let procs = run["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 3);
    assert_eq!(procs[0]["host"], "process-clock-1");
    assert_eq!(procs[0]["started_s"], 1.0);
    assert_eq!(procs[0]["ended_s"], 4.02000025);
    assert_eq!(procs[0]["exit_code"], 3);
    assert_eq!(procs[0]["failure"], serde_json::Value::Null);
    assert_eq!(procs[0]["unsupported_calls"]["inotify_init1"], 1);
    assert_eq!(procs[2]["host"], "process-date-1");
    assert_eq!(procs[2]["exit_code"], 0);
    // One thread or two, byte for byte: what the programs wrote and what the run recorded.
    for host in ["process-clock-1", "process-clock-2", "process-date-1"] {
        assert_eq!(
            stdout_of(&runs[0], host),
            stdout_of(&runs[1], host),
            "{host}"
        );
    }
    assert_eq!(run["processes"], run_json(&runs[1])["processes"]);
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn two_programs_talk_over_tcp_in_simulated_time() {
    let dir = tmp("echo");
    let server = program("tcp-echo-server", &dir);
    let client = program("tcp-echo-client", &dir);
    let scenario = write(
        &dir,
        "echo.yaml",
        &format!(
            "run: {{ seed: 3, stop_time: 30s }}\n\
             network: {{ graph: builtin, builtin: {{ latency: 50ms, bandwidth: 100 Mbit }} }}\n\
             processes:\n  \
             - {{ name: server, path: {server}, args: ['7000', '2'] }}\n  \
             - {{ name: small, path: {client}, args: [process-server-1, '7000', '1000', '3'], start: 1s }}\n  \
             - {{ name: bulk, path: {client}, args: [process-server-1, '7000', '1000000', '2'], start: 2s }}\n",
            server = server.display(),
            client = client.display()
        ),
    );
    let (runs, _) = run_on_one_and_two_threads(&scenario, &dir, "echo");
    for out_dir in &runs {
        // The clients check every byte that comes back against what they sent.
        all_exited_cleanly(out_dir);
    }
    let out_dir = &runs[0];
    assert_eq!(
        stdout_of(out_dir, "process-server-1"),
        "listening on port 7000\nconnection 1: echoed 3000 bytes\nconnection 2: echoed 2000000 bytes\n"
    );
    let small = stdout_of(out_dir, "process-small-1");
    // Two 50 ms one-way latencies, plus the 60-byte SYN and SYN-ACK each serialised on the
    // sender's uplink and the receiver's downlink at 100 Mbit/s (4 x 4.8 us).
    assert!(
        small.starts_with("connected after 100019200 ns\n"),
        "{small}"
    );
    assert_eq!(small.lines().filter(|l| l.starts_with("round")).count(), 3);
    assert!(small.ends_with("closed\n"), "{small}");
    assert!(stdout_of(out_dir, "process-bulk-1").contains("round 2: 1000000 bytes echoed in "));
    // Every call each process made to onionlab, with its simulated times and result, is the
    // same on one thread and two.
    let server_trace = trace(out_dir, "process-server-1");
    assert!(server_trace.contains(" listen(0x"), "{server_trace}");
    assert!(
        server_trace.lines().last().unwrap().ends_with("= exit 0"),
        "{server_trace}"
    );
    for host in ["process-server-1", "process-small-1", "process-bulk-1"] {
        assert_eq!(
            stdout_of(&runs[0], host),
            stdout_of(&runs[1], host),
            "{host}"
        );
        assert_eq!(trace(&runs[0], host), trace(&runs[1], host), "{host}");
    }
    assert_eq!(
        run_json(&runs[0])["processes"],
        run_json(&runs[1])["processes"]
    );
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn check_refuses_programs_that_cannot_run() {
    let dir = tmp("check");
    let script = write(&dir, "script.sh", "#!/bin/sh\necho hi\n");
    let data = write(&dir, "data.txt", "not a program\n");
    let src = onionlab_process::programs::source_dir().join("crash.c");
    let fixed = dir.join("static");
    let built = Command::new("cc")
        .args(["-static", "-O2", "-o"])
        .arg(&fixed)
        .arg(&src)
        .status()
        .unwrap();
    assert!(built.success(), "cc -static");
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
    let cases = [
        (dir.join("missing"), "cannot be read"),
        (data, "not executable"),
        (script, "a script"),
        (fixed, "statically linked"),
    ];
    for (path, why) in cases {
        let scenario = write(
            &dir,
            "bad.yaml",
            &format!(
                "run: {{ stop_time: 10s }}\nprocesses:\n  - {{ name: p, path: {} }}\n",
                path.display()
            ),
        );
        let out_dir = dir.join("out");
        let check = ["check", scenario.to_str().unwrap()];
        let run = [
            "run",
            scenario.to_str().unwrap(),
            "-o",
            out_dir.to_str().unwrap(),
        ];
        for (cmd, args) in [("check", &check[..]), ("run", &run[..])] {
            let out = onionlab(args);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(
                out.status.code(),
                Some(2),
                "{cmd} {}: {stderr}",
                path.display()
            );
            assert!(stderr.contains("processes[0].path"), "{stderr}");
            assert!(stderr.contains(why), "{stderr}");
            assert!(!stderr.contains("panicked"), "{stderr}");
        }
    }
    for (field, text) in [
        ("stall_limit", "stall_limit: 0s"),
        ("start", "start: 20s"),
        ("count", "count: 0"),
        ("env.LD_PRELOAD", "env: { LD_PRELOAD: x }"),
    ] {
        let scenario = write(
            &dir,
            "bad.yaml",
            &format!("run: {{ stop_time: 10s }}\nprocesses:\n  - {{ name: p, path: /bin/true, {text} }}\n"),
        );
        let out = onionlab(&["check", scenario.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{text}: {stderr}");
        assert!(
            stderr.contains(&format!("processes[0].{field}")),
            "{stderr}"
        );
    }
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn a_crash_and_a_busy_loop_are_recorded_and_the_run_goes_on() {
    let dir = tmp("failures");
    let crash = program("crash", &dir);
    let spin = program("spin", &dir);
    let scenario = write(
        &dir,
        "failures.yaml",
        &format!(
            "run: {{ stop_time: 10s }}\nprocesses:\n  \
             - {{ name: crash, path: {} }}\n  \
             - {{ name: spin, path: {}, stall_limit: 1s, start: 1s }}\n  \
             - {{ name: sleep, path: /bin/sleep, args: ['2'], start: 3s }}\n",
            crash.display(),
            spin.display()
        ),
    );
    let out_dir = dir.join("out");
    let out = onionlab(&[
        "run",
        scenario.to_str().unwrap(),
        "-o",
        out_dir.to_str().unwrap(),
        "--no-report",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let run = run_json(&out_dir);
    assert_eq!(run["complete"], true);
    let p = &run["processes"];
    assert_eq!(p[0]["signal"], 11, "{p}");
    assert!(
        p[0]["failure"]
            .as_str()
            .unwrap()
            .contains("killed by signal 11"),
        "{p}"
    );
    assert_eq!(stdout_of(&out_dir, "process-crash-1"), "about to crash\n");
    assert_eq!(p[1]["signal"], 9, "{p}");
    assert_eq!(p[1]["ended_s"], 1.0, "{p}");
    assert!(
        p[1]["failure"]
            .as_str()
            .unwrap()
            .contains("without a system call"),
        "{p}"
    );
    assert_eq!(stdout_of(&out_dir, "process-spin-1"), "spinning\n");
    assert_eq!(p[2]["exit_code"], 0, "{p}");
    assert_eq!(p[2]["ended_s"], 5.0, "{p}");
    assert!(
        stderr.contains("process process-spin-1: failed: stopped"),
        "{stderr}"
    );
    assert!(processes_running(&spin).is_empty());
    let _ = fs::remove_dir_all(&dir);
}

/// Waits until `path` has printed its first line in `out_dir`, i.e. the process is running.
fn wait_for_output(out_dir: &Path, host: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let file = out_dir.join("processes").join(host).join("stdout");
    while fs::read_to_string(&file).unwrap_or_default().is_empty() {
        assert!(Instant::now() < deadline, "{host} never started");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn no_process_outlives_an_interrupted_or_failed_run() {
    let dir = tmp("cleanup");
    let spin = program("spin", &dir);
    let scenario = write(
        &dir,
        "spin.yaml",
        &format!(
            "run: {{ stop_time: 100s }}\nprocesses:\n  \
             - {{ name: spin, path: {}, stall_limit: 1h }}\n",
            spin.display()
        ),
    );
    // SIGTERM (what `timeout` and batch schedulers send) while the process runs natively.
    let out_dir = dir.join("term");
    let mut child = Command::new(env!("CARGO_BIN_EXE_onionlab"))
        .args([
            "run",
            scenario.to_str().unwrap(),
            "-o",
            out_dir.to_str().unwrap(),
            "--no-report",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_output(&out_dir, "process-spin-1");
    assert_eq!(processes_running(&spin).len(), 1);
    // SAFETY: kill(2) on the child this test started.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let started = Instant::now();
    let status = child.wait().unwrap();
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_ne!(status.code(), Some(0));
    assert!(processes_running(&spin).is_empty());
    let run = run_json(&out_dir);
    assert_eq!(run["complete"], false);
    assert!(run["processes"][0]["failure"]
        .as_str()
        .unwrap()
        .contains("the run was stopped"));
    // A model failure elsewhere in the run (an injected panic on the process's own host, at a
    // time it sleeps through) ends the process too.
    let sleeper = dir.join("sleep");
    fs::copy("/bin/sleep", &sleeper).unwrap();
    let scenario = write(
        &dir,
        "sleep.yaml",
        &format!(
            "run: {{ stop_time: 100s }}\nprocesses:\n  - {{ name: s, path: {}, args: ['50'] }}\n",
            sleeper.display()
        ),
    );
    let out_dir = dir.join("fault");
    // Three authorities come first, so the process is host 3.
    let out = onionlab(&[
        "run",
        scenario.to_str().unwrap(),
        "-o",
        out_dir.to_str().unwrap(),
        "--inject-fault",
        "3@10s",
        "--no-report",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("injected fault"), "{stderr}");
    assert!(processes_running(&sleeper).is_empty());
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn threads_hand_work_over_a_mutex_a_condition_variable_and_an_eventfd() {
    let dir = tmp("threads");
    let threads = program("threads", &dir);
    let scenario = write(
        &dir,
        "threads.yaml",
        &format!(
            "run: {{ seed: 3, stop_time: 10s }}\nprocesses:\n  \
             - {{ name: threads, path: {}, args: ['4', '1000'], start: 1s }}\n",
            threads.display()
        ),
    );
    let (runs, _) = run_on_one_and_two_threads(&scenario, &dir, "threads");
    for out_dir in &runs {
        all_exited_cleanly(out_dir);
        // Every item summed once; worker 0 sleeps 10 ms after its tenth item while the others
        // take the rest, and the main thread's join waits for it.
        assert_eq!(
            stdout_of(out_dir, "process-threads-1"),
            "sum 500500\nitems 1000\nelapsed 10000000 ns\n"
        );
    }
    let calls = trace(&runs[0], "process-threads-1");
    assert_eq!(calls, trace(&runs[1], "process-threads-1"));
    // Four threads made (pthread_create's clone3) with ids of their own, four ended.
    for n in 1..=4 {
        assert!(
            calls.contains(&format!(") = 1003000{n}\n")),
            "thread {n} made: {calls}"
        );
    }
    assert_eq!(calls.matches("= thread exit\n").count(), 4);
    assert!(calls.contains(" 10030001 clock_nanosleep("), "{calls}");
    // The mutex and the condition variables wait and wake through the simulated futex.
    assert!(calls.contains(" futex(0x"), "{calls}");
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn a_timerfd_expires_on_simulated_time_under_poll_and_select() {
    let dir = tmp("timers");
    let timers = program("timers", &dir);
    let scenario = write(
        &dir,
        "timers.yaml",
        &format!(
            "run: {{ seed: 4, stop_time: 10s }}\nprocesses:\n  \
             - {{ name: timers, path: {}, start: 1s }}\n",
            timers.display()
        ),
    );
    let (runs, _) = run_on_one_and_two_threads(&scenario, &dir, "timers");
    for out_dir in &runs {
        all_exited_cleanly(out_dir);
        // First at 100 ms, then every 250 ms, to the nanosecond; the eventfd written after tick
        // 2 wakes the next poll at once; a 600 ms sleep lets two expiries pile up.
        assert_eq!(
            stdout_of(out_dir, "process-timers-1"),
            "tick 1: expirations 1 at 100000000 ns\n\
             tick 2: expirations 1 at 350000000 ns\n\
             eventfd 2 at 350000000 ns\n\
             tick 3: expirations 1 at 600000000 ns\n\
             tick 4: expirations 1 at 850000000 ns\n\
             tick 5: expirations 1 at 1100000000 ns\n\
             after sleeping 600 ms: expirations 2\n\
             select timed out after 30000000 ns\n\
             select: eventfd readable\n"
        );
    }
    assert_eq!(
        trace(&runs[0], "process-timers-1"),
        trace(&runs[1], "process-timers-1")
    );
    let _ = fs::remove_dir_all(&dir);
}

/// The machine's program `name` (`tor`, `tor-gencert`), the first on `PATH` (CI installs
/// Debian's tor).
fn installed(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// Real tor, unmodified, as a client with no network to reach: it starts, opens its SOCKS
/// port, starts its worker threads and tries the directory authorities (unreachable here) for
/// a simulated minute, with every call it makes served, the same on one and two threads.
#[test]
fn real_tor_runs_in_simulated_time() {
    let Some(tor) = installed("tor") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "tor is not installed, and CI is set"
        );
        eprintln!("skipping: no tor binary found");
        return;
    };
    let dir = tmp("tor");
    let torrc = write(&dir, "torrc", "SocksPort 9050\nLog notice stdout\n");
    let scenario = write(
        &dir,
        "tor.yaml",
        &format!(
            "run: {{ seed: 6, stop_time: 60s }}\nprocesses:\n  \
             - {{ name: tor, path: {}, args: [-f, {}, --DataDirectory, data], start: 1s }}\n",
            tor.display(),
            torrc.display()
        ),
    );
    let (runs, _) = run_on_one_and_two_threads(&scenario, &dir, "tor");
    let log = |out_dir: &Path| {
        stdout_of(out_dir, "process-tor-1").replace(out_dir.to_str().unwrap(), "OUT")
    };
    for out_dir in &runs {
        let run = run_json(out_dir);
        let p = &run["processes"][0];
        // Still running when the run ends, having asked for nothing onionlab lacks.
        assert_eq!(p["failure"], serde_json::Value::Null, "{p}");
        assert_eq!(p["ended_s"], serde_json::Value::Null, "{p}");
        assert_eq!(p["unsupported_calls"], serde_json::json!({}), "{p}");
        let text = log(out_dir);
        // Its clock reads 2000-01-01 plus the simulated time.
        assert!(
            text.starts_with("Jan 01 00:00:01.000 [notice] Tor "),
            "{text}"
        );
        assert!(
            text.contains("Opened Socks listener connection (ready) on 127.0.0.1:9050"),
            "{text}"
        );
        assert!(
            text.contains("Bootstrapped 0% (starting): Starting"),
            "{text}"
        );
        let calls = trace(out_dir, "process-tor-1");
        assert!(
            calls.contains(" clone3("),
            "tor starts worker threads: {calls}"
        );
        assert!(calls.contains(" epoll_wait("), "{calls}");
    }
    assert_eq!(log(&runs[0]), log(&runs[1]));
    assert_eq!(
        trace(&runs[0], "process-tor-1"),
        trace(&runs[1], "process-tor-1")
    );
    let _ = fs::remove_dir_all(&dir);
}

/// tor's key tools as processes: relay identities (`tor --list-fingerprint`) and an
/// authority's certificate (`tor-gencert`) come from the hosts' seeded streams and the
/// simulated clock, so the same seed makes the same keys, dated 2000-01-01, on any thread
/// count, and another seed other keys: what a private tor network in simulated time is built
/// from.
#[test]
fn tor_makes_the_same_keys_from_the_same_seed() {
    let Some(tor) = installed("tor") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "tor is not installed, and CI is set"
        );
        eprintln!("skipping: no tor binary found");
        return;
    };
    let gencert = installed("tor-gencert").expect("tor-gencert comes with tor");
    let dir = tmp("tor-keys");
    let scenario = |seed: u32| {
        write(
            &dir,
            &format!("keys-{seed}.yaml"),
            &format!(
                "run: {{ seed: {seed}, stop_time: 10s }}\nprocesses:\n  \
                 - {{ name: relay, count: 2, path: {}, args: [--list-fingerprint, \
                 --DataDirectory, data, --ORPort, '9001', --Nickname, relay, --SocksPort, '0'] }}\n  \
                 - {{ name: auth, path: {}, args: [--create-identity-key, -m, '12', -a, \
                 '100.64.0.3:7000', -i, id, -s, signing, -c, cert, --passphrase-fd, '0'] }}\n",
                tor.display(),
                gencert.display()
            ),
        )
    };
    let keys = |out_dir: &Path| {
        all_exited_cleanly(out_dir);
        let host = |h: &str| out_dir.join("processes").join(h);
        let relay = |h: &str| fs::read_to_string(host(h).join("data/fingerprint")).unwrap();
        let cert = fs::read_to_string(host("process-auth-1").join("cert")).unwrap();
        (relay("process-relay-1"), relay("process-relay-2"), cert)
    };
    let (runs, _) = run_on_one_and_two_threads(&scenario(9), &dir, "seed-9");
    let (a1, a2, cert) = keys(&runs[0]);
    assert_eq!(keys(&runs[1]), (a1.clone(), a2.clone(), cert.clone()));
    assert_ne!(a1, a2, "each host draws its own keys");
    assert!(
        cert.contains("dir-key-published 2000-01-01 00:00:00\n"),
        "{cert}"
    );
    assert!(
        cert.contains("dir-key-expires 2001-01-01 00:00:00\n"),
        "{cert}"
    );
    let (runs, _) = run_on_one_and_two_threads(&scenario(10), &dir, "seed-10");
    let (b1, _, other) = keys(&runs[0]);
    assert_ne!(a1, b1, "another seed, other keys");
    assert_ne!(cert, other);
    let _ = fs::remove_dir_all(&dir);
}

/// A private tor network of unmodified tor processes in simulated time, built by hand as a
/// user can: keys made by tor's own tools as managed processes, torrcs written for the hosts'
/// addresses, then three authorities, four relays and a client run together. The authorities
/// vote and publish a consensus, and the client bootstraps to 100%, with the same logs on one
/// and two threads.
#[test]
fn a_private_tor_network_bootstraps_in_simulated_time() {
    let (Some(tor), Some(gencert)) = (installed("tor"), installed("tor-gencert")) else {
        assert!(
            std::env::var_os("CI").is_none(),
            "tor is not installed, and CI is set"
        );
        eprintln!("skipping: no tor binary found");
        return;
    };
    let dir = tmp("tor-network");
    let auths = ["auth1", "auth2", "auth3"];
    let relays = ["relay1", "relay2", "relay3", "relay4"];
    let nodes: Vec<&str> = auths.iter().chain(&relays).copied().collect();
    let keys = dir.join("keys");
    // 1. Keys: an authority certificate for each authority, an identity for every node.
    let mut yaml = String::from("run: { seed: 21, stop_time: 10s }\nprocesses:\n");
    for a in auths {
        yaml += &format!(
            "  - {{ name: cert-{a}, path: {}, args: [--create-identity-key, -m, '12', -i, id, \
             -s, signing, -c, cert, --passphrase-fd, '0'] }}\n",
            gencert.display()
        );
    }
    for n in &nodes {
        fs::create_dir_all(keys.join(n)).unwrap();
        yaml += &format!(
            "  - {{ name: id-{n}, path: {}, args: [--list-fingerprint, --DataDirectory, {}, \
             --ORPort, '9001', --Nickname, {n}, --SocksPort, '0', --Log, 'err stderr'] }}\n",
            tor.display(),
            keys.join(n).display()
        );
    }
    let out = dir.join("out-keys");
    run_once(&write(&dir, "keys.yaml", &yaml), &out, &[]);
    all_exited_cleanly(&out);
    let mut v3ident = Vec::new();
    for a in auths {
        let from = out.join(format!("processes/process-cert-{a}-1"));
        let cert = fs::read_to_string(from.join("cert")).unwrap();
        v3ident.push(
            cert.lines()
                .find_map(|l| l.strip_prefix("fingerprint "))
                .unwrap()
                .to_string(),
        );
        for (file, name) in [
            ("id", "authority_identity_key"),
            ("signing", "authority_signing_key"),
            ("cert", "authority_certificate"),
        ] {
            fs::copy(from.join(file), keys.join(a).join("keys").join(name)).unwrap();
        }
    }
    let fingerprint = |n: &str| {
        let text = fs::read_to_string(keys.join(n).join("fingerprint")).unwrap();
        text.split_whitespace().nth(1).unwrap().to_string()
    };
    // 2. The hosts' addresses, from the hosts file of the network's scenario run with a
    // program that exits at once (the same hosts, in the same order).
    let network = |program: &Path, torrc: &dyn Fn(&str) -> Vec<String>| {
        let mut yaml = String::from(
            "run: { seed: 23, stop_time: 60s }\n\
             network: { graph: builtin, builtin: { latency: 20ms, bandwidth: 100 Mbit } }\n\
             processes:\n",
        );
        for n in nodes.iter().chain(&["client"]) {
            yaml += &format!(
                "  - {{ name: {n}, path: {}, args: [{}] }}\n",
                program.display(),
                torrc(n).join(", ")
            );
        }
        yaml
    };
    let probe = dir.join("out-probe");
    let probe_scenario = network(Path::new("/bin/true"), &|_| vec![]);
    run_once(&write(&dir, "probe.yaml", &probe_scenario), &probe, &[]);
    let hosts = fs::read_to_string(probe.join("processes/hosts")).unwrap();
    let address = |n: &str| {
        hosts
            .lines()
            .find(|l| l.ends_with(&format!(" process-{n}-1")))
            .and_then(|l| l.split_whitespace().next())
            .unwrap()
            .to_string()
    };
    // 3. The torrcs: a testing network with a 20-second voting schedule.
    let mut common = String::from(
        "TestingTorNetwork 1\nAssumeReachable 1\nLog notice stdout\nSafeLogging 0\n\
         TestingV3AuthInitialVotingInterval 20\nTestingV3AuthInitialVoteDelay 4\n\
         TestingV3AuthInitialDistDelay 4\nV3AuthVotingInterval 20\nV3AuthVoteDelay 4\n\
         V3AuthDistDelay 4\nTestingDirAuthVoteExit *\nTestingDirAuthVoteGuard *\n",
    );
    for (a, v3) in auths.iter().zip(&v3ident) {
        common += &format!(
            "DirAuthority {a} orport=9001 no-v2 v3ident={v3} {}:7000 {}\n",
            address(a),
            fingerprint(a)
        );
    }
    let data = dir.join("data");
    for n in nodes.iter().chain(&["client"]) {
        let mut torrc = format!("{common}DataDirectory {}\n", data.join(n).display());
        if *n == "client" {
            torrc += "SocksPort 9050\n";
        } else {
            // No IPv6 on the simulated network: the ORPort listens on IPv4 only.
            torrc += &format!(
                "Nickname {n}\nAddress {}\nORPort 9001 IPv4Only\nSocksPort 0\n",
                address(n)
            );
            torrc += if auths.contains(n) {
                "DirPort 7000\nAuthoritativeDirectory 1\nV3AuthoritativeDirectory 1\n\
                 ContactInfo onionlab\nExitPolicy reject *:*\n"
            } else {
                "ExitRelay 1\nExitPolicy accept *:*\n"
            };
        }
        write(&dir, &format!("{n}.torrc"), &torrc);
    }
    let scenario = write(
        &dir,
        "network.yaml",
        &network(&tor, &|n| {
            vec![
                "-f".into(),
                dir.join(format!("{n}.torrc")).display().to_string(),
            ]
        }),
    );
    // 4. The network, twice, each from the keys alone.
    let mut logs = Vec::new();
    for threads in ["1", "2"] {
        let _ = fs::remove_dir_all(&data);
        for n in &nodes {
            let to = data.join(n).join("keys");
            fs::create_dir_all(&to).unwrap();
            for f in fs::read_dir(keys.join(n).join("keys")).unwrap().flatten() {
                fs::copy(f.path(), to.join(f.file_name())).unwrap();
            }
        }
        let out_dir = dir.join(format!("out-{threads}"));
        run_once(&scenario, &out_dir, &["--threads", threads]);
        let run = run_json(&out_dir);
        for p in run["processes"].as_array().unwrap() {
            assert_eq!(p["failure"], serde_json::Value::Null, "{p}");
            assert_eq!(p["ended_s"], serde_json::Value::Null, "{p}");
            // Every call served, KIST's TCP_INFO and ioctls among them.
            assert_eq!(p["unsupported_calls"], serde_json::json!({}), "{p}");
        }
        let client = stdout_of(&out_dir, "process-client-1");
        assert!(
            client.contains("Bootstrapped 100% (done): Done"),
            "{client}"
        );
        let auth = stdout_of(&out_dir, "process-auth1-1");
        assert!(
            auth.contains("Consensus computed; uploading signature(s)"),
            "{auth}"
        );
        logs.push(
            nodes
                .iter()
                .chain(&["client"])
                .map(|n| stdout_of(&out_dir, &format!("process-{n}-1")))
                .collect::<Vec<_>>(),
        );
    }
    assert!(logs[0] == logs[1], "the same logs on one and two threads");
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn an_epoll_server_serves_many_clients_in_both_trigger_modes() {
    let dir = tmp("epoll");
    let server = program("epoll-server", &dir);
    let clients = program("epoll-clients", &dir);
    let mut outputs = Vec::new();
    for mode in ["level", "edge"] {
        let scenario = write(
            &dir,
            &format!("{mode}.yaml"),
            &format!(
                "run: {{ seed: 2, stop_time: 60s }}\n\
                 network: {{ graph: builtin, builtin: {{ latency: 20ms, bandwidth: 100 Mbit }} }}\n\
                 processes:\n  \
                 - {{ name: server, path: {server}, args: ['7000', '30', {mode}] }}\n  \
                 - {{ name: small, path: {clients}, args: [process-server-1, '7000', '20', '4096'], start: 1s }}\n  \
                 - {{ name: large, path: {clients}, args: [process-server-1, '7000', '10', '300000'], start: 1s }}\n",
                server = server.display(),
                clients = clients.display()
            ),
        );
        let (runs, _) = run_on_one_and_two_threads(&scenario, &dir, mode);
        for out_dir in runs {
            // The clients check every byte that comes back.
            all_exited_cleanly(&out_dir);
            let server_out = stdout_of(&out_dir, "process-server-1");
            assert!(
                server_out.contains("clients 30\nbytes 3081920\n"),
                "{mode}: {server_out}"
            );
            outputs.push(out_dir);
        }
    }
    // The same on one thread and two, calls and all; edge-triggered waits less often.
    let waits = |dir: &Path| {
        stdout_of(dir, "process-server-1")
            .lines()
            .find_map(|l| l.strip_prefix("epoll_wait calls "))
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    for pair in outputs.chunks(2) {
        for host in ["process-server-1", "process-small-1", "process-large-1"] {
            assert_eq!(
                stdout_of(&pair[0], host),
                stdout_of(&pair[1], host),
                "{host}"
            );
            assert_eq!(trace(&pair[0], host), trace(&pair[1], host), "{host}");
        }
    }
    assert!(waits(&outputs[2]) < waits(&outputs[0]));
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn udp_round_trips_take_the_latency_and_the_serialisation_exactly() {
    let dir = tmp("udp");
    let pong = program("udp-pong", &dir);
    let ping = program("udp-ping", &dir);
    let scenario = write(
        &dir,
        "udp.yaml",
        &format!(
            "run: {{ seed: 2, stop_time: 60s }}\n\
             network: {{ graph: builtin, builtin: {{ latency: 20ms, bandwidth: 100 Mbit }} }}\n\
             processes:\n  \
             - {{ name: pong, path: {pong}, args: ['5353', '8'] }}\n  \
             - {{ name: ping, path: {ping}, args: [process-pong-1, '5353', '5', '1200'], start: 1s }}\n  \
             - {{ name: big, path: {ping}, args: [process-pong-1, '5353', '3', '60000'], start: 2s }}\n",
            pong = pong.display(),
            ping = ping.display()
        ),
    );
    let (runs, _) = run_on_one_and_two_threads(&scenario, &dir, "udp");
    all_exited_cleanly(&runs[0]);
    // Two 20 ms one-way latencies, plus each way the datagram (payload and 28 bytes of IP and
    // UDP headers) serialised on the sender's uplink and the receiver's downlink at 100 Mbit/s:
    // 1,228 bytes take 98.24 us a link, 60,028 bytes (one packet: the model does not
    // fragment) 4,802.24 us.
    let ping = stdout_of(&runs[0], "process-ping-1");
    assert_eq!(ping.matches("ping ").count(), 5, "{ping}");
    assert_eq!(ping.matches(": 40392960 ns\n").count(), 5, "{ping}");
    let big = stdout_of(&runs[0], "process-big-1");
    assert_eq!(big.matches(": 59208960 ns\n").count(), 3, "{big}");
    assert_eq!(
        stdout_of(&runs[0], "process-pong-1"),
        "listening on udp port 5353\nanswered 8 datagrams\n"
    );
    for host in ["process-pong-1", "process-ping-1", "process-big-1"] {
        assert_eq!(
            stdout_of(&runs[0], host),
            stdout_of(&runs[1], host),
            "{host}"
        );
    }
    let _ = fs::remove_dir_all(&dir);
}
