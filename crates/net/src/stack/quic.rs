//! QUIC connections and their streams on a host's stack.
//!
//! A QUIC connection is one UDP flow between two hosts (the `onionlab-quic` machine turned into
//! datagrams); each of its streams is a socket of its own to the application, written, marked,
//! read and closed with the calls TCP sockets take, so an application that already speaks
//! sockets (a Tor channel) can put one stream where it put one TCP connection. Streams the peer
//! opens are announced with [`SocketEvent::StreamAccepted`]. What KIST reads of a stream
//! ([`NetStack::tcp_info`]) is its connection's congestion state: every stream of a connection
//! shares one congestion window.

use std::collections::VecDeque;
use std::sync::Arc;

use onionlab_engine::time::SimTime;
use onionlab_engine::{Context, HostId};
use onionlab_quic::{QuicConnection, QuicEvent, QuicInfo, QuicPacket, StreamId};
use onionlab_tcp::SendWindow;
use rand::RngExt;

use super::{NetEvent, NetStack, Sent, Socket, SocketEvent, SocketId};
use crate::packet::{PacketBody, QuicDatagram, SocketAddr, UDP_HEADER_BYTES};
use crate::pipe::{ConnPipes, Pipe, QuicPipes};
use crate::topology::Path;
use crate::{NetError, NetStats};

/// Most datagrams one `UDP_SEGMENT` send may carry (Linux's `UDP_MAX_SEGMENTS`).
const MAX_UDP_SEGMENTS: u16 = 64;

/// Most UDP payload bytes one such send may carry: an IPv4 packet's 65,535 bytes less its
/// IP and UDP headers.
const MAX_UDP_BATCH_BYTES: u32 = 65_535 - UDP_HEADER_BYTES;

/// A slot id that names nothing.
const NO_SOCKET: SocketId = SocketAddr {
    slot: u32::MAX,
    generation: 0,
};

pub(super) struct QuicSocket<M> {
    pub(super) conn: QuicConnection,
    pub(super) peer: HostId,
    local_port: u16,
    peer_port: u16,
    peer_conn: Option<SocketAddr>,
    pipes: Arc<QuicPipes<M>>,
    initiator: bool,
    pub(super) waiting_for_link: bool,
    /// The application asked to hear when the connection's state moves (see
    /// `NetStack::watch`).
    pub(super) watched: bool,
    /// Deadline of the timer event in flight, `u64::MAX` if none.
    timer: SimTime,
    /// When this connection's last packet reaches the peer (see `NetStack::transmit`).
    last_arrival: SimTime,
    /// Stream sockets by stream id, those this side opened and those the peer opened.
    ours: StreamTable,
    theirs: StreamTable,
    /// Streams finished in both directions by the application and the peer: their sockets
    /// are released once the connection has forgotten them.
    closing: Vec<SocketId>,
}

impl<M> QuicSocket<M> {
    fn new(
        conn: QuicConnection,
        peer: HostId,
        local_port: u16,
        peer_port: u16,
        peer_conn: Option<SocketAddr>,
        pipes: Arc<QuicPipes<M>>,
        initiator: bool,
    ) -> Self {
        QuicSocket {
            conn,
            peer,
            local_port,
            peer_port,
            peer_conn,
            pipes,
            initiator,
            waiting_for_link: false,
            watched: false,
            timer: u64::MAX,
            last_arrival: 0,
            ours: StreamTable::default(),
            theirs: StreamTable::default(),
            closing: Vec::new(),
        }
    }

    fn table(&mut self, stream: StreamId) -> &mut StreamTable {
        // Bit 0 of a stream id names its initiator (0: the client).
        if (stream.0 & 1 == 0) == self.initiator {
            &mut self.ours
        } else {
            &mut self.theirs
        }
    }
}

/// Stream sockets of one initiator by stream number (`id >> 2`), as a window over the
/// numbers still open: numbers are handed out in order, so the window's start moves up as the
/// oldest streams close, and memory follows the span of open streams, not all streams ever.
#[derive(Default)]
struct StreamTable {
    base: u64,
    sockets: VecDeque<SocketId>,
}

