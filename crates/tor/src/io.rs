//! The Tor layer's one door to the outside: clock, timers, randomness and sockets.
//!
//! Relays, clients and the socket exhaustion attacker are sans-IO state machines: they never see the engine or the network
//! stack, only an [`Io`] handed to each call. [`HostIo`] is the thin driver that maps it onto
//! the simulation (the host's `Context` and its `NetStack`); tests hand in their own to feed a
//! relay inputs and read back what it asked for. A future transport (QUIC between relays) or a
//! CPU model slots in behind the same calls: the state machines do not change when what
//! carries their bytes, or when their work completes, does.
//!
//! Sockets are the network stack's handles and events: the model asks for connections, writes
//! cells as messages, reads as far as its token buckets allow, and learns from the socket
//! events what arrived, what was accepted and what closed.

use std::ops::{Deref, DerefMut};

use onionlab_engine::time::{SimDuration, SimTime};
use onionlab_engine::{Context, HostId, HostRng};
use onionlab_net::quic::QuicInfo;
use onionlab_net::tcp::SendWindow;
use onionlab_net::{NetError, NetEvent, NetStack, SocketEvent, SocketId};

use onionlab_torcore::cpu::Work;

use crate::cpu::{CpuConfig, CpuEvent, CpuSecond, CpuStage};
use crate::host::Ev;
use crate::wire::Wire;

/// What a Tor state machine may ask of the world, with `T` its own timer type.
pub trait Io<T> {
    fn now(&self) -> SimTime;
    /// This host's random stream: draws in a fixed order give the same run on any thread count.
    fn rng(&mut self) -> &mut HostRng;
    /// Delivers `timer` back to the state machine at `at` (not before now).
    fn arm_at(&mut self, at: SimTime, timer: T);
    fn arm_in(&mut self, delay: SimDuration, timer: T) {
        let at = self.now().saturating_add(delay);
        self.arm_at(at, timer);
    }
    /// As [`Io::arm_at`], for a timer that comes before everything else the host gave itself
    /// for the same instant (its other timers, its packets' deliveries), whenever either was
    /// armed; messages from hosts with smaller ids still come first (`Context::
    /// schedule_leading_at`). At most one may be pending.
    fn arm_leading_at(&mut self, at: SimTime, timer: T);

    fn listen(&mut self, port: u16) -> Result<(), NetError>;
    fn connect(&mut self, peer: HostId, port: u16) -> SocketId;
    /// The next thing that happened on a socket, including what the calls below caused.
    fn poll_event(&mut self) -> Option<SocketEvent<Wire>>;
    /// Queues `bytes` carrying `message`; false if the socket cannot take them.
    fn write_message(&mut self, socket: SocketId, bytes: u64, message: Wire) -> bool;
    /// [`Io::write_message`], returning the room the socket has left after it (`None`:
    /// refused), for a writer with more to write.
    fn write_message_room(&mut self, socket: SocketId, bytes: u64, message: Wire) -> Option<u64>;
    /// Queues `count` copies of `message` of `bytes` each, which the caller knows fit (see
    /// [`Io::write_message_room`]): the same as that many calls of [`Io::write_message`].
    fn write_messages(&mut self, socket: SocketId, bytes: u64, message: Wire, count: u32) {
        for _ in 0..count {
            self.write_message(socket, bytes, message);
        }
    }
    fn flush(&mut self, socket: SocketId);
    /// Whether the stack hands arriving bytes over by itself, or waits for [`Io::read`].
    fn set_auto_read(&mut self, socket: SocketId, on: bool);
    fn readable(&self, socket: SocketId) -> u64;
    /// Reads up to `max` bytes; the messages they complete come back as events.
    fn read(&mut self, socket: SocketId, max: u64) -> u64;
    fn close(&mut self, socket: SocketId);
    fn abort(&mut self, socket: SocketId);
    fn is_open(&self, socket: SocketId) -> bool;
    /// The kernel's view of a connection's send window (KIST reads its congestion window and
    /// queues). For a QUIC stream: its connection's window and flight, and the stream's own
    /// unsent bytes; for a QUIC connection: its window, flight and the unsent bytes of all its
    /// streams.
    fn send_window(&self, socket: SocketId) -> Option<SendWindow>;
    /// Asks (or stops asking) to hear when TCP socket `socket`'s state may have moved, its
    /// send window included (see [`Io::take_watch_hit`]).
    fn watch(&mut self, socket: SocketId, on: bool);
    /// Whether a watched socket's state may have moved since the last call.
    fn take_watch_hit(&mut self) -> bool;
    /// Whether a leading timer ([`Io::arm_leading_at`]) due at the current instant comes
    /// before the event being handled now: unless that event is a message from a host with a
    /// smaller id (see `Context::sender`). For a state machine that accounts for runs of a
    /// timer it stopped arming.
    fn leading_timer_first(&self) -> bool;
    /// Whether the host's work runs on a modelled CPU, which may hold timers back.
    fn models_cpu(&self) -> bool;

