//! A host whose behaviour is a real Linux program: the managed-process host.
//!
//! The host owns the process (`onionlab-process`) and its simulated kernel (`onionlab-kernel`).
//! At an event it hands the kernel what happened (a socket's news, a blocked call's time limit),
//! then gives the turn to each thread the kernel says is ready, one at a time, and serves that
//! thread's system calls one after another at the event's simulated time until one blocks (the
//! host then schedules the wake-up at the time the kernel gave) or the thread or the process
//! ends. While a thread runs natively between two calls no simulated time passes; the worker
//! thread that handles the host waits for it, so a process's run is as deterministic as any
//! other host's events, whatever the thread count.
//!
//! The call order of one event:
//!
//! ```text
//! event at `now` ──► kernel.retry / kernel.wake(thread, until)
//!                      │
//!   ┌─► kernel.resume(): next ready thread ──► none: return
//!   │                      │ reply (or start) it
//!   │                      ▼
//!   │   process.wait(): its next request ──► kernel.call(now) ──► Outcome
//!   │                      ▲                                        │ Done: reply, it runs on
//!   │                      └────────────────────────────────────────┘
//!   └──── Blocked: schedule Wake{thread, until} · ThreadExit: reply, wait till it is gone
//!         Exit: reply, reap, record
//! ```
//!
//! The host sits on the network like any other. Its stack is the one every host has, with
//! sockets that wait for the program's reads; the kernel reaches it through `HostNet`, and
//! what happens on its connections reaches the kernel as notes. The bytes the program writes
//! travel beside the TCP model's byte counts: each write is one [`Wire::Bytes`] message whose
//! payload waits in the world's [`Payloads`] until the peer has read it; a read that stops
//! inside a message takes its bytes from there too.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use onionlab_engine::rng::HostRng;
use onionlab_engine::time::SimTime;
use onionlab_engine::{Context, HostId, RunControl};
use onionlab_kernel::{Call, Kernel, Network, Outcome, Resume, SocketNote, ThreadId, MAIN_THREAD};
use onionlab_net::{NetEvent, NetStack, SocketEvent, SocketId};
use onionlab_process::{Exit, ManagedProcess, ProcessSpec, Turn};

use crate::event::Ev;
use crate::wire::Wire;
use crate::world::TorWorld;

/// The first address of the block managed processes' hosts are numbered in (100.64.0.0, the
/// shared address space of RFC 6598, which no real destination uses).
const ADDRESS_BASE: u32 = 0x6440_0000;

/// The IPv4 address a managed process sees for host `host`: 100.64.0.1 for host 0, and on.
pub fn host_address(host: HostId) -> u32 {
    ADDRESS_BASE + 1 + host
}

/// The bytes managed processes have written and their peers not read yet, by key. Shared by
/// every host of a run: a writer puts a payload in before its bytes leave it, a reader takes it
/// out once it has read the bytes, at least one lookahead later, so no two hosts ever reach
/// for one payload in the same round.
#[derive(Default)]
pub struct Payloads {
    map: Mutex<HashMap<u64, Arc<[u8]>>>,
}

impl Payloads {
    fn put(&self, key: u64, bytes: &[u8]) {
        self.map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, bytes.into());
    }

    fn get(&self, key: u64) -> Option<Arc<[u8]>> {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.get(&key).cloned()
    }

    fn remove(&self, key: u64) {
        self.map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&key);
    }
}

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
    /// The hosts file the run writes (the process hosts' names and addresses), which the
    /// program's `/etc/hosts` opens instead of the machine's; none: the machine's.
    pub hosts_file: Option<PathBuf>,
    /// Whether every call that reaches onionlab is written to `syscalls.log` in `dir`.
    pub trace: bool,
    /// The run's control: a run stopped while the process runs natively (Ctrl-C, the memory
    /// limit) kills it rather than wait for its next system call.
    pub control: RunControl,
}

/// A process host's timers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcessTimer {
    /// The process's start time has come.
    Start,
    /// The time limit `until` of the call thread `thread` is blocked in has come.
    Wake {
        /// The thread's slot.
        thread: u32,
        /// The limit, as the kernel gave it (a wake-up for a call that has finished since is
        /// told apart by it).
        until: SimTime,
    },
    /// A `timerfd` expires at `at` while a thread waits on descriptors: blocked calls are
    /// tried again.
    Timers {
        /// The expiry, as the kernel gave it (an event for an expiry that has changed since is
        /// told apart by it).
        at: SimTime,
    },
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

