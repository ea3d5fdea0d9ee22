//! The socket exhaustion attack: an attacker that makes a victim relay hold as many sockets as
//! it can by building circuits through it.
//!
//! From `start` to `end`, every `every` the attacker builds `circuits` circuits whose first hop
//! is the victim, each extended to another relay, and keeps them open (sending nothing) until
//! `end`. What a circuit costs the victim depends on the channel design, so the attacker uses
//! as many client identities (connections of its own) as the design makes worthwhile: under
//! PCTCP every circuit already costs the victim a connection to the next relay, and one
//! identity suffices; under the other designs the victim shares one channel per peer, so each
//! circuit comes from a fresh identity (a new connection to the victim), as an attacker
//! running many tor clients would.

use onionlab_engine::time::{SimDuration, SimTime};
use onionlab_engine::Context;
use onionlab_net::{NetEvent, NetStack, SocketEvent, SocketId};
use onionlab_torcore::{Cell, CellCommand, ChannelDesign, RelayCommand, CELL_BYTES};
use rand::RngExt;
use std::sync::Arc;

use crate::host::Ev;
use crate::wire::{Wire, INITIATOR_BIT};
use crate::world::{TorWorld, OR_PORT};

/// What the attacker does, in simulation units.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttackPlan {
    /// Consensus index of the victim relay.
    pub victim: usize,
    pub start: SimTime,
    pub end: SimTime,
    /// Circuits built per burst.
    pub circuits: u32,
    pub every: SimDuration,
}

#[derive(Clone, Copy, Debug)]
pub enum AttackTimer {
    Burst,
    Stop,
}

pub struct Attacker {
    pub stack: NetStack<Wire>,
    world: Arc<TorWorld>,
    plan: AttackPlan,
    /// The attacker's connections to the victim (one per identity).
    sockets: Vec<SocketId>,
    next_circ_id: u32,
    stopped: bool,
    /// Circuits the attacker asked for.
    pub circuits_built: u64,
    /// Connections the victim refused or dropped.
    pub refused: u64,
}

impl Attacker {
    pub fn new(stack: NetStack<Wire>, world: Arc<TorWorld>, plan: AttackPlan) -> Self {
        Attacker {
            stack,
            world,
            plan,
            sockets: Vec::new(),
            next_circ_id: 0,
            stopped: false,
            circuits_built: 0,
            refused: 0,
        }
    }

    pub fn start(&mut self, ctx: &mut Context<'_, Ev>) {
        if self.plan.end > self.plan.start {
            ctx.schedule_at(self.plan.start, Ev::Attack(AttackTimer::Burst));
            ctx.schedule_at(self.plan.end, Ev::Attack(AttackTimer::Stop));
        }
    }

    pub fn on_timer(&mut self, ctx: &mut Context<'_, Ev>, timer: AttackTimer) {
        match timer {
            AttackTimer::Burst if !self.stopped => {
                self.burst(ctx);
                let next = ctx.now().saturating_add(self.plan.every.max(1));
                if next < self.plan.end {
                    ctx.schedule_at(next, Ev::Attack(AttackTimer::Burst));
                }
            }
            AttackTimer::Burst => {}
            AttackTimer::Stop => {
                self.stopped = true;
                for socket in std::mem::take(&mut self.sockets) {
                    self.stack.close(ctx, socket);
                }
            }
        }
        self.drain();
    }

    pub fn on_net(&mut self, ctx: &mut Context<'_, Ev>, event: NetEvent<Wire>) {
        self.stack.handle(ctx, event);
        self.drain();
    }

    /// The attacker ignores what comes back, apart from noticing refused connections.
    fn drain(&mut self) {
        while let Some(event) = self.stack.poll_event() {
            if let SocketEvent::Reset(socket)
            | SocketEvent::TimedOut(socket)
            | SocketEvent::PeerClosed(socket) = event
            {
                if let Some(i) = self.sockets.iter().position(|&s| s == socket) {
                    self.sockets.swap_remove(i);
                    self.refused += 1;
                }
            }
        }
    }

    fn burst(&mut self, ctx: &mut Context<'_, Ev>) {
        let victim = self.world.relay_hosts[self.plan.victim];
        let relays = self.world.relay_hosts.len();
        let one_identity = self.world.params.channel == ChannelDesign::Pctcp;
        let bytes = (CELL_BYTES + self.world.params.tls_overhead_per_cell) as u64;
        for _ in 0..self.plan.circuits {
            let socket = match self.sockets.last() {
                Some(&s) if one_identity => s,
                _ => {
                    let s = self.stack.connect(ctx, victim, OR_PORT);
                    self.sockets.push(s);
                    s
                }
            };
            let circ_id = self.next_circ_id | INITIATOR_BIT;
            self.next_circ_id = (self.next_circ_id + 1) & !INITIATOR_BIT;
            let mut create = Cell::new(circ_id, CellCommand::Create2);
            create.hop = 1;
            // Extend to any relay but the victim.
            let mut next = ctx.rng().random_range(0..relays);
            if next == self.plan.victim {
                next = (next + 1) % relays;
            }
            let mut extend = Cell::relay(circ_id, RelayCommand::Extend2, 1, 0);
            extend.command = CellCommand::RelayEarly;
            extend.arg = self.world.relay_hosts[next];
            self.stack.write_message(socket, bytes, Wire::Cell(create));
            self.stack.write_message(socket, bytes, Wire::Cell(extend));
            self.stack.flush(ctx, socket);
            self.circuits_built += 1;
        }
    }
}
