//! The simulation: endpoints, the two links between them, and the event loop that delivers
//! packets, fires timers and ticks applications.

use crate::drive;
use crate::endpoint::Endpoint;
use crate::link::{Link, LinkConfig};
use crate::queue::{Action, Agenda};
use crate::rng::Rng;
use crate::transport::{Conn, Event, Pkt, Proto};
use crate::{MS, NEVER, SEC};
use onionlab_engine::time::{SimDuration, SimTime};
use onionlab_quic::{QuicConfig, QuicConnection};
use onionlab_tcp::{TcpConfig, TcpConnection, TcpFlags, TcpState};
use std::sync::Arc;

type DropFn = Box<dyn FnMut(usize, &Pkt, SimTime) -> bool>;
type DelayFn = Box<dyn FnMut(usize, &Pkt, SimTime) -> SimDuration>;
type SendHook = Box<dyn FnMut(&Sim, usize, &Pkt)>;

/// A run of the network. Tests set the endpoints' applications and hooks, call
/// [`start`](Sim::start), then [`run_until`](Sim::run_until) and inspect.
pub struct Sim {
    /// The current simulated time.
    pub now: SimTime,
    /// The endpoints: the client of flow `f` is `2f`, its server `2f + 1`.
    pub eps: Vec<Endpoint>,
    /// 0: clients to servers, 1: servers to clients.
    pub links: [Link; 2],
    /// The one generator behind every random loss and reordering.
    pub rng: Rng,
    /// Extra deterministic drops: `(from endpoint, packet, now) -> drop?`, before the link.
    pub drop: Option<DropFn>,
    /// Extra deterministic delay after the bottleneck: `(from, packet, now) -> delay`.
    pub delay: Option<DelayFn>,
    /// Called for every packet an endpoint hands to the network, before any drop.
    pub on_send: Option<SendHook>,
    /// Check each connection's invariants after every input (on by default; bulk runs turn
    /// it off for speed).
    pub check: bool,
    /// The applications' tick, for rate-limited readers and paced writers.
    pub tick: SimDuration,
    agenda: Agenda,
}

impl Sim {
    /// One flow per entry of `protos` over links `fwd` (clients to servers) and `rev`, with
    /// randomness from `seed`.
    pub fn new(protos: &[Proto], fwd: LinkConfig, rev: LinkConfig, seed: u64) -> Self {
        let mut sim = Sim {
            now: 0,
            eps: Vec::new(),
            links: [Link::new(fwd), Link::new(rev)],
            rng: Rng::new(seed),
            drop: None,
            delay: None,
            on_send: None,
            check: true,
            tick: 10 * MS,
            agenda: Agenda::default(),
        };
        for (f, proto) in protos.iter().enumerate() {
            let conn = match proto {
                Proto::Quic(cfg) => Conn::Quic(QuicConnection::connect(cfg.clone(), 0)),
                // Sequence spaces a million apart, so that no two flows' numbers could match.
                Proto::Tcp(cfg) => {
                    Conn::Tcp(TcpConnection::connect(cfg, 0, 1000 + f as u64 * 1_000_000))
                }
            };
            sim.eps.push(Endpoint::new(Some(conn), proto.clone()));
            sim.eps.push(Endpoint::new(None, proto.clone()));
        }
        sim
    }

    /// A single QUIC flow.
    pub fn quic(cfg: QuicConfig, fwd: LinkConfig, rev: LinkConfig, seed: u64) -> Self {
        Sim::new(&[Proto::Quic(Arc::new(cfg))], fwd, rev, seed)
    }

    /// `flows` TCP flows, all with `cfg` at both ends.
    pub fn tcp(cfg: &TcpConfig, flows: usize, fwd: LinkConfig, rev: LinkConfig, seed: u64) -> Self {
        let proto = Proto::Tcp(Arc::new(cfg.clone()));
        Sim::new(&vec![proto; flows], fwd, rev, seed)
    }

