//! The shipped examples, the broken-scenario corpus, determinism and placement.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use onionlab_netdir::RelayFlags;
use onionlab_scenario::{
    builtin, load, load_and_resolve, load_graph, parse, resolve, resolve_trial, ClientWorkload,
    Scenario, BUILTIN_NAMES,
};

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

fn example(name: &str) -> PathBuf {
    examples_dir().join(format!("{name}.yaml"))
}

/// The `consensus-2023` example's text with `lines` added to its `relays.sample` section.
fn with_sample_lines(text: &str, lines: &str) -> String {
    text.replacen("    count: 100\n", &format!("    count: 100\n{lines}"), 1)
}

fn count_groups(plan: &onionlab_scenario::Plan, group: &str) -> usize {
    plan.clients
        .iter()
        .filter(|c| c.host.group == group)
        .count()
}

#[test]
fn every_example_parses_and_resolves() {
    let mut seen = 0;
    for entry in std::fs::read_dir(examples_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let (s, graph, plan) =
            load_and_resolve(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        // Only a scenario of managed processes alone may have no relays.
        assert!(
            !plan.relays.is_empty() || !plan.processes.is_empty(),
            "{}",
            s.name
        );
        for host in plan
            .authorities
            .iter()
            .chain(&plan.servers)
            .chain(plan.clients.iter().map(|c| &c.host))
            .chain(plan.processes.iter().map(|p| &p.host))
        {
            assert!(host.node < graph.nodes.len());
            assert!(host.link_up_bps > 0 && host.link_down_bps > 0, "{host:?}");
        }
        seen += 1;
    }
    assert!(seen >= 4, "expected at least the four reference examples");
}

#[test]
fn toy_has_the_reference_shape() {
    let (s, _, plan) = load_and_resolve(&example("toy")).unwrap();
    assert_eq!(s.name, "toy");
    assert_eq!(s.run.stop_time.0, 3600 * 1_000_000_000);
    assert_eq!(s.run.bootstrap.0, 1800 * 1_000_000_000);
    assert_eq!(plan.authorities.len(), 3);
    let has = |r: &onionlab_scenario::PlannedRelay, f| r.flags.contains(f);
    let guard_only = plan
        .relays
        .iter()
        .filter(|r| has(r, RelayFlags::GUARD) && !has(r, RelayFlags::EXIT))
        .count();
    let exit_only = plan
        .relays
        .iter()
        .filter(|r| has(r, RelayFlags::EXIT) && !has(r, RelayFlags::GUARD))
        .count();
    let both = plan
        .relays
        .iter()
        .filter(|r| has(r, RelayFlags::EXIT) && has(r, RelayFlags::GUARD))
        .count();
    assert_eq!(
        (guard_only, exit_only, both, plan.relays.len()),
        (14, 10, 5, 95)
    );
    assert_eq!(plan.servers.len(), 100);
    assert_eq!(count_groups(&plan, "web"), 360);
    assert_eq!(count_groups(&plan, "bulk"), 40);
    match plan.clients[0].workload.clone() {
        ClientWorkload::Web {
            size,
            pause_min,
            pause_max,
            ..
        } => {
            assert_eq!(size, 320 * 1024);
            assert_eq!((pause_min, pause_max), (1_000_000_000, 60_000_000_000));
        }
        other => panic!("{other:?}"),
    }
    // Relays must come from distinct /16s so any three can form a circuit.
    let subnets: HashSet<[u8; 2]> = plan
        .relays
        .iter()
        .map(|r| [r.address.octets()[0], r.address.octets()[1]])
        .collect();
    assert_eq!(subnets.len(), plan.relays.len());
    let names: HashSet<&str> = plan.relays.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names.len(), plan.relays.len());
    for r in &plan.relays {
        assert!(r.bandwidth_rate >= 75 * 1024 && r.bandwidth_burst >= r.bandwidth_rate);
        assert!(r.consensus_weight > 0);
        assert_eq!(
            r.exit_policy.allows_any(),
            r.flags.contains(RelayFlags::EXIT)
        );
    }
}

#[test]
fn small_and_large_have_the_reference_counts() {
    let (_, _, small) = load_and_resolve(&example("small")).unwrap();
    assert_eq!(
        (small.servers.len(), small.relays.len(), small.clients.len()),
        (20, 18, 230)
    );
    let (_, _, large) = load_and_resolve(&example("large")).unwrap();
    assert_eq!(large.relays.len(), 500);
    assert_eq!(large.servers.len(), 500);
    assert_eq!(count_groups(&large, "web"), 1350);
    assert_eq!(count_groups(&large, "bulk"), 150);
    let perf: Vec<u64> = large
        .clients
        .iter()
        .filter_map(|c| match c.workload {
            ClientWorkload::Perf { size, .. } => Some(size),
            _ => None,
        })
        .collect();
    assert_eq!(perf.len(), 300);
    for size in [50 * 1024, 1 << 20, 5 << 20] {
        assert_eq!(perf.iter().filter(|&&s| s == size).count(), 100);
    }
}

