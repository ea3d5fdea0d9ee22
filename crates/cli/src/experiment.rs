//! `onionlab experiment` and `onionlab reproduce`: variants of one scenario, K trials each,
//! compared in one report.
//!
//! Comparing designs by hand means one scenario file per design, `run --trials` per file and a
//! `compare` at the end; the copies drift apart, a forgotten trial skews the comparison, and a
//! run stopped halfway starts again from nothing. An experiment file names the base scenario
//! once and each variant only by what it changes, and the command keeps every trial it
//! already finished for the same scenario, so a stopped or extended experiment resumes where
//! it was.

use std::fmt;
use std::fs;
use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::time::Instant;

use onionlab_data::clip;
use onionlab_report::{
    IndexEntry, OutputDir, Sweep, SweepMetric, SweepPoint, TrialsManifest, CIRCUITS_CSV,
    DOWNLOADS_CSV, RELAYS_CSV, RUN_JSON,
};
use onionlab_scenario::Scenario;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::run::{
    check_scenario, interrupt_requested, memory_limit, run_one, set_stop_time, thread_count,
    trial_seed, RunOptions, INTERRUPTED, MAX_TRIALS,
};
use crate::slurm::{self, Invocation, SlurmOptions, Task};
use crate::Failure;

/// The largest experiment file: a few dozen lines in practice, so a bigger file is a mistake
/// (a scenario or a data file given in its place).
const MAX_EXPERIMENT_BYTES: u64 = 1 << 20;

/// The most variants one experiment compares: each is a curve in every plot and a column of
/// the comparison, which stop being readable long before this.
const MAX_VARIANTS: usize = 64;

/// The most overrides one variant sets: a variant changes a few settings of the base scenario;
/// one that changes hundreds is a different scenario and belongs in its own file.
const MAX_OVERRIDES: usize = 256;

/// The longest experiment or variant name; they name folders.
const MAX_NAME_LEN: usize = onionlab_scenario::limits::MAX_NAME_LEN;

/// Where the comparison of the variants goes, inside the experiment's output directory; no
/// variant may take this name.
const COMPARE_DIR: &str = "compare";

/// The experiment's own record, beside the variants' folders.
const EXPERIMENT_JSON: &str = "experiment.json";

#[derive(clap::Args)]
pub(crate) struct ExperimentArgs {
    /// Experiment file (YAML): a base scenario and the variants of it to compare.
    pub file: PathBuf,
    /// Output directory (default: the file's `output:`, or out/<experiment name>).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub options: ExperimentOptions,
    /// The command the comparison job of a Slurm submission runs, where it is not this
    /// experiment's (`reproduce live-network` writes its page after the comparison).
    #[arg(skip)]
    pub compare_command: Option<Vec<String>>,
}

#[derive(clap::Args)]
pub(crate) struct ReproduceArgs {
    /// The reproduction to run; `--list` shows them.
    #[arg(required_unless_present = "list")]
    pub name: Option<String>,
    /// List the reproductions and the experiment files each runs.
    #[arg(long, conflicts_with = "name")]
    pub list: bool,
    /// Output directory, with one subdirectory per experiment (default: out/reproduce-<NAME>).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// live-network only: the fraction of the consensus's relays each generated network
    /// keeps, 0 < F <= 1 (default 0.1; 1 is the whole network).
    #[arg(long, value_name = "F")]
    pub scale: Option<f64>,
    /// live-network only: run only these of its variants, comma-separated (as-generated,
    /// internet-2018, vegas, random-placement, token-bucket; default: all five).
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub variants: Option<Vec<String>>,
    #[command(flatten)]
    pub options: ExperimentOptions,
}

/// The flags `experiment` and `reproduce` share.
#[derive(clap::Args)]
pub(crate) struct ExperimentOptions {
    /// Worker threads per run; overrides the scenario's run.threads (default: the machine's
    /// cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Do not draw the progress bar (the line per trial is still printed).
    #[arg(long)]
    pub quiet: bool,
    /// Trials per variant; overrides the file's `trials:`.
    #[arg(long)]
    pub trials: Option<u32>,
    /// Simulated time to stop every run at (e.g. 10m); overrides the file's `stop_time:`.
    #[arg(long)]
    pub stop_time: Option<String>,
    /// Validate the experiment and every variant completely, as `onionlab check` does, without
    /// running anything.
    #[arg(long)]
    pub check: bool,
    #[command(flatten)]
    pub cluster: SlurmOptions,
}

/// Runs the experiment in `args.file`.
pub(crate) fn experiment(args: ExperimentArgs) -> Result<(), Failure> {
    let file = &args.file;
    let shown = file.display().to_string();
    let text = read_experiment(file)?;
    let stem = file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let experiment = parse_experiment(&text, &shown, &stem, |s| scenario_on_disk(file, s))?;
    let out = args
        .output
        .clone()
        .or_else(|| experiment.output.clone())
        .unwrap_or_else(|| PathBuf::from("out").join(&experiment.name));
    let plan = plan(&experiment, &args.options, threads_flag(&args.options)?)?;
    if args.options.check {
        check_output(&out)?;
        return check_plan(&plan);
    }
    if args.options.cluster.any() {
        let command = vec![
            "experiment".to_string(),
            absolute(file)?.display().to_string(),
        ];
        let compare = args
            .compare_command
            .clone()
            .unwrap_or_else(|| command.clone());
        return cluster(
            &[(plan, out.clone())],
            &out,
            command,
            compare,
            &args.options,
        );
    }
    execute(&plan, &out, &args.options, Mode::Run)
}

/// `path` from the root, as commands run elsewhere (a cluster's nodes) must name it.
fn absolute(path: &Path) -> Result<PathBuf, Failure> {
    std::path::absolute(path).map_err(|e| {
        Failure::input(format!(
            "{}: cannot tell its full path: {}",
            path.display(),
            onionlab_data::io_words(&e)
        ))
    })
}

/// Runs every experiment of the reproduction `args.name`, or lists the reproductions.
pub(crate) fn reproduce(args: ReproduceArgs) -> Result<(), Failure> {
    if args.list {
        print!("{}", reproduction_list());
        return Ok(());
    }
    let name = args.name.as_deref().unwrap_or_default();
    if name == crate::live::NAME {
        return crate::live::reproduce(args);
    }
    for (flag, given) in [
        ("--scale", args.scale.is_some()),
        ("--variants", args.variants.is_some()),
    ] {
        if given {
            return Err(Failure::input(format!(
                "{flag}: only `reproduce {}` takes it",
                crate::live::NAME
            )));
        }
    }
    let entry = REPRODUCTIONS
        .iter()
        .find(|r| r.name == name)
        .ok_or_else(|| {
            let known: Vec<&str> = (REPRODUCTIONS.iter().map(|r| r.name))
                .chain([crate::live::NAME])
                .collect();
            Failure::input(clip(format!(
                "reproduce {name}: no such reproduction (known: {}; `onionlab reproduce \
                 --list` describes them)",
                known.join(", ")
            )))
        })?;
    // Every experiment and variant is checked before any runs, so that a broken one costs no
    // simulation.
    let experiments = entry
        .experiments
        .iter()
        .map(parse_embedded)
        .collect::<Result<Vec<_>, _>>()?;
    let threads = threads_flag(&args.options)?;
    let plans = experiments
        .iter()
        .map(|e| plan(e, &args.options, threads))
        .collect::<Result<Vec<_>, _>>()?;
    let root = args
        .output
        .clone()
        .unwrap_or_else(|| PathBuf::from("out").join(format!("reproduce-{}", entry.name)));
    if args.options.cluster.any() && !args.options.check {
        let command = vec!["reproduce".to_string(), entry.name.to_string()];
        let placed: Vec<(Plan, PathBuf)> = plans
            .into_iter()
            .map(|p| {
                let out = root.join(&p.experiment.name);
                (p, out)
            })
            .collect();
        cluster(&placed, &root, command.clone(), command, &args.options)?;
        if args.options.cluster.slurm_compare {
            let plans: Vec<Plan> = placed.into_iter().map(|(p, _)| p).collect();
            let page = write_reproduction_index(entry, &plans, &root)?;
            println!(
                "reproduce {}: every experiment on one page: {}",
                entry.name,
                page.display()
            );
        }
        return Ok(());
    }
    for (i, plan) in plans.iter().enumerate() {
        let experiment = plan.experiment;
        println!(
            "reproduce {}: experiment {}/{}: {} ({})",
            entry.name,
            i + 1,
            plans.len(),
            experiment.name,
            experiment.file
        );
        if args.options.check {
            check_output(&root.join(&experiment.name))?;
            check_plan(plan)?;
        } else {
            execute(plan, &root.join(&experiment.name), &args.options, Mode::Run)?;
        }
    }
    if !args.options.check {
        let page = write_reproduction_index(entry, &plans, &root)?;
        println!(
            "reproduce {}: every experiment on one page: {}",
            entry.name,
            page.display()
        );
    }
    Ok(())
}

