//! Streams: attaching each to a circuit (an open one it may share under its isolation key
//! and `MaxCircuitDirtiness`, one being built, or a new one), BEGIN and its retries on
//! another circuit, and the response's DATA cells with their SENDMEs. A stream no circuit can
//! take stays pending and is tried again once a second, as in tor.

use super::*;

impl Client {
    /// Puts a waiting download on a circuit: an open one young enough, one being built, or a
    /// new one. If none can be launched the download stays pending (no circuit) and is tried
    /// again within a second; it never fails here.
    pub(super) fn attach(&mut self, io: &mut impl Io<ClientTimer>, dl: DownloadId) {
        let now = io.now();
        let dirtiness = self.dirtiness();
        let d = &self.downloads[dl];
        let (key, dir_user) = (d.isolation, d.dir.map(DirPart::user));
        let channels = &self.channels;
        // A directory request goes on its user's one-hop circuit to the directory guard; a
        // workload's stream on a three-hop circuit of its isolation.
        let fits = |c: &Circuit| match dir_user {
            Some(user) => c.hops == 1 && channels[c.chan as usize].user == user,
            None => c.hops == 3 && c.isolation.is_none_or(|k| k == key),
        };
        let usable = |c: &Circuit| {
            c.first_used
                .is_none_or(|t| now < t.saturating_add(dirtiness))
                && fits(c)
        };
        let open = self
            .circuits
            .iter()
            .find(|(_, c)| c.state == CircState::Open && usable(c))
            .map(|(id, _)| id);
        let building = || {
            self.circuits
                .iter()
                .find(|(_, c)| matches!(c.state, CircState::Building { .. }) && fits(c))
                .map(|(id, _)| id)
        };
        let circ = match open.or_else(building) {
            Some(c) => c,
            None => match self.launch(io, dir_user) {
                Ok(c) => c,
                Err(why) => {
                    self.downloads[dl].no_path = why == NoCircuit::NoPath;
                    self.arm_retry(io);
                    return;
                }
            },
        };
        let c = &mut self.circuits[circ];
        c.downloads.push((dl, 0));
        c.isolation.get_or_insert(key);
        let d = &mut self.downloads[dl];
        d.circ = Some(circ);
        d.no_path = false;
        if c.state == CircState::Open {
            self.begin(io, circ, dl);
        }
    }

    /// Tries again to attach every download that is waiting without a circuit.
    pub(super) fn attach_pending(&mut self, io: &mut impl Io<ClientTimer>) {
        // By slot, since attaching may change the table.
        for slot in 0..self.downloads.slots() {
            let Some(dl) = self.downloads.id_at(slot) else {
                continue;
            };
            if self.downloads[dl].circ.is_none() {
                self.attach(io, dl);
            }
        }
    }

    pub(super) fn arm_retry(&mut self, io: &mut impl Io<ClientTimer>) {
        if !self.retry_armed {
            self.retry_armed = true;
            io.arm_in(PENDING_RETRY, ClientTimer::RetryPending);
        }
    }

    pub(super) fn begin(
        &mut self,
        io: &mut impl Io<ClientTimer>,
        circ: OriginCircId,
        dl: DownloadId,
    ) {
        let now = io.now();
        let dirtiness = self.dirtiness();
        let c = &mut self.circuits[circ];
        let was_clean = c.first_used.is_none();
        c.first_used.get_or_insert(now);
        if was_clean {
            // Tor closes a circuit dirty for longer than MaxCircuitDirtiness once its last
            // stream is gone (circuit_expire_old_circuits_clientside); without this PCTCP
            // relays would keep a connection for every circuit a client ever used.
            let expire = ClientTimer::Expire { circuit: circ };
            let at = now.saturating_add(dirtiness);
            io.arm_at(at, expire);
        }
        c.next_stream = c.next_stream.wrapping_add(1).max(1);
        c.streams_opened += 1;
        let stream_id = c.next_stream;
        if let Some(entry) = c.downloads.iter_mut().find(|(x, _)| *x == dl) {
            entry.1 = stream_id;
        }
        let d = &mut self.downloads[dl];
        d.stream_id = stream_id;
        d.state = DlState::Connecting;
        let (command, hop) = match d.dir {
            Some(_) => (RelayCommand::BeginDir, 1),
            None => (RelayCommand::Begin, 3),
        };
        let mut begin = Cell::relay(0, command, hop, stream_id);
        begin.arg = d.server;
        let wait = if d.retries < 2 {
            BEGIN_TIMEOUT_EARLY
        } else {
            BEGIN_TIMEOUT_LATE
        };
        let timer = ClientTimer::BeginTimeout {
            download: dl,
            retries: d.retries,
        };
        io.arm_in(wait, timer);
        self.send_on_circuit(io, circ, begin);
        if was_clean && hop == 3 {
            self.keep_preemptive(io);
        }
    }

