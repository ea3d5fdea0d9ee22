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
use crate::host::Ev;
use crate::io::{Io, Machine, TimerEvent};
use crate::link::{LinkHandshake, LinkMessage};
use crate::measure::{Census, CircuitLog, CircuitOutcome, DownloadLog, DownloadOutcome};
use crate::wire::{Wire, REQUEST_BYTES, UPLOAD_RESPONSE_BYTES};
use crate::world::{TorWorld, HTTP_PORT, OR_PORT};

#[derive(Clone, Copy, Debug)]
pub enum ClientTimer {
    /// The workload asked to be woken at this time.
    Wake(SimTime),
    DownloadTimeout {
        download: u32,
        generation: u32,
    },
    BuildTimeout {
        circuit: u32,
        generation: u32,
    },
    /// Try again to attach the streams waiting without a circuit.
    RetryPending,
    /// A stream's BEGIN has had no answer for tor's retry timeout: try another circuit.
    BeginTimeout {
        download: u32,
        generation: u32,
        retries: u8,
    },
    /// The circuit has been dirty for `MaxCircuitDirtiness`: close it once no stream uses it.
    Expire {
        circuit: u32,
        generation: u32,
    },
    /// A user's directory fetch is due (see `directory.rs`).
    Directory(SimTime),
}

impl TimerEvent for ClientTimer {
    fn event(self) -> Ev {
        Ev::Client(self)
    }
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
    circs: ChannelCircuits,
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
    generation: u32,
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
    downloads: Vec<(u32, u16)>,
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
    generation: u32,
    size: u64,
    server: HostId,
    start: SimTime,
    circ: Option<u32>,
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
    /// The channel last opened on each socket slot of the host's stack (`u32::MAX`: none), so
    /// that each cell finds its channel at once: a `markov` host has a channel per user.
    channel_by_slot: Vec<u32>,
    circuits: Slab<Circuit>,
    circuit_generation: u32,
    next_circuit_id: u64,
    downloads: Slab<Download>,
    download_generation: u32,
    cbt: BuildTimeEstimator,
    pub finished: Vec<DownloadLog>,
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
    pub max_stream_in_flight: u32,
    /// SENDMEs for upload cells never sent: the exit's protocol violation (must stay 0).
    pub sendme_violations: u64,
    /// The users' directory fetches, when the network has directory traffic.
    directory: Option<DirectoryClient>,
    /// The `Directory` timer is armed for this time.
    directory_wake: Option<SimTime>,
}

impl Client {
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
            circuit_generation: 0,
            next_circuit_id: 0,
            downloads: Slab::new(),
            download_generation: 0,
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

    /// The channel on `socket`. Socket ids are never given out twice (a reused slot has a
    /// new generation), so at most one channel has it. The table misses only for a socket
    /// that is no channel's or whose slot a newer channel took; the search decides those.
    fn channel_of(&self, socket: SocketId) -> Option<usize> {
        match self.channel_by_slot.get(socket.slot as usize) {
            Some(&ch) if ch != u32::MAX && self.channels[ch as usize].socket == socket => {
                Some(ch as usize)
            }
            _ => self.channels.iter().position(|c| c.socket == socket),
        }
    }

    // --- the workload ---

    /// Polls the workload while it is due. Downloads that finish while it runs only mark it
    /// due again, so the workload never re-enters itself: one loop, whatever happens at one
    /// instant.
    fn run_workload(&mut self, io: &mut impl Io<ClientTimer>) {
        if self.in_workload {
            return;
        }
        self.in_workload = true;
        while std::mem::take(&mut self.workload_due) {
            self.poll_workload(io);
        }
        self.in_workload = false;
    }

    fn poll_workload(&mut self, io: &mut impl Io<ClientTimer>) {
        loop {
            let now = io.now();
            match self.schedule.poll(now, io.rng()) {
                Action::Start {
                    size_bytes,
                    timeout,
                    isolation,
                } => self.start_download(io, size_bytes, timeout, isolation),
                Action::WaitUntil(at) => {
                    if self.wake_at != Some(at) {
                        self.wake_at = Some(at);
                        io.arm_at(at, ClientTimer::Wake(at));
                    }
                    return;
                }
                Action::Idle => return,
            }
        }
    }

    fn start_download(
        &mut self,
        io: &mut impl Io<ClientTimer>,
        size: u64,
        timeout: SimDuration,
        isolation: u32,
    ) {
        let server = self.servers[io.rng().random_range(0..self.servers.len())];
        let dl = self.new_download(io, size, server, timeout, isolation, None);
        self.attach(io, dl);
    }

