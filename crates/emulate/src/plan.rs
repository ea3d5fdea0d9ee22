//! From a resolved scenario to the machines of an emulation: one network namespace per host,
//! its address, its access link and the one-way path to every other host.

use std::net::Ipv4Addr;

use onionlab_netdir::RelayFlags;
use onionlab_scenario::{ClientWorkload, Plan, PlanHost, PlannedHost};
use onionlab_topology::Graph;

use crate::delay::PathSpec;

/// More tor processes than this would not fit the machines the emulator is meant for (a tor
/// grows to 100-160 MB within minutes and every packet crosses one user-space switch).
pub const MAX_TOR_PROCESSES: usize = 40;

/// Each tor's port numbers; every host has its own address, so they can be the same everywhere.
/// This one is the ORPort, where relays and authorities accept channels.
pub const OR_PORT: u16 = 9001;
/// The authorities' DirPort, where they serve directory documents.
pub const DIR_PORT: u16 = 7000;
/// The clients' SOCKS port, on 127.0.0.1 of their namespace, where the workload opens streams.
pub const SOCKS_PORT: u16 = 9050;
/// Every tor's ControlPort, on 127.0.0.1 of its namespace, which the monitors read.
pub const CONTROL_PORT: u16 = 9051;
/// The file servers' port, as in the simulator.
pub const HTTP_PORT: u16 = 80;

/// What an emulated host runs, with what the scenario says about it.
#[derive(Clone, Debug, PartialEq)]
pub enum Role {
    /// A directory authority: a tor that votes on the consensus.
    Authority,
    /// A relay's tor.
    Relay {
        /// Consensus flags the scenario gives the relay; the authorities vote Guard and Exit
        /// as these say.
        flags: RelayFlags,
        /// Consensus weight (nominally kB/s, as in a `w Bandwidth=` line), written into the
        /// authorities' bandwidth file.
        consensus_weight: u64,
        /// tor's `BandwidthRate`, in bytes per second.
        bandwidth_rate: u64,
        /// tor's `BandwidthBurst`, in bytes.
        bandwidth_burst: u64,
        /// tor's `RelayBandwidthRate`, in bytes per second, where the scenario sets one.
        relay_bandwidth_rate: Option<u64>,
        /// tor's `RelayBandwidthBurst`, in bytes, where the scenario sets one.
        relay_bandwidth_burst: Option<u64>,
        /// Whether the relay runs as an exit: it has the Exit flag and its policy allows
        /// [`HTTP_PORT`].
        exit: bool,
        /// Family id: relays with the same id declare each other in `MyFamily`.
        family: Option<u32>,
    },
    /// A file server the clients download from (no tor).
    Server {
        /// Whether clients that name no server group download from it (not so for a
        /// dedicated group).
        shared: bool,
    },
    /// A client's tor and the workload that drives it through SOCKS.
    Client {
        /// What the client fetches, in bytes and nanoseconds.
        workload: ClientWorkload,
        /// The server group to download from; `None`: any shared server.
        server_group: Option<String>,
        /// Scenario time (ns) of the client's first activity.
        start: u64,
        /// tor's `UseEntryGuards`.
        use_entry_guards: bool,
        /// tor's `MaxCircuitDirtiness` (ns), where the group sets its own.
        max_circuit_dirtiness: Option<u64>,
    },
}

/// One emulated host.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// The scenario's name for the host, used in every output file.
    pub name: String,
    /// The scenario group the host belongs to (`relay` for every relay).
    pub group: String,
    /// What the host runs.
    pub role: Role,
    /// The host's IPv4 address in 10.0.0.0/16.
    pub address: Ipv4Addr,
    /// MAC address of the host's end of its veth pair (locally administered, encodes the
    /// host index).
    pub mac: [u8; 6],
    /// Upstream access link rate, in bits per second.
    pub link_up_bps: u64,
    /// Downstream access link rate, in bits per second.
    pub link_down_bps: u64,
    /// Index into the scenario graph's nodes.
    pub graph_node: usize,
}

