//! The scenario file's sections as typed values.
//!
//! Every struct refuses unknown keys: a misspelt key that is silently ignored leaves a default
//! in place and yields a run that looks valid but measures something else. Defaults live here,
//! next to the keys, so the book's scenario reference (docs/src/reference/) and the code can be
//! checked against each other (`crates/cli/tests/docs.rs` does).

use std::fmt;
use std::net::Ipv4Addr;
use std::path::PathBuf;

use onionlab_torcore::TorParams;
use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub use crate::cpu::{CpuSection, CpuSpec, MachineSpec};
use crate::units::{Duration, Rate, Size};

/// A whole scenario, as written (after defaults), ready to [`crate::resolve`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Defaults to the file's stem.
    #[serde(default)]
    pub name: String,
    /// The file the scenario came from; relative paths inside it are relative to its folder.
    #[serde(skip_deserializing, default)]
    pub source: PathBuf,
    /// When the run stops and how it is seeded.
    pub run: RunSection,
    /// The Internet model the hosts sit on (one switch by default).
    #[serde(default)]
    pub network: NetworkSection,
    /// Tor's parameters, the same for every relay and client (the live network's by default).
    #[serde(default)]
    pub tor: TorParams,
    /// The directory authorities (three by default).
    #[serde(default)]
    pub authorities: Authorities,
    /// Where the relays come from; none for a scenario of managed processes alone.
    #[serde(default)]
    pub relays: RelaysSection,
    /// Server groups: the destinations that exits open streams to.
    #[serde(default)]
    pub servers: Vec<ServerGroup>,
    /// Client groups: each host runs its own Tor client and workload.
    #[serde(default)]
    pub clients: Vec<ClientGroup>,
    /// Attackers (the socket exhaustion attack), added after every other host.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attacks: Vec<AttackSpec>,
    /// What reports show beyond the defaults.
    #[serde(default, skip_serializing_if = "ReportSection::is_empty")]
    pub report: ReportSection,
    /// The relays' CPU model (`none` by default).
    #[serde(default, skip_serializing_if = "CpuSection::is_none")]
    pub cpu: CpuSection,
    /// Real programs in simulated time, each on a host of its own (managed processes), placed
    /// after every other host.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub processes: Vec<ProcessGroup>,
}

/// One `processes` entry: a group of hosts, each running the same real Linux program in
/// simulated time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessGroup {
    /// The group's name; its hosts are `process-<name>-1`, `process-<name>-2`, and so on.
    pub name: String,
    /// Hosts in the group, each running its own instance of the program (1 to 10000).
    #[serde(default = "one")]
    pub count: u32,
    /// The program: a path, relative to the scenario file's folder unless absolute, to a
    /// dynamically linked x86-64 Linux executable.
    pub path: String,
    /// Its arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Environment variables it gets, besides `PATH` and `HOME` (its working directory).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub env: std::collections::BTreeMap<String, String>,
    /// When it starts, in simulated time.
    #[serde(default)]
    pub start: Duration,
    /// Wall-clock time the program may run without making a system call before onionlab
    /// stops it as stuck (1 s to 1 h; 60 s by default).
    #[serde(default = "default_stall_limit")]
    pub stall_limit: Duration,
    /// Access link rate of each host, both directions; `None` takes the graph node's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth: Option<Rate>,
    /// Upstream access rate of each host, overriding `bandwidth`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth_up: Option<Rate>,
    /// Downstream access rate of each host, overriding `bandwidth`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth_down: Option<Rate>,
    /// Two-letter country code: places the hosts on that country's graph nodes; `None`: any node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub country: Option<String>,
}

fn default_stall_limit() -> Duration {
    Duration(60 * 1_000_000_000)
}

/// `report:` — relays whose throughput and sockets the report plots over time (attack
/// victims are plotted without being named here).
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportSection {
    /// Nicknames of the relays to plot, as in `relays.csv`.
    #[serde(default)]
    pub relays: Vec<String>,
}

impl ReportSection {
    /// True when the section names no relay, so a recorded scenario leaves it out.
    pub fn is_empty(&self) -> bool {
        self.relays.is_empty()
    }
}

/// The kinds of attack a scenario can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttackKind {
    /// Build circuits through a victim relay until its sockets run out: the socket exhaustion
    /// attack of Geddes, Jansen and Hopper, "IMUX: Managing Tor Connections from Two to
    /// Infinity, and Beyond", WPES 2014.
    SocketExhaustion,
}

