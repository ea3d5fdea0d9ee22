//! The Tor network directory as the onionlab simulator needs it.
//!
//! Simulated clients pick circuits the way Tor clients do, so the simulator needs the same
//! inputs: the relays of a consensus with their flags, consensus weights and exit policies, the
//! position weights that balance guard, middle and exit load, and the selection rules of
//! path-spec. This crate reads real consensus documents (full and microdesc flavours), computes
//! position weights for generated networks (dir-spec 3.8.3), samples smaller networks that keep
//! the real one's shape, and makes weighted, constraint-respecting path choices.
//!
//! Determinism: every random choice takes a caller-provided RNG, no result depends on hash
//! iteration order, and selection uses integer arithmetic, so a seed reproduces a run exactly.

mod consensus;
mod error;
mod flags;
mod policy;
mod select;
mod weights;

pub use consensus::{decode_base64, Consensus, Flavour, Relay, RelayClass};
pub use error::DirError;
pub use flags::RelayFlags;
pub use policy::ExitPolicy;
pub use select::{PathSelector, Position};
pub use weights::{BandwidthWeights, WeightCase, WEIGHT_SCALE};
