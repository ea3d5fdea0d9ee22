//! The user-space switch that joins the node namespaces and adds each path's latency, jitter
//! and loss.
//!
//! This kernel has no `netem`, and no bridge would add delay anyway, so there is no bridge: every
//! node's veth peer (`p<port>`) sits unbridged in a hub namespace, and one thread there reads
//! every frame from an `AF_PACKET` socket per port, asks the [`DelayLine`] when (and whether) it
//! may leave, holds it in a heap until then, and writes it to the destination port's socket.
//! Broadcast and multicast (ARP requests, IPv6 neighbour discovery) are flooded at once, without
//! delay or loss, so address resolution never adds a path's latency twice or fails by chance.
//!
//! Offloads: a veth hands the peer the sender's skb as it is, which may carry a checksum the
//! stack left for "hardware" to fill in (CHECKSUM_PARTIAL) and may be a GSO super-frame of up to
//! 64 KiB. A plain packet socket reads such a frame with the checksum field unfinished and
//! writes it back as a finished frame, so the receiver drops it as corrupt; a super-frame cannot
//! be written at all (it exceeds the MTU). Every socket therefore uses `PACKET_VNET_HDR`: each
//! read starts with a `virtio_net_hdr` describing the checksum and GSO state, and writing the
//! same header in front of the frame makes the kernel rebuild the skb in that state. That keeps
//! frames intact whatever the interfaces' offload settings are (tried on kernel 6.18: without
//! the header, UDP and TCP both fail even with TSO/GSO/GRO off, because checksums stay
//! unfinished; turning tx-checksumming off as well would also work, but costs every sender a
//! software checksum and still breaks on a super-frame). A super-frame is not a wire packet,
//! though: delayed and lost as one frame it would make 44 segments share one fate. So the
//! switch cuts each TCP super-frame into the wire segments a NIC would send ([`crate::gso`])
//! before the [`DelayLine`] sees them, and each is delayed and lost on its own. [`set_offloads`]
//! turns TSO, GSO and GRO on or off on a port's ends: off, every frame is wire-sized from the
//! start; on, senders size their bursts as Linux does and receivers merge them with GRO.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

use crate::delay::{DelayLine, PathSpec};
use crate::gso::{Cut, VNET_HDR_LEN};
use crate::netns;

/// One switch port: the hub-side end of a node's veth pair.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Port {
    /// Interface name in the hub namespace (`p<port>`).
    pub ifname: String,
    /// MAC address of the node-side end: frames addressed to it leave through this port.
    pub mac: [u8; 6],
}

/// What the switch connects and how each direction between two ports behaves.
#[derive(Clone, Debug)]
pub struct ForwarderConfig {
    /// The switch's ports, one per node; a port's index is its row and column in `paths`.
    pub ports: Vec<Port>,
    /// `paths[src][dst]`, one-way, `ports.len()` square.
    pub paths: Vec<Vec<PathSpec>>,
    /// Seed of the random stream that draws jitter and loss.
    pub seed: u64,
    /// See [`DelayLine::new`].
    pub allow_reorder: bool,
}

/// Counters of the switch since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ForwarderStats {
    /// Frames read from any port (a super-frame counts once).
    pub received: u64,
    /// Unicast wire frames written to their destination port after their delay (a super-frame
    /// counts as the segments it was cut into).
    pub forwarded: u64,
    /// Unicast wire frames dropped by the path's loss probability (segments counted alone).
    pub lost: u64,
    /// Broadcast or multicast frames, each written to every other port.
    pub flooded: u64,
    /// Unicast frames to a MAC no other port has.
    pub unknown_dst: u64,
    /// Frames dropped because they were too short, larger than [`MAX_FRAME`], or because the
    /// pending-frame pool was full.
    pub dropped_other: u64,
    /// Frames the kernel dropped because a port's receive buffer was full (`tp_drops`): the
    /// switch fell behind.
    pub socket_drops: u64,
    /// Frames (or flooded copies) the destination port's queueing discipline dropped
    /// (`ENOBUFS`), e.g. because a
    /// rate limit on the hub-side interface had its queue full: congestion loss on the
    /// emulated link, not a fault.
    pub egress_drops: u64,
    /// Other writes (frames or flooded copies) that failed: the port went away, or the
    /// socket's send buffer was full.
    pub send_errors: u64,
    /// Reads that failed because a port went away or down.
    pub recv_errors: u64,
    /// GSO super-frames seen (`gso_type != 0`): none when the senders' offloads are off.
    pub gso_frames: u64,
    /// Wire segments the switch cut super-frames into, each delayed and lost on its own.
    pub gso_segments: u64,
    /// Super-frames forwarded whole because they were not TCP over IPv4 or IPv6 (delayed and
    /// lost as one frame).
    pub gso_whole: u64,
    /// Frames held for their release time right now; after [`ForwarderHandle::stop`], the ones
    /// discarded (in flight when the switch stopped), so that the counts add up: `received`
    /// plus `gso_segments` less the super-frames cut equals `forwarded`, `lost`, `flooded`,
    /// `unknown_dst`, `dropped_other`, failed writes and `pending` together.
    pub pending: u64,
}

