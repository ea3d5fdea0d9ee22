//! The records a run produces.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// How a download ended.
///
/// Serialized as the same short text used in `downloads.csv` (`ok`, `timeout`,
/// `error:<reason>`) so that every output format spells outcomes identically and a reader can
/// split on the first `:` without knowing the reasons in advance.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The transfer completed: every byte arrived (for an upload, the server's answer did).
    Ok,
    /// The workload's timeout passed before the transfer completed.
    Timeout,
    /// The transfer failed for the reason given (`refused by exit`, `circuit closed`, ...).
    Error(String),
}

impl Outcome {
    /// Whether the transfer completed; only these count towards times to first and last byte.
    pub fn is_ok(&self) -> bool {
        matches!(self, Outcome::Ok)
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Ok => f.write_str("ok"),
            Outcome::Timeout => f.write_str("timeout"),
            Outcome::Error(reason) => write!(f, "error:{reason}"),
        }
    }
}

/// The text read back as an outcome was none of `ok`, `timeout` or `error:<reason>`; it holds
/// that text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("not a download outcome: {0:?} (expected ok, timeout or error:<reason>)")]
pub struct ParseOutcomeError(pub String);

impl FromStr for Outcome {
    type Err = ParseOutcomeError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "ok" => Ok(Outcome::Ok),
            "timeout" => Ok(Outcome::Timeout),
            _ => match s.strip_prefix("error:") {
                Some(reason) => Ok(Outcome::Error(reason.to_string())),
                None => Err(ParseOutcomeError(s.to_string())),
            },
        }
    }
}

impl Serialize for Outcome {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Outcome {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// One client download, as the user experienced it.
///
/// `ttfb_s` and `ttlb_s` are measured from `start_s`, so they include circuit build time when
/// the download had to wait for a circuit; that is what a user waits for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DownloadRecord {
    /// Name of the client host that made the transfer.
    pub client: String,
    /// The client's group: its `clients:` entry in the scenario.
    pub group: String,
    /// Bytes requested (a download) or sent (an upload).
    pub size_bytes: u64,
    /// When the application asked for the transfer, in seconds from the start of the run.
    pub start_s: f64,
    /// Build time, in seconds, of the circuit the transfer used, which may have been built ahead
    /// of need; `None` when no circuit was used.
    pub circuit_build_s: Option<f64>,
    /// Time to first byte, seconds from `start_s`; `None` when the transfer never got that far.
    pub ttfb_s: Option<f64>,
    /// Time to last byte, seconds from `start_s`; `None` when the last byte never arrived.
    pub ttlb_s: Option<f64>,
    /// When the request left the client, from `start_s` (OnionPerf's DATAREQUEST): after the
    /// stream opened, so `ttfb_s - request_s` is one round trip over the circuit. Empty when
    /// the stream never opened, and in files written before the column existed.
    #[serde(default)]
    pub request_s: Option<f64>,
    /// Tor Metrics' throughput, Mbit/s: the bits from the 524,288th to the 1,048,576th byte
    /// received over the time between their arrivals. Empty for downloads under 1 MiB (and
    /// those that stopped before 1 MiB), uploads, and files written before the column existed.
    #[serde(default)]
    pub throughput_mbit_s: Option<f64>,
    /// How the transfer ended.
    pub outcome: Outcome,
    /// Name of the file server at the far end of the stream.
    pub server: String,
    /// The circuit's guard relay; empty when no circuit was used.
    pub guard: String,
    /// The circuit's middle relay; empty when no circuit was used.
    pub middle: String,
    /// The circuit's exit relay; empty when no circuit was used.
    pub exit: String,
    /// Started inside the bootstrap period: written to the CSV, excluded from the summary,
    /// because the network has not reached its steady state yet.
    pub bootstrap: bool,
    /// An upload: the client sent `size_bytes`; `ttfb_s` is when its first DATA cell left
    /// the client and `ttlb_s` when the server's response (sent once it had every byte)
    /// arrived, so `size_bytes / ttlb_s` is the upload's goodput. In `downloads.csv` the
    /// column `direction` (written only by runs with uploads) says `upload`.
    #[serde(default)]
    pub upload: bool,
}

/// One relay's activity during one second.
///
/// Only the byte counts are known for every mode. The rest is the model's inside view of a
/// relay; an emulated relay's tor does not report it each second, so there it is empty
/// (`None`) rather than a made-up zero.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RelaySample {
    /// The relay's name.
    pub relay: String,
    /// The simulated second that ended: 1 is the run's first.
    pub second: u64,
    /// Bytes read from the relay's channels in this second, cells and TLS overhead together.
    pub bytes_read: u64,
    /// Bytes written to the relay's channels in this second, cells and TLS overhead together.
    pub bytes_written: u64,
    /// Cells received on the relay's channels in this second.
    pub cells_in: Option<u64>,
    /// Cells sent on the relay's channels in this second.
    pub cells_out: Option<u64>,
    /// Cells waiting in the relay's circuit queues at the end of the second.
    pub queued_cells: Option<u64>,
    /// Channels plus exit connections open at the end of the second.
    pub open_sockets: Option<u32>,
    /// Bytes written into the relay's sockets that the kernel has not sent yet, summed over
    /// its channels at the end of the second: where KIST keeps queues small.
    pub socket_queued_bytes: Option<u64>,
    /// Circuits the relay closed in this second because their cell queue exceeded the cap.
    #[serde(default)]
    pub circuits_killed: Option<u64>,
    /// Connections the relay refused or could not open in this second because of ConnLimit.
    #[serde(default)]
    pub conn_limit_refusals: Option<u64>,
    /// Where the relay's CPU time went in this second; `None` for runs without a CPU model
    /// (and emulations), whose relays.csv has no CPU columns.
    #[serde(default)]
    pub cpu: Option<CpuShare>,
}

