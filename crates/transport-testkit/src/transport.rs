//! The two transports side by side: which one a flow runs, its connections, the packets they
//! put on the wire and the notifications they raise. Tagging each with its transport lets one
//! event loop and one link carry both, and a test mix them on the same bottleneck.

use onionlab_quic::{QuicConfig, QuicConnection, QuicEvent, QuicPacket};
use onionlab_tcp::{TcpConfig, TcpConnection, TcpEvent, TcpSegment};
use std::sync::Arc;

/// IPv4 and UDP headers around a QUIC packet, which the link carries too.
pub const UDP_IP: u64 = 28;

/// The transport of a flow and the configuration both its ends use.
#[derive(Clone)]
pub enum Proto {
    /// A QUIC connection.
    Quic(Arc<QuicConfig>),
    /// A TCP connection.
    Tcp(Arc<TcpConfig>),
}

/// One endpoint's connection.
// Few endpoints exist in a test: boxing would buy nothing.
#[allow(clippy::large_enum_variant)]
pub enum Conn {
    /// A QUIC connection.
    Quic(QuicConnection),
    /// A TCP connection.
    Tcp(TcpConnection),
}

/// A packet on the wire.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Pkt {
    /// A QUIC packet, one per UDP datagram.
    Quic(QuicPacket),
    /// A TCP segment.
    Tcp(TcpSegment),
}

impl Pkt {
    /// Bytes the packet occupies on the link, IP header included.
    pub fn wire_bytes(&self) -> u64 {
        match self {
            Pkt::Quic(p) => u64::from(p.bytes) + UDP_IP,
            Pkt::Tcp(s) => u64::from(s.wire_bytes()),
        }
    }
}

/// A notification a connection raised, as the endpoint's log keeps it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Event {
    /// From a QUIC connection.
    Quic(QuicEvent),
    /// From a TCP connection.
    Tcp(TcpEvent),
}

impl From<QuicEvent> for Event {
    fn from(e: QuicEvent) -> Self {
        Event::Quic(e)
    }
}

impl From<TcpEvent> for Event {
    fn from(e: TcpEvent) -> Self {
        Event::Tcp(e)
    }
}
