//! Readiness and waiting on many descriptors: `epoll` (level- and edge-triggered), and
//! `eventfd`, the counter event loops wake themselves with.
//!
//! Every descriptor has a readiness mask (the `EPOLL*` bits, which are `poll`'s for the
//! events they share) and a generation that counts what has happened to it: bytes or room
//! arriving on a socket, a connection waiting on a listener, a write to an eventfd. A
//! level-triggered entry reports a descriptor while it is ready; an edge-triggered one only when
//! its generation has moved since the entry last reported it, which is when Linux's would: on
//! each arrival, not once per state.

use rand::Rng;

use crate::net::SocketState;
use crate::*;

pub(crate) const EPOLLIN: u32 = 0x1;
pub(crate) const EPOLLOUT: u32 = 0x4;
pub(crate) const EPOLLERR: u32 = 0x8;
pub(crate) const EPOLLHUP: u32 = 0x10;
pub(crate) const EPOLLRDHUP: u32 = 0x2000;
const EPOLLONESHOT: u32 = 1 << 30;
const EPOLLET: u32 = 1 << 31;
const EPOLL_CTL_ADD: i64 = 1;
const EPOLL_CTL_DEL: i64 = 2;
const EPOLL_CTL_MOD: i64 = 3;
/// Bytes of a `struct epoll_event` on x86-64, where it is packed.
const EVENT_BYTES: usize = 12;
const EEXIST: i64 = 17;
const EPERM: i64 = 1;
/// `eventfd`'s largest count.
const EVENTFD_MAX: u64 = u64::MAX - 1;
const EFD_SEMAPHORE: i64 = 1;
const EFD_NONBLOCK: i64 = 0o4000;

/// An `epoll` instance's interest list, in the order descriptors were added.
#[derive(Debug, Default)]
pub(crate) struct Epoll {
    entries: Vec<Entry>,
}

#[derive(Debug)]
struct Entry {
    fd: i64,
    events: u32,
    data: u64,
    /// The descriptor's generation when this entry last reported it (edge-triggered);
    /// `u64::MAX`: never, so that it reports what it finds ready first.
    seen: u64,
}

/// An `eventfd`.
#[derive(Debug)]
pub(crate) struct EventFd {
    count: u64,
    semaphore: bool,
    pub(crate) nonblocking: bool,
    generation: u64,
}

impl<R: Rng, S: Copy + Eq + std::fmt::Debug> Kernel<R, S> {
    /// The readiness mask of descriptor `fd` and its generation; `None` for a descriptor the
    /// kernel does not serve.
    pub(crate) fn readiness<N: Network<Socket = S>>(&self, fd: i64, net: &N) -> Option<(u32, u64)> {
        Some(match self.descriptor(fd)? {
            Descriptor::Random => (EPOLLIN | EPOLLOUT, 0),
            Descriptor::Socket(s) => {
                let mut mask = 0;
                if s.readable(net) {
                    mask |= EPOLLIN;
                }
                if s.writable(net) {
                    mask |= EPOLLOUT;
                }
                match s.state {
                    SocketState::Failed { .. } => mask |= EPOLLERR | EPOLLHUP,
                    SocketState::Connected {
                        peer_closed: true, ..
                    } => mask |= EPOLLRDHUP,
                    _ => {}
                }
                if s.hung_up() {
                    mask |= EPOLLHUP;
                }
                (mask, s.generation)
            }
            Descriptor::Udp(u) => {
                let mask = if u.readable() {
                    EPOLLIN | EPOLLOUT
                } else {
                    EPOLLOUT
                };
                (mask, u.generation)
            }
            Descriptor::EventFd(e) => {
                let mut mask = 0;
                if e.count > 0 {
                    mask |= EPOLLIN;
                }
                if e.count < EVENTFD_MAX {
                    mask |= EPOLLOUT;
                }
                (mask, e.generation)
            }
            Descriptor::Pipe(p) => self.pipe_readiness(p),
            Descriptor::Timer(t) => t.readiness(self.now),
            // An epoll instance inside another is not watched: never ready.
            Descriptor::Epoll(_) => (0, 0),
        })
    }

