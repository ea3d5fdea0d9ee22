//! The simulated hosts of a Tor network and the events they exchange.

use onionlab_engine::time::SimTime;
use onionlab_engine::{Context, Host, HostId, Simulation};
use onionlab_net::{NetEvent, NetStack};

use crate::attack::Attacker;
use crate::client::Client;
pub use crate::driver::Driven;
pub use crate::event::Ev;
use crate::measure::Census;
use crate::process::ProcessHost;
use crate::relay::Relay;
use crate::server::Server;
use crate::wire::Wire;

/// The panic message of an injected fault.
pub const INJECTED_FAULT: &str = "injected fault";

/// Schedules a model panic ("injected fault") on `host` at `at` (or at the simulation's
/// current time if `at` is earlier), for tests of how a run that fails is reported. The panic
/// surfaces from `Simulation::run_until` on the calling thread, whichever worker runs the
/// host.
///
/// # Panics
/// If `host` is not a host of the simulation.
pub fn inject_fault(sim: &mut Simulation<TorHost>, host: HostId, at: SimTime) {
    assert!(
        (host as usize) < sim.host_count(),
        "inject_fault: no host {host} (the simulation has {})",
        sim.host_count()
    );
    sim.schedule(host, at, Ev::Fault);
}

/// One host of a simulated Tor network, as the engine runs it: the model its role gives it.
pub enum TorHost {
    /// A relay, driven on its network stack (and its CPU, when the scenario models one).
    Relay(Box<Driven<Relay>>),
    /// A tor client running its workload, driven on its network stack.
    Client(Box<Driven<Client>>),
    /// A file server, which runs on its network stack directly.
    Server(Box<Server>),
    /// The socket exhaustion attacker, driven on its network stack.
    Attacker(Box<Driven<Attacker>>),
    /// A real program in simulated time (a managed process).
    Process(Box<ProcessHost>),
    /// A host that takes part in the network but whose traffic is not modelled (directory
    /// authorities: the consensus is given to everyone at the start).
    Idle,
}

impl TorHost {
    /// Adds what this host holds to `census`; `is_relay` says which hosts are relays.
    pub fn census(&self, is_relay: impl Fn(onionlab_engine::HostId) -> bool, census: &mut Census) {
        match self {
            TorHost::Relay(r) => r.core.census(is_relay, census),
            TorHost::Client(c) => c.core.census(census),
            _ => {}
        }
        let Some(stack) = self.stack() else {
            return;
        };
        let (open, slots) = stack.socket_counts();
        census.sockets += open as u64;
        census.socket_slots += slots as u64;
    }

    /// The host's network stack; none for an idle host.
    #[inline]
    fn stack(&self) -> Option<&NetStack<Wire>> {
        match self {
            TorHost::Relay(r) => Some(&r.stack),
            TorHost::Client(c) => Some(&c.stack),
            TorHost::Server(s) => Some(&s.stack),
            TorHost::Attacker(a) => Some(&a.stack),
            TorHost::Process(p) => Some(&p.stack),
            TorHost::Idle => None,
        }
    }
}

impl Host for TorHost {
    type Event = Ev;

    /// The host's network stack: every packet and socket timer starts there, one pointer away
    /// from the engine's slot.
    #[inline]
    fn prefetch(&self) {
        if let Some(stack) = self.stack() {
            stack.prefetch();
        }
    }

    /// A packet's socket: the slot that receiving it reads first and throughout.
    #[inline]
    fn prefetch_event(&self, event: &Ev) {
        if let (Ev::Net(NetEvent::Arrive(packet)), Some(stack)) = (event, self.stack()) {
            stack.prefetch_packet(packet);
        }
    }

    fn handle(&mut self, ctx: &mut Context<'_, Ev>, event: Ev) {
        match (self, event) {
            (_, Ev::Fault) => panic!("{INJECTED_FAULT}"),
            (TorHost::Relay(r), Ev::Net(e)) => r.on_net(ctx, e),
            (TorHost::Relay(r), Ev::Relay(t)) => r.on_timer(ctx, t),
            (TorHost::Relay(r), Ev::Start) => r.start(ctx),
            (TorHost::Relay(r), Ev::Cpu(e)) => r.on_cpu(ctx, e),
            (TorHost::Client(c), Ev::Net(e)) => c.on_net(ctx, e),
            (TorHost::Client(c), Ev::Client(t)) => c.on_timer(ctx, t),
            (TorHost::Client(c), Ev::Start) => c.start(ctx),
            (TorHost::Server(s), Ev::Net(e)) => s.on_net(ctx, e),
            (TorHost::Server(s), Ev::Start) => s.start(),
            (TorHost::Attacker(a), Ev::Net(e)) => a.on_net(ctx, e),
            (TorHost::Attacker(a), Ev::Attack(t)) => a.on_timer(ctx, t),
            (TorHost::Attacker(a), Ev::Start) => a.start(ctx),
            (TorHost::Process(p), Ev::Process(t)) => p.on_timer(ctx, t),
            (TorHost::Process(p), Ev::Net(e)) => p.on_net(ctx, e),
            (TorHost::Process(p), Ev::Start) => p.start(ctx),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    /// Every engine event is as large as the largest, and events are copied into and out of
    /// the engine's queues, so growth here costs every design (the QUIC packet variant once
    /// took `Ev` from 136 to 168 bytes: +3.9% instructions on the toy network under vanilla,
    /// most of it in memcpy; with QUIC datagrams boxed and 32-bit SACK edges it is 112). On
    /// the full network millions of events wait at once (run.json's `state`), so a byte here
    /// is megabytes there. Keep it from growing unnoticed.
    #[test]
    fn events_stay_small() {
        use onionlab_net::packet::{Packet, QuicDatagram, TcpPacket};
        use std::mem::size_of;
        type W = crate::wire::Wire;
        eprintln!(
            "Ev {} Packet {} TcpPacket {} QuicDatagram {}",
            size_of::<super::Ev>(),
            size_of::<Packet<W>>(),
            size_of::<TcpPacket<W>>(),
            size_of::<QuicDatagram<W>>(),
        );
        assert!(size_of::<super::Ev>() <= 112);
    }
}
