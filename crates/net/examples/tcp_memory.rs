//! Memory cost of idle TCP connections:
//! `cargo run --release -p onionlab-net --example tcp_memory -- --connections 16384`;
//! of idle QUIC connections and their streams (each stream carried one byte, so both ends
//! hold it): `... -- --quic --connections 4096 --streams 8`.
//!
//! One host opens N connections to another; once all are established and idle, the heap
//! growth (counted by a wrapping allocator) is divided by the number of connections and of
//! sockets (two per connection). N a power of two keeps the socket tables exactly full, so no
//! spare vector capacity is counted, and connections open in small batches so that transient
//! queues (events in flight during the handshakes) stay small.

use std::sync::Arc;

use clap::Parser;
use onionlab_engine::time::{millis, secs};
use onionlab_engine::{Context, EngineConfig, Host, HostId, Simulation};
use onionlab_net::iperf::{at, switch_graph};
use onionlab_net::{NetEvent, NetStack, Network, NetworkConfig, SocketEvent, SocketId};

#[global_allocator]
static HEAP: onionlab_engine::heap::Counting = onionlab_engine::heap::Counting;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value_t = 16384)]
    connections: u32,
    /// QUIC connections instead of TCP.
    #[arg(long)]
    quic: bool,
    /// QUIC: streams then opened on every connection.
    #[arg(long, default_value_t = 0)]
    streams: u32,
}

enum Ev {
    Net(NetEvent<u32>),
    Open(u32),
    /// Opens a stream on each of these connections and sends one byte on it.
    Streams(Vec<SocketId>),
}
impl From<NetEvent<u32>> for Ev {
    fn from(e: NetEvent<u32>) -> Self {
        Ev::Net(e)
    }
}

struct Node {
    stack: NetStack<u32>,
    established: u32,
    quic: bool,
    conns: Vec<SocketId>,
    streams: u32,
}

impl Host for Node {
    type Event = Ev;
    fn handle(&mut self, ctx: &mut Context<'_, Ev>, ev: Ev) {
        match ev {
            Ev::Net(e) => self.stack.handle(ctx, e),
            Ev::Open(n) => {
                for _ in 0..n {
                    let conn = if self.quic {
                        self.stack.quic_connect(ctx, 1, 80)
                    } else {
                        self.stack.connect(ctx, 1, 80)
                    };
                    self.conns.push(conn);
                }
            }
            Ev::Streams(conns) => {
                for conn in conns {
                    let stream = self.stack.open_stream(conn).expect("a stream opens");
                    assert!(self.stack.write_message(stream, 1, 0));
                    self.stack.flush(ctx, stream);
                }
            }
        }
        while let Some(e) = self.stack.poll_event() {
            match e {
                SocketEvent::Connected(_) | SocketEvent::Accepted { .. } => self.established += 1,
                SocketEvent::StreamAccepted { .. } => self.streams += 1,
                _ => {}
            }
        }
    }
}

fn main() {
    let a = Args::parse();
    let graph = switch_graph(10.0, 0.0, 0.0);
    let g = 1_000_000_000;
    let net =
        Arc::new(Network::build(&graph, &[at(g, g), at(g, g)], NetworkConfig::default()).unwrap());
    let nodes = (0..2)
        .map(|h| Node {
            stack: NetStack::new(h as HostId, net.clone()),
            established: 0,
            quic: a.quic,
            conns: Vec::with_capacity(a.connections as usize),
            streams: 0,
        })
        .collect();
    let engine = EngineConfig {
        seed: 1,
        threads: 1,
        lookahead: net.lookahead(),
        trace: false,
        work_stealing: true,
    };
    let mut sim = Simulation::new(engine, nodes);
    sim.host_mut(1).stack.listen(80).unwrap();
    sim.host_mut(1).stack.quic_listen(80).unwrap();
    // Warm up: one connection, so one-off allocations (queues, tables) are not counted.
    sim.schedule(0, 0, Ev::Open(1));
    sim.run_until(secs(5));
    let before = onionlab_engine::heap::live_bytes();
    let batch = 63;
    let mut left = a.connections - 1;
    let mut t = secs(5);
    while left > 0 {
        let n = left.min(batch);
        sim.schedule(0, t, Ev::Open(n));
        left -= n;
        t += millis(50);
    }
    sim.run_until(t + secs(10));
    let after = onionlab_engine::heap::live_bytes();
    let est = (sim.host(0).established, sim.host(1).established);
    assert_eq!(
        est,
        (a.connections, a.connections),
        "not all connections established"
    );
    if !a.quic {
        assert_eq!(sim.pending_events(), 0, "idle connections keep no timers");
    }
    let grown = (after - before) as f64;
    let n = (a.connections - 1) as f64;
    println!(
        "transport={} connections={} heap_growth_bytes={} bytes_per_socket={:.0}",
        if a.quic { "quic" } else { "tcp" },
        a.connections,
        after - before,
        grown / (2.0 * n)
    );
    println!("bytes_per_connection={:.0}", grown / n);
    if a.quic && a.streams > 0 {
        // Within the idle timeout (30 s): streams in batches, like connections above.
        let conns = sim.host(0).conns.clone();
        let mut t = t + secs(10);
        for _ in 0..a.streams {
            for chunk in conns.chunks(batch as usize) {
                sim.schedule(0, t, Ev::Streams(chunk.to_vec()));
                t += millis(5);
            }
        }
        sim.run_until(t + secs(2));
        let with_streams = onionlab_engine::heap::live_bytes();
        let opened = a.connections * a.streams;
        assert_eq!(
            sim.host(1).streams,
            opened,
            "not every stream reached the peer"
        );
        let per = (with_streams - after) as f64 / opened as f64;
        println!("streams={opened} bytes_per_stream={per:.0} (both ends)");
    }
}
