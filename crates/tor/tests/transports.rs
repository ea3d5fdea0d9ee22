//! The relay-to-relay transport designs (`tor.channel`): PCTCP, IMUX, Torchestra, ConnLimit,
//! the socket exhaustion attack, and determinism of each design.

mod common;

use common::*;
use onionlab_engine::time::{millis, secs};
use onionlab_engine::Simulation;
use onionlab_netdir::RelayFlags;
use onionlab_tor::attack::AttackPlan;
use onionlab_tor::build::{build, HostRole, HostSpec, TorNetwork};
use onionlab_tor::measure::DownloadOutcome;
use onionlab_tor::relay::DESTROY_CONNECT_FAILED;
use onionlab_tor::transport::imux_socket_cap;
use onionlab_tor::TorHost;
use onionlab_torcore::{ChannelDesign, ImuxScheduler, TorParams};
use onionlab_traffic::Workload;

const MIB: u64 = 1 << 20;
const GUARD: u32 = 0;
const MIDDLE: u32 = 1;
const EXIT: u32 = 2;

fn design(channel: ChannelDesign) -> TorParams {
    TorParams {
        channel,
        ..TorParams::default()
    }
}

fn bulk(size: u64) -> Workload {
    Workload::Bulk {
        size_bytes: size,
        timeout: secs(120),
    }
}

fn web() -> Workload {
    Workload::Web {
        size_bytes: 50 * 1024,
        pause_min: secs(1),
        pause_max: secs(3),
        timeout: secs(60),
    }
}

fn fast() -> (u64, u64) {
    (100 * MIB, 1000 * MBIT)
}

fn all_ok(sim: &Simulation<TorHost>, clients: std::ops::Range<u32>) -> usize {
    let mut n = 0;
    for h in clients {
        let c = client(sim, h);
        assert_eq!(c.window_violations, 0);
        for d in &c.finished {
            assert_eq!(d.outcome, DownloadOutcome::Ok, "client {h}: {d:?}");
            n += 1;
        }
    }
    n
}

#[test]
fn pctcp_gives_every_circuit_its_own_connection_and_closes_it_with_the_circuit() {
    let mut params = design(ChannelDesign::Pctcp);
    // Circuits retire quickly, so that many open and close during the test.
    params.max_circuit_dirtiness_s = 10;
    let clients = vec![bulk(2 * MIB), bulk(2 * MIB), web(), web()];
    let mut sim = three_relays_with(params, [fast(); 3], clients, 1);
    let mut most = 0;
    for t in 1..=60 {
        sim.run_until(secs(t));
        for host in [GUARD, MIDDLE] {
            for ch in relay_host(&sim, host).channel_views() {
                if ch.opener {
                    // One connection per circuit: a connection opens with its circuit and
                    // closes with it.
                    assert_eq!(ch.conns as u32, ch.circuits, "t={t} relay {host}: {ch:?}");
                    most = most.max(ch.conns);
                }
            }
        }
    }
    assert!(
        most >= 4,
        "the guard-middle channel never held several circuits: {most}"
    );
    assert!(all_ok(&sim, 4..8) > 10);
}

fn imux(scheduler: ImuxScheduler, conn_limit: u32) -> TorParams {
    TorParams {
        channel: ChannelDesign::Imux,
        imux_scheduler: scheduler,
        conn_limit,
        max_circuit_dirtiness_s: 10,
        ..TorParams::default()
    }
}

fn imux_run(scheduler: ImuxScheduler, threads: usize) -> Simulation<TorHost> {
    let clients = vec![
        bulk(4 * MIB),
        bulk(4 * MIB),
        bulk(4 * MIB),
        web(),
        web(),
        web(),
    ];
    let mut sim = three_relays_with(imux(scheduler, 40), [fast(); 3], clients, threads);
    sim.run_until(secs(60));
    sim
}

