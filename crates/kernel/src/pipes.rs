//! Pipes and socket pairs inside one process: byte buffers the kernel holds between two
//! descriptors. An event loop wakes itself through one (libevent's signal handling writes to a
//! socket pair), so a program that only ever talks to itself this way needs no network.

use std::collections::VecDeque;

use rand::Rng;

use crate::*;

/// Bytes a pipe holds before a write waits, as Linux's default pipe capacity.
const CAPACITY: usize = 65_536;
const O_NONBLOCK: i64 = 0o4000;
const SOCK_NONBLOCK: i64 = 0o4000;
const AF_UNIX: i64 = 1;
const SOCK_STREAM: i64 = 1;
const MSG_DONTWAIT: i64 = 0x40;

/// One direction's buffer, with how many descriptors still read and write it.
#[derive(Debug, Default)]
pub(crate) struct Buffer {
    bytes: VecDeque<u8>,
    readers: u32,
    writers: u32,
    generation: u64,
}

/// A descriptor on pipe buffers: the end of a pipe (one buffer, one way) or of a socket pair
/// (reads one buffer, writes the other).
#[derive(Debug)]
pub(crate) struct PipeEnd {
    read: Option<usize>,
    write: Option<usize>,
    pub(crate) nonblocking: bool,
}

impl<R: Rng, S: Copy + Eq + std::fmt::Debug> Kernel<R, S> {
    fn new_buffer(&mut self, readers: u32, writers: u32) -> usize {
        let b = Buffer {
            readers,
            writers,
            ..Buffer::default()
        };
        match self.buffers.iter().position(Option::is_none) {
            Some(i) => {
                self.buffers[i] = Some(b);
                i
            }
            None => {
                self.buffers.push(Some(b));
                self.buffers.len() - 1
            }
        }
    }

    /// `pipe2` (flags in `flags`) or `socketpair(AF_UNIX, SOCK_STREAM)` (`pair`) on the two
    /// descriptor numbers the shim reserved; the two numbers go back as two `int`s.
    pub(crate) fn make_pipe(
        &mut self,
        pair: bool,
        flags: i64,
        fds: [i64; 2],
        out: &mut Vec<u8>,
    ) -> i64 {
        let ok = |fd: i64| usize::try_from(fd).ok().filter(|&f| f < MAX_FDS);
        let (Some(a), Some(b)) = (ok(fds[0]), ok(fds[1])) else {
            return -EMFILE;
        };
        let nonblocking = flags & (O_NONBLOCK | SOCK_NONBLOCK) != 0;
        let (first, second) = if pair {
            let ab = self.new_buffer(1, 1);
            let ba = self.new_buffer(1, 1);
            (
                PipeEnd {
                    read: Some(ba),
                    write: Some(ab),
                    nonblocking,
                },
                PipeEnd {
                    read: Some(ab),
                    write: Some(ba),
                    nonblocking,
                },
            )
        } else {
            let buf = self.new_buffer(1, 1);
            (
                PipeEnd {
                    read: Some(buf),
                    write: None,
                    nonblocking,
                },
                PipeEnd {
                    read: None,
                    write: Some(buf),
                    nonblocking,
                },
            )
        };
        self.set_fd(a, Some(Descriptor::Pipe(first)));
        self.set_fd(b, Some(Descriptor::Pipe(second)));
        out.extend_from_slice(&(a as i32).to_ne_bytes());
        out.extend_from_slice(&(b as i32).to_ne_bytes());
        0
    }

    /// `socketpair`'s arguments: only a stream pair of the UNIX family is served.
    pub(crate) fn socketpair(&mut self, a: [i64; 6], out: &mut Vec<u8>) -> i64 {
        if a[0] != AF_UNIX {
            return -EAFNOSUPPORT;
        }
        if a[1] & 0xf != SOCK_STREAM {
            return -EPROTONOSUPPORT;
        }
        self.make_pipe(true, a[1], [a[4], a[5]], out)
    }

