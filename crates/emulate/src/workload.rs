//! The scenario's workload, for real: file servers in their namespaces, and clients that fetch
//! through their tor's SOCKS port on the simulator's schedule.
//!
//! The protocol is the simulator's: the client asks for a number of bytes (an 8-byte
//! big-endian count) and the server sends exactly that many and closes. Time to first and last
//! byte are measured from the moment the download starts, before the SOCKS connection, so they
//! include waiting for a circuit, as in the simulator.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use onionlab_traffic::{Action, ClientSchedule, ThroughputProbe};

use crate::netns;
use crate::plan::{HTTP_PORT, SOCKS_PORT};
use crate::socks;

/// The clock of the run: scenario time zero is when the network finished bootstrapping.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    /// The instant of scenario time zero.
    pub zero: Instant,
}

impl Clock {
    /// Scenario time now, in nanoseconds since `zero`.
    pub fn now_ns(&self) -> u64 {
        self.zero.elapsed().as_nanos() as u64
    }

    /// The instant of scenario time `ns` (nanoseconds).
    pub fn at(&self, ns: u64) -> Instant {
        self.zero + Duration::from_nanos(ns)
    }
}

/// How one download ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ending {
    /// Every byte arrived.
    Ok,
    /// The download's timeout passed first (tor's TTL-expired SOCKS reply counts as one).
    Timeout,
    /// It failed otherwise: a short label of what failed (`socks-io`, `read: reset`, ...).
    Error(String),
}

/// One download as the client saw it. Times are scenario nanoseconds.
#[derive(Clone, Debug)]
pub struct Download {
    /// The client's host index in the layout.
    pub client: usize,
    /// The server's host index in the layout.
    pub server: usize,
    /// Bytes requested.
    pub size: u64,
    /// When the download started, before the SOCKS connection.
    pub start: u64,
    /// When the request went out, after tor reported the stream open (OnionPerf's DATAREQUEST).
    pub request: Option<u64>,
    /// When the first byte of the response arrived.
    pub first_byte: Option<u64>,
    /// When the bytes that bound Tor Metrics' throughput arrived.
    pub throughput: ThroughputProbe,
    /// When the last byte arrived; `None` unless the download completed.
    pub last_byte: Option<u64>,
    /// How the download ended.
    pub ending: Ending,
    /// The local port of the SOCKS connection: tor reports it in its stream events, which is
    /// how a download is matched with the circuit that carried it.
    pub socks_port: Option<u16>,
}

/// Serves downloads on `address:80` inside namespace `ns` until `stop` is set.
pub fn start_server(ns: &str, address: Ipv4Addr, stop: Arc<AtomicBool>) -> io::Result<()> {
    let listener = netns::run_in(ns, move || {
        TcpListener::bind(SocketAddrV4::new(address, HTTP_PORT))
    })?;
    listener.set_nonblocking(true)?;
    std::thread::Builder::new()
        .name(format!("server-{address}"))
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let _ = std::thread::Builder::new()
                            .name("serve".into())
                            .spawn(move || serve(stream));
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(5))
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        })?;
    Ok(())
}

fn serve(mut stream: TcpStream) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_secs(300)))?;
    let mut request = [0u8; 8];
    stream.read_exact(&mut request)?;
    let mut left = u64::from_be_bytes(request);
    let chunk = [0u8; 64 * 1024];
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        stream.write_all(&chunk[..n])?;
        left -= n as u64;
    }
    stream.shutdown(std::net::Shutdown::Write)
}

/// What a client driver needs.
pub struct ClientSpec {
    /// The client's host index in the layout.
    pub index: usize,
    /// The network namespace the client's downloads run in.
    pub ns: String,
    /// When to start which download, as the simulator's client would.
    pub schedule: ClientSchedule,
    /// Candidate servers: (host index, address).
    pub servers: Vec<(usize, Ipv4Addr)>,
    /// The client's random stream: its schedule's draws and its choice of server.
    pub rng: onionlab_engine::HostRng,
}