/// `<root>/index.html`: each experiment's key figures and a link to its comparison, so that a
/// reproduction's result, which may span experiments, reads from one page.
fn write_reproduction_index(
    entry: &Reproduction,
    plans: &[Plan],
    root: &Path,
) -> Result<PathBuf, Failure> {
    let entries: Vec<IndexEntry> = plans
        .iter()
        .map(|p| IndexEntry {
            name: p.experiment.name.clone(),
            about: p
                .experiment
                .file
                .strip_prefix("embedded:")
                .unwrap_or(&p.experiment.file)
                .to_string(),
            compare: format!("{}/{COMPARE_DIR}", p.experiment.name),
        })
        .collect();
    let about = match entry.extra {
        Some(extra) => format!("{} {}", entry.about, extra()),
        None => entry.about.to_string(),
    };
    onionlab_report::write_index(
        root,
        &format!("onionlab reproduce {}", entry.name),
        &about,
        &entries,
    )
    .map_err(|e| Failure::internal(e.to_string()))
}

/// A file compiled into the binary, so that `reproduce` works from any directory: its path in
/// the repository and its text.
pub(crate) struct Embedded {
    pub(crate) path: &'static str,
    pub(crate) text: &'static str,
}

/// Embeds a file of the repository by its path from the repository's root.
macro_rules! embed {
    ($path:literal) => {
        Embedded {
            path: $path,
            text: include_str!(concat!("../../../", $path)),
        }
    };
}

/// A named reproduction: experiments that together reproduce one published result.
pub(crate) struct Reproduction {
    pub(crate) name: &'static str,
    /// One line for `--list`.
    pub(crate) about: &'static str,
    /// Run in order, each into `<output>/<experiment name>/`.
    pub(crate) experiments: &'static [Embedded],
    /// A figure the page shows beside the experiments' (computed after they ran).
    pub(crate) extra: Option<fn() -> String>,
}

// ---------------------------------------------------------------------------------------------
// THE TABLE OF REPRODUCTIONS. To add one: put its experiment files under examples/ (they name
// a built-in scenario, or a scenario file by a path relative to themselves that is embedded in
// EMBEDDED_SCENARIOS below), and add an entry here.
// ---------------------------------------------------------------------------------------------
pub(crate) const REPRODUCTIONS: &[Reproduction] = &[
    Reproduction {
        name: "imux",
        about: "relay-to-relay transports (vanilla, Torchestra, PCTCP, IMUX x3 schedulers, \
                with and without KIST) on the scaled imux-small network, 3 trials each, then \
                the socket exhaustion attack against vanilla, PCTCP, Torchestra and IMUX, \
                and vanilla unattacked (victim throughput over time), 3 trials each",
        experiments: &[
            embed!("examples/experiments/imux-designs.yaml"),
            embed!("examples/experiments/socket-exhaustion.yaml"),
        ],
        extra: None,
    },
    Reproduction {
        name: "quux",
        about: "QUIC between relays (the QUUX design) against vanilla Tor on the toy network \
                (3 trials each, 20 simulated minutes), then the loss experiment: the slowest \
                of 1-8 uploading clients' goodput against loss (0-2%) on the middle-exit \
                link, per design (48 variants, 1 trial each); index.html shows both",
        experiments: &[
            embed!("examples/experiments/quux-toy.yaml"),
            embed!("examples/experiments/quux-loss.yaml"),
        ],
        extra: None,
    },
    Reproduction {
        name: "tleilax",
        about: "where a relay's time goes once a fast link makes it CPU-bound: the tleilax \
                LAN (10 Gbit/s, six relays on three 2-core machines, eight bulk transfers) on \
                the shipped reference calibration's CPU model under each profile (software_ctr, \
                native_ctr, offload, kernel_bypass) and without one, 3 trials each; index.html \
                sets the throughput through Tor against a direct transfer on the same LAN",
        experiments: &[embed!("examples/experiments/tleilax.yaml")],
        extra: Some(tleilax_direct),
    },
    Reproduction {
        name: "schedulers",
        about: "KIST, KIST-lite and vanilla circuit schedulers on the toy network \
                (3 trials each, 20 simulated minutes)",
        experiments: &[embed!("examples/experiments/schedulers.yaml")],
        extra: None,
    },
];

/// The tleilax LAN without Tor: one TCP bulk transfer between two of its hosts (the network
/// model alone, no relays, no CPU model), as iperf directly between two machines measures the
/// link that the transfers through Tor are set against.
fn tleilax_direct() -> String {
    let text = EMBEDDED_SCENARIOS
        .iter()
        .find(|e| e.path == "examples/tleilax-lan.yaml")
        .map(|e| e.text)
        .expect("the tleilax scenario is embedded");
    let s = onionlab_scenario::parse(text, Path::new("examples/tleilax-lan.yaml"))
        .expect("the embedded tleilax scenario parses");
    let lan = s.network.builtin.clone().unwrap_or_default();
    let bps = lan.bandwidth.0;
    let graph = onionlab_net::iperf::switch_graph(lan.latency.0 as f64 / 1e6, lan.loss, 0.0);
    let hosts = [
        onionlab_net::iperf::at(bps, bps),
        onionlab_net::iperf::at(bps, bps),
    ];
    let message = 64 * 1024;
    let mut sim = onionlab_net::iperf::build(
        &graph,
        &hosts,
        onionlab_net::NetworkConfig::default(),
        vec![
            onionlab_net::iperf::sink(message),
            onionlab_net::iperf::sender(0, None, message),
        ],
        1,
        s.run.seed,
    );
    let second = onionlab_engine::time::NANOS_PER_SEC;
    let goodput = onionlab_net::iperf::goodput(&mut sim, 0, second, 4 * second);
    format!(
        "Direct transfer on the same LAN, without Tor (one TCP flow, seconds 1-4, the network \
         model alone): {:.0} MiB/s ({:.2} Gbit/s goodput).",
        goodput / 8.0 / (1 << 20) as f64,
        goodput / 1e9
    )
}

/// Scenario files that embedded experiments may name by a relative path, besides the built-in
/// scenarios (which they may name either way, `toy` or `../toy.yaml`). Such a scenario must not
/// itself name files by relative path: there is no folder around it in the binary.
pub(crate) const EMBEDDED_SCENARIOS: &[Embedded] = &[
    embed!("examples/quux-loss.yaml"),
    embed!("examples/tleilax-lan.yaml"),
];

