//! The Tor layer's one door to the outside: clock, timers, randomness and sockets.
//!
//! Relays, clients and the socket exhaustion attacker are sans-IO state machines: they never
//! see the engine or the network stack, only an [`Io`] handed to each call.
//! [`crate::driver::HostIo`] is the thin driver that maps it onto the simulation (the host's
//! `Context` and its `NetStack`); tests hand in their own (`script::ScriptIo`) to feed a
//! relay inputs and read back what it asked for. QUIC between relays and the CPU model sit
//! behind the same calls: the state machines do not change when what carries their bytes, or
//! when their work completes, does. This module knows nothing of the engine's events, so the
//! machines that use it do not either.
//!
//! Sockets are the network stack's handles and events: the model asks for connections, writes
//! cells as messages, reads as far as its token buckets allow, and learns from the socket
//! events what arrived, what was accepted and what closed.
//!
//! The driver calls a [`Machine`] in this order: `start` once, at the host's start; then, for
//! each engine event of the host, one of `on_timer` (a timer it armed fired) or
//! `on_socket_events` (the stack handled a packet or its own timer and reported something:
//! the machine drains it with [`Sockets::poll_event`]), and `after_event` last, whether or not the
//! machine was called. With a CPU model a busy main thread holds timers and socket events
//! back, in order, until it is free. Nothing calls back into the machine during a call: what
//! the stack reports is queued, and the machine reads it through `poll_event`.

use onionlab_engine::time::{SimDuration, SimTime};
use onionlab_engine::{HostId, HostRng};
use onionlab_net::quic::QuicInfo;
use onionlab_net::tcp::SendWindow;
use onionlab_net::{NetError, SocketEvent, SocketId};

use onionlab_torcore::cpu::Work;

use crate::cpu::CpuSecond;
use crate::wire::Wire;

/// What a Tor state machine may ask of the world, with `T` its own timer type: its clock and
/// timers, its sockets, QUIC and its CPU, each a trait of its own. A machine takes `impl Io<T>`
/// and reads every method through it; whatever implements the four is an `Io`.
pub trait Io<T>: Clock<T> + Sockets + QuicSockets + Cpu {}

impl<T, X: Clock<T> + Sockets + QuicSockets + Cpu> Io<T> for X {}

/// The clock, timers and random stream of a state machine, with `T` its timer type.
pub trait Clock<T> {
    /// The current simulated time, in nanoseconds.
    fn now(&self) -> SimTime;
    /// This host's random stream: draws in a fixed order give the same run on any thread count.
    fn rng(&mut self) -> &mut HostRng;
    /// Delivers `timer` back to the state machine at `at` (not before now).
    fn arm_at(&mut self, at: SimTime, timer: T);
    /// Delivers `timer` back to the state machine `delay` nanoseconds from now; a delay too
    /// long to add saturates, and the timer never fires.
    fn arm_in(&mut self, delay: SimDuration, timer: T) {
        let at = self.now().saturating_add(delay);
        self.arm_at(at, timer);
    }
    /// As [`Clock::arm_at`], for a timer that comes before everything else the host gave itself
    /// for the same instant (its other timers, its packets' deliveries), whenever either was
    /// armed; messages from hosts with smaller ids still come first (`Context::
    /// schedule_leading_at`). At most one may be pending.
    fn arm_leading_at(&mut self, at: SimTime, timer: T);
    /// Whether a leading timer ([`Clock::arm_leading_at`]) due at the current instant comes
    /// before the event being handled now: unless that event is a message from a host with a
    /// smaller id (see `Context::sender`). For a state machine that accounts for runs of a
    /// timer it stopped arming.
    fn leading_timer_first(&self) -> bool;
}

