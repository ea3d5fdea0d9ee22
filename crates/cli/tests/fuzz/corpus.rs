//! The seed corpus: the shipped example scenarios, the broken ones, the regression cases, a
//! few written here, small graphs in both formats and consensus excerpts cut from a shipped
//! consensus.

use std::fs;
use std::path::{Path, PathBuf};

use onionlab_net::topology::{Edge, Graph, Node as GraphNode};

use crate::mutate::{self, Format, Mutation};
use crate::yaml::Node;

pub(crate) struct Seed {
    pub name: String,
    pub text: String,
    /// The YAML tree, for scenarios that are YAML at all.
    pub tree: Option<Node>,
}

pub(crate) struct Corpus {
    pub scenarios: Vec<Seed>,
    /// The first this many scenario seeds are meant to pass validation (the examples and the
    /// fuzzer's own); mutations start from them more often.
    pub valid_scenarios: usize,
    pub gml: Vec<Seed>,
    pub graphml: Vec<Seed>,
    pub consensus: Vec<Seed>,
    /// Keys structure-aware mutations may insert.
    pub keys: Vec<String>,
}

pub(crate) fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub(crate) fn regressions_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz/regressions")
}

/// A scenario small enough to run in well under a second (the `TINY` of tests/cli.rs).
pub(crate) const TINY: &str = r#"
name: tiny
run: { seed: 7, stop_time: 3m, bootstrap: 1m }
network: { graph: builtin, builtin: { latency: 20ms, bandwidth: 1 Gbit } }
authorities: 1
relays:
  generate: { guard: 3, exit: 2, guard_exit: 1, middle: 4, bandwidth: { fixed: 2 MiB/s } }
servers: [ { name: web, count: 2, bandwidth: 1 Gbit } ]
clients:
  - { name: web, count: 6, workload: { web: { size: 320 KiB, pause: [1s, 10s] } }, bandwidth: 50 Mbit }
  - { name: bulk, count: 2, workload: { bulk: { size: 5 MiB } }, bandwidth: 50 Mbit }
"#;

