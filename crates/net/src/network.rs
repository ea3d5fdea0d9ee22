//! The Internet as the hosts see it: where each host sits on the graph, its access link rates,
//! and the path between any two hosts. Built once before a run and shared read-only.

use std::collections::BTreeMap;
use std::sync::Arc;

use onionlab_engine::time::{millis, SimDuration, NANOS_PER_SEC};
use onionlab_engine::HostId;
use onionlab_quic::QuicConfig;
use onionlab_tcp::TcpConfig;
use onionlab_topology::{Graph, Path, PathTable};

use crate::NetError;

/// Where a host attaches to the graph, optionally with its own link rates.
#[derive(Clone, Debug)]
pub struct HostPlacement {
    /// Index of the graph node.
    pub node: usize,
    /// Upstream rate in bit/s; defaults to the node's `host_bandwidth_up`.
    pub bandwidth_up: Option<u64>,
    /// Downstream rate in bit/s; defaults to the node's `host_bandwidth_down`.
    pub bandwidth_down: Option<u64>,
}

/// Settings shared by every host of a network.
#[derive(Clone, Debug)]
pub struct NetworkConfig {
    /// The least round width. Above the smallest path latency it trades accuracy for speed:
    /// packets faster than it arrive at the end of the round they were sent in.
    pub lookahead_floor: SimDuration,
    /// Downstream queue as time at the link rate (the router buffer in front of the host).
    pub down_queue_time: SimDuration,
    /// Least downstream queue, in bytes, however slow the link.
    pub down_queue_min_bytes: u64,
    /// Upstream queue bound (bytes): datagrams beyond it are dropped.
    pub up_queue_bytes: u64,
    /// TCP sockets stop handing segments to the upstream link while more than this many bytes
    /// wait there, as Linux's qdisc back-pressure does; they resume at half of it.
    pub up_tcp_backlog: u64,
    /// Segmentation offload, as Linux hosts do it by default (TSO or GSO when sending, GRO
    /// when receiving): a TCP socket's data segments that leave back to back, with the same
    /// headers and consecutive sequence numbers, travel as one packet, sized as Linux sizes
    /// its TSO packets (`TcpConnection::offload_segments`, at most [`MAX_OFFLOAD_SEGMENTS`]),
    /// serialised on each link as their sum and delivered together when the last of them has
    /// arrived. Each segment is still lost on the path on
    /// its own. Off, every segment is a packet of its own. Off in `Default`, which the
    /// single-flow tests and examples build on; a scenario has it on unless its
    /// `network.segment_offload` says `false`.
    pub segment_offload: bool,
    /// Settings of every host's TCP sockets (buffers, congestion control, delayed ACKs).
    pub tcp: TcpConfig,
    /// Settings of every host's QUIC connections.
    pub quic: QuicConfig,
    /// Extra loss between chosen hosts, on top of their paths' own (an experiment that
    /// impairs one link of a circuit while the other hops crossing the same graph nodes stay
    /// clean).
    pub impairments: Vec<Impairment>,
}

/// The most segments one offloaded packet carries: 64 KiB of payload, Linux's largest GSO
/// packet, in segments of the usual 1,448 bytes.
pub const MAX_OFFLOAD_SEGMENTS: u16 = 44;

/// Loss between two sets of hosts: every packet from a host of one set to a host of the
/// other, in either direction, is dropped with probability `loss`, independently of the
/// path's own loss (the two combine as `1 - (1 - path) (1 - loss)`), and so are several
/// impairments that name the same pair.
#[derive(Clone, Debug, PartialEq)]
pub struct Impairment {
    /// Hosts of one side.
    pub a: Vec<HostId>,
    /// Hosts of the other side.
    pub b: Vec<HostId>,
    /// At least 0 and below 1.
    pub loss: f64,
}

/// The most impairment classes (distinct ways a host is named by the impairments) a network
/// may have: the lookup table holds one loss per pair of classes. A scenario's impairments
/// name whole groups or single relays, so their classes are at most twice their number plus
/// one.
pub const MAX_IMPAIRMENT_CLASSES: usize = 1024;

impl Default for NetworkConfig {
    fn default() -> Self {
        Self {
            lookahead_floor: 0,
            down_queue_time: millis(100),
            down_queue_min_bytes: 64 * 1024,
            up_queue_bytes: 1 << 20,
            up_tcp_backlog: 64 * 1024,
            segment_offload: false,
            tcp: TcpConfig::default(),
            quic: QuicConfig::default(),
            impairments: Vec::new(),
        }
    }
}

