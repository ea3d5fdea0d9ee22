//! A host whose behaviour is a real Linux program: the managed-process host.
//!
//! The host owns the process (`onionlab-process`) and its simulated kernel (`onionlab-kernel`).
//! At an event it gives the process its turn and serves its system calls one after another at
//! the event's simulated time, until a call blocks (the host then schedules the wake-up at the
//! time the kernel gave) or the process ends. While the process runs natively between two
//! calls no simulated time passes; the worker thread that handles the host waits for it, so a
//! process's run is as deterministic as any other host's events, whatever the thread count.
//!
//! The call order of one turn:
//!
//! ```text
//! event at `now` ──► kernel.call(now) / kernel.wake(now) ──► Outcome
//!                      ▲                                       │ Done, Native: reply, process runs
//!                      └──── process.wait(): next request ◄────┘ Blocked: schedule Wake, return
//!                                                                Exit: reply, reap, record
//! ```
//!
//! The host sits on the network like any other (its stack gives it its place, links and
//! graph node); the programs' sockets are the next part of the simulated kernel to come.

use std::path::PathBuf;
use std::time::Duration;

use onionlab_engine::rng::HostRng;
use onionlab_engine::time::SimTime;
use onionlab_engine::{Context, RunControl};
use onionlab_kernel::{Call, Kernel, Outcome};
use onionlab_net::NetStack;
use onionlab_process::{Exit, ManagedProcess, ProcessSpec, Turn};

use crate::event::Ev;
use crate::wire::Wire;

/// The Unix time of simulated time 0 as managed processes read it: 2000-01-01 00:00:00 UTC, a
/// fixed date so that a run's outputs do not depend on the day it ran.
pub const EPOCH_UNIX_NS: i64 = 946_684_800_000_000_000;

/// The simulated pid of a managed process on host `host` (so that two processes of a run never
/// share one): 1000 plus the host id.
pub fn simulated_pid(host: onionlab_engine::HostId) -> i32 {
    1000i32.saturating_add(host.min(i32::MAX as u32 - 1000) as i32)
}

/// What a process host runs, from the scenario.
#[derive(Clone, Debug)]
pub struct ProcessPlan {
    /// The program (checked with `onionlab_process::check_binary`).
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Environment variables it gets.
    pub env: Vec<(String, String)>,
    /// When it starts.
    pub start: SimTime,
    /// Wall time it may run without a system call before it is stopped.
    pub stall_limit: Duration,
    /// Its working directory (under the run's output directory), made by the host before it
    /// starts the process.
    pub dir: PathBuf,
    /// The shim library, written once per run (`onionlab_process::install_shim`).
    pub shim: PathBuf,
    /// The run's control: a run stopped while the process runs natively (Ctrl-C, the memory
    /// limit) kills it rather than wait for its next system call.
    pub control: RunControl,
}

/// A process host's timers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcessTimer {
    /// The process's start time has come.
    Start,
    /// The call the process is blocked in may go on.
    Wake,
}

impl From<ProcessTimer> for Ev {
    fn from(timer: ProcessTimer) -> Self {
        Ev::Process(timer)
    }
}

/// How a managed process stands at the end of a run, for `run.json`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProcessRecord {
    /// When it started (simulated); `None` if its start time was not reached.
    pub started: Option<SimTime>,
    /// When it ended (simulated); `None` if it ran to the end of the run.
    pub ended: Option<SimTime>,
    /// Its exit status, if it exited.
    pub exit_code: Option<i32>,
    /// The signal that ended it, if one did (a crash, or onionlab's kill after a stall).
    pub signal: Option<i32>,
    /// Why it failed, in a sentence: it could not start, it crashed, it stalled.
    pub failure: Option<String>,
    /// System calls the simulated kernel handled.
    pub calls: u64,
    /// Calls answered `ENOSYS`, by name, with how often.
    pub unsupported: Vec<(String, u64)>,
}

/// A host that runs a real program in simulated time.
pub struct ProcessHost {
    /// The host's network stack: its place on the network.
    pub stack: NetStack<Wire>,
    name: String,
    pid: i32,
    plan: ProcessPlan,
    kernel: Kernel<HostRng>,
    process: Option<ManagedProcess>,
    /// The bytes a call's reply carries, kept between calls.
    out: Vec<u8>,
    record: ProcessRecord,
}

impl ProcessHost {
    /// The host `name` with id `host`, whose kernel draws from `rng`.
    pub fn new(
        stack: NetStack<Wire>,
        name: &str,
        host: onionlab_engine::HostId,
        plan: ProcessPlan,
        rng: HostRng,
    ) -> Self {
        ProcessHost {
            stack,
            name: name.to_string(),
            pid: simulated_pid(host),
            plan,
            kernel: Kernel::new(name, EPOCH_UNIX_NS, rng),
            process: None,
            out: Vec::new(),
            record: ProcessRecord::default(),
        }
    }

    /// The program the host runs.
    pub fn program(&self) -> &std::path::Path {
        &self.plan.program
    }