impl StreamTable {
    fn get(&self, stream: StreamId) -> Option<SocketId> {
        let i = (stream.0 >> 2).checked_sub(self.base)?;
        self.sockets
            .get(usize::try_from(i).ok()?)
            .copied()
            .filter(|s| *s != NO_SOCKET)
    }

    fn insert(&mut self, stream: StreamId, socket: SocketId) {
        let n = stream.0 >> 2;
        if self.sockets.is_empty() {
            self.base = n;
        }
        debug_assert!(n >= self.base, "stream numbers are handed out in order");
        let i = (n - self.base) as usize;
        if i >= self.sockets.len() {
            self.sockets.resize(i + 1, NO_SOCKET);
        }
        self.sockets[i] = socket;
    }

    fn remove(&mut self, stream: StreamId) {
        let Some(i) = (stream.0 >> 2).checked_sub(self.base) else {
            return;
        };
        if let Some(s) = self.sockets.get_mut(i as usize) {
            *s = NO_SOCKET;
        }
        while self.sockets.front() == Some(&NO_SOCKET) {
            self.sockets.pop_front();
            self.base += 1;
        }
    }

    fn all(&self) -> impl Iterator<Item = SocketId> + '_ {
        self.sockets.iter().copied().filter(|s| *s != NO_SOCKET)
    }
}

pub(super) struct StreamSocket<M> {
    pub(super) conn: SocketId,
    pub(super) stream: StreamId,
    pipes: Arc<ConnPipes<M>>,
    /// This side opened the stream, so it writes the pipes' forward direction.
    opener: bool,
    pub(super) auto_read: bool,
    closed_here: bool,
    closed_there: bool,
}

impl<M> StreamSocket<M> {
    fn out_pipe(&self) -> &Pipe<M> {
        if self.opener {
            &self.pipes.forward
        } else {
            &self.pipes.backward
        }
    }

    fn in_pipe(&self) -> &Pipe<M> {
        if self.opener {
            &self.pipes.backward
        } else {
            &self.pipes.forward
        }
    }
}

/// Adds a connection's counters to a host's.
pub(super) fn add_stats(s: &mut NetStats, info: &QuicInfo) {
    s.quic_lost += info.packets_lost;
    s.quic_ptos += info.ptos;
    s.quic_udp_bytes += info.udp_bytes_sent;
    s.quic_stream_bytes += info.stream_bytes_sent;
    s.quic_stream_bytes_retransmitted += info.stream_bytes_retransmitted;
}

