//! onionlab's end of a managed process: starting it with the shim, taking turns with it on
//! the shared page, and ending it.

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::shared::{self, Shared};

/// The descriptor number the shared page has in a process until the shim maps it and closes
/// it: below 1024, so that `select` could take it, and far from those a program opens first.
const SHM_FD: i32 = 999;

/// The descriptor limit (`RLIMIT_NOFILE`, soft and hard) a process gets: the number of
/// descriptors onionlab's table can serve ([`shared::MAX_FDS`]).
const DESCRIPTOR_LIMIT: usize = shared::MAX_FDS;

/// How long onionlab sleeps on the turn before it looks whether the process has died or
/// stalled: a process that dies is noticed this late, one that answers is not delayed at all.
const WAIT_SLICE: Duration = Duration::from_millis(20);

/// What onionlab needs to start a process.
pub struct ProcessSpec<'a> {
    /// The program (checked by [`crate::check_binary`] beforehand).
    pub program: &'a Path,
    /// Its arguments, without the program's name.
    pub args: &'a [String],
    /// Environment variables it gets besides `PATH`, `HOME` (its directory) and the shim's.
    pub env: &'a [(String, String)],
    /// Its working directory, which must exist; its standard output and error go to `stdout`
    /// and `stderr` there.
    pub dir: &'a Path,
    /// The shim library ([`crate::install_shim`]).
    pub shim: &'a Path,
    /// The file its `/etc/hosts` opens instead of the machine's, if any.
    pub hosts_file: Option<&'a Path>,
    /// The pid it sees for itself.
    pub pid: i32,
}

/// How a process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// It exited with this status.
    Code(i32),
    /// A signal ended it.
    Signal(i32),
}

/// What waiting for the process's turn brought.
#[derive(Debug, PartialEq, Eq)]
pub enum Turn {
    /// It made a request ([`ManagedProcess::request`]).
    Request,
    /// It ended without a request (a crash, or its exit after onionlab answered `exit_group`).
    Exited(Exit),
    /// It made no system call for longer than the stall limit and was killed.
    Stalled,
    /// The run was stopped (Ctrl-C, a signal, the memory limit) while it ran, and it was
    /// killed.
    Stopped,
}

/// A request as the process made it.
#[derive(Debug)]
pub struct Request<'a> {
    /// The slot of the thread that made it.
    pub thread: u32,
    /// The system call's number, or a `shared::REQ_*`.
    pub nr: i64,
    /// Its arguments as the program passed them.
    pub args: [i64; 6],
    /// What the shim copied from the program's memory for it (a buffer to write, a time).
    pub data: &'a [u8],
}

/// Why a process could not be started.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The system would not give onionlab the shared page or the process.
    #[error("{0}")]
    System(String),
    /// The process ended before the shim was in place (the program failed to load, or the
    /// shim refused to start); `stderr` is the end of what it wrote.
    #[error("it ended before it started ({exit:?}): {stderr}")]
    Died {
        /// How it ended.
        exit: Exit,
        /// The last lines of its standard error.
        stderr: String,
    },
    /// It made no system call within the stall limit of starting.
    #[error("it did not reach its first system call within the stall limit")]
    Stalled,
}

/// A running managed process and the page it shares with onionlab. Dropping it kills the
/// process's whole process group.
pub struct ManagedProcess {
    child: Child,
    page: NonNull<Shared>,
    dir: PathBuf,
    stall_limit: Duration,
    exit: Option<Exit>,
}

// SAFETY: the page is mapped for this value alone and only touched through `&mut self` (or
// `&self` while the process waits for its turn); the value moves between worker threads
// whole, one at a time.
unsafe impl Send for ManagedProcess {}

