//! Shortest paths: shortcuts, jitter and loss accumulation, self paths and failures.

use onionlab_topology::{Edge, Graph, Node, Path};

const MS: u64 = 1_000_000;

fn node(id: u64, packet_loss: f64) -> Node {
    Node {
        id,
        label: None,
        country_code: None,
        bandwidth_up: None,
        bandwidth_down: None,
        packet_loss,
    }
}

fn edge(source: usize, target: usize, latency_ms: u64, jitter_ms: u64, packet_loss: f64) -> Edge {
    Edge {
        source,
        target,
        latency: latency_ms * MS,
        jitter: jitter_ms * MS,
        packet_loss,
    }
}

const TRIANGLE: &str = r#"graph [
  node [ id 1 label "A" ]
  node [ id 2 label "B" ]
  node [ id 3 label "C" ]
  edge [ source 1 target 1 latency "1 ms" ]
  edge [ source 2 target 2 latency "2 ms" ]
  edge [ source 1 target 2 latency "100 ms" jitter "1 ms" packet_loss 0.5 ]
  edge [ source 1 target 3 latency "20 ms" jitter "3 ms" packet_loss 0.1 ]
  edge [ source 3 target 2 latency "30 ms" jitter "4 ms" packet_loss 0.2 ]
]"#;

#[test]
fn triangle_shortcut_is_taken() {
    let g = Graph::from_gml(TRIANGLE, "triangle.gml").unwrap();
    let (a, b) = (g.node_index(1).unwrap(), g.node_index(2).unwrap());
    let t = g.paths(&[a, b]).unwrap();
    let p = t.path(a, b);
    assert_eq!(p.latency, 50 * MS);
    // Jitter and loss follow the chosen path A-C-B, not the direct edge.
    assert_eq!(p.jitter, 7 * MS);
    assert!((p.loss - (1.0 - 0.9 * 0.8)).abs() < 1e-12, "{p:?}");
    assert_eq!(t.path(b, a), p, "undirected");
    // C is relayed through but not used, so it needs no self-loop.
    assert!(t.try_path(a, 2).is_none());
    assert_eq!(t.path(a, a).latency, MS);
    assert_eq!(t.min_latency(), MS);
}

#[test]
fn loss_combines_edges_and_endpoint_nodes() {
    let g = Graph {
        source: "loss".to_string(),
        directed: false,
        nodes: vec![node(0, 0.1), node(1, 0.0), node(2, 0.2)],
        edges: vec![
            edge(0, 0, 5, 0, 0.01),
            edge(2, 2, 5, 0, 0.0),
            edge(0, 1, 10, 1, 0.3),
            edge(1, 2, 10, 2, 0.4),
        ],
    };
    let t = g.paths(&[0, 2]).unwrap();
    let p = t.path(0, 2);
    assert_eq!(p.latency, 20 * MS);
    assert_eq!(p.jitter, 3 * MS);
    // Both endpoints' node loss, both edges; the relay node's own loss does not apply.
    let expected = 1.0 - 0.9 * 0.7 * 0.6 * 0.8;
    assert!(
        (p.loss - expected).abs() < 1e-12,
        "{} vs {expected}",
        p.loss
    );
    // A self path crosses the node's access link twice and its self-loop once.
    let own = t.path(0, 0);
    assert!(
        (own.loss - (1.0 - 0.9 * 0.99 * 0.9)).abs() < 1e-12,
        "{own:?}"
    );
    assert_eq!(t.path(2, 2).loss, 1.0 - 0.8 * 0.8);
}

#[test]
fn directed_edges_only_go_one_way() {
    let mut g = Graph {
        source: "directed".to_string(),
        directed: true,
        nodes: vec![node(0, 0.0), node(1, 0.0)],
        edges: vec![
            edge(0, 0, 1, 0, 0.0),
            edge(1, 1, 1, 0, 0.0),
            edge(0, 1, 10, 0, 0.0),
        ],
    };
    let err = g.paths(&[0, 1]).unwrap_err();
    assert!(
        err.message.contains("no path from node 1 to node 0"),
        "{err}"
    );
    assert_eq!(err.line, None);
    g.edges.push(edge(1, 0, 7, 0, 0.0));
    let t = g.paths(&[0, 1]).unwrap();
    assert_eq!(t.path(0, 1).latency, 10 * MS);
    assert_eq!(t.path(1, 0).latency, 7 * MS);
}

#[test]
fn missing_self_loop_names_the_node() {
    let text = r#"graph [
  node [ id 4 label "lonely" ]
  node [ id 5 ]
  edge [ source 4 target 5 latency "1 ms" ]
  edge [ source 5 target 5 latency "1 ms" ]
]"#;
    let g = Graph::from_gml(text, "noloop.gml").unwrap();
    let err = g.paths(&[1, 0]).unwrap_err();
    assert_eq!(err.to_string(), "noloop.gml: node 4 (lonely) has no self-loop edge, which hosts attached to the same node need");
    // Only listed nodes need one.
    assert_eq!(g.paths(&[1]).unwrap().path(1, 1).latency, MS);
}

