//! Shared helpers for the integration tests: locating the real consensus files.

#![allow(dead_code)]

use onionlab_netdir::Consensus;

pub(crate) const C2023: &str = "consensus/2023-06-01-10-00-00-consensus";
pub(crate) const C2022: &str = "consensus/2022-11-19-10-00-00-consensus";
pub(crate) const C2019_MD: &str = "consensus/2019-12-15-13-00-00-microdesc-consensus";

/// A shipped file, read as the simulator reads it (decompressed).
pub(crate) fn read(rel: &str) -> String {
    let file = onionlab_data::embedded(rel).unwrap_or_else(|| panic!("data/{rel} is not shipped"));
    let bytes = onionlab_data::Input::Embedded(file)
        .read()
        .unwrap_or_else(|e| panic!("data/{rel}: {e}"));
    String::from_utf8_lossy(&bytes).into_owned()
}

pub(crate) fn load(rel: &str) -> Consensus {
    let file = onionlab_data::embedded(rel).unwrap_or_else(|| panic!("data/{rel} is not shipped"));
    Consensus::read(&onionlab_data::Input::Embedded(file)).unwrap_or_else(|e| panic!("{e}"))
}
