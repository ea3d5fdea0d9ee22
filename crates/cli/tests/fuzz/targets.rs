//! The fuzz targets: the scenario, GML, GraphML and consensus parsers (in the worker process),
//! and
//! `onionlab check` → a short `onionlab run` as child processes.

use std::ffi::OsStr;
use std::fs::{self, File};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use onionlab_net::topology::{Graph, TopologyError};
use onionlab_netdir::{BandwidthWeights, Consensus, PathSelector};
use onionlab_scenario::{RelaysSection, Scenario};
use proptest::prelude::*;
use proptest::strategy::BoxedStrategy;
use rand::SeedableRng;
use rand_chacha::ChaCha12Rng;

use crate::corpus::{self, Corpus};
use crate::harness::{fnv, Failure, Outcome, Rendered, Target};
use crate::mutate::{self, Format, Mutation, ScenarioCase};
use crate::worker::Worker;

/// Wording of the libraries underneath that must not reach a user, and signs of a crash
/// dressed up as an input error.
pub(crate) const LEAKS: &[&str] = &[
    "Option<",
    "DuplicateKeyPolicy",
    "configured policy",
    "externally tagged",
    "panicked",
    "RUST_BACKTRACE",
    "unwrap()",
    "unit value",
    "unit variant",
    "deserializ",
    "serde",
    "saphyr",
    "mapping start",
    "sequence start",
    "mapping end",
    "sequence end",
    "Some(",
    "Error {",
    "Utf8Error",
    "ParseIntError",
    "ParseFloatError",
    "AddrParseError",
    "TryFromIntError",
    // serde's and the standard library's own sentences, which name no field or line.
    "unknown variant",
    "invalid length",
    "invalid value:",
    "invalid type:",
    "a value of another kind",
    "invalid IPv4 address syntax",
    "invalid utf-8 sequence",
    "(os error",
    // The xz and XML libraries' words.
    "lzma",
    "premature eof",
    "corrupt xz stream",
    "DTD",
    // The YAML scanner quoting a character as `c'.
    "unexpected character: `",
];

thread_local! {
    /// The input of the case being evaluated on this thread (and its side files), so that a
    /// message quoting it is not blamed for what the input itself says.
    static INPUT: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn set_input(bytes: Vec<u8>) {
    INPUT.with(|i| *i.borrow_mut() = bytes);
}

/// Whether the input being checked contains `text` (a message quoting it is not to blame).
fn in_input(text: &str) -> bool {
    INPUT.with(|i| {
        let i = i.borrow();
        i.windows(text.len()).any(|w| w == text.as_bytes())
    })
}

/// The first leaked wording in an error message that the input itself does not contain, if
/// any; or a number echoed back with more digits than anyone reads (`1e308` written out in
/// full) that the input does not contain.
pub(crate) fn leak(message: &str) -> Option<&'static str> {
    if let Some(p) = LEAKS
        .iter()
        .copied()
        .find(|p| message.contains(p) && !in_input(p))
    {
        return Some(p);
    }
    let long_number = message
        .split(|c: char| !c.is_ascii_digit())
        .filter(|n| n.len() > 40)
        .any(|n| !in_input(n));
    long_number.then_some("a number of more than 40 digits")
}

fn check_message(stage: &str, message: &str) -> Result<(), Failure> {
    match leak(message) {
        Some(p) => Err(Failure::new(
            "bad-message",
            format!("{stage}: {p}"),
            format!("{stage} refused the input with a message that leaks `{p}`:\n{message}"),
        )),
        None => Ok(()),
    }
}

fn seeds_of(n: usize) -> Vec<Mutation> {
    (0..n)
        .map(|seed| Mutation {
            seed,
            tree: Vec::new(),
            text: Vec::new(),
        })
        .collect()
}

