//! `timerfd`: timers a program reads, polls or waits on like any descriptor.
//!
//! A timer keeps its next expiry in simulated time and its period; how many times it has
//! expired by a given time is arithmetic, so nothing happens at an expiry unless a thread is
//! blocked on descriptors: the host then asks [`Kernel::next_timer`] when the earliest timer
//! expires and tries the blocked calls again at that time ([`Kernel::retry`]), when the timer
//! has become readable. Every clock reads the same simulated time here, so a timer on any
//! clock behaves the same, and an absolute time is on the process's wall clock.

use onionlab_engine::time::SimTime;
use rand::Rng;

use crate::*;

const TFD_TIMER_ABSTIME: i64 = 1;
const TFD_TIMER_CANCEL_ON_SET: i64 = 2;
const TFD_NONBLOCK: i64 = 0o4000;
const TFD_CLOEXEC: i64 = 0o2000000;
/// Bytes of a `struct itimerspec`: the period, then the time to the next expiry.
const ITIMERSPEC_BYTES: usize = 32;

/// A `timerfd`.
#[derive(Debug, Default)]
pub(crate) struct TimerFd {
    /// When it next expires, if it is armed (it may be in the past: expiries are counted when
    /// they are looked at).
    next: Option<SimTime>,
    /// Its period; 0: it expires once.
    interval: u64,
    /// Expiries counted and not read yet.
    unread: u64,
    /// Expiries counted since it was made, for edge-triggered epoll.
    counted: u64,
    pub(crate) nonblocking: bool,
}

impl TimerFd {
    /// Expiries from `next` up to `now` not counted yet, and the next expiry after them.
    fn due(&self, now: SimTime) -> (u64, Option<SimTime>) {
        match self.next {
            Some(next) if next <= now => match (now - next).checked_div(self.interval) {
                // A period of 0: it expires once.
                None => (1, None),
                Some(periods) => {
                    let n = periods + 1;
                    (
                        n,
                        Some(next.saturating_add(n.saturating_mul(self.interval))),
                    )
                }
            },
            other => (0, other),
        }
    }

    /// Counts the expiries up to `now`.
    fn advance(&mut self, now: SimTime) {
        let (n, next) = self.due(now);
        self.unread = self.unread.saturating_add(n);
        self.counted = self.counted.saturating_add(n);
        self.next = next;
    }

    /// Its readiness at `now`, as `readiness` gives it: readable once it has expired, and a
    /// generation that moves with each expiry.
    pub(crate) fn readiness(&self, now: SimTime) -> (u32, u64) {
        let (n, _) = self.due(now);
        let mask = if self.unread + n > 0 {
            events::EPOLLIN
        } else {
            0
        };
        (mask, self.counted + n)
    }

    /// When it next expires after `now`, if it is armed.
    fn next_after(&self, now: SimTime) -> Option<SimTime> {
        self.due(now).1
    }

    /// The setting as `timerfd_gettime` gives it: the period, then the time left.
    fn setting(&self, now: SimTime, out: &mut Vec<u8>) {
        let left = self.next_after(now).map_or(0, |t| t - now);
        for ns in [self.interval, left] {
            out.extend_from_slice(&((ns / 1_000_000_000) as i64).to_le_bytes());
            out.extend_from_slice(&((ns % 1_000_000_000) as i64).to_le_bytes());
        }
    }
}

impl<R: Rng, S: Copy + Eq + std::fmt::Debug> Kernel<R, S> {
    /// `timerfd_create(clock, flags)` on the descriptor number the shim reserved.
    pub(crate) fn timerfd_create(&mut self, clock: i64, flags: i64, fd: i64) -> i64 {
        // CLOCK_REALTIME, _MONOTONIC, _BOOTTIME, _REALTIME_ALARM, _BOOTTIME_ALARM.
        if !matches!(clock, 0 | 1 | 7 | 8 | 9) || flags & !(TFD_NONBLOCK | TFD_CLOEXEC) != 0 {
            return -EINVAL;
        }
        match usize::try_from(fd).ok().filter(|&f| f < MAX_FDS) {
            Some(f) => {
                let t = TimerFd {
                    nonblocking: flags & TFD_NONBLOCK != 0,
                    ..TimerFd::default()
                };
                self.set_fd(f, Some(Descriptor::Timer(Box::new(t))));
                fd
            }
            None => -EMFILE,
        }
    }

