//! Fuzzing onionlab's inputs: the scenario, GML, GraphML and consensus parsers, and
//! `onionlab check` followed by a short `onionlab run` of whatever check accepts.
//!
//! Cases are mutations of a seed corpus (the example and broken scenarios, the regression
//! cases, scenarios written for the fuzzer, small graphs in both formats, consensus excerpts
//! cut from a shipped consensus), drawn by proptest from a fixed seed, so a run is
//! reproducible, and shrunk when they fail. Mutations are byte- and line-level for every
//! format (they find parser panics) and structure-aware for scenarios: a YAML tree whose
//! scalars become values of the same kind at and past their limits or extreme values of any
//! kind, whose keys repeat, vanish or appear, whose maps become lists (they reach validation
//! and the simulation).
//!
//! * Parsers (`scenario`, `gml`, `graphml`, `consensus`) run in a worker process (this binary
//!   again, as the `fuzz_worker` test, 4 GiB address space, 8 MiB stack). A failure is a
//!   panic, the worker dying (stack overflow, abort, memory limit), a case taking over 30 s,
//!   a wrong result (a path that breaks path-spec's rules, a sample of the wrong size, a graph
//!   that `to_gml` does not write back faithfully, a scenario that does not parse back from
//!   the JSON `run.json` records) or an error message that leaks library wording. Scenarios
//!   that parse are also resolved (hosts placed on the graph) when small and on small graphs.
//! * `check-run`: the mutated scenario, with `g.gml`, `g.graphml`, `c.consensus` and
//!   `fidelity.gml` beside it (now and then mutated too), goes to `onionlab check` (30 s,
//!   4 GiB). It must exit 0, or 2 with a message that names the file and leaks no library
//!   wording. When it accepts at most 3000 hosts, `onionlab run --stop-time 5s` runs in an
//!   empty folder (60 s, 4 GiB) and must exit 0 with a complete `run.json` in `out/<name>/`,
//!   or 2 likewise. Exit 1, a signal, a timeout or the memory limit is a crash.
//!
//! By default each target runs its seeds and a fixed number of mutated cases (under a minute
//! on two cores). Environment variables:
//!
//! * `ONIONLAB_FUZZ_SECONDS=S`: run until S seconds have passed instead (the parsers take
//!   turns on one thread, check → run has another);
//! * `ONIONLAB_FUZZ_CASES=N`, `ONIONLAB_FUZZ_RUN_CASES=N`: mutated cases per parser target
//!   and for check → run (defaults 25000 and 300);
//! * `ONIONLAB_FUZZ_SEED=N`: another random stream (default 0);
//! * `ONIONLAB_FUZZ_TARGETS=scenario,gml,graphml,consensus,check-run`: a subset;
//! * `ONIONLAB_FUZZ_OUT=DIR`: where failing inputs go (default `<target dir>/fuzz-crashes`),
//!   one folder per distinct failure with `input.*`, the side files, `failure.txt` and, when
//!   shrinking helped, `shrunk/`;
//! * `ONIONLAB_FUZZ_VERBOSE=1`: print why check refused each case.
//!
//! At the end it prints, per target, the cases run (seeds included), failures and time.
//!
//! Every file in `tests/fuzz/regressions/` is a case that once failed: `*.yaml` go through the
//! worker's scenario checks and check → run, `*.gml`, `*.graphml` and `*.consensus` through
//! their parser. A case that was wrongly accepted says so with lines holding
//! `expect-refused: TEXT` (in comments): it must also be refused (a scenario by `onionlab
//! check`, a graph by its parser) with a message holding every TEXT.

#[path = "fuzz/corpus.rs"]
mod corpus;
#[path = "fuzz/harness.rs"]
mod harness;
#[path = "fuzz/mutate.rs"]
mod mutate;
#[path = "fuzz/targets.rs"]
mod targets;
#[path = "fuzz/worker.rs"]
mod worker;
#[path = "fuzz/yaml.rs"]
mod yaml;

use std::fs;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use corpus::Corpus;
use harness::{Budget, CrashSink, Drive, Run, Stats};
use targets::{CheckRun, Parser, ParserKind};
use worker::Worker;

const DEFAULT_CASES: u64 = 25000;
const DEFAULT_RUN_CASES: u64 = 300;

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    Some(
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v}: expected a whole number")),
    )
}

