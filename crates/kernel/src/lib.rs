//! The simulated kernel of a managed process: what its system calls do, in simulated time.
//!
//! Sans-IO, like the TCP model: the process host hands it one call at a time, the running
//! thread's, with the call's simulated time and the host's network ([`Kernel::call`]) and gets
//! back an [`Outcome`]: the call's result now, "blocked" (until a time, until something
//! happens on a socket, a wake-up, or whichever comes first), or the thread's or the process's
//! exit. A blocked call is tried again when the host tells the kernel what happened on its
//! sockets ([`Kernel::note`], then [`Kernel::retry`]), when another thread's call may have
//! freed it, or when its time comes ([`Kernel::wake`]); its thread is then ready, and
//! [`Kernel::resume`] gives the ready threads their turns one after another. The kernel never
//! touches the process, the clock or the stack itself, so the same calls at the same times
//! give the same results whatever worker thread runs the host.
//!
//! What it serves: sleeping (`nanosleep`, `clock_nanosleep`), the host's random bytes
//! (`getrandom`, and `/dev/urandom` and `/dev/random`, which the shim opens as descriptors
//! onionlab serves), the host's name (`uname`), TCP sockets over the host's network stack
//! (`socket`, `bind`, `listen`, `accept`, `accept4`, `connect`, `read`, `write`, `send`,
//! `sendto`, `recv`, `recvfrom`, `shutdown`, `close`, `getsockname`, `getpeername`,
//! `setsockopt`, `getsockopt(SO_ERROR)`, `fcntl` for `O_NONBLOCK`), UDP sockets (the `udp`
//! module), pipes and socket pairs (`pipes`), `poll`, `epoll` and `eventfd` (the `events`
//! module, with `ppoll`, `select` and `pselect6` in poll's form), `timerfd` (`timers`),
//! threads, `futex` and `sched_yield` (`threads`, which also decides which thread runs: one
//! at a time), and the exits of threads and of the process. The time and the process's ids
//! never reach it: the shim answers them from the shared page. Every other call is answered
//! `ENOSYS` and counted by name ([`Kernel::unsupported`]), so a run says exactly what a
//! program needed that onionlab does not have.

use onionlab_engine::time::SimTime;
use rand::Rng;

mod events;
mod names;
mod net;
mod pipes;
mod sockets;
mod threads;
mod timers;
mod udp;

use events::{Epoll, EventFd};
use net::SocketFile;
pub use net::{Network, Offline, SendWindow, SocketNote};
pub use threads::{Resume, ThreadId, MAIN_THREAD, MAX_THREADS};
use udp::UdpFile;

/// The highest descriptor number onionlab may serve, plus one (the shim's table).
pub const MAX_FDS: usize = 1024;
/// The most bytes one call may carry each way (the shared page's data area).
pub const DATA_BYTES: usize = 65536;
/// The memory `sysinfo` says the simulated machine has: 16 GiB, whatever the real machine's,
/// so that a program that sizes itself by it (tor's `MaxMemInQueues`) does the same anywhere.
pub const MEMORY_BYTES: u64 = 16 << 30;

/// A request that is not a system call: the shim is in place (see `onionlab-process`).
pub const REQ_START: i64 = -1;
/// A request that is not a system call: open a path onionlab serves on placeholder
/// descriptor `args[0]`; the data is the path with its NUL.
pub const REQ_OPEN_VIRTUAL: i64 = -2;
/// A request that is not a system call: the shim could not make the real thread for the slot
/// `args[0]` that `clone` gave.
pub const REQ_THREAD_FAILED: i64 = -3;

pub(crate) const ENOENT: i64 = 2;
pub(crate) const EAGAIN: i64 = 11;
pub(crate) const EBADF: i64 = 9;
pub(crate) const EFAULT: i64 = 14;
pub(crate) const EINVAL: i64 = 22;
pub(crate) const EMFILE: i64 = 24;
pub(crate) const EPIPE: i64 = 32;
pub(crate) const ENOSYS: i64 = 38;
pub(crate) const ENOTSOCK: i64 = 88;
pub(crate) const EDESTADDRREQ: i64 = 89;
pub(crate) const EPROTONOSUPPORT: i64 = 93;
pub(crate) const EOPNOTSUPP: i64 = 95;
pub(crate) const EAFNOSUPPORT: i64 = 97;
pub(crate) const EADDRINUSE: i64 = 98;
pub(crate) const ENETUNREACH: i64 = 101;
pub(crate) const ECONNRESET: i64 = 104;
pub(crate) const EISCONN: i64 = 106;
pub(crate) const ENOTCONN: i64 = 107;
pub(crate) const ECONNREFUSED: i64 = 111;
pub(crate) const EALREADY: i64 = 114;
pub(crate) const EINPROGRESS: i64 = 115;

