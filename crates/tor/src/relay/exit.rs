//! The exit edge: streams from exit circuits to file servers, packaging their responses into
//! DATA cells within the circuit's and stream's windows and the read bucket, and SENDMEs.
//! A BEGIN_DIR stream (a client's one-hop directory circuit ending here) is the same edge with
//! the relay's own directory cache in the server's place.
//!
//! Uploads run the other way: the client packages DATA cells within its windows, and the exit
//! is the receiving end. It writes each cell's bytes to the server connection as far as the
//! socket takes them; what it cannot write waits at the exit (tor's edge buffer), and while
//! more than [`EDGE_BUFFER_FULL_BYTES`] wait it owes the client no stream SENDME (under
//! congestion control it sends XOFF instead, and XON once the buffer has drained), so a slow
//! server holds the client back. Circuit SENDMEs go out as cells arrive, as in tor.

use super::*;

/// tor's `connection_outbuf_too_full`: an edge connection holding more than ten cell payloads
/// (509 bytes each) unwritten gets no stream SENDME.
pub(super) const EDGE_BUFFER_FULL_BYTES: u64 = 10 * 509;

/// The exit's side of an upload: its body on the way to the server.
#[derive(Default)]
pub(super) struct UploadEdge {
    /// The client's request announced an upload.
    pub(super) active: bool,
    /// Body bytes that arrived in DATA cells and are not yet written to the server socket.
    pub(super) waiting: u64,
    /// Congestion control: XOFF was sent, and no XON since.
    pub(super) xoff: bool,
}

/// The exit's streams, each from an exit circuit to a file server (or to the relay's own
/// directory cache), in reusable slots and found by their server socket.
pub(super) struct ExitStreams {
    streams: Slab<ExitStreamId, ExitStream>,
    /// Server streams by their socket's slot (directory streams have no socket).
    by_socket: Vec<Option<ExitStreamId>>,
}

impl ExitStreams {
    /// No streams.
    pub(super) fn new() -> Self {
        ExitStreams {
            streams: Slab::new(),
            by_socket: Vec::new(),
        }
    }

    /// Adds `stream`, found by its server socket from now on if it has one.
    pub(super) fn insert(&mut self, stream: ExitStream) -> ExitStreamId {
        let end = stream.end;
        let st = self.streams.insert(stream);
        if let StreamEnd::Server(socket) = end {
            map_socket(&mut self.by_socket, socket, st);
        }
        st
    }

    /// The stream whose server socket is `socket`.
    pub(super) fn of_socket(&self, socket: SocketId) -> Option<ExitStreamId> {
        self.by_socket
            .get(socket.slot as usize)
            .copied()
            .flatten()
            .filter(|&st| {
                self.get(st)
                    .is_some_and(|s| s.end == StreamEnd::Server(socket))
            })
    }

    /// Stream `st`, if it has not ended.
    pub(super) fn get(&self, st: ExitStreamId) -> Option<&ExitStream> {
        self.streams.get(st)
    }

    /// Stream `st`, if it has not ended.
    pub(super) fn get_mut(&mut self, st: ExitStreamId) -> Option<&mut ExitStream> {
        self.streams.get_mut(st)
    }

    /// Ends stream `st`: its slot is free and its socket no longer finds it.
    pub(super) fn remove(&mut self, st: ExitStreamId) -> Option<ExitStream> {
        let s = self.streams.remove(st)?;
        if let StreamEnd::Server(socket) = s.end {
            self.by_socket[socket.slot as usize] = None;
        }
        Some(s)
    }

    /// Streams open.
    pub(super) fn len(&self) -> usize {
        self.streams.len()
    }

    /// Every open stream.
    pub(super) fn values(&self) -> impl Iterator<Item = &ExitStream> {
        self.streams.values()
    }
}

impl Relay {
    pub(super) fn exit_circuit(&mut self, circ: CircuitId, now: SimTime) -> &mut ExitCircuit {
        let params = &self.world.params;
        let c = &mut self.circuits[circ];
        c.exit.get_or_insert_with(|| {
            Box::new(ExitCircuit {
                sender: CircuitSender::new(params, now),
                receiver: CircuitReceiver::new(params),
                streams: Vec::new(),
                turn: 0,
                edge_blocked: false,
                packaged: 0,
                acked: 0,
            })
        })
    }

    pub(super) fn find_stream(&self, circ: CircuitId, stream_id: u16) -> Option<ExitStreamId> {
        let c = self.circuits.get(circ)?;
        c.exit.as_ref()?.streams.iter().copied().find(|&st| {
            self.streams
                .get(st)
                .is_some_and(|s| s.stream_id == stream_id)
        })
    }

