//! The output directory and its files.

use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::records::{CircuitRecord, CpuShare, DownloadRecord, RelaySample, RunInfo};

/// File name of the one-row-per-transfer table ([`DownloadRecord`]).
pub const DOWNLOADS_CSV: &str = "downloads.csv";
/// File name of the one-row-per-relay-and-second table ([`RelaySample`]).
pub const RELAYS_CSV: &str = "relays.csv";
/// File name of the one-row-per-circuit table ([`CircuitRecord`]).
pub const CIRCUITS_CSV: &str = "circuits.csv";
/// File name of the run's description and totals ([`RunInfo`]); its presence marks a run
/// directory.
pub const RUN_JSON: &str = "run.json";
/// File name of the text summary the command prints at the end, saved beside the results.
pub const SUMMARY_TXT: &str = "summary.txt";
/// Written by `onionlab run --trials K` into the directory holding the trials; see
/// [`TrialsManifest`](crate::TrialsManifest).
pub const TRIALS_JSON: &str = "trials.json";

/// The fixed-name files a run, a set of trials or a report writes.
const RESULT_FILES: [&str; 9] = [
    DOWNLOADS_CSV,
    RELAYS_CSV,
    CIRCUITS_CSV,
    RUN_JSON,
    SUMMARY_TXT,
    TRIALS_JSON,
    crate::report::REPORT_HTML,
    crate::report::COMPARE_HTML,
    crate::report::COMPARISON_CSV,
];

/// Whether `dir` holds a run's or a set of trials' results.
fn holds_results(dir: &Path) -> bool {
    dir.join(RUN_JSON).exists() || dir.join(TRIALS_JSON).exists()
}

/// The first eight columns are a stable interface for analysis scripts; new columns only ever
/// go after them.
pub const DOWNLOADS_HEADER: [&str; 13] = [
    "client",
    "group",
    "size_bytes",
    "start_s",
    "circuit_build_s",
    "ttfb_s",
    "ttlb_s",
    "outcome",
    "server",
    "guard",
    "middle",
    "exit",
    "bootstrap",
];

/// The column that says when a download's request left the client
/// ([`DownloadRecord::request_s`]). Every run writes it; files written before it existed load
/// without it.
pub const REQUEST_COLUMN: &str = "request_s";

/// The last column, a download's throughput as Tor Metrics takes it
/// ([`DownloadRecord::throughput_mbit_s`]). Every run writes it; files written before it
/// existed load without it.
pub const THROUGHPUT_COLUMN: &str = "throughput_mbit_s";

/// The column after [`DOWNLOADS_HEADER`] that says whether a row is a `download` or an
/// `upload`. Only runs with uploads write it, so that the files of runs without stay as they
/// were; a file without it holds downloads only.
pub(crate) const DIRECTION_COLUMN: &str = "direction";

/// The columns of `relays.csv` that every run writes, in order ([`RelaySample`]).
pub const RELAYS_HEADER: [&str; 11] = [
    "relay",
    "second",
    "bytes_read",
    "bytes_written",
    "cells_in",
    "cells_out",
    "queued_cells",
    "open_sockets",
    "socket_queued_bytes",
    "circuits_killed",
    "conn_limit_refusals",
];

/// The columns after [`RELAYS_HEADER`] holding a relay's [`CpuShare`] in each second. Only
/// runs with a CPU model write them, all seven together, so that the files of runs without
/// stay as they were; a file without them holds no CPU measurements.
pub const CPU_COLUMNS: [&str; 7] = [
    "cpu_busy",
    "cpu_crypto",
    "cpu_kernel",
    "cpu_tls",
    "cpu_other",
    "cpu_workers",
    "onion_skins",
];

/// The columns of `circuits.csv`, in order ([`CircuitRecord`]).
pub const CIRCUITS_HEADER: [&str; 11] = [
    "client", "circuit", "purpose", "guard", "middle", "exit", "start_s", "build_s", "outcome",
    "streams", "closed_s",
];