// System call numbers (x86-64) the kernel implements.
pub(crate) const SYS_READ: i64 = 0;
pub(crate) const SYS_WRITE: i64 = 1;
pub(crate) const SYS_CLOSE: i64 = 3;
pub(crate) const SYS_POLL: i64 = 7;
pub(crate) const SYS_IOCTL: i64 = 16;
pub(crate) const SYS_SELECT: i64 = 23;
pub(crate) const SYS_SCHED_YIELD: i64 = 24;
pub(crate) const SYS_PIPE: i64 = 22;
pub(crate) const SYS_NANOSLEEP: i64 = 35;
pub(crate) const SYS_SOCKET: i64 = 41;
pub(crate) const SYS_CONNECT: i64 = 42;
pub(crate) const SYS_ACCEPT: i64 = 43;
pub(crate) const SYS_SENDTO: i64 = 44;
pub(crate) const SYS_RECVFROM: i64 = 45;
pub(crate) const SYS_SHUTDOWN: i64 = 48;
pub(crate) const SYS_BIND: i64 = 49;
pub(crate) const SYS_LISTEN: i64 = 50;
pub(crate) const SYS_GETSOCKNAME: i64 = 51;
pub(crate) const SYS_GETPEERNAME: i64 = 52;
pub(crate) const SYS_SOCKETPAIR: i64 = 53;
pub(crate) const SYS_SETSOCKOPT: i64 = 54;
pub(crate) const SYS_GETSOCKOPT: i64 = 55;
pub(crate) const SYS_CLONE: i64 = 56;
pub(crate) const SYS_EXIT: i64 = 60;
pub(crate) const SYS_FUTEX: i64 = 202;
pub(crate) const SYS_EPOLL_CREATE: i64 = 213;
pub(crate) const SYS_EPOLL_WAIT: i64 = 232;
pub(crate) const SYS_EPOLL_CTL: i64 = 233;
pub(crate) const SYS_PSELECT6: i64 = 270;
pub(crate) const SYS_PPOLL: i64 = 271;
pub(crate) const SYS_EPOLL_PWAIT: i64 = 281;
pub(crate) const SYS_TIMERFD_CREATE: i64 = 283;
pub(crate) const SYS_TIMERFD_SETTIME: i64 = 286;
pub(crate) const SYS_TIMERFD_GETTIME: i64 = 287;
pub(crate) const SYS_EVENTFD: i64 = 284;
pub(crate) const SYS_EVENTFD2: i64 = 290;
pub(crate) const SYS_EPOLL_CREATE1: i64 = 291;
pub(crate) const SYS_PIPE2: i64 = 293;
pub(crate) const SYS_UNAME: i64 = 63;
pub(crate) const SYS_SYSINFO: i64 = 99;
pub(crate) const SYS_FCNTL: i64 = 72;
pub(crate) const SYS_CLOCK_NANOSLEEP: i64 = 230;
pub(crate) const SYS_EXIT_GROUP: i64 = 231;
pub(crate) const SYS_ACCEPT4: i64 = 288;
pub(crate) const SYS_GETRANDOM: i64 = 318;
pub(crate) const SYS_CLONE3: i64 = 435;

/// The name of call `nr` as traces and counts give it: the system call's, `start` and
/// `open_virtual` for the shim's own requests, `unknown` for a number no call has.
pub fn call_name(nr: i64) -> &'static str {
    match nr {
        REQ_START => "start",
        REQ_OPEN_VIRTUAL => "open_virtual",
        REQ_THREAD_FAILED => "thread_failed",
        _ => usize::try_from(nr)
            .ok()
            .and_then(|n| names::NAMES.get(n))
            .copied()
            .filter(|name| !name.is_empty())
            .unwrap_or("unknown"),
    }
}

/// How many of call `nr`'s six argument registers mean something, as traces show them: the
/// others hold whatever the program left there, which may differ run after run (values derived
/// from the random bytes Linux gives every new process, which onionlab cannot choose). Calls
/// the kernel does not know show all six.
pub fn call_args(nr: i64, args: &[i64; 6]) -> usize {
    const F_GETFD: i64 = 1;
    const F_GETFL: i64 = 3;
    match nr {
        SYS_FUTEX => match args[1] & 127 {
            0 => 4, // FUTEX_WAIT: address, op, value, time limit
            1 => 3, // FUTEX_WAKE: address, op, count
            3 => 5, // FUTEX_REQUEUE
            _ => 6,
        },
        SYS_FCNTL if matches!(args[1], F_GETFD | F_GETFL) => 2,
        REQ_START | SYS_SCHED_YIELD => 0,
        REQ_OPEN_VIRTUAL | REQ_THREAD_FAILED | SYS_CLOSE | SYS_PIPE | SYS_EXIT | SYS_EXIT_GROUP
        | SYS_UNAME | SYS_SYSINFO | SYS_EPOLL_CREATE | SYS_EPOLL_CREATE1 | SYS_EVENTFD => 1,
        SYS_NANOSLEEP | SYS_SHUTDOWN | SYS_LISTEN | SYS_PIPE2 | SYS_EVENTFD2
        | SYS_TIMERFD_CREATE | SYS_TIMERFD_GETTIME => 2,
        SYS_READ | SYS_WRITE | SYS_POLL | SYS_SOCKET | SYS_CONNECT | SYS_ACCEPT | SYS_BIND
        | SYS_GETSOCKNAME | SYS_GETPEERNAME | SYS_FCNTL | SYS_GETRANDOM | SYS_PPOLL | SYS_IOCTL => {
            3
        }
        SYS_SOCKETPAIR | SYS_EPOLL_WAIT | SYS_EPOLL_CTL | SYS_CLOCK_NANOSLEEP | SYS_ACCEPT4
        | SYS_TIMERFD_SETTIME => 4,
        SYS_SETSOCKOPT | SYS_GETSOCKOPT | SYS_CLONE | SYS_CLONE3 | SYS_SELECT | SYS_EPOLL_PWAIT => {
            5
        }
        _ => 6,
    }
}

/// `clock_nanosleep`'s flag for an absolute deadline.
const TIMER_ABSTIME: i64 = 1;
/// `getrandom`'s flags: GRND_NONBLOCK, GRND_RANDOM, GRND_INSECURE.
const GRND_FLAGS: i64 = 1 | 2 | 4;

/// One system call as the program made it.
#[derive(Clone, Copy, Debug)]
pub struct Call<'a> {
    /// Its number (x86-64), or a `REQ_*`.
    pub nr: i64,
    /// Its arguments as the program passed them (pointers mean nothing here). For calls that
    /// make a descriptor (`socket`, `accept`, `accept4`) the shim puts the number it reserved
    /// for it in `args[5]`.
    pub args: [i64; 6],
    /// What the shim copied from the program's memory for it.
    pub data: &'a [u8],
}

