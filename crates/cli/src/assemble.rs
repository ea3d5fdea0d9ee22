//! From a resolved scenario (its plan) to the hosts of a Tor network simulation.

use onionlab_net::tcp::TcpConfig;
use onionlab_net::topology::Graph;
use onionlab_net::{HostPlacement, Impairment, NetworkConfig};
use onionlab_netdir::{Consensus, Relay, RelayFlags};
use onionlab_scenario::{Plan, PlanHost, Scenario};
use onionlab_tor::attack::AttackPlan;
use onionlab_tor::build::{HostRole, HostSpec, TorNetwork};
use onionlab_tor::client::ClientOptions;
use onionlab_tor::process::ProcessPlan;
use onionlab_tor::RelayLimits;

fn place(node: usize, up: u64, down: u64) -> HostPlacement {
    HostPlacement {
        node,
        bandwidth_up: Some(up),
        bandwidth_down: Some(down),
    }
}

/// Gives every managed process of `network` its working folder, `processes/<host>` under
/// `out_dir`, the shim at `shim`, and the run's `control`.
/// Every path is made absolute here: a process runs in its own folder, where the dynamic
/// loader would look for a relative shim and `exec` for a relative program.
pub(crate) fn set_process_dirs(
    network: &mut TorNetwork,
    out_dir: &std::path::Path,
    shim: &std::path::Path,
    control: &onionlab_engine::RunControl,
) -> std::io::Result<()> {
    let out_dir = std::path::absolute(out_dir)?;
    let shim = std::path::absolute(shim)?;
    let hosts_file = out_dir.join("processes").join("hosts");
    for h in &mut network.hosts {
        if let HostRole::Process(p) = &mut h.role {
            p.dir = out_dir.join("processes").join(&h.name);
            p.shim = shim.clone();
            p.hosts_file = Some(hosts_file.clone());
            p.program = std::path::absolute(&p.program)?;
            p.control = control.clone();
        }
    }
    Ok(())
}

/// Whether the managed processes of `network` write their system calls to a log.
pub(crate) fn trace_processes(network: &mut TorNetwork, on: bool) {
    for h in &mut network.hosts {
        if let HostRole::Process(p) = &mut h.role {
            p.trace = on;
        }
    }
}

/// The hosts file of a run with managed processes: `localhost`, and every process host's name
/// with its address, which its programs resolve (through their `/etc/hosts`) to reach each
/// other.
pub(crate) fn process_hosts_file(network: &TorNetwork) -> String {
    let mut text = String::from("127.0.0.1 localhost\n");
    for (id, h) in network.hosts.iter().enumerate() {
        if matches!(h.role, HostRole::Process(_)) {
            let a = onionlab_tor::process::host_address(id as u32).to_be_bytes();
            text += &format!("{}.{}.{}.{} {}\n", a[0], a[1], a[2], a[3], h.name);
        }
    }
    text
}