/// What `reproduce --list` prints.
fn reproduction_list() -> String {
    let mut out = String::new();
    for r in REPRODUCTIONS {
        out.push_str(&format!("{:<12} {}\n", r.name, r.about));
        for e in r.experiments {
            out.push_str(&format!("{:<12}   {}\n", "", e.path));
        }
    }
    out.push_str(&format!(
        "{:<12} {}\n",
        crate::live::NAME,
        crate::live::ABOUT
    ));
    out
}

/// An experiment file as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ExperimentFile {
    #[serde(default)]
    name: Option<String>,
    scenario: String,
    #[serde(default)]
    trials: Option<u32>,
    #[serde(default)]
    stop_time: Option<String>,
    #[serde(default)]
    output: Option<String>,
    /// Overrides every variant starts from, before its own.
    #[serde(default)]
    set: Overrides,
    variants: Vec<VariantFile>,
    /// A metric plotted against a setting the variants vary.
    #[serde(default)]
    sweep: Option<SweepFile>,
}

/// `sweep:` as written: the override path on the x axis, the paths telling curves apart, the
/// metric.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SweepFile {
    x: String,
    #[serde(default)]
    series: Vec<String>,
    metric: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct VariantFile {
    name: String,
    #[serde(default)]
    set: Overrides,
}

/// A variant's `set:` in the file's order: a later path may refine what an earlier one set
/// (`tor: {...}` then `tor.scheduler`), so the order is the meaning.
#[derive(Default)]
struct Overrides(Vec<(String, Value)>);

impl<'de> Deserialize<'de> for Overrides {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Entries;
        impl<'de> Visitor<'de> for Entries {
            type Value = Overrides;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(
                    "a mapping of dotted paths to values, such as `{ tor.scheduler: vanilla }`",
                )
            }
            fn visit_unit<E: de::Error>(self) -> Result<Overrides, E> {
                Ok(Overrides::default())
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Overrides, A::Error> {
                let mut entries: Vec<(String, Value)> = Vec::new();
                while let Some(path) = map.next_key::<String>()? {
                    if entries.len() == MAX_OVERRIDES {
                        return Err(de::Error::custom(format!(
                            "more than {MAX_OVERRIDES} overrides; a variant changes a few \
                             settings, a different scenario belongs in its own file"
                        )));
                    }
                    if entries.iter().any(|(p, _)| *p == path) {
                        return Err(de::Error::custom(format!(
                            "`{path}` is set twice; keep one"
                        )));
                    }
                    let value = map.next_value::<Value>()?;
                    entries.push((path, value));
                }
                Ok(Overrides(entries))
            }
        }
        d.deserialize_any(Entries)
    }
}

/// An experiment read and checked, ready to run.
struct Experiment {
    /// The file, as messages name it.
    file: String,
    name: String,
    /// `scenario:` as written.
    scenario: String,
    base: Base,
    trials: Option<u32>,
    stop_time: Option<String>,
    output: Option<PathBuf>,
    /// Overrides of every variant, applied before each variant's own.
    common: Vec<(String, Value)>,
    variants: Vec<Variant>,
    sweep: Option<SweepSpec>,
}

/// A checked `sweep:`: paths as written, the metric known.
struct SweepSpec {
    x: String,
    series: Vec<String>,
    metric: SweepMetric,
}

struct Variant {
    name: String,
    set: Vec<(String, Value)>,
}

/// Where the base scenario's text comes from.
enum Base {
    File(PathBuf),
    Text { text: &'static str, source: PathBuf },
}

impl Base {
    fn source(&self) -> &Path {
        match self {
            Base::File(path) => path,
            Base::Text { source, .. } => source,
        }
    }

    fn with_overrides(
        &self,
        overrides: &[(String, String)],
    ) -> Result<Scenario, onionlab_scenario::ScenarioError> {
        match self {
            Base::File(path) => onionlab_scenario::load_with_overrides(path, overrides),
            Base::Text { text, source } => {
                onionlab_scenario::parse_with_overrides(text, source, overrides)
            }
        }
    }
}

/// Reads an experiment file, bounded by [`MAX_EXPERIMENT_BYTES`].
fn read_experiment(path: &Path) -> Result<String, Failure> {
    let cannot = |e: std::io::Error| {
        Failure::input(format!(
            "{}: cannot read the experiment file: {e}",
            path.display()
        ))
    };
    let mut bytes = Vec::new();
    fs::File::open(path)
        .map_err(cannot)?
        .take(MAX_EXPERIMENT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(cannot)?;
    if bytes.len() as u64 > MAX_EXPERIMENT_BYTES {
        return Err(Failure::input(format!(
            "{}: the file is larger than {} MiB; an experiment file names a scenario and a \
             few settings per variant",
            path.display(),
            MAX_EXPERIMENT_BYTES >> 20
        )));
    }
    onionlab_data::utf8_text(bytes)
        .map_err(|e| Failure::input(format!("{}: the file {e}", path.display())))
}

/// The base scenario of an experiment file on disk: a file relative to the experiment file's
/// folder, or failing that a built-in scenario.
fn scenario_on_disk(experiment: &Path, scenario: &str) -> Result<Base, String> {
    let folder = experiment.parent().unwrap_or(Path::new(""));
    let path = folder.join(scenario);
    if path.exists() {
        return Ok(Base::File(path));
    }
    if let Some(text) = onionlab_scenario::builtin_text(scenario) {
        return Ok(builtin(scenario, text));
    }
    Err(format!(
        "no scenario file {} in {} (a path is relative to the experiment file's folder), and \
         not a built-in scenario (built-in: {})",
        clip(scenario.to_string()),
        if folder.as_os_str().is_empty() {
            Path::new(".")
        } else {
            folder
        }
        .display(),
        onionlab_scenario::BUILTIN_NAMES.join(", ")
    ))
}

/// A built-in scenario, named in messages as `run` names it.
fn builtin(name: &str, text: &'static str) -> Base {
    Base::Text {
        text,
        source: PathBuf::from(format!("builtin:{name}.yaml")),
    }
}

/// The base scenario of an embedded experiment: a built-in scenario by name, or by its path
/// (`../toy.yaml` from `examples/experiments/`), or an embedded scenario file by its path.
fn embedded_scenario(experiment: &str, scenario: &str) -> Result<Base, String> {
    if let Some(text) = onionlab_scenario::builtin_text(scenario) {
        return Ok(builtin(scenario, text));
    }
    let folder = Path::new(experiment).parent().unwrap_or(Path::new(""));
    let path = normalize(&folder.join(scenario));
    for name in onionlab_scenario::BUILTIN_NAMES {
        if path == format!("examples/{name}.yaml") {
            if let Some(text) = onionlab_scenario::builtin_text(name) {
                return Ok(builtin(name, text));
            }
        }
    }
    if let Some(e) = EMBEDDED_SCENARIOS.iter().find(|e| e.path == path) {
        return Ok(Base::Text {
            text: e.text,
            source: PathBuf::from(format!("embedded:{}", e.path)),
        });
    }
    Err(format!(
        "{} is not compiled into onionlab: an embedded experiment names a built-in scenario \
         ({}) or a file listed in EMBEDDED_SCENARIOS (crates/cli/src/experiment.rs)",
        clip(path),
        onionlab_scenario::BUILTIN_NAMES.join(", ")
    ))
}

/// `a/b/../c.yaml` as `a/c.yaml`, with `/` between segments whatever the platform.
fn normalize(path: &Path) -> String {
    let mut parts: Vec<String> = Vec::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                parts.pop();
            }
            Component::Normal(s) => parts.push(s.to_string_lossy().into_owned()),
            _ => {}
        }
    }
    parts.join("/")
}

fn parse_embedded(e: &Embedded) -> Result<Experiment, Failure> {
    let shown = format!("embedded:{}", e.path);
    let stem = Path::new(e.path)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    parse_experiment(e.text, &shown, &stem, |s| embedded_scenario(e.path, s))
}