/// Hosts a scenario asks for (saturating).
pub(crate) fn hosts(s: &Scenario) -> u64 {
    let relays: u64 = match &s.relays {
        RelaysSection::Generate(g) => [g.guard, g.exit, g.guard_exit, g.middle]
            .iter()
            .map(|&n| u64::from(n))
            .sum(),
        RelaysSection::List(list) => list.iter().map(|r| u64::from(r.count)).sum(),
        RelaysSection::Sample(sample) => u64::from(sample.count),
    };
    let servers: u64 = s.servers.iter().map(|g| u64::from(g.count)).sum();
    let clients: u64 = s.clients.iter().map(|g| u64::from(g.count)).sum();
    u64::from(s.authorities.0.count) + relays + servers + clients
}

/// The most hosts a case may have for this fuzzer to build or run it.
pub(crate) const MAX_HOSTS: u64 = 3000;

// ---- parsers (in the worker process) -----------------------------------------------------

/// What the worker runs for a parser target.
pub(crate) fn eval_parser(target: &str, bytes: &[u8], parse_dir: &Path) -> Outcome {
    set_input(bytes.to_vec());
    let text = String::from_utf8_lossy(bytes);
    match target {
        "scenario" => check_scenario(&text, parse_dir),
        "gml" => check_graph(Graph::from_gml(&text, "fuzz.gml"), "gml"),
        "graphml" => check_graph(Graph::from_graphml(&text, "fuzz.graphml"), "graphml"),
        "consensus" => check_consensus(&text),
        other => Err(Failure::new("harness", "unknown target", other.to_string())),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ParserKind {
    Scenario,
    Gml,
    GraphMl,
    Consensus,
}

/// A parser target: mutations of its seeds, evaluated by the worker process.
pub(crate) struct Parser<'a> {
    pub corpus: &'a Corpus,
    pub worker: &'a Worker,
    pub kind: ParserKind,
}

impl Parser<'_> {
    fn seeds(&self) -> &[corpus::Seed] {
        match self.kind {
            ParserKind::Scenario => &self.corpus.scenarios,
            ParserKind::Gml => &self.corpus.gml,
            ParserKind::GraphMl => &self.corpus.graphml,
            ParserKind::Consensus => &self.corpus.consensus,
        }
    }

    fn format(&self) -> Format {
        match self.kind {
            ParserKind::Scenario => Format::Yaml,
            ParserKind::Gml => Format::Gml,
            ParserKind::GraphMl => Format::GraphMl,
            ParserKind::Consensus => Format::Consensus,
        }
    }
}

impl Target for Parser<'_> {
    type Case = Mutation;
    fn name(&self) -> &'static str {
        match self.kind {
            ParserKind::Scenario => "scenario",
            ParserKind::Gml => "gml",
            ParserKind::GraphMl => "graphml",
            ParserKind::Consensus => "consensus",
        }
    }
    fn ext(&self) -> &'static str {
        match self.kind {
            ParserKind::Scenario => "yaml",
            _ => self.name(),
        }
    }
    fn strategy(&self) -> BoxedStrategy<Mutation> {
        let n = self.seeds().len();
        match self.kind {
            ParserKind::Scenario => {
                let valid = self.corpus.valid_scenarios;
                prop_oneof![4 => mutate::yaml_mutation(n, valid), 1 => mutate::text_mutation(n)]
                    .boxed()
            }
            _ => mutate::text_mutation(n).boxed(),
        }
    }
    fn seed_cases(&self) -> Vec<Mutation> {
        seeds_of(self.seeds().len())
    }
    fn render(&self, case: &Mutation) -> Rendered {
        match self.kind {
            ParserKind::Scenario => Rendered {
                main: self.corpus.scenario(case),
                side: corpus::side_files(self.corpus)
                    .into_iter()
                    .map(|(n, b)| (n.to_string(), b))
                    .collect(),
            },
            _ => Rendered {
                main: self.corpus.mutated(self.seeds(), case, self.format()),
                side: Vec::new(),
            },
        }
    }
    fn eval(&self, input: &Rendered) -> Outcome {
        self.worker.eval(self.name(), &input.main)
    }
    fn shrink_budget(&self) -> (usize, Duration) {
        (500, Duration::from_secs(30))
    }
}

