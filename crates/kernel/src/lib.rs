//! The simulated kernel of a managed process: what its system calls do, in simulated time.
//!
//! Sans-IO, like the TCP model: the process host hands it one call at a time with the call's
//! simulated time ([`Kernel::call`]) and gets back an [`Outcome`]: the call's result now, "make
//! it natively", "blocked until" a time (the host wakes it with [`Kernel::wake`] then), or the
//! process's exit. The kernel never touches the process or the clock itself, so the same calls
//! at the same times give the same results whatever thread runs the host.
//!
//! What it serves today: sleeping (`nanosleep`, `clock_nanosleep`, relative and absolute), the
//! host's random bytes (`getrandom`, and reads of `/dev/urandom` and `/dev/random`, which the
//! shim opens as descriptors onionlab serves), the host's name (`uname`) and the process's exit.
//! The time and the process's ids never reach it: the shim answers them from the shared page.
//! Every other call is answered `ENOSYS` and counted by name ([`Kernel::unsupported`]), so a
//! run says exactly what a program needed that onionlab does not have.

use onionlab_engine::time::SimTime;
use rand::Rng;

mod names;

/// The highest descriptor number onionlab may serve, plus one (the shim's table).
pub const MAX_FDS: usize = 1024;
/// The most bytes one call may carry each way (the shared page's data area).
pub const DATA_BYTES: usize = 65536;

/// A request that is not a system call: the shim is in place (see `onionlab-process`).
pub const REQ_START: i64 = -1;
/// A request that is not a system call: open a path onionlab serves on placeholder
/// descriptor `args[0]`; the data is the path with its NUL.
pub const REQ_OPEN_VIRTUAL: i64 = -2;

const EINVAL: i64 = 22;
const EBADF: i64 = 9;
const EFAULT: i64 = 14;
const EMFILE: i64 = 24;
const ENOENT: i64 = 2;
const ENOSYS: i64 = 38;

// System call numbers (x86-64) the kernel implements.
const SYS_READ: i64 = 0;
const SYS_WRITE: i64 = 1;
const SYS_CLOSE: i64 = 3;
const SYS_NANOSLEEP: i64 = 35;
const SYS_EXIT: i64 = 60;
const SYS_UNAME: i64 = 63;
const SYS_CLOCK_NANOSLEEP: i64 = 230;
const SYS_EXIT_GROUP: i64 = 231;
const SYS_GETRANDOM: i64 = 318;

/// `clock_nanosleep`'s flag for an absolute deadline.
const TIMER_ABSTIME: i64 = 1;
/// `getrandom`'s flags: GRND_NONBLOCK, GRND_RANDOM, GRND_INSECURE.
const GRND_FLAGS: i64 = 1 | 2 | 4;

/// One system call as the program made it.
#[derive(Clone, Copy, Debug)]
pub struct Call<'a> {
    /// Its number (x86-64), or a `REQ_*`.
    pub nr: i64,
    /// Its arguments as the program passed them (pointers mean nothing here).
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
    /// The process makes it natively.
    Native,
    /// It waits until this simulated time; [`Kernel::wake`] then finishes it.
    Blocked {
        /// When it may go on.
        until: SimTime,
    },
    /// The process exits with this status.
    Exit(i32),
}

/// A descriptor the kernel serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Descriptor {
    /// `/dev/urandom` or `/dev/random`: the host's random bytes.
    Random,
}

/// What a blocked call waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pending {
    /// A sleep: it returns 0 when its time comes.
    Sleep,
}

/// The simulated kernel of one managed process.
pub struct Kernel<R> {
    hostname: String,
    /// The process's wall clock at simulated time 0, in nanoseconds since the Unix epoch.
    epoch_ns: i64,
    rng: R,
    fds: Vec<Option<Descriptor>>,
    virtual_fds: [u8; MAX_FDS / 8],
    pending: Option<Pending>,
    /// Unsupported calls by number (`names::NAMES`' numbering).
    unsupported: Vec<u64>,
    /// Unsupported calls with a number no name has.
    unsupported_unknown: u64,
    calls: u64,
}