#[test]
fn consensus_sample_keeps_real_relays() {
    let (s, _, plan) = load_and_resolve(&example("consensus-2023")).unwrap();
    assert_eq!(plan.relays.len(), 100);
    assert!(plan
        .relays
        .iter()
        .any(|r| r.flags.contains(RelayFlags::EXIT)));
    assert!(plan
        .relays
        .iter()
        .any(|r| r.flags.contains(RelayFlags::GUARD)));
    // Sampled relays keep their published weight and derive their rate from it.
    for r in &plan.relays {
        assert_eq!(r.bandwidth_rate, (r.consensus_weight * 1000).max(75 * 1024));
    }
    let names: HashSet<&str> = plan.relays.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names.len(), 100);
    assert_eq!(s.clients.len(), 3);
}

#[test]
fn sampled_relays_take_their_rate_from_the_weight_times_rate_per_weight() {
    let path = example("consensus-2023");
    let text = std::fs::read_to_string(&path).unwrap();
    let with = |line: &str| with_sample_lines(&text, line);
    let s = parse(&with("    rate_per_weight: 720\n"), &path).unwrap();
    let plan = resolve(&s, &load_graph(&s).unwrap()).unwrap();
    for r in &plan.relays {
        assert_eq!(r.bandwidth_rate, (r.consensus_weight * 720).max(75 * 1024));
    }
    for (line, expect) in [
        ("    rate_per_weight: 0.5\n", "from 1 to 1000000"),
        (
            "    rate_per_weight: 720\n    bandwidth_rate: 1 MiB/s\n",
            "not both",
        ),
    ] {
        let err = parse(&with(line), &path).unwrap_err().to_string();
        assert!(
            err.contains("relays.sample.rate_per_weight") && err.contains(expect),
            "{err}"
        );
    }
}

#[test]
fn resolution_is_deterministic_and_seeded() {
    let s = load(&example("large")).unwrap();
    let graph = load_graph(&s).unwrap();
    let a = resolve(&s, &graph).unwrap();
    let b = resolve(&s, &graph).unwrap();
    assert_eq!(a, b);
    let trial1 = resolve_trial(&s, &graph, 1).unwrap();
    assert_ne!(a, trial1, "another trial must draw differently");
    let mut other = s.clone();
    other.run.seed = 2;
    let c = resolve(&other, &graph).unwrap();
    let nodes =
        |p: &onionlab_scenario::Plan| p.clients.iter().map(|c| c.host.node).collect::<Vec<_>>();
    assert_ne!(
        nodes(&a),
        nodes(&c),
        "another seed must place hosts differently"
    );
    // Starts are spread over the group's range, not all at zero.
    let starts: HashSet<u64> = a.clients.iter().map(|c| c.start).collect();
    assert!(starts.len() > a.clients.len() / 2);
}

#[test]
fn placement_by_country_on_the_internet_graph() {
    let s = load(&example("consensus-2023")).unwrap();
    let graph = load_graph(&s).unwrap();
    assert!(graph.nodes.len() > 100);
    let plan = resolve(&s, &graph).unwrap();
    let country = |node: usize| graph.nodes[node].country_code.clone().unwrap_or_default();
    for c in &plan.clients {
        match c.host.group.as_str() {
            "web-us" => assert_eq!(country(c.host.node), "US"),
            "web-de" => assert_eq!(country(c.host.node), "DE"),
            _ => {}
        }
    }
    for a in &plan.authorities {
        assert_eq!(country(a.node), "DE");
    }
    // Without a country, hosts spread over many nodes.
    let spread: HashSet<usize> = plan
        .clients
        .iter()
        .filter(|c| c.host.group == "perf")
        .map(|c| c.host.node)
        .collect();
    assert!(spread.len() > 5, "{spread:?}");
    // Hosts without a bandwidth take their node's.
    let c = plan
        .clients
        .iter()
        .find(|c| c.host.group == "web-us")
        .unwrap();
    assert_eq!(
        Some(c.host.link_up_bps),
        graph.nodes[c.host.node].bandwidth_up
    );
}

/// `network.graph_loss: false` drops the graph's loss and nothing else: every edge of
/// `internet-2018` loses 0.5% as written, none without it, and latencies stay.
#[test]
fn graph_loss_false_keeps_the_graph_but_its_loss() {
    let mut s = load(&example("consensus-2023")).unwrap();
    let lossy = load_graph(&s).unwrap();
    assert!(lossy.edges.iter().all(|e| e.packet_loss == 0.005));
    s.network.graph_loss = false;
    let clean = load_graph(&s).unwrap();
    assert_eq!(clean.edges.len(), lossy.edges.len());
    assert!(clean.edges.iter().all(|e| e.packet_loss == 0.0));
    assert!(clean.nodes.iter().all(|n| n.packet_loss == 0.0));
    for (a, b) in clean.edges.iter().zip(&lossy.edges) {
        assert_eq!((a.latency, a.jitter), (b.latency, b.jitter));
    }
    // The builtin network's own loss goes too.
    let mut b = parse(
        "run: { stop_time: 1m }\n\
         network: { graph: builtin, builtin: { loss: 0.01 }, graph_loss: false }\n\
         relays: { generate: { guard: 1, exit: 1, middle: 1 } }\n",
        Path::new("t.yaml"),
    )
    .unwrap();
    assert!(load_graph(&b)
        .unwrap()
        .edges
        .iter()
        .all(|e| e.packet_loss == 0.0));
    b.network.graph_loss = true;
    assert!(load_graph(&b)
        .unwrap()
        .edges
        .iter()
        .any(|e| e.packet_loss > 0.0));
}

