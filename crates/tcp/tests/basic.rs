//! Connection lifecycle, timers and flow control on a simple symmetric path.

use onionlab_tcp::{TcpConfig, TcpEvent, TcpFlags, TcpState};
use onionlab_transport_testkit::*;

fn path(rate: u64, one_way_ms: u64) -> LinkConfig {
    LinkConfig::new(rate, one_way_ms * MS, 1 << 20)
}

fn sim(cfg: &TcpConfig, rate: u64, one_way_ms: u64) -> Sim {
    Sim::tcp(cfg, 1, path(rate, one_way_ms), path(rate, one_way_ms), 1)
}

#[test]
fn handshake_transfer_and_orderly_close() {
    let cfg = TcpConfig::default();
    let mut s = sim(&cfg, 10_000_000, 10);
    s.eps[0].app = App::source(100_000, true);
    s.eps[1].app = App {
        close_on_peer_fin: true,
        ..App::sink()
    };
    s.start();
    s.run_until(200 * SEC);
    assert!(s.has_event(0, TcpEvent::Connected));
    assert!(s.has_event(1, TcpEvent::Connected));
    assert_eq!(s.delivered(1), 100_000);
    assert_eq!(s.eps[1].app.read_total, 100_000);
    assert!(s.has_event(1, TcpEvent::PeerFinished));
    assert!(s.has_event(0, TcpEvent::PeerFinished));
    // 100 kB does not fit the initial 16 KiB send buffer: the writer was told to resume.
    assert!(s.has_event(0, TcpEvent::Writable));
    assert!(s.has_event(1, TcpEvent::Readable));
    // The client closed first, so it went through TIME_WAIT; both are Closed by now.
    assert_eq!(s.tcp_state(0), Some(TcpState::Closed));
    assert_eq!(s.tcp_state(1), Some(TcpState::Closed));
    assert!(s.has_event(0, TcpEvent::Closed));
    assert!(s.has_event(1, TcpEvent::Closed));
    let info = s.tcp_conn(0).info();
    assert_eq!(info.bytes_acked, 100_000);
    assert_eq!(info.retransmits, 0);
    // Handshake RTT: 20 ms plus serialization.
    assert!(
        info.min_rtt >= 20 * MS && info.min_rtt < 25 * MS,
        "{info:?}"
    );
}

#[test]
fn time_wait_lasts_sixty_seconds() {
    let cfg = TcpConfig::default();
    let mut s = sim(&cfg, 10_000_000, 10);
    s.eps[0].app = App::source(1000, true);
    s.eps[1].app = App {
        close_on_peer_fin: true,
        ..App::sink()
    };
    s.start();
    s.run_until(5 * SEC);
    assert_eq!(s.tcp_state(0), Some(TcpState::TimeWait));
    assert_eq!(s.tcp_state(1), Some(TcpState::Closed));
    s.run_until(59 * SEC);
    assert_eq!(s.tcp_state(0), Some(TcpState::TimeWait));
    s.run_until(70 * SEC);
    assert_eq!(s.tcp_state(0), Some(TcpState::Closed));
}

#[test]
fn simultaneous_close_goes_through_closing() {
    let cfg = TcpConfig::default();
    let mut s = sim(&cfg, 10_000_000, 10);
    s.start();
    s.run_until(SEC);
    let now = s.now;
    s.tcp_conn_mut(0).close(now);
    s.tcp_conn_mut(1).close(now);
    s.pump(0);
    s.pump(1);
    s.run_until(2 * SEC);
    assert_eq!(s.tcp_state(0), Some(TcpState::TimeWait));
    assert_eq!(s.tcp_state(1), Some(TcpState::TimeWait));
}

#[test]
fn abort_sends_reset() {
    let cfg = TcpConfig::default();
    let mut s = sim(&cfg, 10_000_000, 10);
    s.eps[0].app = App::source(u64::MAX, false);
    s.start();
    s.run_until(SEC);
    let now = s.now;
    s.tcp_conn_mut(1).abort(now);
    s.pump(1);
    assert_eq!(s.tcp_state(1), Some(TcpState::Closed));
    s.run_until(2 * SEC);
    assert_eq!(s.tcp_state(0), Some(TcpState::Closed));
    assert!(s.has_event(0, TcpEvent::Reset));
    assert!(!s.has_event(1, TcpEvent::Reset));
}

