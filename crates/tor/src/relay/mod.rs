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
//! connections open and close and which connection a cell goes on. The relay's code is
//! vanilla tor's; wherever a design differs it calls a hook of `design::Design`, and each
//! design is one file under `design/` ([`crate::transport`] holds the designs' decisions as
//! plain functions). Cells that may overtake each other on different connections carry
//! sequence numbers and are put back in order by the receiving channel.
//!
//! The relay is a sans-IO state machine ([`crate::io::Machine`]): everything it does to the
//! outside world goes through the [`Io`] of the call, so its unit tests below drive it
//! without an engine or a network stack.
//!
//! Its files, by job:
//! - `mod.rs`: the relay's state, what arrives on sockets and timers, and the read side
//!   (read bucket, runs of cells passed through at once);
//! - `circuits.rs`: the circuit table, `CircuitTable`, and switching: where a cell goes,
//!   circuits' creation, extension and destruction, queueing a cell for its channel;
//! - `table.rs`: the channel table, `ChannelTable`: channels and connections in reusable
//!   slots, found by socket, peer, join token or QUIC connection;
//! - `channels.rs`: what channels and their connections do (opening, joining, closing,
//!   which connection a circuit is pinned to, sequenced cells);
//! - `design/`: the channel designs, one file each, behind the hooks of `Design`;
//! - `scheduler.rs`: what a scheduler run does, cell by cell;
//! - `runs.rs`: the scheduler's own state, `Scheduler`: its work list, and whether it
//!   is idle, armed or parked;
//! - `exit.rs`: the exit edge: its streams to servers (`ExitStreams`, found by socket) and
//!   the packaging of their data into cells;
//! - `meter.rs`: what the relay measures, [`RelayMeter`], which the model never reads.
//!
//! One relayed cell's path through these files (the hooks of the design in brackets):
//!
//! ```text
//! on_socket_events ─► handle_events ─► on_socket(Readable) ─► read_conn   (read bucket)
//!   └► on_message(Cell) / sequenced_cell (Sequenced, put back in order) / pass_run (a run)
//!       └► handle_cell ─► queue_towards ─► CellQueue + CircuitMux ─► mark_pending
//! on_timer(Schedule) ─► run_scheduler
//!   ├► start_run     pending channels' write limits [rank, reads_every_limit]
//!   ├► write_cells   quietest circuit first ─► conn_for_cell [pick_conn]
//!   │    └► write_cell ─► write_held ─► Io::write_message_room [cell_written]
//!   └► end_run       flush_conn ─► Io::flush; re-arm or park [MAY_PARK]
//! ```

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

use onionlab_engine::slab::Slab;
use onionlab_engine::time::{millis, SimTime, NANOS_PER_SEC};
use onionlab_engine::HostId;
use onionlab_net::{SocketEvent, SocketId};
use onionlab_torcore::cpu::Work;
use onionlab_torcore::ewma::{CircuitEwma, CircuitMux, EwmaClock};
use onionlab_torcore::kist::{kist_write_limit, kistlite_write_limit};
use onionlab_torcore::token_bucket::RelayBuckets;
use onionlab_torcore::{
    Cell, CellCommand, ChannelDesign, FlowControl, ImuxScheduler, RelayCommand, SchedulerKind,
    RELAY_DATA_BYTES,
};
use smallvec::SmallVec;

use crate::circ_ids::ChannelCircuits;
use crate::flow::{CircuitReceiver, CircuitSender, StreamReceiver, StreamSender};
use crate::io::{Io, Machine};
use crate::link::{LinkHandshake, LinkMessage};
use crate::measure::Census;
use crate::transport::{self, ConnAge, Reorder, IMUX_SEQ_BYTES};
use crate::wire::{Wire, REQUEST_BYTES};
use crate::world::{TorWorld, HTTP_PORT, OR_PORT, QUIC_PORT};

mod channels;
mod circuits;
mod design;
mod exit;
mod meter;
mod runs;
mod scheduler;
mod table;

use circuits::{CircuitTable, Switch};
pub use circuits::{CircuitView, QueueStats};
use design::{with_design, ConnLoss, Design};
use exit::ExitStreams;
pub use meter::RelayMeter;
use meter::SecondEnd;
use runs::Scheduler;
use scheduler::Run;
use table::{map_socket, ChannelTable};

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
    /// An onion skin handed to the worker threads is done.
    OnionSkin,
}

/// A relay's configured rates (bytes per second) and socket limit.
#[derive(Clone, Debug)]
pub struct RelayLimits {
    /// tor's `BandwidthRate`: the token buckets' refill rate for all traffic.
    pub bandwidth_rate: u64,
    /// tor's `BandwidthBurst`: the buckets' size.
    pub bandwidth_burst: u64,
    /// tor's `RelayBandwidthRate`, a second pair of buckets for relayed traffic alone.
    pub relay_bandwidth_rate: Option<u64>,
    /// tor's `RelayBandwidthBurst` (the rate if not given).
    pub relay_bandwidth_burst: Option<u64>,
    /// This relay's ConnLimit, if not the network's `tor.conn_limit`.
    pub conn_limit: Option<u32>,
}

