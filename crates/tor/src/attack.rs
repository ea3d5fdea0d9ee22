//! The socket exhaustion attack: an attacker that makes a victim relay hold as many sockets as
//! it can by building circuits through it.
//!
//! From `start` to `end`, every `every` the attacker builds `circuits` circuits whose first hop
//! is the victim, each extended to another relay, and keeps them open (sending nothing) until
//! `end`. A period's circuits leave one after the other, evenly spaced over the period, as a
//! script driving a tor client launches them, rather than in one instant: a socket the victim
//! frees between two instants would otherwise go to whichever client asked first, and an
//! attacker that keeps asking is what exhausts a victim. What a circuit costs the victim depends on the channel design, so the attacker uses
//! as many client identities (connections of its own) as the design makes worthwhile: under
//! PCTCP every circuit already costs the victim a connection to the next relay, and one
//! identity suffices; under the other designs the victim shares one channel per peer, so each
//! circuit comes from a fresh identity (a new connection to the victim), as an attacker
//! running many tor clients would.

use onionlab_engine::time::{SimDuration, SimTime};
use onionlab_net::{SocketEvent, SocketId};
use onionlab_torcore::{Cell, CellCommand, ChannelDesign, RelayCommand};
use rand::RngExt;
use std::sync::Arc;

use crate::io::{Io, Machine};
use crate::link::LinkHandshake;
use crate::wire::{Wire, INITIATOR_BIT};
use crate::world::{TorWorld, OR_PORT};

/// What the attacker does, in simulation units.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttackPlan {
    /// Consensus index of the victim relay.
    pub victim: usize,
    /// When the first circuit leaves (nanoseconds of simulated time).
    pub start: SimTime,
    /// When the attacker stops launching and closes every connection it holds; no attack
    /// happens unless it is after `start`.
    pub end: SimTime,
    /// Circuits built per burst.
    pub circuits: u32,
    /// Length of one period, over which its `circuits` circuits are spread evenly
    /// (nanoseconds).
    pub every: SimDuration,
}

/// The attacker's timers.
#[derive(Clone, Copy, Debug)]
pub enum AttackTimer {
    /// Time to launch the next circuit.
    Launch,
    /// The attack's `end`: stop launching and close every connection to the victim.
    Stop,
}

/// One of the attacker's connections to the victim: its cells wait for the link handshake,
/// as a tor client's do.
struct AttackConn {
    socket: SocketId,
    link: LinkHandshake,
    waiting: Vec<Cell>,
}

/// The socket exhaustion attacker: a sans-IO machine that opens connections to the victim
/// relay and builds circuits through it as its [`AttackPlan`] says.
pub struct Attacker {
    world: Arc<TorWorld>,
    plan: AttackPlan,
    /// The attacker's connections to the victim (one per identity).
    sockets: Vec<AttackConn>,
    next_circ_id: u32,
    /// Circuits launched so far; with the plan it fixes when the next one leaves.
    launched: u64,
    stopped: bool,
    /// Circuits the attacker asked for.
    pub circuits_built: u64,
    /// Connections the victim refused or dropped.
    pub refused: u64,
}

impl Attacker {
    /// An attacker that will carry out `plan` once started, holding no connection yet.
    pub fn new(world: Arc<TorWorld>, plan: AttackPlan) -> Self {
        Attacker {
            world,
            plan,
            sockets: Vec::new(),
            next_circ_id: 0,
            launched: 0,
            stopped: false,
            circuits_built: 0,
            refused: 0,
        }
    }

    /// When circuit `n` (from 0) leaves: period `n / circuits`, slot `n % circuits` of it.
    /// Computed from `n` rather than added up, so that rounding never drifts.
    fn launch_time(&self, n: u64) -> SimTime {
        let per = u64::from(self.plan.circuits.max(1));
        let every = self.plan.every.max(1);
        let period = (n / per).saturating_mul(every);
        let slot = ((n % per) as u128 * every as u128 / per as u128) as u64;
        self.plan.start.saturating_add(period).saturating_add(slot)
    }

