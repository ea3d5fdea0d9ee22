//! Shortest paths between the nodes that carry hosts.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use onionlab_engine::time::SimDuration;

use crate::{Graph, TopologyError};

/// What a packet experiences between two nodes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Path {
    /// Sum of edge latencies along the shortest path.
    pub latency: SimDuration,
    /// Sum of edge jitters along that same path (jitter does not pick the path).
    pub jitter: SimDuration,
    /// Probability that a packet is dropped somewhere between the two hosts.
    ///
    /// Every drop chance is treated as independent, so the loss is `1 - Π(1 - p)` over the
    /// edges of the path *and* the node-level `packet_loss` of both endpoints. Endpoint losses
    /// are included because they model the access links of the sending and receiving hosts,
    /// which every packet crosses; for a path from a node to itself the node's loss therefore
    /// counts twice, once per access link.
    pub loss: f64,
}

/// Path properties among a chosen set of nodes, stored as a dense matrix so that per-packet
/// lookups are two array indexings.
#[derive(Clone, Debug)]
pub struct PathTable {
    /// The distinct used node indices, in the order first listed.
    used: Vec<usize>,
    /// Graph node index to row/column of the matrix; `NOT_USED` for other nodes.
    slot: Vec<usize>,
    /// Row-major `used.len() × used.len()` matrix.
    paths: Vec<Path>,
    min_latency: SimDuration,
}

const NOT_USED: usize = usize::MAX;

impl PathTable {
    /// The path between two graph node indices.
    ///
    /// # Panics
    ///
    /// If either index was not among the nodes given to [`Graph::paths`]; asking for a path
    /// that was never computed is a bug in the caller, not a property of the network.
    pub fn path(&self, from: usize, to: usize) -> Path {
        match self.try_path(from, to) {
            Some(p) => p,
            None => panic!(
                "no path computed from node index {from} to {to}: only {:?} were passed to \
                 Graph::paths",
                self.used
            ),
        }
    }

    /// Like [`PathTable::path`], but `None` instead of a panic for nodes outside the table.
    pub fn try_path(&self, from: usize, to: usize) -> Option<Path> {
        let a = *self.slot.get(from)?;
        let b = *self.slot.get(to)?;
        if a == NOT_USED || b == NOT_USED {
            return None;
        }
        Some(self.paths[a * self.used.len() + b])
    }

    /// The smallest latency among all computed pairs, self paths included. This is the
    /// lookahead a conservative parallel scheduler may use: no packet arrives sooner.
    pub fn min_latency(&self) -> SimDuration {
        self.min_latency
    }

    /// The distinct node indices the table covers, in the order first given.
    pub fn used(&self) -> &[usize] {
        &self.used
    }
}

/// Outgoing edges of every node in compressed-row form: `targets[offsets[u]..offsets[u + 1]]`.
struct Adjacency {
    offsets: Vec<usize>,
    /// (neighbour, edge index), in edge file order so that tie-breaking is reproducible.
    targets: Vec<(usize, usize)>,
}

impl Adjacency {
    fn new(graph: &Graph) -> Self {
        let n = graph.nodes.len();
        let arcs = || {
            graph.edges.iter().enumerate().flat_map(|(i, e)| {
                let forward = (e.source != e.target).then_some((e.source, e.target, i));
                let backward =
                    (!graph.directed && e.source != e.target).then_some((e.target, e.source, i));
                forward.into_iter().chain(backward)
            })
        };
        let mut offsets = vec![0usize; n + 1];
        for (u, _, _) in arcs() {
            offsets[u + 1] += 1;
        }
        for u in 0..n {
            offsets[u + 1] += offsets[u];
        }
        let mut fill = offsets.clone();
        let mut targets = vec![(0, 0); offsets[n]];
        for (u, v, i) in arcs() {
            targets[fill[u]] = (v, i);
            fill[u] += 1;
        }
        Adjacency { offsets, targets }
    }

    fn from(&self, u: usize) -> &[(usize, usize)] {
        &self.targets[self.offsets[u]..self.offsets[u + 1]]
    }
}

/// Per-node state of one Dijkstra run, kept to rebuild jitter and loss along the chosen path.
///
/// Whether a node was reached is its own flag rather than a sentinel latency: path lengths
/// saturate at `SimDuration::MAX`, and a saturated path is still a path.
#[derive(Clone, Copy)]
struct Reach {
    reached: bool,
    latency: SimDuration,
    jitter: SimDuration,
    /// Probability of crossing all edges so far without loss.
    keep: f64,
    settled: bool,
}

