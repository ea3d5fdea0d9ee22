//! From a scenario to concrete hosts: which relays exist, with which rates and flags, and where
//! every host sits on the graph.
//!
//! Every random choice draws from a per-host stream ([`onionlab_engine::host_rng`]) keyed by the
//! scenario seed, the host's position in the plan and the purpose of the draw. A host's
//! placement therefore does not depend on how many draws another host made, and the same
//! scenario and seed always give the same plan.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::Ipv4Addr;

use onionlab_engine::host_rng;
use onionlab_netdir::{Consensus, ExitPolicy, PathSelector, Position, Relay, RelayFlags};
use onionlab_topology::Graph;
use rand::RngExt;

use crate::data::{self, CsvRelay};
use crate::limits::{
    MAX_LINK_RATE, MAX_RELAY_RATE_BYTES, MIN_LINK_RATE, MIN_RELAY_RATE_BYTES, MODEL_PORT,
};
use crate::model::*;
use crate::units::Rate;
use crate::ScenarioError;

/// Everything a run instantiates, in host order: authorities, relays, servers, clients.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// Every relay, in host order; `usize` relay indices elsewhere in the plan point here.
    pub relays: Vec<PlannedRelay>,
    /// The directory authorities, `auth1`, `auth2`, and so on.
    pub authorities: Vec<PlannedHost>,
    /// Server hosts, group by group in file order.
    pub servers: Vec<PlannedHost>,
    /// Client hosts, group by group in file order.
    pub clients: Vec<PlannedClient>,
    /// Attackers, placed after the servers and clients.
    pub attacks: Vec<PlannedAttack>,
    /// Managed processes, placed after every other host.
    pub processes: Vec<PlannedProcess>,
    /// `network.impairments` with their names turned into hosts.
    pub impairments: Vec<PlannedImpairment>,
    /// The relays' CPU model, if the scenario has one.
    pub cpu: Option<crate::cpu::PlannedCpu>,
    /// Server groups with `dedicated: true`: only clients that name them download from them.
    pub dedicated_server_groups: Vec<String>,
    /// Sampled relays placed by address that went to a random node: the country table has no
    /// country for their address, or the graph no node in it.
    pub relays_placed_anywhere: u32,
}

/// A host of a [`Plan`], by its list there and its position in that list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlanHost {
    /// Index into [`Plan::relays`].
    Relay(usize),
    /// Index into [`Plan::authorities`].
    Authority(usize),
    /// Index into [`Plan::servers`].
    Server(usize),
    /// Index into [`Plan::clients`].
    Client(usize),
}

/// Extra loss between two sets of hosts (`network.impairments`).
#[derive(Clone, Debug, PartialEq)]
pub struct PlannedImpairment {
    /// The hosts on each side; a packet between a host of one side and a host of the other,
    /// either way, is subject to the loss.
    pub sides: [Vec<PlanHost>; 2],
    /// Probability, from 0 to below 1, that such a packet is lost, on top of its path's loss.
    pub loss: f64,
}

/// A managed process with its program found and its host placed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedProcess {
    /// Its host, `process-<group>-<n>`.
    pub host: PlannedHost,
    /// The program, as a path from the working directory (or absolute).
    pub program: std::path::PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Its environment variables, in name order.
    pub env: Vec<(String, String)>,
    /// When it starts, in nanoseconds.
    pub start: u64,
    /// Wall-clock nanoseconds it may run without a system call before it is stopped.
    pub stall_limit: u64,
}

/// An attacker with its victim found among the planned relays.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedAttack {
    /// The attacker's own host, placed after every other host.
    pub host: PlannedHost,
    /// Index into `Plan::relays`.
    pub victim: usize,
    /// Nanoseconds.
    pub start: u64,
    /// When the attack stops and the attacker closes its connections, in nanoseconds.
    pub end: u64,
    /// Period between rounds of circuits, in nanoseconds.
    pub every: u64,
    /// Circuits built through the victim each period.
    pub circuits: u32,
}

/// One relay as a run builds it: name, place on the graph, link, consensus entry and torrc rates.
#[derive(Clone, Debug, PartialEq)]
pub struct PlannedRelay {
    /// Nickname, unique among the plan's relays.
    pub name: String,
    /// Index into `graph.nodes`.
    pub node: usize,
    /// Upstream access link rate, in bits per second.
    pub link_up_bps: u64,
    /// Downstream access link rate, in bits per second.
    pub link_down_bps: u64,
    /// Consensus flags the relay is listed with.
    pub flags: RelayFlags,
    /// As in a consensus `w Bandwidth=` line (nominally kB/s).
    pub consensus_weight: u64,
    /// Bytes per second.
    pub bandwidth_rate: u64,
    /// Bytes.
    pub bandwidth_burst: u64,
    /// `RelayBandwidthRate` in bytes per second, where set.
    pub relay_bandwidth_rate: Option<u64>,
    /// `RelayBandwidthBurst` in bytes, where set.
    pub relay_bandwidth_burst: Option<u64>,
    /// ConnLimit, where the relay's entry overrides `tor.conn_limit`.
    pub conn_limit: Option<u32>,
    /// Exit policy summary that clients check before choosing the relay as an exit.
    pub exit_policy: ExitPolicy,
    /// Family id: relays with the same `Some` id never share a circuit.
    pub family: Option<u32>,
    /// IPv4 address; relays in one /16 never share a circuit.
    pub address: Ipv4Addr,
}

/// A host that is not a relay (an authority, server, client or attacker), placed on the graph.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedHost {
    /// Host name, such as `auth1`, `server-web-3` or `client-bulk-12`.
    pub name: String,
    /// The group it belongs to: its server or client group's name, or `authority` or `attack`.
    pub group: String,
    /// Index into `graph.nodes`.
    pub node: usize,
    /// Upstream access link rate, in bits per second.
    pub link_up_bps: u64,
    /// Downstream access link rate, in bits per second.
    pub link_down_bps: u64,
}

/// A client's behaviour with every quantity in bytes or nanoseconds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientWorkload {
    /// Download `size`, then pause uniformly in `[pause_min, pause_max]`, repeat.
    Web {
        /// Bytes per download.
        size: u64,
        /// Shortest think time after a download, in nanoseconds.
        pause_min: u64,
        /// Longest think time after a download, in nanoseconds.
        pause_max: u64,
        /// A download not finished after this many nanoseconds counts as failed.
        timeout: u64,
    },
    /// Download `size` back to back (after an optional pause).
    Bulk {
        /// Bytes per download.
        size: u64,
        /// Shortest pause between downloads, in nanoseconds (0 for none).
        pause_min: u64,
        /// Longest pause between downloads, in nanoseconds.
        pause_max: u64,
        /// A download not finished after this many nanoseconds counts as failed.
        timeout: u64,
    },
    /// Start a download of `size` every `interval`.
    Perf {
        /// Bytes per download.
        size: u64,
        /// Time between download starts, in nanoseconds.
        interval: u64,
        /// A download not finished after this many nanoseconds counts as failed.
        timeout: u64,
    },
    /// Upload `size` back to back.
    Upload {
        /// Bytes per upload.
        size: u64,
        /// An upload not finished after this many nanoseconds counts as failed.
        timeout: u64,
    },
    /// `users` users' streams drawn from the PrivCount models, loaded once per group and
    /// shared by its clients.
    Markov(onionlab_traffic::MarkovWorkload),
}