    pub(crate) fn epoll_create(&mut self, fd: i64) -> i64 {
        match usize::try_from(fd).ok().filter(|&f| f < MAX_FDS) {
            Some(fd) => {
                self.set_fd(fd, Some(Descriptor::Epoll(Box::default())));
                fd as i64
            }
            None => -EMFILE,
        }
    }

    pub(crate) fn epoll_ctl(&mut self, epfd: i64, op: i64, fd: i64, event: &[u8]) -> i64 {
        if epfd == fd {
            return -EINVAL;
        }
        match self.descriptor(fd) {
            None => return -EPERM, // the process's own files: always ready, as Linux says
            Some(Descriptor::Epoll(_)) => return -EINVAL,
            Some(_) => {}
        }
        let (events, data) = if op == EPOLL_CTL_DEL {
            (0, 0)
        } else if event.len() < EVENT_BYTES {
            return -EFAULT;
        } else {
            (
                u32::from_ne_bytes(event[..4].try_into().expect("4 bytes")),
                u64::from_ne_bytes(event[4..12].try_into().expect("8 bytes")),
            )
        };
        let Some(Descriptor::Epoll(ep)) = usize::try_from(epfd)
            .ok()
            .and_then(|e| self.fds.get_mut(e))
            .and_then(Option::as_mut)
        else {
            return -EBADF;
        };
        let at = ep.entries.iter().position(|e| e.fd == fd);
        match (op, at) {
            (EPOLL_CTL_ADD, Some(_)) => -EEXIST,
            (EPOLL_CTL_ADD, None) => {
                ep.entries.push(Entry {
                    fd,
                    events,
                    data,
                    seen: u64::MAX,
                });
                0
            }
            (EPOLL_CTL_MOD, Some(i)) => {
                ep.entries[i] = Entry {
                    fd,
                    events,
                    data,
                    seen: u64::MAX,
                };
                0
            }
            (EPOLL_CTL_DEL, Some(i)) => {
                ep.entries.remove(i);
                0
            }
            (EPOLL_CTL_MOD | EPOLL_CTL_DEL, None) => -ENOENT,
            _ => -EINVAL,
        }
    }

    /// `epoll_wait`: up to `max` ready entries as `struct epoll_event`s in `out`.
    pub(crate) fn epoll_wait<N: Network<Socket = S>>(
        &mut self,
        epfd: i64,
        max: i64,
        timeout: i64,
        out: &mut Vec<u8>,
        net: &N,
    ) -> Step {
        if max <= 0 || max as usize * EVENT_BYTES > DATA_BYTES {
            return Step::Done(-EINVAL);
        }
        let Some(Descriptor::Epoll(ep)) = usize::try_from(epfd)
            .ok()
            .and_then(|e| self.fds.get_mut(e))
            .and_then(Option::as_mut)
        else {
            return Step::Done(-EBADF);
        };
        // Taken out while the other descriptors are looked at, and put back.
        let mut entries = std::mem::take(&mut ep.entries);
        let mut reported = 0;
        for e in entries.iter_mut() {
            if reported == max {
                break;
            }
            let Some((mask, generation)) = self.readiness(e.fd, net) else {
                continue;
            };
            let mask = mask & (e.events | EPOLLERR | EPOLLHUP);
            let fresh = e.events & EPOLLET == 0 || generation != e.seen;
            if mask == 0 || !fresh || e.events & !(EPOLLET | EPOLLONESHOT) == 0 {
                continue;
            }
            e.seen = generation;
            if e.events & EPOLLONESHOT != 0 {
                e.events &= EPOLLET | EPOLLONESHOT;
            }
            out.extend_from_slice(&mask.to_ne_bytes());
            out.extend_from_slice(&e.data.to_ne_bytes());
            reported += 1;
        }
        if let Some(Some(Descriptor::Epoll(ep))) = self.fds.get_mut(epfd as usize) {
            ep.entries = entries;
        }
        if reported > 0 || timeout == 0 {
            Step::Done(reported)
        } else {
            Step::Block
        }
    }

