//! onionlab's Tor model: relays, clients and file servers as hosts of the simulation.
//!
//! The protocol arithmetic (windows, congestion control, scheduling priorities, token buckets,
//! build-time estimation) lives in `onionlab-torcore`. Relays, clients and the attacker are
//! sans-IO state machines over it; [`io`] is their one door to the outside, and its driver
//! runs them on the network stack of `onionlab-net`: channels are TCP connections between
//! hosts, cells are 514-byte messages on them.

pub mod attack;
pub mod build;
mod circ_ids;
pub mod client;
pub mod cpu;
mod flow;
pub mod host;
pub mod io;
pub mod measure;
pub mod relay;
pub mod server;
pub mod transport;
pub mod wire;
pub mod world;

pub use client::Client;
pub use host::{inject_fault, Ev, TorHost, INJECTED_FAULT};
pub use relay::{ChannelStats, ChannelView, CircuitView, Relay, RelayLimits};
pub use server::Server;
pub use wire::Wire;
pub use world::{TorWorld, HTTP_PORT, OR_PORT};
