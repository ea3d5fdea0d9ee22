//! Assembles a simulation of a Tor network from a list of hosts.

use std::sync::Arc;

use onionlab_engine::time::SimTime;
use onionlab_engine::{EngineConfig, HostId, RunControl, Simulation};
use onionlab_net::topology::Graph;
use onionlab_net::{HostPlacement, NetError, NetStack, Network, NetworkConfig};
use onionlab_netdir::Consensus;
use onionlab_torcore::TorParams;
use onionlab_traffic::Workload;

use crate::attack::{AttackPlan, Attacker};
use crate::client::ClientOptions;
use crate::cpu::CpuConfig;
use crate::host::{Driven, Ev, TorHost};
use crate::relay::{Relay, RelayLimits};
use crate::world::TorWorld;
use crate::{Client, Server};

/// The server group that holds every shared server (for clients that name no group).
pub const ALL_SERVERS: &str = "*";

/// What a host of the network runs.
pub enum HostRole {
    /// The relay with this index in the consensus.
    Relay {
        /// Its index in [`TorNetwork::consensus`].
        relay: usize,
        /// Its configured bandwidth rates and bursts and its ConnLimit.
        limits: RelayLimits,
        /// Its CPU, when the scenario models one.
        cpu: Option<CpuConfig>,
    },
    /// A tor client: it builds circuits through the relays and runs its workload's
    /// downloads and uploads over them.
    Client {
        /// What it downloads or uploads, and when.
        workload: Workload,
        /// The server group the client downloads from.
        servers: String,
        /// When the client starts its workload.
        start: SimTime,
        /// Its own tor settings.
        options: ClientOptions,
    },
    /// A file server, which exits connect to on [`crate::HTTP_PORT`].
    Server {
        /// The name of the server group it belongs to, which clients name to use it.
        group: String,
        /// Whether clients that name no server group download from it too (not so for a
        /// dedicated group: a measurement's own server).
        shared: bool,
    },
    /// The socket exhaustion attacker.
    Attacker(AttackPlan),
    /// A real program in simulated time.
    Process(crate::process::ProcessPlan),
    /// Takes part in the network, sends nothing (directory authorities).
    Idle,
}

/// One host of the network: what it is called, where it attaches and what it runs.
pub struct HostSpec {
    /// The host's name, as results give it.
    pub name: String,
    /// The graph node it attaches to, with its own link rates.
    pub placement: HostPlacement,
    /// What it runs.
    pub role: HostRole,
}

/// Everything [`build`] needs to make the simulation of a Tor network.
pub struct TorNetwork {
    /// The network graph the hosts attach to.
    pub graph: Graph,
    /// Every host, in host-id order: the host at index `i` gets id `i`.
    pub hosts: Vec<HostSpec>,
    /// The consensus every client uses; `Relay { relay }` hosts are its relays.
    pub consensus: Consensus,
    /// The Tor parameters every relay and client of the run uses.
    pub params: TorParams,
    /// Settings every host's network stack shares (round width, queues, TCP, QUIC,
    /// impairments).
    pub net: NetworkConfig,
    /// The scenario seed, from which every host's random streams derive.
    pub seed: u64,
    /// Worker threads the engine runs the hosts on (0 is taken as 1).
    pub threads: usize,
}

/// The random stream of clients' directory schedules, apart from the host's main stream so
/// that switching directory traffic off leaves every other draw as it was.
const PURPOSE_DIRECTORY: u32 = 0x70_0001;
/// The random stream that draws the circuits of a warm start (`tor.warm_channels`).
const PURPOSE_WARM: u32 = 0x70_0002;
/// The random stream a managed process's simulated kernel draws from (`getrandom`,
/// `/dev/urandom`).
const PURPOSE_PROCESS: u32 = 0x70_0003;

/// Why [`build_with`] made no simulation.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The graph cannot carry the hosts (no path between two of them, a node without a
    /// self-loop, a path without latency).
    #[error("{0}")]
    Graph(String),
    /// The hosts do not fit together (a client's server group is empty, a relay is missing).
    #[error("{0}")]
    Invalid(String),
    /// The control given was interrupted (a memory limit, Ctrl-C) after this many hosts of
    /// `of` were made.
    #[error("stopped after building {built} of {of} hosts")]
    Stopped {
        /// Hosts made before the stop.
        built: usize,
        /// Hosts the network has in all.
        of: usize,
    },
}

