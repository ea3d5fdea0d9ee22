//! Streams end to end: exactly-once in-order delivery under loss, reordering and repeated
//! PTOs; flow control; loss detection by the packet and time thresholds; head-of-line
//! independence between streams; determinism; memory.

use onionlab_quic::{Frames, QuicConfig, QuicConnection, QuicEvent, StreamId};
use onionlab_transport_testkit::*;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

/// Four client streams of different sizes, each finished, and a reply on each from the
/// server; 5% loss both ways, reordering, and a 3 s black hole in the middle.
fn lossy_transfer(seed: u64, record: bool) -> Sim {
    let mut fwd = LinkConfig::new(10_000_000, 20 * MS, 64 * 1024);
    fwd.loss = 0.05;
    fwd.reorder = 0.05;
    fwd.reorder_delay = 10 * MS;
    let mut rev = fwd.clone();
    rev.queue_bytes = 1 << 20;
    let mut s = Sim::quic(QuicConfig::default(), fwd, rev, seed);
    s.eps[0].app.open = vec![(1_500_000, true), (400_000, true), (1, true), (0, true)];
    s.eps[1].app.reply = Some(200_000);
    s.eps[0].record = record;
    s.eps[1].record = record;
    s.drop = Some(Box::new(|_, _, now| (2 * SEC..5 * SEC).contains(&now)));
    s.start();
    s.run_until(120 * SEC);
    s
}

#[test]
fn every_byte_once_in_order_under_loss_reordering_and_ptos() {
    for seed in 1..=3 {
        let s = lossy_transfer(seed, false);
        let (c, srv) = (s.quic_conn(0), s.quic_conn(1));
        let (ci, si) = (c.info(), srv.info());
        println!(
            "seed {seed}: client sent {} pkts, lost {}, PTOs {}, persistent congestion {}, retransmitted {} B; server lost {}, PTOs {}",
            ci.packets_sent, ci.packets_lost, ci.ptos, ci.persistent_congestion, ci.stream_bytes_retransmitted, si.packets_lost, si.ptos
        );
        assert!(ci.ptos >= 2, "the black hole must cause repeated PTOs");
        let sizes = [1_500_000u64, 400_000, 1, 0];
        for (i, &size) in sizes.iter().enumerate() {
            let id = 4 * i as u64;
            let up = &s.eps[1].streams[&id];
            let down = &s.eps[0].streams[&id];
            let done = down.finished_at.unwrap_or(u64::MAX);
            println!(
                "  stream {id}: {size} B up, read {}; 200000 B back, read {}; done at {:.2} s",
                up.read,
                down.read,
                done as f64 / SEC as f64
            );
            // Reads were checked against arrived ranges as they happened; here, exactly the
            // bytes written arrived, and both FINs.
            assert_eq!(up.read, size);
            assert!(up.peer_finished);
            assert_eq!(down.read, 200_000);
            assert!(down.peer_finished);
        }
        assert_eq!(ci.stream_bytes_received, 4 * 200_000);
        assert_eq!(si.stream_bytes_received, 1_900_001);
        // Every stream finished both ways is forgotten.
        assert_eq!(c.streams(), 0);
        assert_eq!(srv.streams(), 0);
        assert!(!c.stream_is_open(StreamId(0)));
        assert_eq!(c.readable(StreamId(0)), 0);
        assert!(s.has_event(1, QuicEvent::StreamOpened(StreamId(12))));
    }
}

#[test]
fn same_run_same_packets() {
    let a = lossy_transfer(9, true);
    let b = lossy_transfer(9, true);
    let n: usize = a.eps.iter().map(|e| e.sent.len()).sum();
    println!(
        "trace hashes {:016x} {:016x} over {n} packets",
        a.trace_hash(),
        b.trace_hash()
    );
    assert!(n > 1000);
    assert_eq!(a.trace_hash(), b.trace_hash());
    let c = lossy_transfer(10, true);
    assert_ne!(a.trace_hash(), c.trace_hash(), "the seed must matter");
}

/// Announced limits, as seen on the wire from the receiver (endpoint 1).
#[derive(Default)]
struct Announced {
    max_data: u64,
    stream: BTreeMap<u32, u64>,
    /// Highest end offset the sender sent per stream.
    sent_end: BTreeMap<u32, u64>,
    violations: Vec<String>,
    max_gap: u64,
}

