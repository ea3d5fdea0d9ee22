//! A sans-IO, byte-counting TCP model.
//!
//! This crate is part of onionlab, a simulator of Tor networks.
//!
//! # Overview
//!
//! The simulator only needs TCP's *timing*: when segments leave, how big they are on the wire,
//! and when the application sees its bytes. So this model never carries payload and never reads
//! a clock. The caller feeds received segments and the current time in, and pulls segments,
//! timer deadlines and events out. That keeps the state machine deterministic and lets the
//! simulator run many thousands of connections without threads or IO.
//!
//! Sequence numbers are `u64` and never wrap, which removes a whole class of modular-arithmetic
//! subtleties that a real stack has to handle but that a simulation gains nothing from.
//!
//! # Fidelity choices
//!
//! * Loss recovery is RFC 6675 (SACK scoreboard, pipe-based sending) or RFC 6582 NewReno when
//!   SACK is off; a timeout enters a loss phase in which every unSACKed byte below the old
//!   `SND.NXT` is retransmitted under slow start (go-back-N that skips SACKed data).
//! * Linux's tail loss probe stands in front of the RTO while no recovery is under way (RFC
//!   8985 section 7, with Linux's timeout: 2·SRTT plus 2 ms, or plus `rto_min` with one
//!   segment out, never later than the RTO). There is no general RACK: segments are timed
//!   only as a flight, so the one time rule is that at the probe timeout, unSACKed data below
//!   SACKed data (or below a SACKed probe) is lost. The receiver sends D-SACK blocks, which
//!   the sender uses only to tell a needless probe.
//! * RTT is sampled from one timed segment per flight (Karn's rule by abandoning the sample on
//!   retransmission), not from timestamps, although the timestamps option is counted in the
//!   header size as Linux sends it. The RTO is Linux's: SRTT plus a variance term of at least
//!   `rto_min`, not RFC 6298's SRTT + 4·RTTVAR floored at `rto_min` (see `rtt.rs`).
//! * The window is kept in bytes (the congestion-control crate is shared with QUIC), but slow
//!   start's test of whether it is in use counts the flight in whole segments, as Linux counts
//!   packets: a small segment in flight is one.
//! * Receive-buffer autotuning (after Linux's dynamic right-sizing): once per smoothed RTT the
//!   bytes received in order during that RTT are compared with the best earlier RTT; a new best
//!   sets the buffer to twice that amount, or four times while the amount grew by half or more
//!   (the sender is still in slow start), never shrinking and capped at `recv_buffer_max`.
//! * Send-buffer autotuning: when the application found the buffer full, each ACK that frees
//!   space raises the buffer to twice the congestion window in bytes, capped at
//!   `send_buffer_max`, so a full window can wait behind the one in flight.
//! * The congestion window only grows when it limited the sender (Linux's cwnd validation), so
//!   application-limited flows such as most Tor circuits do not inflate it.
//! * Nagle is on by default, as for tor's sockets, in Linux's form (Minshall's variant): a
//!   short segment waits only while an earlier short segment is unacknowledged.
//!
//! # Not in this crate
//!
//! Reno and CUBIC window growth are `onionlab-congestion`'s. Putting segments on links, paths,
//! queues and loss, demultiplexing them to sockets and carrying application messages beside the
//! byte stream are `onionlab-net`'s. QUIC is the sibling crate `onionlab-quic`.
//!
//! # Tests
//!
//! `tests/basic.rs` (lifecycle, timers, flow control), `tests/robustness.rs` (every byte once
//! and in order under adverse conditions, the recovery path taken) and `tests/performance.rs`
//! (throughput, loss response and fairness; `cargo test -- --nocapture` prints the figures),
//! on the small simulated network both transports are tested on, `onionlab-transport-testkit`
//! (`crates/transport-testkit`). Unit tests sit in `conn`, `recv`, `rtt`, `segment`, `send` and
//! `lazy_vec`. `crates/net/tests/tcp_behaviour.rs` checks the model over the full
//! network model, and the emulator's `linux_tcp` example (`crates/emulate/examples/`) measures
//! Linux's own TCP on the same link for comparison.

mod config;
mod conn;
mod lazy_vec;
mod recv;
mod rtt;
mod segment;
mod send;

pub use config::TcpConfig;
pub use conn::{SendWindow, TcpConnection, TcpEvent, TcpInfo, TcpState};
pub use onionlab_congestion::CongestionControl;
pub use segment::{SackBlocks, TcpFlags, TcpSegment};
