//! The ranges that keep a run finite: their bounds are inclusive, the host cap is checked
//! before any per-host work, circuits must be possible, and warnings point at the suspicious.

use std::path::{Path, PathBuf};
use std::time::Instant;

use onionlab_scenario::limits::MAX_HOSTS;
use onionlab_scenario::{load_and_resolve, load_graph, parse, resolve, warnings, Scenario};
use onionlab_torcore::TorParams;

const RUN: &str = "run: { seed: 1, stop_time: 10m, bootstrap: 2m }\n";
const RELAYS: &str =
    "relays:\n  generate: { guard: 2, exit: 2, middle: 2, bandwidth: { fixed: 10 MiB/s } }\n";
const SERVERS: &str = "servers:\n  - { name: web, count: 2, bandwidth: 1 Gbit }\n";
const CLIENTS: &str = "clients:\n  - { name: web, count: 2, workload: { web: {} } }\n";

fn inline() -> &'static Path {
    Path::new("inline.yaml")
}

fn tests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests")
}

fn valid(text: &str) -> Scenario {
    let s = parse(text, inline()).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let graph = load_graph(&s).unwrap();
    resolve(&s, &graph).unwrap_or_else(|e| panic!("{e}\n{text}"));
    s
}

fn refused(text: &str) -> String {
    match parse(text, inline()) {
        Ok(s) => match resolve(&s, &load_graph(&s).unwrap()) {
            Ok(_) => panic!("accepted:\n{text}"),
            Err(e) => e.to_string(),
        },
        Err(e) => e.to_string(),
    }
}

/// `web: { pause: 0s }` stays legal (bulk clients pause 0 s by default), as do zero pauses in
/// a range.
#[test]
fn zero_pauses_are_legal() {
    for workload in [
        "{ web: { pause: 0s } }",
        "{ web: { pause: [0s, 0s] } }",
        "{ bulk: { pause: 0s } }",
        "{ bulk: {} }",
    ] {
        valid(&format!(
            "{RUN}{RELAYS}{SERVERS}clients:\n  - {{ name: c, workload: {workload} }}\n"
        ));
    }
}

