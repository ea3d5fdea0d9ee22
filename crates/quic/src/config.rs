//! Connection parameters, defaulting to what current QUIC stacks (quinn, Chromium) use.

use onionlab_congestion::CongestionControl;
use onionlab_engine::time::{SimDuration, NANOS_PER_MILLI, NANOS_PER_SEC};

/// Tunables of a connection. Both ends of a connection are assumed to share one configuration,
/// which stands in for the transport parameters they would exchange (initial flow-control
/// limits, `max_ack_delay`, the stream limit). Connections hold it through an `Arc`, so one
/// configuration serves every connection of a host instead of being copied into each.
#[derive(Clone, Debug, PartialEq)]
pub struct QuicConfig {
    /// Largest UDP payload a packet may have: 1350 keeps a datagram within common path MTUs
    /// with room for tunnels, as quinn and Chromium choose. Clamped to 1200..=65527.
    pub max_udp_payload: u32,
    /// Initial congestion window in datagrams (RFC 9002 7.2 caps it at about 14720 bytes).
    pub initial_window_packets: u32,
    /// Window growth algorithm (`onionlab-congestion`, shared with the TCP model); CUBIC by
    /// default.
    pub congestion: CongestionControl,
    /// Longest an acknowledgement of 1-RTT packets is held back (RFC 9000 18.2's default).
    pub max_ack_delay: SimDuration,
    /// Ack-eliciting packets received before an ACK goes out at once (RFC 9000 13.2.2).
    pub ack_eliciting_threshold: u32,
    /// RTT assumed before the first sample (RFC 9002 6.2.2).
    pub initial_rtt: SimDuration,
    /// Initial per-stream receive window, bytes.
    pub stream_window: u64,
    /// Largest the per-stream window may autotune to.
    pub stream_window_max: u64,
    /// Initial connection receive window, bytes.
    pub conn_window: u64,
    /// Largest the connection receive window may autotune to, bytes.
    pub conn_window_max: u64,
    /// Grow receive windows with the path, as Chromium and quinn do. (The send buffer always
    /// follows the congestion window, within its bounds.)
    pub autotune: bool,
    /// Per-stream send buffer the application may fill before `send` refuses bytes; it grows
    /// to twice the congestion window when that is larger.
    pub stream_send_buffer: u64,
    /// Cap of the autotuned send buffer (twice the congestion window).
    pub stream_send_buffer_max: u64,
    /// Streams each side may have open at once; stands in for MAX_STREAMS credit that the
    /// model renews as soon as streams close.
    pub max_streams: u32,
    /// CRYPTO bytes of the server's first flight (ServerHello, certificates, Finished).
    pub server_handshake_bytes: u32,
    /// The connection closes after this long without receiving anything.
    pub idle_timeout: SimDuration,
}

impl Default for QuicConfig {
    fn default() -> Self {
        QuicConfig {
            max_udp_payload: 1350,
            initial_window_packets: 10,
            congestion: CongestionControl::Cubic,
            max_ack_delay: 25 * NANOS_PER_MILLI,
            ack_eliciting_threshold: 2,
            initial_rtt: 333 * NANOS_PER_MILLI,
            stream_window: 256 * 1024,
            stream_window_max: 6 * 1024 * 1024,
            conn_window: 1024 * 1024,
            conn_window_max: 24 * 1024 * 1024,
            autotune: true,
            stream_send_buffer: 64 * 1024,
            stream_send_buffer_max: 4 * 1024 * 1024,
            max_streams: 65536,
            server_handshake_bytes: 3000,
            idle_timeout: 30 * NANOS_PER_SEC,
        }
    }
}

/// Values as connections use them. Degenerate settings are clamped rather than rejected: a
/// datagram below QUIC's 1200-byte minimum, a zero window or a zero threshold would stall a
/// connection, and a maximum below the initial value means the value stays fixed.
impl QuicConfig {
    pub(crate) fn max_datagram(&self) -> u32 {
        self.max_udp_payload.clamp(1200, 65527)
    }

    /// RFC 9002 7.2: `min(10 * max_datagram, max(14720, 2 * max_datagram))` for the default
    /// of ten packets; other settings give that many datagrams.
    pub(crate) fn initial_window(&self) -> u64 {
        let mds = u64::from(self.max_datagram());
        let packets = u64::from(self.initial_window_packets.max(1));
        if packets == 10 {
            (10 * mds).min(14720u64.max(2 * mds))
        } else {
            packets * mds
        }
    }

    /// RFC 9002 7.2: two datagrams.
    pub(crate) fn minimum_window(&self) -> u64 {
        2 * u64::from(self.max_datagram())
    }

    pub(crate) fn ack_threshold(&self) -> u32 {
        self.ack_eliciting_threshold.max(1)
    }

    pub(crate) fn stream_window(&self) -> u64 {
        self.stream_window.max(1)
    }

    pub(crate) fn stream_window_limit(&self) -> u64 {
        self.stream_window_max.max(self.stream_window())
    }

    pub(crate) fn conn_window(&self) -> u64 {
        self.conn_window.max(1)
    }

    pub(crate) fn conn_window_limit(&self) -> u64 {
        self.conn_window_max.max(self.conn_window())
    }

    pub(crate) fn send_buffer_limit(&self) -> u64 {
        self.stream_send_buffer_max.max(self.stream_send_buffer)
    }

    pub(crate) fn initial_rtt(&self) -> SimDuration {
        self.initial_rtt.max(1)
    }
}
