//! Running targets: case generation from a seeded proptest runner, panic capture, shrinking,
//! and the crash directory.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::fs;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

use proptest::strategy::{BoxedStrategy, Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

/// What a case made of its input: bytes for the main file plus side files (name, bytes).
#[derive(Clone, Debug, Default)]
pub(crate) struct Rendered {
    pub main: Vec<u8>,
    pub side: Vec<(String, Vec<u8>)>,
}

/// A bug found by a case.
#[derive(Clone, Debug)]
pub(crate) struct Failure {
    /// `panic`, `check-exit-1`, `run-timeout`, `bad-message`, ….
    pub kind: String,
    /// What makes two failures the same bug (the panic location, the leaked wording, …).
    pub signature: String,
    /// Everything worth reading: the message, the output.
    pub detail: String,
}

impl Failure {
    pub(crate) fn new(
        kind: impl Into<String>,
        signature: impl Into<String>,
        detail: impl Into<String>,
    ) -> Self {
        Failure {
            kind: kind.into(),
            signature: signature.into(),
            detail: detail.into(),
        }
    }

    fn same_bug(&self, other: &Failure) -> bool {
        self.kind == other.kind && self.signature == other.signature
    }
}

/// A case's result: a label counted in the statistics (`accepted`, `refused`, `ran`, …), or a
/// failure.
pub(crate) type Outcome = Result<&'static str, Failure>;

pub(crate) trait Target: Sync {
    type Case: Clone + Debug;
    fn name(&self) -> &'static str;
    /// Extension of the main file in the crash directory.
    fn ext(&self) -> &'static str;
    fn strategy(&self) -> BoxedStrategy<Self::Case>;
    /// The unmutated seeds, run first.
    fn seed_cases(&self) -> Vec<Self::Case>;
    fn render(&self, case: &Self::Case) -> Rendered;
    fn eval(&self, input: &Rendered) -> Outcome;
    /// At most this many shrink steps, and this much time, per failure.
    fn shrink_budget(&self) -> (usize, Duration);
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Stats {
    pub cases: u64,
    pub seeds: u64,
    pub failures: u64,
    pub time: Duration,
    pub labels: BTreeMap<&'static str, u64>,
}

/// Where failing inputs go, one folder per distinct bug.
pub(crate) struct CrashSink {
    pub dir: PathBuf,
    pub seed: u64,
    /// Signature → (folder, times seen).
    found: Mutex<BTreeMap<String, (PathBuf, u64)>>,
}

impl CrashSink {
    pub(crate) fn new(dir: PathBuf, seed: u64) -> Self {
        CrashSink {
            dir,
            seed,
            found: Mutex::new(BTreeMap::new()),
        }
    }

    /// Records a failure; writes its input (and the shrunk input, if any) the first time the
    /// bug is seen.
    fn record(
        &self,
        target: &str,
        ext: &str,
        case_no: u64,
        failure: &Failure,
        input: &Rendered,
        shrunk: Option<(&Rendered, &Failure, usize)>,
    ) {
        let key = format!("{target} {} {}", failure.kind, failure.signature);
        let mut found = self.found.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(entry) = found.get_mut(&key) {
            entry.1 += 1;
            return;
        }
        let hash = fnv(key.as_bytes());
        let name: String = format!("{target}-{}-{hash:08x}", failure.kind)
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let dir = self.dir.join(name);
        let _ = fs::remove_dir_all(&dir);
        write_case(&dir, ext, input);
        let mut info = format!(
            "target: {target}\nkind: {}\nsignature: {}\nseed: ONIONLAB_FUZZ_SEED={} (case {case_no})\ninput: input.{ext}\n\n{}\n",
            failure.kind, failure.signature, self.seed, failure.detail
        );
        if let Some((small, small_failure, steps)) = shrunk {
            write_case(&dir.join("shrunk"), ext, small);
            info.push_str(&format!(
                "\nshrunk ({steps} steps) to shrunk/input.{ext}:\n{}\n",
                small_failure.detail
            ));
        }
        let _ = fs::write(dir.join("failure.txt"), info);
        found.insert(key, (dir, 1));
    }

    /// Whether this bug has been recorded already (then it is not shrunk again).
    fn known(&self, target: &str, failure: &Failure) -> bool {
        let key = format!("{target} {} {}", failure.kind, failure.signature);
        let found = self.found.lock().unwrap_or_else(|e| e.into_inner());
        found.contains_key(&key)
    }

    /// `(folder, times seen)` of every distinct bug.
    pub(crate) fn found(&self) -> Vec<(PathBuf, u64)> {
        let found = self.found.lock().unwrap_or_else(|e| e.into_inner());
        found.values().cloned().collect()
    }
}

fn write_case(dir: &Path, ext: &str, input: &Rendered) {
    let _ = fs::create_dir_all(dir);
    let _ = fs::write(dir.join(format!("input.{ext}")), &input.main);
    for (name, bytes) in &input.side {
        let _ = fs::write(dir.join(name), bytes);
    }
}

pub(crate) fn fnv(bytes: &[u8]) -> u32 {
    let mut h: u64 = 0xcbf29ce484222325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100000001b3);
    }
    (h ^ (h >> 32)) as u32
}

