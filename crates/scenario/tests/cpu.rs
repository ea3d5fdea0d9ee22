//! The `cpu:` section: the default calibration loads, a calibration file next to the scenario
//! loads with the scenario's own costs over it, relays are placed on their machines, and every
//! malformed value or file is refused naming the field or file.

use std::fs;
use std::path::{Path, PathBuf};

use onionlab_scenario::cpu::DEFAULT_CALIBRATION;
use onionlab_scenario::{load_graph, parse, resolve, Plan};
use onionlab_torcore::cpu::CpuProfile;

const BASE: &str = "run: { seed: 1, stop_time: 1m, bootstrap: 20s }
relays:
  generate: { guard: 2, exit: 2, middle: 2, bandwidth: { fixed: 10 MiB/s } }
servers:
  - { name: web, count: 1, bandwidth: 1 Gbit }
clients:
  - { name: web, count: 2, workload: { web: {} } }
";

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        let path = std::env::temp_dir().join(format!(
            "onionlab-scenario-cpu-{tag}-{}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn plan_at(source: &Path, cpu: &str) -> Result<Plan, String> {
    let text = format!("{BASE}{cpu}");
    let s = parse(&text, source).map_err(|e| e.to_string())?;
    let graph = load_graph(&s).map_err(|e| e.to_string())?;
    resolve(&s, &graph).map_err(|e| e.to_string())
}

fn plan(cpu: &str) -> Result<Plan, String> {
    plan_at(Path::new("inline.yaml"), cpu)
}

fn refused(cpu: &str) -> String {
    match plan(cpu) {
        Ok(_) => panic!("accepted:\n{cpu}"),
        Err(e) => e,
    }
}

/// A calibration as `onionlab calibrate` writes it, with `aes_byte` set to `aes_byte`.
fn calibration(aes_byte: &str) -> String {
    format!(
        "format: 2
machine: \"test machine\"
measured: \"2026-11-23\"
costs:
  syscall: 500
  kernel_packet: 3000
  tls_record: 250
  tls_byte: 0.5
  aes_call: 120
  aes_byte: {aes_byte}
  soft_ctr_byte: 4
  sha1_byte: 0.6
  ntor: 150000
  link_responder: 1200000
  link_initiator: 380000
  cell_other: 300
  user_packet: 40
  offload_call: 500
  offload_byte: 0
"
    )
}

#[test]
fn no_section_and_none_mean_no_model() {
    assert_eq!(plan("").unwrap().cpu, None);
    assert_eq!(plan("cpu: none\n").unwrap().cpu, None);
}

#[test]
fn the_default_calibration_is_shipped_and_machines_place_relays() {
    let p = plan(
        "cpu:
  machines:
    - { name: box, cores: 1, relays: [guard1, exit2] }
",
    )
    .unwrap();
    let cpu = p.cpu.unwrap();
    assert_eq!(cpu.profile, CpuProfile::NativeCtr);
    assert!(
        cpu.calibration.starts_with(DEFAULT_CALIBRATION),
        "{}",
        cpu.calibration
    );
    assert_eq!(cpu.costs.out_of_range(), None);
    assert!(cpu.costs.syscall > 0.0 && cpu.costs.ntor > 0.0);
    // The named machine first, then one 2-core machine (cpu.cores' default) per other relay.
    assert_eq!(cpu.machines[0], ("box".to_string(), 1));
    assert_eq!(cpu.machines.len(), 1 + p.relays.len() - 2);
    assert!(cpu.machines[1..].iter().all(|(_, cores)| *cores == 2));
    let on_box: Vec<&str> = p
        .relays
        .iter()
        .zip(&cpu.machine_of)
        .filter(|(_, &m)| m == 0)
        .map(|(r, _)| r.name.as_str())
        .collect();
    assert_eq!(on_box.len(), 2);
    assert!(on_box.contains(&"guard1") && on_box.contains(&"exit2"));
    // tor's default with NumCPUs unset: the machine's cores plus one.
    for (r, &m) in cpu.machine_of.iter().enumerate() {
        assert_eq!(cpu.workers[r], cpu.machines[m].1 + 1);
    }
}

#[test]
fn a_calibration_file_loads_with_the_scenarios_costs_over_it() {
    let tmp = TempDir::new("file");
    fs::write(tmp.0.join("cal.yaml"), calibration("0.25")).unwrap();
    let source = tmp.0.join("scenario.yaml");
    let p = plan_at(
        &source,
        "cpu:
  profile: kernel_bypass
  calibration: cal.yaml
  costs: { cell_other: 1000, user_packet: 0 }
  workers: 3
",
    )
    .unwrap();
    let cpu = p.cpu.unwrap();
    assert_eq!(cpu.profile, CpuProfile::KernelBypass);
    assert!(cpu.calibration.contains("test machine"));
    assert_eq!(cpu.costs.aes_byte, 0.25);
    assert_eq!(cpu.costs.syscall, 500.0);
    assert_eq!(cpu.costs.cell_other, 1000.0);
    assert_eq!(cpu.costs.user_packet, 0.0);
    assert!(cpu.workers.iter().all(|&w| w == 3));
}

#[test]
fn malformed_calibration_files_are_refused_naming_the_file() {
    let tmp = TempDir::new("broken");
    let source = tmp.0.join("scenario.yaml");
    let cases = [
        (
            "garbage.yaml",
            "this is: [not a calibration".to_string(),
            "garbage.yaml",
        ),
        (
            "negative.yaml",
            calibration("-1"),
            "costs.aes_byte: expected nanoseconds from 0",
        ),
        ("nan.yaml", calibration(".nan"), "costs.aes_byte"),
        (
            "format.yaml",
            calibration("0.25").replace("format: 2", "format: 7"),
            "format: expected 2, got 7",
        ),
        (
            "old.yaml",
            calibration("0.25").replace("format: 2", "format: 1"),
            "run `onionlab calibrate` again",
        ),
        (
            "missing.yaml",
            calibration("0.25").replace("  ntor: 150000\n", ""),
            "missing.yaml",
        ),
    ];
    for (file, text, expect) in cases {
        fs::write(tmp.0.join(file), text).unwrap();
        let err = plan_at(&source, &format!("cpu: {{ calibration: {file} }}\n")).unwrap_err();
        assert!(
            err.contains("cpu.calibration") && err.contains(expect),
            "{file}: {err}"
        );
    }
    let err = plan_at(&source, "cpu: { calibration: nowhere.yaml }\n").unwrap_err();
    assert!(
        err.contains("cpu.calibration") && err.contains("nowhere.yaml"),
        "{err}"
    );
}

#[test]
fn bad_values_are_refused_naming_the_field() {
    for (cpu, expect) in [
        ("cpu: fast\n", "expected `none` or a map"),
        ("cpu: { profile: quantum }\n", "cpu.profile"),
        (
            "cpu: { cores: 0 }\n",
            "cpu.cores: expected from 1 to 1024 cores, got 0",
        ),
        ("cpu: { cores: 1025 }\n", "cpu.cores"),
        (
            "cpu: { workers: 0 }\n",
            "cpu.workers: expected from 1 to 128",
        ),
        (
            "cpu: { share_window: 0s }\n",
            "cpu.share_window: expected from 1ms to 1s",
        ),
        ("cpu: { share_window: 2s }\n", "cpu.share_window"),
        (
            "cpu: { costs: { warp: 1 } }\n",
            "cpu.costs.warp: no such cost",
        ),
        (
            "cpu: { costs: { syscall: -5 } }\n",
            "cpu.costs.syscall: expected nanoseconds",
        ),
        ("cpu: { costs: { syscall: 2e9 } }\n", "cpu.costs.syscall"),
        ("cpu: { turbo: true }\n", "cpu.turbo"),
        (
            "cpu: { machines: [ { name: a, cores: 0, relays: [guard1] } ] }\n",
            "cpu.machines[0].cores",
        ),
        (
            "cpu: { machines: [ { name: a, cores: 2, relays: [] } ] }\n",
            "cpu.machines[0].relays",
        ),
        (
            "cpu: { machines: [ { name: a, cores: 2, relays: [guard1] }, \
             { name: a, cores: 2, relays: [exit1] } ] }\n",
            "cpu.machines[1].name",
        ),
        (
            "cpu: { machines: [ { name: a, cores: 2, relays: [guard1] }, \
             { name: b, cores: 2, relays: [guard1] } ] }\n",
            "cpu.machines[1].relays[0]: relay \"guard1\" is already on a machine",
        ),
        (
            "cpu: { machines: [ { name: a, cores: 2, relays: [nobody] } ] }\n",
            "cpu.machines[0].relays[0]: no relay is named \"nobody\"",
        ),
    ] {
        let err = refused(cpu);
        assert!(err.contains(expect), "{cpu}: {err}");
    }
}
