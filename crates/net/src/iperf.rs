//! An iperf-like application on the network stack: bulk senders that keep their send buffer
//! full of numbered messages, and sinks that check every message arrives once, in order, at
//! the right byte offset. Used to measure TCP, or QUIC (one stream of one connection), over a
//! path (tests, benchmarks, calibration).

use std::sync::Arc;

use onionlab_engine::time::SimTime;
use onionlab_engine::{Context, EngineConfig, Host, HostId, Simulation};
use onionlab_topology::Graph;

use crate::{HostPlacement, NetEvent, NetStack, Network, NetworkConfig, SocketEvent, SocketId};

/// The port sinks listen on (TCP and QUIC) and senders connect to.
pub const PORT: u16 = 80;

/// The events of an iperf simulation.
pub enum Ev {
    /// An event of the host's network stack.
    Net(NetEvent<u64>),
    /// Time 0: sinks start listening, senders connect and start writing.
    Start,
}

impl From<NetEvent<u64>> for Ev {
    fn from(e: NetEvent<u64>) -> Self {
        Ev::Net(e)
    }
}

/// What one receiving connection has seen.
#[derive(Clone, Debug, Default)]
pub struct Received {
    /// The sending host (`HostId::MAX` if a QUIC stream's peer was unknown).
    pub peer: HostId,
    /// In-order payload bytes read.
    pub bytes: u64,
    /// Whole messages received.
    pub messages: u64,
    /// Set if a message arrived out of order, twice, or at the wrong byte offset.
    pub error: Option<String>,
    /// The sender closed its direction and everything it sent was delivered.
    pub closed: bool,
}

/// What a host of an iperf simulation does.
pub enum Role {
    /// Nothing: a host that only stands on the network.
    Idle,
    /// Sends `total` bytes (forever if `None`) to `dst` as messages of `message` bytes, over
    /// TCP or over a stream of a QUIC connection.
    Sender {
        /// The sink's host.
        dst: HostId,
        /// Over a QUIC stream rather than TCP.
        quic: bool,
        /// Bytes to send, then close; `None` sends for ever.
        total: Option<u64>,
        /// Size of each message, in bytes (the last may be shorter).
        message: u64,
        /// The TCP socket or QUIC stream, once opened.
        socket: Option<SocketId>,
        /// Bytes written to the socket so far.
        written: u64,
        /// Number of the next message to mark; messages are numbered from 0.
        next_id: u64,
        /// The connection has been established.
        connected: bool,
        /// The connection was reset or timed out.
        reset: bool,
    },
    /// Accepts connections on [`PORT`] and checks the messages that arrive on each.
    Sink {
        /// Size of each message the senders send, in bytes, for the offset check.
        message: u64,
        /// Every accepted connection (or QUIC stream) and what it has received.
        conns: Vec<(SocketId, Received)>,
    },
}

/// One host of an iperf simulation: its network stack and its role.
pub struct App {
    /// The host's network stack, whose messages are numbered `u64`s.
    pub stack: NetStack<u64>,
    /// Sender, sink or idle.
    pub role: Role,
}

impl App {
    fn fill(&mut self, ctx: &mut Context<'_, Ev>) {
        let Role::Sender {
            total,
            message,
            socket: Some(sock),
            written,
            next_id,
            ..
        } = &mut self.role
        else {
            return;
        };
        let mut any = false;
        loop {
            // Bytes left in the current message (messages are `message` bytes, the last one
            // possibly shorter).
            let left_in_message = *message - *written % *message;
            let want = match total {
                Some(t) if *written >= *t => break,
                Some(t) => (*t - *written).min(left_in_message),
                None => left_in_message,
            };
            let n = self.stack.write(*sock, want);
            if n == 0 {
                break;
            }
            any = true;
            *written += n;
            if n == want {
                self.stack.mark(*sock, *next_id);
                *next_id += 1;
            }
        }
        if any {
            self.stack.flush(ctx, *sock);
        }
        if total.is_some_and(|t| *written >= t) {
            self.stack.close(ctx, *sock);
        }
    }

