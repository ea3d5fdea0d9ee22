//! Measurements, output files, the run summary, and reports comparing runs.
//!
//! This crate is part of onionlab, a simulator of Tor networks. The book's page on output
//! files (`docs/src/user/output-files.md`) describes every file and column written here.
//!
//! # Overview
//!
//! This crate never prints: the CLI decides what reaches the terminal. Everything here either
//! writes files into an [`OutputDir`] or returns strings, so the same code serves the CLI, tests
//! and any later tooling.
//!
//! Runs are written through [`ResultsWriter`] as CSV files (downloads, circuits, relays) and
//! `run.json`, with the text summary ([`summarize`], [`render_summary`]) in `summary.txt`.
//! Reports read run directories back ([`RunData::load`], [`load_input`]), draw plots as SVG and
//! PNG and write a self-contained HTML page ([`write_report`]) or overlay several runs or sets
//! of trials ([`write_comparison`]); [`write_report_with`] and [`write_comparison_with`] also
//! plot chosen relays over time ([`ReportOptions`]); [`write_comparison_sweep`] adds a metric
//! plotted against a setting the inputs vary ([`Sweep`]), and [`write_index`] one page over
//! several comparisons; [`write_live_page`] sets generated networks' measurement clients against
//! what the live Tor network measured ([`LiveData`]). The statistics are described in
//! [`stats`].
//!
//! # Not in this crate
//!
//! What is measured is decided by the models: the Tor hosts record downloads, circuits and
//! relay samples (`onionlab-tor`), and the `onionlab` command (`crates/cli`) turns those into
//! the records defined here and decides what to print. Running experiments and their trials is
//! the command's too.
//!
//! # Tests
//!
//! `tests/report.rs` builds reports and comparisons from synthetic run directories. Unit tests
//! sit in `load`, `output`, `stats`, `summary`, `sweep`, `index`, `live` and `relay_plots`. Reports of
//! real runs, and the HTML page rendered in a headless browser, are tested from the command
//! line by `crates/cli/tests/report.rs`.

mod analysis;
mod cpu;
mod figures;
mod index;
mod live;
mod load;
mod output;
mod plot;
mod records;
mod relay_plots;
mod report;
pub mod stats;
mod summary;
mod sweep;

pub use cpu::render_cpu_summary;
pub use index::{key_figures, write_index, IndexEntry, INDEX_HTML};
pub use live::{
    compare as live_compare, write_live_page, LiveData, LiveRow, NetworkSample, LIVE_CSV, LIVE_HTML,
};
pub use load::{load_input, Input, RunData, TrialsManifest};
pub use output::{
    address_space_bytes, peak_rss_bytes, physical_memory_bytes, rss_bytes, OutputDir, ReportError,
    ResultsOptions, ResultsWriter, CIRCUITS_CSV, CIRCUITS_HEADER, CPU_COLUMNS, DOWNLOADS_CSV,
    DOWNLOADS_HEADER, RELAYS_CSV, RELAYS_HEADER, REQUEST_COLUMN, RUN_JSON, SUMMARY_TXT,
    THROUGHPUT_COLUMN, TRIALS_JSON,
};
pub use plot::{find_font, FONT_PATHS};
pub use records::{
    CircuitRecord, CpuRecord, CpuShare, DirectoryRecord, DownloadRecord, Outcome,
    ParseOutcomeError, ProcessRecord, RelaySample, RunInfo, StateSample, TransportRecord,
    WorkerRecord,
};
pub use report::{
    relative_change, write_comparison, write_comparison_sweep, write_comparison_with, write_report,
    write_report_with, ReportOptions, COMPARE_HTML, COMPARISON_CSV, REPORT_HTML,
};
pub use summary::{
    percentiles, render_summary, summarize, summary_table, total_goodput, upload_goodput,
    ClientGoodput, DownloadStats, GroupSummary, Percentiles, RunSummary,
};
pub use sweep::{
    metric_clients, slowest_goodput, Slowest, Sweep, SweepMetric, SweepPoint, SWEEP_CSV,
};
