//! The sans-IO pieces of onionlab's Tor model.
//!
//! Nothing here knows about hosts, sockets or the engine: each piece takes the current time and
//! its inputs and returns decisions, so it can be tested against Tor's specifications directly.
//! `onionlab-tor` drives them inside simulated relays and clients.

pub mod cbt;
pub mod cell;
pub mod cell_queue;
pub mod cpu;
pub mod ewma;
pub mod kist;
pub mod params;
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
pub use sendme::{DeliverWindow, PackageWindow, SendmeError};
pub use token_bucket::{RelayBuckets, TokenBucket};
pub use vegas::VegasCc;