/// What became of a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Its result (a negative errno on failure); the bytes the kernel put in `out` go back to
    /// the program.
    Done(i64),
    /// It waits. With a time, [`Kernel::wake`] at that time finishes it if nothing else has;
    /// [`Kernel::retry`] after a [`Kernel::note`] finishes it if what it waits for happened.
    Blocked {
        /// When it gives up waiting (a sleep's end, a `poll` timeout); `None`: no limit.
        until: Option<SimTime>,
    },
    /// The process exits with this status.
    Exit(i32),
    /// The thread that made the call ends (`exit` while others live): the shim ends the real
    /// thread, and another thread's turn comes.
    ThreadExit,
}

/// What one step of a call came to.
pub(crate) enum Step {
    /// Finished with this result.
    Done(i64),
    /// Would block: tried again after a note, or at `until`.
    Block,
}

/// A descriptor the kernel serves.
#[derive(Debug)]
enum Descriptor<S> {
    /// `/dev/urandom` or `/dev/random`: the host's random bytes.
    Random,
    /// A TCP socket.
    Socket(Box<SocketFile<S>>),
    /// A UDP socket.
    Udp(Box<UdpFile>),
    /// An `eventfd` counter.
    EventFd(EventFd),
    /// An `epoll` instance.
    Epoll(Box<Epoll>),
    /// An end of a pipe or of a socket pair.
    Pipe(pipes::PipeEnd),
    /// A `timerfd`.
    Timer(Box<timers::TimerFd>),
}

impl<S> Descriptor<S> {
    /// Its `O_NONBLOCK` flag, if it has one.
    fn nonblocking(&mut self) -> Option<&mut bool> {
        match self {
            Descriptor::Socket(s) => Some(&mut s.nonblocking),
            Descriptor::Udp(u) => Some(&mut u.nonblocking),
            Descriptor::EventFd(e) => Some(&mut e.nonblocking),
            Descriptor::Pipe(p) => Some(&mut p.nonblocking),
            Descriptor::Timer(t) => Some(&mut t.nonblocking),
            Descriptor::Random | Descriptor::Epoll(_) => None,
        }
    }
}

/// A call that blocked, kept to be tried again.
#[derive(Debug)]
pub(crate) struct Pending {
    pub(crate) nr: i64,
    pub(crate) args: [i64; 6],
    data: Vec<u8>,
    /// When it stops waiting, if it has a limit.
    until: Option<SimTime>,
    /// Bytes a blocking write had sent when it blocked.
    progress: usize,
    /// When it blocked among the process's blocked calls (futex wake-ups take the earliest).
    pub(crate) seq: u64,
}

impl Pending {
    /// Whether it waits on descriptors, and so may go on after anything that happens on them
    /// (not a sleep or a futex wait, which only time or a wake-up end).
    fn waits_on_descriptors(&self) -> bool {
        !matches!(self.nr, SYS_NANOSLEEP | SYS_CLOCK_NANOSLEEP | SYS_FUTEX)
    }
}

/// The simulated kernel of one managed process, whose sockets are `S`.
pub struct Kernel<R, S> {
    hostname: String,
    /// The process's wall clock at simulated time 0, in nanoseconds since the Unix epoch.
    epoch_ns: i64,
    rng: R,
    fds: Vec<Option<Descriptor<S>>>,
    virtual_fds: [u8; MAX_FDS / 8],
    /// The process's threads, their blocked calls and whose turn it is.
    threads: threads::Threads,
    /// Unsupported calls by number (`names::NAMES`' numbering).
    unsupported: Vec<u64>,
    /// Unsupported calls with a number no name has.
    unsupported_unknown: u64,
    calls: u64,
    /// Set while [`Kernel::retry`] tries a blocked call again (a blocking `connect` then
    /// reports the outcome of its own attempt instead of `EALREADY`).
    retrying: bool,
    /// Bytes the blocking write being tried has sent so far.
    progress: usize,
    /// The next ephemeral port a UDP socket that sends unbound may take.
    next_udp_port: u16,
    /// The buffers of the process's pipes and socket pairs (`None`: free for reuse).
    buffers: Vec<Option<pipes::Buffer>>,
    /// The bytes of a call tried again, kept between calls.
    scratch: Vec<u8>,
    /// The simulated time of the call, retry or wake-up being handled.
    now: SimTime,
}

impl<R: Rng, S: Copy + Eq + std::fmt::Debug> Kernel<R, S> {
    /// The kernel of process `pid` on host `hostname` whose wall clock reads `epoch_ns` (ns
    /// since the Unix epoch) at simulated time 0, drawing its random bytes from `rng`. Its main
    /// thread runs.
    pub fn new(hostname: &str, pid: i32, epoch_ns: i64, rng: R) -> Self {
        Kernel {
            hostname: hostname.to_string(),
            epoch_ns,
            rng,
            fds: Vec::new(),
            virtual_fds: [0; MAX_FDS / 8],
            threads: threads::Threads::new(pid),
            unsupported: vec![0; names::NAMES.len()],
            unsupported_unknown: 0,
            calls: 0,
            retrying: false,
            progress: 0,
            next_udp_port: udp::FIRST_EPHEMERAL_UDP_PORT,
            buffers: Vec::new(),
            scratch: Vec::new(),
            now: 0,
        }
    }

    /// The process's wall clock at simulated time `now`, in nanoseconds since the Unix epoch.
    pub fn wall_clock_ns(&self, now: SimTime) -> i64 {
        self.epoch_ns
            .saturating_add(now.min(i64::MAX as u64) as i64)
    }

    /// Which descriptors the kernel serves, as the shim's table wants them (bit `n % 8` of
    /// byte `n / 8`).
    pub fn virtual_fds(&self) -> &[u8; MAX_FDS / 8] {
        &self.virtual_fds
    }

    /// Calls the kernel has handled (the time and the ids the shim answers itself are not
    /// among them).
    pub fn calls(&self) -> u64 {
        self.calls
    }