/// Largest frame (Ethernet header and payload, without the virtio header) the switch carries.
/// Frames are normally at most 1514 bytes once offloads are off, but a GSO super-frame is up to
/// 64 KiB plus headers and must still arrive intact when offloads were left on.
pub const MAX_FRAME: usize = 65536 + 1024;

/// Pool buffer for ordinary frames: header plus a 1518-byte (VLAN-tagged) frame, rounded up.
const SMALL_BUF: usize = 2048;
const LARGE_BUF: usize = VNET_HDR_LEN + MAX_FRAME;
/// Reads go into one scratch buffer one byte larger than any frame we carry, so an oversized
/// frame shows as truncated instead of silently cut.
const SCRATCH: usize = LARGE_BUF + 1;
/// Bounds on frames held at once: 256 MiB of small and 64 MiB of large buffers. Past that the
/// emulated paths hold more than any scenario plausibly sends, and dropping beats swapping.
const MAX_SMALL: usize = 1 << 17;
const MAX_LARGE: usize = 1024;
/// Buffers allocated up front so that ordinary runs never grow the pool.
const PREALLOC_SMALL: usize = 4096;
/// Frames read from one port before the others (and due releases) get a turn.
const BATCH: usize = 64;
/// How often the kernel's per-socket drop counters are read and how long the loop sleeps when
/// nothing is pending, so that [`ForwarderHandle::stats`] stays fresh.
const STATS_INTERVAL_NS: u64 = 100_000_000;
const RCVBUF: libc::c_int = 8 << 20;
/// A written frame stays charged to the socket while it waits in the port's qdisc (a rate
/// limit may hold hundreds of milliseconds of traffic), so the send buffer must exceed any
/// such queue; otherwise writes fail with EAGAIN at a limit the scenario never chose, instead
/// of the qdisc dropping at its own. It is accounting only, not memory set aside.
const SNDBUF: libc::c_int = 64 << 20;

/// The running switch thread.
pub struct ForwarderHandle {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<io::Result<()>>>,
}

impl ForwarderHandle {
    /// Counters as last published by the switch: `socket_drops` is refreshed every 100 ms, the
    /// rest on every wakeup.
    pub fn stats(&self) -> ForwarderStats {
        self.shared.snapshot()
    }

    /// Whether the switch thread is still running; it only stops by itself on an error.
    pub fn is_running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Stops the switch and returns its final counters. Frames still pending are discarded.
    /// An error means the switch had died earlier, so measurements taken through it are void.
    pub fn stop(mut self) -> io::Result<ForwarderStats> {
        self.shutdown()?;
        Ok(self.shared.snapshot())
    }

    fn shutdown(&mut self) -> io::Result<()> {
        let Some(thread) = self.thread.take() else {
            return Ok(());
        };
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to the eventfd we own.
        unsafe { libc::write(self.shared.wake.as_raw_fd(), (&one as *const u64).cast(), 8) };
        thread
            .join()
            .map_err(|_| io::Error::other("forwarder thread panicked"))?
    }
}

