//! `cpu:` — the relays' CPU model: off (`none`, the default: relays have infinitely fast
//! CPUs), or a profile over measured unit costs, with relays placed on machines.
//!
//! ```yaml
//! cpu:
//!   profile: native_ctr          # software_ctr | native_ctr | offload | kernel_bypass
//!   calibration: data:cpu/...    # unit costs measured by `onionlab calibrate` (default: shipped)
//!   costs: { cell_other: 900 }   # custom values over the calibration's, ns
//!   cores: 2                     # cores of a relay's machine when no machine names it
//!   machines:
//!     - { name: box1, cores: 1, relays: [relay1, relay2] }
//! ```

use std::collections::{BTreeMap, HashSet};
use std::fmt;

use onionlab_data::Input;
use onionlab_torcore::cpu::{CpuCalibration, CpuProfile, UnitCosts, CALIBRATION_FORMAT};
use onionlab_torcore::format_real;
use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::units::Duration;
use crate::ScenarioError;

/// The calibration used when a scenario names none: measured with `onionlab calibrate` on the
/// project's development machine (see data/SOURCES.md).
pub const DEFAULT_CALIBRATION: &str = "data:cpu/calibration-epyc-2core-2026-11.yaml";

/// Short names for shipped calibrations.
const CALIBRATION_ALIASES: &[(&str, &str)] =
    &[("reference", "cpu/calibration-epyc-2core-2026-11.yaml")];

/// The most cores a machine may have.
pub const MAX_CORES: u32 = 1024;
/// The most onion-skin workers a relay may run (tor caps its detected CPUs at 16; a bigger pool
/// changes nothing a simulation can show).
pub const MAX_WORKERS: u32 = 128;

/// `cpu:` — either no CPU model (`none`) or a model of how relays spend CPU time.
#[derive(Clone, Debug, PartialEq, Default)]
pub enum CpuSection {
    /// No CPU model (`cpu: none`).
    #[default]
    None,
    /// A CPU model: profile, unit costs and the machines relays share.
    Model(CpuSpec),
}

impl CpuSection {
    /// True for `cpu: none`, which a recorded scenario leaves out.
    pub fn is_none(&self) -> bool {
        matches!(self, CpuSection::None)
    }
}

/// The `cpu:` mapping: how relays do their crypto and packet I/O, what each unit of work
/// costs, and which relays share a machine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CpuSpec {
    /// How a relay does its crypto and packet I/O (default `native_ctr`).
    #[serde(default = "default_profile")]
    pub profile: CpuProfile,
    /// A calibration file (`onionlab calibrate`'s output): a path relative to the scenario,
    /// `data:<path>` or `reference`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<String>,
    /// Unit costs set by hand over the calibration's, ns, by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub costs: BTreeMap<String, f64>,
    /// Cores of the machine of a relay no machine names.
    #[serde(default = "default_cores")]
    pub cores: u32,
    /// Onion-skin worker threads per relay (default: its machine's cores + 1, as tor with
    /// `NumCPUs` unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<u32>,
    /// How often relays sharing a machine measure and tell each other their demand.
    #[serde(default = "default_window")]
    pub share_window: Duration,
    /// Machines several relays share; every relay no entry names has a machine of its own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub machines: Vec<MachineSpec>,
}

/// A machine several relays share.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MachineSpec {
    /// The machine's name: not blank, and unique among machines.
    pub name: String,
    /// Cores of the machine, shared by its relays (1 to 1024).
    pub cores: u32,
    /// The relays on this machine, named as in `relays.csv`; a relay is on one machine at most.
    pub relays: Vec<String>,
}

fn default_profile() -> CpuProfile {
    CpuProfile::NativeCtr
}

fn default_cores() -> u32 {
    2
}

fn default_window() -> Duration {
    Duration::from_millis(10)
}