/// Runs a client's schedule until `stop`; finished downloads go to `out`.
pub fn start_client(
    mut spec: ClientSpec,
    clock: Clock,
    stop: Arc<AtomicBool>,
    out: Arc<Mutex<Vec<Download>>>,
) -> io::Result<std::thread::JoinHandle<()>> {
    use rand::RngExt;
    std::thread::Builder::new()
        .name(format!("client-{}", spec.index))
        .spawn(move || {
            let (done_tx, done_rx) = std::sync::mpsc::channel::<u64>();
            while !stop.load(Ordering::Relaxed) {
                let now = clock.now_ns();
                match spec.schedule.poll(now, &mut spec.rng) {
                    Action::Start {
                        size_bytes,
                        timeout,
                        // Emulated clients run web, bulk and perf workloads only, which
                        // share circuits (key 0); markov groups are refused.
                        isolation: _,
                    } => {
                        let (server, address) =
                            spec.servers[spec.rng.random_range(0..spec.servers.len())];
                        let job = Job {
                            client: spec.index,
                            server,
                            address,
                            size: size_bytes,
                            timeout,
                        };
                        let out = out.clone();
                        let done = done_tx.clone();
                        let stop = stop.clone();
                        let started = netns::spawn_in(&spec.ns, move || {
                            let d = job.run(clock);
                            let end = d.last_byte.unwrap_or_else(|| clock.now_ns());
                            // Downloads still running at the end are not reported, as in
                            // the simulator.
                            if !stop.load(Ordering::Relaxed) {
                                out.lock().unwrap_or_else(|p| p.into_inner()).push(d);
                            }
                            let _ = done.send(end);
                            Ok(())
                        });
                        if started.is_err() {
                            let _ = done_tx.send(now);
                        }
                    }
                    Action::WaitUntil(t) => {
                        let wait = Duration::from_nanos(t.saturating_sub(now))
                            .min(Duration::from_millis(100));
                        if let Ok(end) = done_rx.recv_timeout(wait) {
                            spec.schedule.on_finished(end);
                        }
                    }
                    Action::Idle => {
                        if let Ok(end) = done_rx.recv_timeout(Duration::from_millis(100)) {
                            spec.schedule.on_finished(end);
                        }
                    }
                }
            }
        })
}

struct Job {
    client: usize,
    server: usize,
    address: Ipv4Addr,
    size: u64,
    timeout: u64,
}

impl Job {
    /// Runs one download on the calling thread (which is inside the client's namespace).
    fn run(&self, clock: Clock) -> Download {
        let start = clock.now_ns();
        let deadline = clock.at(start + self.timeout);
        let mut d = Download {
            client: self.client,
            server: self.server,
            size: self.size,
            start,
            request: None,
            first_byte: None,
            throughput: ThroughputProbe::default(),
            last_byte: None,
            ending: Ending::Ok,
            socks_port: None,
        };
        d.ending = match self.fetch(clock, deadline, &mut d) {
            Ok(()) => Ending::Ok,
            Err(Failure::Timeout) => Ending::Timeout,
            Err(Failure::Error(e)) => Ending::Error(e),
        };
        d
    }

    fn fetch(&self, clock: Clock, deadline: Instant, d: &mut Download) -> Result<(), Failure> {
        let left = |now: Instant| {
            deadline
                .checked_duration_since(now)
                .filter(|d| !d.is_zero())
                .ok_or(Failure::Timeout)
        };
        let socks_addr = (Ipv4Addr::LOCALHOST, SOCKS_PORT).into();
        let mut stream = TcpStream::connect_timeout(&socks_addr, left(Instant::now())?)
            .map_err(|e| Failure::io("socks-connect", e))?;
        d.socks_port = stream.local_addr().ok().map(|a| a.port());
        let timeout = Some(left(Instant::now())?);
        stream
            .set_read_timeout(timeout)
            .and_then(|_| stream.set_write_timeout(timeout))
            .map_err(|e| Failure::io("socket", e))?;
        let _ = stream.set_nodelay(true);
        socks::socks5_connect(&mut stream, SocketAddrV4::new(self.address, HTTP_PORT)).map_err(
            |e| {
                if e.kind() == "socks-ttl-expired" || Instant::now() >= deadline {
                    Failure::Timeout
                } else {
                    Failure::Error(e.kind().to_string())
                }
            },
        )?;
        d.request = Some(clock.now_ns());
        stream
            .write_all(&self.size.to_be_bytes())
            .map_err(|e| Failure::io("request", e))?;
        let mut buf = vec![0u8; 64 * 1024];
        let mut got = 0u64;
        while got < self.size {
            stream
                .set_read_timeout(Some(left(Instant::now())?))
                .map_err(|e| Failure::io("socket", e))?;
            let n = match stream.read(&mut buf) {
                Ok(0) => return Err(Failure::Error("closed early".into())),
                Ok(n) => n,
                Err(e) => return Err(Failure::io("read", e)),
            };
            if d.first_byte.is_none() {
                d.first_byte = Some(clock.now_ns());
            }
            got += n as u64;
            d.throughput.on_received(got, clock.now_ns());
        }
        d.last_byte = Some(clock.now_ns());
        Ok(())
    }
}

enum Failure {
    Timeout,
    Error(String),
}

impl Failure {
    fn io(what: &str, e: io::Error) -> Failure {
        match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => Failure::Timeout,
            io::ErrorKind::ConnectionReset => Failure::Error(format!("{what}: reset")),
            io::ErrorKind::ConnectionRefused => Failure::Error(format!("{what}: refused")),
            _ => Failure::Error(format!("{what}: {e}")),
        }
    }
}