    /// The calls answered `ENOSYS`, by name, with how often, in call-number order.
    pub fn unsupported(&self) -> Vec<(String, u64)> {
        let mut out: Vec<(String, u64)> = self
            .unsupported
            .iter()
            .enumerate()
            .filter(|&(_, &n)| n > 0)
            .map(|(nr, &n)| (names::NAMES[nr].to_string(), n))
            .collect();
        if self.unsupported_unknown > 0 {
            out.push(("unknown".to_string(), self.unsupported_unknown));
        }
        out
    }

    /// Handles `call`, made by the running thread at simulated time `now` on the host's
    /// network `net`; bytes for the program go in `out` (cleared first). If the call blocks,
    /// no thread runs until [`Kernel::resume`] gives one the turn.
    pub fn call<N: Network<Socket = S>>(
        &mut self,
        now: SimTime,
        call: &Call<'_>,
        out: &mut Vec<u8>,
        net: &mut N,
    ) -> Outcome {
        out.clear();
        self.calls += 1;
        self.progress = 0;
        self.now = now;
        let until = match self.deadline(now, call) {
            Ok(until) => until,
            Err(errno) => return Outcome::Done(-errno),
        };
        let caller = self.threads.running;
        let outcome = match call.nr {
            SYS_EXIT => return self.exit_thread(call.args[0], call.args[1]),
            SYS_EXIT_GROUP => return Outcome::Exit((call.args[0] & 0xff) as i32),
            SYS_NANOSLEEP | SYS_CLOCK_NANOSLEEP => match until {
                Some(t) if t > now => {
                    self.block(call, Some(t));
                    Outcome::Blocked { until: Some(t) }
                }
                _ => Outcome::Done(0),
            },
            SYS_FUTEX => self.futex(now, call),
            SYS_SCHED_YIELD => self.yield_turn(),
            SYS_CLONE | SYS_CLONE3 => Outcome::Done(self.clone_thread(call, out)),
            REQ_THREAD_FAILED => Outcome::Done(self.thread_failed(call.args[0])),
            _ => match self.step(call, out, net) {
                Step::Done(ret) => Outcome::Done(ret),
                Step::Block => {
                    self.block(call, until);
                    Outcome::Blocked { until }
                }
            },
        };
        // What this thread did may let another's blocked call go on (a write to a pipe it
        // reads, an eventfd it waits on).
        if self.threads.slots() > 1 {
            self.retry_blocked(caller, net);
        }
        outcome
    }

    /// The process has ended: every descriptor closes, as Linux closes a dead process's, so
    /// its peers see its connections close.
    pub fn close_all<N: Network<Socket = S>>(&mut self, net: &mut N) {
        for fd in 0..self.fds.len() {
            if let Some(Descriptor::Socket(_)) = &self.fds[fd] {
                let _ = self.close_socket(fd as i64, net);
            }
            self.set_fd(fd, None);
        }
        self.buffers.clear();
        self.threads.clear();
    }

    /// A UDP datagram of `bytes` from port `from_port` of host `from` arrived for the host's
    /// port `port`.
    pub fn datagram(&mut self, port: u16, from: u32, from_port: u16, bytes: &[u8]) {
        self.udp_arrival(port, from, from_port, bytes);
    }

    /// Tells the kernel what happened on one of the host's connections.
    pub fn note<N: Network<Socket = S>>(&mut self, note: SocketNote<S>, net: &mut N) {
        self.socket_note(note, net);
    }

    /// Tries the blocked calls that wait on descriptors again after notes or when a timer
    /// expires ([`Kernel::next_timer`]): those that finish
    /// make their threads ready ([`Kernel::resume`]); the others wait on, their time limits as
    /// they were.
    /// `now` is the simulated time.
    pub fn retry<N: Network<Socket = S>>(&mut self, now: SimTime, net: &mut N) {
        self.now = now;
        self.retry_blocked(None, net);
    }

    /// Whether a thread is blocked on descriptors (not in a sleep or a futex wait).
    fn blocked_on_descriptors(&self) -> bool {
        (0..self.threads.slots()).any(|i| {
            self.threads
                .get(ThreadId(i as u32))
                .and_then(|t| t.pending.as_ref())
                .is_some_and(Pending::waits_on_descriptors)
        })
    }

    /// Tries again, in slot order, every blocked call that waits on descriptors, but
    /// `except`'s.
    fn retry_blocked<N: Network<Socket = S>>(&mut self, except: Option<ThreadId>, net: &mut N) {
        let mut out = std::mem::take(&mut self.scratch);
        for i in 0..self.threads.slots() {
            let t = ThreadId(i as u32);
            let Some(th) = self.threads.get_mut(t).filter(|_| Some(t) != except) else {
                continue;
            };
            if !th
                .pending
                .as_ref()
                .is_some_and(Pending::waits_on_descriptors)
            {
                continue;
            }
            let Some(mut p) = th.pending.take() else {
                continue;
            };
            let call = Call {
                nr: p.nr,
                args: p.args,
                data: &p.data,
            };
            out.clear();
            self.retrying = true;
            self.progress = p.progress;
            let step = self.step(&call, &mut out, net);
            self.retrying = false;
            match step {
                Step::Done(ret) => self.threads.make_ready(t, ret, &out),
                Step::Block => {
                    p.progress = self.progress;
                    if let Some(th) = self.threads.get_mut(t) {
                        th.pending = Some(p);
                    }
                }
            }
        }
        self.scratch = out;
    }

