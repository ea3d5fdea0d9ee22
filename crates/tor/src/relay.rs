//! A Tor relay: channels to clients and other relays, circuits with their cell queues, the
//! circuit scheduler, token buckets, ConnLimit, and (at exits) streams to file servers.
//!
//! Cells arrive on a channel's connections, which the relay reads only as far as its read
//! bucket allows. Each cell is either for this hop (CREATE2, EXTEND2, BEGIN, DATA at the exit,
//! SENDME...) or is put on its circuit's queue towards the next or previous hop. The scheduler
//! (KIST by default) moves queued cells into connection sockets, quietest circuit first
//! (EWMA), no more per socket than the kernel can send soon, and no more in all than the
//! write bucket allows.
//!
//! A channel (all circuits between this relay and one peer) holds one connection under the
//! vanilla design and several under the designs of `tor.channel`: the design decides when
//! connections open and close and which connection a cell goes on ([`crate::transport`]
//! holds those decisions); cells that may overtake each other on different connections carry
//! sequence numbers and are put back in order by the receiving channel.
//!
//! The relay is a sans-IO state machine ([`crate::io::Machine`]): everything it does to the
//! outside world goes through the [`Io`] of the call, so its unit tests below drive it
//! without an engine or a network stack.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::Arc;

use onionlab_engine::time::{millis, SimTime, NANOS_PER_SEC};
use onionlab_engine::HostId;
use onionlab_net::{SocketEvent, SocketId};
use onionlab_torcore::ewma::{CircuitEwma, CircuitMux, EwmaClock};
use onionlab_torcore::kist::{kist_write_limit, kistlite_write_limit};
use onionlab_torcore::token_bucket::RelayBuckets;
use onionlab_torcore::{
    Cell, CellCommand, ChannelDesign, FlowControl, ImuxScheduler, RelayCommand, SchedulerKind,
    CELL_BYTES, RELAY_DATA_BYTES,
};

use crate::circ_ids::CircIdTable;
use crate::flow::{CircuitReceiver, CircuitSender, StreamReceiver, StreamSender};
use crate::host::Ev;
use crate::io::{Io, Machine, TimerEvent};
use crate::measure::RelaySample;
use crate::transport::{self, ConnAge, Reorder, IMUX_SEQ_BYTES};
use crate::wire::{Wire, INITIATOR_BIT, REQUEST_BYTES};
use crate::world::{TorWorld, HTTP_PORT, OR_PORT};

/// Timers of a relay.
#[derive(Clone, Copy, Debug)]
pub enum RelayTimer {
    /// Run the circuit scheduler.
    Schedule,
    /// Token buckets refill.
    Refill,
    /// Record this second's counters.
    Sample,
    /// IMUX's once-a-second connection manager.
    ManageConnections,
}

impl TimerEvent for RelayTimer {
    fn event(self) -> Ev {
        Ev::Relay(self)
    }
}

/// A relay's configured rates (bytes per second) and socket limit.
#[derive(Clone, Debug)]
pub struct RelayLimits {
    pub bandwidth_rate: u64,
    pub bandwidth_burst: u64,
    pub relay_bandwidth_rate: Option<u64>,
    pub relay_bandwidth_burst: Option<u64>,
    /// This relay's ConnLimit, if not the network's `tor.conn_limit`.
    pub conn_limit: Option<u32>,
}

const NONE: u32 = u32::MAX;
/// tor's END_CIRC_REASON_CONNECTFAILED: the next hop's connection could not be made (tor
/// closes a circuit so when ConnLimit keeps it from connecting).
pub const DESTROY_CONNECT_FAILED: u32 = 6;

/// One direction of a circuit: the channel it leaves on, its id there, and its queue.
struct Side {
    chan: u32,
    /// The connection its cells go on, where the design pins circuits to one (`NONE` where
    /// each cell's connection is chosen as it is written).
    conn: u32,
    circ_id: u32,
    queue: VecDeque<Cell>,
    /// Sequence number of the next cell sent on this side (multi-connection channels).
    seq_out: u32,
    /// Sequence number of the next cell expected from the peer on this side.
    seq_in: u32,
    /// Torchestra: the circuit travels on the heavy connection.
    heavy: bool,
}

impl Side {
    fn new(chan: u32, circ_id: u32, seq_in: u32) -> Self {
        Side {
            chan,
            conn: NONE,
            circ_id,
            queue: VecDeque::new(),
            seq_out: 0,
            seq_in,
            heavy: false,
        }
    }
}

/// How a circuit's cells fared in this relay's queues.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Cells written to a channel.
    pub cells: u64,
    /// The longest the circuit's own queue got.
    pub max_queue: u32,
    /// Summed over the cells written: the cells other circuits had queued for the same
    /// channel at that moment (cells that this circuit's cells overtook).
    pub overtaken: u64,
}

impl QueueStats {
    /// Cells of other circuits waiting when one of this circuit's cells left, on average.
    pub fn mean_overtaken(&self) -> f64 {
        self.overtaken as f64 / self.cells.max(1) as f64
    }
}

struct Circuit {
    /// Towards the client.
    prev: Side,
    /// Towards the exit; `None` at the last hop.
    next: Option<Side>,
    /// This relay's position (1 = guard).
    hop: u8,
    /// Torchestra ideal: the client declared the circuit bulk.
    declared_heavy: bool,
    exit: Option<Box<ExitCircuit>>,
    stats: QueueStats,
}

impl Circuit {
    fn side_on(&mut self, ch: u32, circ_id: u32) -> Option<&mut Side> {
        if self.prev.chan == ch && self.prev.circ_id == circ_id {
            return Some(&mut self.prev);
        }
        self.next
            .as_mut()
            .filter(|n| n.chan == ch && n.circ_id == circ_id)
    }

    /// The side that leaves on channel `ch` (prev first: a circuit may use one channel for
    /// both sides only if a peer extends back through us, and then prev is the older).
    fn side_for(&mut self, ch: u32) -> &mut Side {
        if self.prev.chan == ch {
            &mut self.prev
        } else {
            self.next
                .as_mut()
                .expect("a circuit queued on a channel has a side there")
        }
    }

    /// As [`Circuit::side_for`], to read.
    fn side_on_chan(&self, ch: u32) -> &Side {
        if self.prev.chan == ch {
            &self.prev
        } else {
            self.next.as_ref().unwrap_or(&self.prev)
        }
    }
}

/// What the last hop keeps for a circuit that carries streams.
struct ExitCircuit {
    sender: CircuitSender,
    receiver: CircuitReceiver,
    streams: Vec<u32>,
    /// Round-robin position among streams when packaging.
    turn: usize,
    /// Packaging stopped because the circuit's queue reached the high watermark.
    edge_blocked: bool,
    /// DATA cells packaged, and cells acknowledged by the circuit-level SENDMEs accepted:
    /// plain counts, kept apart from the window and congestion-control state so that the
    /// cells in flight can be checked against the window independently of the code enforcing
    /// it.
    packaged: u64,
    acked: u64,
}

/// An exit's stream: a TCP connection to a file server, relayed as DATA cells.
struct ExitStream {
    circ: u32,
    stream_id: u16,
    socket: SocketId,
    sender: StreamSender,
    receiver: StreamReceiver,
    connected: bool,
    /// Bytes asked for by a request that arrived before the server connection was up.
    request: Option<u32>,
    server_done: bool,
    /// As `ExitCircuit::packaged` and `acked`, for stream-level SENDMEs.
    packaged: u64,
    acked: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ConnState {
    /// Carries cells.
    Active,
    /// IMUX closing handshake: we sent CLOSING_CONN_BEGIN and wait for the peer's END.
    Closing,
}

/// One TCP connection of a channel.
struct Conn {
    socket: SocketId,
    chan: u32,
    /// The TCP handshake has completed.
    open: bool,
    state: ConnState,
    /// The socket refused a cell; wait for it to become writable.
    blocked: bool,
    /// Waiting for read tokens.
    read_blocked: bool,
    /// What the scheduler may still write to the socket in its current run.
    limit: u64,
    /// Bytes the kernel held at the start of the scheduler run plus what the run wrote since
    /// (IMUX's shortest queue).
    queued_bytes: u64,
    /// Circuits pinned to this connection.
    circuits: u32,
    /// Order of creation, and when a cell last left (IMUX's closing rule).
    created: u64,
    last_used: SimTime,
    /// Cells sent, decaying like a circuit's count (IMUX's EWMA mapping; kept under IMUX only).
    ewma: CircuitEwma,
    /// The scheduler wrote to it in the current run (it is flushed at the end of the run).
    touched: bool,
    /// The scheduler run whose `limit` and `queued_bytes` these are.
    limit_run: u32,
}

impl Conn {
    fn usable(&self) -> bool {
        self.open && !self.blocked && self.state == ConnState::Active && self.socket.slot != NONE
    }
}

struct Channel {
    peer: HostId,
    initiator: bool,
    /// We opened this channel, so we open its connections (IMUX, PCTCP, Torchestra).
    opener: bool,
    /// The opener's index for the channel, named in each connection's Join message.
    token: u32,
    /// Its live connections.
    conns: Vec<u32>,
    /// Torchestra's light and heavy connections (`NONE` until they exist).
    light: u32,
    heavy: u32,
    /// Circuits by the id the peer chose (without the initiator bit).
    theirs: CircIdTable,
    /// Circuits by the id this relay chose.
    ours: CircIdTable,
    /// Ids of ours that may be given out again (single-connection channels only).
    ours_free: Vec<u32>,
    /// The lowest id of ours never given out.
    next_id: u32,
    /// Circuits bound to the channel.
    ncircs: u32,
    /// Circuits with cells queued for this channel.
    mux: CircuitMux,
    /// Whether the channel is in the scheduler's pending list.
    pending: bool,
    /// Cells queued on all circuits for this channel.
    queued: u64,
    /// Circuits whose connection could take no cell in this scheduler run.
    parked: Vec<u32>,
    /// Cells that arrived ahead of an earlier one of their circuit.
    reorder: Reorder,
    /// IMUX round robin: the next connection to pin a circuit to.
    turn: usize,
    /// In a scheduler run: its connections that may take a cell.
    room: u32,
    /// In a scheduler run under IMUX's EWMA mapping: its usable connections, quietest first,
    /// and its circuits' ranks (`(circuit, circuits quieter)`, by circuit), both taken at the
    /// start of the run (a run is a few milliseconds).
    order: Vec<u32>,
    circ_ranks: Vec<(u32, u32)>,
    /// Cells on it carry sequence numbers (a multi-connection channel of a design whose
    /// circuits may change connection; never a client's channel).
    sequenced: bool,
    /// IMUX, channels we opened: the most connections the peer has let us keep, learnt when
    /// it refused or closed one (`u32::MAX` until it does), and until when we hold to it.
    peer_cap: u32,
    peer_hold_until: SimTime,
    closed: bool,
}

impl Channel {
    fn new(peer: HostId, initiator: bool, opener: bool, clock: &EwmaClock, now: SimTime) -> Self {
        Channel {
            peer,
            initiator,
            opener,
            token: NONE,
            conns: Vec::new(),
            light: NONE,
            heavy: NONE,
            theirs: CircIdTable::default(),
            ours: CircIdTable::default(),
            next_id: 0,
            ours_free: Vec::new(),
            ncircs: 0,
            mux: CircuitMux::new(clock, now),
            pending: false,
            queued: 0,
            parked: Vec::new(),
            reorder: Reorder::default(),
            turn: 0,
            room: 0,
            order: Vec::new(),
            circ_ranks: Vec::new(),
            sequenced: false,
            peer_cap: u32::MAX,
            peer_hold_until: 0,
            closed: false,
        }
    }