/// Every bound is inclusive: the largest and smallest allowed values of each kind parse and
/// resolve.
#[test]
fn bounds_are_inclusive() {
    valid(&format!(
        "run: {{ seed: 18446744073709551615, stop_time: 720h, bootstrap: 719h, threads: 1024 }}\n\
         network:\n  graph: builtin\n  builtin: {{ latency: 1h, loss: 0.999, bandwidth: 1000 Gbit }}\n  lookahead_floor: 1s\n  down_queue: 1m\n  edge_loss: 0.999\n\
         {RELAYS}servers:\n  - {{ name: web, bandwidth: 8 kbit }}\n\
         clients:\n  - {{ name: web, workload: {{ web: {{ size: 4294967295, pause: [0s, 720h], timeout: 720h }} }}, start: [719h, 720h] }}\n  \
         - {{ name: perf, workload: {{ perf: {{ size: 1, interval: 1s, timeout: 1s }} }} }}\n"
    ));
    valid(&format!(
        "{RUN}network: {{ graph: builtin, builtin: {{ latency: 1us }} }}\n\
         relays:\n  list:\n    - {{ name: r, count: 3, flags: [guard, exit, fast], bandwidth_rate: 2 GiB/s, bandwidth_burst: 2 GiB/s, consensus_weight: 4294967295 }}\n\
         {SERVERS}{CLIENTS}"
    ));
    valid(&format!(
        "{RUN}relays:\n  generate: {{ guard: 2, exit: 2, middle: 2, burst_factor: 100, bandwidth: {{ fixed: 75 KiB/s }} }}\n{SERVERS}{CLIENTS}"
    ));
    // One past each of those is refused.
    for (text, needle) in [
        (
            format!("run: {{ stop_time: 720h, threads: 1025 }}\n{RELAYS}"),
            "run.threads",
        ),
        (
            format!("{RUN}network: {{ builtin: {{ latency: 999ns }} }}\n{RELAYS}"),
            "network.builtin.latency",
        ),
        (
            format!("{RUN}network: {{ builtin: {{ loss: 1 }} }}\n{RELAYS}"),
            "network.builtin.loss",
        ),
        (
            format!("{RUN}network: {{ edge_loss: 1 }}\n{RELAYS}"),
            "network.edge_loss",
        ),
        (
            format!("{RUN}network: {{ edge_loss: -0.01 }}\n{RELAYS}"),
            "network.edge_loss",
        ),
        (
            format!("{RUN}network: {{ lookahead_floor: 1000001us }}\n{RELAYS}"),
            "network.lookahead_floor",
        ),
        (
            format!("{RUN}network: {{ down_queue: 60000001us }}\n{RELAYS}"),
            "network.down_queue",
        ),
        (
            format!("{RUN}network: {{ builtin: {{ bandwidth: 7999 bit }} }}\n{RELAYS}"),
            "network.builtin.bandwidth",
        ),
        (
            format!("{RUN}network: {{ builtin: {{ bandwidth: 1000000000001 bit }} }}\n{RELAYS}"),
            "network.builtin.bandwidth",
        ),
        (
            format!("{RUN}{RELAYS}{SERVERS}clients: [ {{ name: c, workload: {{ bulk: {{ size: 4294967296 }} }} }} ]\n"),
            "clients[0].workload.bulk.size",
        ),
        (
            format!("{RUN}{RELAYS}{SERVERS}clients: [ {{ name: c, workload: {{ perf: {{ interval: 999ms }} }} }} ]\n"),
            "clients[0].workload.perf.interval",
        ),
        (
            format!("{RUN}{RELAYS}{SERVERS}clients: [ {{ name: c, workload: {{ web: {{ timeout: 999ms }} }} }} ]\n"),
            "clients[0].workload.web.timeout",
        ),
        (
            format!("{RUN}relays:\n  generate: {{ guard: 2, exit: 2, middle: 2, bandwidth: {{ fixed: 2147483649 B/s }} }}\n"),
            "relays.generate.bandwidth.fixed",
        ),
        (
            format!("{RUN}relays:\n  generate: {{ guard: 2, exit: 2, middle: 2, burst_factor: 100.01, bandwidth: {{ fixed: 1 MiB/s }} }}\n"),
            "relays.generate.burst_factor",
        ),
    ] {
        let e = refused(&text);
        assert!(e.contains(&format!("inline.yaml: {needle}: ")), "{needle}: {e}");
    }
}

#[test]
fn stop_time_of_30_days_is_the_longest() {
    valid(&format!(
        "run: {{ stop_time: 720h }}\n{RELAYS}{SERVERS}{CLIENTS}"
    ));
    let e = refused(&format!("run: {{ stop_time: 720h1ns }}\n{RELAYS}"));
    assert!(e.contains("run.stop_time: expected at most 720h"), "{e}");
}

/// The floor must be shorter than the run, whatever its own cap: a run of 500 ms with a floor
/// of 500 ms would be a single round.
#[test]
fn lookahead_floor_must_be_shorter_than_the_run() {
    let e = refused(&format!(
        "run: {{ stop_time: 500ms }}\nnetwork: {{ lookahead_floor: 500ms }}\n{RELAYS}"
    ));
    assert!(
        e.contains("network.lookahead_floor: lookahead_floor (500ms) must be shorter than stop_time (500ms)"),
        "{e}"
    );
    valid(&format!(
        "run: {{ stop_time: 500ms }}\nnetwork: {{ lookahead_floor: 499ms }}\n{RELAYS}{SERVERS}{CLIENTS}"
    ));
}