/// One attacker: from `start` to `end`, `circuits` circuits through `victim` every `every`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttackSpec {
    /// Host name of the attacker (default `attacker`, numbered when there are several).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Which attack the attacker runs.
    pub kind: AttackKind,
    /// The victim relay's name (as in relays.csv).
    pub victim: String,
    /// When the attack begins, in simulated time.
    pub start: Duration,
    /// When the attack ends and the attacker closes all its connections.
    pub end: Duration,
    /// Circuits built through the victim each period (1 to 100000).
    pub circuits: u32,
    /// The period at which `circuits` circuits are built (100 ms to 30 days).
    pub every: Duration,
    /// The attacker's access link rate, both directions; `None` takes the graph node's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth: Option<Rate>,
    /// The attacker's upstream access rate, overriding `bandwidth`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth_up: Option<Rate>,
    /// The attacker's downstream access rate, overriding `bandwidth`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth_down: Option<Rate>,
    /// Two-letter country code of the graph nodes to place the attacker on; `None`: any node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub country: Option<String>,
}

/// `run:` — how long the simulation runs and how it is seeded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunSection {
    /// Seeds every random choice: placement, relay draws, consensus sampling, client starts and
    /// the simulation itself.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Simulated time at which the run ends (at most 30 days).
    pub stop_time: Duration,
    /// Downloads that start before this time are left out of the results.
    #[serde(default)]
    pub bootstrap: Duration,
    /// Worker threads; `None` leaves the choice to the command line or the machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<u32>,
}

fn default_seed() -> u64 {
    1
}

/// `network:` — the Internet model the hosts sit on and how packets travel through it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkSection {
    /// `builtin`, `internet-geo`, `internet-2018`, `data:<path of a shipped file>` or a file path.
    #[serde(default = "default_graph")]
    pub graph: String,
    /// Only meaningful with `graph: builtin`; `None` there means all defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub builtin: Option<BuiltinNetwork>,
    /// The narrowest the simulation's parallel rounds may be; `0s`, the default, sets no floor.
    /// A floor above the network's latencies holds packets until their round ends.
    #[serde(default)]
    pub lookahead_floor: Duration,
    /// How much time's worth of traffic, at the link's rate, a host's downstream queue holds
    /// before it drops packets.
    #[serde(default = "default_down_queue")]
    pub down_queue: Duration,
    /// Segmentation offload (TSO/GSO and GRO, as Linux hosts do by default): a TCP socket's
    /// back-to-back data segments travel as one packet. On by default: emulations of real tor
    /// with the kernel's offloads on cannot be told apart from emulations with them off (the
    /// book's fidelity page, `docs/src/fidelity.md`); `false` sends every segment as a packet of
    /// its own, as results made before it became the default did.
    #[serde(default = "default_segment_offload")]
    pub segment_offload: bool,
    /// Whether the graph's own packet loss (its edges' and nodes' `packet_loss`) applies.
    /// `false` keeps the graph's latencies, jitter and bandwidths and drops its loss, for
    /// graphs whose loss is a placeholder rather than a measurement: every edge of
    /// `internet-2018` was set to 0.5% in one edit, without a measurement, and the graph
    /// Shadow's network generator uses today carries no loss between its points of presence.
    /// `impairments` still apply; so does the builtin network's `loss` only while this is
    /// `true`.
    #[serde(default = "default_graph_loss")]
    pub graph_loss: bool,
    /// Loss added to every edge of the graph, on top of the edge's own (the two combine as
    /// independent losses): a uniform background loss for asking how much a little random
    /// loss on every path changes a result. On `internet-geo`, whose paths are each one edge,
    /// it is the loss of every path between two hosts of different countries, and of every
    /// path within a country.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub edge_loss: f64,
    /// Linux's quick-ACK and ping-pong modes in every host's TCP (on by default, as in
    /// Linux): `false` holds every ACK of a small segment for the delayed-ACK timeout.
    #[serde(default = "default_tcp_quickack")]
    pub tcp_quickack: bool,
    /// Extra loss between chosen hosts (one link of a circuit), on top of the paths' own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub impairments: Vec<ImpairmentSpec>,
}

