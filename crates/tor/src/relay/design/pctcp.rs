//! PCTCP (AlSabah and Goldberg, "PCTCP: Per-Circuit TCP-over-IPsec Transport for Anonymous
//! Communication Overlay Networks", CCS 2013): every circuit gets a TCP connection of its
//! own under the channel, opened when the circuit is extended and closed with it, so a loss
//! on one circuit's connection stalls no other.

use super::super::*;
use super::{ConnLoss, Design};

/// A connection per circuit.
pub(in crate::relay) struct Pctcp;

impl Design for Pctcp {
    const JOINS: bool = true;

    /// Connections are opened per circuit, when each is extended (`circuit_conn`).
    fn open_channel(
        _r: &mut Relay,
        _io: &mut impl Io<RelayTimer>,
        _ch: ChannelId,
        _target: HostId,
    ) {
    }

    fn circuit_conn(
        r: &mut Relay,
        io: &mut impl Io<RelayTimer>,
        ch: ChannelId,
    ) -> Result<Option<ConnId>, ()> {
        match r.open_conn(io, ch, 0) {
            Some(k) => Ok(Some(k)),
            None => {
                if r.table.channels[ch].conns.is_empty() {
                    r.close_channel(io, ch);
                }
                Err(())
            }
        }
    }

    /// The circuit's own connection: the one it was opened for, or the one it arrived on.
    fn pin(
        _r: &mut Relay,
        _ch: ChannelId,
        _bulk: bool,
        arrived_on: Option<ConnId>,
    ) -> (Option<ConnId>, bool) {
        (arrived_on, false)
    }

    /// The circuit's connection goes with it; the opener closes it.
    fn circuit_left(r: &mut Relay, io: &mut impl Io<RelayTimer>, ch: ChannelId, k: ConnId) {
        if r.table.channels[ch].opener && r.table.conns[k].circuits == 0 {
            let socket = r.table.conns[k].socket;
            r.drop_conn(k);
            io.close(socket);
        }
    }

    /// A connection that carries no circuit (its circuit's DESTROY came first) just goes;
    /// one of several fails its circuit only; the last one fails the channel.
    fn conn_lost(r: &Relay, ch: ChannelId, k: ConnId) -> ConnLoss {
        if r.table.conns[k].circuits == 0 {
            ConnLoss::Quiet
        } else if r.table.channels[ch].conns.len() > 1 {
            ConnLoss::Circuits
        } else {
            ConnLoss::Channel
        }
    }
}
