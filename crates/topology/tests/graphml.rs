//! GraphML import: the real 183-node Internet model and malformed documents.

mod common;

use std::time::Instant;

use common::{assert_err, internet_model};
use onionlab_topology::Graph;

const MS: u64 = 1_000_000;
const KIB_PER_S: u64 = 8 * 1024;

fn load_model() -> Graph {
    let start = Instant::now();
    let g = Graph::load(&internet_model()).unwrap();
    eprintln!("loaded the Internet model in {:?}", start.elapsed());
    g
}

fn index_of(g: &Graph, name: &str) -> usize {
    g.nodes
        .iter()
        .position(|n| n.label.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("no node {name}"))
}

fn edge_between(g: &Graph, a: usize, b: usize) -> &onionlab_topology::Edge {
    g.edges
        .iter()
        .find(|e| (e.source, e.target) == (a, b) || (e.source, e.target) == (b, a))
        .unwrap_or_else(|| panic!("no edge {a}-{b}"))
}

#[test]
fn internet_model_loads() {
    let g = load_model();
    assert!(g.source.ends_with("internet-2018-183-nodes.graphml.xml.xz"));
    assert!(!g.directed);
    assert_eq!(g.nodes.len(), 183);
    // A complete graph with a self-loop on every node: 183 * 184 / 2.
    assert_eq!(g.edges.len(), 16_836);
    assert_eq!(g.edges.iter().filter(|e| e.source == e.target).count(), 183);

    let sd = index_of(&g, "poi-112");
    let n = &g.nodes[sd];
    assert_eq!(n.id, 112);
    assert_eq!(g.node_index(112), Some(sd));
    assert_eq!(n.country_code.as_deref(), Some("SD"));
    assert_eq!(n.bandwidth_down, Some(1711 * KIB_PER_S));
    assert_eq!(n.bandwidth_up, Some(886 * KIB_PER_S));
    assert_eq!(n.packet_loss, 0.0);

    let ru = index_of(&g, "poi-1");
    assert_eq!(g.nodes[ru].country_code.as_deref(), Some("RU"));
    assert_eq!(g.nodes[ru].bandwidth_down, Some(18192 * KIB_PER_S));
    let cn = index_of(&g, "poi-2");
    assert_eq!(g.nodes[cn].country_code.as_deref(), Some("CN"));

    let self_loop = edge_between(&g, sd, sd);
    assert_eq!(self_loop.latency, 22_585_000);
    assert_eq!(self_loop.jitter, 628_846); // 0.628846153845 ms
    assert_eq!(self_loop.packet_loss, 0.005);
    let ni = index_of(&g, "poi-113");
    assert_eq!(edge_between(&g, sd, ni).latency, 202_675_000);
    assert_eq!(edge_between(&g, cn, ru).latency, 30_510_000);

    for n in &g.nodes {
        assert!(n.country_code.is_some() && n.bandwidth_up.is_some() && n.bandwidth_down.is_some());
    }
    assert!(g.edges.iter().all(|e| e.latency >= 5 * MS));
}

#[test]
fn internet_model_paths() {
    let g = load_model();
    let names = ["poi-1", "poi-2", "poi-112", "poi-113", "poi-74", "poi-75"];
    let mut used: Vec<usize> = names.iter().map(|n| index_of(&g, n)).collect();
    used.push(used[0]); // duplicates are ignored
    let t = g.paths(&used).unwrap();
    assert_eq!(t.used().len(), names.len());
    let mut min = u64::MAX;
    for &a in &used {
        for &b in &used {
            let p = t.path(a, b);
            let direct = edge_between(&g, a, b);
            min = min.min(p.latency);
            if a == b {
                assert_eq!(p.latency, direct.latency);
                assert_eq!(p.jitter, direct.jitter);
            } else {
                assert!(p.latency <= direct.latency, "{a}->{b}");
                assert!(p.latency > 0);
                assert_eq!(p, t.path(b, a), "undirected paths are symmetric");
            }
            assert!(p.loss >= direct.packet_loss - 1e-12 && p.loss < 1.0);
        }
    }
    assert_eq!(t.min_latency(), min);
    // The model's latencies are not metric: poi-112 to poi-75 is 283.685 ms directly, but
    // relaying through another node takes at most 157.52 ms, so the shortcut must be taken.
    let (sd, far) = (index_of(&g, "poi-112"), index_of(&g, "poi-75"));
    assert_eq!(edge_between(&g, sd, far).latency, 283_685_000);
    assert!(t.path(sd, far).latency <= 157_520_000);
}

#[test]
fn internet_model_all_nodes_paths_and_gml_round_trip() {
    let g = load_model();
    let all: Vec<usize> = (0..g.nodes.len()).collect();
    let start = Instant::now();
    let t = g.paths(&all).unwrap();
    eprintln!("paths among all 183 nodes in {:?}", start.elapsed());
    assert!(t.min_latency() >= 5 * MS);

    let again = Graph::from_gml(&g.to_gml(), &g.source).unwrap();
    assert_eq!(g, again);
}