impl Drop for ForwarderHandle {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

/// State shared by the handle and the switch thread.
struct Shared {
    /// eventfd the handle writes to stop the switch; polled with the ports so stopping is
    /// immediate even while the switch sleeps until a far release time.
    wake: OwnedFd,
    received: AtomicU64,
    forwarded: AtomicU64,
    lost: AtomicU64,
    flooded: AtomicU64,
    unknown_dst: AtomicU64,
    dropped_other: AtomicU64,
    socket_drops: AtomicU64,
    egress_drops: AtomicU64,
    send_errors: AtomicU64,
    recv_errors: AtomicU64,
    gso_frames: AtomicU64,
    gso_segments: AtomicU64,
    gso_whole: AtomicU64,
    pending: AtomicU64,
}

impl Shared {
    fn new(wake: OwnedFd) -> Self {
        Shared {
            wake,
            received: AtomicU64::new(0),
            forwarded: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            flooded: AtomicU64::new(0),
            unknown_dst: AtomicU64::new(0),
            dropped_other: AtomicU64::new(0),
            socket_drops: AtomicU64::new(0),
            egress_drops: AtomicU64::new(0),
            send_errors: AtomicU64::new(0),
            recv_errors: AtomicU64::new(0),
            gso_frames: AtomicU64::new(0),
            gso_segments: AtomicU64::new(0),
            gso_whole: AtomicU64::new(0),
            pending: AtomicU64::new(0),
        }
    }

    fn publish(&self, s: &ForwarderStats) {
        self.received.store(s.received, Relaxed);
        self.forwarded.store(s.forwarded, Relaxed);
        self.lost.store(s.lost, Relaxed);
        self.flooded.store(s.flooded, Relaxed);
        self.unknown_dst.store(s.unknown_dst, Relaxed);
        self.dropped_other.store(s.dropped_other, Relaxed);
        self.socket_drops.store(s.socket_drops, Relaxed);
        self.egress_drops.store(s.egress_drops, Relaxed);
        self.send_errors.store(s.send_errors, Relaxed);
        self.recv_errors.store(s.recv_errors, Relaxed);
        self.gso_frames.store(s.gso_frames, Relaxed);
        self.gso_segments.store(s.gso_segments, Relaxed);
        self.gso_whole.store(s.gso_whole, Relaxed);
        self.pending.store(s.pending, Relaxed);
    }

    fn snapshot(&self) -> ForwarderStats {
        ForwarderStats {
            received: self.received.load(Relaxed),
            forwarded: self.forwarded.load(Relaxed),
            lost: self.lost.load(Relaxed),
            flooded: self.flooded.load(Relaxed),
            unknown_dst: self.unknown_dst.load(Relaxed),
            dropped_other: self.dropped_other.load(Relaxed),
            socket_drops: self.socket_drops.load(Relaxed),
            egress_drops: self.egress_drops.load(Relaxed),
            send_errors: self.send_errors.load(Relaxed),
            recv_errors: self.recv_errors.load(Relaxed),
            gso_frames: self.gso_frames.load(Relaxed),
            gso_segments: self.gso_segments.load(Relaxed),
            gso_whole: self.gso_whole.load(Relaxed),
            pending: self.pending.load(Relaxed),
        }
    }
}

/// Starts the switch on a thread inside `hub_ns`. Returns once every port's socket is open, so
/// a missing interface or namespace is reported here rather than lost on the thread.
pub fn start(hub_ns: &str, config: ForwarderConfig) -> io::Result<ForwarderHandle> {
    let invalid = |m: String| io::Error::new(io::ErrorKind::InvalidInput, m);
    let n = config.ports.len();
    if n == 0 {
        return Err(invalid("forwarder needs at least one port".into()));
    }
    if config.paths.len() != n {
        return Err(invalid(format!(
            "path matrix has {} rows for {n} ports",
            config.paths.len()
        )));
    }
    for (i, p) in config.ports.iter().enumerate() {
        if p.mac[0] & 1 != 0 {
            return Err(invalid(format!("port {} has a multicast MAC", p.ifname)));
        }
        if config.ports[..i].iter().any(|q| q.mac == p.mac) {
            return Err(invalid(format!("port {} repeats a MAC", p.ifname)));
        }
    }
    let delay =
        DelayLine::new(&config.paths, config.seed, config.allow_reorder).map_err(invalid)?;

    // SAFETY: eventfd takes no pointers; the result is checked before use.
    let wake = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if wake < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `wake` is a fresh descriptor nobody else owns.
    let shared = Arc::new(Shared::new(unsafe { OwnedFd::from_raw_fd(wake) }));

    let (ready_tx, ready_rx) = mpsc::sync_channel::<io::Result<()>>(1);
    let thread_shared = Arc::clone(&shared);
    let thread = netns::spawn_in(hub_ns, move || {
        let mut switch = match Switch::open(&config.ports, delay) {
            Ok(s) => {
                let _ = ready_tx.send(Ok(()));
                s
            }
            Err(e) => {
                let _ = ready_tx.send(Err(e));
                return Ok(());
            }
        };
        switch.run(&thread_shared)
    })?;
    match ready_rx.recv() {
        Ok(Ok(())) => Ok(ForwarderHandle {
            shared,
            thread: Some(thread),
        }),
        Ok(Err(e)) => {
            let _ = thread.join();
            Err(e)
        }
        // The thread ended before reporting: entering the namespace failed.
        Err(_) => match thread.join() {
            Ok(Err(e)) => Err(e),
            Ok(Ok(())) => Err(io::Error::other("forwarder thread ended during setup")),
            Err(_) => Err(io::Error::other("forwarder thread panicked during setup")),
        },
    }
}

/// A frame waiting in the pool for its release time.
#[derive(PartialEq, Eq)]
struct Pending {
    release: u64,
    /// Arrival order, so frames due at the same nanosecond leave in the order they came.
    seq: u64,
    slot: u32,
    len: u32,
    dst: u32,
}

impl Ord for Pending {
    fn cmp(&self, other: &Self) -> Ordering {
        // Reversed: BinaryHeap is a max-heap and we want the earliest release on top.
        (other.release, other.seq).cmp(&(self.release, self.seq))
    }
}

impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Frame buffers in two sizes, recycled through free lists so the loop does not allocate per
/// frame: it only grows (up to the bounds) when more frames are pending than ever before.
struct Pool {
    bufs: Vec<Box<[u8]>>,
    free_small: Vec<u32>,
    free_large: Vec<u32>,
    small: usize,
    large: usize,
}

impl Pool {
    fn new() -> Self {
        let mut pool = Pool {
            bufs: Vec::with_capacity(PREALLOC_SMALL),
            free_small: Vec::with_capacity(PREALLOC_SMALL),
            free_large: Vec::new(),
            small: 0,
            large: 0,
        };
        for _ in 0..PREALLOC_SMALL {
            let slot = pool.grow(SMALL_BUF);
            pool.free_small.push(slot);
        }
        pool
    }

