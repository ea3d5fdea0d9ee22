//! A Tor client (onion proxy) together with the application using it.
//!
//! The application is a workload (web, bulk or perf downloads). For each download the client
//! finds a circuit (an open one young enough to reuse, one being built, or a new one), opens
//! a stream with BEGIN, sends the request once CONNECTED, and counts the response's DATA cells,
//! sending SENDMEs as the receiving end of flow control. Circuits are built hop by hop with
//! CREATE2 and EXTEND2 (in RELAY_EARLY cells) through the client's primary guards, abandoned
//! when they take longer than the learned circuit build timeout, and kept ready ahead of need
//! (preemptive circuits).
//!
//! An upload workload turns the stream around: after CONNECTED the client sends a request
//! announcing the upload's size, then the bytes as DATA cells, as the sending end of flow
//! control (the same package windows, or Vegas congestion control, that exits use, plus the
//! exit's XON/XOFF); the transfer ends when the server's short response arrives.
//!
//! A stream for which no circuit can be launched (no path can be chosen, or
//! `max_client_circuits_pending` circuits are already being built) stays pending, as in tor:
//! the client tries again to attach pending streams once a second and when a circuit opens,
//! and a stream that never gets a circuit fails when its download times out (`error:no path`
//! if the last attempt found no path, `timeout` otherwise).
//!
//! The client is a sans-IO state machine ([`crate::io::Machine`]); its unit tests
//! (`tests.rs`) drive it through a scripted outside world and a scripted guard. Its files, by
//! job:
//! - `mod.rs`: the client's state, what arrives on sockets and timers, and what it measured;
//! - `workload.rs`: the workload driver (transfers started, ended and logged);
//! - `streams.rs`: attaching streams to circuits under isolation and dirtiness, BEGIN and its
//!   retries, the response's DATA cells;
//! - `circuits.rs`: path and guard choice, building, the circuit build timeout, preemptive
//!   circuits, closing;
//! - `channels.rs`: the connections to the guards and the cells on them;
//! - `uploads.rs`: the sending end of flow control for uploads;
//! - `dir_fetch.rs`: the users' directory fetches.

use std::collections::VecDeque;
use std::sync::Arc;

use onionlab_engine::slab::Slab;
use onionlab_engine::time::{secs, secs_f64, SimDuration, SimTime};
use onionlab_engine::HostId;
use onionlab_net::{SocketEvent, SocketId};
use onionlab_torcore::cbt::BuildTimeEstimator;
use onionlab_torcore::{
    Cell, CellCommand, ChannelDesign, FlowControl, RelayCommand, RELAY_DATA_BYTES,
};
use onionlab_traffic::{Action, ClientSchedule, ThroughputProbe, Workload};
use rand::RngExt;

use crate::circ_ids::ChannelCircuits;
use crate::directory::{DirRequest, DirectoryClient, DirectoryStats, REQUEST_TIMEOUT};
use crate::flow::{CircuitReceiver, CircuitSender, StreamReceiver, StreamSender};
use crate::io::{Io, Machine};
use crate::link::{LinkHandshake, LinkMessage};
use crate::measure::{Census, CircuitLog, CircuitOutcome, DownloadLog, DownloadOutcome};
use crate::wire::{Wire, REQUEST_BYTES, UPLOAD_RESPONSE_BYTES};
use crate::world::{TorWorld, HTTP_PORT, OR_PORT};

mod channels;
mod circuits;
mod dir_fetch;
mod streams;
mod uploads;
mod workload;

#[cfg(test)]
mod tests;

onionlab_engine::slab_key! {
    /// One of a client's circuits (tor's origin circuits): its slot in the client's table and
    /// which occupant of the slot, so that an id outliving its circuit finds nothing. Not
    /// tor's CircID, which names the circuit on its channel.
    pub struct OriginCircId;
}

onionlab_engine::slab_key! {
    /// One of a client's downloads (a stream, with what the workload asked of it): its slot
    /// and which occupant of the slot.
    pub struct DownloadId;
}