onionlab_engine::slab_key! {
    /// A circuit through this relay: its slot in the relay's table and which occupant of the
    /// slot, so that an id kept after its circuit closed finds nothing. Not tor's CircID, which
    /// names the circuit on one channel (each side of a circuit has its own).
    pub struct CircuitId;
}

onionlab_engine::slab_key! {
    /// A stream of this relay's exit edge (to a server, or a BEGIN_DIR stream to its own
    /// directory cache): its slot and which occupant of the slot.
    pub struct ExitStreamId;
}

onionlab_engine::slab_key! {
    /// A channel of this relay (to one peer, over one or more connections): its slot in the
    /// relay's channel table and which occupant of the slot.
    pub struct ChannelId;
}

onionlab_engine::slab_key! {
    /// One connection of a channel (a TCP connection, or a QUIC stream under the `quic`
    /// design): its slot in the relay's connection table and which occupant of the slot.
    pub struct ConnId;
}
/// tor's END_CIRC_REASON_CONNECTFAILED: the next hop's connection could not be made (tor
/// closes a circuit so when ConnLimit keeps it from connecting).
pub const DESTROY_CONNECT_FAILED: u32 = 6;

/// What the last hop keeps for a circuit that carries streams.
struct ExitCircuit {
    sender: CircuitSender,
    receiver: CircuitReceiver,
    streams: Vec<ExitStreamId>,
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
    circ: CircuitId,
    stream_id: u16,
    end: StreamEnd,
    sender: StreamSender,
    receiver: StreamReceiver,
    connected: bool,
    /// Bytes asked for by a request that arrived before the server connection was up.
    request: Option<u32>,
    server_done: bool,
    /// As `ExitCircuit::packaged` and `acked`, for stream-level SENDMEs.
    packaged: u64,
    acked: u64,
    /// The client's request arrived (later DATA cells are an upload's body).
    requested: bool,
    /// An upload's body on its way to the server (see `exit.rs`).
    upload: exit::UploadEdge,
}

/// Where an exit stream's bytes come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StreamEnd {
    /// A TCP connection to a file server.
    Server(SocketId),
    /// A BEGIN_DIR stream, answered by the relay's own directory cache: the response bytes
    /// still to package, once the request came.
    Directory {
        /// Bytes of the response not yet packaged.
        left: u32,
    },
}

