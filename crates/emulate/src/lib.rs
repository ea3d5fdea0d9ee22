//! Emulation mode: the same scenario the simulator runs, but with real `tor` processes, each in
//! its own network namespace, joined by a user-space switch that adds the scenario's path
//! latency, jitter and loss.

pub mod control;
pub mod delay;
pub mod forwarder;
pub mod netns;
pub mod socks;
