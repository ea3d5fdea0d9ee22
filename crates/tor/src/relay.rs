//! A Tor relay: channels to clients and other relays, circuits with their cell queues, the
//! circuit scheduler, token buckets, ConnLimit, and (at exits) streams to file servers.
//!
//! Cells arrive on a channel's TCP socket, which the relay reads only as far as its read bucket
//! allows. Each cell is either for this hop (CREATE2, EXTEND2, BEGIN, DATA at the exit,
//! SENDME...) or is put on its circuit's queue towards the next or previous hop. The scheduler
//! (KIST by default) moves queued cells into channel sockets, quietest circuit first (EWMA), no
//! more per socket than the kernel can send soon, and no more in all than the write bucket
//! allows.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::Arc;

use onionlab_engine::time::{millis, SimTime, NANOS_PER_SEC};
use onionlab_engine::{Context, HostId};
use onionlab_net::{NetEvent, NetStack, SocketEvent, SocketId};
use onionlab_torcore::ewma::{CircuitMux, EwmaClock};
use onionlab_torcore::kist::{kist_write_limit, kistlite_write_limit};
use onionlab_torcore::token_bucket::RelayBuckets;
use onionlab_torcore::{
    Cell, CellCommand, FlowControl, RelayCommand, SchedulerKind, CELL_BYTES, RELAY_DATA_BYTES,
};

use crate::flow::{CircuitReceiver, CircuitSender, StreamReceiver, StreamSender};
use crate::host::Ev;
use crate::measure::RelaySample;
use crate::wire::{Wire, REQUEST_BYTES};
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
}

/// A relay's configured rates (bytes per second).
#[derive(Clone, Debug)]
pub struct RelayLimits {
    pub bandwidth_rate: u64,
    pub bandwidth_burst: u64,
    pub relay_bandwidth_rate: Option<u64>,
    pub relay_bandwidth_burst: Option<u64>,
}

const NONE: u32 = u32::MAX;
/// Circuit ids chosen by the side that opened the channel have the top bit set.
const INITIATOR_BIT: u32 = 1 << 31;

/// One direction of a circuit: the channel it leaves on, its id there, and its queue.
struct Side {
    chan: u32,
    circ_id: u32,
    queue: VecDeque<Cell>,
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
    exit: Option<Box<ExitCircuit>>,
    stats: QueueStats,
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

struct Channel {
    socket: SocketId,
    peer: HostId,
    initiator: bool,
    open: bool,
    /// Circuits by the id the peer chose (index = id without the initiator bit).
    theirs: Vec<u32>,
    /// Circuits by the id this relay chose.
    ours: Vec<u32>,
    ours_free: Vec<u32>,
    /// Circuits with cells queued for this channel.
    mux: CircuitMux,
    /// Whether the channel is in the scheduler's pending list.
    pending: bool,
    /// The socket refused a cell; wait for it to become writable.
    blocked: bool,
    /// Waiting for read tokens.
    read_blocked: bool,
    /// Cells queued on all circuits for this channel.
    queued: u64,
    /// What the scheduler may still write to the socket in its current run.
    limit: u64,
}

impl Channel {
    fn new(
        socket: SocketId,
        peer: HostId,
        initiator: bool,
        open: bool,
        clock: &EwmaClock,
        now: SimTime,
    ) -> Self {
        Channel {
            socket,
            peer,
            initiator,
            open,
            theirs: Vec::new(),
            ours: Vec::new(),
            ours_free: Vec::new(),
            mux: CircuitMux::new(clock, now),
            pending: false,
            blocked: false,
            read_blocked: false,
            queued: 0,
            limit: 0,
        }
    }

    fn lookup(&self, circ_id: u32) -> Option<u32> {
        let chosen_by_initiator = circ_id & INITIATOR_BIT != 0;
        let table = if chosen_by_initiator == self.initiator {
            &self.ours
        } else {
            &self.theirs
        };
        table
            .get((circ_id & !INITIATOR_BIT) as usize)
            .copied()
            .filter(|&c| c != NONE)
    }