impl<M: Clone + PartialEq + Send + 'static> NetStack<M> {
    pub(super) fn quic_ref(&self, id: SocketId) -> Option<&QuicSocket<M>> {
        match self.sockets.get(id)? {
            Socket::Quic(q) => Some(q),
            _ => None,
        }
    }

    fn quic_mut(&mut self, id: SocketId) -> Option<&mut QuicSocket<M>> {
        match self.sockets.get_mut(id)? {
            Socket::Quic(q) => Some(q),
            _ => None,
        }
    }

    fn stream_ref(&self, id: SocketId) -> Option<&StreamSocket<M>> {
        match self.sockets.get(id)? {
            Socket::Stream(s) => Some(s),
            _ => None,
        }
    }

    fn stream_mut(&mut self, id: SocketId) -> Option<&mut StreamSocket<M>> {
        match self.sockets.get_mut(id)? {
            Socket::Stream(s) => Some(s),
            _ => None,
        }
    }

    /// The connection a socket belongs to: itself for a QUIC connection, its connection for a
    /// stream.
    pub fn quic_conn_of(&self, id: SocketId) -> Option<SocketId> {
        match self.sockets.get(id)? {
            Socket::Quic(_) => Some(id),
            Socket::Stream(st) => Some(st.conn),
            Socket::Tcp(_) => None,
        }
    }

    /// A QUIC connection's state and counters (for a stream: its connection's).
    pub fn quic_info(&self, id: SocketId) -> Option<QuicInfo> {
        let conn = self.quic_conn_of(id)?;
        self.quic_ref(conn).map(|q| q.conn.info())
    }

    /// Stream bytes written on a stream and not yet sent.
    pub fn stream_unsent(&self, id: SocketId) -> u64 {
        let Some(st) = self.stream_ref(id) else {
            return 0;
        };
        self.quic_ref(st.conn)
            .map_or(0, |q| q.conn.stream_unsent(st.stream))
    }

    /// KIST's view of a QUIC connection: its window and flight in datagrams, and the bytes
    /// written to all its streams and not yet sent; of a stream: the same, with the stream's
    /// own unsent bytes.
    pub(super) fn quic_send_window(&self, id: SocketId) -> Option<SendWindow> {
        let q = self.quic_ref(self.quic_conn_of(id)?)?;
        let i = q.conn.info();
        let notsent = match self.stream_ref(id) {
            Some(st) => q.conn.stream_unsent(st.stream),
            None => i.unsent,
        };
        let mss = i.max_datagram.max(1);
        let segments = |bytes: u64| bytes.div_ceil(mss as u64).min(u32::MAX as u64) as u32;
        Some(SendWindow {
            cwnd: segments(i.cwnd),
            unacked: segments(i.bytes_in_flight),
            notsent,
            mss,
        })
    }

    /// Accepts QUIC connections on UDP `port`.
    pub fn quic_listen(&mut self, port: u16) -> Result<(), NetError> {
        if self.quic_ports.contains(&port) || self.udp_ports.contains(&port) {
            return Err(NetError::PortInUse(port));
        }
        self.quic_ports.push(port);
        Ok(())
    }

    /// Opens a QUIC connection to `port` on `dst`. Streams may be opened on it at once; their
    /// data waits for the handshake. [`SocketEvent::Connected`] reports the handshake's end.
    pub fn quic_connect<E: From<NetEvent<M>>>(
        &mut self,
        ctx: &mut Context<'_, E>,
        dst: HostId,
        port: u16,
    ) -> SocketId {
        let local_port = self.ephemeral_port();
        let conn = QuicConnection::connect(self.net.quic_config().clone(), ctx.now());
        let pipes = Arc::new(QuicPipes::default());
        let q = QuicSocket::new(conn, dst, local_port, port, None, pipes, true);
        let id = self.sockets.insert(Socket::Quic(Box::new(q)));
        self.drive_quic(ctx, id);
        id
    }

    /// Opens a stream on QUIC connection `conn`; `None` if `conn` is not one or its stream
    /// limit is reached. The stream can be written at once; the peer learns of it with its
    /// first data.
    pub fn open_stream(&mut self, conn: SocketId) -> Option<SocketId> {
        let q = self.quic_mut(conn)?;
        let stream = q.conn.open_stream()?;
        let pipes = Arc::new(ConnPipes::default());
        q.pipes.offer(stream.0, pipes.clone());
        let id = self.sockets.insert(Socket::Stream(StreamSocket {
            conn,
            stream,
            pipes,
            opener: true,
            auto_read: true,
            closed_here: false,
            closed_there: false,
        }));
        self.quic_mut(conn)
            .unwrap()
            .table(stream)
            .insert(stream, id);
        Some(id)
    }

    pub(super) fn stream_write(&mut self, id: SocketId, bytes: u64) -> u64 {
        let Some(&StreamSocket { conn, stream, .. }) = self.stream_ref(id) else {
            return 0;
        };
        self.quic_mut(conn)
            .map_or(0, |q| q.conn.send(stream, bytes))
    }

    pub(super) fn stream_mark(&mut self, id: SocketId, message: M) {
        let Some(st) = self.stream_ref(id) else {
            return;
        };
        if let Some(q) = self.quic_ref(st.conn) {
            st.out_pipe().push(q.conn.written(st.stream), message);
        }
    }

    /// Ends `count` equal messages of `step` bytes each on stream `id`, the last at the end
    /// of the data written so far (as TCP's `mark_run`).
    pub(super) fn stream_mark_run(&mut self, id: SocketId, step: u32, count: u32, message: M) {
        let Some(st) = self.stream_ref(id) else {
            return;
        };
        if let Some(q) = self.quic_ref(st.conn) {
            st.out_pipe()
                .push_run(q.conn.written(st.stream), step, count, message);
        }
    }

    pub(super) fn stream_wait_writable(&mut self, id: SocketId) {
        if let Some(&StreamSocket { conn, stream, .. }) = self.stream_ref(id) {
            if let Some(q) = self.quic_mut(conn) {
                q.conn.wait_writable(stream);
            }
        }
    }

    /// Reads up to `max` bytes of a stream; the messages they complete become events.
    pub(super) fn stream_read(&mut self, id: SocketId, max: u64) -> u64 {
        let Some(&StreamSocket { conn, stream, .. }) = self.stream_ref(id) else {
            return 0;
        };
        let Some(q) = self.quic_mut(conn) else {
            return 0;
        };
        let n = q.conn.read(stream, max);
        if n == 0 {
            return 0;
        }
        let offset = q.conn.read_offset(stream);
        self.events.push_back(SocketEvent::Data {
            socket: id,
            bytes: n,
        });
        let Some(Socket::Stream(st)) = self.sockets.get(id) else {
            unreachable!()
        };
        let events = &mut self.events;
        st.in_pipe().take_through(offset, |message, count| {
            events.push_back(SocketEvent::Message {
                socket: id,
                message,
                count,
            })
        });
        n
    }

    /// Closes a QUIC connection, or finishes a stream.
    pub(super) fn quic_close<E: From<NetEvent<M>>>(
        &mut self,
        ctx: &mut Context<'_, E>,
        id: SocketId,
    ) {
        let now = ctx.now();
        match self.sockets.get_mut(id) {
            Some(Socket::Quic(q)) => {
                q.conn.close(now);
                self.drive_quic(ctx, id);
            }
            Some(Socket::Stream(st)) => {
                if st.closed_here {
                    return;
                }
                st.closed_here = true;
                let (conn, stream, both) = (st.conn, st.stream, st.closed_there);
                if let Some(q) = self.quic_mut(conn) {
                    q.conn.finish(stream);
                    if both {
                        q.closing.push(id);
                    }
                }
                self.drive_quic(ctx, conn);
            }
            _ => {}
        }
    }

    pub(super) fn quic_timer<E: From<NetEvent<M>>>(
        &mut self,
        ctx: &mut Context<'_, E>,
        socket: SocketId,
        deadline: SimTime,
    ) {
        let now = ctx.now();
        let Some(q) = self.quic_mut(socket) else {
            return;
        };
        // A later timer replaced this one, or an earlier one already fired.
        if q.timer != deadline {
            return;
        }
        q.timer = u64::MAX;
        if q.conn.poll_timeout().is_some_and(|t| t <= now) {
            q.conn.on_timeout(now);
        }
        self.drive_quic(ctx, socket);
    }

    pub(super) fn receive_quic<E: From<NetEvent<M>>>(
        &mut self,
        ctx: &mut Context<'_, E>,
        from: HostId,
        mut d: Box<QuicDatagram<M>>,
    ) {
        let target = match d.dst_conn {
            Some(addr) if self.quic_ref(addr).is_some() => Some(addr),
            // The client's retransmitted first flight goes to the connection it created.
            None => self
                .half_open
                .iter()
                .find(|(h, peer, _)| *h == from && *peer == d.src_conn)
                .map(|(_, _, ours)| *ours),
            _ => None,
        };
        if target.is_none() && d.dst_conn.is_none() && self.quic_ports.contains(&d.dst_port) {
            if let Some(pipes) = d.pipes.take() {
                self.quic_accept(ctx, from, &d, pipes);
                return;
            }
        }
        let Some(id) = target else {
            self.stats.quic_unmatched += 1;
            return;
        };
        let now = ctx.now();
        let q = self.quic_mut(id).unwrap();
        if q.peer_conn.is_none() {
            q.peer_conn = Some(d.src_conn);
        }
        // A batch is taken whole before anything is sent back (RFC 9000 13.2.1 lets a
        // receiver process the packets at hand before deciding to acknowledge), so it is
        // answered by one ACK, as a stack reading GRO batches answers it.
        q.conn.on_packet(now, &d.packet);
        for packet in &d.more {
            q.conn.on_packet(now, packet);
        }
        self.drive_quic(ctx, id);
    }

    fn quic_accept<E: From<NetEvent<M>>>(
        &mut self,
        ctx: &mut Context<'_, E>,
        from: HostId,
        d: &QuicDatagram<M>,
        pipes: Arc<QuicPipes<M>>,
    ) {
        let conn = QuicConnection::accept(self.net.quic_config().clone(), ctx.now(), &d.packet);
        let q = QuicSocket::new(
            conn,
            from,
            d.dst_port,
            d.src_port,
            Some(d.src_conn),
            pipes,
            false,
        );
        let id = self.sockets.insert(Socket::Quic(Box::new(q)));
        self.half_open.push((from, d.src_conn, id));
        self.drive_quic(ctx, id);
    }

    /// Brings a QUIC connection up to date after anything happened to it: reports its
    /// events (creating sockets for the streams the peer opened), reads for streams that read
    /// automatically, sends what it has to send, re-arms its timer, and frees it once closed.
    pub(super) fn drive_quic<E: From<NetEvent<M>>>(
        &mut self,
        ctx: &mut Context<'_, E>,
        id: SocketId,
    ) {
        let now = ctx.now();
        // Every change to the connection's state, from a packet, a timer, the link or the
        // application, ends here.
        if self.quic_ref(id).is_some_and(|q| q.watched) {
            self.watch_hit = true;
        }
        loop {
            let Some(q) = self.quic_mut(id) else {
                return;
            };
            let Some(event) = q.conn.poll_event() else {
                break;
            };
            match event {
                QuicEvent::Connected => {
                    let out = if q.initiator {
                        SocketEvent::Connected(id)
                    } else {
                        let (peer, port) = (q.peer, q.local_port);
                        self.half_open.retain(|(_, _, ours)| *ours != id);
                        SocketEvent::Accepted {
                            socket: id,
                            port,
                            peer,
                        }
                    };
                    self.events.push_back(out);
                }
                QuicEvent::StreamOpened(stream) => {
                    let pipes = q.pipes.take(stream.0).unwrap_or_default();
                    let socket = self.sockets.insert(Socket::Stream(StreamSocket {
                        conn: id,
                        stream,
                        pipes,
                        opener: false,
                        auto_read: true,
                        closed_here: false,
                        closed_there: false,
                    }));
                    self.quic_mut(id)
                        .unwrap()
                        .table(stream)
                        .insert(stream, socket);
                    self.events.push_back(SocketEvent::StreamAccepted {
                        conn: id,
                        stream: socket,
                    });
                }
                QuicEvent::StreamReadable(stream) => {
                    let Some(socket) = q.table(stream).get(stream) else {
                        continue;
                    };
                    if self.stream_ref(socket).is_some_and(|s| s.auto_read) {
                        self.stream_read(socket, u64::MAX);
                    } else {
                        self.events.push_back(SocketEvent::Readable(socket));
                    }
                }
                QuicEvent::StreamWritable(stream) => {
                    if let Some(socket) = q.table(stream).get(stream) {
                        self.events.push_back(SocketEvent::Writable(socket));
                    }
                }
                QuicEvent::StreamFinished(stream) => {
                    let Some(socket) = q.table(stream).get(stream) else {
                        continue;
                    };
                    let st = self.stream_mut(socket).unwrap();
                    st.closed_there = true;
                    if st.closed_here {
                        self.quic_mut(id).unwrap().closing.push(socket);
                    }
                    self.events.push_back(SocketEvent::PeerClosed(socket));
                }
                QuicEvent::Closed | QuicEvent::TimedOut => {
                    let out = if event == QuicEvent::Closed {
                        SocketEvent::Closed(id)
                    } else {
                        SocketEvent::TimedOut(id)
                    };
                    self.events.push_back(out);
                }
            }
        }
        self.release_closed_streams(id);
        self.send_quic(ctx, id);
        let Some(q) = self.quic_mut(id) else {
            return;
        };
        if q.conn.is_closed() {
            self.release_quic(id);
            return;
        }
        if let Some(deadline) = q.conn.poll_timeout() {
            if deadline < q.timer {
                q.timer = deadline;
                ctx.schedule_at(
                    deadline.max(now),
                    E::from(NetEvent::QuicTimer {
                        socket: id,
                        deadline,
                    }),
                );
            }
        }
    }

    /// Frees the sockets of streams both sides have finished, once the connection has
    /// forgotten them (everything sent on them was acknowledged).
    fn release_closed_streams(&mut self, id: SocketId) {
        let mut i = 0;
        loop {
            let Some(q) = self.quic_mut(id) else {
                return;
            };
            let Some(&socket) = q.closing.get(i) else {
                return;
            };
            let Some(Socket::Stream(st)) = self.sockets.get(socket) else {
                unreachable!("a closing stream keeps its slot until released here")
            };
            let stream = st.stream;
            let q = self.quic_mut(id).unwrap();
            if q.conn.stream_is_open(stream) {
                i += 1;
                continue;
            }
            q.closing.swap_remove(i);
            q.table(stream).remove(stream);
            self.free_slot(socket);
            self.events.push_back(SocketEvent::Closed(socket));
        }
    }

    /// Sends what the connection has to send while the upstream link takes it. Under
    /// segmentation offload, packets leave in batches as with Linux's `UDP_SEGMENT`: those of
    /// one size, the last perhaps shorter, as many as `QuicConnection::offload_datagrams`
    /// allows (at most [`MAX_UDP_SEGMENTS`]) within 64 KiB, each a datagram on the wire but
    /// one event in the simulation ([`QuicDatagram::more`]).
    fn send_quic<E: From<NetEvent<M>>>(&mut self, ctx: &mut Context<'_, E>, id: SocketId) {
        let now = ctx.now();
        let limit = self.net.config.up_tcp_backlog;
        let offload = match self.sockets.get(id) {
            Some(Socket::Quic(q)) if self.net.config.segment_offload => {
                usize::from(q.conn.offload_datagrams(MAX_UDP_SEGMENTS))
            }
            _ => 0,
        };
        // The batch gathered so far: its first packet, the rest, and its payload bytes.
        let mut batch: Option<(QuicPacket, Vec<QuicPacket>, u32)> = None;
        loop {
            let held = batch.as_ref().map_or(0, |(_, more, bytes)| {
                u64::from(bytes + UDP_HEADER_BYTES * (1 + more.len() as u32))
            });
            let backlog = self.up.backlog_bytes(now) + held;
            let Some(Socket::Quic(q)) = self.sockets.get_mut(id) else {
                return;
            };
            if q.waiting_for_link {
                break;
            }
            // The kernel holds a UDP socket's datagrams back as it holds TCP's segments.
            if backlog > limit && !q.conn.is_closed() {
                q.waiting_for_link = true;
                self.link_waiters.push_back(id);
                self.arm_up_ready(ctx);
                break;
            }
            let Some(packet) = q.conn.poll_transmit(now) else {
                break;
            };
            // The client's first packets carry its pipes, and go alone.
            let joinable = offload > 1 && q.peer_conn.is_some();
            let peer = q.peer;
            if let Some((first, more, bytes)) = batch.as_mut() {
                let last = more.last().unwrap_or(first);
                if joinable
                    && last.bytes == first.bytes
                    && packet.bytes <= first.bytes
                    && more.len() + 1 < offload
                    && *bytes + packet.bytes <= MAX_UDP_BATCH_BYTES
                {
                    if more.capacity() == 0 {
                        // Allocated once a second datagram joins: most lone datagrams are
                        // ACKs, which would otherwise each take a batch's worth.
                        more.reserve_exact(offload - 1);
                    }
                    more.push(packet);
                    *bytes += packet.bytes;
                    continue;
                }
            }
            if let Some((first, more, _)) = batch.take() {
                self.send_quic_batch(ctx, id, first, more);
            }
            if joinable {
                batch = Some((packet, Vec::new(), packet.bytes));
            } else {
                let path = self.net.path(self.host, peer);
                self.send_datagram(ctx, id, packet, Vec::new(), path);
            }
        }
        if let Some((first, more, _)) = batch {
            self.send_quic_batch(ctx, id, first, more);
        }
    }

    /// Sends a batch: each datagram is lost on the path on its own, and a lost one splits
    /// the batch, the datagrams before it leaving as one batch, while it still takes its time
    /// on the upstream link (as TCP's offloaded segments do, `NetStack::send_offloaded`).
    fn send_quic_batch<E: From<NetEvent<M>>>(
        &mut self,
        ctx: &mut Context<'_, E>,
        id: SocketId,
        first: QuicPacket,
        more: Vec<QuicPacket>,
    ) {
        let Some(Socket::Quic(q)) = self.sockets.get(id) else {
            return;
        };
        let path = self.net.path(self.host, q.peer);
        if more.is_empty() || path.loss <= 0.0 {
            self.send_datagram(ctx, id, first, more, path);
            return;
        }
        // The loss is rolled here, datagram by datagram; the runs kept go on a lossless path.
        let kept = Path { loss: 0.0, ..path };
        let mut run: Option<(QuicPacket, Vec<QuicPacket>)> = None;
        for packet in std::iter::once(first).chain(more) {
            if ctx.rng().random::<f64>() < path.loss {
                if let Some((first, more)) = run.take() {
                    self.send_datagram(ctx, id, first, more, kept);
                }
                self.lost_on_path(ctx.now(), packet.bytes + UDP_HEADER_BYTES);
                continue;
            }
            match run.as_mut() {
                Some((_, more)) => more.push(packet),
                None => run = Some((packet, Vec::new())),
            }
        }
        if let Some((first, more)) = run {
            self.send_datagram(ctx, id, first, more, kept);
        }
    }

    /// Puts `first` and the batch `more` that follows it on the wire as one event, over
    /// `path` to the peer (without its loss where the caller has already rolled it).
    fn send_datagram<E: From<NetEvent<M>>>(
        &mut self,
        ctx: &mut Context<'_, E>,
        id: SocketId,
        first: QuicPacket,
        more: Vec<QuicPacket>,
        path: Path,
    ) {
        let Some(Socket::Quic(q)) = self.sockets.get(id) else {
            return;
        };
        let datagram = QuicDatagram {
            src_port: q.local_port,
            dst_port: q.peer_port,
            src_conn: id,
            dst_conn: q.peer_conn,
            packet: first,
            more,
            pipes: q.peer_conn.is_none().then(|| q.pipes.clone()),
        };
        let (peer, after) = (q.peer, q.last_arrival);
        let bytes = datagram.wire_bytes();
        let packet = self.packet(peer, bytes, PacketBody::Quic(Box::new(datagram)));
        if let Sent::Arrives(at) = self.transmit(ctx, path, packet, after) {
            if let Some(Socket::Quic(q)) = self.sockets.get_mut(id) {
                q.last_arrival = at;
            }
        }
    }

    /// Frees a closed connection and the sockets of its streams (which are reset).
    fn release_quic(&mut self, id: SocketId) {
        let Some(Socket::Quic(q)) = self.free_slot(id) else {
            return;
        };
        add_stats(&mut self.stats, &q.conn.info());
        for socket in q.ours.all().chain(q.theirs.all()) {
            self.free_slot(socket);
            self.events.push_back(SocketEvent::Reset(socket));
        }
    }
}