/// `<target dir>/fuzz-crashes`, from the test binary's own path (`<target>/<profile>/deps/`).
fn default_out() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.parent()?.join("fuzz-crashes")))
        .unwrap_or_else(|| std::env::temp_dir().join("onionlab-fuzz-crashes"))
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("onionlab-fuzz-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

#[test]
fn fuzz() {
    let seed = env_u64("ONIONLAB_FUZZ_SEED").unwrap_or(0);
    let seconds = env_u64("ONIONLAB_FUZZ_SECONDS");
    let cases = env_u64("ONIONLAB_FUZZ_CASES").unwrap_or(DEFAULT_CASES);
    let run_cases = env_u64("ONIONLAB_FUZZ_RUN_CASES").unwrap_or(DEFAULT_RUN_CASES);
    let wanted: Option<Vec<String>> = std::env::var("ONIONLAB_FUZZ_TARGETS")
        .ok()
        .map(|v| v.split(',').map(|s| s.trim().to_string()).collect());
    const TARGETS: [&str; 5] = ["scenario", "gml", "graphml", "consensus", "check-run"];
    for name in wanted.iter().flatten() {
        assert!(
            TARGETS.contains(&name.as_str()),
            "ONIONLAB_FUZZ_TARGETS: unknown target {name:?} (known: {})",
            TARGETS.join(",")
        );
    }
    let on = |name: &str| wanted.as_ref().is_none_or(|w| w.iter().any(|x| x == name));
    let out = std::env::var_os("ONIONLAB_FUZZ_OUT")
        .map(PathBuf::from)
        .unwrap_or_else(default_out);

    let start = Instant::now();
    let corpus = Corpus::load();
    let parse_dir = scratch("parse");
    for (name, bytes) in corpus::side_files(&corpus) {
        fs::write(parse_dir.join(name), bytes).expect("side file");
    }
    let work = scratch("check-run");
    let sink = CrashSink::new(out.clone(), seed);
    let (in_budget, run_budget) = match seconds {
        Some(s) => {
            let until = Budget::Until(start + Duration::from_secs(s));
            (until, until)
        }
        None => (Budget::Cases(cases), Budget::Cases(run_cases)),
    };
    println!(
        "onionlab fuzz: seed {seed}, {}; {} scenario seeds ({} YAML trees), {} GML, {} GraphML, {} consensus; failures go to {}",
        match seconds {
            Some(s) => format!("{s} s"),
            None => format!("{cases} mutated cases per parser target, {run_cases} for check-run"),
        },
        corpus.scenarios.len(),
        corpus.scenarios.iter().filter(|s| s.tree.is_some()).count(),
        corpus.gml.len(),
        corpus.graphml.len(),
        corpus.consensus.len(),
        out.display()
    );

    let worker_dir = scratch("worker");
    let worker = Worker::new(worker_dir.clone(), parse_dir.clone());
    let check_run = CheckRun {
        corpus: &corpus,
        work: work.clone(),
    };
    let parser_targets: Vec<Parser> = [
        (ParserKind::Scenario, "scenario"),
        (ParserKind::Gml, "gml"),
        (ParserKind::GraphMl, "graphml"),
        (ParserKind::Consensus, "consensus"),
    ]
    .into_iter()
    .filter(|(_, name)| on(name))
    .map(|(kind, _)| Parser {
        corpus: &corpus,
        worker: &worker,
        kind,
    })
    .collect();
    let mut parsers: Vec<Box<dyn Drive + '_>> = parser_targets
        .iter()
        .map(|t| Box::new(Run::new(t, seed, &sink)) as Box<dyn Drive + '_>)
        .collect();
    // check → run on a thread of its own, the parsers in turn on this one.
    let stats: Vec<(&str, Stats)> = std::thread::scope(|s| {
        let subprocess = s.spawn(|| {
            let mut runs: Vec<Box<dyn Drive + '_>> = Vec::new();
            if on("check-run") {
                runs.push(Box::new(Run::new(&check_run, seed, &sink)));
            }
            harness::drive(&mut runs, run_budget, 1);
            runs.iter()
                .map(|r| (r.name(), r.stats().clone()))
                .collect::<Vec<_>>()
        });
        harness::drive(&mut parsers, in_budget, 50);
        let mut stats: Vec<(&str, Stats)> = parsers
            .iter()
            .map(|r| (r.name(), r.stats().clone()))
            .collect();
        stats.extend(subprocess.join().expect("the check-run thread"));
        stats
    });

    println!(
        "\n{:<10} {:>9} {:>6} {:>9} {:>9}  outcomes",
        "target", "cases", "seeds", "failures", "seconds"
    );
    let mut total_failures = 0;
    for (name, st) in &stats {
        total_failures += st.failures;
        let labels: Vec<String> = st.labels.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        println!(
            "{:<10} {:>9} {:>6} {:>9} {:>9.1}  {}",
            name,
            st.cases,
            st.seeds,
            st.failures,
            st.time.as_secs_f64(),
            labels.join(", ")
        );
    }
    println!(
        "wall time {:.1} s; the parser worker was restarted {} times",
        start.elapsed().as_secs_f64(),
        worker.restarts.lock().map(|n| *n).unwrap_or(0)
    );
    let found = sink.found();
    drop(parsers);
    drop(parser_targets);
    drop(worker);
    for dir in [&parse_dir, &work, &worker_dir] {
        let _ = fs::remove_dir_all(dir);
    }
    if !found.is_empty() {
        let mut list = String::new();
        for (dir, n) in &found {
            let first = fs::read_to_string(dir.join("failure.txt"))
                .ok()
                .map(|t| t.lines().take(3).collect::<Vec<_>>().join("; "))
                .unwrap_or_default();
            list.push_str(&format!("  {} (seen {n}x): {first}\n", dir.display()));
        }
        panic!(
            "{total_failures} failing cases, {} distinct failures:\n{list}",
            found.len()
        );
    }
}

/// Every scenario that once crashed goes through check → short run and must end acceptably;
/// graph and consensus files go through their parser.
#[test]
fn regressions() {
    let dir = corpus::regressions_dir();
    let mut files: Vec<PathBuf> = Vec::new();
    for ext in ["yaml", "gml", "graphml", "consensus"] {
        files.extend(corpus::sorted_files(&dir, ext));
    }
    assert!(
        !files.is_empty(),
        "no regression cases in {}",
        dir.display()
    );
    let work = scratch("regressions");
    // The worker resolves relative references from the regressions folder.
    let parser_worker = Worker::new(work.join("worker"), dir.clone());
    // Two at a time: some of these used to hang until their timeout.
    let failures = std::sync::Mutex::new(Vec::new());
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for thread in 0..2 {
            let (files, failures, next, work) = (&files, &failures, &next, &work);
            let parser_worker = &parser_worker;
            s.spawn(move || loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let Some(path) = files.get(i) else { break };
                let text = fs::read(path).unwrap_or_default();
                let start = Instant::now();
                let outcome = match path.extension().and_then(|e| e.to_str()) {
                    // In-process checks first (parse, validation, resolution, the run.json
                    // round trip), then the binary.
                    Some("yaml") => parser_worker.eval("scenario", &text).and_then(|_| {
                        targets::check_then_run(path, &work.join(thread.to_string()))
                    }),
                    Some("gml") => parser_worker.eval("gml", &text),
                    Some("graphml") => parser_worker.eval("graphml", &text),
                    _ => parser_worker.eval("consensus", &text),
                };
                let expected = targets::expected_refusal(&text);
                let outcome = match outcome {
                    Ok(label) if !expected.is_empty() => {
                        let dir = work.join(format!("{thread}-refused"));
                        targets::check_refused(path, &expected, &dir).map(|_| label)
                    }
                    outcome => outcome,
                };
                let name = path
                    .file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned();
                let took = start.elapsed().as_secs_f64();
                match outcome {
                    Ok(label) => println!("ok    {name}: {label} ({took:.1} s)"),
                    Err(f) => {
                        println!("FAIL  {name}: {} ({}) ({took:.1} s)", f.kind, f.signature);
                        let what = String::from_utf8_lossy(&text)
                            .lines()
                            .next()
                            .unwrap_or("")
                            .to_string();
                        failures
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push(format!(
                                "{name} [{what}]: {} ({})\n{}",
                                f.kind, f.signature, f.detail
                            ));
                    }
                }
            });
        }
    });
    drop(parser_worker);
    let _ = fs::remove_dir_all(&work);
    let failures = failures.into_inner().unwrap_or_else(|e| e.into_inner());
    assert!(
        failures.is_empty(),
        "{} of {} regression cases fail:\n\n{}",
        failures.len(),
        files.len(),
        failures.join("\n\n")
    );
}

/// The parser worker (see `fuzz/worker.rs`): does nothing unless the fuzzer started this
/// binary as its worker.
#[test]
fn fuzz_worker() {
    if std::env::var_os(worker::ENV).is_some() {
        worker::serve(targets::eval_parser);
    }
}