    fn quic_listen(&mut self, port: u16) -> Result<(), NetError>;
    /// Opens a QUIC connection; [`SocketEvent::Connected`] reports its handshake's end.
    fn quic_connect(&mut self, peer: HostId, port: u16) -> SocketId;
    /// Opens a stream on a QUIC connection (a socket of its own); `None` if it cannot.
    fn open_stream(&mut self, conn: SocketId) -> Option<SocketId>;
    /// A QUIC connection's (or a stream's connection's) state and counters.
    fn quic_info(&self, socket: SocketId) -> Option<QuicInfo>;

    /// Hands an onion-skin handshake to the worker threads; returns when its answer is
    /// ready (now, without a CPU model).
    fn onion_skin(&mut self) -> SimTime {
        self.now()
    }
    /// The CPU's figures for the second just ended (none without a CPU model).
    fn cpu_second(&mut self) -> Option<CpuSecond> {
        None
    }
}

/// The driver: a host's engine context and network stack, for one event.
pub struct HostIo<'a, 'b> {
    pub ctx: &'a mut Context<'b, Ev>,
    pub stack: &'a mut NetStack<Wire>,
    pub cpu: Option<&'a mut CpuStage>,
}

/// The engine event that carries a state machine's timer back to it.
pub trait TimerEvent {
    fn event(self) -> Ev;
}

/// A Tor state machine the driver runs: started once, then woken by its timers and by what
/// happens on its sockets.
pub trait Machine {
    type Timer: TimerEvent;
    fn start(&mut self, io: &mut impl Io<Self::Timer>);
    fn on_timer(&mut self, io: &mut impl Io<Self::Timer>, timer: Self::Timer);
    /// Handles what the sockets reported since the last call.
    fn on_socket_events(&mut self, io: &mut impl Io<Self::Timer>);
    /// Called last for every event of the host (a packet, a socket's or the machine's timer,
    /// its CPU), once the stack and the machine have handled it: for a machine waiting on
    /// watched sockets ([`Io::watch`]), which must learn of a move in the event it happened
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

/// A sans-IO Tor state machine and the network stack its driver ([`HostIo`]) runs it on.
/// It reads as the state machine itself (`Deref`), so results are read straight off it.
pub struct Driven<M: Machine> {
    pub stack: NetStack<Wire>,
    pub core: M,
    /// The host's CPU, when the scenario models one.
    cpu: Option<Box<CpuStage>>,
    /// What woke the state machine while its CPU was busy, in order: timers, and `None` for
    /// socket events (one entry handles all that arrived). The main thread works through it
    /// one entry per free moment, as an event loop runs each ready callback in turn, so a
    /// relay flooded with input still runs its scheduler.
    backlog: std::collections::VecDeque<Option<M::Timer>>,
    sockets_waiting: bool,
}

impl<M: Machine> Driven<M> {
    pub fn new(stack: NetStack<Wire>, core: M) -> Self {
        Driven {
            stack,
            core,
            cpu: None,
            backlog: std::collections::VecDeque::new(),
            sockets_waiting: false,
        }
    }

    /// Runs the state machine on a modelled CPU.
    pub fn with_cpu(mut self, cfg: &CpuConfig) -> Self {
        self.cpu = Some(Box::new(CpuStage::new(cfg)));
        self
    }

    fn io<'a, 'b>(
        ctx: &'a mut Context<'b, Ev>,
        stack: &'a mut NetStack<Wire>,
        cpu: &'a mut Option<Box<CpuStage>>,
    ) -> HostIo<'a, 'b> {
        HostIo {
            ctx,
            stack,
            cpu: cpu.as_deref_mut(),
        }
    }

    pub fn start(&mut self, ctx: &mut Context<'_, Ev>) {
        self.core
            .start(&mut Self::io(ctx, &mut self.stack, &mut self.cpu));
        self.charge(ctx);
    }

    pub fn on_timer(&mut self, ctx: &mut Context<'_, Ev>, timer: M::Timer) {
        self.timer_inner(ctx, timer);
        self.core
            .after_event(&mut Self::io(ctx, &mut self.stack, &mut self.cpu));
    }

    fn timer_inner(&mut self, ctx: &mut Context<'_, Ev>, timer: M::Timer) {
        if let Some(cpu) = &mut self.cpu {
            if (cpu.busy(ctx.now()) || !self.backlog.is_empty()) && M::deferrable(&timer) {
                self.backlog.push_back(Some(timer));
                cpu.arm_wake(ctx);
                return;
            }
        }
        self.core
            .on_timer(&mut Self::io(ctx, &mut self.stack, &mut self.cpu), timer);
        self.charge(ctx);
    }