impl ClientWorkload {
    /// The traffic model that carries out this workload (in the simulator and the emulator).
    pub fn workload(&self) -> onionlab_traffic::Workload {
        use onionlab_traffic::Workload;
        match *self {
            ClientWorkload::Web {
                size,
                pause_min,
                pause_max,
                timeout,
            } => Workload::Web {
                size_bytes: size,
                pause_min,
                pause_max,
                timeout,
            },
            ClientWorkload::Bulk {
                size,
                pause_min: 0,
                pause_max: 0,
                timeout,
            } => Workload::Bulk {
                size_bytes: size,
                timeout,
            },
            // A bulk client that pauses between downloads is a web client with bulk sizes.
            ClientWorkload::Bulk {
                size,
                pause_min,
                pause_max,
                timeout,
            } => Workload::Web {
                size_bytes: size,
                pause_min,
                pause_max,
                timeout,
            },
            ClientWorkload::Perf {
                size,
                interval,
                timeout,
            } => Workload::Perf {
                size_bytes: size,
                interval,
                timeout,
            },
            ClientWorkload::Upload { size, timeout } => Workload::Upload {
                size_bytes: size,
                timeout,
            },
            ClientWorkload::Markov(ref m) => Workload::Markov(m.clone()),
        }
    }
}

/// A client host with what it does and when it starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedClient {
    /// The client's host and place on the graph.
    pub host: PlannedHost,
    /// What the client fetches or sends, in bytes and nanoseconds.
    pub workload: ClientWorkload,
    /// The server group to download from; `None`: any server.
    pub server_group: Option<String>,
    /// Simulated time (ns) of the client's first activity, drawn from the group's `start`.
    pub start: u64,
    /// tor's `UseEntryGuards`.
    pub use_entry_guards: bool,
    /// tor's `MaxCircuitDirtiness` for this client (ns); `None`: the network's.
    pub max_circuit_dirtiness: Option<u64>,
}

/// Purposes of the per-host random streams; distinct so that one kind of draw never shifts
/// another.
const PURPOSE_PLACE: u32 = 0x5c_0001;
const PURPOSE_RELAY: u32 = 0x5c_0002;
const PURPOSE_START: u32 = 0x5c_0003;
const PURPOSE_SAMPLE: u32 = 0x5c_0004;
const PURPOSE_SPREAD: u32 = 0x5c_0005;

/// Tor's default `BandwidthRate`/`BandwidthBurst` (1 GiB/s), i.e. no configured limit.
const TOR_DEFAULT_RATE: u64 = 1 << 30;
/// Floor for relay links derived from a rate: slower links would make the relay's own rate
/// meaningless and circuits through it unusably slow.
const MIN_DERIVED_LINK_BPS: u64 = 10_000_000;
/// Floor for links taken from the relays file, some of whose rows record almost nothing.
const MIN_FILE_LINK_BPS: u64 = 1_000_000;

/// Loads the graph the scenario names (`builtin`, an alias, `data:` or a path).
///
/// With `network.graph_loss: false` the graph's edges and nodes lose nothing (the builtin
/// network's `loss` included); everything else about the graph stays. `network.edge_loss`
/// then adds its loss to every edge, independently of the edge's own.
pub fn load_graph(s: &Scenario) -> Result<Graph, ScenarioError> {
    let mut graph = read_graph(s)?;
    if !s.network.graph_loss {
        graph.edges.iter_mut().for_each(|e| e.packet_loss = 0.0);
        graph.nodes.iter_mut().for_each(|n| n.packet_loss = 0.0);
    }
    let extra = s.network.edge_loss;
    if extra > 0.0 {
        for e in &mut graph.edges {
            // 1 − (1 − own)(1 − extra), written so that an edge without loss of its own gets
            // exactly `extra`.
            e.packet_loss += extra - e.packet_loss * extra;
        }
    }
    Ok(graph)
}

fn read_graph(s: &Scenario) -> Result<Graph, ScenarioError> {
    if s.network.graph == "builtin" {
        let b = s.network.builtin.clone().unwrap_or_default();
        return Ok(Graph::single_switch(
            b.bandwidth.0,
            b.bandwidth.0,
            b.latency.0,
            b.loss,
        ));
    }
    let input = data::resolve_file(&s.network.graph, &s.source, data::GRAPH_ALIASES)
        .map_err(|m| ScenarioError::new(&s.source, "network.graph", m))?;
    Graph::read(&input).map_err(|e| {
        ScenarioError::new(
            &s.source,
            "network.graph",
            format!("cannot load graph: {e}"),
        )
    })
}

/// [`resolve_trial`] for the first trial.
pub fn resolve(s: &Scenario, graph: &Graph) -> Result<Plan, ScenarioError> {
    resolve_trial(s, graph, 0)
}

/// Turns the scenario into concrete hosts placed on `graph`. Trial 0 uses the scenario seed
/// itself; later trials derive independent seeds from it so repeated runs differ in every draw.
pub fn resolve_trial(s: &Scenario, graph: &Graph, trial: u32) -> Result<Plan, ScenarioError> {
    // A scenario built or changed in code has not been through `parse`; the checks are cheap
    // and everything below relies on them.
    crate::validate::check(s)?;
    if graph.nodes.is_empty() {
        return Err(ScenarioError::new(
            &s.source,
            "network.graph",
            "the graph has no nodes",
        ));
    }
    let seed = trial_seed(s.run.seed, trial);
    let mut r = Resolver {
        s,
        graph,
        seed,
        next_host: 0,
        countries: countries(graph),
        placed_anywhere: 0,
        models: BTreeMap::new(),
    };
    let authorities = r.authorities()?;
    let relays = r.relays()?;
    if !s.clients.is_empty() {
        check_paths(s, &relays)?;
    }
    let servers = r.servers()?;
    let clients = r.clients()?;
    let attacks = r.attacks(&relays)?;
    let processes = r.processes()?;
    for (i, name) in s.report.relays.iter().enumerate() {
        if !relays.iter().any(|r| &r.name == name) {
            return Err(r.err(
                format!("report.relays[{i}]"),
                format!("no relay is named {}", crate::validate::shown(name)),
            ));
        }
    }
    let mut impairments = Vec::with_capacity(s.network.impairments.len());
    for (i, imp) in s.network.impairments.iter().enumerate() {
        let p = format!("network.impairments[{i}]");
        let mut sides = [Vec::new(), Vec::new()];
        for (k, side) in imp.between.iter().enumerate() {
            sides[k] = impairment_side(
                s,
                &format!("{p}.between[{k}]"),
                side,
                &relays,
                &authorities,
                &servers,
                &clients,
            )?;
        }
        if sides[0].iter().any(|h| sides[1].contains(h)) {
            return Err(r.err(
                format!("{p}.between"),
                format!(
                    "{} and {} are the same hosts: expected two different sides, the hosts at \
                     either end of the link to impair",
                    crate::validate::shown(&imp.between[0]),
                    crate::validate::shown(&imp.between[1])
                ),
            ));
        }
        impairments.push(PlannedImpairment {
            sides,
            loss: imp.loss,
        });
    }
    let cpu = match &s.cpu {
        crate::model::CpuSection::Model(spec) => {
            let names: Vec<String> = relays.iter().map(|r| r.name.clone()).collect();
            Some(crate::cpu::plan(&s.source, spec, &names)?)
        }
        crate::model::CpuSection::None => None,
    };
    Ok(Plan {
        relays,
        authorities,
        servers,
        clients,
        attacks,
        processes,
        impairments,
        cpu,
        relays_placed_anywhere: r.placed_anywhere,
        dedicated_server_groups: (s.servers.iter())
            .filter(|g| g.dedicated)
            .map(|g| g.name.clone())
            .collect(),
    })
}

