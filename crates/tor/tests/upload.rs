//! Clients that upload: the client as the sending end of flow control, the exit as the
//! receiving end writing to the server, and the server answering once it has every byte.

mod common;

use common::*;
use onionlab_engine::time::{as_secs_f64, secs};
use onionlab_engine::Simulation;
use onionlab_tor::build::build;
use onionlab_tor::measure::DownloadOutcome;
use onionlab_tor::TorHost;
use onionlab_torcore::{FlowControl, TorParams};
use onionlab_traffic::Workload;

const MIB: u64 = 1 << 20;
const EXIT: u32 = 2;
const SERVER: u32 = 3;
const CLIENT: u32 = 4;

fn upload(size_bytes: u64) -> Workload {
    Workload::Upload {
        size_bytes,
        timeout: secs(120),
    }
}

fn params(flow: FlowControl) -> TorParams {
    TorParams {
        flow_control: flow,
        ..TorParams::default()
    }
}

fn server(sim: &Simulation<TorHost>) -> &onionlab_tor::Server {
    match sim.host(SERVER) {
        TorHost::Server(s) => s,
        _ => panic!("host {SERVER} is not the server"),
    }
}

/// Guard, middle and exit at 2 MiB/s on 100 Mbit/s links, one client uploading 4 MiB back to
/// back for 40 s; the server's downstream link is `server_down` bit/s.
fn run(flow: FlowControl, server_down: u64) -> Simulation<TorHost> {
    let mut spec = network_spec(
        params(flow),
        guard_middle_exit_relays(),
        vec![(2 * MIB, 100 * MBIT); 3],
        vec![upload(4 * MIB)],
        1,
    );
    spec.hosts[SERVER as usize].placement = at(1000 * MBIT, server_down);
    let mut sim = build(spec).unwrap().0;
    sim.run_until(secs(40));
    sim
}

fn uploads_arrive_whole_within_the_windows(flow: FlowControl) {
    let sim = run(flow, 1000 * MBIT);
    let c = client(&sim, CLIENT);
    let ok: Vec<_> = c
        .finished
        .iter()
        .filter(|d| d.outcome == DownloadOutcome::Ok)
        .collect();
    assert!(ok.len() >= 3, "{:?}", c.finished);
    assert!(c.finished.iter().all(|d| d.upload && d.size == 4 * MIB));
    let first = ok[0];
    assert_eq!(first.path, Some([0, 1, 2]));
    // The server answered an upload only after reading exactly its bytes, and every upload
    // the client saw answered is one of them.
    let s = server(&sim);
    assert!(
        s.uploads_received.iter().all(|&b| b == 4 * MIB),
        "{s:?}",
        s = s.uploads_received
    );
    assert!(s.uploads_received.len() >= ok.len());
    // Time to first byte: the request left once the stream was open, a round trip after
    // the circuit (three hops, 10 ms each way) was ready.
    let ttfb = as_secs_f64(first.first_byte.unwrap() - first.start);
    let took = as_secs_f64(first.last_byte.unwrap() - first.start);
    // Each relay writes 543 wire bytes per 498 of payload at 2 MiB/s (a 2 MiB burst to
    // start with), so an upload cannot take less than (wire - burst) / rate, and a client
    // that keeps the bottleneck busy takes little more than wire / rate.
    let wire = 4.0 * 543.0 / 498.0;
    eprintln!("{flow:?}: 4 MiB up in {took:.3} s (first byte {ttfb:.3} s)");
    assert!(ttfb >= 0.08 && ttfb < took, "first byte {ttfb}");
    assert!(took >= (wire - 2.0) / 2.0, "took {took}");
    assert!(took <= wire / 2.0 + 1.5, "took {took}");
    // The client never had more DATA cells in flight than its windows allow, counting cells
    // packaged against SENDMEs accepted apart from the window code; no SENDME acknowledged
    // cells never sent, and the exit never found a cell beyond its deliver windows.
    eprintln!(
        "in flight: circuit {} stream {}",
        c.max_circuit_in_flight, c.max_stream_in_flight
    );
    assert_eq!(c.sendme_violations, 0);
    match flow {
        FlowControl::Sendme => {
            assert!(c.max_circuit_in_flight <= 1000);
            assert!(c.max_stream_in_flight <= 500);
            // The windows were reached: the bound was exercised.
            assert!(c.max_stream_in_flight >= 450, "{}", c.max_stream_in_flight);
        }
        FlowControl::Vegas => {
            // Congestion control: no stream windows; the circuit's cwnd starts at 124 cells
            // and Vegas keeps it near the path's bandwidth-delay product.
            assert_eq!(c.max_stream_in_flight, 0);
            assert!(c.max_circuit_in_flight >= 124);
            assert!(
                c.max_circuit_in_flight <= 2000,
                "{}",
                c.max_circuit_in_flight
            );
        }
    }
}

#[test]
fn uploads_arrive_whole_within_the_windows_under_sendme() {
    uploads_arrive_whole_within_the_windows(FlowControl::Sendme);
}

#[test]
fn uploads_arrive_whole_within_the_windows_under_vegas() {
    uploads_arrive_whole_within_the_windows(FlowControl::Vegas);
}

/// A server behind a 4 Mbit/s link takes the upload slower than the circuit could carry it:
/// cells wait at the exit, which holds back stream SENDMEs (XOFF under congestion control),
/// so the client slows to the server's pace instead of piling the upload up at the exit.
fn a_slow_server_holds_the_client_back(flow: FlowControl) {
    let sim = run(flow, 4 * MBIT);
    let c = client(&sim, CLIENT);
    let ok: Vec<_> = c
        .finished
        .iter()
        .filter(|d| d.outcome == DownloadOutcome::Ok)
        .collect();
    assert!(!ok.is_empty(), "{:?}", c.finished);
    let took = as_secs_f64(ok[0].last_byte.unwrap() - ok[0].start);
    // 4 MiB through 4 Mbit/s (TCP/IP headers add 52 bytes per 1448).
    let floor = 4.0 * MIB as f64 * 8.0 / 4e6;
    eprintln!("{flow:?}: 4 MiB to a 4 Mbit/s server in {took:.3} s (floor {floor:.3} s)");
    assert!(took >= floor && took <= floor * 1.3 + 2.0, "took {took}");
    // What waits at the exit stays within what the client may have in flight (a stream
    // window, or the XOFF threshold plus a congestion window), not the whole upload.
    let waiting = relay_host(&sim, EXIT).upload_bytes_waiting();
    eprintln!("waiting at the exit at the end: {waiting} bytes");
    assert!(waiting <= 1500 * 498, "{waiting}");
    assert_eq!(c.sendme_violations, 0);
    if flow == FlowControl::Sendme {
        assert!(c.max_stream_in_flight <= 500);
    }
    assert!(server(&sim).uploads_received.iter().all(|&b| b == 4 * MIB));
}

#[test]
fn a_slow_server_holds_the_client_back_under_sendme() {
    a_slow_server_holds_the_client_back(FlowControl::Sendme);
}

#[test]
fn a_slow_server_holds_the_client_back_under_vegas() {
    a_slow_server_holds_the_client_back(FlowControl::Vegas);
}
