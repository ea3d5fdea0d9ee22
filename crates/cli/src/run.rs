//! `onionlab run` and `onionlab check`.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use onionlab_engine::time::{as_secs_f64, SimTime, NANOS_PER_SEC};
use onionlab_engine::{HostId, RunControl, RunStats};
use onionlab_report::{
    peak_rss_bytes, OutputDir, ResultsOptions, ResultsWriter, RunInfo, RunSummary, WorkerRecord,
};
use onionlab_scenario::{Plan, Scenario};
use onionlab_tor::build::{build_with, BuildError};

use crate::memory::Watch;
use crate::{assemble, results, Failure, RunArgs};

/// Exit code of a run stopped by Ctrl-C (its results are written, marked partial).
pub(crate) const INTERRUPTED: u8 = 130;

/// Exit code of a run stopped at its memory limit (its results are written, marked partial).
pub(crate) const MEMORY_LIMIT: u8 = 3;

/// The share of physical memory a run may take by default: enough for the largest network
/// the machine can hold, with room left for the system, so that a run that outgrows the
/// machine stops with its results rather than swapping or being killed.
const DEFAULT_MEMORY_SHARE: f64 = 0.9;

/// Loads a scenario file or a built-in one, printing the warnings validation found (values
/// that are legal but probably not what the author meant).
pub(crate) fn load_scenario(arg: &str) -> Result<Scenario, Failure> {
    let path = Path::new(arg);
    let scenario = if path.exists() {
        onionlab_scenario::load(path).map_err(|e| Failure::input(e.to_string()))?
    } else {
        let text = onionlab_scenario::builtin_text(arg).ok_or_else(|| {
            Failure::input(format!(
                "{arg}: no such scenario file, and not a built-in scenario (built-in: {})",
                onionlab_scenario::BUILTIN_NAMES.join(", ")
            ))
        })?;
        onionlab_scenario::parse(text, &PathBuf::from(format!("builtin:{arg}.yaml")))
            .map_err(|e| Failure::input(e.to_string()))?
    };
    for warning in onionlab_scenario::warnings(&scenario) {
        eprintln!("warning: {warning}");
    }
    Ok(scenario)
}

pub(crate) fn resolve(
    scenario: &Scenario,
) -> Result<(onionlab_net::topology::Graph, Plan), Failure> {
    let graph =
        onionlab_scenario::load_graph(scenario).map_err(|e| Failure::input(e.to_string()))?;
    let plan =
        onionlab_scenario::resolve(scenario, &graph).map_err(|e| Failure::input(e.to_string()))?;
    if plan.relays_placed_anywhere > 0 {
        eprintln!(
            "note: relays.sample.place: {} of {} relays have no country in the country table or \
             no node of theirs in the graph; they sit on random nodes",
            plan.relays_placed_anywhere,
            plan.relays.len()
        );
    }
    Ok((graph, plan))
}

pub(crate) fn check(arg: &str) -> Result<(), Failure> {
    let scenario = load_scenario(arg)?;
    // `run` takes the scenario's thread count unless `--threads` replaces it, and its limit
    // depends on this machine's cores: say now what `run` would say.
    if let Some(t) = scenario.run.threads {
        thread_count(
            t as usize,
            &format!("{}: run.threads", scenario.source.display()),
        )?;
    }
    check_scenario(&scenario)
}