/// How many hosts are made between two looks at the control: often enough that a memory
/// limit stops construction within a few MiB, rarely enough to cost nothing.
const CONTROL_EVERY_HOSTS: usize = 1024;

/// Builds the simulation; every host gets its `Start` event at time 0.
pub fn build(network: TorNetwork) -> Result<(Simulation<TorHost>, Arc<TorWorld>), String> {
    build_with(network, &RunControl::default()).map_err(|e| e.to_string())
}

/// [`build`], stopping early once `control` is interrupted (a watcher of the process's
/// memory, Ctrl-C): a network of a million hosts takes seconds and gigabytes to make, so
/// a limit must hold while it is made, not only once it runs. The simulation takes
/// `control` as its own, so the same handle goes on to stop the run.
pub fn build_with(
    network: TorNetwork,
    control: &RunControl,
) -> Result<(Simulation<TorHost>, Arc<TorWorld>), BuildError> {
    let of = network.hosts.len();
    let stopped = |built: usize| BuildError::Stopped { built, of };
    let placements: Vec<HostPlacement> =
        network.hosts.iter().map(|h| h.placement.clone()).collect();
    let net = Arc::new(
        Network::build(&network.graph, &placements, network.net).map_err(|e| match e {
            NetError::Graph(m) => BuildError::Graph(m),
            e => BuildError::Invalid(e.to_string()),
        })?,
    );
    drop(placements);
    if control.is_interrupted() {
        return Err(stopped(0));
    }
    let (relay_hosts, server_groups) = index_hosts(&network.hosts, network.consensus.relays.len())?;
    let names = network.hosts.iter().map(|h| h.name.clone()).collect();
    let mut world = TorWorld::new(
        network.params,
        network.consensus,
        relay_hosts,
        names,
        server_groups,
    );
    if world.params.warm_channels {
        world.warm_channels = crate::warm::warm_channels(
            &world.consensus,
            &world.selector,
            &circuit_sources(&network.hosts, &world.params),
            world.params.relay_channel_idle_timeout_s as f64,
            &mut onionlab_engine::host_rng(network.seed, 0, PURPOSE_WARM),
        );
    }
    let world = Arc::new(world);
    let mut models = Vec::with_capacity(network.hosts.len());
    // How far ahead of the others each host may run (`Simulation::set_min_delays`): as far as
    // its nearest sender allows, except that relays sharing a machine tell each other their
    // CPU demand one lookahead ahead.
    let mut min_delays = net.min_latencies_to_hosts();
    for (id, h) in network.hosts.into_iter().enumerate() {
        if id % CONTROL_EVERY_HOSTS == 0 && control.is_interrupted() {
            return Err(stopped(id));
        }
        let stack = NetStack::new(id as HostId, net.clone());
        models.push(host_model(
            h,
            id as HostId,
            stack,
            &world,
            network.seed,
            &mut min_delays,
            &net,
        )?);
    }
    let engine = EngineConfig {
        seed: network.seed,
        threads: network.threads.max(1),
        lookahead: net.lookahead(),
        trace: true,
        work_stealing: true,
    };
    if control.is_interrupted() {
        return Err(stopped(of));
    }
    let mut sim = Simulation::new(engine, models);
    sim.set_control(control.clone());
    sim.set_min_delays(&min_delays);
    for h in 0..sim.host_count() {
        sim.schedule(h as HostId, 0, Ev::Start);
    }
    Ok((sim, world))
}

/// The circuits the network's clients build, for a warm start: one source per client host.
fn circuit_sources(hosts: &[HostSpec], params: &TorParams) -> Vec<crate::warm::CircuitSource> {
    hosts
        .iter()
        .filter_map(|h| match &h.role {
            HostRole::Client {
                workload, options, ..
            } => {
                let dirtiness_s = options
                    .max_circuit_dirtiness
                    .map_or(params.max_circuit_dirtiness_s as f64, |d| {
                        d as f64 / onionlab_engine::time::NANOS_PER_SEC as f64
                    });
                Some(crate::warm::CircuitSource::of_client(workload, dirtiness_s))
            }
            _ => None,
        })
        .collect()
}

