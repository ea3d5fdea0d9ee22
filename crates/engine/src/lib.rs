//! onionlab's discrete-event engine.
//!
//! A simulation is a set of hosts, each with its own state, event queue and random stream.
//! Workers run hosts in rounds as wide as the smallest host-to-host delay (conservative
//! synchronisation) and exchange messages at a barrier in an order fixed by the simulation
//! itself, so a run gives the same results on any number of threads.

mod agenda;
mod barrier;
mod calendar;
pub mod heap;
pub mod partition;
pub mod phold;
mod queue;
pub mod rng;
mod sim;
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
