//! The Tor network directory as the onionlab simulator needs it.
//!
//! This crate is part of onionlab, a simulator of Tor networks.
//!
//! # Overview
//!
//! Simulated clients pick circuits the way Tor clients do, so the simulator needs the same
//! inputs: the relays of a consensus with their flags, consensus weights and exit policies, the
//! position weights that balance guard, middle and exit load, and the selection rules of
//! path-spec. This crate reads real consensus documents (full and microdesc flavours), computes
//! position weights for generated networks (dir-spec 3.8.3), samples smaller networks that keep
//! the real one's shape, maps relay addresses to countries with tor's geoip table, and makes
//! weighted, constraint-respecting path choices.
//!
//! Determinism: every random choice takes a caller-provided RNG, no result depends on hash
//! iteration order, and selection uses integer arithmetic, so a seed reproduces a run exactly.
//!
//! # Not in this crate
//!
//! No directory protocol runs here: simulated hosts know the consensus from the start, and
//! nothing is fetched or voted. Building circuits along the chosen paths, with build timeouts
//! and circuit reuse, is `onionlab-tor`'s; the shipped consensuses and the file reader are
//! `onionlab-data`'s; turning a consensus into a scenario is `onionlab generate` (`crates/cli`).
//!
//! # Tests
//!
//! `tests/parse.rs` (real and malformed consensus documents), `tests/weights.rs` (published
//! position weights and the dir-spec 3.8.3 computation), `tests/select.rs` (weighted choice and
//! path construction on the 2023 consensus) and `tests/sample.rs` (sampled networks keep the
//! real one's shape), with shared helpers in `tests/common/`; unit tests sit in `consensus`,
//! `flags` and `geoip`. The consensus parser is also fuzzed by `crates/cli/tests/fuzz.rs`.

mod consensus;
mod error;
mod flags;
mod geoip;
mod policy;
mod select;
mod weights;

pub use consensus::{decode_base64, Consensus, Flavour, Relay, RelayClass};
pub use error::DirError;
pub use flags::RelayFlags;
pub use geoip::GeoIp;
pub use policy::ExitPolicy;
pub use select::{PathSelector, Position};
pub use weights::{BandwidthWeights, WeightCase, WEIGHT_SCALE};