    fn grow(&mut self, size: usize) -> u32 {
        if size == SMALL_BUF {
            self.small += 1;
        } else {
            self.large += 1;
        }
        self.bufs.push(vec![0; size].into_boxed_slice());
        (self.bufs.len() - 1) as u32
    }

    /// A buffer of at least `len` bytes, or `None` if the pool is at its bound.
    fn take(&mut self, len: usize) -> Option<u32> {
        if len <= SMALL_BUF {
            match self.free_small.pop() {
                Some(s) => Some(s),
                None if self.small < MAX_SMALL => Some(self.grow(SMALL_BUF)),
                None => None,
            }
        } else {
            match self.free_large.pop() {
                Some(s) => Some(s),
                None if self.large < MAX_LARGE => Some(self.grow(LARGE_BUF)),
                None => None,
            }
        }
    }

    fn give(&mut self, slot: u32) {
        if self.bufs[slot as usize].len() == SMALL_BUF {
            self.free_small.push(slot);
        } else {
            self.free_large.push(slot);
        }
    }
}

/// The switch loop's state; lives on the hub thread.
struct Switch {
    socks: Vec<OwnedFd>,
    macs: Vec<[u8; 6]>,
    delay: DelayLine,
    heap: BinaryHeap<Pending>,
    pool: Pool,
    scratch: Box<[u8]>,
    seq: u64,
    stats: ForwarderStats,
}

impl Switch {
    /// Opens every port's socket; must run inside the hub namespace.
    fn open(ports: &[Port], delay: DelayLine) -> io::Result<Switch> {
        let socks = ports
            .iter()
            .map(|p| open_port(&p.ifname))
            .collect::<io::Result<Vec<_>>>()?;
        Ok(Switch {
            socks,
            macs: ports.iter().map(|p| p.mac).collect(),
            delay,
            heap: BinaryHeap::with_capacity(PREALLOC_SMALL),
            pool: Pool::new(),
            scratch: vec![0; SCRATCH].into_boxed_slice(),
            seq: 0,
            stats: ForwarderStats::default(),
        })
    }

