//! A host's network stack: its access links, its TCP sockets and UDP ports.
//!
//! The stack turns the sans-IO TCP machines into packets on the wire and back. A packet leaves
//! through the upstream link (serialisation at the host's up rate), may be lost on the path
//! (drawn from the sending host's random stream), arrives after the path latency (plus jitter,
//! never ahead of the connection's previous packet), waits in the receiver's downstream queue
//! (the router in front of it) and is then handed to the socket it is addressed to.
//! Applications talk to the stack through calls (`connect`, `write`, `mark`, `flush`, ...) and
//! read what happened from `poll_event`.

use std::collections::VecDeque;
use std::sync::Arc;

use onionlab_engine::slab::Slab;
use onionlab_engine::time::SimTime;
use onionlab_engine::{Context, HostId};
use onionlab_tcp::{
    SendWindow, TcpConfig, TcpConnection, TcpEvent, TcpFlags, TcpSegment, TcpState,
};
use rand::RngExt;

use crate::link::Link;
use crate::network::{Network, MAX_OFFLOAD_SEGMENTS};
use crate::packet::{Packet, PacketBody, SocketAddr, TcpPacket, UdpDatagram, UDP_HEADER_BYTES};
use crate::pipe::ConnPipes;
use crate::topology::Path;
use crate::NetError;

mod quic;
use quic::{QuicSocket, StreamSocket};

/// A TCP socket of this host.
pub type SocketId = SocketAddr;

/// Events the stack schedules for itself; the host model passes them back to `handle`.
pub enum NetEvent<M> {
    /// A packet reached this host's downstream queue.
    Arrive(Packet<M>),
    /// A packet has been received in full and goes to its socket.
    Deliver(Packet<M>),
    /// A TCP timer of `socket` set for `deadline`.
    TcpTimer {
        /// The TCP socket whose timer it is.
        socket: SocketId,
        /// When the timer was set to fire; a timer re-armed since then makes the event stale.
        deadline: SimTime,
    },
    /// A QUIC connection's timer (loss detection, PTO, ACK delay, idle) set for `deadline`.
    QuicTimer {
        /// The QUIC connection's socket.
        socket: SocketId,
        /// When the timer was set to fire; a timer re-armed since then makes the event stale.
        deadline: SimTime,
    },
    /// The upstream link has drained enough to take more TCP segments (or QUIC packets).
    UpReady,
}

/// What happened on the host's sockets, for the application.
#[derive(Debug, PartialEq)]
pub enum SocketEvent<M> {
    /// A connection this host opened is established.
    Connected(SocketId),
    /// A connection to a listening port is established.
    Accepted {
        /// The new connection's socket (a TCP socket or a QUIC connection).
        socket: SocketId,
        /// The local port it was accepted on.
        port: u16,
        /// The host that opened it.
        peer: HostId,
    },
    /// New in-order bytes wait on a socket that does not read automatically.
    Readable(SocketId),
    /// `bytes` new in-order bytes were read (automatically, or by `read`).
    Data {
        /// The socket (TCP socket or QUIC stream) that read them.
        socket: SocketId,
        /// In-order payload bytes read.
        bytes: u64,
    },
    /// Whole messages arrived (their last bytes were read): `count` equal ones back to back,
    /// which the receiver handles as that many messages, and may handle at once.
    Message {
        /// The socket (TCP socket or QUIC stream) the messages arrived on.
        socket: SocketId,
        /// The descriptor the sender marked the messages with.
        message: M,
        /// How many equal messages arrived back to back, at least 1.
        count: u32,
    },
    /// Send buffer space freed up after a write found it full.
    Writable(SocketId),
    /// The peer closed its direction; everything it sent has been delivered.
    PeerClosed(SocketId),
    /// The connection closed in order; the socket id is no longer valid.
    Closed(SocketId),
    /// The peer reset the connection, or refused it (RST in reply to our SYN).
    Reset(SocketId),
    /// Retransmissions were exhausted.
    TimedOut(SocketId),
    /// The peer opened a stream on QUIC connection `conn`; `stream` is its socket.
    StreamAccepted {
        /// The QUIC connection.
        conn: SocketId,
        /// The new stream's socket.
        stream: SocketId,
    },
    /// A UDP datagram arrived on a bound port.
    Datagram {
        /// The local port it arrived on.
        port: u16,
        /// The sending host.
        from: HostId,
        /// The port it was sent from.
        from_port: u16,
        /// UDP payload length, in bytes.
        len: u32,
        /// The descriptor the sender gave the datagram.
        message: M,
    },
}

/// Counters of a host's traffic.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetStats {
    /// Wire packets the upstream link took (each segment of an offloaded packet counts), lost
    /// on the path or not.
    pub packets_sent: u64,
    /// Wire bytes (IP headers included) of those packets.
    pub bytes_sent: u64,
    /// The events those packets left in: an offloaded batch of segments or datagrams counts
    /// once. A segment that the path loses out of a batch (its loss rolled by the sender, see
    /// `NetStack::lost_on_path`) is in `packets_sent` and in no batch. Against
    /// `packets_sent`, how well offload batches a host's traffic.
    pub batches_sent: u64,
    /// Wire packets delivered to this host past its downstream queue (each segment counts).
    pub packets_received: u64,
    /// Wire bytes (IP headers included) of those packets.
    pub bytes_received: u64,
    /// Packets dropped because the upstream queue was full.
    pub up_drops: u64,
    /// Packets dropped because the downstream queue was full.
    pub down_drops: u64,
    /// Packets this host sent that the path lost.
    pub path_losses: u64,
    /// TCP segments for no (or a stale) socket.
    pub tcp_unmatched: u64,
    /// Datagrams for an unbound port.
    pub udp_unreachable: u64,
    /// TCP segments retransmitted, over all sockets (open and closed).
    pub tcp_retransmits: u64,
    /// TCP retransmission timeouts, over all sockets.
    pub tcp_timeouts: u64,
    /// QUIC packets for no (or a stale) connection.
    pub quic_unmatched: u64,
    /// QUIC packets declared lost, over all QUIC connections (open and closed).
    pub quic_lost: u64,
    /// QUIC probe timeouts (PTO expiries), over all QUIC connections.
    pub quic_ptos: u64,
    /// UDP payload bytes of every QUIC packet sent, over all QUIC connections.
    pub quic_udp_bytes: u64,
    /// QUIC stream payload bytes sent for the first time.
    pub quic_stream_bytes: u64,
    /// QUIC stream payload bytes sent again (after loss, or as probes).
    pub quic_stream_bytes_retransmitted: u64,
}

