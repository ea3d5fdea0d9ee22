//! A tiny deterministic network for exercising QUIC (and, for comparison, TCP) connections:
//! flows share a FIFO bottleneck in each direction, with drop-tail queues, propagation delay,
//! optional random loss and reordering, all driven by a seeded SplitMix64 and a binary-heap
//! event loop. The applications check what they read: every byte a QUIC stream delivers must
//! have arrived in some STREAM frame, in order, exactly once.

#![allow(dead_code)]

use onionlab_engine::time::{SimDuration, SimTime, NANOS_PER_MILLI, NANOS_PER_SEC};
use onionlab_quic::{QuicConfig, QuicConnection, QuicEvent, QuicPacket, StreamId};
use onionlab_tcp::{TcpConfig, TcpConnection, TcpEvent, TcpFlags, TcpSegment};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::sync::Arc;

pub(crate) const MS: u64 = NANOS_PER_MILLI;
pub(crate) const SEC: u64 = NANOS_PER_SEC;
const NEVER: SimTime = u64::MAX;
/// IPv4 and UDP headers around a QUIC packet.
pub(crate) const UDP_IP: u64 = 28;

#[path = "../../../tcp/tests/harness/link.rs"]
mod link;
pub(crate) use link::{Link, LinkConfig, Rng};

#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Pkt {
    Quic(QuicPacket),
    Tcp(TcpSegment),
}

impl Pkt {
    pub(crate) fn wire_bytes(&self) -> u64 {
        match self {
            Pkt::Quic(p) => u64::from(p.bytes) + UDP_IP,
            Pkt::Tcp(s) => u64::from(s.wire_bytes()),
        }
    }
}

// Few endpoints exist in a test: boxing would buy nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Conn {
    Quic(QuicConnection),
    Tcp(TcpConnection),
}

#[derive(Clone)]
pub(crate) enum Proto {
    Quic(Arc<QuicConfig>),
    Tcp(Arc<TcpConfig>),
}

/// What a stream's application does on one endpoint, and what it observed.
#[derive(Clone, Debug, Default)]
pub(crate) struct StreamApp {
    /// Bytes still to write (`u64::MAX`: endless).
    pub to_send: u64,
    /// Finish once everything is written.
    pub fin_when_done: bool,
    pub fin_sent: bool,
    /// Bytes to write back once the peer finished (then finish).
    pub reply: Option<u64>,
    pub written: u64,
    pub read: u64,
    pub peer_finished: bool,
    pub finished_at: Option<SimTime>,
    /// Byte ranges that arrived in STREAM frames (start -> end), for checking reads.
    pub arrived: BTreeMap<u64, u64>,
    /// (time, read offset) samples, when recording.
    pub progress: Vec<(SimTime, u64)>,
}

impl StreamApp {
    fn note_arrival(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let mut s = start;
        let mut e = end;
        // Merge with overlapping or touching ranges.
        let keys: Vec<u64> = self
            .arrived
            .range(..=e)
            .filter(|(&a, &b)| b >= s && a <= e)
            .map(|(&a, _)| a)
            .collect();
        for k in keys {
            let v = self.arrived.remove(&k).unwrap();
            s = s.min(k);
            e = e.max(v);
        }
        self.arrived.insert(s, e);
    }

    fn covered(&self, start: u64, end: u64) -> bool {
        start >= end
            || self
                .arrived
                .range(..=start)
                .next_back()
                .is_some_and(|(_, &e)| e >= end)
    }
}

/// What the application on an endpoint does.
#[derive(Clone, Debug)]
pub(crate) struct App {
    /// QUIC: streams to open at start, `(bytes, finish when written)`.
    pub open: Vec<(u64, bool)>,
    /// QUIC: reply written on each peer-opened stream once the peer finished it.
    pub reply: Option<u64>,
    /// TCP: bytes to write.
    pub tcp_to_send: u64,
    pub reading: bool,
    /// Reader limited to this many bytes per second (None: reads everything at once).
    pub read_rate: Option<u64>,
    pub read_budget: u64,
    /// QUIC: bytes written on the first stream at every tick (an application-limited source).
    pub write_per_tick: u64,
    pub record_progress: bool,
}

