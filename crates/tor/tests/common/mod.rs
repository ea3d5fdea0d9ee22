//! Small Tor networks built by hand for behaviour tests.

#![allow(dead_code)]

use std::net::Ipv4Addr;

use onionlab_engine::time::secs;
use onionlab_engine::Simulation;
use onionlab_net::topology::Graph;
use onionlab_net::{HostPlacement, NetworkConfig};
use onionlab_netdir::{Consensus, ExitPolicy, Relay, RelayFlags};
use onionlab_tor::build::{build, HostRole, HostSpec, TorNetwork};
use onionlab_tor::{RelayLimits, TorHost};
use onionlab_torcore::TorParams;
use onionlab_traffic::Workload;

pub(crate) const MBIT: u64 = 1_000_000;

/// A guard, a middle and an exit (consensus relays 0, 1, 2) of equal weight.
pub(crate) fn guard_middle_exit_relays() -> Vec<Relay> {
    vec![
        relay("guard", 1, RelayFlags::GUARD, 1000),
        relay("middle", 2, RelayFlags::default(), 1000),
        relay("exit", 3, RelayFlags::EXIT, 1000),
    ]
}

pub(crate) fn relay(name: &str, n: u8, flags: RelayFlags, weight: u64) -> Relay {
    Relay {
        nickname: name.into(),
        fingerprint: format!("{n:040X}"),
        address: Ipv4Addr::new(10, n, 0, 1),
        or_port: 9001,
        flags: flags
            .union(RelayFlags::FAST)
            .union(RelayFlags::RUNNING)
            .union(RelayFlags::VALID)
            .union(RelayFlags::STABLE),
        bandwidth: weight,
        unmeasured: false,
        exit_policy: if flags.contains(RelayFlags::EXIT) {
            ExitPolicy::accept_all()
        } else {
            ExitPolicy::reject_all()
        },
        family: None,
    }
}

/// A switch graph: every host on one node whose self-loop has this one-way latency.
pub(crate) fn switch(one_way_ms: u64) -> Graph {
    Graph::single_switch(1_000_000_000, 1_000_000_000, one_way_ms * 1_000_000, 0.0)
}

pub(crate) fn at(up: u64, down: u64) -> HostPlacement {
    HostPlacement {
        node: 0,
        bandwidth_up: Some(up),
        bandwidth_down: Some(down),
    }
}

pub(crate) fn limits(rate: u64) -> RelayLimits {
    RelayLimits {
        bandwidth_rate: rate,
        bandwidth_burst: rate,
        relay_bandwidth_rate: None,
        relay_bandwidth_burst: None,
        conn_limit: None,
    }
}

/// Guard, middle and exit (each `rate` bytes/s, links `link` bit/s), `clients` clients with
/// `workload` and one server, all 10 ms (one way) apart.
pub(crate) fn three_relays(
    params: TorParams,
    rate: u64,
    link: u64,
    clients: Vec<Workload>,
    threads: usize,
) -> Simulation<TorHost> {
    three_relays_with(params, [(rate, link); 3], clients, threads)
}

/// Like `three_relays`, with each relay's (rate in bytes/s, link in bit/s) given. Host ids:
/// 0 guard, 1 middle, 2 exit, 3 server, 4.. clients.
pub(crate) fn three_relays_with(
    params: TorParams,
    relay_links: [(u64, u64); 3],
    clients: Vec<Workload>,
    threads: usize,
) -> Simulation<TorHost> {
    network(
        params,
        guard_middle_exit_relays(),
        relay_links.to_vec(),
        clients,
        threads,
    )
}

/// Any relays (each with its (rate in bytes/s, link in bit/s)), one server and `clients`
/// clients starting at 1 s, all 10 ms (one way) apart. Host ids: relays in order, then the
/// server, then the clients.
pub(crate) fn network(
    params: TorParams,
    relays: Vec<Relay>,
    relay_links: Vec<(u64, u64)>,
    clients: Vec<Workload>,
    threads: usize,
) -> Simulation<TorHost> {
    let spec = network_spec(params, relays, relay_links, clients, threads);
    build(spec).expect("network builds").0
}

/// What `network` builds, for tests that change a host or add one first.
pub(crate) fn network_spec(
    params: TorParams,
    relays: Vec<Relay>,
    relay_links: Vec<(u64, u64)>,
    clients: Vec<Workload>,
    threads: usize,
) -> TorNetwork {
    assert_eq!(relays.len(), relay_links.len());
    let mut hosts: Vec<HostSpec> = relays
        .iter()
        .enumerate()
        .map(|(i, r)| HostSpec {
            name: r.nickname.clone(),
            placement: at(relay_links[i].1, relay_links[i].1),
            role: HostRole::Relay {
                cpu: None,
                relay: i,
                limits: limits(relay_links[i].0),
            },
        })
        .collect();
    hosts.push(HostSpec {
        name: "server".into(),
        placement: at(1000 * MBIT, 1000 * MBIT),
        role: HostRole::Server {
            group: "web".into(),
            shared: true,
        },
    });
    for (i, w) in clients.into_iter().enumerate() {
        hosts.push(HostSpec {
            name: format!("client{i}"),
            placement: at(100 * MBIT, 100 * MBIT),
            role: HostRole::Client {
                workload: w,
                servers: "web".into(),
                start: secs(1),
                options: Default::default(),
            },
        });
    }
    TorNetwork {
        graph: switch(10),
        hosts,
        consensus: Consensus::from_relays(relays),
        params,
        net: NetworkConfig::default(),
        seed: 1,
        threads,
    }
}

pub(crate) fn client(sim: &Simulation<TorHost>, host: u32) -> &onionlab_tor::Client {
    match sim.host(host) {
        TorHost::Client(c) => c,
        _ => panic!("host {host} is not a client"),
    }
}

pub(crate) fn relay_host(sim: &Simulation<TorHost>, host: u32) -> &onionlab_tor::Relay {
    match sim.host(host) {
        TorHost::Relay(r) => r,
        _ => panic!("host {host} is not a relay"),
    }
}