/// TCP sockets, and the events of every socket (QUIC's included).
pub trait Sockets {
    /// Accepts TCP connections on `port` ([`SocketEvent::Accepted`] reports each); fails if
    /// the host already listens on it.
    fn listen(&mut self, port: u16) -> Result<(), NetError>;
    /// Opens a TCP connection to `port` on host `peer`. The socket may be written to at
    /// once; [`SocketEvent::Connected`] reports the TCP handshake's end.
    fn connect(&mut self, peer: HostId, port: u16) -> SocketId;
    /// The next thing that happened on a socket, including what the calls below caused.
    fn poll_event(&mut self) -> Option<SocketEvent<Wire>>;
    /// Queues `bytes` carrying `message`; false if the socket cannot take them.
    fn write_message(&mut self, socket: SocketId, bytes: u64, message: Wire) -> bool;
    /// [`Sockets::write_message`], returning the room the socket has left after it (`None`:
    /// refused), for a writer with more to write.
    fn write_message_room(&mut self, socket: SocketId, bytes: u64, message: Wire) -> Option<u64>;
    /// Queues `count` copies of `message` of `bytes` each, which the caller knows fit (see
    /// [`Sockets::write_message_room`]): the same as that many calls of [`Sockets::write_message`].
    fn write_messages(&mut self, socket: SocketId, bytes: u64, message: Wire, count: u32) {
        for _ in 0..count {
            self.write_message(socket, bytes, message);
        }
    }
    /// Hands what was written on `socket` to the transport for sending.
    fn flush(&mut self, socket: SocketId);
    /// Whether the stack hands arriving bytes over by itself, or waits for [`Sockets::read`].
    fn set_auto_read(&mut self, socket: SocketId, on: bool);
    /// In-order bytes received on `socket` and not yet read.
    fn readable(&self, socket: SocketId) -> u64;
    /// Reads up to `max` bytes; the messages they complete come back as events.
    fn read(&mut self, socket: SocketId, max: u64) -> u64;
    /// Closes the sending direction of `socket` once everything written has been sent (a
    /// FIN); a QUIC stream is finished, a QUIC connection closed.
    fn close(&mut self, socket: SocketId);
    /// Resets a TCP connection: it closes at once, and an RST goes to the peer if the peer
    /// knew of it. QUIC sockets close as with [`Sockets::close`].
    fn abort(&mut self, socket: SocketId);
    /// Whether `socket` names an open socket: a TCP connection, QUIC connection or QUIC
    /// stream.
    fn is_open(&self, socket: SocketId) -> bool;
    /// The kernel's view of a connection's send window (KIST reads its congestion window and
    /// queues). For a QUIC stream: its connection's window and flight, and the stream's own
    /// unsent bytes; for a QUIC connection: its window, flight and the unsent bytes of all its
    /// streams.
    fn send_window(&self, socket: SocketId) -> Option<SendWindow>;
    /// Asks (or stops asking) to hear when TCP socket `socket`'s state may have moved, its
    /// send window included (see [`Sockets::take_watch_hit`]).
    fn watch(&mut self, socket: SocketId, on: bool);
    /// Whether a watched socket's state may have moved since the last call.
    fn take_watch_hit(&mut self) -> bool;
}

/// QUIC connections and their streams (the `quic` channel design).
pub trait QuicSockets {
    /// Accepts QUIC connections on UDP `port`; fails if the port is taken.
    fn quic_listen(&mut self, port: u16) -> Result<(), NetError>;
    /// Opens a QUIC connection; [`SocketEvent::Connected`] reports its handshake's end.
    fn quic_connect(&mut self, peer: HostId, port: u16) -> SocketId;
    /// Opens a stream on a QUIC connection (a socket of its own); `None` if it cannot.
    fn open_stream(&mut self, conn: SocketId) -> Option<SocketId>;
    /// A QUIC connection's (or a stream's connection's) state and counters.
    fn quic_info(&self, socket: SocketId) -> Option<QuicInfo>;
}

/// The host's modelled CPU, where there is one.
pub trait Cpu {
    /// Whether the host's work runs on a modelled CPU, which may hold timers back.
    fn models_cpu(&self) -> bool;
    /// Hands an onion-skin handshake to the worker threads; returns when its answer is
    /// ready (now, without a CPU model).
    fn onion_skin(&mut self) -> SimTime;
    /// The CPU's figures for the second just ended (none without a CPU model).
    fn cpu_second(&mut self) -> Option<CpuSecond> {
        None
    }
}

