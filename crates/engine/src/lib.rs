//! onionlab's discrete-event engine.
//!
//! This crate is part of onionlab, a simulator of Tor networks. The book's architecture page
//! (`docs/src/dev/architecture.md`) shows where each crate sits.
//!
//! # Overview
//!
//! A simulation is a set of hosts, each with its own state, event queue and random stream.
//! Workers run hosts in rounds as wide as the smallest host-to-host delay (conservative
//! synchronisation) and exchange messages at a barrier in an order fixed by the simulation
//! itself, so a run gives the same results on any number of threads.
//!
//! A model implements [`Host`] and is driven by [`Simulation`]; a host acts on the world only
//! through its [`Context`] (schedule an event for itself, send a message to another host). Time
//! is integer nanoseconds ([`time`]), every host draws from its own seeded stream ([`rng`]),
//! [`partition`] decides which worker owns which host (idle workers steal hosts within a
//! round), [`heap`] is a counting allocator for memory measurements, and [`phold`] is the
//! PHOLD benchmark model that measures the engine's own cost per event.
//!
//! # Not in this crate
//!
//! The engine knows nothing of packets, sockets or Tor: links, paths and the TCP/UDP stack are
//! `onionlab-net`, relays and clients are `onionlab-tor`, and turning a scenario into hosts is
//! the `onionlab` command's (`crates/cli`).
//!
//! # Tests
//!
//! `tests/determinism.rs` checks the determinism contract (the same event order on any number
//! of threads, each host's randomness its own); `tests/robustness.rs` covers panicking models,
//! absurd delays, interrupted rounds and more threads than hosts. Unit tests sit in `agenda`,
//! `calendar`, `heap`, `queue` and `sim`. `examples/phold.rs` is the PHOLD benchmark
//! (`scripts/bench-phold.sh` runs it).

mod agenda;
mod barrier;
mod calendar;
pub mod heap;
pub mod partition;
pub mod phold;
mod queue;
pub mod rng;
mod sim;
pub mod slab;
pub mod time;

/// A host's index in the simulation.
pub type HostId = u32;

pub use partition::Partition;
pub use queue::MAX_HOSTS;
pub use rng::{host_rng, HostRng};
pub use sim::{
    prefetch, Context, EngineConfig, Host, RunControl, RunStats, Simulation, WorkerStats,
};
pub use time::{SimDuration, SimTime};

/// The number of worker threads to use by default: the machine's cores.
pub fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}
