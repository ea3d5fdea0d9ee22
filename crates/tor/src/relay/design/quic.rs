//! QUIC between relays, as QUUX (Clark, "QUUX: a QUIC un-multiplexing of the Tor relay
//! transport", MSc report, University College London, 2016):
//! a channel we open dials the peer's OR port over TCP and, at the same time, its QUIC port.
//! If the QUIC connection is ready when the TCP link handshake completes, the channel moves
//! there, each circuit on a stream of its own, and the TCP connection closes unused;
//! otherwise the channel stays on TCP (a fallback, counted). A stream belongs to its circuit:
//! it opens with the circuit's CREATE2 and closes with it, and losing it fails that circuit
//! only.
//!
//! Whether a channel's circuits travel on QUIC is the channel's `carrier`; the scheduler reads
//! a QUIC channel's write limit from its connection (`Channel::quic_limit`), shared by its
//! streams.

use super::super::scheduler::write_limit;
use super::super::*;
use super::{ConnLoss, Design, Vanilla};

/// Channels on QUIC, a stream per circuit.
pub(in crate::relay) struct Quic;

impl Design for Quic {
    const JOINS: bool = true;
    /// A new circuit's CREATE2 could overtake an old one's DESTROY on another stream.
    const REUSES_CIRC_IDS: bool = false;

    fn start(_r: &mut Relay, io: &mut impl Io<RelayTimer>) {
        io.quic_listen(QUIC_PORT)
            .expect("a fresh relay has its QUIC port free");
    }

    fn accepted(
        r: &mut Relay,
        io: &mut impl Io<RelayTimer>,
        socket: SocketId,
        port: u16,
        peer: HostId,
    ) -> bool {
        if port != QUIC_PORT {
            return false;
        }
        r.quic_accepted(io, socket, peer);
        true
    }

    /// The TCP connection, and the QUIC connection beside it.
    fn open_channel(r: &mut Relay, io: &mut impl Io<RelayTimer>, ch: ChannelId, target: HostId) {
        if r.open_conn(io, ch, 0).is_none() {
            return;
        }
        // Without a socket left for QUIC the channel still decides when its link handshake
        // completes, and so counts as a fallback to TCP.
        r.table.channels[ch].carrier = Carrier::Undecided;
        if r.open_sockets < r.socket_limit() {
            let quic = io.quic_connect(target, QUIC_PORT);
            r.bind_quic(ch, quic);
        } else {
            r.meter.second.conn_limit_refusals += 1;
        }
    }

    /// The channel waits for the link handshake's round trip (the Joined that answers its
    /// Join), in which the QUIC connection may get ready.
    fn waits_for_joined(_extra: bool) -> bool {
        true
    }

    fn joined(
        r: &mut Relay,
        io: &mut impl Io<RelayTimer>,
        _ch: ChannelId,
        k: ConnId,
        _heavy: bool,
    ) {
        r.confirm_join(io, k);
    }

    /// On a channel on QUIC, a stream of its own.
    fn circuit_conn(
        r: &mut Relay,
        io: &mut impl Io<RelayTimer>,
        ch: ChannelId,
    ) -> Result<Option<ConnId>, ()> {
        if r.table.channels[ch].carrier != Carrier::Quic {
            return Ok(None);
        }
        r.open_stream_conn(io, ch).map(Some).ok_or(())
    }

    /// Its stream on a channel on QUIC; the TCP connection otherwise.
    fn pin(
        r: &mut Relay,
        ch: ChannelId,
        bulk: bool,
        arrived_on: Option<ConnId>,
    ) -> (Option<ConnId>, bool) {
        if r.table.channels[ch].carrier == Carrier::Quic {
            (arrived_on, false)
        } else {
            Vanilla::pin(r, ch, bulk, arrived_on)
        }
    }

    /// The circuit's stream goes with it (each side finishes its direction).
    fn circuit_left(r: &mut Relay, io: &mut impl Io<RelayTimer>, _ch: ChannelId, k: ConnId) {
        let conn = &r.table.conns[k];
        if conn.stream && conn.circuits == 0 {
            let socket = conn.socket;
            r.drop_conn(k);
            io.close(socket);
        }
    }

    /// A stream is its circuit's alone: only that circuit fails with it (nothing, if its
    /// circuit's DESTROY came first). The TCP connection is the channel, as in vanilla.
    fn conn_lost(r: &Relay, _ch: ChannelId, k: ConnId) -> ConnLoss {
        let conn = &r.table.conns[k];
        match (conn.stream, conn.circuits) {
            (false, _) => ConnLoss::Channel,
            (true, 0) => ConnLoss::Quiet,
            (true, _) => ConnLoss::Circuits,
        }
    }
}

impl Relay {
    /// The channel of a QUIC connection.
    pub(in crate::relay) fn chan_of_quic(&self, socket: SocketId) -> Option<ChannelId> {
        self.table.chan_of_quic(socket)
    }

    /// Makes `quic` channel `ch`'s QUIC connection (which costs one socket).
    fn bind_quic(&mut self, ch: ChannelId, quic: SocketId) {
        self.table.bind_quic(ch, quic);
        self.note_socket_opened();
    }

