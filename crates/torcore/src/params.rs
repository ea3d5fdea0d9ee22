//! Tor's tunable parameters, with the values the live network uses as defaults.
//!
//! Where the live consensus overrides the code default (e.g. the KIST interval or the Vegas
//! alpha), the default here is the live value, because a simulation should reproduce today's
//! network unless told otherwise. Every value can be changed in a scenario's `tor:` section;
//! field names carry their unit.

use serde::{Deserialize, Serialize};

/// Which circuit scheduler relays run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum SchedulerKind {
    /// Kernel-informed socket transport: global across channels, write limits from TCP state.
    #[default]
    Kist,
    /// KIST without kernel facts: writes what fits in the channel's output buffer.
    KistLite,
    /// The older per-channel scheduler: flush each writable channel up to its outbuf watermark.
    Vanilla,
}

/// How relays carry circuits between each other (the "channel" design under study).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ChannelDesign {
    /// One connection per relay pair; every circuit between the pair shares it.
    #[default]
    Vanilla,
    /// Two connections per relay pair, light and heavy; a circuit whose cell rate (EWMA) rises
    /// past `torchestra_threshold` times the light connection's average moves to the heavy one.
    Torchestra,
    /// Torchestra where the client declares each circuit's class when it builds it.
    TorchestraIdeal,
    /// One connection per circuit.
    Pctcp,
    /// A set of connections per relay pair, sized by the channel's share of circuits, with a
    /// relay-wide cap of `conn_limit * imux_tau`.
    Imux,
    /// QUUX: a QUIC connection per relay pair (one UDP socket), one QUIC stream per circuit.
    /// The channel is set up over TCP with Tor's link handshake and moves to QUIC if the QUIC
    /// connection is ready when that handshake completes; otherwise it stays on TCP.
    Quic,
}

/// Which connection of an IMUX channel a cell goes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ImuxScheduler {
    /// Each circuit is pinned to one connection, assigned in turn.
    RoundRobin,
    /// Circuits and connections ranked by EWMA; a circuit at percentile p uses the connection
    /// whose percentile band holds p (quiet circuits share the least loaded connections).
    #[default]
    Ewma,
    /// The connection with the least data queued (Tor's buffer plus the kernel's).
    ShortestQueue,
}

/// End-to-end flow control of circuits and streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum FlowControl {
    /// Fixed SENDME windows (circuit 1000/100, stream 500/50).
    Sendme,
    /// Proposal 324 congestion control with Vegas (live `cc_alg=2`); streams use XON/XOFF.
    #[default]
    Vegas,
}

