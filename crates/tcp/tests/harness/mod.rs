//! A tiny deterministic network for exercising TCP connections: flows share a FIFO bottleneck
//! in each direction, with drop-tail queues, propagation delay, optional random loss and
//! reordering, all driven by a seeded PRNG and a binary-heap event loop.

#![allow(dead_code)]

use onionlab_engine::time::{SimDuration, SimTime, NANOS_PER_MILLI, NANOS_PER_SEC};
use onionlab_tcp::{TcpConfig, TcpConnection, TcpEvent, TcpFlags, TcpSegment, TcpState};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;

pub(crate) const MS: u64 = NANOS_PER_MILLI;
pub(crate) const SEC: u64 = NANOS_PER_SEC;
const NEVER: SimTime = u64::MAX;

mod link;
pub(crate) use link::{Link, LinkConfig, Rng};

/// What the application on an endpoint does.
#[derive(Clone, Debug)]
pub(crate) struct App {
    /// Bytes still to write (`u64::MAX` for an endless bulk source).
    pub to_send: u64,
    /// Close once everything is written.
    pub close_when_done: bool,
    /// Close once the peer has finished (a server answering a client's close).
    pub close_on_peer_fin: bool,
    /// Read whatever arrives.
    pub reading: bool,
    pub read_total: u64,
    pub closed: bool,
}

impl App {
    pub(crate) fn sink() -> Self {
        App {
            to_send: 0,
            close_when_done: false,
            close_on_peer_fin: false,
            reading: true,
            read_total: 0,
            closed: false,
        }
    }
    pub(crate) fn source(bytes: u64, close: bool) -> Self {
        App {
            to_send: bytes,
            close_when_done: close,
            ..App::sink()
        }
    }
}

pub(crate) struct Endpoint {
    pub conn: Option<TcpConnection>,
    pub app: App,
    pub events: Vec<(SimTime, TcpEvent)>,
    /// Every segment this endpoint handed to the network.
    pub sent: Vec<(SimTime, TcpSegment)>,
    pub record: bool,
    timer_at: SimTime,
    last_delivered: u64,
}

type DropFn = Box<dyn FnMut(usize, &TcpSegment, SimTime) -> bool>;

pub(crate) struct Sim {
    pub now: SimTime,
    pub eps: Vec<Endpoint>,
    /// 0: clients to servers, 1: servers to clients.
    pub links: [Link; 2],
    pub rng: Rng,
    /// Extra deterministic drops: `(from endpoint, segment, now) -> drop?`.
    pub drop: Option<DropFn>,
    heap: BinaryHeap<Reverse<(SimTime, u64)>>,
    pending: HashMap<u64, Pending>,
    next_id: u64,
    server_config: Arc<TcpConfig>,
    pub check: bool,
}

enum Pending {
    Deliver(usize, TcpSegment),
    Timer(usize),
}

impl Sim {
    /// `flows` client/server pairs; client of flow f is endpoint 2f, its server 2f+1.
    pub(crate) fn new(
        client: &TcpConfig,
        server: &TcpConfig,
        flows: usize,
        fwd: LinkConfig,
        rev: LinkConfig,
        seed: u64,
    ) -> Self {
        let mut sim = Sim {
            now: 0,
            eps: Vec::new(),
            links: [Link::new(fwd), Link::new(rev)],
            rng: Rng::new(seed),
            drop: None,
            heap: BinaryHeap::new(),
            pending: HashMap::new(),
            next_id: 0,
            server_config: Arc::new(server.clone()),
            check: true,
        };
        let client = Arc::new(client.clone());
        for f in 0..flows {
            let conn = TcpConnection::connect(&client, 0, 1000 + f as u64 * 1_000_000);
            sim.eps.push(Endpoint::new(Some(conn), App::sink()));
            sim.eps.push(Endpoint::new(None, App::sink()));
        }
        sim
    }

    /// Starts every client at time 0 (call after setting apps).
    pub(crate) fn start(&mut self) {
        for i in 0..self.eps.len() {
            if self.eps[i].conn.is_some() {
                self.pump(i);
            }
        }
    }

    fn push(&mut self, at: SimTime, p: Pending) {
        let id = self.next_id;
        self.next_id += 1;
        self.pending.insert(id, p);
        self.heap.push(Reverse((at, id)));
    }

    /// Runs until `until` or until nothing is left to do.
    pub(crate) fn run_until(&mut self, until: SimTime) {
        while let Some(&Reverse((at, id))) = self.heap.peek() {
            if at > until {
                break;
            }
            self.heap.pop();
            self.now = at;
            match self.pending.remove(&id).expect("event") {
                Pending::Deliver(to, seg) => self.deliver(to, seg),
                Pending::Timer(who) => {
                    if self.eps[who].timer_at == at {
                        self.eps[who].timer_at = NEVER;
                        if let Some(c) = self.eps[who].conn.as_mut() {
                            c.on_timeout(at);
                        }
                        self.pump(who);
                    }
                }
            }
        }
        self.now = self
            .now
            .max(until.min(self.heap.peek().map_or(until, |r| r.0 .0)));
    }