    fn lookup(&self, circ_id: u32) -> Option<u32> {
        let chosen_by_initiator = circ_id & INITIATOR_BIT != 0;
        let table = if chosen_by_initiator == self.initiator {
            &self.ours
        } else {
            &self.theirs
        };
        table.get(circ_id & !INITIATOR_BIT)
    }

    fn bind_theirs(&mut self, circ_id: u32, circ: u32) -> bool {
        let i = circ_id & !INITIATOR_BIT;
        if !self.theirs.is_free(i) {
            return false;
        }
        self.theirs.set(i, circ);
        self.ncircs += 1;
        true
    }

    /// A new id of ours for `circ`. A sequenced channel never reuses one (see `circ_ids`);
    /// the others reuse the last freed first, as before.
    fn allocate(&mut self, circ: u32) -> u32 {
        let i = match self.ours_free.pop() {
            Some(i) if !self.sequenced => i,
            _ => {
                let i = self.next_id;
                self.next_id = (self.next_id + 1) & !INITIATOR_BIT;
                i
            }
        };
        self.ours.set(i, circ);
        self.ncircs += 1;
        i | if self.initiator { INITIATOR_BIT } else { 0 }
    }

    fn release(&mut self, circ_id: u32) {
        let chosen_by_initiator = circ_id & INITIATOR_BIT != 0;
        let i = circ_id & !INITIATOR_BIT;
        let ours = chosen_by_initiator == self.initiator;
        let had = if ours {
            self.ours.clear(i)
        } else {
            self.theirs.clear(i)
        };
        if had {
            self.ncircs -= 1;
            if ours && !self.sequenced {
                self.ours_free.push(i);
            }
        }
        self.reorder.forget(circ_id);
    }
}

/// An audit of KIST's write limits taken from the sockets themselves rather than from the
/// scheduler's own accounting: after every KIST run, each socket the run wrote to is asked
/// for its state (before the writes are handed to TCP), and its unsent bytes are compared
/// with what KIST lets a socket be filled to, `(cwnd - unacked) * mss + cwnd * mss * factor`
/// (tor's `tcp_space` plus its extra space, with nothing else queued).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KistAudit {
    /// Sockets checked (one per socket written to per scheduler run).
    pub checks: u64,
    /// The largest excess of unsent bytes over that allowance seen; negative when every
    /// socket stayed below it, `i64::MIN` before the first check.
    pub max_excess: i64,
}

impl Default for KistAudit {
    fn default() -> Self {
        KistAudit {
            checks: 0,
            max_excess: i64::MIN,
        }
    }
}

/// Counters of the current second.
#[derive(Default)]
struct Counters {
    bytes_read: u64,
    bytes_written: u64,
    cells_in: u64,
    cells_out: u64,
    /// Circuits closed because their queue exceeded the cap.
    circuits_killed: u64,
    /// Connections refused or not opened because of ConnLimit.
    conn_limit_refusals: u64,
}

/// What the channel design counts, for tests and the IMUX audit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChannelStats {
    /// Connections opened by this relay to other relays.
    pub conns_opened: u64,
    /// Connections closed by the closing handshake (either side).
    pub conns_closed: u64,
    /// The most sockets this relay had open at once.
    pub max_open_sockets: u32,
    /// Cells that arrived ahead of an earlier cell of their circuit and waited.
    pub cells_reordered: u64,
    /// Sequenced cells handed on out of order (must stay 0).
    pub order_violations: u64,
    /// Torchestra: circuits moved to the heavy connection, and back.
    pub switched_heavy: u64,
    pub switched_light: u64,
}

pub struct Relay {
    /// Index in the consensus.
    pub relay: usize,
    world: Arc<TorWorld>,
    buckets: RelayBuckets,
    clock: EwmaClock,
    design: ChannelDesign,
    conn_limit: u32,
    channels: Vec<Channel>,
    /// Provisional channels of accepted connections that joined another channel: they never
    /// carried a circuit and nothing refers to them, so their slots are reused.
    free_channels: Vec<u32>,
    conns: Vec<Conn>,
    free_conns: Vec<u32>,
    conn_by_socket: Vec<u32>,
    conns_created: u64,
    chan_by_peer: HashMap<HostId, u32>,
    /// Channels opened by a peer, by (peer, the peer's index of the channel).
    chan_by_token: HashMap<(HostId, u32), u32>,
    circuits: Vec<Option<Circuit>>,
    free_circuits: Vec<u32>,
    live_circuits: u32,
    streams: Vec<Option<ExitStream>>,
    free_streams: Vec<u32>,
    stream_by_socket: Vec<u32>,
    /// Channels with cells to send (scheduler's work list).
    pending: Vec<u32>,
    schedule_armed: bool,
    /// When the KIST scheduler last ran: new work waits only for the rest of the run
    /// interval since then, and an idle relay's scheduler runs at once, as in tor.
    last_schedule_run: Option<SimTime>,
    /// Connections with data left unread for lack of read tokens.
    read_waiting: Vec<u32>,
    /// Exit circuits that could not package for lack of read tokens.
    package_waiting: Vec<u32>,
    refill_armed: bool,
    queued_cells: u64,
    open_sockets: u32,
    now_counters: Counters,
    pub samples: Vec<RelaySample>,
    /// Largest number of cells in flight seen on any exit circuit: DATA cells packaged minus
    /// the cells acknowledged by the SENDMEs accepted, counted apart from the window state.
    pub max_circuit_in_flight: u32,
    /// The same for exit streams (windowed streams, SENDME flow control, only).
    pub max_stream_in_flight: u32,
    /// Times a channel still had cells when its write limit ran out.
    pub write_limit_hits: u64,
    /// KIST's limits as the sockets saw them.
    pub kist_audit: KistAudit,
    pub channel_stats: ChannelStats,
    /// Reused by IMUX's EWMA mapping to rank a channel's connections in each scheduler run.
    rank_scratch: Vec<(f64, u32)>,
    /// Counts scheduler runs, so a connection's write limit is read once per run, when first
    /// needed (a multi-connection channel may hold hundreds and use a few in one run).
    run_stamp: u32,
}

/// One channel as tests and diagnostics see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChannelView {
    pub peer: HostId,
    /// This relay opened it.
    pub opener: bool,
    /// Its connections (open or still connecting).
    pub conns: usize,
    /// Circuits bound to it.
    pub circuits: u32,
}

/// One direction of a circuit as tests see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CircuitView {
    /// Cells this relay sent on the circuit (both directions).
    pub cells: u64,
    /// Torchestra: a direction of it travels on a heavy connection.
    pub heavy: bool,
    /// The client declared it bulk (idealised Torchestra).
    pub declared_heavy: bool,
}

fn cell_wire_bytes(world: &TorWorld) -> u64 {
    (CELL_BYTES + world.params.tls_overhead_per_cell) as u64
}

/// Whether a design's cells may overtake each other on different connections, so that
/// they carry sequence numbers.
fn sequenced(design: ChannelDesign) -> bool {
    matches!(
        design,
        ChannelDesign::Imux | ChannelDesign::Torchestra | ChannelDesign::TorchestraIdeal
    )
}

impl Relay {
    pub fn new(relay: usize, world: Arc<TorWorld>, limits: &RelayLimits) -> Self {
        let p = &world.params;
        let relayed = limits
            .relay_bandwidth_rate
            .map(|rate| (rate, limits.relay_bandwidth_burst.unwrap_or(rate)));
        let buckets = RelayBuckets::new(
            limits.bandwidth_rate,
            limits.bandwidth_burst,
            relayed,
            millis(p.token_bucket_refill_ms),
            0,
        );
        let clock = EwmaClock::from_params(p, 0);
        let conn_limit = limits.conn_limit.unwrap_or(p.conn_limit);
        Relay {
            relay,
            buckets,
            clock,
            design: p.channel,
            conn_limit,
            world,
            channels: Vec::new(),
            free_channels: Vec::new(),
            conns: Vec::new(),
            free_conns: Vec::new(),
            conn_by_socket: Vec::new(),
            conns_created: 0,
            chan_by_peer: HashMap::new(),
            chan_by_token: HashMap::new(),
            circuits: Vec::new(),
            free_circuits: Vec::new(),
            live_circuits: 0,
            streams: Vec::new(),
            free_streams: Vec::new(),
            stream_by_socket: Vec::new(),
            pending: Vec::new(),
            schedule_armed: false,
            last_schedule_run: None,
            read_waiting: Vec::new(),
            package_waiting: Vec::new(),
            refill_armed: false,
            queued_cells: 0,
            open_sockets: 0,
            now_counters: Counters::default(),
            samples: Vec::new(),
            max_circuit_in_flight: 0,
            max_stream_in_flight: 0,
            write_limit_hits: 0,
            kist_audit: KistAudit::default(),
            channel_stats: ChannelStats::default(),
            rank_scratch: Vec::new(),
            run_stamp: 0,
        }
    }

    /// Bytes a cell takes on channel `ch`: IMUX adds its sequence number.
    fn chan_cell_bytes(&self, ch: u32) -> u64 {
        let seq = if self.design == ChannelDesign::Imux && self.channels[ch as usize].sequenced {
            IMUX_SEQ_BYTES
        } else {
            0
        };
        cell_wire_bytes(&self.world) + seq
    }

    /// The number of sockets this relay may hold: its ConnLimit, or under IMUX the share
    /// `ConnLimit * tau` that the design keeps for itself.
    fn socket_limit(&self) -> u32 {
        if self.design == ChannelDesign::Imux {
            transport::imux_socket_cap(self.conn_limit, self.world.params.imux_tau)
        } else {
            self.conn_limit
        }
    }

    fn note_socket_opened(&mut self) {
        self.open_sockets += 1;
        self.channel_stats.max_open_sockets =
            self.channel_stats.max_open_sockets.max(self.open_sockets);
    }

    /// Handles everything the stack reported, including what handling it caused.
    fn pump(&mut self, io: &mut impl Io<RelayTimer>) {
        while let Some(event) = io.poll_event() {
            self.on_socket(io, event);
        }
        if self.world.params.scheduler == SchedulerKind::Vanilla && !self.pending.is_empty() {
            self.run_scheduler(io);
            while let Some(event) = io.poll_event() {
                self.on_socket(io, event);
            }
        }
    }

    fn conn_of(&self, socket: SocketId) -> Option<u32> {
        self.conn_by_socket
            .get(socket.slot as usize)
            .copied()
            .filter(|&k| k != NONE && self.conns[k as usize].socket == socket)
    }

    fn stream_of(&self, socket: SocketId) -> Option<u32> {
        self.stream_by_socket
            .get(socket.slot as usize)
            .copied()
            .filter(|&s| {
                s != NONE
                    && self.streams[s as usize]
                        .as_ref()
                        .is_some_and(|st| st.socket == socket)
            })
    }

    fn map_socket(table: &mut Vec<u32>, socket: SocketId, value: u32) {
        let i = socket.slot as usize;
        if table.len() <= i {
            table.resize(i + 1, NONE);
        }
        table[i] = value;
    }

    fn add_channel(&mut self, now: SimTime, peer: HostId, initiator: bool) -> u32 {
        let idx = self
            .free_channels
            .pop()
            .unwrap_or(self.channels.len() as u32);
        let mut chan = Channel::new(peer, initiator, initiator, &self.clock, now);
        if initiator {
            chan.token = idx;
            chan.sequenced = sequenced(self.design);
        }
        if idx as usize == self.channels.len() {
            self.channels.push(chan);
        } else {
            self.channels[idx as usize] = chan;
        }
        idx
    }