    /// The attacker runs the link handshake and otherwise ignores what comes back, apart
    /// from noticing refused connections.
    fn drain(&mut self, io: &mut impl Io<AttackTimer>) {
        let bytes = self.world.cell_wire_bytes();
        while let Some(event) = io.poll_event() {
            match event {
                SocketEvent::Reset(socket)
                | SocketEvent::TimedOut(socket)
                | SocketEvent::PeerClosed(socket) => {
                    if let Some(i) = self.sockets.iter().position(|c| c.socket == socket) {
                        self.sockets.swap_remove(i);
                        self.refused += 1;
                    }
                }
                SocketEvent::Connected(socket) => {
                    if let Some(c) = self.sockets.iter_mut().find(|c| c.socket == socket) {
                        if let Some(hello) = c.link.connected() {
                            io.write_message(socket, hello.wire_bytes(), Wire::Link(hello));
                        }
                        Self::send_waiting(io, c, bytes);
                    }
                }
                SocketEvent::Message {
                    socket,
                    message: Wire::Link(flight),
                    ..
                } => {
                    if let Some(c) = self.sockets.iter_mut().find(|c| c.socket == socket) {
                        if let Ok(Some(reply)) = c.link.on_flight(flight) {
                            io.write_message(socket, reply.wire_bytes(), Wire::Link(reply));
                        }
                        Self::send_waiting(io, c, bytes);
                    }
                }
                _ => {}
            }
        }
    }

    /// Writes the cells that waited for `c`'s handshake, once it is done.
    fn send_waiting(io: &mut impl Io<AttackTimer>, c: &mut AttackConn, bytes: u64) {
        if c.link.is_open() {
            for cell in c.waiting.drain(..) {
                io.write_message(c.socket, bytes, Wire::Cell(cell));
            }
        }
        io.flush(c.socket);
    }

    /// Builds one circuit through the victim.
    fn launch(&mut self, io: &mut impl Io<AttackTimer>) {
        let victim = self.world.relay_hosts[self.plan.victim];
        let relays = self.world.relay_hosts.len();
        let one_identity = self.world.params.channel == ChannelDesign::Pctcp;
        let bytes = self.world.cell_wire_bytes();
        if !one_identity || self.sockets.is_empty() {
            let socket = io.connect(victim, OR_PORT);
            self.sockets.push(AttackConn {
                socket,
                link: LinkHandshake::opening(self.world.params.link_handshake, false),
                waiting: Vec::new(),
            });
        }
        let conn = self.sockets.last_mut().expect("a connection was just made");
        let circ_id = self.next_circ_id | INITIATOR_BIT;
        self.next_circ_id = (self.next_circ_id + 1) & !INITIATOR_BIT;
        let mut create = Cell::new(circ_id, CellCommand::Create2);
        create.hop = 1;
        // Extend to any relay but the victim.
        let mut next = io.rng().random_range(0..relays);
        if next == self.plan.victim {
            next = (next + 1) % relays;
        }
        let mut extend = Cell::relay(circ_id, RelayCommand::Extend2, 1, 0);
        extend.command = CellCommand::RelayEarly;
        extend.arg = self.world.relay_hosts[next];
        conn.waiting.extend([create, extend]);
        if conn.link.is_open() {
            // Without the handshake cells queue in the socket until TCP connects.
            Self::send_waiting(io, conn, bytes);
        }
        self.circuits_built += 1;
    }
}

impl Machine for Attacker {
    type Timer = AttackTimer;

    fn start(&mut self, io: &mut impl Io<AttackTimer>) {
        if self.plan.end > self.plan.start {
            io.arm_at(self.plan.start, AttackTimer::Launch);
            io.arm_at(self.plan.end, AttackTimer::Stop);
        }
    }

    fn on_timer(&mut self, io: &mut impl Io<AttackTimer>, timer: AttackTimer) {
        match timer {
            AttackTimer::Launch if !self.stopped => {
                self.launch(io);
                self.launched += 1;
                let next = self.launch_time(self.launched);
                if next < self.plan.end {
                    io.arm_at(next.max(io.now()), AttackTimer::Launch);
                }
            }
            AttackTimer::Launch => {}
            AttackTimer::Stop => {
                self.stopped = true;
                for conn in std::mem::take(&mut self.sockets) {
                    io.close(conn.socket);
                }
            }
        }
        self.drain(io);
    }

    /// Handles what the sockets reported since the last call.
    fn on_socket_events(&mut self, io: &mut impl Io<AttackTimer>) {
        self.drain(io);
    }
}
