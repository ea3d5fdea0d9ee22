//! Client workload models.
//!
//! This crate is part of onionlab, a simulator of Tor networks.
//!
//! # Overview
//!
//! A [`Workload`] says what a client group does: web (a download, then a think time), bulk
//! (downloads back to back), perf (a download on a fixed grid, as OnionPerf does), upload, or
//! markov (streams as the PrivCount models learned from the live network say Tor's users make
//! them; [`markov`] reads and samples those models).
//!
//! The models are sans-IO: a [`ClientSchedule`] never touches sockets or the event queue. The
//! host model asks it what to do ([`ClientSchedule::poll`]) and tells it when a download ended
//! ([`ClientSchedule::on_finished`]); all randomness comes from the RNG the host passes in, so the
//! schedule is exactly as reproducible as the host's RNG stream.
//!
//! Servers need no model of their own: they just send the number of bytes a client asks for.
//!
//! # Not in this crate
//!
//! Carrying out a download (finding a circuit, opening a stream, counting cells) is the Tor
//! client's, in `onionlab-tor`; the shipped model files are `onionlab-data`'s; the `clients:`
//! keys of a scenario are parsed by `onionlab-scenario`.
//!
//! # Tests
//!
//! `tests/markov_fit.rs` checks the Markov sampler's goodness of fit against distributions
//! computed from the PrivCount models themselves (streams per circuit and the gaps between
//! them, the packet models' walks) and that a schedule starts streams at the models' rate.
//! Unit tests sit in `lib.rs` and `markov`.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

use onionlab_engine::time::{secs, SimDuration, SimTime};
use rand::{Rng, RngExt};
use serde::{Deserialize, Serialize};

pub mod markov;

pub use markov::{MarkovModel, ModelKind, PACKET_PAYLOAD_BYTES};

/// One KiB, for the sizes the reference workloads are stated in.
pub const KIB: u64 = 1024;
/// One MiB.
pub const MIB: u64 = 1024 * KIB;

/// Per-download timeout used when nothing else is specified. It matches tgen's built-in transfer
/// timeout (60 s), which is what Tor's own measurement tooling applies to web-like transfers.
pub const DEFAULT_TIMEOUT: SimDuration = secs(60);

/// Reference perf sizes and their timeouts (50 KiB / 1 MiB / 5 MiB → 15 / 60 / 120 s).
const PERF_ANCHORS: [(u64, SimDuration); 3] =
    [(50 * KIB, secs(15)), (MIB, secs(60)), (5 * MIB, secs(120))];

/// What a client does, configurable per client group.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Workload {
    /// Download `size_bytes`, then think for a uniform time in [pause_min, pause_max], repeat.
    Web {
        /// Bytes each download fetches from the server.
        size_bytes: u64,
        /// Shortest think time after a download ends, in nanoseconds of simulated time.
        pause_min: SimDuration,
        /// Longest think time, in nanoseconds; the pause is drawn uniformly up to and including it.
        pause_max: SimDuration,
        /// How long a download may take from its start, circuit wait included, before it is
        /// abandoned; nanoseconds of simulated time.
        timeout: SimDuration,
    },
    /// Download `size_bytes` back to back.
    Bulk {
        /// Bytes each download fetches from the server.
        size_bytes: u64,
        /// How long a download may take from its start, circuit wait included, before it is
        /// abandoned; nanoseconds of simulated time.
        timeout: SimDuration,
    },
    /// Start a download of `size_bytes` every `interval`, each abandoned after `timeout`.
    ///
    /// Downloads start on a fixed grid whether or not the previous one has finished. This is what
    /// OnionPerf does: its tgen graph has a pause action with an edge back to itself and an edge
    /// to the transfer, and tgen follows all out-edges of an action concurrently, so the pause
    /// loop keeps ticking while a slow transfer is still running. A fixed grid also keeps a slow
    /// network from reducing its own measurement load, which would bias the results.
    Perf {
        /// Bytes each download fetches from the server.
        size_bytes: u64,
        /// Time between the starts of two downloads on the grid, in nanoseconds.
        interval: SimDuration,
        /// How long a download may take from its start, circuit wait included, before it is
        /// abandoned; nanoseconds of simulated time.
        timeout: SimDuration,
    },
    /// Upload `size_bytes` to a server back to back, like `Bulk` in the other direction: the
    /// client sends the bytes and the transfer ends when the server's short response
    /// (confirming it received all of them) arrives.
    Upload {
        /// Bytes each transfer sends to the server.
        size_bytes: u64,
        /// How long a transfer may take from its start, circuit wait included, before it is
        /// abandoned; nanoseconds of simulated time.
        timeout: SimDuration,
    },
    /// Streams as the PrivCount models say Tor's users make them (see [`MarkovWorkload`]).
    Markov(MarkovWorkload),
}