/// `network.edge_loss` adds its loss to every edge's own, as an independent loss, and with
/// `graph_loss: false` is all the loss there is; latencies stay.
#[test]
fn edge_loss_adds_to_every_edge() {
    let mut s = load(&example("consensus-2023")).unwrap();
    let own = load_graph(&s).unwrap();
    s.network.edge_loss = 0.001;
    let more = load_graph(&s).unwrap();
    for (a, b) in more.edges.iter().zip(&own.edges) {
        assert!(
            (a.packet_loss - (1.0 - 0.995 * 0.999)).abs() < 1e-12,
            "{}",
            a.packet_loss
        );
        assert_eq!((a.latency, a.jitter), (b.latency, b.jitter));
    }
    s.network.graph_loss = false;
    let only = load_graph(&s).unwrap();
    assert!(only.edges.iter().all(|e| e.packet_loss == 0.001));
    assert!(only.nodes.iter().all(|n| n.packet_loss == 0.0));
    // Written back into run.json only when set.
    let text = serde_json::to_string(&s.network).unwrap();
    assert!(text.contains("\"edge_loss\":0.001"), "{text}");
    s.network.edge_loss = 0.0;
    assert!(!serde_json::to_string(&s.network)
        .unwrap()
        .contains("edge_loss"));
}

#[test]
fn generated_relays_follow_the_relays_file_countries() {
    let s = load(&example("large")).unwrap();
    let graph = load_graph(&s).unwrap();
    let plan = resolve(&s, &graph).unwrap();
    let in_us = plan
        .relays
        .iter()
        .filter(|r| graph.nodes[r.node].country_code.as_deref() == Some("US"))
        .count();
    // A quarter of the 2018 relays are in the US; uniform placement over 183 nodes would put
    // only a handful there.
    assert!(in_us > 50, "{in_us}");
}

#[test]
fn builtin_scenarios_are_available() {
    for name in BUILTIN_NAMES {
        let s = builtin(name).unwrap_or_else(|| panic!("builtin {name}"));
        assert_eq!(s.name, name);
    }
    assert!(builtin("nope").is_none());
    let toy = builtin("toy").unwrap();
    let graph = load_graph(&toy).unwrap();
    assert_eq!(resolve(&toy, &graph).unwrap().clients.len(), 400);
}

#[test]
fn scenario_round_trips_through_json() {
    for name in BUILTIN_NAMES {
        let s = load(&example(name)).unwrap();
        let json = serde_json::to_string_pretty(&s).unwrap();
        let mut value: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert!(value["run"]["stop_time"].is_string());
        assert!(value["source"].is_string());
        // JSON is YAML, and quantities serialize in their written form, so the record of a
        // run (less `source`, which says where it came from) can be run again.
        value.as_object_mut().unwrap().remove("source");
        let back: Scenario = parse(&value.to_string(), &s.source).unwrap();
        assert_eq!(back, s, "{name}");
    }
}