#[test]
fn imux_sizes_channels_within_the_cap_and_keeps_every_circuit_in_order() {
    let mut closed = 0;
    for scheduler in [
        ImuxScheduler::RoundRobin,
        ImuxScheduler::Ewma,
        ImuxScheduler::ShortestQueue,
    ] {
        let sim = imux_run(scheduler, 1);
        let cap = imux_socket_cap(40, 0.9);
        let mut reordered = 0;
        for host in [GUARD, MIDDLE, EXIT] {
            let r = relay_host(&sim, host);
            let s = r.meter.channels;
            eprintln!("{scheduler:?} relay {host}: {s:?}");
            // IMUX's connections never take the relay beyond ConnLimit * tau sockets; only
            // the exit's streams to the server may use the rest of ConnLimit.
            let limit = if host == EXIT { 40 } else { cap };
            assert!(s.max_open_sockets <= limit, "{scheduler:?}: {s:?}");
            // Cells that overtook each other on different connections were put back in
            // order; none was handed on out of order.
            assert_eq!(s.order_violations, 0);
            reordered += s.cells_reordered;
        }
        let guard = relay_host(&sim, GUARD);
        // The channel grew beyond one connection, and shrank again by the closing handshake.
        assert!(guard.meter.channels.conns_opened > 2, "{scheduler:?}");
        closed += relay_host(&sim, GUARD).meter.channels.conns_closed
            + relay_host(&sim, MIDDLE).meter.channels.conns_closed;
        if scheduler != ImuxScheduler::RoundRobin {
            // Cells of one circuit travelled over several connections.
            assert!(reordered > 0, "{scheduler:?}: nothing arrived out of order");
        }
        // No cell was lost or duplicated: every download completed with its exact size.
        assert!(all_ok(&sim, 4..10) > 6, "{scheduler:?}");
    }
    // Connections the cap refused went away without losing a cell (the downloads above).
    eprintln!("connections closed by the handshake: {closed}");
}

#[test]
fn imux_connections_follow_the_share_of_circuits() {
    let mut sim = three_relays_with(
        imux(ImuxScheduler::Ewma, 4096),
        [fast(); 3],
        vec![bulk(4 * MIB), web()],
        1,
    );
    sim.run_until(secs(20));
    let views = relay_host(&sim, GUARD).channel_views();
    let to_middle = views.iter().find(|c| c.peer == MIDDLE).unwrap();
    // Half of the guard's circuit ends are on this channel: it may hold half of the cap,
    // growing at most twofold a second, so after 19 seconds of management it is well past 1.
    assert!(to_middle.conns > 8, "{to_middle:?}");
    assert!(to_middle.conns as u32 <= imux_socket_cap(4096, 0.9) / 2 + 1);
}

#[test]
fn an_imux_opener_holds_a_channel_at_what_its_peer_allows_instead_of_reopening() {
    // The guard could hold about 1,800 connections to the middle; the middle allows 18 sockets
    // in all and refuses or closes the rest. The guard learns that instead of reconnecting
    // every second: it opens at most a few connections per 10-second hold beyond the first fill.
    let params = imux(ImuxScheduler::Ewma, 4096);
    let mut sim = guard_middle_exit(
        params,
        (MIDDLE, 20),
        vec![bulk(4 * MIB), web(), web()],
        5,
        1,
    );
    sim.run_until(secs(60));
    let guard = relay_host(&sim, GUARD).meter.channels;
    let middle = relay_host(&sim, MIDDLE);
    eprintln!("guard {guard:?}; middle {:?}", middle.meter.channels);
    assert!(middle.meter.channels.max_open_sockets <= imux_socket_cap(20, 0.9));
    assert!(guard.conns_opened < 100, "{guard:?}");
    assert!(all_ok(&sim, 4..7) > 3);
}

#[test]
fn a_client_closes_a_dirty_circuit_once_its_last_stream_is_done() {
    // Dirty after 5 s: a bulk client moves its downloads to fresh circuits and closes the old
    // ones, so a PCTCP relay's connections follow the live circuits instead of every circuit
    // ever used.
    let mut params = design(ChannelDesign::Pctcp);
    params.max_circuit_dirtiness_s = 5;
    let mut sim = three_relays_with(params, [fast(); 3], vec![bulk(2 * MIB)], 1);
    sim.run_until(secs(40));
    let c = client(&sim, 4);
    let closed: Vec<_> = c
        .circuit_log
        .iter()
        .filter(|l| l.closed.is_some())
        .collect();
    assert!(closed.len() >= 4, "{:?}", c.circuit_log);
    for l in &closed {
        // Built and used, then retired: not a failure.
        assert_eq!(l.outcome, onionlab_tor::measure::CircuitOutcome::Built);
        assert!(l.streams > 0);
    }
    assert!(all_ok(&sim, 4..5) > 10);
    // The middle holds a connection each way per live circuit (the clean ones, the one in
    // use, one closing or being built), not per circuit ever built.
    let middle = relay_host(&sim, MIDDLE);
    let open = middle.meter.samples.last().unwrap().open_sockets;
    let preemptive = TorParams::default().preemptive_circuits;
    assert!(open <= 2 * (preemptive + 2), "{open}");
    assert!((open as usize) < 2 * closed.len(), "{open}");
}

