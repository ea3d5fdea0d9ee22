//! Reading run directories and sets of trials back.

use std::collections::BTreeMap;
use std::fs;
use std::io::BufRead;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::output::{
    io_err, OutputDir, ReportError, CIRCUITS_CSV, CIRCUITS_HEADER, CPU_COLUMNS, DIRECTION_COLUMN,
    DOWNLOADS_CSV, DOWNLOADS_HEADER, RELAYS_CSV, RELAYS_HEADER, REQUEST_COLUMN, RUN_JSON,
    THROUGHPUT_COLUMN, TRIALS_JSON,
};
use crate::records::{CircuitRecord, CpuShare, DownloadRecord, Outcome, RelaySample, RunInfo};

/// A finished (or partial) run directory read back.
#[derive(Clone, Debug, PartialEq)]
pub struct RunData {
    /// The run directory it was read from.
    pub dir: PathBuf,
    /// `run.json`: the scenario as run and how the run went.
    pub info: RunInfo,
    /// `downloads.csv`, bootstrap rows included, in file order.
    pub downloads: Vec<DownloadRecord>,
    /// `relays.csv`: every relay's every second.
    pub relays: Vec<RelaySample>,
    /// `circuits.csv`: every circuit the clients launched.
    pub circuits: Vec<CircuitRecord>,
}

impl RunData {
    /// Reads `run.json` and the three CSV files of `dir`.
    ///
    /// Columns are found by header name, so files with extra columns (tidy data may grow) still
    /// load; a missing required column, a missing file or an unparsable cell is an error naming
    /// the file and, for cells, the line and column. The optional columns are read where the
    /// files have them: `direction` of downloads.csv and the CPU columns of relays.csv, which
    /// come all seven or none (a file with only some of them is malformed).
    pub fn load(dir: &Path) -> Result<RunData, ReportError> {
        if !dir.is_dir() {
            return Err(ReportError::NoSuchDirectory(dir.to_path_buf()));
        }
        let run_json = dir.join(RUN_JSON);
        if !run_json.is_file() {
            return Err(ReportError::NotARunDirectory(dir.to_path_buf()));
        }
        let text = fs::read_to_string(&run_json).map_err(io_err(&run_json))?;
        let info: RunInfo = serde_json::from_str(&text).map_err(|source| ReportError::Json {
            path: run_json.clone(),
            source,
        })?;
        Ok(RunData {
            dir: dir.to_path_buf(),
            info,
            downloads: read_csv(
                &dir.join(DOWNLOADS_CSV),
                DOWNLOAD_COLUMNS,
                DOWNLOAD_OPTIONAL,
                download_row,
            )?,
            relays: read_csv(
                &dir.join(RELAYS_CSV),
                RELAY_COLUMNS,
                &[&CPU_COLUMNS],
                relay_row,
            )?,
            circuits: read_csv(&dir.join(CIRCUITS_CSV), CIRCUIT_COLUMNS, &[], circuit_row)?,
        })
    }

    /// Downloads that count for results: started after bootstrap.
    pub fn measured_downloads(&self) -> impl Iterator<Item = &DownloadRecord> {
        self.downloads.iter().filter(|d| !d.bootstrap)
    }
}

/// `trials.json`, written by `onionlab run --trials K` beside the trial directories:
/// `{"scenario": "toy", "trials": ["trial-1", "trial-2"], "seeds": [1, 2]}`.
///
/// `trials` are directory names relative to the file, in trial order; `seeds[i]` is the seed
/// trial `i` ran with (checked against its run.json, so a stale manifest is caught).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrialsManifest {
    /// The scenario every trial ran, by name.
    pub scenario: String,
    /// The trial directories, relative to the manifest, in trial order.
    pub trials: Vec<String>,
    /// The seed of each trial, in the same order.
    pub seeds: Vec<u64>,
}

impl OutputDir {
    /// Writes [`TRIALS_JSON`] (pretty, with a trailing newline).
    pub fn write_trials(&self, manifest: &TrialsManifest) -> Result<PathBuf, ReportError> {
        let mut text =
            serde_json::to_string_pretty(manifest).map_err(|source| ReportError::Json {
                path: self.path().join(TRIALS_JSON),
                source,
            })?;
        text.push('\n');
        self.write_bytes(TRIALS_JSON, text.as_bytes())
    }
}

