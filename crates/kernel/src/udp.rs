//! UDP sockets: datagrams over the host's network, each carrying the bytes the program sent.

use std::collections::VecDeque;

use rand::Rng;

use crate::net::{parse_sockaddr_in, sockaddr_in};
use crate::*;

/// The first port a UDP socket that sends before it is bound gets (then upward), as Linux
/// picks one from its ephemeral range.
pub(crate) const FIRST_EPHEMERAL_UDP_PORT: u16 = 50_000;
/// Datagrams a socket holds before it drops new ones, as a full receive buffer does.
const MAX_QUEUED: usize = 1024;
const MSG_DONTWAIT: i64 = 0x40;

/// A datagram waiting to be read.
#[derive(Debug)]
struct Datagram {
    from: u32,
    from_port: u16,
    bytes: Vec<u8>,
}

/// A UDP socket descriptor.
#[derive(Debug)]
pub(crate) struct UdpFile {
    port: Option<u16>,
    /// The default destination `connect` gave it.
    peer: Option<(u32, u16)>,
    queue: VecDeque<Datagram>,
    pub(crate) nonblocking: bool,
    pub(crate) generation: u64,
}

impl UdpFile {
    pub(crate) fn new(nonblocking: bool) -> Self {
        UdpFile {
            port: None,
            peer: None,
            queue: VecDeque::new(),
            nonblocking,
            generation: 0,
        }
    }

    pub(crate) fn readable(&self) -> bool {
        !self.queue.is_empty()
    }
}

impl<R: Rng, S: Copy + Eq + std::fmt::Debug> Kernel<R, S> {
    fn udp_file(&mut self, fd: i64) -> Option<&mut UdpFile> {
        match usize::try_from(fd).ok().and_then(|f| self.fds.get_mut(f))? {
            Some(Descriptor::Udp(u)) => Some(u),
            _ => None,
        }
    }

    /// Binds UDP socket `fd` to `port`, or with 0 to the next free ephemeral port.
    fn udp_bind_port<N: Network<Socket = S>>(&mut self, fd: i64, port: u16, net: &mut N) -> i64 {
        match self.udp_file(fd) {
            None => return -EBADF,
            Some(u) if u.port.is_some() => return -EINVAL,
            Some(_) => {}
        }
        let port = if port != 0 {
            if let Err(e) = net.udp_bind(port) {
                return -e;
            }
            port
        } else {
            let mut tries = 0u32;
            loop {
                let p = self.next_udp_port;
                self.next_udp_port = p.checked_add(1).unwrap_or(FIRST_EPHEMERAL_UDP_PORT);
                if net.udp_bind(p).is_ok() {
                    break p;
                }
                tries += 1;
                if tries > u32::from(u16::MAX - FIRST_EPHEMERAL_UDP_PORT) {
                    return -EADDRINUSE;
                }
            }
        };
        if let Some(u) = self.udp_file(fd) {
            u.port = Some(port);
        }
        0
    }