/// The kernel's view of the host's network: its stack, at the current event.
macro_rules! net {
    ($host:ident, $ctx:ident) => {
        HostNet {
            stack: &mut $host.stack,
            ctx: &mut *$ctx,
            world: &$host.world,
            host: $host.host,
            written: &mut $host.payloads_written,
        }
    };
}

/// The host's stack as the kernel's [`Network`], for the span of one call.
struct HostNet<'a, 'c> {
    stack: &'a mut NetStack<Wire>,
    ctx: &'a mut Context<'c, Ev>,
    world: &'a TorWorld,
    host: HostId,
    written: &'a mut u64,
}

impl Network for HostNet<'_, '_> {
    type Socket = SocketId;

    fn address(&self) -> u32 {
        host_address(self.host)
    }

    fn host_of(&self, addr: u32) -> Option<u32> {
        let host = addr.checked_sub(ADDRESS_BASE + 1)?;
        ((host as usize) < self.world.host_names.len()).then_some(host)
    }

    fn address_of(&self, host: u32) -> u32 {
        host_address(host)
    }

    fn listen(&mut self, port: u16) -> Result<(), i64> {
        // EADDRINUSE: the stack listens on the port already.
        self.stack.listen(port).map_err(|_| 98)
    }

    fn connect(&mut self, host: u32, port: u16) -> Result<SocketId, i64> {
        Ok(self.stack.connect(self.ctx, host, port))
    }

    fn send(&mut self, s: SocketId, bytes: &[u8]) -> usize {
        let n = self.stack.write(s, bytes.len() as u64) as usize;
        if n > 0 {
            // Unique in the run: the host in the top bits, its count of writes below.
            let key = (u64::from(self.host) << 40) | *self.written;
            *self.written += 1;
            self.world.payloads.put(key, &bytes[..n]);
            self.stack.mark(s, Wire::Bytes { key, len: n as u32 });
            self.stack.flush(self.ctx, s);
        }
        n
    }

    fn send_space(&self, s: SocketId) -> u64 {
        self.stack.send_space(s)
    }

    fn ports(&self, s: SocketId) -> (u16, u16) {
        self.stack.ports(s).unwrap_or((0, 0))
    }

    fn send_window(&self, s: SocketId) -> Option<onionlab_kernel::SendWindow> {
        self.stack
            .send_window(s)
            .map(|w| onionlab_kernel::SendWindow {
                cwnd: w.cwnd,
                unacked: w.unacked,
                notsent: w.notsent,
                mss: w.mss,
            })
    }

    fn readable(&self, s: SocketId) -> u64 {
        self.stack.readable(s)
    }

    fn recv(&mut self, s: SocketId, out: &mut Vec<u8>, max: usize) -> usize {
        let n = (self.stack.readable(s) as usize).min(max);
        let (mut at, end) = {
            let from = self.stack.read_offset(s);
            (from, from + n as u64)
        };
        let payloads = &self.world.payloads;
        self.stack.peek_messages(s, |message_end, message| {
            if let Wire::Bytes { key, len } = *message {
                let start = message_end - u64::from(len);
                let stop = end.min(message_end);
                if stop > at {
                    let bytes = payloads.get(key).expect("a payload is kept until read");
                    out.extend_from_slice(&bytes[(at - start) as usize..(stop - start) as usize]);
                    at = stop;
                }
            }
            at < end
        });
        debug_assert_eq!(at, end, "every byte a process reads was written by one");
        self.stack.read(self.ctx, s, n as u64);
        n
    }

    fn udp_bind(&mut self, port: u16) -> Result<(), i64> {
        // EADDRINUSE: the stack receives on the port already.
        self.stack.udp_bind(port).map_err(|_| 98)
    }

    fn udp_send(&mut self, src_port: u16, host: u32, port: u16, bytes: &[u8]) {
        let key = (u64::from(self.host) << 40) | *self.written;
        *self.written += 1;
        self.world.payloads.put(key, bytes);
        let len = bytes.len() as u32;
        let message = Wire::Bytes { key, len };
        self.stack
            .udp_send(self.ctx, src_port, host, port, len, message);
    }

    fn shutdown_write(&mut self, s: SocketId) {
        self.stack.close(self.ctx, s);
    }

    fn close(&mut self, s: SocketId) {
        self.stack.close(self.ctx, s);
    }
}

/// A call as the trace gives it.
#[derive(Clone, Copy, Debug, Default)]
struct TracedCall {
    nr: i64,
    args: [i64; 6],
    /// When it was made.
    start: SimTime,
    /// The simulated id of the thread that made it.
    tid: i32,
}