/// Why results could not be written, or runs could not be read back or reported on.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The output path names something that is not a directory.
    #[error("output directory {0}: exists and is not a directory")]
    NotADirectory(PathBuf),
    /// The output directory could not be created (or, for a check, would not be).
    #[error(
        "output directory {path}: cannot create it: {}",
        onionlab_data::io_words(source)
    )]
    CreateDir {
        /// The directory asked for.
        path: PathBuf,
        /// The filesystem's error, or what the check found in the way (a file, a read-only
        /// parent).
        #[source]
        source: io::Error,
    },
    /// The output directory already holds results and replacing them was not asked for.
    #[error(
        "output directory {0}: holds the results of another run ({RUN_JSON} or {TRIALS_JSON}); \
         choose another directory with -o, or give --force to replace them"
    )]
    HoldsResults(PathBuf),
    /// Reading or writing a file failed.
    #[error("{path}: {}", onionlab_data::io_words(source))]
    Io {
        /// The file being read or written.
        path: PathBuf,
        /// What the filesystem said.
        #[source]
        source: io::Error,
    },
    /// A CSV file could not be written or read.
    #[error("{path}: {source}")]
    Csv {
        /// The CSV file.
        path: PathBuf,
        /// What the CSV reader or writer said.
        #[source]
        source: csv::Error,
    },
    /// A JSON file could not be written or parsed.
    #[error("{path}: {source}")]
    Json {
        /// The JSON file.
        path: PathBuf,
        /// What serde_json said.
        #[source]
        source: serde_json::Error,
    },
    /// A directory given as input does not exist.
    #[error("{0}: no such directory")]
    NoSuchDirectory(PathBuf),
    /// A directory given as input holds neither a run nor a set of trials.
    #[error("{0}: not a run directory (no run.json) and not a set of trials (no trials.json)")]
    NotARunDirectory(PathBuf),
    /// A run directory lacks one of the files every run writes.
    #[error(
        "{0}: missing; a run directory holds downloads.csv, relays.csv, circuits.csv and run.json"
    )]
    MissingFile(PathBuf),
    /// A results CSV file is malformed at one line: a header that does not fit, a row with the
    /// wrong number of fields, a cell that does not parse.
    #[error("{path}:{line}: {message}")]
    Malformed {
        /// The file at fault.
        path: PathBuf,
        /// 1-based line of the file, counting the header as line 1.
        line: u64,
        /// What is wrong there.
        message: String,
    },
    /// Input that is readable but does not make sense as a whole (a trials directory mixing
    /// scenarios, a trials.json naming missing trials, ...).
    #[error("{path}: {message}")]
    Invalid {
        /// The input at fault (a directory or a file in it).
        path: PathBuf,
        /// What does not fit.
        message: String,
    },
    /// A plot could not be drawn or rendered to PNG.
    #[error("drawing {file}: {message}")]
    Plot {
        /// The plot's file name.
        file: String,
        /// What the plotting or rendering library said.
        message: String,
    },
}

impl ReportError {
    /// Whether the error lies in what the caller gave (directories that are not runs, files
    /// that do not parse, inconsistent trials, relays to plot that a run does not have) rather
    /// than in writing the results, so a command line can answer "bad input" (exit 2) instead of
    /// an internal failure without matching every variant.
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            ReportError::NoSuchDirectory(_)
                | ReportError::NotARunDirectory(_)
                | ReportError::MissingFile(_)
                | ReportError::Malformed { .. }
                | ReportError::Invalid { .. }
        )
    }
}

pub(crate) fn io_err(path: &Path) -> impl FnOnce(io::Error) -> ReportError + '_ {
    move |source| ReportError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Fixed six decimals (microsecond resolution for times), so files are byte-identical across
/// runs and platforms instead of depending on shortest-round-trip float printing.
pub(crate) fn fixed(x: f64) -> String {
    let s = format!("{x:.6}");
    // A value that rounds to zero from below would otherwise print as "-0.000000".
    if s == "-0.000000" {
        "0.000000".to_string()
    } else {
        s
    }
}

/// An empty cell rather than a sentinel number, so a missing measurement can never be averaged
/// in by accident.
/// A count the run may not have measured: empty when it did not.
fn opt<T: ToString>(x: Option<T>) -> String {
    x.map(|v| v.to_string()).unwrap_or_default()
}

fn fixed_opt(x: Option<f64>) -> String {
    x.map(fixed).unwrap_or_default()
}

/// The directory a run writes its results into.
#[derive(Clone, Debug)]
pub struct OutputDir {
    path: PathBuf,
}

