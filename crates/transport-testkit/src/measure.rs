//! Figures the performance tests compute from what was delivered.

use crate::SEC;
use onionlab_engine::time::{SimDuration, SimTime};

/// Bandwidth-delay product in bytes: what a path of `rate_bps` holds in flight over `rtt`.
pub fn bdp(rate_bps: u64, rtt: SimDuration) -> u64 {
    (rate_bps as u128 * rtt as u128 / (8 * SEC) as u128) as u64
}

/// Goodput in bits per second of `bytes` delivered between two instants.
pub fn goodput_bps(bytes: u64, from: SimTime, to: SimTime) -> f64 {
    bytes as f64 * 8.0 / ((to - from) as f64 / SEC as f64)
}

/// Jain's fairness index of the flows' shares: 1 when equal, `1/n` when one flow has it all.
pub fn jain(x: &[u64]) -> f64 {
    let s: f64 = x.iter().map(|&v| v as f64).sum();
    let s2: f64 = x.iter().map(|&v| (v as f64) * (v as f64)).sum();
    s * s / (x.len() as f64 * s2)
}
