//! The parser targets run in a worker process: this test binary started again with
//! `ONIONLAB_FUZZ_WORKER` set, running only the `fuzz_worker` test, which reads inputs on
//! stdin and answers on stdout. A stack overflow, an abort, the memory limit or a hang then
//! ends the worker, not the fuzzer: the parent knows the input it sent, records the failure
//! and starts a new worker.
//!
//! Frames: a request is `u32 target length, target, u32 input length, input`; an answer is
//! `0, u32 length, label` or `1, then kind, signature, detail as u32 length + bytes`. The worker
//! prints [`READY`] before its first answer, so the test harness's own output is skipped.

use std::fs::{self, File};
use std::io::{BufReader, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Mutex;
use std::time::Duration;

use crate::harness::{catch, Failure, Outcome};

const READY: &[u8] = b"\nONIONLAB-FUZZ-WORKER-READY\n";
pub(crate) const ENV: &str = "ONIONLAB_FUZZ_WORKER";
/// A case taking longer than this is a hang.
pub(crate) const HANG: Duration = Duration::from_secs(30);
/// Address space of the worker.
pub(crate) const MEMORY: u64 = 4 << 30;

type Answer = Result<String, Failure>;

struct Process {
    child: Child,
    stdin: ChildStdin,
    answers: Receiver<Answer>,
}

/// The parent's handle on the worker, started on first use and after every crash.
pub(crate) struct Worker {
    process: Mutex<Option<Process>>,
    /// Holds the worker's stderr (read when it dies) and is its working directory.
    dir: PathBuf,
    /// Passed to the worker: where the scenario target's side files are.
    parse_dir: PathBuf,
    pub restarts: Mutex<u64>,
}

impl Worker {
    pub(crate) fn new(dir: PathBuf, parse_dir: PathBuf) -> Self {
        Worker {
            process: Mutex::new(None),
            dir,
            parse_dir,
            restarts: Mutex::new(0),
        }
    }

    fn start(&self) -> Process {
        let _ = fs::create_dir_all(&self.dir);
        let stderr = File::create(self.dir.join("stderr")).expect("worker stderr file");
        let mut cmd = Command::new(std::env::current_exe().expect("the test binary"));
        cmd.args([
            "--exact",
            "fuzz_worker",
            "--nocapture",
            "--test-threads=1",
            "-q",
        ])
        .env(ENV, "1")
        .env("ONIONLAB_FUZZ_PARSE_DIR", &self.parse_dir)
        .current_dir(&self.dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr);
        // SAFETY: setrlimit is async-signal-safe and touches nothing of the parent's.
        unsafe {
            cmd.pre_exec(|| {
                let limit = libc::rlimit {
                    rlim_cur: MEMORY as libc::rlim_t,
                    rlim_max: MEMORY as libc::rlim_t,
                };
                libc::setrlimit(libc::RLIMIT_AS, &limit);
                Ok(())
            });
        }
        let mut child = cmd.spawn().expect("the fuzz worker starts");
        let stdin = child.stdin.take().expect("worker stdin");
        let stdout = child.stdout.take().expect("worker stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            // Skip the test harness's output up to the marker.
            let mut seen: Vec<u8> = Vec::new();
            let mut byte = [0u8; 1];
            while !seen.ends_with(READY) {
                if r.read_exact(&mut byte).is_err() {
                    return;
                }
                seen.push(byte[0]);
                if seen.len() > 1 << 20 {
                    seen.drain(..1 << 19);
                }
            }
            while let Some(answer) = read_answer(&mut r) {
                if tx.send(answer).is_err() {
                    return;
                }
            }
        });
        Process {
            child,
            stdin,
            answers: rx,
        }
    }

    /// Evaluates `input` for `target` in the worker.
    pub(crate) fn eval(&self, target: &str, input: &[u8]) -> Outcome {
        let mut guard = self.process.lock().unwrap_or_else(|e| e.into_inner());
        if guard.is_none() {
            *guard = Some(self.start());
        }
        let p = guard.as_mut().expect("worker started");
        let mut request = Vec::with_capacity(input.len() + target.len() + 8);
        put(&mut request, target.as_bytes());
        put(&mut request, input);
        let sent = p.stdin.write_all(&request).and_then(|_| p.stdin.flush());
        let answer = match sent {
            Ok(()) => p.answers.recv_timeout(HANG),
            Err(_) => Err(RecvTimeoutError::Disconnected),
        };
        match answer {
            Ok(Ok(label)) => Ok(leak_label(label)),
            Ok(Err(f)) => Err(f),
            Err(e) => {
                // The worker hung or died: this input is the cause.
                let mut p = guard.take().expect("worker present");
                let hung = e == RecvTimeoutError::Timeout;
                if hung {
                    let _ = p.child.kill();
                }
                let status = p.child.wait().ok();
                *self.restarts.lock().unwrap_or_else(|e| e.into_inner()) += 1;
                let stderr = fs::read(self.dir.join("stderr")).unwrap_or_default();
                let stderr = String::from_utf8_lossy(&stderr[stderr.len().saturating_sub(8192)..])
                    .into_owned();
                let kind = if hung {
                    "hang".to_string()
                } else if stderr.contains("has overflowed its stack") {
                    "stack-overflow".to_string()
                } else if stderr.contains("memory allocation of") {
                    "memory-limit".to_string()
                } else if let Some(sig) = status.and_then(|s| s.signal()) {
                    format!("signal-{sig}")
                } else {
                    format!("exit-{}", status.and_then(|s| s.code()).unwrap_or(-1))
                };
                let detail = format!(
                    "the worker {} on this input ({status:?}); its stderr:\n{stderr}",
                    if hung {
                        format!("ran for more than {} s", HANG.as_secs())
                    } else {
                        "died".to_string()
                    }
                );
                Err(Failure::new(kind.clone(), kind, detail))
            }
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let mut guard = self.process.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(mut p) = guard.take() {
            drop(p.stdin);
            let _ = p.child.wait();
        }
    }
}

/// Labels are counted by `&'static str`; the set the worker sends is small, so leaking each
/// distinct one once is fine.
fn leak_label(label: String) -> &'static str {
    static LABELS: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
    let mut labels = LABELS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(l) = labels.iter().find(|l| **l == label) {
        return l;
    }
    let l: &'static str = Box::leak(label.into_boxed_str());
    labels.push(l);
    l
}