/// Parses and validates a scenario, then, for small scenarios whose inputs are small files,
/// loads the graph and resolves the hosts, as `onionlab check` does. And `run.json`'s promise:
/// the scenario written as JSON parses back to the same scenario.
pub(crate) fn check_scenario(text: &str, dir: &Path) -> Outcome {
    let path = dir.join("case.yaml");
    let scenario = match onionlab_scenario::parse(text, &path) {
        Ok(s) => s,
        Err(e) => {
            check_message("parse", &e.to_string())?;
            return Ok("refused");
        }
    };
    round_trip(&scenario, &path)?;
    let local_graph = {
        let g = &scenario.network.graph;
        g == "builtin"
            || (!g.starts_with("data:") && (g.ends_with(".gml") || g.ends_with(".graphml")))
    };
    let local_relays = match &scenario.relays {
        // The fuzzer's `c.consensus`, or a regression case's consensus beside it.
        RelaysSection::Sample(s) => {
            s.consensus.ends_with(".consensus") && !s.consensus.contains(['/', '\\'])
        }
        _ => true,
    };
    if hosts(&scenario) > MAX_HOSTS || !local_graph || !local_relays {
        return Ok("accepted (not resolved)");
    }
    let graph = match onionlab_scenario::load_graph(&scenario) {
        Ok(g) => g,
        Err(e) => {
            check_message("load_graph", &e.to_string())?;
            return Ok("graph refused");
        }
    };
    match onionlab_scenario::resolve(&scenario, &graph) {
        Ok(plan) => {
            // Names identify the rows of relays.csv and downloads.csv.
            let relays = plan.relays.iter().map(|r| r.name.as_str());
            let clients = plan.clients.iter().map(|c| c.host.name.as_str());
            for (what, names) in [
                ("relay", relays.collect::<Vec<_>>()),
                ("client", clients.collect()),
            ] {
                let mut seen = std::collections::HashSet::new();
                if let Some(twice) = names.iter().find(|n| !seen.insert(**n)) {
                    return Err(Failure::new(
                        "wrong-result",
                        format!("two {what}s share a name"),
                        format!("the plan names two {what}s {twice:?}"),
                    ));
                }
            }
            Ok("resolved")
        }
        Err(e) => {
            check_message("resolve", &e.to_string())?;
            Ok("resolve refused")
        }
    }
}

/// The scenario as `run.json` records it (serialized, less `source`) must parse back to itself.
fn round_trip(scenario: &Scenario, path: &Path) -> Result<(), Failure> {
    let mut json = serde_json::to_value(scenario)
        .map_err(|e| Failure::new("round-trip", "serialize", e.to_string()))?;
    if let Some(map) = json.as_object_mut() {
        map.remove("source");
    }
    let text = serde_json::to_string(&json).unwrap_or_default();
    match onionlab_scenario::parse(&text, path) {
        Ok(back) if back == *scenario => Ok(()),
        Ok(back) => {
            let mut differ = Vec::new();
            let back_json = serde_json::to_value(&back).unwrap_or_default();
            if let (Some(a), Some(b)) = (json.as_object(), back_json.as_object()) {
                for (k, v) in a {
                    if b.get(k) != Some(v) {
                        differ.push(k.clone());
                    }
                }
            }
            Err(Failure::new(
                "round-trip",
                format!("differs in {}", differ.join(",")),
                format!("the scenario written as JSON parses back to a different scenario (fields {differ:?}):\n{text}"),
            ))
        }
        Err(e) => Err(Failure::new(
            "round-trip",
            format!("refused: {}", e.field),
            format!(
                "the scenario written as JSON (as run.json records it) is refused: {e}\n{text}"
            ),
        )),
    }
}