/// Reads an experiment file's text: every field checked, the base scenario found (by
/// `find_scenario`, which knows where the file lives), each variant's overrides turned into
/// YAML text for the scenario parser. `shown` names the file in errors; `stem` is the default
/// name.
fn parse_experiment(
    text: &str,
    shown: &str,
    stem: &str,
    find_scenario: impl Fn(&str) -> Result<Base, String>,
) -> Result<Experiment, Failure> {
    // Only what the file says is clipped: the file's own path may be long but is not hostile.
    let bad = |field: &str, message: String| {
        Failure::input(format!("{shown}: {field}: {}", clip(message)))
    };
    let blank = text
        .lines()
        .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'));
    if blank {
        return Err(Failure::input(format!(
            "{shown}: the experiment file is empty: expected at least `scenario:` and \
             `variants:`"
        )));
    }
    let mut path_at_error = String::new();
    let result = serde_saphyr::with_deserializer_from_str(text, |de| {
        serde_path_to_error::deserialize::<_, ExperimentFile>(de).map_err(|e| {
            path_at_error = e.path().to_string();
            e.into_inner()
        })
    });
    let file = result.map_err(|e| yaml_error(shown, &path_at_error, &e))?;

    let name = match &file.name {
        Some(name) => {
            check_name(name).map_err(|m| bad("name", m))?;
            name.clone()
        }
        None => {
            check_name(stem).map_err(|m| {
                bad(
                    "name",
                    format!("the file's name cannot name the output folder, so give `name:`: {m}"),
                )
            })?;
            stem.to_string()
        }
    };
    if file.scenario.trim().is_empty() {
        return Err(bad(
            "scenario",
            "expected a built-in scenario name or a scenario file path".into(),
        ));
    }
    let base = find_scenario(&file.scenario).map_err(|m| bad("scenario", m))?;
    if let Some(trials) = file.trials {
        check_trials(trials).map_err(|m| bad("trials", m))?;
    }
    if let Some(stop) = &file.stop_time {
        // Checked now, on a throwaway scenario, so that the message names this file.
        let mut probe = placeholder_scenario();
        set_stop_time(&mut probe, stop, "stop_time")
            .map_err(|f| Failure::input(format!("{shown}: {}", clip(f.message))))?;
    }
    if let Some(output) = &file.output {
        if output.trim().is_empty() {
            return Err(bad("output", "expected a directory path".into()));
        }
    }
    if file.variants.is_empty() {
        return Err(bad(
            "variants",
            "expected at least one variant, such as `- { name: baseline }`".into(),
        ));
    }
    if file.variants.len() > MAX_VARIANTS {
        return Err(bad(
            "variants",
            format!(
                "{} variants; an experiment compares at most {MAX_VARIANTS}",
                file.variants.len()
            ),
        ));
    }
    let mut variants: Vec<Variant> = Vec::with_capacity(file.variants.len());
    for (i, v) in file.variants.into_iter().enumerate() {
        let field = format!("variants[{i}].name");
        check_name(&v.name).map_err(|m| bad(&field, m))?;
        if v.name.eq_ignore_ascii_case(COMPARE_DIR) {
            return Err(bad(
                &field,
                format!("`{COMPARE_DIR}` is where the comparison goes; choose another name"),
            ));
        }
        if let Some(j) = variants
            .iter()
            .position(|w| w.name.eq_ignore_ascii_case(&v.name))
        {
            return Err(bad(
                &field,
                format!(
                    "{:?} is also the name of variants[{j}]; every variant needs its own name \
                     (names differing only in case count as the same: they name folders)",
                    v.name
                ),
            ));
        }
        variants.push(Variant {
            name: v.name,
            set: v.set.0,
        });
    }
    let sweep = file
        .sweep
        .map(|sw| check_sweep(sw, &variants))
        .transpose()
        .map_err(|(field, m)| bad(&field, m))?;
    Ok(Experiment {
        file: shown.to_string(),
        name,
        scenario: file.scenario,
        base,
        trials: file.trials,
        stop_time: file.stop_time,
        output: file.output.map(PathBuf::from),
        common: file.set.0,
        variants,
        sweep,
    })
}

/// The segments of an override path, `clients[0].count` and `clients.0.count` alike; `None`
/// for a path with an empty segment.
fn path_segments(path: &str) -> Option<Vec<String>> {
    let dotted = path.replace('[', ".").replace(']', "");
    let segments: Vec<String> = dotted.split('.').map(str::to_string).collect();
    if segments.iter().any(|s| s.trim().is_empty()) {
        return None;
    }
    Some(segments)
}

/// Whether an override of `set` decides the value at `path`: the same path, a mapping or list
/// above it (`network.impairments` sets `network.impairments.0.loss`), or a part of it.
fn sets(set: &[String], path: &[String]) -> bool {
    let n = set.len().min(path.len());
    set[..n] == path[..n]
}

/// Checks what `sweep:` can be checked without the scenario: the metric is one onionlab
/// computes, the paths are paths, none repeats, and each is one that some variant's own `set:`
/// varies (a path no variant sets would draw every variant at one x, or one curve per
/// variant). Errors are `(field, message)`.
fn check_sweep(sweep: SweepFile, variants: &[Variant]) -> Result<SweepSpec, (String, String)> {
    let metric = SweepMetric::from_id(&sweep.metric).ok_or_else(|| {
        let known: Vec<&str> = SweepMetric::ALL.iter().map(|m| m.id()).collect();
        (
            "sweep.metric".to_string(),
            format!(
                "unknown metric {:?}; expected one of {}",
                sweep.metric,
                known.join(", ")
            ),
        )
    })?;
    let fields = std::iter::once(("sweep.x".to_string(), &sweep.x)).chain(
        sweep
            .series
            .iter()
            .enumerate()
            .map(|(i, p)| (format!("sweep.series[{i}]"), p)),
    );
    let mut seen: Vec<Vec<String>> = Vec::new();
    for (field, path) in fields {
        let segments = path_segments(path).ok_or_else(|| {
            (
                field.clone(),
                format!(
                    "expected an override path such as `network.impairments.0.loss`, found \
                     {path:?}"
                ),
            )
        })?;
        if seen.contains(&segments) {
            return Err((
                field,
                format!("`{path}` is named twice in sweep:; name each setting once"),
            ));
        }
        let set_by_some = variants.iter().any(|v| {
            v.set
                .iter()
                .filter_map(|(p, _)| path_segments(p))
                .any(|p| sets(&p, &segments))
        });
        if !set_by_some {
            return Err((
                field,
                format!(
                    "no variant sets `{path}`; a sweep plots against settings that the \
                     variants' own `set:` vary"
                ),
            ));
        }
        seen.push(segments);
    }
    Ok(SweepSpec {
        x: sweep.x,
        series: sweep.series,
        metric,
    })
}

/// The value at `path` in a scenario as run.json records it (every default filled in), or
/// the part of the path that is not there.
fn lookup<'v>(scenario: &'v Value, path: &[String]) -> Result<&'v Value, String> {
    let mut at = scenario;
    for (i, segment) in path.iter().enumerate() {
        let next = match at {
            Value::Object(map) => map.get(segment),
            Value::Array(list) => segment.parse::<usize>().ok().and_then(|k| list.get(k)),
            _ => None,
        };
        at = next.ok_or_else(|| {
            if i == 0 {
                format!("the scenario has no `{segment}`")
            } else {
                format!(
                    "the scenario has no `{segment}` in `{}`",
                    path[..i].join(".")
                )
            }
        })?;
    }
    Ok(at)
}