/// Which host each consensus relay runs on, and the hosts of each server group (the shared
/// servers last, under [`ALL_SERVERS`]).
#[allow(clippy::type_complexity)]
fn index_hosts(
    hosts: &[HostSpec],
    relays: usize,
) -> Result<(Vec<HostId>, Vec<(String, Vec<HostId>)>), BuildError> {
    let mut relay_hosts = vec![HostId::MAX; relays];
    let mut server_groups: Vec<(String, Vec<HostId>)> = Vec::new();
    let mut shared_servers: Vec<HostId> = Vec::new();
    for (id, h) in hosts.iter().enumerate() {
        match &h.role {
            HostRole::Relay { relay, .. } => {
                let slot = relay_hosts.get_mut(*relay).ok_or_else(|| {
                    BuildError::Invalid(format!(
                        "host {}: no relay {relay} in the consensus",
                        h.name
                    ))
                })?;
                *slot = id as HostId;
            }
            HostRole::Server { group, shared } => {
                if *shared {
                    shared_servers.push(id as HostId);
                }
                match server_groups.iter_mut().find(|(g, _)| g == group) {
                    Some((_, hosts)) => hosts.push(id as HostId),
                    None => server_groups.push((group.clone(), vec![id as HostId])),
                }
            }
            _ => {}
        }
    }
    server_groups.push((ALL_SERVERS.to_string(), shared_servers));
    if let Some(r) = relay_hosts.iter().position(|&h| h == HostId::MAX) {
        return Err(BuildError::Invalid(format!(
            "consensus relay {r} has no host"
        )));
    }
    Ok((relay_hosts, server_groups))
}

/// The model host `h` runs as host `id` over `stack`. A relay sharing a machine's CPU with
/// others lets them run only one lookahead ahead of it (`min_delays`).
fn host_model(
    h: HostSpec,
    id: HostId,
    stack: NetStack<crate::wire::Wire>,
    world: &Arc<TorWorld>,
    seed: u64,
    min_delays: &mut [SimTime],
    net: &Network,
) -> Result<TorHost, BuildError> {
    Ok(match h.role {
        HostRole::Relay { relay, limits, cpu } => {
            for &mate in cpu.iter().flat_map(|cfg| &cfg.mates) {
                min_delays[mate as usize] = net.lookahead();
            }
            let driven = Driven::new(stack, Relay::new(relay, world.clone(), &limits));
            TorHost::Relay(Box::new(match cpu {
                Some(cfg) => driven.with_cpu(&cfg),
                None => driven,
            }))
        }
        HostRole::Client {
            workload,
            servers,
            start,
            options,
        } => {
            let hosts = world
                .servers(&servers)
                .ok_or_else(|| {
                    BuildError::Invalid(format!("client {}: no server group {servers}", h.name))
                })?
                .to_vec();
            if hosts.is_empty() {
                return Err(BuildError::Invalid(format!(
                    "client {}: server group {servers} is empty",
                    h.name
                )));
            }
            TorHost::Client(Box::new(Driven::new(
                stack,
                Client::new(
                    world.clone(),
                    workload,
                    hosts,
                    start,
                    options,
                    onionlab_engine::host_rng(seed, id, PURPOSE_DIRECTORY),
                ),
            )))
        }
        HostRole::Server { .. } => TorHost::Server(Box::new(Server::new(stack))),
        HostRole::Attacker(plan) => {
            if plan.victim >= world.relay_hosts.len() {
                return Err(BuildError::Invalid(format!(
                    "attacker {}: no relay {}",
                    h.name, plan.victim
                )));
            }
            TorHost::Attacker(Box::new(Driven::new(
                stack,
                Attacker::new(world.clone(), plan),
            )))
        }
        HostRole::Process(plan) => TorHost::Process(Box::new(crate::process::ProcessHost::new(
            stack,
            world.clone(),
            id,
            plan,
            onionlab_engine::host_rng(seed, id, PURPOSE_PROCESS),
        ))),
        HostRole::Idle => TorHost::Idle,
    })
}