/// Timers of a client. Those naming a download or circuit carry its id: a timer that
/// outlived its download or circuit, whose slot a newer one may hold, finds nothing.
#[derive(Clone, Copy, Debug)]
pub enum ClientTimer {
    /// The workload asked to be woken at this time.
    Wake(SimTime),
    /// A download's time is up (its workload's `timeout`): it fails if still running.
    DownloadTimeout {
        /// The download.
        download: DownloadId,
    },
    /// A circuit still building after the circuit build timeout is abandoned.
    BuildTimeout {
        /// The circuit.
        circuit: OriginCircId,
    },
    /// Try again to attach the streams waiting without a circuit.
    RetryPending,
    /// A stream's BEGIN has had no answer for tor's retry timeout: try another circuit.
    BeginTimeout {
        /// The download.
        download: DownloadId,
        /// Its retries when armed: a later BEGIN of the same stream re-arms with one more.
        retries: u8,
    },
    /// The circuit has been dirty for `MaxCircuitDirtiness`: close it once no stream uses it.
    Expire {
        /// The circuit.
        circuit: OriginCircId,
    },
    /// A user's directory fetch is due (see `directory.rs`).
    Directory(SimTime),
}

/// How often streams waiting without a circuit are tried again (tor's once-a-second
/// `connection_ap_attach_pending`).
const PENDING_RETRY: SimDuration = secs(1);

/// How long a stream waits for its CONNECTED before tor tries it on another circuit
/// (`compute_retry_timeout`: 10 s for the first two tries, 15 s after), and the most retries
/// counted (tor stops counting at 250).
const BEGIN_TIMEOUT_EARLY: SimDuration = secs(10);
const BEGIN_TIMEOUT_LATE: SimDuration = secs(15);
const MAX_BEGIN_RETRIES: u8 = 250;

/// Why no circuit could be launched.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum NoCircuit {
    /// Path selection found no usable path.
    NoPath,
    /// `max_client_circuits_pending` circuits are being built already.
    TooManyPending,
}

/// How many DESTROY reasons a client keeps (for tests and diagnosis; bounded memory).
const MAX_DESTROY_REASONS: usize = 1024;

struct Channel {
    socket: SocketId,
    relay: usize,
    /// Which of the host's users opened it (see `Client::guards`).
    user: u32,
    /// TCP has connected.
    open: bool,
    /// The link handshake with the guard; cells wait in `out` until it completes.
    link: LinkHandshake,
    /// Cells the socket could not take yet.
    out: VecDeque<Cell>,
    /// Its circuits by id: the client is the initiating side, like a relay that opened a
    /// channel.
    circs: ChannelCircuits<OriginCircId>,
    /// Uploads stopped packaging because `out` was full; they resume when it drains.
    uploads_blocked: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum CircState {
    /// `hops` hops have answered so far.
    Building {
        hops: u8,
    },
    Open,
}

struct Circuit {
    id: u64,
    chan: u32,
    circ_id: u32,
    path: [usize; 3],
    /// Its length: 3, or 1 for a one-hop directory circuit to the guard (whose `path` holds
    /// the guard alone, the rest `usize::MAX`). Cells for the last hop carry this as `hop`.
    hops: u8,
    state: CircState,
    started: SimTime,
    build: Option<SimDuration>,
    first_used: Option<SimTime>,
    /// Downloads on this circuit (streams or waiting for it to open), each with its stream
    /// id once begun on this circuit (0 before: ids start at 1). The id sits here rather than
    /// only in the download so that finding a cell's stream reads this list alone, not every
    /// download of the circuit (a `markov` user's circuit carries many at once).
    downloads: Vec<(DownloadId, u16)>,
    /// The isolation key of the streams it carries, taken from the first one attached (a
    /// clean circuit takes any), as tor binds a circuit to its first stream's isolation.
    isolation: Option<u32>,
    next_stream: u16,
    receiver: CircuitReceiver,
    streams_opened: u32,
    /// The sending end of the circuit's uploads, made with the first.
    sender: Option<CircuitSender>,
    /// Upload DATA cells packaged, and cells acknowledged by the circuit SENDMEs accepted:
    /// plain counts, apart from the window state, so that the cells in flight can be checked
    /// against the window independently of the code enforcing it (as the exit does).
    packaged: u64,
    acked: u64,
    /// Round-robin position among the circuit's streams when packaging uploads.
    turn: usize,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum DlState {
    /// Waiting for a circuit.
    Waiting,
    /// BEGIN sent.
    Connecting,
    /// An upload's request and body going out.
    Sending,
    /// Request (and an upload's body) sent, response arriving.
    Receiving,
}

struct Download {
    size: u64,
    server: HostId,
    start: SimTime,
    circ: Option<OriginCircId>,
    stream_id: u16,
    receiver: StreamReceiver,
    received: u64,
    /// When its request left the client (OnionPerf's DATAREQUEST).
    request: Option<SimTime>,
    first_byte: Option<SimTime>,
    /// When the bytes that bound Tor Metrics' throughput arrived.
    throughput: ThroughputProbe,
    state: DlState,
    /// The last attempt to find a circuit for this download failed because no path could be
    /// chosen.
    no_path: bool,
    /// An upload: `size` bytes go out, and a response of `UPLOAD_RESPONSE_BYTES` comes back.
    upload: bool,
    sender: StreamSender,
    /// Upload: its request went out, and this many body bytes after it.
    request_sent: bool,
    /// Its isolation key: it shares a circuit only with streams of the same key.
    isolation: u32,
    /// Times its BEGIN went unanswered and it moved to another circuit (tor's
    /// `num_socks_retries`).
    retries: u8,
    sent: u64,
    /// As `Circuit::packaged` and `acked`, for stream SENDMEs.
    packaged: u64,
    acked: u64,
    /// A directory request (BEGIN_DIR to the user's directory guard), not the workload's.
    dir: Option<DirPart>,
}

/// Which part of a user's directory fetch a request is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DirPart {
    Consensus { user: u32 },
    Microdescs { user: u32 },
}

impl DirPart {
    fn user(self) -> u32 {
        match self {
            DirPart::Consensus { user } | DirPart::Microdescs { user } => user,
        }
    }
}

impl Download {
    /// Bytes that arrive before the transfer is complete: the response.
    fn expected(&self) -> u64 {
        if self.upload {
            UPLOAD_RESPONSE_BYTES
        } else {
            self.size
        }
    }
}

/// A client's own tor settings, beside the network's `TorParams`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientOptions {
    /// tor's `UseEntryGuards`: `false` chooses each circuit's first hop afresh by guard
    /// weight (OnionPerf's clients run so), and so opens a new connection for most circuits.
    pub use_entry_guards: bool,
    /// tor's `MaxCircuitDirtiness` for this client; `None`: the network's.
    pub max_circuit_dirtiness: Option<SimDuration>,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            use_entry_guards: true,
            max_circuit_dirtiness: None,
        }
    }
}

