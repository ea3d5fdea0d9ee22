//! The seam between the relay and its channel design: every place where IMUX, Torchestra,
//! PCTCP or QUIC behave differently from vanilla tor is a hook of [`Design`], and each design
//! is one file that overrides the hooks it needs. The defaults are vanilla tor's behaviour, so
//! [`vanilla`] is empty and the relay's own code reads as vanilla tor with named detours.
//!
//! The hooks fall on the life of a channel and of a cell on it:
//!
//! ```text
//!  relay starts ────────── start                    (timers, extra listeners)
//!  socket accepted ─────── accepted                 (a port of the design's own)
//!  channel to a peer ───── open_channel             (its first connections)
//!    connection opened ─── waits_for_joined         (held until the peer confirms it)
//!    Join received ─────── joined                   (place, refuse or confirm it)
//!  circuit extended ────── circuit_conn             (a connection or stream of its own)
//!  circuit bound ───────── pin                      (the connection its cells go on)
//!  scheduler run ───────── rank, reads_every_limit  (state read once per run)
//!    each cell ─────────── pick_conn, cell_written  (its connection; what the design learns)
//!    run ends ──────────── MAY_PARK                 (whether the scheduler may sleep)
//!  circuit gone ────────── circuit_left             (its connection or stream goes with it)
//!  connection lost ─────── conn_lost, peer_refused  (what fails with it)
//!  once a second ───────── manage                   (resize channels)
//! ```
//!
//! The designs' decisions themselves (how many connections, which to close, which circuit is
//! heavy) are pure functions in [`crate::transport`]; the files here apply them to the
//! relay's tables. Dispatch is static: [`with_design!`] matches the relay's `ChannelDesign`
//! once per hook call, as the inline `if`s it replaced did, so a hook costs no more than the
//! branch it replaced.

use super::*;

mod imux;
mod pctcp;
mod quic;
mod torchestra;
mod vanilla;

pub(super) use imux::Imux;
pub(super) use pctcp::Pctcp;
pub(super) use quic::Quic;
pub(super) use torchestra::{Torchestra, TorchestraIdeal};
pub(super) use vanilla::Vanilla;

/// Calls a hook of the relay's design: `with_design!(relay.design, D => D::hook(...))`
/// expands to a match with `D` naming each design's type in turn, by full paths so that it
/// needs no imports where it is used. A new design adds its line here.
macro_rules! with_design {
    ($design:expr, $d:ident => $body:expr) => {
        match $design {
            ::onionlab_torcore::ChannelDesign::Vanilla => {
                type $d = $crate::relay::design::Vanilla;
                $body
            }
            ::onionlab_torcore::ChannelDesign::Pctcp => {
                type $d = $crate::relay::design::Pctcp;
                $body
            }
            ::onionlab_torcore::ChannelDesign::Torchestra => {
                type $d = $crate::relay::design::Torchestra;
                $body
            }
            ::onionlab_torcore::ChannelDesign::TorchestraIdeal => {
                type $d = $crate::relay::design::TorchestraIdeal;
                $body
            }
            ::onionlab_torcore::ChannelDesign::Imux => {
                type $d = $crate::relay::design::Imux;
                $body
            }
            ::onionlab_torcore::ChannelDesign::Quic => {
                type $d = $crate::relay::design::Quic;
                $body
            }
        }
    };
}
pub(super) use with_design;

/// What fails when a connection ends without the closing handshake.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ConnLoss {
    /// Only the connection: the channel has others that carry its circuits.
    Quiet,
    /// The connection and the circuits pinned to it: it was theirs alone.
    Circuits,
    /// The whole channel (vanilla: its one connection was the channel).
    Channel,
}

/// A relay-to-relay channel design. Every hook has vanilla tor's behaviour as its default.
pub(super) trait Design {
    /// Cells may overtake each other on different connections of a channel, so they carry
    /// sequence numbers (`Wire::Sequenced`) and the receiver puts them back in order.
    const SEQUENCED: bool = false;
    /// Bytes each sequenced cell adds on the wire.
    const SEQ_BYTES: u64 = 0;
    /// A connection we open names its channel with a Join, so a connection we accept is a
    /// channel of its own only until its Join names another. Vanilla has no Join: an accepted
    /// connection is the channel to its peer, which we may be asked to extend back through.
    const JOINS: bool = false;
    /// Circuit ids of a channel may be reused once freed (never on a sequenced channel,
    /// whatever this says). Not where circuits travel on streams of their own, as a new
    /// circuit's CREATE2 could overtake an old one's DESTROY.
    const REUSES_CIRC_IDS: bool = true;
    /// The client may declare a circuit bulk in its CREATE2 (idealised Torchestra).
    const HONOURS_DECLARED_BULK: bool = false;
    /// The scheduler may park when a run found no room (see `Scheduler::park`): not where a
    /// channel's room moves with the clock or comes from sockets the stack does not watch.
    const MAY_PARK: bool = true;