/// Circuits (stream-model walks) a user starts every 10 minutes at load 1.0: the 2018
/// PrivCount measurements counted 4,575,895 active exit circuits per day at exits carrying
/// 2.13% of exit traffic, and 1,436,887 active client IPs per day at guards carrying 1.26% of
/// guard traffic; per 10-minute period (144 a day) that is 1,491,880 circuits and 791,935
/// active users on the whole network, 1.884 circuits per user. (tornettools, which generated
/// the 792k-user network of Jansen et al. 2021 from the same tallies, assigns them to the 95%
/// of users it treats as exit users: 1.98 each.)
pub const CIRCUITS_PER_USER_PER_10_MIN: f64 = 1_491_880.0 / 791_935.0;

/// How long one circuit's walk of the stream model may go on starting streams: tor attaches
/// new streams to a circuit for `MaxCircuitDirtiness` (10 minutes) after its first, so no
/// stream the model was learned from started later than that on its circuit.
pub const SESSION_LIMIT: SimDuration = secs(600);

/// The most users one client host may stand for.
pub const MAX_USERS: u32 = 10_000;

/// A client host standing for `users` Tor users whose streams follow the PrivCount models.
///
/// Each user starts circuits ("sessions") at random, [`CIRCUITS_PER_USER_PER_10_MIN`] every
/// 10 minutes on average (a Poisson process, as tornettools' flow model does); the users'
/// processes together are one Poisson process `users` times as fast, which is how the host
/// draws them. Each session walks the stream model: every `$` starts a stream (a download
/// through the host's tor client), the emission's delay says when the next observation
/// comes, and the session ends at `F` or once its next stream would start more than
/// [`SESSION_LIMIT`] after its first. Each stream's size is one walk of the packet model: its
/// server-to-client packets times [`PACKET_PAYLOAD_BYTES`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MarkovWorkload {
    /// Tor users the host stands for, 1 to [`MAX_USERS`]; sessions begin this many times as often.
    pub users: u32,
    /// How long each stream's download may take from its start before it is abandoned, in
    /// nanoseconds of simulated time.
    pub timeout: SimDuration,
    /// The model of one circuit's streams ([`ModelKind::Stream`]); hosts that name the same
    /// file share one copy.
    pub stream_model: Arc<MarkovModel>,
    /// The model of one stream's packets ([`ModelKind::Packet`]), whose walks give the streams'
    /// sizes.
    pub packet_model: Arc<MarkovModel>,
}

impl Workload {
    /// How many Tor users a host running this workload stands for: a `markov` host's
    /// `users`, one for every other workload.
    pub fn users(&self) -> u32 {
        match self {
            Workload::Markov(m) => m.users,
            _ => 1,
        }
    }

