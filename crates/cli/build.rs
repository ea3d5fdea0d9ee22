//! Records the git commit the binary is built from, for `--version` and `run.json`: a result
//! is only reproducible when it names the exact code that produced it.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    let commit = match git(&["rev-parse", "--short=12", "HEAD"]) {
        Some(hash) if !hash.is_empty() => {
            // Untracked files do not change the build; modified tracked ones do.
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            if dirty {
                format!("{hash}-modified")
            } else {
                hash
            }
        }
        // A source tree without git (an unpacked archive) says so rather than guessing.
        _ => "unknown".to_string(),
    };
    println!("cargo:rustc-env=ONIONLAB_COMMIT={commit}");

    // Rebuild the stamp when HEAD moves or when any tracked file changes, so that the
    // `-modified` mark is never stale.
    if let Some(git_dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        let git_dir = Path::new(&git_dir);
        let mut watch = vec![
            git_dir.join("HEAD"),
            git_dir.join("index"),
            git_dir.join("packed-refs"),
        ];
        if let Some(reference) = git(&["symbolic-ref", "-q", "HEAD"]) {
            watch.push(git_dir.join(reference));
        }
        if let (Some(top), Some(files)) =
            (git(&["rev-parse", "--show-toplevel"]), git(&["ls-files"]))
        {
            watch.extend(files.lines().map(|f| Path::new(&top).join(f)));
        }
        // Cargo reruns on every build for a watched path that does not exist.
        for path in watch.iter().filter(|p| p.exists()) {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
}
