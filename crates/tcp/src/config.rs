//! Connection parameters, defaulting to a current Linux host.

use onionlab_congestion::CongestionControl;
use onionlab_engine::time::{SimDuration, NANOS_PER_MILLI, NANOS_PER_SEC};

/// Tunables of a connection. Defaults follow Linux so that simulated Tor relays behave like
/// real ones without per-experiment tuning. Connections hold it through an `Arc`, so one
/// configuration serves every connection of a host instead of being copied into each.
#[derive(Clone, Debug)]
pub struct TcpConfig {
    /// Payload bytes per full segment: 1500-byte Ethernet MTU minus IPv4, TCP and timestamps.
    pub mss: u32,
    /// Initial congestion window in segments (RFC 6928).
    pub initial_cwnd: u32,
    /// Window growth algorithm (`onionlab-congestion`); CUBIC, Linux's default.
    pub congestion: CongestionControl,
    /// Selective acknowledgements (RFC 2018); both ends are assumed to share this setting.
    pub sack: bool,
    /// Tail loss probe (RFC 8985 section 7; Linux's default `tcp_early_retrans` = 3): when a
    /// flight goes unacknowledged for about two round trips, send one segment to draw the ACK
    /// or SACK that starts fast recovery, instead of waiting for the RTO. Needs `sack`.
    pub tail_loss_probe: bool,
    /// Longest an ACK for in-order data may be held back. Every second full-sized segment, any
    /// out-of-order arrival and any hole fill is acknowledged at once regardless.
    pub delayed_ack: SimDuration,
    /// Linux's quick-ACK and ping-pong modes around the delayed ACK: the first data segments
    /// of a connection, and those after a silence longer than the RTO, are acknowledged at
    /// once (up to 16), unless the connection is interactive (it sent data within a delayed
    /// ACK of receiving some), where the ACK waits to ride on the reply. Without them every
    /// small segment's ACK waits `delayed_ack`, and a Nagle-held segment behind it as long.
    pub quickack: bool,
    /// RTO until the first RTT sample, so the one that times the SYN (RFC 6298's 1 s).
    pub rto_initial: SimDuration,
    /// Floor of the RTO's variance term (Linux's `TCP_RTO_MIN`), so the RTO is never below
    /// SRTT plus this; also the tail loss probe's slack with one segment in flight.
    pub rto_min: SimDuration,
    /// Ceiling of the RTO, exponential backoff included (Linux's `TCP_RTO_MAX`).
    pub rto_max: SimDuration,
    /// SYN (or SYN-ACK) retransmissions before the open attempt is abandoned.
    pub syn_retries: u32,
    /// Consecutive retransmission timeouts without progress before the connection times out.
    pub max_retries: u32,
    /// Send buffer in bytes at open, unacknowledged and unsent data together (the default
    /// of Linux's `tcp_wmem`).
    pub send_buffer_initial: u64,
    /// Bytes up to which autotuning may grow the send buffer (the maximum of `tcp_wmem`).
    pub send_buffer_max: u64,
    /// Receive buffer in bytes at open: the most the receiver advertises beyond what the
    /// application has read (the default of Linux's `tcp_rmem`).
    pub recv_buffer_initial: u64,
    /// Bytes up to which autotuning may grow the receive buffer (the maximum of `tcp_rmem`).
    pub recv_buffer_max: u64,
    /// Grow send and receive buffers with the path's bandwidth-delay product, as Linux does.
    pub autotune: bool,
    /// `TCP_NODELAY`: send sub-MSS segments at once instead of holding them while data is in
    /// flight (Nagle). Off, as in Linux: tor 0.4.9 never sets it, on OR connections or on
    /// exit connections (no `TCP_NODELAY` setsockopt under strace in an emulated network).
    pub nodelay: bool,
    /// Linux's `tcp_slow_start_after_idle` (on by default): after sending nothing for an RTO,
    /// the congestion window decays towards the initial window. Matters for bursty Tor traffic.
    pub slow_start_after_idle: bool,
    /// How long a connection lingers in TIME_WAIT (Linux uses a fixed 60 s).
    pub time_wait: SimDuration,
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            mss: 1448,
            initial_cwnd: 10,
            congestion: CongestionControl::Cubic,
            sack: true,
            tail_loss_probe: true,
            delayed_ack: 40 * NANOS_PER_MILLI,
            quickack: true,
            rto_initial: NANOS_PER_SEC,
            rto_min: 200 * NANOS_PER_MILLI,
            rto_max: 120 * NANOS_PER_SEC,
            syn_retries: 6,
            max_retries: 15,
            send_buffer_initial: 16 * 1024,
            send_buffer_max: 4 * 1024 * 1024,
            recv_buffer_initial: 128 * 1024,
            recv_buffer_max: 6 * 1024 * 1024,
            autotune: true,
            nodelay: false,
            slow_start_after_idle: true,
            time_wait: 60 * NANOS_PER_SEC,
        }
    }
}

/// Values as connections use them. Degenerate settings are clamped rather than rejected: a zero
/// MSS or initial window would stall a connection, and a buffer maximum below the initial size
/// means the buffer stays at its initial size.
impl TcpConfig {
    pub(crate) fn effective_mss(&self) -> u32 {
        self.mss.max(1)
    }

    pub(crate) fn effective_initial_cwnd(&self) -> u32 {
        self.initial_cwnd.max(1)
    }

    pub(crate) fn send_buffer_limit(&self) -> u64 {
        self.send_buffer_max.max(self.send_buffer_initial)
    }

    pub(crate) fn recv_buffer_limit(&self) -> u64 {
        self.recv_buffer_max.max(self.recv_buffer_initial)
    }

    /// The retry counter is a `u8`, so limits are capped at 255.
    pub(crate) fn syn_retry_limit(&self) -> u8 {
        self.syn_retries.min(255) as u8
    }

    pub(crate) fn retry_limit(&self) -> u8 {
        self.max_retries.min(255) as u8
    }
}