/// A setting's value as a legend shows it: text bare, anything else as JSON.
fn value_label(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The short name of a series setting in labels: its last segment that is not a number
/// (`tor.channel` is `channel`, `clients.0.count` is `count`), or the whole path where two
/// settings would share one.
fn series_names(paths: &[String]) -> Vec<String> {
    let short: Vec<String> = paths
        .iter()
        .map(|p| {
            path_segments(p)
                .and_then(|s| s.into_iter().rev().find(|x| x.parse::<usize>().is_err()))
                .unwrap_or_else(|| p.clone())
        })
        .collect();
    let unique = short
        .iter()
        .enumerate()
        .all(|(i, a)| !short[..i].contains(a));
    if unique {
        short
    } else {
        paths.to_vec()
    }
}

/// Places every variant in the sweep from its scenario as it will run: its x value (a number)
/// and its series label. Checked before anything runs: each path must exist in every
/// variant's scenario, x must be a number, the metric must have clients to measure, and no two
/// variants may take the same place.
fn place_sweep(
    experiment: &Experiment,
    sweep: &SweepSpec,
    prepared: &[Prepared],
) -> Result<Vec<SweepPoint>, Failure> {
    let file = &experiment.file;
    let names = series_names(&sweep.series);
    let mut points: Vec<SweepPoint> = Vec::with_capacity(prepared.len());
    for (i, p) in prepared.iter().enumerate() {
        let variant = &p.variant.name;
        let scenario = serde_json::to_value(&p.scenario)
            .map_err(|e| Failure::internal(format!("{file}: variant {variant}: {e}")))?;
        let at = |field: &str, path: &str| -> Result<&Value, Failure> {
            let segments = path_segments(path).unwrap_or_default();
            lookup(&scenario, &segments).map_err(|m| {
                Failure::input(format!(
                    "{file}: {field}: {}",
                    clip(format!(
                        "`{path}` is not a setting of the scenario (variant {variant}: {m})"
                    ))
                ))
            })
        };
        let x = at("sweep.x", &sweep.x)?;
        let x = x.as_f64().ok_or_else(|| {
            Failure::input(format!(
                "{file}: sweep.x: {}",
                clip(format!(
                    "variant {variant} has `{}` = {x}; the x axis needs a number",
                    sweep.x
                ))
            ))
        })?;
        let mut labels = Vec::with_capacity(sweep.series.len());
        for (k, path) in sweep.series.iter().enumerate() {
            let v = at(&format!("sweep.series[{k}]"), path)?;
            labels.push(format!("{}={}", names[k], value_label(v)));
        }
        let counted = scenario
            .get("clients")
            .and_then(Value::as_array)
            .is_some_and(|groups| groups.iter().any(|g| sweep.metric.counts_group(g)));
        if !counted {
            return Err(Failure::input(format!(
                "{file}: sweep.metric: {} measures {} clients, and variant {variant} has no \
                 client group of that kind",
                sweep.metric.id(),
                if sweep.metric == SweepMetric::SlowestUploadGoodput {
                    "uploading (an `upload` workload)"
                } else {
                    "downloading (a `web`, `bulk` or `perf` workload)"
                }
            )));
        }
        let point = SweepPoint {
            series: labels.join(", "),
            x,
        };
        if let Some(j) = points.iter().position(|q| *q == point) {
            return Err(Failure::input(format!(
                "{file}: sweep: {}",
                clip(format!(
                    "variants {} and {variant} (variants[{j}] and variants[{i}]) have the same \
                     x and series ({}); name the setting that tells them apart in sweep.series",
                    prepared[j].variant.name,
                    if point.series.is_empty() {
                        format!("x = {x}")
                    } else {
                        format!("x = {x}, {}", point.series)
                    }
                ))
            )));
        }
        points.push(point);
    }
    Ok(points)
}

/// A scenario to try a stop time on.
fn placeholder_scenario() -> Scenario {
    onionlab_scenario::builtin("toy").unwrap_or_else(|| unreachable!("toy is built in"))
}

/// Experiment and variant names name folders: letters, digits, `.`, `_`, `-`, not starting
/// with a dot (no `..`, no hidden folders).
fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        return Ok(());
    }
    Err(format!(
        "expected a name of 1 to {MAX_NAME_LEN} letters, digits, '.', '_' or '-', not starting \
         with '.' (it names a folder), found {name:?}"
    ))
}

fn check_trials(trials: u32) -> Result<(), String> {
    if (1..=MAX_TRIALS).contains(&trials) {
        Ok(())
    } else {
        Err(format!("expected 1 to {MAX_TRIALS} trials, found {trials}"))
    }
}

/// A YAML or schema error in an experiment file, located by line and field.
fn yaml_error(shown: &str, path: &str, e: &serde_saphyr::Error) -> Failure {
    let line = e
        .location()
        .map(|l| l.line())
        .filter(|&l| l > 0)
        .map(|l| format!(":{l}"))
        .unwrap_or_default();
    let field: Vec<&str> = path
        .split('.')
        .filter(|s| *s != "?" && !s.is_empty())
        .collect();
    let field = if field.is_empty() {
        String::new()
    } else {
        format!("{}: ", field.join("."))
    };
    let mut message = e.without_snippet().to_string();
    // The parser appends its own position; the line is given in front.
    if let Some(i) = message.rfind(" at line ") {
        message.truncate(i);
    }
    Failure::input(format!(
        "{shown}{line}: {}",
        clip(format!("{field}{message}"))
    ))
}

/// A variant made concrete: its scenario (overrides and stop time applied) and threads.
struct Prepared<'a> {
    variant: &'a Variant,
    scenario: Scenario,
    threads: usize,
}

/// What a trial's folder held before this invocation.
#[derive(Clone, Copy, PartialEq)]
enum Previous {
    Nothing,
    /// A complete run of exactly this scenario and seed: kept.
    Same,
    Incomplete,
    Different,
    Unreadable,
}

/// Looks at `dir/run.json` to decide whether the trial must run.
fn previous(dir: &Path, scenario: &Scenario) -> Previous {
    let path = dir.join(RUN_JSON);
    if !path.exists() {
        return Previous::Nothing;
    }
    let Ok(text) = fs::read_to_string(&path) else {
        return Previous::Unreadable;
    };
    let Ok(info) = serde_json::from_str::<Value>(&text) else {
        return Previous::Unreadable;
    };
    if info.get("complete") != Some(&Value::Bool(true)) {
        return Previous::Incomplete;
    }
    let expected = serde_json::to_value(scenario).ok().map(comparable);
    let recorded = info.get("scenario").cloned().map(comparable);
    if expected.is_none() || recorded != expected {
        return Previous::Different;
    }
    if ![DOWNLOADS_CSV, RELAYS_CSV, CIRCUITS_CSV]
        .iter()
        .all(|f| dir.join(f).is_file())
    {
        return Previous::Incomplete;
    }
    Previous::Same
}

/// A recorded scenario without where it was read from: the same experiment run from another
/// folder (or with the file given by another relative path) runs the same scenario.
fn comparable(mut scenario: Value) -> Value {
    if let Value::Object(map) = &mut scenario {
        map.remove("source");
    }
    scenario
}

/// What happened to one trial in this invocation, for the progress line and experiment.json.
#[derive(Clone)]
struct TrialRecord {
    seed: u64,
    status: &'static str,
    wall_seconds: Option<f64>,
}

/// An experiment made concrete for this invocation: trials per variant and every variant's
/// scenario, all checked before anything runs.
struct Plan<'a> {
    experiment: &'a Experiment,
    trials: u32,
    variants: Vec<Prepared<'a>>,
    /// Each variant's place in the experiment's sweep, if it has one.
    sweep: Option<Vec<SweepPoint>>,
}

/// `--threads`, checked once for every variant and experiment.
fn threads_flag(options: &ExperimentOptions) -> Result<Option<usize>, Failure> {
    options
        .threads
        .map(|t| thread_count(t, "--threads"))
        .transpose()
}

