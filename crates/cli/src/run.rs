//! `onionlab run` and `onionlab check`.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use onionlab_engine::time::{as_secs_f64, NANOS_PER_SEC};
use onionlab_engine::RunControl;
use onionlab_report::{
    peak_rss_bytes, render_summary, summarize, total_goodput, OutputDir, RunInfo, WorkerRecord,
};
use onionlab_scenario::{Plan, Scenario};
use onionlab_tor::build::build;

use crate::{assemble, results, Failure, RunArgs};

/// Exit code of a run stopped by Ctrl-C (its results are written, marked partial).
const INTERRUPTED: u8 = 130;

fn load_scenario(arg: &str) -> Result<Scenario, Failure> {
    let path = Path::new(arg);
    if path.exists() {
        return onionlab_scenario::load(path).map_err(|e| Failure::input(e.to_string()));
    }
    match onionlab_scenario::builtin_text(arg) {
        Some(text) => onionlab_scenario::parse(text, &PathBuf::from(format!("builtin:{arg}.yaml")))
            .map_err(|e| Failure::input(e.to_string())),
        None => Err(Failure::input(format!(
            "{arg}: no such scenario file, and not a built-in scenario (built-in: {})",
            onionlab_scenario::BUILTIN_NAMES.join(", ")
        ))),
    }
}

fn resolve(scenario: &Scenario) -> Result<(onionlab_net::topology::Graph, Plan), Failure> {
    let graph =
        onionlab_scenario::load_graph(scenario).map_err(|e| Failure::input(e.to_string()))?;
    let plan =
        onionlab_scenario::resolve(scenario, &graph).map_err(|e| Failure::input(e.to_string()))?;
    Ok((graph, plan))
}

pub fn check(arg: &str) -> Result<(), Failure> {
    let scenario = load_scenario(arg)?;
    let (graph, plan) = resolve(&scenario)?;
    let network = assemble::tor_network(&scenario, graph, &plan, scenario.run.seed, 1)
        .map_err(|e| Failure::input(format!("{}: {e}", scenario.source.display())))?;
    build(network).map_err(|e| Failure::input(format!("{}: {e}", scenario.source.display())))?;
    println!(
        "{}: valid: {} relays, {} authorities, {} servers, {} clients, {} simulated",
        scenario.source.display(),
        plan.relays.len(),
        plan.authorities.len(),
        plan.servers.len(),
        plan.clients.len(),
        format_secs(as_secs_f64(scenario.run.stop_time.0)),
    );
    Ok(())
}