    fn end(&self, fd: i64) -> Option<&PipeEnd> {
        match self.descriptor(fd)? {
            Descriptor::Pipe(p) => Some(p),
            _ => None,
        }
    }

    /// The readiness mask and generation of a pipe end (see `events`).
    pub(crate) fn pipe_readiness(&self, p: &PipeEnd) -> (u32, u64) {
        let mut mask = 0;
        let mut generation = 0;
        if let Some(b) = p.read.and_then(|i| self.buffers[i].as_ref()) {
            if !b.bytes.is_empty() || b.writers == 0 {
                mask |= events::EPOLLIN;
            }
            if b.writers == 0 {
                mask |= events::EPOLLHUP;
            }
            generation += b.generation;
        }
        if let Some(b) = p.write.and_then(|i| self.buffers[i].as_ref()) {
            if b.readers == 0 {
                mask |= events::EPOLLERR;
            } else if b.bytes.len() < CAPACITY {
                mask |= events::EPOLLOUT;
            }
            generation += b.generation;
        }
        (mask, generation)
    }

    /// `read`, `recvfrom`, `write` or `sendto` on a pipe end.
    pub(crate) fn pipe_io(&mut self, call: &Call<'_>, out: &mut Vec<u8>) -> Step {
        let a = call.args;
        let Some(end) = self.end(a[0]) else {
            return Step::Done(-EBADF);
        };
        let flags = if matches!(call.nr, SYS_RECVFROM | SYS_SENDTO) {
            a[3]
        } else {
            0
        };
        let nonblocking = end.nonblocking || flags & MSG_DONTWAIT != 0;
        if matches!(call.nr, SYS_READ | SYS_RECVFROM) {
            let Some(i) = end.read else {
                return Step::Done(-EBADF);
            };
            let b = self.buffers[i].as_mut().expect("an open end's buffer");
            let want = (a[2].max(0) as usize).min(DATA_BYTES);
            if b.bytes.is_empty() {
                return if b.writers == 0 || want == 0 {
                    Step::Done(0)
                } else if nonblocking {
                    Step::Done(-EAGAIN)
                } else {
                    Step::Block
                };
            }
            let n = want.min(b.bytes.len());
            out.extend(b.bytes.drain(..n));
            b.generation += 1;
            return Step::Done(n as i64);
        }
        let Some(i) = end.write else {
            return Step::Done(-EBADF);
        };
        // sendto's data starts with the destination, which a connected pair ignores.
        let data = if call.nr == SYS_SENDTO {
            call.data.get(16..).unwrap_or(&[])
        } else {
            call.data
        };
        let b = self.buffers[i].as_mut().expect("an open end's buffer");
        if b.readers == 0 {
            return Step::Done(-EPIPE);
        }
        let room = CAPACITY - b.bytes.len().min(CAPACITY);
        if room == 0 && !data.is_empty() {
            return if nonblocking {
                Step::Done(-EAGAIN)
            } else {
                Step::Block
            };
        }
        let n = room.min(data.len());
        b.bytes.extend(&data[..n]);
        b.generation += 1;
        Step::Done(n as i64)
    }