#[test]
fn list_relays_resolve_with_families_and_addresses() {
    let text = r#"
run: { stop_time: 10m }
relays:
  list:
    - { name: g, count: 2, flags: [guard, fast], bandwidth_rate: 5 MiB/s, family: fam1 }
    - { name: e, flags: [exit, fast], bandwidth_rate: 2 MiB/s, exit_policy: "accept 80,443", family: fam1, address: 50.1.2.3 }
    - { name: m, bandwidth_rate: 1 MiB/s, relay_bandwidth_rate: 500 KiB/s, link: 100 Mbit, consensus_weight: 77 }
servers: [ { name: web } ]
clients: [ { name: c, workload: { perf: { size: 1 MiB } } } ]
"#;
    let s = parse(text, Path::new("inline.yaml")).unwrap();
    let graph = load_graph(&s).unwrap();
    let plan = resolve(&s, &graph).unwrap();
    let names: Vec<&str> = plan.relays.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["g1", "g2", "e", "m"]);
    assert_eq!(plan.relays[0].family, plan.relays[2].family);
    assert!(plan.relays[0].family.is_some() && plan.relays[3].family.is_none());
    assert_eq!(plan.relays[2].address.to_string(), "50.1.2.3");
    assert!(plan.relays[2].exit_policy.allows_port(443));
    assert!(!plan.relays[2].exit_policy.allows_port(22));
    assert_eq!(plan.relays[3].relay_bandwidth_rate, Some(500 * 1024));
    assert_eq!(plan.relays[3].consensus_weight, 77);
    assert_eq!(plan.relays[3].link_up_bps, 100_000_000);
    match plan.clients[0].workload.clone() {
        ClientWorkload::Perf {
            timeout, interval, ..
        } => {
            assert_eq!(timeout, 60_000_000_000);
            assert_eq!(interval, 60_000_000_000);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn lognormal_and_fixed_bandwidth_models() {
    let text = r#"
run: { stop_time: 10m }
relays:
  generate: { guard: 20, exit: 20, middle: 20, bandwidth: { lognormal: { median: 5 MiB/s, sigma: 1.0 } } }
servers: [ { name: web } ]
clients: [ { name: c, workload: { bulk: {} } } ]
"#;
    let s = parse(text, Path::new("inline.yaml")).unwrap();
    let plan = resolve(&s, &load_graph(&s).unwrap()).unwrap();
    let mut rates: Vec<u64> = plan.relays.iter().map(|r| r.bandwidth_rate).collect();
    rates.sort_unstable();
    let median = rates[rates.len() / 2] as f64;
    let target = (5u64 << 20) as f64;
    assert!(median > target / 3.0 && median < target * 3.0, "{median}");
    assert!(rates.first() != rates.last());

    let fixed = text.replace(
        "{ lognormal: { median: 5 MiB/s, sigma: 1.0 } }",
        "{ fixed: 2 MiB/s }",
    );
    let s = parse(&fixed, Path::new("inline.yaml")).unwrap();
    let plan = resolve(&s, &load_graph(&s).unwrap()).unwrap();
    for r in &plan.relays {
        assert_eq!(r.bandwidth_rate, 2 << 20);
        assert_eq!(
            r.bandwidth_burst,
            ((2u64 << 20) as f64 * 1.67).round() as u64
        );
        assert_eq!(r.link_up_bps, (2u64 << 20) * 16);
    }
}

/// Each file in tests/broken starts with `# expect: <text>`; loading (and resolving) it must
/// fail with an error whose display contains that text, and which names a field when the text
/// does.
#[test]
fn broken_scenarios_are_rejected_with_precise_errors() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/broken");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().and_then(|e| e.to_str()) == Some("yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 24, "only {} broken scenarios", files.len());
    let mut failures = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap();
        let expect = text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("# expect: "))
            .unwrap_or_else(|| panic!("{}: first line must be `# expect: ...`", path.display()))
            .trim();
        match load_and_resolve(path) {
            Ok(_) => failures.push(format!("{}: accepted", path.display())),
            Err(e) => {
                let shown = e.to_string();
                if !shown.contains(expect) {
                    failures.push(format!(
                        "{}:\n  expected: {expect}\n  got:      {shown}",
                        path.display()
                    ));
                }
                if !shown.starts_with(&path.display().to_string()) {
                    failures.push(format!(
                        "{}: error does not name the file: {shown}",
                        path.display()
                    ));
                }
                if expect.contains(": ") && !e.field.is_empty() && !expect.starts_with(&e.field) {
                    failures.push(format!(
                        "{}: field {:?} not at the start of {expect:?}",
                        path.display(),
                        e.field
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn arbitrary_text_never_panics() {
    let seeds = [
        "",
        ":",
        "- - -",
        "run: {stop_time: 1h}\nrelays: {generate: {}}",
        "{{{{",
        "run: !!binary x",
        "a: &x [*x]",
        "run:\n  stop_time: 1e400h\nrelays: {list: [{}]}",
        "\u{feff}run: 1",
        "clients: [ { workload: { web: { pause: [1s, 2s, 3s] } } } ]",
    ];
    for text in seeds {
        let _ = parse(text, Path::new("fuzz.yaml"));
        for cut in 0..text.len() {
            if text.is_char_boundary(cut) {
                let _ = parse(&text[..cut], Path::new("fuzz.yaml"));
            }
        }
    }
    // Every prefix of a real scenario: truncated files are a common accident.
    let toy = std::fs::read_to_string(example("toy")).unwrap();
    for cut in (0..toy.len()).step_by(7) {
        if toy.is_char_boundary(cut) {
            let _ = parse(&toy[..cut], &example("toy"));
        }
    }
}

/// No broken scenario's message speaks the YAML or serde library's language: a user should
/// understand it without reading Rust.
#[test]
fn broken_scenario_messages_are_in_our_words() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/broken");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let library_words = [
        "Option<",
        "DuplicateKeyPolicy",
        "configured policy",
        "externally tagged",
        "expected mapping start",
        "deserialize",
        "string scalar",
        "invalid type:",
        "serde",
        "panicked",
    ];
    let mut leaks = Vec::new();
    for p in files {
        let shown = load_and_resolve(&p)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        for word in library_words {
            if shown.contains(word) {
                leaks.push(format!("{}: {word:?} in {shown}", p.display()));
            }
        }
    }
    assert!(leaks.is_empty(), "library wording:\n{}", leaks.join("\n"));
}

#[test]
fn impairments_name_relays_groups_and_authorities() {
    let text = r#"
run: { stop_time: 10m }
network:
  impairments:
    - { between: [m, e], loss: 0.01 }
    - { between: [clients:web, servers:web], loss: 0.02 }
    - { between: [authorities, relay:g1], loss: 0.5 }
relays:
  list:
    - { name: g, count: 2, flags: [guard, fast], bandwidth_rate: 5 MiB/s }
    - { name: e, flags: [exit, fast], bandwidth_rate: 2 MiB/s }
    - { name: m, bandwidth_rate: 1 MiB/s }
servers: [ { name: web, count: 2 } ]
clients: [ { name: web, count: 3, workload: { web: {} } } ]
"#;
    use onionlab_scenario::PlanHost::*;
    let s = parse(text, Path::new("inline.yaml")).unwrap();
    let plan = resolve(&s, &load_graph(&s).unwrap()).unwrap();
    let imp = &plan.impairments;
    assert_eq!(imp.len(), 3);
    assert_eq!(imp[0].sides, [vec![Relay(3)], vec![Relay(2)]]);
    assert_eq!(imp[0].loss, 0.01);
    assert_eq!(
        imp[1].sides,
        [
            vec![Client(0), Client(1), Client(2)],
            vec![Server(0), Server(1)]
        ]
    );
    assert_eq!(
        imp[2].sides,
        [
            vec![Authority(0), Authority(1), Authority(2)],
            vec![Relay(0)]
        ]
    );
    // Written back (run.json), the section reads the same; without impairments it is left
    // out, so earlier scenarios' run.json is unchanged.
    let mut json = serde_json::to_value(&s).unwrap();
    json.as_object_mut().unwrap().remove("source");
    let back: Scenario = parse(&json.to_string(), Path::new("inline.yaml")).unwrap();
    assert_eq!(back.network, s.network);
    let plain = load(&example("toy")).unwrap();
    let json = serde_json::to_value(&plain).unwrap();
    assert!(json["network"].get("impairments").is_none());
}

#[test]
fn upload_workloads_take_bulk_defaults() {
    let text = r#"
run: { stop_time: 10m }
relays: { generate: { guard: 1, middle: 1, exit: 1, bandwidth: { fixed: 10 MiB/s } } }
servers: [ { name: web } ]
clients:
  - { name: a, workload: { upload: {} } }
  - { name: b, workload: { upload: { size: 32 MiB, timeout: 10m } } }
"#;
    let s = parse(text, Path::new("inline.yaml")).unwrap();
    let plan = resolve(&s, &load_graph(&s).unwrap()).unwrap();
    let upload = |i: usize| plan.clients[i].workload.clone();
    assert_eq!(
        upload(0),
        ClientWorkload::Upload {
            size: 5 << 20,
            timeout: 300_000_000_000
        }
    );
    assert_eq!(
        upload(1),
        ClientWorkload::Upload {
            size: 32 << 20,
            timeout: 600_000_000_000
        }
    );
    assert!(upload(1).workload().is_upload());
}

/// Experiments vary impairments with overrides: a whole list, or one entry's loss.
#[test]
fn impairments_can_be_overridden() {
    use onionlab_scenario::parse_with_overrides;
    let path = example("upload-loss");
    let text = std::fs::read_to_string(&path).unwrap();
    let set = |path: &str, value: &str| vec![(path.to_string(), value.to_string())];
    let s = parse_with_overrides(&text, &path, &set("network.impairments.0.loss", "0.05")).unwrap();
    assert_eq!(s.network.impairments[0].loss, 0.05);
    let s = parse_with_overrides(
        &text,
        &path,
        &set(
            "network.impairments",
            "[{ between: [guard, middle], loss: 0.02 }]",
        ),
    )
    .unwrap();
    assert_eq!(s.network.impairments[0].between, ["guard", "middle"]);
    let s = parse_with_overrides(&text, &path, &set("network.impairments", "[]")).unwrap();
    assert!(s.network.impairments.is_empty());
}

/// A client group with the `markov` workload: defaults, the models read once and shared by
/// the group's clients, and the workload handed to the traffic model.
#[test]
fn markov_groups_resolve_with_their_models() {
    let dir = std::env::temp_dir().join(format!("onionlab-markov-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("markov.yaml");
    std::fs::write(
        &path,
        "run: { seed: 1, stop_time: 10m }
relays:
  generate: { guard: 2, exit: 2, middle: 2, bandwidth: { fixed: 10 MiB/s } }
servers:
  - { name: web, count: 2, bandwidth: 1 Gbit }
clients:
  - name: users-us
    count: 3
    workload: { markov: { users: 25 } }
    servers: web
  - name: initial
    count: 1
    workload: { markov: { stream_model: privcount-2018-stream-initial,
                          packet_model: data:workload/privcount-2018-packet-model-initial.json,
                          timeout: 30s } }
",
    )
    .unwrap();
    let (_, _, plan) = load_and_resolve(&path).unwrap();
    let markov: Vec<_> = plan
        .clients
        .iter()
        .map(|c| match &c.workload {
            ClientWorkload::Markov(m) => m.clone(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(markov.len(), 4);
    assert_eq!((markov[0].users, markov[0].timeout), (25, 60_000_000_000));
    assert_eq!((markov[3].users, markov[3].timeout), (1, 30_000_000_000));
    // The best stream model has two states besides its end; the initial packet model 27.
    assert_eq!(
        markov[0].stream_model.states,
        ["s0Active", "s1Dwell", "s2End"]
    );
    assert!(std::sync::Arc::ptr_eq(
        &markov[0].packet_model,
        &markov[2].packet_model
    ));
    assert!(!std::sync::Arc::ptr_eq(
        &markov[0].packet_model,
        &markov[3].packet_model
    ));
    assert_eq!(markov[3].packet_model.states.len(), 27);
    assert!(matches!(
        plan.clients[0].workload.workload(),
        onionlab_traffic::Workload::Markov(_)
    ));

    // A broken model file on disk: the error names the scenario, the field, the model file
    // and the JSON field at fault.
    let model = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../data/workload/privcount-2018-stream-model-best.json"),
    )
    .unwrap();
    std::fs::write(
        dir.join("broken-stream.json"),
        model.replace("0.8368115531124", "1.8368115531124"),
    )
    .unwrap();
    std::fs::write(
        &path,
        std::fs::read_to_string(&path).unwrap().replace(
            "{ users: 25 }",
            "{ users: 25, stream_model: broken-stream.json }",
        ),
    )
    .unwrap();
    let e = load_and_resolve(&path).unwrap_err();
    let shown = e.to_string();
    assert_eq!(e.field, "clients[0].workload.markov.stream_model");
    assert!(shown.contains("broken-stream.json: stream_model.transition_probability.s0Active.s0Active: expected a probability from 0 to 1, found 1.8368115531124"), "{shown}");
    std::fs::write(dir.join("broken-stream.json"), "{ \"stream_model\": ").unwrap();
    let shown = load_and_resolve(&path).unwrap_err().to_string();
    assert!(
        shown.contains("broken-stream.json: not valid JSON"),
        "{shown}"
    );
    std::fs::remove_file(dir.join("broken-stream.json")).unwrap();
    let shown = load_and_resolve(&path).unwrap_err().to_string();
    assert!(shown.contains("broken-stream.json"), "{shown}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sampled_relays_placed_by_address_sit_in_their_addresses_countries() {
    let path = example("consensus-2023");
    let text = std::fs::read_to_string(&path).unwrap();
    let with = |line: &str| with_sample_lines(&text, line);
    let s = parse(&with("    place: address\n"), &path).unwrap();
    let graph = load_graph(&s).unwrap();
    let plan = resolve(&s, &graph).unwrap();
    // The default table is the one nearest the consensus's day (2023-06-01).
    assert_eq!(
        onionlab_scenario::nearest_geoip(Some("2023-06-01 10:00:00")),
        "geoip-2023"
    );
    let bytes = onionlab_data::Input::Embedded(
        onionlab_data::embedded("geoip/geoip-2023-06-01.xz").unwrap(),
    )
    .read()
    .unwrap();
    let table = onionlab_netdir::GeoIp::parse(std::str::from_utf8(&bytes).unwrap()).unwrap();
    let mut anywhere = 0;
    let mut in_de = 0;
    for r in &plan.relays {
        let node = graph.nodes[r.node].country_code.as_deref();
        match table.country(r.address) {
            Some(cc)
                if graph
                    .nodes
                    .iter()
                    .any(|n| n.country_code.as_deref() == Some(cc)) =>
            {
                assert_eq!(node, Some(cc), "{} at {}", r.name, r.address);
                in_de += usize::from(cc == "DE");
            }
            _ => anywhere += 1,
        }
    }
    assert_eq!(plan.relays_placed_anywhere, anywhere);
    // The live network's relays sat mostly in Germany; at random, one in 183 would.
    assert!(in_de > 15, "{in_de} of 100 relays in DE");
    // The same seed places them the same way; without `place`, they go anywhere.
    assert_eq!(plan, resolve(&s, &graph).unwrap());
    let random = resolve(&parse(&text, &path).unwrap(), &graph).unwrap();
    assert_ne!(
        plan.relays.iter().map(|r| r.node).collect::<Vec<_>>(),
        random.relays.iter().map(|r| r.node).collect::<Vec<_>>()
    );
    // A table given by path, in tor's format.
    let dir = std::env::temp_dir().join(format!("onionlab-geoip-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let own = dir.join("geoip");
    std::fs::write(&own, "# every address in France\n0,4294967295,FR\n").unwrap();
    let line = format!("    place: address\n    geoip: {}\n", own.display());
    let s = parse(&with(&line), &path).unwrap();
    let plan = resolve(&s, &graph).unwrap();
    assert!(plan
        .relays
        .iter()
        .all(|r| graph.nodes[r.node].country_code.as_deref() == Some("FR")));
    std::fs::write(&own, "0,10,FR\n5,20,DE\n").unwrap();
    let err = resolve(&parse(&with(&line), &path).unwrap(), &graph)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("relays.sample.geoip")
            && err.contains("line 2")
            && err.contains("does not follow"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    for (line, field, expect) in [
        (
            "    place: address\n    country: DE\n",
            "relays.sample.place",
            "not both",
        ),
        (
            "    geoip: geoip-2021\n",
            "relays.sample.geoip",
            "place: address",
        ),
        (
            "    place: address\n    geoip: geoip-1999\n",
            "relays.sample.geoip",
            "geoip-2021",
        ),
        ("    place: somewhere\n", "relays.sample.place", "address"),
    ] {
        let err = parse(&with(line), &path).unwrap_err().to_string();
        assert!(err.contains(field) && err.contains(expect), "{line}: {err}");
    }
}

#[test]
fn the_nearest_shipped_country_table_is_chosen_by_the_consensus_day() {
    for (day, table) in [
        (Some("2019-12-15 13:00:00"), "geoip-2021"),
        (Some("2022-11-19 10:00:00"), "geoip-2022"),
        (Some("2023-06-01 10:00:00"), "geoip-2023"),
        (Some("2030-01-01 00:00:00"), "geoip-2023"),
        (Some("not a day"), "geoip-2023"),
        (None, "geoip-2023"),
    ] {
        assert_eq!(onionlab_scenario::nearest_geoip(day), table, "{day:?}");
    }
}

#[test]
fn dedicated_servers_serve_only_the_clients_that_name_them() {
    let base = "name: d\nrun: { seed: 1, stop_time: 1m }\nrelays:\n  generate: { guard: 2, exit: 2, middle: 1 }\n";
    let path = Path::new("dedicated.yaml");
    let servers =
        "servers:\n  - { name: web, count: 2 }\n  - { name: own, count: 1, dedicated: true }\n";
    let clients = "clients:\n  - { name: users, count: 2, workload: { web: { size: 10 KiB } } }\n  - { name: perf, workload: { perf: { size: 50 KiB, interval: 10s } }, servers: own }\n";
    let s = parse(&format!("{base}{servers}{clients}"), path).unwrap();
    assert!(onionlab_scenario::warnings(&s).is_empty());
    let plan = resolve(&s, &load_graph(&s).unwrap()).unwrap();
    assert_eq!(plan.dedicated_server_groups, vec!["own".to_string()]);
    // Nobody names it: it serves nobody, which is legal but worth a warning.
    let unnamed = clients.replace(", servers: own", "");
    let s = parse(&format!("{base}{servers}{unnamed}"), path).unwrap();
    let w = onionlab_scenario::warnings(&s);
    assert!(
        w.iter()
            .any(|w| w.to_string().contains("servers[1].dedicated")),
        "{w:?}"
    );
    // Clients that name no group need a server that is not dedicated.
    let only = "servers:\n  - { name: own, count: 1, dedicated: true }\n";
    let err = parse(&format!("{base}{only}{clients}"), path)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("clients[0].servers") && err.contains("dedicated"),
        "{err}"
    );
}

#[test]
fn sampled_relays_rates_spread_around_their_weights_and_keep_the_total() {
    let path = example("consensus-2023");
    let text = std::fs::read_to_string(&path).unwrap();
    let with = |line: &str| with_sample_lines(&text, line);
    let graph = load_graph(&parse(&text, &path).unwrap()).unwrap();
    let plain = resolve(&parse(&text, &path).unwrap(), &graph).unwrap();
    let s = parse(&with("    rate_spread: 0.5\n"), &path).unwrap();
    let spread = resolve(&s, &graph).unwrap();
    assert_eq!(spread, resolve(&s, &graph).unwrap(), "not deterministic");
    let total =
        |p: &onionlab_scenario::Plan| p.relays.iter().map(|r| r.bandwidth_rate).sum::<u64>();
    let (a, b) = (total(&plain) as f64, total(&spread) as f64);
    // Rescaled to the same total, but for relays clamped to Tor's range and rounding.
    assert!((b / a - 1.0).abs() < 0.02, "{a} against {b}");
    let logs: Vec<f64> = (plain.relays.iter().zip(&spread.relays))
        .map(|(p, s)| (s.bandwidth_rate as f64 / p.bandwidth_rate as f64).ln())
        .collect();
    let mean = logs.iter().sum::<f64>() / logs.len() as f64;
    let sd =
        (logs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (logs.len() - 1) as f64).sqrt();
    assert!((0.35..0.65).contains(&sd), "log-sd {sd}");
    // Weights, and so the clients' choices, stay; links follow the new rates.
    for (p, s) in plain.relays.iter().zip(&spread.relays) {
        assert_eq!(p.consensus_weight, s.consensus_weight);
        assert!(s.link_up_bps >= s.bandwidth_rate * 8);
    }
    for (line, expect) in [
        ("    rate_spread: 2.5\n", "from 0 to 2"),
        (
            "    rate_spread: 0.5\n    bandwidth_rate: 1 MiB/s\n",
            "not both",
        ),
    ] {
        let err = parse(&with(line), &path).unwrap_err().to_string();
        assert!(
            err.contains("relays.sample.rate_spread") && err.contains(expect),
            "{err}"
        );
    }
}

#[test]
fn sampled_relays_limited_by_their_links_run_them_at_their_rates() {
    let path = example("consensus-2023");
    let text = std::fs::read_to_string(&path).unwrap();
    let with = |line: &str| with_sample_lines(&text, line);
    let graph = load_graph(&parse(&text, &path).unwrap()).unwrap();
    let bucket = resolve(&parse(&text, &path).unwrap(), &graph).unwrap();
    let s = parse(&with("    limit: link\n"), &path).unwrap();
    let link = resolve(&s, &graph).unwrap();
    assert_eq!(
        resolve(&parse(&with("    limit: bucket\n"), &path).unwrap(), &graph).unwrap(),
        bucket,
        "bucket is the default"
    );
    for (b, l) in bucket.relays.iter().zip(&link.relays) {
        // The bucket's rate becomes the link's, both ways; tor's buckets stay at its
        // default of 1 GiB/s, as on a relay that configures no rate.
        assert_eq!(l.link_up_bps, b.bandwidth_rate * 8, "{}", l.name);
        assert_eq!(l.link_down_bps, l.link_up_bps);
        assert_eq!((l.bandwidth_rate, l.bandwidth_burst), (1 << 30, 1 << 30));
        // Under a bucket the link is twice the rate, or 10 Mbit/s, and the burst 1.67 times.
        assert_eq!(b.link_up_bps, (b.bandwidth_rate * 16).max(10_000_000));
        assert!(b.bandwidth_burst > b.bandwidth_rate);
        assert_eq!(
            (l.name.as_str(), l.consensus_weight),
            (b.name.as_str(), b.consensus_weight)
        );
    }
    // A spread moves the links, and keeps the network's total.
    let spread = resolve(
        &parse(&with("    limit: link\n    rate_spread: 0.5\n"), &path).unwrap(),
        &graph,
    )
    .unwrap();
    let total = |p: &onionlab_scenario::Plan| p.relays.iter().map(|r| r.link_up_bps).sum::<u64>();
    let (a, b) = (total(&link) as f64, total(&spread) as f64);
    assert!((b / a - 1.0).abs() < 0.02, "{a} against {b}");
    assert!(spread
        .relays
        .iter()
        .zip(&link.relays)
        .any(|(s, l)| s.link_up_bps != l.link_up_bps));
    assert!(spread.relays.iter().all(|r| r.bandwidth_rate == 1 << 30));
    for (line, key) in [
        ("    limit: link\n    link: 1 Gbit\n", "relays.sample.link"),
        (
            "    limit: link\n    burst_factor: 2\n",
            "relays.sample.burst_factor",
        ),
    ] {
        let err = parse(&with(line), &path).unwrap_err().to_string();
        assert!(err.contains(key) && err.contains("limit: link"), "{err}");
    }
    let err = parse(&with("    limit: nic\n"), &path)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("relays.sample.limit") && err.contains("bucket"),
        "{err}"
    );
}

/// Names identify relays' rows in every output, so a sample's numbering of repeated nicknames
/// must never make two relays' names the same: not when a 19-character nickname repeats so
/// often that its numbers grow a digit (the stem shortens), nor when another relay's own
/// nickname looks like one of those numbered names.
#[test]
fn sampled_relays_keep_unique_names_however_their_nicknames_repeat() {
    let bytes = onionlab_data::Input::Embedded(
        onionlab_data::embedded("consensus/2023-06-01-10-00-00-consensus.xz").unwrap(),
    )
    .read()
    .unwrap();
    let text = String::from_utf8(bytes).unwrap();
    // The header, the first 60 relays, and the footer.
    let head_end = text.find("\nr ").unwrap() + 1;
    let mut relays: Vec<String> = Vec::new();
    for block in text[head_end..].split("\nr ") {
        if relays.len() == 60 {
            break;
        }
        let block = block.strip_prefix("r ").unwrap_or(block);
        let block = block.split("\ndirectory-footer").next().unwrap();
        relays.push(format!("r {block}\n"));
    }
    let long = "abcdefghijklmnopqrs"; // 19 characters, tor's longest nickname
    for (i, r) in relays.iter_mut().enumerate() {
        let nickname = r.split(' ').nth(1).unwrap().to_string();
        let new = match i {
            0..=39 => long.to_string(),
            40 => "abcdefghijklmnopqr1".to_string(), // what the first copy would be named
            41 => "abcdefghijklmnopq31".to_string(), // and the 31st
            _ => continue,
        };
        *r = r.replacen(&format!("r {nickname} "), &format!("r {new} "), 1);
    }
    let consensus = format!("{}{}directory-footer\n", &text[..head_end], relays.concat());
    let dir = std::env::temp_dir().join(format!("onionlab-names-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("repeats.consensus"), consensus).unwrap();
    let path = dir.join("names.yaml");
    let scenario = "run: { seed: 1, stop_time: 1m }\nrelays:\n  sample: { consensus: repeats.consensus, count: 60 }\n";
    let s = parse(scenario, &path).unwrap();
    let plan = resolve(&s, &load_graph(&s).unwrap()).unwrap();
    assert_eq!(plan.relays.len(), 60);
    let names: HashSet<&str> = plan.relays.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names.len(), 60, "names repeat");
    assert!(plan.relays.iter().all(|r| r.name.len() <= 19));
    assert!(names.contains("abcdefghijklmnopqr1") && names.contains("abcdefghijklmnopq31"));
    let _ = std::fs::remove_dir_all(&dir);
}
