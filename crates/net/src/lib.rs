//! onionlab's Internet model.
//!
//! Hosts sit on the nodes of a network graph (`onionlab-topology`). Each has an upstream and a
//! downstream access link with a rate and a bounded queue; between hosts a packet takes the
//! graph's shortest path, with its latency, jitter and loss. On top, each host runs a stack of
//! TCP sockets (the sans-IO machines of `onionlab-tcp`) and UDP ports. Packets carry sizes and
//! headers only; what an application sends is a sequence of messages whose descriptors travel
//! beside the byte stream (`pipe`).

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

#[derive(Debug, thiserror::Error)]
pub enum NetError {
    #[error("{0}")]
    Config(String),
    #[error("port {0} is already in use")]
    PortInUse(u16),
}