/// Path lengths saturate: a path whose edge latencies add up past `u64::MAX` is still found (it
/// used to be reported as "no path"), and it is the longest possible path.
#[test]
fn overflowing_path_lengths_saturate_instead_of_vanishing() {
    let half = u64::MAX / 2 + 1;
    let mut g = Graph {
        source: "hand-built".into(),
        directed: false,
        nodes: vec![node(0, 0.0), node(1, 0.0), node(2, 0.0)],
        edges: vec![edge(0, 0, 1, 0, 0.0), edge(2, 2, 1, 0, 0.0)],
    };
    for (a, b) in [(0, 1), (1, 2)] {
        g.edges.push(Edge {
            source: a,
            target: b,
            latency: half,
            jitter: half,
            packet_loss: 0.0,
        });
    }
    let t = g.paths(&[0, 2]).unwrap();
    let p = t.path(0, 2);
    assert_eq!(p.latency, u64::MAX);
    assert_eq!(p.jitter, u64::MAX);
    assert_eq!(t.path(2, 0).latency, u64::MAX);
    // A shorter path still wins over a saturated one.
    g.edges.push(edge(0, 2, 5, 0, 0.0));
    assert_eq!(g.paths(&[0, 2]).unwrap().path(0, 2).latency, 5 * MS);
}

#[test]
fn unreachable_pair_names_both_nodes() {
    let text = r#"graph [
  node [ id 1 ] node [ id 2 ] node [ id 3 ]
  edge [ source 1 target 1 latency "1 ms" ]
  edge [ source 2 target 2 latency "1 ms" ]
  edge [ source 3 target 3 latency "1 ms" ]
  edge [ source 1 target 2 latency "1 ms" ]
]"#;
    let g = Graph::from_gml(text, "split.gml").unwrap();
    assert!(g.paths(&[0, 1]).is_ok());
    let err = g.paths(&[0, 1, 2]).unwrap_err();
    assert!(
        err.message.contains("no path from node 1 to node 3"),
        "{err}"
    );
}

#[test]
fn equal_latency_ties_are_deterministic() {
    // Two equally short routes from 0 to 3: via 1 (listed first) and via 2.
    let g = Graph {
        source: "ties".to_string(),
        directed: false,
        nodes: (0..4).map(|i| node(i, 0.0)).collect(),
        edges: vec![
            edge(0, 0, 1, 0, 0.0),
            edge(3, 3, 1, 0, 0.0),
            edge(0, 1, 5, 1, 0.0),
            edge(1, 3, 5, 1, 0.0),
            edge(0, 2, 5, 9, 0.0),
            edge(2, 3, 5, 9, 0.0),
        ],
    };
    let first = g.paths(&[0, 3]).unwrap().path(0, 3);
    for _ in 0..10 {
        assert_eq!(g.paths(&[3, 0]).unwrap().path(0, 3), first);
    }
    assert_eq!(first.latency, 10 * MS);
    assert_eq!(first.jitter, 2 * MS);
}

#[test]
fn parallel_edges_and_self_loops_pick_the_fastest() {
    let g = Graph {
        source: "parallel".to_string(),
        directed: false,
        nodes: vec![node(0, 0.0), node(1, 0.0)],
        edges: vec![
            edge(0, 0, 9, 0, 0.0),
            edge(0, 0, 3, 0, 0.0),
            edge(1, 1, 4, 0, 0.0),
            edge(0, 1, 8, 0, 0.0),
            edge(1, 0, 6, 0, 0.0),
        ],
    };
    let t = g.paths(&[0, 1, 1, 0]).unwrap();
    assert_eq!(t.used(), &[0, 1]);
    assert_eq!(t.path(0, 0).latency, 3 * MS);
    assert_eq!(t.path(0, 1).latency, 6 * MS);
    assert_eq!(t.min_latency(), 3 * MS);
}

#[test]
fn bad_indices_are_errors_not_panics() {
    let mut g = Graph::single_switch(1, 1, MS, 0.0);
    let err = g.paths(&[3]).unwrap_err();
    assert!(err.message.contains("node index 3"), "{err}");
    g.edges.push(edge(0, 9, 1, 0, 0.0));
    let err = g.paths(&[0]).unwrap_err();
    assert!(err.message.contains("refers to node index 9"), "{err}");
}

#[test]
#[should_panic(expected = "no path computed")]
fn path_outside_the_table_panics() {
    let text = "graph [ node [ id 0 ] node [ id 1 ] edge [ source 0 target 0 latency \"1 s\" ] edge [ source 0 target 1 latency \"1 s\" ] ]";
    let g = Graph::from_gml(text, "t.gml").unwrap();
    let t = g.paths(&[0]).unwrap();
    let _: Path = t.path(0, 1);
}

#[test]
fn empty_selection_gives_empty_table() {
    let g = Graph::single_switch(1, 1, MS, 0.0);
    let t = g.paths(&[]).unwrap();
    assert!(t.used().is_empty());
    assert_eq!(t.min_latency(), 0);
}
