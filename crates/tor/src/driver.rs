//! The driver of the Tor state machines: [`HostIo`] maps the calls of [`Io`](crate::io::Io) onto one event
//! of the simulation (the host's engine `Context`, its `NetStack` and its CPU stage), and
//! [`Driven`] holds a machine with its stack and CPU and hands it each engine event. A
//! machine's timers become engine events ([`Ev`]) here, by `From`, so the machines know
//! nothing of `Ev`.

use std::ops::{Deref, DerefMut};

use onionlab_engine::time::SimTime;
use onionlab_engine::{Context, HostId, HostRng};
use onionlab_net::quic::QuicInfo;
use onionlab_net::tcp::SendWindow;
use onionlab_net::{NetError, NetEvent, NetStack, SocketEvent, SocketId};

use crate::cpu::{CpuConfig, CpuEvent, CpuSecond, CpuStage};
use crate::event::Ev;
use crate::io::{Clock, Cpu, Machine, QuicSockets, Sockets};
use crate::wire::Wire;

/// The driver: a host's engine context and network stack, for one event.
pub struct HostIo<'a, 'b> {
    /// The engine's view of the host for this event: its clock, random stream and
    /// scheduling.
    pub ctx: &'a mut Context<'b, Ev>,
    /// The host's network stack, which holds the machine's sockets.
    pub stack: &'a mut NetStack<Wire>,
    /// The host's CPU stage, when the scenario models one.
    pub cpu: Option<&'a mut CpuStage>,
}

/// A sans-IO Tor state machine and the network stack its driver ([`HostIo`]) runs it on.
/// It reads as the state machine itself (`Deref`), so results are read straight off it.
pub struct Driven<M: Machine> {
    /// The host's network stack, which holds the machine's sockets.
    pub stack: NetStack<Wire>,
    /// The state machine itself: a relay, client or attacker.
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

impl<M: Machine> Driven<M>
where
    M::Timer: Into<Ev>,
{
    /// Runs `core` on `stack`, without a CPU model (see [`Driven::with_cpu`]).
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

    /// The host's start ([`Ev::Start`]): starts the state machine.
    pub fn start(&mut self, ctx: &mut Context<'_, Ev>) {
        self.core
            .start(&mut Self::io(ctx, &mut self.stack, &mut self.cpu));
        self.charge(ctx);
    }

    /// One of the state machine's timers fired: it handles it at once, or, on a modelled CPU
    /// whose main thread is busy or has a backlog, once the thread gets to it (unless the
    /// machine says the timer is not main-thread work, [`Machine::deferrable`]).
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

impl<T: Into<Ev>> Clock<T> for HostIo<'_, '_> {
    #[inline]
    fn now(&self) -> SimTime {
        self.ctx.now()
    }
    fn rng(&mut self) -> &mut HostRng {
        self.ctx.rng()
    }
    fn arm_at(&mut self, at: SimTime, timer: T) {
        self.ctx.schedule_at(at, timer.into());
    }
    fn arm_leading_at(&mut self, at: SimTime, timer: T) {
        self.ctx.schedule_leading_at(at, timer.into());
    }
    #[inline]
    fn leading_timer_first(&self) -> bool {
        self.ctx.sender() >= self.ctx.host()
    }
}

impl Sockets for HostIo<'_, '_> {
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
}

impl QuicSockets for HostIo<'_, '_> {
    fn quic_listen(&mut self, port: u16) -> Result<(), NetError> {
        self.stack.quic_listen(port)
    }
    fn quic_connect(&mut self, peer: HostId, port: u16) -> SocketId {
        self.stack.quic_connect(self.ctx, peer, port)
    }
    fn open_stream(&mut self, conn: SocketId) -> Option<SocketId> {
        self.stack.open_stream(conn)
    }
    fn quic_info(&self, socket: SocketId) -> Option<QuicInfo> {
        self.stack.quic_info(socket)
    }
}

impl Cpu for HostIo<'_, '_> {
    #[inline]
    fn models_cpu(&self) -> bool {
        self.cpu.is_some()
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
}