    fn run(&mut self, shared: &Shared) -> io::Result<()> {
        // Release times are honoured to the nanosecond the timer allows; the default 50 µs slack
        // would add that much to every hop.
        // SAFETY: PR_SET_TIMERSLACK takes plain integers and only affects this thread.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
        let n = self.socks.len();
        let mut fds: Vec<libc::pollfd> = self
            .socks
            .iter()
            .map(|s| s.as_raw_fd())
            .chain(std::iter::once(shared.wake.as_raw_fd()))
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let mut next_stats = 0;
        let mut backlog = false;
        loop {
            let now = now_ns();
            self.release_due(now);
            if now >= next_stats {
                self.read_socket_drops();
                next_stats = now + STATS_INTERVAL_NS;
            }
            self.stats.pending = self.heap.len() as u64;
            shared.publish(&self.stats);

            let wait = if backlog {
                0
            } else {
                let until = self.heap.peek().map_or(next_stats, |p| p.release);
                until.min(next_stats).saturating_sub(now)
            };
            let ts = libc::timespec {
                tv_sec: (wait / 1_000_000_000) as libc::time_t,
                tv_nsec: (wait % 1_000_000_000) as libc::c_long,
            };
            // SAFETY: `fds` is a live array of `fds.len()` pollfds and `ts` a live timespec; a
            // null sigmask leaves the mask unchanged.
            let r = unsafe { libc::ppoll(fds.as_mut_ptr(), fds.len() as _, &ts, std::ptr::null()) };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if fds[n].revents != 0 {
                break;
            }
            backlog = false;
            for (port, pfd) in fds[..n].iter().enumerate() {
                if pfd.revents != 0 {
                    backlog |= self.drain(port)?;
                }
            }
        }
        self.read_socket_drops();
        self.stats.pending = self.heap.len() as u64;
        shared.publish(&self.stats);
        Ok(())
    }

    /// Reads up to [`BATCH`] frames from a port; returns whether more may be waiting.
    fn drain(&mut self, port: usize) -> io::Result<bool> {
        let fd = self.socks[port].as_raw_fd();
        for _ in 0..BATCH {
            // SAFETY: the scratch buffer is live and `SCRATCH` bytes long; MSG_TRUNC only makes
            // the return value the frame's full length.
            let r = unsafe {
                libc::recv(
                    fd,
                    self.scratch.as_mut_ptr().cast(),
                    SCRATCH,
                    libc::MSG_TRUNC | libc::MSG_DONTWAIT,
                )
            };
            if r < 0 {
                let e = io::Error::last_os_error();
                return match e.raw_os_error() {
                    Some(libc::EAGAIN) => Ok(false),
                    Some(libc::EINTR) => Ok(true),
                    // The interface went down or away (its namespace was deleted); reading
                    // cleared the error, and the port resumes if it comes back.
                    Some(libc::ENETDOWN | libc::ENXIO | libc::ENODEV) => {
                        self.stats.recv_errors += 1;
                        Ok(false)
                    }
                    _ => Err(e),
                };
            }
            self.handle(port, r as usize, now_ns());
        }
        Ok(true)
    }

    fn handle(&mut self, src: usize, len: usize, now: u64) {
        self.stats.received += 1;
        // Shorter than an Ethernet header, or truncated (larger than any buffer).
        if !(VNET_HDR_LEN + 14..SCRATCH).contains(&len) {
            self.stats.dropped_other += 1;
            return;
        }
        let dst_mac = &self.scratch[VNET_HDR_LEN..VNET_HDR_LEN + 6];
        if dst_mac[0] & 1 != 0 {
            self.stats.flooded += 1;
            for port in 0..self.socks.len() {
                if port != src {
                    let sent = send(&self.socks[port], &self.scratch[..len]);
                    self.stats.count_send(sent);
                }
            }
            return;
        }
        let dst = match self.macs.iter().position(|m| m[..] == *dst_mac) {
            Some(d) if d != src => d,
            _ => {
                self.stats.unknown_dst += 1;
                return;
            }
        };
        if self.scratch[1] == 0 {
            self.admit(src, dst, now, len, None);
            return;
        }
        self.stats.gso_frames += 1;
        match Cut::of(&self.scratch[..len]) {
            Some(cut) => {
                self.stats.gso_segments += cut.segments as u64;
                for i in 0..cut.segments {
                    self.admit(src, dst, now, len, Some((cut, i)));
                }
            }
            None => {
                self.stats.gso_whole += 1;
                self.admit(src, dst, now, len, None);
            }
        }
    }