    /// Adds a download (or directory request) waiting for a circuit, with its timeout armed.
    fn new_download(
        &mut self,
        io: &mut impl Io<ClientTimer>,
        size: u64,
        server: HostId,
        timeout: SimDuration,
        isolation: u32,
        dir: Option<DirPart>,
    ) -> u32 {
        self.download_generation += 1;
        let d = Download {
            generation: self.download_generation,
            size,
            server,
            start: io.now(),
            circ: None,
            stream_id: 0,
            receiver: StreamReceiver::new(&self.world.params),
            received: 0,
            request: None,
            first_byte: None,
            throughput: ThroughputProbe::default(),
            state: DlState::Waiting,
            no_path: false,
            sender: StreamSender::new(&self.world.params),
            request_sent: false,
            sent: 0,
            packaged: 0,
            acked: 0,
            isolation,
            retries: 0,
            upload: self.uploads && dir.is_none(),
            dir,
        };
        let idx = self.downloads.insert(d);
        io.arm_in(
            timeout,
            ClientTimer::DownloadTimeout {
                download: idx,
                generation: self.download_generation,
            },
        );
        idx
    }

    /// Puts a waiting download on a circuit: an open one young enough, one being built, or a
    /// new one. If none can be launched the download stays pending (no circuit) and is tried
    /// again within a second; it never fails here.
    fn attach(&mut self, io: &mut impl Io<ClientTimer>, dl: u32) {
        let now = io.now();
        let dirtiness = self.dirtiness();
        let d = self.downloads[dl].as_ref().unwrap();
        let (key, dir_user) = (d.isolation, d.dir.map(DirPart::user));
        let channels = &self.channels;
        // A directory request goes on its user's one-hop circuit to the directory guard; a
        // workload's stream on a three-hop circuit of its isolation.
        let fits = |c: &Circuit| match dir_user {
            Some(user) => c.hops == 1 && channels[c.chan as usize].user == user,
            None => c.hops == 3 && c.isolation.is_none_or(|k| k == key),
        };
        let usable = |c: &Circuit| {
            c.first_used
                .is_none_or(|t| now < t.saturating_add(dirtiness))
                && fits(c)
        };
        let open = self.circuits.slots().iter().position(|c| {
            c.as_ref()
                .is_some_and(|c| c.state == CircState::Open && usable(c))
        });
        let building = || {
            self.circuits.slots().iter().position(|c| {
                c.as_ref()
                    .is_some_and(|c| matches!(c.state, CircState::Building { .. }) && fits(c))
            })
        };
        let circ = match open.or_else(building) {
            Some(c) => c as u32,
            None => match self.launch(io, dir_user) {
                Ok(c) => c,
                Err(why) => {
                    self.downloads[dl].as_mut().unwrap().no_path = why == NoCircuit::NoPath;
                    self.arm_retry(io);
                    return;
                }
            },
        };
        let c = self.circuits[circ].as_mut().unwrap();
        c.downloads.push((dl, 0));
        c.isolation.get_or_insert(key);
        let d = self.downloads[dl].as_mut().unwrap();
        d.circ = Some(circ);
        d.no_path = false;
        if c.state == CircState::Open {
            self.begin(io, circ, dl);
        }
    }

    /// Tries again to attach every download that is waiting without a circuit.
    fn attach_pending(&mut self, io: &mut impl Io<ClientTimer>) {
        for dl in 0..self.downloads.slots().len() as u32 {
            if self.downloads[dl]
                .as_ref()
                .is_some_and(|d| d.circ.is_none())
            {
                self.attach(io, dl);
            }
        }
    }

    fn arm_retry(&mut self, io: &mut impl Io<ClientTimer>) {
        if !self.retry_armed {
            self.retry_armed = true;
            io.arm_in(PENDING_RETRY, ClientTimer::RetryPending);
        }
    }

