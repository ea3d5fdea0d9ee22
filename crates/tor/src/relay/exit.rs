//! The exit edge: streams from exit circuits to file servers, packaging their responses into
//! DATA cells within the circuit's and stream's windows and the read bucket, and SENDMEs.

use super::*;

impl Relay {
    pub(super) fn exit_circuit(&mut self, circ: u32, now: SimTime) -> &mut ExitCircuit {
        let params = &self.world.params;
        let c = self.circuits[circ as usize].as_mut().unwrap();
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

    pub(super) fn find_stream(&self, circ: u32, stream_id: u16) -> Option<u32> {
        let c = self.circuits[circ as usize].as_ref()?;
        c.exit.as_ref()?.streams.iter().copied().find(|&st| {
            self.streams[st as usize]
                .as_ref()
                .is_some_and(|s| s.stream_id == stream_id)
        })
    }

    pub(super) fn begin(&mut self, io: &mut impl Io<RelayTimer>, circ: u32, cell: Cell) {
        let relay = &self.world.consensus.relays[self.relay];
        let c = self.circuits[circ as usize].as_ref().unwrap();
        if c.next.is_some() || !relay.exit_policy.allows_port(HTTP_PORT) {
            let mut end = Cell::relay(0, RelayCommand::End, c.hop, cell.stream_id);
            end.arg = 1;
            self.queue_towards(io, circ, false, end);
            return;
        }
        // Tor's own ConnLimit, not IMUX's share of it: the share bounds the connections
        // IMUX opens for its channels, and the rest of ConnLimit is what it leaves for
        // everything else (REFERENCE.md, getMaxConns). Capping the exit's streams at the
        // share made an IMUX exit whose channels had filled it refuse its clients' streams.
        if self.open_sockets >= self.conn_limit {
            self.now_counters.conn_limit_refusals += 1;
            let mut end = Cell::relay(0, RelayCommand::End, c.hop, cell.stream_id);
            end.arg = 1;
            self.queue_towards(io, circ, false, end);
            return;
        }
        let now = io.now();
        let socket = io.connect(cell.arg as HostId, HTTP_PORT);
        io.set_auto_read(socket, false);
        self.note_socket_opened();
        let params = &self.world.params;
        let stream = ExitStream {
            circ,
            stream_id: cell.stream_id,
            socket,
            sender: StreamSender::new(params),
            receiver: StreamReceiver::new(params),
            connected: false,
            request: None,
            server_done: false,
            packaged: 0,
            acked: 0,
        };
        let st = match self.free_streams.pop() {
            Some(i) => {
                self.streams[i as usize] = Some(stream);
                i
            }
            None => {
                self.streams.push(Some(stream));
                (self.streams.len() - 1) as u32
            }
        };
        Self::map_socket(&mut self.stream_by_socket, socket, st);
        self.exit_circuit(circ, now).streams.push(st);
    }

    pub(super) fn server_connected(&mut self, io: &mut impl Io<RelayTimer>, st: u32) {
        let s = self.streams[st as usize].as_mut().unwrap();
        s.connected = true;
        let (circ, stream_id, socket, request) = (s.circ, s.stream_id, s.socket, s.request.take());
        let hop = self.circuits[circ as usize].as_ref().unwrap().hop;
        let connected = Cell::relay(0, RelayCommand::Connected, hop, stream_id);
        self.queue_towards(io, circ, false, connected);
        if let Some(bytes) = request {
            self.send_request(io, socket, bytes);
        }
    }

    pub(super) fn send_request(
        &mut self,
        io: &mut impl Io<RelayTimer>,
        socket: SocketId,
        bytes: u32,
    ) {
        if io.write_message(socket, REQUEST_BYTES, Wire::Request { bytes }) {
            io.flush(socket);
        }
    }

    /// A DATA cell from the client: the request of a download.
    pub(super) fn exit_data(&mut self, io: &mut impl Io<RelayTimer>, circ: u32, cell: Cell) {
        let now = io.now();
        let hop = self.circuits[circ as usize].as_ref().unwrap().hop;
        if self
            .exit_circuit(circ, now)
            .receiver
            .on_data()
            .unwrap_or(false)
        {
            let sendme = Cell::relay(0, RelayCommand::Sendme, hop, 0);
            self.queue_towards(io, circ, false, sendme);
        }
        let Some(st) = self.find_stream(circ, cell.stream_id) else {
            return;
        };
        let s = self.streams[st as usize].as_mut().unwrap();
        if s.receiver.on_data().unwrap_or(false) {
            let sendme = Cell::relay(0, RelayCommand::Sendme, hop, cell.stream_id);
            self.queue_towards(io, circ, false, sendme);
        }
        let s = self.streams[st as usize].as_mut().unwrap();
        if s.connected {
            let socket = s.socket;
            self.send_request(io, socket, cell.arg);
        } else {
            s.request = Some(cell.arg);
        }
    }

    pub(super) fn exit_sendme(&mut self, io: &mut impl Io<RelayTimer>, circ: u32, cell: Cell) {
        let now = io.now();
        if cell.stream_id == 0 {
            let blocked = {
                let c = self.circuits[circ as usize].as_ref().unwrap();
                c.prev.conn != NONE && self.conns[c.prev.conn as usize].blocked
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
            let s = self.streams[st as usize].as_mut().unwrap();
            if s.sender.on_sendme() {
                s.acked += increment;
            }
        }
        self.package(io, circ);
    }

    /// Turns server data into DATA cells for as long as the circuit's and streams' windows,
    /// the data waiting and the read bucket allow, serving the circuit's streams in turn.
    pub(super) fn package(&mut self, io: &mut impl Io<RelayTimer>, circ: u32) {
        let now = io.now();
        loop {
            let Some(c) = self.circuits[circ as usize].as_mut() else {
                return;
            };
            let hop = c.hop;
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
                let exit = self.circuits[circ as usize]
                    .as_mut()
                    .unwrap()
                    .exit
                    .as_mut()
                    .unwrap();
                if !exit.sender.can_send() {
                    break;
                }
                let i = (exit.turn + k) % exit.streams.len();
                let st = exit.streams[i];
                let s = self.streams[st as usize].as_mut().unwrap();
                if !s.connected || !s.sender.can_send() {
                    continue;
                }
                let waiting = io.readable(s.socket);
                if waiting == 0 {
                    if s.server_done {
                        self.end_stream(io, st, false);
                        progressed = true;
                        break;
                    }
                    continue;
                }
                let allowance = self.buckets.read_allowance(now, false);
                if allowance == 0 {
                    if !self.package_waiting.contains(&circ) {
                        self.package_waiting.push(circ);
                    }
                    self.arm_refill(io);
                    return;
                }
                let want = waiting.min(RELAY_DATA_BYTES as u64).min(allowance);
                let socket = s.socket;
                let stream_id = s.stream_id;
                s.sender.on_sent();
                s.packaged += 1;
                if s.sender.windowed() {
                    let in_flight = s.packaged.saturating_sub(s.acked);
                    self.max_stream_in_flight = self
                        .max_stream_in_flight
                        .max(in_flight.min(u32::MAX as u64) as u32);
                }
                let n = io.read(socket, want);
                self.buckets.note_read(n, false);
                let mut data = Cell::relay(0, RelayCommand::Data, hop, stream_id);
                data.length = n as u16;
                let exit = self.circuits[circ as usize]
                    .as_mut()
                    .unwrap()
                    .exit
                    .as_mut()
                    .unwrap();
                exit.sender.on_sent(now);
                exit.packaged += 1;
                let in_flight = exit.packaged.saturating_sub(exit.acked);
                self.max_circuit_in_flight = self
                    .max_circuit_in_flight
                    .max(in_flight.min(u32::MAX as u64) as u32);
                exit.turn = (i + 1) % exit.streams.len();
                self.queue_towards(io, circ, false, data);
                progressed = true;
                break;
            }
            if !progressed {
                return;
            }
        }
    }

    pub(super) fn end_stream(&mut self, io: &mut impl Io<RelayTimer>, st: u32, failed: bool) {
        let Some(s) = self.streams[st as usize].take() else {
            return;
        };
        self.free_streams.push(st);
        self.stream_by_socket[s.socket.slot as usize] = NONE;
        self.open_sockets -= 1;
        if io.is_open(s.socket) {
            io.close(s.socket);
        }
        let Some(c) = self.circuits[s.circ as usize].as_mut() else {
            return;
        };
        let hop = c.hop;
        if let Some(exit) = c.exit.as_mut() {
            exit.streams.retain(|&x| x != st);
        }
        let mut end = Cell::relay(0, RelayCommand::End, hop, s.stream_id);
        end.arg = failed as u32;
        self.queue_towards(io, s.circ, false, end);
    }
}