    /// The reference web client: 320 KiB, then a 1–60 s pause.
    pub fn web_default() -> Self {
        Workload::Web {
            size_bytes: 320 * KIB,
            pause_min: secs(1),
            pause_max: secs(60),
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// The reference bulk client: 5 MiB back to back.
    ///
    /// Its timeout is the perf timeout for the same size (120 s): a 5 MiB transfer regularly
    /// needs longer than the generic 60 s on a loaded network, and abandoning it would hide the
    /// very congestion bulk clients are there to create.
    pub fn bulk_default() -> Self {
        Workload::Bulk {
            size_bytes: 5 * MIB,
            timeout: perf_timeout(5 * MIB),
        }
    }

    /// A perf client fetching `size_bytes` every 60 s, with the timeout from [`perf_timeout`].
    pub fn perf_default(size_bytes: u64) -> Self {
        Workload::Perf {
            size_bytes,
            interval: secs(60),
            timeout: perf_timeout(size_bytes),
        }
    }

    /// Bytes each transfer of this workload fetches (or, uploading, sends); `None` for
    /// `Markov`, which draws every stream's size.
    pub fn size_bytes(&self) -> Option<u64> {
        match *self {
            Workload::Web { size_bytes, .. }
            | Workload::Bulk { size_bytes, .. }
            | Workload::Perf { size_bytes, .. }
            | Workload::Upload { size_bytes, .. } => Some(size_bytes),
            Workload::Markov(_) => None,
        }
    }

    /// How long each transfer may take before it is abandoned.
    pub fn timeout(&self) -> SimDuration {
        match *self {
            Workload::Web { timeout, .. }
            | Workload::Bulk { timeout, .. }
            | Workload::Perf { timeout, .. }
            | Workload::Upload { timeout, .. } => timeout,
            Workload::Markov(ref m) => m.timeout,
        }
    }

    /// Whether the client sends its transfers' bytes rather than fetching them.
    pub fn is_upload(&self) -> bool {
        matches!(self, Workload::Upload { .. })
    }

    /// Rejects parameters that would make a client do nothing or spin without time advancing.
    pub fn validate(&self) -> Result<(), String> {
        if self.size_bytes() == Some(0) {
            return Err("download size must be at least 1 byte".into());
        }
        if let Workload::Markov(m) = self {
            if !(1..=MAX_USERS).contains(&m.users) {
                return Err(format!("users must be 1 to {MAX_USERS}"));
            }
        }
        if self.timeout() == 0 {
            return Err("download timeout must be positive".into());
        }
        match *self {
            Workload::Web {
                pause_min,
                pause_max,
                ..
            } if pause_min > pause_max => Err(format!(
                "pause_min ({pause_min} ns) is greater than pause_max ({pause_max} ns)"
            )),
            Workload::Perf { interval: 0, .. } => Err("perf interval must be positive".into()),
            _ => Ok(()),
        }
    }
}

/// Timeout for a perf download of `size_bytes`.
///
/// The three reference sizes get their reference timeouts exactly. Other sizes interpolate
/// linearly between the neighbouring reference points, so the timeout grows smoothly with the
/// size. Below 50 KiB the 15 s floor applies, since circuit setup and the first round trips
/// dominate small transfers. Above 5 MiB the timeout grows in proportion to the size from the
/// 5 MiB point, i.e. it assumes the same minimum acceptable throughput (about 43 KB/s).
pub fn perf_timeout(size_bytes: u64) -> SimDuration {
    let (first_size, first_timeout) = PERF_ANCHORS[0];
    if size_bytes <= first_size {
        return first_timeout;
    }
    for pair in PERF_ANCHORS.windows(2) {
        let ((s0, t0), (s1, t1)) = (pair[0], pair[1]);
        if size_bytes <= s1 {
            // Integer arithmetic in u128 keeps this exact and platform-independent.
            let extra = (t1 - t0) as u128 * (size_bytes - s0) as u128 / (s1 - s0) as u128;
            return t0 + extra as u64;
        }
    }
    let (last_size, last_timeout) = PERF_ANCHORS[PERF_ANCHORS.len() - 1];
    let scaled = last_timeout as u128 * size_bytes as u128 / last_size as u128;
    scaled.min(u64::MAX as u128) as u64
}

/// Tor Metrics' throughput of a download, as OnionPerf's timestamps give it: the
/// 4,194,304 bits from its 524,288th to its 1,048,576th byte over the time between the two
/// (DATAPERC50 to DATAPERC100 of a 1 MiB download, DATAPERC10 to DATAPERC20 of a 5 MiB one).
/// The stretch starts after the first half mebibyte, so it leaves out the circuit, the
/// request and the first burst of a window, and measures a transfer going at its pace.
///
/// The application that receives the download reports its running total after every
/// arrival ([`on_received`](Self::on_received)); a download smaller than 1 MiB never
/// completes the span. Times are nanoseconds on whatever clock the caller keeps (simulated
/// time in the model, the emulation's clock there).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThroughputProbe {
    from: Option<u64>,
    to: Option<u64>,
}

impl ThroughputProbe {
    /// The byte whose arrival opens the span.
    pub const FROM_BYTE: u64 = 512 * KIB;
    /// The byte whose arrival closes it.
    pub const TO_BYTE: u64 = MIB;

    /// `received` bytes have arrived in all, the last of them at `now`.
    pub fn on_received(&mut self, received: u64, now: u64) {
        if self.to.is_some() {
            return;
        }
        if self.from.is_none() && received >= Self::FROM_BYTE {
            self.from = Some(now);
        }
        if received >= Self::TO_BYTE {
            self.to = Some(now);
        }
    }