/// A Tor state machine the driver runs: started once, then woken by its timers and by what
/// happens on its sockets.
pub trait Machine {
    /// What the machine arms and gets back when it fires.
    type Timer;
    /// Called once, at the host's start, before any other call.
    fn start(&mut self, io: &mut impl Io<Self::Timer>);
    /// One of the machine's timers fired (possibly late, on a modelled CPU that was busy).
    fn on_timer(&mut self, io: &mut impl Io<Self::Timer>, timer: Self::Timer);
    /// Handles what the sockets reported since the last call.
    fn on_socket_events(&mut self, io: &mut impl Io<Self::Timer>);
    /// Called last for every event of the host (a packet, a socket's or the machine's timer,
    /// its CPU), once the stack and the machine have handled it: for a machine waiting on
    /// watched sockets ([`Sockets::watch`]), which must learn of a move in the event it happened
    /// in, even one that gave the machine nothing to handle (an ACK).
    #[inline]
    fn after_event(&mut self, _io: &mut impl Io<Self::Timer>) {}
    /// What the machine has done so far, for a CPU model to price (counts only grow).
    fn work(&self) -> Work {
        Work::default()
    }
    /// Whether `timer` is work for the main thread, which waits while the thread is busy
    /// (measurement is not).
    fn deferrable(_timer: &Self::Timer) -> bool {
        true
    }
}

/// A scripted outside world for unit tests of the state machines: the test queues socket
/// events and incoming messages, calls the state machine, and reads back what it asked for.
#[cfg(test)]
pub(crate) mod script {
    use std::collections::VecDeque;

    use onionlab_engine::host_rng;

    use super::*;

    /// What the state machine asked for, in order.
    #[derive(Clone, Debug, PartialEq)]
    pub(crate) enum Asked {
        Connect {
            socket: SocketId,
            peer: HostId,
            port: u16,
        },
        Write {
            socket: SocketId,
            message: Wire,
        },
        Close(SocketId),
        Abort(SocketId),
    }

    struct Socket {
        open: bool,
        /// Whether the machine watches it ([`Sockets::watch`]).
        watched: bool,
        /// Messages that arrived and wait to be read, with their sizes.
        inbox: VecDeque<(u64, Wire)>,
    }

    pub(crate) struct ScriptIo<T> {
        pub now: SimTime,
        rng: HostRng,
        pub timers: Vec<(SimTime, T)>,
        events: VecDeque<SocketEvent<Wire>>,
        sockets: Vec<Socket>,
        pub asked: Vec<Asked>,
        pub listening: Vec<u16>,
        /// Congestion window (segments) every socket reports: what KIST may write.
        pub cwnd: u32,
        /// Whether QUIC connections report their handshake complete.
        pub quic_ready: bool,
        /// The streams the state machine opened.
        pub streams: Vec<SocketId>,
        /// What [`Clock::leading_timer_first`] answers: whether the script fires the timers due
        /// now before the input it hands in now.
        pub timers_first: bool,
        /// What [`Cpu::models_cpu`] answers.
        pub cpu: bool,
        /// What [`Sockets::take_watch_hit`] answers next: the script sets it when it moves a
        /// watched socket's state.
        pub watch_hit: bool,
    }

    impl<T> ScriptIo<T> {
        pub(crate) fn new() -> Self {
            ScriptIo {
                now: 0,
                rng: host_rng(1, 0, 0),
                timers: Vec::new(),
                events: VecDeque::new(),
                sockets: Vec::new(),
                asked: Vec::new(),
                listening: Vec::new(),
                timers_first: false,
                cpu: false,
                watch_hit: false,
                cwnd: 10,
                quic_ready: false,
                streams: Vec::new(),
            }
        }

        fn new_socket(&mut self) -> SocketId {
            self.sockets.push(Socket {
                open: true,
                watched: false,
                inbox: VecDeque::new(),
            });
            SocketId {
                slot: (self.sockets.len() - 1) as u32,
                generation: 0,
            }
        }

