//! The socket calls and `poll`: TCP over the host's network, as [`crate::net`] describes.

use rand::Rng;

use crate::net::{parse_sockaddr_in, sockaddr_in, SocketFile, SocketState};
use crate::udp::UdpFile;
use crate::*;

const AF_INET: i64 = 2;
const SOCK_STREAM: i64 = 1;
const SOCK_DGRAM: i64 = 2;
const SOCK_NONBLOCK: i64 = 0o4000;
const MSG_DONTWAIT: i64 = 0x40;
const SOL_SOCKET: i64 = 1;
const SO_TYPE: i64 = 3;
const SO_ERROR: i64 = 4;
const ENOPROTOOPT: i64 = 92;
const IPPROTO_TCP: i64 = 6;
const TCP_INFO: i64 = 11;
/// Bytes of the `struct tcp_info` the kernel gives (the fields up to `tcpi_rcv_space`, which
/// every reader knows): a shorter one than Linux's newest, as an older kernel would give.
const TCP_INFO_BYTES: usize = 104;
const SHUT_RD: i64 = 0;
const POLLIN: i16 = 0x1;
const POLLOUT: i16 = 0x4;
const POLLERR: i16 = 0x8;
const POLLHUP: i16 = 0x10;
/// `127.0.0.1`: a program's own host.
const LOOPBACK: u32 = 0x7f00_0001;

impl<R: Rng, S: Copy + Eq + std::fmt::Debug> Kernel<R, S> {
    fn socket_file(&mut self, fd: i64) -> Result<&mut SocketFile<S>, i64> {
        let d = usize::try_from(fd)
            .ok()
            .and_then(|fd| self.fds.get_mut(fd))
            .and_then(Option::as_mut);
        match d {
            Some(Descriptor::Socket(s)) => Ok(s),
            Some(_) => Err(ENOTSOCK),
            None => Err(EBADF),
        }
    }

    /// One attempt at a socket call, `poll`, or a call on a socket descriptor.
    pub(crate) fn socket_call<N: Network<Socket = S>>(
        &mut self,
        call: &Call<'_>,
        out: &mut Vec<u8>,
        net: &mut N,
    ) -> Step {
        let a = call.args;
        let result = match call.nr {
            SYS_SOCKET => self.socket(a),
            SYS_BIND => self.bind(a[0], call.data, net),
            SYS_LISTEN => self.listen(a[0], net),
            SYS_ACCEPT | SYS_ACCEPT4 => {
                let flags = if call.nr == SYS_ACCEPT4 { a[3] } else { 0 };
                return self.accept(a[0], flags, a[5], out, net);
            }
            SYS_CONNECT => return self.connect(a[0], call.data, net),
            SYS_READ => return self.recv(a[0], a[2], 0, out, net),
            SYS_RECVFROM => return self.recv(a[0], a[2], a[3], out, net),
            SYS_WRITE => return self.send(a[0], call.data, 0, net),
            // sendto's data starts with the destination, which a stream socket ignores.
            SYS_SENDTO => return self.send(a[0], call.data.get(16..).unwrap_or(&[]), a[3], net),
            SYS_SHUTDOWN => self.shutdown(a[0], a[1], net),
            SYS_CLOSE => {
                self.forget_in_epolls(a[0]);
                self.close_socket(a[0], net)
            }
            SYS_GETSOCKNAME | SYS_GETPEERNAME => self.name(call.nr, a[0], out, net),
            SYS_SETSOCKOPT => self.socket_file(a[0]).map(|_| 0),
            SYS_GETSOCKOPT => self.getsockopt(a[0], a[1], a[2], out, net),
            SYS_POLL | SYS_PPOLL | SYS_SELECT | SYS_PSELECT6 => {
                return self.poll(a[1], a[2], call.data, out, net)
            }
            _ => Err(ENOSYS),
        };
        Step::Done(result.unwrap_or_else(|e| -e))
    }