impl OutputDir {
    /// Creates the directory (and parents) if needed; an existing directory is reused.
    pub fn create(path: impl AsRef<Path>) -> Result<Self, ReportError> {
        let path = path.as_ref();
        if path.exists() && !path.is_dir() {
            return Err(ReportError::NotADirectory(path.to_path_buf()));
        }
        fs::create_dir_all(path).map_err(|source| ReportError::CreateDir {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(OutputDir {
            path: path.to_path_buf(),
        })
    }

    /// Whether [`OutputDir::create`] would succeed at `path`, without creating anything (for
    /// `--check`): `path` must be a directory or not exist, and its nearest existing ancestor
    /// must be a directory that is not read-only. What only trying can tell (a directory that
    /// this user may not write to though its mode allows it) shows when the run starts.
    pub fn check_creatable(path: impl AsRef<Path>) -> Result<(), ReportError> {
        let path = path.as_ref();
        let mut at = path;
        loop {
            match fs::metadata(at) {
                Ok(meta) if !meta.is_dir() && at == path => {
                    return Err(ReportError::NotADirectory(path.to_path_buf()))
                }
                Ok(meta) if !meta.is_dir() => {
                    return Err(ReportError::CreateDir {
                        path: path.to_path_buf(),
                        source: io::Error::new(
                            io::ErrorKind::NotADirectory,
                            format!("{} is a file, not a directory", at.display()),
                        ),
                    })
                }
                Ok(meta) if meta.permissions().readonly() => {
                    return Err(ReportError::CreateDir {
                        path: path.to_path_buf(),
                        source: io::Error::new(
                            io::ErrorKind::PermissionDenied,
                            format!("{} is read-only", at.display()),
                        ),
                    })
                }
                Ok(_) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    match at.parent().filter(|p| !p.as_os_str().is_empty()) {
                        Some(parent) => at = parent,
                        // A relative path whose every part is missing lands in the working
                        // directory.
                        None => at = Path::new("."),
                    }
                }
                Err(source) => {
                    return Err(ReportError::CreateDir {
                        path: path.to_path_buf(),
                        source,
                    })
                }
            }
        }
    }

    /// Whether [`OutputDir::for_new_run`] would take `path`, without creating or clearing
    /// anything: a run checks this before it builds its network, and creates the directory
    /// only once the network stands (or its construction stopped with something to say).
    pub fn check_new_run(path: impl AsRef<Path>, replace: bool) -> Result<(), ReportError> {
        let path = path.as_ref();
        OutputDir::check_creatable(path)?;
        if !replace && path.is_dir() && holds_results(path) {
            return Err(ReportError::HoldsResults(path.to_path_buf()));
        }
        Ok(())
    }

    /// The directory for a new run's results. One already holding a run or a set of trials is
    /// refused, because new files beside old ones (an old `run.json` saying `complete: true`
    /// next to a new partial run) would misrepresent both; with `replace` the old results are
    /// removed first: the files onionlab writes (CSV, JSON, summary, report, plots, leftover
    /// temporary files) and `trial-*` folders holding a run. Other files are left alone.
    pub fn for_new_run(path: impl AsRef<Path>, replace: bool) -> Result<Self, ReportError> {
        let dir = OutputDir::create(path)?;
        if !holds_results(&dir.path) {
            return Ok(dir);
        }
        if !replace {
            return Err(ReportError::HoldsResults(dir.path));
        }
        dir.clear_results()?;
        Ok(dir)
    }

    fn clear_results(&self) -> Result<(), ReportError> {
        let entries = fs::read_dir(&self.path).map_err(io_err(&self.path))?;
        for entry in entries {
            let entry = entry.map_err(io_err(&self.path))?;
            let p = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            let is_dir = entry.file_type().map_err(io_err(&p))?.is_dir();
            let ours = if is_dir {
                name.starts_with("trial-") && holds_results(&p)
            } else {
                RESULT_FILES.contains(&name.as_str())
                    || name.ends_with(".svg")
                    || name.ends_with(".png")
                    || (name.starts_with('.') && name.contains(".tmp-"))
            };
            if !ours {
                continue;
            }
            if is_dir {
                fs::remove_dir_all(&p).map_err(io_err(&p))?;
            } else {
                fs::remove_file(&p).map_err(io_err(&p))?;
            }
        }
        Ok(())
    }

    /// Where the directory is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `name` atomically: the content goes to a hidden temporary file in the same
    /// directory (same filesystem, so the rename is atomic) which replaces `name` only once it is
    /// complete and synced. An interrupted run therefore leaves either the old file or the new
    /// one, never half a file. On error the temporary file is removed.
    pub fn write_atomic<F>(&self, name: &str, fill: F) -> Result<PathBuf, ReportError>
    where
        F: FnOnce(&mut BufWriter<File>, &Path) -> Result<(), ReportError>,
    {
        let target = self.path.join(name);
        let tmp = self
            .path
            .join(format!(".{name}.tmp-{}", std::process::id()));
        let result = (|| {
            let file = File::create(&tmp).map_err(io_err(&tmp))?;
            let mut out = BufWriter::new(file);
            fill(&mut out, &target)?;
            let file = out.into_inner().map_err(|e| io_err(&tmp)(e.into_error()))?;
            file.sync_all().map_err(io_err(&tmp))?;
            fs::rename(&tmp, &target).map_err(io_err(&target))
        })();
        if let Err(e) = result {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
        // Persist the rename itself; best effort, as not every platform can sync a directory.
        if let Ok(dir) = File::open(&self.path) {
            let _ = dir.sync_all();
        }
        Ok(target)
    }

    /// Writes raw bytes to `name` atomically.
    pub fn write_bytes(&self, name: &str, bytes: &[u8]) -> Result<PathBuf, ReportError> {
        self.write_atomic(name, |out, path| out.write_all(bytes).map_err(io_err(path)))
    }

    fn write_csv<I>(&self, name: &str, header: &[&str], rows: I) -> Result<PathBuf, ReportError>
    where
        I: IntoIterator<Item = Vec<String>>,
    {
        self.write_atomic(name, |out, path| {
            let csv_err = |source| ReportError::Csv {
                path: path.to_path_buf(),
                source,
            };
            let mut w = csv::WriterBuilder::new()
                .terminator(csv::Terminator::Any(b'\n'))
                .from_writer(out);
            w.write_record(header).map_err(csv_err)?;
            for row in rows {
                w.write_record(&row).map_err(csv_err)?;
            }
            w.flush().map_err(io_err(path))
        })
    }

    /// Writes `downloads.csv`, with the direction column when any record is an upload.
    pub fn write_downloads(&self, records: &[DownloadRecord]) -> Result<PathBuf, ReportError> {
        let direction = records.iter().any(|r| r.upload);
        self.write_csv(
            DOWNLOADS_CSV,
            &downloads_header(direction),
            records.iter().map(|r| download_row(r, direction)),
        )
    }

    /// Writes `relays.csv`, with the CPU columns when any sample has a CPU measurement.
    pub fn write_relays(&self, samples: &[RelaySample]) -> Result<PathBuf, ReportError> {
        let cpu = samples.iter().any(|s| s.cpu.is_some());
        self.write_csv(
            RELAYS_CSV,
            &relays_header(cpu),
            samples.iter().map(|s| relay_row(s, cpu)),
        )
    }

    /// Writes `circuits.csv` whole, replacing any there.
    pub fn write_circuits(&self, records: &[CircuitRecord]) -> Result<PathBuf, ReportError> {
        self.write_csv(
            CIRCUITS_CSV,
            &CIRCUITS_HEADER,
            records.iter().map(circuit_row),
        )
    }

    /// Pretty JSON with a trailing newline. Floats use serde_json's shortest round-trip form,
    /// which is deterministic; non-finite floats become `null`.
    pub fn write_run(&self, info: &RunInfo) -> Result<PathBuf, ReportError> {
        self.write_atomic(RUN_JSON, |out, path| {
            serde_json::to_writer_pretty(&mut *out, info).map_err(|source| ReportError::Json {
                path: path.to_path_buf(),
                source,
            })?;
            out.write_all(b"\n").map_err(io_err(path))
        })
    }

    /// Writes `summary.txt` (atomically, as every whole-file writer does).
    pub fn write_summary(&self, text: &str) -> Result<PathBuf, ReportError> {
        self.write_bytes(SUMMARY_TXT, text.as_bytes())
    }
}

fn downloads_header(direction: bool) -> Vec<&'static str> {
    let mut header = DOWNLOADS_HEADER.to_vec();
    if direction {
        header.push(DIRECTION_COLUMN);
    }
    header.push(REQUEST_COLUMN);
    header.push(THROUGHPUT_COLUMN);
    header
}

fn download_row(r: &DownloadRecord, direction: bool) -> Vec<String> {
    let mut row = vec![
        r.client.clone(),
        r.group.clone(),
        r.size_bytes.to_string(),
        fixed(r.start_s),
        fixed_opt(r.circuit_build_s),
        fixed_opt(r.ttfb_s),
        fixed_opt(r.ttlb_s),
        r.outcome.to_string(),
        r.server.clone(),
        r.guard.clone(),
        r.middle.clone(),
        r.exit.clone(),
        r.bootstrap.to_string(),
    ];
    if direction {
        row.push(if r.upload { "upload" } else { "download" }.to_string());
    }
    row.push(fixed_opt(r.request_s));
    row.push(fixed_opt(r.throughput_mbit_s));
    row
}

fn relays_header(cpu: bool) -> Vec<&'static str> {
    let mut header = RELAYS_HEADER.to_vec();
    if cpu {
        header.extend(CPU_COLUMNS);
    }
    header
}