/// A host that runs a real program in simulated time.
pub struct ProcessHost {
    /// The host's network stack: its place on the network.
    pub stack: NetStack<Wire>,
    world: Arc<TorWorld>,
    host: HostId,
    /// Payloads this host has written (the low bits of their keys).
    payloads_written: u64,
    name: String,
    pid: i32,
    plan: ProcessPlan,
    kernel: Kernel<HostRng, SocketId>,
    process: Option<ManagedProcess>,
    /// The bytes a call's reply carries, kept between calls.
    out: Vec<u8>,
    record: ProcessRecord,
    /// The slot of the thread whose call is being served.
    caller: ThreadId,
    /// Each thread's last call, by slot, for the trace: it is written when the call ends,
    /// which for a blocked call is when its thread resumes.
    calls: Vec<TracedCall>,
    /// `syscalls.log`, when the plan asks for a trace.
    trace: Option<std::io::BufWriter<std::fs::File>>,
    /// The timer expiry a [`ProcessTimer::Timers`] event is scheduled for, if one is.
    timers_at: Option<SimTime>,
}

impl ProcessHost {
    /// The host `name` with id `host`, whose kernel draws from `rng`.
    pub fn new(
        mut stack: NetStack<Wire>,
        world: Arc<TorWorld>,
        host: HostId,
        plan: ProcessPlan,
        rng: HostRng,
    ) -> Self {
        stack.set_auto_read_default(false);
        let name = world.name(host).to_string();
        ProcessHost {
            stack,
            world,
            host,
            payloads_written: 0,
            kernel: Kernel::new(&name, simulated_pid(host), EPOCH_UNIX_NS, rng),
            name,
            pid: simulated_pid(host),
            plan,
            process: None,
            out: Vec::new(),
            record: ProcessRecord::default(),
            caller: MAIN_THREAD,
            calls: Vec::new(),
            trace: None,
            timers_at: None,
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
            ProcessTimer::Wake { thread, until } => {
                let Some(p) = self.process.as_mut() else {
                    return;
                };
                p.set_now(self.kernel.wall_clock_ns(now));
                let mut net = net!(self, ctx);
                self.kernel.wake(ThreadId(thread), until, &mut net);
                self.serve(ctx, None);
            }
            ProcessTimer::Timers { at } => {
                if self.timers_at != Some(at) {
                    return;
                }
                self.timers_at = None;
                let Some(p) = self.process.as_mut() else {
                    return;
                };
                p.set_now(self.kernel.wall_clock_ns(now));
                let mut net = net!(self, ctx);
                self.kernel.retry(now, &mut net);
                self.serve(ctx, None);
            }
        }
    }

    /// A packet or a timer of the host's stack: what it changes on the connections goes to
    /// the kernel, and a blocked call that may now go on is tried again.
    pub fn on_net(&mut self, ctx: &mut Context<'_, Ev>, event: NetEvent<Wire>) {
        self.stack.handle(ctx, event);
        if !self.take_notes(ctx) {
            return;
        }
        let Some(p) = self.process.as_mut() else {
            return;
        };
        let now = ctx.now();
        p.set_now(self.kernel.wall_clock_ns(now));
        let mut net = net!(self, ctx);
        self.kernel.retry(now, &mut net);
        self.serve(ctx, None);
    }

    /// Hands the kernel what the stack reports; returns whether anything was reported that
    /// may let a blocked call go on.
    fn take_notes(&mut self, ctx: &mut Context<'_, Ev>) -> bool {
        let mut noted = false;
        while let Some(event) = self.stack.poll_event() {
            let note = match event {
                SocketEvent::Connected(s) => SocketNote::Connected(s),
                SocketEvent::Accepted { socket, port, peer } => {
                    SocketNote::Accepted { socket, port, peer }
                }
                SocketEvent::Readable(s) | SocketEvent::Writable(s) => SocketNote::Ready(s),
                SocketEvent::PeerClosed(s) => SocketNote::PeerClosed(s),
                SocketEvent::Reset(s) | SocketEvent::TimedOut(s) => SocketNote::Reset(s),
                SocketEvent::Message {
                    message: Wire::Bytes { key, .. },
                    ..
                } => {
                    // Read through: the reader copied its bytes before it read them.
                    self.world.payloads.remove(key);
                    continue;
                }
                SocketEvent::Datagram {
                    port,
                    from,
                    from_port,
                    message: Wire::Bytes { key, .. },
                    ..
                } => {
                    // The datagram's one reader takes its payload.
                    if let Some(bytes) = self.world.payloads.get(key) {
                        self.world.payloads.remove(key);
                        self.kernel.datagram(port, from, from_port, &bytes);
                        noted = true;
                    }
                    continue;
                }
                SocketEvent::Closed(_)
                | SocketEvent::Data { .. }
                | SocketEvent::Message { .. }
                | SocketEvent::StreamAccepted { .. }
                | SocketEvent::Datagram { .. } => continue,
            };
            noted = true;
            let mut net = net!(self, ctx);
            self.kernel.note(note, &mut net);
        }
        noted
    }

