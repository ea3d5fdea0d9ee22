//! One emulation from start to end: check the machine, build the lab, start the tors, wait for
//! the network to bootstrap, run the workload for the scenario's duration and gather what was
//! measured in the simulator's record types.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use onionlab_engine::host_rng;
use onionlab_report::{CircuitRecord, DownloadRecord, Outcome, RelaySample};
use onionlab_scenario::{Plan, Scenario};
use onionlab_topology::Graph;
use onionlab_traffic::ClientSchedule;

use crate::cpu::{self, CpuReport, Snapshot};
use crate::forwarder::{self, ForwarderConfig, ForwarderStats, Port};
use crate::lab::Lab;
use crate::monitor::{self, BwSample, ClientLog};
use crate::plan::{self, Layout, Role};
use crate::torrc::{self, Identity};
use crate::workload::{self, Clock, Download, Ending};

/// Why an emulation could not run or stopped.
#[derive(Debug)]
pub enum Error {
    /// The scenario or the machine is not fit for emulation; nothing was started.
    Input(String),
    /// Something failed while building or running the network (everything has been removed).
    Setup(String),
}

/// How to run an emulation.
pub struct Options {
    /// Scenario time to run after the network has bootstrapped.
    pub duration: Duration,
    /// How long the tors may take to bootstrap before the emulation gives up.
    pub bootstrap_timeout: Duration,
    /// Set (e.g. by Ctrl-C) to stop early; what was measured is kept.
    pub interrupt: Arc<AtomicBool>,
    /// Where to copy each tor's torrc and log at the end (they are the only files kept).
    pub logs_dir: PathBuf,
    /// Print progress lines.
    pub verbose: bool,
}

/// What an emulation measured.
pub struct Measured {
    /// Every download the clients made, as the simulator records them.
    pub downloads: Vec<DownloadRecord>,
    /// Each relay's bytes read and written per second, from tor's BW events.
    pub relays: Vec<RelaySample>,
    /// The clients' circuits, from tor's CIRC events.
    pub circuits: Vec<CircuitRecord>,
    /// Scenario seconds that ran.
    pub seconds: f64,
    /// Wall seconds from start to the end of bootstrap.
    pub setup_seconds: f64,
    /// The version `tor --version` reports (`unknown` if it could not be run).
    pub tor_version: String,
    /// The switch's counters at the end of the run.
    pub switch: ForwarderStats,
    /// CPU time of every tor and of this process over the same period as `relays` (from the
    /// end of bootstrap to the end of the run); `None` if the kernel gives no clock tick rate.
    pub cpu: Option<CpuReport>,
    /// Why the run ended early, if it did.
    pub stopped_early: Option<String>,
    /// Clean-up problems (empty when everything was removed).
    pub cleanup_problems: Vec<String>,
}

/// The commands emulation needs, with the Debian package that has each.
const TOOLS: [(&str, &str); 4] = [
    ("tor", "tor"),
    ("tor-gencert", "tor"),
    ("ip", "iproute2"),
    ("tc", "iproute2"),
];

/// Checks that this machine can emulate: the tools exist and we may create namespaces.
pub fn check_machine() -> Result<(), String> {
    let missing: Vec<(&str, &str)> = TOOLS
        .iter()
        .copied()
        .filter(|(tool, _)| !on_path(tool))
        .collect();
    if !missing.is_empty() {
        let mut packages: Vec<&str> = missing.iter().map(|(_, p)| *p).collect();
        packages.dedup();
        return Err(format!(
            "emulation needs {} on PATH, which this machine lacks; on Debian or Ubuntu install \
             them with: apt-get install -y {}",
            missing
                .iter()
                .map(|(t, _)| *t)
                .collect::<Vec<_>>()
                .join(", "),
            packages.join(" ")
        ));
    }
    check_congestion_control()?;
    if !has_net_admin() {
        return Err(
            "emulation creates network namespaces, which needs root or CAP_NET_ADMIN and \
             CAP_SYS_ADMIN: run it as root (e.g. with sudo)"
                .into(),
        );
    }
    Ok(())
}