/// With `cpu`, a sample without a CPU measurement gets empty CPU cells, like any other value
/// the run did not measure.
fn relay_row(s: &RelaySample, cpu: bool) -> Vec<String> {
    let mut row = vec![
        s.relay.clone(),
        s.second.to_string(),
        s.bytes_read.to_string(),
        s.bytes_written.to_string(),
        opt(s.cells_in),
        opt(s.cells_out),
        opt(s.queued_cells),
        opt(s.open_sockets),
        opt(s.socket_queued_bytes),
        opt(s.circuits_killed),
        opt(s.conn_limit_refusals),
    ];
    if cpu {
        match &s.cpu {
            Some(c) => row.extend(cpu_cells(c)),
            None => row.extend(CPU_COLUMNS.map(|_| String::new())),
        }
    }
    row
}

/// In the order of [`CPU_COLUMNS`].
fn cpu_cells(c: &CpuShare) -> [String; 7] {
    [
        fixed(c.busy),
        fixed(c.crypto),
        fixed(c.kernel),
        fixed(c.tls),
        fixed(c.other),
        fixed(c.workers),
        c.onion_skins.to_string(),
    ]
}

fn circuit_row(c: &CircuitRecord) -> Vec<String> {
    vec![
        c.client.clone(),
        c.circuit.to_string(),
        c.purpose.clone(),
        c.guard.clone(),
        c.middle.clone(),
        c.exit.clone(),
        fixed(c.start_s),
        fixed_opt(c.build_s),
        c.outcome.clone(),
        c.streams.to_string(),
        fixed_opt(c.closed_s),
    ]
}

