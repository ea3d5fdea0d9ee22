//! One client downloading through three relays: the model end to end.

mod common;

use common::*;
use onionlab_engine::time::{as_secs_f64, secs};
use onionlab_tor::build::build;
use onionlab_tor::measure::DownloadOutcome;
use onionlab_torcore::{FlowControl, TorParams};
use onionlab_traffic::Workload;

const MIB: u64 = 1 << 20;

fn one_bulk_download(flow: FlowControl) -> f64 {
    let params = TorParams {
        flow_control: flow,
        ..TorParams::default()
    };
    // Relays limited to 2 MiB/s on 100 Mbit/s links: the relays' token buckets are the
    // bottleneck.
    let bulk = Workload::Bulk {
        size_bytes: 5 * MIB,
        timeout: secs(120),
    };
    let mut sim = three_relays(params, 2 * MIB, 100 * MBIT, vec![bulk], 1);
    sim.run_until(secs(60));
    let c = client(&sim, 4);
    let first = &c.finished[0];
    assert_eq!(first.outcome, DownloadOutcome::Ok, "{first:?}");
    // The circuit went guard, middle, exit (consensus indices 0, 1, 2).
    assert_eq!(first.path, Some([0, 1, 2]));
    // Every byte the server sent arrived: the exit read exactly the requested bytes.
    let served = match sim.host(3) {
        onionlab_tor::TorHost::Server(s) => s.bytes_served,
        _ => unreachable!(),
    };
    assert!(served >= 5 * MIB);
    let took = as_secs_f64(first.last_byte.unwrap() - first.start);
    let build = as_secs_f64(first.circuit_build.unwrap());
    eprintln!("{flow:?}: 5 MiB in {took:.3} s, circuit built in {build:.3} s");
    // Circuit build: three round trips to successive hops (20, 40, 60 ms) at least.
    assert!(build >= 0.12, "build {build}");
    // Transfer: each relay writes 543 bytes (cell + TLS) per 498 payload bytes, at most
    // rate x t + burst (the bucket starts full with a 2 MiB burst). So the download cannot
    // take less than (wire - burst) / rate, and a model that keeps the bottleneck busy takes
    // little more than wire / rate.
    let wire = 5.0 * 543.0 / 498.0;
    let lower = (wire - 2.0) / 2.0;
    let upper = wire / 2.0 + 1.0;
    assert!(
        took >= lower,
        "took {took}, faster than the rate limit allows ({lower})"
    );
    assert!(
        took <= upper,
        "took {took}, far slower than the bottleneck allows ({upper})"
    );
    took
}

#[test]
fn a_5_mib_download_goes_guard_middle_exit_and_arrives_whole_under_vegas() {
    one_bulk_download(FlowControl::Vegas);
}

#[test]
fn a_5_mib_download_goes_guard_middle_exit_and_arrives_whole_under_sendme() {
    one_bulk_download(FlowControl::Sendme);
}

/// Tor Metrics' throughput (the 0.5th to 1st MiB) of one 5 MiB download under SENDME windows
/// where nothing else limits it: relays unlimited on 100 Mbit/s links, every host 10 ms one
/// way from every other. The exit may have 500 cells of the stream unacknowledged (249,000
/// payload bytes), and a SENDME for them comes back one round trip between exit and client
/// (three hops, 60 ms) after they leave: at most 33.2 Mbit/s, a third of the links' rate.
/// The client acknowledges every 50 cells, so on average 25 cells of the window wait at the
/// client for their SENDME, and each hop's scheduler run delays cells and SENDMEs by a few
/// milliseconds more: the rate falls a fifth short of the bound. With `TCP_NODELAY`, as
/// the build-time test sets it; with Nagle's rule (tor's default), each SENDME cell, smaller
/// than a segment, may also wait at every hop for the ACK of the one before it.
#[test]
fn throughput_under_sendme_windows_is_the_window_per_round_trip() {
    let params = TorParams {
        flow_control: FlowControl::Sendme,
        ..TorParams::default()
    };
    let bulk = Workload::Bulk {
        size_bytes: 5 * MIB,
        timeout: secs(120),
    };
    let relays = guard_middle_exit_relays();
    let mut spec = network_spec(
        params,
        relays,
        vec![(1 << 30, 100 * MBIT); 3],
        vec![bulk],
        1,
    );
    spec.net.tcp.nodelay = true;
    let mut sim = build(spec).expect("network builds").0;
    sim.run_until(secs(30));
    let first = &client(&sim, 4).finished[0];
    assert_eq!(first.outcome, DownloadOutcome::Ok, "{first:?}");
    let (from, to) = (first.throughput.span()).expect("a 5 MiB download spans the window");
    assert!(first.first_byte.unwrap() < from && to < first.last_byte.unwrap());
    let mbit = first.throughput.mbit_s().unwrap();
    let bound = 500.0 * 498.0 * 8.0 / 0.060 / 1e6;
    eprintln!("throughput {mbit:.2} Mbit/s; the window's bound {bound:.2}");
    assert!(
        mbit <= bound && mbit >= 0.75 * bound,
        "throughput {mbit} Mbit/s against the window's bound {bound}"
    );
}