impl Serialize for CpuSection {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            CpuSection::None => s.serialize_str("none"),
            CpuSection::Model(m) => m.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for CpuSection {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = CpuSection;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("`none`, or a map with `profile`, `calibration`, `costs`, `cores`, `workers`, `share_window` and `machines`")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<CpuSection, E> {
                if v == "none" {
                    Ok(CpuSection::None)
                } else {
                    Err(E::custom(format!(
                        "expected `none` or a map with `profile` (software_ctr, native_ctr, \
                         offload, kernel_bypass), got {v:?}"
                    )))
                }
            }
            fn visit_unit<E: de::Error>(self) -> Result<CpuSection, E> {
                Ok(CpuSection::None)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<CpuSection, A::Error> {
                CpuSpec::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(CpuSection::Model)
            }
        }
        d.deserialize_any(V)
    }
}

/// The CPU model as a run uses it.
#[derive(Clone, Debug, PartialEq)]
pub struct PlannedCpu {
    /// How relays do their crypto and packet I/O.
    pub profile: CpuProfile,
    /// The calibration's unit costs with the scenario's own values over them.
    pub costs: UnitCosts,
    /// Where the costs came from (the calibration file and the machine it measured).
    pub calibration: String,
    /// How often relays sharing a machine measure their demand and tell each other, in nanoseconds.
    pub share_window_ns: u64,
    /// Machines: (name, cores); relays no machine names get one of their own each.
    pub machines: Vec<(String, u32)>,
    /// Each relay's machine (index into `machines`).
    pub machine_of: Vec<usize>,
    /// Onion-skin workers of each relay.
    pub workers: Vec<u32>,
}