fn put(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

fn get(r: &mut impl Read) -> Option<Vec<u8>> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len).ok()?;
    let mut buf = vec![0u8; u32::from_le_bytes(len) as usize];
    r.read_exact(&mut buf).ok()?;
    Some(buf)
}

fn get_string(r: &mut impl Read) -> Option<String> {
    get(r).map(|b| String::from_utf8_lossy(&b).into_owned())
}

fn read_answer(r: &mut impl Read) -> Option<Answer> {
    let mut tag = [0u8; 1];
    r.read_exact(&mut tag).ok()?;
    if tag[0] == 0 {
        return Some(Ok(get_string(r)?));
    }
    let kind = get_string(r)?;
    let signature = get_string(r)?;
    let detail = get_string(r)?;
    Some(Err(Failure::new(kind, signature, detail)))
}

/// The worker's side: answers requests until stdin closes. `eval` maps a target name and an
/// input to an outcome.
pub(crate) fn serve(eval: impl Fn(&str, &[u8], &Path) -> Outcome + Send + 'static) {
    let parse_dir = PathBuf::from(std::env::var_os("ONIONLAB_FUZZ_PARSE_DIR").unwrap_or_default());
    // The parsers run on a thread with the main thread's usual 8 MiB of stack, as in the
    // `onionlab` binary, not the test harness's 2 MiB.
    let worker = std::thread::Builder::new()
        .stack_size(8 << 20)
        .spawn(move || {
            let stdin = std::io::stdin();
            let mut input = stdin.lock();
            let stdout = std::io::stdout();
            let mut out = stdout.lock();
            let _ = out.write_all(READY);
            let _ = out.flush();
            loop {
                let Some(target) = get_string(&mut input) else {
                    return;
                };
                let Some(bytes) = get(&mut input) else {
                    return;
                };
                let outcome = catch(|| eval(&target, &bytes, &parse_dir));
                let mut answer = Vec::new();
                match outcome {
                    Ok(label) => {
                        answer.push(0);
                        put(&mut answer, label.as_bytes());
                    }
                    Err(f) => {
                        answer.push(1);
                        put(&mut answer, f.kind.as_bytes());
                        put(&mut answer, f.signature.as_bytes());
                        put(&mut answer, f.detail.as_bytes());
                    }
                }
                if out.write_all(&answer).and_then(|_| out.flush()).is_err() {
                    return;
                }
            }
        })
        .expect("worker thread");
    let _ = worker.join();
}