impl Node {
    /// Whether the host runs a tor (every role but a file server).
    pub fn runs_tor(&self) -> bool {
        !matches!(self.role, Role::Server { .. })
    }

    /// A tor nickname (1-19 letters and digits) that stays unique by carrying the host index.
    pub fn nickname(&self, index: usize) -> String {
        let clean: String = self
            .name
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .collect();
        let mut nick = format!("n{index}{clean}");
        nick.truncate(19);
        nick
    }
}

/// Every host of the emulation and the paths between them.
#[derive(Clone, Debug)]
pub struct Layout {
    /// Authorities, relays, servers, clients: the order of the switch's ports.
    pub nodes: Vec<Node>,
    /// `paths[i][j]`: what a packet from node i to node j experiences on the way.
    pub paths: Vec<Vec<PathSpec>>,
}

impl Layout {
    /// How many of the hosts run a tor.
    pub fn tor_processes(&self) -> usize {
        self.nodes.iter().filter(|n| n.runs_tor()).count()
    }

    /// Indices of the hosts whose role `pick` accepts, in port order.
    pub fn indices(&self, pick: impl Fn(&Role) -> bool) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| pick(&self.nodes[i].role))
            .collect()
    }
}

/// Host `i`'s address: 10.0.0.0/16 counted from 10.0.0.10, clear of .0 and .255.
fn address(i: usize) -> Ipv4Addr {
    let n = 10 + i as u32;
    Ipv4Addr::new(10, 0, (n / 250) as u8, (n % 250) as u8 + 1)
}

/// A locally administered unicast MAC that encodes the host index.
fn mac(i: usize) -> [u8; 6] {
    let i = i as u32;
    [0x02, 0x6f, 0x6c, (i >> 16) as u8, (i >> 8) as u8, i as u8]
}

