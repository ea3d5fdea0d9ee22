//! Named network namespaces (as `ip netns` keeps them under /run/netns) and running code in
//! them.
//!
//! The emulator stays in the root namespace itself and never changes it: it creates
//! namespaces, builds links inside them with `ip -n`, and opens the sockets it needs there from
//! short-lived threads that have entered the namespace. A socket keeps the namespace it was
//! created in, so it can be used from any thread afterwards.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::Command;

/// Where `ip netns` keeps its namespace handles.
pub const NETNS_DIR: &str = "/run/netns";

/// The handle file of a named namespace.
pub fn path(name: &str) -> PathBuf {
    PathBuf::from(NETNS_DIR).join(name)
}

/// Whether a namespace of this name exists.
pub fn exists(name: &str) -> bool {
    path(name).exists()
}

/// Names of all namespaces whose name starts with `prefix`.
pub fn list(prefix: &str) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(NETNS_DIR) else {
        return Vec::new();
    };
    let mut names: Vec<String> = dir
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with(prefix))
        .collect();
    names.sort();
    names
}

/// Runs a command to completion, feeding it `input` on stdin, and returns its stdout. A
/// failure to start, or a non-zero exit, is an error naming the command and carrying what it
/// printed on stderr.
pub fn run(cmd: &mut Command, input: Option<&[u8]>) -> Result<Vec<u8>, String> {
    use std::io::Write;
    use std::process::Stdio;
    let name = format!(
        "`{} {}`",
        cmd.get_program().to_string_lossy(),
        cmd.get_args()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ")
    );
    let mut child = cmd
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {name}: {e}"))?;
    if let (Some(bytes), Some(mut stdin)) = (input, child.stdin.take()) {
        stdin
            .write_all(bytes)
            .map_err(|e| format!("{name}: cannot write its input: {e}"))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("{name}: {e}"))?;
    if out.status.success() {
        Ok(out.stdout)
    } else {
        Err(format!(
            "{name} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Runs `ip` with `args`.
pub fn ip(args: &[&str]) -> Result<(), String> {
    run(Command::new("ip").args(args), None).map(drop)
}

/// Creates a namespace and brings its loopback up.
pub fn add(name: &str) -> Result<(), String> {
    ip(&["netns", "add", name])?;
    ip(&["-n", name, "link", "set", "lo", "up"])
}

/// Deletes a namespace; its interfaces (and the veth peers of those) go with it.
pub fn delete(name: &str) -> Result<(), String> {
    ip(&["netns", "delete", name])
}

/// PIDs of the processes inside a namespace.
pub fn pids(name: &str) -> Vec<i32> {
    Command::new("ip")
        .args(["netns", "pids", name])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Moves the calling thread into a namespace. Only this thread changes; new sockets it opens
/// belong to the namespace.
pub fn enter(name: &str) -> io::Result<()> {
    let file = File::open(path(name))
        .map_err(|e| io::Error::new(e.kind(), format!("namespace {name}: {e}")))?;
    // SAFETY: setns on a valid namespace file descriptor only changes this thread's namespace.
    if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("setns into {name}: {e}")));
    }
    Ok(())
}

/// Runs `f` on a fresh thread inside namespace `name` and returns its result.
pub fn run_in<T, F>(name: &str, f: F) -> io::Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> io::Result<T> + Send + 'static,
{
    spawn_in(name, f)?
        .join()
        .map_err(|_| io::Error::other("thread in namespace panicked"))?
}

/// Starts `f` on a new thread inside namespace `name`.
pub fn spawn_in<T, F>(name: &str, f: F) -> io::Result<std::thread::JoinHandle<io::Result<T>>>
where
    T: Send + 'static,
    F: FnOnce() -> io::Result<T> + Send + 'static,
{
    let name = name.to_string();
    std::thread::Builder::new()
        .name(format!("ns-{name}"))
        .spawn(move || {
            enter(&name)?;
            f()
        })
}