    fn socket(&mut self, a: [i64; 6]) -> Result<i64, i64> {
        let (domain, kind, fd) = (a[0], a[1], a[5]);
        if domain != AF_INET {
            return Err(EAFNOSUPPORT);
        }
        let fd = usize::try_from(fd)
            .ok()
            .filter(|&fd| fd < MAX_FDS)
            .ok_or(EMFILE)?;
        let nonblocking = kind & SOCK_NONBLOCK != 0;
        let d = match (kind & 0xf, a[2]) {
            (SOCK_STREAM, 0 | 6) => Descriptor::Socket(Box::new(SocketFile::new(nonblocking))),
            (SOCK_DGRAM, 0 | 17) => Descriptor::Udp(Box::new(UdpFile::new(nonblocking))),
            _ => return Err(EPROTONOSUPPORT),
        };
        self.set_fd(fd, Some(d));
        Ok(fd as i64)
    }

    fn bind<N: Network<Socket = S>>(&mut self, fd: i64, addr: &[u8], net: &N) -> Result<i64, i64> {
        let (ip, port) = parse_sockaddr_in(addr)?;
        if ip != 0 && ip != net.address() && ip != LOOPBACK {
            return Err(EINVAL);
        }
        // The model's ports are chosen by the caller; a port of 0 (any) would need the
        // kernel's own choice, which nothing here asks for yet.
        if port == 0 {
            return Err(EINVAL);
        }
        let taken = self.fds.iter().flatten().any(|d| match d {
            Descriptor::Socket(s) => matches!(
                s.state,
                SocketState::Fresh { bound: Some(p) } | SocketState::Listening { port: p, .. }
                    if p == port
            ),
            _ => false,
        });
        let s = self.socket_file(fd)?;
        match s.state {
            SocketState::Fresh { bound: None } if !taken => {
                s.state = SocketState::Fresh { bound: Some(port) };
                Ok(0)
            }
            SocketState::Fresh { bound: None } => Err(EADDRINUSE),
            _ => Err(EINVAL),
        }
    }

    fn listen<N: Network<Socket = S>>(&mut self, fd: i64, net: &mut N) -> Result<i64, i64> {
        let s = self.socket_file(fd)?;
        match s.state {
            SocketState::Fresh { bound: Some(port) } => {
                net.listen(port)?;
                s.state = SocketState::Listening {
                    port,
                    queue: Default::default(),
                };
                Ok(0)
            }
            SocketState::Listening { .. } => Ok(0),
            _ => Err(EINVAL),
        }
    }

    fn accept<N: Network<Socket = S>>(
        &mut self,
        fd: i64,
        flags: i64,
        new_fd: i64,
        out: &mut Vec<u8>,
        net: &N,
    ) -> Step {
        let s = match self.socket_file(fd) {
            Ok(s) => s,
            Err(e) => return Step::Done(-e),
        };
        let nonblocking = s.nonblocking;
        let SocketState::Listening { queue, .. } = &mut s.state else {
            return Step::Done(-EINVAL);
        };
        let Some((socket, peer, peer_closed)) = queue.pop_front() else {
            return if nonblocking {
                Step::Done(-EAGAIN)
            } else {
                Step::Block
            };
        };
        let Some(new_fd) = usize::try_from(new_fd).ok().filter(|&f| f < MAX_FDS) else {
            return Step::Done(-EMFILE);
        };
        let mut file = SocketFile::new(flags & SOCK_NONBLOCK != 0);
        file.state = SocketState::Connected {
            socket,
            peer,
            peer_closed,
            write_shut: false,
        };
        self.set_fd(new_fd, Some(Descriptor::Socket(Box::new(file))));
        out.extend_from_slice(&sockaddr_in(net.address_of(peer), net.ports(socket).1));
        Step::Done(new_fd as i64)
    }