/// `{ between: [A, B], loss: p }`: packets between any host of A and any host of B, both
/// ways, are lost with probability `p` on top of their path's loss. A and B each name a relay
/// (its nickname), a server or client group, or `authorities`; `relay:`, `servers:` and
/// `clients:` in front of a name say which is meant where a name is taken twice.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImpairmentSpec {
    /// The two sides: each a relay's nickname, a server or client group's name, or
    /// `authorities`, optionally prefixed with `relay:`, `servers:` or `clients:`.
    pub between: Vec<String>,
    /// Probability, from 0 to below 1, that a packet between the two sides is lost.
    pub loss: f64,
}

fn default_graph() -> String {
    "builtin".into()
}

fn default_segment_offload() -> bool {
    true
}

fn default_graph_loss() -> bool {
    true
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

fn default_tcp_quickack() -> bool {
    true
}

fn default_down_queue() -> Duration {
    Duration::from_millis(100)
}

impl Default for NetworkSection {
    fn default() -> Self {
        NetworkSection {
            graph: default_graph(),
            builtin: None,
            lookahead_floor: Duration(0),
            down_queue: default_down_queue(),
            segment_offload: default_segment_offload(),
            graph_loss: default_graph_loss(),
            edge_loss: 0.0,
            tcp_quickack: default_tcp_quickack(),
            impairments: Vec::new(),
        }
    }
}

/// The single-switch network: every host on one node, one latency between any two hosts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BuiltinNetwork {
    /// One-way latency between any two hosts (1 µs to 1 h).
    #[serde(default = "default_latency")]
    pub latency: Duration,
    /// Probability, from 0 to below 1, that a packet is lost between two hosts.
    #[serde(default)]
    pub loss: f64,
    /// Default access link of every host on the switch, both directions.
    #[serde(default = "default_switch_bandwidth")]
    pub bandwidth: Rate,
}

fn default_latency() -> Duration {
    Duration::from_millis(25)
}

fn default_switch_bandwidth() -> Rate {
    Rate(1_000_000_000)
}

impl Default for BuiltinNetwork {
    fn default() -> Self {
        BuiltinNetwork {
            latency: default_latency(),
            loss: 0.0,
            bandwidth: default_switch_bandwidth(),
        }
    }
}

/// How a group's hosts attach to the graph; shared by authorities, servers and clients.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Link {
    /// Access link rate of each host, both directions; `None` takes the graph node's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth: Option<Rate>,
    /// Upstream access rate of each host, overriding `bandwidth`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth_up: Option<Rate>,
    /// Downstream access rate of each host, overriding `bandwidth`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth_down: Option<Rate>,
    /// Two-letter country code: places the hosts on that country's graph nodes; `None`: any node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub country: Option<String>,
}

/// Directory authorities: `authorities: 3` or `authorities: { count: 3, bandwidth: 1 Gbit }`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthoritiesSpec {
    /// How many directory authorities; clients need a consensus, so at least one.
    pub count: u32,
    /// Each authority's access link rate, both directions; `None` takes the graph node's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth: Option<Rate>,
    /// Each authority's upstream access rate, overriding `bandwidth`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth_up: Option<Rate>,
    /// Each authority's downstream access rate, overriding `bandwidth`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth_down: Option<Rate>,
    /// Two-letter country code of the graph nodes to place the authorities on; `None`: any node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub country: Option<String>,
}

/// Wrapper that accepts the integer shorthand as well as the full map.
#[derive(Clone, Debug, PartialEq)]
pub struct Authorities(pub AuthoritiesSpec);

impl Default for Authorities {
    fn default() -> Self {
        Authorities(AuthoritiesSpec {
            count: 3,
            bandwidth: None,
            bandwidth_up: None,
            bandwidth_down: None,
            country: None,
        })
    }
}

impl Authorities {
    /// The authorities' link settings, in the form every group of hosts is placed with.
    pub fn link(&self) -> Link {
        Link {
            bandwidth: self.0.bandwidth,
            bandwidth_up: self.0.bandwidth_up,
            bandwidth_down: self.0.bandwidth_down,
            country: self.0.country.clone(),
        }
    }
}