/// Seeds written for the fuzzer: every section and key at least once, and the files the case
/// directory holds (`g.gml`, `g.graphml`, `c.consensus`, `fidelity.gml`).
const OWN_SCENARIOS: &[(&str, &str)] = &[
    ("own-tiny", TINY),
    (
        "own-list",
        r#"
name: own-list
run: { seed: 3, stop_time: 20s, bootstrap: 0s, threads: 2 }
network: { graph: builtin, builtin: { latency: 5ms, loss: 0.001, bandwidth: 100 Mbit }, lookahead_floor: 1ms, down_queue: 50ms }
tor: { scheduler: vanilla, flow_control: sendme, max_circuit_dirtiness_s: 30 }
authorities: { count: 2, bandwidth_up: 10 Mbit, bandwidth_down: 20 Mbit }
relays:
  list:
    - { name: g, count: 3, flags: [guard, fast, stable], bandwidth_rate: 1 MiB/s, bandwidth_burst: 2 MiB/s, link: 100 Mbit }
    - { name: m, flags: [fast, stable, running, valid], bandwidth_rate: 500 KiB/s, relay_bandwidth_rate: 400 KiB/s, relay_bandwidth_burst: 800 KiB/s, consensus_weight: 300, family: fam, link_up: 50 Mbit, link_down: 60 Mbit }
    - { name: e, count: 2, flags: [exit, fast], bandwidth_rate: 1 MiB/s, exit_policy: "accept 80,443", family: fam, address: 10.1.0.1 }
servers:
  - { name: web, count: 1, port: 80, bandwidth_up: 100 Mbit, bandwidth_down: 100 Mbit }
clients:
  - { name: perf, count: 2, workload: { perf: { size: 50 KiB, interval: 5s, timeout: 10s } }, servers: web, start: [0s, 2s], bandwidth: 20 Mbit }
  - { name: web, count: 2, workload: { web: { size: 100 KiB, pause: 1s, timeout: 5s } }, start: 1s, bandwidth_up: 10 Mbit, bandwidth_down: 20 Mbit }
"#,
    ),
    (
        "own-gml",
        r#"
run: { stop_time: 30s }
network: { graph: g.gml }
authorities: { count: 1, country: DE }
relays:
  generate: { guard: 2, exit: 2, middle: 2, bandwidth: { lognormal: { median: 1 MiB/s, sigma: 0.5 } }, burst_factor: 1.5, link: 100 Mbit, country: DE }
servers: [ { name: web, country: US, bandwidth: 100 Mbit } ]
clients:
  - { name: bulk, count: 2, country: FR, workload: { bulk: { size: 1 MiB, pause: [0s, 1s], timeout: 30s } }, bandwidth: 20 Mbit }
"#,
    ),
    (
        "own-graphml",
        r#"
run: { stop_time: 30s }
network: { graph: g.graphml }
authorities: 1
relays:
  generate: { guard: 2, guard_exit: 2, middle: 2, bandwidth: { fixed: 1 MiB/s }, exit_policy: "accept 80" }
servers: [ { name: web } ]
clients: [ { name: web, count: 3, workload: { web: {} } } ]
"#,
    ),
    (
        "own-sample",
        r#"
run: { seed: 5, stop_time: 30s }
authorities: 1
relays:
  sample: { consensus: c.consensus, count: 8, bandwidth_rate: 1 MiB/s, burst_factor: 2, link: 100 Mbit }
servers: [ { name: web, bandwidth: 1 Gbit } ]
clients: [ { name: perf, count: 2, workload: { perf: { size: 1 MiB } }, bandwidth: 50 Mbit } ]
"#,
    ),
    (
        "own-sample-shipped",
        r#"
run: { stop_time: 30s }
network: { graph: internet-2018 }
relays:
  sample: { consensus: data:consensus/2019-12-15-13-00-00-microdesc-consensus, count: 12, country: US }
servers: [ { name: web, country: DE } ]
clients: [ { name: web, count: 3, country: US, workload: { web: { size: 50 KiB } } } ]
"#,
    ),
    (
        "own-relays-csv",
        r#"
run: { stop_time: 30s, bootstrap: 5s }
network: { graph: fidelity.gml }
relays:
  generate: { guard: 2, exit: 2, middle: 2, bandwidth: { from_file: data:relays/relays-2018-1998.csv } }
servers: [ { name: web, bandwidth: 1 Gbit } ]
clients: [ { name: web, count: 2, bandwidth: 50 Mbit, workload: { web: {} } } ]
"#,
    ),
];