/// The hosts one side of an impairment names: a relay, every host of a server or client
/// group, or every authority. A name that could be two of these must say which with a prefix.
fn impairment_side(
    s: &Scenario,
    field: &str,
    side: &str,
    relays: &[PlannedRelay],
    authorities: &[PlannedHost],
    servers: &[PlannedHost],
    clients: &[PlannedClient],
) -> Result<Vec<PlanHost>, ScenarioError> {
    use crate::validate::{impairment_target, shown, TargetKind};
    let err = |m: String| ScenarioError::new(&s.source, field, m);
    let (kind, name) = impairment_target(side).map_err(err)?;
    let wants = |k: TargetKind| kind.is_none_or(|want| want == k);
    let mut found: Vec<(&str, Vec<PlanHost>)> = Vec::new();
    if kind == Some(TargetKind::Authorities) {
        found.push((
            "the authorities",
            (0..authorities.len()).map(PlanHost::Authority).collect(),
        ));
    }
    if wants(TargetKind::Relay) {
        if let Some(i) = relays.iter().position(|r| r.name == name) {
            found.push(("the relay", vec![PlanHost::Relay(i)]));
        }
    }
    if wants(TargetKind::Servers) && s.servers.iter().any(|g| g.name == name) {
        let hosts = servers.iter().enumerate();
        found.push((
            "the server group",
            hosts
                .filter(|(_, h)| h.group == name)
                .map(|(i, _)| PlanHost::Server(i))
                .collect(),
        ));
    }
    if wants(TargetKind::Clients) && s.clients.iter().any(|g| g.name == name) {
        let hosts = clients.iter().enumerate();
        found.push((
            "the client group",
            hosts
                .filter(|(_, c)| c.host.group == name)
                .map(|(i, _)| PlanHost::Client(i))
                .collect(),
        ));
    }
    match found.len() {
        1 => Ok(found.pop().unwrap().1),
        0 => {
            let some: Vec<&str> = relays.iter().take(5).map(|r| r.name.as_str()).collect();
            let groups = |names: Vec<&str>| {
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            };
            Err(err(format!(
                "no relay, server group or client group is named {} (relays are named like \
                 {}; server groups: {}; client groups: {}; or write authorities)",
                shown(side),
                some.join(", "),
                groups(s.servers.iter().map(|g| g.name.as_str()).collect()),
                groups(s.clients.iter().map(|g| g.name.as_str()).collect()),
            )))
        }
        _ => {
            let what: Vec<&str> = found.iter().map(|(w, _)| *w).collect();
            Err(err(format!(
                "{} names {}: write relay:{name}, servers:{name} or clients:{name} to say which",
                shown(side),
                what.join(" and ")
            )))
        }
    }
}

/// SplitMix64 finaliser: trial seeds far apart even for consecutive trials.
fn trial_seed(seed: u64, trial: u32) -> u64 {
    if trial == 0 {
        return seed;
    }
    let mut z = seed ^ u64::from(trial).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn countries(graph: &Graph) -> BTreeMap<String, Vec<usize>> {
    let mut m: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, n) in graph.nodes.iter().enumerate() {
        if let Some(cc) = &n.country_code {
            m.entry(cc.to_ascii_uppercase()).or_default().push(i);
        }
    }
    m
}

struct Resolver<'a> {
    s: &'a Scenario,
    graph: &'a Graph,
    seed: u64,
    /// Position of the next host in plan order; selects its random streams.
    next_host: u32,
    countries: BTreeMap<String, Vec<usize>>,
    /// Relays `place: address` put anywhere: the table or the graph has no country for them.
    placed_anywhere: u32,
    /// Traffic models read so far, by reference and kind.
    models: BTreeMap<
        (String, onionlab_traffic::ModelKind),
        std::sync::Arc<onionlab_traffic::MarkovModel>,
    >,
}

