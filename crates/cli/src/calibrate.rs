//! `onionlab calibrate`: measure this machine's unit costs and write them as a calibration
//! file for scenarios to load.

use std::fs::OpenOptions;
use std::io::{ErrorKind, Write};
use std::path::PathBuf;

use onionlab_calibrate::{calibrate as measure, to_yaml, Options};
use onionlab_torcore::cpu::{CpuCalibration, MAX_UNIT_COST_NS};

use crate::Failure;

#[derive(clap::Args)]
pub(crate) struct CalibrateArgs {
    /// Calibration file to write.
    #[arg(short, long, value_name = "FILE", default_value = "cpu-profile.yaml")]
    pub output: PathBuf,
    /// Fewer, shorter timings (about a second instead of several): a first look, noisier.
    #[arg(long)]
    pub quick: bool,
    /// tor's own work per cell in ns, which cannot be measured without tor (default: the
    /// shipped reference calibration's, fitted to real tor; see docs/src/fidelity.md).
    #[arg(long, value_name = "NS")]
    pub cell_other: Option<f64>,
    /// Replace an existing calibration file.
    #[arg(long)]
    pub force: bool,
}

pub(crate) fn calibrate(args: CalibrateArgs) -> Result<(), Failure> {
    let (cell_other, source) = match args.cell_other {
        Some(ns) if !(0.0..=MAX_UNIT_COST_NS).contains(&ns) => {
            return Err(Failure::input(format!(
                "--cell-other {ns}: a cost in ns from 0 to {MAX_UNIT_COST_NS}"
            )));
        }
        Some(ns) => (ns, "from onionlab calibrate --cell-other".to_string()),
        None => {
            let reference = reference_calibration();
            (
                reference.costs.cell_other,
                format!(
                    "carried over from {} ({}, {})",
                    onionlab_scenario::cpu::DEFAULT_CALIBRATION,
                    reference.machine,
                    reference.measured
                ),
            )
        }
    };
    // Refused before measuring, so a forgotten --force costs no waiting; the write below
    // checks again without racing another writer.
    if !args.force && args.output.exists() {
        return Err(exists(&args.output));
    }
    if cfg!(debug_assertions) {
        eprintln!(
            "warning: this onionlab is an unoptimized build: its timings measure the compiler's \
             output, not the machine; build with --release to calibrate"
        );
    }
    let opts = Options {
        quick: args.quick,
        cell_other_ns: cell_other,
    };
    let mut cal = measure(&opts, &mut |step| eprintln!("measuring {step}"));
    cal.notes.insert(
        "cell_other".into(),
        format!(
            "given, not measured: tor's own per-cell work (queues, scheduler, buffers) cannot \
             be measured without tor; {cell_other} ns {source}"
        ),
    );

    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .create_new(!args.force)
        .open(&args.output)
        .map_err(|e| match e.kind() {
            ErrorKind::AlreadyExists => exists(&args.output),
            _ => Failure::input(format!("{}: {e}", args.output.display())),
        })?;
    file.write_all(to_yaml(&cal).as_bytes())
        .map_err(|e| Failure::internal(format!("{}: {e}", args.output.display())))?;

    print!("{}", table(&cal));
    println!("wrote {}", args.output.display());
    Ok(())
}

/// The calibration shipped in the binary, whose `cell_other` was fitted to real tor.
fn reference_calibration() -> CpuCalibration {
    let path = onionlab_scenario::cpu::DEFAULT_CALIBRATION
        .strip_prefix("data:")
        .expect("the default calibration is a data: reference");
    let file = onionlab_data::embedded(path).expect("the reference calibration is shipped");
    onionlab_scenario::cpu::load_calibration(&onionlab_data::Input::Embedded(file))
        .expect("the shipped calibration loads (tested)")
}

fn exists(path: &std::path::Path) -> Failure {
    Failure::input(format!(
        "{} exists; pass --force to replace it, or -o to write elsewhere",
        path.display()
    ))
}

/// The costs as a terminal table: median and spread, or where an unmeasured cost came from.
fn table(cal: &CpuCalibration) -> String {
    let mut out = format!(
        "{}\n{}\n\n{:<14} {:>10} {:>10} {:>10}  (ns per operation)\n",
        cal.machine, cal.measured, "cost", "median", "p10", "p90"
    );
    for (name, median) in cal.costs.named() {
        let line = match cal.spread.get(name) {
            Some(s) => format!("{name:<14} {median:>10} {:>10} {:>10}", s.p10, s.p90),
            None => {
                let why = match name {
                    "cell_other" => "given (--cell-other or the reference)",
                    "offload_call" => "= syscall (no crypto unit)",
                    "offload_byte" => "no crypto unit",
                    _ => "not measured",
                };
                format!("{name:<14} {median:>10} {:>10} {:>10}  {why}", "-", "-")
            }
        };
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}
