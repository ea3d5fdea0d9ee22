//! Uploads: the client as the sending end of flow control, packaging DATA cells under the
//! circuit's and streams' windows (or Vegas congestion control and XON/XOFF), and the
//! SENDMEs that open them.

use super::*;

impl Client {
    /// Packages upload DATA cells on a circuit for as long as its window (or congestion
    /// window), its streams' windows (or XOFF), the bytes left and the channel allow, serving
    /// its streams in turn. The request goes first: `arg` says the size, `upload` that a body
    /// follows.
    pub(super) fn package_uploads(&mut self, io: &mut impl Io<ClientTimer>, circ: OriginCircId) {
        let now = io.now();
        let high = self.world.params.circuit_queue_high_cells as usize;
        loop {
            let Some(c) = self.circuits.get_mut(circ) else {
                return;
            };
            if c.state != CircState::Open {
                return;
            }
            let ch = c.chan as usize;
            if self.channels[ch].out.len() >= high {
                // Tor stops reading from the edge while the circuit's cells pile up.
                self.channels[ch].uploads_blocked = true;
                return;
            }
            let params = &self.world.params;
            let sender = c
                .sender
                .get_or_insert_with(|| CircuitSender::new(params, now));
            if !sender.can_send() {
                return;
            }
            let n = c.downloads.len();
            let mut next = None;
            for k in 0..n {
                let i = (c.turn + k) % n;
                let d = &self.downloads[c.downloads[i].0];
                if d.state == DlState::Sending && d.sender.can_send() {
                    next = Some(i);
                    break;
                }
            }
            let Some(i) = next else {
                return;
            };
            c.turn = (i + 1) % n;
            let dl = c.downloads[i].0;
            let d = &mut self.downloads[dl];
            let mut cell = Cell::relay(0, RelayCommand::Data, 3, d.stream_id);
            if d.request_sent {
                let n = (d.size - d.sent).min(u64::from(RELAY_DATA_BYTES));
                cell.length = n as u16;
                d.sent += n;
            } else {
                cell.length = REQUEST_BYTES as u16;
                cell.arg = d.size.min(u32::MAX as u64) as u32;
                cell.upload = true;
                d.request_sent = true;
                d.request = Some(now);
                d.first_byte = Some(now);
            }
            if d.sent >= d.size {
                d.state = DlState::Receiving;
            }
            d.sender.on_sent();
            d.packaged += 1;
            if d.sender.windowed() {
                let in_flight = d.packaged.saturating_sub(d.acked);
                self.max_stream_in_flight = self
                    .max_stream_in_flight
                    .max(in_flight.min(u32::MAX as u64) as u32);
            }
            let c = &mut self.circuits[circ];
            c.sender.as_mut().unwrap().on_sent(now);
            c.packaged += 1;
            let in_flight = c.packaged.saturating_sub(c.acked);
            self.max_circuit_in_flight = self
                .max_circuit_in_flight
                .max(in_flight.min(u32::MAX as u64) as u32);
            self.send_on_circuit(io, circ, cell);
        }
    }

    /// A SENDME from the exit for upload cells: circuit level (stream 0) or for one stream.
    /// Download clients get circuit SENDMEs for their requests too, and need none of them.
    pub(super) fn sendme(
        &mut self,
        io: &mut impl Io<ClientTimer>,
        circ: OriginCircId,
        stream_id: u16,
    ) {
        let now = io.now();
        let params = &self.world.params;
        if stream_id == 0 {
            let c = &mut self.circuits[circ];
            let Some(sender) = c.sender.as_mut() else {
                return;
            };
            let blocked = !self.channels[c.chan as usize].out.is_empty();
            if !sender.on_sendme(now, blocked) {
                self.sendme_violations += 1;
                return;
            }
            c.acked += u64::from(match params.flow_control {
                FlowControl::Sendme => params.circuit_sendme_increment,
                FlowControl::Vegas => params.cc_sendme_inc.max(1),
            });
        } else {
            let increment = u64::from(params.stream_sendme_increment);
            let Some(dl) = self.download_on(circ, stream_id) else {
                return;
            };
            let d = &mut self.downloads[dl];
            if !d.upload {
                return;
            }
            if d.sender.on_sendme() {
                d.acked += increment;
            } else {
                self.sendme_violations += 1;
            }
        }
        self.package_uploads(io, circ);
    }

    /// The channel's queue drained: the uploads it held back package again.
    pub(super) fn resume_uploads(&mut self, io: &mut impl Io<ClientTimer>, ch: usize) {
        let high = self.world.params.circuit_queue_high_cells as usize;
        let chan = &mut self.channels[ch];
        if !chan.uploads_blocked || chan.out.len() >= high {
            return;
        }
        chan.uploads_blocked = false;
        // By slot, since packaging may change the table.
        for slot in 0..self.circuits.slots() {
            let Some(circ) = self.circuits.id_at(slot) else {
                continue;
            };
            let c = &self.circuits[circ];
            if c.chan as usize == ch && c.sender.is_some() {
                self.package_uploads(io, circ);
            }
        }
    }
}
