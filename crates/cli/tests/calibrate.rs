//! `onionlab calibrate` as a user runs it: the file it writes loads as a calibration, and an
//! existing file is not overwritten by accident.

use std::fs;
use std::process::{Command, Output};

use onionlab_torcore::cpu::CpuCalibration;

fn onionlab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_onionlab"))
        .args(args)
        .output()
        .expect("onionlab runs")
}

#[test]
fn calibrate_writes_a_loadable_file_and_keeps_an_existing_one() {
    let dir = std::env::temp_dir().join(format!("onionlab-cli-{}-calibrate", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    let file = dir.join("cpu.yaml");
    let path = file.to_str().unwrap();

    let out = onionlab(&["calibrate", "--quick", "--cell-other", "250", "-o", path]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = fs::read_to_string(&file).unwrap();
    let cal: CpuCalibration =
        serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(cal.costs.out_of_range(), None, "{text}");
    assert_eq!(cal.costs.cell_other, 250.0);
    assert!(cal.notes["cell_other"].contains("--cell-other"), "{text}");
    // The table names every cost.
    for (name, _) in cal.costs.named() {
        assert!(stdout.contains(name), "{name} missing from\n{stdout}");
    }

    let again = onionlab(&["calibrate", "--quick", "-o", path]);
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert_eq!(again.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--force"), "{stderr}");
    assert_eq!(
        fs::read_to_string(&file).unwrap(),
        text,
        "the file was kept"
    );

    let bad = onionlab(&[
        "calibrate",
        "--quick",
        "--force",
        "--cell-other=-1",
        "-o",
        path,
    ]);
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(bad.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--cell-other -1"), "{stderr}");
    assert_eq!(fs::read_to_string(&file).unwrap(), text);

    // Without --cell-other, the reference calibration's value, said so in the notes; and the
    // file loads in a scenario.
    let own = dir.join("own.yaml");
    let out = onionlab(&["calibrate", "--quick", "-o", own.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cal: CpuCalibration = serde_saphyr::from_str(&fs::read_to_string(&own).unwrap()).unwrap();
    assert!(
        cal.notes["cell_other"].contains("carried over from data:cpu/"),
        "{}",
        cal.notes["cell_other"]
    );
    let scenario = dir.join("lan.yaml");
    fs::write(
        &scenario,
        "run: { seed: 1, stop_time: 3s, bootstrap: 1s }
relays:
  generate: { guard: 1, exit: 1, middle: 1, bandwidth: { fixed: 10 MiB/s } }
servers:
  - { name: web, count: 1, bandwidth: 1 Gbit }
clients:
  - { name: web, count: 1, workload: { bulk: { size: 1 MiB } } }
cpu: { calibration: own.yaml }
",
    )
    .unwrap();
    let run = onionlab(&[
        "run",
        scenario.to_str().unwrap(),
        "-o",
        dir.join("out").to_str().unwrap(),
        "--quiet",
        "--no-report",
    ]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let json = fs::read_to_string(dir.join("out/run.json")).unwrap();
    assert!(json.contains("\"calibration\": \"own.yaml ("), "{json}");
    let relays = fs::read_to_string(dir.join("out/relays.csv")).unwrap();
    assert!(relays.lines().next().unwrap().ends_with(",onion_skins"));

    let _ = fs::remove_dir_all(&dir);
}