/// A Tor client host: the onion proxy of one or more users and the workload they run (see the
/// module doc). What it measured is read off it after the run.
pub struct Client {
    world: Arc<TorWorld>,
    options: ClientOptions,
    servers: Vec<HostId>,
    schedule: ClientSchedule,
    wake_at: Option<SimTime>,
    /// The primary guards of each user the host stands for (one for most workloads; a
    /// `markov` host's `users`). Each user is a Tor client of its own as far as the network
    /// sees: its own guards and its own connection to each, so a host standing for fifty users
    /// spreads their traffic over fifty client connections as fifty real clients would (one
    /// shared connection would carry all of it through one TCP congestion window, which under
    /// the graph's random loss caps the whole host at one loss-limited flow).
    guards: Vec<Vec<usize>>,
    /// The user whose guards and connection the next circuit goes through: circuits are
    /// launched by each user in turn.
    next_user: u32,
    channels: Vec<Channel>,
    /// The channel last opened on each socket slot of the host's stack, so that each cell
    /// finds its channel at once: a `markov` host has a channel per user.
    channel_by_slot: Vec<Option<u32>>,
    circuits: Slab<OriginCircId, Circuit>,
    next_circuit_id: u64,
    downloads: Slab<DownloadId, Download>,
    cbt: BuildTimeEstimator,
    /// Every transfer that ended, in the order they ended (`downloads.csv`).
    pub finished: Vec<DownloadLog>,
    /// Every three-hop circuit closed, in the order they closed (`circuits.csv`); those still
    /// open join at the end of the run (`close_log`).
    pub circuit_log: Vec<CircuitLog>,
    /// DATA cells that arrived when this client's deliver window (circuit or stream, SENDME
    /// flow control) was already exhausted: the exit sent beyond the window it was given, a
    /// protocol violation tor closes the circuit for. The model counts them (it must stay 0).
    pub window_violations: u64,
    /// The reason of each DESTROY received (tor's END_CIRC_REASON numbers; 0 = none given),
    /// the first `MAX_DESTROY_REASONS` of them.
    pub destroy_reasons: Vec<u32>,
    /// A `RetryPending` timer is scheduled.
    retry_armed: bool,
    /// A download finished or the workload's wake-up time came: poll the workload.
    workload_due: bool,
    /// `run_workload` is on the stack (so a download finishing inside it does not re-enter).
    in_workload: bool,
    /// The workload uploads.
    uploads: bool,
    /// Largest number of upload DATA cells in flight seen on any circuit (packaged minus
    /// acknowledged by accepted SENDMEs, counted apart from the window state), and on any
    /// stream (SENDME flow control only, where streams have windows).
    pub max_circuit_in_flight: u32,
    /// See `max_circuit_in_flight`.
    pub max_stream_in_flight: u32,
    /// SENDMEs for upload cells never sent: the exit's protocol violation (must stay 0).
    pub sendme_violations: u64,
    /// The users' directory fetches, when the network has directory traffic.
    directory: Option<DirectoryClient>,
    /// The `Directory` timer is armed for this time.
    directory_wake: Option<SimTime>,
}

