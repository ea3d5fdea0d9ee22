//! The API documentation builds without a warning: `cargo doc --workspace --no-deps` with
//! `RUSTDOCFLAGS="-D warnings"`, so a broken intra-doc link, a bare URL or an unclosed HTML tag
//! in any crate's docs fails the suite instead of rotting quietly.
//!
//! It runs the same cargo that runs the tests, from the workspace root, into its own target
//! directory (`target/rustdoc-check`) so that it neither waits on nor disturbs the build that
//! runs the tests. The first run checks the dependencies in debug mode (a few minutes on two
//! cores); later runs only document the workspace's crates again.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// The cargo to run: the one running the tests (`CARGO` at run time), else the one that
/// built them, else whichever is on `PATH`.
fn cargo() -> PathBuf {
    if let Some(c) = std::env::var_os("CARGO") {
        return PathBuf::from(c);
    }
    let built_by = Path::new(env!("CARGO"));
    if built_by.exists() {
        return built_by.to_path_buf();
    }
    PathBuf::from("cargo")
}

#[test]
fn the_api_docs_build_without_warnings() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let target = workspace.join("target").join("rustdoc-check");
    let started = Instant::now();
    let out = Command::new(cargo())
        .current_dir(&workspace)
        .args(["doc", "--workspace", "--no-deps"])
        .args(["--quiet", "--color", "never"])
        .env("RUSTDOCFLAGS", "-D warnings")
        // Cargo prefers the encoded form over RUSTDOCFLAGS: drop one inherited from outside.
        .env_remove("CARGO_ENCODED_RUSTDOCFLAGS")
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .expect("cargo runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "`cargo doc --workspace --no-deps` with RUSTDOCFLAGS=\"-D warnings\" failed ({}); \
         fix the doc comments it names (rerun it by hand with \
         CARGO_TARGET_DIR=target/rustdoc-check to see the same):\n{stderr}",
        out.status
    );
    eprintln!(
        "rustdoc: the workspace documented without warnings in {:.0} s",
        started.elapsed().as_secs_f64()
    );
}