/// `repr(C)`, the stack's own fields first and the TCP state after: every packet and timer
/// reads some of them (the timer, the pipes, the flags), and here they share the slab slot's
/// first cache line with its generation (see `onionlab_engine::slab`).
#[repr(C)]
struct TcpSocket<M> {
    /// Deadline of the timer event in flight, `u64::MAX` if none.
    timer: SimTime,
    /// When this socket's last packet reaches the peer: a later one never arrives earlier.
    last_arrival: SimTime,
    pipes: Arc<ConnPipes<M>>,
    /// The peer's socket once its first segment has named it, [`NO_SOCKET`] before: a
    /// sentinel rather than an `Option`, whose tag would take four more bytes and, with the
    /// flags below, push the slot into another eight of padding.
    peer_socket: SocketAddr,
    peer: HostId,
    local_port: u16,
    peer_port: u16,
    initiator: bool,
    auto_read: bool,
    waiting_for_link: bool,
    /// Whether the application asked to hear when this socket's state moves (see
    /// [`NetStack::watch`]).
    watched: bool,
    /// This side has written a message into its pipe; its packets say so (`Packet::messages`).
    marked: bool,
    /// A packet from the peer said it has written messages into its pipe. Until one does, a
    /// read takes nothing from the pipe and so need not look at it: every message ends at a
    /// byte its sender had written before it marked the message, and the segment carrying
    /// that byte left after the mark, saying so, and was received before the byte is read.
    /// (A message of no bytes marked after everything before it was sent is the exception:
    /// it may reach the reader one read later. No application here writes one.)
    peer_marked: bool,
    /// The path to the peer, looked up once: the lookup reads the network's host table and
    /// path matrix, cold lines on a large network, and a socket sends many packets.
    path: Path,
    conn: TcpConnection,
}

/// No socket: [`TcpSocket::peer_socket`] before the peer is known, and the sender of a
/// reset for a segment that matched no socket.
const NO_SOCKET: SocketAddr = SocketAddr {
    slot: u32::MAX,
    generation: 0,
};

impl<M> TcpSocket<M> {
    fn known_peer(&self) -> Option<SocketAddr> {
        (self.peer_socket != NO_SOCKET).then_some(self.peer_socket)
    }

    /// The pipe this side writes message descriptors into.
    fn out_pipe(&self) -> &crate::pipe::Pipe<M> {
        if self.initiator {
            &self.pipes.forward
        } else {
            &self.pipes.backward
        }
    }

    /// Ends a message at the end of the data written so far.
    fn mark(&mut self, message: M)
    where
        M: Clone + PartialEq,
    {
        self.marked = true;
        self.out_pipe().push(self.conn.written(), message);
    }

    /// Ends `count` equal messages of `step` bytes each, the last at the end of the data
    /// written so far.
    fn mark_run(&mut self, step: u32, count: u32, message: M)
    where
        M: Clone + PartialEq,
    {
        self.marked = true;
        self.out_pipe()
            .push_run(self.conn.written(), step, count, message);
    }

    fn in_pipe(&self) -> &crate::pipe::Pipe<M> {
        if self.initiator {
            &self.pipes.backward
        } else {
            &self.pipes.forward
        }
    }
}

/// What occupies a socket slot. TCP sockets, QUIC connections and QUIC streams share one
/// slot space, so an application indexes its per-socket tables the same way for all three.
/// TCP sockets, by far the most numerous, stay inline (no allocation and no indirection per
/// socket); a stream slot is larger than it needs to be, which costs little as streams live
/// only under the `quic` design.
#[allow(clippy::large_enum_variant)]
enum Socket<M> {
    Tcp(TcpSocket<M>),
    /// Boxed: a QUIC connection is larger than a TCP socket, and most slots hold TCP sockets.
    Quic(Box<QuicSocket<M>>),
    Stream(StreamSocket<M>),
}

const FIRST_EPHEMERAL_PORT: u16 = 49152;

/// One host's network stack. `M` is the application's message descriptor type.
pub struct NetStack<M> {
    host: HostId,
    net: Arc<Network>,
    up: Link,
    down: Link,
    /// The sockets, under ids that never find a later socket in the same slot. A slot holds a
    /// TCP socket inline (hundreds of bytes): a client holds one or two sockets, a big relay
    /// thousands.
    sockets: Slab<SocketId, Socket<M>>,
    listeners: Vec<u16>,
    /// Ports accepting QUIC connections.
    quic_ports: Vec<u16>,
    udp_ports: Vec<u16>,
    /// Accepted sockets still in the handshake, by (peer, peer's socket), so that a
    /// retransmitted SYN finds the socket it already created.
    half_open: Vec<(HostId, SocketAddr, SocketAddr)>,
    /// Sockets with segments to send that the upstream link could not take yet.
    link_waiters: VecDeque<SocketAddr>,
    up_ready_armed: bool,
    next_port: u16,
    events: VecDeque<SocketEvent<M>>,
    /// Whether a watched socket's state may have moved since the last `take_watch_hit`.
    watch_hit: bool,
    /// Whether new TCP sockets read arriving data by themselves (see
    /// [`NetStack::set_auto_read_default`]).
    auto_read: bool,
    stats: NetStats,
}