const HEADER: &str = r#"<?xml version="1.0" encoding="utf-8"?>
<graphml xmlns="http://graphml.graphdrawing.org/xmlns">
  <key attr.name="latency" attr.type="double" for="edge" id="lat" />
  <key attr.name="packetloss" attr.type="double" for="edge" id="ploss" />
  <key attr.name="countrycode" attr.type="string" for="node" id="cc" />
  <key attr.name="bandwidthup" attr.type="int" for="node" id="up" />
  <key attr.name="jitter" attr.type="double" for="edge" id="jit">
    <default>0.5</default>
  </key>
"#;

#[test]
fn keys_are_found_by_name_and_defaults_apply() {
    let text = format!(
        r#"{HEADER}  <graph edgedefault="directed">
    <node id="7"><data key="cc">DE</data><data key="up">2</data></node>
    <node id="n8" />
    <edge source="7" target="n8"><data key="lat">1.5</data><data key="ploss">0.25</data></edge>
    <edge source="n8" target="7"><data key="lat">3</data><data key="jit">1</data></edge>
  </graph>
</graphml>"#
    );
    let g = Graph::from_graphml(&text, "small.graphml").unwrap();
    assert!(g.directed);
    assert_eq!(g.nodes[0].id, 7);
    assert_eq!(g.nodes[0].country_code.as_deref(), Some("DE"));
    assert_eq!(g.nodes[0].bandwidth_up, Some(2 * KIB_PER_S));
    assert_eq!(g.nodes[1].id, 8);
    assert_eq!(g.nodes[1].label.as_deref(), Some("n8"));
    assert_eq!(g.edges[0].latency, 1_500_000);
    assert_eq!(g.edges[0].jitter, 500_000);
    assert_eq!(g.edges[0].packet_loss, 0.25);
    assert_eq!(g.edges[1].latency, 3 * MS);
    assert_eq!(g.edges[1].jitter, MS);
}

/// GraphML latencies are milliseconds; more than an hour on one edge is refused like in GML.
#[test]
fn graphml_edge_delays_are_at_most_an_hour() {
    let edge = |lat: &str, jit: &str| {
        doc(&format!(
            "    <node id=\"1\" />\n    <edge source=\"1\" target=\"1\">\n      <data key=\"lat\">{lat}</data>\n      <data key=\"jit\">{jit}</data>\n    </edge>\n"
        ))
    };
    let g = Graph::from_graphml(&edge("3600000", "3600000"), "hour.graphml").unwrap();
    assert_eq!(g.edges[0].latency, onionlab_topology::MAX_EDGE_DELAY);
    assert_eq!(g.edges[0].jitter, onionlab_topology::MAX_EDGE_DELAY);
    for (lat, jit, needle, line) in [
        (
            "3600000.001",
            "0",
            "latency 3600000.001 ms is longer than",
            13,
        ),
        ("1e9", "0", "latency 1e9 ms is longer than", 13),
        ("1", "3600001", "jitter 3600001 ms is longer than", 14),
    ] {
        let err = Graph::from_graphml(&edge(lat, jit), "hour.graphml").unwrap_err();
        assert!(err.message.contains(needle), "{err}");
        assert_eq!(err.line, Some(line), "{err}");
    }
}

fn doc(body: &str) -> String {
    format!("{HEADER}  <graph edgedefault=\"undirected\">\n{body}  </graph>\n</graphml>\n")
}