    /// IMUX: the peer refused or closed a connection of a channel we opened, so its own
    /// share for the channel is below ours. Hold the channel at what is left for
    /// `IMUX_PEER_HOLD`, then probe one connection a second: without this the opener reopens
    /// every refused connection each second and both relays churn thousands of handshakes.
    /// Called while the refused or closed connection is still one of the channel's.
    fn peer_pushback(&mut self, ch: u32, now: SimTime) {
        let chan = &mut self.channels[ch as usize];
        if self.design != ChannelDesign::Imux || !chan.opener {
            return;
        }
        let remaining = chan.conns.len().saturating_sub(1) as u32;
        chan.peer_cap = remaining.max(1);
        chan.peer_hold_until = now.saturating_add(transport::IMUX_PEER_HOLD);
    }

    /// Adds a connection (its socket already made) to a channel.
    fn add_conn(
        &mut self,
        io: &mut impl Io<RelayTimer>,
        ch: u32,
        socket: SocketId,
        open: bool,
    ) -> u32 {
        let now = io.now();
        let conn = Conn {
            socket,
            chan: ch,
            open,
            state: ConnState::Active,
            blocked: false,
            read_blocked: false,
            limit: 0,
            queued_bytes: 0,
            circuits: 0,
            created: self.conns_created,
            last_used: now,
            ewma: CircuitEwma::new(&self.clock, now),
            touched: false,
            limit_run: 0,
        };
        self.conns_created += 1;
        let k = match self.free_conns.pop() {
            Some(k) => {
                self.conns[k as usize] = conn;
                k
            }
            None => {
                self.conns.push(conn);
                (self.conns.len() - 1) as u32
            }
        };
        Self::map_socket(&mut self.conn_by_socket, socket, k);
        io.set_auto_read(socket, false);
        self.note_socket_opened();
        self.channels[ch as usize].conns.push(k);
        k
    }

    /// Opens one more connection of a channel we opened; false at the socket limit.
    fn open_conn(&mut self, io: &mut impl Io<RelayTimer>, ch: u32, role: u32) -> Option<u32> {
        if self.open_sockets >= self.socket_limit() {
            self.now_counters.conn_limit_refusals += 1;
            return None;
        }
        let peer = self.channels[ch as usize].peer;
        let socket = io.connect(peer, OR_PORT);
        let k = self.add_conn(io, ch, socket, false);
        self.channel_stats.conns_opened += 1;
        if self.design != ChannelDesign::Vanilla {
            let token = self.channels[ch as usize].token;
            let cell_bytes = cell_wire_bytes(&self.world);
            // Queued in the socket until the handshake completes, so it is the first message.
            io.write_message(
                socket,
                cell_bytes,
                Wire::Join {
                    channel: token,
                    heavy: role == 1,
                },
            );
        }
        Some(k)
    }

    /// Removes a connection from its channel and frees its slot (the socket is closed or
    /// aborted by the caller).
    fn drop_conn(&mut self, k: u32) {
        let conn = &mut self.conns[k as usize];
        if conn.socket.slot == NONE {
            return;
        }
        let socket = conn.socket;
        let ch = conn.chan;
        conn.socket.slot = NONE;
        conn.open = false;
        let read_blocked = std::mem::take(&mut conn.read_blocked);
        self.conn_by_socket[socket.slot as usize] = NONE;
        self.open_sockets -= 1;
        self.free_conns.push(k);
        if read_blocked {
            // Its slot may be reused before the refill: do not read a stranger's socket.
            self.read_waiting.retain(|&x| x != k);
        }
        let chan = &mut self.channels[ch as usize];
        chan.conns.retain(|&c| c != k);
        if chan.light == k {
            chan.light = NONE;
        }
        if chan.heavy == k {
            chan.heavy = NONE;
        }
    }

    fn on_socket(&mut self, io: &mut impl Io<RelayTimer>, event: SocketEvent<Wire>) {
        match event {
            SocketEvent::Accepted { socket, port, peer } => {
                if port != OR_PORT {
                    return;
                }
                if self.open_sockets >= self.socket_limit() {
                    self.now_counters.conn_limit_refusals += 1;
                    io.abort(socket);
                    return;
                }
                // Until a Join names another channel, the connection is a channel of its own
                // (always so for vanilla peers and for clients).
                let ch = self.add_channel(io.now(), peer, false);
                self.add_conn(io, ch, socket, true);
                if self.design == ChannelDesign::Vanilla {
                    // A relay that connects to us may be asked to extend back through us.
                    self.chan_by_peer.entry(peer).or_insert(ch);
                }
            }
            SocketEvent::Connected(socket) => {
                if let Some(k) = self.conn_of(socket) {
                    self.conns[k as usize].open = true;
                    let ch = self.conns[k as usize].chan;
                    self.mark_pending(io, ch);
                } else if let Some(st) = self.stream_of(socket) {
                    self.server_connected(io, st);
                }
            }
            SocketEvent::Readable(socket) => {
                if let Some(k) = self.conn_of(socket) {
                    self.read_conn(io, k);
                } else if let Some(st) = self.stream_of(socket) {
                    let circ = self.streams[st as usize].as_ref().unwrap().circ;
                    self.package(io, circ);
                }
            }
            SocketEvent::Data { socket, bytes } => {
                if self.conn_of(socket).is_some() {
                    self.now_counters.bytes_read += bytes;
                }
            }
            SocketEvent::Message { socket, message } => {
                if let Some(k) = self.conn_of(socket) {
                    self.on_message(io, k, message);
                }
            }
            SocketEvent::Writable(socket) => {
                if let Some(k) = self.conn_of(socket) {
                    self.conns[k as usize].blocked = false;
                    let ch = self.conns[k as usize].chan;
                    if !self.channels[ch as usize].mux.is_empty() {
                        self.mark_pending(io, ch);
                    }
                }
            }
            SocketEvent::PeerClosed(socket) => {
                if let Some(k) = self.conn_of(socket) {
                    self.conn_lost(io, k);
                } else if let Some(st) = self.stream_of(socket) {
                    self.streams[st as usize].as_mut().unwrap().server_done = true;
                    let circ = self.streams[st as usize].as_ref().unwrap().circ;
                    self.package(io, circ);
                }
            }
            SocketEvent::Closed(socket)
            | SocketEvent::Reset(socket)
            | SocketEvent::TimedOut(socket) => {
                if let Some(k) = self.conn_of(socket) {
                    self.conn_lost(io, k);
                } else if let Some(st) = self.stream_of(socket) {
                    let done = self.streams[st as usize].as_ref().unwrap().server_done;
                    if done {
                        // The server closed after sending everything: package the rest.
                        let circ = self.streams[st as usize].as_ref().unwrap().circ;
                        self.package(io, circ);
                    } else {
                        self.end_stream(io, st, true);
                    }
                }
            }
            SocketEvent::Datagram { .. } => {}
        }
    }

    /// A connection ended without the closing handshake. Vanilla and Torchestra channels
    /// fail with it; a PCTCP connection that carries no circuit (its circuit's DESTROY came
    /// first) and an IMUX connection of a channel with others left just go.
    fn conn_lost(&mut self, io: &mut impl Io<RelayTimer>, k: u32) {
        let ch = self.conns[k as usize].chan;
        self.peer_pushback(ch, io.now());
        let conn = &self.conns[k as usize];
        let quiet = match self.design {
            ChannelDesign::Pctcp => conn.circuits == 0,
            ChannelDesign::Imux => self.channels[ch as usize].conns.len() > 1,
            _ => false,
        };
        if quiet {
            let socket = conn.socket;
            self.drop_conn(k);
            if io.is_open(socket) {
                io.close(socket);
            }
            if self.channels[ch as usize].conns.is_empty() {
                self.close_channel(io, ch);
            }
        } else if self.design == ChannelDesign::Pctcp && self.channels[ch as usize].conns.len() > 1
        {
            // A PCTCP connection is its circuit's alone: only that circuit fails with it.
            let socket = conn.socket;
            let chan = &self.channels[ch as usize];
            let mut pinned = Vec::new();
            for circ in chan.ours.circuits().chain(chan.theirs.circuits()) {
                if let Some(c) = self.circuits[circ as usize].as_mut() {
                    if c.side_for(ch).conn == k {
                        pinned.push((circ, c.prev.chan == ch));
                    }
                }
            }
            self.drop_conn(k);
            if io.is_open(socket) {
                io.abort(socket);
            }
            for (circ, from_prev) in pinned {
                self.destroy_circuit(io, circ, Some(from_prev));
            }
        } else {
            self.close_channel(io, ch);
        }
    }

    fn on_message(&mut self, io: &mut impl Io<RelayTimer>, k: u32, message: Wire) {
        match message {
            Wire::Cell(cell) => {
                self.now_counters.cells_in += 1;
                let ch = self.conns[k as usize].chan;
                self.handle_cell(io, ch, k, cell);
            }
            Wire::Sequenced { cell, seq } => {
                self.now_counters.cells_in += 1;
                self.sequenced_cell(io, k, cell, seq);
            }
            Wire::Join { channel, heavy } => self.join(io, k, channel, heavy),
            Wire::ClosingBegin => {
                self.peer_pushback(self.conns[k as usize].chan, io.now());
                // Everything we wrote on it is in the socket already: answer and close.
                let conn = &mut self.conns[k as usize];
                conn.state = ConnState::Closing;
                let socket = conn.socket;
                let bytes = cell_wire_bytes(&self.world);
                io.write_message(socket, bytes, Wire::ClosingEnd);
                io.flush(socket);
                self.finish_closing(io, k);
            }
            Wire::ClosingEnd => self.finish_closing(io, k),
            Wire::Switch { circ_id, heavy } => {
                let ch = self.conns[k as usize].chan;
                let chan = &self.channels[ch as usize];
                let target = if heavy { chan.heavy } else { chan.light };
                if target == NONE {
                    return;
                }
                if let Some(circ) = chan.lookup(circ_id) {
                    self.pin_torchestra(circ, ch, circ_id, heavy, target);
                }
            }
            Wire::Request { .. } => {}
        }
    }

    /// A connection of a channel opened by the peer names the channel it belongs to.
    fn join(&mut self, io: &mut impl Io<RelayTimer>, k: u32, token: u32, heavy: bool) {
        let own = self.conns[k as usize].chan;
        let peer = self.channels[own as usize].peer;
        let ch = match self.chan_by_token.get(&(peer, token)) {
            Some(&ch) if !self.channels[ch as usize].closed => ch,
            _ => {
                self.chan_by_token.insert((peer, token), own);
                self.channels[own as usize].token = token;
                own
            }
        };
        if ch != own {
            // Move the connection from its provisional channel (which has no circuits).
            let chan = &mut self.channels[own as usize];
            chan.conns.clear();
            chan.closed = true;
            self.free_channels.push(own);
            self.conns[k as usize].chan = ch;
            self.channels[ch as usize].conns.push(k);
        }
        let chan = &mut self.channels[ch as usize];
        chan.sequenced = sequenced(self.design);
        if self.design == ChannelDesign::Torchestra || self.design == ChannelDesign::TorchestraIdeal
        {
            if heavy {
                chan.heavy = k;
            } else {
                chan.light = k;
            }
        }
        if self.design == ChannelDesign::Imux
            && self.channels[ch as usize].conns.len() > 1
            && self.open_sockets > self.socket_limit()
        {
            // Over the cap: refuse the extra connection with the closing handshake.
            self.now_counters.conn_limit_refusals += 1;
            self.begin_closing(io, k);
        }
    }

