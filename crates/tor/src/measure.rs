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
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub cells_in: u64,
    pub cells_out: u64,
    /// Cells waiting in circuit queues at the end of the second.
    pub queued_cells: u64,
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

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DownloadOutcome {
    Ok,
    Timeout,
    Error(&'static str),
}

/// One download of a client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DownloadLog {
    pub size: u64,
    pub server: HostId,
    pub start: SimTime,
    /// Build time of the circuit the download used.
    pub circuit_build: Option<SimDuration>,
    /// When the request left the client, after the stream opened (OnionPerf's DATAREQUEST):
    /// `first_byte - request` is one round trip over the circuit and the server's answer.
    pub request: Option<SimTime>,
    pub first_byte: Option<SimTime>,
    /// When its 524,288th and 1,048,576th bytes arrived, for Tor Metrics' throughput; no
    /// span for downloads under 1 MiB and uploads.
    pub throughput: ThroughputProbe,
    pub last_byte: Option<SimTime>,
    pub outcome: DownloadOutcome,
    /// Consensus indices of guard, middle and exit, if a circuit was used.
    pub path: Option<[usize; 3]>,
    pub circuit: Option<u64>,
    /// An upload: `size` bytes sent; `first_byte` is when its first DATA cell (the request)
    /// left the client, `last_byte` when the server's response arrived.
    pub upload: bool,
}

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
    pub path: [usize; 3],
    pub start: SimTime,
    pub build: Option<SimDuration>,
    pub outcome: CircuitOutcome,
    pub streams: u32,
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
