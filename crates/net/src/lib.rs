//! onionlab's Internet model.
//!
//! This crate is part of onionlab, a simulator of Tor networks.
//!
//! # Overview
//!
//! Hosts sit on the nodes of a network graph (`onionlab-topology`). Each has an upstream and a
//! downstream access link with a rate and a bounded queue; between hosts a packet takes the
//! graph's shortest path, with its latency, jitter and loss. On top, each host runs a stack of
//! TCP sockets (the sans-IO machines of `onionlab-tcp`), QUIC connections (`onionlab-quic`) and
//! UDP ports. Packets carry sizes and headers only; what an application sends is a sequence of
//! messages whose descriptors travel beside the byte stream ([`pipe`]). [`Network`] holds the
//! links and paths, [`NetStack`] is one host's sockets, and [`iperf`] is a bulk-transfer host
//! for measuring the model itself.
//!
//! # Not in this crate
//!
//! The transports' state machines are `onionlab-tcp` and `onionlab-quic`, and graph files and
//! shortest paths are `onionlab-topology`; this crate wires them to the engine
//! (`onionlab-engine`). Tor is not here: relays and clients that use these sockets are
//! `onionlab-tor`.
//!
//! # Tests
//!
//! `tests/links.rs` (latency, serialisation, loss and queue bounds), `tests/impairments.rs`
//! (extra loss between chosen hosts), `tests/tcp_behaviour.rs` (the figures a researcher
//! expects from TCP on a known path), `tests/message_runs.rs` (messages on a TCP connection),
//! `tests/quic_streams.rs` (QUIC streams as sockets, head-of-line independence) and
//! `tests/segment_offload.rs` (back-to-back segments as one packet). Unit tests sit in `link`,
//! `pipe` and `stack`. The examples `tcp_bulk` (the model's speed for one flow) and
//! `tcp_memory` (memory per idle connection) measure the model, for example
//! `cargo run --release -p onionlab-net --example tcp_bulk -- --mbit 100 --rtt-ms 50
//! --sim-seconds 60`.

pub mod iperf;
pub mod link;
pub mod network;
pub mod packet;
pub mod pipe;
pub mod stack;

pub use network::{HostPlacement, Impairment, Network, NetworkConfig};
pub use onionlab_quic as quic;
pub use onionlab_tcp as tcp;
pub use onionlab_topology as topology;
pub use packet::{Packet, SocketAddr};
pub use stack::{NetEvent, NetStack, NetStats, SocketEvent, SocketId};

/// Why a network could not be built, or a port could not be bound.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// The network's settings or host placements are invalid (a missing node or bandwidth,
    /// an impairment out of range); the message says which.
    #[error("{0}")]
    Config(String),
    /// The graph cannot carry the hosts placed on it (two of them have no path between
    /// them, a node has no self-loop, a path has no latency): a fault of the graph file.
    #[error("{0}")]
    Graph(String),
    /// A TCP listen, UDP bind or QUIC listen asked for a port already taken (UDP and QUIC
    /// share one port space, TCP has its own).
    #[error("port {0} is already in use")]
    PortInUse(u16),
}
