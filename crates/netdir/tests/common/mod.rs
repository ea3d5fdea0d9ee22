//! Shared helpers for the integration tests: locating the real consensus files.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use onionlab_netdir::Consensus;

pub const C2023: &str = "consensus/2023-06-01-10-00-00-consensus";
pub const C2022: &str = "consensus/2022-11-19-10-00-00-consensus";
pub const C2019_MD: &str = "consensus/2019-12-15-13-00-00-microdesc-consensus";

/// Path of a file under `shared/data`; panics with a clear message when the data are absent,
/// since these tests exist to check behaviour on the real documents.
pub fn data_file(rel: &str) -> PathBuf {
    let dir = onionlab_topology::find_shared_data(Path::new(env!("CARGO_MANIFEST_DIR")))
        .expect("shared/data not found (set ONIONLAB_SHARED)");
    dir.join(rel)
}

pub fn read(rel: &str) -> String {
    let p = data_file(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

pub fn load(rel: &str) -> Consensus {
    Consensus::load(&data_file(rel)).unwrap_or_else(|e| panic!("{e}"))
}
