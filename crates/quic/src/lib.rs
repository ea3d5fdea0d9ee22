//! A sans-IO, byte-counting QUIC transport model.
//!
//! This crate is part of onionlab, a simulator of Tor networks. It carries relay-to-relay
//! channels for the `quic` channel design (one QUIC connection per relay pair, one stream per
//! circuit, after the QUUX design).
//!
//! # Overview
//!
//! Like the TCP model, it carries no payload and reads no clock: packets are sizes and frame
//! descriptions, the caller feeds received packets and the current time in, and pulls packets,
//! timer deadlines and events out. Everything is deterministic (no randomness, no hashing
//! order, integer time) and nothing allocates per packet: sent-packet records sit in a ring
//! buffer per packet number space, byte ranges in lists that exist only while loss or
//! reordering is being repaired, and growable queues grow amortised.
//!
//! It follows RFC 9000 and RFC 9002 where they matter for performance:
//!
//! * Three packet number spaces (Initial, Handshake, 1-RTT); packet numbers are `u64` and never
//!   reused; packet number lengths follow RFC 9000 A.2; sizes count the long or short header,
//!   varint-encoded frames and the 16-byte AEAD tag, so a packet's `bytes` is its UDP payload.
//! * A one-round-trip handshake as CRYPTO byte counts: a padded 1200-byte client Initial
//!   (300-byte ClientHello), the server's Initial (90-byte ServerHello) and Handshake packets
//!   (`server_handshake_bytes` in all) within the 3x anti-amplification limit, the client's
//!   36-byte Finished, HANDSHAKE_DONE; Initial and Handshake keys are discarded when RFC 9001
//!   says so. The client may send 1-RTT data as soon as it has the server's flight; a server
//!   drops 1-RTT packets that overtake the client's Finished.
//! * ACK frames carry the newest four ranges (the first and three more); older ranges were
//!   reported by earlier ACKs, as TCP's SACK carries three or four blocks. A receiver
//!   acknowledges every `ack_eliciting_threshold` ack-eliciting packets, after
//!   `max_ack_delay` otherwise, and at once when a packet opens or fills a gap; handshake
//!   packets at once; ACK-only packets are never acknowledged for their own sake (but any
//!   packet sent carries an ACK frame if something arrived since the last one).
//! * Loss detection per RFC 9002 6: packet threshold 3, time threshold 9/8 RTT with 1 ms
//!   granularity, a loss timer, and a probe timeout doubling per consecutive PTO, with one
//!   (handshake) or two (1-RTT) probes that may exceed the congestion window: new data, else
//!   the oldest unacknowledged data, else a PING. RTT estimation per RFC 9002 5.
//! * Congestion control by the `onionlab-congestion` module the TCP model uses (CUBIC or
//!   Reno, in bytes, the maximum datagram size as the segment): RFC 9002's initial and minimum
//!   windows, one reduction per recovery period, growth only outside recovery and only while
//!   the window limited the sender, persistent congestion collapsing the window.
//! * Frames, not packets, are retransmitted: lost stream ranges return to their stream, lost
//!   MAX_DATA / MAX_STREAM_DATA go again with the latest value, lost CRYPTO is resent.
//! * Bidirectional streams numbered as RFC 9000 does, each with a send buffer (autotuned to
//!   twice the congestion window), out-of-order reassembly and in-order delivery; stream and
//!   connection flow control with receive-window autotuning as in Chromium and quinn. Packets
//!   carry up to two STREAM frames after the ACK and flow-control frames; streams with data
//!   take turns round robin. Streams finished in both directions are forgotten.
//! * An idle timeout, and CONNECTION_CLOSE.
//!
//! # What the model leaves out
//!
//! * 0-RTT, session resumption, Retry and address-validation tokens, version negotiation.
//! * Coalescing packets of different spaces into one datagram: each packet is a datagram.
//! * Connection migration, path validation, connection id management, stateless reset.
//! * Key updates, and the closing and draining periods (one CONNECTION_CLOSE, not repeated).
//! * ECN, path MTU discovery (the datagram size is fixed), and pacing: like the TCP model, a
//!   sender sends as soon as its congestion window allows.
//! * Unidirectional streams, RESET_STREAM and STOP_SENDING, MAX_STREAMS frames (the limit is
//!   on open streams, as if credit were renewed as streams close), DATA_BLOCKED and
//!   STREAM_DATA_BLOCKED, NEW_TOKEN, DATAGRAM frames.
//! * Transport parameters are not exchanged: both ends share one `QuicConfig`.
//! * The sender is not allowed the extra packet RFC 9002 permits on entering recovery.
//! * STREAM frames always carry an explicit length, where a real stack omits it on a packet's
//!   last frame (one or two bytes).
//! * ACK frequency is fixed (no ACK_FREQUENCY extension).
//!
//! # Not in this crate
//!
//! Window growth (CUBIC, Reno) is `onionlab-congestion`'s; UDP ports, links and paths, and the
//! mapping of streams to sockets, are `onionlab-net`'s; using a connection as a Tor channel
//! (one stream per circuit, falling back to TCP) is `onionlab-tor`'s.
//!
//! # Tests
//!
//! `tests/handshake.rs` (the one-round-trip handshake and recovery of lost handshake packets),
//! `tests/streams.rs` (exactly-once in-order delivery under loss and reordering, flow control,
//! loss detection, head-of-line independence, determinism, memory) and `tests/performance.rs`
//! (throughput, loss response and fairness, also against the TCP model on the same link), on the
//! small simulated network both transports are tested on, `onionlab-transport-testkit`
//! (`crates/transport-testkit`). Unit tests sit in `ack`, `conn`, `flow`, `packet`, `ranges`,
//! `rtt` and `stream`. `crates/net/tests/quic_streams.rs` checks streams as sockets
//! on the full network model.

mod ack;
mod config;
mod conn;
mod crypto;
mod flow;
mod packet;
mod ranges;
mod recovery;
mod rtt;
mod stream;

pub use config::QuicConfig;
pub use conn::{QuicConnection, QuicEvent, QuicInfo};
pub use onionlab_congestion::CongestionControl;
pub use packet::{
    varint_len, AckFrame, AckRange, Frames, QuicPacket, Space, StreamFrame, StreamId,
};