    fn begin(&mut self, io: &mut impl Io<ClientTimer>, circ: u32, dl: u32) {
        let now = io.now();
        let dirtiness = self.dirtiness();
        let c = self.circuits[circ].as_mut().unwrap();
        let was_clean = c.first_used.is_none();
        c.first_used.get_or_insert(now);
        if was_clean {
            // Tor closes a circuit dirty for longer than MaxCircuitDirtiness once its last
            // stream is gone (circuit_expire_old_circuits_clientside); without this PCTCP
            // relays would keep a connection for every circuit a client ever used.
            let expire = ClientTimer::Expire {
                circuit: circ,
                generation: c.generation,
            };
            let at = now.saturating_add(dirtiness);
            io.arm_at(at, expire);
        }
        c.next_stream = c.next_stream.wrapping_add(1).max(1);
        c.streams_opened += 1;
        let stream_id = c.next_stream;
        if let Some(entry) = c.downloads.iter_mut().find(|(x, _)| *x == dl) {
            entry.1 = stream_id;
        }
        let d = self.downloads[dl].as_mut().unwrap();
        d.stream_id = stream_id;
        d.state = DlState::Connecting;
        let (command, hop) = match d.dir {
            Some(_) => (RelayCommand::BeginDir, 1),
            None => (RelayCommand::Begin, 3),
        };
        let mut begin = Cell::relay(0, command, hop, stream_id);
        begin.arg = d.server;
        let wait = if d.retries < 2 {
            BEGIN_TIMEOUT_EARLY
        } else {
            BEGIN_TIMEOUT_LATE
        };
        let timer = ClientTimer::BeginTimeout {
            download: dl,
            generation: d.generation,
            retries: d.retries,
        };
        io.arm_in(wait, timer);
        self.send_on_circuit(io, circ, begin);
        if was_clean && hop == 3 {
            self.keep_preemptive(io);
        }
    }

    /// A stream's BEGIN went unanswered for tor's retry timeout
    /// (`connection_ap_expire_beginning`): end it on its circuit, make the circuit take no new
    /// streams (those on it may still finish), and attach the stream anew, to another circuit.
    fn retry_stream(&mut self, io: &mut impl Io<ClientTimer>, dl: u32) {
        let now = io.now();
        let dirtiness = self.dirtiness();
        let d = self.downloads[dl].as_mut().unwrap();
        let stream_id = d.stream_id;
        d.retries = (d.retries + 1).min(MAX_BEGIN_RETRIES);
        d.state = DlState::Waiting;
        let Some(circ) = d.circ.take() else {
            return;
        };
        let hops = self.circuits[circ].as_ref().unwrap().hops;
        let end = Cell::relay(0, RelayCommand::End, hops, stream_id);
        self.send_on_circuit(io, circ, end);
        let c = self.circuits[circ].as_mut().unwrap();
        c.downloads.retain(|&(x, _)| x != dl);
        // Dirty for the whole MaxCircuitDirtiness already, as tor's
        // `mark_circuit_unusable_for_new_conns` makes it.
        c.first_used = Some(now.saturating_sub(dirtiness));
        if c.downloads.is_empty() {
            self.close_circuit(io, circ, CircuitOutcome::Built, true);
        }
        self.attach(io, dl);
    }

    /// Keeps the configured number of clean circuits open or being built.
    fn keep_preemptive(&mut self, io: &mut impl Io<ClientTimer>) {
        let clean = self
            .circuits
            .values()
            .filter(|c| c.hops == 3 && c.first_used.is_none())
            .count() as u32;
        let want = self.world.params.preemptive_circuits;
        for _ in clean..want {
            let _ = self.launch_circuit(io);
        }
    }

    fn finish(&mut self, io: &mut impl Io<ClientTimer>, dl: u32, outcome: DownloadOutcome) {
        let now = io.now();
        let Some(d) = self.downloads.remove(dl) else {
            return;
        };
        let mut path = None;
        let mut build = None;
        let mut circuit = None;
        let dirtiness = self.dirtiness();
        if let Some(circ) = d.circ {
            if let Some(c) = self.circuits[circ].as_mut() {
                c.downloads.retain(|&(x, _)| x != dl);
                path = Some(c.path);
                build = c.build;
                circuit = Some(c.id);
                let expired = c.downloads.is_empty()
                    && c.first_used
                        .is_some_and(|t| now >= t.saturating_add(dirtiness));
                if outcome != DownloadOutcome::Ok && d.state != DlState::Waiting {
                    // Tell the exit to stop sending.
                    let end = Cell::relay(0, RelayCommand::End, c.hops, d.stream_id);
                    self.send_on_circuit(io, circ, end);
                }
                if expired {
                    self.close_circuit(io, circ, CircuitOutcome::Built, true);
                }
            }
        }
        if let Some(part) = d.dir {
            self.directory_done(io, part, d.received, outcome == DownloadOutcome::Ok);
            return;
        }
        self.finished.push(DownloadLog {
            size: d.size,
            server: d.server,
            start: d.start,
            circuit_build: build,
            request: d.request,
            first_byte: d.first_byte,
            throughput: d.throughput,
            last_byte: (outcome == DownloadOutcome::Ok).then_some(now),
            outcome,
            path,
            circuit,
            upload: d.upload,
        });
        self.schedule.on_finished(now);
        self.workload_due = true;
        self.run_workload(io);
    }

    // --- circuits ---

