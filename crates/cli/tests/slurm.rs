//! `experiment --slurm` against a real Slurm: a single-node cluster (munged, slurmctld and
//! slurmd from Debian's packages) started for the test with a configuration of its own, and
//! stopped at the end, leaving nothing running.
//!
//! Starting it needs root and the packages (`.ci/run` installs them). Where either is missing
//! the test says so and passes, unless `ONIONLAB_REQUIRE_SLURM=1` (set by `.ci/run`) asks
//! for Slurm, when it fails.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// A single-node Slurm cluster of this machine, for as long as the value lives.
struct Cluster {
    dir: PathBuf,
    conf: PathBuf,
}

impl Cluster {
    /// Starts munged, slurmctld and slurmd, or says why it cannot.
    fn start(dir: &Path) -> Result<Cluster, String> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("not root (slurmd must run as root)".into());
        }
        for program in ["munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo"] {
            if Command::new("sh")
                .args(["-c", &format!("command -v {program}")])
                .output()
                .map_or(true, |o| !o.status.success())
            {
                return Err(format!(
                    "no `{program}` (Debian's munge, slurmctld, slurmd and slurm-client)"
                ));
            }
        }
        let _ = fs::remove_dir_all(dir);
        for sub in ["state", "spool", "munge"] {
            fs::create_dir_all(dir.join(sub)).map_err(|e| e.to_string())?;
        }
        let key = dir.join("munge/munge.key");
        fs::write(&key, [7u8; 1024]).map_err(|e| e.to_string())?;
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&key, fs::Permissions::from_mode(0o600)).map_err(|e| e.to_string())?;
        let socket = dir.join("munge/socket");
        let munged = Command::new("munged")
            .arg("--force")
            .arg(format!("--socket={}", socket.display()))
            .arg(format!("--key-file={}", key.display()))
            .arg(format!("--log-file={}", dir.join("munge/log").display()))
            .arg(format!("--pid-file={}", dir.join("munge/pid").display()))
            .arg(format!("--seed-file={}", dir.join("munge/seed").display()))
            .output()
            .map_err(|e| e.to_string())?;
        if !munged.status.success() {
            return Err(format!(
                "munged: {}",
                String::from_utf8_lossy(&munged.stderr)
            ));
        }
        // The node is this host by name (slurmd finds itself by it) and reached on loopback
        // (the name may resolve to nothing here).
        let host = String::from_utf8_lossy(
            &Command::new("hostname")
                .arg("-s")
                .output()
                .map_err(|e| e.to_string())?
                .stdout,
        )
        .trim()
        .to_string();
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let memory_mib = fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| {
                let kib: u64 = m
                    .lines()
                    .find(|l| l.starts_with("MemTotal:"))?
                    .split_whitespace()
                    .nth(1)?
                    .parse()
                    .ok()?;
                Some(kib / 1024 * 9 / 10)
            })
            .unwrap_or(1024);
        let (ctld_port, d_port) = (free_port(), free_port());
        let d = dir.display();
        let conf = dir.join("slurm.conf");
        fs::write(
            &conf,
            format!(
                "ClusterName=onionlabtest\n\
                 SlurmctldHost={host}(127.0.0.1)\n\
                 SlurmUser=root\n\
                 SlurmdUser=root\n\
                 AuthType=auth/munge\n\
                 AuthInfo=socket={socket}\n\
                 CredType=cred/munge\n\
                 StateSaveLocation={d}/state\n\
                 SlurmdSpoolDir={d}/spool\n\
                 SlurmctldPidFile={d}/slurmctld.pid\n\
                 SlurmdPidFile={d}/slurmd.pid\n\
                 SlurmctldLogFile={d}/slurmctld.log\n\
                 SlurmdLogFile={d}/slurmd.log\n\
                 SlurmctldPort={ctld_port}\n\
                 SlurmdPort={d_port}\n\
                 ProctrackType=proctrack/linuxproc\n\
                 TaskPlugin=task/none\n\
                 SchedulerType=sched/backfill\n\
                 SelectType=select/cons_tres\n\
                 SelectTypeParameters=CR_Core\n\
                 ReturnToService=2\n\
                 MpiDefault=none\n\
                 JobCompType=jobcomp/none\n\
                 JobAcctGatherType=jobacct_gather/none\n\
                 AccountingStorageType=accounting_storage/none\n\
                 NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory_mib} \
                 State=UNKNOWN\n\
                 PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n",
                socket = socket.display(),
            ),
        )
        .map_err(|e| e.to_string())?;
        let cluster = Cluster {
            dir: dir.to_path_buf(),
            conf,
        };
        for daemon in [&["slurmctld", "-i"][..], &["slurmd"][..]] {
            let out = cluster
                .command(daemon[0])
                .args(&daemon[1..])
                .output()
                .map_err(|e| e.to_string())?;
            if !out.status.success() {
                return Err(format!(
                    "{}: {}",
                    daemon[0],
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }
        // The node must register before jobs can run on it.
        let start = Instant::now();
        loop {
            let out = cluster.command("sinfo").args(["-h", "-o", "%T"]).output();
            let state = out.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
            if state.as_deref().is_ok_and(|s| s.starts_with("idle")) {
                return Ok(cluster);
            }
            if start.elapsed() > Duration::from_secs(60) {
                return Err(format!(
                    "the node did not come up: sinfo says {state:?}; see {}",
                    dir.join("slurmd.log").display()
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// A command that talks to this cluster.
    fn command(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.env("SLURM_CONF", &self.conf);
        c
    }

    /// `onionlab ARGS` as a user of this cluster runs it.
    fn onionlab(&self, args: &[&str]) -> Output {
        self.command(env!("CARGO_BIN_EXE_onionlab"))
            .args(args)
            .output()
            .expect("onionlab runs")
    }

    /// Waits until the queue is empty.
    fn wait_idle(&self) {
        let start = Instant::now();
        loop {
            let out = self
                .command("squeue")
                .args(["-h", "-o", "%i %T"])
                .output()
                .expect("squeue runs");
            if out.status.success() && out.stdout.trim_ascii().is_empty() {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(600),
                "jobs still queued after 10 minutes: {}",
                String::from_utf8_lossy(&out.stdout)
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for pid_file in ["slurmd.pid", "slurmctld.pid", "munge/pid"] {
            let Some(pid) = fs::read_to_string(self.dir.join(pid_file))
                .ok()
                .and_then(|p| p.trim().parse::<i32>().ok())
            else {
                continue;
            };
            // SAFETY: signals a process this test started, by the pid its pid file holds.
            unsafe { libc::kill(pid, libc::SIGTERM) };
            let start = Instant::now();
            // SAFETY: signal 0 only asks whether the process is still there.
            while unsafe { libc::kill(pid, 0) } == 0 && start.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(50));
            }
            // SAFETY: as above.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// A TCP port nothing listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const EXPERIMENT: &str = "\
name: slurm-test
scenario: toy
stop_time: 1m
trials: 2
variants:
  - { name: kist, set: { tor.scheduler: kist } }
  - { name: vanilla, set: { tor.scheduler: vanilla } }
";

/// 2 variants × 2 trials of the toy network for one simulated minute, through Slurm: the
/// trials' files are byte-identical to a local run's; a trial made to fail is reported as
/// failed by `--status` and is the only one the next `--slurm` submits.
#[test]
fn an_experiment_runs_as_a_slurm_job_array() {
    let dir = std::env::temp_dir().join(format!("onionlab-slurm-{}", std::process::id()));
    let cluster = match Cluster::start(&dir.join("cluster")) {
        Ok(c) => c,
        Err(why) => {
            assert!(
                std::env::var_os("ONIONLAB_REQUIRE_SLURM").is_none_or(|v| v == "0"),
                "Slurm cannot start here, and ONIONLAB_REQUIRE_SLURM asks for it: {why}"
            );
            eprintln!("skipped: Slurm cannot start here: {why}");
            return;
        }
    };
    let work = dir.join("work");
    fs::create_dir_all(&work).unwrap();
    let file = work.join("slurm-test.yaml");
    fs::write(&file, EXPERIMENT).unwrap();
    let file = file.to_str().unwrap();
    let local = work.join("local");
    let on_slurm = work.join("slurm");

    let out = cluster.onionlab(&[
        "experiment",
        file,
        "-o",
        local.to_str().unwrap(),
        "--quiet",
        "--threads",
        "1",
    ]);
    assert!(out.status.success(), "{}", text(&out).1);

    // A file where one trial's folder must go makes that trial fail.
    let blocked = on_slurm.join("vanilla/trial-2");
    fs::create_dir_all(blocked.parent().unwrap()).unwrap();
    fs::write(&blocked, "in the way").unwrap();
    let slurm_args = [
        "experiment",
        file,
        "-o",
        on_slurm.to_str().unwrap(),
        "--quiet",
        "--threads",
        "1",
        "--slurm",
        "--cpus-per-task",
        "1",
    ];
    let status = || {
        cluster.onionlab(&[
            "experiment",
            file,
            "-o",
            on_slurm.to_str().unwrap(),
            "--status",
        ])
    };
    let out = cluster.onionlab(&slurm_args);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("4 of 4 trials to run"), "{stdout}");
    assert!(stdout.contains("submitted job array"), "{stdout}");
    cluster.wait_idle();

    let out = status();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("kist: 2 complete, 0 running, 0 pending, 0 failed, 0 not run"),
        "{stdout}"
    );
    assert!(
        stdout.contains("vanilla: 1 complete, 0 running, 0 pending, 1 failed, 0 not run"),
        "{stdout}"
    );
    assert!(stdout.contains("failed: vanilla/trial-2"), "{stdout}");
    assert!(
        stdout.contains("output directory"),
        "the failed task's log says why: {stdout}"
    );
    // The comparison job compared what was complete and reported the rest.
    let compare_log = fs::read_to_string(on_slurm.join("slurm/submission-1-compare.log")).unwrap();
    assert!(compare_log.contains("vanilla/trial-2"), "{compare_log}");
    assert!(on_slurm.join("compare").is_dir());

    fs::remove_file(&blocked).unwrap();
    let out = cluster.onionlab(&slurm_args);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("1 of 4 trials to run"), "{stdout}");
    assert_eq!(
        fs::read_to_string(on_slurm.join("slurm/submission-2.tasks")).unwrap(),
        "slurm-test\tvanilla\t2\n"
    );
    cluster.wait_idle();

    let out = status();
    let (stdout, _) = text(&out);
    for variant in ["kist", "vanilla"] {
        assert!(
            stdout.contains(&format!(
                "{variant}: 2 complete, 0 running, 0 pending, 0 failed, 0 not run"
            )),
            "{stdout}"
        );
    }
    for variant in ["kist", "vanilla"] {
        for k in 1..=2 {
            let trial = format!("{variant}/trial-{k}");
            for f in ["downloads.csv", "relays.csv", "circuits.csv"] {
                assert_eq!(
                    fs::read(local.join(&trial).join(f)).unwrap(),
                    fs::read(on_slurm.join(&trial).join(f)).unwrap(),
                    "{trial}/{f} differs between the local run and Slurm's"
                );
            }
        }
    }
    let record: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(on_slurm.join("experiment.json")).unwrap())
            .unwrap();
    assert_eq!(record["complete"], true, "{record}");
    drop(cluster);
    let _ = fs::remove_dir_all(&dir);
}

/// Without Slurm, `--slurm` says so in our words and `--dry-run` still writes the script.
#[test]
fn slurm_without_sbatch_is_a_clear_error() {
    let dir = std::env::temp_dir().join(format!("onionlab-slurm-none-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let file = dir.join("slurm-test.yaml");
    fs::write(&file, EXPERIMENT).unwrap();
    let out_dir = dir.join("out");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "experiment",
            file.to_str().unwrap(),
            "-o",
            out_dir.to_str().unwrap(),
            "--slurm",
        ];
        args.extend(extra);
        Command::new(env!("CARGO_BIN_EXE_onionlab"))
            .args(&args)
            .env("PATH", "/nonexistent")
            .output()
            .expect("onionlab runs")
    };
    let out = run(&[]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no `sbatch` on PATH"), "{stderr}");

    let out = run(&["--dry-run", "--partition", "long", "--time", "2:00:00"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("4 of 4 trials to run"), "{stdout}");
    assert!(stdout.contains("would run: sbatch"), "{stdout}");
    let script = fs::read_to_string(out_dir.join("slurm/submission-1.sh")).unwrap();
    for line in [
        "#SBATCH --array=0-3",
        "#SBATCH --partition=long",
        "#SBATCH --time=2:00:00",
        "--slurm-task \"$SLURM_ARRAY_TASK_ID\"",
    ] {
        assert!(script.contains(line), "{line} missing from:\n{script}");
    }
    assert_eq!(
        fs::read_to_string(out_dir.join("slurm/submission-1.tasks"))
            .unwrap()
            .lines()
            .count(),
        4
    );
    // A dry run is no submission: `--status` does not take its tasks for submitted ones.
    let out = Command::new(env!("CARGO_BIN_EXE_onionlab"))
        .args(["experiment", file.to_str().unwrap(), "-o"])
        .arg(&out_dir)
        .arg("--status")
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("kist: 0 complete, 0 running, 0 pending, 0 failed, 2 not run"),
        "{stdout}"
    );

    // A reproduction's tasks run `reproduce NAME`, all its experiments in one array.
    let root = dir.join("reproduce");
    let out = Command::new(env!("CARGO_BIN_EXE_onionlab"))
        .args(["reproduce", "schedulers", "--stop-time", "1m", "-o"])
        .arg(&root)
        .args(["--slurm", "--dry-run"])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("9 of 9 trials to run"), "{stdout}");
    let script = fs::read_to_string(root.join("slurm/submission-1.sh")).unwrap();
    assert!(script.contains(" reproduce schedulers -o "), "{script}");
    assert!(script.contains("#SBATCH --array=0-8"), "{script}");
    let _ = fs::remove_dir_all(&dir);
}