/// Every check a run makes before it starts (references, files, sampled or generated relays,
/// graph, paths), for `check` and `experiment --check`; prints one line saying what would run.
pub(crate) fn check_scenario(scenario: &Scenario) -> Result<(), Failure> {
    // Checking builds the network, which takes as much memory as a run's start: the default
    // limit holds here too.
    let control = RunControl::default();
    let watch = Watch::start(control.clone(), memory_limit(None)?);
    let built = (|| {
        let (graph, plan) = resolve(scenario)?;
        let network = assemble::tor_network(scenario, graph, &plan, scenario.run.seed, 1)
            .map_err(|e| Failure::input(format!("{}: {e}", scenario.source.display())))?;
        build_with(network, &control).map_err(|e| build_failure(scenario, e))?;
        Ok(plan)
    })();
    let stop = watch.finish();
    let plan = match (built, stop) {
        (Ok(plan), None) => plan,
        (_, Some(stop)) => {
            return Err(Failure {
                code: MEMORY_LIMIT,
                message: format!(
                    "{}: checking stopped while building the network: {} (a smaller network \
                     fits; `run` stops the same way)",
                    scenario.source.display(),
                    stop.describe()
                ),
            })
        }
        (Err(f), None) => return Err(f),
    };
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

/// A network that could not be built, in the scenario's terms: a graph that cannot carry the
/// hosts is the fault of `network.graph`.
fn build_failure(scenario: &Scenario, e: BuildError) -> Failure {
    let file = scenario.source.display();
    match e {
        BuildError::Graph(m) => Failure::input(format!("{file}: network.graph: {m}")),
        BuildError::Invalid(m) => Failure::input(format!("{file}: {m}")),
        // Only an interrupted control stops a build, and callers look at why first.
        BuildError::Stopped { .. } => Failure::internal(format!("{file}: {e}")),
    }
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
    if let Some(warning) = set_stop_time(scenario, text, "--stop-time")? {
        eprintln!("warning: {warning}");
    }
    Ok(())
}

/// Sets the scenario's stop time from `text`, which `what` names in messages (`--stop-time`,
/// or an experiment file's field). A stop time within the bootstrap period cuts the bootstrap
/// period to half the run, and the warning saying so is returned for the caller to show (an
/// experiment shows it once, not once per variant).
pub(crate) fn set_stop_time(
    scenario: &mut Scenario,
    text: &str,
    what: &str,
) -> Result<Option<String>, Failure> {
    let stop = onionlab_scenario::parse_duration(text)
        .map_err(|e| Failure::input(format!("{what} {text}: {e}")))?;
    if stop.0 == 0 {
        return Err(Failure::input(format!(
            "{what}: expected a positive duration"
        )));
    }
    scenario.run.stop_time = stop;
    if scenario.run.bootstrap.0 < stop.0 {
        return Ok(None);
    }
    // A short trial run of a long scenario: keep a warm-up, but inside the run.
    let cut = stop.0 / 2;
    let warning = format!(
        "{what} {} ends within the bootstrap period ({}); the bootstrap period is cut to {} \
         for this run (recorded in run.json)",
        format_secs(as_secs_f64(stop.0)),
        format_secs(as_secs_f64(scenario.run.bootstrap.0)),
        format_secs(as_secs_f64(cut)),
    );
    scenario.run.bootstrap.0 = cut;
    Ok(Some(warning))
}

/// How many worker threads a run may have per core: more only adds barrier waits, and the
/// engine's mailboxes grow with the square of the thread count.
const MAX_THREADS_PER_CORE: usize = 4;

/// What `run` does beside simulating, shared by every trial.
pub(crate) struct RunOptions {
    pub(crate) quiet: bool,
    pub(crate) report: bool,
    pub(crate) force: bool,
    pub(crate) inject_fault: Option<(HostId, SimTime)>,
    /// Managed processes write their system calls to `processes/HOST/syscalls.log`.
    pub(crate) trace_syscalls: bool,
    /// Let idle workers run other workers' hosts within a round.
    pub(crate) work_stealing: bool,
    /// Let hosts that nothing reaches within a lookahead run several rounds at a time.
    pub(crate) spans: bool,
    /// Print the summary table and the closing line; an experiment prints one line per trial
    /// instead and the comparison at the end.
    pub(crate) summary: bool,
    /// Stop the run once its resident memory passes this many bytes.
    pub(crate) max_memory: Option<u64>,
}

/// The memory limit `--max-memory` asks for: a size, `none`, or by default a share of the
/// machine's physical memory (no limit where that is unknown).
pub(crate) fn memory_limit(arg: Option<&str>) -> Result<Option<u64>, Failure> {
    let Some(text) = arg else {
        let total = onionlab_report::physical_memory_bytes();
        return Ok((total > 0).then_some((total as f64 * DEFAULT_MEMORY_SHARE) as u64));
    };
    if text.trim().eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    let bytes = onionlab_scenario::parse_size(text)
        .map_err(|e| Failure::input(format!("--max-memory: {e}")))?
        .bytes();
    if bytes == 0 {
        return Err(Failure::input(
            "--max-memory: expected a size above zero (or \"none\" for no limit), got 0",
        ));
    }
    Ok(Some(bytes))
}

pub(crate) fn run(args: RunArgs) -> Result<(), Failure> {
    let arg = args.scenario.as_deref().unwrap_or("toy");
    let mut scenario = load_scenario(arg)?;
    apply_overrides(&mut scenario, args.seed, args.stop_time.as_deref())?;
    if args.trials == 0 {
        return Err(Failure::input("--trials: expected at least 1"));
    }
    if args.trials > MAX_TRIALS {
        return Err(Failure::input(format!(
            "--trials: expected at most {MAX_TRIALS}, got {}",
            args.trials
        )));
    }
    let threads = match (args.threads, scenario.run.threads) {
        (Some(t), _) => thread_count(t, "--threads")?,
        (None, Some(t)) => thread_count(
            t as usize,
            &format!("{}: run.threads", scenario.source.display()),
        )?,
        (None, None) => onionlab_engine::default_threads(),
    };
    let inject_fault = args.inject_fault.as_deref().map(parse_fault).transpose()?;
    let max_memory = memory_limit(args.max_memory.as_deref())?;
    let out_dir = args
        .output
        .clone()
        .unwrap_or_else(|| PathBuf::from("out").join(&scenario.name));
    let mut options = RunOptions {
        quiet: args.quiet,
        report: !args.no_report,
        force: args.force,
        inject_fault,
        trace_syscalls: args.trace_syscalls,
        work_stealing: !args.no_work_stealing,
        spans: !args.no_spans,
        summary: true,
        max_memory,
    };
    if args.trials == 1 {
        run_one(&scenario, threads, &out_dir, &options)?;
        return Ok(());
    }
    // Refuse (or clear) the directory of trials as a whole before running any of them.
    let out =
        OutputDir::for_new_run(&out_dir, args.force).map_err(|e| Failure::input(e.to_string()))?;
    options.report = false;
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
        run_one(&trial, threads, &out_dir.join(&name), &options)?;
        names.push(name);
        seeds.push(trial.run.seed);
    }
    let manifest = onionlab_report::TrialsManifest {
        scenario: scenario.name.clone(),
        trials: names,
        seeds,
    };
    out.write_trials(&manifest)
        .map_err(|e| Failure::internal(e.to_string()))?;
    if !args.no_report {
        report(&out_dir, &[])?;
    }
    Ok(())
}