    /// Starts every client, and the ticks of the applications that need them, at the current
    /// time (call after setting apps).
    pub fn start(&mut self) {
        for i in 0..self.eps.len() {
            if self.eps[i].conn.is_some() {
                self.pump(i);
            }
            if self.eps[i].app.read_rate.is_some() || self.eps[i].app.write_per_tick > 0 {
                self.agenda.push(self.now + self.tick, Action::Tick(i));
            }
        }
    }

    /// Runs every event due by `until`, then sets the clock to `until` (never back).
    pub fn run_until(&mut self, until: SimTime) {
        while let Some((at, action)) = self.agenda.pop_due(until) {
            self.now = at;
            match action {
                Action::Deliver(to, p) => self.deliver(to, p),
                Action::Timer(who) => self.fire_timer(who, at),
                Action::Tick(who) => self.app_tick(who),
            }
        }
        self.now = self.now.max(until);
    }

    /// Lets endpoint `i`'s application act, then sends what its connection has to send and
    /// rearms its timer. Tests call it after acting on a connection themselves.
    pub fn pump(&mut self, i: usize) {
        let now = self.now;
        let check = self.check;
        let ep = &mut self.eps[i];
        let mut out = Vec::new();
        let deadline = match ep.conn {
            Some(Conn::Quic(_)) => drive::quic(ep, now, check, &mut out),
            Some(Conn::Tcp(_)) => drive::tcp(ep, now, check, &mut out),
            None => return,
        };
        // One timer event per new deadline; a stale one finds `timer_at` moved and does nothing.
        if deadline == NEVER {
            ep.timer_at = NEVER;
        } else if deadline != ep.timer_at {
            ep.timer_at = deadline;
            self.agenda.push(deadline, Action::Timer(i));
        }
        for p in out {
            self.transmit(i, p);
        }
    }

    /// A connection's timer: fires only if the connection still wants this deadline.
    fn fire_timer(&mut self, who: usize, at: SimTime) {
        let ep = &mut self.eps[who];
        if ep.timer_at != at {
            return;
        }
        ep.timer_at = NEVER;
        match ep.conn.as_mut() {
            Some(Conn::Quic(c)) => c.on_timeout(at),
            Some(Conn::Tcp(c)) => c.on_timeout(at),
            None => {}
        }
        self.pump(who);
    }

    /// An application's tick: grants the reader its budget, gives the paced writer its
    /// bytes, lets both act and schedules the next tick.
    fn app_tick(&mut self, who: usize) {
        let ep = &mut self.eps[who];
        if let Some(rate) = ep.app.read_rate {
            ep.app.read_budget += rate * self.tick / SEC;
        }
        let w = ep.app.write_per_tick;
        if let Some(st) = ep.streams.values_mut().next() {
            st.to_send += w;
        }
        self.pump(who);
        self.agenda.push(self.now + self.tick, Action::Tick(who));
    }

    /// A packet arrives: notes the stream data it carries (for the read check), then hands it
    /// to the connection, or opens the server's connection with it.
    fn deliver(&mut self, to: usize, p: Pkt) {
        let now = self.now;
        let ep = &mut self.eps[to];
        if let Pkt::Quic(q) = &p {
            for f in q.stream_frames() {
                ep.streams
                    .entry(u64::from(f.id))
                    .or_default()
                    .note_arrival(f.offset, f.offset + u64::from(f.len));
            }
        }
        match (ep.conn.as_mut(), &p) {
            (Some(Conn::Quic(c)), Pkt::Quic(q)) => c.on_packet(now, q),
            (Some(Conn::Tcp(c)), Pkt::Tcp(s)) => c.on_segment(now, s),
            (None, Pkt::Quic(q)) => {
                if let Proto::Quic(cfg) = &ep.proto {
                    ep.conn = Some(Conn::Quic(QuicConnection::accept(cfg.clone(), now, q)));
                }
            }
            (None, Pkt::Tcp(s)) => {
                if let Proto::Tcp(cfg) = &ep.proto {
                    if s.flags.contains(TcpFlags::SYN) && !s.flags.contains(TcpFlags::ACK) {
                        let iss = 5000 + to as u64 * 1_000_000;
                        ep.conn = Some(Conn::Tcp(TcpConnection::accept(cfg, now, iss, s)));
                    }
                }
            }
            _ => panic!("protocol mismatch"),
        }
        self.pump(to);
    }

