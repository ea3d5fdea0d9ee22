//! Scenario files: what a researcher writes to describe one simulated Tor network and its load.
//!
//! This crate is part of onionlab, a simulator of Tor networks. The schema (every key, its
//! default, unit and range) is documented in the book's scenario reference, starting at
//! `docs/src/reference/scenario.md`.
//!
//! # Overview
//!
//! A scenario is read in three steps, each able to fail with a [`ScenarioError`] that names the
//! file, the field path and what was expected, so that a mistake costs seconds instead of a
//! wasted multi-hour run:
//!
//! 1. [`parse`] / [`load`]: YAML to [`Scenario`], refusing unknown keys, wrong types, quantities
//!    without units and impossible or inconsistent values, and checking that referenced files
//!    exist;
//! 2. [`load_graph`]: the network graph the scenario names;
//! 3. [`resolve`]: concrete hosts ([`Plan`]) placed on graph nodes, deterministic for a seed.
//!
//! Every value has a range ([`limits`]) so that a scenario that passes these steps runs to its
//! end in bounded time and memory. Values that are legal but probably mistaken are reported by
//! [`warnings`], for the caller to show; the library prints nothing. [`overrides`] replaces
//! settings by dotted paths (the variants of an experiment), and [`cpu`] reads the `cpu:`
//! section and its calibration files.
//!
//! # Not in this crate
//!
//! Nothing here runs a scenario: the `onionlab` command (`crates/cli`) builds the simulation's
//! hosts from a [`Plan`], and `onionlab-emulate` runs one with real tor. Graph files are parsed
//! by `onionlab-topology`, consensuses by `onionlab-netdir`, workload models by
//! `onionlab-traffic`; experiment files (`examples/experiments/`) are read by the command.
//!
//! # Tests
//!
//! `tests/scenarios.rs` loads every shipped example and every file of the broken-scenario
//! corpus (`tests/broken/`, each refused with the message its first line expects, in our
//! words rather than the YAML library's) and checks determinism and
//! placement; `tests/ranges.rs` checks that the ranges' bounds are inclusive and that warnings
//! point at the suspicious; `tests/cpu.rs` covers the `cpu:` section. Small graphs and
//! consensuses for them are in `tests/data/`. Unit tests sit in `resolve`, `units`,
//! `validate`, `overrides` and `yaml`. The parser is also fuzzed by
//! `crates/cli/tests/fuzz.rs`.

use std::fmt;
use std::path::{Path, PathBuf};

pub mod cpu;
mod data;
pub mod limits;
mod model;
pub mod overrides;
mod resolve;
mod units;
mod validate;
mod yaml;

pub use model::*;
pub use overrides::{load_with_overrides, parse_with_overrides};
pub use resolve::{
    load_graph, resolve, resolve_trial, ClientWorkload, Plan, PlanHost, PlannedAttack,
    PlannedClient, PlannedHost, PlannedImpairment, PlannedProcess, PlannedRelay,
};
pub use units::{parse_duration, parse_rate, parse_size, Duration, Rate, Size};
pub use validate::process_program;

/// Why a scenario cannot be run, located as precisely as the problem allows.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ScenarioError {
    /// The scenario file as the user named it (`builtin:<name>.yaml` for a built-in one).
    pub file: String,
    /// Path of the offending key, e.g. `clients[1].workload.web.pause`; empty for the whole file.
    pub field: String,
    /// 1-based line, when the YAML parser knows it.
    pub line: Option<usize>,
    /// What is wrong and what was expected.
    pub message: String,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.file)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if !self.field.is_empty() {
            write!(f, ": {}", self.field)?;
        }
        write!(f, ": {}", self.message)
    }
}

/// A legal but suspicious setting, located like a [`ScenarioError`]; see [`warnings`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScenarioWarning {
    /// The scenario file as the user named it (`builtin:<name>.yaml` for a built-in one).
    pub file: String,
    /// Path of the key the warning is about, e.g. `network.builtin.loss`.
    pub field: String,
    /// Why the setting is suspicious and what it will do.
    pub message: String,
}

impl fmt::Display for ScenarioWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}: {}", self.file, self.field, self.message)
    }
}

/// Settings of a valid scenario that are probably mistakes (a loss above 0.5, exits that
/// reject the model's port, relays without the Fast flag, a lookahead floor above the latency,
/// client starts past the end of the run), in file order. The scenario still runs as written;
/// `onionlab` shows these before it starts.
pub fn warnings(s: &Scenario) -> Vec<ScenarioWarning> {
    validate::warnings(s)
}

impl ScenarioError {
    pub(crate) fn new(file: &Path, field: impl Into<String>, message: impl Into<String>) -> Self {
        ScenarioError {
            file: file.display().to_string(),
            field: field.into(),
            line: None,
            message: message.into(),
        }
    }
}