        /// A peer connected to `port`; returns the accepted socket.
        pub(crate) fn accept(&mut self, peer: HostId, port: u16) -> SocketId {
            let socket = self.new_socket();
            self.events
                .push_back(SocketEvent::Accepted { socket, port, peer });
            socket
        }

        /// A connection the state machine opened is established.
        pub(crate) fn establish(&mut self, socket: SocketId) {
            self.moved(socket);
            self.events.push_back(SocketEvent::Connected(socket));
        }

        /// Something happened on `socket`, as on a stack's socket, that a watcher hears of.
        fn moved(&mut self, socket: SocketId) {
            self.watch_hit |= self.sockets[socket.slot as usize].watched;
        }

        /// `message` (of `bytes`) arrives on `socket` and waits to be read.
        pub(crate) fn arrive(&mut self, socket: SocketId, bytes: u64, message: Wire) {
            self.moved(socket);
            self.sockets[socket.slot as usize]
                .inbox
                .push_back((bytes, message));
            self.events.push_back(SocketEvent::Readable(socket));
        }

        /// `message` arrives on `socket` already read, as on a socket the stack reads itself
        /// (`Io::set_auto_read`, a client's channels).
        pub(crate) fn deliver(&mut self, socket: SocketId, message: Wire) {
            self.moved(socket);
            self.events.push_back(SocketEvent::Message {
                socket,
                message,
                count: 1,
            });
        }

        /// Sets the congestion window every socket reports: a move of every watched socket.
        pub(crate) fn set_cwnd(&mut self, cwnd: u32) {
            self.cwnd = cwnd;
            self.watch_hit |= self.sockets.iter().any(|s| s.watched);
        }

        /// The peer closed its direction of `socket` (after what already `arrive`d on it).
        pub(crate) fn peer_close(&mut self, socket: SocketId) {
            self.moved(socket);
            self.events.push_back(SocketEvent::PeerClosed(socket));
        }

        /// Removes and returns the timers due by `now`, earliest first.
        pub(crate) fn due(&mut self) -> Vec<T> {
            let now = self.now;
            let mut due: Vec<(SimTime, T)> = Vec::new();
            let mut i = 0;
            while i < self.timers.len() {
                if self.timers[i].0 <= now {
                    due.push(self.timers.remove(i));
                } else {
                    i += 1;
                }
            }
            due.sort_by_key(|t| t.0);
            due.into_iter().map(|(_, t)| t).collect()
        }

        /// Has `machine` handle what its sockets reported, as the driver hands it an event.
        pub(crate) fn hand_in(&mut self, machine: &mut impl Machine<Timer = T>) {
            machine.on_socket_events(self);
            machine.after_event(self);
        }

        /// The sockets the machine connected, with the peer and port.
        pub(crate) fn connects(&self) -> Vec<(SocketId, HostId, u16)> {
            self.asked
                .iter()
                .filter_map(|a| match *a {
                    Asked::Connect { socket, peer, port } => Some((socket, peer, port)),
                    _ => None,
                })
                .collect()
        }

        /// The messages written on `socket` so far.
        pub(crate) fn written(&self, socket: SocketId) -> Vec<Wire> {
            self.asked
                .iter()
                .filter_map(|a| match a {
                    Asked::Write { socket: s, message } if *s == socket => Some(*message),
                    _ => None,
                })
                .collect()
        }
    }

    impl<T> Clock<T> for ScriptIo<T> {
        fn now(&self) -> SimTime {
            self.now
        }
        fn rng(&mut self) -> &mut HostRng {
            &mut self.rng
        }
        fn arm_at(&mut self, at: SimTime, timer: T) {
            self.timers.push((at.max(self.now), timer));
        }
        fn arm_leading_at(&mut self, at: SimTime, timer: T) {
            // First in the list: `due` keeps the order of ties, and a leading timer comes
            // before those armed earlier for its instant, and after it.
            self.timers.insert(0, (at.max(self.now), timer));
        }
        fn leading_timer_first(&self) -> bool {
            self.timers_first
        }
    }