    /// The relay starts: timers and listeners of the design's own.
    fn start(_r: &mut Relay, _io: &mut impl Io<RelayTimer>) {}

    /// A peer connected to `port`; true if the design took the socket as its own.
    fn accepted(
        _r: &mut Relay,
        _io: &mut impl Io<RelayTimer>,
        _socket: SocketId,
        _port: u16,
        _peer: HostId,
    ) -> bool {
        false
    }

    /// The number of sockets the relay may hold.
    fn socket_limit(r: &Relay) -> u32 {
        r.conn_limit
    }

    /// A new channel to `target` opens its first connections.
    fn open_channel(r: &mut Relay, io: &mut impl Io<RelayTimer>, ch: ChannelId, _target: HostId) {
        r.open_conn(io, ch, 0);
    }

    /// A connection we opened carries no cells until the peer's Joined confirms it (`extra`:
    /// the channel had connections already).
    fn waits_for_joined(_extra: bool) -> bool {
        false
    }

    /// Connection `k`, which the peer opened, named channel `ch` in its Join (`heavy`: as
    /// Torchestra's heavy connection).
    fn joined(
        _r: &mut Relay,
        _io: &mut impl Io<RelayTimer>,
        _ch: ChannelId,
        _k: ConnId,
        _heavy: bool,
    ) {
    }

    /// A circuit being extended over `ch` gets a connection of its own: `Ok(Some(k))`, or
    /// `Ok(None)` where the design pins it later (`pin`); `Err` if none could be made.
    fn circuit_conn(
        _r: &mut Relay,
        _io: &mut impl Io<RelayTimer>,
        _ch: ChannelId,
    ) -> Result<Option<ConnId>, ()> {
        Ok(None)
    }

    /// The connection a circuit's side on channel `ch` is pinned to (`None`: chosen per
    /// cell), and whether it travels as heavy traffic. `arrived_on` is the connection its
    /// CREATE2 came on, or the one `circuit_conn` made; `bulk`: the client declared it bulk.
    fn pin(
        r: &mut Relay,
        ch: ChannelId,
        _bulk: bool,
        _arrived_on: Option<ConnId>,
    ) -> (Option<ConnId>, bool) {
        (r.table.channels[ch].conns.first().copied(), false)
    }

    /// A scheduler run takes channel `ch` in: state the design reads once per run.
    fn rank(_r: &mut Relay, _ch: ChannelId, _now: SimTime) {}

    /// The run reads the write limit of every connection of a channel at its start, rather
    /// than as each connection is tried.
    fn reads_every_limit(_r: &Relay) -> bool {
        false
    }

    /// The connection the next cell of `circ` (pinned to `pinned`) goes on, among those with
    /// room for `cell_bytes` in this run.
    fn pick_conn(
        r: &mut Relay,
        io: &impl Io<RelayTimer>,
        _ch: ChannelId,
        _circ: CircuitId,
        pinned: Option<ConnId>,
        cell_bytes: u64,
    ) -> Option<ConnId> {
        r.try_conn(io, pinned, cell_bytes)
    }

    /// A cell of `circ` went on connection `k` of channel `ch` in run `run`.
    fn cell_written(
        _r: &mut Relay,
        _io: &mut impl Io<RelayTimer>,
        _run: &mut Run,
        _ch: ChannelId,
        _circ: CircuitId,
        _k: ConnId,
    ) {
    }

    /// A circuit's side left channel `ch`, where it was pinned to connection `k` (a live
    /// connection of `ch`).
    fn circuit_left(_r: &mut Relay, _io: &mut impl Io<RelayTimer>, _ch: ChannelId, _k: ConnId) {}

    /// Connection `k` of channel `ch` ended without the closing handshake.
    fn conn_lost(_r: &Relay, _ch: ChannelId, _k: ConnId) -> ConnLoss {
        ConnLoss::Channel
    }

    /// The peer refused or closed a connection of channel `ch` (still one of its connections).
    fn peer_refused(_r: &mut Relay, _ch: ChannelId, _now: SimTime) {}

    /// The once-a-second management of the relay's channels (only where `start` arms
    /// `RelayTimer::ManageConnections`).
    fn manage(_r: &mut Relay, _io: &mut impl Io<RelayTimer>) {}
}