/// One host's place on the graph and its access links, as resolved when the network is built.
#[derive(Clone, Debug)]
pub struct HostLinks {
    /// Index of the graph node the host sits on.
    pub node: usize,
    /// Upstream rate, in bit/s.
    pub up_bps: u64,
    /// Downstream rate, in bit/s.
    pub down_bps: u64,
    /// Downstream queue bound, in bytes: `down_queue_time` at `down_bps`, at least
    /// `down_queue_min_bytes`.
    pub down_queue_bytes: u64,
}

/// Every host's access links and the paths between them, shared read-only by all stacks.
pub struct Network {
    hosts: Vec<HostLinks>,
    /// Shared by every socket, so connections need not carry their own copy.
    tcp: Arc<TcpConfig>,
    quic: Arc<QuicConfig>,
    paths: PathTable,
    lookahead: SimDuration,
    /// Impairments resolved for a lookup that costs the same whatever the number of hosts:
    /// each host's class (hosts that every impairment treats alike share one), and the extra
    /// loss between two classes in a `classes × classes` table. Empty without impairments,
    /// so that the common case costs one predictable branch per packet.
    impair_class: Vec<u16>,
    impair_loss: Vec<f64>,
    impair_classes: usize,
    /// The settings the network was built with.
    pub config: NetworkConfig,
}

/// Hosts' impairment classes and the loss between every two classes; class 0 is the hosts no
/// impairment names.
fn impairment_table(
    hosts: usize,
    impairments: &[Impairment],
) -> Result<(Vec<u16>, Vec<f64>, usize), NetError> {
    if impairments.is_empty() {
        return Ok((Vec::new(), Vec::new(), 0));
    }
    // What each host is, as (impairment, side) pairs in order: hosts with equal lists are
    // alike for every impairment.
    let mut named: Vec<Vec<(u32, u8)>> = vec![Vec::new(); hosts];
    for (k, imp) in impairments.iter().enumerate() {
        if !(imp.loss >= 0.0 && imp.loss < 1.0) {
            return Err(NetError::Config(format!(
                "impairment {k}: loss must be at least 0 and below 1, got {}",
                imp.loss
            )));
        }
        for (side, set) in [(0u8, &imp.a), (1u8, &imp.b)] {
            for &h in set {
                let list = named.get_mut(h as usize).ok_or_else(|| {
                    NetError::Config(format!(
                        "impairment {k}: no host {h} (the network has {hosts})"
                    ))
                })?;
                if list.last() != Some(&(k as u32, side)) {
                    list.push((k as u32, side));
                }
            }
        }
    }
    let mut classes: BTreeMap<&[(u32, u8)], u16> = BTreeMap::new();
    classes.insert(&[], 0);
    let mut class_of = Vec::with_capacity(hosts);
    for list in &named {
        let class = match classes.get(list.as_slice()) {
            Some(&c) => c,
            None => {
                let c = classes.len();
                if c >= MAX_IMPAIRMENT_CLASSES {
                    return Err(NetError::Config(format!(
                        "the impairments divide the hosts into more than \
                         {MAX_IMPAIRMENT_CLASSES} classes; name groups of hosts rather than \
                         many single hosts"
                    )));
                }
                classes.insert(list.as_slice(), c as u16);
                c as u16
            }
        };
        class_of.push(class);
    }
    let n = classes.len();
    let mut members: Vec<&[(u32, u8)]> = vec![&[]; n];
    for (list, &c) in &classes {
        members[c as usize] = list;
    }
    let mut loss = vec![0.0; n * n];
    for x in 0..n {
        for y in 0..n {
            // Each impairment joining the two classes, once, however both name them.
            let mut keep = 1.0;
            for (k, imp) in impairments.iter().enumerate() {
                let k = k as u32;
                let has = |c: usize, side: u8| members[c].contains(&(k, side));
                if (has(x, 0) && has(y, 1)) || (has(x, 1) && has(y, 0)) {
                    keep *= 1.0 - imp.loss;
                }
            }
            loss[x * n + y] = 1.0 - keep;
        }
    }
    Ok((class_of, loss, n))
}