/// The build time of the first circuit and its download's request-to-first-byte time, in
/// seconds, on the three-relay network (every host 10 ms one way from every other, links of
/// 100 Mbit/s, no CPU model), with `TCP_NODELAY` so that no segment waits on Nagle's rule
/// for a delayed ACK. With `warm_channels` the relays open their channels to each other as
/// they start, a second before the client starts.
fn first_build(link_handshake: bool, warm_channels: bool) -> (f64, f64) {
    let params = TorParams {
        link_handshake,
        warm_channels,
        ..TorParams::default()
    };
    let web = Workload::Bulk {
        size_bytes: 50 * 1024,
        timeout: secs(60),
    };
    let relays = guard_middle_exit_relays();
    let mut spec = network_spec(
        params,
        relays,
        vec![(100 * MIB, 100 * MBIT); 3],
        vec![web],
        1,
    );
    spec.net.tcp.nodelay = true;
    let mut sim = build(spec).expect("network builds").0;
    sim.run_until(secs(5));
    let first = &client(&sim, 4).finished[0];
    assert_eq!(first.outcome, DownloadOutcome::Ok, "{first:?}");
    let round_trip = first.first_byte.unwrap() - first.request.unwrap();
    (
        as_secs_f64(first.circuit_build.unwrap()),
        as_secs_f64(round_trip),
    )
}

/// A circuit's build time against the closed form, with every connection new. With the link
/// handshake each hop's connection takes TCP's round trip and two of the handshake before
/// its CREATE2, and the CREATE2 one more: 4 RTT for the first hop, and for the second and
/// third the EXTEND2's way to the extending relay and back (1 and 2 RTT) on top, so
/// 4 + 5 + 6 = 15 round trips of 20 ms. Without it, each connection costs TCP's round trip
/// alone: 2 + 3 + 4 = 9. What is left over is transmission, the stacks' processing and the
/// relays' KIST runs (every 3 ms), a few milliseconds. The download's request then takes one
/// round trip over the circuit to the server to bring its first byte.
#[test]
fn circuit_build_time_matches_the_closed_form_with_and_without_the_link_handshake() {
    let (with, round_trip) = first_build(true, false);
    let (without, _) = first_build(false, false);
    eprintln!("build: {with:.4} s with the link handshake, {without:.4} s without");
    let rtt = 0.020;
    assert!(
        with >= 15.0 * rtt && with < 15.0 * rtt + 0.012,
        "with the handshake: {with}"
    );
    assert!(
        without >= 9.0 * rtt && without < 9.0 * rtt + 0.012,
        "without the handshake: {without}"
    );
    // The request goes once the stream is open, over connections already open all the way
    // to the server: client, guard, middle, exit and server are four hops of 10 ms each way.
    eprintln!("request to first byte: {round_trip:.4} s");
    assert!(
        round_trip >= 4.0 * rtt && round_trip < 4.0 * rtt + 0.008,
        "request to first byte: {round_trip}"
    );
}

/// A warm start (`tor.warm_channels`): the relays connected to each other before the client
/// came, as the live network's are wherever circuits passed lately, so only the client's
/// connection to its guard is new. The first hop takes 4 round trips as above, the EXTEND2s
/// over open channels 2 and 3: 9 round trips of 20 ms, against 15 from a cold start.
#[test]
fn on_a_warm_start_only_the_first_hop_pays_for_a_connection() {
    let (warm, _) = first_build(true, true);
    eprintln!("build from a warm start: {warm:.4} s");
    let rtt = 0.020;
    assert!(
        warm >= 9.0 * rtt && warm < 9.0 * rtt + 0.012,
        "from a warm start: {warm}"
    );
}

/// The first hops of a perf client's downloads over 5 minutes on a network of six guards, a
/// middle and an exit, with and without entry guards (circuits dirty after 10 s, a download
/// every 20 s, so every download takes a fresh circuit).
fn first_hops(use_entry_guards: bool) -> std::collections::BTreeSet<usize> {
    use onionlab_netdir::RelayFlags;
    use onionlab_tor::build::HostRole;
    use onionlab_tor::client::ClientOptions;
    let mut relays: Vec<_> = (0..6)
        .map(|i| relay(&format!("guard{i}"), 10 + i, RelayFlags::GUARD, 1000))
        .collect();
    relays.push(relay("middle", 30, RelayFlags::default(), 1000));
    relays.push(relay("exit", 31, RelayFlags::EXIT, 1000));
    let perf = Workload::Perf {
        size_bytes: 50 * 1024,
        interval: secs(20),
        timeout: secs(15),
    };
    let links = vec![(100 * MIB, 100 * MBIT); relays.len()];
    let mut spec = network_spec(TorParams::default(), relays, links, vec![perf], 1);
    let client = spec.hosts.len() - 1;
    if let HostRole::Client { options, .. } = &mut spec.hosts[client].role {
        *options = ClientOptions {
            use_entry_guards,
            max_circuit_dirtiness: Some(secs(10)),
        };
    }
    let mut sim = build(spec).expect("network builds").0;
    sim.run_until(secs(300));
    let done = &common::client(&sim, client as u32).finished;
    assert!(done.len() >= 12, "{} downloads", done.len());
    assert!(done.iter().all(|d| d.outcome == DownloadOutcome::Ok));
    done.iter().map(|d| d.path.unwrap()[0]).collect()
}

/// With entry guards every circuit starts at one of the client's two primary guards; without
/// them (OnionPerf's clients) each circuit draws its first hop, and a dozen circuits reach
/// most of six equal guards.
#[test]
fn a_client_without_entry_guards_spreads_its_first_hops() {
    let with = first_hops(true);
    let without = first_hops(false);
    assert!(with.len() <= 2, "{with:?}");
    assert!(without.len() >= 4, "{without:?}");
}
