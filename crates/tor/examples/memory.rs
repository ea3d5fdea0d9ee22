//! Memory per element of a simulated Tor network:
//! `cargo run --release -p onionlab-tor --example memory`.
//!
//! Builds small networks that differ in one thing (relays, clients, circuits per client,
//! middles, downloads in progress), runs each until it is quiet, and reads the heap with the
//! counting allocator (`onionlab_engine::heap`). The difference between two networks, divided
//! by how many more of the thing the second has, is that thing's cost. Per-hop costs come
//! from taking the hosts out of the finished simulation one role at a time (exits, middles,
//! guards, then clients) and counting what each role's removal frees. Everything runs on one
//! thread, so the figures are exact and the same on every machine.

// The behaviour tests' hand-built relays, placements and switch.
#[path = "../tests/common/mod.rs"]
mod common;

use common::{at, limits, relay, switch, MBIT};
use onionlab_engine::heap;
use onionlab_engine::time::{secs, SimTime};
use onionlab_engine::{HostId, Simulation};
use onionlab_net::{HostPlacement, NetworkConfig};
use onionlab_netdir::{Consensus, RelayFlags};
use onionlab_tor::build::{build, HostRole, HostSpec, TorNetwork};
use onionlab_tor::TorHost;
use onionlab_torcore::TorParams;
use onionlab_traffic::Workload;

#[global_allocator]
static HEAP: heap::Counting = heap::Counting;

/// Every host's access link: 1 Gbit/s both ways.
fn gigabit() -> HostPlacement {
    at(1000 * MBIT, 1000 * MBIT)
}

/// One network to measure.
#[derive(Clone, Copy)]
struct Shape {
    guards: usize,
    middles: usize,
    exits: usize,
    clients: usize,
    /// Clean circuits each client keeps (tor's preemptive circuits).
    circuits: u32,
    /// Each client downloads one file too large to finish, from 60 s on.
    downloading: bool,
    /// Relays' rate, bytes per second.
    rate: u64,
}

impl Shape {
    const fn idle(guards: usize, middles: usize, exits: usize) -> Self {
        Shape {
            guards,
            middles,
            exits,
            clients: 0,
            circuits: 0,
            downloading: false,
            rate: 10 << 20,
        }
    }
}

/// Heap held after the run, in all and freed by removing each role's hosts.
struct Held {
    total: isize,
    exits: isize,
    middles: isize,
    guards: isize,
    clients: isize,
    /// Freed by removing every host (the server too): the model's own state. The rest of
    /// `total` is the engine's event storage (pending events, and slabs that keep their
    /// high-water mark) and what all hosts share (consensus, paths, names).
    hosts: isize,
    /// Circuits open at the guards, channels and sockets at all relays, at the end.
    circuits: u64,
    sockets: u64,
}

/// Builds `shape` and runs it to `until`; host ids: guards, middles, exits, the server,
/// clients.
fn simulate(shape: Shape, until: SimTime) -> (Simulation<TorHost>, [Vec<HostId>; 4]) {
    let mut relays = Vec::new();
    let mut hosts = Vec::new();
    let mut roles: [Vec<HostId>; 4] = Default::default();
    let kinds = [
        (RelayFlags::GUARD, shape.guards),
        (RelayFlags::default(), shape.middles),
        (RelayFlags::EXIT, shape.exits),
    ];
    for (role, (flags, count)) in kinds.into_iter().enumerate() {
        for _ in 0..count {
            let i = relays.len();
            // One relay per /16 (10.n.0.0), so path selection may combine any three.
            relays.push(relay(&format!("relay{i}"), i as u8 + 1, flags, 1000));
            roles[role].push(i as HostId);
            hosts.push(HostSpec {
                name: format!("relay{i}"),
                placement: gigabit(),
                role: HostRole::Relay {
                    relay: i,
                    limits: limits(shape.rate),
                    cpu: None,
                },
            });
        }
    }
    hosts.push(HostSpec {
        name: "server".into(),
        placement: gigabit(),
        role: HostRole::Server {
            group: "web".into(),
            shared: true,
        },
    });
    for c in 0..shape.clients {
        roles[3].push(hosts.len() as HostId);
        hosts.push(HostSpec {
            name: format!("client{c}"),
            placement: gigabit(),
            role: HostRole::Client {
                workload: Workload::Bulk {
                    size_bytes: 1 << 40,
                    timeout: secs(100_000),
                },
                servers: "web".into(),
                // Idle clients never reach their first download.
                start: if shape.downloading {
                    secs(60)
                } else {
                    secs(100_000)
                },
                options: Default::default(),
            },
        });
    }
    let params = TorParams {
        preemptive_circuits: shape.circuits,
        ..TorParams::default()
    };
    let network = TorNetwork {
        graph: switch(10),
        hosts,
        consensus: Consensus::from_relays(relays),
        params,
        net: NetworkConfig::default(),
        seed: 1,
        threads: 1,
    };
    let (mut sim, _world) = build(network).expect("the network builds");
    sim.run_until(until);
    (sim, roles)
}