/// A report's input: one run, or the trials of one scenario.
// One value per input directory, so the unboxed run costs nothing that matters, and matching on
// `Input::Run(run)` stays direct.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum Input {
    /// A single run directory.
    Run(RunData),
    /// A set of trials of one scenario.
    Trials {
        /// The directory holding the trials.
        dir: PathBuf,
        /// The scenario's name, shared by every trial.
        name: String,
        /// Every trial, in trial order.
        runs: Vec<RunData>,
    },
}

impl Input {
    /// The scenario name.
    pub fn label(&self) -> String {
        match self {
            Input::Run(run) => run.info.scenario_name.clone(),
            Input::Trials { name, .. } => name.clone(),
        }
    }

    /// The runs: one for a single run, every trial otherwise.
    pub fn runs(&self) -> &[RunData] {
        match self {
            Input::Run(run) => std::slice::from_ref(run),
            Input::Trials { runs, .. } => runs,
        }
    }

    /// The directory the input was read from.
    pub fn dir(&self) -> &Path {
        match self {
            Input::Run(run) => &run.dir,
            Input::Trials { dir, .. } => dir,
        }
    }

    /// Whether the input is a set of trials rather than a single run.
    pub fn is_trials(&self) -> bool {
        matches!(self, Input::Trials { .. })
    }
}

/// Loads a run directory, or a trials directory (one with `trials.json`, or failing that with
/// `trial-N` subdirectories holding runs, taken in numeric order).
pub fn load_input(dir: &Path) -> Result<Input, ReportError> {
    if !dir.is_dir() {
        return Err(ReportError::NoSuchDirectory(dir.to_path_buf()));
    }
    if dir.join(RUN_JSON).is_file() {
        return RunData::load(dir).map(Input::Run);
    }
    let manifest_path = dir.join(TRIALS_JSON);
    let (manifest, names) = if manifest_path.is_file() {
        let text = fs::read_to_string(&manifest_path).map_err(io_err(&manifest_path))?;
        let manifest: TrialsManifest =
            serde_json::from_str(&text).map_err(|source| ReportError::Json {
                path: manifest_path.clone(),
                source,
            })?;
        let invalid = |message: String| ReportError::Invalid {
            path: manifest_path.clone(),
            message,
        };
        if manifest.trials.is_empty() {
            return Err(invalid("lists no trials".into()));
        }
        if manifest.seeds.len() != manifest.trials.len() {
            return Err(invalid(format!(
                "lists {} trials but {} seeds",
                manifest.trials.len(),
                manifest.seeds.len()
            )));
        }
        for name in &manifest.trials {
            let bad = name.is_empty()
                || Path::new(name).components().count() != 1
                || name == ".."
                || name == ".";
            if bad {
                return Err(invalid(format!(
                    "trial {name:?} is not the name of a subdirectory"
                )));
            }
        }
        let names = manifest.trials.clone();
        (Some(manifest), names)
    } else {
        let names = discover_trials(dir)?;
        if names.is_empty() {
            return Err(ReportError::NotARunDirectory(dir.to_path_buf()));
        }
        (None, names)
    };

    let mut runs = Vec::with_capacity(names.len());
    for name in &names {
        let trial_dir = dir.join(name);
        if !trial_dir.is_dir() {
            return Err(ReportError::Invalid {
                path: manifest_path.clone(),
                message: format!(
                    "lists trial {name:?}, but {} does not exist",
                    trial_dir.display()
                ),
            });
        }
        runs.push(RunData::load(&trial_dir)?);
    }

    let scenario = match &manifest {
        Some(m) => m.scenario.clone(),
        None => runs[0].info.scenario_name.clone(),
    };
    for (i, run) in runs.iter().enumerate() {
        if run.info.scenario_name != scenario {
            return Err(ReportError::Invalid {
                path: dir.to_path_buf(),
                message: format!(
                    "trials of different scenarios cannot be mixed: {} ran scenario {:?}, \
                     expected {:?}",
                    names[i], run.info.scenario_name, scenario
                ),
            });
        }
        if let Some(m) = &manifest {
            if run.info.seed != m.seeds[i] {
                return Err(ReportError::Invalid {
                    path: manifest_path.clone(),
                    message: format!(
                        "gives seed {} for {}, but its run.json says seed {}",
                        m.seeds[i], names[i], run.info.seed
                    ),
                });
            }
        }
    }
    Ok(Input::Trials {
        dir: dir.to_path_buf(),
        name: scenario,
        runs,
    })
}

