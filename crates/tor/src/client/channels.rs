//! The client's channels to its guards: one TCP connection per user and guard, its link
//! handshake, cells queued until the socket takes them, and cells arriving dispatched to
//! their circuit.

use super::*;

impl Client {
    /// The channel on `socket`. Socket ids are never given out twice (a reused slot has a
    /// new generation), so at most one channel has it. The table misses only for a socket
    /// that is no channel's or whose slot a newer channel took; the search decides those.
    pub(super) fn channel_of(&self, socket: SocketId) -> Option<usize> {
        match self.channel_by_slot.get(socket.slot as usize) {
            Some(&Some(ch)) if self.channels[ch as usize].socket == socket => Some(ch as usize),
            _ => self.channels.iter().position(|c| c.socket == socket),
        }
    }

    /// The user's channel to `relay`, opened if it has none.
    pub(super) fn channel_for(
        &mut self,
        io: &mut impl Io<ClientTimer>,
        relay: usize,
        user: u32,
    ) -> usize {
        let world = self.world.clone();
        let guard_host = world.relay_hosts[relay];
        let ours = |c: &Channel| c.relay == relay && c.user == user;
        match self.channels.iter().position(ours) {
            Some(ch) => ch,
            None => {
                let socket = io.connect(guard_host, OR_PORT);
                let chan = Channel {
                    socket,
                    relay,
                    user,
                    open: false,
                    link: LinkHandshake::opening(world.params.link_handshake, false),
                    out: VecDeque::new(),
                    circs: ChannelCircuits::new(true),
                    uploads_blocked: false,
                };
                // A failed channel's slot, once its last circuit is gone, so that a client
                // whose channels fail again and again keeps a table as large as its guards.
                let dead = |c: &Channel| c.relay == usize::MAX && c.circs.count() == 0;
                let ch = match self.channels.iter().position(dead) {
                    Some(ch) => {
                        self.channels[ch] = chan;
                        ch
                    }
                    None => {
                        self.channels.push(chan);
                        self.channels.len() - 1
                    }
                };
                let slot = socket.slot as usize;
                if self.channel_by_slot.len() <= slot {
                    self.channel_by_slot.resize(slot + 1, None);
                }
                self.channel_by_slot[slot] = Some(ch as u32);
                ch
            }
        }
    }

    pub(super) fn send_on_circuit(
        &mut self,
        io: &mut impl Io<ClientTimer>,
        circ: OriginCircId,
        mut cell: Cell,
    ) {
        let c = &self.circuits[circ];
        cell.circ_id = c.circ_id;
        let ch = c.chan as usize;
        self.send_cell(io, ch, cell);
    }

    pub(super) fn send_cell(&mut self, io: &mut impl Io<ClientTimer>, ch: usize, cell: Cell) {
        self.channels[ch].out.push_back(cell);
        self.flush_channel(io, ch);
    }

    /// A flight of the link handshake with the guard arrived: answer it, and once the
    /// handshake is complete send the cells that waited for it. A flight out of order
    /// breaks the channel.
    pub(super) fn link_flight(
        &mut self,
        io: &mut impl Io<ClientTimer>,
        ch: usize,
        flight: LinkMessage,
    ) {
        let chan = &mut self.channels[ch];
        match chan.link.on_flight(flight) {
            Ok(reply) => {
                if let Some(reply) = reply {
                    io.write_message(chan.socket, reply.wire_bytes(), Wire::Link(reply));
                    io.flush(chan.socket);
                }
                self.flush_channel(io, ch);
            }
            Err(_) => self.channel_failed(io, ch),
        }
    }

    pub(super) fn flush_channel(&mut self, io: &mut impl Io<ClientTimer>, ch: usize) {
        let bytes = self.world.cell_wire_bytes();
        let chan = &mut self.channels[ch];
        if !chan.open || !chan.link.is_open() {
            return;
        }
        let mut wrote = false;
        while let Some(&cell) = chan.out.front() {
            if !io.write_message(chan.socket, bytes, Wire::Cell(cell)) {
                break;
            }
            chan.out.pop_front();
            wrote = true;
        }
        if wrote {
            io.flush(chan.socket);
        }
    }

    pub(super) fn handle_cell(&mut self, io: &mut impl Io<ClientTimer>, ch: usize, cell: Cell) {
        let Some(circ) = self.channels[ch].circs.lookup(cell.circ_id) else {
            return;
        };
        if !self.circuits.contains(circ) {
            return;
        }
        match (cell.command, cell.relay) {
            (CellCommand::Created2, _) => self.hop_built(io, circ, 1),
            (CellCommand::Destroy, _) => {
                if self.destroy_reasons.len() < MAX_DESTROY_REASONS {
                    self.destroy_reasons.push(cell.arg);
                }
                self.close_circuit(io, circ, CircuitOutcome::Destroyed, false)
            }
            (_, RelayCommand::Extended2) => self.hop_built(io, circ, cell.hop + 1),
            (_, RelayCommand::Connected) => self.connected(io, circ, cell.stream_id),
            (_, RelayCommand::Data) => self.data(io, circ, cell),
            (_, RelayCommand::Sendme) => self.sendme(io, circ, cell.stream_id),
            (_, RelayCommand::Xoff | RelayCommand::Xon) => {
                if let Some(dl) = self.download_on(circ, cell.stream_id) {
                    let d = &mut self.downloads[dl];
                    d.sender.set_xoff(cell.relay == RelayCommand::Xoff);
                    self.package_uploads(io, circ);
                }
            }
            (_, RelayCommand::End) => {
                if let Some(dl) = self.download_on(circ, cell.stream_id) {
                    let d = &self.downloads[dl];
                    if d.received < d.expected() {
                        let reason = if d.state == DlState::Connecting {
                            "refused by exit"
                        } else {
                            "stream ended early"
                        };
                        self.finish(io, dl, DownloadOutcome::Error(reason));
                    }
                }
            }
            _ => {}
        }
    }

    pub(super) fn channel_failed(&mut self, io: &mut impl Io<ClientTimer>, ch: usize) {
        let circuits: Vec<OriginCircId> = self.channels[ch].circs.all().collect();
        // The channel is gone: forget it so new circuits open a fresh one, and close our end
        // (after the guard's FIN the socket would otherwise stay half open for the run).
        self.channels[ch].relay = usize::MAX;
        self.channels[ch].open = false;
        self.channels[ch].out.clear();
        let socket = self.channels[ch].socket;
        if io.is_open(socket) {
            io.close(socket);
        }
        for circ in circuits {
            self.close_circuit(io, circ, CircuitOutcome::Failed, false);
        }
    }
}