/// A relay's modelled CPU during one second, as fractions of that second (core-seconds per
/// second), so relays on machines of different speeds and seconds of any length compare.
///
/// The main thread is split by what it spent its time on, because a relay whose main thread
/// is saturated forwards no more cells however many cores it has; the worker threads only
/// decrypt onion skins, so they are one number. Written to relays.csv with six decimals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuShare {
    /// The main thread's busy fraction: `crypto + kernel + tls + other`, at most about 1. A
    /// main thread slowed by other relays sharing its machine's cores takes longer for the same
    /// work, so it shows busier.
    pub busy: f64,
    /// Relay cell crypto: the AES-CTR and digest work of moving cells along circuits.
    pub crypto: f64,
    /// System calls and the kernel's packet work (sending, receiving, ACKs) for the relay's
    /// sockets; a user-space stack's packet work where the relay bypasses the kernel.
    pub kernel: f64,
    /// TLS record encryption and decryption on the relay's channels.
    pub tls: f64,
    /// Everything else on the main thread: tor's bookkeeping (scheduling, circuit and
    /// connection handling).
    pub other: f64,
    /// Busy time of the onion-skin worker threads, summed over them: more than 1 when several
    /// workers were busy at once.
    pub workers: f64,
    /// Onion skins (circuit extensions) handed to the workers in this second.
    pub onion_skins: u64,
}

/// One circuit a client tried to build.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CircuitRecord {
    /// Name of the client host that launched the circuit.
    pub client: String,
    /// The client's own number for the circuit, in launch order.
    pub circuit: u64,
    /// `exit` for the general-purpose circuits the model builds; an emulation also writes tor's
    /// own purpose, lower-cased, for other circuits.
    pub purpose: String,
    /// The path's guard relay.
    pub guard: String,
    /// The path's middle relay.
    pub middle: String,
    /// The path's exit relay.
    pub exit: String,
    /// When the circuit was launched, in seconds from the start of the run.
    pub start_s: f64,
    /// Seconds the circuit took to build; `None` if it never was.
    pub build_s: Option<f64>,
    /// `built`, `timeout`, `destroyed`, `refused`, ...: free text so the Tor model can add
    /// reasons without a change here.
    pub outcome: String,
    /// Streams the circuit carried.
    pub streams: u32,
    /// When the circuit was closed, in seconds from the start of the run; `None` if it was
    /// still open at the end.
    pub closed_s: Option<f64>,
}