    /// Starts IMUX's closing handshake on connection `k`: no more cells go on it.
    fn begin_closing(&mut self, io: &mut impl Io<RelayTimer>, k: u32) {
        let conn = &mut self.conns[k as usize];
        if conn.state != ConnState::Active {
            return;
        }
        if !conn.open {
            // Not connected yet: nothing was sent on it, nothing to hand over.
            let socket = conn.socket;
            self.drop_conn(k);
            io.abort(socket);
            self.channel_stats.conns_closed += 1;
            return;
        }
        conn.state = ConnState::Closing;
        let socket = conn.socket;
        let bytes = cell_wire_bytes(&self.world);
        io.write_message(socket, bytes, Wire::ClosingBegin);
        io.flush(socket);
    }

    fn finish_closing(&mut self, io: &mut impl Io<RelayTimer>, k: u32) {
        let socket = self.conns[k as usize].socket;
        let ch = self.conns[k as usize].chan;
        self.drop_conn(k);
        io.close(socket);
        self.channel_stats.conns_closed += 1;
        // Circuits pinned to it (round robin) find another connection when they next send.
        if !self.channels[ch as usize].mux.is_empty() {
            self.mark_pending(io, ch);
        }
        if self.channels[ch as usize].conns.is_empty() {
            self.close_channel(io, ch);
        }
    }

    /// A cell of a multi-connection channel: hand it on in its circuit's order.
    fn sequenced_cell(&mut self, io: &mut impl Io<RelayTimer>, k: u32, cell: Cell, seq: u32) {
        let ch = self.conns[k as usize].chan;
        let circ_id = cell.circ_id;
        let expected = self.expected_seq(ch, circ_id);
        if !self.channels[ch as usize]
            .reorder
            .arrive(circ_id, seq, expected, cell)
        {
            self.channel_stats.cells_reordered += 1;
            return;
        }
        if seq < expected {
            self.channel_stats.order_violations += 1;
        }
        let mut next = Some(cell);
        while let Some(cell) = next {
            self.bump_seq_in(ch, circ_id);
            self.handle_cell(io, ch, k, cell);
            if self.channels[ch as usize].closed {
                return;
            }
            let expected = self.expected_seq(ch, circ_id);
            next = self.channels[ch as usize].reorder.take(circ_id, expected);
        }
    }

    /// The next sequence number due on circuit id `circ_id` of `ch` (0 for a circuit not yet
    /// created: its CREATE2 is the first cell).
    fn expected_seq(&mut self, ch: u32, circ_id: u32) -> u32 {
        let Some(circ) = self.channels[ch as usize].lookup(circ_id) else {
            return 0;
        };
        self.circuits[circ as usize]
            .as_mut()
            .and_then(|c| c.side_on(ch, circ_id))
            .map_or(0, |s| s.seq_in)
    }

    fn bump_seq_in(&mut self, ch: u32, circ_id: u32) {
        let Some(circ) = self.channels[ch as usize].lookup(circ_id) else {
            return;
        };
        if let Some(side) = self.circuits[circ as usize]
            .as_mut()
            .and_then(|c| c.side_on(ch, circ_id))
        {
            side.seq_in += 1;
        }
    }

    /// Reads as much of a connection's waiting data as the read bucket allows.
    fn read_conn(&mut self, io: &mut impl Io<RelayTimer>, k: u32) {
        let now = io.now();
        let socket = self.conns[k as usize].socket;
        if socket.slot == NONE {
            return;
        }
        let waiting = io.readable(socket);
        if waiting == 0 {
            return;
        }
        let allowance = self.buckets.read_allowance(now, true);
        let n = io.read(socket, waiting.min(allowance));
        self.buckets.note_read(n, true);
        if n < waiting {
            let c = &mut self.conns[k as usize];
            if !c.read_blocked {
                c.read_blocked = true;
                self.read_waiting.push(k);
            }
            self.arm_refill(io);
        }
    }

    fn arm_refill(&mut self, io: &mut impl Io<RelayTimer>) {
        if !self.refill_armed {
            self.refill_armed = true;
            let now = io.now();
            self.buckets.refill(now);
            // With the buckets refilled up to now the next tick is later; if it is not, the
            // tick arithmetic overflowed (an absurd refill interval) and the next tick is
            // beyond the end of time. Refilling at `now` again would change nothing and spin.
            let next = self.buckets.next_refill();
            let at = if next > now { next } else { SimTime::MAX };
            io.arm_at(at, RelayTimer::Refill);
        }
    }

    fn new_circuit(&mut self, circuit: Circuit) -> u32 {
        self.live_circuits += 1;
        match self.free_circuits.pop() {
            Some(i) => {
                self.circuits[i as usize] = Some(circuit);
                i
            }
            None => {
                self.circuits.push(Some(circuit));
                (self.circuits.len() - 1) as u32
            }
        }
    }

    fn handle_cell(&mut self, io: &mut impl Io<RelayTimer>, ch: u32, k: u32, cell: Cell) {
        if cell.command == CellCommand::Create2 {
            self.on_create(io, ch, k, cell);
            return;
        }
        let Some(circ) = self.channels[ch as usize].lookup(cell.circ_id) else {
            return;
        };
        let c = self.circuits[circ as usize].as_ref().unwrap();
        let from_prev = c.prev.chan == ch && c.prev.circ_id == cell.circ_id;
        match cell.command {
            CellCommand::Destroy => self.destroy_circuit(io, circ, Some(from_prev)),
            CellCommand::Created2 if !from_prev => {
                // Our EXTEND2 succeeded: tell the client.
                let hop = c.hop;
                let reply = Cell::relay(0, RelayCommand::Extended2, hop, 0);
                self.queue_towards(io, circ, false, reply);
            }
            CellCommand::Relay | CellCommand::RelayEarly if from_prev => {
                if cell.hop == c.hop {
                    self.relay_cell_for_us(io, circ, cell);
                } else if c.next.is_some() {
                    self.queue_towards(io, circ, true, cell);
                }
            }
            CellCommand::Relay | CellCommand::RelayEarly => {
                self.queue_towards(io, circ, false, cell);
            }
            _ => {}
        }
    }

    fn on_create(&mut self, io: &mut impl Io<RelayTimer>, ch: u32, k: u32, cell: Cell) {
        let seq_in = u32::from(sequenced(self.design));
        let circ = self.new_circuit(Circuit {
            prev: Side::new(ch, cell.circ_id, seq_in),
            next: None,
            hop: cell.hop.max(1),
            declared_heavy: self.design == ChannelDesign::TorchestraIdeal && cell.arg == 1,
            exit: None,
            stats: QueueStats::default(),
        });
        if !self.channels[ch as usize].bind_theirs(cell.circ_id, circ) {
            // The id is taken: a confused peer. Refuse.
            self.circuits[circ as usize] = None;
            self.free_circuits.push(circ);
            self.live_circuits -= 1;
            return;
        }
        self.assign_conn(circ, false, k);
        let reply = Cell::new(0, CellCommand::Created2);
        self.queue_towards(io, circ, false, reply);
    }

    /// Pins a circuit's side on its channel to a connection where the design pins circuits:
    /// the only one (vanilla), the one the circuit arrived on or was opened for (PCTCP), the
    /// light one or for a declared bulk circuit the heavy one (Torchestra), the next in turn
    /// (IMUX round robin). IMUX's other schedulers choose per cell instead.
    fn assign_conn(&mut self, circ: u32, forward: bool, arrived_on: u32) {
        let c = self.circuits[circ as usize].as_mut().unwrap();
        let declared_heavy = c.declared_heavy;
        let side = if forward {
            c.next.as_mut().unwrap()
        } else {
            &mut c.prev
        };
        let chan = &mut self.channels[side.chan as usize];
        let conn = match self.design {
            ChannelDesign::Vanilla => chan.conns.first().copied().unwrap_or(NONE),
            ChannelDesign::Pctcp => arrived_on,
            ChannelDesign::Torchestra | ChannelDesign::TorchestraIdeal => {
                if declared_heavy && chan.heavy != NONE {
                    side.heavy = true;
                    chan.heavy
                } else if chan.light != NONE {
                    chan.light
                } else {
                    arrived_on
                }
            }
            ChannelDesign::Imux => match self.world.params.imux_scheduler {
                ImuxScheduler::RoundRobin if !chan.conns.is_empty() => {
                    chan.turn = (chan.turn + 1) % chan.conns.len();
                    chan.conns[chan.turn]
                }
                _ => NONE,
            },
        };
        side.conn = conn;
        if conn != NONE && (conn as usize) < self.conns.len() {
            self.conns[conn as usize].circuits += 1;
        }
    }

    fn pin_torchestra(&mut self, circ: u32, ch: u32, circ_id: u32, heavy: bool, target: u32) {
        let Some(side) = self.circuits[circ as usize]
            .as_mut()
            .and_then(|c| c.side_on(ch, circ_id))
        else {
            return;
        };
        if side.heavy == heavy || side.conn == target {
            side.heavy = heavy;
            return;
        }
        let old = side.conn;
        side.heavy = heavy;
        side.conn = target;
        if old != NONE {
            let pinned = &mut self.conns[old as usize].circuits;
            *pinned = pinned.saturating_sub(1);
        }
        self.conns[target as usize].circuits += 1;
    }

    fn relay_cell_for_us(&mut self, io: &mut impl Io<RelayTimer>, circ: u32, cell: Cell) {
        match cell.relay {
            RelayCommand::Extend2 => self.extend(io, circ, cell.arg as HostId),
            RelayCommand::Begin => self.begin(io, circ, cell),
            RelayCommand::Data => self.exit_data(io, circ, cell),
            RelayCommand::Sendme => self.exit_sendme(io, circ, cell),
            RelayCommand::End => {
                if let Some(st) = self.find_stream(circ, cell.stream_id) {
                    self.end_stream(io, st, false);
                }
            }
            RelayCommand::Xoff | RelayCommand::Xon => {
                if let Some(st) = self.find_stream(circ, cell.stream_id) {
                    let s = self.streams[st as usize].as_mut().unwrap();
                    s.sender.set_xoff(cell.relay == RelayCommand::Xoff);
                    if cell.relay == RelayCommand::Xon {
                        self.package(io, circ);
                    }
                }
            }
            _ => {}
        }
    }

    /// The channel to `target` for an extend: the existing one, or a new one with its first
    /// connection(s); `None` (and the refusal counted) at the socket limit.
    fn channel_to(&mut self, io: &mut impl Io<RelayTimer>, target: HostId) -> Option<u32> {
        if let Some(&ch) = self.chan_by_peer.get(&target) {
            return Some(ch);
        }
        if self.open_sockets >= self.socket_limit() {
            self.now_counters.conn_limit_refusals += 1;
            return None;
        }
        let ch = self.add_channel(io.now(), target, true);
        match self.design {
            // PCTCP opens a connection per circuit, when the circuit is extended.
            ChannelDesign::Pctcp => {}
            ChannelDesign::Torchestra | ChannelDesign::TorchestraIdeal => {
                let light = self.open_conn(io, ch, 0);
                let heavy = self.open_conn(io, ch, 1);
                let chan = &mut self.channels[ch as usize];
                chan.light = light.unwrap_or(NONE);
                chan.heavy = heavy.unwrap_or(NONE);
            }
            ChannelDesign::Vanilla | ChannelDesign::Imux => {
                self.open_conn(io, ch, 0);
            }
        }
        self.chan_by_peer.insert(target, ch);
        Some(ch)
    }

