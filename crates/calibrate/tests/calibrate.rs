//! A quick calibration of the machine the tests run on: every cost usable, the file it makes
//! loadable. Timings on a shared CI machine are noisy, so only properties that hold by wide
//! margins are checked, not values.

use onionlab_calibrate::{calibrate, to_yaml, Options};
use onionlab_torcore::cpu::{CpuCalibration, CALIBRATION_FORMAT};

#[test]
fn quick_calibration_is_usable_and_round_trips() {
    let opts = Options {
        quick: true,
        cell_other_ns: 123.5,
    };
    let mut steps = Vec::new();
    let cal = calibrate(&opts, &mut |s| steps.push(s.to_string()));
    assert!(steps.len() >= 8, "progress: {steps:?}");

    assert_eq!(cal.format, CALIBRATION_FORMAT);
    for (name, v) in cal.costs.named() {
        assert!(v.is_finite() && v >= 0.0, "{name} = {v}");
        assert!(cal.notes.contains_key(name), "no note for {name}");
    }
    assert_eq!(cal.costs.out_of_range(), None);
    assert_eq!(cal.costs.cell_other, 123.5);
    assert_eq!(cal.costs.offload_call, cal.costs.syscall);
    assert_eq!(cal.costs.offload_byte, 0.0);
    // Operations that cannot be free on any machine.
    assert!(cal.costs.syscall > 0.0);
    assert!(cal.costs.ntor > 0.0);
    assert!(cal.costs.soft_ctr_byte > 0.0);

    for name in ["cell_other", "offload_call", "offload_byte"] {
        assert!(!cal.spread.contains_key(name), "{name} is not measured");
    }
    for (name, s) in &cal.spread {
        assert_eq!(s.runs, 7, "{name}");
        assert!(
            s.p10.is_finite() && s.p10 >= 0.0 && s.p10 <= s.p90,
            "{name}: {s:?}"
        );
    }

    // Native counter mode interleaves blocks and pays one call per cell; the hand-built one
    // pays a call per 16 bytes. With AES-NI the gap is several-fold, far beyond noise. An
    // unoptimized build times the compiler's output rather than the CPU (the generic cipher
    // code is slower than the hand loop there), so only optimized builds are held to it.
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    if std::arch::is_x86_feature_detected!("aes") {
        assert!(cal.machine.ends_with("AES-NI yes"), "{}", cal.machine);
        if !cfg!(debug_assertions) {
            assert!(
                cal.costs.aes_byte < cal.costs.soft_ctr_byte,
                "aes_byte {} >= soft_ctr_byte {}",
                cal.costs.aes_byte,
                cal.costs.soft_ctr_byte
            );
        }
    }

    let text = to_yaml(&cal);
    let back: CpuCalibration =
        serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(back, cal);
}