    pub(super) fn begin(&mut self, io: &mut impl Io<RelayTimer>, circ: CircuitId, cell: Cell) {
        let relay = &self.world.consensus.relays[self.relay];
        let c = &self.circuits[circ];
        if c.next.is_some() || !relay.exit_policy.allows_port(HTTP_PORT) {
            self.refuse_stream(io, circ, cell.stream_id);
            return;
        }
        // Tor's own ConnLimit, not IMUX's share of it: the share (`ConnLimit * tau`, which
        // IMUX's `getMaxConns` divides among channels, see `transport::imux_max_conns`) bounds
        // the connections IMUX opens for its channels, and the rest of ConnLimit is what it
        // leaves for everything else. Capping the exit's streams at the share made an IMUX
        // exit whose channels had filled it refuse its clients' streams.
        if self.open_sockets >= self.conn_limit {
            self.meter.second.conn_limit_refusals += 1;
            self.refuse_stream(io, circ, cell.stream_id);
            return;
        }
        let now = io.now();
        let socket = io.connect(cell.arg as HostId, HTTP_PORT);
        io.set_auto_read(socket, false);
        self.note_socket_opened();
        let stream = ExitStream::new(&self.world.params, circ, cell.stream_id, Some(socket));
        let st = self.streams.insert(stream);
        self.exit_circuit(circ, now).streams.push(st);
    }

    /// Answers a BEGIN (or BEGIN_DIR) this relay will not serve with an END.
    fn refuse_stream(&mut self, io: &mut impl Io<RelayTimer>, circ: CircuitId, stream_id: u16) {
        let hop = self.circuits[circ].hop;
        let mut end = Cell::relay(0, RelayCommand::End, hop, stream_id);
        self.work.originate();
        end.arg = 1;
        self.queue_towards(io, circ, false, end);
    }

    /// A BEGIN_DIR: a stream to this relay's directory cache, which every relay of the model
    /// runs (in 2019 nearly all relays were caches). It connects at once; the response is
    /// packaged like a server's but from the cache, without the read bucket, since tor does
    /// not rate-limit its linked directory connections (the cells still leave through the
    /// rate-limited channel).
    pub(super) fn begin_dir(&mut self, io: &mut impl Io<RelayTimer>, circ: CircuitId, cell: Cell) {
        let now = io.now();
        let c = &self.circuits[circ];
        let hop = c.hop;
        if c.next.is_some() {
            self.refuse_stream(io, circ, cell.stream_id);
            return;
        }
        let stream = ExitStream::new(&self.world.params, circ, cell.stream_id, None);
        let st = self.streams.insert(stream);
        self.exit_circuit(circ, now).streams.push(st);
        let connected = Cell::relay(0, RelayCommand::Connected, hop, cell.stream_id);
        self.work.originate();
        self.queue_towards(io, circ, false, connected);
    }

    pub(super) fn server_connected(&mut self, io: &mut impl Io<RelayTimer>, st: ExitStreamId) {
        let s = self.streams.get_mut(st).unwrap();
        s.connected = true;
        let (circ, stream_id, end, request) = (s.circ, s.stream_id, s.end, s.request.take());
        let hop = self.circuits[circ].hop;
        let connected = Cell::relay(0, RelayCommand::Connected, hop, stream_id);
        self.work.originate();
        self.queue_towards(io, circ, false, connected);
        // Only a server stream waits for its connection (a directory stream is connected
        // from the start).
        if let (Some(bytes), StreamEnd::Server(socket)) = (request, end) {
            let upload = self.streams.get(st).unwrap().upload.active;
            self.send_request(io, socket, bytes, upload);
        }
    }

    /// Writes the client's request to the server: a download's GET, or an upload's header.
    pub(super) fn send_request(
        &mut self,
        io: &mut impl Io<RelayTimer>,
        socket: SocketId,
        bytes: u32,
        upload: bool,
    ) {
        let message = if upload {
            Wire::Upload { bytes }
        } else {
            Wire::Request { bytes }
        };
        if io.write_message(socket, REQUEST_BYTES, message) {
            self.work.syscalls += 1;
            io.flush(socket);
        }
    }

