//! The events of a simulated Tor network: what the engine delivers to a host. Each state
//! machine's timer converts into one by `From`, so the machines, which only arm their own
//! timers through [`crate::io::Io`], need not know this type.

use onionlab_net::NetEvent;

use crate::attack::AttackTimer;
use crate::client::ClientTimer;
use crate::cpu::CpuEvent;
use crate::process::ProcessTimer;
use crate::relay::RelayTimer;
use crate::wire::Wire;

/// An event for a host: a packet or network-stack timer, the start, a state machine's timer,
/// the CPU stage's, or an injected fault.
pub enum Ev {
    /// A packet for the host's network stack, or one of the stack's own timers.
    Net(NetEvent<Wire>),
    /// The host's start, which [`crate::build::build`] gives every host at time 0.
    Start,
    /// A relay's timer.
    Relay(RelayTimer),
    /// A client's timer.
    Client(ClientTimer),
    /// The socket exhaustion attacker's timer.
    Attack(AttackTimer),
    /// A relay's CPU stage.
    Cpu(CpuEvent),
    /// A managed-process host's timer.
    Process(ProcessTimer),
    /// A deliberate failure, for tests of what happens when a model panics: any host handling
    /// it panics with the message [`crate::INJECTED_FAULT`]. Scheduled by [`crate::inject_fault`].
    Fault,
}

impl From<NetEvent<Wire>> for Ev {
    fn from(e: NetEvent<Wire>) -> Self {
        Ev::Net(e)
    }
}

impl From<RelayTimer> for Ev {
    fn from(timer: RelayTimer) -> Self {
        Ev::Relay(timer)
    }
}

impl From<ClientTimer> for Ev {
    fn from(timer: ClientTimer) -> Self {
        Ev::Client(timer)
    }
}

impl From<AttackTimer> for Ev {
    fn from(timer: AttackTimer) -> Self {
        Ev::Attack(timer)
    }
}

impl From<CpuEvent> for Ev {
    fn from(event: CpuEvent) -> Self {
        Ev::Cpu(event)
    }
}