/// The most trials one command runs; more is a batch job's business.
pub(crate) const MAX_TRIALS: u32 = 1000;

/// Checks a requested thread count: at least one, at most [`MAX_THREADS_PER_CORE`] per core,
/// with a warning above the core count (the run is then slower than with fewer threads).
pub(crate) fn thread_count(requested: usize, what: &str) -> Result<usize, Failure> {
    let cores = onionlab_engine::default_threads();
    let max = cores * MAX_THREADS_PER_CORE;
    if requested == 0 || requested > max {
        return Err(Failure::input(format!(
            "{what}: expected 1 to {max} threads ({MAX_THREADS_PER_CORE} per core on this \
             machine's {cores} cores), got {requested}"
        )));
    }
    if requested > cores {
        eprintln!(
            "warning: {what} {requested} is more than this machine's {cores} cores; the run \
             will be slower than with {cores} (results are the same)"
        );
    }
    Ok(requested)
}

/// Parses `HOST@TIME` for `--inject-fault`.
fn parse_fault(text: &str) -> Result<(HostId, SimTime), Failure> {
    let bad = |why: &str| Failure::input(format!("--inject-fault {text}: {why}"));
    let (host, time) = text
        .split_once('@')
        .ok_or_else(|| bad("expected HOST@TIME, e.g. 12@30s"))?;
    let host = host
        .parse::<HostId>()
        .map_err(|_| bad("HOST must be a host number"))?;
    let time = onionlab_scenario::parse_duration(time).map_err(|e| bad(&e.to_string()))?;
    Ok((host, time.0))
}