    /// Asks the delay line about one wire frame and holds it until its release: the frame of
    /// `len` bytes in the scratch buffer, or segment `i` of the super-frame there.
    fn admit(&mut self, src: usize, dst: usize, now: u64, len: usize, seg: Option<(Cut, usize)>) {
        let Some(release) = self.delay.admit(src, dst, now) else {
            self.stats.lost += 1;
            return;
        };
        let frame = &self.scratch[..len];
        let len = seg.map_or(len, |(cut, i)| cut.len(frame, i));
        let Some(slot) = self.pool.take(len) else {
            self.stats.dropped_other += 1;
            return;
        };
        let buf = &mut self.pool.bufs[slot as usize];
        match seg {
            Some((cut, i)) => {
                cut.write(frame, i, buf);
            }
            None => buf[..len].copy_from_slice(frame),
        }
        self.heap.push(Pending {
            release,
            seq: self.seq,
            slot,
            len: len as u32,
            dst: dst as u32,
        });
        self.seq += 1;
    }

    fn release_due(&mut self, now: u64) {
        while self.heap.peek().is_some_and(|p| p.release <= now) {
            let Some(p) = self.heap.pop() else { break };
            let frame = &self.pool.bufs[p.slot as usize][..p.len as usize];
            let sent = send(&self.socks[p.dst as usize], frame);
            if sent.is_ok() {
                self.stats.forwarded += 1;
            }
            self.stats.count_send(sent);
            self.pool.give(p.slot);
        }
    }