    fn connect<N: Network<Socket = S>>(&mut self, fd: i64, addr: &[u8], net: &mut N) -> Step {
        let retrying = self.retrying;
        let s = match self.socket_file(fd) {
            Ok(s) => s,
            Err(e) => return Step::Done(-e),
        };
        match &s.state {
            SocketState::Connecting { .. } if retrying => return Step::Block,
            SocketState::Connected { .. } if retrying => return Step::Done(0),
            SocketState::Failed { error } if retrying => {
                s.pending_error = 0;
                return Step::Done(-error);
            }
            SocketState::Connecting { .. } => return Step::Done(-EALREADY),
            SocketState::Connected { .. } => return Step::Done(-EISCONN),
            SocketState::Listening { .. } => return Step::Done(-EINVAL),
            SocketState::Fresh { .. } | SocketState::Failed { .. } => {}
        }
        let (ip, port) = match parse_sockaddr_in(addr) {
            Ok(a) => a,
            Err(e) => return Step::Done(-e),
        };
        let host = if ip == LOOPBACK {
            None
        } else {
            net.host_of(ip)
        };
        let Some(host) = host else {
            return Step::Done(-ENETUNREACH);
        };
        let socket = match net.connect(host, port) {
            Ok(socket) => socket,
            Err(e) => return Step::Done(-e),
        };
        let s = self.socket_file(fd).expect("checked above");
        s.state = SocketState::Connecting { socket, peer: host };
        if s.nonblocking {
            Step::Done(-EINPROGRESS)
        } else {
            Step::Block
        }
    }

    fn recv<N: Network<Socket = S>>(
        &mut self,
        fd: i64,
        len: i64,
        flags: i64,
        out: &mut Vec<u8>,
        net: &mut N,
    ) -> Step {
        let s = match self.socket_file(fd) {
            Ok(s) => s,
            Err(e) => return Step::Done(-e),
        };
        let nonblocking = s.nonblocking || flags & MSG_DONTWAIT != 0;
        let (socket, peer_closed) = match &s.state {
            SocketState::Connected {
                socket,
                peer_closed,
                ..
            } => (*socket, *peer_closed),
            SocketState::Failed { error } => return Step::Done(-error),
            _ => return Step::Done(-ENOTCONN),
        };
        let want = (len.max(0) as usize).min(DATA_BYTES);
        if want == 0 {
            return Step::Done(0);
        }
        if net.readable(socket) > 0 {
            return Step::Done(net.recv(socket, out, want) as i64);
        }
        if peer_closed {
            Step::Done(0)
        } else if nonblocking {
            Step::Done(-EAGAIN)
        } else {
            Step::Block
        }
    }

    /// A write on a blocking socket takes everything before it returns, as Linux's does: what
    /// does not fit waits (`self.progress` counts what went) for room.
    fn send<N: Network<Socket = S>>(
        &mut self,
        fd: i64,
        data: &[u8],
        flags: i64,
        net: &mut N,
    ) -> Step {
        let sent = self.progress;
        let s = match self.socket_file(fd) {
            Ok(s) => s,
            Err(e) => return Step::Done(-e),
        };
        let nonblocking = s.nonblocking || flags & MSG_DONTWAIT != 0;
        let socket = match &s.state {
            SocketState::Connected {
                write_shut: true, ..
            } => return Step::Done(-EPIPE),
            SocketState::Connected { socket, .. } => *socket,
            SocketState::Failed { error } => return Step::Done(-error),
            _ => return Step::Done(-ENOTCONN),
        };
        if data.len() == sent {
            return Step::Done(sent as i64);
        }
        let n = net.send(socket, &data[sent..]);
        let total = sent + n;
        if total == data.len() || (nonblocking && total > 0) {
            self.progress = 0;
            return Step::Done(total as i64);
        }
        if nonblocking {
            return Step::Done(-EAGAIN);
        }
        self.progress = total;
        Step::Block
    }

    fn shutdown<N: Network<Socket = S>>(
        &mut self,
        fd: i64,
        how: i64,
        net: &mut N,
    ) -> Result<i64, i64> {
        let s = self.socket_file(fd)?;
        if !(0..=2).contains(&how) {
            return Err(EINVAL);
        }
        match &mut s.state {
            SocketState::Connected {
                socket, write_shut, ..
            } => {
                if how != SHUT_RD && !*write_shut {
                    *write_shut = true;
                    net.shutdown_write(*socket);
                }
                Ok(0)
            }
            _ => Err(ENOTCONN),
        }
    }

    pub(crate) fn close_socket<N: Network<Socket = S>>(
        &mut self,
        fd: i64,
        net: &mut N,
    ) -> Result<i64, i64> {
        let s = self.socket_file(fd)?;
        match &s.state {
            SocketState::Connecting { socket, .. } | SocketState::Connected { socket, .. } => {
                net.close(*socket)
            }
            SocketState::Listening { queue, .. } => {
                for (socket, _, _) in queue {
                    net.close(*socket);
                }
            }
            SocketState::Fresh { .. } | SocketState::Failed { .. } => {}
        }
        self.set_fd(fd as usize, None);
        Ok(0)
    }