    /// The time limit `until` of thread `t`'s blocked call has come: the call finishes (a
    /// sleep returns 0, a `poll` with nothing ready 0, a futex wait `ETIMEDOUT`) and the
    /// thread is ready. If the thread is not blocked, or blocked in another call with another
    /// limit (this wake-up was for a call that has finished since), nothing happens.
    pub fn wake<N: Network<Socket = S>>(&mut self, t: ThreadId, until: SimTime, net: &mut N) {
        self.now = until;
        let Some(th) = self.threads.get_mut(t) else {
            return;
        };
        if th.pending.as_ref().map(|p| p.until) != Some(Some(until)) {
            return;
        }
        let p = th.pending.take().expect("checked above");
        // A wait on descriptors takes one last look, with no time left, then answers that
        // nothing is ready.
        let mut args = p.args;
        match p.nr {
            SYS_POLL | SYS_PPOLL | SYS_SELECT | SYS_PSELECT6 => args[2] = 0,
            SYS_EPOLL_WAIT | SYS_EPOLL_PWAIT => args[3] = 0,
            SYS_FUTEX => return self.threads.make_ready(t, -threads::ETIMEDOUT, &[]),
            _ => return self.threads.make_ready(t, 0, &[]),
        }
        let call = Call {
            nr: p.nr,
            args,
            data: &p.data,
        };
        let mut out = std::mem::take(&mut self.scratch);
        out.clear();
        let ret = match self.step(&call, &mut out, net) {
            Step::Done(ret) => ret,
            Step::Block => 0,
        };
        self.threads.make_ready(t, ret, &out);
        self.scratch = out;
    }

    /// The running thread blocks in `call`, until `until` at the latest.
    fn block(&mut self, call: &Call<'_>, until: Option<SimTime>) {
        let seq = self.threads.next_seq;
        self.threads.next_seq += 1;
        let progress = self.progress;
        let Some(t) = self.threads.running.take() else {
            return;
        };
        if let Some(th) = self.threads.get_mut(t) {
            th.pending = Some(Pending {
                nr: call.nr,
                args: call.args,
                data: call.data.to_vec(),
                until,
                progress,
                seq,
            });
        }
    }

    /// Counts call `nr` as one the kernel does not support.
    pub(crate) fn count_unsupported(&mut self, nr: i64) {
        match usize::try_from(nr)
            .ok()
            .and_then(|n| self.unsupported.get_mut(n))
        {
            Some(count) => *count += 1,
            None => self.unsupported_unknown += 1,
        }
    }

    /// A call's time limit: a sleep's end, a `poll` timeout (`None`: none).
    fn deadline(&self, now: SimTime, call: &Call<'_>) -> Result<Option<SimTime>, i64> {
        let a = call.args;
        Ok(match call.nr {
            SYS_NANOSLEEP => Some(now.saturating_add(timespec(call.data)?)),
            SYS_CLOCK_NANOSLEEP => {
                if !matches!(a[0], 0 | 1 | 7 | 8 | 9 | 11) {
                    return Err(EINVAL);
                }
                let t = timespec(call.data)?;
                if a[1] & TIMER_ABSTIME != 0 {
                    Some((t as i64).saturating_sub(self.epoch_ns).max(0) as u64)
                } else {
                    Some(now.saturating_add(t))
                }
            }
            SYS_POLL if a[2] >= 0 => Some(now.saturating_add((a[2] as u64) * 1_000_000)),
            // The shim gives these poll's form, with the time limit in nanoseconds.
            SYS_PPOLL | SYS_SELECT | SYS_PSELECT6 if a[2] >= 0 => {
                Some(now.saturating_add(a[2] as u64))
            }
            SYS_EPOLL_WAIT | SYS_EPOLL_PWAIT if a[3] >= 0 => {
                Some(now.saturating_add((a[3] as u64) * 1_000_000))
            }
            _ => None,
        })
    }