/// Load of one engine worker thread, to spot imbalance between partitions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkerRecord {
    /// Hosts the worker owns (its partition of the network).
    pub hosts: usize,
    /// Events the worker handled.
    pub events: u64,
    /// Wall-clock seconds the worker spent running hosts.
    pub busy_s: f64,
    /// Wall-clock seconds the worker spent waiting at the round barrier for the others.
    pub blocked_s: f64,
    /// Host rounds this worker ran for other workers (work stealing).
    #[serde(default)]
    pub stolen: u64,
    /// Runs of hosts on this worker: a host run counts one however many rounds it covers
    /// (hosts that hear from nothing nearby run several rounds at a time).
    #[serde(default)]
    pub runs: u64,
}

/// Everything about a run except its measurements, written as `run.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    /// The scenario's `name`.
    pub scenario_name: String,
    /// The scenario as run, after defaults and overrides, so a run can be reproduced from its
    /// output directory alone.
    pub scenario: serde_json::Value,
    /// The seed the run used; with `scenario`, all it takes to run it again.
    pub seed: u64,
    /// onionlab's version (the crate version of the binary that ran).
    pub version: String,
    /// The git commit the binary was built from (`-modified` when the tree differed from it,
    /// `unknown` when built outside git). Defaulted so that older run.json files load.
    #[serde(default)]
    pub commit: String,
    /// Engine worker threads (0 for an emulation).
    pub threads: usize,
    /// Simulated seconds reached.
    pub sim_seconds: f64,
    /// The bootstrap period, in seconds from the start of the run: transfers started within it
    /// are left out of the summary, the report and comparisons.
    pub bootstrap_seconds: f64,
    /// Wall-clock seconds the run took (so far, in a run.json written while it runs).
    pub wall_seconds: f64,
    /// Simulated seconds per wall-clock second.
    pub speed: f64,
    /// Events the engine handled.
    pub events: u64,
    /// Synchronisation rounds the engine ran.
    pub rounds: u64,
    /// Events per wall-clock second.
    pub events_per_sec: f64,
    /// The process's peak resident memory (Linux `VmHWM`; 0 where unknown).
    pub peak_rss_bytes: u64,
    /// One record per engine worker thread.
    pub workers: Vec<WorkerRecord>,
    /// Hosts by span, the rounds one run of theirs covers (1, 2, 4, 8): a host that nothing
    /// reaches within `k` lookaheads runs up to `k` rounds at a time. Empty for emulations.
    #[serde(default)]
    pub spans: Vec<usize>,
    /// False when the run stopped before its configured end; see `interrupted_reason`.
    pub complete: bool,
    /// `"simulation"`; a field rather than an assumption so other modes can share the format.
    pub mode: String,
    /// Why the run did not complete; `None` when it did.
    pub interrupted_reason: Option<String>,
    /// `(wall seconds, simulated seconds)` samples taken by the CLI while the run progressed,
    /// for the diagnostics plot. Defaulted so that run.json files from before it existed load.
    #[serde(default)]
    pub progress: Vec<(f64, f64)>,
    /// For `mode: emulation`: the tor version, set-up time and the switch's packet counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub emulation: Option<serde_json::Value>,
    /// Relays the run's author wants plotted over time in the report (attack victims and the
    /// scenario's `report.relays`), in the order given. Left out of run.json when empty, so the
    /// run.json of every run that names none stays as it was, and defaulted so that older
    /// run.json files load.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plot_relays: Vec<String>,
    /// How the relays carried their channels (simulations; left out of older run.json files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<TransportRecord>,
    /// The users' directory fetches (simulations with directory traffic; left out otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub directory: Option<DirectoryRecord>,
    /// The CPU model the relays ran on (simulations with one; left out otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuRecord>,
    /// What the simulated network held every ten simulated seconds (simulations; left out of
    /// emulations and of older run.json files): how memory grows with the run, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub state: Vec<StateSample>,
    /// The run's managed processes (real programs in simulated time), in host order; left out
    /// when it has none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub processes: Vec<ProcessRecord>,
}

