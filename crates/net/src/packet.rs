//! What travels between hosts: sizes and headers, never payload bytes.

use std::sync::Arc;

use onionlab_engine::HostId;
use onionlab_quic::QuicPacket;
use onionlab_tcp::TcpSegment;

use crate::pipe::{ConnPipes, QuicPipes};

/// IPv4 (20) + UDP (8) header bytes.
pub const UDP_HEADER_BYTES: u32 = 28;

/// A packet in flight. `M` is the application's message descriptor type (see `pipe`).
pub struct Packet<M> {
    /// Sending host.
    pub src: HostId,
    /// Receiving host.
    pub dst: HostId,
    /// Bytes on the wire (IP packet: headers plus payload length); what links serialise.
    pub wire_bytes: u32,
    /// A TCP segment's sender has written message descriptors into the connection's pipe
    /// (see `pipe`); false for everything else. A receiver that never heard so from its peer
    /// leaves the pipe alone, which on a large network is a cache miss per read saved: a file
    /// server's response is bytes without messages, and an exit reads it a few segments at a
    /// time. It sits in what would otherwise be the packet's padding, so events stay their size.
    pub messages: bool,
    /// The transport's headers: a TCP segment, a UDP datagram or a QUIC packet.
    pub body: PacketBody<M>,
}

impl<M> Packet<M> {
    /// Wire packets this one stands for: 1, but under segmentation offload
    /// (`NetworkConfig::segment_offload`) a TCP packet carries `wire_bytes /
    /// segment.wire_bytes()` segments, its `segment` the first, the others of the same length
    /// and headers and following it in sequence space, and a QUIC datagram its batch
    /// ([`QuicDatagram::more`]). A TCP packet's count is not a field of its own because it follows
    /// from the sizes, and every packet in flight is an event: the packet's last spare bytes
    /// (three, beside `messages`) are better kept for what cannot be derived.
    #[inline]
    pub fn segments(&self) -> u16 {
        match &self.body {
            PacketBody::Tcp(t) => segments_in(self.wire_bytes, &t.segment),
            PacketBody::Quic(d) => 1 + d.more.len() as u16,
            PacketBody::Udp(_) => 1,
        }
    }

    /// Wire bytes of each segment but the last, and of the last (see [`Packet::segments`]):
    /// equal for TCP, while a QUIC batch's last datagram may be the smaller.
    #[inline]
    pub fn segment_bytes(&self) -> (u32, u32) {
        match &self.body {
            PacketBody::Quic(d) => match d.more.last() {
                Some(last) => (
                    d.packet.bytes + UDP_HEADER_BYTES,
                    last.bytes + UDP_HEADER_BYTES,
                ),
                None => (self.wire_bytes, self.wire_bytes),
            },
            _ => {
                let each = self.wire_bytes / u32::from(self.segments());
                (each, each)
            }
        }
    }

    /// Keeps the first `kept` segments (at least 1) of an offloaded packet whose others were
    /// dropped.
    pub fn keep_segments(&mut self, kept: u16) {
        debug_assert!(kept >= 1);
        match &mut self.body {
            PacketBody::Quic(d) => {
                d.more.truncate(usize::from(kept) - 1);
                self.wire_bytes = d.wire_bytes();
            }
            _ => self.wire_bytes = self.segment_bytes().0 * u32::from(kept),
        }
    }
}

impl<M> QuicDatagram<M> {
    /// Bytes on the wire of the datagrams this one stands for, UDP and IP headers included.
    pub fn wire_bytes(&self) -> u32 {
        let payload: u32 = self.packet.bytes + self.more.iter().map(|p| p.bytes).sum::<u32>();
        payload + UDP_HEADER_BYTES * (1 + self.more.len() as u32)
    }
}

/// Segments of `segment`'s size in a TCP packet of `wire_bytes` (see `Packet::segments`).
#[inline]
fn segments_in(wire_bytes: u32, segment: &TcpSegment) -> u16 {
    let one = segment.wire_bytes();
    if wire_bytes == one {
        1
    } else {
        (wire_bytes / one) as u16
    }
}