    fn extend(&mut self, io: &mut impl Io<RelayTimer>, circ: u32, target: HostId) {
        if self.circuits[circ as usize]
            .as_ref()
            .unwrap()
            .next
            .is_some()
        {
            return;
        }
        let Some(ch) = self.channel_to(io, target) else {
            self.destroy_circuit_because(io, circ, None, DESTROY_CONNECT_FAILED);
            return;
        };
        let mut arrived_on = NONE;
        if self.design == ChannelDesign::Pctcp {
            match self.open_conn(io, ch, 0) {
                Some(k) => arrived_on = k,
                None => {
                    if self.channels[ch as usize].conns.is_empty() {
                        self.close_channel(io, ch);
                    }
                    self.destroy_circuit_because(io, circ, None, DESTROY_CONNECT_FAILED);
                    return;
                }
            }
        }
        let circ_id = self.channels[ch as usize].allocate(circ);
        let c = self.circuits[circ as usize].as_mut().unwrap();
        c.next = Some(Side::new(ch, circ_id, 0));
        let mut create = Cell::new(0, CellCommand::Create2);
        create.hop = c.hop + 1;
        create.arg = u32::from(c.declared_heavy);
        self.assign_conn(circ, true, arrived_on);
        self.queue_towards(io, circ, true, create);
    }

    /// Puts a cell on a circuit's queue towards the exit (`forward`) or the client.
    fn queue_towards(
        &mut self,
        io: &mut impl Io<RelayTimer>,
        circ: u32,
        forward: bool,
        mut cell: Cell,
    ) {
        let cap = self.world.params.max_circuit_queue_cells as usize;
        let c = self.circuits[circ as usize].as_mut().unwrap();
        let side = if forward {
            c.next.as_mut().unwrap()
        } else {
            &mut c.prev
        };
        cell.circ_id = side.circ_id;
        if side.queue.len() >= cap {
            self.now_counters.circuits_killed += 1;
            self.destroy_circuit(io, circ, None);
            return;
        }
        side.queue.push_back(cell);
        let len = side.queue.len() as u32;
        c.stats.max_queue = c.stats.max_queue.max(len);
        let ch = side.chan;
        self.queued_cells += 1;
        let chan = &mut self.channels[ch as usize];
        chan.queued += 1;
        chan.mux.add_active(circ);
        self.mark_pending(io, ch);
    }

    fn mark_pending(&mut self, io: &mut impl Io<RelayTimer>, ch: u32) {
        let chan = &mut self.channels[ch as usize];
        if chan.pending || chan.mux.is_empty() {
            return;
        }
        chan.pending = true;
        self.pending.push(ch);
        self.arm_scheduler(io);
    }

    /// Arms the KIST scheduler like tor's `kist_scheduler_schedule`: at the end of the run
    /// interval counted from the last run, which is now if the last run is that long ago.
    fn arm_scheduler(&mut self, io: &mut impl Io<RelayTimer>) {
        if self.world.params.scheduler == SchedulerKind::Vanilla || self.schedule_armed {
            return;
        }
        self.schedule_armed = true;
        // Never 0: a run that leaves work (a blocked channel) would re-arm itself at the same
        // instant forever. Huge intervals saturate (the scheduler then never runs again).
        let interval = millis(self.world.params.kist_run_interval_ms).max(1);
        let since = self
            .last_schedule_run
            .map_or(interval, |t| io.now().saturating_sub(t));
        io.arm_in(interval.saturating_sub(since), RelayTimer::Schedule);
    }

    /// Puts a channel back in the scheduler's heap, keyed by its quietest circuit, if one of
    /// its connections may still take a cell in this run; false if none may.
    fn requeue(&self, ch: u32, now: SimTime, heap: &mut BinaryHeap<Reverse<(u64, u32)>>) -> bool {
        let chan = &self.channels[ch as usize];
        if chan.room == 0 {
            return false;
        }
        let best = chan.mux.best_value(now).unwrap_or(0.0);
        heap.push(Reverse((ewma_key(best), ch)));
        true
    }

    /// Counts the channel's connections with room for a cell at the start of a scheduler run.
    fn count_room(&mut self, ch: u32, cell_bytes: u64) {
        let chan = &mut self.channels[ch as usize];
        let conns = &self.conns;
        chan.room = chan
            .conns
            .iter()
            .filter(|&&k| conns[k as usize].usable() && conns[k as usize].limit >= cell_bytes)
            .count() as u32;
    }

    /// Reads connection `k`'s write limit (KIST's, from its socket) and queue for this
    /// scheduler run, unless this run already did.
    fn refresh_limit(&mut self, io: &impl Io<RelayTimer>, k: u32) {
        let params = &self.world.params;
        let conn = &mut self.conns[k as usize];
        if conn.limit_run == self.run_stamp {
            return;
        }
        conn.limit_run = self.run_stamp;
        if !conn.usable() {
            conn.limit = 0;
            return;
        }
        let info = io.tcp_info(conn.socket);
        conn.limit = match (params.scheduler, info.as_ref()) {
            (_, None) => 0,
            (SchedulerKind::Kist, Some(i)) => kist_write_limit(
                i.cwnd,
                i.unacked,
                i.mss,
                i.notsent,
                0,
                params.kist_sock_buf_size_factor,
            ),
            (SchedulerKind::KistLite, Some(_)) => kistlite_write_limit(params.outbuf_high_bytes, 0),
            // The old scheduler writes until the kernel refuses more.
            (SchedulerKind::Vanilla, Some(_)) => u64::MAX,
        };
        conn.queued_bytes = info.map_or(0, |i| i.notsent + i.unacked as u64 * i.mss as u64);
    }

    /// Under IMUX's EWMA mapping, ranks the channel's usable connections and its circuits,
    /// quietest first.
    fn rank_conns(&mut self, ch: u32, now: SimTime) {
        if self.design == ChannelDesign::Imux
            && self.world.params.imux_scheduler == ImuxScheduler::Ewma
        {
            let chan = &mut self.channels[ch as usize];
            let conns = &self.conns;
            let clock = &self.clock;
            let ranked = &mut self.rank_scratch;
            ranked.clear();
            ranked.extend(
                chan.conns
                    .iter()
                    .filter(|&&k| conns[k as usize].usable())
                    .map(|&k| (conns[k as usize].ewma.value(clock, now), k)),
            );
            ranked.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            chan.order.clear();
            chan.order.extend(ranked.iter().map(|&(_, k)| k));
            chan.mux.ranks(now, ranked, &mut chan.circ_ranks);
        }
    }

    /// The connection the next cell of `circ` goes on, among those with room in this run.
    fn pick_conn(
        &mut self,
        io: &impl Io<RelayTimer>,
        ch: u32,
        circ: u32,
        cell_bytes: u64,
    ) -> Option<u32> {
        let room = |conns: &[Conn], k: u32| {
            k != NONE && conns[k as usize].usable() && conns[k as usize].limit >= cell_bytes
        };
        let pinned = self.circuits[circ as usize]
            .as_mut()
            .unwrap()
            .side_for(ch)
            .conn;
        let k = match (self.design, self.world.params.imux_scheduler) {
            (ChannelDesign::Imux, ImuxScheduler::ShortestQueue) => {
                // Every connection's queue was read at the start of the run.
                let chan = &self.channels[ch as usize];
                let best =
                    transport::shortest_queue(chan.conns.iter().map(|&k| {
                        room(&self.conns, k).then(|| self.conns[k as usize].queued_bytes)
                    }))?;
                return Some(chan.conns[best]);
            }
            (ChannelDesign::Imux, ImuxScheduler::Ewma) => {
                let chan = &self.channels[ch as usize];
                let ranks = &chan.circ_ranks;
                let rank = ranks
                    .binary_search_by_key(&circ, |e| e.0)
                    .map_or(0, |i| ranks[i].1 as usize);
                transport::imux_ewma_pick(rank, ranks.len().max(1), &chan.order)?
            }
            (ChannelDesign::Imux, ImuxScheduler::RoundRobin) => {
                // A freed slot has no socket; a reused one may sit on another channel.
                let alive = pinned != NONE && {
                    let c = &self.conns[pinned as usize];
                    c.chan == ch && c.socket.slot != NONE && c.state == ConnState::Active
                };
                if alive {
                    pinned
                } else {
                    let conns = &self.conns;
                    let chan = &mut self.channels[ch as usize];
                    let is_active = |k: &&u32| conns[**k as usize].state == ConnState::Active;
                    let active = chan.conns.iter().filter(is_active).count();
                    if active == 0 {
                        return None;
                    }
                    chan.turn = (chan.turn + 1) % active;
                    let k = *chan.conns.iter().filter(is_active).nth(chan.turn).unwrap();
                    let side = self.circuits[circ as usize].as_mut().unwrap().side_for(ch);
                    side.conn = k;
                    self.conns[k as usize].circuits += 1;
                    k
                }
            }
            _ => pinned,
        };
        if k != NONE {
            self.refresh_limit(io, k);
        }
        room(&self.conns, k).then_some(k)
    }