impl Resolver<'_> {
    fn err(&self, field: impl Into<String>, message: impl Into<String>) -> ScenarioError {
        ScenarioError::new(&self.s.source, field, message)
    }

    fn take_host(&mut self) -> u32 {
        let h = self.next_host;
        self.next_host = self.next_host.wrapping_add(1);
        h
    }

    /// Nodes a host may sit on: those of its country, else all of them.
    fn candidates(&self, country: Option<&str>, field: &str) -> Result<&[usize], ScenarioError> {
        match country {
            None => Ok(&[]),
            Some(c) => self
                .countries
                .get(&c.to_ascii_uppercase())
                .map(Vec::as_slice)
                .ok_or_else(|| {
                    let known: Vec<&str> = self.countries.keys().map(String::as_str).collect();
                    self.err(
                        field,
                        format!(
                            "unknown country {c:?}: graph {} has no node there (countries present: {})",
                            self.graph.source,
                            if known.is_empty() { "none".into() } else { known.join(" ") }
                        ),
                    )
                }),
        }
    }

    fn place(&self, host: u32, country: Option<&str>, field: &str) -> Result<usize, ScenarioError> {
        Ok(self.place_among(host, self.candidates(country, field)?))
    }

    /// A node drawn from `cands`, or from the whole graph when `cands` is empty.
    fn place_among(&self, host: u32, cands: &[usize]) -> usize {
        let mut rng = host_rng(self.seed, host, PURPOSE_PLACE);
        if cands.is_empty() {
            rng.random_range(0..self.graph.nodes.len())
        } else {
            cands[rng.random_range(0..cands.len())]
        }
    }

    /// The country table `relays.sample` places its relays by, if it places them by address.
    fn sample_geoip(
        &self,
        sm: &SampleRelays,
        valid_after: Option<&str>,
    ) -> Result<Option<onionlab_netdir::GeoIp>, ScenarioError> {
        if sm.place != Some(RelayPlacement::Address) {
            return Ok(None);
        }
        let field = "relays.sample.geoip";
        let spec = (sm.geoip.as_deref()).unwrap_or_else(|| data::nearest_geoip(valid_after));
        let input = data::resolve_file(spec, &self.s.source, data::GEOIP_ALIASES)
            .map_err(|m| self.err(field, m))?;
        let bytes = input
            .read()
            .map_err(|e| self.err(field, format!("{input}: {e}")))?;
        let text = onionlab_data::utf8_text(bytes)
            .map_err(|e| self.err(field, format!("{input}: the file {e}")))?;
        onionlab_netdir::GeoIp::parse(&text)
            .map(Some)
            .map_err(|e| self.err(field, format!("{input}: {e}")))
    }

    /// A host's access link: the group's rates, else the node's defaults.
    fn host_link(&self, l: &Link, node: usize, prefix: &str) -> Result<(u64, u64), ScenarioError> {
        let n = &self.graph.nodes[node];
        let pick = |dir: Option<Rate>, default: Option<u64>, key: &str| {
            dir.or(l.bandwidth).map(|r| r.0).or(default).ok_or_else(|| {
                self.err(
                    format!("{prefix}.{key}"),
                    format!(
                        "no bandwidth: the group sets none and graph node {} has no default; \
                         set `bandwidth` (or `{key}`)",
                        n.id
                    ),
                )
            })
        };
        // The group's own rates were checked with the scenario; a graph's were not.
        let in_range = |bps: u64, key: &str| {
            if (MIN_LINK_RATE.0..=MAX_LINK_RATE.0).contains(&bps) {
                Ok(bps)
            } else {
                Err(self.err(
                    format!("{prefix}.{key}"),
                    format!(
                        "graph node {} gives its hosts {}, outside {MIN_LINK_RATE} to \
                         {MAX_LINK_RATE}; set `bandwidth` (or `{key}`)",
                        n.id,
                        Rate(bps)
                    ),
                ))
            }
        };
        Ok((
            in_range(
                pick(l.bandwidth_up, n.bandwidth_up, "bandwidth_up")?,
                "bandwidth_up",
            )?,
            in_range(
                pick(l.bandwidth_down, n.bandwidth_down, "bandwidth_down")?,
                "bandwidth_down",
            )?,
        ))
    }

    fn host(
        &mut self,
        name: String,
        group: &str,
        l: &Link,
        prefix: &str,
    ) -> Result<PlannedHost, ScenarioError> {
        let h = self.take_host();
        let node = self.place(h, l.country.as_deref(), &format!("{prefix}.country"))?;
        let (up, down) = self.host_link(l, node, prefix)?;
        Ok(PlannedHost {
            name,
            group: group.to_string(),
            node,
            link_up_bps: up,
            link_down_bps: down,
        })
    }

    fn authorities(&mut self) -> Result<Vec<PlannedHost>, ScenarioError> {
        let l = self.s.authorities.link();
        (1..=self.s.authorities.0.count)
            .map(|i| self.host(format!("auth{i}"), "authority", &l, "authorities"))
            .collect()
    }

    fn servers(&mut self) -> Result<Vec<PlannedHost>, ScenarioError> {
        let mut out = Vec::new();
        for (gi, g) in self.s.servers.iter().enumerate() {
            for i in 1..=g.count {
                out.push(self.host(
                    format!("server-{}-{i}", g.name),
                    &g.name,
                    &g.link(),
                    &format!("servers[{gi}]"),
                )?);
            }
        }
        Ok(out)
    }

    fn processes(&mut self) -> Result<Vec<PlannedProcess>, ScenarioError> {
        let mut out = Vec::new();
        for (gi, g) in self.s.processes.iter().enumerate() {
            for i in 1..=g.count {
                let host = self.host(
                    format!("process-{}-{i}", g.name),
                    &g.name,
                    &g.link(),
                    &format!("processes[{gi}]"),
                )?;
                out.push(PlannedProcess {
                    host,
                    program: crate::validate::process_program(self.s, g),
                    args: g.args.clone(),
                    env: g.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                    start: g.start.0,
                    stall_limit: g.stall_limit.0,
                });
            }
        }
        Ok(out)
    }

    fn attacks(&mut self, relays: &[PlannedRelay]) -> Result<Vec<PlannedAttack>, ScenarioError> {
        let mut out = Vec::new();
        for (i, a) in self.s.attacks.iter().enumerate() {
            let p = format!("attacks[{i}]");
            let victim = relays
                .iter()
                .position(|r| r.name == a.victim)
                .ok_or_else(|| {
                    let some: Vec<&str> = relays.iter().take(5).map(|r| r.name.as_str()).collect();
                    self.err(
                        format!("{p}.victim"),
                        format!(
                            "no relay is named {} (relays are named like {})",
                            crate::validate::shown(&a.victim),
                            some.join(", ")
                        ),
                    )
                })?;
            let name = crate::validate::attacker_name(self.s, i);
            let host = self.host(name, "attack", &a.link(), &p)?;
            out.push(PlannedAttack {
                host,
                victim,
                start: a.start.0,
                end: a.end.0,
                every: a.every.0,
                circuits: a.circuits,
            });
        }
        Ok(out)
    }

    fn clients(&mut self) -> Result<Vec<PlannedClient>, ScenarioError> {
        let mut out = Vec::new();
        for (gi, g) in self.s.clients.iter().enumerate() {
            let workload = match &g.workload {
                Workload::Web(w) => ClientWorkload::Web {
                    size: w.size.0,
                    pause_min: w.pause.min.0,
                    pause_max: w.pause.max.0,
                    timeout: w.timeout.0,
                },
                Workload::Bulk(b) => ClientWorkload::Bulk {
                    size: b.size.0,
                    pause_min: b.pause.min.0,
                    pause_max: b.pause.max.0,
                    timeout: b.timeout.0,
                },
                Workload::Perf(p) => ClientWorkload::Perf {
                    size: p.size.0,
                    interval: p.interval.0,
                    timeout: p.effective_timeout().0,
                },
                Workload::Upload(u) => ClientWorkload::Upload {
                    size: u.size.0,
                    timeout: u.timeout.0,
                },
                Workload::Markov(m) => {
                    let field = format!("clients[{gi}].workload.markov");
                    ClientWorkload::Markov(onionlab_traffic::MarkovWorkload {
                        users: m.users,
                        timeout: m.timeout.0,
                        stream_model: self.markov_model(
                            &format!("{field}.stream_model"),
                            &m.stream_model,
                            onionlab_traffic::ModelKind::Stream,
                        )?,
                        packet_model: self.markov_model(
                            &format!("{field}.packet_model"),
                            &m.packet_model,
                            onionlab_traffic::ModelKind::Packet,
                        )?,
                    })
                }
            };
            for i in 1..=g.count {
                let host = self.host(
                    format!("client-{}-{i}", g.name),
                    &g.name,
                    &g.link(),
                    &format!("clients[{gi}]"),
                )?;
                let h = self.next_host - 1;
                let mut rng = host_rng(self.seed, h, PURPOSE_START);
                let start = rng.random_range(g.start.min.0..=g.start.max.0);
                out.push(PlannedClient {
                    host,
                    workload: workload.clone(),
                    server_group: g.servers.clone(),
                    start,
                    use_entry_guards: g.use_entry_guards,
                    max_circuit_dirtiness: g.max_circuit_dirtiness.map(|d| d.0),
                });
            }
        }
        Ok(out)
    }

    /// Reads and checks a traffic model file; a model named by several groups is read once.
    fn markov_model(
        &mut self,
        field: &str,
        spec: &str,
        kind: onionlab_traffic::ModelKind,
    ) -> Result<std::sync::Arc<onionlab_traffic::MarkovModel>, ScenarioError> {
        let key = (spec.to_string(), kind);
        if let Some(m) = self.models.get(&key) {
            return Ok(m.clone());
        }
        let aliases = match kind {
            onionlab_traffic::ModelKind::Stream => data::STREAM_MODEL_ALIASES,
            onionlab_traffic::ModelKind::Packet => data::PACKET_MODEL_ALIASES,
        };
        let input =
            data::resolve_file(spec, &self.s.source, aliases).map_err(|m| self.err(field, m))?;
        let bytes = input
            .read()
            .map_err(|m| self.err(field, format!("{input}: {m}")))?;
        let text = onionlab_data::utf8_text(bytes)
            .map_err(|e| self.err(field, format!("{input}: the file {e} (expected JSON)")))?;
        let model = onionlab_traffic::MarkovModel::parse(&text, kind)
            .map_err(|m| self.err(field, format!("{input}: {m}")))?;
        let model = std::sync::Arc::new(model);
        self.models.insert(key, model.clone());
        Ok(model)
    }

    fn relays(&mut self) -> Result<Vec<PlannedRelay>, ScenarioError> {
        match &self.s.relays {
            RelaysSection::Generate(g) => self.generate(g),
            RelaysSection::List(l) => self.list(l),
            RelaysSection::Sample(sm) => self.sample(sm),
        }
    }

    fn generate(&mut self, g: &GenerateRelays) -> Result<Vec<PlannedRelay>, ScenarioError> {
        let rows = match &g.bandwidth {
            BandwidthModel::FromFile(f) => {
                let field = "relays.generate.bandwidth.from_file";
                let input = data::resolve_file(f, &self.s.source, data::RELAYS_ALIASES)
                    .map_err(|m| self.err(field, m))?;
                Some(data::read_relays_csv(&input).map_err(|m| self.err(field, m))?)
            }
            _ => None,
        };
        if let Some(c) = &g.country {
            self.candidates(Some(c), "relays.generate.country")?;
        }
        let exit_policy = match &g.exit_policy {
            Some(p) => {
                ExitPolicy::parse(p).map_err(|m| self.err("relays.generate.exit_policy", m))?
            }
            None => ExitPolicy::accept_all(),
        };
        let base = RelayFlags::FAST
            .union(RelayFlags::STABLE)
            .union(RelayFlags::RUNNING)
            .union(RelayFlags::VALID)
            .union(RelayFlags::V2DIR);
        let kinds = [
            ("guard", g.guard, true, false),
            ("exit", g.exit, false, true),
            ("guardexit", g.guard_exit, true, true),
            ("middle", g.middle, false, false),
        ];
        let mut addrs = Addresses::new(&HashSet::new());
        let mut out = Vec::new();
        for (prefix, count, guard, exit) in kinds {
            let pool: Option<Vec<&CsvRelay>> = rows.as_ref().map(|rows| {
                let same: Vec<&CsvRelay> = rows
                    .iter()
                    .filter(|r| r.guard == guard && r.exit == exit)
                    .collect();
                if same.is_empty() {
                    rows.iter().collect()
                } else {
                    same
                }
            });
            for i in 1..=count {
                let h = self.take_host();
                let mut rng = host_rng(self.seed, h, PURPOSE_RELAY);
                let mut country = g.country.clone();
                let factor = g.burst_factor.unwrap_or(DEFAULT_BURST_FACTOR);
                let (rate, burst, mut up, mut down) = match &g.bandwidth {
                    BandwidthModel::FromFile(_) => {
                        let Some(row) = pool
                            .as_ref()
                            .filter(|p| !p.is_empty())
                            .map(|p| p[rng.random_range(0..p.len())])
                        else {
                            return Err(self.err(
                                "relays.generate.bandwidth.from_file",
                                "the relays file has no rows",
                            ));
                        };
                        // A relays file is data, not a scenario: its rows are brought into
                        // Tor's range instead of being refused one by one.
                        let rate = if row.rate_kib == 0 {
                            TOR_DEFAULT_RATE
                        } else {
                            relay_rate_in_range(row.rate_kib.saturating_mul(1024))
                        };
                        let burst = match g.burst_factor {
                            Some(f) => burst_of(rate, f),
                            None if row.rate_kib == 0 => TOR_DEFAULT_RATE,
                            None => row
                                .burst_kib
                                .saturating_mul(1024)
                                .clamp(rate, MAX_RELAY_RATE_BYTES),
                        };
                        if country.is_none() {
                            country = row
                                .country
                                .clone()
                                .filter(|c| self.countries.contains_key(c));
                        }
                        let link = |kib: u64| {
                            kib.saturating_mul(8 * 1024)
                                .clamp(MIN_FILE_LINK_BPS, MAX_LINK_RATE.0)
                        };
                        (rate, burst, link(row.link_up_kib), link(row.link_down_kib))
                    }
                    BandwidthModel::Lognormal(l) => {
                        let z = standard_normal(&mut rng);
                        let rate = (l.median.bytes_per_sec() as f64 * (l.sigma * z).exp())
                            .clamp(MIN_RELAY_RATE_BYTES as f64, TOR_DEFAULT_RATE as f64)
                            as u64;
                        let link = derived_link(rate);
                        (rate, burst_of(rate, factor), link, link)
                    }
                    BandwidthModel::Fixed(r) => {
                        let rate = r.bytes_per_sec();
                        let link = derived_link(rate);
                        (rate, burst_of(rate, factor), link, link)
                    }
                };
                if let Some(l) = g.link {
                    up = l.0;
                    down = l.0;
                }
                let node = self.place(h, country.as_deref(), "relays.generate.country")?;
                let mut flags = base;
                if guard {
                    flags.insert(RelayFlags::GUARD);
                }
                if exit {
                    flags.insert(RelayFlags::EXIT);
                }
                out.push(PlannedRelay {
                    name: format!("{prefix}{i}"),
                    node,
                    link_up_bps: up,
                    link_down_bps: down,
                    flags,
                    consensus_weight: weight_of(rate, up),
                    bandwidth_rate: rate,
                    bandwidth_burst: burst,
                    relay_bandwidth_rate: None,
                    relay_bandwidth_burst: None,
                    conn_limit: None,
                    exit_policy: if exit {
                        exit_policy.clone()
                    } else {
                        ExitPolicy::reject_all()
                    },
                    family: None,
                    address: addrs.next().ok_or_else(|| {
                        self.err(
                            "relays.generate",
                            "too many relays for distinct /16 addresses",
                        )
                    })?,
                });
            }
        }
        Ok(out)
    }

    fn list(&mut self, list: &[RelaySpec]) -> Result<Vec<PlannedRelay>, ScenarioError> {
        let explicit: HashSet<[u8; 2]> = list
            .iter()
            .filter_map(|r| r.address)
            .map(|a| [a.octets()[0], a.octets()[1]])
            .collect();
        let mut addrs = Addresses::new(&explicit);
        let mut families: HashMap<&str, u32> = HashMap::new();
        let mut out = Vec::new();
        for (i, r) in list.iter().enumerate() {
            let p = format!("relays.list[{i}]");
            let policy = match &r.exit_policy {
                Some(pol) => {
                    ExitPolicy::parse(pol).map_err(|m| self.err(format!("{p}.exit_policy"), m))?
                }
                None if r.flags.contains(&FlagName::Exit) => ExitPolicy::accept_all(),
                None => ExitPolicy::reject_all(),
            };
            let mut flags = RelayFlags::RUNNING.union(RelayFlags::VALID);
            for f in &r.flags {
                flags.insert(match f {
                    FlagName::Guard => RelayFlags::GUARD,
                    FlagName::Exit => RelayFlags::EXIT,
                    FlagName::Fast => RelayFlags::FAST,
                    FlagName::Stable => RelayFlags::STABLE,
                    FlagName::Running => RelayFlags::RUNNING,
                    FlagName::Valid => RelayFlags::VALID,
                });
            }
            let family = r.family.as_deref().map(|f| {
                let next = families.len() as u32 + 1;
                *families.entry(f).or_insert(next)
            });
            let rate = r.bandwidth_rate.bytes_per_sec();
            let burst = r
                .bandwidth_burst
                .map(|b| b.bytes_per_sec())
                .unwrap_or_else(|| burst_of(rate, DEFAULT_BURST_FACTOR));
            let relay_rate = r.relay_bandwidth_rate.map(|x| x.bytes_per_sec());
            let relay_burst = r
                .relay_bandwidth_burst
                .map(|x| x.bytes_per_sec())
                .or(relay_rate);
            let effective = relay_rate.map_or(rate, |rr| rr.min(rate));
            let derived = derived_link(effective);
            let up = r.link_up.or(r.link).map_or(derived, |x| x.0);
            let down = r.link_down.or(r.link).map_or(derived, |x| x.0);
            for k in 1..=r.count {
                let h = self.take_host();
                let node = self.place(h, r.country.as_deref(), &format!("{p}.country"))?;
                let address = match r.address {
                    Some(a) => Ipv4Addr::from(u32::from(a).wrapping_add(k - 1)),
                    None => addrs.next().ok_or_else(|| {
                        self.err(
                            format!("{p}.address"),
                            "too many relays for distinct /16 addresses",
                        )
                    })?,
                };
                out.push(PlannedRelay {
                    name: if r.count == 1 {
                        r.name.clone()
                    } else {
                        format!("{}{k}", r.name)
                    },
                    node,
                    link_up_bps: up,
                    link_down_bps: down,
                    flags,
                    consensus_weight: r
                        .consensus_weight
                        .unwrap_or_else(|| weight_of(effective, up)),
                    bandwidth_rate: rate,
                    bandwidth_burst: burst,
                    relay_bandwidth_rate: relay_rate,
                    relay_bandwidth_burst: relay_burst,
                    conn_limit: r.conn_limit,
                    exit_policy: policy.clone(),
                    family,
                    address,
                });
            }
        }
        Ok(out)
    }

    fn sample(&mut self, sm: &SampleRelays) -> Result<Vec<PlannedRelay>, ScenarioError> {
        let field = "relays.sample.consensus";
        let input = data::resolve_file(&sm.consensus, &self.s.source, data::CONSENSUS_ALIASES)
            .map_err(|m| self.err(field, m))?;
        let mut consensus = Consensus::read(&input)
            .map_err(|e| self.err(field, format!("cannot read consensus: {e}")))?;
        // Microdescriptor consensuses carry no exit policies; the Exit flag promises at least
        // two of ports 80, 443 and 6667.
        if let Ok(p) = ExitPolicy::parse("accept 80,443") {
            consensus.assume_exit_policies(&p);
        }
        let available = consensus.relays.len();
        if sm.count as usize > available {
            return Err(self.err(
                "relays.sample.count",
                format!(
                    "the consensus lists only {available} relays, cannot sample {}",
                    sm.count
                ),
            ));
        }
        let geoip = self.sample_geoip(sm, consensus.valid_after.as_deref())?;
        let mut rng = host_rng(self.seed, u32::MAX, PURPOSE_SAMPLE);
        let sampled = consensus.sample(sm.count as usize, &mut rng);
        if let Some(c) = &sm.country {
            self.candidates(Some(c), "relays.sample.country")?;
        }
        let mut seen: HashMap<String, u32> = HashMap::new();
        for r in &sampled.relays {
            *seen.entry(r.nickname.clone()).or_default() += 1;
        }
        let mut used: HashMap<String, u32> = HashMap::new();
        // Every name given so far, and every nickname that stands once and keeps its name.
        let mut taken: HashSet<String> = (seen.iter())
            .filter(|(_, n)| **n == 1)
            .map(|(name, _)| name.clone())
            .collect();
        let mut out = Vec::new();
        let first_host = self.next_host;
        for r in sampled.relays {
            let h = self.take_host();
            let node = match &geoip {
                Some(table) => {
                    let cands = (table.country(r.address))
                        .and_then(|c| self.countries.get(c))
                        .map_or(&[][..], Vec::as_slice);
                    if cands.is_empty() {
                        self.placed_anywhere += 1;
                    }
                    self.place_among(h, cands)
                }
                None => self.place(h, sm.country.as_deref(), "relays.sample.country")?,
            };
            let rate = sm
                .bandwidth_rate
                .map(|x| x.bytes_per_sec())
                .unwrap_or_else(|| {
                    let per = sm.rate_per_weight.unwrap_or(DEFAULT_RATE_PER_WEIGHT);
                    relay_rate_in_range((r.bandwidth as f64 * per).round() as u64)
                });
            let limit = SampledLimit::of(sm);
            let link = limit.link(rate);
            let name = if seen.get(&r.nickname).copied().unwrap_or(0) > 1 {
                // Numbered within tor's 19 characters; a number that makes the name of
                // another relay (a shorter stem plus a longer number, or a nickname that
                // ends in digits) is skipped, so every relay's name stays its own.
                let k = used.entry(r.nickname.clone()).or_default();
                loop {
                    *k += 1;
                    let suffix = k.to_string();
                    let keep = 19usize.saturating_sub(suffix.len());
                    let stem: String = r.nickname.chars().take(keep).collect();
                    let candidate = format!("{stem}{suffix}");
                    if !taken.contains(&candidate) {
                        break candidate;
                    }
                }
            } else {
                r.nickname.clone()
            };
            taken.insert(name.clone());
            out.push(PlannedRelay {
                name,
                node,
                link_up_bps: link,
                link_down_bps: link,
                flags: r.flags,
                consensus_weight: r.bandwidth,
                bandwidth_rate: limit.bucket_rate(rate),
                bandwidth_burst: limit.bucket_burst(rate),
                relay_bandwidth_rate: None,
                relay_bandwidth_burst: None,
                conn_limit: None,
                exit_policy: r.exit_policy,
                family: r.family,
                address: r.address,
            });
        }
        if let Some(sigma) = sm.rate_spread.filter(|s| *s > 0.0) {
            self.spread_rates(&mut out, first_host, sigma, sm);
        }
        Ok(out)
    }

    /// `relays.sample.rate_spread`: multiplies each relay's rate by e^(σ·z), z a standard
    /// normal draw from the relay's own stream, then rescales every rate by one factor so
    /// that the network's total stays what it was; bursts and derived links follow the rates.
    fn spread_rates(
        &self,
        relays: &mut [PlannedRelay],
        first_host: u32,
        sigma: f64,
        sm: &SampleRelays,
    ) {
        let limit = SampledLimit::of(sm);
        let rates: Vec<u64> = relays.iter().map(|r| limit.rate_of(r)).collect();
        let before: f64 = rates.iter().map(|&r| r as f64).sum();
        let spread: Vec<f64> = (rates.iter().enumerate())
            .map(|(i, &rate)| {
                let mut rng = host_rng(self.seed, first_host + i as u32, PURPOSE_SPREAD);
                rate as f64 * (sigma * standard_normal(&mut rng)).exp()
            })
            .collect();
        let scale = before / spread.iter().sum::<f64>();
        for (r, x) in relays.iter_mut().zip(spread) {
            let rate = relay_rate_in_range((x * scale).round() as u64);
            r.bandwidth_rate = limit.bucket_rate(rate);
            r.bandwidth_burst = limit.bucket_burst(rate);
            r.link_up_bps = limit.link(rate);
            r.link_down_bps = r.link_up_bps;
        }
    }
}

