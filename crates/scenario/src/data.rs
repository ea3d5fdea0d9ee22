//! Finding the files a scenario refers to, and reading the relays CSV.
//!
//! Scenarios name shipped inputs by short aliases (`internet-geo`, `relays-2018`,
//! `consensus-2023`) or `data:<path>`; both resolve to files compiled into the binary (see the
//! `onionlab-data` crate), so they work from any directory. Anything else is a path relative to
//! the scenario file, as a reader of the file would expect.

use std::path::Path;

use onionlab_data::Input;

/// Short names for the shipped data files, per kind of reference: paths under `data/`.
pub(crate) const GRAPH_ALIASES: &[(&str, &str)] = &[
    (
        "internet-2018",
        "topology/internet-2018-183-nodes.graphml.xml.xz",
    ),
    (
        "internet-geo",
        "topology/internet-geo-183-nodes.graphml.xml.xz",
    ),
];
pub(crate) const RELAYS_ALIASES: &[(&str, &str)] =
    &[("relays-2018", "relays/relays-2018-1998.csv")];
pub(crate) const CONSENSUS_ALIASES: &[(&str, &str)] = &[
    (
        "consensus-2023",
        "consensus/2023-06-01-10-00-00-consensus.xz",
    ),
    (
        "consensus-2022",
        "consensus/2022-11-19-10-00-00-consensus.xz",
    ),
    (
        "consensus-2019-microdesc",
        "consensus/2019-12-15-13-00-00-microdesc-consensus.xz",
    ),
];

/// Tor's IPv4 country tables (`relays.sample.geoip`), named by year; each is the table tor
/// shipped nearest the day of a shipped consensus (see data/SOURCES.md).
pub(crate) const GEOIP_ALIASES: &[(&str, &str)] = &[
    ("geoip-2021", "geoip/geoip-2021-03-12.xz"),
    ("geoip-2022", "geoip/geoip-2022-12-06.xz"),
    ("geoip-2023", "geoip/geoip-2023-06-01.xz"),
];

/// The shipped country table nearest a consensus's valid-after day (`YYYY-MM-DD...`); the
/// newest when the day is missing or unreadable. Tables are named by their day, so the day is
/// read from the path.
pub(crate) fn nearest_geoip(valid_after: Option<&str>) -> &'static str {
    let days = |text: &str| -> Option<i64> {
        let y: i64 = text.get(..4)?.parse().ok()?;
        let m: i64 = text.get(5..7)?.parse().ok()?;
        let d: i64 = text.get(8..10)?.parse().ok()?;
        Some(y * 372 + m * 31 + d)
    };
    let newest = GEOIP_ALIASES[GEOIP_ALIASES.len() - 1].0;
    let Some(day) = valid_after.and_then(days) else {
        return newest;
    };
    GEOIP_ALIASES
        .iter()
        .filter_map(|(alias, path)| {
            let at = path.rfind("geoip-")? + "geoip-".len();
            Some(((days(&path[at..])? - day).abs(), *alias))
        })
        .min()
        .map_or(newest, |(_, alias)| alias)
}

/// The PrivCount traffic models (tmodel-ccs2018): the best stream and packet models the
/// release names, and the initial models the learning started from.
pub(crate) const STREAM_MODEL_ALIASES: &[(&str, &str)] = &[
    (
        "privcount-2018-stream",
        "workload/privcount-2018-stream-model-best.json",
    ),
    (
        "privcount-2018-stream-initial",
        "workload/privcount-2018-stream-model-initial.json",
    ),
];
pub(crate) const PACKET_MODEL_ALIASES: &[(&str, &str)] = &[
    (
        "privcount-2018-packet",
        "workload/privcount-2018-packet-model-best.json",
    ),
    (
        "privcount-2018-packet-initial",
        "workload/privcount-2018-packet-model-initial.json",
    ),
];

/// Turns a file reference into a readable input, or explains what was expected.
pub(crate) fn resolve_file(
    spec: &str,
    source: &Path,
    aliases: &[(&str, &str)],
) -> Result<Input, String> {
    let expected = || {
        let names: Vec<&str> = aliases.iter().map(|(a, _)| *a).collect();
        format!(
            "expected a path relative to the scenario file, data:<path of a file shipped in \
             data/>, or one of: {}",
            names.join(", ")
        )
    };
    let shipped = aliases
        .iter()
        .find(|(a, _)| *a == spec)
        .map(|(_, p)| *p)
        .or_else(|| spec.strip_prefix("data:"));
    if let Some(rel) = shipped {
        return onionlab_data::embedded(rel)
            .map(Input::Embedded)
            .ok_or_else(|| {
                let names: Vec<&str> = onionlab_data::FILES.iter().map(|f| f.path).collect();
                format!(
                    "{}: onionlab ships no such file (the shipped files are data:{})",
                    crate::validate::shown(spec),
                    names.join(", data:")
                )
            });
    }
    if spec.is_empty() {
        return Err(expected());
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
    match onionlab_data::check_regular_file(&p) {
        Ok(()) => Ok(Input::File(p)),
        // A path of megabytes is a hostile one; the usual path is shown whole.
        Err(why) if spec.len() > 4096 => Err(format!(
            "file {}: {why} ({})",
            crate::validate::shown(spec),
            expected()
        )),
        Err(why) => Err(format!("file {}: {why} ({})", p.display(), expected())),
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
pub(crate) fn read_relays_csv(input: &Input) -> Result<Vec<CsvRelay>, String> {
    let bytes = input
        .read()
        .map_err(|e| format!("cannot read {input}: {e}"))?;
    let text = onionlab_data::utf8_text(bytes).map_err(|e| format!("{input} {e}"))?;
    let mut lines = text.lines().enumerate();
    let (_, header) = lines.next().ok_or_else(|| format!("{} is empty", input))?;
    let cols: Vec<&str> = header.split(',').map(str::trim).collect();
    let col = |name: &str| {
        cols.iter()
            .position(|c| *c == name)
            .ok_or_else(|| format!("{}: no column {name:?} in the header", input))
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
                .ok_or_else(|| format!("{}:{}: too few columns", input, i + 1))
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
                        input,
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
        return Err(format!("{} has no relay rows", input));
    }
    Ok(out)
}
