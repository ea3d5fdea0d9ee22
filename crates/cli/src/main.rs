//! The `onionlab` command.
//!
//! This crate is onionlab's front end: the binary a researcher runs. Its subcommands are `run`
//! and `check` (a scenario), `report` and `compare` (plots and pages from run directories),
//! `experiment` and `reproduce` (variants of a scenario as repeated trials), `emulate` (the
//! scenario with real tor), `generate` (a scenario from a real consensus) and `calibrate` (this
//! machine's unit costs). The book under `docs/` is the user guide; `README.md` has a
//! five-minute tour.
//!
//! Exit codes: 0 when the command did what was asked, 2 for bad input (scenario, flags, files),
//! 1 for an internal failure (results gathered so far are still written, marked partial).
//!
//! # Overview
//!
//! `run` resolves the scenario (`onionlab-scenario`), builds the simulation's hosts from its
//! plan (`assemble`), runs it on the engine and writes what the hosts recorded as output files
//! (`results`, with `onionlab-report`). `experiment` reads experiment files
//! (`examples/experiments/`), runs each variant's trials and compares them; `generate` writes
//! the scenario of a network sampled from a consensus at a fraction of its size.
//!
//! # Not in this crate
//!
//! No model lives here: Tor is `onionlab-tor` (over `onionlab-torcore`), the Internet
//! `onionlab-net`, the engine `onionlab-engine`, reports `onionlab-report`, emulation
//! `onionlab-emulate` and measuring unit costs `onionlab-calibrate`. This crate parses
//! arguments, wires those together and decides what reaches the terminal.
//!
//! # Tests
//!
//! The command is tested as users and scripts use it, by running the built binary:
//! `tests/cli.rs` (runs, checks, exit codes, partial results), `tests/report.rs` (reports,
//! comparisons, trials; the page rendered in headless Chromium where installed),
//! `tests/experiment.rs` (experiments and reproductions), `tests/calibrate.rs`,
//! `tests/emulate.rs` (real tor in namespaces; needs root and Debian's tor, else skipped with
//! a notice outside CI) and `tests/fuzz.rs` (the parsers and `check` then `run` on mutated
//! inputs, with its harness and regression cases in `tests/fuzz/`). `tests/docs.rs` checks the
//! README and the book, and `tests/rustdoc.rs` that `cargo doc --workspace --no-deps` builds
//! without a warning. Unit tests sit in `main.rs` and `generate`.

// The doc comments of the command's arguments are also its `--help` text, where a placeholder
// such as `<scenario name>` is meant to be read as written, not as an HTML tag; Markdown
// escapes would show up in the help.
#![allow(rustdoc::invalid_html_tags)]

mod assemble;
mod calibrate;
mod emulate;
mod experiment;
mod generate;
mod live;
mod memory;
mod results;
mod run;
mod slurm;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// mimalloc rather than the system allocator: a large network's state is millions of
/// connections, circuits and queues made and freed over the run, and mimalloc keeps objects
/// of one size together on their own pages. Wrapped to keep a reserve for when an allocation
/// fails (see `memory`).
#[global_allocator]
static ALLOCATOR: memory::Allocator = memory::Allocator;

/// mimalloc's `mi_option_purge_delay`: its place in mimalloc 2's and 3's `mi_option_e`, for
/// which `libmimalloc-sys` names no constant (a test checks it against the option's default).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Tells mimalloc to keep the memory the run frees instead of handing it back to the kernel
/// a second later. A simulation's heap is flat once its network has warmed up, but circuits,
/// streams and queues are freed and made all the time; memory handed back and taken again
/// comes back as fresh huge pages that the kernel clears, 2 MiB at a time (2.5–2.9% of a
/// profile of `examples/web-6876.yaml`; keeping the memory made that run about 1.7% faster in
/// paired runs). Resident memory then stays at the heap's high-water mark.
/// `MIMALLOC_PURGE_DELAY` in the environment still decides, when set.
fn keep_freed_memory() {
    // SAFETY: sets an option's value (unless the environment set it), which mimalloc reads
    // whenever it considers purging; any thread may do so at any time.
    unsafe { libmimalloc_sys::mi_option_set_default(MI_OPTION_PURGE_DELAY, -1) };
}

/// The version `--version` prints: the crate version and the commit built from (with
/// `-modified` when tracked files differed from it), also recorded in `run.json`.
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("ONIONLAB_COMMIT"),
    ")"
);

