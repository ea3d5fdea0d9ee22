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

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TorParams {
    // --- scheduling ---
    pub scheduler: SchedulerKind,
    /// KIST run interval (code 10 ms; live consensus 3 ms).
    pub kist_run_interval_ms: u64,
    /// KIST socket buffer size factor.
    pub kist_sock_buf_size_factor: f64,
    /// EWMA half-life of a circuit's cell count (`CircuitPriorityHalflife`).
    pub circuit_priority_halflife_s: f64,
    /// Granularity of the EWMA decay (Tor ticks every 10 s).
    pub ewma_tick_s: f64,
    /// Channel output buffer watermarks (bytes): stop filling above high, resume below low.
    pub outbuf_high_bytes: u64,
    pub outbuf_low_bytes: u64,
    /// A circuit whose queue exceeds this many cells is closed (live 1250, code 2500).
    pub max_circuit_queue_cells: u32,
    /// An edge stops reading from its streams while its circuit has this many cells queued
    /// (tor's CELL_QUEUE_HIGHWATER_SIZE) and resumes when the queue is down to the low mark.
    pub circuit_queue_high_cells: u32,
    pub circuit_queue_low_cells: u32,

    // --- flow and congestion control ---
    pub flow_control: FlowControl,
    pub circuit_window: u32,
    pub circuit_sendme_increment: u32,
    pub stream_window: u32,
    pub stream_sendme_increment: u32,
    /// Cells per SENDME (and RTT sample) under congestion control.
    pub cc_sendme_inc: u32,
    pub cc_cwnd_init: u32,
    pub cc_cwnd_min: u32,
    pub cc_cwnd_max: u32,
    pub cc_cwnd_inc: u32,
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
    pub cc_cwnd_full_gap: u32,
    pub cc_cwnd_full_minpct: u32,
    pub vegas_alpha: u32,
    pub vegas_beta: u32,
    pub vegas_gamma: u32,
    pub vegas_delta: u32,
    /// Vegas thresholds for onion-service circuits (live 186 / 372 / 248 / 434; code defaults
    /// 186 / 434 / 310 / 558).
    pub vegas_alpha_onion: u32,
    pub vegas_beta_onion: u32,
    pub vegas_gamma_onion: u32,
    pub vegas_delta_onion: u32,
    /// Edge output buffer size (cells) above which a stream sends XOFF.
    pub xoff_threshold_cells: u32,

    // --- relay limits ---
    /// Token bucket refill interval (`TokenBucketRefillInterval`).
    pub token_bucket_refill_ms: u64,
    /// The number of sockets a relay may have open (Tor refuses connections beyond it). Tor's
    /// effective limit is the process file limit; Debian's tor service raises it to 65536.
    pub conn_limit: u32,
    /// Bytes Tor counts per cell for TLS framing (its own estimate).
    pub tls_overhead_per_cell: u32,

    // --- clients ---
    pub max_circuit_dirtiness_s: u64,
    pub new_circuit_period_s: u64,
    pub max_client_circuits_pending: u32,
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
            token_bucket_refill_ms: 100,
            conn_limit: 65536,
            tls_overhead_per_cell: 29,
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

impl TorParams {
    /// Checks values that would make the model meaningless; returns (field, expectation).
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        let positive = [
            ("kist_run_interval_ms", self.kist_run_interval_ms),
            ("token_bucket_refill_ms", self.token_bucket_refill_ms),
            ("circuit_window", self.circuit_window as u64),
            (
                "circuit_sendme_increment",
                self.circuit_sendme_increment as u64,
            ),
            ("stream_window", self.stream_window as u64),
            (
                "stream_sendme_increment",
                self.stream_sendme_increment as u64,
            ),
            ("cc_sendme_inc", self.cc_sendme_inc as u64),
            ("cc_cwnd_init", self.cc_cwnd_init as u64),
            ("cc_cwnd_min", self.cc_cwnd_min as u64),
            ("cc_cwnd_inc_rate", self.cc_cwnd_inc_rate as u64),
            (
                "max_circuit_queue_cells",
                self.max_circuit_queue_cells as u64,
            ),
            ("conn_limit", self.conn_limit as u64),
            ("num_primary_guards", self.num_primary_guards as u64),
            ("max_circuit_dirtiness_s", self.max_circuit_dirtiness_s),
            ("cc_ewma_cwnd_pct", self.cc_ewma_cwnd_pct as u64),
            ("cbt_num_xm_modes", self.cbt_num_xm_modes as u64),
            ("cbt_min_timeout_ms", self.cbt_min_timeout_ms),
        ];
        for (field, v) in positive {
            if v == 0 {
                return Err((field, "a positive number".into()));
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
        if self.cc_cwnd_full_minpct > 100 || self.cc_rtt_reset_pct > 100 {
            return Err((
                "cc_cwnd_full_minpct",
                "cc_cwnd_full_minpct and cc_rtt_reset_pct at most 100".into(),
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
        for (field, q) in [
            ("cbt_quantile", self.cbt_quantile),
            ("cbt_close_quantile", self.cbt_close_quantile),
        ] {
            if !(q > 0.0 && q < 1.0) {
                return Err((field, "a fraction strictly between 0 and 1".into()));
            }
        }
        if not_positive(self.circuit_priority_halflife_s) || not_positive(self.ewma_tick_s) {
            return Err((
                "circuit_priority_halflife_s",
                "positive half-life and tick".into(),
            ));
        }
        if self.kist_sock_buf_size_factor.is_nan() || self.kist_sock_buf_size_factor < 0.0 {
            return Err(("kist_sock_buf_size_factor", "a non-negative number".into()));
        }
        if not_positive(self.cbt_initial_timeout_s) {
            return Err((
                "cbt_initial_timeout_s",
                "a positive number of seconds".into(),
            ));
        }
        Ok(())
    }
}

/// True for zero, negative and NaN values, which all make a duration or rate meaningless.
fn not_positive(v: f64) -> bool {
    v.is_nan() || v <= 0.0
}