    fn name<N: Network<Socket = S>>(
        &mut self,
        nr: i64,
        fd: i64,
        out: &mut Vec<u8>,
        net: &N,
    ) -> Result<i64, i64> {
        let own = net.address();
        let s = self.socket_file(fd)?;
        let addr = match (&s.state, nr == SYS_GETPEERNAME) {
            (SocketState::Connected { socket, peer, .. }, true) => {
                sockaddr_in(net.address_of(*peer), net.ports(*socket).1)
            }
            (_, true) => return Err(ENOTCONN),
            (SocketState::Fresh { bound }, false) => sockaddr_in(0, bound.unwrap_or(0)),
            (SocketState::Listening { port, .. }, false) => sockaddr_in(own, *port),
            (
                SocketState::Connecting { socket, .. } | SocketState::Connected { socket, .. },
                false,
            ) => sockaddr_in(own, net.ports(*socket).0),
            (_, false) => sockaddr_in(own, 0),
        };
        out.extend_from_slice(&addr);
        Ok(0)
    }

    fn getsockopt<N: Network<Socket = S>>(
        &mut self,
        fd: i64,
        level: i64,
        name: i64,
        out: &mut Vec<u8>,
        net: &N,
    ) -> Result<i64, i64> {
        let s = self.socket_file(fd)?;
        if (level, name) == (IPPROTO_TCP, TCP_INFO) {
            tcp_info(&s.state, net, out);
            return Ok(0);
        }
        let value: i32 = match (level, name) {
            (SOL_SOCKET, SO_ERROR) => std::mem::take(&mut s.pending_error) as i32,
            (SOL_SOCKET, SO_TYPE) => SOCK_STREAM as i32,
            _ => return Err(ENOPROTOOPT),
        };
        out.extend_from_slice(&value.to_ne_bytes());
        Ok(0)
    }

    /// `poll`: the shim sends the `struct pollfd` array and takes it back with `revents`
    /// filled in. A descriptor onionlab does not serve is one of the process's own files,
    /// which, as regular files are, is always ready.
    fn poll<N: Network<Socket = S>>(
        &mut self,
        nfds: i64,
        timeout: i64,
        data: &[u8],
        out: &mut Vec<u8>,
        net: &N,
    ) -> Step {
        let n = nfds.max(0) as usize;
        if n * 8 > DATA_BYTES || data.len() < n * 8 {
            return Step::Done(-EINVAL);
        }
        out.clear();
        out.extend_from_slice(&data[..n * 8]);
        let mut ready = 0;
        for entry in out.chunks_exact_mut(8) {
            let fd = i32::from_ne_bytes(entry[..4].try_into().expect("4 bytes"));
            let events = i16::from_ne_bytes([entry[4], entry[5]]);
            let revents = if fd < 0 {
                0
            } else {
                match self.readiness(i64::from(fd), net) {
                    // poll's bits are epoll's for the events they share.
                    Some((mask, _)) => (mask as i16) & (events | POLLERR | POLLHUP),
                    None => events & (POLLIN | POLLOUT),
                }
            };
            entry[6..8].copy_from_slice(&revents.to_ne_bytes());
            if revents != 0 {
                ready += 1;
            }
        }
        if ready > 0 || timeout == 0 {
            Step::Done(ready)
        } else {
            out.clear();
            Step::Block
        }
    }