/// Makes every variant of `experiment` concrete, printing the warnings their scenarios give.
fn plan<'a>(
    experiment: &'a Experiment,
    options: &ExperimentOptions,
    threads: Option<usize>,
) -> Result<Plan<'a>, Failure> {
    let trials = match (options.trials, experiment.trials) {
        (Some(k), _) => {
            check_trials(k).map_err(|m| Failure::input(format!("--trials: {m}")))?;
            k
        }
        (None, Some(k)) => k,
        (None, None) => 1,
    };
    let mut warnings: Vec<(String, Vec<&str>)> = Vec::new();
    let mut prepared = Vec::with_capacity(experiment.variants.len());
    for (i, variant) in experiment.variants.iter().enumerate() {
        prepared.push(prepare(
            experiment,
            i,
            variant,
            options,
            threads,
            &mut warnings,
        )?);
    }
    let n = prepared.len();
    for (w, variants) in &warnings {
        if variants.len() == n {
            eprintln!("warning: {w}");
        } else {
            eprintln!("warning: {w} (variant {})", variants.join(", "));
        }
    }
    let sweep = experiment
        .sweep
        .as_ref()
        .map(|sw| place_sweep(experiment, sw, &prepared))
        .transpose()?;
    Ok(Plan {
        experiment,
        trials,
        variants: prepared,
        sweep,
    })
}

/// What `execute` would refuse about the output folder, found without creating it.
fn check_output(out: &Path) -> Result<(), Failure> {
    OutputDir::check_creatable(out).map_err(|e| Failure::input(e.to_string()))
}

/// Runs every check a run would make on every variant, without running.
fn check_plan(plan: &Plan) -> Result<(), Failure> {
    let experiment = plan.experiment;
    let n = plan.variants.len();
    for (i, p) in plan.variants.iter().enumerate() {
        println!("variant {}/{n} ({}):", i + 1, p.variant.name);
        check_scenario(&p.scenario).map_err(|f| Failure {
            code: f.code,
            message: format!(
                "{}: variant {} (variants[{i}]): {}",
                experiment.file, p.variant.name, f.message
            ),
        })?;
    }
    println!(
        "{}: valid: {n} variant{} of {}, {} trial{} each",
        experiment.file,
        if n == 1 { "" } else { "s" },
        experiment.scenario,
        plan.trials,
        if plan.trials == 1 { "" } else { "s" }
    );
    Ok(())
}

/// What [`execute`] does with a trial whose folder does not hold a complete run of its
/// scenario and seed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Runs it (a local experiment).
    Run,
    /// Reports it as failed: the comparison job of a cluster submission, whose tasks ran
    /// (or were to run) every such trial.
    Collect,
}

/// Runs (or resumes) the experiment of `plan` into `out`: each trial whose folder does not
/// already hold a complete run of the same scenario and seed, then the comparison. With
/// [`Mode::Collect`] it runs nothing: the comparison takes the complete trials, and the
/// others are reported as failed.
fn execute(
    plan: &Plan,
    out: &Path,
    options: &ExperimentOptions,
    mode: Mode,
) -> Result<(), Failure> {
    let (experiment, trials, prepared) = (plan.experiment, plan.trials, &plan.variants);
    let n = prepared.len();
    let out_dir = OutputDir::create(out).map_err(|e| Failure::input(e.to_string()))?;
    println!(
        "experiment {}: {n} variant{} of {}, {trials} trial{} each; results in {}",
        experiment.name,
        if n == 1 { "" } else { "s" },
        experiment.scenario,
        if trials == 1 { "" } else { "s" },
        out.display()
    );
    let run_options = trial_run_options(options)?;
    let records = prepared
        .iter()
        .map(|p| {
            (1..=trials)
                .map(|k| TrialRecord {
                    seed: trial_seed(p.scenario.run.seed, k),
                    status: "not run",
                    wall_seconds: None,
                })
                .collect()
        })
        .collect();
    let mut ledger = Ledger {
        experiment,
        out,
        out_dir,
        trials,
        stop_time: options
            .stop_time
            .as_deref()
            .or(experiment.stop_time.as_deref()),
        records,
    };
    for (i, p) in prepared.iter().enumerate() {
        let variant_dir = out.join(&p.variant.name);
        let mut names = Vec::with_capacity(trials as usize);
        for k in 1..=trials {
            let label = format!(
                "variant {}/{n} ({}) trial {k}/{trials}",
                i + 1,
                p.variant.name
            );
            if interrupt_requested() {
                return Err(ledger.stopped(&label));
            }
            let scenario = trial_scenario(p, k);
            let name = format!("trial-{k}");
            let dir = variant_dir.join(&name);
            let before = previous(&dir, &scenario);
            if before == Previous::Same {
                ledger.records[i][(k - 1) as usize].status = "kept";
                if mode == Mode::Run {
                    println!("{label}: kept (a complete run of the same scenario and seed)");
                } else {
                    println!("{label}: complete");
                }
            } else if mode == Mode::Collect {
                ledger.records[i][(k - 1) as usize].status = "failed";
                let log = match before {
                    Previous::Nothing => "no run.json".to_string(),
                    _ => format!("{} holds no complete run of it", dir.display()),
                };
                println!("{label}: FAILED ({log}; `--status` shows its task's log)");
                continue;
            } else {
                let started = Instant::now();
                let result = run_one(&scenario, p.threads, &dir, &run_options);
                let wall = started.elapsed().as_secs_f64();
                if let Err(f) = result {
                    if f.code == INTERRUPTED {
                        return Err(ledger.stopped(&label));
                    }
                    // Best effort: the failure is what must be reported.
                    let _ = ledger.write(false);
                    return Err(Failure {
                        code: f.code,
                        message: format!("{label}: {}", f.message),
                    });
                }
                let record = &mut ledger.records[i][(k - 1) as usize];
                record.status = "ran";
                record.wall_seconds = Some(wall);
                let replaced = match before {
                    Previous::Incomplete => " (replaced an incomplete run)",
                    Previous::Different => " (replaced a run of another scenario or seed)",
                    Previous::Unreadable => " (replaced a run whose run.json was unreadable)",
                    Previous::Nothing | Previous::Same => "",
                };
                println!("{label}: ran in {wall:.1} s{replaced}");
            }
            names.push(name);
        }
        // The variant's folder is a set of trials like `run --trials` makes, so `report` and
        // `compare` read it too; the manifest keeps trials beyond K (from a run with more) out.
        let manifest = TrialsManifest {
            scenario: p.scenario.name.clone(),
            trials: names,
            seeds: (ledger.records[i].iter())
                .filter(|r| r.status != "failed")
                .map(|r| r.seed)
                .collect(),
        };
        OutputDir::create(&variant_dir)
            .and_then(|d| d.write_trials(&manifest))
            .map_err(|e| Failure::internal(e.to_string()))?;
        ledger.write(false)?;
    }

    let failed: Vec<String> = prepared
        .iter()
        .zip(&ledger.records)
        .flat_map(|(p, records)| {
            records
                .iter()
                .enumerate()
                .filter(|(_, r)| r.status == "failed")
                .map(move |(k, _)| format!("{}/trial-{}", p.variant.name, k + 1))
        })
        .collect();
    let mut inputs = Vec::with_capacity(n);
    for (p, records) in prepared.iter().zip(&ledger.records) {
        if records.iter().all(|r| r.status == "failed") {
            // Nothing of this variant to compare; it is reported below.
            continue;
        }
        let dir = out.join(&p.variant.name);
        let input =
            onionlab_report::load_input(&dir).map_err(|e| Failure::internal(e.to_string()))?;
        inputs.push((p.variant.name.clone(), input));
    }
    if inputs.is_empty() {
        let _ = ledger.write(false);
        return Err(Failure::internal(format!(
            "experiment {}: no trial is complete, so there is nothing to compare ({} failed)",
            experiment.name,
            failed.len()
        )));
    }
    let compare_dir = out.join(COMPARE_DIR);
    let sweep = match (&experiment.sweep, &plan.sweep) {
        (Some(spec), Some(points)) => Some(Sweep {
            x_label: spec.x.clone(),
            series_label: spec.series.join(", "),
            metric: spec.metric,
            points: points.clone(),
        }),
        _ => None,
    };
    let table = onionlab_report::write_comparison_sweep(
        &inputs,
        &compare_dir,
        &onionlab_report::ReportOptions::default(),
        sweep.as_ref(),
    )
    .map_err(|e| Failure::internal(e.to_string()))?;
    ledger.write(failed.is_empty())?;
    println!("{table}");
    println!(
        "comparison: {}",
        compare_dir.join(onionlab_report::COMPARE_HTML).display()
    );
    if let Some(sweep) = &sweep {
        println!(
            "sweep: {} (plot, also .png) and {} (table)",
            compare_dir.join(format!("{}.svg", sweep.stem())).display(),
            compare_dir.join(onionlab_report::SWEEP_CSV).display()
        );
    }
    if !failed.is_empty() {
        return Err(Failure::internal(format!(
            "experiment {}: {} trial{} failed and {} left out of the comparison: {}; \
             submitting again runs them",
            experiment.name,
            failed.len(),
            if failed.len() == 1 { "" } else { "s" },
            if failed.len() == 1 { "is" } else { "are" },
            failed.join(", ")
        )));
    }
    Ok(())
}

