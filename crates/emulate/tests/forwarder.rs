//! End-to-end checks of the user-space switch between real network namespaces: delay, order,
//! loss and intact TCP through it. Needs root and `ip`; skipped (with a notice) without them,
//! except under CI, where skipping would hide a broken setup.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use onionlab_emulate::delay::PathSpec;
use onionlab_emulate::forwarder::{self, ForwarderConfig, ForwarderHandle, ForwarderStats, Port};
use onionlab_emulate::netns;

const MS: u64 = 1_000_000;
const MACS: [[u8; 6]; 2] = [[0x02, 0, 0, 0, 0, 1], [0x02, 0, 0, 0, 0, 2]];
const IPS: [&str; 2] = ["10.0.0.1", "10.0.0.2"];

/// The cases measure timing on a small machine; running them side by side would measure each
/// other.
static SERIAL: Mutex<()> = Mutex::new(());
static LAB_ID: AtomicUsize = AtomicUsize::new(0);

fn can_run() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let has_ip = std::process::Command::new("ip")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    let why = match (root, has_ip) {
        (true, true) => return true,
        (false, _) => "not root",
        (true, false) => "`ip` is not installed",
    };
    if std::env::var_os("CI").is_some() {
        panic!("forwarder tests cannot run ({why}) and CI is set");
    }
    eprintln!("skipping forwarder test: {why}");
    false
}

/// A hub and two nodes joined by veths, deleted on drop so a failed assertion leaves nothing
/// behind.
struct Lab {
    hub: String,
    nodes: Vec<String>,
    created: Vec<String>,
}

impl Lab {
    /// `offloads`: the nodes' ends segment and merge as NICs with TSO, GSO and GRO do (as
    /// `onionlab emulate` sets them for `network.segment_offload`); the hub's never merge.
    fn new(offloads: bool) -> Lab {
        let prefix = format!(
            "onionlab-test-{}-{}",
            std::process::id(),
            LAB_ID.fetch_add(1, Ordering::Relaxed)
        );
        let mut lab = Lab {
            hub: format!("{prefix}-hub"),
            nodes: vec![format!("{prefix}-n0"), format!("{prefix}-n1")],
            created: Vec::new(),
        };
        for ns in std::iter::once(&lab.hub)
            .chain(&lab.nodes)
            .cloned()
            .collect::<Vec<_>>()
        {
            netns::add(&ns).unwrap();
            lab.created.push(ns);
        }
        for (i, node) in lab.nodes.iter().enumerate() {
            let port = format!("p{i}");
            let mac = mac_str(MACS[i]);
            let addr = format!("{}/16", IPS[i]);
            let hub = lab.hub.as_str();
            netns::ip(&[
                "-n", hub, "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns",
                node,
            ])
            .unwrap();
            netns::ip(&["-n", node, "link", "set", "eth0", "address", &mac]).unwrap();
            netns::ip(&["-n", node, "addr", "add", &addr, "dev", "eth0"]).unwrap();
            forwarder::set_offloads(node, "eth0", offloads).unwrap();
            forwarder::set_offloads(hub, &port, false).unwrap();
            netns::ip(&["-n", node, "link", "set", "eth0", "up"]).unwrap();
            netns::ip(&["-n", hub, "link", "set", &port, "up"]).unwrap();
        }
        lab
    }

    /// Static neighbour entries, so that a lost ARP reply cannot stall a loss measurement.
    fn static_arp(&self) {
        for (i, node) in self.nodes.iter().enumerate() {
            let peer = 1 - i;
            netns::ip(&[
                "-n",
                node,
                "neigh",
                "replace",
                IPS[peer],
                "lladdr",
                &mac_str(MACS[peer]),
                "dev",
                "eth0",
                "nud",
                "permanent",
            ])
            .unwrap();
        }
    }

    fn start(&self, path: PathSpec, allow_reorder: bool) -> ForwarderHandle {
        let idle = PathSpec::default();
        let config = ForwarderConfig {
            ports: (0..2)
                .map(|i| Port {
                    ifname: format!("p{i}"),
                    mac: MACS[i],
                })
                .collect(),
            paths: vec![vec![idle, path], vec![path, idle]],
            seed: 1,
            allow_reorder,
        };
        forwarder::start(&self.hub, config).unwrap()
    }

    /// Creates a socket inside node `i`; it stays in that namespace wherever it is used.
    fn in_node<T, F>(&self, i: usize, f: F) -> T
    where
        T: Send + 'static,
        F: FnOnce() -> io::Result<T> + Send + 'static,
    {
        netns::run_in(&self.nodes[i], f).unwrap()
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for ns in &self.created {
            if let Err(e) = netns::delete(ns) {
                eprintln!("cleanup: {e}");
            }
        }
    }
}