/// Exercises a parsed graph: shortest paths among its first nodes, and the GML writer, whose
/// output must read back as the same graph.
pub(crate) fn check_graph(parsed: Result<Graph, TopologyError>, stage: &str) -> Outcome {
    let g = match parsed {
        Ok(g) => g,
        Err(e) => {
            check_message(stage, &e.to_string())?;
            return Ok("refused");
        }
    };
    for e in &g.edges {
        if e.source >= g.nodes.len() || e.target >= g.nodes.len() {
            return Err(Failure::new(
                "bad-graph",
                "edge index outside the nodes",
                format!("edge {e:?} with {} nodes", g.nodes.len()),
            ));
        }
    }
    let used: Vec<usize> = (0..g.nodes.len().min(64)).collect();
    let label = match g.paths(&used) {
        Ok(_) => "paths",
        Err(e) => {
            check_message("paths", &e.to_string())?;
            "no paths"
        }
    };
    if g.edges.len() <= 100_000 {
        let text = g.to_gml();
        match Graph::from_gml(&text, &g.source) {
            Ok(back) if back == g => {}
            Ok(back) => {
                let what = if back.nodes != g.nodes {
                    let i = back.nodes.iter().zip(&g.nodes).position(|(a, b)| a != b);
                    format!(
                        "nodes (first at {i:?}: {:?} read back as {:?})",
                        i.map(|i| &g.nodes[i]),
                        i.map(|i| &back.nodes[i])
                    )
                } else if back.edges != g.edges {
                    let i = back.edges.iter().zip(&g.edges).position(|(a, b)| a != b);
                    format!(
                        "edges (first at {i:?}: {:?} read back as {:?})",
                        i.map(|i| &g.edges[i]),
                        i.map(|i| &back.edges[i])
                    )
                } else {
                    "directed".to_string()
                };
                return Err(Failure::new(
                    "round-trip",
                    format!(
                        "{stage} to_gml differs in {}",
                        what.split(' ').next().unwrap_or("")
                    ),
                    format!(
                        "Graph::to_gml's output reads back as a different graph: {what}\n{text}"
                    ),
                ));
            }
            Err(e) => {
                return Err(Failure::new(
                    "round-trip",
                    format!("{stage} to_gml output refused"),
                    format!("Graph::to_gml's output does not parse: {e}\n{text}"),
                ))
            }
        }
    }
    Ok(label)
}

/// Parses a consensus, then does what a scenario does with one: position weights, guards,
/// paths for a few ports, samples of several sizes. Paths must obey path-spec's rules.
pub(crate) fn check_consensus(text: &str) -> Outcome {
    let c = match Consensus::parse(text, "fuzz-consensus") {
        Ok(c) => c,
        Err(e) => {
            check_message("consensus", &e.to_string())?;
            return Ok("refused");
        }
    };
    let _ = BandwidthWeights::compute(&c.relays);
    let _ = c.param("CircuitPriorityHalflifeMsec", 30000);
    let mut rng = ChaCha12Rng::seed_from_u64(u64::from(fnv(text.as_bytes())));
    let sel = PathSelector::new(&c);
    let guards = sel.choose_guards(&c, 3, &mut rng);
    let n = c.relays.len();
    if guards.iter().any(|&g| g >= n) {
        return Err(Failure::new(
            "bad-path",
            "guard outside the consensus",
            format!("{guards:?} of {n}"),
        ));
    }
    let mut label = "no path";
    for (port, stable) in [(80, false), (443, true), (1, false), (65535, false)] {
        for guard_list in [&guards[..], &[]] {
            if let Some(path) = sel.choose_path(&c, guard_list, port, stable, &mut rng) {
                label = "paths";
                let [g, m, e] = path;
                let problem = if path.iter().any(|&i| i >= n) {
                    Some("a hop outside the consensus")
                } else if g == m || m == e || g == e {
                    Some("a relay twice")
                } else if c.relays[g].conflicts_with(&c.relays[m])
                    || c.relays[m].conflicts_with(&c.relays[e])
                    || c.relays[g].conflicts_with(&c.relays[e])
                {
                    Some("two hops in one /16 or family")
                } else if !c.relays[e].exit_policy.allows_port(port) {
                    Some("an exit whose policy refuses the port")
                } else {
                    None
                };
                if let Some(p) = problem {
                    return Err(Failure::new(
                        "bad-path",
                        p,
                        format!(
                            "choose_path(port {port}, guards {guard_list:?}) gave {path:?}: {p}"
                        ),
                    ));
                }
            }
        }
    }
    for k in [0, 1, 2, n / 2, n.saturating_sub(1), n, n + 1] {
        let s = c.sample(k, &mut rng);
        if s.relays.len() != k.min(n) {
            return Err(Failure::new(
                "bad-sample",
                "sample size",
                format!("sample({k}) of {n} relays gave {}", s.relays.len()),
            ));
        }
        let _ = PathSelector::new(&s);
    }
    Ok(label)
}

