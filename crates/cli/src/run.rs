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
pub(crate) const INTERRUPTED: u8 = 130;

pub(crate) fn load_scenario(arg: &str) -> Result<Scenario, Failure> {
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

pub(crate) fn resolve(
    scenario: &Scenario,
) -> Result<(onionlab_net::topology::Graph, Plan), Failure> {
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

/// Applies `--seed` and `--stop-time` to a loaded scenario (shared by `run` and `emulate`).
pub(crate) fn apply_overrides(
    scenario: &mut Scenario,
    seed: Option<u64>,
    stop_time: Option<&str>,
) -> Result<(), Failure> {
    if let Some(seed) = seed {
        scenario.run.seed = seed;
    }
    let Some(text) = stop_time else {
        return Ok(());
    };
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
    Ok(())
}

pub fn run(args: RunArgs) -> Result<(), Failure> {
    let arg = args.scenario.as_deref().unwrap_or("toy");
    let mut scenario = load_scenario(arg)?;
    apply_overrides(&mut scenario, args.seed, args.stop_time.as_deref())?;
    if args.threads == Some(0) {
        return Err(Failure::input("--threads: expected at least 1"));
    }
    if args.trials == 0 {
        return Err(Failure::input("--trials: expected at least 1"));
    }
    let threads = args
        .threads
        .or(scenario.run.threads.map(|t| t as usize))
        .unwrap_or_else(onionlab_engine::default_threads)
        .max(1);
    let out_dir = args
        .output
        .clone()
        .unwrap_or_else(|| PathBuf::from("out").join(&scenario.name));
    if args.trials == 1 {
        run_one(&scenario, threads, &out_dir, args.quiet, !args.no_report)?;
        return Ok(());
    }
    // Repeated trials: each with its own seed (and so its own sampled network, client
    // placement and randomness), in its own subdirectory.
    let base = scenario.run.seed;
    let mut names = Vec::new();
    let mut seeds = Vec::new();
    for k in 1..=args.trials {
        let mut trial = scenario.clone();
        trial.run.seed = trial_seed(base, k);
        let name = format!("trial-{k}");
        println!("trial {k} of {} (seed {})", args.trials, trial.run.seed);
        run_one(&trial, threads, &out_dir.join(&name), args.quiet, false)?;
        names.push(name);
        seeds.push(trial.run.seed);
    }
    let manifest = onionlab_report::TrialsManifest {
        scenario: scenario.name.clone(),
        trials: names,
        seeds,
    };
    OutputDir::create(&out_dir)
        .and_then(|out| out.write_trials(&manifest))
        .map_err(|e| Failure::internal(e.to_string()))?;
    if !args.no_report {
        report(&out_dir)?;
    }
    Ok(())
}

/// The seed of trial `k` of a run seeded `base` (SplitMix64 of the pair), so trials differ
/// from each other and from the base run in every random choice.
fn trial_seed(base: u64, k: u32) -> u64 {
    let mut x = base ^ (k as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Writes the plots and report.html of a run or trials directory.
pub fn report(dir: &Path) -> Result<(), Failure> {
    let input = onionlab_report::load_input(dir).map_err(|e| Failure::input(e.to_string()))?;
    let files =
        onionlab_report::write_report(&input, dir).map_err(|e| Failure::internal(e.to_string()))?;
    println!(
        "report: {} ({} files)",
        dir.join("report.html").display(),
        files.len()
    );
    Ok(())
}

/// Overlays several runs or trial sets.
pub fn compare(dirs: &[PathBuf], labels: &[String], out: &Path) -> Result<(), Failure> {
    if dirs.len() < 2 {
        return Err(Failure::input("compare: give at least two run directories"));
    }
    if !labels.is_empty() && labels.len() != dirs.len() {
        return Err(Failure::input(format!(
            "compare: {} labels for {} directories; give one --label per directory or none",
            labels.len(),
            dirs.len()
        )));
    }
    let mut inputs = Vec::new();
    for (i, dir) in dirs.iter().enumerate() {
        let input = onionlab_report::load_input(dir).map_err(|e| Failure::input(e.to_string()))?;
        let label = labels.get(i).cloned().unwrap_or_else(|| input.label());
        inputs.push((label, input));
    }
    let table = onionlab_report::write_comparison(&inputs, out)
        .map_err(|e| Failure::internal(e.to_string()))?;
    println!("{table}");
    println!("comparison: {}", out.join("compare.html").display());
    Ok(())
}

/// Runs one simulation of `scenario` and writes its results (and report) to `out_dir`.
fn run_one(
    scenario: &Scenario,
    threads: usize,
    out_dir: &Path,
    quiet: bool,
    with_report: bool,
) -> Result<(), Failure> {
    let (graph, plan) = resolve(scenario)?;
    let groups: Vec<String> = plan
        .relays
        .iter()
        .map(|_| "relay".to_string())
        .chain(plan.authorities.iter().map(|a| a.group.clone()))
        .chain(plan.servers.iter().map(|s| s.group.clone()))
        .chain(plan.clients.iter().map(|c| c.host.group.clone()))
        .collect();
    let seed = scenario.run.seed;
    let network = assemble::tor_network(scenario, graph, &plan, seed, threads)
        .map_err(|e| Failure::input(format!("{}: {e}", scenario.source.display())))?;
    let (mut sim, world) = build(network)
        .map_err(|e| Failure::input(format!("{}: {e}", scenario.source.display())))?;
    let out = OutputDir::create(out_dir).map_err(|e| Failure::input(e.to_string()))?;

    let stop = scenario.run.stop_time.0;
    let control = sim.control();
    let handler = control.clone();
    // A second handler cannot be installed (e.g. in tests that call run twice); the run then
    // simply cannot be interrupted, which is not worth failing for.
    let _ = ctrlc::set_handler(move || handler.interrupt());
    let done = Arc::new(AtomicBool::new(false));
    let progress = spawn_progress(control.clone(), stop, done.clone(), !quiet);
    let started = Instant::now();
    let outcome = catch_unwind(AssertUnwindSafe(|| sim.run_until(stop)));
    done.store(true, Ordering::Relaxed);
    let progress = progress.join().unwrap_or_default();
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
        scenario: serde_json::to_value(scenario).unwrap_or(serde_json::Value::Null),
        seed,
        version: env!("CARGO_PKG_VERSION").to_string(),
        commit: env!("ONIONLAB_COMMIT").to_string(),
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
        progress,
        emulation: None,
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
    if with_report {
        // A report that cannot be made does not lose the results already written.
        if let Err(e) = report(out_dir) {
            eprintln!("warning: no report: {}", e.message);
        }
    }
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

/// Samples (wall seconds, simulated seconds) once a second for the run's diagnostics, and draws
/// the progress bar when `draw` is set.
fn spawn_progress(
    control: RunControl,
    stop: u64,
    done: Arc<AtomicBool>,
    draw: bool,
) -> std::thread::JoinHandle<Vec<(f64, f64)>> {
    std::thread::spawn(move || {
        let bar = if draw {
            ProgressBar::new(stop / NANOS_PER_SEC)
        } else {
            ProgressBar::hidden()
        };
        bar.set_style(
            ProgressStyle::with_template(
                "{bar:40} {pos}/{len} simulated s  {msg}  elapsed {elapsed}  eta {eta}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        let started = Instant::now();
        let mut samples = vec![(0.0, 0.0)];
        let mut next_sample = 1.0;
        while !done.load(Ordering::Relaxed) {
            let t = control.sim_time();
            let wall = started.elapsed().as_secs_f64();
            if wall >= next_sample {
                samples.push((wall, as_secs_f64(t)));
                next_sample += 1.0;
            }
            bar.set_position(t / NANOS_PER_SEC);
            bar.set_message(format!("{:.1}x real time", as_secs_f64(t) / wall.max(1e-9)));
            std::thread::sleep(Duration::from_millis(100));
        }
        samples.push((
            started.elapsed().as_secs_f64(),
            as_secs_f64(control.sim_time()),
        ));
        bar.finish_and_clear();
        samples
    })
}

pub(crate) fn format_secs(s: f64) -> String {
    if s >= 3600.0 {
        format!("{:.2} h", s / 3600.0)
    } else if s >= 60.0 {
        format!("{:.1} min", s / 60.0)
    } else {
        format!("{s:.1} s")
    }
}
