//! Impairments: extra loss between chosen hosts only, on top of their paths' own.

use std::sync::Arc;

use onionlab_engine::time::{millis, secs};
use onionlab_engine::{Context, EngineConfig, Host, HostId, Simulation};
use onionlab_net::topology::Graph;
use onionlab_net::{
    HostPlacement, Impairment, NetEvent, NetStack, Network, NetworkConfig, SocketEvent,
};

enum Ev {
    Net(NetEvent<u32>),
    /// Send `count` datagrams to `dst`, 200 µs apart (no queue ever overflows).
    Burst {
        dst: HostId,
        count: u32,
    },
}

impl From<NetEvent<u32>> for Ev {
    fn from(e: NetEvent<u32>) -> Self {
        Ev::Net(e)
    }
}

struct Udp {
    stack: NetStack<u32>,
    /// Datagrams received, by sender.
    got: Vec<u32>,
}

impl Host for Udp {
    type Event = Ev;
    fn handle(&mut self, ctx: &mut Context<'_, Ev>, event: Ev) {
        match event {
            Ev::Net(e) => self.stack.handle(ctx, e),
            Ev::Burst { dst, count } => {
                let me = self.stack.host();
                assert!(self.stack.udp_send(ctx, 5000, dst, 7, 100, me));
                if count > 1 {
                    ctx.schedule_in(
                        200_000,
                        Ev::Burst {
                            dst,
                            count: count - 1,
                        },
                    );
                }
            }
        }
        while let Some(e) = self.stack.poll_event() {
            if let SocketEvent::Datagram { message, .. } = e {
                self.got[message as usize] += 1;
            }
        }
    }
}

const HOSTS: u32 = 5;

fn network(impairments: Vec<Impairment>, path_loss: f64) -> Arc<Network> {
    let graph = Graph::single_switch(100_000_000, 100_000_000, millis(5), path_loss);
    let placements: Vec<_> = (0..HOSTS)
        .map(|_| HostPlacement {
            node: 0,
            bandwidth_up: None,
            bandwidth_down: None,
        })
        .collect();
    let config = NetworkConfig {
        impairments,
        ..NetworkConfig::default()
    };
    Arc::new(Network::build(&graph, &placements, config).unwrap())
}

/// Sends `n` datagrams along each of `pairs` and returns how many arrived, per pair.
fn delivered(net: Arc<Network>, pairs: &[(HostId, HostId)], n: u32, threads: usize) -> Vec<u32> {
    let hosts = (0..HOSTS)
        .map(|h| {
            let mut stack = NetStack::new(h, net.clone());
            stack.udp_bind(7).unwrap();
            Udp {
                stack,
                got: vec![0; HOSTS as usize],
            }
        })
        .collect();
    let mut s = Simulation::new(
        EngineConfig {
            seed: 5,
            threads,
            lookahead: net.lookahead(),
            trace: false,
            work_stealing: true,
        },
        hosts,
    );
    for &(from, to) in pairs {
        s.schedule(from, 0, Ev::Burst { dst: to, count: n });
    }
    s.run_until(secs(10));
    pairs
        .iter()
        .map(|&(from, to)| s.host(to).got[from as usize])
        .collect()
}

#[test]
fn an_impaired_pair_loses_its_fraction_and_no_other_pair_loses_anything() {
    // Hosts 0 and 1 against 2 ("two clients against one relay"); 3 and 4 are bystanders.
    let net = network(
        vec![Impairment {
            a: vec![0, 1],
            b: vec![2],
            loss: 0.1,
        }],
        0.0,
    );
    let n = 20_000;
    let pairs = [
        (0, 2),
        (2, 0),
        (1, 2),
        (2, 1),
        (0, 1),
        (0, 3),
        (3, 2),
        (3, 4),
        (2, 4),
    ];
    let got = delivered(net.clone(), &pairs, n, 2);
    for (&(from, to), &got) in pairs.iter().zip(&got) {
        let impaired = from.max(to) == 2 && from.min(to) <= 1;
        if impaired {
            assert!((net.path(from, to).loss - 0.1).abs() < 1e-12);
            // Binomial: sd = sqrt(n p (1-p)) = 42.4; allow 5 sd.
            let lost = (n - got) as f64;
            assert!(
                (lost - 2000.0).abs() < 5.0 * 42.4,
                "{from}->{to}: lost {lost} of {n}"
            );
        } else {
            assert_eq!(net.path(from, to).loss, 0.0, "{from}->{to}");
            assert_eq!(got, n, "{from}->{to} lost packets without an impairment");
        }
    }
    // The same on one thread: the draws are the sending host's own.
    assert_eq!(delivered(net, &pairs, n, 1), got);
}

#[test]
fn impairments_combine_with_path_loss_and_with_each_other() {
    let imp = |a: Vec<HostId>, b: Vec<HostId>, loss| Impairment { a, b, loss };
    let net = network(
        vec![imp(vec![0], vec![1], 0.5), imp(vec![1], vec![0, 3], 0.2)],
        0.1,
    );
    let close = |x: f64, y: f64| (x - y).abs() < 1e-12;
    // 0-1: path, both impairments; 1-3: path and the second; 0-3: only the path.
    assert!(close(net.path(0, 1).loss, 1.0 - 0.9 * 0.5 * 0.8));
    assert!(close(net.path(1, 0).loss, 1.0 - 0.9 * 0.5 * 0.8));
    assert!(close(net.path(3, 1).loss, 1.0 - 0.9 * 0.8));
    let path = net.path(2, 4).loss;
    assert!(close(path, 0.1));
    assert_eq!(net.path(0, 3).loss, path);
}

#[test]
fn bad_impairments_are_refused() {
    let graph = Graph::single_switch(100_000_000, 100_000_000, millis(5), 0.0);
    let placements = vec![
        HostPlacement {
            node: 0,
            bandwidth_up: None,
            bandwidth_down: None,
        };
        2
    ];
    for (imp, expect) in [
        (
            Impairment {
                a: vec![0],
                b: vec![7],
                loss: 0.1,
            },
            "no host 7",
        ),
        (
            Impairment {
                a: vec![0],
                b: vec![1],
                loss: 1.0,
            },
            "below 1",
        ),
    ] {
        let config = NetworkConfig {
            impairments: vec![imp],
            ..NetworkConfig::default()
        };
        let err = Network::build(&graph, &placements, config).err().unwrap();
        assert!(err.to_string().contains(expect), "{err}");
    }
}