/// Applies a variant's overrides and the stop time to the base scenario, and picks its
/// threads. Warnings are collected, each once, for the caller to show.
fn prepare<'a>(
    experiment: &Experiment,
    index: usize,
    variant: &'a Variant,
    options: &ExperimentOptions,
    threads: Option<usize>,
    warnings: &mut Vec<(String, Vec<&'a str>)>,
) -> Result<Prepared<'a>, Failure> {
    let mut warn = |w: String| match warnings.iter_mut().find(|(seen, _)| *seen == w) {
        Some((_, variants)) => variants.push(&variant.name),
        None => warnings.push((w, vec![&variant.name])),
    };
    let context = format!(
        "{}: variant {} (variants[{index}])",
        experiment.file, variant.name
    );
    let overrides: Vec<(String, String)> = experiment
        .common
        .iter()
        .chain(&variant.set)
        .map(|(path, value)| (path.clone(), value.to_string()))
        .collect();
    let mut scenario = experiment
        .base
        .with_overrides(&overrides)
        .map_err(|e| Failure::input(format!("{context}: {e}")))?;
    let stop = match (&options.stop_time, &experiment.stop_time) {
        (Some(text), _) => Some((text, "--stop-time".to_string())),
        (None, Some(text)) => Some((text, format!("{}: stop_time", experiment.file))),
        (None, None) => None,
    };
    if let Some((text, what)) = stop {
        if let Some(w) = set_stop_time(&mut scenario, text, &what)? {
            warn(w);
        }
    }
    for w in onionlab_scenario::warnings(&scenario) {
        warn(w.to_string());
    }
    let threads = match (threads, scenario.run.threads) {
        (Some(t), _) => t,
        (None, Some(t)) => thread_count(
            t as usize,
            &format!(
                "{context}: {}: run.threads",
                experiment.base.source().display()
            ),
        )?,
        (None, None) => onionlab_engine::default_threads(),
    };
    Ok(Prepared {
        variant,
        scenario,
        threads,
    })
}

/// Where an experiment stands, written to `experiment.json` after every variant and when it
/// stops, so that the folder always says what it holds.
struct Ledger<'a> {
    experiment: &'a Experiment,
    out: &'a Path,
    out_dir: OutputDir,
    /// Trials per variant and the stop time, as this invocation runs them.
    trials: u32,
    stop_time: Option<&'a str>,
    /// Per variant, per trial.
    records: Vec<Vec<TrialRecord>>,
}

impl Ledger<'_> {
    /// Writes `experiment.json`: the experiment as run and what each trial did in this
    /// invocation (`ran`, `kept`, or `not run` when it was stopped first).
    fn write(&self, complete: bool) -> Result<(), Failure> {
        let variants: Vec<Value> = self
            .experiment
            .variants
            .iter()
            .zip(&self.records)
            .map(|(v, trials)| {
                let set: Vec<Value> = v
                    .set
                    .iter()
                    .map(|(path, value)| json!({ "path": path, "value": value }))
                    .collect();
                let runs: Vec<Value> = trials
                    .iter()
                    .enumerate()
                    .map(|(k, t)| {
                        json!({
                            "dir": format!("{}/trial-{}", v.name, k + 1),
                            "seed": t.seed,
                            "status": t.status,
                            "wall_seconds": t.wall_seconds,
                        })
                    })
                    .collect();
                json!({ "name": v.name, "dir": v.name, "set": set, "trials": runs })
            })
            .collect();
        let experiment = self.experiment;
        let common: Vec<Value> = experiment
            .common
            .iter()
            .map(|(path, value)| json!({ "path": path, "value": value }))
            .collect();
        let record = json!({
            "name": experiment.name,
            "file": experiment.file,
            "scenario": experiment.scenario,
            "scenario_source": experiment.base.source().display().to_string(),
            "trials": self.trials,
            "stop_time": self.stop_time,
            "output": self.out.display().to_string(),
            "set": common,
            "version": env!("CARGO_PKG_VERSION"),
            "commit": env!("ONIONLAB_COMMIT"),
            "variants": variants,
            "compare": if complete { Some(COMPARE_DIR) } else { None },
            "complete": complete,
        });
        // Only experiments with a sweep record one, so every other experiment.json stays as
        // it was.
        let mut record = record;
        if let (Some(sweep), Value::Object(map)) = (&experiment.sweep, &mut record) {
            map.insert(
                "sweep".into(),
                json!({ "x": sweep.x, "series": sweep.series, "metric": sweep.metric.id() }),
            );
        }
        let mut text = serde_json::to_string_pretty(&record)
            .map_err(|e| Failure::internal(format!("{EXPERIMENT_JSON}: {e}")))?;
        text.push('\n');
        self.out_dir
            .write_bytes(EXPERIMENT_JSON, text.as_bytes())
            .map_err(|e| Failure::internal(e.to_string()))?;
        Ok(())
    }

    /// The failure of an experiment stopped by Ctrl-C, SIGTERM or SIGHUP at `label`, after
    /// recording where it got to.
    fn stopped(&self, label: &str) -> Failure {
        // Best effort: the interruption is what must be reported.
        let _ = self.write(false);
        Failure {
            code: INTERRUPTED,
            message: format!(
                "experiment interrupted at {label}; the finished trials stay in {}, and the \
                 same command continues from there",
                self.out.display()
            ),
        }
    }
}