    fn on_socket_event(&mut self, ctx: &mut Context<'_, Ev>, event: SocketEvent<u64>) {
        match (&mut self.role, event) {
            (Role::Sender { connected, .. }, SocketEvent::Connected(_)) => {
                *connected = true;
                self.fill(ctx);
            }
            (Role::Sender { .. }, SocketEvent::Writable(_)) => self.fill(ctx),
            (Role::Sender { reset, .. }, SocketEvent::Reset(_) | SocketEvent::TimedOut(_)) => {
                *reset = true
            }
            (Role::Sink { conns, .. }, SocketEvent::StreamAccepted { stream, .. }) => {
                let peer = self.stack.peer(stream).unwrap_or(HostId::MAX);
                conns.push((
                    stream,
                    Received {
                        peer,
                        ..Default::default()
                    },
                ));
            }
            (Role::Sink { conns, .. }, SocketEvent::Accepted { socket, peer, port })
                if port == PORT && self.stack.quic_conn_of(socket).is_none() =>
            {
                conns.push((
                    socket,
                    Received {
                        peer,
                        ..Default::default()
                    },
                ));
            }
            (Role::Sink { conns, .. }, SocketEvent::Data { socket, bytes }) => {
                if let Some((_, r)) = conns.iter_mut().find(|(s, _)| *s == socket) {
                    r.bytes += bytes;
                }
            }
            (
                Role::Sink { conns, message },
                SocketEvent::Message {
                    socket,
                    message: id,
                    count,
                },
            ) => {
                let size = *message;
                if let Some((_, r)) = conns.iter_mut().find(|(s, _)| *s == socket) {
                    // Each message carries its own number, so a run of equal ones is itself
                    // out of order.
                    for _ in 0..count {
                        if id != r.messages && r.error.is_none() {
                            r.error =
                                Some(format!("message {id} arrived when {} was due", r.messages));
                        }
                        r.messages += 1;
                        // Messages are whole `size` bytes except perhaps the last.
                        if r.bytes < (r.messages - 1) * size + 1 && r.error.is_none() {
                            r.error =
                                Some(format!("message {id} arrived after only {} bytes", r.bytes));
                        }
                    }
                }
            }
            (Role::Sink { conns, .. }, SocketEvent::PeerClosed(socket)) => {
                if let Some((_, r)) = conns.iter_mut().find(|(s, _)| *s == socket) {
                    r.closed = true;
                }
                self.stack.close(ctx, socket);
            }
            _ => {}
        }
    }
}

impl Host for App {
    type Event = Ev;
    fn handle(&mut self, ctx: &mut Context<'_, Ev>, event: Ev) {
        match event {
            Ev::Net(e) => self.stack.handle(ctx, e),
            Ev::Start => match &mut self.role {
                Role::Sink { .. } => {
                    self.stack.listen(PORT).unwrap();
                    self.stack.quic_listen(PORT).unwrap();
                }
                Role::Sender {
                    dst, socket, quic, ..
                } => {
                    *socket = if *quic {
                        let conn = self.stack.quic_connect(ctx, *dst, PORT);
                        self.stack.open_stream(conn)
                    } else {
                        Some(self.stack.connect(ctx, *dst, PORT))
                    };
                    self.fill(ctx);
                }
                Role::Idle => {}
            },
        }
        while let Some(e) = self.stack.poll_event() {
            self.on_socket_event(ctx, e);
        }
    }
}

/// A TCP sender of `total` bytes (for ever if `None`) to `dst`, in messages of `message`
/// bytes.
pub fn sender(dst: HostId, total: Option<u64>, message: u64) -> Role {
    Role::Sender {
        dst,
        quic: false,
        total,
        message,
        socket: None,
        written: 0,
        next_id: 0,
        connected: false,
        reset: false,
    }
}