    /// A packet or timer of the network stack: the stack handles it, then the state machine
    /// what the stack reported (at once, or when its CPU is free).
    pub fn on_net(&mut self, ctx: &mut Context<'_, Ev>, event: NetEvent<Wire>) {
        self.net_inner(ctx, event);
        self.core
            .after_event(&mut Self::io(ctx, &mut self.stack, &mut self.cpu));
    }

    fn net_inner(&mut self, ctx: &mut Context<'_, Ev>, event: NetEvent<Wire>) {
        self.stack.handle(ctx, event);
        if let Some(cpu) = &mut self.cpu {
            if !self.stack.has_events() {
                return;
            }
            if cpu.busy(ctx.now()) || !self.backlog.is_empty() {
                if !self.sockets_waiting {
                    self.sockets_waiting = true;
                    self.backlog.push_back(None);
                }
                cpu.arm_wake(ctx);
                return;
            }
        }
        self.core
            .on_socket_events(&mut Self::io(ctx, &mut self.stack, &mut self.cpu));
        self.charge(ctx);
    }

    /// An event of the CPU stage.
    pub fn on_cpu(&mut self, ctx: &mut Context<'_, Ev>, event: CpuEvent) {
        self.cpu_inner(ctx, event);
        self.core
            .after_event(&mut Self::io(ctx, &mut self.stack, &mut self.cpu));
    }

    fn cpu_inner(&mut self, ctx: &mut Context<'_, Ev>, event: CpuEvent) {
        let Some(cpu) = &mut self.cpu else {
            return;
        };
        match event {
            CpuEvent::Wake => {
                cpu.woken();
                if cpu.busy(ctx.now()) {
                    cpu.arm_wake(ctx);
                    return;
                }
                let Some(next) = self.backlog.pop_front() else {
                    return;
                };
                let io = &mut Self::io(ctx, &mut self.stack, &mut self.cpu);
                match next {
                    Some(timer) => self.core.on_timer(io, timer),
                    None => {
                        self.sockets_waiting = false;
                        self.core.on_socket_events(io);
                    }
                }
                self.charge(ctx);
                if !self.backlog.is_empty() {
                    if let Some(cpu) = &mut self.cpu {
                        cpu.arm_wake(ctx);
                    }
                }
            }
            CpuEvent::Window => cpu.window_ended(ctx),
            CpuEvent::Demand { from, ppm } => cpu.mate_demand(from, ppm),
        }
    }

