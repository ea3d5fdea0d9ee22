//! What the Tor hosts record while they run, in simulation units (host ids, nanoseconds).
//! The command line turns these into the output files.

use onionlab_engine::time::{SimDuration, SimTime};
use onionlab_engine::HostId;
use onionlab_traffic::ThroughputProbe;

/// One second of a relay's activity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RelaySample {
    /// The second that just ended (1 = the first second of the run).
    pub second: u64,
    /// Bytes read from the relay's channel connections in this second, all they carry
    /// included (TLS overhead, link handshakes).
    pub bytes_read: u64,
    /// Bytes of cells the relay's scheduler wrote to its channels in this second, TLS
    /// overhead included.
    pub bytes_written: u64,
    /// Cells received on the relay's channels in this second.
    pub cells_in: u64,
    /// Cells the relay's scheduler sent on its channels in this second.
    pub cells_out: u64,
    /// Cells waiting in circuit queues at the end of the second.
    pub queued_cells: u64,
    /// Sockets the relay holds open at the end of the second: its channels' connections
    /// (TCP, or QUIC connections) and its exit connections to file servers.
    pub open_sockets: u32,
    /// Bytes in the relay's channel sockets not yet sent by the kernel.
    pub socket_queued_bytes: u64,
    /// Circuits closed in this second because their queue exceeded the cap.
    pub circuits_killed: u64,
    /// Connections refused or not opened in this second because of ConnLimit.
    pub conn_limit_refusals: u64,
    /// What the relay's CPU did in this second (with a CPU model).
    pub cpu: Option<crate::cpu::CpuSecond>,
}

/// How a client's download or upload ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DownloadOutcome {
    /// Every byte arrived (for an upload: the server's response).
    Ok,
    /// The workload's timeout passed before it finished.
    Timeout,
    /// It failed for this reason (such as `"circuit closed"` or `"no path"`).
    Error(&'static str),
}

/// One download of a client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DownloadLog {
    /// Bytes requested (a download) or sent (an upload).
    pub size: u64,
    /// The file server's host.
    pub server: HostId,
    /// When the application asked for the transfer (simulated time, nanoseconds).
    pub start: SimTime,
    /// Build time of the circuit the download used.
    pub circuit_build: Option<SimDuration>,
    /// When the request left the client, after the stream opened (OnionPerf's DATAREQUEST):
    /// `first_byte - request` is one round trip over the circuit and the server's answer.
    pub request: Option<SimTime>,
    /// When the first byte of the response arrived (for an upload, see `upload`); `None` if
    /// none did.
    pub first_byte: Option<SimTime>,
    /// When its 524,288th and 1,048,576th bytes arrived, for Tor Metrics' throughput; no
    /// span for downloads under 1 MiB and uploads.
    pub throughput: ThroughputProbe,
    /// When the transfer completed; `None` unless its outcome is [`DownloadOutcome::Ok`].
    pub last_byte: Option<SimTime>,
    /// How the transfer ended.
    pub outcome: DownloadOutcome,
    /// Consensus indices of guard, middle and exit, if a circuit was used.
    pub path: Option<[usize; 3]>,
    /// The client's number for the circuit used ([`CircuitLog::id`]), if one was.
    pub circuit: Option<u64>,
    /// An upload: `size` bytes sent; `first_byte` is when its first DATA cell (the request)
    /// left the client, `last_byte` when the server's response arrived.
    pub upload: bool,
}

/// How a client's circuit ended, or stood at the end of the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CircuitOutcome {
    /// Built and later closed or still open at the end.
    Built,
    /// Not built within the circuit build timeout.
    Timeout,
    /// Torn down (DESTROY) while being built.
    Destroyed,
    /// No path could be chosen or the channel failed.
    Failed,
}

/// One circuit of a client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CircuitLog {
    /// The client's own number for the circuit (in launch order).
    pub id: u64,
    /// Consensus indices of its guard, middle and exit.
    pub path: [usize; 3],
    /// When the client launched it.
    pub start: SimTime,
    /// How long it took to build (nanoseconds); `None` if it never was.
    pub build: Option<SimDuration>,
    /// How it ended.
    pub outcome: CircuitOutcome,
    /// Streams the client opened on it.
    pub streams: u32,
    /// When it was closed; `None` if it was still open at the end of the run.
    pub closed: Option<SimTime>,
}

/// What a network's hosts hold at one moment: the objects a long run's memory is made of.
/// Counted on demand (between legs of a run, never per event), so that what grows can be
/// named rather than guessed from the resident size.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Census {
    /// Channels clients hold to their guards.
    pub client_channels: u64,
    /// Channel ends at relays whose peer is a relay.
    pub relay_channels: u64,
    /// Channel ends at relays whose peer is not a relay (clients, attackers).
    pub relay_client_channels: u64,
    /// Circuits clients hold, building or open.
    pub client_circuits: u64,
    /// Circuit hops relays hold.
    pub relay_circuits: u64,
    /// Client streams started and not finished.
    pub streams: u64,
    /// Streams exits hold to servers.
    pub exit_streams: u64,
    /// Open sockets, over every host's stack.
    pub sockets: u64,
    /// Socket slots allocated, open or free for reuse.
    pub socket_slots: u64,
    /// Cells in relays' circuit queues.
    pub queued_cells: u64,
}
