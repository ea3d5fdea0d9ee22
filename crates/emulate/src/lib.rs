//! Emulation mode: the same scenario the simulator runs, but with real `tor` processes, each in
//! its own network namespace, joined by a user-space switch that adds the scenario's path
//! latency, jitter and loss (so it needs no `netem`, which some kernels lack).
//!
//! This crate is part of onionlab, a simulator of Tor networks; `onionlab emulate` runs it, and
//! the book's emulation page (`docs/src/user/emulation.md`) says what it needs (root, `ip`,
//! Debian's `tor`) and what it measures.
//!
//! # Overview
//!
//! Module map: [`plan`] lays the scenario out as hosts and paths; [`keys`] and [`torrc`] make
//! each tor's identity and configuration; [`lab`] owns namespaces, links and processes and
//! removes them ([`netns`] runs code inside a namespace); [`delay`] and [`forwarder`] are the switch, and
//! [`gso`] cuts the senders' super-frames into wire packets for it; [`workload`] runs servers
//! and clients through SOCKS ([`socks`]); [`monitor`] reads tor's control port ([`control`]);
//! [`cpu`] reads the CPU time the tors and the emulator spent; [`emulation`] runs it all and
//! returns the simulator's record types.
//!
//! # Not in this crate
//!
//! Nothing here simulates: the model of Tor is `onionlab-tor`, run by `onionlab run`. Scenarios
//! are read and resolved by `onionlab-scenario`, and the records returned here are written and
//! reported by `onionlab-report`, exactly as a simulated run's are.
//!
//! # Tests
//!
//! `tests/forwarder.rs` checks the switch between real namespaces (delay, order, loss, intact
//! TCP) and `tests/control.rs` the control-port client against a real tor started without
//! networking. The first needs root and `ip`, the second a `tor` binary; without them they are
//! skipped with a notice, except in CI (`CI` set), where a skip would hide a broken set-up.
//! Unit tests sit in `control`, `cpu`, `delay`, `gso`, `plan`, `socks` and `torrc`. Whole
//! emulations are tested from the command line by `crates/cli/tests/emulate.rs`.
//! `examples/linux_tcp.rs` measures one bulk flow of Linux's own TCP through the switch, the
//! real-kernel counterpart of `onionlab-net`'s `tcp_bulk` example.

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
