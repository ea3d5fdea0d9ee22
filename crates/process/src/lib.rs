//! Real Linux programs in onionlab's simulated time, on onionlab's side.
//!
//! A managed process is an ordinary dynamically linked program started with onionlab's shim
//! preloaded (`shim/shim.c`, built into [`SHIM_LIBRARY`]). The shim traps every system call
//! the program makes (a seccomp filter lets through only the shim's own), answers the time
//! from a page it shares with onionlab, runs the process's own memory and file calls natively,
//! and hands the rest to onionlab as a request on the shared page. The process and onionlab take
//! turns: while onionlab decides a call, every thread of the process waits on its own futex
//! word in the page; while one thread runs (the one onionlab gave the turn), onionlab waits on
//! the page's `turn` word. [`ManagedProcess`] is onionlab's end of that exchange;
//! what a call does is the simulated kernel's business (`onionlab-kernel`), and when it runs
//! is the process host's (`onionlab-tor`'s `process` module).
//!
//! Linux on x86-64 only: the shim reads the machine's registers and the filter checks the
//! architecture.

mod binary;
mod managed;
pub mod programs;
pub mod shared;

pub use binary::check_binary;
pub use managed::{Exit, ManagedProcess, ProcessError, ProcessSpec, Request, Turn};

/// The shim, as built from `shim/shim.c` by the crate's build script.
pub const SHIM_LIBRARY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libonionlab_shim.so"));

/// The environment variable that tells the shim which descriptor holds the shared page.
pub const SHM_FD_VARIABLE: &str = "ONIONLAB_SHM_FD";
/// The environment variable that names the hosts file the shim opens for `/etc/hosts`.
pub const HOSTS_VARIABLE: &str = "ONIONLAB_HOSTS";

/// Writes the shim into `dir` (which must exist) and returns its path. The library is the
/// same bytes for every run, so that a run's directory is all a process needs.
pub fn install_shim(dir: &std::path::Path) -> std::io::Result<std::path::PathBuf> {
    let path = dir.join("libonionlab-shim.so");
    std::fs::write(&path, SHIM_LIBRARY)?;
    Ok(path)
}