/// Every Tor parameter the model has, the same for all relays and clients of a run: a
/// scenario's `tor:` section. [`TorParams::RANGES`] bounds the numeric ones.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TorParams {
    // --- scheduling ---
    /// The circuit scheduler relays run.
    pub scheduler: SchedulerKind,
    /// KIST run interval (code 10 ms; live consensus 3 ms).
    pub kist_run_interval_ms: u64,
    /// KIST's extra room in a socket's buffer, in congestion windows
    /// (`KISTSockBufSizeFactor`).
    pub kist_sock_buf_size_factor: f64,
    /// EWMA half-life of a circuit's cell count (`CircuitPriorityHalflife`).
    pub circuit_priority_halflife_s: f64,
    /// Granularity of the EWMA decay (Tor ticks every 10 s).
    pub ewma_tick_s: f64,
    /// Channel output buffer high watermark, in bytes (tor's `orconn_high`): the most
    /// KISTLite writes to a channel in one scheduler run.
    pub outbuf_high_bytes: u64,
    /// Channel output buffer low watermark, in bytes (tor's `orconn_low`): range-checked
    /// against the high one, but not used by the simulation.
    pub outbuf_low_bytes: u64,
    /// A circuit whose queue exceeds this many cells is closed (live 1250, code 2500).
    pub max_circuit_queue_cells: u32,
    /// An edge stops reading from its streams while its circuit has this many cells queued
    /// (tor's CELL_QUEUE_HIGHWATER_SIZE) and resumes when the queue is down to the low mark.
    pub circuit_queue_high_cells: u32,
    /// The low mark, in cells: an edge stopped by the high mark reads from its streams again
    /// once its circuit's queue is down to this.
    pub circuit_queue_low_cells: u32,

    // --- flow and congestion control ---
    /// End-to-end flow control of circuits and streams: SENDME windows or Vegas.
    pub flow_control: FlowControl,
    /// Fixed SENDME windows: a circuit's window, in DATA cells (tor's `circwindow`).
    pub circuit_window: u32,
    /// Fixed SENDME windows: cells acknowledged by one circuit-level SENDME.
    pub circuit_sendme_increment: u32,
    /// A stream's window, in DATA cells.
    pub stream_window: u32,
    /// Cells acknowledged by one stream-level SENDME.
    pub stream_sendme_increment: u32,
    /// Cells per SENDME (and RTT sample) under congestion control.
    pub cc_sendme_inc: u32,
    /// A circuit's first congestion window, in cells.
    pub cc_cwnd_init: u32,
    /// The smallest congestion window, in cells.
    pub cc_cwnd_min: u32,
    /// The largest congestion window, in cells.
    pub cc_cwnd_max: u32,
    /// After slow start, the window's growth (or cut) per update, in cells.
    pub cc_cwnd_inc: u32,
    /// After slow start, window updates per congestion window's worth of SENDMEs.
    pub cc_cwnd_inc_rate: u32,
    /// Slow-start cap for exit circuits: the RFC 3742 threshold above which slow start grows
    /// only limitedly (consensus `cc_sscap_exit`, live 600). Not tor's `cc_ss_max`, which is
    /// `cc_ss_cwnd_max` here.
    pub cc_ss_max: u32,
    /// The same threshold for onion-service circuits (consensus `cc_sscap_onion`, live 475).
    pub cc_sscap_onion: u32,
    /// Hard slow-start ceiling: reaching it ends slow start (consensus `cc_ss_max`, 5000).
    pub cc_ss_cwnd_max: u32,
    /// Slow-start growth per SENDME, in percent of `cc_sendme_inc` (code default 100).
    pub cc_cwnd_inc_pct_ss: u32,
    /// Reset the "cwnd is full" flag once per cwnd of SENDMEs (1) rather than on every
    /// congestion-window update (0); code default 1.
    pub cc_cwnd_full_per_cwnd: bool,
    /// N of the RTT N-EWMA after slow start, as a percent of the SENDMEs between updates.
    pub cc_ewma_cwnd_pct: u32,
    /// Upper bound on that N.
    pub cc_ewma_max: u32,
    /// N of the RTT N-EWMA during slow start.
    pub cc_ewma_ss: u32,
    /// When cwnd sits at cwnd_min, min RTT is raised to this percent mix towards the EWMA RTT.
    pub cc_rtt_reset_pct: u32,
    /// The window counts as full while the cells in flight are within this many SENDMEs
    /// (of `cc_sendme_inc` cells) of it.
    pub cc_cwnd_full_gap: u32,
    /// The window stops counting as full when less than this percent of it is in flight.
    pub cc_cwnd_full_minpct: u32,
    /// Vegas on exit circuits: below this estimated queue, in cells, the window grows.
    pub vegas_alpha: u32,
    /// Vegas on exit circuits: above this estimated queue, in cells, the window shrinks.
    pub vegas_beta: u32,
    /// Vegas on exit circuits: above this estimated queue, in cells, slow start ends.
    pub vegas_gamma: u32,
    /// Vegas on exit circuits: above this estimated queue, in cells, the window is cut back
    /// to the BDP plus this (less one `cc_cwnd_inc`).
    pub vegas_delta: u32,
    /// Vegas thresholds for onion-service circuits (live 186 / 372 / 248 / 434; code defaults
    /// 186 / 434 / 310 / 558): `vegas_alpha`'s, in cells.
    pub vegas_alpha_onion: u32,
    /// `vegas_beta` for onion-service circuits, in cells.
    pub vegas_beta_onion: u32,
    /// `vegas_gamma` for onion-service circuits, in cells.
    pub vegas_gamma_onion: u32,
    /// `vegas_delta` for onion-service circuits, in cells.
    pub vegas_delta_onion: u32,
    /// Edge output buffer size (cells) above which a stream sends XOFF.
    pub xoff_threshold_cells: u32,

    // --- channels between relays ---
    /// How relays carry circuits between each other.
    pub channel: ChannelDesign,
    /// Torchestra: a light circuit whose EWMA exceeds this multiple of the light connection's
    /// average per circuit moves to the heavy connection.
    pub torchestra_threshold: f64,
    /// IMUX: which connection of a channel a cell goes on.
    pub imux_scheduler: ImuxScheduler,
    /// IMUX: the share of `conn_limit` a relay may fill with channel connections.
    pub imux_tau: f64,
    /// QUIC channels: the largest UDP payload a QUIC packet fills (header and AEAD tag
    /// included).
    pub quic_max_udp_payload: u32,
    /// QUIC channels: the initial receive window of each stream (one per circuit), in bytes.
    pub quic_stream_window: u64,
    /// QUIC channels: how far autotuning may grow a stream's receive window, in bytes (at or
    /// below the initial window, autotuning is off).
    pub quic_stream_window_max: u64,
    /// QUIC channels: the initial receive window of the whole connection, in bytes.
    pub quic_conn_window: u64,
    /// QUIC channels: how far autotuning may grow the connection's receive window, in bytes
    /// (at or below the initial window, autotuning is off).
    pub quic_conn_window_max: u64,

    // --- relay limits ---
    /// Token bucket refill interval (`TokenBucketRefillInterval`).
    pub token_bucket_refill_ms: u64,
    /// The number of sockets a relay may have open, counting OR connections in both directions
    /// and exit connections (tor refuses to connect or accept beyond it). Tor's effective limit
    /// is the process file limit: 4096 is a common default (Debian's tor service raises it to
    /// 65536).
    pub conn_limit: u32,
    /// Bytes Tor counts per cell for TLS framing (its own estimate).
    pub tls_overhead_per_cell: u32,
    /// Every new connection between Tor nodes runs the link handshake (TLS 1.3, then
    /// VERSIONS, CERTS, AUTH_CHALLENGE and NETINFO) before its first cell, as tor's do;
    /// `false` lets cells go as soon as TCP connects (the model before the handshake, for
    /// comparison).
    pub link_handshake: bool,
    /// Relays start with channels open between the pairs that the run's clients, at their
    /// circuit rate, would have used within the last `relay_channel_idle_timeout_s` (see
    /// `onionlab_tor::warm`), as the live network's relays are connected wherever a circuit
    /// passed lately; `false` starts every relay with no channel, as a fresh network does.
    pub warm_channels: bool,
    /// How long, in seconds, tor keeps an idle channel between two relays: 3/4 to 5/4 of it
    /// at random (the consensus parameter `nf_conntimeout_relays`). The model closes no idle
    /// channel; this sets how far back `warm_channels` looks.
    pub relay_channel_idle_timeout_s: u64,

    // --- clients ---
    /// Every user's tor fetches consensus diffs and microdescriptors from its directory guard
    /// on tor's client schedule, over a one-hop circuit (see `onionlab_tor::directory`);
    /// `false` leaves the directory bytes out.
    pub directory_traffic: bool,
    /// How long, in seconds, a circuit takes new streams after its first
    /// (`MaxCircuitDirtiness`).
    pub max_circuit_dirtiness_s: u64,
    /// tor's `NewCircuitPeriod`, in seconds: written into emulation's torrc, unused by the
    /// simulation, whose clients build circuits on demand.
    pub new_circuit_period_s: u64,
    /// Circuits a client may be building at once (`MaxClientCircuitsPending`).
    pub max_client_circuits_pending: u32,
    /// Length of each client's list of primary guards.
    pub num_primary_guards: u32,
    /// Circuit build timeout before enough builds have been seen to learn one.
    pub cbt_initial_timeout_s: f64,
    /// Builds needed before the timeout is learned.
    pub cbt_min_circuits_to_observe: u32,
    /// Quantile of the fitted build-time distribution used as the timeout.
    pub cbt_quantile: f64,
    /// Quantile after which a slow circuit is abandoned altogether.
    pub cbt_close_quantile: f64,
    /// Histogram modes averaged into the Pareto Xm once the history is full (`cbtnummodes`).
    pub cbt_num_xm_modes: u32,
    /// Floor on a learned timeout (`cbtmintimeout`, code default 10 ms).
    pub cbt_min_timeout_ms: u64,
    /// Clean (unused) circuits a client keeps built ahead of need.
    pub preemptive_circuits: u32,
    /// tor's `MAX_UNUSED_OPEN_CIRCUITS`: range-checked, but unused by the simulation
    /// (`preemptive_circuits` sets how many clean circuits a client keeps).
    pub max_unused_open_circuits: u32,
}