impl Network {
    /// Places each host on its graph node with its link rates (its own, or the node's), finds
    /// the paths between the nodes used and resolves the impairments. Fails on an invalid
    /// placement or impairment ([`NetError::Config`]) or a graph that cannot carry the hosts
    /// ([`NetError::Graph`]).
    pub fn build(
        graph: &Graph,
        placements: &[HostPlacement],
        config: NetworkConfig,
    ) -> Result<Network, NetError> {
        let mut hosts = Vec::with_capacity(placements.len());
        for (id, p) in placements.iter().enumerate() {
            let node = graph.nodes.get(p.node).ok_or_else(|| {
                NetError::Config(format!(
                    "host {id}: graph {} has no node index {}",
                    graph.source, p.node
                ))
            })?;
            let rate =
                |given: Option<u64>, from_node: Option<u64>, dir: &str| match given.or(from_node) {
                    Some(0) => Err(NetError::Config(format!(
                        "host {id}: {dir} bandwidth must be positive"
                    ))),
                    Some(r) => Ok(r),
                    None => Err(NetError::Config(format!(
                        "host {id}: no {dir} bandwidth given and graph node {} of {} has no \
                         host_bandwidth_{dir}",
                        node.id, graph.source
                    ))),
                };
            let up_bps = rate(p.bandwidth_up, node.bandwidth_up, "up")?;
            let down_bps = rate(p.bandwidth_down, node.bandwidth_down, "down")?;
            let down_queue_bytes = ((down_bps as u128 * config.down_queue_time as u128
                / (8 * NANOS_PER_SEC as u128)) as u64)
                .max(config.down_queue_min_bytes);
            hosts.push(HostLinks {
                node: p.node,
                up_bps,
                down_bps,
                down_queue_bytes,
            });
        }
        let used: Vec<usize> = hosts.iter().map(|h| h.node).collect();
        let paths = graph
            .paths(&used)
            .map_err(|e| NetError::Graph(e.to_string()))?;
        let lookahead = paths.min_latency().max(config.lookahead_floor);
        if lookahead == 0 {
            return Err(NetError::Graph(format!(
                "graph {} has a zero-latency path between hosts; conservative parallel \
                 simulation needs a positive lookahead, so give the edge a latency or set a \
                 lookahead floor",
                graph.source
            )));
        }
        let (impair_class, impair_loss, impair_classes) =
            impairment_table(hosts.len(), &config.impairments)?;
        Ok(Network {
            hosts,
            tcp: Arc::new(config.tcp.clone()),
            quic: Arc::new(config.quic.clone()),
            paths,
            lookahead,
            impair_class,
            impair_loss,
            impair_classes,
            config,
        })
    }

    /// The number of hosts.
    pub fn hosts(&self) -> usize {
        self.hosts.len()
    }

    /// Host `id`'s node and access links.
    pub fn host(&self, id: HostId) -> &HostLinks {
        &self.hosts[id as usize]
    }

    /// The path a packet from `from` to `to` takes, its loss including any impairment
    /// between the two hosts. Called for every packet.
    #[inline]
    pub fn path(&self, from: HostId, to: HostId) -> Path {
        let mut path = self
            .paths
            .path(self.hosts[from as usize].node, self.hosts[to as usize].node);
        if !self.impair_class.is_empty() {
            let x = self.impair_class[from as usize] as usize;
            let y = self.impair_class[to as usize] as usize;
            let extra = self.impair_loss[x * self.impair_classes + y];
            if extra > 0.0 {
                path.loss = 1.0 - (1.0 - path.loss) * (1.0 - extra);
            }
        }
        path
    }

    /// The TCP settings every socket shares.
    pub fn tcp_config(&self) -> &Arc<TcpConfig> {
        &self.tcp
    }

    /// The QUIC settings every connection shares.
    pub fn quic_config(&self) -> &Arc<QuicConfig> {
        &self.quic
    }

    /// The round width the engine should use for this network.
    pub fn lookahead(&self) -> SimDuration {
        self.lookahead
    }

    /// Each host's least path latency from any host of the network, itself included: no
    /// packet reaches it sooner after leaving (jitter only adds), which lets the engine run it
    /// several rounds at a time (`Simulation::set_min_delays`).
    pub fn min_latencies_to_hosts(&self) -> Vec<SimDuration> {
        let used = self.paths.used();
        let to_node: std::collections::HashMap<usize, SimDuration> = used
            .iter()
            .map(|&to| {
                let least = used
                    .iter()
                    .map(|&from| self.paths.path(from, to).latency)
                    .min()
                    .unwrap_or(0);
                (to, least)
            })
            .collect();
        self.hosts.iter().map(|h| to_node[&h.node]).collect()
    }
}