    fn timer_mut(&mut self, fd: i64) -> Option<&mut TimerFd> {
        match usize::try_from(fd).ok().and_then(|f| self.fds.get_mut(f))? {
            Some(Descriptor::Timer(t)) => Some(t),
            _ => None,
        }
    }

    /// `timerfd_settime(fd, flags, new, old)` with `new` (a `struct itimerspec`) in `data`;
    /// the old setting goes to `out`. Setting a timer forgets its unread expiries, as Linux
    /// does.
    pub(crate) fn timerfd_settime(
        &mut self,
        fd: i64,
        flags: i64,
        data: &[u8],
        out: &mut Vec<u8>,
    ) -> i64 {
        if flags & !(TFD_TIMER_ABSTIME | TFD_TIMER_CANCEL_ON_SET) != 0 {
            return -EINVAL;
        }
        if data.len() < ITIMERSPEC_BYTES {
            return -EFAULT;
        }
        let (interval, value) = match (timespec(&data[..16]), timespec(&data[16..32])) {
            (Ok(i), Ok(v)) => (i, v),
            (Err(e), _) | (_, Err(e)) => return -e,
        };
        let (now, epoch) = (self.now, self.epoch_ns);
        let Some(t) = self.timer_mut(fd) else {
            return -EINVAL;
        };
        t.setting(now, out);
        t.unread = 0;
        t.interval = interval;
        t.next = match value {
            0 => None,
            v if flags & TFD_TIMER_ABSTIME != 0 => {
                Some((v as i64).saturating_sub(epoch).max(0) as u64)
            }
            v => Some(now.saturating_add(v)),
        };
        0
    }

    /// `timerfd_gettime(fd, cur)`: the setting goes to `out`.
    pub(crate) fn timerfd_gettime(&mut self, fd: i64, out: &mut Vec<u8>) -> i64 {
        let now = self.now;
        match self.timer_mut(fd) {
            Some(t) => {
                t.setting(now, out);
                0
            }
            None => -EINVAL,
        }
    }

    /// A `read` of a timer: the count of expiries since the last read, as eight bytes, once
    /// there is one.
    pub(crate) fn timerfd_read(&mut self, fd: i64, len: i64, out: &mut Vec<u8>) -> Step {
        let now = self.now;
        let Some(t) = self.timer_mut(fd) else {
            return Step::Done(-EBADF);
        };
        if len < 8 {
            return Step::Done(-EINVAL);
        }
        t.advance(now);
        if t.unread == 0 {
            return if t.nonblocking {
                Step::Done(-EAGAIN)
            } else {
                Step::Block
            };
        }
        out.extend_from_slice(&std::mem::take(&mut t.unread).to_ne_bytes());
        Step::Done(8)
    }

