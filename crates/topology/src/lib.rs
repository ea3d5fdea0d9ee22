//! Network graphs describing the Internet between simulated hosts.
//!
//! This crate is part of onionlab, a simulator of Tor networks.
//!
//! # Overview
//!
//! Hosts attach to graph nodes; packets between two hosts experience the latency, jitter and
//! loss of the shortest path between their nodes. Graphs come from Shadow-style GML files, from
//! the GraphML Internet models Shadow's tooling distributes, or from [`Graph::single_switch`].
//! Path properties are computed once, only among the nodes that actually carry hosts, so a large
//! Internet model costs nothing for the parts a simulation does not use.
//!
//! # Not in this crate
//!
//! This crate describes the graph and its paths; it moves no packets. Access links, queues and
//! the delivery of packets along a path are `onionlab-net`'s, and placing hosts on nodes (by
//! country, by name) is `onionlab-scenario`'s. Files are read through `onionlab-data`, which
//! also holds the shipped Internet model.
//!
//! # Tests
//!
//! `tests/gml.rs` (Shadow's examples, units, malformed input), `tests/graphml.rs` (the real
//! 183-node Internet model, malformed documents), `tests/geo.rs` (every latency of the geographic
//! model against its distance rule) and `tests/paths.rs` (shortcuts, jitter and
//! loss accumulation, self paths), with shared helpers in `tests/common/`; unit tests sit in
//! `lib.rs`, `graphml` and `units`. The parsers are also fuzzed by `crates/cli/tests/fuzz.rs`.

use std::path::Path as FsPath;

use onionlab_data::{clip, Input};
use onionlab_engine::time::SimDuration;

mod gml;
mod graphml;
mod paths;
pub mod units;

pub use paths::{Path, PathTable};

/// The longest latency or jitter a graph file may give one edge: an hour.
///
/// The slowest real links (geostationary satellite hops) take well under a second, so anything
/// near an hour is a unit mistake (seconds written for milliseconds). The bound also keeps path
/// sums far from `u64` overflow: a path would need 5 million such edges to reach it, and path
/// lengths saturate rather than wrap even then.
pub const MAX_EDGE_DELAY: SimDuration = 3_600 * 1_000_000_000;

/// The packet loss a node or edge may have: below 1, as for the built-in network, because a
/// link that loses every packet carries nothing and its hosts' connections all fail.
pub const LOSS_RANGE: std::ops::Range<f64> = 0.0..1.0;

/// [`LOSS_RANGE`] in words, for messages.
pub(crate) const LOSS_EXPECTED: &str =
    "a probability from 0 to below 1 (1 would lose every packet)";

/// A node's country code as a graph file gives it: none when empty, else two ASCII letters
/// (ISO 3166-1 alpha-2, such as `US`), since scenarios place hosts by these codes and a code
/// such as `0` matches nothing they can name.
pub(crate) fn country_code(text: &str) -> Result<Option<String>, String> {
    let code = text.trim();
    if code.is_empty() {
        return Ok(None);
    }
    if code.len() == 2 && code.bytes().all(|b| b.is_ascii_alphabetic()) {
        return Ok(Some(code.to_string()));
    }
    Err(format!(
        "must be a two-letter country code such as \"US\", found \"{code}\""
    ))
}

/// A network graph. Edges refer to nodes by their position in `nodes`, not by file id, so that
/// path computations can use plain arrays.
#[derive(Clone, Debug, PartialEq)]
pub struct Graph {
    /// The file the graph came from, or `"built-in"`; used to label errors.
    pub source: String,
    /// Whether an edge only leads from its source to its target.
    pub directed: bool,
    /// Every node in file order; a node's position here is the index edges and paths use.
    pub nodes: Vec<Node>,
    /// Every link in file order, its endpoints as indices into `nodes`.
    pub edges: Vec<Edge>,
}

/// A network location that hosts can attach to.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// The id as written in the file. GraphML ids such as `poi-112` keep their trailing number
    /// here and their full text in `label`.
    pub id: u64,
    /// Human-readable name: GML's `label`, or a GraphML node's `label` attribute, else its id.
    pub label: Option<String>,
    /// Two-letter country code as written in the file (any case), which scenarios use to place
    /// hosts by country; `None` when the file gives none.
    pub country_code: Option<String>,
    /// Bits per second each attached host may send.
    pub bandwidth_up: Option<u64>,
    /// Bits per second each attached host may receive.
    pub bandwidth_down: Option<u64>,
    /// Chance that a packet is lost on the node's own access link; 0 if the file gives none.
    pub packet_loss: f64,
}

/// A link between two nodes (both ways unless the graph is directed).
#[derive(Clone, Debug, PartialEq)]
pub struct Edge {
    /// Index into [`Graph::nodes`].
    pub source: usize,
    /// Index into [`Graph::nodes`].
    pub target: usize,
    /// One-way delay of a packet crossing the link, in nanoseconds of simulated time.
    pub latency: SimDuration,
    /// The link's jitter, in nanoseconds; 0 if none. Summed along a path, it bounds the extra
    /// delay each packet on that path draws on top of the latency.
    pub jitter: SimDuration,
    /// Chance (0 to 1) that a packet crossing the link is lost; 0 if the file gives none.
    pub packet_loss: f64,
}