/// How `relays.sample.limit` (with `link` and `burst_factor`) turns a sampled relay's rate
/// into its token buckets and its links.
#[derive(Clone, Copy)]
struct SampledLimit {
    limit: RelayLimit,
    link: Option<u64>,
    burst_factor: f64,
}

impl SampledLimit {
    fn of(sm: &SampleRelays) -> Self {
        SampledLimit {
            limit: sm.limit.unwrap_or(RelayLimit::Bucket),
            link: sm.link.map(|l| l.0),
            burst_factor: sm.burst_factor.unwrap_or(DEFAULT_BURST_FACTOR),
        }
    }

    /// Both links, in bits per second: the rate itself when the host limits the relay.
    fn link(self, rate: u64) -> u64 {
        match self.limit {
            RelayLimit::Bucket => self.link.unwrap_or_else(|| derived_link(rate)),
            RelayLimit::Link => rate.saturating_mul(8),
        }
    }

    fn bucket_rate(self, rate: u64) -> u64 {
        match self.limit {
            RelayLimit::Bucket => rate,
            RelayLimit::Link => TOR_DEFAULT_RATE,
        }
    }

    fn bucket_burst(self, rate: u64) -> u64 {
        match self.limit {
            RelayLimit::Bucket => burst_of(rate, self.burst_factor),
            RelayLimit::Link => TOR_DEFAULT_RATE,
        }
    }