/// The seed of trial `k` of a run seeded `base` (SplitMix64 of the pair), so trials differ
/// from each other and from the base run in every random choice.
pub(crate) fn trial_seed(base: u64, k: u32) -> u64 {
    let mut x = base ^ (k as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Writes the plots and report.html of a run or trials directory.
/// A report error: bad input (an unknown relay, a malformed file) exits 2, anything else 1.
fn report_failure(e: onionlab_report::ReportError) -> Failure {
    if e.is_bad_input() {
        Failure::input(e.to_string())
    } else {
        Failure::internal(e.to_string())
    }
}

/// The relays a scenario asks reports to plot over time: attack victims, then `report.relays`.
pub(crate) fn plot_relays(scenario: &Scenario) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    let wanted = scenario.attacks.iter().map(|a| &a.victim);
    for name in wanted.chain(scenario.report.relays.iter()) {
        if !names.contains(name) {
            names.push(name.clone());
        }
    }
    names
}

pub(crate) fn report(dir: &Path, relays: &[String]) -> Result<(), Failure> {
    let input = onionlab_report::load_input(dir).map_err(|e| Failure::input(e.to_string()))?;
    let options = onionlab_report::ReportOptions {
        relays: relays.to_vec(),
    };
    let files =
        onionlab_report::write_report_with(&input, dir, &options).map_err(report_failure)?;
    println!(
        "report: {} ({} files)",
        dir.join("report.html").display(),
        files.len()
    );
    Ok(())
}

/// Overlays several runs or trial sets.
pub(crate) fn compare(
    dirs: &[PathBuf],
    labels: &[String],
    out: &Path,
    relays: &[String],
) -> Result<(), Failure> {
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
        if let Some(j) = inputs.iter().position(|(l, _)| *l == label) {
            return Err(Failure::input(format!(
                "compare: {} and {} are both labelled {label:?}; every run needs its own \
                 label (give one --label per directory)",
                dirs[j].display(),
                dir.display()
            )));
        }
        inputs.push((label, input));
    }
    let options = onionlab_report::ReportOptions {
        relays: relays.to_vec(),
    };
    let table =
        onionlab_report::write_comparison_with(&inputs, out, &options).map_err(report_failure)?;
    println!("{table}");
    println!("comparison: {}", out.join("compare.html").display());
    Ok(())
}

/// Simulated time between two hand-overs of records to the output files: what a run that dies
/// without warning can lose. Fixed in simulated time, so the files' row order, like everything
/// else, does not depend on threads or machine speed.
const RECORD_EVERY: SimTime = 10 * NANOS_PER_SEC;

/// Hosts whose records are taken and written at once: a slice of a million-host network's
/// closing records (every client's open circuits) is a few MiB, where all of them at once
/// would be hundreds.
const DRAIN_HOSTS: usize = 4096;

/// `0..hosts` in slices of [`DRAIN_HOSTS`].
fn host_slices(hosts: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
    (0..hosts)
        .step_by(DRAIN_HOSTS)
        .map(move |start| start..(start + DRAIN_HOSTS).min(hosts))
}