#[test]
fn lost_syn_is_retransmitted_with_backoff() {
    let cfg = TcpConfig::default();
    let mut s = sim(&cfg, 10_000_000, 10);
    s.eps[0].record = true;
    let mut syns = 0;
    s.drop = Some(Box::new(move |from, p, _| {
        let Pkt::Tcp(seg) = p else { return false };
        if from == 0 && seg.flags.contains(TcpFlags::SYN) && syns < 2 {
            syns += 1;
            return true;
        }
        false
    }));
    s.start();
    s.run_until(10 * SEC);
    let syn_times: Vec<u64> = s.eps[0]
        .tcp_sent()
        .filter(|(_, seg)| seg.flags.contains(TcpFlags::SYN))
        .map(|(t, _)| t)
        .collect();
    assert_eq!(syn_times, vec![0, SEC, 3 * SEC]);
    assert_eq!(s.tcp_state(0), Some(TcpState::Established));
    // Karn: the handshake RTT was not measured from a retransmitted SYN.
    assert_eq!(s.tcp_conn(0).info().srtt, 0);
}

#[test]
fn syn_retries_exhausted_times_out() {
    let cfg = TcpConfig::default();
    let mut s = sim(&cfg, 10_000_000, 10);
    s.drop = Some(Box::new(|_, _, _| true));
    s.start();
    s.run_until(200 * SEC);
    assert_eq!(s.tcp_state(0), Some(TcpState::Closed));
    let t = s.event_time(0, TcpEvent::TimedOut).expect("timed out");
    // Linux: 1+2+4+8+16+32+64 = 127 s with 6 retries.
    assert_eq!(t, 127 * SEC);
}

#[test]
fn rto_backs_off_exponentially_and_recovers() {
    let cfg = TcpConfig::default();
    let mut s = sim(&cfg, 10_000_000, 25);
    s.eps[0].app = App::source(2_000_000, true);
    s.eps[0].record = true;
    // Black-hole the data direction between 1 s and 8 s.
    s.drop = Some(Box::new(|from, _, now| {
        from == 0 && (SEC..8 * SEC).contains(&now)
    }));
    s.start();
    s.run_until(SEC);
    let rto = s.tcp_conn(0).info().rto;
    let srtt_before = s.tcp_conn(0).info().srtt;
    assert!(rto >= 200 * MS);
    s.run_until(60 * SEC);
    assert_eq!(s.delivered(1), 2_000_000);
    // Retransmissions of the oldest outstanding byte during the outage.
    let una_rtx: Vec<u64> = {
        let sent: Vec<_> = s.eps[0].tcp_sent().collect();
        let first_lost = sent
            .iter()
            .find(|(t, seg)| *t >= SEC && seg.len > 0)
            .map(|(_, seg)| seg.seq)
            .unwrap();
        let _ = first_lost;
        let mut seen = std::collections::HashMap::new();
        let mut times = vec![];
        for (t, seg) in &sent {
            if seg.len == 0 {
                continue;
            }
            let n = seen.entry(seg.seq).or_insert(0);
            *n += 1;
            if *n >= 2 && *t >= SEC && *t < 9 * SEC {
                times.push(*t);
            }
        }
        times
    };
    assert!(una_rtx.len() >= 3, "{una_rtx:?}");
    let info = s.tcp_conn(0).info();
    assert!(info.rto_count >= 3, "{info:?}");
    let gaps: Vec<u64> = una_rtx.windows(2).map(|w| w[1] - w[0]).collect();
    println!(
        "retransmissions at {una_rtx:?}, gaps {gaps:?}, srtt {} -> {}",
        srtt_before, info.srtt
    );
    for w in gaps.windows(2) {
        assert!(
            w[1] >= 2 * w[0] - MS && w[1] <= 2 * w[0] + MS,
            "backoff not doubling: {gaps:?}"
        );
    }
    // Karn: the long outage did not inflate the smoothed RTT.
    assert!(
        info.srtt < 3 * srtt_before.max(60 * MS),
        "srtt {} before {}",
        info.srtt,
        srtt_before
    );
}

