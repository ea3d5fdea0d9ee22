//! Helpers shared by the integration tests.

use std::path::PathBuf;

use onionlab_topology::TopologyError;

/// The 183-node Internet model in the repository's `data/` folder.
#[allow(dead_code)] // not every test binary loads the model
pub(crate) fn internet_model() -> PathBuf {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../data/topology/internet-2018-183-nodes.graphml.xml.xz");
    assert!(path.is_file(), "missing {}", path.display());
    path
}

/// Asserts that parsing failed at `line` with a message containing every one of `needles`.
#[track_caller]
pub(crate) fn assert_err<T: std::fmt::Debug>(
    result: Result<T, TopologyError>,
    line: usize,
    needles: &[&str],
) {
    let err = result.expect_err("input should have been rejected");
    assert_eq!(err.line, Some(line), "wrong line in: {err}");
    for needle in needles {
        assert!(
            err.message.contains(needle),
            "message lacks {needle:?}: {err}"
        );
    }
    let shown = err.to_string();
    assert!(
        shown.starts_with(&format!("{}:{line}: ", err.file)),
        "bad display: {shown}"
    );
}