impl Serialize for Authorities {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Authorities {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Authorities;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number of authorities, or a map with `count` and link keys")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Authorities, E> {
                let count = u32::try_from(v).map_err(|_| {
                    E::custom(format!(
                        "expected a number of authorities from 1 to {}, got {v}",
                        crate::limits::MAX_HOSTS
                    ))
                })?;
                Ok(Authorities(AuthoritiesSpec {
                    count,
                    ..Authorities::default().0
                }))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Authorities, E> {
                if v < 0 {
                    return Err(E::custom(format!(
                        "expected a number of authorities from 1 to {}, got {v}",
                        crate::limits::MAX_HOSTS
                    )));
                }
                self.visit_u64(v as u64)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Authorities, A::Error> {
                AuthoritiesSpec::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(Authorities)
            }
        }
        d.deserialize_any(V)
    }
}

/// Where relays come from: exactly one of `generate`, `list`, `sample`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum RelaysSection {
    /// Synthetic relays whose rates are drawn from a distribution.
    Generate(GenerateRelays),
    /// Relays written out one entry at a time.
    List(Vec<RelaySpec>),
    /// Relays sampled from a real consensus.
    Sample(SampleRelays),
}

/// No relays: what a scenario of managed processes alone has.
impl Default for RelaysSection {
    fn default() -> Self {
        RelaysSection::Generate(GenerateRelays::default())
    }
}

/// `relays.generate`: synthetic relays, counted by kind, with rates from a [`BandwidthModel`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GenerateRelays {
    /// Relays with the Guard flag only.
    #[serde(default)]
    pub guard: u32,
    /// Relays with the Exit flag only.
    #[serde(default)]
    pub exit: u32,
    /// Relays with both the Guard and Exit flags.
    #[serde(default)]
    pub guard_exit: u32,
    /// Relays with neither flag, used as middles.
    #[serde(default)]
    pub middle: u32,
    /// Where each relay's `BandwidthRate` comes from (default: rows of `relays-2018`).
    #[serde(default)]
    pub bandwidth: BandwidthModel,
    /// `None`: the relays file's own burst for `from_file`, [`DEFAULT_BURST_FACTOR`] otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst_factor: Option<f64>,
    /// Overrides the relays' link capacity (both directions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<Rate>,
    /// Puts every generated relay in this country.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub country: Option<String>,
    /// Exit policy of exit and guard+exit relays (default `accept *:*`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_policy: Option<String>,
}

/// Median burst/rate ratio of the relays in `relays-2018-1998.csv` that set a rate (quartiles
/// 1.25 and 2.0); a third of them set burst = rate.
pub const DEFAULT_BURST_FACTOR: f64 = 1.67;

/// A sampled relay's `BandwidthRate` per unit of consensus weight: weights are nominally kB/s.
pub const DEFAULT_RATE_PER_WEIGHT: f64 = 1000.0;

/// How generated relays get their `BandwidthRate`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum BandwidthModel {
    /// Rows drawn from a relays CSV (`relays-2018`, `data:...` or a path).
    FromFile(String),
    /// Rates drawn from a lognormal distribution.
    Lognormal(Lognormal),
    /// The same rate for every relay.
    Fixed(Rate),
}

impl Default for BandwidthModel {
    fn default() -> Self {
        BandwidthModel::FromFile("relays-2018".into())
    }
}

/// A lognormal rate distribution: `BandwidthRate = median × e^(sigma·Z)`, Z standard normal.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lognormal {
    /// The median `BandwidthRate`.
    pub median: Rate,
    /// Standard deviation of the rate's natural logarithm (0 to 5).
    pub sigma: f64,
}

/// Relay flags a scenario may set by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FlagName {
    /// Suitable as an entry guard.
    Guard,
    /// Usable as an exit (with an exit policy that accepts some port).
    Exit,
    /// Fast enough for general circuits; clients use only Fast relays.
    Fast,
    /// Suitable for circuits carrying long-lived streams.
    Stable,
    /// Reachable; set on every listed relay whether named or not.
    Running,
    /// Accepted by the authorities; set on every listed relay whether named or not.
    Valid,
}