/// Reads and validates a scenario file.
pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
    parse(&read_text(path)?, path)
}

/// A scenario file's text, refused beyond [`limits::MAX_SCENARIO_BYTES`] or when not UTF-8.
pub(crate) fn read_text(path: &Path) -> Result<String, ScenarioError> {
    use std::io::Read;
    let cannot =
        |e: std::io::Error| ScenarioError::new(path, "", format!("cannot read scenario file: {e}"));
    // Read one byte past the limit rather than trusting the file's reported size, which a
    // device or a growing file does not give.
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .map_err(cannot)?
        .take(limits::MAX_SCENARIO_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(cannot)?;
    if bytes.len() as u64 > limits::MAX_SCENARIO_BYTES {
        return Err(ScenarioError::new(
            path,
            "",
            format!(
                "the file is larger than {} MiB; a scenario is a few dozen lines (even a list \
                 of every relay of the Tor network is a few MiB)",
                limits::MAX_SCENARIO_BYTES >> 20
            ),
        ));
    }
    onionlab_data::utf8_text(bytes)
        .map_err(|e| ScenarioError::new(path, "", format!("the file {e}")))
}

/// Parses and validates scenario text; `source` names the file in errors and anchors relative
/// paths inside it.
pub fn parse(text: &str, source: &Path) -> Result<Scenario, ScenarioError> {
    let blank = text
        .lines()
        .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'));
    if blank {
        return Err(ScenarioError::new(
            source,
            "",
            "the scenario is empty: expected a mapping with at least `run:` and `relays:`",
        ));
    }
    let mut path_at_error = String::new();
    let result = serde_saphyr::with_deserializer_from_str(text, |de| {
        serde_path_to_error::deserialize::<_, Scenario>(de).map_err(|e| {
            path_at_error = e.path().to_string();
            e.into_inner()
        })
    });
    let mut scenario = match result {
        Ok(s) => s,
        Err(e) => return Err(yaml::error(source, &path_at_error, &e)),
    };
    scenario.source = source.to_path_buf();
    if scenario.name.is_empty() {
        scenario.name = validate::default_name(
            &source
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default(),
        );
    }
    validate::check(&scenario)?;
    Ok(scenario)
}

/// The scenarios shipped with onionlab, by name: `toy` (the default), `small`, `large`,
/// `consensus-2023`.
pub fn builtin(name: &str) -> Option<Scenario> {
    let text = builtin_text(name)?;
    parse(text, &PathBuf::from(format!("builtin:{name}.yaml"))).ok()
}

/// The YAML of a built-in scenario, for `onionlab` to show or copy as a starting point.
pub fn builtin_text(name: &str) -> Option<&'static str> {
    Some(match name {
        "toy" => include_str!("../../../examples/toy.yaml"),
        "small" => include_str!("../../../examples/small.yaml"),
        "large" => include_str!("../../../examples/large.yaml"),
        "consensus-2023" => include_str!("../../../examples/consensus-2023.yaml"),
        "emulation-minimal" => include_str!("../../../examples/emulation-minimal.yaml"),
        "imux-small" => include_str!("../../../examples/imux-small.yaml"),
        "attack-small" => include_str!("../../../examples/attack-small.yaml"),
        _ => return None,
    })
}

/// Names accepted by [`builtin`].
pub const BUILTIN_NAMES: [&str; 7] = [
    "toy",
    "small",
    "large",
    "consensus-2023",
    "emulation-minimal",
    "imux-small",
    "attack-small",
];

/// Loads a scenario, its graph and its plan: every check a run would do before starting.
pub fn load_and_resolve(
    path: &Path,
) -> Result<(Scenario, onionlab_topology::Graph, Plan), ScenarioError> {
    let scenario = load(path)?;
    let graph = load_graph(&scenario)?;
    let plan = resolve(&scenario, &graph)?;
    Ok((scenario, graph, plan))
}

/// Finds the consensus a `relays.sample.consensus` value names (an alias such as
/// `consensus-2023`, `data:<path>`, or a path relative to `source`'s folder), as a scenario
/// would: for tools that write scenarios (`onionlab generate`).
pub fn consensus_input(spec: &str, source: &Path) -> Result<onionlab_data::Input, String> {
    data::resolve_file(spec, source, data::CONSENSUS_ALIASES)
}

/// The shipped country table nearest a consensus's valid-after day (`geoip-2021`, ...), which
/// `relays.sample.place: address` reads when `geoip` is not set.
pub fn nearest_geoip(valid_after: Option<&str>) -> &'static str {
    data::nearest_geoip(valid_after)
}

/// Whether `spec` names a shipped file (an alias or `data:<path>`) rather than a path.
pub fn is_shipped_consensus(spec: &str) -> bool {
    spec.starts_with("data:") || data::CONSENSUS_ALIASES.iter().any(|(a, _)| *a == spec)
}