/// Host order: relays (host id = consensus index), authorities, servers, clients, attackers,
/// managed processes.
pub(crate) fn tor_network(
    scenario: &Scenario,
    graph: Graph,
    plan: &Plan,
    seed: u64,
    threads: usize,
) -> Result<TorNetwork, String> {
    let mut relays = Vec::with_capacity(plan.relays.len());
    let mut hosts = Vec::new();
    let cpu = plan.cpu.as_ref().map(cpu_configs);
    for (i, r) in plan.relays.iter().enumerate() {
        relays.push(Relay {
            nickname: r.name.clone(),
            fingerprint: format!("{:040X}", i + 1),
            address: r.address,
            or_port: onionlab_tor::OR_PORT,
            flags: r.flags.union(RelayFlags::RUNNING).union(RelayFlags::VALID),
            bandwidth: r.consensus_weight,
            unmeasured: false,
            exit_policy: r.exit_policy.clone(),
            family: r.family,
        });
        hosts.push(HostSpec {
            name: r.name.clone(),
            placement: place(r.node, r.link_up_bps, r.link_down_bps),
            role: HostRole::Relay {
                relay: i,
                limits: RelayLimits {
                    bandwidth_rate: r.bandwidth_rate,
                    bandwidth_burst: r.bandwidth_burst,
                    relay_bandwidth_rate: r.relay_bandwidth_rate,
                    relay_bandwidth_burst: r.relay_bandwidth_burst,
                    conn_limit: r.conn_limit,
                },
                cpu: cpu.as_ref().map(|c| c[i].clone()),
            },
        });
    }
    for a in &plan.authorities {
        hosts.push(HostSpec {
            name: a.name.clone(),
            placement: place(a.node, a.link_up_bps, a.link_down_bps),
            role: HostRole::Idle,
        });
    }
    for s in &plan.servers {
        hosts.push(HostSpec {
            name: s.name.clone(),
            placement: place(s.node, s.link_up_bps, s.link_down_bps),
            role: HostRole::Server {
                group: s.group.clone(),
                shared: !plan.dedicated_server_groups.contains(&s.group),
            },
        });
    }
    for c in &plan.clients {
        let workload = c.workload.workload();
        hosts.push(HostSpec {
            name: c.host.name.clone(),
            placement: place(c.host.node, c.host.link_up_bps, c.host.link_down_bps),
            role: HostRole::Client {
                workload,
                servers: c
                    .server_group
                    .clone()
                    .unwrap_or_else(|| onionlab_tor::build::ALL_SERVERS.to_string()),
                start: c.start,
                options: ClientOptions {
                    use_entry_guards: c.use_entry_guards,
                    max_circuit_dirtiness: c.max_circuit_dirtiness,
                },
            },
        });
    }
    for a in &plan.attacks {
        hosts.push(HostSpec {
            name: a.host.name.clone(),
            placement: place(a.host.node, a.host.link_up_bps, a.host.link_down_bps),
            role: HostRole::Attacker(AttackPlan {
                victim: a.victim,
                start: a.start,
                end: a.end,
                circuits: a.circuits,
                every: a.every,
            }),
        });
    }
    for p in &plan.processes {
        hosts.push(HostSpec {
            name: p.host.name.clone(),
            placement: place(p.host.node, p.host.link_up_bps, p.host.link_down_bps),
            role: HostRole::Process(ProcessPlan {
                program: p.program.clone(),
                args: p.args.clone(),
                env: p.env.clone(),
                start: p.start,
                stall_limit: std::time::Duration::from_nanos(p.stall_limit),
                // The run gives each process its folder and the shim (`set_process_dirs`).
                dir: std::path::PathBuf::new(),
                shim: std::path::PathBuf::new(),
                hosts_file: None,
                trace: false,
                control: Default::default(),
            }),
        });
    }
    // Host ids follow the order above: relays, authorities, servers, clients.
    let (r, a, s) = (
        plan.relays.len(),
        plan.authorities.len(),
        plan.servers.len(),
    );
    let host_id = |h: &PlanHost| match *h {
        PlanHost::Relay(i) => i,
        PlanHost::Authority(i) => r + i,
        PlanHost::Server(i) => r + a + i,
        PlanHost::Client(i) => r + a + s + i,
    } as u32;
    let impairments = plan
        .impairments
        .iter()
        .map(|imp| Impairment {
            a: imp.sides[0].iter().map(host_id).collect(),
            b: imp.sides[1].iter().map(host_id).collect(),
            loss: imp.loss,
        })
        .collect();
    Ok(TorNetwork {
        graph,
        hosts,
        consensus: Consensus::from_relays(relays),
        params: scenario.tor.clone(),
        net: NetworkConfig {
            lookahead_floor: scenario.network.lookahead_floor.0,
            down_queue_time: scenario.network.down_queue.0,
            segment_offload: scenario.network.segment_offload,
            tcp: TcpConfig {
                quickack: scenario.network.tcp_quickack,
                ..TcpConfig::default()
            },
            quic: quic_config(&scenario.tor),
            impairments,
            ..NetworkConfig::default()
        },
        seed,
        threads,
    })
}

/// Each relay's CPU (relay host ids are their plan indices): its machine's cores, its
/// workers, the other relays on its machine, and the profile's prices.
fn cpu_configs(p: &onionlab_scenario::cpu::PlannedCpu) -> Vec<onionlab_tor::cpu::CpuConfig> {
    let (crypto, path) = p.profile.parts();
    let table = onionlab_torcore::cpu::CostTable::new(&p.costs, crypto, path);
    let mut on_machine: Vec<Vec<u32>> = vec![Vec::new(); p.machines.len()];
    for (r, &m) in p.machine_of.iter().enumerate() {
        on_machine[m].push(r as u32);
    }
    p.machine_of
        .iter()
        .enumerate()
        .map(|(r, &m)| onionlab_tor::cpu::CpuConfig {
            table,
            cores: p.machines[m].1,
            workers: p.workers[r],
            mates: on_machine[m]
                .iter()
                .copied()
                .filter(|&o| o != r as u32)
                .collect(),
            window: p.share_window_ns,
        })
        .collect()
}

/// The QUIC connections' settings from the scenario's `tor` parameters (used by the `quic`
/// channel design).
fn quic_config(p: &onionlab_torcore::TorParams) -> onionlab_net::quic::QuicConfig {
    let autotune = p.quic_stream_window_max > p.quic_stream_window
        || p.quic_conn_window_max > p.quic_conn_window;
    onionlab_net::quic::QuicConfig {
        max_udp_payload: p.quic_max_udp_payload,
        stream_window: p.quic_stream_window,
        stream_window_max: p.quic_stream_window_max.max(p.quic_stream_window),
        conn_window: p.quic_conn_window,
        conn_window_max: p.quic_conn_window_max.max(p.quic_conn_window),
        autotune,
        ..Default::default()
    }
}