/// One `relays.list` entry: a relay, or `count` identical ones.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelaySpec {
    /// Relay nickname; with `count > 1` a number is appended.
    pub name: String,
    /// Identical relays made from this entry, numbered after `name` when more than one.
    #[serde(default = "one")]
    pub count: u32,
    /// The relay's consensus flags (default Fast and Stable); Running and Valid are always set.
    #[serde(default = "default_flags")]
    pub flags: Vec<FlagName>,
    /// tor's `BandwidthRate`, the relay's token-bucket rate (75 KiB/s to 2 GiB/s).
    pub bandwidth_rate: Rate,
    /// tor's `BandwidthBurst`; `None`: the rate × 1.67, at most 2 GiB/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth_burst: Option<Rate>,
    /// tor's `RelayBandwidthRate`: a limit on relayed traffic only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relay_bandwidth_rate: Option<Rate>,
    /// tor's `RelayBandwidthBurst`; only together with `relay_bandwidth_rate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relay_bandwidth_burst: Option<Rate>,
    /// This relay's ConnLimit (sockets), instead of `tor.conn_limit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conn_limit: Option<u32>,
    /// Consensus weight (kB/s units, as in a consensus `w Bandwidth=` line).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consensus_weight: Option<u64>,
    /// Exit policy summary in the consensus's `p`-line syntax (`accept 80,443`); `None`:
    /// accept every port with the Exit flag, else reject every port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_policy: Option<String>,
    /// Relays naming the same family form one family.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub family: Option<String>,
    /// Two-letter country code of the graph nodes to place the relay on; `None`: any node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub country: Option<String>,
    /// Link rate, both directions; `None`: derived from the relay's rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<Rate>,
    /// Upstream link rate, overriding `link`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_up: Option<Rate>,
    /// Downstream link rate, overriding `link`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_down: Option<Rate>,
    /// A fixed IPv4 address (with `count > 1`, the first; later ones count up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<Ipv4Addr>,
}

fn one() -> u32 {
    1
}

fn default_flags() -> Vec<FlagName> {
    vec![FlagName::Fast, FlagName::Stable]
}

/// `relays.sample`: relays drawn from a real consensus, stratified by guard/exit class.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SampleRelays {
    /// `consensus-2023`, `consensus-2022`, `data:<path>` or a path to a consensus file.
    pub consensus: String,
    /// How many relays to sample (at most the consensus's relay count).
    pub count: u32,
    /// Replaces every sampled relay's rate (default: from its consensus weight).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth_rate: Option<Rate>,
    /// Bytes per second of each relay's rate (its `BandwidthRate`, or its link under
    /// `limit: link`) per unit of consensus weight (default 1000: the
    /// weight read as kB/s). `generate` sets it so that the relays' rates add up to the
    /// bandwidth the live relays advertised on the consensus's day, where that is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_per_weight: Option<f64>,
    /// Spreads the rates around weight × `rate_per_weight`, relay by relay: the standard
    /// deviation of the log of each relay's factor (default 0, none). The network's total
    /// rate stays the same. Live relays' capacities departed from their weights so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_spread: Option<f64>,
    /// `BandwidthBurst` as a multiple of `BandwidthRate` (1.0 to 100; default 1.67).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst_factor: Option<f64>,
    /// Link rate of every sampled relay, both directions; `None`: derived from its rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<Rate>,
    /// What holds each sampled relay to its rate (default `bucket`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<RelayLimit>,
    /// Puts every sampled relay in this country.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub country: Option<String>,
    /// Where on the graph each sampled relay sits (default `random`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub place: Option<RelayPlacement>,
    /// The IPv4 country table `place: address` reads, in tor's geoip format: `geoip-2021`,
    /// `geoip-2022`, `geoip-2023`, `data:<path>` or a path (tor-geoipdb's
    /// `/usr/share/tor/geoip`, say). Default: the shipped table nearest the consensus's day.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub geoip: Option<String>,
}

/// What holds a sampled relay to its rate. A live relay either configures a `BandwidthRate`
/// that tor's token buckets enforce, on a machine that could send faster, or configures none
/// and forwards as fast as its machine and link allow; its descriptor's observed bandwidth is
/// then the most it sustained. The two differ in bursts: a bucket lets a relay send at its
/// link's speed while tokens last, a link never lets it pass its rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RelayLimit {
    /// tor's token buckets at the rate (`BandwidthBurst` = rate × `burst_factor`), on a link
    /// of twice the rate: a relay whose operator set `BandwidthRate`.
    Bucket,
    /// The host's link at the rate, both ways, and tor's buckets at tor's default (1 GiB/s):
    /// a relay that sets no rate and is held by its machine, as tornettools models every
    /// relay (its link at the observed bandwidth of its descriptor).
    Link,
}