/// Runs one simulation of `scenario` and writes its results (and report) to `out_dir`: the one
/// code path of `run`, `run --trials` and `experiment`.
pub(crate) fn run_one(
    scenario: &Scenario,
    threads: usize,
    out_dir: &Path,
    options: &RunOptions,
) -> Result<(), Failure> {
    // One handle stops the network's construction and then the run: Ctrl-C, and the memory
    // watch from before the first host is made to the end.
    let control = RunControl::default();
    watch_interrupts(&control);
    let watch = Watch::start(control.clone(), options.max_memory);
    let (graph, plan) = resolve(scenario)?;
    // Refused before the network is built, not after; made once the network stands, so that
    // a scenario refused while it is built leaves nothing behind.
    OutputDir::check_new_run(out_dir, options.force).map_err(|e| Failure::input(e.to_string()))?;
    let new_output = || {
        OutputDir::for_new_run(out_dir, options.force).map_err(|e| Failure::input(e.to_string()))
    };
    let groups: Vec<String> = plan
        .relays
        .iter()
        .map(|_| "relay".to_string())
        .chain(plan.authorities.iter().map(|a| a.group.clone()))
        .chain(plan.servers.iter().map(|s| s.group.clone()))
        .chain(plan.clients.iter().map(|c| c.host.group.clone()))
        .collect();
    let seed = scenario.run.seed;
    let stop = scenario.run.stop_time.0;
    let bootstrap = scenario.run.bootstrap.0;
    let write = |e: onionlab_report::ReportError| Failure::internal(e.to_string());
    let mut info = RunInfo {
        plot_relays: plot_relays(scenario),
        transport: None,
        directory: None,
        cpu: plan.cpu.as_ref().map(results::cpu_record),
        state: Vec::new(),
        processes: Vec::new(),
        scenario_name: scenario.name.clone(),
        scenario: serde_json::to_value(scenario).unwrap_or(serde_json::Value::Null),
        seed,
        version: env!("CARGO_PKG_VERSION").to_string(),
        commit: env!("ONIONLAB_COMMIT").to_string(),
        threads,
        sim_seconds: 0.0,
        bootstrap_seconds: as_secs_f64(bootstrap),
        wall_seconds: 0.0,
        speed: 0.0,
        events: 0,
        rounds: 0,
        events_per_sec: 0.0,
        peak_rss_bytes: 0,
        workers: Vec::new(),
        spans: Vec::new(),
        complete: false,
        mode: "simulation".into(),
        progress: Vec::new(),
        emulation: None,
        // Stays on disk only if the process dies before it can say anything better.
        interrupted_reason: Some(
            "the run did not finish: the process ended before writing its final results \
             (the CSV files hold what was measured until then)"
                .into(),
        ),
    };
    let mut network = assemble::tor_network(scenario, graph, &plan, seed, threads)
        .map_err(|e| Failure::input(format!("{}: {e}", scenario.source.display())))?;
    assemble::set_process_dirs(&mut network, out_dir, &process_shim(out_dir), &control)
        .map(|()| assemble::trace_processes(&mut network, options.trace_syscalls))
        .map_err(|e| Failure::input(format!("{}: {e}", out_dir.display())))?;
    let hosts_file = assemble::process_hosts_file(&network);
    let hosts = network.hosts.len();
    let built = if control.is_interrupted() {
        Err(BuildError::Stopped {
            built: 0,
            of: hosts,
        })
    } else {
        build_with(network, &control)
    };
    let (mut sim, world) = match built {
        Ok(built) => built,
        Err(BuildError::Stopped { built, of }) => {
            // Nothing was simulated; run.json says why, as for a run stopped later.
            let why = match watch.finish() {
                Some(stop) => (MEMORY_LIMIT, stop.describe()),
                None => (
                    INTERRUPTED,
                    "interrupted (Ctrl-C, SIGTERM or SIGHUP)".into(),
                ),
            };
            let out = new_output()?;
            info.peak_rss_bytes = peak_rss_bytes();
            info.interrupted_reason = Some(format!(
                "stopped while building the network ({built} of {of} hosts made, nothing \
                 simulated): {}",
                why.1
            ));
            out.write_run(&info).map_err(write)?;
            let summary = RunSummary::new(bootstrap / NANOS_PER_SEC + 1).render(false);
            out.write_summary(&summary).map_err(write)?;
            return Err(Failure {
                code: why.0,
                message: format!(
                    "{}; {} is marked partial (a smaller network or a higher limit fits)",
                    info.interrupted_reason.as_deref().unwrap_or_default(),
                    out_dir.display()
                ),
            });
        }
        Err(e) => return Err(build_failure(scenario, e)),
    };
    let out = new_output()?;
    if !plan.processes.is_empty() {
        let dir = out_dir.join("processes");
        std::fs::create_dir_all(&dir)
            .and_then(|()| onionlab_process::install_shim(&dir).map(drop))
            .and_then(|()| std::fs::write(dir.join("hosts"), &hosts_file))
            .map_err(|e| Failure::internal(format!("{}: {e}", dir.display())))?;
    }
    if let Some((host, at)) = options.inject_fault {
        if host as usize >= sim.host_count() {
            return Err(Failure::input(format!(
                "--inject-fault: host {host} does not exist (the run has {} hosts)",
                sim.host_count()
            )));
        }
        onionlab_tor::inject_fault(&mut sim, host, at);
    }
    sim.set_work_stealing(options.work_stealing);
    if !options.spans {
        // Declaring every host reachable at once gives every host span 1.
        sim.set_min_delays(&vec![0; sim.host_count()]);
    }

    out.write_run(&info).map_err(write)?;
    let uploads = scenario
        .clients
        .iter()
        .any(|g| matches!(g.workload, onionlab_scenario::Workload::Upload(_)));
    let options_out = ResultsOptions {
        uploads,
        cpu: plan.cpu.is_some(),
    };
    let mut sink = ResultsWriter::create_with(&out, options_out).map_err(write)?;

    let done = Arc::new(AtomicBool::new(false));
    let progress = spawn_progress(control.clone(), stop, done.clone(), !options.quiet);
    let started = Instant::now();
    let mut is_relay = vec![false; sim.host_count()];
    for &h in &world.relay_hosts {
        is_relay[h as usize] = true;
    }
    // What the summary needs; the records themselves go to the files and are dropped.
    let mut collected = RunSummary::new(bootstrap / NANOS_PER_SEC + 1);
    let mut totals = RunStats::default();
    let mut failure = None;
    let mut reached: SimTime = 0;
    loop {
        // The last leg runs through `stop` itself, so that what happens at exactly the stop
        // time (the relays' sample of the final second) is part of the run.
        let leg_end = reached
            .saturating_add(RECORD_EVERY)
            .min(stop.saturating_add(1));
        let outcome = catch_unwind(AssertUnwindSafe(|| sim.run_until(leg_end)));
        let stats = match outcome {
            Ok(stats) => stats,
            Err(panic) => {
                let what = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "unknown panic".into());
                failure = Some(format!("internal error in the model: {what}"));
                reached = control.sim_time().max(reached);
                break;
            }
        };
        add_stats(&mut totals, &stats);
        reached = stats.sim_time;
        let last = stats.interrupted || reached >= leg_end && leg_end > stop;
        for hosts in host_slices(sim.host_count()) {
            let batch = results::drain(&mut sim, &world, &groups, bootstrap, last, hosts);
            sink.append(&batch.downloads, &batch.relays, &batch.circuits)
                .map_err(write)?;
            collected.add(&batch.downloads, &batch.relays);
        }
        let wall = started.elapsed().as_secs_f64();
        info.state
            .push(results::state(&sim, &is_relay, wall, totals.events));
        if last {
            break;
        }
        // Still marked unfinished: a run killed later keeps the state series, and how far it
        // got at what cost, so far.
        record_totals(&mut info, &totals, reached.min(stop), wall);
        out.write_run(&info).map_err(write)?;
    }
    if failure.is_some() {
        // What the hosts recorded before the failure is still worth having; their state may
        // be inconsistent, so only finished records are taken, not the circuits still open.
        for hosts in host_slices(sim.host_count()) {
            let batch = results::drain(&mut sim, &world, &groups, bootstrap, false, hosts);
            sink.append(&batch.downloads, &batch.relays, &batch.circuits)
                .map_err(write)?;
            collected.add(&batch.downloads, &batch.relays);
        }
    }
    drop(sink);
    done.store(true, Ordering::Relaxed);
    let progress = progress.join().unwrap_or_default();
    let memory_stop = watch.finish();
    let wall = started.elapsed().as_secs_f64();
    let sim_time = reached.min(stop);
    let interrupted = totals.interrupted;
    let complete = failure.is_none() && !interrupted;
    record_totals(&mut info, &totals, sim_time, wall);
    if failure.is_none() {
        info.transport = Some(results::transport(&sim, &world));
        info.directory = results::directory(&sim, &world);
    }
    info.processes = results::processes(&sim, &world);
    for line in results::process_log(&info.processes) {
        eprintln!("{line}");
    }
    info.spans = sim.span_counts().to_vec();
    info.complete = complete;
    info.progress = progress;
    let memory_stop = memory_stop.filter(|_| interrupted && !interrupt_requested());
    info.interrupted_reason = match memory_stop {
        Some(stop) => Some(format!(
            "stopped at {} simulated: {}",
            format_secs(as_secs_f64(sim_time)),
            stop.describe()
        )),
        None if interrupted => Some(format!(
            "interrupted (Ctrl-C, SIGTERM or SIGHUP) at {} simulated",
            format_secs(as_secs_f64(sim_time))
        )),
        None => failure.clone(),
    };
    out.write_run(&info).map_err(write)?;
    let summary = collected.render(complete);
    out.write_summary(&summary).map_err(write)?;
    if options.summary {
        println!("{summary}");
        println!(
            "{} simulated in {:.1} s ({:.1}x real time, {} events, {} threads); results in {}",
            format_secs(info.sim_seconds),
            wall,
            info.speed,
            info.events,
            threads,
            out_dir.display()
        );
    }
    if options.report && memory_stop.is_some() {
        // Plots of a network too large for the machine would take memory it does not have.
        eprintln!(
            "note: no report for a run stopped for its memory; `onionlab report {}` makes it",
            out_dir.display()
        );
    } else if options.report {
        // A report that cannot be made does not lose the results already written.
        if let Err(e) = report(out_dir, &[]) {
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
    if let Some(stop) = memory_stop {
        return Err(Failure {
            code: MEMORY_LIMIT,
            message: format!(
                "{}: results up to {} are in {}, marked partial (a smaller network, a shorter \
                 run or a higher limit fits)",
                stop.describe(),
                format_secs(info.sim_seconds),
                out_dir.display()
            ),
        });
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

/// Where a run in `out_dir` puts the shim its managed processes load
/// (`onionlab_process::install_shim` writes it there).
fn process_shim(out_dir: &Path) -> std::path::PathBuf {
    out_dir.join("processes").join("libonionlab-shim.so")
}

/// The run that Ctrl-C, SIGTERM and SIGHUP stop. The handler can be installed only once per
/// process, but `run --trials` and `experiment` run one simulation after another, so it stops
/// whichever is current.
static CURRENT_RUN: Mutex<Option<RunControl>> = Mutex::new(None);

/// Set by the handler, so that a command running several simulations does not start another
/// after an interrupt that came between two of them.
static INTERRUPT_REQUESTED: AtomicBool = AtomicBool::new(false);

/// Makes Ctrl-C, SIGTERM and SIGHUP (what `timeout`, `kill` and batch schedulers send) stop
/// `control`'s run at the next round boundary.
fn watch_interrupts(control: &RunControl) {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        // Installing fails only when something else in the process took the signals; the run
        // then simply cannot be interrupted, which is not worth failing for.
        let _ = ctrlc::set_handler(|| {
            INTERRUPT_REQUESTED.store(true, Ordering::Relaxed);
            let current = CURRENT_RUN.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(control) = current.as_ref() {
                control.interrupt();
            }
        });
    });
    let mut current = CURRENT_RUN.lock().unwrap_or_else(|e| e.into_inner());
    *current = Some(control.clone());
    if INTERRUPT_REQUESTED.load(Ordering::Relaxed) {
        control.interrupt();
    }
}

/// Whether Ctrl-C, SIGTERM or SIGHUP has come since the first run of this process started.
pub(crate) fn interrupt_requested() -> bool {
    INTERRUPT_REQUESTED.load(Ordering::Relaxed)
}

/// Puts the run's totals so far in `info`: its simulated and wall time, events, memory and
/// workers. Written after every leg as well as at the end, so that the run.json of a run
/// killed outright (SIGKILL, the machine going away) still says how far it got and at what
/// cost.
fn record_totals(info: &mut RunInfo, totals: &RunStats, sim_time: SimTime, wall: f64) {
    info.sim_seconds = as_secs_f64(sim_time);
    info.wall_seconds = wall;
    info.speed = as_secs_f64(sim_time) / wall.max(1e-9);
    info.events = totals.events;
    info.rounds = totals.rounds;
    info.events_per_sec = totals.events as f64 / wall.max(1e-9);
    info.peak_rss_bytes = peak_rss_bytes();
    info.workers = totals
        .workers
        .iter()
        .map(|w| WorkerRecord {
            hosts: w.hosts,
            events: w.events,
            busy_s: w.busy.as_secs_f64(),
            blocked_s: w.blocked.as_secs_f64(),
            stolen: w.stolen,
            runs: w.runs,
        })
        .collect();
}

/// Adds one leg of a run to the totals so far.
fn add_stats(totals: &mut RunStats, leg: &RunStats) {
    totals.events += leg.events;
    totals.rounds += leg.rounds;
    totals.messages += leg.messages;
    totals.late_messages += leg.late_messages;
    totals.wall += leg.wall;
    totals.sim_time = leg.sim_time;
    totals.interrupted |= leg.interrupted;
    if totals.workers.len() < leg.workers.len() {
        totals
            .workers
            .resize_with(leg.workers.len(), Default::default);
    }
    for (t, w) in totals.workers.iter_mut().zip(&leg.workers) {
        t.hosts = w.hosts;
        t.events += w.events;
        t.busy += w.busy;
        t.blocked += w.blocked;
        t.stolen += w.stolen;
        t.runs += w.runs;
    }
}

/// What the progress thread saw: (wall seconds, simulated seconds) once a second.
type Progress = Vec<(f64, f64)>;

/// Samples (wall seconds, simulated seconds) once a second for the run's diagnostics and
/// draws the progress bar when `draw` is set.
fn spawn_progress(
    control: RunControl,
    stop: u64,
    done: Arc<AtomicBool>,
    draw: bool,
) -> std::thread::JoinHandle<Progress> {
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