    /// Adds the kernel's drop counts since the last call (reading resets them).
    fn read_socket_drops(&mut self) {
        for s in &self.socks {
            let mut st = libc::tpacket_stats {
                tp_packets: 0,
                tp_drops: 0,
            };
            let mut len = std::mem::size_of::<libc::tpacket_stats>() as libc::socklen_t;
            // SAFETY: `st` and `len` are live and `len` is `st`'s size.
            let r = unsafe {
                libc::getsockopt(
                    s.as_raw_fd(),
                    libc::SOL_PACKET,
                    libc::PACKET_STATISTICS,
                    (&mut st as *mut libc::tpacket_stats).cast(),
                    &mut len,
                )
            };
            if r == 0 {
                self.stats.socket_drops += u64::from(st.tp_drops);
            }
        }
    }
}

/// Writes one frame (virtio header included); the error is the errno.
fn send(sock: &OwnedFd, frame: &[u8]) -> Result<(), i32> {
    // SAFETY: `frame` is a live slice of `frame.len()` bytes.
    let r = unsafe {
        libc::send(
            sock.as_raw_fd(),
            frame.as_ptr().cast(),
            frame.len(),
            libc::MSG_DONTWAIT,
        )
    };
    if r == frame.len() as isize {
        Ok(())
    } else if r < 0 {
        Err(io::Error::last_os_error().raw_os_error().unwrap_or(0))
    } else {
        // A packet socket writes whole frames or nothing; treat a short count as an error.
        Err(libc::EMSGSIZE)
    }
}

impl ForwarderStats {
    fn count_send(&mut self, sent: Result<(), i32>) {
        match sent {
            Ok(()) => {}
            Err(libc::ENOBUFS) => self.egress_drops += 1,
            Err(_) => self.send_errors += 1,
        }
    }
}

fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a live timespec; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn setsockopt_int(
    fd: RawFd,
    level: libc::c_int,
    opt: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: passes a live c_int and its size.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Opens the packet socket of one port in the current namespace.
fn open_port(ifname: &str) -> io::Result<OwnedFd> {
    let ctx =
        |what: &str, e: io::Error| io::Error::new(e.kind(), format!("port {ifname}: {what}: {e}"));
    let cname = CString::new(ifname)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name contains NUL"))?;
    // SAFETY: `cname` is a live NUL-terminated string.
    let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    if ifindex == 0 {
        return Err(ctx("no such interface", io::Error::last_os_error()));
    }
    // Protocol 0: the socket receives nothing until bound, so options are in place before the
    // first frame and no frame of another interface slips in.
    // SAFETY: socket takes no pointers; the result is checked.
    let fd = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(ctx("socket", io::Error::last_os_error()));
    }
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    setsockopt_int(fd, libc::SOL_PACKET, libc::PACKET_VNET_HDR, 1)
        .map_err(|e| ctx("PACKET_VNET_HDR", e))?;
    // Without this every frame we write to a port would be read back from it.
    setsockopt_int(fd, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, 1)
        .map_err(|e| ctx("PACKET_IGNORE_OUTGOING", e))?;
    // Frames pile up here while the thread releases others; FORCE ignores rmem_max (needs
    // CAP_NET_ADMIN, which creating namespaces needed anyway), the plain option is the fallback.
    setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, RCVBUF)
        .or_else(|_| setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, RCVBUF))
        .map_err(|e| ctx("SO_RCVBUF", e))?;
    setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, SNDBUF)
        .or_else(|_| setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, SNDBUF))
        .map_err(|e| ctx("SO_SNDBUF", e))?;
    // SAFETY: sockaddr_ll is plain data, all-zero is valid.
    let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
    addr.sll_ifindex = ifindex as i32;
    // SAFETY: `addr` is a live sockaddr_ll and the length is its size.
    let r = unsafe {
        libc::bind(
            fd,
            (&addr as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(ctx("bind", io::Error::last_os_error()));
    }
    Ok(sock)
}

// From <linux/ethtool.h>; libc does not export them.
const ETHTOOL_GTSO: u32 = 0x1e;
const ETHTOOL_STSO: u32 = 0x1f;
const ETHTOOL_GGSO: u32 = 0x23;
const ETHTOOL_SGSO: u32 = 0x24;
const ETHTOOL_GGRO: u32 = 0x2b;
const ETHTOOL_SGRO: u32 = 0x2c;

/// `struct ethtool_value`.
#[repr(C)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

/// Turns TSO, GSO and GRO on or off on `ifname` in namespace `ns`, and checks that the kernel
/// did so.
///
/// Call it on both ends of every veth before traffic starts (a TCP connection keeps the
/// offload capabilities it saw at connect time). The node end is what sends super-frames
/// (TSO/GSO) and merges what it receives (GRO): on, it behaves as a host whose NIC offloads,
/// and the switch cuts its super-frames into wire segments ([`crate::gso`]); off, every frame
/// is wire-sized from the start. The hub end should stay off: GRO there would merge frames
/// before the switch delays them. Checksum offload is left on on purpose: `PACKET_VNET_HDR`
/// carries the unfinished-checksum state across the switch, and computing checksums in
/// software would only cost CPU.
pub fn set_offloads(ns: &str, ifname: &str, on: bool) -> Result<(), String> {
    let name = ifname.to_string();
    netns::run_in(ns, move || Ok(set_offloads_here(&name, on)))
        .map_err(|e| format!("cannot enter namespace {ns}: {e}"))?
        .map_err(|e| format!("{e} (interface {ifname} in namespace {ns})"))
}

fn set_offloads_here(ifname: &str, on: bool) -> Result<(), String> {
    if ifname.len() >= libc::IFNAMSIZ {
        return Err(format!("interface name {ifname} is too long"));
    }
    // SAFETY: socket takes no pointers; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(format!("socket: {}", io::Error::last_os_error()));
    }
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    let ethtool = |cmd: u32, data: u32| -> io::Result<u32> {
        let mut value = EthtoolValue { cmd, data };
        // SAFETY: ifreq is plain data (a name and a union of integers and pointers); all-zero
        // is valid.
        let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
        for (d, s) in ifr.ifr_name.iter_mut().zip(ifname.bytes()) {
            *d = s as libc::c_char;
        }
        ifr.ifr_ifru.ifru_data = (&mut value as *mut EthtoolValue).cast();
        // SAFETY: `ifr` is live, NUL-terminated in its name, and points at `value`, which
        // outlives the call and is the ethtool_value the command expects.
        let r = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCETHTOOL, &mut ifr) };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(value.data)
        }
    };
    for (what, get, set) in [
        ("tcp-segmentation-offload", ETHTOOL_GTSO, ETHTOOL_STSO),
        ("generic-segmentation-offload", ETHTOOL_GGSO, ETHTOOL_SGSO),
        ("generic-receive-offload", ETHTOOL_GGRO, ETHTOOL_SGRO),
    ] {
        let (want, word) = (u32::from(on), if on { "on" } else { "off" });
        ethtool(set, want).map_err(|e| format!("cannot turn {word} {what}: {e}"))?;
        match ethtool(get, 0) {
            Ok(v) if (v != 0) == on => {}
            Ok(_) => return Err(format!("{what} does not turn {word}")),
            Err(e) => return Err(format!("cannot read {what}: {e}")),
        }
    }
    Ok(())
}