impl Client {
    /// A client running `workload` against `servers` from `start`, with its own tor
    /// `options`; `directory_rng` draws its directory fetches' times apart from the host's
    /// stream, so that turning directory traffic on leaves the rest of its draws as they were.
    pub fn new(
        world: Arc<TorWorld>,
        workload: Workload,
        servers: Vec<HostId>,
        start: SimTime,
        options: ClientOptions,
        directory_rng: onionlab_engine::HostRng,
    ) -> Self {
        let p = &world.params;
        let cbt = BuildTimeEstimator::new(p);
        let uploads = workload.is_upload();
        let directory = p
            .directory_traffic
            .then(|| DirectoryClient::new(workload.users(), directory_rng));
        Client {
            options,
            servers,
            schedule: ClientSchedule::new(workload, start),
            wake_at: None,
            guards: Vec::new(),
            next_user: 0,
            channels: Vec::new(),
            channel_by_slot: Vec::new(),
            circuits: Slab::new(),
            next_circuit_id: 0,
            downloads: Slab::new(),
            cbt,
            world,
            finished: Vec::new(),
            circuit_log: Vec::new(),
            window_violations: 0,
            destroy_reasons: Vec::new(),
            retry_armed: false,
            workload_due: false,
            in_workload: false,
            uploads,
            max_circuit_in_flight: 0,
            max_stream_in_flight: 0,
            sendme_violations: 0,
            directory,
            directory_wake: None,
        }
    }

    fn pump(&mut self, io: &mut impl Io<ClientTimer>) {
        while let Some(event) = io.poll_event() {
            match event {
                SocketEvent::Connected(socket) => {
                    if let Some(ch) = self.channel_of(socket) {
                        let chan = &mut self.channels[ch];
                        chan.open = true;
                        if let Some(hello) = chan.link.connected() {
                            io.write_message(socket, hello.wire_bytes(), Wire::Link(hello));
                            io.flush(socket);
                        }
                        self.flush_channel(io, ch);
                    }
                }
                SocketEvent::Message {
                    socket,
                    message: Wire::Link(flight),
                    ..
                } => {
                    if let Some(ch) = self.channel_of(socket) {
                        self.link_flight(io, ch, flight);
                    }
                }
                SocketEvent::Writable(socket) => {
                    if let Some(ch) = self.channel_of(socket) {
                        self.flush_channel(io, ch);
                        if self.uploads {
                            self.resume_uploads(io, ch);
                        }
                    }
                }
                SocketEvent::Message {
                    socket,
                    message: Wire::Cell(cell),
                    count,
                } => {
                    if let Some(ch) = self.channel_of(socket) {
                        for _ in 0..count {
                            self.handle_cell(io, ch, cell);
                        }
                    }
                }
                SocketEvent::PeerClosed(socket)
                | SocketEvent::Closed(socket)
                | SocketEvent::Reset(socket)
                | SocketEvent::TimedOut(socket) => {
                    if let Some(ch) = self.channel_of(socket) {
                        self.channel_failed(io, ch);
                    }
                }
                _ => {}
            }
        }
    }

