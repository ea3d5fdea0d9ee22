//! The application side of each transport: what an endpoint's [`App`](crate::App) does each
//! time its connection is polled, until neither has anything more to do. Each driver returns
//! the connection's next deadline for the event loop.
//!
//! A driver borrows the endpoint's fields in place: moving the connection out and back would
//! copy several hundred bytes on every packet.

use crate::endpoint::Endpoint;
use crate::transport::{Conn, Event, Pkt};
use crate::NEVER;
use onionlab_engine::time::SimTime;
use onionlab_quic::{QuicEvent, StreamId};
use onionlab_tcp::TcpEvent;

/// Drives a QUIC connection: opens the scripted streams on the first call, then handles
/// events, writes, finishes and reads on every stream, and collects packets into `out`.
/// Every read is checked against the ranges that arrived.
pub(crate) fn quic(ep: &mut Endpoint, now: SimTime, check: bool, out: &mut Vec<Pkt>) -> SimTime {
    let Endpoint {
        conn: Some(Conn::Quic(c)),
        app,
        streams,
        events,
        started,
        ..
    } = ep
    else {
        panic!("not a QUIC endpoint");
    };
    if !*started {
        *started = true;
        for &(bytes, fin) in &app.open {
            let s = c.open_stream().expect("stream");
            let st = streams.entry(s.0).or_default();
            st.to_send = bytes;
            st.fin_when_done = fin;
        }
    }
    loop {
        let mut progressed = false;
        while let Some(e) = c.poll_event() {
            events.push((now, Event::Quic(e)));
            progressed = true;
            match e {
                QuicEvent::StreamOpened(s) => {
                    let st = streams.entry(s.0).or_default();
                    st.reply = app.reply;
                }
                QuicEvent::StreamFinished(s) => {
                    let st = streams.entry(s.0).or_default();
                    assert!(!st.peer_finished, "StreamFinished twice");
                    st.peer_finished = true;
                    st.finished_at = Some(now);
                    if c.stream_is_open(s) {
                        assert_eq!(st.read, c.read_offset(s), "finished before all was read");
                    }
                    if let Some(r) = st.reply.take() {
                        st.to_send = r;
                        st.fin_when_done = true;
                    }
                }
                _ => {}
            }
        }
        let ids: Vec<u64> = streams.keys().copied().collect();
        for id in ids {
            let s = StreamId(id);
            let st = streams.get_mut(&id).expect("a key just listed");
            if st.to_send > 0 {
                let n = c.send(s, st.to_send);
                if st.to_send != u64::MAX {
                    st.to_send -= n;
                }
                st.written += n;
                assert_eq!(c.written(s), st.written, "written");
                progressed |= n > 0;
            }
            if st.to_send == 0 && st.fin_when_done && !st.fin_sent {
                st.fin_sent = true;
                c.finish(s);
                progressed = true;
            }
            if app.reading && c.readable(s) > 0 {
                let max = if app.read_rate.is_some() {
                    app.read_budget
                } else {
                    u64::MAX
                };
                let before = c.read_offset(s);
                assert_eq!(before, st.read, "read offset");
                let n = c.read(s, max);
                if app.read_rate.is_some() {
                    app.read_budget -= n;
                }
                if n > 0 {
                    assert_eq!(c.read_offset(s), before + n);
                    assert!(
                        st.covered(before, before + n),
                        "stream {id} delivered [{before}, {}) which never arrived: {:?}",
                        before + n,
                        st.arrived
                    );
                    st.read += n;
                    if app.record_progress {
                        st.progress.push((now, st.read));
                    }
                    progressed = true;
                }
            }
        }
        while let Some(p) = c.poll_transmit(now) {
            assert!(p.bytes <= c.info().max_datagram, "oversized packet {p:?}");
            out.push(Pkt::Quic(p));
            progressed = true;
        }
        if !progressed {
            break;
        }
    }
    if check {
        c.check_invariants();
    }
    c.poll_timeout().unwrap_or(NEVER)
}

/// Drives a TCP connection: handles events, reads, writes and closes as the application's
/// script says, and collects segments into `out`.
pub(crate) fn tcp(ep: &mut Endpoint, now: SimTime, check: bool, out: &mut Vec<Pkt>) -> SimTime {
    let Endpoint {
        conn: Some(Conn::Tcp(c)),
        app,
        events,
        last_delivered,
        ..
    } = ep
    else {
        panic!("not a TCP endpoint");
    };
    loop {
        let mut progressed = false;
        while let Some(e) = c.poll_event() {
            events.push((now, Event::Tcp(e)));
            if e == TcpEvent::PeerFinished && app.close_on_peer_fin {
                app.close_when_done = true;
            }
            progressed = true;
        }
        if app.reading && c.recv_available() > 0 {
            app.read_total += c.read(u64::MAX);
            progressed = true;
        }
        if app.to_send > 0 {
            let n = c.send(app.to_send);
            if app.to_send != u64::MAX {
                app.to_send -= n;
            }
            progressed |= n > 0;
        }
        if app.to_send == 0 && app.close_when_done && !app.closed {
            app.closed = true;
            c.close(now);
            progressed = true;
        }
        while let Some(seg) = c.poll_transmit(now) {
            out.push(Pkt::Tcp(seg));
            progressed = true;
        }
        if !progressed {
            break;
        }
    }
    let d = c.delivered();
    assert!(d >= *last_delivered, "delivered went backwards");
    *last_delivered = d;
    if check {
        c.check_invariants();
    }
    c.poll_timeout().unwrap_or(NEVER)
}