    /// Moves queued cells into connection sockets: globally across channels, quietest
    /// circuit first, within each socket's write limit and the write bucket.
    fn run_scheduler(&mut self, io: &mut impl Io<RelayTimer>) {
        let now = io.now();
        // Tor stamps the run when it ends; in simulated time that is this same instant, and
        // stamping first keeps work queued during the run from re-arming it at once.
        self.last_schedule_run = Some(now);
        self.run_stamp = self.run_stamp.wrapping_add(1);
        let base_cell_bytes = cell_wire_bytes(&self.world);
        let world = self.world.clone();
        let params = &world.params;
        let design = self.design;
        let mut allowance = self.buckets.write_allowance(now, true);
        let mut heap: BinaryHeap<Reverse<(u64, u32)>> = BinaryHeap::new();
        let mut deferred = Vec::new();
        let mut parked = Vec::new();
        for ch in std::mem::take(&mut self.pending) {
            let chan = &mut self.channels[ch as usize];
            chan.pending = false;
            if chan.mux.is_empty() {
                continue;
            }
            let cell_bytes = self.chan_cell_bytes(ch);
            let lazy = self.channels[ch as usize].conns.len() > 1
                && !(design == ChannelDesign::Imux
                    && params.imux_scheduler == ImuxScheduler::ShortestQueue);
            if lazy {
                // Limits are read as connections are tried; running out of room shows as
                // the channel's circuits parking one by one.
                self.channels[ch as usize].room = u32::MAX;
                self.rank_conns(ch, now);
            } else {
                for i in 0..self.channels[ch as usize].conns.len() {
                    let k = self.channels[ch as usize].conns[i];
                    self.refresh_limit(io, k);
                }
                self.count_room(ch, cell_bytes);
                self.rank_conns(ch, now);
            }
            if !self.requeue(ch, now, &mut heap) {
                deferred.push(ch);
            }
        }
        let mut touched: Vec<u32> = Vec::new();
        let mut unblocked = Vec::new();
        while let Some(Reverse((_, ch))) = heap.pop() {
            let cell_bytes = self.chan_cell_bytes(ch);
            if allowance < cell_bytes {
                deferred.push(ch);
                continue;
            }
            let Some(circ) = self.channels[ch as usize].mux.best(now) else {
                continue;
            };
            let empty = self.circuits[circ as usize]
                .as_mut()
                .unwrap()
                .side_for(ch)
                .queue
                .is_empty();
            let chosen = if empty {
                None
            } else {
                self.pick_conn(io, ch, circ, cell_bytes)
            };
            let Some(k) = chosen else {
                // Nothing queued, or its connection is full: it waits for a later run while
                // the channel's other circuits go on.
                let chan = &mut self.channels[ch as usize];
                chan.mux.remove(circ);
                if !empty {
                    chan.parked.push(circ);
                    if chan.parked.len() == 1 {
                        parked.push(ch);
                    }
                }
                if !chan.mux.is_empty() && !self.requeue(ch, now, &mut heap) {
                    deferred.push(ch);
                }
                continue;
            };
            let c = self.circuits[circ as usize].as_mut().unwrap();
            let side = c.side_for(ch);
            let cell = side.queue.pop_front().unwrap();
            let conn = &mut self.conns[k as usize];
            let message = if self.channels[ch as usize].sequenced {
                Wire::Sequenced {
                    cell,
                    seq: side.seq_out,
                }
            } else {
                Wire::Cell(cell)
            };
            if !io.write_message(conn.socket, cell_bytes, message) {
                side.queue.push_front(cell);
                conn.blocked = true;
                // It had room (it was chosen for it); now it has none.
                self.channels[ch as usize].room -= 1;
                if !self.requeue(ch, now, &mut heap) {
                    deferred.push(ch);
                }
                continue;
            }
            side.seq_out += 1;
            conn.limit -= cell_bytes;
            if conn.limit < cell_bytes {
                self.channels[ch as usize].room -= 1;
            }
            conn.queued_bytes += cell_bytes;
            conn.last_used = now;
            if design == ChannelDesign::Imux {
                conn.ewma.note_cells(&self.clock, 1, now);
            }
            let emptied = side.queue.is_empty();
            let own = side.queue.len() as u64 + 1;
            if let Some(exit) = c.exit.as_mut() {
                if exit.edge_blocked && own - 1 <= params.circuit_queue_low_cells as u64 {
                    exit.edge_blocked = false;
                    unblocked.push(circ);
                }
            }
            let chan = &mut self.channels[ch as usize];
            c.stats.cells += 1;
            c.stats.overtaken += chan.queued - own;
            chan.queued -= 1;
            self.queued_cells -= 1;
            allowance -= cell_bytes;
            self.buckets.note_written(cell_bytes, true);
            self.now_counters.cells_out += 1;
            self.now_counters.bytes_written += cell_bytes;
            chan.mux.note_sent(circ, 1, now);
            if emptied {
                chan.mux.remove(circ);
            }
            if !self.conns[k as usize].touched {
                self.conns[k as usize].touched = true;
                touched.push(k);
            }
            if design == ChannelDesign::Torchestra {
                self.classify_torchestra(io, ch, circ, now);
            }
            if !self.channels[ch as usize].mux.is_empty() && !self.requeue(ch, now, &mut heap) {
                self.write_limit_hits += 1;
                deferred.push(ch);
            }
        }
        if params.scheduler == SchedulerKind::Kist {
            for &k in &touched {
                let socket = self.conns[k as usize].socket;
                if let Some(i) = io.tcp_info(socket) {
                    let (cwnd, unacked, mss) = (i.cwnd as i64, i.unacked as i64, i.mss as i64);
                    let space = (cwnd - unacked).max(0) * mss;
                    let extra = ((cwnd * mss) as f64 * params.kist_sock_buf_size_factor) as i64;
                    let excess = (i.notsent as i64).saturating_sub(space.saturating_add(extra));
                    self.kist_audit.checks += 1;
                    self.kist_audit.max_excess = self.kist_audit.max_excess.max(excess);
                }
            }
        }
        for &k in &touched {
            self.conns[k as usize].touched = false;
            let socket = self.conns[k as usize].socket;
            io.flush(socket);
        }
        for ch in parked {
            let chan = &mut self.channels[ch as usize];
            for circ in std::mem::take(&mut chan.parked) {
                chan.mux.add_active(circ);
            }
            deferred.push(ch);
        }
        for circ in unblocked {
            self.package(io, circ);
        }
        let out_of_tokens = allowance < base_cell_bytes;
        for ch in deferred {
            let chan = &mut self.channels[ch as usize];
            if !chan.pending && !chan.mux.is_empty() {
                chan.pending = true;
                self.pending.push(ch);
            }
        }
        if !self.pending.is_empty() {
            if out_of_tokens {
                self.arm_refill(io);
            }
            self.arm_scheduler(io);
        }
    }

    /// Torchestra: after a cell of `circ` left on channel `ch`, moves the circuit between
    /// the light and the heavy connection if its EWMA crossed the threshold, and tells the
    /// peer so it moves the circuit's other direction too.
    fn classify_torchestra(
        &mut self,
        io: &mut impl Io<RelayTimer>,
        ch: u32,
        circ: u32,
        now: SimTime,
    ) {
        let chan = &self.channels[ch as usize];
        let (light, heavy) = (chan.light, chan.heavy);
        if light == NONE || heavy == NONE {
            return;
        }
        let Some(ewma) = chan.mux.value(circ, now) else {
            return;
        };
        let was_heavy = self.circuits[circ as usize]
            .as_ref()
            .is_some_and(|c| c.side_on_chan(ch).heavy);
        if !was_heavy && ewma < transport::TORCHESTRA_MIN_HEAVY_CELLS {
            // Checked before the scan below: most cells are of circuits that stay light.
            return;
        }
        // The average over the light connection's circuits that carry traffic (at least
        // TORCHESTRA_MIN_HEAVY_CELLS recently): idle circuits would dilute it, and a web
        // circuit's burst would then look heavy.
        let (mut sum, mut n) = (0.0, 0u32);
        for (c, value) in chan.mux.values(now) {
            let on_light = value >= transport::TORCHESTRA_MIN_HEAVY_CELLS
                && self.circuits[c as usize]
                    .as_ref()
                    .is_some_and(|cc| cc.side_on_chan(ch).conn == light);
            if on_light {
                sum += value;
                n += 1;
            }
        }
        if n == 0 {
            // No light circuit carries traffic: nothing to protect, the class stays.
            return;
        }
        let heavy_now = transport::torchestra_heavy(
            was_heavy,
            ewma,
            sum / n as f64,
            self.world.params.torchestra_threshold,
        );
        if heavy_now == was_heavy {
            return;
        }
        let side = self.circuits[circ as usize].as_mut().unwrap().side_for(ch);
        let circ_id = side.circ_id;
        let target = if heavy_now { heavy } else { light };
        self.pin_torchestra(circ, ch, circ_id, heavy_now, target);
        if heavy_now {
            self.channel_stats.switched_heavy += 1;
        } else {
            self.channel_stats.switched_light += 1;
        }
        let socket = self.conns[light as usize].socket;
        let bytes = cell_wire_bytes(&self.world);
        if io.write_message(
            socket,
            bytes,
            Wire::Switch {
                circ_id,
                heavy: heavy_now,
            },
        ) {
            io.flush(socket);
        }
    }

    /// IMUX's once-a-second housekeeping: sizes every channel's set of connections by its
    /// share of the relay's circuits (`getMaxConns`), opening connections on channels this
    /// relay opened and closing the surplus on any.
    fn manage_connections(&mut self, io: &mut impl Io<RelayTimer>) {
        let p = &self.world.params;
        let (tau, limit) = (p.imux_tau, self.conn_limit);
        let now = io.now();
        let mut ages = Vec::new();
        let mut close = Vec::new();
        for ch in 0..self.channels.len() as u32 {
            let chan = &mut self.channels[ch as usize];
            if chan.closed || chan.conns.is_empty() || !chan.opener && chan.token == NONE {
                continue;
            }
            if chan.peer_cap != u32::MAX && now >= chan.peer_hold_until {
                chan.peer_cap += 1;
            }
            let nconns = chan.conns.len() as u32;
            let target = transport::imux_max_conns(
                nconns,
                chan.ncircs,
                self.live_circuits,
                limit,
                tau,
                self.open_sockets,
            )
            .min(chan.peer_cap.max(nconns));
            if target > nconns && chan.opener {
                for _ in nconns..target {
                    // Growth stops quietly at the cap: that is the design, not a refusal.
                    if self.open_sockets >= self.socket_limit()
                        || self.open_conn(io, ch, 0).is_none()
                    {
                        break;
                    }
                }
            } else if target < nconns {
                let chan = &self.channels[ch as usize];
                ages.clear();
                ages.extend(chan.conns.iter().map(|&k| {
                    let c = &self.conns[k as usize];
                    ConnAge {
                        open: c.open,
                        created: c.created,
                        last_used: c.last_used,
                    }
                }));
                transport::imux_close_order(&ages, (nconns - target) as usize, &mut close);
                let victims: Vec<u32> = close.iter().map(|&i| chan.conns[i]).collect();
                for k in victims {
                    self.begin_closing(io, k);
                }
            }
        }
    }

    fn destroy_circuit(
        &mut self,
        io: &mut impl Io<RelayTimer>,
        circ: u32,
        came_from_prev: Option<bool>,
    ) {
        self.destroy_circuit_because(io, circ, came_from_prev, 0);
    }

    /// Tears a circuit down, telling the sides it did not come from with DESTROY cells that
    /// give `reason` (tor's END_CIRC_REASON number; 0 = none).
    fn destroy_circuit_because(
        &mut self,
        io: &mut impl Io<RelayTimer>,
        circ: u32,
        came_from_prev: Option<bool>,
        reason: u32,
    ) {
        let Some(c) = self.circuits[circ as usize].take() else {
            return;
        };
        self.free_circuits.push(circ);
        self.live_circuits -= 1;
        let mut sides = vec![(c.prev, came_from_prev != Some(true))];
        if let Some(next) = c.next {
            sides.push((next, came_from_prev != Some(false)));
        }
        let cell_bytes = cell_wire_bytes(&self.world);
        for (side, notify) in sides {
            self.queued_cells -= side.queue.len() as u64;
            let chan = &mut self.channels[side.chan as usize];
            chan.queued -= side.queue.len() as u64;
            chan.mux.detach(circ);
            chan.parked.retain(|&x| x != circ);
            chan.release(side.circ_id);
            // The connection the DESTROY goes on: the circuit's own, else any usable one.
            let conn = if side.conn != NONE && chan.conns.contains(&side.conn) {
                side.conn
            } else {
                chan.conns
                    .iter()
                    .copied()
                    .find(|&k| self.conns[k as usize].state == ConnState::Active)
                    .unwrap_or(NONE)
            };
            if side.conn != NONE && chan.conns.contains(&side.conn) {
                let pinned = &mut self.conns[side.conn as usize].circuits;
                *pinned = pinned.saturating_sub(1);
            }
            let sequenced_chan = chan.sequenced;
            if notify && conn != NONE && self.conns[conn as usize].open {
                let mut destroy = Cell::new(side.circ_id, CellCommand::Destroy);
                destroy.arg = reason;
                let message = if sequenced_chan {
                    Wire::Sequenced {
                        cell: destroy,
                        seq: side.seq_out,
                    }
                } else {
                    Wire::Cell(destroy)
                };
                let socket = self.conns[conn as usize].socket;
                if io.write_message(socket, cell_bytes, message) {
                    io.flush(socket);
                }
            }
            // PCTCP: the circuit's connection goes with it (the opener closes it).
            if self.design == ChannelDesign::Pctcp
                && side.conn != NONE
                && self.channels[side.chan as usize].opener
                && self.channels[side.chan as usize].conns.contains(&side.conn)
                && self.conns[side.conn as usize].circuits == 0
            {
                let socket = self.conns[side.conn as usize].socket;
                self.drop_conn(side.conn);
                io.close(socket);
            }
        }
        if let Some(exit) = c.exit {
            for st in exit.streams {
                if let Some(s) = self.streams[st as usize].take() {
                    self.free_streams.push(st);
                    io.abort(s.socket);
                    self.open_sockets -= 1;
                }
            }
        }
    }