impl Corpus {
    /// Everything from disk and from the shipped data; `case_dir` is where `g.gml` and the
    /// other side files are written, so that parsing a seed finds them.
    pub(crate) fn load() -> Corpus {
        let mut scenarios = Vec::new();
        let add = |scenarios: &mut Vec<Seed>, name: String, text: String| {
            let tree = Node::parse(&text);
            scenarios.push(Seed { name, text, tree });
        };
        // Seeds expected to pass validation first (see `valid_scenarios`).
        for path in sorted_files(&repo().join("examples"), "yaml") {
            if let Ok(text) = fs::read_to_string(&path) {
                add(&mut scenarios, path.display().to_string(), text);
            }
        }
        for (name, text) in OWN_SCENARIOS {
            add(&mut scenarios, name.to_string(), text.to_string());
        }
        // The examples as `run.json` records them: every default written out, so mutations
        // reach every field (all of `tor:` included).
        for name in onionlab_scenario::BUILTIN_NAMES {
            if let Some(s) = onionlab_scenario::builtin(name) {
                if let Ok(mut json) = serde_json::to_value(&s) {
                    if let Some(map) = json.as_object_mut() {
                        map.remove("source");
                    }
                    let text = serde_json::to_string(&json).unwrap_or_default();
                    if let Some(tree) = Node::parse(&text) {
                        add(
                            &mut scenarios,
                            format!("{name} (every default)"),
                            tree.to_yaml(),
                        );
                    }
                }
            }
        }
        let valid_scenarios = scenarios.len();
        for dir in [
            repo().join("crates/scenario/tests/broken"),
            regressions_dir(),
        ] {
            for path in sorted_files(&dir, "yaml") {
                if let Ok(text) = fs::read_to_string(&path) {
                    add(&mut scenarios, path.display().to_string(), text);
                }
            }
        }

        let mut keys: Vec<String> = mutate::KEYS.iter().map(|s| s.to_string()).collect();
        if let Ok(serde_json::Value::Object(tor)) =
            serde_json::to_value(onionlab_torcore::TorParams::default())
        {
            keys.extend(tor.keys().cloned());
        }
        for s in &scenarios {
            if let Some(t) = &s.tree {
                t.keys(&mut keys);
            }
        }
        keys.sort();
        keys.dedup();

        let internet = internet_subgraph(6);
        let mut gml = vec![
            seed("fidelity.gml", read(&repo().join("examples/fidelity.gml"))),
            seed("one-node", "graph [ node [ id 0 ] edge [ source 0 target 0 latency \"1 ms\" ] ]\n".into()),
            seed(
                "directed",
                "graph [\n  directed 1\n  node [ id 1 host_bandwidth_up \"10 Mbit\" host_bandwidth_down \"20 Mbit\" packet_loss 0.01 ]\n  node [ id 2 bandwidth_up \"1 Gbit\" bandwidth_down \"1 Gbit\" label \"two\" country_code \"US\" ]\n  edge [ source 1 target 1 latency 0.001 ]\n  edge [ source 2 target 2 latency \"2 ms\" jitter \"1 ms\" ]\n  edge [ source 1 target 2 latency \"30 ms\" packet_loss 0.5 ]\n  edge [ source 2 target 1 latency \"30 ms\" ]\n]\n".into(),
            ),
            seed(
                "no-path",
                "graph [ directed 0 node [ id 1 ] node [ id 2 ] edge [ source 1 target 1 latency \"1 ms\" ] edge [ source 2 target 2 latency \"1 ms\" ] ]\n".into(),
            ),
            seed(
                "nested-unknown",
                "# comment\ngraph [ comment \"x\" extra [ a 1 b [ c \"d\" ] ] node [ id 5 weird [ ] ] edge [ source 5 target 5 latency \"10 us\" jitter \"0 ms\" ] ]\n".into(),
            ),
        ];
        gml.push(seed("internet-6 (to_gml)", internet.to_gml()));
        let graphml = vec![
            seed("internet-6", to_graphml(&internet)),
            seed("internet-2", to_graphml(&internet_subgraph(2))),
            seed(
                "minimal",
                "<?xml version=\"1.0\"?>\n<graphml xmlns=\"http://graphml.graphdrawing.org/xmlns\">\n  <key attr.name=\"latency\" attr.type=\"double\" for=\"edge\" id=\"d7\" />\n  <graph edgedefault=\"undirected\">\n    <node id=\"poi-1\" />\n    <edge source=\"poi-1\" target=\"poi-1\"><data key=\"d7\">5.0</data></edge>\n  </graph>\n</graphml>\n".into(),
            ),
            seed(
                "defaults",
                "<graphml>\n  <key attr.name=\"latency\" for=\"edge\" id=\"l\"><default>10</default></key>\n  <key attr.name=\"countrycode\" for=\"node\" id=\"c\"><default>DE</default></key>\n  <key attr.name=\"bandwidthup\" for=\"all\" id=\"u\" />\n  <graph edgedefault=\"directed\">\n    <node id=\"a\"><data key=\"u\">100</data></node>\n    <node id=\"b\" />\n    <edge source=\"a\" target=\"a\" />\n    <edge source=\"b\" target=\"b\" />\n    <edge source=\"a\" target=\"b\"><data key=\"l\">1e3</data></edge>\n  </graph>\n</graphml>\n".into(),
            ),
        ];
        let consensus = consensus_excerpts();
        Corpus {
            scenarios,
            valid_scenarios,
            gml,
            graphml,
            consensus,
            keys,
        }
    }

    /// The text of a mutated scenario.
    pub(crate) fn scenario(&self, m: &Mutation) -> Vec<u8> {
        let seed = &self.scenarios[m.seed % self.scenarios.len()];
        let base = match (&seed.tree, m.tree.is_empty()) {
            (Some(tree), false) => mutate::apply_tree(tree.clone(), &m.tree, &self.keys).to_yaml(),
            _ => seed.text.clone(),
        };
        mutate::apply_text(base.into_bytes(), &m.text, Format::Yaml)
    }