/// A count of a billion must be refused at once, not after allocating a billion hosts' worth
/// of names or placements (which takes minutes and gigabytes).
#[test]
fn host_cap_is_checked_before_per_host_work() {
    let cases = [
        format!("{RUN}relays:\n  list:\n    - {{ name: g, count: 1000000000, flags: [guard, fast], bandwidth_rate: 1 MiB/s }}\n"),
        format!("{RUN}relays:\n  generate: {{ guard: 3, exit: 2, middle: 1000000000, bandwidth: {{ fixed: 2 MiB/s }} }}\n"),
        format!("{RUN}authorities: 4000000000\n{RELAYS}"),
        format!("{RUN}{RELAYS}{SERVERS}clients: [ {{ name: c, count: 4294967295, workload: {{ bulk: {{}} }} }} ]\n"),
    ];
    for text in cases {
        let start = Instant::now();
        let e = refused(&text);
        assert!(
            e.contains(&format!("expected at most {MAX_HOSTS} hosts")),
            "{e}"
        );
        assert!(start.elapsed().as_secs() < 5, "took {:?}", start.elapsed());
    }
    // Exactly the cap is allowed in total (checked without resolving it).
    let per = (MAX_HOSTS - 3 - 6) / 2;
    let text = format!(
        "{RUN}{RELAYS}servers: [ {{ name: web, count: {per} }} ]\nclients: [ {{ name: c, count: {}, workload: {{ bulk: {{}} }} }} ]\n",
        MAX_HOSTS - 3 - 6 - per
    );
    parse(&text, inline()).unwrap();
    let over = text.replace(&format!("count: {per} "), &format!("count: {} ", per + 1));
    let e = parse(&over, inline()).unwrap_err().to_string();
    assert!(
        e.contains("clients[0].count: this group brings the scenario to 1000001 hosts"),
        "{e}"
    );
}