    fn spawn(&mut self, ctx: &mut Context<'_, Ev>) {
        let now = ctx.now();
        self.record.started = Some(now);
        let started = std::fs::create_dir_all(&self.plan.dir)
            .map_err(|e| {
                format!(
                    "cannot make its directory {}: {}",
                    self.plan.dir.display(),
                    onionlab_data::io_words(&e)
                )
            })
            .and_then(|()| {
                let spec = ProcessSpec {
                    program: &self.plan.program,
                    args: &self.plan.args,
                    env: &self.plan.env,
                    dir: &self.plan.dir,
                    shim: &self.plan.shim,
                    hosts_file: self.plan.hosts_file.as_deref(),
                    pid: self.pid,
                };
                ManagedProcess::spawn(&spec, self.kernel.wall_clock_ns(now), self.plan.stall_limit)
                    .map_err(|e| format!("cannot start {}: {e}", self.plan.program.display()))
            });
        if self.plan.trace && started.is_ok() {
            self.trace = std::fs::File::create(self.plan.dir.join("syscalls.log"))
                .ok()
                .map(std::io::BufWriter::new);
        }
        match started {
            Ok(p) => {
                self.process = Some(p);
                let outcome = self.next_call(ctx);
                self.serve(ctx, Some(outcome));
            }
            Err(e) => self.fail(ctx, None, e),
        }
    }

    /// Hands the kernel the request the running thread is waiting on, then what the stack
    /// reported meanwhile, which may let a blocked call go on. A call that blocks with a time
    /// limit gets its wake-up here, once.
    fn next_call(&mut self, ctx: &mut Context<'_, Ev>) -> Outcome {
        let now = ctx.now();
        let p = self.process.as_ref().expect("a running process");
        let r = p.request();
        let call = Call {
            nr: r.nr,
            args: r.args,
            data: r.data,
        };
        let thread = ThreadId(r.thread);
        debug_assert_eq!(
            self.kernel.running(),
            Some(thread),
            "one thread runs at a time"
        );
        self.caller = thread;
        let i = thread.0 as usize;
        if self.calls.len() <= i {
            self.calls.resize(i + 1, TracedCall::default());
        }
        self.calls[i] = TracedCall {
            nr: r.nr,
            args: r.args,
            start: now,
            tid: self.kernel.tid(thread).unwrap_or(0),
        };
        let mut net = net!(self, ctx);
        let outcome = self.kernel.call(now, &call, &mut self.out, &mut net);
        if self.take_notes(ctx) {
            let mut net = net!(self, ctx);
            self.kernel.retry(now, &mut net);
            self.take_notes(ctx);
        }
        if let Outcome::Blocked { until: Some(until) } = outcome {
            let thread = thread.0;
            ctx.schedule_at(until, ProcessTimer::Wake { thread, until }.into());
        }
        outcome
    }

    /// Writes thread `thread`'s last call and its `result` to the trace, if there is one: its
    /// simulated start and end in nanoseconds, the thread's id, the call's name, arguments and
    /// result.
    fn trace(&mut self, thread: ThreadId, now: SimTime, result: std::fmt::Arguments<'_>) {
        use std::io::Write;
        let Some(w) = self.trace.as_mut() else {
            return;
        };
        let c = self
            .calls
            .get(thread.0 as usize)
            .copied()
            .unwrap_or_default();
        let _ = write!(
            w,
            "{} {now} {} {}(",
            c.start,
            c.tid,
            onionlab_kernel::call_name(c.nr)
        );
        for (i, a) in c.args[..onionlab_kernel::call_args(c.nr, &c.args)]
            .iter()
            .enumerate()
        {
            let _ = write!(w, "{}{a:#x}", if i == 0 { "" } else { ", " });
        }
        let _ = writeln!(w, ") = {result}");
    }

