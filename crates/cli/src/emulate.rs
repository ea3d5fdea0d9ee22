//! `onionlab emulate`: the scenario with real tor processes, written in the same files as a
//! simulated run so that `onionlab compare` can put the two side by side.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use onionlab_emulate::Error;
use onionlab_report::{
    peak_rss_bytes, render_summary, summarize, total_goodput, OutputDir, RunInfo,
};

use crate::run::{apply_overrides, format_secs, load_scenario, report, resolve, INTERRUPTED};
use crate::Failure;

#[derive(clap::Args)]
pub(crate) struct EmulateArgs {
    /// Scenario file, or the name of a built-in scenario (emulation takes at most 40 tors).
    pub scenario: Option<String>,
    /// Output directory (default: out/<scenario name>-emulation).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Seed for the workload's choices and the switch's loss; overrides run.seed.
    #[arg(long)]
    pub seed: Option<u64>,
    /// How long to run the workload after the network has bootstrapped (e.g. 10m, 90s);
    /// overrides the scenario's run.stop_time. This is real time.
    #[arg(long)]
    pub stop_time: Option<String>,
    /// Give up if the tors have not bootstrapped within this long.
    #[arg(long, default_value = "4m")]
    pub bootstrap_timeout: String,
    /// Do not print progress lines.
    #[arg(long)]
    pub quiet: bool,
    /// Do not write plots and report.html at the end.
    #[arg(long)]
    pub no_report: bool,
    /// Replace the results of an earlier run in the output directory.
    #[arg(long)]
    pub force: bool,
    /// Instead of emulating, remove namespaces left by emulations that were killed (SIGKILL
    /// leaves no chance to clean up), and exit.
    #[arg(long, conflicts_with_all = ["scenario", "output", "stop_time"])]
    pub cleanup: bool,
}

