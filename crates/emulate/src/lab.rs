//! Everything an emulation creates on the machine, and its removal.
//!
//! A [`Lab`] owns its namespaces (all named `onionlab-<pid>-...`), the tor processes inside
//! them and its working directory. It touches nothing else: links are created inside its own
//! namespaces with `ip -n`, the switch is a thread of this process inside the lab's hub
//! namespace, and the root namespace gets no interface, address or route. Dropping the lab
//! (normal end, error, panic, Ctrl-C) stops every process and deletes every namespace, which
//! takes the veth pairs and queueing disciplines with it.

use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::netns;

/// Every namespace of every emulation starts with this.
pub const PREFIX: &str = "onionlab-";

/// Kernel TCP settings that make Linux's TCP the one the model implements: CUBIC (some
/// kernels default to BBR, which ignores loss and would make lossy paths look far better than
/// the model), SACK, restarting the window after idle, and no ECN (the model has none).
pub const MODEL_TCP: [(&str, &str); 4] = [
    ("tcp_congestion_control", "cubic"),
    ("tcp_sack", "1"),
    ("tcp_slow_start_after_idle", "1"),
    ("tcp_ecn", "0"),
];

/// A running tor.
struct TorProcess {
    name: String,
    child: Child,
}

/// This process's emulation on the machine: what it created, so that all of it is removed.
pub struct Lab {
    /// `onionlab-<pid>`: this lab's namespaces are `<id>-hub` and `<id>-<host index>`.
    id: String,
    namespaces: Vec<String>,
    tors: Vec<TorProcess>,
    work_dir: PathBuf,
    torn_down: bool,
}

impl Lab {
    /// Claims the names of this process's lab. Refuses if any namespace of that name exists,
    /// so a lab never adopts (and later deletes) something it did not create.
    pub fn new() -> Result<Lab, String> {
        let id = format!("{PREFIX}{}", std::process::id());
        let clash = netns::list(&format!("{id}-"));
        if !clash.is_empty() {
            return Err(format!(
                "namespaces {} already exist; they are not this run's, so emulation will not \
                 touch them (remove them with `ip netns delete NAME` if they are stale)",
                clash.join(", ")
            ));
        }
        let work_dir = std::env::temp_dir().join(&id);
        if work_dir.exists() {
            std::fs::remove_dir_all(&work_dir)
                .map_err(|e| format!("cannot clear {}: {e}", work_dir.display()))?;
        }
        std::fs::create_dir_all(&work_dir)
            .map_err(|e| format!("cannot create {}: {e}", work_dir.display()))?;
        Ok(Lab {
            id,
            namespaces: Vec::new(),
            tors: Vec::new(),
            work_dir,
            torn_down: false,
        })
    }

    /// The lab's working directory (`<temp dir>/onionlab-<pid>`), removed with the lab.
    pub fn work_dir(&self) -> &Path {
        &self.work_dir
    }

    /// The name of the hub namespace, where the switch and its ports live.
    pub fn hub(&self) -> String {
        format!("{}-hub", self.id)
    }

    /// The namespace of host `i`.
    pub fn node_ns(&self, i: usize) -> String {
        format!("{}-{i}", self.id)
    }

    /// Creates a namespace (recorded before it exists, so a half-made one is still removed),
    /// with loopback up, IPv6 off (the emulated Internet is IPv4 only, and router
    /// solicitations would only add noise to the switch) and the kernel's TCP set as the
    /// model's TCP behaves ([`MODEL_TCP`]), whatever this machine's defaults are.
    pub fn add_namespace(&mut self, name: &str) -> Result<(), String> {
        self.namespaces.push(name.to_string());
        netns::add(name)?;
        netns::run_in(name, move || {
            for key in ["all", "default"] {
                std::fs::write(format!("/proc/sys/net/ipv6/conf/{key}/disable_ipv6"), "1")?;
            }
            for (key, value) in MODEL_TCP {
                std::fs::write(format!("/proc/sys/net/ipv4/{key}"), value).map_err(|e| {
                    std::io::Error::new(e.kind(), format!("cannot set {key} to {value}: {e}"))
                })?;
            }
            Ok(())
        })
        .map_err(|e| format!("namespace {name}: {e}"))
    }