    /// A call on UDP socket `fd`.
    pub(crate) fn udp_call<N: Network<Socket = S>>(
        &mut self,
        call: &Call<'_>,
        out: &mut Vec<u8>,
        net: &mut N,
    ) -> Step {
        let a = call.args;
        let fd = a[0];
        let done = match call.nr {
            SYS_BIND => match parse_sockaddr_in(call.data) {
                Ok((_, port)) => self.udp_bind_port(fd, port, net),
                Err(e) => -e,
            },
            SYS_CONNECT => match parse_sockaddr_in(call.data) {
                Ok((ip, port)) => match net.host_of(ip) {
                    Some(host) => {
                        if let Some(u) = self.udp_file(fd) {
                            u.peer = Some((host, port));
                        }
                        0
                    }
                    None => -ENETUNREACH,
                },
                Err(e) => -e,
            },
            SYS_SENDTO | SYS_WRITE => {
                // sendto's data is the destination (16 bytes, zero when none) and the payload.
                let (dest, payload) = if call.nr == SYS_SENDTO && call.data.len() >= 16 {
                    let (d, p) = call.data.split_at(16);
                    (
                        if d.iter().all(|&b| b == 0) {
                            None
                        } else {
                            Some(d)
                        },
                        p,
                    )
                } else {
                    (None, call.data)
                };
                return Step::Done(self.udp_send(fd, dest, payload, net));
            }
            SYS_RECVFROM | SYS_READ => {
                let flags = if call.nr == SYS_RECVFROM { a[3] } else { 0 };
                let Some(u) = self.udp_file(fd) else {
                    return Step::Done(-EBADF);
                };
                let Some(d) = u.queue.pop_front() else {
                    return if u.nonblocking || flags & MSG_DONTWAIT != 0 {
                        Step::Done(-EAGAIN)
                    } else {
                        Step::Block
                    };
                };
                let n = d.bytes.len().min(a[2].max(0) as usize).min(DATA_BYTES - 16);
                out.extend_from_slice(&d.bytes[..n]);
                if call.nr == SYS_RECVFROM {
                    out.extend_from_slice(&sockaddr_in(net.address_of(d.from), d.from_port));
                }
                n as i64
            }
            SYS_CLOSE => {
                self.forget_in_epolls(fd);
                // The stack's port stays bound: nothing unbinds a UDP port in the model, and
                // datagrams for it are dropped from now on as unread.
                self.set_fd(fd as usize, None);
                0
            }
            SYS_GETSOCKNAME => {
                let port = self.udp_file(fd).and_then(|u| u.port).unwrap_or(0);
                out.extend_from_slice(&sockaddr_in(net.address(), port));
                0
            }
            SYS_GETPEERNAME => match self.udp_file(fd).and_then(|u| u.peer) {
                Some((host, port)) => {
                    out.extend_from_slice(&sockaddr_in(net.address_of(host), port));
                    0
                }
                None => -ENOTCONN,
            },
            SYS_SETSOCKOPT => 0,
            _ => -EOPNOTSUPP,
        };
        Step::Done(done)
    }

    fn udp_send<N: Network<Socket = S>>(
        &mut self,
        fd: i64,
        dest: Option<&[u8]>,
        payload: &[u8],
        net: &mut N,
    ) -> i64 {
        let to = match dest {
            Some(d) => match parse_sockaddr_in(d) {
                Ok((ip, port)) => match net.host_of(ip) {
                    Some(host) => (host, port),
                    None => return -ENETUNREACH,
                },
                Err(e) => return -e,
            },
            None => match self.udp_file(fd).and_then(|u| u.peer) {
                Some(peer) => peer,
                None => return -EDESTADDRREQ,
            },
        };
        if self.udp_file(fd).is_some_and(|u| u.port.is_none()) {
            let r = self.udp_bind_port(fd, 0, net);
            if r < 0 {
                return r;
            }
        }
        let Some(port) = self.udp_file(fd).and_then(|u| u.port) else {
            return -EBADF;
        };
        // A datagram the link drops is still sent, as far as the program can tell.
        net.udp_send(port, to.0, to.1, payload);
        payload.len() as i64
    }

    /// A datagram arrived for UDP port `port`: it waits on the socket bound there.
    pub(crate) fn udp_arrival(&mut self, port: u16, from: u32, from_port: u16, bytes: &[u8]) {
        let socket = self.fds.iter_mut().flatten().find_map(|d| match d {
            Descriptor::Udp(u) if u.port == Some(port) => Some(u),
            _ => None,
        });
        if let Some(u) = socket {
            if u.queue.len() < MAX_QUEUED {
                u.queue.push_back(Datagram {
                    from,
                    from_port,
                    bytes: bytes.to_vec(),
                });
                u.generation += 1;
            }
        }
    }
}