#[test]
fn malformed_graphml_is_rejected_with_lines() {
    // HEADER ends with line 9, <graph> is line 10, so bodies start on line 11.
    let cases: Vec<(String, usize, Vec<&str>)> = vec![
        (
            doc("    <node id=\"1\">\n    <node id=\"2\" />\n"),
            13,
            vec!["malformed XML"],
        ),
        (
            doc("    <node id=\"1\">\n      <data key=\"d99\">x</data>\n    </node>\n"),
            12,
            vec!["undeclared key 'd99'"],
        ),
        (
            doc("    <node id=\"1\" />\n    <edge source=\"1\" target=\"5\">\n      <data key=\"lat\">2</data>\n    </edge>\n"),
            12,
            vec!["edge target '5'", "does not refer"],
        ),
        (
            doc("    <node id=\"1\" />\n    <edge source=\"1\" target=\"1\">\n      <data key=\"lat\">-2.5</data>\n    </edge>\n"),
            13,
            vec!["latency must not be negative", "-2.5"],
        ),
        (
            doc("    <node id=\"1\" />\n    <edge source=\"1\" target=\"1\">\n      <data key=\"ploss\">0.1</data>\n    </edge>\n"),
            12,
            vec!["missing required attribute 'latency'"],
        ),
        (
            doc("    <node id=\"1\" />\n    <edge source=\"1\" target=\"1\">\n      <data key=\"lat\">1</data>\n      <data key=\"ploss\">2</data>\n    </edge>\n"),
            14,
            vec!["from 0 to below 1"],
        ),
        (
            doc("    <node id=\"1\" />\n    <edge source=\"1\" target=\"1\">\n      <data key=\"lat\">1</data>\n      <data key=\"ploss\">1.0</data>\n    </edge>\n"),
            14,
            vec!["from 0 to below 1", "lose every packet", "1.0"],
        ),
        (
            doc("    <node id=\"1\"><data key=\"cc\">0</data></node>\n"),
            11,
            vec!["node '1'", "countrycode must be a two-letter country code", "\"0\""],
        ),
        (
            doc("    <node id=\"1\"><data key=\"cc\">1E309</data></node>\n"),
            11,
            vec!["two-letter country code", "\"1E309\""],
        ),
        (
            format!("<?xml version=\"1.0\"?>\n<!DOCTYPE graphml [ <!ENTITY a \"b\"> ]>\n{}", &HEADER[HEADER.find('\n').unwrap() + 1..]),
            2,
            vec!["document type declaration", "remove it"],
        ),
        (
            doc("    <node id=\"1\" />\n    <node id=\"1\" />\n"),
            12,
            vec!["duplicate node id '1'"],
        ),
        (
            doc("    <node id=\"a1\" />\n    <node id=\"b1\" />\n"),
            12,
            vec!["'a1' and 'b1'", "number 1"],
        ),
        (
            doc("    <node id=\"abc\" />\n"),
            11,
            vec!["'abc' does not end in a number"],
        ),
        (
            doc("    <node id=\"1\"><data key=\"up\">fast</data></node>\n"),
            11,
            vec!["bandwidthup must be a number", "fast"],
        ),
        (
            doc("    <node id=\"1\"><data key=\"lat\">1</data></node>\n"),
            11,
            vec!["not declared for <node>"],
        ),
        (
            "<?xml version=\"1.0\"?>\n<gml>\n</gml>\n".to_string(),
            2,
            vec!["expected a <graphml> root element"],
        ),
        (
            format!("{HEADER}  <graph>\n  </graph>\n</graphml>\n"),
            10,
            vec!["missing the required attribute 'edgedefault'"],
        ),
        (format!("{HEADER}</graphml>\n"), 2, vec!["no <graph> element"]),
    ];
    for (i, (text, line, needles)) in cases.into_iter().enumerate() {
        let result = std::panic::catch_unwind(|| Graph::from_graphml(&text, "bad.graphml"))
            .unwrap_or_else(|_| panic!("case {i} panicked"));
        if result.is_ok() {
            panic!("case {i} was accepted:\n{text}");
        }
        eprintln!("case {i}: {}", result.as_ref().unwrap_err());
        assert_err(result, line, &needles);
    }
}

#[test]
fn load_reports_unreadable_files() {
    let dir = std::env::temp_dir().join(format!("onionlab-topology-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let missing = Graph::load(&dir.join("missing.gml")).unwrap_err();
    assert!(missing.message.contains("does not exist"), "{missing}");
    assert_eq!(missing.line, None);

    let wrong = Graph::load(&dir.join("graph.txt")).unwrap_err();
    assert!(
        wrong.message.contains("unknown graph file extension"),
        "{wrong}"
    );

    let not_xz = dir.join("plain.gml.xz");
    std::fs::write(&not_xz, "graph [ ]").unwrap();
    let err = Graph::load(&not_xz).unwrap_err();
    assert!(err.message.contains("cannot decompress"), "{err}");

    let gml = dir.join("ok.gml");
    std::fs::write(
        &gml,
        "graph [ node [ id 3 ] edge [ source 3 target 3 latency \"1 ms\" ] ]",
    )
    .unwrap();
    let g = Graph::load(&gml).unwrap();
    assert_eq!(g.nodes[0].id, 3);
    assert!(g.source.ends_with("ok.gml"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn never_panics_on_truncated_graphml() {
    let text = doc(
        "    <node id=\"1\"><data key=\"cc\">DE</data></node>\n    <node id=\"2\" />\n    <edge source=\"1\" target=\"2\"><data key=\"lat\">2</data></edge>\n",
    );
    assert!(Graph::from_graphml(&text, "ok.graphml").is_ok());
    for (end, _) in text.char_indices() {
        let result = std::panic::catch_unwind(|| Graph::from_graphml(&text[..end], "cut.graphml"))
            .unwrap_or_else(|_| panic!("panicked at cut {end}"));
        if let Err(e) = result {
            assert!(e.line.is_some(), "{e}");
        }
    }
}
