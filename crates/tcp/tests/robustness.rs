//! Correctness under adverse conditions: every byte arrives in order exactly once, and loss
//! recovery takes the path it should.

use onionlab_tcp::{CongestionControl, TcpConfig, TcpEvent, TcpState};
use onionlab_transport_testkit::*;

#[test]
fn lossy_reordering_path_delivers_every_byte_once() {
    let total = 1_500_000;
    let mut runs = 0;
    for sack in [true, false] {
        for cc in [CongestionControl::Cubic, CongestionControl::Reno] {
            for seed in 1..=3u64 {
                let cfg = TcpConfig {
                    sack,
                    congestion: cc,
                    max_retries: 30,
                    ..TcpConfig::default()
                };
                let mut fwd = LinkConfig::new(20_000_000, 20 * MS, 200_000);
                fwd.loss = 0.05;
                fwd.reorder = 0.1;
                fwd.reorder_delay = 30 * MS;
                let mut rev = LinkConfig::new(20_000_000, 20 * MS, 200_000);
                rev.loss = 0.02;
                rev.reorder = 0.1;
                rev.reorder_delay = 30 * MS;
                let mut s = Sim::tcp(&cfg, 1, fwd, rev, seed);
                s.eps[0].app = App::source(total, true);
                s.eps[1].app.close_on_peer_fin = true;
                // Periodic outages in both directions force repeated timeouts.
                s.drop = Some(Box::new(|_, _, now| {
                    let phase = now % (10 * SEC);
                    (3 * SEC..4 * SEC).contains(&phase)
                }));
                s.start();
                s.run_until(600 * SEC);
                let rx = s.tcp_conn(1);
                let info = s.tcp_conn(0).info();
                assert_eq!(rx.delivered(), total, "sack {sack} {cc:?} seed {seed}");
                assert_eq!(s.eps[1].app.read_total, total);
                assert_eq!(info.bytes_acked, total);
                assert!(s.has_event(1, TcpEvent::PeerFinished));
                assert!(info.rto_count > 0 && info.retransmits > 0);
                assert!(matches!(
                    s.tcp_state(0),
                    Some(TcpState::TimeWait | TcpState::Closed)
                ));
                runs += 1;
                println!(
                    "sack {sack} {cc:?} seed {seed}: rtx {} rto {} fr {} done",
                    info.retransmits, info.rto_count, info.fast_recoveries
                );
            }
        }
    }
    assert_eq!(runs, 12);
}

#[test]
fn sack_recovers_three_losses_in_one_episode() {
    let cfg = TcpConfig::default();
    let fwd = LinkConfig::new(100_000_000, 25 * MS, 1 << 20);
    let rev = LinkConfig::new(100_000_000, 25 * MS, 1 << 20);
    let mut s = Sim::tcp(&cfg, 1, fwd, rev, 1);
    s.eps[0].app = App::source(300_000, true);
    // Drop the first transmissions of data segments 12, 15 and 18: all in the second window.
    let mut dropped = Vec::new();
    s.drop = Some(Box::new(move |from, p, _| {
        let Pkt::Tcp(seg) = p else { return false };
        if from != 0 || seg.len == 0 {
            return false;
        }
        let index = (seg.seq - 1001) / 1448;
        if [12, 15, 18].contains(&index) && !dropped.contains(&index) {
            dropped.push(index);
            return true;
        }
        false
    }));
    s.start();
    s.run_until(30 * SEC);
    assert_eq!(s.delivered(1), 300_000);
    let info = s.tcp_conn(0).info();
    println!("{info:?}");
    assert_eq!(info.rto_count, 0);
    assert_eq!(info.retransmits, 3);
    assert_eq!(info.fast_recoveries, 1);
}

#[test]
fn newreno_recovers_three_losses_without_timeout() {
    let cfg = TcpConfig {
        sack: false,
        ..TcpConfig::default()
    };
    let fwd = LinkConfig::new(100_000_000, 25 * MS, 1 << 20);
    let rev = LinkConfig::new(100_000_000, 25 * MS, 1 << 20);
    let mut s = Sim::tcp(&cfg, 1, fwd, rev, 1);
    s.eps[0].app = App::source(300_000, true);
    let mut dropped = Vec::new();
    s.drop = Some(Box::new(move |from, p, _| {
        let Pkt::Tcp(seg) = p else { return false };
        if from != 0 || seg.len == 0 {
            return false;
        }
        let index = (seg.seq - 1001) / 1448;
        if [12, 15, 18].contains(&index) && !dropped.contains(&index) {
            dropped.push(index);
            return true;
        }
        false
    }));
    s.start();
    s.run_until(30 * SEC);
    assert_eq!(s.delivered(1), 300_000);
    let info = s.tcp_conn(0).info();
    println!("{info:?}");
    // One partial ACK per loss: three retransmissions, one episode, no timeout.
    assert_eq!(info.rto_count, 0);
    assert_eq!(info.retransmits, 3);
    assert_eq!(info.fast_recoveries, 1);
}

#[test]
fn bidirectional_transfer_with_loss() {
    let cfg = TcpConfig::default();
    let mut fwd = LinkConfig::new(10_000_000, 10 * MS, 100_000);
    fwd.loss = 0.02;
    let mut rev = LinkConfig::new(10_000_000, 10 * MS, 100_000);
    rev.loss = 0.02;
    let mut s = Sim::tcp(&cfg, 1, fwd, rev, 9);
    s.eps[0].app = App::source(1_000_000, true);
    s.eps[1].app = App::source(700_000, true);
    s.start();
    s.run_until(300 * SEC);
    assert_eq!(s.delivered(1), 1_000_000);
    assert_eq!(s.delivered(0), 700_000);
    assert_eq!(s.tcp_state(0), Some(TcpState::Closed));
    assert_eq!(s.tcp_state(1), Some(TcpState::Closed));
}

#[test]
fn idle_connection_owns_no_heap_and_is_small() {
    let size = std::mem::size_of::<onionlab_tcp::TcpConnection>();
    println!("size_of::<TcpConnection>() = {size}");
    assert!(size <= 440);

    // After a lossy, reordered exchange both ends are idle and hold no heap memory.
    let cfg = TcpConfig::default();
    let mut fwd = LinkConfig::new(10_000_000, 10 * MS, 100_000);
    fwd.loss = 0.03;
    fwd.reorder = 0.2;
    fwd.reorder_delay = 20 * MS;
    let mut rev = fwd.clone();
    rev.loss = 0.01;
    let mut s = Sim::tcp(&cfg, 1, fwd, rev, 4);
    s.eps[0].app = App::source(500_000, false);
    s.eps[1].app = App::source(200_000, false);
    s.start();
    s.run_until(5 * SEC);
    assert!(s.tcp_conn(0).info().retransmits > 0);
    s.drop = Some(Box::new(|_, _, _| false));
    s.links[0].cfg.loss = 0.0;
    s.links[1].cfg.loss = 0.0;
    s.run_until(120 * SEC);
    assert_eq!(s.delivered(1), 500_000);
    assert_eq!(s.delivered(0), 200_000);
    for i in 0..2 {
        assert_eq!(s.tcp_state(i), Some(TcpState::Established));
        assert_eq!(s.tcp_conn(i).heap_bytes(), 0, "endpoint {i}");
        assert_eq!(s.tcp_conn(i).info().unacked, 0);
        assert_eq!(
            s.tcp_conn(i).poll_timeout(),
            None,
            "idle connection keeps a timer"
        );
    }
}
