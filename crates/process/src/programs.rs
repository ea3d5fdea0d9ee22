//! The repository's test programs (`programs/*.c`): small C programs that exercise managed
//! processes, built on demand with the system's C compiler so that tests, benchmarks and a
//! user trying the feature run the same code.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where the programs' sources are.
pub fn source_dir() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/programs"))
}

/// Builds test program `name` (`programs/<name>.c`, which may include `common.h`) into `dir`
/// unless a build newer than both is there, and returns the executable's path. Extra compiler arguments (`-pthread`)
/// may follow the source's name on a `// build:` line of its own in the source.
pub fn build(name: &str, dir: &Path) -> Result<PathBuf, String> {
    let src = source_dir().join(format!("{name}.c"));
    let exe = dir.join(name);
    let newer = |a: &Path, b: &Path| -> bool {
        let m = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        matches!((m(a), m(b)), (Some(x), Some(y)) if x >= y)
    };
    if newer(&exe, &src) && newer(&exe, &source_dir().join("common.h")) {
        return Ok(exe);
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let text = std::fs::read_to_string(&src).map_err(|e| format!("{}: {e}", src.display()))?;
    let extra: Vec<&str> = text
        .lines()
        .find_map(|l| l.strip_prefix("// build:"))
        .map(|l| l.split_whitespace().collect())
        .unwrap_or_default();
    // Built under a temporary name and renamed, so that tests building the same program at
    // once never run a half-written file.
    let tmp = dir.join(format!(".{name}.{}", std::process::id()));
    let status = Command::new("cc")
        .args(["-O2", "-Wall", "-o"])
        .arg(&tmp)
        .arg(&src)
        .args(extra)
        .status()
        .map_err(|e| format!("cannot run cc for {}: {e}", src.display()))?;
    if !status.success() {
        return Err(format!("{} did not compile", src.display()));
    }
    std::fs::rename(&tmp, &exe).map_err(|e| format!("{}: {e}", exe.display()))?;
    Ok(exe)
}
