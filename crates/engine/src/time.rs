//! Simulated time.
//!
//! Time is a plain count of nanoseconds since the start of the simulation. Integers keep every
//! computation exact and therefore reproducible across machines, which floating point would not.
//!
//! Arithmetic on times saturates: a delay too large to add to the current time gives
//! `SimTime::MAX`, a time no run ever reaches (runs process events strictly before their stop
//! time), so an absurdly long timer simply never fires instead of wrapping round to the past.

/// A point in simulated time, in nanoseconds since the start of the run.
pub type SimTime = u64;

/// A span of simulated time, in nanoseconds.
pub type SimDuration = u64;

/// Nanoseconds of simulated time in one microsecond.
pub const NANOS_PER_MICRO: u64 = 1_000;
/// Nanoseconds of simulated time in one millisecond.
pub const NANOS_PER_MILLI: u64 = 1_000_000;
/// Nanoseconds of simulated time in one second.
pub const NANOS_PER_SEC: u64 = 1_000_000_000;

/// Converts whole milliseconds to simulated nanoseconds (saturating at `u64::MAX`).
pub const fn millis(ms: u64) -> SimDuration {
    ms.saturating_mul(NANOS_PER_MILLI)
}

/// Converts whole seconds to simulated nanoseconds (saturating at `u64::MAX`).
pub const fn secs(s: u64) -> SimDuration {
    s.saturating_mul(NANOS_PER_SEC)
}

/// Converts fractional seconds (e.g. from a config file) to nanoseconds, rounding to nearest
/// (negative and NaN give 0, values beyond the range `u64::MAX`).
pub fn secs_f64(s: f64) -> SimDuration {
    (s * NANOS_PER_SEC as f64).round().max(0.0) as u64
}

/// Converts nanoseconds to fractional seconds, for reporting only.
pub fn as_secs_f64(t: SimTime) -> f64 {
    t as f64 / NANOS_PER_SEC as f64
}