    /// Forgets a QUIC connection (closed, or about to be).
    pub(in crate::relay) fn unbind_quic(&mut self, quic: SocketId) {
        if self.table.unbind_quic(quic).is_some() {
            self.open_sockets -= 1;
        }
    }

    /// A peer's QUIC connection completed its handshake: it is a channel of its own, whose
    /// circuits arrive on its streams (the peer's TCP connection, if the peer moves the
    /// channel here, goes unused and closes).
    pub(in crate::relay) fn quic_accepted(
        &mut self,
        io: &mut impl Io<RelayTimer>,
        socket: SocketId,
        peer: HostId,
    ) {
        if self.open_sockets >= self.socket_limit() {
            self.meter.second.conn_limit_refusals += 1;
            io.abort(socket);
            return;
        }
        let ch = self.add_channel(io.now(), peer, false);
        self.bind_quic(ch, socket);
        self.table.channels[ch].carrier = Carrier::Quic;
    }

    /// The peer opened a stream (for a circuit, whose CREATE2 is its first cell).
    pub(in crate::relay) fn stream_accepted(
        &mut self,
        io: &mut impl Io<RelayTimer>,
        conn: SocketId,
        stream: SocketId,
    ) {
        match self.chan_of_quic(conn) {
            Some(ch) if self.table.channels[ch].carrier == Carrier::Quic => {
                self.add_stream(io, ch, stream);
            }
            _ => io.close(stream),
        }
    }

    /// A QUIC connection closed or timed out: a channel on QUIC fails with it; one that
    /// stayed on TCP (or is still deciding) just loses it.
    pub(in crate::relay) fn quic_lost(&mut self, io: &mut impl Io<RelayTimer>, ch: ChannelId) {
        if self.table.channels[ch].carrier == Carrier::Quic {
            self.close_channel(io, ch);
        } else if let Some(quic) = self.table.channels[ch].quic {
            self.unbind_quic(quic);
        }
    }

    /// The TCP link handshake of a `quic` channel we opened has completed: if its QUIC
    /// connection is ready, the channel's circuits move to streams of it and the TCP
    /// connection closes; otherwise the channel stays on TCP and the QUIC connection closes.
    pub(in crate::relay) fn quux_decide(&mut self, io: &mut impl Io<RelayTimer>, ch: ChannelId) {
        let quic = self.table.channels[ch].quic;
        let ready = quic.is_some_and(|q| io.quic_info(q).is_some_and(|i| i.established));
        if !ready {
            self.table.channels[ch].carrier = Carrier::Tcp;
            self.meter.channels.tcp_fallbacks += 1;
            if let Some(quic) = quic {
                self.unbind_quic(quic);
                io.close(quic);
            }
            return;
        }
        self.table.channels[ch].carrier = Carrier::Quic;
        self.meter.channels.quic_channels += 1;
        let tcp = self.table.channels[ch].conns.clone();
        let circuits: Vec<CircuitId> = self.table.channels[ch].circs.all().collect();
        for circ in circuits {
            let Some(k) = self.open_stream_conn(io, ch) else {
                let from_prev = self.circuits.get(circ).is_some_and(|c| c.prev.chan == ch);
                self.destroy_circuit_because(io, circ, Some(from_prev), DESTROY_CONNECT_FAILED);
                continue;
            };
            let Some(c) = self.circuits.get_mut(circ) else {
                continue;
            };
            let side = c.side_for(ch);
            side.conn = Some(k);
            self.table.conns[k].circuits += 1;
        }
        // Nothing but the Join went on the TCP connection: it closes unused.
        for k in tcp {
            let socket = self.table.conns[k].socket;
            self.drop_conn(k);
            io.close(socket);
        }
        if !self.table.channels[ch].mux.is_empty() {
            self.mark_pending(io, ch);
        }
    }

    /// Opens a stream for a circuit on a channel on QUIC.
    pub(in crate::relay) fn open_stream_conn(
        &mut self,
        io: &mut impl Io<RelayTimer>,
        ch: ChannelId,
    ) -> Option<ConnId> {
        let quic = self.table.channels[ch].quic?;
        let stream = io.open_stream(quic)?;
        Some(self.add_stream(io, ch, stream))
    }

    /// What KIST lets a channel on QUIC write to its QUIC connection in this scheduler run:
    /// the connection's free congestion window plus KIST's extra socket space, less what its
    /// streams hold unsent (tor's `tcp_space` with the connection in the socket's place).
    pub(in crate::relay) fn refresh_quic_limit(&mut self, io: &impl Io<RelayTimer>, ch: ChannelId) {
        self.table.channels[ch].quic_limit = self.quic_limit_now(io, ch);
    }

    /// The limit [`refresh_quic_limit`](Self::refresh_quic_limit) would read now.
    pub(in crate::relay) fn quic_limit_now(&self, io: &impl Io<RelayTimer>, ch: ChannelId) -> u64 {
        let info = self.table.channels[ch].quic.and_then(|q| io.send_window(q));
        write_limit(&self.world.params, info.as_ref())
    }
}