/// `trial-N` subdirectories that hold a run.json, by N.
fn discover_trials(dir: &Path) -> Result<Vec<String>, ReportError> {
    let mut found: BTreeMap<u64, String> = BTreeMap::new();
    for entry in fs::read_dir(dir).map_err(io_err(dir))? {
        let entry = entry.map_err(io_err(dir))?;
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        let Some(n) = name
            .strip_prefix("trial-")
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        if entry.path().join(RUN_JSON).is_file() {
            found.insert(n, name);
        }
    }
    Ok(found.into_values().collect())
}

// The loader requires exactly the columns the writer writes (extra columns are ignored).
const DOWNLOAD_COLUMNS: &[&str] = &DOWNLOADS_HEADER;
/// The columns later versions added to downloads.csv, each read where the file has it.
const DOWNLOAD_OPTIONAL: &[&[&str]] =
    &[&[DIRECTION_COLUMN], &[REQUEST_COLUMN], &[THROUGHPUT_COLUMN]];
const RELAY_COLUMNS: &[&str] = &RELAYS_HEADER;
const CIRCUIT_COLUMNS: &[&str] = &CIRCUITS_HEADER;

/// One data row, with cells looked up by the position of the required columns.
struct Row<'a> {
    record: &'a csv::StringRecord,
    /// Index in the record of each required column, in the order of the column list.
    index: &'a [usize],
    columns: &'a [&'a str],
    /// The same for the optional columns (every set's, one after the other), where the file
    /// has them.
    optional: &'a [Option<usize>],
    optional_columns: &'a [&'a str],
}

impl Row<'_> {
    /// Optional column `k`'s cell; `None` when the file has no such column.
    fn optional(&self, k: usize) -> Option<&str> {
        self.optional[k].map(|i| self.record.get(i).unwrap_or(""))
    }

    fn cell(&self, k: usize) -> &str {
        self.record.get(self.index[k]).unwrap_or("")
    }

    fn bad(&self, k: usize, expected: &str) -> String {
        format!(
            "column {}: {:?} is not {expected}",
            self.columns[k],
            self.cell(k)
        )
    }

    fn text(&self, k: usize) -> String {
        self.cell(k).to_string()
    }

    fn num<T: std::str::FromStr>(&self, k: usize, expected: &str) -> Result<T, String> {
        self.cell(k).parse().map_err(|_| self.bad(k, expected))
    }

    /// An empty cell is `None`: a value the run could not measure.
    fn opt_num<T: std::str::FromStr>(&self, k: usize, expected: &str) -> Result<Option<T>, String> {
        if self.cell(k).is_empty() {
            Ok(None)
        } else {
            self.num(k, expected).map(Some)
        }
    }

    fn f64(&self, k: usize) -> Result<f64, String> {
        let x: f64 = self.num(k, "a number")?;
        if x.is_finite() {
            Ok(x)
        } else {
            Err(self.bad(k, "a finite number"))
        }
    }

    fn opt_f64(&self, k: usize) -> Result<Option<f64>, String> {
        if self.cell(k).is_empty() {
            Ok(None)
        } else {
            self.f64(k).map(Some)
        }
    }

    /// Optional column `k` as a finite number that is not negative; `None` when the file has
    /// no such column or the cell is empty.
    fn optional_non_negative(&self, k: usize) -> Result<Option<f64>, String> {
        let Some(cell) = self.optional(k).filter(|c| !c.is_empty()) else {
            return Ok(None);
        };
        match cell.parse::<f64>() {
            Ok(x) if x.is_finite() && x >= 0.0 => Ok(Some(x)),
            _ => Err(format!(
                "column {}: {cell:?} is not a non-negative number",
                self.optional_columns[k]
            )),
        }
    }

    fn optional_count(&self, k: usize) -> Result<Option<u64>, String> {
        let Some(cell) = self.optional(k).filter(|c| !c.is_empty()) else {
            return Ok(None);
        };
        cell.parse().map(Some).map_err(|_| {
            format!(
                "column {}: {cell:?} is not a non-negative integer",
                self.optional_columns[k]
            )
        })
    }

    fn bool(&self, k: usize) -> Result<bool, String> {
        match self.cell(k) {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(self.bad(k, "true or false")),
        }
    }
}

