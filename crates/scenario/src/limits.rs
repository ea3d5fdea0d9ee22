//! The bounds every scenario value must respect.
//!
//! A scenario that `check` accepts must also run to its end in bounded time and memory: a count,
//! duration or rate that is merely representable (a `u64`) is not thereby meaningful, and the
//! reported cases of a run that hangs, crashes or exhausts memory all came from such values.
//! So every value has a range here, chosen to cover any real experiment with room to spare;
//! where tor has its own range (relay rates), it is tor's. The book's scenario reference
//! (docs/src/reference/) lists them with their reasons.

use crate::units::{Duration, Rate, Size};

/// Hosts in one scenario, all groups together: authorities, relays, servers and clients.
///
/// A full-size Tor network has about 7,000 relays, and clients are modelled by fewer hosts each
/// standing for many users, so a million hosts is far beyond any experiment while keeping the
/// per-host state of a run within a large machine's memory. It is checked before anything is
/// allocated per host.
pub const MAX_HOSTS: u64 = 1_000_000;

/// The longest simulated run: 30 days. Circuit and guard lifetimes of the model are minutes to
/// hours, so a month covers any effect the model has; it is also tor's own bound on
/// `MaxCircuitDirtiness`.
pub const MAX_STOP_TIME: Duration = Duration::from_secs(30 * 24 * 3600);

/// No duration (pause, timeout, interval, start) may exceed the longest run: a longer one can
/// never take effect.
pub const MAX_DURATION: Duration = MAX_STOP_TIME;

/// The shortest latency of the builtin switch: 1 µs, light's time over 300 m. The engine's
/// parallel rounds are at most this long, so shorter values only slow a run down.
pub const MIN_LATENCY: Duration = Duration(1_000);

/// The longest latency of the builtin switch, as for one edge of a graph file
/// ([`onionlab_topology::MAX_EDGE_DELAY`]): real links take well under a second.
pub const MAX_LATENCY: Duration = Duration::from_secs(3600);

/// The widest `lookahead_floor`: 1 s. The floor is meant to sit near the smallest latency
/// (milliseconds); above a second every packet would wait longer for its round than any path
/// takes. It must also be shorter than `stop_time`.
pub const MAX_LOOKAHEAD_FLOOR: Duration = Duration::from_secs(1);

/// The longest downstream queue, in time at the link's rate: a minute, beyond even badly
/// bloated router buffers (seconds).
pub const MAX_DOWN_QUEUE: Duration = Duration::from_secs(60);

/// The shortest download timeout: a download needs a few round trips through three relays
/// before its first byte, so a shorter timeout only counts failures.
pub const MIN_TIMEOUT: Duration = Duration::from_secs(1);

/// The shortest perf interval: one download per second per client is already far denser than
/// OnionPerf (one per five minutes); shorter intervals pile up downloads faster than they end.
pub const MIN_PERF_INTERVAL: Duration = Duration::from_secs(1);

/// The slowest link: 8 kbit/s, one byte per millisecond, below the slowest dial-up modems
/// (9.6 kbit/s). Already here a full-size packet takes 1.5 s to send, longer than TCP's initial
/// retransmission timeout; at the 1 bit/s that was reported one packet takes over three hours,
/// and a run makes no progress at all.
pub const MIN_LINK_RATE: Rate = Rate(8_000);

/// The fastest link: 1 Tbit/s, well above any host interface in use, and small enough that
/// rate × time products stay inside the model's integer arithmetic.
pub const MAX_LINK_RATE: Rate = Rate(1_000_000_000_000);

/// Tor refuses to run a relay whose `BandwidthRate` is below 75 KiB/s
/// (`RELAY_REQUIRED_MIN_BANDWIDTH`).
pub const MIN_RELAY_RATE_BYTES: u64 = 75 * 1024;

/// Tor's largest `BandwidthRate`/`BandwidthBurst` is 2^31 − 1 bytes/s
/// (`ROUTER_MAX_DECLARED_BANDWIDTH`); it takes "2 GB" (2^31) to mean that, and so do we.
pub const MAX_RELAY_RATE_BYTES: u64 = 1 << 31;

/// The largest burst factor: a burst of more than 100 times the rate is no longer a burst.
pub const MAX_BURST_FACTOR: f64 = 100.0;

/// `relays.sample.rate_per_weight`'s range, bytes/s per unit of consensus weight: a thousandth
/// to a thousand times the weight read as kB/s.
pub const RATE_PER_WEIGHT_RANGE: std::ops::RangeInclusive<f64> = 1.0..=1_000_000.0;
/// `relays.sample.rate_spread`: a log-standard deviation of 2 already spreads rates over a
/// factor of about 50 either way between the 2.5th and 97.5th percentiles.
pub const RATE_SPREAD_RANGE: std::ops::RangeInclusive<f64> = 0.0..=2.0;

/// The largest consensus weight: tor keeps weights in 32-bit unsigned integers.
pub const MAX_CONSENSUS_WEIGHT: u64 = u32::MAX as u64;

/// The largest download: the model's request carries the size in 32 bits.
pub const MAX_SIZE: Size = Size(u32::MAX as u64);

/// Worker threads: the engine's mailboxes grow with the square of the thread count, and no
/// machine the model runs on has more cores than this.
pub const MAX_THREADS: u32 = 1024;

/// Names label output folders and files: at most this many characters.
pub const MAX_NAME_LEN: usize = 100;

/// Loss on the builtin switch above this is accepted with a warning: most connections fail.
pub const WARN_LOSS: f64 = 0.5;

/// The largest scenario file `load` reads: a scenario is a few dozen lines, and a list of
/// every relay of the Tor network (about 7,000 entries) a few MiB.
pub const MAX_SCENARIO_BYTES: u64 = 16 << 20;

/// The only port the model's web servers listen on and its clients ask exits for.
pub const MODEL_PORT: u16 = 80;

/// The most `network.impairments`: each names one link of an experiment, and the network's
/// per-packet lookup table grows with the square of the host classes they make.
pub const MAX_IMPAIRMENTS: usize = 64;