    /// A DATA cell from the client: a stream's request (the first), or a piece of an upload.
    pub(super) fn exit_data(&mut self, io: &mut impl Io<RelayTimer>, circ: CircuitId, cell: Cell) {
        let now = io.now();
        let hop = self.circuits[circ].hop;
        if self
            .exit_circuit(circ, now)
            .receiver
            .on_data()
            .unwrap_or(false)
        {
            let sendme = Cell::relay(0, RelayCommand::Sendme, hop, 0);
            self.work.originate();
            self.queue_towards(io, circ, false, sendme);
        }
        let Some(st) = self.find_stream(circ, cell.stream_id) else {
            return;
        };
        let s = self.streams.get_mut(st).unwrap();
        // Counted now, acknowledged once its bytes are on their way (`drain_upload`). A cell
        // beyond the window is the client's protocol violation, which the model's clients
        // never commit.
        let _ = s.receiver.on_received();
        let socket = match &mut s.end {
            StreamEnd::Directory { left } => {
                // The request names the response; a cache reads nothing more from the stream.
                if !s.requested {
                    s.requested = true;
                    *left = cell.arg;
                    s.server_done = true;
                }
                self.package(io, circ);
                return;
            }
            StreamEnd::Server(socket) => *socket,
        };
        if s.requested {
            s.upload.waiting += u64::from(cell.length);
        } else {
            s.requested = true;
            s.upload.active = cell.upload;
            if s.connected {
                self.send_request(io, socket, cell.arg, cell.upload);
            } else {
                s.request = Some(cell.arg);
            }
        }
        self.drain_upload(io, st);
    }

    /// Upload bytes that arrived and wait here to be written to their servers, over every
    /// stream (bounded by the client's windows only while the exit holds back SENDMEs).
    pub fn upload_bytes_waiting(&self) -> u64 {
        self.streams.values().map(|s| s.upload.waiting).sum()
    }

    /// The server connection can take more: write the upload's waiting bytes.
    pub(super) fn upload_writable(&mut self, io: &mut impl Io<RelayTimer>, st: ExitStreamId) {
        self.drain_upload(io, st);
    }

    /// Writes what waits of an upload to the server socket, a cell's payload at a time, as far
    /// as the socket takes it, then gives the client the stream SENDMEs (or XON/XOFF) that the
    /// bytes left waiting allow.
    fn drain_upload(&mut self, io: &mut impl Io<RelayTimer>, st: ExitStreamId) {
        let s = self.streams.get_mut(st).unwrap();
        // Only a server stream has an upload to write (a directory request is one cell).
        if let (StreamEnd::Server(socket), true) = (s.end, s.connected && s.upload.waiting > 0) {
            let mut wrote = false;
            while s.upload.waiting > 0 {
                let n = s.upload.waiting.min(u64::from(RELAY_DATA_BYTES));
                if !io.write_message(socket, n, Wire::UploadBody) {
                    break;
                }
                s.upload.waiting -= n;
                wrote = true;
            }
            if wrote {
                self.work.syscalls += 1;
                io.flush(socket);
            }
        }
        let (circ, stream_id, waiting) = (s.circ, s.stream_id, s.upload.waiting);
        let mut sendmes = 0;
        if waiting <= EDGE_BUFFER_FULL_BYTES {
            while s.receiver.take_sendme() {
                sendmes += 1;
            }
        }
        let mut flow = None;
        if self.world.params.flow_control == FlowControl::Vegas {
            let xoff_bytes =
                u64::from(self.world.params.xoff_threshold_cells) * u64::from(RELAY_DATA_BYTES);
            if !s.upload.xoff && waiting > xoff_bytes {
                s.upload.xoff = true;
                flow = Some(RelayCommand::Xoff);
            } else if s.upload.xoff && waiting == 0 {
                s.upload.xoff = false;
                flow = Some(RelayCommand::Xon);
            }
        }
        let hop = self.circuits[circ].hop;
        let replies = std::iter::repeat_n(RelayCommand::Sendme, sendmes).chain(flow);
        for command in replies {
            // A full circuit queue destroys the circuit, and with it the stream.
            if !self.circuits.contains(circ) {
                return;
            }
            self.work.originate();
            self.queue_towards(io, circ, false, Cell::relay(0, command, hop, stream_id));
        }
    }