fn download_row(r: &Row) -> Result<DownloadRecord, String> {
    Ok(DownloadRecord {
        client: r.text(0),
        group: r.text(1),
        size_bytes: r.num(2, "a byte count")?,
        start_s: r.f64(3)?,
        circuit_build_s: r.opt_f64(4)?,
        ttfb_s: r.opt_f64(5)?,
        ttlb_s: r.opt_f64(6)?,
        request_s: r.optional_non_negative(1)?,
        throughput_mbit_s: r.optional_non_negative(2)?,
        outcome: r
            .cell(7)
            .parse::<Outcome>()
            .map_err(|e| format!("column outcome: {e}"))?,
        server: r.text(8),
        guard: r.text(9),
        middle: r.text(10),
        exit: r.text(11),
        bootstrap: r.bool(12)?,
        upload: match r.optional(0) {
            None | Some("download") => false,
            Some("upload") => true,
            Some(other) => {
                return Err(format!(
                    "column {}: {other:?} is not download or upload",
                    r.optional_columns[0]
                ))
            }
        },
    })
}

fn relay_row(r: &Row) -> Result<RelaySample, String> {
    let count = "a non-negative integer";
    Ok(RelaySample {
        relay: r.text(0),
        second: r.num(1, count)?,
        bytes_read: r.num(2, count)?,
        bytes_written: r.num(3, count)?,
        cells_in: r.opt_num(4, count)?,
        cells_out: r.opt_num(5, count)?,
        queued_cells: r.opt_num(6, count)?,
        open_sockets: r.opt_num(7, count)?,
        socket_queued_bytes: r.opt_num(8, count)?,
        circuits_killed: r.opt_num(9, count)?,
        conn_limit_refusals: r.opt_num(10, count)?,
        cpu: cpu_share(r)?,
    })
}

/// The CPU columns, optional columns 0 to 6 of relays.csv: all empty (or absent) is a second
/// without a CPU measurement, all filled one with; a row with some of them is malformed.
fn cpu_share(r: &Row) -> Result<Option<CpuShare>, String> {
    let [busy, crypto, kernel, tls, other, workers] =
        [0, 1, 2, 3, 4, 5].map(|k| r.optional_non_negative(k));
    let onion_skins = r.optional_count(6);
    match (
        busy?,
        crypto?,
        kernel?,
        tls?,
        other?,
        workers?,
        onion_skins?,
    ) {
        (None, None, None, None, None, None, None) => Ok(None),
        (
            Some(busy),
            Some(crypto),
            Some(kernel),
            Some(tls),
            Some(other),
            Some(workers),
            Some(onion_skins),
        ) => Ok(Some(CpuShare {
            busy,
            crypto,
            kernel,
            tls,
            other,
            workers,
            onion_skins,
        })),
        _ => {
            let empty: Vec<&str> = (0..CPU_COLUMNS.len())
                .filter(|&k| r.optional(k).is_some_and(str::is_empty))
                .map(|k| r.optional_columns[k])
                .collect();
            Err(format!(
                "CPU column(s) {} empty while the others are not: a relay second has every CPU \
                 value or none",
                empty.join(", ")
            ))
        }
    }
}

