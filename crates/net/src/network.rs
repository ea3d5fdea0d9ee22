//! The Internet as the hosts see it: where each host sits on the graph, its access link rates,
//! and the path between any two hosts. Built once before a run and shared read-only.

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
    pub tcp: TcpConfig,
    pub quic: QuicConfig,
}

impl Default for NetworkConfig {
    fn default() -> Self {
        Self {
            lookahead_floor: 0,
            down_queue_time: millis(100),
            down_queue_min_bytes: 64 * 1024,
            up_queue_bytes: 1 << 20,
            up_tcp_backlog: 64 * 1024,
            tcp: TcpConfig::default(),
            quic: QuicConfig::default(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct HostLinks {
    pub node: usize,
    pub up_bps: u64,
    pub down_bps: u64,
    pub down_queue_bytes: u64,
}

pub struct Network {
    hosts: Vec<HostLinks>,
    /// Shared by every socket, so connections need not carry their own copy.
    tcp: Arc<TcpConfig>,
    quic: Arc<QuicConfig>,
    paths: PathTable,
    lookahead: SimDuration,
    pub config: NetworkConfig,
}

impl Network {
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
            .map_err(|e| NetError::Config(e.to_string()))?;
        let lookahead = paths.min_latency().max(config.lookahead_floor);
        if lookahead == 0 {
            return Err(NetError::Config(format!(
                "graph {} has a zero-latency path between hosts; conservative parallel \
                 simulation needs a positive lookahead, so give the edge a latency or set a \
                 lookahead floor",
                graph.source
            )));
        }
        Ok(Network {
            hosts,
            tcp: Arc::new(config.tcp.clone()),
            quic: Arc::new(config.quic.clone()),
            paths,
            lookahead,
            config,
        })
    }

    pub fn hosts(&self) -> usize {
        self.hosts.len()
    }

    pub fn host(&self, id: HostId) -> &HostLinks {
        &self.hosts[id as usize]
    }

    #[inline]
    pub fn path(&self, from: HostId, to: HostId) -> Path {
        self.paths
            .path(self.hosts[from as usize].node, self.hosts[to as usize].node)
    }

    pub fn tcp_config(&self) -> &Arc<TcpConfig> {
        &self.tcp
    }

    pub fn quic_config(&self) -> &Arc<QuicConfig> {
        &self.quic
    }

    /// The round width the engine should use for this network.
    pub fn lookahead(&self) -> SimDuration {
        self.lookahead
    }
}