    fn bind_theirs(&mut self, circ_id: u32, circ: u32) -> bool {
        let i = (circ_id & !INITIATOR_BIT) as usize;
        if self.theirs.len() <= i {
            self.theirs.resize(i + 1, NONE);
        }
        if self.theirs[i] != NONE {
            return false;
        }
        self.theirs[i] = circ;
        true
    }

    fn allocate(&mut self, circ: u32) -> u32 {
        let i = self.ours_free.pop().unwrap_or_else(|| {
            self.ours.push(NONE);
            (self.ours.len() - 1) as u32
        });
        self.ours[i as usize] = circ;
        i | if self.initiator { INITIATOR_BIT } else { 0 }
    }

    fn release(&mut self, circ_id: u32) {
        let chosen_by_initiator = circ_id & INITIATOR_BIT != 0;
        let i = circ_id & !INITIATOR_BIT;
        if chosen_by_initiator == self.initiator {
            if let Some(slot) = self.ours.get_mut(i as usize) {
                *slot = NONE;
                self.ours_free.push(i);
            }
        } else if let Some(slot) = self.theirs.get_mut(i as usize) {
            *slot = NONE;
        }
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

pub struct Relay {
    /// Index in the consensus.
    pub relay: usize,
    pub stack: NetStack<Wire>,
    world: Arc<TorWorld>,
    buckets: RelayBuckets,
    clock: EwmaClock,
    channels: Vec<Channel>,
    chan_by_socket: Vec<u32>,
    chan_by_peer: HashMap<HostId, u32>,
    circuits: Vec<Option<Circuit>>,
    free_circuits: Vec<u32>,
    streams: Vec<Option<ExitStream>>,
    free_streams: Vec<u32>,
    stream_by_socket: Vec<u32>,
    /// Channels with cells to send (scheduler's work list).
    pending: Vec<u32>,
    schedule_armed: bool,
    /// When the KIST scheduler last ran: new work waits only for the rest of the run
    /// interval since then, and an idle relay's scheduler runs at once, as in tor.
    last_schedule_run: Option<SimTime>,
    /// Channels with data left unread for lack of read tokens.
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
}

fn cell_wire_bytes(world: &TorWorld) -> u64 {
    (CELL_BYTES + world.params.tls_overhead_per_cell) as u64
}

impl Relay {
    pub fn new(
        relay: usize,
        stack: NetStack<Wire>,
        world: Arc<TorWorld>,
        limits: &RelayLimits,
    ) -> Self {
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
        Relay {
            relay,
            stack,
            buckets,
            clock,
            world,
            channels: Vec::new(),
            chan_by_socket: Vec::new(),
            chan_by_peer: HashMap::new(),
            circuits: Vec::new(),
            free_circuits: Vec::new(),
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
        }
    }

    pub fn start(&mut self, ctx: &mut Context<'_, Ev>) {
        self.stack
            .listen(OR_PORT)
            .expect("a fresh relay has its OR port free");
        ctx.schedule_in(NANOS_PER_SEC, Ev::Relay(RelayTimer::Sample));
    }

    pub fn on_timer(&mut self, ctx: &mut Context<'_, Ev>, timer: RelayTimer) {
        match timer {
            RelayTimer::Schedule => {
                self.schedule_armed = false;
                self.run_scheduler(ctx);
            }
            RelayTimer::Refill => {
                self.refill_armed = false;
                self.buckets.refill(ctx.now());
                for ch in std::mem::take(&mut self.read_waiting) {
                    self.channels[ch as usize].read_blocked = false;
                    self.read_channel(ctx, ch);
                }
                for circ in std::mem::take(&mut self.package_waiting) {
                    self.package(ctx, circ);
                }
                if !self.pending.is_empty() {
                    self.run_scheduler(ctx);
                }
            }
            RelayTimer::Sample => {
                let c = std::mem::take(&mut self.now_counters);
                let socket_queued_bytes = self
                    .channels
                    .iter()
                    .filter(|ch| ch.open)
                    .filter_map(|ch| self.stack.tcp_info(ch.socket))
                    .map(|i| i.notsent)
                    .sum();
                self.samples.push(RelaySample {
                    second: ctx.now() / NANOS_PER_SEC,
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
                ctx.schedule_in(NANOS_PER_SEC, Ev::Relay(RelayTimer::Sample));
            }
        }
        self.pump(ctx);
    }

    pub fn on_net(&mut self, ctx: &mut Context<'_, Ev>, event: NetEvent<Wire>) {
        self.stack.handle(ctx, event);
        self.pump(ctx);
    }

    /// Handles everything the stack reported, including what handling it caused.
    fn pump(&mut self, ctx: &mut Context<'_, Ev>) {
        while let Some(event) = self.stack.poll_event() {
            self.on_socket(ctx, event);
        }
        if self.world.params.scheduler == SchedulerKind::Vanilla && !self.pending.is_empty() {
            self.run_scheduler(ctx);
            while let Some(event) = self.stack.poll_event() {
                self.on_socket(ctx, event);
            }
        }
    }

    fn channel_of(&self, socket: SocketId) -> Option<u32> {
        self.chan_by_socket
            .get(socket.slot as usize)
            .copied()
            .filter(|&c| c != NONE && self.channels[c as usize].socket == socket)
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

    fn add_channel(
        &mut self,
        now: SimTime,
        socket: SocketId,
        peer: HostId,
        initiator: bool,
        open: bool,
    ) -> u32 {
        let idx = self.channels.len() as u32;
        self.channels.push(Channel::new(
            socket,
            peer,
            initiator,
            open,
            &self.clock,
            now,
        ));
        Self::map_socket(&mut self.chan_by_socket, socket, idx);
        self.stack.set_auto_read(socket, false);
        self.open_sockets += 1;
        idx
    }

    fn on_socket(&mut self, ctx: &mut Context<'_, Ev>, event: SocketEvent<Wire>) {
        match event {
            SocketEvent::Accepted { socket, port, peer } => {
                if port != OR_PORT {
                    return;
                }
                if self.open_sockets >= self.world.params.conn_limit {
                    self.now_counters.conn_limit_refusals += 1;
                    self.stack.abort(ctx, socket);
                    return;
                }
                let ch = self.add_channel(ctx.now(), socket, peer, false, true);
                // A relay that connects to us may be asked to extend back through us.
                self.chan_by_peer.entry(peer).or_insert(ch);
            }
            SocketEvent::Connected(socket) => {
                if let Some(ch) = self.channel_of(socket) {
                    self.channels[ch as usize].open = true;
                    self.mark_pending(ctx, ch);
                } else if let Some(st) = self.stream_of(socket) {
                    self.server_connected(ctx, st);
                }
            }
            SocketEvent::Readable(socket) => {
                if let Some(ch) = self.channel_of(socket) {
                    self.read_channel(ctx, ch);
                } else if let Some(st) = self.stream_of(socket) {
                    let circ = self.streams[st as usize].as_ref().unwrap().circ;
                    self.package(ctx, circ);
                }
            }
            SocketEvent::Data { socket, bytes } => {
                if self.channel_of(socket).is_some() {
                    self.now_counters.bytes_read += bytes;
                }
            }
            SocketEvent::Message { socket, message } => {
                if let (Some(ch), Wire::Cell(cell)) = (self.channel_of(socket), message) {
                    self.now_counters.cells_in += 1;
                    self.handle_cell(ctx, ch, cell);
                }
            }
            SocketEvent::Writable(socket) => {
                if let Some(ch) = self.channel_of(socket) {
                    self.channels[ch as usize].blocked = false;
                    if !self.channels[ch as usize].mux.is_empty() {
                        self.mark_pending(ctx, ch);
                    }
                }
            }
            SocketEvent::PeerClosed(socket) => {
                if let Some(ch) = self.channel_of(socket) {
                    self.close_channel(ctx, ch);
                } else if let Some(st) = self.stream_of(socket) {
                    self.streams[st as usize].as_mut().unwrap().server_done = true;
                    let circ = self.streams[st as usize].as_ref().unwrap().circ;
                    self.package(ctx, circ);
                }
            }
            SocketEvent::Closed(socket)
            | SocketEvent::Reset(socket)
            | SocketEvent::TimedOut(socket) => {
                if let Some(ch) = self.channel_of(socket) {
                    self.close_channel(ctx, ch);
                } else if let Some(st) = self.stream_of(socket) {
                    let done = self.streams[st as usize].as_ref().unwrap().server_done;
                    if done {
                        // The server closed after sending everything: package the rest.
                        let circ = self.streams[st as usize].as_ref().unwrap().circ;
                        self.package(ctx, circ);
                    } else {
                        self.end_stream(ctx, st, true);
                    }
                }
            }
            SocketEvent::Datagram { .. } => {}
        }
    }

    /// Reads as much of a channel's waiting data as the read bucket allows.
    fn read_channel(&mut self, ctx: &mut Context<'_, Ev>, ch: u32) {
        let now = ctx.now();
        let socket = self.channels[ch as usize].socket;
        let waiting = self.stack.readable(socket);
        if waiting == 0 {
            return;
        }
        let allowance = self.buckets.read_allowance(now, true);
        let n = self.stack.read(ctx, socket, waiting.min(allowance));
        self.buckets.note_read(n, true);
        if n < waiting {
            let c = &mut self.channels[ch as usize];
            if !c.read_blocked {
                c.read_blocked = true;
                self.read_waiting.push(ch);
            }
            self.arm_refill(ctx);
        }
    }

    fn arm_refill(&mut self, ctx: &mut Context<'_, Ev>) {
        if !self.refill_armed {
            self.refill_armed = true;
            let now = ctx.now();
            self.buckets.refill(now);
            // With the buckets refilled up to now the next tick is later; if it is not, the
            // tick arithmetic overflowed (an absurd refill interval) and the next tick is
            // beyond the end of time. Refilling at `now` again would change nothing and spin.
            let next = self.buckets.next_refill();
            let at = if next > now { next } else { SimTime::MAX };
            ctx.schedule_at(at, Ev::Relay(RelayTimer::Refill));
        }
    }

    fn new_circuit(&mut self, circuit: Circuit) -> u32 {
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

    fn handle_cell(&mut self, ctx: &mut Context<'_, Ev>, ch: u32, cell: Cell) {
        if cell.command == CellCommand::Create2 {
            self.on_create(ctx, ch, cell);
            return;
        }
        let Some(circ) = self.channels[ch as usize].lookup(cell.circ_id) else {
            return;
        };
        let c = self.circuits[circ as usize].as_ref().unwrap();
        let from_prev = c.prev.chan == ch && c.prev.circ_id == cell.circ_id;
        match cell.command {
            CellCommand::Destroy => self.destroy_circuit(ctx, circ, Some(from_prev)),
            CellCommand::Created2 if !from_prev => {
                // Our EXTEND2 succeeded: tell the client.
                let hop = c.hop;
                let reply = Cell::relay(0, RelayCommand::Extended2, hop, 0);
                self.queue_towards(ctx, circ, false, reply);
            }
            CellCommand::Relay | CellCommand::RelayEarly if from_prev => {
                if cell.hop == c.hop {
                    self.relay_cell_for_us(ctx, circ, cell);
                } else if c.next.is_some() {
                    self.queue_towards(ctx, circ, true, cell);
                }
            }
            CellCommand::Relay | CellCommand::RelayEarly => {
                self.queue_towards(ctx, circ, false, cell);
            }
            _ => {}
        }
    }

    fn on_create(&mut self, ctx: &mut Context<'_, Ev>, ch: u32, cell: Cell) {
        let circ = self.new_circuit(Circuit {
            prev: Side {
                chan: ch,
                circ_id: cell.circ_id,
                queue: VecDeque::new(),
            },
            next: None,
            hop: cell.hop.max(1),
            exit: None,
            stats: QueueStats::default(),
        });
        if !self.channels[ch as usize].bind_theirs(cell.circ_id, circ) {
            // The id is taken: a confused peer. Refuse.
            self.circuits[circ as usize] = None;
            self.free_circuits.push(circ);
            return;
        }
        let reply = Cell::new(0, CellCommand::Created2);
        self.queue_towards(ctx, circ, false, reply);
    }

    fn relay_cell_for_us(&mut self, ctx: &mut Context<'_, Ev>, circ: u32, cell: Cell) {
        match cell.relay {
            RelayCommand::Extend2 => self.extend(ctx, circ, cell.arg as HostId),
            RelayCommand::Begin => self.begin(ctx, circ, cell),
            RelayCommand::Data => self.exit_data(ctx, circ, cell),
            RelayCommand::Sendme => self.exit_sendme(ctx, circ, cell),
            RelayCommand::End => {
                if let Some(st) = self.find_stream(circ, cell.stream_id) {
                    self.end_stream(ctx, st, false);
                }
            }
            RelayCommand::Xoff | RelayCommand::Xon => {
                if let Some(st) = self.find_stream(circ, cell.stream_id) {
                    let s = self.streams[st as usize].as_mut().unwrap();
                    s.sender.set_xoff(cell.relay == RelayCommand::Xoff);
                    if cell.relay == RelayCommand::Xon {
                        self.package(ctx, circ);
                    }
                }
            }
            _ => {}
        }
    }

    fn extend(&mut self, ctx: &mut Context<'_, Ev>, circ: u32, target: HostId) {
        if self.circuits[circ as usize]
            .as_ref()
            .unwrap()
            .next
            .is_some()
        {
            return;
        }
        let ch = match self.chan_by_peer.get(&target) {
            Some(&ch) => ch,
            None => {
                if self.open_sockets >= self.world.params.conn_limit {
                    self.now_counters.conn_limit_refusals += 1;
                    self.destroy_circuit(ctx, circ, None);
                    return;
                }
                let socket = self.stack.connect(ctx, target, OR_PORT);
                let ch = self.add_channel(ctx.now(), socket, target, true, false);
                self.chan_by_peer.insert(target, ch);
                ch
            }
        };
        let circ_id = self.channels[ch as usize].allocate(circ);
        let c = self.circuits[circ as usize].as_mut().unwrap();
        c.next = Some(Side {
            chan: ch,
            circ_id,
            queue: VecDeque::new(),
        });
        let mut create = Cell::new(0, CellCommand::Create2);
        create.hop = c.hop + 1;
        self.queue_towards(ctx, circ, true, create);
    }

    /// Puts a cell on a circuit's queue towards the exit (`forward`) or the client.
    fn queue_towards(
        &mut self,
        ctx: &mut Context<'_, Ev>,
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
            self.destroy_circuit(ctx, circ, None);
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
        self.mark_pending(ctx, ch);
    }

    fn mark_pending(&mut self, ctx: &mut Context<'_, Ev>, ch: u32) {
        let chan = &mut self.channels[ch as usize];
        if chan.pending || chan.mux.is_empty() {
            return;
        }
        chan.pending = true;
        self.pending.push(ch);
        self.arm_scheduler(ctx);
    }

    /// Arms the KIST scheduler like tor's `kist_scheduler_schedule`: at the end of the run
    /// interval counted from the last run, which is now if the last run is that long ago.
    fn arm_scheduler(&mut self, ctx: &mut Context<'_, Ev>) {
        if self.world.params.scheduler == SchedulerKind::Vanilla || self.schedule_armed {
            return;
        }
        self.schedule_armed = true;
        // Never 0: a run that leaves work (a blocked channel) would re-arm itself at the same
        // instant forever. Huge intervals saturate (the scheduler then never runs again).
        let interval = millis(self.world.params.kist_run_interval_ms).max(1);
        let since = self
            .last_schedule_run
            .map_or(interval, |t| ctx.now().saturating_sub(t));
        ctx.schedule_in(
            interval.saturating_sub(since),
            Ev::Relay(RelayTimer::Schedule),
        );
    }

    /// Moves queued cells into channel sockets: globally across channels, quietest circuit
    /// first, within each socket's write limit and the write bucket.
    fn run_scheduler(&mut self, ctx: &mut Context<'_, Ev>) {
        let now = ctx.now();
        // Tor stamps the run when it ends; in simulated time that is this same instant, and
        // stamping first keeps work queued during the run from re-arming it at once.
        self.last_schedule_run = Some(now);
        let cell_bytes = cell_wire_bytes(&self.world);
        let world = self.world.clone();
        let params = &world.params;
        let mut allowance = self.buckets.write_allowance(now, true);
        let mut heap: BinaryHeap<Reverse<(u64, u32)>> = BinaryHeap::new();
        let mut deferred = Vec::new();
        for ch in std::mem::take(&mut self.pending) {
            let chan = &mut self.channels[ch as usize];
            chan.pending = false;
            if chan.mux.is_empty() {
                continue;
            }
            if !chan.open || chan.blocked {
                deferred.push(ch);
                continue;
            }
            let info = self.stack.tcp_info(chan.socket);
            chan.limit = match (params.scheduler, info) {
                (_, None) => 0,
                (SchedulerKind::Kist, Some(i)) => kist_write_limit(
                    i.cwnd,
                    i.unacked,
                    i.mss,
                    i.notsent,
                    0,
                    params.kist_sock_buf_size_factor,
                ),
                (SchedulerKind::KistLite, Some(_)) => {
                    kistlite_write_limit(params.outbuf_high_bytes, 0)
                }
                // The old scheduler writes until the kernel refuses more.
                (SchedulerKind::Vanilla, Some(_)) => u64::MAX,
            };
            if chan.limit >= cell_bytes {
                let best = chan.mux.best_value(now).unwrap_or(0.0);
                heap.push(Reverse((ewma_key(best), ch)));
            } else {
                deferred.push(ch);
            }
        }
        let mut touched = Vec::new();
        let mut unblocked = Vec::new();
        while let Some(Reverse((_, ch))) = heap.pop() {
            if allowance < cell_bytes {
                deferred.push(ch);
                continue;
            }
            let chan = &mut self.channels[ch as usize];
            let Some(circ) = chan.mux.best(now) else {
                continue;
            };
            let c = self.circuits[circ as usize].as_mut().unwrap();
            let side = if c.prev.chan == ch {
                &mut c.prev
            } else {
                c.next.as_mut().unwrap()
            };
            let Some(cell) = side.queue.pop_front() else {
                chan.mux.remove(circ);
                if !chan.mux.is_empty() {
                    let best = chan.mux.best_value(now).unwrap_or(0.0);
                    heap.push(Reverse((ewma_key(best), ch)));
                }
                continue;
            };
            if !self
                .stack
                .write_message(chan.socket, cell_bytes, Wire::Cell(cell))
            {
                side.queue.push_front(cell);
                chan.blocked = true;
                deferred.push(ch);
                continue;
            }
            let emptied = side.queue.is_empty();
            if let Some(exit) = c.exit.as_mut() {
                if exit.edge_blocked && side.queue.len() <= params.circuit_queue_low_cells as usize
                {
                    exit.edge_blocked = false;
                    unblocked.push(circ);
                }
            }
            let own = side.queue.len() as u64 + 1;
            c.stats.cells += 1;
            c.stats.overtaken += chan.queued - own;
            chan.queued -= 1;
            self.queued_cells -= 1;
            chan.limit -= cell_bytes;
            allowance -= cell_bytes;
            self.buckets.note_written(cell_bytes, true);
            self.now_counters.cells_out += 1;
            self.now_counters.bytes_written += cell_bytes;
            chan.mux.note_sent(circ, 1, now);
            if emptied {
                chan.mux.remove(circ);
            }
            if !touched.contains(&ch) {
                touched.push(ch);
            }
            if !chan.mux.is_empty() {
                if chan.limit >= cell_bytes {
                    let best = chan.mux.best_value(now).unwrap_or(0.0);
                    heap.push(Reverse((ewma_key(best), ch)));
                } else {
                    self.write_limit_hits += 1;
                    deferred.push(ch);
                }
            }
        }
        if params.scheduler == SchedulerKind::Kist {
            for &ch in &touched {
                let socket = self.channels[ch as usize].socket;
                if let Some(i) = self.stack.tcp_info(socket) {
                    let (cwnd, unacked, mss) = (i.cwnd as i64, i.unacked as i64, i.mss as i64);
                    let space = (cwnd - unacked).max(0) * mss;
                    let extra = ((cwnd * mss) as f64 * params.kist_sock_buf_size_factor) as i64;
                    let excess = (i.notsent as i64).saturating_sub(space.saturating_add(extra));
                    self.kist_audit.checks += 1;
                    self.kist_audit.max_excess = self.kist_audit.max_excess.max(excess);
                }
            }
        }
        for &ch in &touched {
            let socket = self.channels[ch as usize].socket;
            self.stack.flush(ctx, socket);
        }
        for circ in unblocked {
            self.package(ctx, circ);
        }
        let out_of_tokens = allowance < cell_bytes;
        for ch in deferred {
            let chan = &mut self.channels[ch as usize];
            if !chan.pending && !chan.mux.is_empty() {
                chan.pending = true;
                self.pending.push(ch);
            }
        }
        if !self.pending.is_empty() {
            if out_of_tokens {
                self.arm_refill(ctx);
            }
            self.arm_scheduler(ctx);
        }
    }

    fn destroy_circuit(
        &mut self,
        ctx: &mut Context<'_, Ev>,
        circ: u32,
        came_from_prev: Option<bool>,
    ) {
        let Some(c) = self.circuits[circ as usize].take() else {
            return;
        };
        self.free_circuits.push(circ);
        let mut sides = vec![(c.prev, came_from_prev != Some(true))];
        if let Some(next) = c.next {
            sides.push((next, came_from_prev != Some(false)));
        }
        for (side, notify) in sides {
            self.queued_cells -= side.queue.len() as u64;
            let chan = &mut self.channels[side.chan as usize];
            chan.queued -= side.queue.len() as u64;
            chan.mux.detach(circ);
            chan.release(side.circ_id);
            if notify && chan.open {
                let destroy = Cell::new(side.circ_id, CellCommand::Destroy);
                let cell_bytes = cell_wire_bytes(&self.world);
                if self
                    .stack
                    .write_message(chan.socket, cell_bytes, Wire::Cell(destroy))
                {
                    self.stack.flush(ctx, chan.socket);
                }
            }
        }
        if let Some(exit) = c.exit {
            for st in exit.streams {
                if let Some(s) = self.streams[st as usize].take() {
                    self.free_streams.push(st);
                    self.stack.abort(ctx, s.socket);
                    self.open_sockets -= 1;
                }
            }
        }
    }

    fn close_channel(&mut self, ctx: &mut Context<'_, Ev>, ch: u32) {
        let chan = &mut self.channels[ch as usize];
        if chan.socket.slot == NONE {
            return;
        }
        let socket = chan.socket;
        let peer = chan.peer;
        let circuits: Vec<u32> = chan
            .ours
            .iter()
            .chain(chan.theirs.iter())
            .copied()
            .filter(|&c| c != NONE)
            .collect();
        chan.open = false;
        chan.socket.slot = NONE;
        self.chan_by_socket[socket.slot as usize] = NONE;
        if self.chan_by_peer.get(&peer) == Some(&ch) {
            self.chan_by_peer.remove(&peer);
        }
        self.open_sockets -= 1;
        for circ in circuits {
            let from_prev = self.circuits[circ as usize]
                .as_ref()
                .map(|c| c.prev.chan == ch);
            if let Some(from_prev) = from_prev {
                self.destroy_circuit(ctx, circ, Some(from_prev));
            }
        }
        if self.stack.is_open(socket) {
            self.stack.abort(ctx, socket);
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

    fn begin(&mut self, ctx: &mut Context<'_, Ev>, circ: u32, cell: Cell) {
        let relay = &self.world.consensus.relays[self.relay];
        let c = self.circuits[circ as usize].as_ref().unwrap();
        if c.next.is_some() || !relay.exit_policy.allows_port(HTTP_PORT) {
            let mut end = Cell::relay(0, RelayCommand::End, c.hop, cell.stream_id);
            end.arg = 1;
            self.queue_towards(ctx, circ, false, end);
            return;
        }
        if self.open_sockets >= self.world.params.conn_limit {
            self.now_counters.conn_limit_refusals += 1;
            let mut end = Cell::relay(0, RelayCommand::End, c.hop, cell.stream_id);
            end.arg = 1;
            self.queue_towards(ctx, circ, false, end);
            return;
        }
        let now = ctx.now();
        let socket = self.stack.connect(ctx, cell.arg as HostId, HTTP_PORT);
        self.stack.set_auto_read(socket, false);
        self.open_sockets += 1;
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

    fn server_connected(&mut self, ctx: &mut Context<'_, Ev>, st: u32) {
        let s = self.streams[st as usize].as_mut().unwrap();
        s.connected = true;
        let (circ, stream_id, socket, request) = (s.circ, s.stream_id, s.socket, s.request.take());
        let hop = self.circuits[circ as usize].as_ref().unwrap().hop;
        let connected = Cell::relay(0, RelayCommand::Connected, hop, stream_id);
        self.queue_towards(ctx, circ, false, connected);
        if let Some(bytes) = request {
            self.send_request(ctx, socket, bytes);
        }
    }

    fn send_request(&mut self, ctx: &mut Context<'_, Ev>, socket: SocketId, bytes: u32) {
        if self
            .stack
            .write_message(socket, REQUEST_BYTES, Wire::Request { bytes })
        {
            self.stack.flush(ctx, socket);
        }
    }

    /// A DATA cell from the client: the request of a download.
    fn exit_data(&mut self, ctx: &mut Context<'_, Ev>, circ: u32, cell: Cell) {
        let now = ctx.now();
        let hop = self.circuits[circ as usize].as_ref().unwrap().hop;
        if self
            .exit_circuit(circ, now)
            .receiver
            .on_data()
            .unwrap_or(false)
        {
            let sendme = Cell::relay(0, RelayCommand::Sendme, hop, 0);
            self.queue_towards(ctx, circ, false, sendme);
        }
        let Some(st) = self.find_stream(circ, cell.stream_id) else {
            return;
        };
        let s = self.streams[st as usize].as_mut().unwrap();
        if s.receiver.on_data().unwrap_or(false) {
            let sendme = Cell::relay(0, RelayCommand::Sendme, hop, cell.stream_id);
            self.queue_towards(ctx, circ, false, sendme);
        }
        let s = self.streams[st as usize].as_mut().unwrap();
        if s.connected {
            let socket = s.socket;
            self.send_request(ctx, socket, cell.arg);
        } else {
            s.request = Some(cell.arg);
        }
    }

    fn exit_sendme(&mut self, ctx: &mut Context<'_, Ev>, circ: u32, cell: Cell) {
        let now = ctx.now();
        if cell.stream_id == 0 {
            let blocked = {
                let c = self.circuits[circ as usize].as_ref().unwrap();
                self.channels[c.prev.chan as usize].blocked
            };
            let increment = match self.world.params.flow_control {
                FlowControl::Sendme => self.world.params.circuit_sendme_increment,
                FlowControl::Vegas => self.world.params.cc_sendme_inc.max(1),
            } as u64;
            let exit = self.exit_circuit(circ, now);
            if !exit.sender.on_sendme(now, blocked) {
                self.destroy_circuit(ctx, circ, None);
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
        self.package(ctx, circ);
    }

    /// Turns server data into DATA cells for as long as the circuit's and streams' windows,
    /// the data waiting and the read bucket allow, serving the circuit's streams in turn.
    fn package(&mut self, ctx: &mut Context<'_, Ev>, circ: u32) {
        let now = ctx.now();
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
                let waiting = self.stack.readable(s.socket);
                if waiting == 0 {
                    if s.server_done {
                        self.end_stream(ctx, st, false);
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
                    self.arm_refill(ctx);
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
                let n = self.stack.read(ctx, socket, want);
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
                self.queue_towards(ctx, circ, false, data);
                progressed = true;
                break;
            }
            if !progressed {
                return;
            }
        }
    }

    fn end_stream(&mut self, ctx: &mut Context<'_, Ev>, st: u32, failed: bool) {
        let Some(s) = self.streams[st as usize].take() else {
            return;
        };
        self.free_streams.push(st);
        self.stream_by_socket[s.socket.slot as usize] = NONE;
        self.open_sockets -= 1;
        if self.stack.is_open(s.socket) {
            self.stack.close(ctx, s.socket);
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
        self.queue_towards(ctx, s.circ, false, end);
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