fn circuit_row(r: &Row) -> Result<CircuitRecord, String> {
    let count = "a non-negative integer";
    Ok(CircuitRecord {
        client: r.text(0),
        circuit: r.num(1, count)?,
        purpose: r.text(2),
        guard: r.text(3),
        middle: r.text(4),
        exit: r.text(5),
        start_s: r.f64(6)?,
        build_s: r.opt_f64(7)?,
        outcome: r.text(8),
        streams: r.num(9, count)?,
        closed_s: r.opt_f64(10)?,
    })
}

/// Reads a results CSV: `columns` must be there; each set of `optional` columns may be, whole
/// (a set written together that a file has only some of is malformed). The parser sees the
/// optional columns of every set one after the other.
fn read_csv<T>(
    path: &Path,
    columns: &[&str],
    optional: &[&[&str]],
    parse: impl Fn(&Row) -> Result<T, String>,
) -> Result<Vec<T>, ReportError> {
    if !path.is_file() {
        return Err(ReportError::MissingFile(path.to_path_buf()));
    }
    let malformed = |line: u64, message: String| ReportError::Malformed {
        path: path.to_path_buf(),
        line,
        message,
    };
    let csv_error = |e: csv::Error| {
        let line = e.position().map_or(0, |p| line_at(path, p.byte()));
        match e.kind() {
            csv::ErrorKind::Io(_) => ReportError::Csv {
                path: path.to_path_buf(),
                source: e,
            },
            csv::ErrorKind::UnequalLengths {
                expected_len, len, ..
            } => malformed(
                line,
                format!("{len} fields where the header has {expected_len}"),
            ),
            csv::ErrorKind::Utf8 { .. } => malformed(line, "not valid UTF-8".into()),
            _ => malformed(line, e.to_string()),
        }
    };
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .from_path(path)
        .map_err(csv_error)?;
    let headers = reader.headers().map_err(csv_error)?.clone();
    if headers.is_empty() || (headers.len() == 1 && headers[0].is_empty()) {
        return Err(malformed(1, "empty file: no header line".into()));
    }
    let mut index = Vec::with_capacity(columns.len());
    let mut missing = Vec::new();
    for column in columns {
        match headers.iter().position(|h| h == *column) {
            Some(i) => index.push(i),
            None => missing.push(*column),
        }
    }
    if !missing.is_empty() {
        return Err(malformed(
            1,
            format!("missing required column(s): {}", missing.join(", ")),
        ));
    }
    for set in optional {
        let (present, absent): (Vec<&str>, Vec<&str>) = set
            .iter()
            .partition(|column| headers.iter().any(|h| h == **column));
        if !present.is_empty() && !absent.is_empty() {
            return Err(malformed(
                1,
                format!(
                    "has column(s) {} but not {}: the columns {} are written together, all or \
                     none",
                    present.join(", "),
                    absent.join(", "),
                    set.join(", ")
                ),
            ));
        }
    }
    let optional: Vec<&str> = optional
        .iter()
        .flat_map(|set| set.iter().copied())
        .collect();
    let optional_index: Vec<Option<usize>> = optional
        .iter()
        .map(|column| headers.iter().position(|h| h == *column))
        .collect();
    let mut out = Vec::new();
    let mut record = csv::StringRecord::new();
    loop {
        match reader.read_record(&mut record) {
            Ok(false) => break,
            Ok(true) => {}
            Err(e) => return Err(csv_error(e)),
        }
        let row = Row {
            record: &record,
            index: &index,
            columns,
            optional: &optional_index,
            optional_columns: &optional,
        };
        out.push(parse(&row).map_err(|message| {
            malformed(
                record.position().map_or(0, |p| line_at(path, p.byte())),
                message,
            )
        })?);
    }
    Ok(out)
}