    /// What happened on one of the host's connections.
    pub(crate) fn socket_note<N: Network<Socket = S>>(&mut self, note: SocketNote<S>, net: &mut N) {
        let holds = |d: &Descriptor<S>, socket: S| match d {
            Descriptor::Socket(s) => s.connection() == Some(socket),
            _ => false,
        };
        // Whatever the note, something happened to the socket that holds the connection.
        let about = match note {
            SocketNote::Accepted { .. } => None,
            SocketNote::Connected(s)
            | SocketNote::Ready(s)
            | SocketNote::PeerClosed(s)
            | SocketNote::Reset(s) => Some(s),
        };
        if let Some(Descriptor::Socket(s)) =
            about.and_then(|socket| self.fds.iter_mut().flatten().find(|d| holds(d, socket)))
        {
            s.generation += 1;
        }
        match note {
            SocketNote::Accepted { socket, port, peer } => {
                let listener = self.fds.iter_mut().flatten().find_map(|d| match d {
                    Descriptor::Socket(s) => match &mut s.state {
                        SocketState::Listening { port: p, queue } if *p == port => {
                            s.generation += 1;
                            Some(queue)
                        }
                        _ => None,
                    },
                    _ => None,
                });
                match listener {
                    Some(queue) => queue.push_back((socket, peer, false)),
                    // The listening socket was closed; the stack still listens.
                    None => net.close(socket),
                }
            }
            SocketNote::Connected(socket) => {
                if let Some(Descriptor::Socket(s)) =
                    self.fds.iter_mut().flatten().find(|d| holds(d, socket))
                {
                    if let SocketState::Connecting { peer, .. } = s.state {
                        s.state = SocketState::Connected {
                            socket,
                            peer,
                            peer_closed: false,
                            write_shut: false,
                        };
                    }
                }
            }
            SocketNote::Ready(_) => {}
            SocketNote::PeerClosed(socket) => {
                for d in self.fds.iter_mut().flatten() {
                    if let Descriptor::Socket(s) = d {
                        match &mut s.state {
                            SocketState::Connected {
                                socket: c,
                                peer_closed,
                                ..
                            } if *c == socket => *peer_closed = true,
                            SocketState::Listening { queue, .. } => {
                                for entry in queue.iter_mut().filter(|e| e.0 == socket) {
                                    entry.2 = true;
                                }
                            }
                            _ => {}
                        }
                    }
                }
            }
            SocketNote::Reset(socket) => {
                if let Some(Descriptor::Socket(s)) =
                    self.fds.iter_mut().flatten().find(|d| holds(d, socket))
                {
                    let error = match s.state {
                        SocketState::Connecting { .. } => ECONNREFUSED,
                        _ => ECONNRESET,
                    };
                    s.state = SocketState::Failed { error };
                    s.pending_error = error;
                }
            }
        }
    }
}

