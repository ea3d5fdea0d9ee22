//! GML parsing: Shadow's examples, unit handling, and rejection of malformed input.

mod common;

use common::assert_err;
use onionlab_topology::{Graph, TopologyError};

const BRIEF_EXAMPLE: &str = r#"
graph [
  directed 0
  node [ id 0  host_bandwidth_up "100 Mbit"  host_bandwidth_down "100 Mbit" ]
  edge [ source 0 target 0 latency "50 ms" jitter "1 ms" packet_loss 0.01 ]
]
"#;

const SHADOW_SPEC_EXAMPLE: &str = r#"graph [
  directed 0
  node [
    id 0
    label "node at 1.2.3.4"
    country_code "US"
    city_code "Portland"
    ip_address "1.2.3.4"
    bandwidth_down "100 Mbit"
    bandwidth_up "100 Mbit"
  ]
  edge [
    source 0
    target 0
    label "path from 1.2.3.4 to 1.2.3.4"
    latency "10 ms"
    jitter "0 ms"
    packet_loss 0.0
  ]
]
"#;

const TWO_NODES: &str = r#"# a comment line
graph [
  directed 1
  node [
    id 10
    label "a &quot;quoted&quot; &amp; label"
    host_bandwidth_up "10 Kibit"
    host_bandwidth_down "500 kilobit"
    packet_loss 0.001
  ]
  node [ id 20 host_bandwidth_up "1 Gbit" host_bandwidth_down 8000 ]
  edge [ source 10 target 20 latency "0.25 s" packet_loss 1e-3 ]
  edge [ source 20 target 10 latency "200 us" jitter "10 ns" ]
  edge [ source 10 target 10 latency "1 s" ]
  edge [ source 20 target 20 latency "2 min" ]
]
"#;

#[test]
fn brief_example() {
    let g = Graph::from_gml(BRIEF_EXAMPLE, "brief.gml").unwrap();
    assert_eq!(g.source, "brief.gml");
    assert!(!g.directed);
    assert_eq!(g.nodes.len(), 1);
    let n = &g.nodes[0];
    assert_eq!(n.id, 0);
    assert_eq!(n.bandwidth_up, Some(100_000_000));
    assert_eq!(n.bandwidth_down, Some(100_000_000));
    assert_eq!(n.packet_loss, 0.0);
    assert_eq!(g.edges.len(), 1);
    let e = &g.edges[0];
    assert_eq!((e.source, e.target), (0, 0));
    assert_eq!(e.latency, 50_000_000);
    assert_eq!(e.jitter, 1_000_000);
    assert_eq!(e.packet_loss, 0.01);
}

#[test]
fn shadow_spec_example() {
    let g = Graph::from_gml(SHADOW_SPEC_EXAMPLE, "spec.gml").unwrap();
    let n = &g.nodes[0];
    assert_eq!(n.label.as_deref(), Some("node at 1.2.3.4"));
    assert_eq!(n.country_code.as_deref(), Some("US"));
    assert_eq!(n.bandwidth_down, Some(100_000_000));
    assert_eq!(n.bandwidth_up, Some(100_000_000));
    assert_eq!(g.edges[0].latency, 10_000_000);
    assert_eq!(g.edges[0].jitter, 0);
    assert_eq!(g.edges[0].packet_loss, 0.0);
}

#[test]
fn units_ids_and_direction() {
    let g = Graph::from_gml(TWO_NODES, "two.gml").unwrap();
    assert!(g.directed);
    assert_eq!(g.node_index(10), Some(0));
    assert_eq!(g.node_index(20), Some(1));
    assert_eq!(g.node_index(30), None);
    let a = &g.nodes[0];
    assert_eq!(a.label.as_deref(), Some("a \"quoted\" & label"));
    assert_eq!(a.bandwidth_up, Some(10 * 1024));
    assert_eq!(a.bandwidth_down, Some(500_000));
    assert_eq!(a.packet_loss, 0.001);
    assert_eq!(g.nodes[1].bandwidth_up, Some(1_000_000_000));
    assert_eq!(g.nodes[1].bandwidth_down, Some(8000));
    let lat: Vec<u64> = g.edges.iter().map(|e| e.latency).collect();
    assert_eq!(lat, [250_000_000, 200_000, 1_000_000_000, 120_000_000_000]);
    assert_eq!(g.edges[0].packet_loss, 0.001);
    assert_eq!(g.edges[1].jitter, 10);
    assert_eq!(g.edges[1].packet_loss, 0.0);

    // Directed: each direction uses its own edge.
    let t = g.paths(&[0, 1]).unwrap();
    assert_eq!(t.path(0, 1).latency, 250_000_000);
    assert_eq!(t.path(1, 0).latency, 200_000);
}

#[test]
fn round_trip_through_writer() {
    for (text, name) in [
        (BRIEF_EXAMPLE, "brief.gml"),
        (SHADOW_SPEC_EXAMPLE, "spec.gml"),
        (TWO_NODES, "two.gml"),
    ] {
        let g = Graph::from_gml(text, name).unwrap();
        let again = Graph::from_gml(&g.to_gml(), name).unwrap();
        assert_eq!(g, again, "round trip of {name}");
    }
}

