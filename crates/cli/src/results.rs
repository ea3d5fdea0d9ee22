//! Turns what the simulated hosts recorded into the output files' records.

use onionlab_engine::time::{as_secs_f64, SimTime, NANOS_PER_SEC};
use onionlab_engine::{HostId, Simulation};
use onionlab_report::{
    rss_bytes, CircuitRecord, CpuRecord, CpuShare, DirectoryRecord, DownloadRecord, Outcome,
    RelaySample, StateSample, TransportRecord,
};
use onionlab_tor::measure::{Census, CircuitOutcome, DownloadOutcome};
use onionlab_tor::{TorHost, TorWorld};

/// One batch of records, in the files' order: written, added to the summary, then dropped.
pub(crate) struct Collected {
    pub downloads: Vec<DownloadRecord>,
    pub relays: Vec<RelaySample>,
    pub circuits: Vec<CircuitRecord>,
}

/// Takes the records the hosts in `hosts` have made since the last call, in host order (so
/// the files do not depend on threads). With `closing`, clients also log the circuits still
/// open, which is only right once, at the end of the run. Callers take a large network a
/// slice of hosts at a time, so that the records in memory at once stay few.
pub(crate) fn drain(
    sim: &mut Simulation<TorHost>,
    world: &TorWorld,
    groups: &[String],
    bootstrap: SimTime,
    closing: bool,
    hosts: std::ops::Range<usize>,
) -> Collected {
    let mut out = Collected::new();
    let path_names = |path: Option<[usize; 3]>| match path {
        Some(p) => p.map(|r| world.relay_name(r).to_string()),
        None => [String::new(), String::new(), String::new()],
    };
    let hosts = hosts.start..hosts.end.min(sim.host_count()).min(groups.len());
    for (id, group) in hosts.clone().zip(&groups[hosts]) {
        let name = world.name(id as u32).to_string();
        match sim.host_mut(id as u32) {
            TorHost::Relay(r) => {
                out.relays
                    .extend(r.meter.samples.drain(..).map(|s| RelaySample {
                        relay: name.clone(),
                        second: s.second,
                        bytes_read: s.bytes_read,
                        bytes_written: s.bytes_written,
                        cells_in: Some(s.cells_in),
                        cells_out: Some(s.cells_out),
                        queued_cells: Some(s.queued_cells),
                        open_sockets: Some(s.open_sockets),
                        socket_queued_bytes: Some(s.socket_queued_bytes),
                        circuits_killed: Some(s.circuits_killed),
                        conn_limit_refusals: Some(s.conn_limit_refusals),
                        cpu: s.cpu.map(cpu_share),
                    }));
            }
            TorHost::Client(c) => {
                if closing {
                    c.close_log();
                }
                for d in c.finished.drain(..) {
                    let [guard, middle, exit] = path_names(d.path);
                    out.downloads.push(DownloadRecord {
                        client: name.clone(),
                        group: group.clone(),
                        size_bytes: d.size,
                        start_s: as_secs_f64(d.start),
                        circuit_build_s: d.circuit_build.map(as_secs_f64),
                        ttfb_s: d.first_byte.map(|t| as_secs_f64(t - d.start)),
                        ttlb_s: d.last_byte.map(|t| as_secs_f64(t - d.start)),
                        request_s: d.request.map(|t| as_secs_f64(t - d.start)),
                        throughput_mbit_s: d.throughput.mbit_s(),
                        outcome: match d.outcome {
                            DownloadOutcome::Ok => Outcome::Ok,
                            DownloadOutcome::Timeout => Outcome::Timeout,
                            DownloadOutcome::Error(e) => Outcome::Error(e.to_string()),
                        },
                        server: world.name(d.server).to_string(),
                        guard,
                        middle,
                        exit,
                        bootstrap: d.start < bootstrap,
                        upload: d.upload,
                    });
                }
                for circ in c.circuit_log.drain(..) {
                    let [guard, middle, exit] = path_names(Some(circ.path));
                    out.circuits.push(CircuitRecord {
                        client: name.clone(),
                        circuit: circ.id,
                        purpose: "exit".into(),
                        guard,
                        middle,
                        exit,
                        start_s: as_secs_f64(circ.start),
                        build_s: circ.build.map(as_secs_f64),
                        outcome: match circ.outcome {
                            CircuitOutcome::Built => "built",
                            CircuitOutcome::Timeout => "timeout",
                            CircuitOutcome::Destroyed => "destroyed",
                            CircuitOutcome::Failed => "failed",
                        }
                        .into(),
                        streams: circ.streams,
                        closed_s: circ.closed.map(as_secs_f64),
                    });
                }
                if closing {
                    // The closing log filled every client's list at once; hand the storage
                    // back before the next slice of clients fills theirs.
                    c.circuit_log = Vec::new();
                }
            }
            _ => {}
        }
    }
    out
}

/// What became of each managed process, in host order.
pub(crate) fn processes(
    sim: &Simulation<TorHost>,
    world: &TorWorld,
) -> Vec<onionlab_report::ProcessRecord> {
    let mut out = Vec::new();
    for id in 0..sim.host_count() as u32 {
        if let TorHost::Process(p) = sim.host(id) {
            let r = p.record();
            out.push(onionlab_report::ProcessRecord {
                host: world.name(id).to_string(),
                program: p.program().display().to_string(),
                started_s: r.started.map(as_secs_f64),
                ended_s: r.ended.map(as_secs_f64),
                exit_code: r.exit_code,
                signal: r.signal,
                failure: r.failure,
                system_calls: r.calls,
                unsupported_calls: r.unsupported.into_iter().collect(),
            });
        }
    }
    out
}