/// The delayed-ACK timer alone, without Linux's quick-ACK mode (which would acknowledge a
/// connection's first segments at once: `the_first_segments_are_acknowledged_at_once`).
#[test]
fn delayed_ack_timing() {
    let cfg = TcpConfig {
        quickack: false,
        ..TcpConfig::default()
    };
    let mut s = sim(&cfg, 100_000_000, 10);
    s.eps[1].record = true;
    s.start();
    s.run_until(SEC);
    let base = s.eps[1].sent.len();
    // One small segment: acknowledged only by the 40 ms delayed-ACK timer.
    let t0 = s.now;
    s.tcp_conn_mut(0).send(100);
    s.pump(0);
    s.run_until(2 * SEC);
    let acks: Vec<u64> = s.eps[1].sent[base..].iter().map(|&(t, _)| t - t0).collect();
    assert_eq!(acks.len(), 1, "{acks:?}");
    let arrival = 10 * MS + 20_000; // propagation plus serialization, roughly
    assert!(
        acks[0] >= 10 * MS + 40 * MS && acks[0] <= arrival + 41 * MS,
        "ack after {} ns",
        acks[0]
    );
    // Two full segments: acknowledged as soon as the second arrives.
    let base = s.eps[1].sent.len();
    let t0 = s.now;
    s.tcp_conn_mut(0).send(2 * 1448);
    s.pump(0);
    s.run_until(3 * SEC);
    let acks: Vec<u64> = s.eps[1].sent[base..].iter().map(|&(t, _)| t - t0).collect();
    assert_eq!(acks.len(), 1, "{acks:?}");
    assert!(acks[0] < 11 * MS, "ack after {} ns", acks[0]);
}

/// With Linux's quick-ACK mode a connection's first small data segments are acknowledged as
/// they arrive, and after 16 quick ACKs a lone small segment waits for the delayed ACK again.
#[test]
fn the_first_segments_are_acknowledged_at_once() {
    let cfg = TcpConfig::default();
    let mut s = sim(&cfg, 100_000_000, 10);
    s.eps[1].record = true;
    s.start();
    s.run_until(SEC);
    let arrival = 10 * MS + 20_000;
    let mut delays = Vec::new();
    for i in 0..17 {
        let base = s.eps[1].sent.len();
        let t0 = s.now;
        s.tcp_conn_mut(0).send(100);
        s.pump(0);
        // 60 ms apart: shorter than the RTO, so no silence grants quick ACKs anew, and long
        // enough for a delayed ACK.
        s.run_until(t0 + 60 * MS);
        let acks: Vec<u64> = s.eps[1].sent[base..].iter().map(|&(t, _)| t - t0).collect();
        assert_eq!(acks.len(), 1, "segment {i}: {acks:?}");
        delays.push(acks[0]);
    }
    assert!(
        delays[..16].iter().all(|&d| d <= arrival + MS),
        "quick ACKs: {delays:?}"
    );
    assert!(delays[16] >= 50 * MS, "the 17th waits: {delays:?}");
}

#[test]
fn zero_window_stalls_sender_and_persist_probe_resumes() {
    let cfg = TcpConfig {
        autotune: false,
        ..TcpConfig::default()
    };
    let mut s = sim(&cfg, 10_000_000, 10);
    s.eps[0].app = App::source(1_000_000, false);
    s.eps[1].app.reading = false;
    s.eps[0].record = true;
    s.start();
    s.run_until(3 * SEC);
    let stalled = s.delivered(1);
    assert_eq!(stalled, cfg.recv_buffer_initial);
    assert_eq!(s.tcp_conn(1).recv_available(), stalled);
    s.run_until(6 * SEC);
    assert_eq!(s.delivered(1), stalled, "sender overran a zero window");
    // Zero-length segments after the handshake are persist probes; they back off.
    let probes: Vec<u64> = s.eps[0]
        .tcp_sent()
        .filter(|(t, seg)| *t > 100 * MS && seg.len == 0)
        .map(|(t, _)| t)
        .collect();
    assert!(probes.len() >= 3, "persist probes at {probes:?}");
    assert!(probes[2] - probes[1] > probes[1] - probes[0]);
    // The reader resumes; its window update restarts the sender.
    s.eps[1].app.reading = true;
    s.pump(1);
    s.run_until(30 * SEC);
    assert_eq!(s.delivered(1), 1_000_000);
}

