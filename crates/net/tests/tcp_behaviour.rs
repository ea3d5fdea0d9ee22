//! TCP behaviour over the full network model (engine, links, paths, stack): the figures a
//! researcher expects from a real TCP on a known path.

use onionlab_engine::time::secs;
use onionlab_net::iperf::*;
use onionlab_net::tcp::{CongestionControl, TcpConfig};
use onionlab_net::NetworkConfig;

const MBIT: u64 = 1_000_000;

fn config(cc: CongestionControl) -> NetworkConfig {
    NetworkConfig {
        tcp: TcpConfig {
            congestion: cc,
            ..TcpConfig::default()
        },
        ..NetworkConfig::default()
    }
}

#[test]
fn one_bulk_flow_fills_a_10_mbit_bottleneck_with_50_ms_rtt() {
    let graph = switch_graph(25.0, 0.0, 0.0);
    // The receiver's downstream is the bottleneck.
    let places = [at(100 * MBIT, 100 * MBIT), at(100 * MBIT, 10 * MBIT)];
    let roles = vec![sender(1, None, 64 * 1024), sink(64 * 1024)];
    let mut sim = build(
        &graph,
        &places,
        config(CongestionControl::Cubic),
        roles,
        1,
        1,
    );
    let rate = goodput(&mut sim, 1, secs(5), secs(30));
    eprintln!("goodput {:.3} Mbit/s", rate / 1e6);
    assert!(rate >= 0.9 * 10e6, "goodput {rate} below 90% of 10 Mbit/s");
    assert!(rate <= 10e6, "goodput {rate} above the link rate");
}

/// Jitter stretches the gaps between a connection's packets but never reorders them (real
/// paths' queues are first in, first out): a flow over a jittery path without loss never
/// retransmits and still fills its bottleneck. Were each packet delayed independently, a
/// millisecond of jitter would reorder nearly every packet of this flow (a segment leaves
/// every 0.1 ms) and TCP would take each overtaken segment for a loss.
#[test]
fn jitter_never_reorders_a_connection() {
    let graph = switch_graph(25.0, 0.0, 3.0);
    let places = [at(100 * MBIT, 100 * MBIT), at(100 * MBIT, 100 * MBIT)];
    let roles = vec![sender(1, None, 64 * 1024), sink(64 * 1024)];
    let mut sim = build(
        &graph,
        &places,
        config(CongestionControl::Cubic),
        roles,
        1,
        4,
    );
    let rate = goodput(&mut sim, 1, secs(5), secs(20));
    let stats = sim.host(0).stack.stats();
    eprintln!("goodput {:.3} Mbit/s, {stats:?}", rate / 1e6);
    assert_eq!(stats.path_losses, 0);
    assert_eq!(stats.up_drops, 0);
    assert!(
        rate >= 0.9 * 100e6,
        "goodput {rate} below 90% of 100 Mbit/s"
    );
}

/// Mathis et al.: a loss-limited Reno flow gets about MSS/RTT * 1.22/sqrt(p). With
/// segmentation offload too, as the path still loses single segments.
#[test]
fn reno_under_one_percent_loss_follows_the_mathis_formula() {
    // 1% loss each way on a 100 ms RTT path with plenty of capacity.
    let graph = switch_graph(50.0, 0.01, 0.0);
    let places = [at(100 * MBIT, 100 * MBIT), at(100 * MBIT, 100 * MBIT)];
    for segment_offload in [false, true] {
        let mut rates = Vec::new();
        for seed in 1..=3 {
            let roles = vec![sender(1, None, 64 * 1024), sink(64 * 1024)];
            let net = NetworkConfig {
                segment_offload,
                ..config(CongestionControl::Reno)
            };
            let mut sim = build(&graph, &places, net, roles, 1, seed);
            rates.push(goodput(&mut sim, 1, secs(10), secs(130)));
        }
        let rate = rates.iter().sum::<f64>() / rates.len() as f64;
        let mathis = 1448.0 * 8.0 / 0.1 * 1.22 / 0.01f64.sqrt();
        eprintln!(
            "reno {:.3} Mbit/s, mathis {:.3} Mbit/s (offload {segment_offload})",
            rate / 1e6,
            mathis / 1e6
        );
        assert!(
            rate > mathis / 2.0 && rate < mathis * 2.0,
            "{rate} vs {mathis}"
        );
    }
}

#[test]
fn cubic_is_not_slower_than_reno_on_a_long_fat_path() {
    // 100 Mbit/s, 200 ms RTT, a little loss so that both keep probing.
    let graph = switch_graph(100.0, 0.0001, 0.0);
    let places = [at(100 * MBIT, 100 * MBIT), at(100 * MBIT, 100 * MBIT)];
    let run = |cc| {
        let mut total = 0.0;
        for seed in 1..=2 {
            let roles = vec![sender(1, None, 64 * 1024), sink(64 * 1024)];
            let mut sim = build(&graph, &places, config(cc), roles, 1, seed);
            total += goodput(&mut sim, 1, secs(0), secs(120));
        }
        total / 2.0
    };
    let (cubic, reno) = (run(CongestionControl::Cubic), run(CongestionControl::Reno));
    eprintln!(
        "cubic {:.2} Mbit/s, reno {:.2} Mbit/s",
        cubic / 1e6,
        reno / 1e6
    );
    assert!(reno > 2e6, "reno moved hardly any data: {reno}");
    assert!(cubic >= reno, "cubic {cubic} < reno {reno}");
}