    fn close_channel(&mut self, io: &mut impl Io<RelayTimer>, ch: u32) {
        let chan = &mut self.channels[ch as usize];
        if chan.closed {
            return;
        }
        chan.closed = true;
        let peer = chan.peer;
        let token = chan.token;
        let opener = chan.opener;
        let circuits: Vec<u32> = chan.ours.circuits().chain(chan.theirs.circuits()).collect();
        let conns = std::mem::take(&mut chan.conns);
        let mut sockets = Vec::with_capacity(conns.len());
        for &k in &conns {
            sockets.push(self.conns[k as usize].socket);
            self.drop_conn(k);
        }
        if self.chan_by_peer.get(&peer) == Some(&ch) {
            self.chan_by_peer.remove(&peer);
        }
        if !opener && self.chan_by_token.get(&(peer, token)) == Some(&ch) {
            self.chan_by_token.remove(&(peer, token));
        }
        for circ in circuits {
            let from_prev = self.circuits[circ as usize]
                .as_ref()
                .map(|c| c.prev.chan == ch);
            if let Some(from_prev) = from_prev {
                self.destroy_circuit(io, circ, Some(from_prev));
            }
        }
        for socket in sockets {
            if io.is_open(socket) {
                io.abort(socket);
            }
        }
    }

    // --- the exit's side of streams ---

    fn exit_circuit(&mut self, circ: u32, now: SimTime) -> &mut ExitCircuit {
        let params = &self.world.params;
        let c = self.circuits[circ as usize].as_mut().unwrap();
        c.exit.get_or_insert_with(|| {
            Box::new(ExitCircuit {
                sender: CircuitSender::new(params, now),
                receiver: CircuitReceiver::new(params),
                streams: Vec::new(),
                turn: 0,
                edge_blocked: false,
                packaged: 0,
                acked: 0,
            })
        })
    }

    fn find_stream(&self, circ: u32, stream_id: u16) -> Option<u32> {
        let c = self.circuits[circ as usize].as_ref()?;
        c.exit.as_ref()?.streams.iter().copied().find(|&st| {
            self.streams[st as usize]
                .as_ref()
                .is_some_and(|s| s.stream_id == stream_id)
        })
    }

    fn begin(&mut self, io: &mut impl Io<RelayTimer>, circ: u32, cell: Cell) {
        let relay = &self.world.consensus.relays[self.relay];
        let c = self.circuits[circ as usize].as_ref().unwrap();
        if c.next.is_some() || !relay.exit_policy.allows_port(HTTP_PORT) {
            let mut end = Cell::relay(0, RelayCommand::End, c.hop, cell.stream_id);
            end.arg = 1;
            self.queue_towards(io, circ, false, end);
            return;
        }
        if self.open_sockets >= self.socket_limit() {
            self.now_counters.conn_limit_refusals += 1;
            let mut end = Cell::relay(0, RelayCommand::End, c.hop, cell.stream_id);
            end.arg = 1;
            self.queue_towards(io, circ, false, end);
            return;
        }
        let now = io.now();
        let socket = io.connect(cell.arg as HostId, HTTP_PORT);
        io.set_auto_read(socket, false);
        self.note_socket_opened();
        let params = &self.world.params;
        let stream = ExitStream {
            circ,
            stream_id: cell.stream_id,
            socket,
            sender: StreamSender::new(params),
            receiver: StreamReceiver::new(params),
            connected: false,
            request: None,
            server_done: false,
            packaged: 0,
            acked: 0,
        };
        let st = match self.free_streams.pop() {
            Some(i) => {
                self.streams[i as usize] = Some(stream);
                i
            }
            None => {
                self.streams.push(Some(stream));
                (self.streams.len() - 1) as u32
            }
        };
        Self::map_socket(&mut self.stream_by_socket, socket, st);
        self.exit_circuit(circ, now).streams.push(st);
    }

    fn server_connected(&mut self, io: &mut impl Io<RelayTimer>, st: u32) {
        let s = self.streams[st as usize].as_mut().unwrap();
        s.connected = true;
        let (circ, stream_id, socket, request) = (s.circ, s.stream_id, s.socket, s.request.take());
        let hop = self.circuits[circ as usize].as_ref().unwrap().hop;
        let connected = Cell::relay(0, RelayCommand::Connected, hop, stream_id);
        self.queue_towards(io, circ, false, connected);
        if let Some(bytes) = request {
            self.send_request(io, socket, bytes);
        }
    }

    fn send_request(&mut self, io: &mut impl Io<RelayTimer>, socket: SocketId, bytes: u32) {
        if io.write_message(socket, REQUEST_BYTES, Wire::Request { bytes }) {
            io.flush(socket);
        }
    }

    /// A DATA cell from the client: the request of a download.
    fn exit_data(&mut self, io: &mut impl Io<RelayTimer>, circ: u32, cell: Cell) {
        let now = io.now();
        let hop = self.circuits[circ as usize].as_ref().unwrap().hop;
        if self
            .exit_circuit(circ, now)
            .receiver
            .on_data()
            .unwrap_or(false)
        {
            let sendme = Cell::relay(0, RelayCommand::Sendme, hop, 0);
            self.queue_towards(io, circ, false, sendme);
        }
        let Some(st) = self.find_stream(circ, cell.stream_id) else {
            return;
        };
        let s = self.streams[st as usize].as_mut().unwrap();
        if s.receiver.on_data().unwrap_or(false) {
            let sendme = Cell::relay(0, RelayCommand::Sendme, hop, cell.stream_id);
            self.queue_towards(io, circ, false, sendme);
        }
        let s = self.streams[st as usize].as_mut().unwrap();
        if s.connected {
            let socket = s.socket;
            self.send_request(io, socket, cell.arg);
        } else {
            s.request = Some(cell.arg);
        }
    }

    fn exit_sendme(&mut self, io: &mut impl Io<RelayTimer>, circ: u32, cell: Cell) {
        let now = io.now();
        if cell.stream_id == 0 {
            let blocked = {
                let c = self.circuits[circ as usize].as_ref().unwrap();
                c.prev.conn != NONE && self.conns[c.prev.conn as usize].blocked
            };
            let increment = match self.world.params.flow_control {
                FlowControl::Sendme => self.world.params.circuit_sendme_increment,
                FlowControl::Vegas => self.world.params.cc_sendme_inc.max(1),
            } as u64;
            let exit = self.exit_circuit(circ, now);
            if !exit.sender.on_sendme(now, blocked) {
                self.destroy_circuit(io, circ, None);
                return;
            }
            exit.acked += increment;
        } else if let Some(st) = self.find_stream(circ, cell.stream_id) {
            let increment = self.world.params.stream_sendme_increment as u64;
            let s = self.streams[st as usize].as_mut().unwrap();
            if s.sender.on_sendme() {
                s.acked += increment;
            }
        }
        self.package(io, circ);
    }

    /// Turns server data into DATA cells for as long as the circuit's and streams' windows,
    /// the data waiting and the read bucket allow, serving the circuit's streams in turn.
    fn package(&mut self, io: &mut impl Io<RelayTimer>, circ: u32) {
        let now = io.now();
        loop {
            let Some(c) = self.circuits[circ as usize].as_mut() else {
                return;
            };
            let hop = c.hop;
            let Some(exit) = c.exit.as_mut() else {
                return;
            };
            if exit.streams.is_empty() || !exit.sender.can_send() {
                return;
            }
            if c.prev.queue.len() >= self.world.params.circuit_queue_high_cells as usize {
                exit.edge_blocked = true;
                return;
            }
            let mut progressed = false;
            let n_streams = exit.streams.len();
            for k in 0..n_streams {
                let exit = self.circuits[circ as usize]
                    .as_mut()
                    .unwrap()
                    .exit
                    .as_mut()
                    .unwrap();
                if !exit.sender.can_send() {
                    break;
                }
                let i = (exit.turn + k) % exit.streams.len();
                let st = exit.streams[i];
                let s = self.streams[st as usize].as_mut().unwrap();
                if !s.connected || !s.sender.can_send() {
                    continue;
                }
                let waiting = io.readable(s.socket);
                if waiting == 0 {
                    if s.server_done {
                        self.end_stream(io, st, false);
                        progressed = true;
                        break;
                    }
                    continue;
                }
                let allowance = self.buckets.read_allowance(now, false);
                if allowance == 0 {
                    if !self.package_waiting.contains(&circ) {
                        self.package_waiting.push(circ);
                    }
                    self.arm_refill(io);
                    return;
                }
                let want = waiting.min(RELAY_DATA_BYTES as u64).min(allowance);
                let socket = s.socket;
                let stream_id = s.stream_id;
                s.sender.on_sent();
                s.packaged += 1;
                if s.sender.windowed() {
                    let in_flight = s.packaged.saturating_sub(s.acked);
                    self.max_stream_in_flight = self
                        .max_stream_in_flight
                        .max(in_flight.min(u32::MAX as u64) as u32);
                }
                let n = io.read(socket, want);
                self.buckets.note_read(n, false);
                let mut data = Cell::relay(0, RelayCommand::Data, hop, stream_id);
                data.length = n as u16;
                let exit = self.circuits[circ as usize]
                    .as_mut()
                    .unwrap()
                    .exit
                    .as_mut()
                    .unwrap();
                exit.sender.on_sent(now);
                exit.packaged += 1;
                let in_flight = exit.packaged.saturating_sub(exit.acked);
                self.max_circuit_in_flight = self
                    .max_circuit_in_flight
                    .max(in_flight.min(u32::MAX as u64) as u32);
                exit.turn = (i + 1) % exit.streams.len();
                self.queue_towards(io, circ, false, data);
                progressed = true;
                break;
            }
            if !progressed {
                return;
            }
        }
    }

    fn end_stream(&mut self, io: &mut impl Io<RelayTimer>, st: u32, failed: bool) {
        let Some(s) = self.streams[st as usize].take() else {
            return;
        };
        self.free_streams.push(st);
        self.stream_by_socket[s.socket.slot as usize] = NONE;
        self.open_sockets -= 1;
        if io.is_open(s.socket) {
            io.close(s.socket);
        }
        let Some(c) = self.circuits[s.circ as usize].as_mut() else {
            return;
        };
        let hop = c.hop;
        if let Some(exit) = c.exit.as_mut() {
            exit.streams.retain(|&x| x != st);
        }
        let mut end = Cell::relay(0, RelayCommand::End, hop, s.stream_id);
        end.arg = failed as u32;
        self.queue_towards(io, s.circ, false, end);
    }

    /// The channels that are open or opening.
    pub fn channel_views(&self) -> Vec<ChannelView> {
        self.channels
            .iter()
            .filter(|c| !c.closed && !c.conns.is_empty())
            .map(|c| ChannelView {
                peer: c.peer,
                opener: c.opener,
                conns: c.conns.len(),
                circuits: c.ncircs,
            })
            .collect()
    }

    /// The circuits open here.
    pub fn circuit_views(&self) -> Vec<CircuitView> {
        self.circuits
            .iter()
            .flatten()
            .map(|c| CircuitView {
                cells: c.stats.cells,
                heavy: c.prev.heavy || c.next.as_ref().is_some_and(|n| n.heavy),
                declared_heavy: c.declared_heavy,
            })
            .collect()
    }

    /// The socket limit this relay works under (ConnLimit, or `ConnLimit * tau` under IMUX).
    pub fn effective_socket_limit(&self) -> u32 {
        self.socket_limit()
    }

    /// Cells queued in all circuit queues (for tests and samples).
    pub fn queued_cells(&self) -> u64 {
        self.queued_cells
    }

    pub fn open_sockets(&self) -> u32 {
        self.open_sockets
    }

    /// Queue statistics of the circuits open here.
    pub fn circuit_queue_stats(&self) -> Vec<QueueStats> {
        self.circuits.iter().flatten().map(|c| c.stats).collect()
    }

    /// For each exit circuit here that carries streams: its congestion window (Vegas) or
    /// what is left of its package window (SENDME), and its cells in flight (sent, not yet
    /// acknowledged by a SENDME).
    pub fn exit_flow(&self) -> Vec<(u32, u32)> {
        self.circuits
            .iter()
            .flatten()
            .filter_map(|c| c.exit.as_ref())
            .filter(|e| !e.streams.is_empty())
            .map(|e| (e.sender.window(), e.sender.in_flight()))
            .collect()
    }
}