impl ExitStream {
    /// A stream to a server through `socket` (connecting), or with `None` a BEGIN_DIR
    /// stream to the relay's own cache (connected at once).
    fn new(
        params: &onionlab_torcore::TorParams,
        circ: CircuitId,
        stream_id: u16,
        socket: Option<SocketId>,
    ) -> Self {
        ExitStream {
            circ,
            stream_id,
            end: socket.map_or(StreamEnd::Directory { left: 0 }, StreamEnd::Server),
            sender: StreamSender::new(params),
            receiver: StreamReceiver::new(params),
            connected: socket.is_none(),
            request: None,
            server_done: false,
            packaged: 0,
            acked: 0,
            requested: false,
            upload: exit::UploadEdge::default(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ConnState {
    /// Carries cells.
    Active,
    /// IMUX closing handshake: we sent CLOSING_CONN_BEGIN and wait for the peer's END.
    Closing,
}

/// One TCP connection of a channel.
///
/// `repr(C)`, what a scheduler run and a read touch first: its write limit, queue, socket,
/// channel, state and flags share the first 48 bytes; the counts that IMUX's rules keep come
/// after.
#[repr(C)]
struct Conn {
    /// What the scheduler may still write to the socket in its current run.
    limit: u64,
    /// Bytes the kernel held at the start of the scheduler run plus what the run wrote since
    /// (IMUX's shortest queue).
    queued_bytes: u64,
    socket: SocketId,
    /// The scheduler run whose `limit` and `queued_bytes` these are.
    limit_run: u32,
    chan: ChannelId,
    /// The TCP handshake has completed.
    open: bool,
    /// The peer has taken the connection into the channel (IMUX connections we open beyond
    /// a channel's first wait for its `Joined`; every other connection starts confirmed).
    confirmed: bool,
    state: ConnState,
    /// The socket refused a cell; wait for it to become writable.
    blocked: bool,
    /// Waiting for read tokens.
    read_blocked: bool,
    /// The peer closed its direction: the connection ends once everything it sent has been
    /// read (the read bucket may hold bytes back) and handled.
    peer_finished: bool,
    /// The scheduler wrote to it in the current run (it is flushed at the end of the run).
    touched: bool,
    /// It is in the relay's `unsent_watch`.
    watched: bool,
    /// A QUIC stream (the `quic` design), not a socket of its own: it costs no socket, and
    /// what it may take in a scheduler run is its channel's QUIC connection's to share.
    stream: bool,
    /// The link handshake (TLS and Tor's own) that must complete before cells flow; its
    /// three bytes fill what would be padding before `last_used`.
    link: LinkHandshake,
    /// When a cell last left (IMUX's closing rule).
    last_used: SimTime,
    /// Circuits pinned to this connection.
    circuits: u32,
    /// Order of creation (IMUX's closing rule).
    created: u64,
    /// Cells sent, decaying like a circuit's count (IMUX's EWMA mapping; kept under IMUX only).
    ewma: CircuitEwma,
    /// `ewma`'s value as its channel's ranking holds it, worked out in EWMA tick
    /// `ewma_seen_tick` (`u64::MAX`: not yet, or cells were sent since and the connection
    /// waits in the channel's `rank_dirty`).
    ewma_seen: f64,
    ewma_seen_tick: u64,
}

impl Conn {
    /// A connection of channel `ch` on `socket`, `open` if its TCP handshake is done (it was
    /// accepted), whose link handshake is `link`; `stream` if it is a QUIC stream rather than a
    /// TCP connection. Its `created` stamp is the table's to give.
    fn new(
        socket: SocketId,
        ch: ChannelId,
        open: bool,
        link: LinkHandshake,
        stream: bool,
        clock: &EwmaClock,
        now: SimTime,
    ) -> Self {
        Conn {
            socket,
            chan: ch,
            open,
            confirmed: true,
            link,
            state: ConnState::Active,
            blocked: false,
            read_blocked: false,
            peer_finished: false,
            limit: 0,
            queued_bytes: 0,
            circuits: 0,
            created: 0,
            last_used: now,
            ewma: CircuitEwma::new(clock, now),
            ewma_seen: 0.0,
            ewma_seen_tick: u64::MAX,
            touched: false,
            watched: false,
            limit_run: 0,
            stream,
        }
    }

    /// Whether cells may go on it: connected, handshaken and taken into its channel.
    fn carries_cells(&self) -> bool {
        self.open && self.link.is_open() && self.confirmed
    }

    fn usable(&self) -> bool {
        self.carries_cells() && !self.blocked && self.state == ConnState::Active
    }

    /// It may take a cell of `cell_bytes` in this scheduler run (its limit read in it).
    fn has_room(&self, cell_bytes: u64) -> bool {
        self.usable() && self.limit >= cell_bytes
    }
}

/// What carries a `quic`-design channel's circuits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Carrier {
    /// Its TCP connection (every other design; a `quic` channel that stayed on TCP).
    Tcp,
    /// A `quic` channel we opened whose TCP link handshake has not completed: whether its
    /// circuits go on QUIC is decided when it does.
    Undecided,
    /// One stream of its QUIC connection per circuit.
    Quic,
}

/// `repr(C)`, hot fields first: a scheduler run reads `pending`, `carrier`, `room`, `queued`,
/// the connection list and the mux of each pending channel, and a cell arriving reads `circs`.
/// In Rust's own order (largest alignment first) they lay across most of the struct's cache
/// lines (eight, before the multi-connection fields moved out), on a large network each a
/// miss; here the first line holds the flags, the counts, the connections and the mux's active
/// list, and the next two the rest. The cold fields after them are grouped by size so that
/// `repr(C)` adds no padding but at the end.
#[repr(C)]
struct Channel {
    /// Whether the channel is in the scheduler's pending list.
    pending: bool,
    carrier: Carrier,
    /// Cells on it carry sequence numbers (a multi-connection channel of a design whose
    /// circuits may change connection; never a client's channel).
    sequenced: bool,
    closed: bool,
    /// In a scheduler run: its connections that may take a cell.
    room: u32,
    /// Cells queued on all circuits for this channel.
    queued: u64,
    /// Its live connections. Most channels have one, and Torchestra's two, kept inline: the
    /// scheduler reads it for every pending channel, and a separate allocation would be one
    /// more cache miss.
    conns: SmallVec<[ConnId; 2]>,
    /// Circuits with cells queued for this channel.
    mux: CircuitMux<CircuitId>,
    /// Circuits whose connection could take no cell in this scheduler run.
    parked: Vec<CircuitId>,
    /// Its circuits by id (ids are reused on single-connection channels only).
    circs: ChannelCircuits<CircuitId>,
    /// What only channels of several connections keep (see [`MultiConn`]); `None` until the
    /// design first writes to it, so a vanilla channel never has one.
    multi: Option<Box<MultiConn>>,
    /// Channels on QUIC: what KIST lets the scheduler write to the QUIC connection in the
    /// current run (from its congestion window and flight), shared by all its streams.
    quic_limit: u64,
    /// Its QUIC connection, if it has one.
    quic: Option<SocketId>,
    peer: HostId,
    /// The opener's index for the channel, named in each connection's Join message (`None`:
    /// an accepted channel its peer has not named yet).
    token: Option<u32>,
    /// We opened this channel, so we open its connections (IMUX, PCTCP, Torchestra).
    opener: bool,
}

/// A channel's state under the designs that give it several connections (IMUX, Torchestra,
/// PCTCP's sequencing), out of line: on the full network a relay holds a million channel ends,
/// nearly all of them vanilla, and inline these fields made each 160 bytes larger.
struct MultiConn {
    /// Cells that arrived ahead of an earlier one of their circuit.
    reorder: Reorder,
    /// IMUX round robin: the next connection to pin a circuit to.
    turn: usize,
    /// IMUX's EWMA mapping: its usable connections as `(count, connection)`, quietest
    /// first, as of the start of the scheduler run (a run is a few milliseconds), and its
    /// circuits' ranks then (`(circuit, circuits quieter)`, by circuit).
    ///
    /// A channel may hold hundreds of connections of which a run uses a few, so the ranking
    /// is kept up to date rather than rebuilt in every run: within one EWMA tick only the
    /// counts of connections that sent cells move (`rank_dirty`), and those are moved to
    /// their new place. It is rebuilt when the tick changes (every count decays) or when
    /// `ranking_stale` says a connection came, went, or became usable or unusable.
    ranking: Vec<(f64, ConnId)>,
    ranking_tick: u64,
    rank_dirty: Vec<ConnId>,
    circ_ranks: Vec<(CircuitId, u32)>,
    /// Torchestra: the light connection's circuits that carry traffic, with their EWMA counts
    /// (by circuit) and the sum of those, taken once per scheduler run, and that run.
    light_counts: Vec<(CircuitId, f64)>,
    light_sum: f64,
    peer_hold_until: SimTime,
    /// Torchestra's light and heavy connections, once they exist.
    light: Option<ConnId>,
    heavy: Option<ConnId>,
    light_run: u32,
    /// IMUX, channels we opened: the most connections the peer has let us keep, learnt when
    /// it refused or closed one (`None` until it does), and until when we hold to it.
    peer_cap: Option<u32>,
    ranking_stale: bool,
}

impl MultiConn {
    /// A channel's state before its design has written any: what a channel without one reads.
    const NEW: MultiConn = MultiConn {
        reorder: Reorder::new(),
        turn: 0,
        ranking: Vec::new(),
        ranking_tick: u64::MAX,
        rank_dirty: Vec::new(),
        circ_ranks: Vec::new(),
        light_counts: Vec::new(),
        light_sum: 0.0,
        peer_hold_until: 0,
        light: None,
        heavy: None,
        light_run: 0,
        peer_cap: None,
        ranking_stale: true,
    };

    /// The state in `slot`, made if it is not there yet (for callers that hold other fields of
    /// the channel borrowed at the same time).
    fn made(slot: &mut Option<Box<MultiConn>>) -> &mut MultiConn {
        slot.get_or_insert_with(|| Box::new(MultiConn::NEW))
    }
}

/// What a channel without [`MultiConn`] state reads.
static NO_MULTI: MultiConn = MultiConn::NEW;

impl Channel {
    /// Whether a scheduler run reads this channel's room connection by connection as it
    /// tries them, instead of all at its start: with several connections, unless the design
    /// reads every limit (`Design::reads_every_limit`). `start_run` and `parked_room` must
    /// agree on it.
    fn reads_room_lazily(&self, reads_every_limit: bool) -> bool {
        self.conns.len() > 1 && !reads_every_limit
    }

    fn new(peer: HostId, initiator: bool, opener: bool, clock: &EwmaClock, now: SimTime) -> Self {
        Channel {
            peer,
            carrier: Carrier::Tcp,
            quic: None,
            quic_limit: 0,
            opener,
            token: None,
            conns: SmallVec::new(),
            circs: ChannelCircuits::new(initiator),
            mux: CircuitMux::new(clock, now),
            pending: false,
            queued: 0,
            parked: Vec::new(),
            multi: None,
            room: 0,
            sequenced: false,
            closed: false,
        }
    }

    /// Its multi-connection state, as [`MultiConn::NEW`] where it has none.
    fn multi(&self) -> &MultiConn {
        self.multi.as_deref().unwrap_or(&NO_MULTI)
    }

    /// Its multi-connection state, made on the first write.
    fn multi_mut(&mut self) -> &mut MultiConn {
        MultiConn::made(&mut self.multi)
    }

    /// Its connections changed: the IMUX ranking must be rebuilt. A channel without
    /// multi-connection state has no ranking, and its first one starts stale.
    fn ranking_stale(&mut self) {
        if let Some(m) = self.multi.as_deref_mut() {
            m.ranking_stale = true;
        }
    }

    /// Cells on this channel carry sequence numbers from now on, so its circuit ids are never
    /// reused (a new circuit's CREATE2 could overtake an old one's DESTROY).
    fn set_sequenced(&mut self, on: bool) {
        self.sequenced = on;
        self.circs.reuse_ids = !on;
    }

    fn release(&mut self, circ_id: u32) {
        self.circs.release(circ_id);
        if let Some(m) = self.multi.as_deref_mut() {
            m.reorder.forget(circ_id);
        }
    }
}

/// An audit of KIST's write limits taken from the sockets themselves rather than from the
/// scheduler's own accounting: after every KIST run, each socket the run wrote to is asked
/// for its state (before the writes are handed to TCP), and its unsent bytes are compared
/// with what KIST lets a socket be filled to, `(cwnd - unacked) * mss + cwnd * mss * factor`
/// (tor's `tcp_space` plus its extra space, with nothing else queued).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg(feature = "audit")]
pub struct KistAudit {
    /// Sockets checked (one per socket written to per scheduler run).
    pub checks: u64,
    /// The largest excess of unsent bytes over that allowance seen; negative when every
    /// socket stayed below it, `i64::MIN` before the first check.
    pub max_excess: i64,
}

#[cfg(feature = "audit")]
impl Default for KistAudit {
    fn default() -> Self {
        KistAudit {
            checks: 0,
            max_excess: i64::MIN,
        }
    }
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
    /// Torchestra: circuits moved to the heavy connection.
    pub switched_heavy: u64,
    /// Torchestra: circuits moved back to the light connection.
    pub switched_light: u64,
    /// `quic` design, channels this relay opened: those whose QUIC connection was ready when
    /// the TCP link handshake completed (they moved to QUIC), and those whose was not (they
    /// stayed on TCP).
    pub quic_channels: u64,
    /// See `quic_channels`.
    pub tcp_fallbacks: u64,
    /// Cells written to channels over the run.
    pub cells_written: u64,
}

/// A Tor relay (see the module doc), run by the driver as a [`crate::io::Machine`]. What it
/// measured is read off it after the run (`meter`).
pub struct Relay {
    /// Index in the consensus.
    pub relay: usize,
    world: Arc<TorWorld>,
    buckets: RelayBuckets,
    clock: EwmaClock,
    design: ChannelDesign,
    conn_limit: u32,
    /// Channels and their connections, and the indexes that find them.
    table: ChannelTable,
    /// The circuits through it, and the cells on their queues.
    circuits: CircuitTable,
    /// The exit edge's streams to servers.
    streams: ExitStreams,
    /// The circuit scheduler's work list and when it runs.
    sched: Scheduler,
    /// Connections with data left unread for lack of read tokens.
    read_waiting: Vec<ConnId>,
    /// Connections whose peer had closed and whose last bytes were read: they end once the
    /// messages read are handled.
    ended_after_read: Vec<ConnId>,
    /// Connections that may hold bytes written and not yet sent: those written to since the
    /// last sample, and those that still held some then. The per-second sample sums the
    /// kernel's unsent bytes over these alone; an IMUX relay holds thousands of connections,
    /// most of them idle, and a connection gains unsent bytes only by being written to.
    unsent_watch: Vec<ConnId>,
    /// Exit circuits that could not package for lack of read tokens.
    package_waiting: Vec<CircuitId>,
    refill_armed: bool,
    open_sockets: u32,
    /// What the relay measures; nothing in it feeds back into the model.
    pub meter: RelayMeter,
    /// What the relay has done, for a CPU model to price.
    work: Work,
    /// CREATE2 cells whose onion skin the worker threads are handling, by when they are
    /// done: (done, circuit, its channel towards the client, whose slot stays out of reuse
    /// until then: see `recycle_channels`).
    onion_skins: BinaryHeap<Reverse<(SimTime, CircuitId, ChannelId)>>,
}

/// One channel as tests and diagnostics see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChannelView {
    /// The host at the other end.
    pub peer: HostId,
    /// This relay opened it.
    pub opener: bool,
    /// Its connections (open or still connecting).
    pub conns: usize,
    /// Circuits bound to it.
    pub circuits: u32,
}

impl Relay {
    /// Consensus relay `relay` of `world`, with its rates and ConnLimit; it listens and arms
    /// its timers when the driver starts it.
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
        let sched = Scheduler::new(millis(p.kist_run_interval_ms));
        Relay {
            relay,
            buckets,
            clock,
            design: p.channel,
            conn_limit,
            world,
            table: ChannelTable::new(),
            circuits: CircuitTable::new(),
            streams: ExitStreams::new(),
            sched,
            read_waiting: Vec::new(),
            ended_after_read: Vec::new(),
            unsent_watch: Vec::new(),
            package_waiting: Vec::new(),
            refill_armed: false,
            open_sockets: 0,
            meter: RelayMeter::default(),
            work: Work::default(),
            onion_skins: BinaryHeap::new(),
        }
    }

    /// Bytes a cell takes on channel `ch`: a sequenced channel adds the design's sequence
    /// number (IMUX's).
    fn chan_cell_bytes(&self, ch: ChannelId) -> u64 {
        self.cell_bytes_on(&self.table.channels[ch])
    }

    /// As [`Relay::chan_cell_bytes`], for a channel already at hand.
    #[inline]
    fn cell_bytes_on(&self, chan: &Channel) -> u64 {
        if chan.carrier == Carrier::Quic {
            // QUIC's own headers and AEAD tags are counted by the QUIC model, per packet.
            return onionlab_torcore::CELL_BYTES as u64;
        }
        let seq = if chan.sequenced {
            with_design!(self.design, D => D::SEQ_BYTES)
        } else {
            0
        };
        self.world.cell_wire_bytes() + seq
    }

    /// The number of sockets this relay may hold: its ConnLimit, or less where the design
    /// keeps a share (IMUX).
    fn socket_limit(&self) -> u32 {
        with_design!(self.design, D => D::socket_limit(self))
    }

    /// Cells of this relay's design carry sequence numbers on multi-connection channels.
    fn sequenced(&self) -> bool {
        with_design!(self.design, D => D::SEQUENCED)
    }

    fn note_socket_opened(&mut self) {
        self.open_sockets += 1;
        self.meter.sockets_open(self.open_sockets);
    }

    /// Handles everything the stack reported, including what handling it caused.
    fn pump(&mut self, io: &mut impl Io<RelayTimer>) {
        self.handle_events(io);
        if self.world.params.scheduler == SchedulerKind::Vanilla && !self.sched.pending.is_empty() {
            self.run_scheduler(io);
            self.handle_events(io);
        }
    }

    fn handle_events(&mut self, io: &mut impl Io<RelayTimer>) {
        loop {
            while let Some(event) = io.poll_event() {
                self.on_socket(io, event);
            }
            // Connections whose peer had closed end after the messages of their last read,
            // which came back as the events just handled.
            if self.ended_after_read.is_empty() {
                return;
            }
            for k in std::mem::take(&mut self.ended_after_read) {
                if self.table.conns.contains(k) {
                    self.conn_lost(io, k);
                }
            }
        }
    }

    fn on_socket(&mut self, io: &mut impl Io<RelayTimer>, event: SocketEvent<Wire>) {
        match event {
            SocketEvent::Accepted { socket, port, peer } => self.accepted(io, socket, port, peer),
            SocketEvent::Connected(socket) => self.connected(io, socket),
            SocketEvent::Readable(socket) => {
                if let Some(k) = self.conn_of(socket) {
                    self.read_conn(io, k);
                } else if let Some(st) = self.stream_of(socket) {
                    let circ = self.streams.get(st).unwrap().circ;
                    self.package(io, circ);
                }
            }
            SocketEvent::Data { socket, bytes } => {
                if self.conn_of(socket).is_some() {
                    self.meter.second.bytes_read += bytes;
                }
            }
            SocketEvent::Message {
                socket,
                message,
                count,
            } => {
                if count == 1 {
                    if let Some(k) = self.conn_of(socket) {
                        self.on_message(io, k, message);
                    }
                } else if !self.pass_run(io, socket, message, count) {
                    // A message may close its connection, so each looks the connection up.
                    for _ in 0..count {
                        if let Some(k) = self.conn_of(socket) {
                            self.on_message(io, k, message);
                        }
                    }
                }
            }
            SocketEvent::Writable(socket) => {
                if let Some(k) = self.conn_of(socket) {
                    self.update_conn(k, |c| c.blocked = false);
                    let ch = self.table.conns[k].chan;
                    if !self.table.channels[ch].mux.is_empty() {
                        self.mark_pending(io, ch);
                    }
                } else if let Some(st) = self.stream_of(socket) {
                    self.upload_writable(io, st);
                }
            }
            SocketEvent::PeerClosed(socket) => {
                if let Some(k) = self.conn_of(socket) {
                    // The connection ends only after what the peer sent before closing is
                    // handled (for IMUX, the cells it flushed before CLOSING_CONN_END): bytes
                    // the read bucket held back are read first, and messages already read
                    // may still be queued behind this event.
                    self.table.conns[k].peer_finished = true;
                    self.read_conn(io, k);
                } else if let Some(st) = self.stream_of(socket) {
                    self.streams.get_mut(st).unwrap().server_done = true;
                    let circ = self.streams.get(st).unwrap().circ;
                    self.package(io, circ);
                }
            }
            SocketEvent::Closed(socket)
            | SocketEvent::Reset(socket)
            | SocketEvent::TimedOut(socket) => self.socket_gone(io, socket),
            SocketEvent::StreamAccepted { conn, stream } => self.stream_accepted(io, conn, stream),
            SocketEvent::Datagram { .. } => {}
        }
    }

    /// A peer connected to us: on the OR port it is a channel of its own until a Join names
    /// another (always so for vanilla peers and for clients), unless ConnLimit refuses it.
    fn accepted(
        &mut self,
        io: &mut impl Io<RelayTimer>,
        socket: SocketId,
        port: u16,
        peer: HostId,
    ) {
        if with_design!(self.design, D => D::accepted(self, io, socket, port, peer)) {
            return;
        }
        if port != OR_PORT {
            return;
        }
        if self.open_sockets >= self.socket_limit() {
            self.meter.second.conn_limit_refusals += 1;
            io.abort(socket);
            return;
        }
        let ch = self.add_channel(io.now(), peer, false);
        self.add_conn(io, ch, socket, true);
        if !with_design!(self.design, D => D::JOINS) {
            // A relay that connects to us may be asked to extend back through us.
            self.table.offer_to_peer(peer, ch);
        }
    }

    /// A connection we opened is up: a relay connection starts its link handshake and its
    /// channel may send; an exit's connection to a server sends the request.
    fn connected(&mut self, io: &mut impl Io<RelayTimer>, socket: SocketId) {
        if let Some(k) = self.conn_of(socket) {
            let mut first = None;
            self.update_conn(k, |c| {
                c.open = true;
                first = c.link.connected();
            });
            if let Some(hello) = first {
                self.write_conn(io, k, hello.wire_bytes(), Wire::Link(hello));
                self.flush_conn(io, k);
            }
            let ch = self.table.conns[k].chan;
            self.mark_pending(io, ch);
        } else if let Some(st) = self.stream_of(socket) {
            self.server_connected(io, st);
        }
    }

    /// A socket closed, was reset or timed out: a channel's QUIC connection, a relay
    /// connection, or an exit's connection to a server (which, if the server had sent
    /// everything, still packages what is left).
    fn socket_gone(&mut self, io: &mut impl Io<RelayTimer>, socket: SocketId) {
        if let Some(ch) = self.chan_of_quic(socket) {
            self.quic_lost(io, ch);
        } else if let Some(k) = self.conn_of(socket) {
            self.conn_lost(io, k);
        } else if let Some(st) = self.stream_of(socket) {
            let done = self.streams.get(st).unwrap().server_done;
            if done {
                // The server closed after sending everything: package the rest.
                let circ = self.streams.get(st).unwrap().circ;
                self.package(io, circ);
            } else {
                self.end_stream(io, st, true);
            }
        }
    }

    /// Handles `count` equal cells that arrived back to back (a circuit's DATA cells, mostly)
    /// at once if they only pass through here: each then takes a layer of crypto and joins the
    /// same queue, with nothing in between that a later one could see. Returns false, having
    /// done nothing, for any other run (cells for this hop, a full queue, control messages),
    /// which goes message by message.
    fn pass_run(
        &mut self,
        io: &mut impl Io<RelayTimer>,
        socket: SocketId,
        message: Wire,
        count: u32,
    ) -> bool {
        let Wire::Cell(cell) = message else {
            return false;
        };
        if !matches!(cell.command, CellCommand::Relay | CellCommand::RelayEarly) {
            return false;
        }
        let Some(k) = self.conn_of(socket) else {
            return false;
        };
        if !self.table.conns[k].link.is_open() {
            return false;
        }
        let ch = self.table.conns[k].chan;
        let Some(circ) = self.table.channels[ch].circs.lookup(cell.circ_id) else {
            return false;
        };
        let c = &self.circuits[circ];
        let forward = match c.switch(c.came_from_prev(ch, cell.circ_id), cell.hop) {
            Switch::Forward => true,
            Switch::Backward => false,
            Switch::ForUs | Switch::Beyond => return false,
        };
        let cap = self.world.params.max_circuit_queue_cells;
        let Some(ch) = self.circuits.push(circ, forward, cell, count, cap) else {
            return false;
        };
        self.meter.second.cells_in += u64::from(count);
        self.work.cells += u64::from(count);
        self.work.relay_crypt_cells(false, u64::from(count));
        self.cells_queued(io, circ, ch, count);
        true
    }

    fn on_message(&mut self, io: &mut impl Io<RelayTimer>, k: ConnId, message: Wire) {
        if !self.table.conns[k].link.is_open() && !matches!(message, Wire::Link(_)) {
            // Nothing but the handshake may come before it completes (tor closes such a
            // connection as a protocol violation).
            self.conn_lost(io, k);
            return;
        }
        match message {
            Wire::Cell(cell) => {
                self.meter.second.cells_in += 1;
                self.work.cells += 1;
                let ch = self.table.conns[k].chan;
                self.handle_cell(io, ch, k, cell);
            }
            Wire::Sequenced { cell, seq } => {
                self.meter.second.cells_in += 1;
                self.work.cells += 1;
                self.sequenced_cell(io, k, cell, seq);
            }
            Wire::Link(flight) => self.link_flight(io, k, flight),
            Wire::Join { channel, heavy } => self.join(io, k, channel, heavy),
            Wire::Joined => {
                self.update_conn(k, |c| c.confirmed = true);
                let ch = self.table.conns[k].chan;
                if self.table.channels[ch].carrier == Carrier::Undecided {
                    self.quux_decide(io, ch);
                }
                if !self.table.channels[ch].mux.is_empty() {
                    self.mark_pending(io, ch);
                }
            }
            Wire::ClosingBegin => {
                let (ch, now) = (self.table.conns[k].chan, io.now());
                with_design!(self.design, D => D::peer_refused(self, ch, now));
                // Everything we wrote on it is in the socket already: answer and close.
                self.update_conn(k, |c| c.state = ConnState::Closing);
                let bytes = self.world.cell_wire_bytes();
                self.write_conn(io, k, bytes, Wire::ClosingEnd);
                self.flush_conn(io, k);
                self.finish_closing(io, k);
            }
            Wire::ClosingEnd => self.finish_closing(io, k),
            Wire::Switch { circ_id, heavy } => {
                design::Torchestra::switched(self, k, circ_id, heavy);
            }
            Wire::Request { .. } | Wire::Upload { .. } | Wire::UploadBody | Wire::Bytes { .. } => {}
        }
    }

    /// Reads as much of a connection's waiting data as the read bucket allows.
    fn read_conn(&mut self, io: &mut impl Io<RelayTimer>, k: ConnId) {
        let now = io.now();
        let Some(conn) = self.table.conns.get(k) else {
            return;
        };
        let socket = conn.socket;
        let waiting = io.readable(socket);
        if waiting > 0 {
            let allowance = self.buckets.read_allowance(now, true);
            let n = io.read(socket, waiting.min(allowance));
            if n > 0 {
                self.work.tls_io(n);
            }
            self.buckets.note_read(n, true);
            if n < waiting {
                let c = &mut self.table.conns[k];
                if !c.read_blocked {
                    c.read_blocked = true;
                    self.read_waiting.push(k);
                }
                self.arm_refill(io);
                return;
            }
        }
        if self.table.conns[k].peer_finished {
            // Everything the peer sent is read; it ends once those messages are handled.
            self.ended_after_read.push(k);
        }
    }

    fn arm_refill(&mut self, io: &mut impl Io<RelayTimer>) {
        if !self.refill_armed {
            self.refill_armed = true;
            let now = io.now();
            self.buckets.refill(now);
            // With the buckets refilled up to now the next tick is later, or beyond the end of
            // time (`SimTime::MAX`, for an absurd refill interval): never `now` again, which
            // would change nothing and spin.
            io.arm_at(self.buckets.next_refill(), RelayTimer::Refill);
        }
    }

    /// The channels that are open or opening.
    pub fn channel_views(&self) -> Vec<ChannelView> {
        self.table
            .channels
            .values()
            .filter(|c| !c.closed && !c.conns.is_empty())
            .map(|c| ChannelView {
                peer: c.peer,
                opener: c.opener,
                conns: c.conns.len(),
                circuits: c.circs.count(),
            })
            .collect()
    }

    /// The socket limit this relay works under (ConnLimit, or `ConnLimit * tau` under IMUX).
    pub fn effective_socket_limit(&self) -> u32 {
        self.socket_limit()
    }

    /// Adds what this relay holds to `census`; `is_relay` says which hosts are relays.
    pub fn census(&self, is_relay: impl Fn(HostId) -> bool, census: &mut Census) {
        for chan in self.table.channels.values().filter(|c| !c.closed) {
            if is_relay(chan.peer) {
                census.relay_channels += 1;
            } else {
                census.relay_client_channels += 1;
            }
        }
        census.relay_circuits += self.circuits.len() as u64;
        census.exit_streams += self.streams.len() as u64;
        census.queued_cells += self.circuits.queued_cells();
    }

    /// Sockets it holds now (relay connections, QUIC connections, exit streams), as counted
    /// against ConnLimit.
    pub fn open_sockets(&self) -> u32 {
        self.open_sockets
    }

    /// For each exit circuit here that carries streams: its congestion window (Vegas) or
    /// what is left of its package window (SENDME), and its cells in flight (sent, not yet
    /// acknowledged by a SENDME).
    pub fn exit_flow(&self) -> Vec<(u32, u32)> {
        self.circuits
            .values()
            .filter_map(|c| c.exit.as_ref())
            .filter(|e| !e.streams.is_empty())
            .map(|e| (e.sender.window(), e.sender.in_flight()))
            .collect()
    }
}

impl Machine for Relay {
    type Timer = RelayTimer;