    pub(crate) fn mutated(&self, seeds: &[Seed], m: &Mutation, format: Format) -> Vec<u8> {
        let seed = &seeds[m.seed % seeds.len()];
        mutate::apply_text(seed.text.clone().into_bytes(), &m.text, format)
    }
}

fn seed(name: &str, text: String) -> Seed {
    Seed {
        name: name.to_string(),
        text,
        tree: None,
    }
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

pub(crate) fn sorted_files(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == ext))
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// The first `n` nodes of the shipped 2018 Internet model with the edges among them.
fn internet_subgraph(n: usize) -> Graph {
    let input = onionlab_data::Input::Embedded(
        onionlab_data::embedded("topology/internet-2018-183-nodes.graphml.xml")
            .expect("the Internet model is shipped"),
    );
    let full = Graph::read(&input).expect("the shipped Internet model parses");
    let nodes: Vec<GraphNode> = full.nodes.iter().take(n).cloned().collect();
    let edges: Vec<Edge> = full
        .edges
        .iter()
        .filter(|e| e.source < n && e.target < n)
        .cloned()
        .collect();
    Graph {
        source: format!("internet-2018 (first {n} nodes)"),
        directed: full.directed,
        nodes,
        edges,
    }
}

/// A graph in the GraphML layout of Shadow's Internet models (KiB/s, milliseconds).
fn to_graphml(g: &Graph) -> String {
    let mut out = String::from(
        "<?xml version=\"1.0\" encoding=\"utf-8\"?><graphml xmlns=\"http://graphml.graphdrawing.org/xmlns\">\n\
  <key attr.name=\"packetloss\" attr.type=\"double\" for=\"edge\" id=\"d9\" />\n\
  <key attr.name=\"jitter\" attr.type=\"double\" for=\"edge\" id=\"d8\" />\n\
  <key attr.name=\"latency\" attr.type=\"double\" for=\"edge\" id=\"d7\" />\n\
  <key attr.name=\"bandwidthup\" attr.type=\"int\" for=\"node\" id=\"d4\" />\n\
  <key attr.name=\"bandwidthdown\" attr.type=\"int\" for=\"node\" id=\"d3\" />\n\
  <key attr.name=\"countrycode\" attr.type=\"string\" for=\"node\" id=\"d2\" />\n\
  <key attr.name=\"packetloss\" attr.type=\"double\" for=\"node\" id=\"d0\" />\n",
    );
    out.push_str(&format!(
        "  <graph edgedefault=\"{}\">\n",
        if g.directed { "directed" } else { "undirected" }
    ));
    for n in &g.nodes {
        out.push_str(&format!("    <node id=\"poi-{}\">\n", n.id));
        out.push_str(&format!(
            "      <data key=\"d0\">{}</data>\n",
            n.packet_loss
        ));
        if let Some(c) = &n.country_code {
            out.push_str(&format!("      <data key=\"d2\">{c}</data>\n"));
        }
        if let Some(b) = n.bandwidth_down {
            out.push_str(&format!("      <data key=\"d3\">{}</data>\n", b / 8192));
        }
        if let Some(b) = n.bandwidth_up {
            out.push_str(&format!("      <data key=\"d4\">{}</data>\n", b / 8192));
        }
        out.push_str("    </node>\n");
    }
    for e in &g.edges {
        out.push_str(&format!(
            "    <edge source=\"poi-{}\" target=\"poi-{}\">\n      <data key=\"d7\">{}</data>\n      <data key=\"d8\">{}</data>\n      <data key=\"d9\">{}</data>\n    </edge>\n",
            g.nodes[e.source].id,
            g.nodes[e.target].id,
            e.latency as f64 / 1e6,
            e.jitter as f64 / 1e6,
            e.packet_loss
        ));
    }
    out.push_str("  </graph>\n</graphml>\n");
    out
}