    /// Launches a circuit: a user's one-hop directory circuit, or a workload's three-hop one.
    fn launch(
        &mut self,
        io: &mut impl Io<ClientTimer>,
        dir_user: Option<u32>,
    ) -> Result<u32, NoCircuit> {
        match dir_user {
            Some(user) => self.launch_dir_circuit(io, user),
            None => self.launch_circuit(io),
        }
    }

    fn too_many_pending(&self) -> bool {
        let pending = self
            .circuits
            .values()
            .filter(|c| matches!(c.state, CircState::Building { .. }))
            .count() as u32;
        pending >= self.world.params.max_client_circuits_pending
    }

    fn launch_circuit(&mut self, io: &mut impl Io<ClientTimer>) -> Result<u32, NoCircuit> {
        if self.too_many_pending() {
            return Err(NoCircuit::TooManyPending);
        }
        let world = self.world.clone();
        let user = self.next_user;
        self.next_user = (user + 1) % self.guards.len().max(1) as u32;
        let guards = self.guards.get(user as usize).map_or(&[][..], |g| &g[..]);
        let path = world
            .selector
            .choose_path(&world.consensus, guards, HTTP_PORT, false, io.rng())
            .ok_or(NoCircuit::NoPath)?;
        let ch = self.channel_for(io, path[0], user);
        Ok(self.create_circuit(io, ch, path, 3))
    }

    /// A one-hop circuit to `user`'s directory guard: the first of its primary guards (tor
    /// 0.4 draws directory guards from the same sample), or without entry guards a relay
    /// chosen by guard weight for this circuit.
    fn launch_dir_circuit(
        &mut self,
        io: &mut impl Io<ClientTimer>,
        user: u32,
    ) -> Result<u32, NoCircuit> {
        if self.too_many_pending() {
            return Err(NoCircuit::TooManyPending);
        }
        let world = self.world.clone();
        let guard = match self.guards.get(user as usize).and_then(|g| g.first()) {
            Some(&g) => g,
            None => *world
                .selector
                .choose_guards(&world.consensus, 1, io.rng())
                .first()
                .ok_or(NoCircuit::NoPath)?,
        };
        let ch = self.channel_for(io, guard, user);
        Ok(self.create_circuit(io, ch, [guard, usize::MAX, usize::MAX], 1))
    }

    /// The user's channel to `relay`, opened if it has none.
    fn channel_for(&mut self, io: &mut impl Io<ClientTimer>, relay: usize, user: u32) -> usize {
        let world = self.world.clone();
        let guard_host = world.relay_hosts[relay];
        let ours = |c: &Channel| c.relay == relay && c.user == user;
        match self.channels.iter().position(ours) {
            Some(ch) => ch,
            None => {
                let socket = io.connect(guard_host, OR_PORT);
                let chan = Channel {
                    socket,
                    relay,
                    user,
                    open: false,
                    link: LinkHandshake::opening(world.params.link_handshake, false),
                    out: VecDeque::new(),
                    circs: ChannelCircuits::new(true),
                    uploads_blocked: false,
                };
                // A failed channel's slot, once its last circuit is gone, so that a client
                // whose channels fail again and again keeps a table as large as its guards.
                let dead = |c: &Channel| c.relay == usize::MAX && c.circs.count() == 0;
                let ch = match self.channels.iter().position(dead) {
                    Some(ch) => {
                        self.channels[ch] = chan;
                        ch
                    }
                    None => {
                        self.channels.push(chan);
                        self.channels.len() - 1
                    }
                };
                let slot = socket.slot as usize;
                if self.channel_by_slot.len() <= slot {
                    self.channel_by_slot.resize(slot + 1, u32::MAX);
                }
                self.channel_by_slot[slot] = ch as u32;
                ch
            }
        }
    }

    /// Starts building a circuit of `hops` hops along `path` on channel `ch`.
    fn create_circuit(
        &mut self,
        io: &mut impl Io<ClientTimer>,
        ch: usize,
        path: [usize; 3],
        hops: u8,
    ) -> u32 {
        let now = io.now();
        let world = self.world.clone();
        self.circuit_generation += 1;
        self.next_circuit_id += 1;
        let circuit = Circuit {
            id: self.next_circuit_id,
            generation: self.circuit_generation,
            chan: ch as u32,
            circ_id: 0,
            path,
            hops,
            state: CircState::Building { hops: 0 },
            started: now,
            build: None,
            first_used: None,
            downloads: Vec::new(),
            isolation: None,
            next_stream: 0,
            receiver: CircuitReceiver::new(&world.params),
            streams_opened: 0,
            sender: None,
            packaged: 0,
            acked: 0,
            turn: 0,
        };
        let idx = self.circuits.insert(circuit);
        let circ_id = self.channels[ch].circs.allocate(idx);
        self.circuits[idx].as_mut().unwrap().circ_id = circ_id;
        let mut create = Cell::new(circ_id, CellCommand::Create2);
        create.hop = 1;
        // Idealised Torchestra: the client tells its relays the circuit's traffic class.
        if self.world.params.channel == ChannelDesign::TorchestraIdeal {
            create.arg = u32::from(matches!(
                self.schedule.workload(),
                Workload::Bulk { .. } | Workload::Upload { .. }
            ));
        }
        self.send_cell(io, ch, create);
        io.arm_in(
            self.cbt.timeout(),
            ClientTimer::BuildTimeout {
                circuit: idx,
                generation: self.circuit_generation,
            },
        );
        idx
    }