/// What became of one managed process (`run.json`'s `processes`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessRecord {
    /// Its host's name.
    pub host: String,
    /// The program, as the scenario named it.
    pub program: String,
    /// When it started, in simulated seconds; `null` if the run ended before its start time.
    pub started_s: Option<f64>,
    /// When it ended, in simulated seconds; `null` if it was still running at the end of the
    /// run (onionlab then killed it).
    pub ended_s: Option<f64>,
    /// The status it exited with, if it exited.
    pub exit_code: Option<i32>,
    /// The signal that ended it, if one did (a crash, or onionlab's kill after a stall).
    pub signal: Option<i32>,
    /// Why it failed, in a sentence (it could not start, crashed, or stalled); `null` for a
    /// process that exited by itself or was still running.
    pub failure: Option<String>,
    /// System calls the simulated kernel served (the time and the process's ids, which the
    /// shim answers itself, and the calls it runs natively are not counted).
    pub system_calls: u64,
    /// Calls answered `ENOSYS` because onionlab does not implement them, by name.
    pub unsupported_calls: std::collections::BTreeMap<String, u64>,
}

/// The live state of a simulated network at one moment, counted over every host. The counts
/// are the same for any thread count; the wall time and resident memory are this run's.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StateSample {
    /// Simulated seconds from the start of the run.
    pub sim_s: f64,
    /// Wall-clock seconds since the run started.
    pub wall_s: f64,
    /// Resident memory of the process then (Linux `VmRSS`; 0 where unavailable).
    pub rss_bytes: u64,
    /// Events the engine had handled since the run began (the same for any thread count):
    /// with `wall_s`, the cost of each stretch of a long run in events per simulated second
    /// and per wall second, even if the run is killed before its end.
    #[serde(default)]
    pub events: u64,
    /// Events waiting in the engine: timers, packets in flight, messages between hosts.
    pub pending_events: u64,
    /// Channels clients hold to their guards.
    pub client_channels: u64,
    /// Channel ends at relays whose peer is a relay (each relay-to-relay channel counts at
    /// both of its ends).
    pub relay_channels: u64,
    /// Channel ends at relays whose peer is a client (or any host that is not a relay).
    pub relay_client_channels: u64,
    /// Circuits clients hold, building or open.
    pub client_circuits: u64,
    /// Circuit hops relays hold (a three-hop circuit counts three times).
    pub relay_circuits: u64,
    /// Client streams (downloads and uploads) started and not yet finished.
    pub streams: u64,
    /// Streams exits hold to servers.
    pub exit_streams: u64,
    /// Open sockets in every host's network stack.
    pub sockets: u64,
    /// Socket slots allocated in every stack, open or free for reuse.
    pub socket_slots: u64,
    /// Cells waiting in relays' circuit queues.
    pub queued_cells: u64,
}

/// The relay CPU model of a run, with the unit costs it actually used, so that a result can
/// be traced to its calibration even after the calibration file has changed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuRecord {
    /// `cpu.profile`: software_ctr, native_ctr, offload or kernel_bypass.
    pub profile: String,
    /// Where the unit costs came from: the calibration file and the machine it measured.
    pub calibration: String,
    /// Each unit cost in nanoseconds, the scenario's own values applied.
    pub costs_ns: std::collections::BTreeMap<String, f64>,
    /// Machines the relays ran on.
    pub machines: u64,
    /// Cores of those machines together.
    pub cores: u64,
    /// `cpu.share_window`, in milliseconds.
    pub share_window_ms: f64,
}