    /// Keeps the CPU busy for what the last handler did.
    fn charge(&mut self, ctx: &mut Context<'_, Ev>) {
        if let Some(cpu) = &mut self.cpu {
            cpu.charge(ctx, self.core.work(), self.stack.packets());
        }
    }
}

impl<M: Machine> Deref for Driven<M> {
    type Target = M;
    fn deref(&self) -> &M {
        &self.core
    }
}

impl<M: Machine> DerefMut for Driven<M> {
    fn deref_mut(&mut self) -> &mut M {
        &mut self.core
    }
}

impl<T: TimerEvent> Io<T> for HostIo<'_, '_> {
    #[inline]
    fn now(&self) -> SimTime {
        self.ctx.now()
    }
    fn rng(&mut self) -> &mut HostRng {
        self.ctx.rng()
    }
    fn arm_at(&mut self, at: SimTime, timer: T) {
        self.ctx.schedule_at(at, timer.event());
    }
    fn arm_leading_at(&mut self, at: SimTime, timer: T) {
        self.ctx.schedule_leading_at(at, timer.event());
    }
    fn listen(&mut self, port: u16) -> Result<(), NetError> {
        self.stack.listen(port)
    }
    fn connect(&mut self, peer: HostId, port: u16) -> SocketId {
        self.stack.connect(self.ctx, peer, port)
    }
    #[inline]
    fn poll_event(&mut self) -> Option<SocketEvent<Wire>> {
        self.stack.poll_event()
    }
    #[inline]
    fn write_message(&mut self, socket: SocketId, bytes: u64, message: Wire) -> bool {
        self.stack.write_message(socket, bytes, message)
    }
    fn write_message_room(&mut self, socket: SocketId, bytes: u64, message: Wire) -> Option<u64> {
        self.stack.write_message_room(socket, bytes, message)
    }
    fn write_messages(&mut self, socket: SocketId, bytes: u64, message: Wire, count: u32) {
        self.stack.write_messages(socket, bytes, message, count);
    }
    fn flush(&mut self, socket: SocketId) {
        self.stack.flush(self.ctx, socket);
    }
    fn set_auto_read(&mut self, socket: SocketId, on: bool) {
        self.stack.set_auto_read(socket, on);
    }
    fn readable(&self, socket: SocketId) -> u64 {
        self.stack.readable(socket)
    }
    fn read(&mut self, socket: SocketId, max: u64) -> u64 {
        self.stack.read(self.ctx, socket, max)
    }
    fn close(&mut self, socket: SocketId) {
        self.stack.close(self.ctx, socket);
    }
    fn abort(&mut self, socket: SocketId) {
        self.stack.abort(self.ctx, socket);
    }
    fn is_open(&self, socket: SocketId) -> bool {
        self.stack.is_open(socket)
    }
    #[inline]
    fn send_window(&self, socket: SocketId) -> Option<SendWindow> {
        self.stack.send_window(socket)
    }
    fn watch(&mut self, socket: SocketId, on: bool) {
        self.stack.watch(socket, on);
    }
    #[inline]
    fn take_watch_hit(&mut self) -> bool {
        self.stack.take_watch_hit()
    }
    #[inline]
    fn leading_timer_first(&self) -> bool {
        self.ctx.sender() >= self.ctx.host()
    }
    #[inline]
    fn models_cpu(&self) -> bool {
        self.cpu.is_some()
    }
    fn quic_listen(&mut self, port: u16) -> Result<(), NetError> {
        self.stack.quic_listen(port)
    }
    fn quic_connect(&mut self, peer: HostId, port: u16) -> SocketId {
        self.stack.quic_connect(self.ctx, peer, port)
    }
    fn open_stream(&mut self, conn: SocketId) -> Option<SocketId> {
        self.stack.open_stream(conn)
    }
    fn onion_skin(&mut self) -> SimTime {
        match &mut self.cpu {
            Some(cpu) => cpu.onion_skin(self.ctx),
            None => self.ctx.now(),
        }
    }
    fn cpu_second(&mut self) -> Option<CpuSecond> {
        self.cpu.as_mut().map(|cpu| cpu.take_second())
    }
    fn quic_info(&self, socket: SocketId) -> Option<QuicInfo> {
        self.stack.quic_info(socket)
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
    pub enum Asked {
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
        /// Whether the machine watches it ([`Io::watch`]).
        watched: bool,
        /// Messages that arrived and wait to be read, with their sizes.
        inbox: VecDeque<(u64, Wire)>,
    }

    pub struct ScriptIo<T> {
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
        /// What [`Io::leading_timer_first`] answers: whether the script fires the timers due
        /// now before the input it hands in now.
        pub timers_first: bool,
        /// What [`Io::models_cpu`] answers.
        pub cpu: bool,
        /// What [`Io::take_watch_hit`] answers next: the script sets it when it moves a
        /// watched socket's state.
        pub watch_hit: bool,
    }

    impl<T> ScriptIo<T> {
        pub fn new() -> Self {
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
        pub fn accept(&mut self, peer: HostId, port: u16) -> SocketId {
            let socket = self.new_socket();
            self.events
                .push_back(SocketEvent::Accepted { socket, port, peer });
            socket
        }

        /// A connection the state machine opened is established.
        pub fn establish(&mut self, socket: SocketId) {
            self.moved(socket);
            self.events.push_back(SocketEvent::Connected(socket));
        }

        /// Something happened on `socket`, as on a stack's socket, that a watcher hears of.
        fn moved(&mut self, socket: SocketId) {
            self.watch_hit |= self.sockets[socket.slot as usize].watched;
        }

        /// `message` (of `bytes`) arrives on `socket` and waits to be read.
        pub fn arrive(&mut self, socket: SocketId, bytes: u64, message: Wire) {
            self.moved(socket);
            self.sockets[socket.slot as usize]
                .inbox
                .push_back((bytes, message));
            self.events.push_back(SocketEvent::Readable(socket));
        }

        /// Sets the congestion window every socket reports: a move of every watched socket.
        pub fn set_cwnd(&mut self, cwnd: u32) {
            self.cwnd = cwnd;
            self.watch_hit |= self.sockets.iter().any(|s| s.watched);
        }

        /// The peer closed its direction of `socket` (after what already `arrive`d on it).
        pub fn peer_close(&mut self, socket: SocketId) {
            self.moved(socket);
            self.events.push_back(SocketEvent::PeerClosed(socket));
        }

        /// Removes and returns the timers due by `now`, earliest first.
        pub fn due(&mut self) -> Vec<T> {
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

        /// The messages written on `socket` so far.
        pub fn written(&self, socket: SocketId) -> Vec<Wire> {
            self.asked
                .iter()
                .filter_map(|a| match a {
                    Asked::Write { socket: s, message } if *s == socket => Some(*message),
                    _ => None,
                })
                .collect()
        }
    }

    impl<T> Io<T> for ScriptIo<T> {
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
        fn leading_timer_first(&self) -> bool {
            self.timers_first
        }
        fn models_cpu(&self) -> bool {
            self.cpu
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
}
