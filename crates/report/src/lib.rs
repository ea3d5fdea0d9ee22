//! Measurements, output files and the run summary.
//!
//! This crate never prints: the CLI decides what reaches the terminal. Everything here either
//! writes files into an [`OutputDir`] or returns strings, so the same code serves the CLI, tests
//! and any later tooling.

mod output;
mod records;
mod summary;

pub use output::{
    peak_rss_bytes, OutputDir, ReportError, CIRCUITS_CSV, CIRCUITS_HEADER, DOWNLOADS_CSV,
    DOWNLOADS_HEADER, RELAYS_CSV, RELAYS_HEADER, RUN_JSON, SUMMARY_TXT,
};
pub use records::{
    CircuitRecord, DownloadRecord, Outcome, ParseOutcomeError, RelaySample, RunInfo, WorkerRecord,
};
pub use summary::{
    percentiles, render_summary, summarize, total_goodput, GroupSummary, Percentiles,
};