#[test]
fn unknown_keys_are_ignored() {
    let text = r#"Creator "test" Version 1
graph [
  comment "anything" weird [ nested [ deep 1 ] ]
  node [ id 1 city_code "X" ip_address "1.2.3.4" extra [ a 1 ] ]
  edge [ source 1 target 1 latency "1 ms" label "self" color "red" ]
]"#;
    let g = Graph::from_gml(text, "extra.gml").unwrap();
    assert_eq!(g.nodes.len(), 1);
    assert_eq!(g.edges[0].latency, 1_000_000);
}

#[test]
fn edges_may_precede_nodes() {
    let text = "graph [ edge [ source 2 target 1 latency \"5 ms\" ] node [ id 1 ] node [ id 2 ] ]";
    let g = Graph::from_gml(text, "order.gml").unwrap();
    assert_eq!((g.edges[0].source, g.edges[0].target), (1, 0));
}

/// Each case: input, expected line, substrings the message must contain.
const MALFORMED: &[(&str, usize, &[&str])] = &[
    // 1. list never closed: reported where it was opened.
    ("graph [\n  node [ id 0 ]\n", 1, &["unterminated list", "'graph'"]),
    ("graph [\n  node [\n    id 0\n", 2, &["unterminated list", "'node'"]),
    // 2. string never closed: reported where it started.
    (
        "graph [\n  node [\n    id 0\n    label \"abc\n  ]\n]\n",
        4,
        &["unterminated string"],
    ),
    // 3. garbage characters.
    ("graph [\n  node [ id 0 ]\n  @\n]", 3, &["unexpected character '@'"]),
    ("graph [\n  node [ id 0 ] ; \n]", 2, &["unexpected character ';'"]),
    // 4. edge to an undefined node.
    (
        "graph [\n  node [ id 0 ]\n  edge [\n    source 0\n    target 7\n    latency \"1 ms\"\n  ]\n]",
        5,
        &["edge target 7", "does not refer"],
    ),
    (
        "graph [\n  node [ id 0 ]\n  edge [ source 3 target 0 latency \"1 ms\" ]\n]",
        3,
        &["edge source 3"],
    ),
    // 5. duplicate node id.
    ("graph [\n  node [ id 0 ]\n  node [\n    id 0\n  ]\n]", 4, &["duplicate node id 0"]),
    // 6. negative latency.
    (
        "graph [\n  node [ id 0 ]\n  edge [ source 0 target 0\n latency \"-5 ms\" ]\n]",
        4,
        &["latency", "negative"],
    ),
    ("graph [ node [ id 0 ]\n edge [ source 0 target 0 latency \"-1 ms\" ] ]", 2, &["negative"]),
    // 7. packet loss outside [0, 1].
    (
        "graph [\n  node [ id 0 ]\n  edge [ source 0 target 0 latency \"1 ms\"\n    packet_loss 1.5 ]\n]",
        4,
        &["packet_loss", "from 0 to below 1", "1.5"],
    ),
    ("graph [\n  node [ id 0 packet_loss -0.1 ]\n]", 2, &["from 0 to below 1"]),
    (
        "graph [\n  node [ id 0 ]\n  edge [ source 0 target 0 latency \"1 ms\"\n    packet_loss 1.0 ]\n]",
        4,
        &["packet_loss", "lose every packet", "1.0"],
    ),
    ("graph [\n  node [ id 0 packet_loss 1 ]\n]", 2, &["from 0 to below 1"]),
    // 7b. country codes are two letters.
    (
        "graph [\n  node [ id 0\n    country_code \"0\" ]\n]",
        3,
        &["country_code", "two-letter country code", "\"0\""],
    ),
    (
        "graph [\n  node [ id 0 country_code \"USA\" ]\n]",
        2,
        &["two-letter country code", "\"USA\""],
    ),
    // 8. missing required keys: reported at the list's key.
    (
        "graph [\n  node [ id 0 ]\n  edge [\n    source 0\n    target 0\n  ]\n]",
        3,
        &["edge", "missing required key 'latency'"],
    ),
    ("graph [\n  node [ label \"x\" ]\n]", 2, &["node", "missing required key 'id'"]),
    (
        "graph [\n  node [ id 0 ]\n  edge [ target 0 latency \"1 ms\" ]\n]",
        3,
        &["missing required key 'source'"],
    ),
    // 9. bad units.
    (
        "graph [\n  node [ id 0 ]\n  edge [ source 0 target 0\n    latency \"5 parsecs\" ]\n]",
        4,
        &["unknown time unit 'parsecs'"],
    ),
    (
        "graph [\n  node [\n    id 0\n    host_bandwidth_up \"12 MiB\"\n  ]\n]",
        4,
        &["host_bandwidth_up", "not bytes"],
    ),
    (
        "graph [\n  node [ id 0\n host_bandwidth_down \"10 Xbit\" ]\n]",
        3,
        &["unknown bandwidth prefix 'X'"],
    ),
    // 10. structural errors.
    ("graph [\n  node [\n    id ]\n]", 3, &["expected a value for key 'id'", "']'"]),
    ("graph [\n  node [ 5 ]\n]", 2, &["expected a key", "number 5"]),
    ("graph [\n]\n]\n", 3, &["unexpected ']'"]),
    ("graph [\n  directed 2\n]", 2, &["'directed' must be 0 or 1"]),
    ("graph [\n  node [\n    id \"a\"\n  ]\n]", 3, &["'id' must be an integer"]),
    ("graph [\n  node [ id -3 ]\n]", 2, &["non-negative", "-3"]),
    ("graph [\n  node [ id 0 ]\n  edge [ source 0 target 0 latency 10ms ]\n]", 3, &["malformed number '10ms'", "quoted string"]),
    // 11. times without a unit, or longer than an edge may take.
    ("graph [\n  node [ id 0 ]\n  edge [ source 0 target 0\n latency 1 ]\n]", 4, &["edge key 'latency'", "bare number 1 has no unit", "\"10 ms\""]),
    ("graph [\n  node [ id 0 ]\n  edge [ source 0 target 0 latency -1 ]\n]", 3, &["bare number -1 has no unit"]),
    ("graph [\n  node [ id 0 ]\n  edge [ source 0 target 0 latency \"1 ms\" jitter 0 ]\n]", 3, &["edge key 'jitter'", "bare number 0 has no unit"]),
    ("graph [\n  node [ id 0 ]\n  edge [ source 0 target 0 latency \"10\" ]\n]", 3, &["\"10\" has no unit"]),
    ("graph [\n  node [ id 0 ]\n  edge [ source 0 target 0 latency \"61 min\" ]\n]", 3, &["\"61 min\" is longer than", "1 hour"]),
    ("graph [\n  node [ id 0 ]\n  edge [ source 0 target 0 latency \"1 ms\" jitter \"2 h\" ]\n]", 3, &["'jitter'", "longer than"]),
    ("creator \"me\"\n", 2, &["no 'graph"]),
    ("graph 5", 1, &["'graph' must be a list"]),
    ("graph [\n  node [ id 0 id 1 ]\n]", 2, &["duplicate key 'id'"]),
    ("graph [\n  node [ id 0 ]\n  edge [ source 0 target 0 latency [ x 1 ] ]\n]", 3, &["'latency' must be a time"]),
    ("graph [\n  node [\n    id", 3, &["expected a value for key 'id'", "end of file"]),
];