/// `getsockopt(TCP_INFO)`: the connection's state and, from the TCP model, what tor's KIST
/// scheduler reads of it (`tcpi_snd_mss`, `tcpi_unacked`, `tcpi_snd_cwnd`); the other fields
/// are 0.
fn tcp_info<S: Copy, N: Network<Socket = S>>(state: &SocketState<S>, net: &N, out: &mut Vec<u8>) {
    // Linux's TCP states: ESTABLISHED 1, SYN_SENT 2, CLOSE 7, LISTEN 10.
    let (code, connection) = match state {
        SocketState::Connected { socket, .. } => (1, Some(*socket)),
        SocketState::Connecting { socket, .. } => (2, Some(*socket)),
        SocketState::Listening { .. } => (10, None),
        _ => (7, None),
    };
    let w = connection
        .and_then(|c| net.send_window(c))
        .unwrap_or_default();
    let start = out.len();
    out.resize(start + TCP_INFO_BYTES, 0);
    let info = &mut out[start..];
    info[0] = code;
    for (offset, value) in [
        (16, w.mss),
        (20, w.mss),
        (24, w.unacked),
        (80, w.cwnd),
        (84, w.mss),
    ] {
        info[offset..offset + 4].copy_from_slice(&value.to_ne_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use onionlab_engine::host_rng;

    /// A network whose one connection the test drives by hand: what the kernel asked of it,
    /// and what it has to give.
    #[derive(Default)]
    struct Scripted {
        listening: Vec<u16>,
        connects: Vec<(u32, u16)>,
        sent: Vec<u8>,
        space: u64,
        inbox: Vec<u8>,
        closed: Vec<u32>,
    }

    impl Network for Scripted {
        type Socket = u32;
        fn address(&self) -> u32 {
            0x6440_0001
        }
        fn host_of(&self, addr: u32) -> Option<u32> {
            addr.checked_sub(0x6440_0001)
        }
        fn address_of(&self, host: u32) -> u32 {
            0x6440_0001 + host
        }
        fn listen(&mut self, port: u16) -> Result<(), i64> {
            self.listening.push(port);
            Ok(())
        }
        fn connect(&mut self, host: u32, port: u16) -> Result<u32, i64> {
            self.connects.push((host, port));
            Ok(7)
        }
        fn send(&mut self, _s: u32, bytes: &[u8]) -> usize {
            let n = bytes.len().min(self.space as usize);
            self.space -= n as u64;
            self.sent.extend_from_slice(&bytes[..n]);
            n
        }
        fn send_space(&self, _s: u32) -> u64 {
            self.space
        }
        fn send_window(&self, _s: u32) -> Option<SendWindow> {
            Some(SendWindow {
                cwnd: 10,
                unacked: 4,
                notsent: 1000,
                mss: 1448,
            })
        }
        fn ports(&self, s: u32) -> (u16, u16) {
            // A made-up pair per connection: the listening port, the peer's ephemeral one.
            (7000, 50000 + s as u16)
        }
        fn readable(&self, _s: u32) -> u64 {
            self.inbox.len() as u64
        }
        fn recv(&mut self, _s: u32, out: &mut Vec<u8>, max: usize) -> usize {
            let n = max.min(self.inbox.len());
            out.extend(self.inbox.drain(..n));
            n
        }
        fn udp_bind(&mut self, port: u16) -> Result<(), i64> {
            self.listening.push(port);
            Ok(())
        }
        fn udp_send(&mut self, _src_port: u16, _host: u32, _port: u16, bytes: &[u8]) {
            self.sent.extend_from_slice(bytes);
        }
        fn shutdown_write(&mut self, s: u32) {
            self.closed.push(s);
        }
        fn close(&mut self, s: u32) {
            self.closed.push(s);
        }
    }

    type TestKernel = Kernel<onionlab_engine::rng::HostRng, u32>;

    fn kernel() -> TestKernel {
        Kernel::new("h", 1000, 0, host_rng(1, 1, 1))
    }

    fn call(
        k: &mut TestKernel,
        net: &mut Scripted,
        nr: i64,
        args: [i64; 6],
        data: &[u8],
    ) -> Outcome {
        let mut out = Vec::new();
        k.call(0, &Call { nr, args, data }, &mut out, net)
    }

    fn retry(k: &mut TestKernel, net: &mut Scripted, out: &mut Vec<u8>) -> Outcome {
        k.retry_main(0, out, net)
    }

    #[test]
    fn a_blocking_client_connects_writes_everything_and_reads_to_the_end() {
        let (mut k, mut net, mut out) = (kernel(), Scripted::default(), Vec::new());
        assert_eq!(
            call(&mut k, &mut net, SYS_SOCKET, [2, 1, 0, 0, 0, 5], &[]),
            Outcome::Done(5)
        );
        assert_eq!(k.virtual_fds()[0], 1 << 5);
        let server = sockaddr_in(0x6440_0003, 80);
        assert_eq!(
            call(&mut k, &mut net, SYS_CONNECT, [5, 0, 16, 0, 0, 0], &server),
            Outcome::Blocked { until: None }
        );
        assert_eq!(net.connects, vec![(2, 80)]);
        assert_eq!(
            retry(&mut k, &mut net, &mut out),
            Outcome::Blocked { until: None }
        );
        k.note(SocketNote::Connected(7), &mut net);
        assert_eq!(retry(&mut k, &mut net, &mut out), Outcome::Done(0));
        // A blocking write takes all of its bytes before it returns, however little room.
        net.space = 3;
        assert_eq!(
            call(&mut k, &mut net, SYS_WRITE, [5, 0, 5, 0, 0, 0], b"hello"),
            Outcome::Blocked { until: None }
        );
        net.space = 10;
        k.note(SocketNote::Ready(7), &mut net);
        assert_eq!(retry(&mut k, &mut net, &mut out), Outcome::Done(5));
        assert_eq!(net.sent, b"hello");
        // A read waits for bytes, and then takes what there is.
        assert_eq!(
            call(&mut k, &mut net, SYS_READ, [5, 0, 100, 0, 0, 0], &[]),
            Outcome::Blocked { until: None }
        );
        net.inbox.extend_from_slice(b"abc");
        k.note(SocketNote::Ready(7), &mut net);
        assert_eq!(retry(&mut k, &mut net, &mut out), Outcome::Done(3));
        assert_eq!(out, b"abc");
        // What KIST reads: bytes never sent, bytes not acknowledged, and TCP_INFO's window.
        let ioctl = |k: &mut TestKernel, net: &mut Scripted, request: i64, out: &mut Vec<u8>| {
            k.call(
                0,
                &Call {
                    nr: SYS_IOCTL,
                    args: [5, request, 1, 0, 0, 0],
                    data: &[0; 4],
                },
                out,
                net,
            )
        };
        assert_eq!(ioctl(&mut k, &mut net, 0x894b, &mut out), Outcome::Done(0));
        assert_eq!(out, 1000i32.to_ne_bytes());
        ioctl(&mut k, &mut net, 0x5411, &mut out);
        assert_eq!(out, (4 * 1448 + 1000i32).to_ne_bytes());
        net.inbox.extend_from_slice(b"de");
        ioctl(&mut k, &mut net, 0x541b, &mut out);
        assert_eq!(out, 2i32.to_ne_bytes(), "FIONREAD");
        assert_eq!(
            ioctl(&mut k, &mut net, 0x5401, &mut out),
            Outcome::Done(-ENOSYS),
            "TCGETS: not a terminal request onionlab serves"
        );
        // The host's interfaces, as `struct ifreq`s: lo, and eth0 with the host's address.
        assert_eq!(ioctl(&mut k, &mut net, 0x8912, &mut out), Outcome::Done(0));
        assert_eq!(out.len(), 80);
        assert_eq!(&out[..3], b"lo\0");
        assert_eq!(out[16..32], sockaddr_in(0x7f00_0001, 0));
        assert_eq!(&out[40..45], b"eth0\0");
        assert_eq!(out[56..72], sockaddr_in(0x6440_0001, 0));
        k.call(
            0,
            &Call {
                nr: SYS_GETSOCKOPT,
                args: [5, IPPROTO_TCP, TCP_INFO, 0, 0, 0],
                data: &[],
            },
            &mut out,
            &mut net,
        );
        assert_eq!(out.len(), TCP_INFO_BYTES);
        assert_eq!(out[0], 1, "established");
        let word = |at: usize| u32::from_ne_bytes(out[at..at + 4].try_into().unwrap());
        assert_eq!((word(16), word(24), word(80)), (1448, 4, 10));
        net.inbox.clear();
        // poll with nothing to read waits for its timeout, then says nothing is ready.
        let mut fds = 5i32.to_ne_bytes().to_vec();
        fds.extend_from_slice(&POLLIN.to_ne_bytes());
        fds.extend_from_slice(&0i16.to_ne_bytes());
        let mut poll_out = Vec::new();
        let polled = k.call(
            1_000,
            &Call {
                nr: SYS_POLL,
                args: [0, 1, 100, 0, 0, 0],
                data: &fds,
            },
            &mut poll_out,
            &mut net,
        );
        assert_eq!(
            polled,
            Outcome::Blocked {
                until: Some(100_001_000)
            }
        );
        assert_eq!(
            k.wake_main(100_001_000, &mut poll_out, &mut net),
            Outcome::Done(0)
        );
        assert_eq!(poll_out, fds);
        // The peer's close: readable, and a read returns 0.
        k.note(SocketNote::PeerClosed(7), &mut net);
        let mut mut_fds = fds.clone();
        mut_fds[4..6].copy_from_slice(&(POLLIN | POLLOUT).to_ne_bytes());
        let mut poll_out = Vec::new();
        let ready = k.call(
            0,
            &Call {
                nr: SYS_POLL,
                args: [0, 1, -1, 0, 0, 0],
                data: &mut_fds,
            },
            &mut poll_out,
            &mut net,
        );
        assert_eq!(ready, Outcome::Done(1));
        assert_eq!(
            i16::from_ne_bytes([poll_out[6], poll_out[7]]),
            POLLIN | POLLOUT
        );
        assert_eq!(
            call(&mut k, &mut net, SYS_READ, [5, 0, 100, 0, 0, 0], &[]),
            Outcome::Done(0)
        );
        assert_eq!(
            call(&mut k, &mut net, SYS_CLOSE, [5, 0, 0, 0, 0, 0], &[]),
            Outcome::Done(0)
        );
        assert_eq!(net.closed, vec![7]);
        assert_eq!(k.virtual_fds()[0], 0);
    }

    #[test]
    fn a_server_accepts_and_a_refused_connect_says_so() {
        let (mut k, mut net, mut out) = (kernel(), Scripted::default(), Vec::new());
        call(&mut k, &mut net, SYS_SOCKET, [2, 1, 0, 0, 0, 3], &[]);
        let any = sockaddr_in(0, 7000);
        assert_eq!(
            call(&mut k, &mut net, SYS_BIND, [3, 0, 16, 0, 0, 0], &any),
            Outcome::Done(0)
        );
        assert_eq!(
            call(&mut k, &mut net, SYS_LISTEN, [3, 16, 0, 0, 0, 0], &[]),
            Outcome::Done(0)
        );
        assert_eq!(net.listening, vec![7000]);
        assert_eq!(
            call(&mut k, &mut net, SYS_ACCEPT, [3, 0, 0, 0, 0, 4], &[]),
            Outcome::Blocked { until: None }
        );
        k.note(
            SocketNote::Accepted {
                socket: 9,
                port: 7000,
                peer: 5,
            },
            &mut net,
        );
        assert_eq!(retry(&mut k, &mut net, &mut out), Outcome::Done(4));
        // The peer's address and port: what a server checks before it keeps a connection.
        assert_eq!(out, sockaddr_in(0x6440_0006, 50009));
        let mut name = Vec::new();
        k.call(
            0,
            &Call {
                nr: SYS_GETSOCKNAME,
                args: [4, 0, 0, 0, 0, 0],
                data: &[],
            },
            &mut name,
            &mut net,
        );
        assert_eq!(name, sockaddr_in(0x6440_0001, 7000));
        // When the process ends, its connections close: the accepted one goes to the stack.
        let mut ended = kernel();
        let mut net2 = Scripted::default();
        call(&mut ended, &mut net2, SYS_SOCKET, [2, 1, 0, 0, 0, 3], &[]);
        call(&mut ended, &mut net2, SYS_BIND, [3, 0, 16, 0, 0, 0], &any);
        call(&mut ended, &mut net2, SYS_LISTEN, [3, 16, 0, 0, 0, 0], &[]);
        ended.note(
            SocketNote::Accepted {
                socket: 11,
                port: 7000,
                peer: 2,
            },
            &mut net2,
        );
        call(&mut ended, &mut net2, SYS_ACCEPT, [3, 0, 0, 0, 0, 4], &[]);
        ended.close_all(&mut net2);
        assert_eq!(net2.closed, vec![11]);
        assert_eq!(ended.virtual_fds()[0], 0);
        // A second socket may not bind the port; a non-blocking connect that is refused.
        call(
            &mut k,
            &mut net,
            SYS_SOCKET,
            [2, 1 | SOCK_NONBLOCK, 0, 0, 0, 6],
            &[],
        );
        assert_eq!(
            call(&mut k, &mut net, SYS_BIND, [6, 0, 16, 0, 0, 0], &any),
            Outcome::Done(-EADDRINUSE)
        );
        let peer = sockaddr_in(0x6440_0002, 9);
        assert_eq!(
            call(&mut k, &mut net, SYS_CONNECT, [6, 0, 16, 0, 0, 0], &peer),
            Outcome::Done(-EINPROGRESS)
        );
        k.note(SocketNote::Reset(7), &mut net);
        let mut err = Vec::new();
        let got = k.call(
            0,
            &Call {
                nr: SYS_GETSOCKOPT,
                args: [6, SOL_SOCKET, SO_ERROR, 0, 0, 0],
                data: &[],
            },
            &mut err,
            &mut net,
        );
        assert_eq!(got, Outcome::Done(0));
        assert_eq!(err, (ECONNREFUSED as i32).to_ne_bytes());
        // Other families and datagram sockets are refused, naming why.
        assert_eq!(
            call(&mut k, &mut net, SYS_SOCKET, [1, 1, 0, 0, 0, 8], &[]),
            Outcome::Done(-EAFNOSUPPORT)
        );
        assert_eq!(
            call(&mut k, &mut net, SYS_SOCKET, [2, 3, 0, 0, 0, 8], &[]),
            Outcome::Done(-EPROTONOSUPPORT)
        );
    }
}
