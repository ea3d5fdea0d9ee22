//! Builds the shim (`shim/shim.c`) into a shared library with the system's C compiler; the
//! crate embeds it (`SHIM_LIBRARY`) and writes it out for each run.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=shim/shim.c");
    println!("cargo:rerun-if-changed=shim/shared.h");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let library = out.join("libonionlab_shim.so");
    let compiler = cc::Build::new().get_compiler();
    let mut cmd: Command = compiler.to_command();
    cmd.args([
        "-shared",
        "-fPIC",
        "-O2",
        "-g0",
        "-Wall",
        "-Wextra",
        "-fvisibility=hidden",
        "-fno-stack-protector",
        "-Wl,-z,now",
        "-Wl,--build-id=none",
        "-o",
    ])
    .arg(&library)
    .arg("shim/shim.c");
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("cannot run the C compiler for the shim: {e}"));
    assert!(status.success(), "the shim (shim/shim.c) did not compile");
}