#[test]
fn malformed_inputs_are_rejected_with_lines() {
    assert!(MALFORMED.len() >= 12);
    for (i, (text, line, needles)) in MALFORMED.iter().enumerate() {
        let result = std::panic::catch_unwind(|| Graph::from_gml(text, "bad.gml"))
            .unwrap_or_else(|_| panic!("case {i} panicked"));
        if result.is_ok() {
            panic!("case {i} was accepted: {text:?}");
        }
        assert_err(result, *line, needles);
    }
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    let text = format!("graph {}", "[ a ".repeat(100_000));
    let err = Graph::from_gml(&text, "deep.gml").unwrap_err();
    assert!(err.message.contains("nested"), "{err}");
}

/// Every prefix of a valid file, and many byte-level mutations of it, must parse or fail
/// cleanly; none may panic.
#[test]
fn never_panics_on_damaged_input() {
    let parse = |s: &str| -> Result<Graph, TopologyError> {
        std::panic::catch_unwind(|| Graph::from_gml(s, "fuzz.gml"))
            .unwrap_or_else(|_| panic!("panicked on {s:?}"))
    };
    for (end, _) in TWO_NODES.char_indices() {
        let _ = parse(&TWO_NODES[..end]);
    }
    let alphabet = b"[]\"#-+.e0159 \nabz_\xce\xbc";
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..3000 {
        let mut bytes = TWO_NODES.as_bytes().to_vec();
        for _ in 0..1 + next() % 4 {
            let at = (next() % bytes.len() as u64) as usize;
            let b = alphabet[(next() % alphabet.len() as u64) as usize];
            match next() % 3 {
                0 => bytes[at] = b,
                1 => bytes.insert(at, b),
                _ => {
                    bytes.remove(at);
                }
            }
        }
        let text = String::from_utf8_lossy(&bytes);
        if let Err(e) = parse(&text) {
            assert!(e.line.is_some(), "parse error without a line: {e}");
        }
    }
}

/// An hour is the longest an edge may take, and is accepted.
#[test]
fn an_hour_is_the_longest_edge_delay() {
    let text =
        "graph [ node [ id 0 ] edge [ source 0 target 0 latency \"1 h\" jitter \"60 min\" ] ]";
    let g = Graph::from_gml(text, "hour.gml").unwrap();
    assert_eq!(g.edges[0].latency, onionlab_topology::MAX_EDGE_DELAY);
    assert_eq!(g.edges[0].jitter, onionlab_topology::MAX_EDGE_DELAY);
    let over = text.replace("\"1 h\"", "\"3600000000001 ns\"");
    assert!(Graph::from_gml(&over, "hour.gml").is_err());
}
