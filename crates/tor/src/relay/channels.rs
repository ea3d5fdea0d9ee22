//! The relay's channel table: channels to each peer and the connections under them, opening,
//! joining and closing connections (where the design asks for it: see [`super::design`]),
//! ConnLimit, and putting sequenced cells of multi-connection channels back in order.

use super::*;

impl Relay {
    pub(super) fn conn_of(&self, socket: SocketId) -> Option<ConnId> {
        self.table.conn_of(socket)
    }

    pub(super) fn stream_of(&self, socket: SocketId) -> Option<ExitStreamId> {
        self.streams.of_socket(socket)
    }

    pub(super) fn add_channel(&mut self, now: SimTime, peer: HostId, initiator: bool) -> ChannelId {
        let mut chan = Channel::new(peer, initiator, initiator, &self.clock, now);
        if initiator {
            chan.token = Some(self.table.next_token());
            chan.set_sequenced(self.sequenced());
        }
        if !with_design!(self.design, D => D::REUSES_CIRC_IDS) {
            chan.circs.reuse_ids = false;
        }
        self.table.insert_channel(chan)
    }

    /// Adds a connection (its socket already made) to a channel.
    pub(super) fn add_conn(
        &mut self,
        io: &mut impl Io<RelayTimer>,
        ch: ChannelId,
        socket: SocketId,
        open: bool,
    ) -> ConnId {
        let k = self.insert_conn(io, ch, socket, open, false);
        self.note_socket_opened();
        k
    }

    /// Adds a QUIC stream to a channel as a connection of its own (that costs no socket).
    pub(super) fn add_stream(
        &mut self,
        io: &mut impl Io<RelayTimer>,
        ch: ChannelId,
        socket: SocketId,
    ) -> ConnId {
        self.insert_conn(io, ch, socket, true, true)
    }

    fn insert_conn(
        &mut self,
        io: &mut impl Io<RelayTimer>,
        ch: ChannelId,
        socket: SocketId,
        open: bool,
        stream: bool,
    ) -> ConnId {
        let now = io.now();
        // A QUIC stream rides a connection already handshaken; a TCP connection runs the
        // handshake as the end that accepted it or as the relay that opened it.
        let link = if stream || !self.world.params.link_handshake {
            LinkHandshake::skipped()
        } else if open {
            LinkHandshake::responder()
        } else {
            LinkHandshake::initiator(true)
        };
        let conn = Conn::new(socket, ch, open, link, stream, &self.clock, now);
        let k = self.table.insert_conn(conn);
        io.set_auto_read(socket, false);
        self.attach_conn(io, ch, k);
        k
    }

    /// Puts connection `k` (whose `chan` is already `ch`) under channel `ch`.
    fn attach_conn(&mut self, io: &mut impl Io<RelayTimer>, ch: ChannelId, k: ConnId) {
        let chan = &mut self.table.channels[ch];
        chan.conns.push(k);
        chan.ranking_stale();
        if chan.pending {
            // A parked scheduler waits on the sockets its pending channels had, and this
            // one's may have room.
            self.wake_scheduler(io);
        }
    }

    /// Changes what decides whether connection `k` may take cells (`Conn::usable`). Every
    /// such change goes through here, so that its channel's IMUX ranking, which lists the
    /// usable connections only, is rebuilt when the answer changes.
    pub(super) fn update_conn(&mut self, k: ConnId, change: impl FnOnce(&mut Conn)) {
        let conn = &mut self.table.conns[k];
        let before = conn.usable();
        change(conn);
        if conn.usable() != before {
            self.table.channels[conn.chan].ranking_stale();
        }
    }

    /// Writes `message` (`bytes` on the wire) to connection `k`'s socket; false if the socket
    /// refused it. Every write to a connection goes through here, for `unsent_watch`.
    pub(super) fn write_conn(
        &mut self,
        io: &mut impl Io<RelayTimer>,
        k: ConnId,
        bytes: u64,
        message: Wire,
    ) -> bool {
        Self::write_to(
            &mut self.table.conns,
            &mut self.unsent_watch,
            &mut self.work,
            io,
            k,
            bytes,
            message,
        )
    }