// ---- check → run --------------------------------------------------------------------------

/// Address space a child may take; beyond it allocation fails (and Rust aborts).
pub(crate) const CHILD_MEMORY: u64 = 4 << 30;
pub(crate) const CHECK_TIMEOUT: Duration = Duration::from_secs(30);
pub(crate) const RUN_TIMEOUT: Duration = Duration::from_secs(60);
/// Simulated time of the short run.
pub(crate) const STOP_TIME: &str = "5s";

pub(crate) struct Child {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

/// Runs `onionlab ARGS` with a time limit and an address-space limit; output goes through
/// files in `work` so that nothing blocks on a full pipe.
pub(crate) fn onionlab(args: &[&OsStr], work: &Path, cwd: &Path, timeout: Duration) -> Child {
    let _ = fs::create_dir_all(work);
    let _ = fs::create_dir_all(cwd);
    let out_path = work.join("stdout");
    let err_path = work.join("stderr");
    let out = File::create(&out_path).expect("stdout file");
    let err = File::create(&err_path).expect("stderr file");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_onionlab"));
    cmd.args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
    // SAFETY: setrlimit is async-signal-safe and touches nothing of the parent's.
    unsafe {
        cmd.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: CHILD_MEMORY as libc::rlim_t,
                rlim_max: CHILD_MEMORY as libc::rlim_t,
            };
            libc::setrlimit(libc::RLIMIT_AS, &limit);
            Ok(())
        });
    }
    let start = Instant::now();
    let mut child = cmd.spawn().expect("onionlab starts");
    let mut nap = Duration::from_millis(1);
    let mut timed_out = false;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if start.elapsed() > timeout => {
                let _ = child.kill();
                timed_out = true;
                break child.wait().ok();
            }
            Ok(None) => {
                std::thread::sleep(nap);
                nap = (nap * 2).min(Duration::from_millis(50));
            }
            Err(_) => break None,
        }
    };
    let elapsed = start.elapsed();
    let read = |p: &Path| {
        let bytes = fs::read(p).unwrap_or_default();
        let tail = &bytes[bytes.len().saturating_sub(16 * 1024)..];
        String::from_utf8_lossy(tail).into_owned()
    };
    Child {
        code: status.and_then(|s| s.code()),
        signal: status.and_then(|s| s.signal()),
        timed_out,
        stdout: read(&out_path),
        stderr: read(&err_path),
        elapsed,
    }
}

/// Where in the code a crash happened, from its output: the panic location, or the first
/// line with numbers blanked.
fn crash_site(stderr: &str) -> String {
    if let Some(i) = stderr.find("panicked at ") {
        let rest = &stderr[i + "panicked at ".len()..];
        let end = rest.find([':', '\n']).map_or(rest.len(), |e| {
            // Keep `file:line`, drop the column and the message.
            let after = &rest[e + 1..];
            let digits = after
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(after.len());
            e + 1 + digits
        });
        return format!("panic at {}", &rest[..end]);
    }
    if stderr.contains("has overflowed its stack") {
        return "stack overflow".into();
    }
    if stderr.contains("memory allocation of") {
        return "allocation failed".into();
    }
    let line = stderr.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    line.chars()
        .map(|c| if c.is_ascii_digit() { '#' } else { c })
        .take(120)
        .collect()
}

