//! What the emulator learns from the tors' control ports: per-second traffic of every relay
//! (BW events) and the circuits and streams of every client (CIRC and STREAM events).

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::control::{ControlConn, Event};
use crate::netns;
use crate::plan::CONTROL_PORT;

/// Opens the control connection of the tor in namespace `ns`, retrying while tor starts up.
pub fn connect(ns: &str, timeout: Duration) -> Result<ControlConn, String> {
    let deadline = Instant::now() + timeout;
    loop {
        let attempt = netns::run_in(ns, || {
            TcpStream::connect_timeout(
                &SocketAddrV4::new(Ipv4Addr::LOCALHOST, CONTROL_PORT).into(),
                Duration::from_secs(2),
            )
        });
        match attempt {
            Ok(stream) => {
                return ControlConn::new(stream).map_err(|e| format!("control port: {e}"));
            }
            Err(e) if Instant::now() >= deadline => {
                return Err(format!("control port did not open: {e}"));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

/// One second of a relay's traffic as tor counted it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BwSample {
    /// Scenario second that just ended (1 = the first).
    pub second: u64,
    /// Bytes the relay read in that second.
    pub read: u64,
    /// Bytes the relay wrote in that second.
    pub written: u64,
}

/// A circuit of a client, with the instants at which its events arrived.
#[derive(Clone, Debug, Default)]
pub struct CircuitSeen {
    /// When the LAUNCHED event arrived.
    pub launched: Option<Instant>,
    /// When the BUILT event arrived.
    pub built: Option<Instant>,
    /// When the CLOSED event arrived.
    pub closed: Option<Instant>,
    /// Fingerprints, guard first.
    pub path: Vec<String>,
    /// tor's purpose for the circuit (`GENERAL`, ...), as the last event that gave one said.
    pub purpose: Option<String>,
    /// `FAILED` reason, if it failed.
    pub failure: Option<String>,
    /// Streams that succeeded on the circuit.
    pub streams: u32,
}

/// What one client's tor reported.
#[derive(Debug, Default)]
pub struct ClientLog {
    /// By tor's circuit id, in launch order.
    pub circuits: Vec<(u64, CircuitSeen)>,
    /// (SOCKS source port, circuit id, when the stream attached).
    pub streams: Vec<(u16, u64, Instant)>,
}

impl ClientLog {
    fn circuit(&mut self, id: u64) -> &mut CircuitSeen {
        if let Some(i) = self.circuits.iter().position(|(c, _)| *c == id) {
            return &mut self.circuits[i].1;
        }
        self.circuits.push((id, CircuitSeen::default()));
        &mut self.circuits.last_mut().expect("just pushed").1
    }

    /// The circuit that carried the stream from SOCKS port `port`, attached at or after
    /// `since`.
    pub fn circuit_of(&self, port: u16, since: Instant) -> Option<&CircuitSeen> {
        let (_, id, _) = self
            .streams
            .iter()
            .find(|(p, _, at)| *p == port && *at >= since)?;
        self.circuits
            .iter()
            .find(|(c, _)| c == id)
            .map(|(_, seen)| seen)
    }
}

/// Records a relay's BW events, counted from scenario time zero once `zero` is set.
pub fn watch_relay(
    mut conn: ControlConn,
    zero: Arc<OnceLock<Instant>>,
    stop: Arc<AtomicBool>,
    out: Arc<Mutex<Vec<BwSample>>>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        if conn.setevents(&["BW"]).is_err() {
            return;
        }
        while !stop.load(Ordering::Relaxed) {
            let event = match conn.next_event(Some(Duration::from_millis(200))) {
                Ok(Some(e)) => e,
                Ok(None) => continue,
                Err(_) => return,
            };
            let (Event::Bw { read, written }, Some(zero)) = (event, zero.get()) else {
                continue;
            };
            // Tor reports each second just after it ends; round to the nearest second end.
            let second = (zero.elapsed().as_millis() as u64 + 500) / 1000;
            if second == 0 {
                continue;
            }
            let mut samples = out.lock().unwrap_or_else(|p| p.into_inner());
            match samples.last_mut() {
                // Two reports rounding to one second: keep both bytes, in the later second.
                Some(last) if last.second >= second => {
                    last.read += read;
                    last.written += written;
                }
                _ => samples.push(BwSample {
                    second,
                    read,
                    written,
                }),
            }
        }
    })
}

/// Records a client's circuits and which circuit each SOCKS connection used.
pub fn watch_client(
    mut conn: ControlConn,
    stop: Arc<AtomicBool>,
    out: Arc<Mutex<ClientLog>>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        if conn.setevents(&["CIRC", "STREAM"]).is_err() {
            return;
        }
        // Stream id → SOCKS source port, from the stream's NEW event.
        let mut ports: HashMap<u64, u16> = HashMap::new();
        while !stop.load(Ordering::Relaxed) {
            let event = match conn.next_event(Some(Duration::from_millis(200))) {
                Ok(Some(e)) => e,
                Ok(None) => continue,
                Err(_) => return,
            };
            let now = Instant::now();
            let mut log = out.lock().unwrap_or_else(|p| p.into_inner());
            match event {
                Event::Circ(c) => {
                    let seen = log.circuit(c.id);
                    if !c.path.is_empty() {
                        seen.path = c.path.iter().map(|h| h.fingerprint.clone()).collect();
                    }
                    if c.purpose.is_some() {
                        seen.purpose = c.purpose.clone();
                    }
                    match c.status.as_str() {
                        "LAUNCHED" => seen.launched = Some(now),
                        "BUILT" => seen.built = Some(now),
                        "FAILED" => seen.failure = Some(c.reason.unwrap_or_default()),
                        "CLOSED" => seen.closed = Some(now),
                        _ => {}
                    }
                }
                Event::Stream(s) => {
                    if let Some(a) = s.source_addr {
                        ports.insert(s.id, a.port());
                    }
                    if s.status == "SUCCEEDED" {
                        log.circuit(s.circuit).streams += 1;
                    }
                    if s.status == "SENTCONNECT" {
                        if let Some(&port) = ports.get(&s.id) {
                            log.streams.push((port, s.circuit, now));
                        }
                    }
                    if matches!(s.status.as_str(), "CLOSED" | "FAILED") {
                        ports.remove(&s.id);
                    }
                }
                _ => {}
            }
        }
    })
}

/// The relays a client's consensus lists as running, with their flags.
pub fn consensus_flags(conn: &mut ControlConn) -> Result<HashMap<String, Vec<String>>, String> {
    let text = conn
        .getinfo("ns/all")
        .map_err(|e| format!("GETINFO ns/all: {e}"))?;
    Ok(crate::control::parse_network_status(&text)
        .into_iter()
        .map(|r| (r.fingerprint, r.flags))
        .collect())
}

/// A client's bootstrap progress in percent, and tor's summary of where it is.
pub fn bootstrap_progress(conn: &mut ControlConn) -> Result<(u32, String), String> {
    let text = conn
        .getinfo("status/bootstrap-phase")
        .map_err(|e| format!("GETINFO status/bootstrap-phase: {e}"))?;
    let field = |key: &str| {
        text.split_whitespace()
            .find_map(|w| w.strip_prefix(key))
            .map(|v| v.trim_matches('"').to_string())
    };
    let progress = field("PROGRESS=").and_then(|p| p.parse().ok()).unwrap_or(0);
    let summary = text
        .split("SUMMARY=\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .unwrap_or("")
        .to_string();
    Ok((progress, summary))
}