#[test]
fn every_byte_arrives_once_and_in_order_under_loss_reordering_and_timeouts() {
    // 8% loss each way and up to 30 ms of jitter on a 40 ms RTT path:
    // losses of retransmissions force repeated RTOs.
    let graph = switch_graph(20.0, 0.08, 30.0);
    let places = [at(20 * MBIT, 20 * MBIT), at(20 * MBIT, 20 * MBIT)];
    let total = 3_000_000;
    // Odd message sizes so that message ends fall anywhere inside segments.
    let roles = vec![sender(1, Some(total), 777), sink(777)];
    let mut sim = build(
        &graph,
        &places,
        config(CongestionControl::Cubic),
        roles,
        2,
        9,
    );
    sim.run_until(secs(600));
    let got = received(&sim, 1);
    assert_eq!(got.len(), 1);
    let r = &got[0];
    assert_eq!(r.error, None);
    assert_eq!(r.bytes, total);
    assert_eq!(r.messages, total.div_ceil(777));
    assert!(r.closed, "the FIN arrived after all data");
    let stats = sim.host(0).stack.stats();
    assert!(stats.path_losses > 100, "loss was exercised: {stats:?}");
    assert!(
        stats.tcp_timeouts >= 2,
        "repeated RTOs were exercised: {stats:?}"
    );
    let rcv = sim.host(1).stack.stats();
    assert!(rcv.path_losses > 10, "ACK loss was exercised: {rcv:?}");
}

#[test]
fn two_flows_share_a_bottleneck_fairly() {
    let graph = switch_graph(20.0, 0.0, 0.0);
    let places = [
        at(100 * MBIT, 100 * MBIT),
        at(100 * MBIT, 100 * MBIT),
        at(100 * MBIT, 10 * MBIT),
    ];
    let roles = vec![
        sender(2, None, 16 * 1024),
        sender(2, None, 16 * 1024),
        sink(16 * 1024),
    ];
    let mut sim = build(
        &graph,
        &places,
        config(CongestionControl::Cubic),
        roles,
        2,
        3,
    );
    sim.run_until(secs(60));
    let got = received(&sim, 2);
    assert_eq!(got.len(), 2);
    let shares: Vec<f64> = got.iter().map(|r| r.bytes as f64).collect();
    let j = jain(&shares);
    eprintln!("bytes {shares:?} jain {j:.4}");
    assert!(j >= 0.9, "Jain index {j}");
    // Together they still fill the link.
    let total: f64 = shares.iter().sum::<f64>() * 8.0 / 60.0;
    assert!(total > 0.85 * 10e6, "aggregate {total}");
}

/// Identical on 1, 2 and 3 threads, with segmentation offload too.
#[test]
fn a_tcp_run_is_identical_on_one_and_two_threads() {
    let graph = switch_graph(10.0, 0.01, 5.0);
    let places = [
        at(50 * MBIT, 50 * MBIT),
        at(50 * MBIT, 50 * MBIT),
        at(50 * MBIT, 20 * MBIT),
    ];
    for (segment_offload, least_events) in [(false, 10_000), (true, 1_000)] {
        let run = |threads| {
            let roles = vec![
                sender(2, Some(2_000_000), 514),
                sender(2, None, 514),
                sink(514),
            ];
            let net = NetworkConfig {
                segment_offload,
                ..config(CongestionControl::Cubic)
            };
            let mut sim = build(&graph, &places, net, roles, threads, 5);
            let stats = sim.run_until(secs(20));
            (sim.trace_hash(), stats.events, total_received(&sim, 2))
        };
        let one = run(1);
        assert!(one.1 > least_events);
        assert_eq!(one, run(2));
        assert_eq!(one, run(3));
    }
}

/// Eight flows share a 10 Mbit/s bottleneck whose queue swings their RTT by tens of ms. With
/// Linux's RTO (SRTT plus a variance term of at least 200 ms) nearly every retransmission
/// repairs a packet the queue really dropped; with RFC 6298's (SRTT + 4·RTTVAR, floored at
/// 200 ms) the RTO settled a few ms above SRTT and a third of the retransmissions were
/// spurious timeouts (1,490 retransmissions for 958 drops).
#[test]
fn queueing_delay_swings_cause_no_spurious_timeouts() {
    let graph = switch_graph(25.0, 0.0, 0.0);
    let mut places = vec![at(100 * MBIT, 10 * MBIT)];
    let mut roles = vec![sink(64 * 1024)];
    for _ in 0..8 {
        places.push(at(100 * MBIT, 100 * MBIT));
        roles.push(sender(0, None, 64 * 1024));
    }
    let mut sim = build(
        &graph,
        &places,
        config(CongestionControl::Cubic),
        roles,
        1,
        1,
    );
    let rate = goodput(&mut sim, 0, secs(5), secs(60));
    let (mut retransmits, mut drops) = (0, 0);
    for h in 0..=8 {
        let s = sim.host(h).stack.stats();
        retransmits += s.tcp_retransmits;
        drops += s.up_drops + s.down_drops + s.path_losses;
    }
    eprintln!(
        "goodput {:.3} Mbit/s, {retransmits} retransmissions, {drops} drops",
        rate / 1e6
    );
    assert!(drops > 0, "the bottleneck queue never overflowed");
    assert!(
        retransmits * 100 <= drops * 105,
        "{retransmits} retransmissions for {drops} drops"
    );
    assert!(rate >= 0.9 * 10e6, "goodput {rate}");
}