    /// The rate a planned relay was given, wherever it was put.
    fn rate_of(self, r: &PlannedRelay) -> u64 {
        match self.limit {
            RelayLimit::Bucket => r.bandwidth_rate,
            RelayLimit::Link => r.link_up_bps / 8,
        }
    }
}

/// A relay rate from data (a relays file, a consensus weight) brought into Tor's range.
fn relay_rate_in_range(bytes: u64) -> u64 {
    bytes.clamp(MIN_RELAY_RATE_BYTES, MAX_RELAY_RATE_BYTES)
}

/// `BandwidthBurst` for a rate and factor: at least the rate, at most Tor's largest burst.
fn burst_of(rate: u64, factor: f64) -> u64 {
    scale(rate, factor).clamp(rate, MAX_RELAY_RATE_BYTES.max(rate))
}

fn scale(bytes: u64, factor: f64) -> u64 {
    let v = bytes as f64 * factor;
    if v >= u64::MAX as f64 {
        u64::MAX
    } else {
        v.round() as u64
    }
}

/// A relay's link when nothing says otherwise: twice its rate, so that the configured rate,
/// not the link, limits it, but never below [`MIN_DERIVED_LINK_BPS`].
fn derived_link(rate_bytes: u64) -> u64 {
    rate_bytes.saturating_mul(16).max(MIN_DERIVED_LINK_BPS)
}