impl App {
    pub(crate) fn sink() -> Self {
        App {
            open: Vec::new(),
            reply: None,
            tcp_to_send: 0,
            reading: true,
            read_rate: None,
            read_budget: 0,
            write_per_tick: 0,
            record_progress: false,
        }
    }
}

pub(crate) struct Endpoint {
    pub conn: Option<Conn>,
    pub proto: Proto,
    pub app: App,
    pub streams: BTreeMap<u64, StreamApp>,
    pub events: Vec<(SimTime, QuicEvent)>,
    pub tcp_events: Vec<(SimTime, TcpEvent)>,
    pub tcp_read: u64,
    pub sent: Vec<(SimTime, Pkt)>,
    pub record: bool,
    timer_at: SimTime,
    started: bool,
}

type DropFn = Box<dyn FnMut(usize, &Pkt, SimTime) -> bool>;
type DelayFn = Box<dyn FnMut(usize, &Pkt, SimTime) -> SimDuration>;
type CheckFn = Box<dyn FnMut(&Sim, usize, &Pkt)>;

pub(crate) struct Sim {
    pub now: SimTime,
    pub eps: Vec<Endpoint>,
    /// 0: clients to servers, 1: servers to clients.
    pub links: [Link; 2],
    pub rng: Rng,
    /// Extra deterministic drops: `(from endpoint, packet, now) -> drop?`.
    pub drop: Option<DropFn>,
    /// Extra deterministic delay after the bottleneck: `(from, packet, now) -> delay`.
    pub delay: Option<DelayFn>,
    /// Called for every packet an endpoint hands to the network, before any drop.
    pub on_send: Option<CheckFn>,
    heap: BinaryHeap<Reverse<(SimTime, u64)>>,
    pending: HashMap<u64, Pending>,
    next_id: u64,
    pub check: bool,
    /// App tick for rate-limited readers.
    pub tick: SimDuration,
}

enum Pending {
    Deliver(usize, Pkt),
    Timer(usize),
    Tick(usize),
}

impl Sim {
    /// One flow per entry of `protos`; the client of flow f is endpoint 2f, its server 2f+1.
    pub(crate) fn new(protos: &[Proto], fwd: LinkConfig, rev: LinkConfig, seed: u64) -> Self {
        let mut sim = Sim {
            now: 0,
            eps: Vec::new(),
            links: [Link::new(fwd), Link::new(rev)],
            rng: Rng::new(seed),
            drop: None,
            delay: None,
            on_send: None,
            heap: BinaryHeap::new(),
            pending: HashMap::new(),
            next_id: 0,
            check: true,
            tick: 10 * MS,
        };
        for (f, proto) in protos.iter().enumerate() {
            let conn = match proto {
                Proto::Quic(cfg) => Conn::Quic(QuicConnection::connect(cfg.clone(), 0)),
                Proto::Tcp(cfg) => Conn::Tcp(TcpConnection::connect(cfg, 0, 1000 + f as u64)),
            };
            sim.eps.push(Endpoint::new(Some(conn), proto.clone()));
            sim.eps.push(Endpoint::new(None, proto.clone()));
        }
        sim
    }

    /// A single QUIC flow.
    pub(crate) fn quic(cfg: QuicConfig, fwd: LinkConfig, rev: LinkConfig, seed: u64) -> Self {
        Sim::new(&[Proto::Quic(Arc::new(cfg))], fwd, rev, seed)
    }

    /// Starts every client at time 0 (call after setting apps).
    pub(crate) fn start(&mut self) {
        for i in 0..self.eps.len() {
            if self.eps[i].conn.is_some() {
                self.pump(i);
            }
            if self.eps[i].app.read_rate.is_some() || self.eps[i].app.write_per_tick > 0 {
                let t = self.now + self.tick;
                self.push(t, Pending::Tick(i));
            }
        }
    }

    fn push(&mut self, at: SimTime, p: Pending) {
        let id = self.next_id;
        self.next_id += 1;
        self.pending.insert(id, p);
        self.heap.push(Reverse((at, id)));
    }