    fn deliver(&mut self, to: usize, seg: TcpSegment) {
        let now = self.now;
        let ep = &mut self.eps[to];
        match ep.conn.as_mut() {
            Some(c) => c.on_segment(now, &seg),
            None => {
                if seg.flags.contains(TcpFlags::SYN) && !seg.flags.contains(TcpFlags::ACK) {
                    ep.conn = Some(TcpConnection::accept(
                        &self.server_config,
                        now,
                        5000 + to as u64 * 1_000_000,
                        &seg,
                    ));
                }
            }
        }
        self.pump(to);
    }

    /// Lets the application act, then drains segments, events and the timer.
    pub(crate) fn pump(&mut self, i: usize) {
        let now = self.now;
        let mut out: Vec<TcpSegment> = Vec::new();
        {
            let ep = &mut self.eps[i];
            let Some(c) = ep.conn.as_mut() else { return };
            loop {
                let mut progressed = false;
                while let Some(e) = c.poll_event() {
                    ep.events.push((now, e));
                    if e == TcpEvent::PeerFinished && ep.app.close_on_peer_fin {
                        ep.app.close_when_done = true;
                    }
                    progressed = true;
                }
                if ep.app.reading && c.recv_available() > 0 {
                    let n = c.read(u64::MAX);
                    ep.app.read_total += n;
                    progressed = true;
                }
                if ep.app.to_send > 0 {
                    let n = c.send(ep.app.to_send);
                    if ep.app.to_send != u64::MAX {
                        ep.app.to_send -= n;
                    }
                    progressed |= n > 0;
                }
                if ep.app.to_send == 0 && ep.app.close_when_done && !ep.app.closed {
                    ep.app.closed = true;
                    c.close(now);
                    progressed = true;
                }
                while let Some(seg) = c.poll_transmit(now) {
                    out.push(seg);
                    progressed = true;
                }
                if !progressed {
                    break;
                }
            }
            let d = c.delivered();
            assert!(d >= ep.last_delivered, "delivered went backwards");
            ep.last_delivered = d;
            if self.check {
                c.check_invariants();
            }
            let t = c.poll_timeout().unwrap_or(NEVER);
            if t != NEVER && t != ep.timer_at {
                ep.timer_at = t;
                self.push(t, Pending::Timer(i));
            } else if t == NEVER {
                ep.timer_at = NEVER;
            }
        }
        for seg in out {
            self.transmit(i, seg);
        }
    }

    fn transmit(&mut self, from: usize, seg: TcpSegment) {
        let now = self.now;
        if self.eps[from].record {
            self.eps[from].sent.push((now, seg));
        }
        if let Some(f) = self.drop.as_mut() {
            if f(from, &seg, now) {
                return;
            }
        }
        let link = if from.is_multiple_of(2) { 0 } else { 1 };
        let to = from ^ 1;
        if let Some(at) = self.links[link].enqueue(now, u64::from(seg.wire_bytes()), &mut self.rng)
        {
            self.push(at, Pending::Deliver(to, seg));
        }
    }

    pub(crate) fn conn(&self, i: usize) -> &TcpConnection {
        self.eps[i].conn.as_ref().expect("connection")
    }

    pub(crate) fn conn_mut(&mut self, i: usize) -> &mut TcpConnection {
        self.eps[i].conn.as_mut().expect("connection")
    }

    pub(crate) fn state(&self, i: usize) -> Option<TcpState> {
        self.eps[i].conn.as_ref().map(|c| c.state())
    }

    pub(crate) fn has_event(&self, i: usize, e: TcpEvent) -> bool {
        self.eps[i].events.iter().any(|&(_, x)| x == e)
    }

    /// Bytes delivered in order at endpoint `i` (0 before it exists).
    pub(crate) fn delivered(&self, i: usize) -> u64 {
        self.eps[i].conn.as_ref().map_or(0, |c| c.delivered())
    }
}

impl Endpoint {
    fn new(conn: Option<TcpConnection>, app: App) -> Self {
        Endpoint {
            conn,
            app,
            events: Vec::new(),
            sent: Vec::new(),
            record: false,
            timer_at: NEVER,
            last_delivered: 0,
        }
    }
}

/// Bandwidth-delay product in bytes.
pub(crate) fn bdp(rate_bps: u64, rtt: SimDuration) -> u64 {
    (rate_bps as u128 * rtt as u128 / (8 * SEC) as u128) as u64
}

/// Goodput in bits per second of bytes delivered between two instants.
pub(crate) fn goodput_bps(bytes: u64, from: SimTime, to: SimTime) -> f64 {
    bytes as f64 * 8.0 / ((to - from) as f64 / SEC as f64)
}