/// The model's TCP is CUBIC; a namespace may only default to a congestion control the host
/// allows for unprivileged use, and changing that list is the host's business, not ours.
fn check_congestion_control() -> Result<(), String> {
    let read = |key: &str| {
        std::fs::read_to_string(format!("/proc/sys/net/ipv4/{key}"))
            .map(|s| s.split_whitespace().map(str::to_string).collect::<Vec<_>>())
            .unwrap_or_default()
    };
    let want = crate::lab::MODEL_TCP[0].1;
    if !read("tcp_available_congestion_control")
        .iter()
        .any(|c| c == want)
    {
        return Err(format!(
            "the kernel has no {want} congestion control (net.ipv4.tcp_available_congestion_control), \
             which the model's TCP implements: load it (modprobe tcp_{want}) or use a kernel that \
             has it"
        ));
    }
    let allowed = read("tcp_allowed_congestion_control");
    if !allowed.iter().any(|c| c == want) {
        return Err(format!(
            "this kernel lets network namespaces use only the congestion controls in \
             net.ipv4.tcp_allowed_congestion_control ({}), and the model's TCP is {want}; \
             allow it with: sysctl -w net.ipv4.tcp_allowed_congestion_control=\"{} {want}\"",
            allowed.join(" "),
            allowed.join(" ")
        ));
    }
    Ok(())
}

fn on_path(tool: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).any(|d| d.join(tool).is_file())
}

/// Whether the effective capabilities include CAP_NET_ADMIN (12) and CAP_SYS_ADMIN (21).
fn has_net_admin() -> bool {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << 12) != 0 && caps & (1 << 21) != 0)
}

fn tor_version() -> String {
    Command::new("tor")
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .map(|l| l.trim_end_matches('.').replace("Tor version ", ""))
        })
        .unwrap_or_else(|| "unknown".into())
}

/// Lays out the scenario and checks the machine, without starting anything.
pub fn prepare(plan: &Plan, graph: &Graph) -> Result<Layout, Error> {
    let layout = plan::layout(plan, graph).map_err(Error::Input)?;
    check_machine().map_err(Error::Input)?;
    Ok(layout)
}

/// Runs the emulation. The lab is removed before this returns, whatever happens.
pub fn run(scenario: &Scenario, layout: &Layout, opts: &Options) -> Result<Measured, Error> {
    let started = Instant::now();
    let say = |msg: String| {
        if opts.verbose {
            eprintln!("[{:6.1} s] {msg}", started.elapsed().as_secs_f64());
        }
    };
    let mut lab = Lab::new().map_err(Error::Setup)?;
    let result = run_in_lab(&mut lab, scenario, layout, opts, &say, started);
    let problems = lab.teardown();
    say(if problems.is_empty() {
        "removed all namespaces, processes and temporary files".into()
    } else {
        format!("clean-up problems: {}", problems.join("; "))
    });
    result.map(|mut m| {
        m.cleanup_problems = problems;
        m
    })
}