/// One target with its own random stream, run a step at a time.
pub(crate) struct Run<'a, T: Target> {
    target: &'a T,
    runner: TestRunner,
    strategy: BoxedStrategy<T::Case>,
    seeds: Vec<T::Case>,
    next_seed: usize,
    pub stats: Stats,
    sink: &'a CrashSink,
}

impl<'a, T: Target> Run<'a, T> {
    pub(crate) fn new(target: &'a T, seed: u64, sink: &'a CrashSink) -> Self {
        let mut key = [0u8; 32];
        key[..8].copy_from_slice(&seed.to_le_bytes());
        key[8..12].copy_from_slice(&fnv(target.name().as_bytes()).to_le_bytes());
        let config = Config {
            failure_persistence: None,
            ..Config::default()
        };
        let runner =
            TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &key));
        Run {
            target,
            runner,
            strategy: target.strategy(),
            seeds: target.seed_cases(),
            next_seed: 0,
            stats: Stats::default(),
            sink,
        }
    }

    /// Runs one case: the next unmutated seed while there are any, else a new mutation.
    pub(crate) fn step(&mut self) {
        let start = Instant::now();
        let case_no = self.stats.cases;
        self.stats.cases += 1;
        if self.next_seed < self.seeds.len() {
            let case = self.seeds[self.next_seed].clone();
            self.next_seed += 1;
            self.stats.seeds += 1;
            let input = self.target.render(&case);
            match self.guarded(&input) {
                Ok(label) => *self.stats.labels.entry(label).or_default() += 1,
                Err(f) => {
                    self.stats.failures += 1;
                    self.sink.record(
                        self.target.name(),
                        self.target.ext(),
                        case_no,
                        &f,
                        &input,
                        None,
                    );
                }
            }
        } else {
            let Ok(mut tree) = self.strategy.new_tree(&mut self.runner) else {
                return;
            };
            let input = self.target.render(&tree.current());
            match self.guarded(&input) {
                Ok(label) => *self.stats.labels.entry(label).or_default() += 1,
                Err(f) => {
                    self.stats.failures += 1;
                    // Each bug is shrunk once; hangs are not (every step would take the
                    // whole time limit).
                    let slow = f.kind.ends_with("timeout") || f.kind == "hang";
                    let shrunk = if slow || self.sink.known(self.target.name(), &f) {
                        None
                    } else {
                        self.shrink(&mut tree, &f)
                    };
                    let shrunk_ref = shrunk.as_ref().map(|(r, f, n)| (r, f, *n));
                    self.sink.record(
                        self.target.name(),
                        self.target.ext(),
                        case_no,
                        &f,
                        &input,
                        shrunk_ref,
                    );
                }
            }
        }
        self.stats.time += start.elapsed();
    }

    /// Simplifies a failing case while it keeps failing the same way.
    fn shrink(
        &mut self,
        tree: &mut BoxedValueTree<T::Case>,
        original: &Failure,
    ) -> Option<(Rendered, Failure, usize)> {
        let (max_steps, max_time) = self.target.shrink_budget();
        let start = Instant::now();
        let mut best: Option<(Rendered, Failure)> = None;
        let mut steps = 0;
        if !tree.simplify() {
            return None;
        }
        while steps < max_steps && start.elapsed() < max_time {
            steps += 1;
            let input = self.target.render(&tree.current());
            match self.guarded(&input) {
                Err(f) if f.same_bug(original) => {
                    best = Some((input, f));
                    if !tree.simplify() {
                        break;
                    }
                }
                _ => {
                    if !tree.complicate() {
                        break;
                    }
                }
            }
        }
        best.map(|(r, f)| (r, f, steps))
    }

    fn guarded(&self, input: &Rendered) -> Outcome {
        catch(|| self.target.eval(input))
    }
}