fn mac_str(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Sets a flag on drop so helper threads end even when an assertion fails first.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// A UDP echo in node 1 on port 7.
fn start_echo(lab: &Lab) -> StopOnDrop {
    let sock = lab.in_node(1, || UdpSocket::bind((IPS[1], 7)));
    sock.set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    thread::spawn(move || {
        let mut buf = [0u8; 64];
        while !flag.load(Ordering::Relaxed) {
            if let Ok((n, from)) = sock.recv_from(&mut buf) {
                let _ = sock.send_to(&buf[..n], from);
            }
        }
    });
    StopOnDrop(stop)
}

/// Sends `count` numbered probes from node 0, one per `interval`, and returns the
/// `(sequence, round-trip time)` of each echo in the order the echoes came back.
fn probe(lab: &Lab, count: u32, interval: Duration) -> Vec<(u32, Duration)> {
    let sock = lab.in_node(0, || {
        let s = UdpSocket::bind((IPS[0], 0))?;
        s.connect((IPS[1], 7))?;
        Ok(s)
    });
    let mut sent = Vec::with_capacity(count as usize);
    let mut echoes = Vec::with_capacity(count as usize);
    let mut buf = [0u8; 64];
    let start = Instant::now();
    let linger = Duration::from_millis(200);
    let mut recv_until = |sock: &UdpSocket, sent: &[Instant], deadline: Instant| loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        sock.set_read_timeout(Some(left)).unwrap();
        if let Ok(4) = sock.recv(&mut buf) {
            let seq = u32::from_le_bytes(buf[..4].try_into().unwrap());
            echoes.push((seq, sent[seq as usize].elapsed()));
        }
    };
    for seq in 0..count {
        recv_until(&sock, &sent, start + interval * seq);
        sent.push(Instant::now());
        sock.send(&seq.to_le_bytes()).unwrap();
    }
    recv_until(&sock, &sent, Instant::now() + linger);
    echoes
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn report(case: &str, stats: &ForwarderStats) {
    eprintln!("{case}: {stats:?}");
}

#[test]
fn latency_and_order() {
    if !can_run() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let lab = Lab::new(false);
    let latency = 20 * MS;
    let fwd = lab.start(
        PathSpec {
            latency_ns: latency,
            jitter_ns: 2 * MS,
            loss: 0.0,
        },
        false,
    );
    let _echo = start_echo(&lab);
    let count = 500;
    let echoes = probe(&lab, count, Duration::from_millis(2));
    let stats = fwd.stop().unwrap();
    report("latency_and_order", &stats);

    let seqs: Vec<u32> = echoes.iter().map(|e| e.0).collect();
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "echoes came back out of order"
    );
    assert_eq!(
        echoes.len(),
        count as usize,
        "probes lost on a loss-free path"
    );
    let rtts: Vec<Duration> = echoes.iter().map(|e| e.1).collect();
    let med = median(rtts.clone());
    let (min, max) = (rtts.iter().min().unwrap(), rtts.iter().max().unwrap());
    eprintln!("latency_and_order: rtt min {min:?} median {med:?} max {max:?}");
    let expect = Duration::from_nanos(2 * latency);
    assert!(
        med.abs_diff(expect) <= expect / 10,
        "median rtt {med:?}, expected {expect:?} ± 10%"
    );
    assert!(
        *min >= expect,
        "an echo was faster than the configured latency"
    );
    // ARP requests went through the flood path.
    assert!(stats.flooded >= 1);
    assert_eq!(stats.lost, 0);
    assert_eq!(stats.gso_frames, 0);
    assert_eq!(stats.send_errors, 0);
}

#[test]
fn loss_rate() {
    if !can_run() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let lab = Lab::new(false);
    lab.static_arp();
    let loss = 0.05;
    let fwd = lab.start(
        PathSpec {
            latency_ns: 5 * MS,
            jitter_ns: 0,
            loss,
        },
        false,
    );
    let _echo = start_echo(&lab);
    let count = 2000;
    let echoes = probe(&lab, count, Duration::from_micros(500));
    let stats = fwd.stop().unwrap();
    report("loss_rate", &stats);

    let p = 1.0 - (1.0 - loss) * (1.0 - loss);
    let rate = 1.0 - echoes.len() as f64 / count as f64;
    let se = (p * (1.0 - p) / count as f64).sqrt();
    eprintln!(
        "loss_rate: round-trip loss {rate:.4}, expected {p:.4} ± {:.4}",
        4.0 * se
    );
    assert!(
        (rate - p).abs() < 4.0 * se,
        "round-trip loss {rate}, expected {p} ± {}",
        4.0 * se
    );
    // Every unicast frame the switch saw was either lost or forwarded.
    assert_eq!(stats.unknown_dst, 0);
    assert_eq!(stats.gso_frames, 0);
}