/// One results CSV written as the run goes.
struct AppendedCsv {
    path: PathBuf,
    file: File,
    /// The batch being written, formatted before it goes to the file in one write, so that a
    /// process killed between batches leaves whole rows only.
    batch: Vec<u8>,
}

impl AppendedCsv {
    fn create(dir: &Path, name: &str, header: &[&str]) -> Result<Self, ReportError> {
        let path = dir.join(name);
        let file = File::create(&path).map_err(io_err(&path))?;
        let mut csv = AppendedCsv {
            file,
            batch: Vec::new(),
            path,
        };
        csv.append([header.iter().map(|h| h.to_string()).collect()])?;
        Ok(csv)
    }

    fn append<I: IntoIterator<Item = Vec<String>>>(&mut self, rows: I) -> Result<(), ReportError> {
        self.batch.clear();
        let mut w = csv::WriterBuilder::new()
            .terminator(csv::Terminator::Any(b'\n'))
            .from_writer(&mut self.batch);
        for row in rows {
            w.write_record(&row).map_err(|source| ReportError::Csv {
                path: self.path.clone(),
                source,
            })?;
        }
        w.flush().map_err(io_err(&self.path))?;
        drop(w);
        // Handed to the kernel at once: a process that dies later (an abort, SIGKILL, the
        // out-of-memory killer) still leaves every row written so far.
        self.file.write_all(&self.batch).map_err(io_err(&self.path))
    }
}

/// What a run measures beyond what every run does, which decides the optional columns of its
/// files before the first row is known. The default is a run without either, whose files
/// have exactly the columns of runs from before the options existed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResultsOptions {
    /// Clients may upload: `downloads.csv` gets the direction column.
    pub uploads: bool,
    /// Relays run on a modelled CPU: `relays.csv` gets the [`CPU_COLUMNS`].
    pub cpu: bool,
}

/// The run's downloads, relay seconds and circuits, appended to their CSV files as the
/// simulation produces them rather than written at the end, so that no way of ending a run
/// loses what it measured. The files have the same format as the whole-file writers'.
pub struct ResultsWriter {
    downloads: AppendedCsv,
    relays: AppendedCsv,
    circuits: AppendedCsv,
    options: ResultsOptions,
}

impl ResultsWriter {
    /// Starts the three files (header only), replacing any there.
    pub fn create(dir: &OutputDir) -> Result<Self, ReportError> {
        Self::create_with(dir, ResultsOptions::default())
    }

    /// As [`ResultsWriter::create`], for a run whose clients may upload (`uploads`): its
    /// `downloads.csv` gets the direction column.
    pub fn create_for(dir: &OutputDir, uploads: bool) -> Result<Self, ReportError> {
        Self::create_with(
            dir,
            ResultsOptions {
                uploads,
                ..ResultsOptions::default()
            },
        )
    }

