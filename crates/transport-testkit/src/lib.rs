//! The network that the integration tests of `onionlab-tcp` and `onionlab-quic` run on: a few
//! client/server flows over one bottleneck in each direction, driven by a deterministic event
//! loop, with scripted applications at the endpoints.
//!
//! # What it models
//!
//! - Flow `f` runs one transport ([`Proto`]) between client endpoint `2f` and server endpoint
//!   `2f + 1`. Clients connect at time 0; servers accept the first packet that opens a
//!   connection.
//! - All clients share [`Sim::links`]`[0]` towards the servers and all servers share
//!   `links[1]` back: a FIFO transmitter at a fixed rate, a drop-tail queue, a propagation
//!   delay, and optional random loss and reordering ([`Link`]).
//! - Every random choice comes from one seeded [`Rng`], and events at the same instant run in
//!   the order they were scheduled, so a seed names one run exactly.
//! - Tests can add deterministic drops, extra delays and a look at every packet sent
//!   ([`Sim::drop`], [`Sim::delay`], [`Sim::on_send`]).
//! - An [`App`] on each endpoint writes, reads, closes and (QUIC) opens and answers streams.
//!
//! # Why one harness, and why this small
//!
//! Both transports are measured over the same link, queue and random stream, so a comparison
//! between them (QUIC sharing a bottleneck with TCP, goodput under the same loss) compares the
//! transports and nothing else, and a change to the network model reaches both crates' tests at
//! once. The network is deliberately far simpler than the simulator's own (`onionlab-net`): no
//! hosts, routes or sockets, so that a failing test points at the transport model.
//!
//! The harness also checks as it drives: each connection's `check_invariants` after every
//! input (unless [`Sim::check`] is off), TCP's delivered count never going back, and every
//! byte a QUIC stream hands its reader having arrived in some STREAM frame ([`StreamApp`]).

mod app;
mod drive;
mod endpoint;
mod link;
mod measure;
mod queue;
mod rng;
mod sim;
mod transport;

pub use app::{App, StreamApp};
pub use endpoint::Endpoint;
pub use link::{Link, LinkConfig};
pub use measure::{bdp, goodput_bps, jain};
pub use rng::Rng;
pub use sim::Sim;
pub use transport::{Conn, Event, Pkt, Proto, UDP_IP};

use onionlab_engine::time::{SimTime, NANOS_PER_MILLI, NANOS_PER_SEC};

/// One millisecond of simulated time, in nanoseconds.
pub const MS: u64 = NANOS_PER_MILLI;
/// One second of simulated time, in nanoseconds.
pub const SEC: u64 = NANOS_PER_SEC;
/// "No deadline": a connection without a timer.
const NEVER: SimTime = u64::MAX;