    /// As [`write_to`](Self::write_to) for the scheduler, which writes one circuit's cells
    /// back to back: a cell equal to the one before it on the same connection joins `held`
    /// rather than going to the socket, and the socket's room is counted down here, so each
    /// cell is taken or refused as a write of its own would be. What is held goes to the
    /// socket in one write ([`release`](Self::release)) before anything else writes or reads
    /// the socket. Only plain cells are held (sequenced cells all differ). A QUIC stream's room
    /// is its own send buffer's, which only writes to the stream use up, and KIST's limit for
    /// its connection is read when a run starts (`Channel::quic_limit`), so holding a stream's
    /// cells changes nothing a run reads.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn write_held(
        conns: &mut Slab<ConnId, Conn>,
        unsent_watch: &mut Vec<ConnId>,
        work: &mut Work,
        io: &mut impl Io<RelayTimer>,
        held: &mut Option<HeldCells>,
        k: ConnId,
        bytes: u64,
        message: Wire,
    ) -> bool {
        let Wire::Cell(cell) = message else {
            Self::release(conns, work, io, held);
            return Self::write_to(conns, unsent_watch, work, io, k, bytes, message);
        };
        if let Some(run) = held {
            if run.k == k && run.cell == cell && run.bytes == bytes && run.room >= bytes {
                run.count += 1;
                run.room -= bytes;
                return true;
            }
        }
        Self::release(conns, work, io, held);
        match Self::write_to_room(conns, unsent_watch, work, io, k, bytes, message) {
            Some(room) => {
                *held = Some(HeldCells {
                    k,
                    cell,
                    bytes,
                    count: 0,
                    room,
                });
                true
            }
            None => false,
        }
    }

    /// Writes the cells [`write_held`](Self::write_held) holds back.
    pub(super) fn release(
        conns: &Slab<ConnId, Conn>,
        work: &mut Work,
        io: &mut impl Io<RelayTimer>,
        held: &mut Option<HeldCells>,
    ) {
        let Some(run) = held.take() else {
            return;
        };
        if run.count > 0 {
            let socket = conns[run.k].socket;
            io.write_messages(socket, run.bytes, Wire::Cell(run.cell), run.count);
            work.tls_write(run.bytes * u64::from(run.count));
        }
    }

    /// [`write_conn`](Self::write_conn) for a caller holding other parts of the relay.
    pub(super) fn write_to(
        conns: &mut Slab<ConnId, Conn>,
        unsent_watch: &mut Vec<ConnId>,
        work: &mut Work,
        io: &mut impl Io<RelayTimer>,
        k: ConnId,
        bytes: u64,
        message: Wire,
    ) -> bool {
        Self::write_to_room(conns, unsent_watch, work, io, k, bytes, message).is_some()
    }

    /// [`write_to`](Self::write_to), returning the room the socket has left after it.
    fn write_to_room(
        conns: &mut Slab<ConnId, Conn>,
        unsent_watch: &mut Vec<ConnId>,
        work: &mut Work,
        io: &mut impl Io<RelayTimer>,
        k: ConnId,
        bytes: u64,
        message: Wire,
    ) -> Option<u64> {
        let conn = &mut conns[k];
        if !conn.watched {
            conn.watched = true;
            unsent_watch.push(k);
        }
        let room = io.write_message_room(conn.socket, bytes, message);
        if room.is_some() {
            work.tls_write(bytes);
        }
        room
    }

    /// Hands what was written to connection `k` to the kernel (sealing its TLS records).
    pub(super) fn flush_conn(&mut self, io: &mut impl Io<RelayTimer>, k: ConnId) {
        self.work.tls_flush();
        io.flush(self.table.conns[k].socket);
    }

    /// The bytes written to the relay's connections and not yet sent, summed; connections
    /// found empty leave `unsent_watch`.
    pub(super) fn sum_unsent(&mut self, io: &impl Io<RelayTimer>) -> u64 {
        let conns = &mut self.table.conns;
        let mut total = 0;
        // A connection gone since it was listed leaves the list.
        self.unsent_watch.retain(|&k| {
            let Some(conn) = conns.get_mut(k) else {
                return false;
            };
            if !conn.watched {
                return false;
            }
            conn.watched = false;
            if !conn.open {
                // What was written while it connects (its Join) waits to be sent.
                return true;
            }
            let unsent = io.send_window(conn.socket).map_or(0, |i| i.notsent);
            total += unsent;
            unsent > 0
        });
        for &k in &self.unsent_watch {
            self.table.conns[k].watched = true;
        }
        if cfg!(test) {
            let everywhere: u64 = (self.table.conns.values())
                .filter(|c| c.open)
                .filter_map(|c| io.send_window(c.socket))
                .map(|i| i.notsent)
                .sum();
            assert_eq!(
                total, everywhere,
                "a connection with unsent bytes is not watched"
            );
        }
        total
    }

    /// Opens one more connection of a channel we opened; false at the socket limit.
    pub(super) fn open_conn(
        &mut self,
        io: &mut impl Io<RelayTimer>,
        ch: ChannelId,
        role: u32,
    ) -> Option<ConnId> {
        if self.open_sockets >= self.socket_limit() {
            self.meter.second.conn_limit_refusals += 1;
            return None;
        }
        let peer = self.table.channels[ch].peer;
        let extra = !self.table.channels[ch].conns.is_empty();
        let socket = io.connect(peer, OR_PORT);
        let k = self.add_conn(io, ch, socket, false);
        if with_design!(self.design, D => D::waits_for_joined(extra)) {
            self.update_conn(k, |c| c.confirmed = false);
        }
        self.meter.channels.conns_opened += 1;
        if !self.table.conns[k].link.is_open() {
            // The Join follows the link handshake (`link_flight`).
            return Some(k);
        }
        self.send_join(io, k, role == 1);
        Some(k)
    }

    /// A connection we opened names its channel to the peer (multi-connection designs):
    /// the first message after the link handshake, or the first on the socket without one.
    fn send_join(&mut self, io: &mut impl Io<RelayTimer>, k: ConnId, heavy: bool) {
        if !with_design!(self.design, D => D::JOINS) {
            return;
        }
        let ch = self.table.conns[k].chan;
        let token = (self.table.channels[ch].token).expect("a channel we opened has a token");
        let cell_bytes = self.world.cell_wire_bytes();
        self.write_conn(
            io,
            k,
            cell_bytes,
            Wire::Join {
                channel: token,
                heavy,
            },
        );
    }

    /// A flight of connection `k`'s link handshake arrived: answer it, and once the
    /// handshake is complete let the channel's cells go (after the Join, on a connection we
    /// opened of a multi-connection channel). A flight out of order breaks the connection.
    pub(super) fn link_flight(
        &mut self,
        io: &mut impl Io<RelayTimer>,
        k: ConnId,
        flight: LinkMessage,
    ) {
        let mut answer = Ok(None);
        self.update_conn(k, |c| answer = c.link.on_flight(flight));
        let Ok(reply) = answer else {
            self.conn_lost(io, k);
            return;
        };
        match reply {
            // The public-key work of each end falls where its TLS handshake does it: the
            // responder signs before its ServerHello flight, the initiator checks and
            // authenticates before its last flight.
            Some(LinkMessage::ServerHello) => self.work.link_responses += 1,
            Some(LinkMessage::InitiatorCells { .. }) => self.work.link_initiations += 1,
            _ => {}
        }
        if let Some(reply) = reply {
            self.write_conn(io, k, reply.wire_bytes(), Wire::Link(reply));
        }
        let conn = &self.table.conns[k];
        if conn.link.is_open() {
            let ch = conn.chan;
            if flight == LinkMessage::ResponderCells {
                // We opened it.
                let heavy = matches!(
                    self.table.channels[ch].multi.as_deref(),
                    Some(m) if m.heavy == Some(k)
                );
                self.send_join(io, k, heavy);
            }
            self.mark_pending(io, ch);
        }
        if reply.is_some() {
            self.flush_conn(io, k);
        }
    }

    /// Removes a connection from its channel and frees its slot (the socket is closed or
    /// aborted by the caller).
    pub(super) fn drop_conn(&mut self, k: ConnId) {
        let Some(conn) = self.table.free_conn(k) else {
            return;
        };
        if !conn.stream {
            self.open_sockets -= 1;
        }
        if conn.read_blocked {
            // It waits for read tokens no more.
            self.read_waiting.retain(|&x| x != k);
        }
        let chan = &mut self.table.channels[conn.chan];
        chan.conns.retain(|c| *c != k);
        chan.ranking_stale();
        if conn.circuits > 0 {
            // Sides pinned to it are pinned to nothing now, so a pinned connection is always
            // a live one: round robin counts a circuit where it goes next.
            for circ in chan.circs.all() {
                if let Some(c) = self.circuits.get_mut(circ) {
                    for side in std::iter::once(&mut c.prev).chain(c.next.as_mut()) {
                        if side.chan == conn.chan && side.conn == Some(k) {
                            side.conn = None;
                        }
                    }
                }
            }
        }
        if let Some(m) = chan.multi.as_deref_mut() {
            if m.light == Some(k) {
                m.light = None;
            }
            if m.heavy == Some(k) {
                m.heavy = None;
            }
        }
    }

    /// A connection ended without the closing handshake: the design says what fails with it
    /// ([`ConnLoss`]).
    pub(super) fn conn_lost(&mut self, io: &mut impl Io<RelayTimer>, k: ConnId) {
        let ch = self.table.conns[k].chan;
        let now = io.now();
        with_design!(self.design, D => D::peer_refused(self, ch, now));
        let socket = self.table.conns[k].socket;
        match with_design!(self.design, D => D::conn_lost(self, ch, k)) {
            ConnLoss::Quiet => {
                self.drop_conn(k);
                if io.is_open(socket) {
                    io.close(socket);
                }
                if self.table.channels[ch].conns.is_empty() {
                    self.close_channel(io, ch);
                }
            }
            ConnLoss::Circuits => {
                let chan = &self.table.channels[ch];
                let mut pinned = Vec::new();
                for circ in chan.circs.all() {
                    if let Some(c) = self.circuits.get_mut(circ) {
                        if c.side_for(ch).conn == Some(k) {
                            pinned.push((circ, c.prev.chan == ch));
                        }
                    }
                }
                self.drop_conn(k);
                if io.is_open(socket) {
                    io.abort(socket);
                }
                for (circ, from_prev) in pinned {
                    self.destroy_circuit(io, circ, Some(from_prev));
                }
            }
            ConnLoss::Channel => self.close_channel(io, ch),
        }
    }

    /// A connection of a channel opened by the peer names the channel it belongs to.
    pub(super) fn join(
        &mut self,
        io: &mut impl Io<RelayTimer>,
        k: ConnId,
        token: u32,
        heavy: bool,
    ) {
        let own = self.table.conns[k].chan;
        let peer = self.table.channels[own].peer;
        let ch = self.table.join(peer, token, own);
        if ch != own {
            // Move the connection from its provisional channel (which has no circuits).
            self.table.discard_provisional(own);
            self.table.conns[k].chan = ch;
            self.attach_conn(io, ch, k);
        }
        let sequenced = self.sequenced();
        self.table.channels[ch].set_sequenced(sequenced);
        with_design!(self.design, D => D::joined(self, io, ch, k, heavy));
    }

    /// Confirms a connection the peer opened with a Joined (where the design waits for one,
    /// `Design::waits_for_joined`).
    pub(super) fn confirm_join(&mut self, io: &mut impl Io<RelayTimer>, k: ConnId) {
        let bytes = self.world.cell_wire_bytes();
        self.write_conn(io, k, bytes, Wire::Joined);
        self.flush_conn(io, k);
    }

    /// Starts IMUX's closing handshake on connection `k`: no more cells go on it.
    pub(super) fn begin_closing(&mut self, io: &mut impl Io<RelayTimer>, k: ConnId) {
        let conn = &mut self.table.conns[k];
        if conn.state != ConnState::Active {
            return;
        }
        if !conn.open || !conn.link.is_open() {
            // Not connected or handshaken yet: no cell was sent on it, nothing to hand over.
            let socket = conn.socket;
            self.drop_conn(k);
            io.abort(socket);
            self.meter.channels.conns_closed += 1;
            return;
        }
        self.update_conn(k, |c| c.state = ConnState::Closing);
        let bytes = self.world.cell_wire_bytes();
        self.write_conn(io, k, bytes, Wire::ClosingBegin);
        self.flush_conn(io, k);
    }

    pub(super) fn finish_closing(&mut self, io: &mut impl Io<RelayTimer>, k: ConnId) {
        let socket = self.table.conns[k].socket;
        let ch = self.table.conns[k].chan;
        self.drop_conn(k);
        io.close(socket);
        self.meter.channels.conns_closed += 1;
        // Circuits pinned to it (round robin) find another connection when they next send.
        if !self.table.channels[ch].mux.is_empty() {
            self.mark_pending(io, ch);
        }
        if self.table.channels[ch].conns.is_empty() {
            self.close_channel(io, ch);
        }
    }

    /// A cell of a multi-connection channel: hand it on in its circuit's order.
    pub(super) fn sequenced_cell(
        &mut self,
        io: &mut impl Io<RelayTimer>,
        k: ConnId,
        cell: Cell,
        seq: u32,
    ) {
        let ch = self.table.conns[k].chan;
        let circ_id = cell.circ_id;
        let expected = self.expected_seq(ch, circ_id);
        if !self.table.channels[ch]
            .multi_mut()
            .reorder
            .arrive(circ_id, seq, expected, cell)
        {
            self.meter.channels.cells_reordered += 1;
            return;
        }
        if seq < expected {
            self.meter.channels.order_violations += 1;
        }
        let mut next = Some(cell);
        while let Some(cell) = next {
            self.bump_seq_in(ch, circ_id);
            self.handle_cell(io, ch, k, cell);
            if self.table.channels[ch].closed {
                return;
            }
            let expected = self.expected_seq(ch, circ_id);
            next = self.table.channels[ch]
                .multi
                .as_deref_mut()
                .and_then(|m| m.reorder.take(circ_id, expected));
        }
    }

    /// The next sequence number due on circuit id `circ_id` of `ch` (0 for a circuit not yet
    /// created: its CREATE2 is the first cell).
    pub(super) fn expected_seq(&mut self, ch: ChannelId, circ_id: u32) -> u32 {
        let Some(circ) = self.table.channels[ch].circs.lookup(circ_id) else {
            return 0;
        };
        self.circuits
            .get_mut(circ)
            .and_then(|c| c.side_on(ch, circ_id))
            .map_or(0, |s| s.seq_in)
    }

    pub(super) fn bump_seq_in(&mut self, ch: ChannelId, circ_id: u32) {
        let Some(circ) = self.table.channels[ch].circs.lookup(circ_id) else {
            return;
        };
        if let Some(side) = self
            .circuits
            .get_mut(circ)
            .and_then(|c| c.side_on(ch, circ_id))
        {
            side.seq_in += 1;
        }
    }

    /// Pins a circuit's side on its channel to a connection where the design pins circuits
    /// (`Design::pin`): the only one in vanilla. `arrived_on` is the connection its CREATE2
    /// came on, or the one made for it.
    pub(super) fn assign_conn(
        &mut self,
        circ: CircuitId,
        forward: bool,
        arrived_on: Option<ConnId>,
    ) {
        let c = &self.circuits[circ];
        let bulk = c.declared_heavy;
        let ch = if forward {
            c.next.as_ref().unwrap().chan
        } else {
            c.prev.chan
        };
        let (conn, heavy) = with_design!(self.design, D => D::pin(self, ch, bulk, arrived_on));
        let c = &mut self.circuits[circ];
        let side = if forward {
            c.next.as_mut().unwrap()
        } else {
            &mut c.prev
        };
        if heavy {
            side.heavy = true;
        }
        side.conn = conn;
        if let Some(c) = conn.and_then(|k| self.table.conns.get_mut(k)) {
            c.circuits += 1;
        }
    }

    /// The channel to `target` for an extend: the existing one, or a new one with its first
    /// connection(s); `None` (and the refusal counted) at the socket limit.
    pub(super) fn channel_to(
        &mut self,
        io: &mut impl Io<RelayTimer>,
        target: HostId,
    ) -> Option<ChannelId> {
        if let Some(ch) = self.table.to_peer(target) {
            return Some(ch);
        }
        if self.open_sockets >= self.socket_limit() {
            self.meter.second.conn_limit_refusals += 1;
            return None;
        }
        let ch = self.add_channel(io.now(), target, true);
        with_design!(self.design, D => D::open_channel(self, io, ch, target));
        self.table.set_to_peer(target, ch);
        Some(ch)
    }

    /// Opens, at the relay's start, the channels a live relay would have had open
    /// (`tor.warm_channels`, see [`crate::warm`]), as it opens any channel for an extend.
    pub(super) fn open_warm_channels(&mut self, io: &mut impl Io<RelayTimer>) {
        let world = self.world.clone();
        for &peer in world.warm_channels(self.relay) {
            if self
                .channel_to(io, world.relay_hosts[peer as usize])
                .is_none()
            {
                // At the socket limit: the rest would be refused too.
                break;
            }
        }
    }

    pub(super) fn close_channel(&mut self, io: &mut impl Io<RelayTimer>, ch: ChannelId) {
        if !self.table.close(ch) {
            return;
        }
        let chan = &mut self.table.channels[ch];
        let circuits: Vec<CircuitId> = chan.circs.all().collect();
        let conns = std::mem::take(&mut chan.conns);
        let quic = chan.quic;
        let mut sockets = Vec::with_capacity(conns.len());
        for &k in &conns {
            sockets.push(self.table.conns[k].socket);
            self.drop_conn(k);
        }
        for circ in circuits {
            let from_prev = self.circuits.get(circ).map(|c| c.prev.chan == ch);
            if let Some(from_prev) = from_prev {
                self.destroy_circuit(io, circ, Some(from_prev));
            }
        }
        for socket in sockets {
            if io.is_open(socket) {
                io.abort(socket);
            }
        }
        if let Some(quic) = quic {
            self.unbind_quic(quic);
            if io.is_open(quic) {
                io.close(quic);
            }
        }
    }

    /// Makes the slots of closed channels reusable once nothing can name them: neither the
    /// scheduler's pending list (emptied by its next run) nor an onion skin the worker
    /// threads are still handling for a circuit that came on it. Called once a second.
    pub(super) fn recycle_channels(&mut self) {
        let skins = &self.onion_skins;
        self.table
            .recycle(|ch| skins.iter().any(|&Reverse((_, _, c))| c == ch));
    }
}

/// Equal cells the scheduler wrote to one connection and holds back, to go to the socket in
/// one write (see [`Relay::write_held`]).
pub(super) struct HeldCells {
    k: ConnId,
    /// The cell written last, which `count` more equal ones follow.
    cell: Cell,
    bytes: u64,
    count: u32,
    /// The socket's room left after them.
    room: u64,
}