    /// When the earliest timer next expires, if a thread is blocked on descriptors (a timer's
    /// expiry changes nothing for a process that does not wait): the host tries the blocked
    /// calls again then.
    pub fn next_timer(&self) -> Option<SimTime> {
        if !self.blocked_on_descriptors() {
            return None;
        }
        self.fds
            .iter()
            .filter_map(|d| match d {
                Some(Descriptor::Timer(t)) => t.next_after(self.now),
                _ => None,
            })
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use onionlab_engine::host_rng;

    type TestKernel = Kernel<onionlab_engine::rng::HostRng, u32>;

    fn itimerspec(interval: u64, value: u64) -> Vec<u8> {
        let mut v = Vec::new();
        for ns in [interval, value] {
            v.extend_from_slice(&((ns / 1_000_000_000) as i64).to_le_bytes());
            v.extend_from_slice(&((ns % 1_000_000_000) as i64).to_le_bytes());
        }
        v
    }

    fn call(k: &mut TestKernel, now: SimTime, nr: i64, args: [i64; 6], data: &[u8]) -> Outcome {
        k.call(now, &Call { nr, args, data }, &mut Vec::new(), &mut Offline)
    }

    #[test]
    fn a_periodic_timer_counts_its_expiries_and_wakes_a_blocked_read() {
        let mut k: TestKernel = Kernel::new("h", 1000, 1_000_000_000_000, host_rng(1, 1, 1));
        let mut out = Vec::new();
        assert_eq!(
            call(&mut k, 0, SYS_TIMERFD_CREATE, [1, 0, 0, 0, 0, 5], &[]),
            Outcome::Done(5)
        );
        assert_eq!(
            call(&mut k, 0, SYS_TIMERFD_CREATE, [3, 0, 0, 0, 0, 6], &[]),
            Outcome::Done(-EINVAL)
        );
        // First at 100 ms, then every 250 ms, set at 1 s.
        let spec = itimerspec(250_000_000, 100_000_000);
        assert_eq!(
            call(
                &mut k,
                1_000_000_000,
                SYS_TIMERFD_SETTIME,
                [5, 0, 0, 0, 0, 0],
                &spec
            ),
            Outcome::Done(0)
        );
        assert_eq!(k.next_timer(), None, "nobody waits");
        // A read before the first expiry blocks; the host wakes it at the expiry.
        assert_eq!(
            call(&mut k, 1_050_000_000, SYS_READ, [5, 0, 8, 0, 0, 0], &[]),
            Outcome::Blocked { until: None }
        );
        assert_eq!(k.next_timer(), Some(1_100_000_000));
        assert_eq!(
            k.retry_main(1_100_000_000, &mut out, &mut Offline),
            Outcome::Done(8)
        );
        assert_eq!(out, 1u64.to_ne_bytes());
        // 600 ms later: two more expiries (1.35 s and 1.6 s); 100 ms to the next.
        k.call(
            1_700_000_000,
            &Call {
                nr: SYS_TIMERFD_GETTIME,
                args: [5, 0, 0, 0, 0, 0],
                data: &[],
            },
            &mut out,
            &mut Offline,
        );
        assert_eq!(out, itimerspec(250_000_000, 150_000_000));
        k.call(
            1_700_000_000,
            &Call {
                nr: SYS_READ,
                args: [5, 0, 8, 0, 0, 0],
                data: &[],
            },
            &mut out,
            &mut Offline,
        );
        assert_eq!(out, 2u64.to_ne_bytes());
        // Absolute, one-shot: at 2 s on the process's clock; then disarmed by a zero value.
        let at = itimerspec(0, 1_000_000_000_000 + 2_000_000_000);
        assert_eq!(
            call(
                &mut k,
                1_700_000_000,
                SYS_TIMERFD_SETTIME,
                [5, 1, 0, 0, 0, 0],
                &at
            ),
            Outcome::Done(0)
        );
        let t = match &k.fds[5] {
            Some(Descriptor::Timer(t)) => t,
            _ => unreachable!(),
        };
        assert_eq!(t.readiness(1_999_999_999), (0, 3));
        assert_eq!(t.readiness(5_000_000_000), (events::EPOLLIN, 4));
        let off = itimerspec(0, 0);
        call(
            &mut k,
            1_800_000_000,
            SYS_TIMERFD_SETTIME,
            [5, 0, 0, 0, 0, 0],
            &off,
        );
        // Non-blocking now: nothing to read says so.
        call(
            &mut k,
            1_800_000_000,
            SYS_FCNTL,
            [5, 4, 0o4000, 0, 0, 0],
            &[],
        );
        assert_eq!(
            call(&mut k, 9_000_000_000, SYS_READ, [5, 0, 8, 0, 0, 0], &[]),
            Outcome::Done(-EAGAIN)
        );
    }
}
