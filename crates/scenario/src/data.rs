//! Finding the files a scenario refers to, and reading the relays CSV.
//!
//! Scenarios name shared inputs by short aliases (`internet-2018`, `relays-2018`,
//! `consensus-2023`) or `data:<path>` so that the same file works from any checkout; anything
//! else is a path relative to the scenario file, as a reader of the file would expect.

use std::path::{Path, PathBuf};

/// Short names for the shared data files, per kind of reference.
pub(crate) const GRAPH_ALIASES: &[(&str, &str)] = &[(
    "internet-2018",
    "topology/internet-2018-183-nodes.graphml.xml.xz",
)];
pub(crate) const RELAYS_ALIASES: &[(&str, &str)] =
    &[("relays-2018", "relays/relays-2018-1998.csv")];
pub(crate) const CONSENSUS_ALIASES: &[(&str, &str)] = &[
    ("consensus-2023", "consensus/2023-06-01-10-00-00-consensus"),
    ("consensus-2022", "consensus/2022-11-19-10-00-00-consensus"),
    (
        "consensus-2019-microdesc",
        "consensus/2019-12-15-13-00-00-microdesc-consensus",
    ),
];

/// The `shared/data` folder: searched from the scenario's folder, then the working directory,
/// then this crate's source folder (so built-in scenarios work from a development checkout).
pub(crate) fn shared_data(source: &Path) -> Option<PathBuf> {
    let dir = source.parent().filter(|p| !p.as_os_str().is_empty());
    if let Some(d) = dir.and_then(onionlab_topology::find_shared_data) {
        return Some(d);
    }
    if let Some(d) = std::env::current_dir()
        .ok()
        .and_then(|c| onionlab_topology::find_shared_data(&c))
    {
        return Some(d);
    }
    onionlab_topology::find_shared_data(Path::new(env!("CARGO_MANIFEST_DIR")))
}

/// Turns a file reference into an existing path, or explains what was expected.
pub(crate) fn resolve_file(
    spec: &str,
    source: &Path,
    aliases: &[(&str, &str)],
) -> Result<PathBuf, String> {
    let alias_names = || {
        aliases
            .iter()
            .map(|(a, _)| *a)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let in_data = aliases
        .iter()
        .find(|(a, _)| *a == spec)
        .map(|(_, p)| *p)
        .or_else(|| spec.strip_prefix("data:"));
    if let Some(rel) = in_data {
        let data = shared_data(source).ok_or_else(|| {
            format!(
                "{spec:?} refers to the shared data folder, which was not found (set \
                 ONIONLAB_SHARED to the folder holding data/)"
            )
        })?;
        let p = data.join(rel);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!("{spec:?}: file {} does not exist", p.display()))
        };
    }
    if spec.is_empty() {
        return Err(format!(
            "a file path (relative to the scenario file), data:<path in shared/data>, or one of: {}",
            alias_names()
        ));
    }
    let p = Path::new(spec);
    let p = if p.is_absolute() {
        p.to_path_buf()
    } else {
        source
            .parent()
            .map(|d| d.join(p))
            .unwrap_or_else(|| p.to_path_buf())
    };
    if p.is_file() {
        Ok(p)
    } else {
        Err(format!(
            "file {} does not exist (expected a path relative to the scenario file, \
             data:<path in shared/data>, or one of: {})",
            p.display(),
            alias_names()
        ))
    }
}

/// One relay row of a relays CSV, in the units the file uses (KiB/s).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct CsvRelay {
    pub country: Option<String>,
    pub guard: bool,
    pub exit: bool,
    pub rate_kib: u64,
    pub burst_kib: u64,
    pub link_up_kib: u64,
    pub link_down_kib: u64,
}

/// Reads the tmodel-ccs2018 relays CSV by column name, so reordered or extra columns are fine.
pub(crate) fn read_relays_csv(path: &Path) -> Result<Vec<CsvRelay>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut lines = text.lines().enumerate();
    let (_, header) = lines
        .next()
        .ok_or_else(|| format!("{} is empty", path.display()))?;
    let cols: Vec<&str> = header.split(',').map(str::trim).collect();
    let col = |name: &str| {
        cols.iter()
            .position(|c| *c == name)
            .ok_or_else(|| format!("{}: no column {name:?} in the header", path.display()))
    };
    let (cc, is_exit, is_guard) = (col("CCode")?, col("IsExit")?, col("IsGuard")?);
    let (rate, burst) = (col("Rate(KiB/s)")?, col("Burst(KiB/s)")?);
    let (up, down) = (col("LinkUp(KiB/s)")?, col("LinkDown(KiB/s)")?);
    let mut out = Vec::new();
    for (i, line) in lines {
        if line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        let get = |c: usize| {
            f.get(c)
                .copied()
                .ok_or_else(|| format!("{}:{}: too few columns", path.display(), i + 1))
        };
        let num = |c: usize| -> Result<u64, String> {
            let v = get(c)?;
            v.parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x >= 0.0)
                .map(|x| x.round() as u64)
                .ok_or_else(|| {
                    format!(
                        "{}:{}: column {:?} is not a non-negative number: {v:?}",
                        path.display(),
                        i + 1,
                        cols[c]
                    )
                })
        };
        let flag = |c: usize| -> Result<bool, String> { Ok(get(c)?.eq_ignore_ascii_case("true")) };
        let country = get(cc)?;
        out.push(CsvRelay {
            country: (!country.is_empty()).then(|| country.to_ascii_uppercase()),
            guard: flag(is_guard)?,
            exit: flag(is_exit)?,
            rate_kib: num(rate)?,
            burst_kib: num(burst)?,
            link_up_kib: num(up)?,
            link_down_kib: num(down)?,
        });
    }
    if out.is_empty() {
        return Err(format!("{} has no relay rows", path.display()));
    }
    Ok(out)
}