    /// One attempt at a call that may block.
    fn step<N: Network<Socket = S>>(
        &mut self,
        call: &Call<'_>,
        out: &mut Vec<u8>,
        net: &mut N,
    ) -> Step {
        let a = call.args;
        let done = match call.nr {
            REQ_START => 0,
            REQ_OPEN_VIRTUAL => self.open_virtual(a[0], call.data),
            SYS_GETRANDOM => {
                if a[2] & !GRND_FLAGS != 0 {
                    -EINVAL
                } else {
                    self.random(a[1], out)
                }
            }
            SYS_UNAME => {
                for field in [
                    "Linux",
                    self.hostname.as_str(),
                    "6.1.0-onionlab",
                    "#1 SMP onionlab simulated kernel",
                    "x86_64",
                    "(none)",
                ] {
                    let bytes = field.as_bytes();
                    let n = bytes.len().min(64);
                    out.extend_from_slice(&bytes[..n]);
                    out.resize(out.len() + 65 - n, 0);
                }
                0
            }
            SYS_SYSINFO => {
                self.sysinfo(out);
                0
            }
            SYS_READ if matches!(self.descriptor(a[0]), Some(Descriptor::Random)) => {
                self.random(a[2], out)
            }
            // What is written to a random device is taken and changes nothing here.
            SYS_WRITE if matches!(self.descriptor(a[0]), Some(Descriptor::Random)) => {
                call.data.len() as i64
            }
            SYS_READ | SYS_WRITE | SYS_RECVFROM | SYS_SENDTO
                if matches!(self.descriptor(a[0]), Some(Descriptor::Pipe(_))) =>
            {
                return self.pipe_io(call, out);
            }
            SYS_CLOSE if matches!(self.descriptor(a[0]), Some(Descriptor::Pipe(_))) => {
                self.close_pipe(a[0]);
                0
            }
            SYS_PIPE => self.make_pipe(false, 0, [a[4], a[5]], out),
            SYS_PIPE2 if a[1] & !(0o4000 | 0o2000000) != 0 => -EINVAL,
            SYS_PIPE2 => self.make_pipe(false, a[1], [a[4], a[5]], out),
            SYS_SOCKETPAIR => self.socketpair(a, out),
            SYS_READ | SYS_WRITE
                if matches!(self.descriptor(a[0]), Some(Descriptor::EventFd(_))) =>
            {
                return self.eventfd_io(a[0], call.nr == SYS_WRITE, a[2], call.data, out);
            }
            SYS_READ if matches!(self.descriptor(a[0]), Some(Descriptor::Timer(_))) => {
                return self.timerfd_read(a[0], a[2], out);
            }
            SYS_WRITE if matches!(self.descriptor(a[0]), Some(Descriptor::Timer(_))) => -EINVAL,
            SYS_TIMERFD_CREATE => self.timerfd_create(a[0], a[1], a[5]),
            SYS_TIMERFD_SETTIME => self.timerfd_settime(a[0], a[1], call.data, out),
            SYS_TIMERFD_GETTIME => self.timerfd_gettime(a[0], out),
            SYS_CLOSE
                if matches!(
                    self.descriptor(a[0]),
                    Some(
                        Descriptor::Random
                            | Descriptor::EventFd(_)
                            | Descriptor::Epoll(_)
                            | Descriptor::Timer(_)
                    )
                ) =>
            {
                self.forget_in_epolls(a[0]);
                self.set_fd(a[0] as usize, None);
                0
            }
            SYS_EPOLL_CREATE if a[0] <= 0 => -EINVAL,
            SYS_EPOLL_CREATE => self.epoll_create(a[5]),
            SYS_EPOLL_CREATE1 if a[0] & !0o2000000 != 0 => -EINVAL,
            SYS_EPOLL_CREATE1 => self.epoll_create(a[5]),
            SYS_EPOLL_CTL => self.epoll_ctl(a[0], a[1], a[2], call.data),
            SYS_EPOLL_WAIT | SYS_EPOLL_PWAIT => return self.epoll_wait(a[0], a[2], a[3], out, net),
            SYS_EVENTFD => self.eventfd(a[0], 0, a[5]),
            SYS_EVENTFD2 if a[1] & !(1 | 0o4000 | 0o2000000) != 0 => -EINVAL,
            SYS_EVENTFD2 => self.eventfd(a[0], a[1], a[5]),
            SYS_FCNTL => self.fcntl(a[0], a[1], a[2]),
            SYS_IOCTL => self.ioctl(a[0], a[1], call.data, out, net),
            SYS_READ | SYS_WRITE | SYS_CLOSE | SYS_CONNECT | SYS_SENDTO | SYS_RECVFROM
            | SYS_BIND | SYS_GETSOCKNAME | SYS_GETPEERNAME | SYS_SETSOCKOPT
                if matches!(self.descriptor(a[0]), Some(Descriptor::Udp(_))) =>
            {
                return self.udp_call(call, out, net);
            }
            SYS_READ | SYS_WRITE | SYS_CLOSE | SYS_SOCKET | SYS_CONNECT | SYS_ACCEPT
            | SYS_ACCEPT4 | SYS_SENDTO | SYS_RECVFROM | SYS_SHUTDOWN | SYS_BIND | SYS_LISTEN
            | SYS_GETSOCKNAME | SYS_GETPEERNAME | SYS_SETSOCKOPT | SYS_GETSOCKOPT | SYS_POLL
            | SYS_PPOLL | SYS_SELECT | SYS_PSELECT6 => return self.socket_call(call, out, net),
            nr => {
                self.count_unsupported(nr);
                -ENOSYS
            }
        };
        Step::Done(done)
    }

    /// `fcntl` on any descriptor the kernel serves: the descriptor flags (close-on-exec is the
    /// shim's placeholder's business, so they read 0) and the status flags, of which only
    /// `O_NONBLOCK` means anything here.
    fn fcntl(&mut self, fd: i64, cmd: i64, arg: i64) -> i64 {
        const F_GETFD: i64 = 1;
        const F_SETFD: i64 = 2;
        const F_GETFL: i64 = 3;
        const F_SETFL: i64 = 4;
        const O_RDWR: i64 = 2;
        const O_NONBLOCK: i64 = 0o4000;
        let Some(d) = self.descriptor_mut(fd) else {
            return -EBADF;
        };
        let nonblocking = d.nonblocking();
        match cmd {
            F_GETFD | F_SETFD => 0,
            F_GETFL => {
                O_RDWR
                    | if nonblocking.is_some_and(|n| *n) {
                        O_NONBLOCK
                    } else {
                        0
                    }
            }
            F_SETFL => {
                if let Some(n) = nonblocking {
                    *n = arg & O_NONBLOCK != 0;
                }
                0
            }
            _ => -EINVAL,
        }
    }