impl<R: Rng> Kernel<R> {
    /// The kernel of a process on host `hostname` whose wall clock reads `epoch_ns` (ns since
    /// the Unix epoch) at simulated time 0, drawing its random bytes from `rng`.
    pub fn new(hostname: &str, epoch_ns: i64, rng: R) -> Self {
        Kernel {
            hostname: hostname.to_string(),
            epoch_ns,
            rng,
            fds: Vec::new(),
            virtual_fds: [0; MAX_FDS / 8],
            pending: None,
            unsupported: vec![0; names::NAMES.len()],
            unsupported_unknown: 0,
            calls: 0,
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

    /// Handles `call` made at simulated time `now`; bytes for the program go in `out`
    /// (cleared first).
    pub fn call(&mut self, now: SimTime, call: &Call<'_>, out: &mut Vec<u8>) -> Outcome {
        out.clear();
        self.calls += 1;
        let a = call.args;
        match call.nr {
            REQ_START => Outcome::Done(0),
            REQ_OPEN_VIRTUAL => self.open_virtual(a[0], call.data),
            SYS_NANOSLEEP => match timespec(call.data) {
                Ok(d) => self.sleep(now, now.saturating_add(d)),
                Err(e) => Outcome::Done(-e),
            },
            SYS_CLOCK_NANOSLEEP => {
                if !matches!(a[0], 0 | 1 | 7 | 8 | 9 | 11) {
                    return Outcome::Done(-EINVAL);
                }
                match timespec(call.data) {
                    Ok(t) if a[1] & TIMER_ABSTIME != 0 => {
                        let until = (t as i64).saturating_sub(self.epoch_ns).max(0) as u64;
                        self.sleep(now, until)
                    }
                    Ok(d) => self.sleep(now, now.saturating_add(d)),
                    Err(e) => Outcome::Done(-e),
                }
            }
            SYS_GETRANDOM => {
                if a[2] & !GRND_FLAGS != 0 {
                    return Outcome::Done(-EINVAL);
                }
                Outcome::Done(self.random(a[1], out))
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
                Outcome::Done(0)
            }
            SYS_READ => match self.descriptor(a[0]) {
                Some(Descriptor::Random) => Outcome::Done(self.random(a[2], out)),
                None => Outcome::Done(-EBADF),
            },
            SYS_WRITE => match self.descriptor(a[0]) {
                // What is written to a random device is taken and changes nothing here.
                Some(Descriptor::Random) => Outcome::Done(call.data.len() as i64),
                None => Outcome::Done(-EBADF),
            },
            SYS_CLOSE => match self.descriptor(a[0]) {
                Some(_) => {
                    self.set_fd(a[0] as usize, None);
                    Outcome::Done(0)
                }
                None => Outcome::Done(-EBADF),
            },
            SYS_EXIT | SYS_EXIT_GROUP => Outcome::Exit((a[0] & 0xff) as i32),
            nr => {
                match usize::try_from(nr)
                    .ok()
                    .and_then(|n| self.unsupported.get_mut(n))
                {
                    Some(count) => *count += 1,
                    None => self.unsupported_unknown += 1,
                }
                Outcome::Done(-ENOSYS)
            }
        }
    }

    /// Finishes the blocked call whose time has come (the host calls this at the time
    /// [`Outcome::Blocked`] gave).
    pub fn wake(&mut self, _now: SimTime, out: &mut Vec<u8>) -> Outcome {
        out.clear();
        match self.pending.take() {
            Some(Pending::Sleep) => Outcome::Done(0),
            None => Outcome::Done(-EINVAL),
        }
    }

    fn sleep(&mut self, now: SimTime, until: SimTime) -> Outcome {
        if until <= now {
            return Outcome::Done(0);
        }
        self.pending = Some(Pending::Sleep);
        Outcome::Blocked { until }
    }

    fn random(&mut self, len: i64, out: &mut Vec<u8>) -> i64 {
        let n = (len.max(0) as usize).min(DATA_BYTES);
        out.resize(n, 0);
        self.rng.fill_bytes(out);
        n as i64
    }

    fn descriptor(&self, fd: i64) -> Option<Descriptor> {
        usize::try_from(fd)
            .ok()
            .and_then(|fd| self.fds.get(fd).copied().flatten())
    }

    fn set_fd(&mut self, fd: usize, d: Option<Descriptor>) {
        if self.fds.len() <= fd {
            self.fds.resize(fd + 1, None);
        }
        self.fds[fd] = d;
        let (byte, bit) = (fd / 8, 1u8 << (fd % 8));
        if d.is_some() {
            self.virtual_fds[byte] |= bit;
        } else {
            self.virtual_fds[byte] &= !bit;
        }
    }

    fn open_virtual(&mut self, fd: i64, path: &[u8]) -> Outcome {
        let path = path.split(|&b| b == 0).next().unwrap_or_default();
        if !matches!(path, b"/dev/urandom" | b"/dev/random") {
            return Outcome::Done(-ENOENT);
        }
        match usize::try_from(fd) {
            Ok(fd) if fd < MAX_FDS => {
                self.set_fd(fd, Some(Descriptor::Random));
                Outcome::Done(0)
            }
            _ => Outcome::Done(-EMFILE),
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

    fn kernel() -> Kernel<onionlab_engine::rng::HostRng> {
        Kernel::new("process-a-1", 946_684_800_000_000_000, host_rng(1, 2, 3))
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
            k.call(7, &call(SYS_NANOSLEEP, [0; 6], &d), &mut out),
            Outcome::Blocked {
                until: 1_000_000_507
            }
        );
        assert_eq!(k.wake(1_000_000_507, &mut out), Outcome::Done(0));
        let zero = ts(0, 0);
        assert_eq!(
            k.call(9, &call(SYS_NANOSLEEP, [0; 6], &zero), &mut out),
            Outcome::Done(0)
        );
        let bad = ts(0, 1_000_000_000);
        assert_eq!(
            k.call(9, &call(SYS_NANOSLEEP, [0; 6], &bad), &mut out),
            Outcome::Done(-EINVAL)
        );
        assert_eq!(
            k.call(9, &call(SYS_NANOSLEEP, [0; 6], &[]), &mut out),
            Outcome::Done(-EFAULT)
        );
        // An absolute deadline on the process's clock: 2 s after the epoch is 2 s simulated.
        let at = ts(946_684_802, 0);
        assert_eq!(
            k.call(
                5,
                &call(SYS_CLOCK_NANOSLEEP, [0, TIMER_ABSTIME, 0, 0, 0, 0], &at),
                &mut out
            ),
            Outcome::Blocked {
                until: 2_000_000_000
            }
        );
        k.wake(2_000_000_000, &mut out);
        let past = ts(946_684_801, 0);
        assert_eq!(
            k.call(
                3_000_000_000,
                &call(SYS_CLOCK_NANOSLEEP, [1, TIMER_ABSTIME, 0, 0, 0, 0], &past),
                &mut out
            ),
            Outcome::Done(0)
        );
        assert_eq!(
            k.call(
                0,
                &call(SYS_CLOCK_NANOSLEEP, [2, 0, 0, 0, 0, 0], &d),
                &mut out
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
            a.call(0, &call(SYS_GETRANDOM, [0, 32, 0, 0, 0, 0], &[]), &mut x),
            Outcome::Done(32)
        );
        assert_eq!(
            b.call(
                0,
                &call(REQ_OPEN_VIRTUAL, [5, 0, 0, 0, 0, 0], b"/dev/urandom\0"),
                &mut y
            ),
            Outcome::Done(0)
        );
        assert_eq!(b.virtual_fds()[0], 1 << 5);
        assert_eq!(
            b.call(0, &call(SYS_READ, [5, 0, 32, 0, 0, 0], &[]), &mut y),
            Outcome::Done(32)
        );
        assert_eq!(x, y, "one stream, the same bytes");
        assert_eq!(
            b.call(0, &call(SYS_CLOSE, [5, 0, 0, 0, 0, 0], &[]), &mut y),
            Outcome::Done(0)
        );
        assert_eq!(b.virtual_fds()[0], 0);
        assert_eq!(
            b.call(0, &call(SYS_READ, [5, 0, 32, 0, 0, 0], &[]), &mut y),
            Outcome::Done(-EBADF)
        );
        assert_eq!(
            a.call(0, &call(SYS_GETRANDOM, [0, 8, 0x10, 0, 0, 0], &[]), &mut x),
            Outcome::Done(-EINVAL)
        );
        assert_eq!(
            a.call(
                0,
                &call(REQ_OPEN_VIRTUAL, [3, 0, 0, 0, 0, 0], b"/etc/passwd\0"),
                &mut x
            ),
            Outcome::Done(-ENOENT)
        );
    }

    #[test]
    fn uname_names_the_host_and_unsupported_calls_are_counted_by_name() {
        let mut k = kernel();
        let mut out = Vec::new();
        assert_eq!(
            k.call(0, &call(SYS_UNAME, [0; 6], &[]), &mut out),
            Outcome::Done(0)
        );
        assert_eq!(out.len(), 6 * 65);
        assert_eq!(&out[65..65 + 11], b"process-a-1");
        assert_eq!(out[65 + 11], 0);
        let socket = 41;
        for _ in 0..3 {
            assert_eq!(
                k.call(0, &call(socket, [2, 1, 0, 0, 0, 0], &[]), &mut out),
                Outcome::Done(-ENOSYS)
            );
        }
        assert_eq!(
            k.call(0, &call(100_000, [0; 6], &[]), &mut out),
            Outcome::Done(-ENOSYS)
        );
        assert_eq!(
            k.unsupported(),
            vec![("socket".to_string(), 3), ("unknown".to_string(), 1)]
        );
        assert_eq!(
            k.call(
                0,
                &call(SYS_EXIT_GROUP, [300, 0, 0, 0, 0, 0], &[]),
                &mut out
            ),
            Outcome::Exit(44)
        );
    }
}