fn describe(stage: &str, c: &Child) -> String {
    format!(
        "{stage}: exit {:?}, signal {:?}, timed out {}, {:.2} s\n--- stdout\n{}\n--- stderr\n{}",
        c.code,
        c.signal,
        c.timed_out,
        c.elapsed.as_secs_f64(),
        c.stdout,
        c.stderr
    )
}

/// The exit code when the child ended in an acceptable way (0 or 2), else the failure.
fn classify(stage: &str, c: &Child) -> Result<i32, Failure> {
    if c.timed_out {
        return Err(Failure::new(
            format!("{stage}-timeout"),
            format!("{stage} timed out"),
            describe(stage, c),
        ));
    }
    if let Some(sig) = c.signal {
        let what = if c.stderr.contains("has overflowed its stack") {
            "stack-overflow".to_string()
        } else if c.stderr.contains("memory allocation of") {
            "memory-limit".to_string()
        } else {
            format!("signal-{sig}")
        };
        return Err(Failure::new(
            format!("{stage}-{what}"),
            crash_site(&c.stderr),
            describe(stage, c),
        ));
    }
    match c.code {
        Some(code @ (0 | 2)) => Ok(code),
        code => Err(Failure::new(
            format!(
                "{stage}-exit-{}",
                code.map_or("none".to_string(), |c| c.to_string())
            ),
            crash_site(&c.stderr),
            describe(stage, c),
        )),
    }
}

/// An exit-2 message must say what is wrong in the user's terms: not empty, naming the
/// scenario file, and free of library wording.
fn check_cli_message(stage: &str, c: &Child, file_name: &str) -> Result<(), Failure> {
    let message = c.stderr.trim();
    if message.is_empty() {
        return Err(Failure::new(
            "bad-message",
            format!("{stage}: empty"),
            describe(stage, c),
        ));
    }
    if let Some(p) = leak(message) {
        return Err(Failure::new(
            "bad-message",
            format!("{stage}: {p}"),
            format!("leaks `{p}`\n{}", describe(stage, c)),
        ));
    }
    if !message.contains(file_name) {
        return Err(Failure::new(
            "bad-message",
            format!("{stage}: does not name the scenario file"),
            describe(stage, c),
        ));
    }
    Ok(())
}

/// `valid: N relays, N authorities, N servers, N clients` → the total.
fn hosts_from_check(stdout: &str) -> Option<u64> {
    let rest = &stdout[stdout.find("valid: ")? + "valid: ".len()..];
    let mut total = 0u64;
    for (part, what) in rest
        .split(", ")
        .zip(["relays", "authorities", "servers", "clients"])
    {
        let (n, w) = part.split_once(' ')?;
        if w != what {
            return None;
        }
        total = total.saturating_add(n.parse().ok()?);
    }
    Some(total)
}

/// `ONIONLAB_FUZZ_VERBOSE=1`: print why check refused each case.
fn verbose() -> bool {
    static VERBOSE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *VERBOSE.get_or_init(|| std::env::var_os("ONIONLAB_FUZZ_VERBOSE").is_some_and(|v| v != "0"))
}

/// Where a run put its `run.json`, relative to the folder it ran in, when it is somewhere
/// under that folder.
fn find_run_json(dir: &Path, depth: usize) -> Option<PathBuf> {
    if dir.join("run.json").is_file() {
        return Some(dir.join("run.json"));
    }
    if depth == 0 {
        return None;
    }
    let mut subdirs: Vec<PathBuf> = fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    subdirs.sort();
    subdirs
        .into_iter()
        .find_map(|d| find_run_json(&d, depth - 1))
}

