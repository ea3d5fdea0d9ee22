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

    let _ = fs::remove_dir_all(&dir);
}