/// Every packet in flight is an engine event, and events are as large as their largest kind,
/// so the rare QUIC datagram (the `quic` relay design only), twice the size of a TCP segment's
/// header fields, lives out of line: inline it made every event of every design 40% larger
/// (168 bytes against 120), which on a full-size network is hundreds of megabytes of queued
/// events and a copy of each at every queue it passes. The cost is one allocation per QUIC
/// datagram, under that design alone.
pub enum PacketBody<M> {
    /// A TCP segment (or, under segmentation offload, a run of them).
    Tcp(TcpPacket<M>),
    /// A plain UDP datagram to a bound port.
    Udp(UdpDatagram<M>),
    /// A QUIC packet, boxed (see above).
    Quic(Box<QuicDatagram<M>>),
}

/// A TCP segment addressed socket to socket.
///
/// Once a connection is set up, each side knows the other's socket slot, so a segment names
/// its destination slot directly and the receiving stack needs no lookup table.
pub struct TcpPacket<M> {
    /// Sender's TCP port.
    pub src_port: u16,
    /// Receiver's TCP port.
    pub dst_port: u16,
    /// Sender's socket slot, which the receiver answers to.
    pub src_socket: SocketAddr,
    /// `None` until the sender has learned the peer's socket (the first SYN).
    pub dst_socket: Option<SocketAddr>,
    /// The TCP header fields (sequence and acknowledgement numbers, flags, window, length).
    pub segment: TcpSegment,
    /// The connection's message pipes, carried by SYNs only so the acceptor can attach to them.
    pub pipes: Option<Arc<ConnPipes<M>>>,
}

/// A UDP datagram to a bound port, carrying one application message descriptor.
pub struct UdpDatagram<M> {
    /// Sender's UDP port.
    pub src_port: u16,
    /// Receiver's UDP port.
    pub dst_port: u16,
    /// Payload length in bytes.
    pub len: u32,
    /// What the payload stands for, handed to the receiving application.
    pub message: M,
}

/// A socket slot and the generation of its occupant, so that a late segment for a closed
/// connection cannot reach a new connection that reuses the slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SocketAddr {
    /// Index of the slot in the host's socket table.
    pub slot: u32,
    /// Which occupant of the slot: bumped each time the slot is emptied for reuse.
    pub generation: u32,
}

impl onionlab_engine::slab::Key for SocketAddr {
    #[inline]
    fn from_parts(slot: u32, generation: u32) -> Self {
        SocketAddr { slot, generation }
    }
    #[inline]
    fn slot(self) -> u32 {
        self.slot
    }
    #[inline]
    fn generation(self) -> u32 {
        self.generation
    }
}

/// A QUIC packet in a UDP datagram, addressed connection to connection: each side's slot
/// stands in for the connection IDs that real QUIC puts in its headers (and counts in the
/// packet's size), so the receiving stack needs no lookup table.
pub struct QuicDatagram<M> {
    /// Sender's UDP port.
    pub src_port: u16,
    /// Receiver's UDP port.
    pub dst_port: u16,
    /// Sender's connection slot, which the receiver answers to.
    pub src_conn: SocketAddr,
    /// `None` until the client has heard from the server.
    pub dst_conn: Option<SocketAddr>,
    /// The QUIC packet: its number space and number, its size, and descriptions of its frames.
    pub packet: QuicPacket,
    /// Under segmentation offload (`NetworkConfig::segment_offload`), the packets that follow
    /// `packet` in one batch, as Linux's `UDP_SEGMENT` sends them and GRO hands them up: each
    /// a datagram of its own on the wire, all of `packet`'s size but the last, which may be
    /// smaller. Empty (no allocation) for a lone datagram.
    pub more: Vec<QuicPacket>,
    /// The connection's stream pipes, on the client's packets until it has heard from the
    /// server, so the server can attach to them.
    pub pipes: Option<Arc<QuicPipes<M>>>,
}