/// `onionlab check FILE`, then, when it accepts a scenario of at most [`MAX_HOSTS`] hosts,
/// `onionlab run FILE --stop-time STOP_TIME` in an empty folder `work/cwd`, whose results
/// must land in a folder of their own under `out/` (the default output folder is
/// `out/<scenario name>`, so the name must not lead elsewhere).
pub(crate) fn check_then_run(scenario: &Path, work: &Path) -> Outcome {
    let mut input = fs::read(scenario).unwrap_or_default();
    if let Some(dir) = scenario.parent() {
        for side in corpus::sorted_files(dir, "gml")
            .into_iter()
            .chain(corpus::sorted_files(dir, "graphml"))
            .chain(corpus::sorted_files(dir, "consensus"))
        {
            input.extend(fs::read(side).unwrap_or_default());
        }
    }
    set_input(input);
    let file_name = scenario
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let cwd = work.join("cwd");
    let _ = fs::remove_dir_all(&cwd);
    let check = onionlab(
        &[OsStr::new("check"), scenario.as_os_str()],
        work,
        &cwd,
        CHECK_TIMEOUT,
    );
    if classify("check", &check)? == 2 {
        check_cli_message("check", &check, &file_name)?;
        if verbose() {
            println!(
                "check refused: {}",
                check.stderr.lines().next().unwrap_or("")
            );
        }
        return Ok("check refused");
    }
    let Some(hosts) = hosts_from_check(&check.stdout) else {
        return Err(Failure::new(
            "check-output",
            "exit 0 without a `valid:` line",
            describe("check", &check),
        ));
    };
    if hosts > MAX_HOSTS {
        return Ok("check accepted, too big to run");
    }
    let run = onionlab(
        &[
            OsStr::new("run"),
            scenario.as_os_str(),
            OsStr::new("--stop-time"),
            OsStr::new(STOP_TIME),
            OsStr::new("--no-report"),
            OsStr::new("--quiet"),
            OsStr::new("--threads"),
            OsStr::new("2"),
        ],
        work,
        &cwd,
        RUN_TIMEOUT,
    );
    let code = classify("run", &run);
    let found = find_run_json(&cwd, 3);
    let complete = found
        .as_ref()
        .and_then(|p| fs::read_to_string(p).ok())
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v.get("complete").and_then(|c| c.as_bool()));
    let _ = fs::remove_dir_all(&cwd);
    if code? == 2 {
        check_cli_message("run", &run, &file_name)?;
        let first = run
            .stderr
            .lines()
            .find(|l| l.starts_with("error"))
            .unwrap_or("")
            .to_string();
        // What the error is about, without the file name and numbers: `field: what`. A
        // refusal caused by this fuzzer's own `--stop-time` is no news.
        let about: String = first
            .rsplit(".yaml: ")
            .next()
            .unwrap_or("")
            .chars()
            .map(|c| if c.is_ascii_digit() { '#' } else { c })
            .take(60)
            .collect();
        // `check` must refuse whatever `run` refuses on the same machine.
        if !first.contains(&format!("({STOP_TIME})")) {
            return Err(Failure::new(
                "check-run-disagree",
                about,
                format!("run refused what check accepted\n{}", describe("run", &run)),
            ));
        }
        return Ok("check accepted, run refused (--stop-time)");
    }
    let Some(run_json) = found else {
        return Err(Failure::new(
            "run-output",
            "no run.json",
            describe("run", &run),
        ));
    };
    let place: Vec<String> = run_json
        .strip_prefix(&cwd)
        .map(|p| {
            p.components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    if place.len() != 3 || place[0] != "out" || place[1] == "." || place[1] == ".." {
        return Err(Failure::new(
            "run-output",
            "results outside a folder of their own under out/",
            format!(
                "the run wrote its results to ./{} (expected ./out/<name>/run.json)\n{}",
                place.join("/"),
                describe("run", &run)
            ),
        ));
    }
    if complete != Some(true) {
        return Err(Failure::new(
            "run-incomplete",
            format!("run.json complete = {complete:?}"),
            describe("run", &run),
        ));
    }
    Ok("ran")
}

pub(crate) struct CheckRun<'a> {
    pub corpus: &'a Corpus,
    pub work: PathBuf,
}