#[test]
fn torchestra_moves_a_bulk_circuit_to_the_heavy_connection_and_keeps_web_light() {
    let clients = vec![bulk(50 * MIB), web(), web(), web()];
    let mut sim = three_relays_with(design(ChannelDesign::Torchestra), [fast(); 3], clients, 1);
    sim.run_until(secs(30));
    let middle = relay_host(&sim, MIDDLE);
    let mut circuits = middle.circuit_views();
    circuits.sort_by_key(|c| std::cmp::Reverse(c.cells));
    eprintln!("{circuits:?} {:?}", middle.meter.channels);
    // The busiest circuit (the bulk download) is heavy; quiet ones are light.
    assert!(circuits[0].heavy, "{circuits:?}");
    assert!(circuits[0].cells > 10 * circuits[1].cells.max(1));
    assert!(circuits
        .iter()
        .skip(1)
        .filter(|c| c.cells > 0)
        .all(|c| !c.heavy));
    assert!(middle.meter.channels.switched_heavy > 0);
    assert!(all_ok(&sim, 4..8) > 0);
}

#[test]
fn idealised_torchestra_never_misclassifies() {
    let clients = vec![bulk(50 * MIB), web(), web(), web()];
    let mut sim = three_relays_with(
        design(ChannelDesign::TorchestraIdeal),
        [fast(); 3],
        clients,
        1,
    );
    for t in 1..=30 {
        sim.run_until(secs(t));
        for host in [GUARD, MIDDLE, EXIT] {
            let r = relay_host(&sim, host);
            for c in r.circuit_views() {
                // Declared bulk circuits are heavy from the start, the others never.
                assert_eq!(c.heavy, c.declared_heavy, "t={t} relay {host}: {c:?}");
            }
            assert_eq!(r.meter.channels.switched_heavy, 0);
        }
    }
    assert!(relay_host(&sim, MIDDLE)
        .circuit_views()
        .iter()
        .any(|c| c.declared_heavy));
}

#[test]
fn at_conn_limit_an_extend_that_needs_a_connection_fails_with_connect_failed() {
    // The guard may hold 2 sockets: its client's connection and one more, so the channel to
    // the middle opens, but under PCTCP the second circuit's connection cannot.
    let mut sim = guard_middle_exit(design(ChannelDesign::Pctcp), (GUARD, 2), vec![web()], 1, 1);
    sim.run_until(secs(20));
    let c = client(&sim, 4);
    assert!(
        c.destroy_reasons.contains(&DESTROY_CONNECT_FAILED),
        "{:?}",
        c.destroy_reasons
    );
    let guard = relay_host(&sim, GUARD);
    assert!(
        guard
            .meter
            .samples
            .iter()
            .map(|s| s.conn_limit_refusals)
            .sum::<u64>()
            > 0
    );
    assert!(guard.meter.channels.max_open_sockets <= 2);
}

/// Guard, the victim middle with 100 sockets, exit and a second middle the clients can move to;
/// bulk clients whose circuits are dirty after 10 s; an attacker building 40 circuits through
/// the victim every second from 20 s to 50 s.
fn attack(channel: ChannelDesign, threads: usize) -> Simulation<TorHost> {
    let params = TorParams {
        channel,
        max_circuit_dirtiness_s: 10,
        ..TorParams::default()
    };
    let mut relays = guard_middle_exit_relays();
    relays.push(relay("middle2", 4, RelayFlags::default(), 1000));
    let mut spec = network_spec(
        params,
        relays,
        vec![fast(); 4],
        vec![bulk(2 * MIB); 6],
        threads,
    );
    spec.seed = 3;
    if let HostRole::Relay { limits, .. } = &mut spec.hosts[MIDDLE as usize].role {
        limits.conn_limit = Some(100);
    }
    spec.hosts.push(HostSpec {
        name: "attacker".into(),
        placement: at(1000 * MBIT, 1000 * MBIT),
        role: HostRole::Attacker(AttackPlan {
            victim: MIDDLE as usize,
            start: secs(20),
            end: secs(50),
            circuits: 40,
            every: millis(1000),
        }),
    });
    let mut sim = build(spec).unwrap().0;
    sim.run_until(secs(70));
    sim
}

/// Guard, middle and exit (100 MiB/s, 1 Gbit/s), one server and `clients` (host ids from 4),
/// 10 ms apart; relay `limited.0` has ConnLimit `limited.1`.
fn guard_middle_exit(
    params: TorParams,
    limited: (u32, u32),
    clients: Vec<Workload>,
    seed: u64,
    threads: usize,
) -> Simulation<TorHost> {
    let relays = guard_middle_exit_relays();
    let mut spec = network_spec(params, relays, vec![fast(); 3], clients, threads);
    spec.seed = seed;
    if let HostRole::Relay { limits, .. } = &mut spec.hosts[limited.0 as usize].role {
        limits.conn_limit = Some(limited.1);
    }
    build(spec).unwrap().0
}