#[test]
fn window_update_lost_probe_recovers() {
    let cfg = TcpConfig {
        autotune: false,
        ..TcpConfig::default()
    };
    let mut s = sim(&cfg, 10_000_000, 10);
    s.eps[0].app = App::source(500_000, false);
    s.eps[1].app.reading = false;
    s.start();
    s.run_until(3 * SEC);
    // Drop exactly the reader's next segment: the window update.
    let mut dropped = false;
    s.drop = Some(Box::new(move |from, _, _| {
        if from == 1 && !dropped {
            dropped = true;
            return true;
        }
        false
    }));
    s.eps[1].app.reading = true;
    s.pump(1);
    s.run_until(60 * SEC);
    assert_eq!(s.delivered(1), 500_000);
}

#[test]
fn nagle_holds_small_segments_unless_nodelay() {
    for nodelay in [false, true] {
        // Without the tail loss probe: with 3 small segments out and the receiver's ACK
        // delayed 40 ms, a probe (2 RTTs + 2 ms here) would go out first and add a segment.
        let cfg = TcpConfig {
            nodelay,
            tail_loss_probe: false,
            ..TcpConfig::default()
        };
        let mut s = sim(&cfg, 100_000_000, 10);
        s.eps[0].record = true;
        s.start();
        s.run_until(SEC);
        let base = s.eps[0].sent.len();
        for _ in 0..3 {
            s.tcp_conn_mut(0).send(514);
            s.pump(0);
        }
        let immediate = s.eps[0]
            .tcp_sent()
            .skip(base)
            .filter(|(_, g)| g.len > 0)
            .count();
        s.run_until(2 * SEC);
        let data: Vec<u32> = s.eps[0]
            .tcp_sent()
            .skip(base)
            .filter(|(_, g)| g.len > 0)
            .map(|(_, g)| g.len)
            .collect();
        assert_eq!(s.delivered(1), 3 * 514);
        if nodelay {
            assert_eq!(immediate, 3);
            assert_eq!(data, vec![514, 514, 514]);
        } else {
            // The first cell goes out; the rest wait for its ACK and leave coalesced.
            assert_eq!(immediate, 1);
            assert_eq!(data, vec![514, 1028]);
        }
    }
}

#[test]
fn window_restarts_after_idle() {
    for restart in [true, false] {
        let cfg = TcpConfig {
            slow_start_after_idle: restart,
            ..TcpConfig::default()
        };
        let mut s = sim(&cfg, 100_000_000, 10);
        s.eps[0].app = App::source(3_000_000, false);
        s.start();
        s.run_until(5 * SEC);
        assert_eq!(s.delivered(1), 3_000_000);
        let before = s.tcp_conn(0).info().cwnd;
        assert!(before > 20, "cwnd {before}");
        s.run_until(15 * SEC);
        s.tcp_conn_mut(0).send(1000);
        s.pump(0);
        let after = s.tcp_conn(0).info().cwnd;
        if restart {
            assert_eq!(after, cfg.initial_cwnd);
        } else {
            assert_eq!(after, before);
        }
    }
}

#[test]
fn nagle_does_not_hold_a_tail_behind_full_segments() {
    // Linux's Minshall variant: full segments in flight do not hold back a short tail; only an
    // unacknowledged short segment does.
    let mut s = sim(&TcpConfig::default(), 100_000_000, 10);
    s.eps[0].record = true;
    s.start();
    s.run_until(SEC);
    let base = s.eps[0].sent.len();
    let mss = TcpConfig::default().mss;
    s.tcp_conn_mut(0).send(3 * u64::from(mss) + 100);
    s.pump(0);
    let immediate: Vec<u32> = s.eps[0]
        .tcp_sent()
        .skip(base)
        .filter(|(_, g)| g.len > 0)
        .map(|(_, g)| g.len)
        .collect();
    assert_eq!(immediate, vec![mss, mss, mss, 100]);
    // A second short write now waits for the first short segment's ACK.
    s.tcp_conn_mut(0).send(100);
    s.pump(0);
    let after = s.eps[0]
        .tcp_sent()
        .skip(base)
        .filter(|(_, g)| g.len > 0)
        .count();
    assert_eq!(after, 4, "the second tail is held");
    s.run_until(2 * SEC);
    assert_eq!(s.delivered(1), 3 * u64::from(mss) + 200);
}
