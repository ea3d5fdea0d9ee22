//! The sans-IO pieces of onionlab's Tor model.
//!
//! This crate is part of onionlab, a simulator of Tor networks.
//!
//! # Overview
//!
//! Nothing here knows about hosts, sockets or the engine's scheduling (only its time types are
//! used): each piece takes the current time and its inputs and returns decisions, so it can be
//! tested against Tor's specifications directly. `onionlab-tor` drives them inside simulated
//! relays and clients.
//!
//! The pieces: cells as the simulation carries them ([`cell`], [`cell_queue`]); legacy SENDME
//! windows ([`sendme`]) and proposal 324's Vegas congestion control ([`vegas`]); the EWMA
//! circuit priorities ([`ewma`]) and KIST's per-socket write limits ([`kist`]); relay token
//! buckets ([`token_bucket`]); the learned circuit build timeout ([`cbt`]); what a relay's work
//! costs in CPU time ([`cpu`]); Tor's tunable parameters with the live network's values as
//! defaults ([`params`]); and the parameters an older consensus's network ran with, from its
//! `params` line and the code defaults of tor releases of the time ([`period`]).
//!
//! # Not in this crate
//!
//! Relays, clients, channels and circuits as running state machines are `onionlab-tor`'s;
//! choosing relays for a path is `onionlab-netdir`'s; measuring the unit costs that [`cpu`]
//! prices work with is `onionlab-calibrate`'s; TCP's and QUIC's own congestion control is
//! `onionlab-congestion`'s.
//!
//! # Tests
//!
//! This crate has no `tests/` folder: each module carries its unit tests, written against the
//! specification or tor's C code it follows (`cbt`, `cell`, `cell_queue`, `cpu`, `ewma`, `kist`,
//! `params`, `period`, `sendme`, `token_bucket`, `vegas`; property tests draw from
//! `test_rng`). The pieces working together inside relays are tested by
//! `crates/tor/tests/relay_behaviour.rs`.

pub mod cbt;
pub mod cell;
pub mod cell_queue;
pub mod cpu;
pub mod ewma;
pub mod kist;
pub mod params;
pub mod period;
pub mod sendme;
#[cfg(test)]
mod test_rng;
pub mod token_bucket;
pub mod vegas;

pub use cbt::BuildTimeEstimator;
pub use cell::{Cell, CellCommand, RelayCommand, CELL_BYTES, RELAY_DATA_BYTES};
pub use cell_queue::CellQueue;
pub use ewma::{CellWeight, CircuitEwma, CircuitMux, EwmaClock};
pub use kist::{kist_socket_can_write, kist_write_limit, kistlite_write_limit};
pub use params::{
    format_real, ChannelDesign, FlowControl, ImuxScheduler, ParamRange, ParamValue, SchedulerKind,
    TorParams,
};
pub use period::{period_settings, PeriodSetting, SettingValue, TorEra};
pub use sendme::{DeliverWindow, PackageWindow, SendmeError};
pub use token_bucket::{RelayBuckets, TokenBucket};
pub use vegas::VegasCc;
