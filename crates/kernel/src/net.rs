//! Sockets: what the kernel keeps of a process's TCP sockets, and the network it asks to
//! carry them.
//!
//! The kernel does not own a network stack. The process host gives it one through
//! [`Network`] with each call (onionlab's TCP model on the host's access links), and tells
//! it what happened on its connections with [`SocketNote`]s. A socket's bytes are the
//! program's own: the host carries them beside the TCP model's byte counts, so a program
//! reads exactly what its peer wrote, when the model delivers it.

use std::collections::VecDeque;

/// The network a process's sockets run on: the host's stack, seen from the kernel.
pub trait Network {
    /// The stack's handle of one connection.
    type Socket: Copy + Eq + std::fmt::Debug;
    /// This host's IPv4 address.
    fn address(&self) -> u32;
    /// The host with IPv4 address `addr`, if there is one.
    fn host_of(&self, addr: u32) -> Option<u32>;
    /// Host `host`'s IPv4 address.
    fn address_of(&self, host: u32) -> u32;
    /// Listens on TCP port `port` (an errno if it cannot).
    fn listen(&mut self, port: u16) -> Result<(), i64>;
    /// Opens a TCP connection to `port` on `host`; [`SocketNote::Connected`] or
    /// [`SocketNote::Reset`] follows.
    fn connect(&mut self, host: u32, port: u16) -> Result<Self::Socket, i64>;
    /// Writes as much of `bytes` as the send buffer takes and sends it; returns how much.
    fn send(&mut self, s: Self::Socket, bytes: &[u8]) -> usize;
    /// Bytes the send buffer would take now.
    fn send_space(&self, s: Self::Socket) -> u64;
    /// What the connection's sender knows of its window, the facts tor's KIST scheduler reads
    /// (`TCP_INFO`, `SIOCOUTQNSD`); `None` once the connection is gone.
    fn send_window(&self, s: Self::Socket) -> Option<SendWindow>;
    /// The connection's local port and its peer's (the connecting side's is the ephemeral
    /// port its stack gave it), as `getsockname`, `getpeername` and `accept` report them.
    fn ports(&self, s: Self::Socket) -> (u16, u16);
    /// In-order bytes received and not read yet.
    fn readable(&self, s: Self::Socket) -> u64;
    /// Reads up to `max` bytes (at most [`Network::readable`]) and appends them to `out`;
    /// returns how many.
    fn recv(&mut self, s: Self::Socket, out: &mut Vec<u8>, max: usize) -> usize;
    /// Receives UDP datagrams on `port` (an errno if it cannot).
    fn udp_bind(&mut self, port: u16) -> Result<(), i64>;
    /// Sends a UDP datagram of `bytes` from `src_port` to `port` on `host`.
    fn udp_send(&mut self, src_port: u16, host: u32, port: u16, bytes: &[u8]);
    /// Ends the sending direction once what was written is sent (a FIN).
    fn shutdown_write(&mut self, s: Self::Socket);
    /// Closes the connection: a FIN after what was written; the socket is gone for the
    /// process.
    fn close(&mut self, s: Self::Socket);
}

/// What a connection's sender knows of its window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendWindow {
    /// The congestion window, in segments.
    pub cwnd: u32,
    /// Segments sent and not acknowledged.
    pub unacked: u32,
    /// Bytes in the send buffer never sent.
    pub notsent: u64,
    /// Payload bytes per full segment.
    pub mss: u32,
}

/// A network with nothing on it: no host is reachable, so every connection fails with
/// `ENETUNREACH`. What a kernel whose host has no network runs on, and what tests of the
/// calls that need none give it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Offline;

impl Network for Offline {
    type Socket = u32;
    fn address(&self) -> u32 {
        0x7f00_0001
    }
    fn host_of(&self, _addr: u32) -> Option<u32> {
        None
    }
    fn address_of(&self, _host: u32) -> u32 {
        0
    }
    fn listen(&mut self, _port: u16) -> Result<(), i64> {
        Ok(())
    }
    fn connect(&mut self, _host: u32, _port: u16) -> Result<u32, i64> {
        Err(crate::ENETUNREACH)
    }
    fn send(&mut self, _s: u32, _bytes: &[u8]) -> usize {
        0
    }
    fn send_space(&self, _s: u32) -> u64 {
        0
    }
    fn ports(&self, _s: u32) -> (u16, u16) {
        (0, 0)
    }
    fn send_window(&self, _s: u32) -> Option<SendWindow> {
        None
    }
    fn readable(&self, _s: u32) -> u64 {
        0
    }
    fn recv(&mut self, _s: u32, _out: &mut Vec<u8>, _max: usize) -> usize {
        0
    }
    fn udp_bind(&mut self, _port: u16) -> Result<(), i64> {
        Ok(())
    }
    fn udp_send(&mut self, _src_port: u16, _host: u32, _port: u16, _bytes: &[u8]) {}
    fn shutdown_write(&mut self, _s: u32) {}
    fn close(&mut self, _s: u32) {}
}