/// Runs `shape` to `until` and measures what it holds.
fn measure(shape: Shape, until: SimTime) -> Held {
    let start = heap::live_bytes();
    let (mut sim, roles) = simulate(shape, until);
    // What a run hands to the output files and drops, as `onionlab run` does.
    for h in 0..sim.host_count() as HostId {
        match sim.host_mut(h) {
            TorHost::Relay(r) => r.meter.samples = Vec::new(),
            TorHost::Client(c) => {
                c.finished = Vec::new();
                c.circuit_log = Vec::new();
            }
            _ => {}
        }
    }
    let total = heap::live_bytes() - start;
    let (mut circuits, mut sockets) = (0, 0);
    for &g in &roles[0] {
        if let TorHost::Relay(r) = sim.host(g) {
            circuits += r.circuit_views().len() as u64;
        }
    }
    for h in roles[..3].iter().flatten() {
        if let TorHost::Relay(r) = sim.host(*h) {
            sockets += u64::from(r.open_sockets());
        }
    }
    let mut freed = [0isize; 4];
    let all = heap::live_bytes();
    for (role, ids) in [
        (2, &roles[2]),
        (1, &roles[1]),
        (0, &roles[0]),
        (3, &roles[3]),
    ] {
        let before = heap::live_bytes();
        for &h in ids {
            *sim.host_mut(h) = TorHost::Idle;
        }
        freed[role] = before - heap::live_bytes();
    }
    for h in 0..sim.host_count() as HostId {
        *sim.host_mut(h) = TorHost::Idle;
    }
    let hosts = all - heap::live_bytes();
    Held {
        total,
        guards: freed[0],
        middles: freed[1],
        exits: freed[2],
        clients: freed[3],
        hosts,
        circuits,
        sockets,
    }
}

/// A table row: the element, its bytes in all, those of the hosts' own state (the rest is
/// the engine's event storage and shared tables), and how it was measured.
fn row(what: &str, bytes: f64, model: Option<f64>, how: &str) {
    let model = model.map_or(String::new(), |m| format!("{m:.0}"));
    println!("| {what} | {bytes:.0} | {model} | {how} |");
}