    /// When the span opened and closed, once both bytes have arrived.
    pub fn span(&self) -> Option<(u64, u64)> {
        Some((self.from?, self.to?))
    }

    /// The throughput over the span, in Mbit/s, once it has closed (None before, and for a
    /// span of no time).
    pub fn mbit_s(&self) -> Option<f64> {
        let (from, to) = self.span()?;
        let bits = ((Self::TO_BYTE - Self::FROM_BYTE) * 8) as f64;
        (to > from).then(|| bits / 1e6 / ((to - from) as f64 / 1e9))
    }
}

/// What the host should do next for one client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Start a download now, abandoning it after `timeout`.
    Start {
        /// Bytes to fetch (or, for an upload workload, to send).
        size_bytes: u64,
        /// How long the download may take from now before it is abandoned, in nanoseconds.
        timeout: SimDuration,
        /// Streams with different keys never share a circuit (tor's stream isolation, as a
        /// SOCKS username gives it); 0 for workloads whose streams may share any circuit.
        isolation: u32,
    },
    /// Nothing to do until this time; poll again then.
    WaitUntil(SimTime),
    /// Nothing to do until a download finishes ([`ClientSchedule::on_finished`]).
    Idle,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum State {
    /// The next download may start at this time.
    ReadyAt(SimTime),
    /// A download is in flight (web and bulk only run one at a time).
    Downloading,
    /// A web download finished at this time; the think time is drawn at the next poll, because
    /// that is where the RNG is available.
    Finished(SimTime),
}

/// One client's schedule: decides when downloads start.
///
/// Protocol: call [`poll`](Self::poll) at `start` and whenever a returned `WaitUntil` time is
/// reached. After a `Start`, poll again at the same `now` until it answers `WaitUntil` or
/// `Idle`; that answer says when to come back (each `Start` is exactly one download). Report
/// every download's end with [`on_finished`](Self::on_finished), then poll.
#[derive(Clone, Debug)]
pub struct ClientSchedule {
    workload: Workload,
    state: State,
    started: u64,
    in_flight: u64,
    /// The sessions of a `Markov` workload.
    markov: Option<Sessions>,
}

/// One session's next observation: when, its state, and when it must stop starting streams.
/// Ordered by time, then by the order sessions began (`seq`), so that sessions due at one
/// instant are handled in an order fixed by the draws alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct PendingStep {
    at: SimTime,
    seq: u64,
    state: u32,
    limit: SimTime,
}

/// The state of a `Markov` workload: when the next session begins and the steps of the
/// sessions under way. The heap keeps its capacity, so steady state allocates nothing.
#[derive(Clone, Debug)]
struct Sessions {
    next_session: Option<SimTime>,
    steps: BinaryHeap<Reverse<PendingStep>>,
    seq: u64,
}

/// A uniform draw in [0, 1) from the host's RNG.
fn uniform<R: Rng + ?Sized>(rng: &mut R) -> f64 {
    rng.random::<f64>()
}

/// Nanoseconds from a delay in microseconds, rounded, within 0 and the 30-day bound of every
/// duration (a log-normal's far tail exceeds any run).
fn micros_to_ns(us: f64) -> SimDuration {
    const MAX_NS: f64 = 30.0 * 86_400.0 * 1e9;
    let ns = us * 1000.0;
    if ns.is_nan() {
        MAX_NS as u64
    } else {
        ns.round().clamp(0.0, MAX_NS) as u64
    }
}

impl ClientSchedule {
    /// A schedule for one client running `workload`, whose first download may start at
    /// `start` (simulated time, nanoseconds).
    pub fn new(workload: Workload, start: SimTime) -> Self {
        let markov = matches!(workload, Workload::Markov(_)).then(|| Sessions {
            next_session: None,
            steps: BinaryHeap::new(),
            seq: 0,
        });
        ClientSchedule {
            workload,
            state: State::ReadyAt(start),
            started: 0,
            in_flight: 0,
            markov,
        }
    }

    /// The workload this schedule runs.
    pub fn workload(&self) -> &Workload {
        &self.workload
    }

    /// Downloads started so far.
    pub fn started(&self) -> u64 {
        self.started
    }

    /// Downloads started and not yet reported finished.
    pub fn in_flight(&self) -> u64 {
        self.in_flight
    }