const UNREACHED: Reach = Reach {
    reached: false,
    latency: SimDuration::MAX,
    jitter: 0,
    keep: 1.0,
    settled: false,
};

pub(crate) fn compute(graph: &Graph, used: &[usize]) -> Result<PathTable, TopologyError> {
    let n = graph.nodes.len();
    let err = |message: String| TopologyError::whole(&graph.source, message);
    // The fields are public, so a hand-built graph may be inconsistent; refuse rather than panic.
    for (i, e) in graph.edges.iter().enumerate() {
        for end in [e.source, e.target] {
            if end >= n {
                return Err(err(format!(
                    "edge {i} refers to node index {end}, but the graph has {n} nodes"
                )));
            }
        }
    }
    let mut distinct = Vec::new();
    let mut slot = vec![NOT_USED; n];
    for &u in used {
        if u >= n {
            return Err(err(format!(
                "node index {u} is not in the graph, which has {n} nodes"
            )));
        }
        if slot[u] == NOT_USED {
            slot[u] = distinct.len();
            distinct.push(u);
        }
    }

    // Hosts sharing a node talk over its self-loop; when several exist, the fastest wins,
    // consistently with shortest paths elsewhere (first in file order among equals).
    let mut self_loop: Vec<Option<usize>> = vec![None; n];
    for (i, e) in graph.edges.iter().enumerate() {
        if e.source == e.target {
            let best = &mut self_loop[e.source];
            if best.is_none_or(|b| e.latency < graph.edges[b].latency) {
                *best = Some(i);
            }
        }
    }

    let adjacency = Adjacency::new(graph);
    let k = distinct.len();
    let no_loss = |p: f64| 1.0 - p;
    let mut paths = Vec::with_capacity(k * k);
    let mut reach = vec![UNREACHED; n];
    let mut heap = BinaryHeap::new();
    for &src in &distinct {
        dijkstra(graph, &adjacency, src, &slot, k, &mut reach, &mut heap);
        for &dst in &distinct {
            let (latency, jitter, keep) = if dst == src {
                let e = self_loop[src].map(|i| &graph.edges[i]).ok_or_else(|| {
                    err(format!(
                        "{} has no self-loop edge, which hosts attached to the same node need",
                        graph.describe_node(src)
                    ))
                })?;
                (e.latency, e.jitter, no_loss(e.packet_loss))
            } else {
                let r = reach[dst];
                if !r.settled {
                    return Err(err(format!(
                        "no path from {} to {}",
                        graph.describe_node(src),
                        graph.describe_node(dst)
                    )));
                }
                (r.latency, r.jitter, r.keep)
            };
            let ends =
                no_loss(graph.nodes[src].packet_loss) * no_loss(graph.nodes[dst].packet_loss);
            paths.push(Path {
                latency,
                jitter,
                loss: (1.0 - keep * ends).clamp(0.0, 1.0),
            });
        }
    }
    let min_latency = paths.iter().map(|p| p.latency).min().unwrap_or(0);
    Ok(PathTable {
        used: distinct,
        slot,
        paths,
        min_latency,
    })
}

/// Dijkstra from `src`, stopping once all `wanted` used nodes are settled.
///
/// Ties are broken deterministically: nodes are settled in (latency, index) order and edges
/// scanned in file order, and a path only replaces another when strictly shorter, so among
/// equally short paths the first one found is kept.
fn dijkstra(
    graph: &Graph,
    adjacency: &Adjacency,
    src: usize,
    slot: &[usize],
    wanted: usize,
    reach: &mut [Reach],
    heap: &mut BinaryHeap<Reverse<(SimDuration, usize)>>,
) {
    reach.fill(UNREACHED);
    heap.clear();
    reach[src] = Reach {
        reached: true,
        latency: 0,
        ..UNREACHED
    };
    heap.push(Reverse((0, src)));
    let mut remaining = wanted;
    while let Some(Reverse((latency, u))) = heap.pop() {
        if reach[u].settled {
            continue;
        }
        reach[u].settled = true;
        if slot[u] != NOT_USED {
            remaining -= 1;
            if remaining == 0 {
                break;
            }
        }
        let here = reach[u];
        for &(v, i) in adjacency.from(u) {
            let e = &graph.edges[i];
            let candidate = latency.saturating_add(e.latency);
            if !reach[v].reached || candidate < reach[v].latency {
                reach[v] = Reach {
                    reached: true,
                    latency: candidate,
                    jitter: here.jitter.saturating_add(e.jitter),
                    keep: here.keep * (1.0 - e.packet_loss),
                    settled: false,
                };
                heap.push(Reverse((candidate, v)));
            }
        }
    }
}