pub fn run(args: RunArgs) -> Result<(), Failure> {
    let arg = args.scenario.as_deref().unwrap_or("toy");
    let mut scenario = load_scenario(arg)?;
    if let Some(seed) = args.seed {
        scenario.run.seed = seed;
    }
    if let Some(text) = &args.stop_time {
        let stop = onionlab_scenario::parse_duration(text)
            .map_err(|e| Failure::input(format!("--stop-time {text}: {e}")))?;
        if stop.0 == 0 {
            return Err(Failure::input("--stop-time: expected a positive duration"));
        }
        scenario.run.stop_time = stop;
        if scenario.run.bootstrap.0 >= stop.0 {
            // A short trial run of a long scenario: keep a warm-up, but inside the run.
            let cut = stop.0 / 2;
            eprintln!(
                "warning: --stop-time {} ends within the bootstrap period ({}); the bootstrap \
                 period is cut to {} for this run (recorded in run.json)",
                format_secs(as_secs_f64(stop.0)),
                format_secs(as_secs_f64(scenario.run.bootstrap.0)),
                format_secs(as_secs_f64(cut)),
            );
            scenario.run.bootstrap.0 = cut;
        }
    }
    if args.threads == Some(0) {
        return Err(Failure::input("--threads: expected at least 1"));
    }
    let threads = args
        .threads
        .or(scenario.run.threads.map(|t| t as usize))
        .unwrap_or_else(onionlab_engine::default_threads)
        .max(1);
    let (graph, plan) = resolve(&scenario)?;
    let groups: Vec<String> = plan
        .relays
        .iter()
        .map(|_| "relay".to_string())
        .chain(plan.authorities.iter().map(|a| a.group.clone()))
        .chain(plan.servers.iter().map(|s| s.group.clone()))
        .chain(plan.clients.iter().map(|c| c.host.group.clone()))
        .collect();
    let seed = scenario.run.seed;
    let network = assemble::tor_network(&scenario, graph, &plan, seed, threads)
        .map_err(|e| Failure::input(format!("{}: {e}", scenario.source.display())))?;
    let (mut sim, world) = build(network)
        .map_err(|e| Failure::input(format!("{}: {e}", scenario.source.display())))?;
    let out_dir = args
        .output
        .clone()
        .unwrap_or_else(|| PathBuf::from("out").join(&scenario.name));
    let out = OutputDir::create(&out_dir).map_err(|e| Failure::input(e.to_string()))?;

    let stop = scenario.run.stop_time.0;
    let control = sim.control();
    let handler = control.clone();
    // A second handler cannot be installed (e.g. in tests that call run twice); the run then
    // simply cannot be interrupted, which is not worth failing for.
    let _ = ctrlc::set_handler(move || handler.interrupt());
    let done = Arc::new(AtomicBool::new(false));
    let progress = (!args.quiet).then(|| spawn_progress(control.clone(), stop, done.clone()));
    let started = Instant::now();
    let outcome = catch_unwind(AssertUnwindSafe(|| sim.run_until(stop)));
    done.store(true, Ordering::Relaxed);
    if let Some(p) = progress {
        let _ = p.join();
    }
    let wall = started.elapsed().as_secs_f64();
    let (stats, failure) = match outcome {
        Ok(stats) => (Some(stats), None),
        Err(panic) => {
            let what = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            (None, Some(format!("internal error in the model: {what}")))
        }
    };
    let interrupted = stats.as_ref().is_some_and(|s| s.interrupted);
    let sim_time = stats
        .as_ref()
        .map(|s| s.sim_time)
        .unwrap_or_else(|| control.sim_time());
    let complete = failure.is_none() && !interrupted;
    let bootstrap = scenario.run.bootstrap.0;
    let collected = results::collect(&mut sim, &world, &groups, bootstrap);
    let events = stats.as_ref().map_or(0, |s| s.events);
    let info = RunInfo {
        scenario_name: scenario.name.clone(),
        scenario: serde_json::to_value(&scenario).unwrap_or(serde_json::Value::Null),
        seed,
        version: env!("CARGO_PKG_VERSION").to_string(),
        threads,
        sim_seconds: as_secs_f64(sim_time),
        bootstrap_seconds: as_secs_f64(bootstrap),
        wall_seconds: wall,
        speed: as_secs_f64(sim_time) / wall.max(1e-9),
        events,
        rounds: stats.as_ref().map_or(0, |s| s.rounds),
        events_per_sec: events as f64 / wall.max(1e-9),
        peak_rss_bytes: peak_rss_bytes(),
        workers: stats
            .as_ref()
            .map(|s| {
                s.workers
                    .iter()
                    .map(|w| WorkerRecord {
                        hosts: w.hosts,
                        events: w.events,
                        busy_s: w.busy.as_secs_f64(),
                        blocked_s: w.blocked.as_secs_f64(),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        complete,
        mode: "simulation".into(),
        interrupted_reason: if interrupted {
            Some(format!(
                "interrupted by the user at {} simulated",
                format_secs(as_secs_f64(sim_time))
            ))
        } else {
            failure.clone()
        },
    };
    let write = |e: onionlab_report::ReportError| Failure::internal(e.to_string());
    out.write_downloads(&collected.downloads).map_err(write)?;
    out.write_relays(&collected.relays).map_err(write)?;
    out.write_circuits(&collected.circuits).map_err(write)?;
    out.write_run(&info).map_err(write)?;
    let groups = summarize(&collected.downloads);
    let goodput = total_goodput(&collected.relays, bootstrap / NANOS_PER_SEC + 1);
    let summary = render_summary(&groups, goodput, complete);
    out.write_summary(&summary).map_err(write)?;
    println!("{summary}");
    println!(
        "{} simulated in {:.1} s ({:.1}x real time, {} events, {} threads); results in {}",
        format_secs(info.sim_seconds),
        wall,
        info.speed,
        events,
        threads,
        out_dir.display()
    );
    if let Some(f) = failure {
        return Err(Failure::internal(format!(
            "{f}; results up to {} are in {}, marked partial",
            format_secs(info.sim_seconds),
            out_dir.display()
        )));
    }
    if interrupted {
        eprintln!(
            "interrupted: results up to {} are in {}, marked partial",
            format_secs(info.sim_seconds),
            out_dir.display()
        );
        return Err(Failure {
            code: INTERRUPTED,
            message: "run interrupted".into(),
        });
    }
    Ok(())
}

fn spawn_progress(
    control: RunControl,
    stop: u64,
    done: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let bar = ProgressBar::new(stop / NANOS_PER_SEC);
        bar.set_style(
            ProgressStyle::with_template(
                "{bar:40} {pos}/{len} simulated s  {msg}  elapsed {elapsed}  eta {eta}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        let started = Instant::now();
        while !done.load(Ordering::Relaxed) {
            let t = control.sim_time();
            bar.set_position(t / NANOS_PER_SEC);
            let speed = as_secs_f64(t) / started.elapsed().as_secs_f64().max(1e-9);
            bar.set_message(format!("{speed:.1}x real time"));
            std::thread::sleep(Duration::from_millis(200));
        }
        bar.finish_and_clear();
    })
}

fn format_secs(s: f64) -> String {
    if s >= 3600.0 {
        format!("{:.2} h", s / 3600.0)
    } else if s >= 60.0 {
        format!("{:.1} min", s / 60.0)
    } else {
        format!("{s:.1} s")
    }
}