    /// What to do at `now` (call at start and at the time of every `WaitUntil`).
    pub fn poll<R: Rng + ?Sized>(&mut self, now: SimTime, rng: &mut R) -> Action {
        if self.markov.is_some() {
            return self.poll_markov(now, rng);
        }
        if let State::Finished(at) = self.state {
            let ready = match self.workload {
                Workload::Web {
                    pause_min,
                    pause_max,
                    ..
                } => {
                    // `validate` rejects an inverted range; an unvalidated one is read as the
                    // range it spans rather than panicking.
                    let (lo, hi) = (pause_min.min(pause_max), pause_min.max(pause_max));
                    at.saturating_add(rng.random_range(lo..=hi))
                }
                _ => at,
            };
            self.state = State::ReadyAt(ready);
        }
        match self.state {
            State::Downloading => Action::Idle,
            State::ReadyAt(t) if now < t => Action::WaitUntil(t),
            State::ReadyAt(t) => {
                self.state = match self.workload {
                    Workload::Perf { interval, .. } => {
                        // A host that polls late (it should not) gets one download, not a burst
                        // of catch-up downloads; the grid itself stays anchored at `start`. An
                        // unvalidated zero interval counts as 1 ns, so the next download is
                        // always later than now and a poll loop cannot spin at one instant.
                        let interval = interval.max(1);
                        let missed = (now - t) / interval;
                        State::ReadyAt(t.saturating_add((missed + 1).saturating_mul(interval)))
                    }
                    _ => State::Downloading,
                };
                self.started += 1;
                self.in_flight += 1;
                Action::Start {
                    size_bytes: self.workload.size_bytes().unwrap_or(1),
                    timeout: self.workload.timeout(),
                    isolation: 0,
                }
            }
            State::Finished(_) => unreachable!("resolved above"),
        }
    }

    /// The `Markov` workload's poll: begins the sessions due, then takes the session steps due
    /// in time order until one starts a stream (one `Start` per poll, as for the others).
    fn poll_markov<R: Rng + ?Sized>(&mut self, now: SimTime, rng: &mut R) -> Action {
        let Workload::Markov(w) = &self.workload else {
            unreachable!("markov sessions exist only for the markov workload");
        };
        let sessions = self.markov.as_mut().expect("checked by poll");
        let State::ReadyAt(start) = self.state else {
            unreachable!("a markov schedule stays ready");
        };
        if now < start {
            return Action::WaitUntil(start);
        }
        // Sessions begin as a Poisson process of rate users x circuits per user.
        let per_ns = f64::from(w.users.max(1)) * CIRCUITS_PER_USER_PER_10_MIN / 600e9;
        let gap = |rng: &mut R| {
            // 1 - u is in (0, 1]: the gap is finite, and at least 1 ns so time moves on.
            let ns = -(1.0 - uniform(rng)).ln() / per_ns;
            (ns.round() as u64).clamp(1, secs(30 * 86_400))
        };
        let mut next_session = match sessions.next_session {
            Some(t) => t,
            None => start.saturating_add(gap(rng)),
        };
        while next_session <= now {
            sessions.seq += 1;
            sessions.steps.push(Reverse(PendingStep {
                at: next_session,
                seq: sessions.seq,
                state: w.stream_model.first_state(uniform(rng)),
                limit: next_session.saturating_add(SESSION_LIMIT),
            }));
            next_session = next_session.saturating_add(gap(rng));
        }
        sessions.next_session = Some(next_session);
        while let Some(&Reverse(step)) = sessions.steps.peek() {
            if step.at > now {
                break;
            }
            sessions.steps.pop();
            let markov::SessionStep::Stream { delay_us, next } =
                markov::session_step(&w.stream_model, step.state, || uniform(rng))
            else {
                // `F`: the session (the circuit) is over.
                continue;
            };
            let at = step.at.saturating_add(micros_to_ns(delay_us));
            if let Some(state) = next {
                if at < step.limit {
                    sessions
                        .steps
                        .push(Reverse(PendingStep { at, state, ..step }));
                }
            }
            let packets = markov::walk_packets(&w.packet_model, || uniform(rng));
            // A stream whose server sent nothing still opened a stream and asked: the model's
            // smallest response, one byte, stands for it.
            let size_bytes = packets
                .to_client
                .saturating_mul(PACKET_PAYLOAD_BYTES)
                .clamp(1, u64::from(u32::MAX));
            self.started += 1;
            self.in_flight += 1;
            // Each session is one user's circuit: its streams are isolated from other
            // sessions' (tornettools gives every markov session its own SOCKS username), so
            // the users a host stands for do not all crowd onto one circuit.
            return Action::Start {
                size_bytes,
                timeout: w.timeout,
                isolation: (step.seq % u64::from(u32::MAX)) as u32 + 1,
            };
        }
        let next = sessions
            .steps
            .peek()
            .map_or(next_session, |s| s.0.at.min(next_session));
        Action::WaitUntil(next)
    }

