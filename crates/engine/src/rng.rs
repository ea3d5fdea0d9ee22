//! Per-host random streams.
//!
//! Every host draws from its own ChaCha stream keyed by the scenario seed and selected by the
//! host id. Streams never share state, so the numbers one host sees do not depend on how many
//! other hosts exist or in which order workers run them.

use rand::SeedableRng;
use rand_chacha::ChaCha12Rng;

/// The random number generator a host draws from.
pub type HostRng = ChaCha12Rng;

/// Creates the random stream of `host` for a run seeded with `seed`.
///
/// ChaCha's 64-bit stream selector gives 2^64 independent streams of the same key, so we use the
/// seed as key and the host id as stream; `purpose` lets one host have several independent
/// streams (e.g. one for the network model and one for the application) when a model needs
/// randomness in one part not to shift the draws of another.
pub fn host_rng(seed: u64, host: u32, purpose: u32) -> HostRng {
    let mut rng = ChaCha12Rng::seed_from_u64(seed);
    rng.set_stream(((purpose as u64) << 32) | host as u64);
    rng
}