/// A sender over one stream of a QUIC connection.
pub fn quic_sender(dst: HostId, total: Option<u64>, message: u64) -> Role {
    let mut role = sender(dst, total, message);
    if let Role::Sender { quic, .. } = &mut role {
        *quic = true;
    }
    role
}

/// A sink that expects messages of `message` bytes.
pub fn sink(message: u64) -> Role {
    Role::Sink {
        message,
        conns: Vec::new(),
    }
}

/// One switch: every host on one graph node whose self-loop has this latency, loss and jitter.
pub fn switch_graph(one_way_ms: f64, loss: f64, jitter_ms: f64) -> Graph {
    let text = format!(
        "graph [\n  directed 0\n  node [\n    id 0\n    host_bandwidth_up \"1 Gbit\"\n    \
         host_bandwidth_down \"1 Gbit\"\n  ]\n  edge [\n    source 0\n    target 0\n    \
         latency \"{} us\"\n    jitter \"{} us\"\n    packet_loss {loss}\n  ]\n]\n",
        (one_way_ms * 1000.0).round() as u64,
        (jitter_ms * 1000.0).round() as u64,
    );
    Graph::from_gml(&text, "test switch").expect("test graph parses")
}

/// A host on node 0 with the given up/down rates in bit/s.
pub fn at(up: u64, down: u64) -> HostPlacement {
    HostPlacement {
        node: 0,
        bandwidth_up: Some(up),
        bandwidth_down: Some(down),
    }
}

/// Builds a simulation of `roles` (host id = index) placed as given; every host gets `Start`
/// at time 0 (sinks listen first: their `Start` is ordered before the senders').
pub fn build(
    graph: &Graph,
    placements: &[HostPlacement],
    config: NetworkConfig,
    roles: Vec<Role>,
    threads: usize,
    seed: u64,
) -> Simulation<App> {
    let net = Arc::new(Network::build(graph, placements, config).expect("network builds"));
    let models = roles
        .into_iter()
        .enumerate()
        .map(|(id, role)| App {
            stack: NetStack::new(id as HostId, net.clone()),
            role,
        })
        .collect::<Vec<_>>();
    let engine = EngineConfig {
        seed,
        threads,
        lookahead: net.lookahead(),
        trace: true,
        work_stealing: true,
    };
    let mut sim = Simulation::new(engine, models);
    for h in 0..sim.host_count() {
        sim.schedule(h as HostId, 0, Ev::Start);
    }
    sim
}

/// Bytes received so far on every connection of a sink host.
pub fn received(sim: &Simulation<App>, host: HostId) -> Vec<Received> {
    match &sim.host(host).role {
        Role::Sink { conns, .. } => conns.iter().map(|(_, r)| r.clone()).collect(),
        _ => panic!("host {host} is not a sink"),
    }
}

/// Bytes received so far on all connections of a sink host together.
pub fn total_received(sim: &Simulation<App>, host: HostId) -> u64 {
    received(sim, host).iter().map(|r| r.bytes).sum()
}

/// Goodput in bit/s at `host` between two times, running the simulation through them.
pub fn goodput(sim: &mut Simulation<App>, host: HostId, from: SimTime, to: SimTime) -> f64 {
    sim.run_until(from);
    let a = total_received(sim, host);
    sim.run_until(to);
    let b = total_received(sim, host);
    (b - a) as f64 * 8.0 / ((to - from) as f64 / 1e9)
}

/// Jain's fairness index of `xs` (such as flows' goodputs): 1 when all are equal, down to
/// `1 / xs.len()` when one takes everything.
pub fn jain(xs: &[f64]) -> f64 {
    let sum: f64 = xs.iter().sum();
    let sq: f64 = xs.iter().map(|x| x * x).sum();
    sum * sum / (xs.len() as f64 * sq)
}