/// What happened on a connection, as the host learns it from the stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SocketNote<S> {
    /// A connection to a listening port was established.
    Accepted {
        /// The new connection.
        socket: S,
        /// The local port it came in on.
        port: u16,
        /// The host that opened it.
        peer: u32,
    },
    /// A connection the process opened is established.
    Connected(S),
    /// Bytes arrived, or send buffer space freed up: readiness may have changed.
    Ready(S),
    /// The peer closed its direction: reads return what is left, then 0.
    PeerClosed(S),
    /// The connection was reset, refused, or timed out.
    Reset(S),
}

/// The state of one socket descriptor.
#[derive(Debug)]
pub(crate) enum SocketState<S> {
    /// Made by `socket`; perhaps bound to a port.
    Fresh {
        /// The port `bind` gave it.
        bound: Option<u16>,
    },
    /// Listening: connections wait here for `accept`.
    Listening {
        /// The port.
        port: u16,
        /// Connections established and not accepted yet: the connection, its peer host, and
        /// whether the peer has closed its direction already.
        queue: VecDeque<(S, u32, bool)>,
    },
    /// `connect` was called; the handshake is under way.
    Connecting {
        /// The stack's connection.
        socket: S,
        /// The host it goes to.
        peer: u32,
    },
    /// An established connection.
    Connected {
        /// The stack's connection.
        socket: S,
        /// The peer host.
        peer: u32,
        /// The peer closed its direction.
        peer_closed: bool,
        /// The process shut its sending direction.
        write_shut: bool,
    },
    /// The connection failed (refused, reset, timed out): the next call reports `error`.
    Failed {
        /// The errno (positive) the next call reports.
        error: i64,
    },
}

/// A TCP socket descriptor.
#[derive(Debug)]
pub(crate) struct SocketFile<S> {
    pub(crate) state: SocketState<S>,
    pub(crate) nonblocking: bool,
    /// An error `getsockopt(SO_ERROR)` reports once (a failed non-blocking connect).
    pub(crate) pending_error: i64,
    /// How many things have happened to the socket (see `events`): what edge-triggered
    /// epoll entries compare.
    pub(crate) generation: u64,
}

impl<S: Copy + Eq> SocketFile<S> {
    pub(crate) fn new(nonblocking: bool) -> Self {
        SocketFile {
            state: SocketState::Fresh { bound: None },
            nonblocking,
            pending_error: 0,
            generation: 0,
        }
    }

    /// The stack connection this socket holds, if any.
    pub(crate) fn connection(&self) -> Option<S> {
        match self.state {
            SocketState::Connecting { socket: s, .. }
            | SocketState::Connected { socket: s, .. } => Some(s),
            _ => None,
        }
    }

    /// Whether a read would not block: data, the peer's close, a connection to accept, or an
    /// error to report.
    pub(crate) fn readable<N: Network<Socket = S>>(&self, net: &N) -> bool {
        match &self.state {
            SocketState::Listening { queue, .. } => !queue.is_empty(),
            SocketState::Connected {
                socket,
                peer_closed,
                ..
            } => *peer_closed || net.readable(*socket) > 0,
            SocketState::Failed { .. } => true,
            SocketState::Fresh { .. } | SocketState::Connecting { .. } => false,
        }
    }

    /// Whether a write would not block.
    pub(crate) fn writable<N: Network<Socket = S>>(&self, net: &N) -> bool {
        match &self.state {
            SocketState::Connected {
                socket, write_shut, ..
            } => *write_shut || net.send_space(*socket) > 0,
            SocketState::Failed { .. } => true,
            _ => false,
        }
    }

    /// Whether the connection is gone (POLLHUP).
    pub(crate) fn hung_up(&self) -> bool {
        match &self.state {
            SocketState::Failed { .. } => true,
            SocketState::Connected {
                peer_closed,
                write_shut,
                ..
            } => *peer_closed && *write_shut,
            _ => false,
        }
    }
}

/// A `struct sockaddr_in` (16 bytes) for IPv4 address `addr` and `port`.
pub(crate) fn sockaddr_in(addr: u32, port: u16) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[..2].copy_from_slice(&2u16.to_ne_bytes()); // AF_INET
    out[2..4].copy_from_slice(&port.to_be_bytes());
    out[4..8].copy_from_slice(&addr.to_be_bytes());
    out
}

/// The IPv4 address and port of a `struct sockaddr_in`, or the errno a bad one gives.
pub(crate) fn parse_sockaddr_in(data: &[u8]) -> Result<(u32, u16), i64> {
    if data.len() < 16 {
        return Err(crate::EINVAL);
    }
    let family = u16::from_ne_bytes([data[0], data[1]]);
    if family != 2 {
        return Err(crate::EAFNOSUPPORT);
    }
    let port = u16::from_be_bytes([data[2], data[3]]);
    let addr = u32::from_be_bytes([data[4], data[5], data[6], data[7]]);
    Ok((addr, port))
}