    /// A parked scheduler wakes once one of the sockets it waits on has moved so that a
    /// pending channel has room: a move that leaves none (an ACK too small for a cell, cells
    /// arriving from the peer) would only give it more runs that write nothing.
    #[inline]
    fn after_event(&mut self, io: &mut impl Io<RelayTimer>) {
        if self.sched.is_parked() && io.take_watch_hit() && self.parked_room(io) {
            self.wake_scheduler(io);
        }
    }

    fn start(&mut self, io: &mut impl Io<RelayTimer>) {
        io.listen(OR_PORT)
            .expect("a fresh relay has its OR port free");
        io.arm_in(NANOS_PER_SEC, RelayTimer::Sample);
        with_design!(self.design, D => D::start(self, io));
        self.open_warm_channels(io);
    }

    fn on_timer(&mut self, io: &mut impl Io<RelayTimer>, timer: RelayTimer) {
        match timer {
            RelayTimer::Schedule => {
                self.sched.fired();
                self.run_scheduler(io);
            }
            RelayTimer::Refill => {
                self.refill_armed = false;
                self.buckets.refill(io.now());
                for k in std::mem::take(&mut self.read_waiting) {
                    self.table.conns[k].read_blocked = false;
                    self.read_conn(io, k);
                }
                for circ in std::mem::take(&mut self.package_waiting) {
                    self.package(io, circ);
                }
                if !self.sched.pending.is_empty() {
                    self.run_scheduler(io);
                }
            }
            RelayTimer::OnionSkin => self.onion_skins_done(io),
            RelayTimer::Sample => {
                self.recycle_channels();
                let socket_queued_bytes = self.sum_unsent(io);
                self.meter.sample(SecondEnd {
                    second: io.now() / NANOS_PER_SEC,
                    queued_cells: self.circuits.queued_cells(),
                    open_sockets: self.open_sockets,
                    socket_queued_bytes,
                    cpu: io.cpu_second(),
                });
                io.arm_in(NANOS_PER_SEC, RelayTimer::Sample);
                // Measuring is no work of the relay's: what the sockets reported waits for
                // the main thread (without a CPU model nothing waits here).
                return;
            }
            RelayTimer::ManageConnections => {
                with_design!(self.design, D => D::manage(self, io));
                io.arm_in(NANOS_PER_SEC, RelayTimer::ManageConnections);
            }
        }
        self.pump(io);
    }

    /// Handles what the sockets reported since the last call.
    fn on_socket_events(&mut self, io: &mut impl Io<RelayTimer>) {
        self.pump(io);
    }

    fn work(&self) -> Work {
        self.work
    }

    fn deferrable(timer: &RelayTimer) -> bool {
        !matches!(timer, RelayTimer::Sample)
    }
}

/// The relay as a sans-IO state machine: inputs from a scripted outside world, and what the
/// relay asked of it.
#[cfg(test)]
mod tests;
