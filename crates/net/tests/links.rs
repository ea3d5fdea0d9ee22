//! Links and paths: latency, serialisation, loss and queue bounds as seen by UDP datagrams.

use std::sync::Arc;

use onionlab_engine::time::{millis, secs, SimTime};
use onionlab_engine::{Context, EngineConfig, Host, HostId, Simulation};
use onionlab_net::topology::Graph;
use onionlab_net::{HostPlacement, NetEvent, NetStack, Network, NetworkConfig, SocketEvent};

enum Ev {
    Net(NetEvent<u32>),
    /// Send `count` datagrams of `len` bytes to host `dst`, `gap` apart.
    Burst {
        dst: HostId,
        count: u32,
        len: u32,
        gap: u64,
    },
}

impl From<NetEvent<u32>> for Ev {
    fn from(e: NetEvent<u32>) -> Self {
        Ev::Net(e)
    }
}

struct Udp {
    stack: NetStack<u32>,
    /// (arrival time, sequence number) of every datagram received.
    got: Vec<(SimTime, u32)>,
    sent: Vec<SimTime>,
    refused: u32,
}

impl Host for Udp {
    type Event = Ev;
    fn handle(&mut self, ctx: &mut Context<'_, Ev>, event: Ev) {
        match event {
            Ev::Net(e) => self.stack.handle(ctx, e),
            Ev::Burst {
                dst,
                count,
                len,
                gap,
            } => {
                // Without a gap the whole burst goes at once, in a loop (recursing once per
                // datagram overflowed the test thread's stack on a burst of thousands).
                let at_once = if gap == 0 { count } else { 1 };
                for _ in 0..at_once {
                    let n = self.sent.len() as u32;
                    self.sent.push(ctx.now());
                    if !self.stack.udp_send(ctx, 5000, dst, 7, len, n) {
                        self.refused += 1;
                    }
                }
                if count > at_once {
                    let next = Ev::Burst {
                        dst,
                        count: count - at_once,
                        len,
                        gap,
                    };
                    ctx.schedule_in(gap, next);
                }
            }
        }
        while let Some(e) = self.stack.poll_event() {
            if let SocketEvent::Datagram { message, .. } = e {
                self.got.push((ctx.now(), message));
            }
        }
    }
}

const GML: &str = r#"graph [
  directed 0
  node [ id 1 host_bandwidth_up "10 Mbit" host_bandwidth_down "10 Mbit" ]
  node [ id 2 host_bandwidth_up "8 Mbit" host_bandwidth_down "8 Mbit" ]
  node [ id 3 host_bandwidth_up "8 Mbit" host_bandwidth_down "8 Mbit" ]
  edge [ source 1 target 1 latency "1 ms" ]
  edge [ source 2 target 2 latency "1 ms" ]
  edge [ source 3 target 3 latency "1 ms" ]
  edge [ source 1 target 2 latency "30 ms" packet_loss 0.1 ]
  edge [ source 2 target 3 latency "12 ms" ]
  edge [ source 1 target 3 latency "60 ms" jitter "5 ms" ]
]
"#;

fn sim(config: NetworkConfig, threads: usize) -> Simulation<Udp> {
    let graph = Graph::from_gml(GML, "links.gml").unwrap();
    let placements: Vec<_> = (0..3)
        .map(|n| HostPlacement {
            node: graph.node_index(n + 1).unwrap(),
            bandwidth_up: None,
            bandwidth_down: None,
        })
        .collect();
    let net = Arc::new(Network::build(&graph, &placements, config).unwrap());
    assert_eq!(net.lookahead(), millis(1));
    let hosts = (0..3)
        .map(|h| {
            let mut stack = NetStack::new(h, net.clone());
            stack.udp_bind(7).unwrap();
            Udp {
                stack,
                got: vec![],
                sent: vec![],
                refused: 0,
            }
        })
        .collect();
    Simulation::new(
        EngineConfig {
            seed: 11,
            threads,
            lookahead: net.lookahead(),
            trace: true,
            work_stealing: true,
        },
        hosts,
    )
}

#[test]
fn a_datagram_takes_serialisation_plus_shortest_path_latency() {
    let mut s = sim(NetworkConfig::default(), 1);
    // Host 1 (node 2, 8 Mbit/s = 1 byte/us) to host 2 (node 3): 12 ms, no loss.
    s.schedule(
        1,
        millis(5),
        Ev::Burst {
            dst: 2,
            count: 1,
            len: 972,
            gap: 0,
        },
    );
    s.run_until(secs(1));
    // 1000 wire bytes: 1 ms up, 12 ms on the path, 1 ms down.
    assert_eq!(s.host(2).got, vec![(millis(5) + millis(14), 0)]);
}