impl<M: Clone + PartialEq + Send + 'static> NetStack<M> {
    /// Host `host`'s stack on `net`: its access links, no sockets yet.
    pub fn new(host: HostId, net: Arc<Network>) -> Self {
        let links = net.host(host).clone();
        let cfg = &net.config;
        Self {
            host,
            up: Link::new(links.up_bps, cfg.up_queue_bytes),
            down: Link::new(links.down_bps, links.down_queue_bytes),
            net,
            sockets: Slab::new(),
            listeners: Vec::new(),
            quic_ports: Vec::new(),
            udp_ports: Vec::new(),
            half_open: Vec::new(),
            link_waiters: VecDeque::new(),
            up_ready_armed: false,
            next_port: FIRST_EPHEMERAL_PORT,
            events: VecDeque::new(),
            watch_hit: false,
            auto_read: true,
            stats: NetStats::default(),
        }
    }

    /// Whether the TCP sockets this stack opens or accepts from now on read arriving data by
    /// themselves (the default) or wait for [`NetStack::read`]. A host whose application reads
    /// for itself (a managed process) turns it off before it has a socket: an accepted
    /// connection's first bytes may come with its handshake, before the application hears of
    /// it.
    pub fn set_auto_read_default(&mut self, on: bool) {
        self.auto_read = on;
    }

    /// The host this stack belongs to.
    pub fn host(&self) -> HostId {
        self.host
    }

    /// Open sockets, and the slots allocated for them (open or free for reuse): what the
    /// stack's sockets take in memory, for a census of a run's state.
    pub fn socket_counts(&self) -> (usize, usize) {
        (self.sockets.len(), self.sockets.slots() as usize)
    }

    /// The host's traffic counters so far, link drops and every socket's retransmissions
    /// included.
    pub fn stats(&self) -> NetStats {
        let mut s = self.stats.clone();
        s.up_drops = self.up.drops;
        s.down_drops = self.down.drops;
        for socket in self.sockets.values() {
            match socket {
                Socket::Tcp(socket) => {
                    let info = socket.conn.info();
                    s.tcp_retransmits += info.retransmits;
                    s.tcp_timeouts += info.rto_count;
                }
                Socket::Quic(q) => quic::add_stats(&mut s, &q.conn.info()),
                Socket::Stream(_) => {}
            }
        }
        s
    }

    fn tcp_config(&self) -> &Arc<TcpConfig> {
        self.net.tcp_config()
    }

    /// The next thing that happened on this host's sockets.
    ///
    /// The queue starts again at the front of its storage whenever it empties. A ring buffer
    /// otherwise moves on through all of its capacity, which a relay's bursts of cells make
    /// hundreds of entries: every event would then be written to a line not touched since
    /// the ring last came round, long since gone from the cache on a large network, where
    /// from the front the same few lines serve every burst.
    #[inline]
    pub fn poll_event(&mut self) -> Option<SocketEvent<M>> {
        let event = self.events.pop_front();
        if self.events.is_empty() {
            // `clear` on an empty queue only moves its head back to the start.
            self.events.clear();
        }
        event
    }

    /// Whether socket events wait to be polled.
    #[inline]
    pub fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    /// Packets this host has sent and received so far (what a CPU model prices per packet;
    /// cheaper than [`NetStack::stats`], which visits every socket).
    #[inline]
    pub fn packets(&self) -> u64 {
        self.stats.packets_sent + self.stats.packets_received
    }

    /// Accepts connections on `port`.
    pub fn listen(&mut self, port: u16) -> Result<(), NetError> {
        if self.listeners.contains(&port) {
            return Err(NetError::PortInUse(port));
        }
        self.listeners.push(port);
        Ok(())
    }

    /// Receives datagrams on `port`.
    pub fn udp_bind(&mut self, port: u16) -> Result<(), NetError> {
        // QUIC listens on UDP ports too.
        if self.udp_ports.contains(&port) || self.quic_ports.contains(&port) {
            return Err(NetError::PortInUse(port));
        }
        self.udp_ports.push(port);
        Ok(())
    }

    /// Opens a TCP connection to `port` on `dst`. The socket may be written to at once; data
    /// waits until the handshake completes.
    pub fn connect<E: From<NetEvent<M>>>(
        &mut self,
        ctx: &mut Context<'_, E>,
        dst: HostId,
        port: u16,
    ) -> SocketId {
        let local_port = self.ephemeral_port();
        let conn = TcpConnection::connect(self.tcp_config(), ctx.now(), 0);
        let id = self.sockets.insert(Socket::Tcp(TcpSocket {
            conn,
            peer: dst,
            local_port,
            peer_port: port,
            peer_socket: NO_SOCKET,
            pipes: Arc::new(ConnPipes::default()),
            initiator: true,
            auto_read: self.auto_read,
            waiting_for_link: false,
            watched: false,
            marked: false,
            peer_marked: false,
            timer: u64::MAX,
            last_arrival: 0,
            path: self.net.path(self.host, dst),
        }));
        self.drive(ctx, id);
        id
    }

    /// The next local port for a connection this host opens.
    fn ephemeral_port(&mut self) -> u16 {
        let port = self.next_port;
        self.next_port = port.checked_add(1).unwrap_or(FIRST_EPHEMERAL_PORT);
        port
    }

    fn socket(&self, id: SocketId) -> Option<&TcpSocket<M>> {
        match self.sockets.get(id)? {
            Socket::Tcp(s) => Some(s),
            _ => None,
        }
    }

    fn socket_mut(&mut self, id: SocketId) -> Option<&mut TcpSocket<M>> {
        match self.sockets.get_mut(id)? {
            Socket::Tcp(s) => Some(s),
            _ => None,
        }
    }

    /// Asks the cache for the stack's own fields (its links, its socket table's address),
    /// which any packet or timer reads first; see `Host::prefetch`.
    #[inline]
    pub fn prefetch(&self) {
        onionlab_engine::prefetch(self as *const Self, std::mem::size_of::<Self>());
    }

    /// Asks the cache for the slot of the socket `packet` is addressed to (see
    /// `Host::prefetch_event`): all of it, since receiving a segment reads the connection's
    /// sending, receiving, congestion and timing state alike.
    #[inline]
    pub fn prefetch_packet(&self, packet: &Packet<M>) {
        if let PacketBody::Tcp(TcpPacket {
            dst_socket: Some(addr),
            ..
        }) = &packet.body
        {
            self.sockets.prefetch(*addr);
        }
    }

    /// Whether `id` names an open socket (a TCP socket, QUIC connection or QUIC stream).
    pub fn is_open(&self, id: SocketId) -> bool {
        self.sockets.get(id).is_some()
    }

    /// The kernel facts about a socket's send window that Tor's KIST scheduler reads. For a
    /// QUIC stream or connection: its connection's congestion state in the same terms (see
    /// [`NetStack::quic_info`] for the rest).
    pub fn send_window(&self, id: SocketId) -> Option<SendWindow> {
        match self.sockets.get(id)? {
            Socket::Tcp(s) => Some(s.conn.send_window()),
            _ => self.quic_send_window(id),
        }
    }

    /// Asks (or stops asking) to hear when TCP socket or QUIC connection `id`'s state may
    /// have moved: a packet or timer it handled, anything it sent. For an application that
    /// waits on a few sockets' send windows and would otherwise look at them again after
    /// every event of the host. A QUIC stream is never watched (its connection is).
    pub fn watch(&mut self, id: SocketId, on: bool) {
        match self.sockets.get_mut(id) {
            Some(Socket::Tcp(s)) => s.watched = on,
            Some(Socket::Quic(q)) => q.watched = on,
            _ => {}
        }
    }

    /// Whether a watched socket's state may have moved since the last call.
    #[inline]
    pub fn take_watch_hit(&mut self) -> bool {
        std::mem::take(&mut self.watch_hit)
    }

    /// Free space in the socket's send buffer (a QUIC stream's own buffer).
    pub fn send_space(&self, id: SocketId) -> u64 {
        match self.sockets.get(id) {
            Some(Socket::Tcp(s)) => s.conn.send_space(),
            Some(Socket::Stream(st)) => self
                .quic_ref(st.conn)
                .map_or(0, |q| q.conn.send_space(st.stream)),
            _ => 0,
        }
    }

    /// A TCP connection's local port and its peer's.
    pub fn ports(&self, id: SocketId) -> Option<(u16, u16)> {
        self.socket(id).map(|s| (s.local_port, s.peer_port))
    }

    /// The peer host of a socket.
    pub fn peer(&self, id: SocketId) -> Option<HostId> {
        match self.sockets.get(id)? {
            Socket::Tcp(s) => Some(s.peer),
            Socket::Quic(q) => Some(q.peer),
            Socket::Stream(st) => self.quic_ref(st.conn).map(|q| q.peer),
        }
    }

    /// Appends up to `bytes` to the send buffer; returns how many were taken. Nothing is sent
    /// until `flush` (the end of the application's write call).
    pub fn write(&mut self, id: SocketId, bytes: u64) -> u64 {
        match self.sockets.get(id) {
            Some(Socket::Tcp(_)) => self.socket_mut(id).unwrap().conn.send(bytes),
            Some(Socket::Stream(_)) => self.stream_write(id, bytes),
            _ => 0,
        }
    }

    /// Marks the end of a message at the current end of the written data: the peer receives
    /// `message` when it has read up to here.
    pub fn mark(&mut self, id: SocketId, message: M) {
        if let Some(s) = self.socket_mut(id) {
            s.mark(message);
        } else if let Some(Socket::Stream(_)) = self.sockets.get(id) {
            self.stream_mark(id, message);
        }
    }

    /// Writes `count` equal messages of `bytes` each, as `count` calls of
    /// [`NetStack::write_message`] would, for a caller that knows they fit (the room
    /// [`NetStack::write_message_room`] reported): a relay's scheduler writes runs of one
    /// circuit's cells.
    pub fn write_messages(&mut self, id: SocketId, bytes: u64, message: M, count: u32) {
        debug_assert!(self.send_space(id) >= bytes * u64::from(count));
        let run = count > 1 && bytes > 0 && bytes <= u64::from(u32::MAX);
        match self.sockets.get_mut(id) {
            Some(Socket::Tcp(s)) if run => {
                let taken = s.conn.send(bytes * u64::from(count));
                debug_assert_eq!(taken, bytes * u64::from(count));
                s.mark_run(bytes as u32, count, message);
            }
            Some(Socket::Stream(_)) if run => {
                let taken = self.stream_write(id, bytes * u64::from(count));
                debug_assert_eq!(taken, bytes * u64::from(count));
                self.stream_mark_run(id, bytes as u32, count, message);
            }
            _ => {
                for _ in 0..count {
                    self.write_message(id, bytes, message.clone());
                }
            }
        }
    }

    /// Writes a whole message if the send buffer has room for it; returns whether it did.
    pub fn write_message(&mut self, id: SocketId, bytes: u64, message: M) -> bool {
        self.write_message_room(id, bytes, message).is_some()
    }

    /// [`NetStack::write_message`], returning the room left in the send buffer after it
    /// (`None`: refused), for a writer that goes on with more messages (see
    /// [`NetStack::write_messages`]).
    pub fn write_message_room(&mut self, id: SocketId, bytes: u64, message: M) -> Option<u64> {
        if let Some(s) = self.socket_mut(id) {
            let space = s.conn.send_space();
            if space < bytes {
                s.conn.wait_writable();
                return None;
            }
            let taken = s.conn.send(bytes);
            debug_assert_eq!(taken, bytes);
            s.mark(message);
            return Some(space - bytes);
        }
        if self.send_space(id) < bytes {
            if let Some(Socket::Stream(_)) = self.sockets.get(id) {
                self.stream_wait_writable(id);
            }
            return None;
        }
        let taken = self.write(id, bytes);
        debug_assert_eq!(taken, bytes);
        self.mark(id, message);
        Some(self.send_space(id))
    }

    /// Hands what was written to TCP for sending.
    pub fn flush<E: From<NetEvent<M>>>(&mut self, ctx: &mut Context<'_, E>, id: SocketId) {
        match self.sockets.get(id) {
            Some(Socket::Tcp(_)) => self.drive(ctx, id),
            Some(Socket::Quic(_)) => self.drive_quic(ctx, id),
            Some(Socket::Stream(st)) => {
                let conn = st.conn;
                self.drive_quic(ctx, conn);
            }
            None => {}
        }
    }

    /// Whether the stack reads arriving data by itself (the default) or waits for `read`.
    pub fn set_auto_read(&mut self, id: SocketId, on: bool) {
        match self.sockets.get_mut(id) {
            Some(Socket::Tcp(s)) => s.auto_read = on,
            Some(Socket::Stream(st)) => st.auto_read = on,
            _ => {}
        }
    }

    /// In-order bytes received and not yet read.
    pub fn readable(&self, id: SocketId) -> u64 {
        match self.sockets.get(id) {
            Some(Socket::Tcp(s)) => s.conn.recv_available(),
            Some(Socket::Stream(st)) => self
                .quic_ref(st.conn)
                .map_or(0, |q| q.conn.readable(st.stream)),
            _ => 0,
        }
    }

    /// The stream offset of a socket's next unread byte (TCP sockets; 0 for others).
    pub fn read_offset(&self, id: SocketId) -> u64 {
        match self.sockets.get(id) {
            Some(Socket::Tcp(s)) => s.conn.delivered() - s.conn.recv_available(),
            _ => 0,
        }
    }

    /// Shows `f` the messages the peer marked that a TCP socket has not read through yet,
    /// oldest first, each with the stream offset where it ends, until `f` returns false: what
    /// a reader that stops inside a message (a managed process's `read`) needs to know about
    /// the bytes it takes. Messages of bytes not received yet may be among them.
    pub fn peek_messages(&self, id: SocketId, f: impl FnMut(u64, &M) -> bool) {
        if let Some(Socket::Tcp(s)) = self.sockets.get(id) {
            s.in_pipe().peek(f);
        }
    }

    /// Reads up to `max` bytes; the messages completed by them become events.
    pub fn read<E: From<NetEvent<M>>>(
        &mut self,
        ctx: &mut Context<'_, E>,
        id: SocketId,
        max: u64,
    ) -> u64 {
        match self.sockets.get(id) {
            Some(Socket::Tcp(_)) => {
                let n = self.read_inner(id, max);
                if n > 0 {
                    self.drive(ctx, id);
                }
                n
            }
            Some(Socket::Stream(st)) => {
                let conn = st.conn;
                let n = self.stream_read(id, max);
                if n > 0 {
                    self.drive_quic(ctx, conn);
                }
                n
            }
            _ => 0,
        }
    }

    fn read_inner(&mut self, id: SocketId, max: u64) -> u64 {
        let Some(s) = self.socket_mut(id) else {
            return 0;
        };
        let n = s.conn.read(max);
        if n == 0 {
            return 0;
        }
        let events = &mut self.events;
        let Some(Socket::Tcp(s)) = self.sockets.get(id) else {
            unreachable!()
        };
        events.push_back(SocketEvent::Data {
            socket: id,
            bytes: n,
        });
        if !s.peer_marked {
            return n;
        }
        let read_offset = s.conn.delivered() - s.conn.recv_available();
        s.in_pipe().take_through(read_offset, |message, count| {
            events.push_back(SocketEvent::Message {
                socket: id,
                message,
                count,
            })
        });
        n
    }

    /// Closes the sending direction once everything written has been sent.
    /// A QUIC stream: finishes it (FIN after what was written). A QUIC connection: closes it.
    pub fn close<E: From<NetEvent<M>>>(&mut self, ctx: &mut Context<'_, E>, id: SocketId) {
        match self.sockets.get(id) {
            Some(Socket::Tcp(_)) => {
                self.socket_mut(id).unwrap().conn.close(ctx.now());
                self.drive(ctx, id);
            }
            Some(_) => self.quic_close(ctx, id),
            None => {}
        }
    }

    /// Resets the connection at once. QUIC streams and connections are closed as by
    /// [`NetStack::close`] (the model has no RESET_STREAM).
    pub fn abort<E: From<NetEvent<M>>>(&mut self, ctx: &mut Context<'_, E>, id: SocketId) {
        match self.sockets.get(id) {
            Some(Socket::Tcp(_)) => {
                self.socket_mut(id).unwrap().conn.abort(ctx.now());
                self.drive(ctx, id);
            }
            Some(_) => self.quic_close(ctx, id),
            None => {}
        }
    }

    /// Sends a datagram of `len` payload bytes. Returns false if the upstream queue dropped it.
    pub fn udp_send<E: From<NetEvent<M>>>(
        &mut self,
        ctx: &mut Context<'_, E>,
        src_port: u16,
        dst: HostId,
        dst_port: u16,
        len: u32,
        message: M,
    ) -> bool {
        let body = PacketBody::Udp(UdpDatagram {
            src_port,
            dst_port,
            len,
            message,
        });
        let path = self.net.path(self.host, dst);
        let packet = self.packet(dst, len + UDP_HEADER_BYTES, body);
        self.transmit(ctx, path, packet, 0) != Sent::Dropped
    }

    /// Handles one of the stack's own events.
    pub fn handle<E: From<NetEvent<M>>>(&mut self, ctx: &mut Context<'_, E>, event: NetEvent<M>) {
        match event {
            NetEvent::Arrive(mut packet) => {
                let n = packet.segments();
                if n > 1 {
                    // An offloaded packet's segments queue one by one; those that find the
                    // queue full are dropped, and the rest go on as one packet.
                    let now = ctx.now();
                    let (each, last) = packet.segment_bytes();
                    let (kept, done) = self.down.enqueue_batch(now, each, n, last);
                    if let Some(done) = done {
                        if kept < n {
                            packet.keep_segments(kept);
                        }
                        ctx.schedule_at(done, E::from(NetEvent::Deliver(packet)));
                    }
                    return;
                }
                if let Some(done) = self.down.enqueue(ctx.now(), packet.wire_bytes) {
                    ctx.schedule_at(done, E::from(NetEvent::Deliver(packet)));
                }
            }
            NetEvent::Deliver(packet) => {
                let n = packet.segments();
                self.stats.packets_received += u64::from(n);
                self.stats.bytes_received += packet.wire_bytes as u64;
                let from = packet.src;
                match packet.body {
                    PacketBody::Tcp(tcp) => self.receive_tcp(ctx, from, tcp, n, packet.messages),
                    PacketBody::Quic(d) => self.receive_quic(ctx, from, d),
                    PacketBody::Udp(d) => {
                        if self.udp_ports.contains(&d.dst_port) {
                            self.events.push_back(SocketEvent::Datagram {
                                port: d.dst_port,
                                from,
                                from_port: d.src_port,
                                len: d.len,
                                message: d.message,
                            });
                        } else {
                            self.stats.udp_unreachable += 1;
                        }
                    }
                }
            }
            NetEvent::TcpTimer { socket, deadline } => {
                let now = ctx.now();
                let Some(s) = self.socket_mut(socket) else {
                    return;
                };
                // A later timer replaced this one, or an earlier one already fired.
                if s.timer != deadline {
                    return;
                }
                s.timer = u64::MAX;
                if s.conn.poll_timeout().is_some_and(|t| t <= now) {
                    s.conn.on_timeout(now);
                }
                self.drive(ctx, socket);
            }
            NetEvent::QuicTimer { socket, deadline } => self.quic_timer(ctx, socket, deadline),
            NetEvent::UpReady => {
                self.up_ready_armed = false;
                while self.up.backlog_bytes(ctx.now()) <= self.net.config.up_tcp_backlog {
                    let Some(id) = self.link_waiters.pop_front() else {
                        break;
                    };
                    match self.sockets.get_mut(id) {
                        Some(Socket::Tcp(s)) => {
                            s.waiting_for_link = false;
                            self.drive(ctx, id);
                        }
                        Some(Socket::Quic(q)) => {
                            q.waiting_for_link = false;
                            self.drive_quic(ctx, id);
                        }
                        _ => {}
                    }
                }
                if !self.link_waiters.is_empty() {
                    self.arm_up_ready(ctx);
                }
            }
        }
    }

    fn receive_tcp<E: From<NetEvent<M>>>(
        &mut self,
        ctx: &mut Context<'_, E>,
        from: HostId,
        mut packet: TcpPacket<M>,
        segments: u16,
        peer_marked: bool,
    ) {
        let now = ctx.now();
        let seg = &packet.segment;
        let is_syn = seg.flags.contains(TcpFlags::SYN) && !seg.flags.contains(TcpFlags::ACK);
        let target = match packet.dst_socket {
            Some(addr) if self.socket(addr).is_some() => Some(addr),
            // A retransmitted SYN goes to the socket the first one created.
            None if is_syn => self
                .half_open
                .iter()
                .find(|(h, peer, _)| *h == from && *peer == packet.src_socket)
                .map(|(_, _, ours)| *ours),
            _ => None,
        };
        // A new connection to a listening port.
        if target.is_none()
            && is_syn
            && packet.dst_socket.is_none()
            && self.listeners.contains(&packet.dst_port)
        {
            if let Some(pipes) = packet.pipes.take() {
                self.accept(ctx, from, &packet, pipes);
                return;
            }
        }
        let Some(id) = target else {
            self.stats.tcp_unmatched += 1;
            if !seg.flags.contains(TcpFlags::RST) {
                self.send_reset(ctx, from, &packet);
            }
            return;
        };
        let s = self.socket_mut(id).unwrap();
        if s.known_peer().is_none() {
            s.peer_socket = packet.src_socket;
        }
        s.peer_marked |= peer_marked;
        // An offloaded packet's segments, in order, before the socket answers: like GRO,
        // which hands the stack one packet for them, so one ACK covers them all.
        let mut segment = packet.segment;
        for _ in 0..segments {
            s.conn.on_segment(now, &segment);
            segment.seq += u64::from(segment.len);
        }
        self.drive(ctx, id);
    }

    /// Creates a socket for a SYN to a listening port (the SYN is consumed by `accept`).
    fn accept<E: From<NetEvent<M>>>(
        &mut self,
        ctx: &mut Context<'_, E>,
        from: HostId,
        packet: &TcpPacket<M>,
        pipes: Arc<ConnPipes<M>>,
    ) {
        let conn = TcpConnection::accept(self.tcp_config(), ctx.now(), 0, &packet.segment);
        let id = self.sockets.insert(Socket::Tcp(TcpSocket {
            conn,
            peer: from,
            local_port: packet.dst_port,
            peer_port: packet.src_port,
            peer_socket: packet.src_socket,
            pipes,
            initiator: false,
            auto_read: self.auto_read,
            waiting_for_link: false,
            watched: false,
            marked: false,
            peer_marked: false,
            timer: u64::MAX,
            last_arrival: 0,
            path: self.net.path(self.host, from),
        }));
        self.half_open.push((from, packet.src_socket, id));
        self.drive(ctx, id);
    }

    fn send_reset<E: From<NetEvent<M>>>(
        &mut self,
        ctx: &mut Context<'_, E>,
        to: HostId,
        packet: &TcpPacket<M>,
    ) {
        let seg = &packet.segment;
        let reset = TcpSegment::new(
            seg.ack,
            seg.seq + seg.len as u64 + seg.flags.contains(TcpFlags::SYN) as u64,
            0,
            0,
            TcpFlags::RST.union(TcpFlags::ACK),
        );
        let body = PacketBody::Tcp(TcpPacket {
            src_port: packet.dst_port,
            dst_port: packet.src_port,
            src_socket: NO_SOCKET,
            dst_socket: Some(packet.src_socket),
            segment: reset,
            pipes: None,
        });
        let path = self.net.path(self.host, to);
        let packet = self.packet(to, reset.wire_bytes(), body);
        self.transmit(ctx, path, packet, 0);
    }

    /// Brings a socket up to date after anything happened to it: reports its events, reads
    /// for the application if asked to, sends what TCP has to send, re-arms its timer, and
    /// frees it once closed.
    fn drive<E: From<NetEvent<M>>>(&mut self, ctx: &mut Context<'_, E>, id: SocketId) {
        let now = ctx.now();
        // Every change to a socket's state, from a segment, a timer, the link or the
        // application, ends here.
        if self.socket(id).is_some_and(|s| s.watched) {
            self.watch_hit = true;
        }
        loop {
            let Some(s) = self.socket_mut(id) else {
                return;
            };
            let Some(event) = s.conn.poll_event() else {
                break;
            };
            let out = match event {
                TcpEvent::Connected => {
                    if s.initiator {
                        SocketEvent::Connected(id)
                    } else {
                        let (peer, port) = (s.peer, s.local_port);
                        self.half_open.retain(|(_, _, ours)| *ours != id);
                        SocketEvent::Accepted {
                            socket: id,
                            port,
                            peer,
                        }
                    }
                }
                // Sockets that read automatically do so below.
                TcpEvent::Readable if s.auto_read => continue,
                TcpEvent::Readable => SocketEvent::Readable(id),
                TcpEvent::Writable => SocketEvent::Writable(id),
                TcpEvent::PeerFinished => SocketEvent::PeerClosed(id),
                TcpEvent::Closed => SocketEvent::Closed(id),
                TcpEvent::Reset => SocketEvent::Reset(id),
                TcpEvent::TimedOut => SocketEvent::TimedOut(id),
            };
            self.events.push_back(out);
        }
        if self.socket(id).is_some_and(|s| s.auto_read) {
            self.read_inner(id, u64::MAX);
        }
        self.send_segments(ctx, id);
        let Some(s) = self.socket_mut(id) else {
            return;
        };
        if s.conn.state() == TcpState::Closed {
            self.release(id);
            return;
        }
        if let Some(deadline) = s.conn.poll_timeout() {
            if deadline < s.timer {
                s.timer = deadline;
                ctx.schedule_at(
                    deadline.max(now),
                    E::from(NetEvent::TcpTimer {
                        socket: id,
                        deadline,
                    }),
                );
            }
        }
    }

    fn send_segments<E: From<NetEvent<M>>>(&mut self, ctx: &mut Context<'_, E>, id: SocketId) {
        let now = ctx.now();
        let limit = self.net.config.up_tcp_backlog;
        // Under segmentation offload, the most segments one packet takes now.
        let offload = match self.sockets.get(id) {
            Some(Socket::Tcp(s)) if self.net.config.segment_offload => {
                s.conn.offload_segments(MAX_OFFLOAD_SEGMENTS)
            }
            _ => 0,
        };
        // Under segmentation offload: data segments gathered to leave as one packet, the
        // first and how many.
        let mut gathered: Option<(TcpSegment, u16)> = None;
        loop {
            let Some(Socket::Tcp(s)) = self.sockets.get_mut(id) else {
                unreachable!("slot {} holds no TCP socket", id.slot)
            };
            if s.waiting_for_link {
                break;
            }
            let held =
                gathered.map_or(0, |(first, n)| u64::from(first.wire_bytes()) * u64::from(n));
            // A closed socket flushes its last segments (RST, final ACK) regardless.
            if self.up.backlog_bytes(now) + held > limit && s.conn.state() != TcpState::Closed {
                s.waiting_for_link = true;
                self.link_waiters.push_back(id);
                self.arm_up_ready(ctx);
                break;
            }
            let Some(segment) = s.conn.poll_transmit(now) else {
                break;
            };
            let knows_peer = s.known_peer().is_some();
            if offload < 2 {
                self.send_packet(ctx, id, segment, 1, false);
                continue;
            }
            if let Some((first, n)) = gathered.as_mut() {
                if *n < offload && follows(first, *n, &segment) {
                    *n += 1;
                    continue;
                }
            }
            if let Some((first, n)) = gathered.take() {
                self.send_offloaded(ctx, id, first, n);
            }
            // Handshake and closing segments, and pure ACKs, go as they are.
            let joinable = segment.len > 0
                && knows_peer
                && !segment.flags.contains(TcpFlags::SYN)
                && !segment.flags.contains(TcpFlags::FIN)
                && !segment.flags.contains(TcpFlags::RST);
            if joinable {
                gathered = Some((segment, 1));
            } else {
                self.send_packet(ctx, id, segment, 1, false);
            }
        }
        if let Some((first, n)) = gathered {
            self.send_offloaded(ctx, id, first, n);
        }
    }

    /// Sends `n` gathered segments from `first` on. Each is lost on the path on its own, in
    /// sequence order, and a lost one splits the packet: the segments before it leave as one
    /// packet, and it still takes its time on the upstream link.
    fn send_offloaded<E: From<NetEvent<M>>>(
        &mut self,
        ctx: &mut Context<'_, E>,
        id: SocketId,
        first: TcpSegment,
        n: u16,
    ) {
        let Some(Socket::Tcp(s)) = self.sockets.get(id) else {
            unreachable!("slot {} holds no TCP socket", id.slot)
        };
        let loss = s.path.loss;
        let mut start = first;
        let mut next = first;
        let mut run = 0;
        for _ in 0..n {
            if loss > 0.0 && ctx.rng().random::<f64>() < loss {
                if run > 0 {
                    self.send_packet(ctx, id, start, run, true);
                }
                self.lost_on_path(ctx.now(), next.wire_bytes());
                run = 0;
                next.seq += u64::from(next.len);
                start = next;
                continue;
            }
            run += 1;
            next.seq += u64::from(next.len);
        }
        if run > 0 {
            self.send_packet(ctx, id, start, run, true);
        }
    }

    /// A segment or datagram of `wire_bytes` that the path loses, its loss rolled by the
    /// sender of an offloaded batch: it still takes its time on the upstream link and counts
    /// as sent and lost.
    fn lost_on_path(&mut self, now: SimTime, wire_bytes: u32) {
        if self.up.enqueue(now, wire_bytes).is_some() {
            self.stats.packets_sent += 1;
            self.stats.bytes_sent += u64::from(wire_bytes);
            self.stats.path_losses += 1;
        }
    }

    /// Puts `n` segments from `segment` on the wire as one packet (`n` is 1 but under
    /// segmentation offload). `rolled`: the caller has already rolled the path's loss for
    /// each segment, and these were kept.
    fn send_packet<E: From<NetEvent<M>>>(
        &mut self,
        ctx: &mut Context<'_, E>,
        id: SocketId,
        segment: TcpSegment,
        n: u16,
        rolled: bool,
    ) {
        let Some(Socket::Tcp(s)) = self.sockets.get_mut(id) else {
            unreachable!("slot {} holds no TCP socket", id.slot)
        };
        let body = PacketBody::Tcp(TcpPacket {
            src_port: s.local_port,
            dst_port: s.peer_port,
            src_socket: id,
            dst_socket: s.known_peer(),
            segment,
            pipes: s
                .known_peer()
                .is_none()
                .then(|| s.pipes.clone())
                .filter(|_| segment.flags.contains(TcpFlags::SYN)),
        });
        let (peer, mut path, after) = (s.peer, s.path, s.last_arrival);
        if rolled {
            path.loss = 0.0;
        }
        let wire_bytes = segment.wire_bytes() * u32::from(n);
        let marked = s.marked;
        let packet = Packet {
            messages: marked,
            ..self.packet(peer, wire_bytes, body)
        };
        if let Sent::Arrives(at) = self.transmit(ctx, path, packet, after) {
            if let Some(Socket::Tcp(s)) = self.sockets.get_mut(id) {
                s.last_arrival = at;
            }
        }
    }

    fn arm_up_ready<E: From<NetEvent<M>>>(&mut self, ctx: &mut Context<'_, E>) {
        if !self.up_ready_armed {
            self.up_ready_armed = true;
            let at = self
                .up
                .time_backlog_falls_to(self.net.config.up_tcp_backlog / 2)
                .max(ctx.now());
            ctx.schedule_at(at, E::from(NetEvent::UpReady));
        }
    }

    fn release(&mut self, id: SocketId) {
        if let Some(Socket::Tcp(socket)) = self.free_slot(id) {
            let info = socket.conn.info();
            self.stats.tcp_retransmits += info.retransmits;
            self.stats.tcp_timeouts += info.rto_count;
        }
    }

    /// Empties a slot for reuse under a new generation; returns what it held.
    fn free_slot(&mut self, id: SocketId) -> Option<Socket<M>> {
        self.half_open.retain(|(_, _, ours)| *ours != id);
        self.sockets.remove(id)
    }

    /// A packet from this host to `dst` of `wire_bytes` on the wire, saying nothing of
    /// messages (see `Packet::messages`).
    fn packet(&self, dst: HostId, wire_bytes: u32, body: PacketBody<M>) -> Packet<M> {
        Packet {
            src: self.host,
            dst,
            wire_bytes,
            messages: false,
            body,
        }
    }

    /// Puts `packet` on the upstream link and, unless `path` (the path to its destination)
    /// loses it, on its way there, arriving no earlier than `after`.
    ///
    /// `after` is the arrival of the connection's previous packet: jitter stretches the gaps
    /// between a connection's packets but never reorders them, as on real paths, whose queues
    /// are first in, first out (TCP would read every overtaken segment as a loss; per-packet
    /// jitter of a millisecond reorders nearly every packet of a fast flow). The emulator's
    /// switch keeps the same order.
    fn transmit<E: From<NetEvent<M>>>(
        &mut self,
        ctx: &mut Context<'_, E>,
        path: Path,
        packet: Packet<M>,
        after: SimTime,
    ) -> Sent {
        let wire_bytes = packet.wire_bytes;
        let Some(departed) = self.up.enqueue(ctx.now(), wire_bytes) else {
            return Sent::Dropped;
        };
        self.stats.packets_sent += u64::from(packet.segments());
        self.stats.batches_sent += 1;
        self.stats.bytes_sent += wire_bytes as u64;
        let rng = ctx.rng();
        if path.loss > 0.0 && rng.random::<f64>() < path.loss {
            self.stats.path_losses += 1;
            return Sent::Lost;
        }
        let jitter = if path.jitter > 0 {
            rng.random_range(0..=path.jitter)
        } else {
            0
        };
        let at = (departed + path.latency + jitter).max(after);
        ctx.send(packet.dst, at, E::from(NetEvent::Arrive(packet)));
        Sent::Arrives(at)
    }
}

/// Whether `segment` can join the `n` gathered segments from `first` in one offloaded packet:
/// the next in sequence, of the same length, with the same headers (acknowledgment, window,
/// flags, SACK blocks), as the receiver must rebuild each from the first.
fn follows(first: &TcpSegment, n: u16, segment: &TcpSegment) -> bool {
    let mut same = *segment;
    same.seq = first.seq;
    segment.seq == first.seq + u64::from(first.len) * u64::from(n) && same == *first
}

/// What became of a packet put on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sent {
    /// The upstream queue was full.
    Dropped,
    /// The path lost it.
    Lost,
    /// It reaches its destination then.
    Arrives(SimTime),
}

#[cfg(test)]
mod tests {
    /// A socket lookup reads the slot's generation and then the socket (the slab keeps them
    /// in one cache line); the stack's fields of a TCP socket come before its TCP state.
    #[test]
    fn a_sockets_own_fields_come_first() {
        use std::mem::offset_of;
        // The stack's fields of a TCP socket come before its (448-byte) TCP state.
        assert!(offset_of!(super::TcpSocket<u32>, waiting_for_link) < 48);
        assert!(
            std::mem::size_of::<Option<super::Socket<u32>>>() <= 512,
            "the layout added padding"
        );
    }
}
