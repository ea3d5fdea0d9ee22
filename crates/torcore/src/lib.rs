//! The sans-IO pieces of onionlab's Tor model.
//!
//! Nothing here knows about hosts, sockets or the engine: each piece takes the current time and
//! its inputs and returns decisions, so it can be tested against Tor's specifications directly.
//! `onionlab-tor` drives them inside simulated relays and clients.

pub mod cell;
pub mod params;

pub use cell::{Cell, CellCommand, RelayCommand, CELL_BYTES, RELAY_DATA_BYTES};
pub use params::{FlowControl, SchedulerKind, TorParams};