    fn send_on_circuit(&mut self, io: &mut impl Io<ClientTimer>, circ: u32, mut cell: Cell) {
        let c = self.circuits[circ].as_ref().unwrap();
        cell.circ_id = c.circ_id;
        let ch = c.chan as usize;
        self.send_cell(io, ch, cell);
    }

    fn send_cell(&mut self, io: &mut impl Io<ClientTimer>, ch: usize, cell: Cell) {
        self.channels[ch].out.push_back(cell);
        self.flush_channel(io, ch);
    }

    /// A flight of the link handshake with the guard arrived: answer it, and once the
    /// handshake is complete send the cells that waited for it. A flight out of order
    /// breaks the channel.
    fn link_flight(&mut self, io: &mut impl Io<ClientTimer>, ch: usize, flight: LinkMessage) {
        let chan = &mut self.channels[ch];
        match chan.link.on_flight(flight) {
            Ok(reply) => {
                if let Some(reply) = reply {
                    io.write_message(chan.socket, reply.wire_bytes(), Wire::Link(reply));
                    io.flush(chan.socket);
                }
                self.flush_channel(io, ch);
            }
            Err(_) => self.channel_failed(io, ch),
        }
    }

    fn flush_channel(&mut self, io: &mut impl Io<ClientTimer>, ch: usize) {
        let bytes = self.world.cell_wire_bytes();
        let chan = &mut self.channels[ch];
        if !chan.open || !chan.link.is_open() {
            return;
        }
        let mut wrote = false;
        while let Some(&cell) = chan.out.front() {
            if !io.write_message(chan.socket, bytes, Wire::Cell(cell)) {
                break;
            }
            chan.out.pop_front();
            wrote = true;
        }
        if wrote {
            io.flush(chan.socket);
        }
    }

    fn handle_cell(&mut self, io: &mut impl Io<ClientTimer>, ch: usize, cell: Cell) {
        let Some(circ) = self.channels[ch].circs.lookup(cell.circ_id) else {
            return;
        };
        if self.circuits[circ].is_none() {
            return;
        }
        match (cell.command, cell.relay) {
            (CellCommand::Created2, _) => self.hop_built(io, circ, 1),
            (CellCommand::Destroy, _) => {
                if self.destroy_reasons.len() < MAX_DESTROY_REASONS {
                    self.destroy_reasons.push(cell.arg);
                }
                self.close_circuit(io, circ, CircuitOutcome::Destroyed, false)
            }
            (_, RelayCommand::Extended2) => self.hop_built(io, circ, cell.hop + 1),
            (_, RelayCommand::Connected) => self.connected(io, circ, cell.stream_id),
            (_, RelayCommand::Data) => self.data(io, circ, cell),
            (_, RelayCommand::Sendme) => self.sendme(io, circ, cell.stream_id),
            (_, RelayCommand::Xoff | RelayCommand::Xon) => {
                if let Some(dl) = self.download_on(circ, cell.stream_id) {
                    let d = self.downloads[dl].as_mut().unwrap();
                    d.sender.set_xoff(cell.relay == RelayCommand::Xoff);
                    self.package_uploads(io, circ);
                }
            }
            (_, RelayCommand::End) => {
                if let Some(dl) = self.download_on(circ, cell.stream_id) {
                    let d = self.downloads[dl].as_ref().unwrap();
                    if d.received < d.expected() {
                        let reason = if d.state == DlState::Connecting {
                            "refused by exit"
                        } else {
                            "stream ended early"
                        };
                        self.finish(io, dl, DownloadOutcome::Error(reason));
                    }
                }
            }
            _ => {}
        }
    }