    /// As [`ResultsWriter::create`], with the optional columns `options` asks for. A run with
    /// `cpu` whose relays lack a CPU measurement in some second writes empty cells there; a run
    /// without `cpu` writes no CPU columns, so it must not be given samples with one.
    pub fn create_with(dir: &OutputDir, options: ResultsOptions) -> Result<Self, ReportError> {
        Ok(ResultsWriter {
            downloads: AppendedCsv::create(
                &dir.path,
                DOWNLOADS_CSV,
                &downloads_header(options.uploads),
            )?,
            relays: AppendedCsv::create(&dir.path, RELAYS_CSV, &relays_header(options.cpu))?,
            circuits: AppendedCsv::create(&dir.path, CIRCUITS_CSV, &CIRCUITS_HEADER)?,
            options,
        })
    }

    /// Appends records made since the last call to the three files, each file's rows in one
    /// write, so a run killed later keeps them.
    pub fn append(
        &mut self,
        downloads: &[DownloadRecord],
        relays: &[RelaySample],
        circuits: &[CircuitRecord],
    ) -> Result<(), ReportError> {
        let ResultsOptions { uploads, cpu } = self.options;
        debug_assert!(
            cpu || relays.iter().all(|s| s.cpu.is_none()),
            "CPU measurements given to a ResultsWriter created without the CPU columns"
        );
        self.downloads
            .append(downloads.iter().map(|r| download_row(r, uploads)))?;
        self.relays
            .append(relays.iter().map(|s| relay_row(s, cpu)))?;
        self.circuits.append(circuits.iter().map(circuit_row))
    }
}

/// Peak resident set size of this process, in bytes (Linux `VmHWM`); 0 where unavailable, since
/// it is informational and must never fail a run.
pub fn peak_rss_bytes() -> u64 {
    status_bytes("VmHWM:")
}

/// Resident set size of this process now, in bytes (Linux `VmRSS`); 0 where unavailable.
pub fn rss_bytes() -> u64 {
    status_bytes("VmRSS:")
}

/// Address space this process has mapped, in bytes (Linux `VmSize`, what `ulimit -v` limits);
/// 0 where unavailable.
pub fn address_space_bytes() -> u64 {
    status_bytes("VmSize:")
}

/// This machine's physical memory, in bytes (Linux `MemTotal`); 0 where unavailable.
pub fn physical_memory_bytes() -> u64 {
    fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|info| parse_status_bytes(&info, "MemTotal:"))
        .unwrap_or(0)
}

fn status_bytes(field: &str) -> u64 {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| parse_status_bytes(&status, field))
        .unwrap_or(0)
}