    /// A download finished (ok, failed or timed out) at `now`; the next poll decides what comes
    /// next.
    pub fn on_finished(&mut self, now: SimTime) {
        self.in_flight = self.in_flight.saturating_sub(1);
        // Perf clients keep their grid regardless of completions.
        if self.state == State::Downloading {
            self.state = State::Finished(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use onionlab_engine::time::{as_secs_f64, NANOS_PER_SEC};
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn rng() -> ChaCha8Rng {
        ChaCha8Rng::seed_from_u64(7)
    }

    #[test]
    fn defaults_match_reference_workload() {
        assert_eq!(
            Workload::web_default(),
            Workload::Web {
                size_bytes: 327_680,
                pause_min: secs(1),
                pause_max: secs(60),
                timeout: secs(60)
            }
        );
        assert_eq!(Workload::bulk_default().size_bytes(), Some(5 * MIB));
        for (size, timeout) in [(50 * KIB, 15), (MIB, 60), (5 * MIB, 120)] {
            assert_eq!(
                Workload::perf_default(size),
                Workload::Perf {
                    size_bytes: size,
                    interval: secs(60),
                    timeout: secs(timeout)
                }
            );
        }
        for w in [
            Workload::web_default(),
            Workload::bulk_default(),
            Workload::perf_default(MIB),
        ] {
            w.validate().unwrap();
        }
    }

    /// Cells of 498 bytes arriving 1 ms apart: the span opens at the cell that brings the
    /// 524,288th byte (cell 1,053) and closes at the one that brings the 1,048,576th (cell
    /// 2,106), 1,053 ms later, so the throughput is 4,194,304 bits over 1.053 s.
    #[test]
    fn throughput_is_taken_between_half_a_mebibyte_and_one() {
        let mut p = ThroughputProbe::default();
        let mut received = 0;
        for cell in 1..=3_000u64 {
            received += 498;
            p.on_received(received, cell * 1_000_000);
            if cell == 2_105 {
                assert_eq!(p.span(), None, "not closed before the 1,048,576th byte");
            }
        }
        assert_eq!(p.span(), Some((1_053_000_000, 2_106_000_000)));
        let mbit = p.mbit_s().unwrap();
        assert!((mbit - 4.194_304 / 1.053).abs() < 1e-9, "{mbit}");
        // Both bytes in one arrival: a span of no time has no throughput.
        let mut at_once = ThroughputProbe::default();
        at_once.on_received(MIB, 5);
        assert_eq!((at_once.span(), at_once.mbit_s()), (Some((5, 5)), None));
        // A download smaller than 1 MiB never closes it.
        let mut small = ThroughputProbe::default();
        small.on_received(51_200, 5);
        small.on_received(1_000_000, 6);
        assert_eq!((small.span(), small.mbit_s()), (None, None));
    }

    #[test]
    fn perf_timeout_scales_between_and_beyond_reference_sizes() {
        assert_eq!(perf_timeout(1), secs(15));
        assert_eq!(perf_timeout(50 * KIB), secs(15));
        // Halfway between 1 MiB and 5 MiB: halfway between 60 s and 120 s.
        assert_eq!(perf_timeout(3 * MIB), secs(90));
        assert_eq!(perf_timeout(10 * MIB), secs(240));
        let mut last = 0;
        for size in (0..=12 * MIB).step_by(64 * KIB as usize) {
            let t = perf_timeout(size);
            assert!(t >= last, "timeout must not shrink with size");
            last = t;
        }
    }

    #[test]
    fn validate_rejects_bad_parameters() {
        let zero_web = Workload::Web {
            size_bytes: 0,
            pause_min: secs(1),
            pause_max: secs(2),
            timeout: secs(60),
        };
        assert!(zero_web.validate().is_err());
        let inverted = Workload::Web {
            size_bytes: 1,
            pause_min: secs(3),
            pause_max: secs(2),
            timeout: secs(60),
        };
        assert!(inverted.validate().is_err());
        assert!(Workload::Bulk {
            size_bytes: 0,
            timeout: secs(1)
        }
        .validate()
        .is_err());
        assert!(Workload::Perf {
            size_bytes: 0,
            interval: secs(60),
            timeout: secs(1)
        }
        .validate()
        .is_err());
        assert!(Workload::Perf {
            size_bytes: 1,
            interval: 0,
            timeout: secs(1)
        }
        .validate()
        .is_err());
        assert!(Workload::Bulk {
            size_bytes: 1,
            timeout: 0
        }
        .validate()
        .is_err());
        let equal = Workload::Web {
            size_bytes: 1,
            pause_min: secs(2),
            pause_max: secs(2),
            timeout: secs(60),
        };
        assert!(equal.validate().is_ok());
    }

    #[test]
    fn web_pauses_are_uniform_in_range() {
        let mut rng = rng();
        let start = secs(5);
        let mut s = ClientSchedule::new(Workload::web_default(), start);
        assert_eq!(s.poll(0, &mut rng), Action::WaitUntil(start));
        let mut now = start;
        let (mut sum, mut min, mut max) = (0.0, f64::MAX, 0.0f64);
        let draws = 10_000;
        for _ in 0..draws {
            assert_eq!(
                s.poll(now, &mut rng),
                Action::Start {
                    size_bytes: 320 * KIB,
                    timeout: secs(60),
                    isolation: 0
                }
            );
            assert_eq!(s.poll(now, &mut rng), Action::Idle);
            // Each download takes 2 s; the pause counts from its end.
            let finished = now + secs(2);
            s.on_finished(finished);
            let Action::WaitUntil(next) = s.poll(finished, &mut rng) else {
                panic!("web client must think after a download");
            };
            let pause = as_secs_f64(next - finished);
            sum += pause;
            min = min.min(pause);
            max = max.max(pause);
            now = next;
        }
        let mean = sum / draws as f64;
        assert!((mean - 30.5).abs() < 30.5 * 0.03, "mean pause {mean}");
        assert!((1.0..1.5).contains(&min), "min pause {min}");
        assert!(max <= 60.0 && max > 59.5, "max pause {max}");
        assert_eq!(s.started(), draws);
    }

    #[test]
    fn web_late_poll_starts_immediately() {
        let mut rng = rng();
        let w = Workload::Web {
            size_bytes: 10,
            pause_min: secs(1),
            pause_max: secs(1),
            timeout: secs(60),
        };
        let mut s = ClientSchedule::new(w, 0);
        assert!(matches!(s.poll(0, &mut rng), Action::Start { .. }));
        s.on_finished(secs(3));
        // The pause counts from the finish time, so polling after it has elapsed starts at once.
        assert!(matches!(s.poll(secs(10), &mut rng), Action::Start { .. }));
    }

    #[test]
    fn uploads_run_back_to_back() {
        let mut rng = rng();
        let w = Workload::Upload {
            size_bytes: 3 * MIB,
            timeout: secs(300),
        };
        assert!(w.is_upload() && !Workload::bulk_default().is_upload());
        w.validate().unwrap();
        let mut s = ClientSchedule::new(w, 0);
        let mut now = 0;
        for _ in 0..10 {
            assert_eq!(
                s.poll(now, &mut rng),
                Action::Start {
                    size_bytes: 3 * MIB,
                    timeout: secs(300),
                    isolation: 0
                }
            );
            assert_eq!(s.poll(now, &mut rng), Action::Idle);
            now += secs(2);
            s.on_finished(now);
        }
        assert_eq!(s.started(), 10);
    }

    #[test]
    fn bulk_runs_back_to_back() {
        let mut rng = rng();
        let mut s = ClientSchedule::new(Workload::bulk_default(), 0);
        let mut now = 0;
        for i in 0..100u64 {
            assert_eq!(
                s.poll(now, &mut rng),
                Action::Start {
                    size_bytes: 5 * MIB,
                    timeout: secs(120),
                    isolation: 0
                }
            );
            assert_eq!(s.poll(now, &mut rng), Action::Idle);
            assert_eq!(s.in_flight(), 1);
            now += secs(1) + i * 1_000;
            s.on_finished(now);
            assert_eq!(s.in_flight(), 0);
        }
        assert_eq!(s.started(), 100);
    }

    #[test]
    fn perf_follows_fixed_grid_regardless_of_completion() {
        let mut rng = rng();
        let start = secs(7);
        let mut s = ClientSchedule::new(Workload::perf_default(MIB), start);
        assert_eq!(s.poll(0, &mut rng), Action::WaitUntil(start));
        let mut now = start;
        for k in 0..50u64 {
            assert_eq!(now, start + k * 60 * NANOS_PER_SEC);
            assert_eq!(
                s.poll(now, &mut rng),
                Action::Start {
                    size_bytes: MIB,
                    timeout: secs(60),
                    isolation: 0
                }
            );
            let Action::WaitUntil(next) = s.poll(now, &mut rng) else {
                panic!("perf must wait for the next grid point");
            };
            // Only every third download finishes, and late: the grid does not care.
            if k % 3 == 0 {
                s.on_finished(now + secs(45));
                assert_eq!(s.poll(now + secs(45), &mut rng), Action::WaitUntil(next));
            }
            now = next;
        }
        assert_eq!(s.started(), 50);
        assert_eq!(s.in_flight(), 50 - 17);
    }

    #[test]
    fn perf_late_poll_skips_missed_slots_without_burst() {
        let mut rng = rng();
        let mut s = ClientSchedule::new(Workload::perf_default(50 * KIB), 0);
        assert!(matches!(s.poll(0, &mut rng), Action::Start { .. }));
        assert!(matches!(s.poll(secs(150), &mut rng), Action::Start { .. }));
        assert_eq!(s.poll(secs(150), &mut rng), Action::WaitUntil(secs(180)));
    }

    /// Follows the poll protocol at one instant: polls until the schedule says to wait or idle,
    /// returning the downloads started. A schedule that kept answering `Start` would spin.
    fn starts_at(s: &mut ClientSchedule, now: SimTime, rng: &mut ChaCha8Rng) -> (u64, Action) {
        let mut started = 0;
        loop {
            match s.poll(now, rng) {
                Action::Start { .. } => {
                    started += 1;
                    assert!(started < 1000, "the schedule keeps starting at {now}");
                }
                other => return (started, other),
            }
        }
    }

    #[test]
    fn a_poll_at_one_instant_starts_at_most_one_download() {
        let mut rng = rng();
        // Including parameters `validate` rejects: the schedule must still not spin or panic.
        let workloads = [
            Workload::Web {
                size_bytes: 1,
                pause_min: 0,
                pause_max: 0,
                timeout: 1,
            },
            Workload::Web {
                size_bytes: 1,
                pause_min: secs(3),
                pause_max: secs(2),
                timeout: 1,
            },
            Workload::Bulk {
                size_bytes: 1,
                timeout: 1,
            },
            Workload::Perf {
                size_bytes: 1,
                interval: 0,
                timeout: 1,
            },
            Workload::Perf {
                size_bytes: 1,
                interval: u64::MAX,
                timeout: 1,
            },
        ];
        for w in workloads {
            let mut s = ClientSchedule::new(w.clone(), 0);
            let mut now = 0;
            for _ in 0..100 {
                let (started, next) = starts_at(&mut s, now, &mut rng);
                assert!(started <= 1, "{w:?}: {started} downloads at {now}");
                let next = match next {
                    Action::WaitUntil(t) => {
                        assert!(t > now, "{w:?}: asked to wait until {t} at {now}");
                        t
                    }
                    _ => now + 1,
                };
                // Downloads end as soon as they can.
                for _ in 0..started {
                    s.on_finished(now + 1);
                }
                if next == u64::MAX {
                    break;
                }
                now = next;
            }
        }
    }

    #[test]
    fn identical_seeds_give_identical_schedules() {
        let run = || {
            let mut rng = rng();
            let mut s = ClientSchedule::new(Workload::web_default(), 0);
            let mut times = Vec::new();
            let mut now = 0;
            for _ in 0..100 {
                s.poll(now, &mut rng);
                s.on_finished(now + 1);
                if let Action::WaitUntil(t) = s.poll(now + 1, &mut rng) {
                    now = t;
                }
                times.push(now);
            }
            times
        };
        assert_eq!(run(), run());
    }

    #[test]
    fn workload_round_trips_through_serde() {
        for w in [
            Workload::web_default(),
            Workload::bulk_default(),
            Workload::perf_default(50 * KIB),
        ] {
            let json = serde_json::to_string(&w).unwrap();
            assert_eq!(serde_json::from_str::<Workload>(&json).unwrap(), w);
        }
    }
}