    fn hop_built(&mut self, io: &mut impl Io<ClientTimer>, circ: u32, hops: u8) {
        let now = io.now();
        let c = self.circuits[circ].as_mut().unwrap();
        if c.state != (CircState::Building { hops: hops - 1 }) {
            return;
        }
        if hops < c.hops {
            c.state = CircState::Building { hops };
            let target = self.world.relay_hosts[c.path[hops as usize]];
            let mut extend = Cell::relay(0, RelayCommand::Extend2, hops, 0);
            extend.command = CellCommand::RelayEarly;
            extend.arg = target;
            self.send_on_circuit(io, circ, extend);
            return;
        }
        c.state = CircState::Open;
        let took = now - c.started;
        c.build = Some(took);
        // tor learns its build timeout from full-length circuits only.
        if c.hops == 3 {
            self.cbt.add(took);
        }
        for (dl, _) in c.downloads.clone() {
            self.begin(io, circ, dl);
        }
        // Streams waiting without a circuit can use this one now.
        self.attach_pending(io);
    }

    fn download_on(&self, circ: u32, stream_id: u16) -> Option<u32> {
        let c = self.circuits[circ].as_ref()?;
        // A download begun on this circuit is no longer waiting: it waits again only when
        // the circuit closes and it moves to another, where it starts over at 0.
        c.downloads
            .iter()
            .find(|&&(_, id)| id == stream_id && id != 0)
            .map(|&(dl, _)| dl)
    }

    fn connected(&mut self, io: &mut impl Io<ClientTimer>, circ: u32, stream_id: u16) {
        let Some(dl) = self.download_on(circ, stream_id) else {
            return;
        };
        let d = self.downloads[dl].as_mut().unwrap();
        if d.upload {
            d.state = DlState::Sending;
            self.package_uploads(io, circ);
            return;
        }
        d.state = DlState::Receiving;
        d.request = Some(io.now());
        let hops = self.circuits[circ].as_ref().unwrap().hops;
        let mut request = Cell::relay(0, RelayCommand::Data, hops, stream_id);
        request.length = REQUEST_BYTES as u16;
        request.arg = d.size.min(u32::MAX as u64) as u32;
        self.send_on_circuit(io, circ, request);
    }

    fn data(&mut self, io: &mut impl Io<ClientTimer>, circ: u32, cell: Cell) {
        let now = io.now();
        let c = self.circuits[circ].as_mut().unwrap();
        let hops = c.hops;
        match c.receiver.on_data() {
            Ok(true) => {
                let sendme = Cell::relay(0, RelayCommand::Sendme, hops, 0);
                self.send_on_circuit(io, circ, sendme);
            }
            Ok(false) => {}
            Err(_) => self.window_violations += 1,
        }
        let Some(dl) = self.download_on(circ, cell.stream_id) else {
            return;
        };
        let d = self.downloads[dl].as_mut().unwrap();
        d.received += cell.length as u64;
        if !d.upload {
            d.first_byte.get_or_insert(now);
            d.throughput.on_received(d.received, now);
        }
        match d.receiver.on_data() {
            Ok(true) => {
                let sendme = Cell::relay(0, RelayCommand::Sendme, hops, cell.stream_id);
                self.send_on_circuit(io, circ, sendme);
            }
            Ok(false) => {}
            Err(_) => self.window_violations += 1,
        }
        let d = self.downloads[dl].as_ref().unwrap();
        if d.received >= d.expected() {
            self.finish(io, dl, DownloadOutcome::Ok);
        }
    }

    // --- uploads ---

    /// Packages upload DATA cells on a circuit for as long as its window (or congestion
    /// window), its streams' windows (or XOFF), the bytes left and the channel allow, serving
    /// its streams in turn. The request goes first: `arg` says the size, `upload` that a body
    /// follows.
    fn package_uploads(&mut self, io: &mut impl Io<ClientTimer>, circ: u32) {
        let now = io.now();
        let high = self.world.params.circuit_queue_high_cells as usize;
        loop {
            let Some(c) = self.circuits[circ].as_mut() else {
                return;
            };
            if c.state != CircState::Open {
                return;
            }
            let ch = c.chan as usize;
            if self.channels[ch].out.len() >= high {
                // Tor stops reading from the edge while the circuit's cells pile up.
                self.channels[ch].uploads_blocked = true;
                return;
            }
            let params = &self.world.params;
            let sender = c
                .sender
                .get_or_insert_with(|| CircuitSender::new(params, now));
            if !sender.can_send() {
                return;
            }
            let n = c.downloads.len();
            let mut next = None;
            for k in 0..n {
                let i = (c.turn + k) % n;
                let d = self.downloads[c.downloads[i].0].as_ref().unwrap();
                if d.state == DlState::Sending && d.sender.can_send() {
                    next = Some(i);
                    break;
                }
            }
            let Some(i) = next else {
                return;
            };
            c.turn = (i + 1) % n;
            let dl = c.downloads[i].0;
            let d = self.downloads[dl].as_mut().unwrap();
            let mut cell = Cell::relay(0, RelayCommand::Data, 3, d.stream_id);
            if d.request_sent {
                let n = (d.size - d.sent).min(u64::from(RELAY_DATA_BYTES));
                cell.length = n as u16;
                d.sent += n;
            } else {
                cell.length = REQUEST_BYTES as u16;
                cell.arg = d.size.min(u32::MAX as u64) as u32;
                cell.upload = true;
                d.request_sent = true;
                d.request = Some(now);
                d.first_byte = Some(now);
            }
            if d.sent >= d.size {
                d.state = DlState::Receiving;
            }
            d.sender.on_sent();
            d.packaged += 1;
            if d.sender.windowed() {
                let in_flight = d.packaged.saturating_sub(d.acked);
                self.max_stream_in_flight = self
                    .max_stream_in_flight
                    .max(in_flight.min(u32::MAX as u64) as u32);
            }
            let c = self.circuits[circ].as_mut().unwrap();
            c.sender.as_mut().unwrap().on_sent(now);
            c.packaged += 1;
            let in_flight = c.packaged.saturating_sub(c.acked);
            self.max_circuit_in_flight = self
                .max_circuit_in_flight
                .max(in_flight.min(u32::MAX as u64) as u32);
            self.send_on_circuit(io, circ, cell);
        }
    }

