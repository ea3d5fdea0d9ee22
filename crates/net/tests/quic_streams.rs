//! QUIC connections on the network stack: streams as sockets carrying messages, and
//! head-of-line independence between streams against one TCP connection carrying the same two
//! message flows.

use std::sync::Arc;

use onionlab_engine::time::{millis, secs, SimTime};
use onionlab_engine::{Context, EngineConfig, Host, HostId, Simulation};
use onionlab_net::packet::{Packet, PacketBody};
use onionlab_net::topology::Graph;
use onionlab_net::{
    HostPlacement, NetEvent, NetStack, Network, NetworkConfig, SocketEvent, SocketId,
};

/// A message: which flow (0 = A, 1 = B) and its number in the flow.
type Msg = (u8, u32);

const PORT: u16 = 4433;
const CELL: u64 = 514;

enum Ev {
    Net(NetEvent<Msg>),
    /// The sender opens its connection(s).
    Start,
    /// The sender writes the next message of `flow`.
    Write(u8),
}

impl From<NetEvent<Msg>> for Ev {
    fn from(e: NetEvent<Msg>) -> Self {
        Ev::Net(e)
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Transport {
    Quic,
    Tcp,
}

struct Peer {
    stack: NetStack<Msg>,
    transport: Transport,
    sender: bool,
    /// Sender: the sockets of flows A and B (the same TCP socket twice under TCP).
    out: [Option<SocketId>; 2],
    sent: [u32; 2],
    /// Receiver: (arrival, flow, number) of every message.
    got: Vec<(SimTime, u8, u32)>,
    /// Receiver: drop the first packet at or after this time that carries flow A's data only.
    drop_after: SimTime,
    dropped: Option<SimTime>,
    connected: bool,
}

/// Whether a packet carries data of flow A and of nothing else: under QUIC, only stream
/// frames of the first stream (client stream 0); under TCP, any data segment (both flows
/// share it, so any one will do).
fn only_flow_a(packet: &Packet<Msg>) -> bool {
    match &packet.body {
        PacketBody::Quic(d) => {
            let p = &d.packet;
            let frames = p.stream_frames();
            !frames.is_empty() && frames.iter().all(|f| f.id == 0)
        }
        PacketBody::Tcp(t) => t.segment.len > 0,
        PacketBody::Udp(_) => false,
    }
}

impl Host for Peer {
    type Event = Ev;
    fn handle(&mut self, ctx: &mut Context<'_, Ev>, event: Ev) {
        match event {
            Ev::Net(NetEvent::Arrive(packet))
                if !self.sender
                    && self.dropped.is_none()
                    && ctx.now() >= self.drop_after
                    && only_flow_a(&packet) =>
            {
                self.dropped = Some(ctx.now());
            }
            Ev::Net(e) => self.stack.handle(ctx, e),
            Ev::Start => match self.transport {
                Transport::Quic => {
                    let conn = self.stack.quic_connect(ctx, 1, PORT);
                    self.out = [self.stack.open_stream(conn), self.stack.open_stream(conn)];
                }
                Transport::Tcp => {
                    let s = self.stack.connect(ctx, 1, PORT);
                    self.out = [Some(s), Some(s)];
                }
            },
            Ev::Write(flow) => {
                if let Some(socket) = self.out[flow as usize] {
                    let n = self.sent[flow as usize];
                    if self.stack.write_message(socket, CELL, (flow, n)) {
                        self.sent[flow as usize] += 1;
                        self.stack.flush(ctx, socket);
                    }
                }
                if ctx.now() < secs(2) {
                    ctx.schedule_in(millis(2), Ev::Write(flow));
                }
            }
        }
        while let Some(e) = self.stack.poll_event() {
            match e {
                SocketEvent::Connected(_) => self.connected = true,
                SocketEvent::Message { message, .. } => {
                    self.got.push((ctx.now(), message.0, message.1))
                }
                _ => {}
            }
        }
    }
}

const GML: &str = r#"graph [
  directed 0
  node [ id 1 host_bandwidth_up "100 Mbit" host_bandwidth_down "100 Mbit" ]
  node [ id 2 host_bandwidth_up "100 Mbit" host_bandwidth_down "100 Mbit" ]
  edge [ source 1 target 1 latency "1 ms" ]
  edge [ source 2 target 2 latency "1 ms" ]
  edge [ source 1 target 2 latency "10 ms" ]
]
"#;

/// Flows A and B, one message each every 2 ms (B 1 ms after A, so that each message leaves
/// in a packet of its own) for 2 s, from host 0 to host 1 over QUIC (two streams of one
/// connection) or TCP (one connection); the receiver drops the first packet of flow A it
/// sees after 500 ms.
fn run(transport: Transport, threads: usize) -> Simulation<Peer> {
    let graph = Graph::from_gml(GML, "quic.gml").unwrap();
    let placements: Vec<_> = (0..2)
        .map(|n| HostPlacement {
            node: graph.node_index(n + 1).unwrap(),
            bandwidth_up: None,
            bandwidth_down: None,
        })
        .collect();
    let net = Arc::new(Network::build(&graph, &placements, NetworkConfig::default()).unwrap());
    let hosts = (0..2)
        .map(|h: HostId| {
            let mut stack = NetStack::new(h, net.clone());
            if h == 1 {
                stack.quic_listen(PORT).unwrap();
                stack.listen(PORT).unwrap();
            }
            Peer {
                stack,
                transport,
                sender: h == 0,
                out: [None, None],
                sent: [0, 0],
                got: Vec::new(),
                drop_after: millis(500),
                dropped: None,
                connected: false,
            }
        })
        .collect();
    let mut sim = Simulation::new(
        EngineConfig {
            seed: 5,
            threads,
            lookahead: net.lookahead(),
            trace: false,
            work_stealing: true,
        },
        hosts,
    );
    sim.schedule(0, 0, Ev::Start);
    sim.schedule(0, millis(100), Ev::Write(0));
    sim.schedule(0, millis(101), Ev::Write(1));
    sim.run_until(secs(3));
    sim
}

/// The longest time between two consecutive messages of `flow` arriving, within the
/// `window` after `from`.
fn longest_gap(got: &[(SimTime, u8, u32)], flow: u8, from: SimTime, window: SimTime) -> SimTime {
    let times: Vec<SimTime> = got
        .iter()
        .filter(|m| m.1 == flow && m.0 >= from && m.0 <= from + window)
        .map(|m| m.0)
        .collect();
    times.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0)
}