impl ManagedProcess {
    /// Starts the process at simulated wall-clock time `now_ns` and waits until the shim is in
    /// place and the program is about to run; the process then waits for its first turn
    /// ([`ManagedProcess::reply`]). `stall_limit` is the wall time it may run without a
    /// system call before it is killed.
    pub fn spawn(
        spec: &ProcessSpec<'_>,
        now_ns: i64,
        stall_limit: Duration,
    ) -> Result<Self, ProcessError> {
        let sys = |what: &str, e: std::io::Error| {
            ProcessError::System(format!("{what}: {}", onionlab_data::io_words(&e)))
        };
        let size = std::mem::size_of::<Shared>();
        // SAFETY: memfd_create with a NUL-terminated name; the result is checked.
        let raw = unsafe { libc::memfd_create(c"onionlab-shared".as_ptr(), libc::MFD_CLOEXEC) };
        if raw < 0 {
            return Err(sys(
                "making the shared page",
                std::io::Error::last_os_error(),
            ));
        }
        // SAFETY: `raw` is a new descriptor this function owns.
        let memfd = unsafe { OwnedFd::from_raw_fd(raw) };
        let file = File::from(memfd);
        file.set_len(size as u64)
            .map_err(|e| sys("sizing the shared page", e))?;
        // SAFETY: a shared mapping of the whole file just sized; checked for failure.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(sys(
                "mapping the shared page",
                std::io::Error::last_os_error(),
            ));
        }
        let page = NonNull::new(addr.cast::<Shared>()).expect("mmap succeeded");
        // SAFETY: the mapping is fresh, zeroed, and nobody else maps it yet.
        unsafe {
            let p = page.as_ptr();
            (*p).magic = shared::MAGIC;
            (*p).version = shared::VERSION;
            (*p).turn = shared::TURN_PROCESS;
            (*p).pid = spec.pid;
            (*p).threads[0].tid = spec.pid;
            (*p).now_ns = now_ns;
        }
        let unmap_on_error = |e: ProcessError| {
            // SAFETY: the mapping made above, not used after this.
            unsafe { libc::munmap(addr, size) };
            e
        };
        let stdout = File::create(spec.dir.join("stdout"))
            .map_err(|e| unmap_on_error(sys("creating stdout", e)))?;
        let stderr = File::create(spec.dir.join("stderr"))
            .map_err(|e| unmap_on_error(sys("creating stderr", e)))?;
        let mut cmd = Command::new(spec.program);
        cmd.args(spec.args)
            .current_dir(spec.dir)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", spec.dir)
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .env("LD_PRELOAD", spec.shim)
            .env(crate::SHM_FD_VARIABLE, SHM_FD.to_string())
            .envs(spec.hosts_file.map(|h| (crate::HOSTS_VARIABLE, h)))
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr);
        let fd = file.as_raw_fd();
        // SAFETY: between fork and exec the closure makes only async-signal-safe system calls
        // (setpgid, personality, dup2, getrlimit, setrlimit) on a descriptor that stays open
        // until spawn returns.
        unsafe {
            cmd.pre_exec(move || {
                // Its own process group, so that a Ctrl-C at the terminal reaches onionlab
                // alone, and killing the group ends whatever the process left behind.
                if libc::setpgid(0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The same addresses run after run: a program that hashes or orders by
                // address behaves the same each time.
                if libc::personality(libc::ADDR_NO_RANDOMIZE as libc::c_ulong) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::dup2(fd, SHM_FD) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The same descriptor limit on every machine, the one onionlab's descriptor
                // table has: a program that sizes itself by it (tor's ConnLimit) does the same
                // everywhere. Lowering a limit is always allowed; a machine whose hard limit
                // is lower still keeps its own.
                let mut limit = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
                    let n = (DESCRIPTOR_LIMIT as libc::rlim_t).min(limit.rlim_max);
                    limit.rlim_cur = n;
                    limit.rlim_max = n;
                    libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .map_err(|e| unmap_on_error(sys(&format!("starting {}", spec.program.display()), e)))?;
        drop(file);
        let mut process = ManagedProcess {
            child,
            page,
            dir: spec.dir.to_path_buf(),
            stall_limit,
            exit: None,
        };
        match process.wait() {
            Turn::Request if process.request().nr == shared::REQ_START => Ok(process),
            Turn::Request => Err(ProcessError::System(format!(
                "the shim's first request was call {}, not its start",
                process.request().nr
            ))),
            Turn::Exited(exit) => Err(ProcessError::Died {
                exit,
                stderr: process.stderr_tail(),
            }),
            Turn::Stalled | Turn::Stopped => Err(ProcessError::Stalled),
        }
    }

    fn page(&self) -> &Shared {
        // SAFETY: the mapping lives as long as `self`; the process does not write it while
        // onionlab holds the turn, and onionlab reads it only then.
        unsafe { self.page.as_ref() }
    }

    fn page_mut(&mut self) -> &mut Shared {
        // SAFETY: as in `page`, with `&mut self` for the one writer on onionlab's side.
        unsafe { self.page.as_mut() }
    }

    fn turn(&self) -> &AtomicU32 {
        // SAFETY: `turn` is a naturally aligned u32 inside the mapping, and both sides access
        // it atomically only.
        unsafe { AtomicU32::from_ptr(std::ptr::addr_of_mut!((*self.page.as_ptr()).turn)) }
    }

    /// The process's real pid (for diagnostics; the program sees its simulated one).
    pub fn os_pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until the process hands onionlab the turn, ends, or stalls, or until `stop`
    /// (asked every few milliseconds) says the run is being stopped.
    pub fn wait_or_stop(&mut self, stop: &dyn Fn() -> bool) -> Turn {
        if let Some(exit) = self.exit {
            return Turn::Exited(exit);
        }
        let started = Instant::now();
        loop {
            if self.turn().load(Ordering::Acquire) == shared::TURN_SIMULATOR {
                return Turn::Request;
            }
            wait_slice(self.turn(), shared::TURN_PROCESS);
            if self.turn().load(Ordering::Acquire) == shared::TURN_SIMULATOR {
                return Turn::Request;
            }
            if let Some(end) = self.ended_stalled_or_stopped(started, stop) {
                return end;
            }
        }
    }

    /// Whether, after a slice of waiting since `started`, the process has ended, stalled (it
    /// is killed) or the run is being stopped (it is killed).
    fn ended_stalled_or_stopped(
        &mut self,
        started: Instant,
        stop: &dyn Fn() -> bool,
    ) -> Option<Turn> {
        if let Ok(Some(status)) = self.child.try_wait() {
            let exit = exit_of(status);
            self.exit = Some(exit);
            return Some(Turn::Exited(exit));
        }
        if started.elapsed() > self.stall_limit {
            self.kill();
            return Some(Turn::Stalled);
        }
        if stop() {
            self.kill();
            return Some(Turn::Stopped);
        }
        None
    }

    /// [`ManagedProcess::wait_or_stop`] with nothing to stop it but the stall limit.
    pub fn wait(&mut self) -> Turn {
        self.wait_or_stop(&|| false)
    }

    /// The request the process is waiting on (valid after [`ManagedProcess::wait`] returned
    /// [`Turn::Request`]).
    pub fn request(&self) -> Request<'_> {
        let p = self.page();
        let len = (p.in_len as usize).min(shared::DATA_BYTES);
        Request {
            thread: p.current,
            nr: p.nr,
            args: p.args,
            data: &p.data[..len],
        }
    }

    /// Sets the simulated wall-clock time the process reads from now on.
    pub fn set_now(&mut self, now_ns: i64) {
        self.page_mut().now_ns = now_ns;
    }

    /// Sets which descriptors onionlab serves (bit `n % 8` of byte `n / 8`).
    pub fn set_virtual_fds(&mut self, bits: &[u8; shared::MAX_FDS / 8]) {
        self.page_mut().virtual_fds = *bits;
    }

    /// Answers thread `thread`'s waiting request with `ret` and `out` (at most
    /// `shared::DATA_BYTES` bytes), and gives that thread the turn.
    pub fn reply(&mut self, thread: u32, ret: i64, out: &[u8]) {
        let p = self.page_mut();
        let n = out.len().min(shared::DATA_BYTES);
        p.data[..n].copy_from_slice(&out[..n]);
        p.out_len = n as u32;
        p.ret = ret;
        p.reply = shared::REPLY_DONE;
        self.give_turn(thread);
    }

    /// Gives new thread `thread` its first turn: it enters the program.
    pub fn start_thread(&mut self, thread: u32) {
        self.give_turn(thread);
    }

    /// The word thread `thread` waits on, or the one that says it is alive.
    fn thread_word(&self, thread: u32, alive: bool) -> &AtomicU32 {
        let i = (thread as usize).min(shared::MAX_THREADS - 1);
        // SAFETY: naturally aligned u32s inside the mapping, which both sides (and Linux, for
        // `alive`) access atomically only.
        unsafe {
            let entry = std::ptr::addr_of_mut!((*self.page.as_ptr()).threads[i]);
            AtomicU32::from_ptr(if alive {
                std::ptr::addr_of_mut!((*entry).alive)
            } else {
                std::ptr::addr_of_mut!((*entry).turn)
            })
        }
    }

    fn give_turn(&mut self, thread: u32) {
        // The process's turn first: the thread may hand it back as soon as it runs.
        self.turn().store(shared::TURN_PROCESS, Ordering::Release);
        let word = self.thread_word(thread, false);
        word.store(shared::THREAD_GO, Ordering::Release);
        // SAFETY: a futex wake on the thread's shared word.
        unsafe {
            libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, 1);
        }
    }

    /// Waits until thread `thread`, whose exit onionlab has answered, is gone from Linux (so
    /// that nothing of it runs while another thread has the turn), or until the process ends,
    /// stalls or the run is stopped: then the error says which.
    pub fn wait_thread_gone(&mut self, thread: u32, stop: &dyn Fn() -> bool) -> Result<(), Turn> {
        let started = Instant::now();
        loop {
            let alive = self.thread_word(thread, true);
            let id = alive.load(Ordering::Acquire);
            if id == 0 {
                return Ok(());
            }
            // Linux clears the word and wakes it when the thread has ended.
            wait_slice(alive, id);
            if self.thread_word(thread, true).load(Ordering::Acquire) == 0 {
                return Ok(());
            }
            if let Some(end) = self.ended_stalled_or_stopped(started, stop) {
                return Err(end);
            }
        }
    }

    /// Waits (at most the stall limit) for the process to end after onionlab answered its
    /// `exit_group`, killing it if it does not.
    pub fn finish(&mut self) -> Exit {
        match self.wait() {
            Turn::Exited(exit) => exit,
            Turn::Request | Turn::Stalled | Turn::Stopped => {
                self.kill();
                self.exit.unwrap_or(Exit::Signal(libc::SIGKILL))
            }
        }
    }

    /// Kills the process's group and reaps the process.
    pub fn kill(&mut self) {
        if self.exit.is_some() {
            return;
        }
        // SAFETY: killpg on the group the child leads (setpgid in spawn); the child is not
        // reaped yet, so its id still names it.
        unsafe {
            libc::killpg(self.child.id() as i32, libc::SIGKILL);
        }
        self.exit = Some(match self.child.wait() {
            Ok(status) => exit_of(status),
            Err(_) => Exit::Signal(libc::SIGKILL),
        });
    }

    /// The last lines of what the process wrote to its standard error.
    pub fn stderr_tail(&self) -> String {
        let text = std::fs::read_to_string(self.dir.join("stderr")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(5)..].join(" | ")
    }
}

impl Drop for ManagedProcess {
    fn drop(&mut self) {
        self.kill();
        // SAFETY: the mapping made in `spawn`, not used after this.
        unsafe {
            libc::munmap(self.page.as_ptr().cast(), std::mem::size_of::<Shared>());
        }
    }
}

/// Waits on shared word `word` while it holds `expected`, for one [`WAIT_SLICE`] at most;
/// callers loop, as a wake-up may also be spurious.
fn wait_slice(word: &AtomicU32, expected: u32) {
    let slice = libc::timespec {
        tv_sec: 0,
        tv_nsec: WAIT_SLICE.as_nanos() as i64,
    };
    // SAFETY: a futex wait with a time limit on a word of the shared mapping (not private:
    // the other side is another process, or Linux clearing a thread's word).
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &slice as *const libc::timespec,
        );
    }
}

fn exit_of(status: std::process::ExitStatus) -> Exit {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => Exit::Code(code),
        (None, Some(signal)) => Exit::Signal(signal),
        (None, None) => Exit::Signal(0),
    }
}