fn run_in_lab(
    lab: &mut Lab,
    scenario: &Scenario,
    layout: &Layout,
    opts: &Options,
    say: &dyn Fn(String),
    started: Instant,
) -> Result<Measured, Error> {
    let n = layout.nodes.len();
    let dirs: Vec<PathBuf> = (0..n)
        .map(|i| {
            lab.work_dir()
                .join(format!("{i}-{}", layout.nodes[i].nickname(i)))
        })
        .collect();
    say(format!(
        "{} hosts, {} tor processes; making keys",
        n,
        layout.tor_processes()
    ));
    let ids = crate::keys::make_identities(layout, &dirs).map_err(Error::Setup)?;
    write_configs(layout, &ids, &scenario.tor, &dirs).map_err(Error::Setup)?;

    say("building namespaces, links and the switch".into());
    let hub = lab.hub();
    lab.add_namespace(&hub).map_err(Error::Setup)?;
    for (i, node) in layout.nodes.iter().enumerate() {
        let ns = lab.node_ns(i);
        lab.add_namespace(&ns).map_err(Error::Setup)?;
        lab.add_link(i, node.address, node.mac, scenario.network.segment_offload)
            .map_err(Error::Setup)?;
        // The simulator never drops at the sender (TCP is held back instead); a long queue
        // on the upload side comes closest. Downloads queue as the scenario says.
        let down_queue = Duration::from_nanos(scenario.network.down_queue.0);
        lab.shape(
            &ns,
            "eth0",
            node.link_up_bps,
            down_queue.max(Duration::from_millis(500)),
        )
        .map_err(Error::Setup)?;
        lab.shape(&hub, &format!("p{i}"), node.link_down_bps, down_queue)
            .map_err(Error::Setup)?;
    }
    let hosts: Vec<_> = layout.nodes.iter().map(|n| (n.address, n.mac)).collect();
    for i in 0..n {
        lab.add_neighbours(i, &hosts).map_err(Error::Setup)?;
    }
    lab.check_isolated().map_err(Error::Setup)?;
    let switch = forwarder::start(
        &hub,
        ForwarderConfig {
            ports: (0..n)
                .map(|i| Port {
                    ifname: format!("p{i}"),
                    mac: layout.nodes[i].mac,
                })
                .collect(),
            paths: layout.paths.clone(),
            seed: scenario.run.seed,
            allow_reorder: false,
        },
    )
    .map_err(|e| Error::Setup(format!("cannot start the switch: {e}")))?;

    let stop = Arc::new(AtomicBool::new(false));
    for (i, node) in layout.nodes.iter().enumerate() {
        if matches!(node.role, Role::Server { .. }) {
            workload::start_server(&lab.node_ns(i), node.address, stop.clone())
                .map_err(|e| Error::Setup(format!("server {}: {e}", node.name)))?;
        }
    }
    say("starting tor".into());
    for (i, node) in layout.nodes.iter().enumerate() {
        if node.runs_tor() {
            let ns = lab.node_ns(i);
            lab.start_tor(
                &node.name,
                &ns,
                &dirs[i].join("torrc"),
                &dirs[i].join("stdout.log"),
            )
            .map_err(Error::Setup)?;
        }
    }

    let outcome = measure(
        lab,
        scenario,
        layout,
        opts,
        say,
        &ids,
        stop.clone(),
        started,
    );
    stop.store(true, Ordering::Relaxed);
    let stats = switch.stop();
    copy_logs(layout, &dirs, &opts.logs_dir);
    let mut m = outcome?;
    m.switch = stats.map_err(|e| Error::Setup(format!("the switch failed: {e}")))?;
    Ok(m)
}

fn write_configs(
    layout: &Layout,
    ids: &[Identity],
    params: &onionlab_torcore::TorParams,
    dirs: &[PathBuf],
) -> Result<(), String> {
    let unix_now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let bandwidths = torrc::bandwidth_file(layout, ids, unix_now);
    for (i, node) in layout.nodes.iter().enumerate() {
        if !node.runs_tor() {
            continue;
        }
        let write = |name: &str, text: &str| {
            let path = dirs[i].join(name);
            std::fs::create_dir_all(&dirs[i])
                .and_then(|_| std::fs::write(&path, text))
                .map_err(|e| format!("{}: {e}", path.display()))
        };
        write("torrc", &torrc::torrc(layout, ids, params, i, &dirs[i]))?;
        if matches!(node.role, Role::Authority) {
            write(torrc::BANDWIDTH_FILE, &bandwidths)?;
        }
    }
    Ok(())
}