/// Why a graph could not be read or used, pointing at the offending place in the file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{file}{}: {message}", line.map(|l| format!(":{l}")).unwrap_or_default())]
pub struct TopologyError {
    /// The file the problem is in, named as [`Graph::source`] names it.
    pub file: String,
    /// 1-based line, when the problem has one.
    pub line: Option<usize>,
    /// What is wrong, in words for the user; overlong quoted words are clipped.
    pub message: String,
}

impl TopologyError {
    pub(crate) fn at(file: &str, line: usize, message: String) -> Self {
        TopologyError {
            file: file.to_string(),
            line: Some(line),
            message: clip(message),
        }
    }

    pub(crate) fn whole(file: &str, message: String) -> Self {
        TopologyError {
            file: file.to_string(),
            line: None,
            message: clip(message),
        }
    }
}

/// The file formats [`Graph::load`] recognises from a file name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    Gml,
    GraphMl,
}

/// Works out the format and whether the file is xz-compressed from its name alone, so that
/// a misnamed file fails with a clear message instead of a confusing parse error.
fn format_of(name: &str) -> Option<(Format, bool)> {
    let (stem, xz) = match name.strip_suffix(".xz") {
        Some(stem) => (stem, true),
        None => (name, false),
    };
    let format = if stem.ends_with(".gml") {
        Format::Gml
    } else if stem.ends_with(".graphml") || stem.ends_with(".xml") {
        Format::GraphMl
    } else {
        return None;
    };
    Some((format, xz))
}

impl Graph {
    /// Parses a Shadow-style GML network graph. `source` names the text in errors.
    ///
    /// Follows Shadow's network graph specification: `node` needs an `id`; `edge` needs
    /// `source`, `target` and `latency`; `host_bandwidth_up`/`host_bandwidth_down` (or the older
    /// `bandwidth_up`/`bandwidth_down`) are strings like `"100 Mbit"`; `packet_loss` is a
    /// probability. Times (`latency`, `jitter`) are quoted strings with a unit, such as
    /// `"10 ms"`, of at most [`MAX_EDGE_DELAY`]: Shadow itself refuses a bare GML number there,
    /// and a unit-less string (which Shadow would read as seconds) is refused too, because a
    /// time whose unit is guessed is the mistake scenarios refuse everywhere. Unknown keys are
    /// ignored, as Shadow does, so graphs written for Shadow with units load unchanged.
    pub fn from_gml(text: &str, source: &str) -> Result<Graph, TopologyError> {
        gml::parse(text, source)
    }

    /// Parses a GraphML Internet model in the layout Shadow's tooling produces (bandwidth in
    /// KiB/s, latency and jitter in milliseconds). `source` names the text in errors.
    pub fn from_graphml(text: &str, source: &str) -> Result<Graph, TopologyError> {
        graphml::parse(text, source)
    }

    /// Reads a graph file, choosing the parser by extension: `.gml`, `.graphml` or `.xml`,
    /// each optionally followed by `.xz` for xz-compressed files.
    pub fn load(path: &FsPath) -> Result<Graph, TopologyError> {
        Graph::read(&Input::File(path.to_path_buf()))
    }

    /// Reads a graph from a file on disk or one shipped with onionlab, choosing the parser by
    /// the file name as [`Graph::load`] does.
    pub fn read(input: &Input) -> Result<Graph, TopologyError> {
        let name = input.to_string();
        let (format, _) = format_of(&input.file_name()).ok_or_else(|| {
            TopologyError::whole(
                &name,
                "unknown graph file extension (expected .gml, .graphml or .xml, optionally \
                 followed by .xz)"
                    .to_string(),
            )
        })?;
        let bytes = input.read().map_err(|e| TopologyError::whole(&name, e))?;
        let text = onionlab_data::utf8_text(bytes)
            .map_err(|e| TopologyError::whole(&name, format!("the file {e}")))?;
        match format {
            Format::Gml => Graph::from_gml(&text, &name),
            Format::GraphMl => Graph::from_graphml(&text, &name),
        }
    }

    /// One node with a self-loop: every host on one switch, the simplest useful network and
    /// the default when no graph file is given.
    pub fn single_switch(
        bandwidth_up: u64,
        bandwidth_down: u64,
        latency: SimDuration,
        packet_loss: f64,
    ) -> Graph {
        Graph {
            source: "built-in".to_string(),
            directed: false,
            nodes: vec![Node {
                id: 0,
                label: Some("switch".to_string()),
                country_code: None,
                bandwidth_up: Some(bandwidth_up),
                bandwidth_down: Some(bandwidth_down),
                packet_loss: 0.0,
            }],
            edges: vec![Edge {
                source: 0,
                target: 0,
                latency,
                jitter: 0,
                packet_loss,
            }],
        }
    }

    /// The position in [`Graph::nodes`] of the node with this file id. A linear scan: graphs
    /// have at most a few thousand nodes and lookups happen once per host at setup.
    pub fn node_index(&self, id: u64) -> Option<usize> {
        self.nodes.iter().position(|n| n.id == id)
    }