    /// `sysinfo`: the simulated machine, the same everywhere: up since simulated time 0, idle,
    /// [`MEMORY_BYTES`] of memory, half of it free, no swap, one process.
    fn sysinfo(&self, out: &mut Vec<u8>) {
        let words: [u64; 11] = [
            self.now / 1_000_000_000, // uptime
            0,                        // the three load averages
            0,
            0,
            MEMORY_BYTES, // totalram
            MEMORY_BYTES / 2,
            0, // sharedram
            0, // bufferram
            0, // totalswap
            0, // freeswap
            1, // procs (a short, then padding)
        ];
        for w in words {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out.extend_from_slice(&[0; 16]); // totalhigh, freehigh
        out.extend_from_slice(&1u32.to_le_bytes()); // mem_unit: bytes
        out.extend_from_slice(&[0; 4]);
    }

    /// `ioctl` on a descriptor the kernel serves, with the `int` its argument points to in
    /// `data` (the shim copies four bytes each way): `FIONBIO` on any descriptor, and on a TCP
    /// socket `FIONREAD` (bytes to read), `SIOCOUTQ` (bytes not acknowledged) and `SIOCOUTQNSD`
    /// (bytes never sent), from the TCP model, which tor's KIST scheduler reads. On any socket,
    /// `SIOCGIFCONF` lists the host's interfaces (`lo` and `eth0` with its address) as
    /// `struct ifreq`s, which the shim copies into the program's buffer. Other requests are
    /// not supported.
    fn ioctl<N: Network<Socket = S>>(
        &mut self,
        fd: i64,
        request: i64,
        data: &[u8],
        out: &mut Vec<u8>,
        net: &N,
    ) -> i64 {
        const FIONREAD: i64 = 0x541b;
        const FIONBIO: i64 = 0x5421;
        const SIOCOUTQ: i64 = 0x5411;
        const SIOCOUTQNSD: i64 = 0x894b;
        const SIOCGIFCONF: i64 = 0x8912;
        let Some(d) = self.descriptor_mut(fd) else {
            return -EBADF;
        };
        if request == SIOCGIFCONF && matches!(d, Descriptor::Socket(_) | Descriptor::Udp(_)) {
            for (name, addr) in [(&b"lo"[..], 0x7f00_0001), (&b"eth0"[..], net.address())] {
                // ifr_name[16], then the address as a sockaddr_in, in a 40-byte ifreq.
                let mut entry = [0u8; 40];
                entry[..name.len()].copy_from_slice(name);
                entry[16..32].copy_from_slice(&net::sockaddr_in(addr, 0));
                out.extend_from_slice(&entry);
            }
            return 0;
        }
        let connection = match d {
            Descriptor::Socket(s) => s.connection(),
            _ => None,
        };
        let value = match request {
            FIONBIO => {
                let Some(on) = data.get(..4) else {
                    return -EFAULT;
                };
                if let Some(n) = d.nonblocking() {
                    *n = on != [0; 4];
                }
                return 0;
            }
            FIONREAD if matches!(d, Descriptor::Socket(_)) => {
                connection.map_or(0, |c| net.readable(c))
            }
            SIOCOUTQ | SIOCOUTQNSD if matches!(d, Descriptor::Socket(_)) => {
                let w = connection
                    .and_then(|c| net.send_window(c))
                    .unwrap_or_default();
                if request == SIOCOUTQNSD {
                    w.notsent
                } else {
                    u64::from(w.unacked) * u64::from(w.mss) + w.notsent
                }
            }
            _ => {
                self.count_unsupported(SYS_IOCTL);
                return -ENOSYS;
            }
        };
        out.extend_from_slice(&(value.min(i32::MAX as u64) as i32).to_ne_bytes());
        0
    }

    fn descriptor_mut(&mut self, fd: i64) -> Option<&mut Descriptor<S>> {
        usize::try_from(fd)
            .ok()
            .and_then(|f| self.fds.get_mut(f))
            .and_then(Option::as_mut)
    }

    fn random(&mut self, len: i64, out: &mut Vec<u8>) -> i64 {
        let n = (len.max(0) as usize).min(DATA_BYTES);
        out.resize(n, 0);
        self.rng.fill_bytes(out);
        n as i64
    }

    fn descriptor(&self, fd: i64) -> Option<&Descriptor<S>> {
        usize::try_from(fd)
            .ok()
            .and_then(|fd| self.fds.get(fd))
            .and_then(Option::as_ref)
    }

    fn set_fd(&mut self, fd: usize, d: Option<Descriptor<S>>) {
        if self.fds.len() <= fd {
            self.fds.resize_with(fd + 1, || None);
        }
        let (byte, bit) = (fd / 8, 1u8 << (fd % 8));
        if d.is_some() {
            self.virtual_fds[byte] |= bit;
        } else {
            self.virtual_fds[byte] &= !bit;
        }
        self.fds[fd] = d;
    }

    fn open_virtual(&mut self, fd: i64, path: &[u8]) -> i64 {
        let path = path.split(|&b| b == 0).next().unwrap_or_default();
        if !matches!(path, b"/dev/urandom" | b"/dev/random") {
            return -ENOENT;
        }
        match usize::try_from(fd) {
            Ok(fd) if fd < MAX_FDS => {
                self.set_fd(fd, Some(Descriptor::Random));
                0
            }
            _ => -EMFILE,
        }
    }
}

#[cfg(test)]
impl<R: Rng, S: Copy + Eq + std::fmt::Debug> Kernel<R, S> {
    /// For tests of one thread: [`Kernel::wake`] for the main thread, then its result as an
    /// [`Outcome`] (`Blocked` if it still waits).
    pub(crate) fn wake_main<N: Network<Socket = S>>(
        &mut self,
        until: SimTime,
        out: &mut Vec<u8>,
        net: &mut N,
    ) -> Outcome {
        self.wake(MAIN_THREAD, until, net);
        self.resume_main(out)
    }

    /// For tests of one thread: [`Kernel::retry`], then the main thread's result as an
    /// [`Outcome`].
    pub(crate) fn retry_main<N: Network<Socket = S>>(
        &mut self,
        now: SimTime,
        out: &mut Vec<u8>,
        net: &mut N,
    ) -> Outcome {
        self.retry(now, net);
        self.resume_main(out)
    }