/// A scenario file of gigabytes is refused before it is read into memory.
#[test]
fn huge_scenario_files_are_refused_unread() {
    let dir = std::env::temp_dir().join(format!("onionlab-ranges-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("huge.yaml");
    let f = std::fs::File::create(&path).unwrap();
    // Sparse: 4 GiB of zeros cost no disk and, if read, 4 GiB of memory.
    f.set_len(4 << 30).unwrap();
    let start = Instant::now();
    let e = onionlab_scenario::load(&path).unwrap_err().to_string();
    assert!(e.contains("the file is larger than 16 MiB"), "{e}");
    assert!(start.elapsed().as_secs() < 5, "took {:?}", start.elapsed());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Circuits need a guard, a middle and an exit for port 80, and three different relays to fill
/// them; a scenario that the per-source checks pass can still fail here.
#[test]
fn circuits_must_be_possible_after_resolution() {
    // One guard+exit relay and middles pass the per-entry checks, but the position weights
    // of such a network give the guard+exit relay no guard weight (exits are scarce), as in tor.
    let e = refused(&format!(
        "{RUN}relays:\n  list:\n    - {{ name: ge, flags: [guard, exit, fast], bandwidth_rate: 1 MiB/s }}\n    - {{ name: m, count: 2, bandwidth_rate: 1 MiB/s }}\n{SERVERS}{CLIENTS}"
    ));
    assert!(
        e.contains("relays.list: clients exist but none of the 3 relays can be a guard"),
        "{e}"
    );
    // Without clients nothing needs a circuit.
    valid(&format!(
        "{RUN}relays:\n  list:\n    - {{ name: ge, flags: [guard, exit, fast], bandwidth_rate: 1 MiB/s }}\n    - {{ name: m, count: 2, bandwidth_rate: 1 MiB/s }}\n"
    ));
    // A sampled guard with a zero consensus weight is never chosen.
    let dir = tests_dir().join("data");
    let text = format!(
        "{RUN}relays:\n  sample: {{ consensus: zero-weight-guard.consensus, count: 5 }}\n{SERVERS}{CLIENTS}"
    );
    let path = dir.join("zero-weight-guard.yaml");
    let s = parse(&text, &path).unwrap();
    let e = resolve(&s, &load_graph(&s).unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("relays.sample: clients exist but none of the 5 relays sampled can be a guard"),
        "{e}"
    );
}

/// Rates taken from a graph node (not from the scenario) are checked when hosts are placed.
#[test]
fn graph_rates_are_checked_when_placing_hosts() {
    let path = tests_dir().join("data/slow-node-scenario.yaml");
    let text = format!(
        "{RUN}network: {{ graph: slow-node.gml }}\nauthorities: {{ count: 3, bandwidth: 1 Gbit }}\n{RELAYS}{SERVERS}{CLIENTS}"
    );
    let s = parse(&text, &path).unwrap();
    let e = resolve(&s, &load_graph(&s).unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("clients[0].bandwidth_up: graph node 0 gives its hosts 1 bit"),
        "{e}"
    );
    let fixed = text.replace(
        "workload: { web: {} } }",
        "workload: { web: {} }, bandwidth: 10 Mbit }",
    );
    let s = parse(&fixed, &path).unwrap();
    resolve(&s, &load_graph(&s).unwrap()).unwrap();
}

#[test]
fn names_are_plain_file_names() {
    for bad in ["..", ".", "a/b", "a b", "ü", &"x".repeat(101)] {
        let e = refused(&format!("name: {bad}\n{RUN}{RELAYS}"));
        assert!(
            e.contains("inline.yaml: name: expected a name"),
            "{bad}: {e}"
        );
    }
    valid(&format!("name: {}\n{RUN}{RELAYS}", "x".repeat(100)));
    // Without `name`, the file stem is made into a valid name.
    let body = format!("{RUN}{RELAYS}");
    for (file, name) in [
        ("my run (2).yaml", "my_run__2_"),
        ("...yaml", "scenario"),
        ("..yaml", "scenario"),
    ] {
        assert_eq!(parse(&body, Path::new(file)).unwrap().name, name, "{file}");
    }
}

/// The scenario crate checks `TorParams` through its table; a numeric parameter added without
/// a row would escape every range.
#[test]
fn every_numeric_tor_parameter_has_a_range() {
    let v = serde_json::to_value(TorParams::default()).unwrap();
    let mut numeric = 0;
    for (key, value) in v.as_object().unwrap() {
        if value.is_number() {
            numeric += 1;
            assert!(TorParams::range_of(key).is_some(), "{key} has no range");
        }
    }
    assert_eq!(numeric, TorParams::RANGES.len());
}

#[test]
fn warnings_point_at_suspicious_settings() {
    let text = format!(
        "{RUN}network: {{ graph: builtin, builtin: {{ latency: 10ms, loss: 0.6 }}, edge_loss: 0.7, lookahead_floor: 30ms }}\n\
         relays:\n  list:\n    - {{ name: g, count: 2, flags: [guard, fast], bandwidth_rate: 1 MiB/s }}\n    - {{ name: e, flags: [exit, fast], bandwidth_rate: 1 MiB/s }}\n    - {{ name: x, flags: [exit, fast], bandwidth_rate: 1 MiB/s, exit_policy: \"accept 443\" }}\n    - {{ name: slow, flags: [stable], bandwidth_rate: 1 MiB/s }}\n\
         {SERVERS}clients:\n  - {{ name: web, workload: {{ web: {{}} }}, start: [0s, 20m] }}\n"
    );
    let s = valid(&text);
    let w = warnings(&s);
    let fields: Vec<&str> = w.iter().map(|w| w.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "network.edge_loss",
            "network.builtin.loss",
            "network.lookahead_floor",
            "relays.list[2].exit_policy",
            "relays.list[3].flags",
            "clients[0].start",
        ],
        "{w:#?}"
    );
    assert!(
        w[2].message.contains("packets arrive up to 20ms late"),
        "{}",
        w[2]
    );
    assert!(w[1]
        .to_string()
        .starts_with("inline.yaml: network.builtin.loss: "));
    // The shipped examples are clean.
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    for entry in std::fs::read_dir(examples).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) == Some("yaml") {
            let (s, _, _) = load_and_resolve(&path).unwrap();
            assert!(
                warnings(&s).is_empty(),
                "{}: {:?}",
                path.display(),
                warnings(&s)
            );
        }
    }
}

/// No error of the broken corpus speaks the YAML library's or Rust's language.
#[test]
fn messages_never_leak_library_wording() {
    let dir = tests_dir().join("broken");
    let leaks = [
        "Option<",
        "DuplicateKeyPolicy",
        "externally tagged",
        "mapping start",
        "sequence start",
        "string scalar",
        "configured policy",
        "unit value",
        "invalid floating point",
        "invalid u64",
        "invalid u32",
    ];
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if let Err(e) = load_and_resolve(&path) {
            let shown = e.to_string();
            for leak in leaks {
                assert!(!shown.contains(leak), "{}: {shown}", path.display());
            }
        }
    }
}