    pub(super) fn exit_sendme(
        &mut self,
        io: &mut impl Io<RelayTimer>,
        circ: CircuitId,
        cell: Cell,
    ) {
        let now = io.now();
        if cell.stream_id == 0 {
            let blocked = {
                let c = &self.circuits[circ];
                (c.prev.conn).is_some_and(|k| self.table.conns.get(k).is_some_and(|c| c.blocked))
            };
            let increment = match self.world.params.flow_control {
                FlowControl::Sendme => self.world.params.circuit_sendme_increment,
                FlowControl::Vegas => self.world.params.cc_sendme_inc.max(1),
            } as u64;
            let exit = self.exit_circuit(circ, now);
            if !exit.sender.on_sendme(now, blocked) {
                self.destroy_circuit(io, circ, None);
                return;
            }
            exit.acked += increment;
        } else if let Some(st) = self.find_stream(circ, cell.stream_id) {
            let increment = self.world.params.stream_sendme_increment as u64;
            let s = self.streams.get_mut(st).unwrap();
            if s.sender.on_sendme() {
                s.acked += increment;
            }
        }
        self.package(io, circ);
    }

    /// Turns server data into DATA cells for as long as the circuit's and streams' windows,
    /// the data waiting and the read bucket allow, serving the circuit's streams in turn.
    /// Each call that packages anything reads its streams' sockets once (one system call, as
    /// tor reads a socket's waiting bytes at once).
    pub(super) fn package(&mut self, io: &mut impl Io<RelayTimer>, circ: CircuitId) {
        let before = self.work.cells;
        self.package_cells(io, circ);
        if self.work.cells > before {
            self.work.syscalls += 1;
        }
    }

    /// Packages one cell at a time, from the next stream in turn that has data, until the
    /// circuit's window or queue, the streams or the read bucket stop it.
    fn package_cells(&mut self, io: &mut impl Io<RelayTimer>, circ: CircuitId) {
        let now = io.now();
        loop {
            let Some(c) = self.circuits.get_mut(circ) else {
                return;
            };
            let Some(exit) = c.exit.as_mut() else {
                return;
            };
            if exit.streams.is_empty() || !exit.sender.can_send() {
                return;
            }
            if c.prev.queue.len() >= self.world.params.circuit_queue_high_cells as usize {
                exit.edge_blocked = true;
                return;
            }
            let mut progressed = false;
            let n_streams = exit.streams.len();
            for k in 0..n_streams {
                let exit = self.exit_of(circ);
                if !exit.sender.can_send() {
                    break;
                }
                let i = (exit.turn + k) % exit.streams.len();
                match self.package_from(io, circ, i, now) {
                    Packaged::Nothing => continue,
                    Packaged::Cell | Packaged::Ended => {
                        progressed = true;
                        break;
                    }
                    Packaged::OutOfTokens => return,
                }
            }
            if !progressed {
                return;
            }
        }
    }

    /// The exit state of a circuit known to be an exit circuit.
    fn exit_of(&mut self, circ: CircuitId) -> &mut ExitCircuit {
        self.circuits[circ].exit.as_mut().unwrap()
    }

    /// Packages one DATA cell from the circuit's `i`th stream, if it may send and has data;
    /// ends the stream if its server is done and nothing is left.
    fn package_from(
        &mut self,
        io: &mut impl Io<RelayTimer>,
        circ: CircuitId,
        i: usize,
        now: SimTime,
    ) -> Packaged {
        let c = &mut self.circuits[circ];
        let hop = c.hop;
        let st = c.exit.as_ref().unwrap().streams[i];
        let s = self.streams.get_mut(st).unwrap();
        if !s.connected || !s.sender.can_send() {
            return Packaged::Nothing;
        }
        let waiting = match s.end {
            StreamEnd::Directory { left } => u64::from(left),
            StreamEnd::Server(socket) => io.readable(socket),
        };
        if waiting == 0 {
            if s.server_done {
                self.end_stream(io, st, false);
                return Packaged::Ended;
            }
            return Packaged::Nothing;
        }
        let allowance = match s.end {
            StreamEnd::Directory { .. } => u64::MAX,
            StreamEnd::Server(_) => self.buckets.read_allowance(now, false),
        };
        if allowance == 0 {
            if !self.package_waiting.contains(&circ) {
                self.package_waiting.push(circ);
            }
            self.arm_refill(io);
            return Packaged::OutOfTokens;
        }
        let want = waiting.min(RELAY_DATA_BYTES as u64).min(allowance);
        let stream_id = s.stream_id;
        s.sender.on_sent();
        s.packaged += 1;
        if s.sender.windowed() {
            let in_flight = s.packaged.saturating_sub(s.acked);
            self.meter.stream_in_flight(in_flight);
        }
        let n = match &mut s.end {
            StreamEnd::Directory { left } => {
                *left -= want as u32;
                want
            }
            StreamEnd::Server(socket) => {
                let n = io.read(*socket, want);
                self.buckets.note_read(n, false);
                n
            }
        };
        let mut data = Cell::relay(0, RelayCommand::Data, hop, stream_id);
        self.work.originate();
        data.length = n as u16;
        let exit = self.exit_of(circ);
        exit.sender.on_sent(now);
        exit.packaged += 1;
        let in_flight = exit.packaged.saturating_sub(exit.acked);
        exit.turn = (i + 1) % exit.streams.len();
        self.meter.circuit_in_flight(in_flight);
        self.queue_towards(io, circ, false, data);
        Packaged::Cell
    }