    /// A SENDME from the exit for upload cells: circuit level (stream 0) or for one stream.
    /// Download clients get circuit SENDMEs for their requests too, and need none of them.
    fn sendme(&mut self, io: &mut impl Io<ClientTimer>, circ: u32, stream_id: u16) {
        let now = io.now();
        let params = &self.world.params;
        if stream_id == 0 {
            let c = self.circuits[circ].as_mut().unwrap();
            let Some(sender) = c.sender.as_mut() else {
                return;
            };
            let blocked = !self.channels[c.chan as usize].out.is_empty();
            if !sender.on_sendme(now, blocked) {
                self.sendme_violations += 1;
                return;
            }
            c.acked += u64::from(match params.flow_control {
                FlowControl::Sendme => params.circuit_sendme_increment,
                FlowControl::Vegas => params.cc_sendme_inc.max(1),
            });
        } else {
            let increment = u64::from(params.stream_sendme_increment);
            let Some(dl) = self.download_on(circ, stream_id) else {
                return;
            };
            let d = self.downloads[dl].as_mut().unwrap();
            if !d.upload {
                return;
            }
            if d.sender.on_sendme() {
                d.acked += increment;
            } else {
                self.sendme_violations += 1;
            }
        }
        self.package_uploads(io, circ);
    }

    /// The channel's queue drained: the uploads it held back package again.
    fn resume_uploads(&mut self, io: &mut impl Io<ClientTimer>, ch: usize) {
        let high = self.world.params.circuit_queue_high_cells as usize;
        let chan = &mut self.channels[ch];
        if !chan.uploads_blocked || chan.out.len() >= high {
            return;
        }
        chan.uploads_blocked = false;
        for circ in 0..self.circuits.slots().len() as u32 {
            let uploading = self.circuits[circ]
                .as_ref()
                .is_some_and(|c| c.chan as usize == ch && c.sender.is_some());
            if uploading {
                self.package_uploads(io, circ);
            }
        }
    }

    /// Tears down a circuit. Downloads that have not received anything yet move to another
    /// circuit (as Tor retries a stream whose circuit failed); the others fail.
    fn close_circuit(
        &mut self,
        io: &mut impl Io<ClientTimer>,
        circ: u32,
        outcome: CircuitOutcome,
        send_destroy: bool,
    ) {
        let now = io.now();
        let Some(c) = self.circuits.remove(circ) else {
            return;
        };
        self.channels[c.chan as usize].circs.release(c.circ_id);
        if send_destroy {
            let destroy = Cell::new(c.circ_id, CellCommand::Destroy);
            self.send_cell(io, c.chan as usize, destroy);
        }
        let built = c.state == CircState::Open;
        // One-hop directory circuits are not the circuits a measurement reports.
        if c.hops == 3 {
            self.circuit_log.push(CircuitLog {
                id: c.id,
                path: c.path,
                start: c.started,
                build: c.build,
                outcome: if built {
                    CircuitOutcome::Built
                } else {
                    outcome
                },
                streams: c.streams_opened,
                closed: Some(now),
            });
        }
        for (dl, _) in c.downloads {
            let Some(d) = self.downloads[dl].as_mut() else {
                continue;
            };
            if d.received == 0 && !d.request_sent {
                d.circ = None;
                d.state = DlState::Waiting;
                self.attach(io, dl);
            } else {
                self.finish(io, dl, DownloadOutcome::Error("circuit closed"));
            }
        }
        self.keep_preemptive(io);
    }