/// Short consensus documents cut from the shipped ones: the preamble, a few router entries
/// and the footer, in several shapes (with and without guards, exits, weights, signatures).
fn consensus_excerpts() -> Vec<Seed> {
    let mut out = Vec::new();
    for (name, path) in [
        ("2023", "consensus/2023-06-01-10-00-00-consensus"),
        (
            "2019-microdesc",
            "consensus/2019-12-15-13-00-00-microdesc-consensus",
        ),
    ] {
        let file = onionlab_data::embedded(path).expect("the consensus is shipped");
        let bytes = onionlab_data::Input::Embedded(file)
            .read()
            .expect("the shipped consensus reads");
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let lines: Vec<&str> = text.lines().collect();
        let first_r = lines.iter().position(|l| l.starts_with("r ")).unwrap_or(0);
        let footer = lines
            .iter()
            .position(|l| l.starts_with("directory-footer"))
            .unwrap_or(lines.len());
        // Router entries as line ranges.
        let mut entries: Vec<(usize, usize)> = Vec::new();
        for (i, line) in lines.iter().enumerate().take(footer).skip(first_r) {
            if line.starts_with("r ") {
                if let Some(last) = entries.last_mut() {
                    last.1 = i;
                }
                entries.push((i, footer));
            }
        }
        let entry_text = |&(s, e): &(usize, usize)| lines[s..e].join("\n");
        let has = |e: &(usize, usize), flag: &str| {
            lines[e.0..e.1]
                .iter()
                .any(|l| l.starts_with("s ") && l.split(' ').any(|w| w == flag))
        };
        let preamble = lines[..first_r].join("\n");
        // The footer up to the end of the first signature.
        let sig_end = lines[footer..]
            .iter()
            .position(|l| l.starts_with("-----END"))
            .map_or(lines.len(), |p| footer + p + 1);
        let footer_text = lines[footer..sig_end].join("\n");
        let footer_no_weights: String = lines[footer..sig_end]
            .iter()
            .filter(|l| !l.starts_with("bandwidth-weights"))
            .cloned()
            .collect::<Vec<_>>()
            .join("\n");
        let pick = |filter: &dyn Fn(&(usize, usize)) -> bool, n: usize| -> String {
            let chosen: Vec<String> = entries
                .iter()
                .filter(|e| filter(e))
                .step_by(37)
                .take(n)
                .map(entry_text)
                .collect();
            chosen.join("\n")
        };
        let mixed = {
            let guards = pick(&|e| has(e, "Guard") && !has(e, "Exit"), 6);
            let exits = pick(&|e| has(e, "Exit") && !has(e, "Guard"), 4);
            let both = pick(&|e| has(e, "Exit") && has(e, "Guard"), 3);
            let middles = pick(&|e| !has(e, "Exit") && !has(e, "Guard"), 6);
            [guards, exits, both, middles].join("\n")
        };
        let no_guards = pick(&|e| !has(e, "Guard"), 12);
        let no_exits = pick(&|e| !has(e, "Exit"), 12);
        out.push(seed(
            &format!("{name}: mixed"),
            format!("{preamble}\n{mixed}\n{footer_text}\n"),
        ));
        out.push(seed(
            &format!("{name}: no guards"),
            format!("{preamble}\n{no_guards}\n{footer_text}\n"),
        ));
        out.push(seed(
            &format!("{name}: no exits, no weights"),
            format!("{preamble}\n{no_exits}\n{footer_no_weights}\n"),
        ));
        out.push(seed(
            &format!("{name}: first 200 lines"),
            lines[..200.min(lines.len())].join("\n") + "\n",
        ));
    }
    out.push(seed(
        "minimal",
        "network-status-version 3\nr a AAAAAAAAAAAAAAAAAAAAAAAAAAA AAAAAAAAAAAAAAAAAAAAAAAAAAA 2023-06-01 00:00:00 1.2.3.4 9001 0\ns Exit Fast Guard Running Stable Valid\nw Bandwidth=100\np accept 80,443\ndirectory-footer\n".into(),
    ));
    out
}

/// The side files every check → run case directory holds, by name.
pub(crate) fn side_files(corpus: &Corpus) -> Vec<(&'static str, Vec<u8>)> {
    let gml = corpus
        .gml
        .iter()
        .find(|s| s.name == "fidelity.gml")
        .map(|s| s.text.clone())
        .unwrap_or_default();
    vec![
        ("fidelity.gml", gml.clone().into_bytes()),
        ("g.gml", gml.into_bytes()),
        ("g.graphml", corpus.graphml[0].text.clone().into_bytes()),
        ("c.consensus", corpus.consensus[0].text.clone().into_bytes()),
    ]
}