/// Where `relays.sample` puts its relays on the graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RelayPlacement {
    /// A node drawn at random (among `country`'s nodes, when it is set).
    Random,
    /// A node of the country the relay's address lies in by the `geoip` table, as the live
    /// relay was; a relay whose country the table or the graph lacks goes anywhere.
    Address,
}

/// One `servers` entry: a group of destination hosts that exits connect to.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerGroup {
    /// The group's name; its hosts are `server-<name>-1`, `server-<name>-2`, and so on.
    pub name: String,
    /// Servers in the group.
    #[serde(default = "one")]
    pub count: u32,
    /// TCP port the servers listen on; only 80, the one port the model's clients and exits use.
    #[serde(default = "default_port")]
    pub port: u16,
    /// Access link rate of each host, both directions; `None` takes the graph node's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth: Option<Rate>,
    /// Upstream access rate of each host, overriding `bandwidth`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth_up: Option<Rate>,
    /// Downstream access rate of each host, overriding `bandwidth`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth_down: Option<Rate>,
    /// Two-letter country code: places the hosts on that country's graph nodes; `None`: any node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub country: Option<String>,
    /// Serves only the client groups that name it in their `servers`, not those that name
    /// none: a measurement's own server, as OnionPerf fetches from its own host.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dedicated: bool,
}

fn default_port() -> u16 {
    80
}

/// One `clients` entry: a group of hosts, each running its own Tor client and workload.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientGroup {
    /// The group's name, which labels its rows in the results; its hosts are
    /// `client-<name>-1`, `client-<name>-2`, and so on.
    pub name: String,
    /// Clients in the group.
    #[serde(default = "one")]
    pub count: u32,
    /// What each client of the group fetches or sends, and when.
    pub workload: Workload,
    /// The server group this group downloads from; `None`: any server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub servers: Option<String>,
    /// Each client starts at a uniform random time in this range.
    #[serde(default)]
    pub start: DurationRange,
    /// Access link rate of each host, both directions; `None` takes the graph node's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth: Option<Rate>,
    /// Upstream access rate of each host, overriding `bandwidth`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth_up: Option<Rate>,
    /// Downstream access rate of each host, overriding `bandwidth`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth_down: Option<Rate>,
    /// Two-letter country code: places the hosts on that country's graph nodes; `None`: any node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub country: Option<String>,
    /// tor's `UseEntryGuards`: `false` picks each circuit's first hop afresh by guard weight,
    /// as OnionPerf's and tornettools' measurement clients run.
    #[serde(default = "yes")]
    pub use_entry_guards: bool,
    /// tor's `MaxCircuitDirtiness` for this group's clients (10 s to 30 days); without it,
    /// `tor.max_circuit_dirtiness_s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_circuit_dirtiness: Option<Duration>,
}

fn yes() -> bool {
    true
}

macro_rules! link_of {
    ($t:ty) => {
        impl $t {
            /// The group's link settings, in the form every group of hosts is placed with.
            pub fn link(&self) -> Link {
                Link {
                    bandwidth: self.bandwidth,
                    bandwidth_up: self.bandwidth_up,
                    bandwidth_down: self.bandwidth_down,
                    country: self.country.clone(),
                }
            }
        }
    };
}
link_of!(ServerGroup);
link_of!(ClientGroup);
link_of!(ProcessGroup);
link_of!(AttackSpec);

/// What a client does: exactly one workload per group.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Workload {
    /// Browsing: fetch a page, think, repeat.
    Web(WebWorkload),
    /// Large downloads back to back.
    Bulk(BulkWorkload),
    /// OnionPerf-style measurement downloads on a fixed grid.
    Perf(PerfWorkload),
    /// Uploads back to back.
    Upload(UploadWorkload),
    /// Streams drawn from the PrivCount models of Tor's 2018 traffic.
    Markov(MarkovWorkload),
}

/// Streams as the PrivCount models of Tor's 2018 traffic say users make them; the host
/// stands for `users` users (see `onionlab_traffic::MarkovWorkload`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MarkovWorkload {
    /// The Tor users one client host stands for (1 to 10000), each with its own guards.
    #[serde(default = "one")]
    pub users: u32,
    /// The stream model: an alias (`privcount-2018-stream`, `privcount-2018-stream-initial`),
    /// `data:<path>` or a path relative to the scenario.
    #[serde(default = "markov_stream_model")]
    pub stream_model: String,
    /// The packet model, likewise (`privcount-2018-packet`, `privcount-2018-packet-initial`).
    #[serde(default = "markov_packet_model")]
    pub packet_model: String,
    /// Each stream is abandoned after this; tgen's default transfer timeout, as for web.
    #[serde(default = "web_timeout")]
    pub timeout: Duration,
}