/// One line per managed process for the run's log: how it ended and, once, the system calls
/// it made that onionlab does not implement.
pub(crate) fn process_log(records: &[onionlab_report::ProcessRecord]) -> Vec<String> {
    records
        .iter()
        .map(|p| {
            let ended = match (p.ended_s, p.exit_code, &p.failure) {
                (_, _, Some(why)) => format!("failed: {why}"),
                (Some(t), Some(code), None) => format!("exited with status {code} at {t:.6} s"),
                (None, _, None) if p.started_s.is_some() => "still running at the end".into(),
                _ => "not started (its start time is after the end)".into(),
            };
            let mut line = format!("process {}: {ended}", p.host);
            if !p.unsupported_calls.is_empty() {
                let calls: Vec<String> = (p.unsupported_calls.iter())
                    .map(|(name, n)| format!("{name} ×{n}"))
                    .collect();
                line += &format!(
                    "; unsupported system calls, answered ENOSYS: {}",
                    calls.join(", ")
                );
            }
            line
        })
        .collect()
}

/// Counts what the network's hosts hold now (see [`StateSample`]); `is_relay` is indexed by
/// host id, `events` is what the run has handled so far.
pub(crate) fn state(
    sim: &Simulation<TorHost>,
    is_relay: &[bool],
    wall_s: f64,
    events: u64,
) -> StateSample {
    let mut c = Census::default();
    let relay = |h: HostId| is_relay.get(h as usize).copied().unwrap_or(false);
    for host in sim.hosts() {
        host.census(relay, &mut c);
    }
    StateSample {
        sim_s: as_secs_f64(sim.now()),
        wall_s,
        rss_bytes: rss_bytes(),
        events,
        pending_events: sim.pending_events() as u64,
        client_channels: c.client_channels,
        relay_channels: c.relay_channels,
        relay_client_channels: c.relay_client_channels,
        client_circuits: c.client_circuits,
        relay_circuits: c.relay_circuits,
        streams: c.streams,
        exit_streams: c.exit_streams,
        sockets: c.sockets,
        socket_slots: c.socket_slots,
        queued_cells: c.queued_cells,
    }
}

impl Collected {
    pub(crate) fn new() -> Self {
        Collected {
            downloads: Vec::new(),
            relays: Vec::new(),
            circuits: Vec::new(),
        }
    }
}

/// How the relays carried their channels over the whole run, from their counters.
pub(crate) fn transport(sim: &Simulation<TorHost>, world: &TorWorld) -> TransportRecord {
    let channel = serde_json::to_value(world.params.channel)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let mut t = TransportRecord {
        channel,
        warm_channels: world.warm_channels.iter().map(|w| w.len() as u64).sum(),
        ..TransportRecord::default()
    };
    for id in 0..sim.host_count() {
        if let TorHost::Relay(r) = sim.host(id as u32) {
            let c = r.meter.channels;
            t.quic_channels += c.quic_channels;
            t.tcp_fallbacks += c.tcp_fallbacks;
            t.relay_cell_bytes += c.cells_written * onionlab_torcore::CELL_BYTES as u64;
            let net = r.stack.stats();
            t.relay_wire_bytes += net.bytes_sent;
            t.quic_udp_bytes += net.quic_udp_bytes;
            t.quic_stream_bytes += net.quic_stream_bytes;
            t.quic_stream_bytes_retransmitted += net.quic_stream_bytes_retransmitted;
            t.quic_packets_lost += net.quic_lost;
            t.quic_ptos += net.quic_ptos;
            t.relay_packets_sent += net.packets_sent;
            t.relay_batches_sent += net.batches_sent;
            t.relay_tcp_retransmits += net.tcp_retransmits;
            t.relay_tcp_timeouts += net.tcp_timeouts;
            t.relay_path_losses += net.path_losses;
            t.relay_queue_drops += net.up_drops + net.down_drops;
        }
    }
    t
}

/// What the clients' users fetched from their directory guards, when the network has
/// directory traffic.
pub(crate) fn directory(sim: &Simulation<TorHost>, world: &TorWorld) -> Option<DirectoryRecord> {
    if !world.params.directory_traffic {
        return None;
    }
    let mut d = DirectoryRecord::default();
    for id in 0..sim.host_count() {
        if let TorHost::Client(c) = sim.host(id as u32) {
            let s = c.directory_stats();
            d.users += s.users;
            d.fetches += s.fetches;
            d.failures += s.failures;
            d.bytes += s.bytes;
        }
    }
    Some(d)
}

/// A relay's CPU second as fractions of the (one-second) sample.
fn cpu_share(c: onionlab_tor::cpu::CpuSecond) -> CpuShare {
    let share = |ns: u64| ns as f64 / NANOS_PER_SEC as f64;
    CpuShare {
        busy: share(c.main_busy()),
        crypto: share(c.crypto),
        kernel: share(c.kernel),
        tls: share(c.tls),
        other: share(c.other),
        workers: share(c.workers),
        onion_skins: c.onion_skins,
    }
}

/// The CPU model for run.json.
pub(crate) fn cpu_record(cpu: &onionlab_scenario::cpu::PlannedCpu) -> CpuRecord {
    CpuRecord {
        profile: cpu.profile.name().to_string(),
        calibration: cpu.calibration.clone(),
        costs_ns: cpu
            .costs
            .named()
            .iter()
            .map(|&(name, ns)| (name.to_string(), ns))
            .collect(),
        machines: cpu.machines.len() as u64,
        cores: cpu.machines.iter().map(|&(_, c)| u64::from(c)).sum(),
        share_window_ms: cpu.share_window_ns as f64 / 1e6,
    }
}