type BoxedValueTree<V> = Box<dyn ValueTree<Value = V>>;

/// Something [`Run`] of any target type can be driven through.
pub(crate) trait Drive {
    fn name(&self) -> &'static str;
    fn step(&mut self);
    fn stats(&self) -> &Stats;
    /// Whether unmutated seeds are still to run.
    fn seeds_left(&self) -> bool;
}

impl<T: Target> Drive for Run<'_, T> {
    fn name(&self) -> &'static str {
        self.target.name()
    }
    fn step(&mut self) {
        Run::step(self)
    }
    fn stats(&self) -> &Stats {
        &self.stats
    }
    fn seeds_left(&self) -> bool {
        self.next_seed < self.seeds.len()
    }
}

// ---- panics -------------------------------------------------------------------------------

thread_local! {
    static CAPTURING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    static LAST_PANIC: std::cell::RefCell<Option<(String, String)>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f`, turning a panic into a failure named by its location.
pub(crate) fn catch(f: impl FnOnce() -> Outcome) -> Outcome {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if CAPTURING.with(|c| c.get()) {
                let location = info
                    .location()
                    .map(|l| format!("{}:{}", l.file(), l.line()))
                    .unwrap_or_default();
                let payload = info
                    .payload()
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| info.payload().downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                LAST_PANIC.with(|p| *p.borrow_mut() = Some((location, payload)));
            } else {
                previous(info);
            }
        }));
    });
    CAPTURING.with(|c| c.set(true));
    let result = panic::catch_unwind(AssertUnwindSafe(f));
    CAPTURING.with(|c| c.set(false));
    match result {
        Ok(outcome) => outcome,
        Err(_) => {
            let (location, message) = LAST_PANIC
                .with(|p| p.borrow_mut().take())
                .unwrap_or_default();
            Err(Failure::new(
                "panic",
                location.clone(),
                format!("panicked at {location}: {message}"),
            ))
        }
    }
}

// ---- running several targets ------------------------------------------------------------

/// How long to fuzz.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Budget {
    /// Every seed, then this many mutated cases, per target.
    Cases(u64),
    /// Until this instant.
    Until(Instant),
}

/// Runs targets in turn (batches of `batch` cases) until each has its cases or time is up.
pub(crate) fn drive(runs: &mut [Box<dyn Drive + '_>], budget: Budget, batch: u64) {
    loop {
        let mut busy = false;
        for run in runs.iter_mut() {
            for _ in 0..batch {
                let more = match budget {
                    Budget::Cases(n) => {
                        run.seeds_left() || run.stats().cases - run.stats().seeds < n
                    }
                    Budget::Until(t) => Instant::now() < t,
                };
                if !more {
                    break;
                }
                busy = true;
                run.step();
            }
        }
        if !busy {
            return;
        }
    }
}