/// What a bandwidth authority would measure: the lesser of the rate limit and the upload
/// link, in kB/s, at least 1.
fn weight_of(rate_bytes: u64, link_up_bps: u64) -> u64 {
    (rate_bytes.min(link_up_bps / 8) / 1000).max(1)
}

/// Box–Muller; one normal deviate per call keeps the draws per relay fixed.
fn standard_normal(rng: &mut impl RngExt) -> f64 {
    let u1: f64 = rng.random::<f64>().max(f64::MIN_POSITIVE);
    let u2: f64 = rng.random::<f64>();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// Hands out addresses in distinct /16 networks, skipping reserved first octets and /16s the
/// scenario already uses, because Tor never puts two relays of one /16 in a circuit.
struct Addresses {
    next: u32,
    taken: HashSet<[u8; 2]>,
}

impl Addresses {
    fn new(taken: &HashSet<[u8; 2]>) -> Self {
        Addresses {
            next: 0,
            taken: taken.clone(),
        }
    }

    fn next(&mut self) -> Option<Ipv4Addr> {
        loop {
            // Start at 11.0/16: below are 0/8 and 10/8, neither usable for public relays.
            let n = self.next;
            self.next = self.next.checked_add(1)?;
            let a = 11 + (n >> 8);
            if a > 223 {
                return None;
            }
            let a = a as u8;
            let b = (n & 0xff) as u8;
            if matches!(a, 100 | 127 | 169 | 172 | 192 | 198) || self.taken.contains(&[a, b]) {
                continue;
            }
            return Some(Ipv4Addr::new(a, b, 0, 1));
        }
    }
}

/// The relay source's field, for errors about the relays as a whole.
fn relays_field(s: &Scenario) -> &'static str {
    match s.relays {
        RelaysSection::Generate(_) => "relays.generate",
        RelaysSection::List(_) => "relays.list",
        RelaysSection::Sample(_) => "relays.sample",
    }
}