impl Default for TorParams {
    fn default() -> Self {
        Self {
            scheduler: SchedulerKind::Kist,
            kist_run_interval_ms: 3,
            kist_sock_buf_size_factor: 1.0,
            circuit_priority_halflife_s: 30.0,
            ewma_tick_s: 10.0,
            outbuf_high_bytes: 32 * 1024,
            outbuf_low_bytes: 16 * 1024,
            max_circuit_queue_cells: 1250,
            circuit_queue_high_cells: 256,
            circuit_queue_low_cells: 10,
            flow_control: FlowControl::Vegas,
            circuit_window: 1000,
            circuit_sendme_increment: 100,
            stream_window: 500,
            stream_sendme_increment: 50,
            cc_sendme_inc: 31,
            cc_cwnd_init: 124,
            cc_cwnd_min: 124,
            cc_cwnd_max: i32::MAX as u32,
            cc_cwnd_inc: 1,
            cc_cwnd_inc_rate: 31,
            cc_ss_max: 600,
            cc_sscap_onion: 475,
            cc_ss_cwnd_max: 5000,
            cc_cwnd_inc_pct_ss: 100,
            cc_cwnd_full_per_cwnd: true,
            cc_ewma_cwnd_pct: 50,
            cc_ewma_max: 10,
            cc_ewma_ss: 2,
            cc_rtt_reset_pct: 100,
            cc_cwnd_full_gap: 4,
            cc_cwnd_full_minpct: 25,
            vegas_alpha: 186,
            vegas_beta: 248,
            vegas_gamma: 186,
            vegas_delta: 310,
            vegas_alpha_onion: 186,
            vegas_beta_onion: 372,
            vegas_gamma_onion: 248,
            vegas_delta_onion: 434,
            xoff_threshold_cells: 500,
            channel: ChannelDesign::Vanilla,
            torchestra_threshold: 1.5,
            imux_scheduler: ImuxScheduler::Ewma,
            imux_tau: 0.9,
            quic_max_udp_payload: 1350,
            quic_stream_window: 256 * 1024,
            quic_stream_window_max: 6 * 1024 * 1024,
            quic_conn_window: 1024 * 1024,
            quic_conn_window_max: 24 * 1024 * 1024,
            token_bucket_refill_ms: 100,
            conn_limit: 4096,
            tls_overhead_per_cell: 29,
            link_handshake: true,
            warm_channels: false,
            relay_channel_idle_timeout_s: 3600,
            directory_traffic: true,
            max_circuit_dirtiness_s: 600,
            new_circuit_period_s: 30,
            max_client_circuits_pending: 32,
            num_primary_guards: 2,
            cbt_initial_timeout_s: 60.0,
            cbt_min_circuits_to_observe: 100,
            cbt_quantile: 0.8,
            cbt_close_quantile: 0.99,
            cbt_num_xm_modes: 10,
            cbt_min_timeout_ms: 10,
            preemptive_circuits: 2,
            max_unused_open_circuits: 12,
        }
    }
}