/// Orders EWMA values (non-negative floats) as integers: for non-negative IEEE doubles the
/// bit patterns sort like the values.
fn ewma_key(value: f64) -> u64 {
    value.max(0.0).to_bits()
}

impl Machine for Relay {
    type Timer = RelayTimer;

    fn start(&mut self, io: &mut impl Io<RelayTimer>) {
        io.listen(OR_PORT)
            .expect("a fresh relay has its OR port free");
        io.arm_in(NANOS_PER_SEC, RelayTimer::Sample);
        if self.design == ChannelDesign::Imux {
            io.arm_in(NANOS_PER_SEC, RelayTimer::ManageConnections);
        }
    }

    fn on_timer(&mut self, io: &mut impl Io<RelayTimer>, timer: RelayTimer) {
        match timer {
            RelayTimer::Schedule => {
                self.schedule_armed = false;
                self.run_scheduler(io);
            }
            RelayTimer::Refill => {
                self.refill_armed = false;
                self.buckets.refill(io.now());
                for k in std::mem::take(&mut self.read_waiting) {
                    self.conns[k as usize].read_blocked = false;
                    self.read_conn(io, k);
                }
                for circ in std::mem::take(&mut self.package_waiting) {
                    self.package(io, circ);
                }
                if !self.pending.is_empty() {
                    self.run_scheduler(io);
                }
            }
            RelayTimer::Sample => {
                let c = std::mem::take(&mut self.now_counters);
                let socket_queued_bytes = self
                    .conns
                    .iter()
                    .filter(|k| k.open && k.socket.slot != NONE)
                    .filter_map(|k| io.tcp_info(k.socket))
                    .map(|i| i.notsent)
                    .sum();
                self.samples.push(RelaySample {
                    second: io.now() / NANOS_PER_SEC,
                    bytes_read: c.bytes_read,
                    bytes_written: c.bytes_written,
                    cells_in: c.cells_in,
                    cells_out: c.cells_out,
                    queued_cells: self.queued_cells,
                    open_sockets: self.open_sockets,
                    socket_queued_bytes,
                    circuits_killed: c.circuits_killed,
                    conn_limit_refusals: c.conn_limit_refusals,
                });
                io.arm_in(NANOS_PER_SEC, RelayTimer::Sample);
            }
            RelayTimer::ManageConnections => {
                self.manage_connections(io);
                io.arm_in(NANOS_PER_SEC, RelayTimer::ManageConnections);
            }
        }
        self.pump(io);
    }

    /// Handles what the sockets reported since the last call.
    fn on_socket_events(&mut self, io: &mut impl Io<RelayTimer>) {
        self.pump(io);
    }
}

/// The relay as a sans-IO state machine: inputs from a scripted outside world, and what the
/// relay asked of it.
#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use onionlab_engine::time::millis;
    use onionlab_netdir::{Consensus, ExitPolicy, Relay as Descriptor, RelayFlags};
    use onionlab_torcore::{Cell, CellCommand, RelayCommand, TorParams};

    use super::*;
    use crate::io::script::{Asked, ScriptIo};

    /// Guard, middle and exit at hosts 0, 1, 2; the client is host 3.
    const MIDDLE: HostId = 1;
    const EXIT: HostId = 2;
    const CLIENT: HostId = 3;

    fn descriptor(name: &str, n: u8, flags: RelayFlags) -> Descriptor {
        Descriptor {
            nickname: name.into(),
            fingerprint: format!("{n:040X}"),
            address: Ipv4Addr::new(10, n, 0, 1),
            or_port: OR_PORT,
            flags: flags
                .union(RelayFlags::FAST)
                .union(RelayFlags::RUNNING)
                .union(RelayFlags::VALID),
            bandwidth: 1000,
            unmeasured: false,
            exit_policy: ExitPolicy::reject_all(),
            family: None,
        }
    }

    /// The guard (consensus relay 0) under `channel`, with ConnLimit `conn_limit`, started.
    fn guard(channel: ChannelDesign, conn_limit: u32) -> (Relay, ScriptIo<RelayTimer>) {
        let relays = vec![
            descriptor("guard", 1, RelayFlags::GUARD),
            descriptor("middle", 2, RelayFlags::default()),
            descriptor("exit", 3, RelayFlags::EXIT),
        ];
        let params = TorParams {
            channel,
            conn_limit,
            ..TorParams::default()
        };
        let names = ["guard", "middle", "exit", "client"]
            .map(String::from)
            .to_vec();
        let world = Arc::new(TorWorld::new(
            params,
            Consensus::from_relays(relays),
            vec![0, 1, 2],
            names,
            Vec::new(),
        ));
        let limits = RelayLimits {
            bandwidth_rate: 100 << 20,
            bandwidth_burst: 100 << 20,
            relay_bandwidth_rate: None,
            relay_bandwidth_burst: None,
            conn_limit: None,
        };
        let mut relay = Relay::new(0, world, &limits);
        let mut io = ScriptIo::new();
        relay.start(&mut io);
        (relay, io)
    }

    /// Lets the relay handle what is queued, then runs its timers for `ms` simulated ms.
    fn settle(relay: &mut Relay, io: &mut ScriptIo<RelayTimer>, ms: u64) {
        relay.on_socket_events(io);
        let end = io.now + millis(ms);
        while io.now < end {
            io.now += millis(1);
            for timer in io.due() {
                relay.on_timer(io, timer);
            }
        }
    }

    fn bytes() -> u64 {
        (CELL_BYTES + TorParams::default().tls_overhead_per_cell) as u64
    }

    fn create(circ_id: u32) -> Wire {
        let mut cell = Cell::new(circ_id | INITIATOR_BIT, CellCommand::Create2);
        cell.hop = 1;
        Wire::Cell(cell)
    }

    fn extend(circ_id: u32, to: HostId) -> Wire {
        let mut cell = Cell::relay(circ_id | INITIATOR_BIT, RelayCommand::Extend2, 1, 0);
        cell.command = CellCommand::RelayEarly;
        cell.arg = to;
        Wire::Cell(cell)
    }

    fn commands(written: &[Wire]) -> Vec<(CellCommand, RelayCommand)> {
        written
            .iter()
            .filter_map(|w| match w {
                Wire::Cell(c) => Some((c.command, c.relay)),
                _ => None,
            })
            .collect()
    }

    fn connects(io: &ScriptIo<RelayTimer>) -> Vec<(SocketId, HostId, u16)> {
        io.asked
            .iter()
            .filter_map(|a| match *a {
                Asked::Connect { socket, peer, port } => Some((socket, peer, port)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_started_relay_listens_on_its_or_port_and_samples_every_second() {
        let (mut relay, mut io) = guard(ChannelDesign::Vanilla, 100);
        assert_eq!(io.listening, [OR_PORT]);
        settle(&mut relay, &mut io, 3000);
        assert_eq!(relay.samples.len(), 3);
        assert_eq!(relay.samples[2].second, 3);
    }

    #[test]
    fn a_create2_is_answered_with_created2_on_the_connection_it_came_on() {
        let (mut relay, mut io) = guard(ChannelDesign::Vanilla, 100);
        let client = io.accept(CLIENT, OR_PORT);
        io.arrive(client, bytes(), create(5));
        settle(&mut relay, &mut io, 20);
        let written = io.written(client);
        assert_eq!(
            commands(&written),
            [(CellCommand::Created2, RelayCommand::None)]
        );
        let Wire::Cell(reply) = written[0] else {
            unreachable!()
        };
        assert_eq!(reply.circ_id, 5 | INITIATOR_BIT);
        assert_eq!(relay.samples.len(), 0);
        assert_eq!(relay.open_sockets(), 1);
    }

    #[test]
    fn an_extend2_opens_a_channel_to_the_next_relay_and_reports_extended2() {
        let (mut relay, mut io) = guard(ChannelDesign::Vanilla, 100);
        let client = io.accept(CLIENT, OR_PORT);
        io.arrive(client, bytes(), create(5));
        io.arrive(client, bytes(), extend(5, MIDDLE));
        settle(&mut relay, &mut io, 20);
        let opened = connects(&io);
        assert_eq!(opened.len(), 1);
        let (next, peer, port) = opened[0];
        assert_eq!((peer, port), (MIDDLE, OR_PORT));
        // Nothing goes out before the connection is up; then the CREATE2.
        assert!(io.written(next).is_empty());
        io.establish(next);
        settle(&mut relay, &mut io, 20);
        let sent = io.written(next);
        assert_eq!(
            commands(&sent),
            [(CellCommand::Create2, RelayCommand::None)]
        );
        let Wire::Cell(onward) = sent[0] else {
            unreachable!()
        };
        // The middle answers on the id the guard chose; the client hears EXTENDED2.
        io.arrive(
            next,
            bytes(),
            Wire::Cell(Cell::new(onward.circ_id, CellCommand::Created2)),
        );
        settle(&mut relay, &mut io, 20);
        let back = commands(&io.written(client));
        assert_eq!(
            back,
            [
                (CellCommand::Created2, RelayCommand::None),
                (CellCommand::Relay, RelayCommand::Extended2)
            ]
        );
    }

    #[test]
    fn vanilla_shares_one_connection_per_peer_and_pctcp_opens_one_per_circuit() {
        for (channel, expected) in [(ChannelDesign::Vanilla, 1), (ChannelDesign::Pctcp, 3)] {
            let (mut relay, mut io) = guard(channel, 100);
            let client = io.accept(CLIENT, OR_PORT);
            for id in 1..=3 {
                io.arrive(client, bytes(), create(id));
                io.arrive(client, bytes(), extend(id, EXIT));
            }
            settle(&mut relay, &mut io, 20);
            let opened = connects(&io);
            assert_eq!(opened.len(), expected, "{channel:?}: {opened:?}");
            assert!(opened.iter().all(|&(_, peer, _)| peer == EXIT));
        }
    }

    #[test]
    fn at_its_conn_limit_a_relay_refuses_connections_and_fails_the_extend() {
        // Two sockets: the first client's connection and the channel to the middle.
        let (mut relay, mut io) = guard(ChannelDesign::Pctcp, 2);
        let client = io.accept(CLIENT, OR_PORT);
        io.arrive(client, bytes(), create(1));
        io.arrive(client, bytes(), extend(1, MIDDLE));
        settle(&mut relay, &mut io, 20);
        assert_eq!(connects(&io).len(), 1);
        // A second client is refused at once.
        let late = io.accept(CLIENT + 1, OR_PORT);
        settle(&mut relay, &mut io, 20);
        assert!(io.asked.contains(&Asked::Abort(late)));
        // Under PCTCP a second circuit needs a connection of its own, which the limit forbids:
        // the circuit is destroyed with CONNECTFAILED.
        io.arrive(client, bytes(), create(2));
        io.arrive(client, bytes(), extend(2, MIDDLE));
        settle(&mut relay, &mut io, 20);
        assert_eq!(connects(&io).len(), 1);
        let destroy = io.written(client).into_iter().find_map(|w| match w {
            Wire::Cell(c) if c.command == CellCommand::Destroy => Some(c),
            _ => None,
        });
        let destroy = destroy.expect("the second circuit is destroyed");
        assert_eq!(destroy.circ_id, 2 | INITIATOR_BIT);
        assert_eq!(destroy.arg, DESTROY_CONNECT_FAILED);
        assert_eq!(relay.open_sockets(), 2);
        let refused: u64 = relay.now_counters.conn_limit_refusals;
        assert_eq!(refused, 2);
    }
}