/// Lays the plan out for emulation, or says why it cannot be emulated here.
pub fn layout(plan: &Plan, graph: &Graph) -> Result<Layout, String> {
    let tors = plan.authorities.len() + plan.relays.len() + plan.clients.len();
    if tors > MAX_TOR_PROCESSES {
        return Err(format!(
            "the scenario needs {tors} tor processes ({} authorities, {} relays, {} clients); \
             emulation runs at most {MAX_TOR_PROCESSES}: use a smaller scenario (or simulate it \
             with `onionlab run`)",
            plan.authorities.len(),
            plan.relays.len(),
            plan.clients.len()
        ));
    }
    if plan.authorities.is_empty() {
        return Err(
            "authorities: emulation needs at least one directory authority (3 recommended)".into(),
        );
    }
    if plan.clients.is_empty() {
        return Err("clients: the scenario has no clients, so there is nothing to measure".into());
    }
    if let Some(c) = plan
        .clients
        .iter()
        .find(|c| matches!(c.workload, ClientWorkload::Upload { .. }))
    {
        return Err(format!(
            "clients: group {:?} uploads, and emulated clients only download so far: simulate \
             it with `onionlab run`",
            c.host.group
        ));
    }
    if let Some(c) = plan
        .clients
        .iter()
        .find(|c| matches!(c.workload, ClientWorkload::Markov(_)))
    {
        return Err(format!(
            "clients: group {:?} has the markov workload, and emulated clients only run fixed \
             downloads (web, bulk, perf) so far: simulate it with `onionlab run`",
            c.host.group
        ));
    }
    if plan.servers.is_empty() {
        return Err("servers: the scenario has no servers for its clients to fetch from".into());
    }
    if !plan
        .relays
        .iter()
        .any(|r| r.flags.contains(RelayFlags::EXIT))
    {
        return Err("relays: no relay has the Exit flag, so no circuit can leave Tor".into());
    }
    let mut nodes = Vec::new();
    let mut push = |name: &str, group: &str, role: Role, up: u64, down: u64, graph_node| {
        let i = nodes.len();
        nodes.push(Node {
            name: name.to_string(),
            group: group.to_string(),
            role,
            address: address(i),
            mac: mac(i),
            link_up_bps: up,
            link_down_bps: down,
            graph_node,
        });
    };
    let host = |h: &PlannedHost| (h.link_up_bps, h.link_down_bps, h.node);
    for a in &plan.authorities {
        let (up, down, g) = host(a);
        push(&a.name, &a.group, Role::Authority, up, down, g);
    }
    for r in &plan.relays {
        let role = Role::Relay {
            flags: r.flags,
            consensus_weight: r.consensus_weight,
            bandwidth_rate: r.bandwidth_rate,
            bandwidth_burst: r.bandwidth_burst,
            relay_bandwidth_rate: r.relay_bandwidth_rate,
            relay_bandwidth_burst: r.relay_bandwidth_burst,
            exit: r.flags.contains(RelayFlags::EXIT) && r.exit_policy.allows_port(HTTP_PORT),
            family: r.family,
        };
        push(
            &r.name,
            "relay",
            role,
            r.link_up_bps,
            r.link_down_bps,
            r.node,
        );
    }
    for s in &plan.servers {
        let (up, down, g) = host(s);
        let shared = !plan.dedicated_server_groups.contains(&s.group);
        push(&s.name, &s.group, Role::Server { shared }, up, down, g);
    }
    for c in &plan.clients {
        let (up, down, g) = host(&c.host);
        let role = Role::Client {
            workload: c.workload.clone(),
            server_group: c.server_group.clone(),
            start: c.start,
            use_entry_guards: c.use_entry_guards,
            max_circuit_dirtiness: c.max_circuit_dirtiness,
        };
        push(&c.host.name, &c.host.group, role, up, down, g);
    }
    let used: Vec<usize> = nodes.iter().map(|n| n.graph_node).collect();
    let table = graph
        .paths(&used)
        .map_err(|e| format!("network.graph: {e}"))?;
    let mut paths: Vec<Vec<PathSpec>> = nodes
        .iter()
        .map(|a| {
            nodes
                .iter()
                .map(|b| {
                    let p = table.path(a.graph_node, b.graph_node);
                    PathSpec {
                        latency_ns: p.latency,
                        jitter_ns: p.jitter,
                        loss: p.loss,
                    }
                })
                .collect()
        })
        .collect();
    // Impairments add their loss to the paths between their sides, both ways, as in the
    // model's network. Nodes follow the order above: authorities, relays, servers, clients.
    let (a, r, s) = (
        plan.authorities.len(),
        plan.relays.len(),
        plan.servers.len(),
    );
    let node_of = |h: &PlanHost| match *h {
        PlanHost::Authority(i) => i,
        PlanHost::Relay(i) => a + i,
        PlanHost::Server(i) => a + r + i,
        PlanHost::Client(i) => a + r + s + i,
    };
    for imp in &plan.impairments {
        for x in imp.sides[0].iter().map(node_of) {
            for y in imp.sides[1].iter().map(node_of) {
                for (from, to) in [(x, y), (y, x)] {
                    let p = &mut paths[from][to];
                    p.loss = 1.0 - (1.0 - p.loss) * (1.0 - imp.loss);
                }
            }
        }
    }
    Ok(Layout { nodes, paths })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_macs_are_distinct_and_private() {
        let mut seen = std::collections::HashSet::new();
        for i in 0..1000 {
            let a = address(i);
            assert!(a.is_private() && a.octets()[3] != 0 && a.octets()[3] != 255);
            assert!(seen.insert((a, mac(i))));
            assert_eq!(mac(i)[0] & 0x03, 0x02, "locally administered unicast");
        }
    }

    #[test]
    fn nicknames_are_valid_for_tor() {
        let node = Node {
            name: "guard-exit-relay-number-17".into(),
            group: "relay".into(),
            role: Role::Server { shared: true },
            address: address(3),
            mac: mac(3),
            link_up_bps: 1,
            link_down_bps: 1,
            graph_node: 0,
        };
        let nick = node.nickname(42);
        assert!(nick.len() <= 19 && nick.chars().all(|c| c.is_ascii_alphanumeric()));
        assert!(nick.starts_with("n42guard"));
    }
}
