//! Scenario files: what a researcher writes to describe one simulated Tor network and its load.
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
//! The schema is documented in the README's scenario reference.

use std::fmt;
use std::path::{Path, PathBuf};

mod data;
mod model;
mod resolve;
mod units;
mod validate;

pub use model::*;
pub use resolve::{
    load_graph, resolve, resolve_trial, ClientWorkload, Plan, PlannedClient, PlannedHost,
    PlannedRelay,
};
pub use units::{parse_duration, parse_rate, parse_size, Duration, Rate, Size};

/// Why a scenario cannot be run, located as precisely as the problem allows.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ScenarioError {
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
    let bytes = std::fs::read(path)
        .map_err(|e| ScenarioError::new(path, "", format!("cannot read scenario file: {e}")))?;
    let text = String::from_utf8(bytes)
        .map_err(|e| ScenarioError::new(path, "", format!("file is not valid UTF-8: {e}")))?;
    parse(&text, path)
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
        Err(e) => return Err(yaml_error(source, path_at_error, &e)),
    };
    scenario.source = source.to_path_buf();
    if scenario.name.is_empty() {
        scenario.name = source
            .file_stem()
            .map(|s| {
                // The name labels results; keep it to the characters validation allows.
                s.to_string_lossy()
                    .chars()
                    .map(|c| {
                        if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                            c
                        } else {
                            '_'
                        }
                    })
                    .collect()
            })
            .filter(|n: &String| !n.is_empty())
            .unwrap_or_else(|| "scenario".into());
    }
    validate::check(&scenario)?;
    Ok(scenario)
}

/// Turns a YAML/serde error into ours: the path from `serde_path_to_error`, the line from the
/// parser, and a message stripped of the parser's own location text (we print it ourselves).
fn yaml_error(source: &Path, path: String, e: &serde_saphyr::Error) -> ScenarioError {
    let inner = e.without_snippet();
    let line = inner
        .location()
        .map(|l| l.line() as usize)
        .filter(|&l| l > 0);
    let mut message = inner.to_string();
    // The parser appends its own "at line X column Y"; the line is reported separately.
    if let Some(i) = message.rfind(" at line ") {
        message.truncate(i);
    }
    let mut field = if path == "." { String::new() } else { path };
    // The parser's terse messages for out-of-range integers and for enums given two keys say
    // what went wrong but not what to write instead.
    if let Some(ty) = message.strip_prefix("invalid ") {
        let range = match ty {
            "u16" => Some("0 to 65535"),
            "u32" => Some("0 to 4294967295"),
            "u64" => Some("0 to 18446744073709551615"),
            _ => None,
        };
        if let Some(range) = range {
            message = format!("expected a whole number from {range}");
        }
    }
    if message.contains("end of mapping after enum variant") {
        let choices = if field.starts_with("relays.generate.bandwidth") {
            "from_file, lognormal, fixed"
        } else if field.starts_with("relays") {
            "generate, list, sample"
        } else if field.contains("workload") {
            "web, bulk, perf"
        } else {
            "the allowed keys"
        };
        message = format!("expected exactly one of {choices}, found more than one");
        if let Some(i) = field.rfind('.') {
            field.truncate(i);
        }
    }
    // serde reports an unknown key at its parent; name the key itself so the path points at
    // the text to fix.
    let key = message
        .strip_prefix("unknown field `")
        .or_else(|| message.strip_prefix("missing field `"))
        .and_then(|rest| rest.split('`').next())
        .map(str::to_string);
    if let Some(key) = key {
        if field != key && !field.ends_with(&format!(".{key}")) {
            field = if field.is_empty() {
                key.to_string()
            } else {
                format!("{field}.{key}")
            };
        }
    }
    ScenarioError {
        file: source.display().to_string(),
        field,
        line,
        message,
    }
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
        _ => return None,
    })
}

/// Names accepted by [`builtin`].
pub const BUILTIN_NAMES: [&str; 5] = [
    "toy",
    "small",
    "large",
    "consensus-2023",
    "emulation-minimal",
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
