//! onionlab's Tor model: relays, clients and file servers as hosts of the simulation.
//!
//! This crate is part of onionlab, a simulator of Tor networks. The book's page on the path of
//! one cell (`docs/src/dev/cell-path.md`) follows a cell through this crate.
//!
//! # Overview
//!
//! The protocol arithmetic (windows, congestion control, scheduling priorities, token buckets,
//! build-time estimation) lives in `onionlab-torcore`. Relays, clients and the attacker are
//! sans-IO state machines over it; [`io`] is their one door to the outside, and [`driver`]
//! runs them on the network stack of `onionlab-net`: channels are TCP connections between
//! hosts (or QUIC connections, for the `quic` channel design), cells are 514-byte messages on
//! them. [`transport`] makes the channel designs' decisions apart from any socket (IMUX's
//! connection count and choice, Torchestra's classes, reordering), [`attack`] is the socket
//! exhaustion attacker, [`cpu`] the relay's CPU, [`world`] what every host may consult
//! (the consensus, path selection, host names, the parameters), and [`event`] the engine's
//! events for a host, into which each machine's timers convert. [`link`] is the link
//! handshake (TLS and Tor's VERSIONS, CERTS, AUTH_CHALLENGE and NETINFO) that opens every
//! connection between Tor nodes before its first cell.
//!
//! # Not in this crate
//!
//! Reading scenarios and building the network's hosts from them is the `onionlab` command's
//! (`crates/cli`, with `onionlab-scenario`); path selection and consensus parsing are
//! `onionlab-netdir`'s; what clients download and when is `onionlab-traffic`'s; output files
//! are `onionlab-report`'s. Running real tor instead of this model is `onionlab-emulate`.
//!
//! # Tests
//!
//! `tests/circuit.rs` (one client through three relays, end to end),
//! `tests/relay_behaviour.rs` (flow control, congestion control, token buckets, scheduling,
//! KIST), `tests/transports.rs` (the channel designs, ConnLimit, the socket exhaustion attack),
//! `tests/upload.rs` (clients that upload), `tests/cpu.rs` (the relay CPU model),
//! `tests/memory.rs` (memory flat over a long run) and `tests/robustness.rs` (clients that
//! never get a circuit, absurd timers, injected failures), with shared set-up in
//! `tests/common/`. Unit tests sit in `host`, `circ_ids`, `link`, `transport`,
//! `relay/tests.rs` and `client/tests.rs`.
//! `examples/memory.rs` prints the memory per element of a simulated network
//! (`cargo run --release -p onionlab-tor --example memory`).

pub mod attack;
pub mod build;
mod circ_ids;
pub mod client;
pub mod cpu;
pub mod directory;
pub mod driver;
pub mod event;
mod flow;
pub mod host;
pub mod io;
pub mod link;
pub mod measure;
pub mod process;
pub mod relay;
pub mod server;
pub mod transport;
pub mod warm;
pub mod wire;
pub mod world;

pub use client::Client;
pub use host::{inject_fault, Ev, TorHost, INJECTED_FAULT};
pub use relay::{ChannelStats, ChannelView, CircuitView, Relay, RelayLimits};
pub use server::Server;
pub use wire::Wire;
pub use world::{TorWorld, HTTP_PORT, OR_PORT};