/// Whether clients can build any circuit at all over `relays`, judged as the run will judge
/// them: the consensus the run builds from the plan, and its position weights.
///
/// A relay may serve as guard, middle or exit only with a positive weight for that position
/// (which needs the Fast flag, the position's own flag and a positive consensus weight), and as
/// an exit only when its policy accepts the model's port. Circuits need three distinct relays,
/// one per position; by Hall's theorem such a choice exists exactly when every position, every
/// two positions and all three have at least 1, 2 and 3 candidates between them. Conflicts by
/// /16 and family are not considered: they make some paths impossible, which the run survives,
/// but rarely all of them. A sampled consensus can fail here where the scenario could not tell
/// (a sample without guards, or with every weight zero), so this runs after the relays exist.
fn check_paths(s: &Scenario, relays: &[PlannedRelay]) -> Result<(), ScenarioError> {
    let consensus = Consensus::from_relays(
        relays
            .iter()
            .enumerate()
            .map(|(i, r)| Relay {
                nickname: r.name.clone(),
                fingerprint: format!("{:040X}", i + 1),
                address: r.address,
                or_port: 9001,
                flags: r.flags.union(RelayFlags::RUNNING).union(RelayFlags::VALID),
                bandwidth: r.consensus_weight,
                unmeasured: false,
                exit_policy: r.exit_policy.clone(),
                family: r.family,
            })
            .collect(),
    );
    let selector = PathSelector::new(&consensus);
    let roles: Vec<u8> = relays
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let can = |pos, role| {
                if selector.weight(i, pos) > 0.0 {
                    role
                } else {
                    0
                }
            };
            let exit = if r.exit_policy.allows_port(MODEL_PORT) {
                can(Position::Exit, EXIT)
            } else {
                0
            };
            can(Position::Guard, GUARD) | can(Position::Middle, MIDDLE) | exit
        })
        .collect();
    let count = |mask: u8| roles.iter().filter(|&&r| r & mask != 0).count();
    let (guards, middles, exits) = (count(GUARD), count(MIDDLE), count(EXIT));
    let Some(problem) = path_problem(&roles) else {
        return Ok(());
    };
    let what = match &s.relays {
        RelaysSection::Sample(sm) => format!("the {} relays sampled", sm.count),
        _ => format!("the {} relays", relays.len()),
    };
    let hint = match s.relays {
        RelaysSection::Sample(_) => "; sample more relays or use another consensus",
        _ => "",
    };
    let missing = match problem {
        PathProblem::No(GUARD) => {
            "a guard (Guard and Fast flags and a positive weight)".to_string()
        }
        PathProblem::No(EXIT) => format!(
            "an exit (Exit and Fast flags, a policy accepting port {MODEL_PORT}, the only port \
             the model's clients use, and a positive weight)"
        ),
        PathProblem::No(_) => "a middle (Fast flag and a positive weight)".to_string(),
        PathProblem::TooFewDistinct => {
            return Err(ScenarioError::new(
                &s.source,
                relays_field(s),
                format!(
                    "clients exist but {what} cannot fill a circuit's three positions with three \
                     different relays (usable as guard: {guards}, as middle: {middles}, as exit: \
                     {exits}){hint}"
                ),
            ))
        }
    };
    Err(ScenarioError::new(
        &s.source,
        relays_field(s),
        format!(
            "clients exist but none of {what} can be {missing}, so no circuit could be built{hint}"
        ),
    ))
}

/// Relay roles as bits, for [`path_problem`].
const GUARD: u8 = 1;
const MIDDLE: u8 = 2;
const EXIT: u8 = 4;

#[derive(Debug, PartialEq, Eq)]
enum PathProblem {
    /// No relay can take this position (one of [`GUARD`], [`MIDDLE`], [`EXIT`]).
    No(u8),
    /// Each position has candidates, but not three different relays for the three.
    TooFewDistinct,
}

/// Whether three distinct relays can take the three positions, given each relay's roles.
///
/// By Hall's theorem a choice of distinct relays exists exactly when every position, every two
/// positions and all three have at least 1, 2 and 3 candidates between them.
fn path_problem(roles: &[u8]) -> Option<PathProblem> {
    let count = |mask: u8| roles.iter().filter(|&&r| r & mask != 0).count();
    for position in [GUARD, EXIT, MIDDLE] {
        if count(position) == 0 {
            return Some(PathProblem::No(position));
        }
    }
    let distinct = [
        GUARD | MIDDLE,
        GUARD | EXIT,
        MIDDLE | EXIT,
        GUARD | MIDDLE | EXIT,
    ]
    .iter()
    .all(|&mask| count(mask) >= mask.count_ones() as usize);
    (!distinct).then_some(PathProblem::TooFewDistinct)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_need_three_distinct_relays() {
        const ALL: u8 = GUARD | MIDDLE | EXIT;
        assert_eq!(path_problem(&[GUARD, MIDDLE, EXIT]), None);
        assert_eq!(path_problem(&[ALL, ALL, ALL]), None);
        assert_eq!(path_problem(&[GUARD | MIDDLE, MIDDLE, EXIT | MIDDLE]), None);
        assert_eq!(path_problem(&[]), Some(PathProblem::No(GUARD)));
        assert_eq!(path_problem(&[MIDDLE, EXIT]), Some(PathProblem::No(GUARD)));
        assert_eq!(path_problem(&[GUARD, MIDDLE]), Some(PathProblem::No(EXIT)));
        assert_eq!(path_problem(&[GUARD, EXIT]), Some(PathProblem::No(MIDDLE)));
        // Every position has a candidate, but fewer than three relays in all.
        assert_eq!(path_problem(&[ALL, ALL]), Some(PathProblem::TooFewDistinct));
        // The only guard is also the only exit.
        assert_eq!(
            path_problem(&[GUARD | EXIT, MIDDLE, MIDDLE]),
            Some(PathProblem::TooFewDistinct)
        );
        // The only guard is the only middle: the exit cannot be in the middle too.
        assert_eq!(
            path_problem(&[GUARD | MIDDLE, EXIT, 0]),
            Some(PathProblem::TooFewDistinct)
        );
    }

    #[test]
    fn data_rates_are_brought_into_tors_range() {
        assert_eq!(relay_rate_in_range(0), MIN_RELAY_RATE_BYTES);
        assert_eq!(relay_rate_in_range(u64::MAX), MAX_RELAY_RATE_BYTES);
        assert_eq!(burst_of(1 << 30, 1e9), MAX_RELAY_RATE_BYTES);
        assert_eq!(burst_of(1000, 1.5), 1500);
    }
}
