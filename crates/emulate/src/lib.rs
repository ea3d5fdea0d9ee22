//! Emulation mode: the same scenario the simulator runs, but with real `tor` processes, each in
//! its own network namespace, joined by a user-space switch that adds the scenario's path
//! latency, jitter and loss (this machine's kernel has no netem).
//!
//! Module map: [`plan`] lays the scenario out as hosts and paths; [`keys`] and [`torrc`] make
//! each tor's identity and configuration; [`lab`] owns namespaces, links and processes and
//! removes them; [`delay`] and [`forwarder`] are the switch, and [`gso`] cuts the senders'
//! super-frames into wire packets for it; [`workload`] runs servers and clients through SOCKS
//! ([`socks`]); [`monitor`] reads tor's control port ([`control`]); [`cpu`] reads the CPU time
//! the tors and the emulator spent; [`emulation`] runs it all and returns the simulator's
//! record types.

pub mod control;
pub mod cpu;
pub mod delay;
pub mod emulation;
pub mod forwarder;
pub mod gso;
pub mod keys;
pub mod lab;
pub mod monitor;
pub mod netns;
pub mod plan;
pub mod socks;
pub mod torrc;
pub mod workload;

pub use emulation::{check_machine, prepare, run, Error, Measured, Options};