    /// A packet leaves endpoint `from`: recorded, shown to `on_send`, offered to `drop`, then
    /// to the link towards the peer, then delayed by `delay`.
    fn transmit(&mut self, from: usize, p: Pkt) {
        let now = self.now;
        if self.eps[from].record {
            self.eps[from].sent.push((now, p));
        }
        if let Some(mut f) = self.on_send.take() {
            f(self, from, &p);
            self.on_send = Some(f);
        }
        if let Some(f) = self.drop.as_mut() {
            if f(from, &p, now) {
                return;
            }
        }
        let link = if from.is_multiple_of(2) { 0 } else { 1 };
        let to = from ^ 1;
        if let Some(mut at) = self.links[link].enqueue(now, p.wire_bytes(), &mut self.rng) {
            if let Some(f) = self.delay.as_mut() {
                at += f(from, &p, now);
            }
            self.agenda.push(at, Action::Deliver(to, p));
        }
    }

    /// Endpoint `i`'s QUIC connection (panics if it has none).
    pub fn quic_conn(&self, i: usize) -> &QuicConnection {
        match self.eps[i].conn.as_ref() {
            Some(Conn::Quic(c)) => c,
            _ => panic!("no QUIC connection at {i}"),
        }
    }

    /// Endpoint `i`'s QUIC connection, to act on it (call [`pump`](Sim::pump) after).
    pub fn quic_conn_mut(&mut self, i: usize) -> &mut QuicConnection {
        match self.eps[i].conn.as_mut() {
            Some(Conn::Quic(c)) => c,
            _ => panic!("no QUIC connection at {i}"),
        }
    }

    /// Endpoint `i`'s TCP connection (panics if it has none).
    pub fn tcp_conn(&self, i: usize) -> &TcpConnection {
        match self.eps[i].conn.as_ref() {
            Some(Conn::Tcp(c)) => c,
            _ => panic!("no TCP connection at {i}"),
        }
    }

    /// Endpoint `i`'s TCP connection, to act on it (call [`pump`](Sim::pump) after).
    pub fn tcp_conn_mut(&mut self, i: usize) -> &mut TcpConnection {
        match self.eps[i].conn.as_mut() {
            Some(Conn::Tcp(c)) => c,
            _ => panic!("no TCP connection at {i}"),
        }
    }

    /// The state of endpoint `i`'s TCP connection, None before a server has one.
    pub fn tcp_state(&self, i: usize) -> Option<TcpState> {
        match self.eps[i].conn.as_ref() {
            Some(Conn::Tcp(c)) => Some(c.state()),
            Some(Conn::Quic(_)) => panic!("no TCP connection at {i}"),
            None => None,
        }
    }

    /// Whether endpoint `i`'s connection raised `e` (a `QuicEvent` or a `TcpEvent`).
    pub fn has_event(&self, i: usize, e: impl Into<Event>) -> bool {
        self.eps[i].has_event(e)
    }

    /// When endpoint `i`'s connection first raised `e`.
    pub fn event_time(&self, i: usize, e: impl Into<Event>) -> Option<SimTime> {
        self.eps[i].event_time(e)
    }

    /// Bytes delivered in order at endpoint `i`: read by the application, all streams, on
    /// QUIC; delivered by the connection on TCP; 0 before the connection exists.
    pub fn delivered(&self, i: usize) -> u64 {
        match self.eps[i].conn.as_ref() {
            Some(Conn::Quic(_)) => self.eps[i].streams.values().map(|s| s.read).sum(),
            Some(Conn::Tcp(c)) => c.delivered(),
            None => 0,
        }
    }

    /// A hash of every recorded packet of every endpoint, for determinism checks.
    pub fn trace_hash(&self) -> u64 {
        // FNV-1a over the packets' debug form: stable across runs and platforms.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for ep in &self.eps {
            for (t, p) in &ep.sent {
                for b in format!("{t}{p:?}").bytes() {
                    h ^= u64::from(b);
                    h = h.wrapping_mul(0x100_0000_01b3);
                }
            }
        }
        h
    }
}