#[test]
fn flow_control_limits_are_never_exceeded() {
    let window = 16 * 1024;
    let cfg = QuicConfig {
        stream_window: window,
        conn_window: 24 * 1024,
        autotune: false,
        ..QuicConfig::default()
    };
    let fwd = LinkConfig::new(10_000_000, 20 * MS, 1 << 20);
    let rev = LinkConfig::new(10_000_000, 20 * MS, 1 << 20);
    let mut s = Sim::quic(cfg.clone(), fwd, rev, 4);
    s.eps[0].app.open = vec![(u64::MAX, false), (u64::MAX, false)];
    // A slow reader: 200 kB/s for everything.
    let rate = 200_000;
    s.eps[1].app.read_rate = Some(rate);
    let seen = Rc::new(RefCell::new(Announced {
        max_data: cfg.conn_window,
        ..Announced::default()
    }));
    let seen2 = seen.clone();
    s.on_send = Some(Box::new(move |sim: &Sim, from: usize, p: &Pkt| {
        let Pkt::Quic(p) = p else { return };
        let mut a = seen2.borrow_mut();
        if from == 1 {
            if p.frames.contains(Frames::MAX_DATA) {
                a.max_data = a.max_data.max(p.max_data);
            }
            if p.frames.contains(Frames::MAX_STREAM_DATA) {
                let e = a.stream.entry(p.max_stream_data_id).or_insert(window);
                *e = (*e).max(p.max_stream_data);
            }
            return;
        }
        let server = sim.eps[1].conn.as_ref().map(|c| match c {
            Conn::Quic(c) => c,
            _ => unreachable!(),
        });
        for f in p.stream_frames() {
            let end = f.offset + u64::from(f.len);
            let limit = *a.stream.get(&f.id).unwrap_or(&window);
            if end > limit {
                a.violations
                    .push(format!("stream {} to {end} beyond {limit}", f.id));
            }
            // Beyond the receiver's read offset by at most the window.
            if let Some(srv) = server {
                let read = srv.read_offset(f.stream());
                a.max_gap = a.max_gap.max(end - read);
                if end > read + window {
                    a.violations
                        .push(format!("stream {} to {end}, read {read}", f.id));
                }
            }
            let e = a.sent_end.entry(f.id).or_insert(0);
            *e = (*e).max(end);
        }
        let total: u64 = a.sent_end.values().sum();
        if total > a.max_data {
            let m = a.max_data;
            a.violations
                .push(format!("connection at {total} beyond {m}"));
        }
    }));
    s.start();
    s.run_until(20 * SEC);
    let read = s.delivered(1);
    let bps = read as f64 / 20.0;
    let a = seen.borrow();
    println!(
        "read {read} B in 20 s ({bps:.0} B/s, reader {rate} B/s); largest sent offset beyond the read offset {} (window {window}); final MAX_DATA {}; violations {}",
        a.max_gap,
        a.max_data,
        a.violations.len()
    );
    assert!(
        a.violations.is_empty(),
        "{:?}",
        &a.violations[..a.violations.len().min(5)]
    );
    assert!(a.max_gap > window / 2, "the window was used");
    // The reader, not the link, sets the pace, and both streams progress.
    assert!(
        bps > 0.8 * rate as f64 && bps <= 1.01 * rate as f64,
        "{bps}"
    );
    for id in [0, 4] {
        assert!(s.eps[1].streams[&id].read > 1_000_000);
    }
    let srv = s.quic_conn(1);
    assert_eq!(srv.recv_limits(StreamId(0)).0, a.max_data);
}

/// Bulk on one stream with one data packet dropped: the packet threshold declares it lost
/// (no PTO) and only its data is sent again, once.
#[test]
fn single_loss_found_by_packet_threshold() {
    let fwd = LinkConfig::new(10_000_000, 25 * MS, 1 << 20);
    let rev = LinkConfig::new(10_000_000, 25 * MS, 1 << 20);
    let mut s = Sim::quic(QuicConfig::default(), fwd, rev, 1);
    s.eps[0].app.open = vec![(2_000_000, true)];
    let dropped = Rc::new(RefCell::new(None));
    let d2 = dropped.clone();
    s.drop = Some(Box::new(move |from, p, now| {
        let Pkt::Quic(p) = p else { return false };
        let mut d = d2.borrow_mut();
        if from == 0 && now > 300 * MS && d.is_none() && p.stream_frames > 0 {
            *d = Some(*p);
            return true;
        }
        false
    }));
    s.start();
    s.run_until(10 * SEC);
    let info = s.quic_conn(0).info();
    let lost = dropped.borrow().expect("a packet was dropped");
    println!(
        "dropped pn {} ({} stream bytes): lost {}, PTOs {}, retransmitted {} B, congestion events {}",
        lost.pn,
        lost.stream_bytes(),
        info.packets_lost,
        info.ptos,
        info.stream_bytes_retransmitted,
        info.congestion_events
    );
    assert_eq!(info.packets_lost, 1);
    assert_eq!(info.ptos, 0);
    assert_eq!(info.stream_bytes_retransmitted, lost.stream_bytes());
    assert_eq!(info.congestion_events, 1);
    assert_eq!(s.eps[1].streams[&0].read, 2_000_000);
}