    fn resume_main(&mut self, out: &mut Vec<u8>) -> Outcome {
        match self.resume(out) {
            Some((_, Resume::Reply(ret))) => Outcome::Done(ret),
            _ => Outcome::Blocked {
                until: self
                    .threads
                    .get(MAIN_THREAD)
                    .and_then(|t| t.pending.as_ref())
                    .and_then(|p| p.until),
            },
        }
    }
}

/// A `struct timespec` the shim copied: nanoseconds, or the errno a bad one gives.
fn timespec(data: &[u8]) -> Result<u64, i64> {
    if data.len() < 16 {
        return Err(EFAULT);
    }
    let sec = i64::from_le_bytes(data[..8].try_into().expect("8 bytes"));
    let nsec = i64::from_le_bytes(data[8..16].try_into().expect("8 bytes"));
    if sec < 0 || !(0..1_000_000_000).contains(&nsec) {
        return Err(EINVAL);
    }
    Ok((sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(nsec as u64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use onionlab_engine::host_rng;

    type TestKernel = Kernel<onionlab_engine::rng::HostRng, u32>;

    fn kernel() -> TestKernel {
        Kernel::new(
            "process-a-1",
            1000,
            946_684_800_000_000_000,
            host_rng(1, 2, 3),
        )
    }

    fn ts(sec: i64, nsec: i64) -> Vec<u8> {
        let mut v = sec.to_le_bytes().to_vec();
        v.extend_from_slice(&nsec.to_le_bytes());
        v
    }

    fn call(nr: i64, args: [i64; 6], data: &[u8]) -> Call<'_> {
        Call { nr, args, data }
    }

    #[test]
    fn sleeps_block_until_their_time_and_bad_times_are_refused() {
        let mut k = kernel();
        let mut out = Vec::new();
        let d = ts(1, 500);
        assert_eq!(
            k.call(7, &call(SYS_NANOSLEEP, [0; 6], &d), &mut out, &mut Offline),
            Outcome::Blocked {
                until: Some(1_000_000_507)
            }
        );
        assert_eq!(
            k.wake_main(1_000_000_507, &mut out, &mut Offline),
            Outcome::Done(0)
        );
        let zero = ts(0, 0);
        assert_eq!(
            k.call(
                9,
                &call(SYS_NANOSLEEP, [0; 6], &zero),
                &mut out,
                &mut Offline
            ),
            Outcome::Done(0)
        );
        let bad = ts(0, 1_000_000_000);
        assert_eq!(
            k.call(
                9,
                &call(SYS_NANOSLEEP, [0; 6], &bad),
                &mut out,
                &mut Offline
            ),
            Outcome::Done(-EINVAL)
        );
        assert_eq!(
            k.call(9, &call(SYS_NANOSLEEP, [0; 6], &[]), &mut out, &mut Offline),
            Outcome::Done(-EFAULT)
        );
        // An absolute deadline on the process's clock: 2 s after the epoch is 2 s simulated.
        let at = ts(946_684_802, 0);
        assert_eq!(
            k.call(
                5,
                &call(SYS_CLOCK_NANOSLEEP, [0, TIMER_ABSTIME, 0, 0, 0, 0], &at),
                &mut out,
                &mut Offline
            ),
            Outcome::Blocked {
                until: Some(2_000_000_000)
            }
        );
        k.wake_main(2_000_000_000, &mut out, &mut Offline);
        let past = ts(946_684_801, 0);
        assert_eq!(
            k.call(
                3_000_000_000,
                &call(SYS_CLOCK_NANOSLEEP, [1, TIMER_ABSTIME, 0, 0, 0, 0], &past),
                &mut out,
                &mut Offline
            ),
            Outcome::Done(0)
        );
        assert_eq!(
            k.call(
                0,
                &call(SYS_CLOCK_NANOSLEEP, [2, 0, 0, 0, 0, 0], &d),
                &mut out,
                &mut Offline
            ),
            Outcome::Done(-EINVAL)
        );
    }

    #[test]
    fn random_bytes_come_from_the_host_stream_whichever_way_they_are_asked_for() {
        let mut a = kernel();
        let mut b = kernel();
        let (mut x, mut y) = (Vec::new(), Vec::new());
        assert_eq!(
            a.call(
                0,
                &call(SYS_GETRANDOM, [0, 32, 0, 0, 0, 0], &[]),
                &mut x,
                &mut Offline
            ),
            Outcome::Done(32)
        );
        assert_eq!(
            b.call(
                0,
                &call(REQ_OPEN_VIRTUAL, [5, 0, 0, 0, 0, 0], b"/dev/urandom\0"),
                &mut y,
                &mut Offline
            ),
            Outcome::Done(0)
        );
        assert_eq!(b.virtual_fds()[0], 1 << 5);
        assert_eq!(
            b.call(
                0,
                &call(SYS_READ, [5, 0, 32, 0, 0, 0], &[]),
                &mut y,
                &mut Offline
            ),
            Outcome::Done(32)
        );
        assert_eq!(x, y, "one stream, the same bytes");
        assert_eq!(
            b.call(
                0,
                &call(SYS_CLOSE, [5, 0, 0, 0, 0, 0], &[]),
                &mut y,
                &mut Offline
            ),
            Outcome::Done(0)
        );
        assert_eq!(b.virtual_fds()[0], 0);
        assert_eq!(
            b.call(
                0,
                &call(SYS_READ, [5, 0, 32, 0, 0, 0], &[]),
                &mut y,
                &mut Offline
            ),
            Outcome::Done(-EBADF)
        );
        assert_eq!(
            a.call(
                0,
                &call(SYS_GETRANDOM, [0, 8, 0x10, 0, 0, 0], &[]),
                &mut x,
                &mut Offline
            ),
            Outcome::Done(-EINVAL)
        );
        assert_eq!(
            a.call(
                0,
                &call(REQ_OPEN_VIRTUAL, [3, 0, 0, 0, 0, 0], b"/etc/passwd\0"),
                &mut x,
                &mut Offline
            ),
            Outcome::Done(-ENOENT)
        );
    }

    #[test]
    fn uname_names_the_host_and_unsupported_calls_are_counted_by_name() {
        let mut k = kernel();
        let mut out = Vec::new();
        assert_eq!(
            k.call(0, &call(SYS_UNAME, [0; 6], &[]), &mut out, &mut Offline),
            Outcome::Done(0)
        );
        assert_eq!(out.len(), 6 * 65);
        assert_eq!(&out[65..65 + 11], b"process-a-1");
        assert_eq!(out[65 + 11], 0);
        let inotify_init1 = 294;
        for _ in 0..3 {
            assert_eq!(
                k.call(0, &call(inotify_init1, [0; 6], &[]), &mut out, &mut Offline),
                Outcome::Done(-ENOSYS)
            );
        }
        assert_eq!(
            k.call(0, &call(100_000, [0; 6], &[]), &mut out, &mut Offline),
            Outcome::Done(-ENOSYS)
        );
        assert_eq!(
            k.unsupported(),
            vec![("inotify_init1".to_string(), 3), ("unknown".to_string(), 1)]
        );
        assert_eq!(
            k.call(
                0,
                &call(SYS_EXIT_GROUP, [300, 0, 0, 0, 0, 0], &[]),
                &mut out,
                &mut Offline
            ),
            Outcome::Exit(44)
        );
    }
}