    /// Records circuits still open at the end of the run.
    pub fn close_log(&mut self) {
        for c in self.circuits.values().filter(|c| c.hops == 3) {
            self.circuit_log.push(CircuitLog {
                id: c.id,
                path: c.path,
                start: c.started,
                build: c.build,
                outcome: if c.state == CircState::Open {
                    CircuitOutcome::Built
                } else {
                    CircuitOutcome::Failed
                },
                streams: c.streams_opened,
                closed: None,
            });
        }
    }

    /// Downloads still running (for partial results).
    pub fn unfinished(&self) -> impl Iterator<Item = (u64, SimTime, Option<SimTime>)> + '_ {
        self.downloads
            .values()
            .filter(|d| d.dir.is_none())
            .map(|d| (d.size, d.start, d.first_byte))
    }

    /// What the users' directory fetches amounted to (zero without directory traffic).
    pub fn directory_stats(&self) -> DirectoryStats {
        self.directory.as_ref().map(|d| d.stats).unwrap_or_default()
    }

    /// Adds what this client holds to `census`.
    pub fn census(&self, census: &mut Census) {
        census.client_channels += self
            .channels
            .iter()
            .filter(|c| c.relay != usize::MAX)
            .count() as u64;
        census.client_circuits += self.circuits.len() as u64;
        census.streams += self.downloads.len() as u64;
    }

    /// The circuit build timeout it has learnt, in seconds.
    pub fn build_timeout(&self) -> f64 {
        self.cbt.timeout() as f64 / secs_f64(1.0) as f64
    }
}

impl Machine for Client {
    type Timer = ClientTimer;

    fn start(&mut self, io: &mut impl Io<ClientTimer>) {
        // Without entry guards a user has none, and each path takes its own first hop.
        let n = if self.options.use_entry_guards {
            self.world.params.num_primary_guards as usize
        } else {
            0
        };
        let world = self.world.clone();
        self.guards = (0..self.schedule.workload().users())
            .map(|_| world.selector.choose_guards(&world.consensus, n, io.rng()))
            .collect();
        for _ in 0..self.world.params.preemptive_circuits {
            let _ = self.launch_circuit(io);
        }
        self.workload_due = true;
        self.run_workload(io);
        self.poll_directory(io);
        self.pump(io);
    }

    fn on_timer(&mut self, io: &mut impl Io<ClientTimer>, timer: ClientTimer) {
        match timer {
            ClientTimer::Wake(at) => {
                if self.wake_at == Some(at) {
                    self.wake_at = None;
                    self.workload_due = true;
                    self.run_workload(io);
                }
            }
            ClientTimer::DownloadTimeout { download } => {
                let outcome = self.downloads.get(download).map(|d| {
                    if d.circ.is_none() && d.no_path {
                        DownloadOutcome::Error("no path")
                    } else {
                        DownloadOutcome::Timeout
                    }
                });
                if let Some(outcome) = outcome {
                    self.finish(io, download, outcome);
                }
            }
            ClientTimer::RetryPending => {
                self.retry_armed = false;
                self.attach_pending(io);
            }
            ClientTimer::BeginTimeout { download, retries } => {
                let waiting = self
                    .downloads
                    .get(download)
                    .is_some_and(|d| d.retries == retries && d.state == DlState::Connecting);
                if waiting {
                    self.retry_stream(io, download);
                }
            }
            ClientTimer::Expire { circuit } => {
                let idle = self
                    .circuits
                    .get(circuit)
                    .is_some_and(|c| c.downloads.is_empty());
                if idle {
                    self.close_circuit(io, circuit, CircuitOutcome::Built, true);
                }
            }
            ClientTimer::BuildTimeout { circuit } => {
                let building = self
                    .circuits
                    .get(circuit)
                    .is_some_and(|c| matches!(c.state, CircState::Building { .. }));
                if building {
                    if self.circuits[circuit].hops == 3 {
                        self.cbt.add_timeout();
                    }
                    self.close_circuit(io, circuit, CircuitOutcome::Timeout, true);
                }
            }
            ClientTimer::Directory(at) => {
                if self.directory_wake == Some(at) {
                    self.directory_wake = None;
                    self.poll_directory(io);
                }
            }
        }
        self.pump(io);
    }

    /// Handles what the sockets reported since the last call.
    fn on_socket_events(&mut self, io: &mut impl Io<ClientTimer>) {
        self.pump(io);
    }
}