    /// Closes a pipe end: its buffers lose a reader or a writer, and go once nobody holds them.
    pub(crate) fn close_pipe(&mut self, fd: i64) {
        let Some(Some(Descriptor::Pipe(end))) =
            usize::try_from(fd).ok().and_then(|f| self.fds.get(f))
        else {
            return;
        };
        let (read, write) = (end.read, end.write);
        for (i, reading) in [(read, true), (write, false)] {
            let Some(i) = i else { continue };
            if let Some(b) = self.buffers[i].as_mut() {
                if reading {
                    b.readers -= 1;
                } else {
                    b.writers -= 1;
                }
                b.generation += 1;
                if b.readers == 0 && b.writers == 0 {
                    self.buffers[i] = None;
                }
            }
        }
        self.forget_in_epolls(fd);
        self.set_fd(fd as usize, None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{EPOLLHUP, EPOLLIN, EPOLLOUT};
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

    #[test]
    fn a_pipe_carries_bytes_one_way_and_a_socket_pair_both_ways() {
        let mut k: TestKernel = Kernel::new("h", 1000, 0, host_rng(1, 1, 1));
        let mut out = Vec::new();
        assert_eq!(
            call(
                &mut k,
                SYS_PIPE2,
                [0, O_NONBLOCK, 0, 0, 3, 4],
                &[],
                &mut out
            ),
            Outcome::Done(0)
        );
        assert_eq!(out, [3i32.to_ne_bytes(), 4i32.to_ne_bytes()].concat());
        assert_eq!(
            call(&mut k, SYS_READ, [3, 0, 10, 0, 0, 0], &[], &mut out),
            Outcome::Done(-EAGAIN)
        );
        assert_eq!(
            call(&mut k, SYS_WRITE, [4, 0, 5, 0, 0, 0], b"hello", &mut out),
            Outcome::Done(5)
        );
        assert_eq!(
            call(&mut k, SYS_WRITE, [3, 0, 1, 0, 0, 0], b"x", &mut out),
            Outcome::Done(-EBADF)
        );
        assert_eq!(k.readiness(3, &Offline).unwrap().0, EPOLLIN);
        assert_eq!(
            call(&mut k, SYS_READ, [3, 0, 3, 0, 0, 0], &[], &mut out),
            Outcome::Done(3)
        );
        assert_eq!(out, b"hel");
        // The writer closes: what is left, then end of file.
        assert_eq!(
            call(&mut k, SYS_CLOSE, [4, 0, 0, 0, 0, 0], &[], &mut out),
            Outcome::Done(0)
        );
        assert_eq!(k.readiness(3, &Offline).unwrap().0, EPOLLIN | EPOLLHUP);
        assert_eq!(
            call(&mut k, SYS_READ, [3, 0, 10, 0, 0, 0], &[], &mut out),
            Outcome::Done(2)
        );
        assert_eq!(
            call(&mut k, SYS_READ, [3, 0, 10, 0, 0, 0], &[], &mut out),
            Outcome::Done(0)
        );
        assert_eq!(
            call(&mut k, SYS_CLOSE, [3, 0, 0, 0, 0, 0], &[], &mut out),
            Outcome::Done(0)
        );
        assert!(k.buffers.iter().all(Option::is_none));
        // A socket pair: each end writes to the other.
        assert_eq!(
            call(
                &mut k,
                SYS_SOCKETPAIR,
                [AF_UNIX, SOCK_STREAM, 0, 0, 5, 6],
                &[],
                &mut out
            ),
            Outcome::Done(0)
        );
        assert_eq!(
            call(&mut k, SYS_WRITE, [5, 0, 2, 0, 0, 0], b"ab", &mut out),
            Outcome::Done(2)
        );
        assert_eq!(
            call(&mut k, SYS_WRITE, [6, 0, 1, 0, 0, 0], b"c", &mut out),
            Outcome::Done(1)
        );
        assert_eq!(
            call(&mut k, SYS_READ, [6, 0, 8, 0, 0, 0], &[], &mut out),
            Outcome::Done(2)
        );
        assert_eq!(out, b"ab");
        assert_eq!(k.readiness(5, &Offline).unwrap().0, EPOLLIN | EPOLLOUT);
        assert_eq!(
            call(&mut k, SYS_READ, [5, 0, 8, 0, 0, 0], &[], &mut out),
            Outcome::Done(1)
        );
        // A blocking read of an empty pair waits.
        assert_eq!(
            call(&mut k, SYS_READ, [5, 0, 8, 0, 0, 0], &[], &mut out),
            Outcome::Blocked { until: None }
        );
        assert_eq!(
            call(
                &mut k,
                SYS_SOCKETPAIR,
                [2, SOCK_STREAM, 0, 0, 7, 8],
                &[],
                &mut out
            ),
            Outcome::Done(-EAFNOSUPPORT)
        );
    }
}