pub(crate) fn emulate(args: EmulateArgs) -> Result<(), Failure> {
    if args.cleanup {
        let removed = onionlab_emulate::lab::remove_stale().map_err(Failure::internal)?;
        if removed.is_empty() {
            println!("no stale onionlab namespaces");
        } else {
            println!("removed {}", removed.join(", "));
        }
        return Ok(());
    }
    let arg = args.scenario.as_deref().unwrap_or("emulation-minimal");
    let mut scenario = load_scenario(arg)?;
    apply_overrides(&mut scenario, args.seed, args.stop_time.as_deref())?;
    let bootstrap_timeout =
        onionlab_scenario::parse_duration(&args.bootstrap_timeout).map_err(|e| {
            Failure::input(format!(
                "--bootstrap-timeout {}: {e}",
                args.bootstrap_timeout
            ))
        })?;
    let (graph, plan) = resolve(&scenario)?;
    let layout = onionlab_emulate::prepare(&plan, &graph).map_err(|e| match e {
        Error::Input(m) | Error::Setup(m) => Failure::input(format!(
            "{}: cannot emulate: {m}",
            scenario.source.display()
        )),
    })?;
    let out_dir = args
        .output
        .clone()
        .unwrap_or_else(|| PathBuf::from("out").join(format!("{}-emulation", scenario.name)));
    let out =
        OutputDir::for_new_run(&out_dir, args.force).map_err(|e| Failure::input(e.to_string()))?;

    let interrupt = Arc::new(AtomicBool::new(false));
    let flag = interrupt.clone();
    // As in `run`: a second handler cannot be installed in one process (tests); the run then
    // cannot be interrupted with Ctrl-C, but still cleans up on every other path.
    let _ = ctrlc::set_handler(move || flag.store(true, Ordering::Relaxed));
    let opts = onionlab_emulate::Options {
        duration: Duration::from_nanos(scenario.run.stop_time.0),
        bootstrap_timeout: Duration::from_nanos(bootstrap_timeout.0),
        interrupt: interrupt.clone(),
        logs_dir: out_dir.join("tor"),
        verbose: !args.quiet,
    };
    let started = Instant::now();
    let measured = onionlab_emulate::run(&scenario, &layout, &opts).map_err(|e| match e {
        Error::Input(m) => Failure::input(m),
        Error::Setup(m) if interrupt.load(Ordering::Relaxed) => Failure {
            code: INTERRUPTED,
            message: m,
        },
        Error::Setup(m) => Failure::internal(m),
    })?;
    let wall = started.elapsed().as_secs_f64();
    let complete = measured.stopped_early.is_none();
    let bootstrap = scenario.run.bootstrap.0;
    let info = RunInfo {
        plot_relays: crate::run::plot_relays(&scenario),
        transport: None,
        directory: None,
        cpu: None,
        state: Vec::new(),
        processes: Vec::new(),
        scenario_name: scenario.name.clone(),
        scenario: serde_json::to_value(&scenario).unwrap_or(serde_json::Value::Null),
        seed: scenario.run.seed,
        version: env!("CARGO_PKG_VERSION").to_string(),
        commit: env!("ONIONLAB_COMMIT").to_string(),
        threads: 0,
        sim_seconds: measured.seconds,
        bootstrap_seconds: bootstrap as f64 / 1e9,
        wall_seconds: wall,
        speed: measured.seconds / wall.max(1e-9),
        events: 0,
        rounds: 0,
        events_per_sec: 0.0,
        peak_rss_bytes: peak_rss_bytes(),
        workers: Vec::new(),
        spans: Vec::new(),
        complete,
        mode: "emulation".into(),
        interrupted_reason: measured.stopped_early.clone(),
        progress: Vec::new(),
        emulation: Some(serde_json::json!({
            "tor_version": measured.tor_version,
            "tor_processes": layout.tor_processes(),
            "setup_seconds": measured.setup_seconds,
            "switch": {
                "frames_received": measured.switch.received,
                "frames_forwarded": measured.switch.forwarded,
                "frames_lost_on_paths": measured.switch.lost,
                "frames_flooded": measured.switch.flooded,
                "socket_drops": measured.switch.socket_drops,
                "egress_queue_drops": measured.switch.egress_drops,
                "frames_pending_at_end": measured.switch.pending,
                "send_errors": measured.switch.send_errors,
                "gso_frames": measured.switch.gso_frames,
                "gso_segments": measured.switch.gso_segments,
                "gso_frames_whole": measured.switch.gso_whole,
            },
            "cpu": measured.cpu.as_ref().map(cpu_json),
            "cleanup_problems": measured.cleanup_problems,
        })),
    };
    let write = |e: onionlab_report::ReportError| Failure::internal(e.to_string());
    out.write_downloads(&measured.downloads).map_err(write)?;
    out.write_relays(&measured.relays).map_err(write)?;
    out.write_circuits(&measured.circuits).map_err(write)?;
    out.write_run(&info).map_err(write)?;
    let groups = summarize(&measured.downloads);
    let goodput = total_goodput(&measured.relays, bootstrap / 1_000_000_000 + 1);
    let summary = render_summary(&groups, goodput, complete);
    out.write_summary(&summary).map_err(write)?;
    println!("{summary}");
    println!(
        "emulated {} with tor {} in {:.1} s wall time ({:.1} s to set up); results in {}",
        format_secs(measured.seconds),
        measured.tor_version,
        wall,
        measured.setup_seconds,
        out_dir.display()
    );
    if let (Some(cpu), false) = (&measured.cpu, args.quiet) {
        println!("{}", cpu.summary());
    }
    if !args.no_report {
        if let Err(e) = report(&out_dir, &[]) {
            eprintln!("warning: no report: {}", e.message);
        }
    }
    if !measured.cleanup_problems.is_empty() {
        return Err(Failure::internal(format!(
            "clean-up incomplete: {}",
            measured.cleanup_problems.join("; ")
        )));
    }
    match measured.stopped_early {
        None => Ok(()),
        Some(reason) if interrupt.load(Ordering::Relaxed) => {
            eprintln!(
                "interrupted: results up to {} are in {}, marked partial",
                format_secs(measured.seconds),
                out_dir.display()
            );
            Err(Failure {
                code: INTERRUPTED,
                message: reason,
            })
        }
        Some(reason) => Err(Failure::internal(format!(
            "{reason}; results up to {} are in {}, marked partial",
            format_secs(measured.seconds),
            out_dir.display()
        ))),
    }
}

/// run.json's `emulation.cpu`: a tor or the emulator with no figure (gone by the end of the
/// run) keeps its entry, with nulls, so that a missing process is seen rather than assumed idle.
fn cpu_json(cpu: &onionlab_emulate::cpu::CpuReport) -> serde_json::Value {
    let times = |u: Option<onionlab_emulate::cpu::CpuUse>| {
        serde_json::json!({
            "user_s": u.map(|u| u.user_s),
            "system_s": u.map(|u| u.system_s),
        })
    };
    let tors: serde_json::Map<String, serde_json::Value> = cpu
        .tors
        .iter()
        .map(|t| {
            let mut entry = times(t.used);
            entry["role"] = t.role.into();
            (t.name.clone(), entry)
        })
        .collect();
    serde_json::json!({
        "measured_seconds": cpu.measured_seconds,
        "clock_ticks_per_second": cpu.clock_ticks_per_second,
        "tors": tors,
        "emulator": times(cpu.emulator),
        "machine_cores": cpu.machine_cores,
    })
}