/// The victim's bytes written per second, averaged over [from, to).
fn victim_rate(sim: &Simulation<TorHost>, from: u64, to: u64) -> f64 {
    let r = relay_host(sim, MIDDLE);
    let sum: u64 = r
        .meter
        .samples
        .iter()
        .filter(|s| s.second >= from && s.second < to)
        .map(|s| s.bytes_written)
        .sum();
    sum as f64 / (to - from) as f64
}

#[test]
fn the_socket_exhaustion_attack_fills_a_pctcp_victim_but_not_an_imux_one() {
    let sim = attack(ChannelDesign::Pctcp, 1);
    let victim = relay_host(&sim, MIDDLE);
    let at_limit = victim
        .meter
        .samples
        .iter()
        .filter(|s| s.second >= 30 && s.second < 50)
        .all(|s| s.open_sockets >= 90);
    let refused: u64 = victim
        .meter
        .samples
        .iter()
        .map(|s| s.conn_limit_refusals)
        .sum();
    let (before, during) = (victim_rate(&sim, 5, 20), victim_rate(&sim, 30, 50));
    eprintln!("pctcp: refusals {refused}, rate before {before:.0} during {during:.0}");
    // The victim sits at its ConnLimit for the rest of the attack and refuses connections;
    // the clients' new circuits through it fail, they move to the other middle as their old
    // ones expire, and the victim's throughput collapses.
    assert!(
        at_limit,
        "the PCTCP victim holds its ConnLimit while attacked: {:?}",
        victim.meter.samples[28..52]
            .iter()
            .map(|s| s.open_sockets)
            .collect::<Vec<_>>()
    );
    assert!(refused > 100);
    let failed_during = (5..11)
        .flat_map(|h| client(&sim, h).circuit_log.iter())
        .filter(|l| l.start >= secs(30) && l.start < secs(50))
        .filter(|l| l.outcome != onionlab_tor::measure::CircuitOutcome::Built)
        .count();
    assert!(failed_during > 10, "{failed_during}");
    assert!(
        during < before / 10.0,
        "the PCTCP victim's throughput collapses: {before:.0} B/s before, {during:.0} during"
    );
    let min_during = victim
        .meter
        .samples
        .iter()
        .filter(|s| s.second >= 30 && s.second < 50)
        .map(|s| s.open_sockets)
        .min();
    eprintln!("pctcp: fewest sockets while attacked {min_during:?}");
    // Afterwards the attacker's circuits are gone and the sockets with them.
    assert!(victim.meter.samples.last().unwrap().open_sockets < 100);

    let sim = attack(ChannelDesign::Imux, 1);
    let victim = relay_host(&sim, MIDDLE);
    let peak = victim
        .meter
        .samples
        .iter()
        .map(|s| s.open_sockets)
        .max()
        .unwrap();
    let (before, during) = (victim_rate(&sim, 5, 20), victim_rate(&sim, 30, 50));
    eprintln!("imux: peak sockets {peak}, rate before {before:.0} during {during:.0}");
    assert!(peak <= imux_socket_cap(100, 0.9));
    assert!(victim.meter.channels.max_open_sockets <= imux_socket_cap(100, 0.9));
    // IMUX closes its own connections to stay under the cap instead of refusing its peers, so
    // the channels the clients' circuits need stay open and the victim keeps relaying.
    assert!(
        during > before / 2.0,
        "the IMUX victim keeps relaying: {before:.0} B/s before, {during:.0} during"
    );
}

fn fingerprint(sim: &Simulation<TorHost>) -> String {
    let mut out = String::new();
    for h in 0..sim.host_count() as u32 {
        match sim.host(h) {
            TorHost::Relay(r) => {
                out.push_str(&format!("{:?}{:?}\n", r.meter.samples, r.meter.channels))
            }
            TorHost::Client(c) => out.push_str(&format!("{:?}{:?}\n", c.finished, c.circuit_log)),
            _ => {}
        }
    }
    out
}