impl Target for CheckRun<'_> {
    type Case = ScenarioCase;
    fn name(&self) -> &'static str {
        "check-run"
    }
    fn ext(&self) -> &'static str {
        "yaml"
    }
    fn strategy(&self) -> BoxedStrategy<ScenarioCase> {
        mutate::scenario_case(
            self.corpus.scenarios.len(),
            self.corpus.valid_scenarios,
            self.corpus.gml.len(),
            self.corpus.consensus.len(),
        )
        .boxed()
    }
    fn seed_cases(&self) -> Vec<ScenarioCase> {
        seeds_of(self.corpus.scenarios.len())
            .into_iter()
            .map(|scenario| ScenarioCase {
                scenario,
                graph: None,
                consensus: None,
            })
            .collect()
    }
    fn render(&self, case: &ScenarioCase) -> Rendered {
        let mut side: Vec<(String, Vec<u8>)> = corpus::side_files(self.corpus)
            .into_iter()
            .map(|(n, b)| (n.to_string(), b))
            .collect();
        for (name, bytes) in &mut side {
            if name == "g.gml" {
                if let Some(m) = &case.graph {
                    *bytes = self.corpus.mutated(&self.corpus.gml, m, Format::Gml);
                }
            }
            if name == "c.consensus" {
                if let Some(m) = &case.consensus {
                    *bytes = self
                        .corpus
                        .mutated(&self.corpus.consensus, m, Format::Consensus);
                }
            }
        }
        Rendered {
            main: self.corpus.scenario(&case.scenario),
            side,
        }
    }
    fn eval(&self, input: &Rendered) -> Outcome {
        let dir = self.work.join("case");
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("case directory");
        let scenario = dir.join("input.yaml");
        fs::write(&scenario, &input.main).expect("scenario written");
        for (name, bytes) in &input.side {
            fs::write(dir.join(name), bytes).expect("side file written");
        }
        check_then_run(&scenario, &self.work)
    }
    fn shrink_budget(&self) -> (usize, Duration) {
        (40, Duration::from_secs(60))
    }
}

/// The texts after `expect-refused: ` in a regression case (each to the end of its line, less
/// a closing `-->`): the case must be refused with a message holding every one of them.
pub(crate) fn expected_refusal(text: &[u8]) -> Vec<String> {
    const MARK: &str = "expect-refused: ";
    String::from_utf8_lossy(text)
        .lines()
        .filter_map(|l| Some(&l[l.find(MARK)? + MARK.len()..]))
        .map(|rest| {
            rest.trim_end()
                .trim_end_matches("-->")
                .trim_end()
                .to_string()
        })
        .collect()
}

/// A regression case that must be refused: a scenario by `onionlab check` (exit 2), a graph by
/// its parser, with a message holding each of `expected`.
pub(crate) fn check_refused(path: &Path, expected: &[String], work: &Path) -> Result<(), Failure> {
    let text = fs::read(path).unwrap_or_default();
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let (refused, message) = match path.extension().and_then(|e| e.to_str()) {
        Some("yaml") => {
            let c = onionlab(
                &[OsStr::new("check"), path.as_os_str()],
                work,
                &work.join("cwd"),
                CHECK_TIMEOUT,
            );
            (c.code == Some(2), c.stderr)
        }
        Some("gml") => match Graph::from_gml(&String::from_utf8_lossy(&text), &name) {
            Ok(_) => (false, "accepted".into()),
            Err(e) => (true, e.to_string()),
        },
        Some("graphml") => match Graph::from_graphml(&String::from_utf8_lossy(&text), &name) {
            Ok(_) => (false, "accepted".into()),
            Err(e) => (true, e.to_string()),
        },
        other => {
            return Err(Failure::new(
                "harness",
                "expect-refused",
                format!("{other:?}"),
            ))
        }
    };
    if refused && expected.iter().all(|e| message.contains(e.as_str())) {
        return Ok(());
    }
    let expected = expected.join("` and `");
    Err(Failure::new(
        "not-refused",
        expected.clone(),
        format!("expected a refusal saying `{expected}`, got: {message}"),
    ))
}
