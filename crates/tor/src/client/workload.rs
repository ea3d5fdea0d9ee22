//! The workload driver: what the application asks for (downloads, uploads, waits), turned
//! into streams, and each transfer's end logged and reported back to the workload.

use super::*;

impl Client {
    /// Polls the workload while it is due. Downloads that finish while it runs only mark it
    /// due again, so the workload never re-enters itself: one loop, whatever happens at one
    /// instant.
    pub(super) fn run_workload(&mut self, io: &mut impl Io<ClientTimer>) {
        if self.in_workload {
            return;
        }
        self.in_workload = true;
        while std::mem::take(&mut self.workload_due) {
            self.poll_workload(io);
        }
        self.in_workload = false;
    }

    pub(super) fn poll_workload(&mut self, io: &mut impl Io<ClientTimer>) {
        loop {
            let now = io.now();
            match self.schedule.poll(now, io.rng()) {
                Action::Start {
                    size_bytes,
                    timeout,
                    isolation,
                } => self.start_download(io, size_bytes, timeout, isolation),
                Action::WaitUntil(at) => {
                    if self.wake_at != Some(at) {
                        self.wake_at = Some(at);
                        io.arm_at(at, ClientTimer::Wake(at));
                    }
                    return;
                }
                Action::Idle => return,
            }
        }
    }

    pub(super) fn start_download(
        &mut self,
        io: &mut impl Io<ClientTimer>,
        size: u64,
        timeout: SimDuration,
        isolation: u32,
    ) {
        let server = self.servers[io.rng().random_range(0..self.servers.len())];
        let dl = self.new_download(io, size, server, timeout, isolation, None);
        self.attach(io, dl);
    }

    /// Adds a download (or directory request) waiting for a circuit, with its timeout armed.
    pub(super) fn new_download(
        &mut self,
        io: &mut impl Io<ClientTimer>,
        size: u64,
        server: HostId,
        timeout: SimDuration,
        isolation: u32,
        dir: Option<DirPart>,
    ) -> DownloadId {
        let d = Download {
            size,
            server,
            start: io.now(),
            circ: None,
            stream_id: 0,
            receiver: StreamReceiver::new(&self.world.params),
            received: 0,
            request: None,
            first_byte: None,
            throughput: ThroughputProbe::default(),
            state: DlState::Waiting,
            no_path: false,
            sender: StreamSender::new(&self.world.params),
            request_sent: false,
            sent: 0,
            packaged: 0,
            acked: 0,
            isolation,
            retries: 0,
            upload: self.uploads && dir.is_none(),
            dir,
        };
        let idx = self.downloads.insert(d);
        io.arm_in(timeout, ClientTimer::DownloadTimeout { download: idx });
        idx
    }

    pub(super) fn finish(
        &mut self,
        io: &mut impl Io<ClientTimer>,
        dl: DownloadId,
        outcome: DownloadOutcome,
    ) {
        let now = io.now();
        let Some(d) = self.downloads.remove(dl) else {
            return;
        };
        let mut path = None;
        let mut build = None;
        let mut circuit = None;
        let dirtiness = self.dirtiness();
        if let Some(circ) = d.circ {
            if let Some(c) = self.circuits.get_mut(circ) {
                c.downloads.retain(|&(x, _)| x != dl);
                path = Some(c.path);
                build = c.build;
                circuit = Some(c.id);
                let expired = c.downloads.is_empty()
                    && c.first_used
                        .is_some_and(|t| now >= t.saturating_add(dirtiness));
                if outcome != DownloadOutcome::Ok && d.state != DlState::Waiting {
                    // Tell the exit to stop sending.
                    let end = Cell::relay(0, RelayCommand::End, c.hops, d.stream_id);
                    self.send_on_circuit(io, circ, end);
                }
                if expired {
                    self.close_circuit(io, circ, CircuitOutcome::Built, true);
                }
            }
        }
        if let Some(part) = d.dir {
            self.directory_done(io, part, d.received, outcome == DownloadOutcome::Ok);
            return;
        }
        self.finished.push(DownloadLog {
            size: d.size,
            server: d.server,
            start: d.start,
            circuit_build: build,
            request: d.request,
            first_byte: d.first_byte,
            throughput: d.throughput,
            last_byte: (outcome == DownloadOutcome::Ok).then_some(now),
            outcome,
            path,
            circuit,
            upload: d.upload,
        });
        self.schedule.on_finished(now);
        self.workload_due = true;
        self.run_workload(io);
    }
}