fn parse_status_bytes(status: &str, field: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(field))?;
    let mut parts = line[field.len()..].split_whitespace();
    let value: u64 = parts.next()?.parse().ok()?;
    let unit = match parts.next() {
        Some("kB") | Some("KB") | Some("kb") => 1024,
        Some("mB") | Some("MB") => 1024 * 1024,
        None | Some("B") => 1,
        Some(_) => return None,
    };
    Some(value * unit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::{Outcome, WorkerRecord};

    struct TempDir(PathBuf);

    impl TempDir {
        fn new(tag: &str) -> Self {
            let path = std::env::temp_dir().join(format!(
                "onionlab-report-{tag}-{}-{:?}",
                std::process::id(),
                std::thread::current().id()
            ));
            let _ = fs::remove_dir_all(&path);
            TempDir(path)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn download(outcome: Outcome, ttlb: Option<f64>) -> DownloadRecord {
        DownloadRecord {
            client: "web1".into(),
            group: "web".into(),
            size_bytes: 327_680,
            start_s: 1800.25,
            circuit_build_s: None,
            ttfb_s: Some(0.5),
            ttlb_s: ttlb,
            request_s: Some(0.25),
            throughput_mbit_s: None,
            outcome,
            server: "server3".into(),
            guard: "relay1".into(),
            middle: "relay2".into(),
            exit: "relay3".into(),
            bootstrap: false,
            upload: false,
        }
    }

    fn run_info() -> RunInfo {
        RunInfo {
            scenario_name: "toy".into(),
            scenario: serde_json::json!({"name": "toy", "clients": {"web": 360}}),
            seed: 42,
            version: "0.1.0".into(),
            commit: "0123456789ab".into(),
            threads: 4,
            sim_seconds: 3600.0,
            bootstrap_seconds: 1800.0,
            wall_seconds: 12.5,
            speed: 288.0,
            events: 1_000_000,
            rounds: 5000,
            events_per_sec: 80_000.0,
            peak_rss_bytes: 1 << 30,
            workers: vec![WorkerRecord {
                hosts: 10,
                events: 250_000,
                busy_s: 10.0,
                blocked_s: 2.5,
                stolen: 0,
                runs: 0,
            }],
            spans: Vec::new(),
            complete: true,
            mode: "simulation".into(),
            interrupted_reason: None,
            progress: vec![(0.0, 0.0), (12.5, 3600.0)],
            emulation: None,
            plot_relays: Vec::new(),
            transport: None,
            directory: None,
            cpu: None,
            state: Vec::new(),
            processes: Vec::new(),
        }
    }

    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn downloads_csv_header_and_cells() {
        let tmp = TempDir::new("downloads");
        let out = OutputDir::create(&tmp.0).unwrap();
        let records = vec![
            download(Outcome::Ok, Some(2.0)),
            download(Outcome::Timeout, None),
            download(Outcome::Error("connection refused, by exit".into()), None),
        ];
        let path = out.write_downloads(&records).unwrap();
        let text = fs::read_to_string(path).unwrap();
        let mut lines = text.lines();
        assert!(lines
            .next()
            .unwrap()
            .starts_with("client,group,size_bytes,start_s,circuit_build_s,ttfb_s,ttlb_s,outcome,"));
        assert!(text
            .lines()
            .next()
            .unwrap()
            .ends_with(",bootstrap,request_s,throughput_mbit_s"));
        assert_eq!(
            lines.next().unwrap(),
            "web1,web,327680,1800.250000,,0.500000,2.000000,ok,server3,relay1,relay2,relay3,false,\
             0.250000,"
        );
        assert_eq!(
            lines.next().unwrap(),
            "web1,web,327680,1800.250000,,0.500000,,timeout,server3,relay1,relay2,relay3,false,\
             0.250000,"
        );
        // The reason contains a comma, so the csv writer must quote the cell.
        assert_eq!(
            lines.next().unwrap(),
            "web1,web,327680,1800.250000,,0.500000,,\"error:connection refused, by exit\",\
             server3,relay1,relay2,relay3,false,0.250000,"
        );
        assert!(text.ends_with('\n') && !text.contains('\r'));
    }

    #[test]
    fn relays_and_circuits_csv() {
        let tmp = TempDir::new("relays");
        let out = OutputDir::create(&tmp.0).unwrap();
        out.write_relays(&[RelaySample {
            relay: "relay1".into(),
            second: 7,
            bytes_read: 1,
            bytes_written: 2,
            cells_in: Some(3),
            cells_out: Some(4),
            queued_cells: Some(5),
            open_sockets: Some(6),
            socket_queued_bytes: Some(7),
            circuits_killed: Some(8),
            conn_limit_refusals: Some(9),
            cpu: None,
        }])
        .unwrap();
        out.write_circuits(&[CircuitRecord {
            client: "c".into(),
            circuit: 9,
            purpose: "general".into(),
            guard: "g".into(),
            middle: "m".into(),
            exit: "e".into(),
            start_s: -0.0000001,
            build_s: Some(1.0 / 3.0),
            outcome: "built".into(),
            streams: 2,
            closed_s: None,
        }])
        .unwrap();
        assert_eq!(
            fs::read_to_string(tmp.0.join(RELAYS_CSV)).unwrap(),
            "relay,second,bytes_read,bytes_written,cells_in,cells_out,queued_cells,open_sockets,\
             socket_queued_bytes,circuits_killed,conn_limit_refusals\n\
             relay1,7,1,2,3,4,5,6,7,8,9\n"
        );
        assert_eq!(
            fs::read_to_string(tmp.0.join(CIRCUITS_CSV)).unwrap(),
            "client,circuit,purpose,guard,middle,exit,start_s,build_s,outcome,streams,closed_s\n\
             c,9,general,g,m,e,0.000000,0.333333,built,2,\n"
        );
    }

    #[test]
    fn run_json_has_required_keys() {
        let tmp = TempDir::new("run");
        let out = OutputDir::create(&tmp.0).unwrap();
        let path = out.write_run(&run_info()).unwrap();
        let text = fs::read_to_string(path).unwrap();
        assert!(text.contains("\n  \"seed\": 42,"), "pretty printed");
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        for key in [
            "sim_seconds",
            "wall_seconds",
            "events",
            "peak_rss_bytes",
            "threads",
            "seed",
            "complete",
        ] {
            assert!(v.get(key).is_some(), "run.json lacks {key}");
        }
        let back: RunInfo = serde_json::from_value(v).unwrap();
        assert_eq!(back, run_info());
        // An empty list of relays to plot is left out, so run.json of runs that name none is
        // byte-identical to before the field existed.
        assert!(!text.contains("plot_relays"), "{text}");
        let mut info = run_info();
        info.plot_relays = vec!["middle1".into(), "guard2".into()];
        let path = out.write_run(&info).unwrap();
        let text = fs::read_to_string(path).unwrap();
        assert!(text.contains("\"plot_relays\": [\n    \"middle1\",\n    \"guard2\"\n  ]"));
        let back: RunInfo = serde_json::from_str(&text).unwrap();
        assert_eq!(back, info);
    }

    #[test]
    fn atomic_writes_leave_no_temp_files() {
        let tmp = TempDir::new("atomic");
        let out = OutputDir::create(&tmp.0).unwrap();
        out.write_downloads(&[download(Outcome::Ok, Some(1.0))])
            .unwrap();
        out.write_relays(&[]).unwrap();
        out.write_circuits(&[]).unwrap();
        out.write_run(&run_info()).unwrap();
        out.write_summary("hello\n").unwrap();
        // Overwriting replaces the file whole.
        out.write_summary("bye\n").unwrap();
        assert_eq!(
            entries(&tmp.0),
            [
                CIRCUITS_CSV,
                DOWNLOADS_CSV,
                RELAYS_CSV,
                RUN_JSON,
                SUMMARY_TXT
            ]
        );
        assert_eq!(
            fs::read_to_string(tmp.0.join(SUMMARY_TXT)).unwrap(),
            "bye\n"
        );

        // A writer that fails midway keeps the old file and cleans up its temporary file.
        let err = out.write_atomic(SUMMARY_TXT, |w, path| {
            w.write_all(b"half").map_err(io_err(path))?;
            Err(ReportError::NotADirectory(path.to_path_buf()))
        });
        assert!(err.is_err());
        assert_eq!(
            fs::read_to_string(tmp.0.join(SUMMARY_TXT)).unwrap(),
            "bye\n"
        );
        assert_eq!(entries(&tmp.0).len(), 5);
    }

    #[test]
    fn check_creatable_says_what_create_would() {
        let tmp = TempDir::new("check-creatable");
        fs::create_dir_all(&tmp.0).unwrap();
        let file = tmp.0.join("file");
        fs::write(&file, "x").unwrap();
        for (path, ok) in [
            (tmp.0.clone(), true),
            (tmp.0.join("new/deeper"), true),
            (file.clone(), false),
            (file.join("below"), false),
        ] {
            let checked = OutputDir::check_creatable(&path);
            assert_eq!(checked.is_ok(), ok, "{}: {checked:?}", path.display());
            assert_eq!(OutputDir::create(&path).is_ok(), ok, "{}", path.display());
        }
        let e = OutputDir::check_creatable(file.join("below")).unwrap_err();
        assert!(e.to_string().contains("is a file, not a directory"), "{e}");
    }

    #[test]
    fn create_rejects_a_file_and_reuses_a_directory() {
        let tmp = TempDir::new("create");
        let nested = tmp.0.join("a/b");
        OutputDir::create(&nested).unwrap();
        OutputDir::create(&nested).unwrap();
        let file = tmp.0.join("file");
        fs::write(&file, "x").unwrap();
        assert!(matches!(
            OutputDir::create(&file),
            Err(ReportError::NotADirectory(_))
        ));
    }

    #[test]
    fn identical_input_gives_identical_bytes() {
        let write = |tag: &str| {
            let tmp = TempDir::new(tag);
            let out = OutputDir::create(&tmp.0).unwrap();
            let records: Vec<_> = (0..50)
                .map(|i| {
                    let mut r = download(Outcome::Ok, Some(i as f64 * 0.1 + 1e-9));
                    r.start_s = i as f64 / 7.0;
                    r
                })
                .collect();
            out.write_downloads(&records).unwrap();
            out.write_run(&run_info()).unwrap();
            let a = fs::read(tmp.0.join(DOWNLOADS_CSV)).unwrap();
            let b = fs::read(tmp.0.join(RUN_JSON)).unwrap();
            (a, b)
        };
        assert_eq!(write("same-a"), write("same-b"));
    }

    #[test]
    fn resident_memory_parsing() {
        let status = "Name:\tx\nVmPeak:\t  2000 kB\nVmHWM:\t    1234 kB\nVmRSS:\t 1000 kB\n";
        assert_eq!(parse_status_bytes(status, "VmHWM:"), Some(1234 * 1024));
        assert_eq!(parse_status_bytes(status, "VmRSS:"), Some(1000 * 1024));
        assert_eq!(parse_status_bytes("Name:\tx\n", "VmHWM:"), None);
        if cfg!(target_os = "linux") {
            assert!(peak_rss_bytes() > 0);
            assert!(rss_bytes() > 0 && rss_bytes() <= peak_rss_bytes());
        }
    }
}