/// Sends `len` bytes of a fixed pattern from node 0 to node 1 over TCP and checks what
/// arrived; returns the forwarder's counters and the time the transfer took.
fn tcp_transfer(lab: &Lab, fwd: ForwarderHandle, len: usize) -> (ForwarderStats, Duration) {
    let data: Vec<u8> = {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    };
    let listener = lab.in_node(1, || TcpListener::bind((IPS[1], 9000)));
    // Corrupted frames make TCP retry for minutes; every step has a deadline so the test
    // fails instead.
    let server = thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).unwrap();
        got
    });
    let start = Instant::now();
    let server_addr: SocketAddr = format!("{}:9000", IPS[1]).parse().unwrap();
    let mut client = lab.in_node(0, move || {
        TcpStream::connect_timeout(&server_addr, Duration::from_secs(3))
    });
    client
        .set_write_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    client.write_all(&data).unwrap();
    client.shutdown(Shutdown::Write).unwrap();
    let got = server.join().unwrap();
    let took = start.elapsed();
    let stats = fwd.stop().unwrap();
    assert_eq!(got.len(), data.len(), "transfer truncated");
    assert!(got == data, "transfer corrupted");
    (stats, took)
}

#[test]
fn tcp_transfer_intact() {
    if !can_run() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let lab = Lab::new(false);
    let fwd = lab.start(
        PathSpec {
            latency_ns: 5 * MS,
            jitter_ns: MS,
            loss: 0.0,
        },
        false,
    );
    let (stats, took) = tcp_transfer(&lab, fwd, 4 << 20);
    report("tcp_transfer_intact", &stats);
    eprintln!("tcp_transfer_intact: 4 MiB in {took:?}");
    assert_eq!(
        stats.gso_frames, 0,
        "super-frames crossed despite disabled offloads"
    );
    assert_eq!(stats.lost, 0);
    assert_eq!(stats.dropped_other, 0);
}

/// With offloads left on, super-frames and unfinished checksums reach the switch; the virtio
/// header must carry both across intact.
#[test]
fn tcp_intact_with_offloads_on() {
    if !can_run() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let lab = Lab::new(true);
    let fwd = lab.start(
        PathSpec {
            latency_ns: 5 * MS,
            jitter_ns: 0,
            loss: 0.0,
        },
        false,
    );
    let (stats, took) = tcp_transfer(&lab, fwd, 4 << 20);
    report("tcp_intact_with_offloads_on", &stats);
    eprintln!("tcp_intact_with_offloads_on: 4 MiB in {took:?}");
    assert!(
        stats.gso_frames > 0,
        "no super-frames: this case tests nothing"
    );
    assert_eq!(stats.gso_whole, 0, "every TCP super-frame is cut");
    assert!(stats.gso_segments > 2 * stats.gso_frames);
    assert!(stats.forwarded >= stats.gso_segments);
}

/// On a lossy path, the segments of a super-frame are lost one by one (as on a wire) and TCP
/// repairs each hole with the segments it cut anew: every byte still arrives.
#[test]
fn super_frames_are_lost_segment_by_segment() {
    if !can_run() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let lab = Lab::new(true);
    lab.static_arp();
    let loss = 0.01;
    let fwd = lab.start(
        PathSpec {
            latency_ns: 5 * MS,
            jitter_ns: 0,
            loss,
        },
        false,
    );
    let (stats, took) = tcp_transfer(&lab, fwd, 4 << 20);
    report("super_frames_are_lost_segment_by_segment", &stats);
    eprintln!("super_frames_are_lost_segment_by_segment: 4 MiB in {took:?}");
    assert!(
        stats.gso_frames > 0,
        "no super-frames: this case tests nothing"
    );
    assert_eq!(stats.gso_whole, 0);
    // Each wire frame is one draw: losses over draws is the path's rate (binomial over about
    // 4,000 draws, 40 losses expected: half or twice that is over three standard deviations
    // away; the switch's seed is fixed, only TCP's timing varies the draws).
    let draws = stats.lost + stats.forwarded;
    assert!(
        draws >= stats.gso_segments,
        "segments were not drawn one by one"
    );
    let rate = stats.lost as f64 / draws as f64;
    assert!(
        (loss / 2.0..loss * 2.0).contains(&rate),
        "loss rate {rate} over {draws} frames"
    );
}