    /// Answers the running thread's call (`outcome`; `None`: no thread runs), then runs the
    /// process's threads, one at a time, until none is ready or the process ends.
    fn serve(&mut self, ctx: &mut Context<'_, Ev>, mut outcome: Option<Outcome>) {
        let now = ctx.now();
        let stop = self.plan.control.clone();
        let stop = move || stop.is_interrupted();
        loop {
            let caller = self.caller;
            match outcome {
                Some(Outcome::Done(ret)) => {
                    self.trace(caller, now, format_args!("{ret}"));
                    let p = self.process.as_mut().expect("a running process");
                    p.set_virtual_fds(self.kernel.virtual_fds());
                    p.reply(caller.0, ret, &self.out);
                }
                // The thread's wake-up, if its call has a time limit, was scheduled when it
                // blocked; the next ready thread runs.
                Some(Outcome::Blocked { .. }) | None => {
                    let Some((thread, resume)) = self.kernel.resume(&mut self.out) else {
                        return self.arm_timers(ctx);
                    };
                    let p = self.process.as_mut().expect("a running process");
                    match resume {
                        Resume::Reply(ret) => {
                            p.set_virtual_fds(self.kernel.virtual_fds());
                            p.reply(thread.0, ret, &self.out);
                            self.trace(thread, now, format_args!("{ret}"));
                        }
                        Resume::Start => p.start_thread(thread.0),
                    }
                }
                Some(Outcome::ThreadExit) => {
                    self.trace(caller, now, format_args!("thread exit"));
                    let p = self.process.as_mut().expect("a running process");
                    // 1: the thread ends alone.
                    p.reply(caller.0, 1, &[]);
                    if let Err(turn) = p.wait_thread_gone(caller.0, &stop) {
                        return self.lost(ctx, turn);
                    }
                    outcome = None;
                    continue;
                }
                Some(Outcome::Exit(code)) => {
                    self.trace(caller, now, format_args!("exit {code}"));
                    let p = self.process.as_mut().expect("a running process");
                    p.reply(caller.0, 0, &[]);
                    let exit = p.finish();
                    self.ended(ctx);
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
            let p = self.process.as_mut().expect("a running process");
            match p.wait_or_stop(&stop) {
                Turn::Request => outcome = Some(self.next_call(ctx)),
                turn => return self.lost(ctx, turn),
            }
        }
    }

    /// No thread runs: if one waits on descriptors and a timer expires before anything else
    /// is scheduled for it, the blocked calls are tried again then.
    fn arm_timers(&mut self, ctx: &mut Context<'_, Ev>) {
        if let Some(at) = self.kernel.next_timer() {
            if self.timers_at.is_none_or(|t| at < t) {
                self.timers_at = Some(at);
                ctx.schedule_at(at, ProcessTimer::Timers { at }.into());
            }
        }
    }

    /// The process ended, stalled or was stopped while a thread ran (`turn`): why goes to the
    /// record and the run's log.
    fn lost(&mut self, ctx: &mut Context<'_, Ev>, turn: Turn) {
        let (exit, why) = match turn {
            Turn::Request => return,
            Turn::Stopped => (
                Exit::Signal(9),
                "killed: the run was stopped while it ran".to_string(),
            ),
            Turn::Exited(exit) => {
                let tail = self
                    .process
                    .as_ref()
                    .map(ManagedProcess::stderr_tail)
                    .unwrap_or_default();
                let what = match exit {
                    Exit::Code(c) => format!("exited with status {c} outside exit_group"),
                    Exit::Signal(s) => format!("killed by signal {s}"),
                };
                let what = if tail.is_empty() {
                    what
                } else {
                    format!("{what}; its stderr ends: {tail}")
                };
                (exit, what)
            }
            Turn::Stalled => (
                Exit::Signal(9),
                format!(
                    "stopped: it ran {} s of wall time without a system call (a busy loop?); \
                     the limit is the process's stall_limit",
                    self.plan.stall_limit.as_secs_f64()
                ),
            ),
        };
        self.fail(ctx, Some(exit), why);
    }

    /// The process is gone: its descriptors close (its connections' peers see them close) and
    /// its trace ends.
    fn ended(&mut self, ctx: &mut Context<'_, Ev>) {
        self.process = None;
        self.trace = None;
        let mut net = net!(self, ctx);
        self.kernel.close_all(&mut net);
        self.take_notes(ctx);
    }

    fn fail(&mut self, ctx: &mut Context<'_, Ev>, exit: Option<Exit>, why: String) {
        let now = ctx.now();
        self.ended(ctx);
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