    fn channel_failed(&mut self, io: &mut impl Io<ClientTimer>, ch: usize) {
        let circuits: Vec<u32> = self.channels[ch].circs.all().collect();
        // The channel is gone: forget it so new circuits open a fresh one, and close our end
        // (after the guard's FIN the socket would otherwise stay half open for the run).
        self.channels[ch].relay = usize::MAX;
        self.channels[ch].open = false;
        self.channels[ch].out.clear();
        let socket = self.channels[ch].socket;
        if io.is_open(socket) {
            io.close(socket);
        }
        for circ in circuits {
            self.close_circuit(io, circ, CircuitOutcome::Failed, false);
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

    /// Starts the directory fetches that are due and arms the timer for the next.
    fn poll_directory(&mut self, io: &mut impl Io<ClientTimer>) {
        let now = io.now();
        let Some(d) = self.directory.as_mut() else {
            return;
        };
        let mut due = Vec::new();
        while let Some(request) = d.take_due(now) {
            due.push(request);
        }
        let next = d.next_due();
        for request in due {
            let user = request.user;
            self.dir_request(io, request, DirPart::Consensus { user });
        }
        if let Some(at) = next {
            if self.directory_wake.is_none_or(|w| w > at || w < now) {
                self.directory_wake = Some(at);
                io.arm_at(at.max(now), ClientTimer::Directory(at));
            }
        }
    }

    fn dir_request(&mut self, io: &mut impl Io<ClientTimer>, r: DirRequest, part: DirPart) {
        // A BEGIN_DIR names no destination (the relay answers from its own cache), so the
        // download's server is a placeholder; `attach` finds the user's directory circuit.
        let server = self.servers[0];
        let dl = self.new_download(io, r.bytes, server, REQUEST_TIMEOUT, u32::MAX, Some(part));
        self.attach(io, dl);
    }

    /// A directory request ended, with `received` bytes of response.
    fn directory_done(
        &mut self,
        io: &mut impl Io<ClientTimer>,
        part: DirPart,
        received: u64,
        ok: bool,
    ) {
        let now = io.now();
        let Some(d) = self.directory.as_mut() else {
            return;
        };
        let user = part.user();
        if !ok {
            if !d.fetching(user) {
                return;
            }
            d.failed(user, now);
            // The fetch starts over: its other requests still out are abandoned.
            let others: Vec<u32> = (0..self.downloads.slots().len() as u32)
                .filter(|&i| {
                    self.downloads[i]
                        .as_ref()
                        .is_some_and(|x| x.dir.is_some_and(|p| p.user() == user))
                })
                .collect();
            for dl in others {
                self.finish(io, dl, DownloadOutcome::Error("directory fetch failed"));
            }
        } else {
            match part {
                DirPart::Consensus { user } => {
                    for r in d.consensus_done(user, received) {
                        self.dir_request(io, r, DirPart::Microdescs { user });
                    }
                }
                DirPart::Microdescs { user } => d.microdescs_done(user, received),
            }
        }
        self.poll_directory(io);
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

    /// How long a circuit takes new streams after its first (`MaxCircuitDirtiness`).
    fn dirtiness(&self) -> SimDuration {
        (self.options.max_circuit_dirtiness)
            .unwrap_or_else(|| secs(self.world.params.max_circuit_dirtiness_s))
    }

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
            ClientTimer::DownloadTimeout {
                download,
                generation,
            } => {
                let outcome = self.downloads[download]
                    .as_ref()
                    .filter(|d| d.generation == generation)
                    .map(|d| {
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
            ClientTimer::BeginTimeout {
                download,
                generation,
                retries,
            } => {
                let waiting = self.downloads[download].as_ref().is_some_and(|d| {
                    d.generation == generation
                        && d.retries == retries
                        && d.state == DlState::Connecting
                });
                if waiting {
                    self.retry_stream(io, download);
                }
            }
            ClientTimer::Expire {
                circuit,
                generation,
            } => {
                let idle = self.circuits[circuit]
                    .as_ref()
                    .is_some_and(|c| c.generation == generation && c.downloads.is_empty());
                if idle {
                    self.close_circuit(io, circuit, CircuitOutcome::Built, true);
                }
            }
            ClientTimer::BuildTimeout {
                circuit,
                generation,
            } => {
                let building = self.circuits[circuit].as_ref().is_some_and(|c| {
                    c.generation == generation && matches!(c.state, CircState::Building { .. })
                });
                if building {
                    if self.circuits[circuit].as_ref().unwrap().hops == 3 {
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
