//! The handshake: one round trip for the client, one and a half for the server, and recovery
//! of lost handshake packets by PTO.

use onionlab_quic::{QuicConfig, QuicEvent, Space};
use onionlab_transport_testkit::*;

fn link() -> (LinkConfig, LinkConfig) {
    (
        LinkConfig::new(10_000_000, 25 * MS, 1 << 20),
        LinkConfig::new(10_000_000, 25 * MS, 1 << 20),
    )
}

#[test]
fn handshake_takes_one_round_trip() {
    let (fwd, rev) = link();
    let mut s = Sim::quic(QuicConfig::default(), fwd, rev, 1);
    s.eps[0].record = true;
    s.eps[1].record = true;
    s.start();
    s.run_until(2 * SEC);
    let client = s
        .event_time(0, QuicEvent::Connected)
        .expect("client connected");
    let server = s
        .event_time(1, QuicEvent::Connected)
        .expect("server connected");
    let first: Vec<_> = s.eps[0].sent.iter().map(|(_, p)| *p).collect();
    let srv: Vec<_> = s.eps[1].sent.iter().map(|(t, p)| (*t, *p)).collect();
    for (who, sent) in [("client", &s.eps[0].sent), ("server", &s.eps[1].sent)] {
        for (t, p) in sent.iter().take(8) {
            if let Pkt::Quic(p) = p {
                println!(
                    "{who} {:8.3} ms {:?} pn {} {} B {:?} crypto {}+{}",
                    *t as f64 / MS as f64,
                    p.space,
                    p.pn,
                    p.bytes,
                    p.frames,
                    p.crypto_offset,
                    p.crypto_len
                );
            }
        }
    }
    println!(
        "client Connected at {:.2} ms, server at {:.2} ms",
        client as f64 / MS as f64,
        server as f64 / MS as f64
    );
    // The client's first datagram is a padded Initial.
    match first[0] {
        Pkt::Quic(p) => {
            assert_eq!(p.space, Space::Initial);
            assert_eq!(p.bytes, 1200);
        }
        _ => unreachable!(),
    }
    // Server flight within 3x of 1200 bytes before the client is validated.
    let flight: u32 = srv
        .iter()
        .filter(|(t, _)| *t == srv[0].0)
        .map(|(_, p)| match p {
            Pkt::Quic(p) => p.bytes,
            _ => 0,
        })
        .sum();
    println!("server first flight {flight} bytes");
    assert!((3000..=3600).contains(&flight), "flight {flight}");
    // One RTT (50 ms) plus serialisation (about 1 ms for the Initial, 2.6 ms for the flight).
    assert!((50 * MS..=56 * MS).contains(&client), "client {client}");
    assert!((75 * MS..=82 * MS).contains(&server), "server {server}");
    assert!(s.quic_conn(0).is_established() && s.quic_conn(1).is_established());
    let ci = s.quic_conn(0).info();
    let si = s.quic_conn(1).info();
    println!("client {ci:?}\nserver {si:?}");
    assert_eq!(ci.ptos + si.ptos, 0);
    assert_eq!(ci.bytes_in_flight + si.bytes_in_flight, 0);
}

#[test]
fn lost_initial_recovered_by_pto() {
    let (fwd, rev) = link();
    let mut s = Sim::quic(QuicConfig::default(), fwd, rev, 1);
    let mut dropped = false;
    s.drop = Some(Box::new(move |from, _, _| {
        if from == 0 && !dropped {
            dropped = true;
            return true;
        }
        false
    }));
    s.start();
    s.run_until(5 * SEC);
    let client = s
        .event_time(0, QuicEvent::Connected)
        .expect("client connected");
    let server = s
        .event_time(1, QuicEvent::Connected)
        .expect("server connected");
    let info = s.quic_conn(0).info();
    println!(
        "lost Initial: client Connected at {:.1} ms, server at {:.1} ms, client PTOs {}",
        client as f64 / MS as f64,
        server as f64 / MS as f64,
        info.ptos
    );
    // The first PTO: 333 ms + 4 * 166.5 ms = 999 ms.
    assert_eq!(info.ptos, 1);
    assert!((1049 * MS..1100 * MS).contains(&client), "client {client}");
}

#[test]
fn lost_server_flight_recovered_by_pto() {
    let (fwd, rev) = link();
    let mut s = Sim::quic(QuicConfig::default(), fwd, rev, 1);
    s.drop = Some(Box::new(move |from, _, now| from == 1 && now < 30 * MS));
    s.start();
    s.run_until(5 * SEC);
    let client = s
        .event_time(0, QuicEvent::Connected)
        .expect("client connected");
    let server = s
        .event_time(1, QuicEvent::Connected)
        .expect("server connected");
    let (ci, si) = (s.quic_conn(0).info(), s.quic_conn(1).info());
    println!(
        "lost server flight: client Connected at {:.1} ms, server at {:.1} ms, PTOs {} / {}",
        client as f64 / MS as f64,
        server as f64 / MS as f64,
        ci.ptos,
        si.ptos
    );
    assert!(si.ptos >= 1);
    assert!(client > SEC && client < 2 * SEC, "client {client}");
    assert!(server > client);
}

#[test]
fn idle_timeout_and_close() {
    let (fwd, rev) = link();
    let mut s = Sim::quic(QuicConfig::default(), fwd, rev, 1);
    s.start();
    s.run_until(SEC);
    // Cut the path: both sides time out 30 s after they last heard from each other, however
    // many PTOs they try on the way.
    s.drop = Some(Box::new(|_, _, _| true));
    s.eps[0].app.open = vec![];
    s.run_until(40 * SEC);
    assert!(s.has_event(0, QuicEvent::TimedOut));
    assert!(s.has_event(1, QuicEvent::TimedOut));
    assert!(s.quic_conn(0).is_closed() && s.quic_conn(0).poll_timeout().is_none());

    // An orderly close reaches the peer.
    let (fwd, rev) = link();
    let mut s = Sim::quic(QuicConfig::default(), fwd, rev, 1);
    s.start();
    s.run_until(SEC);
    s.quic_conn_mut(0).close(SEC);
    s.pump(0);
    s.run_until(2 * SEC);
    assert!(s.has_event(0, QuicEvent::Closed));
    assert!(s.has_event(1, QuicEvent::Closed));
    assert!(s.quic_conn(0).is_closed() && s.quic_conn(1).is_closed());
}