    pub(super) fn end_stream(
        &mut self,
        io: &mut impl Io<RelayTimer>,
        st: ExitStreamId,
        failed: bool,
    ) {
        let Some(s) = self.streams.remove(st) else {
            return;
        };
        if let StreamEnd::Server(socket) = s.end {
            self.open_sockets -= 1;
            if io.is_open(socket) {
                io.close(socket);
            }
        }
        let Some(c) = self.circuits.get_mut(s.circ) else {
            return;
        };
        let hop = c.hop;
        if let Some(exit) = c.exit.as_mut() {
            exit.streams.retain(|&x| x != st);
        }
        let mut end = Cell::relay(0, RelayCommand::End, hop, s.stream_id);
        self.work.originate();
        end.arg = failed as u32;
        self.queue_towards(io, s.circ, false, end);
    }
}

/// What [`Relay::package_from`] did with a stream.
enum Packaged {
    /// It may not send, or has nothing waiting.
    Nothing,
    /// It sent a DATA cell.
    Cell,
    /// Its server was done and everything sent: the stream ended.
    Ended,
    /// The read bucket is empty: packaging waits for its refill.
    OutOfTokens,
}

#[cfg(test)]
mod tests {
    use onionlab_engine::slab::Key;
    use onionlab_torcore::TorParams;

    use super::*;

    fn circ(slot: u32) -> CircuitId {
        CircuitId::from_parts(slot, 0)
    }

    fn server_stream(circ: CircuitId, stream_id: u16, socket: SocketId) -> ExitStream {
        ExitStream::new(&TorParams::default(), circ, stream_id, Some(socket))
    }

    #[test]
    fn a_server_stream_is_found_by_its_socket_until_it_ends() {
        let mut edge = ExitStreams::new();
        let s = SocketId {
            slot: 4,
            generation: 1,
        };
        let st = edge.insert(server_stream(circ(9), 1, s));
        assert_eq!(edge.of_socket(s), Some(st));
        assert_eq!(
            edge.get(st).map(|x| (x.circ, x.stream_id)),
            Some((circ(9), 1))
        );
        let later = SocketId {
            slot: 4,
            generation: 2,
        };
        assert_eq!(
            edge.of_socket(later),
            None,
            "a later socket in the same slot"
        );
        assert_eq!(edge.len(), 1);
        assert!(edge.remove(st).is_some());
        assert!(edge.remove(st).is_none(), "ending twice");
        assert_eq!(edge.of_socket(s), None);
        assert!(edge.get(st).is_none());
        // The next stream takes the slot, found by its own socket only.
        let next = edge.insert(server_stream(circ(10), 2, later));
        assert_eq!(next.slot(), st.slot());
        assert!(
            edge.get(st).is_none(),
            "the ended stream's id finds nothing"
        );
        assert_eq!(edge.of_socket(later), Some(next));
        assert_eq!(edge.of_socket(s), None);
    }

    #[test]
    fn a_directory_stream_has_no_socket_to_be_found_by() {
        let mut edge = ExitStreams::new();
        let dir = edge.insert(ExitStream::new(&TorParams::default(), circ(3), 1, None));
        assert!(edge
            .get(dir)
            .is_some_and(|s| s.connected && s.end == StreamEnd::Directory { left: 0 }));
        let s = SocketId {
            slot: 0,
            generation: 0,
        };
        let server = edge.insert(server_stream(circ(3), 2, s));
        assert_eq!(edge.of_socket(s), Some(server));
        edge.get_mut(server).unwrap().upload.waiting = 700;
        edge.get_mut(dir).unwrap().upload.waiting = 50;
        assert_eq!(edge.values().map(|s| s.upload.waiting).sum::<u64>(), 750);
        assert!(edge.remove(dir).is_some());
        assert_eq!(
            edge.of_socket(s),
            Some(server),
            "ending the directory stream"
        );
    }
}