/// Checks what can be checked without the relays: ranges and names.
pub(crate) fn check(source: &std::path::Path, spec: &CpuSpec) -> Result<(), ScenarioError> {
    let err = |f: String, m: String| ScenarioError::new(source, f, m);
    if !(1..=MAX_CORES).contains(&spec.cores) {
        return Err(err(
            "cpu.cores".into(),
            format!("expected from 1 to {MAX_CORES} cores, got {}", spec.cores),
        ));
    }
    if let Some(w) = spec.workers {
        if !(1..=MAX_WORKERS).contains(&w) {
            return Err(err(
                "cpu.workers".into(),
                format!("expected from 1 to {MAX_WORKERS} onion-skin workers, got {w}"),
            ));
        }
    }
    let w = spec.share_window;
    if w < Duration::from_millis(1) || w > Duration::from_millis(1000) {
        return Err(err(
            "cpu.share_window".into(),
            format!("expected from 1ms to 1s, got {w}"),
        ));
    }
    let mut blank = UnitCosts::default();
    for (name, v) in &spec.costs {
        let Some(slot) = blank.get_mut(name) else {
            let names: Vec<&str> = blank.named().iter().map(|(n, _)| *n).collect();
            return Err(err(
                format!("cpu.costs.{name}"),
                format!("no such cost; the costs are {}", names.join(", ")),
            ));
        };
        *slot = *v;
        if let Some((_, v)) = blank.out_of_range() {
            return Err(err(
                format!("cpu.costs.{name}"),
                format!(
                    "expected nanoseconds from 0 to {}, got {}",
                    format_real(onionlab_torcore::cpu::MAX_UNIT_COST_NS),
                    format_real(v)
                ),
            ));
        }
    }
    let mut names = HashSet::new();
    let mut placed = HashSet::new();
    for (i, m) in spec.machines.iter().enumerate() {
        let f = format!("cpu.machines[{i}]");
        if m.name.trim().is_empty() || !names.insert(m.name.as_str()) {
            return Err(err(
                format!("{f}.name"),
                format!(
                    "expected a name no other machine has, got {}",
                    crate::validate::shown(&m.name)
                ),
            ));
        }
        if !(1..=MAX_CORES).contains(&m.cores) {
            return Err(err(
                format!("{f}.cores"),
                format!("expected from 1 to {MAX_CORES} cores, got {}", m.cores),
            ));
        }
        if m.relays.is_empty() {
            return Err(err(
                format!("{f}.relays"),
                "expected the names of the relays that run on this machine".into(),
            ));
        }
        for (k, r) in m.relays.iter().enumerate() {
            if !placed.insert(r.as_str()) {
                return Err(err(
                    format!("{f}.relays[{k}]"),
                    format!(
                        "relay {} is already on a machine: a relay runs on one machine",
                        crate::validate::shown(r)
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Reads a calibration file, or says in our words what is wrong with it.
pub fn load_calibration(input: &Input) -> Result<CpuCalibration, String> {
    let bytes = input.read()?;
    let text = std::str::from_utf8(&bytes)
        .map_err(|_| "expected a YAML calibration file (UTF-8 text)".to_string())?;
    let mut at = String::new();
    let result = serde_saphyr::with_deserializer_from_str(text, |de| {
        serde_path_to_error::deserialize::<_, CpuCalibration>(de).map_err(|e| {
            at = e.path().to_string();
            e.into_inner()
        })
    });
    let c = result.map_err(|e| {
        // The scenario's own translation of YAML errors, for the calibration's fields.
        let e = crate::yaml::error(std::path::Path::new(""), &at, &e);
        let line = e.line.map(|l| format!("line {l}: ")).unwrap_or_default();
        let what = "a calibration as `onionlab calibrate` writes it: format, machine, measured, \
                    and costs with every unit cost in ns";
        if e.field.is_empty() {
            // The translation's words for the top level are the scenario's.
            format!("{line}expected {what}")
        } else {
            format!("{line}{}: {} (expected {what})", e.field, e.message)
        }
    })?;
    if c.format != CALIBRATION_FORMAT {
        return Err(format!(
            "format: expected {CALIBRATION_FORMAT}, got {} (written by another version of \
             onionlab; run `onionlab calibrate` again)",
            c.format
        ));
    }
    if let Some((name, v)) = c.costs.out_of_range() {
        return Err(format!(
            "costs.{name}: expected nanoseconds from 0 to {}, got {}",
            format_real(onionlab_torcore::cpu::MAX_UNIT_COST_NS),
            format_real(v)
        ));
    }
    Ok(c)
}

/// Resolves the CPU model for the planned relays (`relay_names` in plan order).
pub(crate) fn plan(
    source: &std::path::Path,
    spec: &CpuSpec,
    relay_names: &[String],
) -> Result<PlannedCpu, ScenarioError> {
    let field = "cpu.calibration";
    let reference = spec.calibration.as_deref().unwrap_or(DEFAULT_CALIBRATION);
    let input = crate::data::resolve_file(reference, source, CALIBRATION_ALIASES)
        .map_err(|m| ScenarioError::new(source, field, m))?;
    let calibration = load_calibration(&input).map_err(|m| {
        ScenarioError::new(
            source,
            field,
            format!("calibration {}: {m}", crate::validate::shown(reference)),
        )
    })?;
    let mut costs = calibration.costs.clone();
    for (name, v) in &spec.costs {
        *costs
            .get_mut(name)
            .expect("cost names were checked with the scenario") = *v;
    }
    let mut machines: Vec<(String, u32)> = Vec::new();
    let mut machine_of = vec![usize::MAX; relay_names.len()];
    for (i, m) in spec.machines.iter().enumerate() {
        machines.push((m.name.clone(), m.cores));
        for (k, r) in m.relays.iter().enumerate() {
            let Some(at) = relay_names.iter().position(|n| n == r) else {
                let some: Vec<&str> = relay_names.iter().take(6).map(|s| s.as_str()).collect();
                return Err(ScenarioError::new(
                    source,
                    format!("cpu.machines[{i}].relays[{k}]"),
                    format!(
                        "no relay is named {} (relays are named as in relays.csv, such as {})",
                        crate::validate::shown(r),
                        some.join(", ")
                    ),
                ));
            };
            machine_of[at] = machines.len() - 1;
        }
    }
    for (r, m) in machine_of.iter_mut().enumerate() {
        if *m == usize::MAX {
            machines.push((format!("{}-machine", relay_names[r]), spec.cores));
            *m = machines.len() - 1;
        }
    }
    let workers = machine_of
        .iter()
        .map(|&m| spec.workers.unwrap_or(machines[m].1.min(16) + 1))
        .collect();
    Ok(PlannedCpu {
        profile: spec.profile,
        costs,
        calibration: format!("{reference} ({})", calibration.machine),
        share_window_ns: spec.share_window.0,
        machines,
        machine_of,
        workers,
    })
}