/// `experiment` and `reproduce` on a Slurm cluster (see [`crate::slurm`]): `--slurm` submits
/// the trials still to run of every experiment in `placed` (each with its output folder), the
/// hidden `--slurm-task` runs one of them, `--slurm-compare` writes the comparisons, and
/// `--status` says where the trials stand. `root` holds the submissions; `command` is what
/// the tasks run and `compare` what the comparison job runs (`experiment FILE` or
/// `reproduce NAME`, completed with the output folder and the flags given).
fn cluster(
    placed: &[(Plan, PathBuf)],
    root: &Path,
    command: Vec<String>,
    compare: Vec<String>,
    options: &ExperimentOptions,
) -> Result<(), Failure> {
    let cl = &options.cluster;
    let root = absolute(root)?;
    let dir = root.join(slurm::SLURM_DIR);
    if let (Some(file), Some(index)) = (&cl.slurm_tasks, cl.slurm_task) {
        let task = slurm::read_task(file, index)?;
        return run_task(placed, &task, options);
    }
    if cl.slurm_compare {
        let mut failure = None;
        for (plan, out) in placed {
            if let Err(f) = execute(plan, out, options, Mode::Collect) {
                eprintln!("error: {}", f.message);
                failure.get_or_insert(f);
            }
        }
        return failure.map_or(Ok(()), Err);
    }
    if cl.status {
        return status(placed, &dir);
    }
    // --slurm
    let binary = slurm::check_cluster(cl.dry_run)?;
    OutputDir::create(&root).map_err(|e| Failure::input(e.to_string()))?;
    let mut tasks = Vec::new();
    for (plan, out) in placed {
        for (p, k) in trials_of(plan) {
            let dir = out.join(&p.variant.name).join(format!("trial-{k}"));
            if previous(&dir, &trial_scenario(p, k)) != Previous::Same {
                tasks.push(Task {
                    experiment: plan.experiment.name.clone(),
                    variant: p.variant.name.clone(),
                    trial: k,
                });
            }
        }
    }
    let total: usize = placed
        .iter()
        .map(|(p, _)| p.variants.len() * p.trials as usize)
        .sum();
    let name = match placed {
        [(plan, _)] => plan.experiment.name.clone(),
        _ => command.join("-"),
    };
    let inv = |command: Vec<String>| Invocation {
        command,
        output: &root,
        trials: options.trials,
        stop_time: options.stop_time.as_deref(),
        threads: options.threads,
        options: cl,
    };
    let submitted = slurm::submit(
        &inv(command.clone()),
        &inv(compare),
        &dir,
        &tasks,
        &binary,
        &format!("onionlab-{name}"),
    )?;
    println!(
        "{}: {} of {total} trials to run ({} complete); batch script {}",
        name,
        submitted.tasks,
        total - submitted.tasks,
        submitted.script.display()
    );
    match submitted.jobs {
        Some((array, compare)) => {
            if let Some(array) = array {
                println!(
                    "submitted job array {array} ({} task{})",
                    submitted.tasks,
                    if submitted.tasks == 1 { "" } else { "s" }
                );
            }
            println!(
                "submitted job {compare}: the comparison, once the array has ended; `--status` \
                 shows the progress"
            );
        }
        None => println!("dry run: nothing submitted"),
    }
    Ok(())
}

/// How an experiment runs each trial, wherever it runs.
fn trial_run_options(options: &ExperimentOptions) -> Result<RunOptions, Failure> {
    Ok(RunOptions {
        quiet: options.quiet,
        report: false,
        // A trial that is run replaces whatever its folder held: a partial run, or one of
        // another scenario.
        force: true,
        inject_fault: None,
        trace_syscalls: false,
        work_stealing: true,
        spans: true,
        summary: false,
        max_memory: memory_limit(None)?,
    })
}

/// Every trial of `plan`, variant by variant.
fn trials_of<'p, 'a>(plan: &'p Plan<'a>) -> impl Iterator<Item = (&'p Prepared<'a>, u32)> {
    plan.variants
        .iter()
        .flat_map(move |p| (1..=plan.trials).map(move |k| (p, k)))
}

/// The scenario of trial `k` of a variant: its own seed.
fn trial_scenario(p: &Prepared, k: u32) -> Scenario {
    let mut scenario = p.scenario.clone();
    scenario.run.seed = trial_seed(p.scenario.run.seed, k);
    scenario
}

/// Runs one task of a cluster submission: one trial, as a local experiment runs it.
fn run_task(
    placed: &[(Plan, PathBuf)],
    task: &Task,
    options: &ExperimentOptions,
) -> Result<(), Failure> {
    let (plan, out) = placed
        .iter()
        .find(|(p, _)| p.experiment.name == task.experiment)
        .ok_or_else(|| Failure::input(format!("task: no experiment {}", task.experiment)))?;
    let p = plan
        .variants
        .iter()
        .find(|p| p.variant.name == task.variant)
        .ok_or_else(|| Failure::input(format!("task: no variant {}", task.variant)))?;
    if task.trial == 0 || task.trial > plan.trials {
        return Err(Failure::input(format!(
            "task: no trial {} (the experiment has {})",
            task.trial, plan.trials
        )));
    }
    let dir = out
        .join(&p.variant.name)
        .join(format!("trial-{}", task.trial));
    let run_options = trial_run_options(options)?;
    println!(
        "experiment {}: variant {} trial {} into {}",
        plan.experiment.name,
        p.variant.name,
        task.trial,
        dir.display()
    );
    let started = Instant::now();
    run_one(
        &trial_scenario(p, task.trial),
        p.threads,
        &dir,
        &run_options,
    )?;
    println!("ran in {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// Where a trial stands for `--status`, in the order its line counts them.
#[derive(Clone, Copy)]
enum TrialState {
    Complete,
    Running,
    Pending,
    Failed,
    NotRun,
    /// In the latest submission, and no `squeue` here to say where.
    Submitted,
}

impl TrialState {
    const COUNT: usize = 6;
}

/// `--status`: per variant, how many trials are complete, running, pending, failed or not yet
/// run, and the last lines of each failed task's log.
fn status(placed: &[(Plan, PathBuf)], dir: &Path) -> Result<(), Failure> {
    let submission = slurm::latest_submission(dir);
    let queue = submission.as_ref().and_then(|(n, _)| {
        let (array, _) = slurm::submission_jobs(dir, *n)?;
        (array != "-").then(|| slurm::queued(&array)).flatten()
    });
    let squeue = submission.is_none() || queue.is_some();
    for (plan, out) in placed {
        println!("experiment {}: {}", plan.experiment.name, out.display());
        let mut failures = Vec::new();
        for p in &plan.variants {
            let mut counts = [0usize; TrialState::COUNT];
            for k in 1..=plan.trials {
                let trial_dir = out.join(&p.variant.name).join(format!("trial-{k}"));
                let task = submission.as_ref().and_then(|(n, tasks)| {
                    let i = tasks.iter().position(|t| {
                        t.experiment == plan.experiment.name
                            && t.variant == p.variant.name
                            && t.trial == k
                    })?;
                    Some((*n, i))
                });
                let state = task.and_then(|(_, i)| {
                    queue
                        .as_ref()?
                        .iter()
                        .find(|(t, _)| *t == i)
                        .map(|(_, s)| s.clone())
                });
                let state = if previous(&trial_dir, &trial_scenario(p, k)) == Previous::Same {
                    TrialState::Complete
                } else if let Some(state) = state {
                    if state == "PENDING" {
                        TrialState::Pending
                    } else {
                        TrialState::Running
                    }
                } else if task.is_some() && !squeue {
                    TrialState::Submitted
                } else if task.is_some() || trial_dir.join(RUN_JSON).exists() {
                    failures.push((format!("{}/trial-{k}", p.variant.name), task));
                    TrialState::Failed
                } else {
                    TrialState::NotRun
                };
                counts[state as usize] += 1;
            }
            let [complete, running, pending, failed, not_run, submitted] = counts;
            let mut line = format!(
                "  {}: {complete} complete, {running} running, {pending} pending, {failed} \
                 failed, {not_run} not run",
                p.variant.name
            );
            if submitted > 0 {
                line.push_str(&format!(
                    ", {submitted} submitted (no squeue here to say more)"
                ));
            }
            println!("{line}");
        }
        for (trial, task) in failures {
            match task {
                Some((n, i)) => {
                    let log = slurm::task_log(dir, n, i);
                    println!(
                        "  failed: {trial} (submission {n}, task {i}); the end of {}:",
                        log.display()
                    );
                    for l in slurm::tail(&log, 5) {
                        println!("    | {l}");
                    }
                }
                None => println!("  failed: {trial} (its run.json says it did not finish)"),
            }
        }
    }
    Ok(())
}