/// Keeps each tor's torrc and logs (the data directories, with keys, are removed).
fn copy_logs(layout: &Layout, dirs: &[PathBuf], to: &Path) {
    if std::fs::create_dir_all(to).is_err() {
        return;
    }
    for (i, node) in layout.nodes.iter().enumerate() {
        for (file, suffix) in [
            ("torrc", "torrc"),
            ("notice.log", "log"),
            ("stdout.log", "stdout"),
        ] {
            let from = dirs[i].join(file);
            if from.exists() {
                let _ = std::fs::copy(&from, to.join(format!("{}.{suffix}", node.name)));
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn measure(
    lab: &mut Lab,
    scenario: &Scenario,
    layout: &Layout,
    opts: &Options,
    say: &dyn Fn(String),
    ids: &[Identity],
    stop: Arc<AtomicBool>,
    started: Instant,
) -> Result<Measured, Error> {
    let deadline = Instant::now() + opts.bootstrap_timeout;
    // Watchers start before bootstrap, so the circuits a client builds in advance are known
    // when a download later uses one. Clients and relays get a second connection for the
    // bootstrap queries.
    let zero = Arc::new(OnceLock::new());
    let mut controls = HashMap::new();
    let mut relay_logs = Vec::new();
    let mut client_logs = HashMap::new();
    let mut watchers = Vec::new();
    for (i, node) in layout.nodes.iter().enumerate() {
        let connect = || {
            let left = deadline.saturating_duration_since(Instant::now());
            monitor::connect(&lab.node_ns(i), left).map_err(|e| {
                Error::Setup(format!(
                    "{}: {e} (see its log in {})",
                    node.name,
                    opts.logs_dir.display()
                ))
            })
        };
        match node.role {
            Role::Relay { .. } => {
                let out = Arc::new(Mutex::new(Vec::new()));
                watchers.push(monitor::watch_relay(
                    connect()?,
                    zero.clone(),
                    stop.clone(),
                    out.clone(),
                ));
                relay_logs.push((i, out));
                controls.insert(i, connect()?);
            }
            Role::Client { .. } => {
                let out = Arc::new(Mutex::new(ClientLog::default()));
                watchers.push(monitor::watch_client(connect()?, stop.clone(), out.clone()));
                client_logs.insert(i, out);
                controls.insert(i, connect()?);
            }
            _ => {}
        }
    }
    say("waiting for the network to bootstrap".into());
    wait_for_bootstrap(lab, layout, ids, &mut controls, deadline, opts)?;
    drop(controls);
    let setup_seconds = started.elapsed().as_secs_f64();
    say(format!(
        "bootstrapped; running the workload for {:.0} s",
        opts.duration.as_secs_f64()
    ));

    let clock = Clock {
        zero: Instant::now(),
    };
    let _ = zero.set(clock.zero);
    let tors = cpu_processes(lab, layout);
    let cpu_first = Snapshot::take(&tors);
    let downloads = Arc::new(Mutex::new(Vec::new()));
    let mut drivers = Vec::new();
    for (i, node) in layout.nodes.iter().enumerate() {
        let Role::Client {
            workload,
            server_group,
            start,
            ..
        } = &node.role
        else {
            continue;
        };
        let servers: Vec<(usize, std::net::Ipv4Addr)> = layout
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, s)| {
                let Role::Server { shared } = s.role else {
                    return false;
                };
                server_group.as_ref().map_or(shared, |g| *g == s.group)
            })
            .map(|(j, s)| (j, s.address))
            .collect();
        if servers.is_empty() {
            return Err(Error::Input(format!(
                "client {}: no server in group {}",
                node.name,
                server_group.as_deref().unwrap_or("(any)")
            )));
        }
        let spec = workload::ClientSpec {
            index: i,
            ns: lab.node_ns(i),
            schedule: ClientSchedule::new(workload.workload(), *start),
            servers,
            rng: host_rng(scenario.run.seed, i as u32, PURPOSE_WORKLOAD),
        };
        drivers.push(
            workload::start_client(spec, clock, stop.clone(), downloads.clone())
                .map_err(|e| Error::Setup(format!("client {}: {e}", node.name)))?,
        );
    }

    let mut stopped_early = None;
    let mut next_report = Duration::from_secs(60);
    while clock.zero.elapsed() < opts.duration {
        std::thread::sleep(Duration::from_millis(100));
        if opts.interrupt.load(Ordering::Relaxed) {
            stopped_early = Some(format!(
                "interrupted by the user after {:.1} s",
                clock.zero.elapsed().as_secs_f64()
            ));
            break;
        }
        let exited = lab.exited_tors();
        if !exited.is_empty() {
            stopped_early = Some(format!(
                "tor exited during the run: {} (see the logs in {})",
                exited.join(", "),
                opts.logs_dir.display()
            ));
            break;
        }
        if clock.zero.elapsed() >= next_report {
            let done = downloads.lock().map(|d| d.len()).unwrap_or(0);
            say(format!(
                "{:.0} of {:.0} s, {done} downloads finished",
                clock.zero.elapsed().as_secs_f64(),
                opts.duration.as_secs_f64()
            ));
            next_report += Duration::from_secs(60);
        }
    }
    // Before the clients stop: their last moments are part of the period, and the tors are
    // still running.
    let cpu_last = Snapshot::take(&tors);
    let seconds = clock
        .zero
        .elapsed()
        .as_secs_f64()
        .min(opts.duration.as_secs_f64());
    stop.store(true, Ordering::Relaxed);
    for d in drivers {
        let _ = d.join();
    }
    for w in watchers {
        let _ = w.join();
    }
    let downloads = std::mem::take(&mut *downloads.lock().unwrap_or_else(|p| p.into_inner()));
    let names = Names::new(layout, ids);
    let bootstrap = scenario.run.bootstrap.0;
    let mut m = Measured {
        downloads: Vec::new(),
        relays: Vec::new(),
        circuits: Vec::new(),
        seconds,
        setup_seconds,
        tor_version: tor_version(),
        switch: ForwarderStats::default(),
        cpu: cpu::clock_ticks_per_second().map(|ticks| {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            CpuReport::between(&tors, &cpu_first, &cpu_last, ticks, cores)
        }),
        stopped_early,
        cleanup_problems: Vec::new(),
    };
    m.downloads = download_records(layout, &names, &downloads, &client_logs, clock, bootstrap);
    m.circuits = circuit_records(layout, &names, &client_logs, clock);
    for (i, log) in relay_logs {
        let samples = log.lock().unwrap_or_else(|p| p.into_inner());
        m.relays
            .extend(samples.iter().map(|s: &BwSample| RelaySample {
                relay: layout.nodes[i].name.clone(),
                second: s.second,
                bytes_read: s.read,
                bytes_written: s.written,
                ..RelaySample::default()
            }));
    }
    Ok(m)
}

/// The lab's tors with their roles, in the layout's order.
fn cpu_processes(lab: &Lab, layout: &Layout) -> Vec<cpu::Process> {
    let pids: HashMap<String, u32> = lab.tor_pids().into_iter().collect();
    layout
        .nodes
        .iter()
        .filter_map(|node| {
            let role = match node.role {
                Role::Authority => "authority",
                Role::Relay { .. } => "relay",
                Role::Client { .. } => "client",
                Role::Server { .. } => return None,
            };
            Some(cpu::Process {
                name: node.name.clone(),
                role,
                pid: *pids.get(&node.name)?,
            })
        })
        .collect()
}

/// Purpose of the client workload's random stream (server choice, think times).
const PURPOSE_WORKLOAD: u32 = 0xe0_0001;

/// Polls every client until it has bootstrapped, and every client and relay until its
/// consensus lists every relay with the flags the scenario gave it.
///
/// Relays must know the network too, not only clients: an exit refuses streams on circuits
/// whose previous hop is not a relay it knows, so a client that starts downloading before the
/// exit has a consensus gets "general failure" from tor (this failed CI once). A relay's own
/// bootstrap percentage is no sign of that: it counts the relay's circuits as a client, and in
/// a small network a relay may find no guard outside its family and stay at 0% for good.
fn wait_for_bootstrap(
    lab: &mut Lab,
    layout: &Layout,
    ids: &[Identity],
    controls: &mut HashMap<usize, crate::control::ControlConn>,
    deadline: Instant,
    opts: &Options,
) -> Result<(), Error> {
    let relays = layout.indices(|r| matches!(r, Role::Relay { .. }));
    let watched = layout.indices(|r| matches!(r, Role::Client { .. } | Role::Relay { .. }));
    loop {
        let mut waiting = Vec::new();
        for &c in &watched {
            let client = matches!(layout.nodes[c].role, Role::Client { .. });
            let role = if client { "client" } else { "relay" };
            let conn = controls
                .get_mut(&c)
                .expect("every client and relay has a control connection");
            if client {
                let (progress, summary) =
                    monitor::bootstrap_progress(conn).map_err(Error::Setup)?;
                if progress < 100 {
                    waiting.push(format!(
                        "client {} at {progress}% ({summary})",
                        layout.nodes[c].name
                    ));
                    continue;
                }
            }
            let flags = monitor::consensus_flags(conn).map_err(Error::Setup)?;
            let missing: Vec<&str> = relays
                .iter()
                .filter(|&&r| {
                    !has_expected_flags(&layout.nodes[r].role, flags.get(&ids[r].fingerprint))
                })
                .map(|&r| layout.nodes[r].name.as_str())
                .collect();
            if !missing.is_empty() {
                waiting.push(format!(
                    "{role} {}'s consensus lacks (or has the wrong flags for) {}",
                    layout.nodes[c].name,
                    missing.join(", ")
                ));
            }
        }
        if waiting.is_empty() {
            return Ok(());
        }
        let exited = lab.exited_tors();
        if !exited.is_empty() {
            return Err(Error::Setup(format!(
                "tor exited during bootstrap: {} (see the logs in {})",
                exited.join(", "),
                opts.logs_dir.display()
            )));
        }
        if opts.interrupt.load(Ordering::Relaxed) {
            return Err(Error::Setup("interrupted during bootstrap".into()));
        }
        if Instant::now() >= deadline {
            return Err(Error::Setup(format!(
                "the network did not bootstrap within {} s: {} (tor logs are in {})",
                opts.bootstrap_timeout.as_secs(),
                waiting.join("; "),
                opts.logs_dir.display()
            )));
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

fn has_expected_flags(role: &Role, flags: Option<&Vec<String>>) -> bool {
    let Some(flags) = flags else {
        return false;
    };
    let has = |f: &str| flags.iter().any(|x| x == f);
    let Role::Relay {
        flags: want, exit, ..
    } = role
    else {
        return true;
    };
    has("Running")
        && has("Valid")
        && (!want.contains(onionlab_netdir::RelayFlags::GUARD) || has("Guard"))
        && (!*exit || has("Exit"))
}

/// Fingerprint → scenario name, for the paths in the records.
struct Names(HashMap<String, String>);

impl Names {
    fn new(layout: &Layout, ids: &[Identity]) -> Names {
        Names(
            layout
                .nodes
                .iter()
                .zip(ids)
                .filter(|(_, id)| !id.fingerprint.is_empty())
                .map(|(n, id)| (id.fingerprint.clone(), n.name.clone()))
                .collect(),
        )
    }

    fn path(&self, fingerprints: &[String]) -> [String; 3] {
        let name = |k: usize| {
            fingerprints
                .get(k)
                .map(|f| self.0.get(f).cloned().unwrap_or_else(|| f.clone()))
                .unwrap_or_default()
        };
        [name(0), name(1), name(2)]
    }
}

fn secs_since(clock: Clock, at: Instant) -> f64 {
    at.saturating_duration_since(clock.zero).as_secs_f64()
}

fn download_records(
    layout: &Layout,
    names: &Names,
    downloads: &[Download],
    logs: &HashMap<usize, Arc<Mutex<ClientLog>>>,
    clock: Clock,
    bootstrap: u64,
) -> Vec<DownloadRecord> {
    let ns = |t: u64| t as f64 / 1e9;
    let mut records: Vec<DownloadRecord> = downloads
        .iter()
        .map(|d| {
            let log = logs[&d.client].lock().unwrap_or_else(|p| p.into_inner());
            let circuit = d
                .socks_port
                .and_then(|port| log.circuit_of(port, clock.at(d.start)));
            let [guard, middle, exit] = names.path(circuit.map_or(&[][..], |c| &c.path[..]));
            DownloadRecord {
                client: layout.nodes[d.client].name.clone(),
                group: layout.nodes[d.client].group.clone(),
                size_bytes: d.size,
                start_s: ns(d.start),
                circuit_build_s: circuit.and_then(|c| {
                    Some(
                        c.built?
                            .saturating_duration_since(c.launched?)
                            .as_secs_f64(),
                    )
                }),
                ttfb_s: d.first_byte.map(|t| ns(t - d.start)),
                ttlb_s: d.last_byte.map(|t| ns(t - d.start)),
                request_s: d.request.map(|t| ns(t - d.start)),
                throughput_mbit_s: d.throughput.mbit_s(),
                outcome: match &d.ending {
                    Ending::Ok => Outcome::Ok,
                    Ending::Timeout => Outcome::Timeout,
                    Ending::Error(e) => Outcome::Error(e.clone()),
                },
                server: layout.nodes[d.server].name.clone(),
                guard,
                middle,
                exit,
                bootstrap: d.start < bootstrap,
                // Emulated clients only download (upload scenarios are refused).
                upload: false,
            }
        })
        .collect();
    records.sort_by(|a, b| {
        (&a.client, a.start_s)
            .partial_cmp(&(&b.client, b.start_s))
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    records
}

fn circuit_records(
    layout: &Layout,
    names: &Names,
    logs: &HashMap<usize, Arc<Mutex<ClientLog>>>,
    clock: Clock,
) -> Vec<CircuitRecord> {
    let mut clients: Vec<usize> = logs.keys().copied().collect();
    clients.sort_unstable();
    let mut out = Vec::new();
    for c in clients {
        let log = logs[&c].lock().unwrap_or_else(|p| p.into_inner());
        for (id, seen) in &log.circuits {
            // Circuits made while the network bootstrapped, and tor's one-hop directory
            // circuits, are not the workload's.
            let Some(launched) = seen.launched.filter(|&t| t >= clock.zero) else {
                continue;
            };
            if seen.built.is_some() && seen.path.len() < 3 {
                continue;
            }
            let [guard, middle, exit] = names.path(&seen.path);
            out.push(CircuitRecord {
                client: layout.nodes[c].name.clone(),
                circuit: *id,
                // The simulator's clients build only exit circuits and call them so.
                purpose: match seen.purpose.as_deref() {
                    None | Some("GENERAL") => "exit".into(),
                    Some(p) => p.to_ascii_lowercase(),
                },
                guard,
                middle,
                exit,
                start_s: secs_since(clock, launched),
                build_s: seen
                    .built
                    .map(|b| b.saturating_duration_since(launched).as_secs_f64()),
                outcome: match (&seen.failure, seen.built) {
                    (Some(reason), _) if reason == "TIMEOUT" => "timeout".into(),
                    (Some(reason), _) if reason == "DESTROYED" => "destroyed".into(),
                    (Some(_), _) => "failed".into(),
                    (None, Some(_)) => "built".into(),
                    (None, None) => "unfinished".into(),
                },
                streams: seen.streams,
                closed_s: seen.closed.map(|t| secs_since(clock, t)),
            });
        }
    }
    out
}