    /// Connects host `i`'s namespace to the hub: `eth0` in the host, `p<i>` in the hub. With
    /// `offloads`, the host's end segments and merges as a NIC with TSO, GSO and GRO does
    /// (the switch cuts its super-frames into wire segments); without, it sends and receives
    /// wire-sized frames only. The hub's end never merges.
    pub fn add_link(
        &mut self,
        i: usize,
        address: std::net::Ipv4Addr,
        mac: [u8; 6],
        offloads: bool,
    ) -> Result<(), String> {
        let hub = self.hub();
        let node = self.node_ns(i);
        let port = format!("p{i}");
        let mac = mac_text(mac);
        netns::ip(&[
            "-n", &hub, "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns",
            &node,
        ])?;
        netns::ip(&["-n", &node, "link", "set", "eth0", "address", &mac])?;
        netns::ip(&[
            "-n",
            &node,
            "addr",
            "add",
            &format!("{address}/16"),
            "dev",
            "eth0",
        ])?;
        netns::ip(&["-n", &node, "link", "set", "eth0", "up"])?;
        netns::ip(&["-n", &hub, "link", "set", &port, "up"])?;
        crate::forwarder::set_offloads(&node, "eth0", offloads)?;
        crate::forwarder::set_offloads(&hub, &port, false)
    }

    /// Tells host `i` every other host's MAC address once and for all. Without it, a lost ARP
    /// reply on a lossy path would stall a connection for a second, which the simulator (which
    /// has no ARP) never does.
    pub fn add_neighbours(
        &self,
        i: usize,
        hosts: &[(std::net::Ipv4Addr, [u8; 6])],
    ) -> Result<(), String> {
        let ns = self.node_ns(i);
        let mut batch = String::new();
        for (j, (address, mac)) in hosts.iter().enumerate() {
            if j != i {
                batch.push_str(&format!(
                    "neigh replace {address} lladdr {} dev eth0 nud permanent\n",
                    mac_text(*mac)
                ));
            }
        }
        netns::run(
            Command::new("ip").args(["-n", &ns, "-batch", "-"]),
            Some(batch.as_bytes()),
        )
        .map(drop)
        .map_err(|e| format!("cannot add neighbour entries in {ns}: {e}"))
    }

    /// Limits what leaves interface `dev` of namespace `ns` to `bits_per_sec`, queueing at
    /// most `queue` worth of traffic (a token bucket filter; excess packets are dropped).
    pub fn shape(
        &self,
        ns: &str,
        dev: &str,
        bits_per_sec: u64,
        queue: Duration,
    ) -> Result<(), String> {
        // One millisecond of traffic, but at least two full frames, so the filter can reach
        // its rate without letting long line-rate bursts through.
        let burst = (bits_per_sec / 8 / 1000).max(3028);
        let latency_ms = queue.as_millis().max(1);
        netns::run(
            Command::new("tc")
                .args(["-n", ns, "qdisc", "add", "dev", dev, "root", "tbf"])
                .args(["rate", &format!("{bits_per_sec}bit")])
                .args(["burst", &burst.to_string()])
                .args(["latency", &format!("{latency_ms}ms")]),
            None,
        )
        .map(drop)
    }

    /// Checks that no lab namespace has a default route: whatever tor does, its packets have
    /// nowhere to go but the switch.
    pub fn check_isolated(&self) -> Result<(), String> {
        for ns in &self.namespaces {
            let routes = netns::run(
                Command::new("ip").args(["-n", ns, "route", "show", "default"]),
                None,
            )?;
            if !String::from_utf8_lossy(&routes).trim().is_empty() {
                return Err(format!(
                    "namespace {ns} has a default route; refusing to run"
                ));
            }
        }
        Ok(())
    }