fn in_order_and_complete(sim: &Simulation<Peer>) {
    let got = &sim.host(1).got;
    for flow in 0..2u8 {
        let seqs: Vec<u32> = got.iter().filter(|m| m.1 == flow).map(|m| m.2).collect();
        let sent = sim.host(0).sent[flow as usize];
        assert_eq!(
            seqs,
            (0..sent).collect::<Vec<_>>(),
            "flow {flow}: every message once, in order"
        );
    }
}

#[test]
fn a_lost_packet_stalls_only_its_own_stream_under_quic_but_every_flow_under_tcp() {
    let quic = run(Transport::Quic, 1);
    let tcp = run(Transport::Tcp, 1);
    assert!(quic.host(0).connected && tcp.host(0).connected);
    in_order_and_complete(&quic);
    in_order_and_complete(&tcp);
    for (name, sim) in [("quic", &quic), ("tcp", &tcp)] {
        let dropped = sim.host(1).dropped.expect("a packet was dropped");
        let a = longest_gap(&sim.host(1).got, 0, dropped - millis(20), millis(200));
        let b = longest_gap(&sim.host(1).got, 1, dropped - millis(20), millis(200));
        eprintln!(
            "{name}: dropped at {:.1} ms; longest gap A {:.1} ms, B {:.1} ms",
            dropped as f64 / 1e6,
            a as f64 / 1e6,
            b as f64 / 1e6
        );
        // Flow A waits for the retransmission (about a round trip, 20 ms) either way.
        assert!(a >= millis(15), "{name}: flow A gap {a}");
        if name == "quic" {
            // B's stream goes on: its messages keep their 2 ms spacing (plus a little).
            assert!(b <= millis(3), "quic: flow B stalled for {b} ns");
        } else {
            // B's bytes wait behind A's hole in the one byte stream.
            assert!(b >= millis(15), "tcp: flow B did not stall ({b} ns)");
        }
    }
}

#[test]
fn quic_streams_deliver_the_same_on_one_and_two_threads() {
    let one = run(Transport::Quic, 1);
    let two = run(Transport::Quic, 2);
    assert_eq!(one.host(1).got, two.host(1).got);
    assert_eq!(one.host(0).stack.stats(), two.host(0).stack.stats());
    let stats = one.host(0).stack.stats();
    assert!(stats.quic_lost >= 1, "{stats:?}");
    assert!(stats.quic_stream_bytes_retransmitted >= CELL, "{stats:?}");
    assert!(stats.quic_udp_bytes > stats.quic_stream_bytes, "{stats:?}");
}

#[test]
fn quic_and_plain_udp_cannot_share_a_port() {
    let graph = Graph::from_gml(GML, "quic.gml").unwrap();
    let place = HostPlacement {
        node: graph.node_index(1).unwrap(),
        bandwidth_up: None,
        bandwidth_down: None,
    };
    let net = Arc::new(
        Network::build(&graph, &[place.clone(), place], NetworkConfig::default()).unwrap(),
    );
    let mut stack: NetStack<Msg> = NetStack::new(0, net);
    stack.quic_listen(PORT).unwrap();
    assert!(stack.udp_bind(PORT).is_err());
    stack.udp_bind(PORT + 1).unwrap();
    assert!(stack.quic_listen(PORT + 1).is_err());
    // TCP ports are a namespace of their own.
    stack.listen(PORT).unwrap();
}