    impl<T> Sockets for ScriptIo<T> {
        fn listen(&mut self, port: u16) -> Result<(), NetError> {
            self.listening.push(port);
            Ok(())
        }
        fn connect(&mut self, peer: HostId, port: u16) -> SocketId {
            let socket = self.new_socket();
            self.asked.push(Asked::Connect { socket, peer, port });
            socket
        }
        fn poll_event(&mut self) -> Option<SocketEvent<Wire>> {
            self.events.pop_front()
        }
        fn write_message(&mut self, socket: SocketId, _bytes: u64, message: Wire) -> bool {
            self.asked.push(Asked::Write { socket, message });
            true
        }
        fn write_message_room(&mut self, socket: SocketId, _: u64, message: Wire) -> Option<u64> {
            self.asked.push(Asked::Write { socket, message });
            Some(u64::MAX)
        }
        fn flush(&mut self, _socket: SocketId) {}
        fn set_auto_read(&mut self, _socket: SocketId, _on: bool) {}
        fn readable(&self, socket: SocketId) -> u64 {
            self.sockets[socket.slot as usize]
                .inbox
                .iter()
                .map(|m| m.0)
                .sum()
        }
        /// Like the stack: the bytes read, then the messages they complete, equal ones back to
        /// back as one run.
        fn read(&mut self, socket: SocketId, max: u64) -> u64 {
            let mut n = 0;
            let mut runs: Vec<(Wire, u32)> = Vec::new();
            while let Some(&(bytes, message)) = self.sockets[socket.slot as usize].inbox.front() {
                if n + bytes > max {
                    break;
                }
                self.sockets[socket.slot as usize].inbox.pop_front();
                n += bytes;
                match runs.last_mut() {
                    Some((last, count)) if *last == message => *count += 1,
                    _ => runs.push((message, 1)),
                }
            }
            if n > 0 {
                self.events
                    .push_back(SocketEvent::Data { socket, bytes: n });
            }
            for (message, count) in runs {
                self.events.push_back(SocketEvent::Message {
                    socket,
                    message,
                    count,
                });
            }
            n
        }
        fn close(&mut self, socket: SocketId) {
            self.sockets[socket.slot as usize].open = false;
            self.asked.push(Asked::Close(socket));
        }
        fn abort(&mut self, socket: SocketId) {
            self.sockets[socket.slot as usize].open = false;
            self.asked.push(Asked::Abort(socket));
        }
        fn is_open(&self, socket: SocketId) -> bool {
            self.sockets[socket.slot as usize].open
        }
        fn watch(&mut self, socket: SocketId, on: bool) {
            self.sockets[socket.slot as usize].watched = on;
        }
        fn take_watch_hit(&mut self) -> bool {
            std::mem::take(&mut self.watch_hit)
        }
        fn send_window(&self, socket: SocketId) -> Option<SendWindow> {
            if !self.is_open(socket) {
                return None;
            }
            Some(SendWindow {
                cwnd: self.cwnd,
                unacked: 0,
                notsent: 0,
                mss: 1448,
            })
        }
    }

    impl<T> QuicSockets for ScriptIo<T> {
        fn quic_listen(&mut self, port: u16) -> Result<(), NetError> {
            self.listening.push(port);
            Ok(())
        }
        fn quic_connect(&mut self, peer: HostId, port: u16) -> SocketId {
            let socket = self.new_socket();
            self.asked.push(Asked::Connect { socket, peer, port });
            socket
        }
        fn open_stream(&mut self, _conn: SocketId) -> Option<SocketId> {
            let stream = self.new_socket();
            self.streams.push(stream);
            Some(stream)
        }
        fn quic_info(&self, socket: SocketId) -> Option<QuicInfo> {
            let open = self
                .sockets
                .get(socket.slot as usize)
                .is_some_and(|s| s.open);
            open.then(|| QuicInfo {
                established: self.quic_ready,
                ..QuicInfo::default()
            })
        }
    }

    impl<T> Cpu for ScriptIo<T> {
        fn models_cpu(&self) -> bool {
            self.cpu
        }
        /// The workers answer at once: the script models no CPU time.
        fn onion_skin(&mut self) -> SimTime {
            self.now
        }
    }
}