fn markov_stream_model() -> String {
    "privcount-2018-stream".into()
}
fn markov_packet_model() -> String {
    "privcount-2018-packet".into()
}

/// Browsing: fetch a page, think, repeat.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebWorkload {
    /// Bytes per download.
    #[serde(default = "web_size")]
    pub size: Size,
    /// Think time after each download: uniform in the range, or one fixed duration.
    #[serde(default = "web_pause")]
    pub pause: DurationRange,
    /// A download not finished by then counts as failed (tgen's default transfer timeout).
    #[serde(default = "web_timeout")]
    pub timeout: Duration,
}

fn web_size() -> Size {
    Size(320 * 1024)
}
fn web_pause() -> DurationRange {
    DurationRange {
        min: Duration::from_secs(1),
        max: Duration::from_secs(60),
    }
}
fn web_timeout() -> Duration {
    Duration::from_secs(60)
}

/// Back-to-back large downloads.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BulkWorkload {
    /// Bytes per download.
    #[serde(default = "bulk_size")]
    pub size: Size,
    /// Pause between downloads, as for web (default none).
    #[serde(default)]
    pub pause: DurationRange,
    /// A download not finished by then counts as failed.
    #[serde(default = "bulk_timeout")]
    pub timeout: Duration,
}

fn bulk_size() -> Size {
    Size(5 << 20)
}
fn bulk_timeout() -> Duration {
    Duration::from_secs(300)
}

/// Back-to-back uploads: the client sends `size` bytes through its circuit to a server,
/// which answers once it has them all.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UploadWorkload {
    /// Bytes per upload.
    #[serde(default = "bulk_size")]
    pub size: Size,
    /// The same default as bulk downloads': uploads are the bulk transfers of the other
    /// direction.
    #[serde(default = "bulk_timeout")]
    pub timeout: Duration,
}

/// OnionPerf-style measurement: one download of a fixed size every `interval`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PerfWorkload {
    /// Bytes per download.
    #[serde(default = "perf_size")]
    pub size: Size,
    /// Time between download starts, whether or not the previous one has finished.
    #[serde(default = "perf_interval")]
    pub interval: Duration,
    /// `None`: 15 s up to 50 KiB, 60 s up to 1 MiB, 120 s above (tornettools' choices).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Duration>,
}

fn perf_size() -> Size {
    Size(50 * 1024)
}
fn perf_interval() -> Duration {
    Duration::from_secs(60)
}

impl PerfWorkload {
    /// The timeout in force: `timeout` if set, else tornettools' choice by size.
    pub fn effective_timeout(&self) -> Duration {
        self.timeout.unwrap_or(if self.size.0 <= 50 * 1024 {
            Duration::from_secs(15)
        } else if self.size.0 <= 1 << 20 {
            Duration::from_secs(60)
        } else {
            Duration::from_secs(120)
        })
    }
}

/// A uniform range of durations, written `[1s, 60s]`, or one fixed duration `5s`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct DurationRange {
    /// The shortest duration, inclusive.
    pub min: Duration,
    /// The longest duration, inclusive; equal to `min` for a fixed duration.
    pub max: Duration,
}

impl Serialize for DurationRange {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        [self.min, self.max].serialize(s)
    }
}

impl<'de> Deserialize<'de> for DurationRange {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = DurationRange;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as \"5s\" or a range [min, max] such as [1s, 60s]")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<DurationRange, E> {
                let d = crate::units::parse_duration(v).map_err(E::custom)?;
                Ok(DurationRange { min: d, max: d })
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<DurationRange, A::Error> {
                let min: Duration = seq
                    .next_element()?
                    .ok_or_else(|| de::Error::invalid_length(0, &self))?;
                let max: Duration = seq
                    .next_element()?
                    .ok_or_else(|| de::Error::invalid_length(1, &self))?;
                if seq.next_element::<de::IgnoredAny>()?.is_some() {
                    return Err(de::Error::custom(
                        "a range [min, max] has exactly two durations",
                    ));
                }
                Ok(DurationRange { min, max })
            }
        }
        d.deserialize_any(V)
    }
}