/// Small writes every 2 ms; one packet is held back 5 ms (a tenth of the RTT), so fewer than
/// three later packets overtake it and it arrives within 9/8 RTT: not declared lost.
#[test]
fn late_packet_within_time_threshold_is_not_lost() {
    let fwd = LinkConfig::new(100_000_000, 25 * MS, 1 << 20);
    let rev = LinkConfig::new(100_000_000, 25 * MS, 1 << 20);
    let mut s = Sim::quic(QuicConfig::default(), fwd, rev, 1);
    s.tick = 2 * MS;
    s.eps[0].app.open = vec![(0, false)];
    s.eps[0].app.write_per_tick = 500;
    let late = Rc::new(RefCell::new(None));
    let l2 = late.clone();
    s.delay = Some(Box::new(move |from, p, now| {
        let Pkt::Quic(p) = p else { return 0 };
        let mut l = l2.borrow_mut();
        if from == 0 && now > SEC && l.is_none() && p.stream_frames > 0 {
            *l = Some(p.pn);
            return 5 * MS;
        }
        0
    }));
    s.start();
    s.run_until(3 * SEC);
    let info = s.quic_conn(0).info();
    println!(
        "late pn {:?}: lost {}, PTOs {}, retransmitted {} B, srtt {:.1} ms",
        late.borrow(),
        info.packets_lost,
        info.ptos,
        info.stream_bytes_retransmitted,
        info.srtt as f64 / MS as f64
    );
    assert!(late.borrow().is_some());
    assert_eq!(info.packets_lost, 0);
    assert_eq!(info.stream_bytes_retransmitted, 0);

    // Held back 20 ms instead, it is overtaken by more than three packets: lost (and resent),
    // although it arrives in the end.
    let fwd = LinkConfig::new(100_000_000, 25 * MS, 1 << 20);
    let rev = LinkConfig::new(100_000_000, 25 * MS, 1 << 20);
    let mut s = Sim::quic(QuicConfig::default(), fwd, rev, 1);
    s.tick = 2 * MS;
    s.eps[0].app.open = vec![(0, false)];
    s.eps[0].app.write_per_tick = 500;
    let mut done = false;
    s.delay = Some(Box::new(move |from, p, now| {
        let Pkt::Quic(p) = p else { return 0 };
        if from == 0 && now > SEC && !done && p.stream_frames > 0 {
            done = true;
            return 20 * MS;
        }
        0
    }));
    s.start();
    s.run_until(3 * SEC);
    let info = s.quic_conn(0).info();
    println!(
        "held 20 ms: lost {}, retransmitted {} B",
        info.packets_lost, info.stream_bytes_retransmitted
    );
    assert_eq!(info.packets_lost, 1);
}