    /// Shortest (by latency) paths among just the listed node indices; duplicates are ignored.
    ///
    /// Runs Dijkstra once from each listed node rather than computing all pairs, since
    /// simulations use few of a model's nodes. Every listed node needs a self-loop, because
    /// several hosts may share it and their path is that loop (as in Shadow). Errors name the
    /// node lacking a self-loop, a pair with no path, or an index outside the graph.
    pub fn paths(&self, used: &[usize]) -> Result<PathTable, TopologyError> {
        paths::compute(self, used)
    }

    /// Writes the graph as Shadow-style GML, one attribute per line, so that a model loaded
    /// from GraphML can be handed to Shadow itself for side-by-side runs. Times are written in
    /// nanoseconds and bandwidths in bits, so reading the text back gives an identical graph.
    ///
    /// # Panics
    ///
    /// If an edge refers to a node index outside `nodes`, which parsed graphs never do.
    pub fn to_gml(&self) -> String {
        use std::fmt::Write as _;
        fn quote(s: &str) -> String {
            s.replace('&', "&amp;").replace('"', "&quot;")
        }
        let mut out = String::new();
        // Writing into a String cannot fail, so the results are ignored throughout.
        let _ = writeln!(out, "graph [");
        let _ = writeln!(out, "  directed {}", u8::from(self.directed));
        for n in &self.nodes {
            let _ = writeln!(out, "  node [");
            let _ = writeln!(out, "    id {}", n.id);
            if let Some(label) = &n.label {
                let _ = writeln!(out, "    label \"{}\"", quote(label));
            }
            if let Some(cc) = &n.country_code {
                let _ = writeln!(out, "    country_code \"{}\"", quote(cc));
            }
            if let Some(up) = n.bandwidth_up {
                let _ = writeln!(out, "    host_bandwidth_up \"{up} bit\"");
            }
            if let Some(down) = n.bandwidth_down {
                let _ = writeln!(out, "    host_bandwidth_down \"{down} bit\"");
            }
            if n.packet_loss != 0.0 {
                let _ = writeln!(out, "    packet_loss {}", n.packet_loss);
            }
            let _ = writeln!(out, "  ]");
        }
        for e in &self.edges {
            let _ = writeln!(out, "  edge [");
            let _ = writeln!(out, "    source {}", self.nodes[e.source].id);
            let _ = writeln!(out, "    target {}", self.nodes[e.target].id);
            let _ = writeln!(out, "    latency \"{} ns\"", e.latency);
            let _ = writeln!(out, "    jitter \"{} ns\"", e.jitter);
            let _ = writeln!(out, "    packet_loss {}", e.packet_loss);
            let _ = writeln!(out, "  ]");
        }
        let _ = writeln!(out, "]");
        out
    }

    /// A readable name for a node in messages: its id, plus its label when it has one.
    pub(crate) fn describe_node(&self, index: usize) -> String {
        let node = &self.nodes[index];
        match &node.label {
            Some(label) => format!("node {} ({label})", node.id),
            None => format!("node {}", node.id),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_by_extension() {
        assert_eq!(format_of("a.gml"), Some((Format::Gml, false)));
        assert_eq!(format_of("a.gml.xz"), Some((Format::Gml, true)));
        assert_eq!(format_of("a.graphml"), Some((Format::GraphMl, false)));
        assert_eq!(format_of("a.graphml.xml.xz"), Some((Format::GraphMl, true)));
        assert_eq!(format_of("a.xml"), Some((Format::GraphMl, false)));
        assert_eq!(format_of("a.txt"), None);
        assert_eq!(format_of("a.xz"), None);
    }

    #[test]
    fn error_display() {
        let e = TopologyError::at("g.gml", 3, "bad".to_string());
        assert_eq!(e.to_string(), "g.gml:3: bad");
        let e = TopologyError::whole("g.gml", "bad".to_string());
        assert_eq!(e.to_string(), "g.gml: bad");
    }

    #[test]
    fn long_words_in_messages_are_clipped() {
        let id = format!("'poi-{}'", "1".repeat(5000));
        let e = TopologyError::at("g.graphml", 3, format!("edge source {id} does not refer"));
        assert!(e.message.len() < 120, "{}", e.message);
        assert!(
            e.message.starts_with("edge source 'poi-1111"),
            "{}",
            e.message
        );
        assert!(
            e.message.contains("…' (5006 characters) does not refer"),
            "{}",
            e.message
        );
        let short = "edge source 'poi-12' does not refer".to_string();
        assert_eq!(clip(short.clone()), short);
    }

    #[test]
    fn single_switch_paths() {
        let g = Graph::single_switch(1_000, 2_000, 5_000_000, 0.25);
        let t = g.paths(&[0]).unwrap();
        assert_eq!(
            t.path(0, 0),
            Path {
                latency: 5_000_000,
                jitter: 0,
                loss: 0.25
            }
        );
        assert_eq!(t.min_latency(), 5_000_000);
    }
}