#[derive(Parser)]
#[command(
    name = "onionlab",
    version = VERSION,
    about = "Simulate a Tor network and measure what its users experience"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a scenario (default: the built-in toy network) and write its results.
    Run(RunArgs),
    /// Run a small scenario with real tor processes in network namespaces (needs root and
    /// Debian's tor); writes the same files as `run`, marked `mode: emulation`.
    Emulate(emulate::EmulateArgs),
    /// Validate a scenario without running it.
    Check {
        /// Scenario file, or the name of a built-in scenario (toy, small, large, consensus-2023).
        scenario: String,
    },
    /// Write plots and report.html for a run (or a directory of trials).
    Report {
        /// A run directory (or a directory of trials made by `run --trials`).
        dir: PathBuf,
        /// Also plot this relay's throughput and sockets over time (repeatable; relays the
        /// scenario names, such as attack victims, are plotted anyway).
        #[arg(long, value_name = "NAME")]
        relay: Vec<String>,
    },
    /// Run an experiment: variants of one scenario, K trials each, compared in one report;
    /// trials finished earlier for the same scenario are kept.
    Experiment(experiment::ExperimentArgs),
    /// Run a named experiment shipped with onionlab that reproduces a result (see --list).
    Reproduce(experiment::ReproduceArgs),
    /// Overlay several runs (or sets of trials) in one report, with a table of changes.
    Compare {
        /// Run or trials directories; the first is the baseline.
        dirs: Vec<PathBuf>,
        /// Output directory (default: out/compare).
        #[arg(short, long, default_value = "out/compare")]
        output: PathBuf,
        /// A label for each directory, in order (default: the scenario names).
        #[arg(long)]
        label: Vec<String>,
        /// Also overlay this relay's throughput and sockets over time (repeatable).
        #[arg(long, value_name = "NAME")]
        relay: Vec<String>,
    },
    /// Measure this machine's unit costs of a relay's work (system calls, kernel packets,
    /// TLS, AES, SHA-1, ntor) and write them as a calibration file for scenarios.
    Calibrate(calibrate::CalibrateArgs),
    /// Write the scenario of a Tor network at a fraction of a real consensus's relays, with
    /// the live network's load (or a multiple of it) and OnionPerf-like measurement clients.
    Generate(generate::GenerateArgs),
}

#[derive(clap::Args)]
pub(crate) struct RunArgs {
    /// Scenario file, or the name of a built-in scenario; default: toy.
    pub scenario: Option<String>,
    /// Output directory (default: out/<scenario name>).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Seed; overrides the scenario's run.seed.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Worker threads; overrides the scenario's run.threads (default: the machine's cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Simulated time to stop at (e.g. 10m, 90s, 1h); overrides the scenario's run.stop_time.
    #[arg(long)]
    pub stop_time: Option<String>,
    /// Keep every worker to its own hosts (no work stealing); results are the same, only the
    /// wall time differs. For measuring what stealing gains.
    #[arg(long)]
    pub no_work_stealing: bool,
    /// Run every host round by round, also those that nothing reaches within a lookahead
    /// (which otherwise run up to eight rounds at a time); results are the same, only the
    /// wall time differs. For measuring what spans gain.
    #[arg(long)]
    pub no_spans: bool,
    /// Stop the run, keeping its results (marked partial), once the process's resident
    /// memory passes SIZE (e.g. "20 GiB"), instead of letting the machine swap or its
    /// out-of-memory killer end it; "none" for no limit. Default: 90% of this machine's
    /// physical memory.
    #[arg(long, value_name = "SIZE")]
    pub max_memory: Option<String>,
    /// Do not draw the progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Run the scenario this many times with derived seeds (and freshly sampled networks),
    /// in subdirectories trial-1, trial-2, ...
    #[arg(long, default_value_t = 1)]
    pub trials: u32,
    /// Do not write plots and report.html at the end.
    #[arg(long)]
    pub no_report: bool,
    /// Replace the results of an earlier run in the output directory (without it, a directory
    /// holding run.json or trials.json is refused).
    #[arg(long)]
    pub force: bool,
    /// For testing the partial-results path: make host HOST's model panic at simulated time
    /// TIME, written HOST@TIME (e.g. 12@30s).
    #[arg(long, hide = true, value_name = "HOST@TIME")]
    pub inject_fault: Option<String>,
    /// Write every system call each managed process makes to onionlab, with its simulated
    /// times and result, to processes/HOST/syscalls.log (for debugging and determinism checks).
    #[arg(long)]
    pub trace_syscalls: bool,
}

/// An error with the exit code it deserves.
pub(crate) struct Failure {
    /// The process's exit status: 2 for bad input, 1 for an internal failure.
    pub(crate) code: u8,
    /// What went wrong, printed after `error: `.
    pub(crate) message: String,
}

impl Failure {
    /// A problem with what the user gave (scenario, flags, files): exit status 2.
    pub(crate) fn input(message: impl Into<String>) -> Self {
        Failure {
            code: 2,
            message: message.into(),
        }
    }

    /// A failure once the input was accepted (a file it cannot write, a run that stopped):
    /// exit status 1.
    pub(crate) fn internal(message: impl Into<String>) -> Self {
        Failure {
            code: 1,
            message: message.into(),
        }
    }
}

fn main() -> ExitCode {
    keep_freed_memory();
    memory::keep_reserve();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let result = match cli.command {
        Command::Run(args) => run::run(args),
        Command::Emulate(args) => emulate::emulate(args),
        Command::Check { scenario } => run::check(&scenario),
        Command::Experiment(args) => experiment::experiment(args),
        Command::Reproduce(args) => experiment::reproduce(args),
        Command::Report { dir, relay } => run::report(&dir, &relay),
        Command::Compare {
            dirs,
            output,
            label,
            relay,
        } => run::compare(&dirs, &label, &output, &relay),
        Command::Calibrate(args) => calibrate::calibrate(args),
        Command::Generate(args) => generate::generate(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("error: {}", f.message);
            ExitCode::from(f.code)
        }
    }
}

#[cfg(test)]
mod allocator_tests {
    use super::*;

    /// The option `keep_freed_memory` sets is the purge delay: in the mimalloc built here it
    /// starts at its default, one second (no other option near it has that default).
    #[test]
    fn the_option_set_to_keep_freed_memory_is_the_purge_delay() {
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
            return;
        }
        // SAFETY: reads an option.
        let delay = unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
        assert_eq!(
            delay, 1000,
            "option {MI_OPTION_PURGE_DELAY} is not the purge delay"
        );
    }
}