/// A parameter's value as the range check sees it: integers stay exact for messages.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ParamValue {
    /// An integer parameter's value.
    Whole(u64),
    /// A real-valued parameter's value.
    Real(f64),
}

impl ParamValue {
    fn as_f64(self) -> f64 {
        match self {
            ParamValue::Whole(v) => v as f64,
            ParamValue::Real(v) => v,
        }
    }
}

impl std::fmt::Display for ParamValue {
    /// Writes non-finite values the way YAML spells them and huge or tiny ones in exponent form,
    /// so that `1e308` is not echoed back as 309 digits.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            ParamValue::Whole(v) => write!(f, "{v}"),
            ParamValue::Real(v) => write!(f, "{}", format_real(v)),
        }
    }
}

/// A number for a message: YAML's spelling of non-finite values, exponent form when long.
pub fn format_real(v: f64) -> String {
    if v.is_nan() {
        ".nan".into()
    } else if v.is_infinite() {
        if v > 0.0 { ".inf" } else { "-.inf" }.into()
    } else if v != 0.0 && (v.abs() >= 1e15 || v.abs() < 1e-6) {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

/// One row of [`TorParams::RANGES`]: the values a parameter may take, and why.
#[derive(Clone, Copy, Debug)]
pub struct ParamRange {
    /// The [`TorParams`] field (its `tor:` key).
    pub field: &'static str,
    /// Smallest allowed value, inclusive, in the field's own unit.
    pub min: f64,
    /// Largest allowed value, inclusive, in the field's own unit.
    pub max: f64,
    /// Integer parameters are described as whole numbers.
    pub whole: bool,
    /// Where the bounds come from (tor's own range when it has one).
    pub why: &'static str,
    value: fn(&TorParams) -> ParamValue,
    /// Sets the parameter (rounding toward zero for integers); for tests of the bounds.
    #[cfg(test)]
    set: fn(&mut TorParams, f64),
}

impl ParamRange {
    /// The parameter's current value in `p`.
    pub fn value(&self, p: &TorParams) -> ParamValue {
        (self.value)(p)
    }

    /// What the range allows, e.g. "a whole number from 1 to 100".
    pub fn expected(&self) -> String {
        let kind = if self.whole {
            "a whole number"
        } else {
            "a number"
        };
        format!(
            "{kind} from {} to {}",
            format_real(self.min),
            format_real(self.max)
        )
    }

    fn contains(&self, v: ParamValue) -> bool {
        let v = v.as_f64();
        // Written so that NaN is outside every range.
        v >= self.min && v <= self.max
    }
}

/// tor's `INT32_MAX`, the upper bound of most of its consensus parameters.
const I32_MAX: f64 = i32::MAX as f64;
/// 30 days in seconds: tor's upper bound on `MaxCircuitDirtiness`, which keeps `time_t`
/// arithmetic safe, and the longest run a scenario may ask for.
const THIRTY_DAYS_S: f64 = 30.0 * 24.0 * 3600.0;

macro_rules! whole {
    ($field:ident, $min:expr, $max:expr, $why:expr) => {
        ParamRange {
            field: stringify!($field),
            min: $min as f64,
            max: $max as f64,
            whole: true,
            why: $why,
            value: |p| ParamValue::Whole(p.$field as u64),
            #[cfg(test)]
            set: |p, v| p.$field = v as _,
        }
    };
}

macro_rules! real {
    ($field:ident, $min:expr, $max:expr, $why:expr) => {
        ParamRange {
            field: stringify!($field),
            min: $min,
            max: $max,
            whole: false,
            why: $why,
            value: |p| ParamValue::Real(p.$field),
            #[cfg(test)]
            set: |p, v| p.$field = v,
        }
    };
}

const TOR_CC: &str = "tor's range for the consensus parameter of that name";

impl TorParams {
    /// Every numeric parameter's allowed range, in field order: tor's own range where tor has
    /// one (its torrc checks or its `networkstatus_get_param` bounds), otherwise a bound that
    /// keeps the model's arithmetic finite and its memory proportional to the network.
    pub const RANGES: &'static [ParamRange] = &[
        // --- scheduling ---
        whole!(
            kist_run_interval_ms,
            1,
            100,
            "tor's KISTSchedRunInterval is 0 to 100 ms, where 0 means \"not KIST\"; here \
             `scheduler` chooses the scheduler, so the interval is at least 1"
        ),
        real!(
            kist_sock_buf_size_factor,
            0.0,
            100.0,
            "tor requires KISTSockBufSizeFactor >= 0 (default 1); 100 congestion windows \
             of extra room are more than any socket buffer holds"
        ),
        real!(
            circuit_priority_halflife_s,
            0.001,
            I32_MAX / 1000.0,
            "tor's CircuitPriorityHalflifeMsec is 1 to 2^31-1 ms; tor's 0, \"no EWMA\", is \
             not modelled"
        ),
        real!(
            ewma_tick_s,
            0.001,
            3600.0,
            "tor ticks every 10 s; 1 ms to 1 hour"
        ),
        whole!(
            outbuf_high_bytes,
            509,
            I32_MAX,
            "tor's orconn_high: one cell payload to 2^31-1 bytes"
        ),
        whole!(
            outbuf_low_bytes,
            509,
            I32_MAX,
            "tor's orconn_low: one cell payload to 2^31-1 bytes"
        ),
        whole!(
            max_circuit_queue_cells,
            50,
            I32_MAX,
            "tor's circ_max_cell_queue_size"
        ),
        whole!(circuit_queue_high_cells, 1, 1000, "tor's cellq_high"),
        whole!(circuit_queue_low_cells, 1, 1000, "tor's cellq_low"),
        // --- flow and congestion control ---
        whole!(
            circuit_window,
            100,
            1000,
            "tor's circwindow (CIRCWINDOW_START_MIN to CIRCWINDOW_START_MAX)"
        ),
        whole!(
            circuit_sendme_increment,
            1,
            1000,
            "tor fixes it at 100; at most a circuit window"
        ),
        whole!(stream_window, 1, 500, "tor's STREAMWINDOW_START_MAX is 500"),
        whole!(
            stream_sendme_increment,
            1,
            500,
            "tor fixes it at 50; at most a stream window"
        ),
        whole!(cc_sendme_inc, 1, 255, TOR_CC),
        whole!(cc_cwnd_init, 31, 10_000, TOR_CC),
        whole!(cc_cwnd_min, 31, 1000, TOR_CC),
        whole!(cc_cwnd_max, 500, I32_MAX, TOR_CC),
        whole!(cc_cwnd_inc, 1, 1000, TOR_CC),
        whole!(cc_cwnd_inc_rate, 1, 250, TOR_CC),
        whole!(cc_ss_max, 100, I32_MAX, "tor's range for cc_sscap_exit"),
        whole!(cc_sscap_onion, 100, I32_MAX, TOR_CC),
        whole!(cc_ss_cwnd_max, 500, I32_MAX, "tor's range for cc_ss_max"),
        whole!(cc_cwnd_inc_pct_ss, 1, 500, TOR_CC),
        whole!(cc_ewma_cwnd_pct, 1, 255, TOR_CC),
        whole!(cc_ewma_max, 2, I32_MAX, TOR_CC),
        whole!(cc_ewma_ss, 2, I32_MAX, TOR_CC),
        whole!(cc_rtt_reset_pct, 0, 100, TOR_CC),
        whole!(cc_cwnd_full_gap, 0, i16::MAX, TOR_CC),
        whole!(cc_cwnd_full_minpct, 0, 100, TOR_CC),
        whole!(vegas_alpha, 0, 1000, "tor's range for cc_vegas_alpha_exit"),
        whole!(vegas_beta, 0, 1000, "tor's range for cc_vegas_beta_exit"),
        whole!(vegas_gamma, 0, 1000, "tor's range for cc_vegas_gamma_exit"),
        whole!(
            vegas_delta,
            0,
            I32_MAX,
            "tor's range for cc_vegas_delta_exit"
        ),
        whole!(vegas_alpha_onion, 0, 1000, TOR_CC),
        whole!(vegas_beta_onion, 0, 1000, TOR_CC),
        whole!(vegas_gamma_onion, 0, 1000, TOR_CC),
        whole!(vegas_delta_onion, 0, I32_MAX, TOR_CC),
        whole!(
            xoff_threshold_cells,
            1,
            10_000,
            "tor's range for cc_xoff_client and cc_xoff_exit"
        ),
        // --- channels between relays ---
        real!(
            torchestra_threshold,
            1.0,
            1000.0,
            "a multiple of the light connection's average EWMA; below 1 every circuit would \
             count as heavy"
        ),
        real!(
            imux_tau,
            0.01,
            1.0,
            "IMUX's share of ConnLimit for channel connections, in (0, 1]; 0.9 was the \
             highest safe value in the IMUX paper"
        ),
        whole!(
            quic_max_udp_payload,
            1200,
            65_527,
            "QUIC needs datagrams of at least 1200 bytes (RFC 9000 14); a UDP payload is at \
             most 65,527 bytes"
        ),
        whole!(
            quic_stream_window,
            1024,
            1u64 << 30,
            "1 KiB (a couple of cells) to 1 GiB"
        ),
        whole!(quic_stream_window_max, 1024, 1u64 << 30, "1 KiB to 1 GiB"),
        whole!(quic_conn_window, 1024, 1u64 << 32, "1 KiB to 4 GiB"),
        whole!(quic_conn_window_max, 1024, 1u64 << 32, "1 KiB to 4 GiB"),
        // --- relay limits ---
        whole!(
            token_bucket_refill_ms,
            1,
            1000,
            "tor's TokenBucketRefillInterval"
        ),
        whole!(
            conn_limit,
            1,
            1 << 20,
            "tor's ConnLimit is positive and bounded by the process's file limit, at most \
             2^20 (Linux's default fs.nr_open)"
        ),
        whole!(tls_overhead_per_cell, 0, 514, "at most one cell's own size"),
        whole!(
            relay_channel_idle_timeout_s,
            60,
            604_800,
            "tor's range for the consensus parameter nf_conntimeout_relays: 1 minute to 1 week"
        ),
        // --- clients ---
        whole!(
            max_circuit_dirtiness_s,
            10,
            THIRTY_DAYS_S,
            "tor's MaxCircuitDirtiness: 10 s to 30 days"
        ),
        whole!(
            new_circuit_period_s,
            1,
            THIRTY_DAYS_S,
            "1 s to 30 days, like MaxCircuitDirtiness"
        ),
        whole!(
            max_client_circuits_pending,
            1,
            1024,
            "tor's MaxClientCircuitsPending"
        ),
        whole!(
            num_primary_guards,
            1,
            100,
            "tor needs at least 1 (default 3); every client keeps a list this long"
        ),
        real!(
            cbt_initial_timeout_s,
            0.01,
            I32_MAX / 1000.0,
            "tor's cbtinitialtimeout: 10 ms to 2^31-1 ms"
        ),
        whole!(cbt_min_circuits_to_observe, 1, 10_000, "tor's cbtmincircs"),
        real!(
            cbt_quantile,
            0.10,
            0.99,
            "tor's cbtquantile: 10 to 99 percent"
        ),
        real!(
            cbt_close_quantile,
            0.10,
            0.99,
            "tor's cbtclosequantile: 10 to 99 percent"
        ),
        whole!(cbt_num_xm_modes, 1, 20, "tor's cbtnummodes"),
        whole!(
            cbt_min_timeout_ms,
            10,
            I32_MAX,
            "tor's cbtmintimeout: 10 ms to 2^31-1 ms"
        ),
        whole!(
            preemptive_circuits,
            0,
            14,
            "tor never keeps more than MAX_UNUSED_OPEN_CIRCUITS (14) clean circuits"
        ),
        whole!(
            max_unused_open_circuits,
            0,
            14,
            "tor's MAX_UNUSED_OPEN_CIRCUITS is 14"
        ),
    ];

    /// The row of [`TorParams::RANGES`] for `field`, if it is numeric.
    pub fn range_of(field: &str) -> Option<&'static ParamRange> {
        Self::RANGES.iter().find(|r| r.field == field)
    }

    /// Checks every value against [`TorParams::RANGES`] and the relations between parameters;
    /// returns (field, what was expected).
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        for r in Self::RANGES {
            let v = r.value(self);
            if !r.contains(v) {
                return Err((r.field, format!("{} ({}), got {v}", r.expected(), r.why)));
            }
        }
        if self.circuit_sendme_increment > self.circuit_window {
            return Err((
                "circuit_sendme_increment",
                format!("at most circuit_window ({})", self.circuit_window),
            ));
        }
        if self.stream_sendme_increment > self.stream_window {
            return Err((
                "stream_sendme_increment",
                format!("at most stream_window ({})", self.stream_window),
            ));
        }
        if self.cc_cwnd_min > self.cc_cwnd_max || self.cc_cwnd_init < self.cc_cwnd_min {
            return Err((
                "cc_cwnd_init",
                "cc_cwnd_min <= cc_cwnd_init and cc_cwnd_min <= cc_cwnd_max".into(),
            ));
        }
        if self.circuit_queue_low_cells > self.circuit_queue_high_cells {
            return Err((
                "circuit_queue_low_cells",
                "at most circuit_queue_high_cells".into(),
            ));
        }
        if self.outbuf_low_bytes > self.outbuf_high_bytes {
            return Err(("outbuf_low_bytes", "at most outbuf_high_bytes".into()));
        }
        // The EWMA scales counts by 2^(tick / half-life) within a tick; past 2^100 the f64
        // arithmetic loses every circuit's count to infinity.
        if self.ewma_tick_s > 100.0 * self.circuit_priority_halflife_s {
            return Err((
                "ewma_tick_s",
                format!(
                    "at most 100 times circuit_priority_halflife_s ({} s), got {} s",
                    format_real(self.circuit_priority_halflife_s),
                    format_real(self.ewma_tick_s)
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_error(p: &TorParams) -> Option<(&'static str, String)> {
        p.validate().err()
    }

    #[test]
    fn defaults_are_valid() {
        assert_eq!(TorParams::default().validate(), Ok(()));
    }

    #[test]
    fn reported_hostile_values_are_refused() {
        let cases: Vec<(TorParams, &str, &str)> = vec![
            (
                TorParams {
                    kist_run_interval_ms: u64::MAX,
                    ..TorParams::default()
                },
                "kist_run_interval_ms",
                "a whole number from 1 to 100",
            ),
            (
                TorParams {
                    kist_run_interval_ms: 0,
                    ..TorParams::default()
                },
                "kist_run_interval_ms",
                "got 0",
            ),
            (
                TorParams {
                    cbt_initial_timeout_s: f64::INFINITY,
                    ..TorParams::default()
                },
                "cbt_initial_timeout_s",
                "got .inf",
            ),
            (
                TorParams {
                    cbt_initial_timeout_s: f64::NAN,
                    ..TorParams::default()
                },
                "cbt_initial_timeout_s",
                "got .nan",
            ),
            (
                TorParams {
                    cbt_min_timeout_ms: u64::MAX,
                    ..TorParams::default()
                },
                "cbt_min_timeout_ms",
                "got 18446744073709551615",
            ),
            (
                TorParams {
                    num_primary_guards: u32::MAX,
                    ..TorParams::default()
                },
                "num_primary_guards",
                "from 1 to 100",
            ),
            (
                TorParams {
                    preemptive_circuits: u32::MAX,
                    ..TorParams::default()
                },
                "preemptive_circuits",
                "from 0 to 14",
            ),
            (
                TorParams {
                    max_client_circuits_pending: 0,
                    ..TorParams::default()
                },
                "max_client_circuits_pending",
                "from 1 to 1024",
            ),
            (
                TorParams {
                    kist_sock_buf_size_factor: 1e308,
                    ..TorParams::default()
                },
                "kist_sock_buf_size_factor",
                "got 1e308",
            ),
            (
                TorParams {
                    circuit_window: 0,
                    ..TorParams::default()
                },
                "circuit_window",
                "from 100 to 1000",
            ),
            (
                TorParams {
                    ewma_tick_s: 3600.0,
                    circuit_priority_halflife_s: 1.0,
                    ..TorParams::default()
                },
                "ewma_tick_s",
                "at most 100 times circuit_priority_halflife_s",
            ),
        ];
        for (p, field, needle) in cases {
            let (f, m) = field_error(&p).unwrap_or_else(|| panic!("{field} accepted"));
            assert_eq!(f, field, "{m}");
            assert!(m.contains(needle), "{field}: {m}");
        }
    }

    /// Each bound is allowed and a value just past it is refused by that row (a bound may
    /// still break a relation with another parameter's default, which is a different error).
    #[test]
    fn every_bound_is_inclusive_and_one_past_it_is_refused() {
        for r in TorParams::RANGES {
            assert!(r.min <= r.max && !r.why.is_empty(), "{}", r.field);
            let own_error = |v: f64| {
                let mut p = TorParams::default();
                (r.set)(&mut p, v);
                matches!(p.validate(), Err((f, m)) if f == r.field && m.starts_with(&r.expected()))
            };
            assert!(!own_error(r.min), "{} refuses its minimum", r.field);
            assert!(!own_error(r.max), "{} refuses its maximum", r.field);
            let (below, above) = if r.whole {
                (r.min - 1.0, r.max + 1.0)
            } else {
                (
                    r.min - r.min.abs().max(1.0) * 1e-6,
                    r.max + r.max.abs() * 1e-6,
                )
            };
            if !(r.whole && r.min == 0.0) {
                assert!(own_error(below), "{} accepts {below}", r.field);
            }
            assert!(own_error(above), "{} accepts {above}", r.field);
        }
    }

    #[test]
    fn every_row_names_a_distinct_parameter() {
        let mut names: Vec<&str> = TorParams::RANGES.iter().map(|r| r.field).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), TorParams::RANGES.len());
        assert!(TorParams::range_of("kist_run_interval_ms").is_some());
        assert!(TorParams::range_of("scheduler").is_none());
    }

    #[test]
    fn reals_are_written_readably() {
        assert_eq!(format_real(1e308), "1e308");
        assert_eq!(format_real(f64::NEG_INFINITY), "-.inf");
        assert_eq!(format_real(0.5), "0.5");
        assert_eq!(format_real(2147483.647), "2147483.647");
    }
}