    /// Starts `tor -f torrc` inside namespace `ns`. The child enters the namespace itself
    /// before exec, so the PID we hold is tor's; it asks to be killed if the thread that
    /// started it dies (call this from the thread that lives as long as the lab), and it gets a
    /// process group of its own, so a Ctrl-C at the terminal reaches only `onionlab`, which
    /// then stops the tors after it has stopped measuring.
    pub fn start_tor(
        &mut self,
        name: &str,
        ns: &str,
        torrc: &Path,
        log: &Path,
    ) -> Result<(), String> {
        let ns_file: OwnedFd = File::open(netns::path(ns))
            .map_err(|e| format!("namespace {ns}: {e}"))?
            .into();
        let out = File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
        let err = out
            .try_clone()
            .map_err(|e| format!("{}: {e}", log.display()))?;
        let fd = ns_file.as_raw_fd();
        let mut cmd = Command::new("tor");
        cmd.arg("-f")
            .arg(torrc)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        // SAFETY: between fork and exec the closure only makes async-signal-safe system calls
        // (setns, prctl, setpgid) on a descriptor that stays open until after spawn returns.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::setpgid(0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start tor for {name}: {e}"))?;
        drop(ns_file);
        self.tors.push(TorProcess {
            name: name.to_string(),
            child,
        });
        Ok(())
    }

    /// Name and PID of every tor started, in the order they were started. A PID stays tor's
    /// until the lab reaps it (in [`Lab::exited_tors`] or at teardown).
    pub fn tor_pids(&self) -> Vec<(String, u32)> {
        self.tors
            .iter()
            .map(|t| (t.name.clone(), t.child.id()))
            .collect()
    }

    /// Names of tors that have exited, with their exit status.
    pub fn exited_tors(&mut self) -> Vec<String> {
        self.tors
            .iter_mut()
            .filter_map(|t| match t.child.try_wait() {
                Ok(Some(status)) => Some(format!("{} ({status})", t.name)),
                _ => None,
            })
            .collect()
    }

    /// Stops every tor, deletes every namespace and the working directory. Returns what could
    /// not be removed (empty when all is clean).
    pub fn teardown(&mut self) -> Vec<String> {
        if self.torn_down {
            return Vec::new();
        }
        self.torn_down = true;
        let mut problems = Vec::new();
        for t in &self.tors {
            // SAFETY: plain kill(2) on a child we spawned and have not reaped yet.
            unsafe {
                libc::kill(t.child.id() as i32, libc::SIGTERM);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(3);
        for t in &mut self.tors {
            loop {
                match t.child.try_wait() {
                    Ok(Some(_)) => break,
                    Ok(None) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(20))
                    }
                    _ => {
                        let _ = t.child.kill();
                        let _ = t.child.wait();
                        break;
                    }
                }
            }
        }
        // Anything else still inside a lab namespace (nothing should be) goes too.
        for ns in &self.namespaces {
            for pid in netns::pids(ns) {
                // SAFETY: kill(2) on a process inside a namespace this lab created.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
        }
        for ns in self.namespaces.iter().rev() {
            if netns::exists(ns) {
                if let Err(e) = netns::delete(ns) {
                    problems.push(e);
                }
            }
        }
        if let Err(e) = std::fs::remove_dir_all(&self.work_dir) {
            if e.kind() != std::io::ErrorKind::NotFound {
                problems.push(format!("cannot remove {}: {e}", self.work_dir.display()));
            }
        }
        problems
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for p in self.teardown() {
            eprintln!("warning: clean-up: {p}");
        }
    }
}

fn mac_text(mac: [u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Namespaces left by emulations whose process no longer exists (e.g. killed with SIGKILL,
/// which leaves no chance to clean up). Namespaces of running emulations are not listed.
pub fn stale_namespaces() -> Vec<String> {
    netns::list(PREFIX)
        .into_iter()
        .filter(|name| {
            let pid = name[PREFIX.len()..].split('-').next().unwrap_or("");
            match pid.parse::<u32>() {
                Ok(pid) => !Path::new(&format!("/proc/{pid}")).exists(),
                Err(_) => false,
            }
        })
        .collect()
}

/// Deletes stale namespaces (stopping anything left inside them) and their working
/// directories; returns the names removed.
pub fn remove_stale() -> Result<Vec<String>, String> {
    let stale = stale_namespaces();
    for ns in &stale {
        for pid in netns::pids(ns) {
            // SAFETY: kill(2) on a process inside a namespace of a dead emulation.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
        netns::delete(ns)?;
        if let Some(id) = ns.rsplit_once('-').map(|(id, _)| id) {
            let _ = std::fs::remove_dir_all(std::env::temp_dir().join(id));
        }
    }
    Ok(stale)
}