/// Two bulk streams; one packet carrying only stream A is dropped. While A waits for the
/// retransmission, B keeps delivering: streams are independent at the transport level.
#[test]
fn streams_have_no_head_of_line_blocking() {
    let fwd = LinkConfig::new(10_000_000, 25 * MS, bdp(10_000_000, 50 * MS));
    let rev = LinkConfig::new(10_000_000, 25 * MS, 1 << 20);
    let mut s = Sim::quic(QuicConfig::default(), fwd, rev, 1);
    s.eps[0].app.open = vec![(u64::MAX, false), (u64::MAX, false)];
    s.eps[1].app.record_progress = true;
    let dropped = Rc::new(RefCell::new(None));
    let d2 = dropped.clone();
    s.drop = Some(Box::new(move |from, p, now| {
        let Pkt::Quic(p) = p else { return false };
        let mut d = d2.borrow_mut();
        if from == 0 && now > SEC && d.is_none() && p.stream_frames == 1 && p.stream[0].id == 0 {
            *d = Some((now, p.stream[0].offset));
            return true;
        }
        false
    }));
    s.start();
    s.run_until(3 * SEC);
    let (t_drop, hole) = dropped.borrow().expect("dropped");
    let a = &s.eps[1].streams[&0].progress;
    let b = &s.eps[1].streams[&4].progress;
    // When A got past the hole.
    let t_fix = a
        .iter()
        .find(|&&(_, off)| off > hole)
        .expect("A recovered")
        .0;
    let at = |v: &Vec<(u64, u64)>, t: u64| {
        v.iter()
            .take_while(|&&(x, _)| x <= t)
            .last()
            .map_or(0, |&(_, o)| o)
    };
    let a_before = at(a, t_fix - 1);
    let b_at_drop = at(b, t_drop + 25 * MS);
    let b_before_fix = at(b, t_fix - 1);
    println!(
        "hole in A at {hole}, dropped at {:.1} ms, repaired at {:.1} ms; meanwhile A read {} -> {}, B read {} -> {}",
        t_drop as f64 / MS as f64,
        t_fix as f64 / MS as f64,
        at(a, t_drop + 25 * MS),
        a_before,
        b_at_drop,
        b_before_fix
    );
    assert!(a_before <= hole, "A cannot pass its hole");
    assert!(
        t_fix > t_drop + 50 * MS,
        "repair takes at least a round trip"
    );
    assert!(b_before_fix > b_at_drop + 20_000, "B kept delivering");
    assert_eq!(s.quic_conn(0).info().ptos, 0);
}

#[test]
fn sizes() {
    let packet = std::mem::size_of::<onionlab_quic::QuicPacket>();
    let conn = std::mem::size_of::<QuicConnection>();
    assert!(packet <= 112, "QuicPacket is {packet} bytes");
    // An established, idle connection with one idle open stream each way.
    let fwd = LinkConfig::new(10_000_000, 25 * MS, 1 << 20);
    let rev = LinkConfig::new(10_000_000, 25 * MS, 1 << 20);
    let mut s = Sim::quic(QuicConfig::default(), fwd, rev, 1);
    s.start();
    s.run_until(SEC);
    let idle = s.quic_conn(0).heap_bytes();
    let idle_server = s.quic_conn(1).heap_bytes();
    let id = s.quic_conn_mut(0).open_stream().unwrap();
    s.eps[0].streams.entry(id.0).or_default().to_send = 100;
    s.pump(0);
    s.run_until(2 * SEC);
    let with_stream = s.quic_conn(0).heap_bytes();
    let server_with_stream = s.quic_conn(1).heap_bytes();
    // A hundred more idle streams, to price one stream apart from buffers the connection
    // keeps anyway.
    for _ in 0..100 {
        let ep = &mut s.eps[0];
        let Some(Conn::Quic(c)) = ep.conn.as_mut() else {
            unreachable!()
        };
        let id = c.open_stream().unwrap();
        ep.streams.entry(id.0).or_default().to_send = 100;
    }
    s.pump(0);
    s.run_until(3 * SEC);
    let with_101 = s.quic_conn(0).heap_bytes();
    let per_stream = (s.quic_conn(1).heap_bytes() - server_with_stream) / 100;
    let per_stream_client = (with_101 - with_stream) / 100;
    // A bulk transfer that ends leaves no buffers behind.
    s.eps[0].streams.entry(id.0).or_default().to_send = 7_000_000;
    s.pump(0);
    s.run_until(20 * SEC);
    let after_bulk = s.quic_conn(0).heap_bytes();
    println!(
        "QuicPacket {packet} B; QuicConnection {conn} B; heap of an idle connection: client {idle} B, server {idle_server} B; with one idle stream: client {with_stream} B, server {server_with_stream} B; per idle stream {per_stream_client} B (opener), {per_stream} B (peer); with 101 streams {with_101} B, and after a 7 MB transfer on one of them {after_bulk} B"
    );
    assert!(conn <= 800, "connection {conn}");
    assert!(idle <= 512, "idle connection heap {idle}");
    assert!(
        per_stream < 512 && per_stream_client < 512,
        "per stream {per_stream}"
    );
    assert!(after_bulk <= with_101 + 512, "after bulk {after_bulk}");
    assert_eq!(s.eps[1].streams[&id.0].read, 7_000_100);
    assert_eq!(s.quic_conn(1).streams(), 101);
}