/// What the clients' users fetched from their directory guards over a simulated run: consensus
/// diffs and microdescriptors on tor's client schedule (`onionlab_tor::directory`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DirectoryRecord {
    /// Users over all client hosts.
    pub users: u64,
    /// Fetches completed (a consensus diff and the microdescriptors it called for).
    pub fetches: u64,
    /// Requests that failed (each fetch is then tried again a minute later).
    pub failures: u64,
    /// Response bytes the users received, headers included.
    pub bytes: u64,
}

/// How the relays of a simulated run carried their channels, from their counters at its end:
/// for the `quic` design how many channels moved to QUIC and how many stayed on TCP, and for
/// every design the bytes the relays put on the wire against the cell bytes they sent, so the
/// transports' overheads compare for the same payload.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TransportRecord {
    /// `tor.channel`.
    pub channel: String,
    /// Channels between relays opened as the run started (`tor.warm_channels`; absent, zero,
    /// in results written before warm starts).
    #[serde(default)]
    pub warm_channels: u64,
    /// Channels relays opened that moved to QUIC.
    pub quic_channels: u64,
    /// Channels relays opened that stayed on TCP because their QUIC connection was not ready
    /// when the TCP link handshake completed.
    pub tcp_fallbacks: u64,
    /// Cells relays wrote, counted at 514 bytes each (the payload every design carries).
    pub relay_cell_bytes: u64,
    /// IP bytes relays sent (headers, TLS or QUIC framing, retransmissions, ACKs, handshakes):
    /// over all their traffic, including exits' requests to servers.
    pub relay_wire_bytes: u64,
    /// UDP payload bytes the relays' QUIC connections sent.
    pub quic_udp_bytes: u64,
    /// Stream bytes the relays' QUIC connections sent for the first time.
    pub quic_stream_bytes: u64,
    /// Stream bytes the relays' QUIC connections sent again after a loss.
    pub quic_stream_bytes_retransmitted: u64,
    /// Packets the relays' QUIC connections declared lost.
    pub quic_packets_lost: u64,
    /// Probe timeouts on the relays' QUIC connections.
    pub quic_ptos: u64,
    /// IP packets the relays sent, TCP segments and UDP datagrams alike (each one of an
    /// offloaded batch counts). With the retransmission, timeout and loss counts below, it
    /// shows how much of the relays' traffic went to loss recovery; all of them are absent
    /// (zero) in results written before they were counted.
    #[serde(default)]
    pub relay_packets_sent: u64,
    /// The events those packets left the relays in: an offloaded batch of segments or
    /// datagrams counts once. Against `relay_packets_sent`, how well offload
    /// batched the relays' traffic (absent, zero, in results written before it was counted).
    #[serde(default)]
    pub relay_batches_sent: u64,
    /// Segments the relays' TCP retransmitted.
    #[serde(default)]
    pub relay_tcp_retransmits: u64,
    /// Retransmission timeouts on the relays' TCP connections.
    #[serde(default)]
    pub relay_tcp_timeouts: u64,
    /// The relays' packets, sent or received, lost on network paths.
    #[serde(default)]
    pub relay_path_losses: u64,
    /// The relays' packets, sent or received, dropped by full link queues.
    #[serde(default)]
    pub relay_queue_drops: u64,
}

impl TransportRecord {
    /// Wire bytes per cell byte, less one: what the transport adds to the payload.
    pub fn overhead(&self) -> Option<f64> {
        (self.relay_cell_bytes > 0)
            .then(|| self.relay_wire_bytes as f64 / self.relay_cell_bytes as f64 - 1.0)
    }
}