    /// What the process has done so far (its unsupported calls up to date).
    pub fn record(&self) -> ProcessRecord {
        let mut r = self.record.clone();
        r.calls = self.kernel.calls();
        r.unsupported = self.kernel.unsupported();
        r
    }

    /// The host's start: the process starts at its start time.
    pub fn start(&mut self, ctx: &mut Context<'_, Ev>) {
        ctx.schedule_at(self.plan.start.max(ctx.now()), ProcessTimer::Start.into());
    }

    /// One of the host's timers.
    pub fn on_timer(&mut self, ctx: &mut Context<'_, Ev>, timer: ProcessTimer) {
        let now = ctx.now();
        match timer {
            ProcessTimer::Start => self.spawn(ctx),
            ProcessTimer::Wake => {
                let Some(p) = self.process.as_mut() else {
                    return;
                };
                p.set_now(self.kernel.wall_clock_ns(now));
                let outcome = self.kernel.wake(now, &mut self.out);
                self.serve(ctx, outcome);
            }
        }
    }

    fn spawn(&mut self, ctx: &mut Context<'_, Ev>) {
        let now = ctx.now();
        self.record.started = Some(now);
        let started = std::fs::create_dir_all(&self.plan.dir)
            .map_err(|e| format!("cannot make its directory {}: {e}", self.plan.dir.display()))
            .and_then(|()| {
                let spec = ProcessSpec {
                    program: &self.plan.program,
                    args: &self.plan.args,
                    env: &self.plan.env,
                    dir: &self.plan.dir,
                    shim: &self.plan.shim,
                    pid: self.pid,
                };
                ManagedProcess::spawn(&spec, self.kernel.wall_clock_ns(now), self.plan.stall_limit)
                    .map_err(|e| format!("cannot start {}: {e}", self.plan.program.display()))
            });
        match started {
            Ok(p) => {
                self.process = Some(p);
                let outcome = self.next_call(now);
                self.serve(ctx, outcome);
            }
            Err(e) => self.fail(now, None, e),
        }
    }

    /// Hands the kernel the request the process is waiting on.
    fn next_call(&mut self, now: SimTime) -> Outcome {
        let p = self.process.as_ref().expect("a running process");
        let r = p.request();
        let call = Call {
            nr: r.nr,
            args: r.args,
            data: r.data,
        };
        self.kernel.call(now, &call, &mut self.out)
    }

    /// Answers calls until one blocks or the process ends.
    fn serve(&mut self, ctx: &mut Context<'_, Ev>, mut outcome: Outcome) {
        let now = ctx.now();
        loop {
            let p = self.process.as_mut().expect("a running process");
            match outcome {
                Outcome::Done(ret) => {
                    p.set_virtual_fds(self.kernel.virtual_fds());
                    p.reply(ret, &self.out);
                }
                Outcome::Native => p.reply_native(),
                Outcome::Blocked { until } => {
                    ctx.schedule_at(until, ProcessTimer::Wake.into());
                    return;
                }
                Outcome::Exit(code) => {
                    p.reply(0, &[]);
                    let exit = p.finish();
                    self.process = None;
                    self.record.ended = Some(now);
                    match exit {
                        Exit::Code(c) => self.record.exit_code = Some(c),
                        Exit::Signal(s) => {
                            self.record.signal = Some(s);
                            self.record.failure =
                                Some(format!("signal {s} after it asked to exit with {code}"));
                        }
                    }
                    return;
                }
            }
            let control = &self.plan.control;
            match p.wait_or_stop(&|| control.is_interrupted()) {
                Turn::Request => outcome = self.next_call(now),
                Turn::Stopped => {
                    return self.fail(
                        now,
                        Some(Exit::Signal(9)),
                        "killed: the run was stopped while it ran".to_string(),
                    )
                }
                Turn::Exited(exit) => {
                    let tail = p.stderr_tail();
                    let what = match exit {
                        Exit::Code(c) => format!("exited with status {c} outside exit_group"),
                        Exit::Signal(s) => format!("killed by signal {s}"),
                    };
                    let what = if tail.is_empty() {
                        what
                    } else {
                        format!("{what}; its stderr ends: {tail}")
                    };
                    return self.fail(now, Some(exit), what);
                }
                Turn::Stalled => {
                    let limit = self.plan.stall_limit.as_secs_f64();
                    return self.fail(
                        now,
                        Some(Exit::Signal(9)),
                        format!(
                            "stopped: it ran {limit} s of wall time without a system call \
                             (a busy loop?); the limit is the process's stall_limit"
                        ),
                    );
                }
            }
        }
    }

    fn fail(&mut self, now: SimTime, exit: Option<Exit>, why: String) {
        self.process = None;
        self.record.ended = Some(now);
        match exit {
            Some(Exit::Code(c)) => self.record.exit_code = Some(c),
            Some(Exit::Signal(s)) => self.record.signal = Some(s),
            None => {}
        }
        eprintln!(
            "onionlab: process {} at {:.6} s: {why}",
            self.name,
            now as f64 / 1e9
        );
        self.record.failure = Some(why);
    }
}