#[test]
fn paths_take_the_shortest_route_through_the_graph() {
    let mut s = sim(NetworkConfig::default(), 2);
    // Host 0 (node 1) to host 2 (node 3): 1-2-3 is 42 ms, shorter than the 60 ms edge. The
    // 1-2 edge loses 10%, so send several.
    s.schedule(
        0,
        0,
        Ev::Burst {
            dst: 2,
            count: 10,
            len: 100,
            gap: millis(10),
        },
    );
    s.run_until(secs(1));
    let ser_up = 128 * 8 * 1000 / 10; // ns at 10 Mbit/s
    let ser_down = 128 * 1000; // ns at 8 Mbit/s
    let got = &s.host(2).got;
    assert!(!got.is_empty());
    for &(t, q) in got {
        assert_eq!(
            t,
            s.host(0).sent[q as usize] + millis(42) + ser_up + ser_down
        );
    }
}

#[test]
fn path_loss_drops_the_configured_fraction() {
    let mut s = sim(NetworkConfig::default(), 2);
    let n = 20_000u32;
    // Host 0 to host 1 crosses the 10% loss edge; spaced out so that no queue overflows.
    s.schedule(
        0,
        0,
        Ev::Burst {
            dst: 1,
            count: n,
            len: 100,
            gap: 200_000,
        },
    );
    s.run_until(secs(10));
    let got = s.host(1).got.len() as f64;
    let lost = n as f64 - got;
    // Binomial: sd = sqrt(n p (1-p)) = 42.4; allow 5 sd.
    assert!((lost - 2000.0).abs() < 5.0 * 42.4, "lost {lost} of {n}");
    assert_eq!(s.host(0).stack.stats().path_losses as f64, lost);
    // Without jitter nothing is reordered.
    let seqs: Vec<u32> = s.host(1).got.iter().map(|&(_, q)| q).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn jitter_delays_within_its_bound_and_may_reorder() {
    // Host 0 to host 2 via the direct 60 ms edge only if it were shorter; here the shortest path
    // (1-2-3) has no jitter, so use a graph where the jittery edge is the shortest.
    let gml = GML.replace("latency \"60 ms\" jitter", "latency \"20 ms\" jitter");
    let graph = Graph::from_gml(&gml, "jitter.gml").unwrap();
    let placements: Vec<_> = [1u64, 3]
        .iter()
        .map(|&n| HostPlacement {
            node: graph.node_index(n).unwrap(),
            bandwidth_up: Some(1_000_000_000),
            bandwidth_down: Some(1_000_000_000),
        })
        .collect();
    let net = Arc::new(Network::build(&graph, &placements, NetworkConfig::default()).unwrap());
    let hosts = (0..2)
        .map(|h| {
            let mut stack = NetStack::new(h, net.clone());
            stack.udp_bind(7).unwrap();
            Udp {
                stack,
                got: vec![],
                sent: vec![],
                refused: 0,
            }
        })
        .collect();
    let mut s = Simulation::new(
        EngineConfig {
            seed: 3,
            threads: 1,
            lookahead: net.lookahead(),
            trace: false,
            work_stealing: true,
        },
        hosts,
    );
    s.schedule(
        0,
        0,
        Ev::Burst {
            dst: 1,
            count: 2000,
            len: 100,
            gap: 100_000,
        },
    );
    s.run_until(secs(5));
    let sent = &s.host(0).sent;
    let got = &s.host(1).got;
    assert_eq!(got.len(), 2000);
    let mut reordered = 0;
    let mut delays = Vec::new();
    for (i, &(t, q)) in got.iter().enumerate() {
        let d = t - sent[q as usize];
        delays.push(d);
        assert!(d >= millis(20) && d <= millis(25) + 10_000, "delay {d}");
        if i > 0 && got[i - 1].1 > q {
            reordered += 1;
        }
    }
    let mean = delays.iter().sum::<u64>() as f64 / delays.len() as f64;
    assert!((mean - 22.5e6).abs() < 0.2e6, "mean delay {mean}");
    assert!(
        reordered > 100,
        "jitter larger than the gap reorders: {reordered}"
    );
}

#[test]
fn a_full_downstream_queue_drops_and_counts() {
    let config = NetworkConfig {
        down_queue_time: millis(10),
        down_queue_min_bytes: 0,
        ..NetworkConfig::default()
    };
    let mut s = sim(config, 1);
    // Host 0 sends at 10 Mbit/s into host 2's 8 Mbit/s downstream, whose queue holds 10 ms
    // (10 KB): it overflows.
    s.schedule(
        0,
        0,
        Ev::Burst {
            dst: 2,
            count: 5000,
            len: 972,
            gap: 0,
        },
    );
    s.run_until(secs(10));
    let got = s.host(2).got.len() as u64;
    let drops = s.host(2).stack.stats().down_drops;
    let sender = s.host(0).stack.stats();
    let on_path = 5000 - sender.up_drops - sender.path_losses;
    assert!(drops > 50, "drops {drops}");
    assert_eq!(
        got + drops,
        on_path,
        "every datagram is delivered or counted as dropped"
    );
    // The upstream queue (1 MiB) also overflowed with 5000 datagrams sent at once, and
    // says so.
    assert!(s.host(0).stack.stats().up_drops > 0);
    assert_eq!(s.host(0).stack.stats().up_drops, s.host(0).refused as u64);
}