    pub(crate) fn run_until(&mut self, until: SimTime) {
        while let Some(&Reverse((at, id))) = self.heap.peek() {
            if at > until {
                break;
            }
            self.heap.pop();
            self.now = at;
            match self.pending.remove(&id).expect("event") {
                Pending::Deliver(to, p) => self.deliver(to, p),
                Pending::Timer(who) => {
                    if self.eps[who].timer_at == at {
                        self.eps[who].timer_at = NEVER;
                        match self.eps[who].conn.as_mut() {
                            Some(Conn::Quic(c)) => c.on_timeout(at),
                            Some(Conn::Tcp(c)) => c.on_timeout(at),
                            None => {}
                        }
                        self.pump(who);
                    }
                }
                Pending::Tick(who) => {
                    let ep = &mut self.eps[who];
                    if let Some(rate) = ep.app.read_rate {
                        ep.app.read_budget += rate * self.tick / SEC;
                    }
                    let w = ep.app.write_per_tick;
                    if let Some(st) = ep.streams.values_mut().next() {
                        st.to_send += w;
                    }
                    self.pump(who);
                    let t = self.now + self.tick;
                    self.push(t, Pending::Tick(who));
                }
            }
        }
        self.now = until;
    }

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
                        ep.conn = Some(Conn::Tcp(TcpConnection::accept(cfg, now, 5000, s)));
                    }
                }
            }
            _ => panic!("protocol mismatch"),
        }
        self.pump(to);
    }

    /// Lets the application act, then drains packets, events and the timer.
    pub(crate) fn pump(&mut self, i: usize) {
        let now = self.now;
        let mut out: Vec<Pkt> = Vec::new();
        let check = self.check;
        let ep = &mut self.eps[i];
        let Some(mut conn) = ep.conn.take() else {
            return;
        };
        let t = match &mut conn {
            Conn::Quic(c) => {
                if !ep.started {
                    ep.started = true;
                    for &(bytes, fin) in &ep.app.open {
                        let s = c.open_stream().expect("stream");
                        let st = ep.streams.entry(s.0).or_default();
                        st.to_send = bytes;
                        st.fin_when_done = fin;
                    }
                }
                pump_quic(c, ep, now, &mut out);
                if check {
                    c.check_invariants();
                }
                c.poll_timeout().unwrap_or(NEVER)
            }
            Conn::Tcp(c) => {
                pump_tcp(c, ep, now, &mut out);
                c.poll_timeout().unwrap_or(NEVER)
            }
        };
        ep.conn = Some(conn);
        set_timer(
            ep,
            t,
            i,
            &mut self.heap,
            &mut self.pending,
            &mut self.next_id,
        );
        for p in out {
            self.transmit(i, p);
        }
    }

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
            self.push(at, Pending::Deliver(to, p));
        }
    }

    pub(crate) fn quic_conn(&self, i: usize) -> &QuicConnection {
        match self.eps[i].conn.as_ref() {
            Some(Conn::Quic(c)) => c,
            _ => panic!("no QUIC connection at {i}"),
        }
    }

    pub(crate) fn tcp_conn(&self, i: usize) -> &TcpConnection {
        match self.eps[i].conn.as_ref() {
            Some(Conn::Tcp(c)) => c,
            _ => panic!("no TCP connection at {i}"),
        }
    }

    pub(crate) fn has_event(&self, i: usize, e: QuicEvent) -> bool {
        self.eps[i].events.iter().any(|&(_, x)| x == e)
    }

    pub(crate) fn event_time(&self, i: usize, e: QuicEvent) -> Option<SimTime> {
        self.eps[i]
            .events
            .iter()
            .find(|&&(_, x)| x == e)
            .map(|&(t, _)| t)
    }

    /// Bytes the application of endpoint `i` has read, all streams (or TCP).
    pub(crate) fn delivered(&self, i: usize) -> u64 {
        match self.eps[i].conn.as_ref() {
            Some(Conn::Quic(_)) => self.eps[i].streams.values().map(|s| s.read).sum(),
            Some(Conn::Tcp(c)) => c.delivered(),
            None => 0,
        }
    }

    /// A hash of every recorded packet of every endpoint, for determinism checks.
    pub(crate) fn trace_hash(&self) -> u64 {
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

fn set_timer(
    ep: &mut Endpoint,
    t: SimTime,
    i: usize,
    heap: &mut BinaryHeap<Reverse<(SimTime, u64)>>,
    pending: &mut HashMap<u64, Pending>,
    next_id: &mut u64,
) {
    if t != NEVER && t != ep.timer_at {
        ep.timer_at = t;
        let id = *next_id;
        *next_id += 1;
        pending.insert(id, Pending::Timer(i));
        heap.push(Reverse((t, id)));
    } else if t == NEVER {
        ep.timer_at = NEVER;
    }
}

fn pump_quic(c: &mut QuicConnection, ep: &mut Endpoint, now: SimTime, out: &mut Vec<Pkt>) {
    loop {
        let mut progressed = false;
        while let Some(e) = c.poll_event() {
            ep.events.push((now, e));
            progressed = true;
            match e {
                QuicEvent::StreamOpened(s) => {
                    let st = ep.streams.entry(s.0).or_default();
                    st.reply = ep.app.reply;
                }
                QuicEvent::StreamFinished(s) => {
                    let st = ep.streams.entry(s.0).or_default();
                    assert!(!st.peer_finished, "StreamFinished twice");
                    st.peer_finished = true;
                    st.finished_at = Some(now);
                    if c.stream_is_open(s) {
                        assert_eq!(st.read, c.read_offset(s), "finished before all was read");
                    }
                    if let Some(r) = st.reply.take() {
                        st.to_send = r;
                        st.fin_when_done = true;
                    }
                }
                _ => {}
            }
        }
        let ids: Vec<u64> = ep.streams.keys().copied().collect();
        for id in ids {
            let s = StreamId(id);
            let st = ep.streams.get_mut(&id).unwrap();
            if st.to_send > 0 {
                let n = c.send(s, st.to_send);
                if st.to_send != u64::MAX {
                    st.to_send -= n;
                }
                st.written += n;
                assert_eq!(c.written(s), st.written, "written");
                progressed |= n > 0;
            }
            if st.to_send == 0 && st.fin_when_done && !st.fin_sent {
                st.fin_sent = true;
                c.finish(s);
                progressed = true;
            }
            if ep.app.reading && c.readable(s) > 0 {
                let max = if ep.app.read_rate.is_some() {
                    ep.app.read_budget
                } else {
                    u64::MAX
                };
                let before = c.read_offset(s);
                assert_eq!(before, st.read, "read offset");
                let n = c.read(s, max);
                if ep.app.read_rate.is_some() {
                    ep.app.read_budget -= n;
                }
                if n > 0 {
                    assert_eq!(c.read_offset(s), before + n);
                    assert!(
                        st.covered(before, before + n),
                        "stream {id} delivered [{before}, {}) which never arrived: {:?}",
                        before + n,
                        st.arrived
                    );
                    st.read += n;
                    if ep.app.record_progress {
                        st.progress.push((now, st.read));
                    }
                    progressed = true;
                }
            }
        }
        while let Some(p) = c.poll_transmit(now) {
            assert!(p.bytes <= c.info().max_datagram, "oversized packet {p:?}");
            out.push(Pkt::Quic(p));
            progressed = true;
        }
        if !progressed {
            break;
        }
    }
}

fn pump_tcp(c: &mut TcpConnection, ep: &mut Endpoint, now: SimTime, out: &mut Vec<Pkt>) {
    loop {
        let mut progressed = false;
        while let Some(e) = c.poll_event() {
            ep.tcp_events.push((now, e));
            progressed = true;
        }
        if ep.app.reading && c.recv_available() > 0 {
            ep.tcp_read += c.read(u64::MAX);
            progressed = true;
        }
        if ep.app.tcp_to_send > 0 {
            let n = c.send(ep.app.tcp_to_send);
            if ep.app.tcp_to_send != u64::MAX {
                ep.app.tcp_to_send -= n;
            }
            progressed |= n > 0;
        }
        while let Some(seg) = c.poll_transmit(now) {
            out.push(Pkt::Tcp(seg));
            progressed = true;
        }
        if !progressed {
            break;
        }
    }
}

impl Endpoint {
    fn new(conn: Option<Conn>, proto: Proto) -> Self {
        Endpoint {
            conn,
            proto,
            app: App::sink(),
            streams: BTreeMap::new(),
            events: Vec::new(),
            tcp_events: Vec::new(),
            tcp_read: 0,
            sent: Vec::new(),
            record: false,
            timer_at: NEVER,
            started: false,
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

pub(crate) fn jain(x: &[u64]) -> f64 {
    let s: f64 = x.iter().map(|&v| v as f64).sum();
    let s2: f64 = x.iter().map(|&v| (v as f64) * (v as f64)).sum();
    s * s / (x.len() as f64 * s2)
}