#[test]
fn every_design_is_deterministic_across_thread_counts() {
    for channel in [
        ChannelDesign::Vanilla,
        ChannelDesign::Torchestra,
        ChannelDesign::TorchestraIdeal,
        ChannelDesign::Pctcp,
        ChannelDesign::Imux,
        ChannelDesign::Quic,
    ] {
        let one = fingerprint(&attack(channel, 1));
        let two = fingerprint(&attack(channel, 2));
        assert!(one == two, "{channel:?} differs between 1 and 2 threads");
    }
    for scheduler in [ImuxScheduler::RoundRobin, ImuxScheduler::ShortestQueue] {
        assert!(fingerprint(&imux_run(scheduler, 1)) == fingerprint(&imux_run(scheduler, 2)));
    }
}

/// The three-relay network under `quic` for 60 s: the simulation and the events it handled.
fn quic_run(net: impl FnOnce(&mut TorNetwork), threads: usize) -> (Simulation<TorHost>, u64) {
    let mut params = design(ChannelDesign::Quic);
    params.max_circuit_dirtiness_s = 10;
    let clients = vec![bulk(2 * MIB), bulk(2 * MIB), web(), web()];
    let mut spec = network_spec(
        params,
        guard_middle_exit_relays(),
        vec![fast(); 3],
        clients,
        threads,
    );
    net(&mut spec);
    let mut sim = build(spec).expect("network builds").0;
    let events = sim.run_until(secs(60)).events;
    (sim, events)
}

#[test]
fn quic_channels_carry_each_circuit_on_a_stream_of_one_connection() {
    let (sim, _) = quic_run(|_| {}, 1);
    let (guard, middle) = (relay_host(&sim, GUARD), relay_host(&sim, MIDDLE));
    eprintln!(
        "guard {:?}\nmiddle {:?}",
        guard.meter.channels, middle.meter.channels
    );
    // The guard's channel to the middle and the middle's to the exit went to QUIC.
    assert!(guard.meter.channels.quic_channels >= 1);
    assert!(middle.meter.channels.quic_channels >= 1);
    assert_eq!(
        guard.meter.channels.tcp_fallbacks + middle.meter.channels.tcp_fallbacks,
        0
    );
    // One socket per peer: the middle holds its QUIC connections (guard, exit) and no socket
    // per circuit, however many circuits came and went.
    for s in &middle.meter.samples {
        assert!(
            s.open_sockets <= 2,
            "second {}: {} sockets",
            s.second,
            s.open_sockets
        );
    }
    for ch in middle.channel_views() {
        // One stream per circuit.
        assert_eq!(ch.conns as u32, ch.circuits, "{ch:?}");
    }
    assert!(all_ok(&sim, 4..8) > 10);
}

#[test]
fn a_quic_channel_falls_back_to_tcp_when_quic_is_slower_than_the_link_handshake() {
    // A server flight far beyond three times the client's first datagram needs several
    // round trips (the anti-amplification limit), so QUIC is not ready when TCP's link
    // handshake completes one round trip after connecting.
    let (sim, _) = quic_run(|spec| spec.net.quic.server_handshake_bytes = 40_000, 1);
    let (guard, middle) = (relay_host(&sim, GUARD), relay_host(&sim, MIDDLE));
    assert_eq!(
        guard.meter.channels.quic_channels + middle.meter.channels.quic_channels,
        0
    );
    assert!(guard.meter.channels.tcp_fallbacks >= 1);
    assert!(middle.meter.channels.tcp_fallbacks >= 1);
    assert!(all_ok(&sim, 4..8) > 10);
}

#[test]
fn quic_channels_are_deterministic_across_thread_counts() {
    let one = fingerprint(&quic_run(|_| {}, 1).0);
    let two = fingerprint(&quic_run(|_| {}, 2).0);
    assert!(one == two, "quic differs between 1 and 2 threads");
}

/// Under segmentation offload a QUIC connection sends its datagrams in batches: the
/// circuits still all complete, in fewer events, and the outputs stay the same for any
/// thread count.
#[test]
fn quic_channels_under_offload_batch_datagrams_and_are_deterministic() {
    let offload = |spec: &mut TorNetwork| spec.net.segment_offload = true;
    let (_, plain_events) = quic_run(|_| {}, 1);
    let (one, events) = quic_run(offload, 1);
    let (two, _) = quic_run(offload, 2);
    assert!(
        fingerprint(&one) == fingerprint(&two),
        "quic under offload differs between 1 and 2 threads"
    );
    let middle = relay_host(&one, MIDDLE);
    assert!(middle.meter.channels.quic_channels >= 1);
    assert!(all_ok(&one, 4..8) > 10);
    eprintln!("events without offload {plain_events}, with {events}");
    assert!(
        (events as f64) < 0.8 * plain_events as f64,
        "{events} events against {plain_events}"
    );
}