fn main() {
    let quiet = secs(30);
    // Relays: idle networks of 100 and 200 relays (a third each guard, middle, exit).
    let a = measure(Shape::idle(34, 33, 33), quiet);
    let b = measure(Shape::idle(67, 67, 66), quiet);
    let relay = (b.total - a.total) as f64 / 100.0;
    let relay_model = (b.hosts - a.hosts) as f64 / 100.0;

    // Clients: idle (no circuit, no channel) and with k clean circuits each, through one
    // guard, one middle and one exit, so every circuit's hops are known.
    let clients = 200usize;
    let path = |circuits: u32, clients: usize| Shape {
        clients,
        circuits,
        ..Shape::idle(1, 1, 1)
    };
    let none = measure(path(0, clients), quiet);
    let none2 = measure(path(0, 2 * clients), quiet);
    let client = (none2.total - none.total) as f64 / clients as f64;
    let client_model = (none2.hosts - none.hosts) as f64 / clients as f64;
    let one = measure(path(1, clients), quiet);
    let five = measure(path(5, clients), quiet);
    assert_eq!(
        one.circuits, clients as u64,
        "every client built its circuit"
    );
    assert_eq!(
        five.circuits,
        5 * clients as u64,
        "every client built its circuits"
    );
    let more = 4.0 * clients as f64;
    let circuit = (five.total - one.total) as f64 / more;
    let circuit_model = (five.hosts - one.hosts) as f64 / more;
    let at_guard = (five.guards - one.guards) as f64 / more;
    let at_middle = (five.middles - one.middles) as f64 / more;
    let at_exit = (five.exits - one.exits) as f64 / more;
    let at_client = (five.clients - one.clients) as f64 / more;
    // The client's channel to its guard (both ends, with their TCP connection): a client's
    // first circuit opens it, so it is the first circuit's cost less a circuit's.
    let client_channel = (one.total - none.total) as f64 / clients as f64 - circuit;
    let client_channel_model = (one.hosts - none.hosts) as f64 / clients as f64 - circuit_model;

    // Relay-to-relay channels: 8 middles against 4 (each new middle brings a relay and two
    // channels, to the guard and to the exit; the circuits are as many).
    let spread = |middles| Shape {
        clients: 400,
        circuits: 2,
        ..Shape::idle(1, middles, 1)
    };
    let four = measure(spread(4), quiet);
    let eight = measure(spread(8), quiet);
    // Sockets at the relays: the clients' 400 at the guard, two per relay-to-relay channel.
    assert_eq!(four.sockets - 400, 2 * 8, "every middle has both channels");
    assert_eq!(
        eight.sockets - 400,
        2 * 16,
        "every middle has both channels"
    );
    let relay_channel = ((eight.total - four.total) as f64 / 4.0 - relay) / 2.0;
    let relay_channel_model = ((eight.hosts - four.hosts) as f64 / 4.0 - relay_model) / 2.0;

    // Streams: every client downloads a file too large to finish over slow relays (1 MiB/s),
    // measured mid-transfer, against the same clients idle. A client that starts downloading
    // on its clean circuit builds another, so one circuit is taken off.
    let slow = |downloading| Shape {
        downloading,
        rate: 1 << 20,
        ..path(1, clients)
    };
    let idle = measure(slow(false), secs(90));
    let busy = measure(slow(true), secs(90));
    assert_eq!(
        busy.circuits,
        2 * clients as u64,
        "every download has its circuit"
    );
    let stream = (busy.total - idle.total) as f64 / clients as f64 - circuit;
    let stream_model = (busy.hosts - idle.hosts) as f64 / clients as f64 - circuit_model;
    let stream_exit = (busy.exits - idle.exits) as f64 / clients as f64 - at_exit;

    println!("| element | bytes | of which host state | how |");
    println!("| --- | --- | --- | --- |");
    row(
        "relay (idle)",
        relay,
        Some(relay_model),
        "100 vs 200 idle relays",
    );
    row(
        "client (idle: guards chosen, no circuit)",
        client,
        Some(client_model),
        "200 vs 400 idle clients",
    );
    row(
        "circuit, all hops",
        circuit,
        Some(circuit_model),
        "5 vs 1 clean circuits per client, 200 clients",
    );
    row(
        "  at the client",
        at_client,
        None,
        "freed by removing the clients",
    );
    row(
        "  at the guard",
        at_guard,
        None,
        "freed by removing the guard",
    );
    row(
        "  at the middle",
        at_middle,
        None,
        "freed by removing the middle",
    );
    row("  at the exit", at_exit, None, "freed by removing the exit");
    row(
        "client-to-guard channel, both ends, with its TCP connection",
        client_channel,
        Some(client_channel_model),
        "first circuit per client less one circuit",
    );
    row(
        "relay-to-relay channel, both ends, with its TCP connection",
        relay_channel,
        Some(relay_channel_model),
        "8 vs 4 middles (400 clients, 2 circuits each), less the relays",
    );
    row(
        "stream mid-transfer (client, exit, server connection, queued cells)",
        stream,
        Some(stream_model),
        "200 downloads over 1 MiB/s relays vs none, less one circuit",
    );
    row(
        "  at the exit",
        stream_exit,
        None,
        "freed by removing the exit, less its circuit",
    );
}