#[test]
fn setup_errors_come_back_from_start() {
    if !can_run() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let lab = Lab::new(false);
    let config = |ifname: &str| ForwarderConfig {
        ports: vec![Port {
            ifname: ifname.into(),
            mac: MACS[0],
        }],
        paths: vec![vec![PathSpec::default()]],
        seed: 0,
        allow_reorder: false,
    };
    let err = forwarder::start(&lab.hub, config("p9")).err().unwrap();
    assert!(err.to_string().contains("p9"), "{err}");
    let missing = format!("{}-missing", lab.hub);
    let err = forwarder::start(&missing, config("p0")).err().unwrap();
    assert!(err.to_string().contains(&missing), "{err}");
    assert!(forwarder::set_offloads(&lab.hub, "p9", false).is_err());
}

/// CPU time (user + system, in clock ticks) of the one thread of this process whose name
/// starts with `prefix`.
fn thread_cpu_ticks(prefix: &str) -> u64 {
    let ticks: Vec<u64> = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("stat")).ok())
        .filter_map(|stat| {
            let (name, rest) = stat.split_once(" (")?.1.rsplit_once(") ")?;
            if !name.starts_with(prefix) {
                return None;
            }
            let fields: Vec<&str> = rest.split_whitespace().collect();
            // utime and stime are fields 14 and 15 of stat; `rest` starts at field 3.
            Some(fields[11].parse::<u64>().ok()? + fields[12].parse::<u64>().ok()?)
        })
        .collect();
    assert_eq!(ticks.len(), 1, "threads named {prefix}*: {}", ticks.len());
    ticks[0]
}

/// Deleting a node's namespace (as a teardown might, before stopping the switch) removes its
/// port; the switch must neither die nor spin on the dead socket.
#[test]
fn survives_a_vanished_port() {
    if !can_run() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut lab = Lab::new(false);
    let fwd = lab.start(
        PathSpec {
            latency_ns: MS,
            jitter_ns: 0,
            loss: 0.0,
        },
        false,
    );
    let gone = lab.created.pop().unwrap();
    netns::delete(&gone).unwrap();
    thread::sleep(Duration::from_millis(50));
    // The switch thread is named after the hub: "ns-onionlab-test-…", cut to 15 bytes.
    let before = thread_cpu_ticks("ns-onionlab");
    thread::sleep(Duration::from_millis(500));
    let used = thread_cpu_ticks("ns-onionlab") - before;
    assert!(fwd.is_running());
    let stats = fwd.stop().unwrap();
    report("survives_a_vanished_port", &stats);
    // 100 ticks per second: spinning would use about 50 in half a second.
    assert!(used < 10, "switch used {used} ticks in 0.5 s");
}

/// A full queue of a rate limit on a hub-side port is congestion on the emulated link: the
/// switch must count it as such, not as a failed write.
#[test]
fn egress_queue_drops_are_counted() {
    if !can_run() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let lab = Lab::new(false);
    lab.static_arp();
    let tbf = std::process::Command::new("tc")
        .args(["-n", &lab.hub, "qdisc", "add", "dev", "p1", "root", "tbf"])
        .args(["rate", "20mbit", "burst", "3028", "latency", "20ms"])
        .status();
    match tbf {
        Ok(s) if s.success() => {}
        _ if std::env::var_os("CI").is_some() => panic!("cannot add a tbf qdisc with tc"),
        _ => {
            eprintln!("skipping egress_queue_drops_are_counted: tc or tbf unavailable");
            return;
        }
    }
    let fwd = lab.start(
        PathSpec {
            latency_ns: MS,
            jitter_ns: 0,
            loss: 0.0,
        },
        false,
    );
    let sock = lab.in_node(0, || {
        let s = UdpSocket::bind((IPS[0], 0))?;
        s.connect((IPS[1], 7))?;
        Ok(s)
    });
    let datagram = [0u8; 1400];
    for _ in 0..3000 {
        let _ = sock.send(&datagram);
    }
    thread::sleep(Duration::from_millis(100));
    let stats = fwd.stop().unwrap();
    report("egress_queue_drops_are_counted", &stats);
    // 4.2 MB offered to a 20 Mbit/s link with a 20 ms queue: most of it cannot fit.
    assert!(stats.egress_drops > 1000, "{stats:?}");
    assert_eq!(stats.send_errors, 0);
}