    /// Removes descriptor `fd` from every epoll instance, as closing it does.
    pub(crate) fn forget_in_epolls(&mut self, fd: i64) {
        for d in self.fds.iter_mut().flatten() {
            if let Descriptor::Epoll(ep) = d {
                ep.entries.retain(|e| e.fd != fd);
            }
        }
    }

    pub(crate) fn eventfd(&mut self, initial: i64, flags: i64, fd: i64) -> i64 {
        match usize::try_from(fd).ok().filter(|&f| f < MAX_FDS) {
            Some(fd) => {
                let e = EventFd {
                    count: initial.max(0) as u64,
                    semaphore: flags & EFD_SEMAPHORE != 0,
                    nonblocking: flags & EFD_NONBLOCK != 0,
                    generation: 0,
                };
                self.set_fd(fd, Some(Descriptor::EventFd(e)));
                fd as i64
            }
            None => -EMFILE,
        }
    }

    /// A read (`write` false) or write of an eventfd's 8-byte counter.
    pub(crate) fn eventfd_io(
        &mut self,
        fd: i64,
        write: bool,
        len: i64,
        data: &[u8],
        out: &mut Vec<u8>,
    ) -> Step {
        let Some(Some(Descriptor::EventFd(e))) =
            usize::try_from(fd).ok().and_then(|f| self.fds.get_mut(f))
        else {
            return Step::Done(-EBADF);
        };
        if len < 8 {
            return Step::Done(-EINVAL);
        }
        if write {
            if data.len() < 8 {
                return Step::Done(-EFAULT);
            }
            let add = u64::from_ne_bytes(data[..8].try_into().expect("8 bytes"));
            if add == u64::MAX {
                return Step::Done(-EINVAL);
            }
            if add > EVENTFD_MAX - e.count {
                return if e.nonblocking {
                    Step::Done(-EAGAIN)
                } else {
                    Step::Block
                };
            }
            e.count += add;
            e.generation += 1;
            return Step::Done(8);
        }
        if e.count == 0 {
            return if e.nonblocking {
                Step::Done(-EAGAIN)
            } else {
                Step::Block
            };
        }
        let value = if e.semaphore { 1 } else { e.count };
        e.count -= value;
        e.generation += 1;
        out.extend_from_slice(&value.to_ne_bytes());
        Step::Done(8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use onionlab_engine::host_rng;

    type TestKernel = Kernel<onionlab_engine::rng::HostRng, u32>;

    fn call(
        k: &mut TestKernel,
        nr: i64,
        args: [i64; 6],
        data: &[u8],
        out: &mut Vec<u8>,
    ) -> Outcome {
        k.call(0, &Call { nr, args, data }, out, &mut Offline)
    }

    fn event(events: u32, data: u64) -> Vec<u8> {
        let mut e = events.to_ne_bytes().to_vec();
        e.extend_from_slice(&data.to_ne_bytes());
        e
    }

    #[test]
    fn epoll_reports_an_eventfd_by_level_or_by_edge() {
        let mut k: TestKernel = Kernel::new("h", 1000, 0, host_rng(1, 1, 1));
        let mut out = Vec::new();
        assert_eq!(
            call(
                &mut k,
                SYS_EVENTFD2,
                [0, EFD_NONBLOCK, 0, 0, 0, 3],
                &[],
                &mut out
            ),
            Outcome::Done(3)
        );
        assert_eq!(
            call(&mut k, SYS_EPOLL_CREATE1, [0, 0, 0, 0, 0, 4], &[], &mut out),
            Outcome::Done(4)
        );
        let wait = |k: &mut TestKernel, out: &mut Vec<u8>| {
            call(k, SYS_EPOLL_WAIT, [4, 0, 8, 0, 0, 0], &[], out)
        };
        let et = event(EPOLLIN | EPOLLET, 7);
        assert_eq!(
            call(
                &mut k,
                SYS_EPOLL_CTL,
                [4, EPOLL_CTL_ADD, 3, 0, 0, 0],
                &et,
                &mut out
            ),
            Outcome::Done(0)
        );
        assert_eq!(
            call(
                &mut k,
                SYS_EPOLL_CTL,
                [4, EPOLL_CTL_ADD, 3, 0, 0, 0],
                &et,
                &mut out
            ),
            Outcome::Done(-EEXIST)
        );
        assert_eq!(wait(&mut k, &mut out), Outcome::Done(0));
        let two = 2u64.to_ne_bytes();
        assert_eq!(
            call(&mut k, SYS_WRITE, [3, 0, 8, 0, 0, 0], &two, &mut out),
            Outcome::Done(8)
        );
        assert_eq!(wait(&mut k, &mut out), Outcome::Done(1));
        assert_eq!(out, event(EPOLLIN, 7));
        // Edge-triggered: nothing new, nothing reported; a new write is a new edge.
        assert_eq!(wait(&mut k, &mut out), Outcome::Done(0));
        assert_eq!(
            call(&mut k, SYS_WRITE, [3, 0, 8, 0, 0, 0], &two, &mut out),
            Outcome::Done(8)
        );
        assert_eq!(wait(&mut k, &mut out), Outcome::Done(1));
        // Level-triggered: reported as long as it is ready.
        let lt = event(EPOLLIN, 9);
        assert_eq!(
            call(
                &mut k,
                SYS_EPOLL_CTL,
                [4, EPOLL_CTL_MOD, 3, 0, 0, 0],
                &lt,
                &mut out
            ),
            Outcome::Done(0)
        );
        assert_eq!(wait(&mut k, &mut out), Outcome::Done(1));
        assert_eq!(wait(&mut k, &mut out), Outcome::Done(1));
        assert_eq!(out, event(EPOLLIN, 9));
        assert_eq!(
            call(&mut k, SYS_READ, [3, 0, 8, 0, 0, 0], &[], &mut out),
            Outcome::Done(8)
        );
        assert_eq!(out, 4u64.to_ne_bytes());
        assert_eq!(wait(&mut k, &mut out), Outcome::Done(0));
        assert_eq!(
            call(&mut k, SYS_READ, [3, 0, 8, 0, 0, 0], &[], &mut out),
            Outcome::Done(-EAGAIN)
        );
        // O_NONBLOCK through fcntl, the same for every kind of descriptor.
        let fcntl = |k: &mut TestKernel, fd, cmd, arg| {
            call(k, SYS_FCNTL, [fd, cmd, arg, 0, 0, 0], &[], &mut Vec::new())
        };
        assert_eq!(fcntl(&mut k, 3, 3, 0), Outcome::Done(2 | EFD_NONBLOCK));
        assert_eq!(fcntl(&mut k, 3, 4, 0), Outcome::Done(0));
        assert_eq!(fcntl(&mut k, 3, 3, 0), Outcome::Done(2));
        assert_eq!(fcntl(&mut k, 4, 3, 0), Outcome::Done(2));
        assert_eq!(fcntl(&mut k, 9, 3, 0), Outcome::Done(-EBADF));
        assert_eq!(fcntl(&mut k, 3, 4, EFD_NONBLOCK), Outcome::Done(0));
        // A wait with a timeout blocks until it; closing forgets the descriptor.
        assert_eq!(
            call(&mut k, SYS_EPOLL_WAIT, [4, 0, 8, 5, 0, 0], &[], &mut out),
            Outcome::Blocked {
                until: Some(5_000_000)
            }
        );
        assert_eq!(
            k.wake_main(5_000_000, &mut out, &mut Offline),
            Outcome::Done(0)
        );
        assert_eq!(
            call(&mut k, SYS_CLOSE, [3, 0, 0, 0, 0, 0], &[], &mut out),
            Outcome::Done(0)
        );
        assert_eq!(
            call(
                &mut k,
                SYS_EPOLL_CTL,
                [4, EPOLL_CTL_DEL, 3, 0, 0, 0],
                &[],
                &mut out
            ),
            Outcome::Done(-EPERM)
        );
        // A semaphore eventfd counts down by one.
        call(
            &mut k,
            SYS_EVENTFD2,
            [3, EFD_SEMAPHORE, 0, 0, 0, 5],
            &[],
            &mut out,
        );
        assert_eq!(
            call(&mut k, SYS_READ, [5, 0, 8, 0, 0, 0], &[], &mut out),
            Outcome::Done(8)
        );
        assert_eq!(out, 1u64.to_ne_bytes());
    }
}