/// The 1-based line of `path` on which the record at byte `offset` starts. The csv crate's
/// own line count, and with CRLF endings its record offset too (it points at the `\n` ending
/// the line before), are off by one per line; errors are rare, so counting newlines again
/// when one is reported is cheaper than keeping line numbers for every record.
fn line_at(path: &Path, offset: u64) -> u64 {
    let Ok(file) = fs::File::open(path) else {
        return 0;
    };
    let mut newlines = 0;
    let mut reader = std::io::BufReader::new(file);
    let mut before = offset;
    // Every newline before the offset counts, and so do those between it and the record's
    // first byte (the line ending it may point into, and blank lines, which csv skips).
    loop {
        let buf = match reader.fill_buf() {
            Ok([]) | Err(_) => break,
            Ok(buf) => buf,
        };
        let take = (before.min(buf.len() as u64)) as usize;
        newlines += buf[..take].iter().filter(|&&b| b == b'\n').count() as u64;
        if take < buf.len() {
            let ending = buf[take..]
                .iter()
                .take_while(|&&b| b == b'\r' || b == b'\n')
                .filter(|&&b| b == b'\n')
                .count();
            newlines += ending as u64;
            break;
        }
        before -= take as u64;
        reader.consume(take);
    }
    newlines + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Errors name the line a reader sees in an editor, whether the file ends its lines with
    /// LF or CRLF.
    #[test]
    fn malformed_rows_are_reported_at_their_line_with_any_line_ending() {
        let dir = std::env::temp_dir().join(format!("onionlab-load-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let columns = ["a", "b"];
        for ending in ["\n", "\r\n"] {
            let path = dir.join("t.csv");
            let text = ["a,b", "1,2", "3,4", "5,x", "7,8"].join(ending) + ending;
            fs::write(&path, text).unwrap();
            let err = read_csv(&path, &columns, &[], |r| r.f64(1)).unwrap_err();
            match err {
                ReportError::Malformed { line, .. } => assert_eq!(line, 4, "{ending:?}"),
                other => panic!("{other}"),
            }
            let text = ["a,b", "1,2", "3", "5,6"].join(ending);
            fs::write(&path, text).unwrap();
            let err = read_csv(&path, &columns, &[], |r| r.f64(1)).unwrap_err();
            match err {
                ReportError::Malformed { line, .. } => assert_eq!(line, 3, "{ending:?}"),
                other => panic!("{other}"),
            }
        }
        fs::remove_dir_all(&dir).unwrap();
    }

    /// downloads.csv loads with and without `request_s` and `throughput_mbit_s` (files
    /// written before they existed), and refuses a negative one.
    #[test]
    fn request_times_load_where_the_file_has_them() {
        let dir = std::env::temp_dir().join(format!("onionlab-request-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("downloads.csv");
        let old = "client,group,size_bytes,start_s,circuit_build_s,ttfb_s,ttlb_s,outcome,server,\
                   guard,middle,exit,bootstrap\nc,g,10,1.0,,0.5,0.6,ok,s,a,b,c,false\n";
        let read = |text: &str| {
            fs::write(&path, text).unwrap();
            read_csv(&path, DOWNLOAD_COLUMNS, DOWNLOAD_OPTIONAL, download_row)
        };
        assert_eq!(read(old).unwrap()[0].request_s, None);
        let new = old.replace("bootstrap\n", "bootstrap,request_s\n");
        let with = new.replace("false\n", "false,0.25\n");
        assert_eq!(read(&with).unwrap()[0].request_s, Some(0.25));
        assert_eq!(
            read(&new.replace("false\n", "false,\n")).unwrap()[0].request_s,
            None
        );
        let err = read(&new.replace("false\n", "false,-1\n"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("request_s") && err.contains("downloads.csv:2:"),
            "{err}"
        );
        let newest = with.replace("request_s\n", "request_s,throughput_mbit_s\n");
        let fast = newest.replace("0.25\n", "0.25,4.19\n");
        let row = &read(&fast).unwrap()[0];
        assert_eq!(
            (row.request_s, row.throughput_mbit_s),
            (Some(0.25), Some(4.19))
        );
        let row = &read(&newest.replace("0.25\n", "0.25,\n")).unwrap()[0];
        assert_eq!(row.throughput_mbit_s, None);
        let err = read(&newest.replace("0.25\n", "0.25,-2\n"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("throughput_mbit_s"), "{err}");
        fs::remove_dir_all(&dir).unwrap();
    }
}