    /// A stream's BEGIN went unanswered for tor's retry timeout
    /// (`connection_ap_expire_beginning`): end it on its circuit, make the circuit take no new
    /// streams (those on it may still finish), and attach the stream anew, to another circuit.
    pub(super) fn retry_stream(&mut self, io: &mut impl Io<ClientTimer>, dl: DownloadId) {
        let now = io.now();
        let dirtiness = self.dirtiness();
        let d = &mut self.downloads[dl];
        let stream_id = d.stream_id;
        d.retries = (d.retries + 1).min(MAX_BEGIN_RETRIES);
        d.state = DlState::Waiting;
        let Some(circ) = d.circ.take() else {
            return;
        };
        let hops = self.circuits[circ].hops;
        let end = Cell::relay(0, RelayCommand::End, hops, stream_id);
        self.send_on_circuit(io, circ, end);
        let c = &mut self.circuits[circ];
        c.downloads.retain(|&(x, _)| x != dl);
        // Dirty for the whole MaxCircuitDirtiness already, as tor's
        // `mark_circuit_unusable_for_new_conns` makes it.
        c.first_used = Some(now.saturating_sub(dirtiness));
        if c.downloads.is_empty() {
            self.close_circuit(io, circ, CircuitOutcome::Built, true);
        }
        self.attach(io, dl);
    }

    pub(super) fn download_on(&self, circ: OriginCircId, stream_id: u16) -> Option<DownloadId> {
        let c = self.circuits.get(circ)?;
        // A download begun on this circuit is no longer waiting: it waits again only when
        // the circuit closes and it moves to another, where it starts over at 0.
        c.downloads
            .iter()
            .find(|&&(_, id)| id == stream_id && id != 0)
            .map(|&(dl, _)| dl)
    }

    pub(super) fn connected(
        &mut self,
        io: &mut impl Io<ClientTimer>,
        circ: OriginCircId,
        stream_id: u16,
    ) {
        let Some(dl) = self.download_on(circ, stream_id) else {
            return;
        };
        let d = &mut self.downloads[dl];
        if d.upload {
            d.state = DlState::Sending;
            self.package_uploads(io, circ);
            return;
        }
        d.state = DlState::Receiving;
        d.request = Some(io.now());
        let hops = self.circuits[circ].hops;
        let mut request = Cell::relay(0, RelayCommand::Data, hops, stream_id);
        request.length = REQUEST_BYTES as u16;
        request.arg = d.size.min(u32::MAX as u64) as u32;
        self.send_on_circuit(io, circ, request);
    }

    pub(super) fn data(&mut self, io: &mut impl Io<ClientTimer>, circ: OriginCircId, cell: Cell) {
        let now = io.now();
        let c = &mut self.circuits[circ];
        let hops = c.hops;
        match c.receiver.on_data() {
            Ok(true) => {
                let sendme = Cell::relay(0, RelayCommand::Sendme, hops, 0);
                self.send_on_circuit(io, circ, sendme);
            }
            Ok(false) => {}
            Err(_) => self.window_violations += 1,
        }
        let Some(dl) = self.download_on(circ, cell.stream_id) else {
            return;
        };
        let d = &mut self.downloads[dl];
        d.received += cell.length as u64;
        if !d.upload {
            d.first_byte.get_or_insert(now);
            d.throughput.on_received(d.received, now);
        }
        match d.receiver.on_data() {
            Ok(true) => {
                let sendme = Cell::relay(0, RelayCommand::Sendme, hops, cell.stream_id);
                self.send_on_circuit(io, circ, sendme);
            }
            Ok(false) => {}
            Err(_) => self.window_violations += 1,
        }
        let d = &self.downloads[dl];
        if d.received >= d.expected() {
            self.finish(io, dl, DownloadOutcome::Ok);
        }
    }
}
